/* ckpt_requests.h — the mailbox between psc.Worker/Checkpoint (control.c) and
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
#ifndef PSC_CKPT_REQUESTS_H
#define PSC_CKPT_REQUESTS_H

#include "rpc.h"

#include <stdint.h>

typedef struct ckpt_requests ckpt_requests_t;

ckpt_requests_t *ckpt_requests_create(void);
/* Fails what is still parked with UNAVAILABLE ("the worker is stopping");
 * after the server is down. NULL ok. */
void ckpt_requests_destroy(ckpt_requests_t *q);
/* Takes a Checkpoint call: parks it until ckpt_requests_answer or _close, or,
 * when the mailbox is closed, fails it at once with FAILED_PRECONDITION and
 * the reason. The call is the mailbox's from here on. */
void ckpt_requests_park(ckpt_requests_t *q, psc_rpc_call_t *call);
/* Number of requests parked (0 for NULL). */
int ckpt_requests_pending(ckpt_requests_t *q);
/* Answers every parked request: rc 0 with the checkpoint (id, step), else the
 * failure msg with psc_rpc_status_of(rc) (the PS's own code, relayed). NULL ok. */
void ckpt_requests_answer(ckpt_requests_t *q, int rc, uint64_t id, int64_t step, const char *msg);
/* Accepts requests again (a new job started). NULL ok. */
void ckpt_requests_open(ckpt_requests_t *q);
/* Fails the parked requests and every later one with FAILED_PRECONDITION and
 * msg (copied) until the next open. NULL ok. */
void ckpt_requests_close(ckpt_requests_t *q, const char *msg);

#endif
