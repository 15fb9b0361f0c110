/* psc_grpc_probe — what a Kubernetes gRPC probe does: grpc.health.v1.Health/Check
 * of one service (as `grpc: {port: P, service: S}` in a pod spec), SERVING or not.
 *
 * usage: psc_grpc_probe ADDR [SERVICE] [WAIT_MS]
 * SERVICE defaults to "" (the server as a whole). Prints the answer (SERVING,
 * NOT_SERVING, or the call's status such as NOT_FOUND for an unknown service);
 * with WAIT_MS it retries every 100 ms until SERVING or WAIT_MS passed.
 * Exit 0 when SERVING, 1 otherwise, 64 on bad usage. */
#include "rpc.h"
#include "wire.h"

#include "grpc/health/v1/health.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One Health/Check; writes the answer into out. Returns 1 when SERVING. */
static int probe(const char *addr, const char *service, char *out, size_t outlen)
{
    /* a fresh channel per try: a channel refused once waits out gRPC's backoff */
    psc_rpc_channel_t *ch = psc_rpc_channel_create(addr);
    Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    req.service = (char *)service;
    uint8_t buf[512];
    size_t n = grpc__health__v1__health_check_request__pack(&req, buf);
    psc_rpc_op_t op;
    int serving = 0;
    psc_rpc_call(ch, PSC_M_HEALTH, buf, n, 1000, 0, &op);
    if (op.code != PSC_RPC_OK) {
        snprintf(out, outlen, "%s: %s", psc_rpc_code_name(op.code), op.msg);
    } else {
        Grpc__Health__V1__HealthCheckResponse *r =
            grpc__health__v1__health_check_response__unpack(NULL, op.reply_len, op.reply);
        if (!r) {
            snprintf(out, outlen, "reply does not parse");
        } else {
            serving = r->status == GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
            snprintf(out, outlen, "%s",
                     serving ? "SERVING"
                             : r->status == GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING
                                   ? "NOT_SERVING"
                                   : "UNKNOWN");
            grpc__health__v1__health_check_response__free_unpacked(r, NULL);
        }
    }
    psc_rpc_op_clear(&op);
    psc_rpc_channel_destroy(ch);
    return serving;
}

int main(int argc, char **argv)
{
    psc_rpc_hold_for_process(); /* exit without gRPC's full shutdown (rpc.h) */
    if (argc < 2 || argc > 4 || (argc > 2 && strlen(argv[2]) > 200)) {
        fprintf(stderr, "usage: psc_grpc_probe ADDR [SERVICE] [WAIT_MS]\n");
        return 64;
    }
    const char *service = argc > 2 ? argv[2] : "";
    long wait_ms = argc > 3 ? atol(argv[3]) : 0;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    char answer[400];
    for (;;) {
        if (probe(argv[1], service, answer, sizeof answer)) break;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 >= wait_ms) {
            printf("%s\n", answer);
            return 1;
        }
        struct timespec d = {0, 100 * 1000 * 1000};
        nanosleep(&d, NULL);
    }
    printf("%s\n", answer);
    return 0;
}
