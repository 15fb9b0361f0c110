/* reader.h — the one reader of the user's data files, for every kind of
 * model: IDX (the dense models' MNIST-format images and labels), Criteo's
 * click-log TSV, LibSVM and TFRecord files of tf.Example protos, read as a
 * stream (several files per data set, each plain or gzip; a data set larger
 * than memory works), cut into batches of examples.
 *
 * An example is: a label, num_dense dense floats and, for each of num_cat
 * categorical features, a bag of (key, weight) pairs.
 *   idx: the label is the class (0..255 as a float), the dense row the
 *     image's rows * cols pixels scaled to [0, 1] (num_dense from the files'
 *     headers), no categorical features. data.train / data.test is a prefix:
 *     <prefix>-images-idx3-ubyte[.gz] + <prefix>-labels-idx1-ubyte[.gz].
 *   criteo / libsvm / tfrecord: the label is 0 or 1; the dense floats are
 *     transformed as the feature spec says (criteo's I1..I13 by
 *     log(1 + max(x, 0))); criteo's bags are one pair (the 8 hex digits'
 *     value, 1) or none when the field is empty; libsvm one feature
 *     "features" whose pairs are (idx, val); tfrecord an int64 list's
 *     values, or a bytes list's FNV-1a-64 of each value, each with weight 1.
 * Keys become table ids in the model's embedding layers (psc_feature_id_hash).
 *
 * Sharding (data.shard): file — replica r of W reads files r, r+W, ... of the
 * expanded, sorted file list; record — every replica reads every file and keeps
 * records r, r+W, ...; auto — file when there are at least W files, else record
 * (tf.data's AUTO policy). A test set is read whole (shard 0 of 1).
 *
 * Online training (data.follow): data.train is a directory followed as files
 * appear (follow.h: the complete-file rule, name order, replica r's files r,
 * r+W, ...), one epoch whose batches may span files; it ends when no new
 * file came for data.follow.idle_secs, dropping an incomplete last batch.
 * A data.test directory is read as its newest data.test_files files.
 *
 * Bad input: a malformed line or record stops the read with an error naming
 * the file and line (text) or record index and byte offset (binary); with
 * data.bad_record_limit L > 0 up to L of them are skipped and counted
 * (data_reader_skipped), the (L+1)th stops it. Never a crash.
 *
 * Threads: a reader is used by one thread.
 */
#ifndef PSC_DATA_READER_H
#define PSC_DATA_READER_H

#include "job_spec.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* A batch of examples; the reader (re)allocates its arrays, data_batch_free
 * frees them. Example-major: the bag of categorical feature f of example i
 * is keys/weights[off[i * num_cat + f] .. off[i * num_cat + f + 1]), off[0] = 0. */
typedef struct data_batch {
    int n;            /* examples */
    int num_dense;    /* floats per example in dense */
    int num_cat;      /* categorical features */
    float *dense;     /* (n, num_dense) */
    float *label;     /* (n) 0 or 1 */
    int64_t *off;     /* (n * num_cat + 1) */
    uint64_t *keys;   /* (nnz) */
    float *weights;   /* (nnz) */
    int64_t nnz;
    /* capacities (the reader's) */
    int cap_n;
    int64_t cap_nnz;
    int bags;         /* the builder's: bags closed in the example being built */
} data_batch_t;

void data_batch_free(data_batch_t *b);

typedef struct data_reader data_reader_t;

/* Opens spec's training (test 0) or test (test 1) files for replica `shard`
 * of `num_shards` (a test set: pass 0, 1). Expands the glob patterns (sorted;
 * a pattern that matches nothing is an error naming it). epochs passes;
 * shuffle != 0 reorders this shard's files at each epoch from (seed, epoch).
 * Returns 0, or PSC_EIO / PSC_ECONFIG with err naming the file. */
int data_reader_open(const psc_job_spec_t *spec, int test, int shard, int num_shards, uint64_t seed, int shuffle,
                    data_reader_t **out, char *err, size_t errlen);
/* Reads up to max_n examples into b. Returns the number read (> 0), 0 when
 * there is no more data (every epoch done), or a negative PSC_E* code with err
 * "FILE:LINE: what is wrong" (PSC_ECORRUPT for bad data, PSC_EIO for I/O).
 * A batch never spans two epochs. *epoch (may be NULL) gets the batch's epoch,
 * 0-based. */
int data_reader_next(data_reader_t *r, data_batch_t *b, int max_n, int *epoch, char *err, size_t errlen);
/* Bad records skipped so far (data.bad_record_limit). */
int64_t data_reader_skipped(const data_reader_t *r);
/* A followed directory (data.follow): its wait for files ends as soon as
 * *cancel (the caller's, outliving r) is non-zero; data_reader_next then
 * fails with PSC_ECANCELLED. */
void data_reader_set_cancel(data_reader_t *r, const atomic_int *cancel);
/* The files the last data_reader_next read to their end: one line "PATH\tN\n"
 * each, N the examples this reader took from it ("" when none). A file whose
 * last example ends a batch is listed with that batch. Valid until the next
 * call; the reader's. */
const char *data_reader_files_done(const data_reader_t *r);
/* Files this reader reads per epoch. */
int data_reader_num_files(const data_reader_t *r);
/* Floats in an example's dense row (idx: the files' rows * cols). */
int data_reader_num_dense(const data_reader_t *r);
void data_reader_close(data_reader_t *r); /* NULL ok */

/* Keys become ids by psc_feature_id_hash (table.h) or as themselves. */

#endif
