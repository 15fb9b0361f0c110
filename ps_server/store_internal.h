/* store_internal.h — what the parts of the variable store share (store.c:
 * the table, create, assign, pull, push, global_step; store_sync.c: sync-replica
 * mode; store_ckpt.c: checkpoint export and import). The design, the locks and
 * their order are described at the top of store.c. Not for other modules. */
#ifndef PSC_STORE_INTERNAL_H
#define PSC_STORE_INTERNAL_H

#include "psc.h"
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
