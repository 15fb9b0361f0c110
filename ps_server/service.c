/* service.c — psc.ParameterServer handlers (see service.h): the data path,
 * sync parking and the life cycle; checkpoints and Release are in service_ckpt.c,
 * Batch in service_batch.c, decoding Chunk requests (and widening bfloat16 ones)
 * in service_chunk.c, the checkpoint fence (which parks the requests that change
 * the model while an async checkpoint is cut) in service_fence.c.
 *
 * Every handler follows one shape: unpack (protobuf-c), validate, call the store,
 * pack the reply, free the unpacked message in the same function. Tensor replies
 * (Pull, PushPull) are written straight into the reply buffer: the payload goes
 * at a fixed offset, and the header, packed once the version is known, is placed
 * right in front of it, so the bytes are copied once on the server.
 */
#include "service_internal.h"

#include "chunk.h"
#include "log.h"
#include "psc.h"
#include "rng.h"
#include "wire.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int svc_status_of(int rc)
{
    switch (rc) {
    case PSC_ENOTFOUND: return PSC_RPC_NOT_FOUND;
    case PSC_ENOTREADY: return PSC_RPC_FAILED_PRECONDITION;
    case PSC_EEXISTS: return PSC_RPC_ALREADY_EXISTS;
    case PSC_EINVAL:
    case PSC_EMISMATCH: return PSC_RPC_INVALID_ARGUMENT;
    case PSC_ENOMEM: return PSC_RPC_RESOURCE_EXHAUSTED;
    case PSC_EUNSUPPORTED: return PSC_RPC_FAILED_PRECONDITION;
    case PSC_ESTALE: return PSC_RPC_ABORTED;
    case PSC_ECORRUPT: return PSC_RPC_DATA_LOSS;
    case PSC_EIO: return PSC_RPC_INTERNAL;
    default: return PSC_RPC_INTERNAL;
    }
}

void svc_fail_undecodable(ps_service_t *svc, psc_rpc_call_t *call, const char *what, size_t len)
{
    store_count_rejected(svc->store);
    psc_rpc_fail(call, PSC_RPC_INVALID_ARGUMENT, "%s does not parse (%zu bytes)", what, len);
}

static int optim_from_proto(const Psc__OptimizerSpec *o, psc_optim_config_t *c, char *err, size_t errlen)
{
    if (!o) return psc_seterr(err, errlen, PSC_EINVAL, "optimizer missing");
    memset(c, 0, sizeof *c);
    int found = 0;
    for (int k = PSC_OPT_SGD; k <= PSC_OPT_RMSPROP; k++)
        if (strcmp(o->name, psc_optim_name((enum psc_optim_kind)k)) == 0) {
            c->kind = (enum psc_optim_kind)k;
            found = 1;
        }
    if (!found) return psc_seterr(err, errlen, PSC_EINVAL, "unknown optimizer \"%s\"", o->name);
    if (!(o->learning_rate > 0)) return psc_seterr(err, errlen, PSC_EINVAL, "optimizer.learning_rate must be > 0");
    c->learning_rate = o->learning_rate;
    c->momentum = o->momentum;
    c->use_nesterov = o->use_nesterov;
    c->beta1 = o->beta1;
    c->beta2 = o->beta2;
    c->epsilon = o->epsilon;
    c->initial_accumulator_value = o->initial_accumulator_value;
    c->decay = o->decay;
    return 0;
}

