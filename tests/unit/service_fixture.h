/* service_fixture.h — the model the in-process ps_server tests
 * (test_service_fence, test_service_replicas) serve. Header-only; include it
 * after cmocka.h. */
#ifndef PSC_TEST_SERVICE_FIXTURE_H
#define PSC_TEST_SERVICE_FIXTURE_H

#include "store.h"

/* Creates job's model in store: global_step (0) and "w" (n floats, values w),
 * SGD with learning rate 1 (a step subtracts the gradient, or sync's mean of
 * them); sync mode with *sync when it is non-NULL; then marks the job ready. */
static void svc_fixture_model(store_t *store, const char *job, const float *w, int n, const store_sync_cfg_t *sync)
{
    char err[512];
    psc_optim_config_t opt = {.kind = PSC_OPT_SGD, .learning_rate = 1.0f};
    store_var_spec_t specs[] = {{.name = "global_step", .rank = 0, .is_step = 1},
                                {.name = "w", .rank = 1, .shape = {n}}};
    int created = 0;
    assert_int_equal(store_create_vars(store, job, &opt, specs, 2, &created, err, sizeof err), 0);
    if (sync) assert_int_equal(store_set_sync(store, sync, err, sizeof err), 0);
    size_t bytes = (size_t)n * sizeof *w;
    int64_t zero = 0;
    assert_int_equal(store_assign(store, "w", 0, w, bytes, bytes, err, sizeof err), 0);
    assert_int_equal(store_assign(store, "global_step", 0, &zero, 8, 8, err, sizeof err), 0);
    assert_int_equal(store_set_ready(store, job, err, sizeof err), 0);
}

#endif
