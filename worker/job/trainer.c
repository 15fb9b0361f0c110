/* trainer.c — see trainer.h. The loop reads like the algorithm:
 *
 *   params = pull()
 *   for batch in loader:                      # this replica's shard, reshuffled per epoch
 *       tower_set_params(params)
 *       loss = tower_train_step(batch)          # forward + backward
 *       grads = tower_get_grads()
 *       params = push_pull(grads); global_step += 1
 */
#include "trainer.h"

#include "chief.h"
#include "ctr_job.h"
#include "dataset.h"
#include "evaluator.h"
#include "failures.h"
#include "log.h"
#include "model_spec.h"
#include "placement.h"
#include "ps_client.h"
#include "psc.h"
#include "rng.h"
#include "tfevents.h"
#include "tower.h"
#include "tower_group.h"
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

/* Publishes progress (phase < 0: keep; loss < 0: only the counters). */
static void report(const trainer_opts_t *o, int phase, int epoch, int64_t step, int64_t max_steps, int64_t global_step,
                   double loss, double accuracy, double examples_per_sec)
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
        p->has_auc = o->spec->loss_kind == PSC_LOSS_SIGMOID_XENT;
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
    dataset_t train, test;
    dataset_loader_t *loader;
    tower_group_t *towers;
    ctr_job_t *ctr;            /* a recommendation model (loss sigmoid_cross_entropy): its data, tower and rows */
    int eval_batch;
    ps_client_t *pc;
    chief_t *chief;            /* the chief's duties; NULL on the other replicas */
    psc_tfevents_t *tb;        /* chief: TensorBoard */
    float *params, *grads;     /* (nparams) the weights the towers use; their gradient */
    float *grads_sum;          /* (nparams) per_step > 1: the step's summed gradient */
    float *params_next, *grads_next; /* (nparams) overlap: the buffers of the push-pull in flight */
    int pp_pending;                  /* async: a push-pull is in flight (overlap: the previous step's) */
    int pp_examples;                 /* its step's examples and start time (for the metrics) */
    double pp_t_step;
    int64_t global_step, max_steps;
    int64_t *expected_steps;   /* (replicas) chief: the steps of each replica's share (0: not known ahead) */
    int64_t recoveries;        /* recover() calls that succeeded (a round's pulls were lost) */
    int more, epoch;           /* the loader has batches; the epoch of the last one (1-based) */
    /* the progress period */
    double t0, t_log;
    int64_t gs_log, loss_n, correct_acc, examples_acc, examples_total, stale_acc;
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

/* A dense model's data (IDX) and towers. */
static int setup_dense(run_t *r, char *err, size_t errlen)
{
    const trainer_opts_t *o = r->o;
    const psc_job_spec_t *spec = r->spec;
    int rc;
    if ((rc = dataset_load(spec->train_path, spec->train_examples, &r->train, err, errlen))) return rc;
    int features = spec->input_shape[0] * (spec->input_rank == 3 ? spec->input_shape[1] * spec->input_shape[2] : 1);
    if (r->train.features != features)
        return psc_seterr(err, errlen, PSC_ECONFIG, "data %s has %d features per example; model.input_shape wants %d",
                          spec->train_path, r->train.features, features);
    if (r->is_chief && (rc = dataset_load(spec->test_path, spec->test_examples, &r->test, err, errlen))) return rc;
    if ((rc = tower_group_create(o->devices, spec, r->vars, r->nvars, r->eval_batch, &r->towers, err, errlen))) return rc;
    tower_group_set_cpu_threads(r->towers, o->blas_threads, o->cluster, o->task);
    PSC_INFO("towers: %s (%d), batch %d split across them", tower_group_describe(r->towers), tower_group_count(r->towers),
             spec->batch_size);
    return 0;
}

