/* ps_client.c — see ps_client.h.
 *
 * The op tables for pull and push-pull are built once at create (one op per
 * chunk of every placed piece, plus one Step op); a step only refills the
 * per-call fields, so nothing but the reply buffers is allocated per step.
 */
#include "ps_client.h"

#include "bf16.h"
#include "chunk.h"
#include "log.h"
#include "psc.h"
#include "psc.pb-c.h"
#include "rpc.h"
#include "wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PS_CLIENT_IN_FLIGHT 16
#define HDR_CAP 320

typedef struct piece_chunk {
    int piece;          /* index into placed */
    uint64_t offset;    /* byte offset inside the piece */
    size_t len;
    size_t slab_byte;   /* byte offset of this chunk inside the slab */
    uint8_t hdr[HDR_CAP];
    size_t hdr_len;
} piece_chunk_t;

/* A Batch call to one PS: its pieces of at most batch_max bytes (each one chunk). */
typedef struct ps_batch {
    int ps;
    size_t *chunk;          /* (n) indices into pc->chunks */
    size_t n;
    int step;               /* carries the round's Step (the PS holds global_step) */
    Psc__Chunk *push;       /* (n) request items, refilled each round */
    Psc__Chunk **push_p;
    Psc__PullRequest *pull; /* (n) */
    Psc__PullRequest **pull_p;
    uint8_t *req;           /* the packed request */
    size_t req_cap;
} ps_batch_t;

struct ps_client {
    int num_ps;
    psc_rpc_channel_t **ch;
    psc_placed_var_t *placed;
    int nplaced;
    int64_t *slab_offset; /* per placed piece: element offset in the slab */
    int step_ps;          /* -1 if the model has no global_step */
    int rank;
    int timeout_ms;
    piece_chunk_t *chunks; /* every chunk of every trainable piece */
    size_t nchunks;
    psc_rpc_op_t *ops;     /* nchunks + nbatches + 1 */
    size_t *op_chunk;      /* (nchunks) per chunk op of a round: its chunk */
    /* Batch calls (ps_client_set_batch_bytes): async rounds and live pulls */
    size_t batch_max;      /* pieces of at most this many bytes are batched; 0: none */
    ps_batch_t *batches;
    int nbatches;
    int *chunk_batch;      /* (nchunks) the batch of chunk k, or -1 */
    /* sync replicas (ps_client_set_sync) */
    int sync;
    int sync_r, sync_n;
    double sync_timeout;
    int64_t replica_step; /* this replica's steps, sent with every Step (ps_client_set_progress) */
    /* bfloat16 pushes (ps_client_set_gradient_dtype) */
    int64_t nelems;       /* floats in the slab */
    int encoding;         /* PSC_ENC_* of pushed gradients */
    uint16_t *wire16;     /* (nelems) the gradients as sent */
    float *resid;         /* (nelems) rounding errors still to send; NULL without error feedback */
};

/* What one push round contributes (sync) and what came back. */
typedef struct round {
    int64_t step_inc;   /* async: added to global_step */
    int sync;           /* contributions of a sync step: */
    int64_t local_step; /* the step the gradients were computed at */
    uint32_t count;     /* batches summed in them */
    int stale;          /* out: replies that said the contribution was stale */
} round_t;

static int restore_latest(ps_client_t *pc, const char *job_id, ps_model_origin_t *origin, char *err, size_t errlen);

