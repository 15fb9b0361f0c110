/* test_job_spec — strict parsing of the JSON job spec.
 *
 * The DESIGN.md example is parsed and every resolved field checked; a minimal spec
 * gets every default; unnamed layers get Keras names. Each class of bad input
 * (unknown key at every level, wrong type, missing required key, bad enum value,
 * out-of-range number, a parameter of another optimizer, JSON syntax) must give
 * PSC_ECONFIG with a one-line message naming the key, and leave nothing to free.
 * The job id must be stable across formatting and change with the model.
 * FTRL, schedules and tables: test_job_spec_tables.c.
 */
#include "job_spec_fixture.h"

static void test_design_example(void **state)
{
    (void)state;
    psc_job_spec_t s;
    parse_ok(design_example, &s);
    assert_int_equal(s.input_rank, 3);
    assert_int_equal(s.input_shape[0], 28);
    assert_int_equal(s.input_shape[1], 28);
    assert_int_equal(s.input_shape[2], 1);
    assert_int_equal(s.num_layers, 5);

    const psc_layer_spec_t *L = s.layers;
    assert_int_equal(L[0].type, PSC_LAYER_CONV2D);
    assert_string_equal(L[0].name, "conv2d");
    assert_int_equal(L[0].filters, 32);
    assert_int_equal(L[0].kernel_size[0], 5);
    assert_int_equal(L[0].kernel_size[1], 5);
    assert_int_equal(L[0].strides[0], 1);
    assert_int_equal(L[0].strides[1], 1);
    assert_int_equal(L[0].padding, PSC_PAD_SAME);
    assert_int_equal(L[0].activation, PSC_ACT_RELU);
    assert_int_equal(L[0].use_bias, 1);

    assert_int_equal(L[1].type, PSC_LAYER_MAX_POOL2D);
    assert_string_equal(L[1].name, "max_pool2d");
    assert_int_equal(L[1].pool_size[0], 2);
    assert_int_equal(L[1].pool_size[1], 2);
    assert_int_equal(L[1].strides[0], 2); /* default = pool_size */
    assert_int_equal(L[1].strides[1], 2);
    assert_int_equal(L[1].padding, PSC_PAD_VALID);

    assert_int_equal(L[2].type, PSC_LAYER_FLATTEN);
    assert_string_equal(L[2].name, "flatten");

    assert_int_equal(L[3].type, PSC_LAYER_DENSE);
    assert_string_equal(L[3].name, "dense");
    assert_int_equal(L[3].units, 128);
    assert_int_equal(L[3].activation, PSC_ACT_RELU);
    assert_int_equal(L[3].use_bias, 1);

    assert_int_equal(L[4].type, PSC_LAYER_DENSE);
    assert_string_equal(L[4].name, "dense_1");
    assert_int_equal(L[4].units, 10);
    assert_int_equal(L[4].activation, PSC_ACT_NONE);

    assert_string_equal(s.loss, "sparse_softmax_cross_entropy");
    assert_int_equal(s.optimizer.kind, PSC_OPT_ADAM);
    assert_true(s.optimizer.learning_rate == 0.001f);
    assert_true(s.optimizer.beta1 == 0.9f);
    assert_true(s.optimizer.beta2 == 0.999f);
    assert_true(s.optimizer.epsilon == 1e-8f);
    assert_true(s.optimizer.momentum == 0.0f);
    assert_true(s.optimizer.decay == 0.0f);
    assert_true(s.optimizer.initial_accumulator_value == 0.0f);

    assert_string_equal(s.train_path, "/usr/share/datasets/fashion-mnist/train");
    assert_string_equal(s.test_path, "/usr/share/datasets/fashion-mnist/t10k");
    assert_int_equal(s.train_examples, 0);
    assert_int_equal(s.test_examples, 0);
    assert_int_equal(s.batch_size, 64);
    assert_int_equal(s.epochs, 5);
    assert_int_equal(s.steps, 0);
    assert_int_equal(s.sync, 1);
    assert_int_equal(s.replicas_to_aggregate, 2);
    assert_int_equal(s.total_num_replicas, 2);
    assert_true(s.sync_timeout_secs == 30.0);
    assert_int_equal(s.placement, PSC_PLACE_ROUND_ROBIN);
    assert_int_equal(s.min_shard_bytes, 0);
    assert_int_equal(s.ckpt_every_steps, 500);
    assert_true(s.ckpt_every_secs == 600.0);
    assert_int_equal(s.ckpt_keep, 5);
    assert_int_equal(s.seed, 42);

    assert_int_equal(strlen(s.job_id), 16);
    for (int i = 0; i < 16; i++) assert_non_null(strchr("0123456789abcdef", s.job_id[i]));
    psc_job_spec_deinit(&s);
    assert_spec_empty(&s);
    psc_job_spec_deinit(&s); /* twice is harmless */
}

static void test_defaults(void **state)
{
    (void)state;
    psc_job_spec_t s;
    parse_ok("{\"model\": {\"input_shape\": [784], \"layers\": [{\"type\": \"dense\", \"units\": 10}]},"
             " \"optimizer\": {\"name\": \"sgd\"}}",
             &s);
    assert_int_equal(s.input_rank, 1);
    assert_int_equal(s.input_shape[0], 784);
    assert_string_equal(s.loss, "sparse_softmax_cross_entropy");
    assert_int_equal(s.layers[0].use_bias, 1);
    assert_int_equal(s.layers[0].activation, PSC_ACT_NONE);
    assert_int_equal(s.optimizer.kind, PSC_OPT_SGD);
    assert_true(s.optimizer.learning_rate == 0.01f);
    assert_true(s.optimizer.momentum == 0.0f && s.optimizer.epsilon == 0.0f && s.optimizer.beta1 == 0.0f);
    assert_string_equal(s.train_path, "/usr/share/datasets/fashion-mnist/train");
    assert_string_equal(s.test_path, "/usr/share/datasets/fashion-mnist/t10k");
    assert_int_equal(s.batch_size, 64);
    assert_int_equal(s.epochs, 1);
    assert_int_equal(s.steps, 0);
    assert_int_equal(s.sync, 0);
    assert_int_equal(s.placement, PSC_PLACE_ROUND_ROBIN);
    assert_int_equal(s.min_shard_bytes, 0);
    assert_int_equal(s.ckpt_every_steps, 0);
    assert_true(s.ckpt_every_secs == 0.0);
    assert_int_equal(s.ckpt_keep, 5);
    assert_int_equal(s.seed, 42);
    assert_int_equal(s.overlap_push_pull, 0);
    psc_job_spec_deinit(&s);

    /* Sections present but empty keep the defaults; sync present means sync. */
    char buf[1024];
    parse_ok(spec3(buf, sizeof buf, MLP, ADAM,
                   "\"data\": {\"train_examples\": 1000}, \"placement\": {\"strategy\": \"greedy_bytes\", "
                   "\"min_shard_bytes\": 4096}, \"checkpoint\": {}, \"sync\": {\"replicas_to_aggregate\": 3, "
                   "\"total_num_replicas\": 4, \"timeout_secs\": 2.5}, \"steps\": 100, \"seed\": 0"),
             &s);
    assert_int_equal(s.train_examples, 1000);
    assert_int_equal(s.placement, PSC_PLACE_GREEDY_BYTES);
    assert_int_equal(s.min_shard_bytes, 4096);
    assert_int_equal(s.ckpt_keep, 5);
    assert_int_equal(s.sync, 1);
    assert_int_equal(s.replicas_to_aggregate, 3);
    assert_int_equal(s.total_num_replicas, 4);
    assert_true(s.sync_timeout_secs == 2.5);
    assert_int_equal(s.steps, 100);
    assert_int_equal(s.seed, 0);
    psc_job_spec_deinit(&s);
}

