/* rpc_client.c — the client half of the RPC layer (see rpc.h): channels and
 * batches of unary calls.
 *
 * Design: psc_rpc_run makes one cq per run and keeps up to max_in_flight calls
 * of one batch of six ops each. Request bodies go out as a slice over the
 * caller's memory whose release is counted, so the run returns only after gRPC
 * has dropped every reference to the caller's buffers.
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
#include <grpc/support/time.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct psc_rpc_channel {
    grpc_channel *ch;
    char target[256];
    char *token; /* "Bearer ..." sent with every call; NULL: none */
    int tls;     /* connects with TLS */
};

psc_rpc_channel_t *psc_rpc_channel_create(const char *target)
{
    rpc_grpc_init();
    psc_rpc_channel_t *c = psc_xcalloc(1, sizeof *c);
    snprintf(c->target, sizeof c->target, "%s", target);
    grpc_arg storage[10];
    char *server_name;
    grpc_channel_credentials *creds = rpc_channel_creds(&server_name, &c->token, &c->tls);
    grpc_channel_args args_storage;
    grpc_channel_args *args = rpc_make_args(&args_storage, storage, 0);
    if (server_name) {
        storage[args->num_args].type = GRPC_ARG_STRING;
        storage[args->num_args].key = (char *)GRPC_SSL_TARGET_NAME_OVERRIDE_ARG;
        storage[args->num_args++].value.string = server_name;
    }
    c->ch = grpc_channel_create(target, creds, args);
    grpc_channel_credentials_release(creds);
    free(server_name);
    return c;
}

void psc_rpc_channel_destroy(psc_rpc_channel_t *c)
{
    if (!c) return;
    grpc_channel_destroy(c->ch);
    if (c->token) explicit_bzero(c->token, strlen(c->token));
    free(c->token);
    free(c);
    grpc_shutdown();
}

const char *psc_rpc_channel_target(const psc_rpc_channel_t *c) { return c->target; }

typedef struct client_call {
    psc_rpc_op_t *op;
    grpc_call *call;
    grpc_byte_buffer *send_bb;
    grpc_byte_buffer *recv_bb;
    grpc_metadata_array initial_md, trailing_md;
    grpc_status_code status;
    grpc_slice details;
    const char *error_string;
    grpc_metadata auth; /* the token, when the channel has one */
} client_call_t;

static void body_released(void *user_data) { atomic_fetch_sub((atomic_long *)user_data, 1); }

static int start_call(client_call_t *cc, psc_rpc_op_t *op, grpc_completion_queue *cq, int timeout_ms,
                      atomic_long *bodies)
{
    memset(cc, 0, sizeof *cc);
    cc->op = op;
    op->code = PSC_RPC_UNKNOWN;
    op->msg[0] = '\0';
    op->reply = NULL;
    op->reply_len = 0;
    op->reply_total = 0;
    grpc_slice method = grpc_slice_from_static_string(op->method);
    cc->call = grpc_channel_create_call(op->ch->ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, method, NULL,
                                        rpc_deadline_in(timeout_ms), NULL);
    grpc_slice parts[2];
    size_t nparts = 0;
    parts[nparts++] = grpc_slice_from_copied_buffer(op->hdr ? op->hdr : "", op->hdr_len);
    if (op->body_len) {
        atomic_fetch_add(bodies, 1);
        parts[nparts++] = grpc_slice_new_with_user_data((void *)op->body, op->body_len, body_released, bodies);
    }
    cc->send_bb = grpc_raw_byte_buffer_create(parts, nparts);
    for (size_t i = 0; i < nparts; i++) grpc_slice_unref(parts[i]);
    grpc_metadata_array_init(&cc->initial_md);
    grpc_metadata_array_init(&cc->trailing_md);

    grpc_op ops[6];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].flags = op->wait_for_ready ? GRPC_INITIAL_METADATA_WAIT_FOR_READY : 0;
    if (op->ch->token) {
        cc->auth.key = grpc_slice_from_static_string("authorization");
        cc->auth.value = grpc_slice_from_static_string(op->ch->token);
        ops[0].data.send_initial_metadata.count = 1;
        ops[0].data.send_initial_metadata.metadata = &cc->auth;
    }
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = cc->send_bb;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &cc->initial_md;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &cc->recv_bb;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &cc->trailing_md;
    ops[5].data.recv_status_on_client.status = &cc->status;
    ops[5].data.recv_status_on_client.status_details = &cc->details;
    ops[5].data.recv_status_on_client.error_string = &cc->error_string;
    grpc_call *call = cc->call;
    rpc_tsan_release(cc);
    grpc_call_error e = grpc_call_start_batch(call, ops, 6, cc, NULL);
    PSC_ASSERT(e == GRPC_CALL_OK);
    return 0;
}

/* A failed connection that is likely a TLS mismatch gets a hint, since gRPC
 * reports it only as UNAVAILABLE "Socket closed", "Ssl handshake failed" or
 * "Peer name X is not in peer certificate": a TLS channel that reached the
 * server (the TCP connect worked; refused or unresolvable addresses are not
 * TLS's doing), or a plaintext channel whose connection the server closed at
 * once (what a TLS listener does to a plaintext client). The hint is kept
 * whole: gRPC's redundant "failed to connect..." prefix goes first if the
 * message is too long. */
