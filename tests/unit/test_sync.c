/* test_sync — the sync-replica accumulator of one chunk (ps_server/store/sync.h).
 *
 * The stale / current / ahead verdicts; the first add copies (no zeroing pass),
 * later adds sum, and the mean divides by the number of batches (count 2 +
 * count 1 => / 3), compared with the same float expression written here; due by
 * count and by timeout, the timeout exactly at its boundary; advance and
 * skip_to; the global_step counter (no data); unaligned gradients give the same
 * sums as aligned ones; sync_needed on the table of the brief.
 */
#include "sync.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define NE 37 /* two 16-wide blocks and a 5-element tail */

static float g_of(int which, size_t i) { return (float)((double)(which + 1) * 0.37 * ((double)i - 17.5) + 0.01 * which); }

static void test_check(void **state)
{
    (void)state;
    sync_acc_t a = {.step = 5};
    assert_int_equal(sync_acc_check(&a, 4), SYNC_STALE);
    assert_int_equal(sync_acc_check(&a, -1), SYNC_STALE);
    assert_int_equal(sync_acc_check(&a, 5), SYNC_CURRENT);
    assert_int_equal(sync_acc_check(&a, 6), SYNC_AHEAD);
    assert_int_equal(sync_acc_check(&a, INT64_MAX), SYNC_AHEAD);

    /* A check changes nothing: a stale contribution is dropped by not adding it. */
    float sum[NE], g[NE];
    for (size_t i = 0; i < NE; i++) g[i] = g_of(0, i);
    sync_acc_t b = {.step = 3, .sum = sum};
    sync_acc_add(&b, g, NE, 1, 7.0);
    sync_acc_t copy = b;
    float before[NE];
    memcpy(before, sum, sizeof sum);
    assert_int_equal(sync_acc_check(&b, 2), SYNC_STALE);
    assert_memory_equal(&b, &copy, sizeof b);
    assert_memory_equal(sum, before, sizeof sum);
}

/* count 2 + count 1 (and a second step with the buffer reused: the first add
 * of a step overwrites, so garbage from the last step never leaks in). */
static void test_add_mean(void **state)
{
    (void)state;
    float sum[NE], g0[NE], g1[NE], g2[NE];
    for (size_t i = 0; i < NE; i++) {
        sum[i] = 12345.0f; /* garbage: the first add must not read it */
        g0[i] = g_of(0, i);
        g1[i] = g_of(1, i);
        g2[i] = g_of(2, i);
    }
    sync_acc_t a = {.sum = sum};
    sync_acc_add(&a, g0, NE, 2, 10.0); /* two batches summed into g0 */
    assert_int_equal(a.count, 2);
    assert_true(a.first_at == 10.0);
    assert_memory_equal(sum, g0, sizeof g0);
    sync_acc_add(&a, g1, NE, 1, 11.5);
    assert_int_equal(a.count, 3);
    assert_true(a.first_at == 10.0); /* only the first contribution sets it */
    const float *m = sync_acc_mean(&a, NE);
    assert_ptr_equal(m, sum);
    for (size_t i = 0; i < NE; i++) {
        float want = (g0[i] + g1[i]) / 3.0f;
        if (m[i] != want) fail_msg("mean[%zu] = %.9g, want %.9g", i, (double)m[i], (double)want);
    }
    assert_int_equal(a.step, 0);
    sync_acc_advance(&a);
    assert_int_equal(a.step, 1);
    assert_int_equal(a.count, 0);

    /* The next step: the stale mean in sum must be overwritten, not added to. */
    sync_acc_add(&a, g2, NE, 1, 20.0);
    assert_true(a.first_at == 20.0);
    m = sync_acc_mean(&a, NE); /* count 1: the gradient itself */
    assert_memory_equal(m, g2, sizeof g2);

    /* Two contributions of count 1: exactly (g0 + g1) / 2. */
    sync_acc_advance(&a);
    sync_acc_add(&a, g0, NE, 1, 30.0);
    sync_acc_add(&a, g1, NE, 1, 30.5);
    m = sync_acc_mean(&a, NE);
    for (size_t i = 0; i < NE; i++) assert_true(m[i] == (g0[i] + g1[i]) / 2.0f);
    assert_int_equal(a.step, 2);
}

