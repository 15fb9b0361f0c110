/* test_ctr_libsvm — the LIBSVM format (worker/ctr_libsvm.c) through the
 * reader, on small hand-written files (plain and gzip, in a mkdtemp folder).
 *
 * Lines: labels 0/1/-1/+1 and "1.0", "-1.0", "0.0", "+0" (-1 is 0); pairs in
 * line order with repeats; spaces and tabs, leading and trailing; a comment
 * (after pairs, after the label alone, glued to a value); a label alone gives
 * an empty bag; uint64's largest index; exponents, negative and zero values;
 * CRLF; the batch's off array exactly. Bad lines: each message exact with its
 * FILE:LINE (label, empty line, comment only, missing ':', bad or too large
 * index, value that does not parse, NaN, inf, overflow to inf, junk);
 * data.bad_record_limit; 20000 generated values equal to strtof's bit for
 * bit; the spec check.
 */
#define PSC_CTR_FIXTURE_TESTS
#include "ctr_fixture.h"
#include "ctr_data.h"
#include "psc.h"

#include <math.h>

static const char g_text[] =
    "1 3:0.5 10:1 3:2\n"
    "-1 7:1e-3\n"
    "+1\n"
    "0.0 1:1 # a comment 5:5\n"
    "1.0\t5:2\t\t6:-3.5  \n"
    "  -1.0 18446744073709551615:1\n"
    "0 0:0\n"
    "1 # only the label\n"
    "+0 2:1#glued\n"
    "0 4:-0 4:+7.25e2";

typedef struct pair {
    uint64_t key;
    float w;
} pair_t;

static const float g_labels[] = {1, 0, 1, 0, 1, 0, 0, 1, 0, 0};
static const int g_npairs[] = {3, 1, 0, 1, 2, 1, 1, 0, 1, 2};
static const pair_t g_pairs[] = {{3, 0.5f}, {10, 1.0f}, {3, 2.0f}, {7, 1e-3f},         {1, 1.0f}, {5, 2.0f},
                                 {6, -3.5f}, {UINT64_MAX, 1.0f}, {0, 0.0f}, {2, 1.0f}, {4, -0.0f}, {4, 725.0f}};

static void check_all(const ctr_batch_t *b)
{
    assert_int_equal(b->n, 10);
    assert_int_equal(b->num_cat, 1);
    assert_int_equal(b->num_dense, 0);
    int64_t at = 0;
    assert_int_equal(b->off[0], 0);
    for (int i = 0; i < 10; i++) {
        assert_true(b->label[i] == g_labels[i]);
        at += g_npairs[i];
        assert_int_equal(b->off[i + 1], at);
    }
    assert_int_equal(b->nnz, 12);
    for (int k = 0; k < 12; k++) {
        assert_true(b->keys[k] == g_pairs[k].key);
        assert_true(b->weights[k] == g_pairs[k].w);
    }
    assert_true(signbit(b->weights[10])); /* "-0" */
}

static void read_text(const char *name, const char *text, int gz)
{
    char path[512], *files[1], err[1024];
    psc_job_spec_t s;
    psc_feature_spec_t feats[2];
    ctr_fix_libsvm_spec(&s, feats);
    ctr_fix_write_str(name, text, gz, path, sizeof path);
    ctr_reader_t *r = ctr_fix_open1(&s, files, path);
    ctr_batch_t b = {0};
    int epoch = -1;
    assert_int_equal(ctr_reader_next(r, &b, 64, &epoch, err, sizeof err), 10);
    assert_int_equal(epoch, 0);
    check_all(&b);
    assert_int_equal(ctr_reader_next(r, &b, 64, &epoch, err, sizeof err), 0);
    ctr_batch_free(&b);
    ctr_reader_close(r);
}

static void test_libsvm_lines(void **state)
{
    (void)state;
    read_text("lines.svm", g_text, 0);
}

static void test_libsvm_gzip(void **state)
{
    (void)state;
    read_text("lines.svm.gz", g_text, 1);
}

static void test_libsvm_crlf(void **state)
{
    (void)state;
    char text[sizeof g_text * 2];
    size_t o = 0;
    for (const char *p = g_text; *p; p++) {
        if (*p == '\n') text[o++] = '\r';
        text[o++] = *p;
    }
    memcpy(text + o, "\r\n", 3);
    read_text("crlf.svm", text, 0);
}

