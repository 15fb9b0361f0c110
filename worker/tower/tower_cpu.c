/* tower_cpu.c — the CPU backend: oneDNN convolutions and large GEMMs
 * (tower_cpu_dnnl.c), OpenBLAS small GEMMs and plain C loops behind the walk's
 * kernel table (tower_walk.h). This is the reference backend the others are
 * tested against (tests/unit/test_tower_ops.c: op by op; test_tower_cuda.c:
 * whole steps), so its loops favour being obviously right over being clever;
 * its im2col / col2im are the reference the convolutions are tested against
 * (tests/unit/test_tower_conv.c). The one exception, the CTR embedding bags
 * and interaction (most of a recommendation step's CPU when run one column at
 * a time), work in fixed blocks the compiler vectorizes, with the same sums in
 * the same order: test_tower_cpu.c holds them to the plain loops bit for bit.
 *
 * Memory: "device" memory is aligned host memory, upload / download are
 * memcpy, and every kernel runs when called, so sync has nothing to wait for.
 * There is one device: copy_peer is NULL (the walk reads every tower's
 * gradients in place); each tower's context (open) holds its oneDNN stream and
 * primitives. The convolutions need no im2col scratch (col_budget 0).
 *
 * Threads: tower_cpu_set_threads(n) sets both OpenBLAS's and oneDNN's. GEMMs
 * up to OpenBLAS's own threading threshold run there, on the calling thread;
 * larger ones on oneDNN, so that one pool of threads (OpenMP's, which sleeps
 * when idle) serves a step.
 *
 * Layout (the walk's): activations (n, h, w, c) row-major (NHWC); a conv kernel
 * is a (kh*kw*in_c, filters) matrix whose rows match an im2col row's (ky, kx, c)
 * order.
 */
#include "tower.h"
#include "tower_walk.h"

#include "tower_cpu_dnnl.h"

#include "psc.h"
#include "rng.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* GEMMs of more multiply-adds than this run on oneDNN: OpenBLAS runs up to
 * 65536 * 4 (its GEMM_MULTITHREAD_THRESHOLD) on the calling thread alone, where
 * a small GEMM is cheapest, so its own thread pool never wakes. */
#define GEMM_DNNL_MIN ((int64_t)65536 * 4)

/* A tower's context: its oneDNN stream and primitives. */
struct tower_dev {
    tower_cpu_dnnl_t *dnnl;
};

/* ---- context and memory ---- */

static int cpu_open(int device, int max_cols, tower_dev_t **out, char *err, size_t errlen)
{
    (void)device, (void)max_cols;
    tower_dev_t *d = psc_xcalloc(1, sizeof *d);
    int rc = tower_cpu_dnnl_create(&d->dnnl, err, errlen);
    if (rc) {
        free(d);
        return rc;
    }
    *out = d;
    return 0;
}

static void cpu_close(tower_dev_t *d)
{
    if (!d) return;
    tower_cpu_dnnl_destroy(d->dnnl);
    free(d);
}
static int cpu_select(tower_dev_t *d) { return (void)d, 0; }
static int cpu_sync(tower_dev_t *d) { return (void)d, 0; }

static int cpu_alloc(tower_dev_t *d, size_t bytes, void **out)
{
    (void)d;
    *out = psc_xaligned(bytes ? bytes : 1);
    memset(*out, 0, bytes);
    return 0;
}

static void cpu_free(tower_dev_t *d, void *p) { (void)d, free(p); }

static int cpu_copy(tower_dev_t *d, void *dst, const void *src, size_t bytes)
{
    (void)d;
    if (bytes) memcpy(dst, src, bytes);
    return 0;
}

/* ---- kernels ---- */

static int cpu_gemm(tower_dev_t *d, int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                    int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    (void)d;
    if ((int64_t)M * N * K > GEMM_DNNL_MIN)
        return tower_cpu_dnnl_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N, K,
                alpha, A, lda, B, ldb, beta, C, ldc);
    return 0;
}

