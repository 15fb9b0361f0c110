/* test_placement — round_robin, greedy_bytes and axis-0 partitioning against
 * examples worked by hand in the comments, plus the invariant that the pieces of
 * every variable cover it exactly once, in order. Sparse tables: one part per PS
 * in round-robin turns after the pieces, by hand and for many cluster sizes.
 */
#include "placement.h"
#include "psc.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static psc_var_desc_t step_var(void)
{
    psc_var_desc_t v;
    memset(&v, 0, sizeof v);
    snprintf(v.name, sizeof v.name, "global_step");
    v.numel = 1;
    v.is_step = 1;
    v.layer = -1;
    return v;
}

/* A float variable of the given shape (rank = number of dims up to a 0). */
static psc_var_desc_t float_var(const char *name, int layer, int64_t d0, int64_t d1, int64_t d2, int64_t d3)
{
    psc_var_desc_t v;
    memset(&v, 0, sizeof v);
    snprintf(v.name, sizeof v.name, "%s", name);
    int64_t dims[4] = {d0, d1, d2, d3};
    v.numel = 1;
    for (int i = 0; i < 4 && dims[i] > 0; i++) {
        v.shape[i] = dims[i];
        v.numel *= dims[i];
        v.rank = i + 1;
    }
    v.layer = layer;
    return v;
}

/* The MLP of deploy/jobs/mlp.json: flatten, dense 256, dense 128, dense 10. */
static int mlp_vars(psc_var_desc_t *v)
{
    v[0] = step_var();
    v[1] = float_var("dense/kernel", 1, 784, 256, 0, 0);  /* 200704 floats = 802816 bytes */
    v[2] = float_var("dense/bias", 1, 256, 0, 0, 0);      /* 1024 bytes */
    v[3] = float_var("dense_1/kernel", 2, 256, 128, 0, 0); /* 131072 bytes */
    v[4] = float_var("dense_1/bias", 2, 128, 0, 0, 0);    /* 512 bytes */
    v[5] = float_var("dense_2/kernel", 3, 128, 10, 0, 0); /* 5120 bytes */
    v[6] = float_var("dense_2/bias", 3, 10, 0, 0, 0);     /* 40 bytes */
    return 7;
}

static psc_placed_var_t *place_ok(const psc_var_desc_t *vars, int nvars, int num_ps,
                                  enum psc_placement_strategy strategy, uint64_t msb, int *n)
{
    psc_placed_var_t *p = NULL;
    char err[256] = "";
    int rc = psc_place(vars, nvars, num_ps, strategy, msb, &p, n, err, sizeof err);
    if (rc) fail_msg("psc_place: %d %s", rc, err);
    assert_non_null(p);
    return p;
}

/* Every variable's pieces are consecutive, ordered, and tile its rows and elements. */
static void check_cover(const psc_var_desc_t *vars, int nvars, const psc_placed_var_t *p, int n, int num_ps)
{
    int k = 0;
    for (int i = 0; i < nvars; i++) {
        assert_true(k < n);
        int parts = p[k].num_parts;
        int64_t row = 0, elem = 0;
        for (int j = 0; j < parts; j++, k++) {
            assert_int_equal(p[k].var_index, i);
            assert_int_equal(p[k].part, j);
            assert_int_equal(p[k].num_parts, parts);
            assert_int_equal(p[k].rank, vars[i].rank);
            assert_int_equal(p[k].is_step, vars[i].is_step);
            assert_true(p[k].ps >= 0 && p[k].ps < num_ps);
            assert_int_equal(p[k].elem_offset, elem);
            elem += p[k].numel;
            if (vars[i].rank > 0) {
                assert_int_equal(p[k].row_begin, row);
                assert_int_equal(p[k].shape[0], p[k].rows);
                for (int d = 1; d < vars[i].rank; d++) assert_int_equal(p[k].shape[d], vars[i].shape[d]);
                row += p[k].rows;
            }
        }
        assert_int_equal(elem, vars[i].numel);
        if (vars[i].rank > 0) assert_int_equal(row, vars[i].shape[0]);
    }
    assert_int_equal(k, n);
}