/* A recommendation model's streamed data, its tower and its tables' rows. */
static int setup_ctr(run_t *r, char *err, size_t errlen)
{
    const psc_job_spec_t *spec = r->spec;
    if (r->per_step > 1)
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "job spec: sync.replicas_to_aggregate: a recommendation model takes one batch per replica "
                          "and step (R <= N); R = %d, N = %d",
                          spec->replicas_to_aggregate, r->replicas);
    if (spec->overlap_push_pull)
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "job spec: overlap_push_pull: not available for recommendation models (their rows are "
                          "pulled per batch)");
    ctr_job_opts_t co = {.spec = spec,
                         .vars = r->vars,
                         .nvars = r->nvars,
                         .pc = r->pc,
                         .devices = r->o->devices,
                         .blas_threads = r->o->blas_threads,
                         .rank = r->rank,
                         .replicas = r->replicas,
                         .prefetch = r->o->prefetch,
                         .train = 1,
                         .eval_batch = r->eval_batch};
    return ctr_job_create(&co, &r->ctr, err, errlen);
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
    if (r->per_step > 1) r->grads_sum = psc_xaligned(bytes);
    r->expected_steps = psc_xcalloc((size_t)r->replicas, sizeof *r->expected_steps);
    if (spec->overlap_push_pull) {
        r->params_next = psc_xaligned(bytes);
        r->grads_next = psc_xaligned(bytes);
    }
    PSC_INFO("model: %d variables, %lld parameters (%.1f MiB), %d placed pieces on %d ps; replica %d of %d%s",
             r->nvars - 1, (long long)r->nparams, (double)r->nparams * 4 / 1048576.0, r->nplaced, num_ps, r->rank,
             r->replicas, r->is_chief ? " (chief)" : "");

    r->eval_batch = PSC_MAX(spec->batch_size, 256);
    if (spec->loss_kind != PSC_LOSS_SIGMOID_XENT && (rc = setup_dense(r, err, errlen))) return rc;
    r->pc = ps_client_create(o->cluster, r->vars, r->nvars, r->placed, r->nplaced, r->rank, o->rpc_timeout_ms);
    if (o->batch_bytes >= 0) ps_client_set_batch_bytes(r->pc, (size_t)o->batch_bytes);
    if ((rc = ps_client_set_job_tables(r->pc, spec, r->nplaced, err, errlen))) return rc;
    if (spec->loss_kind == PSC_LOSS_SIGMOID_XENT && (rc = setup_ctr(r, err, errlen))) return rc;
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
 * step of every replica). A replica joining a job that trains from initial
 * values starts at 0, whatever global_step the others reached. */
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
    if (st.replica_steps[r->rank] > 0) {
        done = PSC_MIN(st.replica_steps[r->rank], step_cap(r));
        PSC_INFO("this replica ran %lld steps before it restarted: resuming at step %lld of %lld (global_step %lld)",
                 (long long)st.replica_steps[r->rank], (long long)done, (long long)r->max_steps,
                 (long long)r->global_step);
    } else if (st.restored_step > 0) {
        int64_t share = r->spec->sync ? st.restored_step : st.restored_step / r->replicas;
        done = PSC_MIN(share, step_cap(r));
        PSC_INFO("the model was restored at global_step %lld (%lld step%s of this replica's share): resuming at step "
                 "%lld of %lld",
                 (long long)st.restored_step, (long long)share, share == 1 ? "" : "s", (long long)done,
                 (long long)r->max_steps);
    }
    if (done == 0) return;
    if (r->ctr) {
        char serr[512];
        if (ctr_job_skip(r->ctr, done, serr, sizeof serr)) PSC_WARN("skipping the batches run before: %s", serr);
    } else {
        for (int64_t k = 0; k < done * r->per_step && dataset_loader_next(r->loader, &(dataset_batch_t){0}) == 0; k++) {}
    }
    r->res->steps = done;
    ps_client_set_progress(r->pc, done);
}

/* ---- the loop ---- */

/* Forward and backward on up to per_step batches: the step's gradient in
 * r->grads (summed over the batches in r->grads_sum when per_step > 1).
 * *batches 0: the data ran out. */
static int compute_ctr(run_t *r, int *batches, int *examples, char *err, size_t errlen)
{
    double loss_sum;
    int epoch;
    *batches = *examples = 0;
    int rc = ctr_job_compute(r->ctr, r->params, r->grads, r->spec->sync ? r->global_step : -1, examples, &loss_sum,
                             &epoch, err, errlen);
    if (rc == 1) {
        r->more = 0;
        return 0;
    }
    if (rc) return rc;
    *batches = 1;
    r->epoch = epoch + 1;
    r->loss_acc += loss_sum;
    r->loss_n += *examples;
    r->examples_acc += *examples;
    r->examples_total += *examples;
    return 0;
}

