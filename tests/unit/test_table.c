/* test_table — what every task computes the same way for sparse tables
 * (common/table.h).
 *
 * Partitions: both strategies against examples worked by hand (TF's mod and
 * div, rows < parts, ids near 2^40), psc_part_global inverting psc_part_of for
 * random ids, the parts' rows adding up. Initial rows: against an independent
 * evaluation of the formula of table.h on psc_philox4x32_10, the same whatever
 * path (number of PS, strategy, part, row) leads to the id, uniform in
 * [minval, maxval) with the right mean and variance, normal with the right
 * moments, zeros; different seeds, tables and ids (high word included) give
 * different rows. Learning-rate schedules against values computed by hand.
 */
#include "table.h"

#include "psc.h"
#include "rng.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define TWO40 ((int64_t)1 << 40)

static void expect_part(enum psc_partition p, int64_t rows, int n, int64_t id, int want_part, int64_t want_row)
{
    int part = -1;
    int64_t row = -1;
    psc_part_of(p, rows, n, id, &part, &row);
    if (part != want_part || row != want_row)
        fail_msg("%s rows %lld n %d id %lld: got part %d row %lld, want part %d row %lld", psc_partition_name(p),
                 (long long)rows, n, (long long)id, part, (long long)row, want_part, (long long)want_row);
    assert_int_equal(psc_part_global(p, rows, n, part, row), id);
}

static void test_partition_examples(void **state)
{
    (void)state;
    /* rows 10, 3 parts. mod: id p -> part p % 3, row p / 3; parts hold 4, 3, 3 ids. */
    expect_part(PSC_PART_MOD, 10, 3, 7, 1, 2);
    expect_part(PSC_PART_MOD, 10, 3, 9, 0, 3);
    expect_part(PSC_PART_MOD, 10, 3, 0, 0, 0);
    /* div: q = 3, r = 1: part 0 holds 0..3, part 1 4..6, part 2 7..9. */
    expect_part(PSC_PART_DIV, 10, 3, 0, 0, 0);
    expect_part(PSC_PART_DIV, 10, 3, 3, 0, 3);
    expect_part(PSC_PART_DIV, 10, 3, 4, 1, 0);
    expect_part(PSC_PART_DIV, 10, 3, 6, 1, 2);
    expect_part(PSC_PART_DIV, 10, 3, 7, 2, 0);
    expect_part(PSC_PART_DIV, 10, 3, 9, 2, 2);
    for (int s = 0; s < 2; s++) {
        assert_int_equal(psc_part_rows((enum psc_partition)s, 10, 3, 0), 4);
        assert_int_equal(psc_part_rows((enum psc_partition)s, 10, 3, 1), 3);
        assert_int_equal(psc_part_rows((enum psc_partition)s, 10, 3, 2), 3);
    }
    /* div without extras: rows 12, 4 parts of 3. */
    expect_part(PSC_PART_DIV, 12, 4, 5, 1, 2);
    expect_part(PSC_PART_DIV, 12, 4, 11, 3, 2);
    /* rows 2 < 3 parts: q = 0 (TF would divide by it); id p in part p, the last part empty. */
    expect_part(PSC_PART_DIV, 2, 3, 0, 0, 0);
    expect_part(PSC_PART_DIV, 2, 3, 1, 1, 0);
    expect_part(PSC_PART_MOD, 2, 3, 1, 1, 0);
    assert_int_equal(psc_part_rows(PSC_PART_DIV, 2, 3, 0), 1);
    assert_int_equal(psc_part_rows(PSC_PART_DIV, 2, 3, 1), 1);
    assert_int_equal(psc_part_rows(PSC_PART_DIV, 2, 3, 2), 0);
    /* one part: everything in part 0, row = id */
    expect_part(PSC_PART_DIV, 5, 1, 4, 0, 4);
    expect_part(PSC_PART_MOD, 5, 1, 4, 0, 4);

    /* rows 2^40, 3 parts: 2^40 = 3q + 1 with q = 366503875925. */
    const int64_t q = 366503875925;
    assert_int_equal(3 * q + 1, TWO40);
    expect_part(PSC_PART_DIV, TWO40, 3, q, 0, q); /* part 0 holds q + 1 ids: 0..q */
    expect_part(PSC_PART_DIV, TWO40, 3, q + 1, 1, 0);
    expect_part(PSC_PART_DIV, TWO40, 3, TWO40 - 1, 2, q - 1);
    expect_part(PSC_PART_MOD, TWO40, 3, TWO40 - 1, 0, q); /* 2^40 - 1 = 0 mod 3 */
    expect_part(PSC_PART_MOD, TWO40, 3, TWO40 - 2, 2, q - 1);
    assert_int_equal(psc_part_rows(PSC_PART_DIV, TWO40, 3, 0), q + 1);
    assert_int_equal(psc_part_rows(PSC_PART_DIV, TWO40, 3, 2), q);
}

