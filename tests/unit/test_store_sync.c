/* test_store_sync — the store's sync-replica mode (store_sync.c).
 *
 * With SGD the applied update is lr * the mean of the step's contributions
 * exactly (counts weigh it); a late contribution is stale and returns the
 * current values; the timeout rule (store_sync_tick), absent replicas and
 * WorkerDone lower what a step waits for; global_step advances once per step;
 * a lagging chunk applies its pending step and skips ahead; bad sync requests
 * change nothing (accumulators and presence included); Adam's t counts steps,
 * not contributions (bit-identical to an async store pushed the same means);
 * replica threads in lock step lose no step; the cached present count equals
 * one counted afresh and costs a few passes over the replicas, not one a push.
 */
#include "store_fixture.h"
#include "store_internal.h" /* the presence cache's pass counter */

static void test_sync_sgd_mean_and_stale(void **state)
{
    (void)state;
    const float lr = 0.5f;
    psc_optim_config_t opt = sgd(lr);
    fixture_t f;
    fixture_setup(&f, &opt, 1);
    store_t *s = f.s;
    sync_on(s, 2, 2, 30.0);
    const size_t nb = 256;
    float *g0 = random_floats(nb, 500), *g1 = random_floats(nb, 501), *g2 = random_floats(nb, 502);
    float want[256], got[256], upd[256];
    int64_t v0 = version_of(s, "dense/bias");

    store_sync_result_t r = push_sync(s, "dense/bias", 0, g0, sizeof want, sizeof want, 0, 1, 0, 100.0, upd);
    assert_int_equal(r.stale, 0);
    assert_int_equal(r.applied, 0);
    assert_int_equal(r.lag_applied, 0);
    assert_int_equal(r.step, 0);
    assert_int_equal(r.version, v0);
    pull_all(s, "dense/bias", got, sizeof got);
    assert_memory_equal(got, f.init[2], sizeof got); /* accumulated, not applied */

    r = push_sync(s, "dense/bias", 0, g1, sizeof want, sizeof want, 0, 1, 1, 100.5, upd);
    assert_int_equal(r.stale, 0);
    assert_int_equal(r.applied, 1);
    assert_int_equal(r.by_timeout, 0);
    assert_int_equal(r.step, 1);
    assert_int_equal(r.version, v0 + 1);
    for (size_t j = 0; j < nb; j++) want[j] = ((float *)f.init[2])[j] - ((g0[j] + g1[j]) / 2.0f) * lr;
    pull_all(s, "dense/bias", got, sizeof got);
    assert_memory_equal(got, want, sizeof want);
    assert_memory_equal(upd, want, sizeof want); /* the applied values come back */
    assert_int_equal(chunk_step(s, "dense/bias", 0), 1);

    /* A third contribution for step 0: stale; values, version, step unchanged,
     * the current values returned. */
    store_stats_t st0, st1;
    store_get_stats(s, &st0);
    memset(upd, 0, sizeof upd);
    r = push_sync(s, "dense/bias", 0, g2, sizeof want, sizeof want, 0, 1, 0, 101.0, upd);
    assert_int_equal(r.stale, 1);
    assert_int_equal(r.applied, 0);
    assert_int_equal(r.step, 1);
    assert_int_equal(r.version, v0 + 1);
    assert_memory_equal(upd, want, sizeof want);
    pull_all(s, "dense/bias", got, sizeof got);
    assert_memory_equal(got, want, sizeof want);
    store_get_stats(s, &st1);
    assert_int_equal(st1.stale, st0.stale + 1);
    assert_int_equal(st1.applied, st0.applied);
    assert_int_equal(st1.rejected, st0.rejected);
    assert_int_equal(st1.bytes_pushed, st0.bytes_pushed); /* dropped bytes are not counted as pushed */
    /* Without `updated` a stale push works too. */
    r = push_sync(s, "dense/bias", 0, g2, sizeof want, sizeof want, 0, 1, 1, 101.0, NULL);
    assert_int_equal(r.stale, 1);

    /* The middle chunk of big/kernel: count 1 + count 2 (worker 1 summed two
     * batches) => divided by 3; the other chunks stay at step 0. */
    const uint64_t bb = spec_bytes(&SPECS[3]);
    const size_t cn = 2 * MiB / 4, e0 = cn;
    float *h0 = random_floats(cn, 600), *h1 = random_floats(cn, 601), *big = malloc(bb);
    r = push_sync(s, "big/kernel", 2 * MiB, h0, 2 * MiB, bb, 0, 1, 0, 102.0, NULL);
    assert_int_equal(r.applied, 0);
    r = push_sync(s, "big/kernel", 2 * MiB, h1, 2 * MiB, bb, 0, 2, 1, 102.0, NULL);
    assert_int_equal(r.applied, 1);
    assert_int_equal(r.step, 1);
    pull_all(s, "big/kernel", big, bb);
    const float *init = f.init[3];
    for (size_t j = 0; j < cn; j++) {
        float w = init[e0 + j] - ((h0[j] + h1[j]) / 3.0f) * lr;
        if (big[e0 + j] != w) fail_msg("big/kernel[%zu] = %.9g, want %.9g", e0 + j, (double)big[e0 + j], (double)w);
    }
    assert_memory_equal(big, init, 2 * MiB);                         /* chunk 0 untouched */
    assert_memory_equal(big + 2 * cn, init + 2 * cn, bb - 4 * MiB); /* chunk 2 untouched */
    assert_int_equal(chunk_step(s, "big/kernel", 0), 0);
    assert_int_equal(chunk_step(s, "big/kernel", 2 * MiB), 1);
    assert_int_equal(chunk_step(s, "big/kernel", 4 * MiB), 0);

    store_stats_t st;
    store_get_stats(s, &st);
    assert_int_equal(st.applied, 2);
    assert_int_equal(st.stale, 2);
    assert_int_equal(st.timeout_applies, 0);
    assert_int_equal(st.rejected, 0);
    assert_int_equal(st.bytes_pushed, 2 * sizeof want + 2 * 2 * MiB);
    free(g0);
    free(g1);
    free(g2);
    free(h0);
    free(h1);
    free(big);
    fixture_teardown(&f);
}

