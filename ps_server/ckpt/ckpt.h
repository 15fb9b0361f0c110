/* ckpt.h — a PS shard's checkpoints in its own RocksDB (--checkpoint_dir).
 *
 * Two-phase checkpoints (DESIGN.md, "Chief: init, checkpoint, recovery"):
 *   phase 1  ckpt_begin / ckpt_add... / ckpt_prepare: the changed rows of the
 *            shard's sparse tables go to RocksDB as table files, ingested in
 *            one atomic step; then every tensor of the shard and the manifest
 *            in ONE atomic, synced write, the commit point of phase 1. A crash
 *            before it leaves nothing that counts (rows without a manifest are
 *            never read, and the next open deletes them); after it, a
 *            *prepared* checkpoint that restore ignores until it is committed.
 *   phase 2  ckpt_commit: flips the manifest's state to committed (one synced
 *            write), then deletes what keep-last-K no longer needs (one atomic
 *            write; see "Deltas and keep-last-K"); the disk space of what it
 *            deleted returns a moment later (a compaction on the store's own
 *            thread), so a commit costs the same whatever it deletes.
 *   restore  ckpt_latest_good: the newest committed checkpoint of the job that
 *            verifies (every tensor, and every row version its tables read, pass
 *            their length and CRC32C checks; its chain is whole); older committed
 *            ones are tried when a newer one is damaged.
 * The chief decides which id counts cluster-wide (committed on every shard); this
 * module knows only its own shard.
 *
 * Deltas. Sparse tables (sparse_table.h) are saved by what changed: a checkpoint
 * may name a `parent` (ckpt_set_parent), an older checkpoint of the same job; it
 * then holds, for each table it declares (ckpt_add_table), only the rows written
 * since the parent (ckpt_add_row). A checkpoint with parent 0 is a base. The
 * chain of c is c, its parent, the parent's parent, ... down to a base. A table
 * T declared by c reads, as of c (ckpt_read_rows), every row of the T-chain of
 * c: c's chain cut before the first ancestor that does not declare T (a table a
 * delta declares first starts there); each row's value is its version in the
 * newest checkpoint of that T-chain that wrote it. A delta deletes a row with
 * a tombstone (ckpt_add_row with no record): a row whose newest version is a
 * tombstone does not exist as of c (an evicted row, sparse_table.h). Tensors are not inherited:
 * each checkpoint holds all its tensors.
 *   - ckpt_prepare refuses a parent that is missing, of another job, not older,
 *     or that declares one of the delta's tables with another record length.
 *   - ckpt_commit refuses a checkpoint whose chain holds a checkpoint that is
 *     missing, damaged or not committed: the chain of a committed checkpoint is
 *     committed, whole (up to disk damage, which verification finds).
 *
 * Deltas and keep-last-K. ckpt_commit(id, keep) keeps, of id's job: the newest
 * `keep` committed checkpoints, every prepared one newer than id, and every
 * checkpoint the chain of one of those reaches (a base or an older delta a kept
 * delta reads: "retained as a base"); it deletes every other checkpoint of the
 * job. Retained checkpoints do not count in `keep`: they stay, whole, committed
 * and restorable, until no kept checkpoint needs them. ckpt_list shows why one
 * is still there: needed_by is the newest checkpoint whose chain holds it. So a
 * job keeps at most keep + (length of the kept chains) checkpoints; the store
 * bounds the chains by writing a base often enough.
 *
 * On-disk format (a file format: RocksDB's `ldb scan` shows it; change it only
 * with a new version byte). Integers are little-endian unless said otherwise;
 * floats are IEEE-754 binary64; every CRC is CRC-32C (crc32c.h), stored masked
 * (psc_crc32c_mask).
 *
 *   key "m/<id>"          manifest of checkpoint <id>
 *   key "t/<id>/<name>"   one tensor of checkpoint <id>
 *   key "r/<id>/" L <table> <row>
 *                         one row version: the record of row <row> of table
 *                         <table> written by checkpoint <id>. L is one byte, the
 *                         table name's length (1..200); <row> is the row id as 8
 *                         bytes BIG-endian (0..2^63-1), so a table's rows of one
 *                         checkpoint lie in ascending row order.
 * <id> is the id as 16 lowercase hex digits (zero-padded), so the byte order of
 * the keys is id order: "m/" keys list the checkpoints oldest first, all of a
 * checkpoint's tensors lie in the key range ["t/<id>/", "t/<id>0") and all its
 * row versions in ["r/<id>/", "r/<id>0") ('0' = '/'+1): deleting a checkpoint
 * is one Delete and two DeleteRanges. The length byte makes a row key
 * unambiguous for any table name; the rows of table T of checkpoint c are
 * exactly the keys "r/<c>/" L T followed by 8 bytes. Row keys are checkpoint
 * first, not row first: deleting a checkpoint stays a range deletion (no key
 * by key scan of the table), verifying one is a range scan, and reading a
 * table as of c merges the ranges of its chain, each read once in order
 * (ckpt_read_rows), never touching versions outside the chain.
 * <name> and <table> are given names (1..200 bytes, any byte but NUL).
 *
 *   manifest value, version 1 (written for a base without tables: a store of
 *   dense tensors only stays readable by an older psc):
 *     off  size
 *       0     1  format version = 1
 *       1     1  state: 0 = prepared, 1 = committed
 *       2     2  reserved, 0
 *       4     4  ntensors
 *       8     8  id (equals the key's)
 *      16     8  step (int64)
 *      24     8  created_unix: wall-clock seconds at prepare (binary64)
 *      32     8  bytes: sum of the tensors' lengths
 *      40     1  job_len (1..16), then job_len bytes of job id
 *      then ntensors tensor entries, in the order the tensors were added:
 *             2  name_len (1..200), then name_len bytes of name
 *             8  len: the tensor's byte length
 *             4  masked CRC-32C of the tensor's bytes
 *      last   4  masked CRC-32C of every byte of the manifest before it
 *
 *   manifest value, version 2 (written when there is a parent or a table):
 *       0 .. 39  as version 1, with format version = 2
 *      40     8  parent id, 0 = a base (else below id)
 *      48     4  ntables
 *      52     1  job_len (1..16), then job_len bytes of job id
 *      then ntensors tensor entries, as version 1
 *      then ntables table entries, in the order the tables were declared:
 *             1  name_len (1..200), then name_len bytes of table name
 *             4  record_len: bytes of each row record (1..CKPT_MAX_RECORD)
 *             8  rows: the row versions this checkpoint wrote for the table
 *             8  digest: the sum, modulo 2^64, over those row versions of
 *                fmix64(fmix64(row + 1) ^ mcrc) in uint64 arithmetic, mcrc the
 *                masked CRC-32C of the record (as in its value's header) and
 *                fmix64 MurmurHash3's 64-bit finalizer (x ^= x >> 33;
 *                x *= 0xff51afd7ed558ccd; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53;
 *                x ^= x >> 33): any order, and a missing, extra or replaced row
 *                version changes rows or digest
 *      last   4  masked CRC-32C of every byte of the manifest before it
 *   manifest value, version 3 (written when a table of it has tombstones):
 *     as version 2, each table entry followed by
 *             8  dead: how many of its row versions are tombstones
 *   A manifest whose CRC fails is corrupt (PSC_ECORRUPT); one whose CRC holds but
 *   whose version is above 3 was written by a newer psc (PSC_EUNSUPPORTED).
 *
 *   tensor value, version 1:
 *       0     1  format version = 1
 *       1     3  reserved, 0
 *       4     4  masked CRC-32C of the tensor's bytes
 *       8     8  len
 *      16   len  the tensor's bytes, as given to ckpt_add (psc never interprets them)
 *   A tensor reads back only when its header, the manifest's entry and the bytes
 *   all agree on length and CRC.
 *
 *   row value, version 1:
 *       0     1  format version = 1
 *       1     3  reserved, 0
 *       4     4  masked CRC-32C of the record
 *       8     4  len (the table's record_len)
 *      12   len  the record, as given to ckpt_add_row (never interpreted)
 *   A tombstone is a row value with len 0 and no record (its CRC is the empty
 *   string's), valid only in a table whose manifest entry counts tombstones.
 *   A row reads back only when its header's length is the table's record_len
 *   and the record's CRC is the header's.
 *
 * Threads: a ckpt_db_t may be used from any number of threads at once. Readers
 * (list, read, names, tables, read_rows, verify, latest_good) take no lock and
 * read from one RocksDB snapshot each, so a concurrent commit never shows them
 * half a checkpoint. Writers (prepare, commit, discard) are serialized by the
 * db's own mutex, which is held across their RocksDB writes: it makes "does the
 * id exist? then write" atomic, and nothing outside this module (no push or
 * pull) ever waits on it. A ckpt_writer_t belongs to one thread at a time.
 *
 * Errors: 0 or a negative PSC_E* code; `err` (may be NULL) receives one line
 * naming the checkpoint, the tensor or table and row, and the problem.
 */
