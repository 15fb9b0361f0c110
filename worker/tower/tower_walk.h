/* tower_walk.h — the model's walk, once for every backend, over one table of
 * per-device kernels (ggml's shape: the graph above, the backends below).
 *
 * The walk (tower_walk.c) owns what does not depend on the device: the layer
 * list and its geometry, the variable checks, the slab layout (parameters,
 * gradients, activations, the backward ping-pong buffers, im2col scratch, the
 * per-row loss and hits: ONE device allocation through the backend's alloc;
 * the host staging: ONE host_alloc), and the forward / loss / backward sequence
 * and gradient reduction. A backend (tower_cpu.c, tower_cuda.cu) supplies only
 * memory and kernels, through a tower_backend_ops_t. The recommendation (CTR)
 * models have their own walk over the same table (tower_ctr.c).
 *
 * Kernel conventions: every pointer a kernel gets is device memory of the
 * kernel's own tower (from its alloc), every matrix is row-major, and a kernel
 * is queued on the device's stream in call order (the CPU runs it at once);
 * results are read on the host only after sync. Each entry returns 0 or a
 * negative PSC_E* code (it has logged the failure). One thread at a time per
 * device context; select() makes the context current for the calling thread.
 */
#ifndef PSC_TOWER_WALK_H
#define PSC_TOWER_WALK_H

#include "tower.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A backend's device context (stream, BLAS handle, its own scratch). */
typedef struct tower_dev tower_dev_t;

/* Window geometry of a conv2d or max_pool2d layer (passed to kernels by value). */
typedef struct tower_window {
    int in_h, in_w, in_c;
    int out_h, out_w;
    int kh, kw, sh, sw;
    int pad_top, pad_left; /* TF padding before the first row / column (0 for valid) */
    int col_k;             /* conv2d: kh * kw * in_c */
    int in_size;           /* in_h * in_w * in_c */
    int filters;           /* conv2d: output channels F (0 for max_pool2d) */
} tower_window_t;

/* Marks the helpers below for both sides of a CUDA build (tower_cuda.cu
 * defines it as __host__ __device__ before including this header). */
#ifndef TOWER_KERNEL_FN
#define TOWER_KERNEL_FN
#endif

/* Max-pool of one output element, the one definition both backends run: the
 * maximum of channel c over output position (oy, ox)'s window of the example
 * xe (in_h, in_w, in_c), the first maximum in (ky, kx) order winning, padding
 * never (every window holds an input: model_spec.c). Puts it in *best and
 * returns its index into xe. */
static inline TOWER_KERNEL_FN int32_t tower_window_argmax(tower_window_t g, const float *xe, int oy, int ox, int c,
                                                          float *best)
{
    float b = 0.0f;
    int32_t arg = -1;
    for (int ky = 0; ky < g.kh; ky++) {
        int iy = oy * g.sh - g.pad_top + ky;
        if (iy < 0 || iy >= g.in_h) continue;
        for (int kx = 0; kx < g.kw; kx++) {
            int ix = ox * g.sw - g.pad_left + kx;
            if (ix < 0 || ix >= g.in_w) continue;
            int32_t idx = (iy * g.in_w + ix) * g.in_c + c;
            if (arg < 0 || xe[idx] > b) {
                b = xe[idx];
                arg = idx;
            }
        }
    }
    *best = b;
    return arg;
}

