/* predict.h — scoring a data file with a job's model: `psctl predict` (each
 * training replica scores its shard of the file, predict_service.h) and the
 * in-cluster `worker --predict FILE` (one scorer, the whole file).
 *
 * A predictor reads FILE as the job spec's data format reads data.test (the
 * spec's data.test replaced by FILE: an IDX prefix, or a Criteo / LIBSVM /
 * TFRecord file name or glob pattern), record-sharded: shard s of N scores
 * examples s, s + N, s + 2N, ... of the file's stream, in order. Every bad
 * record is an error naming the file and the line (record); data.bad_record_limit
 * does not apply, since a skipped record would shift every later line.
 *
 * The model: the live one (its dense weights pulled once, when the predictor
 * is created, from PS that must hold the job's model ready; table rows read
 * as each batch is scored) or committed checkpoint ckpt of the job (one
 * consistent model: every value and row read from the checkpoint on the PS,
 * no restore; an id the job does not keep is refused naming the kept ones).
 * Rows are read, never created; nothing is pushed: the PS do not change.
 *
 * Scores: the evaluation's batches and forward pass (model_job.h); per
 * example its label as the file holds it and the model's probabilities: one
 * (sigmoid) for a recommendation model, one per class (softmax) otherwise.
 *
 * A predictor is used by one thread at a time.
 */
#ifndef PSC_PREDICT_H
#define PSC_PREDICT_H

#include "job_spec.h"
#include "trainer.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef struct predictor predictor_t;

/* Scored examples: labels (n) and probs (n, outputs), caller storage grown
 * by predictor_next; predict_page_free frees it. */
typedef struct predict_page {
    int n;
    int outputs; /* probabilities per example */
    float *labels;
    float *probs;
    int cap;
} predict_page_t;

void predict_page_free(predict_page_t *p);

/* Builds a predictor of spec's job (spec is taken: the predictor owns it,
 * changes its data keys and deinits it, whatever the outcome; *spec is then
 * zeroed) over file for shard of num_shards, from o's cluster, devices and
 * timeouts (o->spec is not read). ckpt 0: the live model, which the PS must
 * hold ready (wait_secs > 0: wait that long for it); else committed
 * checkpoint ckpt of the job. Returns 0, or PSC_ECONFIG (the file does not
 * fit the model), PSC_ENOTFOUND (no such checkpoint, the kept ones named),
 * PSC_ENOTREADY (the PS hold no model of the job), or the PS's or the
 * reader's error, with err saying what. */
int predictor_create(const trainer_opts_t *o, psc_job_spec_t *spec, const char *file, uint64_t ckpt, int shard,
                     int num_shards, double wait_secs, predictor_t **out, char *err, size_t errlen);
/* The job id, the global_step of the model scored (the live model's when it
 * was pulled, or the checkpoint's), probabilities per example, and whether
 * the spec's loss is the sigmoid's. */
const char *predictor_job_id(const predictor_t *p);
int64_t predictor_global_step(const predictor_t *p);
int predictor_outputs(const predictor_t *p);
int predictor_sigmoid(const predictor_t *p);
/* Scores the next max_n (>= 1) examples of the shard into page (page->n
 * fewer only when the shard ends; *done then 1). Returns 0, or the reader's
 * or the PS's error (err: "FILE:LINE: what is wrong"); after an error the
 * predictor returns it again. */
int predictor_next(predictor_t *p, int max_n, predict_page_t *page, int *done, char *err, size_t errlen);
/* Examples scored so far. */
int64_t predictor_examples(const predictor_t *p);
void predictor_destroy(predictor_t *p); /* NULL ok */

/* `worker --predict`: scores the whole of file (shard 0 of 1) with a
 * predictor as above (spec taken) and writes out_path (predict_out.h's
 * lines) through out_path.tmp and a rename; nothing is left behind on
 * failure. *stop (may be NULL) ends it between two pages (PSC_ECANCELLED).
 * *examples: the lines written. Returns 0, or the predictor's error, or
 * PSC_EIO when out_path cannot be written (err says what). */
int predict_file(const trainer_opts_t *o, psc_job_spec_t *spec, const char *file, uint64_t ckpt, double wait_secs,
                 const char *out_path, atomic_int *stop, int64_t *examples, char *err, size_t errlen);

#endif
