/* daemon.h — what every long-running program does the same way: signals and
 * the standard task flags.
 *
 * Signals: psc_signals_block() must run in main() before any thread exists (and
 * before gRPC starts its own): SIGINT, SIGTERM and SIGUSR1 are then pending for
 * the process, and the main thread collects them with psc_signals_wait(). Other
 * threads wake main with psc_signals_wake() (SIGUSR1). No signal handlers run.
 */
#ifndef PSC_DAEMON_H
#define PSC_DAEMON_H

#include <signal.h>
#include <stddef.h>

void psc_signals_block(void);
/* Waits for SIGINT, SIGTERM or SIGUSR1; returns the signal number. */
int psc_signals_wait(void);
/* Wakes the waiting main thread (SIGUSR1). Async-signal-safe; any thread. */
void psc_signals_wake(void);

/* getopt_long values of the shared flags. */
enum {
    PSC_OPT_CLUSTER = 1000,
    PSC_OPT_JOB,
    PSC_OPT_TASK_INDEX,
    PSC_OPT_PORT,
    PSC_OPT_LOG_LEVEL,
    PSC_OPT_HELP,
    PSC_OPT_VERSION,
    PSC_OPT__FIRST_PROGRAM /* programs number their own options from here */
};

/* Parses an integer flag value within [lo, hi]; 0 or PSC_EINVAL. */
int psc_parse_int(const char *s, long lo, long hi, long *out);

typedef struct psc_metrics psc_metrics_t;
/* --metrics_port: serves m's /metrics on the host of `bind` (a
 * psc_bind_address() result, "1.2.3.4:5" or "[::1]:5") and logs where. 0, or
 * PSC_EIO with a one-line message naming the address in err. */
int psc_metrics_serve_for(psc_metrics_t *m, const char *bind, int port, char *err, size_t errlen);

#endif
