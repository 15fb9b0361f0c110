/* failures.h — how a job learns that one of its tasks failed, and how it ends
 * then (docs/checkpoints-and-failures.md "What ends a job").
 *
 * A task whose job stops on an error a restart cannot fix (a bad record past
 * data.bad_record_limit, an unreadable file, a spec it refuses, a tower it
 * cannot build) reports it to the chief before it exits (psc.Worker/
 * ReportFailure, failures_report). The chief's control service files the
 * report here (failures_add); the chief's training loop looks at it between
 * steps (failures_replica) and fails the job: it stops every other task with
 * a failing Cancel (failures_stop_others), which a task files as its own
 * abort (failures_abort) and ends its job as failed with the chief's reason.
 * The evaluator's failure is only shown (failures_evaluator): training goes on.
 *
 * Reports carry the job id: one of another job is dropped when a job opens.
 * Thread-safe: server threads add and abort, the job's thread reads.
 */
#ifndef PSC_FAILURES_H
#define PSC_FAILURES_H

#include "tf_config.h"

#include <stddef.h>

typedef struct failures failures_t;

failures_t *failures_create(void);
void failures_destroy(failures_t *f); /* NULL ok */

/* A job starts on this task: the reports and the abort of other jobs go. */
void failures_open(failures_t *f, const char *job_id);
/* A task of job_id reported error (the chief's control service): rank its
 * replica rank (-1: the evaluator), who its task ("worker 1"). The first
 * replica failure of a job is kept; the evaluator's latest. */
void failures_add(failures_t *f, const char *job_id, int rank, const char *who, const char *error);
/* The chief: 1 with why ("replica 1 (worker 1): ...") when a training replica
 * of the open job reported a failure, else 0. Cheap (one atomic load) when
 * there is none. */
int failures_replica(failures_t *f, char *why, size_t len);
/* The evaluator's reported failure of the open job into why ("" when none). */
void failures_evaluator(failures_t *f, char *why, size_t len);

/* This task's job was stopped by the chief because the job failed: reason
 * is kept for the job's end. The caller stops the job (its stop flag). */
void failures_abort(failures_t *f, const char *reason);
/* 1 with the reason when the open job was aborted so, else 0. */
int failures_aborted(failures_t *f, char *why, size_t len);

/* ---- calls to other tasks (best effort: each failure is logged) ---- */

/* Sends this task's failure of job_id to the chief, within timeout_ms; quiet:
 * log only at debug level (a task that fails at start-up prints one line). */
void failures_report(const psc_cluster_t *cl, psc_task_t task, const char *job_id, const char *error,
                     int timeout_ms, int quiet);
/* The chief (replica self_rank) stops the job on every other training replica
 * and the evaluator at once: as a failure with reason when failed, else as a
 * cancel (psctl stop). */
void failures_stop_others(const psc_cluster_t *cl, int self_rank, const char *reason, int failed, int timeout_ms);
/* Tells every ps_server to exit (in-cluster mode, when the job ended). */
void failures_shutdown_ps(const psc_cluster_t *cl, const char *reason, int timeout_ms);

#endif