/* Line 2 of "1 1:1\n<bad>\n" fails with msg. */
static void expect_bad(const char *bad, const char *msg)
{
    char text[1024];
    snprintf(text, sizeof text, "1 1:1\n%s\n0 2:2\n", bad);
    psc_job_spec_t s;
    psc_feature_spec_t feats[2];
    ctr_fix_libsvm_spec(&s, feats);
    ctr_fix_expect_bad(&s, "bad.svm", text, 2, msg);
}

static void test_libsvm_bad_labels(void **state)
{
    (void)state;
    expect_bad("2 1:1", "label \"2\" is not 0, 1, -1 or +1");
    expect_bad("1.5 1:1", "label \"1.5\" is not 0, 1, -1 or +1");
    expect_bad("-2", "label \"-2\" is not 0, 1, -1 or +1");
    expect_bad("abc 1:1", "label \"abc\" is not 0, 1, -1 or +1");
    expect_bad("1e0 1:1", "label \"1e0\" is not 0, 1, -1 or +1");
    expect_bad(".1", "label \".1\" is not 0, 1, -1 or +1");
    expect_bad("+", "label \"+\" is not 0, 1, -1 or +1");
    expect_bad("3:1 4:1", "label \"3:1\" is not 0, 1, -1 or +1");
    expect_bad("", "empty line");
    expect_bad(" \t ", "empty line");
    expect_bad("# just a comment", "no label (only a comment)");
}

static void test_libsvm_bad_pairs(void **state)
{
    (void)state;
    expect_bad("1 3", "pair 1 \"3\": no ':' between index and value");
    expect_bad("1 3:1 5", "pair 2 \"5\": no ':' between index and value");
    expect_bad("1 3:1 x:2", "pair 2 \"x:2\": index is not a non-negative integer");
    expect_bad("1 :2", "pair 1 \":2\": index is not a non-negative integer");
    expect_bad("1 -3:2", "pair 1 \"-3:2\": index is not a non-negative integer");
    expect_bad("1 +3:2", "pair 1 \"+3:2\": index is not a non-negative integer");
    expect_bad("1 18446744073709551616:1", "pair 1 \"18446744073709551616:1\": index does not fit in 64 bits");
    expect_bad("1 3:", "pair 1 \"3:\": value is not a number");
    expect_bad("1 3: 1", "pair 1 \"3:\": value is not a number");
    expect_bad("1 3:abc", "pair 1 \"3:abc\": value is not a number");
    expect_bad("1 3:1.5x", "pair 1 \"3:1.5x\": value is not a number");
    expect_bad("1 3:4:5", "pair 1 \"3:4:5\": value is not a number");
    expect_bad("1 3:nan", "pair 1 \"3:nan\": value is not finite");
    expect_bad("1 3:-inf", "pair 1 \"3:-inf\": value is not finite");
    expect_bad("1 3:1e999", "pair 1 \"3:1e999\": value is not finite");
    expect_bad("1 3:1\x01", "pair 1 \"3:1\\x01\": value is not a number");
}

/* Two bad lines among three good ones: limit 2 passes (2 per epoch over 3
 * epochs: 6 skipped), limit 1 stops at the second. */
static void test_libsvm_bad_record_limit(void **state)
{
    (void)state;
    char path[512], *files[1], err[1024], want[1024];
    psc_job_spec_t s;
    psc_feature_spec_t feats[2];
    ctr_fix_libsvm_spec(&s, feats);
    ctr_fix_write_str("limit.svm", "1 1:1\n1 x\n0 2:2\n\n1 3:3\n", 0, path, sizeof path);
    s.bad_record_limit = 2;
    s.epochs = 3;
    ctr_reader_t *r = ctr_fix_open1(&s, files, path);
    ctr_batch_t b = {0};
    int epoch, total = 0, rc;
    while ((rc = ctr_reader_next(r, &b, 2, &epoch, err, sizeof err)) > 0) {
        for (int i = 0; i < b.n; i++) assert_int_equal(b.keys[b.off[i]], (uint64_t)((total + i) % 3) + 1);
        total += rc;
    }
    assert_int_equal(rc, 0);
    assert_int_equal(total, 9);
    assert_int_equal(ctr_reader_skipped(r), 6);
    ctr_reader_close(r);

    s.bad_record_limit = 1;
    r = ctr_fix_open1(&s, files, path);
    total = 0;
    while ((rc = ctr_reader_next(r, &b, 2, &epoch, err, sizeof err)) > 0) total += rc;
    assert_int_equal(rc, PSC_ECORRUPT);
    snprintf(want, sizeof want, "%s:4: empty line (more than data.bad_record_limit = 1 bad records)", path);
    assert_string_equal(err, want);
    assert_int_equal(total, 2); /* the first batch (lines 1 and 3) came out; the second was dropped */
    ctr_batch_free(&b);
    ctr_reader_close(r);
}

