/* test_job_spec_ctr_errors — every refusal of a recommendation (CTR) model's
 * job spec, each with its whole message (expect_exact), each leaving nothing
 * to free: data.format and its keys per format, data.train/test file lists,
 * data.features (tfrecord) and each feature's rules, model.loss against
 * data.format, model.input_shape against the dense features, the layer types
 * of each loss, the embedding and wide layers' table/features/combiner/
 * hash_ids, and the structure rules of psc_model_check (one join, embeddings
 * before it, the bottom MLP, interaction dims, the logit, wide tables of dim
 * 1) and the tables' names against the model's variables; data.follow's keys
 * (online training) and the followed directory's split. The accepted
 * examples, widths and ids: test_job_spec_ctr.c.
 */
#include "job_spec_fixture.h"

/* ---- refusals, each with its exact message ---- */

static void test_data_errors(void **state)
{
    (void)state;
    char buf[16384], d[12000], arr[11000], big[600];
    expect_exact(ctr(buf, sizeof buf, "\"format\": \"csv\", \"train\": \"x\"", TOP, ""),
                 "data.format: unknown value \"csv\" (expected idx|criteo|libsvm|tfrecord)");
    expect_exact(ctr(buf, sizeof buf, CRITEO ", \"trian\": 1", TOP, ""),
                 "data.trian: unknown key (expected one of: format, train, test, shard, bad_record_limit, "
                 "train_examples, test_examples, shuffle, features, follow, test_files)");
    /* idx takes none of the record formats' keys */
    expect_exact(spec3(buf, sizeof buf, MLP, ADAM, "\"data\": {\"shard\": \"file\"}"),
                 "data.shard: applies to data.format criteo, libsvm and tfrecord, not idx");
    expect_exact(spec3(buf, sizeof buf, MLP, ADAM, "\"data\": {\"format\": \"idx\", \"bad_record_limit\": 3}"),
                 "data.bad_record_limit: applies to data.format criteo, libsvm and tfrecord, not idx");
    expect_exact(spec3(buf, sizeof buf, MLP, ADAM, "\"data\": {\"features\": []}"),
                 "data.features: applies to data.format criteo, libsvm and tfrecord, not idx");
    /* data.train and data.test */
    expect_exact(ctr(buf, sizeof buf, "\"format\": \"criteo\"", TOP, ""), "data.train: missing (required)");
    expect_exact(ctr(buf, sizeof buf, "\"format\": \"criteo\", \"train\": 5", TOP, ""),
                 "data.train: expected a file name or glob pattern, or an array of 1 to 256 of them, got 5");
    expect_exact(ctr(buf, sizeof buf, "\"format\": \"criteo\", \"train\": []", TOP, ""),
                 "data.train: expected a file name or glob pattern, or an array of 1 to 256 of them, got []");
    sfmt(d, sizeof d, "\"format\": \"criteo\", \"train\": %s", repeat(arr, sizeof arr, "\"f\"", 257));
    expect_exact(ctr(buf, sizeof buf, d, TOP, ""),
                 "data.train: expected a file name or glob pattern, or an array of 1 to 256 of them, got "
                 "[\"f\",\"f\",\"f\",\"f\",\"f\",\"f\",\"f\",\"f\",\"f\",...");
    sfmt(d, sizeof d, "\"format\": \"criteo\", \"train\": %s", repeat(arr, sizeof arr, "\"f\"", 256));
    psc_job_spec_t s;
    parse_ok(ctr(buf, sizeof buf, d, TOP, ""), &s);
    assert_int_equal(s.num_train_files, 256);
    psc_job_spec_deinit(&s);
    expect_exact(ctr(buf, sizeof buf, "\"format\": \"criteo\", \"train\": \"\"", TOP, ""),
                 "data.train: expected a file name or glob pattern of 1 to 511 characters, got \"\"");
    expect_exact(ctr(buf, sizeof buf, "\"format\": \"criteo\", \"train\": [\"a\", 1]", TOP, ""),
                 "data.train[1]: expected a file name or glob pattern of 1 to 511 characters, got 1");
    memset(big, 'x', 512);
    big[512] = '\0';
    sfmt(d, sizeof d, CRITEO ", \"test\": [\"a\", \"%s\"]", big);
    expect_exact(ctr(buf, sizeof buf, d, TOP, ""),
                 "data.test[1]: expected a file name or glob pattern of 1 to 511 characters, got "
                 "\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...");
    big[511] = '\0';
    sfmt(d, sizeof d, CRITEO ", \"test\": [\"a\", \"%s\"]", big);
    parse_ok(ctr(buf, sizeof buf, d, TOP, ""), &s);
    assert_int_equal((int)strlen(s.test_files[1]), 511);
    psc_job_spec_deinit(&s);
    expect_exact(ctr(buf, sizeof buf, CRITEO ", \"shard\": \"worker\"", TOP, ""),
                 "data.shard: unknown value \"worker\" (expected auto|file|record)");
    parse_ok(ctr(buf, sizeof buf, CRITEO ", \"shard\": \"file\"", TOP, ""), &s);
    assert_int_equal(s.shard, PSC_SHARD_FILE);
    psc_job_spec_deinit(&s);
    expect_exact(ctr(buf, sizeof buf, CRITEO ", \"bad_record_limit\": -1", TOP, ""),
                 "data.bad_record_limit: expected a non-negative integer, got -1");
    expect_exact(ctr(buf, sizeof buf, CRITEO ", \"bad_record_limit\": 1.5", TOP, ""),
                 "data.bad_record_limit: expected a non-negative integer, got 1.5");
    expect_exact(ctr(buf, sizeof buf, CRITEO ", \"features\": []", TOP, ""),
                 "data.features: only data.format tfrecord declares its features (criteo's are fixed: see docs/recommendation.md)");
    expect_exact(ctr(buf, sizeof buf, LIBSVM ", \"features\": []", CONCAT ", " LOGIT, ""),
                 "data.features: only data.format tfrecord declares its features (libsvm's are fixed: see docs/recommendation.md)");
    /* the keys of every format */
    expect_exact(ctr(buf, sizeof buf, CRITEO ", \"train_examples\": -1", TOP, ""),
                 "data.train_examples: expected a non-negative integer, got -1");
    expect_exact(ctr(buf, sizeof buf, CRITEO ", \"shuffle\": 1", TOP, ""),
                 "data.shuffle: expected true or false, got 1");
}

