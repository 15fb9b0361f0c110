/* test_bf16 — bfloat16 gradient transport (common/bf16.c):
 *  - rounding to nearest, ties to even, against a reference computed in
 *    double for 2^20 random floats and the edge values (±0, subnormals, the
 *    largest finite, overflow to infinity, ±inf, NaN stays NaN);
 *  - widening is exact, and bfloat16 → float32 → bfloat16 is the identity for
 *    all 65,536 patterns except NaNs (which stay NaN);
 *  - widening from segments split at every byte (values straddling two
 *    segments) gives what one segment gives;
 *  - error feedback: over 1,000 steps of gradients near 1 with a small
 *    drift below half a bfloat16 step, what was sent plus the residual equals
 *    the sum of the gradients (to float32 rounding of the sums) and the
 *    residual stays under one bfloat16 step; plain rounding drops the drift
 *    (its sums are off by over 10 times more).
 */
#include "bf16.h"
#include "psc.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* the reference: of the two bfloat16 neighbours of a finite f, the nearer
 * (in exact arithmetic), the even one on a tie */
static uint16_t ref_round(float f)
{
    uint32_t u = bits(f);
    uint16_t lo = (uint16_t)(u >> 16); /* truncation: toward zero */
    if ((u & 0xffff) == 0) return lo;
    uint16_t hi = (uint16_t)(lo + 1); /* away from zero (may be infinity) */
    double a = fabs((double)f - (double)psc_bf16_to_float(lo));
    double b = fabs((double)psc_bf16_to_float(hi) - (double)f);
    if ((hi & 0x7fff) == 0x7f80) { /* IEEE: round as if the exponent went on, then overflow */
        int e;
        frexp(fabs((double)psc_bf16_to_float(lo)), &e);
        b = fabs(fabs((double)psc_bf16_to_float(lo)) + ldexp(1, e - 8) - fabs((double)f));
    }
    if (a < b) return lo;
    if (b < a) return hi;
    return (lo & 1) ? hi : lo;
}

static void test_rounding(void **state)
{
    (void)state;
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < (1 << 20); i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint32_t u = (uint32_t)x;
        if ((u & 0x7f800000u) == 0x7f800000u) continue; /* inf and NaN below */
        float f = from_bits(u);
        uint16_t got = psc_bf16_from_float(f), want = ref_round(f);
        if (got != want) fail_msg("%a (0x%08x): got 0x%04x, want 0x%04x", (double)f, u, got, want);
    }
    /* ties: exactly half-way, to even */
    assert_int_equal(psc_bf16_from_float(from_bits(0x3f808000u)), 0x3f80); /* 1.0 + half a step: down to even */
    assert_int_equal(psc_bf16_from_float(from_bits(0x3f818000u)), 0x3f82); /* odd + half: up to even */
    assert_int_equal(psc_bf16_from_float(0.0f), 0x0000);
    assert_int_equal(psc_bf16_from_float(-0.0f), 0x8000);
    assert_int_equal(psc_bf16_from_float(from_bits(0x00000001u)), 0x0000); /* smallest subnormal: to zero */
    assert_int_equal(psc_bf16_from_float(from_bits(0x00018000u)), 0x0002); /* subnormal tie: to even */
    assert_int_equal(psc_bf16_from_float(from_bits(0x7f7f0000u)), 0x7f7f); /* largest bfloat16 */
    assert_int_equal(psc_bf16_from_float(from_bits(0x7f7fffffu)), 0x7f80); /* FLT_MAX: overflows to inf */
    assert_int_equal(psc_bf16_from_float(INFINITY), 0x7f80);
    assert_int_equal(psc_bf16_from_float(-INFINITY), 0xff80);
    assert_true(isnan(psc_bf16_to_float(psc_bf16_from_float(NAN))));
    assert_true(isnan(psc_bf16_to_float(psc_bf16_from_float(from_bits(0x7f800001u))))); /* would truncate to inf */
}

static void test_round_trip(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = psc_bf16_to_float((uint16_t)h);
        assert_int_equal(bits(f), h << 16);
        if (isnan(f))
            assert_true(isnan(psc_bf16_to_float(psc_bf16_from_float(f))));
        else
            assert_int_equal(psc_bf16_from_float(f), h);
    }
}

static void test_widen_segments(void **state)
{
    (void)state;
    enum { N = 37 };
    uint8_t wire[2 * N];
    for (int i = 0; i < 2 * N; i++) wire[i] = (uint8_t)(i * 37 + 11);
    float one[N], split[N];
    psc_bf16_widen_iov(&(psc_iov_t){wire, sizeof wire}, 1, one, N);
    for (int i = 0; i < N; i++) assert_int_equal(bits(one[i]), (uint32_t)(wire[2 * i] | wire[2 * i + 1] << 8) << 16);
    /* two cuts anywhere, empty segments included */
    for (int a = 0; a <= 2 * N; a++)
        for (int b = a; b <= 2 * N; b += 3) {
            psc_iov_t seg[4] = {{wire, (size_t)a}, {wire + a, 0}, {wire + a, (size_t)(b - a)},
                                {wire + b, (size_t)(2 * N - b)}};
            memset(split, 0xff, sizeof split);
            psc_bf16_widen_iov(seg, 4, split, N);
            assert_memory_equal(split, one, sizeof one);
        }
}

static void test_error_feedback(void **state)
{
    (void)state;
    enum { N = 256, STEPS = 1000 };
    float g[N], resid[N] = {0}, sent_ef[N] = {0}, sent_plain[N] = {0};
    double want[N] = {0};
    uint16_t out[N];
    uint64_t x = 12345;
    for (int s = 0; s < STEPS; s++) {
        for (int i = 0; i < N; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            /* gradients around 1 with a small, persistent drift: the part plain rounding loses */
            g[i] = 1.0f + (float)((double)(x % 1000) * 1e-6) + (float)i * 1e-5f;
            want[i] += g[i];
        }
        psc_bf16_encode(g, resid, out, N);
        for (int i = 0; i < N; i++) sent_ef[i] += psc_bf16_to_float(out[i]);
        psc_bf16_encode(g, NULL, out, N);
        for (int i = 0; i < N; i++) sent_plain[i] += psc_bf16_to_float(out[i]);
    }
    double worst_ef = 0, worst_plain = 0;
    for (int i = 0; i < N; i++) {
        /* sent + kept = the gradients, to the float32 rounding of sums near 1000 */
        assert_true(fabs((double)sent_ef[i] + resid[i] - want[i]) < 1e-2);
        assert_true(fabs(resid[i]) <= 0.0079f); /* never more than a bfloat16 step near 1: nothing piles up */
        worst_ef = fmax(worst_ef, fabs((double)sent_ef[i] - want[i]));
        worst_plain = fmax(worst_plain, fabs((double)sent_plain[i] - want[i]));
    }
    print_message("after %d steps of ~1.0: plain rounding off by up to %.3f, error feedback by %.4f\n", STEPS,
                  worst_plain, worst_ef);
    assert_true(worst_ef < 0.02);
    assert_true(worst_plain > 10 * worst_ef); /* the drift plain rounding drops, error feedback keeps */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rounding),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_widen_segments),
        cmocka_unit_test(test_error_feedback),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
