/* ckpt_rows_fixture.h — what the RocksDB row-checkpoint tests share
 * (test_ckpt_rows.c: bases, deltas, chains, keep, corruption, crashes;
 * test_ckpt_rows_format.c: stored bytes, version-1 manifests, scale):
 * deterministic records, the model of which checkpoint's version of a row a
 * restore must read, read_rows collection, the temp-folder fixture and the
 * save helpers. Header-only, for tests. */
#ifndef PSC_CKPT_ROWS_FIXTURE_H
#define PSC_CKPT_ROWS_FIXTURE_H

#include "ckpt.h"
#include "crc32c.h"
#include "psc.h"

#include <ftw.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <setjmp.h>
#include <cmocka.h>
#include <rocksdb/c.h>

#define JOB "1a2b3c4d5e6f7a8b"
#define OTHER_JOB "3c4d000000000000"
#define EMB "user_emb"
#define RL 24 /* record bytes of EMB in the small tests */


/* ---- deterministic records: a function of (checkpoint, table, row) ---- */

static inline void rec_fill(void *dst, size_t n, uint64_t id, const char *table, int64_t row)
{
    uint64_t x = 0x9E3779B97F4A7C15ull ^ (id * 0xff51afd7ed558ccdull) ^ ((uint64_t)row * 0xc4ceb9fe1a85ec53ull);
    for (const char *s = table; *s; s++) x = (x ^ (unsigned char)*s) * 0x100000001b3ull;
    unsigned char *p = dst;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (unsigned char)(x >> 32);
    }
}

static inline void add_rows(ckpt_writer_t *w, uint64_t id, const char *table, size_t rl, const int64_t *rows, size_t n)
{
    unsigned char rec[256];
    assert_true(rl <= sizeof rec);
    for (size_t i = 0; i < n; i++) {
        rec_fill(rec, rl, id, table, rows[i]);
        int rc = ckpt_add_row(w, table, rows[i], rec, rl);
        if (rc) fail_msg("checkpoint %" PRIu64 " table %s row %" PRId64 ": rc %d", id, table, rows[i], rc);
    }
}

/* ---- the model: who[row] = the checkpoint whose version of the row a restore
 * reads (0: the row does not exist) ---- */

typedef struct model {
    uint64_t *who;
    int64_t n;
} model_t;

static inline model_t model_new(int64_t n)
{
    model_t m = {.who = calloc((size_t)n, sizeof(uint64_t)), .n = n};
    assert_non_null(m.who);
    return m;
}

static inline model_t model_copy(const model_t *a)
{
    model_t m = model_new(a->n);
    memcpy(m.who, a->who, (size_t)a->n * sizeof *m.who);
    return m;
}

static inline void model_write(model_t *m, uint64_t id, const int64_t *rows, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        assert_true(rows[i] < m->n);
        m->who[rows[i]] = id;
    }
}

/* ---- collecting read_rows ---- */

typedef struct got {
    const model_t *m;
    const char *table;
    size_t rl;
    int64_t last, next; /* last row seen; the model's next row to expect */
    uint64_t n;
    char failure[256];
    int stop_after; /* > 0: return 7 after that many rows */
} got_t;

static inline int check_cb(void *arg, int64_t row, const void *rec, size_t len)
{
    got_t *g = arg;
    if (g->failure[0]) return 0;
    if (g->n && row <= g->last) {
        snprintf(g->failure, sizeof g->failure, "row %" PRId64 " after row %" PRId64, row, g->last);
        return 0;
    }
    g->last = row;
    g->n++;
    if (row >= g->m->n) {
        snprintf(g->failure, sizeof g->failure, "row %" PRId64 " beyond the model's %" PRId64, row, g->m->n);
        return 0;
    }
    while (g->next < g->m->n && g->m->who[g->next] == 0) g->next++;
    if (row != g->next) {
        snprintf(g->failure, sizeof g->failure, "row %" PRId64 ", want row %" PRId64, row, g->next);
        return 0;
    }
    unsigned char want[256];
    rec_fill(want, g->rl, g->m->who[row], g->table, row);
    if (len != g->rl || memcmp(rec, want, len) != 0)
        snprintf(g->failure, sizeof g->failure, "row %" PRId64 ": %zu bytes, not the record of checkpoint %" PRIu64,
                 row, len, g->m->who[row]);
    g->next++;
    if (g->stop_after && g->n == (uint64_t)g->stop_after) return 7;
    return 0;
}

static inline void expect_table(ckpt_db_t *db, uint64_t id, const char *table, size_t rl, const model_t *m)
{
    char err[512] = "";
    got_t g = {.m = m, .table = table, .rl = rl};
    int rc = ckpt_read_rows(db, id, table, check_cb, &g, err, sizeof err);
    if (rc) fail_msg("read_rows %" PRIu64 " %s: %s", id, table, err);
    if (g.failure[0]) fail_msg("read_rows %" PRIu64 " %s: %s", id, table, g.failure);
    uint64_t want = 0;
    for (int64_t r = 0; r < m->n; r++) want += m->who[r] != 0;
    if (g.n != want) fail_msg("read_rows %" PRIu64 " %s: %" PRIu64 " rows, want %" PRIu64, id, table, g.n, want);
}

