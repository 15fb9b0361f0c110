/* ckpt_sst.c — a writer's rows on their way to disk, as table files (SST)
 * that RocksDB ingests, instead of a WriteBatch through the WAL and the
 * memtable (which cost 5 s for 10^6 rows, the WAL on or off: the memtable
 * inserts; tests/bench/NOTES.md, "bench_ckpt").
 *
 * Design:
 * - ckpt_add_row only copies the row into its table's buffer (ckpt_wtable_t:
 *   row id, then the value as it will be stored): it runs inside the store's
 *   cut, where pushes wait. ckpt_sst_seal, at prepare and under no lock,
 *   orders the rows (an LSD radix sort over the row ids' bytes that differ,
 *   unless they came in order), refuses duplicates, and fills each value's
 *   CRC and the table's digest, before the manifest is encoded.
 * - ckpt_sst_ingest writes each table's rows, in key order, into table files
 *   in <dir>/ingest (the same file system as the store: the ingest moves a
 *   file by a hard link, no copy; the file writer syncs it): a big table is
 *   cut into up to CKPT_SST_THREADS key ranges written at once, one thread
 *   each. It ingests all the files in one call, which RocksDB applies
 *   atomically. The manifest's
 *   batch (ckpt.c) is written after it and stays the one commit point of a
 *   prepare: rows without a manifest are never read (readers reach rows only
 *   through manifests: ckpt_rows.c), and ckpt_sst_cleanup deletes them at
 *   the next open or reopen; a prepare of the same id deletes them first.
 * Invariants: the rows of a checkpoint reach the store only through
 * ckpt_sst_ingest, under wlock, right before that checkpoint's manifest.
 * Calls ckpt_format.c and ckpt_bg.c of this module, nothing above.
 */
#include "ckpt.h"
#include "ckpt_internal.h"

#include "bytes.h"
#include "crc32c.h"
#include "log.h"
#include "psc.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rocksdb/c.h>

#define INGEST_DIR "ingest"
/* Table files of one prepare written at once (each a key range of a table),
 * and the fewest rows worth a file of their own. */
#define CKPT_SST_THREADS 4
#define CKPT_SST_MIN_ROWS 131072

/* ---- the row buffer ---- */

size_t ckpt_wtable_stride(const ckpt_wtable_t *t) { return CKPT_WROW_ID + CKPT_ROW_HEADER + t->t.record_len; }

void ckpt_wtable_append(ckpt_wtable_t *t, int64_t row, const void *rec, size_t len)
{
    size_t stride = ckpt_wtable_stride(t);
    if (t->t.rows == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 1024;
        t->buf = psc_xrealloc(t->buf, (size_t)t->cap * stride);
    }
    unsigned char *e = t->buf + (size_t)t->t.rows * stride;
    memcpy(e, &row, 8);
    ckpt_row_header(e + CKPT_WROW_ID, 0, (uint32_t)len); /* the CRC comes at seal */
    if (len) memcpy(e + CKPT_WROW_ID + CKPT_ROW_HEADER, rec, len);
    if (t->t.rows && row < t->last) t->sorted = 0;
    t->last = row;
    t->t.rows++;
}

void ckpt_wtable_free(ckpt_wtable_t *t)
{
    free(t->t.name);
    free(t->buf);
    free(t->order);
}

static int64_t entry_row(const unsigned char *e)
{
    int64_t row;
    memcpy(&row, e, 8);
    return row;
}

/* The entries' indexes in ascending row order: an LSD radix sort of (row,
 * index) pairs by bytes, skipping the bytes every row shares (row ids below
 * 2^24: three passes). Stable, so equal rows stay adjacent. */