/* 1 of 2 contributions: applied by store_sync_tick once the timeout expires
 * (both replicas still present: worker 1 is alive, just late on this chunk). */
static void test_sync_timeout_tick(void **state)
{
    (void)state;
    const float lr = 0.5f;
    psc_optim_config_t opt = sgd(lr);
    fixture_t f;
    fixture_setup(&f, &opt, 1);
    store_t *s = f.s;
    sync_on(s, 2, 2, 5.0);
    float *g = random_floats(256, 700), want[256], got[256];
    tick_log_t log = {0};

    store_sync_result_t r = push_sync(s, "dense/bias", 0, g, sizeof got, sizeof got, 0, 1, 0, 100.0, NULL);
    assert_int_equal(r.applied, 0);
    /* both replicas heard from at 103 (their global_step contributions) */
    assert_int_equal(step_sync(s, 0, 1, 0, 103.0).applied, 0);
    assert_int_equal(step_sync(s, 0, 1, 1, 103.0).applied, 1);
    uint32_t needed = 0;
    assert_int_equal(store_sync_present(s, 104.9, &needed), 2);
    assert_int_equal(needed, 2);
    assert_int_equal(store_sync_tick(s, 104.9, on_tick, &log), 0);
    assert_int_equal(log.calls, 0);
    assert_int_equal(chunk_step(s, "dense/bias", 0), 0);

    assert_int_equal(store_sync_tick(s, 105.0, on_tick, &log), 1); /* exactly first_at + timeout */
    assert_int_equal(log.calls, 1);
    assert_string_equal(log.name, "dense/bias");
    assert_int_equal(log.offset, 0);
    assert_int_equal(log.step, 1);
    assert_int_equal(log.count, 1);
    assert_int_equal(log.by_timeout, 1);
    for (size_t j = 0; j < 256; j++) want[j] = ((float *)f.init[2])[j] - g[j] * lr;
    pull_all(s, "dense/bias", got, sizeof got);
    assert_memory_equal(got, want, sizeof want);
    assert_int_equal(chunk_step(s, "dense/bias", 0), 1);
    store_stats_t st;
    store_get_stats(s, &st);
    assert_int_equal(st.timeout_applies, 1);
    assert_int_equal(st.applied, 1);
    assert_int_equal(st.sync_steps, 1);

    /* Nothing pending: the next tick applies nothing; the late contribution of
     * worker 1 for step 0 is now stale. */
    assert_int_equal(store_sync_tick(s, 200.0, on_tick, &log), 0);
    assert_int_equal(log.calls, 1);
    r = push_sync(s, "dense/bias", 0, g, sizeof got, sizeof got, 0, 1, 1, 106.0, NULL);
    assert_int_equal(r.stale, 1);
    free(g);
    fixture_teardown(&f);
}

/* A replica not heard from for the timeout is absent: needed drops from 2 to 1
 * and a single contribution applies at once; a replica that has not started
 * yet is not absent before the training's first contribution. */
