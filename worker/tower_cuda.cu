/* tower_cuda.cu — the CUDA tower: cuBLAS GEMMs and CUDA C kernels (see tower.h).
 * It computes what tower_cpu.c computes, the reference it is tested against
 * (tests/unit/test_tower_cuda.c), layer by layer with the same layouts, so a
 * step on either backend gives the same loss and gradients to float rounding.
 *
 * Design, after llm.c: create() selects the device, makes one stream (non-
 * blocking) and one cuBLAS handle bound to it, and carves every device buffer
 * from ONE cudaMalloc slab — parameters, gradients, the reduce_grads staging
 * copy, the input batch and labels, every layer's output, dropout masks and
 * max-pool argmax, the backward ping-pong buffers, the im2col scratch, the bias
 * gradient partial sums, the per-row loss / hit arrays and cuBLAS's workspace —
 * and every host staging buffer from ONE pinned cudaHostAlloc slab (input batch,
 * labels, per-row losses and hits). A step is
 *
 *     x, y     -> device                       pinned staging, async on the stream
 *     logits   = forward(x)                    kernels + GEMMs queued on the stream
 *     loss     = softmax_xent(logits, y)       per-row loss (double) and hit, dlogits
 *     backward(dlogits)                        fills the gradient slab
 *     per-row losses, hits -> host; synchronize; sum the losses in row order
 *
 * and allocates nothing (cuBLAS gets its workspace from our slab, so it does
 * not allocate one either). Every op starts with cudaSetDevice(device): towers
 * on different GPUs are driven from different threads. create() refuses a
 * device this build has no kernel image for (kernel_image_check), naming it.
 *
 * reduce_grads(dst, srcs, w) runs on dst's stream: dst's gradients are scaled by
 * dst's own weight (if dst is among srcs; else cleared), then each other src's
 * are added with a weighted-accumulate kernel, read in place when that src is on
 * dst's device and otherwise first copied with cudaMemcpyPeerAsync into dst's
 * staging slab (peer access is enabled lazily, per device pair, where the
 * hardware allows; otherwise the driver stages the copy through host memory). Every CUDA runtime and
 * cuBLAS call, and every kernel launch, goes through CUDA_CHECK / CUDA_LAUNCH,
 * which log the statement, file and line, clear the thread's pending error and
 * return a PSC_E* code (create also puts the text in err); nothing aborts on a
 * CUDA error. An op that fails after queuing work still synchronizes its stream
 * before returning (stream_finish), so no copy from a pinned staging buffer or
 * a caller's buffer is in flight when the next op or the caller touches it.
 *
 * Layout (as tower_cpu.c): activations (n, h, w, c) row-major (NHWC), a flat one
 * (n, features); dense kernels (in, units); conv kernels (kh, kw, in_c, filters)
 * = a (col_k, filters) matrix whose rows follow an im2col row's (ky, kx, c)
 * order; TF padding (pad_before below). cuBLAS is column-major: a row-major
 * (r, c) matrix is its transpose column-major, so C = op(A) op(B) is computed
 * as C^T = op(B)^T op(A)^T (gemm_rm).
 *
 * Matching the CPU tower exactly where it is discrete:
 *   - dropout masks are drawn on the device by k_dropout_forward with the
 *     counter-based psc_dropout_bits (rng.h) of (dropout_seed, layer, the unit's
 *     index in the step's batch), the function tower_cpu.c calls: both backends
 *     drop the same units, and nothing is drawn on or copied from the host;
 *   - max-pool keeps the first maximum in (ky, kx) order, as the CPU loop;
 *   - the logits' argmax keeps the first maximum; the loss is taken around the
 *     row maximum in double, and the rows' losses are summed on the host in row
 *     order, in double, as the CPU does;
 *   - col2im and the max-pool backward gather (one thread per input element,
 *     adding its windows in (oy, ox) order, the order of the CPU's scatter), so
 *     they are deterministic and need no atomics; the bias gradient is a
 *     two-pass reduction into a fixed partial-sum array, also deterministic.
 * The GEMMs run in full FP32 (cuBLAS's default math mode, no TF32).
 *
 * Invariants (as tower_cpu.c): every gradient is overwritten by each train_step;
 * dense and conv2d keep post-activation outputs; the backward pass stops at the
 * first layer with variables. Each op that reads results or may be followed by
 * the caller touching its buffers synchronizes the stream before returning, so
 * between ops nothing is in flight (reduce_grads relies on it for srcs).
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* psc.h is C11: _Noreturn is not C++. GCC's attribute means the same. */
#ifndef _Noreturn
#define _Noreturn __attribute__((noreturn))
#define PSC_CUDA_UNDEF_NORETURN
#endif
extern "C" {
#include "log.h"
#include "psc.h"
#include "rng.h"
#include "tower.h"
}
#ifdef PSC_CUDA_UNDEF_NORETURN
#undef _Noreturn
#undef PSC_CUDA_UNDEF_NORETURN
#endif

/* Floats of im2col scratch a conv layer aims for (a GPU wants big GEMMs: 128 MiB,
 * the whole batch for the usual MNIST/CIFAR convs). */
#define CUDA_COL_BUDGET ((int64_t)1 << 25)
/* cuBLAS workspace we hand it (its recommendation for Hopper), so that it never
 * allocates one itself inside a step. */
#define CUBLAS_WORKSPACE_BYTES ((size_t)32 << 20)
/* Row slices of the bias-gradient reduction's first pass. */
#define BIAS_SLICES 64
#define BLOCK 256

/* ---- error checking ---- */

/* The last failure's text, for create's err. */
static thread_local char cuda_last_error[320];

static int cuda_status(cudaError_t e, const char *stmt, const char *file, int line)
{
    if (e == cudaSuccess) return 0;
    snprintf(cuda_last_error, sizeof cuda_last_error, "%s failed at %s:%d: %s (%s)", stmt, file, line,
             cudaGetErrorString(e), cudaGetErrorName(e));
    PSC_ERROR("cuda tower: %s", cuda_last_error);
    /* A failed runtime call also leaves its error pending for this thread: clear
     * it, or the next launch check (cudaGetLastError) would report it again
     * against an unrelated kernel. This only clears non-sticky errors (a bad
     * argument, out of memory); a sticky one (an illegal address or a trap in a
     * kernel) has corrupted the context: every later call on this device fails
     * with it until the process exits, and is logged where it happens. */
    (void)cudaGetLastError();
    return e == cudaErrorMemoryAllocation ? PSC_ENOMEM : PSC_EIO;
}

static int cuda_status(cublasStatus_t s, const char *stmt, const char *file, int line)
{
    if (s == CUBLAS_STATUS_SUCCESS) return 0;
    snprintf(cuda_last_error, sizeof cuda_last_error, "%s failed at %s:%d: %s", stmt, file, line,
             cublasGetStatusString(s));
    PSC_ERROR("cuda tower: %s", cuda_last_error);
    return s == CUBLAS_STATUS_ALLOC_FAILED ? PSC_ENOMEM : PSC_EIO;
}

