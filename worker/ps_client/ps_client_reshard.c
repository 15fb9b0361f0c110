/* ps_client_reshard.c — a restore onto another number of PS: the newest
 * checkpoint of the job, written by N PS, re-split into this cluster's M
 * shards and staged on every PS as a new checkpoint (ps_client_ctl.c then
 * commits and restores it like any other).
 *
 * Design:
 * - A checkpoint's shards describe themselves (Describe: the PS's index and
 *   the number of PS it was written by, its variables and table parts, and
 *   the names of its tensors). The checkpoint is used only when every one of
 *   its N shards is on a PS of this cluster; a shard that is not is an error
 *   naming it, never a silent start from initial values.
 * - Dense variables: the pieces of each variable (parts along axis 0) are
 *   read whole from the checkpoint (Pull with `checkpoint`), for the value and
 *   each optimizer slot, concatenated, and cut again along today's placement;
 *   the update counts ".t" (one per 2 MiB chunk) of a new chunk are the
 *   largest of the old chunks it overlaps. global_step goes to the PS that
 *   holds it now.
 * - Table rows: read page by page as whole records (value, slots and the
 *   row's update count: TableRows with `records`) and sent to the part their
 *   global id belongs to now (either partition strategy), in calls of about
 *   4 MiB. Each row is read once and sent once.
 * - Every PS gets its shard as Stage calls in order, then `prepare`; the
 *   staged checkpoint is a full base with the next free id.
 * Memory: one variable (with one slot at a time) and about 4 MiB of rows per
 * PS at a time.
 *
 * A warm start that carries optimizer slots or global_step
 * (ps_client_warm_stage) runs the same re-split on another job's checkpoint
 * into this job's model: only the variables and tables it takes (by name),
 * each with its slots (which must be this job's optimizer's) and update
 * counts, and global_step when carried; the PS fill the rest from the model
 * as created (Stage `fill`), and keep the carried step as the job's
 * base_step.
 */
#include "ps_client_internal.h"

#include "chunk.h"
#include "export.h"
#include "optim_pb.h"
#include "log.h"
#include "psc.h"
#include "table.h"
#include "wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RS_PIECE PSC_CHUNK_BYTES        /* bytes of a tensor piece read or staged */
#define RS_ROWS_BYTES ((size_t)4 << 20) /* records of one Stage call */
#define RS_TIMEOUT_MS (30 * 60 * 1000)  /* a shard's pieces: as long as a Restore may take */

typedef struct rs {
    ps_client_t *pc;
    const char *job_id;    /* the job staged: this one */
    const char *src_job;   /* the job whose checkpoint is read: job_id, or a warm start's source */
    ps_warm_stage_t *warm; /* a warm start's selection and report; NULL: a restore */
    uint64_t want;         /* the checkpoint to read; 0: src_job's newest committed */
    uint64_t src, dst; /* the checkpoint read, the one staged */
    int64_t step;
    int n;                   /* shards of src */
    int *shard_ps;           /* (n) the PS holding shard s */
    Psc__StatusReply **desc; /* (n) shard s's description */
    uint64_t bytes, rows;    /* staged */
    double read_s, send_s;   /* spent reading the checkpoint, sending the pieces */
} rs_t;

int ps_client_set_restore_sources(ps_client_t *pc, const char *addrs, char *err, size_t errlen)
{
    for (const char *a = addrs; a && *a;) {
        const char *end = strchr(a, ',');
        size_t n = end ? (size_t)(end - a) : strlen(a);
        char addr[256];
        const char *colon = n < sizeof addr ? memchr(a, ':', n) : NULL;
        long port = 0;
        if (colon) {
            snprintf(addr, sizeof addr, "%.*s", (int)n, a);
            char *e;
            port = strtol(addr + (colon - a) + 1, &e, 10);
            if (*e) port = 0;
        }
        if (!colon || colon == a || port < 1 || port > 65535 || strpbrk(addr, " \t"))
            return psc_seterr(err, errlen, PSC_EINVAL, "--restore_from: \"%.*s\" is not HOST:PORT", (int)n, a);
        pc->src_ch = psc_xrealloc(pc->src_ch, (size_t)(pc->nsrc + 1) * sizeof *pc->src_ch);
        pc->src_ch[pc->nsrc++] = psc_rpc_channel_create(addr);
        a = end ? end + 1 : a + n;
    }
    return 0;
}

/* PS i: one of the cluster's (i < num_ps), else a restore source. */
static psc_rpc_channel_t *chan(const ps_client_t *pc, int i)
{
    return i < pc->num_ps ? pc->ch[i] : pc->src_ch[i - pc->num_ps];
}

/* One call to PS ps (chan); on failure err says what failed. */
static int call1(const rs_t *r, int ps, const char *method, const uint8_t *req, size_t len, psc_rpc_op_t *op,
                 const char *what, char *err, size_t errlen)
{
    memset(op, 0, sizeof *op);
    op->ch = chan(r->pc, ps);
    op->method = method;
    op->hdr = req;
    op->hdr_len = len;
    int rc = psc_rpc_run(op, 1, 1, PSC_MAX(r->pc->timeout_ms, RS_TIMEOUT_MS));
    if (rc) {
        rc = pcl_op_error(op, 1, what, err, errlen);
        pcl_clear_ops(op, 1);
    }
    return rc;
}

/* ---- staging ---- */

