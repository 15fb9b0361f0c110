/* rpc.c — unary RPCs over the gRPC C core (see rpc.h).
 *
 * Server design: the polling threads share one completion queue (a call's
 * events may land on any of them; measured against one queue per thread:
 * 15-20 % more small calls per second on 2 cores, the same bulk rate, and no
 * call waits behind a busy thread's queue). For every registered method,
 * PSC_RPC_POSTED requests per thread are pre-posted with the payload pre-read
 * (GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER), so a new call arrives with its
 * request. A call context lives from its posting to the completion of its
 * final batch {SEND_INITIAL_METADATA, SEND_MESSAGE, SEND_STATUS, RECV_CLOSE}; a
 * call has at most one batch outstanding, so batches need no lock even when a
 * parked call is completed from another thread. One generic request per thread
 * answers unknown methods with UNIMPLEMENTED.
 *
 * Shutdown order (GRPC_CORE.md §1.8): first a drain, with the server still up:
 * Health/Check answers NOT_SERVING and any other new call UNAVAILABLE, until the
 * calls in flight (handed to a handler, not yet answered) are answered or the
 * grace period ends, so a load balancer or Kubernetes probe sees the server go
 * NOT_SERVING instead of a refused connection. Then stop re-posting,
 * shutdown_and_notify, wait for what is left of the grace period,
 * cancel_all_calls, pluck the shutdown tag while the threads keep polling, wait
 * for every context to be freed, then shut the cq down, join, destroy the cq
 * and the server.
 *
 * The client half (channels, psc_rpc_run) is rpc_client.c; what both halves
 * use is declared in rpc_internal.h.
 */
#include "rpc.h"

#include "rpc_internal.h"

#include "log.h"
#include "psc.h"
#include "wire.h"

#include "grpc/health/v1/health.pb-c.h"

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/log.h>
#include <grpc/support/time.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PSC_RPC_POSTED 4      /* requests pre-posted per method per polling thread (on the one cq) */
#define PSC_RPC_MAX_METHODS 32
#define PSC_RPC_MAX_SERVICES 8
#define PSC_RPC_HANDSHAKE_TIMEOUT_MS 10000
#define PSC_RPC_MAX_STREAMS 64

static atomic_long send_limit = PSC_MAX_MESSAGE_BYTES;

void psc_rpc_set_send_limit(long bytes) { atomic_store(&send_limit, bytes); }

/* Channel arguments shared by servers and channels: bounded receive size,
 * keepalive that the other side permits (GRPC_CORE.md pitfall 10). Fills the
 * caller's args and storage (no static: channels are created from several
 * threads at once, e.g. the chief's RPC thread while its job runs). */
