/* ps_client_sparse.c — the worker's side of sparse embedding tables
 * (ps_client.h, "sparse tables"): the tables' parts in Create, and sparse
 * rounds: the ids of a batch deduplicated (a push's duplicate ids summed, as
 * TensorFlow sums an IndexedSlices gradient before a sparse apply), grouped by
 * the PS that holds their part (common/table.h's partition), and sent as one
 * Batch per PS carrying every table's items, all PS at once.
 *
 * Bytes on the wire per round and PS: 8 bytes per unique id plus 4 * dim per
 * row, each way, plus the Batch's framing: independent of the table's size.
 */
#include "ps_client_internal.h"

#include "optim_pb.h"
#include "psc.h"
#include "rng.h"
#include "wire.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ps_client_set_tables(ps_client_t *pc, const psc_table_spec_t *tables, int n, const int *part_ps, uint64_t seed)
{
    free(pc->tables);
    free(pc->table_part_ps);
    free(pc->table_rows_seen);
    pc->tables = n ? psc_xcalloc((size_t)n, sizeof *pc->tables) : NULL;
    pc->table_part_ps = n ? psc_xcalloc((size_t)n * (size_t)pc->num_ps, sizeof *pc->table_part_ps) : NULL;
    pc->table_rows_seen = n ? psc_xcalloc((size_t)n * (size_t)pc->num_ps, sizeof *pc->table_rows_seen) : NULL;
    for (size_t k = 0; k < (size_t)n * (size_t)pc->num_ps; k++) pc->table_rows_seen[k] = -1;
    if (n) {
        memcpy(pc->tables, tables, (size_t)n * sizeof *tables);
        memcpy(pc->table_part_ps, part_ps, (size_t)n * (size_t)pc->num_ps * sizeof *part_ps);
    }
    pc->ntables = n;
    pc->table_seed = seed;
}

int ps_client_set_job_tables(ps_client_t *pc, const psc_job_spec_t *spec, int first_turn, char *err, size_t errlen)
{
    psc_placed_table_t *pt = NULL;
    int n = 0;
    int rc = psc_place_tables(spec->tables, spec->num_tables, pc->num_ps, first_turn, &pt, &n, err, errlen);
    if (rc) return rc;
    int *part_ps = psc_xcalloc((size_t)(n ? n : 1), sizeof *part_ps);
    for (int i = 0; i < n; i++) part_ps[pt[i].table * pc->num_ps + pt[i].part] = pt[i].ps;
    ps_client_set_tables(pc, spec->tables, spec->num_tables, part_ps, spec->seed);
    free(part_ps);
    free(pt);
    return 0;
}

int ps_client_table_dim(const ps_client_t *pc, int table)
{
    return table >= 0 && table < pc->ntables ? pc->tables[table].dim : 0;
}

/* ---- Create's TableSpecs ---- */

void pcl_table_specs(ps_client_t *pc, int ps, pcl_table_pb_t *out)
{
    memset(out, 0, sizeof *out);
    if (!pc->ntables) return;
    out->specs = psc_xcalloc((size_t)pc->ntables, sizeof *out->specs);
    out->ptrs = psc_xcalloc((size_t)pc->ntables, sizeof *out->ptrs);
    out->opts = psc_xcalloc((size_t)pc->ntables, sizeof *out->opts);
    out->sched = psc_xcalloc((size_t)pc->ntables, sizeof *out->sched);
    for (int t = 0; t < pc->ntables; t++) {
        const psc_table_spec_t *ts = &pc->tables[t];
        int part = -1;
        for (int k = 0; k < pc->num_ps; k++)
            if (pc->table_part_ps[t * pc->num_ps + k] == ps) part = k;
        if (part < 0) continue;
        Psc__TableSpec *s = &out->specs[out->n];
        psc__table_spec__init(s);
        s->name = (char *)ts->name;
        s->rows = ts->rows;
        s->dim = (uint32_t)ts->dim;
        s->num_parts = (uint32_t)pc->num_ps;
        s->part = (uint32_t)part;
        s->partition = (uint32_t)ts->partition;
        s->init = (uint32_t)ts->init.kind;
        s->init_a = ts->init.a;
        s->init_b = ts->init.b;
        s->seed = pc->table_seed;
        s->ttl_steps = ts->ttl_steps;
        s->ttl_secs = ts->ttl_secs;
        s->max_rows = ts->max_rows / pc->num_ps + (part < ts->max_rows % pc->num_ps); /* the part's share */
        s->min_count = (uint32_t)ts->min_count;
        s->filter_bytes = (uint64_t)ts->filter_bytes;
        psc_optim_to_pb_sched(&ts->optimizer, &out->opts[out->n], &out->sched[out->n]);
        s->optimizer = &out->opts[out->n];
        out->ptrs[out->n++] = s;
    }
}

