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
 * back to the newest checkpoint whose chain is good. Writer errors stick and
 * write nothing. The stored bytes, version-1 manifests and 200k rows are
 * test_ckpt_rows_format.c's; the fixture is ckpt_rows_fixture.h.
 */
#include "ckpt_rows_fixture.h"

/* ckpt_read_rows_page in pages of `page` rows gives what ckpt_read_rows gives. */
static void expect_pages(ckpt_db_t *db, uint64_t id, const char *table, size_t rl, const model_t *m, size_t page)
{
    char err[512] = "";
    got_t g = {.m = m, .table = table, .rl = rl};
    int64_t after = -1;
    int pages = 0;
    for (int more = 1; more; pages++) {
        uint64_t before = g.n;
        OK(ckpt_read_rows_page(db, id, table, after, page, check_cb, &g, &more, err, sizeof err));
        if (g.failure[0]) fail_msg("page %d of %" PRIu64 " %s: %s", pages, id, table, g.failure);
        assert_true(g.n - before <= page);
        assert_true(!more || g.n - before == page);
        after = g.last;
    }
    uint64_t want = 0;
    for (int64_t r = 0; r < m->n; r++) want += m->who[r] != 0;
    if (g.n != want) fail_msg("pages of %" PRIu64 " %s: %" PRIu64 " rows, want %" PRIu64, id, table, g.n, want);
}

typedef struct point {
    const model_t *m;
    const int64_t *rows;
    const char *table;
    size_t rl;
    unsigned char *seen;
    char failure[256];
} point_t;

static int point_cb(void *arg, size_t i, const void *rec, size_t len)
{
    point_t *p = arg;
    int64_t row = p->rows[i];
    unsigned char want[256];
    if (row < 0 || row >= p->m->n || p->m->who[row] == 0 || p->seen[i]++) {
        snprintf(p->failure, sizeof p->failure, "row %" PRId64 " (index %zu) given, not in the checkpoint or twice",
                 row, i);
        return 0;
    }
    rec_fill(want, p->rl, p->m->who[row], p->table, row);
    if (len != p->rl || memcmp(rec, want, len) != 0)
        snprintf(p->failure, sizeof p->failure, "row %" PRId64 ": not the record of checkpoint %" PRIu64, row,
                 p->m->who[row]);
    return 0;
}

/* ckpt_get_rows of every row, some twice, and ids no checkpoint holds: each
 * held one gets its newest version in the chain, the others nothing. */
static void expect_points(ckpt_db_t *db, uint64_t id, const char *table, size_t rl, const model_t *m)
{
    char err[512] = "";
    size_t n = (size_t)m->n + 3;
    int64_t *rows = malloc(n * sizeof *rows);
    for (int64_t r = 0; r < m->n; r++) rows[r] = m->n - 1 - r; /* descending: any order */
    rows[m->n] = -1, rows[m->n + 1] = m->n + 100, rows[m->n + 2] = 0;
    point_t p = {.m = m, .rows = rows, .table = table, .rl = rl, .seen = calloc(n, 1)};
    OK(ckpt_get_rows(db, id, table, rows, n, point_cb, &p, err, sizeof err));
    if (p.failure[0]) fail_msg("get_rows %" PRIu64 " %s: %s", id, table, p.failure);
    for (size_t i = 0; i < n; i++) {
        int held = rows[i] >= 0 && rows[i] < m->n && m->who[rows[i]] != 0;
        if (p.seen[i] != held) fail_msg("get_rows %" PRIu64 ": row %" PRId64 " seen %d times", id, rows[i], p.seen[i]);
    }
    free(p.seen);
    free(rows);
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
            expect_pages(f->db, id, EMB, RL, &m[id], 7); /* the Restore-free reads (psctl export/eval --checkpoint) */
            expect_pages(f->db, id, EMB, RL, &m[id], 5000);
            expect_points(f->db, id, EMB, RL, &m[id]);
        }
        expect_points(f->db, 4, "item_emb/part_1", 40, &t2);
        EXPECT_ERR(PSC_ENOTFOUND, "checkpoint 3 has no table \"item_emb/part_1\"",
                   ckpt_get_rows(f->db, 3, "item_emb/part_1", NULL, 0, point_cb, NULL, err, sizeof err));
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

/* Tombstones: a delta that deletes rows (ckpt_add_row with no record, a
 * version-3 manifest) reads back without them in every reader, a later delta
 * brings one back, and verification counts them. */
