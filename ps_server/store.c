/* store.c — the PS's variable store (see store.h).
 *
 * Design. The store holds one table of variables, created once per job by
 * store_create_vars and never changed afterwards (a later create either matches
 * it or is refused), so a variable's address and metadata (name, shape, sizes,
 * buffers) are immutable from publication until store_destroy. Locks:
 *   - s->fence (rwlock, writer-preferring): the push fence. Every function that
 *     writes tensor state (values, slots, t, version, global_step, accumulators,
 *     presence: store_assign, store_push, store_step_add, store_set_sync,
 *     store_push_sync, store_step_sync, store_sync_tick, store_sync_worker_left,
 *     store_import's write phase) holds it shared for its whole duration (the
 *     public function wraps a static *_fenced body); store_export holds it
 *     exclusively, so under it the tensors are immutable and every update is
 *     either wholly in or wholly out. Readers (pull, chunk_read, list) do not
 *     take it. It is never taken recursively (a writer-preferring rwlock would
 *     deadlock a reader re-entering while an export waits): store_sync_tick
 *     releases it before its callback, and emit must not update the store.
 *   - s->lock (rwlock) guards the store-wide state: job id, ready flag,
 *     optimizer, the table pointers, and the sync-mode flag and config. It is
 *     held only to look a name up or to publish a table or sync mode, never
 *     while touching tensor data.
 *   - v->lock (rwlock, one per variable) guards the variable's contents: values,
 *     slots, version, per-chunk step counts, global_step's value, and in sync
 *     mode its accumulators (steps, counts, sums). It is held for the memcpy,
 *     accumulation or optimizer pass of one chunk of one variable, nothing else.
 *     Held exclusive by everything but the two hot paths: an asynchronous push
 *     of chunk k and a pull hold it shared plus the chunk locks v->ckl[] of
 *     their range (ascending), so two RPC threads update two chunks of one
 *     variable at once; they bump and read version atomically.
 *   - s->presence_lock (mutex) guards the sync presence table (started flag,
 *     last_seen, left). It is a leaf: nothing is locked while it is held.
 *   - counters (stats) are relaxed atomics.
 * Lock order: s->fence first, before any other lock; then s->lock -> v->lock
 * -> v->ckl[k] (ascending k)
 * (store_list, store_set_sync publishing the accumulators) and s->lock ->
 * s->presence_lock (store_set_sync); no other nesting. In particular v->lock
 * and presence_lock are never held together: a sync push marks its replica
 * seen and computes `needed` first, then takes v->lock. store_sync_tick holds
 * one v->lock at a time and none while it calls its callback (nor the fence).
 *
 * Sync mode (store_set_sync, rules in store.h and sync.h). Each trainable
 * variable gets v->acc[nchunks] with sum buffers carved from one slab the size
 * of the variable (v->acc_sum), global_step one accumulator without data. They
 * are allocated outside the locks, then published under s->lock (write) and
 * v->lock; sync mode is never turned off, so a request that saw it on (under
 * s->lock) may use v->acc under v->lock. Chunk k's accumulator step is the
 * number of sync steps of that chunk (skips included); t[k] stays the number
 * of optimizer updates (Adam). global_step's accumulator step follows its
 * value: raised to it whenever the accumulator is empty.
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
 *
 * Checkpoints. One list of tensors (tensor_list_build: name, variable, part,
 * length) drives both store_export and store_import, so they cannot disagree on
 * names or sizes. An export reads the tensors without v->lock: every writer
 * holds the fence shared, so under the exclusive side only readers run, and
 * emit may itself pull. An import fetches everything into its own buffers
 * before it takes the fence (no lock is held across the fetch, which reads
 * RocksDB), then copies under the fence and each v->lock (pulls read under
 * v->lock only). Floats are copied as raw host-order bytes (little-endian, see
 * the static assertion); int64 tensors are written and read as little-endian.
 */
#include "store.h"

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

