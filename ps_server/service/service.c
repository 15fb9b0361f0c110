/* service.c — the psc.ParameterServer service (see service.h): its life
 * cycle, the registration of every method, and the data-path handlers
 * (Create, Assign, Ready, Pull, Push, PushPull, Step, WorkerDone, Status,
 * Shutdown). The other handlers live in service_ckpt.c (checkpoints, Release,
 * Fence) and service_batch.c; the helpers they all call are listed in
 * service_internal.h.
 *
 * Design. Every handler follows one shape: unpack (protobuf-c), validate, call
 * the store, pack the reply (tensor replies written in place, svc_reply_chunk),
 * free the unpacked message in the same function; every failure goes through
 * svc_fail / svc_reject. A request that changes the model is admitted through
 * the checkpoint fence (service_fence.c), a reply that waits for a sync step is
 * parked (service_park.c): no server thread ever waits.
 *
 * Invariants: the top of the service's files: it calls down into all of them
 * and none calls it back (the fence's replay and the reaper's tick reach the
 * apply functions and svc_fence_tick through pointers handed down from here).
 */
#include "service_internal.h"

#include "log.h"
#include "optim_pb.h"
#include "psc.h"
#include "rng.h"
#include "wire.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* A Create's sync spec as a store config, every value checked (the store's
 * store_set_sync checks them too, but only after the variables and tables
 * exist: a refused Create must leave nothing behind). 0 or PSC_EINVAL. */
static int create_sync_of(const Psc__SyncSpec *p, store_sync_cfg_t *c, char *err, size_t errlen)
{
    c->replicas_to_aggregate = (int)PSC_MIN(p->replicas_to_aggregate, (uint32_t)PSC_MAX_REPLICAS + 1);
    c->total_num_replicas = (int)PSC_MIN(p->total_num_replicas, (uint32_t)PSC_MAX_REPLICAS + 1);
    c->timeout_secs = p->timeout_secs;
    if (c->total_num_replicas < 1 || c->total_num_replicas > PSC_MAX_REPLICAS)
        return psc_seterr(err, errlen, PSC_EINVAL, "sync.total_num_replicas must be 1..%d, got %u", PSC_MAX_REPLICAS,
                          p->total_num_replicas);
    if (c->replicas_to_aggregate < 1)
        return psc_seterr(err, errlen, PSC_EINVAL, "sync.replicas_to_aggregate must be >= 1, got %u",
                          p->replicas_to_aggregate);
    if (!(c->timeout_secs > 0) || !isfinite(c->timeout_secs))
        return psc_seterr(err, errlen, PSC_EINVAL, "sync.timeout_secs must be finite and > 0, got %g", c->timeout_secs);
    return 0;
}

/* Sync mode already on (the job's variables exist) with another config than
 * want: PSC_EEXISTS naming the field, before the Create adds any table. */
static int create_sync_conflict(store_t *s, const store_sync_cfg_t *want, char *err, size_t errlen)
{
    store_sync_cfg_t have;
    if (!store_get_sync(s, &have)) return 0;
    if (have.replicas_to_aggregate != want->replicas_to_aggregate)
        return psc_seterr(err, errlen, PSC_EEXISTS, "sync mode is on with replicas_to_aggregate %d; refusing %d",
                          have.replicas_to_aggregate, want->replicas_to_aggregate);
    if (have.total_num_replicas != want->total_num_replicas)
        return psc_seterr(err, errlen, PSC_EEXISTS, "sync mode is on with total_num_replicas %d; refusing %d",
                          have.total_num_replicas, want->total_num_replicas);
    if (have.timeout_secs != want->timeout_secs)
        return psc_seterr(err, errlen, PSC_EEXISTS, "sync mode is on with timeout_secs %g; refusing %g",
                          have.timeout_secs, want->timeout_secs);
    return 0;
}

