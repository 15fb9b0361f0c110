/* store_sync.c — the store's sync-replica mode (store.h: store_set_sync,
 * store_push_sync, store_step_sync, store_sync_tick, presence): per-chunk
 * accumulators, the stale / current / ahead rules of sync.h, the timeout rule
 * and replica presence. The locks and their order are described at the top of
 * store.c; the shared types are in store_internal.h.
 *
 * Design: each trainable variable gets v->acc[nchunks], their sum buffers
 * carved from one slab the size of the variable (v->acc_sum); global_step one
 * accumulator without data. They are allocated outside the locks, then
 * published under s->lock (write) and v->lock. Chunk k's accumulator step
 * counts the sync steps of that chunk (skips included); global_step's follows
 * its value, raised to it whenever the accumulator is empty. A sync push marks
 * its replica seen (presence_lock) before it takes v->lock, never both. */
#include "store_internal.h"

#include "bytes.h"

#include "optim.h"
#include "psc.h"
#include "sync.h"
#include "wire.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- sync-replica mode ---- */

static int sync_cfg_check(const store_sync_cfg_t *c, char *err, size_t errlen)
{
    if (!c) return psc_seterr(err, errlen, PSC_EINVAL, "sync: no config");
    if (c->replicas_to_aggregate < 1)
        return psc_seterr(err, errlen, PSC_EINVAL, "sync: replicas_to_aggregate %d must be >= 1",
                          c->replicas_to_aggregate);
    if (c->total_num_replicas < 1)
        return psc_seterr(err, errlen, PSC_EINVAL, "sync: total_num_replicas %d must be >= 1", c->total_num_replicas);
    if (!(c->timeout_secs > 0) || !isfinite(c->timeout_secs))
        return psc_seterr(err, errlen, PSC_EINVAL, "sync: timeout_secs %g must be finite and > 0", c->timeout_secs);
    return 0;
}

/* 0 when want equals the config in force, else PSC_EEXISTS naming the field. */
static int sync_cfg_compare(const store_sync_cfg_t *have, const store_sync_cfg_t *want, char *err, size_t errlen)
{
    if (want->replicas_to_aggregate != have->replicas_to_aggregate)
        return psc_seterr(err, errlen, PSC_EEXISTS, "sync mode is on with replicas_to_aggregate %d; refusing %d",
                          have->replicas_to_aggregate, want->replicas_to_aggregate);
    if (want->total_num_replicas != have->total_num_replicas)
        return psc_seterr(err, errlen, PSC_EEXISTS, "sync mode is on with total_num_replicas %d; refusing %d",
                          have->total_num_replicas, want->total_num_replicas);
    if (want->timeout_secs != have->timeout_secs)
        return psc_seterr(err, errlen, PSC_EEXISTS, "sync mode is on with timeout_secs %g; refusing %g",
                          have->timeout_secs, want->timeout_secs);
    return 0;
}

