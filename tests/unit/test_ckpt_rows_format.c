/* test_ckpt_rows_format — the stored bytes of sparse table rows and
 * version-2 manifests are the format ckpt.h documents; version-1 manifests
 * (written here byte by byte, as an older psc did) still read and deltas
 * build on them; 200k rows of 72 bytes with three deltas (the times are
 * printed). Real RocksDB under a mkdtemp folder in /tmp; the fixture is
 * ckpt_rows_fixture.h, the other cases test_ckpt_rows.c.
 */
#include "ckpt_rows_fixture.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_format, setup, teardown),
        cmocka_unit_test_setup_teardown(test_v1_manifest, setup, teardown),
        cmocka_unit_test_setup_teardown(test_scale, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