#ifndef PSC_CKPT_H
#define PSC_CKPT_H

#include <stddef.h>
#include <stdint.h>

#define CKPT_FORMAT_VERSION 3 /* the newest manifest version this psc reads and writes */
#define CKPT_MAX_NAME 200     /* bytes of a tensor or table name */
#define CKPT_MAX_JOB_ID 16    /* bytes of a job id */
/* A tensor is one RocksDB value: at most 4 GiB minus the header. Larger
 * variables are split into name/part_i by placement already. */
#define CKPT_MAX_TENSOR_BYTES ((uint64_t)UINT32_MAX - 16)
/* Bytes of one row record (sparse_table.h: 8 + 4 * dim * (1 + slots) is at
 * most 49160 bytes). */
#define CKPT_MAX_RECORD (1u << 20)
#define CKPT_MAX_TABLES 4096 /* tables of one checkpoint */

typedef struct ckpt_db ckpt_db_t;

typedef struct ckpt_info {
    uint64_t id;  /* chosen by the chief, increasing */
    int64_t step; /* global_step the checkpoint holds */
    char job_id[17];
    int committed; /* 0 = prepared (phase 1 done), 1 = committed (phase 2) */
    uint32_t ntensors;
    uint64_t bytes;      /* tensor bytes */
    double created_unix; /* wall-clock seconds when prepared */
    uint64_t parent;     /* the checkpoint this one is a delta on; 0 = a base */
    uint32_t ntables;    /* sparse tables it declares */
    uint64_t rows;       /* row versions it wrote, all tables together */
    /* The newest checkpoint whose chain holds this one (0: none). A committed
     * checkpoint beyond the newest keep-last-K is still on disk because of it:
     * retained as a base. Filled by ckpt_list and ckpt_get_info. */
    uint64_t needed_by;
} ckpt_info_t;

