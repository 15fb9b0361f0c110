/* test_ctr_tfrecord — the TFRecord reader of tf.Example protos (worker/data/format_tfrecord.c).
 *
 * Records are written here: Examples packed by protobuf-c, framed by this
 * file's own writer (length, masked CRC-32C, data, masked CRC-32C), read from
 * memory (data_file_open_mem), from plain and gzip files, and through the whole
 * reader (data_reader_open). One record is a byte vector worked out by hand
 * from the wire format (protobuf encoding and TFRecord framing, its CRCs from
 * a bitwise CRC-32C), so neither the writer nor the reader can be wrong the
 * same way without failing it.
 *
 * Cases: int64, float and bytes lists; fixed and variable length; a dense
 * int64 with log1p; the bags in cat_index order; an absent categorical
 * feature (empty bag); a Feature with no list; a repeated name (the last
 * wins); ignored features; 120 features in any order; an absent label or
 * dense feature, a wrong list kind, a wrong fixed length, label 2, a
 * non-finite dense value, data that is not a protobuf (bad records, the next
 * record still read); a bad length CRC and an oversize length (stop), a bad
 * data CRC (the next record read), a file cut at every byte of a record, an
 * empty file; record skipping; a bad spec.
 */
#include "bytes.h"
#include "crc32c.h"
#include "reader.h"
#include "reader_internal.h"
#include "example.pb-c.h"
#include "psc.h"
#include "table.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>

static char g_dir[256];

/* ---- writing Examples and records ---- */

enum { K_I64, K_F32, K_BYTES, K_NONE /* a Feature with no list set */ };

typedef struct tf {
    const char *name;
    int kind;
    int n;
    int64_t i64[8];
    float f32[8];
    const char *str[8];
} tf_t;

/* Packs an Example of nf features with protobuf-c; heap bytes in *len. */
static uint8_t *example_pack(const tf_t *fe, int nf, size_t *len)
{
    size_t m = (size_t)nf + 1;
    Tensorflow__Features__FeatureEntry *ent = psc_xcalloc(m, sizeof *ent);
    Tensorflow__Features__FeatureEntry **pent = psc_xcalloc(m, sizeof *pent);
    Tensorflow__Feature *feat = psc_xcalloc(m, sizeof *feat);
    Tensorflow__Int64List *il = psc_xcalloc(m, sizeof *il);
    Tensorflow__FloatList *fl = psc_xcalloc(m, sizeof *fl);
    Tensorflow__BytesList *bl = psc_xcalloc(m, sizeof *bl);
    ProtobufCBinaryData *bin = psc_xcalloc(m * 8, sizeof *bin);
    for (int i = 0; i < nf; i++) {
        tensorflow__features__feature_entry__init(&ent[i]);
        tensorflow__feature__init(&feat[i]);
        ent[i].key = (char *)fe[i].name;
        ent[i].value = &feat[i];
        pent[i] = &ent[i];
        size_t n = (size_t)fe[i].n;
        if (fe[i].kind == K_I64) {
            tensorflow__int64_list__init(&il[i]);
            il[i].n_value = n;
            il[i].value = (int64_t *)fe[i].i64;
            feat[i].kind_case = TENSORFLOW__FEATURE__KIND_INT64_LIST;
            feat[i].int64_list = &il[i];
        } else if (fe[i].kind == K_F32) {
            tensorflow__float_list__init(&fl[i]);
            fl[i].n_value = n;
            fl[i].value = (float *)fe[i].f32;
            feat[i].kind_case = TENSORFLOW__FEATURE__KIND_FLOAT_LIST;
            feat[i].float_list = &fl[i];
        } else if (fe[i].kind == K_BYTES) {
            tensorflow__bytes_list__init(&bl[i]);
            for (size_t k = 0; k < n; k++) {
                bin[i * 8 + k].data = (uint8_t *)fe[i].str[k];
                bin[i * 8 + k].len = strlen(fe[i].str[k]);
            }
            bl[i].n_value = n;
            bl[i].value = &bin[i * 8];
            feat[i].kind_case = TENSORFLOW__FEATURE__KIND_BYTES_LIST;
            feat[i].bytes_list = &bl[i];
        }
    }
    Tensorflow__Features fs = TENSORFLOW__FEATURES__INIT;
    fs.n_feature = (size_t)nf;
    fs.feature = pent;
    Tensorflow__Example ex = TENSORFLOW__EXAMPLE__INIT;
    ex.features = &fs;
    *len = tensorflow__example__get_packed_size(&ex);
    uint8_t *out = psc_xmalloc(*len + 1);
    assert_int_equal(tensorflow__example__pack(&ex, out), *len);
    free(ent), free(pent), free(feat), free(il), free(fl), free(bl), free(bin);
    return out;
}

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf_t;

