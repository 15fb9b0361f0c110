/* test_model_spec — psc_model_variables and psc_model_shapes (common/model_spec.c).
 *
 * Specs are built by hand (not parsed) so that this test depends only on the
 * struct. Covered: the variables and shapes of an MLP 784-256-128-10 (rank-1
 * input, and image input with flatten) and of the classic CNN (conv 5x5 32 same,
 * pool 2, conv 5x5 64 same, pool 2, flatten, dense 10); valid vs same output sizes
 * with strides and non-square windows; use_bias = 0; and every shape error, each
 * naming the layer (psc_model_check gives the same errors without allocating).
 * Recommendation models (loss sigmoid_cross_entropy), built by hand too: a
 * DLRM (bottom MLP, two embedding layers, interaction, top MLP, wide) and a
 * concat model with their variables (dense layers only) and widths, and the
 * errors that only a hand-built spec can reach (a table or feature index out
 * of range, an unknown combiner). The parsed forms: test_job_spec_ctr*.c.
 */
#include "job_spec.h"
#include "model_spec.h"
#include "psc.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* ---- building specs by hand ---- */

static psc_layer_spec_t dense(const char *name, int units, enum psc_activation act)
{
    psc_layer_spec_t L = {.type = PSC_LAYER_DENSE, .units = units, .activation = act, .use_bias = 1};
    snprintf(L.name, sizeof L.name, "%s", name);
    return L;
}

static psc_layer_spec_t conv(const char *name, int filters, int kh, int kw, int sh, int sw, enum psc_padding pad)
{
    psc_layer_spec_t L = {.type = PSC_LAYER_CONV2D,
                          .filters = filters,
                          .kernel_size = {kh, kw},
                          .strides = {sh, sw},
                          .padding = pad,
                          .activation = PSC_ACT_RELU,
                          .use_bias = 1};
    snprintf(L.name, sizeof L.name, "%s", name);
    return L;
}

static psc_layer_spec_t pool(const char *name, int ph, int pw, int sh, int sw, enum psc_padding pad)
{
    psc_layer_spec_t L = {.type = PSC_LAYER_MAX_POOL2D, .pool_size = {ph, pw}, .strides = {sh, sw}, .padding = pad};
    snprintf(L.name, sizeof L.name, "%s", name);
    return L;
}

static psc_layer_spec_t flatten(const char *name)
{
    psc_layer_spec_t L = {.type = PSC_LAYER_FLATTEN};
    snprintf(L.name, sizeof L.name, "%s", name);
    return L;
}

static psc_layer_spec_t dropout(const char *name, float rate)
{
    psc_layer_spec_t L = {.type = PSC_LAYER_DROPOUT, .rate = rate};
    snprintf(L.name, sizeof L.name, "%s", name);
    return L;
}

/* rank 1: (h); rank 3: (h, w, c). The spec points at `layers` (not owned). */
static psc_job_spec_t make_spec(int rank, int h, int w, int c, psc_layer_spec_t *layers, int n)
{
    psc_job_spec_t s;
    memset(&s, 0, sizeof s);
    s.input_rank = rank;
    s.input_shape[0] = h;
    s.input_shape[1] = rank == 3 ? w : 0; /* hand-built rank-1 specs may leave these 0 */
    s.input_shape[2] = rank == 3 ? c : 0;
    s.layers = layers;
    s.num_layers = n;
    return s;
}

static void expect_var(const psc_var_desc_t *v, const char *name, int layer, int rank, int64_t d0, int64_t d1, int64_t d2,
                       int64_t d3)
{
    const int64_t dims[4] = {d0, d1, d2, d3};
    assert_string_equal(v->name, name);
    assert_int_equal(v->layer, layer);
    assert_int_equal(v->rank, rank);
    assert_int_equal(v->is_step, 0);
    int64_t numel = 1;
    for (int d = 0; d < rank; d++) {
        assert_int_equal(v->shape[d], dims[d]);
        numel *= dims[d];
    }
    assert_int_equal(v->numel, numel);
}

