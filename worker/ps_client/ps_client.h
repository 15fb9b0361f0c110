/* ps_client.h — a worker's view of the parameter servers: one channel per PS,
 * the placement of every variable piece, and the whole-model operations built
 * from chunked calls (create/initialize, pull, push-pull, step, status).
 *
 * The model crosses this interface as the tower's parameter slab (tower.h): each
 * placed piece maps to a contiguous range of the slab (axis-0 parts are
 * contiguous in row-major order). Every operation issues all its chunk calls at
 * once (up to `in_flight` at a time across all PS) and waits for all of them.
 * The data plane (ps_client.c): pull, push-pull (blocking, or started on the
 * client's own thread and waited for later), sync steps. The control plane
 * (ps_client_ctl.c, the chief's): the model's creation, checkpoints, status,
 * WorkerDone, Shutdown.
 *
 * Not thread-safe: one thread uses a ps_client at a time, and not at all
 * between ps_client_push_pull_start and ps_client_push_pull_wait (except for
 * that wait, and ps_client_destroy). One exception: asynchronous sparse
 * rounds (ps_client_sparse) may run on a second thread beside the owner's
 * rounds (the rows' prefetch, worker/job/ctr_prefetch.h); they only read the
 * client's tables and channels, and the newest global_step (atomic), so the
 * owner must not change the tables meanwhile.
 */
#ifndef PSC_PS_CLIENT_H
#define PSC_PS_CLIENT_H

#include "job_spec.h"
#include "model_spec.h"
#include "placement.h"
#include "tf_config.h"
#include "wire.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ps_client ps_client_t;

typedef struct ps_status {
    int ready;
    char job_id[17];
    int has_global_step;
    int64_t global_step;
    uint32_t workers_done;
    unsigned char done[PSC_MAX_REPLICAS]; /* done[r]: replica r reported WorkerDone */
    uint64_t applied, rejected, pulls;
    int nvars;
    int sync;                  /* sync-replica mode */
    uint64_t stale;            /* sync: gradients dropped as stale */
    uint64_t timeout_applies;  /* sync: steps applied by the timeout rule */
    uint32_t replicas_present; /* sync: replicas heard from within the timeout */
    int checkpoints;           /* started with --checkpoint_dir */
    uint64_t incarnation;      /* random per PS process: a change means it restarted */
    int64_t replica_steps[PSC_MAX_REPLICAS]; /* (the global_step PS) steps each replica rank reported */
    int64_t restored_step;      /* (the global_step PS) the step of the checkpoint the model was restored from, 0: none */
    int64_t base_step;          /* the global_step the job started at (a warm start that carried it), else 0 */
    /* (the global_step PS) the replica steps the restored checkpoint recorded (at its cut), when it did */
    int has_restored_replica_steps;
    int64_t restored_replica_steps[PSC_MAX_REPLICAS];
    int ntables;                /* sparse table parts this PS holds (the first 64) */
    struct {
        char name[128];
        int part, num_parts, dim;
        int64_t rows;           /* the whole table's declared rows */
        uint64_t rows_touched;  /* rows that exist on this PS */
        uint64_t bytes;         /* bytes they take */
        uint64_t rows_pulled, rows_pushed;
        int64_t version;        /* sparse pushes applied */
        uint64_t rows_evicted;  /* rows removed by eviction (TTL, cap) */
        uint64_t rows_dropped;  /* gradient rows dropped: id not admitted yet */
        uint64_t waiting;       /* ids counted by the admission filter, not admitted (an estimate) */
    } tables[64];
} ps_status_t;

/* How ps_client_create_model found the model. */
typedef struct ps_model_origin {
    int joined;       /* every PS already held it ready: nothing done */
    int restored;     /* restored from checkpoint ckpt_id (at step) on every PS */
    int initialized;  /* initial values assigned (no checkpoint to restore) */
    uint64_t ckpt_id; /* restored: that checkpoint; initialized: the warm start's staged one (0: none) */
    int64_t step;
    int resharded_from; /* restored: the number of PS that wrote it, when not these (0: these) */
    /* initialized while other PS kept their trained shards (no checkpoint to
     * restore): the model is a mix. How many PS got initial values, and which
     * (bit i: ps i, for the first 64); 0 when every PS started fresh. */
    int reinitialized;
    uint64_t reinitialized_ps;
} ps_model_origin_t;

