/* trainer.c — see trainer.h. The loop reads like the algorithm, whatever
 * kind of model it trains (model_job.h: a dense model's towers, or a
 * recommendation model's rows and CTR tower):
 *
 *   params = pull()
 *   while job has batches:                    # this replica's shard
 *       grads = job.compute(params)             # forward + backward on the step's batches
 *       job.push(step)                          # the kind's own part (table rows)
 *       params = push_pull(grads); global_step += 1
 *       job.step_done()
 */
#include "trainer.h"

#include "chief.h"
#include "failures.h"
#include "log.h"
#include "model_job.h"
#include "model_spec.h"
#include "placement.h"
#include "ps_client.h"
#include "psc.h"
#include "rng.h"
#include "tfevents.h"
#include "tower.h"
#include "wire.h"
#include "worker_metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void trainer_opts_defaults(trainer_opts_t *o)
{
    if (o->retry_secs <= 0) o->retry_secs = 300;
    if (o->wait_model_secs <= 0) o->wait_model_secs = 120;
    if (o->wait_workers_secs <= 0) o->wait_workers_secs = 600;
    if (o->rpc_timeout_ms <= 0) o->rpc_timeout_ms = 30000;
    if (o->log_every_secs <= 0) o->log_every_secs = 5;
    if (o->prefetch <= 0) o->prefetch = 2;
}

static int stopped(const trainer_opts_t *o) { return o->stop && atomic_load(o->stop); }
/* A followed directory's job asked to end as if its data had ended (psctl stop). */
static int finishing(const trainer_opts_t *o) { return o->finish && atomic_load(o->finish); }

/* Publishes progress (phase < 0: keep; loss < 0: only the counters). */
static void report(const trainer_opts_t *o, int phase, int epoch, int64_t step, int64_t max_steps, int64_t global_step,
                   double loss, double accuracy, const char *metric, double examples_per_sec)
{
    trainer_progress_t *p = o->progress;
    if (!p) return;
    pthread_mutex_lock(&p->lock);
    if (phase >= 0) p->phase = phase;
    p->epoch = epoch;
    p->epochs = o->spec->epochs;
    p->step = step;
    p->max_steps = max_steps;
    p->global_step = global_step;
    if (loss >= 0) {
        p->loss = loss;
        p->has_auc = metric && !strcmp(metric, "auc");
        if (p->has_auc)
            p->auc = accuracy;
        else
            p->accuracy = accuracy;
        p->examples_per_sec = examples_per_sec;
        p->has_loss = 1;
    }
    pthread_mutex_unlock(&p->lock);
}

static int retryable(int rc) { return rc == PSC_EUNAVAILABLE || rc == PSC_ENOTREADY || rc == PSC_ETIMEOUT; }

/* ---- one replica's job ---- */

typedef struct run {
    const trainer_opts_t *o;
    const psc_job_spec_t *spec;
    trainer_result_t *res;
    int is_chief, rank, replicas, per_step; /* per_step: batches a step sums (sync with R > N), else 1 */
    psc_var_desc_t *vars;
    int nvars;
    psc_placed_var_t *placed;
    int nplaced;
    int64_t *offsets;
    int64_t nparams;
    model_job_t *job;          /* the model's kind: its data, towers and (recommendation) rows (model_job.h) */
    ps_client_t *pc;
    chief_t *chief;            /* the chief's duties; NULL on the other replicas */
    psc_tfevents_t *tb;        /* chief: TensorBoard */
    float *params, *grads;     /* (nparams) the weights the towers use; the step's gradient */
    float *params_next, *grads_next; /* (nparams) overlap: the buffers of the push-pull in flight */
    int pp_pending;                  /* async: a push-pull is in flight (overlap: the previous step's) */
    int pp_examples;                 /* its step's examples and start time (for the metrics) */
    double pp_t_step;
    int64_t global_step, max_steps;
    int64_t *expected_steps;   /* (replicas) chief: the steps of each replica's share (0: not known ahead) */
    int64_t recoveries;        /* recover() calls that succeeded (a round's pulls were lost) */
    int more, epoch;           /* the data has batches; the epoch of the last one (1-based) */
    uint64_t evaluated_ckpt;   /* chief, data.follow: the checkpoint last followed by an evaluation */
    /* the progress period */
    double t0, t_log;
    int64_t gs_log, loss_n, examples_acc, examples_total, stale_acc;
    double loss_acc;
} run_t;

