/* service_internal.h — what the files of the psc.ParameterServer service
 * share. Not for other modules.
 *
 * Layers (each file calls only the ones below it; none calls back up):
 *   service.c         registration, life cycle, the data-path handlers
 *   service_ckpt.c    Save, Commit, Restore, ListCheckpoints, Release, Fence,
 *                     Unfence, checkpoint pulls
 *   service_batch.c   Batch
 *   service_fence.c   the checkpoint fence (admission, parking, replay)
 *   service_park.c    sync parking and the reaper thread
 *   service_chunk.c   Chunk request decoding and bfloat16 widening
 *   service_step.c    Step checks and the replicas' step counts
 *   service_sparse.c  sparse tables: Create's TableSpecs, Batch's sparse items, Status
 *   service_reply.c   failures (the one error path) and Chunk replies
 * The fence's replay and the reaper's tick call up through function pointers
 * the upper layer hands down, never by name.
 */
#ifndef PSC_PS_SERVICE_INTERNAL_H
#define PSC_PS_SERVICE_INTERNAL_H

#include "ckpt.h"
#include "ps_metrics.h"
#include "psc.h"
#include "psc.pb-c.h"
#include "rpc.h"
#include "service.h"
#include "store.h"
#include "wire.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* ---- the checkpoint fence (service_fence.c), its state ---- */

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
    int applying;  /* admitted requests still applying */
    int replaying; /* the reaper applies an unlinked parked entry */
    int saving;    /* a Save copies under the fence: the lease waits for it */
    uint64_t id;   /* the Fence's id (its checkpoint) */
    double since, expires, lease_ms;
    struct fenced *head, *tail; /* parked, arrival order */
    size_t n, bytes;
    uint32_t parked; /* parked since the fence was taken */
} svc_fence_t;

/* A checkpoint being staged (service_stage.c). */
typedef struct svc_stage {
    pthread_mutex_t lock;
    ckpt_writer_t *w; /* NULL: none */
    uint64_t id;
    char tensor[CKPT_MAX_NAME + 1]; /* the tensor being assembled */
    uint8_t *buf;          /* its bytes so far (NULL: none) */
    uint64_t total, filled;
    char **tables; /* the tables declared in it */
    int ntables;
} svc_stage_t;

struct ps_service {
    store_t *store;
    int task_index;
    int num_ps; /* the PS of the cluster (ps_service_set_num_ps; 0: not known) */
    void (*on_shutdown)(void *);
    void *shutdown_arg;
    pthread_mutex_t lock;
    unsigned char done[PSC_MAX_REPLICAS]; /* WorkerDone seen per replica rank */
    uint32_t workers_done;
    int64_t replica_steps[PSC_MAX_REPLICAS]; /* Step.replica_step per rank (max seen) */
    int64_t restored_step;                   /* the step of the checkpoint last restored (0: none since Release) */
    int64_t base_step; /* the global_step the job started at: a warm start that carried it (the restored
                        * checkpoint's description says; 0: none since Release) */
    uint32_t max_rank;                       /* 1 + the largest rank that reported steps */
    /* the replica steps the checkpoint last restored recorded at its cut (n 0: none since Release, or an
     * older checkpoint): Status hands them to a restarted job's replicas */
    int64_t restored_replica_steps[PSC_MAX_REPLICAS];
    uint32_t n_restored_replica_steps;
    /* sync replicas: replies waiting for a step to be applied (service_park.c) */
    pthread_mutex_t park_lock;
    struct svc_parked *parked; /* singly linked, newest first */
    int draining;              /* shutting down: nothing parks any more */
    pthread_t reaper;
    int reaper_running;
    pthread_mutex_t reaper_lock;
    pthread_cond_t reaper_cond;
    int reaper_stop;
    int reaper_kick; /* wake up now (a released fence has pushes to replay) */
    void (*reaper_tick)(ps_service_t *svc, double now);
    uint32_t last_present;
    /* checkpoints (--checkpoint_dir); NULL db: none */
    ckpt_db_t *ckpt;
    int debug_save_delay_ms;
    uint64_t incarnation;
    ps_metrics_t *metrics; /* ps_service_set_metrics; NULL: none */
    svc_fence_t fence;     /* async checkpoints: the push fence (service_fence.c) */
    svc_stage_t stage;     /* a restore onto another number of PS (service_stage.c) */
};

