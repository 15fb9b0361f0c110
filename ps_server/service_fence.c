/* service_fence.c — the checkpoint fence of an asynchronous PS (Fence,
 * Unfence, and the admission of every request that changes the model).
 *
 * Why: an async checkpoint must be one cut across the PS. The chief fences
 * every PS; once all have answered, no PS applies anything, so global_step
 * stands still and every shard can be copied at that one step (Save.fence);
 * then the fences are released (proto/psc.proto, "Async checkpoints").
 *
 * Design. A request that changes the model (Push, PushPull, Assign, a Batch
 * with pushes or a step, a Step that adds or contributes) is admitted through
 * svc_fence_enter*: while the fence is open it counts as `applying` and runs
 * at once (svc_fence_leave when done); while it is held, its bytes are copied
 * into one heap buffer and parked with its call at the tail of a FIFO, and the
 * handler returns: no server thread waits (the PS runs as few polling threads
 * as CPUs, and the Save that must come next needs one). Fence waits only for
 * the requests already admitted, which apply without any RPC (memcpy-sized
 * work), so its wait is short and bounded. Releasing the fence (Unfence, the
 * Save that copied under it, or the lease running out) hands the FIFO to the
 * reaper thread, which replays each entry through the handler's apply
 * function, in arrival order, answering its call; until the FIFO is empty new
 * requests keep parking behind it, so the order holds. Pulls never park.
 *
 * Invariants: an entry is answered by whoever unlinks it under f->lock, so
 * exactly once (replayed by the reaper, or failed by a drain, Release or
 * Restore); `replaying` is 1 while the reaper applies an unlinked entry, and a
 * Fence or a drain waits for it. Lock order: svc->fence.lock is taken alone
 * (never with park_lock or a store lock held).
 */
#include "service_internal.h"

#include "log.h"
#include "psc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FENCE_LEASE_DEFAULT_MS 10000
#define FENCE_LEASE_MAX_MS 60000
#define FENCE_MAX_PARKED_BYTES ((size_t)512 << 20) /* a bound, far above what workers keep in flight */

typedef struct fenced {
    struct fenced *next;
    psc_rpc_call_t *call;
    svc_apply_iov_fn iov_fn; /* one of the two, by how the method takes its request */
    svc_apply_fn fn;
    size_t len;
    uint8_t req[]; /* the request's bytes, copied */
} fenced_t;

void svc_fence_init(svc_fence_t *f)
{
    memset(f, 0, sizeof *f);
    pthread_mutex_init(&f->lock, NULL);
    pthread_cond_init(&f->cond, NULL);
    f->state = SVC_FENCE_OPEN;
}

void svc_fence_deinit(svc_fence_t *f)
{
    PSC_ASSERT(!f->head);
    pthread_mutex_destroy(&f->lock);
    pthread_cond_destroy(&f->cond);
}

static void wake_reaper(ps_service_t *svc)
{
    pthread_mutex_lock(&svc->reaper_lock);
    svc->reaper_kick = 1;
    pthread_cond_signal(&svc->reaper_cond);
    pthread_mutex_unlock(&svc->reaper_lock);
}

/* Parks a copy of the request (f->lock held, state HELD or RELEASING); 0, or
 * -1 when too much is parked already (the caller fails the call). */
static int park_locked(svc_fence_t *f, psc_rpc_call_t *call, const psc_iov_t *iov, int niov, size_t len,
                       svc_apply_iov_fn iov_fn, svc_apply_fn fn)
{
    if (f->bytes + len > FENCE_MAX_PARKED_BYTES) return -1;
    fenced_t *e = psc_xmalloc(sizeof *e + (len ? len : 1));
    e->next = NULL;
    e->call = call;
    e->iov_fn = iov_fn;
    e->fn = fn;
    e->len = len;
    size_t at = 0;
    for (int i = 0; i < niov && at < len; i++) {
        size_t k = PSC_MIN(iov[i].len, len - at);
        memcpy(e->req + at, iov[i].base, k);
        at += k;
    }
    PSC_ASSERT(at == len);
    if (f->tail)
        f->tail->next = e;
    else
        f->head = e;
    f->tail = e;
    f->n++;
    f->bytes += len;
    f->parked++;
    return 0;
}

