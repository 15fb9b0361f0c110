/* store_sparse_sync.c — sparse tables in sync-replica mode (store.h:
 * store_sparse_push_sync, store_sparse_pull_sync, store_sparse_sync_tick):
 * TensorFlow's SparseConditionalAccumulator under SyncReplicasOptimizer's
 * rules.
 *
 * Each table part has one accumulator (table_acc_t, store_internal.h) for
 * its current step, made by the first sync request that touches the part. A
 * contribution (a replica's rows for `local_step`, the sum of `count`
 * batches' mean gradients) follows sync.h's stale / current / ahead rules
 * with the dense chunks' presence and `needed`; its rows are summed per id
 * into the step's sparse sum. When the step is due (needed contributions, or
 * the timeout with at least one), the mean — each id's summed row divided by
 * the number of batches, as TF's accumulator averages by its count — is
 * applied to those rows with the table's optimizer, once, and the step
 * advances. A step whose contributions carried no ids advances with nothing
 * to apply. A sparse pull with min_step completes the part's earlier steps
 * first (a pending one applied as its timeout would have, counted in
 * timeout_applies), so a replica that finished step s reads rows that hold
 * step s's update, on whichever PS the part lives.
 *
 * Locks: the fence (shared) for every call; s->lock to resolve the table and
 * to publish an accumulator; then the accumulator's mutex, held while its
 * rows are applied (sparse_table.c takes its shard locks inside). Layer: above
 * store_sparse.c and store_sync.c (presence), never called by them.
 */
#include "store.h"
#include "store_internal.h"

#include "bytes.h"
#include "psc.h"
#include "rng.h"
#include "sync.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The part's accumulator, made on first use (sync mode is on). */
static table_acc_t *acc_get(store_t *s, store_table_t *slot, int dim)
{
    pthread_rwlock_rdlock(&s->lock);
    table_acc_t *a = slot->acc;
    pthread_rwlock_unlock(&s->lock);
    if (a) return a;
    table_acc_t *made = psc_xcalloc(1, sizeof *made);
    PSC_ASSERT(pthread_mutex_init(&made->lock, NULL) == 0);
    made->dim = dim;
    pthread_rwlock_wrlock(&s->lock);
    if (!slot->acc) {
        slot->acc = made;
        made = NULL;
    }
    a = slot->acc;
    pthread_rwlock_unlock(&s->lock);
    if (made) {
        pthread_mutex_destroy(&made->lock);
        free(made);
    }
    return a;
}

static void acc_clear(table_acc_t *a)
{
    a->n = 0;
    if (a->index) memset(a->index, 0, a->icap * sizeof *a->index);
}

/* Room for `more` unique ids; 0 or PSC_ENOMEM (nothing changed). */
static int acc_reserve(table_acc_t *a, size_t more)
{
    size_t need = a->n + more, d = (size_t)a->dim;
    if (need > a->cap) {
        size_t cap = a->cap ? a->cap : 1024;
        while (cap < need) cap *= 2;
        int64_t *ids = realloc(a->ids, cap * sizeof *ids);
        if (!ids) return PSC_ENOMEM;
        a->ids = ids;
        float *rows = realloc(a->rows, cap * d * sizeof *rows);
        if (!rows) return PSC_ENOMEM;
        a->rows = rows;
        a->cap = cap;
    }
    if (2 * need > a->icap) { /* load at most 1/2: rebuild the index */
        size_t icap = a->icap ? a->icap : 2048;
        while (icap < 2 * need) icap *= 2;
        uint32_t *index = calloc(icap, sizeof *index);
        if (!index) return PSC_ENOMEM;
        for (size_t j = 0; j < a->n; j++) {
            size_t h = (size_t)psc_mix64((uint64_t)a->ids[j]) & (icap - 1);
            while (index[h]) h = (h + 1) & (icap - 1);
            index[h] = (uint32_t)(j + 1);
        }
        free(a->index);
        a->index = index;
        a->icap = icap;
    }
    return 0;
}

