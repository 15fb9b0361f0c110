/* store_internal.h — what the parts of the variable store share (store.c:
 * the table, create, assign, pull, push, global_step; store_sync.c: sync-replica
 * mode; store_ckpt.c: checkpoint export and import). The design, the locks and
 * their order are described at the top of store.c. Not for other modules. */
#ifndef PSC_STORE_INTERNAL_H
#define PSC_STORE_INTERNAL_H

#include "psc.h"
#include "sparse_table.h"
#include "store.h"
#include "sync.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define STORE_JOB_MAX 16

typedef struct store_var {
    char name[PSC_NAME_MAX + 1];
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

/* A sparse table part of the job (store_sparse.c). `part` is replaced whole
 * by a restore (under the fence, exclusive); `mark` is the epoch of its rows
 * in the newest committed checkpoint (0: none: the next save writes a full
 * base), `pending` the one a prepared checkpoint would make it. */
/* A table part's sync accumulator (store_sparse_sync.c): the step rules of
 * sync.h (a.sum unused) and the sparse sum of the step, unique ids and their
 * summed rows, indexed by an open-addressing table of slot + 1 (0: empty). */
typedef struct table_acc {
    pthread_mutex_t lock;
    sync_acc_t a;
    int dim;
    int64_t *ids;
    float *rows;     /* (cap * dim) */
    size_t n, cap;
    uint32_t *index; /* (icap) */
    size_t icap;
} table_acc_t;

/* A table part of the job. `part` is replaced whole by a restore (under the
 * fence, exclusive). Checkpoints (store_sparse_ckpt.c): `mark` is the epoch
 * its rows had in the newest committed checkpoint `committed_id` of this
 * process (0: none yet, the next checkpoint is a full base); base_rows the
 * rows of the last base, delta_rows and chain the rows and checkpoints
 * written as deltas since; pending_* what the prepared checkpoint
 * pending_id would make them once committed. */
typedef struct store_table {
    sparse_table_t *part;
    uint64_t mark, committed_id, base_rows, delta_rows;
    int chain;
    uint64_t pending_id, pending_mark, pending_rows;
    int pending_full;
    table_acc_t *acc; /* sync mode: the part's accumulator, made by its first sync request; NULL before */
    /* store_list_tables' rates (under s->rate_lock): the reference point, the last rates */
    double rate_t;
    uint64_t rate_pulled, rate_pushed, rate_evicted;
    double pull_rate, push_rate, evict_rate;
    double evict_due; /* the evictor's (store_evict.c): when the part's next TTL pass is due */
} store_table_t;

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
    store_table_t *tables; /* (ntables) sparse table parts, in the Create's order; owned */
    int ntables;
    uint64_t tables_gen;   /* changes whenever the table declarations do (create, reset): a sparse request
                              checked at one value needs no second check at the same value */
    atomic_int_fast64_t step_hint; /* newest global_step seen (held or sent): learning-rate schedules */
    pthread_mutex_t rate_lock;     /* the tables' rate fields (leaf lock) */
    int sync_on;           /* sync-replica mode (set once per job; store_reset clears it) */
    store_sync_cfg_t sync; /* its config */

    pthread_mutex_t presence_lock; /* guards the fields below (leaf lock) */
    int started;                   /* a contribution arrived; last_seen is meaningful */
    double *last_seen;             /* (N) latest contribution time per replica; allocated with sync mode */
    unsigned char *left;           /* (N) 1 when the replica reported WorkerDone */
    /* The present count, cached (store_sync.c: presence): while the clock runs,
     * a replica not left is present iff its last_seen >= pres_oldest, absent
     * iff <= pres_newest_gone (pres_newest_gone < pres_oldest), and pres_count
     * counts the present ones; valid at `now` while now - pres_oldest <
     * timeout and now - pres_newest_gone >= timeout. pres_scans counts the
     * full passes over the replicas. */
    int pres_valid, pres_count;
    double pres_oldest, pres_newest_gone;
    uint64_t pres_scans;

    atomic_uint_fast64_t applied, rejected, pulls, bytes_pushed, bytes_pulled;
    atomic_uint_fast64_t stale, timeout_applies, sync_steps;

    /* The evictor (store_evict.c): a thread that expires rows of parts with a TTL. */
    pthread_t evictor;
    pthread_mutex_t evict_lock; /* evict_stop (leaf lock) */
    pthread_cond_t evict_cond;
    int evict_stop;

    /* Checkpoints of the tables (store_sparse_ckpt.c). ckpt_lock: held by an
     * export from before its cut to the end of its copy (one cut open at a
     * time); taken before the fence, never under it (made and unmade with
     * the fence: store_create, store_destroy). parts_gen: changes (under the exclusive fence)
     * whenever a restore swaps the parts, so a copy can tell that the parts
     * it cut are gone. */
    pthread_mutex_t ckpt_lock;
    uint64_t parts_gen;
};

/* The state a data request (pull, push) sees: snapshot under the read lock. */
typedef struct store_view {
    store_var_t *var;
    psc_optim_config_t opt;
    int sync_on;
    store_sync_cfg_t sync;
} store_view_t;

/* Relaxed counter add (stats). */
static inline void count(atomic_uint_fast64_t *c, uint64_t n) { atomic_fetch_add_explicit(c, n, memory_order_relaxed); }

/* The push fence, shared side: held by every update for its whole duration. */
static inline void fence_enter(store_t *s) { pthread_rwlock_rdlock(&s->fence); }
static inline void fence_leave(store_t *s) { pthread_rwlock_unlock(&s->fence); }

/* The store's optimizer with learning_rate evaluated by its schedule at the
 * newest global_step seen (caller holds s->lock, or owns the config). */
