/* worker_metrics.c — a training replica's Prometheus metrics (see worker_metrics.h).
 *
 * Thin: handles into the registry plus the examples-per-second window, which
 * sums examples and step seconds until the seconds reach 1 s, then publishes
 * their ratio and starts over. Until the first window fills, every step
 * publishes the ratio so far, so the gauge is meaningful from the first step.
 */
#include "worker_metrics.h"

#include "psc.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW_SECS 1.0

/* runner.h's state names, in its order */
static const char *const job_states[] = {"idle", "running", "succeeded", "failed", "cancelled"};
#define NSTATES ((int)PSC_ARRAY_LEN(job_states))

struct worker_metrics {
    psc_counter_t *steps, *examples, *stale, *retries, *ckpts, *ckpt_failures;
    psc_histogram_t *step_secs, *push_pull_secs;
    psc_gauge_t *examples_per_sec;
    psc_gauge_t *job_state[5]; /* job_states: 1 for the current one */
    pthread_mutex_t lock; /* the window below */
    double win_examples, win_secs;
    int have_full; /* a window filled at least once */
};

worker_metrics_t *worker_metrics_create(psc_metrics_t *m, const char *role)
{
    if (!m) return NULL;
    worker_metrics_t *w = psc_xcalloc(1, sizeof *w);
    const char *const with_role[] = {"role", role, NULL};
    const char *const *labels = role && *role ? with_role : NULL;
    w->steps = psc_metrics_counter(m, "psc_worker_steps_total", "Training steps finished by this replica.", labels);
    w->examples = psc_metrics_counter(m, "psc_worker_examples_total", "Examples this replica trained on.", labels);
    w->step_secs = psc_metrics_histogram(m, "psc_worker_step_seconds", "Time of a whole training step.", labels,
                                         psc_metrics_latency_buckets, PSC_METRICS_LATENCY_NBUCKETS);
    w->push_pull_secs = psc_metrics_histogram(m, "psc_worker_push_pull_seconds",
                                              "Time of a step's gradient push and parameter pull.", labels,
                                              psc_metrics_latency_buckets, PSC_METRICS_LATENCY_NBUCKETS);
    w->examples_per_sec = psc_metrics_gauge(
        m, "psc_worker_examples_per_second",
        "Examples per second of step time over the last window of steps lasting at least 1 s.", labels);
    w->stale = psc_metrics_counter(m, "psc_worker_stale_steps_total",
                                   "Steps whose gradients a sync-replica PS dropped as stale.", labels);
    w->retries = psc_metrics_counter(m, "psc_worker_retries_total",
                                     "RPC retries while parameter servers were unavailable.", labels);
    w->ckpts = psc_metrics_counter(m, "psc_worker_checkpoints_total",
                                   "Checkpoints this chief committed on every PS.", labels);
    w->ckpt_failures = psc_metrics_counter(m, "psc_worker_checkpoint_failures_total",
                                           "Checkpoints this chief tried and could not take.", labels);
    for (int i = 0; i < NSTATES; i++) {
        const char *const both[] = {"role", role, "state", job_states[i], NULL};
        const char *const state[] = {"state", job_states[i], NULL};
        w->job_state[i] = psc_metrics_gauge(m, "psc_worker_job_state",
                                            "1 for the state of this task's current or last job (idle, running, "
                                            "succeeded, failed, cancelled), 0 for the others.",
                                            labels ? both : state);
    }
    psc_gauge_set(w->job_state[0], 1);
    pthread_mutex_init(&w->lock, NULL);
    return w;
}

void worker_metrics_job_state(worker_metrics_t *w, const char *state)
{
    if (!w) return;
    for (int i = 0; i < NSTATES; i++) psc_gauge_set(w->job_state[i], !strcmp(state, job_states[i]));
}

void worker_metrics_destroy(worker_metrics_t *w)
{
    if (!w) return;
    pthread_mutex_destroy(&w->lock);
    free(w);
}

void worker_metrics_step(worker_metrics_t *w, int examples, double step_secs, double push_pull_secs, int stale)
{
    if (!w) return;
    if (examples < 0) examples = 0;
    psc_counter_inc(w->steps);
    psc_counter_add(w->examples, (uint64_t)examples);
    psc_histogram_observe(w->step_secs, step_secs);
    if (push_pull_secs >= 0) psc_histogram_observe(w->push_pull_secs, push_pull_secs);
    if (stale) psc_counter_inc(w->stale);
    if (!(step_secs > 0)) step_secs = 0; /* NaN or negative: adds examples, no time */
    pthread_mutex_lock(&w->lock);
    w->win_examples += examples;
    w->win_secs += step_secs;
    int full = w->win_secs >= WINDOW_SECS;
    if ((full || !w->have_full) && w->win_secs > 0) psc_gauge_set(w->examples_per_sec, w->win_examples / w->win_secs);
    if (full) {
        w->have_full = 1;
        w->win_examples = w->win_secs = 0;
    }
    pthread_mutex_unlock(&w->lock);
}

void worker_metrics_retry(worker_metrics_t *w)
{
    if (w) psc_counter_inc(w->retries);
}

void worker_metrics_checkpoint(worker_metrics_t *w, int ok)
{
    if (w) psc_counter_inc(ok ? w->ckpts : w->ckpt_failures);
}
