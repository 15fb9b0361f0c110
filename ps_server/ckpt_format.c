/* ckpt_format.c — the bytes of a checkpoint (ckpt.h documents the format):
 * RocksDB keys, manifests and tensor value headers, encoded and decoded
 * without a database, so the decoding a restore does can be fuzzed
 * (ckpt_check_records, tests/fuzz/fuzz_ckpt.c).
 *
 * Design: every length read from stored bytes is checked before it is used,
 * even behind a CRC that held. Invariants: pure functions, no RocksDB, no
 * lock; ckpt.c calls down into this file, never the reverse.
 */
#include "ckpt_internal.h"

#include "bytes.h"
#include "crc32c.h"
#include "psc.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- numbers ---- */

static uint64_t f64_bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, 8);
    return u;
}

static double bits_f64(uint64_t u)
{
    double d;
    memcpy(&d, &u, 8);
    return d;
}

/* ---- keys ---- */

/* ---- keys ---- */

size_t ckpt_key_manifest(char *k, uint64_t id)
{
    return (size_t)snprintf(k, CKPT_KEY_MAX, "m/%016" PRIx64, id);
}

size_t ckpt_key_tensor(char *k, uint64_t id, const char *name)
{
    return (size_t)snprintf(k, CKPT_KEY_MAX, "t/%016" PRIx64 "/%s", id, name);
}

void ckpt_key_tensor_range(char lo[CKPT_RANGE_KEY_LEN + 1], char hi[CKPT_RANGE_KEY_LEN + 1], uint64_t id)
{
    snprintf(lo, CKPT_RANGE_KEY_LEN + 1, "t/%016" PRIx64 "/", id);
    snprintf(hi, CKPT_RANGE_KEY_LEN + 1, "t/%016" PRIx64 "0", id);
}

