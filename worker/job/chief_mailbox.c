/* chief_mailbox.c — see chief_mailbox.h. A list of parked calls under one
 * mutex; calls are completed outside it (psc_rpc_fail/reply never wait, but
 * nothing is held while gRPC runs). */
#include "chief_mailbox.h"

#include "psc.h"
#include "psc.pb-c.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct waiting {
    psc_rpc_call_t *call;
    struct waiting *next;
} waiting_t;

struct chief_mailbox {
    pthread_mutex_t lock;
    waiting_t *waiting; /* newest first */
    int npending;
    char closed[256]; /* non-empty: refusing, with this reason */
};

chief_mailbox_t *chief_mailbox_create(void)
{
    chief_mailbox_t *q = psc_xcalloc(1, sizeof *q);
    /* no request outlives its job: closed until a job opens it (chief.c) */
    snprintf(q->closed, sizeof q->closed, "no job has run on this cluster yet");
    pthread_mutex_init(&q->lock, NULL);
    return q;
}

/* Takes every parked call out of the list. */
static waiting_t *take_all(chief_mailbox_t *q)
{
    pthread_mutex_lock(&q->lock);
    waiting_t *all = q->waiting;
    q->waiting = NULL;
    q->npending = 0;
    pthread_mutex_unlock(&q->lock);
    return all;
}

static void fail_all(waiting_t *w, int code, const char *msg)
{
    while (w) {
        waiting_t *next = w->next;
        psc_rpc_fail(w->call, code, "%s", msg);
        free(w);
        w = next;
    }
}

void chief_mailbox_destroy(chief_mailbox_t *q)
{
    if (!q) return;
    fail_all(take_all(q), PSC_RPC_UNAVAILABLE, "the worker is stopping");
    pthread_mutex_destroy(&q->lock);
    free(q);
}

void chief_mailbox_park(chief_mailbox_t *q, psc_rpc_call_t *call)
{
    pthread_mutex_lock(&q->lock);
    if (q->closed[0]) {
        char why[sizeof q->closed];
        snprintf(why, sizeof why, "%s", q->closed);
        pthread_mutex_unlock(&q->lock);
        psc_rpc_fail(call, PSC_RPC_FAILED_PRECONDITION, "%s", why);
        return;
    }
    waiting_t *w = psc_xcalloc(1, sizeof *w);
    w->call = call;
    w->next = q->waiting;
    q->waiting = w;
    q->npending++;
    pthread_mutex_unlock(&q->lock);
}

int chief_mailbox_pending(chief_mailbox_t *q)
{
    if (!q) return 0;
    pthread_mutex_lock(&q->lock);
    int n = q->npending;
    pthread_mutex_unlock(&q->lock);
    return n;
}

void chief_mailbox_answer(chief_mailbox_t *q, int rc, uint64_t id, int64_t step, const char *msg)
{
    if (!q) return;
    waiting_t *all = take_all(q);
    if (rc) {
        fail_all(all, psc_rpc_status_of(rc), msg); /* the PS's own code, relayed */
        return;
    }
    Psc__CheckpointReply rep = PSC__CHECKPOINT_REPLY__INIT;
    rep.id = id;
    rep.step = step;
    while (all) {
        waiting_t *next = all->next;
        uint8_t buf[32];
        psc_rpc_reply(all->call, buf, psc__checkpoint_reply__pack(&rep, buf));
        free(all);
        all = next;
    }
}

void chief_mailbox_open(chief_mailbox_t *q)
{
    if (!q) return;
    pthread_mutex_lock(&q->lock);
    q->closed[0] = '\0';
    pthread_mutex_unlock(&q->lock);
}

void chief_mailbox_close(chief_mailbox_t *q, const char *msg)
{
    if (!q) return;
    pthread_mutex_lock(&q->lock);
    snprintf(q->closed, sizeof q->closed, "%s", msg);
    pthread_mutex_unlock(&q->lock);
    fail_all(take_all(q), PSC_RPC_FAILED_PRECONDITION, msg);
}
