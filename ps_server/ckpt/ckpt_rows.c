/* ckpt_rows.c — the rows of sparse tables in checkpoints, and what depends on
 * them: adding rows to a writer, reading a table as of a checkpoint, verifying
 * a checkpoint with its chain (ckpt_verify, ckpt_latest_good), the tests-only
 * helpers. Format and contracts: ckpt.h; below it: ckpt.c (views, manifest
 * scans, tensor checks) and ckpt_format.c (bytes, chains).
 *
 * Design:
 * - ckpt_add_row checks the row and copies it into its table's buffer, nothing
 *   more (it runs inside the store's cut, where pushes wait); ckpt_prepare
 *   orders, checks and seals the buffers and writes them as table files
 *   (ckpt_sst.c).
 * - A table as of checkpoint c (ckpt_read_rows) is a k-way merge of the
 *   T-chain's checkpoints: each one's rows of the table are one key range,
 *   already in ascending row order, read by one iterator on one snapshot; a
 *   heap keyed by (row, position in the chain) gives the next row and its
 *   newest version, and every iterator at that row moves on. Each row version
 *   of the chain is read once, sequentially; no seek per row, and nothing
 *   outside the chain is touched. Only the version passed on has its CRC
 *   checked; every version is counted against its checkpoint's manifest.
 * - Verification reads each chain checkpoint's rows of a table the same way and
 *   checks every version (key, length, CRC) and the count and digest the
 *   manifest recorded: a lost, extra or replaced version is found.
 * Invariants: readers use one snapshot per call (ckpt_view_t); nothing here
 * writes but the writer's batch and the debug helpers.
 */
#include "ckpt.h"
#include "ckpt_internal.h"

#include "crc32c.h"
#include "psc.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rocksdb/c.h>

/* ---- writing rows ---- */

/* Index of the declared table, or -1. The last one used is tried first: rows
 * come table by table. */
static int writer_table(ckpt_writer_t *w, const char *table)
{
    if (w->last_tab < w->ntab && strcmp(w->tab[w->last_tab].t.name, table) == 0) return (int)w->last_tab;
    for (uint32_t i = 0; i < w->ntab; i++)
        if (strcmp(w->tab[i].t.name, table) == 0) {
            w->last_tab = i;
            return (int)i;
        }
    return -1;
}

int ckpt_has_table(ckpt_writer_t *w, const char *table) { return writer_table(w, table) >= 0; }

int ckpt_add_table(ckpt_writer_t *w, const char *table, uint32_t record_len)
{
    PSC_ASSERT(w);
    if (w->rc) return w->rc;
    size_t nl = table ? strlen(table) : 0;
    if (nl < 1 || nl > CKPT_MAX_NAME)
        return ckpt_writer_fail(w, PSC_EINVAL, "checkpoint %" PRIu64 ": table name of %zu bytes (1 to %d allowed)",
                                w->id, nl, CKPT_MAX_NAME);
    if (record_len < 1 || record_len > CKPT_MAX_RECORD)
        return ckpt_writer_fail(w, PSC_EINVAL,
                                "checkpoint %" PRIu64 ": table \"%s\": records of %u bytes (1 to %u allowed)", w->id,
                                table, record_len, CKPT_MAX_RECORD);
    if (writer_table(w, table) >= 0)
        return ckpt_writer_fail(w, PSC_EEXISTS, "checkpoint %" PRIu64 ": table \"%s\" declared twice", w->id, table);
    if (w->ntab == CKPT_MAX_TABLES)
        return ckpt_writer_fail(w, PSC_EINVAL, "checkpoint %" PRIu64 ": more than %d tables", w->id, CKPT_MAX_TABLES);
    if (w->ntab == w->tabcap) {
        w->tabcap = w->tabcap ? 2 * w->tabcap : 4;
        w->tab = psc_xrealloc(w->tab, (size_t)w->tabcap * sizeof *w->tab);
    }
    ckpt_wtable_t *t = &w->tab[w->ntab++];
    memset(t, 0, sizeof *t);
    t->t.name = psc_xstrdup(table);
    t->t.record_len = record_len;
    t->plen = ckpt_key_row_prefix(t->key, w->id, table);
    t->sorted = 1;
    return 0;
}

