/* tower_cuda.cu — the CUDA backend: cuBLAS GEMMs and CUDA C kernels behind the
 * walk's kernel table (tower_walk.h). Each kernel computes what tower_cpu.c's
 * op computes, the reference it is tested against (tests/unit/test_tower_ops.c
 * op by op, test_tower_cuda.c whole steps), so a step on either backend gives
 * the same loss and gradients to float rounding.
 *
 * Design, after llm.c: open() selects the device, refuses one this build has no
 * kernel image for (kernel_image_check, naming it), makes one stream (non-
 * blocking), one cuBLAS handle bound to it and the backend's own scratch (the
 * bias gradient partial sums and cuBLAS's workspace, so that cuBLAS never
 * allocates inside a step). The walk's slabs come from alloc (ONE cudaMalloc)
 * and host_alloc (ONE pinned cudaHostAlloc, portable). Every kernel, copy and
 * GEMM is queued on the stream; sync waits for it. select() is cudaSetDevice:
 * towers on different GPUs are driven from different threads.
 *
 * copy_peer (reduce_grads) copies another device's gradients with
 * cudaMemcpyPeerAsync on the destination's stream; peer access is enabled
 * lazily, per device pair, where the hardware allows (otherwise the driver
 * stages the copy through host memory). Every CUDA runtime and cuBLAS call,
 * and every kernel launch, goes through CUDA_CHECK / CUDA_LAUNCH, which log the
 * statement, file and line, clear the thread's pending error and return a
 * PSC_E* code (open also puts the text in err); nothing aborts on a CUDA error.
 *
 * cuBLAS is column-major: a row-major (r, c) matrix is its transpose
 * column-major, so C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T.
 *
 * Matching the CPU backend exactly where it is discrete:
 *   - dropout masks are drawn on the device with the counter-based
 *     psc_dropout_bits (rng.h), the function tower_cpu.c calls: both backends
 *     drop the same units, and nothing is drawn on or copied from the host;
 *   - max-pool runs tower_window_argmax (tower_walk.h), the CPU's own: the
 *     first maximum in (ky, kx) order wins;
 *   - the logits' argmax keeps the first maximum; the loss is taken around the
 *     row maximum in double (the walk sums the rows in row order on the host);
 *   - col2im and the max-pool backward gather (one thread per input element,
 *     adding its windows in (oy, ox) order, the order of the CPU's scatter), so
 *     they are deterministic and need no atomics; the bias gradient is a
 *     two-pass reduction into a fixed partial-sum array, also deterministic;
 *   - the CTR kernels sum in the CPU's order too (embedding bags in k order,
 *     the interaction's dots and their gather-adjoint in c and b order), but
 *     the embedding rows' gradients: bags share rows, so k_bag_bwd adds with
 *     atomicAdd and its sums' order varies (the tests allow for it).
 * The GEMMs run in full FP32 (cuBLAS's default math mode, no TF32).
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
#define PSC_HOST_DEVICE __host__ __device__ /* rng.h's Philox, for the dropout kernel */
#include "rng.h"
#include "tower.h"
#define TOWER_KERNEL_FN __host__ __device__
#include "tower_walk.h"
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

/* The last failure's text, for open's err. */
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

/* Launches kernel on d's stream with `blocks` blocks of BLOCK threads and checks
 * the launch (errors of earlier asynchronous work surface here too). */
#define CUDA_LAUNCH(d, kernel, blocks, ...)                                                         \
    do {                                                                                            \
        kernel<<<(unsigned)(blocks), BLOCK, 0, (d)->stream>>>(__VA_ARGS__);                         \
        int cuda_rc_ = cuda_status(cudaGetLastError(), #kernel "<<<>>>", __FILE__, __LINE__);       \
        if (cuda_rc_) return cuda_rc_;                                                              \
    } while (0)

/* Blocks for count elements with grid-stride loops (bounded: the loops cover the rest). */
static int64_t blocks_for(int64_t count) { return PSC_MAX((int64_t)1, PSC_MIN((count + BLOCK - 1) / BLOCK, (int64_t)1 << 20)); }

#define GRID_STRIDE(i, count)                                                                 \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (count);             \
         i += (int64_t)gridDim.x * blockDim.x)

