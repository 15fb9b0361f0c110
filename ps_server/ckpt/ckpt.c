/* ckpt.c — checkpoints of a PS shard in RocksDB (C API only): the RocksDB side
 * below ckpt_rows.c. Format and contracts: ckpt.h; the split of the module:
 * ckpt_internal.h.
 *
 * Design:
 * - A writer accumulates the tensors in a rocksdb WriteBatch (each value: header
 *   + bytes, put as two slices so the bytes are copied once), and remembers each
 *   tensor's name, length and CRC for the manifest; rows go to per-table
 *   buffers (ckpt_rows.c, ckpt_sst.c). ckpt_prepare writes the rows as table
 *   files and ingests them (ckpt_sst.c: no WAL, no memtable), then appends the
 *   manifest to the batch and writes it with sync=true: RocksDB applies a
 *   batch atomically, so after a crash either the manifest and its tensors are
 *   there or none of them is; rows without their manifest are never read, and
 *   the next open deletes them (ckpt_sst_cleanup).
 * - Deleting a checkpoint is one Delete of its manifest plus one DeleteRange of
 *   its tensor key range and one of its row key range, in one batch;
 *   CompactRange over the ranges, on the store's background thread
 *   (ckpt_bg.c), turns the tombstones into freed disk space.
 * - Readers take a RocksDB snapshot per call, so a manifest and the tensors and
 *   rows they check come from one point in time even while a commit deletes.
 * - Writers hold db->wlock across their check-then-write (the id's existence or
 *   state, the parent, the chain and the keep-last-K scan, the rows' ingest),
 *   never across compaction.
 * - Chains are computed over one scan of every manifest (ckpt_format.c): a
 *   store holds tens of checkpoints, and the scan reads only their manifests.
 * - A full disk: each write is refused unless the disk holds what it and the
 *   compaction after it may take (space_wanted); a write, flush or background
 *   job that RocksDB fails anyway is logged, and the next write that finds
 *   room reopens the store (reopen), no restart.
 *
 * Invariants: a "m/<id>" key exists iff its tensors and rows were written with
 * it (rows first); the tensor entries of a manifest are exactly the "t/<id>/" keys of that
 * id, its table entries count exactly the "r/<id>/" keys; the chain of a
 * committed checkpoint is committed (ckpt_commit checks it, keep-last-K keeps
 * it).
 */
#include "ckpt.h"
#include "ckpt_internal.h"

#include "crc32c.h"
#include "log.h"
#include "psc.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>

#include <rocksdb/c.h>

/* ---- reading: one snapshot per call ---- */

void ckpt_view_open(ckpt_db_t *db, ckpt_view_t *v)
{
    pthread_rwlock_rdlock(&db->life); /* until ckpt_view_close: no reopen meanwhile */
    v->db = db;
    v->snap = db->rdb ? rocksdb_create_snapshot(db->rdb) : NULL;
    v->ro = rocksdb_readoptions_create();
    if (v->snap) rocksdb_readoptions_set_snapshot(v->ro, v->snap);
    v->shared = 1;
}

static void view_latest(ckpt_db_t *db, ckpt_view_t *v)
{
    v->db = db;
    v->snap = NULL;
    v->ro = db->rplain;
    v->shared = 0; /* under wlock: no reopen can run */
}

void ckpt_view_close(ckpt_view_t *v)
{
    if (!v->shared) return;
    rocksdb_readoptions_destroy(v->ro);
    if (v->snap) rocksdb_release_snapshot(v->db->rdb, v->snap);
    pthread_rwlock_unlock(&v->db->life);
}

/* The store is gone (a reopen after a failed write failed): every read says so. */
static int store_closed(const ckpt_db_t *db, char *err, size_t errlen)
{
    return psc_seterr(err, errlen, PSC_EIO,
                      "checkpoint store %s could not be reopened after a failed write (%s); restart this ps_server",
                      db->dir, db->write_failed ? db->write_failed : "unknown error");
}

/* Gets key; *out is NULL when absent (returns 0). */
int ckpt_view_get(ckpt_view_t *v, const char *key, size_t klen, rocksdb_pinnableslice_t **out, char *err, size_t errlen)
{
    char *e = NULL;
    *out = NULL;
    if (!v->db->rdb) return store_closed(v->db, err, errlen);
    *out = rocksdb_get_pinned(v->db->rdb, v->ro, key, klen, &e);
    if (e) {
        psc_seterr(err, errlen, PSC_EIO, "checkpoint store %s: reading %.*s: %s", v->db->dir, (int)klen, key, e);
        rocksdb_free(e);
        *out = NULL;
        return PSC_EIO;
    }
    return 0;
}

/* Loads the manifest of id: PSC_ENOTFOUND when there is none. */
int ckpt_manifest_load(ckpt_view_t *v, uint64_t id, ckpt_manifest_t *m, char *err, size_t errlen)
{
    char key[CKPT_KEY_MAX];
    size_t kl = ckpt_key_manifest(key, id);
    rocksdb_pinnableslice_t *ps;
    memset(m, 0, sizeof *m);
    int rc = ckpt_view_get(v, key, kl, &ps, err, errlen);
    if (rc) return rc;
    if (!ps) return psc_seterr(err, errlen, PSC_ENOTFOUND, "checkpoint %" PRIu64 " not found", id);
    size_t n;
    const char *val = rocksdb_pinnableslice_value(ps, &n);
    rc = ckpt_manifest_decode((const unsigned char *)val, n, id, m, err, errlen);
    rocksdb_pinnableslice_destroy(ps);
    return rc;
}

int ckpt_manifest_read(ckpt_db_t *db, uint64_t id, ckpt_manifest_t *m, char *err, size_t errlen)
{
    ckpt_view_t v;
    ckpt_view_open(db, &v);
    int rc = ckpt_manifest_load(&v, id, m, err, errlen);
    ckpt_view_close(&v);
    return rc;
}