void pcl_table_specs_free(pcl_table_pb_t *t)
{
    free(t->specs);
    free(t->ptrs);
    free(t->opts);
    free(t->sched);
}

/* ---- deduplication ---- */

/* The unique ids of ids[0..n) in first-seen order into uniq (*nu of them) and,
 * per input position, its index in uniq (pos). */
static void dedup(const int64_t *ids, size_t n, int64_t *uniq, size_t *nu, uint32_t *pos)
{
    size_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    uint32_t *slot = psc_xmalloc(cap * sizeof *slot);
    memset(slot, 0xff, cap * sizeof *slot);
    size_t u = 0;
    for (size_t i = 0; i < n; i++) {
        size_t h = (size_t)psc_mix64((uint64_t)ids[i]) & (cap - 1);
        while (slot[h] != UINT32_MAX && uniq[slot[h]] != ids[i]) h = (h + 1) & (cap - 1);
        if (slot[h] == UINT32_MAX) {
            slot[h] = (uint32_t)u;
            uniq[u++] = ids[i];
        }
        pos[i] = slot[h];
    }
    free(slot);
    *nu = u;
}

/* ---- a sparse round ---- */

/* One op's work: its unique ids, summed gradients, and per PS the ids. */
typedef struct sop {
    const ps_sparse_op_t *op;
    int dim;
    size_t npu, nlu;          /* unique push / pull ids */
    int64_t *push_u, *pull_u; /* unique ids */
    float *push_sum;          /* (npu * dim) */
    uint32_t *pull_pos;       /* (npull) index into pull_u */
    /* per PS: ids and rows in wire order (contiguous per PS) */
    size_t *push_at, *push_n, *pull_at, *pull_n; /* (P) */
    int64_t *push_w, *pull_w;                    /* ids grouped by PS */
    float *push_gw;                              /* gradients grouped by PS */
    uint32_t *pull_back;                         /* wire position -> index into pull_u */
    float *pull_rows;                            /* (nlu * dim) */
    int borrowed; /* op->unique: push_u, pull_u and pull_rows are the op's own (pull_pos NULL: the identity) */
} sop_t;

static int part_ps(const ps_client_t *pc, int table, int64_t id)
{
    const psc_table_spec_t *t = &pc->tables[table];
    int part;
    int64_t row;
    psc_part_of(t->partition, t->rows, pc->num_ps, id, &part, &row);
    return pc->table_part_ps[table * pc->num_ps + part];
}

/* Groups n ids by PS: counts, offsets, the grouped ids, and per wire position
 * the source index. */
static void group(const ps_client_t *pc, int table, const int64_t *ids, size_t n, size_t *at, size_t *cnt,
                  int64_t *out, uint32_t *src)
{
    int P = pc->num_ps;
    if (P == 1) { /* one PS holds every part: the order stays */
        at[0] = 0;
        cnt[0] = n;
        if (n) memcpy(out, ids, n * sizeof *out);
        for (size_t i = 0; i < n; i++) src[i] = (uint32_t)i;
        return;
    }
    int *ps = psc_xmalloc((n ? n : 1) * sizeof *ps);
    memset(cnt, 0, (size_t)P * sizeof *cnt);
    for (size_t i = 0; i < n; i++) cnt[ps[i] = part_ps(pc, table, ids[i])]++;
    size_t off = 0;
    for (int p = 0; p < P; p++) {
        at[p] = off;
        off += cnt[p];
    }
    size_t *fill = psc_xcalloc((size_t)P, sizeof *fill);
    for (size_t i = 0; i < n; i++) {
        size_t w = at[ps[i]] + fill[ps[i]]++;
        out[w] = ids[i];
        src[w] = (uint32_t)i;
    }
    free(fill);
    free(ps);
}

