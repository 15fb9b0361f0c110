/* test_ctr_criteo — the Criteo TSV format (worker/data/format_criteo.c) through the
 * reader, on small hand-written files (plain and gzip, in a mkdtemp folder).
 *
 * Fields: every value read back exactly (dense = logf(1 + max(x, 0)) for the
 * log1p columns, the raw value for a column whose transform is none; keys =
 * the hex value: lower and upper case, 16 digits, leading zeros; missing I is
 * 0 and missing C an empty bag; int64's extremes); the batch's off array.
 * CRLF endings and a last line without '\n'; a 70 KiB line (> 64 KiB); gzip
 * giving the same batch. Bad lines: each message exact with its FILE:LINE
 * (field count, label, integer, overflow, hex, too many hex digits, empty
 * line, bytes shown escaped); data.bad_record_limit skips and counts up to L
 * and the (L+1)th stops with the limit named; the spec check.
 */
#define PSC_CTR_FIXTURE_TESTS
#include "ctr_fixture.h"
#include "reader.h"
#include "psc.h"

#include <math.h>

/* One line from 40 fields (NULL = empty), joined by tabs. */
static void join(char *dst, size_t n, const char *const *fields)
{
    size_t o = 0;
    for (int i = 0; i < 40; i++) {
        int w = snprintf(dst + o, n - o, "%s%s", i ? "\t" : "", fields[i] ? fields[i] : "");
        assert_true(w >= 0 && (size_t)w < n - o);
        o += (size_t)w;
    }
}

/* The examples' expected values. */
typedef struct want {
    float label;
    int64_t ints[13];
    int has_int[13];
    uint64_t keys[26];
    int has_key[26];
} want_t;

static const char *const g_lines[3][40] = {
    /* every field present: small, zero, negative, large; lower, upper, 16 digits, leading zeros */
    {"1", "0", "1", "2", "-3", "10", "100", "65535", "7", "8", "9", "12345678", "9223372036854775807",
     "-9223372036854775808", "68fd1e64", "DEADBEEF", "ffffffffffffffff", "0000000000000001", "0", "a", "B",
     "aBcD", "1234567890abcdef", "05db9164", "8947f767", "11c9d79e", "52a787c8", "4cf72387", "fbad5c96",
     "18671b18", "0b153874", "a73ee510", "ceb10289", "77212bd7", "79507c6b", "7203f04e", "07d13a8f",
     "2c14c412", "49013ffe", "2ea0e1e1"},
    /* every feature missing */
    {"0"},
    /* a few present */
    {"0", NULL, "+5", NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "-1", NULL, "3c", NULL, NULL,
     NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
     NULL, NULL, NULL, "FFFFFFFF"},
};

static void want_of(const char *const *fields, want_t *w)
{
    memset(w, 0, sizeof *w);
    w->label = (float)atoi(fields[0]);
    for (int k = 0; k < 13; k++)
        if (fields[1 + k] && *fields[1 + k]) {
            w->has_int[k] = 1;
            w->ints[k] = strtoll(fields[1 + k], NULL, 10);
        }
    for (int k = 0; k < 26; k++)
        if (fields[14 + k] && *fields[14 + k]) {
            w->has_key[k] = 1;
            w->keys[k] = strtoull(fields[14 + k], NULL, 16);
        }
}

/* Checks example i of b against w; raw_col: a column read without log1p (-1 none). */
static void check_example(const data_batch_t *b, int i, const want_t *w, int raw_col)
{
    assert_true(b->label[i] == w->label);
    for (int k = 0; k < 13; k++) {
        float x = b->dense[i * 13 + k], e;
        if (!w->has_int[k])
            e = 0.0f;
        else if (k == raw_col)
            e = (float)w->ints[k];
        else
            e = logf(1.0f + (float)(w->ints[k] > 0 ? w->ints[k] : 0));
        assert_true(x == e);
    }
    for (int k = 0; k < 26; k++) {
        int64_t lo = b->off[i * 26 + k], hi = b->off[i * 26 + k + 1];
        assert_int_equal(hi - lo, w->has_key[k]);
        if (w->has_key[k]) {
            assert_true(b->keys[lo] == w->keys[k]);
            assert_true(b->weights[lo] == 1.0f);
        }
    }
}

