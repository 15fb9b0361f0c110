/* ps_client.c — see ps_client.h: the data plane. The control plane (the
 * model's creation, checkpoints, status) is in ps_client_ctl.c; both share
 * ps_client_internal.h.
 *
 * The op tables for pull and push-pull are built once at create (one op per
 * chunk of every placed piece, plus one Step op); a step only refills the
 * per-call fields, so nothing but the reply buffers is allocated per step.
 * ps_client_push_pull_start runs the same round on the client's own thread.
 */
#include "ps_client.h"

#include "bf16.h"
#include "chunk.h"
#include "log.h"
#include "ps_client_internal.h"
#include "psc.h"
#include "psc.pb-c.h"
#include "rpc.h"
#include "wire.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What one push round contributes (sync) and what came back. */
typedef struct round {
    int64_t step_inc;   /* async: added to global_step */
    int sync;           /* contributions of a sync step: */
    int64_t local_step; /* the step the gradients were computed at */
    uint32_t count;     /* batches summed in them */
    int stale;          /* out: replies that said the contribution was stale */
} round_t;

static size_t pack_pull_request(const char *name, uint64_t off, uint64_t len, uint64_t ckpt, uint8_t *buf)
{
    Psc__PullRequest r = PSC__PULL_REQUEST__INIT;
    r.name = (char *)name;
    r.offset = off;
    r.length = len;
    r.checkpoint = ckpt;
    PSC_ASSERT(psc__pull_request__get_packed_size(&r) <= PS_CLIENT_HDR_CAP);
    return psc__pull_request__pack(&r, buf);
}

ps_client_t *ps_client_create(const psc_cluster_t *cluster, const psc_var_desc_t *vars, int nvars,
                              const psc_placed_var_t *placed, int nplaced, int rank, int timeout_ms)
{
    ps_client_t *pc = psc_xcalloc(1, sizeof *pc);
    pc->num_ps = cluster->n[PSC_JOB_PS];
    pc->ch = psc_xcalloc((size_t)pc->num_ps, sizeof *pc->ch);
    for (int i = 0; i < pc->num_ps; i++) pc->ch[i] = psc_rpc_channel_create(cluster->addr[PSC_JOB_PS][i]);
    pc->placed = psc_xmalloc((size_t)nplaced * sizeof *placed);
    memcpy(pc->placed, placed, (size_t)nplaced * sizeof *placed);
    pc->nplaced = nplaced;
    pc->rank = rank;
    pc->timeout_ms = timeout_ms;
    pc->step_ps = -1;

    /* Slab offsets of each variable (global_step takes no room), then of each piece. */
    int64_t *var_off = psc_xcalloc((size_t)nvars, sizeof *var_off);
    int64_t at = 0;
    for (int i = 0; i < nvars; i++) {
        var_off[i] = at;
        if (!vars[i].is_step) at += vars[i].numel;
    }
    pc->slab_offset = psc_xcalloc((size_t)nplaced, sizeof *pc->slab_offset);
    size_t nchunks = 0;
    for (int p = 0; p < nplaced; p++) {
        pc->slab_offset[p] = var_off[placed[p].var_index] + placed[p].elem_offset;
        if (placed[p].is_step)
            pc->step_ps = placed[p].ps;
        else
            nchunks += psc_chunk_count((uint64_t)placed[p].numel * 4);
    }
    free(var_off);
    pc->nelems = at;
    pc->chunks = psc_xcalloc(nchunks ? nchunks : 1, sizeof *pc->chunks);
    pc->ops = psc_xcalloc(nchunks + 1, sizeof *pc->ops);
    size_t k = 0;
    for (int p = 0; p < nplaced; p++) {
        if (placed[p].is_step) continue;
        uint64_t total = (uint64_t)placed[p].numel * 4;
        for (size_t c = 0; c < psc_chunk_count(total); c++, k++) {
            piece_chunk_t *pk = &pc->chunks[k];
            pk->piece = p;
            pk->offset = psc_chunk_offset(c);
            pk->len = psc_chunk_len(total, c);
            pk->slab_byte = (size_t)pc->slab_offset[p] * 4 + pk->offset;
        }
    }
    pc->nchunks = nchunks;
    pc->op_chunk = psc_xcalloc(nchunks ? nchunks : 1, sizeof *pc->op_chunk);
    pc->chunk_batch = psc_xcalloc(nchunks ? nchunks : 1, sizeof *pc->chunk_batch);
    ps_client_set_batch_bytes(pc, PSC_BATCH_TENSOR_BYTES);
    pthread_mutex_init(&pc->pp.mu, NULL);
    pthread_cond_init(&pc->pp.cv, NULL);
    return pc;
}

