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

#include "control.h"
#include "dataset.h"
#include "evaluator.h"
#include "log.h"
#include "placement.h"
#include "ps_client.h"
#include "psc.h"
#include "rng.h"
#include "rpc.h"
#include "tfevents.h"
#include "tower.h"
#include "towers.h"
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

static int stopped(const trainer_opts_t *o) { return o->stop && *o->stop; }

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
        p->accuracy = accuracy;
        p->examples_per_sec = examples_per_sec;
    }
    pthread_mutex_unlock(&p->lock);
}

/* Address of training replica `rank` (the chief, then the workers). */
static const char *replica_addr(const psc_cluster_t *c, int rank)
{
    int has_chief = c->n[PSC_JOB_CHIEF] > 0;
    if (has_chief && rank == 0) return c->addr[PSC_JOB_CHIEF][0];
    int w = rank - has_chief;
    return w >= 0 && w < c->n[PSC_JOB_WORKER] ? c->addr[PSC_JOB_WORKER][w] : NULL;
}

/* ---- the chief's checkpoints ---- */

typedef struct ckpt_sched {
    int enabled;      /* every PS has a --checkpoint_dir */
    char off_why[600]; /* why not */
    uint64_t last_id; /* the last checkpoint taken (0: none yet) */
    int requested_tries; /* steps a requested checkpoint waited for a step boundary */
    uint64_t next_id; /* above every id any PS holds */
    int64_t last_step;
    double last_time;
} ckpt_sched_t;

static void ckpt_sched_init(ckpt_sched_t *cs, ps_client_t *pc, const psc_job_spec_t *spec, int64_t step)
{
    memset(cs, 0, sizeof *cs);
    ps_ckpt_list_t list;
    char err[512];
    if (ps_client_ckpt_list(pc, spec->job_id, 0, &list, err, sizeof err)) {
        snprintf(cs->off_why, sizeof cs->off_why, "checkpoints off: %s", err);
        PSC_WARN("%s", cs->off_why);
        return;
    }
    if (!list.enabled) {
        snprintf(cs->off_why, sizeof cs->off_why, "checkpoints off: not every ps_server was started with --checkpoint_dir");
        PSC_INFO("%s", cs->off_why);
        return;
    }
    cs->enabled = 1;
    cs->next_id = list.max_id + 1;
    cs->last_step = step;
    cs->last_time = psc_now();
    char every[96] = "";
    if (spec->ckpt_every_steps > 0) snprintf(every, sizeof every, "every %lld steps, ", (long long)spec->ckpt_every_steps);
    if (spec->ckpt_every_secs > 0)
        snprintf(every + strlen(every), sizeof every - strlen(every), "every %.0f s, ", spec->ckpt_every_secs);
    PSC_INFO("checkpoints: %sat the end, keeping the last %d", every, spec->ckpt_keep);
}

static int ckpt_due(const ckpt_sched_t *cs, const psc_job_spec_t *spec, int64_t step)
{
    return cs->enabled && ((spec->ckpt_every_steps > 0 && step - cs->last_step >= spec->ckpt_every_steps) ||
                           (spec->ckpt_every_secs > 0 && psc_now() - cs->last_time >= spec->ckpt_every_secs));
}

/* Takes a checkpoint at `step` (two phases, ps_client_ckpt_save). A failure is
 * logged and retried a tenth of an interval later; training goes on. */
static int take_checkpoint(ckpt_sched_t *cs, ps_client_t *pc, const psc_job_spec_t *spec, int64_t step,
                           const char *why, char *err, size_t errlen)
{
    if (!cs->enabled) return psc_seterr(err, errlen, PSC_ENOTREADY, "%s", cs->off_why);
    double t0 = psc_now();
    uint64_t id = cs->next_id++;
    int64_t saved = step;
    int rc = ps_client_ckpt_save(pc, spec->job_id, id, step, spec->ckpt_keep, &saved, err, errlen);
    cs->last_time = psc_now();
    if (rc) {
        PSC_WARN("checkpoint %llu (%s) at step %lld not taken: %s", (unsigned long long)id, why, (long long)step, err);
        if (spec->ckpt_every_steps > 0)
            cs->last_step = step - spec->ckpt_every_steps + PSC_MAX(1, spec->ckpt_every_steps / 10);
        return rc;
    }
    cs->last_step = saved;
    cs->last_id = id;
    PSC_INFO("checkpoint %llu (%s) committed on every ps: step %lld, %.0f ms", (unsigned long long)id, why,
             (long long)saved, (psc_now() - t0) * 1000);
    return 0;
}