static int enter(ps_service_t *svc, psc_rpc_call_t *call, const psc_iov_t *iov, int niov, size_t len,
                 svc_apply_iov_fn iov_fn, svc_apply_fn fn)
{
    svc_fence_t *f = &svc->fence;
    pthread_mutex_lock(&f->lock);
    if (f->state == SVC_FENCE_OPEN || f->state == SVC_FENCE_CLOSED) {
        f->applying++;
        pthread_mutex_unlock(&f->lock);
        return 1;
    }
    int rc = park_locked(f, call, iov, niov, len, iov_fn, fn);
    pthread_mutex_unlock(&f->lock);
    if (rc)
        psc_rpc_fail(call, PSC_RPC_UNAVAILABLE, "ps_server %d is fenced for a checkpoint with %zu MiB of pushes parked",
                     svc->task_index, FENCE_MAX_PARKED_BYTES >> 20);
    return 0;
}

int svc_fence_enter_iov(ps_service_t *svc, psc_rpc_call_t *call, const psc_iov_t *iov, int niov, size_t len,
                        svc_apply_iov_fn fn)
{
    return enter(svc, call, iov, niov, len, fn, NULL);
}

int svc_fence_enter(ps_service_t *svc, psc_rpc_call_t *call, const uint8_t *req, size_t len, svc_apply_fn fn)
{
    psc_iov_t one = {req, len};
    return enter(svc, call, &one, 1, len, NULL, fn);
}

void svc_fence_leave(ps_service_t *svc)
{
    svc_fence_t *f = &svc->fence;
    pthread_mutex_lock(&f->lock);
    PSC_ASSERT(f->applying > 0);
    if (--f->applying == 0) pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->lock);
}

/* HELD -> RELEASING (f->lock held): the reaper replays what was parked. */
static void release_locked(ps_service_t *svc, const char *why, double *held_ms, uint32_t *parked)
{
    svc_fence_t *f = &svc->fence;
    double ms = (psc_now() - f->since) * 1000;
    f->state = SVC_FENCE_RELEASING;
    f->saving = 0;
    if (held_ms) *held_ms = ms;
    if (parked) *parked = f->parked;
    PSC_INFO("fence %llu released (%s) after %.1f ms: %u push%s parked, applied now in arrival order",
             (unsigned long long)f->id, why, ms, f->parked, f->parked == 1 ? "" : "es");
}

void svc_fence_tick(ps_service_t *svc, double now)
{
    svc_fence_t *f = &svc->fence;
    pthread_mutex_lock(&f->lock);
    if (f->state == SVC_FENCE_HELD && !f->saving && now >= f->expires) {
        PSC_WARN("fence %llu: its lease of %.0f ms ran out without an Unfence (the chief died?): releasing it",
                 (unsigned long long)f->id, f->lease_ms);
        release_locked(svc, "lease expired", NULL, NULL);
    }
    while (f->state == SVC_FENCE_RELEASING) {
        fenced_t *e = f->head;
        if (!e) {
            f->state = SVC_FENCE_OPEN;
            break;
        }
        f->head = e->next;
        if (!f->head) f->tail = NULL;
        f->n--;
        f->bytes -= e->len;
        f->replaying = 1;
        pthread_mutex_unlock(&f->lock);
        if (e->iov_fn) {
            psc_iov_t one = {e->req, e->len};
            e->iov_fn(e->call, &one, 1, e->len, svc);
        } else {
            e->fn(e->call, e->req, e->len, svc);
        }
        free(e);
        pthread_mutex_lock(&f->lock);
        f->replaying = 0;
        pthread_cond_broadcast(&f->cond);
    }
    pthread_mutex_unlock(&f->lock);
}

void svc_fence_fail_all(ps_service_t *svc, int closing, int code, const char *msg)
{
    svc_fence_t *f = &svc->fence;
    pthread_mutex_lock(&f->lock);
    if (f->state == SVC_FENCE_HELD)
        PSC_INFO("fence %llu dropped after %.1f ms: ps_server %d %s", (unsigned long long)f->id,
                 (psc_now() - f->since) * 1000, svc->task_index, msg);
    f->state = closing ? SVC_FENCE_CLOSED : SVC_FENCE_OPEN;
    f->saving = 0;
    fenced_t *all = f->head;
    f->head = f->tail = NULL;
    f->n = 0;
    f->bytes = 0;
    while (f->replaying) pthread_cond_wait(&f->cond, &f->lock); /* its call is answered when this returns */
    pthread_mutex_unlock(&f->lock);
    while (all) {
        fenced_t *next = all->next;
        psc_rpc_fail(all->call, code, "ps_server %d %s", svc->task_index, msg);
        free(all);
        all = next;
    }
}