static void test_var_bytes(void **state)
{
    (void)state;
    psc_var_desc_t v[7];
    mlp_vars(v);
    assert_int_equal(psc_var_bytes(&v[0]), 8);
    assert_int_equal(psc_var_bytes(&v[1]), 802816);
    assert_int_equal(psc_var_bytes(&v[2]), 1024);
    assert_int_equal(psc_var_bytes(&v[6]), 40);
}

static void test_round_robin_mlp(void **state)
{
    (void)state;
    psc_var_desc_t v[7];
    int nv = mlp_vars(v), n;
    psc_placed_var_t *p = place_ok(v, nv, 2, PSC_PLACE_ROUND_ROBIN, 0, &n);
    assert_int_equal(n, 7);
    static const int want[7] = {0, 1, 0, 1, 0, 1, 0};
    for (int i = 0; i < 7; i++) {
        assert_int_equal(p[i].ps, want[i]);
        assert_string_equal(p[i].name, v[i].name);
        assert_int_equal(p[i].num_parts, 1);
        assert_int_equal(p[i].numel, v[i].numel);
    }
    /* global_step: rank 0, one "row", never cut. */
    assert_int_equal(p[0].rows, 1);
    assert_int_equal(p[0].is_step, 1);
    assert_int_equal(p[1].rows, 784);
    assert_int_equal(p[1].shape[1], 256);
    check_cover(v, nv, p, n, 2);
    free(p);

    /* 3 PS: 0,1,2,0,1,2,0. */
    p = place_ok(v, nv, 3, PSC_PLACE_ROUND_ROBIN, 0, &n);
    static const int want3[7] = {0, 1, 2, 0, 1, 2, 0};
    for (int i = 0; i < 7; i++) assert_int_equal(p[i].ps, want3[i]);
    free(p);
}

static void test_greedy_bytes_mlp(void **state)
{
    (void)state;
    psc_var_desc_t v[7];
    int nv = mlp_vars(v), n;
    /* 2 PS, loads [ps0, ps1] after each placement:
     *   global_step    8      -> ps0 (tie 0,0)         [8, 0]
     *   dense/kernel   802816 -> ps1 (0 < 8)           [8, 802816]
     *   dense/bias     1024   -> ps0                   [1032, 802816]
     *   dense_1/kernel 131072 -> ps0                   [132104, 802816]
     *   dense_1/bias   512    -> ps0                   [132616, 802816]
     *   dense_2/kernel 5120   -> ps0                   [137736, 802816]
     *   dense_2/bias   40     -> ps0                   [137776, 802816] */
    psc_placed_var_t *p = place_ok(v, nv, 2, PSC_PLACE_GREEDY_BYTES, 0, &n);
    assert_int_equal(n, 7);
    static const int want[7] = {0, 1, 0, 0, 0, 0, 0};
    for (int i = 0; i < 7; i++) assert_int_equal(p[i].ps, want[i]);
    free(p);

    /* 3 PS:
     *   global_step    8      -> ps0  [8, 0, 0]
     *   dense/kernel   802816 -> ps1  [8, 802816, 0]
     *   dense/bias     1024   -> ps2  [8, 802816, 1024]
     *   dense_1/kernel 131072 -> ps0  [131080, 802816, 1024]
     *   dense_1/bias   512    -> ps2  [131080, 802816, 1536]
     *   dense_2/kernel 5120   -> ps2  [131080, 802816, 6656]
     *   dense_2/bias   40     -> ps2  [131080, 802816, 6696] */
    p = place_ok(v, nv, 3, PSC_PLACE_GREEDY_BYTES, 0, &n);
    static const int want3[7] = {0, 1, 2, 0, 2, 2, 2};
    for (int i = 0; i < 7; i++) assert_int_equal(p[i].ps, want3[i]);
    check_cover(v, nv, p, n, 3);
    free(p);
}