static int compute(run_t *r, int *batches, int *examples)
{
    dataset_batch_t b;
    *batches = *examples = 0;
    while (*batches < r->per_step && (r->more = dataset_loader_next(r->loader, &b) == 0)) {
        float loss;
        int correct, rc;
        uint64_t seed = psc_seed_mix(r->spec->seed,
                                     (uint64_t)(r->rank * 1000003 + r->res->steps * r->per_step + *batches));
        if ((rc = tower_group_train_step(r->towers, b.x, b.y, b.n, seed, &loss, &correct)) ||
            (rc = tower_group_get_grads(r->towers, r->grads)))
            return rc;
        if (r->per_step > 1) {
            if (*batches == 0)
                memcpy(r->grads_sum, r->grads, (size_t)r->nparams * sizeof(float));
            else
                for (int64_t k = 0; k < r->nparams; k++) r->grads_sum[k] += r->grads[k];
        }
        ++*batches;
        *examples += b.n;
        r->epoch = b.epoch + 1;
        r->loss_acc += loss * b.n;
        r->loss_n += b.n;
        r->correct_acc += correct;
        r->examples_acc += b.n;
        r->examples_total += b.n;
    }
    return 0;
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
        if (r->ctr && (rc = ctr_job_push_sync(r->ctr, r->global_step, &stale, err, errlen)))
            return after_exchange(r, rc, examples, t_step, psc_now() - t_pp, 0, err, errlen);
        rc = ps_client_push_pull_sync(r->pc, r->per_step > 1 ? r->grads_sum : r->grads, r->params, r->global_step,
                                      (uint32_t)batches, &r->global_step, &stale, err, errlen);
        return after_exchange(r, rc, examples, t_step, psc_now() - t_pp, stale, err, errlen);
    }
    if ((rc = push_pull_collect(r, err, errlen))) return rc; /* overlap: the previous step's */
    ps_client_set_progress(r->pc, r->res->steps + 1);
    if (r->ctr) ctr_job_push_async(r->ctr);
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

