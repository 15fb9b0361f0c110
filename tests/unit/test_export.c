/* test_export — the pure parts of the safetensors export: partition names,
 * the plan (joining axis-0 parts in part order, dtypes, file order, contiguous
 * data offsets, every kind of inconsistent input refused with its name) and
 * the header (exact bytes for a small model, 8-byte padding for every
 * remainder, escaping checked by parsing it back with jansson).
 */
#include "export.h"
#include "psc.h"

#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static psc_export_piece_t piece(const char *name, int ps, int rank, int64_t d0, int64_t d1)
{
    psc_export_piece_t p;
    memset(&p, 0, sizeof p);
    snprintf(p.name, sizeof p.name, "%s", name);
    p.ps = ps;
    p.rank = rank;
    p.shape[0] = d0;
    p.shape[1] = d1;
    int64_t n = 1;
    for (int d = 0; d < rank; d++) n *= p.shape[d];
    p.bytes = (uint64_t)n * 4;
    return p;
}

static psc_export_piece_t step_piece(int ps)
{
    psc_export_piece_t p = piece("global_step", ps, 0, 0, 0);
    p.bytes = 8;
    return p;
}

static void test_part_index(void **state)
{
    (void)state;
    size_t bl = 0;
    assert_int_equal(psc_export_part_index("dense/kernel/part_0", &bl), 0);
    assert_int_equal(bl, strlen("dense/kernel"));
    assert_int_equal(psc_export_part_index("a/part_10", &bl), 10);
    assert_int_equal(bl, 1);
    assert_int_equal(psc_export_part_index("a/part_123456789", &bl), 123456789);
    assert_int_equal(psc_export_part_index("a/part_01", &bl), -1);        /* leading zero */
    assert_int_equal(psc_export_part_index("a/part_", &bl), -1);
    assert_int_equal(psc_export_part_index("a/part_x", &bl), -1);
    assert_int_equal(psc_export_part_index("a/part_-1", &bl), -1);
    assert_int_equal(psc_export_part_index("a/part_1234567890", &bl), -1); /* too many digits */
    assert_int_equal(psc_export_part_index("part_0", &bl), -1);           /* no base */
    assert_int_equal(psc_export_part_index("/part_0", &bl), -1);
    assert_int_equal(psc_export_part_index("a/part_0/b", &bl), -1);
    assert_int_equal(psc_export_part_index("a/partition_0", &bl), -1);
    assert_int_equal(psc_export_part_index("global_step", &bl), -1);
}

/* A small model: the exact header, byte for byte, padding included. */
static void test_header_exact(void **state)
{
    (void)state;
    psc_export_piece_t pieces[] = {
        step_piece(0),
        piece("dense/kernel/part_1", 0, 2, 1, 3),
        piece("dense/kernel/part_0", 1, 2, 2, 3),
        piece("dense/bias", 1, 1, 3, 0),
    };
    psc_export_tensor_t *t;
    int nt;
    char err[256];
    assert_int_equal(psc_export_plan(pieces, 4, &t, &nt, err, sizeof err), 0);
    assert_int_equal(nt, 3);
    const char *keys[] = {"job_id", "global_step"}, *vals[] = {"00000000000000ab", "42"};
    size_t len;
    char *h = psc_safetensors_header(t, nt, keys, vals, 2, &len);
    const char *want = "{\"__metadata__\":{\"job_id\":\"00000000000000ab\",\"global_step\":\"42\"},"
                       "\"global_step\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,8]},"
                       "\"dense/bias\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[8,20]},"
                       "\"dense/kernel\":{\"dtype\":\"F32\",\"shape\":[3,3],\"data_offsets\":[20,56]}}"
                       "      "; /* 258 + 6 = 264 = 33 * 8 */
    assert_int_equal(len, strlen(want));
    assert_int_equal(len % 8, 0);
    assert_string_equal(h, want);
    /* the pieces in file order: global_step, bias, kernel part_0 (ps 1) then part_1 (ps 0) */
    assert_string_equal(pieces[0].name, "global_step");
    assert_string_equal(pieces[1].name, "dense/bias");
    assert_string_equal(pieces[2].name, "dense/kernel/part_0");
    assert_int_equal(pieces[2].ps, 1);
    assert_string_equal(pieces[3].name, "dense/kernel/part_1");
    assert_int_equal(pieces[3].ps, 0);
    assert_int_equal(t[2].first_piece, 2);
    assert_int_equal(t[2].npieces, 2);
    free(h);
    free(t);
}

