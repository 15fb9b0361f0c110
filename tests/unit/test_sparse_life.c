/* test_sparse_life — a row's life in a sparse table part (sparse_table.h, "a
 * row's life"; sparse_life.c).
 *
 * TTL in steps: rows not updated for more than ttl_steps global steps are
 * gone after an expiry pass, the others stay, and an evicted row seen again
 * starts from its initial values; in seconds the same after the time passes.
 * The cap: 10x the cap's ids streamed through keep the part at or under its
 * cap after every request, and the most recently updated rows are the ones
 * kept. Admission with min_count 3: two pushes of an id drop its gradients
 * (counted) and create nothing, a pull reads its initial values, the third
 * push creates it with that push applied; the waiting estimate sees them; and
 * ids pushed once with min_count 2 are admitted falsely in under 1% (the
 * header says < 0.25%). Tombstones: an incremental export after evictions
 * names each evicted id once (not a re-created one), a committed mark forgets
 * them. Threads pushing, pulling and scanning while another thread expires
 * and the cap trims keep the part consistent; and in a store, pushes of the
 * same rows race the store's evictor and checkpoint exports with commits:
 * each export is one cut (no id both a row and a tombstone, none twice) and
 * the rows' count matches (this test runs under TSan: `make tsan`).
 */
#include "sparse_table.h"
#include "store.h"

#include "optim.h"
#include "psc.h"
#include "table.h"

#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "sparse_table_fixture.h"

#define DIM 4

static sparse_table_stats_t stats(sparse_table_t *t)
{
    sparse_table_stats_t st;
    sparse_table_get_stats(t, &st);
    return st;
}

static uint64_t expire_all(sparse_table_t *t)
{
    uint64_t n = 0;
    for (int s = 0; s < SPARSE_TABLE_SHARDS; s++) n += sparse_table_expire(t, s);
    return n;
}

/* Pushes ids[0..n) with gradient 1 everywhere (SGD, lr 1: a row pushed k
 * times from v reads v - k). */
static void push_ones(sparse_table_t *t, const int64_t *ids, size_t n)
{
    float *g = malloc(n * DIM * sizeof *g);
    for (size_t i = 0; i < n * DIM; i++) g[i] = 1.0f;
    push(t, ids, n, g, 1.0, NULL);
    free(g);
}

/* Whether id has a row (a full export's emitter would be heavier: scan one page from id - 1). */
static int has_row(sparse_table_t *t, int64_t id)
{
    int64_t got;
    float v[DIM];
    size_t n;
    int more;
    sparse_table_scan(t, id - 1, 1, &got, v, &n, &more);
    return n == 1 && got == id;
}

static void expect_values(sparse_table_t *t, int64_t id, float minus)
{
    float want[DIM], got[DIM];
    init_row(sparse_table_config(t), id, want);
    unsigned char *raw;
    const void *p = pack_ids(&id, 1, &raw);
    assert_int_equal(sparse_table_read(t, p, 1, got), 0);
    free(raw);
    for (int k = 0; k < DIM; k++)
        if (fabsf(got[k] - (want[k] - minus)) > 1e-6f)
            fail_msg("id %lld element %d: %g, want initial %g - %g", (long long)id, k, got[k], want[k], minus);
}

static void test_ttl_steps(void **state)
{
    (void)state;
    sparse_table_cfg_t c = cfg_of(1 << 20, 1, 0, PSC_PART_MOD, DIM, sgd());
    c.ttl_steps = 10;
    sparse_table_t *t = make(&c);
    int64_t ids[100];
    for (int i = 0; i < 100; i++) ids[i] = 1000 + i;
    sparse_table_set_step(t, 1);
    push_ones(t, ids, 100);
    sparse_table_set_step(t, 6);
    push_ones(t, ids, 50); /* ids 1000..1049 updated at step 6 */
    sparse_table_set_step(t, 11);
    assert_int_equal(expire_all(t), 0); /* 11 - 1 = 10: not more than the TTL */
    sparse_table_set_step(t, 12);
    assert_int_equal(expire_all(t), 50);
    sparse_table_stats_t st = stats(t);
    assert_int_equal(st.rows, 50);
    assert_int_equal(st.rows_evicted, 50);
    for (int i = 0; i < 100; i++) assert_int_equal(has_row(t, ids[i]), i < 50);
    expect_values(t, 1000, 2.0f); /* kept: pushed twice */
    expect_values(t, 1099, 0.0f); /* evicted: a read gives the initial values */
    push_ones(t, &ids[99], 1);    /* seen again: created from its initial values, then updated once */
    expect_values(t, 1099, 1.0f);
    assert_int_equal(stats(t).rows, 51);
    sparse_table_destroy(t);
}