static uint64_t *sort_rows(const unsigned char *buf, uint64_t n, size_t stride)
{
    typedef struct pair {
        uint64_t key, idx;
    } pair_t;
    pair_t *a = psc_xmalloc((size_t)n * sizeof *a), *b = psc_xmalloc((size_t)n * sizeof *b);
    size_t(*hist)[256] = psc_xcalloc(8, sizeof *hist);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t k = (uint64_t)entry_row(buf + (size_t)i * stride);
        a[i] = (pair_t){k, i};
        for (int d = 0; d < 8; d++) hist[d][(k >> (8 * d)) & 0xff]++;
    }
    for (int d = 0; d < 8; d++) {
        size_t *h = hist[d];
        if (h[(a[0].key >> (8 * d)) & 0xff] == n) continue; /* every row has this byte */
        size_t sum = 0;
        for (int v = 0; v < 256; v++) {
            size_t c = h[v];
            h[v] = sum;
            sum += c;
        }
        for (uint64_t i = 0; i < n; i++) b[h[(a[i].key >> (8 * d)) & 0xff]++] = a[i];
        pair_t *x = a;
        a = b;
        b = x;
    }
    uint64_t *order = (uint64_t *)b; /* n pairs hold n indexes twice over */
    for (uint64_t i = 0; i < n; i++) order[i] = a[i].idx;
    free(a);
    free(hist);
    return order;
}

int ckpt_sst_seal(ckpt_wtable_t *t, uint64_t id, char *err, size_t errlen)
{
    size_t stride = ckpt_wtable_stride(t);
    uint64_t n = t->t.rows;
    if (!t->sorted && n > 1) {
        t->order = sort_rows(t->buf, n, stride);
        for (uint64_t k = 1; k < n; k++) {
            int64_t row = entry_row(t->buf + (size_t)t->order[k] * stride);
            if (row == entry_row(t->buf + (size_t)t->order[k - 1] * stride))
                return psc_seterr(err, errlen, PSC_EEXISTS,
                                  "checkpoint %" PRIu64 ": table \"%s\": row %" PRId64 " added twice", id, t->t.name,
                                  row);
        }
    }
    uint64_t digest = 0;
    for (uint64_t i = 0; i < n; i++) {
        unsigned char *e = t->buf + (size_t)i * stride;
        unsigned char *hdr = e + CKPT_WROW_ID;
        uint32_t len = psc_le_get32(hdr + 8);
        uint32_t mcrc = psc_crc32c_mask(psc_crc32c(0, hdr + CKPT_ROW_HEADER, len));
        psc_le_put32(hdr + 4, mcrc);
        digest += ckpt_row_digest(entry_row(e), mcrc);
    }
    t->t.digest = digest;
    return 0;
}

uint64_t ckpt_sst_bytes(const ckpt_wtable_t *t)
{
    /* key, value, and RocksDB's per-entry overhead (a few bytes) */
    return t->t.rows * (uint64_t)(t->plen + 8 + CKPT_ROW_HEADER + t->t.record_len + 8);
}

/* ---- table files ---- */

/* Writes the sealed rows [lo, hi) of t (in key order), into a new table file
 * at path (synced by the file writer's finish). */
static int sst_write(ckpt_db_t *db, uint64_t id, const ckpt_wtable_t *t, uint64_t lo, uint64_t hi, const char *path,
                     char *err, size_t errlen)
{
    rocksdb_envoptions_t *eo = rocksdb_envoptions_create();
    rocksdb_sstfilewriter_t *sw = rocksdb_sstfilewriter_create(eo, db->opts);
    char *e = NULL;
    rocksdb_sstfilewriter_open(sw, path, &e);
    size_t stride = ckpt_wtable_stride(t);
    char key[CKPT_ROW_KEY_MAX];
    memcpy(key, t->key, t->plen);
    for (uint64_t k = lo; k < hi && !e; k++) {
        const unsigned char *ent = t->buf + (size_t)(t->order ? t->order[k] : k) * stride;
        const unsigned char *val = ent + CKPT_WROW_ID;
        ckpt_key_row_set(key, t->plen, entry_row(ent));
        rocksdb_sstfilewriter_put(sw, key, t->plen + 8, (const char *)val, CKPT_ROW_HEADER + psc_le_get32(val + 8), &e);
    }
    if (!e) rocksdb_sstfilewriter_finish(sw, &e);
    rocksdb_sstfilewriter_destroy(sw);
    rocksdb_envoptions_destroy(eo);
    if (!e) return 0;
    int rc = psc_seterr(err, errlen, PSC_EIO, "checkpoint %" PRIu64 ": writing the rows of table \"%s\" to %s: %s", id,
                        t->t.name, path, e);
    rocksdb_free(e);
    return rc;
}