static int cpu_bias_act(tower_dev_t *d, float *y, const float *b, int64_t rows, int cols, enum psc_activation act)
{
    (void)d;
    for (int64_t r = 0; r < rows; r++) {
        float *restrict row = y + r * cols;
        if (b)
            for (int j = 0; j < cols; j++) row[j] += b[j];
        switch (act) {
        case PSC_ACT_NONE:
            break;
        case PSC_ACT_RELU:
            for (int j = 0; j < cols; j++) row[j] = row[j] > 0.0f ? row[j] : 0.0f;
            break;
        case PSC_ACT_TANH:
            for (int j = 0; j < cols; j++) row[j] = tanhf(row[j]);
            break;
        case PSC_ACT_SIGMOID:
            for (int j = 0; j < cols; j++) row[j] = 1.0f / (1.0f + expf(-row[j]));
            break;
        }
    }
    return 0;
}

static int cpu_act_backward(tower_dev_t *d, float *dy, const float *y, int64_t count, enum psc_activation act)
{
    (void)d;
    switch (act) {
    case PSC_ACT_NONE:
        break;
    case PSC_ACT_RELU:
        for (int64_t j = 0; j < count; j++) dy[j] = y[j] > 0.0f ? dy[j] : 0.0f;
        break;
    case PSC_ACT_TANH:
        for (int64_t j = 0; j < count; j++) dy[j] *= 1.0f - y[j] * y[j];
        break;
    case PSC_ACT_SIGMOID:
        for (int64_t j = 0; j < count; j++) dy[j] *= y[j] * (1.0f - y[j]);
        break;
    }
    return 0;
}

static int cpu_bias_grad(tower_dev_t *d, float *db, const float *dy, int64_t rows, int cols)
{
    (void)d;
    memset(db, 0, (size_t)cols * sizeof *db);
    for (int64_t r = 0; r < rows; r++) {
        const float *restrict row = dy + r * cols;
        float *restrict sum = db;
        for (int j = 0; j < cols; j++) sum[j] += row[j];
    }
    return 0;
}

static int cpu_im2col(tower_dev_t *d, tower_window_t g, const float *x, int m, float *col)
{
    (void)d;
    int C = g.in_c;
    size_t cbytes = (size_t)C * sizeof(float);
    for (int e = 0; e < m; e++) {
        const float *xe = x + (int64_t)e * g.in_size; /* (in_h, in_w, in_c) */
        for (int oy = 0; oy < g.out_h; oy++)
            for (int ox = 0; ox < g.out_w; ox++) {
                float *row = col + (((int64_t)e * g.out_h + oy) * g.out_w + ox) * g.col_k; /* (kh, kw, C) */
                for (int ky = 0; ky < g.kh; ky++) {
                    int iy = oy * g.sh - g.pad_top + ky;
                    float *dst = row + (int64_t)ky * g.kw * C;
                    if (iy < 0 || iy >= g.in_h) {
                        memset(dst, 0, (size_t)g.kw * cbytes);
                        continue;
                    }
                    for (int kx = 0; kx < g.kw; kx++) {
                        int ix = ox * g.sw - g.pad_left + kx;
                        if (ix < 0 || ix >= g.in_w)
                            memset(dst + kx * C, 0, cbytes);
                        else
                            memcpy(dst + kx * C, xe + ((int64_t)iy * g.in_w + ix) * C, cbytes);
                    }
                }
            }
    }
    return 0;
}

/* Scatters each col row back onto its window, in (oy, ox) order. */
static int cpu_col2im(tower_dev_t *d, tower_window_t g, const float *col, int m, float *dx)
{
    (void)d;
    int C = g.in_c;
    memset(dx, 0, (size_t)m * (size_t)g.in_size * sizeof *dx);
    for (int e = 0; e < m; e++) {
        float *dxe = dx + (int64_t)e * g.in_size;
        for (int oy = 0; oy < g.out_h; oy++)
            for (int ox = 0; ox < g.out_w; ox++) {
                const float *row = col + (((int64_t)e * g.out_h + oy) * g.out_w + ox) * g.col_k;
                for (int ky = 0; ky < g.kh; ky++) {
                    int iy = oy * g.sh - g.pad_top + ky;
                    if (iy < 0 || iy >= g.in_h) continue;
                    for (int kx = 0; kx < g.kw; kx++) {
                        int ix = ox * g.sw - g.pad_left + kx;
                        if (ix < 0 || ix >= g.in_w) continue;
                        const float *src = row + ((int64_t)ky * g.kw + kx) * C;
                        float *dst = dxe + ((int64_t)iy * g.in_w + ix) * C;
                        for (int c = 0; c < C; c++) dst[c] += src[c];
                    }
                }
            }
    }
    return 0;
}

/* One output position's channels at once (tower_window_argmax's result: the
 * first maximum in (ky, kx) order wins, for every channel c). */
