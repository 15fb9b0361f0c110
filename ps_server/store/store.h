/* store.h — the PS's variable store: one shard of the model's variables, their
 * optimizer slots, versions and global_step.
 *
 * Life cycle: store_create_vars (the chief declares the shard) -> store_assign
 * (initial values, chunk by chunk) -> store_set_ready -> pulls and pushes.
 * Each variable has its own mutex, so pushes to different variables proceed in
 * parallel; a push chunk is validated completely (name, sizes, chunk alignment,
 * finite values) before anything is written, so a rejected request changes no
 * state. The unit of atomicity is one chunk (<= PSC_CHUNK_BYTES). Adam's step t
 * is counted per chunk of a variable: with whole-variable pushes it equals the
 * number of pushes applied to the variable.
 * global_step is an int64 counter held by the shard that has the is_step variable.
 *
 * Sync-replica mode (store_set_sync; TensorFlow's SyncReplicasOptimizer): a
 * push no longer updates the variable; it adds to the accumulator of its wire
 * chunk (sync.h), and the chunk is updated with the mean of the accumulated
 * gradients once per step, when enough replicas contributed or the step's
 * timeout expired. global_step has an accumulator too and advances by one per
 * applied step. Rules (store_push_sync, store_step_sync, store_sync_tick):
 *   - stale:   local_step < the chunk's step: dropped (counted in `stale`);
 *   - ahead:   local_step > the chunk's step: a pending step of the chunk is
 *              applied first (counted in timeout_applies), then the chunk skips
 *              to local_step;
 *   - apply:   when count >= needed(now), or count >= 1 and now - first_at >=
 *              timeout_secs (the timeout rule; by_timeout);
 *   - presence: replica r (< N) is present at t when it has not left
 *              (store_sync_worker_left) and t - last_seen[r] < timeout_secs;
 *              last_seen[r] is the latest `now` of r's contributions (stale ones
 *              too) or of a tick that found r's reply parked (store_sync_seen),
 *              and starts, for every replica, at the `now` of the first
 *              contribution (sync push or step, from any replica) after sync
 *              mode was turned on, so replicas still starting up are not absent
 *              before training began; until then everyone who has not left is
 *              present (a tick before it has nothing to apply);
 *   - needed(now) = sync_needed(R, N, present(now)) (clamp(ceil(R*p/N), 1, R)).
 * The mean is applied with the store's optimizer exactly like an async push of
 * that chunk (Adam's per-chunk t += 1, version += 1, `applied` += 1).
 * A sync push's `now` is the caller's monotonic clock (psc_now()); all calls
 * must use the same clock. A refused sync request changes nothing, presence
 * included. store_push and store_step_add keep working in sync mode and bypass
 * the accumulators: the caller routes requests by store_get_sync.
 *
 * Checkpoints (store_export, store_import). A store-wide push fence makes an
 * export one consistent cut: every function that changes tensor state (values,
 * slots, per-chunk t, versions, global_step, sync accumulators and presence)
 * runs entirely inside the fence's shared side, and an export holds its
 * exclusive side, so it sees every update either wholly applied or not at all,
 * on every variable at once. Updates wait while an export runs (it copies the
 * shard once: emit should only copy, e.g. ckpt_add); pulls and other reads do
 * not wait. An import fetches and checks the whole checkpoint first, with no
 * lock held, then writes it under the exclusive side: all or nothing.
 * Checkpoint tensors, per variable in creation order (TensorFlow's names):
 *   "<var>"                 value: float32 values in host byte order (psc
 *                           builds only for little-endian hosts), or for
 *                           global_step 8 bytes of little-endian int64;
 *   "<var>/<Slot>[_1]"      trainable variables, the optimizer's slots, float32:
 *                           Momentum "/Momentum"; Adagrad "/Adagrad";
 *                           Adam "/Adam" (m), "/Adam_1" (v);
 *                           RMSProp "/RMSProp" (ms, "rms"), "/RMSProp_1" (mom);
 *                           SGD none;
 *   "<var>/.t"              trainable variables: the per-wire-chunk update
 *                           counts t (Adam's bias correction), nchunks x int64 LE.
 *
 * All functions are thread-safe. Errors: PSC_E* and a message in err.
 */