grpc_channel_args *rpc_make_args(grpc_channel_args *args, grpc_arg *storage, int is_server)
{
    int n = 0;
    storage[n].type = GRPC_ARG_INTEGER;
    storage[n].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    storage[n++].value.integer = (int)PSC_MAX_MESSAGE_BYTES;
    storage[n].type = GRPC_ARG_INTEGER;
    storage[n].key = (char *)GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
    storage[n++].value.integer = is_server ? (int)PSC_MAX_MESSAGE_BYTES : (int)atomic_load(&send_limit);
    if (is_server) {
        storage[n].type = GRPC_ARG_INTEGER;
        storage[n].key = (char *)GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS;
        storage[n++].value.integer = 1;
        storage[n].type = GRPC_ARG_INTEGER;
        storage[n].key = (char *)GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS;
        storage[n++].value.integer = 5000;
        storage[n].type = GRPC_ARG_INTEGER;
        storage[n].key = (char *)GRPC_ARG_HTTP2_MAX_PING_STRIKES;
        storage[n++].value.integer = 0;
        /* A client that connects and then sends nothing, or its TLS handshake
         * and HTTP/2 preface a byte at a time, is dropped after 10 s. */
        storage[n].type = GRPC_ARG_INTEGER;
        storage[n].key = (char *)GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS;
        storage[n++].value.integer = PSC_RPC_HANDSHAKE_TIMEOUT_MS;
        /* gRPC sets SO_REUSEPORT by default: a second daemon on the same port
         * would start and take half the connections. Refuse it: "cannot bind". */
        storage[n].type = GRPC_ARG_INTEGER;
        storage[n].key = (char *)GRPC_ARG_ALLOW_REUSEPORT;
        storage[n++].value.integer = 0;
        /* Bounds what one connection can hold open (a worker keeps ≤ 16). */
        storage[n].type = GRPC_ARG_INTEGER;
        storage[n].key = (char *)GRPC_ARG_MAX_CONCURRENT_STREAMS;
        storage[n++].value.integer = PSC_RPC_MAX_STREAMS;
    } else {
        storage[n].type = GRPC_ARG_INTEGER;
        storage[n].key = (char *)GRPC_ARG_KEEPALIVE_TIME_MS;
        storage[n++].value.integer = 10000;
        storage[n].type = GRPC_ARG_INTEGER;
        storage[n].key = (char *)GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS;
        storage[n++].value.integer = 1;
        /* Separate connections per channel: a worker's channels to different
         * PS never share, and tests can open several to one server. */
        storage[n].type = GRPC_ARG_INTEGER;
        storage[n].key = (char *)GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL;
        storage[n++].value.integer = 1;
        /* A restarted PS is found within 2 s, not after gRPC's default backoff
         * of up to 120 s (the workers' own retry loop paces the calls). */
        storage[n].type = GRPC_ARG_INTEGER;
        storage[n].key = (char *)GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS;
        storage[n++].value.integer = 250;
        storage[n].type = GRPC_ARG_INTEGER;
        storage[n].key = (char *)GRPC_ARG_MAX_RECONNECT_BACKOFF_MS;
        storage[n++].value.integer = 2000;
    }
    args->num_args = (size_t)n;
    args->args = storage;
    return args;
}

/* gRPC's own log lines (gpr_log, e.g. "E1125 12:00:00.1 123 chttp2_server.cc:1045] UNKNOWN:No address
 * added out of total 1 resolved" before psc's "cannot bind" line) go through psc's logger at DEBUG: shown
 * only with --log_level debug, never above psc's own one-line messages. gRPC filters them first by
 * GRPC_VERBOSITY (default ERROR; GRPC_VERBOSITY=debug with --log_level debug shows all of them). An
 * assertion failure, right before gRPC aborts the process, stays an ERROR. */
static void grpc_log_to_psc(gpr_log_func_args *a)
{
    const char *file = a->file ? strrchr(a->file, '/') : NULL;
    file = file ? file + 1 : a->file ? a->file : "?";
    const char *msg = a->message ? a->message : "";
    enum psc_log_level level = strncmp(msg, "assertion failed", 16) == 0 ? PSC_LOG_ERROR : PSC_LOG_DEBUG;
    psc_log(level, "grpc %s %s:%d] %s", gpr_log_severity_string(a->severity), file, a->line, msg);
}

static void grpc_log_install(void) { gpr_set_log_function(grpc_log_to_psc); }

/* grpc_init, with gRPC's logging routed through psc's logger first. */
void rpc_grpc_init(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, grpc_log_install);
    psc_tune_malloc();
    grpc_init();
}

void psc_rpc_hold_for_process(void)
{
    static atomic_int held;
    if (atomic_exchange(&held, 1)) return;
    rpc_grpc_init(); /* never released: exit() ends gRPC's threads with the process */
}

/* ---- security (psc_rpc_set_security) ---- */

static struct {
    pthread_mutex_t lock;
    char *cert, *key, *ca, *server_name, *token;
    int require_client_cert;
} sec = {.lock = PTHREAD_MUTEX_INITIALIZER};

static char *dup_or_null(const char *s) { return s && *s ? psc_xstrdup(s) : NULL; }