static int stage_call(rs_t *r, int ps, Psc__StageRequest *q, char *err, size_t errlen)
{
    q->job_id = (char *)r->job_id;
    q->id = r->dst;
    q->step = r->step;
    double t0 = psc_now();
    size_t len = psc__stage_request__get_packed_size(q);
    uint8_t *buf = psc_xmalloc(len ? len : 1);
    psc__stage_request__pack(q, buf);
    psc_rpc_op_t op;
    int rc = call1(r, ps, PSC_M_STAGE, buf, len, &op, "stage checkpoint", err, errlen);
    free(buf);
    r->send_s += psc_now() - t0;
    if (!rc) pcl_clear_ops(&op, 1);
    r->bytes += q->data.len;
    return rc;
}

static int stage_tensor(rs_t *r, int ps, const char *name, const uint8_t *data, size_t total, char *err, size_t errlen)
{
    size_t off = 0;
    do {
        size_t n = PSC_MIN(RS_PIECE, total - off);
        Psc__StageRequest q = PSC__STAGE_REQUEST__INIT;
        q.tensor = (char *)name;
        q.offset = off;
        q.total = total;
        q.data.data = (uint8_t *)data + off;
        q.data.len = n;
        int rc = stage_call(r, ps, &q, err, errlen);
        if (rc) return rc;
        off += n;
    } while (off < total);
    return 0;
}

/* ---- reading the checkpoint ---- */

/* Tensor `name` of shard s into dst (len bytes, which it must have). */
static int read_tensor(rs_t *r, int s, const char *name, uint8_t *dst, size_t len, char *err, size_t errlen)
{
    size_t off = 0;
    do {
        Psc__PullRequest q = PSC__PULL_REQUEST__INIT;
        q.name = (char *)name;
        q.offset = off;
        q.length = PSC_MIN(RS_PIECE, len - off);
        q.checkpoint = r->src;
        uint8_t buf[PS_CLIENT_HDR_CAP + 64];
        if (psc__pull_request__get_packed_size(&q) > sizeof buf)
            return psc_seterr(err, errlen, PSC_EINVAL, "tensor name %s is too long", name);
        psc_rpc_op_t op;
        int rc = call1(r, r->shard_ps[s], PSC_M_PULL, buf, psc__pull_request__pack(&q, buf), &op, "read checkpoint",
                       err, errlen);
        if (rc) return rc;
        Psc__Chunk *h = NULL;
        const uint8_t *data = NULL;
        size_t dlen = 0;
        if (psc_chunk_decode(op.reply, op.reply_len, op.reply_len, &h, &data, &dlen) != 0)
            rc = psc_seterr(err, errlen, PSC_ECORRUPT, "checkpoint %llu: a piece of %s from %s does not parse",
                            (unsigned long long)r->src, name, psc_rpc_channel_target(chan(r->pc, r->shard_ps[s])));
        else if (h->total != len || dlen != q.length)
            rc = psc_seterr(err, errlen, PSC_EMISMATCH,
                            "checkpoint %llu: tensor %s on %s has %llu bytes, its description says %zu",
                            (unsigned long long)r->src, name, psc_rpc_channel_target(chan(r->pc, r->shard_ps[s])),
                            (unsigned long long)h->total, len);
        else
            memcpy(dst + off, data, dlen);
        if (h) psc__chunk__free_unpacked(h, NULL);
        pcl_clear_ops(&op, 1);
        if (rc) return rc;
        off += q.length;
    } while (off < len);
    return 0;
}

/* ---- dense variables ---- */

typedef struct src_piece {
    int shard;
    const char *name;
    int part;
    uint64_t bytes, at; /* its bytes, and where they start in the whole variable */
} src_piece_t;

static int piece_cmp(const void *a, const void *b)
{
    const src_piece_t *x = a, *y = b;
    return (x->part > y->part) - (x->part < y->part);
}

/* Is `name` a variable of any shard? */
static int is_var(const rs_t *r, const char *name)
{
    for (int s = 0; s < r->n; s++)
        for (size_t i = 0; i < r->desc[s]->n_vars; i++)
            if (strcmp(r->desc[s]->vars[i]->name, name) == 0) return 1;
    return 0;
}

/* The tensors of a variable piece X in its shard besides X itself: the names
 * X/TAIL (TAIL without '/', X/TAIL not a variable): its slots and ".t". */
static int tails_of(const rs_t *r, const src_piece_t *p, const char **tails, int cap)
{
    const Psc__StatusReply *d = r->desc[p->shard];
    size_t xl = strlen(p->name);
    int n = 0;
    for (size_t i = 0; i < d->n_tensors && n < cap; i++) {
        const char *t = d->tensors[i];
        if (strncmp(t, p->name, xl) != 0 || t[xl] != '/' || !t[xl + 1] || strchr(t + xl + 1, '/')) continue;
        if (!is_var(r, t)) tails[n++] = t + xl + 1;
    }
    return n;
}

typedef const char *(*slot_name_fn)(const psc_optim_config_t *o, int k);

/* Whether the comma-separated slot names `have` (a source's) are those of
 * optimizer o (as `name` calls them), in any order. */