/* part_10 joins after part_9 (not after part_1), whatever order the PS list them in. */
static void test_join_order(void **state)
{
    (void)state;
    enum { N = 12 };
    psc_export_piece_t pieces[N];
    static const int order[N] = {10, 3, 0, 11, 9, 1, 5, 2, 8, 4, 7, 6}; /* as Status might list them */
    for (int i = 0; i < N; i++) {
        char name[64];
        snprintf(name, sizeof name, "emb/part_%d", order[i]);
        pieces[i] = piece(name, order[i] % 3, 2, 10 + order[i], 7); /* part i has 10 + i rows */
    }
    psc_export_tensor_t *t;
    int nt;
    char err[256];
    assert_int_equal(psc_export_plan(pieces, N, &t, &nt, err, sizeof err), 0);
    assert_int_equal(nt, 1);
    assert_string_equal(t[0].name, "emb");
    assert_int_equal(t[0].dtype, PSC_ST_F32);
    assert_int_equal(t[0].rank, 2);
    int64_t rows = 0;
    for (int i = 0; i < N; i++) {
        char name[64];
        snprintf(name, sizeof name, "emb/part_%d", i);
        assert_string_equal(pieces[t[0].first_piece + i].name, name);
        assert_int_equal(pieces[t[0].first_piece + i].ps, i % 3);
        assert_int_equal(pieces[t[0].first_piece + i].shape[0], 10 + i);
        rows += 10 + i;
    }
    assert_int_equal(t[0].shape[0], rows);
    assert_int_equal(t[0].shape[1], 7);
    assert_int_equal(t[0].bytes, (uint64_t)rows * 7 * 4);
    assert_int_equal(t[0].begin, 0);
    assert_int_equal(t[0].end, t[0].bytes);
    free(t);
}

/* Offsets start at 0 and are contiguous in header order; the order is I64
 * first, then names in byte order; every tensor's size is its shape's. */
static void test_layout_contiguous(void **state)
{
    (void)state;
    psc_export_piece_t pieces[] = {
        piece("z", 0, 1, 5, 0),          piece("a/part_1", 1, 2, 2, 3), piece("B", 2, 0, 0, 0),
        piece("a/part_0", 0, 2, 3, 3),   piece("a/b", 1, 2, 0, 4), /* empty: 0 bytes */
        piece("m/part_0", 2, 1, 1, 0),   step_piece(1),             piece("a0", 0, 2, 1, 1),
    };
    int np = (int)PSC_ARRAY_LEN(pieces);
    psc_export_tensor_t *t;
    int nt;
    char err[256];
    assert_int_equal(psc_export_plan(pieces, np, &t, &nt, err, sizeof err), 0);
    static const char *const names[] = {"global_step", "B", "a", "a/b", "a0", "m", "z"};
    assert_int_equal(nt, PSC_ARRAY_LEN(names));
    uint64_t at = 0;
    int piece_at = 0;
    for (int i = 0; i < nt; i++) {
        assert_string_equal(t[i].name, names[i]);
        assert_int_equal(t[i].dtype, i == 0 ? PSC_ST_I64 : PSC_ST_F32);
        assert_int_equal(t[i].begin, at);
        assert_true(t[i].end >= t[i].begin);
        int64_t numel = 1;
        for (int d = 0; d < t[i].rank; d++) numel *= t[i].shape[d];
        assert_int_equal(t[i].end - t[i].begin, (uint64_t)numel * (t[i].dtype == PSC_ST_I64 ? 8 : 4));
        assert_int_equal(t[i].first_piece, piece_at);
        uint64_t sum = 0;
        for (int m = 0; m < t[i].npieces; m++) sum += pieces[t[i].first_piece + m].bytes;
        assert_int_equal(sum, t[i].bytes);
        piece_at += t[i].npieces;
        at = t[i].end;
    }
    assert_int_equal(piece_at, np);
    assert_int_equal(t[0].rank, 0);                  /* global_step: shape [] */
    assert_int_equal(t[2].shape[0], 5);              /* a: 3 + 2 rows of 3 */
    assert_int_equal(t[2].shape[1], 3);
    assert_int_equal(t[3].end - t[3].begin, 0);      /* a/b: empty, kept */
    assert_int_equal(t[5].rank, 1);                  /* m: a single part */
    assert_int_equal(at, 8 + 4 + 60 + 0 + 4 + 4 + 20);
    free(t);
}

