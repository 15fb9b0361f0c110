/* test_sparse_table — one PS's part of a sparse embedding table (sparse_table.h).
 *
 * Ids: range, part (mod and div strategies), duplicates, too many
 * (PSC_ENOMEM, the wire's RESOURCE_EXHAUSTED); gradients: a non-finite one is refused naming its id. Rows
 * appear when first touched with psc_table_row_init's values (table.h), bit
 * for bit, with t = 0 and the optimizer's initial slots; a read-only pull
 * (sparse_table_read, evaluation) reads the same values, trained or initial,
 * and creates no row, marks none for export and changes no record. A push and
 * a pull in one pass over the shards (sparse_table_push_pull) read and leave
 * the same bytes as the push then the pull. The sparse
 * optimizers against a double reference: test_sparse_optim.c; the helpers:
 * sparse_table_fixture.h. Threads pushing overlapping rows (SGD, lr 1, gradients 1,
 * zeros initializer: the values are exact integers) lose no update, while a
 * puller (and a scan) sees only whole updates. export(since) gives exactly the rows created
 * or pushed after the mark, sorted when asked; put() of an export rebuilds a
 * table bit for bit and refuses bad records; scan pages through every row in
 * ascending order. Memory: 100k rows of a 2^40-row table keep stats.bytes
 * within 2x of their records plus FIXED_OVERHEAD, and creating the table
 * allocates nothing in proportion to its rows (RSS).
 */
#include "sparse_table.h"

#include "optim.h"
#include "psc.h"
#include "table.h"

#include <inttypes.h>
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

/* ---- ids and gradients ---- */

static void test_create_checks(void **state)
{
    (void)state;
    sparse_table_destroy(NULL);
    struct {
        sparse_table_cfg_t c;
        const char *needle;
    } bad[] = {
        {cfg_of(0, 1, 0, PSC_PART_MOD, 4, sgd()), "rows"},
        {cfg_of(PSC_TABLE_MAX_ROWS + 1, 1, 0, PSC_PART_MOD, 4, sgd()), "rows"},
        {cfg_of(10, 1, 0, PSC_PART_MOD, 0, sgd()), "dim"},
        {cfg_of(10, 1, 0, PSC_PART_MOD, PSC_TABLE_MAX_DIM + 1, sgd()), "dim"},
        {cfg_of(10, 3, 3, PSC_PART_MOD, 4, sgd()), "part"},
        {cfg_of(10, 0, 0, PSC_PART_MOD, 4, sgd()), "part"},
        {cfg_of(10, 1, 0, (enum psc_partition)7, 4, sgd()), "partition"},
        {cfg_of(10, 1, 0, PSC_PART_MOD, 4, (psc_optim_config_t){.kind = (enum psc_optim_kind)42}), "optimizer"},
        {cfg_of(10, 1, 0, PSC_PART_MOD, 4, sgd()), "name"},
    };
    bad[PSC_ARRAY_LEN(bad) - 1].c.name[0] = '\0';
    for (size_t i = 0; i < PSC_ARRAY_LEN(bad); i++) {
        char err[256] = "";
        sparse_table_t *t = (sparse_table_t *)1;
        assert_int_equal(sparse_table_create(&bad[i].c, &t, err, sizeof err), PSC_EINVAL);
        assert_null(t);
        if (!strstr(err, bad[i].needle)) fail_msg("case %zu: \"%s\" lacks \"%s\"", i, err, bad[i].needle);
    }
    /* record sizes: 8 + 4 * dim * (1 + slots) */
    psc_optim_config_t adam = {.kind = PSC_OPT_ADAM, .beta1 = 0.9f, .beta2 = 0.999f};
    psc_optim_config_t ftrl = {.kind = PSC_OPT_FTRL, .learning_rate_power = -0.5f, .initial_accumulator_value = 0.1f};
    sparse_table_cfg_t c1 = cfg_of(10, 1, 0, PSC_PART_MOD, 16, sgd()), c2 = cfg_of(10, 1, 0, PSC_PART_MOD, 16, adam),
                       c3 = cfg_of(10, 1, 0, PSC_PART_MOD, 3, ftrl);
    sparse_table_t *t1 = make(&c1), *t2 = make(&c2), *t3 = make(&c3);
    assert_int_equal(sparse_table_record_bytes(t1), 72);
    assert_int_equal(sparse_table_record_bytes(t2), 200);
    assert_int_equal(sparse_table_record_bytes(t3), 8 + 4 * 3 * 3);
    assert_string_equal(sparse_table_config(t3)->name, NAME);
    sparse_table_destroy(t1);
    sparse_table_destroy(t2);
    sparse_table_destroy(t3);
}

static void test_check_ids_mod(void **state)
{
    (void)state;
    sparse_table_cfg_t c = cfg_of(10, 3, 1, PSC_PART_MOD, 4, sgd()); /* part 1: ids 1, 4, 7 */
    sparse_table_t *t = make(&c);
    EXPECT_IDS(t, 1, 0, NULL, 1, 4, 7);
    EXPECT_IDS(t, 1, 0, NULL, 7);
    EXPECT_IDS(t, 1, PSC_EINVAL, "id 2 (ids[1]) belongs to part 2", 1, 2);
    EXPECT_IDS(t, 0, PSC_EINVAL, "part 0", 0);
    EXPECT_IDS(t, 0, PSC_EINVAL, "id -1", 4, -1);
    EXPECT_IDS(t, 0, PSC_EINVAL, "id 10", 10);
    EXPECT_IDS(t, 0, PSC_EINVAL, "outside", INT64_MIN);
    EXPECT_IDS(t, 1, PSC_EINVAL, "id 4 appears twice", 4, 1, 4);
    EXPECT_IDS(t, 0, 0, NULL, 4, 1, 4); /* a pull may repeat ids */
    char err[128] = "";
    int64_t one = 1;
    assert_int_equal(sparse_table_check_ids(t, &one, 0, 1, err, sizeof err), 0);
    assert_int_equal(sparse_table_check_ids(t, &one, (size_t)SPARSE_MAX_IDS + 1, 0, err, sizeof err), PSC_ENOMEM);
    assert_non_null(strstr(err, "at most"));
    sparse_table_destroy(t);

    /* many ids (the duplicate check's set leaves the stack), the last repeats one */
    c = cfg_of(PSC_TABLE_MAX_ROWS, 4, 3, PSC_PART_MOD, 4, sgd());
    t = make(&c);
    enum { M = 5000 };
    int64_t *ids = malloc(M * sizeof *ids);
    for (int i = 0; i < M; i++) ids[i] = PSC_TABLE_MAX_ROWS - 1 - 4 * (int64_t)i * 1000003;
    assert_int_equal(check_ids(t, ids, M, 1, err, sizeof err), 0);
    ids[M - 1] = ids[17];
    assert_int_equal(check_ids(t, ids, M, 1, err, sizeof err), PSC_EINVAL);
    assert_non_null(strstr(err, "appears twice"));
    ids[M - 1] = PSC_TABLE_MAX_ROWS;
    assert_int_equal(check_ids(t, ids, M, 1, err, sizeof err), PSC_EINVAL);
    free(ids);
    sparse_table_destroy(t);
}

