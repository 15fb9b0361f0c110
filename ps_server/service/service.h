/* service.h — the psc.ParameterServer RPC handlers over a store.
 *
 * Decodes each request, validates it, calls the store and encodes the reply.
 * Bad input gets a gRPC status naming the problem (INVALID_ARGUMENT for a
 * malformed or inconsistent request, NOT_FOUND for an unknown variable,
 * FAILED_PRECONDITION before the model is ready, ALREADY_EXISTS for a create
 * that conflicts) and changes nothing. Handlers are thread-safe (the store is).
 */
#ifndef PSC_PS_SERVICE_H
#define PSC_PS_SERVICE_H

#include "ckpt.h"
#include "metrics.h"
#include "rpc.h"
#include "store.h"

typedef struct ps_service ps_service_t;

/* on_shutdown(arg) is called (from a server thread, after the reply is sent)
 * when a Shutdown RPC arrives; it should make main() stop the daemon. NULL
 * with err set when its reaper thread cannot start. */
ps_service_t *ps_service_create(store_t *store, int task_index, void (*on_shutdown)(void *), void *arg, char *err,
                                size_t errlen);
void ps_service_destroy(ps_service_t *svc); /* NULL ok; after the server is down */
/* Answers every parked reply (sync replicas) with UNAVAILABLE and parks none
 * from now on: call before shutting the server down, whose shutdown waits for
 * every call to finish. */
void ps_service_drain(ps_service_t *svc);
/* Serves Save/Commit/Restore/ListCheckpoints from db (owned by the caller,
 * open until after ps_service_destroy); without it they fail
 * FAILED_PRECONDITION. debug_save_delay_ms: tests only, a sleep between
 * copying the shard and writing it (a window to kill the PS mid-save). */
void ps_service_set_checkpoints(ps_service_t *svc, ckpt_db_t *db, int debug_save_delay_ms);
/* Counts the service's calls, tensor bytes and store figures in m (the
 * series are listed in ps_metrics.h); m is the caller's and must outlive svc.
 * Before ps_service_register, at most once; NULL m (the default): no metrics. */
void ps_service_set_metrics(ps_service_t *svc, psc_metrics_t *m);
/* The number of PS in the cluster, recorded in each checkpoint's description
 * with this PS's task index (a restore onto another number of PS needs both).
 * Before ps_service_register; 0 (the default): not known. */
void ps_service_set_num_ps(ps_service_t *svc, int num_ps);
/* Registers every method on the server (before psc_rpc_server_start). */
void ps_service_register(ps_service_t *svc, psc_rpc_server_t *server);

#endif