/* One table file to write: the rows [lo, hi) of a table, in key order. */
typedef struct sst_job {
    const ckpt_wtable_t *t;
    uint64_t lo, hi;
    char path[4096 + 64];
    int rc;
    char msg[400];
} sst_job_t;

typedef struct sst_pool {
    ckpt_db_t *db;
    uint64_t id;
    sst_job_t *jobs;
    int n;
    atomic_int next; /* the next job to take */
} sst_pool_t;

static void *sst_worker(void *arg)
{
    sst_pool_t *p = arg;
    for (int k; (k = atomic_fetch_add(&p->next, 1)) < p->n;) {
        sst_job_t *j = &p->jobs[k];
        j->rc = sst_write(p->db, p->id, j->t, j->lo, j->hi, j->path, j->msg, sizeof j->msg);
    }
    return NULL;
}

/* The files of w's rows: each table cut into up to CKPT_SST_THREADS key
 * ranges of at least CKPT_SST_MIN_ROWS rows (the same files on any host), so
 * that they can be written in parallel. Ranges of one table do not overlap:
 * RocksDB ingests them together. */
static sst_job_t *sst_jobs(ckpt_db_t *db, ckpt_writer_t *w, int *n)
{
    int cap = 0;
    for (uint32_t i = 0; i < w->ntab; i++)
        if (w->tab[i].t.rows) cap += CKPT_SST_THREADS;
    sst_job_t *jobs = psc_xcalloc((size_t)(cap ? cap : 1), sizeof *jobs);
    int m = 0;
    for (uint32_t i = 0; i < w->ntab; i++) {
        const ckpt_wtable_t *t = &w->tab[i];
        if (!t->t.rows) continue;
        uint64_t parts = PSC_MIN((uint64_t)CKPT_SST_THREADS, (t->t.rows + CKPT_SST_MIN_ROWS - 1) / CKPT_SST_MIN_ROWS);
        for (uint64_t c = 0; c < parts; c++) {
            sst_job_t *j = &jobs[m++];
            j->t = t;
            j->lo = t->t.rows * c / parts;
            j->hi = t->t.rows * (c + 1) / parts;
            snprintf(j->path, sizeof j->path, "%s/" INGEST_DIR "/%016" PRIx64 "-%u-%" PRIu64 ".sst", db->dir, w->id, i,
                     c);
        }
    }
    *n = m;
    return jobs;
}

/* Writes the jobs' files, on up to `threads` threads (this one among them).
 * The first failure, or 0. */
static int sst_write_all(ckpt_db_t *db, uint64_t id, sst_job_t *jobs, int n, int threads, char *err, size_t errlen)
{
    sst_pool_t p = {.db = db, .id = id, .jobs = jobs, .n = n};
    atomic_init(&p.next, 0);
    int nth = PSC_MIN(threads, n) - 1, started = 0;
    pthread_t th[CKPT_SST_THREADS];
    for (; started < nth; started++)
        if (pthread_create(&th[started], NULL, sst_worker, &p) != 0) break; /* fewer threads: still done */
    sst_worker(&p);
    for (int k = 0; k < started; k++) pthread_join(th[k], NULL);
    for (int k = 0; k < n; k++)
        if (jobs[k].rc) return psc_seterr(err, errlen, jobs[k].rc, "%s", jobs[k].msg);
    return 0;
}

