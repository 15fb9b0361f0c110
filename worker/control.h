/* control.h — the psc.Worker service of a worker: requests that reach the
 * training loop from outside (psctl): Checkpoint, which asks the chief for a
 * checkpoint now, and in standalone-client mode (control_set_standalone)
 * Submit (chief: release the PS of the previous job, Start the job on every
 * other training replica, then start it here), Start, Cancel (the chief
 * cancels everywhere) and JobStatus.
 *
 * A request is parked (no server thread waits) until the training thread
 * takes it between two steps (control_pending) and answers it
 * (control_answer); requests the loop will never see are failed
 * (control_close). Thread-safe.
 */
#ifndef PSC_CONTROL_H
#define PSC_CONTROL_H

#include "rpc.h"
#include "runner.h"
#include "tf_config.h"

#include <stdint.h>

typedef struct control control_t;

/* is_chief: only the chief takes checkpoints; other workers refuse, naming chief_addr. */
control_t *control_create(int is_chief, const char *chief_addr);
/* Answers what is still parked with UNAVAILABLE; after the server is down. NULL ok. */
void control_destroy(control_t *c);
/* Registers psc.Worker/Checkpoint on the server (before psc_rpc_server_start). */
void control_register(control_t *c, psc_rpc_server_t *server);
/* Standalone mode: jobs come through Submit/Start and run on runner. cluster
 * must outlive c; self_rank: this worker's replica rank; timeout_ms bounds each
 * call the chief makes to the other tasks. */
void control_set_standalone(control_t *c, runner_t *runner, const psc_cluster_t *cluster, int self_rank,
                            int timeout_ms);
/* Number of checkpoint requests waiting (0 for NULL). */
int control_pending(control_t *c);
/* Answers every waiting request: rc 0 with the checkpoint (id, step), or the
 * failure msg (FAILED_PRECONDITION for PSC_ENOTREADY/PSC_EUNSUPPORTED, else UNAVAILABLE). */
void control_answer(control_t *c, int rc, uint64_t id, int64_t step, const char *msg);
/* Accepts checkpoint requests again (a new job started). NULL ok. */
void control_open(control_t *c);
/* Fails waiting and future requests with msg (training is over). */
void control_close(control_t *c, const char *msg);

#endif
