/* cuda_runtime.h — the CUDA runtime, emulated on the CPU for tests (README
 * "Towers", and emu_runtime.cpp). It stands in for the toolkit's
 * header when the build compiles worker/tower/tower_cuda.cu as C++ with g++: the build
 * rewrites each `kernel<<<grid, block, shmem, stream>>>(args)` into
 * `EMU_LAUNCH(kernel, grid, block, shmem, stream)(args)` and nothing else.
 *
 * Design: device memory is host memory tagged with its device and filled with
 * NaN bytes; work queued on a stream (kernels, async copies and memsets, cuBLAS
 * calls) runs only when something synchronizes with it; kernels run over their
 * grid one block at a time, each CUDA thread on a fiber once it waits in
 * __syncthreads or a warp shuffle. Mistakes a GPU would punish are reported on
 * stderr ("cuda emu: MISTAKE in <call>: ...") and fail the call with an error
 * code. Only the API that the tower uses is here, with CUDA's names and values.
 *
 * All API functions have C++ linkage, so they never clash with libcudart.
 * Thread-safety: every call takes one process-wide lock; work runs on the
 * thread that synchronizes.
 */
#ifndef PSC_CUDA_EMU_RUNTIME_H
#define PSC_CUDA_EMU_RUNTIME_H

#ifndef __cplusplus
#error "the CUDA emulation is C++ (the .cu file is compiled by g++)"
#endif

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include <tuple>
#include <type_traits>
#include <utility>

#define CUDART_VERSION 13000
#define __CUDACC_EMU__ 1

/* ---- CUDA C keywords ---- */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
/* Shared memory: block-local statics in one section; before each block the
 * emulator fills the section with NaN bytes (blocks run one at a time). */
#define __shared__ static __attribute__((section("psc_emu_shared")))
#define __constant__ static

/* ---- types ---- */
struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};

enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorInsufficientDriver = 35,
    cudaErrorInvalidDeviceFunction = 98,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorNoKernelImageForDevice = 209,
    cudaErrorPeerAccessUnsupported = 217,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorPeerAccessAlreadyEnabled = 704,
    cudaErrorPeerAccessNotEnabled = 705,
    cudaErrorIllegalInstruction = 715,
    cudaErrorLaunchFailure = 719,
    cudaErrorNotSupported = 801,
    cudaErrorUnknown = 999,
};
typedef enum cudaError cudaError_t;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};

typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)

#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02
#define cudaHostAllocDefault 0x00
#define cudaHostAllocPortable 0x01
#define cudaHostAllocMapped 0x02
#define cudaHostAllocWriteCombined 0x04

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    int regsPerBlock;
    int warpSize;
    int maxThreadsPerBlock;
    int maxThreadsDim[3];
    int maxGridSize[3];
    int clockRate;
    int major;
    int minor;
    int multiProcessorCount;
    int unifiedAddressing;
    int canMapHostMemory;
    int pciBusID;
    int pciDeviceID;
    int pciDomainID;
};

struct cudaFuncAttributes {
    size_t sharedSizeBytes;
    size_t constSizeBytes;
    size_t localSizeBytes;
    int maxThreadsPerBlock;
    int numRegs;
    int ptxVersion;
    int binaryVersion;
};

enum cudaDeviceAttr {
    cudaDevAttrMaxThreadsPerBlock = 1,
    cudaDevAttrWarpSize = 10,
    cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrComputeCapabilityMajor = 75,
    cudaDevAttrComputeCapabilityMinor = 76,
};

/* ---- the runtime API (emu_runtime.cpp) ---- */
const char *cudaGetErrorString(cudaError_t e);
const char *cudaGetErrorName(cudaError_t e);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
cudaError_t cudaDriverGetVersion(int *v);
cudaError_t cudaRuntimeGetVersion(int *v);

cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDevice(int *d);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d);
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int d);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaDeviceReset(void);
cudaError_t cudaDeviceCanAccessPeer(int *can, int d, int peer);
cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned flags);
cudaError_t cudaDeviceDisablePeerAccess(int peer);

cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags);
cudaError_t cudaMallocHost(void **p, size_t bytes);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s);
cudaError_t cudaMemcpyPeerAsync(void *dst, int dst_dev, const void *src, int src_dev, size_t bytes, cudaStream_t s);
cudaError_t cudaMemcpyPeer(void *dst, int dst_dev, const void *src, int src_dev, size_t bytes);
cudaError_t cudaMemset(void *p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s);

cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamQuery(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0);

cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b);

/* ---- device code: built-in variables and intrinsics ---- */
extern thread_local uint3 threadIdx, blockIdx;
extern thread_local dim3 blockDim, gridDim;
static constexpr int warpSize = 32;

void __syncthreads(void);
void __syncwarp(unsigned mask = 0xffffffffu);
unsigned __ballot_sync(unsigned mask, int pred);
int __any_sync(unsigned mask, int pred);
int __all_sync(unsigned mask, int pred);