static void h_create(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg)
{
    ps_service_t *svc = arg;
    char err[512];
    Psc__CreateRequest *r = psc__create_request__unpack(NULL, len, req);
    if (!r) return svc_fail_undecodable(svc, call, "CreateRequest", len);
    psc_optim_config_t opt;
    int rc = optim_from_proto(r->optimizer, &opt, err, sizeof err);
    store_var_spec_t *specs = psc_xcalloc(r->n_vars ? r->n_vars : 1, sizeof *specs);
    if (rc == 0 && (strlen(r->job_id) != 16))
        rc = psc_seterr(err, sizeof err, PSC_EINVAL, "job_id must be 16 hex digits, got \"%s\"", r->job_id);
    for (size_t i = 0; rc == 0 && i < r->n_vars; i++) {
        const Psc__VarSpec *v = r->vars[i];
        if (v->n_shape > PSC_MAX_RANK) {
            rc = psc_seterr(err, sizeof err, PSC_EINVAL, "%s: rank %zu exceeds %d", v->name, v->n_shape,
                            PSC_MAX_RANK);
            break;
        }
        specs[i].name = v->name;
        specs[i].rank = (int)v->n_shape;
        for (size_t d = 0; d < v->n_shape; d++) specs[i].shape[d] = v->shape[d];
        specs[i].is_step = v->is_step;
    }
    int created = 0;
    store_sync_cfg_t sync = {0};
    if (rc == 0 && r->sync) {
        sync.replicas_to_aggregate = (int)PSC_MIN(r->sync->replicas_to_aggregate, (uint32_t)PS_MAX_WORKERS + 1);
        sync.total_num_replicas = (int)PSC_MIN(r->sync->total_num_replicas, (uint32_t)PS_MAX_WORKERS + 1);
        sync.timeout_secs = r->sync->timeout_secs;
        if (sync.total_num_replicas < 1 || sync.total_num_replicas > PS_MAX_WORKERS)
            rc = psc_seterr(err, sizeof err, PSC_EINVAL, "sync.total_num_replicas must be 1..%d, got %u",
                            PS_MAX_WORKERS, r->sync->total_num_replicas);
    }
    if (rc == 0) {
        rc = store_create_vars(svc->store, r->job_id, &opt, specs, (int)r->n_vars, &created, err, sizeof err);
        if (rc == 0 && r->sync) rc = store_set_sync(svc->store, &sync, err, sizeof err);
        if (rc == PSC_EMISMATCH) rc = PSC_EEXISTS; /* a create that conflicts with what exists */
    } else {
        store_count_rejected(svc->store);
    }
    if (rc != 0) {
        psc_rpc_fail(call, svc_status_of(rc), "%s", err);
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
    }
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
    if (svc_chunk_decode(req, len, &cr)) return svc_fail_undecodable(svc, call, "Chunk", len);
    Psc__Chunk *c = cr.c;
    int rc = store_assign(svc->store, c->name, c->offset, c->data.data, c->data.len, c->total, err, sizeof err);
    if (rc != 0)
        psc_rpc_fail(call, svc_status_of(rc), "%s", err);
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
    Psc__ReadyRequest *r = psc__ready_request__unpack(NULL, len, req);
    if (!r) return svc_fail_undecodable(svc, call, "ReadyRequest", len);
    int rc = store_set_ready(svc->store, r->job_id, err, sizeof err);
    if (rc != 0) {
        psc_rpc_fail(call, svc_status_of(rc), "%s", err);
    } else {
        Psc__ReadyReply rep = PSC__READY_REPLY__INIT;
        uint8_t buf[8];
        psc_rpc_reply(call, buf, psc__ready_reply__pack(&rep, buf));
        PSC_INFO("model ready for job %s", r->job_id);
    }
    psc__ready_request__free_unpacked(r, NULL);
}

/* Reply buffer layout for tensor replies: [pad][header][payload]; payload at
 * offset `bound`, header packed at bound - hlen once the version is known. */
void svc_send_chunk_reply_sync(psc_rpc_call_t *call, uint8_t *buf, size_t bound, const char *name,
                                  uint64_t offset, uint64_t total, int64_t version, size_t len, int64_t step,
                                  int stale)
{
    Psc__Chunk h = PSC__CHUNK__INIT;
    h.name = (char *)name;
    h.offset = offset;
    h.total = total;
    h.version = version;
    h.step = step;
    h.stale = stale;
    uint8_t hdr[256];
    PSC_ASSERT(psc_chunk_header_bound(&h) <= sizeof hdr);
    size_t hlen = psc_chunk_header_pack(&h, len, hdr);
    PSC_ASSERT(hlen <= bound);
    memcpy(buf + bound - hlen, hdr, hlen);
    psc_rpc_reply_send_range(call, bound - hlen, hlen + len);
}