/* Adds n rows (ids and values little-endian, any alignment) to the sum. */
static void acc_add_rows(table_acc_t *a, const void *ids, const void *grads, size_t n)
{
    size_t d = (size_t)a->dim;
    const uint8_t *ip = ids, *gp = grads;
    for (size_t i = 0; i < n; i++) {
        int64_t id = (int64_t)psc_le_get64(ip + 8 * i);
        size_t h = (size_t)psc_mix64((uint64_t)id) & (a->icap - 1);
        while (a->index[h] && a->ids[a->index[h] - 1] != id) h = (h + 1) & (a->icap - 1);
        float *row;
        if (!a->index[h]) {
            a->ids[a->n] = id;
            a->index[h] = (uint32_t)(++a->n);
            row = a->rows + (a->n - 1) * d;
            memcpy(row, gp + 4 * d * i, 4 * d);
            continue;
        }
        row = a->rows + (a->index[h] - 1) * d;
        for (size_t j = 0; j < d; j++) {
            float g;
            memcpy(&g, gp + 4 * (d * i + j), 4);
            row[j] += g;
        }
    }
}

/* Applies the step's mean and ends the step. Caller holds a->lock. */
static int acc_apply(store_t *s, sparse_table_t *t, table_acc_t *a, double lr, int by_timeout)
{
    int rc = 0;
    if (a->n) {
        float inv = 1.0f / (float)a->a.count;
        size_t nf = a->n * (size_t)a->dim;
        for (size_t j = 0; j < nf; j++) a->rows[j] *= inv;
        store_table_clock(s, t);
        rc = sparse_table_push(t, a->ids, a->n, a->rows, lr, NULL);
        count(&s->applied, 1);
    }
    if (by_timeout) count(&s->timeout_applies, 1);
    sync_acc_advance(&a->a);
    acc_clear(a);
    return rc;
}

int store_sparse_push_sync(store_t *s, const char *table, const void *ids, size_t n, const void *grads, size_t glen,
                           int64_t local_step, uint32_t cnt, uint32_t worker, double now, store_sync_result_t *res,
                           char *err, size_t errlen)
{
    store_sync_result_t own;
    if (!res) res = &own;
    memset(res, 0, sizeof *res);
    sparse_table_t *t;
    store_table_t *slot;
    psc_optim_config_t opt;
    store_sync_cfg_t cfg;
    fence_enter(s);
    int rc = store_table_get(s, table, &t, &slot, &opt, NULL, err, errlen);
    if (!rc && !store_get_sync(s, &cfg))
        rc = psc_seterr(err, errlen, PSC_EUNSUPPORTED, "sparse table %s: sync push, but the job is asynchronous",
                        table);
    if (!rc && (worker >= (uint32_t)cfg.total_num_replicas || cnt == 0))
        rc = psc_seterr(err, errlen, PSC_EINVAL, "sparse table %s: worker %u (of %d replicas) or count %u invalid",
                        table, worker, cfg.total_num_replicas, cnt);
    if (!rc) rc = store_table_check_request(t, ids, n, grads, glen, err, errlen);
    if (rc) {
        fence_leave(s);
        return store_reject(s, rc);
    }
    table_acc_t *a = acc_get(s, slot, sparse_table_config(t)->dim);
    uint32_t needed = store_presence_touch(s, &cfg, worker, now);
    pthread_mutex_lock(&a->lock);
    switch (sync_acc_check(&a->a, local_step)) {
    case SYNC_STALE:
        res->stale = 1;
        count(&s->stale, 1);
        break;
    case SYNC_AHEAD: /* the part lags: finish its pending step as the timeout would */
        if (a->a.count) {
            rc = acc_apply(s, t, a, opt.learning_rate, 1);
            res->lag_applied = 1;
        }
        sync_acc_skip_to(&a->a, local_step);
        /* fall through */
    case SYNC_CURRENT:
        if (!rc && !(rc = acc_reserve(a, n))) {
            acc_add_rows(a, ids, grads, n);
            sync_acc_add(&a->a, NULL, 0, cnt, now);
            count(&s->bytes_pushed, glen);
            int late = 0;
            if (sync_acc_due(&a->a, needed, now, cfg.timeout_secs, &late)) {
                rc = acc_apply(s, t, a, opt.learning_rate, late);
                res->applied = 1;
                res->by_timeout = late;
            }
        }
        break;
    }
    res->step = a->a.step;
    pthread_mutex_unlock(&a->lock);
    fence_leave(s);
    if (rc) psc_seterr(err, errlen, rc, "sparse table %s: out of memory accumulating %zu rows", table, n);
    return rc ? store_reject(s, rc) : 0;
}

