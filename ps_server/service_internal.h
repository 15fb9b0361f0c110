/* service_internal.h — what the parts of the psc.ParameterServer service
 * share (service.c: data path, sync parking, life cycle; service_ckpt.c:
 * checkpoints and Release). Not for other modules. */
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

struct ps_service {
    store_t *store;
    int task_index;
    void (*on_shutdown)(void *);
    void *shutdown_arg;
    pthread_mutex_t lock;
    unsigned char done[PS_MAX_WORKERS]; /* WorkerDone seen per replica rank */
    uint32_t workers_done;
    int64_t replica_steps[PS_MAX_WORKERS]; /* Step.replica_step per rank (max seen) */
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
    uint32_t last_present;
    /* checkpoints (--checkpoint_dir); NULL db: none */
    ckpt_db_t *ckpt;
    int debug_save_delay_ms;
    uint64_t incarnation;
    ps_metrics_t *metrics; /* ps_service_set_metrics; NULL: none */
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

/* A pushed chunk's encoding and data length (wire.h's PSC_ENC_*): 0, or
 * PSC_EINVAL with err naming the problem. A bfloat16 chunk's widened length is
 * c->data.len * 2, which the store then checks like any other. */
int svc_encoding_check(const Psc__Chunk *c, char *err, size_t errlen);

/* A Step that is not a sync contribution (an asynchronous increment, or a read
 * with increment 0). check: refuses a negative increment, or an increment on a
 * sync PS. add: records the sender's replica_step, checks, adds; the new value
 * in *value. */
int svc_step_check(ps_service_t *svc, const Psc__StepRequest *r, char *err, size_t errlen);
int svc_step_add(ps_service_t *svc, const Psc__StepRequest *r, int64_t *value, char *err, size_t errlen);

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