static void maxpool_position(tower_window_t g, const float *xe, int oy, int ox, float *restrict out,
                             int32_t *restrict argmax)
{
    int C = g.in_c, first = 1;
    for (int ky = 0; ky < g.kh; ky++) {
        int iy = oy * g.sh - g.pad_top + ky;
        if (iy < 0 || iy >= g.in_h) continue;
        for (int kx = 0; kx < g.kw; kx++) {
            int ix = ox * g.sw - g.pad_left + kx;
            if (ix < 0 || ix >= g.in_w) continue;
            int32_t base = (iy * g.in_w + ix) * C;
            const float *restrict xi = xe + base;
            if (first) {
                for (int c = 0; c < C; c++) out[c] = xi[c], argmax[c] = base + c;
                first = 0;
                continue;
            }
            for (int c = 0; c < C; c++) { /* branch-free, as a mask, so that it vectorizes */
                float v = xi[c], o = out[c];
                int32_t more = -(int32_t)(v > o);
                out[c] = v > o ? v : o;
                argmax[c] = (argmax[c] & ~more) | ((base + c) & more);
            }
        }
    }
    if (first) /* a window without inputs (never: model_spec.c): as tower_window_argmax */
        for (int c = 0; c < C; c++) out[c] = 0.0f, argmax[c] = -1;
}

static int cpu_maxpool_fwd(tower_dev_t *d, tower_window_t g, const float *x, int n, float *out, int32_t *argmax)
{
    (void)d;
    int64_t o = 0; /* (e, oy, ox, 0) */
    for (int e = 0; e < n; e++)
        for (int oy = 0; oy < g.out_h; oy++)
            for (int ox = 0; ox < g.out_w; ox++, o += g.in_c)
                maxpool_position(g, x + (int64_t)e * g.in_size, oy, ox, out + o, argmax + o);
    return 0;
}

static int cpu_maxpool_bwd(tower_dev_t *d, tower_window_t g, const float *dy, const int32_t *argmax, int n, float *dx)
{
    (void)d;
    int64_t out_size = (int64_t)g.out_h * g.out_w * g.in_c;
    memset(dx, 0, (size_t)n * (size_t)g.in_size * sizeof *dx);
    for (int e = 0; e < n; e++) {
        float *dxe = dx + (int64_t)e * g.in_size;
        const float *dye = dy + e * out_size;
        const int32_t *arg = argmax + e * out_size;
        for (int64_t j = 0; j < out_size; j++) dxe[arg[j]] += dye[j];
    }
    return 0;
}

static int cpu_conv_fwd(tower_dev_t *d, tower_window_t g, const float *x, int m, const float *w, const float *b,
                        enum psc_activation act, float *y, float *col)
{
    (void)col;
    return tower_cpu_dnnl_conv_fwd(d->dnnl, g, x, m, w, b, act, y);
}

static int cpu_conv_bwd_data(tower_dev_t *d, tower_window_t g, const float *dy, int m, const float *w, float *dx,
                             float *col)
{
    (void)col;
    return tower_cpu_dnnl_conv_bwd_data(d->dnnl, g, dy, m, w, dx);
}

static int cpu_conv_bwd_weights(tower_dev_t *d, tower_window_t g, const float *x, const float *dy, int m, float *dw,
                                int accumulate, float *col)
{
    (void)col;
    return tower_cpu_dnnl_conv_bwd_weights(d->dnnl, g, x, dy, m, dw, accumulate);
}

static int cpu_dropout_fwd(tower_dev_t *d, const float *x, float *mask, float *out, int64_t count, uint64_t seed,
                           uint32_t layer, uint64_t element0, uint32_t threshold, float scale)
{
    (void)d;
    for (int64_t j = 0; j < count; j++) {
        mask[j] = psc_dropout_bits(seed, layer, element0 + (uint64_t)j) >= threshold ? scale : 0.0f;
        out[j] = x[j] * mask[j];
    }
    return 0;
}

static int cpu_mul(tower_dev_t *d, const float *x, const float *m, float *out, int64_t count)
{
    (void)d;
    for (int64_t j = 0; j < count; j++) out[j] = x[j] * m[j];
    return 0;
}

