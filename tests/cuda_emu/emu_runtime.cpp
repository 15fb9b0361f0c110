/* emu_runtime.cpp — the CUDA runtime on the CPU, for tests (cuda_runtime.h).
 *
 * Memory: cudaMalloc and cudaHostAlloc return host memory recorded in one table
 * (base, size, device, device or pinned) and filled with 0xff bytes — NaN as a
 * float or double — so a read of memory nothing wrote shows in the results.
 * Any other host pointer is pageable.
 *
 * Streams: every stream operation (kernel launch, cudaMemcpyAsync,
 * cudaMemcpyPeerAsync, cudaMemsetAsync, cublasSgemm on the stream) is checked
 * when it is called and queued; the queue runs only when someone synchronizes
 * with it: cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize,
 * cudaFree / cudaFreeHost (which synchronize), a blocking cudaMemcpy (blocking
 * streams only, as the legacy stream), or a copy into pageable memory (which
 * CUDA completes before it returns). A missing synchronization thus leaves the
 * host reading what was there before (stale or NaN).
 *
 * Kernels: a grid runs block by block on the synchronizing thread. A block's
 * threads run one after another on one fiber (ucontext); a thread that waits
 * in __syncthreads or a warp shuffle keeps its fiber and the next thread gets
 * a new one, so a kernel without barriers costs one call per CUDA thread and a
 * kernel with them gets one fiber per CUDA thread. __syncthreads releases when
 * every thread of the block has arrived or exited; a shuffle completes when
 * every lane of its mask has arrived; a lane of the mask that has exited or
 * does not exist, a mask without the caller, or a block where everybody waits
 * and nothing can complete (deadlock) is a fault: the launch stops, the
 * synchronization that ran it returns cudaErrorIllegalInstruction.
 *
 * Mistakes a real GPU punishes (often silently) are detected when the call is
 * made, printed on stderr as "cuda emu: MISTAKE in <call>: <what>", counted
 * (cuda_emu_mistakes) and returned as the call's error: a launch on the
 * default stream or on a stream of a device that is not current; a kernel
 * argument that points to pageable host memory, to another device's memory
 * without peer access, or to non-portable pinned memory of another device; a
 * copy whose cudaMemcpyKind does not match its pointers or that runs past an
 * allocation; freeing what was not allocated so.
 *
 * Thread-safety: one recursive lock around every call (work queued by one
 * thread may run on another that synchronizes with it, under the lock).
 */
#include "cuda_emu.h"
#include "cuda_runtime.h"
#include "emu_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>

#include <deque>
#include <map>
#include <set>
#include <vector>

thread_local uint3 threadIdx, blockIdx;
thread_local dim3 blockDim, gridDim;

