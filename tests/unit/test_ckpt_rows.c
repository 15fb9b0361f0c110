/* test_ckpt_rows — sparse table rows in checkpoints: bases, deltas and their
 * chains, in a real RocksDB under a mkdtemp folder in /tmp.
 *
 * A base and three deltas (rows changed, added, a table declared late, rows
 * added out of order) read back, for every id, exactly the table's state at that
 * checkpoint: each row once, ascending, each record bit-exact, before and after
 * reopening. A delta on an older checkpoint (a restore, then new deltas) never
 * shows the rows of the abandoned branch, nor those of a discarded delta.
 * Keep-last-K deletes what no kept checkpoint's chain needs (their keys are
 * gone) and keeps the bases and deltas a kept delta reads, shown by needed_by. A
 * prepared delta (also one a killed child process left) is invisible to restores
 * of older ids and to latest_good. A flipped byte of one row version, a lost,
 * an extra or a replaced version, a broken chain and a damaged parent manifest
 * are found by verify (and read_rows where it reads them), and latest_good falls
 * back to the newest checkpoint whose chain is good. Version-1 manifests (written
 * here byte by byte, as an older psc did) still read, and deltas build on them.
 * The stored bytes of rows and version-2 manifests are the format ckpt.h
 * documents. Writer errors stick and write nothing. 200k rows of 72 bytes with
 * three deltas: the times are printed.
 */
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

static void rec_fill(void *dst, size_t n, uint64_t id, const char *table, int64_t row)
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

static void add_rows(ckpt_writer_t *w, uint64_t id, const char *table, size_t rl, const int64_t *rows, size_t n)
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

static model_t model_new(int64_t n)
{
    model_t m = {.who = calloc((size_t)n, sizeof(uint64_t)), .n = n};
    assert_non_null(m.who);
    return m;
}

static model_t model_copy(const model_t *a)
{
    model_t m = model_new(a->n);
    memcpy(m.who, a->who, (size_t)a->n * sizeof *m.who);
    return m;
}

static void model_write(model_t *m, uint64_t id, const int64_t *rows, size_t n)
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

static int check_cb(void *arg, int64_t row, const void *rec, size_t len)
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

static void expect_table(ckpt_db_t *db, uint64_t id, const char *table, size_t rl, const model_t *m)
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

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void reopen(fx_t *f)
{
    char err[512] = "";
    ckpt_close(f->db);
    f->db = NULL;
    int rc = ckpt_open(f->dir, &f->db, err, sizeof err);
    if (rc) fail_msg("reopen %s: %s", f->dir, err);
}

static int setup(void **state)
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

