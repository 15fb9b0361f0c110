/* rpc.h — the small RPC layer over the gRPC C core that every program uses.
 *
 * Only common/rpc.c includes gRPC headers. All methods are unary: one request
 * message, one reply message (or a status with a message).
 *
 * Server: N threads polling one completion queue that they share (a call's
 * events may land on any of them), with requests pre-posted for every
 * registered method; an unknown method gets UNIMPLEMENTED. A handler runs on a
 * server thread with the request bytes (valid only during the handler: one
 * copied buffer, or for _iov methods gRPC's own slices) and must complete the
 * call exactly once with psc_rpc_reply*() or psc_rpc_fail(), from any thread,
 * possibly after it returned (a parked call).
 * Every server also answers grpc.health.v1.Health/Check ("" and the names given
 * to psc_rpc_server_add_service) with SERVING or NOT_SERVING.
 *
 * Client: psc_rpc_run() runs a batch of calls, up to max_in_flight at a time on
 * one completion queue, each with a deadline, and returns when all are done.
 * Request bodies are sent without a copy; replies are copied once into a
 * malloc'd buffer the caller frees.
 *
 * Status codes are gRPC's (PSC_RPC_*), so messages and logs match grpc tools.
 */
#ifndef PSC_RPC_H
#define PSC_RPC_H

#include "psc.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

enum psc_rpc_code {
    PSC_RPC_OK = 0,
    PSC_RPC_CANCELLED = 1,
    PSC_RPC_UNKNOWN = 2,
    PSC_RPC_INVALID_ARGUMENT = 3,
    PSC_RPC_DEADLINE_EXCEEDED = 4,
    PSC_RPC_NOT_FOUND = 5,
    PSC_RPC_ALREADY_EXISTS = 6,
    PSC_RPC_PERMISSION_DENIED = 7,
    PSC_RPC_RESOURCE_EXHAUSTED = 8,
    PSC_RPC_FAILED_PRECONDITION = 9,
    PSC_RPC_ABORTED = 10,
    PSC_RPC_OUT_OF_RANGE = 11,
    PSC_RPC_UNIMPLEMENTED = 12,
    PSC_RPC_INTERNAL = 13,
    PSC_RPC_UNAVAILABLE = 14,
    PSC_RPC_DATA_LOSS = 15,
    PSC_RPC_UNAUTHENTICATED = 16,
};

/* "OK", "INVALID_ARGUMENT", ... */
const char *psc_rpc_code_name(int code);
/* The PSC_E* code a caller acts on for a failed call's PSC_RPC_* status:
 * PSC_EUNAVAILABLE (retry later) for UNAVAILABLE, ABORTED (a restore or a step
 * boundary moved under the call) and CANCELLED: psc's clients never cancel
 * their own calls, so a CANCELLED call was dropped by a server going down
 * (gRPC 1.51 cancels a call whose request is still arriving when the server
 * shuts down, with "CANCELLED", not UNAVAILABLE). PSC_ETIMEOUT for
 * DEADLINE_EXCEEDED, PSC_ENOTREADY for FAILED_PRECONDITION, PSC_ECORRUPT for
 * DATA_LOSS, PSC_ENOTFOUND, PSC_EEXISTS, PSC_EINVAL for INVALID_ARGUMENT and
 * OUT_OF_RANGE, PSC_ENOMEM for RESOURCE_EXHAUSTED, PSC_EIO for INTERNAL,
 * PSC_EPERM for UNAUTHENTICATED and PERMISSION_DENIED; PSC_ERPC for the rest. */
int psc_rpc_code_errno(int code);
/* The PSC_RPC_* status a server answers for a PSC_E* failure: the inverse of
 * psc_rpc_code_errno for every code a psc daemon sends, so a refusal relayed
 * from one daemon through another keeps its code; INTERNAL for the rest. */
int psc_rpc_status_of(int rc);

/* ---- security: TLS and a shared token ----
 * Set once, before the first server or channel is created; every server and
 * channel created afterwards uses the setting in force at its creation.
 *  - A server listens with TLS when cert_pem and key_pem are set; with
 *    require_client_cert it asks every client for a certificate and verifies it
 *    against ca_pem (mutual TLS).
 *  - A channel connects with TLS when ca_pem or cert_pem is set: it verifies the
 *    server's certificate against ca_pem (the system's roots when NULL) and the
 *    name in it against the target's host (or server_name), and presents
 *    cert_pem/key_pem as its client certificate when they are set.
 *  - token: a channel sends "authorization: Bearer TOKEN" with every call; a
 *    server answers a call without it, or with another one, UNAUTHENTICATED
 *    before any handler runs. grpc.health.v1.Health/Check is exempt (it tells
 *    only SERVING or not, and Kubernetes probes cannot send metadata).
 * The strings are copied; NULL or an all-zero struct turns everything off. */