static void test_ttl_secs(void **state)
{
    (void)state;
    sparse_table_cfg_t c = cfg_of(1 << 20, 1, 0, PSC_PART_MOD, DIM, sgd());
    c.ttl_secs = 1;
    sparse_table_t *t = make(&c);
    int64_t old[20], young[20];
    for (int i = 0; i < 20; i++) {
        old[i] = 7 * i;
        young[i] = 7 * i + 3;
    }
    push_ones(t, old, 20);
    usleep(1300 * 1000);
    push_ones(t, young, 20);
    assert_int_equal(expire_all(t), 0); /* 1 s after: not more than the TTL yet (whole seconds) */
    usleep(1200 * 1000);
    assert_int_equal(expire_all(t), 20);
    for (int i = 0; i < 20; i++) {
        assert_false(has_row(t, old[i]));
        assert_true(has_row(t, young[i]));
    }
    sparse_table_destroy(t);
}

static void test_cap(void **state)
{
    (void)state;
    enum { CAP = 1024, BATCH = 64, TOTAL = 10 * CAP };
    sparse_table_cfg_t c = cfg_of(1 << 30, 1, 0, PSC_PART_MOD, DIM, sgd());
    c.max_rows = CAP;
    sparse_table_t *t = make(&c);
    int64_t ids[BATCH];
    for (int b = 0; b < TOTAL / BATCH; b++) {
        for (int i = 0; i < BATCH; i++) ids[i] = (int64_t)(b * BATCH + i) * 7919;
        sparse_table_set_step(t, b + 1);
        if (b % 2)
            push_ones(t, ids, BATCH);
        else {
            float out[BATCH * DIM];
            pull(t, ids, BATCH, out); /* a pull creates rows too */
        }
        sparse_table_stats_t st = stats(t);
        if (st.rows > CAP) fail_msg("after request %d: %llu rows, cap %d", b, (unsigned long long)st.rows, CAP);
        assert_int_equal(st.rows + st.rows_evicted, (uint64_t)(b + 1) * BATCH);
    }
    assert_true(stats(t).rows >= CAP / 2);
    /* the last request's rows are the newest: all kept */
    for (int i = 0; i < BATCH; i++) assert_true(has_row(t, ids[i]));
    /* the first request's rows are the oldest: all gone */
    for (int i = 0; i < BATCH; i++) assert_false(has_row(t, (int64_t)i * 7919));
    sparse_table_destroy(t);
}

static void test_admission(void **state)
{
    (void)state;
    sparse_table_cfg_t c = cfg_of(1 << 20, 1, 0, PSC_PART_MOD, DIM, sgd());
    c.min_count = 3;
    sparse_table_t *t = make(&c);
    int64_t id = 4242;
    float out[DIM];
    push_ones(t, &id, 1);
    push_ones(t, &id, 1);
    sparse_table_stats_t st = stats(t);
    assert_int_equal(st.rows, 0);
    assert_int_equal(st.rows_dropped, 2);
    assert_int_equal(st.waiting, 1);
    assert_true(st.filter_bytes >= SPARSE_FILTER_BYTES / 2 && st.filter_bytes <= SPARSE_FILTER_BYTES);
    pull(t, &id, 1, out); /* a pull neither creates nor counts */
    assert_int_equal(stats(t).rows, 0);
    expect_values(t, id, 0.0f);
    push_ones(t, &id, 1); /* the third: created, and this push applied */
    st = stats(t);
    assert_int_equal(st.rows, 1);
    assert_int_equal(st.rows_dropped, 2);
    expect_values(t, id, 1.0f);
    sparse_table_destroy(t);

    /* false admissions: 100k ids pushed once each, min_count 2, the default filter */
    c.min_count = 2;
    t = make(&c);
    enum { N = 100000, B = 1000 };
    int64_t ids[B];
    for (int b = 0; b < N / B; b++) {
        for (int i = 0; i < B; i++) ids[i] = b * B + i;
        push_ones(t, ids, B);
    }
    st = stats(t);
    printf("min_count 2: %llu of %d ids pushed once admitted (%.3f%%), %llu waiting (estimate)\n",
           (unsigned long long)st.rows, N, 100.0 * (double)st.rows / N, (unsigned long long)st.waiting);
    assert_true(st.rows < N / 100);
    assert_int_equal(st.rows + st.rows_dropped, N);
    sparse_table_destroy(t);
}

