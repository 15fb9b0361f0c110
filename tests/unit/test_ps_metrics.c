/* test_ps_metrics — the ps_server's metrics over a real store.
 *
 * The collector reports the store as it is at each scrape: variable count and
 * value bytes, ready, global_step (only where the shard holds it) and its rate
 * (0 on the first scrape, then the increase over the interval since the
 * previous scrape at least 1 s older; a step set back starts over); the
 * store's counters as counters. The byte counters add exactly, every RPC
 * method has its series from the start, NULL handles do nothing, and destroy
 * removes the collector.
 *
 * Through a real RPC server in this process (ps_service with metrics): a call
 * is counted once per method, failures (a refused Pull, an undecodable Push)
 * as errors too, and a sync Step parked until the other replica's Step is
 * observed with its wait (most of the 500 ms the test held the other back).
 */
#include "metrics.h"
#include "ps_metrics.h"
#include "psc.h"
#include "psc.pb-c.h"
#include "rpc.h"
#include "service.h"
#include "store.h"
#include "wire.h"

#include <pthread.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#define JOB "1a2b3c4d5e6f7a8b"

/* The value of the sample line `series` (name and labels); -1 when absent. */
static double sample(const char *page, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = page; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, series, n) == 0 && p[n] == ' ') return strtod(p + n + 1, NULL);
    return -1;
}

static double scrape(psc_metrics_t *m, const char *series)
{
    char *page = psc_metrics_render(m, NULL);
    double v = sample(page, series);
    free(page);
    return v;
}

