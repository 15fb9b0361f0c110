/* export.c — a running cluster's variables as a safetensors file (see export.h).
 *
 * Design: three steps. (1) Status on every PS at once: job id, readiness and
 * the pieces each holds. (2) psc_export_plan, pure: partitions joined, dtypes
 * chosen, tensors ordered and laid out. (3) Pulls in rounds of at most
 * EXPORT_WINDOW bytes (EXPORT_ROUND_OPS calls), EXPORT_IN_FLIGHT at a time
 * across all PS, each reply landing directly in the window at its place in
 * the file's byte buffer; after each round the window is appended to
 * "<path>.tmp". Since the tensors are contiguous and each tensor's pieces are
 * contiguous in part order, the byte buffer is one run of chunks and a round
 * is one contiguous range of it: memory stays at one window however big the
 * model. global_step is pulled first, alone, so that the header's metadata
 * carries the very value the file holds.
 *
 * Invariants: the header is written before any data and never rewritten; the
 * tmp file is renamed over path only after every byte was written and
 * fsync'ed, and is unlinked on every failure path (single exit, `fail:`).
 * The JSON is written by hand (the JSON library belongs to the config
 * parsers): compact, as the reference writer emits it, strings escaped.
 */
#include "export.h"
#include "export_tables.h"

#include "bytes.h"
#include "chunk.h"
#include "psc.h"
#include "psc.pb-c.h"
#include "rpc.h"
#include "wire.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXPORT_IN_FLIGHT 16              /* Pull calls in flight, all PS together */
#define EXPORT_WINDOW ((size_t)64 << 20) /* bytes pulled per round (32 full chunks) */
#define EXPORT_ROUND_OPS 256             /* calls per round (many small variables) */
#define EXPORT_HDR_CAP 208               /* a packed PullRequest: name < 128 + 3 varints */
#define EXPORT_PART_MAX 999999999        /* part indices beyond are not partitions */

const char *psc_st_dtype_name(enum psc_st_dtype d) { return d == PSC_ST_I64 ? "I64" : "F32"; }

static size_t st_dtype_size(enum psc_st_dtype d) { return d == PSC_ST_I64 ? 8 : 4; }

/* ---- partitions and the plan ---- */

int psc_export_part_index(const char *name, size_t *base_len)
{
    const char *p = strrchr(name, '/');
    if (!p || p == name || strncmp(p, "/part_", 6) != 0) return -1;
    const char *d = p + 6;
    size_t nd = strlen(d);
    if (nd == 0 || nd > 9 || (d[0] == '0' && nd > 1)) return -1;
    long v = 0;
    for (size_t i = 0; i < nd; i++) {
        if (d[i] < '0' || d[i] > '9') return -1;
        v = v * 10 + (d[i] - '0');
    }
    if (v > EXPORT_PART_MAX) return -1;
    if (base_len) *base_len = (size_t)(p - name);
    return (int)v;
}

/* 1 if s is valid UTF-8 (the header must be), without overlongs or surrogates. */
static int utf8_valid(const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    while (*s) {
        unsigned c = *s;
        int n;
        unsigned min;
        if (c < 0x80) {
            s++;
            continue;
        }
        if ((c & 0xE0) == 0xC0) {
            n = 1;
            min = 0x80;
            c &= 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            n = 2;
            min = 0x800;
            c &= 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            n = 3;
            min = 0x10000;
            c &= 0x07;
        } else
            return 0;
        for (int i = 1; i <= n; i++) {
            if ((s[i] & 0xC0) != 0x80) return 0;
            c = (c << 6) | (s[i] & 0x3F);
        }
        if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
        s += n + 1;
    }
    return 1;
}

/* Elements of a shape (1 for rank 0); -1 on a negative dim or overflow. */
static int64_t shape_numel(const int64_t *shape, int rank)
{
    int64_t n = 1;
    for (int d = 0; d < rank; d++) {
        if (shape[d] < 0 || __builtin_mul_overflow(n, shape[d], &n)) return -1;
    }
    return n;
}

/* A piece's sort key: its base name (the whole name when not a part) and part. */
typedef struct piece_key {
    const char *name;
    size_t base_len;
    int part; /* -1: not a partition */
    int idx;  /* index into the caller's pieces */
} piece_key_t;

