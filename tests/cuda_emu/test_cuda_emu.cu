/* test_cuda_emu — the CUDA emulation's own checks (CTest unit.test_cuda_emu):
 * that it computes what CUDA computes (grid and block indices, shared memory
 * with __syncthreads, warp shuffles, atomicAdd, cuBLAS's column-major GEMM) and
 * that every mistake it claims to catch is caught: the call fails with an error code and
 * one "cuda emu: MISTAKE" line is counted. Written in CUDA C (this file goes
 * through the same launch rewrite as worker/tower/tower_cuda.cu); it needs the
 * emulation's controls (cuda_emu.h), so it runs only on the emulation.
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" { /* this cmocka.h has no C++ guard */
#include <cmocka.h>
}

#include "cuda_emu.h"

#define OK(call) assert_int_equal((int)(call), 0)

/* The call fails with `code` and exactly one mistake is reported. */
#define MISTAKE(code, call)                                   \
    do {                                                      \
        long m0_ = cuda_emu_mistakes();                       \
        assert_int_equal((int)(call), (int)(code));           \
        assert_int_equal(cuda_emu_mistakes(), m0_ + 1);       \
    } while (0)

static cudaStream_t stream0(void)
{
    cudaStream_t s;
    OK(cudaSetDevice(0));
    OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
}

/* ---- kernels ---- */

/* out[linear thread id] = packed (block, thread) indices */
static __global__ void k_ids(unsigned *out)
{
    unsigned b = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    unsigned t = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    unsigned nt = blockDim.x * blockDim.y * blockDim.z;
    out[b * nt + t] = b * 1000 + t;
}

/* Reverses each block's 64 values through shared memory; without the barrier
 * a thread reads a slot its partner has not written yet. */
static __global__ void k_reverse(const float *in, float *out, int barrier)
{
    __shared__ float s[64];
    unsigned i = blockIdx.x * 64 + threadIdx.x;
    s[threadIdx.x] = in[i];
    if (barrier) __syncthreads();
    out[i] = s[63 - threadIdx.x];
}

/* Warp sums with __shfl_down_sync, lane 0 writes; `quit` lanes >= 16 return first. */
static __global__ void k_warp_sum(const float *in, float *out, int quit)
{
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x, lane = threadIdx.x & 31;
    if (quit && lane >= 16) return;
    float v = in[i];
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    v = __shfl_sync(0xffffffffu, v, 0); /* everybody gets lane 0's */
    if (lane == 5) out[i / 32] = v;
}

/* Lane 0 waits in a shuffle with lane 1, which waits in __syncthreads. */
static __global__ void k_deadlock(float *out)
{
    if (threadIdx.x == 0) out[0] = __shfl_sync(0x3u, 1.0f, 1);
    else if (threadIdx.x == 1) __syncthreads();
}

/* Every thread adds to out[i % 3] before and after a barrier (threads parked
 * in __syncthreads resume between the adds of others) and takes a ticket. */
static __global__ void k_atomics(float *out, int *tickets, int *next)
{
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    atomicAdd(&out[i % 3], 1.0f);
    __syncthreads();
    atomicAdd(&out[i % 3], 0.5f);
    tickets[i] = atomicAdd(next, 1);
}

static __global__ void k_scale(float *x, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}

/* ---- tests ---- */

static void test_devices(void **state)
{
    (void)state;
    int n = -1, d = -1;
    OK(cudaGetDeviceCount(&n));
    assert_int_equal(n, 2); /* CTest sets PSC_EMU_DEVICES=2 */
    cudaDeviceProp p;
    OK(cudaGetDeviceProperties(&p, 1));
    assert_string_equal(p.name, "psc emulated device");
    assert_true(p.major >= 8);
    OK(cudaSetDevice(1));
    OK(cudaGetDevice(&d));
    assert_int_equal(d, 1);
    assert_int_equal(cudaSetDevice(2), cudaErrorInvalidDevice);
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidDevice);
    assert_int_equal(cudaGetLastError(), cudaSuccess);
    OK(cudaSetDevice(0));
    int can = -1;
    OK(cudaDeviceCanAccessPeer(&can, 0, 1));
    assert_int_equal(can, 1);
    OK(cudaDeviceCanAccessPeer(&can, 0, 0));
    assert_int_equal(can, 0);
    cudaFuncAttributes fa;
    OK(cudaFuncGetAttributes(&fa, k_scale));
}

