/* evaluator.c — see evaluator.h. */
#include "evaluator.h"

#include "log.h"
#include "model_job.h"
#include "model_spec.h"
#include "placement.h"
#include "ps_client.h"
#include "psc.h"
#include "tfevents.h"
#include "tower.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct evaluator_ctx {
    const psc_job_spec_t *spec;
    psc_var_desc_t *vars;
    psc_placed_var_t *placed;
    int nvars, nplaced;
    float *params;
    ps_client_t *pc;
    model_job_t *job; /* the model's kind: its test data and towers (model_job.h) */
};

void evaluator_ctx_destroy(evaluator_ctx_t *e)
{
    if (!e) return;
    model_job_destroy(e->job);
    ps_client_destroy(e->pc);
    free(e->params);
    free(e->vars);
    free(e->placed);
    free(e);
}

int evaluator_ctx_create(const trainer_opts_t *o, evaluator_ctx_t **out, char *err, size_t errlen)
{
    const psc_job_spec_t *spec = o->spec;
    evaluator_ctx_t *e = psc_xcalloc(1, sizeof *e);
    e->spec = spec;
    int rc;
    if ((rc = psc_model_variables(spec, &e->vars, &e->nvars, err, errlen)) ||
        (rc = psc_place(e->vars, e->nvars, o->cluster->n[PSC_JOB_PS], spec->placement, spec->min_shard_bytes,
                        &e->placed, &e->nplaced, err, errlen)))
        goto fail;
    int64_t *offsets = psc_xcalloc((size_t)e->nvars, sizeof *offsets);
    int64_t nparams = tower_layout(e->vars, e->nvars, offsets);
    free(offsets);
    e->params = psc_xaligned((size_t)nparams * sizeof(float));
    e->pc = ps_client_create(o->cluster, e->vars, e->nvars, e->placed, e->nplaced, 0, o->rpc_timeout_ms);
    model_job_opts_t mo = model_job_opts_of(o, e->vars, e->nvars, nparams, e->pc);
    mo.test = 1;
    if ((rc = ps_client_set_job_tables(e->pc, spec, e->nplaced, err, errlen)) ||
        (rc = model_job_create(&mo, &e->job, err, errlen)))
        goto fail;
    *out = e;
    return 0;
fail:
    evaluator_ctx_destroy(e);
    return rc;
}

int evaluator_ctx_run(evaluator_ctx_t *e, uint64_t ckpt, trainer_result_t *res, int64_t *step, char *err, size_t errlen)
{
    uint64_t id; /* ckpt must be a committed checkpoint of the job (keep-last-K deletes them) */
    int rc = ckpt && step ? ps_client_ckpt_find(e->pc, e->spec->job_id, ckpt, &id, step, err, errlen) : 0;
    if (!rc)
        rc = ckpt ? ps_client_pull_checkpoint(e->pc, ckpt, e->params, err, errlen)
                  : ps_client_pull(e->pc, e->params, step, err, errlen);
    return rc ? rc : e->job->ops->evaluate(e->job, e->params, ckpt, res, err, errlen);
}

static int stopped(const trainer_opts_t *o) { return o->stop && atomic_load(o->stop); }