/* Checkpoints of a job that count: committed on every PS (and, verified, intact). */
typedef struct ps_ckpt_list {
    int enabled;        /* every PS has a --checkpoint_dir */
    int n;
    uint64_t ids[64];   /* ascending */
    int64_t steps[64];  /* the step each holds (as recorded by the global_step shard) */
    uint64_t max_id;    /* the largest id any PS holds, of any state: the next id is above it */
} ps_ckpt_list_t;

/* Builds the client for the cluster's ps tasks and a model. vars/nvars: the
 * model's variables (psc_model_variables); placed/nplaced: their placement.
 * rank: this replica's rank (sent with pushes). timeout_ms: deadline per call. */
ps_client_t *ps_client_create(const psc_cluster_t *cluster, const psc_var_desc_t *vars, int nvars,
                              const psc_placed_var_t *placed, int nplaced, int rank, int timeout_ms);
/* Lets a push-pull in flight finish (its outcome is dropped), ends the
 * push-pull thread, closes the channels. NULL ok. */
void ps_client_destroy(ps_client_t *pc);
/* Pieces of at most max_bytes (capped at PSC_BATCH_BYTES) that live on one PS
 * travel together in Batch calls (wire.h) in asynchronous rounds and live
 * pulls, with the global_step Step when that PS holds it; 0 turns batching
 * off (a call per chunk, as sync rounds always do). Default
 * PSC_BATCH_TENSOR_BYTES. Not during a round. */
void ps_client_set_batch_bytes(ps_client_t *pc, size_t max_bytes);
size_t ps_client_batch_bytes(const ps_client_t *pc);
/* Batch calls an asynchronous round makes (one per PS with small pieces, more
 * when they exceed PSC_BATCH_BYTES); *carries_step (if non-NULL): 1 when the
 * Step travels in one of them. */
int ps_client_batch_calls(const ps_client_t *pc, int *carries_step);
/* How pushes carry gradients: PSC_ENC_FLOAT32 (default) or PSC_ENC_BFLOAT16
 * (half the bytes; the PS widens them back). With error_feedback, each
 * element's rounding error is added to the next push's gradient (bf16.h).
 * Not during a round. */
void ps_client_set_gradient_dtype(ps_client_t *pc, int encoding, int error_feedback);
int ps_client_num_ps(const ps_client_t *pc);
/* This replica's step count, sent with every later Step: the global_step PS
 * keeps the largest per rank, so a restarted replica resumes where it was. */
void ps_client_set_progress(ps_client_t *pc, int64_t replica_step);

/* Chief: declares the variables on every PS (Create is idempotent). When every
 * PS already held this job's ready model: origin->joined, nothing else done.
 * Otherwise the newest checkpoint committed and intact on every PS is restored
 * on every PS (origin->restored; a damaged one is skipped with a log line for
 * the next older); when there is none, the values in init_params (the slab)
 * are assigned to the PS that are not ready and those are marked ready
 * (origin->initialized). A PS that already holds another job or other shapes
 * fails with its message in err. Used at start and to recover a restarted PS. */
int ps_client_create_model(ps_client_t *pc, const char *job_id, const psc_optim_config_t *opt,
                           const float *init_params, ps_model_origin_t *origin, char *err, size_t errlen);

/* Lists job_id's checkpoints on every PS (verify: each PS checks every tensor's
 * CRC32C). */
int ps_client_ckpt_list(ps_client_t *pc, const char *job_id, int verify, ps_ckpt_list_t *out, char *err,
                        size_t errlen);
/* Committed checkpoint `want` of job_id (0: its newest) that every PS holds:
 * *id and its *step. PSC_ENOTFOUND naming why: the PS keep no checkpoints,
 * the job has none, or want is not one of them (the kept ones named). */
int ps_client_ckpt_find(ps_client_t *pc, const char *job_id, uint64_t want, uint64_t *id, int64_t *step, char *err,
                        size_t errlen);
/* Takes checkpoint `id` (two phases): Save on every PS (each writes its shard
 * prepared; in sync mode only at step boundary `step`; in async mode one cut:
 * every PS is fenced first (Fence), all save at the global_step that then
 * holds still, whatever `step` says, and the fences are released (Unfence));
 * if all succeeded, Commit on every PS keeping the newest `keep`; if any failed,
 * the prepared ones are discarded and its error returned (PSC_EUNAVAILABLE when
 * a sync PS was not at the step boundary: try again at the next step).
 * *saved_step: the step the checkpoint holds. */