static void test_optimizer_defaults(void **state)
{
    (void)state;
    char buf[1024];
    psc_job_spec_t s;

    parse_ok(spec3(buf, sizeof buf, MLP, "\"name\": \"gradient_descent\", \"learning_rate\": 0.5", ""), &s);
    assert_int_equal(s.optimizer.kind, PSC_OPT_SGD);
    assert_true(s.optimizer.learning_rate == 0.5f);
    psc_job_spec_deinit(&s);

    parse_ok(spec3(buf, sizeof buf, MLP, "\"name\": \"momentum\"", ""), &s);
    assert_int_equal(s.optimizer.kind, PSC_OPT_MOMENTUM);
    assert_true(s.optimizer.learning_rate == 0.01f);
    assert_true(s.optimizer.momentum == 0.9f);
    assert_int_equal(s.optimizer.use_nesterov, 0);
    assert_true(s.optimizer.beta1 == 0.0f && s.optimizer.epsilon == 0.0f && s.optimizer.decay == 0.0f);
    psc_job_spec_deinit(&s);

    parse_ok(spec3(buf, sizeof buf, MLP, "\"name\": \"momentum\", \"momentum\": 0.5, \"use_nesterov\": true", ""), &s);
    assert_true(s.optimizer.momentum == 0.5f);
    assert_int_equal(s.optimizer.use_nesterov, 1);
    psc_job_spec_deinit(&s);

    parse_ok(spec3(buf, sizeof buf, MLP, "\"name\": \"adagrad\"", ""), &s);
    assert_int_equal(s.optimizer.kind, PSC_OPT_ADAGRAD);
    assert_true(s.optimizer.learning_rate == 0.01f);
    assert_true(s.optimizer.initial_accumulator_value == 0.1f);
    assert_true(s.optimizer.epsilon == 0.0f && s.optimizer.momentum == 0.0f);
    psc_job_spec_deinit(&s);

    parse_ok(spec3(buf, sizeof buf, MLP, "\"name\": \"adam\", \"beta1\": 0, \"beta2\": 0.99, \"epsilon\": 1e-7", ""),
             &s);
    assert_true(s.optimizer.learning_rate == 0.001f);
    assert_true(s.optimizer.beta1 == 0.0f);
    assert_true(s.optimizer.beta2 == 0.99f);
    assert_true(s.optimizer.epsilon == 1e-7f);
    psc_job_spec_deinit(&s);

    parse_ok(spec3(buf, sizeof buf, MLP, "\"name\": \"rmsprop\"", ""), &s);
    assert_int_equal(s.optimizer.kind, PSC_OPT_RMSPROP);
    assert_true(s.optimizer.learning_rate == 0.001f);
    assert_true(s.optimizer.decay == 0.9f);
    assert_true(s.optimizer.momentum == 0.0f);
    assert_true(s.optimizer.epsilon == 1e-10f);
    assert_true(s.optimizer.beta1 == 0.0f && s.optimizer.initial_accumulator_value == 0.0f);
    psc_job_spec_deinit(&s);

    assert_string_equal(psc_optim_name(PSC_OPT_SGD), "gradient_descent");
    assert_string_equal(psc_optim_name(PSC_OPT_MOMENTUM), "momentum");
    assert_string_equal(psc_optim_name(PSC_OPT_ADAGRAD), "adagrad");
    assert_string_equal(psc_optim_name(PSC_OPT_ADAM), "adam");
    assert_string_equal(psc_optim_name(PSC_OPT_RMSPROP), "rmsprop");
    assert_string_equal(psc_activation_name(PSC_ACT_NONE), "linear");
    assert_string_equal(psc_activation_name(PSC_ACT_RELU), "relu");
    assert_string_equal(psc_activation_name(PSC_ACT_TANH), "tanh");
    assert_string_equal(psc_activation_name(PSC_ACT_SIGMOID), "sigmoid");
}

static void test_layers_and_keras_names(void **state)
{
    (void)state;
    char buf[2048];
    psc_job_spec_t s;
    parse_ok(spec3(buf, sizeof buf,
                   "{\"type\": \"conv2d\", \"filters\": 8, \"kernel_size\": [3, 5], \"strides\": [1, 2], "
                   "\"use_bias\": false, \"activation\": \"tanh\"},"
                   "{\"type\": \"conv2d\", \"filters\": 4, \"kernel_size\": 3, \"strides\": 2},"
                   "{\"type\": \"max_pool2d\", \"pool_size\": [3, 2], \"strides\": 1, \"padding\": \"same\"},"
                   "{\"type\": \"flatten\"},"
                   "{\"type\": \"dense\", \"units\": 64, \"name\": \"hidden\", \"activation\": \"sigmoid\"},"
                   "{\"type\": \"dropout\", \"rate\": 0.25},"
                   "{\"type\": \"dense\", \"units\": 32},"
                   "{\"type\": \"dropout\", \"rate\": 0},"
                   "{\"type\": \"dense\", \"units\": 10, \"name\": \"logits.v-2\"},"
                   "{\"type\": \"dense\", \"units\": 10}",
                   ADAM, ""),
             &s);
    static const char *const names[] = {"conv2d", "conv2d_1", "max_pool2d", "flatten", "hidden",
                                        "dropout", "dense",    "dropout_1",  "logits.v-2", "dense_1"};
    assert_int_equal(s.num_layers, 10);
    for (int i = 0; i < 10; i++) assert_string_equal(s.layers[i].name, names[i]);
    assert_int_equal(s.layers[0].kernel_size[0], 3);
    assert_int_equal(s.layers[0].kernel_size[1], 5);
    assert_int_equal(s.layers[0].strides[0], 1);
    assert_int_equal(s.layers[0].strides[1], 2);
    assert_int_equal(s.layers[0].use_bias, 0);
    assert_int_equal(s.layers[0].activation, PSC_ACT_TANH);
    assert_int_equal(s.layers[1].kernel_size[1], 3);
    assert_int_equal(s.layers[1].strides[0], 2);
    assert_int_equal(s.layers[1].strides[1], 2);
    assert_int_equal(s.layers[1].padding, PSC_PAD_VALID);
    assert_int_equal(s.layers[2].pool_size[0], 3);
    assert_int_equal(s.layers[2].pool_size[1], 2);
    assert_int_equal(s.layers[2].strides[0], 1);
    assert_int_equal(s.layers[2].strides[1], 1);
    assert_int_equal(s.layers[2].padding, PSC_PAD_SAME);
    assert_int_equal(s.layers[4].activation, PSC_ACT_SIGMOID);
    assert_true(fabsf(s.layers[5].rate - 0.25f) == 0.0f);
    assert_true(s.layers[7].rate == 0.0f);
    psc_job_spec_deinit(&s);

    /* Duplicate user names, and generated names that hit a user name. */
    expect_error(spec3(buf, sizeof buf,
                       "{\"type\": \"dense\", \"units\": 3, \"name\": \"a\"}, {\"type\": \"dense\", \"units\": 3, "
                       "\"name\": \"a\"}",
                       ADAM, ""),
                 "model.layers[1].name");
    expect_error(spec3(buf, sizeof buf,
                       "{\"type\": \"dense\", \"units\": 3, \"name\": \"dense_1\"}, {\"type\": \"dense\", \"units\": 3},"
                       " {\"type\": \"dense\", \"units\": 3}",
                       ADAM, ""),
                 "model.layers[2]");
    expect_error(spec3(buf, sizeof buf,
                       "{\"type\": \"dense\", \"units\": 3}, {\"type\": \"dense\", \"units\": 3, \"name\": \"dense\"}",
                       ADAM, ""),
                 "model.layers[0]");
    expect_error(spec3(buf, sizeof buf, "{\"type\": \"dense\", \"units\": 3, \"name\": \"a b\"}", ADAM, ""),
                 "model.layers[0].name");
    expect_error(spec3(buf, sizeof buf, "{\"type\": \"dense\", \"units\": 3, \"name\": \"a/b\"}", ADAM, ""),
                 "model.layers[0].name");
    expect_error(spec3(buf, sizeof buf, "{\"type\": \"dense\", \"units\": 3, \"name\": \"\"}", ADAM, ""),
                 "model.layers[0].name");
    expect_error(spec3(buf, sizeof buf,
                       "{\"type\": \"dense\", \"units\": 3, \"name\": "
                       "\"a123456789b123456789c123456789d123456789e123456789f123456789abcd\"}",
                       ADAM, ""),
                 "model.layers[0].name");
    expect_error(spec3(buf, sizeof buf, "{\"type\": \"dense\", \"units\": 3, \"name\": 7}", ADAM, ""),
                 "model.layers[0].name");
    /* 63 characters is the longest name. */
    parse_ok(spec3(buf, sizeof buf,
                   "{\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": 3, \"name\": "
                   "\"a123456789b123456789c123456789d123456789e123456789f123456789abc\"}",
                   ADAM, ""),
             &s);
    assert_int_equal(strlen(s.layers[1].name), 63);
    psc_job_spec_deinit(&s);
}