/* After a PS call failed with a retryable error (err says which): retries with
 * backoff (0.1 s doubling to 2 s) for at most o->retry_secs. The chief declares
 * the model again on every PS, which restores the latest checkpoint on every PS
 * when one lost its state (restarted); everyone then pulls the current weights
 * and global_step into params and goes on from there. */
static int recover(run_t *r, float *params, char *err, size_t errlen)
{
    const trainer_opts_t *o = r->o;
    char why[512];
    snprintf(why, sizeof why, "%s", err);
    double start = psc_now(), delay = 0.1, last_log = start;
    PSC_WARN("parameter servers unavailable (%s): retrying for up to %.0f s", why, o->retry_secs);
    for (int attempt = 1;; attempt++) {
        if (stopped(o)) return psc_seterr(err, errlen, PSC_ECANCELLED, "stopped while the PS were unavailable");
        if (psc_now() - start > o->retry_secs)
            return psc_seterr(err, errlen, PSC_EUNAVAILABLE, "parameter servers unavailable for %.0f s: %s",
                              o->retry_secs, why);
        struct timespec ts = {(time_t)delay, (long)((delay - (double)(time_t)delay) * 1e9)};
        nanosleep(&ts, NULL);
        delay = PSC_MIN(delay * 2, 2.0);
        int rc = r->chief ? chief_redeclare_model(r->chief, -1, params, why, sizeof why) : 0;
        if (rc == 0) rc = ps_client_pull(r->pc, params, &r->global_step, why, sizeof why);
        if (rc == 0) {
            r->recoveries++;
            PSC_INFO("parameter servers answer again after %.1f s (%d attempt%s): continuing at global_step %lld",
                     psc_now() - start, attempt, attempt == 1 ? "" : "s", (long long)r->global_step);
            return 0;
        }
        if (!retryable(rc)) return psc_seterr(err, errlen, rc, "%s", why);
        if (psc_now() - last_log >= 5) {
            PSC_WARN("still unavailable after %.0f s (attempt %d): %s", psc_now() - start, attempt, why);
            last_log = psc_now();
        }
    }
}

/* ---- set-up ---- */

/* The model's kind behind model_job.h: its data, towers and rows. */
static int setup_job(run_t *r, char *err, size_t errlen)
{
    const trainer_opts_t *o = r->o;
    model_job_opts_t mo = model_job_opts_of(o, r->vars, r->nvars, r->nparams, r->pc);
    mo.rank = r->rank;
    mo.replicas = r->replicas;
    mo.per_step = r->per_step;
    mo.prefetch = o->prefetch;
    mo.train = 1;
    mo.test = r->is_chief;
    return model_job_create(&mo, &r->job, err, errlen);
}