int ckpt_parse_manifest_key(const char *k, size_t n, uint64_t *id)
{
    if (n != 2 + CKPT_ID_HEX || k[0] != 'm' || k[1] != '/') return -1;
    uint64_t v = 0;
    for (size_t i = 2; i < n; i++) {
        char c = k[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v << 4 | (uint64_t)d;
    }
    *id = v;
    return 0;
}

/* ---- manifests ---- */

void ckpt_manifest_free(ckpt_manifest_t *m)
{
    if (!m->e) return;
    for (uint32_t i = 0; i < m->info.ntensors; i++) free(m->e[i].name);
    free(m->e);
    m->e = NULL;
}

unsigned char *ckpt_manifest_encode(const ckpt_info_t *info, const ckpt_entry_t *e, size_t *n)
{
    size_t job_len = strlen(info->job_id);
    size_t sz = CKPT_MANIFEST_FIXED + job_len + 4;
    for (uint32_t i = 0; i < info->ntensors; i++) sz += 2 + strlen(e[i].name) + 8 + 4;
    unsigned char *b = psc_xmalloc(sz), *p = b;
    p[0] = CKPT_FORMAT_VERSION;
    p[1] = info->committed ? 1 : 0;
    psc_le_put16(p + 2, 0);
    psc_le_put32(p + 4, info->ntensors);
    psc_le_put64(p + 8, info->id);
    psc_le_put64(p + 16, (uint64_t)info->step);
    psc_le_put64(p + 24, f64_bits(info->created_unix));
    psc_le_put64(p + 32, info->bytes);
    p[40] = (unsigned char)job_len;
    memcpy(p + CKPT_MANIFEST_FIXED, info->job_id, job_len);
    p += CKPT_MANIFEST_FIXED + job_len;
    for (uint32_t i = 0; i < info->ntensors; i++) {
        size_t nl = strlen(e[i].name);
        psc_le_put16(p, (uint16_t)nl);
        memcpy(p + 2, e[i].name, nl);
        psc_le_put64(p + 2 + nl, e[i].len);
        psc_le_put32(p + 2 + nl + 8, e[i].mcrc);
        p += 2 + nl + 12;
    }
    psc_le_put32(p, psc_crc32c_mask(psc_crc32c(0, b, (size_t)(p - b))));
    PSC_ASSERT((size_t)(p + 4 - b) == sz);
    *n = sz;
    return b;
}

int ckpt_manifest_decode(const unsigned char *b, size_t n, uint64_t id, ckpt_manifest_t *m, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    if (n < CKPT_MANIFEST_FIXED + 1 + 4)
        return psc_seterr(err, errlen, PSC_ECORRUPT, "checkpoint %" PRIu64 ": manifest truncated (%zu bytes)", id, n);
    uint32_t stored = psc_crc32c_unmask(psc_le_get32(b + n - 4));
    uint32_t computed = psc_crc32c(0, b, n - 4);
    if (stored != computed)
        return psc_seterr(err, errlen, PSC_ECORRUPT,
                          "checkpoint %" PRIu64 ": manifest CRC32C mismatch (stored 0x%08x, computed 0x%08x)", id,
                          stored, computed);
    if (b[0] != CKPT_FORMAT_VERSION)
        return psc_seterr(err, errlen, PSC_EUNSUPPORTED,
                          "checkpoint %" PRIu64 ": manifest format %u is not %d (written by a newer psc?)", id, b[0],
                          CKPT_FORMAT_VERSION);
    /* The CRC held, so what follows can only fail on a bug of the writer; still
     * every length is checked before it is used. */
    const unsigned char *end = b + n - 4;
    ckpt_info_t *in = &m->info;
    if (b[1] > 1) goto bad;
    in->committed = b[1];
    in->ntensors = psc_le_get32(b + 4);
    in->id = psc_le_get64(b + 8);
    in->step = (int64_t)psc_le_get64(b + 16);
    in->created_unix = bits_f64(psc_le_get64(b + 24));
    in->bytes = psc_le_get64(b + 32);
    size_t job_len = b[40];
    if (in->id != id || job_len < 1 || job_len > CKPT_MAX_JOB_ID || (size_t)(end - b) < CKPT_MANIFEST_FIXED + job_len)
        goto bad;
    memcpy(in->job_id, b + CKPT_MANIFEST_FIXED, job_len);
    in->job_id[job_len] = 0;
    if (memchr(in->job_id, 0, job_len)) goto bad;
    const unsigned char *p = b + CKPT_MANIFEST_FIXED + job_len;
    /* Each entry takes at least 15 bytes: bounds ntensors before allocating. */
    if (in->ntensors > (size_t)(end - p) / 15) goto bad;
    m->e = psc_xcalloc(in->ntensors ? in->ntensors : 1, sizeof *m->e);
    uint64_t total = 0;
    for (uint32_t i = 0; i < in->ntensors; i++) {
        if (end - p < 2) goto bad_free;
        size_t nl = psc_le_get16(p);
        if (nl < 1 || nl > CKPT_MAX_NAME || (size_t)(end - p) < 2 + nl + 12 || memchr(p + 2, 0, nl)) goto bad_free;
        m->e[i].name = psc_xmalloc(nl + 1);
        memcpy(m->e[i].name, p + 2, nl);
        m->e[i].name[nl] = 0;
        m->e[i].len = psc_le_get64(p + 2 + nl);
        m->e[i].mcrc = psc_le_get32(p + 2 + nl + 8);
        total += m->e[i].len;
        p += 2 + nl + 12;
    }
    if (p != end || total != in->bytes) goto bad_free;
    return 0;
bad_free:
    ckpt_manifest_free(m);
bad:
    memset(m, 0, sizeof *m);
    return psc_seterr(err, errlen, PSC_ECORRUPT, "checkpoint %" PRIu64 ": manifest malformed (%zu bytes)", id, n);
}

void ckpt_manifest_set_committed(unsigned char *b, size_t n)
{
    PSC_ASSERT(n >= CKPT_MANIFEST_FIXED + 4);
    b[1] = 1;
    psc_le_put32(b + n - 4, psc_crc32c_mask(psc_crc32c(0, b, n - 4)));
}

const ckpt_entry_t *ckpt_manifest_find(const ckpt_manifest_t *m, const char *name)
{
    for (uint32_t i = 0; i < m->info.ntensors; i++)
        if (strcmp(m->e[i].name, name) == 0) return &m->e[i];
    return NULL;
}

/* ---- tensor values ---- */

void ckpt_tensor_header(unsigned char hdr[CKPT_TENSOR_HEADER], uint32_t mcrc, uint64_t len)
{
    memset(hdr, 0, CKPT_TENSOR_HEADER);
    hdr[0] = CKPT_FORMAT_VERSION;
    psc_le_put32(hdr + 4, mcrc);
    psc_le_put64(hdr + 8, len);
}

int ckpt_tensor_value_check(uint64_t id, const ckpt_entry_t *e, const unsigned char *val, size_t n, void **copy,
                              char *err, size_t errlen)
{
    if (n < CKPT_TENSOR_HEADER)
        return psc_seterr(err, errlen, PSC_ECORRUPT,
                          "checkpoint %" PRIu64 ": tensor \"%s\": value truncated (%zu bytes)", id, e->name, n);
    uint64_t hlen = psc_le_get64(val + 8);
    uint32_t hcrc = psc_le_get32(val + 4);
    if (val[0] != CKPT_FORMAT_VERSION)
        return psc_seterr(err, errlen, PSC_ECORRUPT, "checkpoint %" PRIu64 ": tensor \"%s\": bad header version %u",
                          id, e->name, val[0]);
    if (hlen != e->len || n - CKPT_TENSOR_HEADER != e->len)
        return psc_seterr(err, errlen, PSC_ECORRUPT,
                          "checkpoint %" PRIu64 ": tensor \"%s\": length mismatch (manifest %" PRIu64
                          " bytes, header %" PRIu64 ", stored %zu)",
                          id, e->name, e->len, hlen, n - CKPT_TENSOR_HEADER);
    uint32_t want = psc_crc32c_unmask(e->mcrc);
    uint32_t got = psc_crc32c(0, val + CKPT_TENSOR_HEADER, n - CKPT_TENSOR_HEADER);
    if (got != want || hcrc != e->mcrc)
        return psc_seterr(err, errlen, PSC_ECORRUPT,
                          "checkpoint %" PRIu64 ": tensor \"%s\": CRC32C mismatch (manifest 0x%08x, header 0x%08x, "
                          "data 0x%08x)",
                          id, e->name, want, psc_crc32c_unmask(hcrc), got);
    if (copy) {
        *copy = psc_xmalloc(e->len ? e->len : 1);
        if (e->len) memcpy(*copy, val + CKPT_TENSOR_HEADER, e->len);
    }
    return 0;
}

/* ---- the fuzzer's entry (ckpt.h) ---- */

int ckpt_check_records(uint64_t id, const void *manifest, size_t mlen, const void *tensor, size_t tlen,
                       ckpt_info_t *info, char *err, size_t errlen)
{
    ckpt_manifest_t m;
    int rc = ckpt_manifest_decode(manifest, mlen, id, &m, err, errlen);
    if (rc) return rc;
    if (info) *info = m.info;
    if (m.info.ntensors > 0) {
        void *copy = NULL;
        rc = ckpt_tensor_value_check(id, &m.e[0], tensor, tlen, &copy, err, errlen);
        free(copy);
    }
    ckpt_manifest_free(&m);
    return rc;
}