typedef struct psc_rpc_security {
    const char *cert_pem;
    const char *key_pem;
    const char *ca_pem;
    int require_client_cert;
    const char *server_name;
    const char *token;
} psc_rpc_security_t;
void psc_rpc_set_security(const psc_rpc_security_t *sec);

/* The largest message a channel created afterwards will send (default and
 * most: PSC_MAX_MESSAGE_BYTES, what every server accepts; -1: no limit). Only
 * for tools that play a client breaking the servers' limit. */
void psc_rpc_set_send_limit(long bytes);

/* Keeps gRPC initialized until the process exits. A daemon or tool calls it
 * once at start, before its first server or channel. Without it, destroying
 * the last server or channel runs gRPC's full shutdown, which joins gRPC's
 * executor thread, and that thread can sit out a poll of up to ~10 s first
 * (gRPC 1.51; seen in about half of the ps_server stops under load). A
 * process about to exit needs none of that clean-up. Idempotent. */
void psc_rpc_hold_for_process(void);

/* ---- server ---- */
typedef struct psc_rpc_server psc_rpc_server_t;
typedef struct psc_rpc_call psc_rpc_call_t;
typedef void (*psc_rpc_handler_fn)(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg);

/* Creates a server that will listen on `addr` ("host:port", port 0 = any) with
 * `threads` polling threads. NULL with err set on failure. */
psc_rpc_server_t *psc_rpc_server_create(const char *addr, int threads, char *err, size_t errlen);
/* Registers a method (full path, a string that outlives the server). Before start. */
void psc_rpc_server_add_method(psc_rpc_server_t *s, const char *path, psc_rpc_handler_fn fn, void *arg);
/* A handler that takes the request where gRPC received it, without the copy
 * into one buffer: niov segments (the message's slices, each at any
 * alignment, split anywhere) that together hold len bytes. The array and the
 * bytes are valid only during the handler; the handler may change the array's
 * entries (to skip a header, say), never the bytes. For requests that carry
 * tensors. */
typedef void (*psc_rpc_handler_iov_fn)(psc_rpc_call_t *call, psc_iov_t *iov, int niov, size_t len, void *arg);
void psc_rpc_server_add_method_iov(psc_rpc_server_t *s, const char *path, psc_rpc_handler_iov_fn fn, void *arg);
/* A service name the health check reports on (besides ""). Before start. */
void psc_rpc_server_add_service(psc_rpc_server_t *s, const char *service);
/* Binds and starts. Returns the bound port (> 0) or a negative PSC_E* code with
 * err set ("cannot bind 127.0.0.1:2222: address in use?"). */
int psc_rpc_server_start(psc_rpc_server_t *s, char *err, size_t errlen);
/* Observes the calls of the registered method `path`: fn(arg, code, secs) runs
 * once per call, on the thread that completes it (a server thread, or whoever
 * answers a parked call), as the reply or status is handed to gRPC; code is the
 * PSC_RPC_* status sent, secs the time since the call reached its server thread
 * (a parked call's wait included). fn must not block (a few atomics). Calls
 * cancelled by a shutdown before they are answered are not observed. Before
 * start; `arg` stays the caller's and must outlive the server. Returns 0, or
 * PSC_ENOTFOUND when no method `path` is registered. */
typedef void (*psc_rpc_observer_fn)(void *arg, int code, double secs);
int psc_rpc_server_observe(psc_rpc_server_t *s, const char *path, psc_rpc_observer_fn fn, void *arg);
/* Health status reported by Health/Check (1 = SERVING, the default after start). */
void psc_rpc_server_set_serving(psc_rpc_server_t *s, int serving);
/* Stops. First a drain, the server still listening: Health/Check answers
 * NOT_SERVING, every other new call fails UNAVAILABLE ("server is shutting
 * down"), and the calls in flight (received, not yet answered, parked ones
 * included) are waited for until they are answered or `grace_ms` has passed; an
 * idle server skips it at once. Then no new connections, what is left of
 * `grace_ms` for the replies to go out, the rest cancelled; threads joined.
 * Idempotent. Not from a server thread. */
