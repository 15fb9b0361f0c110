/* test_tower_ops — every op of the "cuda" backend's kernel table
 * (tower_walk.h) against the CPU backend's, the reference, as ggml's
 * test-backend-ops does: the same random inputs uploaded to both, each op run
 * on both, every output downloaded and compared. Skipped (exit 77) when the
 * build has no CUDA backend or no GPU is visible.
 *
 * Error measure, per output (b = CPU, a = CUDA):
 *     rel(a, b) = max_i |a_i - b_i| / max(max_i |b_i|, 1e-6)
 * with a tolerance per op: GEMMs, convolutions and sums 1e-5 (summation
 * order; the CPU convolves on oneDNN, the CUDA backend by im2col + GEMM), elementwise
 * ops 1e-6 (a few ulps of tanhf / expf), the loss in double 1e-9; the discrete
 * outputs (max-pool argmax, dropout masks, the loss's hits) must be equal. The
 * CTR ops: embedding bags forward 1e-6 (both sum a bag in order), backward 1e-5
 * (CUDA's atomics add in any order), the interaction and its adjoint 1e-5, the
 * sigmoid cross-entropy 1e-6 / 1e-9 (double), the strided copy exact; the CPU's
 * bags, dots and loss are also checked against sums here in double.
 * Shapes are odd sizes that are not multiples of a warp or a block.
 *
 * Built twice: against the real CUDA backend (label cuda, needs a GPU), and as
 * unit.test_tower_ops_emu on the emulated CUDA of tests/cuda_emu (cuda_emu_active():
 * any mistake the emulation reports fails).
 */
#include "psc.h"
#include "rng.h"
#include "tower.h"
#include "tower_walk.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tower_window_fixture.h"

#include "cuda_emu_cmocka.h" /* the emulated build (tests/cuda_emu): peer access on/off, mistakes seen */

static const tower_backend_ops_t *be[2]; /* [0] CPU (reference), [1] CUDA */
static tower_dev_t *dev[2];
static psc_rng_t rng;

/* ---- buffers on both backends ---- */

typedef struct twin {
    void *p[2]; /* device memory of be[0], be[1] */
    size_t bytes;
} twin_t;

static twin_t twin_new(size_t bytes)
{
    twin_t t = {.bytes = bytes};
    for (int k = 0; k < 2; k++) assert_int_equal(be[k]->alloc(dev[k], bytes, &t.p[k]), 0);
    return t;
}

static void twin_free(twin_t *t)
{
    for (int k = 0; k < 2; k++) be[k]->free(dev[k], t->p[k]);
}

/* The same host data into both. */
static void twin_put(twin_t *t, const void *host)
{
    for (int k = 0; k < 2; k++) {
        assert_int_equal(be[k]->upload(dev[k], t->p[k], host, t->bytes), 0);
        assert_int_equal(be[k]->sync(dev[k]), 0);
    }
}

/* Uniform floats in [lo, hi) into both; returns the twin. */
static twin_t twin_rand(int64_t count, float lo, float hi)
{
    float *h = psc_xcalloc((size_t)count, sizeof *h);
    for (int64_t i = 0; i < count; i++) h[i] = lo + (hi - lo) * (float)psc_rng_uniform(&rng);
    twin_t t = twin_new((size_t)count * sizeof *h);
    twin_put(&t, h);
    free(h);
    return t;
}

/* Both copies to the host: out[k] (caller frees). */
static void twin_get(const twin_t *t, void *out[2])
{
    for (int k = 0; k < 2; k++) {
        out[k] = psc_xcalloc(1, t->bytes ? t->bytes : 1);
        assert_int_equal(be[k]->download(dev[k], out[k], t->p[k], t->bytes), 0);
        assert_int_equal(be[k]->sync(dev[k]), 0);
    }
}

/* Fails unless the CUDA copy of a float twin is within tol of the CPU's. */
static void expect_floats(const char *what, const twin_t *t, double tol)
{
    void *h[2];
    twin_get(t, h);
    const float *b = h[0], *a = h[1];
    size_t n = t->bytes / sizeof(float);
    double err = 0, scale = 1e-6;
    for (size_t i = 0; i < n; i++) {
        scale = fmax(scale, fabs((double)b[i]));
        err = fmax(err, fabs((double)a[i] - (double)b[i]));
        if (isnan(a[i]) != isnan(b[i])) err = INFINITY;
    }
    fprintf(stderr, "  %-40s rel %.2e (tol %.0e)\n", what, err / scale, tol);
    if (!(err / scale <= tol)) fail_msg("%s: rel %.3e > %.0e", what, err / scale, tol);
    free(h[0]);
    free(h[1]);
}