/* A tfrecord spec with the given data.features and one logit layer. */
static const char *tf(char *buf, size_t n, const char *features)
{
    char d[12288];
    sfmt(d, sizeof d, "\"format\": \"tfrecord\", \"train\": \"x\", \"features\": %s", features);
    return ctr(buf, n, d, LOGIT, "");
}
#define LBL "{\"name\": \"y\", \"role\": \"label\", \"kind\": \"int64\"}"

static void test_feature_errors(void **state)
{
    (void)state;
    char buf[16384], f[12288], item[128];
    expect_exact(ctr(buf, sizeof buf, "\"format\": \"tfrecord\", \"train\": \"x\"", LOGIT, ""),
                 "data.features: missing (required)");
    expect_exact(tf(buf, sizeof buf, "{}"), "data.features: expected an array of 1 to 128 features, got {}");
    expect_exact(tf(buf, sizeof buf, "[]"), "data.features: expected an array of 1 to 128 features, got []");
    expect_exact(tf(buf, sizeof buf, repeat(f, sizeof f, "{}", 129)),
                 "data.features: expected an array of 1 to 128 features, got [{},{},{},{},{},{},{},{},{},{},{},{},...");
    expect_exact(tf(buf, sizeof buf, "[5]"), "data.features[0]: expected an object, got 5");
    expect_exact(tf(buf, sizeof buf, "[{\"name\": \"y\", \"size\": 1}]"),
                 "data.features[0].size: unknown key (expected one of: name, role, kind, length, transform)");
    expect_exact(tf(buf, sizeof buf, "[{\"role\": \"label\"}]"), "data.features[0].name: missing (required)");
    expect_exact(tf(buf, sizeof buf, "[{\"name\": 3}]"), "data.features[0].name: expected a string, got 3");
    expect_exact(tf(buf, sizeof buf, "[{\"name\": \"\"}]"),
                 "data.features[0].name: expected 1 to 63 characters (no control characters), got \"\"");
    expect_exact(tf(buf, sizeof buf, "[{\"name\": \"a\\nb\"}]"),
                 "data.features[0].name: expected 1 to 63 characters (no control characters), got \"a\\nb\"");
    expect_exact(
        tf(buf, sizeof buf, "[{\"name\": \"0123456789012345678901234567890123456789012345678901234567890123\"}]"),
        "data.features[0].name: expected 1 to 63 characters (no control characters), got "
        "\"012345678901234567890123456789012345...");
    expect_exact(tf(buf, sizeof buf, "[" LBL ", " LBL "]"),
                 "data.features[1].name: \"y\" is already the name of data.features[0]");
    expect_exact(tf(buf, sizeof buf, "[{\"name\": \"y\"}]"), "data.features[0].role: missing (required)");
    expect_exact(tf(buf, sizeof buf, "[{\"name\": \"y\", \"role\": \"sparse\"}]"),
                 "data.features[0].role: unknown value \"sparse\" (expected label|dense|categorical)");
    expect_exact(tf(buf, sizeof buf, "[{\"name\": \"y\", \"role\": \"label\"}]"),
                 "data.features[0].kind: missing (required)");
    expect_exact(tf(buf, sizeof buf, "[{\"name\": \"y\", \"role\": \"label\", \"kind\": \"double\"}]"),
                 "data.features[0].kind: unknown value \"double\" (expected int64|float|bytes)");
    expect_exact(tf(buf, sizeof buf, "[{\"name\": \"y\", \"role\": \"label\", \"kind\": \"int64\", \"length\": -1}]"),
                 "data.features[0].length: expected a non-negative integer, got -1");
    expect_exact(tf(buf, sizeof buf,
                    "[" LBL ", {\"name\": \"d\", \"role\": \"dense\", \"kind\": \"float\", "
                    "\"length\": 65537}]"),
                 "data.features[1].length: 65537 is too large (max 65536)");
    expect_exact(tf(buf, sizeof buf,
                    "[" LBL ", {\"name\": \"d\", \"role\": \"dense\", \"kind\": \"float\", "
                    "\"transform\": \"log\"}]"),
                 "data.features[1].transform: unknown value \"log\" (expected none|log1p)");
    expect_exact(tf(buf, sizeof buf,
                    "[" LBL ", {\"name\": \"c\", \"role\": \"categorical\", \"kind\": \"int64\", "
                    "\"transform\": \"none\"}]"),
                 "data.features[1].transform: only a dense feature takes a transform; \"c\" is categorical");
    expect_exact(tf(buf, sizeof buf,
                    "[{\"name\": \"y\", \"role\": \"label\", \"kind\": \"float\", \"transform\": "
                    "\"log1p\"}]"),
                 "data.features[0].transform: only a dense feature takes a transform; \"y\" is label");
    expect_exact(tf(buf, sizeof buf, "[{\"name\": \"y\", \"role\": \"label\", \"kind\": \"float\", \"length\": 2}]"),
                 "data.features[0].length: a label has length 1, got 2");
    expect_exact(tf(buf, sizeof buf, "[{\"name\": \"y\", \"role\": \"label\", \"kind\": \"float\", \"length\": 0}]"),
                 "data.features[0].length: a label has length 1, got 0");
    expect_exact(tf(buf, sizeof buf, "[{\"name\": \"y\", \"role\": \"label\", \"kind\": \"bytes\"}]"),
                 "data.features[0].kind: a label is int64 or float, got bytes");
    expect_exact(tf(buf, sizeof buf, "[" LBL ", {\"name\": \"d\", \"role\": \"dense\", \"kind\": \"bytes\"}]"),
                 "data.features[1].kind: a dense feature is float or int64, got bytes");
    expect_exact(tf(buf, sizeof buf,
                    "[" LBL ", {\"name\": \"d\", \"role\": \"dense\", \"kind\": \"float\", "
                    "\"length\": 0}]"),
                 "data.features[1].length: a dense feature has a fixed length >= 1 (0, variable, is for categorical "
                 "features only)");
    expect_exact(tf(buf, sizeof buf, "[" LBL ", {\"name\": \"c\", \"role\": \"categorical\", \"kind\": \"float\"}]"),
                 "data.features[1].kind: a categorical feature is int64 or bytes, got float");
    expect_exact(tf(buf, sizeof buf,
                    "[" LBL ", {\"name\": \"c\", \"role\": \"categorical\", \"kind\": \"int64\"}, "
                    "{\"name\": \"z\", \"role\": \"label\", \"kind\": \"float\"}]"),
                 "data.features[2].role: a second label (data.features[0] \"y\" is one); exactly one feature has "
                 "role label");
    expect_exact(tf(buf, sizeof buf, "[{\"name\": \"c\", \"role\": \"categorical\", \"kind\": \"int64\"}]"),
                 "data.features: no feature has role label; exactly one must");
    /* 128 features are allowed: a label and 127 dense floats of length 2 */
    size_t l = strlen(sfmt(f, sizeof f, "[" LBL));
    for (int i = 1; i < 128; i++) {
        sfmt(item, sizeof item, ", {\"name\": \"d%d\", \"role\": \"dense\", \"kind\": \"float\", \"length\": 2}", i);
        l += strlen(sfmt(f + l, sizeof f - l, "%s", item));
    }
    sfmt(f + l, sizeof f - l, "]");
    psc_job_spec_t s;
    parse_ok(tf(buf, sizeof buf, f), &s);
    assert_int_equal(s.num_features, 128);
    assert_int_equal(s.num_dense, 254);
    assert_int_equal(s.features[127].dense_offset, 252);
    assert_int_equal(s.input_shape[0], 254);
    psc_job_spec_deinit(&s);
}