static void test_greedy_ties_go_low(void **state)
{
    (void)state;
    /* global_step 8 bytes, then three 8-byte variables (2 floats) on 3 PS:
     * [8,0,0] -> a on ps1 (tie ps1/ps2) [8,8,0] -> b on ps2 [8,8,8] -> c on ps0 (three-way tie). */
    psc_var_desc_t v[4] = {step_var(), float_var("a", 0, 2, 0, 0, 0), float_var("b", 1, 2, 0, 0, 0),
                           float_var("c", 2, 2, 0, 0, 0)};
    int n;
    psc_placed_var_t *p = place_ok(v, 4, 3, PSC_PLACE_GREEDY_BYTES, 0, &n);
    assert_int_equal(p[0].ps, 0);
    assert_int_equal(p[1].ps, 1);
    assert_int_equal(p[2].ps, 2);
    assert_int_equal(p[3].ps, 0);
    free(p);
}

static void test_partition_10x4(void **state)
{
    (void)state;
    /* w (10,4) = 40 floats = 160 bytes, min_shard_bytes 40, 3 PS:
     * n = clamp(160/40 = 4, 1, min(3, 10)) = 3; rows 10/3 = 3 rest 1 -> 4, 3, 3;
     * row_begin 0, 4, 7; 4 floats a row -> elem_offset 0, 16, 28; numel 16, 12, 12. */
    psc_var_desc_t v[2] = {step_var(), float_var("w", 0, 10, 4, 0, 0)};
    int n;
    psc_placed_var_t *p = place_ok(v, 2, 3, PSC_PLACE_ROUND_ROBIN, 40, &n);
    assert_int_equal(n, 4);
    assert_string_equal(p[0].name, "global_step");
    assert_int_equal(p[0].num_parts, 1);
    static const char *const names[3] = {"w/part_0", "w/part_1", "w/part_2"};
    static const int64_t rows[3] = {4, 3, 3}, begin[3] = {0, 4, 7}, off[3] = {0, 16, 28}, numel[3] = {16, 12, 12};
    /* Each part takes its own round-robin turn: global_step ps0, parts ps1, ps2, ps0. */
    static const int ps_rr[3] = {1, 2, 0};
    for (int i = 0; i < 3; i++) {
        const psc_placed_var_t *q = &p[1 + i];
        assert_string_equal(q->name, names[i]);
        assert_int_equal(q->var_index, 1);
        assert_int_equal(q->part, i);
        assert_int_equal(q->num_parts, 3);
        assert_int_equal(q->rows, rows[i]);
        assert_int_equal(q->row_begin, begin[i]);
        assert_int_equal(q->rank, 2);
        assert_int_equal(q->shape[0], rows[i]);
        assert_int_equal(q->shape[1], 4);
        assert_int_equal(q->numel, numel[i]);
        assert_int_equal(q->elem_offset, off[i]);
        assert_int_equal(q->ps, ps_rr[i]);
    }
    check_cover(v, 2, p, n, 3);
    free(p);

    /* greedy: [8,0,0] -> part_0 (64 B) ps1 [8,64,0] -> part_1 (48 B) ps2 [8,64,48]
     * -> part_2 (48 B) ps0 [56,64,48]. */
    p = place_ok(v, 2, 3, PSC_PLACE_GREEDY_BYTES, 40, &n);
    assert_int_equal(n, 4);
    assert_int_equal(p[1].ps, 1);
    assert_int_equal(p[2].ps, 2);
    assert_int_equal(p[3].ps, 0);
    free(p);
}

