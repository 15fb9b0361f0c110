/* test_service_fence — the checkpoint fence of an asynchronous ps_server
 * (ps_server/service/service_fence.c), through the real RPC server on 127.0.0.1 with
 * two polling threads, a store and a RocksDB checkpoint store:
 *  - pushes of every kind (Push, PushPull, Assign, Step, Batch) that arrive
 *    while the PS is fenced are not applied, do not hold the server's threads
 *    (more of them than threads are parked while a Pull, a Status and the Save
 *    are served), and are applied exactly once each, in arrival order, when the
 *    Save that used the fence releases it; the checkpoint holds the values at
 *    the fence;
 *  - Unfence releases a fence and answers what it parked;
 *  - a fence whose chief never comes back ends with its lease;
 *  - a Save under a fence that is not held, a Fence on a sync PS or for another
 *    job: refused; a Release, and the drain before a shutdown, answer every
 *    parked push (ABORTED, UNAVAILABLE). */
#include "ckpt.h"
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
#include <unistd.h>

#include <cmocka.h>

#include "service_fixture.h"

#define JOB "00000000000000fe"
#define N 4 /* floats of "w" */

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* ---- a PS in this process ---- */

static svc_ps_t g;

static void ps_start(int sync)
{
    svc_ps_start(&g, "fence", 0);
    /* the model: global_step and w (N floats), SGD with learning rate 1: w -= g */
    store_sync_cfg_t cfg = {.replicas_to_aggregate = 1, .total_num_replicas = 1, .timeout_secs = 5};
    float w[N] = {1, 2, 3, 4};
    svc_fixture_model(g.store, JOB, w, N, sync ? &cfg : NULL);
}

static void ps_stop(void) { svc_ps_stop(&g); }

/* ---- calls ---- */

/* One call; the reply's bytes in *reply (caller frees) when reply is non-NULL. */
static int call(const char *method, const void *req, size_t len, uint8_t **reply, size_t *reply_len)
{
    psc_rpc_op_t op;
    psc_rpc_call(g.ch, method, req, len, 10000, 1, &op);
    int code = op.code;
    if (reply) {
        *reply = op.reply;
        *reply_len = op.reply_len;
        op.reply = NULL;
    }
    psc_rpc_op_clear(&op);
    return code;
}

static size_t pack_chunk(uint8_t *buf, const char *name, const float *v)
{
    Psc__Chunk c = PSC__CHUNK__INIT;
    c.name = (char *)name;
    c.total = N * sizeof(float);
    c.data.data = (uint8_t *)v;
    c.data.len = N * sizeof(float);
    return psc__chunk__pack(&c, buf);
}

static int fence(uint64_t id, uint32_t lease_ms, const char *job, int64_t *step)
{
    Psc__FenceRequest r = PSC__FENCE_REQUEST__INIT;
    r.job_id = (char *)job;
    r.id = id;
    r.lease_ms = lease_ms;
    uint8_t buf[64], *rep = NULL;
    size_t n = 0;
    int code = call(PSC_M_FENCE, buf, psc__fence_request__pack(&r, buf), &rep, &n);
    if (code == 0) {
        Psc__FenceReply *f = psc__fence_reply__unpack(NULL, n, rep);
        assert_non_null(f);
        assert_true(f->has_global_step);
        if (step) *step = f->global_step;
        psc__fence_reply__free_unpacked(f, NULL);
    }
    free(rep);
    return code;
}

static int unfence(uint64_t id, int *released, uint32_t *parked)
{
    Psc__UnfenceRequest r = PSC__UNFENCE_REQUEST__INIT;
    r.id = id;
    uint8_t buf[16], *rep = NULL;
    size_t n = 0;
    int code = call(PSC_M_UNFENCE, buf, psc__unfence_request__pack(&r, buf), &rep, &n);
    if (code == 0) {
        Psc__UnfenceReply *u = psc__unfence_reply__unpack(NULL, n, rep);
        assert_non_null(u);
        *released = u->released;
        *parked = u->parked;
        psc__unfence_reply__free_unpacked(u, NULL);
    }
    free(rep);
    return code;
}

