/* test_tower_conv — the CPU backend's convolutions (oneDNN, worker/tower/tower_cpu_dnnl.c)
 * and GEMM against references in double, through the CPU kernel table.
 *
 * conv_fwd (bias or none; linear, relu, tanh, sigmoid), conv_bwd_data and
 * conv_bwd_weights (overwriting and accumulating) on windows same and valid,
 * strides 1 and 2, odd sizes, one input channel and several, examples 1 and 5,
 * each against a direct convolution summed in double: rel = max |a - ref| /
 * max(max |ref|, 1e-6) <= 1e-5. The same ops against the table's own im2col
 * (+ GEMM, col2im), which the CUDA backend composes them from. More shapes than
 * the primitive cache holds, then the first again (an evicted entry is rebuilt
 * right). All of it on 1 and on 2 threads (tower_cpu_set_threads). The GEMM
 * (OpenBLAS below its threading threshold, oneDNN above) against double sums,
 * every transpose, beta 0 over NaN (C not read) and beta 1.
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

static const tower_backend_ops_t *be;
static tower_dev_t *dev;
static psc_rng_t rng;

static float *rand_floats(int64_t n, float lo, float hi)
{
    float *p = psc_xcalloc((size_t)(n ? n : 1), sizeof *p);
    for (int64_t i = 0; i < n; i++) p[i] = lo + (hi - lo) * (float)psc_rng_uniform(&rng);
    return p;
}

/* Fails unless a (n) is within tol of ref (n), relative to ref's largest. */
static void expect_close(const char *what, const float *a, const double *ref, int64_t n, double tol)
{
    double err = 0, scale = 1e-6;
    for (int64_t i = 0; i < n; i++) {
        scale = fmax(scale, fabs(ref[i]));
        err = fmax(err, fabs((double)a[i] - ref[i]));
        if (isnan(a[i])) err = INFINITY;
    }
    if (!(err / scale <= tol)) fail_msg("%s: rel %.3e > %.0e", what, err / scale, tol);
}


/* Calls fn(x index, y index, w index) for every term of the convolution. */
#define FOR_TERMS(g, m, body)                                                                                    \
    for (int e = 0; e < (m); e++)                                                                                \
        for (int oy = 0; oy < (g).out_h; oy++)                                                                   \
            for (int ox = 0; ox < (g).out_w; ox++)                                                               \
                for (int ky = 0; ky < (g).kh; ky++)                                                              \
                    for (int kx = 0; kx < (g).kw; kx++) {                                                        \
                        int iy = oy * (g).sh - (g).pad_top + ky, ix = ox * (g).sw - (g).pad_left + kx;           \
                        if (iy < 0 || iy >= (g).in_h || ix < 0 || ix >= (g).in_w) continue;                      \
                        for (int c = 0; c < (g).in_c; c++)                                                       \
                            for (int f = 0; f < (g).filters; f++) {                                              \
                                int64_t xi = (((int64_t)e * (g).in_h + iy) * (g).in_w + ix) * (g).in_c + c;      \
                                int64_t yi = (((int64_t)e * (g).out_h + oy) * (g).out_w + ox) * (g).filters + f; \
                                int64_t wi = (((int64_t)ky * (g).kw + kx) * (g).in_c + c) * (g).filters + f;     \
                                body;                                                                            \
                            }                                                                                    \
                    }

static double act_ref(double v, enum psc_activation act)
{
    switch (act) {
    case PSC_ACT_RELU: return v > 0 ? v : 0;
    case PSC_ACT_TANH: return tanh(v);
    case PSC_ACT_SIGMOID: return 1 / (1 + exp(-v));
    case PSC_ACT_NONE: break;
    }
    return v;
}

/* One window: every op against the double references and the im2col composition. */
static void check_window(tower_window_t g, int m, int with_bias, enum psc_activation act, const char *what)
{
    int F = g.filters;
    int64_t nx = (int64_t)m * g.in_size, ny = (int64_t)m * g.out_h * g.out_w * F, nw = (int64_t)g.col_k * F;
    int64_t rows = (int64_t)m * g.out_h * g.out_w;
    float *x = rand_floats(nx, -1, 1), *w = rand_floats(nw, -1, 1), *b = with_bias ? rand_floats(F, -1, 1) : NULL;
    float *dy = rand_floats(ny, -1, 1), *y = rand_floats(ny, 7, 8), *dx = rand_floats(nx, 7, 8);
    float *dw = rand_floats(nw, -1, 1), *dw0 = psc_xmalloc((size_t)nw * sizeof *dw0);
    memcpy(dw0, dw, (size_t)nw * sizeof *dw0);
    double *yr = psc_xcalloc((size_t)ny, sizeof *yr), *dxr = psc_xcalloc((size_t)nx, sizeof *dxr);
    double *dwr = psc_xcalloc((size_t)nw, sizeof *dwr);
    FOR_TERMS(g, m, {
        yr[yi] += (double)x[xi] * w[wi];
        dxr[xi] += (double)dy[yi] * w[wi];
        dwr[wi] += (double)x[xi] * dy[yi];
    });
    for (int64_t i = 0; i < ny; i++) yr[i] = act_ref(yr[i] + (b ? b[i % F] : 0.0), act);
    char msg[160];

    assert_int_equal(be->conv_fwd(dev, g, x, m, w, b, act, y, NULL), 0);
    snprintf(msg, sizeof msg, "%s conv_fwd", what);
    expect_close(msg, y, yr, ny, 1e-5);
    assert_int_equal(be->conv_bwd_data(dev, g, dy, m, w, dx, NULL), 0);
    snprintf(msg, sizeof msg, "%s conv_bwd_data", what);
    expect_close(msg, dx, dxr, nx, 1e-5);
    assert_int_equal(be->conv_bwd_weights(dev, g, x, dy, m, dw, 1, NULL), 0); /* accumulates onto dw0 */
    for (int64_t i = 0; i < nw; i++) dwr[i] += dw0[i];
    snprintf(msg, sizeof msg, "%s conv_bwd_weights accumulate", what);
    expect_close(msg, dw, dwr, nw, 1e-5);
    for (int64_t i = 0; i < nw; i++) dwr[i] -= dw0[i];
    assert_int_equal(be->conv_bwd_weights(dev, g, x, dy, m, dw, 0, NULL), 0); /* overwrites */
    snprintf(msg, sizeof msg, "%s conv_bwd_weights", what);
    expect_close(msg, dw, dwr, nw, 1e-5);

    /* the table's im2col composition, as the CUDA backend runs it */
    float *col = psc_xcalloc((size_t)(rows * g.col_k), sizeof *col);
    float *y2 = rand_floats(ny, 7, 8);
    double *yd = psc_xcalloc((size_t)ny, sizeof *yd);
    assert_int_equal(be->im2col(dev, g, x, m, col), 0);
    assert_int_equal(be->gemm(dev, 0, 0, (int)rows, F, g.col_k, 1.0f, col, g.col_k, w, F, 0.0f, y2, F), 0);
    assert_int_equal(be->bias_act(dev, y2, b, rows, F, act), 0);
    for (int64_t i = 0; i < ny; i++) yd[i] = y2[i];
    snprintf(msg, sizeof msg, "%s conv_fwd against im2col + gemm", what);
    expect_close(msg, y, yd, ny, 1e-5);
    free(col), free(y2), free(yd);

    free(x), free(w), free(b), free(dy), free(y), free(dx), free(dw), free(dw0), free(yr), free(dxr), free(dwr);
}