static void buf_add(buf_t *b, const void *d, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = psc_xrealloc(b->p, b->cap);
    }
    if (n) memcpy(b->p + b->n, d, n);
    b->n += n;
}

/* Appends one TFRecord record of data. */
static void frame(buf_t *b, const uint8_t *data, size_t n)
{
    uint8_t h[12], c[4];
    psc_le_put64(h, n);
    psc_le_put32(h + 8, psc_crc32c_mask(psc_crc32c(0, h, 8)));
    psc_le_put32(c, psc_crc32c_mask(psc_crc32c(0, data, n)));
    buf_add(b, h, sizeof h);
    buf_add(b, data, n);
    buf_add(b, c, sizeof c);
}

static void add_example(buf_t *b, const tf_t *fe, int nf)
{
    size_t n;
    uint8_t *d = example_pack(fe, nf, &n);
    frame(b, d, n);
    free(d);
}

/* ---- the spec ---- */

static psc_feature_spec_t g_feats[PSC_MAX_FEATURES];
static psc_job_spec_t g_spec;

static void feat(int i, const char *name, enum psc_feature_role role, enum psc_feature_kind kind, int length,
                 enum psc_dense_transform tr, int dense_offset, int cat_index)
{
    psc_feature_spec_t *f = &g_feats[i];
    memset(f, 0, sizeof *f);
    snprintf(f->name, sizeof f->name, "%s", name);
    f->role = role;
    f->kind = kind;
    f->length = length;
    f->transform = tr;
    f->dense_offset = dense_offset;
    f->cat_index = cat_index;
}

static void spec_set(int num_features, int num_dense, int num_cat)
{
    memset(&g_spec, 0, sizeof g_spec);
    g_spec.data_format = PSC_DATA_TFRECORD;
    g_spec.features = g_feats;
    g_spec.num_features = num_features;
    g_spec.num_dense = num_dense;
    g_spec.num_cat = num_cat;
    g_spec.epochs = 1;
}

/* label int64; d dense float x2; i dense int64 x1 log1p; c int64 variable
 * (cat 1); b bytes fixed 2 (cat 0); v bytes variable (cat 2). */
static void spec_std(void)
{
    feat(0, "label", PSC_FEATURE_LABEL, PSC_FEATURE_INT64, 1, PSC_TRANSFORM_NONE, 0, 0);
    feat(1, "d", PSC_FEATURE_DENSE, PSC_FEATURE_FLOAT, 2, PSC_TRANSFORM_NONE, 0, 0);
    feat(2, "i", PSC_FEATURE_DENSE, PSC_FEATURE_INT64, 1, PSC_TRANSFORM_LOG1P, 2, 0);
    feat(3, "c", PSC_FEATURE_CATEGORICAL, PSC_FEATURE_INT64, 0, PSC_TRANSFORM_NONE, 0, 1);
    feat(4, "b", PSC_FEATURE_CATEGORICAL, PSC_FEATURE_BYTES, 2, PSC_TRANSFORM_NONE, 0, 0);
    feat(5, "v", PSC_FEATURE_CATEGORICAL, PSC_FEATURE_BYTES, 0, PSC_TRANSFORM_NONE, 0, 2);
    spec_set(6, 3, 3);
}

/* A valid Example of spec_std with label y and c = {y + 10}. */
static void add_good(buf_t *b, int y)
{
    tf_t fe[] = {
        {"label", K_I64, 1, .i64 = {y}},  {"d", K_F32, 2, .f32 = {1.5f, 2.5f}}, {"i", K_I64, 1, .i64 = {0}},
        {"c", K_I64, 1, .i64 = {y + 10}}, {"b", K_BYTES, 2, .str = {"p", "q"}},
    };
    add_example(b, fe, 5);
}

/* ---- reading ---- */

typedef struct rd {
    data_file_t *f;
    data_batch_t b;
    char err[512];
} rd_t;

static void rd_open(rd_t *r, const buf_t *data)
{
    memset(r, 0, sizeof *r);
    assert_int_equal(data_file_open_mem(data->p, data->n, "mem.tfrecord", &r->f, r->err, sizeof r->err), 0);
    data_batch_reset(&r->b, g_spec.num_dense, g_spec.num_cat);
}

static int rd_next(rd_t *r)
{
    r->err[0] = 0;
    return data_format_tfrecord.next(r->f, &g_spec, &r->b, r->err, sizeof r->err);
}

/* (the parentheses keep cmocka's skip() macro off it) */
static int rd_skip(rd_t *r)
{
    r->err[0] = 0;
    return (data_format_tfrecord.skip)(r->f, r->err, sizeof r->err);
}