#ifndef PSC_STORE_H
#define PSC_STORE_H

#include "job_spec.h"
#include "model_spec.h"
#include "psc.h"
#include "sparse_table.h"

#include <stddef.h>
#include <stdint.h>

typedef struct store store_t;

typedef struct store_var_spec {
    const char *name;
    int rank;
    int64_t shape[PSC_MAX_RANK];
    int is_step;
} store_var_spec_t;

typedef struct store_var_info {
    char name[PSC_NAME_MAX + 1];
    int rank;
    int64_t shape[PSC_MAX_RANK];
    uint64_t bytes;   /* value bytes (8 for global_step) */
    int64_t version;  /* number of applied updates/assignments */
    int is_step;
} store_var_info_t;

typedef struct store_stats {
    uint64_t applied;  /* push chunks applied (sync: chunk steps applied) */
    uint64_t rejected; /* requests refused for bad input */
    uint64_t pulls;    /* pull chunks served */
    uint64_t bytes_pushed, bytes_pulled; /* sync: bytes_pushed counts gradients accumulated (not stale ones) */
    uint64_t stale;           /* sync: contributions (chunks and steps) dropped as stale */
    uint64_t timeout_applies; /* sync: steps (chunks and global_step) applied by the timeout or lag rule */
    uint64_t sync_steps;      /* sync: global_step advances by applied steps */
} store_stats_t;

store_t *store_create(void);
void store_destroy(store_t *s); /* NULL ok */
/* Drops the job: every variable, its slots and sync state; the store is then
 * as created (counters excepted) and a new job can be created. Waits for the
 * requests inside the store to finish (every call that touches variables holds
 * the fence); later requests for the old job get PSC_ENOTFOUND/PSC_ENOTREADY. */
void store_reset(store_t *s);

/* Declares this shard's variables for job `job_id` with optimizer `opt`.
 * First call: creates them (values and slots zero/initial), *created = 1.
 * Same job id and identical names/shapes again: no change, *created = 0, returns 0.
 * Otherwise PSC_EEXISTS (another job) or PSC_EMISMATCH (a shape differs), naming
 * the variable; nothing changes. n may be 0 (a PS that holds nothing). */
int store_create_vars(store_t *s, const char *job_id, const psc_optim_config_t *opt, const store_var_spec_t *vars,
                      int n, int *created, char *err, size_t errlen);

/* Writes bytes [offset, offset+len) of a variable's value (initialization or
 * restore); the chunk must follow the wire chunking (wire.h) and total must equal
 * the variable's byte size. For global_step, 8 bytes of little-endian int64. */
int store_assign(store_t *s, const char *name, uint64_t offset, const void *data, size_t len, uint64_t total,
                 char *err, size_t errlen);

/* Marks the model ready for job_id (PSC_ENOTFOUND if no variables were created for it). */
int store_set_ready(store_t *s, const char *job_id, char *err, size_t errlen);
/* 1 when ready; copies the job id (may be "") into job_id[17] if non-NULL. */
int store_is_ready(store_t *s, char *job_id);

/* Copies bytes [offset, offset+len) of a variable into dst (a consistent snapshot
 * of that chunk) and its version. PSC_ENOTREADY before store_set_ready. */
int store_pull(store_t *s, const char *name, uint64_t offset, size_t len, void *dst, int64_t *version, char *err,
               size_t errlen);

/* The checks of store_pull and store_push alone: 0 when the same call would be
 * accepted now, else its code and message (counted as rejected). Nothing else
 * changes. A Batch checks every item first, so that a refused batch changes
 * nothing. */
int store_pull_check(store_t *s, const char *name, uint64_t offset, size_t len, char *err, size_t errlen);
int store_push_check(store_t *s, const char *name, uint64_t offset, const void *grad, size_t len, uint64_t total,
                     char *err, size_t errlen);

/* Applies a gradient chunk with the optimizer. total must equal the variable's
 * bytes and (offset, len) be a wire chunk; every value must be finite. If
 * updated is non-NULL the chunk's new values are copied there (push-pull).
 * PSC_ENOTFOUND, PSC_EMISMATCH, PSC_EINVAL (non-finite, misaligned), PSC_ENOTREADY. */
