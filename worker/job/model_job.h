/* model_job.h — one interface for the kinds of model a job trains, as the
 * towers have one for their backends (tower.h; ggml's backend table): the
 * trainer (trainer.c) and the evaluator (evaluator.c) call only this, and
 * model_job_create is the one place that looks at which kind the spec asks for:
 *
 *   dense           (dense_job.c) an image model on IDX files: the data
 *                   loaded whole, a shard per replica reshuffled each epoch,
 *                   towers over the devices (tower_group.h); accuracy
 *   recommendation  (ctr_job.c) a click model on streamed Criteo / LIBSVM /
 *                   TFRecord files: a batch's table rows pulled from the PS,
 *                   the CTR tower, the rows' gradients pushed; AUC
 *
 * A step, for either kind:
 *
 *   compute(params) -> grads          forward and backward on the step's batches
 *   push_sync(step) | push_async()    the kind's own part of the exchange (rows)
 *   ... the trainer's dense push-pull ...
 *   step_done(ok)                     the exchange is over
 *
 * One thread (the training thread, or the evaluating one) uses a job.
 */
#ifndef PSC_MODEL_JOB_H
#define PSC_MODEL_JOB_H

#include "job_spec.h"
#include "model_spec.h"
#include "ps_client.h"
#include "tf_config.h"
#include "trainer.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef struct model_job model_job_t;

typedef struct model_job_opts {
    const psc_job_spec_t *spec;
    const psc_var_desc_t *vars; /* the model's variables (psc_model_variables) */
    int nvars;
    int64_t nparams;            /* floats in params and grads (tower_layout) */
    ps_client_t *pc;            /* with the job's tables set (ps_client_set_job_tables) */
    const psc_cluster_t *cluster;
    psc_task_t task;
    const char *devices;        /* as trainer_opts_t.devices */
    int blas_threads;
    int rank, replicas;         /* this replica's shard of the training data */
    int per_step;               /* batches a step sums (sync with R > N), else 1 */
    int prefetch;
    int train;                  /* this task trains (reads its shard of the training data) */
    int test;                   /* this task evaluates (reads the test data) */
    int eval_batch;             /* examples per evaluation batch */
    int debug_fail_row_pulls;   /* testing: trainer_opts_t's */
    const atomic_int *stop, *finish; /* trainer_opts_t's: a followed directory's wait for files ends on either */
} model_job_opts_t;

/* What one compute did: batches 0 when the data ran out before it, or, with
 * waiting set, when a followed directory's next batch has not come yet. */
typedef struct model_step {
    int batches, examples;
    int waiting;     /* data.follow: no batch yet; compute again (after the loop's other duties) */
    double loss_sum; /* summed over the examples */
    int epoch;       /* 1-based epoch of the last batch */
} model_step_t;

typedef struct model_job_ops {
    const char *metric; /* the training metric the progress lines show: "accuracy" or "auc" */
    /* Opens the training data: *max_steps this replica's steps (0: not known ahead); logs what it trains on. */
    int (*start)(model_job_t *j, int64_t *max_steps, char *err, size_t errlen);
    /* The steps of replica rank's share, as that replica counts them (0: not known ahead). */
    int64_t (*share_steps)(const model_job_t *j, int rank);
    /* The step's batches on params: their summed gradient in grads. Returns 0 (out set; out->batches 0: the
     * data ran out), or an error (err). */
    int (*compute)(model_job_t *j, const float *params, float *grads, int64_t sync_step, model_step_t *out,
                   char *err, size_t errlen);
    /* Sync: the kind's own contribution to local_step, before the dense one (NULL: none). */
    int (*push_sync)(model_job_t *j, int64_t local_step, int *stale, char *err, size_t errlen);
    /* Async: what rides on the next dense round (NULL: nothing). */
    void (*push_async)(model_job_t *j);
    /* The step's exchange is over; ok 0: its round failed (even if recovered). NULL: nothing to do. */
    void (*step_done)(model_job_t *j, int ok);
    /* Async: waits for what the job still sends beside the steps (pushes of a step already done), before
     * the replica reports it is done or the chief checkpoints a job that ends. NULL: nothing to wait for. */
    void (*drain)(model_job_t *j);
    /* Passes over `steps` steps' batches without running them (a resumed replica). */
    int (*skip)(model_job_t *j, int64_t steps, char *err, size_t errlen);
    /* The training metric since the last call (NAN when not measurable), and resets it. */
    double (*period_metric)(model_job_t *j);
    /* Bad records the training data skipped so far. */
    int64_t (*bad_records)(const model_job_t *j);
    /* Evaluates params (and the PS's tables: live, or as committed checkpoint ckpt > 0 holds them) on the
     * test data: res->test_*. PSC_ENOTFOUND: no test data. */
    int (*evaluate)(model_job_t *j, const float *params, uint64_t ckpt, trainer_result_t *res, char *err,
                    size_t errlen);
    /* Scoring a file (predict.h), with the evaluation's batches and forward pass. predict_open starts reading
     * the job spec's data.test (the caller's spec names the file there) for shard `shard` of num_shards
     * (examples shard, shard + num_shards, ...: record sharding), scored with params (kept by the job until
     * destroy) and the PS's tables, live or (ckpt > 0) as committed checkpoint ckpt holds them; *outputs gets
     * the probabilities per example (1: sigmoid; the classes: softmax). Once per job. 0, or an error naming
     * the file (its examples do not fit the model). */
    int (*predict_open)(model_job_t *j, const float *params, uint64_t ckpt, int shard, int num_shards, int *outputs,
                        char *err, size_t errlen);
    /* The next batch of that shard scored: 0 with *n examples (0: the shard is done), *labels (n) as the file
     * holds them and *probs (n, outputs); the buffers are the job's, valid until the next call. Or an error
     * naming the file and the record. */
    int (*predict_next)(model_job_t *j, int *n, const float **labels, const float **probs, char *err, size_t errlen);
    void (*destroy)(model_job_t *j);
} model_job_ops_t;

/* Every kind's job starts with this. */
struct model_job {
    const model_job_ops_t *ops;
};

/* The options every caller fills alike, from a task's trainer options: the
 * spec, the model, the PS client, the devices, the evaluation batch; one
 * replica of one, a batch a step, neither training nor evaluating (the
 * caller sets rank, replicas, per_step, prefetch, train and test). */
model_job_opts_t model_job_opts_of(const trainer_opts_t *o, const psc_var_desc_t *vars, int nvars, int64_t nparams,
                                   ps_client_t *pc);
/* The job of spec's kind (o is copied; what it points to must outlive the
 * job). 0, or PSC_ECONFIG / the loader's or the towers' error (err). */
int model_job_create(const model_job_opts_t *o, model_job_t **out, char *err, size_t errlen);
void model_job_destroy(model_job_t *j); /* NULL ok */

/* The kinds (model_job_create's choice). */
int dense_job_create(const model_job_opts_t *o, model_job_t **out, char *err, size_t errlen);
int ctr_job_model_create(const model_job_opts_t *o, model_job_t **out, char *err, size_t errlen);

#endif
