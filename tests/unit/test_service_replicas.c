/* test_service_replicas — what a ps_server keeps per replica, through the
 * real RPC server on 127.0.0.1 with two polling threads and a store:
 * The parked replies of a sync PS (ps_server/service/service_park.c, R = N = 3):
 *  - three replicas push-pull the same chunk step after step from three
 *    threads, so at every step up to two replies park and the last replica's
 *    gradient applies the step and answers them from another server thread,
 *    with one read of the chunk whose buffer the replies share; every reply
 *    carries the step after the replica's own and the weights of that step.
 *    A parked entry is completed and freed by whichever thread unlinks it, and
 *    its parker must not touch it once it is on the list (a use after free
 *    CI's AddressSanitizer caught once in a cluster; the window was a few
 *    instructions wide, so this test exercises the path, in the ASan and TSan
 *    builds too, rather than forcing that interleaving);
 *  - a lone replica's push-pull stays parked until the drain before a
 *    shutdown, which answers it UNAVAILABLE.
 * The replicas' progress on an async PS: replicas of ranks up to
 * PSC_MAX_REPLICAS - 1 (past the 256 an earlier Status carried) report their
 * step counts with their steps and finish with WorkerDone; the worker's
 * ps_client_status sees every one (a restarted replica resumes from it, the
 * chief's end-of-job wait counts it); rank PSC_MAX_REPLICAS is refused. */
#include "placement.h"
#include "ps_client.h"
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

#include <cmocka.h>

#include "service_fixture.h"

#define JOB "00000000000000fd"
#define N 4       /* floats of "w" */
#define STEPS 400 /* per replica */
#define REPLICAS 3

static svc_ps_t g;

static void ps_start(int sync)
{
    svc_ps_start(&g, NULL, 0);
    /* SGD with learning rate 1: a sync step subtracts the mean of the gradients */
    store_sync_cfg_t cfg = {.replicas_to_aggregate = REPLICAS, .total_num_replicas = REPLICAS, .timeout_secs = 30};
    float w[N] = {0, 1, 2, 3};
    svc_fixture_model(g.store, JOB, w, N, sync ? &cfg : NULL);
}

static void ps_stop(void) { svc_ps_stop(&g); }

/* One sync PushPull of w from replica `worker` at `local_step` with gradient
 * grad in every element; the reply's chunk in *out (caller frees) on success. */
static int push_pull(psc_rpc_channel_t *ch, uint32_t worker, int64_t local_step, float grad, int timeout_ms,
                     Psc__Chunk **out)
{
    float v[N] = {grad, grad, grad, grad};
    Psc__Chunk c = PSC__CHUNK__INIT;
    c.name = (char *)"w";
    c.total = sizeof v;
    c.local_step = local_step;
    c.worker = worker;
    c.data.data = (uint8_t *)v;
    c.data.len = sizeof v;
    uint8_t buf[128];
    psc_rpc_op_t op;
    psc_rpc_call(ch, PSC_M_PUSH_PULL, buf, psc__chunk__pack(&c, buf), timeout_ms, 1, &op);
    int code = op.code;
    *out = NULL;
    if (code == PSC_RPC_OK) *out = psc__chunk__unpack(NULL, op.reply_len, op.reply);
    psc_rpc_op_clear(&op);
    return code;
}

typedef struct replica {
    uint32_t rank;
    int failures;   /* replies that were not OK, stale, or of the wrong step */
    int bad_values; /* replies whose weights are not those of their step */
    char first[256];
    pthread_t t;
} replica_t;

static void replica_fail(replica_t *r, const char *fmt, int64_t step, int64_t got)
{
    if (!r->first[0]) snprintf(r->first, sizeof r->first, fmt, (int)r->rank, (long long)step, (long long)got);
}

static void *replica_main(void *arg)
{
    replica_t *r = arg;
    psc_rpc_channel_t *ch = psc_rpc_channel_create(g.target);
    for (int64_t i = 0; i < STEPS; i++) {
        Psc__Chunk *c = NULL;
        int code = push_pull(ch, r->rank, i, 1.0f + (float)r->rank, 20000, &c);
        if (code != PSC_RPC_OK || !c) {
            r->failures++;
            replica_fail(r, "replica %d step %lld: code %lld", i, code);
            break;
        }
        if (c->stale || c->step != i + 1) {
            r->failures++;
            replica_fail(r, "replica %d step %lld: reply of step %lld", i, c->stale ? -1 : c->step);
        } else if (c->data.len != N * sizeof(float)) {
            r->bad_values++;
        } else {
            /* the mean of 1, 2 and 3 each step: w[k] = k - 2 (step) exactly */
            float w[N];
            memcpy(w, c->data.data, sizeof w);
            for (int k = 0; k < N; k++)
                if (w[k] != (float)k - 2.0f * (float)(i + 1)) r->bad_values++;
        }
        psc__chunk__free_unpacked(c, NULL);
    }
    psc_rpc_channel_destroy(ch);
    return NULL;
}

/* ---- tests ---- */

static void test_two_replicas_step_together(void **state)
{
    (void)state;
    ps_start(1);
    replica_t r[REPLICAS] = {{.rank = 0}, {.rank = 1}, {.rank = 2}};
    for (int i = 0; i < REPLICAS; i++) assert_int_equal(pthread_create(&r[i].t, NULL, replica_main, &r[i]), 0);
    for (int i = 0; i < REPLICAS; i++) pthread_join(r[i].t, NULL);
    for (int i = 0; i < REPLICAS; i++) {
        if (r[i].first[0]) fprintf(stderr, "%s\n", r[i].first);
        assert_int_equal(r[i].failures, 0);
        assert_int_equal(r[i].bad_values, 0);
    }
    /* every replica's gradient went into every step */
    store_stats_t st;
    store_get_stats(g.store, &st);
    assert_int_equal(st.applied, STEPS);
    ps_stop();
}