#define STORE_NAME_MAX 111 /* store_var_info_t.name holds 112 bytes */
#define STORE_TENSOR_NAME_MAX (STORE_NAME_MAX + 16) /* "<var>/RMSProp_1" and the like */
#define STORE_JOB_MAX 16

/* Checkpoints hold float32 tensors as raw host bytes and store.h documents
 * them as little-endian. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "psc checkpoints assume a little-endian host");

typedef struct store_var {
    char name[STORE_NAME_MAX + 1];
    int rank;
    int64_t shape[PSC_MAX_RANK];
    int is_step;
    uint64_t bytes;  /* value bytes: numel * 4, or 8 for global_step */
    size_t numel;    /* float elements (0 for global_step) */
    size_t nchunks;  /* wire chunks of the value */

    /* Exclusive: guards everything below. Shared: an asynchronous push or a
     * pull, which then also holds the chunk locks of its range (ckl). */
    pthread_rwlock_t lock;
    pthread_mutex_t *ckl; /* (nchunks) under `lock` shared: chunk k's values, slots and t[k] */
    float *w;             /* (numel) values, 64-byte aligned */
    float *slot[2];       /* (numel) optimizer slots, NULL when unused */
    int64_t *t;           /* (nchunks) pushes applied per wire chunk */
    int64_t version;      /* atomic under `lock` shared (async push, pull), plain under exclusive */
    int64_t step;         /* global_step value (is_step only) */
    sync_acc_t *acc;      /* (nchunks, 1 for global_step) sync accumulators; NULL in async mode */
    float *acc_sum;       /* (numel) the accumulators' sum buffers, one slab; NULL for global_step */
} store_var_t;

struct store {
    pthread_rwlock_t fence; /* the push fence: updates shared, export/import exclusive (top comment) */
    pthread_rwlock_t lock;  /* guards the fields up to `nvars` */
    int have_job;
    char job_id[STORE_JOB_MAX + 1];
    int ready;
    psc_optim_config_t opt;
    store_var_t **vars;   /* (nvars) in creation order; owned */
    store_var_t **sorted; /* (nvars) the same, sorted by name, for lookups */
    int nvars;
    store_var_t *step_var; /* the is_step variable or NULL */
    int sync_on;           /* sync-replica mode (set once per job; store_reset clears it) */
    store_sync_cfg_t sync; /* its config */

    pthread_mutex_t presence_lock; /* guards the fields below (leaf lock) */
    int started;                   /* a contribution arrived; last_seen is meaningful */
    double *last_seen;             /* (N) latest contribution time per replica; allocated with sync mode */
    unsigned char *left;           /* (N) 1 when the replica reported WorkerDone */