static void test_unknown_keys(void **state)
{
    (void)state;
    char buf[1024];
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"batch_size\": 32"), "batch_size: unknown key");
    expect_error("{\"model\": {\"input_shape\": [4], \"layers\": [{\"type\": \"dense\", \"units\": 2}], \"optimizer\": 1},"
                 " \"optimizer\": {\"name\": \"sgd\"}}",
                 "model.optimizer: unknown key");
    expect_error(spec3(buf, sizeof buf, "{\"type\": \"flatten\"}, {\"type\": \"dense\", \"unit\": 10}", ADAM, ""),
                 "model.layers[1].unit: unknown key");
    /* A key of another layer type is unknown for this one. */
    expect_error(spec3(buf, sizeof buf, "{\"type\": \"flatten\", \"units\": 3}", ADAM, ""),
                 "model.layers[0].units: unknown key");
    expect_error(spec3(buf, sizeof buf, "{\"type\": \"max_pool2d\", \"filters\": 3}", ADAM, ""),
                 "model.layers[0].filters: unknown key");
    expect_error(spec3(buf, sizeof buf, MLP, "\"name\": \"adam\", \"lr\": 0.1", ""), "optimizer.lr: unknown key");
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"data\": {\"path\": \"/x\"}"), "data.path: unknown key");
    expect_error(spec3(buf, sizeof buf, MLP, ADAM,
                       "\"sync\": {\"replicas_to_aggregate\": 1, \"total_num_replicas\": 1, \"backup\": 1}"),
                 "sync.backup: unknown key");
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"placement\": {\"ps\": 2}"), "placement.ps: unknown key");
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"checkpoint\": {\"every\": 2}"), "checkpoint.every: unknown key");
}

/* overlap_push_pull: a bool, asynchronous training only. */
static void test_overlap_push_pull(void **state)
{
    (void)state;
    char buf[1024];
    psc_job_spec_t s;
    parse_ok(spec3(buf, sizeof buf, MLP, ADAM, "\"overlap_push_pull\": true"), &s);
    assert_int_equal(s.overlap_push_pull, 1);
    assert_int_equal(s.sync, 0);
    char id[sizeof s.job_id];
    memcpy(id, s.job_id, sizeof id);
    psc_job_spec_deinit(&s);
    /* a worker-side choice: the same job (a restarted worker may change it) */
    parse_ok(spec3(buf, sizeof buf, MLP, ADAM, "\"overlap_push_pull\": false"), &s);
    assert_int_equal(s.overlap_push_pull, 0);
    assert_string_equal(s.job_id, id);
    psc_job_spec_deinit(&s);
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"overlap_push_pull\": 1"),
                 "overlap_push_pull: expected true or false, got 1");
    expect_error(spec3(buf, sizeof buf, MLP, ADAM,
                       "\"overlap_push_pull\": true, \"sync\": {\"replicas_to_aggregate\": 2, "
                       "\"total_num_replicas\": 2}"),
                 "overlap_push_pull: needs asynchronous training");
}

/* allow_partial and checkpoint.on_failure: how a job ends when not every
 * replica trained its share; bools, default false, not in the job id. */
static void test_failure_keys(void **state)
{
    (void)state;
    char buf[1024];
    psc_job_spec_t s;
    parse_ok(spec3(buf, sizeof buf, MLP, ADAM, "\"seed\": 3"), &s);
    assert_int_equal(s.allow_partial, 0);
    assert_int_equal(s.ckpt_on_failure, 0);
    char id[sizeof s.job_id];
    memcpy(id, s.job_id, sizeof id);
    psc_job_spec_deinit(&s);
    parse_ok(spec3(buf, sizeof buf, MLP, ADAM,
                   "\"seed\": 3, \"allow_partial\": true, \"checkpoint\": {\"on_failure\": true}"), &s);
    assert_int_equal(s.allow_partial, 1);
    assert_int_equal(s.ckpt_on_failure, 1);
    assert_string_equal(s.job_id, id);
    psc_job_spec_deinit(&s);
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"allow_partial\": \"yes\""),
                 "allow_partial: expected true or false");
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"checkpoint\": {\"on_failure\": 1}"),
                 "checkpoint.on_failure: expected true or false, got 1");
}