static void rd_close(rd_t *r)
{
    data_file_close(r->f);
    data_batch_free(&r->b);
}

/* The next record is bad with `code` and an error containing each of the
 * NULL-terminated substrings; nothing is appended. */
static void expect_bad(rd_t *r, int code, ...)
{
    int n = r->b.n;
    int64_t nnz = r->b.nnz;
    int rc = rd_next(r);
    if (rc != code) fail_msg("got %d (%s), expected %d; err: %s", rc, psc_strerror(rc), code, r->err);
    va_list ap;
    va_start(ap, code);
    for (const char *s; (s = va_arg(ap, const char *));)
        if (!strstr(r->err, s)) fail_msg("error '%s' lacks '%s'", r->err, s);
    va_end(ap);
    assert_int_equal(r->b.n, n);
    assert_int_equal(r->b.nnz, nnz);
}

static void expect_good(rd_t *r, int y)
{
    int rc = rd_next(r);
    if (rc != 1) fail_msg("got %d, expected a record; err: %s", rc, r->err);
    assert_true(r->b.label[r->b.n - 1] == (float)y);
}

/* ---- the hand-worked record ---- */

/* Example { features { feature { "label": int64_list [1] }
 *                      feature { "C1": bytes_list ["ab"] }
 *                      feature { "I1": float_list [2.5] (unpacked: fixed32 tag 0x0d) } } }
 * Protobuf: 0a 2d (Example.features, 45 bytes) | 0a 0e (Features.feature, 14)
 * 0a 05 "label" 12 05 (Feature) 1a 03 (int64_list) 0a 01 01 (packed [1]) |
 * 0a 0c 0a 02 "C1" 12 06 0a 04 (bytes_list) 0a 02 "ab" |
 * 0a 0d 0a 02 "I1" 12 07 12 05 (float_list) 0d 00 00 20 40 (2.5f).
 * Framing: length 47 = 2f 00.. (8 bytes LE), masked CRC-32C of them 0x501d5d6d,
 * the 47 bytes, masked CRC-32C of them 0xb90815ed (a bitwise CRC-32C,
 * polynomial 0x82f63b78, that gives 0xe3069283 for "123456789"). */
static const uint8_t k_record[] = {
    0x2f, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x6d, 0x5d, 0x1d, 0x50, 0x0a, 0x2d, 0x0a, 0x0e,
    0x0a, 0x05, 0x6c, 0x61, 0x62, 0x65, 0x6c, 0x12, 0x05, 0x1a, 0x03, 0x0a, 0x01, 0x01, 0x0a, 0x0c,
    0x0a, 0x02, 0x43, 0x31, 0x12, 0x06, 0x0a, 0x04, 0x0a, 0x02, 0x61, 0x62, 0x0a, 0x0d, 0x0a, 0x02,
    0x49, 0x31, 0x12, 0x07, 0x12, 0x05, 0x0d, 0x00, 0x00, 0x20, 0x40, 0xed, 0x15, 0x08, 0xb9,
};

static void test_tfrecord_known_bytes(void **state)
{
    (void)state;
    feat(0, "label", PSC_FEATURE_LABEL, PSC_FEATURE_INT64, 1, PSC_TRANSFORM_NONE, 0, 0);
    feat(1, "I1", PSC_FEATURE_DENSE, PSC_FEATURE_FLOAT, 1, PSC_TRANSFORM_NONE, 0, 0);
    feat(2, "C1", PSC_FEATURE_CATEGORICAL, PSC_FEATURE_BYTES, 0, PSC_TRANSFORM_NONE, 0, 0);
    spec_set(3, 1, 1);
    buf_t in = {0};
    buf_add(&in, k_record, sizeof k_record);
    rd_t r;
    rd_open(&r, &in);
    assert_int_equal(rd_next(&r), 1);
    assert_int_equal(rd_next(&r), 0);
    assert_int_equal(r.b.n, 1);
    assert_true(r.b.label[0] == 1.0f);
    assert_true(r.b.dense[0] == 2.5f);
    assert_int_equal(r.b.off[0], 0);
    assert_int_equal(r.b.off[1], 1);
    assert_true(r.b.keys[0] == 0x089c4407b545986aull); /* FNV-1a-64 of "ab" */
    assert_true(r.b.weights[0] == 1.0f);
    rd_close(&r);

    /* this file's writer frames the same bytes the same way */
    buf_t mine = {0};
    frame(&mine, k_record + 12, sizeof k_record - 16);
    assert_int_equal(mine.n, sizeof k_record);
    assert_memory_equal(mine.p, k_record, sizeof k_record);
    free(mine.p);
    free(in.p);
}