namespace emu {

std::recursive_mutex lock;
static bool inited;
int ndev = 2;
static bool peer_supported = true;
bool peer_on[MAX_DEV][MAX_DEV];
static long mistakes;
static thread_local int cur_dev;
static thread_local cudaError_t last_error;

static std::map<uintptr_t, alloc_t> &allocs = *new std::map<uintptr_t, alloc_t>();
static std::set<stream_t *> &streams = *new std::set<stream_t *>();

void init(void)
{
    if (inited) return;
    inited = true;
    const char *d = getenv("PSC_EMU_DEVICES"), *p = getenv("PSC_EMU_PEER");
    if (d && *d) ndev = atoi(d);
    if (ndev < 0) ndev = 0;
    if (ndev > MAX_DEV) ndev = MAX_DEV;
    if (p && *p) peer_supported = atoi(p) != 0;
}

int current_device(void) { return cur_dev; }

cudaError_t fail(cudaError_t e)
{
    last_error = e;
    return e;
}

void vreport(const char *call, const char *fmt, va_list ap)
{
    fprintf(stderr, "cuda emu: MISTAKE in %s: ", call);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    fflush(stderr);
    mistakes++;
}

void report(const char *call, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport(call, fmt, ap);
    va_end(ap);
}

cudaError_t mistake(cudaError_t e, const char *call, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport(call, fmt, ap);
    va_end(ap);
    return fail(e);
}

/* The allocation holding p (end inclusive: a pointer just past an allocation
 * still counts as in it), or NULL. */
const alloc_t *find_alloc(const void *p, bool end_inclusive)
{
    uintptr_t a = (uintptr_t)p;
    auto it = allocs.upper_bound(a);
    if (it == allocs.begin()) return NULL;
    --it;
    const alloc_t &A = it->second;
    if (a < (uintptr_t)A.base) return NULL;
    if (a < (uintptr_t)A.base + A.size || (end_inclusive && a == (uintptr_t)A.base + A.size)) return &A;
    return NULL;
}

const char *describe(const void *p, char *buf, size_t len)
{
    const alloc_t *a = find_alloc(p, false);
    if (!p)
        snprintf(buf, len, "NULL");
    else if (!a)
        snprintf(buf, len, "pageable host memory %p", p);
    else if (a->kind == MEM_DEVICE)
        snprintf(buf, len, "device %d's memory %p (+%zu of %zu bytes)", a->device, p, (size_t)((char *)p - a->base),
                 a->size);
    else
        snprintf(buf, len, "pinned host memory %p", p);
    return buf;
}

bool device_ok_for(const alloc_t *a, int device)
{
    if (a->kind == MEM_DEVICE) return a->device == device || peer_on[device][a->device];
    return a->portable || a->device == device;
}

/* ---- streams ---- */

stream_t *stream_lookup(cudaStream_t s) { return streams.count((stream_t *)s) ? (stream_t *)s : NULL; }

bool is_default_stream(cudaStream_t s) { return s == 0 || s == cudaStreamLegacy || s == cudaStreamPerThread; }

/* The stream an asynchronous call names, or NULL after reporting the mistake. */
stream_t *stream_for(cudaStream_t s, const char *call, cudaError_t *err)
{
    if (is_default_stream(s)) {
        *err = mistake(cudaErrorInvalidResourceHandle, call,
                       "uses the default (legacy) stream: it serializes with every blocking stream and the tower's "
                       "streams never wait for it; pass the tower's stream");
        return NULL;
    }
    stream_t *st = stream_lookup(s);
    if (!st) *err = mistake(cudaErrorInvalidResourceHandle, call, "stream %p is not a live stream", (void *)s);
    return st;
}

void enqueue(stream_t *st, std::function<cudaError_t()> fn)
{
    op_t op;
    op.seq = st->next_seq++;
    op.run = std::move(fn);
    st->q.push_back(std::move(op));
}

/* Runs st's queued operations up to sequence number upto; the first error. */
cudaError_t flush(stream_t *st, uint64_t upto)
{
    cudaError_t first = cudaSuccess;
    while (!st->q.empty() && st->q.front().seq <= upto) {
        op_t op = std::move(st->q.front());
        st->q.pop_front();
        cudaError_t e = op.run();
        st->done_seq = op.seq;
        if (e != cudaSuccess && first == cudaSuccess) first = e;
    }
    if (first != cudaSuccess) last_error = first;
    return first;
}

/* Flushes every stream of device (-1: all devices); blocking_only: the legacy
 * stream's implicit synchronization. */
static cudaError_t flush_all(int device, bool blocking_only)
{
    cudaError_t first = cudaSuccess;
    std::vector<stream_t *> v(streams.begin(), streams.end());
    for (stream_t *st : v) {
        if (!streams.count(st)) continue;
        if (device >= 0 && st->device != device) continue;
        if (blocking_only && (st->flags & cudaStreamNonBlocking)) continue;
        cudaError_t e = flush(st, UINT64_MAX);
        if (e != cudaSuccess && first == cudaSuccess) first = e;
    }
    return first;
}

} // namespace emu

using namespace emu;

/* ---- errors and versions ---- */