int evaluator_run(const trainer_opts_t *o, trainer_result_t *res, char *err, size_t errlen)
{
    memset(res, 0, sizeof *res);
    evaluator_ctx_t *e;
    int rc = evaluator_ctx_create(o, &e, err, errlen);
    if (rc) return rc;
    psc_tfevents_t *tb = NULL;
    if (o->logdir) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/eval", o->logdir);
        if ((rc = psc_tfevents_open(dir, ".evaluator", &tb, err, errlen))) goto out;
        PSC_INFO("TensorBoard events: %s", psc_tfevents_path(tb));
    }
    if ((rc = ps_client_wait_ready(e->pc, o->spec->job_id, o->wait_model_secs, o->stop, err, errlen))) goto out;
    PSC_INFO("evaluator: evaluating each new checkpoint of job %s on its test set", o->spec->job_id);
    uint64_t last = 0;
    int replicas = psc_cluster_num_replicas(o->cluster);
    int step_ps = ps_client_step_ps(e->pc) >= 0 ? ps_client_step_ps(e->pc) : 0;
    double unreachable_since = 0, all_done_since = 0;
    int evaluated = 0;
    for (;;) {
        if (stopped(o)) {
            rc = psc_seterr(err, errlen, PSC_ECANCELLED, "evaluator stopped");
            break;
        }
        /* the status first: a list fetched after it holds every checkpoint
         * up to the step it reports */
        ps_status_t st;
        char lerr[512];
        int all_done = ps_client_status(e->pc, step_ps, &st, lerr, sizeof lerr) == 0 && (int)st.workers_done >= replicas;
        ps_ckpt_list_t list;
        if (ps_client_ckpt_list(e->pc, o->spec->job_id, 0, &list, lerr, sizeof lerr) != 0) {
            if (unreachable_since == 0) unreachable_since = psc_now();
            if (all_done_since > 0 || psc_now() - unreachable_since > o->retry_secs) {
                PSC_INFO("evaluator: parameter servers gone (%s): done after %d evaluations", lerr, evaluated);
                break;
            }
        } else {
            unreachable_since = 0;
            if (!list.enabled) {
                rc = psc_seterr(err, errlen, PSC_ENOTREADY,
                                "evaluator: the ps_servers keep no checkpoints (start them with --checkpoint_dir)");
                break;
            }
            for (int k = 0; k < list.n; k++) {
                if (list.ids[k] <= last) continue;
                trainer_result_t r = {0};
                char eerr[512];
                if (evaluator_ctx_run(e, list.ids[k], &r, NULL, eerr, sizeof eerr) != 0) {
                    PSC_WARN("evaluator: checkpoint %llu: %s", (unsigned long long)list.ids[k], eerr);
                    last = list.ids[k]; /* deleted (keep) or damaged: the next one */
                    continue;
                }
                last = list.ids[k];
                evaluated++;
                *res = r;
                res->global_step = list.steps[k];
                if (r.has_auc)
                    PSC_INFO("evaluator: checkpoint %llu (step %lld): test AUC %.4f log loss %.4f",
                             (unsigned long long)list.ids[k], (long long)list.steps[k], r.test_auc, r.test_loss);
                else
                    PSC_INFO("evaluator: checkpoint %llu (step %lld): test accuracy %.4f loss %.4f",
                             (unsigned long long)list.ids[k], (long long)list.steps[k], r.test_accuracy, r.test_loss);
                if (tb) {
                    if (r.has_auc) psc_tfevents_scalar(tb, list.steps[k], "eval/auc", r.test_auc);
                    psc_tfevents_scalar(tb, list.steps[k], "eval/accuracy", r.test_accuracy);
                    psc_tfevents_scalar(tb, list.steps[k], "eval/loss", r.test_loss);
                    psc_tfevents_flush(tb);
                }
            }
            if (all_done) {
                /* every replica is done, so the step no longer moves: the
                 * chief's final checkpoint holds it. Done once the list has
                 * it (and all before it were evaluated above); a chief whose
                 * final checkpoint fails gets retry_secs to say so. */
                if (all_done_since == 0) all_done_since = psc_now();
                int64_t newest = -1;
                for (int k = 0; k < list.n; k++)
                    if (list.steps[k] > newest) newest = list.steps[k];
                if (st.has_global_step && newest >= st.global_step) {
                    PSC_INFO("evaluator: every replica finished; done after %d evaluations", evaluated);
                    break;
                }
                if (psc_now() - all_done_since > o->retry_secs) {
                    PSC_WARN("evaluator: every replica finished but no checkpoint at the final global_step %lld "
                             "came within --retry_secs %.0f s (the chief's final checkpoint failed?): done after %d "
                             "evaluations",
                             (long long)st.global_step, o->retry_secs, evaluated);
                    break;
                }
            }
        }
        struct timespec ts = {0, 500 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
out:
    psc_tfevents_close(tb);
    evaluator_ctx_destroy(e);
    return rc;
}
