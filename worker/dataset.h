/* dataset.h — IDX data sets (MNIST format, plain or .gz) and the input pipeline.
 *
 * idx_load reads <prefix>-images-idx3-ubyte[.gz] and <prefix>-labels-idx1-ubyte[.gz]
 * (the .gz is tried first), checks magic numbers, dimensions and label range, and
 * scales pixels to [0, 1] floats.
 *
 * The loader gives replica `shard` of `num_shards` the examples shard, shard+W, ...
 * (tf.data's shard), reshuffles that list at the start of every epoch from
 * (seed, epoch), cuts it into batches (the last one of an epoch may be smaller) and
 * fills them ahead of time on a prefetch thread. Deterministic for a given seed.
 */
#ifndef PSC_DATASET_H
#define PSC_DATASET_H

#include <stddef.h>
#include <stdint.h>

typedef struct psc_dataset {
    int64_t n;            /* examples */
    int rows, cols;       /* image size; features = rows * cols */
    int features;
    float *x;             /* (n, features) in [0, 1], owned */
    int32_t *y;           /* (n) labels 0..num_classes-1, owned */
    int num_classes;      /* max label + 1 */
} psc_dataset_t;

/* Loads an IDX pair. limit > 0 keeps only the first `limit` examples.
 * Returns 0 or PSC_EIO / PSC_ECORRUPT with err naming the file and the problem. */
int idx_load(const char *images_path, const char *labels_path, int64_t limit, psc_dataset_t *out, char *err,
             size_t errlen);
/* Loads the pair for a prefix such as /usr/share/datasets/fashion-mnist/train. */
int psc_dataset_load(const char *prefix, int64_t limit, psc_dataset_t *out, char *err, size_t errlen);
void psc_dataset_deinit(psc_dataset_t *d);

typedef struct psc_loader psc_loader_t;

typedef struct psc_batch {
    const float *x;   /* (n, features) */
    const int32_t *y; /* (n) */
    int n;
    int epoch;        /* 0-based */
    int64_t step_in_epoch;
} psc_batch_t;

/* Starts a loader over `ds` (which must outlive it). prefetch >= 1 batches are
 * prepared ahead on a thread. shuffle 0 keeps the shard's examples in order
 * every epoch (deterministic data order, e.g. to compare sync training with one
 * big batch). Returns NULL (err set) if the shard is empty. */
psc_loader_t *loader_create(const psc_dataset_t *ds, int shard, int num_shards, int batch_size, uint64_t seed,
                            int shuffle, int epochs, int prefetch, char *err, size_t errlen);
/* Next batch; its buffers stay valid until the next loader_next call. Returns 0,
 * or 1 when all epochs are done. */
int loader_next(psc_loader_t *l, psc_batch_t *b);
/* Batches per epoch of this shard: ceil(shard_size / batch_size). */
int64_t loader_steps_per_epoch(const psc_loader_t *l);
int64_t loader_shard_size(const psc_loader_t *l);
void loader_destroy(psc_loader_t *l); /* NULL ok; stops the thread */

#endif
