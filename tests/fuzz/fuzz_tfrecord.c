/* fuzz_tfrecord — libFuzzer target: TFRecord files of tf.Example protos
 * (worker/data/format_tfrecord.c), read from memory (data_file_open_mem) against a
 * fixed feature spec with features of every role and kind.
 *
 * The first byte says how the rest is read. Even: as the file itself
 * (framing, CRCs, truncation, lengths). Odd: as records "u16 little-endian
 * length, that many bytes", framed here with their CRCs right, so mutations
 * reach the protobuf decoding and the feature mapping past the checksums.
 * Records are read until the end or a stop; a bad record (PSC_ECORRUPT) goes
 * on to the next, as under data.bad_record_limit; every 4th record is passed
 * over by the format's skip (record sharding). After each example the batch's
 * invariants are checked (abort on a violation: a finding).
 */
#include "bytes.h"
#include "crc32c.h"
#include "reader_internal.h"
#include "psc.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static psc_feature_spec_t g_feats[] = {
    {.name = "label", .role = PSC_FEATURE_LABEL, .kind = PSC_FEATURE_INT64, .length = 1},
    {.name = "d", .role = PSC_FEATURE_DENSE, .kind = PSC_FEATURE_FLOAT, .length = 2, .transform = PSC_TRANSFORM_LOG1P},
    {.name = "i", .role = PSC_FEATURE_DENSE, .kind = PSC_FEATURE_INT64, .length = 1, .dense_offset = 2},
    {.name = "c", .role = PSC_FEATURE_CATEGORICAL, .kind = PSC_FEATURE_INT64, .length = 0, .cat_index = 2},
    {.name = "b", .role = PSC_FEATURE_CATEGORICAL, .kind = PSC_FEATURE_BYTES, .length = 1, .cat_index = 0},
    {.name = "v", .role = PSC_FEATURE_CATEGORICAL, .kind = PSC_FEATURE_BYTES, .length = 0, .cat_index = 1},
    {.name = "f", .role = PSC_FEATURE_CATEGORICAL, .kind = PSC_FEATURE_INT64, .length = 3, .cat_index = 3},
};

/* The odd mode's file: each chunk framed with its CRCs. Heap; *len its size. */
static uint8_t *frame_chunks(const uint8_t *p, size_t n, size_t *len)
{
    uint8_t *out = psc_xmalloc(n + 16 * (n / 2 + 1));
    size_t o = 0;
    while (n >= 2) {
        size_t k = psc_le_get16(p);
        p += 2, n -= 2;
        if (k > n) k = n;
        psc_le_put64(out + o, k);
        psc_le_put32(out + o + 8, psc_crc32c_mask(psc_crc32c(0, out + o, 8)));
        if (k) memcpy(out + o + 12, p, k);
        psc_le_put32(out + o + 12 + k, psc_crc32c_mask(psc_crc32c(0, p, k)));
        o += 16 + k;
        p += k, n -= k;
    }
    *len = o;
    return out;
}

static void check_batch(const data_batch_t *b)
{
    if (b->off[0] != 0 || b->off[(size_t)b->n * (size_t)b->num_cat] != b->nnz) abort();
    for (int64_t k = 0; k < (int64_t)b->n * b->num_cat; k++)
        if (b->off[k + 1] < b->off[k]) abort();
    for (int i = 0; i < b->n; i++) {
        if (b->label[i] != 0.0f && b->label[i] != 1.0f) abort();
        for (int k = 0; k < b->num_dense; k++)
            if (!isfinite(b->dense[(size_t)i * (size_t)b->num_dense + (size_t)k])) abort();
        /* the fixed-length bags: "b" (cat 0) one value, "f" (cat 3) three or none (absent) */
        const int64_t *off = b->off + (size_t)i * (size_t)b->num_cat;
        if (off[1] - off[0] > 1 || (off[4] - off[3] != 3 && off[4] != off[3])) abort();
    }
    for (int64_t k = 0; k < b->nnz; k++)
        if (b->weights[k] != 1.0f) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    psc_job_spec_t spec;
    memset(&spec, 0, sizeof spec);
    spec.data_format = PSC_DATA_TFRECORD;
    spec.features = g_feats;
    spec.num_features = (int)(sizeof g_feats / sizeof g_feats[0]);
    spec.num_dense = 3;
    spec.num_cat = 4;

    size_t len = size - 1;
    uint8_t *framed = NULL;
    const uint8_t *file = data + 1;
    if (data[0] & 1) file = framed = frame_chunks(data + 1, size - 1, &len);

    char err[512] = "";
    data_file_t *f = NULL;
    if (data_file_open_mem(file, len, "fuzz.tfrecord", &f, err, sizeof err) != 0) abort();
    data_batch_t b;
    memset(&b, 0, sizeof b);
    data_batch_reset(&b, spec.num_dense, spec.num_cat);
    for (int rec = 0;; rec++) {
        int rc = rec % 4 == 3 ? (data_format_tfrecord.skip)(f, err, sizeof err)
                              : data_format_tfrecord.next(f, &spec, &b, err, sizeof err);
        if (rc == 1 || rc == PSC_ECORRUPT) {
            if (!err[0] && rc != 1) abort(); /* a bad record always says why */
            err[0] = 0;
            check_batch(&b);
            if (b.n >= 256) data_batch_reset(&b, spec.num_dense, spec.num_cat);
            continue;
        }
        if (rc < 0 && !err[0]) abort();
        break; /* the end, or a stop */
    }
    data_batch_free(&b);
    data_file_close(f);
    free(framed);
    return 0;
}
