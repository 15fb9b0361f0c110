/* store.c — the PS's variable store: the table, create, assign, pull, push and
 * global_step. What the store does (life cycle, sync rules, checkpoint
 * tensors) is in store.h; store_sync.c holds the sync-replica mode,
 * store_ckpt.c export and import, store_internal.h the types they share.
 *
 * Design. One table of variables per job, created by store_create_vars and
 * never changed afterwards, so a variable's address and metadata are
 * immutable from publication until store_destroy; slow work (allocating and
 * initializing buffers) happens before the table is published. Locks:
 *   - s->fence (rwlock, writer-preferring): the push fence. Every function that
 *     writes tensor state holds it shared for its whole duration (the public
 *     function wraps a static *_fenced body); store_export and store_import's
 *     write phase hold it exclusively. Never taken recursively: store_sync_tick
 *     releases it before its callback, and emit must not update the store.
 *   - s->lock (rwlock): job id, ready flag, optimizer, the table pointers, the
 *     sync flag and config; held to look a name up or to publish, never while
 *     touching tensor data.
 *   - v->lock (rwlock per variable): its values, slots, version, t[], step and
 *     sync accumulators, for one chunk's memcpy or optimizer pass. The hot paths
 *     (an async push of chunk k, a pull) hold it shared plus the chunk locks
 *     v->ckl[] of their range, ascending, and bump/read version atomically.
 *   - s->presence_lock (mutex, leaf): the sync presence table.
 * Lock order: s->fence, then s->lock -> v->lock -> v->ckl[k] (ascending k), and
 * s->lock -> s->presence_lock; v->lock and presence_lock are never held
 * together. Counters are relaxed atomics.
 *
 * Invariants. Every request is validated completely before anything is
 * written, and every refusal goes through store_reject (the `rejected`
 * counter). A variable of `bytes` bytes has psc_chunk_count(bytes) wire
 * chunks; t[k] counts the updates of chunk k (Adam), version every chunk
 * applied or assigned. Sync mode, once on, stays on for the job, so a request
 * that saw it on may use v->acc under v->lock. Buffer sizes come from the wire:
 * an allocation that fails is PSC_ENOMEM, not an abort.
 */
#include "store.h"
#include "store_internal.h"

#include "nonfinite.h"

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

/* Checkpoints hold float32 tensors as raw host bytes and store.h documents
 * them as little-endian. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "psc checkpoints assume a little-endian host");

/* ---- helpers ---- */

int store_reject(store_t *s, int code) /* every refused request goes through here */
{
    count(&s->rejected, 1);
    return code;
}

void store_shape_str(char *buf, size_t len, int rank, const int64_t *shape)
{
    size_t at = (size_t)snprintf(buf, len, "(");
    for (int d = 0; d < rank && at < len; d++)
        at += (size_t)snprintf(buf + at, len - at, "%s%" PRId64, d ? ", " : "", shape[d]);
    if (at < len) snprintf(buf + at, len - at, rank == 1 ? ",)" : ")");
}

static size_t iov_bytes(const psc_iov_t *g, int ng)
{
    size_t n = 0;
    for (int i = 0; i < ng; i++) n += g[i].len;
    return n;
}

static int var_cmp(const void *a, const void *b)
{
    return strcmp((*(store_var_t *const *)a)->name, (*(store_var_t *const *)b)->name);
}

static int spec_cmp(const void *a, const void *b)
{
    return strcmp((*(const store_var_spec_t *const *)a)->name, (*(const store_var_spec_t *const *)b)->name);
}

static int name_cmp(const void *key, const void *elem)
{
    return strcmp(key, (*(store_var_t *const *)elem)->name);
}

/* Looks a name up; caller holds s->lock. */
static store_var_t *find_locked(store_t *s, const char *name)
{
    if (!s->nvars) return NULL;
    store_var_t **v = bsearch(name, s->sorted, (size_t)s->nvars, sizeof *s->sorted, name_cmp);
    return v ? *v : NULL;
}

static void var_free(store_var_t *v)
{
    if (!v) return;
    pthread_rwlock_destroy(&v->lock);
    if (v->ckl)
        for (size_t k = 0; k < v->nchunks; k++) pthread_mutex_destroy(&v->ckl[k]);
    free(v->ckl);
    free(v->w);
    free(v->slot[0]);
    free(v->slot[1]);
    free(v->t);
    free(v->acc);
    free(v->acc_sum);
    free(v);
}


/* Resolves name for a data request. need_ready: pull/push. Returns 0 or a code
 * (not yet counted as rejected). */
