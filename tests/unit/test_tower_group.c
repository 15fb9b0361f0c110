/* test_tower_group — a worker's towers (worker/tower_group.c): the --devices syntax, and
 * the invariant of in-graph replication: T towers on slices of a batch, their
 * gradients averaged by slice size, give the gradient one tower computes on the
 * whole batch (and the same loss, hits and evaluation), for even and uneven
 * splits and for a batch smaller than the number of towers.
 */
#include "job_spec.h"
#include "model_spec.h"
#include "psc.h"
#include "rng.h"
#include "tower.h"
#include "tower_group.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static void test_parse_devices(void **state)
{
    (void)state;
    const tower_ops_t *b;
    int devs[PSC_MAX_TOWERS], n;
    char err[256];
    assert_int_equal(tower_group_parse_devices("cpu", &b, devs, &n, err, sizeof err), 0);
    assert_ptr_equal(b, &tower_cpu_ops);
    assert_int_equal(n, 1);
    assert_int_equal(tower_group_parse_devices("cpu,cpu,cpu", &b, devs, &n, err, sizeof err), 0);
    assert_int_equal(n, 3);
    /* auto: every visible GPU, else one CPU tower */
    assert_int_equal(tower_group_parse_devices(NULL, &b, devs, &n, err, sizeof err), 0);
    const tower_ops_t *cuda = tower_backend_find("cuda");
    if (cuda && cuda->device_count() > 0) {
        assert_ptr_equal(b, cuda);
        assert_int_equal(n, cuda->device_count());
    } else {
        assert_ptr_equal(b, &tower_cpu_ops);
        assert_int_equal(n, 1);
    }
    assert_int_not_equal(tower_group_parse_devices("tpu", &b, devs, &n, err, sizeof err), 0);
    assert_non_null(strstr(err, "\"tpu\""));
    assert_int_not_equal(tower_group_parse_devices("gpu:x", &b, devs, &n, err, sizeof err), 0);
    assert_int_not_equal(tower_group_parse_devices("gpu:-1", &b, devs, &n, err, sizeof err), 0);
    assert_int_not_equal(tower_group_parse_devices(",", &b, devs, &n, err, sizeof err), 0);
    assert_int_not_equal(
        tower_group_parse_devices("cpu,cpu,cpu,cpu,cpu,cpu,cpu,cpu,cpu,cpu,cpu,cpu,cpu,cpu,cpu,cpu,cpu", &b, devs, &n, err,
                             sizeof err),
        0);
    assert_non_null(strstr(err, "at most"));
    if (!cuda || cuda->device_count() == 0) {
        /* asking for a GPU that is not there is an error, never a silent CPU run */
        assert_int_not_equal(tower_group_parse_devices("gpu:0", &b, devs, &n, err, sizeof err), 0);
        assert_int_not_equal(tower_group_parse_devices("gpu", &b, devs, &n, err, sizeof err), 0);
    } else {
        assert_int_not_equal(tower_group_parse_devices("cpu,gpu:0", &b, devs, &n, err, sizeof err), 0);
        assert_non_null(strstr(err, "mixed"));
    }
}

static const char *CNN = "{\"model\": {\"input_shape\": [8, 8, 2], \"layers\": ["
                         "{\"type\": \"conv2d\", \"filters\": 4, \"kernel_size\": 3, \"activation\": \"relu\"},"
                         "{\"type\": \"max_pool2d\"},"
                         "{\"type\": \"conv2d\", \"filters\": 3, \"kernel_size\": 2, \"padding\": \"same\","
                         " \"activation\": \"tanh\"},"
                         "{\"type\": \"flatten\"},"
                         "{\"type\": \"dense\", \"units\": 6, \"activation\": \"sigmoid\"},"
                         "{\"type\": \"dense\", \"units\": 5}]},"
                         " \"optimizer\": {\"name\": \"sgd\"}, \"seed\": 3}";

typedef struct run {
    float loss;
    int correct;
    double eval_loss;
    int eval_correct;
    float *grads;
} run_t;

