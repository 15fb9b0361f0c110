/* test_sigterm — a ps_server stops gracefully on SIGTERM, as Kubernetes stops a
 * pod: its health service goes NOT_SERVING while it still answers, new calls
 * are refused UNAVAILABLE, the call in flight finishes with OK, and it exits 0.
 *
 * The call in flight is a checkpoint Save held open by --debug_save_delay_ms;
 * SIGTERM arrives while it sleeps inside the handler. A second case checks that
 * an idle ps_server is not slowed down by the drain (exits within 1 s).
 */
#include "it_util.h"
#include "psc.pb-c.h"
#include "rpc.h"
#include "wire.h"

#include "grpc/health/v1/health.pb-c.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

static const char *JOB = "00000000000000bb";
static char tmpdir[128];

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Starts a 1-ps cluster's ps_server with extra flags and waits until it serves. */
static void start_ps(it_proc_t *p, char *const *extra)
{
    snprintf(p->addr, sizeof p->addr, "127.0.0.1:%d", it_free_port());
    static char cluster[128];
    snprintf(cluster, sizeof cluster, "{\"ps\": [\"%s\"]}", p->addr);
    char *args[32] = {"--cluster", cluster, "--job", "ps", "--task_index", "0", "--threads", "2"};
    int n = 8;
    for (int i = 0; extra[i] && n < 31; i++) args[n++] = extra[i];
    args[n] = NULL;
    assert_int_equal(it_spawn(p, "ps_server", args), 0);
    int ok = 0;
    for (int i = 0; i < 200 && !ok; i++) {
        /* a fresh channel each time: one whose first connection was refused
         * waits out gRPC's reconnect backoff (seconds) */
        psc_rpc_channel_t *ch = psc_rpc_channel_create(p->addr);
        ok = psc_rpc_health_check(ch, 200);
        psc_rpc_channel_destroy(ch);
        if (!ok) usleep(50000);
    }
    if (!ok) it_dump_log(p);
    assert_true(ok);
}

/* Health/Check of `service`: the status code of the call; *status the serving
 * status it reported (SERVING 1, NOT_SERVING 2) when the call was OK. */
static int health(psc_rpc_channel_t *ch, const char *service, int *status)
{
    Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    req.service = (char *)service;
    uint8_t buf[128];
    size_t n = grpc__health__v1__health_check_request__pack(&req, buf);
    psc_rpc_op_t op;
    psc_rpc_call(ch, PSC_M_HEALTH, buf, n, 500, 0, &op);
    int code = op.code;
    *status = -1;
    if (code == PSC_RPC_OK) {
        Grpc__Health__V1__HealthCheckResponse *r =
            grpc__health__v1__health_check_response__unpack(NULL, op.reply_len, op.reply);
        assert_non_null(r);
        *status = (int)r->status;
        grpc__health__v1__health_check_response__free_unpacked(r, NULL);
    }
    psc_rpc_op_clear(&op);
    return code;
}

static int call(psc_rpc_channel_t *ch, const char *method, const void *req, size_t len, psc_rpc_op_t *op)
{
    psc_rpc_call(ch, method, req, len, 10000, 0, op);
    return op->code;
}

/* Creates global_step and "w" (4) with SGD, assigns them and marks the model ready. */
static void make_model(psc_rpc_channel_t *ch)
{
    Psc__OptimizerSpec o = PSC__OPTIMIZER_SPEC__INIT;
    o.name = "gradient_descent";
    o.learning_rate = 0.1f;
    int64_t sw[1] = {4};
    Psc__VarSpec v[2] = {PSC__VAR_SPEC__INIT, PSC__VAR_SPEC__INIT};
    v[0].name = "global_step";
    v[0].is_step = 1;
    v[1].name = "w";
    v[1].shape = sw;
    v[1].n_shape = 1;
    Psc__VarSpec *vp[2] = {&v[0], &v[1]};
    Psc__CreateRequest r = PSC__CREATE_REQUEST__INIT;
    r.job_id = (char *)JOB;
    r.optimizer = &o;
    r.vars = vp;
    r.n_vars = 2;
    uint8_t buf[512];
    psc_rpc_op_t op;
    assert_int_equal(call(ch, PSC_M_CREATE, buf, psc__create_request__pack(&r, buf), &op), PSC_RPC_OK);
    psc_rpc_op_clear(&op);
    float w[4] = {1, 2, 3, 4};
    int64_t step = 0;
    const char *names[2] = {"global_step", "w"};
    const void *data[2] = {&step, w};
    size_t lens[2] = {sizeof step, sizeof w};
    for (int i = 0; i < 2; i++) {
        Psc__Chunk c = PSC__CHUNK__INIT;
        c.name = (char *)names[i];
        c.total = lens[i];
        c.data.data = (uint8_t *)data[i];
        c.data.len = lens[i];
        size_t n = psc__chunk__pack(&c, buf);
        assert_int_equal(call(ch, PSC_M_ASSIGN, buf, n, &op), PSC_RPC_OK);
        psc_rpc_op_clear(&op);
    }
    Psc__ReadyRequest rr = PSC__READY_REQUEST__INIT;
    rr.job_id = (char *)JOB;
    assert_int_equal(call(ch, PSC_M_READY, buf, psc__ready_request__pack(&rr, buf), &op), PSC_RPC_OK);
    psc_rpc_op_clear(&op);
}