static int base_cmp(const piece_key_t *a, const piece_key_t *b)
{
    int c = memcmp(a->name, b->name, PSC_MIN(a->base_len, b->base_len));
    if (c) return c;
    return (a->base_len > b->base_len) - (a->base_len < b->base_len);
}

static int key_cmp(const void *pa, const void *pb)
{
    const piece_key_t *a = pa, *b = pb;
    int c = base_cmp(a, b);
    if (c) return c;
    if (a->part != b->part) return a->part < b->part ? -1 : 1;
    return (a->idx > b->idx) - (a->idx < b->idx);
}

/* File order: larger elements first (the reference writer's order, so each
 * tensor starts aligned to its element size), then by name in byte order. */
static int tensor_cmp(const void *pa, const void *pb)
{
    const psc_export_tensor_t *a = pa, *b = pb;
    size_t sa = st_dtype_size(a->dtype), sb = st_dtype_size(b->dtype);
    if (sa != sb) return sa > sb ? -1 : 1;
    return strcmp(a->name, b->name);
}

void psc_export_fmt_shape(char *buf, size_t len, const int64_t *shape, int rank)
{
    size_t at = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < rank && at < len; d++)
        at += (size_t)snprintf(buf + at, len - at, "%s%" PRId64, d ? ", " : "", shape[d]);
    if (at < len) snprintf(buf + at, len - at, "]");
}

/* Checks one group of keys (same base) and fills tensor t from it. */
static int plan_group(const psc_export_piece_t *pieces, const piece_key_t *k, int n, psc_export_tensor_t *t, char *err,
                      size_t errlen)
{
    const psc_export_piece_t *p0 = &pieces[k[0].idx];
    memset(t, 0, sizeof *t);
    memcpy(t->name, k[0].name, k[0].base_len);
    t->name[k[0].base_len] = '\0';
    t->npieces = n;
    if (!utf8_valid(t->name))
        return psc_seterr(err, errlen, PSC_EMISMATCH, "variable \"%s\" (ps %d): name is not valid UTF-8", p0->name,
                          p0->ps);
    if (strcmp(t->name, "__metadata__") == 0)
        return psc_seterr(err, errlen, PSC_EMISMATCH,
                          "variable \"__metadata__\" (ps %d): the name is reserved by safetensors", p0->ps);

    if (k[0].part < 0) { /* a whole variable: alone in its group */
        if (n > 1) {
            const psc_export_piece_t *p1 = &pieces[k[1].idx];
            if (k[1].part < 0)
                return psc_seterr(err, errlen, PSC_EMISMATCH, "%s is held twice: by ps %d and ps %d", t->name, p0->ps,
                                  p1->ps);
            return psc_seterr(err, errlen, PSC_EMISMATCH,
                              "%s is both a whole variable (ps %d) and partitioned (%s on ps %d)", t->name, p0->ps,
                              p1->name, p1->ps);
        }
        if (strcmp(t->name, "global_step") == 0) {
            if (p0->bytes != 8)
                return psc_seterr(err, errlen, PSC_EMISMATCH, "global_step (ps %d) has %" PRIu64 " bytes, not 8",
                                  p0->ps, p0->bytes);
            t->dtype = PSC_ST_I64;
            t->rank = 0;
            t->bytes = 8;
            return 0;
        }
        int64_t numel = shape_numel(p0->shape, p0->rank);
        if (numel < 0 || (uint64_t)numel > UINT64_MAX / 4 || (uint64_t)numel * 4 != p0->bytes) {
            char s[96];
            psc_export_fmt_shape(s, sizeof s, p0->shape, p0->rank);
            return psc_seterr(err, errlen, PSC_EMISMATCH,
                              "%s (ps %d): %" PRIu64 " bytes do not fit shape %s of float32", t->name, p0->ps,
                              p0->bytes, s);
        }
        t->dtype = PSC_ST_F32;
        t->rank = p0->rank;
        memcpy(t->shape, p0->shape, sizeof t->shape);
        t->bytes = p0->bytes;
        return 0;
    }

    /* parts 0..n-1, each once, in order */
    if (strcmp(t->name, "global_step") == 0)
        return psc_seterr(err, errlen, PSC_EMISMATCH, "%s (ps %d): global_step cannot be partitioned", p0->name,
                          p0->ps);
    for (int i = 0; i < n; i++) {
        const psc_export_piece_t *pi = &pieces[k[i].idx];
        if (k[i].part < i) /* the same part again (sorted: it equals i - 1) */
            return psc_seterr(err, errlen, PSC_EMISMATCH, "%s is held twice: by ps %d and ps %d", pi->name,
                              pieces[k[i - 1].idx].ps, pi->ps);
        if (k[i].part > i)
            return psc_seterr(err, errlen, PSC_EMISMATCH, "%s/part_%d is missing (%s has part_%d on ps %d)", t->name, i,
                              t->name, k[i].part, pi->ps);
    }
    t->dtype = PSC_ST_F32;
    t->rank = p0->rank;
    if (t->rank < 1)
        return psc_seterr(err, errlen, PSC_EMISMATCH,
                          "%s (ps %d): a partition has rank 0, nothing to join along axis 0", p0->name, p0->ps);
    memcpy(t->shape, p0->shape, sizeof t->shape);
    t->shape[0] = 0;
    for (int i = 0; i < n; i++) {
        const psc_export_piece_t *pi = &pieces[k[i].idx];
        char s0[96], si[96];
        psc_export_fmt_shape(s0, sizeof s0, p0->shape, p0->rank);
        psc_export_fmt_shape(si, sizeof si, pi->shape, pi->rank);
        if (pi->rank != p0->rank)
            return psc_seterr(err, errlen, PSC_EMISMATCH,
                              "%s: parts disagree on rank: %s (ps %d) is %s, %s (ps %d) is %s", t->name, p0->name,
                              p0->ps, s0, pi->name, pi->ps, si);
        for (int d = 1; d < p0->rank; d++)
            if (pi->shape[d] != p0->shape[d])
                return psc_seterr(err, errlen, PSC_EMISMATCH,
                                  "%s: parts disagree on dimension %d: %s (ps %d) is %s, %s (ps %d) is %s", t->name, d,
                                  p0->name, p0->ps, s0, pi->name, pi->ps, si);
        int64_t numel = shape_numel(pi->shape, pi->rank);
        if (numel < 0 || (uint64_t)numel > UINT64_MAX / 4 || (uint64_t)numel * 4 != pi->bytes)
            return psc_seterr(err, errlen, PSC_EMISMATCH,
                              "%s (ps %d): %" PRIu64 " bytes do not fit shape %s of float32", pi->name, pi->ps,
                              pi->bytes, si);
        if (__builtin_add_overflow(t->shape[0], pi->shape[0], &t->shape[0]) ||
            __builtin_add_overflow(t->bytes, pi->bytes, &t->bytes))
            return psc_seterr(err, errlen, PSC_EMISMATCH, "%s: joined size overflows", t->name);
    }
    return 0;
}