int store_push(store_t *s, const char *name, uint64_t offset, const void *grad, size_t len, uint64_t total,
               void *updated, int64_t *version, char *err, size_t errlen);
/* store_push with the gradient in ng segments that together hold len bytes,
 * split anywhere and at any alignment (a request as gRPC's slices hold it):
 * checked and applied straight from them, without a copy. */
int store_push_iov(store_t *s, const char *name, uint64_t offset, const psc_iov_t *g, int ng, size_t len,
                   uint64_t total, void *updated, int64_t *version, char *err, size_t errlen);

/* Adds inc (>= 0) to global_step and returns the new value in *value.
 * PSC_ENOTFOUND when this shard holds no global_step. */
int store_step_add(store_t *s, int64_t inc, int64_t *value, char *err, size_t errlen);
/* 1 and the value if this shard holds global_step, else 0. */
int store_step_get(store_t *s, int64_t *value);

/* A sender's global_step (Batch/Chunk global_step): raises the step the
 * learning-rate schedule is evaluated at, on a PS that does not hold
 * global_step (the one that does follows its own). Never lowers it. */
void store_note_step(store_t *s, int64_t step);

/* ---- sparse embedding tables (store_sparse.c; sparse_table.h, table.h) ---- */

/* Declares the job's sparse table parts on this shard (after
 * store_create_vars for the same job, before or after ready). First call:
 * creates them empty; the same configs again: no change (0); different ones:
 * PSC_EMISMATCH naming the table; job differs: PSC_EEXISTS. A table's name
 * must not be a variable's. Refusals count as rejected. n may be 0. */
/* Every check of a Create's tables that needs no store state: each config
 * (sparse_table_check_cfg), its optimizer's settings, names twice or equal to
 * one of vars. A Create runs it before it creates anything, so that a refused
 * Create leaves nothing behind. 0 or PSC_EINVAL naming the table. */
int store_check_tables(const store_var_spec_t *vars, int nvars, const sparse_table_cfg_t *tables, int n, char *err,
                       size_t errlen);
int store_create_tables(store_t *s, const char *job_id, const sparse_table_cfg_t *tables, int n, char *err,
                        size_t errlen);

/* The checks of a sparse pull (grads NULL) or push (grads of n*dim float32,
 * glen bytes) of n ids (8n bytes at any alignment) of `table`: ready, known
 * table, ids (range, part, at most SPARSE_MAX_IDS -> PSC_ENOMEM, unique for a
 * push), gradient size and finite values. 0 or the code with err naming the
 * table and the problem (counted as rejected). *dim (may be NULL) = its dim;
 * *gen (may be NULL) = the table declarations' generation the checks held at:
 * pass it to store_sparse_pull/_push as `checked` to skip checking again. */
int store_sparse_check(store_t *s, const char *table, const void *ids, size_t n, const void *grads, size_t glen,
                       int *dim, uint64_t *gen, char *err, size_t errlen);
/* Copies n rows into out (room for cap floats; n*dim more is PSC_EMISMATCH),
 * creating the missing ones (read_only: creating none, a missing row reads
 * its initial values, sparse_table_read); the part's version in *version and its dim in
 * *dim (both may be NULL). Checks as store_sparse_check (ids need not be
 * unique) unless `checked` is the generation still in force (a Batch checks
 * every item before it applies any; a Release and Create between the two
 * changes the generation, and the request is checked again). */
int store_sparse_pull(store_t *s, const char *table, const void *ids, size_t n, float *out, size_t cap,
                      int read_only, uint64_t checked, int *dim, int64_t *version, char *err, size_t errlen);
/* store_sparse_pull's checks, then the initial values of the n ids into out
 * (sparse_table_initial), for a checkpoint's reader to overwrite with the
 * rows the checkpoint holds; *record_bytes = a row record's size. */
int store_sparse_initial(store_t *s, const char *table, const void *ids, size_t n, float *out, size_t cap, int *dim,
                         size_t *record_bytes, char *err, size_t errlen);
/* Applies n unique ids' gradient rows with the table's optimizer at the
 * learning rate of its schedule (store_note_step). Checks as
 * store_sparse_check first, unless `checked` is as for store_sparse_pull: a
 * refused push changes nothing. */