static int set_sync_fenced(store_t *s, const store_sync_cfg_t *cfg, char *err, size_t errlen)
{
    int rc = sync_cfg_check(cfg, err, errlen);
    if (rc) return store_reject(s, rc);

    /* The table is immutable once published: read it, then allocate unlocked. */
    pthread_rwlock_rdlock(&s->lock);
    int have_job = s->have_job, on = s->sync_on;
    store_sync_cfg_t cur = s->sync;
    store_var_t **vars = s->vars;
    int n = s->nvars;
    pthread_rwlock_unlock(&s->lock);
    if (!have_job)
        return store_reject(s, psc_seterr(err, errlen, PSC_ENOTFOUND, "sync: no variables created (no job created yet)"));
    if (on) {
        rc = sync_cfg_compare(&cur, cfg, err, errlen);
        return rc ? store_reject(s, rc) : 0;
    }

    sync_acc_t **acc = psc_xcalloc((size_t)(n ? n : 1), sizeof *acc);
    float **sums = psc_xcalloc((size_t)(n ? n : 1), sizeof *sums);
    double *seen = calloc((size_t)cfg->total_num_replicas, sizeof *seen);
    unsigned char *left = calloc((size_t)cfg->total_num_replicas, 1);
    uint64_t bytes = 0;
    int ok = seen && left;
    for (int i = 0; i < n && ok; i++) {
        store_var_t *v = vars[i];
        size_t nacc = v->is_step ? 1 : v->nchunks;
        ok = (acc[i] = calloc(nacc, sizeof *acc[i])) != NULL;
        if (!ok || v->is_step) continue;
        bytes += v->bytes;
        ok = (sums[i] = store_tensor_alloc(v->bytes)) != NULL;
        for (size_t k = 0; ok && k < nacc; k++) acc[i][k].sum = sums[i] + k * (PSC_CHUNK_BYTES / 4);
    }
    if (!ok) {
        rc = psc_seterr(err, errlen, PSC_ENOMEM,
                        "sync: cannot allocate the gradient accumulators (%" PRIu64 " bytes for %d variables)", bytes,
                        n);
    } else {
        pthread_rwlock_wrlock(&s->lock);
        if (s->sync_on) {
            rc = sync_cfg_compare(&s->sync, cfg, err, errlen); /* another call won the race */
        } else {
            for (int i = 0; i < n; i++) {
                pthread_rwlock_wrlock(&vars[i]->lock);
                vars[i]->acc = acc[i];
                vars[i]->acc_sum = sums[i];
                pthread_rwlock_unlock(&vars[i]->lock);
                acc[i] = NULL;
                sums[i] = NULL;
            }
            pthread_mutex_lock(&s->presence_lock);
            s->last_seen = seen;
            s->left = left;
            s->started = 0;
            pthread_mutex_unlock(&s->presence_lock);
            seen = NULL;
            left = NULL;
            s->sync = *cfg;
            s->sync_on = 1;
        }
        pthread_rwlock_unlock(&s->lock);
    }
    for (int i = 0; i < n; i++) {
        free(acc[i]);
        free(sums[i]);
    }
    free(acc);
    free(sums);
    free(seen);
    free(left);
    return rc ? store_reject(s, rc) : 0;
}

int store_set_sync(store_t *s, const store_sync_cfg_t *cfg, char *err, size_t errlen)
{
    fence_enter(s);
    int rc = set_sync_fenced(s, cfg, err, errlen);
    fence_leave(s);
    return rc;
}

int store_get_sync(store_t *s, store_sync_cfg_t *cfg)
{
    pthread_rwlock_rdlock(&s->lock);
    int on = s->sync_on;
    if (on && cfg) *cfg = s->sync;
    pthread_rwlock_unlock(&s->lock);
    return on;
}

/* ---- presence ----
 * A replica is present at `now` when it has not left and now - last_seen <
 * timeout (before the clock starts: when it has not left). Counting that is a
 * pass over the N replicas; a sync push needs the count, and each of the N
 * replicas pushes every chunk every step, so a pass per push made a step cost
 * O(N^2) on every PS. The count is cached instead (store_internal.h: pres_*)
 * with two bounds that make the cache exact: the oldest last_seen of a
 * present replica and the newest of an absent one. A later `now` keeps it
 * valid while the oldest present one is still present and the newest absent
 * one still absent (the predicate is monotone in now and last_seen); a
 * contribution moves its replica to present in O(1); anything else (WorkerDone,
 * the clock starting, a bound crossed) makes the next count a full pass. With
 * every replica pushing each step, a pass happens about once per timeout. */

/* A full pass at now: the count and the bounds. Caller holds presence_lock; the clock runs. */
static int presence_scan_locked(store_t *s, const store_sync_cfg_t *c, double now)
{
    int p = 0;
    double oldest = INFINITY, newest_gone = -INFINITY;
    for (int r = 0; r < c->total_num_replicas; r++) {
        if (s->left[r]) continue;
        double seen = s->last_seen[r];
        if (now - seen < c->timeout_secs) {
            p++;
            oldest = PSC_MIN(oldest, seen);
        } else {
            newest_gone = PSC_MAX(newest_gone, seen);
        }
    }
    s->pres_count = p;
    s->pres_oldest = oldest;
    s->pres_newest_gone = newest_gone;
    s->pres_valid = 1;
    s->pres_scans++;
    return p;
}

/* Replicas present at now; caller holds presence_lock. Before the first
 * contribution (the clock has not started) everyone who has not left is present. */