/* ---- the device context ---- */

struct tower_dev {
    int device;
    cudaStream_t stream;
    cublasHandle_t blas; /* bound to stream, with our workspace */
    uint64_t peer_tried; /* devices peer_enable has tried */
    void *scratch;       /* one cudaMalloc: partial, then workspace */
    float *partial;      /* (BIAS_SLICES, max_cols) bias gradient partial sums */
    void *workspace;     /* (CUBLAS_WORKSPACE_BYTES) */
};

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
static __global__ void k_im2col(const float *__restrict__ x, float *__restrict__ col, int64_t count, tower_window_t g)
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
static __global__ void k_col2im(const float *__restrict__ col, float *__restrict__ dx, int64_t count, tower_window_t g)
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
                                         int32_t *__restrict__ argmax, int64_t count, tower_window_t g)
{
    GRID_STRIDE(i, count)
    {
        int c = (int)(i % g.in_c);
        int64_t p = i / g.in_c;
        int ox = (int)(p % g.out_w);
        p /= g.out_w;
        int oy = (int)(p % g.out_h);
        int64_t e = p / g.out_h;
        float best;
        argmax[i] = tower_window_argmax(g, x + e * g.in_size, oy, ox, c, &best);
        out[i] = best;
    }
}

/* dx (n, in_h, in_w, C) = dy routed to each window's argmax. Gathers: one thread
 * per input element adds the dy of the windows whose argmax it is, in (oy, ox)
 * order. */
static __global__ void k_maxpool_backward(const float *__restrict__ dy, const int32_t *__restrict__ argmax,
                                          float *__restrict__ dx, int64_t count, tower_window_t g)
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

/* ---- recommendation (CTR) kernels: one thread per output entry, no atomics but bag_bwd's ---- */

/* Embedding bags: thread (i, j, c) of (n, nbags, dim) sums its bag in k order. */
static __global__ void k_bag_fwd(const float *__restrict__ rows, int dim, const int32_t *__restrict__ off,
                                 const int32_t *__restrict__ idx, const float *__restrict__ w, int64_t count,
                                 int nslots, int slot0, int nbags, float *__restrict__ out, int ldo)
{
    GRID_STRIDE(t, count)
    {
        int c = (int)(t % dim), j = (int)(t / dim % nbags);
        int64_t i = t / dim / nbags, bag = i * nslots + slot0 + j;
        float sum = 0.0f;
        for (int32_t k = off[bag]; k < off[bag + 1]; k++) sum += w[k] * rows[(int64_t)idx[k] * dim + c];
        out[i * ldo + (int64_t)j * dim + c] = sum;
    }
}

/* Its adjoint: the same threads add w[k] * dout into the rows of their bag.
 * Bags of a batch share rows (an id in several examples): atomics, so the
 * order of the sums varies from run to run. */
static __global__ void k_bag_bwd(float *drows, int dim, const int32_t *__restrict__ off,
                                 const int32_t *__restrict__ idx, const float *__restrict__ w, int64_t count,
                                 int nslots, int slot0, int nbags, const float *__restrict__ dout, int ldo)
{
    GRID_STRIDE(t, count)
    {
        int c = (int)(t % dim), j = (int)(t / dim % nbags);
        int64_t i = t / dim / nbags, bag = i * nslots + slot0 + j;
        float g = dout[i * ldo + (int64_t)j * dim + c];
        for (int32_t k = off[bag]; k < off[bag + 1]; k++) atomicAdd(&drows[(int64_t)idx[k] * dim + c], w[k] * g);
    }
}

/* Pair (a, b), a < b, of P vectors: its column among the dots (tower_walk.h). */
static __device__ int64_t pair_index(int a, int b, int P) { return (int64_t)a * P - (int64_t)a * (a + 1) / 2 + b - a - 1; }

