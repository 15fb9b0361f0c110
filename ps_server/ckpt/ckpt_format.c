/* ckpt_format.c — the bytes of a checkpoint (ckpt.h documents the format):
 * RocksDB keys, manifests (versions 1 and 2), tensor and row value headers,
 * encoded and decoded without a database, so the decoding a restore does can
 * be fuzzed (ckpt_check_records, tests/fuzz/fuzz_ckpt.c); and the chains of
 * deltas, computed over decoded manifests.
 *
 * Design: every length read from stored bytes is checked before it is used,
 * even behind a CRC that held. Invariants: pure functions, no RocksDB, no
 * lock; ckpt.c and ckpt_rows.c call down into this file, never the reverse.
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

void ckpt_key_row_range(char lo[CKPT_RANGE_KEY_LEN + 1], char hi[CKPT_RANGE_KEY_LEN + 1], uint64_t id)
{
    snprintf(lo, CKPT_RANGE_KEY_LEN + 1, "r/%016" PRIx64 "/", id);
    snprintf(hi, CKPT_RANGE_KEY_LEN + 1, "r/%016" PRIx64 "0", id);
}

size_t ckpt_key_row_prefix(char *k, uint64_t id, const char *table)
{
    size_t tl = strlen(table);
    PSC_ASSERT(tl >= 1 && tl <= CKPT_MAX_NAME);
    snprintf(k, CKPT_RANGE_KEY_LEN + 1, "r/%016" PRIx64 "/", id);
    k[CKPT_RANGE_KEY_LEN] = (char)(unsigned char)tl;
    memcpy(k + CKPT_RANGE_KEY_LEN + 1, table, tl);
    return CKPT_RANGE_KEY_LEN + 1 + tl;
}

void ckpt_key_row_set(char *k, size_t p, int64_t row)
{
    uint64_t u = (uint64_t)row;
    for (int i = 0; i < 8; i++) k[p + (size_t)i] = (char)(unsigned char)(u >> (56 - 8 * i));
}

int64_t ckpt_key_row_get(const char *k, size_t n, size_t p)
{
    if (n != p + 8) return -1;
    uint64_t u = 0;
    for (size_t i = 0; i < 8; i++) u = u << 8 | (unsigned char)k[p + i];
    return u > (uint64_t)INT64_MAX ? -1 : (int64_t)u;
}

size_t ckpt_key_row_bound(char *k, size_t p)
{
    memset(k + p, 0xff, 9);
    return p + 9;
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
    if (m->e) {
        for (uint32_t i = 0; i < m->info.ntensors; i++) free(m->e[i].name);
        free(m->e);
        m->e = NULL;
    }
    if (m->t) {
        for (uint32_t i = 0; i < m->info.ntables; i++) free(m->t[i].name);
        free(m->t);
        m->t = NULL;
    }
}

unsigned char *ckpt_manifest_encode(const ckpt_info_t *info, const ckpt_entry_t *e, const ckpt_table_t *t, size_t *n)
{
    int v2 = info->parent != 0 || info->ntables > 0, v3 = 0;
    for (uint32_t i = 0; i < info->ntables; i++) v3 |= t[i].dead > 0;
    size_t fixed = v2 ? CKPT_MANIFEST_FIXED_V2 : CKPT_MANIFEST_FIXED;
    size_t job_len = strlen(info->job_id);
    size_t sz = fixed + job_len + 4;
    for (uint32_t i = 0; i < info->ntensors; i++) sz += 2 + strlen(e[i].name) + 8 + 4;
    for (uint32_t i = 0; i < info->ntables; i++) sz += 1 + strlen(t[i].name) + 4 + 8 + 8 + (v3 ? 8 : 0);
    unsigned char *b = psc_xmalloc(sz), *p = b;
    p[0] = v3 ? 3 : v2 ? 2 : 1;
    p[1] = info->committed ? 1 : 0;
    psc_le_put16(p + 2, 0);
    psc_le_put32(p + 4, info->ntensors);
    psc_le_put64(p + 8, info->id);
    psc_le_put64(p + 16, (uint64_t)info->step);
    psc_le_put64(p + 24, f64_bits(info->created_unix));
    psc_le_put64(p + 32, info->bytes);
    if (v2) {
        psc_le_put64(p + 40, info->parent);
        psc_le_put32(p + 48, info->ntables);
    }
    p[fixed - 1] = (unsigned char)job_len;
    memcpy(p + fixed, info->job_id, job_len);
    p += fixed + job_len;
    for (uint32_t i = 0; i < info->ntensors; i++) {
        size_t nl = strlen(e[i].name);
        psc_le_put16(p, (uint16_t)nl);
        memcpy(p + 2, e[i].name, nl);
        psc_le_put64(p + 2 + nl, e[i].len);
        psc_le_put32(p + 2 + nl + 8, e[i].mcrc);
        p += 2 + nl + 12;
    }
    for (uint32_t i = 0; i < info->ntables; i++) {
        size_t nl = strlen(t[i].name);
        p[0] = (unsigned char)nl;
        memcpy(p + 1, t[i].name, nl);
        psc_le_put32(p + 1 + nl, t[i].record_len);
        psc_le_put64(p + 1 + nl + 4, t[i].rows);
        psc_le_put64(p + 1 + nl + 12, t[i].digest);
        if (v3) psc_le_put64(p + 1 + nl + 20, t[i].dead);
        p += 1 + nl + 20 + (v3 ? 8 : 0);
    }
    psc_le_put32(p, psc_crc32c_mask(psc_crc32c(0, b, (size_t)(p - b))));
    PSC_ASSERT((size_t)(p + 4 - b) == sz);
    *n = sz;
    return b;
}

/* The tensor entries at *pp (m->info.ntensors set); -1 when they do not fit
 * before end or disagree with the manifest's byte count. */