static void send_chunk_reply(psc_rpc_call_t *call, uint8_t *buf, size_t bound, const char *name, uint64_t offset,
                             uint64_t total, int64_t version, size_t len)
{
    svc_send_chunk_reply_sync(call, buf, bound, name, offset, total, version, len, 0, 0);
}

size_t svc_reply_header_bound(const char *name)
{
    /* name, offset, total, version, step, stale, data tag+len: generous fixed bound. */
    return strlen(name) + 96;
}

/* ---- parking (sync replicas) ----
 *
 * A reply that needs a step that is not applied yet (a sync push-pull, a pull
 * with min_step, a sync Step) is parked: its call and reply buffer go on a list
 * and the handler returns, so no server thread waits. Whoever applies a step
 * (a handler whose gradient completed it, or the reaper thread's timeout rule)
 * then completes the parked replies of that chunk whose step has come. A parked
 * entry is completed by whoever unlinks it from the list, under park_lock, so
 * exactly once; a handler that parks re-checks the step after parking, which
 * closes the race with an apply that happened in between. */

enum park_kind { PARK_CHUNK, PARK_STEP };

typedef struct parked {
    struct parked *next;
    psc_rpc_call_t *call;
    enum park_kind kind;
    char name[208];
    uint64_t offset, total;
    size_t len;
    uint8_t *buf; /* reply buffer from psc_rpc_reply_alloc: bound bytes of header room, then len */
    size_t bound;
    int64_t min_step;
    double since;
    uint32_t worker; /* the sender's replica rank (sync push or step); UINT32_MAX: a pull */
} parked_t;

/* Answers a parked entry with the current state (its step has come). */
static void complete_parked(ps_service_t *svc, parked_t *p)
{
    char err[512];
    int64_t step = 0, version = 0;
    if (p->kind == PARK_STEP) {
        store_step_get(svc->store, &step);
        Psc__StepReply rep = PSC__STEP_REPLY__INIT;
        rep.global_step = step;
        uint8_t buf[32];
        psc_rpc_reply(p->call, buf, psc__step_reply__pack(&rep, buf));
    } else {
        int rc = store_chunk_read(svc->store, p->name, p->offset, p->len, p->buf + p->bound, &step, &version, err,
                                  sizeof err);
        if (rc == 0) ps_metrics_add_pull_bytes(svc->metrics, p->len); /* before the reply, as everywhere */
        if (rc)
            psc_rpc_fail(p->call, svc_status_of(rc), "%s", err);
        else
            svc_send_chunk_reply_sync(p->call, p->buf, p->bound, p->name, p->offset, p->total, version, p->len, step, 0);
    }
    free(p);
}

/* The current step of what p waits for. */
static int64_t parked_current_step(ps_service_t *svc, const parked_t *p)
{
    int64_t step = -1;
    if (p->kind == PARK_STEP)
        store_step_get(svc->store, &step);
    else
        store_chunk_read(svc->store, p->name, p->offset, 0, NULL, &step, NULL, NULL, 0);
    return step;
}

/* Completes every parked entry for (kind, name, offset) whose step has come;
 * name NULL: every entry (any chunk). */
static void wake_parked(ps_service_t *svc, enum park_kind kind, const char *name, uint64_t offset)
{
    parked_t *ready = NULL;
    pthread_mutex_lock(&svc->park_lock);
    for (parked_t **pp = &svc->parked; *pp;) {
        parked_t *p = *pp;
        int match = !name || (p->kind == kind && (kind == PARK_STEP || (p->offset == offset && !strcmp(p->name, name))));
        if (match && parked_current_step(svc, p) >= p->min_step) {
            *pp = p->next;
            p->next = ready;
            ready = p;
        } else {
            pp = &p->next;
        }
    }
    pthread_mutex_unlock(&svc->park_lock);
    while (ready) {
        parked_t *next = ready->next;
        complete_parked(svc, ready);
        ready = next;
    }
}