static void batches_free(ps_client_t *pc)
{
    for (int b = 0; b < pc->nbatches; b++) {
        ps_batch_t *bt = &pc->batches[b];
        free(bt->chunk);
        free(bt->push);
        free(bt->push_p);
        free(bt->pull);
        free(bt->pull_p);
        free(bt->req);
    }
    free(pc->batches);
    pc->batches = NULL;
    pc->nbatches = 0;
    for (size_t k = 0; k < pc->nchunks; k++) pc->chunk_batch[k] = -1;
}

/* Groups, per PS in placement order, the pieces of at most max_bytes into
 * batches of at most PSC_BATCH_BYTES of data and PSC_BATCH_MAX_ITEMS/2 pieces
 * (a push-pull sends each piece twice: a push and a pull). */
void ps_client_set_batch_bytes(ps_client_t *pc, size_t max_bytes)
{
    batches_free(pc);
    free(pc->ops);
    if (max_bytes > PSC_BATCH_BYTES) max_bytes = PSC_BATCH_BYTES;
    pc->batch_max = max_bytes;
    size_t cap = 0;
    for (int ps = 0; max_bytes && ps < pc->num_ps; ps++) {
        ps_batch_t *cur = NULL;
        size_t bytes = 0;
        for (size_t k = 0; k < pc->nchunks; k++) {
            piece_chunk_t *pk = &pc->chunks[k];
            const psc_placed_var_t *pv = &pc->placed[pk->piece];
            if (pv->ps != ps || (uint64_t)pv->numel * 4 > max_bytes) continue;
            if (!cur || bytes + pk->len > PSC_BATCH_BYTES || cur->n == PSC_BATCH_MAX_ITEMS / 2) {
                if (pc->nbatches == (int)cap) {
                    cap = cap ? 2 * cap : 4;
                    pc->batches = psc_xrealloc(pc->batches, cap * sizeof *pc->batches);
                }
                cur = &pc->batches[pc->nbatches++];
                memset(cur, 0, sizeof *cur);
                cur->ps = ps;
                cur->chunk = psc_xcalloc(pc->nchunks, sizeof *cur->chunk);
                cur->step = ps == pc->step_ps && !(pc->nbatches > 1 && pc->batches[pc->nbatches - 2].ps == ps);
                bytes = 0;
            }
            pc->chunk_batch[k] = pc->nbatches - 1;
            cur->chunk[cur->n++] = k;
            bytes += pk->len;
        }
    }
    for (int b = 0; b < pc->nbatches; b++) {
        ps_batch_t *bt = &pc->batches[b];
        bt->push = psc_xcalloc(bt->n, sizeof *bt->push);
        bt->push_p = psc_xcalloc(bt->n, sizeof *bt->push_p);
        bt->pull = psc_xcalloc(bt->n, sizeof *bt->pull);
        bt->pull_p = psc_xcalloc(bt->n, sizeof *bt->pull_p);
    }
    pc->ops = psc_xcalloc(pc->nchunks + (size_t)pc->nbatches + 1, sizeof *pc->ops);
}

size_t ps_client_batch_bytes(const ps_client_t *pc) { return pc->batch_max; }

int ps_client_batch_calls(const ps_client_t *pc, int *carries_step)
{
    if (carries_step) {
        *carries_step = 0;
        for (int b = 0; b < pc->nbatches; b++) *carries_step |= pc->batches[b].step;
    }
    return pc->nbatches;
}

