/* test_ctr_auc — exact ROC AUC and log loss (worker/ctr_eval.c).
 *
 * AUC: a hand-worked example with ties (the arithmetic in the comment), in
 * shuffled input order; all-equal scores give 0.5, a perfect ranking 1, the
 * reversed one 0; one class only or a NaN score give NaN; -0 ties with +0;
 * agreement with an O(n^2) count of positive-negative pairs on random data with
 * many ties (n = 2000, few distinct scores, so radix passes get skipped) and on
 * floats of every sign and magnitude (infinities included, so every radix pass
 * and the order of the float keys are exercised). Log loss: hand values, a
 * mean of mixed examples, finite and exact at |z| = 100, NaN on no examples.
 * The streaming accumulator over uneven batches equals the one-shot functions
 * exactly, also after a reset, and with a NaN logit its AUC is NaN.
 */
#include "ctr_eval.h"
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

#define EPS 1e-12

/* |got - want| <= tol, with the numbers in the message (cmocka 1.1 has no
 * double comparison) */
#define assert_close(got, want, tol) assert_close_at((got), (want), (tol), __FILE__, __LINE__)
static void assert_close_at(double got, double want, double tol, const char *file, int line)
{
    if (!(fabs(got - want) <= tol)) fail_msg("%s:%d: got %.17g, want %.17g (tolerance %g)", file, line, got, want, tol);
}

/* AUC by counting every positive-negative pair (ties count 1/2), in double. */
static double auc_pairs(const float *s, const float *y, int n)
{
    double wins = 0, pairs = 0;
    for (int i = 0; i < n; i++) {
        if (!(y[i] > 0.5f)) continue;
        for (int j = 0; j < n; j++) {
            if (y[j] > 0.5f) continue;
            pairs += 1;
            wins += s[i] > s[j] ? 1.0 : s[i] == s[j] ? 0.5 : 0.0;
        }
    }
    return pairs > 0 ? wins / pairs : NAN;
}

static void test_auc_hand_ties(void **state)
{
    (void)state;
    /* Scores ascending with their labels:
     *   0.1 (-) | 0.4 (+) 0.4 (-) 0.4 (-) | 0.8 (+) 0.8 (-) | 0.9 (+)
     * ranks 1  | 2, 3, 4 -> average 3    | 5, 6 -> 5.5    | 7
     * P = 3, N = 4. Positives' ranks: 3 + 5.5 + 7 = 15.5; U = 15.5 - P(P+1)/2
     * = 15.5 - 6 = 9.5; AUC = 9.5 / (3 * 4) = 19/24 = 0.7916666...
     * By pairs: the 0.4 positive beats 0.1 and ties two 0.4s: 1 + 2 * 0.5 = 2;
     * the 0.8 positive beats 0.1, 0.4, 0.4 and ties 0.8: 3.5; 0.9 beats all 4:
     * 2 + 3.5 + 4 = 9.5. The input is shuffled so the sort matters. */
    const float s[7] = {0.8f, 0.4f, 0.9f, 0.1f, 0.4f, 0.8f, 0.4f};
    const float y[7] = {0, 1, 1, 0, 0, 1, 0};
    assert_close(ctr_auc(s, y, 7), 19.0 / 24.0, EPS);
    assert_close(auc_pairs(s, y, 7), 19.0 / 24.0, EPS);
    /* negative scores order like floats: -3 < -1 < -0 == +0 < 2 */
    const float s2[5] = {-1.0f, 2.0f, -0.0f, 0.0f, -3.0f};
    const float y2[5] = {1, 1, 1, 0, 0};
    /* positives -1, 2, -0 vs negatives +0, -3: -1 beats -3 (1); 2 beats both (2);
     * -0 ties +0 and beats -3 (1.5): 4.5 / 6 */
    assert_close(ctr_auc(s2, y2, 5), 0.75, EPS);
}

static void test_auc_extremes(void **state)
{
    (void)state;
    enum { N = 100 };
    float s[N], y[N], r[N];
    for (int i = 0; i < N; i++) {
        y[i] = (float)(i % 3 == 0);
        s[i] = y[i] ? 10.0f + (float)i : -(float)i; /* every positive above every negative */
        r[i] = -s[i];
    }
    assert_close(ctr_auc(s, y, N), 1.0, 0);
    assert_close(ctr_auc(r, y, N), 0.0, 0);
    for (int i = 0; i < N; i++) s[i] = 0.25f;
    assert_close(ctr_auc(s, y, N), 0.5, 0);

    float ones[N], zeros[N];
    for (int i = 0; i < N; i++) ones[i] = 1.0f, zeros[i] = 0.0f;
    assert_true(isnan(ctr_auc(r, ones, N)));
    assert_true(isnan(ctr_auc(r, zeros, N)));
    assert_true(isnan(ctr_auc(r, y, 0)));
    r[7] = NAN;
    assert_true(isnan(ctr_auc(r, y, N)));
    /* the inputs are left alone */
    assert_true(s[0] == 0.25f && y[0] == 1.0f && r[1] == 1.0f);
}

static void test_auc_random_ties(void **state)
{
    (void)state;
    enum { N = 2000 };
    float *s = psc_xmalloc(N * sizeof *s), *y = psc_xmalloc(N * sizeof *y);
    psc_rng_t rng;
    psc_rng_seed(&rng, 20);
    for (int round = 0; round < 4; round++) {
        int levels = round == 0 ? 2 : round == 1 ? 7 : round == 2 ? 40 : 1000;
        for (int i = 0; i < N; i++) {
            int v = (int)psc_rng_below(&rng, (uint64_t)levels);
            s[i] = (float)(v - levels / 2) * 0.37f;
            /* labels that depend on the score, so AUC is away from 0.5 */
            y[i] = psc_rng_uniform(&rng) < 0.2 + 0.6 * v / levels ? 1.0f : 0.0f;
        }
        double want = auc_pairs(s, y, N), got = ctr_auc(s, y, N);
        if (fabs(got - want) > EPS) fail_msg("levels %d: got %.15f want %.15f", levels, got, want);
        assert_true(want > 0.6);
    }
    free(s);
    free(y);
}