static void run_towers(const char *devices, const psc_job_spec_t *spec, const psc_var_desc_t *vars, int nvars,
                       const float *params, int64_t nparams, const float *x, const int32_t *y, int n, run_t *out)
{
    tower_group_t *ts;
    char err[256];
    assert_int_equal(tower_group_create(devices, spec, vars, nvars, 16, &ts, err, sizeof err), 0);
    assert_int_equal(tower_group_set_params(ts, params), 0);
    assert_int_equal(tower_group_train_step(ts, x, y, n, 99, &out->loss, &out->correct), 0);
    out->grads = malloc((size_t)nparams * sizeof(float));
    assert_int_equal(tower_group_get_grads(ts, out->grads), 0);
    out->eval_loss = 0;
    out->eval_correct = 0;
    assert_int_equal(tower_group_evaluate(ts, x, y, n, &out->eval_loss, &out->eval_correct), 0);
    tower_group_destroy(ts);
}

static void test_replication_invariant(void **state)
{
    (void)state;
    psc_job_spec_t spec;
    char err[256];
    assert_int_equal(psc_job_spec_parse(CNN, &spec, err, sizeof err), 0);
    psc_var_desc_t *vars;
    int nvars;
    assert_int_equal(psc_model_variables(&spec, &vars, &nvars, err, sizeof err), 0);
    int64_t *offsets = calloc((size_t)nvars, sizeof *offsets);
    int64_t nparams = tower_layout(vars, nvars, offsets);
    float *params = malloc((size_t)nparams * sizeof(float));
    tower_init_params(vars, nvars, 11, params);
    enum { MAXN = 16, FEAT = 8 * 8 * 2 };
    float *x = malloc(MAXN * FEAT * sizeof(float));
    int32_t y[MAXN];
    psc_rng_t r;
    psc_rng_seed(&r, 5);
    for (int i = 0; i < MAXN * FEAT; i++) x[i] = (float)(2 * psc_rng_uniform(&r) - 1);
    for (int i = 0; i < MAXN; i++) y[i] = (int32_t)(psc_rng_next(&r) % 5);

    static const struct {
        const char *devices;
        int n;
    } cases[] = {{"cpu,cpu", 16}, {"cpu,cpu", 7}, {"cpu,cpu,cpu", 16}, {"cpu,cpu,cpu,cpu", 3}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int n = cases[c].n;
        run_t one, many;
        run_towers("cpu", &spec, vars, nvars, params, nparams, x, y, n, &one);
        run_towers(cases[c].devices, &spec, vars, nvars, params, nparams, x, y, n, &many);
        double maxdiff = 0, maxabs = 0;
        for (int64_t k = 0; k < nparams; k++) {
            maxdiff = fmax(maxdiff, fabs((double)one.grads[k] - many.grads[k]));
            maxabs = fmax(maxabs, fabs((double)one.grads[k]));
        }
        printf("%-16s n=%2d: max |grad diff| %.2e (max |grad| %.2e), loss %.6f vs %.6f\n", cases[c].devices, n,
               maxdiff, maxabs, one.loss, many.loss);
        assert_true(maxabs > 1e-4); /* the model has real gradients to compare */
        assert_true(maxdiff <= 1e-5 * fmax(maxabs, 1.0));
        assert_true(fabs(one.loss - many.loss) <= 1e-5 * fmax(fabs(one.loss), 1.0));
        assert_int_equal(one.correct, many.correct);
        assert_true(fabs(one.eval_loss - many.eval_loss) <= 1e-4 * fmax(fabs(one.eval_loss), 1.0));
        assert_int_equal(one.eval_correct, many.eval_correct);
        free(one.grads);
        free(many.grads);
    }
    free(x);
    free(params);
    free(offsets);
    free(vars);
    psc_job_spec_deinit(&spec);
}

static void test_batch_too_small_for_towers(void **state)
{
    (void)state;
    psc_job_spec_t spec;
    char err[256];
    assert_int_equal(psc_job_spec_parse(CNN, &spec, err, sizeof err), 0);
    psc_var_desc_t *vars;
    int nvars;
    assert_int_equal(psc_model_variables(&spec, &vars, &nvars, err, sizeof err), 0);
    tower_group_t *ts;
    assert_int_not_equal(tower_group_create("cpu,cpu,cpu", &spec, vars, nvars, 2, &ts, err, sizeof err), 0);
    assert_non_null(strstr(err, "3 towers"));
    free(vars);
    psc_job_spec_deinit(&spec);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_devices),
        cmocka_unit_test(test_replication_invariant),
        cmocka_unit_test(test_batch_too_small_for_towers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