void ps_client_set_gradient_dtype(ps_client_t *pc, int encoding, int error_feedback)
{
    PSC_ASSERT(encoding == PSC_ENC_FLOAT32 || encoding == PSC_ENC_BFLOAT16);
    free(pc->wire16);
    free(pc->resid);
    pc->wire16 = NULL;
    pc->resid = NULL;
    pc->encoding = encoding;
    if (encoding == PSC_ENC_BFLOAT16) {
        pc->wire16 = psc_xmalloc((size_t)PSC_MAX(pc->nelems, 1) * sizeof *pc->wire16);
        if (error_feedback) pc->resid = psc_xcalloc((size_t)PSC_MAX(pc->nelems, 1), sizeof *pc->resid);
    }
}

/* What a push sends for the slab's byte range starting at slab_byte (a float32
 * offset): the gradients themselves, or their bfloat16 encoding. */
static const uint8_t *push_data(const ps_client_t *pc, const float *grads, size_t slab_byte)
{
    if (pc->encoding == PSC_ENC_BFLOAT16) return (const uint8_t *)pc->wire16 + slab_byte / 2;
    return (const uint8_t *)grads + slab_byte;
}
static size_t push_len(const ps_client_t *pc, size_t len) { return pc->encoding == PSC_ENC_BFLOAT16 ? len / 2 : len; }

static void push_pull_thread_stop(ps_client_t *pc);

void ps_client_destroy(ps_client_t *pc)
{
    if (!pc) return;
    push_pull_thread_stop(pc); /* after the call in flight, if any */
    pthread_mutex_destroy(&pc->pp.mu);
    pthread_cond_destroy(&pc->pp.cv);
    free(pc->wire16);
    free(pc->resid);
    for (int i = 0; i < pc->num_ps; i++) psc_rpc_channel_destroy(pc->ch[i]);
    free(pc->ch);
    for (int i = 0; i < pc->nsrc; i++) psc_rpc_channel_destroy(pc->src_ch[i]);
    free(pc->src_ch);
    free(pc->placed);
    free(pc->slab_offset);
    batches_free(pc);
    free(pc->chunks);
    free(pc->ops);
    free(pc->op_chunk);
    free(pc->chunk_batch);
    free(pc->tables);
    free(pc->table_part_ps);
    free(pc->table_rows_seen);
    free(pc);
}

void ps_client_set_progress(ps_client_t *pc, int64_t replica_step) { pc->replica_step = replica_step; }

int ps_client_num_ps(const ps_client_t *pc) { return pc->num_ps; }
int ps_client_step_ps(const ps_client_t *pc) { return pc->step_ps; }

/* Checks that a Chunk reply is the chunk asked for. The op asked for the data
 * to land in dst directly (reply_body); if the reply was too short to split,
 * its data is copied from the reply. */
static int take_chunk_reply(const psc_rpc_op_t *op, const piece_chunk_t *pk, const char *name, void *dst, int *stale,
                            char *err, size_t errlen)
{
    Psc__Chunk *c;
    const uint8_t *data;
    size_t dlen;
    if (psc_chunk_decode(op->reply, op->reply_len, op->reply_total, &c, &data, &dlen))
        return psc_seterr(err, errlen, PSC_ECORRUPT, "%s: reply from %s does not parse", name,
                          psc_rpc_channel_target(op->ch));
    int rc = 0;
    if (strcmp(c->name, name) != 0 || c->offset != pk->offset || dlen != pk->len)
        rc = psc_seterr(err, errlen, PSC_ECORRUPT, "%s: reply from %s is for %s@%llu (%zu bytes)", name,
                        psc_rpc_channel_target(op->ch), c->name, (unsigned long long)c->offset, dlen);
    else if (data && dlen)
        memcpy(dst, data, dlen);
    if (rc == 0 && stale && c->stale) (*stale)++;
    psc__chunk__free_unpacked(c, NULL);
    return rc;
}