int store_sparse_push(store_t *s, const char *table, const void *ids, size_t n, const void *grads, size_t glen,
                      uint64_t checked, int64_t *version, char *err, size_t errlen);
/* store_sparse_push of push_ids, then store_sparse_pull of pull_ids into out
 * (not read-only), in one pass over the table's shards (sparse_table_push_pull):
 * what a Batch with both for one table asks in async mode. `checked` covers
 * both requests (0: both are checked here). *version: the part's version after
 * the push; *dim its dim. */
int store_sparse_push_pull(store_t *s, const char *table, const void *push_ids, size_t npush, const void *grads,
                           size_t glen, const void *pull_ids, size_t npull, float *out, size_t cap, uint64_t checked,
                           int *dim, int64_t *version, char *err, size_t errlen);

/* Sets n unique ids' rows of `table` (8n bytes of ids, n*dim float32 values
 * in vlen bytes, any alignment) to the values, creating them, their optimizer
 * slots as a new row's (a warm start): only between Create and ready (PSC_ENOTREADY
 * otherwise). Checked whole first, as a push's ids and gradient (range, part,
 * unique, size, finite): a refused request changes nothing; after that only
 * PSC_ENOMEM can stop it midway. */
int store_sparse_assign(store_t *s, const char *table, const void *ids, size_t n, const void *values, size_t vlen,
                        char *err, size_t errlen);
/* A page of the rows of `table` that exist, ascending id: those with id >
 * after, at most max (ids: max, vals: max * dim floats); *n rows, *more = 1
 * when rows with larger ids exist. Each row is read under its shard lock.
 * Nothing is created. Checks: ready, known table. */
int store_table_rows(store_t *s, const char *table, int64_t after, size_t max, int64_t *ids, float *vals, size_t *n,
                     int *more, char *err, size_t errlen);

typedef struct store_table_info {
    sparse_table_cfg_t cfg;
    sparse_table_stats_t stats;
    /* rows pulled and pushed per second between the previous call at least
     * 1 s before (by anyone: Status, a metrics scrape) and the latest such
     * call; 0 until two calls 1 s apart */
    double rows_pulled_per_sec, rows_pushed_per_sec, rows_evicted_per_sec;
} store_table_info_t;
/* Snapshot of the table parts (array owned by the caller, free()). */
int store_list_tables(store_t *s, store_table_info_t **out, int *n);

/* Byte size of a variable (its wire `total`); PSC_ENOTFOUND if unknown. */
int store_var_bytes(store_t *s, const char *name, uint64_t *bytes);

/* Snapshot of the variables (array owned by the caller, free()) and counters. */
int store_list(store_t *s, store_var_info_t **out, int *n);
void store_get_stats(store_t *s, store_stats_t *st);
void store_count_rejected(store_t *s);

/* ---- sync-replica mode ---- */

typedef struct store_sync_cfg {
    int replicas_to_aggregate; /* R >= 1 */
    int total_num_replicas;    /* N >= 1 */
    double timeout_secs;       /* > 0 */
} store_sync_cfg_t;

/* Turns sync-replica mode on for the created job (call after store_create_vars,
 * before or after store_set_ready). Allocates one accumulator per wire chunk of
 * every trainable variable (sum buffers the size of the variable, allocated
 * once here; PSC_ENOMEM if that fails, nothing changed) and one for
 * global_step. The same config again: no-op (0). A different config:
 * PSC_EEXISTS naming what differs. PSC_ENOTFOUND if no job was created. Bad
 * values: PSC_EINVAL naming the field. Refusals count as rejected. Sync mode
 * cannot be turned off (it lasts as long as the job's variables). */
int store_set_sync(store_t *s, const store_sync_cfg_t *cfg, char *err, size_t errlen);
/* 1 and *cfg (cfg may be NULL) if sync mode is on, else 0. */
int store_get_sync(store_t *s, store_sync_cfg_t *cfg);

typedef struct store_sync_result {
    int stale;       /* dropped: local_step was older than the chunk's step; nothing changed but counters */
    int applied;     /* this call applied the step the contribution went into (the mean of the accumulated
                        gradients): the chunk's step is now past local_step */
    int by_timeout;  /* ... because the timeout expired, not because enough arrived */
    int64_t step;    /* the chunk's step after the call (for global_step: its value) */
    int64_t version; /* the variable's version after the call */
    int lag_applied; /* the chunk lagged (local_step > its step) and held a pending older step, which this
                        call applied before skipping ahead (counted in timeout_applies); replies parked on
                        that older step can be completed. Independent of `applied`. */
} store_sync_result_t;

