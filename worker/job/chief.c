/* chief.c — see chief.h. */
#include "chief.h"

#include "chief_mailbox.h"
#include "evaluator.h"
#include "failures.h"
#include "fanout.h"
#include "grpc/health/v1/health.pb-c.h"
#include "log.h"
#include "psc.h"
#include "rpc.h"
#include "tower.h"
#include "warm_start.h"
#include "wire.h"
#include "worker_metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct chief {
    chief_opts_t o;
    ps_client_t *pc;
    /* the checkpoint schedule */
    int enabled;          /* every PS has a --checkpoint_dir */
    char off_why[600];    /* why not */
    uint64_t next_id;     /* above every id any PS holds, of any job */
    uint64_t last_id;     /* the last checkpoint taken (0: none yet) */
    int64_t last_step;    /* its step (or where the schedule started) */
    int64_t committed_step; /* the step of this job's newest committed checkpoint (-1: none) */
    int committed_final;    /* it is an end of training's (or was found on the PS: a restarted chief's) */
    int final_failed;     /* the final checkpoint failed: the PS keep the only copy of the model */
    double last_time;
    double last_rows_look; /* a job with tables: when every PS's Status was last read (their rows, for a lost shard's WARN) */
    int periodic_tries, requested_tries; /* steps a checkpoint waited for a sync step boundary */
    warm_start_t ws;      /* the spec's warm_start: the model's initial values (ps_client's init hook) */
};

chief_t *chief_create(const chief_opts_t *o, ps_client_t *pc)
{
    chief_t *c = psc_xcalloc(1, sizeof *c);
    c->o = *o;
    c->pc = pc;
    c->committed_step = -1;
    snprintf(c->off_why, sizeof c->off_why, "checkpoints off: the schedule has not started");
    chief_mailbox_open(o->requests);
    ps_client_set_legacy_job_id(pc, o->spec->legacy_job_id);
    if (o->spec->warm_start.on) {
        c->ws = (warm_start_t){.spec = o->spec, .vars = o->vars, .nvars = o->nvars, .pc = pc, .cluster = o->cluster};
        ps_client_set_init_hook(pc, warm_start_apply, &c->ws);
        ps_client_set_stage_hook(pc, warm_start_stage, &c->ws);
    }
    return c;
}

void chief_destroy(chief_t *c, const char *why)
{
    if (!c) return;
    ps_client_set_init_hook(c->pc, NULL, NULL);
    ps_client_set_stage_hook(c->pc, NULL, NULL);
    chief_mailbox_close(c->o.requests, why);
    free(c);
}

/* ---- the model ---- */

int chief_create_model(chief_t *c, float *params, ps_model_origin_t *origin, char *err, size_t errlen)
{
    const psc_job_spec_t *spec = c->o.spec;
    tower_init_params(c->o.vars, c->o.nvars, spec->seed, params); /* used only if nothing can be restored */
    c->ws.params = params;
    int rc = ps_client_create_model(c->pc, spec->job_id, &spec->optimizer, params, origin, err, errlen);
    if (rc) return rc;
    if (origin->joined)
        PSC_INFO("the PS already hold job %s's model: joining it", spec->job_id);
    else if (origin->restored && origin->resharded_from)
        PSC_INFO("restored job %s's model from checkpoint %llu (step %lld), re-split from %d ps_servers onto %d",
                 spec->job_id, (unsigned long long)origin->ckpt_id, (long long)origin->step, origin->resharded_from,
                 ps_client_num_ps(c->pc));
    else if (origin->restored)
        PSC_INFO("restored job %s's model from checkpoint %llu (step %lld)", spec->job_id,
                 (unsigned long long)origin->ckpt_id, (long long)origin->step);
    else if (origin->initialized)
        PSC_INFO("initialized job %s's model on the PS", spec->job_id);
    if (origin->initialized && origin->ckpt_id) { /* a warm start's staged first checkpoint */
        c->last_step = origin->step;
        c->committed_step = PSC_MAX(c->committed_step, origin->step);
        c->committed_final = 1;
    }
    return 0;
}

