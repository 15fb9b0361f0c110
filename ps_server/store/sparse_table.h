/* sparse_table.h — one PS's part of a sparse embedding table (common/table.h):
 * rows that exist once touched, keyed by global id, each with its optimizer
 * slots, updated row by row.
 *
 * Storage: the rows are spread over SPARSE_TABLE_SHARDS shards by a hash of the
 * id; each shard has a mutex (the "row block" lock: pushes and pulls of rows of
 * the same shard are serialized, others run in parallel), an open-addressing
 * hash index id -> slot, and slabs of fixed-size records that never move (the
 * index grows by rehashing; a record is never copied while in use). Memory
 * grows with the rows touched, never with the declared size.
 *
 * A row's record (also its checkpoint and export form, little-endian):
 *   int64 t                   updates applied to the row (LazyAdam's step)
 *   float value[dim]
 *   float slot0[dim], slot1[dim]   as many as the optimizer has (optim.h):
 *                             Adagrad accumulator; Adam m, v; FTRL accum, linear;
 *                             Momentum accumulation; RMSProp ms, mom
 * so record bytes = 8 + 4 * dim * (1 + slots).
 *
 * Sparse updates (TensorFlow's sparse apply kernels, training_ops.cc), each row
 * of the push updated with its gradient row g and the learning rate lr of the
 * step (the caller evaluates the schedule):
 *   SGD       w -= lr*g
 *   Momentum  a = m*a + g; w -= lr*a (nesterov as dense)
 *   Adagrad   acc += g*g; w -= lr*g/sqrt(acc)
 *   Adam      lazily (tfa LazyAdam): t += 1 for the row only; m, v and w of the
 *             row updated with the dense formulas at the row's own t; rows not
 *             in the push keep m and v (no decay). (tfa's LazyAdam corrects
 *             the bias with the optimizer's global step; here it is the row's t.)
 *   RMSProp   the dense formulas on the row
 *   FTRL      TF's FtrlOptimizer (optim.h): accum, linear per row
 * Untouched rows never change.
 *
 * Checkpoint marks: the table counts modifications in epochs. Every row
 * created or updated records the current epoch. A checkpoint's cut
 * (sparse_table_cut(since)) closes the epoch and returns its mark, the value
 * to pass as `since` next time (once that checkpoint is committed); the rows
 * whose epoch is > since as of the cut are then copied shard by shard
 * (sparse_table_cut_copy) while pulls and pushes go on: a thread that is about
 * to change or remove a row of the cut in a shard not copied yet keeps the
 * row's record for the copy first (copy-on-write per row), so the copy is the
 * table at the cut, and a row changed after the cut has a later epoch (it is
 * in the next delta). since = 0 copies every row (a full base).
 * sparse_table_export does the cut and the copy in one call.
 *
 * Thread-safety: every function may be called from any thread, except that
 * sparse_table_cut, sparse_table_export and import-side calls on a table
 * object (sparse_table_put into a fresh table) must not run concurrently with
 * pulls or pushes on the same object (the store's push fence guarantees it for
 * the cut; import fills a fresh table). sparse_table_cut_copy may.
 */
#ifndef PSC_SPARSE_TABLE_H
#define PSC_SPARSE_TABLE_H

#include "job_spec.h"
#include "table.h"

#include <stddef.h>
#include <stdint.h>

#define SPARSE_TABLE_SHARDS 256
/* Most ids one sparse pull or push may carry (RESOURCE_EXHAUSTED above). */
#define SPARSE_MAX_IDS (1u << 18)

typedef struct sparse_table sparse_table_t;

typedef struct sparse_table_cfg {
    char name[128];        /* the table's name ("user_emb"), without part suffix */
    int64_t rows;          /* the whole table's declared rows, 1..PSC_TABLE_MAX_ROWS */
    int nparts, part;      /* this PS holds part `part` of `nparts` */
    enum psc_partition partition;
    int dim;               /* 1..PSC_TABLE_MAX_DIM */
    psc_initializer_t init;
    uint64_t seed;         /* the job's seed */
    psc_optim_config_t opt; /* the table's optimizer (its learning_rate is the base; the caller passes lr) */
    /* A row's life (sparse_life.c; all 0: rows live forever, every id gets one). */
    int64_t ttl_steps;     /* evict a row not updated for more than this many global steps (0: off) */
    double ttl_secs;       /* ... or for more than this many seconds (0: off) */
    int64_t max_rows;      /* at most this many rows in this part (0: no cap); the least recently updated go */
    uint32_t min_count;    /* admission: an id gets a row at its min_count-th push (0, 1: at its first) */
    uint64_t filter_bytes; /* admission: the count-min sketch's bytes (0: SPARSE_FILTER_BYTES) */
} sparse_table_cfg_t;