void psc_rpc_server_shutdown(psc_rpc_server_t *s, int grace_ms);
void psc_rpc_server_destroy(psc_rpc_server_t *s); /* shuts down first; NULL ok */

/* Completing a call (exactly once; any thread). */
/* A writable reply buffer of len bytes owned by the call; then psc_rpc_reply_send. */
void *psc_rpc_reply_alloc(psc_rpc_call_t *call, size_t len);
void psc_rpc_reply_send(psc_rpc_call_t *call);
/* Sends only bytes [offset, offset+len) of the allocated buffer (a header packed
 * after its payload was written, right in front of it). */
void psc_rpc_reply_send_range(psc_rpc_call_t *call, size_t offset, size_t len);
/* Sends bytes [offset, offset+len) of `from`'s allocated reply buffer as
 * call's reply without copying them: the two replies share the buffer, which
 * lives until gRPC has sent both. `from` must not be sent yet; send it after
 * (with psc_rpc_reply_send_range). Many calls may share one buffer this way. */
void psc_rpc_reply_send_shared(psc_rpc_call_t *call, psc_rpc_call_t *from, size_t offset, size_t len);
/* Frees the buffer psc_rpc_reply_alloc gave a call that will be answered
 * later (a parked call): it holds no reply bytes while it waits. */
void psc_rpc_reply_drop(psc_rpc_call_t *call);
/* Copies msg and sends it with status OK. */
void psc_rpc_reply(psc_rpc_call_t *call, const void *msg, size_t len);
/* Sends a status (not OK) and a message; nothing else. */
void psc_rpc_fail(psc_rpc_call_t *call, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The peer's address as text ("ipv4:127.0.0.1:53412"); valid until the call completes. */
const char *psc_rpc_call_peer(psc_rpc_call_t *call);

/* ---- client ---- */
typedef struct psc_rpc_channel psc_rpc_channel_t;

/* A channel to "host:port". Connects lazily; never fails for a well-formed target. */
psc_rpc_channel_t *psc_rpc_channel_create(const char *target);
void psc_rpc_channel_destroy(psc_rpc_channel_t *ch); /* NULL ok; no calls may be running */
const char *psc_rpc_channel_target(const psc_rpc_channel_t *ch);

typedef struct psc_rpc_op {
    /* in */
    psc_rpc_channel_t *ch;
    const char *method;   /* full path, e.g. PSC_M_PULL */
    const void *hdr;      /* request bytes, copied when the call starts */
    size_t hdr_len;
    const void *body;     /* optional bytes appended to hdr, sent without a copy; */
    size_t body_len;      /* must stay unchanged until psc_rpc_run returns */
    int wait_for_ready;   /* wait for the server to come up (until the deadline) instead of failing fast */
    void *reply_body;     /* optional: when the reply has at least reply_body_len bytes, its last */
    size_t reply_body_len; /* reply_body_len bytes are copied here and `reply` holds the rest */
    /* out */
    int code;             /* PSC_RPC_* */
    char msg[256];        /* status message, "" on OK */
    uint8_t *reply;       /* reply bytes (malloc'd, caller frees), NULL if none */
    size_t reply_len;
    size_t reply_total;   /* whole reply length (reply_len + reply_body_len when split) */
} psc_rpc_op_t;

/* Runs n calls, at most max_in_flight at once, each with a deadline of timeout_ms
 * from its start. Returns 0 if every call ended OK, else PSC_ERPC (look at each
 * op's code and msg). Thread-safe: concurrent runs on the same channels are fine. */
int psc_rpc_run(psc_rpc_op_t *ops, size_t n, size_t max_in_flight, int timeout_ms);

/* One call: convenience wrapper around psc_rpc_run. */
int psc_rpc_call(psc_rpc_channel_t *ch, const char *method, const void *req, size_t len, int timeout_ms,
                 int wait_for_ready, psc_rpc_op_t *out);

/* Health/Check of service "" on a channel: 1 SERVING, 0 NOT_SERVING/unreachable. */
int psc_rpc_health_check(psc_rpc_channel_t *ch, int timeout_ms);

/* The failed op that explains a failed run: the first whose server went away
 * (psc_rpc_code_errno PSC_EUNAVAILABLE, which explains the others), else the
 * first failed one; n when every op ended OK. */
size_t psc_rpc_first_failure(const psc_rpc_op_t *ops, size_t n);

/* Releases a finished op's reply buffer. */
void psc_rpc_op_clear(psc_rpc_op_t *op);

#endif