int ps_client_table_assign(ps_client_t *pc, int table, const int64_t *ids, const float *vals, size_t n, const int *skip,
                           char *err, size_t errlen)
{
    int P = pc->num_ps;
    size_t d = (size_t)pc->tables[table].dim, per = PS_CLIENT_ASSIGN_BYTES / (8 + 4 * d);
    size_t *at = psc_xmalloc((size_t)P * sizeof *at), *cnt = psc_xmalloc((size_t)P * sizeof *cnt);
    int64_t *gid = psc_xmalloc((n ? n : 1) * sizeof *gid);
    uint32_t *src = psc_xmalloc((n ? n : 1) * sizeof *src);
    float *gval = psc_xmalloc((n ? n : 1) * d * sizeof *gval);
    group(pc, table, ids, n, at, cnt, gid, src);
    for (size_t w = 0; w < n; w++) memcpy(gval + w * d, vals + (size_t)src[w] * d, d * 4);
    size_t nops = 0;
    for (int p = 0; p < P; p++)
        if (!(skip && skip[p])) nops += (cnt[p] + per - 1) / per;
    psc_rpc_op_t *ops = psc_xcalloc(nops ? nops : 1, sizeof *ops);
    uint8_t **bufs = psc_xcalloc(nops ? nops : 1, sizeof *bufs);
    size_t k = 0;
    for (int p = 0; p < P; p++) {
        if (skip && skip[p]) continue;
        for (size_t i = 0; i < cnt[p]; i += per, k++) {
            size_t m = PSC_MIN(per, cnt[p] - i), w = at[p] + i;
            Psc__AssignRowsRequest req = PSC__ASSIGN_ROWS_REQUEST__INIT;
            req.table = pc->tables[table].name;
            req.ids.data = (uint8_t *)(gid + w);
            req.ids.len = m * 8;
            req.values.data = (uint8_t *)(gval + w * d);
            req.values.len = m * d * 4;
            size_t len = psc__assign_rows_request__get_packed_size(&req);
            bufs[k] = psc_xmalloc(len);
            ops[k].ch = pc->ch[p];
            ops[k].method = PSC_M_ASSIGN_ROWS;
            ops[k].hdr = bufs[k];
            ops[k].hdr_len = psc__assign_rows_request__pack(&req, bufs[k]);
        }
    }
    int rc = psc_rpc_run(ops, nops, PS_CLIENT_IN_FLIGHT, pc->timeout_ms);
    if (rc) rc = pcl_op_error(ops, nops, "assign rows", err, errlen);
    pcl_clear_ops(ops, nops);
    for (size_t i = 0; i < nops; i++) free(bufs[i]);
    free(bufs);
    free(ops);
    free(gval);
    free(src);
    free(gid);
    free(cnt);
    free(at);
    return rc;
}

static void sop_free(sop_t *s)
{
    if (!s->borrowed) {
        free(s->push_u);
        free(s->pull_u);
        free(s->pull_rows);
    }
    free(s->push_sum);
    free(s->pull_pos);
    free(s->push_at);
    free(s->push_n);
    free(s->pull_at);
    free(s->pull_n);
    free(s->push_w);
    free(s->pull_w);
    free(s->push_gw);
    free(s->pull_back);
}

/* Prepares an op of unique ids: no dedup and no sum; the ids and the pulled
 * rows stay the op's, the gradients are copied once, into wire order. */
