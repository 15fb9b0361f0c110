/* chief.h — the chief's duties beside training (MonitoredTrainingSession's
 * chief): make the model ready on the PS (join, restore or initialize), take
 * checkpoints on a schedule and on request (psctl checkpoint), put a lost
 * shard back when a PS restarts, and at the end wait for the other replicas,
 * take the final checkpoint and stop the PS.
 *
 * Checkpoint ids are unique across every job that shares the PS's stores: a
 * new schedule starts above the largest id any PS holds, of any job.
 * Failures: a periodic checkpoint that fails (a PS that dies during it
 * included) is counted (the job's status,
 * psc_worker_checkpoint_failures_total) and tried again at the next period;
 * a requested one fails its request with the PS's own status code; a final
 * one that fails fails the job (chief_finish's return), and the chief's log
 * says what to do.
 *
 * One thread (the training thread) calls everything here.
 */
#ifndef PSC_CHIEF_H
#define PSC_CHIEF_H

#include "chief_mailbox.h"
#include "failures.h"
#include "model_spec.h"
#include "ps_client.h"
#include "trainer.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef struct chief chief_t;

typedef struct chief_opts {
    const psc_job_spec_t *spec;
    const psc_var_desc_t *vars; /* the model's variables (psc_model_variables) */
    int nvars;
    const psc_cluster_t *cluster;
    double wait_workers_secs;    /* bound on waiting for the other replicas at the end */
    atomic_int *stop;            /* non-zero: stop waiting; may be NULL */
    chief_mailbox_t *requests;   /* checkpoint requests from psctl (opened here, drained, closed); may be NULL */
    trainer_progress_t *progress; /* checkpoint counters go here; may be NULL */
    struct worker_metrics *metrics; /* may be NULL */
    int shutdown_ps;             /* tell every PS to exit at the end (in-cluster mode) */
    failures_t *failures;        /* the other tasks' failure reports (failures.h); may be NULL */
    const int64_t *expected_steps; /* per replica rank: the steps of its share (0: not known ahead); may be NULL */
} chief_opts_t;

/* Accepts checkpoint requests for this job from now on (they are served once
 * the schedule starts). o is copied; what it points to must outlive the chief. */
chief_t *chief_create(const chief_opts_t *o, ps_client_t *pc);
/* Fails the requests still waiting with why (the job ended without serving
 * them) and refuses later ones until the next job. NULL ok. */
void chief_destroy(chief_t *c, const char *why);

/* Makes the model ready on every PS: joins it when the PS hold it, else
 * restores the latest committed checkpoint, else initializes it from params
 * (seeded initial values, tower_init_params). params is scratch afterwards.
 * Returns 0 or the PS's error (retryable ones: see trainer.c's recover). */
int chief_create_model(chief_t *c, float *params, ps_model_origin_t *origin, char *err, size_t errlen);
/* Starts the checkpoint schedule at global_step (after the first pull). */
void chief_start_schedule(chief_t *c, int64_t global_step);
/* After each step: a periodic checkpoint when one is due, then the requests
 * that are waiting. */
void chief_after_step(chief_t *c, int64_t global_step);
/* Declares the model again on every PS after one lost it (lost_ps, or -1:
 * unknown): restores the latest checkpoint everywhere, or re-initializes only
 * the lost shards when there is none, and logs which. params is scratch.
 * Returns 0 or the PS's error. */
int chief_redeclare_model(chief_t *c, int lost_ps, float *params, char *err, size_t errlen);
/* When a PS answers without this job's model (it restarted), declares the
 * model again on every PS, which restores the latest checkpoint everywhere.
 * Returns 1 when it put something back. */
int chief_restore_lost_model(chief_t *c, float *params);
/* The end of training, before the final pull: waits until every other
 * replica reported done, bounded by wait_workers_secs, restoring a lost shard
 * meanwhile. A replica that is unreachable (killed, its node lost) is waited
 * for all the same: it may be restarting, and a restarted replica resumes its
 * share. Returns 0 when every replica finished (or, with the spec's
 * allow_partial, when the wait is over); PSC_EJOBFAILED when a replica
 * reported a failure, or when the wait ran out (err names each replica that
 * did not finish and the steps it trained: "replica 1 (worker 1) trained 0 of
 * 313 steps"); PSC_ECANCELLED when stopped. */
int chief_wait_workers(chief_t *c, float *params, int self_rank, char *err, size_t errlen);
/* A checkpoint of the model as it is at global_step (a cancelled job; a failed
 * one whose spec asks for it), unless the newest committed one is at that
 * step or checkpoints are off; a failure is logged and counted. */
void chief_checkpoint_as_is(chief_t *c, int64_t global_step, const char *why);
/* The id of the last checkpoint this chief took (0: none yet): a change
 * after chief_after_step means it committed one. */
uint64_t chief_last_checkpoint(const chief_t *c);
/* 1 when the final checkpoint failed: the PS then keep the only copy of the
 * trained model and must not be told to exit. NULL: 0. */
int chief_keeps_ps(const chief_t *c);
/* Then, with the final weights in params at global_step: takes the final
 * checkpoint, closes the requests, evaluates (eval(eval_ctx, params, res):
 * the test set; PSC_ENOTFOUND from it: nothing to evaluate), logs every PS's
 * counters and, with shutdown_ps, stops the PS (not when the final checkpoint
 * failed: the PS then keep the only copy of the trained model). Returns 0, or
 * the failure (err) of the final checkpoint or the evaluation; res holds the
 * evaluation whenever it ran. */
typedef int (*chief_eval_fn)(void *ctx, float *params, trainer_result_t *res, char *err, size_t errlen);
int chief_finish(chief_t *c, int64_t global_step, chief_eval_fn eval, void *eval_ctx, float *params,
                 trainer_result_t *res, char *err, size_t errlen);

#endif