/* An export's rows and tombstones apart. */
typedef struct dump {
    size_t rows, dead;
    int64_t dead_ids[64];
} dump_t;

static int dump_emit(void *arg, int64_t id, const void *rec, size_t len)
{
    dump_t *d = arg;
    if (!rec) {
        assert_int_equal(len, 0);
        if (d->dead < PSC_ARRAY_LEN(d->dead_ids)) d->dead_ids[d->dead] = id;
        d->dead++;
    } else {
        d->rows++;
    }
    return 0;
}

static dump_t dump(sparse_table_t *t, uint64_t since, uint64_t *mark)
{
    dump_t d = {0};
    uint64_t m;
    assert_int_equal(sparse_table_export(t, since, 0, dump_emit, &d, mark ? mark : &m), 0);
    return d;
}

static void test_tombstones(void **state)
{
    (void)state;
    sparse_table_cfg_t c = cfg_of(1 << 20, 1, 0, PSC_PART_MOD, DIM, sgd());
    c.ttl_steps = 5;
    sparse_table_t *t = make(&c);
    int64_t ids[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    sparse_table_set_step(t, 1);
    push_ones(t, ids, 10);
    uint64_t m1, m2, m3;
    dump_t d = dump(t, 0, &m1); /* a base: rows, never tombstones */
    assert_int_equal(d.rows, 10);
    assert_int_equal(d.dead, 0);
    sparse_table_committed(t, m1);
    sparse_table_set_step(t, 4);
    push_ones(t, ids, 4); /* 1..4 stay */
    sparse_table_set_step(t, 8);
    assert_int_equal(expire_all(t), 6); /* 5..10 go */
    push_ones(t, &ids[9], 1);           /* 10 comes back: a row, no tombstone */
    assert_false(sparse_table_needs_base(t, m1));
    d = dump(t, m1, &m2);
    assert_int_equal(d.rows, 5); /* 1..4 pushed, 10 re-created */
    assert_int_equal(d.dead, 5);
    for (size_t i = 0; i < d.dead; i++) assert_int_equal(d.dead_ids[i], 5 + (int64_t)i);
    d = dump(t, m1, NULL); /* not committed: the next delta since m1 still has them */
    assert_int_equal(d.dead, 5);
    sparse_table_committed(t, m2);
    d = dump(t, m2, &m3);
    assert_int_equal(d.dead, 0);
    assert_int_equal(d.rows, 0);
    sparse_table_destroy(t);
}

/* ---- threads ---- */

typedef struct race {
    sparse_table_t *t;
    atomic_int stop;
    int seed;
} race_t;

static void *pusher(void *arg)
{
    race_t *r = arg;
    int64_t ids[64];
    float g[64 * DIM], out[64 * DIM];
    for (size_t i = 0; i < PSC_ARRAY_LEN(g); i++) g[i] = 1.0f;
    unsigned x = (unsigned)r->seed;
    for (int it = 0; !atomic_load(&r->stop) && it < 3000; it++) {
        for (int i = 0; i < 64; i++) {
            x = x * 1103515245u + 12345u;
            ids[i] = (int64_t)((x >> 8) % 4096) * 64 + i; /* unique within the request */
        }
        sparse_table_set_step(r->t, it);
        if (it % 3) {
            unsigned char *ri, *rg;
            const void *pi = pack_ids(ids, 64, &ri), *pg = pack_floats(g, 64 * DIM, &rg);
            assert_int_equal(sparse_table_push(r->t, pi, 64, pg, 0.01, it % 2 ? out : NULL), 0);
            free(ri);
            free(rg);
        } else {
            pull(r->t, ids, 64, out);
        }
    }
    return NULL;
}

static void *expirer(void *arg)
{
    race_t *r = arg;
    int64_t ids[256];
    float vals[256 * DIM];
    while (!atomic_load(&r->stop)) {
        expire_all(r->t);
        size_t n;
        int more;
        sparse_table_scan(r->t, -1, 256, ids, vals, &n, &more);
        for (size_t i = 1; i < n; i++) assert_true(ids[i - 1] < ids[i]);
    }
    return NULL;
}

static void test_race(void **state)
{
    (void)state;
    sparse_table_cfg_t c = cfg_of(1 << 20, 1, 0, PSC_PART_MOD, DIM, sgd());
    c.ttl_steps = 20;
    c.max_rows = 2048;
    race_t r = {.t = make(&c)};
    atomic_init(&r.stop, 0);
    pthread_t th[4];
    race_t rs[3];
    for (int i = 0; i < 3; i++) {
        rs[i] = r;
        rs[i].seed = i + 1;
        atomic_init(&rs[i].stop, 0);
        pthread_create(&th[i], NULL, pusher, &rs[i]);
    }
    pthread_create(&th[3], NULL, expirer, &r);
    for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
    atomic_store(&r.stop, 1);
    pthread_join(th[3], NULL);
    /* consistent: the rows a full export emits are the rows counted, at most the cap */
    dump_t d = dump(r.t, 0, NULL);
    sparse_table_stats_t st = stats(r.t);
    assert_int_equal(d.rows, st.rows);
    assert_true(st.rows <= 2048);
    assert_true(st.rows_evicted > 0);
    sparse_table_destroy(r.t);
}

/* ---- in a store: the evictor, pushes and checkpoints ---- */

#define RACE_JOB "00000000000071f0"

typedef struct store_race {
    store_t *s;
    atomic_int *stop;
    int seed, failed;
} store_race_t;

static void *store_pusher(void *arg)
{
    store_race_t *r = arg;
    int64_t ids[128];
    float g[128 * DIM];
    for (size_t i = 0; i < PSC_ARRAY_LEN(g); i++) g[i] = 1.0f;
    unsigned x = (unsigned)r->seed;
    char err[256];
    for (int64_t it = 1; !atomic_load(r->stop) && !r->failed; it++) {
        for (int i = 0; i < 128; i++) {
            x = x * 1103515245u + 12345u;
            ids[i] = (int64_t)((x >> 8) % 64) * 128 + i; /* 8192 ids, unique within the request */
        }
        store_note_step(r->s, it / 4);
        r->failed |= store_sparse_push(r->s, "emb", ids, 128, g, sizeof g, 0, NULL, err, sizeof err) != 0;
    }
    return NULL;
}

typedef struct cut {
    size_t rows, dead;
    unsigned char *seen; /* (8192) 1 row, 2 tombstone */
    int bad;
} cut_t;

static int cut_table(void *arg, const char *name, uint32_t len)
{
    (void)arg, (void)name, (void)len;
    return 0;
}

static int cut_row(void *arg, const char *name, int64_t id, const void *rec, size_t len)
{
    (void)name, (void)len;
    cut_t *c = arg;
    if (id < 0 || id >= 8192 || c->seen[id]) c->bad = 1;
    else c->seen[id] = rec ? 1 : 2;
    if (rec) c->rows++;
    else c->dead++;
    return 0;
}

static int cut_tensor(void *arg, const char *name, const void *data, size_t len)
{
    (void)arg, (void)name, (void)data, (void)len;
    return 0;
}

static void test_store_race(void **state)
{
    (void)state;
    char err[256];
    psc_optim_config_t opt = sgd();
    store_t *s = store_create();
    static const store_var_spec_t step = {.name = "global_step", .is_step = 1};
    int created;
    assert_int_equal(store_create_vars(s, RACE_JOB, &opt, &step, 1, &created, err, sizeof err), 0);
    sparse_table_cfg_t c = cfg_of(8192, 1, 0, PSC_PART_MOD, DIM, opt);
    c.ttl_steps = 3;
    c.max_rows = 4096;
    assert_int_equal(store_create_tables(s, RACE_JOB, &c, 1, err, sizeof err), 0);
    assert_int_equal(store_set_ready(s, RACE_JOB, err, sizeof err), 0);
    atomic_int stop;
    atomic_init(&stop, 0);
    pthread_t th[2];
    store_race_t args[2];
    for (int i = 0; i < 2; i++) {
        args[i] = (store_race_t){.s = s, .stop = &stop, .seed = i + 7};
        assert_int_equal(pthread_create(&th[i], NULL, store_pusher, &args[i]), 0);
    }
    size_t deltas = 0, dead = 0;
    unsigned char *seen = calloc(8192, 1);
    for (uint64_t id = 1; id <= 16; id++) {
        usleep(100 * 1000); /* the evictor passes every 0.5 s */
        memset(seen, 0, 8192);
        cut_t cut = {.seen = seen};
        store_rows_io_t io = {.table = cut_table, .row = cut_row, .arg = &cut};
        int64_t at;
        uint64_t parent = 0;
        assert_int_equal(store_export_ex(s, cut_tensor, NULL, &io, id, 0, &at, &parent, err, sizeof err), 0);
        assert_int_equal(cut.bad, 0);
        if (parent) {
            deltas++;
            dead += cut.dead;
        } else {
            assert_int_equal(cut.dead, 0); /* a base has no tombstones */
        }
        store_ckpt_committed(s, id);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(args[i].failed, 0);
    }
    store_table_info_t *info;
    int n;
    store_list_tables(s, &info, &n);
    assert_int_equal(n, 1);
    printf("store race: %zu deltas, %zu tombstones written, %llu rows evicted, longest pause %llu us\n", deltas, dead,
           (unsigned long long)info[0].stats.rows_evicted, (unsigned long long)info[0].stats.pause_max_ns / 1000);
    assert_true(info[0].stats.rows_evicted > 0);
    assert_true(info[0].stats.rows <= 4096);
    free(info);
    free(seen);
    store_destroy(s);
}

static void test_bad_config(void **state)
{
    (void)state;
    sparse_table_cfg_t c = cfg_of(100, 1, 0, PSC_PART_MOD, DIM, sgd());
    char err[256];
    c.ttl_steps = -1;
    assert_int_equal(sparse_table_check_cfg(&c, err, sizeof err), PSC_EINVAL);
    assert_non_null(strstr(err, "eviction.ttl_steps"));
    c.ttl_steps = 0;
    c.ttl_secs = NAN;
    assert_int_equal(sparse_table_check_cfg(&c, err, sizeof err), PSC_EINVAL);
    assert_non_null(strstr(err, "eviction.ttl_secs"));
    c.ttl_secs = 0;
    c.max_rows = SPARSE_MIN_CAP - 1;
    assert_int_equal(sparse_table_check_cfg(&c, err, sizeof err), PSC_EINVAL);
    assert_non_null(strstr(err, "eviction.max_rows"));
    c.max_rows = 0;
    c.min_count = 256;
    assert_int_equal(sparse_table_check_cfg(&c, err, sizeof err), PSC_EINVAL);
    assert_non_null(strstr(err, "admission.min_count"));
    c.min_count = 2;
    c.filter_bytes = 1000;
    assert_int_equal(sparse_table_check_cfg(&c, err, sizeof err), PSC_EINVAL);
    assert_non_null(strstr(err, "admission.filter_bytes"));
    c.filter_bytes = SPARSE_FILTER_MIN;
    assert_int_equal(sparse_table_check_cfg(&c, err, sizeof err), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ttl_steps),  cmocka_unit_test(test_ttl_secs),   cmocka_unit_test(test_cap),
        cmocka_unit_test(test_admission),  cmocka_unit_test(test_tombstones), cmocka_unit_test(test_race),
        cmocka_unit_test(test_store_race),  cmocka_unit_test(test_bad_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