/* Fresh device memory reads as NaN; stream work waits for a synchronization. */
static void test_nan_and_deferral(void **state)
{
    (void)state;
    cudaStream_t s = stream0();
    float *d, *h;
    OK(cudaMalloc((void **)&d, 64 * sizeof(float)));
    OK(cudaHostAlloc((void **)&h, 64 * sizeof(float), cudaHostAllocPortable));
    for (int i = 0; i < 64; i++) h[i] = 7.0f;
    OK(cudaMemcpyAsync(h, d, 64 * sizeof(float), cudaMemcpyDeviceToHost, s));
    assert_true(h[0] == 7.0f); /* not yet */
    assert_true(cuda_emu_pending() > 0);
    OK(cudaStreamSynchronize(s));
    for (int i = 0; i < 64; i++) assert_true(isnan(h[i]));
    assert_int_equal(cuda_emu_pending(), 0);
    /* h -> d, a kernel, d -> h: nothing happens until the sync */
    for (int i = 0; i < 64; i++) h[i] = (float)i;
    OK(cudaMemcpyAsync(d, h, 64 * sizeof(float), cudaMemcpyHostToDevice, s));
    k_scale<<<2, 32, 0, s>>>(d, 2.0f, 64);
    OK(cudaGetLastError());
    OK(cudaMemcpyAsync(h, d, 64 * sizeof(float), cudaMemcpyDeviceToHost, s));
    assert_true(h[3] == 3.0f);
    OK(cudaStreamSynchronize(s));
    assert_true(h[3] == 6.0f && h[63] == 126.0f);
    /* a copy into pageable memory completes before it returns (as CUDA's) */
    float pageable[64];
    k_scale<<<2, 32, 0, s>>>(d, 0.5f, 64);
    OK(cudaMemcpyAsync(pageable, d, sizeof pageable, cudaMemcpyDeviceToHost, s));
    assert_true(pageable[10] == 10.0f);
    /* the legacy stream's cudaMemcpy does not wait for a non-blocking stream */
    k_scale<<<2, 32, 0, s>>>(d, 3.0f, 64);
    OK(cudaMemcpy(pageable, d, sizeof pageable, cudaMemcpyDeviceToHost));
    assert_true(pageable[10] == 10.0f); /* stale: the kernel has not run */
    OK(cudaDeviceSynchronize());
    OK(cudaMemcpy(pageable, d, sizeof pageable, cudaMemcpyDeviceToHost));
    assert_true(pageable[10] == 30.0f);
    /* memset */
    OK(cudaMemsetAsync(d, 0, 64 * sizeof(float), s));
    OK(cudaMemcpyAsync(pageable, d, sizeof pageable, cudaMemcpyDeviceToHost, s));
    assert_true(pageable[63] == 0.0f);
    OK(cudaFree(d));
    OK(cudaFreeHost(h));
    OK(cudaStreamDestroy(s));
}

static void test_grid_indices(void **state)
{
    (void)state;
    cudaStream_t s = stream0();
    dim3 grid(3, 2, 2), block(4, 3, 2);
    enum { N = 12 * 24 };
    unsigned *d, h[N];
    OK(cudaMalloc((void **)&d, sizeof h));
    k_ids<<<grid, block, 0, s>>>(d);
    OK(cudaGetLastError());
    OK(cudaMemcpyAsync(h, d, sizeof h, cudaMemcpyDeviceToHost, s));
    for (unsigned i = 0; i < N; i++) assert_int_equal(h[i], i / 24 * 1000 + i % 24);
    MISTAKE(cudaErrorInvalidConfiguration, (k_ids<<<1, 2048, 0, s>>>(d), cudaGetLastError()));
    OK(cudaFree(d));
    OK(cudaStreamDestroy(s));
}

static void test_shared_and_barrier(void **state)
{
    (void)state;
    cudaStream_t s = stream0();
    enum { N = 256 };
    float *in, *out, h[N];
    OK(cudaMalloc((void **)&in, sizeof h));
    OK(cudaMalloc((void **)&out, sizeof h));
    for (int i = 0; i < N; i++) h[i] = (float)i;
    OK(cudaMemcpyAsync(in, h, sizeof h, cudaMemcpyHostToDevice, s));
    k_reverse<<<N / 64, 64, 0, s>>>(in, out, 1);
    OK(cudaMemcpyAsync(h, out, sizeof h, cudaMemcpyDeviceToHost, s));
    for (int i = 0; i < N; i++) assert_true(h[i] == (float)(i / 64 * 64 + 63 - i % 64));
    /* without the barrier: thread 0 reads slot 63 before thread 63 wrote it (NaN) */
    k_reverse<<<N / 64, 64, 0, s>>>(in, out, 0);
    OK(cudaMemcpyAsync(h, out, sizeof h, cudaMemcpyDeviceToHost, s));
    assert_true(isnan(h[0]));
    OK(cudaFree(in));
    OK(cudaFree(out));
    OK(cudaStreamDestroy(s));
}

