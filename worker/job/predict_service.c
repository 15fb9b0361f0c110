/* predict_service.c — see predict_service.h.
 *
 * State: a list of sessions under the service's lock. A session's `waiting`
 * is the parked call its thread answers next (at most one: the client asks
 * for a page only after it got the previous one); `ended` is set by the
 * thread as it leaves, after which only a handler or close joins it and frees
 * the session. The thread never holds the lock while it scores or replies.
 */
#include "predict_service.h"

#include "job_spec.h"
#include "log.h"
#include "predict.h"
#include "predict_out.h"
#include "psc.h"
#include "psc.pb-c.h"
#include "wire.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PREDICT_PAGE_BYTES ((size_t)4 << 20) /* at most this much of labels and probabilities a reply */

typedef struct session {
    struct predict_service *svc;
    uint64_t id;
    pthread_t thread;
    /* what the opening call asked, copied */
    char *file, *spec_json;
    uint64_t ckpt;
    int shard, num_shards, page_max;
    /* under svc->lock */
    psc_rpc_call_t *waiting;
    int close; /* the client dropped it */
    int ended; /* the thread has left (join, then free) */
    double last_call;
    struct session *next;
} session_t;

struct predict_service {
    const trainer_opts_t *base;
    runner_t *runner;
    pthread_mutex_t lock;
    pthread_cond_t wake; /* a call parked, a session closed, the service closing */
    session_t *sessions;
    int nsessions;
    uint64_t next_id;
    int closing;
};

predict_service_t *predict_service_create(const trainer_opts_t *base)
{
    predict_service_t *s = psc_xcalloc(1, sizeof *s);
    s->base = base;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->wake, NULL);
    /* ids need only be unique in this process, and unguessable enough not to hit another client's */
    s->next_id = ((uint64_t)time(NULL) << 20) ^ (uint64_t)(uintptr_t)s;
    return s;
}

void predict_service_set_runner(predict_service_t *s, runner_t *runner) { s->runner = runner; }

static void session_free(session_t *x)
{
    free(x->file);
    free(x->spec_json);
    free(x);
}

/* Joins and frees the sessions whose thread has left (lock held; the join is immediate). */
static void reap_locked(predict_service_t *s)
{
    for (session_t **pp = &s->sessions; *pp;) {
        session_t *x = *pp;
        if (!x->ended) {
            pp = &x->next;
            continue;
        }
        *pp = x->next;
        s->nsessions--;
        pthread_join(x->thread, NULL);
        session_free(x);
    }
}

/* The page as a PredictReply, sent to call. */
static void reply_page(psc_rpc_call_t *call, const session_t *x, const predictor_t *p, const predict_page_t *page,
                       int done)
{
    Psc__PredictReply rep = PSC__PREDICT_REPLY__INIT;
    rep.session = x->id;
    rep.job_id = (char *)predictor_job_id(p);
    rep.global_step = predictor_global_step(p);
    rep.sigmoid = predictor_sigmoid(p);
    rep.outputs = (uint32_t)predictor_outputs(p);
    rep.done = done;
    rep.n_labels = (size_t)page->n;
    rep.labels = page->labels;
    rep.n_probs = (size_t)page->n * (size_t)page->outputs;
    rep.probs = page->probs;
    size_t sz = psc__predict_reply__get_packed_size(&rep);
    psc__predict_reply__pack(&rep, psc_rpc_reply_alloc(call, sz));
    psc_rpc_reply_send(call);
}

/* Waits (lock held) for the next call of x: it, or NULL when the session is
 * over (closed, idle too long, the service closing). */
