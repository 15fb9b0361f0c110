/* test_job_spec_ctr — the job spec of recommendation (CTR) models: data.format
 * criteo, libsvm and tfrecord with their files and features, loss
 * sigmoid_cross_entropy, the embedding, wide, interaction and concat layers.
 *
 * Covered: a DLRM-style criteo spec (bottom 13-64-16, an embedding over C1..C26,
 * interaction, top 367-64-1, a wide part with its own ftrl table), a Wide & Deep
 * libsvm spec and a tfrecord spec parse with every resolved field, their exact
 * variables and output shapes and the join widths of the README's formulas
 * (deinit frees the lists: ASan in the fuzz build); the job id (pinned,
 * changed by each model setting, not by the files);
 * psc_job_spec_check_data on a temp dir (a glob with matches, a pattern with
 * none, a missing file, a dangling link, a directory, an unreadable file); the
 * fuzz seeds. Every refusal, with its exact message: test_job_spec_ctr_errors.c.
 * The shared helpers are job_spec_fixture.h.
 */
#include "job_spec_fixture.h"
#include "model_spec.h"

#include <sys/stat.h>

/* The DLRM of the brief: bottom 13-64-16, embedding over C1..C26 (emb, dim 16),
 * interaction, top 64-1, wide over C1..C26 (lin, dim 1, its own ftrl). */
static const char *dlrm(char *buf, size_t n)
{
    return sfmt(buf, n,
                "{\"model\": {\"loss\": \"sigmoid_cross_entropy\", \"layers\": [" BOTTOM ", "
                "{\"type\": \"embedding\", \"table\": \"emb\", \"features\": [%s]}, " INTER ", " TOP ", "
                "{\"type\": \"wide\", \"table\": \"lin\", \"features\": [%s]}]},\n"
                " \"optimizer\": {\"name\": \"adagrad\", \"learning_rate\": 0.05},\n"
                " \"tables\": [{\"name\": \"emb\", \"rows\": 100000000, \"dim\": 16},\n"
                "            {\"name\": \"lin\", \"rows\": 1000000, \"dim\": 1, \"optimizer\": {\"name\": \"ftrl\", "
                "\"l1_regularization_strength\": 0.01}}],\n"
                " \"data\": {\"format\": \"criteo\", \"train\": [\"/d/train-*.tsv.gz\", \"/d/extra.tsv\"], "
                "\"test\": \"/d/test.tsv\"},\n"
                " \"batch_size_per_replica\": 256}",
                c26(), c26());
}

