/* tower_cpu.c — the CPU tower: OpenBLAS GEMMs and plain C loops (see tower.h).
 * This is the reference backend the others are tested against, so it favours
 * being obviously right over being clever.
 *
 * Design, after llm.c: create() builds one cpu_layer_t per spec layer with named
 * views carved from one slab each — parameters, gradients, activations (every
 * layer's output, dropout masks, the backward ping-pong buffers and the im2col
 * scratch) and the pooling argmax indices — all sized for max_batch. A step is
 *
 *     logits  = forward(x)                  layer by layer
 *     loss    = softmax_xent(logits, y)     and dlogits = d mean loss / d logits
 *     backward(dlogits)                     layer by layer in reverse; fills grads
 *
 * and allocates nothing.
 *
 * Layout: activations are (n, h, w, c) row-major (NHWC), a flat one (n, features);
 * dense kernels (in, units); conv kernels (kh, kw, in_c, filters), which read as
 * a (kh*kw*in_c, filters) matrix whose rows match an im2col row's (ky, kx, c)
 * order. Padding and output sizes are TensorFlow's (see model_spec.c).
 *
 * Invariants: every gradient in the slab is overwritten by each train_step (no
 * stale accumulation); the activations dense/conv2d keep are post-activation,
 * which is all their activation's derivative needs (relu: y > 0, tanh: 1 - y^2,
 * sigmoid: y (1 - y)); the backward pass stops at the first layer that has
 * variables, since nothing needs the gradient of the input.
 */
#include "tower.h"

#include "psc.h"
#include "rng.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Floats of im2col scratch a conv layer aims for: large enough GEMMs, bounded
 * memory (the whole batch's columns would be ~40 MB per 64 examples for a 5x5x32
 * conv on 14x14). */
#define COL_BUDGET ((int64_t)1 << 21)

typedef struct cpu_layer {
    enum psc_layer_type type;
    enum psc_activation act;
    int in_h, in_w, in_c;      /* input (h, w, c) of one example */
    int out_h, out_w, out_c;   /* output (h, w, c) of one example */
    int64_t in_size, out_size; /* features per example: h * w * c */
    int kh, kw, sh, sw;        /* conv2d kernel / max_pool2d window; strides */
    int pad_top, pad_left;     /* TF padding before the first row / column (0 for valid) */
    int64_t col_k;             /* conv2d: kh * kw * in_c, the GEMMs' inner dimension */
    int col_batch;             /* conv2d: examples per im2col + GEMM chunk */
    float rate;                /* dropout */
    /* views into the parameter and gradient slabs (NULL where the layer has none) */
    float *w, *dw; /* dense (in, units); conv2d (kh, kw, in_c, filters) = (col_k, filters) */
    float *b, *db; /* (units) or (filters) */
    /* carved at create for max_batch examples (NULL where unused) */
    float *out;      /* (B, out_h, out_w, out_c) post-activation; not for flatten */
    float *mask;     /* dropout: (B, out_size), each 0 or 1 / (1 - rate) */
    int32_t *argmax; /* max_pool2d: (B, out_h, out_w, out_c), index into the example's input */
    /* set by each forward pass */
    const float *x; /* (n, in_size) this step's input */
    const float *y; /* (n, out_size) this step's output: out, or x for flatten and inference dropout */
} cpu_layer_t;

typedef struct cpu_tower {
    tower_t base; /* first: a tower_t * is a cpu_tower_t * */
    int num_layers;
    cpu_layer_t *layers; /* (num_layers) */
    int features;        /* input features per example */
    int classes;         /* logits per example */
    int first_trainable; /* first layer with variables (num_layers when none) */
    int64_t nparams;
    float *params;       /* (nparams) the variables in model order, at tower_layout's offsets */
    float *grads;        /* (nparams) d mean loss / d params, same layout */
    float *acts;         /* one slab: the layers' out and mask, dbuf, col */
    int32_t *argmax_mem; /* one slab: the pool layers' argmax */
    float *dbuf[2];      /* 2 x (B, max features of any activation): backward ping-pong */
    float *col;          /* (max over conv layers of col_batch * out_h * out_w * col_k) */
} cpu_tower_t;