static void h_create(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg)
{
    ps_service_t *svc = arg;
    char err[512];
    Psc__CreateRequest *r;
    SVC_DECODE(r, psc__create_request__unpack, "CreateRequest");
    psc_optim_config_t opt;
    int rc = psc_optim_from_pb(r->optimizer, &opt, err, sizeof err);
    store_var_spec_t *specs = psc_xcalloc(r->n_vars ? r->n_vars : 1, sizeof *specs);
    if (rc == 0 && (strlen(r->job_id) != 16))
        rc = psc_seterr(err, sizeof err, PSC_EINVAL, "job_id must be 16 hex digits, got \"%s\"", r->job_id);
    for (size_t i = 0; rc == 0 && i < r->n_vars; i++) {
        const Psc__VarSpec *v = r->vars[i];
        if (v->n_shape > PSC_MAX_RANK) {
            rc = psc_seterr(err, sizeof err, PSC_EINVAL, "%s: rank %zu exceeds %d", v->name, v->n_shape, PSC_MAX_RANK);
            break;
        }
        specs[i].name = v->name;
        specs[i].rank = (int)v->n_shape;
        for (size_t d = 0; d < v->n_shape; d++) specs[i].shape[d] = v->shape[d];
        specs[i].is_step = v->is_step;
    }
    int created = 0;
    store_sync_cfg_t sync = {0};
    if (rc == 0 && r->sync) rc = create_sync_of(r->sync, &sync, err, sizeof err);
    sparse_table_cfg_t *tables = NULL;
    if (rc == 0) rc = svc_tables_from_pb(r, &opt, &tables, err, sizeof err);
    /* every check before anything is created: a refused Create leaves nothing behind */
    if (rc == 0) rc = store_check_tables(specs, (int)r->n_vars, tables, (int)r->n_tables, err, sizeof err);
    int counted = rc == 0; /* a refusal from here on is the store's, which counts it */
    if (rc == 0) {
        rc = store_create_vars(svc->store, r->job_id, &opt, specs, (int)r->n_vars, &created, err, sizeof err);
        /* vars just created have no sync mode; existing ones may conflict: refused before a table is added */
        if (rc == 0 && r->sync && (rc = create_sync_conflict(svc->store, &sync, err, sizeof err))) counted = 0;
        if (rc == 0) rc = store_create_tables(svc->store, r->job_id, tables, (int)r->n_tables, err, sizeof err);
        if (rc == 0 && r->sync) rc = store_set_sync(svc->store, &sync, err, sizeof err);
        if (rc == PSC_EMISMATCH) rc = PSC_EEXISTS; /* a create that conflicts with what exists */
    }
    if (rc != 0 && !counted) {
        svc_reject(svc, call, rc, "%s", err);
    } else if (rc != 0) {
        svc_fail(svc, call, rc, "%s", err); /* the store counted it */
    } else {
        Psc__CreateReply rep = PSC__CREATE_REPLY__INIT;
        rep.created = created;
        rep.ready = store_is_ready(svc->store, NULL);
        int64_t step = 0;
        if (store_step_get(svc->store, &step)) rep.global_step = step;
        size_t n = psc__create_reply__get_packed_size(&rep);
        psc__create_reply__pack(&rep, psc_rpc_reply_alloc(call, n));
        psc_rpc_reply_send(call);
        if (created && r->sync)
            PSC_INFO("created %zu variables for job %s (optimizer %s, sync replicas: R=%d N=%d timeout %.1f s)",
                     r->n_vars, r->job_id, psc_optim_name(opt.kind), sync.replicas_to_aggregate,
                     sync.total_num_replicas, sync.timeout_secs);
        else if (created)
            PSC_INFO("created %zu variables for job %s (optimizer %s, asynchronous)", r->n_vars, r->job_id,
                     psc_optim_name(opt.kind));
        for (size_t i = 0; created && i < r->n_tables; i++)
            PSC_INFO("sparse table %s: part %d of %d, %" PRId64 " rows declared, dim %d, optimizer %s, %s partition",
                     tables[i].name, tables[i].part, tables[i].nparts, tables[i].rows, tables[i].dim,
                     psc_optim_name(tables[i].opt.kind), psc_partition_name(tables[i].partition));
    }
    free(tables);
    free(specs);
    psc__create_request__free_unpacked(r, NULL);
}