/* DLRM's dots: thread (i, q) of (n, P (P - 1) / 2); q decoded row by row. */
static __global__ void k_interact_fwd(const float *__restrict__ v, int P, int D, int64_t count, int npairs,
                                      float *__restrict__ out, int ldo)
{
    GRID_STRIDE(t, count)
    {
        int64_t i = t / npairs;
        int q = (int)(t % npairs), a = 0;
        for (; q >= P - 1 - a; a++) q -= P - 1 - a;
        const float *va = v + (i * P + a) * D, *vb = v + (i * P + a + 1 + q) * D;
        float dot = 0.0f;
        for (int c = 0; c < D; c++) dot += va[c] * vb[c];
        out[i * ldo + t % npairs] = dot;
    }
}

/* The dots' adjoint, a gather: thread (i, a, c) of (n, P, D) sums over the partners b in order. */
static __global__ void k_interact_bwd(const float *__restrict__ v, const float *__restrict__ dout, int ldo, int P,
                                      int D, int64_t count, float *__restrict__ dv)
{
    GRID_STRIDE(t, count)
    {
        int c = (int)(t % D), a = (int)(t / D % P);
        int64_t i = t / D / P;
        const float *g = dout + i * ldo;
        float sum = 0.0f;
        for (int b = 0; b < P; b++)
            if (b != a) sum += g[a < b ? pair_index(a, b, P) : pair_index(b, a, P)] * v[(i * P + b) * D + c];
        dv[t] = sum;
    }
}

/* Sigmoid cross-entropy, one thread per row, in double (tower_walk.h). */
static __global__ void k_sigmoid_xent(const float *__restrict__ logits, const float *__restrict__ y, int n,
                                      float *__restrict__ dlogits, double *__restrict__ row_loss)
{
    GRID_STRIDE(i, n)
    {
        double z = logits[i], label = y[i];
        row_loss[i] = fmax(z, 0.0) - z * label + log1p(exp(-fabs(z)));
        if (dlogits) dlogits[i] = (float)((1.0 / (1.0 + exp(-z)) - label) / n);
    }
}

static __global__ void k_copy2d(float *__restrict__ dst, int ldd, const float *__restrict__ src, int lds, int64_t count,
                                int cols, int add)
{
    GRID_STRIDE(t, count)
    {
        int64_t r = t / cols;
        int c = (int)(t % cols);
        float s = src[r * lds + c];
        dst[r * ldd + c] = add ? dst[r * ldd + c] + s : s;
    }
}

/* ---- kernels behind the table ---- */

/* Row-major C (M, N) = alpha op(A) op(B) + beta C, as the column-major
 * C^T = op(B)^T op(A)^T. */
static int cuda_gemm(tower_dev_t *d, int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                     int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    CUDA_CHECK(cublasSgemm(d->blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K,
                           &alpha, B, ldb, A, lda, &beta, C, ldc));
    return 0;
}

static int cuda_im2col(tower_dev_t *d, tower_window_t g, const float *x, int m, float *col)
{
    int64_t count = (int64_t)m * g.out_h * g.out_w * g.col_k;
    CUDA_LAUNCH(d, k_im2col, blocks_for(count), x, col, count, g);
    return 0;
}

static int cuda_col2im(tower_dev_t *d, tower_window_t g, const float *col, int m, float *dx)
{
    int64_t count = (int64_t)m * g.in_size;
    CUDA_LAUNCH(d, k_col2im, blocks_for(count), col, dx, count, g);
    return 0;
}

static int cuda_bias_act(tower_dev_t *d, float *y, const float *b, int64_t rows, int cols, enum psc_activation act)
{
    if (!b && act == PSC_ACT_NONE) return 0;
    int64_t count = rows * cols;
    CUDA_LAUNCH(d, k_bias_act_forward, blocks_for(count), y, b, count, cols, (int)act);
    return 0;
}

/* The convolutions, composed as the table's reference has them: im2col into
 * the walk's scratch, one GEMM, then the bias and activation / col2im. */