/* Logs what declaring the model again after a PS lost it did. */
static void log_put_back(chief_t *c, const char *who, const ps_model_origin_t *origin)
{
    if (origin->restored) {
        PSC_WARN("%s lost the model: restored checkpoint %llu (step %lld) on every ps", who,
                 (unsigned long long)origin->ckpt_id, (long long)origin->step);
        c->last_step = origin->step;
        c->committed_step = PSC_MAX(c->committed_step, origin->step);
        c->committed_final = 1;
    } else if (origin->initialized && !origin->reinitialized) { /* (a partial one: ps_client's WARN names the variables) */
        PSC_WARN("%s lost the model and there is no checkpoint: it starts again from initial values", who);
    }
}

int chief_redeclare_model(chief_t *c, int lost_ps, float *params, char *err, size_t errlen)
{
    ps_model_origin_t origin;
    tower_init_params(c->o.vars, c->o.nvars, c->o.spec->seed, params); /* used only if nothing can be restored */
    c->ws.params = params;
    int rc = ps_client_create_model(c->pc, c->o.spec->job_id, &c->o.spec->optimizer, params, &origin, err, errlen);
    if (rc) return rc;
    char who[32] = "a ps";
    if (lost_ps >= 0) snprintf(who, sizeof who, "ps %d", lost_ps);
    log_put_back(c, who, &origin);
    return 0;
}

int chief_restore_lost_model(chief_t *c, float *params)
{
    int lost = -1, P = ps_client_num_ps(c->pc);
    ps_status_t *st = psc_xcalloc((size_t)P, sizeof *st);
    int *ok = psc_xcalloc((size_t)P, sizeof *ok);
    char err[512];
    ps_client_status_all(c->pc, st, ok, err, sizeof err); /* one that does not answer is not known to have lost it */
    for (int i = 0; i < P && lost < 0; i++)
        if (ok[i] && (!st[i].ready || strcmp(st[i].job_id, c->o.spec->job_id) != 0)) lost = i;
    free(st);
    free(ok);
    if (lost < 0) return 0;
    if (chief_redeclare_model(c, lost, params, err, sizeof err)) {
        PSC_WARN("ps %d lost the model; restoring it failed (will retry): %s", lost, err);
        return 0;
    }
    return 1;
}

/* ---- checkpoints ---- */

/* next_id: above the largest id any PS holds, of any job (ids are unique in
 * a store; jobs that share the stores share the id space). */
static int refresh_next_id(chief_t *c, char *err, size_t errlen)
{
    ps_ckpt_list_t all;
    int rc = ps_client_ckpt_list(c->pc, "", 0, &all, err, errlen);
    if (rc == 0) c->next_id = PSC_MAX(c->next_id, all.max_id + 1);
    return rc;
}

void chief_start_schedule(chief_t *c, int64_t global_step)
{
    const psc_job_spec_t *spec = c->o.spec;
    ps_ckpt_list_t list;
    char err[512];
    if (ps_client_ckpt_list(c->pc, spec->job_id, 0, &list, err, sizeof err) ||
        (list.enabled && refresh_next_id(c, err, sizeof err))) {
        snprintf(c->off_why, sizeof c->off_why, "checkpoints off: %s", err);
        PSC_WARN("%s", c->off_why);
        return;
    }
    if (!list.enabled) {
        snprintf(c->off_why, sizeof c->off_why, "checkpoints off: not every ps_server was started with --checkpoint_dir");
        PSC_INFO("%s", c->off_why);
        return;
    }
    c->enabled = 1;
    c->last_step = global_step;
    c->last_time = psc_now();
    /* the final checkpoint is due whenever the newest committed one is older
     * than the final step: a chief restarted at the end (its schedule starting
     * at the final global_step) must still take it */
    for (int i = 0; i < list.n; i++) c->committed_step = PSC_MAX(c->committed_step, list.steps[i]);
    c->committed_final = 1;
    char every[96] = "";
    if (spec->ckpt_every_steps > 0) snprintf(every, sizeof every, "every %lld steps, ", (long long)spec->ckpt_every_steps);
    if (spec->ckpt_every_secs > 0)
        snprintf(every + strlen(every), sizeof every - strlen(every), "every %.0f s, ", spec->ckpt_every_secs);
    PSC_INFO("checkpoints: %sat the end, keeping the last %d; the next id is %llu", every, spec->ckpt_keep,
             (unsigned long long)c->next_id);
}