static int teardown(void **state)
{
    fx_t *f = *state;
    ckpt_close(f->db);
    nftw(f->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    free(f);
    return 0;
}

/* "1c 2p ..." (p = prepared, c = committed), with "<N" when needed_by is N. */
static void list_ids(ckpt_db_t *db, char *buf, size_t n)
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

static int log_calls;
static char log_lines[8][640];

static void log_cb(const char *line)
{
    snprintf(log_lines[log_calls % 8], sizeof log_lines[0], "%s", line);
    log_calls++;
}

/* Prepares (and with keep > 0 commits) checkpoint id on parent with the rows of
 * EMB (record RL) given, a global_step tensor, and the model updated. */
static void save_emb(ckpt_db_t *db, uint64_t id, uint64_t parent, const int64_t *rows, size_t n, model_t *m, int keep)
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

static int64_t *range(int64_t lo, int64_t hi, int64_t step, size_t *n)
{
    size_t cnt = (size_t)((hi - lo + step - 1) / step);
    int64_t *r = malloc((cnt ? cnt : 1) * sizeof *r);
    assert_non_null(r);
    for (size_t i = 0; i < cnt; i++) r[i] = lo + (int64_t)i * step;
    *n = cnt;
    return r;
}

/* ---- tests ---- */

static void test_base_and_deltas(void **state)
{
    fx_t *f = *state;
    char err[512] = "";
    enum { N = 1200 };
    model_t m[5];
    m[0] = model_new(N);

    /* 1: base, rows 0..999. */
    size_t n;
    int64_t *rows = range(0, 1000, 1, &n);
    m[1] = model_copy(&m[0]);
    save_emb(f->db, 1, 0, rows, n, &m[1], 10);
    free(rows);
    /* 2: every third of 0..299 changes, 1000..1049 are new. */
    m[2] = model_copy(&m[1]);
    rows = range(0, 300, 3, &n);
    int64_t *more = range(1000, 1050, 1, &n);
    ckpt_writer_t *w = ckpt_begin(f->db, 2, JOB, 200);
    ckpt_set_parent(w, 1);
    assert_int_equal(ckpt_add_table(w, EMB, RL), 0);
    add_rows(w, 2, EMB, RL, rows, 100);
    add_rows(w, 2, EMB, RL, more, 50);
    OK(ckpt_prepare(w, err, sizeof err));
    model_write(&m[2], 2, rows, 100);
    model_write(&m[2], 2, more, 50);
    OK(ckpt_commit(f->db, 2, 10, err, sizeof err));
    free(rows);
    free(more);
    /* 3: rows out of order (descending), some of 2's again; no tensor. */
    m[3] = model_copy(&m[2]);
    int64_t r3[] = {1100, 1049, 999, 600, 299, 3, 0};
    w = ckpt_begin(f->db, 3, JOB, 300);
    ckpt_set_parent(w, 2);
    assert_int_equal(ckpt_add_table(w, EMB, RL), 0);
    add_rows(w, 3, EMB, RL, r3, PSC_ARRAY_LEN(r3));
    OK(ckpt_prepare(w, err, sizeof err));
    model_write(&m[3], 3, r3, PSC_ARRAY_LEN(r3));
    OK(ckpt_commit(f->db, 3, 10, err, sizeof err));
    /* 4: no row of EMB changed (declared, 0 rows); a second table starts here. */
    m[4] = model_copy(&m[3]);
    model_t t2 = model_new(N);
    int64_t r4[] = {5, 7, 1199};
    w = ckpt_begin(f->db, 4, JOB, 400);
    ckpt_set_parent(w, 3);
    assert_int_equal(ckpt_add_table(w, EMB, RL), 0);
    assert_int_equal(ckpt_add_table(w, "item_emb/part_1", 40), 0);
    add_rows(w, 4, "item_emb/part_1", 40, r4, 3);
    OK(ckpt_prepare(w, err, sizeof err));
    model_write(&t2, 4, r4, 3);
    OK(ckpt_commit(f->db, 4, 10, err, sizeof err));

    for (int pass = 0; pass < 2; pass++) {
        for (uint64_t id = 1; id <= 4; id++) {
            expect_table(f->db, id, EMB, RL, &m[id]);
            OK(ckpt_verify(f->db, id, err, sizeof err));
        }
        expect_table(f->db, 4, "item_emb/part_1", 40, &t2);
        EXPECT_ERR(PSC_ENOTFOUND, "checkpoint 3 has no table \"item_emb/part_1\"",
                   ckpt_read_rows(f->db, 3, "item_emb/part_1", check_cb, NULL, err, sizeof err));
        EXPECT_ERR(PSC_ENOTFOUND, "checkpoint 9 not found",
                   ckpt_read_rows(f->db, 9, EMB, check_cb, NULL, err, sizeof err));

        ckpt_table_info_t *tabs;
        int nt;
        OK(ckpt_tables(f->db, 4, &tabs, &nt, err, sizeof err));
        assert_int_equal(nt, 2);
        assert_string_equal(tabs[0].name, EMB);
        assert_int_equal(tabs[0].record_len, RL);
        assert_int_equal(tabs[0].rows, 0);
        assert_string_equal(tabs[1].name, "item_emb/part_1");
        assert_int_equal(tabs[1].record_len, 40);
        assert_int_equal(tabs[1].rows, 3);
        free(tabs);
        ckpt_info_t *info;
        int ni;
        OK(ckpt_list(f->db, &info, &ni, err, sizeof err));
        assert_int_equal(ni, 4);
        uint64_t want_rows[] = {1000, 150, 7, 3};
        for (int i = 0; i < 4; i++) {
            assert_int_equal(info[i].parent, (uint64_t)i);
            assert_int_equal(info[i].rows, want_rows[i]);
            assert_int_equal(info[i].ntables, i == 3 ? 2 : 1);
            assert_int_equal(info[i].needed_by, i < 3 ? 4 : 0);
        }
        assert_int_equal(info[2].ntensors, 0);
        free(info);
        ckpt_info_t one;
        OK(ckpt_get_info(f->db, 2, &one, err, sizeof err));
        assert_int_equal(one.parent, 1);
        assert_int_equal(one.needed_by, 4);
        assert_int_equal(one.rows, 150);
        reopen(f);
    }

    /* A caller's nonzero return stops the read and is returned. */
    got_t g = {.m = &m[4], .table = EMB, .rl = RL, .stop_after = 10};
    EXPECT_ERR(7, "stopped at row 9", ckpt_read_rows(f->db, 4, EMB, check_cb, &g, err, sizeof err));
    assert_int_equal(g.n, 10);
    for (int i = 0; i < 5; i++) free(m[i].who);
    free(t2.who);
}

static void test_abandoned_branches(void **state)
{
    fx_t *f = *state;
    char err[512] = "";
    enum { N = 100 };
    model_t m1 = model_new(N);
    size_t n;
    int64_t *all = range(0, 50, 1, &n);
    save_emb(f->db, 1, 0, all, n, &m1, 10);
    model_t m2 = model_copy(&m1);
    int64_t r2[] = {1, 2, 3, 60};
    save_emb(f->db, 2, 1, r2, 4, &m2, 10);
    model_t m3 = model_copy(&m2);
    int64_t r3[] = {2, 4, 6, 70, 71};
    save_emb(f->db, 3, 2, r3, 5, &m3, 10);

    /* The job restored checkpoint 2 and trains on: 4 and 5 continue from 2, and
     * 3's rows (2, 4, 6, 70, 71) must never come back. */
    model_t m4 = model_copy(&m2);
    int64_t r4[] = {4, 80};
    save_emb(f->db, 4, 2, r4, 2, &m4, 10);
    model_t m5 = model_copy(&m4);
    int64_t r5[] = {5, 81};
    save_emb(f->db, 5, 4, r5, 2, &m5, 10);
    expect_table(f->db, 5, EMB, RL, &m5);
    expect_table(f->db, 4, EMB, RL, &m4);
    expect_table(f->db, 3, EMB, RL, &m3);

    /* A prepared delta on 5 that another PS failed: discarded, with its rows;
     * the next delta on 5 does not see them. */
    int64_t r6[] = {0, 1, 90};
    save_emb(f->db, 6, 5, r6, 3, NULL, 0);
    assert_int_equal(ckpt_debug_count_keys(f->db, 6), 1 + 1 + 3);
    OK(ckpt_discard(f->db, 6, err, sizeof err));
    assert_int_equal(ckpt_debug_count_keys(f->db, 6), 0);
    model_t m7 = model_copy(&m5);
    int64_t r7[] = {91};
    save_emb(f->db, 7, 5, r7, 1, &m7, 10);
    expect_table(f->db, 7, EMB, RL, &m7);

    /* Parents that cannot be. */
    ckpt_writer_t *w = ckpt_begin(f->db, 8, JOB, 800);
    ckpt_set_parent(w, 6);
    EXPECT_ERR(PSC_ENOTFOUND, "checkpoint 8: parent 6 not found", ckpt_prepare(w, err, sizeof err));
    w = ckpt_begin(f->db, 8, JOB, 800);
    ckpt_set_parent(w, 8);
    EXPECT_ERR(PSC_EINVAL, "parent 8 is not older", ckpt_prepare(w, err, sizeof err));
    w = ckpt_begin(f->db, 8, OTHER_JOB, 800);
    ckpt_set_parent(w, 7);
    EXPECT_ERR(PSC_EINVAL, "parent 7 is of job " JOB, ckpt_prepare(w, err, sizeof err));
    w = ckpt_begin(f->db, 8, JOB, 800);
    ckpt_set_parent(w, 7);
    assert_int_equal(ckpt_add_table(w, EMB, RL + 4), 0);
    EXPECT_ERR(PSC_EINVAL, "table \"" EMB "\" has records of 28 bytes, but of 24 in parent 7",
               ckpt_prepare(w, err, sizeof err));
    assert_int_equal(ckpt_debug_count_keys(f->db, 8), 0);

    /* A delta on a prepared parent may be prepared, but commits only after it. */
    int64_t r8[] = {1};
    save_emb(f->db, 8, 7, r8, 1, NULL, 0);
    save_emb(f->db, 9, 8, r8, 1, NULL, 0);
    EXPECT_ERR(PSC_EINVAL, "checkpoint 9: its chain holds checkpoint 8, which is prepared",
               ckpt_commit(f->db, 9, 10, err, sizeof err));
    OK(ckpt_commit(f->db, 8, 10, err, sizeof err));
    OK(ckpt_commit(f->db, 9, 10, err, sizeof err));
    free(all);
    free(m1.who);
    free(m2.who);
    free(m3.who);
    free(m4.who);
    free(m5.who);
    free(m7.who);
}

static void test_keep_last_k_chains(void **state)
{
    fx_t *f = *state;
    char err[512] = "";
    enum { N = 64 };
    model_t base = model_new(N);
    size_t n;
    int64_t *all = range(0, N, 1, &n);
    int64_t few[] = {1, 2};
    save_emb(f->db, 1, 0, all, n, NULL, 2);
    save_emb(f->db, 2, 1, few, 2, NULL, 2);
    save_emb(f->db, 3, 2, few, 2, NULL, 2);
    /* Kept: 3 and 2; 1 stays as the base they read. */
    EXPECT_LIST(f->db, "1c<3 2c<3 3c");
    int keys1 = ckpt_debug_count_keys(f->db, 1);
    assert_int_equal(keys1, 1 + 1 + N);
    save_emb(f->db, 4, 0, all, n, &base, 2);
    EXPECT_LIST(f->db, "1c<3 2c<3 3c 4c");
    assert_int_equal(ckpt_debug_count_keys(f->db, 1), keys1);
    /* Kept: 5 and 4. 1, 2 and 3 are needed by none. */
    save_emb(f->db, 5, 4, few, 2, &base, 2);
    EXPECT_LIST(f->db, "4c<5 5c");
    for (uint64_t id = 1; id <= 3; id++) assert_int_equal(ckpt_debug_count_keys(f->db, id), 0);
    model_t m6 = model_copy(&base);
    int64_t r6[] = {3};
    save_emb(f->db, 6, 5, r6, 1, &m6, 2);
    /* Kept: 6, 5; 4 is retained as 6's base. */
    EXPECT_LIST(f->db, "4c<6 5c<6 6c");
    expect_table(f->db, 6, EMB, RL, &m6);
    OK(ckpt_verify(f->db, 6, err, sizeof err));

    /* Prepared ones newer than the committed id are kept, with their chains. */
    save_emb(f->db, 7, 6, r6, 1, NULL, 0);
    save_emb(f->db, 8, 7, r6, 1, NULL, 0);
    OK(ckpt_commit(f->db, 7, 1, err, sizeof err));
    EXPECT_LIST(f->db, "4c<8 5c<8 6c<8 7c<8 8p");
    OK(ckpt_commit(f->db, 8, 1, err, sizeof err));
    EXPECT_LIST(f->db, "4c<8 5c<8 6c<8 7c<8 8c");
    /* A prepared one older than the committed id goes, unless a kept chain
     * reaches it; another job's stay. */
    save_emb(f->db, 9, 8, r6, 1, NULL, 0);
    ckpt_writer_t *w = ckpt_begin(f->db, 10, OTHER_JOB, 1);
    OK(ckpt_prepare(w, err, sizeof err));
    OK(ckpt_commit(f->db, 10, 1, err, sizeof err));
    save_emb(f->db, 11, 0, few, 2, NULL, 0);
    OK(ckpt_commit(f->db, 11, 1, err, sizeof err));
    EXPECT_LIST(f->db, "10c 11c");
    for (uint64_t id = 4; id <= 9; id++) assert_int_equal(ckpt_debug_count_keys(f->db, id), 0);
    reopen(f);
    EXPECT_LIST(f->db, "10c 11c");
    free(all);
    free(base.who);
    free(m6.who);
}

static void test_corrupt_rows(void **state)
{
    fx_t *f = *state;
    char err[512] = "";
    ckpt_info_t good;
    enum { N = 40 };
    model_t m1 = model_new(N);
    size_t n;
    int64_t *all = range(0, 30, 1, &n);
    save_emb(f->db, 1, 0, all, n, &m1, 10);
    model_t m2 = model_copy(&m1);
    int64_t r2[] = {4, 5, 31};
    save_emb(f->db, 2, 1, r2, 3, &m2, 10);
    model_t m3 = model_copy(&m2);
    int64_t r3[] = {6, 32};
    save_emb(f->db, 3, 2, r3, 2, &m3, 10);

    /* A version 3 reads: row 5 of checkpoint 2. */
    assert_int_equal(ckpt_debug_corrupt_row(f->db, 2, EMB, 5, 3), 0);
    EXPECT_ERR(PSC_ECORRUPT, "checkpoint 3: in its chain, checkpoint 2: table \"" EMB "\" row 5: CRC32C mismatch",
               ckpt_verify(f->db, 3, err, sizeof err));
    EXPECT_ERR(PSC_ECORRUPT, "checkpoint 3: in its chain, checkpoint 2: table \"" EMB "\" row 5: CRC32C mismatch",
               ckpt_read_rows(f->db, 3, EMB, check_cb, &(got_t){.m = &m3, .table = EMB, .rl = RL}, err, sizeof err));
    EXPECT_ERR(PSC_ECORRUPT, "checkpoint 2: table \"" EMB "\" row 5: CRC32C mismatch",
               ckpt_verify(f->db, 2, err, sizeof err));
    OK(ckpt_verify(f->db, 1, err, sizeof err));
    log_calls = 0;
    OK(ckpt_latest_good(f->db, JOB, &good, log_cb, err, sizeof err));
    assert_int_equal(good.id, 1);
    assert_int_equal(log_calls, 2);
    assert_non_null(strstr(log_lines[0], "checkpoint 3 (job " JOB ", step 300) fails verification: in its chain, "
                                         "checkpoint 2: table \"" EMB "\" row 5"));
    print_message("log: %s\n", log_lines[0]);
    expect_table(f->db, 1, EMB, RL, &m1);

    /* A superseded version (row 4 of 1, which 2 rewrote) is not read by a
     * restore of 2, but verification finds it. */
    assert_int_equal(ckpt_debug_corrupt_row(f->db, 2, EMB, 5, 3), 0); /* flipped back */
    OK(ckpt_verify(f->db, 3, err, sizeof err));
    assert_int_equal(ckpt_debug_corrupt_row(f->db, 1, EMB, 4, 0), 0);
    expect_table(f->db, 2, EMB, RL, &m2);
    EXPECT_ERR(PSC_ECORRUPT, "checkpoint 2: in its chain, checkpoint 1: table \"" EMB "\" row 4: CRC32C mismatch",
               ckpt_verify(f->db, 2, err, sizeof err));
    EXPECT_ERR(PSC_ENOTFOUND, "none of the 3 committed checkpoints",
               ckpt_latest_good(f->db, JOB, &good, NULL, err, sizeof err));
    assert_int_equal(ckpt_debug_corrupt_row(f->db, 1, EMB, 4, 0), 0);
    OK(ckpt_latest_good(f->db, JOB, &good, NULL, err, sizeof err));
    assert_int_equal(good.id, 3);

    /* The header's length field; a lost version (counted by read_rows too). */
    assert_int_equal(ckpt_debug_corrupt_row(f->db, 3, EMB, 32, -4), 0);
    EXPECT_ERR(PSC_ECORRUPT, "checkpoint 3: table \"" EMB "\" row 32: length mismatch",
               ckpt_verify(f->db, 3, err, sizeof err));
    assert_int_equal(ckpt_debug_corrupt_row(f->db, 3, EMB, 32, -4), 0);
    assert_int_equal(ckpt_debug_corrupt_row(f->db, 2, EMB, 31, INT64_MIN), 0);
    assert_int_equal(ckpt_debug_corrupt_row(f->db, 2, EMB, 31, INT64_MIN), PSC_ENOTFOUND);
    EXPECT_ERR(PSC_ECORRUPT,
               "checkpoint 3: in its chain, checkpoint 2: table \"" EMB
               "\": 2 row versions stored, the manifest lists 3",
               ckpt_verify(f->db, 3, err, sizeof err));
    EXPECT_ERR(PSC_ECORRUPT, "checkpoint 2: table \"" EMB "\": 2 row versions stored, the manifest lists 3",
               ckpt_read_rows(f->db, 2, EMB, check_cb, &(got_t){.m = &m2, .table = EMB, .rl = RL}, err, sizeof err));
    assert_int_equal(ckpt_debug_corrupt_row(f->db, 2, EMB, 999, 0), PSC_ENOTFOUND);
    assert_int_equal(ckpt_debug_corrupt_row(f->db, 2, EMB, 4, RL), PSC_EINVAL);

    /* A broken chain: a prepared delta on a prepared delta whose parent is
     * discarded. A damaged parent manifest. */
    save_emb(f->db, 4, 1, r2, 1, NULL, 0);
    save_emb(f->db, 5, 4, r2, 1, NULL, 0);
    OK(ckpt_discard(f->db, 4, err, sizeof err));
    EXPECT_ERR(PSC_ECORRUPT, "checkpoint 5: chain broken: checkpoint 4 (parent of 5) is missing",
               ckpt_verify(f->db, 5, err, sizeof err));
    EXPECT_ERR(PSC_ECORRUPT, "checkpoint 5: chain broken: checkpoint 4 (parent of 5) is missing",
               ckpt_read_rows(f->db, 5, EMB, check_cb, NULL, err, sizeof err));
    EXPECT_ERR(PSC_ECORRUPT, "checkpoint 4 (parent of 5) is missing", ckpt_commit(f->db, 5, 10, err, sizeof err));
    assert_int_equal(ckpt_debug_corrupt(f->db, 1, NULL, 3), 0);
    EXPECT_ERR(PSC_ECORRUPT, "checkpoint 3: chain broken: checkpoint 1 (parent of 2) is damaged",
               ckpt_verify(f->db, 3, err, sizeof err));
    free(all);
    free(m1.who);
    free(m2.who);
    free(m3.who);
}

static void test_writer_errors(void **state)
{
    fx_t *f = *state;
    char err[512] = "";
    unsigned char rec[RL] = {0};
    char longname[CKPT_MAX_NAME + 2];
    memset(longname, 't', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;

    ckpt_writer_t *w = ckpt_begin(f->db, 1, JOB, 1);
    assert_int_equal(ckpt_add_row(w, EMB, 1, rec, RL), PSC_EINVAL);
    assert_int_equal(ckpt_add_table(w, EMB, RL), PSC_EINVAL); /* sticks */
    EXPECT_ERR(PSC_EINVAL, "checkpoint 1: row 1 of table \"" EMB "\", which is not declared",
               ckpt_prepare(w, err, sizeof err));
    struct {
        const char *table;
        uint32_t rl;
        int64_t row;
        size_t len;
        int code;
        const char *msg;
    } bad[] = {
        {longname, RL, 0, RL, PSC_EINVAL, "table name of 201 bytes"},
        {"", RL, 0, RL, PSC_EINVAL, "table name of 0 bytes"},
        {EMB, 0, 0, RL, PSC_EINVAL, "records of 0 bytes"},
        {EMB, CKPT_MAX_RECORD + 1, 0, RL, PSC_EINVAL, "records of 1048577 bytes"},
        {EMB, RL, -1, RL, PSC_EINVAL, "negative row -1"},
        {EMB, RL, 0, RL - 1, PSC_EINVAL, "row 0: record of 23 bytes, the table's have 24"},
    };
    for (size_t i = 0; i < PSC_ARRAY_LEN(bad); i++) {
        w = ckpt_begin(f->db, 1, JOB, 1);
        int rc = ckpt_add_table(w, bad[i].table, bad[i].rl);
        if (rc == 0) rc = ckpt_add_row(w, bad[i].table, bad[i].row, rec, bad[i].len);
        assert_int_equal(rc, bad[i].code);
        EXPECT_ERR(bad[i].code, bad[i].msg, ckpt_prepare(w, err, sizeof err));
    }
    w = ckpt_begin(f->db, 1, JOB, 1);
    assert_int_equal(ckpt_add_table(w, EMB, RL), 0);
    assert_int_equal(ckpt_add_row(w, EMB, 0, NULL, RL), PSC_EINVAL);
    ckpt_abort(w);
    w = ckpt_begin(f->db, 1, JOB, 1);
    assert_int_equal(ckpt_add_table(w, EMB, RL), 0);
    assert_int_equal(ckpt_add_table(w, EMB, RL), PSC_EEXISTS);
    EXPECT_ERR(PSC_EEXISTS, "table \"" EMB "\" declared twice", ckpt_prepare(w, err, sizeof err));
    /* A row twice: in order at once, out of order at prepare. */
    w = ckpt_begin(f->db, 1, JOB, 1);
    assert_int_equal(ckpt_add_table(w, EMB, RL), 0);
    assert_int_equal(ckpt_add_row(w, EMB, 3, rec, RL), 0);
    assert_int_equal(ckpt_add_row(w, EMB, 3, rec, RL), PSC_EEXISTS);
    EXPECT_ERR(PSC_EEXISTS, "row 3 added twice", ckpt_prepare(w, err, sizeof err));
    w = ckpt_begin(f->db, 1, JOB, 1);
    assert_int_equal(ckpt_add_table(w, EMB, RL), 0);
    int64_t dup[] = {5, 9, 2, 7, 9, 1};
    for (size_t i = 0; i < PSC_ARRAY_LEN(dup); i++) assert_int_equal(ckpt_add_row(w, EMB, dup[i], rec, RL), 0);
    EXPECT_ERR(PSC_EEXISTS, "checkpoint 1: table \"" EMB "\": row 9 added twice", ckpt_prepare(w, err, sizeof err));
    assert_int_equal(ckpt_debug_count_keys(f->db, 1), 0);

    /* Names that would collide without the length byte: table "a" row
     * 0x6200000000000001 and table "ab" row 1; a 200-byte name of 0xff bytes. */
    char ffname[CKPT_MAX_NAME + 1];
    memset(ffname, 0xff, CKPT_MAX_NAME);
    ffname[CKPT_MAX_NAME] = 0;
    const char *names[] = {"a", "ab", ffname, "a/b"};
    model_t m = model_new(4);
    int64_t one[] = {1}, two[] = {2, 3}, big = 0x6200000000000001;
    w = ckpt_begin(f->db, 1, JOB, 1);
    for (size_t i = 0; i < PSC_ARRAY_LEN(names); i++) assert_int_equal(ckpt_add_table(w, names[i], RL), 0);
    add_rows(w, 1, "a", RL, &big, 1);
    add_rows(w, 1, "ab", RL, one, 1);
    add_rows(w, 1, ffname, RL, two, 2);
    OK(ckpt_prepare(w, err, sizeof err));
    OK(ckpt_verify(f->db, 1, err, sizeof err));
    model_write(&m, 1, one, 1);
    expect_table(f->db, 1, "ab", RL, &m);
    memset(m.who, 0, 4 * sizeof *m.who);
    model_write(&m, 1, two, 2);
    expect_table(f->db, 1, ffname, RL, &m);
    memset(m.who, 0, 4 * sizeof *m.who);
    expect_table(f->db, 1, "a/b", RL, &m);
    got_t g = {.m = &m, .table = "a", .rl = RL};
    OK(ckpt_read_rows(f->db, 1, "a", check_cb, &g, err, sizeof err));
    assert_int_equal(g.n, 1);
    assert_int_equal(g.last, big);
    assert_int_equal(ckpt_debug_count_keys(f->db, 1), 1 + 4);
    free(m.who);
}

/* ---- crash: a child dies before, or right after, preparing a delta ---- */

static const char *self_exe;

static int crash_child(const char *dir, const char *mode)
{
    char err[512];
    ckpt_db_t *db;
    if (ckpt_open(dir, &db, err, sizeof err)) {
        fprintf(stderr, "child: %s\n", err);
        return 3;
    }
    ckpt_writer_t *w = ckpt_begin(db, 2, JOB, 200);
    ckpt_set_parent(w, 1);
    if (ckpt_add_table(w, EMB, RL)) return 4;
    int64_t rows[] = {0, 1, 2, 100};
    unsigned char rec[RL];
    for (int i = 0; i < 4; i++) {
        rec_fill(rec, RL, 2, EMB, rows[i]);
        if (ckpt_add_row(w, EMB, rows[i], rec, RL)) return 5;
    }
    if (strcmp(mode, "kill") == 0) raise(SIGKILL);
    if (strcmp(mode, "kill-after-prepare") == 0) {
        if (ckpt_prepare(w, err, sizeof err)) {
            fprintf(stderr, "child: %s\n", err);
            return 6;
        }
        raise(SIGKILL);
    }
    return 7;
}

static void run_child(const char *dir, const char *mode)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execl(self_exe, self_exe, "--crash-child", dir, mode, (char *)NULL);
        _exit(127);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL) fail_msg("child %s: status 0x%x, want SIGKILL", mode, st);
}