static void test_check_ids_div(void **state)
{
    (void)state;
    /* 10 rows in 3 parts: [0, 4), [4, 7), [7, 10) */
    sparse_table_cfg_t c = cfg_of(10, 3, 1, PSC_PART_DIV, 4, sgd());
    sparse_table_t *t = make(&c);
    EXPECT_IDS(t, 1, 0, NULL, 4, 5, 6);
    EXPECT_IDS(t, 1, PSC_EINVAL, "id 3 (ids[0]) belongs to part 0", 3);
    EXPECT_IDS(t, 1, PSC_EINVAL, "belongs to part 2", 5, 7);
    sparse_table_destroy(t);
    c.part = 0;
    t = make(&c);
    EXPECT_IDS(t, 1, 0, NULL, 0, 1, 2, 3);
    EXPECT_IDS(t, 1, PSC_EINVAL, "part 1", 4);
    sparse_table_destroy(t);
    /* fewer rows than parts: part p holds id p, part 2 of 3 nothing */
    c = cfg_of(2, 3, 2, PSC_PART_DIV, 4, sgd());
    t = make(&c);
    EXPECT_IDS(t, 0, PSC_EINVAL, "part 0", 0);
    EXPECT_IDS(t, 0, PSC_EINVAL, "part 1", 1);
    EXPECT_IDS(t, 0, PSC_EINVAL, "outside", 2);
    sparse_table_destroy(t);
    c.part = 1;
    t = make(&c);
    EXPECT_IDS(t, 1, 0, NULL, 1);
    sparse_table_destroy(t);
}

static void test_check_grads(void **state)
{
    (void)state;
    sparse_table_cfg_t c = cfg_of(1000, 1, 0, PSC_PART_MOD, 3, sgd());
    sparse_table_t *t = make(&c);
    enum { R = 50 };
    int64_t ids[R];
    float g[R * 3];
    for (int i = 0; i < R; i++) ids[i] = 7 * i + 1;
    for (int i = 0; i < R * 3; i++) g[i] = (float)(i % 7) - 3.0f;
    struct {
        int at;
        float v;
        const char *needle;
    } cases[] = {{-1, 0, NULL},
                 {4, NAN, "id 8 (row 1) element 1 is NaN"},
                 {3 * R - 1, INFINITY, "element 2 is infinite"},
                 {0, -INFINITY, "id 1 (row 0) element 0"}};
    for (size_t k = 0; k < PSC_ARRAY_LEN(cases); k++) {
        float gg[R * 3];
        memcpy(gg, g, sizeof gg);
        if (cases[k].at >= 0) gg[cases[k].at] = cases[k].v;
        unsigned char *ri, *rg;
        const void *pi = pack_ids(ids, R, &ri), *pg = pack_floats(gg, R * 3, &rg);
        char err[256] = "";
        int rc = sparse_table_check_grads(t, pi, pg, R, err, sizeof err);
        assert_int_equal(rc, cases[k].needle ? PSC_EINVAL : 0);
        if (cases[k].needle && !strstr(err, cases[k].needle))
            fail_msg("check_grads: \"%s\" lacks \"%s\"", err, cases[k].needle);
        free(ri);
        free(rg);
    }
    sparse_table_destroy(t);
}

/* ---- rows ---- */

/* A read-only pull (evaluation) gives exactly what a creating pull gives, for
 * rows that exist (trained values) and rows that do not (initial values),
 * and creates none. */
static void test_read_creates_no_row(void **state)
{
    (void)state;
    psc_optim_config_t sgd = {.kind = PSC_OPT_SGD, .learning_rate = 1.0f};
    sparse_table_cfg_t c = cfg_of(1000, 1, 0, PSC_PART_MOD, 4, sgd);
    sparse_table_t *t = make(&c);
    const int64_t seen[] = {5, 9};
    float g[8] = {1, 1, 1, 1, 2, 2, 2, 2}, out[8];
    push(t, seen, 2, g, 0.5, out);
    const int64_t ids[] = {5, 77, 9, 500};
    float got[16], want[16];
    unsigned char *raw;
    const void *p = pack_ids(ids, 4, &raw);
    assert_int_equal(sparse_table_read(t, p, 4, got), 0);
    sparse_table_stats_t st;
    sparse_table_get_stats(t, &st);
    assert_int_equal(st.rows, 2); /* 77 and 500 were read, not created */
    assert_int_equal(st.rows_pulled, 4);
    assert_int_equal(sparse_table_pull(t, p, 4, want), 0); /* creates them, same values */
    assert_memory_equal(got, want, sizeof got);
    sparse_table_get_stats(t, &st);
    assert_int_equal(st.rows, 4);
    free(raw);
    sparse_table_destroy(t);
}