int psc_export_plan(psc_export_piece_t *pieces, int npieces, psc_export_tensor_t **tensors, int *ntensors, char *err,
                    size_t errlen)
{
    *tensors = NULL;
    *ntensors = 0;
    if (npieces < 0) return psc_seterr(err, errlen, PSC_EINVAL, "negative piece count");
    size_t cnt = npieces ? (size_t)npieces : 1;
    piece_key_t *keys = psc_xcalloc(cnt, sizeof *keys);
    for (int i = 0; i < npieces; i++) {
        keys[i].name = pieces[i].name;
        keys[i].idx = i;
        keys[i].part = psc_export_part_index(pieces[i].name, &keys[i].base_len);
        if (keys[i].part < 0) keys[i].base_len = strlen(pieces[i].name);
    }
    qsort(keys, (size_t)npieces, sizeof *keys, key_cmp);

    psc_export_tensor_t *t = psc_xcalloc(cnt, sizeof *t);
    int nt = 0, rc = 0;
    for (int i = 0; i < npieces && rc == 0;) {
        int j = i + 1;
        while (j < npieces && base_cmp(&keys[i], &keys[j]) == 0) j++;
        rc = plan_group(pieces, &keys[i], j - i, &t[nt], err, errlen);
        t[nt].first_piece = i; /* into keys, for now */
        nt++;
        i = j;
    }
    if (rc) {
        free(keys);
        free(t);
        return rc;
    }
    qsort(t, (size_t)nt, sizeof *t, tensor_cmp);

    /* pieces in file order; offsets contiguous from 0 */
    psc_export_piece_t *ordered = psc_xmalloc(cnt * sizeof *ordered);
    int at = 0;
    uint64_t off = 0;
    for (int i = 0; i < nt; i++) {
        for (int m = 0; m < t[i].npieces; m++) ordered[at + m] = pieces[keys[t[i].first_piece + m].idx];
        t[i].first_piece = at;
        at += t[i].npieces;
        t[i].begin = off;
        t[i].end = off + t[i].bytes;
        off = t[i].end;
    }
    PSC_ASSERT(at == npieces);
    if (npieces) memcpy(pieces, ordered, (size_t)npieces * sizeof *pieces);
    free(ordered);
    free(keys);
    *tensors = t;
    *ntensors = nt;
    return 0;
}