/* gradient_dtype / error_feedback: how pushes carry gradients; worker-side, not in the job id. */
static void test_gradient_dtype(void **state)
{
    (void)state;
    char buf[1024];
    psc_job_spec_t s;
    parse_ok(spec3(buf, sizeof buf, MLP, ADAM, "\"seed\": 1"), &s);
    assert_int_equal(s.gradient_dtype, PSC_ENC_FLOAT32);
    assert_int_equal(s.error_feedback, 0);
    char id[sizeof s.job_id];
    memcpy(id, s.job_id, sizeof id);
    psc_job_spec_deinit(&s);
    parse_ok(spec3(buf, sizeof buf, MLP, ADAM, "\"seed\": 1, \"gradient_dtype\": \"bfloat16\""), &s);
    assert_int_equal(s.gradient_dtype, PSC_ENC_BFLOAT16);
    assert_int_equal(s.error_feedback, 1); /* on by default with bfloat16 */
    assert_string_equal(s.job_id, id);
    psc_job_spec_deinit(&s);
    parse_ok(spec3(buf, sizeof buf, MLP, ADAM, "\"gradient_dtype\": \"bfloat16\", \"error_feedback\": false"), &s);
    assert_int_equal(s.error_feedback, 0);
    psc_job_spec_deinit(&s);
    parse_ok(spec3(buf, sizeof buf, MLP, ADAM, "\"gradient_dtype\": \"float32\""), &s);
    assert_int_equal(s.gradient_dtype, PSC_ENC_FLOAT32);
    psc_job_spec_deinit(&s);
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"gradient_dtype\": \"float16\""), "gradient_dtype");
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"gradient_dtype\": \"float16\""), "bfloat16");
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"error_feedback\": true"),
                 "error_feedback: applies to rounded gradients only");
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"gradient_dtype\": \"bfloat16\", \"error_feedback\": 1"),
                 "error_feedback: expected true or false");
}

static void test_wrong_types_and_ranges(void **state)
{
    (void)state;
    char buf[1024];
    /* Integers must be JSON integers, in range. */
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"batch_size_per_replica\": 1.5"),
                 "batch_size_per_replica: expected a positive integer");
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"batch_size_per_replica\": 2.0"),
                 "batch_size_per_replica: expected a positive integer");
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"batch_size_per_replica\": \"64\""),
                 "batch_size_per_replica: expected a positive integer");
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"batch_size_per_replica\": 0"),
                 "batch_size_per_replica: expected a positive integer");
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"batch_size_per_replica\": 4294967296"),
                 "batch_size_per_replica");
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"epochs\": 0"), "epochs: expected a positive integer");
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"steps\": -1"), "steps: expected a non-negative integer");
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"seed\": -1"), "seed");
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"seed\": null"), "seed");
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"data\": {\"train_examples\": -1}"), "data.train_examples");
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"data\": {\"train\": 5}"), "data.train: expected a string");
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"data\": {\"test\": \"\"}"), "data.test");
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"data\": []"), "data: expected an object");
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"sync\": true"), "sync: expected an object");
    expect_error(spec3(buf, sizeof buf, MLP, ADAM,
                       "\"sync\": {\"replicas_to_aggregate\": 0, \"total_num_replicas\": 1}"),
                 "sync.replicas_to_aggregate");
    expect_error(spec3(buf, sizeof buf, MLP, ADAM,
                       "\"sync\": {\"replicas_to_aggregate\": 1, \"total_num_replicas\": 1, \"timeout_secs\": 0}"),
                 "sync.timeout_secs");
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"placement\": {\"min_shard_bytes\": -1}"),
                 "placement.min_shard_bytes");
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"checkpoint\": {\"keep\": 0}"), "checkpoint.keep");
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"checkpoint\": {\"every_secs\": -1}"), "checkpoint.every_secs");
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"checkpoint\": {\"every_steps\": 1.5}"),
                 "checkpoint.every_steps");

    /* Model. */
    expect_error("{\"model\": [], \"optimizer\": {\"name\": \"sgd\"}}", "model: expected an object");
    expect_error("{\"model\": {\"input_shape\": [28, 28], \"layers\": [" MLP "]}, \"optimizer\": {\"name\": \"sgd\"}}",
                 "model.input_shape");
    expect_error("{\"model\": {\"input_shape\": [28, 0, 1], \"layers\": [" MLP "]}, \"optimizer\": {\"name\": \"sgd\"}}",
                 "model.input_shape[1]");
    expect_error("{\"model\": {\"input_shape\": 784, \"layers\": [" MLP "]}, \"optimizer\": {\"name\": \"sgd\"}}",
                 "model.input_shape");
    expect_error("{\"model\": {\"input_shape\": [784], \"layers\": []}, \"optimizer\": {\"name\": \"sgd\"}}",
                 "model.layers");
    expect_error(spec3(buf, sizeof buf, "[]", ADAM, ""), "model.layers[0]");
    expect_error(spec3(buf, sizeof buf, "{\"type\": 3}", ADAM, ""), "model.layers[0].type");
    expect_error(spec3(buf, sizeof buf, "{\"type\": \"dense\", \"units\": 0}", ADAM, ""),
                 "model.layers[0].units: expected a positive integer");
    expect_error(spec3(buf, sizeof buf, "{\"type\": \"dense\", \"units\": 10.0}", ADAM, ""), "model.layers[0].units");
    expect_error(spec3(buf, sizeof buf, "{\"type\": \"dense\", \"units\": 3, \"use_bias\": 1}", ADAM, ""),
                 "model.layers[0].use_bias");
    expect_error(spec3(buf, sizeof buf, "{\"type\": \"conv2d\", \"filters\": -3, \"kernel_size\": 3}", ADAM, ""),
                 "model.layers[0].filters");
    expect_error(spec3(buf, sizeof buf, "{\"type\": \"conv2d\", \"filters\": 3, \"kernel_size\": [3]}", ADAM, ""),
                 "model.layers[0].kernel_size");
    expect_error(spec3(buf, sizeof buf, "{\"type\": \"conv2d\", \"filters\": 3, \"kernel_size\": 0}", ADAM, ""),
                 "model.layers[0].kernel_size");
    expect_error(spec3(buf, sizeof buf, "{\"type\": \"conv2d\", \"filters\": 3, \"kernel_size\": 3, \"strides\": [1, 0]}",
                       ADAM, ""),
                 "model.layers[0].strides");
    expect_error(spec3(buf, sizeof buf, "{\"type\": \"max_pool2d\", \"pool_size\": [2, 2, 2]}", ADAM, ""),
                 "model.layers[0].pool_size");
    expect_error(spec3(buf, sizeof buf, "{\"type\": \"dropout\", \"rate\": 1.0}", ADAM, ""), "model.layers[0].rate");
    expect_error(spec3(buf, sizeof buf, "{\"type\": \"dropout\", \"rate\": 1}", ADAM, ""), "model.layers[0].rate");
    expect_error(spec3(buf, sizeof buf, "{\"type\": \"dropout\", \"rate\": -0.1}", ADAM, ""), "model.layers[0].rate");

    /* Optimizer. */
    expect_error(spec3(buf, sizeof buf, MLP, "\"name\": \"adam\", \"learning_rate\": 0", ""), "optimizer.learning_rate");
    expect_error(spec3(buf, sizeof buf, MLP, "\"name\": \"adam\", \"learning_rate\": -1", ""),
                 "optimizer.learning_rate");
    expect_error(spec3(buf, sizeof buf, MLP, "\"name\": \"adam\", \"learning_rate\": \"0.1\"", ""),
                 "optimizer.learning_rate");
    expect_error(spec3(buf, sizeof buf, MLP, "\"name\": \"adam\", \"learning_rate\": 1e300", ""),
                 "optimizer.learning_rate");
    expect_error(spec3(buf, sizeof buf, MLP, "\"name\": \"adam\", \"beta1\": 1.0", ""), "optimizer.beta1");
    expect_error(spec3(buf, sizeof buf, MLP, "\"name\": \"adam\", \"beta2\": 1.5", ""), "optimizer.beta2");
    expect_error(spec3(buf, sizeof buf, MLP, "\"name\": \"adam\", \"beta2\": 0.9999999999", ""), "optimizer.beta2");
    expect_error(spec3(buf, sizeof buf, MLP, "\"name\": \"adam\", \"epsilon\": 0", ""), "optimizer.epsilon");
    expect_error(spec3(buf, sizeof buf, MLP, "\"name\": \"adagrad\", \"initial_accumulator_value\": 0", ""),
                 "optimizer.initial_accumulator_value");
    expect_error(spec3(buf, sizeof buf, MLP, "\"name\": \"momentum\", \"use_nesterov\": \"yes\"", ""),
                 "optimizer.use_nesterov");
    expect_error(spec3(buf, sizeof buf, MLP, "\"name\": \"momentum\", \"momentum\": -0.5", ""), "optimizer.momentum");
    expect_error(spec3(buf, sizeof buf, MLP, "\"name\": \"rmsprop\", \"decay\": 1", ""), "optimizer.decay");
    expect_error(spec3(buf, sizeof buf, MLP, "\"name\": 1", ""), "optimizer.name");

    /* A path that does not fit. */
    char longpath[700], extra[800];
    memset(longpath, 'a', sizeof longpath - 1);
    longpath[0] = '/';
    longpath[sizeof longpath - 1] = '\0';
    snprintf(extra, sizeof extra, "\"data\": {\"train\": \"%s\"}", longpath);
    char big[2048];
    expect_error(spec3(big, sizeof big, MLP, ADAM, extra), "data.train");
}