/* ---- riding out a PS crash ---- */

/* Serves checkpoints asked for through psc.Worker/Checkpoint (psctl checkpoint). */
static void serve_requests(const trainer_opts_t *o, ckpt_sched_t *cs, ps_client_t *pc, const psc_job_spec_t *spec,
                           int64_t step)
{
    if (!control_pending(o->control)) return;
    char err[512];
    int rc = take_checkpoint(cs, pc, spec, step, "requested", err, sizeof err);
    if (rc == PSC_EUNAVAILABLE && ++cs->requested_tries < 10) return; /* not at a step boundary: next step */
    cs->requested_tries = 0;
    control_answer(o->control, rc, cs->last_id, cs->last_step, err);
}

static int retryable(int rc) { return rc == PSC_EUNAVAILABLE || rc == PSC_ENOTREADY || rc == PSC_ETIMEOUT; }

typedef struct model_ctx {
    const psc_job_spec_t *spec;
    const psc_var_desc_t *vars;
    int nvars;
} model_ctx_t;

/* After a PS call failed with a retryable error (err says which): retries with
 * backoff (0.1 s doubling to 2 s) for at most o->retry_secs. The chief declares
 * the model again on every PS, which restores the latest checkpoint on every PS
 * when one lost its state (restarted); everyone then pulls the current weights
 * and global_step into params and goes on from there. */
static int recover(const trainer_opts_t *o, const model_ctx_t *m, ps_client_t *pc, int is_chief, ckpt_sched_t *cs,
                   float *params, int64_t *global_step, char *err, size_t errlen)
{
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
        int rc = 0;
        if (is_chief) {
            ps_model_origin_t origin;
            tower_init_params(m->vars, m->nvars, m->spec->seed, params); /* used only if nothing can be restored */
            rc = ps_client_create_model(pc, m->spec->job_id, &m->spec->optimizer, params, &origin, why, sizeof why);
            if (rc == 0 && origin.restored) {
                PSC_WARN("a ps lost the model: restored checkpoint %llu (step %lld) on every ps",
                         (unsigned long long)origin.ckpt_id, (long long)origin.step);
                cs->last_step = origin.step;
            } else if (rc == 0 && origin.initialized) {
                PSC_WARN("a ps lost the model and there is no checkpoint: it starts again from initial values");
            }
        }
        if (rc == 0) rc = ps_client_pull(pc, params, global_step, why, sizeof why);
        if (rc == 0) {
            PSC_INFO("parameter servers answer again after %.1f s (%d attempt%s): continuing at global_step %lld",
                     psc_now() - start, attempt, attempt == 1 ? "" : "s", (long long)*global_step);
            return 0;
        }
        if (!retryable(rc)) return psc_seterr(err, errlen, rc, "%s", why);
        if (psc_now() - last_log >= 5) {
            PSC_WARN("still unavailable after %.0f s (attempt %d): %s", psc_now() - start, attempt, why);
            last_log = psc_now();
        }
    }
}

/* Chief, outside the training loop: when a PS answers without this job's
 * model (it restarted), declares the model again on every PS, which restores
 * the latest checkpoint everywhere (or, with none, initial values). Returns 1
 * when it restored something. */
static int restore_lost_model(const model_ctx_t *m, ps_client_t *pc, ckpt_sched_t *cs, float *params)
{
    int lost = -1;
    for (int i = 0; i < ps_client_num_ps(pc) && lost < 0; i++) {
        ps_status_t st;
        char err[512];
        if (ps_client_status(pc, i, &st, err, sizeof err) == 0 &&
            (!st.ready || strcmp(st.job_id, m->spec->job_id) != 0))
            lost = i;
    }
    if (lost < 0) return 0;
    ps_model_origin_t origin;
    char err[512];
    tower_init_params(m->vars, m->nvars, m->spec->seed, params); /* used only if nothing can be restored */
    if (ps_client_create_model(pc, m->spec->job_id, &m->spec->optimizer, params, &origin, err,
                               sizeof err)) {
        PSC_WARN("ps %d lost the model; restoring it failed (will retry): %s", lost, err);
        return 0;
    }
    if (origin.restored) {
        PSC_WARN("ps %d lost the model: restored checkpoint %llu (step %lld) on every ps", lost,
                 (unsigned long long)origin.ckpt_id, (long long)origin.step);
        cs->last_step = origin.step;
    } else if (origin.initialized) {
        PSC_WARN("ps %d lost the model and there is no checkpoint: it starts again from initial values", lost);
    }
    return 1;
}