/* ---- activations ---- */

/* y (rows, cols) <- act(y + b), b (cols) may be NULL. */
static void bias_act_forward(float *y, const float *b, int64_t rows, int cols, enum psc_activation act)
{
    for (int64_t r = 0; r < rows; r++) {
        float *row = y + r * cols;
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
}

/* dy (count) <- dy * act'(pre-activation), written with the outputs y (count). */
static void act_backward(float *dy, const float *y, int64_t count, enum psc_activation act)
{
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
}

/* db (cols) = sum over the rows of dy (rows, cols). */
static void bias_backward(float *db, const float *dy, int64_t rows, int cols)
{
    memset(db, 0, (size_t)cols * sizeof *db);
    for (int64_t r = 0; r < rows; r++)
        for (int j = 0; j < cols; j++) db[j] += dy[r * cols + j];
}

/* ---- dense ---- */

static void dense_forward(cpu_layer_t *L, int n)
{
    int in = (int)L->in_size, units = L->out_c;
    /* out (n, units) = x (n, in) @ w (in, units), then + b and the activation */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, units, in, 1.0f, L->x, in, L->w, units, 0.0f, L->out,
                units);
    bias_act_forward(L->out, L->b, n, units, L->act);
}

/* dy (n, units): gradient w.r.t. the pre-activation. dx (n, in) may be NULL. */
static void dense_backward(cpu_layer_t *L, const float *dy, float *dx, int n)
{
    int in = (int)L->in_size, units = L->out_c;
    /* dw (in, units) = x^T (in, n) @ dy (n, units) */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, in, units, n, 1.0f, L->x, in, dy, units, 0.0f, L->dw, units);
    /* db (units) = sum_n dy */
    if (L->db) bias_backward(L->db, dy, n, units);
    /* dx (n, in) = dy (n, units) @ w^T (units, in) */
    if (dx)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, in, units, 1.0f, dy, units, L->w, units, 0.0f, dx, in);
}

/* ---- conv2d: im2col + GEMM ---- */

/* x (m, in_h, in_w, in_c) -> col (m * out_h * out_w, kh * kw * in_c); a row holds
 * one output position's window in (ky, kx, c) order, zeros where it hangs over the
 * padding. */
static void im2col(const cpu_layer_t *L, const float *x, int m, float *col)
{
    int C = L->in_c;
    size_t cbytes = (size_t)C * sizeof(float);
    for (int e = 0; e < m; e++) {
        const float *xe = x + (int64_t)e * L->in_size; /* (in_h, in_w, in_c) */
        for (int oy = 0; oy < L->out_h; oy++)
            for (int ox = 0; ox < L->out_w; ox++) {
                float *row = col + (((int64_t)e * L->out_h + oy) * L->out_w + ox) * L->col_k; /* (kh, kw, C) */
                for (int ky = 0; ky < L->kh; ky++) {
                    int iy = oy * L->sh - L->pad_top + ky;
                    float *dst = row + (int64_t)ky * L->kw * C;
                    if (iy < 0 || iy >= L->in_h) {
                        memset(dst, 0, (size_t)L->kw * cbytes);
                        continue;
                    }
                    for (int kx = 0; kx < L->kw; kx++) {
                        int ix = ox * L->sw - L->pad_left + kx;
                        if (ix < 0 || ix >= L->in_w)
                            memset(dst + kx * C, 0, cbytes);
                        else
                            memcpy(dst + kx * C, xe + ((int64_t)iy * L->in_w + ix) * C, cbytes);
                    }
                }
            }
    }
}