static void expect_doubles(const char *what, const twin_t *t, double tol)
{
    void *h[2];
    twin_get(t, h);
    const double *b = h[0], *a = h[1];
    for (size_t i = 0; i < t->bytes / sizeof(double); i++)
        if (!(fabs(a[i] - b[i]) <= tol * fmax(fabs(b[i]), 1e-6))) fail_msg("%s[%zu]: %.17g vs %.17g", what, i, a[i], b[i]);
    free(h[0]);
    free(h[1]);
}

/* The discrete outputs: equal bytes. */
static void expect_same(const char *what, const twin_t *t)
{
    void *h[2];
    twin_get(t, h);
    if (memcmp(h[0], h[1], t->bytes)) fail_msg("%s: the backends differ", what);
    fprintf(stderr, "  %-40s equal\n", what);
    free(h[0]);
    free(h[1]);
}

/* Runs `call` (using k for the backend) on both backends. */
#define ON_BOTH(call)                                          \
    do {                                                       \
        for (int k = 0; k < 2; k++) {                          \
            assert_int_equal((call), 0);                       \
            assert_int_equal(be[k]->sync(dev[k]), 0);          \
        }                                                      \
    } while (0)
#define P(t) ((float *)(t).p[k])

/* ---- the ops ---- */

static void test_gemm(void **state)
{
    (void)state;
    const int M = 37, N = 29, K = 53;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int beta1 = 0; beta1 < 2; beta1++) {
                twin_t A = twin_rand((int64_t)M * K, -1, 1), B = twin_rand((int64_t)K * N, -1, 1);
                twin_t C = twin_rand((int64_t)M * N, -1, 1);
                int lda = ta ? M : K, ldb = tb ? K : N;
                float beta = beta1 ? 1.0f : 0.0f;
                ON_BOTH(be[k]->gemm(dev[k], ta, tb, M, N, K, 0.5f, P(A), lda, P(B), ldb, beta, P(C), N));
                char what[64];
                snprintf(what, sizeof what, "gemm trans_a=%d trans_b=%d beta=%g", ta, tb, beta);
                expect_floats(what, &C, 1e-5);
                twin_free(&A);
                twin_free(&B);
                twin_free(&C);
            }
}

/* Conv / pool windows: same and valid, strides 1 and 2, odd sizes. */
static tower_window_t window(int h, int w, int c, int k, int s, int same)
{
    return test_window(h, w, c, k, s, same, 0);
}

static const struct {
    int h, w, c, k, s, same;
} windows[] = {{7, 9, 3, 3, 1, 1}, {8, 7, 2, 3, 2, 1}, {9, 9, 5, 3, 1, 0}, {10, 11, 3, 2, 2, 0}, {7, 7, 4, 3, 2, 0}};

static void test_im2col_col2im(void **state)
{
    (void)state;
    const int m = 3;
    for (size_t i = 0; i < sizeof windows / sizeof windows[0]; i++) {
        tower_window_t g = window(windows[i].h, windows[i].w, windows[i].c, windows[i].k, windows[i].s, windows[i].same);
        int64_t cols = (int64_t)m * g.out_h * g.out_w * g.col_k;
        twin_t x = twin_rand((int64_t)m * g.in_size, -1, 1), col = twin_new((size_t)cols * sizeof(float));
        twin_t dcol = twin_rand(cols, -1, 1), dx = twin_rand((int64_t)m * g.in_size, 5, 6); /* overwritten */
        ON_BOTH(be[k]->im2col(dev[k], g, P(x), m, P(col)));
        ON_BOTH(be[k]->col2im(dev[k], g, P(dcol), m, P(dx)));
        char what[64];
        snprintf(what, sizeof what, "im2col window %zu", i);
        expect_floats(what, &col, 0.0);
        snprintf(what, sizeof what, "col2im window %zu", i);
        expect_floats(what, &dx, 1e-6);
        twin_free(&x);
        twin_free(&col);
        twin_free(&dcol);
        twin_free(&dx);
    }
}