namespace emu {
enum shfl_kind { SHFL_IDX, SHFL_UP, SHFL_DOWN, SHFL_XOR };
/* One lane's part of a warp shuffle of 8 bytes: waits for the lanes in mask. */
uint64_t shfl(unsigned mask, uint64_t bits, int kind, int arg, int width, const char *what);
template <class T> T shfl_t(unsigned mask, T v, int kind, int arg, int width, const char *what)
{
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffle of an 8-byte value at most");
    uint64_t b = 0;
    __builtin_memcpy(&b, &v, sizeof v);
    b = shfl(mask, b, kind, arg, width, what);
    T r;
    __builtin_memcpy(&r, &b, sizeof r);
    return r;
}
} // namespace emu

template <class T> T __shfl_sync(unsigned mask, T v, int src, int width = 32)
{
    return emu::shfl_t(mask, v, emu::SHFL_IDX, src, width, "__shfl_sync");
}
template <class T> T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32)
{
    return emu::shfl_t(mask, v, emu::SHFL_UP, (int)d, width, "__shfl_up_sync");
}
template <class T> T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32)
{
    return emu::shfl_t(mask, v, emu::SHFL_DOWN, (int)d, width, "__shfl_down_sync");
}
template <class T> T __shfl_xor_sync(unsigned mask, T v, int m, int width = 32)
{
    return emu::shfl_t(mask, v, emu::SHFL_XOR, m, width, "__shfl_xor_sync");
}

/* Atomics: a grid's threads run one at a time here, so a read-modify-write is
 * atomic as it stands; the order of the adds is the threads' linear order. */
template <class T> static inline T atomicAdd(T *p, T v)
{
    static_assert(std::is_same<T, float>::value || std::is_same<T, double>::value || std::is_same<T, int>::value ||
                      std::is_same<T, unsigned>::value || std::is_same<T, unsigned long long>::value,
                  "atomicAdd: a type CUDA has it for");
    T old = *p;
    *p = old + v;
    return old;
}

/* CUDA's device min / max overloads (int, unsigned, int64, float, double). */
template <class T> static inline T min(T a, T b) { return b < a ? b : a; }
template <class T> static inline T max(T a, T b) { return a < b ? b : a; }

/* ---- kernel launches ---- */
namespace emu {

/* Where a pointer argument points: the checks of a launch (emu_runtime.cpp). */
bool launch_begin(const char *kernel, const char *file, int line, dim3 grid, dim3 block, size_t shmem,
                  cudaStream_t s, int *device);
bool launch_check_pointer(const char *kernel, const char *file, int line, int device, int index, const void *p);
void launch_enqueue(const char *kernel, const char *file, int line, cudaStream_t s, dim3 grid, dim3 block,
                    void (*run)(void *), void *ctx, void (*drop)(void *));

template <class T> struct is_ptr : std::is_pointer<T> {};

template <class... P> struct launch {
    void (*kernel)(P...);
    const char *name;
    const char *file;
    int line;
    dim3 grid, block;
    size_t shmem;
    cudaStream_t stream;

    typedef std::tuple<typename std::decay<P>::type...> args_t;
    struct job {
        void (*kernel)(P...);
        args_t args;
    };
    static void run(void *ctx)
    {
        job *j = (job *)ctx;
        std::apply(j->kernel, j->args);
    }
    static void drop(void *ctx) { delete (job *)ctx; }

    template <size_t... I> bool check(const args_t &a, int device, std::index_sequence<I...>)
    {
        bool ok = true;
        ((ok = check_one(std::get<I>(a), device, (int)I) && ok), ...);
        return ok;
    }
    template <class T> bool check_one(const T &v, int device, int index)
    {
        if constexpr (std::is_pointer<T>::value)
            return launch_check_pointer(name, file, line, device, index, (const void *)v);
        else
            return (void)v, (void)device, (void)index, true;
    }

    template <class... A> void operator()(A &&...a)
    {
        static_assert(sizeof...(A) == sizeof...(P), "kernel called with the wrong number of arguments");
        int device = -1;
        if (!launch_begin(name, file, line, grid, block, shmem, stream, &device)) return;
        job *j = new job{kernel, args_t(std::forward<A>(a)...)};
        if (!check(j->args, device, std::index_sequence_for<P...>{})) {
            delete j;
            return;
        }
        launch_enqueue(name, file, line, stream, grid, block, &run, j, &drop);
    }
};

template <class... P>
launch<P...> make_launch(void (*k)(P...), const char *name, const char *file, int line, dim3 grid, dim3 block,
                         size_t shmem = 0, cudaStream_t s = 0)
{
    return launch<P...>{k, name, file, line, grid, block, shmem, s};
}
} // namespace emu

#define EMU_LAUNCH(kernel, ...) ::emu::make_launch(kernel, #kernel, __FILE__, __LINE__, __VA_ARGS__)

/* cudaFuncGetAttributes on any kernel: every kernel has an image here. */
cudaError_t emu_func_attributes(cudaFuncAttributes *a, const void *fn);
template <class F> cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *a, F *fn)
{
    return emu_func_attributes(a, (const void *)fn);
}

#endif
