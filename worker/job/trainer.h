/* trainer.h — a training replica's whole job: build the model and its tower,
 * (chief) initialize the variables on the PS or join them, run the loop
 * pull → forward → backward → push over this replica's shard of the data, and
 * (chief) wait for the other replicas, evaluate on the test set and stop the PS.
 *
 * Runs on the calling thread until the job ends, fails or *stop becomes non-zero.
 */
#ifndef PSC_TRAINER_H
#define PSC_TRAINER_H

#include "job_spec.h"
#include "tf_config.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* What a running job has done so far; the trainer writes it under lock, psctl
 * reads it through JobStatus. */
typedef struct trainer_progress {
    pthread_mutex_t lock;
    int phase;               /* 0 starting, 1 training, 2 finishing (waiting, evaluating) */
    int epoch, epochs;       /* epoch 1-based */
    int64_t step, max_steps, global_step;
    double loss, accuracy, examples_per_sec;
    int has_loss;            /* loss and accuracy are measured (a progress period ended) */
    int has_auc;             /* a recommendation model: auc (the period's training AUC) instead of accuracy */
    double auc;
    int checkpoints;         /* chief: checkpoints committed on every PS */
    int checkpoint_failures; /* chief: checkpoints tried and not taken */
    char checkpoint_error[640]; /* the last such failure */
} trainer_progress_t;

typedef struct trainer_opts {
    const psc_job_spec_t *spec;
    const psc_cluster_t *cluster;
    psc_task_t task;
    double wait_model_secs;   /* non-chief: bound on waiting for the chief's model (default 120) */
    double wait_workers_secs; /* chief: bound on waiting for the other replicas to finish (default 600) */
    int rpc_timeout_ms;       /* deadline of each RPC (default 30000) */
    double retry_secs;        /* how long to ride out unavailable PS before failing (default 300) */
    const char *restore_from; /* chief: ps_servers outside the cluster to restore from (ps_client_set_restore_sources) */
    double log_every_secs;    /* progress line period (default 5) */
    int prefetch;             /* batches prepared ahead (default 2) */
    int debug_step_delay_ms;  /* testing: sleep this long in every step (a slow replica) */
    int debug_fail_row_pulls; /* testing: a recommendation job's first N row pulls of a step fail as if unavailable */
    const char *devices;      /* towers: "cpu", "cpu,cpu", "gpu:0,gpu:1", "gpu"; NULL = every GPU, else CPU */
    int blas_threads;         /* CPU towers: threads (0: the host share, cpu_share.h; several CPU towers use 1 each) */
    int batch_bytes;          /* ps_client_set_batch_bytes (-1: the default, PSC_BATCH_TENSOR_BYTES) */
    int shutdown_ps;          /* chief: tell every PS to exit at the end (in-cluster mode) */
    atomic_int *stop;         /* set to non-zero (any thread) to stop early (SIGTERM, a cancel); may be NULL */
    atomic_int *finish;       /* a followed directory's job (data.follow): non-zero ends it at the next step as
                                 if its data had ended (psctl stop: final checkpoint, evaluation); may be NULL */
    struct chief_mailbox *chief_mailbox; /* chief: psctl checkpoint requests (chief_mailbox.h); may be NULL */
    trainer_progress_t *progress; /* may be NULL */
    const char *logdir;       /* chief and evaluator: TensorBoard event files here (NULL: none) */
    struct worker_metrics *metrics; /* Prometheus series (worker_metrics.h); NULL: off */
    int checkpoint_on_cancel; /* chief: a cancelled job checkpoints the model as it is (standalone mode) */
    struct failures *failures; /* failure reports (chief) and this task's abort (failures.h); may be NULL */
} trainer_opts_t;

typedef struct trainer_result {
    int64_t steps;            /* steps this replica ran */
    int64_t global_step;      /* global_step after its last step */
    double examples_per_sec;  /* this replica's training throughput */
    float last_loss;          /* mean loss of the last progress period */
    int64_t stale_steps;      /* sync: steps whose contribution the PS dropped as stale */
    int evaluated;            /* chief: the test set was evaluated */
    double test_accuracy;     /* recommendation models: at the 0.5 threshold */
    double test_loss;         /* recommendation models: log loss */
    int has_auc;              /* a recommendation model: test_auc holds its exact ROC AUC */
    double test_auc;
    int64_t test_examples;
    int config_error;         /* failed: the job's configuration cannot run (PSC_ECONFIG: e.g. its warm start) */
} trainer_result_t;

/* Fills defaults into o (zeros become the documented defaults). */
void trainer_opts_defaults(trainer_opts_t *o);
/* Runs the job. Returns 0, PSC_ECANCELLED when stopped, or an error with err
 * set (PSC_EJOBFAILED: another replica failed or did not finish). When the
 * chief's job fails it stops every other task (failures_stop_others), takes a
 * checkpoint only when the spec asks (checkpoint.on_failure), and with
 * shutdown_ps tells the PS to exit (not when the final checkpoint failed);
 * a cancelled chief with checkpoint_on_cancel checkpoints the model as it is. */
int trainer_run(const trainer_opts_t *o, trainer_result_t *res, char *err, size_t errlen);

#endif