/* For random ids and every (rows, n, strategy): the inverse holds, the row is in
 * its part, div parts are contiguous (part non-decreasing in id), the parts'
 * rows add up to rows and differ by at most one. */
static void test_partition_round_trip(void **state)
{
    (void)state;
    static const int64_t rows_list[] = {1, 2, 3, 7, 10, 64, 1000, 999983, TWO40 - 1, TWO40};
    psc_rng_t rng;
    psc_rng_seed(&rng, 7);
    for (size_t ri = 0; ri < PSC_ARRAY_LEN(rows_list); ri++) {
        int64_t rows = rows_list[ri];
        for (int n = 1; n <= 9; n++) {
            for (int s = 0; s < 2; s++) {
                enum psc_partition p = (enum psc_partition)s;
                int64_t sum = 0, lo = INT64_MAX, hi = 0;
                for (int k = 0; k < n; k++) {
                    int64_t r = psc_part_rows(p, rows, n, k);
                    sum += r;
                    lo = r < lo ? r : lo;
                    hi = r > hi ? r : hi;
                }
                assert_int_equal(sum, rows);
                assert_true(hi - lo <= 1);
                int prev_part = 0;
                int64_t prev_id = -1;
                for (int i = 0; i < 400; i++) {
                    /* small ids in order (contiguity), then random ones */
                    int64_t id = i < 200 ? (i < rows ? i : rows - 1) : (int64_t)psc_rng_below(&rng, (uint64_t)rows);
                    int part;
                    int64_t row;
                    psc_part_of(p, rows, n, id, &part, &row);
                    assert_true(part >= 0 && part < n);
                    assert_true(row >= 0 && row < psc_part_rows(p, rows, n, part));
                    assert_int_equal(psc_part_global(p, rows, n, part, row), id);
                    if (p == PSC_PART_DIV && i < 200 && id > prev_id) {
                        assert_true(part >= prev_part);
                        prev_part = part;
                        prev_id = id;
                    }
                }
            }
        }
    }
    /* every (part, row) of a small table is one id, each id once */
    for (int s = 0; s < 2; s++) {
        for (int n = 1; n <= 6; n++) {
            int64_t rows = 17;
            int seen[17] = {0};
            for (int k = 0; k < n; k++)
                for (int64_t r = 0; r < psc_part_rows((enum psc_partition)s, rows, n, k); r++)
                    seen[psc_part_global((enum psc_partition)s, rows, n, k, r)]++;
            for (int i = 0; i < 17; i++) assert_int_equal(seen[i], 1);
        }
    }
}

static void test_hash(void **state)
{
    (void)state;
    /* FNV-1a 32 test vectors */
    assert_int_equal(psc_table_hash(""), 0x811c9dc5u);
    assert_int_equal(psc_table_hash("a"), 0xe40c292cu);
    assert_int_equal(psc_table_hash("foobar"), 0xbf9cf968u);
    assert_int_not_equal(psc_table_hash("user_emb"), psc_table_hash("item_emb"));
}

/* Word e of the row's stream, from table.h's counter/key layout, computed here. */
static uint32_t ref_word(uint64_t seed, uint32_t th, int64_t id, int e)
{
    psc_philox4_t ctr = {{(uint32_t)(uint64_t)id, (uint32_t)((uint64_t)id >> 32), th, (uint32_t)(e / 4)}};
    return psc_philox4x32_10(ctr, (uint32_t)seed, (uint32_t)(seed >> 32)).v[e % 4];
}