static int decode_tensors(const unsigned char **pp, const unsigned char *end, ckpt_manifest_t *m)
{
    const unsigned char *p = *pp;
    ckpt_info_t *in = &m->info;
    /* Each entry takes at least 15 bytes: bounds ntensors before allocating. */
    if (in->ntensors > (size_t)(end - p) / 15) return -1;
    m->e = psc_xcalloc(in->ntensors ? in->ntensors : 1, sizeof *m->e);
    uint64_t total = 0;
    for (uint32_t i = 0; i < in->ntensors; i++) {
        if (end - p < 2) return -1;
        size_t nl = psc_le_get16(p);
        if (nl < 1 || nl > CKPT_MAX_NAME || (size_t)(end - p) < 2 + nl + 12 || memchr(p + 2, 0, nl)) return -1;
        m->e[i].name = psc_xmalloc(nl + 1);
        memcpy(m->e[i].name, p + 2, nl);
        m->e[i].name[nl] = 0;
        m->e[i].len = psc_le_get64(p + 2 + nl);
        m->e[i].mcrc = psc_le_get32(p + 2 + nl + 8);
        total += m->e[i].len;
        p += 2 + nl + 12;
    }
    if (total != in->bytes) return -1;
    *pp = p;
    return 0;
}

/* The table entries at *pp (m->info.ntables set; version 3: with their
 * tombstone counts); sums info.rows. */