/* Counts one attempt in the job's status and the metrics. */
static void count(chief_t *c, int ok, const char *why, int64_t step, const char *err)
{
    worker_metrics_checkpoint(c->o.metrics, ok);
    trainer_progress_t *p = c->o.progress;
    if (!p) return;
    pthread_mutex_lock(&p->lock);
    if (ok) {
        p->checkpoints++;
    } else {
        p->checkpoint_failures++;
        snprintf(p->checkpoint_error, sizeof p->checkpoint_error, "%s checkpoint at step %lld: %s", why,
                 (long long)step, err);
    }
    pthread_mutex_unlock(&p->lock);
}

/* One checkpoint at `step` (two phases, ps_client_ckpt_save). An id another
 * job took meanwhile (ALREADY_EXISTS) is skipped once. */
static int take(chief_t *c, int64_t step, const char *why, char *err, size_t errlen)
{
    const psc_job_spec_t *spec = c->o.spec;
    if (!c->enabled) return psc_seterr(err, errlen, PSC_ENOTREADY, "%s", c->off_why);
    double t0 = psc_now();
    uint64_t id = c->next_id++;
    int64_t saved = step;
    int rc = ps_client_ckpt_save(c->pc, spec->job_id, id, step, spec->ckpt_keep, &saved, err, errlen);
    if (rc == PSC_EEXISTS && refresh_next_id(c, err, errlen) == 0) {
        id = c->next_id++;
        rc = ps_client_ckpt_save(c->pc, spec->job_id, id, step, spec->ckpt_keep, &saved, err, errlen);
    }
    c->last_time = psc_now();
    if (rc) return rc;
    c->last_step = saved;
    c->committed_step = saved;
    c->committed_final = strcmp(why, "end of training") == 0;
    c->last_id = id;
    count(c, 1, why, saved, NULL);
    PSC_INFO("checkpoint %llu (%s) committed on every ps: step %lld, %.0f ms", (unsigned long long)id, why,
             (long long)saved, (psc_now() - t0) * 1000);
    return 0;
}

/* A sync PS refused because it was past the step boundary ("not at step
 * boundary"): the next step's boundary will do (up to 10 steps). Any other
 * failure, and every failure in async mode (a PS that died during the save
 * included), is a checkpoint not taken: counted and reported by the caller. */
static int wait_boundary(const chief_t *c, int rc, const char *err, int *tries)
{
    if (c->o.spec->sync && rc == PSC_EUNAVAILABLE && strstr(err, "not at step boundary") && ++*tries < 10) return 1;
    *tries = 0;
    return 0;
}

static int due(const chief_t *c, int64_t step)
{
    const psc_job_spec_t *spec = c->o.spec;
    return c->enabled && ((spec->ckpt_every_steps > 0 && step - c->last_step >= spec->ckpt_every_steps) ||
                          (spec->ckpt_every_secs > 0 && psc_now() - c->last_time >= spec->ckpt_every_secs));
}

/* The chief knows how many rows each table part holds (a PS that dies before
 * any checkpoint loses them, and its WARN says how many): every PS's Status
 * every 10 s, a job with tables only. */
static void look_at_rows(chief_t *c)
{
    if (c->o.spec->num_tables == 0 || psc_now() - c->last_rows_look < 10) return;
    c->last_rows_look = psc_now();
    int P = ps_client_num_ps(c->pc);
    ps_status_t *st = psc_xcalloc((size_t)P, sizeof *st);
    int *ok = psc_xcalloc((size_t)P, sizeof *ok);
    char err[256];
    ps_client_status_all(c->pc, st, ok, err, sizeof err);
    free(st);
    free(ok);
}