static void test_sync_absent_replica(void **state)
{
    (void)state;
    char err[256];
    const float lr = 0.5f;
    psc_optim_config_t opt = sgd(lr);
    fixture_t f;
    fixture_setup(&f, &opt, 1);
    store_t *s = f.s;
    sync_on(s, 2, 2, 5.0);
    float *g = random_floats(256, 800), got[256], want[256];
    uint32_t needed = 0;
    /* long before the first call: the clock has not started, nobody is absent */
    assert_int_equal(store_sync_present(s, 1000.0, &needed), 2);
    assert_int_equal(needed, 2);
    /* the service ticks from Create on: that does not start the clock either */
    assert_int_equal(store_sync_tick(s, 50.0, NULL, NULL), 0);

    store_sync_result_t r = push_sync(s, "dense/bias", 0, g, sizeof got, sizeof got, 0, 1, 0, 100.0, NULL);
    assert_int_equal(r.applied, 0); /* both present at 100: needs 2 */
    assert_int_equal(store_sync_present(s, 104.0, &needed), 2);
    assert_int_equal(needed, 2);
    /* A refused request does not count as hearing from its replica. */
    float bad[256];
    memcpy(bad, g, sizeof bad);
    bad[3] = NAN;
    assert_int_equal(store_push_sync(s, "dense/bias", 0, bad, sizeof bad, sizeof bad, 0, 1, 1, 104.0, NULL, &r, err,
                                     sizeof err),
                     PSC_EINVAL);

    /* At 106 worker 1 has been silent for 6 s >= 5: absent. Worker 0's new
     * contribution (to global_step: a fresh accumulator) applies alone. */
    r = step_sync(s, 0, 1, 0, 106.0);
    assert_int_equal(r.applied, 1);
    assert_int_equal(r.by_timeout, 0);
    assert_int_equal(r.step, 1);
    assert_int_equal(store_sync_present(s, 106.0, &needed), 1);
    assert_int_equal(needed, 1);
    /* dense/kernel: one contribution from worker 0, applied immediately */
    const uint64_t kb = spec_bytes(&SPECS[1]);
    float *gk = random_floats(kb / 4, 801), *wk = malloc(kb);
    r = push_sync(s, "dense/kernel", 0, gk, kb, kb, 0, 1, 0, 106.5, NULL);
    assert_int_equal(r.applied, 1);
    assert_int_equal(r.by_timeout, 0);
    pull_all(s, "dense/kernel", wk, kb);
    for (size_t j = 0; j < kb / 4; j++) assert_true(wk[j] == ((float *)f.init[1])[j] - gk[j] * lr);
    /* the pending dense/bias step is now due too (enough arrived): the tick applies it */
    tick_log_t log = {0};
    assert_int_equal(store_sync_tick(s, 106.5, on_tick, &log), 1);
    assert_string_equal(log.name, "dense/bias");
    assert_int_equal(log.count, 1);
    assert_int_equal(log.by_timeout, 0);
    for (size_t j = 0; j < 256; j++) want[j] = ((float *)f.init[2])[j] - g[j] * lr;
    pull_all(s, "dense/bias", got, sizeof got);
    assert_memory_equal(got, want, sizeof want);

    /* Worker 1 comes back: present again, needed back to 2. */
    r = step_sync(s, 1, 1, 1, 107.0);
    assert_int_equal(r.applied, 0);
    assert_int_equal(store_sync_present(s, 107.0, &needed), 2);
    assert_int_equal(needed, 2);
    store_stats_t st;
    store_get_stats(s, &st);
    assert_int_equal(st.timeout_applies, 0);
    free(g);
    free(gk);
    free(wk);
    fixture_teardown(&f);
}

/* store_sync_seen (the service, for a replica whose reply is parked): it keeps
 * a waiting replica present without counting as a contribution; it does not
 * start the presence clock; ranks >= N are ignored. */
static void test_sync_seen(void **state)
{
    (void)state;
    psc_optim_config_t opt = sgd(0.5f);
    fixture_t f;
    fixture_setup(&f, &opt, 1);
    store_t *s = f.s;
    sync_on(s, 2, 2, 5.0);
    uint32_t needed = 0;
    store_sync_seen(s, 0, 10.0); /* before any contribution: the clock stays off */
    assert_int_equal(store_sync_present(s, 1000.0, &needed), 2);
    float *g = random_floats(256, 802);
    store_sync_result_t r = push_sync(s, "dense/bias", 0, g, 1024, 1024, 0, 1, 0, 100.0, NULL);
    assert_int_equal(r.applied, 0);
    /* worker 0 waits with its reply parked; the ticks see it until 108; worker 1 is silent */
    for (double t = 101.0; t <= 108.0; t += 1.0) store_sync_seen(s, 0, t);
    store_sync_seen(s, 7, 108.0); /* not a replica: ignored */
    assert_int_equal(store_sync_present(s, 108.5, &needed), 1); /* without the ticks: 0 present */
    assert_int_equal(needed, 1);
    /* its parked contribution is now enough: the tick applies it */
    assert_int_equal(store_sync_tick(s, 108.5, NULL, NULL), 1);
    /* once the parked reply is answered and worker 0 goes silent too, both are absent */
    assert_int_equal(store_sync_present(s, 113.5, &needed), 0);
    store_stats_t st;
    store_get_stats(s, &st);
    assert_int_equal(st.applied, 1);
    free(g);
    fixture_teardown(&f);
}

/* WorkerDone: the replica is no longer waited for. */
static void test_sync_worker_left(void **state)
{
    (void)state;
    psc_optim_config_t opt = sgd(0.5f);
    fixture_t f;
    fixture_setup(&f, &opt, 1);
    store_t *s = f.s;
    sync_on(s, 2, 2, 60.0);
    float *g = random_floats(256, 900);
    uint32_t needed = 0;
    store_sync_worker_left(s, 7); /* not a replica: ignored */
    assert_int_equal(store_sync_present(s, 0.0, &needed), 2);
    store_sync_worker_left(s, 1);
    store_sync_worker_left(s, 1); /* idempotent */
    assert_int_equal(store_sync_present(s, 0.0, &needed), 1);
    assert_int_equal(needed, 1);
    store_sync_result_t r = push_sync(s, "dense/bias", 0, g, 1024, 1024, 0, 1, 0, 100.0, NULL);
    assert_int_equal(r.applied, 1);
    assert_int_equal(r.by_timeout, 0);
    assert_int_equal(r.step, 1);
    /* its late contributions still count (it is just not waited for) */
    r = push_sync(s, "dense/bias", 0, g, 1024, 1024, 1, 1, 1, 100.5, NULL);
    assert_int_equal(r.applied, 1);
    assert_int_equal(r.step, 2);
    assert_int_equal(store_sync_present(s, 100.5, &needed), 1);
    store_sync_worker_left(s, 0);
    assert_int_equal(store_sync_present(s, 100.5, &needed), 0);
    assert_int_equal(needed, 1); /* never below 1 */
    free(g);
    fixture_teardown(&f);
}

