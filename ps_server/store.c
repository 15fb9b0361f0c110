/* store.c — the PS's variable store (see store.h).
 *
 * Design. The store holds one table of variables, created once per job by
 * store_create_vars and never changed afterwards (a later create either matches
 * it or is refused), so a variable's address and metadata (name, shape, sizes,
 * buffers) are immutable from publication until store_destroy. Locks:
 *   - s->lock (rwlock) guards the store-wide state: job id, ready flag,
 *     optimizer, and the table pointers. It is held only to look a name up or
 *     to publish a table, never while touching tensor data.
 *   - v->lock (mutex, one per variable) guards the variable's contents: values,
 *     slots, version, per-chunk step counts, and global_step's value. It is held
 *     for the memcpy or optimizer pass of one chunk of one variable, nothing else.
 *   - counters (stats) are relaxed atomics.
 * No function holds two locks except s->lock (read) -> v->lock in store_list.
 *
 * Invariants. Every request is validated completely (state, name, sizes, chunk
 * alignment, finite values) before anything is written, so a refused request
 * changes nothing but the `rejected` counter, which every refusal bumps. Slow
 * work for a create (allocating and initializing buffers) happens before the
 * table is published under the write lock; a create whose buffers cannot be
 * allocated is refused with PSC_ENOMEM (sizes come from the wire, so this does
 * not abort like psc_xaligned). Values are float32 in 64-byte aligned buffers;
 * a variable of `bytes` bytes has psc_chunk_count(bytes) wire chunks, and chunk
 * k's step count t[k] is the number of pushes of that chunk applied so far
 * (Adam's bias correction). version counts every chunk applied or assigned
 * (and every global_step change).
 */
#include "store.h"

#include "optim.h"
#include "psc.h"
#include "wire.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STORE_NAME_MAX 111 /* store_var_info_t.name holds 112 bytes */
#define STORE_JOB_MAX 16

typedef struct store_var {
    char name[STORE_NAME_MAX + 1];
    int rank;
    int64_t shape[PSC_MAX_RANK];
    int is_step;
    uint64_t bytes;  /* value bytes: numel * 4, or 8 for global_step */
    size_t numel;    /* float elements (0 for global_step) */
    size_t nchunks;  /* wire chunks of the value */

    pthread_mutex_t lock; /* guards everything below */
    float *w;             /* (numel) values, 64-byte aligned */
    float *slot[2];       /* (numel) optimizer slots, NULL when unused */
    int64_t *t;           /* (nchunks) pushes applied per wire chunk */
    int64_t version;
    int64_t step;         /* global_step value (is_step only) */
} store_var_t;

struct store {
    pthread_rwlock_t lock; /* guards the fields up to `nvars` */
    int have_job;
    char job_id[STORE_JOB_MAX + 1];
    int ready;
    psc_optim_config_t opt;
    store_var_t **vars;   /* (nvars) in creation order; owned */
    store_var_t **sorted; /* (nvars) the same, sorted by name, for lookups */
    int nvars;
    store_var_t *step_var; /* the is_step variable or NULL */

    atomic_uint_fast64_t applied, rejected, pulls, bytes_pushed, bytes_pulled;
};

/* ---- helpers ---- */

static void count(atomic_uint_fast64_t *c, uint64_t n) { atomic_fetch_add_explicit(c, n, memory_order_relaxed); }

static int reject(store_t *s, int code) /* every refused request goes through here */
{
    count(&s->rejected, 1);
    return code;
}

static void put_le64(unsigned char *p, int64_t v)
{
    uint64_t u = (uint64_t)v;
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(u >> (8 * i));
}

static int64_t get_le64(const unsigned char *p)
{
    uint64_t u = 0;
    for (int i = 0; i < 8; i++) u |= (uint64_t)p[i] << (8 * i);
    return (int64_t)u;
}

static void shape_str(char *buf, size_t len, int rank, const int64_t *shape)
{
    size_t at = (size_t)snprintf(buf, len, "(");
    for (int d = 0; d < rank && at < len; d++)
        at += (size_t)snprintf(buf + at, len - at, "%s%" PRId64, d ? ", " : "", shape[d]);
    if (at < len) snprintf(buf + at, len - at, rank == 1 ? ",)" : ")");
}