typedef struct sparse_table_stats {
    uint64_t rows;          /* rows that exist (touched) */
    uint64_t bytes;         /* bytes allocated: record blocks, index arrays, block lists, table and shard
                               structs (sparse_table.c: at most 2x the rows' records plus ~4.5 MiB) */
    uint64_t rows_pulled;   /* rows served by pulls */
    uint64_t rows_pushed;   /* rows updated by pushes */
    uint64_t version;       /* pushes applied */
    uint64_t rows_evicted;  /* rows removed by the TTL or the cap (each counted once) */
    uint64_t rows_dropped;  /* gradient rows dropped: their id was not admitted yet */
    uint64_t waiting;       /* ids counted by the admission filter and not admitted (an estimate) */
    uint64_t filter_bytes;  /* the admission filter's memory (also in bytes) */
    uint64_t pause_max_ns;  /* the longest a shard was held by one eviction pass */
} sparse_table_stats_t;

/* Admission filter bytes when cfg.filter_bytes is 0, and the bounds of a given one. */
#define SPARSE_FILTER_BYTES (4u << 20)
#define SPARSE_FILTER_MIN (64u << 10)
#define SPARSE_FILTER_MAX (1ull << 30)
/* A capped part holds at least this many rows (each of its 256 shards one). */
#define SPARSE_MIN_CAP 256
/* Tombstones kept per part between checkpoints (16 bytes each); beyond them the
 * next checkpoint is a full base instead of a delta. */
#define SPARSE_DEAD_MAX (1u << 20)

/* Validates cfg (PSC_EINVAL naming the field) and creates an empty part. */
int sparse_table_create(const sparse_table_cfg_t *cfg, sparse_table_t **out, char *err, size_t errlen);
/* sparse_table_create's checks of cfg alone (rows, part, partition, dim,
 * initializer, optimizer kind): 0 or PSC_EINVAL naming the field. */
int sparse_table_check_cfg(const sparse_table_cfg_t *cfg, char *err, size_t errlen);
void sparse_table_destroy(sparse_table_t *t); /* NULL ok */
const sparse_table_cfg_t *sparse_table_config(const sparse_table_t *t);
/* Bytes of one row record: 8 + 4 * dim * (1 + slots). */
size_t sparse_table_record_bytes(const sparse_table_t *t);

/* Checks n ids (little-endian int64 at any alignment, as received): n <=
 * SPARSE_MAX_IDS (else PSC_ENOMEM, which the wire reports as
 * RESOURCE_EXHAUSTED), every id in [0, rows) and in this part (PSC_EINVAL
 * naming the first bad id and why), and with `unique` no id twice (PSC_EINVAL
 * naming it; PSC_ENOMEM if the check's set, 16n bytes, cannot be allocated).
 * Changes nothing. */
int sparse_table_check_ids(const sparse_table_t *t, const void *ids, size_t n, int unique, char *err, size_t errlen);
/* Checks n*dim little-endian float32 gradients (any alignment): every value
 * finite (PSC_EINVAL naming the id and element). */
int sparse_table_check_grads(const sparse_table_t *t, const void *ids, const void *grads, size_t n, char *err,
                             size_t errlen);

/* Copies the rows of n checked ids into out (n*dim floats), creating missing
 * rows with their initial values. PSC_ENOMEM (nothing half done: the rows
 * created so far stay, with correct values) when memory runs out. */
int sparse_table_pull(sparse_table_t *t, const void *ids, size_t n, float *out);
/* As sparse_table_pull, but creates no row: an id without one reads the
 * values it would be created with (evaluation: ids seen only in test data
 * grow neither the table nor its checkpoints). */
int sparse_table_read(sparse_table_t *t, const void *ids, size_t n, float *out);
/* The values ids would be created with (psc_table_row_init), whatever rows
 * exist: a checkpoint's reader fills in the ids it does not hold. */
void sparse_table_initial(const sparse_table_t *t, const void *ids, size_t n, float *out);
/* Applies n checked, unique ids' gradient rows (n*dim float32 LE, any
 * alignment) with learning rate lr, creating missing rows first. If out is
 * non-NULL the updated rows are copied there (push-pull). version += 1.
 * PSC_ENOMEM as for pull: then some rows may be updated and others not (each
 * row whole), and version is unchanged. */