/* Runs a CUDA runtime or cuBLAS call; on failure logs it and returns its PSC_E* code. */
#define CUDA_CHECK(call)                                                 \
    do {                                                                 \
        int cuda_rc_ = cuda_status((call), #call, __FILE__, __LINE__);   \
        if (cuda_rc_) return cuda_rc_;                                   \
    } while (0)

/* Launches kernel on t's stream with `blocks` blocks of BLOCK threads and checks
 * the launch (errors of earlier asynchronous work surface here too). */
#define CUDA_LAUNCH(t, kernel, blocks, ...)                                                         \
    do {                                                                                            \
        kernel<<<(unsigned)(blocks), BLOCK, 0, (t)->stream>>>(__VA_ARGS__);                         \
        int cuda_rc_ = cuda_status(cudaGetLastError(), #kernel "<<<>>>", __FILE__, __LINE__);       \
        if (cuda_rc_) return cuda_rc_;                                                              \
    } while (0)

/* Blocks for count elements with grid-stride loops (bounded: the loops cover the rest). */
static int64_t blocks_for(int64_t count) { return PSC_MAX((int64_t)1, PSC_MIN((count + BLOCK - 1) / BLOCK, (int64_t)1 << 20)); }

#define GRID_STRIDE(i, count)                                                                 \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (count);             \
         i += (int64_t)gridDim.x * blockDim.x)

/* ---- the tower ---- */

/* Window geometry of a conv2d or max_pool2d layer, passed to kernels by value. */
typedef struct window_geom {
    int in_h, in_w, in_c;
    int out_h, out_w;
    int kh, kw, sh, sw;
    int pad_top, pad_left;
    int col_k;       /* conv2d: kh * kw * in_c */
    int in_size;     /* in_h * in_w * in_c */
} window_geom_t;

typedef struct cuda_layer {
    enum psc_layer_type type;
    enum psc_activation act;
    int in_h, in_w, in_c;      /* input (h, w, c) of one example */
    int out_h, out_w, out_c;   /* output (h, w, c) of one example */
    int64_t in_size, out_size; /* features per example */
    window_geom_t g;           /* conv2d / max_pool2d */
    int col_batch;             /* conv2d: examples per im2col + GEMM chunk */
    float rate;                /* dropout */
    /* device views into the parameter and gradient slabs (NULL where none) */
    float *w, *dw; /* dense (in, units); conv2d (kh, kw, in_c, filters) = (col_k, filters) */
    float *b, *db; /* (units) or (filters) */
    /* device buffers for max_batch examples (NULL where unused) */
    float *out;      /* (B, out_h, out_w, out_c) post-activation; not for flatten */
    float *mask;     /* dropout: (B, out_size), each 0 or 1 / (1 - rate) */
    int32_t *argmax; /* max_pool2d: (B, out_h, out_w, out_c), index into the example's input */
    /* set by each forward pass (device) */
    const float *x; /* (n, in_size) */
    const float *y; /* (n, out_size) */
} cuda_layer_t;

typedef struct cuda_tower {
    tower_t base; /* first: a tower_t * is a cuda_tower_t * */
    int device;
    cudaStream_t stream;
    cublasHandle_t blas; /* bound to stream, with our workspace */
    int num_layers;
    cuda_layer_t *layers; /* (num_layers), host */
    int features, classes, first_trainable;
    int64_t nparams;
    int max_cols; /* widest bias (units / filters) */
    uint64_t peer_tried; /* devices peer_enable has tried */
    /* the device slab and its views */
    void *dmem;
    float *params;    /* (nparams) */
    float *grads;     /* (nparams) d mean loss / d params */
    float *staging;   /* (nparams) reduce_grads: another device's gradients */
    float *x;         /* (B, features) */
    int32_t *labels;  /* (B) */
    float *dbuf[2];   /* 2 x (B, max features of any activation): backward ping-pong */
    float *col;       /* im2col scratch, NULL without conv layers */
    float *partial;   /* (BIAS_SLICES, max_cols) bias gradient partial sums */
    double *row_loss; /* (B) */
    int32_t *row_hit; /* (B) */
    void *workspace;  /* (CUBLAS_WORKSPACE_BYTES) */
    /* the pinned host slab and its views */
    void *hmem;
    float *hx;         /* (B, features) */
    int32_t *hy;       /* (B) */
    double *hrow_loss; /* (B) */
    int32_t *hrow_hit; /* (B) */
} cuda_tower_t;

/* ---- kernels ---- */

static __device__ float act_apply(float v, int act)
{
    switch (act) {
    case PSC_ACT_RELU:
        return v > 0.0f ? v : 0.0f;
    case PSC_ACT_TANH:
        return tanhf(v);
    case PSC_ACT_SIGMOID:
        return 1.0f / (1.0f + expf(-v));
    default:
        return v;
    }
}

/* y (rows, cols) <- act(y + b); b (cols) may be NULL. */
static __global__ void k_bias_act_forward(float *y, const float *b, int64_t count, int cols, int act)
{
    GRID_STRIDE(i, count)
    {
        float v = y[i];
        if (b) v += b[i % cols];
        y[i] = act_apply(v, act);
    }
}

/* dy (count) <- dy * act'(pre-activation), from the outputs y. */
static __global__ void k_act_backward(float *dy, const float *y, int64_t count, int act)
{
    GRID_STRIDE(i, count)
    {
        float o = y[i];
        switch (act) {
        case PSC_ACT_RELU:
            dy[i] = o > 0.0f ? dy[i] : 0.0f;
            break;
        case PSC_ACT_TANH:
            dy[i] *= 1.0f - o * o;
            break;
        case PSC_ACT_SIGMOID:
            dy[i] *= o * (1.0f - o);
            break;
        default:
            break;
        }
    }
}

/* Bias gradient, pass 1: partial (gridDim.y, cols); slice s sums the rows
 * r = s * 8 + ty (mod 8 * gridDim.y) of dy (rows, cols). Block (32, 8): 32
 * columns side by side, so the reads are coalesced. */
static __global__ void k_bias_grad_partial(const float *dy, int64_t rows, int cols, float *partial)
{
    __shared__ float acc[8][33];
    int col = blockIdx.x * 32 + threadIdx.x;
    float sum = 0.0f;
    if (col < cols)
        for (int64_t r = (int64_t)blockIdx.y * 8 + threadIdx.y; r < rows; r += (int64_t)gridDim.y * 8)
            sum += dy[r * cols + col];
    acc[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y == 0 && col < cols) {
        for (int k = 1; k < 8; k++) sum += acc[k][threadIdx.x];
        partial[(int64_t)blockIdx.y * cols + col] = sum;
    }
}

/* Bias gradient, pass 2: db (cols) = the sum of the slices' partials. */
static __global__ void k_bias_grad_final(const float *partial, int slices, int cols, float *db)
{
    GRID_STRIDE(j, cols)
    {
        float sum = 0.0f;
        for (int s = 0; s < slices; s++) sum += partial[(int64_t)s * cols + j];
        db[j] = sum;
    }
}

/* x (m, in_h, in_w, C) -> col (m * out_h * out_w, col_k), a row = one output
 * position's window in (ky, kx, c) order, zeros over the padding. One thread
 * per col element: consecutive threads write consecutive columns. */
static __global__ void k_im2col(const float *__restrict__ x, float *__restrict__ col, int64_t count, window_geom_t g)
{
    GRID_STRIDE(i, count)
    {
        int kk = (int)(i % g.col_k);
        int64_t r = i / g.col_k;
        int c = kk % g.in_c, t = kk / g.in_c;
        int kx = t % g.kw, ky = t / g.kw;
        int ox = (int)(r % g.out_w);
        int64_t r2 = r / g.out_w;
        int oy = (int)(r2 % g.out_h);
        int64_t e = r2 / g.out_h;
        int iy = oy * g.sh - g.pad_top + ky, ix = ox * g.sw - g.pad_left + kx;
        float v = 0.0f;
        if (iy >= 0 && iy < g.in_h && ix >= 0 && ix < g.in_w)
            v = x[e * g.in_size + ((int64_t)iy * g.in_w + ix) * g.in_c + c];
        col[i] = v;
    }
}

/* The output positions whose window covers input index `i` along one dimension:
 * [*lo, *hi] (empty when lo > hi). */
static __device__ void covering(int i, int pad, int k, int s, int out, int *lo, int *hi)
{
    int num = i + pad - k + 1; /* o * s >= num */
    *lo = num <= 0 ? 0 : (num + s - 1) / s;
    *hi = min(out - 1, (i + pad) / s);
}

/* The adjoint of im2col: dx (m, in_h, in_w, C) = col folded back. Gathers: one
 * thread per input element adds the col entries that read it, in (oy, ox) order. */
static __global__ void k_col2im(const float *__restrict__ col, float *__restrict__ dx, int64_t count, window_geom_t g)
{
    GRID_STRIDE(i, count)
    {
        int c = (int)(i % g.in_c);
        int64_t p = i / g.in_c;
        int ix = (int)(p % g.in_w);
        p /= g.in_w;
        int iy = (int)(p % g.in_h);
        int64_t e = p / g.in_h;
        int oy0, oy1, ox0, ox1;
        covering(iy, g.pad_top, g.kh, g.sh, g.out_h, &oy0, &oy1);
        covering(ix, g.pad_left, g.kw, g.sw, g.out_w, &ox0, &ox1);
        float sum = 0.0f;
        for (int oy = oy0; oy <= oy1; oy++) {
            int ky = iy + g.pad_top - oy * g.sh;
            for (int ox = ox0; ox <= ox1; ox++) {
                int kx = ix + g.pad_left - ox * g.sw;
                sum += col[((e * g.out_h + oy) * g.out_w + ox) * g.col_k + (ky * g.kw + kx) * g.in_c + c];
            }
        }
        dx[i] = sum;
    }
}

/* out (n, out_h, out_w, C) = window maxima of x (n, in_h, in_w, C); the first
 * maximum in (ky, kx) order wins; padding never does. argmax: index into the
 * example's input. */
static __global__ void k_maxpool_forward(const float *__restrict__ x, float *__restrict__ out,
                                         int32_t *__restrict__ argmax, int64_t count, window_geom_t g)
{
    GRID_STRIDE(i, count)
    {
        int c = (int)(i % g.in_c);
        int64_t p = i / g.in_c;
        int ox = (int)(p % g.out_w);
        p /= g.out_w;
        int oy = (int)(p % g.out_h);
        int64_t e = p / g.out_h;
        const float *xe = x + e * g.in_size;
        float best = 0.0f;
        int32_t arg = -1;
        for (int ky = 0; ky < g.kh; ky++) {
            int iy = oy * g.sh - g.pad_top + ky;
            if (iy < 0 || iy >= g.in_h) continue;
            for (int kx = 0; kx < g.kw; kx++) {
                int ix = ox * g.sw - g.pad_left + kx;
                if (ix < 0 || ix >= g.in_w) continue;
                int32_t idx = (iy * g.in_w + ix) * g.in_c + c;
                float v = xe[idx];
                if (arg < 0 || v > best) {
                    best = v;
                    arg = idx;
                }
            }
        }
        out[i] = best;
        argmax[i] = arg;
    }
}

/* dx (n, in_h, in_w, C) = dy routed to each window's argmax. Gathers: one thread
 * per input element adds the dy of the windows whose argmax it is, in (oy, ox)
 * order. */
static __global__ void k_maxpool_backward(const float *__restrict__ dy, const int32_t *__restrict__ argmax,
                                          float *__restrict__ dx, int64_t count, window_geom_t g)
{
    GRID_STRIDE(i, count)
    {
        int c = (int)(i % g.in_c);
        int64_t p = i / g.in_c;
        int ix = (int)(p % g.in_w);
        p /= g.in_w;
        int iy = (int)(p % g.in_h);
        int64_t e = p / g.in_h;
        int32_t self = (iy * g.in_w + ix) * g.in_c + c;
        int oy0, oy1, ox0, ox1;
        covering(iy, g.pad_top, g.kh, g.sh, g.out_h, &oy0, &oy1);
        covering(ix, g.pad_left, g.kw, g.sw, g.out_w, &ox0, &ox1);
        float sum = 0.0f;
        for (int oy = oy0; oy <= oy1; oy++)
            for (int ox = ox0; ox <= ox1; ox++) {
                int64_t o = ((e * g.out_h + oy) * g.out_w + ox) * g.in_c + c;
                if (argmax[o] == self) sum += dy[o];
            }
        dx[i] = sum;
    }
}

/* Dropout forward: mask (count) = scale where the unit is kept, else 0, and
 * out = x * mask; unit i is unit element0 + i of the step's batch
 * (psc_dropout_bits, as tower_cpu.c's dropout_forward). */
static __global__ void k_dropout_forward(const float *__restrict__ x, float *__restrict__ mask, float *__restrict__ out,
                                         int64_t count, uint64_t seed, uint32_t layer, uint64_t element0,
                                         uint32_t threshold, float scale)
{
    GRID_STRIDE(i, count)
    {
        float m = psc_dropout_bits(seed, layer, element0 + (uint64_t)i) >= threshold ? scale : 0.0f;
        mask[i] = m;
        out[i] = x[i] * m;
    }
}

/* dy *= mask in place (dropout backward: out = x = dy). */
static __global__ void k_mul(const float *x, const float *mask, float *out, int64_t count)
{
    GRID_STRIDE(i, count) out[i] = x[i] * mask[i];
}

/* Sparse softmax cross-entropy, one warp per row of logits (n, C): row_loss[i]
 * = lse - z[y_i] in double (lse around the row maximum), row_hit[i] = argmax
 * (first maximum) == y_i; dlogits (n, C), when given, = (softmax - onehot) / n. */
static __global__ void k_softmax_xent(const float *__restrict__ logits, const int32_t *__restrict__ y, int n, int C,
                                      float *__restrict__ dlogits, double *__restrict__ row_loss,
                                      int32_t *__restrict__ row_hit)
{
    int row = (int)(((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32);
    int lane = threadIdx.x & 31;
    if (row >= n) return; /* the whole warp: rows are warp-uniform */
    const float *z = logits + (int64_t)row * C;
    float best = 0.0f;
    int arg = C; /* C: this lane has seen nothing */
    for (int j = lane; j < C; j += 32)
        if (arg == C || z[j] > best) {
            best = z[j];
            arg = j;
        }
    for (int off = 16; off > 0; off >>= 1) {
        float ob = __shfl_down_sync(0xffffffffu, best, off);
        int oa = __shfl_down_sync(0xffffffffu, arg, off);
        if (oa < C && (arg == C || ob > best || (ob == best && oa < arg))) {
            best = ob;
            arg = oa;
        }
    }
    arg = __shfl_sync(0xffffffffu, arg, 0);
    double zmax = (double)z[arg], sum = 0.0;
    for (int j = lane; j < C; j += 32) sum += exp((double)z[j] - zmax);
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, off);
    sum = __shfl_sync(0xffffffffu, sum, 0);
    double lse = zmax + log(sum);
    int label = y[row];
    if (lane == 0) {
        row_loss[row] = lse - (double)z[label];
        row_hit[row] = arg == label;
    }
    if (dlogits) {
        float *d = dlogits + (int64_t)row * C;
        for (int j = lane; j < C; j += 32) d[j] = (float)((exp((double)z[j] - lse) - (j == label)) / n);
    }
}

/* dst = a * dst + b * src (src NULL: dst = a * dst); a == 0 clears dst. */
static __global__ void k_accumulate(float *dst, float a, const float *src, float b, int64_t count)
{
    GRID_STRIDE(i, count)
    {
        float v = a == 0.0f ? 0.0f : a * dst[i];
        if (src) v += b * src[i];
        dst[i] = v;
    }
}

/* ---- layers ---- */

/* Row-major C (M, N) = alpha op(A) op(B) + beta C, as the column-major
 * C^T = op(B)^T op(A)^T. */
static int gemm_rm(cuda_tower_t *t, int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                   int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    CUDA_CHECK(cublasSgemm(t->blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K,
                           &alpha, B, ldb, A, lda, &beta, C, ldc));
    return 0;
}

static int bias_act_forward(cuda_tower_t *t, float *y, const float *b, int64_t rows, int cols, enum psc_activation act)
{
    if (!b && act == PSC_ACT_NONE) return 0;
    int64_t count = rows * cols;
    CUDA_LAUNCH(t, k_bias_act_forward, blocks_for(count), y, b, count, cols, (int)act);
    return 0;
}

static int act_backward(cuda_tower_t *t, float *dy, const float *y, int64_t count, enum psc_activation act)
{
    if (act == PSC_ACT_NONE) return 0;
    CUDA_LAUNCH(t, k_act_backward, blocks_for(count), dy, y, count, (int)act);
    return 0;
}

/* db (cols) = sum over the rows of dy (rows, cols). */
static int bias_backward(cuda_tower_t *t, float *db, const float *dy, int64_t rows, int cols)
{
    int slices = (int)PSC_MAX((int64_t)1, PSC_MIN((int64_t)BIAS_SLICES, (rows + 255) / 256));
    dim3 grid((unsigned)((cols + 31) / 32), (unsigned)slices), block(32, 8);
    k_bias_grad_partial<<<grid, block, 0, t->stream>>>(dy, rows, cols, t->partial);
    int rc = cuda_status(cudaGetLastError(), "k_bias_grad_partial<<<>>>", __FILE__, __LINE__);
    if (rc) return rc;
    CUDA_LAUNCH(t, k_bias_grad_final, blocks_for(cols), t->partial, slices, cols, db);
    return 0;
}

static int dense_forward(cuda_tower_t *t, cuda_layer_t *L, int n)
{
    int in = (int)L->in_size, units = L->out_c, rc;
    /* out (n, units) = x (n, in) @ w (in, units), then + b and the activation */
    if ((rc = gemm_rm(t, 0, 0, n, units, in, 1.0f, L->x, in, L->w, units, 0.0f, L->out, units))) return rc;
    return bias_act_forward(t, L->out, L->b, n, units, L->act);
}

/* dy (n, units): w.r.t. the pre-activation. dx (n, in) may be NULL. */
static int dense_backward(cuda_tower_t *t, cuda_layer_t *L, const float *dy, float *dx, int n)
{
    int in = (int)L->in_size, units = L->out_c, rc;
    /* dw (in, units) = x^T (in, n) @ dy (n, units) */
    if ((rc = gemm_rm(t, 1, 0, in, units, n, 1.0f, L->x, in, dy, units, 0.0f, L->dw, units))) return rc;
    if (L->db && (rc = bias_backward(t, L->db, dy, n, units))) return rc;
    /* dx (n, in) = dy (n, units) @ w^T (units, in) */
    if (dx && (rc = gemm_rm(t, 0, 1, n, in, units, 1.0f, dy, units, L->w, units, 0.0f, dx, in))) return rc;
    return 0;
}

static int conv2d_forward(cuda_tower_t *t, cuda_layer_t *L, int n)
{
    int F = L->out_c, K = L->g.col_k, rc;
    int64_t positions = (int64_t)L->out_h * L->out_w;
    for (int e0 = 0; e0 < n; e0 += L->col_batch) {
        int m = PSC_MIN(L->col_batch, n - e0);
        int rows = (int)(m * positions);
        int64_t count = (int64_t)rows * K;
        CUDA_LAUNCH(t, k_im2col, blocks_for(count), L->x + e0 * L->in_size, t->col, count, L->g); /* (rows, K) */
        /* y (rows, F) = col (rows, K) @ w (K, F) */
        float *y = L->out + e0 * L->out_size;
        if ((rc = gemm_rm(t, 0, 0, rows, F, K, 1.0f, t->col, K, L->w, F, 0.0f, y, F))) return rc;
    }
    return bias_act_forward(t, L->out, L->b, n * positions, F, L->act);
}

/* dy (n, out_h, out_w, F): w.r.t. the pre-activation. dx (n, in_size) may be NULL. */
static int conv2d_backward(cuda_tower_t *t, cuda_layer_t *L, const float *dy, float *dx, int n)
{
    int F = L->out_c, K = L->g.col_k, rc;
    int64_t positions = (int64_t)L->out_h * L->out_w;
    if (L->db && (rc = bias_backward(t, L->db, dy, n * positions, F))) return rc;
    for (int e0 = 0; e0 < n; e0 += L->col_batch) {
        int m = PSC_MIN(L->col_batch, n - e0);
        int rows = (int)(m * positions);
        int64_t count = (int64_t)rows * K;
        const float *dyc = dy + e0 * L->out_size; /* (rows, F) */
        /* col (rows, K), recomputed rather than kept */
        CUDA_LAUNCH(t, k_im2col, blocks_for(count), L->x + e0 * L->in_size, t->col, count, L->g);
        /* dw (K, F) (+)= col^T (K, rows) @ dy (rows, F) */
        if ((rc = gemm_rm(t, 1, 0, K, F, rows, 1.0f, t->col, K, dyc, F, e0 ? 1.0f : 0.0f, L->dw, F))) return rc;
        if (!dx) continue;
        /* dcol (rows, K) = dy (rows, F) @ w^T (F, K), into the same scratch */
        if ((rc = gemm_rm(t, 0, 1, rows, K, F, 1.0f, dyc, F, L->w, F, 0.0f, t->col, K))) return rc;
        int64_t in_count = (int64_t)m * L->in_size;
        CUDA_LAUNCH(t, k_col2im, blocks_for(in_count), t->col, dx + e0 * L->in_size, in_count, L->g);
    }
    return 0;
}

/* Layer `layer`'s mask for the n examples first.. of the step's batch, drawn on
 * the device (the same units as tower_cpu.c's dropout_forward), and applied. */
static int dropout_forward(cuda_tower_t *t, cuda_layer_t *L, int n, uint64_t seed, int layer, int64_t first)
{
    float scale = 1.0f / (1.0f - L->rate); /* as the CPU computes it */
    int64_t count = n * L->out_size;
    CUDA_LAUNCH(t, k_dropout_forward, blocks_for(count), L->x, L->mask, L->out, count, seed, (uint32_t)layer,
                (uint64_t)first * (uint64_t)L->out_size, psc_dropout_threshold(L->rate), scale);
    return 0;
}

/* Forward pass over the n examples in t->x; *logits (n, classes). train: dropout
 * on, masks from (dropout_seed, layer, unit index in the batch, t->x holding
 * examples first.. of it), as tower_cpu.c's forward. */
static int forward(cuda_tower_t *t, int n, int train, uint64_t dropout_seed, int64_t first, const float **logits)
{
    const float *h = t->x; /* (n, features) */
    int rc = 0;
    for (int i = 0; i < t->num_layers; i++) {
        cuda_layer_t *L = &t->layers[i];
        L->x = h;
        switch (L->type) {
        case PSC_LAYER_DENSE:
            rc = dense_forward(t, L, n);
            L->y = L->out;
            break;
        case PSC_LAYER_CONV2D:
            rc = conv2d_forward(t, L, n);
            L->y = L->out;
            break;
        case PSC_LAYER_MAX_POOL2D: {
            int64_t count = n * L->out_size;
            CUDA_LAUNCH(t, k_maxpool_forward, blocks_for(count), L->x, L->out, L->argmax, count, L->g);
            L->y = L->out;
            break;
        }
        case PSC_LAYER_FLATTEN:
            L->y = L->x;
            break;
        case PSC_LAYER_DROPOUT:
            if (train) {
                rc = dropout_forward(t, L, n, dropout_seed, i, first);
                L->y = L->out;
            } else {
                L->y = L->x;
            }
            break;
        }
        if (rc) return rc;
        h = L->y;
    }
    *logits = h;
    return 0;
}

static float *other_dbuf(cuda_tower_t *t, const float *p) { return p == t->dbuf[0] ? t->dbuf[1] : t->dbuf[0]; }

/* Backward pass from dlogits (n, classes) in dbuf[0]: fills the gradient slab. */
static int backward(cuda_tower_t *t, float *dlogits, int n)
{
    float *dy = dlogits;
    int rc = 0;
    for (int i = t->num_layers - 1; i >= t->first_trainable; i--) {
        cuda_layer_t *L = &t->layers[i];
        float *dx = i > t->first_trainable ? other_dbuf(t, dy) : NULL;
        switch (L->type) {
        case PSC_LAYER_DENSE:
            if (!(rc = act_backward(t, dy, L->y, n * L->out_size, L->act))) rc = dense_backward(t, L, dy, dx, n);
            break;
        case PSC_LAYER_CONV2D:
            if (!(rc = act_backward(t, dy, L->y, n * L->out_size, L->act))) rc = conv2d_backward(t, L, dy, dx, n);
            break;
        case PSC_LAYER_MAX_POOL2D:
            if (dx) {
                int64_t count = n * L->in_size;
                CUDA_LAUNCH(t, k_maxpool_backward, blocks_for(count), dy, L->argmax, dx, count, L->g);
            }
            break;
        case PSC_LAYER_FLATTEN:
            dx = dy;
            break;
        case PSC_LAYER_DROPOUT: {
            int64_t count = n * L->out_size;
            CUDA_LAUNCH(t, k_mul, blocks_for(count), dy, L->mask, dy, count);
            dx = dy;
            break;
        }
        }
        if (rc) return rc;
        dy = dx;
    }
    return 0;
}

/* The batch's host-side checks (as tower_cpu.c), then x and y to the device
 * through the pinned staging buffers. */
static int load_batch(cuda_tower_t *t, const float *x, const int32_t *y, int n)
{
    if (!x || !y || n < 1 || n > t->base.max_batch) return PSC_EINVAL;
    for (int i = 0; i < n; i++)
        if (y[i] < 0 || y[i] >= t->classes) return PSC_EINVAL;
    size_t xbytes = (size_t)n * (size_t)t->features * sizeof(float);
    memcpy(t->hx, x, xbytes);
    memcpy(t->hy, y, (size_t)n * sizeof(int32_t));
    CUDA_CHECK(cudaMemcpyAsync(t->x, t->hx, xbytes, cudaMemcpyHostToDevice, t->stream));
    CUDA_CHECK(cudaMemcpyAsync(t->labels, t->hy, (size_t)n * sizeof(int32_t), cudaMemcpyHostToDevice, t->stream));
    return 0;
}

/* Queues the loss kernel on logits (n, classes) and the per-row results' copy
 * to the host (read them after synchronizing). dlogits may be NULL. */
static int loss_queue(cuda_tower_t *t, const float *logits, int n, float *dlogits)
{
    CUDA_LAUNCH(t, k_softmax_xent, ((int64_t)n * 32 + BLOCK - 1) / BLOCK, logits, t->labels, n, t->classes, dlogits,
                t->row_loss, t->row_hit);
    CUDA_CHECK(cudaMemcpyAsync(t->hrow_loss, t->row_loss, (size_t)n * sizeof(double), cudaMemcpyDeviceToHost,
                               t->stream));
    CUDA_CHECK(cudaMemcpyAsync(t->hrow_hit, t->row_hit, (size_t)n * sizeof(int32_t), cudaMemcpyDeviceToHost,
                               t->stream));
    return 0;
}

/* The loss sum (in row order, double, as the CPU) and hits of the last loss_queue. */
static double loss_sum_rows(const cuda_tower_t *t, int n, int *hits)
{
    double sum = 0;
    int h = 0;
    for (int i = 0; i < n; i++) {
        sum += t->hrow_loss[i];
        h += t->hrow_hit[i] != 0;
    }
    *hits = h;
    return sum;
}

/* ---- the operations ---- */

/* Every op's single exit once it has queued work on t's stream: waits for the
 * stream whatever rc is. On an error path too: the copies queued from the
 * pinned staging buffers (which the next op refills), to them (which the next
 * op reads) or from and to the caller's buffers (which the caller reuses as
 * soon as we return) may still be running. Keeps the op's first error; after a
 * sticky error the synchronize fails as well (logged). */
static int stream_finish(cuda_tower_t *t, int rc)
{
    int sync = cuda_status(cudaStreamSynchronize(t->stream), "cudaStreamSynchronize(t->stream)", __FILE__, __LINE__);
    return rc ? rc : sync;
}

static int cuda_set_params(tower_t *base, const float *params)
{
    cuda_tower_t *t = (cuda_tower_t *)base;
    CUDA_CHECK(cudaSetDevice(t->device));
    if (!t->nparams) return 0;
    /* the caller may change params once we return */
    return stream_finish(t, cuda_status(cudaMemcpyAsync(t->params, params, (size_t)t->nparams * sizeof(float),
                                                        cudaMemcpyHostToDevice, t->stream),
                                        "cudaMemcpyAsync(t->params, params)", __FILE__, __LINE__));
}

static int cuda_get_grads(tower_t *base, float *grads)
{
    cuda_tower_t *t = (cuda_tower_t *)base;
    CUDA_CHECK(cudaSetDevice(t->device));
    if (!t->nparams) return 0;
    return stream_finish(t, cuda_status(cudaMemcpyAsync(grads, t->grads, (size_t)t->nparams * sizeof(float),
                                                        cudaMemcpyDeviceToHost, t->stream),
                                        "cudaMemcpyAsync(grads, t->grads)", __FILE__, __LINE__));
}

/* Queues a whole step (train_step's work up to its synchronize). */
static int train_queue(cuda_tower_t *t, const float *x, const int32_t *y, int n, uint64_t dropout_seed,
                       int64_t first)
{
    int rc = load_batch(t, x, y, n);
    if (rc) return rc;
    const float *logits; /* (n, classes) */
    if ((rc = forward(t, n, 1, dropout_seed, first, &logits))) return rc;
    float *dlogits = t->dbuf[0]; /* (n, classes) */
    if ((rc = loss_queue(t, logits, n, dlogits))) return rc;
    return backward(t, dlogits, n);
}

static int cuda_train_step(tower_t *base, const float *x, const int32_t *y, int n, uint64_t dropout_seed,
                           int64_t first, float *loss, int *correct)
{
    cuda_tower_t *t = (cuda_tower_t *)base;
    if (first < 0) return PSC_EINVAL;
    CUDA_CHECK(cudaSetDevice(t->device));
    int rc = stream_finish(t, train_queue(t, x, y, n, dropout_seed, first));
    if (rc) return rc;
    int hits;
    double sum = loss_sum_rows(t, n, &hits);
    if (loss) *loss = (float)(sum / n);
    if (correct) *correct = hits;
    return 0;
}

/* Queues an evaluation (evaluate's work up to its synchronize). */
static int evaluate_queue(cuda_tower_t *t, const float *x, const int32_t *y, int n)
{
    int rc = load_batch(t, x, y, n);
    if (rc) return rc;
    const float *logits;
    if ((rc = forward(t, n, 0, 0, 0, &logits))) return rc;
    return loss_queue(t, logits, n, NULL);
}

static int cuda_evaluate(tower_t *base, const float *x, const int32_t *y, int n, double *loss_sum, int *correct)
{
    cuda_tower_t *t = (cuda_tower_t *)base;
    CUDA_CHECK(cudaSetDevice(t->device));
    int rc = stream_finish(t, evaluate_queue(t, x, y, n));
    if (rc) return rc;
    int hits;
    double sum = loss_sum_rows(t, n, &hits);
    if (loss_sum) *loss_sum += sum;
    if (correct) *correct += hits;
    return 0;
}

/* Frees what create made (any part of it); errors are logged, not returned. */
static void cuda_destroy(tower_t *base)
{
    cuda_tower_t *t = (cuda_tower_t *)base;
    if (!t) return;
    if (cuda_status(cudaSetDevice(t->device), "cudaSetDevice(t->device)", __FILE__, __LINE__) == 0) {
        if (t->stream) cuda_status(cudaStreamSynchronize(t->stream), "cudaStreamSynchronize(t->stream)", __FILE__,
                                   __LINE__);
        if (t->blas) cuda_status(cublasDestroy(t->blas), "cublasDestroy(t->blas)", __FILE__, __LINE__);
        if (t->stream) cuda_status(cudaStreamDestroy(t->stream), "cudaStreamDestroy(t->stream)", __FILE__, __LINE__);
        if (t->dmem) cuda_status(cudaFree(t->dmem), "cudaFree(t->dmem)", __FILE__, __LINE__);
        if (t->hmem) cuda_status(cudaFreeHost(t->hmem), "cudaFreeHost(t->hmem)", __FILE__, __LINE__);
    }
    free(t->layers);
    free(t);
}

static int cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* not pending for the next check: device_error tells why */
        return 0;
    }
    return n;
}