static void read_fields(int gz, const char *eol, int raw_col)
{
    char text[8192], line[2048], path[512], *files[1], err[1024];
    size_t o = 0;
    for (int i = 0; i < 3; i++) {
        join(line, sizeof line, g_lines[i]);
        o += (size_t)snprintf(text + o, sizeof text - o, "%s%s", line, i < 2 ? eol : ""); /* last: no newline */
    }
    psc_job_spec_t s;
    psc_feature_spec_t feats[40];
    ctr_fix_criteo_spec(&s, feats);
    if (raw_col >= 0) feats[1 + raw_col].transform = PSC_TRANSFORM_NONE;
    ctr_fix_write_str(gz ? "fields.tsv.gz" : "fields.tsv", text, gz, path, sizeof path);
    data_reader_t *r = ctr_fix_open1(&s, files, path);
    data_batch_t b = {0};
    int epoch = -1;
    assert_int_equal(data_reader_next(r, &b, 16, &epoch, err, sizeof err), 3);
    assert_int_equal(epoch, 0);
    assert_int_equal(b.n, 3);
    assert_int_equal(b.num_dense, 13);
    assert_int_equal(b.num_cat, 26);
    for (int i = 0; i < 3; i++) {
        want_t w;
        want_of(g_lines[i], &w);
        check_example(&b, i, &w, raw_col);
    }
    /* the layout: example 0 has 26 one-pair bags, example 1 none, example 2 two */
    assert_int_equal(b.off[0], 0);
    for (int k = 0; k <= 26; k++) assert_int_equal(b.off[k], k);
    for (int k = 26; k <= 52; k++) assert_int_equal(b.off[k], 26);
    assert_int_equal(b.off[52 + 1], 26);
    assert_int_equal(b.off[52 + 2], 27);
    assert_int_equal(b.off[78], 28);
    assert_int_equal(b.nnz, 28);
    assert_true(b.keys[26] == 0x3c && b.keys[27] == 0xffffffffull);
    assert_true(b.keys[1] == 0xdeadbeefull && b.keys[2] == UINT64_MAX && b.keys[3] == 1);
    assert_int_equal(data_reader_next(r, &b, 16, &epoch, err, sizeof err), 0);
    assert_int_equal(data_reader_skipped(r), 0);
    data_batch_free(&b);
    data_reader_close(r);
}

static void test_criteo_fields(void **state)
{
    (void)state;
    read_fields(0, "\n", -1);
}

static void test_criteo_gzip(void **state)
{
    (void)state;
    read_fields(1, "\n", -1);
}

static void test_criteo_crlf(void **state)
{
    (void)state;
    read_fields(0, "\r\n", -1);
    read_fields(1, "\r\n", -1);
}

/* I4 (column 3, "-3") without the transform: its raw value. */
static void test_criteo_transform_none(void **state)
{
    (void)state;
    read_fields(0, "\n", 3);
    read_fields(0, "\n", 12); /* INT64_MIN as a float */
}

/* A line longer than 64 KiB (I1 with 70000 leading zeros) between two others. */
static void test_criteo_long_line(void **state)
{
    (void)state;
    size_t zeros = 70000, n = zeros + 4096;
    char *text = malloc(n), line[2048], path[512], *files[1], err[1024];
    const char *f[40] = {"1", "5", "6"};
    join(line, sizeof line, f);
    size_t o = (size_t)snprintf(text, n, "%s\n1\t", line);
    memset(text + o, '0', zeros);
    o += zeros;
    o += (size_t)snprintf(text + o, n - o, "7%s\n%s\n", line + 3, line);
    psc_job_spec_t s;
    psc_feature_spec_t feats[40];
    ctr_fix_criteo_spec(&s, feats);
    ctr_fix_write("long.tsv", text, o, 1, path, sizeof path);
    data_reader_t *r = ctr_fix_open1(&s, files, path);
    data_batch_t b = {0};
    assert_int_equal(data_reader_next(r, &b, 16, NULL, err, sizeof err), 3);
    assert_true(b.dense[0] == logf(6.0f) && b.dense[13] == logf(8.0f) && b.dense[26] == logf(6.0f));
    assert_true(b.dense[14] == logf(7.0f));
    data_batch_free(&b);
    data_reader_close(r);

    /* the same with a 70000-digit categorical field on line 2: bad, shown cut */
    o = (size_t)snprintf(text, n, "%s\n1", line);
    for (int i = 0; i < 39; i++) text[o++] = '\t';
    memset(text + o, 'a', zeros);
    o += zeros;
    text[o] = 0;
    ctr_fix_expect_bad(&s, "long_bad.tsv", text, 2,
                       "field 40 (C26): \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...\" has more than 16 hex digits");
    free(text);
}

