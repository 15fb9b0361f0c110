/* ctr_job.h — the steps of a recommendation (CTR) model inside the trainer's
 * loop (trainer.c): where a dense model's step is tower step + push-pull of
 * the weights, a CTR step is
 *
 *   batch = the loader's next (ids hashed, unique per table: ctr_loader.h)
 *   rows  = pull the batch's rows of every table          (sparse pull)
 *   loss, grads, row_grads = tower_ctr step(params, rows, batch)
 *   push row_grads (riding on the dense push-pull's Batches, or, sync, as
 *   this replica's contribution to the step), then the dense push-pull.
 *
 * Evaluation (the chief at the end, psctl eval, the evaluator) runs the same
 * pull and a forward pass over the test files and reports exact ROC AUC and
 * log loss (ctr_eval.h); scoring a file (predict.h) the same pull and
 * forward pass over its records.
 *
 * One thread (the training thread) uses a job.
 */
#ifndef PSC_CTR_JOB_H
#define PSC_CTR_JOB_H

#include "job_spec.h"
#include "model_spec.h"
#include "ps_client.h"
#include "trainer.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ctr_job ctr_job_t;

typedef struct ctr_job_opts {
    const psc_job_spec_t *spec;
    const psc_var_desc_t *vars;
    int nvars;
    ps_client_t *pc;      /* with the job's tables set (ps_client_set_job_tables) */
    const char *devices;  /* as trainer_opts_t.devices: the first device is the tower's */
    int blas_threads;
    int rank, replicas;   /* this replica's shard of the training files */
    int prefetch;
    const psc_cluster_t *cluster; /* with task: where the PS are (prefetch_rows' default) */
    psc_task_t task;
    int train;            /* 0: evaluation only (no training files opened) */
    int eval_batch;       /* examples per evaluation batch */
    const atomic_int *stop, *finish; /* data.follow: the wait for the next batch ends when either is set */
    int debug_fail_row_pulls;        /* testing: the first N pulls ctr_job_compute makes fail (PSC_EUNAVAILABLE) */
} ctr_job_opts_t;

int ctr_job_create(const ctr_job_opts_t *o, ctr_job_t **out, char *err, size_t errlen);
void ctr_job_destroy(ctr_job_t *j); /* NULL ok */

/* One training batch: reads it, pulls its rows (sync_step >= 0: a sync job
 * at that local step, the rows then include every step before it), runs the
 * tower with the dense weights params: grads gets the dense gradient, the
 * rows' gradients wait for ctr_job_push_*. Returns 0 (examples, loss_sum,
 * epoch set), 1 when the data ran out, 2 (data.follow) when no batch came
 * within half a second or the stop or finish flag ended the wait (the caller
 * does its other duties and calls again), or an error (err); when its pull
 * failed the batch stays the next one, so a call after the trainer's
 * recovery pulls its rows again and trains it. */
int ctr_job_compute(ctr_job_t *j, const float *params, float *grads, int64_t sync_step, int *examples,
                    double *loss_sum, int *epoch, char *err, size_t errlen);
/* Async: the step's row gradients ride on the next dense round
 * (ps_client_round_sparse), and so does the pull of the next batch's rows;
 * call ctr_job_step_done after that round. */
void ctr_job_push_async(ctr_job_t *j);
/* Sync: the step's row gradients as this replica's contribution to
 * local_step on every table part (stale ones counted in *stale). */
int ctr_job_push_sync(ctr_job_t *j, int64_t local_step, int *stale, char *err, size_t errlen);
/* The step's exchange is over, its batch goes back to the loader; ok 0: the
 * round failed (even if recovered), so the next batch's rows are pulled again.
 * data.follow: logs "finished file F (N examples)" for each file whose last
 * example was in the step's batch. */
void ctr_job_step_done(ctr_job_t *j, int ok);
/* Skips `batches` training batches without running them (a resumed replica;
 * data.follow: waiting for files as needed, and logging each file it passes
 * whole). Stops early, returning 0, when the data ends or a flag is set. */
int ctr_job_skip(ctr_job_t *j, int64_t batches, char *err, size_t errlen);
/* The training AUC of the batches since the last call (NAN when one class
 * only), and resets it. */
double ctr_job_period_auc(ctr_job_t *j);
/* Bad records the training reader skipped so far. */
int64_t ctr_job_skipped(ctr_job_t *j);

/* Evaluates the dense weights params and the PS's rows — current, or as
 * committed checkpoint ckpt > 0 holds them — on the test files: res->test_auc,
 * test_loss (mean log loss), test_examples, evaluated. Returns 0,
 * PSC_ENOTFOUND when the spec has no data.test, or an error. */
int ctr_job_evaluate(ctr_job_t *j, const float *params, uint64_t ckpt, trainer_result_t *res, char *err,
                     size_t errlen);

/* Scoring a file (model_job.h's predict_open / predict_next): the spec's
 * data.test, shard of num_shards, in evaluation batches through the same
 * pull and forward pass as ctr_job_evaluate, with params (which must outlive
 * the scoring) and the rows live or of checkpoint ckpt > 0. predict_next: 0
 * with *n examples (0 at the end), *labels and *probs (the sigmoid of each
 * logit), the job's buffers until the next call; or an error. */
int ctr_job_predict_open(ctr_job_t *j, const float *params, uint64_t ckpt, int shard, int num_shards, char *err,
                         size_t errlen);
int ctr_job_predict_next(ctr_job_t *j, int *n, const float **labels, const float **probs, char *err, size_t errlen);

#endif