static void expect_global_step(const psc_var_desc_t *v)
{
    assert_string_equal(v->name, "global_step");
    assert_int_equal(v->rank, 0);
    assert_int_equal(v->numel, 1);
    assert_int_equal(v->is_step, 1);
    assert_int_equal(v->layer, -1);
}

static void expect_shape(const int *s, int h, int w, int c)
{
    assert_int_equal(s[0], h);
    assert_int_equal(s[1], w);
    assert_int_equal(s[2], c);
}

/* ---- models ---- */

static void test_mlp(void **state)
{
    (void)state;
    psc_layer_spec_t layers[] = {dense("dense", 256, PSC_ACT_RELU), dense("dense_1", 128, PSC_ACT_RELU),
                                 dense("dense_2", 10, PSC_ACT_NONE)};
    psc_job_spec_t s = make_spec(1, 784, 0, 0, layers, 3);
    char err[256] = "";
    psc_var_desc_t *v = NULL;
    int n = 0;
    assert_int_equal(psc_model_variables(&s, &v, &n, err, sizeof err), 0);
    assert_int_equal(n, 7);
    expect_global_step(&v[0]);
    expect_var(&v[1], "dense/kernel", 0, 2, 784, 256, 0, 0);
    expect_var(&v[2], "dense/bias", 0, 1, 256, 0, 0, 0);
    expect_var(&v[3], "dense_1/kernel", 1, 2, 256, 128, 0, 0);
    expect_var(&v[4], "dense_1/bias", 1, 1, 128, 0, 0, 0);
    expect_var(&v[5], "dense_2/kernel", 2, 2, 128, 10, 0, 0);
    expect_var(&v[6], "dense_2/bias", 2, 1, 10, 0, 0, 0);
    int64_t total = 0;
    for (int i = 1; i < n; i++) total += v[i].numel;
    assert_int_equal(total, 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10); /* 235,146 */
    free(v);

    int shapes[3][3];
    assert_int_equal(psc_model_shapes(&s, shapes, err, sizeof err), 0);
    expect_shape(shapes[0], 1, 1, 256);
    expect_shape(shapes[1], 1, 1, 128);
    expect_shape(shapes[2], 1, 1, 10);
}

/* The same MLP on a (28, 28, 1) image: flatten first, same variables. */
static void test_mlp_image_input(void **state)
{
    (void)state;
    psc_layer_spec_t layers[] = {flatten("flatten"), dense("dense", 256, PSC_ACT_RELU), dropout("dropout", 0.2f),
                                 dense("dense_1", 10, PSC_ACT_NONE)};
    psc_job_spec_t s = make_spec(3, 28, 28, 1, layers, 4);
    char err[256] = "";
    psc_var_desc_t *v = NULL;
    int n = 0;
    assert_int_equal(psc_model_variables(&s, &v, &n, err, sizeof err), 0);
    assert_int_equal(n, 5);
    expect_global_step(&v[0]);
    expect_var(&v[1], "dense/kernel", 1, 2, 784, 256, 0, 0);
    expect_var(&v[2], "dense/bias", 1, 1, 256, 0, 0, 0);
    expect_var(&v[3], "dense_1/kernel", 3, 2, 256, 10, 0, 0);
    expect_var(&v[4], "dense_1/bias", 3, 1, 10, 0, 0, 0);
    free(v);
    int shapes[4][3];
    assert_int_equal(psc_model_shapes(&s, shapes, err, sizeof err), 0);
    expect_shape(shapes[0], 1, 1, 784);
    expect_shape(shapes[1], 1, 1, 256);
    expect_shape(shapes[2], 1, 1, 256); /* dropout keeps the shape */
    expect_shape(shapes[3], 1, 1, 10);
}