int psc_export_layout(psc_export_tensor_t *tensors, int nt, char *err, size_t errlen)
{
    qsort(tensors, (size_t)nt, sizeof *tensors, tensor_cmp);
    uint64_t off = 0;
    for (int i = 0; i < nt; i++) {
        if (i && strcmp(tensors[i - 1].name, tensors[i].name) == 0)
            return psc_seterr(err, errlen, PSC_EMISMATCH, "two tensors are called \"%s\"", tensors[i].name);
        tensors[i].begin = off;
        tensors[i].end = off += tensors[i].bytes;
    }
    return 0;
}

/* ---- the header ---- */

static void sb_json_str(psc_sbuf_t *b, const char *s)
{
    psc_sbuf_put(b, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        switch (*c) {
        case '"': psc_sbuf_put(b, "\\\"", 2); break;
        case '\\': psc_sbuf_put(b, "\\\\", 2); break;
        case '\b': psc_sbuf_put(b, "\\b", 2); break;
        case '\f': psc_sbuf_put(b, "\\f", 2); break;
        case '\n': psc_sbuf_put(b, "\\n", 2); break;
        case '\r': psc_sbuf_put(b, "\\r", 2); break;
        case '\t': psc_sbuf_put(b, "\\t", 2); break;
        default:
            if (*c < 0x20)
                psc_sbuf_printf(b, "\\u%04x", *c);
            else
                psc_sbuf_put(b, (const char *)c, 1);
        }
    }
    psc_sbuf_put(b, "\"", 1);
}