/* Under wlock: a synced write of b. RocksDB's failure marks the store for a
 * reopen, as every failed write does (ckpt.c, write_batch). */
static int write_synced(ckpt_db_t *db, rocksdb_writebatch_t *b, const char *what, char *err, size_t errlen)
{
    char *e = NULL;
    rocksdb_write(db->rdb, db->wsync, b, &e);
    if (!e) return 0;
    int rc = psc_seterr(err, errlen, PSC_EIO, "checkpoint store %s: %s failed: %s", db->dir, what, e);
    if (!db->write_failed) db->write_failed = psc_xstrdup(e);
    rocksdb_free(e);
    return rc;
}

/* Under wlock: deletes the rows of id that a prepare which never wrote its
 * manifest left (none, nearly always: one seek). */
static int clear_rows(ckpt_db_t *db, uint64_t id, char *err, size_t errlen)
{
    char lo[CKPT_RANGE_KEY_LEN + 1], hi[CKPT_RANGE_KEY_LEN + 1];
    ckpt_key_row_range(lo, hi, id);
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    rocksdb_readoptions_set_iterate_upper_bound(ro, hi, CKPT_RANGE_KEY_LEN);
    rocksdb_iterator_t *it = rocksdb_create_iterator(db->rdb, ro);
    rocksdb_iter_seek(it, lo, CKPT_RANGE_KEY_LEN);
    int left = rocksdb_iter_valid(it);
    rocksdb_iter_destroy(it);
    rocksdb_readoptions_destroy(ro);
    if (!left) return 0;
    PSC_WARN("checkpoint %" PRIu64 ": deleting the rows an earlier prepare of it left without a manifest", id);
    rocksdb_writebatch_t *b = rocksdb_writebatch_create();
    rocksdb_writebatch_delete_range(b, lo, CKPT_RANGE_KEY_LEN, hi, CKPT_RANGE_KEY_LEN);
    int rc = write_synced(db, b, "deleting rows left without a manifest", err, errlen);
    rocksdb_writebatch_destroy(b);
    return rc;
}