/* The model, its placement, the data, the towers and the PS client. */
static int setup(run_t *r, char *err, size_t errlen)
{
    const trainer_opts_t *o = r->o;
    const psc_job_spec_t *spec = r->spec;
    int num_ps = o->cluster->n[PSC_JOB_PS];
    int rc;
    if ((rc = psc_model_variables(spec, &r->vars, &r->nvars, err, errlen))) return rc;
    if ((rc = psc_place(r->vars, r->nvars, num_ps, spec->placement, spec->min_shard_bytes, &r->placed, &r->nplaced,
                        err, errlen)))
        return rc;
    r->offsets = psc_xcalloc((size_t)r->nvars, sizeof *r->offsets);
    r->nparams = tower_layout(r->vars, r->nvars, r->offsets);
    size_t bytes = (size_t)r->nparams * sizeof(float);
    r->params = psc_xaligned(bytes);
    r->grads = psc_xaligned(bytes);
    r->per_step = 1;
    if (spec->sync && spec->replicas_to_aggregate > r->replicas)
        r->per_step = spec->replicas_to_aggregate / r->replicas + (r->rank < spec->replicas_to_aggregate % r->replicas);
    r->expected_steps = psc_xcalloc((size_t)r->replicas, sizeof *r->expected_steps);
    if (spec->overlap_push_pull) {
        r->params_next = psc_xaligned(bytes);
        r->grads_next = psc_xaligned(bytes);
    }
    PSC_INFO("model: %d variables, %lld parameters (%.1f MiB), %d placed pieces on %d ps; replica %d of %d%s",
             r->nvars - 1, (long long)r->nparams, (double)r->nparams * 4 / 1048576.0, r->nplaced, num_ps, r->rank,
             r->replicas, r->is_chief ? " (chief)" : "");

    r->pc = ps_client_create(o->cluster, r->vars, r->nvars, r->placed, r->nplaced, r->rank, o->rpc_timeout_ms);
    if (o->batch_bytes >= 0) ps_client_set_batch_bytes(r->pc, (size_t)o->batch_bytes);
    if (r->is_chief && (rc = ps_client_set_restore_sources(r->pc, o->restore_from, err, errlen))) return rc;
    if ((rc = ps_client_set_job_tables(r->pc, spec, r->nplaced, err, errlen))) return rc;
    if ((rc = setup_job(r, err, errlen))) return rc;
    if (spec->gradient_dtype == PSC_ENC_BFLOAT16) {
        ps_client_set_gradient_dtype(r->pc, PSC_ENC_BFLOAT16, spec->error_feedback);
        const char *ef = spec->error_feedback ? "each rounding error carried into the next step" : "no error feedback";
        PSC_INFO("gradients pushed as bfloat16 (half the bytes), %s", ef);
    }
    if (spec->sync) {
        ps_client_set_sync(r->pc, spec->replicas_to_aggregate, spec->total_num_replicas, spec->sync_timeout_secs);
        PSC_INFO("sync replicas: R=%d of N=%d gradients per step (%d batch%s from this replica), timeout %.1f s",
                 spec->replicas_to_aggregate, spec->total_num_replicas, r->per_step, r->per_step == 1 ? "" : "es",
                 spec->sync_timeout_secs);
    }
    if (r->is_chief) {
        chief_opts_t co = {.spec = spec,
                           .vars = r->vars,
                           .nvars = r->nvars,
                           .cluster = o->cluster,
                           .wait_workers_secs = o->wait_workers_secs,
                           .stop = o->stop,
                           .requests = o->chief_mailbox,
                           .progress = o->progress,
                           .metrics = o->metrics,
                           .shutdown_ps = o->shutdown_ps,
                           .failures = o->failures,
                           .expected_steps = r->expected_steps};
        r->chief = chief_create(&co, r->pc);
    }
    return 0;
}

/* The chief makes the model ready on the PS (a PS down or dying at start-up is
 * ridden out as during training); the others wait for it. */
static int join_model(run_t *r, char *err, size_t errlen)
{
    if (!r->chief)
        return ps_client_wait_ready(r->pc, r->spec->job_id, r->o->wait_model_secs, r->o->stop, err, errlen);
    ps_model_origin_t origin;
    int rc = chief_create_model(r->chief, r->params, &origin, err, errlen);
    if (rc && retryable(rc)) rc = recover(r, r->params, err, errlen);
    return rc;
}

/* Where this replica starts in its schedule: after the steps it reported
 * before it restarted (the PS that holds global_step keeps them per replica);
 * with none reported since the model was restored from a checkpoint (a job
 * submitted again, a PS restarted), after its share of that checkpoint's
 * global_step, so that the job ends at the total its spec asks for, as TF's
 * StopAtStepHook does (async: one global step per replica step; sync: one per
 * step of every replica); the steps since the job's start (base_step: a warm
 * start that carried global_step over starts there). A replica joining a job that trains from initial
 * values starts at 0, whatever global_step the others reached. A followed directory's asynchronous job
 * (data.follow) resumes exactly instead: after the steps the restored checkpoint recorded for this
 * replica at its cut (docs/online-training.md). */
/* The steps this replica runs at most: streamed data without "steps" runs until it ends (max_steps 0). */
static int64_t step_cap(const run_t *r) { return r->max_steps > 0 ? r->max_steps : INT64_MAX; }