/* A read-only pull of a big request (heap batches, every shard), on part 1
 * of 2 with an optimizer with slots: every id, trained or not, duplicates
 * included, reads what a creating pull then gives; no row is created, none
 * is marked for the next incremental export, and no record changes. */
static void test_read_big_request(void **state)
{
    (void)state;
    psc_optim_config_t adam = {
        .kind = PSC_OPT_ADAM, .learning_rate = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .epsilon = 1e-7f};
    sparse_table_cfg_t c = cfg_of(PSC_TABLE_MAX_ROWS, 2, 1, PSC_PART_MOD, 3, adam);
    sparse_table_t *t = make(&c);
    enum { NT = 500, N = 3000 };
    int64_t *trained = malloc(NT * sizeof *trained), *ids = malloc(N * sizeof *ids);
    float *g = malloc(NT * 3 * sizeof *g), *got = malloc(N * 3 * sizeof *got), *want = malloc(N * 3 * sizeof *want);
    assert_true(trained && ids && g && got && want);
    for (int i = 0; i < NT; i++) {
        trained[i] = 2 * (int64_t)i * 7919 + 1; /* odd: part 1 */
        for (int d = 0; d < 3; d++) g[3 * i + d] = 0.25f * (float)(d + 1);
    }
    push(t, trained, NT, g, 0.01, NULL);
    for (int i = 0; i < N; i++) /* every 3rd a trained row, the rest new, each id twice */
        ids[i] = i % 3 == 0 ? trained[(i / 3) % NT] : 2 * ((int64_t)1 << 38) + 2 * (int64_t)(i / 2) + 1;
    uint64_t mark;
    rows_t base = export_rows(t, 0, 1, &mark);
    assert_int_equal(base.n, NT);
    unsigned char *raw;
    const void *p = pack_ids(ids, N, &raw);
    assert_int_equal(sparse_table_read(t, p, N, got), 0);
    sparse_table_stats_t st;
    sparse_table_get_stats(t, &st);
    assert_int_equal(st.rows, NT);
    rows_t delta = export_rows(t, mark, 1, NULL);
    assert_int_equal(delta.n, 0); /* nothing for the next checkpoint */
    rows_free(&delta);
    rows_t again = export_rows(t, 0, 1, NULL);
    assert_int_equal(again.n, base.n);
    assert_memory_equal(again.recs, base.recs, base.n * base.len); /* records untouched */
    rows_free(&again);
    rows_free(&base);
    pull(t, ids, N, want);
    assert_memory_equal(got, want, (size_t)N * 3 * sizeof *got);
    sparse_table_get_stats(t, &st);
    assert_true(st.rows > NT);
    free(raw);
    free(trained);
    free(ids);
    free(g);
    free(got);
    free(want);
    sparse_table_destroy(t);
}

static void test_rows_appear_initialized(void **state)
{
    (void)state;
    psc_optim_config_t ada = {.kind = PSC_OPT_ADAGRAD, .learning_rate = 0.1f, .initial_accumulator_value = 0.25f};
    const psc_initializer_t inits[] = {
        {PSC_INIT_UNIFORM, -0.05f, 0.05f}, {PSC_INIT_NORMAL, 0.5f, 2.0f}, {PSC_INIT_ZEROS, 0, 0}};
    for (size_t k = 0; k < PSC_ARRAY_LEN(inits); k++) {
        /* part 1 of 2 (mod): the initial value is the global id's */
        sparse_table_cfg_t c = cfg_of(PSC_TABLE_MAX_ROWS, 2, 1, PSC_PART_MOD, 5, ada);
        c.init = inits[k];
        sparse_table_t *t = make(&c);
        const int64_t ids[] = {3, (int64_t)1 << 39 | 1, 7, 3, PSC_TABLE_MAX_ROWS - 1};
        enum { N = PSC_ARRAY_LEN(ids) };
        float out[N * 5], want[5];
        pull(t, ids, N, out);
        for (int i = 0; i < N; i++) {
            init_row(&c, ids[i], want);
            assert_memory_equal(out + 5 * i, want, sizeof want);
        }
        sparse_table_stats_t st;
        sparse_table_get_stats(t, &st);
        assert_int_equal(st.rows, 4);
        assert_int_equal(st.rows_pulled, N);
        assert_int_equal(st.rows_pushed, 0);
        assert_int_equal(st.version, 0);
        /* records: t = 0, the values, the accumulator at its initial value */
        rows_t r = export_rows(t, 0, 1, NULL);
        assert_int_equal(r.n, 4);
        for (size_t i = 0; i < r.n; i++) {
            assert_int_equal(rec_t(r.recs + i * r.len), 0);
            init_row(&c, r.ids[i], want);
            for (int e = 0; e < 5; e++) {
                assert_true(rec_float(r.recs + i * r.len, (size_t)e) == want[e]);
                assert_true(rec_float(r.recs + i * r.len, 5 + (size_t)e) == 0.25f);
            }
        }
        rows_free(&r);
        /* pulling again changes nothing */
        float again[N * 5];
        pull(t, ids, N, again);
        assert_memory_equal(out, again, sizeof out);
        sparse_table_destroy(t);
    }
}

/* ---- a push and a pull in one pass ---- */

/* sparse_table_push_pull against sparse_table_push then sparse_table_pull on
 * a twin table: the same rows out and the same records, bit for bit, with
 * the pulled ids sharing about a third of the pushed ones (the next batch's
 * share), a pulled id twice, rows new to both, an empty push, and admission
 * (a pull creates no row there). */
