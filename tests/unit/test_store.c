/* test_store — the PS variable store.
 *
 * Round trips (create, assign chunk by chunk, ready, pull) are bit-exact for a
 * one-chunk, a three-chunk (5 MiB) variable and global_step. Pushes apply SGD
 * exactly and bump versions; Adam's t is counted per wire chunk. Every invalid
 * request returns its code and a message naming the problem, and a full
 * snapshot (values, versions, global_step, counters) taken before and after is
 * identical but for `rejected` + 1. Concurrent pushes lose no update.
 *
 * Sync-replica mode: with SGD the applied update is lr * the mean of the
 * step's contributions exactly (counts weigh it); a late contribution is
 * stale and returns the current values; the timeout rule (store_sync_tick),
 * absent replicas and WorkerDone lower what a step waits for; global_step
 * advances once per step; a lagging chunk applies its pending step and skips
 * ahead; bad sync requests change nothing (accumulators and presence
 * included); Adam's t counts steps, not contributions (bit-identical to an
 * async store pushed the same means); replica threads in lock step lose no
 * step.
 *
 * Checkpoints: an export names every tensor as TensorFlow does (slots
 * "<var>/Adam", "/Adam_1", ...) plus "<var>/.t", in creation order; exports
 * taken while threads push are consistent cuts (the push fence: values match
 * their update counts, and counters of variables pushed in a fixed order
 * match that order); an import with any bad tensor or fetch error changes
 * nothing, a good one restores an older checkpoint bit for bit (and replaying
 * the same pushes gives the same state), and in sync mode restarts every
 * accumulator at the given step with nothing pending, and presence afresh.
 */
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

/* ---- fixture: global_step, dense/kernel (784, 256), dense/bias (256), big/kernel 5 MiB ---- */

static const store_var_spec_t SPECS[] = {
    {.name = "global_step", .rank = 0, .is_step = 1},
    {.name = "dense/kernel", .rank = 2, .shape = {784, 256}},
    {.name = "dense/bias", .rank = 1, .shape = {256}},
    {.name = "big/kernel", .rank = 2, .shape = {1280, 1024}}, /* 5 MiB: chunks of 2, 2, 1 MiB */
};
#define NSPECS ((int)PSC_ARRAY_LEN(SPECS))

static uint64_t spec_bytes(const store_var_spec_t *v)
{
    if (v->is_step) return 8;
    uint64_t n = 1;
    for (int d = 0; d < v->rank; d++) n *= (uint64_t)v->shape[d];
    return n * 4;
}

static psc_optim_config_t sgd(float lr) { return (psc_optim_config_t){.kind = PSC_OPT_SGD, .learning_rate = lr}; }

static float *random_floats(size_t n, uint32_t seed)
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
static void assign_all(store_t *s, const char *name, const void *data, uint64_t total)
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
static void pull_all(store_t *s, const char *name, void *dst, uint64_t total)
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

static int64_t version_of(store_t *s, const char *name)
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

static void fixture_setup(fixture_t *f, const psc_optim_config_t *opt, int ready)
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

static void fixture_teardown(fixture_t *f)
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

static void snap_take(store_t *s, snap_t *sn)
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

static void snap_free(snap_t *sn)
{
    free(sn->info);
    for (int i = 0; i < NSPECS; i++) free(sn->values[i]);
}

/* `after` must equal `before` except rejected + 1; `before` stats are taken
 * after its own pulls, so they are re-read from the store. */
static void snap_expect_unchanged(const snap_t *before, const store_stats_t *before_stats, const snap_t *after,
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

/* ---- tests ---- */

static void test_round_trip(void **state)
{
    (void)state;
    char err[256];
    psc_optim_config_t opt = sgd(0.5f);
    fixture_t f;
    fixture_setup(&f, &opt, 0);

    /* Pull before ready. */
    float tmp[4];
    assert_int_equal(store_pull(f.s, "dense/bias", 0, 16, tmp, NULL, err, sizeof err), PSC_ENOTREADY);
    assert_non_null(strstr(err, "not ready"));
    char job[17] = "x";
    assert_int_equal(store_is_ready(f.s, job), 0);
    assert_string_equal(job, JOB);

    /* global_step: 8 bytes of little-endian int64. */
    unsigned char le[8];
    int64_t gs = 0x0102030405060708LL;
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)((uint64_t)gs >> (8 * i));
    assert_int_equal(store_assign(f.s, "global_step", 0, le, 8, 8, err, sizeof err), 0);

    /* A second create with the same specs changes nothing. */
    int created = -1;
    assert_int_equal(store_create_vars(f.s, JOB, &opt, SPECS, NSPECS, &created, err, sizeof err), 0);
    assert_int_equal(created, 0);

    assert_int_equal(store_set_ready(f.s, JOB, err, sizeof err), 0);
    assert_int_equal(store_is_ready(f.s, job), 1);
    assert_string_equal(job, JOB);
    assert_int_equal(store_set_ready(f.s, JOB, err, sizeof err), 0); /* idempotent */

    for (int i = 0; i < NSPECS; i++) {
        uint64_t b = spec_bytes(&SPECS[i]);
        void *got = calloc(1, b);
        pull_all(f.s, SPECS[i].name, got, b);
        if (SPECS[i].is_step)
            assert_memory_equal(got, le, 8);
        else
            assert_memory_equal(got, f.init[i], b);
        free(got);
    }
    int64_t step = 0;
    assert_int_equal(store_step_get(f.s, &step), 1);
    assert_int_equal(step, gs);

    /* A pull of part of a chunk is fine too. */
    float part[3];
    int64_t ver = -1;
    assert_int_equal(store_pull(f.s, "big/kernel", 4 * MiB + 8, 12, part, &ver, err, sizeof err), 0);
    assert_memory_equal(part, (char *)f.init[3] + 4 * MiB + 8, 12);
    assert_int_equal(ver, 3); /* three chunks assigned */

    /* list: creation order, shapes, sizes, versions = chunks assigned */
    store_var_info_t *info;
    int n;
    assert_int_equal(store_list(f.s, &info, &n), 0);
    assert_int_equal(n, NSPECS);
    for (int i = 0; i < NSPECS; i++) {
        assert_string_equal(info[i].name, SPECS[i].name);
        assert_int_equal(info[i].rank, SPECS[i].rank);
        assert_int_equal(info[i].bytes, spec_bytes(&SPECS[i]));
        assert_int_equal(info[i].is_step, SPECS[i].is_step);
        assert_int_equal(info[i].version, (int64_t)psc_chunk_count(spec_bytes(&SPECS[i])));
        for (int d = 0; d < SPECS[i].rank; d++) assert_int_equal(info[i].shape[d], SPECS[i].shape[d]);
    }
    free(info);

    store_stats_t st;
    store_get_stats(f.s, &st);
    assert_int_equal(st.applied, 0);
    assert_int_equal(st.rejected, 1); /* the pull before ready */
    assert_int_equal(st.pulls, 1 + 1 + 1 + 3 + 1);
    fixture_teardown(&f);
}