/* The adjoint of im2col: dx (m, in_h, in_w, in_c) += col folded back. */
static void col2im_add(const cpu_layer_t *L, const float *col, int m, float *dx)
{
    int C = L->in_c;
    for (int e = 0; e < m; e++) {
        float *dxe = dx + (int64_t)e * L->in_size;
        for (int oy = 0; oy < L->out_h; oy++)
            for (int ox = 0; ox < L->out_w; ox++) {
                const float *row = col + (((int64_t)e * L->out_h + oy) * L->out_w + ox) * L->col_k;
                for (int ky = 0; ky < L->kh; ky++) {
                    int iy = oy * L->sh - L->pad_top + ky;
                    if (iy < 0 || iy >= L->in_h) continue;
                    for (int kx = 0; kx < L->kw; kx++) {
                        int ix = ox * L->sw - L->pad_left + kx;
                        if (ix < 0 || ix >= L->in_w) continue;
                        const float *src = row + ((int64_t)ky * L->kw + kx) * C;
                        float *dst = dxe + ((int64_t)iy * L->in_w + ix) * C;
                        for (int c = 0; c < C; c++) dst[c] += src[c];
                    }
                }
            }
    }
}

static void conv2d_forward(cpu_tower_t *t, cpu_layer_t *L, int n)
{
    int F = L->out_c, K = (int)L->col_k;
    int64_t positions = (int64_t)L->out_h * L->out_w;
    for (int e0 = 0; e0 < n; e0 += L->col_batch) {
        int m = PSC_MIN(L->col_batch, n - e0);
        int rows = (int)(m * positions);
        im2col(L, L->x + e0 * L->in_size, m, t->col); /* col (rows, K) */
        float *y = L->out + e0 * L->out_size;          /* (rows, F) = (m, out_h, out_w, F) */
        /* y (rows, F) = col (rows, K) @ w (K, F) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, F, K, 1.0f, t->col, K, L->w, F, 0.0f, y, F);
    }
    bias_act_forward(L->out, L->b, n * positions, F, L->act);
}

/* dy (n, out_h, out_w, F): gradient w.r.t. the pre-activation. dx (n, in_size) may be NULL. */
static void conv2d_backward(cpu_tower_t *t, cpu_layer_t *L, const float *dy, float *dx, int n)
{
    int F = L->out_c, K = (int)L->col_k;
    int64_t positions = (int64_t)L->out_h * L->out_w;
    /* db (F) = sum over examples and positions of dy */
    if (L->db) bias_backward(L->db, dy, n * positions, F);
    if (dx) memset(dx, 0, (size_t)(n * L->in_size) * sizeof *dx);
    for (int e0 = 0; e0 < n; e0 += L->col_batch) {
        int m = PSC_MIN(L->col_batch, n - e0);
        int rows = (int)(m * positions);
        const float *dyc = dy + e0 * L->out_size;      /* (rows, F) */
        im2col(L, L->x + e0 * L->in_size, m, t->col); /* col (rows, K), recomputed rather than kept */
        /* dw (K, F) (+)= col^T (K, rows) @ dy (rows, F) */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, F, rows, 1.0f, t->col, K, dyc, F, e0 ? 1.0f : 0.0f,
                    L->dw, F);
        if (!dx) continue;
        /* dcol (rows, K) = dy (rows, F) @ w^T (F, K), into the same scratch */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, K, F, 1.0f, dyc, F, L->w, F, 0.0f, t->col, K);
        col2im_add(L, t->col, m, dx + e0 * L->in_size);
    }
}

/* ---- max_pool2d ---- */

/* out (n, out_h, out_w, C) = the window maxima of x (n, in_h, in_w, C); padding
 * never wins (TF), and every window holds at least one input (see model_spec.c). */