/* N % 8 == 0 for every remainder the JSON may have, and the header parses. */
static void test_header_alignment(void **state)
{
    (void)state;
    int seen[8] = {0};
    for (int n = 1; n <= 24; n++) {
        psc_export_tensor_t t;
        memset(&t, 0, sizeof t);
        memset(t.name, 'x', (size_t)n);
        t.rank = 1;
        t.shape[0] = 1;
        t.end = 4;
        size_t len;
        char *h = psc_safetensors_header(&t, 1, NULL, NULL, 0, &len);
        assert_int_equal(len % 8, 0);
        assert_int_equal(strlen(h), len);
        size_t json_len = len;
        while (json_len && h[json_len - 1] == ' ') json_len--;
        assert_true(len - json_len < 8);
        assert_int_equal(h[0], '{');
        assert_int_equal(h[json_len - 1], '}');
        seen[json_len % 8] = 1;
        json_error_t je;
        json_t *root = json_loadb(h, len, 0, &je);
        assert_non_null(root);
        assert_null(json_object_get(root, "__metadata__"));
        assert_non_null(json_object_get(root, t.name));
        json_decref(root);
        free(h);
    }
    for (int r = 0; r < 8; r++) assert_true(seen[r]); /* every padding amount was exercised */
    size_t len;
    char *h = psc_safetensors_header(NULL, 0, NULL, NULL, 0, &len);
    assert_string_equal(h, "{}      ");
    free(h);
}

/* Names and metadata with characters JSON must escape come back intact. */
static void test_header_escaping(void **state)
{
    (void)state;
    psc_export_tensor_t t[2];
    memset(t, 0, sizeof t);
    const char *n0 = "we\"ird\\name\n\t\x01/\xc3\xa9"; /* quote, backslash, newline, tab, ^A, e-acute */
    snprintf(t[0].name, sizeof t[0].name, "%s", n0);
    t[0].rank = 0;
    t[0].dtype = PSC_ST_I64;
    t[0].end = 8;
    snprintf(t[1].name, sizeof t[1].name, "plain");
    t[1].rank = 3;
    t[1].shape[0] = 2;
    t[1].shape[1] = 1;
    t[1].shape[2] = 1;
    t[1].begin = 8;
    t[1].end = 16;
    const char *keys[] = {"k\"ey"}, *vals[] = {"v\\al\n"};
    size_t len;
    char *h = psc_safetensors_header(t, 2, keys, vals, 1, &len);
    assert_non_null(strstr(h, "\\u0001"));
    json_error_t je;
    json_t *root = json_loadb(h, len, 0, &je);
    if (!root) fail_msg("header does not parse: %s: %s", je.text, h);
    json_t *md = json_object_get(root, "__metadata__");
    assert_string_equal(json_string_value(json_object_get(md, "k\"ey")), "v\\al\n");
    json_t *e = json_object_get(root, n0);
    assert_non_null(e);
    assert_string_equal(json_string_value(json_object_get(e, "dtype")), "I64");
    assert_int_equal(json_array_size(json_object_get(e, "shape")), 0);
    json_t *p = json_object_get(root, "plain");
    assert_int_equal(json_array_size(json_object_get(p, "shape")), 3);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(p, "data_offsets"), 1)), 16);
    json_decref(root);
    free(h);
}