/* ---- fixture and helpers (as test_ckpt.c) ---- */

#define EXPECT_ERR(code, msg, call)                                                                      \
    do {                                                                                                 \
        err[0] = 0;                                                                                      \
        int rc_ = (call);                                                                                \
        if (rc_ != (code))                                                                               \
            fail_msg("%s: rc %d (%s), want %d; err \"%s\"", #call, rc_, psc_strerror(rc_), (code), err); \
        if (!strstr(err, (msg))) fail_msg("%s: err \"%s\" lacks \"%s\"", #call, err, (msg));             \
    } while (0)

#define OK(call)                                                                             \
    do {                                                                                     \
        err[0] = 0;                                                                          \
        int rc_ = (call);                                                                    \
        if (rc_) fail_msg("%s: rc %d (%s); err \"%s\"", #call, rc_, psc_strerror(rc_), err); \
    } while (0)

typedef struct fx {
    char dir[64];
    ckpt_db_t *db;
} fx_t;

static inline int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static inline void reopen(fx_t *f)
{
    char err[512] = "";
    ckpt_close(f->db);
    f->db = NULL;
    int rc = ckpt_open(f->dir, &f->db, err, sizeof err);
    if (rc) fail_msg("reopen %s: %s", f->dir, err);
}

static inline int setup(void **state)
{
    fx_t *f = calloc(1, sizeof *f);
    if (!f) return -1;
    snprintf(f->dir, sizeof f->dir, "/tmp/test_ckpt_rows.XXXXXX");
    if (!mkdtemp(f->dir)) return -1;
    char err[512] = "";
    if (ckpt_open(f->dir, &f->db, err, sizeof err)) {
        fprintf(stderr, "open: %s\n", err);
        return -1;
    }
    *state = f;
    return 0;
}

static inline int teardown(void **state)
{
    fx_t *f = *state;
    ckpt_close(f->db);
    nftw(f->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    free(f);
    return 0;
}

/* "1c 2p ..." (p = prepared, c = committed), with "<N" when needed_by is N. */
static inline void list_ids(ckpt_db_t *db, char *buf, size_t n)
{
    char err[512] = "";
    ckpt_info_t *info;
    int cnt;
    OK(ckpt_list(db, &info, &cnt, err, sizeof err));
    buf[0] = 0;
    size_t off = 0;
    for (int i = 0; i < cnt; i++) {
        off += (size_t)snprintf(buf + off, n - off, "%s%" PRIu64 "%c", i ? " " : "", info[i].id,
                                info[i].committed ? 'c' : 'p');
        if (info[i].needed_by) off += (size_t)snprintf(buf + off, n - off, "<%" PRIu64, info[i].needed_by);
    }
    free(info);
}

#define EXPECT_LIST(db, want)                                                              \
    do {                                                                                   \
        char got_[512];                                                                    \
        list_ids((db), got_, sizeof got_);                                                 \
        if (strcmp(got_, (want)) != 0) fail_msg("list \"%s\", want \"%s\"", got_, (want)); \
    } while (0)

static int log_calls __attribute__((unused));
static char log_lines[8][640] __attribute__((unused));

static inline void log_cb(const char *line)
{
    snprintf(log_lines[log_calls % 8], sizeof log_lines[0], "%s", line);
    log_calls++;
}

/* Prepares (and with keep > 0 commits) checkpoint id on parent with the rows of
 * EMB (record RL) given, a global_step tensor, and the model updated. */
static inline void save_emb(ckpt_db_t *db, uint64_t id, uint64_t parent, const int64_t *rows, size_t n, model_t *m, int keep)
{
    char err[512] = "";
    ckpt_writer_t *w = ckpt_begin(db, id, JOB, (int64_t)id * 100);
    int64_t step = (int64_t)id * 100;
    assert_int_equal(ckpt_add(w, "global_step", &step, 8), 0);
    ckpt_set_parent(w, parent);
    assert_int_equal(ckpt_add_table(w, EMB, RL), 0);
    add_rows(w, id, EMB, RL, rows, n);
    int rc = ckpt_prepare(w, err, sizeof err);
    if (rc) fail_msg("prepare %" PRIu64 ": %s", id, err);
    if (m) model_write(m, id, rows, n);
    if (keep) {
        rc = ckpt_commit(db, id, keep, err, sizeof err);
        if (rc) fail_msg("commit %" PRIu64 ": %s", id, err);
    }
}

static inline int64_t *range(int64_t lo, int64_t hi, int64_t step, size_t *n)
{
    size_t cnt = (size_t)((hi - lo + step - 1) / step);
    int64_t *r = malloc((cnt ? cnt : 1) * sizeof *r);
    assert_non_null(r);
    for (size_t i = 0; i < cnt; i++) r[i] = lo + (int64_t)i * step;
    *n = cnt;
    return r;
}


#endif