/* A file of a good line, then `bad` (fields joined) on line 2. */
static void expect_bad_fields(const char *const *fields, const char *msg)
{
    char text[4096], line[2048];
    const char *good[40] = {"0"};
    join(line, sizeof line, good);
    size_t o = (size_t)snprintf(text, sizeof text, "%s\n", line);
    join(text + o, sizeof text - o, fields);
    psc_job_spec_t s;
    psc_feature_spec_t feats[40];
    ctr_fix_criteo_spec(&s, feats);
    ctr_fix_expect_bad(&s, "bad.tsv", text, 2, msg);
}

static void test_criteo_bad_fields(void **state)
{
    (void)state;
    const char *f[40] = {"2"};
    expect_bad_fields(f, "field 1 (label): \"2\" is not 0 or 1");
    f[0] = "01";
    expect_bad_fields(f, "field 1 (label): \"01\" is not 0 or 1");
    f[0] = "";
    expect_bad_fields(f, "field 1 (label): \"\" is not 0 or 1");
    f[0] = "1";
    f[2] = "12a";
    expect_bad_fields(f, "field 3 (I2): \"12a\" is not an integer");
    f[2] = "-";
    expect_bad_fields(f, "field 3 (I2): \"-\" is not an integer");
    f[2] = " 1";
    expect_bad_fields(f, "field 3 (I2): \" 1\" is not an integer");
    f[2] = "1.5";
    expect_bad_fields(f, "field 3 (I2): \"1.5\" is not an integer");
    f[2] = NULL;
    f[1] = "9223372036854775808";
    expect_bad_fields(f, "field 2 (I1): \"9223372036854775808\" is out of the 64-bit integer range");
    f[1] = NULL;
    f[13] = "-9223372036854775809";
    expect_bad_fields(f, "field 14 (I13): \"-9223372036854775809\" is out of the 64-bit integer range");
    f[13] = NULL;
    f[16] = "xyz";
    expect_bad_fields(f, "field 17 (C3): \"xyz\" is not hexadecimal");
    f[16] = "0x1f";
    expect_bad_fields(f, "field 17 (C3): \"0x1f\" is not hexadecimal");
    f[16] = NULL;
    f[14] = "12345678901234567";
    expect_bad_fields(f, "field 15 (C1): \"12345678901234567\" has more than 16 hex digits");
    f[14] = "a\x01\"b";
    expect_bad_fields(f, "field 15 (C1): \"a\\x01\\x22b\" is not hexadecimal");
    f[14] = NULL;
    f[38] = "zz\r"; /* a CR that does not end the line is data */
    expect_bad_fields(f, "field 39 (C25): \"zz\\x0d\" is not hexadecimal");
}

static void test_criteo_bad_lines(void **state)
{
    (void)state;
    char line[512], text[4096];
    const char *f[40] = {"1"};
    join(line, sizeof line, f);
    psc_job_spec_t s;
    psc_feature_spec_t feats[40];
    ctr_fix_criteo_spec(&s, feats);
    snprintf(text, sizeof text, "%s\n%s\n%s\n", line, line, line + 2); /* 39 fields */
    ctr_fix_expect_bad(&s, "count39.tsv", text, 3, "expected 40 tab-separated fields, got 39");
    snprintf(text, sizeof text, "%s\t\n", line);
    ctr_fix_expect_bad(&s, "count41.tsv", text, 1, "expected 40 tab-separated fields, got 41");
    snprintf(text, sizeof text, "1 2 3\n");
    ctr_fix_expect_bad(&s, "spaces.tsv", text, 1, "expected 40 tab-separated fields, got 1");
    snprintf(text, sizeof text, "%s\n\n%s\n", line, line);
    ctr_fix_expect_bad(&s, "empty.tsv", text, 2, "empty line");
    snprintf(text, sizeof text, "%s\r\n\r\n", line);
    ctr_fix_expect_bad(&s, "empty_crlf.tsv", text, 2, "empty line");
}

/* good, bad, good, bad, good: limit 2 reads 3 and skips 2; limit 1 stops at
 * line 4; limit 0 at line 2. Over 2 epochs the limit holds per epoch. */