static void sop_prepare_unique(const ps_client_t *pc, const ps_sparse_op_t *op, sop_t *s)
{
    size_t d = (size_t)s->dim;
    s->borrowed = 1;
    s->push_u = (int64_t *)op->push_ids;
    s->npu = op->npush;
    s->push_w = psc_xmalloc((s->npu ? s->npu : 1) * sizeof *s->push_w);
    uint32_t *psrc = psc_xmalloc((s->npu ? s->npu : 1) * sizeof *psrc);
    group(pc, op->table, s->push_u, s->npu, s->push_at, s->push_n, s->push_w, psrc);
    s->push_gw = psc_xmalloc((s->npu ? s->npu : 1) * d * sizeof(float));
    for (size_t w = 0; w < s->npu; w++) memcpy(s->push_gw + w * d, op->push_grads + (size_t)psrc[w] * d, d * 4);
    free(psrc);
    s->pull_u = (int64_t *)op->pull_ids;
    s->nlu = op->npull;
    s->pull_rows = op->pull_rows; /* the replies' rows go straight to their places */
    s->pull_w = psc_xmalloc((s->nlu ? s->nlu : 1) * sizeof *s->pull_w);
    s->pull_back = psc_xmalloc((s->nlu ? s->nlu : 1) * sizeof *s->pull_back);
    group(pc, op->table, s->pull_u, s->nlu, s->pull_at, s->pull_n, s->pull_w, s->pull_back);
}

/* Prepares one op: dedup, sum, group per PS. */
static void sop_prepare(const ps_client_t *pc, const ps_sparse_op_t *op, sop_t *s)
{
    size_t P = (size_t)pc->num_ps, d = (size_t)pc->tables[op->table].dim;
    memset(s, 0, sizeof *s);
    s->op = op;
    s->dim = (int)d;
    s->push_at = psc_xcalloc(P, sizeof(size_t));
    s->push_n = psc_xcalloc(P, sizeof(size_t));
    s->pull_at = psc_xcalloc(P, sizeof(size_t));
    s->pull_n = psc_xcalloc(P, sizeof(size_t));
    if (op->unique) {
        sop_prepare_unique(pc, op, s);
        return;
    }
    size_t np = op->npush ? op->npush : 1, nl = op->npull ? op->npull : 1;
    s->push_u = psc_xmalloc(np * sizeof *s->push_u);
    uint32_t *ppos = psc_xmalloc(np * sizeof *ppos);
    dedup(op->push_ids, op->npush, s->push_u, &s->npu, ppos);
    s->push_sum = psc_xcalloc((s->npu ? s->npu : 1) * d, sizeof(float));
    for (size_t i = 0; i < op->npush; i++) { /* IndexedSlices: duplicate ids' rows summed */
        float *dst = s->push_sum + (size_t)ppos[i] * d;
        const float *src = op->push_grads + i * d;
        for (size_t j = 0; j < d; j++) dst[j] += src[j];
    }
    free(ppos);
    s->push_w = psc_xmalloc((s->npu ? s->npu : 1) * sizeof *s->push_w);
    uint32_t *psrc = psc_xmalloc((s->npu ? s->npu : 1) * sizeof *psrc);
    group(pc, op->table, s->push_u, s->npu, s->push_at, s->push_n, s->push_w, psrc);
    s->push_gw = psc_xmalloc((s->npu ? s->npu : 1) * d * sizeof(float));
    for (size_t w = 0; w < s->npu; w++) memcpy(s->push_gw + w * d, s->push_sum + (size_t)psrc[w] * d, d * 4);
    free(psrc);

    s->pull_u = psc_xmalloc(nl * sizeof *s->pull_u);
    s->pull_pos = psc_xmalloc(nl * sizeof *s->pull_pos);
    dedup(op->pull_ids, op->npull, s->pull_u, &s->nlu, s->pull_pos);
    s->pull_w = psc_xmalloc((s->nlu ? s->nlu : 1) * sizeof *s->pull_w);
    s->pull_back = psc_xmalloc((s->nlu ? s->nlu : 1) * sizeof *s->pull_back);
    group(pc, op->table, s->pull_u, s->nlu, s->pull_at, s->pull_n, s->pull_w, s->pull_back);
    s->pull_rows = psc_xmalloc((s->nlu ? s->nlu : 1) * d * sizeof(float));
}