static void maxpool_forward(cpu_layer_t *L, int n)
{
    int C = L->in_c;
    for (int e = 0; e < n; e++) {
        const float *xe = L->x + e * L->in_size;
        for (int oy = 0; oy < L->out_h; oy++)
            for (int ox = 0; ox < L->out_w; ox++) {
                int64_t o = (((int64_t)e * L->out_h + oy) * L->out_w + ox) * C;
                float *best = L->out + o;
                int32_t *arg = L->argmax + o;
                int first = 1;
                for (int ky = 0; ky < L->kh; ky++) {
                    int iy = oy * L->sh - L->pad_top + ky;
                    if (iy < 0 || iy >= L->in_h) continue;
                    for (int kx = 0; kx < L->kw; kx++) {
                        int ix = ox * L->sw - L->pad_left + kx;
                        if (ix < 0 || ix >= L->in_w) continue;
                        int32_t base = (iy * L->in_w + ix) * C;
                        const float *p = xe + base;
                        for (int c = 0; c < C; c++)
                            if (first || p[c] > best[c]) {
                                best[c] = p[c];
                                arg[c] = base + c;
                            }
                        first = 0;
                    }
                }
            }
    }
}

/* dx (n, in_h, in_w, C) = dy (n, out_h, out_w, C) routed to each window's argmax. */
static void maxpool_backward(cpu_layer_t *L, const float *dy, float *dx, int n)
{
    if (!dx) return;
    memset(dx, 0, (size_t)(n * L->in_size) * sizeof *dx);
    for (int e = 0; e < n; e++) {
        float *dxe = dx + e * L->in_size;
        const float *dye = dy + e * L->out_size;
        const int32_t *arg = L->argmax + e * L->out_size;
        for (int64_t j = 0; j < L->out_size; j++) dxe[arg[j]] += dye[j];
    }
}

/* ---- dropout (inverted: scaled at training time, identity at inference) ---- */

/* Layer `layer`'s mask for examples first .. first + n - 1 of the step's batch:
 * unit j of this slice is unit first * out_size + j of the batch, kept when
 * psc_dropout_bits says so (rng.h; the CUDA tower's kernel calls the same). */
static void dropout_forward(cpu_layer_t *L, int n, uint64_t seed, int layer, int64_t first)
{
    float scale = 1.0f / (1.0f - L->rate);
    uint32_t threshold = psc_dropout_threshold(L->rate);
    uint64_t element0 = (uint64_t)first * (uint64_t)L->out_size;
    int64_t count = n * L->out_size;
    for (int64_t j = 0; j < count; j++) {
        L->mask[j] = psc_dropout_bits(seed, (uint32_t)layer, element0 + (uint64_t)j) >= threshold ? scale : 0.0f;
        L->out[j] = L->x[j] * L->mask[j];
    }
}

/* ---- loss ---- */

/* Sparse softmax cross-entropy of logits (n, C) against labels y (n). Returns the
 * loss SUM; adds argmax hits (first maximum wins) to *correct. When dlogits
 * (n, C) is given it receives d(mean loss)/d logits = (softmax - onehot(y)) / n.
 * log-sum-exp is taken around the row maximum, in double. */
static double softmax_xent(const float *logits, const int32_t *y, int n, int C, float *dlogits, int *correct)
{
    double loss = 0;
    int hits = 0;
    for (int i = 0; i < n; i++) {
        const float *z = logits + (int64_t)i * C;
        int arg = 0;
        for (int j = 1; j < C; j++)
            if (z[j] > z[arg]) arg = j;
        double zmax = z[arg], sum = 0;
        for (int j = 0; j < C; j++) sum += exp((double)z[j] - zmax);
        double lse = zmax + log(sum);
        loss += lse - (double)z[y[i]];
        hits += arg == y[i];
        if (dlogits) {
            float *d = dlogits + (int64_t)i * C;
            for (int j = 0; j < C; j++) d[j] = (float)((exp((double)z[j] - lse) - (j == y[i])) / n);
        }
    }
    *correct += hits;
    return loss;
}