static int presence_count_locked(store_t *s, const store_sync_cfg_t *c, double now)
{
    if (!s->started) {
        int p = 0;
        for (int r = 0; r < c->total_num_replicas; r++) p += !s->left[r];
        return p;
    }
    if (s->pres_valid && !(now - s->pres_oldest >= c->timeout_secs) && now - s->pres_newest_gone >= c->timeout_secs)
        return s->pres_count;
    return presence_scan_locked(s, c, now);
}

/* Replica `worker` (< N, not checked) was seen at now, the clock running:
 * last_seen = max(last_seen, now), and the cache follows. Caller holds presence_lock. */
static void presence_seen_locked(store_t *s, uint32_t worker, double now)
{
    double old = s->last_seen[worker];
    if (!(now > old)) return; /* max: calls race to this lock with `now`s read before it */
    s->last_seen[worker] = now;
    if (!s->pres_valid || s->left[worker]) return;
    if (!(now > s->pres_newest_gone)) { /* cannot be classed by the bounds: count afresh */
        s->pres_valid = 0;
        return;
    }
    if (!(old >= s->pres_oldest)) s->pres_count++; /* it was absent (old <= pres_newest_gone) */
    s->pres_oldest = PSC_MIN(s->pres_oldest, now);
}

/* A sync call at `now`: marks `worker` seen (worker >= N: nobody, a tick),
 * starts the presence clock on the first contribution, and returns needed(now).
 * Ticks do not start the clock: the service ticks from the moment sync mode is
 * on, long before slow replicas send their first gradient, and before the first
 * contribution there is nothing a tick could apply anyway. Takes only
 * presence_lock (sync mode is on: the table is published). O(1) but for the
 * presence cache's occasional pass. */
uint32_t store_presence_touch(store_t *s, const store_sync_cfg_t *c, uint32_t worker, double now)
{
    pthread_mutex_lock(&s->presence_lock);
    if (!s->started && worker < (uint32_t)c->total_num_replicas) {
        s->started = 1;
        s->pres_valid = 0;
        for (int r = 0; r < c->total_num_replicas; r++) s->last_seen[r] = now;
    }
    if (worker < (uint32_t)c->total_num_replicas) presence_seen_locked(s, worker, now);
    int present = presence_count_locked(s, c, now);
    pthread_mutex_unlock(&s->presence_lock);
    return sync_needed(c->replicas_to_aggregate, c->total_num_replicas, present);
}

/* global_step's accumulator follows the value while it holds nothing (a
 * restore by store_assign makes older local steps stale). Caller holds v->lock. */
static void step_align_locked(store_var_t *v)
{
    if (v->is_step && v->acc[0].count == 0) sync_acc_skip_to(&v->acc[0], v->step);
}

/* Applies the mean of chunk k's accumulator like an async push of that chunk
 * (global_step: value += 1) and ends the step. Caller holds v->lock; sync mode.
 * Returns the number of contributions averaged. */
static uint32_t sync_apply_locked(store_t *s, const psc_optim_config_t *opt, store_var_t *v, size_t k,
                                  int by_timeout)
{
    sync_acc_t *a = &v->acc[k];
    uint32_t n_contrib = a->count;
    if (v->is_step) {
        sync_acc_mean(a, 0);
        if (v->step < INT64_MAX) v->step++;
        store_note_step_hint(s, v->step);
        v->version++;
        count(&s->sync_steps, 1);
    } else {
        size_t e0 = k * (PSC_CHUNK_BYTES / 4), n = psc_chunk_len(v->bytes, k) / 4;
        const float *g = sync_acc_mean(a, n); /* in the 64-byte aligned slab */
        int64_t t = ++v->t[k];
        optim_apply(opt, v->w + e0, v->slot[0] ? v->slot[0] + e0 : NULL, v->slot[1] ? v->slot[1] + e0 : NULL, g, n,
                    t);
        v->version++;
        count(&s->applied, 1);
    }
    if (by_timeout) count(&s->timeout_applies, 1);
    sync_acc_advance(a);
    return n_contrib;
}

/* One validated contribution to chunk k (grad: n floats at any alignment, or
 * NULL for global_step): the rules of sync.h. Caller holds v->lock. */