void chief_after_step(chief_t *c, int64_t global_step)
{
    char err[512];
    look_at_rows(c);
    if (due(c, global_step)) {
        int rc = take(c, global_step, "periodic", err, sizeof err);
        if (rc && !wait_boundary(c, rc, err, &c->periodic_tries)) {
            count(c, 0, "periodic", global_step, err);
            PSC_WARN("periodic checkpoint at step %lld not taken: %s; trying again at the next period",
                     (long long)global_step, err);
            c->last_step = global_step; /* the next period starts now */
            c->last_time = psc_now();
        }
    }
    if (!chief_mailbox_pending(c->o.requests)) return;
    int rc = take(c, global_step, "requested", err, sizeof err);
    if (rc && wait_boundary(c, rc, err, &c->requested_tries)) return;
    if (rc) {
        count(c, 0, "requested", global_step, err);
        PSC_WARN("requested checkpoint at step %lld not taken: %s", (long long)global_step, err);
    }
    chief_mailbox_answer(c->o.requests, rc, c->last_id, c->last_step, err);
}

/* ---- the end ---- */

static int stopped(const chief_t *c) { return c->o.stop && atomic_load(c->o.stop); }

/* Health probes of the replicas still waited for go out at once (fanout.h):
 * one round costs about one probe timeout per FANOUT_MAX replicas, not one
 * per replica. */
#define CHIEF_PROBE_MS 1000

/* One round: misses[r] = 0 for each replica r with want[r] that answers
 * SERVING within CHIEF_PROBE_MS, else misses[r] + 1. */
static void probe_replicas(const chief_t *c, const unsigned char *want, int *misses, int replicas)
{
    Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    uint8_t buf[64];
    size_t len = grpc__health__v1__health_check_request__pack(&req, buf);
    const char **addrs = psc_xcalloc((size_t)replicas + 1, sizeof *addrs);
    psc_rpc_op_t *ops = psc_xcalloc((size_t)replicas + 1, sizeof *ops);
    for (int r = 0; r < replicas; r++) addrs[r] = want[r] ? psc_cluster_replica_addr(c->o.cluster, r) : NULL;
    fanout_call(addrs, (size_t)replicas, PSC_M_HEALTH, buf, len, CHIEF_PROBE_MS, ops);
    for (int r = 0; r < replicas; r++) {
        if (!addrs[r]) continue;
        int serving = 0;
        if (ops[r].code == PSC_RPC_OK) {
            Grpc__Health__V1__HealthCheckResponse *h =
                grpc__health__v1__health_check_response__unpack(NULL, ops[r].reply_len, ops[r].reply);
            serving = h && h->status == GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
            if (h) grpc__health__v1__health_check_response__free_unpacked(h, NULL);
        }
        misses[r] = serving ? 0 : misses[r] + 1;
        psc_rpc_op_clear(&ops[r]);
    }
    free(ops);
    free(addrs);
}

/* Who replica r is, for messages: "replica 1 (worker 1)". */
static void replica_name(const chief_t *c, int r, char *out, size_t len)
{
    const psc_cluster_t *cl = c->o.cluster;
    int has_chief = cl->n[PSC_JOB_CHIEF] > 0;
    if (has_chief && r == 0)
        snprintf(out, len, "replica 0 (chief 0)");
    else
        snprintf(out, len, "replica %d (worker %d)", r, r - has_chief);
}

/* The replicas that did not finish, when the wait is over: each named with
 * the steps it trained of its share (its count on the PS that holds
 * global_step). Into err; the count of them. */
static int unfinished(const chief_t *c, const unsigned char *seen_done, const ps_status_t *st, int have_st,
                      int replicas, char *err, size_t errlen)
{
    int n = 0;
    size_t at = 0;
    err[0] = '\0';
    for (int r = 0; r < replicas && at < errlen; r++) {
        if (seen_done[r]) continue;
        char name[64], of[48] = "";
        replica_name(c, r, name, sizeof name);
        int64_t done = have_st && r < PSC_MAX_REPLICAS ? st->replica_steps[r] : 0;
        int64_t want = c->o.expected_steps ? c->o.expected_steps[r] : 0;
        if (want > 0) snprintf(of, sizeof of, " of %lld", (long long)want);
        at += (size_t)snprintf(err + at, errlen - at, "%s%s trained %lld%s steps%s", n ? "; " : "", name,
                               (long long)done, of, want > 0 ? "" : " and did not finish its share");
        n++;
    }
    return n;
}

