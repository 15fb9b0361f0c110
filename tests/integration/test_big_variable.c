/* test_big_variable — a 64 MiB variable (4096 x 4096 float32) travels in chunks
 * through real ps_server processes and comes back bit-exactly: initialize,
 * pull, push-pull one SGD step (w - lr*g computed here must equal the PS's
 * result bit for bit). Once on one PS, once partitioned along axis 0 across two
 * PS (min_shard_bytes 16 MiB => 2 parts).
 */
#include "it_util.h"
#include "placement.h"
#include "ps_client.h"
#include "rng.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#define ROWS 4096
#define COLS 4096

static void run_case(int nps, uint64_t min_shard_bytes)
{
    it_proc_t ps[2];
    memset(ps, 0, sizeof ps);
    char cluster_json[256] = "";
    psc_cluster_t cl;
    memset(&cl, 0, sizeof cl);
    cl.n[PSC_JOB_PS] = nps;
    cl.addr[PSC_JOB_PS] = calloc((size_t)nps, sizeof(char *));
    for (int i = 0; i < nps; i++) {
        assert_int_equal(it_start_ps(&ps[i]), 0);
        cl.addr[PSC_JOB_PS][i] = ps[i].addr;
    }
    (void)cluster_json;

    psc_var_desc_t vars[2];
    memset(vars, 0, sizeof vars);
    snprintf(vars[0].name, sizeof vars[0].name, "global_step");
    vars[0].numel = 1;
    vars[0].is_step = 1;
    vars[0].layer = -1;
    snprintf(vars[1].name, sizeof vars[1].name, "big/kernel");
    vars[1].rank = 2;
    vars[1].shape[0] = ROWS;
    vars[1].shape[1] = COLS;
    vars[1].numel = (int64_t)ROWS * COLS;
    psc_placed_var_t *placed;
    int nplaced;
    char err[512];
    assert_int_equal(psc_place(vars, 2, nps, PSC_PLACE_ROUND_ROBIN, min_shard_bytes, &placed, &nplaced, err,
                               sizeof err),
                     0);
    assert_int_equal(nplaced, nps == 1 ? 2 : 3);

    size_t n = (size_t)ROWS * COLS;
    float *init = malloc(n * 4), *got = malloc(n * 4), *g = malloc(n * 4);
    psc_rng_t rng;
    psc_rng_seed(&rng, 7);
    for (size_t i = 0; i < n; i++) {
        init[i] = (float)(psc_rng_uniform(&rng) * 2 - 1);
        g[i] = (float)(psc_rng_uniform(&rng) * 2 - 1);
    }
    ps_client_t *pc = ps_client_create(&cl, vars, 2, placed, nplaced, 0, 60000);
    psc_optim_config_t sgd = {.kind = PSC_OPT_SGD, .learning_rate = 0.5f};
    ps_model_origin_t origin;
    int rc = ps_client_create_model(pc, "0000000000000b16", &sgd, init, &origin, err, sizeof err);
    if (rc) fail_msg("create_model: %s", err);
    assert_true(origin.initialized);

    int64_t step = -1;
    memset(got, 0, n * 4);
    rc = ps_client_pull(pc, got, &step, err, sizeof err);
    if (rc) fail_msg("pull: %s", err);
    assert_int_equal(step, 0);
    assert_memory_equal(got, init, n * 4);

    rc = ps_client_push_pull(pc, g, got, 1, &step, err, sizeof err);
    if (rc) fail_msg("push_pull: %s", err);
    assert_int_equal(step, 1);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        float want = init[i] - 0.5f * g[i];
        if (memcmp(&want, &got[i], 4) != 0) bad++;
    }
    assert_int_equal(bad, 0);
    /* A second pull sees the same updated values. */
    float *again = malloc(n * 4);
    rc = ps_client_pull(pc, again, &step, err, sizeof err);
    if (rc) fail_msg("pull: %s", err);
    assert_memory_equal(again, got, n * 4);

    ps_client_destroy(pc);
    for (int i = 0; i < nps; i++) assert_int_equal(it_stop(&ps[i]), 0);
    free(again);
    free(init);
    free(got);
    free(g);
    free(placed);
    free(cl.addr[PSC_JOB_PS]);
}

static void test_one_ps(void **state)
{
    (void)state;
    run_case(1, 0);
}

static void test_partitioned_two_ps(void **state)
{
    (void)state;
    run_case(2, (uint64_t)16 << 20);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_ps),
        cmocka_unit_test(test_partitioned_two_ps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
