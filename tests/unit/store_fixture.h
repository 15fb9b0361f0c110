/* store_fixture.h — what the store's unit tests share (test_store.c,
 * test_store_sync.c, test_store_export.c): a store with a fixed model
 * (global_step, dense/kernel (784, 256), dense/bias (256), big/kernel 5 MiB),
 * snapshots of everything a request could change, EXPECT_REFUSED (the call
 * fails with its code and message and the snapshot is unchanged but for
 * `rejected` + 1), and the sync-mode helpers. Header-only, for tests. */
#ifndef PSC_TEST_STORE_FIXTURE_H
#define PSC_TEST_STORE_FIXTURE_H

#include "optim.h"
#include "psc.h"
#include "store.h"
#include "wire.h"

#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#define MiB ((uint64_t)1 << 20)
#define JOB "1a2b3c4d5e6f7a8b"
#define OTHER_JOB "3c4d000000000000"
#define CN 1000 /* elements per variable of the concurrency tests */

/* ---- fixture: global_step, dense/kernel (784, 256), dense/bias (256), big/kernel 5 MiB ---- */

static const store_var_spec_t SPECS[] = {
    {.name = "global_step", .rank = 0, .is_step = 1},
    {.name = "dense/kernel", .rank = 2, .shape = {784, 256}},
    {.name = "dense/bias", .rank = 1, .shape = {256}},
    {.name = "big/kernel", .rank = 2, .shape = {1280, 1024}}, /* 5 MiB: chunks of 2, 2, 1 MiB */
};
#define NSPECS ((int)PSC_ARRAY_LEN(SPECS))

static inline uint64_t spec_bytes(const store_var_spec_t *v)
{
    if (v->is_step) return 8;
    uint64_t n = 1;
    for (int d = 0; d < v->rank; d++) n *= (uint64_t)v->shape[d];
    return n * 4;
}

static inline psc_optim_config_t sgd(float lr) { return (psc_optim_config_t){.kind = PSC_OPT_SGD, .learning_rate = lr}; }

static inline float *random_floats(size_t n, uint32_t seed)
{
    float *a = malloc(n * sizeof *a);
    assert_non_null(a);
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        a[i] = (float)((double)x / 4294967296.0 * 2.0 - 1.0);
    }
    return a;
}

/* Assigns a whole variable chunk by chunk. */
static inline void assign_all(store_t *s, const char *name, const void *data, uint64_t total)
{
    char err[256];
    for (size_t k = 0; k < psc_chunk_count(total); k++) {
        size_t len = psc_chunk_len(total, k);
        int rc = store_assign(s, name, psc_chunk_offset(k), (const char *)data + psc_chunk_offset(k), len, total, err,
                              sizeof err);
        if (rc) fail_msg("assign %s chunk %zu: %s", name, k, err);
    }
}

/* Pulls a whole variable chunk by chunk into dst. */
static inline void pull_all(store_t *s, const char *name, void *dst, uint64_t total)
{
    char err[256];
    for (size_t k = 0; k < psc_chunk_count(total); k++) {
        int64_t version = -1;
        int rc = store_pull(s, name, psc_chunk_offset(k), psc_chunk_len(total, k), (char *)dst + psc_chunk_offset(k),
                            &version, err, sizeof err);
        if (rc) fail_msg("pull %s chunk %zu: %s", name, k, err);
        assert_true(version >= 0);
    }
}

static inline int64_t version_of(store_t *s, const char *name)
{
    store_var_info_t *info;
    int n;
    assert_int_equal(store_list(s, &info, &n), 0);
    int64_t v = -1;
    for (int i = 0; i < n; i++)
        if (strcmp(info[i].name, name) == 0) v = info[i].version;
    free(info);
    return v;
}

/* A store with the fixture created and initial values assigned; ready if asked.
 * init[i] holds variable i's initial bytes (NULL for global_step). */
typedef struct fixture {
    store_t *s;
    void *init[NSPECS];
} fixture_t;

static inline void fixture_setup(fixture_t *f, const psc_optim_config_t *opt, int ready)
{
    char err[256];
    int created = -1;
    f->s = store_create();
    int rc = store_create_vars(f->s, JOB, opt, SPECS, NSPECS, &created, err, sizeof err);
    if (rc) fail_msg("create: %s", err);
    assert_int_equal(created, 1);
    for (int i = 0; i < NSPECS; i++) {
        uint64_t b = spec_bytes(&SPECS[i]);
        if (SPECS[i].is_step) {
            f->init[i] = NULL;
            continue;
        }
        f->init[i] = random_floats(b / 4, (uint32_t)i + 1);
        assign_all(f->s, SPECS[i].name, f->init[i], b);
    }
    if (ready) {
        rc = store_set_ready(f->s, JOB, err, sizeof err);
        if (rc) fail_msg("ready: %s", err);
    }
}

static inline void fixture_teardown(fixture_t *f)
{
    for (int i = 0; i < NSPECS; i++) free(f->init[i]);
    store_destroy(f->s);
}

/* ---- snapshots: everything a request could change ---- */

typedef struct snap {
    store_stats_t stats; /* taken first, before this snapshot's own pulls */
    store_var_info_t *info;
    int n;
    int has_step;
    int64_t step;
    void *values[NSPECS]; /* pulled (NULL when not ready) */
} snap_t;