/* Chief: waits until every replica reported done, so the final evaluation sees
 * the fully trained model. Bounded by wait_workers_secs, and a replica that has
 * not reported done and whose health service stays unreachable (3 checks in a
 * row, 1 s apart) is given up on: a dead worker never holds the chief. The
 * chief still looks after the PS meanwhile: once a second it asks every PS,
 * and one that answers without the model (restarted after a crash) gets the
 * latest checkpoint restored on every PS, as during training, so the replicas
 * still training ride the crash out. */
static void wait_workers(const trainer_opts_t *o, const model_ctx_t *m, ps_client_t *pc, ckpt_sched_t *cs,
                         float *params, int replicas, int self)
{
    double start = psc_now(), last_probe = 0;
    int logged = 0;
    int ps = ps_client_step_ps(pc) >= 0 ? ps_client_step_ps(pc) : 0;
    int *misses = psc_xcalloc((size_t)replicas, sizeof *misses);
    unsigned char *seen_done = psc_xcalloc((size_t)replicas, 1);
    psc_rpc_channel_t **ch = psc_xcalloc((size_t)replicas, sizeof *ch);
    for (;;) {
        ps_status_t st;
        char err[512];
        int probe = psc_now() - last_probe >= 1.0;
        if (probe) {
            last_probe = psc_now();
            restore_lost_model(m, pc, cs, params);
        }
        if (ps_client_status(pc, ps, &st, err, sizeof err) == 0) {
            /* done flags seen once count for good: a PS restored from a
             * checkpoint after a crash has forgotten who finished */
            int ndone = 0;
            for (int r = 0; r < replicas; r++) {
                if (r == self || (r < (int)sizeof st.done && st.done[r])) seen_done[r] = 1;
                ndone += seen_done[r];
            }
            if ((int)st.workers_done >= replicas || ndone >= replicas) break;
            int waiting = 0, gone = 0;
            for (int r = 0; r < replicas; r++) {
                if (seen_done[r]) continue;
                waiting++;
                const char *addr = replica_addr(o->cluster, r);
                if (probe && addr) {
                    if (!ch[r]) ch[r] = psc_rpc_channel_create(addr);
                    misses[r] = psc_rpc_health_check(ch[r], 1000) ? 0 : misses[r] + 1;
                }
                gone += misses[r] >= 3;
            }
            if (waiting > 0 && gone == waiting) {
                PSC_WARN("%d replica%s did not finish and %s unreachable: evaluating without waiting", gone,
                         gone == 1 ? "" : "s", gone == 1 ? "is" : "are");
                break;
            }
        }
        if (stopped(o)) break;
        if (psc_now() - start > o->wait_workers_secs) {
            PSC_WARN("not every replica finished within %.0f s; evaluating the model as it is", o->wait_workers_secs);
            break;
        }
        if (!logged) {
            PSC_INFO("waiting up to %.0f s for the other replicas to finish", o->wait_workers_secs);
            logged = 1;
        }
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    for (int r = 0; r < replicas; r++) psc_rpc_channel_destroy(ch[r]);
    free(ch);
    free(misses);
    free(seen_done);
}

/* ---- overlapping the push-pull with the next step (spec->overlap_push_pull) ----
 *
 * One thread runs the asynchronous push-pull of step s while the tower
 * computes step s+1 on the weights of step s-1 (one step more staleness,
 * which asynchronous training has anyway). One call at a time: the trainer
 * touches the ps_client only while no call is in flight (pp_bg_wait first). */
typedef struct pp_bg {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    ps_client_t *pc;
    const float *grads;
    float *params;
    enum { PP_IDLE, PP_ASKED, PP_DONE, PP_QUIT } state;
    int rc;
    int64_t global_step;
    double secs;
    char err[512];
} pp_bg_t;

static void *pp_bg_main(void *arg)
{
    pp_bg_t *b = arg;
    pthread_mutex_lock(&b->mu);
    for (;;) {
        while (b->state != PP_ASKED && b->state != PP_QUIT) pthread_cond_wait(&b->cv, &b->mu);
        if (b->state == PP_QUIT) break;
        pthread_mutex_unlock(&b->mu);
        char err[512] = "";
        int64_t gs = 0;
        double t0 = psc_now();
        int rc = ps_client_push_pull(b->pc, b->grads, b->params, 1, &gs, err, sizeof err);
        double secs = psc_now() - t0;
        pthread_mutex_lock(&b->mu);
        b->rc = rc;
        b->global_step = gs;
        b->secs = secs;
        memcpy(b->err, err, sizeof err);
        b->state = PP_DONE;
        pthread_cond_broadcast(&b->cv);
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

static int pp_bg_start(pp_bg_t *b, ps_client_t *pc, char *err, size_t errlen)
{
    memset(b, 0, sizeof *b);
    b->pc = pc;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    if (pthread_create(&b->thread, NULL, pp_bg_main, b)) {
        pthread_mutex_destroy(&b->mu);
        pthread_cond_destroy(&b->cv);
        b->pc = NULL;
        return psc_seterr(err, errlen, PSC_ENOMEM, "cannot start the push-pull thread");
    }
    return 0;
}

/* Starts push-pull(grads) into params; neither may be touched until pp_bg_wait. */
static void pp_bg_submit(pp_bg_t *b, const float *grads, float *params)
{
    pthread_mutex_lock(&b->mu);
    PSC_ASSERT(b->state == PP_IDLE);
    b->grads = grads;
    b->params = params;
    b->state = PP_ASKED;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

/* Waits for the call started by pp_bg_submit: its result, global_step, duration and error. */
static int pp_bg_wait(pp_bg_t *b, int64_t *global_step, double *secs, char *err, size_t errlen)
{
    pthread_mutex_lock(&b->mu);
    while (b->state != PP_DONE) pthread_cond_wait(&b->cv, &b->mu);
    b->state = PP_IDLE;
    int rc = b->rc;
    if (rc == 0) *global_step = b->global_step;
    *secs = b->secs;
    if (rc) snprintf(err, errlen, "%s", b->err);
    pthread_mutex_unlock(&b->mu);
    return rc;
}

/* Lets a call in flight finish, then ends the thread (no-op when never started). */
static void pp_bg_stop(pp_bg_t *b)
{
    if (!b->pc) return;
    pthread_mutex_lock(&b->mu);
    while (b->state == PP_ASKED) pthread_cond_wait(&b->cv, &b->mu);
    b->state = PP_QUIT;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    pthread_join(b->thread, NULL);
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
    b->pc = NULL;
}

/* Overlap: waits for the push-pull in flight (started at t_step's step, of
 * `examples` examples). Done: its weights become *params (swapped with
 * *params_next). A PS that went away: recovered as in the plain loop (that
 * step's gradient is lost with the PS's state). */
static int pp_collect(const trainer_opts_t *o, const model_ctx_t *m, ps_client_t *pc, int is_chief, ckpt_sched_t *cs,
                      pp_bg_t *pp, float **params, float **params_next, int64_t *global_step, int examples,
                      double t_step, char *err, size_t errlen)
{
    double secs;
    int rc = pp_bg_wait(pp, global_step, &secs, err, errlen);
    if (rc == 0) {
        float *t = *params;
        *params = *params_next;
        *params_next = t;
    } else if (retryable(rc)) {
        worker_metrics_retry(o->metrics);
        rc = recover(o, m, pc, is_chief, cs, *params, global_step, err, errlen);
        secs = -1;
    }
    if (rc == 0) worker_metrics_step(o->metrics, examples, psc_now() - t_step, secs, 0);
    return rc;
}

int trainer_run(const trainer_opts_t *o, trainer_result_t *res, char *err, size_t errlen)
{
    const psc_job_spec_t *spec = o->spec;
    memset(res, 0, sizeof *res);
    int is_chief = psc_task_is_chief(o->cluster, o->task);
    int rank = psc_task_replica_rank(o->cluster, o->task);
    int replicas = psc_cluster_num_replicas(o->cluster);
    int num_ps = o->cluster->n[PSC_JOB_PS];
    if (rank < 0) return psc_seterr(err, errlen, PSC_EINVAL, "task %s:%d is not a training replica",
                                    psc_job_type_name(o->task.type), o->task.index);
    if (num_ps < 1) return psc_seterr(err, errlen, PSC_ECONFIG, "the cluster has no ps task");
    if (spec->sync && spec->total_num_replicas != replicas)
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "job spec: sync.total_num_replicas is %d but the cluster has %d training replicas",
                          spec->total_num_replicas, replicas);

    psc_var_desc_t *vars = NULL;
    psc_placed_var_t *placed = NULL;
    psc_dataset_t train = {0}, test = {0};
    psc_loader_t *loader = NULL;
    towers_t *towers = NULL;
    ps_client_t *pc = NULL;
    float *params = NULL, *grads = NULL, *grads_sum = NULL, *params_next = NULL, *grads_next = NULL;
    pp_bg_t pp = {0};
    int pp_pending = 0; /* overlap: the push-pull of the previous step is in flight */
    int64_t pp_examples = 0;
    double pp_t_step = 0;
    psc_tfevents_t *tb = NULL;
    int64_t *offsets = NULL;
    int nvars = 0, nplaced = 0, rc;

    if ((rc = psc_model_variables(spec, &vars, &nvars, err, errlen))) goto out;
    if ((rc = psc_place(vars, nvars, num_ps, spec->placement, spec->min_shard_bytes, &placed, &nplaced, err,
                        errlen)))
        goto out;
    offsets = psc_xcalloc((size_t)nvars, sizeof *offsets);
    int64_t nparams = tower_layout(vars, nvars, offsets);
    params = psc_xaligned((size_t)nparams * sizeof(float));
    grads = psc_xaligned((size_t)nparams * sizeof(float));
    /* sync with R > N: this replica sums `per_step` batches' gradients per step */
    int per_step = 1;
    if (spec->sync && spec->replicas_to_aggregate > replicas)
        per_step = spec->replicas_to_aggregate / replicas + (rank < spec->replicas_to_aggregate % replicas);
    if (per_step > 1) grads_sum = psc_xaligned((size_t)nparams * sizeof(float));
    if (spec->overlap_push_pull) {
        params_next = psc_xaligned((size_t)nparams * sizeof(float));
        grads_next = psc_xaligned((size_t)nparams * sizeof(float));
    }
    PSC_INFO("model: %d variables, %lld parameters (%.1f MiB), %d placed pieces on %d ps; replica %d of %d%s",
             nvars - 1, (long long)nparams, (double)nparams * 4 / 1048576.0, nplaced, num_ps, rank, replicas,
             is_chief ? " (chief)" : "");

    if ((rc = psc_dataset_load(spec->train_path, spec->train_examples, &train, err, errlen))) goto out;
    if (train.features != spec->input_shape[0] * (spec->input_rank == 3 ? spec->input_shape[1] * spec->input_shape[2] : 1)) {
        rc = psc_seterr(err, errlen, PSC_ECONFIG, "data %s has %d features per example; model.input_shape wants %d",
                        spec->train_path, train.features,
                        spec->input_shape[0] * (spec->input_rank == 3 ? spec->input_shape[1] * spec->input_shape[2] : 1));
        goto out;
    }
    if (is_chief && (rc = psc_dataset_load(spec->test_path, spec->test_examples, &test, err, errlen))) goto out;

    int eval_batch = PSC_MAX(spec->batch_size, 256);
    if ((rc = towers_create(o->devices, spec, vars, nvars, eval_batch, &towers, err, errlen))) goto out;
    if (o->blas_threads > 0) tower_cpu_set_threads(o->blas_threads);
    PSC_INFO("towers: %s (%d), batch %d split across them", towers_describe(towers), towers_count(towers),
             spec->batch_size);
    pc = ps_client_create(o->cluster, vars, nvars, placed, nplaced, rank, o->rpc_timeout_ms);
    if (o->batch_bytes >= 0) ps_client_set_batch_bytes(pc, (size_t)o->batch_bytes);
    if (spec->gradient_dtype == PSC_ENC_BFLOAT16) {
        ps_client_set_gradient_dtype(pc, PSC_ENC_BFLOAT16, spec->error_feedback);
        const char *ef = spec->error_feedback ? "each rounding error carried into the next step" : "no error feedback";
        PSC_INFO("gradients pushed as bfloat16 (half the bytes), %s", ef);
    }
    if (spec->sync) {
        ps_client_set_sync(pc, spec->replicas_to_aggregate, spec->total_num_replicas, spec->sync_timeout_secs);
        PSC_INFO("sync replicas: R=%d of N=%d gradients per step (%d batch%s from this replica), timeout %.1f s",
                 spec->replicas_to_aggregate, spec->total_num_replicas, per_step, per_step == 1 ? "" : "es",
                 spec->sync_timeout_secs);
    }

    /* The chief initializes (or joins) the model; the others wait for it. */
    model_ctx_t mctx = {spec, vars, nvars};
    ckpt_sched_t cs = {0};
    int64_t global_step = 0;
    if (is_chief) {
        ps_model_origin_t origin;
        tower_init_params(vars, nvars, spec->seed, params);
        rc = ps_client_create_model(pc, spec->job_id, &spec->optimizer, params, &origin, err, errlen);
        /* a PS down (or dying) at start-up is ridden out as during training */
        if (rc && retryable(rc)) {
            rc = recover(o, &mctx, pc, is_chief, &cs, params, &global_step, err, errlen);
            memset(&origin, 0, sizeof origin);
        }
        if (rc) goto out;
        if (origin.joined)
            PSC_INFO("the PS already hold job %s's model: joining it", spec->job_id);
        else if (origin.restored)
            PSC_INFO("restored job %s's model from checkpoint %llu (step %lld)", spec->job_id,
                     (unsigned long long)origin.ckpt_id, (long long)origin.step);
        else if (origin.initialized)
            PSC_INFO("initialized job %s's model on the PS", spec->job_id);
    } else if ((rc = ps_client_wait_ready(pc, spec->job_id, o->wait_model_secs, o->stop, err, errlen))) {
        goto out;
    }

    loader = loader_create(&train, rank, replicas, spec->batch_size, spec->seed, spec->shuffle, spec->epochs,
                           o->prefetch, err,
                           errlen);
    if (!loader) {
        rc = PSC_EINVAL;
        goto out;
    }
    int64_t steps_per_epoch = loader_steps_per_epoch(loader);
    int64_t max_steps = spec->steps > 0 ? spec->steps : (steps_per_epoch * spec->epochs + per_step - 1) / per_step;
    PSC_INFO("training on %lld examples (shard %d of %d), %lld steps per epoch, %d epochs, batch %d, %s",
             (long long)loader_shard_size(loader), rank, replicas, (long long)steps_per_epoch, spec->epochs,
             spec->batch_size, psc_optim_name(spec->optimizer.kind));

    rc = ps_client_pull(pc, params, &global_step, err, errlen);
    if (rc && retryable(rc)) rc = recover(o, &mctx, pc, is_chief, &cs, params, &global_step, err, errlen);
    if (rc) goto out;
    if (is_chief) {
        ckpt_sched_init(&cs, pc, spec, global_step);
        control_open(o->control);
    }

    /* a restarted replica resumes after the steps it reported before */
    if (pc && ps_client_step_ps(pc) >= 0) {
        ps_status_t st;
        char serr[256];
        if (ps_client_status(pc, ps_client_step_ps(pc), &st, serr, sizeof serr) == 0 && rank < 256 &&
            st.replica_steps[rank] > 0) {
            int64_t done = PSC_MIN(st.replica_steps[rank], max_steps);
            PSC_INFO("this replica ran %lld steps before it restarted: resuming at step %lld of %lld (global_step %lld)",
                     (long long)st.replica_steps[rank], (long long)done, (long long)max_steps, (long long)global_step);
            for (int64_t k = 0; k < done * per_step && loader_next(loader, &(psc_batch_t){0}) == 0; k++) {}
            res->steps = done;
            ps_client_set_progress(pc, done);
        }
    }

    report(o, 1, 1, res->steps, max_steps, global_step, -1, 0, 0);
    if (is_chief && o->logdir) {
        if ((rc = psc_tfevents_open(o->logdir, ".chief", &tb, err, errlen))) goto out;
        PSC_INFO("TensorBoard events: %s", psc_tfevents_path(tb));
    }
    if (spec->overlap_push_pull) {
        if ((rc = pp_bg_start(&pp, pc, err, errlen))) goto out;
        PSC_INFO("overlap_push_pull: each step's push-pull runs while the next step computes");
    }
    double t0 = psc_now(), t_log = t0;
    int64_t gs_log = global_step;
    double loss_acc = 0;
    int64_t loss_n = 0, correct_acc = 0, examples_acc = 0, examples_total = 0, stale_acc = 0;
    psc_batch_t b;
    int more = 1;
    while (more && res->steps < max_steps) {
        if (stopped(o)) {
            rc = PSC_ECANCELLED;
            psc_seterr(err, errlen, rc, "stopped at step %lld", (long long)res->steps);
            goto out;
        }
        /* forward + backward on per_step batches (1 except sync with R > N) */
        double t_step = psc_now();
        int batches = 0, step_examples = 0;
        if ((rc = towers_set_params(towers, params))) goto tower_failed;
        while (batches < per_step && (more = loader_next(loader, &b) == 0)) {
            float loss;
            int correct;
            uint64_t seed = psc_seed_mix(spec->seed, (uint64_t)(rank * 1000003 + res->steps * per_step + batches));
            if ((rc = towers_train_step(towers, b.x, b.y, b.n, seed, &loss, &correct)) ||
                (rc = towers_get_grads(towers, grads)))
                goto tower_failed;
            if (per_step > 1) {
                if (batches == 0)
                    memcpy(grads_sum, grads, (size_t)nparams * sizeof(float));
                else
                    for (int64_t k = 0; k < nparams; k++) grads_sum[k] += grads[k];
            }
            batches++;
            step_examples += b.n;
            loss_acc += loss * b.n;
            loss_n += b.n;
            correct_acc += correct;
            examples_acc += b.n;
            examples_total += b.n;
        }
        if (batches == 0) break;
        if (o->debug_step_delay_ms > 0) {
            struct timespec ts = {o->debug_step_delay_ms / 1000, (long)(o->debug_step_delay_ms % 1000) * 1000000L};
            nanosleep(&ts, NULL);
        }
        if (spec->overlap_push_pull) {
            /* the previous step's push-pull first: its weights are the next step's */
            if (pp_pending) {
                pp_pending = 0;
                if ((rc = pp_collect(o, &mctx, pc, is_chief, &cs, &pp, &params, &params_next, &global_step,
                                     (int)pp_examples, pp_t_step, err, errlen)))
                    goto out;
                if (is_chief && ckpt_due(&cs, spec, global_step)) {
                    char cerr[512];
                    take_checkpoint(&cs, pc, spec, global_step, "periodic", cerr, sizeof cerr);
                }
                if (is_chief) serve_requests(o, &cs, pc, spec, global_step);
            }
            ps_client_set_progress(pc, res->steps + 1);
            pp_bg_submit(&pp, grads, params_next);
            pp_pending = 1;
            pp_examples = step_examples;
            pp_t_step = t_step;
            float *t = grads;
            grads = grads_next;
            grads_next = t;
            res->steps++;
            report(o, -1, b.epoch + 1, res->steps, max_steps, global_step, -1, 0, 0);
            goto progress_line;
        }
        ps_client_set_progress(pc, res->steps + 1);
        double t_pp = psc_now();
        int step_stale = 0;
        if (spec->sync) {
            /* the reply comes once step `global_step` is applied (or says we were stale) */
            int stale = 0;
            rc = ps_client_push_pull_sync(pc, per_step > 1 ? grads_sum : grads, params, global_step,
                                          (uint32_t)batches, &global_step, &stale, err, errlen);
            if (rc == 0 && stale) {
                step_stale = 1;
                stale_acc++;
                res->stale_steps++;
            }
        } else {
            rc = ps_client_push_pull(pc, grads, params, 1, &global_step, err, errlen);
        }
        /* a PS that went away: wait for it (the chief restores it), pull, go on;
         * this step's gradients are lost with the PS's state */
        double pp_secs = psc_now() - t_pp;
        if (rc && retryable(rc)) {
            worker_metrics_retry(o->metrics);
            rc = recover(o, &mctx, pc, is_chief, &cs, params, &global_step, err, errlen);
            pp_secs = -1;
        }
        if (rc) goto out;
        res->steps++;
        worker_metrics_step(o->metrics, step_examples, psc_now() - t_step, pp_secs, step_stale);
        report(o, -1, b.epoch + 1, res->steps, max_steps, global_step, -1, 0, 0);
        if (is_chief && ckpt_due(&cs, spec, global_step)) {
            char cerr[512];
            take_checkpoint(&cs, pc, spec, global_step, "periodic", cerr, sizeof cerr);
        }
        if (is_chief) serve_requests(o, &cs, pc, spec, global_step);
    progress_line:;
        double now = psc_now();
        if (now - t_log >= o->log_every_secs || res->steps == max_steps || !more) {
            res->last_loss = (float)(loss_acc / (double)loss_n);
            char stale_note[48] = "";
            if (spec->sync) snprintf(stale_note, sizeof stale_note, " stale %lld", (long long)stale_acc);
            PSC_INFO("epoch %d/%d step %lld/%lld global_step %lld loss %.4f accuracy %.4f examples/s %.0f%s",
                     b.epoch + 1, spec->epochs, (long long)res->steps, (long long)max_steps, (long long)global_step,
                     res->last_loss, (double)correct_acc / (double)examples_acc,
                     (double)examples_acc / (now - t_log), stale_note);
            report(o, -1, b.epoch + 1, res->steps, max_steps, global_step, res->last_loss,
                   (double)correct_acc / (double)examples_acc, (double)examples_acc / (now - t_log));
            if (tb) {
                psc_tfevents_scalar(tb, global_step, "loss", res->last_loss);
                psc_tfevents_scalar(tb, global_step, "accuracy", (double)correct_acc / (double)examples_acc);
                psc_tfevents_scalar(tb, global_step, "steps_per_sec", (double)(global_step - gs_log) / (now - t_log));
                psc_tfevents_flush(tb);
            }
            gs_log = global_step;
            stale_acc = 0;
            t_log = now;
            loss_acc = 0;
            loss_n = 0;
            correct_acc = 0;
            examples_acc = 0;
        }
    }
    if (pp_pending) { /* overlap: the last step's push-pull */
        pp_pending = 0;
        if ((rc = pp_collect(o, &mctx, pc, is_chief, &cs, &pp, &params, &params_next, &global_step, (int)pp_examples,
                             pp_t_step, err, errlen)))
            goto out;
    }
    double elapsed = psc_now() - t0;
    res->global_step = global_step;
    res->examples_per_sec = elapsed > 0 ? (double)examples_total / elapsed : 0;
    PSC_INFO("finished %lld steps in %.1f s (%.0f examples/s)", (long long)res->steps, elapsed,
             res->examples_per_sec);
    if (spec->sync)
        PSC_INFO("sync: %lld of %lld steps of this replica were stale (dropped by the PS)",
                 (long long)res->stale_steps, (long long)res->steps);

    uint32_t done = 0;
    report(o, 2, spec->epochs, res->steps, max_steps, global_step, -1, 0, 0);
    if ((rc = ps_client_worker_done(pc, &done, err, errlen))) goto out;
    if (is_chief) {
        wait_workers(o, &mctx, pc, &cs, params, replicas, rank);
        rc = ps_client_pull(pc, params, &global_step, err, errlen);
        if (rc && retryable(rc)) rc = recover(o, &mctx, pc, is_chief, &cs, params, &global_step, err, errlen);
        if (rc) goto out;
        res->global_step = global_step;
        char cerr[512] = "";
        int crc = 0;
        if (cs.enabled && global_step != cs.last_step)
            crc = take_checkpoint(&cs, pc, spec, global_step, "end of training", cerr, sizeof cerr);
        if (control_pending(o->control)) {
            if (!cs.enabled) crc = psc_seterr(cerr, sizeof cerr, PSC_ENOTREADY, "%s", cs.off_why);
            control_answer(o->control, crc, cs.last_id, cs.last_step, cerr);
        }
        control_close(o->control, "training finished");
        if ((rc = towers_set_params(towers, params)) || (rc = evaluate_dataset(towers, &test, eval_batch, res))) {
            psc_seterr(err, errlen, rc, "evaluation failed (%s)", psc_strerror(rc));
            goto out;
        }
        PSC_INFO("evaluation on %lld test examples at global_step %lld: loss %.4f accuracy %.4f",
                 (long long)res->test_examples, (long long)global_step, res->test_loss, res->test_accuracy);
        if (tb) {
            psc_tfevents_scalar(tb, global_step, "test/accuracy", res->test_accuracy);
            psc_tfevents_scalar(tb, global_step, "test/loss", res->test_loss);
        }
        for (int i = 0; i < num_ps; i++) {
            ps_status_t st;
            char serr[256];
            if (ps_client_status(pc, i, &st, serr, sizeof serr) == 0)
                PSC_INFO("ps %d: applied %llu rejected %llu stale %llu timeout_applies %llu", i,
                         (unsigned long long)st.applied, (unsigned long long)st.rejected,
                         (unsigned long long)st.stale, (unsigned long long)st.timeout_applies);
        }
        if (o->shutdown_ps) ps_client_shutdown_all(pc, "training finished");
    }
    goto out;
tower_failed:
    psc_seterr(err, errlen, rc, "tower step %lld failed (%s)", (long long)res->steps, psc_strerror(rc));
out:
    pp_bg_stop(&pp); /* before the ps_client it uses */
    psc_tfevents_close(tb);
    ps_client_destroy(pc);
    loader_destroy(loader);
    towers_destroy(towers);
    psc_dataset_deinit(&train);
    psc_dataset_deinit(&test);
    free(params);
    free(grads);
    free(grads_sum);
    free(params_next);
    free(grads_next);
    free(offsets);
    free(vars);
    free(placed);
    return rc;
}