int store_view_get(store_t *s, const char *name, int need_ready, store_view_t *out, char *err, size_t errlen)
{
    int rc = 0;
    pthread_rwlock_rdlock(&s->lock);
    if (need_ready && !s->ready) {
        if (!s->have_job)
            rc = psc_seterr(err, errlen, PSC_ENOTREADY, "model not ready (no job created yet)");
        else
            rc = psc_seterr(err, errlen, PSC_ENOTREADY,
                            "model not ready (job %s has variables but is not marked ready yet)", s->job_id);
    } else if (!(out->var = find_locked(s, name))) {
        int table = 0;
        for (int i = 0; i < s->ntables && !table; i++) table = strcmp(sparse_table_config(s->tables[i].part)->name, name) == 0;
        if (table)
            rc = psc_seterr(err, errlen, PSC_EINVAL,
                            "\"%.*s\" is a sparse table: its rows travel as Batch SparsePull/SparsePush items, not as "
                            "dense chunks",
                            PSC_NAME_MAX, name);
        else if (!s->have_job)
            rc = psc_seterr(err, errlen, PSC_ENOTFOUND, "unknown variable \"%.*s\" (no job created yet)",
                            PSC_NAME_MAX, name);
        else
            rc = psc_seterr(err, errlen, PSC_ENOTFOUND, "unknown variable \"%.*s\"", PSC_NAME_MAX, name);
    } else {
        out->opt = store_opt_now(s);
        out->sync_on = s->sync_on;
        out->sync = s->sync;
    }
    pthread_rwlock_unlock(&s->lock);
    return rc;
}

/* ---- life cycle ---- */

void store_tables_free(store_table_t *t, int n)
{
    for (int i = 0; i < n; i++) {
        sparse_table_destroy(t[i].part);
        table_acc_t *a = t[i].acc;
        if (!a) continue;
        pthread_mutex_destroy(&a->lock);
        free(a->ids);
        free(a->rows);
        free(a->index);
        free(a);
    }
    free(t);
}

store_t *store_create(void)
{
    store_t *s = psc_xcalloc(1, sizeof *s);
    /* Writer-preferring: with readers first (glibc's default), a steady stream
     * of pushes from many threads could starve an export forever. */
    pthread_rwlockattr_t attr;
    PSC_ASSERT(pthread_rwlockattr_init(&attr) == 0);
    PSC_ASSERT(pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP) == 0);
    PSC_ASSERT(pthread_rwlock_init(&s->fence, &attr) == 0);
    pthread_rwlockattr_destroy(&attr);
    PSC_ASSERT(pthread_rwlock_init(&s->lock, NULL) == 0);
    PSC_ASSERT(pthread_mutex_init(&s->presence_lock, NULL) == 0);
    PSC_ASSERT(pthread_mutex_init(&s->rate_lock, NULL) == 0);
    PSC_ASSERT(pthread_mutex_init(&s->ckpt_lock, NULL) == 0); /* one checkpoint cut open at a time */
    atomic_init(&s->applied, 0);
    atomic_init(&s->rejected, 0);
    atomic_init(&s->pulls, 0);
    atomic_init(&s->bytes_pushed, 0);
    atomic_init(&s->bytes_pulled, 0);
    atomic_init(&s->stale, 0);
    atomic_init(&s->timeout_applies, 0);
    atomic_init(&s->sync_steps, 0);
    store_evictor_start(s);
    return s;
}

void store_destroy(store_t *s)
{
    if (!s) return;
    store_evictor_stop(s);
    for (int i = 0; i < s->nvars; i++) var_free(s->vars[i]);
    store_tables_free(s->tables, s->ntables);
    free(s->vars);
    free(s->sorted);
    free(s->last_seen);
    free(s->left);
    pthread_mutex_destroy(&s->presence_lock);
    pthread_mutex_destroy(&s->rate_lock);
    pthread_mutex_destroy(&s->ckpt_lock);
    pthread_rwlock_destroy(&s->lock);
    pthread_rwlock_destroy(&s->fence);
    free(s);
}

void store_reset(store_t *s)
{
    pthread_rwlock_wrlock(&s->fence); /* no request is inside the store now */
    pthread_rwlock_wrlock(&s->lock);
    store_var_t **vars = s->vars;
    int n = s->nvars;
    store_table_t *tables = s->tables;
    int ntables = s->ntables;
    s->tables = NULL;
    s->ntables = 0;
    s->tables_gen++;
    atomic_store(&s->step_hint, 0);
    free(s->sorted);
    s->vars = NULL;
    s->sorted = NULL;
    s->nvars = 0;
    s->step_var = NULL;
    s->have_job = 0;
    s->ready = 0;
    s->job_id[0] = '\0';
    s->sync_on = 0;
    memset(&s->sync, 0, sizeof s->sync);
    pthread_mutex_lock(&s->presence_lock);
    free(s->last_seen);
    free(s->left);
    s->last_seen = NULL;
    s->left = NULL;
    s->started = 0;
    pthread_mutex_unlock(&s->presence_lock);
    pthread_rwlock_unlock(&s->lock);
    pthread_rwlock_unlock(&s->fence);
    for (int i = 0; i < n; i++) var_free(vars[i]);
    free(vars);
    store_tables_free(tables, ntables);
}