static void sync_contribute_locked(store_t *s, const psc_optim_config_t *opt, const store_sync_cfg_t *c,
                                   store_var_t *v, size_t k, const void *grad, size_t n, int64_t local_step,
                                   uint32_t cnt, uint32_t needed, double now, store_sync_result_t *res)
{
    sync_acc_t *a = &v->acc[k];
    step_align_locked(v);
    switch (sync_acc_check(a, local_step)) {
    case SYNC_STALE:
        res->stale = 1;
        count(&s->stale, 1);
        return;
    case SYNC_AHEAD:
        /* The chunk lags: finish its pending step as the timeout would have,
         * so no contribution is lost, then catch up with the sender. */
        if (a->count) {
            sync_apply_locked(s, opt, v, k, 1);
            res->lag_applied = 1;
        }
        sync_acc_skip_to(a, local_step);
        break;
    case SYNC_CURRENT: break;
    }
    sync_acc_add_bytes(a, grad, n, cnt, now);
    int late = 0;
    if (sync_acc_due(a, needed, now, c->timeout_secs, &late)) {
        sync_apply_locked(s, opt, v, k, late);
        res->applied = 1;
        res->by_timeout = late;
    }
}

/* Checks shared by sync pushes and steps: replica rank and count. */
static int sync_check_sender(const char *what, const store_sync_cfg_t *c, uint32_t worker, uint32_t cnt, char *err,
                             size_t errlen)
{
    if (worker >= (uint32_t)c->total_num_replicas)
        return psc_seterr(err, errlen, PSC_EINVAL, "%s: worker %u is not a replica (total_num_replicas is %d)", what,
                          worker, c->total_num_replicas);
    if (cnt == 0)
        return psc_seterr(err, errlen, PSC_EINVAL, "%s: count 0 (a contribution sums at least one batch)", what);
    return 0;
}

static int push_sync_fenced(store_t *s, const char *name, uint64_t offset, const void *grad, size_t len,
                            uint64_t total, int64_t local_step, uint32_t count_, uint32_t worker, double now,
                            void *updated, store_sync_result_t *res, char *err, size_t errlen)
{
    store_sync_result_t own;
    if (!res) res = &own;
    memset(res, 0, sizeof *res);
    store_view_t view;
    if (!name) return store_reject(s, psc_seterr(err, errlen, PSC_EINVAL, "sync push without a variable name"));
    int rc = store_view_get(s, name, 1, &view, err, errlen);
    if (rc) return store_reject(s, rc);
    store_var_t *v = view.var;
    if (!view.sync_on)
        return store_reject(s, psc_seterr(err, errlen, PSC_EUNSUPPORTED,
                                    "%s: sync push, but the job is asynchronous (no sync-replica config); use Push",
                                    v->name));
    if (v->is_step)
        return store_reject(s, psc_seterr(err, errlen, PSC_EINVAL, "%s is not trainable; use Step", v->name));
    if ((rc = sync_check_sender(v->name, &view.sync, worker, count_, err, errlen))) return store_reject(s, rc);
    if ((rc = store_check_chunk(v, "gradient", offset, grad, len, total, err, errlen))) return store_reject(s, rc);

    uint32_t needed = store_presence_touch(s, &view.sync, worker, now);
    size_t k = (size_t)(offset / PSC_CHUNK_BYTES);
    int copied = 0;
    pthread_rwlock_wrlock(&v->lock);
    sync_contribute_locked(s, &view.opt, &view.sync, v, k, grad, len / 4, local_step, count_, needed, now, res);
    res->step = v->acc[k].step;
    res->version = v->version;
    if (updated && (res->applied || res->stale)) {
        memcpy(updated, (const char *)v->w + offset, len);
        copied = 1;
    }
    pthread_rwlock_unlock(&v->lock);
    if (!res->stale) count(&s->bytes_pushed, len);
    if (copied) {
        count(&s->pulls, 1);
        count(&s->bytes_pulled, len);
    }
    return 0;
}

int store_push_sync(store_t *s, const char *name, uint64_t offset, const void *grad, size_t len, uint64_t total,
                    int64_t local_step, uint32_t count_, uint32_t worker, double now, void *updated,
                    store_sync_result_t *res, char *err, size_t errlen)
{
    fence_enter(s);
    int rc = push_sync_fenced(s, name, offset, grad, len, total, local_step, count_, worker, now, updated, res, err,
                              errlen);
    fence_leave(s);
    return rc;
}