int ps_client_ckpt_save(ps_client_t *pc, const char *job_id, uint64_t id, int64_t step, int keep,
                        int64_t *saved_step, char *err, size_t errlen);
/* Commit (discard = 0) or discard (1) checkpoint id on every PS. */
int ps_client_ckpt_commit(ps_client_t *pc, uint64_t id, int keep, int discard, char *err, size_t errlen);
/* Restores checkpoint id on every PS (sync accumulators restart at step). */
int ps_client_ckpt_restore(ps_client_t *pc, const char *job_id, uint64_t id, int64_t step, char *err, size_t errlen);

/* Waits (polling Status) until every PS reports the model of job_id ready, at
 * most wait_secs. PSC_ETIMEOUT with a message otherwise. stop: optional flag
 * that aborts the wait (PSC_ECANCELLED) when it becomes non-zero. */
int ps_client_wait_ready(ps_client_t *pc, const char *job_id, double wait_secs, atomic_int *stop, char *err,
                         size_t errlen);

/* Pulls every variable into the slab; *global_step gets its value (if non-NULL). */
int ps_client_pull(ps_client_t *pc, float *params, int64_t *global_step, char *err, size_t errlen);
/* Pulls every variable as committed checkpoint ckpt holds it (CRC-checked on the PS). */
int ps_client_pull_checkpoint(ps_client_t *pc, uint64_t ckpt, float *params, char *err, size_t errlen);

/* Pushes the gradient slab and receives the updated values in params (fused
 * push-pull), and adds step_inc to global_step in the same round (new value in
 * *global_step). */
int ps_client_push_pull(ps_client_t *pc, const float *grads, float *params, int64_t step_inc, int64_t *global_step,
                        char *err, size_t errlen);

/* The same push-pull (step_inc 1) in flight while the caller goes on, as
 * ps-lite's KVWorker returns a timestamp to wait on: _start hands grads and
 * params to the ps_client's push-pull thread (started by the first call) and
 * returns at once; neither buffer may be touched, nor pc used, until _wait.
 * One call at a time: every _start is followed by one _wait. _wait blocks
 * until the call ends and returns its outcome as ps_client_push_pull does
 * (global_step: the new value, on success); *secs (if non-NULL) gets the
 * call's duration. When the thread cannot be started, the call fails with
 * PSC_ENOMEM ("cannot start the push-pull thread: ..."). background 0: the
 * caller waits at once, so _wait runs the call itself on the caller's thread
 * (no hand-off, no thread; the plain loop's default path). */
void ps_client_push_pull_start(ps_client_t *pc, const float *grads, float *params, int background);
int ps_client_push_pull_wait(ps_client_t *pc, int64_t *global_step, double *secs, char *err, size_t errlen);

/* Pushes the gradient slab only (no values back); adds step_inc to global_step. */
int ps_client_push(ps_client_t *pc, const float *grads, int64_t step_inc, int64_t *global_step, char *err,
                   size_t errlen);

/* Sync-replica mode: Create declares it to the PS (R, N, timeout). */
void ps_client_set_sync(ps_client_t *pc, int replicas_to_aggregate, int total_num_replicas, double timeout_secs);

/* One sync step: contributes grads (the SUM of `count` per-batch mean
 * gradients computed at local_step) to every variable and to global_step, and
 * receives the values after that step was applied (each PS answers once the
 * step is applied: when R gradients arrived, or by the timeout rule). *stale
 * gets the number of replies (chunks and the step) that said this replica's
 * contribution was stale (dropped); their values are the current ones.
 * *global_step gets the new global_step (the current one if stale). */
int ps_client_push_pull_sync(ps_client_t *pc, const float *grads, float *params, int64_t local_step, uint32_t count,
                             int64_t *global_step, int *stale, char *err, size_t errlen);

/* Tells the PS holding global_step that this replica finished. */
int ps_client_worker_done(ps_client_t *pc, uint32_t *workers_done, char *err, size_t errlen);

/* Status of ps i. */
int ps_client_status(ps_client_t *pc, int ps, ps_status_t *st, char *err, size_t errlen);
/* Status of every PS at once (one round trip): st and ok have num_ps entries;
 * ok[i] = 1 when st[i] holds ps i's answer. 0 when every PS answered, else
 * the first failure in err. */
int ps_client_status_all(ps_client_t *pc, ps_status_t *st, int *ok, char *err, size_t errlen);

/* Asks every PS to exit (in-cluster mode end). Errors are logged, not returned. */
void ps_client_shutdown_all(ps_client_t *pc, const char *reason);