/* ---- create ---- */

/* Checks one spec on its own. *bytes receives the value size. */
static int check_spec(const store_var_spec_t *v, uint64_t *bytes, char *err, size_t errlen)
{
    if (!v->name || !v->name[0]) return psc_seterr(err, errlen, PSC_EINVAL, "variable with an empty name");
    if (v->name[0] == '~') /* a checkpoint's own tensors ("~model") start so */
        return psc_seterr(err, errlen, PSC_EINVAL, "variable name \"%.40s\" starts with '~' (reserved)", v->name);
    size_t len = strlen(v->name);
    if (len > PSC_NAME_MAX)
        return psc_seterr(err, errlen, PSC_EINVAL, "variable name \"%.40s...\" is %zu characters (at most %d)",
                          v->name, len, PSC_NAME_MAX);
    if (v->rank < 0 || v->rank > PSC_MAX_RANK)
        return psc_seterr(err, errlen, PSC_EINVAL, "%s: rank %d is not in [0, %d]", v->name, v->rank, PSC_MAX_RANK);
    if (v->is_step) {
        if (v->rank != 0)
            return psc_seterr(err, errlen, PSC_EINVAL, "%s: a step counter must be a scalar (rank 0), got rank %d",
                              v->name, v->rank);
        *bytes = 8;
        return 0;
    }
    /* Values plus up to two slots must fit in memory arithmetic: cap elements
     * well below SIZE_MAX / (3 * 4). */
    const uint64_t max_numel = (uint64_t)1 << 40;
    uint64_t numel = 1;
    for (int d = 0; d < v->rank; d++) {
        if (v->shape[d] <= 0) {
            char sh[128];
            store_shape_str(sh, sizeof sh, v->rank, v->shape);
            return psc_seterr(err, errlen, PSC_EINVAL, "%s: shape %s has a dimension <= 0", v->name, sh);
        }
        if ((uint64_t)v->shape[d] > max_numel / numel)
            return psc_seterr(err, errlen, PSC_EINVAL, "%s: more than %" PRIu64 " elements", v->name, max_numel);
        numel *= (uint64_t)v->shape[d];
    }
    *bytes = numel * 4;
    return 0;
}

/* Compares a request with the existing table (caller holds s->lock, have_job).
 * Returns 0 when it declares exactly the existing variables. */
static int compare_existing(store_t *s, const char *job_id, const psc_optim_config_t *opt,
                            const store_var_spec_t *vars, int n, char *err, size_t errlen)
{
    if (strcmp(s->job_id, job_id) != 0)
        return psc_seterr(err, errlen, PSC_EEXISTS, "variables exist for job %s; refusing job %s", s->job_id,
                          job_id);
    if (!store_optim_same(opt, &s->opt))
        return psc_seterr(err, errlen, PSC_EMISMATCH, "job %s: optimizer settings differ from the existing ones",
                          job_id);
    for (int i = 0; i < n; i++) {
        store_var_t *v = find_locked(s, vars[i].name);
        if (!v)
            return psc_seterr(err, errlen, PSC_EMISMATCH, "%s: not among the %d existing variables of job %s",
                              vars[i].name, s->nvars, job_id);
        if (!vars[i].is_step != !v->is_step)
            return psc_seterr(err, errlen, PSC_EMISMATCH, "%s: %s, existing one %s", v->name,
                              vars[i].is_step ? "declared a step counter" : "declared trainable",
                              v->is_step ? "is a step counter" : "is trainable");
        int same = vars[i].rank == v->rank;
        for (int d = 0; same && d < v->rank; d++) same = vars[i].shape[d] == v->shape[d];
        if (!same) {
            char a[128], b[128];
            store_shape_str(a, sizeof a, vars[i].rank, vars[i].shape);
            store_shape_str(b, sizeof b, v->rank, v->shape);
            return psc_seterr(err, errlen, PSC_EMISMATCH, "%s: shape %s differs from existing %s", v->name, a, b);
        }
    }
    /* Names are distinct and all found, so equal counts mean equal sets. */
    if (n != s->nvars)
        return psc_seterr(err, errlen, PSC_EMISMATCH, "job %s: request declares %d variables, %d exist", job_id, n,
                          s->nvars);
    return 0;
}