static void resume(run_t *r)
{
    int64_t done = 0;
    ps_status_t st;
    char err[256];
    int sp = ps_client_step_ps(r->pc);
    if (sp < 0 || ps_client_status(r->pc, sp, &st, err, sizeof err) != 0 || r->rank >= PSC_MAX_REPLICAS)
        return;
    char of[64] = "of a streamed data set (until it ends)"; /* max_steps 0: not known ahead */
    if (r->max_steps > 0) snprintf(of, sizeof of, "of %lld", (long long)r->max_steps);
    if (st.replica_steps[r->rank] > 0) {
        done = PSC_MIN(st.replica_steps[r->rank], step_cap(r));
        PSC_INFO("this replica ran %lld steps before it restarted: resuming at step %lld %s (global_step %lld)",
                 (long long)st.replica_steps[r->rank], (long long)done, of, (long long)r->global_step);
    } else if (st.restored_step > st.base_step && r->spec->follow && !r->spec->sync && st.has_restored_replica_steps) {
        /* a followed directory resumes exactly: the checkpoint recorded each replica's steps at its cut */
        done = PSC_MIN(st.restored_replica_steps[r->rank], step_cap(r));
        PSC_INFO("the model was restored at global_step %lld, whose checkpoint records %lld step%s of this replica: "
                 "resuming at step %lld %s",
                 (long long)st.restored_step, (long long)st.restored_replica_steps[r->rank],
                 st.restored_replica_steps[r->rank] == 1 ? "" : "s", (long long)done, of);
    } else if (st.restored_step > st.base_step) {
        int64_t ran = st.restored_step - st.base_step; /* this job's steps (a warm start may carry global_step) */
        int64_t share = r->spec->sync ? ran : ran / r->replicas;
        done = PSC_MIN(share, step_cap(r));
        PSC_INFO("the model was restored at global_step %lld (%lld step%s of this replica's share): resuming at step "
                 "%lld %s",
                 (long long)st.restored_step, (long long)share, share == 1 ? "" : "s", (long long)done, of);
    }
    if (done == 0) return;
    char serr[512];
    if (r->job->ops->skip(r->job, done, serr, sizeof serr)) PSC_WARN("skipping the batches run before: %s", serr);
    r->res->steps = done;
    ps_client_set_progress(r->pc, done);
}

/* ---- the loop ---- */

/* Forward and backward on the step's batches (the job's kind decides how
 * many and from where): the step's gradient in r->grads. *batches 0: the
 * data ran out (r->more 0), or a followed directory's next batch has not
 * come yet (r->more stays 1). */
static int compute(run_t *r, int *batches, int *examples, char *err, size_t errlen)
{
    model_step_t st;
    memset(&st, 0, sizeof st);
    int rc = r->job->ops->compute(r->job, r->params, r->grads, r->spec->sync ? r->global_step : -1, &st, err, errlen);
    *batches = st.batches;
    *examples = st.examples;
    if (rc) return rc;
    if (st.batches == 0) {
        r->more = st.waiting;
        return 0;
    }
    r->epoch = st.epoch;
    r->loss_acc += st.loss_sum;
    r->loss_n += st.examples;
    r->examples_acc += st.examples;
    r->examples_total += st.examples;
    return 0;
}

/* compute, and when a pull of its own (a recommendation model's rows) found
 * the PS unavailable, recovery and the same batch again (the job keeps it),
 * for at most retry_secs from the first failure. */
static int compute_retrying(run_t *r, int *batches, int *examples, char *err, size_t errlen)
{
    double t0 = psc_now();
    for (;;) {
        int rc = compute(r, batches, examples, err, errlen);
        if (!rc || !retryable(rc) || r->pp_pending || psc_now() - t0 > r->o->retry_secs) return rc;
        worker_metrics_retry(r->o->metrics);
        if ((rc = recover(r, r->params, err, errlen))) return rc;
    }
}

/* The end of a step's exchange, rc its outcome: a PS that went away is
 * waited for (the chief restores it), then everyone pulls and goes on (this
 * step's gradients are lost with the PS's state); the step is counted in the
 * metrics and the chief takes the checkpoints that are due or asked for. */
static int after_exchange(run_t *r, int rc, int examples, double t_step, double pp_secs, int stale, char *err,
                          size_t errlen)
{
    if (rc && retryable(rc)) {
        worker_metrics_retry(r->o->metrics);
        rc = recover(r, r->params, err, errlen);
        pp_secs = -1;
    }
    if (rc) return rc;
    if (stale) {
        r->stale_acc++;
        r->res->stale_steps++;
    }
    worker_metrics_step(r->o->metrics, examples, psc_now() - t_step, pp_secs, stale);
    if (r->chief) chief_after_step(r->chief, r->global_step);
    return 0;
}