static int slots_match(const char *have, const psc_optim_config_t *o, slot_name_fn name)
{
    int n = 0;
    for (const char *p = have; *p; p++) n += *p == ',';
    if (have[0]) n++;
    if (n != psc_optim_slot_count(o)) return 0;
    for (int k = 0; k < n; k++) {
        const char *want = name(o, k);
        size_t wl = strlen(want);
        int found = 0;
        for (const char *p = have; *p && !found; p = strchr(p, ',') ? strchr(p, ',') + 1 : p + strlen(p))
            found = strncmp(p, want, wl) == 0 && (p[wl] == ',' || p[wl] == '\0');
        if (!found) return 0;
    }
    return 1;
}

/* Appends name to a comma-separated list of len bytes. */
static void join(char *list, size_t len, const char *name)
{
    size_t l = strlen(list);
    snprintf(list + l, len - l, "%s%s", l ? "," : "", name);
}

/* This job's slot names, comma-separated, into buf. */
static const char *slot_names(const psc_optim_config_t *o, slot_name_fn name, char *buf, size_t len)
{
    buf[0] = '\0';
    for (int k = 0; k < psc_optim_slot_count(o); k++) join(buf, len, name(o, k));
    return buf[0] ? buf : "none";
}

/* A warm start's variable or table `name`: the source's slots `have` are
 * this job's optimizer's, else PSC_ECONFIG naming both. */
static int warm_slots(const rs_t *r, const char *what, const char *name, const char *have, const psc_optim_config_t *o,
                      slot_name_fn sname, char *err, size_t errlen)
{
    if (slots_match(have, o, sname)) return 0;
    char mine[64];
    return psc_seterr(err, errlen, PSC_ECONFIG,
                      "warm start: %s %s has the optimizer slots %s in checkpoint %llu of job %s but %s in this job "
                      "(another optimizer: warm-start it without \"slots\")",
                      what, name, have[0] ? have : "none", (unsigned long long)r->src, r->src_job,
                      slot_names(o, sname, mine, sizeof mine));
}

/* ".t" of a new piece [at, at + bytes) of the variable: per chunk, the
 * largest count of the old chunks it overlaps. */
static void retime(const src_piece_t *src, int nsrc, int64_t *const *told, uint64_t at, uint64_t bytes, int64_t *tnew)
{
    size_t nc = psc_chunk_count(bytes);
    for (size_t c = 0; c < nc; c++) {
        uint64_t b0 = at + psc_chunk_offset(c), b1 = b0 + psc_chunk_len(bytes, c);
        int64_t best = 0;
        for (int k = 0; k < nsrc; k++) {
            size_t ncs = psc_chunk_count(src[k].bytes);
            for (size_t d = 0; d < ncs; d++) {
                uint64_t s0 = src[k].at + psc_chunk_offset(d), s1 = s0 + psc_chunk_len(src[k].bytes, d);
                if ((s0 < b1 && b0 < s1) || b0 == b1 || s0 == s1) /* overlaps (an empty one: any) */
                    best = PSC_MAX(best, told[k][d]);
            }
        }
        tnew[c] = best;
    }
}

