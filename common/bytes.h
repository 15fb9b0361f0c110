/* bytes.h — little-endian integers in byte buffers, for every on-disk and
 * on-wire format psc writes itself (checkpoints, TensorBoard records,
 * safetensors headers, the store's export), and the big-endian ones of the
 * IDX files it reads. One copy of the shifts. Any alignment; header-only.
 */
#ifndef PSC_BYTES_H
#define PSC_BYTES_H

#include <stdint.h>

static inline void psc_le_put16(void *dst, uint16_t v)
{
    uint8_t *p = dst;
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static inline void psc_le_put32(void *dst, uint32_t v)
{
    uint8_t *p = dst;
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static inline void psc_le_put64(void *dst, uint64_t v)
{
    uint8_t *p = dst;
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint16_t psc_le_get16(const void *src)
{
    const uint8_t *p = src;
    return (uint16_t)(p[0] | (uint16_t)p[1] << 8);
}

static inline uint32_t psc_le_get32(const void *src)
{
    const uint8_t *p = src;
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t psc_le_get64(const void *src)
{
    const uint8_t *p = src;
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static inline uint32_t psc_be_get32(const void *src)
{
    const uint8_t *p = src;
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

#endif