static void expect_refused(psc_export_piece_t *pieces, int n, const char *needle1, const char *needle2)
{
    psc_export_tensor_t *t = (psc_export_tensor_t *)1;
    int nt = -1;
    char err[512] = "";
    int rc = psc_export_plan(pieces, n, &t, &nt, err, sizeof err);
    if (rc != PSC_EMISMATCH) fail_msg("expected PSC_EMISMATCH, got %d (%s)", rc, err);
    assert_null(t);
    assert_int_equal(nt, 0);
    if (!strstr(err, needle1) || (needle2 && !strstr(err, needle2)))
        fail_msg("message \"%s\" does not name \"%s\" / \"%s\"", err, needle1, needle2 ? needle2 : "");
}

static void test_plan_refusals(void **state)
{
    (void)state;
    {   /* a missing part */
        psc_export_piece_t p[] = {piece("w/part_0", 0, 2, 2, 3), piece("w/part_2", 1, 2, 2, 3)};
        expect_refused(p, 2, "w/part_1 is missing", "part_2");
    }
    {   /* parts that do not start at 0 */
        psc_export_piece_t p[] = {piece("w/part_1", 0, 2, 2, 3)};
        expect_refused(p, 1, "w/part_0 is missing", NULL);
    }
    {   /* the same part on two PS */
        psc_export_piece_t p[] = {piece("w/part_0", 0, 2, 2, 3), piece("w/part_1", 1, 2, 2, 3),
                                  piece("w/part_1", 2, 2, 2, 3)};
        expect_refused(p, 3, "w/part_1 is held twice", "ps 1 and ps 2");
    }
    {   /* the same whole variable on two PS */
        psc_export_piece_t p[] = {piece("b", 0, 1, 3, 0), piece("b", 1, 1, 3, 0)};
        expect_refused(p, 2, "b is held twice", NULL);
    }
    {   /* whole and partitioned */
        psc_export_piece_t p[] = {piece("w/part_0", 1, 2, 2, 3), piece("w", 0, 2, 2, 3)};
        expect_refused(p, 2, "w is both a whole variable (ps 0)", "w/part_0 on ps 1");
    }
    {   /* other dimensions disagree */
        psc_export_piece_t p[] = {piece("w/part_0", 0, 2, 2, 3), piece("w/part_1", 1, 2, 2, 4)};
        expect_refused(p, 2, "dimension 1", "w/part_1 (ps 1) is [2, 4]");
    }
    {   /* ranks disagree */
        psc_export_piece_t p[] = {piece("w/part_0", 0, 2, 2, 3), piece("w/part_1", 1, 1, 6, 0)};
        expect_refused(p, 2, "disagree on rank", "w/part_1");
    }
    {   /* rank-0 parts */
        psc_export_piece_t p[] = {piece("s/part_0", 0, 0, 0, 0)};
        expect_refused(p, 1, "s/part_0", "rank 0");
    }
    {   /* bytes that do not fit the shape */
        psc_export_piece_t p[] = {piece("w", 0, 2, 2, 3)};
        p[0].bytes = 20;
        expect_refused(p, 1, "w (ps 0): 20 bytes", "[2, 3]");
    }
    {   /* global_step of the wrong size */
        psc_export_piece_t p[] = {step_piece(0)};
        p[0].bytes = 4;
        expect_refused(p, 1, "global_step (ps 0) has 4 bytes", NULL);
    }
    {   /* the reserved key */
        psc_export_piece_t p[] = {piece("__metadata__", 0, 1, 1, 0)};
        expect_refused(p, 1, "__metadata__", "reserved");
    }
    {   /* not UTF-8 */
        psc_export_piece_t p[] = {piece("bad\xff", 0, 1, 1, 0)};
        expect_refused(p, 1, "UTF-8", NULL);
    }
}

static void test_plan_empty(void **state)
{
    (void)state;
    psc_export_tensor_t *t = NULL;
    int nt = -1;
    char err[64];
    assert_int_equal(psc_export_plan(NULL, 0, &t, &nt, err, sizeof err), 0);
    assert_int_equal(nt, 0);
    free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_part_index),      cmocka_unit_test(test_header_exact),
        cmocka_unit_test(test_join_order),      cmocka_unit_test(test_layout_contiguous),
        cmocka_unit_test(test_header_alignment), cmocka_unit_test(test_header_escaping),
        cmocka_unit_test(test_plan_refusals),   cmocka_unit_test(test_plan_empty),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
