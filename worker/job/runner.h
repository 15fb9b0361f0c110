/* runner.h — a worker daemon's current job in standalone-client mode: the
 * daemon starts with no job spec and waits; a job arrives as job spec JSON
 * (the chief from psctl through Submit, the other workers from the chief
 * through Start), runs on its own thread (trainer_run), and can be cancelled;
 * then the daemon waits for the next one.
 *
 * Thread-safe: RPC handlers start, cancel and query; the job thread runs.
 */
#ifndef PSC_RUNNER_H
#define PSC_RUNNER_H

#include "trainer.h"

#include <stddef.h>

typedef struct runner runner_t;

typedef enum { RUNNER_IDLE, RUNNER_RUNNING, RUNNER_SUCCEEDED, RUNNER_FAILED, RUNNER_CANCELLED } runner_state_t;

typedef struct runner_status {
    runner_state_t state;
    char job_id[17];
    trainer_progress_t progress; /* its lock is not used in the copy */
    double elapsed_secs;
    trainer_result_t result;     /* succeeded: the outcome (chief: the evaluation) */
    char error[1024];            /* failed: why */
} runner_status_t;

/* base: the daemon's trainer options (cluster, task, flags); spec, stop and
 * progress are filled per job. Copied. */
runner_t *runner_create(const trainer_opts_t *base);
/* Cancels a running job, waits for its thread. NULL ok. */
void runner_destroy(runner_t *r);
/* Starts a job from spec JSON; a job being cancelled is waited for (up to
 * 60 s). PSC_ENOTREADY when a job is running (err names it), PSC_EINVAL or
 * PSC_ECONFIG when the spec is bad (err names the key). *job_id (17 bytes,
 * may be NULL) gets the new job's id. */
int runner_start(runner_t *r, const char *spec_json, char *job_id, char *err, size_t errlen);
/* psctl stop: asks the running job to stop at its next step (no-op when
 * none); returns 1 if one was running and is cancelled, 2 if it finishes
 * instead (a followed directory's training job, data.follow: as if its files
 * had ended: final checkpoint, evaluation, "succeeded"; a second call
 * cancels it), 0 if none was running. */
int runner_cancel(runner_t *r);
/* Cancels the running job at its next step whatever it is (a failed job, the
 * daemon stopping); 1 if one was running. */
int runner_cancel_now(runner_t *r);
/* A snapshot of the current (or last) job. */
void runner_status(runner_t *r, runner_status_t *out);
/* Evaluates the current weights of the running or last job (ckpt 0), or its
 * committed checkpoint ckpt, on its test set (evaluator.h), on the calling
 * thread; *global_step = the step evaluated. PSC_ENOTFOUND when there was no
 * job, or ckpt is not one of its committed checkpoints. */
int runner_evaluate(runner_t *r, uint64_t ckpt, trainer_result_t *res, int64_t *global_step, char *err,
                    size_t errlen);
/* Runs one job of this task (o->spec) on the calling thread, in either mode:
 * the trainer or the evaluator. A task other than the chief whose job fails
 * reports the error to the chief (failures.h); a job the chief stopped because
 * the job failed ends RUNNER_FAILED with the chief's reason in err. Sets the
 * job state metric. Returns the job's end state. */
runner_state_t runner_run_task(const trainer_opts_t *o, trainer_result_t *res, char *err, size_t errlen);
/* The job spec JSON of the running or last job (malloc'd, the caller
 * frees), or NULL when no job has run. */
char *runner_spec_json(runner_t *r);
/* Waits until no job runs. */
void runner_wait(runner_t *r);
const char *runner_state_name(runner_state_t s);

#endif
