/* crc32c.c — CRC-32C: slicing-by-8 tables, and SSE4.2 on x86-64 when the CPU has it.
 *
 * Slicing-by-8: table[0] is the classic byte-at-a-time table of the reflected
 * polynomial; table[k][b] is the CRC of byte b followed by k zero bytes, so one
 * step folds 8 input bytes with 8 lookups. Words are assembled from bytes in
 * little-endian order, so the code is right on any host byte order and any
 * alignment (compilers turn the assembly into one load on little-endian hosts).
 *
 * The state inside is the inverted CRC (~crc), as in every reflected CRC-32:
 * psc_crc32c inverts on entry and on exit, which is what makes chaining work.
 */
#include "crc32c.h"

#include "bytes.h"

#include <pthread.h>
#include <string.h>

#define CRC32C_POLY 0x82F63B78u

static uint32_t crc_table[8][256];
static int crc_hw;
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define PSC_CRC32C_X86 1
#include <nmmintrin.h>

/* Compiled for SSE4.2 whatever the build's -march; only called after cpuid said yes. */
__attribute__((target("sse4.2"))) static uint32_t crc32c_sse42(uint32_t state, const unsigned char *p, size_t n)
{
    uint64_t s = state;
    /* Unaligned 8-byte loads cost nothing extra on x86-64; memcpy keeps them defined C. */
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        s = _mm_crc32_u64(s, w);
        p += 8;
        n -= 8;
    }
    uint32_t s32 = (uint32_t)s;
    while (n--) s32 = _mm_crc32_u8(s32, *p++);
    return s32;
}
#endif

static void crc_init(void)
{
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t c = b;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (CRC32C_POLY & (0u - (c & 1u)));
        crc_table[0][b] = c;
    }
    for (int t = 1; t < 8; t++)
        for (int b = 0; b < 256; b++) {
            uint32_t c = crc_table[t - 1][b];
            crc_table[t][b] = (c >> 8) ^ crc_table[0][c & 0xff];
        }
#ifdef PSC_CRC32C_X86
    __builtin_cpu_init();
    crc_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#endif
}

/* Slicing-by-8 on the inverted state. */
static uint32_t crc32c_sb8(uint32_t s, const unsigned char *p, size_t n)
{
    while (n >= 8) {
        uint32_t lo = s ^ psc_le_get32(p);
        uint32_t hi = psc_le_get32(p + 4);
        s = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^ crc_table[5][(lo >> 16) & 0xff] ^
            crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xff] ^ crc_table[2][(hi >> 8) & 0xff] ^
            crc_table[1][(hi >> 16) & 0xff] ^ crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) s = (s >> 8) ^ crc_table[0][(s ^ *p++) & 0xff];
    return s;
}

uint32_t psc_crc32c_portable(uint32_t crc, const void *data, size_t n)
{
    pthread_once(&crc_once, crc_init);
    if (n == 0) return crc;
    return ~crc32c_sb8(~crc, data, n);
}

uint32_t psc_crc32c(uint32_t crc, const void *data, size_t n)
{
    pthread_once(&crc_once, crc_init);
    if (n == 0) return crc;
#ifdef PSC_CRC32C_X86
    if (crc_hw) return ~crc32c_sse42(~crc, data, n);
#endif
    return ~crc32c_sb8(~crc, data, n);
}

int psc_crc32c_accelerated(void)
{
    pthread_once(&crc_once, crc_init);
    return crc_hw;
}

uint32_t psc_crc32c_mask(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

uint32_t psc_crc32c_unmask(uint32_t masked)
{
    uint32_t r = masked - 0xa282ead8u;
    return (r >> 17) | (r << 15);
}