/* Checks tensor e of checkpoint id in the view: present, and its value right. */
static int tensor_check(ckpt_view_t *v, uint64_t id, const ckpt_entry_t *e, void **copy, char *err, size_t errlen)
{
    char key[CKPT_KEY_MAX];
    size_t kl = ckpt_key_tensor(key, id, e->name);
    rocksdb_pinnableslice_t *ps;
    int rc = ckpt_view_get(v, key, kl, &ps, err, errlen);
    if (rc) return rc;
    if (!ps)
        return psc_seterr(err, errlen, PSC_ECORRUPT,
                          "checkpoint %" PRIu64 ": tensor \"%s\" is listed in the manifest but missing", id, e->name);
    size_t n;
    const unsigned char *val = (const unsigned char *)rocksdb_pinnableslice_value(ps, &n);
    rc = ckpt_tensor_value_check(id, e, val, n, copy, err, errlen);
    rocksdb_pinnableslice_destroy(ps);
    return rc;
}

int ckpt_tensors_verify(ckpt_view_t *v, const ckpt_manifest_t *m, char *err, size_t errlen)
{
    for (uint32_t i = 0; i < m->info.ntensors; i++) {
        int rc = tensor_check(v, m->info.id, &m->e[i], NULL, err, errlen);
        if (rc) return rc;
    }
    return 0;
}

void ckpt_scan_free(ckpt_scan_item_t *items, int n)
{
    for (int i = 0; i < n; i++) ckpt_manifest_free(&items[i].m);
    free(items);
}

int ckpt_scan_manifests(ckpt_view_t *v, ckpt_scan_item_t **out, int *nout, char *err, size_t errlen)
{
    static const char lo[] = "m/", hi[] = "m0"; /* '0' follows '/' */
    *out = NULL;
    *nout = 0;
    if (!v->db->rdb) return store_closed(v->db, err, errlen);
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    if (v->snap) rocksdb_readoptions_set_snapshot(ro, v->snap);
    rocksdb_readoptions_set_iterate_upper_bound(ro, hi, 2);
    rocksdb_iterator_t *it = rocksdb_create_iterator(v->db->rdb, ro);
    ckpt_scan_item_t *items = NULL;
    int n = 0, cap = 0, rc = 0;
    for (rocksdb_iter_seek(it, lo, 2); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t kl, vl;
        const char *k = rocksdb_iter_key(it, &kl);
        const char *val = rocksdb_iter_value(it, &vl);
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            items = psc_xrealloc(items, (size_t)cap * sizeof *items);
        }
        ckpt_scan_item_t *s = &items[n++];
        memset(s, 0, sizeof *s);
        if (ckpt_parse_manifest_key(k, kl, &s->id)) {
            s->badkey = 1;
            s->id = n > 1 ? items[n - 2].id : 0; /* keys sort by id: the order stays */
            s->rc = psc_seterr(s->msg, sizeof s->msg, PSC_ECORRUPT, "unexpected key \"%.*s\" in the manifest range",
                               (int)PSC_MIN(kl, 64), k);
            continue;
        }
        s->rc = ckpt_manifest_decode((const unsigned char *)val, vl, s->id, &s->m, s->msg, sizeof s->msg);
    }
    char *e = NULL;
    rocksdb_iter_get_error(it, &e);
    if (e) {
        rc = psc_seterr(err, errlen, PSC_EIO, "checkpoint store %s: listing manifests: %s", v->db->dir, e);
        rocksdb_free(e);
        ckpt_scan_free(items, n);
        items = NULL;
        n = 0;
    }
    rocksdb_iter_destroy(it);
    rocksdb_readoptions_destroy(ro);
    *out = items;
    *nout = n;
    return rc;
}

/* ---- open / close ---- */

/* The store's RocksDB options (ckpt_internal.h says why each). */
static rocksdb_options_t *store_options(void)
{
    rocksdb_options_t *o = rocksdb_options_create();
    rocksdb_options_set_create_if_missing(o, 1);
    rocksdb_options_set_keep_log_file_num(o, 10);
    rocksdb_options_set_info_log_level(o, CKPT_ROCKSDB_LOG_LEVEL);
    /* a checkpoint's batch is flushed right after its write (flush_now): the
     * memtable and the WAL stay small, and the WAL's preallocation with them */
    rocksdb_options_set_write_buffer_size(o, CKPT_WRITE_BUFFER);
    rocksdb_options_set_target_file_size_base(o, CKPT_TABLE_FILE);
    return o;
}

int ckpt_open(const char *dir, ckpt_db_t **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!dir || !*dir) return psc_seterr(err, errlen, PSC_EINVAL, "empty checkpoint dir (use --checkpoint_dir)");
    int e = psc_mkdir_p(dir);
    if (e) return psc_seterr(err, errlen, PSC_EIO, "cannot create checkpoint dir %s: %s", dir, strerror(e));
    ckpt_db_t *db = psc_xcalloc(1, sizeof *db);
    db->dir = psc_xstrdup(dir);
    db->opts = store_options();
    char *rerr = NULL;
    db->rdb = rocksdb_open(db->opts, dir, &rerr);
    if (rerr || !db->rdb) {
        int rc = psc_seterr(err, errlen, PSC_EIO, "cannot open checkpoint store %s: %s%s", dir,
                            rerr ? rerr : "unknown error",
                            rerr && strstr(rerr, "lock") ? " (another ps_server using this --checkpoint_dir?)" : "");
        rocksdb_free(rerr);
        rocksdb_options_destroy(db->opts);
        free(db->dir);
        free(db);
        return rc;
    }
    db->wsync = rocksdb_writeoptions_create();
    rocksdb_writeoptions_set_sync(db->wsync, 1);
    db->rplain = rocksdb_readoptions_create();
    pthread_mutex_init(&db->wlock, NULL);
    pthread_rwlock_init(&db->life, NULL);
    ckpt_bg_start(db);
    char why[320];
    if (ckpt_sst_cleanup(db, why, sizeof why)) /* invisible to readers: a warning, not a failure */
        PSC_WARN("checkpoint store %s: %s", dir, why);
    *out = db;
    return 0;
}