static void expect_vars(const psc_job_spec_t *s, const char *const *names, const int64_t (*shapes)[2], int n)
{
    psc_var_desc_t *vars;
    int nvars;
    char err[512];
    if (psc_model_variables(s, &vars, &nvars, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(nvars, n);
    for (int i = 0; i < n; i++) {
        assert_string_equal(vars[i].name, names[i]);
        int rank = shapes[i][0] < 0 ? 0 : shapes[i][1] < 0 ? 1 : 2;
        assert_int_equal(vars[i].rank, rank);
        for (int d = 0; d < rank; d++) assert_int_equal(vars[i].shape[d], shapes[i][d]);
        assert_int_equal(vars[i].is_step, i == 0);
    }
    free(vars);
}

static void expect_widths(const psc_job_spec_t *s, const int *widths)
{
    int(*shapes)[3] = calloc((size_t)s->num_layers, sizeof *shapes);
    char err[512];
    if (psc_model_shapes(s, shapes, err, sizeof err)) fail_msg("%s", err);
    for (int i = 0; i < s->num_layers; i++) {
        assert_int_equal(shapes[i][0], 1);
        assert_int_equal(shapes[i][1], 1);
        if (shapes[i][2] != widths[i])
            fail_msg("layer %d (%s): width %d, want %d", i, s->layers[i].name, shapes[i][2], widths[i]);
    }
    free(shapes);
}

/* ---- the three examples ---- */

static void test_dlrm_criteo(void **state)
{
    (void)state;
    char buf[8192];
    psc_job_spec_t s;
    parse_ok(dlrm(buf, sizeof buf), &s);
    assert_int_equal(s.loss_kind, PSC_LOSS_SIGMOID_XENT);
    assert_string_equal(s.loss, "sigmoid_cross_entropy");
    assert_int_equal(s.data_format, PSC_DATA_CRITEO);
    assert_int_equal(s.num_train_files, 2);
    assert_string_equal(s.train_files[0], "/d/train-*.tsv.gz");
    assert_string_equal(s.train_files[1], "/d/extra.tsv");
    assert_int_equal(s.num_test_files, 1);
    assert_string_equal(s.test_files[0], "/d/test.tsv");
    assert_string_equal(s.train_path, ""); /* the IDX prefixes are idx's */
    assert_string_equal(s.test_path, "");
    assert_int_equal(s.shard, PSC_SHARD_AUTO);
    assert_int_equal(s.bad_record_limit, 0);
    assert_int_equal(s.shuffle, 1);

    /* criteo's own features */
    assert_int_equal(s.num_features, 40);
    assert_int_equal(s.num_dense, 13);
    assert_int_equal(s.num_cat, 26);
    assert_string_equal(s.features[0].name, "label");
    assert_int_equal(s.features[0].role, PSC_FEATURE_LABEL);
    assert_int_equal(s.features[0].kind, PSC_FEATURE_INT64);
    assert_int_equal(s.features[0].length, 1);
    for (int i = 0; i < 13; i++) {
        const psc_feature_spec_t *F = &s.features[1 + i];
        char name[8];
        sfmt(name, sizeof name, "I%d", i + 1);
        assert_string_equal(F->name, name);
        assert_int_equal(F->role, PSC_FEATURE_DENSE);
        assert_int_equal(F->kind, PSC_FEATURE_INT64);
        assert_int_equal(F->length, 1);
        assert_int_equal(F->transform, PSC_TRANSFORM_LOG1P);
        assert_int_equal(F->dense_offset, i);
        assert_int_equal(F->cat_index, -1);
    }
    for (int i = 0; i < 26; i++) {
        const psc_feature_spec_t *F = &s.features[14 + i];
        char name[8];
        sfmt(name, sizeof name, "C%d", i + 1);
        assert_string_equal(F->name, name);
        assert_int_equal(F->role, PSC_FEATURE_CATEGORICAL);
        assert_int_equal(F->kind, PSC_FEATURE_INT64);
        assert_int_equal(F->length, 1);
        assert_int_equal(F->transform, PSC_TRANSFORM_NONE);
        assert_int_equal(F->cat_index, i);
        assert_int_equal(F->dense_offset, -1);
    }

    /* the input is the dense features */
    assert_int_equal(s.input_rank, 1);
    assert_int_equal(s.input_shape[0], 13);

    static const char *const names[] = {"dense", "dense_1", "embedding", "interaction", "dense_2", "dense_3", "wide"};
    assert_int_equal(s.num_layers, 7);
    for (int i = 0; i < 7; i++) assert_string_equal(s.layers[i].name, names[i]);
    const psc_layer_spec_t *E = &s.layers[2], *W = &s.layers[6];
    assert_int_equal(E->type, PSC_LAYER_EMBEDDING);
    assert_int_equal(E->table, 0);
    assert_int_equal(E->num_features, 26);
    for (int i = 0; i < 26; i++) assert_int_equal(E->features[i], i);
    assert_int_equal(E->combiner, PSC_COMBINER_SUM);
    assert_int_equal(E->hash_ids, 1);
    assert_int_equal(s.layers[3].type, PSC_LAYER_INTERACTION);
    assert_int_equal(W->type, PSC_LAYER_WIDE);
    assert_int_equal(W->table, 1);
    assert_int_equal(W->num_features, 26);
    assert_int_equal(W->features[25], 25);
    assert_int_equal(s.num_tables, 2);
    assert_int_equal(s.tables[0].rows, 100000000);
    assert_int_equal(s.tables[1].own_optimizer, 1);
    assert_int_equal(s.tables[1].optimizer.kind, PSC_OPT_FTRL);
    assert_true(s.tables[1].optimizer.l1 == 0.01f);
    assert_int_equal(s.tables[0].optimizer.kind, PSC_OPT_ADAGRAD);

    /* the tables are not variables; top's input is 16 + 27 * 26 / 2 = 367 */
    static const char *const vnames[] = {"global_step",    "dense/kernel",   "dense/bias",
                                         "dense_1/kernel", "dense_1/bias",   "dense_2/kernel",
                                         "dense_2/bias",   "dense_3/kernel", "dense_3/bias"};
    static const int64_t vshapes[][2] = {{-1, -1},  {13, 64}, {64, -1}, {64, 16}, {16, -1},
                                         {367, 64}, {64, -1}, {64, 1},  {1, -1}};
    expect_vars(&s, vnames, vshapes, 9);
    static const int widths[] = {64, 16, 26 * 16, 367, 64, 1, 1};
    expect_widths(&s, widths);
    char err[256];
    assert_int_equal(psc_model_check(&s, err, sizeof err), 0);
    psc_job_spec_deinit(&s);
    assert_null(s.features);
}

static void test_wide_deep_libsvm(void **state)
{
    (void)state;
    char buf[4096];
    psc_job_spec_t s;
    parse_ok("{\"model\": {\"loss\": \"sigmoid_cross_entropy\", \"layers\": ["
             "{\"type\": \"embedding\", \"name\": \"deep\", \"table\": \"emb\", \"features\": \"features\", "
             "\"combiner\": \"mean\"}, " CONCAT
             ", {\"type\": \"dense\", \"units\": 32, \"activation\": \"relu\"}, " LOGIT
             ", {\"type\": \"wide\", \"table\": \"lin\", \"features\": [\"features\"], \"hash_ids\": false, "
             "\"combiner\": \"sqrtn\"}]},"
             " \"optimizer\": {\"name\": \"adam\"},"
             " \"tables\": [{\"name\": \"emb\", \"rows\": 50000, \"dim\": 8}, {\"name\": \"lin\", \"rows\": 50000, "
             "\"dim\": 1, \"optimizer\": {\"name\": \"ftrl\"}}],"
             " \"data\": {\"format\": \"libsvm\", \"train\": [\"/d/a.svm\", \"/d/b.svm\", \"/d/c*.svm\"], "
             "\"shard\": \"record\", \"bad_record_limit\": 10, \"train_examples\": 1000, \"shuffle\": false}}",
             &s);
    assert_int_equal(s.data_format, PSC_DATA_LIBSVM);
    assert_int_equal(s.num_train_files, 3);
    assert_int_equal(s.num_test_files, 0); /* no data.test: the chief does not evaluate */
    assert_null(s.test_files);
    assert_int_equal(s.shard, PSC_SHARD_RECORD);
    assert_int_equal(s.bad_record_limit, 10);
    assert_int_equal(s.train_examples, 1000);
    assert_int_equal(s.shuffle, 0);
    assert_int_equal(s.num_features, 2);
    assert_string_equal(s.features[0].name, "label");
    assert_int_equal(s.features[0].kind, PSC_FEATURE_FLOAT);
    assert_string_equal(s.features[1].name, "features");
    assert_int_equal(s.features[1].role, PSC_FEATURE_CATEGORICAL);
    assert_int_equal(s.features[1].kind, PSC_FEATURE_INT64);
    assert_int_equal(s.features[1].length, 0);
    assert_int_equal(s.features[1].cat_index, 0);
    assert_int_equal(s.num_dense, 0);
    assert_int_equal(s.num_cat, 1);
    assert_int_equal(s.input_rank, 1);
    assert_int_equal(s.input_shape[0], 0);

    static const char *const names[] = {"deep", "concat", "dense", "dense_1", "wide"};
    for (int i = 0; i < 5; i++) assert_string_equal(s.layers[i].name, names[i]);
    assert_int_equal(s.layers[0].combiner, PSC_COMBINER_MEAN);
    assert_int_equal(s.layers[0].num_features, 1);
    assert_int_equal(s.layers[4].combiner, PSC_COMBINER_SQRTN);
    assert_int_equal(s.layers[4].hash_ids, 0);
    assert_int_equal(s.layers[4].table, 1);
    /* concat without dense features: the pooled rows alone, 1 * 8 */
    static const char *const vnames[] = {"global_step", "dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias"};
    static const int64_t vshapes[][2] = {{-1, -1}, {8, 32}, {32, -1}, {32, 1}, {1, -1}};
    expect_vars(&s, vnames, vshapes, 5);
    static const int widths[] = {8, 8, 32, 1, 1};
    expect_widths(&s, widths);
    psc_job_spec_deinit(&s);

    /* a wide-only model is one dense logit over... nothing: the libsvm data have no dense features */
    expect_exact(ctr(buf, sizeof buf, LIBSVM,
                     "{\"type\": \"wide\", \"table\": \"lin\", \"features\": \"features\"}, " LOGIT, TABLES),
                 "model.layers[1] (dense): no input: the data have no dense features and no interaction or concat "
                 "layer comes before it");
}

static void test_tfrecord(void **state)
{
    (void)state;
    char buf[4096], e1[256];
    psc_job_spec_t s;
    /* bottom 4 -> 4, interaction over 3 slots of dim 4: 4 + 4*3/2 = 10 */
    parse_ok(ctr(buf, sizeof buf, TFREC,
                 "{\"type\": \"dense\", \"units\": 4}, {\"type\": \"embedding\", \"table\": \"t\", \"features\": "
                 "[\"user id\", \"items\", \"ad\"], \"combiner\": \"sqrtn\"}, " INTER ", " LOGIT,
                 "[{\"name\": \"t\", \"rows\": 100, \"dim\": 4}]"),
             &s);
    assert_int_equal(s.data_format, PSC_DATA_TFRECORD);
    assert_int_equal(s.num_features, 6);
    assert_int_equal(s.num_dense, 4);
    assert_int_equal(s.num_cat, 3);
    const psc_feature_spec_t *F = s.features;
    assert_int_equal(F[0].role, PSC_FEATURE_LABEL);
    assert_int_equal(F[0].kind, PSC_FEATURE_FLOAT);
    assert_int_equal(F[1].dense_offset, 0);
    assert_int_equal(F[1].transform, PSC_TRANSFORM_LOG1P);
    assert_int_equal(F[1].kind, PSC_FEATURE_INT64);
    assert_string_equal(F[2].name, "user id");
    assert_int_equal(F[2].cat_index, 0);
    assert_int_equal(F[2].kind, PSC_FEATURE_BYTES);
    assert_int_equal(F[3].dense_offset, 1);
    assert_int_equal(F[3].length, 3);
    assert_int_equal(F[3].transform, PSC_TRANSFORM_NONE);
    assert_int_equal(F[4].cat_index, 1);
    assert_int_equal(F[4].length, 0);
    assert_int_equal(F[5].cat_index, 2);
    assert_int_equal(F[5].length, 2);
    assert_int_equal(s.input_shape[0], 4);
    assert_int_equal(s.layers[1].features[0], 0);
    assert_int_equal(s.layers[1].features[2], 2);
    static const int widths[] = {4, 12, 10, 1};
    expect_widths(&s, widths);
    psc_job_spec_deinit(&s);

    /* the same data through concat without a bottom MLP: 4 dense + 2 slots * 8 + 1 slot * 3 = 23;
     * model.input_shape given as [num_dense] */
    sfmt(buf, sizeof buf,
         "{\"model\": {\"loss\": \"sigmoid_cross_entropy\", \"input_shape\": [4], \"layers\": [%s, %s, " CONCAT
         ", " LOGIT "]}, \"optimizer\": {\"name\": \"sgd\"}, \"data\": {" TFREC "}, \"tables\": [{\"name\": "
         "\"a\", \"rows\": 10, \"dim\": 8}, {\"name\": \"b\", \"rows\": 10, \"dim\": 3}]}",
         emb(e1, sizeof e1, "embedding", "a", "[\"items\", \"user id\"]"),
         "{\"type\": \"embedding\", \"table\": "
         "\"b\", \"features\": \"ad\"}");
    parse_ok(buf, &s);
    assert_int_equal(s.layers[0].features[0], 1);
    assert_int_equal(s.layers[0].features[1], 0);
    assert_string_equal(s.layers[1].name, "embedding_1");
    static const int widths2[] = {16, 3, 23, 1};
    expect_widths(&s, widths2);
    static const char *const vnames[] = {"global_step", "dense/kernel", "dense/bias"};
    static const int64_t vshapes[][2] = {{-1, -1}, {23, 1}, {1, -1}};
    expect_vars(&s, vnames, vshapes, 3);
    psc_job_spec_deinit(&s);
}

/* The join widths of the README: interaction without dense features S(S-1)/2;
 * concat with a bottom MLP b + dims; no join: the top MLP over the dense features. */
static void test_widths(void **state)
{
    (void)state;
    char buf[8192], l[4096], e1[512], e2[512];
    psc_job_spec_t s;
    /* libsvm: S = 1 cannot interact; two embedding layers of dim 16 over the one feature: S = 2 -> 1 */
    sfmt(l, sizeof l, "%s, %s, " INTER ", " LOGIT, emb(e1, sizeof e1, "embedding", "emb", "\"features\""),
         emb(e2, sizeof e2, "embedding", "emb", "[\"features\"]"));
    parse_ok(ctr(buf, sizeof buf, LIBSVM, l, TABLES), &s);
    static const int w1[] = {16, 16, 1, 1};
    expect_widths(&s, w1);
    psc_job_spec_deinit(&s);

    /* criteo concat with the bottom MLP: 16 + 26 * 16 = 432; a wide layer before everything */
    char all[256], e3[512];
    sfmt(all, sizeof all, "[%s]", c26());
    sfmt(l, sizeof l, "%s, " BOTTOM ", %s, " CONCAT ", " TOP, emb(e1, sizeof e1, "wide", "lin", "\"C3\""),
         emb(e3, sizeof e3, "embedding", "emb", all));
    parse_ok(ctr(buf, sizeof buf, CRITEO, l, TABLES), &s);
    static const int w2[] = {1, 64, 16, 26 * 16, 16 + 26 * 16, 64, 1};
    expect_widths(&s, w2);
    psc_job_spec_deinit(&s);

    /* criteo without a join: a plain MLP over the 13 dense features plus a wide part */
    sfmt(l, sizeof l, TOP ", %s", emb(e2, sizeof e2, "wide", "lin", all));
    parse_ok(ctr(buf, sizeof buf, CRITEO, l, TABLES), &s);
    static const int w3[] = {64, 1, 1};
    expect_widths(&s, w3);
    static const char *const vnames[] = {"global_step", "dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias"};
    static const int64_t vshapes[][2] = {{-1, -1}, {13, 64}, {64, -1}, {64, 1}, {1, -1}};
    expect_vars(&s, vnames, vshapes, 5);
    psc_job_spec_deinit(&s);

    /* use_bias false: no bias variable */
    sfmt(l, sizeof l, "{\"type\": \"dense\", \"units\": 1, \"use_bias\": false}");
    parse_ok(ctr(buf, sizeof buf, CRITEO, l, ""), &s);
    static const char *const vn2[] = {"global_step", "dense/kernel"};
    static const int64_t vs2[][2] = {{-1, -1}, {13, 1}};
    expect_vars(&s, vn2, vs2, 2);
    psc_job_spec_deinit(&s);
}

/* ---- the job id ---- */

static void test_job_id(void **state)
{
    (void)state;
    char buf[8192], text[8192];
    psc_job_spec_t a, b;
    parse_ok(dlrm(buf, sizeof buf), &a);
    /* pinned: the canonical text of a recommendation model must not drift (nor
     * the id an older psc gave it, under which its checkpoints are) */
    assert_string_equal(a.job_id, "1f354655d58b71d9");
    assert_string_equal(a.legacy_job_id, "0f988c55d45c3a71");
    /* the same model: spelled-out defaults, input_shape [13], other files, shard and bad-record limit */
    const char *at = strstr(buf, "\"loss\"");
    sfmt(text, sizeof text, "%.*s\"input_shape\": [13], %s", (int)(at - buf), buf, at);
    parse_ok(text, &b);
    assert_string_equal(a.job_id, b.job_id);
    psc_job_spec_deinit(&b);
    at = strstr(buf, "\"data\"");
    sfmt(text, sizeof text,
         "%.*s\"data\": {\"format\": \"criteo\", \"train\": \"/e/*\", \"shard\": \"file\", "
         "\"bad_record_limit\": 9}, \"batch_size_per_replica\": 256}",
         (int)(at - buf), buf);
    parse_ok(text, &b);
    assert_string_equal(a.job_id, b.job_id);
    psc_job_spec_deinit(&b);
    psc_job_spec_deinit(&a);

    /* every model setting changes it */
    static const char *const base =
        "{\"model\": {\"loss\": \"sigmoid_cross_entropy\", \"layers\": [{\"type\": \"dense\", \"units\": 4}, "
        "{\"type\": \"embedding\", \"table\": \"e\", \"features\": [\"u\", \"v\"]}, {\"type\": \"interaction\"}, "
        "{\"type\": \"dense\", \"units\": 1}, {\"type\": \"wide\", \"table\": \"w\", \"features\": \"v\"}]}, "
        "\"optimizer\": {\"name\": \"sgd\"}, \"tables\": [{\"name\": \"e\", \"rows\": 9, \"dim\": 4}, "
        "{\"name\": \"w\", \"rows\": 9, \"dim\": 1}], \"data\": {\"format\": \"tfrecord\", \"train\": \"x\", "
        "\"features\": [{\"name\": \"y\", \"role\": \"label\", \"kind\": \"float\"}, {\"name\": \"d\", \"role\": "
        "\"dense\", \"kind\": \"float\", \"length\": 2, \"transform\": \"log1p\"}, {\"name\": \"u\", \"role\": "
        "\"categorical\", \"kind\": \"int64\"}, {\"name\": \"v\", \"role\": \"categorical\", \"kind\": \"int64\", "
        "\"length\": 0}]}}";
    static const char *const variants[][2] = {
        {"[\"u\", \"v\"]", "[\"v\", \"u\"]"},
        {"\"features\": [\"u\", \"v\"]}", "\"features\": [\"u\", \"v\"], \"combiner\": \"mean\"}"},
        {"\"features\": [\"u\", \"v\"]}", "\"features\": [\"u\", \"v\"], \"hash_ids\": false}"},
        {"\"features\": \"v\"}", "\"features\": \"u\"}"},
        {"\"features\": \"v\"}", "\"features\": \"v\", \"combiner\": \"sqrtn\"}"},
        {"{\"type\": \"interaction\"}", "{\"type\": \"concat\"}"},
        {"\"transform\": \"log1p\"", "\"transform\": \"none\""},
        {"\"kind\": \"float\", \"length\": 2", "\"kind\": \"int64\", \"length\": 2"},
        {"\"length\": 0}", "\"length\": 3}"},
        {"\"name\": \"y\", \"role\": \"label\", \"kind\": \"float\"", "\"name\": \"y\", \"role\": \"label\", "
                                                                      "\"kind\": \"int64\""},
        {"{\"name\": \"y\"", "{\"name\": \"z\", \"role\": \"dense\", \"kind\": \"float\"}, {\"name\": \"y\""},
        {"{\"type\": \"dense\", \"units\": 1}, {\"type\": \"wide\"", "{\"type\": \"dense\", \"units\": 1}, "
                                                                     "{\"type\": \"wide\", \"name\": \"lin\""},
    };
    psc_job_spec_t s;
    parse_ok(base, &s);
    char base_id[17];
    sfmt(base_id, sizeof base_id, "%s", s.job_id);
    psc_job_spec_deinit(&s);
    for (size_t i = 0; i < PSC_ARRAY_LEN(variants); i++) {
        at = strstr(base, variants[i][0]);
        if (!at) fail_msg("variant %zu: \"%s\" not in the base", i, variants[i][0]);
        sfmt(text, sizeof text, "%.*s%s%s", (int)(at - base), base, variants[i][1], at + strlen(variants[i][0]));
        parse_ok(text, &s);
        if (strcmp(s.job_id, base_id) == 0) fail_msg("variant %zu (%s) kept job id %s", i, variants[i][1], base_id);
        psc_job_spec_deinit(&s);
    }
}

/* ---- the files at a task's start ---- */

static void write_text(const char *dir, const char *name, const char *text)
{
    char path[512];
    sfmt(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* Parses a criteo spec with data.train and data.test and runs the check. */
static int check_files(const char *train, const char *test, int do_train, int do_test, char *err, size_t errlen)
{
    char buf[4096], d[1024];
    if (test)
        sfmt(d, sizeof d, "\"format\": \"criteo\", \"train\": %s, \"test\": %s", train, test);
    else
        sfmt(d, sizeof d, "\"format\": \"criteo\", \"train\": %s", train);
    psc_job_spec_t s;
    parse_ok(ctr(buf, sizeof buf, d, TOP, ""), &s);
    int rc = psc_job_spec_check_data(&s, do_train, do_test, err, errlen);
    psc_job_spec_deinit(&s);
    return rc;
}

static void expect_data(const char *train, const char *test, int do_train, int do_test, const char *want)
{
    char err[1024] = "";
    int rc = check_files(train, test, do_train, do_test, err, sizeof err);
    if (!want) {
        if (rc) fail_msg("unexpected: %s", err);
        return;
    }
    assert_int_equal(rc, PSC_ECONFIG);
    if (strcmp(err, want) != 0) fail_msg("got  \"%s\"\nwant \"%s\"", err, want);
}

static void test_check_data(void **state)
{
    (void)state;
    char dir[] = "/tmp/psc_test_ctr_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[512], link[512], tr[1024], te[1024], want[1024];
    write_text(dir, "day_0.tsv", "0\t1\n");
    write_text(dir, "day_1.tsv.gz", "x");
    sfmt(path, sizeof path, "%s/sub.d", dir);
    assert_int_equal(mkdir(path, 0755), 0);
    sfmt(path, sizeof path, "%s/gone", dir);
    sfmt(link, sizeof link, "%s/dead.lnk", dir);
    assert_int_equal(symlink(path, link), 0);

    /* a glob with matches, a plain name, a test set */
    sfmt(tr, sizeof tr, "[\"%s/day_*\", \"%s/day_0.tsv\"]", dir, dir);
    sfmt(te, sizeof te, "\"%s/day_1.tsv.gz\"", dir);
    expect_data(tr, te, 1, 1, NULL);
    expect_data(tr, NULL, 1, 1, NULL); /* no data.test: nothing to check */
    /* a pattern with no match; a missing plain name */
    sfmt(tr, sizeof tr, "[\"%s/day_0.tsv\", \"%s/*.csv\"]", dir, dir);
    sfmt(want, sizeof want, "job spec: data.train: no file matches %s/*.csv", dir);
    expect_data(tr, te, 1, 1, want);
    expect_data(tr, te, 0, 1, NULL); /* the evaluator reads only data.test */
    sfmt(tr, sizeof tr, "\"%s/day_0.tsv\"", dir);
    sfmt(te, sizeof te, "\"%s/nope.tsv\"", dir);
    sfmt(want, sizeof want, "job spec: data.test: cannot read %s/nope.tsv: No such file or directory", dir);
    expect_data(tr, te, 1, 1, want);
    expect_data(tr, te, 1, 0, NULL);
    expect_data(tr, te, 0, 0, NULL);
    /* matches that cannot be read: a dangling link, a directory */
    sfmt(tr, sizeof tr, "\"%s/*.lnk\"", dir);
    sfmt(want, sizeof want, "job spec: data.train: cannot read %s/dead.lnk: No such file or directory", dir);
    expect_data(tr, NULL, 1, 0, want);
    sfmt(tr, sizeof tr, "\"%s/su?.[d]\"", dir);
    sfmt(want, sizeof want, "job spec: data.train: cannot read %s/sub.d: Is a directory", dir);
    expect_data(tr, NULL, 1, 0, want);
    /* an unreadable file (root reads everything: checked only as another user) */
    sfmt(path, sizeof path, "%s/day_0.tsv", dir);
    assert_int_equal(chmod(path, 0), 0);
    if (geteuid() != 0) {
        sfmt(tr, sizeof tr, "\"%s/day_[0-9].tsv\"", dir);
        sfmt(want, sizeof want, "job spec: data.train: cannot read %s/day_0.tsv: Permission denied", dir);
        expect_data(tr, NULL, 1, 0, want);
    }

    /* what the mains run: the file's prefix */
    char spec_path[600], buf[4096], d[1024], err[1024];
    sfmt(spec_path, sizeof spec_path, "%s/job.json", dir);
    sfmt(d, sizeof d, "\"format\": \"libsvm\", \"train\": \"%s/*.svm\"", dir);
    write_text(dir, "job.json",
               ctr(buf, sizeof buf, d,
                   "{\"type\": \"embedding\", \"table\": \"emb\", \"features\": "
                   "\"features\"}, " CONCAT ", " LOGIT,
                   TABLES));
    psc_cluster_t cl;
    if (psc_cluster_parse("{\"ps\": [\"p:1\"], \"worker\": [\"w:1\"]}", &cl, err, sizeof err)) fail_msg("%s", err);
    psc_job_spec_t s;
    assert_int_equal(psc_job_spec_load_checked(spec_path, &cl, 1, 0, &s, err, sizeof err), PSC_ECONFIG);
    sfmt(want, sizeof want, "job spec %s: data.train: no file matches %s/*.svm", spec_path, dir);
    assert_string_equal(err, want);
    assert_null(s.train_files);
    assert_null(s.features);
    write_text(dir, "a.svm", "1 3:1\n");
    assert_int_equal(psc_job_spec_load_checked(spec_path, &cl, 1, 1, &s, err, sizeof err), 0);
    assert_int_equal(s.data_format, PSC_DATA_LIBSVM);
    psc_job_spec_deinit(&s);
    psc_cluster_deinit(&cl);

    static const char *const names[] = {"day_0.tsv", "day_1.tsv.gz", "dead.lnk", "job.json", "a.svm"};
    for (size_t i = 0; i < PSC_ARRAY_LEN(names); i++) {
        sfmt(path, sizeof path, "%s/%s", dir, names[i]);
        assert_int_equal(unlink(path), 0);
    }
    sfmt(path, sizeof path, "%s/sub.d", dir);
    assert_int_equal(rmdir(path), 0);
    assert_int_equal(rmdir(dir), 0);
}

/* The fuzzer's recommendation seeds are valid specs. */
static void test_fuzz_seeds(void **state)
{
    (void)state;
    const char *src = getenv("PSC_SRC");
    if (!src) src = ".";
    static const char *const seeds[] = {"ctr_criteo_dlrm.json", "ctr_libsvm_wide_deep.json", "ctr_tfrecord.json"};
    static const enum psc_data_format formats[] = {PSC_DATA_CRITEO, PSC_DATA_LIBSVM, PSC_DATA_TFRECORD};
    char path[1024], err[1024];
    sfmt(path, sizeof path, "%s/tests/fuzz/seeds/fuzz_job_spec/%s", src, seeds[0]);
    if (access(path, R_OK) != 0) skip();
    for (size_t i = 0; i < PSC_ARRAY_LEN(seeds); i++) {
        psc_job_spec_t s;
        sfmt(path, sizeof path, "%s/tests/fuzz/seeds/fuzz_job_spec/%s", src, seeds[i]);
        if (psc_job_spec_load(path, &s, err, sizeof err)) fail_msg("%s", err);
        assert_int_equal(s.loss_kind, PSC_LOSS_SIGMOID_XENT);
        assert_int_equal(s.data_format, formats[i]);
        assert_true(s.num_tables > 0);
        psc_job_spec_deinit(&s);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dlrm_criteo), cmocka_unit_test(test_wide_deep_libsvm), cmocka_unit_test(test_tfrecord),
        cmocka_unit_test(test_widths),      cmocka_unit_test(test_job_id),           cmocka_unit_test(test_check_data),
        cmocka_unit_test(test_fuzz_seeds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