/* Variable vi: its pieces in the checkpoint, re-cut for today's placement. */
static int reshard_var(rs_t *r, int vi, char *err, size_t errlen)
{
    ps_client_t *pc = r->pc;
    int first = -1;
    uint64_t whole = 0;
    for (int p = 0; p < pc->nplaced; p++)
        if (pc->placed[p].var_index == vi) {
            if (first < 0) first = p;
            whole += (uint64_t)pc->placed[p].numel * 4;
        }
    if (first < 0 || pc->placed[first].is_step) return 0;
    char base[PSC_NAME_MAX + 1];
    snprintf(base, sizeof base, "%s", pc->placed[first].name);
    size_t bl = strlen(base);
    if (pc->placed[first].num_parts > 1 && psc_export_part_index(base, &bl) >= 0) base[bl] = '\0';
    bl = strlen(base);
    if (r->warm && !r->warm->take_var(r->warm->arg, base)) return 0;
    /* the checkpoint's pieces of it, in part order */
    int nsrc = 0, cap = 8;
    src_piece_t *src = psc_xmalloc((size_t)cap * sizeof *src);
    for (int s = 0; s < r->n; s++)
        for (size_t i = 0; i < r->desc[s]->n_vars; i++) {
            const char *nm = r->desc[s]->vars[i]->name;
            size_t l = 0;
            int part = 0;
            if (strcmp(nm, base) != 0) { /* else a piece "BASE/part_K" */
                part = psc_export_part_index(nm, &l);
                if (part < 0 || l != bl || strncmp(nm, base, bl) != 0) continue;
            }
            if (nsrc == cap) src = psc_xrealloc(src, (size_t)(cap *= 2) * sizeof *src);
            src[nsrc++] = (src_piece_t){.shard = s, .name = nm, .part = part, .bytes = r->desc[s]->vars[i]->bytes};
        }
    qsort(src, (size_t)nsrc, sizeof *src, piece_cmp);
    uint64_t at = 0;
    for (int k = 0; k < nsrc; k++) {
        src[k].at = at;
        at += src[k].bytes;
    }
    int rc = 0;
    if (nsrc == 0 && r->warm) { /* it starts from its initializer (the fill) */
        psc_note_name(r->warm->absent, sizeof r->warm->absent, base);
        goto out;
    }
    if (nsrc == 0 || at != whole) {
        rc = psc_seterr(err, errlen, PSC_ECONFIG,
                        "variable %s: %llu bytes in %d pieces in checkpoint %llu, but %llu in this job's model", base,
                        (unsigned long long)at, nsrc, (unsigned long long)r->src, (unsigned long long)whole);
        goto out;
    }
    const char *tails[8];
    int nt = tails_of(r, &src[0], tails, 8);
    if (r->warm) {
        char have[64] = "";
        for (int t = 0; t < nt; t++)
            if (strcmp(tails[t], ".t") != 0) join(have, sizeof have, tails[t]);
        if ((rc = warm_slots(r, "variable", base, have, r->warm->opt, psc_optim_slot_ckpt_name, err, errlen))) goto out;
        r->warm->vars++;
    }
    uint8_t *full = psc_xmalloc(whole ? whole : 1);
    for (int t = -1; t < nt && !rc; t++) { /* -1: the value */
        char name[2 * PSC_NAME_MAX + 8];
        int is_t = t >= 0 && strcmp(tails[t], ".t") == 0;
        if (is_t) {
            int64_t **told = psc_xcalloc((size_t)nsrc, sizeof *told);
            for (int k = 0; k < nsrc && !rc; k++) {
                size_t len = psc_chunk_count(src[k].bytes) * 8;
                told[k] = psc_xmalloc(len);
                snprintf(name, sizeof name, "%s/.t", src[k].name);
                rc = read_tensor(r, src[k].shard, name, (uint8_t *)told[k], len, err, errlen);
            }
            for (int p = 0; p < pc->nplaced && !rc; p++) {
                const psc_placed_var_t *pv = &pc->placed[p];
                if (pv->var_index != vi) continue;
                uint64_t b = (uint64_t)pv->numel * 4;
                int64_t *tnew = psc_xmalloc(psc_chunk_count(b) * 8);
                retime(src, nsrc, told, (uint64_t)pv->elem_offset * 4, b, tnew);
                snprintf(name, sizeof name, "%s/.t", pv->name);
                rc = stage_tensor(r, pv->ps, name, (const uint8_t *)tnew, psc_chunk_count(b) * 8, err, errlen);
                free(tnew);
            }
            for (int k = 0; k < nsrc; k++) free(told[k]);
            free(told);
            continue;
        }
        for (int k = 0; k < nsrc && !rc; k++) {
            snprintf(name, sizeof name, t < 0 ? "%s" : "%s/%s", src[k].name, t < 0 ? "" : tails[t]);
            rc = read_tensor(r, src[k].shard, name, full + src[k].at, src[k].bytes, err, errlen);
        }
        for (int p = 0; p < pc->nplaced && !rc; p++) {
            const psc_placed_var_t *pv = &pc->placed[p];
            if (pv->var_index != vi) continue;
            snprintf(name, sizeof name, t < 0 ? "%s" : "%s/%s", pv->name, t < 0 ? "" : tails[t]);
            rc = stage_tensor(r, pv->ps, name, full + (size_t)pv->elem_offset * 4, (size_t)pv->numel * 4, err, errlen);
        }
    }
    free(full);
out:
    free(src);
    return rc;
}

/* ---- table rows ---- */

typedef struct rs_out {
    int64_t *ids;
    uint8_t *recs;
    size_t n, cap;
    int sent; /* the table was declared on this PS */
} rs_out_t;

static int flush_rows(rs_t *r, int ps, const char *table, rs_out_t *o, size_t rec, char *err, size_t errlen)
{
    Psc__StageRequest q = PSC__STAGE_REQUEST__INIT;
    q.table = (char *)table;
    q.ids.data = (uint8_t *)o->ids;
    q.ids.len = o->n * 8;
    q.record_bytes = (uint32_t)rec;
    q.data.data = o->recs;
    q.data.len = o->n * rec;
    int rc = stage_call(r, ps, &q, err, errlen);
    r->rows += o->n;
    o->n = 0;
    o->sent = 1;
    return rc;
}