static int cpu_softmax_xent(tower_dev_t *d, const float *logits, const int32_t *y, int n, int C, float *dlogits,
                            double *row_loss, int32_t *row_hit)
{
    (void)d;
    for (int i = 0; i < n; i++) {
        const float *z = logits + (int64_t)i * C;
        int arg = 0;
        for (int j = 1; j < C; j++)
            if (z[j] > z[arg]) arg = j;
        double zmax = z[arg], sum = 0;
        for (int j = 0; j < C; j++) sum += exp((double)z[j] - zmax);
        double lse = zmax + log(sum);
        row_loss[i] = lse - (double)z[y[i]];
        row_hit[i] = arg == y[i];
        if (dlogits) {
            float *dz = dlogits + (int64_t)i * C;
            for (int j = 0; j < C; j++) dz[j] = (float)((exp((double)z[j] - lse) - (j == y[i])) / n);
        }
    }
    return 0;
}

static int cpu_accumulate(tower_dev_t *d, float *dst, float a, const float *src, float b, int64_t count)
{
    (void)d;
    if (a == 0.0f)
        memset(dst, 0, (size_t)count * sizeof *dst);
    else if (a != 1.0f)
        cblas_sscal((int)count, a, dst, 1);
    if (src) cblas_saxpy((int)count, b, src, 1, dst, 1);
    return 0;
}

/* ---- recommendation (CTR) models ---- */

/* The embedding bags' and the interaction's loops work 8 columns (or, for
 * the interaction's dots, 8 pairs) at a time in fixed-length blocks, which
 * gcc's -O2 vectorizes (a loop of runtime length over memory that may alias
 * stays scalar there): every sum still adds the same terms in the same order
 * as the one-at-a-time loops, starting from 0, so the results are the same
 * bit for bit. On x86-64 they are compiled twice,
 * for the baseline (SSE2) and for AVX2 (one vector a block), and the AVX2 copy
 * runs on a CPU that has it; element-wise IEEE operations without fused
 * multiply-adds (ISO C: -ffp-contract=off) round alike at any width, as in
 * ps_server/optim.c. IBLK: the block. (The interaction's backward writes its
 * blocks as GCC vector types, element-wise alike: several sums at once.) */
#define IBLK 8
#if defined(__x86_64__)
#define CPU_AVX2 1
#else
#define CPU_AVX2 0
#endif

/* Example i's bags [slot0, slot0 + nbags) of the rows: each bag's weighted
 * sum of its rows, IBLK columns at a time, each from 0 in the bag's order. */
static inline __attribute__((always_inline)) void bag_fwd_one(const float *rows, int dim, const int32_t *bag,
                                                              const int32_t *idx, const float *w, int nbags, float *o)
{
    for (int j = 0; j < nbags; j++, o += dim) {
        int c = 0;
        for (; c + IBLK <= dim; c += IBLK) {
            float acc[IBLK] = {0};
            for (int32_t k = bag[j]; k < bag[j + 1]; k++) {
                const float wk = w[k], *r = rows + (int64_t)idx[k] * dim + c;
                for (int e = 0; e < IBLK; e++) acc[e] += wk * r[e];
            }
            memcpy(o + c, acc, sizeof acc);
        }
        for (; c < dim; c++) {
            float sum = 0.0f;
            for (int32_t k = bag[j]; k < bag[j + 1]; k++) sum += w[k] * rows[(int64_t)idx[k] * dim + c];
            o[c] = sum;
        }
    }
}

/* Example i's bags' gradients g added to their rows' (drows), in the bags'
 * order, IBLK columns at a time. */
static inline __attribute__((always_inline)) void bag_bwd_one(float *drows, int dim, const int32_t *bag,
                                                              const int32_t *idx, const float *w, int nbags,
                                                              const float *g)
{
    for (int j = 0; j < nbags; j++, g += dim)
        for (int32_t k = bag[j]; k < bag[j + 1]; k++) {
            float *r = drows + (int64_t)idx[k] * dim;
            const float wk = w[k];
            int c = 0;
            for (; c + IBLK <= dim; c += IBLK) {
                float t[IBLK];
                for (int e = 0; e < IBLK; e++) t[e] = r[c + e] + wk * g[c + e];
                memcpy(r + c, t, sizeof t);
            }
            for (; c < dim; c++) r[c] += wk * g[c];
        }
}