/* Sync push of one wire chunk: `grad` (any alignment) is the SUM of `count`
 * (>= 1) per-batch mean gradients computed at `local_step` by replica `worker`
 * (< N, else PSC_EINVAL). Validates exactly like store_push (name, total, wire
 * chunk, finite values; a refused request changes nothing and counts as
 * rejected). Under the variable's lock: the worker is marked seen at `now`;
 * stale -> dropped (res->stale, `stale` += 1); ahead -> pending step applied
 * (res->lag_applied), skip to local_step; then the gradient is added and, if
 * due at `now` with needed(now), the mean is applied and the step advances
 * (res->applied, res->by_timeout). If `updated` is non-NULL and the call applied
 * a step OR was stale, the chunk's current values are copied there (len bytes;
 * counted as a pull). res may be NULL.
 * PSC_ENOTREADY before ready; PSC_EUNSUPPORTED when the store is not in sync
 * mode; PSC_ENOTFOUND, PSC_EMISMATCH, PSC_EINVAL as store_push. */
int store_push_sync(store_t *s, const char *name, uint64_t offset, const void *grad, size_t len, uint64_t total,
                    int64_t local_step, uint32_t count, uint32_t worker, double now, void *updated,
                    store_sync_result_t *res, char *err, size_t errlen);

/* Sync step contribution to global_step (the shard holding it): the same rules
 * with no data; when due, global_step += 1 (once per applied step, whatever the
 * count). res->step = global_step's value. The accumulator follows the value:
 * while it holds nothing, its step is raised to global_step's value (after a
 * restore by store_assign, older local steps are stale). Allowed before ready
 * (like store_step_add). PSC_ENOTFOUND when this shard holds no global_step;
 * PSC_EUNSUPPORTED when not in sync mode; PSC_EINVAL for worker >= N or count 0. */
int store_step_sync(store_t *s, int64_t local_step, uint32_t count, uint32_t worker, double now,
                    store_sync_result_t *res, char *err, size_t errlen);

/* The sync step of the chunk holding bytes [offset, offset+len) of `name`
 * (the range must lie within one wire chunk, as for store_pull; global_step:
 * its value); also copies those bytes into dst (dst may be NULL: nothing
 * copied) and the variable's version, in one lock hold. Works in async mode too
 * (step = number of applies of that chunk). step and version may be NULL. Not
 * counted as a pull. PSC_ENOTREADY before ready, PSC_ENOTFOUND, PSC_EINVAL. */
int store_chunk_read(store_t *s, const char *name, uint64_t offset, size_t len, void *dst, int64_t *step,
                     int64_t *version, char *err, size_t errlen);

/* Applies every accumulator that is due at `now` (timeout expired with >= 1
 * contribution, or enough contributions now that absent replicas lowered
 * `needed`). For each applied chunk calls fn(arg, name, offset, new_step, count,
 * by_timeout) with NO store lock held (collect, unlock, then call); name is the
 * variable's (valid until store_destroy), new_step the chunk's step after the
 * apply (global_step: its value), count the contributions averaged. fn may be
 * NULL and may call any store function. Returns the number applied. No-op (0)
 * in async mode. Call it periodically (e.g. every 50 ms) from one thread. */
int store_sync_tick(store_t *s, double now,
                    void (*fn)(void *arg, const char *name, uint64_t offset, int64_t step, uint32_t count,
                               int by_timeout),
                    void *arg);

/* Replica `worker` finished (WorkerDone): from now on it is not present, for
 * good. No-op in async mode or for worker >= N. */
void store_sync_worker_left(store_t *s, uint32_t worker);

/* Replica `worker` is alive at `now` without contributing: its reply is parked
 * waiting for its step (the service calls this every tick). Raises last_seen
 * once the presence clock has started; no-op in async mode or for worker >= N. */
void store_sync_seen(store_t *s, uint32_t worker, double now);