    atomic_uint_fast64_t applied, rejected, pulls, bytes_pushed, bytes_pulled;
    atomic_uint_fast64_t stale, timeout_applies, sync_steps;
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
 * scan tests exponent bits on integer loads: an exponent of all ones (Inf,
 * NaN) plus one carries into bit 31; no finite value's does. The lanes are
 * GCC/Clang vector values (4 x uint32) in four independent accumulators, so
 * they stay in registers at any optimization level and the scan runs at
 * memory speed. (An array of 8 lanes, which -O2 kept on the stack, made every
 * iteration wait for a store-to-load forward: ~10 GB/s, slower than Adam's
 * update itself; tests/bench/NOTES.md.) Only a chunk that has a bad value is
 * scanned again to find where. */
/* The finiteness scan: a float is non-finite when its exponent bits are all
 * ones; (u & exp) + one carries into bit 31 exactly then, so OR-ing that over
 * a block and testing bit 31 checks 4 (SSE2) or 8 (AVX2) floats an
 * instruction, with the lanes kept in registers (NOTES.md change 2). The AVX2
 * copy is chosen at run time like optim.c's, and halves the scan of a chunk
 * that is in cache (a request just received). */
typedef uint32_t scan_v4u __attribute__((vector_size(16)));
#define SCAN_EXP 0x7f800000u
#define SCAN_ONE 0x00800000u

/* The OR of (u & exp) + one over nb blocks of 16 floats. */
static uint32_t scan_blocks_base(const unsigned char *b, size_t nb)
{
    const scan_v4u exp = {SCAN_EXP, SCAN_EXP, SCAN_EXP, SCAN_EXP};
    const scan_v4u one = {SCAN_ONE, SCAN_ONE, SCAN_ONE, SCAN_ONE};
    scan_v4u a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    for (size_t i = 0; i < nb; i++) {
        scan_v4u u0, u1, u2, u3;
        memcpy(&u0, b + 64 * i, 16);
        memcpy(&u1, b + 64 * i + 16, 16);
        memcpy(&u2, b + 64 * i + 32, 16);
        memcpy(&u3, b + 64 * i + 48, 16);
        a0 |= (u0 & exp) + one;
        a1 |= (u1 & exp) + one;
        a2 |= (u2 & exp) + one;
        a3 |= (u3 & exp) + one;
    }
    a0 |= a1 | a2 | a3;
    return a0[0] | a0[1] | a0[2] | a0[3];
}

#if defined(__x86_64__)
typedef uint32_t scan_v8u __attribute__((vector_size(32)));

/* The same over nb blocks of 32 floats, 8 a lane. */
__attribute__((target("avx2"))) static uint32_t scan_blocks_avx2(const unsigned char *b, size_t nb)
{
    const scan_v8u exp = {SCAN_EXP, SCAN_EXP, SCAN_EXP, SCAN_EXP, SCAN_EXP, SCAN_EXP, SCAN_EXP, SCAN_EXP};
    const scan_v8u one = {SCAN_ONE, SCAN_ONE, SCAN_ONE, SCAN_ONE, SCAN_ONE, SCAN_ONE, SCAN_ONE, SCAN_ONE};
    scan_v8u a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    for (size_t i = 0; i < nb; i++) {
        scan_v8u u0, u1, u2, u3;
        memcpy(&u0, b + 128 * i, 32);
        memcpy(&u1, b + 128 * i + 32, 32);
        memcpy(&u2, b + 128 * i + 64, 32);
        memcpy(&u3, b + 128 * i + 96, 32);
        a0 |= (u0 & exp) + one;
        a1 |= (u1 & exp) + one;
        a2 |= (u2 & exp) + one;
        a3 |= (u3 & exp) + one;
    }
    a0 |= a1 | a2 | a3;
    return a0[0] | a0[1] | a0[2] | a0[3] | a0[4] | a0[5] | a0[6] | a0[7];
}
#endif

/* The index of the first non-finite float of the n at p (any alignment), or n. */
static size_t first_nonfinite(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint32_t bad;
    size_t done;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2")) {
        bad = scan_blocks_avx2(b, n / 32);
        done = 32 * (n / 32);
    } else
#endif
    {
        bad = scan_blocks_base(b, n / 16);
        done = 16 * (n / 16);
    }
    for (size_t i = done; i < n; i++) {
        uint32_t u;
        memcpy(&u, b + 4 * i, 4);
        bad |= (u & SCAN_EXP) + SCAN_ONE;
    }
    if (!(bad & 0x80000000u)) return n;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, b + 4 * i, 4);
        if ((u & SCAN_EXP) == SCAN_EXP) return i;
    }
    return n;
}

/* first_nonfinite over n floats held in segments split anywhere (a float may
 * straddle segments): the index of the first non-finite one, or n. */
static int scan_run(void *arg, const unsigned char *p, size_t m, size_t e)
{
    size_t bad = first_nonfinite(p, m);
    if (bad == m) return 0;
    *(size_t *)arg = e + bad;
    return 1;
}

static size_t first_nonfinite_iov(const psc_iov_t *g, int ng, size_t n)
{
    size_t at = n;
    psc_iov_float_runs(g, ng, n, scan_run, &at);
    return at;
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

/* The state a data request (pull, push) sees: snapshot under the read lock. */
typedef struct store_view {
    store_var_t *var;
    psc_optim_config_t opt;
    int sync_on;
    store_sync_cfg_t sync;
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
        out->sync_on = s->sync_on;
        out->sync = s->sync;
    }
    pthread_rwlock_unlock(&s->lock);
    return rc;
}