/* Values read exactly as strtof reads them, bit for bit: short decimals
 * (the parser's own fast path), long ones, exponents, signs, zeros. */
static void test_libsvm_values_as_strtof(void **state)
{
    (void)state;
    enum { N = 20000 };
    char *text = malloc((size_t)N * 48), (*vals)[32] = malloc((size_t)N * 32), path[512], *files[1], err[1024];
    uint64_t x = 88172645463325252ull;
    size_t o = 0;
    for (int i = 0; i < N; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int digits = 1 + (int)(x % 12), point = (int)((x >> 8) % (unsigned)(digits + 2)), v = 0;
        const char *sign = (x >> 16) % 3 == 0 ? "-" : (x >> 16) % 7 == 1 ? "+" : "";
        v += snprintf(vals[i] + v, 32 - (size_t)v, "%s", sign);
        for (int d = 0; d < digits; d++) {
            if (d == point && d > 0) vals[i][v++] = '.';
            vals[i][v++] = (char)('0' + (x >> (20 + 3 * d % 40)) % 10);
        }
        if ((x >> 50) % 5 == 0) v += snprintf(vals[i] + v, 32 - (size_t)v, "e%d", (int)((x >> 40) % 41) - 20);
        vals[i][v] = 0;
        o += (size_t)sprintf(text + o, "1 %d:%s\n", i, vals[i]);
    }
    psc_job_spec_t s;
    psc_feature_spec_t feats[2];
    ctr_fix_libsvm_spec(&s, feats);
    ctr_fix_write("values.svm", text, o, 0, path, sizeof path);
    ctr_reader_t *r = ctr_fix_open1(&s, files, path);
    ctr_batch_t b = {0};
    int rc = ctr_reader_next(r, &b, N, NULL, err, sizeof err);
    if (rc != N) fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, N);
    for (int i = 0; i < N; i++) {
        float want = strtof(vals[i], NULL);
        if (memcmp(&want, &b.weights[i], sizeof want) != 0) fprintf(stderr, "value %s: %.9g, strtof %.9g\n", vals[i],
                                                                   (double)b.weights[i], (double)want);
        assert_memory_equal(&want, &b.weights[i], sizeof want);
    }
    ctr_batch_free(&b);
    ctr_reader_close(r);
    free(text);
    free(vals);
}

static void test_libsvm_spec_check(void **state)
{
    (void)state;
    psc_job_spec_t s;
    psc_feature_spec_t feats[2];
    ctr_fix_libsvm_spec(&s, feats);
    char *files[1] = {"/nonexistent"}, err[1024];
    s.train_files = files;
    s.num_train_files = 1;
    s.num_cat = 2;
    ctr_reader_t *r = NULL;
    assert_int_equal(ctr_reader_open(&s, 0, 0, 1, 1, 0, &r, err, sizeof err), PSC_ECONFIG);
    assert_string_equal(err, "data.features: libsvm has one categorical feature (\"features\") and no dense one, "
                             "the spec 0 dense and 2 categorical");
    assert_null(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_libsvm_lines),          cmocka_unit_test(test_libsvm_gzip),
        cmocka_unit_test(test_libsvm_crlf),           cmocka_unit_test(test_libsvm_bad_labels),
        cmocka_unit_test(test_libsvm_bad_pairs),      cmocka_unit_test(test_libsvm_bad_record_limit),
        cmocka_unit_test(test_libsvm_values_as_strtof), cmocka_unit_test(test_libsvm_spec_check),
    };
    return cmocka_run_group_tests(tests, ctr_fix_setup, ctr_fix_teardown);
}