static int reshard_table(rs_t *r, int t, char *err, size_t errlen)
{
    ps_client_t *pc = r->pc;
    const psc_table_spec_t *T = &pc->tables[t];
    int P = pc->num_ps, rc = 0, any = 0;
    if (r->warm && !r->warm->take_table(r->warm->arg, T->name)) return 0;
    rs_out_t *out = psc_xcalloc((size_t)P, sizeof *out);
    size_t rec = 0;
    for (int s = 0; s < r->n && !rc; s++) {
        int has = 0;
        for (size_t i = 0; i < r->desc[s]->n_tables && !rc; i++) {
            const Psc__TableStatus *d = r->desc[s]->tables[i];
            if (strcmp(d->name, T->name) != 0) continue;
            has = any = 1;
            if ((int)d->dim != T->dim)
                rc = psc_seterr(err, errlen, PSC_ECONFIG, "%stable %s: dim %u in checkpoint %llu, %d in this job",
                                r->warm ? "warm start: " : "", T->name, d->dim, (unsigned long long)r->src, T->dim);
            else if (r->warm && d->slots[0]) /* (an older description does not name them: the record size is checked) */
                rc = warm_slots(r, "table", T->name, d->slots, &T->optimizer, psc_optim_slot_name, err, errlen);
        }
        int64_t after = -1;
        for (int more = has; more && !rc;) {
            Psc__TableRowsRequest q = PSC__TABLE_ROWS_REQUEST__INIT;
            q.table = (char *)T->name;
            q.after = after;
            q.checkpoint = r->src;
            q.records = 1;
            uint8_t buf[PSC_NAME_MAX + 64];
            psc_rpc_op_t op;
            double t0 = psc_now();
            if ((rc = call1(r, r->shard_ps[s], PSC_M_TABLE_ROWS, buf, psc__table_rows_request__pack(&q, buf), &op,
                            "read checkpoint rows", err, errlen)))
                break;
            Psc__TableRowsReply *rep = psc__table_rows_reply__unpack(NULL, op.reply_len, op.reply);
            pcl_clear_ops(&op, 1);
            r->read_s += psc_now() - t0;
            size_t n = rep ? rep->ids.len / 8 : 0;
            if (!rep || rep->ids.len % 8 || rep->record_bytes == 0 || rep->records.len != n * rep->record_bytes ||
                (rec && rep->record_bytes != rec)) {
                rc = psc_seterr(err, errlen, PSC_ECORRUPT, "checkpoint %llu: rows of table %s from %s do not parse",
                                (unsigned long long)r->src, T->name,
                                psc_rpc_channel_target(chan(r->pc, r->shard_ps[s])));
                if (rep) psc__table_rows_reply__free_unpacked(rep, NULL);
                break;
            }
            rec = rep->record_bytes;
            for (size_t i = 0; i < n && !rc; i++) {
                int64_t id;
                memcpy(&id, rep->ids.data + 8 * i, 8);
                if (id < 0 || id >= T->rows) {
                    rc = psc_seterr(err, errlen, PSC_ECONFIG,
                                    "table %s: row %lld of checkpoint %llu is beyond its %lld rows", T->name,
                                    (long long)id, (unsigned long long)r->src, (long long)T->rows);
                    break;
                }
                int part;
                int64_t row;
                psc_part_of(T->partition, T->rows, P, id, &part, &row);
                int ps = pc->table_part_ps[t * P + part];
                rs_out_t *o = &out[ps];
                if (o->n == o->cap) {
                    o->cap = o->cap ? 2 * o->cap : 1024;
                    o->ids = psc_xrealloc(o->ids, o->cap * 8);
                    o->recs = psc_xrealloc(o->recs, o->cap * rec);
                }
                o->ids[o->n] = id;
                memcpy(o->recs + o->n * rec, rep->records.data + i * rec, rec);
                if (++o->n * (8 + rec) >= RS_ROWS_BYTES) rc = flush_rows(r, ps, T->name, o, rec, err, errlen);
                after = id;
            }
            more = rep->more && n > 0;
            psc__table_rows_reply__free_unpacked(rep, NULL);
        }
    }
    if (r->warm && !any) psc_note_name(r->warm->tabsent, sizeof r->warm->tabsent, T->name);
    if (r->warm && any && !rc) r->warm->tables++;
    /* every part is declared in the staged checkpoint, rows or none */
    for (int k = 0; k < P && !rc; k++) {
        int ps = pc->table_part_ps[t * P + k];
        if (rec && (out[ps].n || !out[ps].sent)) rc = flush_rows(r, ps, T->name, &out[ps], rec, err, errlen);
    }
    for (int k = 0; k < P; k++) {
        free(out[k].ids);
        free(out[k].recs);
    }
    free(out);
    return rc;
}

/* The last Stage call on every PS at once: each writes its shard. */
static int prepare_all(rs_t *r, char *err, size_t errlen)
{
    int P = r->pc->num_ps;
    Psc__StageRequest q = PSC__STAGE_REQUEST__INIT;
    q.job_id = (char *)r->job_id;
    q.id = r->dst;
    q.step = r->step;
    q.prepare = 1;
    q.fill = r->warm != NULL;
    q.base_step = r->warm && r->warm->carry_step ? r->step : 0;
    for (int s = 0; s < r->n && !r->warm; s++) /* a restore keeps the replica steps its checkpoint recorded */
        if (r->desc[s]->has_global_step && r->desc[s]->n_replica_steps <= PSC_MAX_REPLICAS) {
            q.n_replica_steps = r->desc[s]->n_replica_steps;
            q.replica_steps = r->desc[s]->replica_steps;
        }
    uint8_t *buf = psc_xmalloc(psc__stage_request__get_packed_size(&q) + 1);
    size_t len = psc__stage_request__pack(&q, buf);
    psc_rpc_op_t *ops = psc_xcalloc((size_t)P, sizeof *ops);
    for (int i = 0; i < P; i++) {
        ops[i].ch = chan(r->pc, i);
        ops[i].method = PSC_M_STAGE;
        ops[i].hdr = buf;
        ops[i].hdr_len = len;
    }
    int rc = psc_rpc_run(ops, (size_t)P, (size_t)P, PSC_MAX(r->pc->timeout_ms, RS_TIMEOUT_MS));
    if (rc) rc = pcl_op_error(ops, (size_t)P, "prepare staged checkpoint", err, errlen);
    pcl_clear_ops(ops, (size_t)P);
    free(ops);
    free(buf);
    return rc;
}

/* ---- finding the checkpoint ---- */

/* Is c committed checkpoint id of the job? */
static int ours(const rs_t *r, const Psc__CheckpointInfo *c, uint64_t id)
{
    return c->id == id && c->committed && strcmp(c->job_id, r->src_job) == 0;
}

/* Every PS's (lists[i], P of them) checkpoint list: *newest, the newest
 * committed checkpoint of r->src_job (r->want: that one), and *max_id, the
 * largest id of any job. */