/* "major.minor" of a CUDA version number (13000 -> "13.0"). */
static void version_text(int v, char *buf, size_t len) { snprintf(buf, len, "%d.%d", v / 1000, v % 1000 / 10); }

/* Why cudaGetDeviceCount failed, unless that means "no GPU here": the runtime
 * says cudaErrorNoDevice with a driver and no device, and
 * cudaErrorInsufficientDriver with NO driver (cudaDriverGetVersion gives 0),
 * both the CPU-only machine's normal state. Anything else (a driver older than
 * this runtime needs, a driver/library mismatch, no permission on /dev/nvidia*)
 * is a broken GPU node that must not pass for a CPU one. */
static int cuda_device_error(char *why, size_t whylen)
{
    int n = 0, driver = 0, runtime = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (whylen) why[0] = '\0';
    if (e == cudaSuccess || e == cudaErrorNoDevice) {
        (void)cudaGetLastError();
        return 0;
    }
    if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
    if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = 0;
    (void)cudaGetLastError();
    if (e == cudaErrorInsufficientDriver && driver == 0) return 0; /* no NVIDIA driver installed */
    char dv[16], rv[16];
    version_text(driver, dv, sizeof dv);
    version_text(runtime, rv, sizeof rv);
    if (e == cudaErrorInsufficientDriver)
        return psc_seterr(why, whylen, PSC_ECONFIG,
                          "the CUDA driver cannot run this build: %s (%s): the driver supports CUDA %s, this build "
                          "needs CUDA %s (upgrade the NVIDIA driver, or use an image built for CUDA %s)",
                          cudaGetErrorString(e), cudaGetErrorName(e), dv, rv, dv);
    return psc_seterr(why, whylen, PSC_ECONFIG, "cudaGetDeviceCount failed: %s (%s); driver CUDA %s, runtime CUDA %s",
                      cudaGetErrorString(e), cudaGetErrorName(e), dv, rv);
}