static void test_push_pull_fused(void **state)
{
    (void)state;
    const psc_optim_config_t opts[] = {
        {.kind = PSC_OPT_ADAM, .learning_rate = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .epsilon = 1e-7f},
        {.kind = PSC_OPT_FTRL, .learning_rate = 0.5f, .initial_accumulator_value = 0.1f, .learning_rate_power = -0.5f},
    };
    /* NP odd: the pull batch's arrays would start unaligned unless rounded up */
    enum { NP = 701, NL = 703, RANGE = 3000, DIM = 8 };
    int64_t *push_ids = malloc(NP * sizeof *push_ids), *pull_ids = malloc(NL * sizeof *pull_ids);
    float *g = malloc((size_t)NP * DIM * sizeof *g), *a = malloc((size_t)NL * DIM * sizeof *a),
          *b = malloc((size_t)NL * DIM * sizeof *b);
    for (int k = 0; k < 4; k++) {
        int dim = k % 2 ? 1 : DIM;
        sparse_table_cfg_t c = cfg_of(100000, 1, 0, PSC_PART_MOD, dim, opts[k % 2]);
        if (k >= 2) c.min_count = 2; /* admission */
        sparse_table_t *ta = make(&c), *tb = make(&c);
        uint64_t x = 0x9e3779b97f4a7c15ull + (uint64_t)k;
        for (int round = 0; round < 12; round++) {
            size_t np = round == 5 ? 0 : NP; /* an empty push */
            unsigned char used[RANGE] = {0};
            for (size_t i = 0; i < np; i++) { /* unique */
                int64_t id;
                do {
                    x = x * 6364136223846793005ull + 1442695040888963407ull;
                    id = (int64_t)((x >> 33) % RANGE);
                } while (used[id]);
                used[id] = 1;
                push_ids[i] = id;
            }
            for (size_t i = 0; i < NL; i++) {
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                pull_ids[i] = i < np / 3 ? push_ids[i * 3] : (int64_t)((x >> 33) % (RANGE + 500)); /* new rows too */
            }
            pull_ids[NL - 1] = pull_ids[0]; /* twice */
            for (size_t i = 0; i < np * (size_t)dim; i++)
                g[i] = 0.01f * (float)((int)((i * 7 + (size_t)round) % 11) - 5);
            unsigned char *ri, *rg, *rl;
            const void *pi = pack_ids(push_ids, np, &ri), *pg = pack_floats(g, np * (size_t)dim, &rg),
                       *pl = pack_ids(pull_ids, NL, &rl);
            assert_int_equal(sparse_table_push_pull(ta, pi, np, np ? pg : NULL, 0.01, pl, NL, a), 0);
            assert_int_equal(sparse_table_push(tb, pi, np, np ? pg : NULL, 0.01, NULL), 0);
            assert_int_equal(sparse_table_pull(tb, pl, NL, b), 0);
            assert_memory_equal(a, b, (size_t)NL * (size_t)dim * sizeof *a);
            free(ri);
            free(rg);
            free(rl);
        }
        sparse_table_stats_t sa, sb;
        sparse_table_get_stats(ta, &sa);
        sparse_table_get_stats(tb, &sb);
        assert_int_equal(sa.rows, sb.rows);
        assert_int_equal(sa.version, sb.version);
        assert_int_equal(sa.rows_pushed, sb.rows_pushed);
        assert_int_equal(sa.rows_pulled, sb.rows_pulled);
        if (k < 2) assert_true(sa.rows > RANGE); /* pulls created rows */
        rows_t ra = export_rows(ta, 0, 1, NULL), rb = export_rows(tb, 0, 1, NULL);
        assert_int_equal(ra.n, rb.n);
        assert_int_equal(ra.len, rb.len);
        assert_memory_equal(ra.ids, rb.ids, ra.n * sizeof *ra.ids);
        assert_memory_equal(ra.recs, rb.recs, ra.n * ra.len);
        rows_free(&ra);
        rows_free(&rb);
        sparse_table_destroy(ta);
        sparse_table_destroy(tb);
    }
    free(push_ids);
    free(pull_ids);
    free(g);
    free(a);
    free(b);
}

/* ---- threads ---- */

/* CT_FRESH: each push's rows only its thread creates. 4 x 400 x 256 of them
 * take the part past its first 4 MiB and its shards' indexes to 64 KiB: the
 * threads carve record blocks and index arrays from the shared slabs at
 * once (sparse_mem.c). */
#define CT_THREADS 4
#define CT_PUSHES 400
#define CT_SHARED 64
#define CT_FRESH 256
#define CT_DIM 8

typedef struct ct_worker {
    sparse_table_t *t;
    int k;
    uint32_t counts[CT_SHARED];
    uint64_t pushed;
    char bad[160]; /* the first problem seen (cmocka's asserts belong to the main thread) */
} ct_worker_t;

static atomic_int ct_done;

static void *ct_push_main(void *arg)
{
    ct_worker_t *w = arg;
    uint32_t seed = 12345u + 977u * (uint32_t)w->k;
    enum { MAXN = CT_SHARED + CT_FRESH };
    int64_t ids[MAXN];
    unsigned char rawi[8 * MAXN + 1], rawg[4 * MAXN * CT_DIM + 3];
    float g = 1.0f, out[MAXN * CT_DIM];
    for (int i = 0; i < MAXN * CT_DIM; i++) memcpy(rawg + 3 + 4 * i, &g, 4);
    for (int p = 0; p < CT_PUSHES && !w->bad[0]; p++) {
        int n = 0;
        for (int j = 0; j < CT_SHARED; j++) {
            seed = seed * 1664525u + 1013904223u;
            if (seed >> 31) {
                ids[n++] = j;
                w->counts[j]++;
            }
        }
        for (int f = 0; f < CT_FRESH; f++) /* rows only this thread creates: index growth under contention */
            ids[n++] = ((int64_t)(w->k + 1) << 32) + (int64_t)p * CT_FRESH + f;
        memcpy(rawi + 1, ids, 8 * (size_t)n);
        float *o = p % 8 == 0 ? out : NULL;
        int rc = sparse_table_push(w->t, rawi + 1, (size_t)n, rawg + 3, 1.0, o);
        if (rc) snprintf(w->bad, sizeof w->bad, "push %d: %s", p, psc_strerror(rc));
        for (int i = 0; o && i < n * CT_DIM; i++)
            if (!(o[i] <= -1.0f && o[i] == floorf(o[i])))
                snprintf(w->bad, sizeof w->bad, "push-pull %d: row %d = %g", p, i / CT_DIM, (double)o[i]);
        w->pushed += (uint64_t)n;
    }
    return NULL;
}

