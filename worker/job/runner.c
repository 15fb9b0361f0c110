/* runner.c — see runner.h. */
#include "runner.h"

#include "evaluator.h"
#include "failures.h"
#include "log.h"
#include "psc.h"
#include "worker_metrics.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct runner {
    trainer_opts_t base;
    pthread_mutex_t lock; /* guards the fields below */
    runner_state_t state;
    int have_thread; /* a job thread exists (running or not yet joined) */
    pthread_t thread;
    psc_job_spec_t spec; /* the current job's spec (valid while have_spec) */
    int have_spec;
    char *spec_json; /* its text (psctl eval parses a private copy) */
    atomic_int stop; /* the job's trainer_opts_t.stop: set by runner_cancel, read by the job thread */
    atomic_int finish; /* the job's trainer_opts_t.finish: runner_cancel on a followed directory's job */
    double started, ended;
    trainer_progress_t progress;
    trainer_result_t result;
    char error[1024];
};

const char *runner_state_name(runner_state_t s)
{
    static const char *const names[] = {"idle", "running", "succeeded", "failed", "cancelled"};
    return (unsigned)s < PSC_ARRAY_LEN(names) ? names[s] : "unknown";
}

runner_t *runner_create(const trainer_opts_t *base)
{
    runner_t *r = psc_xcalloc(1, sizeof *r);
    r->base = *base;
    pthread_mutex_init(&r->lock, NULL);
    pthread_mutex_init(&r->progress.lock, NULL);
    return r;
}

runner_state_t runner_run_task(const trainer_opts_t *o, trainer_result_t *res, char *err, size_t errlen)
{
    failures_open(o->failures, o->spec->job_id);
    worker_metrics_job_state(o->metrics, runner_state_name(RUNNER_RUNNING));
    int rc = o->task.type == PSC_JOB_EVALUATOR ? evaluator_run(o, res, err, errlen) : trainer_run(o, res, err, errlen);
    runner_state_t st = RUNNER_FAILED;
    char why[1024];
    res->config_error = rc == PSC_ECONFIG;
    if (rc == 0) {
        st = RUNNER_SUCCEEDED;
    } else if (failures_aborted(o->failures, why, sizeof why)) { /* the chief stopped the job: it failed */
        snprintf(err, errlen, "%s", why);
    } else if (rc == PSC_ECANCELLED || (o->stop && atomic_load(o->stop))) {
        st = RUNNER_CANCELLED;
    } else if (!psc_task_is_chief(o->cluster, o->task)) { /* the chief fails the job (or, the evaluator, shows it) */
        failures_report(o->cluster, o->task, o->spec->job_id, err, PSC_MIN(o->rpc_timeout_ms, 10000), 0);
    }
    worker_metrics_job_state(o->metrics, runner_state_name(st));
    return st;
}

static void *job_main(void *arg)
{
    runner_t *r = arg;
    trainer_opts_t o = r->base;
    o.spec = &r->spec;
    o.stop = &r->stop;
    o.finish = &r->finish;
    o.progress = &r->progress;
    o.shutdown_ps = 0; /* standalone: the cluster outlives the job */
    o.checkpoint_on_cancel = 1;
    trainer_result_t res;
    char err[1024] = "";
    PSC_INFO("job %s started", r->spec.job_id);
    runner_state_t st = runner_run_task(&o, &res, err, sizeof err);
    pthread_mutex_lock(&r->lock);
    r->result = res;
    r->ended = psc_now();
    r->state = st;
    if (st != RUNNER_SUCCEEDED) snprintf(r->error, sizeof r->error, "%s", err);
    pthread_mutex_unlock(&r->lock);
    if (st == RUNNER_SUCCEEDED)
        PSC_INFO("job %s succeeded%s", r->spec.job_id, res.evaluated ? "" : " (this replica)");
    else if (st == RUNNER_CANCELLED)
        PSC_INFO("job %s cancelled", r->spec.job_id);
    else
        PSC_ERROR("job %s failed: %s", r->spec.job_id, err);
    PSC_INFO("waiting for a job (psctl train)");
    return NULL;
}

