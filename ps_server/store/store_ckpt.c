/* store_ckpt.c — a shard's checkpoint export and import (store.h:
 * store_export, store_import): one list of tensors (tensor_list_build: name,
 * variable, part, length) drives both, so they cannot disagree on names or
 * sizes. The export reads the tensors under the exclusive push fence without
 * v->lock (only readers run then; emit may itself pull), and there cuts the
 * table parts; their rows are copied after the fence is let go
 * (store_sparse_ckpt.c), one export at a time (s->ckpt_lock, taken first). The import
 * fetches and checks everything into its own buffers first, with no lock held
 * (the fetch reads RocksDB), then copies under the fence and each v->lock.
 * Floats are raw host-order bytes (little-endian hosts only, asserted in
 * store.c); int64 tensors are little-endian (bytes.h). */
#include "store_internal.h"

#include "bytes.h"

#include "optim.h"
#include "optim_pb.h"
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

/* ---- checkpoints ---- */

enum tensor_part { PART_VALUE, PART_SLOT0, PART_SLOT1, PART_T };

/* One tensor of a checkpoint of this shard. */
typedef struct store_tensor {
    store_var_t *var;
    enum tensor_part part;
    char name[PSC_TENSOR_NAME_MAX + 1];
    uint64_t len;  /* bytes */
    void *data;    /* store_import: the fetched bytes (owned), NULL before */
} store_tensor_t;

static const char *slot_suffix(const psc_optim_config_t *opt, int k)
{
    const char *n = psc_optim_slot_ckpt_name(opt, k);
    PSC_ASSERT(n && "slot without a checkpoint name");
    return n;
}

/* The tensors of a checkpoint of vars[0..n), in export order, into a malloc'd
 * array of *count. The table is immutable: no lock needed. */
static store_tensor_t *tensor_list_build(store_var_t *const *vars, int n, const psc_optim_config_t *opt,
                                         size_t *count)
{
    int ns = optim_slot_count(opt);
    size_t cap = (size_t)n * (size_t)(2 + ns), m = 0;
    store_tensor_t *list = psc_xcalloc(cap ? cap : 1, sizeof *list);
    for (int i = 0; i < n; i++) {
        store_var_t *v = vars[i];
        list[m++] = (store_tensor_t){.var = v, .part = PART_VALUE, .len = v->bytes};
        snprintf(list[m - 1].name, sizeof list[m - 1].name, "%s", v->name);
        if (v->is_step) continue;
        for (int k = 0; k < ns; k++) {
            list[m++] = (store_tensor_t){.var = v, .part = k == 0 ? PART_SLOT0 : PART_SLOT1, .len = v->bytes};
            snprintf(list[m - 1].name, sizeof list[m - 1].name, "%s/%s", v->name, slot_suffix(opt, k));
        }
        list[m++] = (store_tensor_t){.var = v, .part = PART_T, .len = (uint64_t)v->nchunks * 8};
        snprintf(list[m - 1].name, sizeof list[m - 1].name, "%s/.t", v->name);
    }
    *count = m;
    return list;
}

static void tensor_list_free(store_tensor_t *list, size_t count)
{
    for (size_t i = 0; list && i < count; i++) free(list[i].data);
    free(list);
}

int store_ckpt_tensor_bytes(store_t *s, const char *name, uint64_t *bytes)
{
    pthread_rwlock_rdlock(&s->lock);
    size_t count = 0;
    store_tensor_t *list = s->have_job ? tensor_list_build(s->vars, s->nvars, &s->opt, &count) : NULL;
    pthread_rwlock_unlock(&s->lock);
    int rc = PSC_ENOTFOUND;
    for (size_t i = 0; i < count && rc; i++)
        if (strcmp(list[i].name, name) == 0) {
            *bytes = list[i].len;
            rc = 0;
        }
    tensor_list_free(list, count);
    return rc;
}

int store_export(store_t *s, store_emit_fn emit, void *arg, int64_t sync_step, int64_t *step, char *err,
                 size_t errlen)
{
    return store_export_ex(s, emit, arg, NULL, 0, sync_step, step, NULL, err, errlen);
}

