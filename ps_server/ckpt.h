/* ckpt.h — a PS shard's checkpoints in its own RocksDB (--checkpoint_dir).
 *
 * Two-phase checkpoints (DESIGN.md, "Chief: init, checkpoint, recovery"):
 *   phase 1  ckpt_begin / ckpt_add... / ckpt_prepare: every tensor of the shard and
 *            the manifest go to RocksDB in ONE atomic, synced write. A crash before
 *            it leaves nothing; after it, a *prepared* checkpoint that restore
 *            ignores until it is committed.
 *   phase 2  ckpt_commit: flips the manifest's state to committed (one synced
 *            write), then deletes the job's checkpoints beyond the newest `keep`
 *            committed ones and the prepared ones older than it (one atomic write).
 *   restore  ckpt_latest_good: the newest committed checkpoint of the job whose
 *            every tensor passes its length and CRC32C check; older committed ones
 *            are tried when a newer one is damaged.
 * The chief decides which id counts cluster-wide (committed on every shard); this
 * module knows only its own shard.
 *
 * On-disk format (a file format: RocksDB's `ldb scan` shows it; change it only
 * with a new version byte). Every integer is little-endian; floats are IEEE-754
 * binary64; every CRC is CRC-32C (crc32c.h), stored masked (psc_crc32c_mask).
 *
 *   key "m/<id>"          manifest of checkpoint <id>
 *   key "t/<id>/<name>"   one tensor of checkpoint <id>
 * <id> is the id as 16 lowercase hex digits (zero-padded), so the byte order of
 * the keys is id order: "m/" keys list the checkpoints oldest first, and all of a
 * checkpoint's tensors lie in the key range ["t/<id>/", "t/<id>0") ('0' = '/'+1).
 * <name> is the tensor's name as given (1..200 bytes, any byte but NUL).
 *
 *   manifest value, version 1:
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
 *      then ntensors entries, in the order the tensors were added:
 *             2  name_len (1..200), then name_len bytes of name
 *             8  len: the tensor's byte length
 *             4  masked CRC-32C of the tensor's bytes
 *      last   4  masked CRC-32C of every byte of the manifest before it
 *   A manifest whose CRC fails is corrupt (PSC_ECORRUPT); one whose CRC holds but
 *   whose version is not 1 was written by a newer psc (PSC_EUNSUPPORTED).
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
 * Threads: a ckpt_db_t may be used from any number of threads at once. Readers
 * (list, read, names, verify, latest_good) take no lock and read from one RocksDB
 * snapshot each, so a concurrent commit never shows them half a checkpoint.
 * Writers (prepare, commit, discard) are serialized by the db's own mutex, which
 * is held across their RocksDB writes: it makes "does the id exist? then write"
 * atomic, and nothing outside this module (no push or pull) ever waits on it.
 * A ckpt_writer_t belongs to one thread at a time.
 *
 * Errors: 0 or a negative PSC_E* code; `err` (may be NULL) receives one line
 * naming the checkpoint, the tensor and the problem.
 */
#ifndef PSC_CKPT_H
#define PSC_CKPT_H

#include <stddef.h>
#include <stdint.h>

#define CKPT_FORMAT_VERSION 1
#define CKPT_MAX_NAME 200   /* bytes of a tensor name */
#define CKPT_MAX_JOB_ID 16  /* bytes of a job id */
/* A tensor is one RocksDB value: at most 4 GiB minus the header. Larger
 * variables are split into name/part_i by placement already. */
#define CKPT_MAX_TENSOR_BYTES ((uint64_t)UINT32_MAX - 16)

typedef struct ckpt_db ckpt_db_t;

typedef struct ckpt_info {
    uint64_t id;         /* chosen by the chief, increasing */
    int64_t step;        /* global_step the checkpoint holds */
    char job_id[17];
    int committed;       /* 0 = prepared (phase 1 done), 1 = committed (phase 2) */
    uint32_t ntensors;
    uint64_t bytes;      /* tensor bytes */
    double created_unix; /* wall-clock seconds when prepared */
} ckpt_info_t;

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

/* Writes the checkpoint, prepared, in one atomic synced write and frees w
 * (whatever the result). PSC_EEXISTS if checkpoint `id` exists (prepared or
 * committed), PSC_EIO on a RocksDB failure (nothing written), or the writer's
 * earlier error. */