/* The convolutions: forward with bias and activation (and without a bias),
 * the data gradient, the weights' gradient overwritten and accumulated. */
static void test_conv(void **state)
{
    (void)state;
    const int m = 3, F = 7;
    static const enum psc_activation acts[] = {PSC_ACT_RELU, PSC_ACT_NONE, PSC_ACT_TANH, PSC_ACT_SIGMOID, PSC_ACT_RELU};
    for (size_t i = 0; i < sizeof windows / sizeof windows[0]; i++) {
        tower_window_t g = window(windows[i].h, windows[i].w, windows[i].c, windows[i].k, windows[i].s, windows[i].same);
        g.filters = F;
        int64_t nx = (int64_t)m * g.in_size, ny = (int64_t)m * g.out_h * g.out_w * F;
        twin_t x = twin_rand(nx, -1, 1), w = twin_rand((int64_t)g.col_k * F, -1, 1), b = twin_rand(F, -1, 1);
        twin_t y = twin_rand(ny, 5, 6), dy = twin_rand(ny, -1, 1), dx = twin_rand(nx, 5, 6); /* overwritten */
        twin_t dw = twin_rand((int64_t)g.col_k * F, -1, 1), dw2 = twin_rand((int64_t)g.col_k * F, -1, 1);
        twin_t col = twin_new((size_t)((int64_t)m * g.out_h * g.out_w * g.col_k) * sizeof(float));
        ON_BOTH(be[k]->conv_fwd(dev[k], g, P(x), m, P(w), i % 2 ? NULL : P(b), acts[i % 5], P(y), P(col)));
        ON_BOTH(be[k]->conv_bwd_data(dev[k], g, P(dy), m, P(w), P(dx), P(col)));
        ON_BOTH(be[k]->conv_bwd_weights(dev[k], g, P(x), P(dy), m, P(dw), 0, P(col)));
        ON_BOTH(be[k]->conv_bwd_weights(dev[k], g, P(x), P(dy), m, P(dw2), 1, P(col)));
        char what[64];
        snprintf(what, sizeof what, "conv_fwd window %zu act %d bias %d", i, (int)acts[i % 5], i % 2 == 0);
        expect_floats(what, &y, 1e-5);
        snprintf(what, sizeof what, "conv_bwd_data window %zu", i);
        expect_floats(what, &dx, 1e-5);
        snprintf(what, sizeof what, "conv_bwd_weights window %zu", i);
        expect_floats(what, &dw, 1e-5);
        snprintf(what, sizeof what, "conv_bwd_weights accumulate window %zu", i);
        expect_floats(what, &dw2, 1e-5);
        twin_free(&x), twin_free(&w), twin_free(&b), twin_free(&y), twin_free(&dy), twin_free(&dx);
        twin_free(&dw), twin_free(&dw2), twin_free(&col);
    }
}

static void test_maxpool(void **state)
{
    (void)state;
    const int n = 3;
    for (size_t i = 0; i < sizeof windows / sizeof windows[0]; i++) {
        tower_window_t g = window(windows[i].h, windows[i].w, windows[i].c, windows[i].k, windows[i].s, windows[i].same);
        g.col_k = 0;
        int64_t outs = (int64_t)n * g.out_h * g.out_w * g.in_c;
        twin_t x = twin_rand((int64_t)n * g.in_size, -1, 1), out = twin_new((size_t)outs * sizeof(float));
        twin_t arg = twin_new((size_t)outs * sizeof(int32_t)), dy = twin_rand(outs, -1, 1);
        twin_t dx = twin_rand((int64_t)n * g.in_size, 5, 6); /* overwritten */
        ON_BOTH(be[k]->maxpool_fwd(dev[k], g, P(x), n, P(out), (int32_t *)arg.p[k]));
        ON_BOTH(be[k]->maxpool_bwd(dev[k], g, P(dy), (const int32_t *)arg.p[k], n, P(dx)));
        char what[64];
        snprintf(what, sizeof what, "maxpool_fwd window %zu", i);
        expect_floats(what, &out, 0.0);
        snprintf(what, sizeof what, "maxpool_fwd argmax window %zu", i);
        expect_same(what, &arg);
        snprintf(what, sizeof what, "maxpool_bwd window %zu", i);
        expect_floats(what, &dx, 1e-6);
        twin_free(&x);
        twin_free(&out);
        twin_free(&arg);
        twin_free(&dy);
        twin_free(&dx);
    }
}