static void fill_step_op(ps_client_t *pc, psc_rpc_op_t *op, uint8_t *buf, const round_t *rd)
{
    Psc__StepRequest r = PSC__STEP_REQUEST__INIT;
    r.increment = rd->step_inc;
    r.replica_step = pc->replica_step;
    r.worker = (uint32_t)pc->rank;
    if (rd->sync) {
        r.local_step = rd->local_step;
        r.count = rd->count;
        r.worker = (uint32_t)pc->rank;
    }
    memset(op, 0, sizeof *op);
    op->ch = pc->ch[pc->step_ps];
    op->method = PSC_M_STEP;
    op->hdr = buf;
    op->hdr_len = psc__step_request__pack(&r, buf);
}

static int take_step_reply(const psc_rpc_op_t *op, int64_t *global_step, int *stale, char *err, size_t errlen)
{
    Psc__StepReply *r = psc__step_reply__unpack(NULL, op->reply_len, op->reply);
    if (!r) return psc_seterr(err, errlen, PSC_ECORRUPT, "Step reply does not parse");
    if (global_step) *global_step = r->global_step;
    if (stale && r->stale) (*stale)++;
    psc__step_reply__free_unpacked(r, NULL);
    return 0;
}

/* What a round does: pull, push, or push-pull (push, then the new values back). */
enum round_kind { ROUND_PULL, ROUND_PUSH, ROUND_PUSH_PULL };

/* Fills the Batch op of bt for a round: every piece's push (the gradient) and/or
 * pull (its whole range), and the round's Step when bt carries it. */
static void fill_batch_op(ps_client_t *pc, ps_batch_t *bt, psc_rpc_op_t *op, enum round_kind kind, const float *grads,
                          const round_t *rd, pcl_sparse_t *sr)
{
    Psc__BatchRequest req = PSC__BATCH_REQUEST__INIT;
    for (size_t j = 0; j < bt->n; j++) {
        const piece_chunk_t *pk = &pc->chunks[bt->chunk[j]];
        const psc_placed_var_t *pv = &pc->placed[pk->piece];
        if (kind != ROUND_PULL) {
            Psc__Chunk *c = &bt->push[j];
            psc__chunk__init(c);
            c->name = (char *)pv->name;
            c->offset = pk->offset;
            c->total = (uint64_t)pv->numel * 4;
            c->worker = (uint32_t)pc->rank;
            c->encoding = (uint32_t)pc->encoding;
            c->data.data = (uint8_t *)push_data(pc, grads, pk->slab_byte);
            c->data.len = push_len(pc, pk->len);
            bt->push_p[j] = c;
        }
        if (kind != ROUND_PUSH) {
            Psc__PullRequest *r = &bt->pull[j];
            psc__pull_request__init(r);
            r->name = (char *)pv->name;
            r->offset = pk->offset;
            r->length = pk->len;
            bt->pull_p[j] = r;
        }
    }
    if (kind != ROUND_PULL) {
        req.n_push = bt->n;
        req.push = bt->push_p;
    }
    if (kind != ROUND_PUSH) {
        req.n_pull = bt->n;
        req.pull = bt->pull_p;
    }
    req.global_step = __atomic_load_n(&pc->last_global_step,
                                      __ATOMIC_RELAXED); /* learning-rate schedules on a PS without global_step */
    pcl_sparse_merge(pc, sr, bt->ps, &req);  /* sr: the round's sparse items for this PS ride along */
    Psc__StepRequest step = PSC__STEP_REQUEST__INIT;
    if (bt->step) {
        step.increment = rd->step_inc;
        step.replica_step = pc->replica_step;
        step.worker = (uint32_t)pc->rank;
        req.step = &step;
    }
    size_t len = psc__batch_request__get_packed_size(&req);
    if (len > bt->req_cap) {
        free(bt->req);
        bt->req = psc_xmalloc(len);
        bt->req_cap = len;
    }
    memset(op, 0, sizeof *op);
    op->ch = pc->ch[bt->ps];
    op->method = PSC_M_BATCH;
    op->hdr = bt->req;
    op->hdr_len = psc__batch_request__pack(&req, bt->req);
}