static void test_tfrecord_lists(void **state)
{
    (void)state;
    spec_std();
    buf_t in = {0};
    tf_t a[] = {
        {"label", K_I64, 1, .i64 = {1}}, {"d", K_F32, 2, .f32 = {0.5f, -2.0f}}, {"i", K_I64, 1, .i64 = {7}},
        {"c", K_I64, 2, .i64 = {3, -1}}, {"b", K_BYTES, 2, .str = {"x", "yz"}}, {"v", K_BYTES, 0, .i64 = {0}},
    };
    tf_t b[] = {
        {"v", K_BYTES, 1, .str = {"hello"}},  {"ignored", K_F32, 3, .f32 = {1, 2, 3}},
        {"b", K_BYTES, 2, .str = {"", "q"}},  {"label", K_I64, 1, .i64 = {0}},
        {"i", K_I64, 1, .i64 = {-5}},         {"other", K_BYTES, 1, .str = {"zz"}},
        {"d", K_F32, 2, .f32 = {1.0f, 2.0f}},
    };
    add_example(&in, a, 6);
    add_example(&in, b, 7);
    rd_t r;
    rd_open(&r, &in);
    assert_int_equal(rd_next(&r), 1);
    assert_int_equal(rd_next(&r), 1);
    assert_int_equal(rd_next(&r), 0);
    assert_int_equal(r.b.n, 2);

    const float dense[] = {0.5f, -2.0f, logf(8.0f), 1.0f, 2.0f, 0.0f};
    for (int k = 0; k < 6; k++) assert_true(r.b.dense[k] == dense[k]);
    assert_true(r.b.label[0] == 1.0f && r.b.label[1] == 0.0f);
    /* bags in cat_index order: b, c, v */
    const int64_t off[] = {0, 2, 4, 4, 6, 6, 7};
    for (int k = 0; k < 7; k++) assert_int_equal(r.b.off[k], off[k]);
    const uint64_t keys[] = {psc_fnv1a64("x", 1), psc_fnv1a64("yz", 2),   3, UINT64_MAX, psc_fnv1a64("", 0),
                             psc_fnv1a64("q", 1), psc_fnv1a64("hello", 5)};
    assert_int_equal(r.b.nnz, 7);
    for (int k = 0; k < 7; k++) {
        assert_true(r.b.keys[k] == keys[k]);
        assert_true(r.b.weights[k] == 1.0f);
    }
    rd_close(&r);
    free(in.p);
}

/* A float label; a fixed categorical absent; a Feature with no list set for a
 * variable one; a name given twice (the last wins); a fixed categorical with
 * an empty list or no list set (an empty bag, as when absent). */
static void test_tfrecord_absent_and_repeated(void **state)
{
    (void)state;
    spec_std();
    g_feats[0].kind = PSC_FEATURE_FLOAT;
    buf_t in = {0};
    tf_t a[] = {
        {"label", K_F32, 1, .f32 = {0.0f}}, {"d", K_F32, 2, .f32 = {3, 4}}, {"i", K_I64, 1, .i64 = {1}},
        {"v", K_NONE, 0, .i64 = {0}},       {"c", K_I64, 1, .i64 = {5}},    {"label", K_F32, 1, .f32 = {1.0f}},
        {"c", K_I64, 2, .i64 = {6, 7}},
    };
    add_example(&in, a, 7);
    rd_t r;
    rd_open(&r, &in);
    assert_int_equal(rd_next(&r), 1);
    assert_true(r.b.label[0] == 1.0f);
    assert_true(r.b.dense[2] == logf(2.0f));
    const int64_t off[] = {0, 0, 2, 2}; /* b absent: empty; c the last entry; v no list: empty */
    for (int k = 0; k < 4; k++) assert_int_equal(r.b.off[k], off[k]);
    assert_true(r.b.keys[0] == 6 && r.b.keys[1] == 7);
    rd_close(&r);
    /* an empty list for the fixed-length b (2 values) is an empty bag, as an absent b is */
    in.n = 0;
    tf_t e[] = {{"label", K_F32, 1, .f32 = {1.0f}}, {"d", K_F32, 2, .f32 = {3, 4}}, {"i", K_I64, 1, .i64 = {1}},
                {"b", K_BYTES, 0, .i64 = {0}},      {"c", K_I64, 1, .i64 = {5}}};
    add_example(&in, e, 5);
    e[3].kind = K_NONE; /* and so is a Feature with no list set */
    add_example(&in, e, 5);
    rd_open(&r, &in);
    if (rd_next(&r) != 1) fail_msg("an empty list for a fixed-length feature: %s", r.err);
    if (rd_next(&r) != 1) fail_msg("no list for a fixed-length feature: %s", r.err);
    assert_int_equal(rd_next(&r), 0);
    const int64_t off2[] = {0, 0, 1, 1, 1, 2, 2}; /* each: b empty, c one id, v absent */
    for (int k = 0; k < 7; k++) assert_int_equal(r.b.off[k], off2[k]);
    rd_close(&r);
    free(in.p);
}