/* Async: waits for the push-pull in flight (no-op when none). Overlapped, its
 * weights (params_next) become the next step's: params and params_next swap. */
static int push_pull_collect(run_t *r, char *err, size_t errlen)
{
    if (!r->pp_pending) return 0;
    r->pp_pending = 0;
    double secs = -1;
    int rc = ps_client_push_pull_wait(r->pc, &r->global_step, &secs, err, errlen);
    if (rc == 0 && r->spec->overlap_push_pull) {
        float *t = r->params;
        r->params = r->params_next;
        r->params_next = t;
    }
    return after_exchange(r, rc, r->pp_examples, r->pp_t_step, secs, 0, err, errlen);
}

/* The step's exchange with the PS: push the gradient, get the weights and
 * global_step back. Sync: one blocking step (the reply comes once step
 * global_step is applied, or says this replica was stale). Async: the
 * push-pull starts on the ps_client's thread and is waited for at once, or,
 * overlapped (spec->overlap_push_pull), at the next step, which computes
 * meanwhile on the weights of the step before (one step more staleness, which
 * asynchronous training has anyway). */
static int exchange(run_t *r, int batches, int examples, double t_step, char *err, size_t errlen)
{
    const psc_job_spec_t *spec = r->spec;
    int rc;
    if (spec->sync) {
        ps_client_set_progress(r->pc, r->res->steps + 1);
        double t_pp = psc_now();
        int stale = 0;
        if (r->job->ops->push_sync && (rc = r->job->ops->push_sync(r->job, r->global_step, &stale, err, errlen)))
            return after_exchange(r, rc, examples, t_step, psc_now() - t_pp, 0, err, errlen);
        rc = ps_client_push_pull_sync(r->pc, r->grads, r->params, r->global_step,
                                      (uint32_t)batches, &r->global_step, &stale, err, errlen);
        return after_exchange(r, rc, examples, t_step, psc_now() - t_pp, stale, err, errlen);
    }
    if ((rc = push_pull_collect(r, err, errlen))) return rc; /* overlap: the previous step's */
    ps_client_set_progress(r->pc, r->res->steps + 1);
    if (r->job->ops->push_async) r->job->ops->push_async(r->job);
    ps_client_push_pull_start(r->pc, r->grads, spec->overlap_push_pull ? r->params_next : r->params,
                              spec->overlap_push_pull);
    r->pp_pending = 1;
    r->pp_examples = examples;
    r->pp_t_step = t_step;
    if (!spec->overlap_push_pull) return push_pull_collect(r, err, errlen);
    float *t = r->grads; /* the next step computes into the other gradient buffer */
    r->grads = r->grads_next;
    r->grads_next = t;
    return 0;
}

/* One step. Returns 0, 1 when the data ran out before it, 2 when a followed
 * directory's next batch has not come yet (no step), or an error. */