static int save(uint64_t id, uint64_t fence_id, int64_t step, double *fence_ms)
{
    Psc__SaveRequest r = PSC__SAVE_REQUEST__INIT;
    r.job_id = (char *)JOB;
    r.id = id;
    r.step = step;
    r.fence = fence_id;
    uint8_t buf[64], *rep = NULL;
    size_t n = 0;
    int code = call(PSC_M_SAVE, buf, psc__save_request__pack(&r, buf), &rep, &n);
    if (code == 0 && fence_ms) {
        Psc__SaveReply *s = psc__save_reply__unpack(NULL, n, rep);
        assert_non_null(s);
        *fence_ms = s->fence_ms;
        psc__save_reply__free_unpacked(s, NULL);
    }
    free(rep);
    return code;
}

/* w and global_step as the store holds them (a Pull through the server: it is
 * served while the PS is fenced). */
static void read_w(float *w)
{
    Psc__PullRequest r = PSC__PULL_REQUEST__INIT;
    r.name = (char *)"w";
    r.length = N * sizeof(float);
    uint8_t buf[64], *rep = NULL;
    size_t n = 0;
    assert_int_equal(call(PSC_M_PULL, buf, psc__pull_request__pack(&r, buf), &rep, &n), PSC_RPC_OK);
    Psc__Chunk *c = psc__chunk__unpack(NULL, n, rep);
    assert_non_null(c);
    assert_int_equal(c->data.len, N * sizeof(float));
    memcpy(w, c->data.data, N * sizeof(float));
    psc__chunk__free_unpacked(c, NULL);
    free(rep);
}

static int64_t global_step(void)
{
    int64_t v = -1;
    assert_true(store_step_get(g.store, &v));
    return v;
}

static uint64_t applied(void)
{
    store_stats_t st;
    store_get_stats(g.store, &st);
    return st.applied;
}

/* ---- requests sent from threads (each blocks until it is answered) ---- */

typedef struct req {
    const char *method;
    uint8_t buf[256];
    size_t len;
    double delay; /* seconds before it is sent: fixes the arrival order */
    _Atomic int code; /* read by the test while the thread waits (-1: not answered yet) */
    double answered; /* psc_now() when the reply came */
    pthread_t t;
} req_t;

static void *req_main(void *arg)
{
    req_t *q = arg;
    sleep_s(q->delay);
    q->code = call(q->method, q->buf, q->len, NULL, NULL);
    q->answered = psc_now();
    return NULL;
}

static void req_start(req_t *q, double delay)
{
    q->delay = delay;
    q->code = -1;
    assert_int_equal(pthread_create(&q->t, NULL, req_main, q), 0);
}

static void req_push(req_t *q, const char *method, float g0)
{
    float v[N] = {g0, g0, g0, g0};
    q->method = method;
    q->len = pack_chunk(q->buf, "w", v);
}

static void req_step(req_t *q, int64_t increment)
{
    Psc__StepRequest r = PSC__STEP_REQUEST__INIT;
    r.increment = increment;
    q->method = PSC_M_STEP;
    q->len = psc__step_request__pack(&r, q->buf);
}

/* ---- tests ---- */

/* Six requests that change the model park (three times the server's threads)
 * while reads and the Save are served; the Save's copy holds the values at the
 * fence; the release applies all six once, in arrival order. */