/* Once per (tower, peer device): lets t's device reach peer's memory directly
 * for reduce_grads' copies. Best effort, and only for devices a reduce really
 * pairs (enabling all of them would create contexts on GPUs this process does
 * not use): without it cudaMemcpyPeerAsync is staged through host memory. */
static void peer_enable(cuda_tower_t *t, int peer)
{
    if (peer < 0 || peer >= 64 || ((t->peer_tried >> peer) & 1)) return;
    t->peer_tried |= (uint64_t)1 << peer;
    int can = 0;
    cudaError_t e = cudaDeviceCanAccessPeer(&can, t->device, peer);
    if (e == cudaSuccess && can) e = cudaDeviceEnablePeerAccess(peer, 0);
    if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled)
        PSC_WARN("cuda tower: device %d: no peer access to device %d (%s); gradients go through the host", t->device,
                 peer, cudaGetErrorString(e));
    else if (!can)
        PSC_INFO("cuda tower: device %d cannot reach device %d directly; gradients go through the host", t->device,
                 peer);
    (void)cudaGetLastError(); /* none of these outcomes is a pending error */
}

/* Queues reduce_grads' work on dst's stream (see cuda_reduce_grads). */
static int reduce_queue(cuda_tower_t *dst, tower_t *const *srcs, const float *weights, int n)
{
    tower_t *dst_base = &dst->base;
    /* dst may be among srcs: fold its own term in first, then add the others
     * (the CPU tower's order). */
    float self = 0.0f;
    for (int i = 0; i < n; i++)
        if (srcs[i] == dst_base) self += weights[i];
    int64_t count = dst->nparams;
    size_t bytes = (size_t)count * sizeof(float);
    CUDA_LAUNCH(dst, k_accumulate, blocks_for(count), dst->grads, self, (const float *)NULL, 0.0f, count);
    for (int i = 0; i < n; i++) {
        const cuda_tower_t *s = (const cuda_tower_t *)srcs[i];
        if (srcs[i] == dst_base) continue;
        /* s's train_step has returned, so its gradients are complete. Another
         * device's come over into our staging copy first (peer DMA where
         * peer_enable succeeded, else the driver stages the copy through host
         * memory); the stream orders the next copy after this one's kernel. */
        const float *from = s->grads;
        if (s->device != dst->device) {
            peer_enable(dst, s->device);
            CUDA_CHECK(cudaMemcpyPeerAsync(dst->staging, dst->device, s->grads, s->device, bytes, dst->stream));
            from = dst->staging;
        }
        CUDA_LAUNCH(dst, k_accumulate, blocks_for(count), dst->grads, 1.0f, from, weights[i], count);
    }
    return 0;
}