static void test_partition_limits(void **state)
{
    (void)state;
    int n;
    psc_placed_var_t *p;

    /* min_shard_bytes 0 never partitions, however big. */
    psc_var_desc_t big[2] = {step_var(), float_var("big/kernel", 0, 1000, 1000, 0, 0)};
    p = place_ok(big, 2, 4, PSC_PLACE_ROUND_ROBIN, 0, &n);
    assert_int_equal(n, 2);
    assert_string_equal(p[1].name, "big/kernel");
    assert_int_equal(p[1].num_parts, 1);
    assert_int_equal(p[1].rows, 1000);
    free(p);

    /* 160 bytes < 2 * 81: stays whole and keeps its name. */
    psc_var_desc_t w = float_var("w", 0, 10, 4, 0, 0);
    p = place_ok(&w, 1, 3, PSC_PLACE_ROUND_ROBIN, 81, &n);
    assert_int_equal(n, 1);
    assert_string_equal(p[0].name, "w");
    assert_int_equal(p[0].num_parts, 1);
    assert_int_equal(p[0].rows, 10);
    assert_int_equal(p[0].numel, 40);
    free(p);
    /* Exactly 2 * 80: two parts of 5 rows. */
    p = place_ok(&w, 1, 3, PSC_PLACE_ROUND_ROBIN, 80, &n);
    assert_int_equal(n, 2);
    assert_string_equal(p[1].name, "w/part_1");
    assert_int_equal(p[0].rows, 5);
    assert_int_equal(p[1].rows, 5);
    assert_int_equal(p[1].elem_offset, 20);
    free(p);

    /* At most dim0 parts: (2,100) = 800 bytes, msb 10, 8 PS -> 2 parts of 1 row. */
    psc_var_desc_t wide = float_var("wide", 0, 2, 100, 0, 0);
    p = place_ok(&wide, 1, 8, PSC_PLACE_ROUND_ROBIN, 10, &n);
    assert_int_equal(n, 2);
    assert_int_equal(p[0].rows, 1);
    assert_int_equal(p[1].elem_offset, 100);
    free(p);

    /* global_step is never cut, even with min_shard_bytes 1. */
    psc_var_desc_t gs = step_var();
    p = place_ok(&gs, 1, 4, PSC_PLACE_ROUND_ROBIN, 1, &n);
    assert_int_equal(n, 1);
    assert_string_equal(p[0].name, "global_step");
    free(p);

    /* A bias (rank 1): (10) = 40 bytes, msb 8, 3 PS -> 3 parts of 4, 3, 3. */
    psc_var_desc_t b = float_var("dense/bias", 0, 10, 0, 0, 0);
    p = place_ok(&b, 1, 3, PSC_PLACE_ROUND_ROBIN, 8, &n);
    assert_int_equal(n, 3);
    assert_int_equal(p[0].shape[0], 4);
    assert_int_equal(p[2].shape[0], 3);
    assert_int_equal(p[2].elem_offset, 7);
    check_cover(&b, 1, p, n, 3);
    free(p);

    /* A conv kernel (5,5,1,32) = 800 floats = 3200 bytes, msb 1000, 4 PS:
     * n = 3, rows 2, 2, 1; a row is 5*1*32 = 160 floats -> offsets 0, 320, 640. */
    psc_var_desc_t k = float_var("conv2d/kernel", 0, 5, 5, 1, 32);
    p = place_ok(&k, 1, 4, PSC_PLACE_ROUND_ROBIN, 1000, &n);
    assert_int_equal(n, 3);
    assert_int_equal(p[0].rows, 2);
    assert_int_equal(p[1].rows, 2);
    assert_int_equal(p[2].rows, 1);
    assert_int_equal(p[1].elem_offset, 320);
    assert_int_equal(p[2].elem_offset, 640);
    assert_int_equal(p[2].numel, 160);
    assert_int_equal(p[2].shape[3], 32);
    assert_string_equal(p[2].name, "conv2d/kernel/part_2");
    free(p);
}

static void test_one_ps(void **state)
{
    (void)state;
    psc_var_desc_t v[7];
    int nv = mlp_vars(v), n;
    /* One PS: everything on ps 0, and at most one part per PS means no cutting. */
    for (int s = 0; s < 2; s++) {
        psc_placed_var_t *p = place_ok(v, nv, 1, (enum psc_placement_strategy)s, 16, &n);
        assert_int_equal(n, 7);
        for (int i = 0; i < n; i++) {
            assert_int_equal(p[i].ps, 0);
            assert_int_equal(p[i].num_parts, 1);
        }
        free(p);
    }
}