static void test_cnn(void **state)
{
    (void)state;
    psc_layer_spec_t layers[] = {conv("conv2d", 32, 5, 5, 1, 1, PSC_PAD_SAME),
                                 pool("max_pooling2d", 2, 2, 2, 2, PSC_PAD_VALID),
                                 conv("conv2d_1", 64, 5, 5, 1, 1, PSC_PAD_SAME),
                                 pool("max_pooling2d_1", 2, 2, 2, 2, PSC_PAD_VALID),
                                 flatten("flatten"),
                                 dense("dense", 10, PSC_ACT_NONE)};
    psc_job_spec_t s = make_spec(3, 28, 28, 1, layers, 6);
    char err[256] = "";
    psc_var_desc_t *v = NULL;
    int n = 0;
    assert_int_equal(psc_model_variables(&s, &v, &n, err, sizeof err), 0);
    assert_int_equal(n, 7);
    expect_global_step(&v[0]);
    expect_var(&v[1], "conv2d/kernel", 0, 4, 5, 5, 1, 32);
    expect_var(&v[2], "conv2d/bias", 0, 1, 32, 0, 0, 0);
    expect_var(&v[3], "conv2d_1/kernel", 2, 4, 5, 5, 32, 64);
    expect_var(&v[4], "conv2d_1/bias", 2, 1, 64, 0, 0, 0);
    expect_var(&v[5], "dense/kernel", 5, 2, 7 * 7 * 64, 10, 0, 0);
    expect_var(&v[6], "dense/bias", 5, 1, 10, 0, 0, 0);
    free(v);

    int shapes[6][3];
    assert_int_equal(psc_model_shapes(&s, shapes, err, sizeof err), 0);
    expect_shape(shapes[0], 28, 28, 32);
    expect_shape(shapes[1], 14, 14, 32);
    expect_shape(shapes[2], 14, 14, 64);
    expect_shape(shapes[3], 7, 7, 64);
    expect_shape(shapes[4], 1, 1, 3136);
    expect_shape(shapes[5], 1, 1, 10);
}

/* Output height of one conv2d and one max_pool2d layer on an (h, w, 3) input. */
static void out_hw(int h, int w, psc_layer_spec_t L, int *oh, int *ow)
{
    psc_layer_spec_t layers[] = {L, flatten("flatten"), dense("dense", 2, PSC_ACT_NONE)};
    psc_job_spec_t s = make_spec(3, h, w, 3, layers, 3);
    int shapes[3][3];
    char err[256] = "";
    int rc = psc_model_shapes(&s, shapes, err, sizeof err);
    if (rc) fprintf(stderr, "unexpected error: %s\n", err);
    assert_int_equal(rc, 0);
    *oh = shapes[0][0];
    *ow = shapes[0][1];
    assert_int_equal(shapes[1][2], shapes[0][0] * shapes[0][1] * shapes[0][2]);
}

static void test_valid_vs_same(void **state)
{
    (void)state;
    /* {in, k, s, valid = floor((in-k)/s)+1, same = ceil(in/s)} */
    static const int cases[][5] = {
        {28, 5, 1, 24, 28}, {28, 5, 2, 12, 14}, {7, 3, 2, 3, 4}, {8, 3, 2, 3, 4}, {7, 4, 2, 2, 4},
        {5, 5, 1, 1, 5},    {5, 1, 3, 2, 2},    {9, 2, 3, 3, 3}, {1, 1, 1, 1, 1}, {2, 3, 1, 0, 2},
    };
    for (size_t i = 0; i < PSC_ARRAY_LEN(cases); i++) {
        int in = cases[i][0], k = cases[i][1], st = cases[i][2], valid = cases[i][3], same = cases[i][4];
        int oh, ow;
        /* same: always defined */
        out_hw(in, 11, conv("conv2d", 4, k, 1, st, 1, PSC_PAD_SAME), &oh, &ow);
        assert_int_equal(oh, same);
        assert_int_equal(ow, 11);
        out_hw(in, 11, pool("max_pooling2d", k, 1, st, 1, PSC_PAD_SAME), &oh, &ow);
        assert_int_equal(oh, same);
        assert_int_equal(ow, 11);
        if (valid < 1) continue; /* an error: see test_errors */
        out_hw(in, 11, conv("conv2d", 4, k, 1, st, 1, PSC_PAD_VALID), &oh, &ow);
        assert_int_equal(oh, valid);
        out_hw(11, in, pool("max_pooling2d", 1, k, 1, st, PSC_PAD_VALID), &oh, &ow);
        assert_int_equal(oh, 11);
        assert_int_equal(ow, valid);
    }
    /* non-square kernel and strides on both axes at once */
    int oh, ow;
    out_hw(28, 20, conv("conv2d", 4, 3, 5, 1, 2, PSC_PAD_VALID), &oh, &ow);
    assert_int_equal(oh, 26);
    assert_int_equal(ow, 8);
    out_hw(28, 20, conv("conv2d", 4, 3, 5, 3, 2, PSC_PAD_SAME), &oh, &ow);
    assert_int_equal(oh, 10);
    assert_int_equal(ow, 10);
}

