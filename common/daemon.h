/* daemon.h — what every long-running program does the same way: signals and
 * the standard task flags.
 *
 * Flags: the options ps_server and worker share (--cluster, --job,
 * --task_index, --port, --metrics_port, --log_level, the security flags of
 * security.h, --help, --version) are parsed in one place, psc_daemon_flag(),
 * so that each of their usage errors is written once. A daemon puts
 * PSC_DAEMON_OPTIONS in its getopt_long table and calls psc_daemon_flag()
 * from its switch's `default:` for every option it does not handle itself:
 *
 *     psc_daemon_flags_t df = PSC_DAEMON_FLAGS_INIT("worker", usage);
 *     opterr = 0;
 *     while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
 *         switch (c) {
 *         case OPT_PREFETCH:
 *             if (psc_flag_long("worker", "--prefetch", optarg, 1, 64, NULL, &v)) return PSC_EXIT_USAGE;
 *             ...
 *         default:
 *             if ((rc = psc_daemon_flag(&df, c, optarg, argv[optind - 1])) != PSC_FLAG_NEXT) return rc;
 *         }
 *     }
 *     if ((rc = psc_daemon_flags_end(&df, argc, argv, optind)) != PSC_FLAG_NEXT) return rc;
 *
 * and then reads df.task (for psc_tf_config_resolve), df.sec (for
 * psc_security_apply) and df.metrics_port. --log_level takes effect at once.
 *
 * Signals: psc_signals_block() must run in main() before any thread exists (and
 * before gRPC starts its own): SIGINT, SIGTERM and SIGUSR1 are then pending for
 * the process, and the main thread collects them with psc_signals_wait(). Other
 * threads wake main with psc_signals_wake() (SIGUSR1). No signal handlers run.
 */
#ifndef PSC_DAEMON_H
#define PSC_DAEMON_H

#include "security.h"
#include "tf_config.h"

#include <signal.h>
#include <stddef.h>
#include <stdio.h>

void psc_signals_block(void);
/* Waits for SIGINT, SIGTERM or SIGUSR1; returns the signal number. */
/* Raises the soft limit of open files to the hard limit (a PS holds a
 * connection per worker: 1,000 workers pass the usual soft limit of 1,024).
 * Returns the soft limit now in force (0 when it cannot be read). */
unsigned long psc_daemon_raise_nofile(void);
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
    PSC_OPT_METRICS_PORT,
    PSC_OPT__FIRST_PROGRAM /* programs number their own options from here (below 1100) */
};

/* Entries of the shared flags for a struct option table (needs <getopt.h>). */
#define PSC_DAEMON_OPTIONS                                                  \
    {"cluster", required_argument, NULL, PSC_OPT_CLUSTER},                  \
        {"job", required_argument, NULL, PSC_OPT_JOB},                      \
        {"task_index", required_argument, NULL, PSC_OPT_TASK_INDEX},        \
        {"port", required_argument, NULL, PSC_OPT_PORT},                    \
        {"metrics_port", required_argument, NULL, PSC_OPT_METRICS_PORT},    \
        {"log_level", required_argument, NULL, PSC_OPT_LOG_LEVEL},          \
        {"help", no_argument, NULL, PSC_OPT_HELP},                          \
        {"version", no_argument, NULL, PSC_OPT_VERSION}, PSC_SECURITY_OPTIONS

/* What the shared flags set; the caller owns it (PSC_DAEMON_FLAGS_INIT), the
 * strings point into argv. */
typedef struct psc_daemon_flags {
    const char *prog;       /* "ps_server", "worker": the first word of every message */
    void (*usage)(FILE *f); /* prints the program's --help */
    psc_task_flags_t task;  /* --cluster, --job, --task_index, --port (-1: not given) */
    psc_security_flags_t sec;
    long metrics_port; /* --metrics_port; 0: off */
} psc_daemon_flags_t;

#define PSC_DAEMON_FLAGS_INIT(prog, usage) {(prog), (usage), {NULL, NULL, -1, -1}, {0}, 0}

/* psc_daemon_flag()'s "handled, parse on" (every other result is the exit status). */
#define PSC_FLAG_NEXT (-1)

/* Handles option `opt` (a getopt_long result) with value `arg`; `text` is the
 * option as the user wrote it (argv[optind - 1]), for the message on an
 * unknown one. Returns PSC_FLAG_NEXT when it handled the option, else the exit
 * status main() returns now: 0 after printing --help (stdout) or --version,
 * PSC_EXIT_USAGE after printing one line to stderr, "prog: --port: expected
 * 0..65535, got \"x\"" or "prog: unknown or incomplete option \"--x\" (see
 * --help)". Main thread, during option parsing. */
int psc_daemon_flag(psc_daemon_flags_t *f, int opt, const char *arg, const char *text);

/* After the getopt_long loop: PSC_FLAG_NEXT when no argument is left
 * (next == argc, next being optind), else PSC_EXIT_USAGE after "prog: unexpected argument". */
int psc_daemon_flags_end(const psc_daemon_flags_t *f, int argc, char **argv, int next);

/* Parses an integer flag value within [lo, hi]; 0 or PSC_EINVAL. */
int psc_parse_int(const char *s, long lo, long hi, long *out);

/* psc_parse_int() for a flag: 0, or PSC_EXIT_USAGE after printing "prog:
 * flag: expected EXPECT, got \"arg\"" (EXPECT NULL: "lo..hi"). */
int psc_flag_long(const char *prog, const char *flag, const char *arg, long lo, long hi, const char *expect,
                  long *out);

typedef struct psc_metrics psc_metrics_t;
/* --metrics_port: serves m's /metrics on the host of `bind` (a
 * psc_task_bind_address() result, "1.2.3.4:5" or "[::1]:5") and logs where. 0, or
 * PSC_EIO with a one-line message naming the address in err. */
int psc_metrics_serve_for(psc_metrics_t *m, const char *bind, int port, char *err, size_t errlen);

#endif
