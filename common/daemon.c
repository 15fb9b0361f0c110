/* daemon.c — see daemon.h. */
#include "daemon.h"

#include "log.h"
#include "metrics.h"
#include "psc.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static void fill(sigset_t *set)
{
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGUSR1);
}

static pthread_t waiter; /* the thread that blocked the signals and collects them (main) */
static int have_waiter;

void psc_signals_block(void)
{
    waiter = pthread_self();
    have_waiter = 1;
    sigset_t set;
    fill(&set);
    PSC_ASSERT(pthread_sigmask(SIG_BLOCK, &set, NULL) == 0);
    signal(SIGPIPE, SIG_IGN);
}

unsigned long psc_daemon_raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
    if (rl.rlim_cur < rl.rlim_max) {
        rlim_t want = rl.rlim_max;
        rl.rlim_cur = want;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0 && getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
    }
    return rl.rlim_cur == RLIM_INFINITY ? (unsigned long)-1 : (unsigned long)rl.rlim_cur;
}

int psc_signals_wait(void)
{
    sigset_t set;
    fill(&set);
    int sig = 0;
    while (sigwait(&set, &sig) != 0) {
    }
    return sig;
}

/* Directed at main: a signal sent to the process goes to any thread that does
 * not block it, and threads that libraries start before main blocks the
 * signals (OpenBLAS's pool starts when the library loads) do not: SIGUSR1's
 * default action there ended the worker with 138 instead of waking main. */
void psc_signals_wake(void)
{
    if (have_waiter)
        pthread_kill(waiter, SIGUSR1);
    else
        kill(getpid(), SIGUSR1);
}

int psc_parse_int(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < lo || v > hi) return PSC_EINVAL;
    *out = v;
    return 0;
}

int psc_flag_long(const char *prog, const char *flag, const char *arg, long lo, long hi, const char *expect,
                  long *out)
{
    if (psc_parse_int(arg, lo, hi, out) == 0) return 0;
    if (expect)
        fprintf(stderr, "%s: %s: expected %s, got \"%s\"\n", prog, flag, expect, arg);
    else
        fprintf(stderr, "%s: %s: expected %ld..%ld, got \"%s\"\n", prog, flag, lo, hi, arg);
    return PSC_EXIT_USAGE;
}

int psc_daemon_flag(psc_daemon_flags_t *f, int opt, const char *arg, const char *text)
{
    long v;
    enum psc_log_level lv;
    switch (opt) {
    case PSC_OPT_CLUSTER: f->task.cluster = arg; break;
    case PSC_OPT_JOB: f->task.job = arg; break;
    case PSC_OPT_TASK_INDEX:
        if (psc_flag_long(f->prog, "--task_index", arg, 0, 1 << 20, "a non-negative integer", &v))
            return PSC_EXIT_USAGE;
        f->task.task_index = (int)v;
        break;
    case PSC_OPT_PORT:
        if (psc_flag_long(f->prog, "--port", arg, 0, 65535, NULL, &v)) return PSC_EXIT_USAGE;
        f->task.port = (int)v;
        break;
    case PSC_OPT_METRICS_PORT:
        if (psc_flag_long(f->prog, "--metrics_port", arg, 0, 65535, "0..65535 (0 = off)", &f->metrics_port))
            return PSC_EXIT_USAGE;
        break;
    case PSC_OPT_LOG_LEVEL:
        if (psc_log_parse_level(arg, &lv)) {
            fprintf(stderr, "%s: --log_level: expected debug|info|warn|error, got \"%s\"\n", f->prog, arg);
            return PSC_EXIT_USAGE;
        }
        psc_log_set_level(lv);
        break;
    case PSC_OPT_HELP: f->usage(stdout); return 0;
    case PSC_OPT_VERSION: printf("%s (psc) %s\n", f->prog, PSC_VERSION); return 0;
    default:
        if (psc_security_flag(opt, arg, &f->sec)) break;
        fprintf(stderr, "%s: unknown or incomplete option \"%s\" (see --help)\n", f->prog, text);
        return PSC_EXIT_USAGE;
    }
    return PSC_FLAG_NEXT;
}

int psc_daemon_flags_end(const psc_daemon_flags_t *f, int argc, char **argv, int next)
{
    if (next >= argc) return PSC_FLAG_NEXT;
    fprintf(stderr, "%s: unexpected argument \"%s\" (see --help)\n", f->prog, argv[next]);
    return PSC_EXIT_USAGE;
}

int psc_metrics_serve_for(psc_metrics_t *m, const char *bind, int port, char *err, size_t errlen)
{
    const char *end = bind[0] == '[' ? strchr(bind, ']') : strrchr(bind, ':');
    const char *start = bind[0] == '[' ? bind + 1 : bind;
    char host[256];
    size_t n = end ? (size_t)(end - start) : strlen(start);
    snprintf(host, sizeof host, "%.*s", (int)PSC_MIN(n, sizeof host - 1), start);
    if (psc_metrics_serve(m, host, port, err, errlen) < 0) return PSC_EIO;
    int v6 = strchr(host, ':') != NULL;
    PSC_INFO("metrics on %s%s%s:%d/metrics", v6 ? "[" : "", host, v6 ? "]" : "", port);
    return 0;
}