static void test_no_bias(void **state)
{
    (void)state;
    psc_layer_spec_t layers[] = {conv("c", 8, 3, 3, 1, 1, PSC_PAD_VALID), flatten("f"), dense("d", 4, PSC_ACT_NONE),
                                 dense("logits", 3, PSC_ACT_NONE)};
    layers[0].use_bias = 0;
    layers[2].use_bias = 0;
    psc_job_spec_t s = make_spec(3, 6, 5, 2, layers, 4);
    char err[256] = "";
    psc_var_desc_t *v = NULL;
    int n = 0;
    assert_int_equal(psc_model_check(&s, err, sizeof err), 0);
    assert_int_equal(psc_model_variables(&s, &v, &n, err, sizeof err), 0);
    assert_int_equal(n, 5);
    expect_var(&v[1], "c/kernel", 0, 4, 3, 3, 2, 8);
    expect_var(&v[2], "d/kernel", 2, 2, 4 * 3 * 8, 4, 0, 0);
    expect_var(&v[3], "logits/kernel", 3, 2, 4, 3, 0, 0);
    expect_var(&v[4], "logits/bias", 3, 1, 3, 0, 0, 0);
    free(v);
}

/* ---- errors ---- */

/* The three functions fail with PSC_ECONFIG and an error containing n1 and n2. */
static void expect_error(const psc_job_spec_t *s, const char *n1, const char *n2)
{
    char err[512] = "";
    psc_var_desc_t *v = (psc_var_desc_t *)(uintptr_t)1;
    int n = 99;
    assert_int_equal(psc_model_variables(s, &v, &n, err, sizeof err), PSC_ECONFIG);
    assert_null(v);
    assert_int_equal(n, 0);
    if (!strstr(err, n1) || (n2 && !strstr(err, n2))) fail_msg("error \"%s\" lacks \"%s\" / \"%s\"", err, n1, n2);
    int shapes[8][3];
    err[0] = 0;
    assert_int_equal(psc_model_shapes(s, shapes, err, sizeof err), PSC_ECONFIG);
    if (!strstr(err, n1) || (n2 && !strstr(err, n2))) fail_msg("error \"%s\" lacks \"%s\" / \"%s\"", err, n1, n2);
    err[0] = 0;
    assert_int_equal(psc_model_check(s, err, sizeof err), PSC_ECONFIG);
    if (!strstr(err, n1) || (n2 && !strstr(err, n2))) fail_msg("error \"%s\" lacks \"%s\" / \"%s\"", err, n1, n2);
}