#define BAG_LOOPS(suffix, attr)                                                                                      \
    attr static void bag_fwd_##suffix(const float *rows, int dim, const int32_t *off, const int32_t *idx,            \
                                      const float *w, int n, int nslots, int slot0, int nbags, float *out, int ldo)  \
    {                                                                                                                \
        for (int i = 0; i < n; i++)                                                                                  \
            bag_fwd_one(rows, dim, off + (int64_t)i * nslots + slot0, idx, w, nbags, out + (int64_t)i * ldo);        \
    }                                                                                                                \
    attr static void bag_bwd_##suffix(float *drows, int dim, const int32_t *off, const int32_t *idx, const float *w, \
                                      int n, int nslots, int slot0, int nbags, const float *dout, int ldo)           \
    {                                                                                                                \
        for (int i = 0; i < n; i++)                                                                                  \
            bag_bwd_one(drows, dim, off + (int64_t)i * nslots + slot0, idx, w, nbags, dout + (int64_t)i * ldo);      \
    }
BAG_LOOPS(base, )
#if CPU_AVX2
BAG_LOOPS(avx2, __attribute__((target("avx2"))))
#endif

/* Whether this CPU runs the AVX2 copies (a load and a test: libgcc reads the
 * CPU's model before main). */
static int cpu_avx2(void)
{
#if CPU_AVX2
    return __builtin_cpu_supports("avx2");
#else
    return 0;
#endif
}

/* name##_avx2(...) on a CPU with AVX2, else name##_base(...) (void functions). */
#if CPU_AVX2
#define CPU_DISPATCH(name, ...) (cpu_avx2() ? name##_avx2(__VA_ARGS__) : name##_base(__VA_ARGS__))
#else
#define CPU_DISPATCH(name, ...) name##_base(__VA_ARGS__)
#endif

static int cpu_bag_fwd(tower_dev_t *d, const float *rows, int dim, const int32_t *off, const int32_t *idx,
                       const float *w, int n, int nslots, int slot0, int nbags, float *out, int ldo)
{
    (void)d;
    CPU_DISPATCH(bag_fwd, rows, dim, off, idx, w, n, nslots, slot0, nbags, out, ldo);
    return 0;
}

static int cpu_bag_bwd(tower_dev_t *d, float *drows, int dim, const int32_t *off, const int32_t *idx, const float *w,
                       int n, int nslots, int slot0, int nbags, const float *dout, int ldo)
{
    (void)d;
    CPU_DISPATCH(bag_bwd, drows, dim, off, idx, w, n, nslots, slot0, nbags, dout, ldo);
    return 0;
}

/* One example's dots: its vectors ve (P, D), transposed into vt (D, Pp; Pp =
 * P + IBLK - 1, the padding zero, so a block of dots from any b0 < P reads
 * inside it); the pairs row by row into o: q(a, b). */
static inline __attribute__((always_inline)) void interact_fwd_one(const float *ve, int P, int D, float *vt, float *o)
{
    int Pp = P + IBLK - 1;
    for (int c = 0; c < D; c++) {
        float *r = vt + (int64_t)c * Pp;
        for (int b = 0; b < P; b++) r[b] = ve[(int64_t)b * D + c];
        for (int b = P; b < Pp; b++) r[b] = 0.0f;
    }
    for (int a = 0; a < P; a++) {
        const float *va = ve + (int64_t)a * D;
        for (int b0 = a + 1; b0 < P; b0 += IBLK) { /* the dots with b0 .. b0 + IBLK - 1 */
            float dot[IBLK] = {0};
            for (int c = 0; c < D; c++) {
                const float x = va[c], *y = vt + (int64_t)c * Pp + b0;
                for (int k = 0; k < IBLK; k++) dot[k] += x * y[k];
            }
            int m = PSC_MIN(IBLK, P - b0);
            memcpy(o, dot, (size_t)m * sizeof *o);
            o += m;
        }
    }
}

/* One example's dv (P, D): each entry sums its partners' g(a, b) * v[b] in b
 * order (a gather, as the CUDA kernel), IBLK columns at a time and IROWS
 * entries a (rows of dv) at once: each row's sum is a chain of dependent
 * adds, and IROWS independent chains keep the adder busy where one waited
 * on its latency. The pairs' gradients g are first spread, in one pass in
 * their order, into G ((P + IROWS) x P, its last IROWS rows zero): G[a][b]
 * = G[b][a] = g(a, b). */