void psc_rpc_set_security(const psc_rpc_security_t *in)
{
    static const psc_rpc_security_t off;
    if (!in) in = &off;
    pthread_mutex_lock(&sec.lock);
    free(sec.cert);
    free(sec.key);
    free(sec.ca);
    free(sec.server_name);
    if (sec.token) explicit_bzero(sec.token, strlen(sec.token));
    free(sec.token);
    sec.cert = dup_or_null(in->cert_pem);
    sec.key = dup_or_null(in->key_pem);
    sec.ca = dup_or_null(in->ca_pem);
    sec.server_name = dup_or_null(in->server_name);
    sec.require_client_cert = in->require_client_cert;
    /* what goes on the wire: the whole header value */
    sec.token = NULL;
    if (in->token && *in->token) {
        size_t n = strlen(in->token) + 8;
        sec.token = psc_xmalloc(n);
        snprintf(sec.token, n, "Bearer %s", in->token);
    }
    pthread_mutex_unlock(&sec.lock);
}

/* Credentials of a new server or channel under the current setting. */
static grpc_server_credentials *server_creds(void)
{
    grpc_server_credentials *c;
    pthread_mutex_lock(&sec.lock);
    if (sec.cert && sec.key) {
        grpc_ssl_pem_key_cert_pair pair = {sec.key, sec.cert};
        c = grpc_ssl_server_credentials_create_ex(sec.ca, &pair, 1,
                                                  sec.require_client_cert
                                                      ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                                                      : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
                                                  NULL);
    } else {
        c = grpc_insecure_server_credentials_create();
    }
    pthread_mutex_unlock(&sec.lock);
    return c;
}

grpc_channel_credentials *rpc_channel_creds(char **server_name, char **token, int *tls)
{
    grpc_channel_credentials *c;
    pthread_mutex_lock(&sec.lock);
    *tls = sec.ca || sec.cert;
    if (*tls) {
        grpc_ssl_pem_key_cert_pair pair = {sec.key, sec.cert};
        c = grpc_ssl_credentials_create(sec.ca, sec.cert && sec.key ? &pair : NULL, NULL, NULL);
        *server_name = dup_or_null(sec.server_name);
    } else {
        c = grpc_insecure_credentials_create();
        *server_name = NULL;
    }
    *token = dup_or_null(sec.token);
    pthread_mutex_unlock(&sec.lock);
    return c;
}

/* Compares a call's "authorization" metadata with the expected value in time
 * that does not depend on where they differ. */
static int token_ok(const grpc_metadata_array *md, const char *want)
{
    size_t wn = strlen(want);
    for (size_t i = 0; i < md->count; i++) {
        if (grpc_slice_str_cmp(md->metadata[i].key, "authorization") != 0) continue;
        const uint8_t *v = GRPC_SLICE_START_PTR(md->metadata[i].value);
        size_t vn = GRPC_SLICE_LENGTH(md->metadata[i].value);
        unsigned diff = vn != wn;
        for (size_t k = 0; k < wn; k++) diff |= (unsigned)(want[k] ^ (k < vn ? v[k] : 0));
        return diff == 0;
    }
    return 0;
}

gpr_timespec rpc_deadline_in(int ms)
{
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(ms, GPR_TIMESPAN));
}

/* Copies a byte buffer into one malloc'd block of its first `total - tail_len`
 * bytes and, when tail is non-NULL and the buffer holds at least tail_len bytes,
 * its last tail_len bytes into tail (1 copy of each byte). */
uint8_t *rpc_bb_copy_split(grpc_byte_buffer *bb, void *tail, size_t tail_len, size_t *len, size_t *total_out)
{
    grpc_byte_buffer_reader r;
    *len = 0;
    if (total_out) *total_out = 0;
    if (!bb || !grpc_byte_buffer_reader_init(&r, bb)) return NULL;
    size_t total = grpc_byte_buffer_length(bb);
    if (!tail || total < tail_len) tail_len = 0;
    size_t head = total - tail_len;
    uint8_t *out = psc_xmalloc(head ? head : 1);
    size_t at = 0;
    grpc_slice s;
    while (grpc_byte_buffer_reader_next(&r, &s)) {
        const uint8_t *p = GRPC_SLICE_START_PTR(s);
        size_t n = GRPC_SLICE_LENGTH(s);
        PSC_ASSERT(at + n <= total);
        if (at < head) {
            size_t k = PSC_MIN(n, head - at);
            memcpy(out + at, p, k);
            at += k;
            p += k;
            n -= k;
        }
        if (n) {
            memcpy((uint8_t *)tail + (at - head), p, n);
            at += n;
        }
        grpc_slice_unref(s);
    }
    grpc_byte_buffer_reader_destroy(&r);
    *len = head;
    if (total_out) *total_out = at;
    return out;
}