/* Index of the PS that holds global_step. */
int ps_client_step_ps(const ps_client_t *pc);

/* ---- sparse embedding tables (ps_client_sparse.c; common/table.h) ---- */

/* Most ids one sparse op may carry per pull or push. The client splits them
 * over Batches of at most SPARSE_BATCH_MAX_IDS ids (the PS's limit per item,
 * SPARSE_MAX_IDS) and about 3 MiB of rows each way. */
#define SPARSE_CLIENT_MAX_IDS (1u << 24)
#define SPARSE_BATCH_MAX_IDS (1u << 18)

/* The job's tables (copied): part_ps[t * num_ps + k] is the PS that holds part
 * k of table t (placement.h); seed the job's (rows' initial values). Create
 * (ps_client_create_model) declares each PS's parts. Before create_model. */
void ps_client_set_tables(ps_client_t *pc, const psc_table_spec_t *tables, int n, const int *part_ps, uint64_t seed);
/* ps_client_set_tables for the job spec's tables, placed by
 * psc_place_tables after the model's first_turn pieces (psc_place's count). */
int ps_client_set_job_tables(ps_client_t *pc, const psc_job_spec_t *spec, int first_turn, char *err, size_t errlen);
/* Chief, warm start (before the model is ready): sets n rows of table t
 * (ids unique, in [0, rows); vals n x dim) on the PS that hold their parts,
 * skipping PS p where skip[p] (skip may be NULL), about 4 MiB a call, many
 * calls in flight (AssignRows). 0 or the first failure (err). */
int ps_client_table_assign(ps_client_t *pc, int table, const int64_t *ids, const float *vals, size_t n, const int *skip,
                           char *err, size_t errlen);
/* Called by ps_client_create_model when it initializes the model (no
 * checkpoint of the job to restore), before the initial values are assigned:
 * it may change init_params (what create_model was given) and write table
 * rows (ps_client_table_assign) on the PS not ready[p]. A failure fails
 * create_model with its code. NULL: none. */
typedef int (*ps_client_init_hook_fn)(void *arg, const int *ready, char *err, size_t errlen);
/* PS outside the cluster ("HOST:PORT,HOST:PORT", NULL or "": none) whose
 * checkpoints a restore onto another number of PS may read: the shards of a
 * job written by more PS than this cluster has, served by ps_servers started
 * on the departing PS's --checkpoint_dir (ps_client_reshard.c). 0, or
 * PSC_EINVAL naming a bad address. Before ps_client_create_model. */
int ps_client_set_restore_sources(ps_client_t *pc, const char *addrs, char *err, size_t errlen);
void ps_client_set_init_hook(ps_client_t *pc, ps_client_init_hook_fn fn, void *arg);
/* Called by ps_client_create_model after the initial values are assigned
 * when it initialized the model on every PS (none was ready): it may stage a
 * checkpoint of the job (ps_client_warm_stage) and say so in *ckpt (0: none)
 * and *step; create_model then commits and restores it, which makes the model
 * ready. NULL: none. */
typedef int (*ps_client_stage_hook_fn)(void *arg, uint64_t *ckpt, int64_t *step, char *err, size_t errlen);
void ps_client_set_stage_hook(ps_client_t *pc, ps_client_stage_hook_fn fn, void *arg);
/* The job id psc gave the job's spec before the id left out the placement
 * (psc_job_spec_t.legacy_job_id): when the job has no checkpoint of its own,
 * create_model restores the newest one of that id (on the shape that wrote
 * it), and the job's own checkpoints follow. "" or NULL: none. */
void ps_client_set_legacy_job_id(ps_client_t *pc, const char *legacy);

/* A warm start that carries optimizer slots or global_step (the job spec's
 * warm_start "slots" / "global_step"; worker/job/warm_start.c), run by the
 * stage hook: a checkpoint of job_id staged on every PS (ps_client_reshard.c)
 * from committed checkpoint `checkpoint` (0: the newest) of job from_job on
 * these PS, whatever number of PS wrote it: with slots, each dense variable
 * and table take_var / take_table accept (by name; a partitioned variable by
 * its whole name) that the source holds, with its optimizer slots (the same
 * names as this job's optimizer's, else PSC_ECONFIG naming both) and update
 * counts; with carry_step, global_step (the source's, or `step` when from_job
 * is NULL: a file's) and the job's base_step; everything else as the model
 * was created and assigned. */