int svc_fence_pin(ps_service_t *svc, uint64_t id, char *err, size_t errlen)
{
    svc_fence_t *f = &svc->fence;
    int rc = 0;
    pthread_mutex_lock(&f->lock);
    if (f->state != SVC_FENCE_HELD || f->id != id)
        rc = psc_seterr(err, errlen, PSC_ESTALE, "fence %llu is not held on ps_server %d (its lease ran out?)",
                        (unsigned long long)id, svc->task_index);
    else
        f->saving = 1;
    pthread_mutex_unlock(&f->lock);
    return rc;
}

double svc_fence_unpin(ps_service_t *svc, uint64_t id)
{
    svc_fence_t *f = &svc->fence;
    double ms = -1;
    pthread_mutex_lock(&f->lock);
    if (f->state == SVC_FENCE_HELD && f->id == id) release_locked(svc, "shard copied", &ms, NULL);
    pthread_mutex_unlock(&f->lock);
    if (ms >= 0) wake_reaper(svc);
    return ms;
}

/* ---- the RPCs ---- */

void svc_h_fence(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg)
{
    ps_service_t *svc = arg;
    svc_fence_t *f = &svc->fence;
    Psc__FenceRequest *r = psc__fence_request__unpack(NULL, len, req);
    if (!r) return svc_fail_undecodable(svc, call, "FenceRequest", len);
    char have[17] = "";
    store_is_ready(svc->store, have);
    if (!have[0] || strcmp(have, r->job_id) != 0) {
        psc_rpc_fail(call, PSC_RPC_FAILED_PRECONDITION, "ps_server %d holds %s%s, not job %s", svc->task_index,
                     have[0] ? "job " : "no model", have, r->job_id);
        goto out;
    }
    if (store_get_sync(svc->store, NULL)) {
        psc_rpc_fail(call, PSC_RPC_FAILED_PRECONDITION,
                     "ps_server %d trains in sync mode: its checkpoints are taken at a step boundary, not behind a "
                     "fence",
                     svc->task_index);
        goto out;
    }
    uint32_t lease = r->lease_ms ? PSC_MIN(r->lease_ms, (uint32_t)FENCE_LEASE_MAX_MS) : FENCE_LEASE_DEFAULT_MS;
    double now = psc_now();
    pthread_mutex_lock(&f->lock);
    if (f->state == SVC_FENCE_CLOSED) {
        pthread_mutex_unlock(&f->lock);
        psc_rpc_fail(call, PSC_RPC_UNAVAILABLE, "ps_server %d is shutting down", svc->task_index);
        goto out;
    }
    if (f->state == SVC_FENCE_HELD && f->id != r->id)
        PSC_WARN("fence %llu (held %.0f ms) taken over by fence %llu", (unsigned long long)f->id,
                 (now - f->since) * 1000, (unsigned long long)r->id);
    if (f->state != SVC_FENCE_HELD) {
        f->since = now;
        f->parked = 0;
    }
    f->state = SVC_FENCE_HELD;
    f->id = r->id;
    f->lease_ms = lease;
    f->expires = now + lease / 1000.0;
    /* the requests admitted before the fence finish applying (no RPC in
     * between: a bounded wait); nothing is applied after this */
    while (f->applying || f->replaying) pthread_cond_wait(&f->cond, &f->lock);
    pthread_mutex_unlock(&f->lock);
    Psc__FenceReply rep = PSC__FENCE_REPLY__INIT;
    int64_t step = 0;
    rep.has_global_step = store_step_get(svc->store, &step);
    rep.global_step = step;
    uint8_t buf[32];
    psc_rpc_reply(call, buf, psc__fence_reply__pack(&rep, buf));
out:
    psc__fence_request__free_unpacked(r, NULL);
}

void svc_h_unfence(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg)
{
    ps_service_t *svc = arg;
    svc_fence_t *f = &svc->fence;
    Psc__UnfenceRequest *r = psc__unfence_request__unpack(NULL, len, req);
    if (!r) return svc_fail_undecodable(svc, call, "UnfenceRequest", len);
    Psc__UnfenceReply rep = PSC__UNFENCE_REPLY__INIT;
    pthread_mutex_lock(&f->lock);
    /* a Save copying under it releases it itself when done */
    if (f->state == SVC_FENCE_HELD && !f->saving && (r->id == 0 || r->id == f->id)) {
        release_locked(svc, "Unfence", &rep.held_ms, &rep.parked);
        rep.released = 1;
    }
    pthread_mutex_unlock(&f->lock);
    psc__unfence_request__free_unpacked(r, NULL);
    if (rep.released) wake_reaper(svc);
    uint8_t buf[32];
    psc_rpc_reply(call, buf, psc__unfence_reply__pack(&rep, buf));
}
