/* control.c — see control.h. */
#include "control.h"

#include "failures.h"
#include "fanout.h"

#include "job_spec.h"
#include "log.h"
#include "psc.h"
#include "psc.pb-c.h"
#include "wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct control {
    int is_chief;
    char chief_addr[256];
    chief_mailbox_t *requests;
    failures_t *failures;
    atomic_int *stop; /* in-cluster mode: the job's stop flag (a failing Cancel sets it) */
    /* standalone mode (set before the server starts) */
    runner_t *runner;
    const psc_cluster_t *cluster;
    int self_rank;
    int timeout_ms;
};

void control_set_standalone(control_t *c, runner_t *runner, const psc_cluster_t *cluster, int self_rank, int timeout_ms)
{
    c->runner = runner;
    c->cluster = cluster;
    c->self_rank = self_rank;
    c->timeout_ms = timeout_ms;
}

void control_set_in_cluster(control_t *c, atomic_int *stop) { c->stop = stop; }

control_t *control_create(int is_chief, const char *chief_addr, chief_mailbox_t *requests, failures_t *failures)
{
    control_t *c = psc_xcalloc(1, sizeof *c);
    c->is_chief = is_chief;
    snprintf(c->chief_addr, sizeof c->chief_addr, "%s", chief_addr ? chief_addr : "(unknown)");
    c->requests = requests;
    c->failures = failures;
    return c;
}

void control_destroy(control_t *c) { free(c); }

static void h_checkpoint(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg)
{
    control_t *c = arg;
    Psc__CheckpointRequest *r = psc__checkpoint_request__unpack(NULL, len, req);
    if (!r) {
        psc_rpc_fail(call, PSC_RPC_INVALID_ARGUMENT, "CheckpointRequest does not parse (%zu bytes)", len);
        return;
    }
    PSC_INFO("checkpoint requested by %s%s%s", psc_rpc_call_peer(call), r->reason[0] ? ": " : "", r->reason);
    psc__checkpoint_request__free_unpacked(r, NULL);
    if (!c->is_chief) {
        psc_rpc_fail(call, PSC_RPC_FAILED_PRECONDITION, "this worker is not the chief; the chief is %s", c->chief_addr);
        return;
    }
    chief_mailbox_park(c->requests, call); /* the chief's loop answers it (chief.c) */
}

/* ---- standalone mode ---- */

/* Sends the same request to addrs[0..n) at once (fanout.h; NULL entries
 * skipped) and waits for every call. ops: n entries, out; the caller clears
 * them (psc_rpc_op_clear). 0 when every call ended OK, else the first failure
 * (psc_rpc_first_failure's choice) in err, naming its address. */
static int call_all(const char *const *addrs, size_t n, const char *method, const void *req, size_t len, int timeout_ms,
                    psc_rpc_op_t *ops, char *err, size_t errlen)
{
    fanout_call(addrs, n, method, req, len, timeout_ms, ops);
    size_t bad = psc_rpc_first_failure(ops, n);
    if (bad == n) return 0;
    return psc_seterr(err, errlen, psc_rpc_code_errno(ops[bad].code), "%s on %s: %s: %s", method, addrs[bad],
                      psc_rpc_code_name(ops[bad].code), ops[bad].msg);
}

static void clear_all(psc_rpc_op_t *ops, size_t n)
{
    for (size_t i = 0; i < n; i++) psc_rpc_op_clear(&ops[i]);
}

/* Address of fan-out target k (0 <= k < targets): the training replicas, then
 * the evaluator; NULL for this worker itself or an empty slot. */
static int targets(const control_t *c)
{
    return psc_cluster_num_replicas(c->cluster) + c->cluster->n[PSC_JOB_EVALUATOR];
}
static const char *target_addr(const control_t *c, int k)
{
    int R = psc_cluster_num_replicas(c->cluster);
    if (k < R) return k == c->self_rank ? NULL : psc_cluster_replica_addr(c->cluster, k);
    return c->cluster->addr[PSC_JOB_EVALUATOR][k - R];
}

/* Sends the same request to every other replica and the evaluator at once
 * (call_all); ops: targets(c) entries, cleared by the caller. */
static int call_others(control_t *c, const char *method, const void *req, size_t len, psc_rpc_op_t *ops, char *err,
                       size_t errlen)
{
    int n = targets(c);
    const char **addrs = psc_xcalloc((size_t)n + 1, sizeof *addrs);
    for (int k = 0; k < n; k++) addrs[k] = target_addr(c, k);
    int rc = call_all(addrs, (size_t)n, method, req, len, c->timeout_ms, ops, err, errlen);
    free(addrs);
    return rc;
}