/* 64-byte aligned tensor of `bytes`, or NULL: sizes come from a request, so
 * running out of memory is the request's fault (PSC_ENOMEM), not a reason to
 * abort the daemon as psc_xaligned would. */
float *store_tensor_alloc(uint64_t bytes)
{
    void *p = NULL;
    if (bytes > SIZE_MAX - 63) return NULL;
    size_t rounded = ((size_t)bytes + 63) & ~(size_t)63;
    return posix_memalign(&p, 64, rounded ? rounded : 64) == 0 ? p : NULL;
}

/* A new variable with zero values and initial slots, or NULL when its buffers
 * cannot be allocated. */
static store_var_t *var_new(const store_var_spec_t *spec, uint64_t bytes, const psc_optim_config_t *opt)
{
    store_var_t *v = psc_xcalloc(1, sizeof *v);
    snprintf(v->name, sizeof v->name, "%s", spec->name);
    v->rank = spec->rank;
    memcpy(v->shape, spec->shape, sizeof v->shape);
    for (int d = v->rank; d < PSC_MAX_RANK; d++) v->shape[d] = 0;
    v->is_step = spec->is_step ? 1 : 0;
    v->bytes = bytes;
    pthread_rwlockattr_t attr; /* writers first: a stream of pushes must not starve a Status or a sync step */
    PSC_ASSERT(pthread_rwlockattr_init(&attr) == 0);
    PSC_ASSERT(pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP) == 0);
    PSC_ASSERT(pthread_rwlock_init(&v->lock, &attr) == 0);
    pthread_rwlockattr_destroy(&attr);
    if (v->is_step) return v;
    v->numel = (size_t)(bytes / 4);
    v->nchunks = psc_chunk_count(bytes);
    v->ckl = psc_xcalloc(v->nchunks ? v->nchunks : 1, sizeof *v->ckl);
    for (size_t k = 0; k < v->nchunks; k++) PSC_ASSERT(pthread_mutex_init(&v->ckl[k], NULL) == 0);
    int ns = optim_slot_count(opt);
    v->w = store_tensor_alloc(bytes);
    for (int k = 0; k < ns; k++) v->slot[k] = store_tensor_alloc(bytes);
    v->t = calloc(v->nchunks, sizeof *v->t);
    if (!v->w || (ns >= 1 && !v->slot[0]) || (ns >= 2 && !v->slot[1]) || !v->t) {
        var_free(v);
        return NULL;
    }
    memset(v->w, 0, bytes);
    optim_init_slots(opt, v->slot[0], v->slot[1], v->numel);
    return v;
}

