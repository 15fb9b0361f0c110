/* test_job_spec — strict parsing of the JSON job spec.
 *
 * The DESIGN.md example is parsed and every resolved field checked; a minimal spec
 * gets every default; unnamed layers get Keras names. Each class of bad input
 * (unknown key at every level, wrong type, missing required key, bad enum value,
 * out-of-range number, a parameter of another optimizer, JSON syntax) must give
 * PSC_ECONFIG with a one-line message naming the key, and leave nothing to free.
 * The job id must be stable across formatting and change with the model.
 * FTRL, learning-rate schedules and sparse tables: defaults, every refusal naming
 * its key (table names against the model's variables included), and the job id:
 * unchanged for specs without them, changed by each of their settings.
 */
#include "job_spec.h"
#include "psc.h"
#include "wire.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

/* The example of DESIGN.md "Job spec", verbatim. */
static const char *const design_example =
    "{\"model\": {\"input_shape\": [28, 28, 1],\n"
    "           \"layers\": [{\"type\": \"conv2d\", \"filters\": 32, \"kernel_size\": 5, \"padding\": \"same\", "
    "\"activation\": \"relu\"},\n"
    "                      {\"type\": \"max_pool2d\", \"pool_size\": 2},\n"
    "                      {\"type\": \"flatten\"},\n"
    "                      {\"type\": \"dense\", \"units\": 128, \"activation\": \"relu\"},\n"
    "                      {\"type\": \"dense\", \"units\": 10}],\n"
    "           \"loss\": \"sparse_softmax_cross_entropy\"},\n"
    " \"optimizer\": {\"name\": \"adam\", \"learning_rate\": 0.001},\n"
    " \"data\": {\"train\": \"/usr/share/datasets/fashion-mnist/train\", \"test\": "
    "\"/usr/share/datasets/fashion-mnist/t10k\"},\n"
    " \"batch_size_per_replica\": 64, \"epochs\": 5,\n"
    " \"sync\": {\"replicas_to_aggregate\": 2, \"total_num_replicas\": 2},\n"
    " \"placement\": {\"strategy\": \"round_robin\", \"min_shard_bytes\": 0},\n"
    " \"checkpoint\": {\"every_steps\": 500, \"every_secs\": 600, \"keep\": 5},\n"
    " \"seed\": 42}\n";

static void assert_spec_empty(const psc_job_spec_t *s)
{
    assert_null(s->layers);
    assert_int_equal(s->num_layers, 0);
    assert_null(s->tables);
    assert_int_equal(s->num_tables, 0);
}

static void parse_ok(const char *json, psc_job_spec_t *s)
{
    char err[512] = "";
    int rc = psc_job_spec_parse(json, s, err, sizeof err);
    if (rc) fail_msg("unexpected error %d: %s\nfor %s", rc, err, json);
}

/* Expects PSC_ECONFIG, a "job spec: " one-line message containing `want`. */
static void expect_error_at(int line, const char *json, const char *want)
{
    psc_job_spec_t s;
    char err[512] = "";
    int rc = psc_job_spec_parse(json, &s, err, sizeof err);
    if (rc != PSC_ECONFIG) fail_msg("line %d: expected PSC_ECONFIG, got %d for %s", line, rc, json);
    if (strncmp(err, "job spec: ", 10) != 0) fail_msg("line %d: \"%s\" lacks the prefix", line, err);
    if (strchr(err, '\n')) fail_msg("line %d: \"%s\" is not one line", line, err);
    if (!strstr(err, want)) fail_msg("line %d: \"%s\" lacks \"%s\"", line, err, want);
    assert_spec_empty(&s);
    psc_job_spec_deinit(&s);
}
#define expect_error(json, want) expect_error_at(__LINE__, json, want)

