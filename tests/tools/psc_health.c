/* psc_health — waits until the gRPC health service at ADDR reports SERVING.
 * usage: psc_health [--tls_ca F --tls_cert F --tls_key F --tls_server_name N
 *                    --auth_token_file F] ADDR [WAIT_MS]
 * exit 0 when serving, 1 if not within WAIT_MS (default 10000), 64 usage,
 * 78 bad TLS/token files. Used by the scripts to wait for daemons to come up. */
#include "rpc.h"
#include "security.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv)
{
    psc_rpc_hold_for_process(); /* exit without gRPC's full shutdown (rpc.h) */
    static const struct option opts[] = {PSC_SECURITY_OPTIONS, {NULL, 0, NULL, 0}};
    psc_security_flags_t secf = {0};
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1)
        if (!psc_security_flag(c, optarg, &secf)) {
            fprintf(stderr, "psc_health: unknown option \"%s\"\n", argv[optind - 1]);
            return 64;
        }
    if (optind >= argc) {
        fprintf(stderr, "usage: psc_health [TLS/token flags] ADDR [WAIT_MS]\n");
        return 64;
    }
    char err[512];
    if (psc_security_apply(&secf, PSC_SEC_CLIENT, err, sizeof err)) {
        fprintf(stderr, "psc_health: %s\n", err);
        return 78;
    }
    const char *addr = argv[optind];
    int wait_ms = optind + 1 < argc ? atoi(argv[optind + 1]) : 10000;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int ok = 0;
    for (;;) {
        /* a fresh channel per try: a channel refused once (the daemon not up
         * yet) can sit out gRPC's reconnect logic for seconds */
        psc_rpc_channel_t *ch = psc_rpc_channel_create(addr);
        ok = psc_rpc_health_check(ch, 1000);
        psc_rpc_channel_destroy(ch);
        if (ok) break;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 > wait_ms) break;
        struct timespec d = {0, 50 * 1000 * 1000};
        nanosleep(&d, NULL);
    }
    if (!ok) fprintf(stderr, "psc_health: %s not serving within %d ms\n", addr, wait_ms);
    return ok ? 0 : 1;
}