static int store_create_vars_unfenced(store_t *s, const char *job_id, const psc_optim_config_t *opt,
                                      const store_var_spec_t *vars,
                      int n, int *created, char *err, size_t errlen)
{
    int rc = 0;
    if (created) *created = 0;
    if (!job_id || !job_id[0] || strlen(job_id) > STORE_JOB_MAX)
        return store_reject(s, psc_seterr(err, errlen, PSC_EINVAL, "job id \"%.20s\" must be 1 to %d characters",
                                    job_id ? job_id : "", STORE_JOB_MAX));
    if (!opt) return store_reject(s, psc_seterr(err, errlen, PSC_EINVAL, "job %s: no optimizer", job_id));
    if (n < 0 || (n > 0 && !vars))
        return store_reject(s, psc_seterr(err, errlen, PSC_EINVAL, "job %s: bad variable count %d", job_id, n));
    if ((rc = store_check_optim(opt, err, errlen))) return store_reject(s, rc);

    /* Each spec on its own, then duplicates (via a sorted copy) and at most one
     * step counter. */
    uint64_t *bytes = psc_xcalloc((size_t)(n ? n : 1), sizeof *bytes);
    const store_var_spec_t **order = psc_xcalloc((size_t)(n ? n : 1), sizeof *order);
    store_var_t **made = NULL;
    int nstep = 0;
    for (int i = 0; i < n && !rc; i++) {
        rc = check_spec(&vars[i], &bytes[i], err, errlen);
        order[i] = &vars[i];
        nstep += vars[i].is_step != 0;
    }
    if (!rc && nstep > 1) rc = psc_seterr(err, errlen, PSC_EINVAL, "job %s: %d step counters declared", job_id, nstep);
    if (!rc && n > 1) qsort(order, (size_t)n, sizeof *order, spec_cmp);
    for (int i = 1; i < n && !rc; i++)
        if (strcmp(order[i - 1]->name, order[i]->name) == 0)
            rc = psc_seterr(err, errlen, PSC_EINVAL, "%s: declared twice", order[i]->name);
    if (rc) goto done;

    /* Already created? Compare without building anything. */
    pthread_rwlock_rdlock(&s->lock);
    int have = s->have_job;
    if (have) rc = compare_existing(s, job_id, opt, vars, n, err, errlen);
    pthread_rwlock_unlock(&s->lock);
    if (have) goto done;

    /* Build the table outside the lock (allocation and slot init are slow). */
    made = psc_xcalloc((size_t)(n ? n : 1), sizeof *made);
    for (int i = 0; i < n && !rc; i++)
        if (!(made[i] = var_new(&vars[i], bytes[i], opt)))
            rc = psc_seterr(err, errlen, PSC_ENOMEM,
                            "%s: cannot allocate %d x %" PRIu64 " bytes (value and optimizer slots)",
                            vars[i].name, 1 + optim_slot_count(opt), bytes[i]);
    if (rc) goto done;

    pthread_rwlock_wrlock(&s->lock);
    if (s->have_job) {
        /* Another create won the race: this one must now match it. */
        rc = compare_existing(s, job_id, opt, vars, n, err, errlen);
    } else {
        s->have_job = 1;
        snprintf(s->job_id, sizeof s->job_id, "%s", job_id);
        s->opt = *opt;
        s->opt.use_nesterov = opt->use_nesterov ? 1 : 0;
        s->vars = made;
        s->sorted = psc_xcalloc((size_t)(n ? n : 1), sizeof *s->sorted);
        memcpy(s->sorted, made, (size_t)n * sizeof *made);
        if (n) qsort(s->sorted, (size_t)n, sizeof *s->sorted, var_cmp);
        s->nvars = n;
        for (int i = 0; i < n; i++)
            if (made[i]->is_step) s->step_var = made[i];
        made = NULL;
        if (created) *created = 1;
    }
    pthread_rwlock_unlock(&s->lock);

done:
    if (made) {
        for (int i = 0; i < n; i++) var_free(made[i]);
        free(made);
    }
    free(order);
    free(bytes);
    return rc ? store_reject(s, rc) : 0;
}

int store_create_vars(store_t *s, const char *job_id, const psc_optim_config_t *opt, const store_var_spec_t *vars,
                      int n, int *created, char *err, size_t errlen)
{
    fence_enter(s); /* store_reset frees what it reads */
    int rc = store_create_vars_unfenced(s, job_id, opt, vars, n, created, err, errlen);
    fence_leave(s);
    return rc;
}

/* ---- assign, ready ---- */

/* Checks (offset, len, total) against a variable and its data (ng segments
 * holding len bytes) for non-finite values; the same rules for assign and
 * push. what: "assigned data" or "gradient". */
static int check_chunk_iov(const store_var_t *v, const char *what, uint64_t offset, const psc_iov_t *g, int ng,
                           size_t len, uint64_t total, char *err, size_t errlen)
{
    if (total != v->bytes)
        return psc_seterr(err, errlen, PSC_EMISMATCH, "%s: %s is %" PRIu64 " bytes, variable is %" PRIu64 " bytes",
                          v->name, what, total, v->bytes);
    if (!psc_chunk_valid(total, offset, len))
        return psc_seterr(err, errlen, PSC_EINVAL,
                          "%s: chunk of %zu bytes at offset %" PRIu64 " is not a wire chunk (chunks are %zu bytes)",
                          v->name, len, offset, PSC_CHUNK_BYTES);
    if (len && (!ng || iov_bytes(g, ng) != len))
        return psc_seterr(err, errlen, PSC_EINVAL, "%s: %s chunk has no data", v->name, what);
    if (!v->is_step) {
        size_t bad = nonfinite_first_iov(g, ng, len / 4);
        if (bad < len / 4)
            return psc_seterr(err, errlen, PSC_EINVAL, "%s: %s has a non-finite value at index %" PRIu64, v->name,
                              what, offset / 4 + bad);
    }
    return 0;
}

int store_check_chunk(const store_var_t *v, const char *what, uint64_t offset, const void *data, size_t len,
                       uint64_t total, char *err, size_t errlen)
{
    psc_iov_t one = {data, len};
    return check_chunk_iov(v, what, offset, &one, data ? 1 : 0, len, total, err, errlen);
}