static void test_missing_and_bad_values(void **state)
{
    (void)state;
    char buf[1024];
    expect_error("{\"optimizer\": {\"name\": \"sgd\"}}", "model: missing");
    expect_error("{\"model\": {\"input_shape\": [4], \"layers\": [{\"type\": \"dense\", \"units\": 2}]}}",
                 "optimizer: missing");
    expect_error("{\"model\": {\"layers\": [" MLP "]}, \"optimizer\": {\"name\": \"sgd\"}}", "model.input_shape: missing");
    expect_error("{\"model\": {\"input_shape\": [4]}, \"optimizer\": {\"name\": \"sgd\"}}", "model.layers: missing");
    expect_error(spec3(buf, sizeof buf, "{\"units\": 3}", ADAM, ""), "model.layers[0].type: missing");
    expect_error(spec3(buf, sizeof buf, "{\"type\": \"flatten\"}, {\"type\": \"dense\"}", ADAM, ""),
                 "model.layers[1].units: missing");
    expect_error(spec3(buf, sizeof buf, "{\"type\": \"conv2d\", \"kernel_size\": 3}", ADAM, ""),
                 "model.layers[0].filters: missing");
    expect_error(spec3(buf, sizeof buf, "{\"type\": \"conv2d\", \"filters\": 3}", ADAM, ""),
                 "model.layers[0].kernel_size: missing");
    expect_error(spec3(buf, sizeof buf, "{\"type\": \"dropout\"}", ADAM, ""), "model.layers[0].rate: missing");
    expect_error(spec3(buf, sizeof buf, MLP, "\"learning_rate\": 0.1", ""), "optimizer.name: missing");
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"sync\": {\"total_num_replicas\": 2}"),
                 "sync.replicas_to_aggregate: missing");
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"sync\": {\"replicas_to_aggregate\": 2}"),
                 "sync.total_num_replicas: missing");

    /* Enumerations. */
    expect_error(spec3(buf, sizeof buf, "{\"type\": \"lstm\"}", ADAM, ""), "model.layers[0].type: unknown value \"lstm\"");
    expect_error(spec3(buf, sizeof buf, "{\"type\": \"dense\", \"units\": 3, \"activation\": \"softmax\"}", ADAM, ""),
                 "model.layers[0].activation: unknown value \"softmax\"");
    expect_error(spec3(buf, sizeof buf, "{\"type\": \"conv2d\", \"filters\": 3, \"kernel_size\": 3, \"padding\": \"full\"}",
                       ADAM, ""),
                 "model.layers[0].padding");
    expect_error(spec3(buf, sizeof buf, MLP, "\"name\": \"adamw\"", ""), "optimizer.name: unknown value \"adamw\"");
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"placement\": {\"strategy\": \"random\"}"),
                 "placement.strategy");
    expect_error("{\"model\": {\"input_shape\": [4], \"layers\": [{\"type\": \"dense\", \"units\": 2}], \"loss\": \"mse\"},"
                 " \"optimizer\": {\"name\": \"sgd\"}}",
                 "model.loss");

    /* A parameter of another optimizer. */
    expect_error(spec3(buf, sizeof buf, MLP, "\"name\": \"momentum\", \"beta1\": 0.9", ""),
                 "optimizer.beta1: not a parameter of momentum");
    expect_error(spec3(buf, sizeof buf, MLP, "\"name\": \"adam\", \"momentum\": 0.9", ""),
                 "optimizer.momentum: not a parameter of adam");
    expect_error(spec3(buf, sizeof buf, MLP, "\"name\": \"sgd\", \"momentum\": 0.9", ""),
                 "optimizer.momentum: not a parameter of gradient_descent");
    expect_error(spec3(buf, sizeof buf, MLP, "\"name\": \"adagrad\", \"epsilon\": 0.1", ""),
                 "optimizer.epsilon: not a parameter of adagrad");
    expect_error(spec3(buf, sizeof buf, MLP, "\"name\": \"rmsprop\", \"use_nesterov\": true", ""),
                 "optimizer.use_nesterov: not a parameter of rmsprop");
}

static void test_json_syntax(void **state)
{
    (void)state;
    expect_error("{\"model\": {", "invalid JSON at line 1");
    expect_error("{\"model\": {\"input_shape\": [4],\n  \"layers\": [,]}}", "line 2 column");
    expect_error("{\"seed\": 1, \"seed\": 2}", "duplicate");
    expect_error("[1]", "object");
    expect_error("", "invalid JSON");
    psc_job_spec_t s;
    char err[256];
    assert_int_equal(psc_job_spec_parse(NULL, &s, err, sizeof err), PSC_ECONFIG);
    assert_spec_empty(&s);
}

/* base with its first change[0] replaced by change[1], into text. */
static const char *variant_of(char *text, size_t len, const char *base, const char *const change[2])
{
    const char *at = strstr(base, change[0]);
    assert_non_null(at);
    snprintf(text, len, "%.*s%s%s", (int)(at - base), base, change[1], at + strlen(change[0]));
    return text;
}