static uint8_t *bb_to_bytes(grpc_byte_buffer *bb, size_t *len) { return rpc_bb_copy_split(bb, NULL, 0, len, NULL); }

/* ================================ server ================================ */

typedef struct method_entry {
    const char *path;
    psc_rpc_handler_fn fn;
    psc_rpc_handler_iov_fn fn_iov; /* instead of fn: the request as its slices */
    void *arg;
    void *handle; /* grpc_server_register_method */
    psc_rpc_observer_fn observe; /* psc_rpc_server_observe; NULL: none */
    void *observe_arg;
} method_entry_t;

enum call_state { CALL_NEW = 1, CALL_FINISH };

struct psc_rpc_call {
    psc_rpc_server_t *server;
    int method; /* index into methods, -1 generic */
    enum call_state state;
    grpc_call *call;
    gpr_timespec deadline;
    grpc_metadata_array md;
    grpc_call_details details; /* generic only */
    grpc_byte_buffer *payload;
    grpc_byte_buffer *reply_bb;
    grpc_slice reply_slice;
    int has_reply_slice;
    int cancelled;
    char *peer;
    int completed; /* reply/fail called */
    int active;    /* counted in server->active_calls: handed to a handler, not yet answered */
    double t0;     /* psc_now() when the call reached its server thread */
};

struct psc_rpc_server {
    char addr[256];
    int nthreads;
    grpc_server *server;
    grpc_completion_queue *cq; /* shared by the polling threads */
    grpc_completion_queue *shut_cq;
    pthread_t *threads;
    method_entry_t methods[PSC_RPC_MAX_METHODS];
    int nmethods;
    const char *services[PSC_RPC_MAX_SERVICES];
    int nservices;
    atomic_int serving;
    atomic_int stopping;
    atomic_int draining;      /* shutdown began: new calls but Health/Check get UNAVAILABLE */
    atomic_long live_calls;
    atomic_long active_calls; /* calls received and not yet answered (the drain waits for them) */
    int started, stopped;
    char *token; /* "Bearer ..." every call but Health/Check must carry; NULL: none */
    pthread_mutex_t lock;
};

static void post_request(psc_rpc_server_t *s, int method);

static void call_free(psc_rpc_call_t *c)
{
    grpc_metadata_array_destroy(&c->md);
    if (c->method < 0) grpc_call_details_destroy(&c->details);
    if (c->payload) grpc_byte_buffer_destroy(c->payload);
    if (c->reply_bb) grpc_byte_buffer_destroy(c->reply_bb);
    if (c->has_reply_slice) grpc_slice_unref(c->reply_slice);
    if (c->peer) gpr_free(c->peer);
    if (c->call) grpc_call_unref(c->call);
    atomic_fetch_sub(&c->server->live_calls, 1);
    free(c);
}

/* Starts the final batch of a call: optional message, then the status. */
static void finish(psc_rpc_call_t *c, grpc_status_code code, const char *msg)
{
    PSC_ASSERT(!c->completed);
    c->completed = 1;
    if (c->active) {
        c->active = 0;
        atomic_fetch_sub(&c->server->active_calls, 1);
    }
    if (c->method >= 0 && c->server->methods[c->method].observe) {
        const method_entry_t *m = &c->server->methods[c->method];
        m->observe(m->observe_arg, (int)code, psc_now() - c->t0);
    }
    grpc_op ops[4];
    memset(ops, 0, sizeof ops);
    size_t n = 0;
    ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[n++].data.send_initial_metadata.count = 0;
    if (code == GRPC_STATUS_OK && c->has_reply_slice) {
        c->reply_bb = grpc_raw_byte_buffer_create(&c->reply_slice, 1);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = c->reply_bb;
    }
    grpc_slice details = grpc_slice_from_copied_string(msg ? msg : "");
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = code;
    ops[n].data.send_status_from_server.status_details = &details;
    ops[n++].data.send_status_from_server.trailing_metadata_count = 0;
    ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[n++].data.recv_close_on_server.cancelled = &c->cancelled;
    c->state = CALL_FINISH;
    grpc_call *call = c->call; /* c may be freed on a polling thread once the batch is started */
    rpc_tsan_release(c);
    grpc_call_error e = grpc_call_start_batch(call, ops, n, c, NULL);
    grpc_slice_unref(details);
    PSC_ASSERT(e == GRPC_CALL_OK);
}

