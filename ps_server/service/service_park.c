/* service_park.c — sync-replica parking and the reaper thread.
 *
 * Design. A reply that needs a step that is not applied yet (a sync
 * PushPull, a Pull with min_step, a sync Step) is parked: its call goes on a
 * list (without a reply buffer) and the handler returns, so no server thread
 * waits.
 * Whoever applies a step (a handler whose gradient completed it, or the
 * reaper's timeout rule) then completes the parked replies of that chunk
 * whose step has come, reading each chunk once into a reply buffer that all of
 * that chunk's replies share. The reaper thread wakes every 50 ms (or when kicked):
 * it runs the tick it was started with (service.c hands it the fence's
 * replay), applies the steps whose timeout expired (store_sync_tick, and
 * store_sparse_sync_tick for the sparse table parts), keeps
 * the replicas with a parked reply present, logs presence changes, and fails
 * replies parked far longer than any step can take.
 *
 * Invariants: a parked entry is completed by whoever unlinks it from the list
 * under park_lock, so exactly once, and nobody else touches it while it is on
 * the list (its parker included); a handler that parks checks the step under
 * park_lock before linking the entry, which closes the race with an apply
 * since the store call. No reply is sent with park_lock held.
 */
#include "service_internal.h"

#include "log.h"
#include "psc.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Answers a parked Step with the current global_step (its step has come). */
static void complete_step(ps_service_t *svc, svc_parked_t *p)
{
    int64_t step = 0;
    store_step_get(svc->store, &step);
    Psc__StepReply rep = PSC__STEP_REPLY__INIT;
    rep.global_step = step;
    uint8_t buf[32];
    psc_rpc_reply(p->call, buf, psc__step_reply__pack(&rep, buf));
    free(p);
}

/* Answers p and the entries in `same` (a list of parked reads of the same
 * name, offset, len and total) with one read of the chunk's current state:
 * the message is built once, in p's reply buffer, and every other reply
 * shares that buffer. So the replicas waiting for a sync step cost one
 * chunk-sized buffer between them, not one each. */
static void complete_chunk(ps_service_t *svc, svc_parked_t *p, svc_parked_t *same)
{
    char err[512];
    int64_t step = 0, version = 0;
    size_t bound = svc_reply_header_bound(p->name);
    uint8_t *buf = psc_rpc_reply_alloc(p->call, bound + p->len);
    int rc = store_chunk_read(svc->store, p->name, p->offset, p->len, buf + bound, &step, &version, err, sizeof err);
    size_t start = 0;
    if (rc == 0) start = svc_chunk_header_front(buf, bound, p->name, p->offset, p->total, version, p->len, step, 0);
    while (same) {
        svc_parked_t *q = same;
        same = q->next;
        if (rc) {
            svc_fail(svc, q->call, rc, "%s", err);
        } else {
            ps_metrics_add_pull_bytes(svc->metrics, q->len); /* before the reply, as everywhere */
            psc_rpc_reply_send_shared(q->call, p->call, start, bound - start + p->len);
        }
        free(q);
    }
    if (rc) {
        svc_fail(svc, p->call, rc, "%s", err);
    } else {
        ps_metrics_add_pull_bytes(svc->metrics, p->len);
        psc_rpc_reply_send_range(p->call, start, bound - start + p->len);
    }
    free(p);
}

/* Answers every entry of the list `ready` (their steps have come). */
static void complete_ready(ps_service_t *svc, svc_parked_t *ready)
{
    while (ready) {
        svc_parked_t *p = ready;
        ready = p->next;
        if (p->kind == SVC_PARK_STEP) {
            complete_step(svc, p);
            continue;
        }
        svc_parked_t *same = NULL; /* the other reads of p's bytes */
        for (svc_parked_t **pp = &ready; *pp;) {
            svc_parked_t *q = *pp;
            if (q->kind == SVC_PARK_CHUNK && q->offset == p->offset && q->len == p->len && q->total == p->total &&
                !strcmp(q->name, p->name)) {
                *pp = q->next;
                q->next = same;
                same = q;
            } else {
                pp = &q->next;
            }
        }
        complete_chunk(svc, p, same);
    }
}

/* The current step of what p waits for. */
static int64_t parked_current_step(ps_service_t *svc, const svc_parked_t *p)
{
    int64_t step = -1;
    if (p->kind == SVC_PARK_STEP)
        store_step_get(svc->store, &step);
    else
        store_chunk_read(svc->store, p->name, p->offset, 0, NULL, &step, NULL, NULL, 0);
    return step;
}

/* name NULL: every entry whose step has come (any chunk). */
void svc_park_wake(ps_service_t *svc, enum svc_park_kind kind, const char *name, uint64_t offset)
{
    svc_parked_t *ready = NULL;
    pthread_mutex_lock(&svc->park_lock);
    for (svc_parked_t **pp = &svc->parked; *pp;) {
        svc_parked_t *p = *pp;
        int match =
            !name || (p->kind == kind && (kind == SVC_PARK_STEP || (p->offset == offset && !strcmp(p->name, name))));
        if (match && parked_current_step(svc, p) >= p->min_step) {
            *pp = p->next;
            p->next = ready;
            ready = p;
        } else {
            pp = &p->next;
        }
    }
    pthread_mutex_unlock(&svc->park_lock);
    complete_ready(svc, ready);
}