/* Pulls the shared rows until the pushers finish: every value is a whole
 * number of updates and never goes back up. */
static void *ct_pull_main(void *arg)
{
    ct_worker_t *w = arg;
    int64_t ids[CT_SHARED];
    unsigned char rawi[8 * CT_SHARED + 1];
    float out[CT_SHARED * CT_DIM], last[CT_SHARED * CT_DIM];
    for (int j = 0; j < CT_SHARED; j++) ids[j] = j;
    memcpy(rawi + 1, ids, sizeof ids);
    for (size_t i = 0; i < PSC_ARRAY_LEN(last); i++) last[i] = 0.0f;
    while (!atomic_load(&ct_done) && !w->bad[0]) {
        int rc = sparse_table_pull(w->t, rawi + 1, CT_SHARED, out);
        if (rc) snprintf(w->bad, sizeof w->bad, "pull: %s", psc_strerror(rc));
        for (int i = 0; i < CT_SHARED * CT_DIM; i++) {
            if (!(out[i] == floorf(out[i]) && out[i] <= last[i]))
                snprintf(w->bad, sizeof w->bad, "pull: row %d = %g after %g", i / CT_DIM, (double)out[i],
                         (double)last[i]);
            last[i] = out[i];
        }
        size_t n; /* a page while rows are created and pushed: ascending, whole rows */
        int more;
        sparse_table_scan(w->t, 7, 16, ids, out, &n, &more);
        for (size_t i = 0; i < n * CT_DIM; i++)
            if (ids[i / CT_DIM] <= 7 || (i >= CT_DIM && ids[i / CT_DIM] <= ids[i / CT_DIM - 1]) || out[i] > 0.0f)
                snprintf(w->bad, sizeof w->bad, "scan: row %zu id %lld", i / CT_DIM, (long long)ids[i / CT_DIM]);
    }
    return NULL;
}

static void test_concurrent_pushes(void **state)
{
    (void)state;
    sparse_table_cfg_t c = cfg_of(PSC_TABLE_MAX_ROWS, 1, 0, PSC_PART_MOD, CT_DIM, sgd());
    c.init.kind = PSC_INIT_ZEROS;
    sparse_table_t *t = make(&c);
    static ct_worker_t w[CT_THREADS + 1]; /* the last one pulls */
    pthread_t th[CT_THREADS + 1];
    atomic_store(&ct_done, 0);
    for (int k = 0; k <= CT_THREADS; k++) {
        memset(&w[k], 0, sizeof w[k]);
        w[k].t = t;
        w[k].k = k;
        assert_int_equal(pthread_create(&th[k], NULL, k < CT_THREADS ? ct_push_main : ct_pull_main, &w[k]), 0);
    }
    for (int k = 0; k < CT_THREADS; k++) pthread_join(th[k], NULL);
    atomic_store(&ct_done, 1);
    pthread_join(th[CT_THREADS], NULL);
    for (int k = 0; k <= CT_THREADS; k++)
        if (w[k].bad[0]) fail_msg("thread %d: %s", k, w[k].bad);
    int64_t ids[CT_SHARED];
    float out[CT_SHARED * CT_DIM];
    uint64_t pushed = 0, touched = 0;
    for (int j = 0; j < CT_SHARED; j++) ids[j] = j;
    pull(t, ids, CT_SHARED, out);
    rows_t r = export_rows(t, 0, 1, NULL);
    for (int j = 0; j < CT_SHARED; j++) {
        uint32_t n = 0;
        for (int k = 0; k < CT_THREADS; k++) n += w[k].counts[j];
        touched += n > 0;
        for (int e = 0; e < CT_DIM; e++)
            if (out[j * CT_DIM + e] != -(float)n)
                fail_msg("row %d: %g after %u pushes", j, (double)out[j * CT_DIM + e], n);
        assert_int_equal(rec_t(rows_find(&r, j)), n);
    }
    assert_int_equal(r.n, CT_SHARED + CT_THREADS * CT_PUSHES * CT_FRESH); /* the puller created untouched ones */
    for (size_t i = CT_SHARED; i < r.n; i++) {
        assert_int_equal(rec_t(r.recs + i * r.len), 1);
        assert_true(rec_float(r.recs + i * r.len, 0) == -1.0f);
    }
    rows_free(&r);
    for (int k = 0; k < CT_THREADS; k++) pushed += w[k].pushed;
    sparse_table_stats_t st;
    sparse_table_get_stats(t, &st);
    assert_int_equal(st.rows_pushed, pushed);
    assert_int_equal(st.version, CT_THREADS * CT_PUSHES);
    assert_int_equal(st.rows, CT_SHARED + CT_THREADS * CT_PUSHES * CT_FRESH);
    assert_true(touched > CT_SHARED / 2);
    sparse_table_destroy(t);
}

/* ---- export and put ---- */

static void expect_ids(const rows_t *r, int sorted, const int64_t *want, size_t n)
{
    if (r->n != n) fail_msg("export gave %zu rows, want %zu", r->n, n);
    int64_t *got = malloc((n ? n : 1) * sizeof *got);
    if (n) memcpy(got, r->ids, n * sizeof *got);
    if (!sorted) qsort(got, n, sizeof *got, cmp_i64);
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i]) fail_msg("export row %zu: id %lld, want %lld", i, (long long)got[i], (long long)want[i]);
    free(got);
}