static void test_job_id(void **state)
{
    (void)state;
    char buf[1024];
    psc_job_spec_t a, b;
    parse_ok(design_example, &a);
    parse_ok(design_example, &b);
    assert_string_equal(a.job_id, b.job_id);
    psc_job_spec_deinit(&b);

    /* Same model written differently (order, spacing, defaults spelled out, the sgd
     * alias irrelevant here): same id. Data, batch size and epochs are not part of it. */
    parse_ok("{\"seed\": 42, \"optimizer\": {\"learning_rate\": 0.001, \"name\": \"adam\", \"beta1\": 0.9},"
             "\"model\": {\"layers\": [{\"type\": \"conv2d\", \"kernel_size\": [5, 5], \"filters\": 32, \"padding\": "
             "\"same\", \"activation\": \"relu\", \"strides\": 1, \"name\": \"conv2d\"},"
             "{\"type\": \"max_pool2d\", \"pool_size\": 2, \"strides\": [2, 2]}, {\"type\": \"flatten\"},"
             "{\"type\": \"dense\", \"units\": 128, \"activation\": \"relu\", \"use_bias\": true},"
             "{\"type\": \"dense\", \"units\": 10, \"activation\": \"linear\"}], \"input_shape\": [28, 28, 1]},"
             "\"batch_size_per_replica\": 32, \"epochs\": 1}",
             &b);
    assert_string_equal(a.job_id, b.job_id);
    psc_job_spec_deinit(&b);

    /* Each change of the model, optimizer or seed changes it. */
    static const char *const variants[][2] = {
        {"\"units\": 128", "\"units\": 129"},
        {"\"learning_rate\": 0.001", "\"learning_rate\": 0.002"},
        {"\"seed\": 42", "\"seed\": 43"},
        {"\"kernel_size\": 5", "\"kernel_size\": 3"},
        {"\"padding\": \"same\"", "\"padding\": \"valid\""},
        {"\"name\": \"adam\"", "\"name\": \"rmsprop\""},
        {"[28, 28, 1]", "[28, 28, 3]"},
        {"{\"type\": \"dense\", \"units\": 10}", "{\"type\": \"dense\", \"units\": 10, \"use_bias\": false}"},
        {"{\"type\": \"dense\", \"units\": 10}", "{\"type\": \"dense\", \"units\": 10, \"name\": \"logits\"}"},
    };
    char text[2048];
    for (size_t i = 0; i < PSC_ARRAY_LEN(variants); i++) {
        parse_ok(variant_of(text, sizeof text, design_example, variants[i]), &b);
        if (strcmp(a.job_id, b.job_id) == 0) fail_msg("variant %zu (%s) kept job id %s", i, variants[i][1], a.job_id);
        psc_job_spec_deinit(&b);
    }
    /* The placement does not (a checkpoint restores re-split onto another);
     * it changes the legacy id, the one psc gave the spec before. */
    static const char *const placement[][2] = {
        {"\"min_shard_bytes\": 0", "\"min_shard_bytes\": 1024"},
        {"\"strategy\": \"round_robin\"", "\"strategy\": \"greedy_bytes\""},
    };
    for (size_t i = 0; i < PSC_ARRAY_LEN(placement); i++) {
        parse_ok(variant_of(text, sizeof text, design_example, placement[i]), &b);
        assert_string_equal(a.job_id, b.job_id);
        assert_string_not_equal(a.legacy_job_id, b.legacy_job_id);
        psc_job_spec_deinit(&b);
    }

    /* Momentum's parameters count too. */
    psc_job_spec_t m1, m2;
    parse_ok(spec3(buf, sizeof buf, MLP, "\"name\": \"momentum\", \"momentum\": 0.9", ""), &m1);
    parse_ok(spec3(buf, sizeof buf, MLP, "\"name\": \"momentum\", \"momentum\": 0.9, \"use_nesterov\": true", ""), &m2);
    assert_string_not_equal(m1.job_id, m2.job_id);
    psc_job_spec_deinit(&m1);
    psc_job_spec_deinit(&m2);
    psc_job_spec_deinit(&a);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_load(void **state)
{
    (void)state;
    char path[] = "/tmp/psc_test_job_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    psc_job_spec_t s;
    char err[1024];

    write_file(path, design_example);
    int rc = psc_job_spec_load(path, &s, err, sizeof err);
    if (rc) fail_msg("%s", err);
    assert_int_equal(s.num_layers, 5);
    psc_job_spec_t p;
    parse_ok(design_example, &p);
    assert_string_equal(s.job_id, p.job_id);
    psc_job_spec_deinit(&p);
    psc_job_spec_deinit(&s);

    char want[512];
    /* Syntax error on line 3. */
    write_file(path, "{\n  \"model\": {},\n  \"optimizer\": {\"name\": \"sgd\",}\n}\n");
    assert_int_equal(psc_job_spec_load(path, &s, err, sizeof err), PSC_ECONFIG);
    snprintf(want, sizeof want, "job spec %s: invalid JSON at line 3", path);
    if (strncmp(err, want, strlen(want)) != 0) fail_msg("\"%s\" does not start with \"%s\"", err, want);
    assert_spec_empty(&s);

    /* A schema error after a successful model parse frees the layers. */
    write_file(path, "{\"model\": {\"input_shape\": [4], \"layers\": [{\"type\": \"dense\", \"units\": 2}]},"
                     " \"optimizer\": {\"name\": \"sgd\"}, \"epochs\": -1}");
    assert_int_equal(psc_job_spec_load(path, &s, err, sizeof err), PSC_ECONFIG);
    snprintf(want, sizeof want, "job spec %s: epochs: expected a positive integer", path);
    if (strncmp(err, want, strlen(want)) != 0) fail_msg("\"%s\" does not start with \"%s\"", err, want);
    assert_spec_empty(&s);

    unlink(path);
    assert_int_equal(psc_job_spec_load(path, &s, err, sizeof err), PSC_ECONFIG);
    snprintf(want, sizeof want, "job spec %s: cannot read: No such file or directory", path);
    assert_string_equal(err, want);
    assert_spec_empty(&s);

    assert_int_equal(psc_job_spec_load("/tmp", &s, err, sizeof err), PSC_ECONFIG);
    assert_string_equal(err, "job spec /tmp: cannot read: Is a directory");
}

/* ---- validation at start (issue 16 item 5) ---- */

/* The layers against the input shape: refused by the parse itself (so a Submit
 * is refused too), the message naming the layer's key. */
static void test_model_checked_at_parse(void **state)
{
    (void)state;
    char buf[2048];
    /* conv2d on a rank-1 input */
    expect_error("{\"model\": {\"input_shape\": [784], \"layers\": [{\"type\": \"conv2d\", \"filters\": 4, "
                 "\"kernel_size\": 3}, {\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": 10}]}, "
                 "\"optimizer\": {\"name\": \"sgd\"}}",
                 "job spec: model.layers[0] (conv2d): conv2d needs an image input: model.input_shape [h, w, c], "
                 "got [784]");
    /* max_pool2d on a rank-1 input, behind a no-op flatten */
    expect_error("{\"model\": {\"input_shape\": [784], \"layers\": [{\"type\": \"flatten\"}, {\"type\": "
                 "\"max_pool2d\"}, {\"type\": \"dense\", \"units\": 10}]}, \"optimizer\": {\"name\": \"sgd\"}}",
                 "job spec: model.layers[1] (max_pool2d): max_pool2d needs an image input: model.input_shape");
    /* max_pool2d after a flatten of an image */
    expect_error(spec3(buf, sizeof buf, MLP ", {\"type\": \"max_pool2d\"}, {\"type\": \"dense\", \"units\": 10}", ADAM,
                       ""),
                 "job spec: model.layers[2] (max_pool2d): input is (10), flat since model.layers[0] (flatten); "
                 "max_pool2d needs an image input");
    /* a valid window larger than the feature map: 28 -> pool 4 -> 7 -> conv 9 */
    expect_error(spec3(buf, sizeof buf,
                       "{\"type\": \"max_pool2d\", \"pool_size\": 4}, {\"type\": \"conv2d\", \"filters\": 2, "
                       "\"kernel_size\": 9}, " MLP,
                       ADAM, ""),
                 "job spec: model.layers[1] (conv2d): kernel_size (9, 9) does not fit input (7, 7, 1)");
    expect_error(spec3(buf, sizeof buf, "{\"type\": \"max_pool2d\", \"pool_size\": 29}, " MLP, ADAM, ""),
                 "job spec: model.layers[0] (max_pool2d): pool_size (29, 29) does not fit input (28, 28, 1)");
    /* ...while padding "same" takes it, as in TensorFlow */
    psc_job_spec_t s;
    parse_ok(spec3(buf, sizeof buf, "{\"type\": \"max_pool2d\", \"pool_size\": 29, \"padding\": \"same\"}, " MLP,
                   ADAM, ""),
             &s);
    psc_job_spec_deinit(&s);
    /* dense on an image: flatten missing */
    expect_error(spec3(buf, sizeof buf, "{\"type\": \"dense\", \"units\": 10}", ADAM, ""),
                 "job spec: model.layers[0] (dense): input is (28, 28, 1); add a flatten layer before it");
    /* the output still an image, or a single logit */
    expect_error(spec3(buf, sizeof buf, "{\"type\": \"conv2d\", \"filters\": 2, \"kernel_size\": 3}", ADAM, ""),
                 "job spec: model.layers[0] (conv2d): the model's output is (26, 26, 2)");
    expect_error(spec3(buf, sizeof buf, "{\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": 1}", ADAM, ""),
                 "job spec: model.layers[1] (dense): the model's output has 1 unit");
    /* the key errors still come first */
    expect_error("{\"model\": {\"input_shape\": [784], \"layers\": [{\"type\": \"conv2d\", \"filters\": 4, "
                 "\"kernel_size\": 3}]}, \"optimizer\": {\"name\": \"sgd\"}, \"epoch\": 2}",
                 "job spec: epoch: unknown key");
}