static void test_errors(void **state)
{
    (void)state;
    {   /* dense on an image */
        psc_layer_spec_t L[] = {dense("dense", 10, PSC_ACT_NONE)};
        psc_job_spec_t s = make_spec(3, 28, 28, 1, L, 1);
        char err[256] = "";
        psc_var_desc_t *v = NULL;
        int n = 0;
        assert_int_equal(psc_model_variables(&s, &v, &n, err, sizeof err), PSC_ECONFIG);
        assert_string_equal(err, "model.layers[0] (dense): input is (28, 28, 1); add a flatten layer before it");
    }
    {   /* dense after a conv, still an image */
        psc_layer_spec_t L[] = {conv("conv2d", 4, 3, 3, 1, 1, PSC_PAD_SAME), dense("dense", 10, PSC_ACT_NONE)};
        psc_job_spec_t s = make_spec(3, 8, 8, 1, L, 2);
        expect_error(&s, "model.layers[1] (dense)", "input is (8, 8, 4); add a flatten layer");
    }
    {   /* conv2d on a flat input: names the input shape it needs (issue 16 item 5) */
        psc_layer_spec_t L[] = {conv("conv2d", 4, 3, 3, 1, 1, PSC_PAD_SAME), flatten("f"), dense("d", 10, PSC_ACT_NONE)};
        psc_job_spec_t s = make_spec(1, 784, 0, 0, L, 3);
        expect_error(&s, "model.layers[0] (conv2d)", "image input");
        char err[256] = "";
        assert_int_equal(psc_model_check(&s, err, sizeof err), PSC_ECONFIG);
        assert_string_equal(err, "model.layers[0] (conv2d): conv2d needs an image input: model.input_shape [h, w, c], "
                                 "got [784]");
    }
    {   /* max_pool2d after flatten: names the flatten */
        psc_layer_spec_t L[] = {flatten("flatten"), pool("pool", 2, 2, 2, 2, PSC_PAD_VALID), dense("d", 10, PSC_ACT_NONE)};
        psc_job_spec_t s = make_spec(3, 28, 28, 1, L, 3);
        expect_error(&s, "model.layers[1] (pool)", "(784)");
        char err[256] = "";
        assert_int_equal(psc_model_check(&s, err, sizeof err), PSC_ECONFIG);
        assert_string_equal(err, "model.layers[1] (pool): input is (784), flat since model.layers[0] (flatten); "
                                 "max_pool2d needs an image input (h, w, c): put it before any flatten or dense layer");
    }
    {   /* a valid window larger than its input */
        psc_layer_spec_t L[] = {conv("c0", 4, 5, 5, 1, 1, PSC_PAD_VALID), conv("c1", 4, 5, 5, 1, 1, PSC_PAD_VALID),
                                flatten("f"), dense("d", 10, PSC_ACT_NONE)};
        psc_job_spec_t s = make_spec(3, 8, 8, 1, L, 4);
        expect_error(&s, "model.layers[1] (c1)", "does not fit input (4, 4, 4)");
    }
    {   /* pooling too far: 3 -> 1 -> window 2 does not fit */
        psc_layer_spec_t L[] = {pool("p0", 2, 2, 2, 2, PSC_PAD_VALID), pool("p1", 2, 2, 2, 2, PSC_PAD_VALID),
                                flatten("f"), dense("d", 10, PSC_ACT_NONE)};
        psc_job_spec_t s = make_spec(3, 3, 3, 1, L, 4);
        expect_error(&s, "model.layers[1] (p1)", "does not fit");
    }
    {   /* the output is still an image */
        psc_layer_spec_t L[] = {conv("conv2d", 4, 3, 3, 1, 1, PSC_PAD_SAME)};
        psc_job_spec_t s = make_spec(3, 8, 8, 1, L, 1);
        expect_error(&s, "model.layers[0] (conv2d)", "flat vector");
    }
    {   /* one class */
        psc_layer_spec_t L[] = {dense("dense", 8, PSC_ACT_RELU), dense("out", 1, PSC_ACT_NONE)};
        psc_job_spec_t s = make_spec(1, 4, 0, 0, L, 2);
        expect_error(&s, "model.layers[1] (out)", "at least 2 classes");
    }
    {   /* a flatten-only model on 1 feature */
        psc_layer_spec_t L[] = {flatten("flatten")};
        psc_job_spec_t s = make_spec(3, 1, 1, 1, L, 1);
        expect_error(&s, "model.layers[0] (flatten)", "at least 2 classes");
    }
    {   /* dropout rate out of range */
        psc_layer_spec_t L[] = {dense("dense", 8, PSC_ACT_RELU), dropout("drop", 1.0f), dense("d", 3, PSC_ACT_NONE)};
        psc_job_spec_t s = make_spec(1, 4, 0, 0, L, 3);
        expect_error(&s, "model.layers[1] (drop)", "rate");
    }
    {   /* zero stride / kernel / units / filters */
        psc_layer_spec_t L[] = {conv("c", 4, 3, 3, 0, 1, PSC_PAD_SAME), flatten("f"), dense("d", 3, PSC_ACT_NONE)};
        psc_job_spec_t s = make_spec(3, 8, 8, 1, L, 3);
        expect_error(&s, "model.layers[0] (c)", "strides");
        L[0] = conv("c", 4, 0, 3, 1, 1, PSC_PAD_SAME);
        expect_error(&s, "model.layers[0] (c)", "kernel_size");
        L[0] = conv("c", 0, 3, 3, 1, 1, PSC_PAD_SAME);
        expect_error(&s, "model.layers[0] (c)", "filters");
        L[2] = dense("d", 0, PSC_ACT_NONE);
        L[0] = conv("c", 4, 3, 3, 1, 1, PSC_PAD_SAME);
        expect_error(&s, "model.layers[2] (d)", "units");
    }
    {   /* input shape */
        psc_layer_spec_t L[] = {dense("dense", 3, PSC_ACT_NONE)};
        psc_job_spec_t s = make_spec(1, 4, 0, 0, L, 1);
        s.input_rank = 2;
        expect_error(&s, "model.input_shape", "rank");
        s = make_spec(3, 0, 28, 1, L, 1);
        expect_error(&s, "model.input_shape", NULL);
        s = make_spec(1, 4, 0, 0, L, 0);
        expect_error(&s, "model.layers", NULL);
    }
}