/* Drops whatever job the PS hold (the chief runs none now), so the next Create succeeds. */
static int release_ps(control_t *c, char *err, size_t errlen)
{
    Psc__ReleaseRequest req = PSC__RELEASE_REQUEST__INIT;
    uint8_t buf[8];
    size_t len = psc__release_request__pack(&req, buf);
    size_t P = (size_t)c->cluster->n[PSC_JOB_PS];
    psc_rpc_op_t *ops = psc_xcalloc(P + 1, sizeof *ops);
    int rc = call_all((const char *const *)c->cluster->addr[PSC_JOB_PS], P, PSC_M_RELEASE, buf, len, c->timeout_ms, ops,
                      err, errlen);
    for (size_t i = 0; rc == 0 && i < P; i++) {
        Psc__ReleaseReply *r = psc__release_reply__unpack(NULL, ops[i].reply_len, ops[i].reply);
        if (r && r->released[0]) PSC_INFO("ps %zu released job %s", i, r->released);
        if (r) psc__release_reply__free_unpacked(r, NULL);
    }
    clear_all(ops, P);
    free(ops);
    return rc;
}

/* The chief tells every other training replica and the evaluator to cancel
 * (best effort: each failure is logged). */
static void cancel_others(control_t *c) { failures_stop_others(c->cluster, c->self_rank, "", 0, c->timeout_ms); }

static int no_standalone(control_t *c, psc_rpc_call_t *call)
{
    if (c->runner) return 0;
    psc_rpc_fail(call, PSC_RPC_FAILED_PRECONDITION,
                 "this worker runs the job given by --job_spec (in-cluster mode); start it without --job_spec to "
                 "take jobs from psctl");
    return 1;
}

static void h_submit(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg)
{
    control_t *c = arg;
    char err[512];
    Psc__SubmitRequest *r = psc__submit_request__unpack(NULL, len, req);
    if (!r) {
        psc_rpc_fail(call, PSC_RPC_INVALID_ARGUMENT, "SubmitRequest does not parse (%zu bytes)", len);
        return;
    }
    if (no_standalone(c, call)) goto out;
    if (!c->is_chief) {
        psc_rpc_fail(call, PSC_RPC_FAILED_PRECONDITION, "this worker is not the chief; the chief is %s", c->chief_addr);
        goto out;
    }
    runner_status_t st;
    runner_status(c->runner, &st);
    if (st.state == RUNNER_RUNNING) {
        psc_rpc_fail(call, PSC_RPC_FAILED_PRECONDITION, "job %s is running (psctl stop cancels it)", st.job_id);
        goto out;
    }
    psc_job_spec_t spec;
    if (psc_job_spec_parse(r->spec_json, &spec, err, sizeof err)) {
        psc_rpc_fail(call, PSC_RPC_INVALID_ARGUMENT, "%s", err);
        goto out;
    }
    if (psc_job_spec_check(&spec, c->cluster, err, sizeof err)) { /* against this cluster, before anything starts */
        psc_job_spec_deinit(&spec);
        psc_rpc_fail(call, PSC_RPC_INVALID_ARGUMENT, "%s", err);
        goto out;
    }
    char job_id[17];
    snprintf(job_id, sizeof job_id, "%s", spec.job_id);
    psc_job_spec_deinit(&spec);
    PSC_INFO("job %s submitted by %s", job_id, psc_rpc_call_peer(call));
    double t0 = psc_now();
    int rc = release_ps(c, err, sizeof err);
    if (rc) {
        psc_rpc_fail(call, psc_rpc_status_of(rc), "cannot prepare the parameter servers: %s", err);
        goto out;
    }
    /* what still runs elsewhere belongs to the last job (the evaluator's last
     * look at it, a slow replica): cancel it; Start waits for it to end */
    cancel_others(c);
    /* the others first: they wait for the model the chief is about to create */
    Psc__StartRequest sr = PSC__START_REQUEST__INIT;
    sr.spec_json = r->spec_json;
    size_t slen = psc__start_request__get_packed_size(&sr);
    uint8_t *sbuf = psc_xmalloc(slen + 1);
    psc__start_request__pack(&sr, sbuf);
    int n = targets(c);
    psc_rpc_op_t *ops = psc_xcalloc((size_t)n + 1, sizeof *ops);
    rc = call_others(c, PSC_M_WORKER_START, sbuf, slen, ops, err, sizeof err);
    clear_all(ops, (size_t)n);
    free(ops);
    free(sbuf);
    if (rc == 0) {
        int others = 0;
        for (int k = 0; k < n; k++) others += target_addr(c, k) != NULL;
        PSC_INFO("job %s: %d ps released, %d other tasks cancelled and started in %.0f ms", job_id,
                 c->cluster->n[PSC_JOB_PS], others, (psc_now() - t0) * 1000);
    }
    if (rc == 0) rc = runner_start(c->runner, r->spec_json, NULL, err, sizeof err);
    if (rc) {
        cancel_others(c);
        psc_rpc_fail(call, psc_rpc_status_of(rc), "job %s not started: %s", job_id, err);
        goto out;
    }
    Psc__SubmitReply rep = PSC__SUBMIT_REPLY__INIT;
    rep.job_id = job_id;
    uint8_t buf[32];
    psc_rpc_reply(call, buf, psc__submit_reply__pack(&rep, buf));
out:
    psc__submit_request__free_unpacked(r, NULL);
}

