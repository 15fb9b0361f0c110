/* service_batch.c — psc.ParameterServer/Batch: many small tensors of one PS in
 * one call.
 *
 * Why: every gRPC call costs about 100 µs of CPU on the two ends together, so
 * a model whose layers have small biases and kernels spends its step on call
 * overhead, not bytes. A worker sends every piece of at most
 * PSC_BATCH_TENSOR_BYTES that lives on a PS in one Batch (wire.h bounds it),
 * with the global_step increment when that PS holds it; big pieces still go as
 * chunk calls, several in flight.
 *
 * Contract (proto/psc.proto). The request is checked whole before anything is
 * applied: every push as store_push would check it (name, ready, wire chunk,
 * finite values), every pull as store_pull would, the step as Step would. A
 * refused batch changes nothing but the `rejected` counter, and its message
 * names the item. Then the pushes are applied in order, the step added, the
 * pulls read. Between the checks and the apply only a concurrent Release or
 * Restore can make an item fail (it replaces the model anyway); the call then
 * fails with that item's error, the items before it applied.
 *
 * Sparse tables (service_sparse.c): SparsePush items are applied after the
 * dense pushes, SparsePull items read after the dense pulls (in async mode a
 * table's one push and one pull in a request are applied together at the
 * pull's place, in one pass over the table's shards: each row pulled still
 * holds the push, and the shards are locked once; the step and the dense
 * pulls do not depend on them); they are checked
 * with the rest first (ids in range and in this PS's part, unique in a push,
 * row widths, finite values). A sparse pull creates the rows it touches, so
 * for the fence it counts as an update. On a sync PS sparse pushes are
 * contributions to their part's step and sparse pulls complete the steps
 * before their min_step (store_sparse_push_sync, store_sparse_pull_sync).
 *
 * While an async checkpoint fences the PS, a batch with pushes or a step
 * increment is parked whole and runs when the fence is released (one that only
 * reads runs at once).
 *
 * bfloat16 pushes (Chunk.encoding) are widened to float32 first, into one
 * buffer for the batch, and checked and applied as float32 ones.
 *
 * Sync replicas keep their per-chunk calls (a sync reply waits for its step,
 * chunk by chunk): a sync PS refuses a Batch with pushes or a step
 * contribution (FAILED_PRECONDITION) and serves pulls and step reads.
 *
 * Invariants: a handler file (registered by service.c): it calls down into
 * the fence, Step, Chunk and reply helpers, never into another handler file.
 */
#include "service_internal.h"

#include "bf16.h"
#include "psc.h"
#include "wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The pushes of r as float32: each bfloat16 item's data is widened into one
 * buffer (*wide, the caller frees it) and the item pointed at its part;
 * *orig keeps the items' own data (batch_unwiden puts it back before the
 * request is freed). 0, or a failure sent on call. */
static int batch_widen(ps_service_t *svc, psc_rpc_call_t *call, Psc__BatchRequest *r, float **wide,
                       ProtobufCBinaryData **orig)
{
    char err[512];
    size_t floats = 0;
    for (size_t i = 0; i < r->n_push; i++) {
        const Psc__Chunk *c = r->push[i];
        if (svc_encoding_check(c, err, sizeof err)) {
            svc_reject(svc, call, PSC_EINVAL, "batch push %zu: %s", i, err);
            return -1;
        }
        if (c->encoding == PSC_ENC_BFLOAT16) floats += c->data.len / 2;
    }
    if (!floats) return 0;
    *wide = psc_xmalloc(floats * sizeof(float));
    *orig = psc_xcalloc(r->n_push, sizeof **orig);
    size_t at = 0;
    for (size_t i = 0; i < r->n_push; i++) {
        Psc__Chunk *c = r->push[i];
        (*orig)[i] = c->data;
        if (c->encoding != PSC_ENC_BFLOAT16) continue;
        size_t n = c->data.len / 2;
        psc_bf16_widen_iov(&(psc_iov_t){c->data.data, c->data.len}, 1, *wide + at, n);
        c->data.data = (uint8_t *)(*wide + at);
        c->data.len = n * sizeof(float);
        at += n;
    }
    return 0;
}