/* ---- the model ---- */

/* Forward pass over n examples x (n, features); returns the logits (n, classes).
 * train: dropout on, its masks from (dropout_seed, layer index, unit index in
 * the batch, x being examples first.. of it). */
static const float *forward(cpu_tower_t *t, const float *x, int n, int train, uint64_t dropout_seed, int64_t first)
{
    const float *h = x; /* (n, features) */
    for (int i = 0; i < t->num_layers; i++) {
        cpu_layer_t *L = &t->layers[i];
        L->x = h; /* (n, in_size) */
        switch (L->type) {
        case PSC_LAYER_DENSE: /* (n, in) -> (n, units) */
            dense_forward(L, n);
            L->y = L->out;
            break;
        case PSC_LAYER_CONV2D: /* (n, in_h, in_w, in_c) -> (n, out_h, out_w, filters) */
            conv2d_forward(t, L, n);
            L->y = L->out;
            break;
        case PSC_LAYER_MAX_POOL2D: /* (n, in_h, in_w, c) -> (n, out_h, out_w, c) */
            maxpool_forward(L, n);
            L->y = L->out;
            break;
        case PSC_LAYER_FLATTEN: /* (n, h, w, c) -> (n, h*w*c): the same memory */
            L->y = L->x;
            break;
        case PSC_LAYER_DROPOUT: /* (n, size) -> (n, size) */
            if (train) {
                dropout_forward(L, n, dropout_seed, i, first);
                L->y = L->out;
            } else {
                L->y = L->x;
            }
            break;
        }
        h = L->y; /* (n, out_size) */
    }
    return h; /* (n, classes) */
}

static float *other_dbuf(cpu_tower_t *t, const float *p) { return p == t->dbuf[0] ? t->dbuf[1] : t->dbuf[0]; }

/* Backward pass from dlogits (n, classes) = d mean loss / d logits (in dbuf[0]):
 * fills the gradient slab. Each layer reads dy, the gradient w.r.t. its output,
 * and writes dx, the gradient w.r.t. its input, into the other buffer. */
static void backward(cpu_tower_t *t, float *dlogits, int n)
{
    float *dy = dlogits; /* (n, out_size) of the layer below */
    for (int i = t->num_layers - 1; i >= t->first_trainable; i--) {
        cpu_layer_t *L = &t->layers[i];
        float *dx = i > t->first_trainable ? other_dbuf(t, dy) : NULL; /* (n, in_size) */
        switch (L->type) {
        case PSC_LAYER_DENSE:
            act_backward(dy, L->y, n * L->out_size, L->act); /* dy: now w.r.t. the pre-activation */
            dense_backward(L, dy, dx, n);
            break;
        case PSC_LAYER_CONV2D:
            act_backward(dy, L->y, n * L->out_size, L->act);
            conv2d_backward(t, L, dy, dx, n);
            break;
        case PSC_LAYER_MAX_POOL2D:
            maxpool_backward(L, dy, dx, n);
            break;
        case PSC_LAYER_FLATTEN: /* (n, h*w*c) is (n, h, w, c) */
            dx = dy;
            break;
        case PSC_LAYER_DROPOUT: /* dx = dy * mask, in place */
            for (int64_t j = 0; j < n * L->out_size; j++) dy[j] *= L->mask[j];
            dx = dy;
            break;
        }
        dy = dx;
    }
}

static int check_batch(const cpu_tower_t *t, const float *x, const int32_t *y, int n)
{
    if (!x || !y || n < 1 || n > t->base.max_batch) return PSC_EINVAL;
    for (int i = 0; i < n; i++)
        if (y[i] < 0 || y[i] >= t->classes) return PSC_EINVAL;
    return 0;
}

/* ---- the operations ---- */

static int cpu_set_params(tower_t *base, const float *params)
{
    cpu_tower_t *t = (cpu_tower_t *)base;
    memcpy(t->params, params, (size_t)t->nparams * sizeof(float));
    return 0;
}