int ckpt_add_row(ckpt_writer_t *w, const char *table, int64_t row, const void *rec, size_t len)
{
    PSC_ASSERT(w);
    if (w->rc) return w->rc;
    int ti = table ? writer_table(w, table) : -1;
    if (ti < 0)
        return ckpt_writer_fail(w, PSC_EINVAL,
                                "checkpoint %" PRIu64 ": row %" PRId64
                                " of table \"%.200s\", which is not declared (ckpt_add_table first)",
                                w->id, row, table ? table : "(null)");
    ckpt_wtable_t *t = &w->tab[ti];
    if (row < 0)
        return ckpt_writer_fail(w, PSC_EINVAL, "checkpoint %" PRIu64 ": table \"%s\": negative row %" PRId64, w->id,
                                t->t.name, row);
    int dead = !rec && len == 0;
    if (!dead && (!rec || len != t->t.record_len))
        return ckpt_writer_fail(w, PSC_EINVAL,
                                "checkpoint %" PRIu64 ": table \"%s\" row %" PRId64
                                ": record of %zu bytes%s, the table's have %u",
                                w->id, t->t.name, row, len, rec ? "" : " at NULL", t->t.record_len);
    if (t->t.rows && row == t->last)
        return ckpt_writer_fail(w, PSC_EEXISTS, "checkpoint %" PRIu64 ": table \"%s\": row %" PRId64 " added twice",
                                w->id, t->t.name, row);
    /* Copied only: the CRC, the order and the file come at prepare (ckpt_sst.c) */
    ckpt_wtable_append(t, row, rec, len);
    t->t.dead += (uint64_t)dead;
    return 0;
}

/* ---- the rows of one table of one checkpoint: a key range ---- */

typedef struct rows_it {
    rocksdb_readoptions_t *ro;
    rocksdb_iterator_t *it;
    char key[CKPT_ROW_KEY_MAX]; /* the prefix, followed by the upper bound's 9 bytes */
    size_t plen;
} rows_it_t;

/* Positions r (which must not move until rows_it_close) on the first row of
 * table of checkpoint id in the view. */
static void rows_it_open(rows_it_t *r, ckpt_view_t *v, uint64_t id, const char *table)
{
    r->plen = ckpt_key_row_prefix(r->key, id, table);
    size_t bl = ckpt_key_row_bound(r->key, r->plen);
    r->ro = rocksdb_readoptions_create();
    if (v->snap) rocksdb_readoptions_set_snapshot(r->ro, v->snap);
    rocksdb_readoptions_set_fill_cache(r->ro, 0); /* one pass: keep the cache for others */
    rocksdb_readoptions_set_iterate_upper_bound(r->ro, r->key, bl);
    r->it = rocksdb_create_iterator(v->db->rdb, r->ro);
    rocksdb_iter_seek(r->it, r->key, r->plen);
}

static int rows_it_error(rows_it_t *r, ckpt_view_t *v, char *err, size_t errlen)
{
    char *e = NULL;
    rocksdb_iter_get_error(r->it, &e);
    if (!e) return 0;
    int rc = psc_seterr(err, errlen, PSC_EIO, "checkpoint store %s: reading rows: %s", v->db->dir, e);
    rocksdb_free(e);
    return rc;
}

static void rows_it_close(rows_it_t *r)
{
    rocksdb_iter_destroy(r->it);
    rocksdb_readoptions_destroy(r->ro);
}