static void test_fence_parks_then_applies_in_order(void **state)
{
    (void)state;
    ps_start(0);
    float w[N], w0[N] = {1, 2, 3, 4};
    int64_t step = -1;
    assert_int_equal(fence(7, 0, JOB, &step), PSC_RPC_OK);
    assert_int_equal(step, 0);
    uint64_t applied0 = applied();

    /* arrival order: push 1, assign 100, push-pull 4, step +1, batch (push 8, step +1), push 16 */
    req_t q[6];
    memset(q, 0, sizeof q);
    req_push(&q[0], PSC_M_PUSH, 1);
    float hundred[N] = {100, 100, 100, 100};
    q[1].method = PSC_M_ASSIGN;
    q[1].len = pack_chunk(q[1].buf, "w", hundred);
    req_push(&q[2], PSC_M_PUSH_PULL, 4);
    req_step(&q[3], 1);
    float eight[N] = {8, 8, 8, 8};
    Psc__Chunk bc = PSC__CHUNK__INIT, *bcs[1] = {&bc};
    bc.name = (char *)"w";
    bc.total = sizeof eight;
    bc.data.data = (uint8_t *)eight;
    bc.data.len = sizeof eight;
    Psc__StepRequest bst = PSC__STEP_REQUEST__INIT;
    bst.increment = 1;
    Psc__BatchRequest br = PSC__BATCH_REQUEST__INIT;
    br.n_push = 1;
    br.push = bcs;
    br.step = &bst;
    q[4].method = PSC_M_BATCH;
    q[4].len = psc__batch_request__pack(&br, q[4].buf);
    req_push(&q[5], PSC_M_PUSH, 16);
    for (int i = 0; i < 6; i++) req_start(&q[i], 0.05 * i);
    sleep_s(0.6);

    /* all six are parked: nothing applied, nobody answered, and the server still serves */
    for (int i = 0; i < 6; i++) assert_int_equal(q[i].code, -1);
    read_w(w);
    assert_memory_equal(w, w0, sizeof w);
    assert_int_equal(global_step(), 0);
    assert_int_equal(applied(), applied0);
    uint8_t buf[64];
    Psc__BatchRequest rb = PSC__BATCH_REQUEST__INIT; /* a Batch that only reads runs at once */
    Psc__PullRequest bp = PSC__PULL_REQUEST__INIT, *bps[1] = {&bp};
    bp.name = (char *)"w";
    bp.length = sizeof w;
    rb.n_pull = 1;
    rb.pull = bps;
    uint8_t bbuf[128];
    assert_int_equal(call(PSC_M_BATCH, bbuf, psc__batch_request__pack(&rb, bbuf), NULL, NULL), PSC_RPC_OK);
    Psc__StepRequest rd = PSC__STEP_REQUEST__INIT; /* a Step read (increment 0) too */
    assert_int_equal(call(PSC_M_STEP, buf, psc__step_request__pack(&rd, buf), NULL, NULL), PSC_RPC_OK);
    /* a second Fence of the same id renews it: still fenced, the same step */
    assert_int_equal(fence(7, 0, JOB, &step), PSC_RPC_OK);
    assert_int_equal(step, 0);

    double t_release = psc_now(), fence_ms = -1;
    assert_int_equal(save(7, 7, step, &fence_ms), PSC_RPC_OK);
    assert_true(fence_ms >= 500); /* fenced since before the 0.6 s wait */
    for (int i = 0; i < 6; i++) pthread_join(q[i].t, NULL);
    for (int i = 0; i < 6; i++) {
        assert_int_equal(q[i].code, PSC_RPC_OK);
        assert_true(q[i].answered >= t_release);
    }
    /* the Save released the fence: an Unfence finds nothing to release */
    int released = -1;
    uint32_t parked = 0;
    assert_int_equal(unfence(7, &released, &parked), PSC_RPC_OK);
    assert_int_equal(released, 0);

    /* once each, in order: ((1 - 1) ... assigned 100) - 4 - 8 - 16 = 72; steps 2 */
    read_w(w);
    for (int i = 0; i < N; i++) assert_true(w[i] == 72.0f);
    assert_int_equal(global_step(), 2);

    /* the checkpoint holds the cut: w as it was at the fence, step 0 */
    char err[512];
    ckpt_info_t info;
    assert_int_equal(ckpt_get_info(g.db, 7, &info, err, sizeof err), 0);
    assert_int_equal(info.step, 0);
    void *data = NULL;
    size_t len = 0;
    assert_int_equal(ckpt_read(g.db, 7, "w", &data, &len, err, sizeof err), 0);
    assert_int_equal(len, sizeof w0);
    assert_memory_equal(data, w0, sizeof w0);
    free(data);
    ps_stop();
}