static void test_criteo_bad_record_limit(void **state)
{
    (void)state;
    char good[2048], bad[2048], text[16384], path[512], *files[1], err[1024];
    const char *fg[40] = {"1", "3"}, *fb[40] = {"1", "x"};
    join(good, sizeof good, fg);
    join(bad, sizeof bad, fb);
    snprintf(text, sizeof text, "%s\n%s\n%s\n%s\n%s\n", good, bad, good, bad, good);
    psc_job_spec_t s;
    psc_feature_spec_t feats[40];
    ctr_fix_criteo_spec(&s, feats);
    ctr_fix_write_str("limit.tsv.gz", text, 1, path, sizeof path);

    s.bad_record_limit = 2;
    s.epochs = 2;
    data_reader_t *r = ctr_fix_open1(&s, files, path);
    data_batch_t b = {0};
    int epoch;
    assert_int_equal(data_reader_next(r, &b, 10, &epoch, err, sizeof err), 3);
    assert_int_equal(epoch, 0);
    assert_int_equal(data_reader_skipped(r), 2);
    for (int i = 0; i < 3; i++) assert_true(b.dense[i * 13] == logf(4.0f));
    assert_int_equal(data_reader_next(r, &b, 10, &epoch, err, sizeof err), 3);
    assert_int_equal(epoch, 1);
    assert_int_equal(data_reader_skipped(r), 4);
    assert_int_equal(data_reader_next(r, &b, 10, &epoch, err, sizeof err), 0);
    data_reader_close(r);

    s.bad_record_limit = 1;
    r = ctr_fix_open1(&s, files, path);
    char want[1024];
    snprintf(want, sizeof want,
             "%s:4: field 2 (I1): \"x\" is not an integer (more than data.bad_record_limit = 1 bad records)", path);
    assert_int_equal(data_reader_next(r, &b, 10, &epoch, err, sizeof err), PSC_ECORRUPT);
    assert_string_equal(err, want);
    assert_int_equal(data_reader_skipped(r), 1);
    data_reader_close(r);

    s.bad_record_limit = 0;
    r = ctr_fix_open1(&s, files, path);
    snprintf(want, sizeof want, "%s:2: field 2 (I1): \"x\" is not an integer", path);
    assert_int_equal(data_reader_next(r, &b, 10, &epoch, err, sizeof err), PSC_ECORRUPT);
    assert_string_equal(err, want);
    assert_int_equal(data_reader_skipped(r), 0);
    data_reader_close(r);
    data_batch_free(&b);
}

static void test_criteo_spec_check(void **state)
{
    (void)state;
    psc_job_spec_t s;
    psc_feature_spec_t feats[40];
    ctr_fix_criteo_spec(&s, feats);
    char *files[1] = {"/nonexistent"}, err[1024];
    s.train_files = files;
    s.num_train_files = 1;
    s.num_dense = 12;
    data_reader_t *r = NULL;
    assert_int_equal(data_reader_open(&s, 0, 0, 1, 1, 0, &r, err, sizeof err), PSC_ECONFIG);
    assert_string_equal(err, "data.features: criteo has 13 dense (I1..I13) and 26 categorical features (C1..C26), "
                             "the spec 12 and 26");
    assert_null(r);
    s.num_dense = 13;
    feats[5].dense_offset = 13;
    assert_int_equal(data_reader_open(&s, 0, 0, 1, 1, 0, &r, err, sizeof err), PSC_ECONFIG);
    assert_string_equal(err, "data.features[5] (I5): a criteo dense feature is one column of 0..12, not 1 at 13");
    feats[5].dense_offset = 4;
    assert_int_equal(data_reader_open(&s, 0, 0, 1, 1, 0, &r, err, sizeof err), PSC_ECONFIG);
    assert_string_equal(err, "data.train: no file matches \"/nonexistent\"");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_criteo_fields),         cmocka_unit_test(test_criteo_gzip),
        cmocka_unit_test(test_criteo_crlf),           cmocka_unit_test(test_criteo_transform_none),
        cmocka_unit_test(test_criteo_long_line),      cmocka_unit_test(test_criteo_bad_fields),
        cmocka_unit_test(test_criteo_bad_lines),      cmocka_unit_test(test_criteo_bad_record_limit),
        cmocka_unit_test(test_criteo_spec_check),
    };
    return cmocka_run_group_tests(tests, ctr_fix_setup, ctr_fix_teardown);
}