int store_sparse_pull_sync(store_t *s, const char *table, const void *ids, size_t n, int64_t min_step, float *out,
                           int64_t *step, char *err, size_t errlen)
{
    sparse_table_t *t;
    store_table_t *slot;
    psc_optim_config_t opt;
    fence_enter(s);
    int rc = store_table_get(s, table, &t, &slot, &opt, NULL, err, errlen);
    if (!rc) rc = store_table_check_request(t, ids, n, NULL, 0, err, errlen);
    if (rc) {
        fence_leave(s);
        return store_reject(s, rc);
    }
    table_acc_t *a = acc_get(s, slot, sparse_table_config(t)->dim);
    pthread_mutex_lock(&a->lock);
    if (a->a.step < min_step) {
        if (a->a.count) rc = acc_apply(s, t, a, opt.learning_rate, 1);
        sync_acc_skip_to(&a->a, min_step);
    }
    if (step) *step = a->a.step;
    if (!rc) {
        store_table_clock(s, t);
        rc = sparse_table_pull(t, ids, n, out);
    }
    pthread_mutex_unlock(&a->lock);
    if (!rc) {
        count(&s->pulls, 1);
        count(&s->bytes_pulled, (uint64_t)n * (uint64_t)sparse_table_config(t)->dim * 4);
    }
    fence_leave(s);
    if (rc) psc_seterr(err, errlen, rc, "sparse table %s: out of memory", table);
    return rc ? store_reject(s, rc) : 0;
}

int store_sparse_sync_tick(store_t *s, double now)
{
    store_sync_cfg_t cfg;
    int applied = 0;
    fence_enter(s);
    if (!store_get_sync(s, &cfg)) {
        fence_leave(s);
        return 0;
    }
    uint32_t needed = store_presence_touch(s, &cfg, UINT32_MAX, now);
    pthread_rwlock_rdlock(&s->lock);
    int n = s->ntables;
    store_table_t *tables = s->tables;
    pthread_rwlock_unlock(&s->lock);
    for (int i = 0; i < n; i++) {
        pthread_rwlock_rdlock(&s->lock);
        table_acc_t *a = tables[i].acc;
        sparse_table_t *t = tables[i].part;
        psc_optim_config_t opt = store_opt_at(&sparse_table_config(t)->opt, s);
        pthread_rwlock_unlock(&s->lock);
        if (!a) continue;
        int late = 0;
        pthread_mutex_lock(&a->lock);
        if (sync_acc_due(&a->a, needed, now, cfg.timeout_secs, &late)) {
            acc_apply(s, t, a, opt.learning_rate, late);
            applied++;
        }
        pthread_mutex_unlock(&a->lock);
    }
    fence_leave(s);
    return applied;
}

int store_table_accs_at(store_t *s, int64_t sync_step, char *err, size_t errlen)
{
    for (int i = 0; i < s->ntables; i++) {
        table_acc_t *a = s->tables[i].acc;
        if (!a) continue; /* no sync request ever touched it: nothing pending, nothing applied */
        int64_t step = a->a.step;
        if (step != sync_step)
            return psc_seterr(err, errlen, PSC_ESTALE, "sparse table %s is at sync step %" PRId64 ", not %" PRId64,
                              sparse_table_config(s->tables[i].part)->name, step, sync_step);
    }
    return 0;
}

void store_table_accs_reset(store_t *s, int64_t step)
{
    for (int i = 0; i < s->ntables; i++) {
        table_acc_t *a = s->tables[i].acc;
        if (!a) continue;
        a->a.count = 0;
        a->a.step = step;
        acc_clear(a);
    }
}