void *psc_rpc_reply_alloc(psc_rpc_call_t *c, size_t len)
{
    PSC_ASSERT(!c->has_reply_slice && !c->completed);
    c->reply_slice = grpc_slice_malloc(len);
    c->has_reply_slice = 1;
    return GRPC_SLICE_START_PTR(c->reply_slice);
}

void psc_rpc_reply_send(psc_rpc_call_t *c)
{
    PSC_ASSERT(c->has_reply_slice);
    finish(c, GRPC_STATUS_OK, NULL);
}

void psc_rpc_reply_send_range(psc_rpc_call_t *c, size_t offset, size_t len)
{
    PSC_ASSERT(c->has_reply_slice && offset + len <= GRPC_SLICE_LENGTH(c->reply_slice));
    grpc_slice sub = grpc_slice_sub(c->reply_slice, offset, offset + len);
    grpc_slice_unref(c->reply_slice);
    c->reply_slice = sub;
    finish(c, GRPC_STATUS_OK, NULL);
}

void psc_rpc_reply_send_shared(psc_rpc_call_t *c, psc_rpc_call_t *from, size_t offset, size_t len)
{
    PSC_ASSERT(!c->has_reply_slice && !c->completed);
    PSC_ASSERT(from->has_reply_slice && !from->completed && offset + len <= GRPC_SLICE_LENGTH(from->reply_slice));
    c->reply_slice = grpc_slice_sub(from->reply_slice, offset, offset + len); /* a new reference, no copy */
    c->has_reply_slice = 1;
    finish(c, GRPC_STATUS_OK, NULL);
}

void psc_rpc_reply_drop(psc_rpc_call_t *c)
{
    PSC_ASSERT(!c->completed);
    if (c->has_reply_slice) {
        grpc_slice_unref(c->reply_slice);
        c->has_reply_slice = 0;
    }
}

void psc_rpc_reply(psc_rpc_call_t *c, const void *msg, size_t len)
{
    void *p = psc_rpc_reply_alloc(c, len);
    if (len) memcpy(p, msg, len);
    psc_rpc_reply_send(c);
}

void psc_rpc_fail(psc_rpc_call_t *c, int code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    PSC_ASSERT(code != PSC_RPC_OK);
    if (c->has_reply_slice) {
        grpc_slice_unref(c->reply_slice);
        c->has_reply_slice = 0;
    }
    finish(c, (grpc_status_code)code, msg);
}

const char *psc_rpc_call_peer(psc_rpc_call_t *c)
{
    if (!c->peer) c->peer = grpc_call_get_peer(c->call);
    return c->peer ? c->peer : "?";
}

static void health_check(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg)
{
    psc_rpc_server_t *s = arg;
    Grpc__Health__V1__HealthCheckRequest *r = grpc__health__v1__health_check_request__unpack(NULL, len, req);
    if (!r) {
        psc_rpc_fail(call, PSC_RPC_INVALID_ARGUMENT, "HealthCheckRequest does not parse");
        return;
    }
    int known = r->service[0] == '\0';
    for (int i = 0; i < s->nservices && !known; i++) known = strcmp(r->service, s->services[i]) == 0;
    if (!known) {
        psc_rpc_fail(call, PSC_RPC_NOT_FOUND, "unknown service \"%s\"", r->service);
        grpc__health__v1__health_check_request__free_unpacked(r, NULL);
        return;
    }
    grpc__health__v1__health_check_request__free_unpacked(r, NULL);
    Grpc__Health__V1__HealthCheckResponse resp = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    resp.status = atomic_load(&s->serving) ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
                                           : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
    size_t n = grpc__health__v1__health_check_response__get_packed_size(&resp);
    grpc__health__v1__health_check_response__pack(&resp, psc_rpc_reply_alloc(call, n));
    psc_rpc_reply_send(call);
}

