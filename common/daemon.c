/* daemon.c — see daemon.h. */
#include "daemon.h"

#include "psc.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

static void fill(sigset_t *set)
{
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGUSR1);
}

void psc_signals_block(void)
{
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

void psc_signals_wake(void) { kill(getpid(), SIGUSR1); }

int psc_parse_int(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < lo || v > hi) return PSC_EINVAL;
    *out = v;
    return 0;
}