/* Checks a Batch reply against its request and copies the pulled values into
 * params; global_step from the step it carried. */
static int take_batch_reply(ps_client_t *pc, const ps_batch_t *bt, const psc_rpc_op_t *op, enum round_kind kind,
                            float *params, int64_t *global_step, char *err, size_t errlen)
{
    Psc__BatchReply *r = psc__batch_reply__unpack(NULL, op->reply_len, op->reply);
    if (!r)
        return psc_seterr(err, errlen, PSC_ECORRUPT, "batch reply from %s does not parse",
                          psc_rpc_channel_target(op->ch));
    int rc = 0;
    size_t want_pull = kind != ROUND_PUSH ? bt->n : 0, want_push = kind != ROUND_PULL ? bt->n : 0;
    if (r->n_pull != want_pull || r->n_push_version != want_push || (bt->step && !r->step))
        rc = psc_seterr(err, errlen, PSC_ECORRUPT, "batch reply from %s has %zu pulls and %zu pushes, not %zu and %zu",
                        psc_rpc_channel_target(op->ch), r->n_pull, r->n_push_version, want_pull, want_push);
    for (size_t j = 0; rc == 0 && j < r->n_pull; j++) {
        const piece_chunk_t *pk = &pc->chunks[bt->chunk[j]];
        const char *name = pc->placed[pk->piece].name;
        const Psc__Chunk *c = r->pull[j];
        if (strcmp(c->name, name) != 0 || c->offset != pk->offset || c->data.len != pk->len)
            rc = psc_seterr(err, errlen, PSC_ECORRUPT, "%s: batch reply from %s is for %s@%llu (%zu bytes)", name,
                            psc_rpc_channel_target(op->ch), c->name, (unsigned long long)c->offset, c->data.len);
        else if (params && pk->len)
            memcpy((uint8_t *)params + pk->slab_byte, c->data.data, pk->len);
    }
    if (rc == 0 && bt->step && global_step) *global_step = r->step->global_step;
    psc__batch_reply__free_unpacked(r, NULL);
    return rc;
}

/* Runs the round's n calls in pc->ops and, with a sparse round sr, its
 * calls of its own (Batches not merged into the dense ones) at the same time. */
static int run_with_sparse(ps_client_t *pc, size_t n, pcl_sparse_t *sr, int timeout, const char *what, char *err,
                           size_t errlen)
{
    size_t nown = 0;
    psc_rpc_op_t *own = sr ? pcl_sparse_own(pc, sr, &nown) : NULL, *all = pc->ops;
    if (nown) {
        all = psc_xmalloc((n + nown) * sizeof *all);
        memcpy(all, pc->ops, n * sizeof *all);
        memcpy(all + n, own, nown * sizeof *all);
    }
    int rc = psc_rpc_run(all, n + nown, PS_CLIENT_IN_FLIGHT, timeout);
    if (rc) rc = pcl_op_error(all, n + nown, what, err, errlen);
    if (nown) {
        memcpy(pc->ops, all, n * sizeof *all);
        memcpy(own, all + n, nown * sizeof *all);
        free(all);
    }
    return rc;
}

/* One round over every piece: a chunk call for each chunk that is not
 * batched, a Batch call per batch (asynchronous rounds and live pulls only:
 * sync replies wait per chunk, checkpoint pulls read RocksDB per chunk), and a
 * Step call unless a batch carries it (none for a checkpoint pull). ckpt > 0:
 * pull committed checkpoint ckpt. */