static double ref_unit(uint32_t u) { return ((double)u + 0.5) / 4294967296.0; }

static void test_init_formula(void **state)
{
    (void)state;
    const uint64_t seed = 0x123456789abcdefull;
    const uint32_t th = psc_table_hash("user_emb");
    psc_initializer_t uni = {PSC_INIT_UNIFORM, -0.05f, 0.05f}, nor = {PSC_INIT_NORMAL, 0.5f, 2.0f};
    float row[13];
    for (int64_t id = 0; id < 50; id++) {
        int64_t gid = id * 1000003 + (id << 33); /* ids with a high word too */
        psc_table_row_init(&uni, seed, th, gid, row, 13);
        for (int e = 0; e < 13; e++) {
            float want = (float)((double)uni.a +
                                 ((double)uni.b - (double)uni.a) * ref_unit(ref_word(seed, th, gid, e)));
            if (row[e] != want) fail_msg("uniform id %lld e %d: %g != %g", (long long)gid, e, row[e], want);
        }
        psc_table_row_init(&nor, seed, th, gid, row, 13);
        for (int e = 0; e < 13; e++) {
            int k = e / 2;
            double r = sqrt(-2.0 * log(ref_unit(ref_word(seed, th, gid, 2 * k))));
            double th2 = 2.0 * M_PI * ref_unit(ref_word(seed, th, gid, 2 * k + 1));
            double z = e % 2 ? r * sin(th2) : r * cos(th2);
            float want = (float)(0.5 + 2.0 * z);
            if (fabsf(row[e] - want) > 1e-5f)
                fail_msg("normal id %lld e %d: %g != %g", (long long)gid, e, row[e], want);
        }
    }
    /* element e does not depend on dim: a short row is a prefix of a long one */
    float a[5], b[4096];
    psc_table_row_init(&nor, 42, th, 77, a, 5);
    psc_table_row_init(&nor, 42, th, 77, b, 4096);
    assert_memory_equal(a, b, sizeof a);
    psc_table_row_init(&uni, 42, th, 77, a, 5);
    psc_table_row_init(&uni, 42, th, 77, b, 4096);
    assert_memory_equal(a, b, sizeof a);
}

/* A row's initial value is a function of (seed, table, id) alone: reached as row
 * `row` of part `part` of any number of PS with either strategy, it is the same. */
static void test_init_independent_of_partition(void **state)
{
    (void)state;
    const int64_t rows = 1000003;
    const int dim = 7;
    const uint32_t th = psc_table_hash("item_emb");
    psc_initializer_t inits[] = {{PSC_INIT_UNIFORM, -0.05f, 0.05f}, {PSC_INIT_NORMAL, 0.0f, 0.05f}};
    psc_rng_t rng;
    psc_rng_seed(&rng, 3);
    for (size_t ii = 0; ii < PSC_ARRAY_LEN(inits); ii++)
        for (int t = 0; t < 100; t++) {
            int64_t id = (int64_t)psc_rng_below(&rng, (uint64_t)rows);
            float want[7], got[7];
            psc_table_row_init(&inits[ii], 42, th, id, want, dim);
            for (int n = 1; n <= 8; n++)
                for (int s = 0; s < 2; s++) {
                    enum psc_partition p = (enum psc_partition)s;
                    int part;
                    int64_t row;
                    psc_part_of(p, rows, n, id, &part, &row);
                    /* what the PS holding (part, row) computes */
                    memset(got, 0xff, sizeof got);
                    psc_table_row_init(&inits[ii], 42, th, psc_part_global(p, rows, n, part, row), got, dim);
                    assert_memory_equal(got, want, sizeof want);
                }
        }
}

static void moments(const float *x, size_t n, double *mean, double *var, double *kurt)
{
    double s = 0, s2 = 0, s4 = 0;
    for (size_t i = 0; i < n; i++) s += x[i];
    *mean = s / (double)n;
    for (size_t i = 0; i < n; i++) {
        double d = x[i] - *mean;
        s2 += d * d;
        s4 += d * d * d * d;
    }
    *var = s2 / (double)n;
    *kurt = (s4 / (double)n) / (*var * *var);
}