static void test_activations(void **state)
{
    (void)state;
    const int rows = 67, cols = 45;
    const char *names[] = {"linear", "relu", "tanh", "sigmoid"};
    enum psc_activation acts[] = {PSC_ACT_NONE, PSC_ACT_RELU, PSC_ACT_TANH, PSC_ACT_SIGMOID};
    for (int a = 0; a < 4; a++)
        for (int bias = 0; bias < 2; bias++) {
            twin_t y = twin_rand((int64_t)rows * cols, -3, 3), b = twin_rand(cols, -1, 1);
            twin_t dy = twin_rand((int64_t)rows * cols, -1, 1);
            ON_BOTH(be[k]->bias_act(dev[k], P(y), bias ? P(b) : NULL, rows, cols, acts[a]));
            ON_BOTH(be[k]->act_backward(dev[k], P(dy), P(y), (int64_t)rows * cols, acts[a]));
            char what[64];
            snprintf(what, sizeof what, "bias_act %s%s", names[a], bias ? " + bias" : "");
            expect_floats(what, &y, 1e-6);
            snprintf(what, sizeof what, "act_backward %s", names[a]);
            expect_floats(what, &dy, 1e-6);
            twin_free(&y);
            twin_free(&b);
            twin_free(&dy);
        }
}

static void test_bias_grad(void **state)
{
    (void)state;
    const int shapes[][2] = {{1, 7}, {67, 45}, {1031, 33}, {4099, 10}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int rows = shapes[i][0], cols = shapes[i][1];
        twin_t dy = twin_rand((int64_t)rows * cols, -1, 1), db = twin_rand(cols, 5, 6);
        ON_BOTH(be[k]->bias_grad(dev[k], P(db), P(dy), rows, cols));
        char what[64];
        snprintf(what, sizeof what, "bias_grad (%d, %d)", rows, cols);
        expect_floats(what, &db, 1e-5);
        twin_free(&dy);
        twin_free(&db);
    }
}

static void test_dropout_mul(void **state)
{
    (void)state;
    const int64_t count = 3001;
    const float rates[] = {0.1f, 0.5f, 0.9f};
    for (int r = 0; r < 3; r++) {
        twin_t x = twin_rand(count, -1, 1), mask = twin_new((size_t)count * sizeof(float));
        twin_t out = twin_new((size_t)count * sizeof(float)), dy = twin_rand(count, -1, 1);
        float scale = 1.0f / (1.0f - rates[r]);
        uint32_t threshold = psc_dropout_threshold(rates[r]);
        ON_BOTH(be[k]->dropout_fwd(dev[k], P(x), P(mask), P(out), count, 1234 + r, 3, 777, threshold, scale));
        ON_BOTH(be[k]->mul(dev[k], P(dy), P(mask), P(dy), count));
        char what[64];
        snprintf(what, sizeof what, "dropout_fwd mask rate %.1f", rates[r]);
        expect_same(what, &mask);
        snprintf(what, sizeof what, "dropout_fwd out rate %.1f", rates[r]);
        expect_floats(what, &out, 0.0);
        snprintf(what, sizeof what, "mul rate %.1f", rates[r]);
        expect_floats(what, &dy, 0.0);
        twin_free(&x);
        twin_free(&mask);
        twin_free(&out);
        twin_free(&dy);
    }
}