/* The ids of op i, checked against the table before anything is sent. */
static int sop_check(const ps_client_t *pc, const ps_sparse_op_t *op, char *err, size_t errlen)
{
    if (op->table < 0 || op->table >= pc->ntables)
        return psc_seterr(err, errlen, PSC_EINVAL, "sparse op on table %d: %d tables declared", op->table,
                          pc->ntables);
    const psc_table_spec_t *t = &pc->tables[op->table];
    for (int k = 0; k < 2; k++) {
        const int64_t *ids = k ? op->pull_ids : op->push_ids;
        size_t n = k ? op->npull : op->npush;
        if (n > SPARSE_CLIENT_MAX_IDS)
            return psc_seterr(err, errlen, PSC_ENOMEM, "sparse %s of %zu ids on table %s: at most %u per call",
                              k ? "pull" : "push", n, t->name, SPARSE_CLIENT_MAX_IDS);
        for (size_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= t->rows)
                return psc_seterr(err, errlen, PSC_EINVAL, "table %s: id %" PRId64 " out of range [0, %" PRId64 ")",
                                  t->name, ids[i], t->rows);
    }
    return 0;
}

/* A Batch of one PS: slices of the ops' per-PS id ranges. Each Batch keeps
 * both its request and its reply's rows under SPARSE_BATCH_BUDGET bytes, so
 * every message stays far below the 8 MiB limit (wire.h) and the PS's limit
 * on sparse reply bytes; a bigger op is split over several Batches (after
 * the deduplication, so a push's duplicates are still summed once). */
#define SPARSE_BATCH_BUDGET ((size_t)3 << 20)

typedef struct sitem {
    int op, push;
    size_t from, n; /* positions in the op's ids grouped for this PS (push_w / pull_w) */
} sitem_t;

typedef struct sbatch {
    int ps;
    sitem_t *items;
    int nitems, cap;
    size_t out, in; /* request and reply row bytes so far */
} sbatch_t;

static sbatch_t *batch_new(sbatch_t **b, int *nb, int *cap, int ps)
{
    if (*nb == *cap) {
        *cap = *cap ? 2 * *cap : 8;
        *b = psc_xrealloc(*b, (size_t)*cap * sizeof **b);
    }
    sbatch_t *x = &(*b)[(*nb)++];
    memset(x, 0, sizeof *x);
    x->ps = ps;
    return x;
}

static void batch_add(sbatch_t *x, int op, int push, size_t from, size_t n)
{
    if (x->nitems == x->cap) {
        x->cap = x->cap ? 2 * x->cap : 8;
        x->items = psc_xrealloc(x->items, (size_t)x->cap * sizeof *x->items);
    }
    x->items[x->nitems++] = (sitem_t){op, push, from, n};
}

/* Splits every op's ids on every PS into Batches within the budget. sync:
 * every op that pushes contributes to every part, with no ids where it has
 * none (each part's step needs every replica's contribution). */
static void plan_batches(const ps_client_t *pc, const sop_t *s, int nops, int sync, sbatch_t **out, int *nout)
{
    sbatch_t *b = NULL;
    int nb = 0, cap = 0;
    for (int p = 0; p < pc->num_ps; p++) {
        int cur = -1;
        for (int i = 0; i < nops; i++)
            for (int push = 1; push >= 0; push--) {
                size_t at = push ? s[i].push_at[p] : s[i].pull_at[p], left = push ? s[i].push_n[p] : s[i].pull_n[p];
                size_t row = 4 * (size_t)s[i].dim, out_cost = push ? 8 + row : 8, in_cost = push ? 0 : row;
                if (sync && push && !left && s[i].op->push_grads) { /* an empty contribution */
                    if (cur < 0) cur = (int)(batch_new(&b, &nb, &cap, p) - b);
                    batch_add(&b[cur], i, 1, at, 0);
                }
                while (left) {
                    if (cur < 0) cur = (int)(batch_new(&b, &nb, &cap, p) - b);
                    sbatch_t *x = &b[cur];
                    size_t k = (SPARSE_BATCH_BUDGET - x->out) / out_cost;
                    if (in_cost) k = PSC_MIN(k, (SPARSE_BATCH_BUDGET - x->in) / in_cost);
                    k = PSC_MIN(k, PSC_MIN(left, (size_t)SPARSE_BATCH_MAX_IDS));
                    if (k == 0) { /* full: the next slice opens another Batch */
                        cur = -1;
                        continue;
                    }
                    batch_add(x, i, push, at, k);
                    x->out += k * out_cost;
                    x->in += k * in_cost;
                    at += k;
                    left -= k;
                }
            }
    }
    *out = b;
    *nout = nb;
}