static const struct {
    int h, w, c, k, s, same, f;
} windows[] = {{7, 9, 3, 3, 1, 1, 5}, {8, 7, 2, 3, 2, 1, 4},    {9, 9, 5, 3, 1, 0, 16},    {10, 11, 3, 2, 2, 0, 3},
               {7, 7, 4, 3, 2, 0, 1}, {28, 28, 1, 3, 1, 0, 32}, {13, 13, 32, 3, 1, 0, 64}, {6, 5, 17, 1, 1, 0, 9},
               {8, 8, 3, 3, 2, 0, 2}, {12, 12, 16, 5, 1, 1, 16}};

static void test_conv_ops(void **state)
{
    (void)state;
    static const enum psc_activation acts[] = {PSC_ACT_NONE, PSC_ACT_RELU, PSC_ACT_TANH, PSC_ACT_SIGMOID};
    int n = (int)(sizeof windows / sizeof windows[0]);
    for (int threads = 1; threads <= 2; threads++) {
        tower_cpu_set_threads(threads);
        for (int i = 0; i <= n; i++) { /* i == n: the first window again, after the cache turned over */
            int j = i % n;
            tower_window_t g = test_window(windows[j].h, windows[j].w, windows[j].c, windows[j].k, windows[j].s,
                                      windows[j].same, windows[j].f);
            for (int v = 0; v < 4; v++) {
                int m = v % 2 ? 5 : 1;
                char what[96];
                snprintf(what, sizeof what, "threads %d window %d m %d act %d bias %d", threads, j, m, (int)acts[v],
                         v != 2);
                check_window(g, m, v != 2, acts[v], what);
            }
        }
    }
    tower_cpu_set_threads(1);
}

static void test_gemm(void **state)
{
    (void)state;
    /* below and above OpenBLAS's threading threshold (65536 * 4 multiply-adds) */
    static const int shapes[][3] = {{37, 29, 53}, {64, 10, 128}, {130, 257, 65}, {64, 128, 1600}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 8; t++) {
            int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2], ta = t & 1, tb = (t >> 1) & 1, beta1 = t >> 2;
            float *A = rand_floats((int64_t)M * K, -1, 1), *B = rand_floats((int64_t)K * N, -1, 1);
            float *C = rand_floats((int64_t)M * N, -1, 1);
            double *ref = psc_xcalloc((size_t)M * N, sizeof *ref);
            int lda = ta ? M : K, ldb = tb ? K : N;
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++) {
                    double sum = beta1 ? C[(int64_t)i * N + j] : 0.0;
                    for (int k = 0; k < K; k++)
                        sum += 0.5 * (double)(ta ? A[(int64_t)k * lda + i] : A[(int64_t)i * lda + k]) *
                               (double)(tb ? B[(int64_t)j * ldb + k] : B[(int64_t)k * ldb + j]);
                    ref[(int64_t)i * N + j] = sum;
                }
            if (!beta1)
                for (int64_t i = 0; i < (int64_t)M * N; i++) C[i] = NAN; /* beta 0: C is not read */
            assert_int_equal(be->gemm(dev, ta, tb, M, N, K, 0.5f, A, lda, B, ldb, beta1 ? 1.0f : 0.0f, C, N), 0);
            char what[96];
            snprintf(what, sizeof what, "gemm %dx%dx%d trans_a %d trans_b %d beta %d", M, N, K, ta, tb, beta1);
            expect_close(what, C, ref, (int64_t)M * N, 1e-5);
            free(A), free(B), free(C), free(ref);
        }
}

int main(void)
{
    be = tower_cpu_ops.backend;
    char err[256] = "";
    if (be->open(0, 128, &dev, err, sizeof err) || be->select(dev)) {
        fprintf(stderr, "cannot open the CPU backend: %s\n", err);
        return 1;
    }
    psc_rng_seed(&rng, 20261128);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv_ops),
        cmocka_unit_test(test_gemm),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    be->close(dev);
    return rc;
}
