/* service_fence.c — the checkpoint fence of an asynchronous PS: the admission
 * of every request that changes the model, holding and releasing the fence
 * (the Fence and Unfence handlers in service_ckpt.c call it), and the replay
 * of what parked behind it.
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
 * (never with park_lock or a store lock held). The replay calls the handlers'
 * apply functions through the pointers parked with each entry, and this file
 * is reached by the reaper through the tick pointer service.c handed it: it
 * calls only down (service_park.c's kick, service_reply.c).
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
        svc_fail(svc, call, PSC_EUNAVAILABLE, "ps_server %d is fenced for a checkpoint with %zu MiB of pushes parked",
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

void svc_fence_fail_all(ps_service_t *svc, int closing, int rc, const char *msg)
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
        svc_fail(svc, all->call, rc, "ps_server %d %s", svc->task_index, msg);
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
    if (f->state == SVC_FENCE_HELD && f->id == id) release_locked(svc, "the cut taken", &ms, NULL);
    pthread_mutex_unlock(&f->lock);
    if (ms >= 0) svc_reaper_kick(svc);
    return ms;
}

int svc_fence_hold(ps_service_t *svc, uint64_t id, uint32_t lease_ms)
{
    svc_fence_t *f = &svc->fence;
    uint32_t lease = lease_ms ? PSC_MIN(lease_ms, (uint32_t)FENCE_LEASE_MAX_MS) : FENCE_LEASE_DEFAULT_MS;
    double now = psc_now();
    pthread_mutex_lock(&f->lock);
    if (f->state == SVC_FENCE_CLOSED) {
        pthread_mutex_unlock(&f->lock);
        return PSC_EUNAVAILABLE;
    }
    if (f->state == SVC_FENCE_HELD && f->id != id)
        PSC_WARN("fence %llu (held %.0f ms) taken over by fence %llu", (unsigned long long)f->id,
                 (now - f->since) * 1000, (unsigned long long)id);
    if (f->state != SVC_FENCE_HELD) {
        f->since = now;
        f->parked = 0;
    }
    f->state = SVC_FENCE_HELD;
    f->id = id;
    f->lease_ms = lease;
    f->expires = now + lease / 1000.0;
    /* the requests admitted before the fence finish applying (no RPC in
     * between: a bounded wait); nothing is applied after this */
    while (f->applying || f->replaying) pthread_cond_wait(&f->cond, &f->lock);
    pthread_mutex_unlock(&f->lock);
    return 0;
}

int svc_fence_release(ps_service_t *svc, uint64_t id, double *held_ms, uint32_t *parked)
{
    svc_fence_t *f = &svc->fence;
    int released = 0;
    pthread_mutex_lock(&f->lock);
    /* a Save copying under it releases it itself when done */
    if (f->state == SVC_FENCE_HELD && !f->saving && (id == 0 || id == f->id)) {
        release_locked(svc, "Unfence", held_ms, parked);
        released = 1;
    }
    pthread_mutex_unlock(&f->lock);
    if (released) svc_reaper_kick(svc);
    return released;
}