/* One Batch's items as request messages: the arrays live here until freed. */
typedef struct sitems {
    Psc__SparsePush *push, **pp;
    Psc__SparsePull *pull, **lp;
    size_t npush, npull;
} sitems_t;

/* Fills x's items: its pushes, then its pulls. */
static void items_fill(const ps_client_t *pc, const sop_t *s, const sbatch_t *x, const sround_t *sy, sitems_t *it)
{
    size_t n = (size_t)(x->nitems ? x->nitems : 1);
    memset(it, 0, sizeof *it);
    it->push = psc_xcalloc(n, sizeof *it->push);
    it->pull = psc_xcalloc(n, sizeof *it->pull);
    it->pp = psc_xcalloc(n, sizeof *it->pp);
    it->lp = psc_xcalloc(n, sizeof *it->lp);
    for (int k = 0; k < x->nitems; k++) {
        const sitem_t *t = &x->items[k];
        const sop_t *o = &s[t->op];
        const char *name = pc->tables[o->op->table].name;
        size_t d = (size_t)o->dim;
        if (t->push) {
            Psc__SparsePush *m = &it->push[it->npush];
            psc__sparse_push__init(m);
            m->table = (char *)name;
            m->ids.data = (uint8_t *)(o->push_w + t->from);
            m->ids.len = t->n * 8;
            m->values.data = (uint8_t *)(o->push_gw + t->from * d);
            m->values.len = t->n * d * 4;
            if (sy) {
                m->local_step = sy->local_step;
                m->worker = (uint32_t)pc->rank;
                m->count = sy->count;
            }
            it->pp[it->npush++] = m;
        } else {
            Psc__SparsePull *m = &it->pull[it->npull];
            psc__sparse_pull__init(m);
            m->table = (char *)name;
            m->ids.data = (uint8_t *)(o->pull_w + t->from);
            m->ids.len = t->n * 8;
            if (sy) m->min_step = sy->min_step;
            m->read_only = o->op->read_only || o->op->checkpoint;
            m->checkpoint = o->op->checkpoint;
            it->lp[it->npull++] = m;
        }
    }
}

static void items_free(sitems_t *it)
{
    free(it->push);
    free(it->pull);
    free(it->pp);
    free(it->lp);
}

static void items_into(const sitems_t *it, Psc__BatchRequest *req)
{
    req->n_sparse_push = it->npush;
    req->sparse_push = it->pp;
    req->n_sparse_pull = it->npull;
    req->sparse_pull = it->lp;
}

/* Packs one Batch of sparse items only. */
static size_t pack_batch(const ps_client_t *pc, const sop_t *s, const sbatch_t *x, const sround_t *sy, uint8_t **buf)
{
    sitems_t it;
    items_fill(pc, s, x, sy, &it);
    Psc__BatchRequest req = PSC__BATCH_REQUEST__INIT;
    items_into(&it, &req);
    req.global_step = __atomic_load_n(&pc->last_global_step, __ATOMIC_RELAXED);
    size_t len = psc__batch_request__get_packed_size(&req);
    *buf = psc_xmalloc(len ? len : 1);
    psc__batch_request__pack(&req, *buf);
    items_free(&it);
    return len;
}

/* Takes one Batch's reply: its pull items' rows into each op's pull_rows;
 * *stale += the sync pushes it says were dropped. */