/* 120 categorical features, their cat_index a permutation of the spec order,
 * written in reverse order among 20 ignored ones. */
static void test_tfrecord_many_features(void **state)
{
    (void)state;
    enum { NF = 120, NX = 20 };
    static char names[NF + NX][16];
    static tf_t fe[NF + NX];
    for (int i = 0; i < NF + NX; i++) {
        snprintf(names[i], sizeof names[i], i < NF ? "f%d" : "extra%d", i);
        if (i < NF) feat(i, names[i], PSC_FEATURE_CATEGORICAL, PSC_FEATURE_INT64, 1, PSC_TRANSFORM_NONE, 0, i * 7 % NF);
    }
    spec_set(NF, 0, NF);
    for (int i = 0; i < NF + NX; i++) {
        int j = NF + NX - 1 - i;
        fe[i] = (tf_t){names[j], K_I64, 1, .i64 = {1000 + j}};
    }
    buf_t in = {0};
    add_example(&in, fe, NF + NX);
    rd_t r;
    rd_open(&r, &in);
    assert_int_equal(rd_next(&r), 1);
    assert_int_equal(r.b.nnz, NF);
    for (int i = 0; i < NF; i++) {
        int c = i * 7 % NF;
        assert_int_equal(r.b.off[c + 1] - r.b.off[c], 1);
        assert_true(r.b.keys[r.b.off[c]] == (uint64_t)(1000 + i));
    }
    rd_close(&r);
    free(in.p);
}

/* Each bad Example is refused with the feature named, and the good record
 * after it is read. */
static void test_tfrecord_bad_examples(void **state)
{
    (void)state;
    spec_std();
    const tf_t lab = {"label", K_I64, 1, .i64 = {1}}, d = {"d", K_F32, 2, .f32 = {1, 2}};
    const tf_t i = {"i", K_I64, 1, .i64 = {2}};
    const tf_t bad[][3] = {
        {d, i, {"zz", K_I64, 0, .i64 = {0}}},        /* 0: no label */
        {lab, i, {"zz", K_I64, 0, .i64 = {0}}},      /* 1: no dense d */
        {lab, d, {"i", K_F32, 1, .f32 = {2}}},       /* 2: i is a float_list, declared int64 */
        {lab, i, {"d", K_F32, 3, .f32 = {1, 2, 3}}}, /* 3: d has 3 values */
        {d, i, {"label", K_I64, 1, .i64 = {2}}},     /* 4: label 2 */
        {d, i, {"label", K_I64, 2, .i64 = {0, 1}}},  /* 5: two labels */
        {lab, i, {"d", K_F32, 2, .f32 = {1, NAN}}},  /* 6: NaN */
        {lab, d, {"i", K_NONE, 0, .i64 = {0}}},      /* 7: i with no list: 0 values */
    };
    buf_t in = {0};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        add_example(&in, bad[k], 3);
        add_good(&in, (int)k & 1);
    }
    /* categorical: c a bytes_list (declared int64); b fixed 2 with 1 value; v an int64_list */
    const tf_t cat[][4] = {
        {lab, d, i, {"c", K_BYTES, 1, .str = {"7"}}},
        {lab, d, i, {"b", K_BYTES, 1, .str = {"7"}}},
        {lab, d, i, {"v", K_I64, 1, .i64 = {7}}},
    };
    for (size_t k = 0; k < 3; k++) {
        add_example(&in, cat[k], 4);
        add_good(&in, 1);
    }
    static const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff}; /* not a protobuf */
    frame(&in, junk, sizeof junk);
    add_good(&in, 0);
    frame(&in, junk, 0); /* an empty Example: no label */
    add_good(&in, 1);

    rd_t r;
    rd_open(&r, &in);
    expect_bad(&r, PSC_ECORRUPT, "label", "'label'", "missing", NULL);
    expect_good(&r, 0);
    expect_bad(&r, PSC_ECORRUPT, "dense", "'d'", "missing", NULL);
    expect_good(&r, 1);
    expect_bad(&r, PSC_ECORRUPT, "'i'", "float_list", "int64", NULL);
    expect_good(&r, 0);
    expect_bad(&r, PSC_ECORRUPT, "'d'", "3 values", "expected 2", NULL);
    expect_good(&r, 1);
    expect_bad(&r, PSC_ECORRUPT, "'label'", "is 2", "0 or 1", NULL);
    expect_good(&r, 0);
    expect_bad(&r, PSC_ECORRUPT, "'label'", "2 values", NULL);
    expect_good(&r, 1);
    expect_bad(&r, PSC_ECORRUPT, "'d'", "finite", NULL);
    expect_good(&r, 0);
    expect_bad(&r, PSC_ECORRUPT, "'i'", "0 values", NULL);
    expect_good(&r, 1);
    expect_bad(&r, PSC_ECORRUPT, "'c'", "bytes_list", "int64", NULL);
    expect_good(&r, 1);
    expect_bad(&r, PSC_ECORRUPT, "'b'", "1 values", "expected 2", NULL);
    expect_good(&r, 1);
    expect_bad(&r, PSC_ECORRUPT, "'v'", "int64_list", "bytes", NULL);
    expect_good(&r, 1);
    expect_bad(&r, PSC_ECORRUPT, "not a tf.Example", NULL);
    expect_good(&r, 0);
    expect_bad(&r, PSC_ECORRUPT, "'label'", "missing", NULL);
    expect_good(&r, 1);
    assert_int_equal(rd_next(&r), 0);
    /* every good record, and only they, in the batch: c = label + 10 */
    assert_int_equal(r.b.n, 13);
    for (int k = 0; k < r.b.n; k++) {
        assert_int_equal(r.b.off[k * 3 + 2] - r.b.off[k * 3 + 1], 1);
        assert_true(r.b.keys[r.b.off[k * 3 + 1]] == (uint64_t)(r.b.label[k] + 10));
    }
    rd_close(&r);
    free(in.p);
}

