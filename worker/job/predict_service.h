/* predict_service.h — psc.Worker/Predict on a training replica in
 * standalone-client mode: `psctl predict` asks every replica for its shard of
 * a file, page by page, and merges the pages in input order.
 *
 * A session is one shard's pass (predict.h's predictor over the running or
 * last job of this worker's runner) on a thread of its own: a call parks in
 * the session (the server thread returns at once), the session's thread
 * answers it with the next page and then scores the page after it while the
 * client writes, so the client's round trips overlap the scoring. A session
 * ends after its last page, on an error (answered to the call that waits),
 * when the client closes it, when no call came for PREDICT_IDLE_SECS, or
 * when the service closes. At most PREDICT_MAX_SESSIONS at once.
 *
 * Thread-safe: handlers run on server threads, each session on its own.
 */
#ifndef PSC_PREDICT_SERVICE_H
#define PSC_PREDICT_SERVICE_H

#include "rpc.h"
#include "runner.h"
#include "trainer.h"

#define PREDICT_IDLE_SECS 60
#define PREDICT_MAX_SESSIONS 8

typedef struct predict_service predict_service_t;

/* base: the daemon's trainer options (cluster, task, devices, timeouts),
 * read when a session opens; it must outlive the service. */
predict_service_t *predict_service_create(const trainer_opts_t *base);
/* Registers psc.Worker/Predict (before psc_rpc_server_start). */
void predict_service_register(predict_service_t *s, psc_rpc_server_t *server);
/* Standalone mode: sessions score the runner's running or last job (without
 * a runner every call is refused: in-cluster mode). Before the server starts. */
void predict_service_set_runner(predict_service_t *s, runner_t *runner);
/* Ends every session (a parked call is answered UNAVAILABLE) and refuses
 * new ones; call before the server's shutdown. Idempotent; NULL ok. */
void predict_service_close(predict_service_t *s);
void predict_service_destroy(predict_service_t *s); /* closes first; NULL ok */

#endif
