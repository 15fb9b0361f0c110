/* failures.c — see failures.h. */
#include "failures.h"

#include "fanout.h"
#include "log.h"
#include "psc.h"
#include "psc.pb-c.h"
#include "wire.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct report {
    char job[17];
    char text[1024]; /* "replica 1 (worker 1): ERROR" or "evaluator 0: ERROR" */
    int set;
} report_t;

struct failures {
    pthread_mutex_t lock; /* guards everything but has_replica */
    char job[17];         /* the open job */
    report_t replica, evaluator, abort;
    atomic_int has_replica; /* replica.set for the open job */
};

failures_t *failures_create(void)
{
    failures_t *f = psc_xcalloc(1, sizeof *f);
    pthread_mutex_init(&f->lock, NULL);
    return f;
}

void failures_destroy(failures_t *f)
{
    if (!f) return;
    pthread_mutex_destroy(&f->lock);
    free(f);
}

/* A report of job "" (a task that could not read the job spec, so knows no
 * job id) belongs to whatever job is open. */
static int ours(const report_t *r, const char *job) { return r->set && (!r->job[0] || !strcmp(r->job, job)); }

static void keep_if_ours(report_t *r, const char *job)
{
    if (!ours(r, job)) r->set = 0;
}

void failures_open(failures_t *f, const char *job_id)
{
    if (!f) return;
    pthread_mutex_lock(&f->lock);
    snprintf(f->job, sizeof f->job, "%s", job_id);
    keep_if_ours(&f->replica, job_id); /* a replica may fail before the chief's job opens */
    keep_if_ours(&f->evaluator, job_id);
    f->abort.set = 0;
    atomic_store(&f->has_replica, f->replica.set);
    pthread_mutex_unlock(&f->lock);
}

static void put(report_t *r, const char *job, const char *fmt, const char *a, const char *b)
{
    snprintf(r->job, sizeof r->job, "%s", job);
    snprintf(r->text, sizeof r->text, fmt, a, b);
    r->set = 1;
}

void failures_add(failures_t *f, const char *job_id, int rank, const char *who, const char *error)
{
    char name[64];
    if (!f) return;
    snprintf(name, sizeof name, "replica %d (%s)", rank, who);
    pthread_mutex_lock(&f->lock);
    if (rank < 0) {
        put(&f->evaluator, job_id, "%s: %s", who, error);
    } else if (!ours(&f->replica, job_id) && !ours(&f->replica, f->job)) { /* the first one of a job stays */
        put(&f->replica, job_id, "%s: %s", name, error);
        if (ours(&f->replica, f->job)) atomic_store(&f->has_replica, 1);
    }
    pthread_mutex_unlock(&f->lock);
}

/* Copies r's text into why when r is set for the open job. */
static int get(failures_t *f, const report_t *r, char *why, size_t len)
{
    pthread_mutex_lock(&f->lock);
    int ok = ours(r, f->job);
    snprintf(why, len, "%s", ok ? r->text : "");
    pthread_mutex_unlock(&f->lock);
    return ok;
}

int failures_replica(failures_t *f, char *why, size_t len)
{
    if (!f || !atomic_load(&f->has_replica)) return 0;
    return get(f, &f->replica, why, len);
}

void failures_evaluator(failures_t *f, char *why, size_t len)
{
    if (f)
        get(f, &f->evaluator, why, len);
    else if (len)
        why[0] = '\0';
}

void failures_abort(failures_t *f, const char *reason)
{
    if (!f) return;
    pthread_mutex_lock(&f->lock);
    put(&f->abort, f->job, "%s%s", reason, "");
    pthread_mutex_unlock(&f->lock);
}

int failures_aborted(failures_t *f, char *why, size_t len) { return f && get(f, &f->abort, why, len); }

/* ---- calls ---- */

/* Sends req to addrs[0..n) at once; logs each failure as "what on ADDR"
 * (at debug level when quiet). */
static void call_logged(const char *const *addrs, size_t n, const char *method, const void *req, size_t len,
                        int timeout_ms, const char *what, int quiet)
{
    psc_rpc_op_t *ops = psc_xcalloc(n + 1, sizeof *ops);
    fanout_call(addrs, n, method, req, len, timeout_ms, ops);
    for (size_t i = 0; i < n; i++) {
        if (addrs[i] && ops[i].code != PSC_RPC_OK) {
            if (quiet)
                PSC_DEBUG("%s on %s: %s: %s", what, addrs[i], psc_rpc_code_name(ops[i].code), ops[i].msg);
            else
                PSC_WARN("%s on %s: %s: %s", what, addrs[i], psc_rpc_code_name(ops[i].code), ops[i].msg);
        }
        psc_rpc_op_clear(&ops[i]);
    }
    free(ops);
}

void failures_report(const psc_cluster_t *cl, psc_task_t task, const char *job_id, const char *error, int timeout_ms,
                     int quiet)
{
    Psc__FailureReport req = PSC__FAILURE_REPORT__INIT;
    req.job_id = (char *)job_id;
    req.task_type = (char *)psc_job_type_name(task.type);
    req.task_index = (uint32_t)task.index;
    req.rank = psc_task_replica_rank(cl, task);
    req.error = (char *)error;
    size_t len = psc__failure_report__get_packed_size(&req);
    uint8_t *buf = psc_xmalloc(len + 1);
    psc__failure_report__pack(&req, buf);
    const char *chief = psc_cluster_addr(cl, psc_cluster_chief(cl));
    if (!quiet) PSC_INFO("reporting this task's failure to the chief %s", chief);
    call_logged(&chief, 1, PSC_M_WORKER_REPORT_FAILURE, buf, len, timeout_ms, "reporting the failure", quiet);
    free(buf);
}

void failures_stop_others(const psc_cluster_t *cl, int self_rank, const char *reason, int failed, int timeout_ms)
{
    Psc__CancelRequest req = PSC__CANCEL_REQUEST__INIT;
    req.reason = (char *)reason;
    req.failed = failed;
    size_t len = psc__cancel_request__get_packed_size(&req);
    uint8_t *buf = psc_xmalloc(len + 1);
    psc__cancel_request__pack(&req, buf);
    int R = psc_cluster_num_replicas(cl), n = R + cl->n[PSC_JOB_EVALUATOR];
    const char **addrs = psc_xcalloc((size_t)n + 1, sizeof *addrs);
    for (int k = 0; k < n; k++)
        addrs[k] = k < R ? (k == self_rank ? NULL : psc_cluster_replica_addr(cl, k)) : cl->addr[PSC_JOB_EVALUATOR][k - R];
    call_logged(addrs, (size_t)n, PSC_M_WORKER_CANCEL, buf, len, timeout_ms, failed ? "stopping the job" : "cancel", 0);
    free(addrs);
    free(buf);
}

void failures_shutdown_ps(const psc_cluster_t *cl, const char *reason, int timeout_ms)
{
    Psc__ShutdownRequest req = PSC__SHUTDOWN_REQUEST__INIT;
    req.reason = (char *)reason;
    size_t len = psc__shutdown_request__get_packed_size(&req);
    uint8_t *buf = psc_xmalloc(len + 1);
    psc__shutdown_request__pack(&req, buf);
    call_logged((const char *const *)cl->addr[PSC_JOB_PS], (size_t)cl->n[PSC_JOB_PS], PSC_M_SHUTDOWN, buf, len,
                timeout_ms, "shutdown", 0);
    free(buf);
}