typedef struct save_arg {
    psc_rpc_channel_t *ch;
    int code;
    char msg[256];
    double done_at; /* read after the join */
    atomic_int done;
} save_arg_t;

static void *save_thread(void *arg)
{
    save_arg_t *a = arg;
    Psc__SaveRequest r = PSC__SAVE_REQUEST__INIT;
    r.job_id = (char *)JOB;
    r.id = 1;
    uint8_t buf[64];
    psc_rpc_op_t op;
    a->code = call(a->ch, PSC_M_SAVE, buf, psc__save_request__pack(&r, buf), &op);
    snprintf(a->msg, sizeof a->msg, "%s", op.msg);
    a->done_at = now_s();
    atomic_store(&a->done, 1);
    psc_rpc_op_clear(&op);
    return NULL;
}

/* Waits for p to exit within secs; returns its exit code (128+sig if killed by one). */
static int wait_exit(it_proc_t *p, double secs)
{
    double t0 = now_s();
    int status = 0;
    while (now_s() - t0 < secs) {
        if (waitpid(p->pid, &status, WNOHANG) == p->pid) {
            p->pid = 0;
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
        usleep(20000);
    }
    it_dump_log(p);
    kill(p->pid, SIGKILL);
    waitpid(p->pid, &status, 0);
    p->pid = 0;
    fail_msg("ps_server still running %.1f s after SIGTERM", secs);
    return -1;
}

static void test_sigterm_drains_in_flight_call(void **state)
{
    (void)state;
    char ckpt[192];
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", tmpdir);
    it_proc_t ps = {0};
    char *extra[] = {"--checkpoint_dir", ckpt, "--debug_save_delay_ms", "2000", "--grace_ms", "8000", NULL};
    start_ps(&ps, extra);
    psc_rpc_channel_t *ch = psc_rpc_channel_create(ps.addr);
    psc_rpc_channel_t *probe = psc_rpc_channel_create(ps.addr);
    make_model(ch);
    int st;
    assert_int_equal(health(probe, "", &st), PSC_RPC_OK);
    assert_int_equal(st, GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING);

    save_arg_t sa = {.ch = ch};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, save_thread, &sa), 0);
    usleep(500000); /* the Save is inside its 2 s delay */
    double t_term = now_s();
    assert_int_equal(kill(ps.pid, SIGTERM), 0);

    /* during the drain: the server still answers, NOT_SERVING, on "" and its service */
    int not_serving = 0;
    while (now_s() - t_term < 1.2 && !not_serving) {
        int code = health(probe, "", &st);
        not_serving = code == PSC_RPC_OK && st == GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
        if (!not_serving) usleep(20000);
    }
    if (!not_serving) it_dump_log(&ps);
    assert_true(not_serving);
    assert_int_equal(health(probe, "psc.ParameterServer", &st), PSC_RPC_OK);
    assert_int_equal(st, GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING);
    assert_int_equal(atomic_load(&sa.done), 0); /* the Save is still in flight */

    /* a new call is refused, naming why */
    Psc__StatusRequest sr = PSC__STATUS_REQUEST__INIT;
    uint8_t buf[64];
    psc_rpc_op_t op;
    assert_int_equal(call(probe, PSC_M_STATUS, buf, psc__status_request__pack(&sr, buf), &op), PSC_RPC_UNAVAILABLE);
    assert_non_null(strstr(op.msg, "shutting down"));
    psc_rpc_op_clear(&op);

    /* the call in flight finishes with OK, then the process exits 0, well before
     * the grace period ends. The channels close first: gRPC's graceful shutdown
     * waits for idle client connections that nobody polls to go away. */
    assert_int_equal(pthread_join(t, NULL), 0);
    if (sa.code != PSC_RPC_OK) it_dump_log(&ps);
    assert_int_equal(sa.code, PSC_RPC_OK);
    assert_true(sa.done_at - t_term > 1.0); /* it did run past the SIGTERM */
    psc_rpc_channel_destroy(probe);
    psc_rpc_channel_destroy(ch);
    assert_int_equal(wait_exit(&ps, 6.0), 0);
    assert_true(now_s() - t_term < 4.0);
}

static void test_sigterm_idle_exits_at_once(void **state)
{
    (void)state;
    it_proc_t ps = {0};
    char *extra[] = {"--grace_ms", "8000", NULL};
    start_ps(&ps, extra);
    double t0 = now_s();
    assert_int_equal(kill(ps.pid, SIGTERM), 0);
    assert_int_equal(wait_exit(&ps, 5.0), 0);
    assert_true(now_s() - t0 < 1.0);
}

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/psc-sigterm.XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sigterm_drains_in_flight_call),
        cmocka_unit_test(test_sigterm_idle_exits_at_once),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