/* A cluster from JSON, for psc_job_spec_check. */
static void cluster_of(const char *json, psc_cluster_t *c)
{
    char err[512];
    if (psc_cluster_parse(json, c, err, sizeof err)) fail_msg("%s", err);
}

static void test_check_cluster(void **state)
{
    (void)state;
    char buf[2048], err[512];
    psc_job_spec_t s;
    psc_cluster_t two, three, no_ps, ps_only;
    cluster_of("{\"ps\": [\"p:1\"], \"worker\": [\"w0:1\", \"w1:1\"]}", &two);
    cluster_of("{\"ps\": [\"p:1\"], \"chief\": [\"c:1\"], \"worker\": [\"w0:1\", \"w1:1\"], \"evaluator\": [\"e:1\"]}",
               &three);
    cluster_of("{\"worker\": [\"w0:1\"]}", &no_ps);
    cluster_of("{\"ps\": [\"p:1\"]}", &ps_only);

    /* N must be the cluster's training replicas: chief + workers, not the evaluator */
    parse_ok(spec3(buf, sizeof buf, MLP, ADAM, "\"sync\": {\"replicas_to_aggregate\": 2, \"total_num_replicas\": 3}"),
             &s);
    assert_int_equal(psc_job_spec_check(&s, &three, err, sizeof err), 0);
    assert_int_equal(psc_job_spec_check(&s, &two, err, sizeof err), PSC_ECONFIG);
    assert_string_equal(err, "job spec: sync.total_num_replicas is 3 but the cluster has 2 training replicas "
                             "(chief + workers): set it to 2");
    psc_job_spec_deinit(&s);
    /* R > N (several batches per replica) and R < N (backup workers) are fine */
    parse_ok(spec3(buf, sizeof buf, MLP, ADAM, "\"sync\": {\"replicas_to_aggregate\": 5, \"total_num_replicas\": 2}"),
             &s);
    assert_int_equal(psc_job_spec_check(&s, &two, err, sizeof err), 0);
    psc_job_spec_deinit(&s);
    parse_ok(spec3(buf, sizeof buf, MLP, ADAM, "\"sync\": {\"replicas_to_aggregate\": 1, \"total_num_replicas\": 2}"),
             &s);
    assert_int_equal(psc_job_spec_check(&s, &two, err, sizeof err), 0);
    assert_int_equal(psc_job_spec_check(&s, &three, err, sizeof err), PSC_ECONFIG);
    assert_non_null(strstr(err, "sync.total_num_replicas is 2 but the cluster has 3 training replicas"));
    psc_job_spec_deinit(&s);

    /* asynchronous: any replica count; but a job needs a ps and a replica */
    parse_ok(spec3(buf, sizeof buf, MLP, ADAM, ""), &s);
    assert_int_equal(psc_job_spec_check(&s, &two, err, sizeof err), 0);
    assert_int_equal(psc_job_spec_check(&s, &three, err, sizeof err), 0);
    assert_int_equal(psc_job_spec_check(&s, &no_ps, err, sizeof err), PSC_ECONFIG);
    assert_string_equal(err, "cluster: no ps task; a job needs at least one ps_server");
    assert_int_equal(psc_job_spec_check(&s, &ps_only, err, sizeof err), PSC_ECONFIG);
    assert_string_equal(err, "cluster: no chief or worker task; a job needs at least one training replica");

    /* a hand-built spec that was never parsed gets the model check too */
    s.layers[1].units = 1;
    assert_int_equal(psc_job_spec_check(&s, &two, err, sizeof err), PSC_ECONFIG);
    assert_string_equal(err, "job spec: model.layers[1] (dense): the model's output has 1 unit; sparse softmax "
                             "cross-entropy needs at least 2 classes");
    psc_job_spec_deinit(&s);
    psc_cluster_deinit(&two);
    psc_cluster_deinit(&three);
    psc_cluster_deinit(&no_ps);
    psc_cluster_deinit(&ps_only);
}