/* ---- recommendation models, built by hand ---- */

static psc_layer_spec_t lookup(const char *name, enum psc_layer_type type, int table, int f0, int nf)
{
    psc_layer_spec_t L = {.type = type, .table = table, .num_features = nf, .hash_ids = 1};
    for (int k = 0; k < nf; k++) L.features[k] = f0 + k;
    snprintf(L.name, sizeof L.name, "%s", name);
    return L;
}

static psc_layer_spec_t join(const char *name, enum psc_layer_type type)
{
    psc_layer_spec_t L = {.type = type};
    snprintf(L.name, sizeof L.name, "%s", name);
    return L;
}

/* num_dense dense values, 4 categorical features, tables a (dim 8), b (dim 8), c (dim 4), w (dim 1). */
static psc_job_spec_t make_ctr(int num_dense, psc_layer_spec_t *layers, int n, psc_table_spec_t *tables)
{
    static const char *const names[] = {"a", "b", "c", "w"};
    static const int dims[] = {8, 8, 4, 1};
    for (int t = 0; t < 4; t++) {
        memset(&tables[t], 0, sizeof tables[t]);
        snprintf(tables[t].name, sizeof tables[t].name, "%s", names[t]);
        tables[t].rows = 100;
        tables[t].dim = dims[t];
    }
    psc_job_spec_t s = make_spec(1, num_dense, 0, 0, layers, n);
    s.loss_kind = PSC_LOSS_SIGMOID_XENT;
    s.num_dense = num_dense;
    s.num_cat = 4;
    s.tables = tables;
    s.num_tables = 4;
    return s;
}