#define EMU_ERRORS(X)                                                                                            \
    X(cudaSuccess, "no error")                                                                                   \
    X(cudaErrorInvalidValue, "invalid argument")                                                                 \
    X(cudaErrorMemoryAllocation, "out of memory")                                                                \
    X(cudaErrorInitializationError, "initialization error")                                                      \
    X(cudaErrorInvalidConfiguration, "invalid configuration argument")                                           \
    X(cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy")                                      \
    X(cudaErrorInsufficientDriver, "CUDA driver version is insufficient for CUDA runtime version")               \
    X(cudaErrorInvalidDeviceFunction, "invalid device function")                                                 \
    X(cudaErrorNoDevice, "no CUDA-capable device is detected")                                                   \
    X(cudaErrorInvalidDevice, "invalid device ordinal")                                                          \
    X(cudaErrorNoKernelImageForDevice, "no kernel image is available for execution on the device")               \
    X(cudaErrorPeerAccessUnsupported, "peer access is not supported between these two devices")                 \
    X(cudaErrorInvalidResourceHandle, "invalid resource handle")                                                 \
    X(cudaErrorNotReady, "device not ready")                                                                     \
    X(cudaErrorIllegalAddress, "an illegal memory access was encountered")                                       \
    X(cudaErrorPeerAccessAlreadyEnabled, "peer access is already enabled")                                       \
    X(cudaErrorPeerAccessNotEnabled, "peer access has not been enabled")                                         \
    X(cudaErrorIllegalInstruction, "an illegal instruction was encountered")                                     \
    X(cudaErrorLaunchFailure, "unspecified launch failure")                                                      \
    X(cudaErrorNotSupported, "operation not supported")                                                          \
    X(cudaErrorUnknown, "unknown error")

const char *cudaGetErrorString(cudaError_t e)
{
#define X(code, text) \
    if (e == code) return text;
    EMU_ERRORS(X)
#undef X
    return "unrecognized error code";
}

const char *cudaGetErrorName(cudaError_t e)
{
#define X(code, text) \
    if (e == code) return #code;
    EMU_ERRORS(X)
#undef X
    return "cudaErrorUnrecognized";
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void) { return last_error; }

cudaError_t cudaDriverGetVersion(int *v)
{
    if (!v) return fail(cudaErrorInvalidValue);
    *v = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v) { return cudaDriverGetVersion(v); }

/* ---- devices ---- */

cudaError_t cudaGetDeviceCount(int *n)
{
    std::lock_guard<std::recursive_mutex> g(lock);
    init();
    if (!n) return fail(cudaErrorInvalidValue);
    *n = ndev;
    return ndev ? cudaSuccess : fail(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int d)
{
    std::lock_guard<std::recursive_mutex> g(lock);
    init();
    if (d < 0 || d >= ndev) return fail(ndev ? cudaErrorInvalidDevice : cudaErrorNoDevice);
    cur_dev = d;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *d)
{
    std::lock_guard<std::recursive_mutex> g(lock);
    init();
    if (!d) return fail(cudaErrorInvalidValue);
    if (!ndev) return fail(cudaErrorNoDevice);
    *d = cur_dev;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d)
{
    std::lock_guard<std::recursive_mutex> g(lock);
    init();
    if (!p) return fail(cudaErrorInvalidValue);
    if (d < 0 || d >= ndev) return fail(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "psc emulated device");
    p->totalGlobalMem = (size_t)80 << 30;
    p->sharedMemPerBlock = 48 << 10;
    p->regsPerBlock = 65536;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
    p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 0x7fffffff;
    p->maxGridSize[1] = p->maxGridSize[2] = 65535;
    p->clockRate = 1000000;
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = 4;
    p->unifiedAddressing = 1;
    p->canMapHostMemory = 1;
    p->pciBusID = d;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int d)
{
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, d);
    if (e != cudaSuccess) return e;
    switch (a) {
    case cudaDevAttrMaxThreadsPerBlock: *v = p.maxThreadsPerBlock; break;
    case cudaDevAttrWarpSize: *v = p.warpSize; break;
    case cudaDevAttrMultiProcessorCount: *v = p.multiProcessorCount; break;
    case cudaDevAttrComputeCapabilityMajor: *v = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *v = p.minor; break;
    default: return fail(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    std::lock_guard<std::recursive_mutex> g(lock);
    init();
    if (!ndev) return fail(cudaErrorNoDevice);
    return flush_all(cur_dev, false);
}

cudaError_t cudaDeviceReset(void)
{
    std::lock_guard<std::recursive_mutex> g(lock);
    init();
    cudaError_t e = flush_all(cur_dev, false);
    for (int p = 0; p < MAX_DEV; p++) peer_on[cur_dev][p] = false;
    return e;
}

cudaError_t cudaDeviceCanAccessPeer(int *can, int d, int peer)
{
    std::lock_guard<std::recursive_mutex> g(lock);
    init();
    if (!can) return fail(cudaErrorInvalidValue);
    if (d < 0 || d >= ndev || peer < 0 || peer >= ndev) return fail(cudaErrorInvalidDevice);
    *can = peer_supported && d != peer;
    return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned flags)
{
    std::lock_guard<std::recursive_mutex> g(lock);
    init();
    if (flags) return fail(cudaErrorInvalidValue);
    if (peer < 0 || peer >= ndev || peer == cur_dev) return fail(cudaErrorInvalidDevice);
    if (!peer_supported) return fail(cudaErrorPeerAccessUnsupported);
    if (peer_on[cur_dev][peer]) return fail(cudaErrorPeerAccessAlreadyEnabled);
    peer_on[cur_dev][peer] = true;
    return cudaSuccess;
}

cudaError_t cudaDeviceDisablePeerAccess(int peer)
{
    std::lock_guard<std::recursive_mutex> g(lock);
    init();
    if (peer < 0 || peer >= ndev) return fail(cudaErrorInvalidDevice);
    if (!peer_on[cur_dev][peer]) return fail(cudaErrorPeerAccessNotEnabled);
    peer_on[cur_dev][peer] = false;
    return cudaSuccess;
}

/* ---- memory ---- */

static cudaError_t alloc_common(void **p, size_t bytes, int kind, bool portable, const char *call)
{
    std::lock_guard<std::recursive_mutex> g(lock);
    init();
    if (!p) return fail(cudaErrorInvalidValue);
    *p = NULL;
    if (!ndev) return fail(cudaErrorNoDevice);
    if (bytes == 0) return cudaSuccess;
    size_t rounded = (bytes + 255) & ~(size_t)255;
    char *m = (char *)aligned_alloc(256, rounded);
    if (!m) {
        fprintf(stderr, "cuda emu: %s of %zu bytes: out of host memory\n", call, bytes);
        return fail(cudaErrorMemoryAllocation);
    }
    memset(m, 0xff, rounded); /* NaN: nothing wrote it yet */
    alloc_t a;
    a.base = m;
    a.size = bytes;
    a.kind = kind;
    a.device = cur_dev;
    a.portable = portable;
    allocs[(uintptr_t)m] = a;
    *p = m;
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t bytes) { return alloc_common(p, bytes, MEM_DEVICE, false, "cudaMalloc"); }

cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags)
{
    return alloc_common(p, bytes, MEM_PINNED, (flags & cudaHostAllocPortable) != 0, "cudaHostAlloc");
}

cudaError_t cudaMallocHost(void **p, size_t bytes) { return alloc_common(p, bytes, MEM_PINNED, false, "cudaMallocHost"); }

static cudaError_t free_common(void *p, int kind, const char *call)
{
    std::lock_guard<std::recursive_mutex> g(lock);
    init();
    if (!p) return cudaSuccess;
    auto it = allocs.find((uintptr_t)p);
    char what[128];
    if (it == allocs.end() || it->second.kind != kind)
        return mistake(cudaErrorInvalidValue, call, "%s is not an allocation of %s", describe(p, what, sizeof what),
                       kind == MEM_DEVICE ? "cudaMalloc" : "cudaHostAlloc / cudaMallocHost");
    /* cudaFree and cudaFreeHost synchronize the device: queued work that
     * uses the memory completes first */
    cudaError_t e = flush_all(-1, false);
    free(it->second.base);
    allocs.erase(it);
    return e;
}

cudaError_t cudaFree(void *p) { return free_common(p, MEM_DEVICE, "cudaFree"); }
cudaError_t cudaFreeHost(void *p) { return free_common(p, MEM_PINNED, "cudaFreeHost"); }

/* Checks a copy's pointers against its kind and their allocations' bounds. */
static cudaError_t check_copy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, const char *call)
{
    const alloc_t *d = find_alloc(dst, false), *s = find_alloc(src, false);
    bool ddev = d && d->kind == MEM_DEVICE, sdev = s && s->kind == MEM_DEVICE;
    char dw[128], sw[128];
    static const char *kinds[] = {"cudaMemcpyHostToHost", "cudaMemcpyHostToDevice", "cudaMemcpyDeviceToHost",
                                  "cudaMemcpyDeviceToDevice", "cudaMemcpyDefault"};
    if ((unsigned)kind > cudaMemcpyDefault) return mistake(cudaErrorInvalidMemcpyDirection, call, "kind %d", (int)kind);
    if (!dst || !src) return mistake(cudaErrorInvalidValue, call, "NULL %s", dst ? "src" : "dst");
    if (kind != cudaMemcpyDefault) {
        bool want_ddev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
        bool want_sdev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
        if (ddev != want_ddev || sdev != want_sdev)
            return mistake(cudaErrorInvalidMemcpyDirection, call, "%s, but dst is %s and src is %s", kinds[kind],
                           describe(dst, dw, sizeof dw), describe(src, sw, sizeof sw));
    }
    if (d && (char *)dst + bytes > d->base + d->size)
        return mistake(cudaErrorInvalidValue, call, "%zu bytes into %s run past its allocation's end", bytes,
                       describe(dst, dw, sizeof dw));
    if (s && (const char *)src + bytes > s->base + s->size)
        return mistake(cudaErrorInvalidValue, call, "%zu bytes from %s run past its allocation's end", bytes,
                       describe(src, sw, sizeof sw));
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind)
{
    std::lock_guard<std::recursive_mutex> g(lock);
    init();
    if (!bytes) return cudaSuccess;
    cudaError_t e = check_copy(dst, src, bytes, kind, "cudaMemcpy");
    if (e != cudaSuccess) return e;
    /* the legacy default stream waits for the blocking streams only: a
     * non-blocking stream's queued work is NOT waited for */
    e = flush_all(cur_dev, true);
    memmove(dst, src, bytes);
    return e;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s)
{
    std::lock_guard<std::recursive_mutex> g(lock);
    init();
    cudaError_t e = cudaSuccess;
    stream_t *st = stream_for(s, "cudaMemcpyAsync", &e);
    if (!st) return e;
    if (!bytes) return cudaSuccess;
    if ((e = check_copy(dst, src, bytes, kind, "cudaMemcpyAsync")) != cudaSuccess) return e;
    const alloc_t *d = find_alloc(dst, false), *sa = find_alloc(src, false);
    if (!d) {
        /* into pageable memory: CUDA returns only once the copy is done */
        e = flush(st, UINT64_MAX);
        memmove(dst, src, bytes);
        return e;
    }
    if (!sa) {
        /* from pageable memory: staged at the call, so the caller may reuse it */
        std::vector<char> snap((const char *)src, (const char *)src + bytes);
        enqueue(st, [dst, snap]() {
            memcpy(dst, snap.data(), snap.size());
            return cudaSuccess;
        });
        return cudaSuccess;
    }
    enqueue(st, [dst, src, bytes]() {
        memmove(dst, src, bytes);
        return cudaSuccess;
    });
    return cudaSuccess;
}

static cudaError_t check_peer_ptr(const void *p, int dev, size_t bytes, const char *call, const char *which)
{
    const alloc_t *a = find_alloc(p, false);
    char w[128];
    if (dev < 0 || dev >= ndev) return mistake(cudaErrorInvalidDevice, call, "%s device %d does not exist", which, dev);
    if (!a || a->kind != MEM_DEVICE || a->device != dev)
        return mistake(cudaErrorInvalidValue, call, "%s is %s, not device %d's memory", which,
                       describe(p, w, sizeof w), dev);
    if ((const char *)p + bytes > a->base + a->size)
        return mistake(cudaErrorInvalidValue, call, "%zu bytes at %s run past its allocation's end", bytes,
                       describe(p, w, sizeof w));
    return cudaSuccess;
}

cudaError_t cudaMemcpyPeerAsync(void *dst, int dst_dev, const void *src, int src_dev, size_t bytes, cudaStream_t s)
{
    std::lock_guard<std::recursive_mutex> g(lock);
    init();
    cudaError_t e = cudaSuccess;
    stream_t *st = stream_for(s, "cudaMemcpyPeerAsync", &e);
    if (!st) return e;
    if (!bytes) return cudaSuccess;
    if ((e = check_peer_ptr(dst, dst_dev, bytes, "cudaMemcpyPeerAsync", "dst")) != cudaSuccess) return e;
    if ((e = check_peer_ptr(src, src_dev, bytes, "cudaMemcpyPeerAsync", "src")) != cudaSuccess) return e;
    /* without peer access the driver stages the copy through the host: legal */
    enqueue(st, [dst, src, bytes]() {
        memmove(dst, src, bytes);
        return cudaSuccess;
    });
    return cudaSuccess;
}

cudaError_t cudaMemcpyPeer(void *dst, int dst_dev, const void *src, int src_dev, size_t bytes)
{
    std::lock_guard<std::recursive_mutex> g(lock);
    init();
    cudaError_t e;
    if (!bytes) return cudaSuccess;
    if ((e = check_peer_ptr(dst, dst_dev, bytes, "cudaMemcpyPeer", "dst")) != cudaSuccess) return e;
    if ((e = check_peer_ptr(src, src_dev, bytes, "cudaMemcpyPeer", "src")) != cudaSuccess) return e;
    e = flush_all(-1, true);
    memmove(dst, src, bytes);
    return e;
}

static cudaError_t check_memset(void *p, size_t bytes, const char *call)
{
    const alloc_t *a = find_alloc(p, false);
    char w[128];
    if (!a || a->kind != MEM_DEVICE)
        return mistake(cudaErrorInvalidValue, call, "%s is not device memory", describe(p, w, sizeof w));
    if ((char *)p + bytes > a->base + a->size)
        return mistake(cudaErrorInvalidValue, call, "%zu bytes at %s run past its allocation's end", bytes,
                       describe(p, w, sizeof w));
    return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int value, size_t bytes)
{
    std::lock_guard<std::recursive_mutex> g(lock);
    init();
    if (!bytes) return cudaSuccess;
    cudaError_t e = check_memset(p, bytes, "cudaMemset");
    if (e != cudaSuccess) return e;
    e = flush_all(cur_dev, true);
    memset(p, value, bytes);
    return e;
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s)
{
    std::lock_guard<std::recursive_mutex> g(lock);
    init();
    cudaError_t e = cudaSuccess;
    stream_t *st = stream_for(s, "cudaMemsetAsync", &e);
    if (!st) return e;
    if (!bytes) return cudaSuccess;
    if ((e = check_memset(p, bytes, "cudaMemsetAsync")) != cudaSuccess) return e;
    enqueue(st, [p, value, bytes]() {
        memset(p, value, bytes);
        return cudaSuccess;
    });
    return cudaSuccess;
}

/* ---- streams and events ---- */

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    std::lock_guard<std::recursive_mutex> g(lock);
    init();
    if (!s) return fail(cudaErrorInvalidValue);
    if (!ndev) return fail(cudaErrorNoDevice);
    stream_t *st = new stream_t();
    st->device = cur_dev;
    st->flags = flags;
    streams.insert(st);
    *s = (cudaStream_t)st;
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    std::lock_guard<std::recursive_mutex> g(lock);
    init();
    stream_t *st = stream_lookup(s);
    if (!st) return mistake(cudaErrorInvalidResourceHandle, "cudaStreamDestroy", "%p is not a live stream", (void *)s);
    cudaError_t e = flush(st, UINT64_MAX); /* queued work still completes */
    streams.erase(st);
    delete st;
    return e;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    std::lock_guard<std::recursive_mutex> g(lock);
    init();
    if (is_default_stream(s)) return flush_all(cur_dev, true);
    stream_t *st = stream_lookup(s);
    if (!st)
        return mistake(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize", "%p is not a live stream", (void *)s);
    return flush(st, UINT64_MAX);
}

/* A query that said "done" must mean done: the emulation runs the work. */
cudaError_t cudaStreamQuery(cudaStream_t s) { return cudaStreamSynchronize(s); }

struct CUevent_st {
    int device;
    unsigned flags;
    stream_t *stream; /* where last recorded; NULL before */
    uint64_t seq;
    bool done;
    double ms; /* wall clock when it ran */
};

static std::set<CUevent_st *> &events = *new std::set<CUevent_st *>();

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
    std::lock_guard<std::recursive_mutex> g(lock);
    init();
    if (!e) return fail(cudaErrorInvalidValue);
    CUevent_st *ev = new CUevent_st();
    ev->device = cur_dev;
    ev->flags = flags;
    events.insert(ev);
    *e = ev;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    std::lock_guard<std::recursive_mutex> g(lock);
    if (!events.count(e)) return mistake(cudaErrorInvalidResourceHandle, "cudaEventDestroy", "not a live event");
    events.erase(e);
    delete e;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    std::lock_guard<std::recursive_mutex> g(lock);
    init();
    if (!events.count(e)) return mistake(cudaErrorInvalidResourceHandle, "cudaEventRecord", "not a live event");
    cudaError_t err = cudaSuccess;
    stream_t *st = stream_for(s, "cudaEventRecord", &err);
    if (!st) return err;
    if (st->device != e->device)
        return mistake(cudaErrorInvalidResourceHandle, "cudaEventRecord",
                       "event of device %d recorded on a stream of device %d", e->device, st->device);
    e->stream = st;
    e->done = false;
    e->seq = st->next_seq;
    enqueue(st, [e]() {
        if (events.count(e)) {
            e->done = true;
            e->ms = now_ms();
        }
        return cudaSuccess;
    });
    return cudaSuccess;
}