static void test_crash_and_prepared_delta(void **state)
{
    fx_t *f = *state;
    char err[512] = "";
    ckpt_info_t good;
    enum { N = 128 };
    model_t m1 = model_new(N);
    size_t n;
    int64_t *all = range(0, 100, 1, &n);
    save_emb(f->db, 1, 0, all, n, &m1, 3);
    ckpt_close(f->db);
    f->db = NULL;

    run_child(f->dir, "kill");
    reopen(f);
    EXPECT_LIST(f->db, "1c");
    assert_int_equal(ckpt_debug_count_keys(f->db, 2), 0);
    ckpt_close(f->db);
    f->db = NULL;

    /* Prepared, then killed: whole, but invisible to restores of 1 and to
     * latest_good until committed. */
    run_child(f->dir, "kill-after-prepare");
    reopen(f);
    EXPECT_LIST(f->db, "1c<2 2p");
    OK(ckpt_verify(f->db, 2, err, sizeof err));
    expect_table(f->db, 1, EMB, RL, &m1);
    OK(ckpt_latest_good(f->db, JOB, &good, NULL, err, sizeof err));
    assert_int_equal(good.id, 1);
    model_t m2 = model_copy(&m1);
    int64_t r2[] = {0, 1, 2, 100};
    model_write(&m2, 2, r2, 4);
    expect_table(f->db, 2, EMB, RL, &m2);
    OK(ckpt_commit(f->db, 2, 1, err, sizeof err));
    OK(ckpt_latest_good(f->db, JOB, &good, NULL, err, sizeof err));
    assert_int_equal(good.id, 2);
    EXPECT_LIST(f->db, "1c<2 2c"); /* 1 stays: 2 reads it */
    expect_table(f->db, 2, EMB, RL, &m2);
    free(all);
    free(m1.who);
    free(m2.who);
}