static int run_round(ps_client_t *pc, enum round_kind kind, uint64_t ckpt, const float *grads, float *params,
                     round_t *rd, int64_t *global_step, char *err, size_t errlen)
{
    int batching = pc->nbatches > 0 && !rd->sync && !ckpt;
    pcl_sparse_t *sr = NULL; /* ps_client_round_sparse: sparse items ride on this round's Batches */
    if (pc->round_ops && !rd->sync && !ckpt) {
        int rc = pcl_sparse_begin(pc, pc->round_ops, pc->round_nops, NULL, &sr, err, errlen);
        pc->round_ops = NULL;
        pc->round_nops = 0;
        if (rc) return rc;
    }
    if (kind != ROUND_PULL && pc->encoding == PSC_ENC_BFLOAT16)
        psc_bf16_encode(grads, pc->resid, pc->wire16, (size_t)pc->nelems);
    const char *method = kind == ROUND_PULL ? PSC_M_PULL : kind == ROUND_PUSH ? PSC_M_PUSH : PSC_M_PUSH_PULL;
    size_t n = 0;
    for (size_t k = 0; k < pc->nchunks; k++) {
        if (batching && pc->chunk_batch[k] >= 0) continue;
        piece_chunk_t *pk = &pc->chunks[k];
        const psc_placed_var_t *pv = &pc->placed[pk->piece];
        psc_rpc_op_t *op = &pc->ops[n];
        memset(op, 0, sizeof *op);
        op->ch = pc->ch[pv->ps];
        op->method = method;
        if (kind == ROUND_PULL) {
            pk->hdr_len = pack_pull_request(pv->name, pk->offset, pk->len, ckpt, pk->hdr);
        } else {
            Psc__Chunk h = PSC__CHUNK__INIT;
            h.name = (char *)pv->name;
            h.offset = pk->offset;
            h.total = (uint64_t)pv->numel * 4;
            h.worker = (uint32_t)pc->rank;
            h.encoding = (uint32_t)pc->encoding;
            h.global_step = __atomic_load_n(&pc->last_global_step, __ATOMIC_RELAXED);
            if (rd->sync) {
                h.local_step = rd->local_step;
                h.count = rd->count;
            }
            PSC_ASSERT(psc_chunk_header_bound(&h) <= PS_CLIENT_HDR_CAP);
            op->body = push_data(pc, grads, pk->slab_byte);
            op->body_len = push_len(pc, pk->len);
            pk->hdr_len = psc_chunk_header_pack(&h, op->body_len, pk->hdr);
        }
        op->hdr = pk->hdr;
        op->hdr_len = pk->hdr_len;
        if (params) {
            op->reply_body = (uint8_t *)params + pk->slab_byte;
            op->reply_body_len = pk->len;
        }
        pc->op_chunk[n++] = k;
    }
    size_t nchunk_ops = n, step_op = SIZE_MAX;
    int step_in_batch = 0;
    const psc_rpc_op_t **dense_of_ps = psc_xcalloc((size_t)pc->num_ps, sizeof *dense_of_ps);
    for (int b = 0; batching && b < pc->nbatches; b++) {
        int first = !dense_of_ps[pc->batches[b].ps]; /* a PS's first Batch carries its sparse items */
        if (first) dense_of_ps[pc->batches[b].ps] = &pc->ops[n];
        fill_batch_op(pc, &pc->batches[b], &pc->ops[n++], kind, grads, rd, first ? sr : NULL);
        step_in_batch |= pc->batches[b].step;
    }
    uint8_t stepbuf[32];
    if (pc->step_ps >= 0 && !ckpt && !step_in_batch) {
        step_op = n;
        fill_step_op(pc, &pc->ops[n++], stepbuf, rd);
    }
    /* a sync reply waits on the PS until the step is applied: at most the
     * timeout after its first gradient (the PS gives up on it at 2x + 10 s) */
    int timeout = pc->timeout_ms + (rd->sync ? (int)(pc->sync_timeout * 2000) + 10000 : 0);
    rd->stale = 0;
    const char *what = kind == ROUND_PULL ? (ckpt ? "pull from checkpoint" : "pull") : "push";
    int rc = run_with_sparse(pc, n, sr, timeout, what, err, errlen);
    for (size_t i = 0; rc == 0 && params && i < nchunk_ops; i++) {
        piece_chunk_t *pk = &pc->chunks[pc->op_chunk[i]];
        rc = take_chunk_reply(&pc->ops[i], pk, pc->placed[pk->piece].name, (uint8_t *)params + pk->slab_byte,
                              &rd->stale, err, errlen);
    }
    int64_t gs = INT64_MIN; /* set by the reply that carried the step */
    for (int b = 0; rc == 0 && batching && b < pc->nbatches; b++)
        rc = take_batch_reply(pc, &pc->batches[b], &pc->ops[nchunk_ops + (size_t)b], kind, params, &gs, err, errlen);
    if (rc == 0 && step_op != SIZE_MAX) rc = take_step_reply(&pc->ops[step_op], &gs, &rd->stale, err, errlen);
    if (rc == 0 && sr) rc = pcl_sparse_finish(pc, sr, dense_of_ps, err, errlen);
    pcl_sparse_free(sr);
    free(dense_of_ps);
    pcl_clear_ops(pc->ops, n);
    if (rc == 0 && gs != INT64_MIN) {
        if (global_step) *global_step = gs;
        if (gs > pc->last_global_step) __atomic_store_n(&pc->last_global_step, gs, __ATOMIC_RELAXED);
    }
    return rc;
}