void ckpt_close(ckpt_db_t *db)
{
    if (!db) return;
    ckpt_bg_stop(db);
    if (db->rdb) rocksdb_close(db->rdb);
    rocksdb_writeoptions_destroy(db->wsync);
    rocksdb_readoptions_destroy(db->rplain);
    rocksdb_options_destroy(db->opts);
    pthread_mutex_destroy(&db->wlock);
    pthread_rwlock_destroy(&db->life);
    free(db->write_failed);
    free(db->dir);
    free(db);
}

/* ---- writing ---- */

static uint64_t free_bytes(const ckpt_db_t *db)
{
    struct statvfs fs;
    return statvfs(db->dir, &fs) == 0 ? (uint64_t)fs.f_bavail * fs.f_frsize : UINT64_MAX;
}

/* Under wlock: RocksDB's background errors (a memtable flush or a compaction
 * that failed: a full disk) are logged here, where the PS's log shows them
 * (RocksDB's own LOG takes no warnings: CKPT_ROCKSDB_LOG_LEVEL), and make the
 * store reopen before its next write (a RocksDB that hit one takes no more
 * writes). Called before each write and after each flush (a failed
 * compaction of deleted checkpoints, ckpt_bg.c, shows at the next write). */
static void check_background(ckpt_db_t *db)
{
    uint64_t n = 0;
    if (!db->rdb || rocksdb_property_int(db->rdb, "rocksdb.background-errors", &n) != 0 || n <= db->bg_errors) return;
    uint64_t avail = free_bytes(db);
    PSC_ERROR("checkpoint store %s: RocksDB reported %" PRIu64 " background error%s: a flush or compaction of the "
              "store failed (%" PRIu64 " KiB free there now: no space left on device?); committed checkpoints are "
              "kept, and the next checkpoint reopens the store once there is room",
              db->dir, n - db->bg_errors, n - db->bg_errors == 1 ? "" : "s", avail == UINT64_MAX ? 0 : avail >> 10);
    db->bg_errors = n;
    if (!db->write_failed) db->write_failed = psc_xstrdup("a RocksDB background flush or compaction failed");
}

/* What writing a batch of `need` bytes to a store whose table files hold
 * `live` bytes may take on disk at its peak. Measured on real stores (RocksDB
 * 7.8, these options; docs/checkpoints-and-failures.md has the numbers):
 * - the write: the batch goes to the WAL and, at flush_now, to a table file
 *   (2 x need; the WAL is deleted after the flush);
 * - the compaction it sets off (RocksDB's at 4 level-0 files, or the one of
 *   the checkpoints keep-last-K deletes) rewrites every table file, since each
 *   checkpoint's keys span the key space ("m/", "r/", "t/" of its id); the old
 *   files go only once the new ones are written (live + need);
 * - preallocation: the next WAL file (1.1 x CKPT_WRITE_BUFFER) and the table
 *   file a compaction writes (1.1 x CKPT_TABLE_FILE);
 * - 1 MiB for a new MANIFEST, OPTIONS and LOG after a reopen.
 * The write and the compaction do not overlap (the WAL is gone first), so
 * 2 x need + live covers both with `need` to spare. */
static uint64_t space_wanted(uint64_t need, uint64_t live)
{
    return 2 * need + live + (uint64_t)CKPT_WRITE_BUFFER * 11 / 10 + (uint64_t)CKPT_TABLE_FILE * 11 / 10 + (1u << 20);
}

/* Under wlock: refuses a write of `need` bytes that the disk may not hold.
 * A checkpoint's data (compacts: 1) asks for the compaction headroom too; a
 * commit or a deletion (a few bytes) does not, so that a full disk can still
 * discard what fills it. */
static int check_space(ckpt_db_t *db, size_t need, int compacts, const char *what, uint64_t id, char *err,
                       size_t errlen)
{
    uint64_t avail = free_bytes(db), live = 0, want = 0;
    if (db->no_space_check || avail == UINT64_MAX) return 0;
    for (int pass = 0; pass < 2; pass++) {
        if (pass) { /* short: the space of deleted checkpoints may be what is missing */
            ckpt_bg_drain(db);
            avail = free_bytes(db);
        }
        live = 0;
        if (compacts && db->rdb && rocksdb_property_int(db->rdb, "rocksdb.live-sst-files-size", &live) != 0) live = 0;
        want = space_wanted(need, compacts ? live : 0);
        if (avail >= want) return 0;
    }
    return psc_seterr(err, errlen, PSC_EIO,
                      "checkpoint %" PRIu64 ": %s needs about %" PRIu64 " KiB in %s (%s), which has %" PRIu64
                      " KiB free (no space left on device): free space there or give this ps_server a "
                      "bigger --checkpoint_dir",
                      id, what, want >> 10, db->dir,
                      compacts ? "twice the checkpoint and room for RocksDB to rewrite the store's files"
                               : "its write-ahead log",
                      avail >> 10);
}

/* Under wlock, before the first write after a failed one (or a background
 * error), once check_space found room: RocksDB 7.8 must not be written again
 * through a handle whose write failed (its WAL writer asserts on the next
 * append) and has no resume in its C API, so the store is closed and opened
 * again, once every snapshot reader is done (db->life). Committed
 * checkpoints are untouched: they were synced before, and the open replays
 * the WAL only up to the failed write. When the open fails (still no room)
 * the store is opened read-only (restores and listings go on) and the next
 * write tries again. */