static void reply_push(psc_rpc_call_t *call, int64_t version, int stale)
{
    Psc__PushReply rep = PSC__PUSH_REPLY__INIT;
    rep.version = version;
    rep.stale = stale;
    uint8_t buf[32];
    size_t n = psc__push_reply__pack(&rep, buf);
    psc_rpc_reply(call, buf, n);
}

static void assign_apply(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg)
{
    ps_service_t *svc = arg;
    char err[512];
    chunk_req_t cr;
    if (svc_chunk_decode(req, len, &cr)) {
        svc_fail_undecodable(svc, call, "Chunk", len);
        return;
    }
    Psc__Chunk *c = cr.c;
    int rc = store_assign(svc->store, c->name, c->offset, c->data.data, c->data.len, c->total, err, sizeof err);
    if (rc != 0)
        svc_fail(svc, call, rc, "%s", err);
    else
        reply_push(call, 0, 0);
    svc_chunk_free(&cr);
}

/* Assign, Push, PushPull: behind the checkpoint fence (service_fence.c) */
static void h_assign(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg)
{
    if (!svc_fence_enter(arg, call, req, len, assign_apply)) return;
    assign_apply(call, req, len, arg);
    svc_fence_leave(arg);
}

static void h_ready(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg)
{
    ps_service_t *svc = arg;
    char err[512];
    Psc__ReadyRequest *r;
    SVC_DECODE(r, psc__ready_request__unpack, "ReadyRequest");
    int rc = store_set_ready(svc->store, r->job_id, err, sizeof err);
    if (rc != 0) {
        svc_fail(svc, call, rc, "%s", err);
    } else {
        Psc__ReadyReply rep = PSC__READY_REPLY__INIT;
        uint8_t buf[8];
        psc_rpc_reply(call, buf, psc__ready_reply__pack(&rep, buf));
        PSC_INFO("model ready for job %s", r->job_id);
    }
    psc__ready_request__free_unpacked(r, NULL);
}

static void h_pull(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg)
{
    ps_service_t *svc = arg;
    char err[512];
    Psc__PullRequest *r;
    SVC_DECODE(r, psc__pull_request__unpack, "PullRequest");
    /* a checkpoint's tensor names (a variable's plus a slot's suffix) are the longest */
    if (r->length > PSC_CHUNK_BYTES || strlen(r->name) > PSC_TENSOR_NAME_MAX) {
        if (r->length > PSC_CHUNK_BYTES)
            svc_reject(svc, call, PSC_EINVAL, "pull of %llu bytes exceeds the %zu-byte chunk",
                       (unsigned long long)r->length, PSC_CHUNK_BYTES);
        else
            svc_reject(svc, call, PSC_EINVAL, "tensor name of %zu bytes (at most %d)", strlen(r->name),
                       PSC_TENSOR_NAME_MAX);
        psc__pull_request__free_unpacked(r, NULL);
        return;
    }
    if (r->checkpoint) {
        svc_pull_checkpoint(svc, call, r);
        psc__pull_request__free_unpacked(r, NULL);
        return;
    }
    size_t bound = svc_reply_header_bound(r->name);
    uint8_t *buf = psc_rpc_reply_alloc(call, bound + r->length);
    int64_t version = 0, step = 0;
    int rc = store_pull(svc->store, r->name, r->offset, r->length, buf + bound, &version, err, sizeof err);
    if (rc == 0 && r->min_step > 0)
        rc = store_chunk_read(svc->store, r->name, r->offset, r->length, buf + bound, &step, &version, err, sizeof err);
    uint64_t total = 0;
    if (rc == 0) store_var_bytes(svc->store, r->name, &total); /* exists: the pull found it */
    if (rc != 0) {
        svc_fail(svc, call, rc, "%s", err);
    } else if (r->min_step > 0 && step < r->min_step) {
        svc_parked_t *p = psc_xcalloc(1, sizeof *p); /* wait until the step is applied */
        p->call = call;
        p->kind = SVC_PARK_CHUNK;
        snprintf(p->name, sizeof p->name, "%s", r->name);
        p->offset = r->offset;
        p->total = total;
        p->len = r->length;
        p->min_step = r->min_step;
        p->worker = UINT32_MAX;
        psc_rpc_reply_drop(call); /* the reply is read when the step comes */
        svc_park(svc, p);
    } else {
        ps_metrics_add_pull_bytes(svc->metrics, r->length);
        svc_reply_chunk(call, buf, bound, r->name, r->offset, total, version, r->length, step, 0);
    }
    psc__pull_request__free_unpacked(r, NULL);
}