static void test_softmax_xent(void **state)
{
    (void)state;
    const int shapes[][2] = {{5, 3}, {67, 10}, {33, 45}, {9, 100}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int n = shapes[i][0], C = shapes[i][1];
        int32_t *y = psc_xcalloc((size_t)n, sizeof *y);
        for (int r = 0; r < n; r++) y[r] = (int32_t)psc_rng_below(&rng, (uint64_t)C);
        twin_t z = twin_rand((int64_t)n * C, -4, 4), labels = twin_new((size_t)n * sizeof(int32_t));
        twin_put(&labels, y);
        twin_t dz = twin_new((size_t)n * C * sizeof(float)), loss = twin_new((size_t)n * sizeof(double));
        twin_t hit = twin_new((size_t)n * sizeof(int32_t));
        ON_BOTH(be[k]->softmax_xent(dev[k], P(z), (const int32_t *)labels.p[k], n, C, P(dz), (double *)loss.p[k],
                                    (int32_t *)hit.p[k]));
        char what[64];
        snprintf(what, sizeof what, "softmax_xent (%d, %d) dlogits", n, C);
        expect_floats(what, &dz, 1e-6);
        expect_doubles("softmax_xent row_loss", &loss, 1e-9);
        expect_same("softmax_xent row_hit", &hit);
        twin_free(&z);
        twin_free(&labels);
        twin_free(&dz);
        twin_free(&loss);
        twin_free(&hit);
        free(y);
    }
}

static void test_accumulate(void **state)
{
    (void)state;
    const int64_t count = 2053;
    const float as[] = {0.0f, 1.0f, 0.25f};
    for (int i = 0; i < 3; i++)
        for (int with_src = 0; with_src < 2; with_src++) {
            twin_t dst = twin_rand(count, -1, 1), src = twin_rand(count, -1, 1);
            ON_BOTH(be[k]->accumulate(dev[k], P(dst), as[i], with_src ? P(src) : NULL, 0.75f, count));
            char what[64];
            snprintf(what, sizeof what, "accumulate a=%g%s", as[i], with_src ? " + 0.75 src" : "");
            expect_floats(what, &dst, 1e-6);
            twin_free(&dst);
            twin_free(&src);
        }
}

/* ---- recommendation (CTR) ops ---- */

/* Random bags: n examples x nslots slots of 0..max_bag pairs into nrows rows. */
static int32_t *random_bags(int n, int nslots, int max_bag, int nrows, int32_t **idx_out, float **w_out)
{
    int64_t bags = (int64_t)n * nslots;
    int32_t *off = psc_xcalloc((size_t)bags + 1, sizeof *off);
    int32_t *idx = psc_xcalloc((size_t)(bags * max_bag + 1), sizeof *idx);
    float *w = psc_xcalloc((size_t)(bags * max_bag + 1), sizeof *w);
    for (int64_t b = 0; b < bags; b++) {
        int m = (int)psc_rng_below(&rng, (uint64_t)max_bag + 1);
        off[b + 1] = off[b] + m;
        for (int k = off[b]; k < off[b + 1]; k++) {
            idx[k] = (int32_t)psc_rng_below(&rng, (uint64_t)nrows); /* ids repeat across bags */
            w[k] = (float)(0.25 + psc_rng_uniform(&rng));
        }
    }
    *idx_out = idx;
    *w_out = w;
    return off;
}

/* bag_fwd into a strided output (slots 2..4 of 6, at a column offset, other
 * columns untouched), then bag_bwd accumulating onto random row gradients. */