static void test_create_conflicts(void **state)
{
    (void)state;
    char err[256];
    psc_optim_config_t opt = sgd(0.5f);
    fixture_t f;
    fixture_setup(&f, &opt, 1);
    store_t *s = f.s;
    int created = -1;

    store_var_spec_t v[NSPECS];
    memcpy(v, SPECS, sizeof v);
    v[1].shape[1] = 128;
    EXPECT_REFUSED(s, PSC_EMISMATCH, "dense/kernel: shape (784, 128) differs from existing (784, 256)",
                   store_create_vars(s, JOB, &opt, v, NSPECS, &created, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EEXISTS, "variables exist for job " JOB "; refusing job " OTHER_JOB,
                   store_create_vars(s, OTHER_JOB, &opt, SPECS, NSPECS, &created, err, sizeof err));
    /* A subset or a superset of the existing variables is a mismatch too. */
    EXPECT_REFUSED(s, PSC_EMISMATCH, "request declares 3 variables, 4 exist",
                   store_create_vars(s, JOB, &opt, SPECS, NSPECS - 1, &created, err, sizeof err));
    store_var_spec_t more[NSPECS + 1];
    memcpy(more, SPECS, sizeof SPECS);
    more[NSPECS] = (store_var_spec_t){.name = "extra/bias", .rank = 1, .shape = {3}};
    EXPECT_REFUSED(s, PSC_EMISMATCH, "extra/bias: not among",
                   store_create_vars(s, JOB, &opt, more, NSPECS + 1, &created, err, sizeof err));
    psc_optim_config_t adam = {.kind = PSC_OPT_ADAM, .learning_rate = 0.5f, .beta1 = 0.9f, .beta2 = 0.999f};
    EXPECT_REFUSED(s, PSC_EMISMATCH, "optimizer settings differ",
                   store_create_vars(s, JOB, &adam, SPECS, NSPECS, &created, err, sizeof err));
    memcpy(v, SPECS, sizeof v);
    v[2].is_step = 0;
    v[0].is_step = 0;
    v[0].rank = 0;
    EXPECT_REFUSED(s, PSC_EMISMATCH, "global_step: declared trainable",
                   store_create_vars(s, JOB, &opt, v, NSPECS, &created, err, sizeof err));
    EXPECT_REFUSED(s, PSC_ENOTFOUND, "no variables created for job " OTHER_JOB,
                   store_set_ready(s, OTHER_JOB, err, sizeof err));

    /* Same request again: accepted, nothing created, values untouched. */
    created = -1;
    assert_int_equal(store_create_vars(s, JOB, &opt, SPECS, NSPECS, &created, err, sizeof err), 0);
    assert_int_equal(created, 0);
    float *got = malloc(spec_bytes(&SPECS[3]));
    pull_all(s, "big/kernel", got, spec_bytes(&SPECS[3]));
    assert_memory_equal(got, f.init[3], spec_bytes(&SPECS[3]));
    free(got);
    fixture_teardown(&f);
}

static void test_create_invalid(void **state)
{
    (void)state;
    char err[256];
    psc_optim_config_t opt = sgd(0.5f);
    store_t *s = store_create();
    int created = -1;

    store_var_spec_t dup[] = {
        {.name = "a", .rank = 1, .shape = {4}},
        {.name = "b", .rank = 1, .shape = {4}},
        {.name = "a", .rank = 1, .shape = {4}},
    };
    EXPECT_REFUSED(s, PSC_EINVAL, "a: declared twice",
                   store_create_vars(s, JOB, &opt, dup, 3, &created, err, sizeof err));
    store_var_spec_t zero[] = {{.name = "k", .rank = 2, .shape = {3, 0}}};
    EXPECT_REFUSED(s, PSC_EINVAL, "k: shape (3, 0) has a dimension <= 0",
                   store_create_vars(s, JOB, &opt, zero, 1, &created, err, sizeof err));
    store_var_spec_t neg[] = {{.name = "k", .rank = 1, .shape = {-2}}};
    EXPECT_REFUSED(s, PSC_EINVAL, "k: shape (-2,) has a dimension <= 0",
                   store_create_vars(s, JOB, &opt, neg, 1, &created, err, sizeof err));
    store_var_spec_t step1[] = {{.name = "global_step", .rank = 1, .shape = {1}, .is_step = 1}};
    EXPECT_REFUSED(s, PSC_EINVAL, "global_step: a step counter must be a scalar",
                   store_create_vars(s, JOB, &opt, step1, 1, &created, err, sizeof err));
    store_var_spec_t rank5[] = {{.name = "k", .rank = 5}};
    EXPECT_REFUSED(s, PSC_EINVAL, "k: rank 5", store_create_vars(s, JOB, &opt, rank5, 1, &created, err, sizeof err));
    char longname[200];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    store_var_spec_t lng[] = {{.name = longname, .rank = 1, .shape = {1}}};
    EXPECT_REFUSED(s, PSC_EINVAL, "at most 111", store_create_vars(s, JOB, &opt, lng, 1, &created, err, sizeof err));
    store_var_spec_t two_steps[] = {{.name = "s1", .is_step = 1}, {.name = "s2", .is_step = 1}};
    EXPECT_REFUSED(s, PSC_EINVAL, "2 step counters",
                   store_create_vars(s, JOB, &opt, two_steps, 2, &created, err, sizeof err));
    psc_optim_config_t bad = {.kind = PSC_OPT_ADAM, .learning_rate = 0.1f, .beta1 = 1.0f, .beta2 = 0.999f};
    EXPECT_REFUSED(s, PSC_EINVAL, "adam beta1 1 must be in [0, 1)",
                   store_create_vars(s, JOB, &bad, SPECS, NSPECS, &created, err, sizeof err));
    psc_optim_config_t lr0 = sgd(0.0f);
    EXPECT_REFUSED(s, PSC_EINVAL, "learning_rate",
                   store_create_vars(s, JOB, &lr0, SPECS, NSPECS, &created, err, sizeof err));

    /* Before any create: nothing to pull, push, assign, ready or step. */
    float x[4] = {0};
    int64_t v = 0;
    EXPECT_REFUSED(s, PSC_ENOTREADY, "model not ready (no job created yet)",
                   store_pull(s, "a", 0, 16, x, &v, err, sizeof err));
    EXPECT_REFUSED(s, PSC_ENOTREADY, "model not ready (no job created yet)",
                   store_push(s, "a", 0, x, 16, 16, NULL, &v, err, sizeof err));
    EXPECT_REFUSED(s, PSC_ENOTFOUND, "unknown variable \"a\"", store_assign(s, "a", 0, x, 16, 16, err, sizeof err));
    EXPECT_REFUSED(s, PSC_ENOTFOUND, "no variables created for job", store_set_ready(s, JOB, err, sizeof err));
    EXPECT_REFUSED(s, PSC_ENOTFOUND, "holds no global_step", store_step_add(s, 1, &v, err, sizeof err));
    assert_int_equal(store_step_get(s, &v), 0);

    /* None of that created anything: a valid create still creates. */
    created = -1;
    assert_int_equal(store_create_vars(s, JOB, &opt, SPECS, NSPECS, &created, err, sizeof err), 0);
    assert_int_equal(created, 1);
    store_stats_t st;
    store_get_stats(s, &st);
    assert_int_equal(st.rejected, 14);
    store_destroy(s);

    /* A PS that holds nothing. */
    s = store_create();
    assert_int_equal(store_create_vars(s, JOB, &opt, NULL, 0, &created, err, sizeof err), 0);
    assert_int_equal(created, 1);
    assert_int_equal(store_set_ready(s, JOB, err, sizeof err), 0);
    assert_int_equal(store_create_vars(s, JOB, &opt, NULL, 0, &created, err, sizeof err), 0);
    assert_int_equal(created, 0);
    store_destroy(s);
    store_destroy(NULL);
}

static void test_invalid_requests_change_nothing(void **state)
{
    (void)state;
    char err[256];
    psc_optim_config_t opt = sgd(0.5f);
    fixture_t f;
    fixture_setup(&f, &opt, 1);
    store_t *s = f.s;
    int64_t v = 0;
    uint64_t kb = spec_bytes(&SPECS[1]), bb = spec_bytes(&SPECS[3]);
    float *g = random_floats(bb / 4, 99);
    float *out = malloc(bb);

    EXPECT_REFUSED(s, PSC_ENOTFOUND, "unknown variable \"dense/kernal\"",
                   store_push(s, "dense/kernal", 0, g, kb, kb, NULL, &v, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EMISMATCH, "dense/kernel: gradient is 1000 bytes, variable is 802816 bytes",
                   store_push(s, "dense/kernel", 0, g, 1000, 1000, NULL, &v, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EINVAL,
                   "dense/kernel: chunk of 802804 bytes at offset 12 is not a wire chunk (chunks are 2097152 bytes)",
                   store_push(s, "dense/kernel", 12, g, kb - 12, kb, NULL, &v, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EINVAL, "not a wire chunk",
                   store_push(s, "dense/kernel", 0, g, kb - 4, kb, NULL, &v, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EINVAL, "not a wire chunk", /* short middle chunk */
                   store_push(s, "big/kernel", 2 * MiB, g, MiB, bb, NULL, &v, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EINVAL, "not a wire chunk", /* last chunk too long */
                   store_push(s, "big/kernel", 4 * MiB, g, 2 * MiB, bb, NULL, &v, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EINVAL, "not a wire chunk", /* past the end */
                   store_push(s, "big/kernel", 6 * MiB, g, MiB, bb, NULL, &v, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EINVAL, "global_step is not trainable; use Step",
                   store_push(s, "global_step", 0, g, 8, 8, NULL, &v, err, sizeof err));

    /* Non-finite values anywhere in a chunk, index within the variable. */
    float bias[256];
    memcpy(bias, g, sizeof bias);
    bias[17] = NAN;
    EXPECT_REFUSED(s, PSC_EINVAL, "dense/bias: gradient has a non-finite value at index 17",
                   store_push(s, "dense/bias", 0, bias, sizeof bias, sizeof bias, out, &v, err, sizeof err));
    bias[17] = g[17];
    bias[255] = -INFINITY;
    EXPECT_REFUSED(s, PSC_EINVAL, "dense/bias: gradient has a non-finite value at index 255",
                   store_push(s, "dense/bias", 0, bias, sizeof bias, sizeof bias, out, &v, err, sizeof err));
    float *chunk1 = g + (2 * MiB / 4);
    float keep = chunk1[5];
    chunk1[5] = INFINITY;
    EXPECT_REFUSED(s, PSC_EINVAL, "big/kernel: gradient has a non-finite value at index 524293",
                   store_push(s, "big/kernel", 2 * MiB, chunk1, 2 * MiB, bb, NULL, &v, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EINVAL, "big/kernel: assigned data has a non-finite value at index 524293",
                   store_assign(s, "big/kernel", 2 * MiB, chunk1, 2 * MiB, bb, err, sizeof err));
    chunk1[5] = keep;

    /* Assign: the same rules; global_step takes exactly 8 bytes >= 0. */
    EXPECT_REFUSED(s, PSC_ENOTFOUND, "unknown variable \"nope\"",
                   store_assign(s, "nope", 0, g, 16, 16, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EMISMATCH, "dense/bias: assigned data is 1020 bytes, variable is 1024 bytes",
                   store_assign(s, "dense/bias", 0, g, 1020, 1020, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EINVAL, "not a wire chunk",
                   store_assign(s, "big/kernel", 4, g, 2 * MiB, bb, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EMISMATCH, "global_step: assigned data is 4 bytes, variable is 8 bytes",
                   store_assign(s, "global_step", 0, g, 4, 4, err, sizeof err));
    unsigned char minus1[8];
    memset(minus1, 0xff, 8);
    EXPECT_REFUSED(s, PSC_EINVAL, "global_step: value -1 is negative",
                   store_assign(s, "global_step", 0, minus1, 8, 8, err, sizeof err));

    /* Pull: unknown, out of range, more than a chunk. */
    EXPECT_REFUSED(s, PSC_ENOTFOUND, "unknown variable \"dense/kernal\"",
                   store_pull(s, "dense/kernal", 0, 16, out, &v, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EINVAL, "dense/bias: pull of 8 bytes at offset 1020 is outside its 1024 bytes",
                   store_pull(s, "dense/bias", 1020, 8, out, &v, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EINVAL, "exceeds the 2097152-byte chunk",
                   store_pull(s, "big/kernel", 0, 2 * MiB + 4, out, &v, err, sizeof err));

    /* Step: negative increments. */
    EXPECT_REFUSED(s, PSC_EINVAL, "increment -1 is negative", store_step_add(s, -1, &v, err, sizeof err));

    free(out);
    free(g);
    fixture_teardown(&f);
}

/* store_push_check / store_pull_check (what a Batch checks first) refuse what
 * the calls refuse, with the same message, change nothing, and accept what
 * they accept without applying it. */
static void test_checks_alone(void **state)
{
    (void)state;
    char err[256];
    psc_optim_config_t opt = sgd(0.5f);
    fixture_t f;
    fixture_setup(&f, &opt, 1);
    store_t *s = f.s;
    uint64_t kb = spec_bytes(&SPECS[1]), bb = spec_bytes(&SPECS[3]);
    float *g = random_floats(bb / 4, 7);
    EXPECT_REFUSED(s, PSC_ENOTFOUND, "unknown variable \"dense/kernal\"",
                   store_push_check(s, "dense/kernal", 0, g, kb, kb, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EMISMATCH, "dense/kernel: gradient is 1000 bytes, variable is 802816 bytes",
                   store_push_check(s, "dense/kernel", 0, g, 1000, 1000, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EINVAL, "not a wire chunk",
                   store_push_check(s, "big/kernel", 2 * MiB, g, MiB, bb, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EINVAL, "global_step is not trainable; use Step",
                   store_push_check(s, "global_step", 0, g, 8, 8, err, sizeof err));
    float keep = g[100];
    g[100] = NAN;
    EXPECT_REFUSED(s, PSC_EINVAL, "dense/bias: gradient has a non-finite value at index 100",
                   store_push_check(s, "dense/bias", 0, g, 1024, 1024, err, sizeof err));
    g[100] = keep;
    EXPECT_REFUSED(s, PSC_ENOTFOUND, "unknown variable \"dense/kernal\"",
                   store_pull_check(s, "dense/kernal", 0, 16, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EINVAL, "dense/bias: pull of 8 bytes at offset 1020 is outside its 1024 bytes",
                   store_pull_check(s, "dense/bias", 1020, 8, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EINVAL, "exceeds the 2097152-byte chunk",
                   store_pull_check(s, "big/kernel", 0, 2 * MiB + 4, err, sizeof err));

    /* accepted: nothing applied, nothing counted */
    snap_t before, after;
    snap_take(s, &before);
    store_stats_t st0, st1;
    store_get_stats(s, &st0);
    assert_int_equal(store_push_check(s, "big/kernel", 4 * MiB, g, MiB, bb, err, sizeof err), 0);
    assert_int_equal(store_push_check(s, "dense/bias", 0, g, 1024, 1024, err, sizeof err), 0);
    assert_int_equal(store_pull_check(s, "dense/kernel", 4, 400, err, sizeof err), 0);
    assert_int_equal(store_pull_check(s, "global_step", 0, 8, err, sizeof err), 0);
    store_get_stats(s, &st1);
    assert_true(st1.applied == st0.applied && st1.rejected == st0.rejected && st1.pulls == st0.pulls);
    snap_take(s, &after);
    for (int i = 0; i < before.n; i++) assert_true(after.info[i].version == before.info[i].version);
    for (int i = 0; i < NSPECS; i++)
        if (before.values[i]) assert_memory_equal(before.values[i], after.values[i], spec_bytes(&SPECS[i]));
    snap_free(&before);
    snap_free(&after);
    /* before the model is ready, a check refuses like the call */
    store_reset(s);
    EXPECT_REFUSED(s, PSC_ENOTREADY, "not ready", store_pull_check(s, "dense/bias", 0, 4, err, sizeof err));
    free(g);
    fixture_teardown(&f);
}

static void test_push_sgd_exact(void **state)
{
    (void)state;
    char err[256];
    const float lr = 0.5f;
    psc_optim_config_t opt = sgd(lr);
    fixture_t f;
    fixture_setup(&f, &opt, 1);
    store_t *s = f.s;

    for (int i = 1; i < NSPECS; i++) {
        const char *name = SPECS[i].name;
        uint64_t b = spec_bytes(&SPECS[i]);
        size_t n = b / 4;
        float *g = random_floats(n, 1000 + (uint32_t)i), *want = malloc(b), *got = malloc(b), *upd = malloc(b);
        int64_t v0 = version_of(s, name);
        for (size_t j = 0; j < n; j++) want[j] = ((float *)f.init[i])[j] - lr * g[j];
        for (size_t k = 0; k < psc_chunk_count(b); k++) {
            int64_t ver = -1;
            uint64_t off = psc_chunk_offset(k);
            size_t len = psc_chunk_len(b, k);
            /* push-pull on even chunks: the reply carries the new values */
            int rc = store_push(s, name, off, (char *)g + off, len, b, k % 2 == 0 ? (char *)upd + off : NULL, &ver,
                                err, sizeof err);
            if (rc) fail_msg("push %s: %s", name, err);
            assert_int_equal(ver, v0 + (int64_t)k + 1);
            if (k % 2 == 0) assert_memory_equal((char *)upd + off, (char *)want + off, len);
        }
        pull_all(s, name, got, b);
        assert_memory_equal(got, want, b);
        assert_int_equal(version_of(s, name), v0 + (int64_t)psc_chunk_count(b));
        free(g);
        free(want);
        free(got);
        free(upd);
    }
    store_stats_t st;
    store_get_stats(s, &st);
    assert_int_equal(st.applied, 1 + 1 + 3);
    assert_int_equal(st.bytes_pushed, spec_bytes(&SPECS[1]) + spec_bytes(&SPECS[2]) + spec_bytes(&SPECS[3]));
    assert_int_equal(st.rejected, 0);
    fixture_teardown(&f);
}

static void test_push_unaligned_gradient(void **state)
{
    (void)state;
    char err[256];
    psc_optim_config_t opt = {.kind = PSC_OPT_ADAM, .learning_rate = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f,
                              .epsilon = 1e-8f};
    static const store_var_spec_t specs[] = {{.name = "a", .rank = 1, .shape = {3001}},
                                             {.name = "b", .rank = 1, .shape = {3001}}};
    store_t *s = store_create();
    int created;
    assert_int_equal(store_create_vars(s, JOB, &opt, specs, 2, &created, err, sizeof err), 0);
    assert_int_equal(store_set_ready(s, JOB, err, sizeof err), 0);
    float *g = random_floats(3001, 5);
    char *raw = malloc(3001 * 4 + 1);
    memcpy(raw + 1, g, 3001 * 4);
    float a[3001], b[3001];
    for (int rep = 0; rep < 2; rep++) {
        assert_int_equal(store_push(s, "a", 0, g, sizeof a, sizeof a, a, NULL, err, sizeof err), 0);
        assert_int_equal(store_push(s, "b", 0, raw + 1, sizeof b, sizeof b, b, NULL, err, sizeof err), 0);
        assert_memory_equal(a, b, sizeof a);
    }
    raw[1 + 4 * 2999 + 3] = (char)0x7f; /* make element 2999 a NaN or Inf: exponent bits all ones */
    raw[1 + 4 * 2999 + 2] = (char)0xff;
    assert_int_equal(store_push(s, "b", 0, raw + 1, sizeof b, sizeof b, b, NULL, err, sizeof err), PSC_EINVAL);
    assert_non_null(strstr(err, "index 2999"));
    free(raw);
    free(g);
    store_destroy(s);
}

/* Splits len bytes at p into segments of pseudo-random sizes 1..max_seg
 * (seeded), so floats straddle most boundaries. Returns the count. */
static int split_bytes(const void *p, size_t len, psc_iov_t *iov, int cap, uint32_t seed, size_t max_seg)
{
    int n = 0;
    size_t at = 0;
    while (at < len) {
        seed = seed * 1664525u + 1013904223u;
        size_t k = 1 + (seed >> 8) % max_seg;
        if (k > len - at || n == cap - 1) k = len - at;
        iov[n].base = (const char *)p + at;
        iov[n++].len = k;
        at += k;
    }
    return n;
}

/* A gradient in segments split anywhere (as gRPC's slices hold a request):
 * the same result as one buffer, bit for bit, and a non-finite value that
 * straddles two segments is refused with its index, nothing changed. */
static void test_push_segments(void **state)
{
    (void)state;
    char err[256];
    psc_optim_config_t opt = {.kind = PSC_OPT_ADAM, .learning_rate = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f,
                              .epsilon = 1e-7f};
    fixture_t f1, f2;
    fixture_setup(&f1, &opt, 1);
    fixture_setup(&f2, &opt, 1);
    uint64_t bb = spec_bytes(&SPECS[3]), kb = spec_bytes(&SPECS[1]);
    float *g = random_floats(bb / 4, 21);
    static psc_iov_t iov[70000];
    float *u1 = malloc(2 * MiB), *u2 = malloc(2 * MiB);
    for (int rep = 0; rep < 3; rep++) {
        /* dense/kernel (one chunk), big/kernel's 3 chunks (2, 2, 1 MiB) */
        assert_int_equal(store_push(f1.s, "dense/kernel", 0, g, kb, kb, u1, NULL, err, sizeof err), 0);
        int n = split_bytes(g, kb, iov, 70000, 100 + (uint32_t)rep, rep == 0 ? 7 : 4000);
        assert_int_equal(store_push_iov(f2.s, "dense/kernel", 0, iov, n, kb, kb, u2, NULL, err, sizeof err), 0);
        assert_memory_equal(u1, u2, kb);
        for (uint64_t off = 0; off < bb; off += 2 * MiB) {
            size_t len = (size_t)PSC_MIN(2 * MiB, bb - off);
            const char *p = (const char *)g + off;
            assert_int_equal(store_push(f1.s, "big/kernel", off, p, len, bb, u1, NULL, err, sizeof err), 0);
            n = split_bytes(p, len, iov, 70000, 200 + (uint32_t)rep, 65536);
            assert_int_equal(store_push_iov(f2.s, "big/kernel", off, iov, n, len, bb, u2, NULL, err, sizeof err), 0);
            assert_memory_equal(u1, u2, len);
        }
    }
    /* element 100 of dense/bias NaN, its 4 bytes in segments [..401] [402..] */
    float bias[256];
    memcpy(bias, g, sizeof bias);
    bias[100] = NAN;
    psc_iov_t two[2] = {{bias, 402}, {(const char *)bias + 402, sizeof bias - 402}};
    store_t *s = f2.s;
    EXPECT_REFUSED(s, PSC_EINVAL, "dense/bias: gradient has a non-finite value at index 100",
                   store_push_iov(s, "dense/bias", 0, two, 2, sizeof bias, sizeof bias, NULL, NULL, err, sizeof err));
    /* 1-byte segments: the last element */
    bias[100] = g[100];
    bias[255] = INFINITY;
    int n = split_bytes(bias, sizeof bias, iov, 70000, 5, 1);
    assert_int_equal(n, (int)sizeof bias);
    EXPECT_REFUSED(s, PSC_EINVAL, "dense/bias: gradient has a non-finite value at index 255",
                   store_push_iov(s, "dense/bias", 0, iov, n, sizeof bias, sizeof bias, NULL, NULL, err, sizeof err));
    /* segments that hold fewer bytes than the length says */
    EXPECT_REFUSED(s, PSC_EINVAL, "dense/bias: gradient chunk has no data",
                   store_push_iov(s, "dense/bias", 0, two, 1, sizeof bias, sizeof bias, NULL, NULL, err, sizeof err));
    free(u1);
    free(u2);
    free(g);
    fixture_teardown(&f1);
    fixture_teardown(&f2);
}

static void test_step(void **state)
{
    (void)state;
    char err[256];
    psc_optim_config_t opt = sgd(0.5f);
    fixture_t f;
    fixture_setup(&f, &opt, 0);
    store_t *s = f.s;
    int64_t v = -1;
    assert_int_equal(store_step_get(s, &v), 1);
    assert_int_equal(v, 0);
    assert_int_equal(store_step_add(s, 0, &v, err, sizeof err), 0); /* allowed before ready */
    assert_int_equal(v, 0);
    assert_int_equal(version_of(s, "global_step"), 0);
    assert_int_equal(store_step_add(s, 3, &v, err, sizeof err), 0);
    assert_int_equal(v, 3);
    assert_int_equal(store_step_add(s, 4, &v, err, sizeof err), 0);
    assert_int_equal(v, 7);
    assert_int_equal(version_of(s, "global_step"), 2);

    assert_int_equal(store_set_ready(s, JOB, err, sizeof err), 0);
    unsigned char le[8];
    int64_t ver = -1;
    assert_int_equal(store_pull(s, "global_step", 0, 8, le, &ver, err, sizeof err), 0);
    assert_int_equal(ver, 2);
    static const unsigned char seven[8] = {7, 0, 0, 0, 0, 0, 0, 0};
    assert_memory_equal(le, seven, 8);

    /* Assign after ready (restore): 1000 little-endian. */
    static const unsigned char thousand[8] = {0xe8, 0x03, 0, 0, 0, 0, 0, 0};
    assert_int_equal(store_assign(s, "global_step", 0, thousand, 8, 8, err, sizeof err), 0);
    assert_int_equal(store_step_get(s, &v), 1);
    assert_int_equal(v, 1000);
    assert_int_equal(store_step_add(s, 1, &v, err, sizeof err), 0);
    assert_int_equal(v, 1001);

    /* Overflow is refused and changes nothing. */
    unsigned char max[8];
    for (int i = 0; i < 8; i++) max[i] = (unsigned char)((uint64_t)(INT64_MAX - 1) >> (8 * i));
    assert_int_equal(store_assign(s, "global_step", 0, max, 8, 8, err, sizeof err), 0);
    EXPECT_REFUSED(s, PSC_EINVAL, "overflows", store_step_add(s, 2, &v, err, sizeof err));
    assert_int_equal(store_step_add(s, 1, &v, err, sizeof err), 0);
    assert_int_equal(v, INT64_MAX);
    fixture_teardown(&f);
}

/* Adam's t per chunk: push chunk 0 twice and chunk 1 once; chunk 0's second
 * update uses t = 2, chunk 1's uses t = 1. */
static void test_adam_t_per_chunk(void **state)
{
    (void)state;
    char err[256];
    psc_optim_config_t opt = {.kind = PSC_OPT_ADAM, .learning_rate = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f,
                              .epsilon = 1e-8f};
    static const store_var_spec_t specs[] = {{.name = "w", .rank = 2, .shape = {768, 1024}}}; /* 3 MiB: 2 chunks */
    const uint64_t b = 3 * MiB;
    const size_t n = b / 4, c0 = 2 * MiB / 4;
    store_t *s = store_create();
    int created;
    assert_int_equal(store_create_vars(s, JOB, &opt, specs, 1, &created, err, sizeof err), 0);
    float *w0 = random_floats(n, 11), *ga = random_floats(n, 12), *gb = random_floats(n, 13);
    assign_all(s, "w", w0, b);
    assert_int_equal(store_set_ready(s, JOB, err, sizeof err), 0);
    int64_t ver;
    assert_int_equal(store_push(s, "w", 0, ga, 2 * MiB, b, NULL, &ver, err, sizeof err), 0);
    assert_int_equal(store_push(s, "w", 0, gb, 2 * MiB, b, NULL, &ver, err, sizeof err), 0);
    assert_int_equal(store_push(s, "w", 2 * MiB, (char *)ga + 2 * MiB, MiB, b, NULL, &ver, err, sizeof err), 0);
    assert_int_equal(ver, 2 + 3);
    float *got = malloc(b);
    pull_all(s, "w", got, b);

    /* Double-precision Adam with the t each chunk should have seen. */
    const double b1 = opt.beta1, b2 = opt.beta2, lr = opt.learning_rate, eps = opt.epsilon;
    double lr1 = lr * sqrt(1 - b2) / (1 - b1), lr2 = lr * sqrt(1 - b2 * b2) / (1 - b1 * b1);
    size_t bad = 0, differs_from_t1 = 0;
    for (size_t i = 0; i < n; i++) {
        double w = w0[i], m = 0, v = 0, g = ga[i], wa = fabs(w);
        m = (1 - b1) * g;
        v = (1 - b2) * g * g;
        w -= lr1 * m / (sqrt(v) + eps);
        wa += fabs(lr1 * m / (sqrt(v) + eps));
        if (i < c0) {
            double w_if_t1 = w, m1 = b1 * m + (1 - b1) * gb[i], v1 = b2 * v + (1 - b2) * (double)gb[i] * gb[i];
            w -= lr2 * m1 / (sqrt(v1) + eps);
            wa += fabs(lr2 * m1 / (sqrt(v1) + eps));
            w_if_t1 -= lr1 * m1 / (sqrt(v1) + eps);
            if (fabs(w_if_t1 - w) > 1e-5 * wa) differs_from_t1++;
        }
        if (!(fabs((double)got[i] - w) <= 1e-6 * wa)) {
            if (bad++ < 5) print_error("w[%zu] = %.9g, want %.9g\n", i, (double)got[i], w);
        }
    }
    assert_int_equal(bad, 0);
    assert_true(differs_from_t1 > c0 / 2); /* the check above could tell t = 1 from t = 2 */
    free(got);
    free(w0);
    free(ga);
    free(gb);
    store_destroy(s);
}

/* ---- concurrency ---- */

#define PUSHES 2000
#define CN 1000 /* elements per variable */

typedef struct worker_arg {
    store_t *s;
    const char *name;
    int use_push_pull;
} worker_arg_t;

static void *push_worker(void *p)
{
    worker_arg_t *a = p;
    float g[CN], upd[CN];
    char err[256];
    for (int i = 0; i < CN; i++) g[i] = 1.0f;
    for (int k = 0; k < PUSHES; k++) {
        int64_t step;
        if (store_push(a->s, a->name, 0, g, sizeof g, sizeof g, a->use_push_pull ? upd : NULL, NULL, err,
                       sizeof err) != 0 ||
            store_step_add(a->s, 1, &step, err, sizeof err) != 0)
            return (void *)1;
    }
    return NULL;
}

static void test_concurrent_pushes(void **state)
{
    (void)state;
    char err[256];
    /* lr = 2^-10 and g = 1: every partial sum k/1024 (k <= 8000) is exact in float. */
    psc_optim_config_t opt = sgd(1.0f / 1024);
    static const store_var_spec_t specs[] = {
        {.name = "global_step", .is_step = 1},     {.name = "own/0", .rank = 1, .shape = {CN}},
        {.name = "own/1", .rank = 1, .shape = {CN}}, {.name = "own/2", .rank = 1, .shape = {CN}},
        {.name = "own/3", .rank = 1, .shape = {CN}}, {.name = "shared", .rank = 1, .shape = {CN}},
    };
    store_t *s = store_create();
    int created;
    assert_int_equal(store_create_vars(s, JOB, &opt, specs, 6, &created, err, sizeof err), 0);
    assert_int_equal(store_set_ready(s, JOB, err, sizeof err), 0);

    pthread_t th[8];
    worker_arg_t args[8];
    for (int i = 0; i < 8; i++) {
        args[i] = (worker_arg_t){.s = s, .name = i < 4 ? specs[1 + i].name : "shared", .use_push_pull = i % 2};
        assert_int_equal(pthread_create(&th[i], NULL, push_worker, &args[i]), 0);
    }
    for (int i = 0; i < 8; i++) {
        void *ret;
        assert_int_equal(pthread_join(th[i], &ret), 0);
        assert_null(ret);
    }
    float got[CN];
    for (int i = 1; i < 6; i++) {
        float want = i < 5 ? -(float)PUSHES / 1024 : -(float)(4 * PUSHES) / 1024;
        pull_all(s, specs[i].name, got, sizeof got);
        for (int j = 0; j < CN; j++)
            if (got[j] != want) fail_msg("%s[%d] = %.9g, want %.9g", specs[i].name, j, (double)got[j], (double)want);
        assert_int_equal(version_of(s, specs[i].name), i < 5 ? PUSHES : 4 * PUSHES);
    }
    int64_t step;
    assert_int_equal(store_step_get(s, &step), 1);
    assert_int_equal(step, 8 * PUSHES);
    store_stats_t st;
    store_get_stats(s, &st);
    assert_int_equal(st.applied, 8 * PUSHES);
    assert_int_equal(st.bytes_pushed, (uint64_t)8 * PUSHES * CN * 4);
    assert_int_equal(st.rejected, 0);
    store_destroy(s);
}

/* Chunks of one variable in parallel (v->lock shared + one lock per chunk):
 * threads push to the three wire chunks of one variable (two threads per
 * chunk, push and push-pull) while a reader pulls a range across the chunk 0/1
 * boundary and lists versions (v->lock exclusive). Every update of a chunk is
 * atomic: a pull sees each chunk's part uniform; at the end every chunk holds
 * exactly its pushes and the version counts all of them. */
#define CC_PUSHES 200
#define CC_FLOATS (PSC_CHUNK_BYTES / 4 * 2 + PSC_CHUNK_BYTES / 8) /* 2.5 chunks */

typedef struct chunk_arg {
    store_t *s;
    size_t chunk;
    int use_push_pull;
    const float *g;
    float *upd;
} chunk_arg_t;

static void *chunk_pusher(void *p)
{
    chunk_arg_t *a = p;
    char err[256];
    uint64_t total = (uint64_t)CC_FLOATS * 4;
    for (int i = 0; i < CC_PUSHES; i++)
        if (store_push(a->s, "big", psc_chunk_offset(a->chunk), a->g, psc_chunk_len(total, a->chunk), total,
                       a->use_push_pull ? a->upd : NULL, NULL, err, sizeof err) != 0)
            return (void *)1;
    return NULL;
}

typedef struct chunk_reader {
    store_t *s;
    atomic_int *stop;
    int torn, pulls;
} chunk_reader_t;

static void *chunk_reader(void *p)
{
    chunk_reader_t *r = p;
    enum { HALF = 4096 };
    static float buf[2 * HALF];
    char err[256];
    while (!atomic_load(r->stop)) {
        int64_t version;
        if (store_pull(r->s, "big", PSC_CHUNK_BYTES - HALF * 4, sizeof buf, buf, &version, err, sizeof err) != 0)
            return (void *)1;
        for (int i = 1; i < HALF; i++) r->torn += buf[i] != buf[0] || buf[HALF + i] != buf[HALF];
        r->pulls++;
        store_var_info_t *info;
        int n;
        if (store_list(r->s, &info, &n) != 0) return (void *)1;
        free(info);
    }
    return NULL;
}

static void test_concurrent_chunks(void **state)
{
    (void)state;
    char err[256];
    psc_optim_config_t opt = sgd(1.0f / 1024);
    static const store_var_spec_t specs[] = {{.name = "big", .rank = 1, .shape = {CC_FLOATS}}};
    store_t *s = store_create();
    int created;
    assert_int_equal(store_create_vars(s, JOB, &opt, specs, 1, &created, err, sizeof err), 0);
    assert_int_equal(store_set_ready(s, JOB, err, sizeof err), 0);
    float *g = psc_xaligned(PSC_CHUNK_BYTES);
    for (size_t i = 0; i < PSC_CHUNK_BYTES / 4; i++) g[i] = 1.0f;

    atomic_int stop = 0;
    chunk_reader_t rd = {.s = s, .stop = &stop};
    pthread_t rt, th[6];
    chunk_arg_t args[6];
    assert_int_equal(pthread_create(&rt, NULL, chunk_reader, &rd), 0);
    for (int i = 0; i < 6; i++) {
        args[i] = (chunk_arg_t){.s = s, .chunk = (size_t)i % 3, .use_push_pull = i / 3, .g = g,
                                .upd = i / 3 ? psc_xaligned(PSC_CHUNK_BYTES) : NULL};
        assert_int_equal(pthread_create(&th[i], NULL, chunk_pusher, &args[i]), 0);
    }
    for (int i = 0; i < 6; i++) {
        void *ret;
        assert_int_equal(pthread_join(th[i], &ret), 0);
        assert_null(ret);
        free(args[i].upd);
    }
    atomic_store(&stop, 1);
    void *ret;
    assert_int_equal(pthread_join(rt, &ret), 0);
    assert_null(ret);
    assert_int_equal(rd.torn, 0);
    assert_true(rd.pulls > 0);

    float *got = psc_xaligned((size_t)CC_FLOATS * 4);
    pull_all(s, "big", got, (uint64_t)CC_FLOATS * 4);
    const float want = -(float)(2 * CC_PUSHES) / 1024; /* exact: lr = 2^-10, g = 1 */
    for (size_t j = 0; j < CC_FLOATS; j++)
        if (got[j] != want) fail_msg("big[%zu] = %.9g, want %.9g", j, (double)got[j], (double)want);
    assert_int_equal(version_of(s, "big"), 6 * CC_PUSHES);
    free(got);
    free(g);
    store_destroy(s);
}

/* ---- sync-replica mode ---- */

static void sync_on(store_t *s, int R, int N, double timeout)
{
    char err[256];
    store_sync_cfg_t cfg = {.replicas_to_aggregate = R, .total_num_replicas = N, .timeout_secs = timeout};
    int rc = store_set_sync(s, &cfg, err, sizeof err);
    if (rc) fail_msg("set_sync: %s", err);
}

/* A sync push that must succeed; returns its result. */
static store_sync_result_t push_sync(store_t *s, const char *name, uint64_t off, const void *g, size_t len,
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

static store_sync_result_t step_sync(store_t *s, int64_t local_step, uint32_t count, uint32_t worker, double now)
{
    char err[256];
    store_sync_result_t res;
    memset(&res, 0x5a, sizeof res);
    int rc = store_step_sync(s, local_step, count, worker, now, &res, err, sizeof err);
    if (rc) fail_msg("step_sync: %s", err);
    return res;
}

static int64_t chunk_step(store_t *s, const char *name, uint64_t off)
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

static void on_tick(void *arg, const char *name, uint64_t offset, int64_t step, uint32_t count, int by_timeout)
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

/* ---- checkpoints: export, import ---- */

/* A checkpoint in memory: what store_export emitted, in order. */
typedef struct mem_tensor {
    char name[160];
    void *data;
    size_t len;
} mem_tensor_t;

typedef struct mem_ckpt {
    mem_tensor_t *t;
    int n, cap;
    unsigned delay_us; /* emit sleeps this long per tensor: widens the window a fence must close */
} mem_ckpt_t;

static int mem_emit(void *arg, const char *name, const void *data, size_t len)
{
    mem_ckpt_t *c = arg;
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 16;
        c->t = realloc(c->t, (size_t)c->cap * sizeof *c->t);
        if (!c->t) return PSC_ENOMEM;
    }
    mem_tensor_t *t = &c->t[c->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->len = len;
    t->data = malloc(len ? len : 1);
    if (!t->data) return PSC_ENOMEM;
    memcpy(t->data, data, len);
    if (c->delay_us) {
        struct timespec ts = {0, (long)c->delay_us * 1000L};
        nanosleep(&ts, NULL);
    }
    return 0;
}

static void mem_free(mem_ckpt_t *c)
{
    for (int i = 0; i < c->n; i++) free(c->t[i].data);
    free(c->t);
    memset(c, 0, sizeof *c);
}

static const mem_tensor_t *mem_find(const mem_ckpt_t *c, const char *name)
{
    for (int i = 0; i < c->n; i++)
        if (strcmp(c->t[i].name, name) == 0) return &c->t[i];
    fail_msg("checkpoint has no tensor \"%s\"", name);
    return NULL;
}

static int64_t le64_at(const void *p, size_t i)
{
    const unsigned char *b = (const unsigned char *)p + 8 * i;
    uint64_t u = 0;
    for (int k = 0; k < 8; k++) u |= (uint64_t)b[k] << (8 * k);
    return (int64_t)u;
}

/* Exports s (must succeed) into a fresh *c; returns *step. */
static int64_t export_mem(store_t *s, mem_ckpt_t *c)
{
    char err[256];
    int64_t step = -2;
    unsigned delay = c->delay_us;
    memset(c, 0, sizeof *c);
    c->delay_us = delay;
    int rc = store_export(s, mem_emit, c, -1, &step, err, sizeof err);
    if (rc) fail_msg("export: %s", err);
    return step;
}

/* Two exports are identical: names in order and every byte. */
static void mem_expect_equal(const mem_ckpt_t *a, const mem_ckpt_t *b, const char *what)
{
    if (a->n != b->n) fail_msg("%s: %d tensors vs %d", what, a->n, b->n);
    for (int i = 0; i < a->n; i++) {
        if (strcmp(a->t[i].name, b->t[i].name) != 0)
            fail_msg("%s: tensor %d is \"%s\" vs \"%s\"", what, i, a->t[i].name, b->t[i].name);
        if (a->t[i].len != b->t[i].len || memcmp(a->t[i].data, b->t[i].data, a->t[i].len) != 0)
            fail_msg("%s: tensor \"%s\" differs", what, a->t[i].name);
    }
}

/* A fetch from a mem_ckpt_t, with one fault injected on tensor `bad`. */
enum fetch_fault { FAULT_NONE, FAULT_SHORT, FAULT_LONG, FAULT_MISSING, FAULT_IO, FAULT_NEGATIVE };

typedef struct fetch_arg {
    const mem_ckpt_t *c;
    const char *bad;
    enum fetch_fault fault;
    int calls;
} fetch_arg_t;

static int mem_fetch(void *arg, const char *name, void **data, size_t *len, char *err, size_t errlen)
{
    fetch_arg_t *f = arg;
    f->calls++;
    if (*data) return psc_seterr(err, errlen, PSC_EINVAL, "*data not NULL on entry");
    int hit = f->bad && strcmp(name, f->bad) == 0;
    if (hit && f->fault == FAULT_MISSING) return PSC_ENOTFOUND;
    if (hit && f->fault == FAULT_IO) return psc_seterr(err, errlen, PSC_EIO, "disk on fire reading %s", name);
    for (int i = 0; i < f->c->n; i++) {
        const mem_tensor_t *t = &f->c->t[i];
        if (strcmp(t->name, name) != 0) continue;
        size_t n = t->len;
        if (hit && f->fault == FAULT_SHORT) n -= 4;
        if (hit && f->fault == FAULT_LONG) n += 8;
        unsigned char *p = calloc(1, n ? n : 1);
        assert_non_null(p);
        memcpy(p, t->data, PSC_MIN(n, t->len));
        if (hit && f->fault == FAULT_NEGATIVE) p[n - 1] = 0x80; /* the last int64 turns negative */
        *data = p;
        *len = n;
        return 0;
    }
    return PSC_ENOTFOUND;
}

static int import_mem(store_t *s, const mem_ckpt_t *c, const char *bad, enum fetch_fault fault, int64_t sync_step,
                      char *err, size_t errlen)
{
    fetch_arg_t f = {.c = c, .bad = bad, .fault = fault};
    err[0] = 0;
    return store_import(s, mem_fetch, &f, sync_step, err, errlen);
}

/* Pushes gradient g (the whole variable) chunk by chunk. */
static void push_all(store_t *s, const char *name, const void *g, uint64_t total)
{
    char err[256];
    for (size_t k = 0; k < psc_chunk_count(total); k++) {
        int rc = store_push(s, name, psc_chunk_offset(k), (const char *)g + psc_chunk_offset(k),
                            psc_chunk_len(total, k), total, NULL, NULL, err, sizeof err);
        if (rc) fail_msg("push %s chunk %zu: %s", name, k, err);
    }
}

static psc_optim_config_t adam(void)
{
    return (psc_optim_config_t){
        .kind = PSC_OPT_ADAM, .learning_rate = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .epsilon = 1e-7f};
}

/* Names, order and sizes of an export for each optimizer: the value, TF's slot
 * names, .t; global_step as int64 LE; *step; not ready -> PSC_ENOTREADY. */
static void test_export_names(void **state)
{
    (void)state;
    char err[256];
    static const struct {
        psc_optim_config_t opt;
        const char *slots[2];
    } cases[] = {
        {{.kind = PSC_OPT_SGD, .learning_rate = 0.1f}, {NULL, NULL}},
        {{.kind = PSC_OPT_MOMENTUM, .learning_rate = 0.1f, .momentum = 0.9f}, {"Momentum", NULL}},
        {{.kind = PSC_OPT_ADAGRAD, .learning_rate = 0.1f, .initial_accumulator_value = 0.1f}, {"Adagrad", NULL}},
        {{.kind = PSC_OPT_ADAM, .learning_rate = 0.1f, .beta1 = 0.9f, .beta2 = 0.999f, .epsilon = 1e-7f},
         {"Adam", "Adam_1"}},
        {{.kind = PSC_OPT_RMSPROP, .learning_rate = 0.1f, .decay = 0.9f, .momentum = 0.5f, .epsilon = 1e-10f},
         {"RMSProp", "RMSProp_1"}},
    };
    for (size_t c = 0; c < PSC_ARRAY_LEN(cases); c++) {
        fixture_t f;
        fixture_setup(&f, &cases[c].opt, 0);
        mem_ckpt_t m = {0};
        int64_t step = 7;
        assert_int_equal(store_export(f.s, mem_emit, &m, -1, &step, err, sizeof err), PSC_ENOTREADY);
        assert_non_null(strstr(err, "not ready"));
        assert_int_equal(step, -1);
        assert_int_equal(m.n, 0);
        assert_int_equal(store_step_add(f.s, 0x123456789LL, NULL, err, sizeof err), 0);
        assert_int_equal(store_set_ready(f.s, JOB, err, sizeof err), 0);
        float g[256];
        for (int i = 0; i < 256; i++) g[i] = 0.25f;
        push_all(f.s, "dense/bias", g, sizeof g);
        push_all(f.s, "dense/bias", g, sizeof g);
        assert_int_equal(export_mem(f.s, &m), 0x123456789LL);

        int ns = cases[c].slots[1] ? 2 : cases[c].slots[0] ? 1 : 0, at = 0;
        assert_int_equal(m.n, 1 + 3 * (2 + ns));
        assert_string_equal(m.t[at].name, "global_step");
        assert_int_equal(m.t[at].len, 8);
        assert_int_equal(le64_at(m.t[at].data, 0), 0x123456789LL);
        at++;
        for (int i = 1; i < NSPECS; i++) {
            uint64_t b = spec_bytes(&SPECS[i]);
            char want[160];
            assert_string_equal(m.t[at].name, SPECS[i].name);
            assert_int_equal(m.t[at].len, b);
            if (i != 2) assert_memory_equal(m.t[at].data, f.init[i], b); /* dense/bias was pushed */
            at++;
            for (int k = 0; k < ns; k++, at++) {
                snprintf(want, sizeof want, "%s/%s", SPECS[i].name, cases[c].slots[k]);
                assert_string_equal(m.t[at].name, want);
                assert_int_equal(m.t[at].len, b);
            }
            snprintf(want, sizeof want, "%s/.t", SPECS[i].name);
            assert_string_equal(m.t[at].name, want);
            assert_int_equal(m.t[at].len, 8 * psc_chunk_count(b));
            for (size_t k = 0; k < psc_chunk_count(b); k++)
                assert_int_equal(le64_at(m.t[at].data, k), i == 2 ? 2 : 0);
            at++;
        }
        /* RMSProp: slot 0 is ms (starts at 1, here 1 + (g^2 - 1)(1 - rho) after
         * one push, < 1), slot 1 is mom (> 0 after pushes of g > 0). */
        if (cases[c].opt.kind == PSC_OPT_RMSPROP) {
            const float *ms = mem_find(&m, "dense/bias/RMSProp")->data;
            const float *mom = mem_find(&m, "dense/bias/RMSProp_1")->data;
            assert_true(ms[0] < 1.0f && ms[0] > 0.5f);
            assert_true(mom[0] > 0.0f && mom[0] < 0.5f);
            assert_true(((const float *)mem_find(&m, "dense/kernel/RMSProp")->data)[0] == 1.0f);
        }
        mem_free(&m);
        fixture_teardown(&f);
    }
}

/* Import is all or nothing: a tensor that is short, long, missing or has a
 * negative count, or a fetch error, changes nothing (values, slots, t,
 * versions, global_step: the export before equals the export after). A good
 * import restores an older checkpoint over newer values bit for bit, bumps
 * every version by one and marks a store ready. */
static void test_import_all_or_nothing(void **state)
{
    (void)state;
    char err[256];
    psc_optim_config_t opt = adam();
    fixture_t f;
    fixture_setup(&f, &opt, 1);
    const uint64_t bb = spec_bytes(&SPECS[3]);
    float *g1 = random_floats(bb / 4, 901), *g2 = random_floats(bb / 4, 902);
    push_all(f.s, "big/kernel", g1, bb);
    push_all(f.s, "dense/bias", g1, 1024);
    assert_int_equal(store_step_add(f.s, 10, NULL, err, sizeof err), 0);
    mem_ckpt_t old = {0}, now = {0}, after = {0};
    assert_int_equal(export_mem(f.s, &old), 10);
    /* newer state: more pushes, another step */
    push_all(f.s, "big/kernel", g2, bb);
    assert_int_equal(store_push(f.s, "big/kernel", 0, g1, 2 * MiB, bb, NULL, NULL, err, sizeof err), 0);
    assert_int_equal(store_step_add(f.s, 5, NULL, err, sizeof err), 0);
    export_mem(f.s, &now);
    store_var_info_t *info0, *info1;
    int n0, n1;
    assert_int_equal(store_list(f.s, &info0, &n0), 0);

    static const struct {
        const char *bad;
        enum fetch_fault fault;
        int code;
        const char *msg;
    } faults[] = {
        {"big/kernel/.t", FAULT_SHORT, PSC_EMISMATCH, "big/kernel/.t"}, /* the last tensor: all others read */
        {"big/kernel/Adam_1", FAULT_LONG, PSC_EMISMATCH, "big/kernel/Adam_1"},
        {"global_step", FAULT_SHORT, PSC_EMISMATCH, "global_step"},
        {"dense/bias/Adam", FAULT_MISSING, PSC_EMISMATCH, "dense/bias/Adam"},
        {"dense/kernel", FAULT_IO, PSC_EIO, "disk on fire reading dense/kernel"},
        {"big/kernel/.t", FAULT_NEGATIVE, PSC_ECORRUPT, "big/kernel/.t"},
        {"global_step", FAULT_NEGATIVE, PSC_ECORRUPT, "global_step"},
    };
    for (size_t i = 0; i < PSC_ARRAY_LEN(faults); i++) {
        store_stats_t st0, st1;
        store_get_stats(f.s, &st0);
        int rc = import_mem(f.s, &old, faults[i].bad, faults[i].fault, 0, err, sizeof err);
        if (rc != faults[i].code)
            fail_msg("fault %zu on %s: got %d (%s) \"%s\"", i, faults[i].bad, rc, psc_strerror(rc), err);
        if (!strstr(err, faults[i].msg)) fail_msg("fault %zu: \"%s\" does not name %s", i, err, faults[i].msg);
        store_get_stats(f.s, &st1);
        assert_int_equal(st1.rejected, st0.rejected + (faults[i].code == PSC_EIO ? 0 : 1));
        export_mem(f.s, &after);
        mem_expect_equal(&now, &after, faults[i].bad);
        mem_free(&after);
        assert_int_equal(store_list(f.s, &info1, &n1), 0);
        for (int j = 0; j < n0; j++) assert_int_equal(info1[j].version, info0[j].version);
        free(info1);
    }
    assert_int_equal(import_mem(f.s, &old, NULL, FAULT_NONE, -1, err, sizeof err), PSC_EINVAL);
    assert_int_equal(store_import(f.s, NULL, NULL, 0, err, sizeof err), PSC_EINVAL);

    /* The good one: back to the older checkpoint. */
    assert_int_equal(import_mem(f.s, &old, NULL, FAULT_NONE, 0, err, sizeof err), 0);
    assert_int_equal(export_mem(f.s, &after), 10);
    mem_expect_equal(&old, &after, "restored");
    mem_free(&after);
    assert_int_equal(store_list(f.s, &info1, &n1), 0);
    for (int j = 0; j < n0; j++) assert_int_equal(info1[j].version, info0[j].version + 1);
    free(info1);
    /* and training goes on from there exactly as it did the first time */
    push_all(f.s, "big/kernel", g2, bb);
    assert_int_equal(store_push(f.s, "big/kernel", 0, g1, 2 * MiB, bb, NULL, NULL, err, sizeof err), 0);
    assert_int_equal(store_step_add(f.s, 5, NULL, err, sizeof err), 0);
    export_mem(f.s, &after);
    mem_expect_equal(&now, &after, "replayed");
    mem_free(&after);

    /* A fresh store: import makes it ready; no job -> PSC_ENOTFOUND. */
    store_t *s2 = store_create();
    assert_int_equal(import_mem(s2, &old, NULL, FAULT_NONE, 0, err, sizeof err), PSC_ENOTFOUND);
    int created;
    assert_int_equal(store_create_vars(s2, JOB, &opt, SPECS, NSPECS, &created, err, sizeof err), 0);
    assert_int_equal(store_is_ready(s2, NULL), 0);
    assert_int_equal(import_mem(s2, &old, NULL, FAULT_NONE, 0, err, sizeof err), 0);
    assert_int_equal(store_is_ready(s2, NULL), 1);
    export_mem(s2, &after);
    mem_expect_equal(&old, &after, "fresh store");
    mem_free(&after);
    assert_int_equal(version_of(s2, "big/kernel"), 1);
    store_destroy(s2);

    free(info0);
    mem_free(&old);
    mem_free(&now);
    free(g1);
    free(g2);
    fixture_teardown(&f);
}

/* Sync mode: import restarts every accumulator at sync_step with nothing
 * pending (global_step's at its restored value) and presence from scratch. A
 * contribution that was stale before the restore is current after it; one
 * pending before it is gone. */
static void test_import_sync_resets(void **state)
{
    (void)state;
    char err[256];
    const float lr = 0.5f;
    psc_optim_config_t opt = sgd(lr);
    fixture_t f;
    fixture_setup(&f, &opt, 1);
    store_t *s = f.s;
    sync_on(s, 2, 2, 30.0);
    const size_t nb = 256;
    float *g[4];
    for (int i = 0; i < 4; i++) g[i] = random_floats(nb, 1000 + (uint32_t)i);
    double now = 100.0;
    for (int64_t k = 0; k < 3; k++, now += 1) {
        push_sync(s, "dense/bias", 0, g[0], nb * 4, nb * 4, k, 1, 0, now, NULL);
        assert_int_equal(push_sync(s, "dense/bias", 0, g[1], nb * 4, nb * 4, k, 1, 1, now, NULL).applied, 1);
        step_sync(s, k, 1, 0, now);
        assert_int_equal(step_sync(s, k, 1, 1, now).applied, 1);
    }
    mem_ckpt_t ck = {0};
    assert_int_equal(export_mem(s, &ck), 3); /* chunk step 3, global_step 3 */
    const float *w3 = mem_find(&ck, "dense/bias")->data;
    for (int64_t k = 3; k < 5; k++, now += 1) {
        push_sync(s, "dense/bias", 0, g[0], nb * 4, nb * 4, k, 1, 0, now, NULL);
        push_sync(s, "dense/bias", 0, g[1], nb * 4, nb * 4, k, 1, 1, now, NULL);
        step_sync(s, k, 1, 0, now);
        step_sync(s, k, 1, 1, now);
    }
    assert_int_equal(chunk_step(s, "dense/bias", 0), 5);
    /* pending at step 5, worker 1 gone, the clock running since 100 */
    assert_int_equal(push_sync(s, "dense/bias", 0, g[2], nb * 4, nb * 4, 5, 1, 0, now, NULL).applied, 0);
    store_sync_worker_left(s, 1);
    assert_int_equal(store_sync_present(s, 1000.0, NULL), 0);
    assert_int_equal(push_sync(s, "dense/bias", 0, g[2], nb * 4, nb * 4, 3, 1, 0, now, NULL).stale, 1);
    int64_t v0 = version_of(s, "dense/bias");

    assert_int_equal(import_mem(s, &ck, NULL, FAULT_NONE, 3, err, sizeof err), 0);
    assert_int_equal(version_of(s, "dense/bias"), v0 + 1);
    uint32_t needed = 0;
    assert_int_equal(store_sync_present(s, 1000.0, &needed), 2); /* nobody left, clock not started */
    assert_int_equal(needed, 2);
    assert_int_equal(chunk_step(s, "dense/bias", 0), 3);
    assert_int_equal(chunk_step(s, "big/kernel", 4 * MiB), 3);
    int64_t gs;
    assert_int_equal(store_step_get(s, &gs), 1);
    assert_int_equal(gs, 3);

    /* Local step 3 was stale a moment ago; now it is current, and the pending
     * step-5 contribution is gone: one contribution does not apply. */
    float want[256], got[256];
    store_sync_result_t r = push_sync(s, "dense/bias", 0, g[2], nb * 4, nb * 4, 3, 1, 1, 1001.0, NULL);
    assert_int_equal(r.stale, 0);
    assert_int_equal(r.applied, 0);
    r = push_sync(s, "dense/bias", 0, g[3], nb * 4, nb * 4, 3, 1, 0, 1001.0, NULL);
    assert_int_equal(r.applied, 1);
    assert_int_equal(r.step, 4);
    for (size_t j = 0; j < nb; j++) want[j] = w3[j] - ((g[2][j] + g[3][j]) / 2.0f) * lr;
    pull_all(s, "dense/bias", got, sizeof got);
    assert_memory_equal(got, want, sizeof want);
    /* global_step's accumulator restarted at the restored value */
    assert_int_equal(step_sync(s, 2, 1, 0, 1001.0).stale, 1);
    assert_int_equal(step_sync(s, 3, 1, 0, 1001.0).applied, 0);
    assert_int_equal(step_sync(s, 3, 1, 1, 1001.0).applied, 1);
    assert_int_equal(store_step_get(s, &gs), 1);
    assert_int_equal(gs, 4);

    /* Pending at the very step an import restarts at: the count is reset too. */
    assert_int_equal(push_sync(s, "dense/bias", 0, g[0], nb * 4, nb * 4, 4, 1, 0, 1002.0, NULL).applied, 0);
    assert_int_equal(import_mem(s, &ck, NULL, FAULT_NONE, 4, err, sizeof err), 0);
    assert_int_equal(chunk_step(s, "dense/bias", 0), 4);
    assert_int_equal(push_sync(s, "dense/bias", 0, g[1], nb * 4, nb * 4, 4, 1, 1, 1003.0, NULL).applied, 0);
    r = push_sync(s, "dense/bias", 0, g[2], nb * 4, nb * 4, 4, 1, 0, 1003.0, NULL);
    assert_int_equal(r.applied, 1);
    for (size_t j = 0; j < nb; j++) want[j] = w3[j] - ((g[1][j] + g[2][j]) / 2.0f) * lr;
    pull_all(s, "dense/bias", got, sizeof got);
    assert_memory_equal(got, want, sizeof want);
    assert_int_equal(store_step_get(s, &gs), 1);
    assert_int_equal(gs, 3);
    assert_int_equal(step_sync(s, 3, 1, 0, 1003.0).stale, 0);

    mem_free(&ck);
    for (int i = 0; i < 4; i++) free(g[i]);
    fixture_teardown(&f);
}

/* The push fence. Pushers run while exports (whose emit sleeps on every tensor,
 * so an unfenced export would see many updates land mid-way) take cuts. With
 * SGD, g = 1 and lr = 2^-10 every value is exactly -t/1024, so each cut must
 * satisfy, for every variable and chunk, value == -t/1024 (value and .t are one
 * point); and the orders the pushers follow bound the counters of different
 * variables against each other:
 *   pair:   push a chunk 0, a chunk 1, b  ->  t_b <= t_a1 <= t_a0 <= t_b + 1
 *   stepper: push solo, step_add 1         ->  step <= t_solo <= step + 1
 *   two threads push `shared` (values only). */
#define FENCE_A ((int64_t)5 << 17) /* 2.5 MiB: two wire chunks */
#define FENCE_N 1024

typedef struct fence_arg {
    store_t *s;
    int role; /* 0 pair, 1 stepper, 2 shared */
    atomic_int *stop;
    int failed;
} fence_arg_t;

static void *fence_pusher(void *p)
{
    fence_arg_t *a = p;
    char err[256];
    const uint64_t ab = (uint64_t)FENCE_A * 4;
    float *ones = malloc(ab);
    if (!ones) {
        a->failed = 1;
        return NULL;
    }
    for (int64_t i = 0; i < FENCE_A; i++) ones[i] = 1.0f;
    const size_t nb = FENCE_N * 4;
    while (!atomic_load(a->stop) && !a->failed) {
        if (a->role == 0) {
            a->failed |= store_push(a->s, "pair/a", 0, ones, 2 * MiB, ab, NULL, NULL, err, sizeof err) != 0;
            a->failed |= store_push(a->s, "pair/a", 2 * MiB, ones, ab - 2 * MiB, ab, NULL, NULL, err, sizeof err) != 0;
            a->failed |= store_push(a->s, "pair/b", 0, ones, nb, nb, NULL, NULL, err, sizeof err) != 0;
        } else if (a->role == 1) {
            a->failed |= store_push(a->s, "solo", 0, ones, nb, nb, NULL, NULL, err, sizeof err) != 0;
            a->failed |= store_step_add(a->s, 1, NULL, err, sizeof err) != 0;
        } else {
            a->failed |= store_push(a->s, "shared", 0, ones, nb, nb, NULL, NULL, err, sizeof err) != 0;
        }
    }
    if (a->failed) print_error("pusher %d: %s\n", a->role, err);
    free(ones);
    return NULL;
}

/* The values of `name` are -t[k]/1024 on every chunk k; returns t[0]. */
static int64_t fence_check_var(const mem_ckpt_t *m, const char *name, int cut)
{
    char tn[160];
    snprintf(tn, sizeof tn, "%s/.t", name);
    const mem_tensor_t *w = mem_find(m, name), *t = mem_find(m, tn);
    const float *v = w->data;
    for (size_t i = 0; i < w->len / 4; i++) {
        int64_t tk = le64_at(t->data, i / (PSC_CHUNK_BYTES / 4));
        if (v[i] != -(float)tk / 1024)
            fail_msg("cut %d: %s[%zu] = %.9g but its chunk's t = %lld: not one point", cut, name, i, (double)v[i],
                     (long long)tk);
    }
    return le64_at(t->data, 0);
}

static void test_export_fence(void **state)
{
    (void)state;
    char err[256];
    psc_optim_config_t opt = sgd(1.0f / 1024);
    static const store_var_spec_t specs[] = {
        {.name = "global_step", .is_step = 1},
        {.name = "pair/a", .rank = 1, .shape = {FENCE_A}},
        {.name = "pair/b", .rank = 1, .shape = {FENCE_N}},
        {.name = "solo", .rank = 1, .shape = {FENCE_N}},
        {.name = "shared", .rank = 1, .shape = {FENCE_N}},
    };
    store_t *s = store_create();
    int created;
    assert_int_equal(store_create_vars(s, JOB, &opt, specs, 5, &created, err, sizeof err), 0);
    assert_int_equal(store_set_ready(s, JOB, err, sizeof err), 0);
    atomic_int stop;
    atomic_init(&stop, 0);
    pthread_t th[4];
    fence_arg_t args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (fence_arg_t){.s = s, .role = i < 3 ? i : 2, .stop = &stop};
        assert_int_equal(pthread_create(&th[i], NULL, fence_pusher, &args[i]), 0);
    }
    /* wait until every pusher is going */
    int64_t tb = 0, gs = 0, tsh = 0;
    do {
        store_chunk_read(s, "pair/b", 0, 0, NULL, &tb, NULL, err, sizeof err);
        store_chunk_read(s, "shared", 0, 0, NULL, &tsh, NULL, err, sizeof err);
        store_step_get(s, &gs);
    } while (tb < 3 || gs < 3 || tsh < 3);

    int64_t first_tb = -1, last_tb = -1;
    for (int cut = 0; cut < 12; cut++) {
        mem_ckpt_t m = {.delay_us = 300};
        int64_t step = export_mem(s, &m);
        assert_int_equal(m.n, 1 + 4 * 2);
        int64_t g = le64_at(mem_find(&m, "global_step")->data, 0);
        assert_int_equal(step, g);
        int64_t ta0 = fence_check_var(&m, "pair/a", cut);
        int64_t ta1 = le64_at(mem_find(&m, "pair/a/.t")->data, 1);
        int64_t b = fence_check_var(&m, "pair/b", cut);
        int64_t solo = fence_check_var(&m, "solo", cut);
        fence_check_var(&m, "shared", cut);
        if (!(b <= ta1 && ta1 <= ta0 && ta0 <= b + 1))
            fail_msg("cut %d: t(a0, a1, b) = (%lld, %lld, %lld) is no point of the pair's sequence", cut,
                     (long long)ta0, (long long)ta1, (long long)b);
        if (!(g <= solo && solo <= g + 1))
            fail_msg("cut %d: t(solo) = %lld with global_step %lld", cut, (long long)solo, (long long)g);
        if (first_tb < 0) first_tb = b;
        last_tb = b;
        mem_free(&m);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(args[i].failed, 0);
    }
    assert_true(last_tb > first_tb); /* the pushers did run between the cuts */
    store_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_create_conflicts),
        cmocka_unit_test(test_checks_alone),
        cmocka_unit_test(test_push_segments),
        cmocka_unit_test(test_create_invalid),
        cmocka_unit_test(test_invalid_requests_change_nothing),
        cmocka_unit_test(test_push_sgd_exact),
        cmocka_unit_test(test_push_unaligned_gradient),
        cmocka_unit_test(test_step),
        cmocka_unit_test(test_adam_t_per_chunk),
        cmocka_unit_test(test_concurrent_pushes),
        cmocka_unit_test(test_concurrent_chunks),
        cmocka_unit_test(test_sync_sgd_mean_and_stale),
        cmocka_unit_test(test_sync_timeout_tick),
        cmocka_unit_test(test_sync_absent_replica),
        cmocka_unit_test(test_sync_worker_left),
        cmocka_unit_test(test_sync_seen),
        cmocka_unit_test(test_sync_global_step),
        cmocka_unit_test(test_sync_lagging_chunk),
        cmocka_unit_test(test_sync_invalid),
        cmocka_unit_test(test_sync_adam_t),
        cmocka_unit_test(test_sync_concurrent),
        cmocka_unit_test(test_export_names),
        cmocka_unit_test(test_import_all_or_nothing),
        cmocka_unit_test(test_import_sync_resets),
        cmocka_unit_test(test_export_fence),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