/* Joins a finished job thread (lock held). */
static void reap_locked(runner_t *r)
{
    if (r->have_thread && r->state != RUNNER_RUNNING) {
        pthread_join(r->thread, NULL);
        r->have_thread = 0;
    }
}

int runner_start(runner_t *r, const char *spec_json, char *job_id, char *err, size_t errlen)
{
    psc_job_spec_t spec;
    int rc = psc_job_spec_parse(spec_json, &spec, err, errlen);
    if (rc) return rc;
    pthread_mutex_lock(&r->lock);
    /* a job being cancelled ends at its next step: give it that long */
    for (int i = 0; i < 1200 && r->state == RUNNER_RUNNING && atomic_load(&r->stop); i++) {
        pthread_mutex_unlock(&r->lock);
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&r->lock);
    }
    if (r->state == RUNNER_RUNNING) {
        rc = psc_seterr(err, errlen, PSC_ENOTREADY, "job %s is running (psctl stop cancels it)", r->spec.job_id);
        pthread_mutex_unlock(&r->lock);
        psc_job_spec_deinit(&spec);
        return rc;
    }
    reap_locked(r);
    if (r->have_spec) psc_job_spec_deinit(&r->spec);
    r->spec = spec;
    r->have_spec = 1;
    free(r->spec_json);
    r->spec_json = psc_xstrdup(spec_json);
    r->state = RUNNER_RUNNING;
    atomic_store(&r->stop, 0);
    atomic_store(&r->finish, 0);
    r->started = psc_now();
    r->ended = 0;
    r->error[0] = '\0';
    memset(&r->result, 0, sizeof r->result);
    pthread_mutex_lock(&r->progress.lock);
    r->progress.phase = 0;
    r->progress.epoch = 0;
    r->progress.epochs = spec.epochs;
    r->progress.step = r->progress.max_steps = r->progress.global_step = 0;
    r->progress.loss = r->progress.accuracy = r->progress.examples_per_sec = 0;
    r->progress.has_loss = r->progress.has_auc = 0;
    r->progress.auc = 0;
    r->progress.checkpoints = r->progress.checkpoint_failures = 0;
    r->progress.checkpoint_error[0] = '\0';
    pthread_mutex_unlock(&r->progress.lock);
    if ((rc = psc_thread_start(&r->thread, job_main, r, "job", r->error, sizeof r->error))) {
        r->state = RUNNER_FAILED; /* the job never ran: its status says why */
        r->ended = psc_now();
        pthread_mutex_unlock(&r->lock);
        return psc_seterr(err, errlen, rc, "job %s not started: %s", spec.job_id, r->error);
    }
    if (job_id) snprintf(job_id, 17, "%s", spec.job_id);
    r->have_thread = 1;
    pthread_mutex_unlock(&r->lock);
    return 0;
}

int runner_cancel_now(runner_t *r)
{
    pthread_mutex_lock(&r->lock);
    int running = r->state == RUNNER_RUNNING;
    if (running) atomic_store(&r->stop, 1);
    pthread_mutex_unlock(&r->lock);
    if (running) PSC_INFO("cancelling job %s at its next step", r->spec.job_id);
    return running;
}

int runner_cancel(runner_t *r)
{
    pthread_mutex_lock(&r->lock);
    /* a followed directory's training job has no end of its own but the idle
     * limit: it finishes as if its files had ended (the evaluator has nothing
     * to finish; a second stop cancels) */
    int finish = r->state == RUNNER_RUNNING && r->spec.follow && r->base.task.type != PSC_JOB_EVALUATOR &&
                 !atomic_load(&r->finish);
    if (finish) atomic_store(&r->finish, 1);
    pthread_mutex_unlock(&r->lock);
    if (!finish) return runner_cancel_now(r);
    PSC_INFO("finishing job %s at its next step: a followed directory's job ends with its final checkpoint and "
             "evaluation (another stop cancels it)",
             r->spec.job_id);
    return 2;
}