int ckpt_sst_ingest(ckpt_db_t *db, ckpt_writer_t *w, int *ingested, char *err, size_t errlen)
{
    *ingested = 0;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = (int)PSC_MAX(1, PSC_MIN((long)CKPT_SST_THREADS, cpus));
    int n;
    sst_job_t *jobs = sst_jobs(db, w, &n);
    if (!n) {
        free(jobs);
        return 0;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/" INGEST_DIR, db->dir);
    int e0 = psc_mkdir_p(dir);
    int rc = e0 ? psc_seterr(err, errlen, PSC_EIO, "checkpoint %" PRIu64 ": cannot create %s: %s", w->id, dir,
                             strerror(e0))
                : clear_rows(db, w->id, err, errlen);
    if (!rc) rc = sst_write_all(db, w->id, jobs, n, threads, err, errlen);
    const char **paths = psc_xcalloc((size_t)n, sizeof *paths);
    for (int k = 0; k < n; k++) paths[k] = jobs[k].path;
    if (!rc) {
        rocksdb_ingestexternalfileoptions_t *io = rocksdb_ingestexternalfileoptions_create();
        rocksdb_ingestexternalfileoptions_set_move_files(io, 1);
        char *e = NULL;
        rocksdb_ingest_external_file(db->rdb, paths, (size_t)n, io, &e);
        rocksdb_ingestexternalfileoptions_destroy(io);
        if (e) {
            rc = psc_seterr(err, errlen, PSC_EIO, "checkpoint %" PRIu64 ": ingesting its rows into %s failed: %s",
                            w->id, db->dir, e);
            if (!db->write_failed) db->write_failed = psc_xstrdup(e);
            rocksdb_free(e);
        } else {
            *ingested = 1;
        }
    }
    /* Moved into the store, or never ingested: either way not needed here */
    for (int k = 0; k < n; k++)
        if (unlink(paths[k]) != 0 && errno != ENOENT) PSC_WARN("cannot remove %s: %s", paths[k], strerror(errno));
    free(paths);
    free(jobs);
    return rc;
}

/* ---- what a prepare that stopped left ---- */

/* Removes every file in <dir>/ingest: table files of a prepare that stopped
 * before its ingest. */
static void cleanup_files(ckpt_db_t *db)
{
    char dir[4096], path[4096 + 260];
    snprintf(dir, sizeof dir, "%s/" INGEST_DIR, db->dir);
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *de; (de = readdir(d));) {
        if (de->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        if (unlink(path) == 0)
            PSC_INFO("checkpoint store %s: removed %s, left by a prepare that stopped", db->dir, path);
    }
    closedir(d);
}

int ckpt_sst_cleanup(ckpt_db_t *db, char *err, size_t errlen)
{
    cleanup_files(db);
    if (!db->rdb) return 0;
    /* One seek per checkpoint id that has rows: "r/<16 hex>/..." */
    static const char lo[] = "r/", hi[] = "r0";
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    rocksdb_readoptions_set_iterate_upper_bound(ro, hi, 2);
    rocksdb_iterator_t *it = rocksdb_create_iterator(db->rdb, ro);
    rocksdb_writebatch_t *b = rocksdb_writebatch_create();
    uint64_t *gone = NULL;
    int orphans = 0, rc = 0;
    rocksdb_iter_seek(it, lo, 2);
    while (rocksdb_iter_valid(it)) {
        size_t kl;
        const char *k = rocksdb_iter_key(it, &kl);
        char mkey[CKPT_KEY_MAX], rlo[CKPT_RANGE_KEY_LEN + 1], rhi[CKPT_RANGE_KEY_LEN + 1];
        uint64_t id;
        if (kl < CKPT_RANGE_KEY_LEN) {
            rocksdb_iter_next(it); /* not a row key: verification reports what it finds */
            continue;
        }
        memcpy(mkey, "m/", 2);
        memcpy(mkey + 2, k + 2, CKPT_ID_HEX);
        if (ckpt_parse_manifest_key(mkey, 2 + CKPT_ID_HEX, &id) != 0) {
            rocksdb_iter_next(it);
            continue;
        }
        ckpt_key_row_range(rlo, rhi, id);
        char *e = NULL;
        size_t vl;
        char *val = rocksdb_get(db->rdb, db->rplain, mkey, 2 + CKPT_ID_HEX, &vl, &e);
        if (e) {
            rc = psc_seterr(err, errlen, PSC_EIO, "checkpoint store %s: reading %.18s: %s", db->dir, mkey, e);
            rocksdb_free(e);
            break;
        }
        if (!val) {
            rocksdb_writebatch_delete_range(b, rlo, CKPT_RANGE_KEY_LEN, rhi, CKPT_RANGE_KEY_LEN);
            gone = psc_xrealloc(gone, (size_t)(orphans + 1) * sizeof *gone);
            gone[orphans++] = id;
            PSC_INFO("checkpoint store %s: deleting the rows of checkpoint %" PRIu64
                     ", which has no manifest (its prepare stopped before writing it)",
                     db->dir, id);
        }
        rocksdb_free(val);
        rocksdb_iter_seek(it, rhi, CKPT_RANGE_KEY_LEN); /* the next id */
    }
    char *e = NULL;
    rocksdb_iter_get_error(it, &e);
    if (e && !rc) rc = psc_seterr(err, errlen, PSC_EIO, "checkpoint store %s: listing rows: %s", db->dir, e);
    rocksdb_free(e);
    rocksdb_iter_destroy(it);
    rocksdb_readoptions_destroy(ro);
    if (!rc && orphans) rc = write_synced(db, b, "deleting rows without a manifest", err, errlen);
    if (!rc) ckpt_bg_compact(db, gone, orphans); /* their disk space */
    rocksdb_writebatch_destroy(b);
    free(gone);
    return rc;
}
