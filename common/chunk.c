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

static int read_varint(const uint8_t *p, size_t len, size_t *at, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 64 && *at < len; shift += 7) {
        uint8_t b = p[(*at)++];
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return 0;
    }
    return -1;
}

/* Walks the fields of a Chunk message of `total` bytes whose first `avail` are
 * in msg, up to the data field: *data_tag gets the offset of data's tag (total
 * when there is no data field: proto3 leaves an empty one out), *dlen its
 * length. 0, or -1 when a field does not parse, runs past avail, or data is
 * present but not the last field ending at total. */
static int scan_fields(const uint8_t *msg, size_t avail, size_t total, size_t *data_tag, uint64_t *dlen, int *found)
{
    size_t at = 0;
    *data_tag = total;
    *dlen = 0;
    *found = 0;
    if (avail > total) return -1;
    while (at < avail) {
        size_t start = at;
        uint64_t key, v;
        if (read_varint(msg, avail, &at, &key)) return -1;
        switch (key & 7) {
        case 0:
            if (read_varint(msg, avail, &at, &v)) return -1;
            break;
        case 1:
            at += 8;
            break;
        case 5:
            at += 4;
            break;
        case 2:
            if (read_varint(msg, avail, &at, &v) || v > total - at) return -1;
            if ((key >> 3) == 15 && at + v == total) {
                *data_tag = start;
                *dlen = v;
                *found = 1;
                return 0;
            }
            if ((key >> 3) == 15) return -1; /* data that is not last */
            at += (size_t)v;
            break;
        default:
            return -1;
        }
        if (at > avail) return -1;
    }
    return 0;
}

int psc_chunk_decode(const uint8_t *msg, size_t avail, size_t total, Psc__Chunk **hdr, const uint8_t **data,
                     size_t *data_len)
{
    *hdr = NULL;
    if (data) *data = NULL;
    *data_len = 0;
    size_t data_tag;
    uint64_t dlen;
    int found;
    if (scan_fields(msg, avail, total, &data_tag, &dlen, &found)) return -1;
    if (!found) {
        /* an empty data field is not serialized (proto3) */
        if (avail != total) return -1;
    } else if (avail != total && total - dlen != avail) {
        return -1; /* the split does not fall where data begins */
    }
    *hdr = psc__chunk__unpack(NULL, data_tag, msg);
    if (!*hdr) return -1;
    *data_len = (size_t)dlen;
    if (data && found && avail == total) *data = msg + (total - dlen);
    return 0;
}

int psc_chunk_decode_prefix(const uint8_t *msg, size_t avail, size_t total, Psc__Chunk **hdr, size_t *data_off,
                            size_t *data_len)
{
    *hdr = NULL;
    *data_off = total;
    *data_len = 0;
    size_t data_tag;
    uint64_t dlen;
    int found;
    if (scan_fields(msg, avail, total, &data_tag, &dlen, &found)) return -1;
    if (!found && avail != total) return -1; /* the header runs past the prefix */
    *hdr = psc__chunk__unpack(NULL, data_tag, msg);
    if (!*hdr) return -1;
    *data_off = (size_t)(total - dlen);
    *data_len = (size_t)dlen;
    return 0;
}