/* Index of the first non-finite float among n at p (any alignment), or n. The
 * scan tests exponent bits on integer loads in 8 independent lanes (a form that
 * GCC -O2 vectorizes); only a chunk that has a bad value is scanned again to
 * find where. An exponent of all ones (Inf, NaN) plus one carries into bit 31;
 * no finite value's does. */
static size_t first_nonfinite(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint32_t lane[8] = {0}, bad = 0;
    size_t nb = n / 8;
    for (size_t i = 0; i < nb; i++) {
        uint32_t u[8];
        memcpy(u, b + 32 * i, 32);
        for (int j = 0; j < 8; j++) lane[j] |= (u[j] & 0x7f800000u) + 0x00800000u;
    }
    for (size_t i = 8 * nb; i < n; i++) {
        uint32_t u;
        memcpy(&u, b + 4 * i, 4);
        bad |= (u & 0x7f800000u) + 0x00800000u;
    }
    for (int j = 0; j < 8; j++) bad |= lane[j];
    if (!(bad & 0x80000000u)) return n;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, b + 4 * i, 4);
        if ((u & 0x7f800000u) == 0x7f800000u) return i;
    }
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
    pthread_mutex_destroy(&v->lock);
    free(v->w);
    free(v->slot[0]);
    free(v->slot[1]);
    free(v->t);
    free(v);
}

/* The state a data request (pull, push) sees: snapshot under the read lock. */
typedef struct store_view {
    store_var_t *var;
    psc_optim_config_t opt;
} store_view_t;

/* Resolves name for a data request. need_ready: pull/push. Returns 0 or a code
 * (not yet counted as rejected). */
static int view_get(store_t *s, const char *name, int need_ready, store_view_t *out, char *err, size_t errlen)
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
        if (!s->have_job)
            rc = psc_seterr(err, errlen, PSC_ENOTFOUND, "unknown variable \"%.*s\" (no job created yet)",
                            STORE_NAME_MAX, name);
        else
            rc = psc_seterr(err, errlen, PSC_ENOTFOUND, "unknown variable \"%.*s\"", STORE_NAME_MAX, name);
    } else {
        out->opt = s->opt;
    }
    pthread_rwlock_unlock(&s->lock);
    return rc;
}

/* ---- life cycle ---- */

store_t *store_create(void)
{
    store_t *s = psc_xcalloc(1, sizeof *s);
    PSC_ASSERT(pthread_rwlock_init(&s->lock, NULL) == 0);
    atomic_init(&s->applied, 0);
    atomic_init(&s->rejected, 0);
    atomic_init(&s->pulls, 0);
    atomic_init(&s->bytes_pushed, 0);
    atomic_init(&s->bytes_pulled, 0);
    return s;
}

void store_destroy(store_t *s)
{
    if (!s) return;
    for (int i = 0; i < s->nvars; i++) var_free(s->vars[i]);
    free(s->vars);
    free(s->sorted);
    pthread_rwlock_destroy(&s->lock);
    free(s);
}

/* ---- create ---- */

