/* service_internal.h — what the parts of the psc.ParameterServer service
 * share (service.c: data path, sync parking, life cycle; service_ckpt.c:
 * checkpoints and Release; service_fence.c: the checkpoint fence). Not for
 * other modules. */
#ifndef PSC_PS_SERVICE_INTERNAL_H
#define PSC_PS_SERVICE_INTERNAL_H

#include "ckpt.h"
#include "ps_metrics.h"
#include "psc.pb-c.h"
#include "rpc.h"
#include "service.h"
#include "store.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define PS_MAX_WORKERS 4096

/* ---- the checkpoint fence (service_fence.c) ---- */

/* What a parked request runs when the fence is released: the handler's body,
 * which skips the admission (the fence) and answers the call. */
typedef void (*svc_apply_fn)(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg);
typedef void (*svc_apply_iov_fn)(psc_rpc_call_t *call, psc_iov_t *iov, int niov, size_t len, void *arg);

enum svc_fence_state {
    SVC_FENCE_OPEN,      /* requests apply on arrival */
    SVC_FENCE_HELD,      /* requests that change the model park */
    SVC_FENCE_RELEASING, /* the reaper replays the parked ones; new ones still park behind them */
    SVC_FENCE_CLOSED,    /* draining for shutdown: nothing parks any more */
};

typedef struct svc_fence {
    pthread_mutex_t lock;
    pthread_cond_t cond; /* applying fell to 0, or a replayed entry was answered */
    enum svc_fence_state state;
    int applying;        /* admitted requests still applying */
    int replaying;       /* the reaper applies an unlinked parked entry */
    int saving;          /* a Save copies under the fence: the lease waits for it */
    uint64_t id;         /* the Fence's id (its checkpoint) */
    double since, expires, lease_ms;
    struct fenced *head, *tail; /* parked, arrival order */
    size_t n, bytes;
    uint32_t parked;     /* parked since the fence was taken */
} svc_fence_t;

struct ps_service {
    store_t *store;
    int task_index;
    void (*on_shutdown)(void *);
    void *shutdown_arg;
    pthread_mutex_t lock;
    unsigned char done[PS_MAX_WORKERS]; /* WorkerDone seen per replica rank */
    uint32_t workers_done;
    int64_t replica_steps[PS_MAX_WORKERS]; /* Step.replica_step per rank (max seen) */
    int64_t restored_step; /* the step of the checkpoint last restored (0: none since Release) */
    uint32_t max_rank;                     /* 1 + the largest rank that reported steps */
    /* sync replicas: replies waiting for a step to be applied (see "parking") */
    pthread_mutex_t park_lock;
    struct parked *parked; /* singly linked, newest first */
    int draining;          /* shutting down: nothing parks any more */
    pthread_t reaper;
    int reaper_running;
    pthread_mutex_t reaper_lock;
    pthread_cond_t reaper_cond;
    int reaper_stop;
    int reaper_kick; /* wake up now (a released fence has pushes to replay) */
    uint32_t last_present;
    /* checkpoints (--checkpoint_dir); NULL db: none */
    ckpt_db_t *ckpt;
    int debug_save_delay_ms;
    uint64_t incarnation;
    ps_metrics_t *metrics; /* ps_service_set_metrics; NULL: none */
    svc_fence_t fence;     /* async checkpoints: the push fence (service_fence.c) */
};

/* The gRPC status of a PSC_E* code. */
int svc_status_of(int rc);
/* Fails a call whose request did not parse (counted as rejected). */
void svc_fail_undecodable(ps_service_t *svc, psc_rpc_call_t *call, const char *what, size_t len);
/* Fails every parked reply with code and "ps_server N <msg>"; draining: park none from now on. */
void svc_fail_parked(ps_service_t *svc, int draining, int code, const char *msg);
/* Room for a Chunk reply header in front of the payload (reply layout: [pad][header][payload]). */
size_t svc_reply_header_bound(const char *name);
/* Packs the Chunk header right before the payload at buf + bound and sends the reply. */
void svc_send_chunk_reply_sync(psc_rpc_call_t *call, uint8_t *buf, size_t bound, const char *name, uint64_t offset,
                               uint64_t total, int64_t version, size_t len, int64_t step, int stale);

/* ---- Chunk requests (service_chunk.c) ---- */

/* A decoded Chunk request. Its data points into the request (no copy) when
 * data is the last field, as psc senders write it; any other valid encoding is
 * unpacked by protobuf-c with a copy. */