int sparse_table_push(sparse_table_t *t, const void *ids, size_t n, const void *grads, double lr, float *out);
/* sparse_table_push of push_ids (no rows out), then sparse_table_pull of
 * pull_ids into out, in one pass over the shards: each shard is locked once
 * for both, and a row in both is read right after its update. Every pulled
 * row holds this push as sparse_table_pull after sparse_table_push would
 * (the shard of a row is locked for its push and pull alike). PSC_ENOMEM as
 * for either; a failed call may have applied part of the push. */
int sparse_table_push_pull(sparse_table_t *t, const void *push_ids, size_t npush, const void *grads, double lr,
                           const void *pull_ids, size_t npull, float *out);

void sparse_table_get_stats(const sparse_table_t *t, sparse_table_stats_t *st);
/* stats.version alone (pushes applied): what every pull and push reply carries,
 * without get_stats's other counters (and admission's estimate of the waiting ids). */
uint64_t sparse_table_version(const sparse_table_t *t);

/* ---- checkpoints: the cut and its copy (sparse_cut.c) ---- */

/* What sparse_table_cut_copy copies out of one shard: memory the caller owns
 * (zero it before the first use; sparse_cut_buf_free). */
typedef struct sparse_cut_buf {
    unsigned char *rows; /* (n, row_bytes): int64 id, then the record (8-byte aligned) */
    size_t n, cap, row_bytes, rec_bytes;
    int64_t *dead; /* (ndead) tombstones: ids evicted since `since` without a row at the cut */
    size_t ndead, dead_cap;
    int64_t *scratch; /* (cap) the rows' ids, sorted, when tombstones are checked against them */
} sparse_cut_buf_t;

/* Opens a cut: closes the current epoch (*mark = it) and marks every shard
 * pending for a copy of the rows whose epoch is in (since, *mark], with the
 * tombstones of that range when since > 0 (a base has none). O(shards); no
 * allocation, cannot fail. Must not run concurrently with pulls, pushes,
 * puts, expiry or another cut on t; a cut must not be open already. */
void sparse_table_cut(sparse_table_t *t, uint64_t since, uint64_t *mark);
/* Copies shard s (0..SPARSE_TABLE_SHARDS-1) of the open cut into b (its
 * previous content dropped), as of the cut, and clears the shard's mark;
 * each shard exactly once. Goes over the shard's index SPARSE_COPY_PIECE
 * positions at a time, each piece under the shard's lock, letting it go in
 * between: a push of that shard waits for at most one piece (about a
 * thousand rows' copies, however big the shard). PSC_ENOMEM: the cut can
 * only be abandoned then (sparse_table_cut_abort). Thread-safe with pulls,
 * pushes, puts and expiry; one thread copies a cut. */
int sparse_table_cut_copy(sparse_table_t *t, int s, sparse_cut_buf_t *b);
/* Index positions a shard's copy takes under one hold of its lock. */
#define SPARSE_COPY_PIECE 4096
/* For tests: the copy's pieces of `piece` positions (0: SPARSE_COPY_PIECE),
 * and between two of them, with no lock of t held, hook(arg) when not NULL
 * (it may pull, push, put and expire on t). */
void sparse_table_set_copy_piece(sparse_table_t *t, size_t piece, void (*hook)(void *arg), void *arg);
/* Shards of the open cut not copied yet (0: no cut open). Same thread as the copy. */
int sparse_table_cut_left(const sparse_table_t *t);
/* Closes the open cut without copying the rest: every pending mark cleared,
 * the rows kept for it freed. No-op without a cut. Thread-safe like copy. */
void sparse_table_cut_abort(sparse_table_t *t);
/* emit(arg, id, record, record_bytes) for b's rows, then emit(arg, id, NULL,
 * 0) for its tombstones; a nonzero return stops and is returned. No lock. */
int sparse_cut_buf_emit(const sparse_cut_buf_t *b, int (*emit)(void *arg, int64_t id, const void *rec, size_t len),
                        void *arg);
void sparse_cut_buf_free(sparse_cut_buf_t *b);

/* A cut and its whole copy in one call: emits every row whose epoch is >
 * since, and with since > 0 each id evicted since that has no row now as
 * emit(arg, id, NULL, 0); in ascending id order when `sorted` (else shard by
 * shard); a nonzero return of emit stops and is returned. *mark = the epoch
 * just closed (pass it as `since` once the rows are safely stored). On an
 * error (emit's, or PSC_ENOMEM) the cut is abandoned and *mark untouched (the
 * epoch stays closed: a later export since an older mark has its rows again).
 * emit runs under no lock of t. Must not run concurrently with pulls,
 * pushes or puts on t (sparse_table_cut). */