static int check_optim(const psc_optim_config_t *o, char *err, size_t errlen)
{
#define BAD(...) psc_seterr(err, errlen, PSC_EINVAL, __VA_ARGS__)
    if (o->kind < PSC_OPT_SGD || o->kind > PSC_OPT_RMSPROP) return BAD("unknown optimizer kind %d", (int)o->kind);
    if (!(o->learning_rate > 0) || !isfinite(o->learning_rate))
        return BAD("optimizer learning_rate %g must be finite and > 0", (double)o->learning_rate);
    switch (o->kind) {
    case PSC_OPT_SGD: break;
    case PSC_OPT_MOMENTUM:
    case PSC_OPT_RMSPROP:
        if (!(o->momentum >= 0) || !isfinite(o->momentum))
            return BAD("optimizer momentum %g must be finite and >= 0", (double)o->momentum);
        if (o->kind == PSC_OPT_RMSPROP) {
            if (!(o->decay >= 0 && o->decay <= 1))
                return BAD("rmsprop decay (rho) %g must be in [0, 1]", (double)o->decay);
            if (!(o->epsilon >= 0) || !isfinite(o->epsilon))
                return BAD("rmsprop epsilon %g must be finite and >= 0", (double)o->epsilon);
        }
        break;
    case PSC_OPT_ADAGRAD:
        if (!(o->initial_accumulator_value > 0) || !isfinite(o->initial_accumulator_value))
            return BAD("adagrad initial_accumulator_value %g must be finite and > 0",
                       (double)o->initial_accumulator_value);
        break;
    case PSC_OPT_ADAM:
        if (!(o->beta1 >= 0 && o->beta1 < 1)) return BAD("adam beta1 %g must be in [0, 1)", (double)o->beta1);
        if (!(o->beta2 >= 0 && o->beta2 < 1)) return BAD("adam beta2 %g must be in [0, 1)", (double)o->beta2);
        if (!(o->epsilon >= 0) || !isfinite(o->epsilon))
            return BAD("adam epsilon %g must be finite and >= 0", (double)o->epsilon);
        break;
    }
    return 0;
#undef BAD
}

/* Checks one spec on its own. *bytes receives the value size. */
static int check_spec(const store_var_spec_t *v, uint64_t *bytes, char *err, size_t errlen)
{
    if (!v->name || !v->name[0]) return psc_seterr(err, errlen, PSC_EINVAL, "variable with an empty name");
    size_t len = strlen(v->name);
    if (len > STORE_NAME_MAX)
        return psc_seterr(err, errlen, PSC_EINVAL, "variable name \"%.40s...\" is %zu characters (at most %d)",
                          v->name, len, STORE_NAME_MAX);
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
            shape_str(sh, sizeof sh, v->rank, v->shape);
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
    if (opt->kind != s->opt.kind || opt->learning_rate != s->opt.learning_rate || opt->momentum != s->opt.momentum ||
        !opt->use_nesterov != !s->opt.use_nesterov || opt->beta1 != s->opt.beta1 || opt->beta2 != s->opt.beta2 ||
        opt->epsilon != s->opt.epsilon || opt->initial_accumulator_value != s->opt.initial_accumulator_value ||
        opt->decay != s->opt.decay)
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
            shape_str(a, sizeof a, vars[i].rank, vars[i].shape);
            shape_str(b, sizeof b, v->rank, v->shape);
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
static float *tensor_alloc(uint64_t bytes)
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
    PSC_ASSERT(pthread_mutex_init(&v->lock, NULL) == 0);
    if (v->is_step) return v;
    v->numel = (size_t)(bytes / 4);
    v->nchunks = psc_chunk_count(bytes);
    int ns = optim_slot_count(opt);
    v->w = tensor_alloc(bytes);
    for (int k = 0; k < ns; k++) v->slot[k] = tensor_alloc(bytes);
    v->t = calloc(v->nchunks, sizeof *v->t);
    if (!v->w || (ns >= 1 && !v->slot[0]) || (ns >= 2 && !v->slot[1]) || !v->t) {
        var_free(v);
        return NULL;
    }
    memset(v->w, 0, bytes);
    optim_init_slots(opt, v->slot[0], v->slot[1], v->numel);
    return v;
}

int store_create_vars(store_t *s, const char *job_id, const psc_optim_config_t *opt, const store_var_spec_t *vars,
                      int n, int *created, char *err, size_t errlen)
{
    int rc = 0;
    if (created) *created = 0;
    if (!job_id || !job_id[0] || strlen(job_id) > STORE_JOB_MAX)
        return reject(s, psc_seterr(err, errlen, PSC_EINVAL, "job id \"%.20s\" must be 1 to %d characters",
                                    job_id ? job_id : "", STORE_JOB_MAX));
    if (!opt) return reject(s, psc_seterr(err, errlen, PSC_EINVAL, "job %s: no optimizer", job_id));
    if (n < 0 || (n > 0 && !vars))
        return reject(s, psc_seterr(err, errlen, PSC_EINVAL, "job %s: bad variable count %d", job_id, n));
    if ((rc = check_optim(opt, err, errlen))) return reject(s, rc);

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
    return rc ? reject(s, rc) : 0;
}

