/* ps_client_internal.h — what the two halves of the ps_client share:
 * ps_client.c (the data plane: the client's life cycle, the chunk and Batch
 * rounds of pull, push and push-pull, sync steps, the push-pull thread) and
 * ps_client_ctl.c (the chief's control plane: create/restore/initialize the
 * model, checkpoints, Status, wait-ready, WorkerDone, Shutdown). Not for other
 * modules: they use ps_client.h.
 */
#ifndef PSC_PS_CLIENT_INTERNAL_H
#define PSC_PS_CLIENT_INTERNAL_H

#include "ps_client.h"
#include "psc.pb-c.h"
#include "rpc.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* calls of one round in flight at a time, across every PS */
#define PS_CLIENT_IN_FLIGHT 16
#define PS_CLIENT_ASSIGN_BYTES ((size_t)4 << 20) /* rows of one AssignRows call */
/* room for a chunk call's request header (a Chunk without data, a PullRequest) */
#define PS_CLIENT_HDR_CAP 320

typedef struct piece_chunk {
    int piece;       /* index into placed */
    uint64_t offset; /* byte offset inside the piece */
    size_t len;
    size_t slab_byte; /* byte offset of this chunk inside the slab */
    uint8_t hdr[PS_CLIENT_HDR_CAP];
    size_t hdr_len;
} piece_chunk_t;

/* A Batch call to one PS: its pieces of at most batch_max bytes (each one chunk). */
typedef struct ps_batch {
    int ps;
    size_t *chunk; /* (n) indices into pc->chunks */
    size_t n;
    int step;         /* carries the round's Step (the PS holds global_step) */
    Psc__Chunk *push; /* (n) request items, refilled each round */
    Psc__Chunk **push_p;
    Psc__PullRequest *pull; /* (n) */
    Psc__PullRequest **pull_p;
    uint8_t *req; /* the packed request */
    size_t req_cap;
} ps_batch_t;

struct ps_client {
    int num_ps;
    psc_rpc_channel_t **ch;
    psc_placed_var_t *placed;
    int nplaced;
    int64_t *slab_offset; /* per placed piece: element offset in the slab */
    int step_ps;          /* -1 if the model has no global_step */
    int rank;
    int timeout_ms;
    piece_chunk_t *chunks; /* every chunk of every trainable piece */
    size_t nchunks;
    psc_rpc_op_t *ops; /* nchunks + nbatches + 1 */
    size_t *op_chunk;  /* (nchunks) per chunk op of a round: its chunk */
    /* Batch calls (ps_client_set_batch_bytes): async rounds and live pulls */
    size_t batch_max; /* pieces of at most this many bytes are batched; 0: none */
    ps_batch_t *batches;
    int nbatches;
    int *chunk_batch; /* (nchunks) the batch of chunk k, or -1 */
    /* sync replicas (ps_client_set_sync) */
    int sync;
    int sync_r, sync_n;
    double sync_timeout;
    int64_t replica_step; /* this replica's steps, sent with every Step (ps_client_set_progress) */
    /* newest global_step a reply carried: sent with pushes (learning-rate
     * schedules); atomic: a sparse round on another thread reads it */
    int64_t last_global_step;
    psc_rpc_channel_t **src_ch; /* ps_client_set_restore_sources: PS outside the cluster to restore from */
    int nsrc;
    ps_client_init_hook_fn init_hook; /* ps_client_set_init_hook */
    void *init_hook_arg;
    char legacy_job_id[17];             /* ps_client_set_legacy_job_id */
    ps_client_stage_hook_fn stage_hook; /* ps_client_set_stage_hook */
    void *stage_hook_arg;
    /* sparse tables (ps_client_set_tables) */
    psc_table_spec_t *tables;
    int ntables;
    int *table_part_ps; /* (ntables * num_ps) the PS of part k of table t */
    int64_t *table_rows_seen; /* (ntables * num_ps) rows of part k of table t in the last Status seen (-1: none) */
    uint64_t table_seed;
    const ps_sparse_op_t *round_ops; /* ps_client_round_sparse: the next async round carries them */
    int round_nops;
    /* bfloat16 pushes (ps_client_set_gradient_dtype) */
    int64_t nelems;   /* floats in the slab */
    int encoding;     /* PSC_ENC_* of pushed gradients */
    uint16_t *wire16; /* (nelems) the gradients as sent */
    float *resid;     /* (nelems) rounding errors still to send; NULL without error feedback */
    /* the push-pull thread (ps_client_push_pull_start/wait), started by the
     * first start, ended by ps_client_destroy */
    struct {
        pthread_mutex_t mu;
        pthread_cond_t cv;
        pthread_t thread;
        int running; /* the thread exists */
        enum { PCL_PP_IDLE, PCL_PP_INLINE, PCL_PP_ASKED, PCL_PP_DONE, PCL_PP_QUIT } state; /* INLINE: wait runs it */
        const float *grads; /* the call asked for (PCL_PP_ASKED) */
        float *params;
        int rc; /* its outcome (PCL_PP_DONE) */
        int64_t global_step;
        double secs;
        char err[512];
    } pp;
};