/* ---- framing ---- */

static void test_tfrecord_framing(void **state)
{
    (void)state;
    spec_std();
    rd_t r;
    buf_t in = {psc_xmalloc(1), 0, 1}; /* an empty file: the end */
    rd_open(&r, &in);
    assert_int_equal(rd_next(&r), 0);
    rd_close(&r);

    /* a bad data CRC (a data byte or the stored CRC): that record only */
    for (int where = 0; where < 2; where++) {
        in.n = 0;
        add_good(&in, 0);
        size_t n1 = in.n;
        add_good(&in, 1);
        in.p[where ? in.n - 2 : n1 + 12 + 3] ^= 0x40;
        add_good(&in, 1);
        rd_open(&r, &in);
        expect_good(&r, 0);
        expect_bad(&r, PSC_ECORRUPT, "data CRC", NULL);
        expect_good(&r, 1);
        assert_int_equal(rd_next(&r), 0);
        rd_close(&r);
    }

    /* a ZLIB-compressed file: named as such, not as a bad length CRC */
    in.n = 0;
    add_good(&in, 1);
    uLongf zn = compressBound(in.n);
    buf_t z = {psc_xmalloc(zn), 0, zn};
    assert_int_equal(compress2(z.p, &zn, in.p, in.n, 6), Z_OK);
    z.n = zn;
    rd_open(&r, &z);
    expect_bad(&r, PSC_EIO, "mem.tfrecord: looks compressed with ZLIB", "not supported", NULL);
    rd_close(&r);
    free(z.p);

    /* a bad length CRC (a length byte or the stored CRC): the rest is lost */
    for (int where = 0; where < 2; where++) {
        in.n = 0;
        add_good(&in, 0);
        size_t n1 = in.n;
        add_good(&in, 1);
        in.p[n1 + (where ? 9 : 0)] ^= 0x01;
        rd_open(&r, &in);
        expect_good(&r, 0);
        expect_bad(&r, PSC_EIO, "mem.tfrecord: record 2 at byte", "length CRC", NULL);
        rd_close(&r);
    }

    /* a length over 64 MiB with its CRC right: refused; 64 MiB itself is
     * read (here the file ends inside it) */
    for (int over = 1; over >= 0; over--) {
        uint8_t h[12];
        psc_le_put64(h, ((uint64_t)64 << 20) + (uint64_t)over);
        psc_le_put32(h + 8, psc_crc32c_mask(psc_crc32c(0, h, 8)));
        in.n = 0;
        buf_add(&in, h, sizeof h);
        rd_open(&r, &in);
        if (over) {
            expect_bad(&r, PSC_EIO, "mem.tfrecord: record 1 at byte 0", "67108865 bytes", "64 MiB", NULL);
        } else {
            expect_bad(&r, PSC_ECORRUPT, "truncated", NULL);
            assert_int_equal(rd_next(&r), 0);
        }
        rd_close(&r);
    }

    /* a file cut at every byte of its second record */
    in.n = 0;
    add_good(&in, 0);
    size_t n1 = in.n;
    add_good(&in, 1);
    for (size_t cut = n1 + 1; cut < in.n; cut++) {
        buf_t part = {in.p, cut, cut};
        rd_open(&r, &part);
        expect_good(&r, 0);
        expect_bad(&r, PSC_ECORRUPT, "truncated", NULL);
        assert_int_equal(rd_next(&r), 0);
        rd_close(&r);
    }
    free(in.p);
}