static int export_impl(store_t *s, store_emit_fn emit, void *arg, const store_rows_io_t *rows, uint64_t ckpt_id,
                       int64_t sync_step, int64_t *step, uint64_t *parent, int need_ready, char *err, size_t errlen);

int store_export_ex(store_t *s, store_emit_fn emit, void *arg, const store_rows_io_t *rows, uint64_t ckpt_id,
                    int64_t sync_step, int64_t *step, uint64_t *parent, char *err, size_t errlen)
{
    return export_impl(s, emit, arg, rows, ckpt_id, sync_step, step, parent, 1, err, errlen);
}

int store_export_created(store_t *s, store_emit_fn emit, void *arg, const store_rows_io_t *rows, uint64_t ckpt_id,
                         char *err, size_t errlen)
{
    return export_impl(s, emit, arg, rows, ckpt_id, -1, NULL, NULL, 0, err, errlen);
}

static int export_impl(store_t *s, store_emit_fn emit, void *arg, const store_rows_io_t *rows, uint64_t ckpt_id,
                       int64_t sync_step, int64_t *step, uint64_t *parent, int need_ready, char *err, size_t errlen)
{
    if (step) *step = -1;
    if (parent) *parent = 0;
    if (!emit) return store_reject(s, psc_seterr(err, errlen, PSC_EINVAL, "export without an emit function"));

    pthread_mutex_lock(&s->ckpt_lock); /* one cut open at a time: until the copy ends */
    pthread_rwlock_wrlock(&s->fence);
    pthread_rwlock_rdlock(&s->lock);
    int ready = s->ready, have_job = s->have_job;
    char job[STORE_JOB_MAX + 1];
    memcpy(job, s->job_id, sizeof job);
    psc_optim_config_t opt = s->opt;
    store_var_t **vars = s->vars;
    int n = s->nvars;
    store_var_t *sv = s->step_var;
    pthread_rwlock_unlock(&s->lock);

    int rc = 0;
    if (need_ready ? !ready : !have_job) {
        pthread_rwlock_unlock(&s->fence);
        pthread_mutex_unlock(&s->ckpt_lock);
        if (!have_job)
            rc = psc_seterr(err, errlen, PSC_ENOTREADY, "export: model not ready (no job created yet)");
        else
            rc = psc_seterr(err, errlen, PSC_ENOTREADY,
                            "export: model not ready (job %s has variables but is not marked ready yet)", job);
        return store_reject(s, rc);
    }
    /* Under the exclusive fence nothing writes tensors: read them in place. */
    for (int i = 0; sync_step >= 0 && i < n; i++) {
        store_var_t *v = vars[i];
        if (!v->acc) continue; /* async mode */
        int64_t at = v->is_step ? v->step : -1;
        for (size_t k = 0; !v->is_step && k < v->nchunks && at < 0; k++)
            if (v->acc[k].step != sync_step) at = v->acc[k].step;
        if (at >= 0 && at != sync_step) {
            pthread_rwlock_unlock(&s->fence);
            pthread_mutex_unlock(&s->ckpt_lock);
            return psc_seterr(err, errlen, PSC_ESTALE, "export: %s is at step %" PRId64 ", not at step boundary %" PRId64,
                              v->name, at, sync_step);
        }
    }
    if (sync_step >= 0 && (rc = store_table_accs_at(s, sync_step, err, errlen))) {
        pthread_rwlock_unlock(&s->fence);
        pthread_mutex_unlock(&s->ckpt_lock);
        return rc;
    }
    size_t count;
    store_tensor_t *list = tensor_list_build(vars, n, &opt, &count);
    size_t tmax = 1;
    for (int i = 0; i < n; i++) tmax = PSC_MAX(tmax, vars[i]->nchunks);
    unsigned char *le = psc_xmalloc(8 * tmax); /* global_step or one variable's t, little-endian */
    for (size_t j = 0; j < count && !rc; j++) {
        store_var_t *v = list[j].var;
        const void *data = NULL;
        switch (list[j].part) {
        case PART_VALUE:
            if (v->is_step) {
                psc_le_put64(le, (uint64_t)v->step);
                data = le;
            } else {
                data = v->w;
            }
            break;
        case PART_SLOT0: data = v->slot[0]; break;
        case PART_SLOT1: data = v->slot[1]; break;
        case PART_T:
            for (size_t k = 0; k < v->nchunks; k++) psc_le_put64(le + 8 * k, (uint64_t)v->t[k]);
            data = le;
            break;
        }
        rc = emit(arg, list[j].name, data, (size_t)list[j].len);
        if (rc)
            psc_seterr(err, errlen, rc, "export stopped at tensor \"%s\": %s (%d)", list[j].name,
                       rc < 0 ? psc_strerror(rc) : "emit failed", rc);
    }
    /* The tables: only the cut under the fence (O(shards)); their rows are
     * copied after it, while pushes go on (store_sparse_ckpt.c). */
    uint64_t from = 0;
    store_cut_t cut = {0};
    if (!rc) rc = store_tables_cut(s, rows, ckpt_id, &cut, &from, err, errlen);
    if (!rc && step && sv) *step = sv->step;
    pthread_rwlock_unlock(&s->fence);
    free(le);
    tensor_list_free(list, count);
    if (!rc && rows && rows->cut) rows->cut(rows->cut_arg); /* the cut is taken: e.g. the chief's fence may go */
    if (!rc) rc = store_tables_copy(s, rows, &cut, err, errlen);
    if (!rc && parent) *parent = from;
    if (rc && step) *step = -1;
    pthread_mutex_unlock(&s->ckpt_lock);
    return rc;
}