int ps_client_pull(ps_client_t *pc, float *params, int64_t *global_step, char *err, size_t errlen)
{
    round_t none = {0};
    return run_round(pc, ROUND_PULL, 0, NULL, params, &none, global_step, err, errlen);
}

int ps_client_pull_checkpoint(ps_client_t *pc, uint64_t ckpt, float *params, char *err, size_t errlen)
{
    round_t none = {0};
    return run_round(pc, ROUND_PULL, ckpt, NULL, params, &none, NULL, err, errlen);
}

int ps_client_push_pull(ps_client_t *pc, const float *grads, float *params, int64_t step_inc, int64_t *global_step,
                        char *err, size_t errlen)
{
    round_t rd = {.step_inc = step_inc};
    return run_round(pc, ROUND_PUSH_PULL, 0, grads, params, &rd, global_step, err, errlen);
}

int ps_client_push(ps_client_t *pc, const float *grads, int64_t step_inc, int64_t *global_step, char *err,
                   size_t errlen)
{
    round_t rd = {.step_inc = step_inc};
    return run_round(pc, ROUND_PUSH, 0, grads, NULL, &rd, global_step, err, errlen);
}

void ps_client_set_sync(ps_client_t *pc, int replicas_to_aggregate, int total_num_replicas, double timeout_secs)
{
    pc->sync = 1;
    pc->sync_r = replicas_to_aggregate;
    pc->sync_n = total_num_replicas;
    pc->sync_timeout = timeout_secs;
}

int ps_client_push_pull_sync(ps_client_t *pc, const float *grads, float *params, int64_t local_step, uint32_t count,
                             int64_t *global_step, int *stale, char *err, size_t errlen)
{
    PSC_ASSERT(pc->sync);
    round_t rd = {.sync = 1, .local_step = local_step, .count = count ? count : 1};
    int rc = run_round(pc, ROUND_PUSH_PULL, 0, grads, params, &rd, global_step, err, errlen);
    if (stale) *stale = rd.stale;
    return rc;
}

/* ---- the push-pull thread: a push-pull in flight while the caller computes ----
 *
 * One call at a time, as in ps-lite's KVWorker: start hands the buffers to
 * the thread and returns, wait takes the outcome. The caller touches the
 * ps_client only while no call is in flight, so the thread has it alone. */