static void test_shuffles(void **state)
{
    (void)state;
    cudaStream_t s = stream0();
    enum { N = 128 };
    float *in, *out, h[N];
    OK(cudaMalloc((void **)&in, sizeof h));
    OK(cudaMalloc((void **)&out, sizeof h));
    for (int i = 0; i < N; i++) h[i] = (float)i;
    OK(cudaMemcpyAsync(in, h, sizeof h, cudaMemcpyHostToDevice, s));
    k_warp_sum<<<2, 64, 0, s>>>(in, out, 0);
    OK(cudaMemcpyAsync(h, out, 4 * sizeof(float), cudaMemcpyDeviceToHost, s));
    for (int w = 0; w < 4; w++) assert_true(h[w] == (float)(32 * 32 * w + 31 * 32 / 2));
    /* half a warp gone before a full-mask shuffle: the launch faults at the sync */
    k_warp_sum<<<2, 64, 0, s>>>(in, out, 1);
    OK(cudaGetLastError()); /* the launch itself is fine */
    MISTAKE(cudaErrorIllegalInstruction, cudaStreamSynchronize(s));
    /* a deadlock between a shuffle and a barrier */
    k_deadlock<<<1, 32, 0, s>>>(out);
    MISTAKE(cudaErrorIllegalInstruction, cudaStreamSynchronize(s));
    /* a warp that is not whole (40 threads): lanes 8..31 of warp 1 do not exist */
    k_warp_sum<<<1, 40, 0, s>>>(in, out, 0);
    MISTAKE(cudaErrorIllegalInstruction, cudaStreamSynchronize(s));
    OK(cudaFree(in));
    OK(cudaFree(out));
    OK(cudaStreamDestroy(s));
}