/* Parks a reply until (kind, name, offset) reaches min_step; p is filled by the caller. */
static void park(ps_service_t *svc, parked_t *p)
{
    p->since = psc_now();
    pthread_mutex_lock(&svc->park_lock);
    if (svc->draining) {
        pthread_mutex_unlock(&svc->park_lock);
        psc_rpc_fail(p->call, PSC_RPC_UNAVAILABLE, "ps_server %d is shutting down", svc->task_index);
        free(p);
        return;
    }
    p->next = svc->parked;
    svc->parked = p;
    pthread_mutex_unlock(&svc->park_lock);
    /* the step may have been applied between the store call and the parking */
    wake_parked(svc, p->kind, p->name, p->offset);
}

/* The reaper: applies steps whose timeout expired (store_sync_tick), answers
 * their parked replies, logs presence changes, and fails replies parked far
 * longer than any step can take. */
static void on_tick_apply(void *arg, const char *name, uint64_t offset, int64_t step, uint32_t count,
                          int by_timeout)
{
    ps_service_t *svc = arg;
    store_sync_cfg_t cfg;
    store_get_sync(svc->store, &cfg);
    if (by_timeout)
        PSC_WARN("sync: step %lld of %s@%llu applied after the %.1f s timeout with %u of %d gradients",
                 (long long)step - 1, name, (unsigned long long)offset, cfg.timeout_secs, count,
                 cfg.replicas_to_aggregate);
    wake_parked(svc, strcmp(name, "global_step") == 0 ? PARK_STEP : PARK_CHUNK, name, offset);
}

static void *reaper_main(void *arg)
{
    ps_service_t *svc = arg;
    pthread_mutex_lock(&svc->reaper_lock);
    while (!svc->reaper_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        if (!svc->reaper_kick) pthread_cond_timedwait(&svc->reaper_cond, &svc->reaper_lock, &ts);
        svc->reaper_kick = 0;
        if (svc->reaper_stop) break;
        pthread_mutex_unlock(&svc->reaper_lock);
        svc_fence_tick(svc, psc_now()); /* async checkpoints: a released fence's pushes, an expired lease */
        store_sync_cfg_t cfg;
        if (store_get_sync(svc->store, &cfg)) {
            double now = psc_now();
            /* a replica whose reply is parked here is alive and waiting for its
             * step: it stays present, however long the step takes */
            uint32_t waiting[64];
            int nwaiting = 0;
            pthread_mutex_lock(&svc->park_lock);
            for (parked_t *p = svc->parked; p && nwaiting < (int)PSC_ARRAY_LEN(waiting); p = p->next)
                if (p->worker != UINT32_MAX) waiting[nwaiting++] = p->worker;
            pthread_mutex_unlock(&svc->park_lock);
            for (int i = 0; i < nwaiting; i++) store_sync_seen(svc->store, waiting[i], now);
            store_sync_tick(svc->store, now, on_tick_apply, svc);
            uint32_t needed = 0;
            uint32_t present = (uint32_t)store_sync_present(svc->store, now, &needed);
            if (present != svc->last_present) {
                PSC_INFO("sync: %u of %d replicas present; a step now needs %u gradient%s", present,
                         cfg.total_num_replicas, needed, needed == 1 ? "" : "s");
                svc->last_present = present;
            }
            /* anything parked this long waits for a step no one will apply */
            double limit = cfg.timeout_secs * 2 + 10;
            parked_t *expired = NULL;
            pthread_mutex_lock(&svc->park_lock);
            for (parked_t **pp = &svc->parked; *pp;) {
                parked_t *p = *pp;
                if (now - p->since > limit) {
                    *pp = p->next;
                    p->next = expired;
                    expired = p;
                } else {
                    pp = &p->next;
                }
            }
            pthread_mutex_unlock(&svc->park_lock);
            while (expired) {
                parked_t *next = expired->next;
                psc_rpc_fail(expired->call, PSC_RPC_DEADLINE_EXCEEDED,
                             "%s: step %lld was not applied within %.0f s", expired->name,
                             (long long)expired->min_step - 1, limit);
                free(expired);
                expired = next;
            }
        }
        pthread_mutex_lock(&svc->reaper_lock);
    }
    pthread_mutex_unlock(&svc->reaper_lock);
    return NULL;
}