static int cuda_conv_fwd(tower_dev_t *d, tower_window_t g, const float *x, int m, const float *w, const float *b,
                         enum psc_activation act, float *y, float *col)
{
    int rows = m * g.out_h * g.out_w, F = g.filters, K = g.col_k, rc;
    if ((rc = cuda_im2col(d, g, x, m, col))) return rc; /* col (rows, K) */
    /* y (rows, F) = col (rows, K) @ w (K, F) */
    if ((rc = cuda_gemm(d, 0, 0, rows, F, K, 1.0f, col, K, w, F, 0.0f, y, F))) return rc;
    return cuda_bias_act(d, y, b, rows, F, act);
}

static int cuda_conv_bwd_data(tower_dev_t *d, tower_window_t g, const float *dy, int m, const float *w, float *dx,
                              float *col)
{
    int rows = m * g.out_h * g.out_w, F = g.filters, K = g.col_k, rc;
    /* dcol (rows, K) = dy (rows, F) @ w^T (F, K) */
    if ((rc = cuda_gemm(d, 0, 1, rows, K, F, 1.0f, dy, F, w, F, 0.0f, col, K))) return rc;
    return cuda_col2im(d, g, col, m, dx);
}

static int cuda_conv_bwd_weights(tower_dev_t *d, tower_window_t g, const float *x, const float *dy, int m, float *dw,
                                 int accumulate, float *col)
{
    int rows = m * g.out_h * g.out_w, F = g.filters, K = g.col_k, rc;
    if ((rc = cuda_im2col(d, g, x, m, col))) return rc;
    /* dw (K, F) (+)= col^T (K, rows) @ dy (rows, F) */
    return cuda_gemm(d, 1, 0, K, F, rows, 1.0f, col, K, dy, F, accumulate ? 1.0f : 0.0f, dw, F);
}

static int cuda_act_backward(tower_dev_t *d, float *dy, const float *y, int64_t count, enum psc_activation act)
{
    if (act == PSC_ACT_NONE) return 0;
    CUDA_LAUNCH(d, k_act_backward, blocks_for(count), dy, y, count, (int)act);
    return 0;
}

/* Two passes through d's partial-sum scratch (sized at open for max_cols). */
static int cuda_bias_grad(tower_dev_t *d, float *db, const float *dy, int64_t rows, int cols)
{
    int slices = (int)PSC_MAX((int64_t)1, PSC_MIN((int64_t)BIAS_SLICES, (rows + 255) / 256));
    dim3 grid((unsigned)((cols + 31) / 32), (unsigned)slices), block(32, 8);
    k_bias_grad_partial<<<grid, block, 0, d->stream>>>(dy, rows, cols, d->partial);
    int rc = cuda_status(cudaGetLastError(), "k_bias_grad_partial<<<>>>", __FILE__, __LINE__);
    if (rc) return rc;
    CUDA_LAUNCH(d, k_bias_grad_final, blocks_for(cols), d->partial, slices, cols, db);
    return 0;
}

static int cuda_maxpool_fwd(tower_dev_t *d, tower_window_t g, const float *x, int n, float *out, int32_t *argmax)
{
    int64_t count = (int64_t)n * g.out_h * g.out_w * g.in_c;
    CUDA_LAUNCH(d, k_maxpool_forward, blocks_for(count), x, out, argmax, count, g);
    return 0;
}

static int cuda_maxpool_bwd(tower_dev_t *d, tower_window_t g, const float *dy, const int32_t *argmax, int n, float *dx)
{
    int64_t count = (int64_t)n * g.in_size;
    CUDA_LAUNCH(d, k_maxpool_backward, blocks_for(count), dy, argmax, dx, count, g);
    return 0;
}

static int cuda_dropout_fwd(tower_dev_t *d, const float *x, float *mask, float *out, int64_t count, uint64_t seed,
                            uint32_t layer, uint64_t element0, uint32_t threshold, float scale)
{
    CUDA_LAUNCH(d, k_dropout_forward, blocks_for(count), x, mask, out, count, seed, layer, element0, threshold, scale);
    return 0;
}