static int rows_count_check(uint64_t id, const ckpt_table_t *t, uint64_t seen, char *err, size_t errlen)
{
    if (seen == t->rows) return 0;
    return psc_seterr(err, errlen, PSC_ECORRUPT,
                      "checkpoint %" PRIu64 ": table \"%s\": %" PRIu64
                      " row versions stored, the manifest lists %" PRIu64,
                      id, t->name, seen, t->rows);
}

static int rows_key_bad(uint64_t id, const ckpt_table_t *t, size_t kl, char *err, size_t errlen)
{
    return psc_seterr(err, errlen, PSC_ECORRUPT, "checkpoint %" PRIu64 ": table \"%s\": malformed row key (%zu bytes)",
                      id, t->name, kl);
}

/* Every row version of table t of checkpoint id: key, length, CRC, then count
 * and digest against the manifest. */
static int rows_verify(ckpt_view_t *v, uint64_t id, const ckpt_table_t *t, char *err, size_t errlen)
{
    rows_it_t r;
    rows_it_open(&r, v, id, t->name);
    uint64_t seen = 0, digest = 0, dead = 0;
    int rc = 0;
    for (; rocksdb_iter_valid(r.it); rocksdb_iter_next(r.it)) {
        size_t kl, vl;
        const char *k = rocksdb_iter_key(r.it, &kl);
        const unsigned char *val = (const unsigned char *)rocksdb_iter_value(r.it, &vl);
        int64_t row = ckpt_key_row_get(k, kl, r.plen);
        uint32_t mcrc;
        rc = row < 0 ? rows_key_bad(id, t, kl, err, errlen)
                     : ckpt_row_value_check(id, t, row, val, vl, &mcrc, err, errlen);
        if (rc < 0) break;
        dead += (uint64_t)rc;
        rc = 0;
        seen++;
        digest += ckpt_row_digest(row, mcrc);
    }
    if (!rc) rc = rows_it_error(&r, v, err, errlen);
    rows_it_close(&r);
    if (!rc) rc = rows_count_check(id, t, seen, err, errlen);
    if (!rc && dead != t->dead)
        rc = psc_seterr(err, errlen, PSC_ECORRUPT,
                        "checkpoint %" PRIu64 ": table \"%s\": %" PRIu64
                        " tombstones stored, the manifest lists %" PRIu64,
                        id, t->name, dead, t->dead);
    if (!rc && digest != t->digest)
        rc = psc_seterr(err, errlen, PSC_ECORRUPT,
                        "checkpoint %" PRIu64 ": table \"%s\": the row versions' digest 0x%016" PRIx64
                        " is not the manifest's 0x%016" PRIx64 " (a row version lost, added or replaced)",
                        id, t->name, digest, t->digest);
    return rc;
}

/* An error about chain checkpoint c while working on checkpoint id. */
static int chain_err(uint64_t id, uint64_t c, int rc, const char *why, char *err, size_t errlen)
{
    if (c == id) return psc_seterr(err, errlen, rc, "%s", why);
    return psc_seterr(err, errlen, rc, "checkpoint %" PRIu64 ": in its chain, %s", id, why);
}

/* ---- verification ---- */

/* items[i] (undamaged): its tensors, its chain, and for each of its tables the
 * rows of every checkpoint of the table's chain. */
static int verify_item(ckpt_view_t *v, const ckpt_scan_item_t *items, int n, int i, char *err, size_t errlen)
{
    const ckpt_manifest_t *m = &items[i].m;
    int rc = ckpt_tensors_verify(v, m, err, errlen);
    if (rc) return rc;
    int *chain, len;
    rc = ckpt_chain(items, n, i, &chain, &len, err, errlen);
    for (uint32_t t = 0; t < m->info.ntables && !rc; t++) {
        int tl = ckpt_chain_table(items, chain, len, m->t[t].name, err, errlen);
        if (tl < 0) rc = tl;
        for (int k = 0; k < tl && !rc; k++) {
            const ckpt_scan_item_t *c = &items[chain[k]];
            char why[400];
            rc = rows_verify(v, c->id, ckpt_manifest_find_table(&c->m, m->t[t].name), why, sizeof why);
            if (rc) chain_err(items[i].id, c->id, rc, why, err, errlen);
        }
    }
    free(chain);
    return rc;
}

