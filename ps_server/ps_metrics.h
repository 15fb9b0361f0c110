/* ps_metrics.h — the ps_server's Prometheus metrics (--metrics_port).
 *
 * One ps_metrics_t per service, made by ps_service_set_metrics() on the
 * process's registry (common/metrics.h). Three sources:
 *   - every psc.ParameterServer call, through an RPC observer (rpc.h), so a
 *     call is counted once, when its reply or status is handed to gRPC:
 *       psc_ps_rpc_requests_total{method}   calls answered (any status)
 *       psc_ps_rpc_errors_total{method}     calls answered with a status other than OK
 *       psc_ps_rpc_latency_seconds{method}  histogram, from the call's arrival to its
 *                                           reply: a parked sync reply includes its wait
 *                                           for the step
 *     method is the RPC's name: Create, Assign, Ready, Pull, Push, PushPull,
 *     Step, WorkerDone, Status, Shutdown, Save, Commit, Restore,
 *     ListCheckpoints, Release (every series exists from the start, at 0);
 *   - the handlers (service.c), for tensor traffic:
 *       psc_ps_push_bytes_total   gradient payload bytes of Push and PushPull requests that decoded
 *       psc_ps_pull_bytes_total   tensor payload bytes sent in Pull and PushPull replies
 *   - a collector reading the store at scrape time:
 *       psc_ps_gradients_applied_total      gradient chunks applied (sync: chunk steps)
 *       psc_ps_gradients_stale_total        sync contributions dropped as stale
 *       psc_ps_requests_rejected_total      requests refused for bad input
 *       psc_ps_sync_timeout_applies_total   sync steps applied by the timeout or lag rule
 *       psc_ps_variables                    variables of the shard (global_step included)
 *       psc_ps_variable_bytes               sum of their value bytes (slots not counted)
 *       psc_ps_table_rows{table,part}       rows of a sparse table part that exist (touched)
 *       psc_ps_table_bytes{table,part}      bytes they take (records with slots, index, slabs)
 *       psc_ps_table_rows_pulled_total{table,part}  rows served by sparse pulls
 *       psc_ps_table_rows_pushed_total{table,part}  rows updated by sparse pushes
 *       psc_ps_table_rows_{pulled,pushed}_per_second{table,part}  their rates between the
 *                                           previous scrape or Status >= 1 s older and the latest
 *       psc_ps_ready                        1 once the chief marked the model ready
 *       psc_ps_global_step                  only on the PS holding global_step
 *       psc_ps_steps_per_second             ditto: global_step's increase per second between
 *                                           the previous scrape at least 1 s older and this one
 *                                           (0 on the first scrape and after a restore or release
 *                                           set global_step back; a scrape sooner than 1 s after
 *                                           the reference repeats the last rate).
 *
 * Threads: ps_metrics_add_* and the observer are lock-free (completion-queue
 * threads and the reaper call them); create/observe_server/destroy belong to
 * the thread that owns the service.
 */
#ifndef PSC_PS_METRICS_H
#define PSC_PS_METRICS_H

#include "metrics.h"
#include "rpc.h"
#include "store.h"

#include <stddef.h>

typedef struct ps_metrics ps_metrics_t;

/* Registers the series above on `m` and adds the store collector. m and store
 * are the caller's and must outlive the result. Never NULL. */
ps_metrics_t *ps_metrics_create(psc_metrics_t *m, store_t *store);
/* Removes the collector and frees pm (the registry keeps its series). Call
 * after the RPC server whose calls it observes is destroyed. NULL does nothing. */
void ps_metrics_destroy(ps_metrics_t *pm);
/* Observes every psc.ParameterServer method registered on `server` (before
 * psc_rpc_server_start). NULL pm does nothing. */
void ps_metrics_observe_server(ps_metrics_t *pm, psc_rpc_server_t *server);

/* Tensor traffic, from the handlers; any thread, lock-free; NULL pm does nothing. */
void ps_metrics_add_push_bytes(ps_metrics_t *pm, size_t n);
void ps_metrics_add_pull_bytes(ps_metrics_t *pm, size_t n);

#endif