typedef struct tower_backend_ops {
    const char *name; /* "cpu", "cuda": the tower's name in messages */
    /* Floats of im2col scratch a conv layer aims for: the walk runs the conv
     * ops on chunks of examples whose columns fit, with that scratch as col. 0:
     * the backend needs no scratch (col is NULL) and takes the whole batch. */
    int64_t col_budget;

    /* ---- context and memory ---- */
    /* Opens `device` for a tower whose widest bias has max_cols columns: checks
     * the device (err names it), makes its stream, BLAS handle and scratch. */
    int (*open)(int device, int max_cols, tower_dev_t **out, char *err, size_t errlen);
    void (*close)(tower_dev_t *d); /* after a sync; NULL does nothing */
    int (*select)(tower_dev_t *d); /* makes d current for this thread */
    /* Device memory (alloc) and host staging memory the device copies from and
     * to fast (host_alloc: pinned), both zeroed; freed by free / host_free. */
    int (*alloc)(tower_dev_t *d, size_t bytes, void **out);
    void (*free)(tower_dev_t *d, void *p);
    int (*host_alloc)(tower_dev_t *d, size_t bytes, void **out);
    void (*host_free)(tower_dev_t *d, void *p);
    int (*upload)(tower_dev_t *d, void *dst, const void *host_src, size_t bytes);   /* queued */
    int (*download)(tower_dev_t *d, void *host_dst, const void *src, size_t bytes); /* queued */
    /* dst (d's memory) <- src (from's memory, another device); NULL where the
     * backend has only one device. */
    int (*copy_peer)(tower_dev_t *d, void *dst, tower_dev_t *from, const void *src, size_t bytes);
    int (*sync)(tower_dev_t *d); /* waits for everything queued on d */

    /* ---- kernels ---- */
    /* C (M, N) = alpha op(A) op(B) + beta C, row-major (C not read when beta = 0). */
    int (*gemm)(tower_dev_t *d, int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                const float *B, int ldb, float beta, float *C, int ldc);
    /* x (m, in_h, in_w, in_c) -> col (m * out_h * out_w, col_k): a row is one
     * output position's window in (ky, kx, c) order, zeros over the padding. */
    int (*im2col)(tower_dev_t *d, tower_window_t g, const float *x, int m, float *col);
    /* The adjoint of im2col: dx (m, in_h, in_w, in_c) = col folded back
     * (overwritten; each element sums its windows in (oy, ox) order). */
    int (*col2im)(tower_dev_t *d, tower_window_t g, const float *col, int m, float *dx);
    /* ---- conv2d on m examples; g holds the geometry and F = g.filters, w is
     * the (kh, kw, in_c, F) = (col_k, F) kernel; col is the walk's im2col
     * scratch for m examples (NULL when col_budget is 0) ----
     * y (m, out_h, out_w, F) = act(x (m, in_h, in_w, in_c) (*) w + b); b (F)
     * may be NULL. The reference: im2col, col @ w, bias_act. */
    int (*conv_fwd)(tower_dev_t *d, tower_window_t g, const float *x, int m, const float *w, const float *b,
                    enum psc_activation act, float *y, float *col);
    /* dx (m, in_h, in_w, in_c) = the adjoint of the convolution applied to dy
     * (m, out_h, out_w, F) (overwritten): col2im(dy @ w^T). */
    int (*conv_bwd_data)(tower_dev_t *d, tower_window_t g, const float *dy, int m, const float *w, float *dx,
                         float *col);
    /* dw (col_k, F) = im2col(x)^T @ dy, added to dw when accumulate (a later
     * chunk of the batch), else overwriting it. */
    int (*conv_bwd_weights)(tower_dev_t *d, tower_window_t g, const float *x, const float *dy, int m, float *dw,
                            int accumulate, float *col);
    /* y (rows, cols) <- act(y + b); b (cols) may be NULL. */
    int (*bias_act)(tower_dev_t *d, float *y, const float *b, int64_t rows, int cols, enum psc_activation act);
    /* dy (count) <- dy * act'(pre-activation), from the outputs y (count). */
    int (*act_backward)(tower_dev_t *d, float *dy, const float *y, int64_t count, enum psc_activation act);
    /* db (cols) = the sum over the rows of dy (rows, cols). */
    int (*bias_grad)(tower_dev_t *d, float *db, const float *dy, int64_t rows, int cols);
    /* out (n, out_h, out_w, C) = window maxima of x (n, in_h, in_w, C), the
     * first maximum in (ky, kx) order winning, padding never; argmax (same
     * shape) = its index into the example's input. */
    int (*maxpool_fwd)(tower_dev_t *d, tower_window_t g, const float *x, int n, float *out, int32_t *argmax);
    /* dx (n, in_h, in_w, C) = dy routed to each window's argmax (overwritten). */
    int (*maxpool_bwd)(tower_dev_t *d, tower_window_t g, const float *dy, const int32_t *argmax, int n, float *dx);
    /* mask (count) = scale where psc_dropout_bits(seed, layer, element0 + i)
     * >= threshold (rng.h), else 0; out = x * mask. */
    int (*dropout_fwd)(tower_dev_t *d, const float *x, float *mask, float *out, int64_t count, uint64_t seed,
                       uint32_t layer, uint64_t element0, uint32_t threshold, float scale);
    /* out (count) = x * m (out may be x). */
    int (*mul)(tower_dev_t *d, const float *x, const float *m, float *out, int64_t count);
    /* Sparse softmax cross-entropy of logits (n, C) against y (n): row_loss[i] =
     * lse - z[y_i] in double (lse around the row maximum), row_hit[i] = (the
     * first maximum == y_i); dlogits (n, C), when not NULL, = (softmax - onehot) / n. */
    int (*softmax_xent)(tower_dev_t *d, const float *logits, const int32_t *y, int n, int C, float *dlogits,
                        double *row_loss, int32_t *row_hit);
    /* dst = a * dst + b * src (src NULL: dst = a * dst); a == 0 clears dst. */
    int (*accumulate)(tower_dev_t *d, float *dst, float a, const float *src, float b, int64_t count);
    /* ---- recommendation (CTR) models (tower_ctr.c) ----
     * A batch's bags: example i's slot s holds the pairs k in [off[i * nslots + s],
     * off[i * nslots + s + 1]), each a row idx[k] of the slot's table with weight w[k].
     * The ops below take the nbags slots slot0 .. slot0 + nbags - 1 (one layer's,
     * one table rows (nrows, dim)); slot j's pooled row for example i lives at
     * out[i * ldo + j * dim + c], c < dim.
     * bag_fwd: out = sum over the bag of w[k] * rows[idx[k]] (k in order; an
     * empty bag gives 0); every entry written. */
    int (*bag_fwd)(tower_dev_t *d, const float *rows, int dim, const int32_t *off, const int32_t *idx,
                   const float *w, int n, int nslots, int slot0, int nbags, float *out, int ldo);
    /* bag_bwd, its adjoint: drows[idx[k]] += w[k] * dout (the pooled row's
     * gradient), for every pair. Accumulates (the caller clears drows); the
     * order of the sums is the backend's (CUDA: atomics). */
    int (*bag_bwd)(tower_dev_t *d, float *drows, int dim, const int32_t *off, const int32_t *idx, const float *w,
                   int n, int nslots, int slot0, int nbags, const float *dout, int ldo);
    /* DLRM's pairwise dot products of v (n, P, D): out[i * ldo + q] = <v_a, v_b>
     * (c in order), q the pair (a, b), a < b, counted row by row: (0,1), (0,2),
     * .., (0,P-1), (1,2), .. (q = a * P - a (a + 1) / 2 + b - a - 1). */
    int (*interact_fwd)(tower_dev_t *d, const float *v, int n, int P, int D, float *out, int ldo);
    /* Its adjoint: dv (n, P, D), overwritten, = for each vector a the sum over
     * its partners b != a, in b order, of dout[i * ldo + q(a, b)] * v_b. */
    int (*interact_bwd)(tower_dev_t *d, const float *v, const float *dout, int ldo, int n, int P, int D, float *dv);
    /* Sigmoid cross-entropy of logits z (n) against labels y (n) in [0, 1], in
     * double: row_loss[i] = max(z, 0) - z y + log1p(exp(-|z|)); dlogits (n),
     * when not NULL, = (sigmoid(z) - y) / n. */
    int (*sigmoid_xent)(tower_dev_t *d, const float *logits, const float *y, int n, float *dlogits,
                        double *row_loss);
    /* A strided 2-D copy: dst[r * ldd + c] = src[r * lds + c] (add: +=), r <
     * rows, c < cols (dst and src do not overlap). */
    int (*copy2d)(tower_dev_t *d, float *dst, int ldd, const float *src, int lds, int rows, int cols, int add);
} tower_backend_ops_t;

/* The tower_ops_t entries of every backend built on the walk: create gives the
 * backend's kernel table and the public table the tower answers to. */
int tower_walk_create(const tower_backend_ops_t *be, const tower_ops_t *ops, const psc_job_spec_t *spec,
                      const psc_var_desc_t *vars, int nvars, int max_batch, int device, tower_t **out, char *err,
                      size_t errlen);
void tower_walk_destroy(tower_t *t);
int tower_walk_set_params(tower_t *t, const float *params);
int tower_walk_get_grads(tower_t *t, float *grads);
int tower_walk_train_step(tower_t *t, const float *x, const int32_t *y, int n, uint64_t dropout_seed, int64_t first,
                          float *loss, int *correct);
int tower_walk_evaluate(tower_t *t, const float *x, const int32_t *y, int n, double *loss_sum, int *correct);
int tower_walk_predict(tower_t *t, const float *x, int n, float *logits);
int tower_walk_reduce_grads(tower_t *dst, tower_t *const *srcs, const float *weights, int n);

#ifdef __cplusplus
}
#endif

#endif