static void test_bags(void **state)
{
    (void)state;
    const int shapes[][4] = {{5, 6, 3, 4}, {67, 6, 16, 37}, {600, 6, 1, 13}}; /* n, nslots, dim, nrows */
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int n = shapes[s][0], nslots = shapes[s][1], dim = shapes[s][2], nrows = shapes[s][3];
        int slot0 = 2, nbags = 3, col = 5, ldo = col + nbags * dim + 7;
        int32_t *hidx;
        float *hw;
        int32_t *hoff = random_bags(n, nslots, 4, nrows, &hidx, &hw);
        int64_t nnz = hoff[(int64_t)n * nslots];
        twin_t off = twin_new(((size_t)n * nslots + 1) * sizeof(int32_t)), idx = twin_new((size_t)(nnz + 1) * sizeof(int32_t));
        twin_t w = twin_new((size_t)(nnz + 1) * sizeof(float));
        twin_put(&off, hoff);
        twin_put(&idx, hidx);
        twin_put(&w, hw);
        twin_t rows = twin_rand((int64_t)nrows * dim, -1, 1), out = twin_rand((int64_t)n * ldo, 5, 6);
        twin_t dout = twin_rand((int64_t)n * ldo, -1, 1), drows = twin_rand((int64_t)nrows * dim, -1, 1);
        ON_BOTH(be[k]->bag_fwd(dev[k], P(rows), dim, (const int32_t *)off.p[k], (const int32_t *)idx.p[k], P(w), n,
                               nslots, slot0, nbags, P(out) + col, ldo));
        ON_BOTH(be[k]->bag_bwd(dev[k], P(drows), dim, (const int32_t *)off.p[k], (const int32_t *)idx.p[k], P(w), n,
                               nslots, slot0, nbags, P(dout) + col, ldo));
        char what[64];
        snprintf(what, sizeof what, "bag_fwd (%d, %d of %d, dim %d)", n, nbags, nslots, dim);
        expect_floats(what, &out, 1e-6);
        snprintf(what, sizeof what, "bag_bwd (%d rows, dim %d)", nrows, dim);
        expect_floats(what, &drows, 1e-5); /* CUDA: atomics in any order */
        /* the CPU's own result, against a sum here in double */
        void *h[2];
        twin_get(&out, h);
        const float *o = h[0], *rw;
        void *hr[2];
        twin_get(&rows, hr);
        rw = hr[0];
        for (int i = 0; i < n; i++)
            for (int j = 0; j < nbags; j++)
                for (int c = 0; c < dim; c++) {
                    double want = 0;
                    int64_t b = (int64_t)i * nslots + slot0 + j;
                    for (int q = hoff[b]; q < hoff[b + 1]; q++) want += (double)hw[q] * rw[hidx[q] * dim + c];
                    assert_float_equal(o[(int64_t)i * ldo + col + j * dim + c], want, 1e-5);
                }
        for (int i = 0; i < n; i++) assert_true(o[(int64_t)i * ldo] >= 5.0f); /* columns before col: untouched */
        free(h[0]), free(h[1]), free(hr[0]), free(hr[1]);
        twin_free(&off), twin_free(&idx), twin_free(&w), twin_free(&rows), twin_free(&out), twin_free(&dout);
        twin_free(&drows);
        free(hoff), free(hidx), free(hw);
    }
}

/* The interaction and its adjoint, with and without a column offset, P from 2
 * to 27 (DLRM's Criteo model: 26 tables + the bottom output). */
static void test_interaction(void **state)
{
    (void)state;
    const int shapes[][3] = {{7, 2, 3}, {33, 5, 4}, {9, 27, 16}, {515, 4, 2}}; /* n, P, D */
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int n = shapes[s][0], P = shapes[s][1], D = shapes[s][2], npairs = P * (P - 1) / 2;
        int col = (int)(s % 2) * D, ldo = col + npairs + 3;
        twin_t v = twin_rand((int64_t)n * P * D, -1, 1), out = twin_rand((int64_t)n * ldo, 5, 6);
        twin_t dout = twin_rand((int64_t)n * ldo, -1, 1), dv = twin_rand((int64_t)n * P * D, 5, 6); /* overwritten */
        ON_BOTH(be[k]->interact_fwd(dev[k], P(v), n, P, D, P(out) + col, ldo));
        ON_BOTH(be[k]->interact_bwd(dev[k], P(v), P(dout) + col, ldo, n, P, D, P(dv)));
        char what[64];
        snprintf(what, sizeof what, "interact_fwd (%d, P %d, D %d)", n, P, D);
        expect_floats(what, &out, 1e-5);
        snprintf(what, sizeof what, "interact_bwd (%d, P %d, D %d)", n, P, D);
        expect_floats(what, &dv, 1e-5);
        /* the pair order, on the CPU's result: pair q = (a, b) row by row */
        void *h[2], *hv[2];
        twin_get(&out, h);
        twin_get(&v, hv);
        const float *o = h[0], *x = hv[0];
        for (int i = 0; i < n; i += 5) {
            int q = 0;
            for (int a = 0; a < P; a++)
                for (int b = a + 1; b < P; b++, q++) {
                    double dot = 0;
                    for (int c = 0; c < D; c++) dot += (double)x[((int64_t)i * P + a) * D + c] * x[((int64_t)i * P + b) * D + c];
                    assert_float_equal(o[(int64_t)i * ldo + col + q], dot, 1e-5);
                }
        }
        free(h[0]), free(h[1]), free(hv[0]), free(hv[1]);
        twin_free(&v), twin_free(&out), twin_free(&dout), twin_free(&dv);
    }
}