static void test_init_distributions(void **state)
{
    (void)state;
    enum { NROWS = 20000, DIM = 9 };
    float *x = psc_xmalloc(sizeof(float) * NROWS * DIM);
    const uint32_t th = psc_table_hash("t");
    double mean, var, kurt;

    psc_initializer_t uni = {PSC_INIT_UNIFORM, 2.0f, 5.0f};
    for (int i = 0; i < NROWS; i++) psc_table_row_init(&uni, 42, th, i, x + (size_t)i * DIM, DIM);
    for (size_t i = 0; i < (size_t)NROWS * DIM; i++) assert_true(x[i] >= 2.0f && x[i] < 5.0f);
    moments(x, (size_t)NROWS * DIM, &mean, &var, &kurt);
    /* uniform(2, 5): mean 3.5, variance 9/12 = 0.75, kurtosis 1.8; n = 180000: se(mean) = 0.002 */
    assert_true(fabs(mean - 3.5) < 0.01);
    assert_true(fabs(var - 0.75) < 0.01);
    assert_true(fabs(kurt - 1.8) < 0.02);

    psc_initializer_t def = {PSC_INIT_UNIFORM, -0.05f, 0.05f};
    for (int i = 0; i < NROWS; i++) psc_table_row_init(&def, 7, th, i, x + (size_t)i * DIM, DIM);
    for (size_t i = 0; i < (size_t)NROWS * DIM; i++) assert_true(x[i] >= -0.05f && x[i] < 0.05f);
    moments(x, (size_t)NROWS * DIM, &mean, &var, &kurt);
    assert_true(fabs(mean) < 3e-4);
    assert_true(fabs(var - 0.01 / 12) < 0.02 * 0.01 / 12);

    psc_initializer_t nor = {PSC_INIT_NORMAL, 1.0f, 2.0f};
    for (int i = 0; i < NROWS; i++) psc_table_row_init(&nor, 42, th, i, x + (size_t)i * DIM, DIM);
    moments(x, (size_t)NROWS * DIM, &mean, &var, &kurt);
    /* normal(1, 2): se(mean) = 2 / sqrt(180000) = 0.005; se(stddev) ~ 0.0033; kurtosis 3 */
    assert_true(fabs(mean - 1.0) < 0.025);
    assert_true(fabs(sqrt(var) - 2.0) < 0.02);
    assert_true(fabs(kurt - 3.0) < 0.1);
    for (size_t i = 0; i < (size_t)NROWS * DIM; i++) assert_true(isfinite(x[i]) && fabsf(x[i] - 1.0f) < 2.0f * 7);
    /* the odd elements (sines) and the even ones (cosines) are both normal */
    double se = 0, so = 0;
    for (int i = 0; i < NROWS; i++) {
        se += x[(size_t)i * DIM + 0];
        so += x[(size_t)i * DIM + 1];
    }
    assert_true(fabs(se / NROWS - 1.0) < 0.1 && fabs(so / NROWS - 1.0) < 0.1);

    psc_initializer_t zeros = {PSC_INIT_ZEROS, 0, 0};
    memset(x, 0x7f, sizeof(float) * DIM);
    psc_table_row_init(&zeros, 42, th, 5, x, DIM);
    for (int i = 0; i < DIM; i++) assert_true(x[i] == 0.0f);
    free(x);
}

/* A range of one float: every value must be minval (rounding may not reach maxval). */
static void test_uniform_half_open(void **state)
{
    (void)state;
    psc_initializer_t tiny = {PSC_INIT_UNIFORM, 1.0f, 0.0f};
    tiny.b = nextafterf(1.0f, 2.0f);
    float row[64];
    for (int64_t id = 0; id < 200; id++) {
        psc_table_row_init(&tiny, 42, 1, id, row, 64);
        for (int e = 0; e < 64; e++) assert_true(row[e] == 1.0f);
    }
}

