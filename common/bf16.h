/* bf16.h — bfloat16 gradient transport (Chunk.encoding PSC_ENC_BFLOAT16).
 *
 * A bfloat16 is the upper 16 bits of a float32: the same 8-bit exponent (the
 * same range), 8 bits of mantissa instead of 24. A worker that pushes its
 * gradients as bfloat16 sends half the bytes; the PS widens them back to
 * float32 (exactly) before it applies them.
 *
 * Error feedback: the rounding error of each element is kept and added to the
 * next step's gradient before it is rounded (as in 1-bit SGD and EF-SGD), so
 * no part of a gradient is lost for good, only delayed: over any number of
 * steps, the sum of what was sent plus what is kept equals the sum of the
 * gradients up to float32 rounding of the additions.
 */
#ifndef PSC_BF16_H
#define PSC_BF16_H

#include <stddef.h>
#include <stdint.h>

#include "psc.h"

/* The bfloat16 nearest to f (ties to even); a NaN stays a NaN, an infinity an
 * infinity, and a finite f beyond bfloat16's largest rounds to infinity. */
uint16_t psc_bf16_from_float(float f);
static inline float psc_bf16_to_float(uint16_t h)
{
    union {
        uint32_t u;
        float f;
    } v = {(uint32_t)h << 16};
    return v.f;
}

/* out[i] = bfloat16 of g[i] + resid[i]; resid[i] = what that rounding left
 * out. resid NULL: plain rounding of g (no error feedback). */
void psc_bf16_encode(const float *g, float *resid, uint16_t *out, size_t n);

/* n bfloat16 values (little-endian) in nseg segments of bytes, each at any
 * alignment and split anywhere (a value may straddle two), widened into n
 * float32 at out. The segments must hold at least 2n bytes. */
void psc_bf16_widen_iov(const psc_iov_t *seg, int nseg, float *out, size_t n);

#endif
