/* worker_metrics.h — a training replica's Prometheus metrics.
 *
 * The trainer counts its steps here; the registry (common/metrics.h) is the
 * process's, made in main() and served on the worker's metrics port. Series
 * (each with the constant label role="<role>", e.g. "chief" or "worker", when a
 * role is given):
 *   psc_worker_steps_total             training steps finished
 *   psc_worker_examples_total          examples trained on
 *   psc_worker_step_seconds            histogram: a whole step (input, forward/backward,
 *                                      push-pull), as the trainer measures it
 *   psc_worker_push_pull_seconds       histogram: the step's exchange with the PS
 *   psc_worker_examples_per_second     gauge: examples / step time over the last window of
 *                                      steps whose step times add up to >= 1 s (so pauses
 *                                      between steps, evaluation or a checkpoint, do not
 *                                      lower it); before the first full window, over the
 *                                      steps so far
 *   psc_worker_stale_steps_total       steps whose gradients a sync PS dropped as stale
 *   psc_worker_retries_total           RPC retries while riding out unavailable PSes
 *   psc_worker_checkpoints_total       (chief) checkpoints committed on every PS
 *   psc_worker_checkpoint_failures_total (chief) checkpoints tried and not taken
 *   psc_worker_job_state{state=S}      gauge: 1 for the state S of this task's current or last
 *                                      job (idle, running, succeeded, failed, cancelled), else 0
 * Every series exists (at 0) from worker_metrics_create on.
 *
 * Threads: any thread may call worker_metrics_step and worker_metrics_retry
 * (counters and histograms are lock-free; the rate window takes a private
 * mutex no other code holds). A NULL worker_metrics_t makes every call a
 * no-op, so the trainer needs no "metrics on?" test.
 */
#ifndef PSC_WORKER_METRICS_H
#define PSC_WORKER_METRICS_H

#include "metrics.h"

typedef struct worker_metrics worker_metrics_t;

/* Registers the series above on m (the caller's; it must outlive the result).
 * role: the value of the "role" label, copied; NULL or "": no label. NULL m
 * returns NULL (metrics off). Aborts on a bad label value only through a bug. */
worker_metrics_t *worker_metrics_create(psc_metrics_t *m, const char *role);
/* Frees w (its series stay in the registry until psc_metrics_destroy). NULL ok. */
void worker_metrics_destroy(worker_metrics_t *w);

/* One finished step: `examples` trained on (>= 0), the whole step's seconds,
 * the push-pull's seconds (< 0: not measured, not observed), and whether the
 * PS reported the step's gradients stale (nonzero). */
void worker_metrics_step(worker_metrics_t *w, int examples, double step_secs, double push_pull_secs, int stale);
/* One retry of an RPC to an unavailable PS. */
void worker_metrics_retry(worker_metrics_t *w);
/* This task's job is now in state (one of the names above). */
void worker_metrics_job_state(worker_metrics_t *w, const char *state);
/* The chief tried a checkpoint: committed on every PS (ok) or not taken. */
void worker_metrics_checkpoint(worker_metrics_t *w, int ok);

#endif
