/* fuzz_ckpt — libFuzzer target: checkpoint records as read back from RocksDB
 * (ps_server/ckpt/ckpt.c): a manifest (format version 1, 2 or 3), the value of its
 * first tensor, and the value of a row of its first table.
 * Input: a 2-byte little-endian manifest length, the manifest, a 2-byte
 * little-endian tensor value length, the tensor value, and the row value (the
 * rest); a missing part is empty. Random bytes would never get past the
 * manifest's CRC32C, so unless the first byte of the input is odd the harness
 * writes the right CRC into the manifest's last 4 bytes and the row record's
 * CRC into the row header, and takes the checkpoint id from the manifest, so
 * the fuzzer explores the decoding behind the checks. */
#include "ckpt.h"
#include "crc32c.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A copy of the part at data[*off] of the length given by its 2-byte prefix
 * (clamped to what is left), or of the rest when prefixed is 0. */
static uint8_t *part(const uint8_t *data, size_t size, size_t *off, int prefixed, size_t *len)
{
    size_t n = size - *off;
    if (prefixed) {
        if (n < 2) {
            n = 0;
        } else {
            size_t want = (size_t)(data[*off] | data[*off + 1] << 8);
            *off += 2;
            n = want < size - *off ? want : size - *off;
        }
    }
    uint8_t *p = malloc(n ? n : 1);
    if (n) memcpy(p, data + *off, n);
    *off += n;
    *len = n;
    return p;
}

static void put_crc(uint8_t *at, const uint8_t *data, size_t n)
{
    uint32_t crc = psc_crc32c_mask(psc_crc32c(0, data, n));
    for (int i = 0; i < 4; i++) at[i] = (uint8_t)(crc >> (8 * i));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    int fix = !(data[0] & 1);
    size_t off = 0, mlen, tlen, rlen;
    uint8_t *m = part(data, size, &off, 1, &mlen);
    uint8_t *t = part(data, size, &off, 1, &tlen);
    uint8_t *r = part(data, size, &off, 0, &rlen);
    if (fix && mlen >= 8) put_crc(m + mlen - 4, m, mlen - 4);
    if (fix && rlen >= 12) put_crc(r + 4, r + 12, rlen - 12);
    uint64_t id = 1;
    if (mlen >= 16) {
        id = 0;
        for (int i = 7; i >= 0; i--) id = id << 8 | m[8 + i];
    }
    ckpt_info_t info;
    char err[512];
    ckpt_check_records(id, m, mlen, t, tlen, r, rlen, &info, err, sizeof err);
    free(m);
    free(t);
    free(r);
    return 0;
}
