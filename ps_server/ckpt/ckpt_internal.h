/* ckpt_internal.h — what the files of the checkpoint module share. The
 * format itself is documented in ckpt.h. Not for other modules.
 *
 *   ckpt_format.c  the bytes: keys, manifests, tensor and row values, chains.
 *                  Pure: no RocksDB, no I/O, no lock; safe from any thread;
 *                  calls nothing in the other files.
 *   ckpt_sst.c     a writer's rows on their way to disk: the per-table row
 *                  buffers (sorted and sealed at prepare), the table files
 *                  (SST) they are written to and ingested from, and the
 *                  clean-up of what a prepare that never wrote its manifest
 *                  left (rows without a manifest, files in <dir>/ingest).
 *   ckpt_bg.c      the background thread that compacts deleted checkpoints'
 *                  key ranges (their disk space), off the commit's path.
 *   ckpt.c         the RocksDB side: open, views and manifest scans, writers
 *                  (tensors, prepare), commit with keep-last-K, discard, list,
 *                  tensor reads.
 *   ckpt_rows.c    sparse rows on top of ckpt.c: adding rows to a writer,
 *                  reading a table as of a checkpoint, verification of a
 *                  checkpoint with its chain (verify, latest_good), the
 *                  tests-only helpers.
 * Calls go down only (ckpt_rows.c -> ckpt.c -> ckpt_sst.c, ckpt_bg.c ->
 * ckpt_format.c; ckpt_rows.c -> ckpt_sst.c): no cycle.
 */
#ifndef PSC_CKPT_INTERNAL_H
#define PSC_CKPT_INTERNAL_H

#include "ckpt.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define CKPT_MANIFEST_FIXED 41    /* version 1: bytes before the job id's bytes */
#define CKPT_MANIFEST_FIXED_V2 53 /* versions 2 and 3 */
#define CKPT_VALUE_VERSION 1      /* of tensor and row values */
#define CKPT_TENSOR_HEADER 16
#define CKPT_ROW_HEADER 12
#define CKPT_ID_HEX 16
/* "t/" + 16 hex + "/" + name + NUL */
#define CKPT_KEY_MAX (2 + CKPT_ID_HEX + 1 + CKPT_MAX_NAME + 1)
#define CKPT_RANGE_KEY_LEN (2 + CKPT_ID_HEX + 1)
/* "r/" + 16 hex + "/" + length byte + table */
#define CKPT_ROW_PREFIX_MAX (2 + CKPT_ID_HEX + 1 + 1 + CKPT_MAX_NAME)
/* the prefix + the 8-byte row id; +1 leaves room for an exclusive upper bound */
#define CKPT_ROW_KEY_MAX (CKPT_ROW_PREFIX_MAX + 8 + 1)
/* RocksDB's memtable size (write_buffer_size): a checkpoint's batch is flushed
 * right after it is written, so this bounds what waits in memory, and the
 * WAL file RocksDB preallocates (1.1 x this) */
#define CKPT_WRITE_BUFFER (4u << 20)
/* RocksDB's table file size (target_file_size_base): a compaction preallocates
 * 1.1 x this for the file it writes, beyond the data (at RocksDB's 64 MiB
 * default, 70 MiB of a full disk went to preallocation) */
#define CKPT_TABLE_FILE (8u << 20)
/* RocksDB's own LOG file takes FATAL_LEVEL lines only (it stays empty):
 * RocksDB 7.8 (Debian's build, assertions on) aborts the process on the line
 * after a LOG write that failed, so the lines its background threads write
 * when the disk fills took the ps_server down; the ps_server's log says what
 * failed instead (check_background, write_batch, flush_now). */
#define CKPT_ROCKSDB_LOG_LEVEL 4

typedef struct ckpt_entry {
    char *name;    /* NUL-terminated, malloc'd */
    uint64_t len;  /* tensor bytes */
    uint32_t mcrc; /* masked CRC-32C of the bytes */
} ckpt_entry_t;

/* A table entry of a manifest. */
typedef struct ckpt_table {
    char *name;          /* NUL-terminated, malloc'd */
    uint32_t record_len; /* bytes of each record */
    uint64_t rows;       /* row versions this checkpoint wrote */
    uint64_t digest;     /* sum of ckpt_row_digest over them */
    uint64_t dead;       /* of those rows, tombstones (manifest version 3; 0 before) */
} ckpt_table_t;

/* A decoded manifest; e (info.ntensors entries) and t (info.ntables) are owned
 * (ckpt_manifest_free). */
typedef struct ckpt_manifest {
    ckpt_info_t info;
    ckpt_entry_t *e;
    ckpt_table_t *t;
} ckpt_manifest_t;