static int step_sync_fenced(store_t *s, int64_t local_step, uint32_t count_, uint32_t worker, double now,
                            store_sync_result_t *res, char *err, size_t errlen)
{
    store_sync_result_t own;
    if (!res) res = &own;
    memset(res, 0, sizeof *res);
    pthread_rwlock_rdlock(&s->lock);
    store_var_t *v = s->step_var;
    int on = s->sync_on;
    store_sync_cfg_t cfg = s->sync;
    psc_optim_config_t opt = store_opt_now(s);
    pthread_rwlock_unlock(&s->lock);
    if (!on)
        return store_reject(s, psc_seterr(err, errlen, PSC_EUNSUPPORTED,
                                    "sync step, but the job is asynchronous (no sync-replica config); use an increment"));
    if (!v) return store_reject(s, psc_seterr(err, errlen, PSC_ENOTFOUND, "this PS holds no global_step"));
    int rc = sync_check_sender(v->name, &cfg, worker, count_, err, errlen);
    if (rc) return store_reject(s, rc);

    uint32_t needed = store_presence_touch(s, &cfg, worker, now);
    pthread_rwlock_wrlock(&v->lock);
    sync_contribute_locked(s, &opt, &cfg, v, 0, NULL, 0, local_step, count_, needed, now, res);
    res->step = v->step;
    res->version = v->version;
    pthread_rwlock_unlock(&v->lock);
    return 0;
}

int store_step_sync(store_t *s, int64_t local_step, uint32_t count_, uint32_t worker, double now,
                    store_sync_result_t *res, char *err, size_t errlen)
{
    fence_enter(s);
    int rc = step_sync_fenced(s, local_step, count_, worker, now, res, err, errlen);
    fence_leave(s);
    return rc;
}

static int store_chunk_read_unfenced(store_t *s, const char *name, uint64_t offset, size_t len, void *dst,
                                     int64_t *step,
                     int64_t *version, char *err, size_t errlen)
{
    store_view_t view;
    if (!name) return store_reject(s, psc_seterr(err, errlen, PSC_EINVAL, "chunk read without a variable name"));
    int rc = store_view_get(s, name, 1, &view, err, errlen);
    if (rc) return store_reject(s, rc);
    store_var_t *v = view.var;
    if (offset >= v->bytes || len > v->bytes - offset)
        return store_reject(s, psc_seterr(err, errlen, PSC_EINVAL,
                                    "%s: read of %zu bytes at offset %" PRIu64 " is outside its %" PRIu64 " bytes",
                                    v->name, len, offset, v->bytes));
    size_t k = v->is_step ? 0 : (size_t)(offset / PSC_CHUNK_BYTES);
    if (!v->is_step && len && (offset + len - 1) / PSC_CHUNK_BYTES != k)
        return store_reject(s, psc_seterr(err, errlen, PSC_EINVAL,
                                    "%s: read of %zu bytes at offset %" PRIu64 " crosses a wire chunk boundary",
                                    v->name, len, offset));
    int64_t st, ver;
    pthread_rwlock_wrlock(&v->lock);
    if (v->is_step) {
        st = v->step;
        if (dst) {
            unsigned char le[8];
            psc_le_put64(le, (uint64_t)v->step);
            memcpy(dst, le + offset, len);
        }
    } else {
        st = view.sync_on ? v->acc[k].step : v->t[k];
        if (dst) memcpy(dst, (const char *)v->w + offset, len);
    }
    ver = v->version;
    pthread_rwlock_unlock(&v->lock);
    if (step) *step = st;
    if (version) *version = ver;
    return 0;
}

int store_chunk_read(store_t *s, const char *name, uint64_t offset, size_t len, void *dst, int64_t *step,
                     int64_t *version, char *err, size_t errlen)
{
    fence_enter(s); /* store_reset frees what it reads */
    int rc = store_chunk_read_unfenced(s, name, offset, len, dst, step, version, err, errlen);
    fence_leave(s);
    return rc;
}

typedef struct tick_item {
    const char *name; /* the variable's: immutable until store_destroy */
    uint64_t offset;
    int64_t step;
    uint32_t count;
    int by_timeout;
} tick_item_t;