/* A spec with the given layers, optimizer body and extra top-level members. */
static const char *spec3(char *buf, size_t n, const char *layers, const char *opt, const char *extra)
{
    snprintf(buf, n, "{\"model\": {\"input_shape\": [28, 28, 1], \"layers\": [%s]}, \"optimizer\": {%s}%s%s}", layers,
             opt, *extra ? ", " : "", extra);
    return buf;
}
#define MLP "{\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": 10}"
#define ADAM "\"name\": \"adam\""

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

    /* Each change of the model, optimizer, placement or seed changes it. */
    static const char *const variants[][2] = {
        {"\"units\": 128", "\"units\": 129"},
        {"\"learning_rate\": 0.001", "\"learning_rate\": 0.002"},
        {"\"seed\": 42", "\"seed\": 43"},
        {"\"kernel_size\": 5", "\"kernel_size\": 3"},
        {"\"padding\": \"same\"", "\"padding\": \"valid\""},
        {"\"name\": \"adam\"", "\"name\": \"rmsprop\""},
        {"\"min_shard_bytes\": 0", "\"min_shard_bytes\": 1024"},
        {"\"strategy\": \"round_robin\"", "\"strategy\": \"greedy_bytes\""},
        {"[28, 28, 1]", "[28, 28, 3]"},
        {"{\"type\": \"dense\", \"units\": 10}", "{\"type\": \"dense\", \"units\": 10, \"use_bias\": false}"},
        {"{\"type\": \"dense\", \"units\": 10}", "{\"type\": \"dense\", \"units\": 10, \"name\": \"logits\"}"},
    };
    for (size_t i = 0; i < PSC_ARRAY_LEN(variants); i++) {
        const char *at = strstr(design_example, variants[i][0]);
        assert_non_null(at);
        char text[2048];
        snprintf(text, sizeof text, "%.*s%s%s", (int)(at - design_example), design_example, variants[i][1],
                 at + strlen(variants[i][0]));
        parse_ok(text, &b);
        if (strcmp(a.job_id, b.job_id) == 0) fail_msg("variant %zu (%s) kept job id %s", i, variants[i][1], a.job_id);
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

/* ---- optimizer ftrl, schedules, tables ---- */

/* The job id of a spec that must parse (a static copy). */
static const char *job_id_of(const char *json)
{
    static char id[4][17];
    static int next;
    psc_job_spec_t s;
    parse_ok(json, &s);
    char *out = id[next++ % 4];
    memcpy(out, s.job_id, sizeof id[0]);
    psc_job_spec_deinit(&s);
    return out;
}

static void test_ftrl(void **state)
{
    (void)state;
    char buf[1024];
    psc_job_spec_t s;
    parse_ok(spec3(buf, sizeof buf, MLP, "\"name\": \"ftrl\"", ""), &s);
    assert_int_equal(s.optimizer.kind, PSC_OPT_FTRL);
    assert_true(s.optimizer.learning_rate == 0.001f);
    assert_true(s.optimizer.learning_rate_power == -0.5f);
    assert_true(s.optimizer.initial_accumulator_value == 0.1f);
    assert_true(s.optimizer.l1 == 0.0f && s.optimizer.l2 == 0.0f);
    assert_true(s.optimizer.momentum == 0.0f && s.optimizer.beta1 == 0.0f && s.optimizer.epsilon == 0.0f);
    assert_int_equal(s.optimizer.schedule.kind, PSC_LR_CONSTANT);
    psc_job_spec_deinit(&s);

    parse_ok(spec3(buf, sizeof buf, MLP,
                   "\"name\": \"ftrl\", \"learning_rate\": 0.05, \"learning_rate_power\": 0, "
                   "\"l1_regularization_strength\": 0.001, \"l2_regularization_strength\": 0.5, "
                   "\"initial_accumulator_value\": 1",
                   ""),
             &s);
    assert_true(s.optimizer.learning_rate == 0.05f);
    assert_true(s.optimizer.learning_rate_power == 0.0f);
    assert_true(s.optimizer.l1 == 0.001f);
    assert_true(s.optimizer.l2 == 0.5f);
    assert_true(s.optimizer.initial_accumulator_value == 1.0f);
    psc_job_spec_deinit(&s);
    assert_string_equal(psc_optim_name(PSC_OPT_FTRL), "ftrl");
    assert_string_equal(psc_optim_name((enum psc_optim_kind)99), "unknown");

    expect_error(spec3(buf, sizeof buf, MLP, "\"name\": \"ftrl\", \"learning_rate_power\": 0.5", ""),
                 "optimizer.learning_rate_power: expected a number <= 0, got 0.5");
    expect_error(spec3(buf, sizeof buf, MLP, "\"name\": \"ftrl\", \"l1_regularization_strength\": -1", ""),
                 "optimizer.l1_regularization_strength: expected a number >= 0");
    expect_error(spec3(buf, sizeof buf, MLP, "\"name\": \"ftrl\", \"l2_regularization_strength\": \"x\"", ""),
                 "optimizer.l2_regularization_strength: expected a number >= 0");
    expect_error(spec3(buf, sizeof buf, MLP, "\"name\": \"ftrl\", \"initial_accumulator_value\": 0", ""),
                 "optimizer.initial_accumulator_value: expected a number > 0");
    expect_error(spec3(buf, sizeof buf, MLP, "\"name\": \"ftrl\", \"epsilon\": 0.1", ""),
                 "optimizer.epsilon: not a parameter of ftrl");
    expect_error(spec3(buf, sizeof buf, MLP, "\"name\": \"ftrl\", \"l1\": 0.1", ""), "optimizer.l1: unknown key");
    expect_error(spec3(buf, sizeof buf, MLP, "\"name\": \"adagrad\", \"learning_rate_power\": -0.5", ""),
                 "optimizer.learning_rate_power: not a parameter of adagrad");
}

/* "schedule": {"name": ...} inside the optimizer: *s gets it. */
static void parse_schedule_ok(const char *sched, psc_job_spec_t *s)
{
    char opt[512], buf[1024];
    snprintf(opt, sizeof opt, "\"name\": \"sgd\", \"learning_rate\": 0.5, \"schedule\": %s", sched);
    parse_ok(spec3(buf, sizeof buf, MLP, opt, ""), s);
}

static void expect_schedule_error(int line, const char *sched, const char *want)
{
    char opt[1024], buf[2048];
    snprintf(opt, sizeof opt, "\"name\": \"adam\", \"schedule\": %s", sched);
    expect_error_at(line, spec3(buf, sizeof buf, MLP, opt, ""), want);
}
#define expect_sched_error(sched, want) expect_schedule_error(__LINE__, sched, want)

static void test_schedules(void **state)
{
    (void)state;
    psc_job_spec_t s;
    char buf[1024];
    parse_ok(spec3(buf, sizeof buf, MLP, ADAM, ""), &s);
    assert_int_equal(s.optimizer.schedule.kind, PSC_LR_CONSTANT);
    psc_job_spec_deinit(&s);
    parse_schedule_ok("{\"name\": \"constant\"}", &s);
    assert_int_equal(s.optimizer.schedule.kind, PSC_LR_CONSTANT);
    psc_job_spec_deinit(&s);

    parse_schedule_ok("{\"name\": \"exponential_decay\", \"decay_steps\": 1000, \"decay_rate\": 0.96}", &s);
    const psc_lr_schedule_t *sc = &s.optimizer.schedule;
    assert_int_equal(sc->kind, PSC_LR_EXPONENTIAL);
    assert_int_equal(sc->decay_steps, 1000);
    assert_true(sc->decay_rate == 0.96f);
    assert_int_equal(sc->staircase, 0);
    psc_job_spec_deinit(&s);
    parse_schedule_ok("{\"name\": \"exponential_decay\", \"decay_steps\": 5, \"decay_rate\": 2, \"staircase\": true}",
                      &s);
    assert_int_equal(s.optimizer.schedule.staircase, 1);
    assert_true(s.optimizer.schedule.decay_rate == 2.0f);
    psc_job_spec_deinit(&s);

    parse_schedule_ok("{\"name\": \"piecewise_constant\", \"boundaries\": [0, 100, 200], \"values\": [1, 0.5, 0.1, "
                      "0.01]}",
                      &s);
    sc = &s.optimizer.schedule;
    assert_int_equal(sc->kind, PSC_LR_PIECEWISE);
    assert_int_equal(sc->nboundaries, 3);
    assert_int_equal(sc->boundaries[0], 0);
    assert_int_equal(sc->boundaries[2], 200);
    assert_true(sc->values[0] == 1.0f && sc->values[1] == 0.5f && sc->values[3] == 0.01f);
    psc_job_spec_deinit(&s);

    parse_schedule_ok("{\"name\": \"cosine_decay\", \"decay_steps\": 10000}", &s);
    sc = &s.optimizer.schedule;
    assert_int_equal(sc->kind, PSC_LR_COSINE);
    assert_int_equal(sc->decay_steps, 10000);
    assert_true(sc->alpha == 0.0f && sc->warmup_target == 0.0f);
    assert_int_equal(sc->warmup_steps, 0);
    psc_job_spec_deinit(&s);
    parse_schedule_ok("{\"name\": \"cosine_decay\", \"decay_steps\": 10, \"alpha\": 1, \"warmup_steps\": 5, "
                      "\"warmup_target\": 2.5}",
                      &s);
    sc = &s.optimizer.schedule;
    assert_true(sc->alpha == 1.0f && sc->warmup_target == 2.5f);
    assert_int_equal(sc->warmup_steps, 5);
    psc_job_spec_deinit(&s);

    expect_sched_error("3", "optimizer.schedule: expected an object, got 3");
    expect_sched_error("{}", "optimizer.schedule.name: missing");
    expect_sched_error("{\"name\": \"linear\"}", "optimizer.schedule.name: unknown value \"linear\"");
    expect_sched_error("{\"name\": \"constant\", \"decay_steps\": 10}", "optimizer.schedule.decay_steps: unknown key");
    expect_sched_error("{\"name\": \"exponential_decay\", \"decay_rate\": 0.5}",
                       "optimizer.schedule.decay_steps: missing");
    expect_sched_error("{\"name\": \"exponential_decay\", \"decay_steps\": 10}",
                       "optimizer.schedule.decay_rate: missing");
    expect_sched_error("{\"name\": \"exponential_decay\", \"decay_steps\": 0, \"decay_rate\": 0.5}",
                       "optimizer.schedule.decay_steps: expected a positive integer");
    expect_sched_error("{\"name\": \"exponential_decay\", \"decay_steps\": 10, \"decay_rate\": 0}",
                       "optimizer.schedule.decay_rate: expected a number > 0");
    expect_sched_error("{\"name\": \"exponential_decay\", \"decay_steps\": 10, \"decay_rate\": 0.5, \"staircase\": 1}",
                       "optimizer.schedule.staircase: expected true or false");
    expect_sched_error("{\"name\": \"exponential_decay\", \"decay_steps\": 10, \"decay_rate\": 0.5, \"alpha\": 0}",
                       "optimizer.schedule.alpha: unknown key");
    expect_sched_error("{\"name\": \"piecewise_constant\", \"values\": [1]}", "optimizer.schedule.boundaries: missing");
    expect_sched_error("{\"name\": \"piecewise_constant\", \"boundaries\": [], \"values\": [1]}",
                       "optimizer.schedule.boundaries: expected an array of 1 to 16 non-negative integers");
    expect_sched_error("{\"name\": \"piecewise_constant\", \"boundaries\": [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17],"
                       " \"values\": [1]}",
                       "optimizer.schedule.boundaries: expected an array of 1 to 16");
    expect_sched_error("{\"name\": \"piecewise_constant\", \"boundaries\": [5, -1], \"values\": [1, 1, 1]}",
                       "optimizer.schedule.boundaries[1]: expected a non-negative integer, got -1");
    expect_sched_error("{\"name\": \"piecewise_constant\", \"boundaries\": [1.5], \"values\": [1, 1]}",
                       "optimizer.schedule.boundaries[0]: expected a non-negative integer, got 1.5");
    expect_sched_error("{\"name\": \"piecewise_constant\", \"boundaries\": [10, 10], \"values\": [1, 1, 1]}",
                       "optimizer.schedule.boundaries[1]: 10 is not greater than the boundary before it (10)");
    expect_sched_error("{\"name\": \"piecewise_constant\", \"boundaries\": [10, 20]}",
                       "optimizer.schedule.values: missing");
    expect_sched_error("{\"name\": \"piecewise_constant\", \"boundaries\": [10, 20], \"values\": [1, 0.5]}",
                       "optimizer.schedule.values: expected an array of 3 numbers > 0 (one more than boundaries)");
    expect_sched_error("{\"name\": \"piecewise_constant\", \"boundaries\": [10, 20], \"values\": [1, 0, 1]}",
                       "optimizer.schedule.values[1]: expected a number > 0");
    expect_sched_error("{\"name\": \"piecewise_constant\", \"boundaries\": [10], \"values\": [1, \"x\"]}",
                       "optimizer.schedule.values[1]: expected a number > 0");
    expect_sched_error("{\"name\": \"piecewise_constant\", \"boundaries\": [10], \"values\": [1e39, 1]}",
                       "optimizer.schedule.values[0]: expected a number > 0 that fits a float32");
    expect_sched_error("{\"name\": \"cosine_decay\"}", "optimizer.schedule.decay_steps: missing");
    expect_sched_error("{\"name\": \"cosine_decay\", \"decay_steps\": 10, \"alpha\": 1.5}",
                       "optimizer.schedule.alpha: expected a number in [0, 1]");
    expect_sched_error("{\"name\": \"cosine_decay\", \"decay_steps\": 10, \"alpha\": -0.1}",
                       "optimizer.schedule.alpha: expected a number in [0, 1]");
    expect_sched_error("{\"name\": \"cosine_decay\", \"decay_steps\": 10, \"warmup_steps\": -1}",
                       "optimizer.schedule.warmup_steps: expected a non-negative integer");
    expect_sched_error("{\"name\": \"cosine_decay\", \"decay_steps\": 10, \"warmup_target\": -1}",
                       "optimizer.schedule.warmup_target: expected a number >= 0");
    expect_sched_error("{\"name\": \"cosine_decay\", \"decay_steps\": 10, \"staircase\": true}",
                       "optimizer.schedule.staircase: unknown key");
}

/* A spec with the MLP (variables global_step, dense/kernel, dense/bias) and these tables. */
static const char *tables_spec(char *buf, size_t n, const char *tables)
{
    char extra[4096];
    snprintf(extra, sizeof extra, "\"tables\": [%s]", tables);
    return spec3(buf, n, MLP, ADAM, extra);
}
#define T_EMB "{\"name\": \"emb\", \"rows\": 1000, \"dim\": 8}"

static void test_tables(void **state)
{
    (void)state;
    char buf[8192];
    psc_job_spec_t s;
    parse_ok(spec3(buf, sizeof buf, MLP, ADAM, ""), &s);
    assert_null(s.tables);
    assert_int_equal(s.num_tables, 0);
    psc_job_spec_deinit(&s);

    parse_ok(tables_spec(buf, sizeof buf,
                         T_EMB ", {\"name\": \"user/emb.v2-x\", \"rows\": 1099511627776, \"dim\": 4096, "
                               "\"initializer\": {\"name\": \"normal\", \"mean\": 0.5, \"stddev\": 0.01}, "
                               "\"partition_strategy\": \"div\", \"optimizer\": {\"name\": \"ftrl\", "
                               "\"l1_regularization_strength\": 0.1, \"schedule\": {\"name\": \"cosine_decay\", "
                               "\"decay_steps\": 100}}}, "
                               "{\"name\": \"z\", \"rows\": 1, \"dim\": 1, \"initializer\": {\"name\": \"zeros\"}}, "
                               "{\"name\": \"u\", \"rows\": 5, \"dim\": 2, \"initializer\": {\"name\": \"uniform\", "
                               "\"minval\": -1, \"maxval\": 2}}"),
             &s);
    assert_int_equal(s.num_tables, 4);
    const psc_table_spec_t *T = s.tables;
    assert_string_equal(T[0].name, "emb");
    assert_int_equal(T[0].rows, 1000);
    assert_int_equal(T[0].dim, 8);
    assert_int_equal(T[0].init.kind, PSC_INIT_UNIFORM);
    assert_true(T[0].init.a == -0.05f && T[0].init.b == 0.05f);
    assert_int_equal(T[0].partition, PSC_PART_MOD);
    assert_int_equal(T[0].own_optimizer, 0);
    assert_memory_equal(&T[0].optimizer, &s.optimizer, sizeof s.optimizer); /* a copy of the job's */
    assert_string_equal(T[1].name, "user/emb.v2-x");
    assert_int_equal(T[1].rows, (int64_t)1 << 40);
    assert_int_equal(T[1].dim, 4096);
    assert_int_equal(T[1].init.kind, PSC_INIT_NORMAL);
    assert_true(T[1].init.a == 0.5f && T[1].init.b == 0.01f);
    assert_int_equal(T[1].partition, PSC_PART_DIV);
    assert_int_equal(T[1].own_optimizer, 1);
    assert_int_equal(T[1].optimizer.kind, PSC_OPT_FTRL);
    assert_true(T[1].optimizer.l1 == 0.1f && T[1].optimizer.learning_rate_power == -0.5f);
    assert_true(T[1].optimizer.learning_rate == 0.001f);
    assert_int_equal(T[1].optimizer.schedule.kind, PSC_LR_COSINE);
    assert_int_equal(s.optimizer.kind, PSC_OPT_ADAM); /* the job's own is untouched */
    assert_int_equal(T[2].init.kind, PSC_INIT_ZEROS);
    assert_true(T[3].init.a == -1.0f && T[3].init.b == 2.0f);
    psc_job_spec_deinit(&s);
    assert_spec_empty(&s);

    /* normal's defaults; an empty list is no tables */
    parse_ok(tables_spec(buf, sizeof buf,
                         "{\"name\": \"n\", \"rows\": 3, \"dim\": 3, \"initializer\": {\"name\": "
                         "\"normal\"}}"),
             &s);
    assert_true(s.tables[0].init.a == 0.0f && s.tables[0].init.b == 0.05f);
    psc_job_spec_deinit(&s);
    parse_ok(tables_spec(buf, sizeof buf, ""), &s);
    assert_null(s.tables);
    psc_job_spec_deinit(&s);

    /* 64 tables are fine, 65 are not */
    char many[8192] = "";
    for (int i = 0; i < 65; i++) {
        size_t l = strlen(many);
        snprintf(many + l, sizeof many - l, "%s{\"name\": \"t%d\", \"rows\": 10, \"dim\": 2}", i ? ", " : "", i);
        if (i == 63) {
            parse_ok(tables_spec(buf, sizeof buf, many), &s);
            assert_int_equal(s.num_tables, 64);
            assert_string_equal(s.tables[63].name, "t63");
            psc_job_spec_deinit(&s);
        }
    }
    expect_error(tables_spec(buf, sizeof buf, many), "tables: expected an array of at most 64 tables");
}

static void test_table_errors(void **state)
{
    (void)state;
    char buf[8192]; /* room for the 4096-byte tables member and the rest */
    expect_error(spec3(buf, sizeof buf, MLP, ADAM, "\"tables\": {}"), "tables: expected an array");
    expect_error(tables_spec(buf, sizeof buf, "3"), "tables[0]: expected an object, got 3");
    expect_error(tables_spec(buf, sizeof buf, T_EMB ", {\"name\": \"e2\", \"rows\": 1, \"dim\": 1, \"size\": 3}"),
                 "tables[1].size: unknown key");
    expect_error(tables_spec(buf, sizeof buf, "{\"rows\": 10, \"dim\": 2}"), "tables[0].name: missing");
    expect_error(tables_spec(buf, sizeof buf, "{\"name\": 5, \"rows\": 10, \"dim\": 2}"),
                 "tables[0].name: expected a string");
    static const char *const bad_names[] = {
        "", "a b", "/emb", "emb/", "a//b", "é", "0123456789012345678901234567890123456789012345678901234567890123"};
    for (size_t i = 0; i < PSC_ARRAY_LEN(bad_names); i++) {
        char t[256];
        snprintf(t, sizeof t, "{\"name\": \"%s\", \"rows\": 10, \"dim\": 2}", bad_names[i]);
        expect_error(tables_spec(buf, sizeof buf, t), "tables[0].name: ");
        expect_error(tables_spec(buf, sizeof buf, t), "is not a valid table name");
    }
    /* the model's variables: equal, or one a /-prefix of the other */
    static const char *const clashes[] = {"global_step", "dense/kernel", "dense", "dense/bias/x", "global_step/a"};
    for (size_t i = 0; i < PSC_ARRAY_LEN(clashes); i++) {
        char t[256];
        snprintf(t, sizeof t, "{\"name\": \"%s\", \"rows\": 10, \"dim\": 2}", clashes[i]);
        expect_error(tables_spec(buf, sizeof buf, t), "tables[0].name: ");
        expect_error(tables_spec(buf, sizeof buf, t), "clashes with the model variable");
    }
    expect_error(tables_spec(buf, sizeof buf, "{\"name\": \"dense\", \"rows\": 10, \"dim\": 2}"),
                 "tables[0].name: \"dense\" clashes with the model variable \"dense/kernel\"");
    /* near misses are fine: a layer without variables, a longer name, another layer's name */
    psc_job_spec_t s;
    parse_ok(tables_spec(buf, sizeof buf,
                         "{\"name\": \"flatten\", \"rows\": 1, \"dim\": 1}, {\"name\": \"dense_1\", \"rows\": 1, "
                         "\"dim\": 1}, {\"name\": \"dense/kernelx\", \"rows\": 1, \"dim\": 1}, {\"name\": "
                         "\"global_steps\", \"rows\": 1, \"dim\": 1}"),
             &s);
    assert_int_equal(s.num_tables, 4);
    psc_job_spec_deinit(&s);
    /* and among tables */
    expect_error(tables_spec(buf, sizeof buf, T_EMB ", " T_EMB),
                 "tables[1].name: \"emb\" clashes with tables[0].name \"emb\"");
    expect_error(tables_spec(buf, sizeof buf, "{\"name\": \"emb/a\", \"rows\": 1, \"dim\": 1}, " T_EMB),
                 "tables[1].name: \"emb\" clashes with tables[0].name \"emb/a\"");

    expect_error(tables_spec(buf, sizeof buf, "{\"name\": \"e\", \"dim\": 2}"), "tables[0].rows: missing");
    expect_error(tables_spec(buf, sizeof buf, "{\"name\": \"e\", \"rows\": 0, \"dim\": 2}"),
                 "tables[0].rows: expected an integer 1..1099511627776, got 0");
    expect_error(tables_spec(buf, sizeof buf, "{\"name\": \"e\", \"rows\": 1099511627777, \"dim\": 2}"),
                 "tables[0].rows: expected an integer 1..1099511627776, got 1099511627777");
    expect_error(tables_spec(buf, sizeof buf, "{\"name\": \"e\", \"rows\": 1.5, \"dim\": 2}"),
                 "tables[0].rows: expected an integer 1..1099511627776");
    expect_error(tables_spec(buf, sizeof buf, "{\"name\": \"e\", \"rows\": \"10\", \"dim\": 2}"),
                 "tables[0].rows: expected an integer");
    expect_error(tables_spec(buf, sizeof buf, "{\"name\": \"e\", \"rows\": 10}"), "tables[0].dim: missing");
    expect_error(tables_spec(buf, sizeof buf, T_EMB ", {\"name\": \"e\", \"rows\": 10, \"dim\": 0}"),
                 "tables[1].dim: expected an integer 1..4096, got 0");
    expect_error(tables_spec(buf, sizeof buf, T_EMB ", {\"name\": \"e\", \"rows\": 10, \"dim\": 4097}"),
                 "tables[1].dim: expected an integer 1..4096, got 4097");

#define T_INIT(i) "{\"name\": \"e\", \"rows\": 10, \"dim\": 2, \"initializer\": " i "}"
    expect_error(tables_spec(buf, sizeof buf, T_INIT("\"zeros\"")), "tables[0].initializer: expected an object");
    expect_error(tables_spec(buf, sizeof buf, T_INIT("{}")), "tables[0].initializer.name: missing");
    expect_error(tables_spec(buf, sizeof buf, T_INIT("{\"name\": \"glorot_uniform\"}")),
                 "tables[0].initializer.name: unknown value \"glorot_uniform\" (expected uniform|normal|zeros)");
    expect_error(tables_spec(buf, sizeof buf, T_INIT("{\"name\": \"uniform\", \"stddev\": 1}")),
                 "tables[0].initializer.stddev: unknown key");
    expect_error(tables_spec(buf, sizeof buf, T_INIT("{\"name\": \"zeros\", \"minval\": 0}")),
                 "tables[0].initializer.minval: unknown key");
    expect_error(tables_spec(buf, sizeof buf, T_INIT("{\"name\": \"uniform\", \"minval\": 0.1, \"maxval\": 0.1}")),
                 "tables[0].initializer.maxval: 0.1 is not greater than minval 0.1");
    expect_error(tables_spec(buf, sizeof buf, T_INIT("{\"name\": \"uniform\", \"minval\": 0.06}")),
                 "tables[0].initializer.maxval: 0.05 is not greater than minval 0.06");
    expect_error(tables_spec(buf, sizeof buf, T_INIT("{\"name\": \"uniform\", \"maxval\": \"1\"}")),
                 "tables[0].initializer.maxval: expected a number, got \"1\"");
    expect_error(tables_spec(buf, sizeof buf, T_INIT("{\"name\": \"uniform\", \"maxval\": 1e39}")),
                 "tables[0].initializer.maxval: 1e+39 does not fit a float32");
    expect_error(tables_spec(buf, sizeof buf, T_INIT("{\"name\": \"normal\", \"stddev\": 0}")),
                 "tables[0].initializer.stddev: expected a number > 0");
    expect_error(tables_spec(buf, sizeof buf, T_INIT("{\"name\": \"normal\", \"mean\": null}")),
                 "tables[0].initializer.mean: expected a number");
    expect_error(tables_spec(buf, sizeof buf, T_INIT("{\"name\": \"normal\", \"stddev\": 1e38}")),
                 "tables[0].initializer: mean 0 and stddev 1e+38 would give values beyond float32");
#undef T_INIT
    expect_error(tables_spec(buf, sizeof buf,
                             "{\"name\": \"e\", \"rows\": 10, \"dim\": 2, \"partition_strategy\": "
                             "\"range\"}"),
                 "tables[0].partition_strategy: unknown value \"range\" (expected mod|div)");
    expect_error(tables_spec(buf, sizeof buf, "{\"name\": \"e\", \"rows\": 10, \"dim\": 2, \"optimizer\": 1}"),
                 "tables[0].optimizer: expected an object");
    expect_error(tables_spec(buf, sizeof buf, "{\"name\": \"e\", \"rows\": 10, \"dim\": 2, \"optimizer\": {}}"),
                 "tables[0].optimizer.name: missing");
    expect_error(tables_spec(buf, sizeof buf,
                             "{\"name\": \"e\", \"rows\": 10, \"dim\": 2, \"optimizer\": "
                             "{\"name\": \"ftrl\", \"beta1\": 0.9}}"),
                 "tables[0].optimizer.beta1: not a parameter of ftrl");
    expect_error(tables_spec(buf, sizeof buf,
                             "{\"name\": \"e\", \"rows\": 10, \"dim\": 2, \"optimizer\": "
                             "{\"name\": \"adam\", \"beta2\": 0.9999999999}}"),
                 "tables[0].optimizer.beta2: rounds to 1 as a float32");
    expect_error(tables_spec(buf, sizeof buf,
                             "{\"name\": \"e\", \"rows\": 10, \"dim\": 2, \"optimizer\": "
                             "{\"name\": \"sgd\", \"schedule\": {\"name\": \"cosine_decay\"}}}"),
                 "tables[0].optimizer.schedule.decay_steps: missing");
    /* the model is checked before the tables: its error comes first */
    expect_error("{\"model\": {\"input_shape\": [784], \"layers\": [{\"type\": \"dense\", \"units\": 1}]}, "
                 "\"optimizer\": {\"name\": \"sgd\"}, \"tables\": [5]}",
                 "at least 2");
}

/* Job ids: unchanged for specs without the new keys (the ids of psc-job-v1 before
 * tables, schedules and ftrl existed), changed by every new setting. */
static void test_job_id_new_keys(void **state)
{
    (void)state;
    char buf[8192], buf2[8192];
    assert_string_equal(job_id_of(design_example), "b22ce90fabdb9546");
    assert_string_equal(job_id_of("{\"model\": {\"input_shape\": [784], \"layers\": [{\"type\": \"dense\", \"units\": "
                                  "10}]}, \"optimizer\": {\"name\": \"rmsprop\", \"momentum\": 0.5}}"),
                        "4923250d49a3617e");
    assert_string_equal(job_id_of("{\"model\": {\"input_shape\": [784], \"layers\": [{\"type\": \"dense\", \"units\": "
                                  "10}]}, \"optimizer\": {\"name\": \"adagrad\"}}"),
                        "e91f07548f607828");
    /* spelled-out defaults are the same job */
    const char *plain = job_id_of(spec3(buf, sizeof buf, MLP, ADAM, ""));
    assert_string_equal(job_id_of(spec3(buf, sizeof buf, MLP, ADAM ", \"schedule\": {\"name\": \"constant\"}", "")),
                        plain);
    assert_string_equal(job_id_of(spec3(buf, sizeof buf, MLP, ADAM, "\"tables\": []")), plain);
    assert_string_not_equal(job_id_of(tables_spec(buf, sizeof buf, T_EMB)), plain);
    assert_string_equal(
        job_id_of(tables_spec(buf, sizeof buf, T_EMB)),
        job_id_of(tables_spec(buf2, sizeof buf2,
                              "{\"dim\": 8, \"name\": \"emb\", \"rows\": 1000, \"initializer\": "
                              "{\"name\": \"uniform\", \"minval\": -0.05, \"maxval\": 0.05}, "
                              "\"partition_strategy\": \"mod\", \"optimizer\": {\"name\": \"adam\"}}")));

    /* a base with every new key, and one change at a time */
    static const char *const base =
        "{\"model\": {\"input_shape\": [784], \"layers\": [{\"type\": \"dense\", \"units\": 10}]}, "
        "\"optimizer\": {\"name\": \"ftrl\", \"learning_rate_power\": -0.5, \"l1_regularization_strength\": 0.1, "
        "\"l2_regularization_strength\": 0.2, \"initial_accumulator_value\": 0.1, "
        "\"schedule\": {\"name\": \"piecewise_constant\", \"boundaries\": [10, 20], \"values\": [0.3, 0.2, 0.1]}}, "
        "\"tables\": [{\"name\": \"user\", \"rows\": 1000, \"dim\": 8, \"partition_strategy\": \"mod\", "
        "\"initializer\": {\"name\": \"normal\", \"mean\": 0, \"stddev\": 0.05}, "
        "\"optimizer\": {\"name\": \"adagrad\", \"schedule\": {\"name\": \"exponential_decay\", \"decay_steps\": 100, "
        "\"decay_rate\": 0.5, \"staircase\": false}}}, "
        "{\"name\": \"item\", \"rows\": 50, \"dim\": 4, \"optimizer\": {\"name\": \"sgd\", \"schedule\": "
        "{\"name\": \"cosine_decay\", \"decay_steps\": 100, \"alpha\": 0.1, \"warmup_steps\": 5, \"warmup_target\": "
        "1}}}]}";
    static const char *const variants[][2] = {
        {"\"learning_rate_power\": -0.5", "\"learning_rate_power\": -0.25"},
        {"\"l1_regularization_strength\": 0.1", "\"l1_regularization_strength\": 0.3"},
        {"\"l2_regularization_strength\": 0.2", "\"l2_regularization_strength\": 0.3"},
        {"\"initial_accumulator_value\": 0.1,", "\"initial_accumulator_value\": 0.2,"},
        {"[10, 20]", "[10, 21]"},
        {"[0.3, 0.2, 0.1]", "[0.3, 0.2, 0.05]"},
        {"{\"name\": \"piecewise_constant\", \"boundaries\": [10, 20], \"values\": [0.3, 0.2, 0.1]}",
         "{\"name\": \"constant\"}"},
        {"\"name\": \"user\"", "\"name\": \"users\""},
        {"\"rows\": 1000", "\"rows\": 1001"},
        {"\"dim\": 8", "\"dim\": 16"},
        {"\"partition_strategy\": \"mod\"", "\"partition_strategy\": \"div\""},
        {"\"name\": \"normal\", \"mean\": 0,", "\"name\": \"normal\", \"mean\": 0.5,"},
        {"\"stddev\": 0.05", "\"stddev\": 0.06"},
        {"{\"name\": \"normal\", \"mean\": 0, \"stddev\": 0.05}", "{\"name\": \"zeros\"}"},
        {"{\"name\": \"adagrad\",", "{\"name\": \"adagrad\", \"learning_rate\": 0.5,"},
        {"\"decay_steps\": 100, \"decay_rate\"", "\"decay_steps\": 101, \"decay_rate\""},
        {"\"decay_rate\": 0.5", "\"decay_rate\": 0.6"},
        {"\"staircase\": false", "\"staircase\": true"},
        {"\"alpha\": 0.1", "\"alpha\": 0.2"},
        {"\"warmup_steps\": 5", "\"warmup_steps\": 6"},
        {"\"warmup_target\": 1", "\"warmup_target\": 2"},
        {"\"cosine_decay\", \"decay_steps\": 100", "\"cosine_decay\", \"decay_steps\": 99"},
        {"\"rows\": 50, \"dim\": 4, \"optimizer\": {\"name\": \"sgd\", \"schedule\": {\"name\": \"cosine_decay\", "
         "\"decay_steps\": 100, \"alpha\": 0.1, \"warmup_steps\": 5, \"warmup_target\": 1}}}",
         "\"rows\": 50, \"dim\": 4}"},
        {", {\"name\": \"item\"", ", {\"name\": \"item2\", \"rows\": 1, \"dim\": 1}, {\"name\": \"item\""},
    };
    char base_id[17];
    snprintf(base_id, sizeof base_id, "%s", job_id_of(base));
    for (size_t i = 0; i < PSC_ARRAY_LEN(variants); i++) {
        const char *at = strstr(base, variants[i][0]);
        if (!at) fail_msg("variant %zu: \"%s\" not in the base", i, variants[i][0]);
        char text[4096];
        snprintf(text, sizeof text, "%.*s%s%s", (int)(at - base), base, variants[i][1], at + strlen(variants[i][0]));
        if (strcmp(job_id_of(text), base_id) == 0)
            fail_msg("variant %zu (%s) kept job id %s", i, variants[i][1], base_id);
    }
}

/* The fuzzer's seeds are valid specs (each is a starting point for mutations). */
static void test_fuzz_seeds(void **state)
{
    (void)state;
    const char *src = getenv("PSC_SRC");
    if (!src) src = ".";
    static const char *const seeds[] = {"mlp.json", "tables_ftrl.json", "tables_div_cosine.json",
                                        "schedule_piecewise.json"};
    char path[1024], err[1024];
    snprintf(path, sizeof path, "%s/tests/fuzz/seeds/fuzz_job_spec/mlp.json", src);
    if (access(path, R_OK) != 0) skip();
    for (size_t i = 0; i < PSC_ARRAY_LEN(seeds); i++) {
        psc_job_spec_t s;
        snprintf(path, sizeof path, "%s/tests/fuzz/seeds/fuzz_job_spec/%s", src, seeds[i]);
        if (psc_job_spec_load(path, &s, err, sizeof err)) fail_msg("%s", err);
        if (i > 0) assert_true(s.num_tables > 0 || s.optimizer.schedule.kind != PSC_LR_CONSTANT);
        psc_job_spec_deinit(&s);
    }
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
        cmocka_unit_test(test_ftrl),
        cmocka_unit_test(test_schedules),
        cmocka_unit_test(test_tables),
        cmocka_unit_test(test_table_errors),
        cmocka_unit_test(test_job_id_new_keys),
        cmocka_unit_test(test_fuzz_seeds),
        cmocka_unit_test(test_load),
        cmocka_unit_test(test_model_checked_at_parse),
        cmocka_unit_test(test_check_cluster),
        cmocka_unit_test(test_check_data),
        cmocka_unit_test(test_load_checked),
        cmocka_unit_test(test_repo_job_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