static void h_start(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg)
{
    control_t *c = arg;
    char err[512];
    Psc__StartRequest *r = psc__start_request__unpack(NULL, len, req);
    if (!r) {
        psc_rpc_fail(call, PSC_RPC_INVALID_ARGUMENT, "StartRequest does not parse (%zu bytes)", len);
        return;
    }
    if (!no_standalone(c, call)) {
        int rc = runner_start(c->runner, r->spec_json, NULL, err, sizeof err);
        if (rc) {
            psc_rpc_fail(call, psc_rpc_status_of(rc), "%s", err);
        } else {
            Psc__StartReply rep = PSC__START_REPLY__INIT;
            uint8_t buf[8];
            psc_rpc_reply(call, buf, psc__start_reply__pack(&rep, buf));
        }
    }
    psc__start_request__free_unpacked(r, NULL);
}

/* Cancel: psctl stop (standalone mode), or the chief stopping a failed job
 * (failed: either mode), which ends this task's job as failed with reason. */
static void h_cancel(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg)
{
    control_t *c = arg;
    Psc__CancelRequest *r = psc__cancel_request__unpack(NULL, len, req);
    if (!r) {
        psc_rpc_fail(call, PSC_RPC_INVALID_ARGUMENT, "CancelRequest does not parse (%zu bytes)", len);
        return;
    }
    int failed = r->failed;
    if (failed) {
        PSC_ERROR("the chief stops this job: %s", r->reason);
        failures_abort(c->failures, r->reason);
        if (c->stop) atomic_store(c->stop, 1);
    }
    psc__cancel_request__free_unpacked(r, NULL);
    if (!c->runner && failed) {
        Psc__CancelReply rep = PSC__CANCEL_REPLY__INIT;
        uint8_t buf[8];
        psc_rpc_reply(call, buf, psc__cancel_reply__pack(&rep, buf));
        return;
    }
    if (no_standalone(c, call)) return;
    runner_status_t st;
    runner_status(c->runner, &st);
    int was = failed ? runner_cancel_now(c->runner) : runner_cancel(c->runner);
    if (was && !failed) PSC_INFO("job %s: cancel requested by %s", st.job_id, psc_rpc_call_peer(call));
    if (c->is_chief && !failed) cancel_others(c);
    Psc__CancelReply rep = PSC__CANCEL_REPLY__INIT;
    rep.job_id = was ? st.job_id : (char *)"";
    rep.finishing = was == 2;
    uint8_t buf[32];
    psc_rpc_reply(call, buf, psc__cancel_reply__pack(&rep, buf));
}

/* ReportFailure (the chief): another task's job failed; the chief's loop
 * fails the job (a training replica) or shows it (the evaluator). */
static void h_report_failure(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg)
{
    control_t *c = arg;
    Psc__FailureReport *r = psc__failure_report__unpack(NULL, len, req);
    if (!r) {
        psc_rpc_fail(call, PSC_RPC_INVALID_ARGUMENT, "FailureReport does not parse (%zu bytes)", len);
        return;
    }
    if (!c->is_chief) {
        psc_rpc_fail(call, PSC_RPC_FAILED_PRECONDITION, "this worker is not the chief; the chief is %s", c->chief_addr);
    } else {
        char who[64];
        snprintf(who, sizeof who, "%.20s %u", r->task_type, r->task_index);
        int rank = !strcmp(r->task_type, "evaluator") ? -1 : r->rank;
        if (rank < 0)
            PSC_WARN("the evaluator (%s) failed: %s; training goes on", who, r->error);
        else
            PSC_ERROR("replica %d (%s) of job %s failed: %s", rank, who, r->job_id, r->error);
        failures_add(c->failures, r->job_id, rank, who, r->error);
        Psc__FailureReportReply rep = PSC__FAILURE_REPORT_REPLY__INIT;
        uint8_t buf[8];
        psc_rpc_reply(call, buf, psc__failure_report_reply__pack(&rep, buf));
    }
    psc__failure_report__free_unpacked(r, NULL);
}