typedef struct ps_warm_stage {
    const char *from_job; /* NULL: no checkpoint to read (carry_step with `step`) */
    uint64_t checkpoint;  /* in: the id (0: newest); out: the one read */
    int slots, carry_step;
    int64_t step;                  /* from_job NULL: the step carried */
    const psc_optim_config_t *opt; /* the job's optimizer (the dense variables'; a table's is its own) */
    int (*take_var)(void *arg, const char *name);
    int (*take_table)(void *arg, const char *name);
    void *arg;
    /* out */
    int vars, tables; /* taken with their slots */
    uint64_t rows;
    char absent[512]; /* taken but not in the source: ", "-separated */
    char tabsent[512];
} ps_warm_stage_t;
/* *staged: the checkpoint prepared (not committed) and *step its global_step. */
int ps_client_warm_stage(ps_client_t *pc, const char *job_id, ps_warm_stage_t *w, uint64_t *staged, int64_t *step,
                         char *err, size_t errlen);
/* dim of table t (0 if unknown). */
int ps_client_table_dim(const ps_client_t *pc, int table);

typedef struct ps_sparse_stats {
    size_t unique_push, unique_pull; /* ids sent after deduplication */
    size_t calls;                    /* Batch calls of the round's own (all ops; riding on a dense round's
                                        Batches: only those that did not fit in them) */
    size_t stale;                    /* sync: contributions of the round the PS dropped as stale (all ops) */
    uint64_t bytes_out, bytes_in;    /* the round's Batch request and reply messages (all ops; gRPC's
                                        5-byte message prefix and HTTP/2 framing not counted) */
} ps_sparse_stats_t;

/* One table's part of a sparse round. The push (if npush; in a sync round,
 * whenever push_grads is non-NULL, npush 0 included: an empty contribution)
 * goes first: ids may repeat, their rows are summed before sending
 * (IndexedSlices); then the pull
 * (if npull): pull_rows[k*dim..] gets the row of pull_ids[k] (repeats fine;
 * each unique id travels once). */
typedef struct ps_sparse_op {
    int table;
    const int64_t *push_ids;
    const float *push_grads; /* (npush * dim) */
    size_t npush;
    const int64_t *pull_ids;
    float *pull_rows; /* (npull * dim) */
    size_t npull;
    ps_sparse_stats_t *stats; /* optional */
    int read_only;    /* pulls create no row: one without a row reads its initial values (evaluation) */
    uint64_t checkpoint; /* > 0: pulls read committed checkpoint `checkpoint`'s rows (read_only implied) */
    int unique;          /* the caller's promise: push_ids hold no id twice, nor do pull_ids (no deduplication, fewer
                   copies; the ids and rows are used in place until the round ends) */
} ps_sparse_op_t;

/* One sparse round: every op's ids checked (table known, 0 <= id < rows, at
 * most SPARSE_CLIENT_MAX_IDS), deduplicated, grouped by the PS of their part,
 * and sent as one Batch per PS (all PS at once) carrying every op's pushes and
 * pulls there, with the newest global_step this client saw (learning-rate
 * schedules). For asynchronous training. */
int ps_client_sparse(ps_client_t *pc, const ps_sparse_op_t *ops, int nops, char *err, size_t errlen);
/* Sparse items with the step's dense calls: the next asynchronous round
 * (ps_client_push_pull, ps_client_push_pull_start/_wait, ps_client_push,
 * ps_client_pull) also carries these ops, each PS's first planned Batch of
 * them inside the round's Batch for that PS (with the dense pieces and the
 * step), the rest as calls of their own in the same run; the ops' pull_rows
 * and stats are filled when the round ends, and its error is the round's.
 * ops and their buffers must stay valid and untouched until then. One round
 * only; a sync round leaves them for the next asynchronous one. */
void ps_client_round_sparse(ps_client_t *pc, const ps_sparse_op_t *ops, int nops);

/* The same round in sync-replica mode (SyncReplicasOptimizer): each push is
 * this replica's contribution to step local_step (the sum of `count`
 * batches' mean gradients), sent to every part of its table, with no ids
 * where it has none; each pull first completes the parts' steps before
 * min_step (pass local_step + 1 after pushing step local_step's gradients,
 * so the rows include that step's update). Dropped stale contributions are
 * counted in the ops' stats. */
int ps_client_sparse_sync(ps_client_t *pc, const ps_sparse_op_t *ops, int nops, int64_t local_step, uint32_t count,
                          int64_t min_step, char *err, size_t errlen);

#endif