/* Fails every parked reply with `code` and msg; draining: park none from now on. */
void svc_fail_parked(ps_service_t *svc, int draining, int code, const char *msg)
{
    pthread_mutex_lock(&svc->park_lock);
    if (draining) svc->draining = 1;
    parked_t *all = svc->parked;
    svc->parked = NULL;
    pthread_mutex_unlock(&svc->park_lock);
    while (all) {
        parked_t *next = all->next;
        psc_rpc_fail(all->call, code, "ps_server %d %s", svc->task_index, msg);
        free(all);
        all = next;
    }
}

void ps_service_drain(ps_service_t *svc)
{
    svc_fail_parked(svc, 1, PSC_RPC_UNAVAILABLE, "is shutting down");
    svc_fence_fail_all(svc, 1, PSC_RPC_UNAVAILABLE, "is shutting down");
}

static void h_pull(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg)
{
    ps_service_t *svc = arg;
    char err[512];
    Psc__PullRequest *r = psc__pull_request__unpack(NULL, len, req);
    if (!r) return svc_fail_undecodable(svc, call, "PullRequest", len);
    if (r->length > PSC_CHUNK_BYTES || strlen(r->name) > 200) {
        psc_rpc_fail(call, PSC_RPC_INVALID_ARGUMENT, "pull of %llu bytes exceeds the %zu-byte chunk",
                     (unsigned long long)r->length, PSC_CHUNK_BYTES);
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
        rc = store_chunk_read(svc->store, r->name, r->offset, r->length, buf + bound, &step, &version, err,
                              sizeof err);
    uint64_t total = 0;
    if (rc == 0) store_var_bytes(svc->store, r->name, &total); /* exists: the pull found it */
    if (rc != 0) {
        psc_rpc_fail(call, svc_status_of(rc), "%s", err);
    } else if (r->min_step > 0 && step < r->min_step) {
        parked_t *p = psc_xcalloc(1, sizeof *p); /* wait until the step is applied */
        p->call = call;
        p->kind = PARK_CHUNK;
        snprintf(p->name, sizeof p->name, "%s", r->name);
        p->offset = r->offset;
        p->total = total;
        p->len = r->length;
        p->buf = buf;
        p->bound = bound;
        p->min_step = r->min_step;
        p->worker = UINT32_MAX;
        park(svc, p);
    } else {
        ps_metrics_add_pull_bytes(svc->metrics, r->length);
        svc_send_chunk_reply_sync(call, buf, bound, r->name, r->offset, total, version, r->length, step, 0);
    }
    psc__pull_request__free_unpacked(r, NULL);
}

static void push_apply(psc_rpc_call_t *call, psc_iov_t *iov, int niov, size_t len, void *arg)
{
    ps_service_t *svc = arg;
    char err[512];
    chunk_in_t in;
    if (svc_chunk_in_decode(iov, niov, len, &in)) {
        svc_chunk_in_free(&in);
        return svc_fail_undecodable(svc, call, "Chunk", len);
    }
    Psc__Chunk *c = in.cr.c;
    ps_metrics_add_push_bytes(svc->metrics, c->data.len);
    if (svc_chunk_in_widen(svc, call, &in)) {
        svc_chunk_in_free(&in);
        return;
    }
    int64_t version = 0;
    if (store_get_sync(svc->store, NULL)) {
        /* sync: a contribution to the chunk's step; the reply says if it was stale */
        store_sync_result_t res;
        int rc = store_push_sync(svc->store, c->name, c->offset, svc_chunk_in_data(&in), c->data.len, c->total,
                                 c->local_step, c->count ? c->count : 1, c->worker, psc_now(), NULL, &res, err,
                                 sizeof err);
        if (rc != 0) {
            psc_rpc_fail(call, svc_status_of(rc), "%s", err);
        } else {
            reply_push(call, res.version, res.stale);
            if (res.applied || res.lag_applied) wake_parked(svc, PARK_CHUNK, c->name, c->offset);
        }
        svc_chunk_in_free(&in);
        return;
    }
    int rc = store_push_iov(svc->store, c->name, c->offset, in.seg, in.nseg, c->data.len, c->total, NULL, &version,
                            err, sizeof err);
    if (rc != 0)
        psc_rpc_fail(call, svc_status_of(rc), "%s", err);
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
    if (svc_chunk_in_decode(iov, niov, len, &in)) {
        svc_chunk_in_free(&in);
        return svc_fail_undecodable(svc, call, "Chunk", len);
    }
    Psc__Chunk *c = in.cr.c;
    ps_metrics_add_push_bytes(svc->metrics, c->data.len);
    if (svc_chunk_in_widen(svc, call, &in)) {
        svc_chunk_in_free(&in);
        return;
    }
    if (c->data.len > PSC_CHUNK_BYTES || strlen(c->name) > 200) {
        store_count_rejected(svc->store);
        psc_rpc_fail(call, PSC_RPC_INVALID_ARGUMENT, "chunk of %zu bytes exceeds %zu", c->data.len,
                     PSC_CHUNK_BYTES);
        svc_chunk_in_free(&in);
        return;
    }
    size_t bound = svc_reply_header_bound(c->name);
    uint8_t *buf = psc_rpc_reply_alloc(call, bound + c->data.len);
    int64_t version = 0;
    if (store_get_sync(svc->store, NULL)) {
        /* sync: contribute, then answer with the values of the next step once it is applied */
        store_sync_result_t res;
        int rc = store_push_sync(svc->store, c->name, c->offset, svc_chunk_in_data(&in), c->data.len, c->total,
                                 c->local_step, c->count ? c->count : 1, c->worker, psc_now(), buf + bound, &res, err,
                                 sizeof err);
        if (rc != 0) {
            psc_rpc_fail(call, svc_status_of(rc), "%s", err);
        } else if (res.stale || res.applied) {
            ps_metrics_add_pull_bytes(svc->metrics, c->data.len);
            svc_send_chunk_reply_sync(call, buf, bound, c->name, c->offset, c->total, res.version, c->data.len, res.step,
                                  res.stale);
            if (res.applied || res.lag_applied) wake_parked(svc, PARK_CHUNK, c->name, c->offset);
        } else {
            parked_t *p = psc_xcalloc(1, sizeof *p);
            p->call = call;
            p->kind = PARK_CHUNK;
            snprintf(p->name, sizeof p->name, "%s", c->name);
            p->offset = c->offset;
            p->total = c->total;
            p->len = c->data.len;
            p->buf = buf;
            p->bound = bound;
            p->min_step = c->local_step + 1;
            p->worker = c->worker;
            park(svc, p);
        }
        svc_chunk_in_free(&in);
        return;
    }
    int rc = store_push_iov(svc->store, c->name, c->offset, in.seg, in.nseg, c->data.len, c->total, buf + bound,
                            &version, err, sizeof err);
    if (rc == 0) ps_metrics_add_pull_bytes(svc->metrics, c->data.len);
    if (rc != 0)
        psc_rpc_fail(call, svc_status_of(rc), "%s", err);
    else
        send_chunk_reply(call, buf, bound, c->name, c->offset, c->total, version, c->data.len);
    svc_chunk_in_free(&in);
}

static void h_push_pull(psc_rpc_call_t *call, psc_iov_t *iov, int niov, size_t len, void *arg)
{
    if (!svc_fence_enter_iov(arg, call, iov, niov, len, push_pull_apply)) return;
    push_pull_apply(call, iov, niov, len, arg);
    svc_fence_leave(arg);
}

/* The replica's own step count, kept for its resumption after a restart. */
static void note_replica_step(ps_service_t *svc, const Psc__StepRequest *r)
{
    if (r->replica_step > 0 && r->worker < PS_MAX_WORKERS) {
        pthread_mutex_lock(&svc->lock);
        if (r->replica_step > svc->replica_steps[r->worker]) svc->replica_steps[r->worker] = r->replica_step;
        if (r->worker + 1 > svc->max_rank) svc->max_rank = r->worker + 1;
        pthread_mutex_unlock(&svc->lock);
    }
}

int svc_step_check(ps_service_t *svc, const Psc__StepRequest *r, char *err, size_t errlen)
{
    if (r->increment < 0)
        return psc_seterr(err, errlen, PSC_EINVAL, "step increment %lld is negative", (long long)r->increment);
    if (r->increment > 0 && store_get_sync(svc->store, NULL))
        return psc_seterr(err, errlen, PSC_EUNSUPPORTED,
                          "global_step is in sync mode: a step is a contribution with count >= 1, not an increment");
    return 0;
}

int svc_step_add(ps_service_t *svc, const Psc__StepRequest *r, int64_t *value, char *err, size_t errlen)
{
    note_replica_step(svc, r);
    int rc = svc_step_check(svc, r, err, errlen);
    return rc ? rc : store_step_add(svc->store, r->increment, value, err, errlen);
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
    Psc__StepRequest *r = psc__step_request__unpack(NULL, len, req);
    if (!r) return svc_fail_undecodable(svc, call, "StepRequest", len);
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
        note_replica_step(svc, r);
        /* sync: a contribution (count >= 1) to global_step's step; count 0 is a read */
        store_sync_result_t res;
        int rc = store_step_sync(svc->store, r->local_step, r->count ? r->count : 1, r->worker, psc_now(), &res, err,
                                 sizeof err);
        if (rc != 0) {
            psc_rpc_fail(call, svc_status_of(rc), "%s", err);
        } else if (res.stale || res.applied) {
            Psc__StepReply rep = PSC__STEP_REPLY__INIT;
            rep.global_step = res.step;
            rep.stale = res.stale;
            uint8_t buf[32];
            psc_rpc_reply(call, buf, psc__step_reply__pack(&rep, buf));
            if (res.applied || res.lag_applied) wake_parked(svc, PARK_STEP, "global_step", 0);
        } else {
            parked_t *p = psc_xcalloc(1, sizeof *p);
            p->call = call;
            p->kind = PARK_STEP;
            snprintf(p->name, sizeof p->name, "global_step");
            p->min_step = r->local_step + 1;
            p->worker = r->worker;
            park(svc, p);
        }
        psc__step_request__free_unpacked(r, NULL);
        if (fenced) svc_fence_leave(svc);
        return;
    }
    int rc = svc_step_add(svc, r, &value, err, sizeof err);
    if (rc != 0) {
        psc_rpc_fail(call, svc_status_of(rc), "%s", err);
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
    Psc__WorkerDoneRequest *r = psc__worker_done_request__unpack(NULL, len, req);
    if (!r) return svc_fail_undecodable(svc, call, "WorkerDoneRequest", len);
    if (r->worker >= PS_MAX_WORKERS) {
        psc_rpc_fail(call, PSC_RPC_INVALID_ARGUMENT, "worker %u out of range", r->worker);
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
    Psc__StatusRequest *r = psc__status_request__unpack(NULL, len, req);
    if (!r) return svc_fail_undecodable(svc, call, "StatusRequest", len);
    psc__status_request__free_unpacked(r, NULL);

    Psc__StatusReply rep = PSC__STATUS_REPLY__INIT;
    char job_id[17] = "";
    rep.ready = store_is_ready(svc->store, job_id);
    rep.job_id = job_id;
    int64_t step = 0;
    rep.has_global_step = store_step_get(svc->store, &step);
    rep.global_step = step;
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
    uint32_t done_ranks[256];
    int64_t progress[256];
    pthread_mutex_lock(&svc->lock);
    rep.n_replica_steps = PSC_MIN(svc->max_rank, PSC_ARRAY_LEN(progress));
    memcpy(progress, svc->replica_steps, rep.n_replica_steps * sizeof *progress);
    rep.replica_steps = progress;
    rep.restored_step = svc->restored_step;
    rep.workers_done = svc->workers_done;
    for (uint32_t w = 0; w < PS_MAX_WORKERS && rep.n_done_workers < PSC_ARRAY_LEN(done_ranks); w++)
        if (svc->done[w]) done_ranks[rep.n_done_workers++] = w;
    pthread_mutex_unlock(&svc->lock);
    rep.done_workers = done_ranks;
    rep.optimizer = (char *)"";
    rep.checkpoints = svc->ckpt != NULL;
    rep.incarnation = svc->incarnation;

    store_var_info_t *vars = NULL;
    int n = 0;
    store_list(svc->store, &vars, &n);
    Psc__VarStatus *vs = psc_xcalloc((size_t)(n ? n : 1), sizeof *vs);
    Psc__VarStatus **vp = psc_xcalloc((size_t)(n ? n : 1), sizeof *vp);
    int64_t(*shapes)[PSC_MAX_RANK] = psc_xcalloc((size_t)(n ? n : 1), sizeof *shapes);
    for (int i = 0; i < n; i++) {
        psc__var_status__init(&vs[i]);
        vs[i].name = vars[i].name;
        for (int d = 0; d < vars[i].rank; d++) shapes[i][d] = vars[i].shape[d];
        vs[i].n_shape = (size_t)vars[i].rank;
        vs[i].shape = shapes[i];
        vs[i].bytes = vars[i].bytes;
        vs[i].version = vars[i].version;
        vp[i] = &vs[i];
    }
    rep.n_vars = (size_t)n;
    rep.vars = vp;
    size_t sz = psc__status_reply__get_packed_size(&rep);
    psc__status_reply__pack(&rep, psc_rpc_reply_alloc(call, sz));
    psc_rpc_reply_send(call);
    free(shapes);
    free(vp);
    free(vs);
    free(vars);
}

static void h_shutdown(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg)
{
    ps_service_t *svc = arg;
    Psc__ShutdownRequest *r = psc__shutdown_request__unpack(NULL, len, req);
    if (!r) return svc_fail_undecodable(svc, call, "ShutdownRequest", len);
    PSC_INFO("shutdown requested by %s: %s", psc_rpc_call_peer(call), r->reason[0] ? r->reason : "(no reason)");
    psc__shutdown_request__free_unpacked(r, NULL);
    Psc__ShutdownReply rep = PSC__SHUTDOWN_REPLY__INIT;
    uint8_t buf[8];
    psc_rpc_reply(call, buf, psc__shutdown_reply__pack(&rep, buf));
    if (svc->on_shutdown) svc->on_shutdown(svc->shutdown_arg);
}

ps_service_t *ps_service_create(store_t *store, int task_index, void (*on_shutdown)(void *), void *arg)
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
    PSC_ASSERT(pthread_create(&svc->reaper, NULL, reaper_main, svc) == 0);
    svc->reaper_running = 1;
    return svc;
}

void ps_service_destroy(ps_service_t *svc)
{
    if (!svc) return;
    if (svc->reaper_running) {
        pthread_mutex_lock(&svc->reaper_lock);
        svc->reaper_stop = 1;
        pthread_cond_signal(&svc->reaper_cond);
        pthread_mutex_unlock(&svc->reaper_lock);
        pthread_join(svc->reaper, NULL);
    }
    ps_service_drain(svc);
    ps_metrics_destroy(svc->metrics); /* after the drain, whose failed calls are observed */
    pthread_mutex_destroy(&svc->lock);
    pthread_mutex_destroy(&svc->park_lock);
    pthread_mutex_destroy(&svc->reaper_lock);
    pthread_cond_destroy(&svc->reaper_cond);
    svc_fence_deinit(&svc->fence);
    free(svc);
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
    ps_metrics_observe_server(svc->metrics, server);
}

void ps_service_set_checkpoints(ps_service_t *svc, ckpt_db_t *db, int debug_save_delay_ms)
{
    svc->ckpt = db;
    svc->debug_save_delay_ms = debug_save_delay_ms;
}

void ps_service_set_metrics(ps_service_t *svc, psc_metrics_t *m)
{
    PSC_ASSERT(!svc->metrics);
    if (m) svc->metrics = ps_metrics_create(m, svc->store);
}