static void test_loss_errors(void **state)
{
    (void)state;
    char buf[8192], l[1024];
    expect_exact("{\"model\": {\"loss\": \"sigmoid_cross_entropy\", \"input_shape\": [784], \"layers\": [" LOGIT
                 "]}, \"optimizer\": {\"name\": \"sgd\"}}",
                 "model.loss: sigmoid_cross_entropy needs data.format criteo, libsvm or tfrecord (idx data are images "
                 "with class labels: use sparse_softmax_cross_entropy)");
    expect_exact("{\"model\": {\"loss\": \"sigmoid_cross_entropy\", \"layers\": [" LOGIT "]}, \"optimizer\": "
                 "{\"name\": \"sgd\"}, \"data\": {\"format\": \"idx\"}}",
                 "model.loss: sigmoid_cross_entropy needs data.format criteo, libsvm or tfrecord (idx data are images "
                 "with class labels: use sparse_softmax_cross_entropy)");
    expect_exact(spec3(buf, sizeof buf, MLP, ADAM, "\"data\": {" CRITEO "}"),
                 "data.format: \"criteo\" data train a click-through model: set model.loss to sigmoid_cross_entropy");
    expect_exact("{\"model\": {\"loss\": \"mse\", \"layers\": [" LOGIT "]}, \"optimizer\": {\"name\": \"sgd\"}}",
                 "model.input_shape: missing (required)");
    expect_exact("{\"model\": {\"loss\": \"mse\", \"input_shape\": [3], \"layers\": [" LOGIT "]}, \"optimizer\": "
                 "{\"name\": \"sgd\"}}",
                 "model.loss: unknown value \"mse\" (expected sparse_softmax_cross_entropy|sigmoid_cross_entropy)");
    /* model.input_shape of a sigmoid model: absent or [num_dense] */
    static const char *const shapes[][2] = {{"[12]", "[12]"}, {"[13, 1, 1]", "[13,1,1]"}, {"[14]", "[14]"}};
    for (size_t i = 0; i < PSC_ARRAY_LEN(shapes); i++) {
        char want[256];
        sfmt(buf, sizeof buf,
             "{\"model\": {\"loss\": \"sigmoid_cross_entropy\", \"input_shape\": %s, \"layers\": "
             "[" TOP "]}, \"optimizer\": {\"name\": \"sgd\"}, \"data\": {" CRITEO "}}",
             shapes[i][0]);
        sfmt(want, sizeof want,
             "model.input_shape: a sigmoid_cross_entropy model's input is its 13 dense feature "
             "values: expected [13] (or leave it out), got %s",
             shapes[i][1]);
        expect_exact(buf, want);
    }
    expect_exact("{\"model\": {\"loss\": \"sigmoid_cross_entropy\", \"input_shape\": [1], \"layers\": [" CONCAT
                 ", " LOGIT "]}, \"optimizer\": {\"name\": \"sgd\"}, \"data\": {" LIBSVM "}}",
                 "model.input_shape: the data have no dense features: leave input_shape out, got [1]");
    expect_exact("{\"model\": {\"loss\": \"sigmoid_cross_entropy\", \"input_shape\": [0], \"layers\": [" TOP "]}, "
                 "\"optimizer\": {\"name\": \"sgd\"}, \"data\": {" CRITEO "}}",
                 "model.input_shape[0]: expected a positive integer, got 0");
    /* the recommendation layers belong to sigmoid models, the image layers to softmax ones */
    static const char *const ctr_layers[][2] = {
        {"{\"type\": \"embedding\", \"table\": \"t\", \"features\": \"C1\"}", "embedding"},
        {"{\"type\": \"wide\", \"table\": \"t\", \"features\": \"C1\"}", "wide"},
        {"{\"type\": \"interaction\"}", "interaction"},
        {"{\"type\": \"concat\", \"name\": \"j\"}", "j"},
    };
    for (size_t i = 0; i < PSC_ARRAY_LEN(ctr_layers); i++) {
        char want[512];
        sfmt(l, sizeof l, "%s, " MLP, ctr_layers[i][0]);
        sfmt(want, sizeof want,
             "model.layers[0] (%s): %s is a layer of recommendation models: it needs "
             "model.loss sigmoid_cross_entropy (with data.format criteo, libsvm or tfrecord)",
             ctr_layers[i][1], strstr(ctr_layers[i][0], "concat") ? "concat" : ctr_layers[i][1]);
        expect_exact(spec3(buf, sizeof buf, l, ADAM, ""), want);
    }
    static const char *const image_layers[][2] = {
        {"{\"type\": \"flatten\"}", "flatten"},
        {"{\"type\": \"dropout\", \"rate\": 0.5}", "dropout"},
        {"{\"type\": \"conv2d\", \"filters\": 2, \"kernel_size\": 1}", "conv2d"},
        {"{\"type\": \"max_pool2d\"}", "max_pool2d"},
    };
    for (size_t i = 0; i < PSC_ARRAY_LEN(image_layers); i++) {
        char want[512];
        sfmt(l, sizeof l, "%s, " TOP, image_layers[i][0]);
        sfmt(want, sizeof want,
             "model.layers[0] (%s): %s is not a layer of a sigmoid_cross_entropy model (use "
             "dense, embedding, wide, interaction, concat)",
             image_layers[i][1], image_layers[i][1]);
        expect_exact(ctr(buf, sizeof buf, CRITEO, l, ""), want);
    }
}