/* Unfence releases the fence and answers what it parked; pushes then apply on arrival. */
static void test_unfence(void **state)
{
    (void)state;
    ps_start(0);
    assert_int_equal(fence(3, 0, JOB, NULL), PSC_RPC_OK);
    req_t q[2];
    memset(q, 0, sizeof q);
    req_push(&q[0], PSC_M_PUSH, 1);
    req_step(&q[1], 5);
    req_start(&q[0], 0);
    req_start(&q[1], 0.05);
    sleep_s(0.3);
    assert_int_equal(q[0].code, -1);
    assert_int_equal(q[1].code, -1);
    int released = -1;
    uint32_t parked = 0;
    assert_int_equal(unfence(99, &released, &parked), PSC_RPC_OK); /* another fence's id: no-op */
    assert_int_equal(released, 0);
    assert_int_equal(unfence(3, &released, &parked), PSC_RPC_OK);
    assert_int_equal(released, 1);
    assert_int_equal(parked, 2);
    pthread_join(q[0].t, NULL);
    pthread_join(q[1].t, NULL);
    assert_int_equal(q[0].code, PSC_RPC_OK);
    assert_int_equal(q[1].code, PSC_RPC_OK);
    float w[N];
    read_w(w);
    assert_true(w[0] == 0.0f && w[3] == 3.0f);
    assert_int_equal(global_step(), 5);
    /* open again: a push applies on arrival */
    req_push(&q[0], PSC_M_PUSH, 1);
    assert_int_equal(call(q[0].method, q[0].buf, q[0].len, NULL, NULL), PSC_RPC_OK);
    read_w(w);
    assert_true(w[0] == -1.0f);
    /* a Save under a fence that is not held: ABORTED, nothing prepared */
    assert_int_equal(save(4, 3, 5, NULL), PSC_RPC_ABORTED);
    char err[512];
    ckpt_info_t info;
    assert_int_not_equal(ckpt_get_info(g.db, 4, &info, err, sizeof err), 0);
    ps_stop();
}

/* The chief fenced and died: the lease ends the fence and the parked push applies. */
static void test_lease_expires(void **state)
{
    (void)state;
    ps_start(0);
    double t0 = psc_now();
    assert_int_equal(fence(5, 400, JOB, NULL), PSC_RPC_OK);
    req_t q;
    memset(&q, 0, sizeof q);
    req_push(&q, PSC_M_PUSH, 1);
    req_start(&q, 0);
    sleep_s(0.2);
    assert_int_equal(q.code, -1);
    pthread_join(q.t, NULL);
    assert_int_equal(q.code, PSC_RPC_OK);
    double waited = q.answered - t0;
    assert_true(waited >= 0.39 && waited < 3.0);
    float w[N];
    read_w(w);
    assert_true(w[0] == 0.0f);
    /* a Save under the expired fence is refused */
    assert_int_equal(save(5, 5, 0, NULL), PSC_RPC_ABORTED);
    ps_stop();
}

/* Refusals, and every parked push answered by a Release or by the drain. */
static void test_refusals_release_and_drain(void **state)
{
    (void)state;
    ps_start(0);
    assert_int_equal(fence(1, 0, "00000000000000aa", NULL), PSC_RPC_FAILED_PRECONDITION);
    assert_int_equal(fence(1, 0, JOB, NULL), PSC_RPC_OK);
    req_t q;
    memset(&q, 0, sizeof q);
    req_push(&q, PSC_M_PUSH, 1);
    req_start(&q, 0);
    sleep_s(0.2);
    assert_int_equal(q.code, -1);
    Psc__ReleaseRequest rel = PSC__RELEASE_REQUEST__INIT;
    rel.job_id = (char *)JOB;
    uint8_t buf[64];
    assert_int_equal(call(PSC_M_RELEASE, buf, psc__release_request__pack(&rel, buf), NULL, NULL), PSC_RPC_OK);
    pthread_join(q.t, NULL);
    assert_int_equal(q.code, PSC_RPC_ABORTED);
    ps_stop();

    /* the drain before a shutdown fails what is parked (UNAVAILABLE: the worker retries elsewhere/later) */
    ps_start(0);
    assert_int_equal(fence(2, 0, JOB, NULL), PSC_RPC_OK);
    req_push(&q, PSC_M_PUSH_PULL, 1);
    req_start(&q, 0);
    sleep_s(0.2);
    assert_int_equal(q.code, -1);
    ps_service_drain(g.svc);
    pthread_join(q.t, NULL);
    assert_int_equal(q.code, PSC_RPC_UNAVAILABLE);
    assert_int_equal(fence(3, 0, JOB, NULL), PSC_RPC_UNAVAILABLE);
    ps_stop();

    /* a sync PS saves at a step boundary: no fence */
    ps_start(1);
    assert_int_equal(fence(1, 0, JOB, NULL), PSC_RPC_FAILED_PRECONDITION);
    ps_stop();
}

int main(void)
{
    psc_rpc_hold_for_process();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fence_parks_then_applies_in_order),
        cmocka_unit_test(test_unfence),
        cmocka_unit_test(test_lease_expires),
        cmocka_unit_test(test_refusals_release_and_drain),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