/* The push fence, shared side: held by every update for its whole duration. */
static void fence_enter(store_t *s) { pthread_rwlock_rdlock(&s->fence); }
static void fence_leave(store_t *s) { pthread_rwlock_unlock(&s->fence); }

/* ---- life cycle ---- */

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
    atomic_init(&s->applied, 0);
    atomic_init(&s->rejected, 0);
    atomic_init(&s->pulls, 0);
    atomic_init(&s->bytes_pushed, 0);
    atomic_init(&s->bytes_pulled, 0);
    atomic_init(&s->stale, 0);
    atomic_init(&s->timeout_applies, 0);
    atomic_init(&s->sync_steps, 0);
    return s;
}

void store_destroy(store_t *s)
{
    if (!s) return;
    for (int i = 0; i < s->nvars; i++) var_free(s->vars[i]);
    free(s->vars);
    free(s->sorted);
    free(s->last_seen);
    free(s->left);
    pthread_mutex_destroy(&s->presence_lock);
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

static int store_create_vars_unfenced(store_t *s, const char *job_id, const psc_optim_config_t *opt,
                                      const store_var_spec_t *vars,
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
        size_t bad = first_nonfinite_iov(g, ng, len / 4);
        if (bad < len / 4)
            return psc_seterr(err, errlen, PSC_EINVAL, "%s: %s has a non-finite value at index %" PRIu64, v->name,
                              what, offset / 4 + bad);
    }
    return 0;
}

static int check_chunk(const store_var_t *v, const char *what, uint64_t offset, const void *data, size_t len,
                       uint64_t total, char *err, size_t errlen)
{
    psc_iov_t one = {data, len};
    return check_chunk_iov(v, what, offset, &one, data ? 1 : 0, len, total, err, errlen);
}

static int assign_fenced(store_t *s, const char *name, uint64_t offset, const void *data, size_t len,
                         uint64_t total, char *err, size_t errlen)
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
        pthread_rwlock_wrlock(&v->lock);
        v->step = value;
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

/* The checks of a pull (name, ready, range within one chunk's length);
 * *var gets the variable. Returns 0 or a code, not yet counted as rejected. */