static void *push_pull_main(void *arg)
{
    ps_client_t *pc = arg;
    pthread_mutex_lock(&pc->pp.mu);
    for (;;) {
        while (pc->pp.state != PCL_PP_ASKED && pc->pp.state != PCL_PP_QUIT) pthread_cond_wait(&pc->pp.cv, &pc->pp.mu);
        if (pc->pp.state == PCL_PP_QUIT) break;
        const float *grads = pc->pp.grads;
        float *params = pc->pp.params;
        pthread_mutex_unlock(&pc->pp.mu);
        char err[sizeof pc->pp.err] = "";
        int64_t gs = 0;
        double t0 = psc_now();
        int rc = ps_client_push_pull(pc, grads, params, 1, &gs, err, sizeof err);
        double secs = psc_now() - t0;
        pthread_mutex_lock(&pc->pp.mu);
        pc->pp.rc = rc;
        pc->pp.global_step = gs;
        pc->pp.secs = secs;
        memcpy(pc->pp.err, err, sizeof err);
        pc->pp.state = PCL_PP_DONE;
        pthread_cond_broadcast(&pc->pp.cv);
    }
    pthread_mutex_unlock(&pc->pp.mu);
    return NULL;
}

void ps_client_push_pull_start(ps_client_t *pc, const float *grads, float *params, int background)
{
    pthread_mutex_lock(&pc->pp.mu);
    PSC_ASSERT(pc->pp.state == PCL_PP_IDLE);
    if (!background) { /* the caller waits at once: the wait runs it, no hand-off to the thread */
        pc->pp.grads = grads;
        pc->pp.params = params;
        pc->pp.state = PCL_PP_INLINE;
        pthread_mutex_unlock(&pc->pp.mu);
        return;
    }
    if (!pc->pp.running) {
        char err[sizeof pc->pp.err];
        int rc = psc_thread_start(&pc->pp.thread, push_pull_main, pc, "push-pull", err, sizeof err);
        if (rc) { /* the call fails: ps_client_push_pull_wait reports it */
            pc->pp.rc = rc;
            pc->pp.secs = 0;
            memcpy(pc->pp.err, err, sizeof err);
            pc->pp.state = PCL_PP_DONE;
            pthread_mutex_unlock(&pc->pp.mu);
            return;
        }
        pc->pp.running = 1;
    }
    pc->pp.grads = grads;
    pc->pp.params = params;
    pc->pp.state = PCL_PP_ASKED;
    pthread_cond_broadcast(&pc->pp.cv);
    pthread_mutex_unlock(&pc->pp.mu);
}

int ps_client_push_pull_wait(ps_client_t *pc, int64_t *global_step, double *secs, char *err, size_t errlen)
{
    pthread_mutex_lock(&pc->pp.mu);
    PSC_ASSERT(pc->pp.state != PCL_PP_IDLE); /* a wait without a start */
    if (pc->pp.state == PCL_PP_INLINE) {
        const float *grads = pc->pp.grads;
        float *params = pc->pp.params;
        pc->pp.state = PCL_PP_IDLE;
        pthread_mutex_unlock(&pc->pp.mu);
        double t0 = psc_now();
        int64_t gs = 0;
        int rc = ps_client_push_pull(pc, grads, params, 1, &gs, err, errlen);
        if (rc == 0 && global_step) *global_step = gs;
        if (secs) *secs = psc_now() - t0;
        return rc;
    }
    while (pc->pp.state != PCL_PP_DONE) pthread_cond_wait(&pc->pp.cv, &pc->pp.mu);
    pc->pp.state = PCL_PP_IDLE;
    int rc = pc->pp.rc;
    if (rc == 0 && global_step) *global_step = pc->pp.global_step;
    if (secs) *secs = pc->pp.secs;
    if (rc) snprintf(err, errlen, "%s", pc->pp.err);
    pthread_mutex_unlock(&pc->pp.mu);
    return rc;
}

/* Lets a call in flight finish, then ends the thread (no-op when it never started). */
static void push_pull_thread_stop(ps_client_t *pc)
{
    pthread_mutex_lock(&pc->pp.mu);
    int running = pc->pp.running;
    while (running && pc->pp.state == PCL_PP_ASKED) pthread_cond_wait(&pc->pp.cv, &pc->pp.mu);
    pc->pp.state = PCL_PP_QUIT;
    pthread_cond_broadcast(&pc->pp.cv);
    pthread_mutex_unlock(&pc->pp.mu);
    if (running) pthread_join(pc->pp.thread, NULL);
    pc->pp.running = 0;
}