static size_t pack_pull_request(const char *name, uint64_t off, uint64_t len, uint64_t ckpt, uint8_t *buf)
{
    Psc__PullRequest r = PSC__PULL_REQUEST__INIT;
    r.name = (char *)name;
    r.offset = off;
    r.length = len;
    r.checkpoint = ckpt;
    PSC_ASSERT(psc__pull_request__get_packed_size(&r) <= HDR_CAP);
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

void ps_client_destroy(ps_client_t *pc)
{
    if (!pc) return;
    free(pc->wire16);
    free(pc->resid);
    for (int i = 0; i < pc->num_ps; i++) psc_rpc_channel_destroy(pc->ch[i]);
    free(pc->ch);
    free(pc->placed);
    free(pc->slab_offset);
    batches_free(pc);
    free(pc->chunks);
    free(pc->ops);
    free(pc->op_chunk);
    free(pc->chunk_batch);
    free(pc);
}

void ps_client_set_progress(ps_client_t *pc, int64_t replica_step) { pc->replica_step = replica_step; }

int ps_client_num_ps(const ps_client_t *pc) { return pc->num_ps; }
int ps_client_step_ps(const ps_client_t *pc) { return pc->step_ps; }

/* The first failed op of a run, formatted into err; 0 if none failed. */
static int op_error(const psc_rpc_op_t *ops, size_t n, const char *what, char *err, size_t errlen)
{
    size_t bad = psc_rpc_first_failure(ops, n);
    if (bad == n) return 0;
    return psc_seterr(err, errlen, psc_rpc_code_errno(ops[bad].code), "%s on %s failed: %s: %s", what,
                      psc_rpc_channel_target(ops[bad].ch), psc_rpc_code_name(ops[bad].code), ops[bad].msg);
}

static void clear_ops(psc_rpc_op_t *ops, size_t n)
{
    for (size_t i = 0; i < n; i++) psc_rpc_op_clear(&ops[i]);
}

/* Checks that a Chunk reply is the chunk asked for. The op asked for the data
 * to land in dst directly (reply_body); if the reply was too short to split,
 * its data is copied from the reply. */
static int take_chunk_reply(const psc_rpc_op_t *op, const piece_chunk_t *pk, const char *name, void *dst,
                            int *stale, char *err, size_t errlen)
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
static void fill_batch_op(ps_client_t *pc, ps_batch_t *bt, psc_rpc_op_t *op, enum round_kind kind,
                          const float *grads, const round_t *rd)
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

/* One round over every piece: a chunk call for each chunk that is not
 * batched, a Batch call per batch (asynchronous rounds and live pulls only:
 * sync replies wait per chunk, checkpoint pulls read RocksDB per chunk), and a
 * Step call unless a batch carries it (none for a checkpoint pull). ckpt > 0:
 * pull committed checkpoint ckpt. */
static int run_round(ps_client_t *pc, enum round_kind kind, uint64_t ckpt, const float *grads, float *params,
                     round_t *rd, int64_t *global_step, char *err, size_t errlen)
{
    int batching = pc->nbatches > 0 && !rd->sync && !ckpt;
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
            if (rd->sync) {
                h.local_step = rd->local_step;
                h.count = rd->count;
            }
            PSC_ASSERT(psc_chunk_header_bound(&h) <= HDR_CAP);
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
    for (int b = 0; batching && b < pc->nbatches; b++) {
        fill_batch_op(pc, &pc->batches[b], &pc->ops[n++], kind, grads, rd);
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
    int rc = psc_rpc_run(pc->ops, n, PS_CLIENT_IN_FLIGHT, timeout);
    if (rc) rc = op_error(pc->ops, n, what, err, errlen);
    for (size_t i = 0; rc == 0 && params && i < nchunk_ops; i++) {
        piece_chunk_t *pk = &pc->chunks[pc->op_chunk[i]];
        rc = take_chunk_reply(&pc->ops[i], pk, pc->placed[pk->piece].name, (uint8_t *)params + pk->slab_byte,
                              &rd->stale, err, errlen);
    }
    for (int b = 0; rc == 0 && batching && b < pc->nbatches; b++)
        rc = take_batch_reply(pc, &pc->batches[b], &pc->ops[nchunk_ops + (size_t)b], kind, params, global_step, err,
                              errlen);
    if (rc == 0 && step_op != SIZE_MAX) rc = take_step_reply(&pc->ops[step_op], global_step, &rd->stale, err, errlen);
    clear_ops(pc->ops, n);
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

static void optim_to_proto(const psc_optim_config_t *o, Psc__OptimizerSpec *p)
{
    psc__optimizer_spec__init(p);
    p->name = (char *)psc_optim_name(o->kind);
    p->learning_rate = o->learning_rate;
    p->momentum = o->momentum;
    p->use_nesterov = o->use_nesterov;
    p->beta1 = o->beta1;
    p->beta2 = o->beta2;
    p->epsilon = o->epsilon;
    p->initial_accumulator_value = o->initial_accumulator_value;
    p->decay = o->decay;
}

/* The variables named in a partial re-initialization's warning; the rest are counted. */
#define PS_CLIENT_REINIT_NAMES 20

/* Some PS hold the model and the others lost it, with no checkpoint to restore:
 * the lost shards start again from initial values while the surviving ones keep
 * their training (throwing that away too would lose more). The model is then a
 * mix, so each lost PS gets one WARN naming its variables; its bit is set in
 * origin->reinitialized_ps (the first 64 PS) and origin->reinitialized counts them. */
static void warn_partial_reinit(const ps_client_t *pc, const int *ready, int nready, ps_model_origin_t *origin)
{
    char kept[128];
    size_t kat = 0;
    for (int i = 0, shown = 0; i < pc->num_ps && shown < PS_CLIENT_REINIT_NAMES; i++)
        if (ready[i] && kat < sizeof kept)
            kat += (size_t)snprintf(kept + kat, sizeof kept - kat, "%s%d", shown++ ? ", " : "", i);
    for (int i = 0; i < pc->num_ps; i++) {
        if (ready[i]) continue;
        origin->reinitialized++;
        if (i < 64) origin->reinitialized_ps |= UINT64_C(1) << i;
        char names[1024];
        size_t at = 0;
        int n = 0, shown = 0;
        names[0] = '\0';
        for (int p = 0; p < pc->nplaced; p++) {
            const psc_placed_var_t *pv = &pc->placed[p];
            if (pv->ps != i) continue;
            n++;
            if (shown == PS_CLIENT_REINIT_NAMES || at + strlen(pv->name) + 3 > sizeof names) continue;
            at += (size_t)snprintf(names + at, sizeof names - at, "%s%s", shown++ ? ", " : "", pv->name);
        }
        char more[48] = "";
        if (n > shown) snprintf(more, sizeof more, " and %d more", n - shown);
        PSC_WARN("ps %d lost its shard and there is no checkpoint to restore: re-initialized its %d variable%s "
                 "(%s%s) to initial values, while ps %s%s keep%s trained values: the model is now a mix; to avoid "
                 "this, give every ps a --checkpoint_dir and checkpoint early (checkpoint.every_steps in the job spec)",
                 i, n, n == 1 ? "" : "s", names, more, kept, nready > PS_CLIENT_REINIT_NAMES ? " and others" : "",
                 nready == 1 ? "s its" : " their");
    }
}

int ps_client_create_model(ps_client_t *pc, const char *job_id, const psc_optim_config_t *opt,
                           const float *init_params, ps_model_origin_t *origin, char *err, size_t errlen)
{
    int P = pc->num_ps, rc = 0;
    memset(origin, 0, sizeof *origin);
    /* 1. Create on every PS, each with its own pieces. */
    psc_rpc_op_t *ops = psc_xcalloc((size_t)P, sizeof *ops);
    uint8_t **bufs = psc_xcalloc((size_t)P, sizeof *bufs);
    Psc__OptimizerSpec op;
    optim_to_proto(opt, &op);
    Psc__VarSpec *specs = psc_xcalloc((size_t)pc->nplaced, sizeof *specs);
    Psc__VarSpec **sp = psc_xcalloc((size_t)pc->nplaced, sizeof *sp);
    for (int i = 0; i < P; i++) {
        Psc__CreateRequest req = PSC__CREATE_REQUEST__INIT;
        req.job_id = (char *)job_id;
        req.optimizer = &op;
        Psc__SyncSpec sync = PSC__SYNC_SPEC__INIT;
        if (pc->sync) {
            sync.replicas_to_aggregate = (uint32_t)pc->sync_r;
            sync.total_num_replicas = (uint32_t)pc->sync_n;
            sync.timeout_secs = pc->sync_timeout;
            req.sync = &sync;
        }
        size_t nv = 0;
        for (int p = 0; p < pc->nplaced; p++) {
            psc_placed_var_t *pv = &pc->placed[p];
            if (pv->ps != i) continue;
            psc__var_spec__init(&specs[nv]);
            specs[nv].name = pv->name;
            specs[nv].n_shape = (size_t)pv->rank;
            specs[nv].shape = pv->shape;
            specs[nv].is_step = pv->is_step;
            sp[nv] = &specs[nv];
            nv++;
        }
        req.n_vars = nv;
        req.vars = sp;
        size_t len = psc__create_request__get_packed_size(&req);
        bufs[i] = psc_xmalloc(len);
        psc__create_request__pack(&req, bufs[i]);
        ops[i].ch = pc->ch[i];
        ops[i].method = PSC_M_CREATE;
        ops[i].hdr = bufs[i];
        ops[i].hdr_len = len;
        ops[i].wait_for_ready = 1;
    }
    int *ready = psc_xcalloc((size_t)P, sizeof *ready);
    rc = psc_rpc_run(ops, (size_t)P, (size_t)P, pc->timeout_ms);
    if (rc) rc = op_error(ops, (size_t)P, "create", err, errlen);
    int nready = 0;
    for (int i = 0; rc == 0 && i < P; i++) {
        Psc__CreateReply *r = psc__create_reply__unpack(NULL, ops[i].reply_len, ops[i].reply);
        if (!r) {
            rc = psc_seterr(err, errlen, PSC_ECORRUPT, "create reply from ps %d does not parse", i);
            break;
        }
        ready[i] = r->ready;
        nready += r->ready;
        psc__create_reply__free_unpacked(r, NULL);
    }
    clear_ops(ops, (size_t)P);
    for (int i = 0; i < P; i++) free(bufs[i]);
    free(bufs);
    free(ops);
    free(sp);
    free(specs);
    if (rc) goto out;
    if (nready == P) {
        origin->joined = 1;
        goto out;
    }
    /* 2a. Restore the newest checkpoint committed and intact on every PS. */
    if ((rc = restore_latest(pc, job_id, origin, err, errlen)) != 0 || origin->restored) goto out;
    if (nready > 0) warn_partial_reinit(pc, ready, nready, origin);
    origin->initialized = 1;

    /* 2. Assign initial values to the pieces of every PS that is not ready. */
    size_t nops = 0;
    for (int p = 0; p < pc->nplaced; p++)
        if (!ready[pc->placed[p].ps])
            nops += pc->placed[p].is_step ? 1 : psc_chunk_count((uint64_t)pc->placed[p].numel * 4);
    ops = psc_xcalloc(nops ? nops : 1, sizeof *ops);
    uint8_t(*hdrs)[HDR_CAP] = psc_xcalloc(nops ? nops : 1, HDR_CAP);
    static const int64_t zero_step = 0;
    size_t k = 0;
    for (int p = 0; p < pc->nplaced; p++) {
        psc_placed_var_t *pv = &pc->placed[p];
        if (ready[pv->ps]) continue;
        uint64_t total = pv->is_step ? 8 : (uint64_t)pv->numel * 4;
        for (size_t c = 0; c < psc_chunk_count(total); c++, k++) {
            Psc__Chunk h = PSC__CHUNK__INIT;
            h.name = pv->name;
            h.offset = psc_chunk_offset(c);
            h.total = total;
            size_t len = psc_chunk_len(total, c);
            ops[k].ch = pc->ch[pv->ps];
            ops[k].method = PSC_M_ASSIGN;
            ops[k].hdr = hdrs[k];
            ops[k].hdr_len = psc_chunk_header_pack(&h, len, hdrs[k]);
            ops[k].body = pv->is_step ? (const void *)&zero_step
                                      : (const void *)((const uint8_t *)init_params +
                                                       (size_t)pc->slab_offset[p] * 4 + h.offset);
            ops[k].body_len = len;
        }
    }
    rc = psc_rpc_run(ops, nops, PS_CLIENT_IN_FLIGHT, pc->timeout_ms);
    if (rc) rc = op_error(ops, nops, "assign", err, errlen);
    clear_ops(ops, nops);
    free(ops);
    free(hdrs);
    if (rc) goto out;

    /* 3. Mark ready. */
    ops = psc_xcalloc((size_t)P, sizeof *ops);
    Psc__ReadyRequest rr = PSC__READY_REQUEST__INIT;
    rr.job_id = (char *)job_id;
    uint8_t rbuf[64];
    size_t rlen = psc__ready_request__pack(&rr, rbuf);
    size_t nr = 0;
    for (int i = 0; i < P; i++) {
        if (ready[i]) continue;
        ops[nr].ch = pc->ch[i];
        ops[nr].method = PSC_M_READY;
        ops[nr].hdr = rbuf;
        ops[nr].hdr_len = rlen;
        nr++;
    }
    rc = psc_rpc_run(ops, nr, nr, pc->timeout_ms);
    if (rc) rc = op_error(ops, nr, "ready", err, errlen);
    clear_ops(ops, nr);
    free(ops);
out:
    free(ready);
    return rc;
}

/* ---- checkpoints ---- */

/* Sends the same request to every PS (ops: P entries, cleared by the caller). */
static int run_on_all(ps_client_t *pc, const char *method, const uint8_t *req, size_t len, psc_rpc_op_t *ops,
                      const char *what, char *err, size_t errlen)
{
    for (int i = 0; i < pc->num_ps; i++) {
        memset(&ops[i], 0, sizeof ops[i]);
        ops[i].ch = pc->ch[i];
        ops[i].method = method;
        ops[i].hdr = req;
        ops[i].hdr_len = len;
    }
    int rc = psc_rpc_run(ops, (size_t)pc->num_ps, (size_t)pc->num_ps, pc->timeout_ms);
    return rc ? op_error(ops, (size_t)pc->num_ps, what, err, errlen) : 0;
}

int ps_client_ckpt_list(ps_client_t *pc, const char *job_id, int verify, ps_ckpt_list_t *out, char *err,
                        size_t errlen)
{
    memset(out, 0, sizeof *out);
    int P = pc->num_ps;
    Psc__ListCheckpointsRequest req = PSC__LIST_CHECKPOINTS_REQUEST__INIT;
    req.job_id = (char *)job_id;
    req.verify = verify;
    uint8_t buf[64];
    size_t len = psc__list_checkpoints_request__pack(&req, buf);
    psc_rpc_op_t *ops = psc_xcalloc((size_t)P, sizeof *ops);
    Psc__ListCheckpointsReply **reps = psc_xcalloc((size_t)P, sizeof *reps);
    int rc = run_on_all(pc, PSC_M_LIST_CKPT, buf, len, ops, "list checkpoints", err, errlen);
    for (int i = 0; rc == 0 && i < P; i++)
        if (!(reps[i] = psc__list_checkpoints_reply__unpack(NULL, ops[i].reply_len, ops[i].reply)))
            rc = psc_seterr(err, errlen, PSC_ECORRUPT, "checkpoint list from ps %d does not parse", i);
    clear_ops(ops, (size_t)P);
    if (rc) goto out;
    out->enabled = 1;
    for (int i = 0; i < P; i++) out->enabled &= reps[i]->enabled;
    /* a checkpoint counts when committed (and, verifying, intact) on every PS;
     * its step is the one the global_step shard recorded */
    int sp = pc->step_ps >= 0 ? pc->step_ps : 0;
    for (size_t k = 0; k < reps[0]->n_checkpoints; k++) {
        const Psc__CheckpointInfo *c0 = reps[0]->checkpoints[k];
        int everywhere = 1;
        int64_t step = c0->step;
        for (int i = 0; i < P && everywhere; i++) {
            const Psc__CheckpointInfo *ci = NULL;
            for (size_t j = 0; j < reps[i]->n_checkpoints && !ci; j++)
                if (reps[i]->checkpoints[j]->id == c0->id) ci = reps[i]->checkpoints[j];
            if (!ci || !ci->committed) {
                everywhere = 0;
            } else if (verify && !ci->good) {
                PSC_WARN("checkpoint %llu is damaged on ps %d: %s", (unsigned long long)ci->id, i, ci->problem);
                everywhere = 0;
            } else if (i == sp) {
                step = ci->step;
            }
        }
        if (!everywhere || out->n == PSC_ARRAY_LEN(out->ids)) continue;
        out->ids[out->n] = c0->id;
        out->steps[out->n] = step;
        out->n++;
    }
    for (int i = 0; i < P; i++)
        for (size_t j = 0; j < reps[i]->n_checkpoints; j++)
            out->max_id = PSC_MAX(out->max_id, reps[i]->checkpoints[j]->id);
out:
    for (int i = 0; i < P; i++)
        if (reps[i]) psc__list_checkpoints_reply__free_unpacked(reps[i], NULL);
    free(reps);
    free(ops);
    return rc;
}

int ps_client_ckpt_commit(ps_client_t *pc, uint64_t id, int keep, int discard, char *err, size_t errlen)
{
    Psc__CommitRequest req = PSC__COMMIT_REQUEST__INIT;
    req.id = id;
    req.keep = (uint32_t)(keep > 0 ? keep : 1);
    req.discard = discard;
    uint8_t buf[32];
    size_t len = psc__commit_request__pack(&req, buf);
    psc_rpc_op_t *ops = psc_xcalloc((size_t)pc->num_ps, sizeof *ops);
    int rc = run_on_all(pc, PSC_M_COMMIT, buf, len, ops, discard ? "discard checkpoint" : "commit checkpoint", err,
                        errlen);
    clear_ops(ops, (size_t)pc->num_ps);
    free(ops);
    return rc;
}

/* Async checkpoints, one cut: fences every PS (id = the checkpoint's id);
 * once all have answered nothing is applied anywhere, and *cut gets
 * global_step's value on the PS that holds it (unchanged without one). */
static int ckpt_fence(ps_client_t *pc, const char *job_id, uint64_t id, int64_t *cut, char *err, size_t errlen)
{
    int P = pc->num_ps;
    Psc__FenceRequest req = PSC__FENCE_REQUEST__INIT;
    req.job_id = (char *)job_id;
    req.id = id;
    uint8_t buf[64];
    size_t len = psc__fence_request__pack(&req, buf);
    psc_rpc_op_t *ops = psc_xcalloc((size_t)P, sizeof *ops);
    int rc = run_on_all(pc, PSC_M_FENCE, buf, len, ops, "fence for a checkpoint", err, errlen);
    if (rc == 0 && pc->step_ps >= 0) {
        Psc__FenceReply *r = psc__fence_reply__unpack(NULL, ops[pc->step_ps].reply_len, ops[pc->step_ps].reply);
        if (!r || !r->has_global_step)
            rc = psc_seterr(err, errlen, PSC_ECORRUPT, "fence reply from ps %d %s", pc->step_ps,
                            r ? "lacks global_step" : "does not parse");
        else
            *cut = r->global_step;
        if (r) psc__fence_reply__free_unpacked(r, NULL);
    }
    clear_ops(ops, (size_t)P);
    free(ops);
    return rc;
}

/* Releases fence id on every PS (those a Save released already answer
 * released = 0); failures are only logged: a fence left behind ends with its
 * lease. */
static void ckpt_unfence(ps_client_t *pc, uint64_t id)
{
    int P = pc->num_ps;
    Psc__UnfenceRequest req = PSC__UNFENCE_REQUEST__INIT;
    req.id = id;
    uint8_t buf[16];
    size_t len = psc__unfence_request__pack(&req, buf);
    psc_rpc_op_t *ops = psc_xcalloc((size_t)P, sizeof *ops);
    char err[512];
    if (run_on_all(pc, PSC_M_UNFENCE, buf, len, ops, "unfence", err, sizeof err))
        PSC_WARN("checkpoint %llu: %s (the fence ends with its lease)", (unsigned long long)id, err);
    clear_ops(ops, (size_t)P);
    free(ops);
}

int ps_client_ckpt_save(ps_client_t *pc, const char *job_id, uint64_t id, int64_t step, int keep,
                        int64_t *saved_step, char *err, size_t errlen)
{
    int P = pc->num_ps;
    /* async: fence every PS, then all save at the one global_step that holds
     * still behind the fences, then release them (always); sync mode saves at
     * a step boundary instead */
    int fenced = !pc->sync;
    int64_t cut = step;
    int rc = fenced ? ckpt_fence(pc, job_id, id, &cut, err, errlen) : 0;
    Psc__SaveRequest req = PSC__SAVE_REQUEST__INIT;
    req.job_id = (char *)job_id;
    req.id = id;
    req.step = cut;
    req.fence = fenced ? id : 0;
    uint8_t buf[64];
    size_t len = psc__save_request__pack(&req, buf);
    psc_rpc_op_t *ops = psc_xcalloc((size_t)P, sizeof *ops);
    if (rc == 0) rc = run_on_all(pc, PSC_M_SAVE, buf, len, ops, "save checkpoint", err, errlen);
    if (fenced) ckpt_unfence(pc, id);
    int sp = pc->step_ps >= 0 ? pc->step_ps : 0;
    double fence_ms = 0;
    for (int i = 0; rc == 0 && i < P; i++) {
        Psc__SaveReply *r = psc__save_reply__unpack(NULL, ops[i].reply_len, ops[i].reply);
        if (!r) {
            rc = psc_seterr(err, errlen, PSC_ECORRUPT, "save reply from ps %d does not parse", i);
            break;
        }
        if (i == sp && saved_step) *saved_step = r->step;
        fence_ms = PSC_MAX(fence_ms, r->fence_ms);
        psc__save_reply__free_unpacked(r, NULL);
    }
    if (rc == 0 && fenced)
        PSC_INFO("checkpoint %llu: one cut at global_step %lld; pushes paused at most %.1f ms on a ps",
                 (unsigned long long)id, (long long)cut, fence_ms);
    clear_ops(ops, (size_t)P);
    free(ops);
    char e2[256];
    if (rc) { /* phase 1 failed somewhere: no PS keeps it (errors: a PS that never prepared it) */
        ps_client_ckpt_commit(pc, id, keep, 1, e2, sizeof e2);
        return rc;
    }
    /* phase 2: only now, every shard prepared it */
    return ps_client_ckpt_commit(pc, id, keep, 0, err, errlen);
}

int ps_client_ckpt_restore(ps_client_t *pc, const char *job_id, uint64_t id, int64_t step, char *err, size_t errlen)
{
    Psc__RestoreRequest req = PSC__RESTORE_REQUEST__INIT;
    req.job_id = (char *)job_id;
    req.id = id;
    req.step = step;
    uint8_t buf[64];
    size_t len = psc__restore_request__pack(&req, buf);
    psc_rpc_op_t *ops = psc_xcalloc((size_t)pc->num_ps, sizeof *ops);
    int rc = run_on_all(pc, PSC_M_RESTORE, buf, len, ops, "restore checkpoint", err, errlen);
    clear_ops(ops, (size_t)pc->num_ps);
    free(ops);
    return rc;
}

/* Restores the newest checkpoint of job_id that is committed and intact on
 * every PS; an older one when a restore finds damage the listing missed. */
static int restore_latest(ps_client_t *pc, const char *job_id, ps_model_origin_t *origin, char *err, size_t errlen)
{
    ps_ckpt_list_t list;
    int rc = ps_client_ckpt_list(pc, job_id, 1, &list, err, errlen);
    if (rc) return rc;
    if (!list.enabled) return 0;
    for (int k = list.n - 1; k >= 0; k--) {
        char e[512];
        rc = ps_client_ckpt_restore(pc, job_id, list.ids[k], list.steps[k], e, sizeof e);
        if (rc == 0) {
            origin->restored = 1;
            origin->ckpt_id = list.ids[k];
            origin->step = list.steps[k];
            return 0;
        }
        PSC_WARN("restore of checkpoint %llu failed (%s): trying an older one", (unsigned long long)list.ids[k], e);
        if (rc != PSC_ECORRUPT && rc != PSC_ENOTFOUND && rc != PSC_EMISMATCH) return psc_seterr(err, errlen, rc, "%s", e);
    }
    if (list.n) PSC_WARN("no checkpoint of job %s could be restored", job_id);
    return 0;
}

int ps_client_status(ps_client_t *pc, int ps, ps_status_t *st, char *err, size_t errlen)
{
    Psc__StatusRequest req = PSC__STATUS_REQUEST__INIT;
    uint8_t buf[8];
    size_t len = psc__status_request__pack(&req, buf);
    psc_rpc_op_t op;
    int rc = psc_rpc_call(pc->ch[ps], PSC_M_STATUS, buf, len, pc->timeout_ms, 0, &op);
    if (rc) {
        rc = op_error(&op, 1, "status", err, errlen);
        psc_rpc_op_clear(&op);
        return rc;
    }
    Psc__StatusReply *r = psc__status_reply__unpack(NULL, op.reply_len, op.reply);
    psc_rpc_op_clear(&op);
    if (!r) return psc_seterr(err, errlen, PSC_ECORRUPT, "status reply from ps %d does not parse", ps);
    memset(st, 0, sizeof *st);
    st->ready = r->ready;
    snprintf(st->job_id, sizeof st->job_id, "%s", r->job_id);
    st->has_global_step = r->has_global_step;
    st->global_step = r->global_step;
    st->workers_done = r->workers_done;
    st->applied = r->applied;
    st->rejected = r->rejected;
    st->pulls = r->pulls;
    st->nvars = (int)r->n_vars;
    st->stale = r->stale;
    st->timeout_applies = r->timeout_applies;
    st->sync = r->sync;
    st->replicas_present = r->replicas_present;
    st->checkpoints = r->checkpoints;
    st->incarnation = r->incarnation;
    st->restored_step = r->restored_step;
    for (size_t i = 0; i < r->n_replica_steps && i < PSC_ARRAY_LEN(st->replica_steps); i++)
        st->replica_steps[i] = r->replica_steps[i];
    for (size_t i = 0; i < r->n_done_workers; i++)
        if (r->done_workers[i] < sizeof st->done) st->done[r->done_workers[i]] = 1;
    psc__status_reply__free_unpacked(r, NULL);
    return 0;
}

int ps_client_wait_ready(ps_client_t *pc, const char *job_id, double wait_secs, volatile int *stop, char *err,
                         size_t errlen)
{
    double start = psc_now();
    int logged = 0;
    char last[512] = "no answer yet";
    for (;;) {
        int all = 1;
        for (int i = 0; i < pc->num_ps && all; i++) {
            ps_status_t st;
            if (ps_client_status(pc, i, &st, last, sizeof last) != 0) {
                all = 0;
            } else if (!st.ready || strcmp(st.job_id, job_id) != 0) {
                snprintf(last, sizeof last, "ps %d: %s", i,
                         st.ready ? "holds another job" : "model not initialized yet");
                all = 0;
            }
        }
        if (all) return 0;
        if (stop && *stop) return psc_seterr(err, errlen, PSC_ECANCELLED, "cancelled while waiting for the model");
        if (psc_now() - start > wait_secs)
            return psc_seterr(err, errlen, PSC_ETIMEOUT,
                              "the model of job %s was not ready within %.0f s (last: %s); is the chief running?",
                              job_id, wait_secs, last);
        if (!logged) {
            PSC_INFO("waiting up to %.0f s for the chief to initialize the model (%s)", wait_secs, last);
            logged = 1;
        }
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

int ps_client_worker_done(ps_client_t *pc, uint32_t *workers_done, char *err, size_t errlen)
{
    int ps = pc->step_ps >= 0 ? pc->step_ps : 0;
    Psc__WorkerDoneRequest req = PSC__WORKER_DONE_REQUEST__INIT;
    req.worker = (uint32_t)pc->rank;
    uint8_t buf[16];
    size_t len = psc__worker_done_request__pack(&req, buf);
    psc_rpc_op_t op;
    int rc = psc_rpc_call(pc->ch[ps], PSC_M_WORKER_DONE, buf, len, pc->timeout_ms, 0, &op);
    if (rc) {
        rc = op_error(&op, 1, "worker-done", err, errlen);
    } else {
        Psc__WorkerDoneReply *r = psc__worker_done_reply__unpack(NULL, op.reply_len, op.reply);
        if (r) {
            if (workers_done) *workers_done = r->workers_done;
            psc__worker_done_reply__free_unpacked(r, NULL);
        }
    }
    psc_rpc_op_clear(&op);
    return rc;
}

void ps_client_shutdown_all(ps_client_t *pc, const char *reason)
{
    Psc__ShutdownRequest req = PSC__SHUTDOWN_REQUEST__INIT;
    req.reason = (char *)reason;
    size_t len = psc__shutdown_request__get_packed_size(&req);
    uint8_t *buf = psc_xmalloc(len);
    psc__shutdown_request__pack(&req, buf);
    psc_rpc_op_t *ops = psc_xcalloc((size_t)pc->num_ps, sizeof *ops);
    for (int i = 0; i < pc->num_ps; i++) {
        ops[i].ch = pc->ch[i];
        ops[i].method = PSC_M_SHUTDOWN;
        ops[i].hdr = buf;
        ops[i].hdr_len = len;
    }
    psc_rpc_run(ops, (size_t)pc->num_ps, (size_t)pc->num_ps, pc->timeout_ms);
    for (int i = 0; i < pc->num_ps; i++)
        if (ops[i].code != PSC_RPC_OK)
            PSC_WARN("shutdown of ps %d (%s): %s: %s", i, psc_rpc_channel_target(ops[i].ch),
                     psc_rpc_code_name(ops[i].code), ops[i].msg);
    clear_ops(ops, (size_t)pc->num_ps);
    free(ops);
    free(buf);
}
