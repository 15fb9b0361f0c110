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