static void test_mlp_partitioned_cover(void **state)
{
    (void)state;
    psc_var_desc_t v[7];
    int nv = mlp_vars(v), n;
    /* msb 100000 on 4 PS: dense/kernel 802816 B -> 8 -> 4 parts of 196 rows;
     * dense_1/kernel 131072 B -> 1 part; the rest whole. 7 - 1 + 4 = 10 pieces. */
    psc_placed_var_t *p = place_ok(v, nv, 4, PSC_PLACE_GREEDY_BYTES, 100000, &n);
    assert_int_equal(n, 10);
    assert_string_equal(p[1].name, "dense/kernel/part_0");
    assert_string_equal(p[4].name, "dense/kernel/part_3");
    assert_int_equal(p[4].rows, 196);
    assert_string_equal(p[5].name, "dense/bias");
    check_cover(v, nv, p, n, 4);
    /* Pure function: the same call gives the same answer. */
    int n2;
    psc_placed_var_t *p2 = place_ok(v, nv, 4, PSC_PLACE_GREEDY_BYTES, 100000, &n2);
    assert_int_equal(n, n2);
    assert_memory_equal(p, p2, sizeof *p * (size_t)n);
    free(p2);
    free(p);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    psc_var_desc_t v[7];
    int nv = mlp_vars(v), n = 99;
    psc_placed_var_t *p = (psc_placed_var_t *)v; /* must be reset */
    char err[256] = "";
    assert_int_equal(psc_place(v, nv, 0, PSC_PLACE_ROUND_ROBIN, 0, &p, &n, err, sizeof err), PSC_EINVAL);
    assert_null(p);
    assert_int_equal(n, 0);
    assert_non_null(strstr(err, "ps"));
    assert_int_equal(psc_place(v, nv, -2, PSC_PLACE_GREEDY_BYTES, 0, &p, &n, err, sizeof err), PSC_EINVAL);
}

/* ---- sparse tables: one part per PS, round-robin turns after the model's pieces ---- */

static psc_table_spec_t table(const char *name, int64_t rows, enum psc_partition partition)
{
    psc_table_spec_t t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "%s", name);
    t.rows = rows;
    t.dim = 8;
    t.partition = partition;
    return t;
}

static psc_placed_table_t *place_tables_ok(const psc_table_spec_t *t, int n, int num_ps, int first_turn, int *nout)
{
    psc_placed_table_t *p = NULL;
    char err[256] = "";
    int rc = psc_place_tables(t, n, num_ps, first_turn, &p, nout, err, sizeof err);
    if (rc) fail_msg("psc_place_tables: %d %s", rc, err);
    assert_non_null(p);
    assert_int_equal(*nout, n * num_ps);
    return p;
}

static void test_tables_by_hand(void **state)
{
    (void)state;
    /* The MLP on 3 PS took turns 0..6; the tables' parts take turns 7, 8, ...:
     * table 0 (rows 10, mod) parts 0, 1, 2 -> ps 1, 2, 0 with 4, 3, 3 rows;
     * table 1 (rows 2 < 3 parts, div) turns 10, 11, 12 -> ps 1, 2, 0 with 1, 1, 0 rows. */
    psc_var_desc_t v[7];
    int nv = mlp_vars(v), npieces;
    free(place_ok(v, nv, 3, PSC_PLACE_ROUND_ROBIN, 0, &npieces));
    assert_int_equal(npieces, 7);
    psc_table_spec_t t[2] = {table("user", 10, PSC_PART_MOD), table("tiny", 2, PSC_PART_DIV)};
    int n;
    psc_placed_table_t *p = place_tables_ok(t, 2, 3, npieces, &n);
    static const int want[6][5] = {/* table, part, nparts, ps, rows */
                                   {0, 0, 3, 1, 4}, {0, 1, 3, 2, 3}, {0, 2, 3, 0, 3},
                                   {1, 0, 3, 1, 1}, {1, 1, 3, 2, 1}, {1, 2, 3, 0, 0}};
    for (int i = 0; i < 6; i++) {
        assert_int_equal(p[i].table, want[i][0]);
        assert_int_equal(p[i].part, want[i][1]);
        assert_int_equal(p[i].nparts, want[i][2]);
        assert_int_equal(p[i].ps, want[i][3]);
        assert_int_equal(p[i].rows, want[i][4]);
    }
    free(p);

    /* round_robin: the parts continue the pieces' counter (turn j -> ps j % num_ps) */
    int np;
    psc_placed_var_t *pv = place_ok(v, nv, 4, PSC_PLACE_ROUND_ROBIN, 100000, &np);
    p = place_tables_ok(t, 2, 4, np, &n);
    for (int i = 0; i < n; i++) assert_int_equal(p[i].ps, (np + i) % 4);
    assert_int_equal(pv[np - 1].ps, (np - 1) % 4);
    free(pv);
    free(p);

    /* one PS holds every part: the whole table */
    p = place_tables_ok(t, 2, 1, 5, &n);
    assert_int_equal(n, 2);
    assert_true(p[0].ps == 0 && p[0].rows == 10 && p[1].ps == 0 && p[1].rows == 2);
    free(p);
}