static int rows_differ(const float *a, const float *b, int dim)
{
    int same = 0;
    for (int i = 0; i < dim; i++) same += a[i] == b[i];
    return same == 0;
}

static void test_init_differs(void **state)
{
    (void)state;
    enum { DIM = 16 };
    psc_initializer_t kinds[] = {{PSC_INIT_UNIFORM, -0.05f, 0.05f}, {PSC_INIT_NORMAL, 0.0f, 1.0f}};
    uint32_t user = psc_table_hash("user"), item = psc_table_hash("item");
    for (size_t k = 0; k < PSC_ARRAY_LEN(kinds); k++) {
        const psc_initializer_t *in = &kinds[k];
        float base[DIM], other[DIM];
        psc_table_row_init(in, 42, user, 5, base, DIM);
        psc_table_row_init(in, 43, user, 5, other, DIM);
        assert_true(rows_differ(base, other, DIM)); /* seed */
        psc_table_row_init(in, 42 + ((uint64_t)1 << 32), user, 5, other, DIM);
        assert_true(rows_differ(base, other, DIM)); /* the seed's high word */
        psc_table_row_init(in, 42, item, 5, other, DIM);
        assert_true(rows_differ(base, other, DIM)); /* table */
        psc_table_row_init(in, 42, user, 6, other, DIM);
        assert_true(rows_differ(base, other, DIM)); /* id */
        psc_table_row_init(in, 42, user, 5 + ((int64_t)1 << 32), other, DIM);
        assert_true(rows_differ(base, other, DIM)); /* the id's high word */
        psc_table_row_init(in, 42, user, 5, other, DIM);
        assert_memory_equal(base, other, sizeof base); /* and the same inputs, the same row */
    }
}

static void expect_lr(int line, const psc_lr_schedule_t *s, double lr, int64_t step, double want)
{
    double got = psc_lr_at(s, lr, step);
    if (fabs(got - want) > 1e-12 * fabs(want) + 1e-15)
        fail_msg("line %d: %s at step %lld: %.17g, want %.17g", line, psc_lr_kind_name(s->kind), (long long)step, got,
                 want);
}
#define EXPECT_LR(s, lr, step, want) expect_lr(__LINE__, s, lr, step, want)