/* Replicas present at `now` (see presence above) and, in *needed (may be NULL),
 * the contributions needed per step. Before the first contribution every replica
 * that has not left counts as present. Async mode: 0 and *needed = 0. */
int store_sync_present(store_t *s, double now, uint32_t *needed);

/* ---- sparse tables in sync-replica mode ---- */

/* Sync-replica mode (TF's SparseConditionalAccumulator; store_sparse_sync.c):
 * a contribution of n unique ids' rows, the sum of `count` batches' mean
 * gradients computed at local_step by replica `worker`, to the table part's
 * step, with store_push_sync's rules (stale, ahead, due, presence); a due
 * step applies each id's summed row / the step's batches, once. res->step is
 * the part's step after the call. Checks as store_sparse_check first.
 * PSC_EUNSUPPORTED when the store is not in sync mode. */
int store_sparse_push_sync(store_t *s, const char *table, const void *ids, size_t n, const void *grads, size_t glen,
                           int64_t local_step, uint32_t count, uint32_t worker, double now, store_sync_result_t *res,
                           char *err, size_t errlen);
/* A sync pull: first completes the part's steps before min_step (a pending
 * one applied as by the timeout), then reads as store_sparse_pull; *step (may
 * be NULL) = the part's step. */
int store_sparse_pull_sync(store_t *s, const char *table, const void *ids, size_t n, int64_t min_step, float *out,
                           int64_t *step, char *err, size_t errlen);
/* Applies every table part's step that is due at now (the timeout rule, or
 * fewer replicas present); the number applied. No-op in async mode. */
int store_sparse_sync_tick(store_t *s, double now);

/* ---- checkpoints ---- */

/* Receives one tensor of a checkpoint: `name` and `data` (len bytes) are valid
 * only during the call (the callee copies what it keeps). Called with the push
 * fence held exclusively: it must not call a store function that updates
 * (assign, push, step, sync, tick: they would wait for the export, forever);
 * reads (pull, list, step_get, chunk_read) are fine. Returns 0 to go on, or a
 * nonzero code that stops the export. */
typedef int (*store_emit_fn)(void *arg, const char *name, const void *data, size_t len);

/* Exports the shard under the push fence (one consistent cut, see above): for
 * every variable in creation order emit(name, value bytes) (global_step: 8 bytes
 * of little-endian int64), then for a trainable variable its optimizer slots
 * ("<var>/Momentum", "<var>/Adagrad", "<var>/Adam" + "<var>/Adam_1",
 * "<var>/RMSProp" + "<var>/RMSProp_1"; only those the optimizer has) and
 * "<var>/.t" (nchunks x int64 LE). *step (may be NULL) = global_step's value in
 * that cut when this shard holds it, else -1. Updates wait until it returns.
 * PSC_ENOTREADY when the store is not ready (counted as rejected), PSC_EINVAL
 * for a NULL emit; emit's nonzero return stops the export and is returned (err
 * names the tensor). Any thread; not from inside emit.
 * sync_step >= 0 in sync mode: the cut must be the step boundary sync_step —
 * every chunk's accumulator at step sync_step (contributions pending for it are
 * fine: they are not part of the checkpoint) and global_step, if held, equal to
 * it — else PSC_ESTALE naming the first that is not, nothing emitted (not
 * counted as rejected: the caller tries again at its next step). */
int store_export(store_t *s, store_emit_fn emit, void *arg, int64_t sync_step, int64_t *step, char *err,
                 size_t errlen);

/* Supplies tensor `name` of a checkpoint: *data (NULL on entry) = a malloc'd
 * buffer of *len bytes, owned by the store from then on (it frees whatever is
 * left in *data, also after an error: leave it NULL then). Returns 0,
 * PSC_ENOTFOUND when the checkpoint has no such tensor, or another PSC_E* (err
 * filled) to abort the import. Called with no store lock held (it may read
 * from disk). */
typedef int (*store_fetch_fn)(void *arg, const char *name, void **data, size_t *len, char *err, size_t errlen);