/* criteo: BOTTOM, <the layer>, INTER, LOGIT */
static const char *dlrm_with(char *buf, size_t n, const char *layer, const char *tables)
{
    char l[4096];
    sfmt(l, sizeof l, BOTTOM ", %s, " INTER ", " LOGIT, layer);
    return ctr(buf, n, CRITEO, l, tables);
}

static void test_lookup_errors(void **state)
{
    (void)state;
    char buf[16384], f[8192], l[2048];
    expect_exact(ctr(buf, sizeof buf, CRITEO, "{\"type\": \"interaction\", \"units\": 3}, " LOGIT, TABLES),
                 "model.layers[0].units: unknown key (expected one of: type, name)");
    expect_exact(dlrm_with(buf, sizeof buf, "{\"type\": \"embedding\", \"units\": 3}", TABLES),
                 "model.layers[2].units: unknown key (expected one of: type, name, table, features, combiner, "
                 "hash_ids)");
    expect_exact(dlrm_with(buf, sizeof buf, "{\"type\": \"embedding\", \"features\": \"C1\"}", TABLES),
                 "model.layers[2].table: missing (required)");
    expect_exact(dlrm_with(buf, sizeof buf, "{\"type\": \"embedding\", \"table\": 5, \"features\": \"C1\"}", TABLES),
                 "model.layers[2].table: expected a string, got 5");
    expect_exact(dlrm_with(buf, sizeof buf, emb(l, sizeof l, "embedding", "x", "\"C1\""), TABLES),
                 "model.layers[2].table: no table \"x\" among \"tables\"");
    expect_exact(dlrm_with(buf, sizeof buf, emb(l, sizeof l, "embedding", "emb", "\"C1\""), ""),
                 "model.layers[2].table: no table \"emb\": the spec declares no \"tables\"");
    expect_exact(dlrm_with(buf, sizeof buf, "{\"type\": \"embedding\", \"table\": \"emb\"}", TABLES),
                 "model.layers[2].features: missing (required)");
    expect_exact(dlrm_with(buf, sizeof buf, emb(l, sizeof l, "embedding", "emb", "[]"), TABLES),
                 "model.layers[2].features: expected a feature name or an array of 1 to 128 of them, got []");
    expect_exact(dlrm_with(buf, sizeof buf, emb(l, sizeof l, "embedding", "emb", "{}"), TABLES),
                 "model.layers[2].features: expected a feature name or an array of 1 to 128 of them, got {}");
    char f129[2048];
    sfmt(l, sizeof l, "{\"type\": \"embedding\", \"table\": \"emb\", \"features\": %s}",
         repeat(f129, sizeof f129, "\"C1\"", 129));
    sfmt(f, sizeof f, "%s", l);
    expect_exact(dlrm_with(buf, sizeof buf, f, TABLES),
                 "model.layers[2].features: expected a feature name or an array of 1 to 128 of them, got "
                 "[\"C1\",\"C1\",\"C1\",\"C1\",\"C1\",\"C1\",\"C1\",\"...");
    expect_exact(dlrm_with(buf, sizeof buf, emb(l, sizeof l, "embedding", "emb", "[\"C1\", 1]"), TABLES),
                 "model.layers[2].features[1]: expected a feature name, got 1");
    expect_exact(dlrm_with(buf, sizeof buf, emb(l, sizeof l, "embedding", "emb", "[\"C1\", \"C27\"]"), TABLES),
                 "model.layers[2].features[1]: no feature \"C27\" in criteo data (label, I1..I13, C1..C26)");
    expect_exact(dlrm_with(buf, sizeof buf, emb(l, sizeof l, "embedding", "emb", "\"I1\""), TABLES),
                 "model.layers[2].features: \"I1\" is a dense feature; embedding layers look up categorical features");
    expect_exact(dlrm_with(buf, sizeof buf, emb(l, sizeof l, "embedding", "emb", "[\"C2\", \"C1\", \"C2\"]"), TABLES),
                 "model.layers[2].features[2]: \"C2\" is already in this layer's features");
    sfmt(f, sizeof f, "%s, {\"type\": \"wide\", \"table\": \"lin\", \"features\": [\"label\"]}",
         emb(l, sizeof l, "embedding", "emb", "\"C1\""));
    expect_exact(dlrm_with(buf, sizeof buf, f, TABLES),
                 "model.layers[3].features[0]: \"label\" is a label feature; wide layers look up categorical features");
    expect_exact(dlrm_with(buf, sizeof buf,
                           "{\"type\": \"embedding\", \"table\": \"emb\", \"features\": \"C1\", "
                           "\"combiner\": \"max\"}",
                           TABLES),
                 "model.layers[2].combiner: unknown value \"max\" (expected sum|mean|sqrtn)");
    expect_exact(dlrm_with(buf, sizeof buf,
                           "{\"type\": \"embedding\", \"table\": \"emb\", \"features\": \"C1\", "
                           "\"hash_ids\": 1}",
                           TABLES),
                 "model.layers[2].hash_ids: expected true or false, got 1");
    expect_exact(ctr(buf, sizeof buf, LIBSVM,
                     "{\"type\": \"wide\", \"table\": \"lin\", \"features\": \"x\"}, " CONCAT ", " LOGIT, TABLES),
                 "model.layers[0].features: no feature \"x\" in libsvm data (label, features)");
    expect_exact(
        ctr(buf, sizeof buf, TFREC, "{\"type\": \"wide\", \"table\": \"lin\", \"features\": \"x\"}, " LOGIT, TABLES),
        "model.layers[0].features: no feature \"x\" in data.features");
    /* bytes become ids only by hashing; int64 values may be ids themselves */
    expect_exact(ctr(buf, sizeof buf, TFREC,
                     "{\"type\": \"wide\", \"table\": \"lin\", \"features\": [\"items\", "
                     "\"user id\"], \"hash_ids\": false}, " LOGIT,
                     TABLES),
                 "model.layers[0].hash_ids: feature \"user id\" holds bytes, which become ids only by hashing: set "
                 "hash_ids true");
    psc_job_spec_t s;
    parse_ok(ctr(buf, sizeof buf, TFREC,
                 "{\"type\": \"wide\", \"table\": \"lin\", \"features\": [\"items\", \"ad\"], "
                 "\"hash_ids\": false}, " LOGIT,
                 TABLES),
             &s);
    assert_int_equal(s.layers[0].hash_ids, 0);
    psc_job_spec_deinit(&s);
}