static void add_tls_hint(psc_rpc_op_t *op, int tls)
{
    static const char hint[] =
        " (TLS handshake failed? check --tls_ca, --tls_cert/--tls_key, --tls_server_name and that both sides use TLS)";
    static const char prefix[] = "failed to connect to all addresses; last error: ";
    const char *m = op->msg;
    if (op->code != PSC_RPC_UNAVAILABLE || strstr(m, "TLS handshake failed?")) return;
    int tls_said = strstr(m, "Ssl handshake failed") || strstr(m, "ssl handshake failed") ||
                   strstr(m, "is not in peer certificate") || strstr(m, "Handshake failed");
    int connect_failed = strncmp(m, prefix, sizeof prefix - 1) == 0;
    int tcp_failed = strstr(m, "Failed to connect to remote host") || strstr(m, "DNS resolution failed") ||
                     strstr(m, "Connection refused") || strstr(m, "No route to host");
    if (!tls_said && !(connect_failed && !tcp_failed && (tls || strstr(m, "Socket closed")))) return;
    char text[sizeof op->msg];
    size_t room = sizeof text - sizeof hint; /* for gRPC's message, the NUL included in sizeof hint */
    if (strlen(m) > room && connect_failed) m += sizeof prefix - 1;
    snprintf(text, sizeof text, "%.*s%s", (int)room, m, hint);
    memcpy(op->msg, text, sizeof text);
}

static void end_call(client_call_t *cc, int success)
{
    psc_rpc_op_t *op = cc->op;
    if (!success) {
        op->code = PSC_RPC_INTERNAL;
        snprintf(op->msg, sizeof op->msg, "call batch failed");
    } else {
        op->code = (int)cc->status;
        if (cc->status != GRPC_STATUS_OK) {
            char *d = grpc_slice_to_c_string(cc->details);
            snprintf(op->msg, sizeof op->msg, "%s", d[0] ? d : (cc->error_string ? cc->error_string : ""));
            gpr_free(d);
            add_tls_hint(op, op->ch->tls);
        } else if (cc->recv_bb) {
            op->reply = rpc_bb_copy_split(cc->recv_bb, op->reply_body, op->reply_body_len, &op->reply_len,
                                      &op->reply_total);
        } else {
            op->code = PSC_RPC_INTERNAL;
            snprintf(op->msg, sizeof op->msg, "reply has no message");
        }
    }
    grpc_slice_unref(cc->details);
    if (cc->error_string) gpr_free((void *)cc->error_string);
    grpc_metadata_array_destroy(&cc->initial_md);
    grpc_metadata_array_destroy(&cc->trailing_md);
    if (cc->send_bb) grpc_byte_buffer_destroy(cc->send_bb);
    if (cc->recv_bb) grpc_byte_buffer_destroy(cc->recv_bb);
    grpc_call_unref(cc->call);
}

int psc_rpc_run(psc_rpc_op_t *ops, size_t n, size_t max_in_flight, int timeout_ms)
{
    if (n == 0) return 0;
    if (max_in_flight < 1) max_in_flight = 1;
    if (max_in_flight > n) max_in_flight = n;
    grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
    client_call_t *calls = psc_xcalloc(max_in_flight, sizeof *calls);
    size_t *free_slots = psc_xmalloc(max_in_flight * sizeof *free_slots);
    atomic_long bodies;
    atomic_init(&bodies, 0);
    size_t next = 0, done = 0, nfree = 0;
    for (size_t i = 0; i < max_in_flight; i++) start_call(&calls[i], &ops[next++], cq, timeout_ms, &bodies);
    while (done < n) {
        grpc_event ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        PSC_ASSERT(ev.type == GRPC_OP_COMPLETE);
        client_call_t *cc = ev.tag;
        rpc_tsan_acquire(cc);
        end_call(cc, ev.success);
        done++;
        if (next < n)
            start_call(cc, &ops[next++], cq, timeout_ms, &bodies);
        else
            free_slots[nfree++] = (size_t)(cc - calls);
    }
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type != GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(cq);
    /* gRPC may release the body slices a moment after the calls complete. */
    for (int spins = 0; atomic_load(&bodies) > 0 && spins < 10000; spins++) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    free(calls);
    free(free_slots);
    for (size_t i = 0; i < n; i++)
        if (ops[i].code != PSC_RPC_OK) return PSC_ERPC;
    return 0;
}

int psc_rpc_call(psc_rpc_channel_t *ch, const char *method, const void *req, size_t len, int timeout_ms,
                 int wait_for_ready, psc_rpc_op_t *out)
{
    memset(out, 0, sizeof *out);
    out->ch = ch;
    out->method = method;
    out->hdr = req;
    out->hdr_len = len;
    out->wait_for_ready = wait_for_ready;
    return psc_rpc_run(out, 1, 1, timeout_ms);
}

int psc_rpc_health_check(psc_rpc_channel_t *ch, int timeout_ms)
{
    Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    uint8_t buf[64];
    size_t n = grpc__health__v1__health_check_request__pack(&req, buf);
    psc_rpc_op_t op;
    int serving = 0;
    if (psc_rpc_call(ch, PSC_M_HEALTH, buf, n, timeout_ms, 0, &op) == 0) {
        Grpc__Health__V1__HealthCheckResponse *r =
            grpc__health__v1__health_check_response__unpack(NULL, op.reply_len, op.reply);
        if (r) {
            serving = r->status == GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
            grpc__health__v1__health_check_response__free_unpacked(r, NULL);
        }
    }
    psc_rpc_op_clear(&op);
    return serving;
}

size_t psc_rpc_first_failure(const psc_rpc_op_t *ops, size_t n)
{
    size_t bad = n;
    for (size_t i = 0; i < n; i++) {
        if (ops[i].code == PSC_RPC_OK) continue;
        if (psc_rpc_code_errno(ops[i].code) == PSC_EUNAVAILABLE) return i;
        if (bad == n) bad = i;
    }
    return bad;
}

void psc_rpc_op_clear(psc_rpc_op_t *op)
{
    free(op->reply);
    op->reply = NULL;
    op->reply_len = 0;
}