/* ---- assign, ready ---- */

/* Checks (offset, len, total) against a variable; the same rules for assign and
 * push. what: "assigned data" or "gradient". */
static int check_chunk(const store_var_t *v, const char *what, uint64_t offset, const void *data, size_t len,
                       uint64_t total, char *err, size_t errlen)
{
    if (total != v->bytes)
        return psc_seterr(err, errlen, PSC_EMISMATCH, "%s: %s is %" PRIu64 " bytes, variable is %" PRIu64 " bytes",
                          v->name, what, total, v->bytes);
    if (!psc_chunk_valid(total, offset, len))
        return psc_seterr(err, errlen, PSC_EINVAL,
                          "%s: chunk of %zu bytes at offset %" PRIu64 " is not a wire chunk (chunks are %zu bytes)",
                          v->name, len, offset, PSC_CHUNK_BYTES);
    if (len && !data) return psc_seterr(err, errlen, PSC_EINVAL, "%s: %s chunk has no data", v->name, what);
    if (!v->is_step) {
        size_t bad = first_nonfinite(data, len / 4);
        if (bad < len / 4)
            return psc_seterr(err, errlen, PSC_EINVAL, "%s: %s has a non-finite value at index %" PRIu64, v->name,
                              what, offset / 4 + bad);
    }
    return 0;
}