static void test_export_incremental(void **state)
{
    (void)state;
    psc_optim_config_t adam = {.kind = PSC_OPT_ADAM, .beta1 = 0.9f, .beta2 = 0.999f, .epsilon = 1e-8f};
    sparse_table_cfg_t c = cfg_of(1 << 20, 1, 0, PSC_PART_MOD, 4, adam);
    sparse_table_t *t = make(&c);
    const int64_t a[] = {50, 10, 30};
    float out[4 * 4], g[4 * 4] = {1, 2, 3, 4};
    pull(t, a, 3, out);
    uint64_t m1, m2, m3, m4;
    rows_t r = export_rows(t, 0, 1, &m1);
    expect_ids(&r, 1, (const int64_t[]){10, 30, 50}, 3);
    rows_free(&r);
    assert_true(m1 >= 1);
    r = export_rows(t, m1, 0, &m2); /* nothing changed since m1 */
    expect_ids(&r, 0, NULL, 0);
    rows_free(&r);
    assert_true(m2 > m1);
    /* a push changes 30, a pull creates 20 (and only reads 10) */
    push(t, (const int64_t[]){30}, 1, g, 0.1, NULL);
    pull(t, (const int64_t[]){20, 10}, 2, out);
    r = export_rows(t, m2, 1, &m3);
    expect_ids(&r, 1, (const int64_t[]){20, 30}, 2);
    rows_free(&r);
    r = export_rows(t, m2, 0, &m4); /* the same since again, unsorted: the same rows */
    expect_ids(&r, 0, (const int64_t[]){20, 30}, 2);
    rows_free(&r);
    assert_true(m4 > m3 && m3 > m2);
    r = export_rows(t, 0, 0, NULL);
    expect_ids(&r, 0, (const int64_t[]){10, 20, 30, 50}, 4);
    rows_free(&r);
    /* emit's error stops the export and is returned; the epoch stays */
    rows_t stop = {.stop_after = 2};
    uint64_t mark = 12345;
    assert_int_equal(sparse_table_export(t, 0, 1, rows_emit, &stop, &mark), 7);
    assert_int_equal(stop.n, 1);
    assert_int_equal(mark, 12345);
    rows_free(&stop);
    /* many rows: strictly ascending, all there */
    enum { M = 3000 };
    int64_t *ids = malloc(M * sizeof *ids);
    float *many = malloc(M * 4 * sizeof *many);
    for (int i = 0; i < M; i++) ids[i] = (int64_t)((uint64_t)(i + 1) * 2654435761u % (1u << 20));
    pull(t, ids, M, many);
    r = export_rows(t, 0, 1, NULL);
    sparse_table_stats_t st;
    sparse_table_get_stats(t, &st);
    assert_int_equal(r.n, st.rows);
    for (size_t i = 1; i < r.n; i++) assert_true(r.ids[i - 1] < r.ids[i]);
    rows_free(&r);
    free(ids);
    free(many);
    sparse_table_destroy(t);
}

static void expect_put(sparse_table_t *t, int64_t id, const void *rec, size_t len, int want, const char *needle)
{
    char err[256] = "";
    int rc = sparse_table_put(t, id, rec, len, err, sizeof err);
    if (rc != want) fail_msg("put id %lld: rc %d (%s), want %d", (long long)id, rc, err, want);
    if (needle && !strstr(err, needle)) fail_msg("put id %lld: \"%s\" lacks \"%s\"", (long long)id, err, needle);
}

static void test_put_round_trip(void **state)
{
    (void)state;
    psc_optim_config_t adam = {.kind = PSC_OPT_ADAM, .beta1 = 0.9f, .beta2 = 0.999f, .epsilon = 1e-8f};
    sparse_table_cfg_t c = cfg_of(1000, 2, 0, PSC_PART_MOD, 6, adam); /* even ids */
    sparse_table_t *t1 = make(&c), *t2 = make(&c);
    int64_t ids[50];
    float g[50 * 6];
    for (int s = 0; s < 3; s++) {
        int n = 0;
        for (int i = 0; i < 50; i++)
            if ((i + s) % 3) ids[n++] = 2 * i;
        for (int i = 0; i < n * 6; i++) g[i] = (float)sin(i + 10 * s);
        push(t1, ids, (size_t)n, g, 0.01, NULL);
    }
    rows_t r1 = export_rows(t1, 0, 0, NULL);
    assert_true(r1.n == 50);
    for (size_t i = 0; i < r1.n; i++) expect_put(t2, r1.ids[i], r1.recs + i * r1.len, r1.len, 0, NULL);
    rows_t a = export_rows(t1, 0, 1, NULL), b = export_rows(t2, 0, 1, NULL);
    assert_int_equal(a.n, b.n);
    assert_memory_equal(a.ids, b.ids, a.n * sizeof *a.ids);
    assert_memory_equal(a.recs, b.recs, a.n * a.len);
    /* bad records change nothing */
    size_t len = sparse_table_record_bytes(t2);
    unsigned char *rec = malloc(len + 4);
    memcpy(rec, a.recs, len);
    expect_put(t2, 0, rec, len - 1, PSC_ECORRUPT, "bytes");
    expect_put(t2, 0, rec, len + 4, PSC_ECORRUPT, "bytes");
    expect_put(t2, 1, rec, len, PSC_EINVAL, "part");
    expect_put(t2, 1000, rec, len, PSC_EINVAL, "outside");
    expect_put(t2, -2, rec, len, PSC_EINVAL, "outside");
    float nan = NAN, inf = INFINITY;
    memcpy(rec + 8 + 4 * 2, &nan, 4);
    expect_put(t2, 0, rec, len, PSC_ECORRUPT, "value");
    memcpy(rec, a.recs, len);
    memcpy(rec + len - 4, &inf, 4);
    expect_put(t2, 0, rec, len, PSC_ECORRUPT, "slot");
    memcpy(rec, a.recs, len);
    int64_t neg = -1;
    memcpy(rec, &neg, 8);
    expect_put(t2, 0, rec, len, PSC_ECORRUPT, "t = -1");
    rows_t b2 = export_rows(t2, 0, 1, NULL);
    assert_int_equal(b2.n, b.n);
    assert_memory_equal(b2.recs, b.recs, b.n * b.len);

    /* a put overwrites and counts as a change for the next export */
    uint64_t mark;
    rows_free(&b2);
    b2 = export_rows(t2, 0, 1, &mark);
    memcpy(rec, a.recs, len);
    float v = 42.0f;
    memcpy(rec + 8, &v, 4);
    expect_put(t2, a.ids[0], rec, len, 0, NULL);
    expect_put(t2, 998, rec, len, 0, NULL); /* a new row */
    float out[2 * 6];
    pull(t2, (const int64_t[]){a.ids[0], 998}, 2, out);
    assert_true(out[0] == 42.0f && out[6] == 42.0f);
    rows_t inc = export_rows(t2, mark, 1, NULL);
    expect_ids(&inc, 1, (const int64_t[]){a.ids[0], 998}, 2);
    rows_free(&inc);
    free(rec);
    rows_free(&r1);
    rows_free(&a);
    rows_free(&b);
    rows_free(&b2);
    sparse_table_destroy(t1);
    sparse_table_destroy(t2);
}