static void test_tombstones(void **state)
{
    fx_t *f = *state;
    char err[512] = "";
    enum { N = 100 };
    model_t m1 = model_new(N);
    size_t n;
    int64_t *all = range(0, 50, 1, &n);
    save_emb(f->db, 1, 0, all, n, &m1, 10);
    free(all);
    model_t m2 = model_copy(&m1);
    int64_t r2[] = {5, 60}, d2[] = {7, 8, 49, 99}; /* 99 never existed: a tombstone of nothing */
    for (int pass = 0; pass < 2; pass++) { /* the first refuses a row twice, tombstone or not; the second is saved */
        ckpt_writer_t *w = ckpt_begin(f->db, 2, JOB, 200);
        ckpt_set_parent(w, 1);
        assert_int_equal(ckpt_add_table(w, EMB, RL), 0);
        add_rows(w, 2, EMB, RL, r2, 2);
        for (size_t i = 0; i < PSC_ARRAY_LEN(d2); i++) {
            assert_int_equal(ckpt_add_row(w, EMB, d2[i], NULL, 0), 0);
            m2.who[d2[i]] = 0;
        }
        if (pass == 0) {
            assert_int_equal(ckpt_add_row(w, EMB, 99, NULL, 0), PSC_EEXISTS);
            ckpt_abort(w);
        } else {
            OK(ckpt_prepare(w, err, sizeof err));
        }
    }
    OK(ckpt_commit(f->db, 2, 10, err, sizeof err));
    model_write(&m2, 2, r2, 2);
    model_t m3 = model_copy(&m2);
    int64_t r3[] = {8};
    save_emb(f->db, 3, 2, r3, 1, &m3, 10);
    const model_t *m[] = {NULL, &m1, &m2, &m3};
    for (uint64_t id = 1; id <= 3; id++) {
        expect_table(f->db, id, EMB, RL, m[id]);
        OK(ckpt_verify(f->db, id, err, sizeof err));
        expect_pages(f->db, id, EMB, RL, m[id], 7);
        expect_points(f->db, id, EMB, RL, m[id]);
    }
    ckpt_info_t one;
    OK(ckpt_get_info(f->db, 2, &one, err, sizeof err));
    assert_int_equal(one.rows, 6); /* row versions, tombstones included */
    free(m1.who);
    free(m2.who);
    free(m3.who);
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
    if (strcmp(mode, "kill-after-ingest") == 0) {
        /* the rows ingested, the manifest not written: as a crash between the two */
        ckpt_debug_stop_after_ingest(db, 1);
        if (ckpt_prepare(w, err, sizeof err) != PSC_EIO) return 8;
        raise(SIGKILL);
    }
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

/* Checkpoint 1, a base of rows 0..99 of a 128-row model, committed; the store closed. */
static model_t save_base_closed(fx_t *f)
{
    model_t m1 = model_new(128);
    size_t n;
    int64_t *all = range(0, 100, 1, &n);
    save_emb(f->db, 1, 0, all, n, &m1, 3);
    free(all);
    ckpt_close(f->db);
    f->db = NULL;
    return m1;
}

static void test_crash_and_prepared_delta(void **state)
{
    fx_t *f = *state;
    char err[512] = "";
    ckpt_info_t good;
    model_t m1 = save_base_closed(f);

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
    free(m1.who);
    free(m2.who);
}

/* A prepare that stops between its rows' ingest and its manifest (killed, or
 * failed) leaves rows no reader sees; the next open deletes them (and table
 * files a prepare left in <dir>/ingest), and a prepare of the same id after
 * one that failed in-process writes its own rows only. */
static void test_crash_after_ingest(void **state)
{
    fx_t *f = *state;
    char err[512] = "";
    ckpt_info_t good;
    model_t m1 = save_base_closed(f);

    run_child(f->dir, "kill-after-ingest");
    char stray[128];
    snprintf(stray, sizeof stray, "%s/ingest/00000000000000ff-0.sst", f->dir);
    FILE *fp = fopen(stray, "w"); /* as a prepare killed while writing its file */
    assert_non_null(fp);
    fputs("half a table file", fp);
    fclose(fp);
    reopen(f);
    EXPECT_LIST(f->db, "1c");
    assert_int_equal(ckpt_debug_count_keys(f->db, 2), 0);
    assert_int_equal(access(stray, F_OK), -1);
    OK(ckpt_latest_good(f->db, JOB, &good, NULL, err, sizeof err));
    assert_int_equal(good.id, 1);
    /* id 2 again, other rows: only they are there */
    model_t m2 = model_copy(&m1);
    int64_t r2[] = {5, 6, 120};
    save_emb(f->db, 2, 1, r2, 3, &m2, 0);
    OK(ckpt_verify(f->db, 2, err, sizeof err));
    expect_table(f->db, 2, EMB, RL, &m2);

    /* in-process: rows ingested, no manifest; invisible, then replaced */
    ckpt_writer_t *w = ckpt_begin(f->db, 3, JOB, 300);
    ckpt_set_parent(w, 2);
    assert_int_equal(ckpt_add_table(w, EMB, RL), 0);
    int64_t r3[] = {7, 8, 9, 10};
    add_rows(w, 3, EMB, RL, r3, 4);
    ckpt_debug_stop_after_ingest(f->db, 1);
    EXPECT_ERR(PSC_EIO, "stopped after its rows", ckpt_prepare(w, err, sizeof err));
    ckpt_debug_stop_after_ingest(f->db, 0);
    assert_int_equal(ckpt_debug_count_keys(f->db, 3), 4);
    EXPECT_LIST(f->db, "1c<2 2p");
    model_t m3 = model_copy(&m2);
    save_emb(f->db, 3, 2, r3 + 2, 2, &m3, 0);
    assert_int_equal(ckpt_debug_count_keys(f->db, 3), 1 + 1 + 2); /* manifest, global_step, 2 rows */
    OK(ckpt_verify(f->db, 3, err, sizeof err));
    expect_table(f->db, 3, EMB, RL, &m3);
    OK(ckpt_commit(f->db, 2, 3, err, sizeof err));
    OK(ckpt_commit(f->db, 3, 3, err, sizeof err));
    reopen(f);
    EXPECT_LIST(f->db, "1c<3 2c<3 3c");
    expect_table(f->db, 3, EMB, RL, &m3);
    free(m1.who);
    free(m2.who);
    free(m3.who);
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--crash-child") == 0) return crash_child(argv[2], argv[3]);
    self_exe = "/proc/self/exe";
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_base_and_deltas, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tombstones, setup, teardown),
        cmocka_unit_test_setup_teardown(test_abandoned_branches, setup, teardown),
        cmocka_unit_test_setup_teardown(test_keep_last_k_chains, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_rows, setup, teardown),
        cmocka_unit_test_setup_teardown(test_writer_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crash_and_prepared_delta, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crash_after_ingest, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