static int cuda_mul(tower_dev_t *d, const float *x, const float *m, float *out, int64_t count)
{
    CUDA_LAUNCH(d, k_mul, blocks_for(count), x, m, out, count);
    return 0;
}

/* One warp per row. */
static int cuda_softmax_xent(tower_dev_t *d, const float *logits, const int32_t *y, int n, int C, float *dlogits,
                             double *row_loss, int32_t *row_hit)
{
    CUDA_LAUNCH(d, k_softmax_xent, ((int64_t)n * 32 + BLOCK - 1) / BLOCK, logits, y, n, C, dlogits, row_loss, row_hit);
    return 0;
}

static int cuda_accumulate(tower_dev_t *d, float *dst, float a, const float *src, float b, int64_t count)
{
    CUDA_LAUNCH(d, k_accumulate, blocks_for(count), dst, a, src, b, count);
    return 0;
}

static int cuda_bag_fwd(tower_dev_t *d, const float *rows, int dim, const int32_t *off, const int32_t *idx,
                        const float *w, int n, int nslots, int slot0, int nbags, float *out, int ldo)
{
    int64_t count = (int64_t)n * nbags * dim;
    CUDA_LAUNCH(d, k_bag_fwd, blocks_for(count), rows, dim, off, idx, w, count, nslots, slot0, nbags, out, ldo);
    return 0;
}

static int cuda_bag_bwd(tower_dev_t *d, float *drows, int dim, const int32_t *off, const int32_t *idx, const float *w,
                        int n, int nslots, int slot0, int nbags, const float *dout, int ldo)
{
    int64_t count = (int64_t)n * nbags * dim;
    CUDA_LAUNCH(d, k_bag_bwd, blocks_for(count), drows, dim, off, idx, w, count, nslots, slot0, nbags, dout, ldo);
    return 0;
}

static int cuda_interact_fwd(tower_dev_t *d, const float *v, int n, int P, int D, float *out, int ldo)
{
    int npairs = P * (P - 1) / 2;
    int64_t count = (int64_t)n * npairs;
    if (count == 0) return 0;
    CUDA_LAUNCH(d, k_interact_fwd, blocks_for(count), v, P, D, count, npairs, out, ldo);
    return 0;
}

static int cuda_interact_bwd(tower_dev_t *d, const float *v, const float *dout, int ldo, int n, int P, int D,
                             float *dv)
{
    int64_t count = (int64_t)n * P * D;
    CUDA_LAUNCH(d, k_interact_bwd, blocks_for(count), v, dout, ldo, P, D, count, dv);
    return 0;
}

static int cuda_sigmoid_xent(tower_dev_t *d, const float *logits, const float *y, int n, float *dlogits,
                             double *row_loss)
{
    CUDA_LAUNCH(d, k_sigmoid_xent, blocks_for(n), logits, y, n, dlogits, row_loss);
    return 0;
}

static int cuda_copy2d(tower_dev_t *d, float *dst, int ldd, const float *src, int lds, int rows, int cols, int add)
{
    int64_t count = (int64_t)rows * cols;
    if (count == 0) return 0;
    CUDA_LAUNCH(d, k_copy2d, blocks_for(count), dst, ldd, src, lds, count, cols, add);
    return 0;
}

/* ---- memory ---- */

static int cuda_select(tower_dev_t *d)
{
    CUDA_CHECK(cudaSetDevice(d->device));
    return 0;
}

static int cuda_sync(tower_dev_t *d)
{
    CUDA_CHECK(cudaStreamSynchronize(d->stream));
    return 0;
}

/* One cudaMalloc, zeroed (deterministic contents until the first step). */
static int cuda_alloc(tower_dev_t *d, size_t bytes, void **out)
{
    CUDA_CHECK(cudaMalloc(out, bytes));
    CUDA_CHECK(cudaMemsetAsync(*out, 0, bytes, d->stream));
    return cuda_sync(d);
}

static void cuda_free(tower_dev_t *d, void *p)
{
    (void)d;
    cuda_status(cudaFree(p), "cudaFree(p)", __FILE__, __LINE__);
}