static void test_auc_random_floats(void **state)
{
    (void)state;
    enum { N = 1500 };
    float s[N], y[N];
    psc_rng_t rng;
    psc_rng_seed(&rng, 7);
    for (int i = 0; i < N; i++) {
        /* any sign, exponents from 2^-60 to 2^60, a few infinities and repeats */
        double m = psc_rng_uniform(&rng) * ldexp(1.0, (int)psc_rng_below(&rng, 121) - 60);
        s[i] = (float)(psc_rng_below(&rng, 2) ? m : -m);
        if (i % 97 == 0) s[i] = (i % 2) ? INFINITY : -INFINITY;
        if (i % 13 == 0 && i > 0) s[i] = s[i - 1];
        y[i] = (float)psc_rng_below(&rng, 2);
    }
    assert_close(ctr_auc(s, y, N), auc_pairs(s, y, N), EPS);
}

static void test_log_loss(void **state)
{
    (void)state;
    float z = 0, one = 1, zero = 0;
    assert_close(ctr_log_loss(&z, &one, 1), log(2.0), EPS);
    assert_close(ctr_log_loss(&z, &zero, 1), log(2.0), EPS);
    /* z 0, 2, 2, -3 with y 1, 1, 0, 1:
     * log 2 = 0.6931471805599453, log(1 + e^-2) = 0.1269280110429725,
     * 2 + log(1 + e^-2) = 2.1269280110429727, 3 + log(1 + e^-3) = 3.048587351573742;
     * mean 1.498897638554908 */
    const float zs[4] = {0, 2, 2, -3}, ys[4] = {1, 1, 0, 1};
    assert_close(ctr_log_loss(zs, ys, 4), 1.498897638554908, EPS);
    /* |z| = 100: no overflow, no log(0); e^-100 = 3.720075976020836e-44 */
    const float big[4] = {100, 100, -100, -100}, yb[4] = {1, 0, 1, 0};
    double l[4];
    for (int i = 0; i < 4; i++) {
        l[i] = ctr_log_loss(&big[i], &yb[i], 1);
        assert_true(isfinite(l[i]));
    }
    assert_close(l[0], 3.720075976020836e-44, 1e-56);
    assert_close(l[1], 100.0, EPS);
    assert_close(l[2], 100.0, EPS);
    assert_close(l[3], 3.720075976020836e-44, 1e-56);
    assert_true(isnan(ctr_log_loss(zs, ys, 0)));
}

static void fill_random(float *z, float *y, int n, uint64_t seed)
{
    psc_rng_t rng;
    psc_rng_seed(&rng, seed);
    for (int i = 0; i < n; i++) {
        z[i] = (float)(psc_rng_below(&rng, 50)) * 0.1f - 2.5f; /* ties across batches */
        y[i] = psc_rng_uniform(&rng) < 1.0 / (1.0 + exp(-z[i])) ? 1.0f : 0.0f;
    }
}

static void add_batches(ctr_eval_t *e, const float *z, const float *y, int n)
{
    static const int sizes[] = {1, 0, 17, 256, 1000, 3};
    int at = 0;
    for (int b = 0; at < n; b++) {
        int m = sizes[b % 6];
        if (m > n - at) m = n - at;
        ctr_eval_add(e, z + at, y + at, m);
        at += m;
    }
}

static void test_eval_streaming(void **state)
{
    (void)state;
    enum { N = 10007 };
    float *z = psc_xmalloc(N * sizeof *z), *y = psc_xmalloc(N * sizeof *y);
    fill_random(z, y, N, 3);
    double auc = ctr_auc(z, y, N), loss = ctr_log_loss(z, y, N);
    assert_true(auc > 0.6 && auc < 0.95);

    ctr_eval_t e;
    ctr_eval_init(&e);
    assert_true(isnan(ctr_eval_auc(&e)) && isnan(ctr_eval_log_loss(&e)));
    add_batches(&e, z, y, N);
    assert_int_equal(e.n, N);
    assert_true(ctr_eval_auc(&e) == auc);
    assert_true(ctr_eval_log_loss(&e) == loss);
    assert_true(ctr_eval_auc(&e) == auc); /* sorting in place twice changes nothing */

    /* a second pass after a reset, on other data */
    fill_random(z, y, N, 4);
    ctr_eval_reset(&e);
    add_batches(&e, z, y, N / 2);
    double half = ctr_eval_auc(&e); /* then more examples after an evaluation */
    assert_true(half == ctr_auc(z, y, N / 2));
    add_batches(&e, z + N / 2, y + N / 2, N - N / 2);
    assert_true(ctr_eval_auc(&e) == ctr_auc(z, y, N));
    assert_true(ctr_eval_log_loss(&e) == ctr_log_loss(z, y, N));

    z[5] = NAN;
    ctr_eval_add(&e, z + 5, y + 5, 1);
    assert_true(isnan(ctr_eval_auc(&e)));
    ctr_eval_free(&e);
    ctr_eval_free(NULL);
    free(z);
    free(y);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_auc_hand_ties),   cmocka_unit_test(test_auc_extremes),
        cmocka_unit_test(test_auc_random_ties), cmocka_unit_test(test_auc_random_floats),
        cmocka_unit_test(test_log_loss),        cmocka_unit_test(test_eval_streaming),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