static int list_all(rs_t *r, Psc__ListCheckpointsReply **lists, int P, uint64_t *newest, uint64_t *max_id, char *err,
                    size_t errlen)
{
    int rc = 0;
    for (int i = 0; i < P && !rc; i++) {
        Psc__ListCheckpointsRequest q = PSC__LIST_CHECKPOINTS_REQUEST__INIT; /* every job's: ids are the store's */
        uint8_t buf[64];
        psc_rpc_op_t op;
        if ((rc = call1(r, i, PSC_M_LIST_CKPT, buf, psc__list_checkpoints_request__pack(&q, buf), &op,
                        "list checkpoints", err, errlen)))
            break;
        lists[i] = psc__list_checkpoints_reply__unpack(NULL, op.reply_len, op.reply);
        pcl_clear_ops(&op, 1);
        if (!lists[i]) {
            rc = psc_seterr(err, errlen, PSC_ECORRUPT, "checkpoint list from %s does not parse",
                            psc_rpc_channel_target(chan(r->pc, i)));
            break;
        }
        for (size_t k = 0; k < lists[i]->n_checkpoints; k++) {
            const Psc__CheckpointInfo *c = lists[i]->checkpoints[k];
            *max_id = PSC_MAX(*max_id, c->id);
            if (c->committed && strcmp(c->job_id, r->src_job) == 0 && (!r->want || c->id == r->want))
                *newest = PSC_MAX(*newest, c->id);
        }
    }
    return rc;
}

/* Shard description d is what today's placement gives PS ps: the same
 * variables (names, sizes) and table parts (name, part of as many,
 * partition strategy). The job id does not cover the placement, so a
 * checkpoint of this job on as many PS may hold another placement's shards. */
static int shard_fits(const ps_client_t *pc, int ps, const Psc__StatusReply *d)
{
    size_t nv = 0, nt = 0;
    for (int p = 0; p < pc->nplaced; p++) {
        const psc_placed_var_t *pv = &pc->placed[p];
        if (pv->ps != ps) continue;
        nv++;
        int found = 0;
        for (size_t i = 0; i < d->n_vars && !found; i++)
            found = strcmp(d->vars[i]->name, pv->name) == 0 &&
                    (pv->is_step || d->vars[i]->bytes == (uint64_t)pv->numel * 4);
        if (!found) return 0;
    }
    int P = pc->num_ps;
    for (int t = 0; t < pc->ntables; t++)
        for (int k = 0; k < P; k++) {
            if (pc->table_part_ps[t * P + k] != ps) continue;
            nt++;
            int found = 0;
            for (size_t i = 0; i < d->n_tables && !found; i++) {
                const Psc__TableStatus *ts = d->tables[i];
                found = strcmp(ts->name, pc->tables[t].name) == 0 && (int)ts->part == k && (int)ts->num_parts == P &&
                        (int)ts->partition == (int)pc->tables[t].partition;
            }
            if (!found) return 0;
        }
    return nv == d->n_vars && nt == d->n_tables;
}

/* Describes checkpoint r->src on every PS (lists[i], P of them) that holds
 * it: d[i]; *n the number of PS that wrote it, -1 when it cannot be re-split
 * (older than descriptions: restores only onto its own shape). */
static int describe_all(rs_t *r, Psc__ListCheckpointsReply **lists, int P, Psc__StatusReply **d, int *n, char *err,
                        size_t errlen)
{
    uint64_t newest = r->src;
    int rc = 0;
    for (int i = 0; i < P && !rc; i++) {
        int has = 0;
        for (size_t k = 0; k < lists[i]->n_checkpoints; k++)
            has |= ours(r, lists[i]->checkpoints[k], newest);
        if (!has) continue;
        Psc__DescribeRequest q = PSC__DESCRIBE_REQUEST__INIT;
        q.checkpoint = newest;
        uint8_t buf[32];
        psc_rpc_op_t op;
        rc = call1(r, i, PSC_M_DESCRIBE, buf, psc__describe_request__pack(&q, buf), &op, "describe checkpoint", err,
                   errlen);
        if (rc == PSC_ENOTFOUND && r->warm) {
            char why[512];
            snprintf(why, sizeof why, "%s", err);
            return psc_seterr(err, errlen, PSC_ECONFIG, "warm start: %s", why);
        }
        if (rc == PSC_ENOTFOUND || rc == PSC_ECORRUPT || rc == PSC_EMISMATCH) {
            /* older than descriptions, or damaged: the Restore of the newest
             * intact one of this shape (restore_latest) takes over */
            PSC_WARN("checkpoint %llu of job %s cannot be re-split: %s", (unsigned long long)newest, r->job_id, err);
            *n = -1;
            return 0;
        }
        if (rc) break;
        d[i] = psc__status_reply__unpack(NULL, op.reply_len, op.reply);
        pcl_clear_ops(&op, 1);
        if (!d[i])
            return psc_seterr(err, errlen, PSC_ECORRUPT, "checkpoint %llu: the description from %s does not parse",
                              (unsigned long long)newest, psc_rpc_channel_target(chan(r->pc, i)));
        if (d[i]->num_ps == 0 && r->warm)
            return psc_seterr(err, errlen, PSC_ECONFIG,
                              "warm start: checkpoint %llu of job %s does not say how many ps_servers wrote it (an "
                              "older psc): warm-start without slots and global_step",
                              (unsigned long long)newest, r->src_job);
        if (d[i]->num_ps == 0) {
            PSC_WARN("checkpoint %llu of job %s does not say how many ps_servers wrote it (an older psc): it restores "
                     "only onto the shape that wrote it",
                     (unsigned long long)newest, r->job_id);
            *n = -1;
            return 0;
        }
        if (*n < 0) *n = (int)d[i]->num_ps;
        if ((int)d[i]->num_ps != *n || (int)d[i]->ps_index >= *n)
            return psc_seterr(
                err, errlen, PSC_ECORRUPT, "checkpoint %llu: %s holds shard %u of %u, another holds one of %d",
                (unsigned long long)newest, psc_rpc_channel_target(chan(r->pc, i)), d[i]->ps_index, d[i]->num_ps, *n);
    }
    return rc;
}