static int reopen(ckpt_db_t *db, char *err, size_t errlen)
{
    pthread_rwlock_wrlock(&db->life);
    if (db->rdb) rocksdb_close(db->rdb);
    char *e = NULL;
    db->rdb = rocksdb_open(db->opts, db->dir, &e);
    int rc = 0;
    if (db->rdb) {
        PSC_INFO("checkpoint store %s reopened after a failed write (%s): checkpoints are written again", db->dir,
                 db->write_failed);
        free(db->write_failed);
        db->write_failed = NULL;
        db->bg_errors = 0;
        char why[320];
        if (ckpt_sst_cleanup(db, why, sizeof why)) PSC_WARN("checkpoint store %s: %s", db->dir, why);
    } else {
        rc = psc_seterr(err, errlen, PSC_EIO, "checkpoint store %s: reopening it after a failed write (%s) failed: %s",
                        db->dir, db->write_failed, e ? e : "unknown error");
        PSC_ERROR("%s", err);
        char *e2 = NULL;
        db->rdb = rocksdb_open_for_read_only(db->opts, db->dir, 0, &e2);
        rocksdb_free(e2);
    }
    rocksdb_free(e);
    pthread_rwlock_unlock(&db->life);
    return rc;
}

void ckpt_debug_skip_space_check(ckpt_db_t *db) { db->no_space_check = 1; }

void ckpt_debug_stop_after_ingest(ckpt_db_t *db, int on) { db->stop_after_ingest = on; }

/* Under wlock, before a write of `need` bytes: RocksDB's background errors
 * logged, a full disk refused before RocksDB sees it, and the store reopened
 * when a write failed before (once the disk has room again). */
static int write_begin(ckpt_db_t *db, uint64_t need, int compacts, const char *what, uint64_t id, char *err,
                       size_t errlen)
{
    check_background(db);
    int rc = check_space(db, need, compacts, what, id, err, errlen);
    if (rc) return rc;
    if (db->write_failed && (rc = reopen(db, err, errlen))) return rc;
    return 0;
}

/* Under wlock, after write_begin: writes b synced. A write that fails is
 * logged, and the store reopens before the next write. */
static int write_raw(ckpt_db_t *db, rocksdb_writebatch_t *b, const char *what, uint64_t id, char *err, size_t errlen)
{
    char *e = NULL;
    rocksdb_write(db->rdb, db->wsync, b, &e);
    if (!e) return 0;
    int rc = psc_seterr(err, errlen, PSC_EIO, "checkpoint %" PRIu64 ": %s in %s failed: %s", id, what, db->dir, e);
    PSC_ERROR("%s; the next checkpoint reopens the store once there is room", err);
    db->write_failed = psc_xstrdup(e);
    rocksdb_free(e);
    return rc;
}

/* Under wlock: writes b synced (write_begin, write_raw). */
static int write_batch(ckpt_db_t *db, rocksdb_writebatch_t *b, int compacts, const char *what, uint64_t id, char *err,
                       size_t errlen)
{
    size_t need = 0;
    rocksdb_writebatch_data(b, &need);
    int rc = write_begin(db, need, compacts, what, id, err, errlen);
    return rc ? rc : write_raw(db, b, what, id, err, errlen);
}

/* Under wlock, after a checkpoint's batch: its memtable goes to a table file
 * now, so a flush that fails (a full disk) fails this checkpoint, in the PS's
 * log, rather than a later one in RocksDB's background. */
static int flush_now(ckpt_db_t *db, uint64_t id, char *err, size_t errlen)
{
    rocksdb_flushoptions_t *fo = rocksdb_flushoptions_create();
    rocksdb_flushoptions_set_wait(fo, 1);
    char *e = NULL;
    rocksdb_flush(db->rdb, fo, &e);
    rocksdb_flushoptions_destroy(fo);
    if (!e) {
        check_background(db);
        return 0;
    }
    int rc = psc_seterr(err, errlen, PSC_EIO, "checkpoint %" PRIu64 ": flushing it to a table file in %s failed: %s",
                        id, db->dir, e);
    PSC_ERROR("%s; the next checkpoint reopens the store once there is room", err);
    if (!db->write_failed) db->write_failed = psc_xstrdup(e);
    rocksdb_free(e);
    return rc;
}

static void batch_delete_ckpt(rocksdb_writebatch_t *b, uint64_t id)
{
    char key[CKPT_KEY_MAX], lo[CKPT_RANGE_KEY_LEN + 1], hi[CKPT_RANGE_KEY_LEN + 1];
    size_t kl = ckpt_key_manifest(key, id);
    rocksdb_writebatch_delete(b, key, kl);
    ckpt_key_tensor_range(lo, hi, id);
    rocksdb_writebatch_delete_range(b, lo, CKPT_RANGE_KEY_LEN, hi, CKPT_RANGE_KEY_LEN);
    ckpt_key_row_range(lo, hi, id);
    rocksdb_writebatch_delete_range(b, lo, CKPT_RANGE_KEY_LEN, hi, CKPT_RANGE_KEY_LEN);
}

static uint32_t name_hash(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

int ckpt_writer_fail(ckpt_writer_t *w, int code, const char *fmt, ...)
{
    if (w->rc) return w->rc;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->msg, sizeof w->msg, fmt, ap);
    va_end(ap);
    w->rc = code;
    return code;
}