static int pull_check(store_t *s, const char *name, uint64_t offset, size_t len, store_var_t **var, char *err,
                      size_t errlen)
{
    store_view_t view;
    if (!name) return psc_seterr(err, errlen, PSC_EINVAL, "pull without a variable name");
    int rc = view_get(s, name, 1, &view, err, errlen);
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
    if (rc) return reject(s, rc);
    if (len && !dst) return reject(s, psc_seterr(err, errlen, PSC_EINVAL, "%s: pull into NULL", v->name));
    int64_t ver;
    pthread_rwlock_rdlock(&v->lock); /* global_step's writers hold it exclusive */
    if (v->is_step) {
        unsigned char le[8];
        put_le64(le, v->step);
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
    return rc ? reject(s, rc) : 0;
}

/* The checks of an asynchronous push (name, ready, trainable, wire chunk,
 * finite values) of a gradient in ng segments; the view of the variable in
 * *view. Returns 0 or a code, not yet counted as rejected. */
static int push_check(store_t *s, const char *name, uint64_t offset, const psc_iov_t *g, int ng, size_t len,
                      uint64_t total, store_view_t *view, char *err, size_t errlen)
{
    if (!name) return psc_seterr(err, errlen, PSC_EINVAL, "push without a variable name");
    int rc = view_get(s, name, 1, view, err, errlen);
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
    return rc ? reject(s, rc) : 0;
}

static int push_fenced(store_t *s, const char *name, uint64_t offset, const psc_iov_t *g, int ng, size_t len,
                       uint64_t total, void *updated, int64_t *version, char *err, size_t errlen)
{
    store_view_t view;
    int rc = push_check(s, name, offset, g, ng, len, total, &view, err, errlen);
    if (rc) return reject(s, rc);
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
    if (!v) return reject(s, psc_seterr(err, errlen, PSC_ENOTFOUND, "this PS holds no global_step"));
    if (inc < 0)
        return reject(s, psc_seterr(err, errlen, PSC_EINVAL, "%s: increment %" PRId64 " is negative", v->name, inc));
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
    if (rc) return reject(s, rc);
    if (value) *value = now;
    return 0;
}

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
    if (rc) return reject(s, rc);

    /* The table is immutable once published: read it, then allocate unlocked. */
    pthread_rwlock_rdlock(&s->lock);
    int have_job = s->have_job, on = s->sync_on;
    store_sync_cfg_t cur = s->sync;
    store_var_t **vars = s->vars;
    int n = s->nvars;
    pthread_rwlock_unlock(&s->lock);
    if (!have_job)
        return reject(s, psc_seterr(err, errlen, PSC_ENOTFOUND, "sync: no variables created (no job created yet)"));
    if (on) {
        rc = sync_cfg_compare(&cur, cfg, err, errlen);
        return rc ? reject(s, rc) : 0;
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
        ok = (sums[i] = tensor_alloc(v->bytes)) != NULL;
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
    return rc ? reject(s, rc) : 0;
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

/* Replicas present at now; caller holds presence_lock. Before the first
 * contribution (the clock has not started) everyone who has not left is present. */
static int presence_count_locked(store_t *s, const store_sync_cfg_t *c, double now)
{
    int p = 0;
    for (int r = 0; r < c->total_num_replicas; r++)
        if (!s->left[r] && (!s->started || now - s->last_seen[r] < c->timeout_secs)) p++;
    return p;
}

/* A sync call at `now`: marks `worker` seen (worker >= N: nobody, a tick),
 * starts the presence clock on the first contribution, and returns needed(now).
 * Ticks do not start the clock: the service ticks from the moment sync mode is
 * on, long before slow replicas send their first gradient, and before the first
 * contribution there is nothing a tick could apply anyway. Takes only
 * presence_lock (sync mode is on: the table is published). */
static uint32_t presence_touch(store_t *s, const store_sync_cfg_t *c, uint32_t worker, double now)
{
    pthread_mutex_lock(&s->presence_lock);
    if (!s->started && worker < (uint32_t)c->total_num_replicas) {
        s->started = 1;
        for (int r = 0; r < c->total_num_replicas; r++) s->last_seen[r] = now;
    }
    /* max: calls race to this lock with `now`s read before it */
    if (worker < (uint32_t)c->total_num_replicas && now > s->last_seen[worker]) s->last_seen[worker] = now;
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
    if (!name) return reject(s, psc_seterr(err, errlen, PSC_EINVAL, "sync push without a variable name"));
    int rc = view_get(s, name, 1, &view, err, errlen);
    if (rc) return reject(s, rc);
    store_var_t *v = view.var;
    if (!view.sync_on)
        return reject(s, psc_seterr(err, errlen, PSC_EUNSUPPORTED,
                                    "%s: sync push, but the job is asynchronous (no sync-replica config); use Push",
                                    v->name));
    if (v->is_step)
        return reject(s, psc_seterr(err, errlen, PSC_EINVAL, "%s is not trainable; use Step", v->name));
    if ((rc = sync_check_sender(v->name, &view.sync, worker, count_, err, errlen))) return reject(s, rc);
    if ((rc = check_chunk(v, "gradient", offset, grad, len, total, err, errlen))) return reject(s, rc);

    uint32_t needed = presence_touch(s, &view.sync, worker, now);
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
    psc_optim_config_t opt = s->opt;
    pthread_rwlock_unlock(&s->lock);
    if (!on)
        return reject(s, psc_seterr(err, errlen, PSC_EUNSUPPORTED,
                                    "sync step, but the job is asynchronous (no sync-replica config); use an increment"));
    if (!v) return reject(s, psc_seterr(err, errlen, PSC_ENOTFOUND, "this PS holds no global_step"));
    int rc = sync_check_sender(v->name, &cfg, worker, count_, err, errlen);
    if (rc) return reject(s, rc);

    uint32_t needed = presence_touch(s, &cfg, worker, now);
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
    if (!name) return reject(s, psc_seterr(err, errlen, PSC_EINVAL, "chunk read without a variable name"));
    int rc = view_get(s, name, 1, &view, err, errlen);
    if (rc) return reject(s, rc);
    store_var_t *v = view.var;
    if (offset >= v->bytes || len > v->bytes - offset)
        return reject(s, psc_seterr(err, errlen, PSC_EINVAL,
                                    "%s: read of %zu bytes at offset %" PRIu64 " is outside its %" PRIu64 " bytes",
                                    v->name, len, offset, v->bytes));
    size_t k = v->is_step ? 0 : (size_t)(offset / PSC_CHUNK_BYTES);
    if (!v->is_step && len && (offset + len - 1) / PSC_CHUNK_BYTES != k)
        return reject(s, psc_seterr(err, errlen, PSC_EINVAL,
                                    "%s: read of %zu bytes at offset %" PRIu64 " crosses a wire chunk boundary",
                                    v->name, len, offset));
    int64_t st, ver;
    pthread_rwlock_wrlock(&v->lock);
    if (v->is_step) {
        st = v->step;
        if (dst) {
            unsigned char le[8];
            put_le64(le, v->step);
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
    psc_optim_config_t opt = s->opt;
    store_var_t **vars = s->vars;
    int n = s->nvars;
    pthread_rwlock_unlock(&s->lock);
    if (!on) return;

    uint32_t needed = presence_touch(s, &cfg, UINT32_MAX, now);
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
        if (s->started && now > s->last_seen[worker]) s->last_seen[worker] = now;
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

/* ---- checkpoints ---- */

enum tensor_part { PART_VALUE, PART_SLOT0, PART_SLOT1, PART_T };

/* One tensor of a checkpoint of this shard. */
typedef struct store_tensor {
    store_var_t *var;
    enum tensor_part part;
    char name[STORE_TENSOR_NAME_MAX + 1];
    uint64_t len;  /* bytes */
    void *data;    /* store_import: the fetched bytes (owned), NULL before */
} store_tensor_t;

/* TensorFlow's checkpoint name of slot k: the optimizer's name, "_1" for the
 * second (tf.compat.v1.train's slot variables "<var>/<Optimizer>[_1]"). */
static const char *slot_suffix(const psc_optim_config_t *opt, int k)
{
    switch (opt->kind) {
    case PSC_OPT_SGD: break;
    case PSC_OPT_MOMENTUM: return "Momentum";
    case PSC_OPT_ADAGRAD: return "Adagrad";
    case PSC_OPT_ADAM: return k == 0 ? "Adam" : "Adam_1";          /* m, v (optim.c's slot 0, 1) */
    case PSC_OPT_RMSPROP: return k == 0 ? "RMSProp" : "RMSProp_1"; /* ms ("rms"), mom */
    }
    PSC_ASSERT(!"slot without a checkpoint name");
    return NULL;
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

int store_export(store_t *s, store_emit_fn emit, void *arg, int64_t sync_step, int64_t *step, char *err,
                 size_t errlen)
{
    if (step) *step = -1;
    if (!emit) return reject(s, psc_seterr(err, errlen, PSC_EINVAL, "export without an emit function"));

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
    if (!ready) {
        pthread_rwlock_unlock(&s->fence);
        if (!have_job)
            rc = psc_seterr(err, errlen, PSC_ENOTREADY, "export: model not ready (no job created yet)");
        else
            rc = psc_seterr(err, errlen, PSC_ENOTREADY,
                            "export: model not ready (job %s has variables but is not marked ready yet)", job);
        return reject(s, rc);
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
            return psc_seterr(err, errlen, PSC_ESTALE, "export: %s is at step %" PRId64 ", not at step boundary %" PRId64,
                              v->name, at, sync_step);
        }
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
                put_le64(le, v->step);
                data = le;
            } else {
                data = v->w;
            }
            break;
        case PART_SLOT0: data = v->slot[0]; break;
        case PART_SLOT1: data = v->slot[1]; break;
        case PART_T:
            for (size_t k = 0; k < v->nchunks; k++) put_le64(le + 8 * k, v->t[k]);
            data = le;
            break;
        }
        rc = emit(arg, list[j].name, data, (size_t)list[j].len);
        if (rc)
            psc_seterr(err, errlen, rc, "export stopped at tensor \"%s\": %s (%d)", list[j].name,
                       rc < 0 ? psc_strerror(rc) : "emit failed", rc);
    }
    if (!rc && step && sv) *step = sv->step;
    pthread_rwlock_unlock(&s->fence);
    free(le);
    tensor_list_free(list, count);
    return rc;
}

/* Checks one fetched tensor: its size, and that int64 counters are >= 0. */
static int tensor_check_fetched(const store_tensor_t *t, size_t len, char *err, size_t errlen)
{
    const store_var_t *v = t->var;
    if (len != t->len) {
        char sh[128];
        shape_str(sh, sizeof sh, v->rank, v->shape);
        return psc_seterr(err, errlen, PSC_EMISMATCH,
                          "checkpoint tensor \"%s\" is %zu bytes, expected %" PRIu64 " (variable %s, shape %s)",
                          t->name, len, t->len, v->name, sh);
    }
    const unsigned char *p = t->data;
    if (t->part == PART_VALUE && v->is_step && get_le64(p) < 0)
        return psc_seterr(err, errlen, PSC_ECORRUPT, "checkpoint tensor \"%s\": global step %" PRId64 " is negative",
                          t->name, get_le64(p));
    if (t->part == PART_T)
        for (size_t k = 0; k < v->nchunks; k++)
            if (get_le64(p + 8 * k) < 0)
                return psc_seterr(err, errlen, PSC_ECORRUPT,
                                  "checkpoint tensor \"%s\": update count %" PRId64 " of chunk %zu is negative",
                                  t->name, get_le64(p + 8 * k), k);
    return 0;
}

int store_import(store_t *s, store_fetch_fn fetch, void *arg, int64_t sync_step, char *err, size_t errlen)
{
    if (!fetch) return reject(s, psc_seterr(err, errlen, PSC_EINVAL, "import without a fetch function"));
    if (sync_step < 0)
        return reject(s, psc_seterr(err, errlen, PSC_EINVAL, "import: sync step %" PRId64 " is negative", sync_step));
    pthread_rwlock_rdlock(&s->lock);
    int have_job = s->have_job;
    psc_optim_config_t opt = s->opt;
    store_var_t **vars = s->vars;
    int n = s->nvars;
    pthread_rwlock_unlock(&s->lock);
    if (!have_job)
        return reject(s, psc_seterr(err, errlen, PSC_ENOTFOUND, "import: no variables created (no job created yet)"));

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
    if (rc) {
        tensor_list_free(list, count);
        return refused ? reject(s, rc) : rc;
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
            if (v->is_step)
                v->step = get_le64(p);
            else
                memcpy(v->w, p, t->len);
            v->version++;
            if (sync_on && v->is_step) v->acc[0] = (sync_acc_t){.step = v->step};
            break;
        case PART_SLOT0: memcpy(v->slot[0], p, t->len); break;
        case PART_SLOT1: memcpy(v->slot[1], p, t->len); break;
        case PART_T:
            for (size_t k = 0; k < v->nchunks; k++) v->t[k] = get_le64(p + 8 * k);
            /* A restore may move the steps backwards: set, not sync_acc_skip_to. */
            for (size_t k = 0; sync_on && k < v->nchunks; k++)
                v->acc[k] = (sync_acc_t){.step = sync_step, .sum = v->acc[k].sum};
            break;
        }
        if (j + 1 == count || list[j + 1].var != v) pthread_rwlock_unlock(&v->lock);
    }
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
    return 0;
}