static void test_tfrecord_skip(void **state)
{
    (void)state;
    spec_std();
    buf_t in = {0};
    add_good(&in, 0);
    add_good(&in, 1);
    size_t n2 = in.n;
    add_good(&in, 0);
    in.p[n2 + 14] ^= 0x40; /* the third's data: skip does not check them */
    add_good(&in, 1);
    rd_t r;
    rd_open(&r, &in);
    assert_int_equal(rd_skip(&r), 1);
    expect_good(&r, 1);
    assert_int_equal(rd_skip(&r), 1);
    expect_good(&r, 1);
    assert_int_equal(rd_skip(&r), 0);
    rd_close(&r);

    /* a bad length CRC stops a skip; so does a cut record */
    in.n = 0;
    add_good(&in, 0);
    size_t n1 = in.n;
    add_good(&in, 1);
    in.p[n1 + 8] ^= 0x01;
    rd_open(&r, &in);
    assert_int_equal(rd_skip(&r), 1);
    assert_int_equal(rd_skip(&r), PSC_EIO);
    assert_non_null(strstr(r.err, "length CRC"));
    rd_close(&r);
    in.p[n1 + 8] ^= 0x01;
    in.n -= 3;
    rd_open(&r, &in);
    assert_int_equal(rd_skip(&r), 1);
    assert_int_equal(rd_skip(&r), PSC_ECORRUPT);
    assert_non_null(strstr(r.err, "truncated"));
    assert_int_equal(rd_skip(&r), 0);
    rd_close(&r);
    free(in.p);
}

/* A spec that breaks the parser's rules is a configuration error. */
static void test_tfrecord_bad_spec(void **state)
{
    (void)state;
    buf_t in = {0};
    add_good(&in, 1);
    for (int k = 0; k < 4; k++) {
        spec_std();
        const char *what = NULL;
        if (k == 0) g_feats[3].kind = PSC_FEATURE_FLOAT, what = "'c'"; /* categorical float */
        if (k == 1) g_feats[5].cat_index = 1, what = "cat_index";      /* taken twice */
        if (k == 2) g_feats[2].length = 2, what = "'i'";               /* past num_dense */
        if (k == 3) g_feats[0].kind = PSC_FEATURE_BYTES, what = "'label'";
        rd_t r;
        rd_open(&r, &in);
        expect_bad(&r, PSC_ECONFIG, what, NULL);
        rd_close(&r);
    }
    free(in.p);
}

/* ---- files and the whole reader ---- */

static void write_file(const char *path, const buf_t *b, int gz)
{
    if (gz) {
        gzFile f = gzopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(gzwrite(f, b->p, (unsigned)b->n), (int)b->n);
        assert_int_equal(gzclose(f), Z_OK);
    } else {
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(b->p, 1, b->n, f), b->n);
        assert_int_equal(fclose(f), 0);
    }
}

/* Plain and gzip files (TFRecordWriter's GZIP option) read alike. */
static void test_tfrecord_files(void **state)
{
    (void)state;
    spec_std();
    buf_t in = {0};
    add_good(&in, 1);
    size_t n1 = in.n;
    add_good(&in, 0);
    in.p[n1 + 20] ^= 0x08; /* bad data CRC */
    add_good(&in, 0);
    for (int gz = 0; gz < 2; gz++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", g_dir, gz ? "f.tfrecord.gz" : "f.tfrecord");
        write_file(path, &in, gz);
        rd_t r;
        memset(&r, 0, sizeof r);
        assert_int_equal(data_file_open(path, &r.f, r.err, sizeof r.err), 0);
        data_batch_reset(&r.b, g_spec.num_dense, g_spec.num_cat);
        expect_good(&r, 1);
        expect_bad(&r, PSC_ECORRUPT, "data CRC", NULL);
        expect_good(&r, 0);
        assert_int_equal(rd_next(&r), 0);
        assert_true(r.b.dense[0] == 1.5f && r.b.dense[4] == 2.5f);
        rd_close(&r);
    }
    free(in.p);
}

/* Reads every batch of a reader over files; returns the last code (0 at the
 * end) and the labels read in order. */