int sparse_table_export(sparse_table_t *t, uint64_t since, int sorted,
                        int (*emit)(void *arg, int64_t id, const void *rec, size_t len), void *arg, uint64_t *mark);
/* A page of the rows that exist, in ascending id order: the (at most) max
 * smallest ids > after into ids[0..*n), their values into vals[0..*n * dim);
 * *more = 1 when rows with larger ids exist beyond the page. Each row is read
 * under its shard's lock, so pushes may run meanwhile (each row whole; the
 * page is not a snapshot). Creates nothing, allocates nothing; O(rows) per
 * page. Thread-safe like pull. */
void sparse_table_scan(sparse_table_t *t, int64_t after, size_t max, int64_t *ids, float *vals, size_t *n, int *more);
/* Inserts or overwrites row `id` from a record (restore; import into a fresh
 * table), a change in the current epoch: checks the id (range and part:
 * PSC_EINVAL), len, t >= 0 and finite floats (PSC_ECORRUPT), each naming the
 * problem; PSC_ENOMEM. A refused record changes nothing. */
int sparse_table_put(sparse_table_t *t, int64_t id, const void *rec, size_t len, char *err, size_t errlen);
/* The record (sparse_table_record_bytes) of a new row id whose values are
 * `values` (dim floats, any alignment): t = 0 and the optimizer's initial
 * slots, as a pull would create it. */
void sparse_table_assigned_record(const sparse_table_t *t, int64_t id, const float *values, unsigned char *rec);

/* ---- a row's life: expiry, the cap, admission (sparse_life.c) ----
 *
 * A part with a TTL or a cap records, beside each row's record, when the row
 * was last updated (created, or pushed; a pull of an existing row or a read
 * does not count): the global step the store last gave the part
 * (sparse_table_set_step) and the seconds since the part was created.
 *   - TTL: sparse_table_expire(t, s) removes the rows of shard s older than
 *     ttl_steps or ttl_secs; the store's evictor calls it shard by shard in
 *     the background, each shard locked once for one pass over its rows.
 *   - Cap: each of the 256 shards may hold its share of max_rows (max_rows /
 *     256, the first max_rows % 256 shards one more); a pull or push that
 *     takes a shard over its share removes, before it lets the shard go, the
 *     shard's least recently updated rows down to 15/16 of the share. So the
 *     part never holds more than max_rows rows between requests. LRU, not
 *     LFU: ids drift, and a row that was hot last month has no use today.
 *   - Admission (min_count >= 2): a push of an id without a row counts it in
 *     a count-min sketch (4 rows of 8-bit counters, conservative update,
 *     filter_bytes split over the shards; every counter halved whenever the
 *     shard counted a quarter of a row's width, so the count is of recent
 *     pushes); the id gets its row, and that push is applied, when its
 *     count reaches min_count; until then its gradient rows are dropped
 *     (stats.rows_dropped) and a pull reads its initial values without
 *     creating it. False admissions: an id pushed c < min_count times is
 *     admitted only when each of its 4 counters also carries min_count - c
 *     counts of other ids; at the halving's load (at most 1/4 count per
 *     counter on average) that is < 0.25% for min_count 2 and an id seen
 *     once, < 1e-6 for min_count 3 (sparse_life.c).
 * An evicted row is gone: a later pull or push creates it again from its
 * initial values. Evictions are recorded (id, epoch) as tombstones: an
 * incremental export after them emits each evicted id that does not exist
 * again as emit(arg, id, NULL, 0), so a checkpoint chain forgets it.
 */
void sparse_table_set_step(sparse_table_t *t, int64_t step);
/* 1 when the part has a TTL (the evictor has work). */
int sparse_table_has_ttl(const sparse_table_t *t);
/* Removes the rows of shard s (0..SPARSE_TABLE_SHARDS-1) older than a TTL;
 * returns how many. Thread-safe like push (and so with a cut's copy). */
uint64_t sparse_table_expire(sparse_table_t *t, int s);
/* Checkpoint `mark` (a cut's mark) is committed: its tombstones are no
 * longer needed. Not concurrently with anything else on t, nor with a cut open. */
void sparse_table_committed(sparse_table_t *t, uint64_t mark);
/* 1 when a delta since `mark` would miss tombstones (more than
 * SPARSE_DEAD_MAX rows evicted since): the next checkpoint must be a base. */
int sparse_table_needs_base(const sparse_table_t *t, uint64_t mark);

#endif