/* Applies what is due at `now`; the applied chunks go to *items_out (malloc'd,
 * *nitems_out of them; NULL when none). */
static void sync_tick_fenced(store_t *s, double now, tick_item_t **items_out, size_t *nitems_out)
{
    *items_out = NULL;
    *nitems_out = 0;
    pthread_rwlock_rdlock(&s->lock);
    int on = s->sync_on;
    store_sync_cfg_t cfg = s->sync;
    psc_optim_config_t opt = store_opt_now(s);
    store_var_t **vars = s->vars;
    int n = s->nvars;
    pthread_rwlock_unlock(&s->lock);
    if (!on) return;

    uint32_t needed = store_presence_touch(s, &cfg, UINT32_MAX, now);
    tick_item_t *items = NULL;
    size_t nitems = 0, cap = 0;
    for (int i = 0; i < n; i++) {
        store_var_t *v = vars[i];
        size_t nacc = v->is_step ? 1 : v->nchunks;
        for (size_t k = 0; k < nacc; k++) {
            int late = 0;
            pthread_rwlock_wrlock(&v->lock);
            step_align_locked(v);
            if (sync_acc_due(&v->acc[k], needed, now, cfg.timeout_secs, &late)) {
                uint32_t c = sync_apply_locked(s, &opt, v, k, late);
                if (nitems == cap) {
                    cap = cap ? 2 * cap : 16;
                    items = psc_xrealloc(items, cap * sizeof *items);
                }
                items[nitems++] = (tick_item_t){.name = v->name,
                                                .offset = psc_chunk_offset(k),
                                                .step = v->is_step ? v->step : v->acc[k].step,
                                                .count = c,
                                                .by_timeout = late};
            }
            pthread_rwlock_unlock(&v->lock);
        }
    }
    *items_out = items;
    *nitems_out = nitems;
}

int store_sync_tick(store_t *s, double now,
                    void (*fn)(void *arg, const char *name, uint64_t offset, int64_t step, uint32_t count,
                               int by_timeout),
                    void *arg)
{
    tick_item_t *items;
    size_t nitems;
    fence_enter(s);
    sync_tick_fenced(s, now, &items, &nitems);
    fence_leave(s);
    /* No lock held, the fence included: fn may call back into the store (wake
     * parked replies). */
    for (size_t j = 0; fn && j < nitems; j++)
        fn(arg, items[j].name, items[j].offset, items[j].step, items[j].count, items[j].by_timeout);
    free(items);
    return (int)nitems;
}

void store_sync_worker_left(store_t *s, uint32_t worker)
{
    fence_enter(s); /* presence is state an import resets */
    pthread_rwlock_rdlock(&s->lock);
    int on = s->sync_on;
    int N = s->sync.total_num_replicas;
    pthread_rwlock_unlock(&s->lock);
    if (on && worker < (uint32_t)N) {
        pthread_mutex_lock(&s->presence_lock);
        s->left[worker] = 1;
        s->pres_valid = 0;
        pthread_mutex_unlock(&s->presence_lock);
    }
    fence_leave(s);
}

void store_sync_seen(store_t *s, uint32_t worker, double now)
{
    fence_enter(s); /* presence is state an import resets */
    pthread_rwlock_rdlock(&s->lock);
    int on = s->sync_on;
    int N = s->sync.total_num_replicas;
    pthread_rwlock_unlock(&s->lock);
    if (on && worker < (uint32_t)N) {
        pthread_mutex_lock(&s->presence_lock);
        if (s->started) presence_seen_locked(s, worker, now);
        pthread_mutex_unlock(&s->presence_lock);
    }
    fence_leave(s);
}

int store_sync_present(store_t *s, double now, uint32_t *needed)
{
    pthread_rwlock_rdlock(&s->lock);
    int on = s->sync_on;
    store_sync_cfg_t cfg = s->sync;
    pthread_rwlock_unlock(&s->lock);
    if (!on) {
        if (needed) *needed = 0;
        return 0;
    }
    pthread_mutex_lock(&s->presence_lock);
    int present = presence_count_locked(s, &cfg, now);
    pthread_mutex_unlock(&s->presence_lock);
    if (needed) *needed = sync_needed(cfg.replicas_to_aggregate, cfg.total_num_replicas, present);
    return present;
}