ckpt_writer_t *ckpt_begin(ckpt_db_t *db, uint64_t id, const char *job_id, int64_t step)
{
    PSC_ASSERT(db);
    ckpt_writer_t *w = psc_xcalloc(1, sizeof *w);
    w->db = db;
    w->id = id;
    w->step = step;
    w->batch = rocksdb_writebatch_create();
    w->nslots = 64;
    w->slots = psc_xcalloc(w->nslots, sizeof *w->slots);
    size_t jl = job_id ? strlen(job_id) : 0;
    if (jl < 1 || jl > CKPT_MAX_JOB_ID)
        ckpt_writer_fail(w, PSC_EINVAL, "checkpoint %" PRIu64 ": job id \"%.40s\" must have 1 to %d bytes", id,
                         job_id ? job_id : "(null)", CKPT_MAX_JOB_ID);
    else
        memcpy(w->job, job_id, jl + 1);
    return w;
}

void ckpt_set_step(ckpt_writer_t *w, int64_t step) { w->step = step; }

void ckpt_set_parent(ckpt_writer_t *w, uint64_t parent) { w->parent = parent; }

/* Finds name in the set; returns its slot (holding 0 when absent). */
static uint32_t *writer_slot(ckpt_writer_t *w, const char *name)
{
    uint32_t mask = w->nslots - 1;
    for (uint32_t i = name_hash(name) & mask;; i = (i + 1) & mask) {
        uint32_t *s = &w->slots[i];
        if (*s == 0 || strcmp(w->e[*s - 1].name, name) == 0) return s;
    }
}

int ckpt_has(ckpt_writer_t *w, const char *name) { return *writer_slot(w, name) != 0; }

static void writer_grow_slots(ckpt_writer_t *w)
{
    free(w->slots);
    w->nslots *= 2;
    w->slots = psc_xcalloc(w->nslots, sizeof *w->slots);
    for (uint32_t i = 0; i < w->n; i++) *writer_slot(w, w->e[i].name) = i + 1;
}

int ckpt_add(ckpt_writer_t *w, const char *name, const void *data, size_t len)
{
    PSC_ASSERT(w);
    if (w->rc) return w->rc;
    size_t nl = name ? strlen(name) : 0;
    if (nl < 1 || nl > CKPT_MAX_NAME)
        return ckpt_writer_fail(w, PSC_EINVAL, "checkpoint %" PRIu64 ": tensor name of %zu bytes (1 to %d allowed)",
                                w->id, nl, CKPT_MAX_NAME);
    if ((uint64_t)len > CKPT_MAX_TENSOR_BYTES)
        return ckpt_writer_fail(w, PSC_EINVAL,
                                "checkpoint %" PRIu64
                                ": tensor \"%s\" has %zu bytes, more than one value holds (%" PRIu64
                                "); partition the variable",
                                w->id, name, len, CKPT_MAX_TENSOR_BYTES);
    if (len && !data)
        return ckpt_writer_fail(w, PSC_EINVAL, "checkpoint %" PRIu64 ": tensor \"%s\": NULL data of %zu bytes", w->id,
                                name, len);
    if (w->n == UINT32_MAX - 1)
        return ckpt_writer_fail(w, PSC_EINVAL, "checkpoint %" PRIu64 ": too many tensors", w->id);
    if (*writer_slot(w, name))
        return ckpt_writer_fail(w, PSC_EEXISTS, "checkpoint %" PRIu64 ": tensor \"%s\" added twice", w->id, name);

    uint32_t crc = psc_crc32c(0, data, len);
    unsigned char hdr[CKPT_TENSOR_HEADER];
    ckpt_tensor_header(hdr, psc_crc32c_mask(crc), (uint64_t)len);
    char key[CKPT_KEY_MAX];
    size_t kl = ckpt_key_tensor(key, w->id, name);
    const char *keys[1] = {key};
    const size_t klens[1] = {kl};
    const char *vals[2] = {(const char *)hdr, len ? (const char *)data : ""};
    const size_t vlens[2] = {CKPT_TENSOR_HEADER, len};
    rocksdb_writebatch_putv(w->batch, 1, keys, klens, 2, vals, vlens);

    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 16;
        w->e = psc_xrealloc(w->e, (size_t)w->cap * sizeof *w->e);
    }
    w->e[w->n] = (ckpt_entry_t){.name = psc_xstrdup(name), .len = len, .mcrc = psc_crc32c_mask(crc)};
    w->n++;
    w->bytes += len;
    /* Load factor <= 1/2 keeps probes short. */
    if (2 * w->n > w->nslots)
        writer_grow_slots(w);
    else
        *writer_slot(w, name) = w->n;
    return 0;
}

void ckpt_abort(ckpt_writer_t *w)
{
    if (!w) return;
    for (uint32_t i = 0; i < w->n; i++) free(w->e[i].name);
    free(w->e);
    free(w->slots);
    for (uint32_t i = 0; i < w->ntab; i++) ckpt_wtable_free(&w->tab[i]);
    free(w->tab);
    rocksdb_writebatch_destroy(w->batch);
    free(w);
}

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Orders, checks and seals every table's rows (ckpt_sst_seal): before the
 * manifest, which records their digests. */
static int writer_seal_rows(ckpt_writer_t *w)
{
    for (uint32_t i = 0; i < w->ntab && !w->rc; i++) {
        char why[320];
        int rc = ckpt_sst_seal(&w->tab[i], w->id, why, sizeof why);
        if (rc) ckpt_writer_fail(w, rc, "%s", why);
    }
    return w->rc;
}

/* Under wlock, the checks passed: the rows (ingested as table files) then the
 * batch of tensors and manifest, the commit point, then the flush. */