static int assign_fenced(store_t *s, const char *name, uint64_t offset, const void *data, size_t len,
                         uint64_t total, char *err, size_t errlen)
{
    store_view_t view;
    if (!name) return store_reject(s, psc_seterr(err, errlen, PSC_EINVAL, "assign without a variable name"));
    int rc = store_view_get(s, name, 0, &view, err, errlen);
    if (rc) return store_reject(s, rc);
    store_var_t *v = view.var;
    if ((rc = store_check_chunk(v, "assigned data", offset, data, len, total, err, errlen))) return store_reject(s, rc);
    if (v->is_step) {
        int64_t value = (int64_t)psc_le_get64(data);
        if (value < 0)
            return store_reject(s, psc_seterr(err, errlen, PSC_EINVAL, "%s: value %" PRId64 " is negative", v->name,
                                        value));
        pthread_rwlock_wrlock(&v->lock);
        v->step = value;
        atomic_store(&s->step_hint, value); /* an assignment or restore may move it back */
        v->version++;
        pthread_rwlock_unlock(&v->lock);
        return 0;
    }
    pthread_rwlock_wrlock(&v->lock);
    memcpy((char *)v->w + offset, data, len);
    v->version++;
    pthread_rwlock_unlock(&v->lock);
    return 0;
}

int store_assign(store_t *s, const char *name, uint64_t offset, const void *data, size_t len, uint64_t total,
                 char *err, size_t errlen)
{
    fence_enter(s);
    int rc = assign_fenced(s, name, offset, data, len, total, err, errlen);
    fence_leave(s);
    return rc;
}

int store_set_ready(store_t *s, const char *job_id, char *err, size_t errlen)
{
    int rc = 0;
    pthread_rwlock_wrlock(&s->lock);
    if (!s->have_job)
        rc = psc_seterr(err, errlen, PSC_ENOTFOUND, "no variables created for job %s (no job created yet)",
                        job_id ? job_id : "(null)");
    else if (!job_id || strcmp(job_id, s->job_id) != 0)
        rc = psc_seterr(err, errlen, PSC_ENOTFOUND, "no variables created for job %s (variables are for job %s)",
                        job_id ? job_id : "(null)", s->job_id);
    else
        s->ready = 1;
    pthread_rwlock_unlock(&s->lock);
    return rc ? store_reject(s, rc) : 0;
}

int store_is_ready(store_t *s, char *job_id)
{
    pthread_rwlock_rdlock(&s->lock);
    int ready = s->ready;
    if (job_id) snprintf(job_id, STORE_JOB_MAX + 1, "%s", s->job_id);
    pthread_rwlock_unlock(&s->lock);
    return ready;
}

/* ---- pull, push ---- */

/* The checks of a pull (name, ready, range within one chunk's length);
 * *var gets the variable. Returns 0 or a code, not yet counted as rejected. */
static int pull_check(store_t *s, const char *name, uint64_t offset, size_t len, store_var_t **var, char *err,
                      size_t errlen)
{
    store_view_t view;
    if (!name) return psc_seterr(err, errlen, PSC_EINVAL, "pull without a variable name");
    int rc = store_view_get(s, name, 1, &view, err, errlen);
    if (rc) return rc;
    store_var_t *v = view.var;
    /* Any byte range within one wire chunk: one lock hold copies it whole. */
    if (offset > v->bytes || len > v->bytes - offset)
        return psc_seterr(err, errlen, PSC_EINVAL,
                          "%s: pull of %zu bytes at offset %" PRIu64 " is outside its %" PRIu64 " bytes", v->name,
                          len, offset, v->bytes);
    if (len > PSC_CHUNK_BYTES)
        return psc_seterr(err, errlen, PSC_EINVAL, "%s: pull of %zu bytes exceeds the %zu-byte chunk", v->name, len,
                          PSC_CHUNK_BYTES);
    *var = v;
    return 0;
}

static int store_pull_unfenced(store_t *s, const char *name, uint64_t offset, size_t len, void *dst,
                               int64_t *version, char *err,
               size_t errlen)
{
    store_var_t *v;
    int rc = pull_check(s, name, offset, len, &v, err, errlen);
    if (rc) return store_reject(s, rc);
    if (len && !dst) return store_reject(s, psc_seterr(err, errlen, PSC_EINVAL, "%s: pull into NULL", v->name));
    int64_t ver;
    pthread_rwlock_rdlock(&v->lock); /* global_step's writers hold it exclusive */
    if (v->is_step) {
        unsigned char le[8];
        psc_le_put64(le, (uint64_t)v->step);
        memcpy(dst, le + offset, len);
    } else if (len) {
        size_t k0 = (size_t)(offset / PSC_CHUNK_BYTES), k1 = (size_t)((offset + len - 1) / PSC_CHUNK_BYTES);
        for (size_t k = k0; k <= k1; k++) pthread_mutex_lock(&v->ckl[k]); /* ascending: no deadlock */
        memcpy(dst, (const char *)v->w + offset, len);
        for (size_t k = k0; k <= k1; k++) pthread_mutex_unlock(&v->ckl[k]);
    }
    ver = __atomic_load_n(&v->version, __ATOMIC_RELAXED);
    pthread_rwlock_unlock(&v->lock);
    if (version) *version = ver;
    count(&s->pulls, 1);
    count(&s->bytes_pulled, len);
    return 0;
}