/* global_step advances once per applied step, whatever the count. */
static void test_sync_global_step(void **state)
{
    (void)state;
    char err[256];
    psc_optim_config_t opt = sgd(0.5f);
    fixture_t f;
    fixture_setup(&f, &opt, 0);
    store_t *s = f.s;
    sync_on(s, 2, 3, 60.0); /* R = 2 of N = 3: one backup replica */
    int64_t v = -1;

    store_sync_result_t r = step_sync(s, 0, 1, 2, 10.0); /* allowed before ready, like store_step_add */
    assert_int_equal(r.applied, 0);
    assert_int_equal(r.step, 0);
    r = step_sync(s, 0, 3, 0, 10.1);
    assert_int_equal(r.applied, 1);
    assert_int_equal(r.stale, 0);
    assert_int_equal(r.step, 1);
    assert_int_equal(r.version, 1);
    assert_int_equal(store_step_get(s, &v), 1);
    assert_int_equal(v, 1);
    r = step_sync(s, 0, 1, 1, 10.2); /* the backup replica is late: stale */
    assert_int_equal(r.stale, 1);
    assert_int_equal(r.applied, 0);
    assert_int_equal(r.step, 1);
    for (int64_t k = 1; k < 5; k++) {
        r = step_sync(s, k, 1, (uint32_t)k % 3, 11.0);
        assert_int_equal(r.applied, 0);
        r = step_sync(s, k, 1, (uint32_t)(k + 1) % 3, 11.0);
        assert_int_equal(r.applied, 1);
        assert_int_equal(r.step, k + 1);
    }
    assert_int_equal(store_step_get(s, &v), 1);
    assert_int_equal(v, 5);
    store_stats_t st;
    store_get_stats(s, &st);
    assert_int_equal(st.sync_steps, 5);
    assert_int_equal(st.stale, 1);
    assert_int_equal(st.applied, 0); /* global_step is not a pushed chunk */

    /* A restore moves the step: older local steps are stale, the restored one counts. */
    static const unsigned char thousand[8] = {0xe8, 0x03, 0, 0, 0, 0, 0, 0};
    assert_int_equal(store_assign(s, "global_step", 0, thousand, 8, 8, err, sizeof err), 0);
    assert_int_equal(store_set_ready(s, JOB, err, sizeof err), 0);
    r = step_sync(s, 5, 1, 0, 12.0);
    assert_int_equal(r.stale, 1);
    assert_int_equal(r.step, 1000);
    step_sync(s, 1000, 1, 0, 12.0);
    r = step_sync(s, 1000, 1, 1, 12.0);
    assert_int_equal(r.applied, 1);
    assert_int_equal(r.step, 1001);
    int64_t cs = -1, ver = -1;
    unsigned char le[8];
    assert_int_equal(store_chunk_read(s, "global_step", 0, 8, le, &cs, &ver, err, sizeof err), 0);
    assert_int_equal(cs, 1001);
    assert_int_equal(le[0], 1001 & 0xff);
    assert_int_equal(le[1], 1001 >> 8);

    /* A shard without global_step. */
    store_t *s2 = store_create();
    static const store_var_spec_t one[] = {{.name = "b", .rank = 1, .shape = {4}}};
    int created;
    assert_int_equal(store_create_vars(s2, JOB, &opt, one, 1, &created, err, sizeof err), 0);
    sync_on(s2, 1, 1, 1.0);
    EXPECT_REFUSED(s2, PSC_ENOTFOUND, "holds no global_step", store_step_sync(s2, 0, 1, 0, 1.0, &r, err, sizeof err));
    store_destroy(s2);
    fixture_teardown(&f);
}

/* A chunk that lags behind its sender: a pending older step is applied first
 * (as a timeout apply), then the chunk skips ahead. */
static void test_sync_lagging_chunk(void **state)
{
    (void)state;
    const float lr = 0.5f;
    psc_optim_config_t opt = sgd(lr);
    fixture_t f;
    fixture_setup(&f, &opt, 1);
    store_t *s = f.s;
    sync_on(s, 2, 2, 60.0);
    float *g0 = random_floats(256, 1100), *g1 = random_floats(256, 1101), *g2 = random_floats(256, 1102);
    float want[256], got[256];

    push_sync(s, "dense/bias", 0, g0, 1024, 1024, 0, 1, 0, 100.0, NULL); /* pending step 0 */
    store_sync_result_t r = push_sync(s, "dense/bias", 0, g1, 1024, 1024, 3, 1, 1, 101.0, NULL);
    assert_int_equal(r.lag_applied, 1);
    assert_int_equal(r.applied, 0); /* step 3 still needs worker 0 */
    assert_int_equal(r.stale, 0);
    assert_int_equal(r.step, 3);
    for (size_t j = 0; j < 256; j++) want[j] = ((float *)f.init[2])[j] - g0[j] * lr;
    pull_all(s, "dense/bias", got, sizeof got);
    assert_memory_equal(got, want, sizeof want);
    store_stats_t st;
    store_get_stats(s, &st);
    assert_int_equal(st.timeout_applies, 1);
    assert_int_equal(st.applied, 1);

    r = push_sync(s, "dense/bias", 0, g2, 1024, 1024, 3, 1, 0, 101.5, NULL);
    assert_int_equal(r.applied, 1);
    assert_int_equal(r.lag_applied, 0);
    assert_int_equal(r.step, 4);
    for (size_t j = 0; j < 256; j++) want[j] -= ((g1[j] + g2[j]) / 2.0f) * lr;
    pull_all(s, "dense/bias", got, sizeof got);
    assert_memory_equal(got, want, sizeof want);

    /* An empty lagging chunk just skips. */
    const uint64_t kb = spec_bytes(&SPECS[1]);
    float *gk = random_floats(kb / 4, 1103);
    r = push_sync(s, "dense/kernel", 0, gk, kb, kb, 7, 1, 0, 102.0, NULL);
    assert_int_equal(r.lag_applied, 0);
    assert_int_equal(r.applied, 0);
    assert_int_equal(r.step, 7);
    r = push_sync(s, "dense/kernel", 0, gk, kb, kb, 6, 1, 1, 102.0, NULL);
    assert_int_equal(r.stale, 1);
    r = push_sync(s, "dense/kernel", 0, gk, kb, kb, 7, 1, 1, 102.0, NULL);
    assert_int_equal(r.applied, 1);
    assert_int_equal(r.step, 8);
    store_get_stats(s, &st);
    assert_int_equal(st.timeout_applies, 1);
    assert_int_equal(st.applied, 3);
    free(g0);
    free(g1);
    free(g2);
    free(gk);
    fixture_teardown(&f);
}