/* Checks one fetched tensor: its size, and that int64 counters are >= 0. */
static int tensor_check_fetched(const store_tensor_t *t, size_t len, char *err, size_t errlen)
{
    const store_var_t *v = t->var;
    if (len != t->len) {
        char sh[128];
        store_shape_str(sh, sizeof sh, v->rank, v->shape);
        return psc_seterr(err, errlen, PSC_EMISMATCH,
                          "checkpoint tensor \"%s\" is %zu bytes, expected %" PRIu64 " (variable %s, shape %s)",
                          t->name, len, t->len, v->name, sh);
    }
    const unsigned char *p = t->data;
    if (t->part == PART_VALUE && v->is_step && (int64_t)psc_le_get64(p) < 0)
        return psc_seterr(err, errlen, PSC_ECORRUPT, "checkpoint tensor \"%s\": global step %" PRId64 " is negative",
                          t->name, (int64_t)psc_le_get64(p));
    if (t->part == PART_T)
        for (size_t k = 0; k < v->nchunks; k++)
            if ((int64_t)psc_le_get64(p + 8 * k) < 0)
                return psc_seterr(err, errlen, PSC_ECORRUPT,
                                  "checkpoint tensor \"%s\": update count %" PRId64 " of chunk %zu is negative",
                                  t->name, (int64_t)psc_le_get64(p + 8 * k), k);
    return 0;
}

int store_import(store_t *s, store_fetch_fn fetch, void *arg, int64_t sync_step, char *err, size_t errlen)
{
    return store_import_ex(s, fetch, arg, NULL, sync_step, err, errlen);
}

