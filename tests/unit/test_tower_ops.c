/* test_tower_ops — every op of the "cuda" backend's kernel table
 * (tower_walk.h) against the CPU backend's, the reference, as ggml's
 * test-backend-ops does: the same random inputs uploaded to both, each op run
 * on both, every output downloaded and compared. Skipped (exit 77) when the
 * build has no CUDA backend or no GPU is visible.
 *
 * Error measure, per output (b = CPU, a = CUDA):
 *     rel(a, b) = max_i |a_i - b_i| / max(max_i |b_i|, 1e-6)
 * with a tolerance per op: GEMMs and sums 1e-5 (summation order), elementwise
 * ops 1e-6 (a few ulps of tanhf / expf), the loss in double 1e-9; the discrete
 * outputs (max-pool argmax, dropout masks, the loss's hits) must be equal.
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
    tower_window_t g = {.in_h = h, .in_w = w, .in_c = c, .kh = k, .kw = k, .sh = s, .sw = s};
    g.out_h = same ? (h + s - 1) / s : (h - k) / s + 1;
    g.out_w = same ? (w + s - 1) / s : (w - k) / s + 1;
    g.pad_top = same ? PSC_MAX((g.out_h - 1) * s + k - h, 0) / 2 : 0;
    g.pad_left = same ? PSC_MAX((g.out_w - 1) * s + k - w, 0) / 2 : 0;
    g.col_k = k * k * c;
    g.in_size = h * w * c;
    return g;
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

/* Embedding rows: tested once both backends have them (NULL until then). */
static void test_rows(void **state)
{
    (void)state;
    if (!be[0]->gather_rows || !be[1]->gather_rows || !be[0]->scatter_add_rows || !be[1]->scatter_add_rows) {
        fprintf(stderr, "  gather_rows / scatter_add_rows: not in both tables yet\n");
        return;
    }
    const int rows = 50, cols = 17, n = 23;
    int32_t idx[23];
    for (int i = 0; i < n; i++) idx[i] = (int32_t)psc_rng_below(&rng, rows);
    twin_t table = twin_rand((int64_t)rows * cols, -1, 1), ix = twin_new(sizeof idx);
    twin_put(&ix, idx);
    twin_t out = twin_new((size_t)n * cols * sizeof(float)), src = twin_rand((int64_t)n * cols, -1, 1);
    ON_BOTH(be[k]->gather_rows(dev[k], P(table), cols, (const int32_t *)ix.p[k], n, P(out)));
    ON_BOTH(be[k]->scatter_add_rows(dev[k], P(table), cols, (const int32_t *)ix.p[k], n, P(src)));
    expect_floats("gather_rows", &out, 0.0);
    expect_floats("scatter_add_rows", &table, 1e-6);
    twin_free(&table);
    twin_free(&ix);
    twin_free(&out);
    twin_free(&src);
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
        cmocka_unit_test(test_gemm),        cmocka_unit_test(test_im2col_col2im), cmocka_unit_test(test_maxpool),
        cmocka_unit_test(test_activations), cmocka_unit_test(test_bias_grad),     cmocka_unit_test(test_dropout_mul),
        cmocka_unit_test(test_softmax_xent), cmocka_unit_test(test_accumulate),   cmocka_unit_test(test_rows),
        cmocka_unit_test(test_emu_no_mistakes), /* a real GPU: nothing emulated, nothing to see */
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    for (int k = 0; k < 2; k++) be[k]->close(dev[k]);
    return rc;
}