static int cpu_get_grads(tower_t *base, float *grads)
{
    cpu_tower_t *t = (cpu_tower_t *)base;
    memcpy(grads, t->grads, (size_t)t->nparams * sizeof(float));
    return 0;
}

static int cpu_train_step(tower_t *base, const float *x, const int32_t *y, int n, uint64_t dropout_seed, int64_t first,
                          float *loss, int *correct)
{
    cpu_tower_t *t = (cpu_tower_t *)base;
    int rc = check_batch(t, x, y, n);
    if (rc) return rc;
    if (first < 0) return PSC_EINVAL;
    const float *logits = forward(t, x, n, 1, dropout_seed, first); /* (n, classes) */
    float *dlogits = t->dbuf[0];                                     /* (n, classes) */
    int hits = 0;
    double loss_sum = softmax_xent(logits, y, n, t->classes, dlogits, &hits);
    backward(t, dlogits, n);
    if (loss) *loss = (float)(loss_sum / n);
    if (correct) *correct = hits;
    return 0;
}

static int cpu_evaluate(tower_t *base, const float *x, const int32_t *y, int n, double *loss_sum, int *correct)
{
    cpu_tower_t *t = (cpu_tower_t *)base;
    int rc = check_batch(t, x, y, n);
    if (rc) return rc;
    const float *logits = forward(t, x, n, 0, 0, 0); /* (n, classes) */
    int hits = 0;
    double sum = softmax_xent(logits, y, n, t->classes, NULL, &hits);
    if (loss_sum) *loss_sum += sum;
    if (correct) *correct += hits;
    return 0;
}

static void cpu_destroy(tower_t *base)
{
    cpu_tower_t *t = (cpu_tower_t *)base;
    if (!t) return;
    free(t->params);
    free(t->grads);
    free(t->acts);
    free(t->argmax_mem);
    free(t->layers);
    free(t);
}

void tower_cpu_set_threads(int n) { openblas_set_num_threads(n); }

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

static int cpu_reduce_grads(tower_t *dst_base, tower_t *const *srcs, const float *weights, int n)
{
    cpu_tower_t *dst = (cpu_tower_t *)dst_base;
    /* dst may be among srcs: fold its own term in first, then add the others. */
    float self = 0.0f;
    for (int i = 0; i < n; i++)
        if (srcs[i] == dst_base) self += weights[i];
    cblas_sscal((int)dst->nparams, self, dst->grads, 1);
    for (int i = 0; i < n; i++) {
        const cpu_tower_t *s = (const cpu_tower_t *)srcs[i];
        if (srcs[i] == dst_base) continue;
        if (s->nparams != dst->nparams) return PSC_EMISMATCH;
        cblas_saxpy((int)dst->nparams, weights[i], s->grads, 1, dst->grads, 1);
    }
    return 0;
}

/* TF padding before the first row/column for one dimension. */
static int pad_before(int in, int out, int k, int s, enum psc_padding pad)
{
    if (pad != PSC_PAD_SAME) return 0;
    int total = PSC_MAX((out - 1) * s + k - in, 0);
    return total / 2;
}

/* The variables must be the spec's model's (want), in its order. */
static int check_vars(const psc_var_desc_t *vars, int nvars, const psc_var_desc_t *want, int nwant, char *err,
                      size_t errlen)
{
    if (nvars != nwant)
        return psc_seterr(err, errlen, PSC_EMISMATCH, "cpu tower: %d variables given, the model has %d", nvars, nwant);
    for (int k = 0; k < nvars; k++) {
        int same = vars[k].rank == want[k].rank && vars[k].layer == want[k].layer &&
                   !vars[k].is_step == !want[k].is_step && vars[k].numel == want[k].numel;
        for (int d = 0; same && d < want[k].rank; d++) same = vars[k].shape[d] == want[k].shape[d];
        if (!same)
            return psc_seterr(err, errlen, PSC_EMISMATCH, "cpu tower: variable %d (%s) does not match the model's %s",
                              k, vars[k].name, want[k].name);
    }
    return 0;
}

