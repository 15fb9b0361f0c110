/* bf16.c — see bf16.h. */
#include "bf16.h"

#include "bytes.h"

#include <string.h>

static inline uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Branch-free, so that the loops below vectorize: the rounded value, or for a
 * NaN its upper half with a mantissa bit set (a NaN whose payload sat in the
 * low half would otherwise truncate to infinity). */
static inline uint16_t round_bits(uint32_t u)
{
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16; /* nearest, ties to even */
    uint32_t nan = (u >> 16) | 0x40u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

uint16_t psc_bf16_from_float(float f) { return round_bits(bits_of(f)); }

/* The encode loops, compiled twice (as optim.c's kernels): for the baseline
 * ISA and for AVX2, picked at run time. */
#define ENCODE_LOOPS(suffix, attr)                                                                                   \
    attr static void encode_plain_##suffix(const float *restrict g, uint16_t *restrict out, size_t n)               \
    {                                                                                                                \
        for (size_t i = 0; i < n; i++) out[i] = round_bits(bits_of(g[i]));                                           \
    }                                                                                                                \
    attr static void encode_ef_##suffix(const float *restrict g, float *restrict resid, uint16_t *restrict out,      \
                                        size_t n)                                                                    \
    {                                                                                                                \
        for (size_t i = 0; i < n; i++) {                                                                             \
            float v = g[i] + resid[i];                                                                               \
            uint16_t h = round_bits(bits_of(v));                                                                     \
            out[i] = h;                                                                                              \
            resid[i] = v - psc_bf16_to_float(h);                                                                     \
        }                                                                                                            \
    }

ENCODE_LOOPS(base, )
#if defined(__x86_64__) && defined(__GNUC__)
ENCODE_LOOPS(avx2, __attribute__((target("avx2"))))
#define BF16_AVX2 1
#endif

void psc_bf16_encode(const float *g, float *resid, uint16_t *out, size_t n)
{
#ifdef BF16_AVX2
    if (__builtin_cpu_supports("avx2")) {
        if (resid)
            encode_ef_avx2(g, resid, out, n);
        else
            encode_plain_avx2(g, out, n);
        return;
    }
#endif
    if (resid)
        encode_ef_base(g, resid, out, n);
    else
        encode_plain_base(g, out, n);
}

static void widen_run(const uint8_t *restrict in, float *restrict out, size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = psc_bf16_to_float(psc_le_get16(in + 2 * i));
}

void psc_bf16_widen_iov(const psc_iov_t *seg, int nseg, float *out, size_t n)
{
    size_t k = 0;
    int have_lo = 0; /* a value's low byte ended the previous segment */
    uint8_t lo = 0;
    for (int s = 0; s < nseg && k < n; s++) {
        const uint8_t *p = seg[s].base;
        size_t len = seg[s].len;
        if (have_lo && len) {
            out[k++] = psc_bf16_to_float((uint16_t)(lo | p[0] << 8));
            p++;
            len--;
            have_lo = 0;
        }
        size_t m = len / 2;
        if (m > n - k) m = n - k;
        widen_run(p, out + k, m);
        k += m;
        if (k < n && len - 2 * m == 1) {
            lo = p[2 * m];
            have_lo = 1;
        }
    }
}