int store_pull(store_t *s, const char *name, uint64_t offset, size_t len, void *dst, int64_t *version, char *err,
               size_t errlen)
{
    fence_enter(s); /* store_reset frees what it reads */
    int rc = store_pull_unfenced(s, name, offset, len, dst, version, err, errlen);
    fence_leave(s);
    return rc;
}

int store_pull_check(store_t *s, const char *name, uint64_t offset, size_t len, char *err, size_t errlen)
{
    store_var_t *v;
    fence_enter(s);
    int rc = pull_check(s, name, offset, len, &v, err, errlen);
    fence_leave(s);
    return rc ? store_reject(s, rc) : 0;
}

/* The checks of an asynchronous push (name, ready, trainable, wire chunk,
 * finite values) of a gradient in ng segments; the view of the variable in
 * *view. Returns 0 or a code, not yet counted as rejected. */
static int push_check(store_t *s, const char *name, uint64_t offset, const psc_iov_t *g, int ng, size_t len,
                      uint64_t total, store_view_t *view, char *err, size_t errlen)
{
    if (!name) return psc_seterr(err, errlen, PSC_EINVAL, "push without a variable name");
    int rc = store_view_get(s, name, 1, view, err, errlen);
    if (rc) return rc;
    store_var_t *v = view->var;
    if (v->is_step) return psc_seterr(err, errlen, PSC_EINVAL, "%s is not trainable; use Step", v->name);
    return check_chunk_iov(v, "gradient", offset, g, ng, len, total, err, errlen);
}

int store_push_check(store_t *s, const char *name, uint64_t offset, const void *grad, size_t len, uint64_t total,
                     char *err, size_t errlen)
{
    store_view_t view;
    psc_iov_t one = {grad, len};
    fence_enter(s);
    int rc = push_check(s, name, offset, &one, grad ? 1 : 0, len, total, &view, err, errlen);
    fence_leave(s);
    return rc ? store_reject(s, rc) : 0;
}

static int push_fenced(store_t *s, const char *name, uint64_t offset, const psc_iov_t *g, int ng, size_t len,
                       uint64_t total, void *updated, int64_t *version, char *err, size_t errlen)
{
    store_view_t view;
    int rc = push_check(s, name, offset, g, ng, len, total, &view, err, errlen);
    if (rc) return store_reject(s, rc);
    store_var_t *v = view.var;

    size_t e0 = (size_t)(offset / 4), n = len / 4, k = (size_t)(offset / PSC_CHUNK_BYTES);
    float *w = v->w + e0;
    float *s0 = v->slot[0] ? v->slot[0] + e0 : NULL, *s1 = v->slot[1] ? v->slot[1] + e0 : NULL;
    int64_t ver;
    /* shared + chunk k's lock: pushes of other chunks of this variable apply at the same time */
    pthread_rwlock_rdlock(&v->lock);
    pthread_mutex_lock(&v->ckl[k]);
    int64_t t = ++v->t[k];
    optim_apply_iov(&view.opt, w, s0, s1, g, ng, n, t); /* any alignment, straight from the segments */
    ver = __atomic_add_fetch(&v->version, 1, __ATOMIC_RELAXED);
    if (updated) memcpy(updated, w, len);
    pthread_mutex_unlock(&v->ckl[k]);
    pthread_rwlock_unlock(&v->lock);
    if (version) *version = ver;
    count(&s->applied, 1);
    count(&s->bytes_pushed, len);
    if (updated) {
        count(&s->pulls, 1);
        count(&s->bytes_pulled, len);
    }
    return 0;
}

int store_push_iov(store_t *s, const char *name, uint64_t offset, const psc_iov_t *g, int ng, size_t len,
                   uint64_t total, void *updated, int64_t *version, char *err, size_t errlen)
{
    fence_enter(s);
    int rc = push_fenced(s, name, offset, g, ng, len, total, updated, version, err, errlen);
    fence_leave(s);
    return rc;
}