/* The mistakes a GPU punishes, each failing its call. */
static void test_mistakes(void **state)
{
    (void)state;
    cudaStream_t s0 = stream0(), s1;
    OK(cudaSetDevice(1));
    OK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    float *d1, *h1;
    OK(cudaMalloc((void **)&d1, 64 * sizeof(float)));
    OK(cudaMallocHost((void **)&h1, 64 * sizeof(float))); /* pinned, not portable, device 1 */
    OK(cudaSetDevice(0));
    float *d0;
    OK(cudaMalloc((void **)&d0, 64 * sizeof(float)));
    float pageable[64] = {0};

    /* the default stream */
    MISTAKE(cudaErrorInvalidResourceHandle, (k_scale<<<1, 64, 0, 0>>>(d0, 1.0f, 64), cudaGetLastError()));
    MISTAKE(cudaErrorInvalidResourceHandle, cudaMemcpyAsync(d0, pageable, 8, cudaMemcpyHostToDevice, 0));
    MISTAKE(cudaErrorInvalidResourceHandle, cudaMemsetAsync(d0, 0, 8, cudaStreamLegacy));
    /* a stream of device 1 while device 0 is current */
    MISTAKE(cudaErrorInvalidResourceHandle, (k_scale<<<1, 64, 0, s1>>>(d1, 1.0f, 64), cudaGetLastError()));
    /* a copy on it is fine (CUDA allows copies on any device's stream) */
    OK(cudaMemcpyAsync(d1, pageable, sizeof pageable, cudaMemcpyHostToDevice, s1));
    /* a pageable host pointer passed to a kernel */
    MISTAKE(cudaErrorIllegalAddress, (k_scale<<<1, 64, 0, s0>>>(pageable, 1.0f, 64), cudaGetLastError()));
    /* device 1's memory from a kernel on device 0, without peer access; then with */
    MISTAKE(cudaErrorIllegalAddress, (k_scale<<<1, 64, 0, s0>>>(d1, 1.0f, 64), cudaGetLastError()));
    OK(cudaDeviceEnablePeerAccess(1, 0));
    assert_int_equal(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessAlreadyEnabled);
    (void)cudaGetLastError();
    k_scale<<<1, 64, 0, s0>>>(d1, 1.0f, 64);
    OK(cudaGetLastError());
    OK(cudaDeviceDisablePeerAccess(1));
    /* peer access unsupported (PSC_EMU_PEER=0 or cuda_emu_set_peer_access(0)) */
    cuda_emu_set_peer_access(0);
    int can = 1;
    OK(cudaDeviceCanAccessPeer(&can, 0, 1));
    assert_int_equal(can, 0);
    assert_int_equal(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessUnsupported);
    (void)cudaGetLastError();
    cuda_emu_set_peer_access(1);
    /* non-portable pinned memory of device 1 in a kernel on device 0 */
    MISTAKE(cudaErrorIllegalAddress, (k_scale<<<1, 64, 0, s0>>>(h1, 1.0f, 64), cudaGetLastError()));
    /* copies whose kind does not match their pointers */
    MISTAKE(cudaErrorInvalidMemcpyDirection, cudaMemcpyAsync(d0, d1, 8, cudaMemcpyHostToDevice, s0));
    MISTAKE(cudaErrorInvalidMemcpyDirection, cudaMemcpyAsync(pageable, d0, 8, cudaMemcpyHostToDevice, s0));
    MISTAKE(cudaErrorInvalidMemcpyDirection, cudaMemcpy(d0, h1, 8, cudaMemcpyDeviceToDevice));
    OK(cudaMemcpyAsync(d0, d1, 8, cudaMemcpyDefault, s0));
    /* past an allocation's end */
    MISTAKE(cudaErrorInvalidValue, cudaMemcpyAsync(d0 + 60, pageable, 8 * sizeof(float), cudaMemcpyHostToDevice, s0));
    MISTAKE(cudaErrorInvalidValue, cudaMemsetAsync(d0, 0, 65 * sizeof(float), s0));
    /* peer copies: the pointers must be the named devices' */
    OK(cudaMemcpyPeerAsync(d0, 0, d1, 1, 64 * sizeof(float), s0));
    MISTAKE(cudaErrorInvalidValue, cudaMemcpyPeerAsync(d0, 1, d1, 1, 8, s0));
    /* freeing what was not allocated so */
    MISTAKE(cudaErrorInvalidValue, cudaFree(h1));
    MISTAKE(cudaErrorInvalidValue, cudaFree(pageable));
    OK(cudaStreamSynchronize(s0));

    OK(cudaFree(d0));
    OK(cudaFree(d1));
    OK(cudaFreeHost(h1));
    OK(cudaStreamDestroy(s0));
    OK(cudaStreamDestroy(s1));
}

static void test_events(void **state)
{
    (void)state;
    cudaStream_t a = stream0(), b;
    OK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    float *d, *h;
    OK(cudaMalloc((void **)&d, 32 * sizeof(float)));
    OK(cudaHostAlloc((void **)&h, 32 * sizeof(float), cudaHostAllocDefault));
    for (int i = 0; i < 32; i++) h[i] = 1.0f;
    cudaEvent_t e;
    OK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    OK(cudaMemcpyAsync(d, h, 32 * sizeof(float), cudaMemcpyHostToDevice, a));
    k_scale<<<1, 32, 0, a>>>(d, 4.0f, 32);
    OK(cudaEventRecord(e, a));
    /* b reads d after a's kernel: ordered by the event */
    OK(cudaStreamWaitEvent(b, e, 0));
    OK(cudaMemcpyAsync(h, d, 32 * sizeof(float), cudaMemcpyDeviceToHost, b));
    OK(cudaStreamSynchronize(b));
    assert_true(h[31] == 4.0f);
    OK(cudaEventSynchronize(e));
    OK(cudaEventDestroy(e));
    OK(cudaFree(d));
    OK(cudaFreeHost(h));
    OK(cudaStreamDestroy(a));
    OK(cudaStreamDestroy(b));
}