/* One sparse table of a checkpoint (ckpt_tables). */
typedef struct ckpt_table_info {
    char name[CKPT_MAX_NAME + 1];
    uint32_t record_len; /* bytes of each row record */
    uint64_t rows;       /* row versions this checkpoint wrote (its delta); not the table's size */
} ckpt_table_info_t;

/* Opens the checkpoint store at dir, creating it (and missing parent folders).
 * One process at a time: RocksDB's LOCK file refuses a second opener, and the
 * message says so. *out is owned by the caller (ckpt_close).
 * PSC_EINVAL (bad arguments), PSC_EIO (the message names dir). */
int ckpt_open(const char *dir, ckpt_db_t **out, char *err, size_t errlen);

/* Closes the store (RocksDB first finishes its background flushes and
 * compactions; every checkpoint write was synced when its call returned).
 * NULL is a no-op. No other thread may be using db, and no writer be open. */
void ckpt_close(ckpt_db_t *db);

/* ---- phase 1 ---- */

typedef struct ckpt_writer ckpt_writer_t;

/* Starts checkpoint `id` of job_id (1..16 bytes) at global step `step`. Never
 * NULL: a bad argument is remembered and returned by ckpt_add/ckpt_prepare.
 * Nothing reaches the disk before ckpt_prepare. Owned by the caller until
 * ckpt_prepare or ckpt_abort frees it. db must outlive the writer. */
ckpt_writer_t *ckpt_begin(ckpt_db_t *db, uint64_t id, const char *job_id, int64_t step);

/* Changes the step the checkpoint records (before ckpt_prepare): for a shard
 * that learns it while adding its tensors. */
void ckpt_set_step(ckpt_writer_t *w, int64_t step);

/* Copies one tensor into the writer (data may be NULL when len is 0; the caller
 * keeps data). name: 1..CKPT_MAX_NAME bytes, unique within the checkpoint.
 * PSC_EINVAL (name, size), PSC_EEXISTS (name added twice), or the error of an
 * earlier call on this writer. A failed add leaves the writer failed: prepare
 * will refuse it. */