/* The data files: PREFIX-images-idx3-ubyte[.gz] and PREFIX-labels-idx1-ubyte[.gz]. */
static void test_check_data(void **state)
{
    (void)state;
    char dir[] = "/tmp/psc_test_data_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char buf[4096], path[256], want[512], err[1024];
    /* train: plain files; test: .gz files (what the reader tries first) */
    snprintf(path, sizeof path, "%s/tr-images-idx3-ubyte", dir);
    write_file(path, "x");
    snprintf(path, sizeof path, "%s/tr-labels-idx1-ubyte", dir);
    write_file(path, "x");
    snprintf(path, sizeof path, "%s/te-images-idx3-ubyte.gz", dir);
    write_file(path, "x");
    snprintf(path, sizeof path, "%s/te-labels-idx1-ubyte.gz", dir);
    write_file(path, "x");
    char data[600];
    snprintf(data, sizeof data, "\"data\": {\"train\": \"%s/tr\", \"test\": \"%s/te\"}", dir, dir);
    psc_job_spec_t s;
    parse_ok(spec3(buf, sizeof buf, MLP, ADAM, data), &s);
    assert_int_equal(psc_job_spec_check_data(&s, 1, 1, err, sizeof err), 0);
    assert_int_equal(psc_job_spec_check_data(&s, 0, 0, err, sizeof err), 0);
    psc_job_spec_deinit(&s);

    /* a train prefix with no files: named by its key */
    snprintf(data, sizeof data, "\"data\": {\"train\": \"%s/nope\", \"test\": \"%s/te\"}", dir, dir);
    parse_ok(spec3(buf, sizeof buf, MLP, ADAM, data), &s);
    assert_int_equal(psc_job_spec_check_data(&s, 1, 1, err, sizeof err), PSC_ECONFIG);
    snprintf(want, sizeof want, "job spec: data.train: cannot read %s/nope-images-idx3-ubyte[.gz]: No such file or "
             "directory", dir);
    assert_string_equal(err, want);
    assert_int_equal(psc_job_spec_check_data(&s, 0, 1, err, sizeof err), 0); /* the evaluator reads only test */
    psc_job_spec_deinit(&s);

    /* images without labels; a test prefix that is wrong */
    snprintf(path, sizeof path, "%s/tr-labels-idx1-ubyte", dir);
    unlink(path);
    snprintf(data, sizeof data, "\"data\": {\"train\": \"%s/tr\", \"test\": \"%s/tr\"}", dir, dir);
    parse_ok(spec3(buf, sizeof buf, MLP, ADAM, data), &s);
    assert_int_equal(psc_job_spec_check_data(&s, 1, 0, err, sizeof err), PSC_ECONFIG);
    snprintf(want, sizeof want, "job spec: data.train: cannot read %s/tr-labels-idx1-ubyte[.gz]", dir);
    if (strncmp(err, want, strlen(want)) != 0) fail_msg("\"%s\" does not start with \"%s\"", err, want);
    assert_int_equal(psc_job_spec_check_data(&s, 0, 1, err, sizeof err), PSC_ECONFIG);
    assert_non_null(strstr(err, "job spec: data.test: cannot read "));
    psc_job_spec_deinit(&s);

    snprintf(path, sizeof path, "%s/tr-images-idx3-ubyte", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/te-images-idx3-ubyte.gz", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/te-labels-idx1-ubyte.gz", dir);
    unlink(path);
    assert_int_equal(rmdir(dir), 0);
}

/* What the mains run: load, check against the cluster, check the data; every
 * message with the file's prefix, nothing left to free on error. */
static void test_load_checked(void **state)
{
    (void)state;
    char path[] = "/tmp/psc_test_job_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    psc_cluster_t two;
    cluster_of("{\"ps\": [\"p:1\"], \"worker\": [\"w0:1\", \"w1:1\"]}", &two);
    psc_job_spec_t s;
    char buf[2048], want[1024], err[1024];

    write_file(path, spec3(buf, sizeof buf, MLP, ADAM, "\"sync\": {\"replicas_to_aggregate\": 2, "
                                                      "\"total_num_replicas\": 3}"));
    assert_int_equal(psc_job_spec_load_checked(path, &two, 0, 0, &s, err, sizeof err), PSC_ECONFIG);
    snprintf(want, sizeof want, "job spec %s: sync.total_num_replicas is 3 but the cluster has 2 training replicas "
             "(chief + workers): set it to 2", path);
    assert_string_equal(err, want);
    assert_spec_empty(&s);

    write_file(path, spec3(buf, sizeof buf, MLP, ADAM, "\"data\": {\"train\": \"/nonexistent/x\"}"));
    assert_int_equal(psc_job_spec_load_checked(path, &two, 0, 0, &s, err, sizeof err), 0); /* the PS reads no data */
    psc_job_spec_deinit(&s);
    assert_int_equal(psc_job_spec_load_checked(path, &two, 1, 0, &s, err, sizeof err), PSC_ECONFIG);
    snprintf(want, sizeof want, "job spec %s: data.train: cannot read /nonexistent/x-images-idx3-ubyte[.gz]: No such "
             "file or directory", path);
    assert_string_equal(err, want);
    assert_spec_empty(&s);

    write_file(path, "{\"model\": {\"input_shape\": [784], \"layers\": [{\"type\": \"conv2d\", \"filters\": 4, "
                     "\"kernel_size\": 3}]}, \"optimizer\": {\"name\": \"sgd\"}}");
    assert_int_equal(psc_job_spec_load_checked(path, &two, 0, 0, &s, err, sizeof err), PSC_ECONFIG);
    snprintf(want, sizeof want, "job spec %s: model.layers[0] (conv2d): conv2d needs an image input: "
             "model.input_shape [h, w, c], got [784]", path);
    assert_string_equal(err, want);
    assert_spec_empty(&s);
    unlink(path);
    psc_cluster_deinit(&two);
}

static void test_repo_job_files(void **state)
{
    (void)state;
    /* The shipped example jobs must parse (when the source tree is known). */
    const char *src = getenv("PSC_SRC");
    if (!src) src = ".";
    char path[1024], err[1024];
    snprintf(path, sizeof path, "%s/deploy/jobs/mlp.json", src);
    if (access(path, R_OK) != 0) skip();
    psc_job_spec_t s;
    int rc = psc_job_spec_load(path, &s, err, sizeof err);
    if (rc) fail_msg("%s", err);
    assert_int_equal(s.num_layers, 4);
    assert_string_equal(s.layers[1].name, "dense");
    assert_string_equal(s.layers[3].name, "dense_2");
    psc_job_spec_deinit(&s);
    /* every shipped job passes the model checks of the parse */
    static const char *const others[] = {"cnn.json", "mlp_sync.json"};
    for (size_t i = 0; i < PSC_ARRAY_LEN(others); i++) {
        snprintf(path, sizeof path, "%s/deploy/jobs/%s", src, others[i]);
        if ((rc = psc_job_spec_load(path, &s, err, sizeof err))) fail_msg("%s", err);
        psc_job_spec_deinit(&s);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_design_example),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_optimizer_defaults),
        cmocka_unit_test(test_layers_and_keras_names),
        cmocka_unit_test(test_unknown_keys),
        cmocka_unit_test(test_wrong_types_and_ranges),
        cmocka_unit_test(test_overlap_push_pull),
        cmocka_unit_test(test_gradient_dtype),
        cmocka_unit_test(test_missing_and_bad_values),
        cmocka_unit_test(test_json_syntax),
        cmocka_unit_test(test_job_id),
        cmocka_unit_test(test_load),
        cmocka_unit_test(test_model_checked_at_parse),
        cmocka_unit_test(test_check_cluster),
        cmocka_unit_test(test_check_data),
        cmocka_unit_test(test_load_checked),
        cmocka_unit_test(test_failure_keys),
        cmocka_unit_test(test_repo_job_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