static int train_step(run_t *r, char *err, size_t errlen)
{
    double t_step = psc_now();
    int batches, examples, rc;
    if ((rc = compute_retrying(r, &batches, &examples, err, errlen))) return rc;
    if (batches == 0) return r->more ? 2 : 1;
    if (r->o->debug_step_delay_ms > 0) {
        int ms = r->o->debug_step_delay_ms;
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    int64_t recoveries = r->recoveries;
    rc = exchange(r, batches, examples, t_step, err, errlen);
    if (r->job->ops->step_done) r->job->ops->step_done(r->job, rc == 0 && r->recoveries == recoveries);
    if (rc) return rc;
    r->res->steps++;
    report(r->o, -1, r->epoch, r->res->steps, r->max_steps, r->global_step, -1, 0, NULL, 0);
    return 0;
}

/* The global_step for the chief's duties while this replica waits for a
 * followed directory's files: the other replicas may train meanwhile, so
 * with checkpoint.every_steps it is read from the PS that holds it (one
 * Status each time the wait gives control back), not this replica's last
 * step's. Unreadable: the last one known (the exchange that fails next says
 * why). */
static int64_t waiting_global_step(run_t *r)
{
    if (r->spec->ckpt_every_steps <= 0) return r->global_step;
    ps_status_t st;
    char err[256];
    int sp = ps_client_step_ps(r->pc);
    if (sp < 0 || ps_client_status(r->pc, sp, &st, err, sizeof err) != 0 || !st.has_global_step) return r->global_step;
    return PSC_MAX(r->global_step, st.global_step);
}

/* A progress line (log, job status, TensorBoard) every log_every_secs and at the end. */
static void log_progress(run_t *r, int last)
{
    double now = psc_now();
    if (!(last || now - r->t_log >= r->o->log_every_secs) || r->loss_n == 0) return;
    const psc_job_spec_t *spec = r->spec;
    trainer_result_t *res = r->res;
    res->last_loss = (float)(r->loss_acc / (double)r->loss_n);
    /* a dense model's accuracy; a recommendation model's AUC over the period's training examples */
    double metric = r->job->ops->period_metric(r->job);
    const char *metric_name = r->job->ops->metric;
    double rate = (double)r->examples_acc / (now - r->t_log);
    char note[96] = "", of[32] = "";
    if (spec->sync) snprintf(note, sizeof note, " stale %lld", (long long)r->stale_acc);
    int64_t bad = r->job->ops->bad_records(r->job);
    if (bad) snprintf(note + strlen(note), sizeof note - strlen(note), " bad_records_skipped %lld", (long long)bad);
    if (r->max_steps > 0) snprintf(of, sizeof of, "/%lld", (long long)r->max_steps);
    PSC_INFO("epoch %d/%d step %lld%s global_step %lld loss %.4f %s %.4f examples/s %.0f%s", r->epoch, spec->epochs,
             (long long)res->steps, of, (long long)r->global_step, res->last_loss, metric_name, metric, rate, note);
    report(r->o, -1, r->epoch, res->steps, r->max_steps, r->global_step, res->last_loss, metric, metric_name, rate);
    if (r->tb) {
        psc_tfevents_scalar(r->tb, r->global_step, "loss", res->last_loss);
        psc_tfevents_scalar(r->tb, r->global_step, metric_name, metric);
        psc_tfevents_scalar(r->tb, r->global_step, "steps_per_sec", (double)(r->global_step - r->gs_log) / (now - r->t_log));
        psc_tfevents_flush(r->tb);
    }
    r->gs_log = r->global_step;
    r->t_log = now;
    r->loss_acc = 0;
    r->loss_n = r->examples_acc = r->stale_acc = 0;
}

/* Chief, data.follow with data.test: after each checkpoint it commits, an
 * evaluation of the current weights (a rolling data.test directory: its
 * newest data.test_files files), logged and in TensorBoard. */
static void eval_after_checkpoint(run_t *r)
{
    uint64_t id = chief_last_checkpoint(r->chief);
    if (id == r->evaluated_ckpt) return;
    r->evaluated_ckpt = id;
    trainer_result_t res;
    memset(&res, 0, sizeof res);
    char err[512];
    /* async: the weights as the PS has them now, as the rows are read (a
     * replica waiting for files has not pulled since its last step) */
    int rc = r->spec->sync || r->pp_pending ? 0 : ps_client_pull(r->pc, r->params, &r->global_step, err, sizeof err);
    if (!rc) rc = r->job->ops->evaluate(r->job, r->params, 0, &res, err, sizeof err);
    if (rc) {
        PSC_INFO("no evaluation after checkpoint %llu: %s", (unsigned long long)id, err);
        return;
    }
    PSC_INFO("evaluation after checkpoint %llu on %lld test examples at global_step %lld: AUC %.4f log loss %.4f "
             "accuracy %.4f",
             (unsigned long long)id, (long long)res.test_examples, (long long)r->global_step, res.test_auc,
             res.test_loss, res.test_accuracy);
    if (!r->tb) return;
    psc_tfevents_scalar(r->tb, r->global_step, "test/auc", res.test_auc);
    psc_tfevents_scalar(r->tb, r->global_step, "test/loss", res.test_loss);
    psc_tfevents_scalar(r->tb, r->global_step, "test/accuracy", res.test_accuracy);
    psc_tfevents_flush(r->tb);
}

/* ---- the end ---- */

/* chief_finish's evaluation: the job's own (model_job.h). */
static int eval_model(void *ctx, float *params, trainer_result_t *res, char *err, size_t errlen)
{
    run_t *r = ctx;
    return r->job->ops->evaluate(r->job, params, 0, res, err, errlen);
}

/* This replica is done: report it; the chief then waits for the others,
 * takes the final checkpoint and evaluates. */
static int finish(run_t *r, char *err, size_t errlen)
{
    trainer_result_t *res = r->res;
    double elapsed = psc_now() - r->t0;
    res->global_step = r->global_step;
    res->examples_per_sec = elapsed > 0 ? (double)r->examples_total / elapsed : 0;
    PSC_INFO("finished %lld steps in %.1f s (%.0f examples/s)", (long long)res->steps, elapsed, res->examples_per_sec);
    if (r->spec->sync)
        PSC_INFO("sync: %lld of %lld steps of this replica were stale (dropped by the PS)",
                 (long long)res->stale_steps, (long long)res->steps);
    report(r->o, 2, r->spec->epochs, res->steps, r->max_steps, r->global_step, -1, 0, NULL, 0);
    uint32_t done = 0;
    int rc = ps_client_worker_done(r->pc, &done, err, errlen);
    if (rc || !r->chief) return rc;
    if ((rc = chief_wait_workers(r->chief, r->params, r->rank, err, errlen))) return rc;
    rc = ps_client_pull(r->pc, r->params, &r->global_step, err, errlen);
    if (rc && retryable(rc)) rc = recover(r, r->params, err, errlen);
    if (rc) return rc;
    res->global_step = r->global_step;
    rc = chief_finish(r->chief, r->global_step, eval_model, r, r->params, res, err, errlen);
    if (r->tb && res->evaluated && res->has_auc) psc_tfevents_scalar(r->tb, r->global_step, "test/auc", res->test_auc);
    if (r->tb && res->evaluated) {
        psc_tfevents_scalar(r->tb, r->global_step, "test/accuracy", res->test_accuracy);
        psc_tfevents_scalar(r->tb, r->global_step, "test/loss", res->test_loss);
    }
    return rc;
}

/* The chief's job ends without finishing: cancelled in standalone mode
 * (checkpoint_on_cancel), it checkpoints the model as it is (a job submitted
 * again resumes from there); failed, it stops
 * every other task, checkpoints only when the spec asks (a half-trained model
 * is not saved over the newest checkpoint otherwise), and in in-cluster mode
 * tells the PS to exit as at a normal end, unless the final checkpoint failed
 * (the PS then hold the only copy of the trained model). */
static void end_unfinished(run_t *r, int rc, const char *err)
{
    const trainer_opts_t *o = r->o;
    int timeout = PSC_MIN(o->rpc_timeout_ms, 10000);
    if (rc != PSC_ECANCELLED) failures_stop_others(o->cluster, r->rank, err, 1, timeout);
    if (r->chief && (rc == PSC_ECANCELLED ? o->checkpoint_on_cancel : r->spec->ckpt_on_failure)) {
        char e2[256];
        push_pull_collect(r, e2, sizeof e2); /* overlap: the last step's push-pull */
        if (r->job->ops->drain) r->job->ops->drain(r->job);
        chief_checkpoint_as_is(r->chief, r->global_step, rc == PSC_ECANCELLED ? "cancelled" : "on failure");
    }
    if (rc != PSC_ECANCELLED && o->shutdown_ps && !chief_keeps_ps(r->chief))
        failures_shutdown_ps(o->cluster, "the job failed", timeout);
}

static void teardown(run_t *r, int rc)
{
    char why[96];
    snprintf(why, sizeof why, "job %s %s", r->spec->job_id,
             rc == 0 ? "finished" : rc == PSC_ECANCELLED ? "was cancelled" : "failed");
    chief_destroy(r->chief, why);
    psc_tfevents_close(r->tb);
    if (r->job && r->job->ops->drain) r->job->ops->drain(r->job); /* its rounds use the ps_client */
    ps_client_destroy(r->pc); /* after a push-pull in flight ends, before its buffers are freed */
    model_job_destroy(r->job);
    free(r->params);
    free(r->grads);
    free(r->params_next);
    free(r->grads_next);
    free(r->offsets);
    free(r->expected_steps);
    free(r->vars);
    free(r->placed);
}

/* This replica's shard of the training data and its step count (the job's
 * kind counts them: model_job.h); the chief also learns every replica's. */
static int start_data(run_t *r, char *err, size_t errlen)
{
    for (int k = 0; r->is_chief && k < r->replicas; k++) r->expected_steps[k] = r->job->ops->share_steps(r->job, k);
    return r->job->ops->start(r->job, &r->max_steps, err, errlen);
}

int trainer_run(const trainer_opts_t *o, trainer_result_t *res, char *err, size_t errlen)
{
    memset(res, 0, sizeof *res);
    run_t r = {.o = o, .spec = o->spec, .res = res, .more = 1, .epoch = 1};
    r.is_chief = psc_task_is_chief(o->cluster, o->task);
    r.rank = psc_task_replica_rank(o->cluster, o->task);
    r.replicas = psc_cluster_num_replicas(o->cluster);
    if (r.rank < 0)
        return psc_seterr(err, errlen, PSC_EINVAL, "task %s:%d is not a training replica",
                          psc_job_type_name(o->task.type), o->task.index);
    if (o->cluster->n[PSC_JOB_PS] < 1) return psc_seterr(err, errlen, PSC_ECONFIG, "the cluster has no ps task");
    if (r.spec->sync && r.spec->total_num_replicas != r.replicas)
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "job spec: sync.total_num_replicas is %d but the cluster has %d training replicas",
                          r.spec->total_num_replicas, r.replicas);

    int rc = setup(&r, err, errlen);
    if (rc == 0) rc = join_model(&r, err, errlen);
    if (rc == 0) rc = start_data(&r, err, errlen);
    if (rc) goto out;
    rc = ps_client_pull(r.pc, r.params, &r.global_step, err, errlen);
    if (rc && retryable(rc)) rc = recover(&r, r.params, err, errlen);
    if (rc) goto out;
    if (r.chief) chief_start_schedule(r.chief, r.global_step);
    resume(&r);
    report(o, 1, 1, res->steps, r.max_steps, r.global_step, -1, 0, NULL, 0);
    if (r.chief && o->logdir) {
        if ((rc = psc_tfevents_open(o->logdir, ".chief", &r.tb, err, errlen))) goto out;
        PSC_INFO("TensorBoard events: %s", psc_tfevents_path(r.tb));
    }
    if (r.spec->overlap_push_pull)
        PSC_INFO("overlap_push_pull: each step's push-pull runs while the next step computes");

    r.t0 = r.t_log = psc_now();
    r.gs_log = r.global_step;
    int follow_eval = r.chief && r.spec->follow && r.spec->num_test_files > 0;
    if (r.chief) r.evaluated_ckpt = chief_last_checkpoint(r.chief);
    while (r.more && res->steps < step_cap(&r)) {
        if (stopped(o)) {
            rc = psc_seterr(err, errlen, PSC_ECANCELLED, "stopped at step %lld", (long long)res->steps);
            goto out;
        }
        if (finishing(o)) {
            PSC_INFO("asked to finish (psctl stop): the followed directory's job ends at step %lld",
                     (long long)res->steps);
            break;
        }
        char why[1024];
        if (r.chief && failures_replica(o->failures, why, sizeof why)) {
            rc = psc_seterr(err, errlen, PSC_EJOBFAILED, "%s", why);
            goto out;
        }
        if ((rc = train_step(&r, err, errlen)) == 1) break; /* the data ran out */
        if (rc == 2) { /* a followed directory: files to come; the chief's duties go on meanwhile */
            /* overlap: the last step's exchange ends first (the client is the chief's again) */
            if ((rc = push_pull_collect(&r, err, errlen))) goto out;
            if (r.chief) chief_after_step(r.chief, waiting_global_step(&r));
        } else if (rc) {
            goto out;
        } else {
            log_progress(&r, res->steps == r.max_steps || !r.more);
        }
        if (follow_eval) eval_after_checkpoint(&r);
    }
    if (r.spec->follow && stopped(o)) { /* the stop ended the wait for files: not the data's end */
        rc = psc_seterr(err, errlen, PSC_ECANCELLED, "stopped at step %lld", (long long)res->steps);
        goto out;
    }
    log_progress(&r, 1); /* streamed data: the period the data's end cut short */
    rc = push_pull_collect(&r, err, errlen); /* overlap: the last step's push-pull */
    if (r.job->ops->drain) r.job->ops->drain(r.job); /* prefetch_rows: the last step's other pushes */
    if (rc == 0) rc = finish(&r, err, errlen);
out:
    if (r.is_chief && rc) end_unfinished(&r, rc, err);
    teardown(&r, rc);
    return rc;
}