static cudaError_t event_flush(cudaEvent_t e, const char *call)
{
    if (!events.count(e)) return mistake(cudaErrorInvalidResourceHandle, call, "not a live event");
    if (!e->stream || !streams.count(e->stream)) return cudaSuccess;
    return flush(e->stream, e->seq);
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    std::lock_guard<std::recursive_mutex> g(lock);
    return event_flush(e, "cudaEventSynchronize");
}

cudaError_t cudaEventQuery(cudaEvent_t e)
{
    std::lock_guard<std::recursive_mutex> g(lock);
    return event_flush(e, "cudaEventQuery");
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    std::lock_guard<std::recursive_mutex> g(lock);
    if (!ms || !events.count(a) || !events.count(b)) return fail(cudaErrorInvalidResourceHandle);
    if ((a->flags | b->flags) & cudaEventDisableTiming) return fail(cudaErrorInvalidResourceHandle);
    if (!a->done || !b->done) return fail(cudaErrorNotReady);
    *ms = (float)(b->ms - a->ms);
    return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags)
{
    std::lock_guard<std::recursive_mutex> g(lock);
    init();
    cudaError_t err = cudaSuccess;
    stream_t *st = stream_for(s, "cudaStreamWaitEvent", &err);
    if (!st) return err;
    if (!events.count(e)) return mistake(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent", "not a live event");
    if (flags) return fail(cudaErrorInvalidValue);
    stream_t *other = e->stream;
    uint64_t seq = e->seq;
    if (!other || other == st) return cudaSuccess;
    /* s's later work sees the other stream's work up to the record */
    enqueue(st, [other, seq]() { return streams.count(other) ? flush(other, seq) : cudaSuccess; });
    return cudaSuccess;
}

cudaError_t emu_func_attributes(cudaFuncAttributes *a, const void *fn)
{
    if (!a || !fn) return fail(cudaErrorInvalidDeviceFunction);
    memset(a, 0, sizeof *a);
    a->maxThreadsPerBlock = 1024;
    a->numRegs = 32;
    a->ptxVersion = 90;
    a->binaryVersion = 90;
    return cudaSuccess;
}

/* ---- the test controls (cuda_emu.h) ---- */

extern "C" void cuda_emu_set_peer_access(int on)
{
    std::lock_guard<std::recursive_mutex> g(lock);
    init();
    peer_supported = on != 0;
    memset(peer_on, 0, sizeof peer_on);
}

extern "C" int cuda_emu_active(void) { return 1; }

extern "C" long cuda_emu_mistakes(void)
{
    std::lock_guard<std::recursive_mutex> g(lock);
    return mistakes;
}

extern "C" long cuda_emu_pending(void)
{
    std::lock_guard<std::recursive_mutex> g(lock);
    long n = 0;
    for (stream_t *st : streams) n += (long)st->q.size();
    return n;
}