/* (ps_client_ops.c) The first failed op of a run, formatted into err ("WHAT on HOST:PORT
 * failed: CODE: message", its PSC_E* code from psc_rpc_code_errno); 0 if none
 * failed. */
int pcl_op_error(const psc_rpc_op_t *ops, size_t n, const char *what, char *err, size_t errlen);
/* Releases the reply buffers of n finished ops. */
void pcl_clear_ops(psc_rpc_op_t *ops, size_t n);

/* The TableSpecs of PS ps's table parts for its Create (ps_client_sparse.c):
 * ptrs[0..n) point into specs; free with pcl_table_specs_free. */
typedef struct pcl_table_pb {
    Psc__TableSpec *specs, **ptrs;
    Psc__OptimizerSpec *opts;
    Psc__LrSchedule *sched;
    size_t n;
} pcl_table_pb_t;
void pcl_table_specs(ps_client_t *pc, int ps, pcl_table_pb_t *out);
void pcl_table_specs_free(pcl_table_pb_t *t);

/* A sparse round (ps_client_sparse.c), alone or riding on a dense round:
 * begin checks and plans the ops (sy: the sync step, NULL async); merge puts
 * PS ps's first planned Batch into the dense round's request for ps (its
 * items stay valid until free); own gives the calls of the Batches not
 * merged; finish takes the replies (dense_of_ps[ps]: the dense call that
 * carried ps's merged items; NULL when none was merged) and fills the ops'
 * rows and stats. */
typedef struct sround {
    int64_t local_step, min_step;
    uint32_t count;
} sround_t;
typedef struct pcl_sparse pcl_sparse_t;
int pcl_sparse_begin(ps_client_t *pc, const ps_sparse_op_t *ops, int nops, const sround_t *sy, pcl_sparse_t **out,
                     char *err, size_t errlen);
void pcl_sparse_merge(ps_client_t *pc, pcl_sparse_t *r, int ps, Psc__BatchRequest *req);
psc_rpc_op_t *pcl_sparse_own(ps_client_t *pc, pcl_sparse_t *r, size_t *n);
int pcl_sparse_finish(ps_client_t *pc, pcl_sparse_t *r, const psc_rpc_op_t *const *dense_of_ps, char *err,
                      size_t errlen);
void pcl_sparse_free(pcl_sparse_t *r);

/* A restore onto another number of PS (ps_client_reshard.c): when the
 * newest committed checkpoint of job_id was written by another number of PS
 * and all its shards are on these PS, stages it re-split as checkpoint
 * *staged (prepared on every PS, not committed), at *step, written by
 * *from_ps PS. *staged = 0: nothing to re-split. PSC_ECONFIG when a shard is
 * on none of these PS or the model does not match. */
int pcl_reshard_stage(ps_client_t *pc, const char *job_id, uint64_t *staged, int64_t *step, int *from_ps, char *err,
                      size_t errlen);

#endif