/* One slab for the activations (each layer's out and mask, the backward
 * ping-pong buffers, im2col's columns), one for the argmax indices. */
static void carve_slabs(cpu_tower_t *t, int max_batch, int64_t max_size, int64_t act_floats, int64_t col_floats,
                        int64_t argmax_ints)
{
    int64_t dbuf_floats = (int64_t)max_batch * max_size;
    t->acts = psc_xaligned((size_t)(act_floats + 2 * dbuf_floats + col_floats) * sizeof(float));
    t->argmax_mem = argmax_ints ? psc_xaligned((size_t)argmax_ints * sizeof(int32_t)) : NULL;
    float *p = t->acts;
    int32_t *q = t->argmax_mem;
    for (int i = 0; i < t->num_layers; i++) {
        cpu_layer_t *L = &t->layers[i];
        int64_t batch_out = (int64_t)max_batch * L->out_size;
        if (L->type != PSC_LAYER_FLATTEN) { L->out = p; p += batch_out; }       /* (B, out_h, out_w, out_c) */
        if (L->type == PSC_LAYER_DROPOUT) { L->mask = p; p += batch_out; }      /* (B, out_size) */
        if (L->type == PSC_LAYER_MAX_POOL2D) { L->argmax = q; q += batch_out; } /* (B, out_h, out_w, out_c) */
    }
    t->dbuf[0] = p; /* (B, max_size) */
    p += dbuf_floats;
    t->dbuf[1] = p; /* (B, max_size) */
    p += dbuf_floats;
    t->col = col_floats ? p : NULL; /* (col_floats) */
}

