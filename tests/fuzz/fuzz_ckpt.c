/* fuzz_ckpt — libFuzzer target: checkpoint records as read back from RocksDB
 * (ps_server/ckpt.c): a manifest, then the value of its first tensor.
 * Input: a 2-byte little-endian manifest length, the manifest, the tensor
 * value. Random bytes would never get past the manifest's CRC32C, so unless
 * the first byte of the input is odd the harness writes the right CRC into
 * the manifest's last 4 bytes, and takes the checkpoint id from the manifest,
 * so the fuzzer explores the decoding behind both checks. */
#include "ckpt.h"
#include "crc32c.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    size_t mlen = (size_t)(data[0] | data[1] << 8);
    if (mlen > size - 2) mlen = size - 2;
    uint8_t *m = malloc(mlen ? mlen : 1);
    memcpy(m, data + 2, mlen);
    uint64_t id = 1;
    if (!(data[0] & 1) && mlen >= 8) {
        uint32_t crc = psc_crc32c_mask(psc_crc32c(0, m, mlen - 4));
        for (int i = 0; i < 4; i++) m[mlen - 4 + (size_t)i] = (uint8_t)(crc >> (8 * i));
    }
    if (mlen >= 16) {
        id = 0;
        for (int i = 7; i >= 0; i--) id = id << 8 | m[8 + i];
    }
    ckpt_info_t info;
    char err[512];
    ckpt_check_records(id, m, mlen, data + 2 + mlen, size - 2 - mlen, &info, err, sizeof err);
    free(m);
    return 0;
}