static void test_cublas(void **state)
{
    (void)state;
    cudaStream_t s = stream0();
    enum { M = 5, N = 3, K = 4 };
    /* column-major A (M, K), B (K, N): C = A B, and C = A^T-stored variant */
    float hA[M * K], hB[K * N], hC[M * N], want[M * N];
    for (int i = 0; i < M * K; i++) hA[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < K * N; i++) hB[i] = (float)(i % 5) * 0.5f;
    for (int j = 0; j < N; j++)
        for (int i = 0; i < M; i++) {
            double acc = 0;
            for (int k = 0; k < K; k++) acc += (double)hA[k * M + i] * hB[j * K + k];
            want[j * M + i] = (float)acc;
        }
    float *A, *B, *C;
    OK(cudaMalloc((void **)&A, sizeof hA));
    OK(cudaMalloc((void **)&B, sizeof hB));
    OK(cudaMalloc((void **)&C, sizeof hC)); /* NaN: beta = 0 must not read it */
    OK(cudaMemcpyAsync(A, hA, sizeof hA, cudaMemcpyHostToDevice, s));
    OK(cudaMemcpyAsync(B, hB, sizeof hB, cudaMemcpyHostToDevice, s));
    cublasHandle_t h;
    OK(cublasCreate(&h));
    const float one = 1.0f, zero = 0.0f;
    /* the default stream: cublasSetStream not called yet */
    long m0 = cuda_emu_mistakes();
    assert_int_equal(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, A, M, B, K, &zero, C, M),
                     CUBLAS_STATUS_EXECUTION_FAILED);
    assert_int_equal(cuda_emu_mistakes(), m0 + 1);
    OK(cublasSetStream(h, s));
    OK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, A, M, B, K, &zero, C, M));
    OK(cudaMemcpyAsync(hC, C, sizeof hC, cudaMemcpyDeviceToHost, s));
    for (int i = 0; i < M * N; i++) assert_float_equal(hC[i], want[i], 1e-5);
    /* cuBLAS's own checks: a leading dimension below the rows, a negative size */
    m0 = cuda_emu_mistakes();
    assert_int_equal(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, A, M - 1, B, K, &zero, C, M),
                     CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, A, M, B, K, &zero, C, M - 1),
                     CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, -1, N, K, &one, A, M, B, K, &zero, C, M),
                     CUBLAS_STATUS_INVALID_VALUE);
    /* a matrix past its allocation, a pageable matrix */
    assert_int_equal(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N + 1, K, &one, A, M, B, K, &zero, C, M),
                     CUBLAS_STATUS_EXECUTION_FAILED);
    assert_int_equal(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, hA, M, B, K, &zero, C, M),
                     CUBLAS_STATUS_INVALID_VALUE);
    /* the handle's device not current */
    OK(cudaSetDevice(1));
    assert_int_equal(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, A, M, B, K, &zero, C, M),
                     CUBLAS_STATUS_EXECUTION_FAILED);
    OK(cudaSetDevice(0));
    assert_int_equal(cuda_emu_mistakes(), m0 + 6);
    OK(cublasDestroy(h));
    OK(cudaFree(A));
    OK(cudaFree(B));
    OK(cudaFree(C));
    OK(cudaStreamDestroy(s));
}

/* atomicAdd: every add lands, and each thread's old value is its own. */
static void test_atomics(void **state)
{
    (void)state;
    cudaStream_t s = stream0();
    enum { B = 3, T = 96, N = B * T };
    (void)cudaGetLastError(); /* the mistakes of the tests before leave an error pending */
    float *out, hout[3] = {0, 0, 0};
    int *tickets, *next, htickets[N], zero = 0;
    OK(cudaMalloc((void **)&out, sizeof hout));
    OK(cudaMalloc((void **)&tickets, sizeof htickets));
    OK(cudaMalloc((void **)&next, sizeof zero));
    OK(cudaMemcpyAsync(out, hout, sizeof hout, cudaMemcpyHostToDevice, s));
    OK(cudaMemcpyAsync(next, &zero, sizeof zero, cudaMemcpyHostToDevice, s));
    k_atomics<<<B, T, 0, s>>>(out, tickets, next);
    OK(cudaGetLastError());
    OK(cudaMemcpyAsync(hout, out, sizeof hout, cudaMemcpyDeviceToHost, s));
    OK(cudaMemcpyAsync(htickets, tickets, sizeof htickets, cudaMemcpyDeviceToHost, s));
    for (int k = 0; k < 3; k++) assert_true(hout[k] == 1.5f * N / 3);
    int seen[N] = {0};
    for (int i = 0; i < N; i++) {
        assert_in_range(htickets[i], 0, N - 1);
        assert_int_equal(seen[htickets[i]]++, 0);
    }
    OK(cudaFree(out));
    OK(cudaFree(tickets));
    OK(cudaFree(next));
    OK(cudaStreamDestroy(s));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_devices),        cmocka_unit_test(test_nan_and_deferral),
        cmocka_unit_test(test_grid_indices),   cmocka_unit_test(test_shared_and_barrier),
        cmocka_unit_test(test_shuffles),       cmocka_unit_test(test_mistakes),
        cmocka_unit_test(test_events),         cmocka_unit_test(test_cublas),
        cmocka_unit_test(test_atomics),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