static void batch_unwiden(Psc__BatchRequest *r, const ProtobufCBinaryData *orig)
{
    for (size_t i = 0; orig && i < r->n_push; i++) r->push[i]->data = orig[i];
}

/* Checks every item of r; 0, or a failure sent on call. *pull_bytes: the sum
 * of the dense pulls, *sparse_bytes of the sparse ones. */
static int batch_check(ps_service_t *svc, psc_rpc_call_t *call, const Psc__BatchRequest *r, size_t *pull_bytes,
                       size_t *sparse_bytes, uint64_t *gen)
{
    char err[512];
    size_t items = r->n_push + r->n_pull + r->n_sparse_push + r->n_sparse_pull;
    if (items > PSC_BATCH_MAX_ITEMS) {
        svc_reject(svc, call, PSC_EINVAL, "batch of %zu items exceeds %d", items, PSC_BATCH_MAX_ITEMS);
        return -1;
    }
    int sync = store_get_sync(svc->store, NULL);
    if (sync && (r->n_push || (r->step && r->step->count > 0))) {
        svc_reject(svc, call, PSC_ENOTREADY,
                   "Batch pushes and step contributions are for asynchronous training; a sync PS takes them per "
                   "chunk (PushPull, Step)");
        return -1;
    }
    for (size_t i = 0; i < r->n_push; i++) {
        const Psc__Chunk *c = r->push[i];
        int rc = store_push_check(svc->store, c->name, c->offset, c->data.data, c->data.len, c->total, err,
                                  sizeof err);
        if (rc) {
            svc_fail(svc, call, rc, "batch push %zu: %s", i, err);
            return -1;
        }
    }
    size_t bytes = 0;
    for (size_t i = 0; i < r->n_pull; i++) {
        const Psc__PullRequest *p = r->pull[i];
        int rc = 0;
        if (p->min_step || p->checkpoint)
            rc = psc_seterr(err, sizeof err, PSC_EINVAL, "min_step and checkpoint pulls are not batched (use Pull)");
        else if (strlen(p->name) > PSC_NAME_MAX)
            rc = psc_seterr(err, sizeof err, PSC_EINVAL, "variable name of %zu bytes (at most %d)", strlen(p->name),
                            PSC_NAME_MAX);
        else if (p->length > PSC_CHUNK_BYTES || bytes + p->length > 2 * PSC_BATCH_BYTES)
            rc = psc_seterr(err, sizeof err, PSC_EINVAL, "pulls of more than %zu bytes in one batch",
                            2 * PSC_BATCH_BYTES);
        if (rc) {
            svc_reject(svc, call, rc, "batch pull %zu: %s", i, err);
            return -1;
        }
        if ((rc = store_pull_check(svc->store, p->name, p->offset, p->length, err, sizeof err))) {
            svc_fail(svc, call, rc, "batch pull %zu: %s", i, err); /* the store counted it */
            return -1;
        }
        bytes += p->length;
    }
    if (r->step) {
        int rc = svc_step_check(svc, r->step, err, sizeof err);
        if (rc) {
            svc_reject(svc, call, rc, "batch step: %s", err);
            return -1;
        }
    }
    *pull_bytes = bytes;
    return svc_sparse_check(svc, call, r, sparse_bytes, gen);
}

static void batch_run(psc_rpc_call_t *call, const uint8_t *req, size_t len, ps_service_t *svc, int fenced);

static void batch_apply(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg)
{
    batch_run(call, req, len, arg, 0);
}

void svc_h_batch(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg)
{
    batch_run(call, req, len, arg, 1);
}

/* The reply's buffers of one Batch. */
typedef struct batch_bufs {
    int64_t *versions, *sparse_versions, *sparse_steps;
    protobuf_c_boolean *sparse_stale;
    Psc__Chunk *chunks, **chunk_ptrs;
    Psc__SparseRows *rows, **row_ptrs;
    uint8_t *data, *sparse_data;
    Psc__StepReply step_rep;
    int sync; /* the PS's mode when the sparse pushes ran: the sparse pulls go by it too */
} batch_bufs_t;