psc_rpc_server_t *psc_rpc_server_create(const char *addr, int threads, char *err, size_t errlen)
{
    if (threads < 1 || threads > 64) {
        psc_seterr(err, errlen, PSC_EINVAL, "server threads must be 1..64, got %d", threads);
        return NULL;
    }
    if (strlen(addr) >= sizeof(((psc_rpc_server_t *)0)->addr)) {
        psc_seterr(err, errlen, PSC_EINVAL, "address too long");
        return NULL;
    }
    rpc_grpc_init();
    psc_rpc_server_t *s = psc_xcalloc(1, sizeof *s);
    snprintf(s->addr, sizeof s->addr, "%s", addr);
    s->nthreads = threads;
    atomic_init(&s->serving, 0);
    atomic_init(&s->stopping, 0);
    atomic_init(&s->draining, 0);
    atomic_init(&s->live_calls, 0);
    atomic_init(&s->active_calls, 0);
    pthread_mutex_init(&s->lock, NULL);
    grpc_arg storage[12];
    grpc_channel_args args;
    s->server = grpc_server_create(rpc_make_args(&args, storage, 1), NULL);
    s->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(s->server, s->cq, NULL);
    s->shut_cq = grpc_completion_queue_create_for_pluck(NULL);
    grpc_server_register_completion_queue(s->server, s->shut_cq, NULL);
    psc_rpc_server_add_method(s, PSC_M_HEALTH, health_check, s);
    return s;
}