int ckpt_prepare(ckpt_writer_t *w, char *err, size_t errlen);

/* Frees w and writes nothing. NULL is a no-op. */
void ckpt_abort(ckpt_writer_t *w);

/* ---- phase 2 ---- */

/* Marks prepared checkpoint `id` committed (one synced write), then deletes, in
 * one atomic synced write, every checkpoint of the same job but the newest `keep`
 * committed ones, and every prepared one of the job with an id below `id` (a save
 * that never committed), and compacts the deleted ranges so their disk space is
 * returned. Prepared checkpoints with a larger id and other jobs' checkpoints are
 * left alone. Committing a committed checkpoint is a no-op returning 0 (nothing
 * deleted). keep >= 1 (PSC_EINVAL). PSC_ENOTFOUND if `id` does not exist,
 * PSC_ECORRUPT if its manifest is damaged, PSC_EIO (the message says whether
 * the commit itself was written: a failure of the deletions leaves it committed). */
int ckpt_commit(ckpt_db_t *db, uint64_t id, int keep, char *err, size_t errlen);

/* Deletes prepared (uncommitted) checkpoint `id`, e.g. when another PS failed its
 * phase 1. A checkpoint whose manifest is damaged is deleted too. PSC_ENOTFOUND
 * if it does not exist, PSC_EINVAL if it is committed (committed checkpoints go
 * only through keep-last-K), PSC_EIO. */
int ckpt_discard(ckpt_db_t *db, uint64_t id, char *err, size_t errlen);

/* ---- reading ---- */

/* Every checkpoint, prepared and committed, of every job, id ascending. *out is
 * malloc'd, owned by the caller (free); *out is NULL when *n is 0.
 * PSC_ECORRUPT naming the first checkpoint whose manifest is damaged (ckpt_discard
 * removes it), PSC_EUNSUPPORTED for a newer format, PSC_EIO. */
int ckpt_list(ckpt_db_t *db, ckpt_info_t **out, int *n, char *err, size_t errlen);

/* Information of one checkpoint into *out. PSC_ENOTFOUND, PSC_ECORRUPT,
 * PSC_EUNSUPPORTED. */
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

/* Checks the length and CRC-32C of every tensor of checkpoint `id`.
 * PSC_ECORRUPT naming the first bad tensor, PSC_ENOTFOUND. */
int ckpt_verify(ckpt_db_t *db, uint64_t id, char *err, size_t errlen);

/* The decoding a restore does, without a database: `manifest` as stored under
 * m/<id>, then `tensor` as stored for the manifest's first tensor. 0 with *info
 * filled (when non-NULL), or PSC_ECORRUPT / PSC_EUNSUPPORTED naming what is
 * wrong. For the fuzzer (tests/fuzz/fuzz_ckpt.c). */
int ckpt_check_records(uint64_t id, const void *manifest, size_t mlen, const void *tensor, size_t tlen,
                       ckpt_info_t *info, char *err, size_t errlen);

/* The newest committed checkpoint of job_id that verifies. A newer one that fails
 * (or whose manifest is damaged) is skipped with one line through log (may be
 * NULL) naming the checkpoint and the bad tensor, and the next older is tried.
 * PSC_ENOTFOUND when none is left (err says how many were tried). */
int ckpt_latest_good(ckpt_db_t *db, const char *job_id, ckpt_info_t *out, void (*log)(const char *line),
                     char *err, size_t errlen);

/* ---- tests only ---- */

/* Flips (xor 0xff) byte `offset` of the stored value of tensor `name` of
 * checkpoint `id` — offset counts from the tensor's first byte; a negative one
 * reaches into the 16-byte header — or of the manifest when name is NULL.
 * Writes behind the module's back, as a bad disk would. PSC_ENOTFOUND,
 * PSC_EINVAL (offset out of the value). */
int ckpt_debug_corrupt(ckpt_db_t *db, uint64_t id, const char *name, int64_t offset);

/* Number of RocksDB keys that belong to checkpoint `id` (its manifest and
 * tensors), as stored: to check that deletions really delete. */
int ckpt_debug_count_keys(ckpt_db_t *db, uint64_t id);

#endif