/* A pushed Chunk decoded (and a bfloat16 one widened) into *in, its bytes
 * counted: the chunk, or NULL when the call has been failed (in freed). */
static Psc__Chunk *push_in(ps_service_t *svc, psc_rpc_call_t *call, psc_iov_t *iov, int niov, size_t len,
                           chunk_in_t *in)
{
    if (svc_chunk_in_decode(iov, niov, len, in)) {
        svc_chunk_in_free(in);
        svc_fail_undecodable(svc, call, "Chunk", len);
        return NULL;
    }
    ps_metrics_add_push_bytes(svc->metrics, in->cr.c->data.len);
    if (svc_chunk_in_widen(svc, call, in)) {
        svc_chunk_in_free(in);
        return NULL;
    }
    return in->cr.c;
}

static void push_apply(psc_rpc_call_t *call, psc_iov_t *iov, int niov, size_t len, void *arg)
{
    ps_service_t *svc = arg;
    char err[512];
    chunk_in_t in;
    Psc__Chunk *c = push_in(svc, call, iov, niov, len, &in);
    if (!c) return;
    int64_t version = 0;
    store_note_step(svc->store, c->global_step); /* learning-rate schedules */
    if (store_get_sync(svc->store, NULL)) {
        /* sync: a contribution to the chunk's step; the reply says if it was stale */
        store_sync_result_t res;
        int rc = store_push_sync(svc->store, c->name, c->offset, svc_chunk_in_data(&in), c->data.len, c->total,
                                 c->local_step, c->count ? c->count : 1, c->worker, psc_now(), NULL, &res, err,
                                 sizeof err);
        if (rc != 0) {
            svc_fail(svc, call, rc, "%s", err);
        } else {
            reply_push(call, res.version, res.stale);
            if (res.applied || res.lag_applied) svc_park_wake(svc, SVC_PARK_CHUNK, c->name, c->offset);
        }
        svc_chunk_in_free(&in);
        return;
    }
    int rc = store_push_iov(svc->store, c->name, c->offset, in.seg, in.nseg, c->data.len, c->total, NULL, &version, err,
                            sizeof err);
    if (rc != 0)
        svc_fail(svc, call, rc, "%s", err);
    else
        reply_push(call, version, 0);
    svc_chunk_in_free(&in);
}

static void h_push(psc_rpc_call_t *call, psc_iov_t *iov, int niov, size_t len, void *arg)
{
    if (!svc_fence_enter_iov(arg, call, iov, niov, len, push_apply)) return;
    push_apply(call, iov, niov, len, arg);
    svc_fence_leave(arg);
}