/* One manifest as a scan found it: rc != 0 (and msg) when it is damaged. */
typedef struct ckpt_scan_item {
    uint64_t id;
    int badkey; /* the key is not "m/<16 hex>": id is the previous item's, to keep the order */
    int rc;
    ckpt_manifest_t m;
    char msg[256];
} ckpt_scan_item_t;

/* ==== ckpt_format.c: pure ==== */

/* ---- keys: each writes at most CKPT_KEY_MAX bytes into k and returns its length ---- */
size_t ckpt_key_manifest(char *k, uint64_t id);
size_t ckpt_key_tensor(char *k, uint64_t id, const char *name);
/* [lo, hi): every tensor key of id (CKPT_RANGE_KEY_LEN bytes each). */
void ckpt_key_tensor_range(char lo[CKPT_RANGE_KEY_LEN + 1], char hi[CKPT_RANGE_KEY_LEN + 1], uint64_t id);
/* [lo, hi): every row key of id (CKPT_RANGE_KEY_LEN bytes each). */
void ckpt_key_row_range(char lo[CKPT_RANGE_KEY_LEN + 1], char hi[CKPT_RANGE_KEY_LEN + 1], uint64_t id);
/* Writes "r/<id>/" L table into k (CKPT_ROW_KEY_MAX bytes) and returns its length
 * p: the keys of the table's rows of id are k[0..p) + 8 bytes. table has 1..200
 * bytes (asserted). */
size_t ckpt_key_row_prefix(char *k, uint64_t id, const char *table);
/* Puts row's 8 big-endian bytes at k + p (after a prefix of p bytes). */
void ckpt_key_row_set(char *k, size_t p, int64_t row);
/* The row of a key of p + 8 bytes; -1 for any other length or a row >= 2^63. */
int64_t ckpt_key_row_get(const char *k, size_t n, size_t p);
/* Turns the prefix k[0..p) into the exclusive upper bound of its rows (p + 9
 * bytes, returned): the prefix and 9 bytes 0xff. */
size_t ckpt_key_row_bound(char *k, size_t p);
/* Parses "m/<16 hex>"; 0, or -1 for any other key. */
int ckpt_parse_manifest_key(const char *k, size_t n, uint64_t *id);

/* ---- manifests ---- */
void ckpt_manifest_free(ckpt_manifest_t *m); /* empties m; an empty m is fine */
/* Encodes a manifest (version 1 when info has no parent and no table, else 2);
 * returns a malloc'd buffer of *n bytes (the caller frees). */
unsigned char *ckpt_manifest_encode(const ckpt_info_t *info, const ckpt_entry_t *e, const ckpt_table_t *t, size_t *n);
/* Decodes the manifest stored under id. 0; or PSC_ECORRUPT / PSC_EUNSUPPORTED
 * with *m empty and err naming id. */
int ckpt_manifest_decode(const unsigned char *b, size_t n, uint64_t id, ckpt_manifest_t *m, char *err, size_t errlen);
/* Marks an encoded manifest committed in place: the state byte and its CRC,
 * nothing else. */
void ckpt_manifest_set_committed(unsigned char *b, size_t n);
/* The entry named name, or NULL; points into m. */
const ckpt_entry_t *ckpt_manifest_find(const ckpt_manifest_t *m, const char *name);
const ckpt_table_t *ckpt_manifest_find_table(const ckpt_manifest_t *m, const char *table);

/* ---- chains, over the manifests of one scan (ckpt_scan_manifests) ---- */
/* Index of id in items (ids non-decreasing, as scanned), or -1. */
int ckpt_scan_find(const ckpt_scan_item_t *items, int n, uint64_t id);
/* The chain of the (undamaged) items[i]: indexes into items, newest (i) first,
 * down to a base, as a malloc'd *chain of *len (the caller frees).
 * PSC_ECORRUPT naming the first parent that is missing, damaged, of another job
 * or not older, with *chain NULL. */
int ckpt_chain(const ckpt_scan_item_t *items, int n, int i, int **chain, int *len, char *err, size_t errlen);
/* Cuts chain (as ckpt_chain made it) to the T-chain of table: before the first
 * checkpoint that does not declare it. Returns the new length; PSC_ECORRUPT
 * when a checkpoint of it declares the table with another record_len. */
int ckpt_chain_table(const ckpt_scan_item_t *items, const int *chain, int len, const char *table, char *err,
                     size_t errlen);
/* Sets m.info.needed_by of every undamaged item: the newest item whose chain
 * holds it (0: none). */
void ckpt_scan_needed_by(ckpt_scan_item_t *items, int n);

/* ---- tensor values ---- */
/* The header of a tensor value of len bytes whose masked CRC is mcrc. */
void ckpt_tensor_header(unsigned char hdr[CKPT_TENSOR_HEADER], uint32_t mcrc, uint64_t len);
/* Checks the stored value of tensor e of checkpoint id: header, length and
 * CRC agree with the manifest and the bytes. With copy, *copy receives a
 * malloc'd copy of the tensor (the caller frees). 0 or PSC_ECORRUPT. */
