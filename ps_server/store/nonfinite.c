/* nonfinite.c — see nonfinite.h. */
#include "nonfinite.h"

#include <stdint.h>
#include <string.h>

/* Index of the first non-finite float among n at p (any alignment), or n. The
 * scan tests exponent bits on integer loads: an exponent of all ones (Inf,
 * NaN) plus one carries into bit 31; no finite value's does. The lanes are
 * GCC/Clang vector values (4 x uint32) in four independent accumulators, so
 * they stay in registers at any optimization level and the scan runs at
 * memory speed. (An array of 8 lanes, which -O2 kept on the stack, made every
 * iteration wait for a store-to-load forward: ~10 GB/s, slower than Adam's
 * update itself; tests/bench/NOTES.md.) Only a chunk that has a bad value is
 * scanned again to find where. */
/* The finiteness scan: a float is non-finite when its exponent bits are all
 * ones; (u & exp) + one carries into bit 31 exactly then, so OR-ing that over
 * a block and testing bit 31 checks 4 (SSE2) or 8 (AVX2) floats an
 * instruction, with the lanes kept in registers (NOTES.md change 2). The AVX2
 * copy is chosen at run time like optim.c's, and halves the scan of a chunk
 * that is in cache (a request just received). */
typedef uint32_t scan_v4u __attribute__((vector_size(16)));
#define SCAN_EXP 0x7f800000u
#define SCAN_ONE 0x00800000u

/* The OR of (u & exp) + one over nb blocks of 16 floats. */
static uint32_t scan_blocks_base(const unsigned char *b, size_t nb)
{
    const scan_v4u exp = {SCAN_EXP, SCAN_EXP, SCAN_EXP, SCAN_EXP};
    const scan_v4u one = {SCAN_ONE, SCAN_ONE, SCAN_ONE, SCAN_ONE};
    scan_v4u a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    for (size_t i = 0; i < nb; i++) {
        scan_v4u u0, u1, u2, u3;
        memcpy(&u0, b + 64 * i, 16);
        memcpy(&u1, b + 64 * i + 16, 16);
        memcpy(&u2, b + 64 * i + 32, 16);
        memcpy(&u3, b + 64 * i + 48, 16);
        a0 |= (u0 & exp) + one;
        a1 |= (u1 & exp) + one;
        a2 |= (u2 & exp) + one;
        a3 |= (u3 & exp) + one;
    }
    a0 |= a1 | a2 | a3;
    return a0[0] | a0[1] | a0[2] | a0[3];
}

#if defined(__x86_64__)
typedef uint32_t scan_v8u __attribute__((vector_size(32)));

/* The same over nb blocks of 32 floats, 8 a lane. */
__attribute__((target("avx2"))) static uint32_t scan_blocks_avx2(const unsigned char *b, size_t nb)
{
    const scan_v8u exp = {SCAN_EXP, SCAN_EXP, SCAN_EXP, SCAN_EXP, SCAN_EXP, SCAN_EXP, SCAN_EXP, SCAN_EXP};
    const scan_v8u one = {SCAN_ONE, SCAN_ONE, SCAN_ONE, SCAN_ONE, SCAN_ONE, SCAN_ONE, SCAN_ONE, SCAN_ONE};
    scan_v8u a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    for (size_t i = 0; i < nb; i++) {
        scan_v8u u0, u1, u2, u3;
        memcpy(&u0, b + 128 * i, 32);
        memcpy(&u1, b + 128 * i + 32, 32);
        memcpy(&u2, b + 128 * i + 64, 32);
        memcpy(&u3, b + 128 * i + 96, 32);
        a0 |= (u0 & exp) + one;
        a1 |= (u1 & exp) + one;
        a2 |= (u2 & exp) + one;
        a3 |= (u3 & exp) + one;
    }
    a0 |= a1 | a2 | a3;
    return a0[0] | a0[1] | a0[2] | a0[3] | a0[4] | a0[5] | a0[6] | a0[7];
}
#endif

/* The index of the first non-finite float of the n at p (any alignment), or n. */
size_t nonfinite_first(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint32_t bad;
    size_t done;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2")) {
        bad = scan_blocks_avx2(b, n / 32);
        done = 32 * (n / 32);
    } else
#endif
    {
        bad = scan_blocks_base(b, n / 16);
        done = 16 * (n / 16);
    }
    for (size_t i = done; i < n; i++) {
        uint32_t u;
        memcpy(&u, b + 4 * i, 4);
        bad |= (u & SCAN_EXP) + SCAN_ONE;
    }
    if (!(bad & 0x80000000u)) return n;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, b + 4 * i, 4);
        if ((u & SCAN_EXP) == SCAN_EXP) return i;
    }
    return n;
}

/* first_nonfinite over n floats held in segments split anywhere (a float may
 * straddle segments): the index of the first non-finite one, or n. */
static int scan_run(void *arg, const unsigned char *p, size_t m, size_t e)
{
    size_t bad = nonfinite_first(p, m);
    if (bad == m) return 0;
    *(size_t *)arg = e + bad;
    return 1;
}

size_t nonfinite_first_iov(const psc_iov_t *g, int ng, size_t n)
{
    size_t at = n;
    psc_iov_float_runs(g, ng, n, scan_run, &at);
    return at;
}