static void test_structure_errors(void **state)
{
    (void)state;
    char buf[16384], l[4096], e1[256], e2[256];
    const char *E = emb(e1, sizeof e1, "embedding", "emb", "[\"C1\", \"C2\"]");
    sfmt(l, sizeof l, BOTTOM ", %s, " INTER ", " CONCAT ", " TOP, E);
    expect_exact(ctr(buf, sizeof buf, CRITEO, l, TABLES),
                 "model.layers[4] (concat): a second join (model.layers[3] (interaction) is the first): a model has "
                 "at most one interaction or concat layer");
    sfmt(l, sizeof l, BOTTOM ", %s, " TOP, E);
    expect_exact(ctr(buf, sizeof buf, CRITEO, l, TABLES),
                 "model.layers[2] (embedding): an embedding layer needs an interaction or concat layer after it (the "
                 "join of its rows with the dense features)");
    sfmt(l, sizeof l, BOTTOM ", %s, " INTER ", %s, " TOP, E, emb(e2, sizeof e2, "embedding", "emb", "\"C3\""));
    expect_exact(ctr(buf, sizeof buf, CRITEO, l, TABLES),
                 "model.layers[4] (embedding_1): an embedding layer must come before the join, model.layers[3] "
                 "(interaction)");
    sfmt(l, sizeof l, "{\"type\": \"dense\", \"units\": 8}, %s, " CONCAT ", " LOGIT,
         emb(e2, sizeof e2, "embedding", "emb", "\"features\""));
    expect_exact(ctr(buf, sizeof buf, LIBSVM, l, TABLES),
                 "model.layers[0] (dense): a dense layer before the join, model.layers[2] (concat), is the bottom MLP "
                 "over the dense features, and the data have none: put it after the join");
    sfmt(l, sizeof l, BOTTOM ", %s, %s, " INTER ", " LOGIT, E, emb(e2, sizeof e2, "embedding", "e8", "\"C3\""));
    expect_exact(ctr(buf, sizeof buf, CRITEO, l,
                     "[{\"name\": \"emb\", \"rows\": 10, \"dim\": 16}, {\"name\": \"e8\", \"rows\": 10, \"dim\": 8}]"),
                 "model.layers[4] (interaction): interaction needs every embedding table of one dim: model.layers[2] "
                 "(embedding) uses table \"emb\" of dim 16, model.layers[3] (embedding_1) table \"e8\" of dim 8");
    sfmt(l, sizeof l, "%s, " INTER ", " LOGIT, E);
    expect_exact(ctr(buf, sizeof buf, CRITEO, l, TABLES),
                 "model.layers[1] (interaction): the data have 13 dense features: interaction needs a bottom MLP "
                 "(dense layers before it) ending in 16 units, the embedding dim");
    sfmt(l, sizeof l, "{\"type\": \"dense\", \"units\": 32}, %s, " INTER ", " LOGIT, E);
    expect_exact(ctr(buf, sizeof buf, CRITEO, l, TABLES),
                 "model.layers[2] (interaction): the bottom MLP ends in 32 units (model.layers[0] (dense)); "
                 "interaction needs the embedding dim, 16");
    expect_exact(ctr(buf, sizeof buf, CRITEO, BOTTOM ", " INTER ", " LOGIT, TABLES),
                 "model.layers[2] (interaction): interaction needs at least one embedding layer before it");
    sfmt(l, sizeof l, "%s, " INTER ", " LOGIT, emb(e2, sizeof e2, "embedding", "emb", "\"features\""));
    expect_exact(ctr(buf, sizeof buf, LIBSVM, l, TABLES),
                 "model.layers[1] (interaction): one embedding slot and no dense features leave no pair to interact");
    expect_exact(ctr(buf, sizeof buf, LIBSVM, CONCAT ", " LOGIT, TABLES),
                 "model.layers[0] (concat): nothing to concatenate: no dense features and no embedding layer before "
                 "it");
    sfmt(l, sizeof l, BOTTOM ", %s, " INTER, E);
    expect_exact(ctr(buf, sizeof buf, CRITEO, l, TABLES),
                 "model.layers[3] (interaction): no dense layer after it: a sigmoid_cross_entropy model ends in a top "
                 "MLP whose last layer (1 unit, linear) gives the logit");
    expect_exact(ctr(buf, sizeof buf, CRITEO, emb(e2, sizeof e2, "wide", "lin", "\"C1\""), TABLES),
                 "model.layers[0] (wide): the model has no dense layer: a sigmoid_cross_entropy model ends in a top "
                 "MLP whose last layer (1 unit, linear) gives the logit");
    expect_exact(ctr(buf, sizeof buf, CRITEO, "{\"type\": \"dense\", \"units\": 2}", ""),
                 "model.layers[0] (dense): the last dense layer gives the logit: it needs units 1 and activation "
                 "linear, got units 2 and activation linear");
    sfmt(l, sizeof l, TOP ", {\"type\": \"dense\", \"units\": 1, \"activation\": \"sigmoid\"}, %s",
         emb(e2, sizeof e2, "wide", "lin", "\"C1\""));
    expect_exact(ctr(buf, sizeof buf, CRITEO, l, TABLES),
                 "model.layers[2] (dense_2): the last dense layer gives the logit: it needs units 1 and activation "
                 "linear, got units 1 and activation sigmoid");
    sfmt(l, sizeof l, TOP ", %s", emb(e2, sizeof e2, "wide", "emb", "\"C1\""));
    expect_exact(ctr(buf, sizeof buf, CRITEO, l, TABLES),
                 "model.layers[2] (wide): a wide layer needs a table of dim 1; table \"emb\" has dim 16");
    /* table names against a sigmoid model's variables (checked after the model) */
    expect_exact(ctr(buf, sizeof buf, CRITEO, TOP, "[{\"name\": \"dense_1\", \"rows\": 10, \"dim\": 1}]"),
                 "tables[0].name: \"dense_1\" clashes with the model variable \"dense_1/kernel\" (a table's name must "
                 "differ from every variable's and neither may be a /-prefix of the other)");
    expect_exact(ctr(buf, sizeof buf, CRITEO, TOP, "[{\"name\": \"t\", \"rows\": 0, \"dim\": 1}]"),
                 "tables[0].rows: expected an integer 1..1099511627776, got 0");
    /* a table may share a name with a layer that has no variables */
    sfmt(l, sizeof l, "{\"type\": \"wide\", \"name\": \"lin\", \"table\": \"lin\", \"features\": \"C1\"}, " TOP);
    psc_job_spec_t s;
    parse_ok(ctr(buf, sizeof buf, CRITEO, l, TABLES), &s);
    psc_job_spec_deinit(&s);
}