int ckpt_tensor_value_check(uint64_t id, const ckpt_entry_t *e, const unsigned char *val, size_t n, void **copy,
                            char *err, size_t errlen);

/* ---- row values ---- */
void ckpt_row_header(unsigned char hdr[CKPT_ROW_HEADER], uint32_t mcrc, uint32_t len);
/* The term of one row version in a table's digest. */
uint64_t ckpt_row_digest(int64_t row, uint32_t mcrc);
/* Checks the stored value of row `row` of table t of checkpoint id: version,
 * length (t->record_len; 0 for a tombstone, where t has them) and CRC. 0 (a
 * record) or 1 (a tombstone) with *mcrc (when non-NULL) the record's masked
 * CRC, or PSC_ECORRUPT naming id, table and row. */
int ckpt_row_value_check(uint64_t id, const ckpt_table_t *t, int64_t row, const unsigned char *val, size_t n,
                         uint32_t *mcrc, char *err, size_t errlen);

/* ==== ckpt.c: the RocksDB side, used by ckpt_rows.c ==== */

/* Types of rocksdb/c.h, named by their struct tags so that ckpt_format.c needs
 * no RocksDB header. */
struct rocksdb_t;
struct rocksdb_options_t;
struct rocksdb_writeoptions_t;
struct rocksdb_readoptions_t;
struct rocksdb_snapshot_t;
struct rocksdb_writebatch_t;

struct ckpt_db {
    struct rocksdb_t *rdb;
    struct rocksdb_options_t *opts;
    struct rocksdb_writeoptions_t *wsync; /* sync=true: every write of this module */
    struct rocksdb_readoptions_t *rplain; /* latest state: writers, under wlock */
    pthread_mutex_t wlock;                /* serializes prepare, commit, discard */
    /* rdb's life: shared by every use without wlock (snapshot views,
     * compaction), exclusive while a writer (under wlock) reopens the store
     * after a failed write. rdb is NULL only when that reopen failed. */
    pthread_rwlock_t life;
    char *dir;
    char *write_failed;    /* under wlock: the failed write's error; no write through this handle after it */
    uint64_t bg_errors;    /* under wlock: RocksDB's background error count last logged */
    int no_space_check;    /* tests: ckpt_debug_skip_space_check */
    int stop_after_ingest; /* tests: ckpt_debug_stop_after_ingest */
    struct ckpt_bg *bg;    /* ckpt_bg.c: the compaction thread */
};

/* An entry of a writer's row buffer (ckpt_wtable_t.buf): the row id (8 bytes,
 * host order), then the row's stored value — the 12-byte header (its CRC
 * filled by ckpt_sst_seal) and the record (record_len bytes; none used for a
 * tombstone, whose header says len 0) — so the value goes to the table file
 * as it lies. */
#define CKPT_WROW_ID 8

/* A table the writer declared: its manifest entry (rows and dead counted as
 * rows are added, digest by ckpt_sst_seal) and its rows, copied as they come
 * (ckpt_add_row: one memcpy, nothing else: it runs inside the store's cut)
 * and written at prepare as one table file, in row order. */
typedef struct ckpt_wtable {
    ckpt_table_t t;
    char key[CKPT_ROW_KEY_MAX]; /* the row key prefix; the row's 8 bytes go after it */
    size_t plen;
    unsigned char *buf; /* t.rows entries (ckpt_wtable_stride bytes each), in the order added */
    uint64_t cap;       /* entries buf has room for */
    uint64_t *order;    /* after ckpt_sst_seal: entry indexes in ascending row order; NULL = as added */
    int64_t last;       /* the row of the last entry */
    int sorted;         /* rows strictly ascending so far */
} ckpt_wtable_t;

struct ckpt_writer {
    ckpt_db_t *db;
    uint64_t id;
    int64_t step;
    uint64_t parent;
    char job[CKPT_MAX_JOB_ID + 1];
    struct rocksdb_writebatch_t *batch;
    ckpt_entry_t *e; /* added tensors, in order */
    uint32_t n, cap;
    uint32_t *slots; /* open-addressing set of names: index + 1, 0 = empty */
    uint32_t nslots; /* power of two */
    uint64_t bytes;
    ckpt_wtable_t *tab; /* declared tables, in order */
    uint32_t ntab, tabcap;
    uint32_t last_tab; /* index of the table of the last ckpt_add_row */
    int rc;            /* first error; sticky */
    char msg[320];
};