static void test_sigmoid_xent(void **state)
{
    (void)state;
    const int n = 301;
    float *z = psc_xcalloc(n, sizeof *z), *y = psc_xcalloc(n, sizeof *y);
    for (int i = 0; i < n; i++) {
        z[i] = (float)(i < 10 ? (i - 5) * 12.0 : 8 * psc_rng_uniform(&rng) - 4); /* -60 .. 48 too */
        y[i] = i % 3 == 2 ? (float)psc_rng_uniform(&rng) : (float)(i % 3); /* 0, 1 and soft labels */
    }
    twin_t logits = twin_new(n * sizeof(float)), labels = twin_new(n * sizeof(float));
    twin_put(&logits, z);
    twin_put(&labels, y);
    twin_t dz = twin_new(n * sizeof(float)), loss = twin_new(n * sizeof(double));
    ON_BOTH(be[k]->sigmoid_xent(dev[k], P(logits), P(labels), n, P(dz), (double *)loss.p[k]));
    expect_floats("sigmoid_xent dlogits", &dz, 1e-6);
    expect_doubles("sigmoid_xent row_loss", &loss, 1e-9);
    void *h[2];
    twin_get(&loss, h);
    for (int i = 0; i < n; i++) { /* the CPU's against log(1 + e^z) - z y, written another way */
        double zi = z[i], want = zi > 0 ? zi + log1p(exp(-zi)) - zi * y[i] : log1p(exp(zi)) - zi * y[i];
        assert_float_equal(((double *)h[0])[i], want, 1e-12 * fmax(1, fabs(want)));
    }
    free(h[0]), free(h[1]);
    ON_BOTH(be[k]->sigmoid_xent(dev[k], P(logits), P(labels), n, NULL, (double *)loss.p[k])); /* no dlogits */
    expect_doubles("sigmoid_xent row_loss, no dlogits", &loss, 1e-9);
    twin_free(&logits), twin_free(&labels), twin_free(&dz), twin_free(&loss);
    free(z), free(y);
}

static void test_copy2d(void **state)
{
    (void)state;
    const int rows = 67, cols = 13, lds = 20, ldd = 31;
    for (int add = 0; add < 2; add++) {
        twin_t src = twin_rand((int64_t)rows * lds, -1, 1), dst = twin_rand((int64_t)rows * ldd, -1, 1);
        ON_BOTH(be[k]->copy2d(dev[k], P(dst) + 3, ldd, P(src) + 2, lds, rows, cols, add));
        expect_floats(add ? "copy2d add" : "copy2d", &dst, 0.0);
        twin_free(&src), twin_free(&dst);
    }
}

int main(void)
{
    const tower_ops_t *cuda = tower_backend_find("cuda");
    if (!cuda || cuda->device_count() == 0) {
        printf("SKIP: no CUDA device%s\n", cuda ? "" : " (this build has no CUDA backend)");
        return 77;
    }
    be[0] = tower_cpu_ops.backend;
    be[1] = cuda->backend;
    char err[256] = "";
    for (int k = 0; k < 2; k++)
        if (be[k]->open(0, 128, &dev[k], err, sizeof err) || be[k]->select(dev[k])) {
            fprintf(stderr, "cannot open %s device 0: %s\n", be[k]->name, err);
            return 1;
        }
    psc_rng_seed(&rng, 20261125);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm),        cmocka_unit_test(test_im2col_col2im), cmocka_unit_test(test_conv),
        cmocka_unit_test(test_maxpool),
        cmocka_unit_test(test_activations), cmocka_unit_test(test_bias_grad),     cmocka_unit_test(test_dropout_mul),
        cmocka_unit_test(test_softmax_xent), cmocka_unit_test(test_accumulate),   cmocka_unit_test(test_bags),
        cmocka_unit_test(test_interaction), cmocka_unit_test(test_sigmoid_xent),  cmocka_unit_test(test_copy2d),
        cmocka_unit_test(test_emu_no_mistakes), /* a real GPU: nothing emulated, nothing to see */
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    for (int k = 0; k < 2; k++) be[k]->close(dev[k]);
    return rc;
}