static void push_pull_apply(psc_rpc_call_t *call, psc_iov_t *iov, int niov, size_t len, void *arg)
{
    ps_service_t *svc = arg;
    char err[512];
    chunk_in_t in;
    Psc__Chunk *c = push_in(svc, call, iov, niov, len, &in);
    if (!c) return;
    if (c->data.len > PSC_CHUNK_BYTES || strlen(c->name) > PSC_NAME_MAX) {
        if (c->data.len > PSC_CHUNK_BYTES)
            svc_reject(svc, call, PSC_EINVAL, "chunk of %zu bytes exceeds %zu", c->data.len, PSC_CHUNK_BYTES);
        else
            svc_reject(svc, call, PSC_EINVAL, "variable name of %zu bytes (at most %d)", strlen(c->name), PSC_NAME_MAX);
        svc_chunk_in_free(&in);
        return;
    }
    size_t bound = svc_reply_header_bound(c->name);
    uint8_t *buf = psc_rpc_reply_alloc(call, bound + c->data.len);
    int64_t version = 0;
    store_note_step(svc->store, c->global_step); /* learning-rate schedules */
    if (store_get_sync(svc->store, NULL)) {
        /* sync: contribute, then answer with the values of the next step once it is applied */
        store_sync_result_t res;
        int rc = store_push_sync(svc->store, c->name, c->offset, svc_chunk_in_data(&in), c->data.len, c->total,
                                 c->local_step, c->count ? c->count : 1, c->worker, psc_now(), buf + bound, &res, err,
                                 sizeof err);
        if (rc != 0) {
            svc_fail(svc, call, rc, "%s", err);
        } else if (res.stale || res.applied) {
            ps_metrics_add_pull_bytes(svc->metrics, c->data.len);
            svc_reply_chunk(call, buf, bound, c->name, c->offset, c->total, res.version, c->data.len, res.step,
                            res.stale);
            if (res.applied || res.lag_applied) svc_park_wake(svc, SVC_PARK_CHUNK, c->name, c->offset);
        } else {
            svc_parked_t *p = psc_xcalloc(1, sizeof *p);
            p->call = call;
            p->kind = SVC_PARK_CHUNK;
            snprintf(p->name, sizeof p->name, "%s", c->name);
            p->offset = c->offset;
            p->total = c->total;
            p->len = c->data.len;
            p->min_step = c->local_step + 1;
            p->worker = c->worker;
            psc_rpc_reply_drop(call); /* the reply is read when the step comes, into a buffer shared by the
                                         replies of the chunk */
            svc_park(svc, p);
        }
        svc_chunk_in_free(&in);
        return;
    }
    int rc = store_push_iov(svc->store, c->name, c->offset, in.seg, in.nseg, c->data.len, c->total, buf + bound,
                            &version, err, sizeof err);
    if (rc == 0) ps_metrics_add_pull_bytes(svc->metrics, c->data.len);
    if (rc != 0)
        svc_fail(svc, call, rc, "%s", err);
    else
        svc_reply_chunk(call, buf, bound, c->name, c->offset, c->total, version, c->data.len, 0, 0);
    svc_chunk_in_free(&in);
}

static void h_push_pull(psc_rpc_call_t *call, psc_iov_t *iov, int niov, size_t len, void *arg)
{
    if (!svc_fence_enter_iov(arg, call, iov, niov, len, push_pull_apply)) return;
    push_pull_apply(call, iov, niov, len, arg);
    svc_fence_leave(arg);
}

static void step_run(psc_rpc_call_t *call, const uint8_t *req, size_t len, ps_service_t *svc, int fenced);

static void step_apply(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg)
{
    step_run(call, req, len, arg, 0);
}

static void h_step(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg)
{
    step_run(call, req, len, arg, 1);
}

/* A Step; fenced: an increment or a contribution goes through the checkpoint
 * fence (a read does not). */