static int take_reply(const ps_client_t *pc, sop_t *s, const sbatch_t *x, const psc_rpc_op_t *op, size_t *stale,
                      char *err, size_t errlen)
{
    Psc__BatchReply *r = psc__batch_reply__unpack(NULL, op->reply_len, op->reply);
    if (!r)
        return psc_seterr(err, errlen, PSC_ECORRUPT, "sparse batch reply from %s does not parse",
                          psc_rpc_channel_target(op->ch));
    int rc = 0;
    size_t k = 0;
    for (int j = 0; j < x->nitems && rc == 0; j++) {
        const sitem_t *it = &x->items[j];
        if (it->push) continue;
        sop_t *o = &s[it->op];
        size_t d = (size_t)o->dim, bytes = it->n * d * 4;
        const char *name = pc->tables[o->op->table].name;
        if (k >= r->n_sparse_pull || strcmp(r->sparse_pull[k]->table, name) != 0 ||
            r->sparse_pull[k]->values.len != bytes) {
            rc = psc_seterr(err, errlen, PSC_ECORRUPT, "sparse batch reply from %s: item %zu is not %s's %zu bytes",
                            psc_rpc_channel_target(op->ch), k, name, bytes);
            break;
        }
        const uint8_t *src = r->sparse_pull[k]->values.data;
        for (size_t w = 0; w < it->n; w++)
            memcpy(o->pull_rows + (size_t)o->pull_back[it->from + w] * d, src + w * d * 4, d * 4);
        k++;
    }
    for (size_t j = 0; rc == 0 && j < r->n_sparse_push_stale; j++) *stale += r->sparse_push_stale[j] != 0;
    psc__batch_reply__free_unpacked(r, NULL);
    return rc;
}

/* A sparse round in progress (ps_client_internal.h): its ops prepared and
 * planned; each planned Batch either merged into the dense round's Batch of
 * its PS or sent as a call of its own. */
struct pcl_sparse {
    const ps_sparse_op_t *ops;
    int nops;
    sround_t sy;
    int sync;
    sop_t *s;
    sbatch_t *b;
    int nb;
    int *merged;       /* (nb) 1: b[k] travels in the dense round's Batch of its PS */
    sitems_t *items;   /* (nb) the merged ones' items */
    psc_rpc_op_t *own; /* (nb) the calls of the others, in b's order of them */
    int *own_k;        /* (nb) own[j] is b[own_k[j]] */
    uint8_t **bufs;    /* (nb) their packed requests */
    size_t nown;
};

int pcl_sparse_begin(ps_client_t *pc, const ps_sparse_op_t *ops, int nops, const sround_t *sy, pcl_sparse_t **out,
                     char *err, size_t errlen)
{
    *out = NULL;
    for (int i = 0; i < nops; i++) {
        int rc = sop_check(pc, &ops[i], err, errlen);
        if (rc) return rc;
    }
    pcl_sparse_t *r = psc_xcalloc(1, sizeof *r);
    r->ops = ops;
    r->nops = nops;
    if (sy) r->sy = *sy;
    r->sync = sy != NULL;
    r->s = psc_xcalloc((size_t)(nops ? nops : 1), sizeof *r->s);
    for (int i = 0; i < nops; i++) sop_prepare(pc, &ops[i], &r->s[i]);
    plan_batches(pc, r->s, nops, r->sync, &r->b, &r->nb);
    size_t nb = (size_t)(r->nb ? r->nb : 1);
    r->merged = psc_xcalloc(nb, sizeof *r->merged);
    r->items = psc_xcalloc(nb, sizeof *r->items);
    r->own = psc_xcalloc(nb, sizeof *r->own);
    r->own_k = psc_xcalloc(nb, sizeof *r->own_k);
    r->bufs = psc_xcalloc(nb, sizeof *r->bufs);
    *out = r;
    return 0;
}

void pcl_sparse_merge(ps_client_t *pc, pcl_sparse_t *r, int ps, Psc__BatchRequest *req)
{
    for (int k = 0; r && k < r->nb; k++)
        if (r->b[k].ps == ps && !r->merged[k]) {
            items_fill(pc, r->s, &r->b[k], r->sync ? &r->sy : NULL, &r->items[k]);
            items_into(&r->items[k], req);
            r->merged[k] = 1;
            return;
        }
}

psc_rpc_op_t *pcl_sparse_own(ps_client_t *pc, pcl_sparse_t *r, size_t *n)
{
    r->nown = 0;
    for (int k = 0; k < r->nb; k++) {
        if (r->merged[k]) continue;
        psc_rpc_op_t *op = &r->own[r->nown];
        memset(op, 0, sizeof *op);
        op->ch = pc->ch[r->b[k].ps];
        op->method = PSC_M_BATCH;
        op->hdr_len = pack_batch(pc, r->s, &r->b[k], r->sync ? &r->sy : NULL, &r->bufs[k]);
        op->hdr = r->bufs[k];
        r->own_k[r->nown++] = k;
    }
    *n = r->nown;
    return r->own;
}