int ckpt_add(ckpt_writer_t *w, const char *name, const void *data, size_t len);

/* Whether tensor `name` was added to w / table `table` declared in it. */
int ckpt_has(ckpt_writer_t *w, const char *name);
int ckpt_has_table(ckpt_writer_t *w, const char *table);

/* Makes the checkpoint a delta on checkpoint `parent` (0, the default: a base).
 * Checked by ckpt_prepare: the parent must exist (prepared or committed), be
 * of the same job and have a smaller id, and every table both declare must have
 * the same record_len. */
void ckpt_set_parent(ckpt_writer_t *w, uint64_t parent);

/* Declares sparse table `table` (1..CKPT_MAX_NAME bytes) with records of
 * record_len bytes (1..CKPT_MAX_RECORD): the checkpoint holds the table even if
 * no row of it changed. At most CKPT_MAX_TABLES. PSC_EINVAL, PSC_EEXISTS
 * (declared twice), or the writer's earlier error; a failure sticks as for
 * ckpt_add. */
int ckpt_add_table(ckpt_writer_t *w, const char *table, uint32_t record_len);

/* Adds the record of row `row` (0..INT64_MAX) of declared table `table`: a row
 * written since the parent (in a base: every row); rec NULL and len 0: a
 * tombstone, the row deleted since the parent (manifest version 3). Copies rec
 * (len bytes, the table's record_len) into the writer's buffer of the table
 * and does nothing else (a memcpy: the store calls it inside its cut, where
 * pushes wait); its CRC, its place in row order and its write come at
 * ckpt_prepare. Rows may come in any order; ascending order is cheapest (no
 * sort at prepare; a duplicate is then refused here, else by ckpt_prepare
 * after sorting). PSC_EINVAL (undeclared table, row, len), PSC_EEXISTS (row
 * added twice), or the writer's earlier error; a failure sticks as for
 * ckpt_add. */
int ckpt_add_row(ckpt_writer_t *w, const char *table, int64_t row, const void *rec, size_t len);

/* Writes the checkpoint, prepared, and frees w (whatever the result): each
 * table's rows, sorted, as one table file (SST) in <dir>/ingest that RocksDB
 * ingests (a hard link, no copy); then the tensors and the manifest in one
 * atomic synced write, flushed to a table file. PSC_EEXISTS if checkpoint
 * `id` exists (prepared or committed) or a row was added twice, PSC_ENOTFOUND
 * / PSC_EINVAL / PSC_ECORRUPT for a parent that is missing / unfit
 * (ckpt_set_parent) / damaged, PSC_EIO when the disk lacks the room the write
 * and the compaction after it may take ("no space left on device", nothing
 * written) or RocksDB fails it (nothing written; or, when the flush failed, left
 * prepared for ckpt_discard or a later keep-last-K), or the writer's earlier
 * error. */
int ckpt_prepare(ckpt_writer_t *w, char *err, size_t errlen);

/* Frees w and writes nothing. NULL is a no-op. */
void ckpt_abort(ckpt_writer_t *w);

/* ---- phase 2 ---- */

/* Marks prepared checkpoint `id` committed (one synced write), then deletes, in
 * one atomic synced write, every checkpoint of the same job but the newest `keep`
 * committed ones, the prepared ones with an id above `id`, and those the chains
 * of these reach (retained as bases: see "Deltas and keep-last-K" above) — so
 * a prepared one below `id` (a save that never committed) goes too — and
 * queues the deleted ranges for compaction on the store's thread, so their
 * disk space is returned soon after the call (a prepare short of room waits
 * for it; ckpt_close finishes it). Other jobs' checkpoints are left alone. Committing a committed checkpoint is a no-op
 * returning 0 (nothing deleted). keep >= 1 (PSC_EINVAL). PSC_ENOTFOUND if `id`
 * does not exist, PSC_ECORRUPT if its manifest is damaged or its chain broken
 * (naming the missing or damaged checkpoint), PSC_EINVAL if its chain holds a
 * prepared checkpoint (commit that one first), PSC_EIO (the message says
 * whether the commit itself was written: a failure of the deletions leaves it
 * committed). */
int ckpt_commit(ckpt_db_t *db, uint64_t id, int keep, char *err, size_t errlen);