/* Lists and describes: the newest committed checkpoint of the job on any PS,
 * its shards, and the next free id. *found = 0 when there is nothing to
 * re-split (no checkpoint, or one of this cluster's own shape). */
static int find_source(rs_t *r, int *found, char *err, size_t errlen)
{
    ps_client_t *pc = r->pc;
    int P = pc->num_ps + pc->nsrc; /* this cluster's PS, then the sources */
    *found = 0;
    Psc__ListCheckpointsReply **lists = psc_xcalloc((size_t)P, sizeof *lists);
    uint64_t newest = 0, max_id = 0;
    int rc = list_all(r, lists, P, &newest, &max_id, err, errlen);
    if (rc) goto out;
    if (r->warm && !r->warm->from_job) { /* global_step alone: nothing to read */
        r->dst = max_id + 1;
        *found = 1;
        goto out;
    }
    if (!newest && r->warm) {
        char c[32] = "a committed checkpoint";
        if (r->want) snprintf(c, sizeof c, "checkpoint %llu", (unsigned long long)r->want);
        rc = psc_seterr(err, errlen, PSC_ECONFIG, "warm start: job %s has no %s on these ps_servers", r->src_job, c);
    }
    if (!newest) goto out;
    r->src = newest;
    r->dst = max_id + 1;
    for (int i = 0; i < P; i++) /* the step it holds (global_step's own value, when read, wins) */
        for (size_t k = 0; k < lists[i]->n_checkpoints; k++)
            if (ours(r, lists[i]->checkpoints[k], newest)) r->step = lists[i]->checkpoints[k]->step;
    /* describe it wherever it is */
    Psc__StatusReply **d = psc_xcalloc((size_t)P, sizeof *d);
    int n = -1;
    rc = describe_all(r, lists, P, d, &n, err, errlen);
    if (rc || n < 0) goto free_desc;
    r->n = n;
    r->shard_ps = psc_xmalloc((size_t)n * sizeof *r->shard_ps);
    r->desc = psc_xcalloc((size_t)n, sizeof *r->desc);
    for (int s = 0; s < n; s++) r->shard_ps[s] = -1;
    for (int i = 0; i < P && !rc; i++) {
        if (!d[i]) continue;
        if (r->shard_ps[d[i]->ps_index] >= 0 && r->shard_ps[d[i]->ps_index] < pc->num_ps && i < pc->num_ps) {
            /* two PS of the cluster with the same shard: ps_servers that were
             * not told the cluster (each "ps 0 of 1"); not re-split */
            if (r->warm)
                rc = psc_seterr(err, errlen, PSC_ECONFIG,
                                "warm start: checkpoint %llu of job %s: %s and %s both hold shard %u of %u",
                                (unsigned long long)newest, r->src_job,
                                psc_rpc_channel_target(chan(pc, r->shard_ps[d[i]->ps_index])),
                                psc_rpc_channel_target(chan(pc, i)), d[i]->ps_index, d[i]->num_ps);
            else
                PSC_WARN("checkpoint %llu of job %s: %s and %s both hold shard %u of %u: not re-split",
                         (unsigned long long)newest, r->job_id,
                         psc_rpc_channel_target(chan(pc, r->shard_ps[d[i]->ps_index])),
                         psc_rpc_channel_target(chan(pc, i)), d[i]->ps_index, d[i]->num_ps);
            goto free_desc; /* (rs_free frees r->desc's, free_desc the rest) */
        }
        if (r->shard_ps[d[i]->ps_index] < 0) {
            r->shard_ps[d[i]->ps_index] = i;
            r->desc[d[i]->ps_index] = d[i];
            d[i] = NULL;
        }
    }
    char missing[256] = "";
    size_t ml = 0;
    for (int s = 0; s < n; s++)
        if (r->shard_ps[s] < 0 && ml < sizeof missing - 16)
            ml += (size_t)snprintf(missing + ml, sizeof missing - ml, "%s%d", ml ? ", " : "", s);
    int identity = n == pc->num_ps;
    for (int s = 0; s < n && identity; s++) identity = r->shard_ps[s] == s && shard_fits(pc, s, r->desc[s]);
    /* this shape's own checkpoint, each shard on its PS in today's placement
     * (restore_latest's business: or a PS lost its shard, which then starts
     * afresh as before); the same number of PS in another order, or another
     * placement, is re-split */
    if (!r->warm && n == pc->num_ps && (ml || identity)) goto free_desc;
    if (ml && r->warm) {
        rc = psc_seterr(err, errlen, PSC_ECONFIG,
                        "warm start: checkpoint %llu of job %s was written by %d ps_servers; shard%s %s of it %s on "
                        "none of these %d",
                        (unsigned long long)newest, r->src_job, n, strchr(missing, ',') ? "s" : "", missing,
                        strchr(missing, ',') ? "are" : "is", pc->num_ps);
        goto free_desc;
    }
    if (ml) {
        rc = psc_seterr(err, errlen, PSC_ECONFIG,
                        "the newest checkpoint of job %s, %llu, was written by %d ps_servers; shard%s %s of it %s on "
                        "none of these %d%s (a restore onto fewer PS reads the departing shards from ps_servers "
                        "started on their --checkpoint_dir, named to the chief with --restore_from HOST:PORT,...)",
                        r->job_id, (unsigned long long)newest, n, strchr(missing, ',') ? "s" : "", missing,
                        strchr(missing, ',') ? "are" : "is", pc->num_ps,
                        pc->nsrc ? " nor on the --restore_from ps_servers" : "");
        goto free_desc;
    }
    *found = 1;
free_desc:
    for (int i = 0; i < P; i++)
        if (d[i]) psc__status_reply__free_unpacked(d[i], NULL);
    free(d);
out:
    for (int i = 0; i < P; i++)
        if (lists[i]) psc__list_checkpoints_reply__free_unpacked(lists[i], NULL);
    free(lists);
    return rc;
}