static int cpu_create(const psc_job_spec_t *spec, const psc_var_desc_t *vars, int nvars, int max_batch, int device,
                      tower_t **out, char *err, size_t errlen)
{
    (void)device;
    *out = NULL;
    if (max_batch < 1) return psc_seterr(err, errlen, PSC_EINVAL, "cpu tower: max_batch must be >= 1, got %d", max_batch);
    int nl = spec->num_layers, rc;
    psc_var_desc_t *want = NULL;
    int nwant = 0;
    int(*shapes)[3] = NULL;
    int64_t *offsets = NULL;
    cpu_tower_t *t = NULL;

    /* The variables must be the spec's model's, in its order. */
    if ((rc = psc_model_variables(spec, &want, &nwant, err, errlen))) goto fail;
    shapes = psc_xcalloc((size_t)nl, sizeof *shapes);
    if ((rc = psc_model_shapes(spec, shapes, err, errlen))) goto fail;
    if ((rc = check_vars(vars, nvars, want, nwant, err, errlen))) goto fail;

    t = psc_xcalloc(1, sizeof *t);
    t->base.ops = &tower_cpu_ops;
    t->base.max_batch = max_batch;
    t->num_layers = nl;
    t->layers = psc_xcalloc((size_t)nl, sizeof *t->layers);
    offsets = psc_xcalloc((size_t)nvars, sizeof *offsets);
    t->nparams = tower_layout(vars, nvars, offsets);
    t->params = psc_xaligned((size_t)t->nparams * sizeof(float));
    t->grads = psc_xaligned((size_t)t->nparams * sizeof(float));
    memset(t->params, 0, (size_t)t->nparams * sizeof(float));
    memset(t->grads, 0, (size_t)t->nparams * sizeof(float));

    /* Layer geometry: the input is (1, 1, n) for a rank-1 spec (model_spec.c). */
    int h = spec->input_rank == 3 ? spec->input_shape[0] : 1;
    int w = spec->input_rank == 3 ? spec->input_shape[1] : 1;
    int c = spec->input_rank == 3 ? spec->input_shape[2] : spec->input_shape[0];
    t->features = h * w * c;
    int64_t max_size = t->features, act_floats = 0, col_floats = 0, argmax_ints = 0;
    for (int i = 0; i < nl; i++) {
        const psc_layer_spec_t *S = &spec->layers[i];
        cpu_layer_t *L = &t->layers[i];
        L->type = S->type;
        L->act = (S->type == PSC_LAYER_DENSE || S->type == PSC_LAYER_CONV2D) ? S->activation : PSC_ACT_NONE;
        L->in_h = h;
        L->in_w = w;
        L->in_c = c;
        L->out_h = shapes[i][0];
        L->out_w = shapes[i][1];
        L->out_c = shapes[i][2];
        L->in_size = (int64_t)h * w * c;
        L->out_size = (int64_t)L->out_h * L->out_w * L->out_c;
        if (S->type == PSC_LAYER_CONV2D || S->type == PSC_LAYER_MAX_POOL2D) {
            const int *k = S->type == PSC_LAYER_CONV2D ? S->kernel_size : S->pool_size;
            L->kh = k[0];
            L->kw = k[1];
            L->sh = S->strides[0];
            L->sw = S->strides[1];
            L->pad_top = pad_before(h, L->out_h, L->kh, L->sh, S->padding);
            L->pad_left = pad_before(w, L->out_w, L->kw, L->sw, S->padding);
        }
        if (S->type == PSC_LAYER_CONV2D) {
            L->col_k = (int64_t)L->kh * L->kw * c;
            int64_t per_example = (int64_t)L->out_h * L->out_w * L->col_k;
            L->col_batch = (int)PSC_MAX((int64_t)1, PSC_MIN((int64_t)max_batch, COL_BUDGET / per_example));
            col_floats = PSC_MAX(col_floats, L->col_batch * per_example);
        }
        L->rate = S->type == PSC_LAYER_DROPOUT ? S->rate : 0.0f;
        int64_t batch_out = (int64_t)max_batch * L->out_size;
        if (S->type != PSC_LAYER_FLATTEN) act_floats += batch_out;          /* out */
        if (S->type == PSC_LAYER_DROPOUT) act_floats += batch_out;          /* mask */
        if (S->type == PSC_LAYER_MAX_POOL2D) argmax_ints += batch_out;      /* argmax */
        max_size = PSC_MAX(max_size, L->out_size);
        h = L->out_h;
        w = L->out_w;
        c = L->out_c;
    }
    t->classes = c;

    /* Views of the variables: a rank-1 variable is its layer's bias. */
    for (int k = 0; k < nvars; k++) {
        if (vars[k].is_step) continue;
        cpu_layer_t *L = &t->layers[vars[k].layer];
        if (vars[k].rank == 1) {
            L->b = t->params + offsets[k];
            L->db = t->grads + offsets[k];
        } else {
            L->w = t->params + offsets[k];
            L->dw = t->grads + offsets[k];
        }
    }
    t->first_trainable = nl;
    for (int i = nl - 1; i >= 0; i--)
        if (t->layers[i].w) t->first_trainable = i;

    carve_slabs(t, max_batch, max_size, act_floats, col_floats, argmax_ints);

    free(want);
    free(shapes);
    free(offsets);
    *out = &t->base;
    return 0;
fail:
    free(want);
    free(shapes);
    free(offsets);
    cpu_destroy(t ? &t->base : NULL);
    return rc;
}

const tower_ops_t tower_cpu_ops = {
    .name = "cpu",
    .create = cpu_create,
    .destroy = cpu_destroy,
    .set_params = cpu_set_params,
    .train_step = cpu_train_step,
    .get_grads = cpu_get_grads,
    .evaluate = cpu_evaluate,
    .device_count = cpu_device_count,
    .reduce_grads = cpu_reduce_grads,
    .device_error = cpu_device_error,
};