static int cuda_reduce_grads(tower_t *dst_base, tower_t *const *srcs, const float *weights, int n)
{
    cuda_tower_t *dst = (cuda_tower_t *)dst_base;
    CUDA_CHECK(cudaSetDevice(dst->device));
    for (int i = 0; i < n; i++) {
        if (srcs[i]->ops != &tower_cuda_ops) return PSC_EINVAL;
        if (((const cuda_tower_t *)srcs[i])->nparams != dst->nparams) return PSC_EMISMATCH;
    }
    if (!dst->nparams) return 0;
    /* the srcs may start their next step once we return, failed or not */
    return stream_finish(dst, reduce_queue(dst, srcs, weights, n));
}

/* TF padding before the first row/column for one dimension (tower_cpu.c). */
static int pad_before(int in, int out, int k, int s, enum psc_padding pad)
{
    if (pad != PSC_PAD_SAME) return 0;
    int total = PSC_MAX((out - 1) * s + k - in, 0);
    return total / 2;
}

/* Carves aligned views from a slab: run once with base NULL to size it. */
typedef struct carver {
    char *base;
    size_t off;
} carver_t;

static void *carve(carver_t *c, size_t bytes)
{
    size_t off = (c->off + 255) & ~(size_t)255;
    c->off = off + bytes;
    return c->base ? c->base + off : NULL;
}