void runner_status(runner_t *r, runner_status_t *out)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&r->lock);
    out->state = r->state;
    if (r->have_spec) snprintf(out->job_id, sizeof out->job_id, "%s", r->spec.job_id);
    out->elapsed_secs = r->started > 0 ? (r->ended > 0 ? r->ended : psc_now()) - r->started : 0;
    out->result = r->result;
    snprintf(out->error, sizeof out->error, "%s", r->error);
    pthread_mutex_lock(&r->progress.lock);
    out->progress.phase = r->progress.phase;
    out->progress.epoch = r->progress.epoch;
    out->progress.epochs = r->progress.epochs;
    out->progress.step = r->progress.step;
    out->progress.max_steps = r->progress.max_steps;
    out->progress.global_step = r->progress.global_step;
    out->progress.loss = r->progress.loss;
    out->progress.accuracy = r->progress.accuracy;
    out->progress.auc = r->progress.auc;
    out->progress.has_auc = r->progress.has_auc;
    out->progress.examples_per_sec = r->progress.examples_per_sec;
    out->progress.has_loss = r->progress.has_loss;
    out->progress.checkpoints = r->progress.checkpoints;
    out->progress.checkpoint_failures = r->progress.checkpoint_failures;
    memcpy(out->progress.checkpoint_error, r->progress.checkpoint_error, sizeof out->progress.checkpoint_error);
    pthread_mutex_unlock(&r->progress.lock);
    pthread_mutex_unlock(&r->lock);
}

int runner_evaluate(runner_t *r, uint64_t ckpt, trainer_result_t *res, int64_t *global_step, char *err, size_t errlen)
{
    memset(res, 0, sizeof *res);
    pthread_mutex_lock(&r->lock);
    if (!r->have_spec) {
        pthread_mutex_unlock(&r->lock);
        return psc_seterr(err, errlen, PSC_ENOTFOUND, "no job has run on this cluster yet (psctl train first)");
    }
    /* a private copy of the spec: a new job may replace r->spec meanwhile */
    char *json = psc_xstrdup(r->spec_json);
    pthread_mutex_unlock(&r->lock);
    psc_job_spec_t spec;
    int rc = psc_job_spec_parse(json, &spec, err, errlen);
    free(json);
    if (rc) return rc;
    trainer_opts_t o = r->base;
    o.spec = &spec;
    evaluator_ctx_t *e;
    if ((rc = evaluator_ctx_create(&o, &e, err, errlen)) == 0) {
        rc = evaluator_ctx_run(e, ckpt, res, global_step, err, errlen);
        evaluator_ctx_destroy(e);
    }
    psc_job_spec_deinit(&spec);
    return rc;
}

char *runner_spec_json(runner_t *r)
{
    pthread_mutex_lock(&r->lock);
    char *json = r->have_spec ? psc_xstrdup(r->spec_json) : NULL;
    pthread_mutex_unlock(&r->lock);
    return json;
}

void runner_wait(runner_t *r)
{
    pthread_mutex_lock(&r->lock);
    int have = r->have_thread;
    pthread_t th = r->thread;
    r->have_thread = 0;
    pthread_mutex_unlock(&r->lock);
    if (have) pthread_join(th, NULL);
}

void runner_destroy(runner_t *r)
{
    if (!r) return;
    runner_cancel_now(r);
    runner_wait(r);
    if (r->have_spec) psc_job_spec_deinit(&r->spec);
    free(r->spec_json);
    pthread_mutex_destroy(&r->progress.lock);
    pthread_mutex_destroy(&r->lock);
    free(r);
}
