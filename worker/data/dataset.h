/* dataset.h — a dense model's data set, held in memory, and its input pipeline.
 *
 * dataset_read reads a job's data.train or data.test whole through the data
 * reader (reader.h: idx, <prefix>-images-idx3-ubyte[.gz] and
 * <prefix>-labels-idx1-ubyte[.gz], pixels scaled to [0, 1] floats, labels as
 * classes). The set is held in memory because the loader reshuffles every
 * example of a shard at each epoch, which a stream reader (files reordered,
 * records in file order) cannot do.
 *
 * The loader gives replica `shard` of `num_shards` the examples shard, shard+W, ...
 * (tf.data's shard), reshuffles that list at the start of every epoch from
 * (seed, epoch), cuts it into batches (the last one of an epoch may be smaller) and
 * fills them ahead of time on a prefetch thread. Deterministic for a given seed.
 *
 * Threads: a data set is read-only once loaded; a loader is used by one thread
 * (its prefetch thread is its own).
 */
#ifndef PSC_DATASET_H
#define PSC_DATASET_H

#include "job_spec.h"

#include <stddef.h>
#include <stdint.h>

typedef struct dataset {
    int64_t n;            /* examples */
    int features;         /* floats per example (idx: rows * cols) */
    float *x;             /* (n, features) in [0, 1], owned */
    int32_t *y;           /* (n) labels 0..num_classes-1, owned */
    int num_classes;      /* max label + 1 */
} dataset_t;

/* Reads spec's training (test 0: data.train, at most data.train_examples) or
 * test (test 1) set. Returns 0, or the reader's PSC_ECONFIG / PSC_EIO /
 * PSC_ECORRUPT with err naming the file and the problem. */
int dataset_read(const psc_job_spec_t *spec, int test, dataset_t *out, char *err, size_t errlen);
void dataset_deinit(dataset_t *d);

typedef struct dataset_loader dataset_loader_t;

typedef struct dataset_batch {
    const float *x;   /* (n, features) */
    const int32_t *y; /* (n) */
    int n;
    int epoch;        /* 0-based */
    int64_t step_in_epoch;
} dataset_batch_t;

/* Starts a loader over `ds` (which must outlive it). prefetch >= 1 batches are
 * prepared ahead on a thread. shuffle 0 keeps the shard's examples in order
 * every epoch (deterministic data order, e.g. to compare sync training with one
 * big batch). Returns NULL (err set) if the shard is empty. */
dataset_loader_t *dataset_loader_create(const dataset_t *ds, int shard, int num_shards, int batch_size, uint64_t seed,
                                        int shuffle, int epochs, int prefetch, char *err, size_t errlen);
/* Next batch; its buffers stay valid until the next dataset_loader_next call. Returns 0,
 * or 1 when all epochs are done. */
int dataset_loader_next(dataset_loader_t *l, dataset_batch_t *b);
/* Batches per epoch of this shard: ceil(shard_size / batch_size). */
int64_t dataset_loader_steps_per_epoch(const dataset_loader_t *l);
int64_t dataset_loader_shard_size(const dataset_loader_t *l);
void dataset_loader_destroy(dataset_loader_t *l); /* NULL ok; stops the thread */

#endif