#define IROWS 4                                                          /* acc0 .. acc3 below */
typedef float iblk_t __attribute__((vector_size(IBLK * sizeof(float)))); /* IBLK columns: one ymm with AVX2 */
static inline __attribute__((always_inline)) void interact_bwd_one(const float *ve, const float *g, int P, int D,
                                                                   float *G, float *dve)
{
    for (int a = 0; a < P; a++) {
        G[(int64_t)a * P + a] = 0.0f; /* never read */
        for (int b = a + 1; b < P; b++) G[(int64_t)a * P + b] = G[(int64_t)b * P + a] = *g++;
    }
    for (int a0 = 0; a0 < P; a0 += IROWS) {
        int na = PSC_MIN(IROWS, P - a0), mid = a0 + na;
        const float *ga = G + (int64_t)a0 * P; /* rows past P: zeros, their sums never stored */
        int c = 0;
        for (; c + IBLK <= D; c += IBLK) {
            iblk_t acc0 = {0}, acc1 = {0}, acc2 = {0}, acc3 = {0}, vb;
            for (int b = 0; b < a0; b++) { /* partners before the rows: all of them add */
                memcpy(&vb, ve + (int64_t)b * D + c, sizeof vb);
                acc0 += ga[b] * vb;
                acc1 += ga[P + b] * vb;
                acc2 += ga[2 * P + b] * vb;
                acc3 += ga[3 * P + b] * vb;
            }
            for (int b = a0; b < mid; b++) { /* among the rows: each skips itself */
                memcpy(&vb, ve + (int64_t)b * D + c, sizeof vb);
                if (b != a0) acc0 += ga[b] * vb;
                if (b != a0 + 1) acc1 += ga[P + b] * vb;
                if (b != a0 + 2) acc2 += ga[2 * P + b] * vb;
                if (b != a0 + 3) acc3 += ga[3 * P + b] * vb;
            }
            for (int b = mid; b < P; b++) {
                memcpy(&vb, ve + (int64_t)b * D + c, sizeof vb);
                acc0 += ga[b] * vb;
                acc1 += ga[P + b] * vb;
                acc2 += ga[2 * P + b] * vb;
                acc3 += ga[3 * P + b] * vb;
            }
            const iblk_t *acc[IROWS] = {&acc0, &acc1, &acc2, &acc3};
            for (int j = 0; j < na; j++) memcpy(dve + (int64_t)(a0 + j) * D + c, acc[j], sizeof vb);
        }
        for (; c < D; c++)
            for (int j = 0; j < na; j++) {
                float sum = 0.0f;
                for (int b = 0; b < P; b++)
                    if (b != a0 + j) sum += ga[j * P + b] * ve[(int64_t)b * D + c];
                dve[(int64_t)(a0 + j) * D + c] = sum;
            }
    }
}

#define INTERACT_LOOPS(suffix, attr)                                                                                   \
    attr static void interact_fwd_##suffix(const float *v, int n, int P, int D, float *out, int ldo, float *vt)        \
    {                                                                                                                  \
        for (int i = 0; i < n; i++) interact_fwd_one(v + (int64_t)i * P * D, P, D, vt, out + (int64_t)i * ldo);        \
    }                                                                                                                  \
    attr static void interact_bwd_##suffix(const float *v, const float *dout, int ldo, int n, int P, int D, float *dv, \
                                           float *G)                                                                   \
    {                                                                                                                  \
        for (int i = 0; i < n; i++)                                                                                    \
            interact_bwd_one(v + (int64_t)i * P * D, dout + (int64_t)i * ldo, P, D, G, dv + (int64_t)i * P * D);       \
    }
INTERACT_LOOPS(base, )
#if CPU_AVX2
INTERACT_LOOPS(avx2, __attribute__((target("avx2"))))
#endif

static int cpu_interact_fwd(tower_dev_t *d, const float *v, int n, int P, int D, float *out, int ldo)
{
    (void)d;
    float *vt = malloc((size_t)(P + IBLK - 1) * (size_t)D * sizeof *vt);
    if (!vt) return PSC_ENOMEM;
    CPU_DISPATCH(interact_fwd, v, n, P, D, out, ldo, vt);
    free(vt);
    return 0;
}

static int cpu_interact_bwd(tower_dev_t *d, const float *v, const float *dout, int ldo, int n, int P, int D, float *dv)
{
    (void)d;
    float *G = calloc((size_t)(P + IROWS) * (size_t)P, sizeof *G);
    if (!G) return PSC_ENOMEM;
    CPU_DISPATCH(interact_bwd, v, dout, ldo, n, P, D, dv, G);
    free(G);
    return 0;
}