int pcl_sparse_finish(ps_client_t *pc, pcl_sparse_t *r, const psc_rpc_op_t *const *dense_of_ps, char *err,
                      size_t errlen)
{
    size_t stale = 0;
    uint64_t out = 0, in = 0;
    int rc = 0;
    for (int k = 0; rc == 0 && k < r->nb; k++) {
        if (!r->merged[k]) continue;
        const psc_rpc_op_t *op = dense_of_ps[r->b[k].ps];
        PSC_ASSERT(op != NULL);
        rc = take_reply(pc, r->s, &r->b[k], op, &stale, err, errlen);
    }
    for (size_t j = 0; rc == 0 && j < r->nown; j++) {
        rc = take_reply(pc, r->s, &r->b[r->own_k[j]], &r->own[j], &stale, err, errlen);
        out += r->own[j].hdr_len;
        in += r->own[j].reply_total;
    }
    for (int i = 0; rc == 0 && i < r->nops; i++) { /* each pulled position gets its unique id's row */
        size_t d = (size_t)r->s[i].dim;
        for (size_t k = 0; !r->s[i].borrowed && k < r->ops[i].npull; k++)
            memcpy(r->ops[i].pull_rows + k * d, r->s[i].pull_rows + (size_t)r->s[i].pull_pos[k] * d, d * 4);
    }
    for (int i = 0; i < r->nops; i++)
        if (r->ops[i].stats)
            *r->ops[i].stats = (ps_sparse_stats_t){.unique_push = r->s[i].npu,
                                                   .unique_pull = r->s[i].nlu,
                                                   .calls = r->nown,
                                                   .stale = stale,
                                                   .bytes_out = out,
                                                   .bytes_in = in};
    return rc;
}

void pcl_sparse_free(pcl_sparse_t *r)
{
    if (!r) return;
    pcl_clear_ops(r->own, r->nown);
    for (int k = 0; k < r->nb; k++) {
        free(r->bufs[k]);
        free(r->b[k].items);
        if (r->merged[k]) items_free(&r->items[k]);
    }
    for (int i = 0; i < r->nops; i++) sop_free(&r->s[i]);
    free(r->s);
    free(r->b);
    free(r->merged);
    free(r->items);
    free(r->own);
    free(r->own_k);
    free(r->bufs);
    free(r);
}

static int sparse_round(ps_client_t *pc, const ps_sparse_op_t *ops, int nops, const sround_t *sy, char *err,
                        size_t errlen)
{
    pcl_sparse_t *r;
    int rc = pcl_sparse_begin(pc, ops, nops, sy, &r, err, errlen);
    if (rc) return rc;
    size_t n;
    psc_rpc_op_t *own = pcl_sparse_own(pc, r, &n);
    rc = psc_rpc_run(own, n, PS_CLIENT_IN_FLIGHT, pc->timeout_ms);
    if (rc) rc = pcl_op_error(own, n, "sparse push-pull", err, errlen);
    if (!rc) rc = pcl_sparse_finish(pc, r, NULL, err, errlen);
    pcl_sparse_free(r);
    return rc;
}

void ps_client_round_sparse(ps_client_t *pc, const ps_sparse_op_t *ops, int nops)
{
    pc->round_ops = ops;
    pc->round_nops = nops;
}

int ps_client_sparse(ps_client_t *pc, const ps_sparse_op_t *ops, int nops, char *err, size_t errlen)
{
    return sparse_round(pc, ops, nops, NULL, err, errlen);
}

int ps_client_sparse_sync(ps_client_t *pc, const ps_sparse_op_t *ops, int nops, int64_t local_step, uint32_t count,
                          int64_t min_step, char *err, size_t errlen)
{
    sround_t sy = {local_step, min_step, count ? count : 1};
    return sparse_round(pc, ops, nops, &sy, err, errlen);
}
