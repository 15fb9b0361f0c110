/* control.c — see control.h. */
#include "control.h"

#include "log.h"
#include "psc.h"
#include "psc.pb-c.h"
#include "wire.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct waiting {
    psc_rpc_call_t *call;
    struct waiting *next;
} waiting_t;

struct control {
    int is_chief;
    char chief_addr[256];
    pthread_mutex_t lock;
    waiting_t *waiting; /* newest first */
    int npending;
    char closed[256];   /* non-empty: training is over, with this reason */
};

control_t *control_create(int is_chief, const char *chief_addr)
{
    control_t *c = psc_xcalloc(1, sizeof *c);
    c->is_chief = is_chief;
    snprintf(c->chief_addr, sizeof c->chief_addr, "%s", chief_addr ? chief_addr : "(unknown)");
    pthread_mutex_init(&c->lock, NULL);
    return c;
}

/* Takes every waiting call out of the list. */
static waiting_t *take_all(control_t *c)
{
    pthread_mutex_lock(&c->lock);
    waiting_t *all = c->waiting;
    c->waiting = NULL;
    c->npending = 0;
    pthread_mutex_unlock(&c->lock);
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

void control_destroy(control_t *c)
{
    if (!c) return;
    fail_all(take_all(c), PSC_RPC_UNAVAILABLE, "the worker is stopping");
    pthread_mutex_destroy(&c->lock);
    free(c);
}

static void h_checkpoint(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg)
{
    control_t *c = arg;
    Psc__CheckpointRequest *r = psc__checkpoint_request__unpack(NULL, len, req);
    if (!r) {
        psc_rpc_fail(call, PSC_RPC_INVALID_ARGUMENT, "CheckpointRequest does not parse (%zu bytes)", len);
        return;
    }
    PSC_INFO("checkpoint requested by %s%s%s", psc_rpc_call_peer(call), r->reason[0] ? ": " : "", r->reason);
    psc__checkpoint_request__free_unpacked(r, NULL);
    if (!c->is_chief) {
        psc_rpc_fail(call, PSC_RPC_FAILED_PRECONDITION, "this worker is not the chief; the chief is %s",
                     c->chief_addr);
        return;
    }
    pthread_mutex_lock(&c->lock);
    if (c->closed[0]) {
        pthread_mutex_unlock(&c->lock);
        psc_rpc_fail(call, PSC_RPC_FAILED_PRECONDITION, "%s", c->closed);
        return;
    }
    waiting_t *w = psc_xcalloc(1, sizeof *w);
    w->call = call;
    w->next = c->waiting;
    c->waiting = w;
    c->npending++;
    pthread_mutex_unlock(&c->lock);
}

void control_register(control_t *c, psc_rpc_server_t *server)
{
    psc_rpc_server_add_method(server, PSC_M_WORKER_CHECKPOINT, h_checkpoint, c);
}

int control_pending(control_t *c)
{
    if (!c) return 0;
    pthread_mutex_lock(&c->lock);
    int n = c->npending;
    pthread_mutex_unlock(&c->lock);
    return n;
}

void control_answer(control_t *c, int rc, uint64_t id, int64_t step, const char *msg)
{
    if (!c) return;
    waiting_t *all = take_all(c);
    if (rc) {
        fail_all(all, rc == PSC_ENOTREADY || rc == PSC_EUNSUPPORTED ? PSC_RPC_FAILED_PRECONDITION : PSC_RPC_UNAVAILABLE,
                 msg);
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

void control_close(control_t *c, const char *msg)
{
    if (!c) return;
    pthread_mutex_lock(&c->lock);
    snprintf(c->closed, sizeof c->closed, "%s", msg);
    pthread_mutex_unlock(&c->lock);
    fail_all(take_all(c), PSC_RPC_FAILED_PRECONDITION, msg);
}