static method_entry_t *method_add(psc_rpc_server_t *s, const char *path, void *arg)
{
    PSC_ASSERT(!s->started && s->nmethods < PSC_RPC_MAX_METHODS);
    method_entry_t *m = &s->methods[s->nmethods++];
    m->path = path;
    m->arg = arg;
    m->handle = grpc_server_register_method(s->server, path, NULL, GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
    PSC_ASSERT(m->handle != NULL);
    return m;
}

void psc_rpc_server_add_method(psc_rpc_server_t *s, const char *path, psc_rpc_handler_fn fn, void *arg)
{
    method_add(s, path, arg)->fn = fn;
}

void psc_rpc_server_add_method_iov(psc_rpc_server_t *s, const char *path, psc_rpc_handler_iov_fn fn, void *arg)
{
    method_add(s, path, arg)->fn_iov = fn;
}

int psc_rpc_server_observe(psc_rpc_server_t *s, const char *path, psc_rpc_observer_fn fn, void *arg)
{
    PSC_ASSERT(!s->started);
    for (int i = 0; i < s->nmethods; i++)
        if (strcmp(s->methods[i].path, path) == 0) {
            s->methods[i].observe = fn;
            s->methods[i].observe_arg = arg;
            return 0;
        }
    return PSC_ENOTFOUND;
}

void psc_rpc_server_add_service(psc_rpc_server_t *s, const char *service)
{
    PSC_ASSERT(!s->started && s->nservices < PSC_RPC_MAX_SERVICES);
    s->services[s->nservices++] = service;
}

void psc_rpc_server_set_serving(psc_rpc_server_t *s, int serving) { atomic_store(&s->serving, serving ? 1 : 0); }

static void post_request(psc_rpc_server_t *s, int method)
{
    if (atomic_load(&s->stopping)) return;
    psc_rpc_call_t *c = psc_xcalloc(1, sizeof *c);
    c->server = s;
    c->method = method;
    c->state = CALL_NEW;
    grpc_metadata_array_init(&c->md);
    atomic_fetch_add(&s->live_calls, 1);
    grpc_completion_queue *cq = s->cq;
    grpc_call_error e;
    rpc_tsan_release(c);
    if (method >= 0) {
        e = grpc_server_request_registered_call(s->server, s->methods[method].handle, &c->call, &c->deadline,
                                                &c->md, &c->payload, cq, cq, c);
    } else {
        grpc_call_details_init(&c->details);
        e = grpc_server_request_call(s->server, &c->call, &c->details, &c->md, cq, cq, c);
    }
    if (e != GRPC_CALL_OK) {
        /* The server is shutting down underneath us. */
        call_free(c);
    }
}

/* Hands an _iov method its request as the byte buffer's slices. A slice of a
 * few bytes lives inside its grpc_slice struct (inlined), so the segment
 * pointers are taken only once the array of slices has stopped growing. */
static void deliver_slices(psc_rpc_call_t *c, const method_entry_t *m)
{
    enum { STACK = 64 };
    grpc_slice stack_sl[STACK], *sl = stack_sl;
    psc_iov_t stack_iov[STACK], *iov = stack_iov;
    size_t n = 0, cap = STACK, len = 0;
    grpc_byte_buffer_reader r;
    if (!grpc_byte_buffer_reader_init(&r, c->payload)) {
        finish(c, GRPC_STATUS_INVALID_ARGUMENT, "request message cannot be read");
        return;
    }
    grpc_slice one;
    while (grpc_byte_buffer_reader_next(&r, &one)) {
        if (n == cap) {
            cap *= 2;
            if (sl == stack_sl) {
                sl = psc_xmalloc(cap * sizeof *sl);
                memcpy(sl, stack_sl, sizeof stack_sl);
            } else {
                sl = psc_xrealloc(sl, cap * sizeof *sl);
            }
        }
        sl[n++] = one;
    }
    grpc_byte_buffer_reader_destroy(&r);
    grpc_byte_buffer_destroy(c->payload); /* the slices keep their own references */
    c->payload = NULL;
    if (cap > STACK) iov = psc_xmalloc(cap * sizeof *iov);
    for (size_t i = 0; i < n; i++) {
        iov[i].base = GRPC_SLICE_START_PTR(sl[i]);
        iov[i].len = GRPC_SLICE_LENGTH(sl[i]);
        len += iov[i].len;
    }
    m->fn_iov(c, iov, (int)n, len, m->arg);
    for (size_t i = 0; i < n; i++) grpc_slice_unref(sl[i]);
    if (sl != stack_sl) free(sl);
    if (iov != stack_iov) free(iov);
}

static void on_new_call(psc_rpc_call_t *c)
{
    psc_rpc_server_t *s = c->server;
    c->t0 = psc_now();
    post_request(s, c->method); /* re-post first (GRPC_CORE.md pitfall 6) */
    c->active = 1;
    atomic_fetch_add(&s->active_calls, 1);
    if (atomic_load(&s->draining) && (c->method < 0 || s->methods[c->method].fn != health_check)) {
        finish(c, GRPC_STATUS_UNAVAILABLE, "server is shutting down");
        return;
    }
    if (s->token && (c->method < 0 || s->methods[c->method].fn != health_check) && !token_ok(&c->md, s->token)) {
        finish(c, GRPC_STATUS_UNAUTHENTICATED, "missing or wrong auth token (see --auth_token_file)");
        return;
    }
    if (c->method < 0) {
        char *path = grpc_slice_to_c_string(c->details.method);
        finish(c, GRPC_STATUS_UNIMPLEMENTED, "unknown method");
        PSC_DEBUG("unknown method %s", path);
        gpr_free(path);
        return;
    }
    if (!c->payload) {
        finish(c, GRPC_STATUS_INVALID_ARGUMENT, "request has no message");
        return;
    }
    method_entry_t *m = &s->methods[c->method];
    if (m->fn_iov) {
        deliver_slices(c, m);
        return;
    }
    size_t len;
    uint8_t *req = bb_to_bytes(c->payload, &len);
    grpc_byte_buffer_destroy(c->payload);
    c->payload = NULL;
    if (!req) {
        finish(c, GRPC_STATUS_INVALID_ARGUMENT, "request message cannot be read");
        return;
    }
    m->fn(c, req, len, m->arg);
    free(req);
}

static void *server_thread(void *arg)
{
    psc_rpc_server_t *s = arg;
    grpc_completion_queue *cq = s->cq;
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
        if (ev.type != GRPC_OP_COMPLETE) continue;
        psc_rpc_call_t *c = ev.tag;
        rpc_tsan_acquire(c);
        if (c->state == CALL_NEW) {
            if (!ev.success) { /* server shutting down: request never matched */
                call_free(c);
                continue;
            }
            on_new_call(c);
        } else {
            call_free(c);
        }
    }
    return NULL;
}