static void test_lr_schedules(void **state)
{
    (void)state;
    psc_lr_schedule_t s;
    memset(&s, 0, sizeof s);
    EXPECT_LR(&s, 0.25, 0, 0.25);
    EXPECT_LR(&s, 0.25, 123456, 0.25);

    /* exponential_decay: 0.1 * 0.5^(step / 100) */
    s.kind = PSC_LR_EXPONENTIAL;
    s.decay_steps = 100;
    s.decay_rate = 0.5f;
    EXPECT_LR(&s, 0.1, 0, 0.1);
    EXPECT_LR(&s, 0.1, -5, 0.1);
    EXPECT_LR(&s, 0.1, 50, 0.1 * sqrt(0.5));
    EXPECT_LR(&s, 0.1, 100, 0.05);
    EXPECT_LR(&s, 0.1, 250, 0.1 * pow(0.5, 2.5));
    s.staircase = 1; /* the exponent floored */
    EXPECT_LR(&s, 0.1, 99, 0.1);
    EXPECT_LR(&s, 0.1, 100, 0.05);
    EXPECT_LR(&s, 0.1, 199, 0.05);
    EXPECT_LR(&s, 0.1, 250, 0.025);
    EXPECT_LR(&s, 0.1, -5, 0.1);

    /* piecewise_constant [100, 200] -> [1, 0.5, 0.25]: a boundary step still has the value before it */
    memset(&s, 0, sizeof s);
    s.kind = PSC_LR_PIECEWISE;
    s.nboundaries = 2;
    s.boundaries[0] = 100;
    s.boundaries[1] = 200;
    s.values[0] = 1.0f;
    s.values[1] = 0.5f;
    s.values[2] = 0.25f;
    EXPECT_LR(&s, 9.0, -1, 1.0);
    EXPECT_LR(&s, 9.0, 0, 1.0);
    EXPECT_LR(&s, 9.0, 100, 1.0);
    EXPECT_LR(&s, 9.0, 101, 0.5);
    EXPECT_LR(&s, 9.0, 200, 0.5);
    EXPECT_LR(&s, 9.0, 201, 0.25);
    EXPECT_LR(&s, 9.0, INT64_MAX, 0.25);

    /* cosine_decay without warmup: lr * ((1 - alpha) * 0.5 * (1 + cos(pi * min(step, 100) / 100)) + alpha) */
    memset(&s, 0, sizeof s);
    s.kind = PSC_LR_COSINE;
    s.decay_steps = 100;
    EXPECT_LR(&s, 1.0, 0, 1.0);
    EXPECT_LR(&s, 1.0, 25, 0.5 * (1 + cos(M_PI / 4)));
    EXPECT_LR(&s, 1.0, 50, 0.5);
    EXPECT_LR(&s, 1.0, 100, 0.0);
    EXPECT_LR(&s, 1.0, 1000, 0.0);
    s.alpha = 0.25f;
    EXPECT_LR(&s, 2.0, 50, 2.0 * (0.75 * 0.5 + 0.25));
    EXPECT_LR(&s, 2.0, 100, 0.5); /* the floor: alpha * lr */
    EXPECT_LR(&s, 2.0, 5000, 0.5);

    /* warmup from lr 0.1 to 1.0 over 10 steps, then cosine from 1.0 down to alpha * 1.0 */
    s.warmup_steps = 10;
    s.warmup_target = 1.0f;
    EXPECT_LR(&s, 0.1, 0, 0.1);
    EXPECT_LR(&s, 0.1, 5, 0.55);
    EXPECT_LR(&s, 0.1, 9, 0.1 + 0.9 * 0.9);
    EXPECT_LR(&s, 0.1, 10, 1.0);
    EXPECT_LR(&s, 0.1, 60, 0.75 * 0.5 + 0.25);
    EXPECT_LR(&s, 0.1, 110, 0.25);
    EXPECT_LR(&s, 0.1, 100000, 0.25);
    /* warmup_target 0: the peak is lr, held for warmup_steps (Keras's warmup_target = lr) */
    s.warmup_target = 0.0f;
    s.alpha = 0.0f;
    EXPECT_LR(&s, 0.5, 5, 0.5);
    EXPECT_LR(&s, 0.5, 10, 0.5);
    EXPECT_LR(&s, 0.5, 60, 0.25);
    EXPECT_LR(&s, 0.5, 110, 0.0);
}

static void test_names(void **state)
{
    (void)state;
    assert_string_equal(psc_partition_name(PSC_PART_MOD), "mod");
    assert_string_equal(psc_partition_name(PSC_PART_DIV), "div");
    assert_string_equal(psc_partition_name((enum psc_partition)7), "unknown");
    assert_string_equal(psc_init_kind_name(PSC_INIT_UNIFORM), "uniform");
    assert_string_equal(psc_init_kind_name(PSC_INIT_NORMAL), "normal");
    assert_string_equal(psc_init_kind_name(PSC_INIT_ZEROS), "zeros");
    assert_string_equal(psc_init_kind_name((enum psc_init_kind) - 1), "unknown");
    assert_string_equal(psc_lr_kind_name(PSC_LR_CONSTANT), "constant");
    assert_string_equal(psc_lr_kind_name(PSC_LR_EXPONENTIAL), "exponential_decay");
    assert_string_equal(psc_lr_kind_name(PSC_LR_PIECEWISE), "piecewise_constant");
    assert_string_equal(psc_lr_kind_name(PSC_LR_COSINE), "cosine_decay");
    assert_string_equal(psc_lr_kind_name((enum psc_lr_kind)9), "unknown");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_partition_examples),
        cmocka_unit_test(test_partition_round_trip),
        cmocka_unit_test(test_hash),
        cmocka_unit_test(test_init_formula),
        cmocka_unit_test(test_init_independent_of_partition),
        cmocka_unit_test(test_init_distributions),
        cmocka_unit_test(test_uniform_half_open),
        cmocka_unit_test(test_init_differs),
        cmocka_unit_test(test_lr_schedules),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