/* Lays the device and host slabs out (sizing pass when dbase / hbase are NULL). */
static void carve_all(cuda_tower_t *t, char *dbase, char *hbase, int64_t dbuf_floats, int64_t col_floats,
                      size_t *dbytes, size_t *hbytes)
{
    int64_t B = t->base.max_batch;
    carver_t d = {dbase, 0}, h = {hbase, 0};
    t->params = (float *)carve(&d, (size_t)t->nparams * sizeof(float));
    t->grads = (float *)carve(&d, (size_t)t->nparams * sizeof(float));
    t->staging = (float *)carve(&d, (size_t)t->nparams * sizeof(float));
    t->x = (float *)carve(&d, (size_t)(B * t->features) * sizeof(float));
    t->labels = (int32_t *)carve(&d, (size_t)B * sizeof(int32_t));
    for (int i = 0; i < t->num_layers; i++) {
        cuda_layer_t *L = &t->layers[i];
        size_t batch_out = (size_t)(B * L->out_size);
        L->out = L->type != PSC_LAYER_FLATTEN ? (float *)carve(&d, batch_out * sizeof(float)) : NULL;
        L->mask = L->type == PSC_LAYER_DROPOUT ? (float *)carve(&d, batch_out * sizeof(float)) : NULL;
        L->argmax = L->type == PSC_LAYER_MAX_POOL2D ? (int32_t *)carve(&d, batch_out * sizeof(int32_t)) : NULL;
    }
    t->dbuf[0] = (float *)carve(&d, (size_t)dbuf_floats * sizeof(float));
    t->dbuf[1] = (float *)carve(&d, (size_t)dbuf_floats * sizeof(float));
    t->col = col_floats ? (float *)carve(&d, (size_t)col_floats * sizeof(float)) : NULL;
    t->partial = (float *)carve(&d, (size_t)BIAS_SLICES * (size_t)PSC_MAX(t->max_cols, 1) * sizeof(float));
    t->row_loss = (double *)carve(&d, (size_t)B * sizeof(double));
    t->row_hit = (int32_t *)carve(&d, (size_t)B * sizeof(int32_t));
    t->workspace = carve(&d, CUBLAS_WORKSPACE_BYTES);
    t->hx = (float *)carve(&h, (size_t)(B * t->features) * sizeof(float));
    t->hy = (int32_t *)carve(&h, (size_t)B * sizeof(int32_t));
    t->hrow_loss = (double *)carve(&h, (size_t)B * sizeof(double));
    t->hrow_hit = (int32_t *)carve(&h, (size_t)B * sizeof(int32_t));
    *dbytes = d.off;
    *hbytes = h.off;
}