/* items[*i] when id is there and undamaged; else the error. */
static int find_item(const ckpt_scan_item_t *items, int n, uint64_t id, int *i, char *err, size_t errlen)
{
    *i = ckpt_scan_find(items, n, id);
    if (*i < 0) return psc_seterr(err, errlen, PSC_ENOTFOUND, "checkpoint %" PRIu64 " not found", id);
    if (items[*i].rc) return psc_seterr(err, errlen, items[*i].rc, "%s", items[*i].msg);
    return 0;
}

int ckpt_verify(ckpt_db_t *db, uint64_t id, char *err, size_t errlen)
{
    PSC_ASSERT(db);
    ckpt_view_t v;
    ckpt_view_open(db, &v);
    ckpt_scan_item_t *items;
    int n, i;
    int rc = ckpt_scan_manifests(&v, &items, &n, err, errlen);
    if (!rc) {
        rc = find_item(items, n, id, &i, err, errlen);
        if (!rc) rc = verify_item(&v, items, n, i, err, errlen);
        ckpt_scan_free(items, n);
    }
    ckpt_view_close(&v);
    return rc;
}

static void log_line(void (*log)(const char *line), const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void log_line(void (*log)(const char *line), const char *fmt, ...)
{
    if (!log) return;
    char line[640];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    log(line);
}

int ckpt_latest_good(ckpt_db_t *db, const char *job_id, ckpt_info_t *out, void (*log)(const char *line), char *err,
                     size_t errlen)
{
    PSC_ASSERT(db && out);
    if (!job_id || !*job_id) return psc_seterr(err, errlen, PSC_EINVAL, "empty job id");
    ckpt_view_t v;
    ckpt_view_open(db, &v);
    ckpt_scan_item_t *items;
    int nitems;
    int rc = ckpt_scan_manifests(&v, &items, &nitems, err, errlen);
    if (rc) {
        ckpt_view_close(&v);
        return rc;
    }
    ckpt_scan_needed_by(items, nitems);
    int tried = 0, found = 0;
    /* Newest first: the scan is id ascending. */
    for (int i = nitems - 1; i >= 0 && !found; i--) {
        ckpt_scan_item_t *s = &items[i];
        if (s->rc) {
            /* Its job is unknown: it might be this job's newest. */
            log_line(log, "checkpoint %" PRIu64 " skipped: %s", s->id, s->msg);
            continue;
        }
        if (!s->m.info.committed || strcmp(s->m.info.job_id, job_id) != 0) continue;
        tried++;
        char why[480], prefix[40];
        if (verify_item(&v, items, nitems, i, why, sizeof why) == 0) {
            *out = s->m.info;
            found = 1;
        } else {
            /* why starts "checkpoint <id>: "; the line names the id once. */
            int pl = snprintf(prefix, sizeof prefix, "checkpoint %" PRIu64 ": ", s->id);
            const char *detail = strncmp(why, prefix, (size_t)pl) == 0 ? why + pl : why;
            log_line(log,
                     "checkpoint %" PRIu64 " (job %s, step %" PRId64 ") fails verification: %s; trying an older one",
                     s->id, job_id, s->m.info.step, detail);
        }
    }
    ckpt_scan_free(items, nitems);
    ckpt_view_close(&v);
    if (found) return 0;
    if (tried == 0) return psc_seterr(err, errlen, PSC_ENOTFOUND, "no committed checkpoint of job %s", job_id);
    return psc_seterr(err, errlen, PSC_ENOTFOUND, "none of the %d committed checkpoints of job %s verifies", tried,
                      job_id);
}

/* ---- reading a table as of a checkpoint: a merge over its chain ---- */

typedef struct merge_src {
    rows_it_t r;
    uint64_t id;           /* the chain checkpoint */
    const ckpt_table_t *t; /* its entry of the table */
    uint64_t seen;         /* row versions read */
    int64_t row;           /* of the current key */
} merge_src_t;

typedef struct merge {
    ckpt_view_t *v;
    merge_src_t *s; /* the T-chain, newest first */
    int *heap;      /* indexes into s: the smallest (row, index) on top */
    int nheap;
    int64_t from; /* the first row read (a page: > 0, and the counts are not checked) */
    size_t max;   /* rows passed on, then stop (0: all) */
    int more;     /* stopped at max with rows left */
} merge_t;

static int merge_less(const merge_t *mg, int a, int b)
{
    return mg->s[a].row < mg->s[b].row || (mg->s[a].row == mg->s[b].row && a < b);
}

static void heap_down(merge_t *mg, int i)
{
    for (;;) {
        int l = 2 * i + 1, m = i;
        if (l < mg->nheap && merge_less(mg, mg->heap[l], mg->heap[m])) m = l;
        if (l + 1 < mg->nheap && merge_less(mg, mg->heap[l + 1], mg->heap[m])) m = l + 1;
        if (m == i) return;
        int x = mg->heap[i];
        mg->heap[i] = mg->heap[m];
        mg->heap[m] = x;
        i = m;
    }
}

/* Reads the source's current key: 1 on a row, 0 at its end (its count checked),
 * or an error (why). */
static int merge_load(merge_t *mg, merge_src_t *s, char *why, size_t whylen)
{
    if (!rocksdb_iter_valid(s->r.it)) {
        int rc = rows_it_error(&s->r, mg->v, why, whylen);
        return rc || mg->from > 0 ? rc : rows_count_check(s->id, s->t, s->seen, why, whylen);
    }
    size_t kl;
    const char *k = rocksdb_iter_key(s->r.it, &kl);
    s->row = ckpt_key_row_get(k, kl, s->r.plen);
    if (s->row < 0) return rows_key_bad(s->id, s->t, kl, why, whylen);
    s->seen++;
    return 1;
}

static int merge_run(merge_t *mg, int ns, uint64_t id, int (*fn)(void *arg, int64_t row, const void *rec, size_t len),
                     void *arg, char *err, size_t errlen)
{
    char why[400];
    for (int k = 0; k < ns; k++) {
        int st = merge_load(mg, &mg->s[k], why, sizeof why);
        if (st < 0) return chain_err(id, mg->s[k].id, st, why, err, errlen);
        if (st) mg->heap[mg->nheap++] = k;
    }
    for (int i = mg->nheap / 2 - 1; i >= 0; i--) heap_down(mg, i);
    for (size_t passed = 0; mg->nheap;) {
        if (mg->max && passed == mg->max) {
            mg->more = 1;
            return 0;
        }
        merge_src_t *s = &mg->s[mg->heap[0]];
        int64_t row = s->row;
        size_t vl;
        const unsigned char *val = (const unsigned char *)rocksdb_iter_value(s->r.it, &vl);
        int rc = ckpt_row_value_check(s->id, s->t, row, val, vl, NULL, why, sizeof why);
        if (rc < 0) return chain_err(id, s->id, rc, why, err, errlen);
        if (rc == 1) { /* a tombstone: the row does not exist; not passed on, not counted */
            rc = 0;
        } else {
            rc = fn(arg, row, val + CKPT_ROW_HEADER, vl - CKPT_ROW_HEADER);
            passed++;
        }
        if (rc)
            return psc_seterr(err, errlen, rc,
                              "checkpoint %" PRIu64 ": table \"%s\": stopped at row %" PRId64 " by the caller (%d)", id,
                              s->t->name, row, rc);
        /* Every source at this row moves on: its older versions are not used. */
        while (mg->nheap && mg->s[mg->heap[0]].row == row) {
            merge_src_t *o = &mg->s[mg->heap[0]];
            rocksdb_iter_next(o->r.it);
            int st = merge_load(mg, o, why, sizeof why);
            if (st < 0) return chain_err(id, o->id, st, why, err, errlen);
            if (!st) mg->heap[0] = mg->heap[--mg->nheap];
            heap_down(mg, 0);
        }
    }
    return 0;
}

/* The T-chain of items[i] for table (declared by it), as merge sources. */
static int merge_open(merge_t *mg, const ckpt_scan_item_t *items, int n, int i, const char *table, char *err,
                      size_t errlen)
{
    int *chain, len;
    int rc = ckpt_chain(items, n, i, &chain, &len, err, errlen);
    if (rc) return rc;
    int tl = ckpt_chain_table(items, chain, len, table, err, errlen);
    if (tl > 0) {
        mg->s = psc_xcalloc((size_t)tl, sizeof *mg->s);
        mg->heap = psc_xcalloc((size_t)tl, sizeof *mg->heap);
        for (int k = 0; k < tl; k++) {
            const ckpt_scan_item_t *c = &items[chain[k]];
            mg->s[k].id = c->id;
            mg->s[k].t = ckpt_manifest_find_table(&c->m, table);
            rows_it_open(&mg->s[k].r, mg->v, c->id, table);
            if (mg->from > 0) {
                char key[CKPT_ROW_KEY_MAX];
                memcpy(key, mg->s[k].r.key, mg->s[k].r.plen);
                ckpt_key_row_set(key, mg->s[k].r.plen, mg->from);
                rocksdb_iter_seek(mg->s[k].r.it, key, mg->s[k].r.plen + 8);
            }
        }
    }
    free(chain);
    return tl;
}

static int read_rows(ckpt_db_t *db, uint64_t id, const char *table, int64_t from, size_t max, int *more,
                     int (*fn)(void *arg, int64_t row, const void *rec, size_t len), void *arg, char *err,
                     size_t errlen)
{
    PSC_ASSERT(db && fn);
    if (!table) return psc_seterr(err, errlen, PSC_EINVAL, "checkpoint %" PRIu64 ": NULL table name", id);
    ckpt_view_t v;
    ckpt_view_open(db, &v);
    ckpt_scan_item_t *items;
    int n, i;
    int rc = ckpt_scan_manifests(&v, &items, &n, err, errlen);
    if (rc) {
        ckpt_view_close(&v);
        return rc;
    }
    rc = find_item(items, n, id, &i, err, errlen);
    if (!rc && !ckpt_manifest_find_table(&items[i].m, table))
        rc = psc_seterr(err, errlen, PSC_ENOTFOUND, "checkpoint %" PRIu64 " has no table \"%.200s\"", id, table);
    if (!rc) {
        merge_t mg = {.v = &v, .from = from, .max = max};
        int ns = merge_open(&mg, items, n, i, table, err, errlen);
        rc = ns < 0 ? ns : merge_run(&mg, ns, id, fn, arg, err, errlen);
        if (more) *more = mg.more;
        for (int k = 0; k < ns; k++) rows_it_close(&mg.s[k].r);
        free(mg.s);
        free(mg.heap);
    }
    ckpt_scan_free(items, n);
    ckpt_view_close(&v);
    return rc;
}

int ckpt_read_rows(ckpt_db_t *db, uint64_t id, const char *table,
                   int (*fn)(void *arg, int64_t row, const void *rec, size_t len), void *arg, char *err, size_t errlen)
{
    return read_rows(db, id, table, 0, 0, NULL, fn, arg, err, errlen);
}

int ckpt_read_rows_page(ckpt_db_t *db, uint64_t id, const char *table, int64_t after, size_t max,
                        int (*fn)(void *arg, int64_t row, const void *rec, size_t len), void *arg, int *more, char *err,
                        size_t errlen)
{
    PSC_ASSERT(max > 0 && more);
    *more = 0;
    if (after >= INT64_MAX) return 0;
    return read_rows(db, id, table, after < 0 ? 0 : after + 1, max, more, fn, arg, err, errlen);
}

/* ---- single rows of a table as of a checkpoint: a lookup down its chain ---- */

int ckpt_get_rows(ckpt_db_t *db, uint64_t id, const char *table, const int64_t *rows, size_t n,
                  int (*fn)(void *arg, size_t i, const void *rec, size_t len), void *arg, char *err, size_t errlen)
{
    PSC_ASSERT(db && fn && (rows || n == 0));
    if (!table) return psc_seterr(err, errlen, PSC_EINVAL, "checkpoint %" PRIu64 ": NULL table name", id);
    ckpt_view_t v;
    ckpt_view_open(db, &v);
    ckpt_scan_item_t *items;
    int nitems, i, *chain = NULL, len = 0, tl = 0;
    int rc = ckpt_scan_manifests(&v, &items, &nitems, err, errlen);
    if (rc) {
        ckpt_view_close(&v);
        return rc;
    }
    rc = find_item(items, nitems, id, &i, err, errlen);
    if (!rc && !ckpt_manifest_find_table(&items[i].m, table))
        rc = psc_seterr(err, errlen, PSC_ENOTFOUND, "checkpoint %" PRIu64 " has no table \"%.200s\"", id, table);
    if (!rc) rc = ckpt_chain(items, nitems, i, &chain, &len, err, errlen);
    if (!rc) {
        tl = ckpt_chain_table(items, chain, len, table, err, errlen);
        if (tl < 0) rc = tl;
    }
    char(*keys)[CKPT_ROW_KEY_MAX] = psc_xmalloc((size_t)(tl > 0 ? tl : 1) * sizeof *keys);
    size_t plen = 0;
    for (int k = 0; k < tl; k++) plen = ckpt_key_row_prefix(keys[k], items[chain[k]].id, table);
    char why[400];
    for (size_t j = 0; j < n && !rc; j++) {
        if (rows[j] < 0) continue;
        for (int k = 0; k < tl; k++) {
            ckpt_key_row_set(keys[k], plen, rows[j]);
            rocksdb_pinnableslice_t *ps = NULL;
            if ((rc = ckpt_view_get(&v, keys[k], plen + 8, &ps, err, errlen))) break;
            if (!ps) continue;
            size_t vl;
            const unsigned char *val = (const unsigned char *)rocksdb_pinnableslice_value(ps, &vl);
            const ckpt_scan_item_t *c = &items[chain[k]];
            rc = ckpt_row_value_check(c->id, ckpt_manifest_find_table(&c->m, table), rows[j], val, vl, NULL, why,
                                      sizeof why);
            if (rc < 0)
                chain_err(id, c->id, rc, why, err, errlen);
            else if (rc == 0) /* 1: a tombstone, the row does not exist */
                rc = fn(arg, j, val + CKPT_ROW_HEADER, vl - CKPT_ROW_HEADER);
            else
                rc = 0;
            rocksdb_pinnableslice_destroy(ps);
            break;
        }
    }
    free(keys);
    free(chain);
    ckpt_scan_free(items, nitems);
    ckpt_view_close(&v);
    return rc;
}

/* ---- the tables of a checkpoint ---- */

int ckpt_tables(ckpt_db_t *db, uint64_t id, ckpt_table_info_t **out, int *n, char *err, size_t errlen)
{
    PSC_ASSERT(db && out && n);
    *out = NULL;
    *n = 0;
    ckpt_manifest_t m;
    int rc = ckpt_manifest_read(db, id, &m, err, errlen);
    if (rc) return rc;
    ckpt_table_info_t *a = m.info.ntables ? psc_xcalloc(m.info.ntables, sizeof *a) : NULL;
    for (uint32_t i = 0; i < m.info.ntables; i++) {
        snprintf(a[i].name, sizeof a[i].name, "%s", m.t[i].name);
        a[i].record_len = m.t[i].record_len;
        a[i].rows = m.t[i].rows;
    }
    *out = a;
    *n = (int)m.info.ntables; /* <= CKPT_MAX_TABLES: decoding checked it */
    ckpt_manifest_free(&m);
    return 0;
}

/* ---- tests only ---- */

/* Flips byte `at` of the value under key, or with del deletes the key: behind
 * the module's back, as a bad disk would, but under wlock. */
static int debug_poke(ckpt_db_t *db, const char *key, size_t kl, int64_t at, int del)
{
    pthread_mutex_lock(&db->wlock);
    char *e = NULL;
    size_t n = 0;
    char *val = db->rdb ? rocksdb_get(db->rdb, db->rplain, key, kl, &n, &e) : NULL;
    int rc = 0;
    if (e || !val)
        rc = e ? PSC_EIO : PSC_ENOTFOUND;
    else if (del)
        rocksdb_delete(db->rdb, db->wsync, key, kl, &e);
    else if (at < 0 || (uint64_t)at >= n)
        rc = PSC_EINVAL;
    else {
        val[at] ^= (char)0xff;
        rocksdb_put(db->rdb, db->wsync, key, kl, val, n, &e);
    }
    if (!rc && e) rc = PSC_EIO;
    pthread_mutex_unlock(&db->wlock);
    rocksdb_free(e);
    rocksdb_free(val);
    return rc;
}

int ckpt_debug_corrupt(ckpt_db_t *db, uint64_t id, const char *name, int64_t offset)
{
    char key[CKPT_KEY_MAX];
    size_t kl = name ? ckpt_key_tensor(key, id, name) : ckpt_key_manifest(key, id);
    return debug_poke(db, key, kl, name ? offset + CKPT_TENSOR_HEADER : offset, 0);
}

int ckpt_debug_corrupt_row(ckpt_db_t *db, uint64_t id, const char *table, int64_t row, int64_t offset)
{
    size_t tl = table ? strlen(table) : 0;
    if (tl < 1 || tl > CKPT_MAX_NAME || row < 0) return PSC_EINVAL;
    char key[CKPT_ROW_KEY_MAX];
    size_t p = ckpt_key_row_prefix(key, id, table);
    ckpt_key_row_set(key, p, row);
    if (offset == INT64_MIN) return debug_poke(db, key, p + 8, 0, 1);
    if (offset < -CKPT_ROW_HEADER) return PSC_EINVAL;
    return debug_poke(db, key, p + 8, offset + CKPT_ROW_HEADER, 0);
}

static int count_range(ckpt_db_t *db, const char *lo, const char *hi, size_t len)
{
    if (!db->rdb) return 0;
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    rocksdb_readoptions_set_iterate_upper_bound(ro, hi, len);
    rocksdb_iterator_t *it = rocksdb_create_iterator(db->rdb, ro);
    int count = 0;
    for (rocksdb_iter_seek(it, lo, len); rocksdb_iter_valid(it); rocksdb_iter_next(it)) count++;
    rocksdb_iter_destroy(it);
    rocksdb_readoptions_destroy(ro);
    return count;
}

int ckpt_debug_count_keys(ckpt_db_t *db, uint64_t id)
{
    char key[CKPT_KEY_MAX], lo[CKPT_RANGE_KEY_LEN + 1], hi[CKPT_RANGE_KEY_LEN + 1];
    size_t kl = ckpt_key_manifest(key, id);
    int count = 0;
    char *e = NULL;
    size_t n;
    char *val = db->rdb ? rocksdb_get(db->rdb, db->rplain, key, kl, &n, &e) : NULL;
    if (val) count++;
    rocksdb_free(val);
    rocksdb_free(e);
    ckpt_key_tensor_range(lo, hi, id);
    count += count_range(db, lo, hi, CKPT_RANGE_KEY_LEN);
    ckpt_key_row_range(lo, hi, id);
    count += count_range(db, lo, hi, CKPT_RANGE_KEY_LEN);
    return count;
}