static void step_run(psc_rpc_call_t *call, const uint8_t *req, size_t len, ps_service_t *svc, int fenced)
{
    char err[512];
    Psc__StepRequest *r;
    SVC_DECODE(r, psc__step_request__unpack, "StepRequest");
    if (fenced && (r->increment != 0 || r->count > 0)) {
        if (!svc_fence_enter(svc, call, req, len, step_apply)) {
            psc__step_request__free_unpacked(r, NULL);
            return;
        }
    } else {
        fenced = 0;
    }
    int64_t value = 0;
    if (store_get_sync(svc->store, NULL) && r->count > 0) {
        svc_step_note(svc, r);
        /* sync: a contribution (count >= 1) to global_step's step; count 0 is a read */
        store_sync_result_t res;
        int rc = store_step_sync(svc->store, r->local_step, r->count ? r->count : 1, r->worker, psc_now(), &res, err,
                                 sizeof err);
        if (rc != 0) {
            svc_fail(svc, call, rc, "%s", err);
        } else if (res.stale || res.applied) {
            Psc__StepReply rep = PSC__STEP_REPLY__INIT;
            rep.global_step = res.step;
            rep.stale = res.stale;
            uint8_t buf[32];
            psc_rpc_reply(call, buf, psc__step_reply__pack(&rep, buf));
            if (res.applied || res.lag_applied) svc_park_wake(svc, SVC_PARK_STEP, "global_step", 0);
        } else {
            svc_parked_t *p = psc_xcalloc(1, sizeof *p);
            p->call = call;
            p->kind = SVC_PARK_STEP;
            snprintf(p->name, sizeof p->name, "global_step");
            p->min_step = r->local_step + 1;
            p->worker = r->worker;
            svc_park(svc, p);
        }
        psc__step_request__free_unpacked(r, NULL);
        if (fenced) svc_fence_leave(svc);
        return;
    }
    svc_step_note(svc, r);
    int rc = svc_step_check(svc, r, err, sizeof err);
    if (rc != 0) {
        svc_reject(svc, call, rc, "%s", err);
    } else if ((rc = store_step_add(svc->store, r->increment, &value, err, sizeof err)) != 0) {
        svc_fail(svc, call, rc, "%s", err);
    } else {
        Psc__StepReply rep = PSC__STEP_REPLY__INIT;
        rep.global_step = value;
        uint8_t buf[16];
        psc_rpc_reply(call, buf, psc__step_reply__pack(&rep, buf));
    }
    psc__step_request__free_unpacked(r, NULL);
    if (fenced) svc_fence_leave(svc);
}

static void h_worker_done(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg)
{
    ps_service_t *svc = arg;
    Psc__WorkerDoneRequest *r;
    SVC_DECODE(r, psc__worker_done_request__unpack, "WorkerDoneRequest");
    if (r->worker >= PSC_MAX_REPLICAS) {
        svc_reject(svc, call, PSC_EINVAL, "worker %u out of range", r->worker);
    } else {
        pthread_mutex_lock(&svc->lock);
        if (!svc->done[r->worker]) {
            svc->done[r->worker] = 1;
            svc->workers_done++;
        }
        uint32_t n = svc->workers_done;
        pthread_mutex_unlock(&svc->lock);
        PSC_INFO("worker %u finished (%u done)", r->worker, n);
        store_sync_worker_left(svc->store, r->worker); /* sync: no step waits for it any more */
        Psc__WorkerDoneReply rep = PSC__WORKER_DONE_REPLY__INIT;
        rep.workers_done = n;
        uint8_t buf[16];
        psc_rpc_reply(call, buf, psc__worker_done_reply__pack(&rep, buf));
    }
    psc__worker_done_request__free_unpacked(r, NULL);
}

