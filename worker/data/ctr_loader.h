/* ctr_loader.h — the input pipeline of a recommendation (CTR) model: batches
 * read by data_reader (reader.h) on a prefetch thread and mapped there to
 * what the tower and the PS take: for every slot of the model (tower_ctr.h),
 * each example's bag as row indexes into the batch's unique ids of the slot's
 * table, with the combiner applied to the weights (sum: w; mean: w / sum w;
 * sqrtn: w / sqrt(sum w^2), TF's embedding_lookup_sparse).
 *
 * Keys become ids by psc_feature_id_hash(key, psc_fnv1a64(feature name),
 * table rows) (table.h), or as themselves with "hash_ids": false (a key not
 * below the table's rows is then a bad record of its batch: the loader fails
 * naming the feature, the value and the table).
 *
 * Threads: one consumer thread; the prefetch thread is the loader's own.
 */
#ifndef PSC_CTR_LOADER_H
#define PSC_CTR_LOADER_H

#include "reader.h"
#include "job_spec.h"
#include "tower_ctr.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* One mapped batch. */
typedef struct ctr_slot_batch {
    data_batch_t raw;   /* dense, label, n (the reader's batch) */
    int epoch;         /* 0-based */
    int nslots;
    int32_t *off;      /* (n * nslots + 1) */
    int32_t *idx;      /* (nnz) */
    float *w;          /* (nnz) */
    int64_t nnz;
    int ntables;       /* spec->num_tables */
    int64_t **uids;    /* per table: the batch's unique ids, in first-seen order */
    int32_t **prev;    /* per table (nuids), with CTR_LOADER_PREV: the id's index among the unique ids of the batch
                        * before (seq - 1), or -1 */
    int64_t seq;       /* the batch's place in the loader's order (0, 1, ...) */
    int *nuids;        /* per table */
    int *cap_uids;
    float **rows;      /* per table (nuids, dim): filled by the caller (the PS's rows) */
    float **row_grads; /* per table (nuids, dim): filled by the caller (the tower's gradients) */
    int *cap_rows;     /* rows allocated per table, in rows */
    char *files_done;  /* the files whose last example is in this batch: data_reader_files_done's lines */
    size_t files_done_cap;
} ctr_slot_batch_t;

typedef struct ctr_loader ctr_loader_t;

/* ctr_loader_create's mode: bits. */
#define CTR_LOADER_TEST 1 /* the test data (else the training data) */
#define CTR_LOADER_PREV 2 /* fill each batch's prev (prefetch_rows' split), else leave it unset */

/* Opens the training or test data of spec (mode) for replica shard of
 * num_shards and starts the prefetch thread (prefetch >= 1 batches ahead).
 * Returns 0 or the reader's error. */
int ctr_loader_create(const psc_job_spec_t *spec, int mode, int shard, int num_shards, int batch_size, uint64_t seed,
                      int shuffle, int prefetch, ctr_loader_t **out, char *err, size_t errlen);
/* The next batch: 0 and *b (owned by the loader until ctr_loader_release),
 * 1 when the data is done, 2 when an interrupt flag (ctr_loader_set_interrupt)
 * was set while it waited, 3 when it waited the longest wait for nothing yet,
 * or the reader's or the mapping's error (err). */
int ctr_loader_next(ctr_loader_t *l, ctr_slot_batch_t **b, char *err, size_t errlen);
/* The next batch if one is ready now: 0 and *b as ctr_loader_next, else 1
 * (none yet, the data is done, or it failed: ctr_loader_next says which). */
int ctr_loader_try_next(ctr_loader_t *l, ctr_slot_batch_t **b);
/* A followed directory's job, whose next batch may be long in coming:
 * ctr_loader_next stops waiting, returning 2, when *a or *b (either may be
 * NULL; the caller's, outliving l) becomes non-zero, and returning 3 after
 * max_wait_secs (> 0; 0: no bound) without a batch. Call before the first
 * next. */
void ctr_loader_set_interrupt(ctr_loader_t *l, const atomic_int *a, const atomic_int *b, double max_wait_secs);
void ctr_loader_release(ctr_loader_t *l, ctr_slot_batch_t *b);
/* Bad records the reader skipped (data.bad_record_limit). */
int64_t ctr_loader_skipped(ctr_loader_t *l);
void ctr_loader_destroy(ctr_loader_t *l); /* NULL ok; stops the thread */

/* Makes sure b->rows[t] and b->row_grads[t] hold nuids[t] rows of dim floats. */
void ctr_slot_batch_reserve_rows(ctr_slot_batch_t *b, int t, int dim);

/* The tower's view of a mapped batch (its rows as filled by the caller). */
static inline tower_ctr_batch_t ctr_slot_batch_view(const ctr_slot_batch_t *b)
{
    return (tower_ctr_batch_t){.n = b->raw.n,
                               .dense = b->raw.dense,
                               .label = b->raw.label,
                               .nslots = b->nslots,
                               .off = b->off,
                               .idx = b->idx,
                               .w = b->w,
                               .rows = (const float *const *)b->rows,
                               .nrows = b->nuids};
}

#endif
