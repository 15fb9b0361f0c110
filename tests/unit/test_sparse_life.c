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
 * and the cap trims keep the part consistent. A checkpoint's cut copied a
 * third of the shards at a time while pushes, puts, expiry and the cap change
 * the part gives the rows of a cut copied at once, and the same next delta;
 * so does one whose shards are copied a few index positions at a time with
 * the changes between two pieces of a shard (its index grown, entries
 * shifted back by removals).
 * In a store, pushes of the same rows race the store's evictor and
 * checkpoint exports with commits: each export is one cut (no id both a row
 * and a tombstone, none twice; a pusher's group of rows, always pushed
 * together, all in or all out at one t and one value) and the chain of
 * checkpoints rebuilds the rows; a reset or a restore during an export's copy
 * cancels it without a deadlock (this test runs under TSan: `make tsan`).
 */
#include "sparse_table.h"
#include "store.h"

#include "optim.h"
#include "psc.h"
#include "rng.h"
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

static int cmp_id(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
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
    qsort(d.dead_ids, d.dead, sizeof d.dead_ids[0], cmp_id); /* emitted shard by shard */
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

/* ---- a cut copied while the part changes (sparse_cut.c) ---- */

/* A part with a TTL and a cap, and the same history in two: rows 0..COW_IDS
 * created, a base committed, then some pushed and some expired (tombstones). */
#define COW_IDS 3000
#define COW_REC (8 + 4 * DIM)

static sparse_table_t *cow_part(uint64_t *m1)
{
    sparse_table_cfg_t c = cfg_of(1 << 20, 1, 0, PSC_PART_MOD, DIM, sgd());
    c.ttl_steps = 5;
    c.max_rows = 2800; /* the cap trims some too */
    sparse_table_t *t = make(&c);
    int64_t *ids = malloc(COW_IDS * sizeof *ids);
    for (int i = 0; i < COW_IDS; i++) ids[i] = i;
    sparse_table_set_step(t, 1);
    push_ones(t, ids, COW_IDS / 2);
    dump(t, 0, m1);
    sparse_table_committed(t, *m1);
    sparse_table_set_step(t, 4);
    push_ones(t, ids + COW_IDS / 2, COW_IDS / 2);
    push_ones(t, ids, 300); /* 0..299 twice */
    sparse_table_set_step(t, 9);
    expire_all(t);                /* those last pushed at step 1: 300..1499 */
    push_ones(t, ids + 1000, 10); /* 1000..1009 come back */
    free(ids);
    return t;
}

/* What happens to a part after its cut, before or while it is copied:
 * pushes of rows of the cut and of new rows, a put, expiry (tombstones after
 * the cut), the cap, an evicted row re-created. */
static void cow_changes(sparse_table_t *t, int round)
{
    int64_t ids[600];
    for (int i = 0; i < 600; i++) ids[i] = round * 600 + i * 5; /* rows of the cut, evicted ones, new ones */
    sparse_table_set_step(t, 10 + round);
    push_ones(t, ids, 600);
    int64_t fresh[50];
    for (int i = 0; i < 50; i++) fresh[i] = 100000 + round * 50 + i;
    float out[50 * DIM];
    pull(t, fresh, 50, out);
    unsigned char rec[COW_REC];
    memset(rec, 0, sizeof rec);
    char err[128];
    assert_int_equal(sparse_table_put(t, 1500 + round, rec, sizeof rec, err, sizeof err), 0);
    sparse_table_set_step(t, 20 + 10 * round);
    expire_all(t);
}

/* cow_changes and then a burst of 1500 new rows: indexes grow, and the cap
 * evicts (removals shift entries back). */
static void cow_round(sparse_table_t *t, int round)
{
    cow_changes(t, round);
    int64_t ids[1500];
    for (int i = 0; i < 1500; i++) ids[i] = 200000 + round * 1500 + i;
    push_ones(t, ids, 1500);
}

/* rows_emit with a tombstone as a record of 0xee bytes (an SGD record: 8 + 4 * DIM). */
static int cow_emit(void *arg, int64_t id, const void *rec, size_t len)
{
    unsigned char dead[COW_REC];
    memset(dead, 0xee, sizeof dead);
    if (!rec)
        assert_int_equal(len, 0);
    else
        assert_int_equal(len, COW_REC);
    return rows_emit(arg, id, rec ? rec : dead, COW_REC);
}

/* An export's rows and tombstones, sorted by id, as one list to compare. */
static rows_t cow_export(sparse_table_t *t, uint64_t since, uint64_t *mark)
{
    rows_t r = {0};
    uint64_t m;
    assert_int_equal(sparse_table_export(t, since, 1, cow_emit, &r, mark ? mark : &m), 0);
    return r;
}

static void expect_same_rows(const rows_t *a, const rows_t *b)
{
    assert_int_equal(a->n, b->n);
    for (size_t i = 0; i < a->n; i++) {
        assert_int_equal(a->ids[i], b->ids[i]);
        assert_memory_equal(a->recs + i * a->len, b->recs + i * b->len, a->len);
    }
}

/* rb's rows sorted by id (tombstones as in cow_export). */
static rows_t rows_sorted(const rows_t *rb)
{
    rows_t sb = {0};
    size_t *ord = malloc((rb->n ? rb->n : 1) * sizeof *ord);
    for (size_t i = 0; i < rb->n; i++) ord[i] = i;
    for (size_t i = 1; i < rb->n; i++) /* insertion sort by id: a few thousand */
        for (size_t j = i; j > 0 && rb->ids[ord[j - 1]] > rb->ids[ord[j]]; j--) {
            size_t x = ord[j];
            ord[j] = ord[j - 1];
            ord[j - 1] = x;
        }
    for (size_t i = 0; i < rb->n; i++) rows_emit(&sb, rb->ids[ord[i]], rb->recs + ord[i] * rb->len, rb->len);
    free(ord);
    return sb;
}

/* Pieces of a shard's copy: cow_round 0 and 1 at the at[0]-th and at[1]-th
 * break between two pieces (calls counts them). */
typedef struct cow_hook {
    sparse_table_t *t;
    int calls, at[2];
} cow_hook_t;

static void cow_between_pieces(void *arg)
{
    cow_hook_t *h = arg;
    h->calls++;
    for (int r = 0; r < 2; r++)
        if (h->calls == h->at[r]) cow_round(h->t, r);
}

/* Two parts with the same history: a copied at once, b with cow_round 0
 * and 1 while its cut is copied (pieces 0: between shards; else between the
 * pieces-th and a later break between pieces of a shard): the same rows (as
 * at the cut); then a gets the same changes after its copy, and the next
 * deltas agree too (the rows changed after the cut, the evictions after
 * it). Returns b, a in *other. */
static sparse_table_t *cow_copy_changing(int pieces, sparse_table_t **other, uint64_t *m3)
{
    uint64_t m1a, m1b, m2a, m2b;
    sparse_table_t *a = cow_part(&m1a), *b = cow_part(&m1b);
    rows_t ra = cow_export(a, m1a, &m2a);
    rows_t rb = {0};
    cow_hook_t hook = {.t = b, .at = {pieces, pieces + 700}};
    if (pieces) sparse_table_set_copy_piece(b, 3, cow_between_pieces, &hook);
    sparse_table_cut(b, m1b, &m2b);
    sparse_cut_buf_t buf = {0};
    for (int s = 0; s < SPARSE_TABLE_SHARDS; s++) {
        if (!pieces && s == SPARSE_TABLE_SHARDS / 3) cow_round(b, 0);
        if (!pieces && s == 2 * SPARSE_TABLE_SHARDS / 3) cow_round(b, 1);
        assert_int_equal(sparse_table_cut_copy(b, s, &buf), 0);
        assert_int_equal(sparse_cut_buf_emit(&buf, cow_emit, &rb), 0);
    }
    assert_int_equal(sparse_table_cut_left(b), 0);
    if (pieces) {
        assert_true(hook.calls > hook.at[1]); /* both rounds ran mid-copy */
        sparse_table_set_copy_piece(b, 0, NULL, NULL);
    }
    sparse_cut_buf_free(&buf);
    rows_t sb = rows_sorted(&rb);
    assert_true(ra.n > 1000);
    expect_same_rows(&ra, &sb);
    assert_int_equal(m2a, m2b);
    sparse_table_committed(a, m2a);
    sparse_table_committed(b, m2b);
    cow_round(a, 0);
    cow_round(a, 1);
    uint64_t m3a;
    rows_t da = cow_export(a, m2a, &m3a), db = cow_export(b, m2b, m3);
    assert_true(da.n > 1000);
    expect_same_rows(&da, &db);
    assert_int_equal(m3a, *m3);
    rows_free(&ra), rows_free(&rb), rows_free(&sb), rows_free(&da), rows_free(&db);
    *other = a;
    return b;
}

static void test_cut_copy_on_write(void **state)
{
    (void)state;
    sparse_table_t *a, *b;
    uint64_t m3;
    b = cow_copy_changing(0, &a, &m3);
    /* an abandoned cut: marks cleared, nothing kept, the next cut opens */
    uint64_t m4;
    int64_t some[400];
    for (int i = 0; i < 400; i++) some[i] = 7 * i;
    push_ones(b, some, 400);
    sparse_table_cut(b, m3, &m4);
    push_ones(b, some, 400); /* keeps the rows for the cut: counted in bytes until the cut closes */
    sparse_table_stats_t st0 = stats(b);
    sparse_table_cut_abort(b);
    assert_int_equal(sparse_table_cut_left(b), 0);
    assert_true(stats(b).bytes < st0.bytes);
    rows_t again = cow_export(b, m3, NULL); /* the changes since m3, once each */
    assert_true(again.n > 0);
    /* and a cut left open when the part goes: destroy frees what it kept */
    sparse_table_cut(a, m3, &m4);
    cow_changes(a, 2);
    rows_free(&again);
    sparse_table_destroy(a);
    sparse_table_destroy(b);
}

/* The same with the changes between pieces of a shard's copy, 3 index
 * positions a piece, at 16 places. */
static void test_cut_copy_pieces(void **state)
{
    (void)state;
    for (int at = 1; at < 1200; at += 75) {
        sparse_table_t *a, *b;
        uint64_t m3;
        b = cow_copy_changing(at, &a, &m3);
        sparse_table_destroy(a);
        sparse_table_destroy(b);
    }
}

/* One shard's copy changed under it, on purpose: shard PIECE_SHARD holds
 * rows B (pushed at step 1) and A (step 10), 100 each, when a full base's
 * cut is taken; at the k-th break of its copy (2 index positions a piece)
 * either 200 new rows go into it (its index doubles: the copy starts over,
 * its bits skipping the rows it has) or its expiry at step 14 (TTL 5
 * steps) removes the B rows (kept for the cut first), whose backward shifts
 * move A entries, some from where the copy has not been to where it has.
 * The copy must be the rows at the cut, as a copy left alone gives. */
#define PIECE_SHARD 77

typedef struct piece_hook {
    sparse_table_t *t;
    int s, calls, at, grow;
    const int64_t *fresh; /* (200) the new rows */
} piece_hook_t;

static void piece_between(void *arg)
{
    piece_hook_t *h = arg;
    if (h->s != PIECE_SHARD || ++h->calls != h->at) return;
    if (h->grow) {
        push_ones(h->t, h->fresh, 200);
    } else {
        sparse_table_set_step(h->t, 14);
        assert_int_equal(sparse_table_expire(h->t, PIECE_SHARD), 100);
    }
}

/* n ids from `from` on whose rows live in shard s. */
static void ids_in_shard(int s, int64_t from, int64_t *ids, int n)
{
    for (int64_t id = from; n > 0; id++)
        if ((int)(psc_mix64((uint64_t)id) >> 56) == s) *ids++ = id, n--;
}

static sparse_table_t *piece_part(const int64_t *ab)
{
    sparse_table_cfg_t c = cfg_of(1 << 30, 1, 0, PSC_PART_MOD, DIM, sgd());
    c.ttl_steps = 5;
    sparse_table_t *t = make(&c);
    sparse_table_set_step(t, 1);
    push_ones(t, ab, 100);
    sparse_table_set_step(t, 10);
    push_ones(t, ab + 100, 100);
    return t;
}

static void test_cut_copy_piece_moves(void **state)
{
    (void)state;
    int64_t ab[200], fresh[200];
    ids_in_shard(PIECE_SHARD, 0, ab, 200);
    ids_in_shard(PIECE_SHARD, 1 << 24, fresh, 200);
    for (int grow = 0; grow < 2; grow++)
        for (int at = 1; at < 250; at += 6) {
            sparse_table_t *a = piece_part(ab), *b = piece_part(ab);
            uint64_t m, mb;
            rows_t ra = cow_export(a, 0, &m), rb = {0};
            piece_hook_t h = {.t = b, .at = at, .grow = grow, .fresh = fresh};
            sparse_table_set_copy_piece(b, 2, piece_between, &h);
            sparse_table_cut(b, 0, &mb);
            sparse_cut_buf_t buf = {0};
            for (h.s = 0; h.s < SPARSE_TABLE_SHARDS; h.s++) {
                assert_int_equal(sparse_table_cut_copy(b, h.s, &buf), 0);
                assert_int_equal(sparse_cut_buf_emit(&buf, cow_emit, &rb), 0);
            }
            sparse_cut_buf_free(&buf);
            int past = h.calls < at; /* the shard's copy had fewer breaks: this grow's places are done */
            if (!past) {
                rows_t sb = rows_sorted(&rb);
                assert_int_equal(ra.n, 200);
                expect_same_rows(&ra, &sb);
                rows_free(&sb);
            }
            rows_free(&ra), rows_free(&rb);
            sparse_table_destroy(a), sparse_table_destroy(b);
            if (past) break;
        }
}

/* ---- in a store: the evictor, pushes and checkpoints ---- */

#define RACE_JOB "00000000000071f0"

typedef struct store_race {
    store_t *s;
    atomic_int *stop;
    int seed, failed;
} store_race_t;

/* Table "grp" (no TTL, no cap, zeros at first): pusher p pushes its whole
 * group of GRP_N ids (spread over the shards) in every push, so in any one
 * cut the group's rows are all there or none (a delta) and all have the same
 * t and the same values. */
#define GRP_N 256
#define GRP_ROWS 8192

static int64_t grp_id(int p, int k) { return (int64_t)p * (GRP_ROWS / 2) + k * 13; }

static void *store_pusher(void *arg)
{
    store_race_t *r = arg;
    int64_t ids[128], gids[GRP_N];
    float g[GRP_N * DIM];
    for (size_t i = 0; i < PSC_ARRAY_LEN(g); i++) g[i] = 1.0f;
    for (int k = 0; k < GRP_N; k++) gids[k] = grp_id(r->seed - 7, k);
    unsigned x = (unsigned)r->seed;
    char err[256];
    for (int64_t it = 1; !atomic_load(r->stop) && !r->failed; it++) {
        for (int i = 0; i < 128; i++) {
            x = x * 1103515245u + 12345u;
            ids[i] = (int64_t)((x >> 8) % 64) * 128 + i; /* 8192 ids, unique within the request */
        }
        store_note_step(r->s, it / 4);
        r->failed |= store_sparse_push(r->s, "emb", ids, 128, g, 128 * DIM * sizeof *g, 0, NULL, err, sizeof err) != 0;
        r->failed |= store_sparse_push(r->s, "grp", gids, GRP_N, g, sizeof g, 0, NULL, err, sizeof err) != 0;
    }
    return NULL;
}

typedef struct cut {
    size_t rows, dead;
    unsigned char *seen; /* (8192) "emb": 1 row, 2 tombstone */
    unsigned char gseen[GRP_ROWS];
    unsigned char grec[GRP_ROWS][8 + 4 * DIM]; /* "grp": the records */
    int bad;
} cut_t;

static int cut_table(void *arg, const char *name, uint32_t len)
{
    (void)arg;
    if (strcmp(name, "grp") == 0) assert_int_equal(len, 8 + 4 * DIM);
    return 0;
}

static int cut_row(void *arg, const char *name, int64_t id, const void *rec, size_t len)
{
    cut_t *c = arg;
    if (strcmp(name, "grp") == 0) {
        if (id < 0 || id >= GRP_ROWS || c->gseen[id] || !rec || len != sizeof c->grec[0])
            c->bad = 1;
        else
            memcpy(c->grec[id], rec, len), c->gseen[id] = 1;
        return 0;
    }
    if (id < 0 || id >= 8192 || c->seen[id])
        c->bad = 1;
    else
        c->seen[id] = rec ? 1 : 2;
    if (rec)
        c->rows++;
    else
        c->dead++;
    return 0;
}

static int cut_tensor(void *arg, const char *name, const void *data, size_t len)
{
    (void)arg, (void)name, (void)data, (void)len;
    return 0;
}

/* Each group of the cut whole (all its rows or none) at one t, with one
 * value; the rows folded into the replica (a base replaces it); the groups'
 * t returned (-1: not in this delta). */
static void check_groups(const cut_t *c, int base, unsigned char (*replica)[8 + 4 * DIM], int64_t t[2])
{
    if (base) memset(replica, 0, (size_t)GRP_ROWS * sizeof *replica);
    for (int p = 0; p < 2; p++) {
        int n = 0;
        for (int k = 0; k < GRP_N; k++) n += c->gseen[grp_id(p, k)];
        assert_true(n == 0 || n == GRP_N); /* one cut: one push is all in or all out */
        t[p] = -1;
        if (!n) continue;
        const unsigned char *first = c->grec[grp_id(p, 0)];
        for (int k = 0; k < GRP_N; k++) {
            const unsigned char *r = c->grec[grp_id(p, k)];
            assert_memory_equal(r, first, sizeof c->grec[0]); /* the same t, the same values */
            memcpy(replica[grp_id(p, k)], r, sizeof c->grec[0]);
        }
        memcpy(&t[p], first, 8);
    }
}

static store_t *race_store(void)
{
    char err[256];
    psc_optim_config_t opt = sgd();
    store_t *s = store_create();
    static const store_var_spec_t step = {.name = "global_step", .is_step = 1};
    int created;
    assert_int_equal(store_create_vars(s, RACE_JOB, &opt, &step, 1, &created, err, sizeof err), 0);
    sparse_table_cfg_t c[2] = {cfg_of(8192, 1, 0, PSC_PART_MOD, DIM, opt),
                               cfg_of(GRP_ROWS, 1, 0, PSC_PART_MOD, DIM, opt)};
    c[0].ttl_steps = 3;
    c[0].max_rows = 4096;
    snprintf(c[1].name, sizeof c[1].name, "grp");
    c[1].init = (psc_initializer_t){.kind = PSC_INIT_ZEROS};
    assert_int_equal(store_create_tables(s, RACE_JOB, c, 2, err, sizeof err), 0);
    assert_int_equal(store_set_ready(s, RACE_JOB, err, sizeof err), 0);
    return s;
}

/* One checkpoint of the race into *cut; its parent. */
static uint64_t race_checkpoint(store_t *s, uint64_t id, cut_t *cut)
{
    char err[256];
    unsigned char *seen = cut->seen;
    memset(seen, 0, 8192);
    memset(cut, 0, sizeof *cut);
    cut->seen = seen;
    store_rows_io_t io = {.table = cut_table, .row = cut_row, .arg = cut};
    int64_t at;
    uint64_t parent = 0;
    assert_int_equal(store_export_ex(s, cut_tensor, NULL, &io, id, 0, &at, &parent, err, sizeof err), 0);
    assert_int_equal(cut->bad, 0);
    return parent;
}

static void test_store_race(void **state)
{
    (void)state;
    store_t *s = race_store();
    atomic_int stop;
    atomic_init(&stop, 0);
    pthread_t th[2];
    store_race_t args[2];
    for (int i = 0; i < 2; i++) {
        args[i] = (store_race_t){.s = s, .stop = &stop, .seed = i + 7};
        assert_int_equal(pthread_create(&th[i], NULL, store_pusher, &args[i]), 0);
    }
    size_t deltas = 0, dead = 0;
    cut_t *cut = calloc(1, sizeof *cut);
    unsigned char *seen = calloc(8192, 1);
    unsigned char(*replica)[8 + 4 * DIM] = calloc(GRP_ROWS, sizeof *replica);
    int64_t last[2] = {0, 0}, t[2];
    for (uint64_t id = 1; id <= 17; id++) {
        if (id == 17) { /* the last one after the pushers: the chain must give the rows as they are */
            atomic_store(&stop, 1);
            for (int i = 0; i < 2; i++) {
                assert_int_equal(pthread_join(th[i], NULL), 0);
                assert_int_equal(args[i].failed, 0);
            }
        } else {
            usleep(100 * 1000); /* the evictor passes every 0.5 s */
        }
        cut->seen = seen;
        uint64_t parent = race_checkpoint(s, id, cut);
        if (parent) {
            deltas++;
            dead += cut->dead;
        } else {
            assert_int_equal(cut->dead, 0); /* a base has no tombstones */
        }
        check_groups(cut, parent == 0, replica, t);
        for (int p = 0; p < 2; p++) { /* a group's t only grows; a base has every group pushed so far */
            if (t[p] >= 0) assert_true(t[p] > last[p] || (parent == 0 && t[p] == last[p]));
            if (t[p] >= 0)
                last[p] = t[p];
            else
                assert_true(parent != 0 || last[p] == 0);
        }
        store_ckpt_committed(s, id);
    }
    /* the chain of checkpoints holds the groups' rows as they are now */
    char err[256];
    for (int p = 0; p < 2; p++) {
        int64_t ids[GRP_N];
        float vals[GRP_N * DIM];
        for (int k = 0; k < GRP_N; k++) ids[k] = grp_id(p, k);
        assert_int_equal(store_sparse_pull(s, "grp", ids, GRP_N, vals, GRP_N * DIM, 1, 0, NULL, NULL, err, sizeof err),
                         0);
        for (int k = 0; k < GRP_N; k++) {
            int64_t rt;
            memcpy(&rt, replica[ids[k]], 8);
            assert_int_equal(rt, last[p]);
            assert_memory_equal(replica[ids[k]] + 8, vals + k * DIM, 4 * DIM);
        }
    }
    store_table_info_t *info;
    int n;
    store_list_tables(s, &info, &n);
    assert_int_equal(n, 2);
    printf("store race: %zu deltas, %zu tombstones written, %llu rows evicted, longest pause %llu us; groups "
           "pushed %lld and %lld times\n",
           deltas, dead, (unsigned long long)info[0].stats.rows_evicted,
           (unsigned long long)info[0].stats.pause_max_ns / 1000, (long long)last[0], (long long)last[1]);
    assert_true(info[0].stats.rows_evicted > 0);
    assert_true(info[0].stats.rows <= 4096);
    assert_true(last[0] > 0 && last[1] > 0);
    free(info);
    free(seen);
    free(cut);
    free(replica);
    store_destroy(s);
}

/* Counts rows; on the first, runs `during` (a reset or a restore replaces
 * the parts under the copy). */
typedef struct cancel {
    store_t *s;
    int rows, mode; /* mode 1: store_reset; 2: a restore */
} cancel_t;

static int fetch_none(void *arg, const char *name, void **data, size_t *len, char *err, size_t errlen)
{
    (void)arg, (void)data, (void)len;
    int64_t step = 0;
    if (strcmp(name, "global_step") != 0) return psc_seterr(err, errlen, PSC_ENOTFOUND, "no %s", name);
    *data = malloc(8);
    memcpy(*data, &step, 8);
    *len = 8;
    return 0;
}

static int read_none(void *arg, const char *name, int (*put)(void *, int64_t, const void *, size_t), void *put_arg,
                     char *err, size_t errlen)
{
    (void)arg, (void)name, (void)put, (void)put_arg, (void)err, (void)errlen;
    return 0; /* a table without rows */
}

static int cancel_row(void *arg, const char *name, int64_t id, const void *rec, size_t len)
{
    (void)name, (void)id, (void)rec, (void)len;
    cancel_t *c = arg;
    if (c->rows++ == 0) {
        char err[256];
        store_rows_io_t io = {.read = read_none};
        if (c->mode == 1)
            store_reset(c->s);
        else
            assert_int_equal(store_import_ex(c->s, fetch_none, NULL, &io, 0, err, sizeof err), 0);
    }
    return 0;
}

static void test_store_cut_cancelled(void **state)
{
    (void)state;
    for (int mode = 1; mode <= 2; mode++) {
        store_t *s = race_store();
        int64_t ids[512];
        float g[512 * DIM];
        char err[256];
        for (int i = 0; i < 512; i++) ids[i] = i * 11;
        for (size_t i = 0; i < PSC_ARRAY_LEN(g); i++) g[i] = 1.0f;
        assert_int_equal(store_sparse_push(s, "grp", ids, 512, g, sizeof g, 0, NULL, err, sizeof err), 0);
        cancel_t c = {s, 0, mode};
        store_rows_io_t io = {.table = cut_table, .row = cancel_row, .arg = &c};
        int64_t at;
        uint64_t parent;
        /* the copy meets parts that are gone: cancelled, nothing left pending, no deadlock */
        assert_int_equal(store_export_ex(s, cut_tensor, NULL, &io, 1, 0, &at, &parent, err, sizeof err),
                         PSC_ECANCELLED);
        assert_non_null(strstr(err, "replaced"));
        if (mode == 2) {
            cut_t *cut = calloc(1, sizeof *cut);
            cut->seen = calloc(8192, 1);
            assert_int_equal(race_checkpoint(s, 2, cut), 0); /* the restored parts: a base, empty */
            for (int i = 0; i < GRP_ROWS; i++) assert_int_equal(cut->gseen[i], 0);
            free(cut->seen);
            free(cut);
        }
        store_destroy(s);
    }
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
        cmocka_unit_test(test_ttl_steps),
        cmocka_unit_test(test_ttl_secs),
        cmocka_unit_test(test_cap),
        cmocka_unit_test(test_admission),
        cmocka_unit_test(test_tombstones),
        cmocka_unit_test(test_race),
        cmocka_unit_test(test_cut_copy_on_write),
        cmocka_unit_test(test_cut_copy_pieces),
        cmocka_unit_test(test_cut_copy_piece_moves),
        cmocka_unit_test(test_store_race),
        cmocka_unit_test(test_store_cut_cancelled),
        cmocka_unit_test(test_bad_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