/* Deletes prepared (uncommitted) checkpoint `id`, e.g. when another PS failed its
 * phase 1: its manifest, tensors and row versions. A checkpoint whose manifest
 * is damaged is deleted too. A prepared delta on it is left broken (it fails
 * verification and cannot be committed): discard it as well. PSC_ENOTFOUND if it
 * does not exist, PSC_EINVAL if it is committed (committed checkpoints go only
 * through keep-last-K), PSC_EIO. */
int ckpt_discard(ckpt_db_t *db, uint64_t id, char *err, size_t errlen);

/* ---- reading ---- */

/* Every checkpoint, prepared and committed, of every job, id ascending. *out is
 * malloc'd, owned by the caller (free); *out is NULL when *n is 0.
 * PSC_ECORRUPT naming the first checkpoint whose manifest is damaged (ckpt_discard
 * removes it), PSC_EUNSUPPORTED for a newer format, PSC_EIO. */
int ckpt_list(ckpt_db_t *db, ckpt_info_t **out, int *n, char *err, size_t errlen);

/* Information of one checkpoint into *out (reads every manifest, to fill
 * needed_by). PSC_ENOTFOUND, PSC_ECORRUPT, PSC_EUNSUPPORTED, PSC_EIO. */
int ckpt_get_info(ckpt_db_t *db, uint64_t id, ckpt_info_t *out, char *err, size_t errlen);

/* Reads tensor `name` of checkpoint `id` (prepared or committed) into a malloc'd
 * buffer *data of *len bytes (owned by the caller, free; never NULL, even for an
 * empty tensor) after checking its length and CRC-32C against its header and the
 * manifest. PSC_ENOTFOUND (unknown id or name), PSC_ECORRUPT naming the id and
 * the tensor. */
int ckpt_read(ckpt_db_t *db, uint64_t id, const char *name, void **data, size_t *len, char *err, size_t errlen);

/* Names of checkpoint `id`'s tensors in the order they were added. *names is an
 * array of *n malloc'd strings, freed with ckpt_free_names. PSC_ENOTFOUND,
 * PSC_ECORRUPT. */
int ckpt_names(ckpt_db_t *db, uint64_t id, char ***names, int *n, char *err, size_t errlen);
void ckpt_free_names(char **names, int n);

/* The sparse tables checkpoint `id` declares, in the order they were declared:
 * *out is a malloc'd array of *n entries (the caller frees; NULL when *n is 0).
 * PSC_ENOTFOUND, PSC_ECORRUPT, PSC_EUNSUPPORTED. */
int ckpt_tables(ckpt_db_t *db, uint64_t id, ckpt_table_info_t **out, int *n, char *err, size_t errlen);

/* Calls fn(arg, row, rec, len) for every row of table `table` as of checkpoint
 * `id` (prepared or committed), in ascending row id, each row once, with the
 * record of its newest version in id's chain for the table (see "Deltas").
 * rec (len = the table's record_len bytes, any alignment) is valid only during
 * the call. One snapshot; each chain checkpoint's rows are read once, in key
 * order, merged: no row version outside the chain is read. Every record passed
 * to fn had its length and CRC checked, and each chain checkpoint's count of
 * row versions is checked against its manifest (a mismatch is reported after
 * the rows of that checkpoint, possibly after fn saw rows: a restore that fails
 * is thrown away). A nonzero return of fn stops and is returned. PSC_ENOTFOUND
 * (no checkpoint id, no table), PSC_ECORRUPT naming the checkpoint, table and
 * row (or the missing parent of a broken chain), PSC_EUNSUPPORTED, PSC_EIO. fn
 * may call any function of this module but ckpt_close. */
int ckpt_read_rows(ckpt_db_t *db, uint64_t id, const char *table,
                   int (*fn)(void *arg, int64_t row, const void *rec, size_t len), void *arg, char *err, size_t errlen);

/* A page of ckpt_read_rows: the rows with id > after, at most max (> 0) of
 * them, *more = 1 when rows with larger ids exist (ask again with after =
 * the last row passed). Each page seeks in every chain checkpoint, so paging
 * through a table reads each row version once; the manifests' counts are not
 * checked (a page sees part of them: ckpt_verify checks them). */
int ckpt_read_rows_page(ckpt_db_t *db, uint64_t id, const char *table, int64_t after, size_t max,
                        int (*fn)(void *arg, int64_t row, const void *rec, size_t len), void *arg, int *more, char *err,
                        size_t errlen);