/* scan: pages in ascending id order, all rows once, values as pulled */
static void test_scan_pages(void **state)
{
    (void)state;
    sparse_table_cfg_t c = cfg_of(1 << 30, 1, 0, PSC_PART_MOD, 3, sgd());
    sparse_table_t *t = make(&c);
    enum { M = 1000, PAGE = 97 };
    int64_t *ids = malloc(M * sizeof *ids), got[PAGE], last = -1;
    float *vals = malloc(M * 3 * sizeof *vals), page[PAGE * 3], row[3];
    for (int i = 0; i < M; i++) ids[i] = (int64_t)((uint64_t)(i + 7) * 2654435761u % (1u << 30));
    pull(t, ids, M, vals);
    size_t n, total = 0;
    int more = 1;
    while (more) {
        sparse_table_scan(t, last, PAGE, got, page, &n, &more);
        assert_true(n == PAGE || !more);
        for (size_t i = 0; i < n; i++) {
            assert_true(got[i] > last);
            last = got[i];
            init_row(&c, got[i], row);
            assert_memory_equal(page + 3 * i, row, sizeof row);
        }
        total += n;
    }
    sparse_table_stats_t st;
    sparse_table_get_stats(t, &st);
    assert_int_equal(total, st.rows);
    sparse_table_scan(t, -1, 0, got, page, &n, &more);
    assert_true(n == 0 && more == 1);
    sparse_table_scan(t, last, PAGE, got, page, &n, &more);
    assert_true(n == 0 && more == 0);
    sparse_table_get_stats(t, &st);
    assert_int_equal(total, st.rows); /* a scan creates nothing */
    free(ids);
    free(vals);
    sparse_table_destroy(t);
}

/* ---- memory ---- */

/* The fixed overhead stats.bytes may carry beyond 2x the records (see
 * sparse_table.c): at most one partly used 16 KiB record block per shard
 * (4 MiB) and one partly used 2 MiB slab, the shard and table structs (~65
 * KiB), block pointer arrays. MEM_ROWS rows pass the part's first 4 MiB:
 * their records are in malloc'd blocks and in slabs both. */
#define FIXED_OVERHEAD ((uint64_t)7 << 20)
#define MEM_ROWS 100000

/* ThreadSanitizer's shadow memory makes the RSS of touched memory several
 * times its size: there only the creation's RSS is checked. */
#if defined(__SANITIZE_THREAD__)
#define RSS_OF_ROWS_CHECKED 0
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RSS_OF_ROWS_CHECKED 0
#endif
#endif
#ifndef RSS_OF_ROWS_CHECKED
#define RSS_OF_ROWS_CHECKED 1
#endif