char *psc_safetensors_header(const psc_export_tensor_t *tensors, int ntensors, const char *const *keys,
                             const char *const *vals, int nmeta, size_t *len)
{
    psc_sbuf_t b = {0};
    psc_sbuf_puts(&b, "{");
    if (nmeta > 0) {
        psc_sbuf_puts(&b, "\"__metadata__\":{");
        for (int i = 0; i < nmeta; i++) {
            if (i) psc_sbuf_puts(&b, ",");
            sb_json_str(&b, keys[i]);
            psc_sbuf_puts(&b, ":");
            sb_json_str(&b, vals[i]);
        }
        psc_sbuf_puts(&b, "}");
    }
    for (int i = 0; i < ntensors; i++) {
        const psc_export_tensor_t *t = &tensors[i];
        if (i || nmeta > 0) psc_sbuf_puts(&b, ",");
        sb_json_str(&b, t->name);
        psc_sbuf_puts(&b, ":{\"dtype\":");
        sb_json_str(&b, psc_st_dtype_name(t->dtype));
        psc_sbuf_puts(&b, ",\"shape\":[");
        for (int d = 0; d < t->rank; d++) psc_sbuf_printf(&b, "%s%" PRId64, d ? "," : "", t->shape[d]);
        psc_sbuf_printf(&b, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", t->begin, t->end);
    }
    psc_sbuf_puts(&b, "}");
    /* the buffer starts at 8 + N: pad N to a multiple of 8, as the reference writer does */
    while (b.len % 8) psc_sbuf_put(&b, " ", 1);
    *len = b.len;
    return b.p;
}

/* ---- talking to the PS ---- */

typedef struct export_ctx {
    const psc_cluster_t *cluster;
    int nps;
    psc_rpc_channel_t **ch;
    int timeout_ms;
    uint64_t ckpt; /* > 0: pull committed checkpoint ckpt's values */
    char job_id[64];
    psc_export_piece_t *pieces;
    int npieces;
    export_tables_t tables;
} export_ctx_t;

static const char *ps_addr(const export_ctx_t *x, int ps) { return x->cluster->addr[PSC_JOB_PS][ps]; }

/* Status of every PS at once (describe: the Describe of checkpoint x->ckpt,
 * the shard as it was saved); collects the pieces and checks job and
 * readiness. */
static int status_all(export_ctx_t *x, int describe, char *err, size_t errlen)
{
    int P = x->nps, rc = 0;
    psc_rpc_op_t *ops = psc_xcalloc((size_t)P, sizeof *ops);
    Psc__StatusRequest req = PSC__STATUS_REQUEST__INIT;
    Psc__DescribeRequest dreq = PSC__DESCRIBE_REQUEST__INIT;
    dreq.checkpoint = x->ckpt;
    uint8_t buf[32];
    size_t len = describe ? psc__describe_request__pack(&dreq, buf) : psc__status_request__pack(&req, buf);
    const char *what = describe ? "Describe" : "Status";
    for (int i = 0; i < P; i++) {
        ops[i].ch = x->ch[i];
        ops[i].method = describe ? PSC_M_DESCRIBE : PSC_M_STATUS;
        ops[i].hdr = buf;
        ops[i].hdr_len = len;
    }
    if (psc_rpc_run(ops, (size_t)P, (size_t)P, x->timeout_ms)) {
        int bad = (int)psc_rpc_first_failure(ops, (size_t)P), nbad = 0;
        for (int i = 0; i < P; i++) nbad += ops[i].code != PSC_RPC_OK;
        char more[64] = "";
        if (nbad > 1) snprintf(more, sizeof more, " (and %d more PS)", nbad - 1);
        rc = psc_seterr(err, errlen, psc_rpc_code_errno(ops[bad].code), "ps %d (%s): %s failed: %s: %s%s", bad,
                        ps_addr(x, bad), what, psc_rpc_code_name(ops[bad].code), ops[bad].msg, more);
        goto out;
    }
    size_t cap = 0;
    for (int i = 0; i < P && rc == 0; i++) {
        Psc__StatusReply *r = psc__status_reply__unpack(NULL, ops[i].reply_len, ops[i].reply ? ops[i].reply : buf);
        if (!r) {
            rc = psc_seterr(err, errlen, PSC_ECORRUPT, "ps %d (%s): %s reply does not parse", i, ps_addr(x, i), what);
            break;
        }
        if (!r->job_id[0])
            rc = psc_seterr(err, errlen, PSC_ENOTREADY, "ps %d (%s) holds no model yet (has the chief created it?)", i,
                            ps_addr(x, i));
        else if (!r->ready)
            rc = psc_seterr(err, errlen, PSC_ENOTREADY,
                            "ps %d (%s) is not ready: job %s is created but not initialized yet", i, ps_addr(x, i),
                            r->job_id);
        else if (strlen(r->job_id) >= sizeof x->job_id || !utf8_valid(r->job_id))
            rc = psc_seterr(err, errlen, PSC_ECORRUPT, "ps %d (%s): job id is not a job id", i, ps_addr(x, i));
        else if (i == 0)
            snprintf(x->job_id, sizeof x->job_id, "%s", r->job_id);
        else if (strcmp(r->job_id, x->job_id) != 0)
            rc = psc_seterr(err, errlen, PSC_EMISMATCH, "ps 0 (%s) holds job %s but ps %d (%s) holds job %s",
                            ps_addr(x, 0), x->job_id, i, ps_addr(x, i), r->job_id);
        if (rc == 0) rc = export_tables_add(&x->tables, r, i, err, errlen);
        for (size_t v = 0; rc == 0 && v < r->n_vars; v++) {
            const Psc__VarStatus *vs = r->vars[v];
            if (strlen(vs->name) >= PSC_EXPORT_NAME_MAX || vs->n_shape > PSC_MAX_RANK) {
                rc = psc_seterr(err, errlen, PSC_ECORRUPT,
                                "ps %d (%s): variable \"%.60s...\" has a name or rank too large", i, ps_addr(x, i),
                                vs->name);
                break;
            }
            if ((size_t)x->npieces == cap) {
                cap = cap ? cap * 2 : 16;
                x->pieces = psc_xrealloc(x->pieces, cap * sizeof *x->pieces);
            }
            psc_export_piece_t *p = &x->pieces[x->npieces++];
            memset(p, 0, sizeof *p);
            snprintf(p->name, sizeof p->name, "%s", vs->name);
            p->ps = i;
            p->rank = (int)vs->n_shape;
            for (size_t d = 0; d < vs->n_shape; d++) p->shape[d] = vs->shape[d];
            p->bytes = vs->bytes;
        }
        psc__status_reply__free_unpacked(r, NULL);
    }
out:
    for (int i = 0; i < P; i++) psc_rpc_op_clear(&ops[i]);
    free(ops);
    return rc;
}

/* One chunk to pull: piece bytes [offset, offset + len) go to buffer byte pos. */
typedef struct pull_chunk {
    int piece;
    uint64_t offset;
    size_t len;
    uint64_t pos;
    uint8_t hdr[EXPORT_HDR_CAP];
} pull_chunk_t;

static void fill_pull_op(const export_ctx_t *x, pull_chunk_t *c, psc_rpc_op_t *op, void *dst)
{
    const psc_export_piece_t *p = &x->pieces[c->piece];
    Psc__PullRequest r = PSC__PULL_REQUEST__INIT;
    r.name = (char *)p->name;
    r.offset = c->offset;
    r.length = c->len;
    r.checkpoint = x->ckpt;
    PSC_ASSERT(psc__pull_request__get_packed_size(&r) <= EXPORT_HDR_CAP);
    memset(op, 0, sizeof *op);
    op->ch = x->ch[p->ps];
    op->method = PSC_M_PULL;
    op->hdr = c->hdr;
    op->hdr_len = psc__pull_request__pack(&r, c->hdr);
    op->reply_body = dst;
    op->reply_body_len = c->len;
}

/* Runs n pull ops; checks every reply is the chunk asked for; the data is in
 * each op's reply_body (copied there when the reply was too short to split). */
static int pull_run(const export_ctx_t *x, pull_chunk_t *chunks, psc_rpc_op_t *ops, size_t n, char *err, size_t errlen)
{
    int rc = 0;
    if (psc_rpc_run(ops, n, EXPORT_IN_FLIGHT, x->timeout_ms)) {
        size_t bad = psc_rpc_first_failure(ops, n);
        const psc_export_piece_t *p = &x->pieces[chunks[bad].piece];
        rc = psc_seterr(err, errlen, psc_rpc_code_errno(ops[bad].code),
                        "ps %d (%s): Pull of %s at byte %" PRIu64 " failed: %s: %s", p->ps, ps_addr(x, p->ps), p->name,
                        chunks[bad].offset, psc_rpc_code_name(ops[bad].code), ops[bad].msg);
    }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const psc_export_piece_t *p = &x->pieces[chunks[i].piece];
        const psc_rpc_op_t *op = &ops[i];
        Psc__Chunk *c;
        const uint8_t *data;
        size_t dlen;
        if (psc_chunk_decode(op->reply, op->reply_len, op->reply_total, &c, &data, &dlen)) {
            rc = psc_seterr(err, errlen, PSC_ECORRUPT, "ps %d (%s): Pull reply for %s does not parse", p->ps,
                            ps_addr(x, p->ps), p->name);
            break;
        }
        if (strcmp(c->name, p->name) != 0 || c->offset != chunks[i].offset || dlen != chunks[i].len ||
            c->total != p->bytes)
            rc = psc_seterr(err, errlen, PSC_ECORRUPT,
                            "ps %d (%s): asked for %s@%" PRIu64 " (%zu of %" PRIu64 " bytes), got %s@%" PRIu64
                            " (%zu of %" PRIu64 " bytes)",
                            p->ps, ps_addr(x, p->ps), p->name, chunks[i].offset, chunks[i].len, p->bytes, c->name,
                            c->offset, dlen, c->total);
        else if (data && dlen)
            memcpy(op->reply_body, data, dlen);
        psc__chunk__free_unpacked(c, NULL);
    }
    for (size_t i = 0; i < n; i++) psc_rpc_op_clear(&ops[i]);
    return rc;
}