static int prepare_write(ckpt_writer_t *w, char *err, size_t errlen)
{
    ckpt_db_t *db = w->db;
    size_t need = 0;
    rocksdb_writebatch_data(w->batch, &need);
    uint64_t rows = 0;
    for (uint32_t i = 0; i < w->ntab; i++) rows += ckpt_sst_bytes(&w->tab[i]);
    int ingested = 0;
    int rc = write_begin(db, need + rows, 1, "prepare", w->id, err, errlen);
    if (!rc) rc = ckpt_sst_ingest(db, w, &ingested, err, errlen);
    if (!rc && db->stop_after_ingest)
        return psc_seterr(err, errlen, PSC_EIO, "checkpoint %" PRIu64 ": stopped after its rows (tests)", w->id);
    if (!rc) rc = write_raw(db, w->batch, "prepare", w->id, err, errlen);
    /* A failure after the ingest leaves rows without a manifest: never read,
     * deleted by the reopen the failure calls for or by the next open. */
    if (!rc) rc = flush_now(db, w->id, err, errlen);
    return rc;
}

/* Under wlock: refuses an id that exists (key, kl: its manifest key). */
static int check_new_id(ckpt_writer_t *w, ckpt_view_t *v, const char *key, size_t kl, char *err, size_t errlen)
{
    rocksdb_pinnableslice_t *ps;
    int rc = ckpt_view_get(v, key, kl, &ps, err, errlen);
    if (rc || !ps) return rc;
    ckpt_manifest_t old;
    size_t n;
    const char *val = rocksdb_pinnableslice_value(ps, &n);
    if (ckpt_manifest_decode((const unsigned char *)val, n, w->id, &old, NULL, 0) == 0) {
        rc = psc_seterr(err, errlen, PSC_EEXISTS,
                        "checkpoint %" PRIu64 " exists (%s, job %s, step %" PRId64 "); ids are not reused", w->id,
                        old.info.committed ? "committed" : "prepared", old.info.job_id, old.info.step);
        ckpt_manifest_free(&old);
    } else {
        rc = psc_seterr(err, errlen, PSC_EEXISTS,
                        "checkpoint %" PRIu64 " exists (manifest damaged; ckpt_discard removes it)", w->id);
    }
    rocksdb_pinnableslice_destroy(ps);
    return rc;
}

/* Under wlock: the parent of a delta exists, is of the job, older, and agrees
 * on the record length of every table both declare. */
static int check_parent(ckpt_writer_t *w, ckpt_view_t *v, char *err, size_t errlen)
{
    if (!w->parent) return 0;
    if (w->parent >= w->id)
        return psc_seterr(err, errlen, PSC_EINVAL, "checkpoint %" PRIu64 ": parent %" PRIu64 " is not older", w->id,
                          w->parent);
    ckpt_manifest_t pm;
    char why[256];
    int rc = ckpt_manifest_load(v, w->parent, &pm, why, sizeof why);
    if (rc == PSC_ENOTFOUND)
        return psc_seterr(err, errlen, rc,
                          "checkpoint %" PRIu64 ": parent %" PRIu64
                          " not found (discarded, or deleted by keep-last-K?); write a base",
                          w->id, w->parent);
    if (rc) return psc_seterr(err, errlen, rc, "checkpoint %" PRIu64 ": parent: %s", w->id, why);
    if (strcmp(pm.info.job_id, w->job) != 0)
        rc = psc_seterr(err, errlen, PSC_EINVAL, "checkpoint %" PRIu64 ": parent %" PRIu64 " is of job %s, not %s",
                        w->id, w->parent, pm.info.job_id, w->job);
    for (uint32_t i = 0; i < w->ntab && !rc; i++) {
        const ckpt_table_t *t = ckpt_manifest_find_table(&pm, w->tab[i].t.name);
        if (t && t->record_len != w->tab[i].t.record_len)
            rc = psc_seterr(err, errlen, PSC_EINVAL,
                            "checkpoint %" PRIu64 ": table \"%s\" has records of %u bytes, but of %u in parent %" PRIu64
                            "; write a base",
                            w->id, t->name, w->tab[i].t.record_len, t->record_len, w->parent);
    }
    ckpt_manifest_free(&pm);
    return rc;
}

int ckpt_prepare(ckpt_writer_t *w, char *err, size_t errlen)
{
    PSC_ASSERT(w);
    ckpt_db_t *db = w->db;
    int rc = 0;
    if (!w->rc) writer_seal_rows(w);
    if (w->rc) {
        rc = psc_seterr(err, errlen, w->rc, "%s", w->msg);
        goto done;
    }
    ckpt_info_t info = {.id = w->id,
                        .step = w->step,
                        .committed = 0,
                        .ntensors = w->n,
                        .bytes = w->bytes,
                        .created_unix = wall_now(),
                        .parent = w->parent,
                        .ntables = w->ntab};
    memcpy(info.job_id, w->job, sizeof info.job_id);
    ckpt_table_t *tabs = psc_xcalloc(w->ntab ? w->ntab : 1, sizeof *tabs);
    for (uint32_t i = 0; i < w->ntab; i++) tabs[i] = w->tab[i].t; /* names borrowed */
    size_t mlen;
    unsigned char *mval = ckpt_manifest_encode(&info, w->e, tabs, &mlen);
    free(tabs);
    char key[CKPT_KEY_MAX];
    size_t kl = ckpt_key_manifest(key, w->id);
    rocksdb_writebatch_put(w->batch, key, kl, (const char *)mval, mlen);
    free(mval);

    pthread_mutex_lock(&db->wlock);
    ckpt_view_t v;
    view_latest(db, &v);
    rc = check_new_id(w, &v, key, kl, err, errlen);
    if (!rc) rc = check_parent(w, &v, err, errlen);
    if (!rc) rc = prepare_write(w, err, errlen);
    pthread_mutex_unlock(&db->wlock);
done:
    ckpt_abort(w);
    return rc;
}

/* ---- phase 2 ---- */

/* Under wlock, on a scan of the latest state: id (items[i], i < 0 when absent)
 * may be committed: undamaged, and its chain whole and committed. */