static int cpu_sigmoid_xent(tower_dev_t *d, const float *logits, const float *y, int n, float *dlogits,
                            double *row_loss)
{
    (void)d;
    for (int i = 0; i < n; i++) {
        double z = logits[i], t = y[i];
        row_loss[i] = fmax(z, 0.0) - z * t + log1p(exp(-fabs(z)));
        if (dlogits) dlogits[i] = (float)((1.0 / (1.0 + exp(-z)) - t) / n);
    }
    return 0;
}

static int cpu_copy2d(tower_dev_t *d, float *dst, int ldd, const float *src, int lds, int rows, int cols, int add)
{
    (void)d;
    for (int r = 0; r < rows; r++) {
        float *o = dst + (int64_t)r * ldd;
        const float *s = src + (int64_t)r * lds;
        if (add)
            for (int c = 0; c < cols; c++) o[c] += s[c];
        else
            memcpy(o, s, (size_t)cols * sizeof *o);
    }
    return 0;
}

/* ---- the tables ---- */

void tower_cpu_set_threads(int n)
{
    openblas_set_num_threads(n);
    tower_cpu_dnnl_set_threads(n);
}

/* OpenBLAS's own (not in cblas.h); its fork handler calls it too. Weak: an
 * OpenBLAS without it (the OpenMP build) leaves the pool as it is. */
extern void blas_thread_shutdown_(void) __attribute__((weak));

void tower_cpu_threads_restart(void)
{
    /* The pthreads OpenBLAS starts its thread pool when the library loads, with
     * the signal mask of a process that has blocked nothing yet. Shut down, the
     * pool is started again by the next parallel GEMM, from a thread that
     * inherited main's mask. */
    if (blas_thread_shutdown_) blas_thread_shutdown_();
}

static int cpu_device_count(void) { return 1; }

static int cpu_device_error(char *why, size_t whylen)
{
    if (whylen) why[0] = '\0';
    return 0;
}

static const tower_backend_ops_t cpu_backend = {
    .name = "cpu",
    .col_budget = 0, /* oneDNN's convolutions take the whole batch */
    .open = cpu_open,
    .close = cpu_close,
    .select = cpu_select,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .host_alloc = cpu_alloc,
    .host_free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .copy_peer = NULL,
    .sync = cpu_sync,
    .gemm = cpu_gemm,
    .im2col = cpu_im2col,
    .col2im = cpu_col2im,
    .conv_fwd = cpu_conv_fwd,
    .conv_bwd_data = cpu_conv_bwd_data,
    .conv_bwd_weights = cpu_conv_bwd_weights,
    .bias_act = cpu_bias_act,
    .act_backward = cpu_act_backward,
    .bias_grad = cpu_bias_grad,
    .maxpool_fwd = cpu_maxpool_fwd,
    .maxpool_bwd = cpu_maxpool_bwd,
    .dropout_fwd = cpu_dropout_fwd,
    .mul = cpu_mul,
    .softmax_xent = cpu_softmax_xent,
    .accumulate = cpu_accumulate,
    .bag_fwd = cpu_bag_fwd,
    .bag_bwd = cpu_bag_bwd,
    .interact_fwd = cpu_interact_fwd,
    .interact_bwd = cpu_interact_bwd,
    .sigmoid_xent = cpu_sigmoid_xent,
    .copy2d = cpu_copy2d,
};

/* The device is ignored: the walk sees device 0. */
static int cpu_create(const psc_job_spec_t *spec, const psc_var_desc_t *vars, int nvars, int max_batch, int device,
                      tower_t **out, char *err, size_t errlen)
{
    (void)device;
    return tower_walk_create(&cpu_backend, &tower_cpu_ops, spec, vars, nvars, max_batch, 0, out, err, errlen);
}

const tower_ops_t tower_cpu_ops = {
    .name = "cpu",
    .create = cpu_create,
    .destroy = tower_walk_destroy,
    .set_params = tower_walk_set_params,
    .train_step = tower_walk_train_step,
    .get_grads = tower_walk_get_grads,
    .evaluate = tower_walk_evaluate,
    .predict = tower_walk_predict,
    .device_count = cpu_device_count,
    .reduce_grads = tower_walk_reduce_grads,
    .device_error = cpu_device_error,
    .backend = &cpu_backend,
};
