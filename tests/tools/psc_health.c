/* psc_health — waits until the gRPC health service at ADDR reports SERVING.
 * usage: psc_health ADDR [WAIT_MS]   exit 0 when serving, 1 if not within WAIT_MS
 * (default 10000). Used by the scripts to wait for daemons to come up. */
#include "rpc.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: psc_health ADDR [WAIT_MS]\n");
        return 64;
    }
    int wait_ms = argc > 2 ? atoi(argv[2]) : 10000;
    psc_rpc_channel_t *ch = psc_rpc_channel_create(argv[1]);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int ok = 0;
    for (;;) {
        if (psc_rpc_health_check(ch, 500)) {
            ok = 1;
            break;
        }
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 > wait_ms) break;
        struct timespec d = {0, 50 * 1000 * 1000};
        nanosleep(&d, NULL);
    }
    psc_rpc_channel_destroy(ch);
    if (!ok) fprintf(stderr, "psc_health: %s not serving within %d ms\n", argv[1], wait_ms);
    return ok ? 0 : 1;
}