static int write_all(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* The chunks of every piece, in file order (a heap array the caller frees;
 * *n of them). */
static pull_chunk_t *plan_chunks(const export_ctx_t *x, const psc_export_tensor_t *tensors, int nt, size_t *n)
{
    size_t nchunks = 0, k = 0;
    for (int p = 0; p < x->npieces; p++)
        if (x->pieces[p].bytes) nchunks += psc_chunk_count(x->pieces[p].bytes);
    pull_chunk_t *chunks = psc_xcalloc(nchunks ? nchunks : 1, sizeof *chunks);
    for (int t = 0; t < nt; t++) {
        if (tensors[t].mem) continue; /* a table's: no pulls */
        uint64_t pos = tensors[t].begin;
        for (int p = tensors[t].first_piece; p < tensors[t].first_piece + tensors[t].npieces; p++) {
            uint64_t total = x->pieces[p].bytes;
            for (size_t c = 0; total && c < psc_chunk_count(total); c++, k++) {
                chunks[k].piece = p;
                chunks[k].offset = psc_chunk_offset(c);
                chunks[k].len = psc_chunk_len(total, c);
                chunks[k].pos = pos + chunks[k].offset;
            }
            pos += total;
        }
        PSC_ASSERT(pos == tensors[t].end);
    }
    PSC_ASSERT(k == nchunks);
    *n = nchunks;
    return chunks;
}

/* Writes the byte buffer tensor by tensor in file order: a table's from
 * memory, global_step's 8 bytes (tensor step_t, pulled already), a
 * variable's in rounds of a contiguous range each, written as soon as it is
 * whole. 0; 1 when a write failed (errno says why); or a pull's PSC_E* code
 * with msg set. */
static int write_tensors(const export_ctx_t *x, int fd, const psc_export_tensor_t *tensors, int nt, int step_t,
                         const uint8_t *step_le, pull_chunk_t *chunks, size_t nchunks, psc_rpc_op_t *ops,
                         uint8_t *window, char *msg, size_t msglen)
{
    size_t next = 0;
    for (int t = 0; t < nt; t++) {
        if (tensors[t].mem || t == step_t) {
            if (write_all(fd, tensors[t].mem ? tensors[t].mem : step_le, (size_t)tensors[t].bytes)) return 1;
            next += t == step_t;
            continue;
        }
        while (next < nchunks && chunks[next].pos < tensors[t].end) {
            uint64_t start = chunks[next].pos, end = start;
            size_t n = 0;
            while (next + n < nchunks && n < EXPORT_ROUND_OPS && chunks[next + n].pos < tensors[t].end &&
                   end + chunks[next + n].len - start <= EXPORT_WINDOW) {
                pull_chunk_t *c = &chunks[next + n];
                PSC_ASSERT(c->pos == end); /* a tensor is one run of chunks */
                fill_pull_op(x, c, &ops[n], window + (c->pos - start));
                end += c->len;
                n++;
            }
            PSC_ASSERT(n > 0);
            int rc = pull_run(x, chunks + next, ops, n, msg, msglen);
            if (rc) return rc;
            if (write_all(fd, window, (size_t)(end - start))) return 1;
            next += n;
        }
    }
    return 0;
}

int psc_export_safetensors(const psc_cluster_t *cluster, const char *path, uint64_t ckpt, int timeout_ms,
                           psc_export_info_t *info, char *err, size_t errlen)
{
    return psc_export_safetensors_ex(cluster, path, ckpt, 0, timeout_ms, info, err, errlen);
}

int psc_export_safetensors_ex(const psc_cluster_t *cluster, const char *path, uint64_t ckpt, int flags, int timeout_ms,
                              psc_export_info_t *info, char *err, size_t errlen)
{
    if (!cluster || !path || !path[0]) return psc_seterr(err, errlen, PSC_EINVAL, "export: no cluster or no path");
    if (cluster->n[PSC_JOB_PS] < 1) return psc_seterr(err, errlen, PSC_EINVAL, "export: the cluster has no ps tasks");
    for (int i = 0; i < cluster->n[PSC_JOB_PS]; i++)
        if (!cluster->addr[PSC_JOB_PS][i])
            return psc_seterr(err, errlen, PSC_EINVAL, "export: ps %d has no address in the cluster", i);

    export_ctx_t x = {.cluster = cluster, .nps = cluster->n[PSC_JOB_PS], .timeout_ms = timeout_ms, .ckpt = ckpt};
    x.tables.ckpt = ckpt;
    x.tables.rows_only = (flags & PSC_EXPORT_TABLE_ROWS) != 0;
    psc_export_tensor_t *tensors = NULL;
    pull_chunk_t *chunks = NULL;
    psc_rpc_op_t *ops = NULL;
    uint8_t *window = NULL;
    char *header = NULL, *tmp = NULL;
    int fd = -1, nt = 0, rc = 0;
    uint8_t step_le[8] = {0};
    int64_t step = -1;
    char step_txt[32] = "";
    size_t hlen = 0;
    uint64_t data_bytes = 0;
    char msg[768];

    x.ch = psc_xcalloc((size_t)x.nps, sizeof *x.ch);
    for (int i = 0; i < x.nps; i++) x.ch[i] = psc_rpc_channel_create(ps_addr(&x, i));
    /* a checkpoint's own description (any job's); one written before
     * descriptions existed is read by the live model, its own job's */
    rc = status_all(&x, ckpt > 0, msg, sizeof msg);
    if (rc == PSC_ENOTFOUND && ckpt > 0 && !(flags & PSC_EXPORT_DESCRIBED) && strstr(msg, "does not describe"))
        rc = status_all(&x, 0, msg, sizeof msg);
    if (rc) goto fail;
    if ((rc = psc_export_plan(x.pieces, x.npieces, &tensors, &nt, msg, sizeof msg))) goto fail;
    if ((rc = export_tables_fetch(&x.tables, x.ch, timeout_ms, msg, sizeof msg))) goto fail;
    export_tables_tensors(&x.tables, &tensors, &nt);
    if ((rc = psc_export_layout(tensors, nt, msg, sizeof msg))) goto fail;
    if (nt) data_bytes = tensors[nt - 1].end;

    /* global_step (pulled first: the metadata names it) */
    int step_t = -1;
    for (int t = 0; t < nt; t++)
        if (!tensors[t].mem && tensors[t].dtype == PSC_ST_I64 && strcmp(tensors[t].name, "global_step") == 0)
            step_t = t;
    size_t nchunks;
    chunks = plan_chunks(&x, tensors, nt, &nchunks);
    ops = psc_xcalloc(EXPORT_ROUND_OPS, sizeof *ops);
    if (step_t >= 0) {
        size_t k = 0;
        while (chunks[k].pos != tensors[step_t].begin) k++;
        PSC_ASSERT(chunks[k].len == 8);
        fill_pull_op(&x, &chunks[k], &ops[0], step_le);
        if ((rc = pull_run(&x, chunks + k, ops, 1, msg, sizeof msg))) goto fail;
        step = (int64_t)psc_le_get64(step_le);
        snprintf(step_txt, sizeof step_txt, "%" PRId64, step);
    }

    const char *keys[2] = {"job_id", "global_step"}, *vals[2] = {x.job_id, step_txt};
    header = psc_safetensors_header(tensors, nt, keys, vals, step_t >= 0 ? 2 : 1, &hlen);

    size_t plen = strlen(path);
    tmp = psc_xmalloc(plen + 5);
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = psc_seterr(msg, sizeof msg, PSC_EIO, "cannot create %s: %s", tmp, strerror(errno));
        goto fail;
    }
    uint8_t nle[8];
    psc_le_put64(nle, (uint64_t)hlen);
    if (write_all(fd, nle, 8) || write_all(fd, header, hlen)) goto werr;

    window = psc_xmalloc(PSC_MIN(EXPORT_WINDOW, data_bytes ? data_bytes : 1));
    rc = write_tensors(&x, fd, tensors, nt, step_t, step_le, chunks, nchunks, ops, window, msg, sizeof msg);
    if (rc > 0) goto werr;
    if (rc) goto fail;
    if (fsync(fd)) goto werr;
    if (close(fd)) {
        fd = -1;
        goto werr;
    }
    fd = -1;
    if (rename(tmp, path)) {
        rc = psc_seterr(msg, sizeof msg, PSC_EIO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
        goto fail;
    }
    if (info) {
        *info = (psc_export_info_t){.tensors = nt,
                                    .pieces = x.npieces,
                                    .data_bytes = data_bytes,
                                    .bytes = 8 + hlen + data_bytes,
                                    .has_global_step = step_t >= 0,
                                    .global_step = step,
                                    .tables = x.tables.n};
        snprintf(info->job_id, sizeof info->job_id, "%s", x.job_id);
    }
    goto out;

werr:
    rc = psc_seterr(msg, sizeof msg, PSC_EIO, "cannot write %s: %s", tmp, strerror(errno));
fail:
    if (fd >= 0) close(fd);
    if (tmp) unlink(tmp);
    psc_seterr(err, errlen, rc, "export to %s: %s", path, msg);
out:
    for (int i = 0; i < x.nps; i++) psc_rpc_channel_destroy(x.ch[i]);
    free(x.ch);
    free(x.pieces);
    export_tables_free(&x.tables);
    free(tensors);
    free(chunks);
    free(ops);
    free(window);
    free(header);
    free(tmp);
    return rc;
}