static int decode_tables(const unsigned char **pp, const unsigned char *end, ckpt_manifest_t *m, int v3)
{
    size_t ent = 20 + (v3 ? 8 : 0);
    const unsigned char *p = *pp;
    ckpt_info_t *in = &m->info;
    /* Each entry takes at least 22 bytes. */
    if (in->ntables > CKPT_MAX_TABLES || in->ntables > (size_t)(end - p) / 22) return -1;
    m->t = psc_xcalloc(in->ntables ? in->ntables : 1, sizeof *m->t);
    for (uint32_t i = 0; i < in->ntables; i++) {
        if (end - p < 1) return -1;
        size_t nl = p[0];
        if (nl < 1 || nl > CKPT_MAX_NAME || (size_t)(end - p) < 1 + nl + ent || memchr(p + 1, 0, nl)) return -1;
        ckpt_table_t *t = &m->t[i];
        t->name = psc_xmalloc(nl + 1);
        memcpy(t->name, p + 1, nl);
        t->name[nl] = 0;
        t->record_len = psc_le_get32(p + 1 + nl);
        t->rows = psc_le_get64(p + 1 + nl + 4);
        t->digest = psc_le_get64(p + 1 + nl + 12);
        if (v3) t->dead = psc_le_get64(p + 1 + nl + 20);
        if (t->record_len < 1 || t->record_len > CKPT_MAX_RECORD || t->dead > t->rows) return -1;
        in->rows += t->rows;
        p += 1 + nl + ent;
    }
    *pp = p;
    return 0;
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
    if (b[0] > CKPT_FORMAT_VERSION)
        return psc_seterr(err, errlen, PSC_EUNSUPPORTED,
                          "checkpoint %" PRIu64 ": manifest format %u is newer than %d (written by a newer psc?)", id,
                          b[0], CKPT_FORMAT_VERSION);
    /* The CRC held, so what follows can only fail on a bug of the writer; still
     * every length is checked before it is used. */
    int v2 = b[0] >= 2, v3 = b[0] == 3;
    size_t fixed = v2 ? CKPT_MANIFEST_FIXED_V2 : CKPT_MANIFEST_FIXED;
    const unsigned char *end = b + n - 4;
    ckpt_info_t *in = &m->info;
    if (b[0] < 1 || b[1] > 1 || (size_t)(end - b) < fixed) goto bad;
    in->committed = b[1];
    in->ntensors = psc_le_get32(b + 4);
    in->id = psc_le_get64(b + 8);
    in->step = (int64_t)psc_le_get64(b + 16);
    in->created_unix = bits_f64(psc_le_get64(b + 24));
    in->bytes = psc_le_get64(b + 32);
    if (v2) {
        in->parent = psc_le_get64(b + 40);
        in->ntables = psc_le_get32(b + 48);
    }
    size_t job_len = b[fixed - 1];
    /* A parent is older: chains end. */
    if (in->id != id || (in->parent != 0 && in->parent >= id) || job_len < 1 || job_len > CKPT_MAX_JOB_ID ||
        (size_t)(end - b) < fixed + job_len)
        goto bad;
    memcpy(in->job_id, b + fixed, job_len);
    in->job_id[job_len] = 0;
    if (memchr(in->job_id, 0, job_len)) goto bad;
    const unsigned char *p = b + fixed + job_len;
    if (decode_tensors(&p, end, m) || decode_tables(&p, end, m, v3) || p != end) goto bad;
    return 0;
bad:
    ckpt_manifest_free(m);
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

const ckpt_table_t *ckpt_manifest_find_table(const ckpt_manifest_t *m, const char *table)
{
    for (uint32_t i = 0; i < m->info.ntables; i++)
        if (strcmp(m->t[i].name, table) == 0) return &m->t[i];
    return NULL;
}

/* ---- chains ---- */

int ckpt_scan_find(const ckpt_scan_item_t *items, int n, uint64_t id)
{
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (items[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (; lo < n && items[lo].id == id; lo++)
        if (!items[lo].badkey) return lo;
    return -1;
}

int ckpt_chain(const ckpt_scan_item_t *items, int n, int i, int **chain, int *len, char *err, size_t errlen)
{
    PSC_ASSERT(i >= 0 && i < n && items[i].rc == 0);
    int cap = 8, k = 0, rc = 0;
    int *c = psc_xmalloc((size_t)cap * sizeof *c);
    c[k++] = i;
    /* Decoding checked parent < id: the walk ends. */
    for (int cur = i; items[cur].m.info.parent != 0;) {
        uint64_t pid = items[cur].m.info.parent, cid = items[cur].id;
        int j = ckpt_scan_find(items, n, pid);
        if (j < 0)
            rc = psc_seterr(err, errlen, PSC_ECORRUPT,
                            "checkpoint %" PRIu64 ": chain broken: checkpoint %" PRIu64 " (parent of %" PRIu64
                            ") is missing",
                            items[i].id, pid, cid);
        else if (items[j].rc)
            rc = psc_seterr(err, errlen, PSC_ECORRUPT,
                            "checkpoint %" PRIu64 ": chain broken: checkpoint %" PRIu64 " (parent of %" PRIu64
                            ") is damaged (%s)",
                            items[i].id, pid, cid, items[j].msg);
        else if (strcmp(items[j].m.info.job_id, items[i].m.info.job_id) != 0)
            rc = psc_seterr(err, errlen, PSC_ECORRUPT,
                            "checkpoint %" PRIu64 ": chain broken: checkpoint %" PRIu64 " (parent of %" PRIu64
                            ") is of job %s",
                            items[i].id, pid, cid, items[j].m.info.job_id);
        if (rc) {
            free(c);
            *chain = NULL;
            *len = 0;
            return rc;
        }
        if (k == cap) {
            cap *= 2;
            c = psc_xrealloc(c, (size_t)cap * sizeof *c);
        }
        c[k++] = j;
        cur = j;
    }
    *chain = c;
    *len = k;
    return 0;
}

int ckpt_chain_table(const ckpt_scan_item_t *items, const int *chain, int len, const char *table, char *err,
                     size_t errlen)
{
    const ckpt_table_t *t0 = ckpt_manifest_find_table(&items[chain[0]].m, table);
    PSC_ASSERT(t0);
    int k = 1;
    for (; k < len; k++) {
        const ckpt_table_t *t = ckpt_manifest_find_table(&items[chain[k]].m, table);
        if (!t) break;
        if (t->record_len != t0->record_len)
            return psc_seterr(err, errlen, PSC_ECORRUPT,
                              "checkpoint %" PRIu64 ": table \"%s\" has records of %u bytes, but of %u in checkpoint "
                              "%" PRIu64 " of its chain",
                              items[chain[0]].id, table, t0->record_len, t->record_len, items[chain[k]].id);
    }
    return k;
}

void ckpt_scan_needed_by(ckpt_scan_item_t *items, int n)
{
    for (int i = 0; i < n; i++) items[i].m.info.needed_by = 0;
    for (int i = 0; i < n; i++) {
        if (items[i].rc) continue;
        for (int cur = i; items[cur].m.info.parent != 0;) {
            int j = ckpt_scan_find(items, n, items[cur].m.info.parent);
            if (j < 0 || items[j].rc || strcmp(items[j].m.info.job_id, items[i].m.info.job_id) != 0) break;
            if (items[j].m.info.needed_by < items[i].id) items[j].m.info.needed_by = items[i].id;
            cur = j;
        }
    }
}

/* ---- tensor values ---- */

void ckpt_tensor_header(unsigned char hdr[CKPT_TENSOR_HEADER], uint32_t mcrc, uint64_t len)
{
    memset(hdr, 0, CKPT_TENSOR_HEADER);
    hdr[0] = CKPT_VALUE_VERSION;
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
    if (val[0] != CKPT_VALUE_VERSION)
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

/* ---- row values ---- */

void ckpt_row_header(unsigned char hdr[CKPT_ROW_HEADER], uint32_t mcrc, uint32_t len)
{
    memset(hdr, 0, CKPT_ROW_HEADER);
    hdr[0] = CKPT_VALUE_VERSION;
    psc_le_put32(hdr + 4, mcrc);
    psc_le_put32(hdr + 8, len);
}

/* MurmurHash3's 64-bit finalizer: a bijection that mixes every bit. */
static uint64_t fmix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

uint64_t ckpt_row_digest(int64_t row, uint32_t mcrc) { return fmix64(fmix64((uint64_t)row + 1) ^ mcrc); }

int ckpt_row_value_check(uint64_t id, const ckpt_table_t *t, int64_t row, const unsigned char *val, size_t n,
                         uint32_t *mcrc, char *err, size_t errlen)
{
    if (n < CKPT_ROW_HEADER)
        return psc_seterr(err, errlen, PSC_ECORRUPT,
                          "checkpoint %" PRIu64 ": table \"%s\" row %" PRId64 ": value truncated (%zu bytes)", id,
                          t->name, row, n);
    if (val[0] != CKPT_VALUE_VERSION)
        return psc_seterr(err, errlen, PSC_ECORRUPT,
                          "checkpoint %" PRIu64 ": table \"%s\" row %" PRId64 ": bad header version %u", id, t->name,
                          row, val[0]);
    uint32_t hlen = psc_le_get32(val + 8), hcrc = psc_le_get32(val + 4);
    int dead = hlen == 0 && n == CKPT_ROW_HEADER && t->dead > 0; /* a tombstone, where the manifest has them */
    if (!dead && (hlen != t->record_len || n - CKPT_ROW_HEADER != t->record_len))
        return psc_seterr(err, errlen, PSC_ECORRUPT,
                          "checkpoint %" PRIu64 ": table \"%s\" row %" PRId64
                          ": length mismatch (table records %u bytes, header %u, stored %zu)",
                          id, t->name, row, t->record_len, hlen, n - CKPT_ROW_HEADER);
    uint32_t got = psc_crc32c(0, val + CKPT_ROW_HEADER, n - CKPT_ROW_HEADER);
    if (psc_crc32c_mask(got) != hcrc)
        return psc_seterr(err, errlen, PSC_ECORRUPT,
                          "checkpoint %" PRIu64 ": table \"%s\" row %" PRId64
                          ": CRC32C mismatch (header 0x%08x, data 0x%08x)",
                          id, t->name, row, psc_crc32c_unmask(hcrc), got);
    if (mcrc) *mcrc = hcrc;
    return dead;
}

/* ---- the fuzzer's entry (ckpt.h) ---- */

int ckpt_check_records(uint64_t id, const void *manifest, size_t mlen, const void *tensor, size_t tlen, const void *row,
                       size_t rlen, ckpt_info_t *info, char *err, size_t errlen)
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
    if (rc == 0 && m.info.ntables > 0) rc = ckpt_row_value_check(id, &m.t[0], 0, row, rlen, NULL, err, errlen);
    ckpt_manifest_free(&m);
    return rc < 0 ? rc : 0;
}