/* Sparse tables in checkpoints (store_export_ex, store_import_ex). A
 * checkpoint holds, per table part, the rows changed since the previous
 * checkpoint this process committed (store_ckpt_committed), on top of that
 * checkpoint (its parent), or all of them (a full base, parent 0): the first
 * checkpoint, the first after a restore, and whenever the rows written as
 * deltas since the last base reach half of the base's rows or 8 deltas
 * chain up — so a restore, which reads the base and its deltas, reads about
 * as many rows as the table holds, at most 1.5 times. */
typedef struct store_rows_io {
    /* export: declares table `name` (record_len bytes a row), then its rows */
    int (*table)(void *arg, const char *name, uint32_t record_len);
    int (*row)(void *arg, const char *name, int64_t id, const void *rec, size_t len);
    /* import: calls put for every row of table `name` in the checkpoint
     * (PSC_ENOTFOUND when it has no such table) */
    int (*read)(void *arg, const char *name, int (*put)(void *put_arg, int64_t id, const void *rec, size_t len),
                void *put_arg, char *err, size_t errlen);
    void *arg;
    /* export, optional: called once the cut is taken and the store's push
     * fence let go, before the rows are copied (pushes run meanwhile): what
     * holds pushes outside the store for this cut may let them go */
    void (*cut)(void *cut_arg);
    void *cut_arg;
} store_rows_io_t;

/* store_export with the table parts: their rows go through rows->table and
 * rows->row in the same cut (the fence held), as checkpoint ckpt_id;
 * *parent (may be NULL) = the checkpoint it is a delta on, 0 for a base.
 * rows NULL: tables are left out (only for a store without tables). In sync
 * mode every table part's accumulator must be at sync_step too. */
int store_export_ex(store_t *s, store_emit_fn emit, void *arg, const store_rows_io_t *rows, uint64_t ckpt_id,
                    int64_t sync_step, int64_t *step, uint64_t *parent, char *err, size_t errlen);
/* store_export_ex of a model created and not yet ready (Stage's fill: the
 * values assigned so far and the slots as created), async, no step out. */
int store_export_created(store_t *s, store_emit_fn emit, void *arg, const store_rows_io_t *rows, uint64_t ckpt_id,
                         char *err, size_t errlen);
/* store_import with the table parts: each read into a fresh part (rows
 * checked: id in this part, size, t >= 0, finite) before anything changes,
 * then swapped in with the dense tensors; rows untouched since that
 * checkpoint are gone again. */
int store_import_ex(store_t *s, store_fetch_fn fetch, void *arg, const store_rows_io_t *rows, int64_t sync_step,
                    char *err, size_t errlen);
/* The bytes store_export would emit for tensor `name` of the variables the
 * store holds (a value, a slot, ".t", global_step): 0, or PSC_ENOTFOUND when
 * it emits no such tensor. Any thread. */
int store_ckpt_tensor_bytes(store_t *s, const char *name, uint64_t *bytes);
/* Checkpoint ckpt_id, exported by this store, is committed: the next
 * checkpoint's table rows are a delta on it. Another id: no-op. */
void store_ckpt_committed(store_t *s, uint64_t ckpt_id);

/* Restores the shard from a checkpoint, all or nothing. First, with no lock
 * held, fetches every tensor store_export would emit for the current variables
 * and checks it: a missing tensor or one of the wrong size -> PSC_EMISMATCH
 * naming it; a negative global_step or t -> PSC_ECORRUPT; a fetch error is
 * returned as is; in every case nothing changed. Then, under the push fence
 * (exclusive), writes values, slots and t, sets global_step's value (if held
 * here), version += 1 for each variable, and in sync mode sets every
 * accumulator to step `sync_step` with count 0 (global_step's to its restored
 * value) and resets presence as if sync mode had just been turned on (the clock
 * not started, no replica left: nobody counts as absent right after a restore);
 * then marks the store ready. The whole checkpoint is held in memory between
 * the two phases (a second copy of the shard). Requires variables created
 * (store_create_vars), ready or not: else PSC_ENOTFOUND. Restoring an older
 * checkpoint over newer values is allowed (that is recovery); t and the
 * accumulator steps may move backwards. sync_step < 0 or a NULL fetch:
 * PSC_EINVAL. Refusals (not fetch errors) count as rejected. Any thread. */
int store_import(store_t *s, store_fetch_fn fetch, void *arg, int64_t sync_step, char *err, size_t errlen);

#endif