void svc_park(ps_service_t *svc, svc_parked_t *p)
{
    p->since = psc_now();
    pthread_mutex_lock(&svc->park_lock);
    if (svc->draining) {
        pthread_mutex_unlock(&svc->park_lock);
        svc_fail(svc, p->call, PSC_EUNAVAILABLE, "ps_server %d is shutting down", svc->task_index);
        free(p);
        return;
    }
    /* The step may have been applied between the store call and now: then
     * answer at once. The check is made under park_lock, so an apply after it
     * finds p on the list in its wake. Once p is on the list this thread does
     * not touch it: another thread's wake may complete and free it at once. */
    if (parked_current_step(svc, p) >= p->min_step) {
        pthread_mutex_unlock(&svc->park_lock);
        p->next = NULL;
        complete_ready(svc, p);
        return;
    }
    p->next = svc->parked;
    svc->parked = p;
    pthread_mutex_unlock(&svc->park_lock);
}

void svc_fail_parked(ps_service_t *svc, int draining, int rc, const char *msg)
{
    pthread_mutex_lock(&svc->park_lock);
    if (draining) svc->draining = 1;
    svc_parked_t *all = svc->parked;
    svc->parked = NULL;
    pthread_mutex_unlock(&svc->park_lock);
    while (all) {
        svc_parked_t *next = all->next;
        svc_fail(svc, all->call, rc, "ps_server %d %s", svc->task_index, msg);
        free(all);
        all = next;
    }
}

/* ---- the reaper ---- */

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
    svc_park_wake(svc, strcmp(name, "global_step") == 0 ? SVC_PARK_STEP : SVC_PARK_CHUNK, name, offset);
}

/* Fails the replies parked longer than limit seconds: they wait for a step no one will apply. */
static void fail_expired(ps_service_t *svc, double now, double limit)
{
    svc_parked_t *expired = NULL;
    pthread_mutex_lock(&svc->park_lock);
    for (svc_parked_t **pp = &svc->parked; *pp;) {
        svc_parked_t *p = *pp;
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
        svc_parked_t *next = expired->next;
        svc_fail(svc, expired->call, PSC_ETIMEOUT, "%s: step %lld was not applied within %.0f s", expired->name,
                 (long long)expired->min_step - 1, limit);
        free(expired);
        expired = next;
    }
}

/* One round of the sync-replica timeouts (a sync PS only). */
static void sync_tick(ps_service_t *svc)
{
    store_sync_cfg_t cfg;
    if (!store_get_sync(svc->store, &cfg)) return;
    double now = psc_now();
    /* a replica whose reply is parked here is alive and waiting for its
     * step: it stays present, however long the step takes */
    uint32_t waiting[64];
    int nwaiting = 0;
    pthread_mutex_lock(&svc->park_lock);
    for (svc_parked_t *p = svc->parked; p && nwaiting < (int)PSC_ARRAY_LEN(waiting); p = p->next)
        if (p->worker != UINT32_MAX) waiting[nwaiting++] = p->worker;
    pthread_mutex_unlock(&svc->park_lock);
    for (int i = 0; i < nwaiting; i++) store_sync_seen(svc->store, waiting[i], now);
    store_sync_tick(svc->store, now, on_tick_apply, svc);
    store_sparse_sync_tick(svc->store, now); /* table parts: nothing parks on them */
    uint32_t needed = 0;
    uint32_t present = (uint32_t)store_sync_present(svc->store, now, &needed);
    if (present != svc->last_present) {
        PSC_INFO("sync: %u of %d replicas present; a step now needs %u gradient%s", present, cfg.total_num_replicas,
                 needed, needed == 1 ? "" : "s");
        svc->last_present = present;
    }
    fail_expired(svc, now, cfg.timeout_secs * 2 + 10);
}

static void *reaper_main(void *arg)
{
    ps_service_t *svc = arg;
    pthread_mutex_lock(&svc->reaper_lock);
    while (!svc->reaper_stop) {
        struct timespec ts;
        psc_abstime_in(&ts, 0.05);
        if (!svc->reaper_kick) pthread_cond_timedwait(&svc->reaper_cond, &svc->reaper_lock, &ts);
        svc->reaper_kick = 0;
        if (svc->reaper_stop) break;
        pthread_mutex_unlock(&svc->reaper_lock);
        if (svc->reaper_tick) svc->reaper_tick(svc, psc_now()); /* async checkpoints: the fence's replay */
        sync_tick(svc);
        pthread_mutex_lock(&svc->reaper_lock);
    }
    pthread_mutex_unlock(&svc->reaper_lock);
    return NULL;
}

int svc_reaper_start(ps_service_t *svc, void (*tick)(ps_service_t *svc, double now), char *err, size_t errlen)
{
    PSC_ASSERT(!svc->reaper_running);
    svc->reaper_tick = tick;
    int rc = psc_thread_start(&svc->reaper, reaper_main, svc, "reaper", err, errlen);
    if (rc == 0) svc->reaper_running = 1;
    return rc;
}

void svc_reaper_stop(ps_service_t *svc)
{
    if (!svc->reaper_running) return;
    pthread_mutex_lock(&svc->reaper_lock);
    svc->reaper_stop = 1;
    pthread_cond_signal(&svc->reaper_cond);
    pthread_mutex_unlock(&svc->reaper_lock);
    pthread_join(svc->reaper, NULL);
    svc->reaper_running = 0;
}

void svc_reaper_kick(ps_service_t *svc)
{
    pthread_mutex_lock(&svc->reaper_lock);
    svc->reaper_kick = 1;
    pthread_cond_signal(&svc->reaper_cond);
    pthread_mutex_unlock(&svc->reaper_lock);
}