static void h_job_status(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg)
{
    control_t *c = arg;
    Psc__JobStatusRequest *r = psc__job_status_request__unpack(NULL, len, req);
    if (!r) {
        psc_rpc_fail(call, PSC_RPC_INVALID_ARGUMENT, "JobStatusRequest does not parse (%zu bytes)", len);
        return;
    }
    psc__job_status_request__free_unpacked(r, NULL);
    if (no_standalone(c, call)) return;
    runner_status_t st;
    runner_status(c->runner, &st);
    static const char *const phases[] = {"starting", "training", "finishing"};
    Psc__JobStatusReply rep = PSC__JOB_STATUS_REPLY__INIT;
    rep.state = (char *)runner_state_name(st.state);
    rep.job_id = st.job_id;
    rep.epoch = st.progress.epoch;
    rep.epochs = st.progress.epochs;
    rep.step = st.progress.step;
    rep.max_steps = st.progress.max_steps;
    rep.global_step = st.state == RUNNER_SUCCEEDED && st.result.global_step ? st.result.global_step
                                                                            : st.progress.global_step;
    rep.loss = st.progress.loss;
    rep.has_loss = st.progress.has_loss;
    rep.checkpoints = (uint32_t)st.progress.checkpoints;
    rep.checkpoint_failures = (uint32_t)st.progress.checkpoint_failures;
    rep.checkpoint_error = st.progress.checkpoint_error;
    rep.accuracy = st.progress.accuracy;
    rep.has_auc = st.progress.has_auc || st.result.has_auc;
    rep.auc = st.progress.auc;
    rep.test_auc = st.result.test_auc;
    rep.examples_per_sec = st.progress.examples_per_sec;
    rep.elapsed_secs = st.elapsed_secs;
    rep.evaluated = st.result.evaluated;
    rep.test_accuracy = st.result.test_accuracy;
    rep.test_loss = st.result.test_loss;
    rep.error = st.error;
    char eval_err[1024];
    failures_evaluator(c->failures, eval_err, sizeof eval_err);
    rep.evaluator_error = eval_err;
    rep.phase = (char *)phases[st.progress.phase >= 0 && st.progress.phase <= 2 ? st.progress.phase : 0];
    size_t sz = psc__job_status_reply__get_packed_size(&rep);
    psc__job_status_reply__pack(&rep, psc_rpc_reply_alloc(call, sz));
    psc_rpc_reply_send(call);
}

static void h_eval(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg)
{
    control_t *c = arg;
    char err[512];
    Psc__EvalRequest *r = psc__eval_request__unpack(NULL, len, req);
    if (!r) {
        psc_rpc_fail(call, PSC_RPC_INVALID_ARGUMENT, "EvalRequest does not parse (%zu bytes)", len);
        return;
    }
    uint64_t ckpt = r->checkpoint;
    psc__eval_request__free_unpacked(r, NULL);
    if (no_standalone(c, call)) return;
    if (!c->is_chief) {
        psc_rpc_fail(call, PSC_RPC_FAILED_PRECONDITION, "this worker is not the chief; the chief is %s", c->chief_addr);
        return;
    }
    trainer_result_t res;
    int64_t step = 0;
    int rc = runner_evaluate(c->runner, ckpt, &res, &step, err, sizeof err);
    if (rc) {
        psc_rpc_fail(call, rc == PSC_ENOTFOUND ? PSC_RPC_FAILED_PRECONDITION : psc_rpc_status_of(rc), "%s", err);
        return;
    }
    Psc__EvalReply rep = PSC__EVAL_REPLY__INIT;
    rep.test_accuracy = res.test_accuracy;
    rep.test_loss = res.test_loss;
    rep.examples = res.test_examples;
    rep.global_step = step;
    rep.has_auc = res.has_auc;
    rep.test_auc = res.test_auc;
    uint8_t buf[96];
    psc_rpc_reply(call, buf, psc__eval_reply__pack(&rep, buf));
}

void control_register(control_t *c, psc_rpc_server_t *server)
{
    psc_rpc_server_add_method(server, PSC_M_WORKER_EVAL, h_eval, c);
    psc_rpc_server_add_method(server, PSC_M_WORKER_CHECKPOINT, h_checkpoint, c);
    psc_rpc_server_add_method(server, PSC_M_WORKER_SUBMIT, h_submit, c);
    psc_rpc_server_add_method(server, PSC_M_WORKER_START, h_start, c);
    psc_rpc_server_add_method(server, PSC_M_WORKER_CANCEL, h_cancel, c);
    psc_rpc_server_add_method(server, PSC_M_WORKER_JOB_STATUS, h_job_status, c);
    psc_rpc_server_add_method(server, PSC_M_WORKER_REPORT_FAILURE, h_report_failure, c);
}