static int commit_check(const ckpt_scan_item_t *items, int n, int i, uint64_t id, char *err, size_t errlen)
{
    if (i < 0) return psc_seterr(err, errlen, PSC_ENOTFOUND, "checkpoint %" PRIu64 " is not prepared on this PS", id);
    if (items[i].rc) return psc_seterr(err, errlen, items[i].rc, "%s", items[i].msg);
    if (items[i].m.info.committed) return 0;
    int *chain, len;
    int rc = ckpt_chain(items, n, i, &chain, &len, err, errlen);
    for (int k = 1; k < len && !rc; k++)
        if (!items[chain[k]].m.info.committed)
            rc = psc_seterr(err, errlen, PSC_EINVAL,
                            "checkpoint %" PRIu64 ": its chain holds checkpoint %" PRIu64
                            ", which is prepared, not committed: commit that one first",
                            id, items[chain[k]].id);
    free(chain);
    return rc;
}

/* Writes the committed manifest of id: the prepared one with the state byte
 * flipped and its CRC recomputed; nothing else may change. */
static int commit_write(ckpt_db_t *db, uint64_t id, char *err, size_t errlen)
{
    char key[CKPT_KEY_MAX];
    size_t kl = ckpt_key_manifest(key, id);
    ckpt_view_t v;
    view_latest(db, &v);
    rocksdb_pinnableslice_t *ps;
    int rc = ckpt_view_get(&v, key, kl, &ps, err, errlen);
    if (rc) return rc;
    PSC_ASSERT(ps); /* under wlock, just scanned */
    size_t n;
    const char *val = rocksdb_pinnableslice_value(ps, &n);
    unsigned char *mval = psc_xmalloc(n);
    memcpy(mval, val, n);
    rocksdb_pinnableslice_destroy(ps);
    ckpt_manifest_set_committed(mval, n);
    rocksdb_writebatch_t *b = rocksdb_writebatch_create();
    rocksdb_writebatch_put(b, key, kl, (const char *)mval, n);
    free(mval);
    rc = write_batch(db, b, 0, "commit", id, err, errlen);
    rocksdb_writebatch_destroy(b);
    return rc;
}

/* Keep-last-K over the job of items[i], just committed: keeps the newest keep
 * committed ones, the prepared ones newer than it, and what their chains reach;
 * deletes the rest of the job in one write. A damaged manifest's job is
 * unknown: it is left for ckpt_discard. *deleted (malloc'd) receives the ids to
 * compact. */
static int keep_last_k(ckpt_db_t *db, const ckpt_scan_item_t *items, int n, int i, int keep, uint64_t **deleted,
                       int *ndeleted, char *err, size_t errlen)
{
    uint64_t id = items[i].id;
    const char *job = items[i].m.info.job_id;
    unsigned char *need = psc_xcalloc((size_t)n + 1, 1); /* 1 = kept, 2 = reached by a kept chain */
    int kept = 0;
    for (int j = n - 1; j >= 0; j--) { /* newest first */
        const ckpt_info_t *in = &items[j].m.info;
        if (items[j].rc || strcmp(in->job_id, job) != 0) continue;
        if (in->committed ? ++kept <= keep : in->id > id) need[j] = 1;
    }
    for (int j = n - 1; j >= 0; j--) {
        if (need[j] != 1) continue;
        for (int cur = j; items[cur].m.info.parent != 0;) {
            int k = ckpt_scan_find(items, n, items[cur].m.info.parent);
            if (k < 0 || items[k].rc || (need[k] & 2)) break; /* broken, or walked already */
            need[k] |= 2;
            cur = k;
        }
    }
    uint64_t *del = psc_xcalloc((size_t)n + 1, sizeof *del);
    int nd = 0;
    rocksdb_writebatch_t *b = rocksdb_writebatch_create();
    for (int j = 0; j < n; j++) {
        if (items[j].rc || need[j] || strcmp(items[j].m.info.job_id, job) != 0) continue;
        batch_delete_ckpt(b, items[j].id);
        del[nd++] = items[j].id;
    }
    char why[320];
    int rc = nd ? write_batch(db, b, 0, "deleting old checkpoints", id, why, sizeof why) : 0;
    if (rc) {
        psc_seterr(err, errlen, rc, "checkpoint %" PRIu64 " committed, but keep-last-K failed: %s", id, why);
        nd = 0;
    }
    rocksdb_writebatch_destroy(b);
    free(need);
    *deleted = del;
    *ndeleted = nd;
    return rc;
}

int ckpt_commit(ckpt_db_t *db, uint64_t id, int keep, char *err, size_t errlen)
{
    PSC_ASSERT(db);
    if (keep < 1) return psc_seterr(err, errlen, PSC_EINVAL, "checkpoint %" PRIu64 ": keep %d must be >= 1", id, keep);
    uint64_t *deleted = NULL;
    int ndeleted = 0;

    pthread_mutex_lock(&db->wlock);
    ckpt_view_t v;
    view_latest(db, &v);
    ckpt_scan_item_t *items;
    int n;
    char why[320];
    int rc = ckpt_scan_manifests(&v, &items, &n, why, sizeof why);
    if (rc) {
        psc_seterr(err, errlen, rc, "checkpoint %" PRIu64 " not committed: %s", id, why);
        goto unlock;
    }
    int i = ckpt_scan_find(items, n, id);
    rc = commit_check(items, n, i, id, err, errlen);
    /* Committing twice: a no-op. */
    if (rc == 0 && !items[i].m.info.committed) {
        rc = commit_write(db, id, err, errlen);
        if (rc == 0) {
            items[i].m.info.committed = 1;
            rc = keep_last_k(db, items, n, i, keep, &deleted, &ndeleted, err, errlen);
        }
    }
    ckpt_scan_free(items, n);
unlock:
    pthread_mutex_unlock(&db->wlock);
    ckpt_bg_compact(db, deleted, ndeleted); /* their disk space, in the background */
    free(deleted);
    return rc;
}