/* Pinned, portable (any device's stream may copy from it). */
static int cuda_host_alloc(tower_dev_t *d, size_t bytes, void **out)
{
    (void)d;
    CUDA_CHECK(cudaHostAlloc(out, bytes, cudaHostAllocPortable));
    memset(*out, 0, bytes);
    return 0;
}

static void cuda_host_free(tower_dev_t *d, void *p)
{
    (void)d;
    cuda_status(cudaFreeHost(p), "cudaFreeHost(p)", __FILE__, __LINE__);
}

static int cuda_upload(tower_dev_t *d, void *dst, const void *host_src, size_t bytes)
{
    CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, d->stream));
    return 0;
}

static int cuda_download(tower_dev_t *d, void *host_dst, const void *src, size_t bytes)
{
    CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, d->stream));
    return 0;
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

/* Once per (device context, peer device): lets d's device reach peer's memory directly
 * for reduce_grads' copies. Best effort, and only for devices a reduce really
 * pairs (enabling all of them would create contexts on GPUs this process does
 * not use): without it cudaMemcpyPeerAsync is staged through host memory. */
static void peer_enable(tower_dev_t *d, int peer)
{
    if (peer < 0 || peer >= 64 || ((d->peer_tried >> peer) & 1)) return;
    d->peer_tried |= (uint64_t)1 << peer;
    int can = 0;
    cudaError_t e = cudaDeviceCanAccessPeer(&can, d->device, peer);
    if (e == cudaSuccess && can) e = cudaDeviceEnablePeerAccess(peer, 0);
    if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled)
        PSC_WARN("cuda tower: device %d: no peer access to device %d (%s); gradients go through the host", d->device,
                 peer, cudaGetErrorString(e));
    else if (!can)
        PSC_INFO("cuda tower: device %d cannot reach device %d directly; gradients go through the host", d->device,
                 peer);
    (void)cudaGetLastError(); /* none of these outcomes is a pending error */
}


/* dst (d's device) <- src (from's device), on d's stream: peer DMA where
 * peer_enable succeeded, else the driver stages it through host memory. */
static int cuda_copy_peer(tower_dev_t *d, void *dst, tower_dev_t *from, const void *src, size_t bytes)
{
    peer_enable(d, from->device);
    CUDA_CHECK(cudaMemcpyPeerAsync(dst, d->device, src, from->device, bytes, d->stream));
    return 0;
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


/* Frees what open made (any part of it); errors are logged, not returned. */
static void cuda_close(tower_dev_t *d)
{
    if (!d) return;
    if (cuda_status(cudaSetDevice(d->device), "cudaSetDevice(d->device)", __FILE__, __LINE__) == 0) {
        if (d->stream) cuda_status(cudaStreamSynchronize(d->stream), "cudaStreamSynchronize(d->stream)", __FILE__,
                                   __LINE__);
        if (d->blas) cuda_status(cublasDestroy(d->blas), "cublasDestroy(d->blas)", __FILE__, __LINE__);
        if (d->stream) cuda_status(cudaStreamDestroy(d->stream), "cudaStreamDestroy(d->stream)", __FILE__, __LINE__);
        if (d->scratch) cuda_status(cudaFree(d->scratch), "cudaFree(d->scratch)", __FILE__, __LINE__);
    }
    free(d);
}

/* The CUDA side of open: stream, cuBLAS, the scratch. */
static int cuda_setup(tower_dev_t *d, int max_cols)
{
    size_t partial_bytes = ((size_t)BIAS_SLICES * (size_t)PSC_MAX(max_cols, 1) * sizeof(float) + 255) & ~(size_t)255;
    CUDA_CHECK(cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking));
    CUDA_CHECK(cublasCreate(&d->blas));
    CUDA_CHECK(cublasSetStream(d->blas, d->stream));
    CUDA_CHECK(cublasSetMathMode(d->blas, CUBLAS_DEFAULT_MATH)); /* FP32, like the CPU backend: no TF32 */
    CUDA_CHECK(cudaMalloc(&d->scratch, partial_bytes + CUBLAS_WORKSPACE_BYTES));
    d->partial = (float *)d->scratch;
    d->workspace = (char *)d->scratch + partial_bytes;
    /* after cublasSetStream, which resets the workspace to cuBLAS's own pool */
    CUDA_CHECK(cublasSetWorkspace(d->blas, d->workspace, CUBLAS_WORKSPACE_BYTES));
    CUDA_CHECK(cudaMemsetAsync(d->scratch, 0, partial_bytes, d->stream));
    return cuda_sync(d);
}