/* The architectures this file was compiled for, "sm_75, sm_80, ..." (nvcc
 * defines __CUDA_ARCH_LIST__ in the host pass too: the virtual architectures,
 * each built as SASS, the newest also as PTX; see CMakeLists.txt). */
static void built_archs(char *buf, size_t len)
{
#ifdef __CUDA_ARCH_LIST__
    static const int archs[] = {__CUDA_ARCH_LIST__};
    size_t at = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof archs / sizeof archs[0] && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%ssm_%d", i ? ", " : "", archs[i] / 10);
#else
    snprintf(buf, len, "no architecture list");
#endif
}

/* Refuses a device this build has no kernel image for (its compute capability
 * is not among the built SASS and older than the PTX): otherwise the first
 * kernel of the first step would fail. The current device is t's. */
static int kernel_image_check(int device, char *err, size_t errlen)
{
    cudaFuncAttributes attr;
    cudaError_t e = cudaFuncGetAttributes(&attr, k_accumulate);
    if (e == cudaSuccess) return 0;
    (void)cudaGetLastError();
    cudaDeviceProp prop;
    char name[sizeof prop.name + 1] = "?";
    int major = 0, minor = 0;
    if (cudaGetDeviceProperties(&prop, device) == cudaSuccess) {
        snprintf(name, sizeof name, "%s", prop.name);
        major = prop.major;
        minor = prop.minor;
    }
    (void)cudaGetLastError();
    char archs[160];
    built_archs(archs, sizeof archs);
    if (e == cudaErrorInvalidDeviceFunction || e == cudaErrorNoKernelImageForDevice)
        return psc_seterr(err, errlen, PSC_EUNSUPPORTED,
                          "cuda tower: device %d (%s, compute capability %d.%d) has no kernel image in this build "
                          "(built for %s): rebuild with -DCMAKE_CUDA_ARCHITECTURES=%d%d if this CUDA supports it, or "
                          "run with --devices cpu",
                          device, name, major, minor, archs, major, minor);
    return psc_seterr(err, errlen, PSC_EIO, "cuda tower: device %d (%s): cudaFuncGetAttributes failed: %s (%s)", device,
                      name, cudaGetErrorString(e), cudaGetErrorName(e));
}

/* The CUDA side of create: device, stream, cuBLAS, the two slabs. */
static int cuda_setup(cuda_tower_t *t, int64_t dbuf_floats, int64_t col_floats)
{
    size_t dbytes, hbytes;
    CUDA_CHECK(cudaSetDevice(t->device));
    CUDA_CHECK(cudaStreamCreateWithFlags(&t->stream, cudaStreamNonBlocking));
    CUDA_CHECK(cublasCreate(&t->blas));
    CUDA_CHECK(cublasSetStream(t->blas, t->stream));
    CUDA_CHECK(cublasSetMathMode(t->blas, CUBLAS_DEFAULT_MATH)); /* FP32, like the CPU tower: no TF32 */

    carve_all(t, NULL, NULL, dbuf_floats, col_floats, &dbytes, &hbytes);
    CUDA_CHECK(cudaMalloc(&t->dmem, dbytes));
    CUDA_CHECK(cudaHostAlloc(&t->hmem, hbytes, cudaHostAllocPortable));
    carve_all(t, (char *)t->dmem, (char *)t->hmem, dbuf_floats, col_floats, &dbytes, &hbytes);
    /* after cublasSetStream, which resets the workspace to cuBLAS's own pool */
    CUDA_CHECK(cublasSetWorkspace(t->blas, t->workspace, CUBLAS_WORKSPACE_BYTES));
    /* Deterministic contents until the first step (get_grads before any step). */
    CUDA_CHECK(cudaMemsetAsync(t->dmem, 0, dbytes, t->stream));
    memset(t->hmem, 0, hbytes);

    CUDA_CHECK(cudaStreamSynchronize(t->stream));
    return 0;
}