int ckpt_discard(ckpt_db_t *db, uint64_t id, char *err, size_t errlen)
{
    PSC_ASSERT(db);
    pthread_mutex_lock(&db->wlock);
    ckpt_view_t v;
    view_latest(db, &v);
    ckpt_manifest_t m;
    char why[256];
    int rc = ckpt_manifest_load(&v, id, &m, why, sizeof why);
    if (rc == PSC_ENOTFOUND || rc == PSC_EIO || rc == PSC_EUNSUPPORTED) {
        psc_seterr(err, errlen, rc, "%s", why);
        goto unlock;
    }
    if (rc == 0 && m.info.committed) {
        rc = psc_seterr(err, errlen, PSC_EINVAL,
                        "checkpoint %" PRIu64 " is committed; only keep-last-K of a later commit deletes it", id);
        ckpt_manifest_free(&m);
        goto unlock;
    }
    /* Prepared, or damaged (rc == PSC_ECORRUPT): delete it either way. */
    ckpt_manifest_free(&m);
    rocksdb_writebatch_t *b = rocksdb_writebatch_create();
    batch_delete_ckpt(b, id);
    rc = write_batch(db, b, 0, "discard", id, err, errlen);
    rocksdb_writebatch_destroy(b);
unlock:
    pthread_mutex_unlock(&db->wlock);
    if (rc == 0) ckpt_bg_compact(db, &id, 1);
    return rc;
}

/* ---- reading ---- */

int ckpt_list(ckpt_db_t *db, ckpt_info_t **out, int *n, char *err, size_t errlen)
{
    PSC_ASSERT(db);
    *out = NULL;
    *n = 0;
    ckpt_view_t v;
    ckpt_view_open(db, &v);
    ckpt_scan_item_t *items;
    int nitems;
    int rc = ckpt_scan_manifests(&v, &items, &nitems, err, errlen);
    ckpt_view_close(&v);
    if (rc) return rc;
    for (int i = 0; i < nitems; i++)
        if (items[i].rc) {
            rc = psc_seterr(err, errlen, items[i].rc, "%s", items[i].msg);
            ckpt_scan_free(items, nitems);
            return rc;
        }
    ckpt_scan_needed_by(items, nitems);
    ckpt_info_t *infos = nitems ? psc_xcalloc((size_t)nitems, sizeof *infos) : NULL;
    for (int i = 0; i < nitems; i++) infos[i] = items[i].m.info;
    ckpt_scan_free(items, nitems);
    *out = infos;
    *n = nitems;
    return 0;
}

int ckpt_get_info(ckpt_db_t *db, uint64_t id, ckpt_info_t *out, char *err, size_t errlen)
{
    PSC_ASSERT(db);
    ckpt_view_t v;
    ckpt_view_open(db, &v);
    ckpt_scan_item_t *items;
    int n;
    int rc = ckpt_scan_manifests(&v, &items, &n, err, errlen);
    ckpt_view_close(&v);
    if (rc) return rc;
    int i = ckpt_scan_find(items, n, id);
    if (i < 0)
        rc = psc_seterr(err, errlen, PSC_ENOTFOUND, "checkpoint %" PRIu64 " not found", id);
    else if (items[i].rc)
        rc = psc_seterr(err, errlen, items[i].rc, "%s", items[i].msg);
    else {
        ckpt_scan_needed_by(items, n);
        *out = items[i].m.info;
    }
    ckpt_scan_free(items, n);
    return rc;
}

int ckpt_read(ckpt_db_t *db, uint64_t id, const char *name, void **data, size_t *len, char *err, size_t errlen)
{
    PSC_ASSERT(db && data && len);
    *data = NULL;
    *len = 0;
    if (!name) return psc_seterr(err, errlen, PSC_EINVAL, "checkpoint %" PRIu64 ": NULL tensor name", id);
    ckpt_view_t v;
    ckpt_view_open(db, &v);
    ckpt_manifest_t m;
    int rc = ckpt_manifest_load(&v, id, &m, err, errlen);
    if (rc) goto out;
    const ckpt_entry_t *e = ckpt_manifest_find(&m, name);
    if (!e) {
        rc = psc_seterr(err, errlen, PSC_ENOTFOUND, "checkpoint %" PRIu64 " has no tensor \"%s\"", id, name);
        goto out;
    }
    rc = tensor_check(&v, id, e, data, err, errlen);
    if (!rc) *len = (size_t)e->len;
out:
    ckpt_manifest_free(&m);
    ckpt_view_close(&v);
    return rc;
}

int ckpt_names(ckpt_db_t *db, uint64_t id, char ***names, int *n, char *err, size_t errlen)
{
    PSC_ASSERT(db && names && n);
    *names = NULL;
    *n = 0;
    ckpt_manifest_t m;
    int rc = ckpt_manifest_read(db, id, &m, err, errlen);
    if (rc) return rc;
    if (m.info.ntensors > INT32_MAX) {
        ckpt_manifest_free(&m);
        return psc_seterr(err, errlen, PSC_ECORRUPT, "checkpoint %" PRIu64 ": %u tensors", id, m.info.ntensors);
    }
    char **a = psc_xcalloc(m.info.ntensors ? m.info.ntensors : 1, sizeof *a);
    for (uint32_t i = 0; i < m.info.ntensors; i++) {
        a[i] = m.e[i].name; /* moved, not copied */
        m.e[i].name = NULL;
    }
    *names = a;
    *n = (int)m.info.ntensors;
    ckpt_manifest_free(&m);
    return 0;
}

void ckpt_free_names(char **names, int n)
{
    if (!names) return;
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}