static int cuda_open(int device, int max_cols, tower_dev_t **out, char *err, size_t errlen)
{
    *out = NULL;
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
    tower_dev_t *d = (tower_dev_t *)psc_xcalloc(1, sizeof *d);
    d->device = device;
    if ((rc = cuda_setup(d, max_cols))) {
        psc_seterr(err, errlen, rc, "cuda tower on device %d: %s", device, cuda_last_error);
        cuda_close(d);
        return rc;
    }
    *out = d;
    return 0;
}

/* ---- the tables ---- */

static const tower_backend_ops_t cuda_backend = {
    /* .name = */ "cuda",
    /* .col_budget = */ CUDA_COL_BUDGET,
    /* .open = */ cuda_open,
    /* .close = */ cuda_close,
    /* .select = */ cuda_select,
    /* .alloc = */ cuda_alloc,
    /* .free = */ cuda_free,
    /* .host_alloc = */ cuda_host_alloc,
    /* .host_free = */ cuda_host_free,
    /* .upload = */ cuda_upload,
    /* .download = */ cuda_download,
    /* .copy_peer = */ cuda_copy_peer,
    /* .sync = */ cuda_sync,
    /* .gemm = */ cuda_gemm,
    /* .im2col = */ cuda_im2col,
    /* .col2im = */ cuda_col2im,
    /* .conv_fwd = */ cuda_conv_fwd,
    /* .conv_bwd_data = */ cuda_conv_bwd_data,
    /* .conv_bwd_weights = */ cuda_conv_bwd_weights,
    /* .bias_act = */ cuda_bias_act,
    /* .act_backward = */ cuda_act_backward,
    /* .bias_grad = */ cuda_bias_grad,
    /* .maxpool_fwd = */ cuda_maxpool_fwd,
    /* .maxpool_bwd = */ cuda_maxpool_bwd,
    /* .dropout_fwd = */ cuda_dropout_fwd,
    /* .mul = */ cuda_mul,
    /* .softmax_xent = */ cuda_softmax_xent,
    /* .accumulate = */ cuda_accumulate,
    /* .bag_fwd = */ cuda_bag_fwd,
    /* .bag_bwd = */ cuda_bag_bwd,
    /* .interact_fwd = */ cuda_interact_fwd,
    /* .interact_bwd = */ cuda_interact_bwd,
    /* .sigmoid_xent = */ cuda_sigmoid_xent,
    /* .copy2d = */ cuda_copy2d,
};

extern "C" const tower_ops_t tower_cuda_ops;

static int cuda_create(const psc_job_spec_t *spec, const psc_var_desc_t *vars, int nvars, int max_batch, int device,
                       tower_t **out, char *err, size_t errlen)
{
    return tower_walk_create(&cuda_backend, &tower_cuda_ops, spec, vars, nvars, max_batch, device, out, err, errlen);
}

extern "C" const tower_ops_t tower_cuda_ops = {
    /* .name = */ "cuda",
    /* .create = */ cuda_create,
    /* .destroy = */ tower_walk_destroy,
    /* .set_params = */ tower_walk_set_params,
    /* .train_step = */ tower_walk_train_step,
    /* .get_grads = */ tower_walk_get_grads,
    /* .evaluate = */ tower_walk_evaluate,
    /* .predict = */ tower_walk_predict,
    /* .device_count = */ cuda_device_count,
    /* .reduce_grads = */ tower_walk_reduce_grads,
    /* .device_error = */ cuda_device_error,
    /* .backend = */ &cuda_backend,
};