/* Bad sync requests are refused and change nothing: not the values, versions
 * or counters (EXPECT_REFUSED), nor the accumulator (the next valid
 * contributions average to exactly theirs), nor presence. */
static void test_sync_invalid(void **state)
{
    (void)state;
    char err[256];
    const float lr = 0.5f;
    psc_optim_config_t opt = sgd(lr);
    fixture_t f;
    fixture_setup(&f, &opt, 1);
    store_t *s = f.s;
    store_sync_result_t r;
    float *g0 = random_floats(256, 1200), *g1 = random_floats(256, 1201), bad[256], out[256], want[256];

    /* Not in sync mode yet. */
    EXPECT_REFUSED(s, PSC_EUNSUPPORTED, "asynchronous",
                   store_push_sync(s, "dense/bias", 0, g0, 1024, 1024, 0, 1, 0, 1.0, NULL, &r, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EUNSUPPORTED, "asynchronous", store_step_sync(s, 0, 1, 0, 1.0, &r, err, sizeof err));
    assert_int_equal(store_sync_tick(s, 1.0, on_tick, NULL), 0);
    assert_int_equal(store_get_sync(s, NULL), 0);

    sync_on(s, 2, 2, 5.0);
    push_sync(s, "dense/bias", 0, g0, 1024, 1024, 0, 1, 0, 100.0, NULL); /* pending: count 1 */

    EXPECT_REFUSED(s, PSC_EINVAL, "dense/bias: worker 2 is not a replica (total_num_replicas is 2)",
                   store_push_sync(s, "dense/bias", 0, g1, 1024, 1024, 0, 1, 2, 101.0, out, &r, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EINVAL, "count 0",
                   store_push_sync(s, "dense/bias", 0, g1, 1024, 1024, 0, 0, 1, 101.0, out, &r, err, sizeof err));
    memcpy(bad, g1, sizeof bad);
    bad[200] = NAN;
    EXPECT_REFUSED(s, PSC_EINVAL, "dense/bias: gradient has a non-finite value at index 200",
                   store_push_sync(s, "dense/bias", 0, bad, 1024, 1024, 0, 1, 1, 101.0, out, &r, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EMISMATCH, "dense/bias: gradient is 1020 bytes, variable is 1024 bytes",
                   store_push_sync(s, "dense/bias", 0, g1, 1020, 1020, 0, 1, 1, 101.0, out, &r, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EINVAL, "not a wire chunk",
                   store_push_sync(s, "dense/bias", 0, g1, 1020, 1024, 0, 1, 1, 101.0, out, &r, err, sizeof err));
    EXPECT_REFUSED(s, PSC_ENOTFOUND, "unknown variable \"dense/bias2\"",
                   store_push_sync(s, "dense/bias2", 0, g1, 1024, 1024, 0, 1, 1, 101.0, out, &r, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EINVAL, "global_step is not trainable; use Step",
                   store_push_sync(s, "global_step", 0, g1, 8, 8, 0, 1, 1, 101.0, out, &r, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EINVAL, "worker 5 is not a replica", store_step_sync(s, 0, 1, 5, 101.0, &r, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EINVAL, "count 0", store_step_sync(s, 0, 0, 1, 101.0, &r, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EINVAL, "outside its 1024 bytes",
                   store_chunk_read(s, "dense/bias", 1024, 0, NULL, NULL, NULL, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EINVAL, "crosses a wire chunk boundary",
                   store_chunk_read(s, "big/kernel", 2 * MiB - 4, 8, out, NULL, NULL, err, sizeof err));
    /* Set-sync refusals. */
    store_sync_cfg_t cfg = {.replicas_to_aggregate = 2, .total_num_replicas = 2, .timeout_secs = 5.0};
    EXPECT_REFUSED(s, PSC_EEXISTS, "sync mode is on with replicas_to_aggregate 2; refusing 3",
                   store_set_sync(s, &(store_sync_cfg_t){3, 2, 5.0}, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EEXISTS, "sync mode is on with total_num_replicas 2; refusing 4",
                   store_set_sync(s, &(store_sync_cfg_t){2, 4, 5.0}, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EEXISTS, "sync mode is on with timeout_secs 5; refusing 6",
                   store_set_sync(s, &(store_sync_cfg_t){2, 2, 6.0}, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EINVAL, "sync: replicas_to_aggregate 0 must be >= 1",
                   store_set_sync(s, &(store_sync_cfg_t){0, 2, 5.0}, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EINVAL, "sync: total_num_replicas -1 must be >= 1",
                   store_set_sync(s, &(store_sync_cfg_t){2, -1, 5.0}, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EINVAL, "sync: timeout_secs 0 must be finite and > 0",
                   store_set_sync(s, &(store_sync_cfg_t){2, 2, 0.0}, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EINVAL, "sync: timeout_secs nan",
                   store_set_sync(s, &(store_sync_cfg_t){2, 2, NAN}, err, sizeof err));
    assert_int_equal(store_set_sync(s, &cfg, err, sizeof err), 0); /* the same again: no-op */
    store_sync_cfg_t got_cfg = {0};
    assert_int_equal(store_get_sync(s, &got_cfg), 1);
    assert_int_equal(got_cfg.replicas_to_aggregate, 2);
    assert_int_equal(got_cfg.total_num_replicas, 2);
    assert_true(got_cfg.timeout_secs == 5.0);

    /* Worker 1's refused requests did not make it present: at 105.5 both
     * replicas were last heard from at 100. */
    uint32_t needed;
    assert_int_equal(store_sync_present(s, 105.5, &needed), 0);
    /* The accumulator still holds only g0: worker 1's valid push applies the mean of the two. */
    r = push_sync(s, "dense/bias", 0, g1, 1024, 1024, 0, 1, 1, 101.0, out);
    assert_int_equal(r.applied, 1);
    assert_int_equal(r.by_timeout, 0);
    for (size_t j = 0; j < 256; j++) want[j] = ((float *)f.init[2])[j] - ((g0[j] + g1[j]) / 2.0f) * lr;
    assert_memory_equal(out, want, sizeof want);
    free(g0);
    free(g1);
    fixture_teardown(&f);

    /* Before any job: nothing to put in sync mode; before ready: no sync push. */
    store_t *s2 = store_create();
    EXPECT_REFUSED(s2, PSC_ENOTFOUND, "no job created yet", store_set_sync(s2, &cfg, err, sizeof err));
    int created;
    assert_int_equal(store_create_vars(s2, JOB, &opt, SPECS, NSPECS, &created, err, sizeof err), 0);
    assert_int_equal(store_set_sync(s2, &cfg, err, sizeof err), 0); /* before ready is fine */
    float x[256] = {0};
    EXPECT_REFUSED(s2, PSC_ENOTREADY, "not ready",
                   store_push_sync(s2, "dense/bias", 0, x, 1024, 1024, 0, 1, 0, 1.0, NULL, &r, err, sizeof err));
    store_destroy(s2);
}

/* Adam: t counts applied steps per chunk, not contributions. The sync store
 * must match, bit for bit, an async store pushed the same means. */
static void test_sync_adam_t(void **state)
{
    (void)state;
    char err[256];
    psc_optim_config_t opt = {.kind = PSC_OPT_ADAM, .learning_rate = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f,
                              .epsilon = 1e-8f};
    static const store_var_spec_t specs[] = {{.name = "w", .rank = 2, .shape = {768, 1024}}}; /* 3 MiB: 2 chunks */
    const uint64_t b = 3 * MiB;
    const size_t n = b / 4;
    store_t *sy = store_create(), *as = store_create();
    int created;
    assert_int_equal(store_create_vars(sy, JOB, &opt, specs, 1, &created, err, sizeof err), 0);
    assert_int_equal(store_create_vars(as, JOB, &opt, specs, 1, &created, err, sizeof err), 0);
    float *w0 = random_floats(n, 21);
    assign_all(sy, "w", w0, b);
    assign_all(as, "w", w0, b);
    assert_int_equal(store_set_ready(sy, JOB, err, sizeof err), 0);
    assert_int_equal(store_set_ready(as, JOB, err, sizeof err), 0);
    sync_on(sy, 3, 3, 60.0);

    float *g[3], *mean = malloc(b);
    for (int i = 0; i < 3; i++) g[i] = random_floats(n, 30 + (uint32_t)i);
    int64_t ver_a = 0;
    /* chunk 0: steps 0 and 1; chunk 1: step 0 only */
    for (int step = 0; step < 2; step++) {
        for (size_t k = 0; k < (step ? 1u : 2u); k++) {
            uint64_t off = psc_chunk_offset(k);
            size_t len = psc_chunk_len(b, k);
            store_sync_result_t r;
            for (uint32_t wk = 0; wk < 3; wk++) {
                /* step 1 uses the gradients rotated, so the two steps differ */
                const float *gi = g[(wk + (uint32_t)step) % 3];
                r = push_sync(sy, "w", off, (const char *)gi + off, len, b, step, 1, wk, 10.0 + step, NULL);
                assert_int_equal(r.applied, wk == 2);
            }
            assert_int_equal(r.step, step + 1);
            /* summed in arrival order, as the accumulator does */
            const float *a0 = g[step % 3], *a1 = g[(1 + step) % 3], *a2 = g[(2 + step) % 3];
            for (size_t j = off / 4; j < (off + len) / 4; j++) mean[j] = ((a0[j] + a1[j]) + a2[j]) / 3.0f;
            assert_int_equal(store_push(as, "w", off, (const char *)mean + off, len, b, NULL, &ver_a, err, sizeof err),
                             0);
        }
    }
    float *got_s = malloc(b), *got_a = malloc(b);
    pull_all(sy, "w", got_s, b);
    pull_all(as, "w", got_a, b);
    assert_memory_equal(got_s, got_a, b);
    assert_memory_not_equal(got_s, w0, b);
    assert_int_equal(chunk_step(sy, "w", 0), 2);
    assert_int_equal(chunk_step(sy, "w", 2 * MiB), 1);
    assert_int_equal(chunk_step(as, "w", 0), 2); /* async: applies of that chunk */
    assert_int_equal(version_of(sy, "w"), version_of(as, "w"));

    /* Chunk 1's single sync step must be Adam's first (t = 1), checked in
     * double precision; with t counted per contribution it would have been
     * t = 3, a step size about 0.64 times as large. */
    const float *c1w0 = w0 + 2 * MiB / 4, *c1 = got_s + 2 * MiB / 4, *c1m = mean + 2 * MiB / 4;
    const double b1 = opt.beta1, b2 = opt.beta2, lr1 = opt.learning_rate * sqrt(1 - b2) / (1 - b1);
    size_t far = 0;
    for (size_t j = 0; j < MiB / 4; j++) {
        double gj = c1m[j], m = (1 - b1) * gj, v = (1 - b2) * gj * gj, d = lr1 * m / (sqrt(v) + opt.epsilon);
        if (fabs((double)c1[j] - ((double)c1w0[j] - d)) > 1e-6 * (fabs((double)c1w0[j]) + fabs(d))) far++;
    }
    assert_int_equal(far, 0);
    for (int i = 0; i < 3; i++) free(g[i]);
    free(mean);
    free(got_s);
    free(got_a);
    free(w0);
    store_destroy(sy);
    store_destroy(as);
}

/* Replica threads in lock step: each contributes its gradient of ones for step
 * k to two chunks and global_step, then waits until the chunk reached k + 1; a
 * tick thread runs alongside. No step is lost, none applied twice. */
#define SYNC_STEPS 300
#define SYNC_R 4

typedef struct sync_worker_arg {
    store_t *s;
    uint32_t rank;
    int failed;
} sync_worker_arg_t;

static void *sync_worker(void *p)
{
    sync_worker_arg_t *a = p;
    float g[CN];
    char err[256];
    for (int i = 0; i < CN; i++) g[i] = 1.0f;
    for (int64_t k = 0; k < SYNC_STEPS; k++) {
        store_sync_result_t r;
        if (store_push_sync(a->s, "shared", 0, g, sizeof g, sizeof g, k, 1, a->rank, psc_now(), NULL, &r, err,
                            sizeof err) ||
            r.stale || store_push_sync(a->s, "other", 0, g, sizeof g, sizeof g, k, 1, a->rank, psc_now(), NULL, &r,
                                       err, sizeof err) ||
            r.stale || store_step_sync(a->s, k, 1, a->rank, psc_now(), &r, err, sizeof err) || r.stale) {
            a->failed = 1;
            return NULL;
        }
        int64_t st = -1, gs = -1;
        do {
            store_chunk_read(a->s, "other", 0, 0, NULL, &st, NULL, err, sizeof err);
            store_step_get(a->s, &gs);
        } while (st <= k || gs <= k);
    }
    return NULL;
}

typedef struct ticker_arg {
    store_t *s;
    atomic_int stop;
    int applied;
} ticker_arg_t;

static void *ticker(void *p)
{
    ticker_arg_t *t = p;
    while (!atomic_load(&t->stop)) t->applied += store_sync_tick(t->s, psc_now(), NULL, NULL);
    return NULL;
}

static void test_sync_concurrent(void **state)
{
    (void)state;
    char err[256];
    psc_optim_config_t opt = sgd(1.0f / 1024); /* mean of ones = 1: every k/1024 is exact */
    static const store_var_spec_t specs[] = {
        {.name = "global_step", .is_step = 1},
        {.name = "shared", .rank = 1, .shape = {CN}},
        {.name = "other", .rank = 1, .shape = {CN}},
    };
    store_t *s = store_create();
    int created;
    assert_int_equal(store_create_vars(s, JOB, &opt, specs, 3, &created, err, sizeof err), 0);
    assert_int_equal(store_set_ready(s, JOB, err, sizeof err), 0);
    sync_on(s, SYNC_R, SYNC_R, 3600.0);
    pthread_t th[SYNC_R], tt;
    sync_worker_arg_t args[SYNC_R];
    ticker_arg_t targ = {.s = s};
    atomic_init(&targ.stop, 0);
    assert_int_equal(pthread_create(&tt, NULL, ticker, &targ), 0);
    for (uint32_t i = 0; i < SYNC_R; i++) {
        args[i] = (sync_worker_arg_t){.s = s, .rank = i};
        assert_int_equal(pthread_create(&th[i], NULL, sync_worker, &args[i]), 0);
    }
    for (int i = 0; i < SYNC_R; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(args[i].failed, 0);
    }
    atomic_store(&targ.stop, 1);
    assert_int_equal(pthread_join(tt, NULL), 0);
    assert_int_equal(targ.applied, 0); /* every step completed by its last contribution */
    float got[CN];
    for (int v = 1; v < 3; v++) {
        pull_all(s, specs[v].name, got, sizeof got);
        for (int j = 0; j < CN; j++)
            if (got[j] != -(float)SYNC_STEPS / 1024) fail_msg("%s[%d] = %.9g", specs[v].name, j, (double)got[j]);
        assert_int_equal(chunk_step(s, specs[v].name, 0), SYNC_STEPS);
    }
    int64_t gs;
    assert_int_equal(store_step_get(s, &gs), 1);
    assert_int_equal(gs, SYNC_STEPS);
    store_stats_t st;
    store_get_stats(s, &st);
    assert_int_equal(st.applied, 2 * SYNC_STEPS);
    assert_int_equal(st.sync_steps, SYNC_STEPS);
    assert_int_equal(st.stale, 0);
    assert_int_equal(st.timeout_applies, 0);
    store_destroy(s);
}

/* ---- the cached present count (store_sync.c: presence) ---- */

typedef struct pres_ref {
    int n, started;
    double timeout, last[64];
    unsigned char left[64];
} pres_ref_t;

static int pres_ref_count(const pres_ref_t *r, double now)
{
    int p = 0;
    for (int i = 0; i < r->n; i++) p += !r->left[i] && (!r->started || now - r->last[i] < r->timeout);
    return p;
}

static uint32_t pres_rand(uint32_t *x)
{
    *x = *x * 1664525u + 1013904223u;
    return *x >> 8;
}

/* Against a reference that counts afresh every time: random contributions
 * (store_presence_touch), parked replies seen (store_sync_seen), ticks,
 * WorkerDone, replicas that go silent past the timeout and come back, and
 * times that step back a little (calls race to the lock with `now`s read
 * before it). */
static void test_sync_presence_cache(void **state)
{
    (void)state;
    psc_optim_config_t opt = sgd(0.5f);
    fixture_t f;
    fixture_setup(&f, &opt, 1);
    store_t *s = f.s;
    const int N = 40, R = 30;
    sync_on(s, R, N, 2.0);
    store_sync_cfg_t cfg = {.replicas_to_aggregate = R, .total_num_replicas = N, .timeout_secs = 2.0};
    pres_ref_t ref = {.n = N, .timeout = 2.0};
    uint32_t x = 7;
    double now = 50.0;
    for (int i = 0; i < 40000; i++) {
        uint32_t op = pres_rand(&x) % 1000;
        now += (double)(pres_rand(&x) % 1000) * 2e-5 - 4e-3; /* mostly forward, sometimes back */
        if (op == 0) now += 1.0 + (double)(pres_rand(&x) % 3000) * 1e-3; /* a lull: many expire */
        uint32_t w = pres_rand(&x) % (uint32_t)N;
        if (w >= 30 && pres_rand(&x) % 20) w = (uint32_t)N; /* replicas 30.. are slow: mostly a tick instead */
        if (op < 700) {
            if (!ref.started && w < (uint32_t)N) {
                ref.started = 1;
                for (int r = 0; r < N; r++) ref.last[r] = now;
            }
            if (w < (uint32_t)N && now > ref.last[w]) ref.last[w] = now;
            uint32_t needed = store_presence_touch(s, &cfg, w, now);
            assert_int_equal(needed, sync_needed(R, N, pres_ref_count(&ref, now)));
        } else if (op < 900) {
            if (ref.started && w < (uint32_t)N && now > ref.last[w]) ref.last[w] = now;
            store_sync_seen(s, w, now);
        } else if (op == 900 && w < 10) { /* replicas 0..9 finish, one by one */
            ref.left[w] = 1;
            store_sync_worker_left(s, w);
        }
        uint32_t needed = 0;
        assert_int_equal(store_sync_present(s, now, &needed), pres_ref_count(&ref, now));
    }
    fixture_teardown(&f);
}

/* N replicas contributing in lock step for many timeouts: the count is right
 * at every push and costs a handful of full passes over the replicas, not one
 * a push (which made a sync step O(N^2) on every PS). */
static void test_sync_presence_passes(void **state)
{
    (void)state;
    psc_optim_config_t opt = sgd(0.5f);
    fixture_t f;
    fixture_setup(&f, &opt, 1);
    store_t *s = f.s;
    const int N = 1000;
    sync_on(s, N, N, 30.0);
    store_sync_cfg_t cfg = {.replicas_to_aggregate = N, .total_num_replicas = N, .timeout_secs = 30.0};
    double now = 10.0, t0 = psc_now();
    int pushes = 0;
    for (int step = 0; step < 200; step++)
        for (uint32_t w = 0; w < (uint32_t)N; w++, pushes++) {
            now += 1e-3; /* a step lasts 1 s: 200 s are more than 6 timeouts */
            assert_int_equal(store_presence_touch(s, &cfg, w, now), (uint32_t)N);
        }
    pthread_mutex_lock(&s->presence_lock);
    uint64_t scans = s->pres_scans;
    pthread_mutex_unlock(&s->presence_lock);
    print_message("presence: %d pushes of %d replicas, %llu full passes, %.0f ns a push\n", pushes, N,
                  (unsigned long long)scans, (psc_now() - t0) * 1e9 / pushes); /* printed, never checked */
    assert_true(scans <= 20);
    fixture_teardown(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sync_sgd_mean_and_stale),
        cmocka_unit_test(test_sync_timeout_tick),
        cmocka_unit_test(test_sync_absent_replica),
        cmocka_unit_test(test_sync_seen),
        cmocka_unit_test(test_sync_worker_left),
        cmocka_unit_test(test_sync_global_step),
        cmocka_unit_test(test_sync_lagging_chunk),
        cmocka_unit_test(test_sync_invalid),
        cmocka_unit_test(test_sync_adam_t),
        cmocka_unit_test(test_sync_concurrent),
        cmocka_unit_test(test_sync_presence_cache),
        cmocka_unit_test(test_sync_presence_passes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