static void h_status(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg)
{
    ps_service_t *svc = arg;
    Psc__StatusRequest *r;
    SVC_DECODE(r, psc__status_request__unpack, "StatusRequest");
    psc__status_request__free_unpacked(r, NULL);

    Psc__StatusReply rep = PSC__STATUS_REPLY__INIT;
    svc_desc_mem_t m;
    svc_describe(svc, &rep, &m);
    store_stats_t st;
    store_get_stats(svc->store, &st);
    rep.applied = st.applied;
    rep.rejected = st.rejected;
    rep.pulls = st.pulls;
    rep.bytes_pushed = st.bytes_pushed;
    rep.bytes_pulled = st.bytes_pulled;
    rep.stale = st.stale;
    rep.timeout_applies = st.timeout_applies;
    store_sync_cfg_t sync;
    if ((rep.sync = store_get_sync(svc->store, &sync))) {
        uint32_t needed = 0;
        rep.replicas_to_aggregate = (uint32_t)sync.replicas_to_aggregate;
        rep.total_num_replicas = (uint32_t)sync.total_num_replicas;
        rep.replicas_present = (uint32_t)store_sync_present(svc->store, psc_now(), &needed);
    }
    /* every rank's progress and done flag: one caller (the chief, the
     * evaluator, a restarted replica, psctl) asks at a time, at most a few
     * times a second */
    uint32_t *done_ranks = psc_xmalloc(PSC_MAX_REPLICAS * sizeof *done_ranks);
    int64_t *progress = psc_xmalloc(PSC_MAX_REPLICAS * sizeof *progress);
    int64_t *restored = psc_xmalloc(PSC_MAX_REPLICAS * sizeof *restored);
    pthread_mutex_lock(&svc->lock);
    rep.n_replica_steps = PSC_MIN(svc->max_rank, PSC_MAX_REPLICAS);
    memcpy(progress, svc->replica_steps, rep.n_replica_steps * sizeof *progress);
    rep.replica_steps = progress;
    rep.restored_step = svc->restored_step;
    rep.base_step = svc->base_step;
    rep.n_restored_replica_steps = svc->n_restored_replica_steps;
    memcpy(restored, svc->restored_replica_steps, rep.n_restored_replica_steps * sizeof *restored);
    rep.restored_replica_steps = restored;
    rep.workers_done = svc->workers_done;
    for (uint32_t w = 0; w < PSC_MAX_REPLICAS; w++)
        if (svc->done[w]) done_ranks[rep.n_done_workers++] = w;
    pthread_mutex_unlock(&svc->lock);
    rep.done_workers = done_ranks;
    rep.checkpoints = svc->ckpt != NULL;
    rep.incarnation = svc->incarnation;
    size_t sz = psc__status_reply__get_packed_size(&rep);
    psc__status_reply__pack(&rep, psc_rpc_reply_alloc(call, sz));
    psc_rpc_reply_send(call);
    svc_describe_free(&m);
    free(progress);
    free(restored);
    free(done_ranks);
}

static void h_shutdown(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg)
{
    ps_service_t *svc = arg;
    Psc__ShutdownRequest *r;
    SVC_DECODE(r, psc__shutdown_request__unpack, "ShutdownRequest");
    PSC_INFO("shutdown requested by %s: %s", psc_rpc_call_peer(call), r->reason[0] ? r->reason : "(no reason)");
    psc__shutdown_request__free_unpacked(r, NULL);
    Psc__ShutdownReply rep = PSC__SHUTDOWN_REPLY__INIT;
    uint8_t buf[8];
    psc_rpc_reply(call, buf, psc__shutdown_reply__pack(&rep, buf));
    if (svc->on_shutdown) svc->on_shutdown(svc->shutdown_arg);
}

ps_service_t *ps_service_create(store_t *store, int task_index, void (*on_shutdown)(void *), void *arg, char *err,
                                size_t errlen)
{
    ps_service_t *svc = psc_xcalloc(1, sizeof *svc);
    svc->store = store;
    svc->task_index = task_index;
    svc->on_shutdown = on_shutdown;
    svc->shutdown_arg = arg;
    psc_rng_t rng;
    psc_rng_seed(&rng, (uint64_t)(psc_now() * 1e9) ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)svc);
    svc->incarnation = psc_rng_next(&rng) | 1;
    pthread_mutex_init(&svc->lock, NULL);
    pthread_mutex_init(&svc->park_lock, NULL);
    pthread_mutex_init(&svc->reaper_lock, NULL);
    pthread_cond_init(&svc->reaper_cond, NULL);
    svc_fence_init(&svc->fence);
    svc_stage_init(&svc->stage);
    if (svc_reaper_start(svc, svc_fence_tick, err, errlen)) { /* the fence's replay runs on the reaper */
        ps_service_destroy(svc);
        return NULL;
    }
    return svc;
}