/* One step. Returns 0, 1 when the data ran out before it, or an error. */
static int train_step(run_t *r, char *err, size_t errlen)
{
    double t_step = psc_now();
    int batches, examples, rc;
    if (r->ctr) {
        if ((rc = compute_ctr(r, &batches, &examples, err, errlen))) return rc;
    } else if ((rc = tower_group_set_params(r->towers, r->params)) || (rc = compute(r, &batches, &examples))) {
        return psc_seterr(err, errlen, rc, "tower step %lld failed (%s)", (long long)r->res->steps, psc_strerror(rc));
    }
    if (batches == 0) return 1;
    if (r->o->debug_step_delay_ms > 0) {
        int ms = r->o->debug_step_delay_ms;
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    int64_t recoveries = r->recoveries;
    rc = exchange(r, batches, examples, t_step, err, errlen);
    if (r->ctr) ctr_job_step_done(r->ctr, rc == 0 && r->recoveries == recoveries);
    if (rc) return rc;
    r->res->steps++;
    report(r->o, -1, r->epoch, r->res->steps, r->max_steps, r->global_step, -1, 0, 0);
    return 0;
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
    double metric = r->ctr ? ctr_job_period_auc(r->ctr) : (double)r->correct_acc / (double)r->examples_acc;
    const char *metric_name = r->ctr ? "auc" : "accuracy";
    double rate = (double)r->examples_acc / (now - r->t_log);
    char note[96] = "", of[32] = "";
    if (spec->sync) snprintf(note, sizeof note, " stale %lld", (long long)r->stale_acc);
    if (r->ctr && ctr_job_skipped(r->ctr))
        snprintf(note + strlen(note), sizeof note - strlen(note), " bad_records_skipped %lld",
                 (long long)ctr_job_skipped(r->ctr));
    if (r->max_steps > 0) snprintf(of, sizeof of, "/%lld", (long long)r->max_steps);
    PSC_INFO("epoch %d/%d step %lld%s global_step %lld loss %.4f %s %.4f examples/s %.0f%s", r->epoch, spec->epochs,
             (long long)res->steps, of, (long long)r->global_step, res->last_loss, metric_name, metric, rate, note);
    report(r->o, -1, r->epoch, res->steps, r->max_steps, r->global_step, res->last_loss, metric, rate);
    if (r->tb) {
        psc_tfevents_scalar(r->tb, r->global_step, "loss", res->last_loss);
        psc_tfevents_scalar(r->tb, r->global_step, metric_name, metric);
        psc_tfevents_scalar(r->tb, r->global_step, "steps_per_sec", (double)(r->global_step - r->gs_log) / (now - r->t_log));
        psc_tfevents_flush(r->tb);
    }
    r->gs_log = r->global_step;
    r->t_log = now;
    r->loss_acc = 0;
    r->loss_n = r->correct_acc = r->examples_acc = r->stale_acc = 0;
}

/* ---- the end ---- */

/* chief_finish's evaluation: the towers on the IDX test set, or the
 * recommendation model's pull-and-forward over its test files. */
static int eval_model(void *ctx, float *params, trainer_result_t *res, char *err, size_t errlen)
{
    run_t *r = ctx;
    if (r->ctr) return ctr_job_evaluate(r->ctr, params, res, err, errlen);
    int rc = tower_group_set_params(r->towers, params);
    if (rc == 0) rc = evaluator_eval_dataset(r->towers, &r->test, r->eval_batch, res);
    return rc ? psc_seterr(err, errlen, rc, "%s", psc_strerror(rc)) : 0;
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
    report(r->o, 2, r->spec->epochs, res->steps, r->max_steps, r->global_step, -1, 0, 0);
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
    ctr_job_destroy(r->ctr);
    psc_tfevents_close(r->tb);
    ps_client_destroy(r->pc); /* after a push-pull in flight ends, before its buffers are freed */
    dataset_loader_destroy(r->loader);
    tower_group_destroy(r->towers);
    dataset_deinit(&r->train);
    dataset_deinit(&r->test);
    free(r->params);
    free(r->grads);
    free(r->grads_sum);
    free(r->params_next);
    free(r->grads_next);
    free(r->offsets);
    free(r->expected_steps);
    free(r->vars);
    free(r->placed);
}

/* The steps of replica k's share, as its own start_data counts them: a dense
 * model's shard of the examples (k, k + W, ...) in batches over the epochs,
 * per_step batches a step; streamed files only with "steps" (0: not known). */
static int64_t replica_steps(const run_t *r, int k)
{
    const psc_job_spec_t *spec = r->spec;
    if (r->ctr) return spec->steps > 0 ? spec->steps : 0;
    int64_t n = r->train.n, W = r->replicas;
    int64_t shard = n > k ? (n - k + W - 1) / W : 0;
    int64_t per_epoch = (shard + spec->batch_size - 1) / spec->batch_size;
    int64_t per_step = 1;
    if (spec->sync && spec->replicas_to_aggregate > W)
        per_step = spec->replicas_to_aggregate / W + (k < spec->replicas_to_aggregate % W);
    return spec->steps > 0 ? spec->steps : (per_epoch * spec->epochs + per_step - 1) / per_step;
}

/* This replica's shard of the training data and its step count: a dense
 * model's epochs of its loader; streamed files (recommendation models) run
 * "steps" steps or until their epochs end (max_steps 0: not known ahead). */
static int start_data(run_t *r, char *err, size_t errlen)
{
    const psc_job_spec_t *spec = r->spec;
    for (int k = 0; k < r->replicas; k++) r->expected_steps[k] = replica_steps(r, k);
    if (r->ctr) {
        r->max_steps = spec->steps > 0 ? spec->steps : 0;
        PSC_INFO("training on %d data file pattern%s (replica %d of %d), %d epoch%s, batch %d, %s", spec->num_train_files,
                 spec->num_train_files == 1 ? "" : "s", r->rank, r->replicas, spec->epochs,
                 spec->epochs == 1 ? "" : "s", spec->batch_size, psc_optim_name(spec->optimizer.kind));
        return 0;
    }
    r->loader = dataset_loader_create(&r->train, r->rank, r->replicas, spec->batch_size, spec->seed, spec->shuffle,
                                      spec->epochs, r->o->prefetch, err, errlen);
    if (!r->loader) return PSC_EINVAL;
    int64_t per_epoch = dataset_loader_steps_per_epoch(r->loader);
    r->max_steps = spec->steps > 0 ? spec->steps : (per_epoch * spec->epochs + r->per_step - 1) / r->per_step;
    PSC_INFO("training on %lld examples (shard %d of %d), %lld steps per epoch, %d epochs, batch %d, %s",
             (long long)dataset_loader_shard_size(r->loader), r->rank, r->replicas, (long long)per_epoch, spec->epochs,
             spec->batch_size, psc_optim_name(spec->optimizer.kind));
    return 0;
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
    report(o, 1, 1, res->steps, r.max_steps, r.global_step, -1, 0, 0);
    if (r.chief && o->logdir) {
        if ((rc = psc_tfevents_open(o->logdir, ".chief", &r.tb, err, errlen))) goto out;
        PSC_INFO("TensorBoard events: %s", psc_tfevents_path(r.tb));
    }
    if (r.spec->overlap_push_pull)
        PSC_INFO("overlap_push_pull: each step's push-pull runs while the next step computes");

    r.t0 = r.t_log = psc_now();
    r.gs_log = r.global_step;
    while (r.more && res->steps < step_cap(&r)) {
        if (stopped(o)) {
            rc = psc_seterr(err, errlen, PSC_ECANCELLED, "stopped at step %lld", (long long)res->steps);
            goto out;
        }
        char why[1024];
        if (r.chief && failures_replica(o->failures, why, sizeof why)) {
            rc = psc_seterr(err, errlen, PSC_EJOBFAILED, "%s", why);
            goto out;
        }
        if ((rc = train_step(&r, err, errlen)) == 1) break; /* the data ran out */
        if (rc) goto out;
        log_progress(&r, res->steps == r.max_steps || !r.more);
    }
    log_progress(&r, 1); /* streamed data: the period the data's end cut short */
    rc = push_pull_collect(&r, err, errlen); /* overlap: the last step's push-pull */
    if (rc == 0) rc = finish(&r, err, errlen);
out:
    if (r.is_chief && rc) end_unfinished(&r, rc, err);
    teardown(&r, rc);
    return rc;
}