int store_import_ex(store_t *s, store_fetch_fn fetch, void *arg, const store_rows_io_t *rows, int64_t sync_step,
                    char *err, size_t errlen)
{
    if (!fetch) return store_reject(s, psc_seterr(err, errlen, PSC_EINVAL, "import without a fetch function"));
    if (sync_step < 0)
        return store_reject(s, psc_seterr(err, errlen, PSC_EINVAL, "import: sync step %" PRId64 " is negative", sync_step));
    pthread_rwlock_rdlock(&s->lock);
    int have_job = s->have_job;
    psc_optim_config_t opt = s->opt;
    store_var_t **vars = s->vars;
    int n = s->nvars;
    pthread_rwlock_unlock(&s->lock);
    if (!have_job)
        return store_reject(s, psc_seterr(err, errlen, PSC_ENOTFOUND, "import: no variables created (no job created yet)"));

    /* Phase 1, no lock held (fetch reads the disk): everything in, everything checked. */
    size_t count;
    store_tensor_t *list = tensor_list_build(vars, n, &opt, &count);
    int rc = 0, refused = 0;
    for (size_t j = 0; j < count && !rc; j++) {
        size_t len = 0;
        rc = fetch(arg, list[j].name, &list[j].data, &len, err, errlen);
        if (rc == PSC_ENOTFOUND) {
            rc = psc_seterr(err, errlen, PSC_EMISMATCH, "checkpoint has no tensor \"%s\" (variable %s)", list[j].name,
                            list[j].var->name);
            refused = 1;
        } else if (!rc) {
            if (!list[j].data && len)
                rc = psc_seterr(err, errlen, PSC_EINVAL, "fetch of \"%s\" gave %zu bytes but no data", list[j].name,
                                len);
            else
                rc = tensor_check_fetched(&list[j], len, err, errlen);
            refused = rc != 0;
        }
    }
    sparse_table_t **parts = NULL;
    int nparts = 0;
    if (!rc) {
        rc = store_tables_import_read(s, rows, &parts, &nparts, err, errlen);
        refused = rc == PSC_EMISMATCH || rc == PSC_EINVAL || rc == PSC_ECORRUPT;
    }
    if (rc) {
        tensor_list_free(list, count);
        return refused ? store_reject(s, rc) : rc;
    }

    /* Phase 2, under the exclusive fence: nothing can fail any more. */
    pthread_rwlock_wrlock(&s->fence);
    pthread_rwlock_rdlock(&s->lock); /* sync mode cannot change: store_set_sync holds the fence */
    int sync_on = s->sync_on;
    int N = s->sync.total_num_replicas;
    pthread_rwlock_unlock(&s->lock);
    for (size_t j = 0; j < count; j++) {
        const store_tensor_t *t = &list[j];
        store_var_t *v = t->var;
        const unsigned char *p = t->data;
        /* A variable's tensors are adjacent: one v->lock hold restores all of
         * them, so a pull or chunk read sees the variable wholly old or new. */
        if (j == 0 || list[j - 1].var != v) pthread_rwlock_wrlock(&v->lock);
        switch (t->part) {
        case PART_VALUE:
            if (v->is_step) {
                v->step = (int64_t)psc_le_get64(p);
                atomic_store(&s->step_hint, v->step);
            } else
                memcpy(v->w, p, t->len);
            v->version++;
            if (sync_on && v->is_step) v->acc[0] = (sync_acc_t){.step = v->step};
            break;
        case PART_SLOT0: memcpy(v->slot[0], p, t->len); break;
        case PART_SLOT1: memcpy(v->slot[1], p, t->len); break;
        case PART_T:
            for (size_t k = 0; k < v->nchunks; k++) v->t[k] = (int64_t)psc_le_get64(p + 8 * k);
            /* A restore may move the steps backwards: set, not sync_acc_skip_to. */
            for (size_t k = 0; sync_on && k < v->nchunks; k++)
                v->acc[k] = (sync_acc_t){.step = sync_step, .sum = v->acc[k].sum};
            break;
        }
        if (j + 1 == count || list[j + 1].var != v) pthread_rwlock_unlock(&v->lock);
    }
    store_tables_import_swap(s, parts, nparts);
    if (sync_on) store_table_accs_reset(s, sync_step);
    if (sync_on) {
        pthread_mutex_lock(&s->presence_lock);
        s->started = 0;
        memset(s->last_seen, 0, (size_t)N * sizeof *s->last_seen);
        memset(s->left, 0, (size_t)N);
        pthread_mutex_unlock(&s->presence_lock);
    }
    pthread_rwlock_wrlock(&s->lock);
    s->ready = 1;
    pthread_rwlock_unlock(&s->lock);
    pthread_rwlock_unlock(&s->fence);
    tensor_list_free(list, count);
    store_tables_parts_free(parts, nparts); /* the replaced ones */
    return 0;
}