static void batch_bufs_free(batch_bufs_t *b)
{
    free(b->versions);
    free(b->sparse_versions);
    free(b->sparse_steps);
    free(b->sparse_stale);
    free(b->chunks);
    free(b->chunk_ptrs);
    free(b->rows);
    free(b->row_ptrs);
    free(b->data);
    free(b->sparse_data);
}

#define BATCH_N(n) ((n) ? (n) : 1)

/* The dense pushes, then the sparse ones, into rep. 0, or -1 (failure sent). */
static int batch_pushes(ps_service_t *svc, psc_rpc_call_t *call, const Psc__BatchRequest *r,
                        const ProtobufCBinaryData *orig, uint64_t gen, batch_bufs_t *b, Psc__BatchReply *rep)
{
    char err[512];
    b->versions = psc_xcalloc(BATCH_N(r->n_push), sizeof *b->versions);
    for (size_t i = 0; i < r->n_push; i++) {
        const Psc__Chunk *c = r->push[i];
        int rc = store_push(svc->store, c->name, c->offset, c->data.data, c->data.len, c->total, NULL,
                            &b->versions[i], err, sizeof err);
        if (rc) {
            svc_fail(svc, call, rc, "batch push %zu: %s", i, err);
            return -1;
        }
        ps_metrics_add_push_bytes(svc->metrics, orig ? orig[i].len : c->data.len);
    }
    rep->n_push_version = r->n_push;
    rep->push_version = b->versions;
    b->sparse_versions = psc_xcalloc(BATCH_N(r->n_sparse_push), sizeof *b->sparse_versions);
    b->sparse_steps = psc_xcalloc(BATCH_N(r->n_sparse_push), sizeof *b->sparse_steps);
    b->sparse_stale = psc_xcalloc(BATCH_N(r->n_sparse_push), sizeof *b->sparse_stale);
    b->sync = store_get_sync(svc->store, NULL);
    if (svc_sparse_push(svc, call, r, gen, b->sync, b->sparse_versions, b->sparse_steps, b->sparse_stale)) return -1;
    rep->n_sparse_push_version = r->n_sparse_push;
    rep->sparse_push_version = b->sparse_versions;
    if (b->sync) {
        rep->n_sparse_push_step = rep->n_sparse_push_stale = r->n_sparse_push;
        rep->sparse_push_step = b->sparse_steps;
        rep->sparse_push_stale = b->sparse_stale;
    }
    return 0;
}

/* The step, if the request has one. 0, or -1 (failure sent). */
static int batch_step(ps_service_t *svc, psc_rpc_call_t *call, const Psc__BatchRequest *r, batch_bufs_t *b,
                      Psc__BatchReply *rep)
{
    char err[512];
    if (!r->step) return 0;
    int64_t value = 0;
    svc_step_note(svc, r->step);
    int rc = svc_step_check(svc, r->step, err, sizeof err); /* again: a Create may have turned sync on */
    if (rc) {
        svc_reject(svc, call, rc, "batch step: %s", err);
        return -1;
    }
    if ((rc = store_step_add(svc->store, r->step->increment, &value, err, sizeof err))) {
        svc_fail(svc, call, rc, "batch step: %s", err);
        return -1;
    }
    psc__step_reply__init(&b->step_rep);
    b->step_rep.global_step = value;
    rep->step = &b->step_rep;
    return 0;
}