static void create(store_t *s, int with_step)
{
    static const store_var_spec_t specs[] = {
        {.name = "global_step", .rank = 0, .is_step = 1},
        {.name = "dense/kernel", .rank = 2, .shape = {10, 4}},
        {.name = "dense/bias", .rank = 1, .shape = {4}},
    };
    psc_optim_config_t opt = {.kind = PSC_OPT_SGD, .learning_rate = 0.1f};
    char err[256];
    int created = 0;
    assert_int_equal(store_create_vars(s, JOB, &opt, specs + !with_step, 3 - !with_step, &created, err, sizeof err),
                     0);
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static void test_collector(void **state)
{
    (void)state;
    psc_metrics_t *m = psc_metrics_create();
    store_t *s = store_create();
    ps_metrics_t *pm = ps_metrics_create(m, s);

    /* an empty store: nothing held, no global_step */
    assert_true(scrape(m, "psc_ps_variables") == 0);
    assert_true(scrape(m, "psc_ps_variable_bytes") == 0);
    assert_true(scrape(m, "psc_ps_ready") == 0);
    assert_true(scrape(m, "psc_ps_global_step") == -1);
    assert_true(scrape(m, "psc_ps_steps_per_second") == -1);
    assert_true(scrape(m, "psc_ps_gradients_applied_total") == 0);
    assert_true(scrape(m, "psc_ps_rpc_requests_total{method=\"PushPull\"}") == 0);
    assert_true(scrape(m, "psc_ps_rpc_latency_seconds_count{method=\"ListCheckpoints\"}") == 0);

    create(s, 1);
    char err[256];
    assert_int_equal(store_set_ready(s, JOB, err, sizeof err), 0);
    int64_t v;
    assert_int_equal(store_step_add(s, 7, &v, err, sizeof err), 0);
    assert_true(scrape(m, "psc_ps_variables") == 3);
    assert_true(scrape(m, "psc_ps_variable_bytes") == 8 + 40 * 4 + 4 * 4);
    assert_true(scrape(m, "psc_ps_ready") == 1);
    assert_true(scrape(m, "psc_ps_global_step") == 7);
    assert_true(scrape(m, "psc_ps_steps_per_second") == 0); /* the first scrape with a step */

    assert_int_equal(store_step_add(s, 20, &v, err, sizeof err), 0);
    assert_true(scrape(m, "psc_ps_steps_per_second") == 0); /* < 1 s after the reference: the last rate */
    sleep_s(1.1);
    double t0 = psc_now();
    double rate = scrape(m, "psc_ps_steps_per_second");
    /* 20 steps over 1.1 s (plus the scrapes' time, well under a second) */
    assert_true(rate > 20 / (1.1 + (psc_now() - t0) + 0.9) && rate <= 20 / 1.1 + 1e-9);
    assert_true(scrape(m, "psc_ps_steps_per_second") == rate); /* too soon: kept */

    /* a bad push is rejected and counted; a good one applied */
    float g[4] = {1, 1, 1, 1};
    assert_int_not_equal(store_push(s, "nope", 0, g, sizeof g, sizeof g, NULL, NULL, err, sizeof err), 0);
    assert_int_equal(store_push(s, "dense/bias", 0, g, sizeof g, sizeof g, NULL, &v, err, sizeof err), 0);
    assert_true(scrape(m, "psc_ps_gradients_applied_total") == 1);
    assert_true(scrape(m, "psc_ps_requests_rejected_total") >= 1);
    assert_true(scrape(m, "psc_ps_gradients_stale_total") == 0);
    assert_true(scrape(m, "psc_ps_sync_timeout_applies_total") == 0);

    /* a new job whose shard holds no global_step: no step gauges */
    store_reset(s);
    create(s, 0);
    assert_true(scrape(m, "psc_ps_variables") == 2);
    assert_true(scrape(m, "psc_ps_ready") == 0);
    assert_true(scrape(m, "psc_ps_global_step") == -1);
    assert_true(scrape(m, "psc_ps_gradients_applied_total") == 1); /* counters survive a reset */

    ps_metrics_add_push_bytes(pm, 1000);
    ps_metrics_add_push_bytes(pm, 24);
    ps_metrics_add_pull_bytes(pm, 4096);
    ps_metrics_add_push_bytes(NULL, 1);
    ps_metrics_add_pull_bytes(NULL, 1);
    ps_metrics_observe_server(NULL, NULL);
    assert_true(scrape(m, "psc_ps_push_bytes_total") == 1024);
    assert_true(scrape(m, "psc_ps_pull_bytes_total") == 4096);

    ps_metrics_destroy(pm);
    ps_metrics_destroy(NULL);
    assert_true(scrape(m, "psc_ps_variables") == -1); /* the collector is gone */
    assert_true(scrape(m, "psc_ps_push_bytes_total") == 1024); /* the registered series stay */
    store_destroy(s);
    psc_metrics_destroy(m);
}

static void test_step_set_back(void **state)
{
    (void)state;
    psc_metrics_t *m = psc_metrics_create();
    store_t *s = store_create();
    ps_metrics_t *pm = ps_metrics_create(m, s);
    create(s, 1);
    char err[256];
    int64_t v;
    assert_int_equal(store_step_add(s, 100, &v, err, sizeof err), 0);
    assert_true(scrape(m, "psc_ps_steps_per_second") == 0);
    store_reset(s); /* a new job: global_step starts at 0 again */
    create(s, 1);
    sleep_s(1.05);
    assert_int_equal(store_step_add(s, 3, &v, err, sizeof err), 0);
    assert_true(scrape(m, "psc_ps_global_step") == 3);
    assert_true(scrape(m, "psc_ps_steps_per_second") == 0); /* no negative rate: starts over */
    ps_metrics_destroy(pm);
    store_destroy(s);
    psc_metrics_destroy(m);
}

/* ---- through the RPC server ---- */

static psc_rpc_channel_t *g_ch;

static int call(const char *method, const void *req, size_t len)
{
    psc_rpc_op_t op;
    psc_rpc_call(g_ch, method, req, len, 10000, 1, &op);
    int code = op.code;
    psc_rpc_op_clear(&op);
    return code;
}

static int step(uint32_t worker)
{
    Psc__StepRequest r = PSC__STEP_REQUEST__INIT;
    r.local_step = 0;
    r.count = 1;
    r.worker = worker;
    uint8_t buf[64];
    return call(PSC_M_STEP, buf, psc__step_request__pack(&r, buf));
}

static void *parked_step(void *arg)
{
    *(int *)arg = step(0);
    return NULL;
}

static void test_rpc_observed(void **state)
{
    (void)state;
    psc_metrics_t *m = psc_metrics_create();
    store_t *s = store_create();
    ps_service_t *svc = ps_service_create(s, 0, NULL, NULL, NULL, 0);
    ps_service_set_metrics(svc, m);
    char err[256];
    psc_rpc_server_t *server = psc_rpc_server_create("127.0.0.1:0", 2, err, sizeof err);
    assert_non_null(server);
    ps_service_register(svc, server);
    int port = psc_rpc_server_start(server, err, sizeof err);
    assert_true(port > 0);
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", port);
    g_ch = psc_rpc_channel_create(target);

    /* a Pull before any job: FAILED_PRECONDITION, an error */
    Psc__PullRequest pr = PSC__PULL_REQUEST__INIT;
    pr.name = (char *)"dense/kernel";
    pr.length = 16;
    uint8_t buf[256];
    assert_int_equal(call(PSC_M_PULL, buf, psc__pull_request__pack(&pr, buf)), PSC_RPC_FAILED_PRECONDITION);
    /* an undecodable Push: INVALID_ARGUMENT, and no bytes counted */
    memset(buf, 0xff, 32);
    assert_int_equal(call(PSC_M_PUSH, buf, 32), PSC_RPC_INVALID_ARGUMENT);
    Psc__StatusRequest sr = PSC__STATUS_REQUEST__INIT;
    assert_int_equal(call(PSC_M_STATUS, buf, psc__status_request__pack(&sr, buf)), PSC_RPC_OK);

    /* sync mode, R = N = 2, only global_step: worker 0's Step parks until worker 1's */
    Psc__OptimizerSpec opt = PSC__OPTIMIZER_SPEC__INIT;
    opt.name = (char *)"gradient_descent";
    opt.learning_rate = 0.1f;
    Psc__VarSpec gs = PSC__VAR_SPEC__INIT;
    gs.name = (char *)"global_step";
    gs.is_step = 1;
    Psc__VarSpec *vars[] = {&gs};
    Psc__SyncSpec sync = PSC__SYNC_SPEC__INIT;
    sync.replicas_to_aggregate = 2;
    sync.total_num_replicas = 2;
    sync.timeout_secs = 60;
    Psc__CreateRequest cr = PSC__CREATE_REQUEST__INIT;
    cr.job_id = (char *)JOB;
    cr.optimizer = &opt;
    cr.n_vars = 1;
    cr.vars = vars;
    cr.sync = &sync;
    assert_int_equal(call(PSC_M_CREATE, buf, psc__create_request__pack(&cr, buf)), PSC_RPC_OK);
    int parked_code = -1;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, parked_step, &parked_code), 0);
    sleep_s(0.5); /* worker 0's Step is parked by now */
    assert_int_equal(step(1), PSC_RPC_OK);
    pthread_join(t, NULL);
    assert_int_equal(parked_code, PSC_RPC_OK);

    char *page = psc_metrics_render(m, NULL);
    assert_true(sample(page, "psc_ps_rpc_requests_total{method=\"Pull\"}") == 1);
    assert_true(sample(page, "psc_ps_rpc_errors_total{method=\"Pull\"}") == 1);
    assert_true(sample(page, "psc_ps_rpc_latency_seconds_count{method=\"Pull\"}") == 1);
    assert_true(sample(page, "psc_ps_rpc_requests_total{method=\"Push\"}") == 1);
    assert_true(sample(page, "psc_ps_rpc_errors_total{method=\"Push\"}") == 1);
    assert_true(sample(page, "psc_ps_push_bytes_total") == 0);
    assert_true(sample(page, "psc_ps_pull_bytes_total") == 0);
    assert_true(sample(page, "psc_ps_rpc_requests_total{method=\"Status\"}") == 1);
    assert_true(sample(page, "psc_ps_rpc_errors_total{method=\"Status\"}") == 0);
    assert_true(sample(page, "psc_ps_rpc_requests_total{method=\"Create\"}") == 1);
    assert_true(sample(page, "psc_ps_rpc_requests_total{method=\"Step\"}") == 2);
    assert_true(sample(page, "psc_ps_rpc_errors_total{method=\"Step\"}") == 0);
    /* one Step answered at once, the parked one after its wait (0.5 s less the time its call took to arrive) */
    assert_true(sample(page, "psc_ps_rpc_latency_seconds_bucket{method=\"Step\",le=\"0.25\"}") == 1);
    assert_true(sample(page, "psc_ps_rpc_latency_seconds_sum{method=\"Step\"}") >= 0.4);
    assert_true(sample(page, "psc_ps_global_step") == 1);
    assert_true(sample(page, "psc_ps_requests_rejected_total") >= 1); /* the undecodable Push */
    free(page);

    psc_rpc_channel_destroy(g_ch);
    ps_service_drain(svc);
    psc_rpc_server_shutdown(server, 1000);
    psc_rpc_server_destroy(server);
    ps_service_destroy(svc);
    store_destroy(s);
    psc_metrics_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_collector),
        cmocka_unit_test(test_step_set_back),
        cmocka_unit_test(test_rpc_observed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