/* data.follow (online training): what it takes, its defaults, what it refuses. */
static void test_follow_spec(void **state)
{
    (void)state;
    char buf[4096], d[1024];
    psc_job_spec_t s;
#define FOLLOW "\"format\": \"criteo\", \"train\": \"/logs/train\", \"follow\": {}"
    parse_ok(ctr(buf, sizeof buf, FOLLOW, TOP, ""), &s);
    assert_true(s.follow);
    assert_true(s.follow_idle_secs == 600 && s.follow_poll_secs == 1);
    assert_int_equal(s.test_window, 1);
    assert_int_equal(s.shuffle, 0); /* name order */
    psc_job_spec_deinit(&s);
    parse_ok(ctr(buf, sizeof buf,
                 "\"format\": \"criteo\", \"train\": [\"/logs/part-*.tsv\"], \"shuffle\": false, \"shard\": \"file\", "
                 "\"follow\": {\"idle_secs\": 2.5, \"poll_secs\": 0.05}, \"test\": \"/logs/test\", \"test_files\": 3",
                 LOGIT, ""),
             &s);
    assert_true(s.follow_idle_secs == 2.5 && s.follow_poll_secs == 0.05);
    assert_int_equal(s.test_window, 3);
    psc_job_spec_deinit(&s);
    /* without follow: unchanged */
    parse_ok(ctr(buf, sizeof buf, CRITEO, TOP, ""), &s);
    assert_false(s.follow);
    assert_int_equal(s.shuffle, 1);
    psc_job_spec_deinit(&s);
    /* refusals, each naming its key */
    expect_exact(spec3(buf, sizeof buf, MLP, ADAM, "\"data\": {\"follow\": {}}"),
                 "data.follow: applies to data.format criteo, libsvm and tfrecord, not idx");
    expect_exact(ctr(buf, sizeof buf, "\"format\": \"criteo\", \"train\": \"/l\", \"follow\": 1", TOP, ""),
                 "data.follow: expected an object, got 1");
    expect_exact(ctr(buf, sizeof buf, "\"format\": \"criteo\", \"train\": \"/l\", \"follow\": {\"idle\": 1}", TOP, ""),
                 "data.follow.idle: unknown key (expected one of: idle_secs, poll_secs)");
    expect_exact(
        ctr(buf, sizeof buf, "\"format\": \"criteo\", \"train\": \"/l\", \"follow\": {\"idle_secs\": 0}", TOP, ""),
        "data.follow.idle_secs: expected a number in (0, 3.16224e+07], got 0");
    expect_exact(
        ctr(buf, sizeof buf, "\"format\": \"criteo\", \"train\": \"/l\", \"follow\": {\"poll_secs\": 0.01}", TOP, ""),
        "data.follow.poll_secs: expected a number in [0.05, 60], got 0.01");
    expect_exact(ctr(buf, sizeof buf, FOLLOW ", \"test_files\": 0", TOP, ""),
                 "data.test_files: expected an integer 1..4096, got 0");
    expect_exact(ctr(buf, sizeof buf, CRITEO ", \"test_files\": 2", TOP, ""),
                 "data.test_files: applies with data.follow only (a rolling data.test directory)");
    expect_exact(ctr(buf, sizeof buf, "\"format\": \"criteo\", \"train\": [\"/a\", \"/b\"], \"follow\": {}", TOP, ""),
                 "data.train: with data.follow, one directory or pattern (wildcards in its last component), not 2");
    expect_exact(ctr(buf, sizeof buf, "\"format\": \"criteo\", \"train\": \"/logs/*/x.tsv\", \"follow\": {}", TOP, ""),
                 "data.train: with data.follow, a directory or a pattern whose wildcards are in its last component "
                 "(\"/logs/train/part-*.tsv\"), got \"/logs/*/x.tsv\"");
    expect_exact(ctr(buf, sizeof buf, FOLLOW ", \"shard\": \"record\"", TOP, ""),
                 "data.shard: a followed directory is sharded by file (replica r of W takes files r, r+W, ... in name "
                 "order): \"record\" is not available with data.follow");
    expect_exact(ctr(buf, sizeof buf, FOLLOW ", \"train_examples\": 10", TOP, ""),
                 "data.train_examples: not with data.follow (a followed directory has no end to count from; "
                 "\"steps\" bounds the steps)");
    expect_exact(ctr(buf, sizeof buf, FOLLOW ", \"shuffle\": true", TOP, ""),
                 "data.shuffle: true is not available with data.follow: files are read in name order, so that a "
                 "restarted replica finds its place");
    sfmt(d, sizeof d,
         "{\"model\": {\"loss\": \"sigmoid_cross_entropy\", \"layers\": [%s]}, \"optimizer\": {\"name\": \"sgd\"}, "
         "\"data\": {%s}, \"epochs\": 2}",
         LOGIT, FOLLOW);
    expect_exact(d, "epochs: a followed directory is read once: epochs 1 (or absent) with data.follow, got 2");
    sfmt(d, sizeof d,
         "{\"model\": {\"loss\": \"sigmoid_cross_entropy\", \"layers\": [%s]}, \"optimizer\": {\"name\": \"sgd\"}, "
         "\"data\": {%s}, \"epochs\": 1, \"steps\": 100}",
         LOGIT, FOLLOW);
    parse_ok(d, &s);
    assert_int_equal(s.steps, 100);
    psc_job_spec_deinit(&s);
#undef FOLLOW
}