/* A reader's consistent view: one RocksDB snapshot. */
typedef struct ckpt_view {
    ckpt_db_t *db;
    const struct rocksdb_snapshot_t *snap; /* NULL: latest state (writers, under wlock), or the store is closed */
    struct rocksdb_readoptions_t *ro;
    int shared; /* ckpt_view_open's: holds db->life shared */
} ckpt_view_t;

void ckpt_view_open(ckpt_db_t *db, ckpt_view_t *v);
void ckpt_view_close(ckpt_view_t *v);
struct rocksdb_pinnableslice_t;
/* The value under key in the view: 0 with *out (NULL when absent; else the
 * caller destroys it), or PSC_EIO naming the problem. */
int ckpt_view_get(ckpt_view_t *v, const char *key, size_t klen, struct rocksdb_pinnableslice_t **out, char *err,
                  size_t errlen);
/* Every manifest in the view, id ascending, as *out (*n items; the caller
 * frees with ckpt_scan_free). A damaged one is an item with rc != 0; a failed
 * iteration is the function's PSC_EIO. */
int ckpt_scan_manifests(ckpt_view_t *v, ckpt_scan_item_t **out, int *n, char *err, size_t errlen);
void ckpt_scan_free(ckpt_scan_item_t *items, int n);
/* The manifest of id in the view into *m (ckpt_manifest_free): PSC_ENOTFOUND
 * when there is none, PSC_ECORRUPT / PSC_EUNSUPPORTED / PSC_EIO. */
int ckpt_manifest_load(ckpt_view_t *v, uint64_t id, ckpt_manifest_t *m, char *err, size_t errlen);
/* ckpt_manifest_load in a view of its own (opened and closed here). */
int ckpt_manifest_read(ckpt_db_t *db, uint64_t id, ckpt_manifest_t *m, char *err, size_t errlen);
/* Checks every tensor of manifest m in the view. 0 or PSC_ECORRUPT / PSC_EIO. */
int ckpt_tensors_verify(ckpt_view_t *v, const ckpt_manifest_t *m, char *err, size_t errlen);
/* Records the writer's first error (later ones are ignored); returns it. */
int ckpt_writer_fail(ckpt_writer_t *w, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ==== ckpt_sst.c: rows as table files ==== */

/* Bytes of one entry of t's buffer. */
size_t ckpt_wtable_stride(const ckpt_wtable_t *t);
/* Appends row (rec NULL and len 0: a tombstone) to t's buffer: checked by the
 * caller, copied here. */
void ckpt_wtable_append(ckpt_wtable_t *t, int64_t row, const void *rec, size_t len);
/* Frees t's buffers (not t). */
void ckpt_wtable_free(ckpt_wtable_t *t);
/* Before prepare, no lock: orders t's rows by row id (a radix sort unless
 * they came in order), refuses a row added twice (PSC_EEXISTS naming it), and
 * computes each record's CRC and the table's digest. */
int ckpt_sst_seal(ckpt_wtable_t *t, uint64_t id, char *err, size_t errlen);
/* Bytes the rows of t take in a table file, about. */
uint64_t ckpt_sst_bytes(const ckpt_wtable_t *t);
/* Under wlock, the store open for writes: writes the sealed rows of every
 * table of w that has rows as table files in <dir>/ingest and ingests them
 * into the store (moved, not copied: one atomic step, after which the rows
 * exist, still without a manifest: no reader looks at them). Rows of id left
 * by an earlier attempt are deleted first. *ingested is set once RocksDB took
 * the files. PSC_EIO naming the file or RocksDB's error; every file is gone
 * when it returns. */
int ckpt_sst_ingest(ckpt_db_t *db, ckpt_writer_t *w, int *ingested, char *err, size_t errlen);
/* Under wlock (or at open): deletes the rows of every id that has no
 * manifest (a prepare that stopped between its ingest and its manifest: a
 * crash, a failed write) and every file in <dir>/ingest. PSC_EIO. */
int ckpt_sst_cleanup(ckpt_db_t *db, char *err, size_t errlen);

/* ==== ckpt_bg.c: compaction of deleted checkpoints, in the background ==== */

/* Starts the thread (at open). */
void ckpt_bg_start(ckpt_db_t *db);
/* Queues the key ranges of deleted checkpoints ids[0..n) for compaction:
 * RocksDB drops the files the range deletions cover and the disk space
 * returns, a moment later. Never blocks on the compaction. */
void ckpt_bg_compact(ckpt_db_t *db, const uint64_t *ids, int n);
/* Waits until every queued compaction is done (a writer short of room: the
 * deleted checkpoints' space may be what it needs). Any thread; may be called
 * under wlock (the thread never takes it). */
void ckpt_bg_drain(ckpt_db_t *db);
/* Finishes the queued compactions and stops the thread (at close, before
 * RocksDB closes). */
void ckpt_bg_stop(ckpt_db_t *db);

#endif