static void test_ctr(void **state)
{
    (void)state;
    psc_table_spec_t T[4];
    /* DLRM: bottom 5 -> 8, S = 2 + 1 slots of dim 8, interaction 8 + 4*3/2 = 14, top 14 -> 1 */
    psc_layer_spec_t L[] = {dense("bot", 8, PSC_ACT_RELU),
                            lookup("e0", PSC_LAYER_EMBEDDING, 0, 0, 2),
                            lookup("e1", PSC_LAYER_EMBEDDING, 1, 2, 1),
                            join("dot", PSC_LAYER_INTERACTION),
                            dense("logit", 1, PSC_ACT_NONE),
                            lookup("lin", PSC_LAYER_WIDE, 3, 0, 4)};
    psc_job_spec_t s = make_ctr(5, L, 6, T);
    char err[256] = "";
    psc_var_desc_t *v = NULL;
    int n = 0;
    assert_int_equal(psc_model_variables(&s, &v, &n, err, sizeof err), 0);
    assert_int_equal(n, 5);
    expect_global_step(&v[0]);
    expect_var(&v[1], "bot/kernel", 0, 2, 5, 8, 0, 0);
    expect_var(&v[2], "bot/bias", 0, 1, 8, 0, 0, 0);
    expect_var(&v[3], "logit/kernel", 4, 2, 14, 1, 0, 0);
    expect_var(&v[4], "logit/bias", 4, 1, 1, 0, 0, 0);
    free(v);
    int shapes[6][3];
    assert_int_equal(psc_model_shapes(&s, shapes, err, sizeof err), 0);
    static const int widths[] = {8, 16, 8, 14, 1, 1};
    for (int i = 0; i < 6; i++) expect_shape(shapes[i], 1, 1, widths[i]);

    /* the same through concat without the bottom MLP: 5 + 16 + 8 = 29 */
    L[0] = lookup("e2", PSC_LAYER_EMBEDDING, 2, 3, 1); /* + 4 */
    L[3] = join("cat", PSC_LAYER_CONCAT);
    assert_int_equal(psc_model_shapes(&s, shapes, err, sizeof err), 0);
    expect_shape(shapes[0], 1, 1, 4);
    expect_shape(shapes[3], 1, 1, 5 + 4 + 16 + 8);
    /* ... and through interaction without dense features: mixed dims refused, then S(S-1)/2 */
    s.num_dense = 0;
    L[3] = join("dot", PSC_LAYER_INTERACTION);
    expect_error(&s, "model.layers[3] (dot)", "one dim");
    L[0] = lookup("e2", PSC_LAYER_EMBEDDING, 0, 3, 1);
    assert_int_equal(psc_model_shapes(&s, shapes, err, sizeof err), 0);
    expect_shape(shapes[3], 1, 1, 4 * 3 / 2);
    assert_int_equal(psc_model_check(&s, err, sizeof err), 0);

    /* what only a hand-built spec can get wrong */
    L[1].table = 4;
    expect_error(&s, "model.layers[1] (e0)", "table 4 is not one of the spec's 4 tables");
    L[1].table = -1;
    expect_error(&s, "model.layers[1] (e0)", "table -1");
    L[1].table = 0;
    L[1].num_features = 0;
    expect_error(&s, "model.layers[1] (e0)", "expected 1 to 128 features, got 0");
    L[1].num_features = 2;
    L[1].features[1] = 4;
    expect_error(&s, "model.layers[1] (e0)", "feature 4 is not one of the data's 4 categorical features");
    L[1].features[1] = 1;
    L[5].combiner = (enum psc_combiner)7;
    expect_error(&s, "model.layers[5] (lin)", "unknown combiner 7");
    L[5].combiner = PSC_COMBINER_MEAN;
    L[5].type = (enum psc_layer_type)99;
    expect_error(&s, "model.layers[5] (lin)", "unknown layer type 99");
    L[5].type = PSC_LAYER_WIDE;
    s.num_dense = -1;
    expect_error(&s, "data.features", NULL);
    s.num_dense = 0;
    s.tables = NULL;
    expect_error(&s, "model.layers[0] (e2)", "table 0 is not one of");
    s.tables = T;
    assert_int_equal(psc_model_check(&s, err, sizeof err), 0);
    /* a softmax model refuses the recommendation layers */
    s.loss_kind = PSC_LOSS_SOFTMAX_XENT;
    s.input_shape[0] = 5;
    expect_error(&s, "model.layers[0] (e2)", "needs model.loss sigmoid_cross_entropy");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mlp),        cmocka_unit_test(test_mlp_image_input), cmocka_unit_test(test_cnn),
        cmocka_unit_test(test_valid_vs_same), cmocka_unit_test(test_no_bias),       cmocka_unit_test(test_errors),
        cmocka_unit_test(test_ctr),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
