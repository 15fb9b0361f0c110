/* chunk.c — see chunk.h. */
#include "chunk.h"

#include "psc.h"

size_t psc_chunk_header_bound(const Psc__Chunk *c)
{
    Psc__Chunk h = *c;
    h.data.len = 0;
    h.data.data = NULL;
    return psc__chunk__get_packed_size(&h) + 1 + 10;
}

size_t psc_chunk_header_pack(const Psc__Chunk *c, size_t data_len, uint8_t *buf)
{
    Psc__Chunk h = *c;
    h.data.len = 0; /* proto3: an empty bytes field is not serialized */
    h.data.data = NULL;
    size_t n = psc__chunk__pack(&h, buf);
    if (data_len == 0) return n;
    buf[n++] = (15 << 3) | 2; /* field 15, wire type LEN */
    uint64_t v = data_len;
    while (v >= 0x80) {
        buf[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    buf[n++] = (uint8_t)v;
    return n;
}