/* The followed directory and pattern of data.train (psc_job_spec_follow_dir). */
static void test_follow_dir(void **state)
{
    (void)state;
    static const struct {
        const char *train, *dir, *pattern; /* dir NULL: refused */
    } cases[] = {
        {"/logs/train", "/logs/train", NULL},
        {"/logs/train/", "/logs/train", NULL},
        {"/logs/t/p-*.tsv", "/logs/t", "p-*.tsv"},
        {"/x*", "/", "x*"},
        {"x?", ".", "x?"},
        {"rel/dir", "rel/dir", NULL},
        {"/", "/", NULL},
        {"/a*/b", NULL, NULL},
        {"/a/", "/a", NULL},
        {"/a/[ab]*", "/a", "[ab]*"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dir[64];
        const char *pattern = "unset";
        int rc = psc_job_spec_follow_dir(cases[i].train, dir, sizeof dir, &pattern);
        if (!cases[i].dir) {
            assert_int_equal(rc, PSC_EINVAL);
            continue;
        }
        assert_int_equal(rc, 0);
        assert_string_equal(dir, cases[i].dir);
        if (cases[i].pattern)
            assert_string_equal(pattern, cases[i].pattern);
        else
            assert_null(pattern);
    }
    char small[4];
    const char *p;
    assert_int_equal(psc_job_spec_follow_dir("/logs/train", small, sizeof small, &p), PSC_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_data_errors),      cmocka_unit_test(test_feature_errors),
        cmocka_unit_test(test_loss_errors),      cmocka_unit_test(test_lookup_errors),
        cmocka_unit_test(test_structure_errors), cmocka_unit_test(test_follow_spec),
        cmocka_unit_test(test_follow_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