static int cuda_create(const psc_job_spec_t *spec, const psc_var_desc_t *vars, int nvars, int max_batch, int device,
                       tower_t **out, char *err, size_t errlen)
{
    *out = NULL;
    if (max_batch < 1)
        return psc_seterr(err, errlen, PSC_EINVAL, "cuda tower: max_batch must be >= 1, got %d", max_batch);
    int ndev = cuda_device_count();
    char why[256];
    if (ndev == 0 && cuda_device_error(why, sizeof why))
        return psc_seterr(err, errlen, PSC_ECONFIG, "cuda tower: no CUDA device %d: %s", device, why);
    if (device < 0 || device >= ndev)
        return psc_seterr(err, errlen, PSC_ENOTFOUND, "cuda tower: no CUDA device %d (%d visible%s)", device, ndev,
                          ndev ? "" : ": no driver or no GPU; check nvidia-smi and CUDA_VISIBLE_DEVICES");
    if (cuda_status(cudaSetDevice(device), "cudaSetDevice(device)", __FILE__, __LINE__))
        return psc_seterr(err, errlen, PSC_EIO, "cuda tower: %s", cuda_last_error);
    int rc = kernel_image_check(device, err, errlen);
    if (rc) return rc;
    int nl = spec->num_layers;
    psc_var_desc_t *want = NULL;
    int nwant = 0;
    int(*shapes)[3] = NULL;
    int64_t *offsets = NULL;
    cuda_tower_t *t = NULL;

    /* The variables must be the spec's model's, in its order (as cpu_create). */
    if ((rc = psc_model_variables(spec, &want, &nwant, err, errlen))) goto fail;
    shapes = (int(*)[3])psc_xcalloc((size_t)nl, sizeof *shapes);
    if ((rc = psc_model_shapes(spec, shapes, err, errlen))) goto fail;
    if (nvars != nwant) {
        rc = psc_seterr(err, errlen, PSC_EMISMATCH, "cuda tower: %d variables given, the model has %d", nvars, nwant);
        goto fail;
    }
    for (int k = 0; k < nvars; k++) {
        int same = vars[k].rank == want[k].rank && vars[k].layer == want[k].layer &&
                   !vars[k].is_step == !want[k].is_step && vars[k].numel == want[k].numel;
        for (int d = 0; same && d < want[k].rank; d++) same = vars[k].shape[d] == want[k].shape[d];
        if (!same) {
            rc = psc_seterr(err, errlen, PSC_EMISMATCH, "cuda tower: variable %d (%s) does not match the model's %s",
                            k, vars[k].name, want[k].name);
            goto fail;
        }
    }

    {
        t = (cuda_tower_t *)psc_xcalloc(1, sizeof *t);
        t->base.ops = &tower_cuda_ops;
        t->base.max_batch = max_batch;
        t->device = device;
        t->num_layers = nl;
        t->layers = (cuda_layer_t *)psc_xcalloc((size_t)nl, sizeof *t->layers);
        offsets = (int64_t *)psc_xcalloc((size_t)nvars, sizeof *offsets);
        t->nparams = tower_layout(vars, nvars, offsets);

        /* Layer geometry: the input is (1, 1, n) for a rank-1 spec. */
        int h = spec->input_rank == 3 ? spec->input_shape[0] : 1;
        int w = spec->input_rank == 3 ? spec->input_shape[1] : 1;
        int c = spec->input_rank == 3 ? spec->input_shape[2] : spec->input_shape[0];
        t->features = h * w * c;
        int64_t max_size = t->features, col_floats = 0;
        for (int i = 0; i < nl; i++) {
            const psc_layer_spec_t *S = &spec->layers[i];
            cuda_layer_t *L = &t->layers[i];
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
                window_geom_t *g = &L->g;
                g->in_h = h;
                g->in_w = w;
                g->in_c = c;
                g->out_h = L->out_h;
                g->out_w = L->out_w;
                g->kh = k[0];
                g->kw = k[1];
                g->sh = S->strides[0];
                g->sw = S->strides[1];
                g->pad_top = pad_before(h, L->out_h, g->kh, g->sh, S->padding);
                g->pad_left = pad_before(w, L->out_w, g->kw, g->sw, S->padding);
                g->in_size = (int)L->in_size;
            }
            if (S->type == PSC_LAYER_CONV2D) {
                int64_t col_k = (int64_t)L->g.kh * L->g.kw * c;
                if (col_k > INT32_MAX) {
                    rc = psc_seterr(err, errlen, PSC_EUNSUPPORTED, "cuda tower: layer %s: window too large", S->name);
                    goto fail;
                }
                L->g.col_k = (int)col_k;
                int64_t per_example = (int64_t)L->out_h * L->out_w * col_k;
                /* cuBLAS dimensions are int: a chunk's rows * col_k must fit */
                int64_t cap = PSC_MIN(CUDA_COL_BUDGET, (int64_t)INT32_MAX);
                L->col_batch = (int)PSC_MAX((int64_t)1, PSC_MIN((int64_t)max_batch, cap / per_example));
                col_floats = PSC_MAX(col_floats, L->col_batch * per_example);
            }
            if (S->type == PSC_LAYER_DENSE || S->type == PSC_LAYER_CONV2D) t->max_cols = PSC_MAX(t->max_cols, L->out_c);
            L->rate = S->type == PSC_LAYER_DROPOUT ? S->rate : 0.0f;
            max_size = PSC_MAX(max_size, L->out_size);
            h = L->out_h;
            w = L->out_w;
            c = L->out_c;
        }
        t->classes = c;

        /* Views of the variables: a rank-1 variable is its layer's bias. The
         * slabs' base pointers are set by carve_all; keep offsets for now. */
        if ((rc = cuda_setup(t, (int64_t)max_batch * max_size, col_floats))) {
            psc_seterr(err, errlen, rc, "cuda tower on device %d: %s", device, cuda_last_error);
            goto fail;
        }
        for (int k = 0; k < nvars; k++) {
            if (vars[k].is_step) continue;
            cuda_layer_t *L = &t->layers[vars[k].layer];
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
    }

    free(want);
    free(shapes);
    free(offsets);
    *out = &t->base;
    return 0;
fail:
    free(want);
    free(shapes);
    free(offsets);
    cuda_destroy(t ? &t->base : NULL);
    return rc;
}

extern "C" const tower_ops_t tower_cuda_ops = {
    /* .name = */ "cuda",
    /* .create = */ cuda_create,
    /* .destroy = */ cuda_destroy,
    /* .set_params = */ cuda_set_params,
    /* .train_step = */ cuda_train_step,
    /* .get_grads = */ cuda_get_grads,
    /* .evaluate = */ cuda_evaluate,
    /* .device_count = */ cuda_device_count,
    /* .reduce_grads = */ cuda_reduce_grads,
    /* .device_error = */ cuda_device_error,
};