/* Each PS gets exactly one part of each table; parts cover the table's rows. */
static void test_tables_one_part_each(void **state)
{
    (void)state;
    psc_table_spec_t t[3] = {table("a", 1000003, PSC_PART_MOD), table("b", (int64_t)1 << 40, PSC_PART_DIV),
                             table("c", 3, PSC_PART_DIV)};
    static const int turns[] = {0, 1, 5, 7, 100, INT32_MAX};
    for (int num_ps = 1; num_ps <= 8; num_ps++)
        for (size_t f = 0; f < PSC_ARRAY_LEN(turns); f++) {
            int n;
            psc_placed_table_t *p = place_tables_ok(t, 3, num_ps, turns[f], &n);
            for (int ti = 0; ti < 3; ti++) {
                int held[8] = {0};
                int64_t rows = 0;
                for (int k = 0; k < num_ps; k++) {
                    const psc_placed_table_t *q = &p[ti * num_ps + k];
                    assert_int_equal(q->table, ti);
                    assert_int_equal(q->part, k);
                    assert_int_equal(q->nparts, num_ps);
                    assert_true(q->ps >= 0 && q->ps < num_ps);
                    assert_int_equal(q->ps, (int)(((int64_t)turns[f] + (int64_t)ti * num_ps + k) % num_ps));
                    held[q->ps]++;
                    rows += q->rows;
                }
                for (int ps = 0; ps < num_ps; ps++) assert_int_equal(held[ps], 1);
                assert_int_equal(rows, t[ti].rows);
            }
            free(p);
        }
}

static void test_tables_bad_arguments(void **state)
{
    (void)state;
    psc_table_spec_t t[1] = {table("a", 10, PSC_PART_MOD)};
    psc_placed_table_t *p = (psc_placed_table_t *)t; /* must be reset */
    int n = 99;
    char err[256] = "";
    assert_int_equal(psc_place_tables(t, 1, 0, 0, &p, &n, err, sizeof err), PSC_EINVAL);
    assert_null(p);
    assert_int_equal(n, 0);
    assert_non_null(strstr(err, "at least one ps"));
    assert_int_equal(psc_place_tables(t, -1, 2, 0, &p, &n, err, sizeof err), PSC_EINVAL);
    assert_int_equal(psc_place_tables(NULL, 1, 2, 0, &p, &n, err, sizeof err), PSC_EINVAL);
    assert_int_equal(psc_place_tables(t, 1, 2, -1, &p, &n, err, sizeof err), PSC_EINVAL);
    assert_non_null(strstr(err, "first turn"));
    /* no tables: nothing placed, still something to free */
    p = place_tables_ok(NULL, 0, 3, 0, &n);
    assert_int_equal(n, 0);
    free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_var_bytes),
        cmocka_unit_test(test_round_robin_mlp),
        cmocka_unit_test(test_greedy_bytes_mlp),
        cmocka_unit_test(test_greedy_ties_go_low),
        cmocka_unit_test(test_partition_10x4),
        cmocka_unit_test(test_partition_limits),
        cmocka_unit_test(test_one_ps),
        cmocka_unit_test(test_mlp_partitioned_cover),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_tables_by_hand),
        cmocka_unit_test(test_tables_one_part_each),
        cmocka_unit_test(test_tables_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