static uint64_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, resident = 0;
    if (!f) return 0;
    if (fscanf(f, "%lu %lu", &size, &resident) != 2) resident = 0;
    fclose(f);
    return (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

static void test_memory(void **state)
{
    (void)state;
    psc_optim_config_t ada = {.kind = PSC_OPT_ADAGRAD, .initial_accumulator_value = 0.1f};
    sparse_table_cfg_t c = cfg_of(PSC_TABLE_MAX_ROWS, 1, 0, PSC_PART_MOD, 16, ada);
    int64_t *ids = malloc(MEM_ROWS * sizeof *ids);
    float *out = malloc((size_t)MEM_ROWS * 16 * sizeof *out);
    assert_non_null(ids);
    assert_non_null(out);
    for (int i = 0; i < MEM_ROWS; i++) ids[i] = (int64_t)i * (PSC_TABLE_MAX_ROWS / MEM_ROWS) + (i % 7);
    memset(out, 0, (size_t)MEM_ROWS * 16 * sizeof *out);
    unsigned char *raw;
    const void *packed = pack_ids(ids, MEM_ROWS, &raw);

    uint64_t rss0 = rss_bytes();
    sparse_table_t *t = make(&c);
    uint64_t rss1 = rss_bytes();
    sparse_table_stats_t st;
    sparse_table_get_stats(t, &st);
    /* a 2^40-row table costs its fixed structs only */
    assert_true(st.bytes < 80 * 1024);
    if (rss0 && rss1 > rss0 + (1u << 20))
        fail_msg("creating a 2^40-row table took %llu KiB of RSS", (unsigned long long)((rss1 - rss0) >> 10));

    assert_int_equal(sparse_table_pull(t, packed, MEM_ROWS, out), 0); /* one call: several batches */
    uint64_t rss2 = rss_bytes();
    sparse_table_get_stats(t, &st);
    size_t rec = sparse_table_record_bytes(t);
    assert_int_equal(rec, 8 + 4 * 16 * 2);
    assert_int_equal(st.rows, MEM_ROWS);
    assert_true(st.bytes >= (uint64_t)MEM_ROWS * rec);
    if (st.bytes > 2 * (uint64_t)MEM_ROWS * rec + FIXED_OVERHEAD)
        fail_msg("%d rows of %zu bytes hold %llu bytes (limit %llu)", MEM_ROWS, rec, (unsigned long long)st.bytes,
                 (unsigned long long)(2 * (uint64_t)MEM_ROWS * rec + FIXED_OVERHEAD));
    /* the process grew by about what the table says it holds (freed index
     * arrays may stay resident: up to the live index again) */
    if (RSS_OF_ROWS_CHECKED && rss0 && rss2 > rss1 + 2 * st.bytes + (4u << 20))
        fail_msg("touching %d rows grew RSS by %llu KiB, stats.bytes %llu KiB", MEM_ROWS,
                 (unsigned long long)((rss2 - rss1) >> 10), (unsigned long long)(st.bytes >> 10));
    float want[16];
    for (int i = 0; i < MEM_ROWS; i += 9973) {
        init_row(&c, ids[i], want);
        assert_memory_equal(out + (size_t)i * 16, want, sizeof want);
    }
    /* a push of more ids than one batch holds */
    float *g = out;
    for (size_t i = 0; i < (size_t)MEM_ROWS * 16; i++) g[i] = 1.0f;
    unsigned char *rawg;
    const void *pg = pack_floats(g, (size_t)MEM_ROWS * 16, &rawg);
    assert_int_equal(sparse_table_push(t, packed, MEM_ROWS, pg, 0.5, out), 0);
    for (int i = 0; i < MEM_ROWS; i += 9973) {
        init_row(&c, ids[i], want);
        for (int e = 0; e < 16; e++) /* Adagrad: w - 0.5 * 1 / sqrt(0.1 + 1) */
            assert_true(fabs(out[(size_t)i * 16 + e] - (want[e] - 0.5 / sqrt(1.1))) < 1e-6);
    }
    sparse_table_get_stats(t, &st);
    assert_int_equal(st.rows, MEM_ROWS);
    assert_int_equal(st.rows_pushed, MEM_ROWS);
    free(rawg);
    free(raw);
    free(ids);
    free(out);
    sparse_table_destroy(t);
}

/* A part of ~10^6 rows (sparse_mem.c): its record blocks pass from malloc
 * to huge-page slabs at 4 MiB, and its shards' indexes grow through the
 * 64 KiB class to 128 KiB arrays (8,192 entries: every shard's ~4,000 rows
 * are past 0.7 of 4,096 and under 0.7 of 8,192). Every row reads and
 * updates its own values, wherever it lives; stats.bytes holds the records
 * and the live index arrays, not the slabs of the class the shards left
 * (each unmapped with its last array: kept, they would add 16 MiB). */
#define SLAB_ROWS 1024000
#define SLAB_BATCH 65536

static void test_memory_slabs(void **state)
{
    (void)state;
    sparse_table_cfg_t c = cfg_of(PSC_TABLE_MAX_ROWS, 1, 0, PSC_PART_MOD, 1, sgd());
    sparse_table_t *t = make(&c);
    assert_int_equal(sparse_table_record_bytes(t), 12); /* stride 16 */
    int64_t *ids = malloc(SLAB_ROWS * sizeof *ids);
    float *out = malloc(SLAB_ROWS * sizeof *out), *g = malloc(SLAB_BATCH * sizeof *g);
    assert_true(ids && out && g);
    for (size_t i = 0; i < SLAB_ROWS; i++) ids[i] = (int64_t)(i * 1048573 + 3);
    for (size_t i = 0; i < SLAB_BATCH; i++) g[i] = 1.0f;
    for (size_t at = 0; at < SLAB_ROWS; at += SLAB_BATCH) { /* created by pulls */
        size_t n = PSC_MIN((size_t)SLAB_BATCH, SLAB_ROWS - at);
        assert_int_equal(sparse_table_pull(t, ids + at, n, out + at), 0);
    }
    for (size_t at = 0; at < SLAB_ROWS; at += SLAB_BATCH) { /* w - 0.1 * 1 */
        size_t n = PSC_MIN((size_t)SLAB_BATCH, SLAB_ROWS - at);
        assert_int_equal(sparse_table_push(t, ids + at, n, g, 0.1, NULL), 0);
    }
    float *again = malloc(SLAB_ROWS * sizeof *again);
    assert_non_null(again);
    assert_int_equal(sparse_table_read(t, ids, SLAB_ROWS, again), 0);
    for (size_t i = 0; i < SLAB_ROWS; i++) {
        float want;
        init_row(&c, ids[i], &want);
        if (out[i] != want || fabsf(again[i] - (want - 0.1f)) > 1e-6f)
            fail_msg("row %" PRId64 ": pulled %g, then %g after a push; want %g, then %g", ids[i], out[i], again[i],
                     want, want - 0.1f);
    }
    sparse_table_stats_t st;
    sparse_table_get_stats(t, &st);
    assert_int_equal(st.rows, SLAB_ROWS);
    uint64_t floor = (uint64_t)SLAB_ROWS * 16 + (uint64_t)SPARSE_TABLE_SHARDS * 8192 * 16;
    if (st.bytes < floor || st.bytes > floor + ((uint64_t)8 << 20))
        fail_msg("%d rows hold %" PRIu64 " bytes; records and indexes are %" PRIu64, SLAB_ROWS, (uint64_t)st.bytes,
                 floor);
    free(again);
    free(g);
    free(out);
    free(ids);
    sparse_table_destroy(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_checks),
        cmocka_unit_test(test_check_ids_mod),
        cmocka_unit_test(test_check_ids_div),
        cmocka_unit_test(test_check_grads),
        cmocka_unit_test(test_rows_appear_initialized),
        cmocka_unit_test(test_read_creates_no_row),
        cmocka_unit_test(test_read_big_request),
        cmocka_unit_test(test_push_pull_fused),
        cmocka_unit_test(test_concurrent_pushes),
        cmocka_unit_test(test_export_incremental),
        cmocka_unit_test(test_put_round_trip),
        cmocka_unit_test(test_scan_pages),
        cmocka_unit_test(test_memory),
        cmocka_unit_test(test_memory_slabs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