typedef struct lone {
    _Atomic int code;
    pthread_t t;
} lone_t;

static void *lone_main(void *arg)
{
    lone_t *l = arg;
    psc_rpc_channel_t *ch = psc_rpc_channel_create(g.target);
    Psc__Chunk *c = NULL;
    int code = push_pull(ch, 0, 0, 1.0f, 20000, &c);
    l->code = code;
    if (c) psc__chunk__free_unpacked(c, NULL);
    psc_rpc_channel_destroy(ch);
    return NULL;
}

static void test_drain_answers_parked(void **state)
{
    (void)state;
    ps_start(1);
    lone_t l;
    l.code = -1;
    assert_int_equal(pthread_create(&l.t, NULL, lone_main, &l), 0);
    /* the push is in the accumulator once the store counts it: then it is parked */
    for (int tries = 0; tries < 2000; tries++) {
        store_stats_t st;
        store_get_stats(g.store, &st);
        if (st.bytes_pushed >= N * sizeof(float)) break;
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    assert_int_equal(l.code, -1); /* still waiting for the other replica */
    ps_service_drain(g.svc);
    pthread_join(l.t, NULL);
    assert_int_equal(l.code, PSC_RPC_UNAVAILABLE);
    ps_stop();
}

/* A client of replica `rank` for the model global_step + w on the PS. */
static ps_client_t *client(int rank, psc_cluster_t *cl, psc_placed_var_t **placed)
{
    static psc_var_desc_t vars[2];
    memset(vars, 0, sizeof vars);
    snprintf(vars[0].name, sizeof vars[0].name, "global_step");
    vars[0].numel = 1;
    vars[0].is_step = 1;
    vars[0].layer = -1;
    snprintf(vars[1].name, sizeof vars[1].name, "w");
    vars[1].rank = 1;
    vars[1].shape[0] = N;
    vars[1].numel = N;
    int nplaced = 0;
    char err[512];
    assert_int_equal(psc_place(vars, 2, 1, PSC_PLACE_ROUND_ROBIN, 0, placed, &nplaced, err, sizeof err), 0);
    return ps_client_create(cl, vars, 2, *placed, nplaced, rank, 10000);
}

static void test_progress_of_every_rank(void **state)
{
    (void)state;
    ps_start(0);
    char *addrs[1] = {g.target};
    psc_cluster_t cl;
    memset(&cl, 0, sizeof cl);
    cl.n[PSC_JOB_PS] = 1;
    cl.addr[PSC_JOB_PS] = addrs;
    char err[512];
    static const int ranks[] = {3, 255, 256, 1000, PSC_MAX_REPLICAS - 1};
    enum { R = sizeof ranks / sizeof ranks[0] };
    for (int i = 0; i < R; i++) {
        psc_placed_var_t *placed = NULL;
        ps_client_t *pc = client(ranks[i], &cl, &placed);
        float grads[N] = {0}, params[N];
        int64_t step = 0;
        ps_client_set_progress(pc, 100 + ranks[i]); /* the replica's own step count, sent with its step */
        assert_int_equal(ps_client_push_pull(pc, grads, params, 1, &step, err, sizeof err), 0);
        assert_int_equal(step, i + 1);
        uint32_t done = 0;
        assert_int_equal(ps_client_worker_done(pc, &done, err, sizeof err), 0);
        assert_int_equal(done, (uint32_t)i + 1);
        ps_client_destroy(pc);
        free(placed);
    }
    psc_placed_var_t *placed = NULL;
    ps_client_t *pc = client(0, &cl, &placed);
    ps_status_t *st = calloc(1, sizeof *st);
    assert_int_equal(ps_client_status(pc, 0, st, err, sizeof err), 0);
    assert_int_equal(st->workers_done, R);
    int ndone = 0, nsteps = 0;
    for (int r = 0; r < PSC_MAX_REPLICAS; r++) {
        ndone += st->done[r];
        nsteps += st->replica_steps[r] != 0;
    }
    assert_int_equal(ndone, R);
    assert_int_equal(nsteps, R);
    for (int i = 0; i < R; i++) {
        assert_true(st->done[ranks[i]]);
        assert_int_equal(st->replica_steps[ranks[i]], 100 + ranks[i]);
    }
    free(st);
    ps_client_destroy(pc);
    free(placed);

    /* a rank the PS cannot keep track of is refused, and changes nothing */
    Psc__WorkerDoneRequest r = PSC__WORKER_DONE_REQUEST__INIT;
    r.worker = PSC_MAX_REPLICAS;
    uint8_t buf[16];
    psc_rpc_channel_t *ch = psc_rpc_channel_create(g.target);
    psc_rpc_op_t op;
    psc_rpc_call(ch, PSC_M_WORKER_DONE, buf, psc__worker_done_request__pack(&r, buf), 10000, 1, &op);
    assert_int_equal(op.code, PSC_RPC_INVALID_ARGUMENT);
    psc_rpc_op_clear(&op);
    psc_rpc_channel_destroy(ch);
    ps_stop();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_replicas_step_together),
        cmocka_unit_test(test_drain_answers_parked),
        cmocka_unit_test(test_progress_of_every_rank),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