int psc_rpc_server_start(psc_rpc_server_t *s, char *err, size_t errlen)
{
    PSC_ASSERT(!s->started);
    grpc_server_credentials *creds = server_creds();
    int port = grpc_server_add_http2_port(s->server, s->addr, creds);
    grpc_server_credentials_release(creds);
    if (port <= 0)
        return psc_seterr(err, errlen, PSC_EIO, "cannot bind %s: address in use or not local (another daemon? use --port)",
                          s->addr);
    pthread_mutex_lock(&sec.lock);
    s->token = dup_or_null(sec.token);
    pthread_mutex_unlock(&sec.lock);
    grpc_server_start(s->server);
    s->started = 1;
    for (int i = 0; i < s->nthreads; i++) {
        for (int m = 0; m < s->nmethods; m++)
            for (int k = 0; k < PSC_RPC_POSTED; k++) post_request(s, m);
        post_request(s, -1);
    }
    s->threads = psc_xcalloc((size_t)s->nthreads, sizeof *s->threads);
    for (int i = 0; i < s->nthreads; i++) /* requests are posted: no way back */
        PSC_ASSERT(psc_thread_start(&s->threads[i], server_thread, s, "RPC polling", NULL, 0) == 0);
    atomic_store(&s->serving, 1);
    return port;
}

void psc_rpc_server_shutdown(psc_rpc_server_t *s, int grace_ms)
{
    pthread_mutex_lock(&s->lock);
    if (s->stopped || !s->started) {
        s->stopped = 1;
        pthread_mutex_unlock(&s->lock);
        return;
    }
    s->stopped = 1;
    pthread_mutex_unlock(&s->lock);
    /* Drain (see the top of this file): health NOT_SERVING, new calls refused,
     * the calls in flight get up to grace_ms to be answered. */
    atomic_store(&s->serving, 0);
    atomic_store(&s->draining, 1);
    double t0 = psc_now();
    while (atomic_load(&s->active_calls) > 0 && (psc_now() - t0) * 1000.0 < grace_ms) {
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    int left_ms = grace_ms - (int)((psc_now() - t0) * 1000.0);
    atomic_store(&s->stopping, 1);
    grpc_server_shutdown_and_notify(s->server, s->shut_cq, s);
    grpc_event ev = grpc_completion_queue_pluck(s->shut_cq, s, rpc_deadline_in(left_ms > 0 ? left_ms : 1), NULL);
    if (ev.type != GRPC_OP_COMPLETE) {
        grpc_server_cancel_all_calls(s->server);
        ev = grpc_completion_queue_pluck(s->shut_cq, s, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    }
    /* Every call has finished; contexts still waiting for a request come back with ok=0. */
    while (atomic_load(&s->live_calls) > 0) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    grpc_completion_queue_shutdown(s->cq);
    for (int i = 0; i < s->nthreads; i++) pthread_join(s->threads[i], NULL);
}

void psc_rpc_server_destroy(psc_rpc_server_t *s)
{
    if (!s) return;
    psc_rpc_server_shutdown(s, 0);
    if (!s->started) {
        /* Never started: shut down so the cq drains cleanly. */
        grpc_server_shutdown_and_notify(s->server, s->shut_cq, s);
        grpc_completion_queue_pluck(s->shut_cq, s, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        grpc_completion_queue_shutdown(s->cq);
        while (grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
               GRPC_QUEUE_SHUTDOWN) {
        }
    }
    grpc_server_destroy(s->server);
    grpc_completion_queue_destroy(s->cq);
    grpc_completion_queue_shutdown(s->shut_cq);
    while (grpc_completion_queue_pluck(s->shut_cq, NULL, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(s->shut_cq);
    free(s->threads);
    if (s->token) explicit_bzero(s->token, strlen(s->token));
    free(s->token);
    pthread_mutex_destroy(&s->lock);
    free(s);
    grpc_shutdown();
}