static psc_rpc_call_t *next_call_locked(predict_service_t *s, session_t *x)
{
    for (;;) {
        if (x->waiting || x->close || s->closing) break;
        double left = x->last_call + PREDICT_IDLE_SECS - psc_now();
        if (left <= 0) {
            PSC_WARN("predict session %llu: no call for %d s: closed", (unsigned long long)x->id, PREDICT_IDLE_SECS);
            break;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += (time_t)left + 1;
        pthread_cond_timedwait(&s->wake, &s->lock, &ts);
    }
    psc_rpc_call_t *call = x->close || s->closing ? NULL : x->waiting;
    if (call) x->waiting = NULL;
    return call;
}

/* The session's predictor, from the runner's job spec. */
static int session_open(session_t *x, predictor_t **p, char *err, size_t errlen)
{
    psc_job_spec_t spec;
    int rc = psc_job_spec_parse(x->spec_json, &spec, err, errlen);
    if (rc) return rc;
    rc = predictor_create(x->svc->base, &spec, x->file, x->ckpt, x->shard, x->num_shards, 0, p, err, errlen);
    if (rc == 0)
        PSC_INFO("predict session %llu: %s, shard %d of %d, job %s %s (global_step %lld)", (unsigned long long)x->id,
                 x->file, x->shard, x->num_shards, predictor_job_id(*p),
                 x->ckpt ? "committed checkpoint" : "live model", (long long)predictor_global_step(*p));
    return rc;
}

static void *session_main(void *arg)
{
    session_t *x = arg;
    predict_service_t *s = x->svc;
    char err[1024];
    predictor_t *p = NULL;
    predict_page_t page = {0};
    double t0 = psc_now();
    int rc = session_open(x, &p, err, sizeof err), done = 0;
    if (rc == 0) /* a page's reply stays well inside the message limit whatever the classes */
        x->page_max = PSC_MAX(1, PSC_MIN(x->page_max, (int)(PREDICT_PAGE_BYTES / (4 * (predictor_outputs(p) + 1)))));
    for (;;) {
        if (rc == 0) rc = predictor_next(p, x->page_max, &page, &done, err, sizeof err); /* scored ahead */
        pthread_mutex_lock(&s->lock);
        psc_rpc_call_t *call = next_call_locked(s, x);
        if (call) x->last_call = psc_now();
        pthread_mutex_unlock(&s->lock);
        if (!call) break;
        if (rc) {
            psc_rpc_fail(call, psc_rpc_status_of(rc), "%s", err);
            break;
        }
        reply_page(call, x, p, &page, done);
        if (done) break;
    }
    if (rc)
        PSC_WARN("predict session %llu (%s, shard %d of %d): %s", (unsigned long long)x->id, x->file, x->shard,
                 x->num_shards, err);
    else if (done)
        PSC_INFO("predict session %llu: %lld examples scored in %.2f s", (unsigned long long)x->id,
                 (long long)predictor_examples(p), psc_now() - t0);
    predictor_destroy(p);
    predict_page_free(&page);
    pthread_mutex_lock(&s->lock);
    if (x->waiting) /* parked while the session ended: the service is closing, or the client closed it */
        psc_rpc_fail(x->waiting, PSC_RPC_UNAVAILABLE, "predict session %llu closed", (unsigned long long)x->id);
    x->waiting = NULL;
    x->ended = 1;
    pthread_cond_broadcast(&s->wake);
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

static session_t *find_locked(predict_service_t *s, uint64_t id)
{
    for (session_t *x = s->sessions; x; x = x->next)
        if (x->id == id && !x->ended) return x;
    return NULL;
}

/* A new session for r, answering call with its first page. */
static void open_session(predict_service_t *s, psc_rpc_call_t *call, const Psc__PredictRequest *r)
{
    if (!r->file[0] || r->num_shards < 1 || r->shard >= r->num_shards || r->max_examples < 1 ||
        r->max_examples > PSC_PREDICT_MAX_PAGE) {
        psc_rpc_fail(call, PSC_RPC_INVALID_ARGUMENT,
                     "PredictRequest: file \"%.200s\", shard %u of %u, max_examples %u: expected a file, shard < "
                     "num_shards and 1..%d examples a page",
                     r->file, r->shard, r->num_shards, r->max_examples, PSC_PREDICT_MAX_PAGE);
        return;
    }
    char *json = runner_spec_json(s->runner);
    if (!json) {
        psc_rpc_fail(call, PSC_RPC_FAILED_PRECONDITION, "no job has run on this worker yet (psctl train first)");
        return;
    }
    session_t *x = psc_xcalloc(1, sizeof *x);
    x->svc = s;
    x->file = psc_xstrdup(r->file);
    x->spec_json = json;
    x->ckpt = r->checkpoint;
    x->shard = (int)r->shard;
    x->num_shards = (int)r->num_shards;
    x->page_max = (int)r->max_examples;
    x->waiting = call;
    x->last_call = psc_now();
    pthread_mutex_lock(&s->lock);
    reap_locked(s);
    const char *refused = s->closing                             ? "the worker is stopping"
                          : s->nsessions >= PREDICT_MAX_SESSIONS ? "too many predict sessions at once"
                                                                 : NULL;
    int code = s->closing ? PSC_RPC_UNAVAILABLE : PSC_RPC_RESOURCE_EXHAUSTED;
    char err[256];
    if (!refused) {
        x->id = ++s->next_id;
        if (psc_thread_start(&x->thread, session_main, x, "predict", err, sizeof err) == 0) {
            x->next = s->sessions;
            s->sessions = x;
            s->nsessions++;
            pthread_mutex_unlock(&s->lock);
            return; /* the session answers call */
        }
        refused = err;
    }
    pthread_mutex_unlock(&s->lock);
    psc_rpc_fail(call, code, "predict: %s (sessions at most %d)", refused, PREDICT_MAX_SESSIONS);
    session_free(x);
}

static void h_predict(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg)
{
    predict_service_t *s = arg;
    Psc__PredictRequest *r = psc__predict_request__unpack(NULL, len, req);
    if (!r) {
        psc_rpc_fail(call, PSC_RPC_INVALID_ARGUMENT, "PredictRequest does not parse (%zu bytes)", len);
        return;
    }
    if (!s->runner) {
        psc_rpc_fail(call, PSC_RPC_FAILED_PRECONDITION,
                     "this worker runs the job given by --job_spec (in-cluster mode): score files with worker "
                     "--predict, or start the workers without --job_spec");
    } else if (r->session == 0) {
        open_session(s, call, r);
    } else {
        pthread_mutex_lock(&s->lock);
        session_t *x = find_locked(s, r->session);
        int busy = x && x->waiting;
        if (x && !busy) {
            if (r->close)
                x->close = 1;
            else
                x->waiting = call;
            pthread_cond_broadcast(&s->wake);
        }
        pthread_mutex_unlock(&s->lock);
        if (!x)
            psc_rpc_fail(call, PSC_RPC_NOT_FOUND,
                         "predict session %llu: unknown or closed (a session ends after its last page, on an error, "
                         "or after %d s without a call)",
                         (unsigned long long)r->session, PREDICT_IDLE_SECS);
        else if (busy)
            psc_rpc_fail(call, PSC_RPC_FAILED_PRECONDITION, "predict session %llu: a call is already waiting",
                         (unsigned long long)r->session);
        else if (r->close) {
            Psc__PredictReply rep = PSC__PREDICT_REPLY__INIT;
            rep.session = r->session;
            rep.done = 1;
            uint8_t buf[32];
            psc_rpc_reply(call, buf, psc__predict_reply__pack(&rep, buf));
        } /* else the session answers it */
    }
    psc__predict_request__free_unpacked(r, NULL);
}

void predict_service_register(predict_service_t *s, psc_rpc_server_t *server)
{
    psc_rpc_server_add_method(server, PSC_M_WORKER_PREDICT, h_predict, s);
}

void predict_service_close(predict_service_t *s)
{
    if (!s) return;
    pthread_mutex_lock(&s->lock);
    s->closing = 1;
    pthread_cond_broadcast(&s->wake);
    while (s->sessions) {
        reap_locked(s);
        if (s->sessions) pthread_cond_wait(&s->wake, &s->lock);
    }
    pthread_mutex_unlock(&s->lock);
}

void predict_service_destroy(predict_service_t *s)
{
    if (!s) return;
    predict_service_close(s);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->wake);
    free(s);
}