/* The dense pulls, then the sparse ones, into rep. 0, or -1 (failure sent). */
static int batch_pulls(ps_service_t *svc, psc_rpc_call_t *call, const Psc__BatchRequest *r, size_t pull_bytes,
                       size_t sparse_bytes, uint64_t gen, batch_bufs_t *b, Psc__BatchReply *rep)
{
    char err[512];
    b->chunks = psc_xcalloc(BATCH_N(r->n_pull), sizeof *b->chunks);
    b->chunk_ptrs = psc_xcalloc(BATCH_N(r->n_pull), sizeof *b->chunk_ptrs);
    b->data = psc_xmalloc(BATCH_N(pull_bytes));
    size_t at = 0;
    for (size_t i = 0; i < r->n_pull; i++) {
        const Psc__PullRequest *p = r->pull[i];
        Psc__Chunk *c = &b->chunks[i];
        psc__chunk__init(c);
        int64_t version = 0;
        uint64_t total = 0;
        int rc = store_pull(svc->store, p->name, p->offset, p->length, b->data + at, &version, err, sizeof err);
        if (rc == 0) store_var_bytes(svc->store, p->name, &total);
        if (rc) {
            svc_fail(svc, call, rc, "batch pull %zu: %s", i, err);
            return -1;
        }
        c->name = p->name;
        c->offset = p->offset;
        c->total = total;
        c->version = version;
        c->data.data = b->data + at;
        c->data.len = p->length;
        b->chunk_ptrs[i] = c;
        at += p->length;
    }
    ps_metrics_add_pull_bytes(svc->metrics, pull_bytes);
    rep->n_pull = r->n_pull;
    rep->pull = b->chunk_ptrs;
    b->rows = psc_xcalloc(BATCH_N(r->n_sparse_pull), sizeof *b->rows);
    b->row_ptrs = psc_xcalloc(BATCH_N(r->n_sparse_pull), sizeof *b->row_ptrs);
    if (!(b->sparse_data = malloc(BATCH_N(sparse_bytes)))) {
        svc_fail(svc, call, PSC_ENOMEM, "batch sparse pulls: cannot allocate %zu bytes", sparse_bytes);
        return -1;
    }
    if (svc_sparse_pull(svc, call, r, gen, b->sync, sparse_bytes, b->sparse_versions, b->rows, b->row_ptrs,
                        b->sparse_data))
        return -1;
    rep->n_sparse_pull = r->n_sparse_pull;
    rep->sparse_pull = b->row_ptrs;
    return 0;
}

/* A Batch; fenced: one with pushes or a step increment or contribution goes
 * through the checkpoint fence (service_fence.c; a parked one is unpacked
 * again when it runs), one that only reads does not. */
static void batch_run(psc_rpc_call_t *call, const uint8_t *req, size_t len, ps_service_t *svc, int fenced)
{
    Psc__BatchRequest *r;
    SVC_DECODE(r, psc__batch_request__unpack, "BatchRequest");
    /* a sparse pull creates rows: it changes the model as a push does */
    if (fenced && (r->n_push || r->n_sparse_push || r->n_sparse_pull ||
                   (r->step && (r->step->increment != 0 || r->step->count > 0)))) {
        if (!svc_fence_enter(svc, call, req, len, batch_apply)) {
            psc__batch_request__free_unpacked(r, NULL);
            return;
        }
    } else {
        fenced = 0;
    }
    size_t pull_bytes = 0, sparse_bytes = 0;
    uint64_t gen = 0; /* the sparse items' checks: the apply need not repeat them */
    Psc__BatchReply rep = PSC__BATCH_REPLY__INIT;
    batch_bufs_t b = {0};
    float *wide = NULL;
    ProtobufCBinaryData *orig = NULL;
    if (batch_widen(svc, call, r, &wide, &orig) || batch_check(svc, call, r, &pull_bytes, &sparse_bytes, &gen)) goto out;
    store_note_step(svc->store, r->global_step); /* learning-rate schedules */
    if (batch_pushes(svc, call, r, orig, gen, &b, &rep) || batch_step(svc, call, r, &b, &rep) ||
        batch_pulls(svc, call, r, pull_bytes, sparse_bytes, gen, &b, &rep))
        goto out;
    size_t n = psc__batch_reply__get_packed_size(&rep);
    psc__batch_reply__pack(&rep, psc_rpc_reply_alloc(call, n));
    psc_rpc_reply_send(call);
out:
    batch_bufs_free(&b);
    batch_unwiden(r, orig);
    free(orig);
    free(wide);
    psc__batch_request__free_unpacked(r, NULL);
    if (fenced) svc_fence_leave(svc);
}