/* The chief still looks after the PS while it waits: once a second it asks
 * every PS, and one that answers without the model (restarted after a crash)
 * gets the latest checkpoint restored on every PS, as during training, so the
 * replicas still training ride the crash out. In the same round it probes the
 * replicas not done yet (probe_replicas) to say which are unreachable. An
 * unreachable replica may be restarting (Kubernetes restarts pods; a restarted
 * replica resumes its share): it is waited for like the others, up to
 * wait_workers_secs. In asynchronous training the others still move
 * global_step meanwhile: the checkpoints that fall due (every_steps,
 * every_secs) and those psctl asks for are taken as during training. */
int chief_wait_workers(chief_t *c, float *params, int self, char *err, size_t errlen)
{
    int replicas = psc_cluster_num_replicas(c->o.cluster);
    double start = psc_now(), last_probe = 0, last_log = 0;
    int ps = ps_client_step_ps(c->pc) >= 0 ? ps_client_step_ps(c->pc) : 0;
    int *misses = psc_xcalloc((size_t)replicas, sizeof *misses);
    unsigned char *seen_done = psc_xcalloc((size_t)replicas, 1);
    unsigned char *want = psc_xcalloc((size_t)replicas, 1);
    ps_status_t st;
    int have_st = 0, rc = 0;
    for (;;) {
        char why[1024];
        int probe = psc_now() - last_probe >= 1.0;
        if (probe) {
            last_probe = psc_now();
            chief_restore_lost_model(c, params);
        }
        if (failures_replica(c->o.failures, why, sizeof why)) {
            rc = psc_seterr(err, errlen, PSC_EJOBFAILED, "%s", why);
            break;
        }
        ps_status_t now;
        if (ps_client_status(c->pc, ps, &now, why, sizeof why) == 0) {
            st = now;
            have_st = 1;
            /* done flags seen once count for good: a PS restored from a
             * checkpoint after a crash has forgotten who finished */
            int ndone = 0;
            for (int r = 0; r < replicas; r++) {
                if (r == self || (r < (int)sizeof st.done && st.done[r])) seen_done[r] = 1;
                ndone += seen_done[r];
            }
            if ((int)st.workers_done >= replicas || ndone >= replicas) {
                PSC_INFO("every other replica finished: waited %.1f s", psc_now() - start);
                break;
            }
            if (!c->o.spec->sync && st.has_global_step) chief_after_step(c, st.global_step);
            for (int r = 0; r < replicas; r++) want[r] = probe && !seen_done[r];
            if (probe) probe_replicas(c, want, misses, replicas);
        }
        if (stopped(c)) {
            rc = psc_seterr(err, errlen, PSC_ECANCELLED, "stopped while waiting for the other replicas");
            break;
        }
        if (psc_now() - start > c->o.wait_workers_secs) {
            unfinished(c, seen_done, &st, have_st, replicas, why, sizeof why);
            if (c->o.spec->allow_partial) {
                PSC_WARN("not every replica finished within --wait_workers_secs %.0f s: %s; the job ends without "
                         "them (allow_partial)", c->o.wait_workers_secs, why);
                break;
            }
            rc = psc_seterr(err, errlen, PSC_EJOBFAILED, "not every replica finished within --wait_workers_secs %.0f s: %s",
                            c->o.wait_workers_secs, why);
            break;
        }
        if (psc_now() - last_log >= 10) {
            char names[512] = "";
            size_t at = 0;
            for (int r = 0; r < replicas && at < sizeof names; r++)
                if (!seen_done[r])
                    at += (size_t)snprintf(names + at, sizeof names - at, "%s%d%s", at ? ", " : "", r,
                                           misses[r] >= 3 ? " (unreachable: restarting?)" : "");
            PSC_INFO("waiting up to %.0f s more for replica%s %s to finish", c->o.wait_workers_secs - (psc_now() - start),
                     strchr(names, ',') ? "s" : "", names);
            last_log = psc_now();
        }
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    free(want);
    free(misses);
    free(seen_done);
    return rc;
}

/* A checkpoint of the model as it is (tries sync step boundaries for a
 * second); on failure err says why. 0 when taken or none is needed: one
 * committed at global_step already (with `again`, a periodic one does not
 * count). */
static int take_now(chief_t *c, int64_t global_step, const char *why, int again, char *err, size_t errlen)
{
    if (!c->enabled || (global_step == c->committed_step && (!again || c->committed_final))) return 0;
    int rc, tries = 0;
    while ((rc = take(c, global_step, why, err, errlen)) && wait_boundary(c, rc, err, &tries)) {
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (rc) count(c, 0, why, global_step, err);
    return rc;
}

/* The final checkpoint; on failure err says what failed and what to do. */
static int final_checkpoint(chief_t *c, int64_t global_step, char *err, size_t errlen)
{
    char why[512];
    /* a periodic or requested checkpoint at the final step (the chief's last
     * step's, or one taken while it waited for the others) does not stand
     * for the end of training's */
    int rc = take_now(c, global_step, "end of training", 1, why, sizeof why);
    if (rc == 0) return 0;
    c->final_failed = 1;
    char prev[96] = "no earlier checkpoint of this job exists";
    if (c->last_id)
        snprintf(prev, sizeof prev, "the newest is checkpoint %llu at step %lld", (unsigned long long)c->last_id,
                 (long long)c->last_step);
    PSC_ERROR("the final checkpoint at global_step %lld failed: %s. The trained weights are still on the PS%s: save "
              "them now with `psctl export --format safetensors -o FILE --cluster ...`, then fix the cause (each "
              "ps_server's log names it: a full or unwritable --checkpoint_dir?); %s, and a job submitted again with "
              "the same model restores it",
              (long long)global_step, why, c->o.shutdown_ps ? " (left running for that; stop them when done)" : "",
              prev);
    return psc_seterr(err, errlen, rc, "training finished at global_step %lld but the final checkpoint failed: %s",
                      (long long)global_step, why);
}

void chief_checkpoint_as_is(chief_t *c, int64_t global_step, const char *why)
{
    char err[512];
    if (!c->enabled) return;
    if (take_now(c, global_step, why, 0, err, sizeof err))
        PSC_WARN("checkpoint (%s) at global_step %lld not taken: %s", why, (long long)global_step, err);
}

int chief_keeps_ps(const chief_t *c) { return c && c->final_failed; }

uint64_t chief_last_checkpoint(const chief_t *c) { return c->last_id; }

int chief_finish(chief_t *c, int64_t global_step, chief_eval_fn eval, void *eval_ctx, float *params,
                 trainer_result_t *res, char *err, size_t errlen)
{
    int rc = final_checkpoint(c, global_step, err, errlen);
    if (chief_mailbox_pending(c->o.requests)) { /* requests that came after the last step: the final checkpoint */
        char why[512] = "";
        int arc = rc;
        if (!c->enabled) arc = psc_seterr(why, sizeof why, PSC_ENOTREADY, "%s", c->off_why);
        chief_mailbox_answer(c->o.requests, arc, c->last_id, c->last_step, arc == rc ? err : why);
    }
    chief_mailbox_close(c->o.requests, "training finished");
    char eerr[512] = "";
    int erc = eval(eval_ctx, params, res, eerr, sizeof eerr);
    if (erc == PSC_ENOTFOUND) {
        PSC_INFO("no evaluation: %s", eerr);
    } else if (erc) {
        if (!rc) rc = psc_seterr(err, errlen, erc, "evaluation failed: %s", eerr);
    } else if (res->has_auc) {
        PSC_INFO("evaluation on %lld test examples at global_step %lld: AUC %.4f log loss %.4f accuracy %.4f",
                 (long long)res->test_examples, (long long)global_step, res->test_auc, res->test_loss,
                 res->test_accuracy);
    } else {
        PSC_INFO("evaluation on %lld test examples at global_step %lld: loss %.4f accuracy %.4f",
                 (long long)res->test_examples, (long long)global_step, res->test_loss, res->test_accuracy);
    }
    for (int i = 0; i < ps_client_num_ps(c->pc); i++) {
        ps_status_t st;
        char serr[256];
        if (ps_client_status(c->pc, i, &st, serr, sizeof serr) == 0)
            PSC_INFO("ps %d: applied %llu rejected %llu stale %llu timeout_applies %llu", i,
                     (unsigned long long)st.applied, (unsigned long long)st.rejected, (unsigned long long)st.stale,
                     (unsigned long long)st.timeout_applies);
    }
    if (c->o.shutdown_ps && rc == 0) ps_client_shutdown_all(c->pc, "training finished");
    return rc;
}