static void test_add_unaligned(void **state)
{
    (void)state;
    enum { M = 3001 }; /* more than one stack block, odd tail */
    float *g0 = malloc(M * sizeof *g0), *g1 = malloc(M * sizeof *g1), *s1 = malloc(M * sizeof *s1),
          *s2 = malloc(M * sizeof *s2);
    char *raw = malloc(M * sizeof(float) + 3);
    assert_non_null(g0);
    assert_non_null(raw);
    for (size_t i = 0; i < M; i++) {
        g0[i] = g_of(0, i % 97);
        g1[i] = g_of(3, i % 89);
    }
    memcpy(raw + 3, g1, M * sizeof(float));
    sync_acc_t a = {.sum = s1}, b = {.sum = s2};
    sync_acc_add(&a, g0, M, 1, 0.0);
    sync_acc_add(&a, g1, M, 1, 0.0);
    sync_acc_add(&b, g0, M, 1, 0.0);
    sync_acc_add_bytes(&b, raw + 3, M, 1, 0.0);
    assert_memory_equal(s1, s2, M * sizeof(float));
    for (size_t i = 0; i < M; i++) assert_true(s1[i] == g0[i] + g1[i]);
    /* an unaligned first contribution is a plain copy */
    sync_acc_t c = {.step = 4, .sum = s2};
    sync_acc_add_bytes(&c, raw + 3, M, 1, 0.0);
    assert_memory_equal(s2, g1, M * sizeof(float));
    free(g0);
    free(g1);
    free(s1);
    free(s2);
    free(raw);
}

static void test_due(void **state)
{
    (void)state;
    float sum[NE], g[NE];
    for (size_t i = 0; i < NE; i++) g[i] = g_of(1, i);
    sync_acc_t a = {.sum = sum};
    int late = -1;
    /* empty: never due, not even long after */
    assert_int_equal(sync_acc_due(&a, 2, 1e9, 5.0, &late), 0);
    assert_int_equal(late, 0);
    assert_int_equal(sync_acc_due(&a, 0, 1e9, 5.0, NULL), 0);

    sync_acc_add(&a, g, NE, 1, 100.0);
    late = -1;
    assert_int_equal(sync_acc_due(&a, 2, 100.0, 5.0, &late), 0);
    assert_int_equal(late, 0);
    assert_int_equal(sync_acc_due(&a, 2, 104.999, 5.0, &late), 0);
    assert_int_equal(sync_acc_due(&a, 2, 105.0, 5.0, &late), 1); /* exactly at the boundary: expired */
    assert_int_equal(late, 1);
    assert_int_equal(sync_acc_due(&a, 1, 100.0, 5.0, &late), 1); /* by count */
    assert_int_equal(late, 0);
    /* enough arrived and the timeout expired too: by count, not by timeout */
    assert_int_equal(sync_acc_due(&a, 1, 200.0, 5.0, &late), 1);
    assert_int_equal(late, 0);

    sync_acc_add(&a, g, NE, 2, 101.0); /* count 3 */
    assert_int_equal(sync_acc_due(&a, 3, 101.0, 5.0, &late), 1);
    assert_int_equal(late, 0);
    assert_int_equal(sync_acc_due(&a, 4, 101.0, 5.0, &late), 0);
    assert_int_equal(sync_acc_due(&a, 4, 105.0, 5.0, &late), 1); /* first_at was 100 */
    assert_int_equal(late, 1);
}

static void test_advance_skip(void **state)
{
    (void)state;
    sync_acc_t a = {0}; /* the global_step counter: no data */
    sync_acc_add(&a, NULL, 0, 3, 1.0);
    assert_int_equal(a.count, 3);
    assert_null(sync_acc_mean(&a, 0));
    sync_acc_advance(&a);
    assert_int_equal(a.step, 1);
    assert_int_equal(a.count, 0);
    sync_acc_skip_to(&a, 7);
    assert_int_equal(a.step, 7);
    sync_acc_skip_to(&a, 3); /* never backwards */
    assert_int_equal(a.step, 7);
    assert_int_equal(sync_acc_check(&a, 6), SYNC_STALE);
    assert_int_equal(sync_acc_check(&a, 7), SYNC_CURRENT);
    /* count saturates instead of wrapping */
    sync_acc_add(&a, NULL, 0, UINT32_MAX - 1, 2.0);
    sync_acc_add(&a, NULL, 0, 5, 2.0);
    assert_int_equal(a.count, UINT32_MAX);
}

static void test_needed(void **state)
{
    (void)state;
    static const struct {
        int R, N, present;
        uint32_t want;
    } cases[] = {
        {2, 2, 2, 2}, {2, 2, 1, 1}, {2, 3, 3, 2}, {2, 3, 1, 1}, {4, 2, 1, 2}, {4, 2, 0, 1}, {3, 3, 2, 2},
        {2, 3, 2, 2}, /* ceil(4/3) */
        {3, 4, 1, 1}, {3, 4, 2, 2}, {3, 4, 3, 3}, {3, 4, 4, 3},
        {1, 1, 0, 1}, {5, 3, 9, 5}, /* present clamped to NE */
        {2, 2, -1, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint32_t got = sync_needed(cases[i].R, cases[i].N, cases[i].present);
        if (got != cases[i].want)
            fail_msg("sync_needed(%d, %d, %d) = %u, want %u", cases[i].R, cases[i].N, cases[i].present, got,
                     cases[i].want);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check),   cmocka_unit_test(test_add_mean),     cmocka_unit_test(test_add_unaligned),
        cmocka_unit_test(test_due),     cmocka_unit_test(test_advance_skip), cmocka_unit_test(test_needed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