static inline void snap_take(store_t *s, snap_t *sn)
{
    memset(sn, 0, sizeof *sn);
    store_get_stats(s, &sn->stats);
    assert_int_equal(store_list(s, &sn->info, &sn->n), 0);
    sn->has_step = store_step_get(s, &sn->step);
    if (!store_is_ready(s, NULL)) return;
    for (int i = 0; i < NSPECS; i++) {
        uint64_t b = spec_bytes(&SPECS[i]);
        sn->values[i] = malloc(b);
        pull_all(s, SPECS[i].name, sn->values[i], b);
    }
}

static inline void snap_free(snap_t *sn)
{
    free(sn->info);
    for (int i = 0; i < NSPECS; i++) free(sn->values[i]);
}

/* `after` must equal `before` except rejected + 1; `before` stats are taken
 * after its own pulls, so they are re-read from the store. */
static inline void snap_expect_unchanged(const snap_t *before, const store_stats_t *before_stats, const snap_t *after,
                                  const char *what)
{
    const store_stats_t *a = &after->stats, *b = before_stats;
    if (a->applied != b->applied || a->pulls != b->pulls || a->bytes_pushed != b->bytes_pushed ||
        a->bytes_pulled != b->bytes_pulled)
        fail_msg("%s: counters changed", what);
    if (a->rejected != b->rejected + 1)
        fail_msg("%s: rejected went %llu -> %llu (want +1)", what, (unsigned long long)b->rejected,
                 (unsigned long long)a->rejected);
    assert_int_equal(after->n, before->n);
    for (int i = 0; i < before->n; i++) {
        assert_string_equal(after->info[i].name, before->info[i].name);
        if (after->info[i].version != before->info[i].version)
            fail_msg("%s: version of %s changed", what, before->info[i].name);
    }
    assert_int_equal(after->has_step, before->has_step);
    if (after->step != before->step) fail_msg("%s: global_step changed", what);
    for (int i = 0; i < NSPECS; i++) {
        assert_true(!before->values[i] == !after->values[i]);
        if (before->values[i] && memcmp(before->values[i], after->values[i], spec_bytes(&SPECS[i])) != 0)
            fail_msg("%s: values of %s changed", what, SPECS[i].name);
    }
}

/* Runs `call` (which must fail with `code` and an error containing `msg`) and
 * checks it changed nothing. */
#define EXPECT_REFUSED(s, code, msg, call)                                                                   \
    do {                                                                                                     \
        snap_t before_, after_;                                                                              \
        store_stats_t bstats_;                                                                               \
        snap_take((s), &before_);                                                                            \
        store_get_stats((s), &bstats_);                                                                      \
        err[0] = 0;                                                                                          \
        int rc_ = (call);                                                                                    \
        if (rc_ != (code))                                                                                   \
            fail_msg("%s: got %d (%s) \"%s\", want %s", #call, rc_, psc_strerror(rc_), err, psc_strerror(code)); \
        if (!strstr(err, (msg))) fail_msg("%s: error \"%s\" does not contain \"%s\"", #call, err, (msg));   \
        snap_take((s), &after_);                                                                             \
        snap_expect_unchanged(&before_, &bstats_, &after_, #call);                                           \
        snap_free(&before_);                                                                                 \
        snap_free(&after_);                                                                                  \
    } while (0)

/* ---- sync-replica mode ---- */

static inline void sync_on(store_t *s, int R, int N, double timeout)
{
    char err[256];
    store_sync_cfg_t cfg = {.replicas_to_aggregate = R, .total_num_replicas = N, .timeout_secs = timeout};
    int rc = store_set_sync(s, &cfg, err, sizeof err);
    if (rc) fail_msg("set_sync: %s", err);
}

/* A sync push that must succeed; returns its result. */
static inline store_sync_result_t push_sync(store_t *s, const char *name, uint64_t off, const void *g, size_t len,
                                     uint64_t total, int64_t local_step, uint32_t count, uint32_t worker, double now,
                                     void *updated)
{
    char err[256];
    store_sync_result_t res;
    memset(&res, 0x5a, sizeof res); /* every field must be written */
    int rc = store_push_sync(s, name, off, g, len, total, local_step, count, worker, now, updated, &res, err,
                             sizeof err);
    if (rc) fail_msg("push_sync %s@%llu: %s", name, (unsigned long long)off, err);
    return res;
}

static inline store_sync_result_t step_sync(store_t *s, int64_t local_step, uint32_t count, uint32_t worker, double now)
{
    char err[256];
    store_sync_result_t res;
    memset(&res, 0x5a, sizeof res);
    int rc = store_step_sync(s, local_step, count, worker, now, &res, err, sizeof err);
    if (rc) fail_msg("step_sync: %s", err);
    return res;
}

static inline int64_t chunk_step(store_t *s, const char *name, uint64_t off)
{
    char err[256];
    int64_t step = -1;
    int rc = store_chunk_read(s, name, off, 0, NULL, &step, NULL, err, sizeof err);
    if (rc) fail_msg("chunk_read %s: %s", name, err);
    return step;
}

/* Recorded store_sync_tick callbacks. */
typedef struct tick_log {
    int calls;
    char name[112];
    uint64_t offset;
    int64_t step;
    uint32_t count;
    int by_timeout;
} tick_log_t;

static inline void on_tick(void *arg, const char *name, uint64_t offset, int64_t step, uint32_t count, int by_timeout)
{
    tick_log_t *t = arg;
    t->calls++;
    snprintf(t->name, sizeof t->name, "%s", name);
    t->offset = offset;
    t->step = step;
    t->count = count;
    t->by_timeout = by_timeout;
}

/* SGD, R = N = 2: the update is lr * mean exactly; counts weigh the mean; a
 * late contribution for an applied step is stale. */
#endif