/* Stages checkpoint r->dst from r->src (found): the variables, global_step,
 * the tables, then prepare on every PS. */
static int stage_run(rs_t *r, char *err, size_t errlen)
{
    ps_client_t *pc = r->pc;
    double t0 = psc_now();
    int rc = 0;
    /* the step, from the shard that holds global_step */
    for (int s = 0; s < r->n && !rc; s++)
        if (r->desc[s]->has_global_step) {
            uint8_t v[8];
            rc = read_tensor(r, s, "global_step", v, 8, err, errlen);
            memcpy(&r->step, v, 8);
        }
    if (rc) return rc;
    if (r->warm && r->warm->from_job)
        PSC_INFO("warm start from checkpoint %llu of job %s (step %lld), written by %d ps_servers: staging it onto "
                 "these %d as checkpoint %llu of this job",
                 (unsigned long long)r->src, r->src_job, (long long)r->step, r->n, pc->num_ps,
                 (unsigned long long)r->dst);
    else if (!r->warm)
        PSC_INFO("checkpoint %llu of job %s was written by %d ps_servers; re-splitting it onto these %d as "
                 "checkpoint %llu (step %lld)",
                 (unsigned long long)r->src, r->job_id, r->n, pc->num_ps, (unsigned long long)r->dst,
                 (long long)r->step);
    if (r->warm && !r->warm->from_job) r->step = r->warm->step;
    if (r->warm && !r->warm->carry_step) r->step = 0; /* the job starts at 0 */
    int nvars = 0, slots = !r->warm || r->warm->slots;
    for (int p = 0; p < pc->nplaced; p++) nvars = PSC_MAX(nvars, pc->placed[p].var_index + 1);
    for (int v = 0; v < nvars && slots && !rc; v++) rc = reshard_var(r, v, err, errlen);
    if (!rc && pc->step_ps >= 0 && (!r->warm || r->warm->carry_step))
        rc = stage_tensor(r, pc->step_ps, "global_step", (const uint8_t *)&r->step, 8, err, errlen);
    for (int t = 0; t < pc->ntables && slots && !rc; t++) rc = reshard_table(r, t, err, errlen);
    double t1 = psc_now();
    if (!rc) rc = prepare_all(r, err, errlen);
    if (rc) return rc;
    PSC_INFO("checkpoint %llu staged: %.1f MiB, %llu of them table rows, in %.1f s (reading rows %.1f s, sending "
             "%.1f s, writing %.1f s)",
             (unsigned long long)r->dst, (double)r->bytes / 1048576.0, (unsigned long long)r->rows, psc_now() - t0,
             r->read_s, r->send_s, psc_now() - t1);
    return 0;
}

static void rs_free(rs_t *r)
{
    for (int s = 0; s < r->n; s++)
        if (r->desc && r->desc[s]) psc__status_reply__free_unpacked(r->desc[s], NULL);
    free(r->desc);
    free(r->shard_ps);
}

int pcl_reshard_stage(ps_client_t *pc, const char *job_id, uint64_t *staged, int64_t *step, int *from_ps, char *err,
                      size_t errlen)
{
    *staged = 0;
    rs_t r = {.pc = pc, .job_id = job_id, .src_job = job_id};
    int found = 0;
    int rc = find_source(&r, &found, err, errlen);
    if (!rc && found && (rc = stage_run(&r, err, errlen)) == 0) {
        *staged = r.dst;
        *step = r.step;
        *from_ps = r.n;
    }
    rs_free(&r);
    return rc;
}

int ps_client_warm_stage(ps_client_t *pc, const char *job_id, ps_warm_stage_t *w, uint64_t *staged, int64_t *step,
                         char *err, size_t errlen)
{
    *staged = 0;
    w->vars = w->tables = 0;
    w->rows = 0;
    w->absent[0] = w->tabsent[0] = '\0';
    rs_t r = {
        .pc = pc, .job_id = job_id, .src_job = w->from_job ? w->from_job : job_id, .warm = w, .want = w->checkpoint};
    int found = 0;
    int rc = find_source(&r, &found, err, errlen);
    if (!rc && found && (rc = stage_run(&r, err, errlen)) == 0) {
        *staged = r.dst;
        *step = r.step;
        w->checkpoint = r.src;
        w->rows = r.rows;
    }
    rs_free(&r);
    return rc;
}