int store_assign(store_t *s, const char *name, uint64_t offset, const void *data, size_t len, uint64_t total,
                 char *err, size_t errlen)
{
    store_view_t view;
    if (!name) return reject(s, psc_seterr(err, errlen, PSC_EINVAL, "assign without a variable name"));
    int rc = view_get(s, name, 0, &view, err, errlen);
    if (rc) return reject(s, rc);
    store_var_t *v = view.var;
    if ((rc = check_chunk(v, "assigned data", offset, data, len, total, err, errlen))) return reject(s, rc);
    if (v->is_step) {
        int64_t value = get_le64(data);
        if (value < 0)
            return reject(s, psc_seterr(err, errlen, PSC_EINVAL, "%s: value %" PRId64 " is negative", v->name,
                                        value));
        pthread_mutex_lock(&v->lock);
        v->step = value;
        v->version++;
        pthread_mutex_unlock(&v->lock);
        return 0;
    }
    pthread_mutex_lock(&v->lock);
    memcpy((char *)v->w + offset, data, len);
    v->version++;
    pthread_mutex_unlock(&v->lock);
    return 0;
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
    return rc ? reject(s, rc) : 0;
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

int store_pull(store_t *s, const char *name, uint64_t offset, size_t len, void *dst, int64_t *version, char *err,
               size_t errlen)
{
    store_view_t view;
    if (!name) return reject(s, psc_seterr(err, errlen, PSC_EINVAL, "pull without a variable name"));
    int rc = view_get(s, name, 1, &view, err, errlen);
    if (rc) return reject(s, rc);
    store_var_t *v = view.var;
    /* Any byte range within one wire chunk: one lock hold copies it whole. */
    if (offset > v->bytes || len > v->bytes - offset)
        return reject(s, psc_seterr(err, errlen, PSC_EINVAL,
                                    "%s: pull of %zu bytes at offset %" PRIu64 " is outside its %" PRIu64 " bytes",
                                    v->name, len, offset, v->bytes));
    if (len > PSC_CHUNK_BYTES)
        return reject(s, psc_seterr(err, errlen, PSC_EINVAL, "%s: pull of %zu bytes exceeds the %zu-byte chunk",
                                    v->name, len, PSC_CHUNK_BYTES));
    if (len && !dst) return reject(s, psc_seterr(err, errlen, PSC_EINVAL, "%s: pull into NULL", v->name));
    int64_t ver;
    pthread_mutex_lock(&v->lock);
    if (v->is_step) {
        unsigned char le[8];
        put_le64(le, v->step);
        memcpy(dst, le + offset, len);
    } else {
        memcpy(dst, (const char *)v->w + offset, len);
    }
    ver = v->version;
    pthread_mutex_unlock(&v->lock);
    if (version) *version = ver;
    count(&s->pulls, 1);
    count(&s->bytes_pulled, len);
    return 0;
}

int store_push(store_t *s, const char *name, uint64_t offset, const void *grad, size_t len, uint64_t total,
               void *updated, int64_t *version, char *err, size_t errlen)
{
    store_view_t view;
    if (!name) return reject(s, psc_seterr(err, errlen, PSC_EINVAL, "push without a variable name"));
    int rc = view_get(s, name, 1, &view, err, errlen);
    if (rc) return reject(s, rc);
    store_var_t *v = view.var;
    if (v->is_step)
        return reject(s, psc_seterr(err, errlen, PSC_EINVAL, "%s is not trainable; use Step", v->name));
    if ((rc = check_chunk(v, "gradient", offset, grad, len, total, err, errlen))) return reject(s, rc);

    size_t e0 = (size_t)(offset / 4), n = len / 4, k = (size_t)(offset / PSC_CHUNK_BYTES);
    float *w = v->w + e0;
    float *s0 = v->slot[0] ? v->slot[0] + e0 : NULL, *s1 = v->slot[1] ? v->slot[1] + e0 : NULL;
    int64_t ver;
    pthread_mutex_lock(&v->lock);
    int64_t t = ++v->t[k];
    if (((uintptr_t)grad & 3) == 0) {
        optim_apply(&view.opt, w, s0, s1, grad, n, t);
    } else {
        /* optim_apply needs float alignment: go through a stack block. The
         * update is element-wise, so blocks give the same result. */
        float block[1024];
        for (size_t i = 0; i < n; i += PSC_ARRAY_LEN(block)) {
            size_t m = PSC_MIN(PSC_ARRAY_LEN(block), n - i);
            memcpy(block, (const char *)grad + 4 * i, 4 * m);
            optim_apply(&view.opt, w + i, s0 ? s0 + i : NULL, s1 ? s1 + i : NULL, block, m, t);
        }
    }
    ver = ++v->version;
    if (updated) memcpy(updated, w, len);
    pthread_mutex_unlock(&v->lock);
    if (version) *version = ver;
    count(&s->applied, 1);
    count(&s->bytes_pushed, len);
    if (updated) {
        count(&s->pulls, 1);
        count(&s->bytes_pulled, len);
    }
    return 0;
}

/* ---- global_step ---- */

int store_step_add(store_t *s, int64_t inc, int64_t *value, char *err, size_t errlen)
{
    pthread_rwlock_rdlock(&s->lock);
    store_var_t *v = s->step_var;
    pthread_rwlock_unlock(&s->lock);
    if (!v) return reject(s, psc_seterr(err, errlen, PSC_ENOTFOUND, "this PS holds no global_step"));
    if (inc < 0)
        return reject(s, psc_seterr(err, errlen, PSC_EINVAL, "%s: increment %" PRId64 " is negative", v->name, inc));
    int rc = 0;
    pthread_mutex_lock(&v->lock);
    if (inc > INT64_MAX - v->step) {
        rc = psc_seterr(err, errlen, PSC_EINVAL, "%s: %" PRId64 " + %" PRId64 " overflows", v->name, v->step, inc);
    } else if (inc > 0) {
        v->step += inc;
        v->version++;
    }
    int64_t now = v->step;
    pthread_mutex_unlock(&v->lock);
    if (rc) return reject(s, rc);
    if (value) *value = now;
    return 0;
}

int store_step_get(store_t *s, int64_t *value)
{
    pthread_rwlock_rdlock(&s->lock);
    store_var_t *v = s->step_var;
    pthread_rwlock_unlock(&s->lock);
    if (!v) return 0;
    pthread_mutex_lock(&v->lock);
    int64_t now = v->step;
    pthread_mutex_unlock(&v->lock);
    if (value) *value = now;
    return 1;
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
        pthread_mutex_lock(&v->lock);
        info[i].version = v->version;
        pthread_mutex_unlock(&v->lock);
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
}

void store_count_rejected(store_t *s) { count(&s->rejected, 1); }
