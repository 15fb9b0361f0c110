/* chief_mailbox.h — the mailbox between psc.Worker/Checkpoint (control.c) and
 * the chief's training loop (chief.c): checkpoint requests from psctl wait
 * here, parked (no server thread waits), until the training thread takes them
 * between two steps and answers them all at once.
 *
 * A leaf: control.c fills it, chief.c drains it, it calls neither. It opens
 * and closes with each job: a closed mailbox fails a new request at once with
 * the reason it was closed with, so no request outlives its job. Created
 * closed ("no job has run on this cluster yet").
 *
 * Thread-safe: server threads park, the training thread answers, main()
 * closes and destroys.
 */
#ifndef PSC_CHIEF_MAILBOX_H
#define PSC_CHIEF_MAILBOX_H

#include "rpc.h"

#include <stdint.h>

typedef struct chief_mailbox chief_mailbox_t;

chief_mailbox_t *chief_mailbox_create(void);
/* Fails what is still parked with UNAVAILABLE ("the worker is stopping");
 * after the server is down. NULL ok. */
void chief_mailbox_destroy(chief_mailbox_t *q);
/* Takes a Checkpoint call: parks it until chief_mailbox_answer or _close, or,
 * when the mailbox is closed, fails it at once with FAILED_PRECONDITION and
 * the reason. The call is the mailbox's from here on. */
void chief_mailbox_park(chief_mailbox_t *q, psc_rpc_call_t *call);
/* Number of requests parked (0 for NULL). */
int chief_mailbox_pending(chief_mailbox_t *q);
/* Answers every parked request: rc 0 with the checkpoint (id, step), else the
 * failure msg with psc_rpc_status_of(rc) (the PS's own code, relayed). NULL ok. */
void chief_mailbox_answer(chief_mailbox_t *q, int rc, uint64_t id, int64_t step, const char *msg);
/* Accepts requests again (a new job started). NULL ok. */
void chief_mailbox_open(chief_mailbox_t *q);
/* Fails the parked requests and every later one with FAILED_PRECONDITION and
 * msg (copied) until the next open. NULL ok. */
void chief_mailbox_close(chief_mailbox_t *q, const char *msg);

#endif
