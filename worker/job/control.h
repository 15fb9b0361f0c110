/* control.h — the psc.Worker service of a worker: requests that reach the
 * training loop from outside (psctl): Checkpoint, which asks the chief for a
 * checkpoint now, and in standalone-client mode (control_set_standalone)
 * Submit (chief: release the PS of the previous job, Start the job on every
 * other training replica, then start it here; each fan-out sends its calls
 * at once, so it costs a round trip, not one per target), Start, Cancel (the
 * chief cancels everywhere), JobStatus and Eval (the chief evaluates the
 * current weights); in both modes ReportFailure (the chief hears of another
 * task's failure) and a failing Cancel (the chief stops a failed job).
 *
 * A Checkpoint request is parked in the mailbox given to control_create
 * (chief_mailbox.h), which the chief's training loop drains between two
 * steps; control does not call the chief, nor the chief control.
 * Thread-safe (the handlers run on server threads).
 */
#ifndef PSC_CONTROL_H
#define PSC_CONTROL_H

#include "chief_mailbox.h"
#include "failures.h"
#include "rpc.h"
#include "runner.h"
#include "tf_config.h"

#include <stdatomic.h>
#include <stdint.h>

typedef struct control control_t;

/* is_chief: only the chief takes checkpoints and failure reports; other
 * workers refuse, naming chief_addr (copied). requests: where Checkpoint parks
 * its calls; failures: where ReportFailure files reports (the chief) and a
 * failing Cancel this task's abort (failures.h). Both the caller's; they must
 * outlive c. */
control_t *control_create(int is_chief, const char *chief_addr, chief_mailbox_t *requests, failures_t *failures);
/* In-cluster mode: a failing Cancel from the chief sets *stop (the job's flag). */
void control_set_in_cluster(control_t *c, atomic_int *stop);
/* After the server is down (what is parked belongs to the mailbox). NULL ok. */
void control_destroy(control_t *c);
/* Registers the psc.Worker methods on the server (before psc_rpc_server_start). */
void control_register(control_t *c, psc_rpc_server_t *server);
/* Standalone mode: jobs come through Submit/Start and run on runner. cluster
 * must outlive c; self_rank: this worker's replica rank; timeout_ms bounds each
 * call the chief makes to the other tasks. */
void control_set_standalone(control_t *c, runner_t *runner, const psc_cluster_t *cluster, int self_rank,
                            int timeout_ms);
#endif