/* ---- failures and replies (service_reply.c) ---- */

/* The one way a handler fails a call: the gRPC status of rc (a PSC_E* code,
 * psc_rpc_status_of) and the message. svc_reject is for a request the service
 * itself refuses as bad input (malformed, out of range, too big): it is also
 * counted in the store's `rejected`. svc_fail is for everything else: a
 * failure the store already counted (store_reject), or one that is not the
 * request's fault (not ready, wrong job, shutting down, a checkpoint I/O
 * error). Any thread; completes the call. */
void svc_fail(ps_service_t *svc, psc_rpc_call_t *call, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void svc_reject(ps_service_t *svc, psc_rpc_call_t *call, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* svc_reject for a request that did not parse. */
void svc_fail_undecodable(ps_service_t *svc, psc_rpc_call_t *call, const char *what, size_t len);
/* A handler's first line: r = unpack(NULL, len, req) (protobuf-c's unpack of
 * message `name`), or the call answered INVALID_ARGUMENT and the handler
 * returns. Uses the handler's svc, call, req and len. */
#define SVC_DECODE(r, unpack, name)                     \
    do {                                                \
        if (!((r) = unpack(NULL, len, req))) {          \
            svc_fail_undecodable(svc, call, name, len); \
            return;                                     \
        }                                               \
    } while (0)
/* Room for a Chunk reply header in front of the payload (reply layout: [pad][header][payload]). */
size_t svc_reply_header_bound(const char *name);
/* Packs the Chunk header right before the len payload bytes at buf + bound
 * (bound = svc_reply_header_bound(name)); returns the offset in buf where the
 * message starts (it ends at bound + len). */
size_t svc_chunk_header_front(uint8_t *buf, size_t bound, const char *name, uint64_t offset, uint64_t total,
                              int64_t version, size_t len, int64_t step, int stale);
/* svc_chunk_header_front on a buffer from psc_rpc_reply_alloc, then sends the message. */
void svc_reply_chunk(psc_rpc_call_t *call, uint8_t *buf, size_t bound, const char *name, uint64_t offset,
                     uint64_t total, int64_t version, size_t len, int64_t step, int stale);

/* ---- sparse tables (service_sparse.c) ---- */

/* The TableSpecs of a Create as store configs (*out malloc'd, NULL when
 * none; a table without its own optimizer gets job_opt). 0 or PSC_EINVAL
 * naming the table. */
int svc_tables_from_pb(const Psc__CreateRequest *r, const psc_optim_config_t *job_opt, sparse_table_cfg_t **out,
                       char *err, size_t errlen);
/* A Batch's sparse items checked (as the store would); *pull_bytes: the
 * bytes of the sparse pulls' rows; *gen: the table generation the checks
 * held at (0: not one), for the apply to skip checking again. 0, or -1 with
 * a failure sent on call. */
int svc_sparse_check(ps_service_t *svc, psc_rpc_call_t *call, const Psc__BatchRequest *r, size_t *pull_bytes,
                     uint64_t *gen);
/* Applies the sparse pushes in order: async, versions[i] the part's version
 * after push i, but a push fused with its table's pull is left to
 * svc_sparse_pull (service_sparse.c: fused_pull); sync, a contribution each
 * (steps[i] the part's step after it, stale[i] whether it was dropped). 0 or
 * -1 (sent). `sync`: the PS's mode, read once for the batch. */
int svc_sparse_push(ps_service_t *svc, psc_rpc_call_t *call, const Psc__BatchRequest *r, uint64_t gen, int sync,
                    int64_t *versions, int64_t *steps, protobuf_c_boolean *stale);
/* Reads the sparse pulls into data (`bytes`: svc_sparse_check's pull_bytes),
 * filling rows[i] and ptrs[i] (the reply's items point into data); a pull
 * fused with its table's push applies that push first, in the same pass
 * (push_versions[k] its version). 0 or -1 (sent). */
int svc_sparse_pull(ps_service_t *svc, psc_rpc_call_t *call, const Psc__BatchRequest *r, uint64_t gen, int sync,
                    size_t bytes, int64_t *push_versions, Psc__SparseRows *rows, Psc__SparseRows **ptrs, uint8_t *data);
/* psc.ParameterServer/TableRows: a page of a table part's rows, id order. */
void svc_h_table_rows(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg);

/* ---- sync parking and the reaper (service_park.c) ---- */

/* A reply that needs a step not applied yet: a sync PushPull, a Pull with
 * min_step (PARK_CHUNK, name/offset its chunk) or a sync Step (PARK_STEP). */
enum svc_park_kind { SVC_PARK_CHUNK, SVC_PARK_STEP };

typedef struct svc_parked {
    struct svc_parked *next;
    psc_rpc_call_t *call;
    enum svc_park_kind kind;
    char name[PSC_NAME_MAX + 1]; /* a variable the store found, or "global_step" */
    uint64_t offset, total;
    size_t len; /* payload bytes of the reply; none are held while parked */
    int64_t min_step;
    double since;
    uint32_t worker; /* the sender's replica rank (sync push or step); UINT32_MAX: a pull */
} svc_parked_t;

/* Parks p (heap, filled by the caller, owned by the list from now on) until
 * its chunk or global_step reaches p->min_step; the handler then returns. */
void svc_park(ps_service_t *svc, svc_parked_t *p);
/* Answers every parked entry of (kind, name, offset) whose step has come; a
 * handler calls it after its contribution applied a step. */
void svc_park_wake(ps_service_t *svc, enum svc_park_kind kind, const char *name, uint64_t offset);
/* Fails every parked reply with rc and "ps_server N <msg>"; draining: park none from now on. */
void svc_fail_parked(ps_service_t *svc, int draining, int rc, const char *msg);
/* The reaper thread: every 50 ms, or at once when kicked, it runs tick(svc,
 * now) (the fence's replay, handed down by service.c), then the sync
 * timeouts of the parked replies. Start once (aborts when no thread can be
 * started: ps_service_create has no error path); stop joins it. */
int svc_reaper_start(ps_service_t *svc, void (*tick)(ps_service_t *svc, double now), char *err, size_t errlen);
void svc_reaper_stop(ps_service_t *svc);
void svc_reaper_kick(ps_service_t *svc);

/* ---- Step (service_step.c) ---- */

/* Records the sender's replica_step (its resumption point after a restart). */
void svc_step_note(ps_service_t *svc, const Psc__StepRequest *r);
/* A Step that is not a sync contribution (an asynchronous increment, or a
 * read with increment 0): 0, or PSC_EINVAL for a negative increment,
 * PSC_EUNSUPPORTED for an increment on a sync PS; not counted. */
int svc_step_check(ps_service_t *svc, const Psc__StepRequest *r, char *err, size_t errlen);

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

/* ---- the checkpoint fence (service_fence.c) ---- */

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
/* The reaper's tick: releases a fence whose lease ran out (WARN) and replays
 * the parked requests of a released fence, in arrival order. */
void svc_fence_tick(ps_service_t *svc, double now);
/* Fails every parked request with rc and "ps_server N <msg>" and opens the
 * fence (Release, Restore); closing: for good (the drain before a shutdown). */
void svc_fence_fail_all(ps_service_t *svc, int closing, int rc, const char *msg);
/* Fence id: holds the fence for lease_ms (0: 10 s; at most 60 s), taking
 * over another id's, then waits for the requests already admitted to finish
 * applying. 0, or PSC_EUNAVAILABLE when the service is shutting down. */
int svc_fence_hold(ps_service_t *svc, uint64_t id, uint32_t lease_ms);
/* Unfence id (0: any): releases a held fence unless a Save copies under it.
 * 1 when released, with how long it was held and how many requests parked. */
int svc_fence_release(ps_service_t *svc, uint64_t id, double *held_ms, uint32_t *parked);
/* Save under fence id: pin keeps the lease from running out during the copy
 * (0, or PSC_ESTALE when id is not held); unpin releases the fence, returning
 * how long it was held in ms (-1: it was not held any more). */
int svc_fence_pin(ps_service_t *svc, uint64_t id, char *err, size_t errlen);
double svc_fence_unpin(ps_service_t *svc, uint64_t id);

/* ---- handlers of service_ckpt.c and service_batch.c (registered by service.c) ---- */

/* A Pull from committed checkpoint r->checkpoint (service.c's Pull handler
 * hands it over). */
void svc_pull_checkpoint(ps_service_t *svc, psc_rpc_call_t *call, const Psc__PullRequest *r);
/* A SparsePull from committed checkpoint p->checkpoint of the job this PS
 * holds (service_ckpt.c): the rows it holds, the initial values of the ids it
 * does not, into dst (room for cap floats); *version = the checkpoint's step.
 * 0 or the code with err. */
int svc_sparse_pull_checkpoint(ps_service_t *svc, const Psc__SparsePull *p, float *dst, size_t cap, int *dim,
                               int64_t *version, char *err, size_t errlen);
/* Table `table` of committed checkpoint id (service_ckpt.c): its dim, and the
 * bytes of its row records (0: at least 8 + 4 * dim, the checkpoint's
 * description says the dim). A checkpoint that describes itself (SVC_CKPT_MODEL)
 * may be of any job; an older one only of the job this PS holds, whose live
 * table gives the shape. 0 or the code with err. */
int svc_checkpoint_table(ps_service_t *svc, uint64_t id, const char *table, int *dim, size_t *record, char *err,
                         size_t errlen);
/* The bytes of one row record of table in checkpoint id (its manifest):
 * 0, or PSC_ENOTFOUND when it holds no rows of it here. */
int svc_checkpoint_record_bytes(ps_service_t *svc, uint64_t id, const char *table, size_t *record, char *err,
                                size_t errlen);
/* A page of TableRows from committed checkpoint r->checkpoint (service_ckpt.c),
 * of the dim and record svc_checkpoint_table gave: ids (room for max) and
 * their values (max * dim floats), or with recs (record > 0) the whole records
 * (max * record bytes; vals unused). */
int svc_table_rows_checkpoint(ps_service_t *svc, const Psc__TableRowsRequest *r, int dim, size_t record, size_t max,
                              int64_t *ids, float *vals, uint8_t *recs, size_t *n, int *more, char *err,
                              size_t errlen);
/* Stage: a checkpoint of this shard written from the chief's pieces (service_stage.c). */
void svc_h_stage(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg);
void svc_stage_init(svc_stage_t *st);
void svc_stage_deinit(svc_stage_t *st);
/* Drops a staged checkpoint not prepared yet (Release: the job goes). */
void svc_stage_release(ps_service_t *svc);
/* The shard as a StatusReply's description part (job_id, ready,
 * has_global_step, global_step, vars, tables): what Status answers and what a
 * checkpoint keeps as its tensor SVC_CKPT_MODEL (Describe). m holds what rep
 * points to until svc_describe_free. */
typedef struct svc_desc_mem {
    char job_id[17];
    store_var_info_t *vars;
    Psc__VarStatus *vs, **vp;
    int64_t (*shapes)[PSC_MAX_RANK];
    void *tables;
} svc_desc_mem_t;
#define SVC_CKPT_MODEL "~model" /* never a variable's name (model_spec.h names) */
void svc_describe(ps_service_t *svc, Psc__StatusReply *rep, svc_desc_mem_t *m);
/* Adds the shard's description to a checkpoint being written, as tensor
 * SVC_CKPT_MODEL (a failure is remembered by the writer), with the job's
 * base_step and the n replica steps at the checkpoint's cut (n 0: none). */
void svc_add_description(ps_service_t *svc, ckpt_writer_t *w, int64_t base_step, const int64_t *replica_steps,
                         size_t nsteps);
void svc_describe_free(svc_desc_mem_t *m);
void svc_h_describe(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg);
void svc_h_assign_rows(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg);
void svc_h_save(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg);
void svc_h_commit(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg);
void svc_h_restore(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg);
void svc_h_list_checkpoints(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg);
void svc_h_release(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg);
void svc_h_fence(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg);
void svc_h_unfence(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg);
void svc_h_batch(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg);

#endif