/* ---- stored bytes; version-1 manifests ---- */

static void le(unsigned char *p, uint64_t v, int nb)
{
    for (int i = 0; i < nb; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t fmix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

static size_t row_key(char *k, uint64_t id, const char *table, int64_t row)
{
    int p = snprintf(k, 64, "r/%016" PRIx64 "/", id);
    size_t tl = strlen(table);
    k[p] = (char)tl;
    memcpy(k + p + 1, table, tl);
    for (int i = 0; i < 8; i++) k[(size_t)p + 1 + tl + (size_t)i] = (char)((uint64_t)row >> (56 - 8 * i));
    return (size_t)p + 1 + tl + 8;
}

static size_t row_value(unsigned char *v, const void *rec, uint32_t len)
{
    memset(v, 0, 12);
    v[0] = 1;
    le(v + 4, psc_crc32c_mask(psc_crc32c(0, rec, len)), 4);
    le(v + 8, len, 4);
    memcpy(v + 12, rec, len);
    return 12 + (size_t)len;
}

typedef struct raw {
    rocksdb_options_t *o;
    rocksdb_t *r;
    rocksdb_readoptions_t *ro;
    rocksdb_writeoptions_t *wo;
} raw_t;

static void raw_open(fx_t *f, raw_t *r)
{
    ckpt_close(f->db);
    f->db = NULL;
    char *e = NULL;
    r->o = rocksdb_options_create();
    rocksdb_options_set_create_if_missing(r->o, 1);
    r->r = rocksdb_open(r->o, f->dir, &e);
    assert_null(e);
    r->ro = rocksdb_readoptions_create();
    r->wo = rocksdb_writeoptions_create();
}

static void raw_close(fx_t *f, raw_t *r)
{
    rocksdb_readoptions_destroy(r->ro);
    rocksdb_writeoptions_destroy(r->wo);
    rocksdb_close(r->r);
    rocksdb_options_destroy(r->o);
    reopen(f);
}

static void raw_expect(raw_t *r, const char *key, size_t kl, const unsigned char *want, size_t n)
{
    char *e = NULL;
    size_t got_n;
    char *val = rocksdb_get(r->r, r->ro, key, kl, &got_n, &e);
    assert_null(e);
    assert_non_null(val);
    assert_int_equal(got_n, n);
    assert_memory_equal(val, want, n);
    rocksdb_free(val);
}

static void raw_put(raw_t *r, const char *key, size_t kl, const void *val, size_t n)
{
    char *e = NULL;
    rocksdb_put(r->r, r->wo, key, kl, val, n, &e);
    assert_null(e);
}

static void test_format(void **state)
{
    fx_t *f = *state;
    char err[512] = "";
    const unsigned char a[4] = {1, 2, 3, 4}, b[4] = {9, 9, 9, 9}, c[4] = {7, 0, 0, 7};
    ckpt_writer_t *w = ckpt_begin(f->db, 0x21, "abc", 5);
    ckpt_set_parent(w, 0x20);
    assert_int_equal(ckpt_add_table(w, "ab", 4), 0);
    assert_int_equal(ckpt_add_row(w, "ab", 0x0102030405, b, 4), 0);
    assert_int_equal(ckpt_add_row(w, "ab", 3, a, 4), 0);
    EXPECT_ERR(PSC_ENOTFOUND, "checkpoint 33: parent 32 not found", ckpt_prepare(w, err, sizeof err));
    w = ckpt_begin(f->db, 0x20, "abc", 4);
    OK(ckpt_prepare(w, err, sizeof err)); /* a base without tables: version 1 */
    w = ckpt_begin(f->db, 0x21, "abc", 5);
    ckpt_set_parent(w, 0x20);
    assert_int_equal(ckpt_add_table(w, "ab", 4), 0);
    assert_int_equal(ckpt_add_row(w, "ab", 0x0102030405, b, 4), 0);
    assert_int_equal(ckpt_add_row(w, "ab", 3, a, 4), 0);
    OK(ckpt_prepare(w, err, sizeof err));
    ckpt_info_t info;
    OK(ckpt_get_info(f->db, 0x21, &info, err, sizeof err));

    raw_t r;
    raw_open(f, &r);
    /* The manifest, version 2. */
    unsigned char want[128], *p = want;
    p[0] = 2;
    p[1] = 0;
    le(p + 2, 0, 2);
    le(p + 4, 0, 4);
    le(p + 8, 0x21, 8);
    le(p + 16, 5, 8);
    uint64_t t;
    memcpy(&t, &info.created_unix, 8);
    le(p + 24, t, 8);
    le(p + 32, 0, 8);
    le(p + 40, 0x20, 8);
    le(p + 48, 1, 4);
    p[52] = 3;
    memcpy(p + 53, "abc", 3);
    p += 56;
    p[0] = 2;
    memcpy(p + 1, "ab", 2);
    le(p + 3, 4, 4);
    le(p + 7, 2, 8);
    uint64_t digest = fmix64(fmix64(0x0102030405 + 1) ^ psc_crc32c_mask(psc_crc32c(0, b, 4))) +
                      fmix64(fmix64(3 + 1) ^ psc_crc32c_mask(psc_crc32c(0, a, 4)));
    le(p + 15, digest, 8);
    p += 23;
    le(p, psc_crc32c_mask(psc_crc32c(0, want, (size_t)(p - want))), 4);
    p += 4;
    raw_expect(&r, "m/0000000000000021", 18, want, (size_t)(p - want));
    /* The base without tables is version 1. */
    char *e = NULL;
    size_t vn;
    char *val = rocksdb_get(r.r, r.ro, "m/0000000000000020", 18, &vn, &e);
    assert_non_null(val);
    assert_int_equal(val[0], 1);
    rocksdb_free(val);
    /* Row keys and values. */
    char key[64];
    unsigned char v[64];
    size_t kl = row_key(key, 0x21, "ab", 0x0102030405);
    assert_int_equal(kl, 19 + 1 + 2 + 8);
    assert_memory_equal(key,
                        "r/0000000000000021/\x02"
                        "ab\0\0\0\x01\x02\x03\x04\x05",
                        kl);
    raw_expect(&r, key, kl, v, row_value(v, b, 4));
    kl = row_key(key, 0x21, "ab", 3);
    raw_expect(&r, key, kl, v, row_value(v, a, 4));

    /* An extra version with a right CRC: verify counts it. */
    kl = row_key(key, 0x21, "ab", 4);
    raw_put(&r, key, kl, v, row_value(v, c, 4));
    raw_close(f, &r);
    EXPECT_ERR(PSC_ECORRUPT, "checkpoint 33: table \"ab\": 3 row versions stored, the manifest lists 2",
               ckpt_verify(f->db, 0x21, err, sizeof err));
    /* A version replaced by another record with a right CRC: the digest. */
    raw_open(f, &r);
    rocksdb_delete(r.r, r.wo, key, kl, &e);
    assert_null(e);
    kl = row_key(key, 0x21, "ab", 3);
    raw_put(&r, key, kl, v, row_value(v, c, 4));
    raw_close(f, &r);
    EXPECT_ERR(PSC_ECORRUPT, "checkpoint 33: table \"ab\": the row versions' digest",
               ckpt_verify(f->db, 0x21, err, sizeof err));

    /* Foreign keys in the manifest range: listed as damage, and the
     * checkpoints around them are still found. */
    raw_open(f, &r);
    raw_put(&r, "m/0", 3, "x", 1);
    raw_put(&r, "m/zz", 4, "x", 1);
    raw_close(f, &r);
    ckpt_info_t *all;
    int nall;
    EXPECT_ERR(PSC_ECORRUPT, "unexpected key \"m/0\"", ckpt_list(f->db, &all, &nall, err, sizeof err));
    OK(ckpt_get_info(f->db, 0x21, &info, err, sizeof err));
    assert_int_equal(info.parent, 0x20);
    OK(ckpt_get_info(f->db, 0x20, &info, err, sizeof err));
    assert_int_equal(info.needed_by, 0x21);
    EXPECT_ERR(PSC_ENOTFOUND, "checkpoint 0 not found", ckpt_get_info(f->db, 0, &info, err, sizeof err));
}

static void test_v1_manifest(void **state)
{
    fx_t *f = *state;
    char err[512] = "";
    /* A checkpoint as psc wrote it before deltas existed: a version-1 manifest
     * (byte by byte, as ckpt.h documents it) and one tensor. */
    raw_t r;
    raw_open(f, &r);
    const unsigned char w_bytes[5] = {9, 8, 7, 6, 5};
    unsigned char m[128], *p = m;
    p[0] = 1;
    p[1] = 1; /* committed */
    le(p + 2, 0, 2);
    le(p + 4, 1, 4);
    le(p + 8, 7, 8);
    le(p + 16, 700, 8);
    double now = 1.7e9;
    uint64_t bits;
    memcpy(&bits, &now, 8);
    le(p + 24, bits, 8);
    le(p + 32, 5, 8);
    p[40] = (unsigned char)strlen(JOB);
    memcpy(p + 41, JOB, strlen(JOB));
    p += 41 + strlen(JOB);
    le(p, 1, 2);
    p[2] = 'w';
    le(p + 3, 5, 8);
    le(p + 11, psc_crc32c_mask(psc_crc32c(0, w_bytes, 5)), 4);
    p += 15;
    le(p, psc_crc32c_mask(psc_crc32c(0, m, (size_t)(p - m))), 4);
    p += 4;
    raw_put(&r, "m/0000000000000007", 18, m, (size_t)(p - m));
    unsigned char tv[21] = {1, 0, 0, 0};
    le(tv + 4, psc_crc32c_mask(psc_crc32c(0, w_bytes, 5)), 4);
    le(tv + 8, 5, 8);
    memcpy(tv + 16, w_bytes, 5);
    raw_put(&r, "t/0000000000000007/w", 20, tv, sizeof tv);
    raw_close(f, &r);

    ckpt_info_t info, good;
    OK(ckpt_get_info(f->db, 7, &info, err, sizeof err));
    assert_int_equal(info.step, 700);
    assert_int_equal(info.committed, 1);
    assert_int_equal(info.parent, 0);
    assert_int_equal(info.ntables, 0);
    assert_int_equal(info.rows, 0);
    OK(ckpt_verify(f->db, 7, err, sizeof err));
    OK(ckpt_latest_good(f->db, JOB, &good, NULL, err, sizeof err));
    assert_int_equal(good.id, 7);
    void *got;
    size_t len;
    OK(ckpt_read(f->db, 7, "w", &got, &len, err, sizeof err));
    assert_int_equal(len, 5);
    assert_memory_equal(got, w_bytes, 5);
    free(got);
    ckpt_table_info_t *tabs = (ckpt_table_info_t *)1;
    int nt = 1;
    OK(ckpt_tables(f->db, 7, &tabs, &nt, err, sizeof err));
    assert_int_equal(nt, 0);
    assert_null(tabs);
    EXPECT_ERR(PSC_ENOTFOUND, "checkpoint 7 has no table",
               ckpt_read_rows(f->db, 7, EMB, check_cb, NULL, err, sizeof err));

    /* A delta on it: the table starts in the delta. */
    model_t m8 = model_new(10);
    int64_t rows[] = {1, 9};
    save_emb(f->db, 8, 7, rows, 2, &m8, 1);
    expect_table(f->db, 8, EMB, RL, &m8);
    EXPECT_LIST(f->db, "7c<8 8c");
    OK(ckpt_latest_good(f->db, JOB, &good, NULL, err, sizeof err));
    assert_int_equal(good.id, 8);
    free(m8.who);
}

/* ---- scale: 200k rows of 72 bytes, three deltas ---- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void test_scale(void **state)
{
    fx_t *f = *state;
    char err[512] = "";
    enum { BASE = 200000, NEW = 10000, REC = 72 };
    const int64_t total = BASE + 3 * NEW;
    model_t m[5];
    m[0] = model_new(total);
    int64_t *rows = malloc((size_t)total * sizeof *rows);
    assert_non_null(rows);
    for (uint64_t id = 1; id <= 4; id++) {
        size_t n = 0;
        if (id == 1) {
            for (int64_t r = 0; r < BASE; r++) rows[n++] = r;
        } else {
            /* A quarter of the rows so far, and NEW new ones. */
            for (int64_t r = 0; r < BASE + (int64_t)(id - 2) * NEW; r++)
                if ((fmix64((uint64_t)r * 31 + id) & 3) == 0) rows[n++] = r;
            for (int64_t r = 0; r < NEW; r++) rows[n++] = BASE + (int64_t)(id - 2) * NEW + r;
        }
        if (id == 3) /* out of order: reversed */
            for (size_t i = 0; i < n / 2; i++) {
                int64_t x = rows[i];
                rows[i] = rows[n - 1 - i];
                rows[n - 1 - i] = x;
            }
        m[id] = model_copy(&m[id - 1]);
        double t0 = now_s();
        ckpt_writer_t *w = ckpt_begin(f->db, id, JOB, (int64_t)id);
        ckpt_set_parent(w, id - 1);
        assert_int_equal(ckpt_add_table(w, "emb72", REC), 0);
        add_rows(w, id, "emb72", REC, rows, n);
        double t1 = now_s();
        OK(ckpt_prepare(w, err, sizeof err));
        OK(ckpt_commit(f->db, id, 10, err, sizeof err));
        double t2 = now_s();
        model_write(&m[id], id, rows, n);
        print_message("checkpoint %" PRIu64 ": %zu rows: add %.3f s, prepare+commit %.3f s\n", id, n, t1 - t0, t2 - t1);
    }
    for (uint64_t id = 1; id <= 4; id++) {
        double t0 = now_s();
        expect_table(f->db, id, "emb72", REC, &m[id]);
        double t1 = now_s();
        OK(ckpt_verify(f->db, id, err, sizeof err));
        double t2 = now_s();
        uint64_t nr = 0;
        for (int64_t r = 0; r < total; r++) nr += m[id].who[r] != 0;
        print_message("checkpoint %" PRIu64 " (a chain of %" PRIu64 " checkpoints): read_rows %" PRIu64
                      " rows %.3f s, verify %.3f s\n",
                      id, id, nr, t1 - t0, t2 - t1);
    }
    free(rows);
    for (int i = 0; i < 5; i++) free(m[i].who);
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--crash-child") == 0) return crash_child(argv[2], argv[3]);
    self_exe = "/proc/self/exe";
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_base_and_deltas, setup, teardown),
        cmocka_unit_test_setup_teardown(test_abandoned_branches, setup, teardown),
        cmocka_unit_test_setup_teardown(test_keep_last_k_chains, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_rows, setup, teardown),
        cmocka_unit_test_setup_teardown(test_writer_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crash_and_prepared_delta, setup, teardown),
        cmocka_unit_test_setup_teardown(test_format, setup, teardown),
        cmocka_unit_test_setup_teardown(test_v1_manifest, setup, teardown),
        cmocka_unit_test_setup_teardown(test_scale, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