int store_push(store_t *s, const char *name, uint64_t offset, const void *grad, size_t len, uint64_t total,
               void *updated, int64_t *version, char *err, size_t errlen)
{
    psc_iov_t one = {grad, len};
    return store_push_iov(s, name, offset, &one, grad ? 1 : 0, len, total, updated, version, err, errlen);
}

/* ---- global_step ---- */

static int step_add_fenced(store_t *s, int64_t inc, int64_t *value, char *err, size_t errlen)
{
    pthread_rwlock_rdlock(&s->lock);
    store_var_t *v = s->step_var;
    pthread_rwlock_unlock(&s->lock);
    if (!v) return store_reject(s, psc_seterr(err, errlen, PSC_ENOTFOUND, "this PS holds no global_step"));
    if (inc < 0)
        return store_reject(s, psc_seterr(err, errlen, PSC_EINVAL, "%s: increment %" PRId64 " is negative", v->name, inc));
    int rc = 0;
    pthread_rwlock_wrlock(&v->lock);
    if (inc > INT64_MAX - v->step) {
        rc = psc_seterr(err, errlen, PSC_EINVAL, "%s: %" PRId64 " + %" PRId64 " overflows", v->name, v->step, inc);
    } else if (inc > 0) {
        v->step += inc;
        v->version++;
    }
    int64_t now = v->step;
    pthread_rwlock_unlock(&v->lock);
    if (rc) return store_reject(s, rc);
    store_note_step_hint(s, now);
    if (value) *value = now;
    return 0;
}

void store_note_step(store_t *s, int64_t step) { store_note_step_hint(s, step); }

int store_step_add(store_t *s, int64_t inc, int64_t *value, char *err, size_t errlen)
{
    fence_enter(s);
    int rc = step_add_fenced(s, inc, value, err, errlen);
    fence_leave(s);
    return rc;
}

static int store_step_get_unfenced(store_t *s, int64_t *value)
{
    pthread_rwlock_rdlock(&s->lock);
    store_var_t *v = s->step_var;
    pthread_rwlock_unlock(&s->lock);
    if (!v) return 0;
    pthread_rwlock_wrlock(&v->lock);
    int64_t now = v->step;
    pthread_rwlock_unlock(&v->lock);
    if (value) *value = now;
    return 1;
}

int store_step_get(store_t *s, int64_t *value)
{
    fence_enter(s); /* store_reset frees what it reads */
    int rc = store_step_get_unfenced(s, value);
    fence_leave(s);
    return rc;
}

/* ---- introspection ---- */

int store_var_bytes(store_t *s, const char *name, uint64_t *bytes)
{
    pthread_rwlock_rdlock(&s->lock);
    store_var_t *v = find_locked(s, name);
    if (v) *bytes = v->bytes;
    pthread_rwlock_unlock(&s->lock);
    return v ? 0 : PSC_ENOTFOUND;
}

int store_list(store_t *s, store_var_info_t **out, int *n)
{
    pthread_rwlock_rdlock(&s->lock);
    int nv = s->nvars;
    store_var_info_t *info = psc_xcalloc((size_t)(nv ? nv : 1), sizeof *info);
    for (int i = 0; i < nv; i++) {
        store_var_t *v = s->vars[i];
        snprintf(info[i].name, sizeof info[i].name, "%s", v->name);
        info[i].rank = v->rank;
        memcpy(info[i].shape, v->shape, sizeof info[i].shape);
        info[i].bytes = v->bytes;
        info[i].is_step = v->is_step;
        pthread_rwlock_wrlock(&v->lock);
        info[i].version = v->version;
        pthread_rwlock_unlock(&v->lock);
    }
    pthread_rwlock_unlock(&s->lock);
    *out = info;
    *n = nv;
    return 0;
}

void store_get_stats(store_t *s, store_stats_t *st)
{
    st->applied = atomic_load_explicit(&s->applied, memory_order_relaxed);
    st->rejected = atomic_load_explicit(&s->rejected, memory_order_relaxed);
    st->pulls = atomic_load_explicit(&s->pulls, memory_order_relaxed);
    st->bytes_pushed = atomic_load_explicit(&s->bytes_pushed, memory_order_relaxed);
    st->bytes_pulled = atomic_load_explicit(&s->bytes_pulled, memory_order_relaxed);
    st->stale = atomic_load_explicit(&s->stale, memory_order_relaxed);
    st->timeout_applies = atomic_load_explicit(&s->timeout_applies, memory_order_relaxed);
    st->sync_steps = atomic_load_explicit(&s->sync_steps, memory_order_relaxed);
}

void store_count_rejected(store_t *s) { count(&s->rejected, 1); }
