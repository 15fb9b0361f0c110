/* fanout.h — the same unary call to many addresses at once: the chief's
 * fan-outs to every PS and every other task (Submit's Release, Cancel and
 * Start; the end-of-job health probes).
 *
 * Calls go out together, at most FANOUT_MAX at a time, each on a channel of
 * its own made for the call (a connection, a file descriptor) and closed when
 * its round is over: a fan-out to n targets costs about ceil(n / FANOUT_MAX)
 * round trips, not n, and holds at most FANOUT_MAX connections.
 *
 * Thread-safe (no shared state); blocks the calling thread for the rounds.
 */
#ifndef PSC_FANOUT_H
#define PSC_FANOUT_H

#include "rpc.h"

#include <stddef.h>

#define FANOUT_MAX 256

/* Sends method(req) to addrs[0..n) (NULL entries are skipped: their op stays
 * zeroed, code OK with no reply) within timeout_ms each, and waits for all.
 * ops: n entries, filled (no channel kept); the caller clears each with
 * psc_rpc_op_clear. */
void fanout_call(const char *const *addrs, size_t n, const char *method, const void *req, size_t len, int timeout_ms,
                 psc_rpc_op_t *ops);

#endif