/* Single rows of table `table` as of checkpoint `id` (a Restore-free read:
 * the evaluator's pulls of a checkpoint): for each rows[i] that has a version
 * in id's T-chain, fn(arg, i, rec, len) with its newest one (length and CRC
 * checked); a row without one (never written, or a negative id) is skipped.
 * One snapshot; a lookup per chain checkpoint, newest first, until found.
 * A nonzero return of fn stops and is returned. PSC_ENOTFOUND (no checkpoint
 * id, no table), PSC_ECORRUPT naming the checkpoint, table and row, PSC_EIO. */
int ckpt_get_rows(ckpt_db_t *db, uint64_t id, const char *table, const int64_t *rows, size_t n,
                  int (*fn)(void *arg, size_t i, const void *rec, size_t len), void *arg, char *err, size_t errlen);

/* Checks the length and CRC-32C of every tensor of checkpoint `id`, that its
 * chain is whole, and for each table of id every row version of every
 * checkpoint of the table's chain: key, length, CRC-32C, and the count and
 * digest of each checkpoint's versions against its manifest (so a missing,
 * extra or replaced row version is found). Costs a read of the chain's rows.
 * PSC_ECORRUPT naming the first bad tensor, row or missing checkpoint,
 * PSC_ENOTFOUND, PSC_EUNSUPPORTED, PSC_EIO. */
int ckpt_verify(ckpt_db_t *db, uint64_t id, char *err, size_t errlen);

/* The decoding a restore does, without a database: `manifest` as stored under
 * m/<id> (version 1 or 2), then `tensor` as stored for the manifest's first
 * tensor (if it has one), then `row` as stored for a row of its first table (if
 * it has one). 0 with *info filled (when non-NULL), or PSC_ECORRUPT /
 * PSC_EUNSUPPORTED naming what is wrong. For the fuzzer (tests/fuzz/fuzz_ckpt.c). */
int ckpt_check_records(uint64_t id, const void *manifest, size_t mlen, const void *tensor, size_t tlen, const void *row,
                       size_t rlen, ckpt_info_t *info, char *err, size_t errlen);

/* The newest committed checkpoint of job_id that verifies (ckpt_verify: its
 * tensors, its chain, its tables' row versions). A newer one that fails (or
 * whose manifest is damaged) is skipped with one line through log (may be NULL)
 * naming the checkpoint and the bad tensor or row, and the next older is tried.
 * PSC_ENOTFOUND when none is left (err says how many were tried). */
int ckpt_latest_good(ckpt_db_t *db, const char *job_id, ckpt_info_t *out, void (*log)(const char *line), char *err,
                     size_t errlen);

/* ---- tests only ---- */

/* Flips (xor 0xff) byte `offset` of the stored value of tensor `name` of
 * checkpoint `id` — offset counts from the tensor's first byte; a negative one
 * reaches into the 16-byte header — or of the manifest when name is NULL.
 * Writes behind the module's back, as a bad disk would. PSC_ENOTFOUND,
 * PSC_EINVAL (offset out of the value). */
int ckpt_debug_corrupt(ckpt_db_t *db, uint64_t id, const char *name, int64_t offset);

/* Flips byte `offset` of the stored value of row `row` of table `table` of
 * checkpoint `id` — offset counts from the record's first byte; a negative one
 * reaches into the 12-byte header — or, with offset INT64_MIN, deletes that row
 * version. Behind the module's back, as ckpt_debug_corrupt. PSC_ENOTFOUND,
 * PSC_EINVAL. */
int ckpt_debug_corrupt_row(ckpt_db_t *db, uint64_t id, const char *table, int64_t row, int64_t offset);

/* Number of RocksDB keys that belong to checkpoint `id` (its manifest, tensors
 * and row versions), as stored: to check that deletions really delete. */
int ckpt_debug_count_keys(ckpt_db_t *db, uint64_t id);
/* Tests: writes skip the free-space check, so that RocksDB itself meets a
 * full disk (ps_server --debug_no_space_check). */
void ckpt_debug_skip_space_check(ckpt_db_t *db);
/* Tests: with on, ckpt_prepare stops right after its rows' ingest, as a
 * crash there would (PSC_EIO, no manifest written). */
void ckpt_debug_stop_after_ingest(ckpt_db_t *db, int on);

#endif