static int read_shard(const char *const *files, int nfiles, int shard, int num_shards, int64_t limit, float *labels,
                      int *n, int64_t *skipped, char *err, size_t errlen)
{
    g_spec.train_files = (char **)files;
    g_spec.num_train_files = nfiles;
    g_spec.shard = num_shards > 1 ? PSC_SHARD_RECORD : PSC_SHARD_FILE;
    g_spec.bad_record_limit = limit;
    g_spec.shuffle = 0;
    g_spec.batch_size = 3;
    data_reader_t *rd = NULL;
    int rc = data_reader_open(&g_spec, 0, shard, num_shards, 1, 0, &rd, err, errlen);
    if (rc) fail_msg("data_reader_open: %s", err);
    data_batch_t b;
    memset(&b, 0, sizeof b);
    *n = 0;
    while ((rc = data_reader_next(rd, &b, 3, NULL, err, errlen)) > 0) {
        assert_int_equal(rc, b.n);
        for (int k = 0; k < b.n; k++) labels[(*n)++] = b.label[k];
    }
    *skipped = data_reader_skipped(rd);
    data_reader_close(rd);
    data_batch_free(&b);
    return rc;
}

static int read_all(const char *const *files, int nfiles, int64_t limit, float *labels, int *n, int64_t *skipped,
                    char *err, size_t errlen)
{
    return read_shard(files, nfiles, 0, 1, limit, labels, n, skipped, err, errlen);
}

static void test_tfrecord_reader(void **state)
{
    (void)state;
    spec_std();
    char pa[512], pb[512], pc[512];
    snprintf(pa, sizeof pa, "%s/a.tfrecord", g_dir);
    snprintf(pb, sizeof pb, "%s/b.tfrecord.gz", g_dir);
    snprintf(pc, sizeof pc, "%s/c.tfrecord", g_dir);
    buf_t in = {0};
    add_good(&in, 1);
    add_good(&in, 0);
    size_t n2 = in.n;
    add_good(&in, 1);
    in.p[n2 + 30] ^= 0x02; /* record 3: bad data CRC */
    add_good(&in, 1);
    write_file(pa, &in, 0);
    in.n = 0;
    add_good(&in, 0);
    add_good(&in, 1);
    write_file(pb, &in, 1);
    in.n = 0;
    add_good(&in, 0);
    size_t n1 = in.n;
    add_good(&in, 1);
    in.p[n1 + 8] ^= 0x10; /* record 2: bad length CRC */
    write_file(pc, &in, 0);
    free(in.p);

    const char *files[] = {pa, pb, pc};
    float labels[16];
    int n;
    int64_t skipped;
    char err[512];
    /* limit 1: the bad record skipped and counted */
    assert_int_equal(read_all(files, 2, 1, labels, &n, &skipped, err, sizeof err), 0);
    const float want[] = {1, 0, 1, 0, 1};
    assert_int_equal(n, 5);
    for (int k = 0; k < 5; k++) assert_true(labels[k] == want[k]);
    assert_int_equal(skipped, 1);

    /* record sharding over 2 replicas: the stream's records 0, 2, 4 and
     * 1, 3, 5 (record 3 of a.tfrecord, the bad one, is replica 0's: the
     * skipping replica 1 passes over it unchecked) */
    assert_int_equal(read_shard(files, 2, 0, 2, 1, labels, &n, &skipped, err, sizeof err), 0);
    assert_int_equal(n, 2);
    assert_true(labels[0] == 1 && labels[1] == 0);
    assert_int_equal(skipped, 1);
    assert_int_equal(read_shard(files, 2, 1, 2, 0, labels, &n, &skipped, err, sizeof err), 0);
    assert_int_equal(n, 3);
    assert_true(labels[0] == 0 && labels[1] == 1 && labels[2] == 1);
    assert_int_equal(skipped, 0);

    /* limit 0: it stops the read, the file and record named */
    int rc = read_all(files, 2, 0, labels, &n, &skipped, err, sizeof err);
    assert_int_equal(rc, PSC_ECORRUPT);
    if (!strstr(err, "a.tfrecord") || !strstr(err, "record 3") || !strstr(err, "data CRC")) fail_msg("error: %s", err);

    /* a bad length CRC stops it whatever the limit */
    rc = read_all(files + 2, 1, 5, labels, &n, &skipped, err, sizeof err);
    assert_int_equal(rc, PSC_EIO);
    if (!strstr(err, "c.tfrecord") || !strstr(err, "record 2") || !strstr(err, "length CRC"))
        fail_msg("error: %s", err);
}

/* ---- setup ---- */

static int setup(void **state)
{
    (void)state;
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/psc_test_tfrecord_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tfrecord_known_bytes),
        cmocka_unit_test(test_tfrecord_lists),
        cmocka_unit_test(test_tfrecord_absent_and_repeated),
        cmocka_unit_test(test_tfrecord_many_features),
        cmocka_unit_test(test_tfrecord_bad_examples),
        cmocka_unit_test(test_tfrecord_framing),
        cmocka_unit_test(test_tfrecord_skip),
        cmocka_unit_test(test_tfrecord_bad_spec),
        cmocka_unit_test(test_tfrecord_files),
        cmocka_unit_test(test_tfrecord_reader),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
