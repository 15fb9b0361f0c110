/* bf16.c — see bf16.h. */
#include "bf16.h"

#include <string.h>

static inline uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

uint16_t psc_bf16_from_float(float f)
{
    uint32_t u = bits_of(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN: keep it quiet and a NaN */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);                 /* nearest, ties to even */
}

void psc_bf16_encode(const float *g, float *resid, uint16_t *out, size_t n)
{
    if (!resid) {
        for (size_t i = 0; i < n; i++) out[i] = psc_bf16_from_float(g[i]);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        float v = g[i] + resid[i];
        uint16_t h = psc_bf16_from_float(v);
        out[i] = h;
        resid[i] = v - psc_bf16_to_float(h);
    }
}

static void widen_run(const uint8_t *restrict in, float *restrict out, size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = psc_bf16_to_float((uint16_t)(in[2 * i] | in[2 * i + 1] << 8));
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