typedef struct chunk_req {
    Psc__Chunk *c;
    int borrowed; /* c->data points into the request */
} chunk_req_t;
/* 0, or -1 when req does not parse. */
int svc_chunk_decode(const uint8_t *req, size_t len, chunk_req_t *out);
void svc_chunk_free(chunk_req_t *r);

/* A Chunk request as gRPC's slices hold it (an _iov handler's request): the
 * header decoded from the first bytes, the payload as the segments where it
 * arrived (seg/nseg), read in place. c->data.len is the payload's length,
 * c->data.data NULL unless the payload was gathered. A message psc senders do
 * not write (data not last, a header over 512 bytes) is gathered into one
 * buffer and decoded as svc_chunk_decode does. */
typedef struct chunk_in {
    chunk_req_t cr;
    psc_iov_t *seg;
    int nseg;
    psc_iov_t one;     /* the segment of a gathered payload */
    uint8_t *gathered; /* the message or payload, when it had to be joined */
} chunk_in_t;
/* 0, or -1 when the request does not parse (free `in` either way). The handler
 * may trim iov's entries; the bytes are gRPC's. */
int svc_chunk_in_decode(psc_iov_t *iov, int niov, size_t len, chunk_in_t *in);
/* The payload in one buffer (the sync paths take it so): a pointer into the
 * request when it is one segment, else a copy kept in in->gathered. */
const void *svc_chunk_in_data(chunk_in_t *in);
void svc_chunk_in_free(chunk_in_t *in);
/* A pushed chunk's encoding and data length (wire.h's PSC_ENC_*): 0, or
 * PSC_EINVAL with err naming the problem. A bfloat16 chunk's widened length is
 * c->data.len * 2, which the store then checks like any other. */
int svc_encoding_check(const Psc__Chunk *c, char *err, size_t errlen);
/* Checks the chunk's encoding and widens a bfloat16 payload to float32 (into a
 * per-thread buffer, valid until the handler returns, as one segment);
 * c->data.len then counts float32 bytes, as the store expects. 0, or -1 with
 * the failure sent on call. */
int svc_chunk_in_widen(ps_service_t *svc, psc_rpc_call_t *call, chunk_in_t *in);

/* A Step that is not a sync contribution (an asynchronous increment, or a read
 * with increment 0). check: refuses a negative increment, or an increment on a
 * sync PS. add: records the sender's replica_step, checks, adds; the new value
 * in *value. */
int svc_step_check(ps_service_t *svc, const Psc__StepRequest *r, char *err, size_t errlen);
int svc_step_add(ps_service_t *svc, const Psc__StepRequest *r, int64_t *value, char *err, size_t errlen);

/* The fence: admission of a request that changes the model (a gradient, an
 * assignment, a step increment or contribution). 1: go on (apply it, then
 * svc_fence_leave); 0: the request was parked (a copy of its bytes; fn runs it
 * when the fence is released and answers the call) or failed; return. */
int svc_fence_enter(ps_service_t *svc, psc_rpc_call_t *call, const uint8_t *req, size_t len, svc_apply_fn fn);
int svc_fence_enter_iov(ps_service_t *svc, psc_rpc_call_t *call, const psc_iov_t *iov, int niov, size_t len,
                        svc_apply_iov_fn fn);
void svc_fence_leave(ps_service_t *svc);
void svc_fence_init(svc_fence_t *f);
void svc_fence_deinit(svc_fence_t *f); /* nothing parked any more */
/* The reaper thread: releases a fence whose lease ran out (WARN) and replays
 * the parked requests of a released fence, in arrival order. */
void svc_fence_tick(ps_service_t *svc, double now);
/* Fails every parked request with code and "ps_server N <msg>" and opens the
 * fence (Release, Restore); closing: for good (the drain before a shutdown). */
void svc_fence_fail_all(ps_service_t *svc, int closing, int code, const char *msg);
/* Save under fence id: pin keeps the lease from running out during the copy
 * (0, or PSC_ESTALE when id is not held); unpin releases the fence, returning
 * how long it was held in ms (-1: it was not held any more). */
int svc_fence_pin(ps_service_t *svc, uint64_t id, char *err, size_t errlen);
double svc_fence_unpin(ps_service_t *svc, uint64_t id);
void svc_h_fence(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg);
void svc_h_unfence(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg);

/* service_batch.c: psc.ParameterServer/Batch */
void svc_h_batch(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg);

/* service_ckpt.c */
void svc_pull_checkpoint(ps_service_t *svc, psc_rpc_call_t *call, const Psc__PullRequest *r);
void svc_h_save(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg);
void svc_h_commit(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg);
void svc_h_restore(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg);
void svc_h_list_checkpoints(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg);
void svc_h_release(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg);

#endif