void ps_service_destroy(ps_service_t *svc)
{
    if (!svc) return;
    svc_reaper_stop(svc);
    ps_service_drain(svc);
    ps_metrics_destroy(svc->metrics); /* after the drain, whose failed calls are observed */
    pthread_mutex_destroy(&svc->lock);
    pthread_mutex_destroy(&svc->park_lock);
    pthread_mutex_destroy(&svc->reaper_lock);
    pthread_cond_destroy(&svc->reaper_cond);
    svc_fence_deinit(&svc->fence);
    svc_stage_deinit(&svc->stage);
    free(svc);
}

void ps_service_drain(ps_service_t *svc)
{
    svc_fail_parked(svc, 1, PSC_EUNAVAILABLE, "is shutting down");
    svc_fence_fail_all(svc, 1, PSC_EUNAVAILABLE, "is shutting down");
}

void ps_service_register(ps_service_t *svc, psc_rpc_server_t *server)
{
    psc_rpc_server_add_service(server, "psc.ParameterServer");
    psc_rpc_server_add_method(server, PSC_M_CREATE, h_create, svc);
    psc_rpc_server_add_method(server, PSC_M_ASSIGN, h_assign, svc);
    psc_rpc_server_add_method(server, PSC_M_READY, h_ready, svc);
    psc_rpc_server_add_method(server, PSC_M_PULL, h_pull, svc);
    psc_rpc_server_add_method_iov(server, PSC_M_PUSH, h_push, svc); /* tensors: read where they arrived */
    psc_rpc_server_add_method_iov(server, PSC_M_PUSH_PULL, h_push_pull, svc);
    psc_rpc_server_add_method(server, PSC_M_STEP, h_step, svc);
    psc_rpc_server_add_method(server, PSC_M_BATCH, svc_h_batch, svc);
    psc_rpc_server_add_method(server, PSC_M_WORKER_DONE, h_worker_done, svc);
    psc_rpc_server_add_method(server, PSC_M_STATUS, h_status, svc);
    psc_rpc_server_add_method(server, PSC_M_SHUTDOWN, h_shutdown, svc);
    psc_rpc_server_add_method(server, PSC_M_SAVE, svc_h_save, svc);
    psc_rpc_server_add_method(server, PSC_M_COMMIT, svc_h_commit, svc);
    psc_rpc_server_add_method(server, PSC_M_RESTORE, svc_h_restore, svc);
    psc_rpc_server_add_method(server, PSC_M_LIST_CKPT, svc_h_list_checkpoints, svc);
    psc_rpc_server_add_method(server, PSC_M_RELEASE, svc_h_release, svc);
    psc_rpc_server_add_method(server, PSC_M_FENCE, svc_h_fence, svc); /* last: the fuzzer's seeds index methods */
    psc_rpc_server_add_method(server, PSC_M_UNFENCE, svc_h_unfence, svc);
    psc_rpc_server_add_method(server, PSC_M_TABLE_ROWS, svc_h_table_rows, svc);
    psc_rpc_server_add_method(server, PSC_M_DESCRIBE, svc_h_describe, svc);
    psc_rpc_server_add_method(server, PSC_M_ASSIGN_ROWS, svc_h_assign_rows, svc);
    psc_rpc_server_add_method(server, PSC_M_STAGE, svc_h_stage, svc);
    ps_metrics_observe_server(svc->metrics, server);
}

void ps_service_set_checkpoints(ps_service_t *svc, ckpt_db_t *db, int debug_save_delay_ms)
{
    svc->ckpt = db;
    svc->debug_save_delay_ms = debug_save_delay_ms;
}

void ps_service_set_num_ps(ps_service_t *svc, int num_ps) { svc->num_ps = num_ps; }

void ps_service_set_metrics(ps_service_t *svc, psc_metrics_t *m)
{
    PSC_ASSERT(!svc->metrics);
    if (m) svc->metrics = ps_metrics_create(m, svc->store);
}