static inline psc_optim_config_t store_opt_at(const psc_optim_config_t *o, const store_t *s)
{
    psc_optim_config_t c = *o;
    int64_t step = atomic_load_explicit(&s->step_hint, memory_order_relaxed);
    c.learning_rate = (float)psc_lr_at(&o->schedule, o->learning_rate, step);
    return c;
}
static inline psc_optim_config_t store_opt_now(const store_t *s) { return store_opt_at(&s->opt, s); }
/* Raises step_hint to step (a sender's global_step, or the held one). */
static inline void store_note_step_hint(store_t *s, int64_t step)
{
    int64_t cur = atomic_load_explicit(&s->step_hint, memory_order_relaxed);
    while (step > cur && !atomic_compare_exchange_weak(&s->step_hint, &cur, step)) {}
}

/* Optimizer settings: the checks of a Create (PSC_EINVAL naming the field), and equality. */
int store_check_optim(const psc_optim_config_t *o, char *err, size_t errlen);
int store_optim_same(const psc_optim_config_t *a, const psc_optim_config_t *b);
/* Frees n table parts and their accumulators (store.c). */
void store_tables_free(store_table_t *t, int n);
/* Resolves a table for a data request (caller holds the fence shared): the
 * part, its slot (may be NULL), its optimizer at the current learning rate
 * (opt may be NULL) and tables_gen (gen may be NULL). 0 or a code (not counted). */
int store_table_get(store_t *s, const char *table, sparse_table_t **out, store_table_t **slot,
                    psc_optim_config_t *opt, uint64_t *gen, char *err, size_t errlen);

/* The checks of a sparse request on part t (grads NULL for a pull): ids and
 * gradient rows; err names the table. 0 or a code (not counted). */
int store_table_check_request(const sparse_table_t *t, const void *ids, size_t n, const void *grads, size_t glen,
                              char *err, size_t errlen);

/* ---- sync mode's pieces shared with the tables (store_sync.c, store_sparse_sync.c) ---- */

/* A sync call at `now` from `worker` (>= N: a tick, nobody): marks it seen,
 * starts the presence clock, returns the contributions needed now. */
uint32_t store_presence_touch(store_t *s, const store_sync_cfg_t *c, uint32_t worker, double now);
/* Checkpoints of the tables (store_sparse_ckpt.c). Export in two steps,
 * both with s->ckpt_lock held: the cut, under the exclusive fence (O(tables
 * x shards): each part's epoch closed and its shards marked pending, the
 * checkpoint's parent in *parent (0: a base), the pending marks recorded);
 * then the copy, with no lock held on entry (each shard under the fence
 * shared and its lock): the parts' changed rows (or all of them: a full
 * base) through io, while pushes go on; PSC_ECANCELLED when a restore or a
 * reset replaced the parts meanwhile; on any error every pending mark is
 * cleared and nothing is pending for a commit. Import phase 1 (no lock):
 * fresh parts filled from the checkpoint (*parts, one per table;
 * PSC_EMISMATCH when it lacks a table); phase 2 (exclusive fence): swapped
 * in, marks reset (the next checkpoint is a full base), the old parts
 * returned in parts to free. */
typedef struct store_cut {
    int ntables;
    uint64_t tables_gen, parts_gen; /* the parts the cut was taken of */
} store_cut_t;
int store_tables_cut(store_t *s, const store_rows_io_t *io, uint64_t ckpt_id, store_cut_t *cut, uint64_t *parent,
                     char *err, size_t errlen);
int store_tables_copy(store_t *s, const store_rows_io_t *io, const store_cut_t *cut, char *err, size_t errlen);
int store_tables_import_read(store_t *s, const store_rows_io_t *io, sparse_table_t ***parts, int *n, char *err,
                             size_t errlen);
void store_tables_import_swap(store_t *s, sparse_table_t **parts, int n);
void store_tables_parts_free(sparse_table_t **parts, int n);

/* Sync checkpoints of the tables (store_sparse_sync.c): 0 when every table
 * part's accumulator is at step sync_step (pending contributions are fine),
 * else PSC_ESTALE naming the first that is not; and, at a restore, every
 * accumulator emptied and set to `step`. Caller holds the fence exclusively. */
int store_table_accs_at(store_t *s, int64_t sync_step, char *err, size_t errlen);
void store_table_accs_reset(store_t *s, int64_t step);

/* The evictor thread (store_evict.c): started by store_create, stopped and
 * joined by store_destroy. */
void store_evictor_start(store_t *s);
void store_evictor_stop(store_t *s);
/* A table part about to serve a request: given the newest global step (its rows' clock). */
static inline void store_table_clock(store_t *s, sparse_table_t *t)
{
    sparse_table_set_step(t, atomic_load_explicit(&s->step_hint, memory_order_relaxed));
}

/* Every refused request goes through here: counts it, returns code. */
int store_reject(store_t *s, int code);
/* "(784, 256)", "(3,)" */
void store_shape_str(char *buf, size_t len, int rank, const int64_t *shape);
/* 64-byte aligned tensor of `bytes`, or NULL (the size came from a request). */
float *store_tensor_alloc(uint64_t bytes);
/* Resolves name for a data request (need_ready: pull/push) under s->lock; the
 * view in *out. 0 or a code, not yet counted as rejected. */
int store_view_get(store_t *s, const char *name, int need_ready, store_view_t *out, char *err, size_t errlen);
/* Checks (offset, len, total) against a variable and its data for non-finite
 * values; what: "assigned data" or "gradient". 0 or a code. */
int store_check_chunk(const store_var_t *v, const char *what, uint64_t offset, const void *data, size_t len,
                      uint64_t total, char *err, size_t errlen);

#endif
