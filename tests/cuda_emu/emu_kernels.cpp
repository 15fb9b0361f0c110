/* emu_kernels.cpp — kernel launches of the CUDA emulation: the launch's checks
 * and the grid runner (see emu_runtime.cpp's opening comment).
 *
 * A grid runs on the thread that synchronizes its stream, one block at a time
 * (so the __shared__ section serves every block; it is refilled with NaN bytes
 * before each). Within a block, a "runner" fiber starts the CUDA threads one
 * after another, in linear thread order, each to completion unless it waits:
 * then its fiber is parked with it and a new runner starts the next thread.
 * Parked threads resume in thread order when their barrier or shuffle
 * completes. The scheduler (on the host thread's own stack) resumes ready
 * fibers first, then starts runners while threads remain, then moves to the
 * next block once every thread has exited; anything else is a deadlock.
 */
#include "emu_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>

#include <deque>
#include <vector>

/* The __shared__ section (cuda_runtime.h), bounds from the linker. */
extern "C" char __start_psc_emu_shared[] __attribute__((weak));
extern "C" char __stop_psc_emu_shared[] __attribute__((weak));

namespace emu {

enum { STACK_BYTES = 256 << 10 };
enum tstate : unsigned char { T_NEW, T_RUN, T_BAR, T_SHFL, T_DONE };

struct fiber_t {
    ucontext_t ctx;
    char *stack;
    unsigned tid;
    bool finished;
    bool busy; /* taken from the pool by a grid */
};

struct grid_run_t {
    const char *kernel, *file;
    int line;
    void (*run)(void *);
    void *ctx;
    dim3 grid, block;
    unsigned nthreads;
    unsigned long long nblocks, bnext; /* blocks in the grid; the next to run */
    uint3 bidx;
    /* the current block */
    unsigned next_tid, at_bar, exited, at_shfl;
    std::vector<unsigned char> state;
    std::vector<fiber_t *> parked;
    std::vector<uint64_t> sval, sres;
    std::vector<unsigned> smask;
    std::vector<int> skind, sarg, swidth;
    std::deque<fiber_t *> ready;
    fiber_t *current;
    ucontext_t sched;
    bool fault;
};

static thread_local grid_run_t *cur_run;
/* Fibers to reuse. Never destroyed (nor the containers below in emu_runtime.cpp):
 * they stay reachable for LeakSanitizer after the static destructors. */
static std::vector<fiber_t *> &pool = *new std::vector<fiber_t *>();

static fiber_t *fiber_get(void)
{
    if (!pool.empty()) {
        fiber_t *f = pool.back();
        pool.pop_back();
        f->busy = true;
        return f;
    }
    fiber_t *f = new fiber_t();
    void *m = mmap(NULL, STACK_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
        perror("cuda emu: mmap of a fiber stack");
        abort();
    }
    f->stack = (char *)m;
    f->busy = true;
    return f;
}

/* threadIdx of linear thread tid (blockIdx, blockDim and gridDim are set per
 * block: one grid runs at a time on this host thread). */
static inline void set_thread(grid_run_t *r, unsigned tid)
{
    if (r->block.y == 1 && r->block.z == 1) {
        threadIdx.x = tid;
        threadIdx.y = threadIdx.z = 0;
        return;
    }
    threadIdx.x = tid % r->block.x;
    threadIdx.y = tid / r->block.x % r->block.y;
    threadIdx.z = tid / (r->block.x * r->block.y);
}

/* Reports a fault in the running kernel; from a fiber, never returns. */
static void fault(grid_run_t *r, bool in_fiber, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fault(grid_run_t *r, bool in_fiber, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char call[256];
    snprintf(call, sizeof call, "%s<<<>>> (launched at %s:%d)", r->kernel, r->file, r->line);
    report(call, "block (%u,%u,%u): %s", r->bidx.x, r->bidx.y, r->bidx.z, msg);
    r->fault = true;
    if (in_fiber) {
        swapcontext(&r->current->ctx, &r->sched);
        abort(); /* a faulted block's fibers are never resumed */
    }
}

static void block_start(grid_run_t *r)
{
    unsigned long long b = r->bnext++;
    r->bidx.x = (unsigned)(b % r->grid.x);
    r->bidx.y = (unsigned)(b / r->grid.x % r->grid.y);
    r->bidx.z = (unsigned)(b / ((unsigned long long)r->grid.x * r->grid.y));
    r->next_tid = r->at_bar = r->exited = r->at_shfl = 0;
    blockIdx = r->bidx;
    blockDim = r->block;
    gridDim = r->grid;
    std::fill(r->state.begin(), r->state.end(), (unsigned char)T_NEW);
    if (__start_psc_emu_shared && __stop_psc_emu_shared)
        memset(__start_psc_emu_shared, 0xff, (size_t)(__stop_psc_emu_shared - __start_psc_emu_shared));
}

static void barrier_release(grid_run_t *r)
{
    for (unsigned t = 0; t < r->nthreads; t++)
        if (r->state[t] == T_BAR) {
            r->state[t] = T_RUN;
            r->ready.push_back(r->parked[t]);
        }
    r->at_bar = 0;
}

/* Parks the running thread's fiber until the scheduler resumes it. */
static void park(grid_run_t *r)
{
    fiber_t *me = r->current;
    r->parked[me->tid] = me;
    swapcontext(&me->ctx, &r->sched);
}

static void thread_exit(grid_run_t *r, unsigned tid)
{
    r->state[tid] = T_DONE;
    r->exited++;
    /* a lane that waits in a shuffle naming this one can never complete */
    unsigned w0 = tid / 32 * 32, lane = tid % 32;
    for (unsigned l = w0; r->at_shfl && l < w0 + 32 && l < r->nthreads; l++)
        if (r->state[l] == T_SHFL && ((r->smask[l] >> lane) & 1))
            fault(r, true,
                  "thread %u exited while lane %u of its warp waits in a shuffle with mask 0x%08x that names it "
                  "(a lane of the mask exited: undefined on a GPU)",
                  tid, l % 32, r->smask[l]);
    if (r->at_bar && r->at_bar + r->exited == r->nthreads) barrier_release(r);
}

static void runner_main(void)
{
    grid_run_t *r = cur_run;
    fiber_t *me = r->current;
    for (;;) {
        if (r->next_tid < r->nthreads) {
            unsigned tid = r->next_tid++;
            me->tid = tid;
            r->state[tid] = T_RUN;
            set_thread(r, tid);
            r->run(r->ctx);
            thread_exit(r, tid);
            continue;
        }
        /* the whole block done and nobody else to run: the next block, here */
        if (r->exited == r->nthreads && r->ready.empty() && r->bnext < r->nblocks) {
            block_start(r);
            continue;
        }
        break;
    }
    me->finished = true;
    swapcontext(&me->ctx, &r->sched);
    abort();
}

static void deadlock(grid_run_t *r)
{
    unsigned bar = 0, shfl = 0, first_bar = ~0u, first_shfl = ~0u;
    for (unsigned t = 0; t < r->nthreads; t++) {
        if (r->state[t] == T_BAR && !bar++) first_bar = t;
        if (r->state[t] == T_SHFL && !shfl++) first_shfl = t;
    }
    fault(r, false,
          "deadlock: %u thread(s) wait in __syncthreads (first: thread %u), %u in a warp shuffle (first: thread %u, "
          "mask 0x%08x), %u exited of %u",
          bar, first_bar, shfl, first_shfl, shfl ? r->smask[first_shfl] : 0u, r->exited, r->nthreads);
}

/* Runs a whole grid; cudaErrorIllegalInstruction after a fault. */
static cudaError_t grid_run(const char *kernel, const char *file, int line, dim3 grid, dim3 block,
                            void (*run)(void *), void *ctx)
{
    grid_run_t r;
    r.kernel = kernel;
    r.file = file;
    r.line = line;
    r.run = run;
    r.ctx = ctx;
    r.grid = grid;
    r.block = block;
    r.nthreads = block.x * block.y * block.z;
    r.nblocks = (unsigned long long)grid.x * grid.y * grid.z;
    r.bnext = 0;
    r.state.assign(r.nthreads, T_NEW);
    r.parked.assign(r.nthreads, NULL);
    r.sval.assign(r.nthreads, 0);
    r.sres.assign(r.nthreads, 0);
    r.smask.assign(r.nthreads, 0);
    r.skind.assign(r.nthreads, 0);
    r.sarg.assign(r.nthreads, 0);
    r.swidth.assign(r.nthreads, 32);
    r.current = NULL;
    r.fault = false;
    grid_run_t *outer = cur_run;
    cur_run = &r;
    std::vector<fiber_t *> live; /* every fiber this grid took (repeats possible) */
    block_start(&r);
    for (;;) {
        if (r.fault) break;
        fiber_t *f;
        if (!r.ready.empty()) {
            f = r.ready.front();
            r.ready.pop_front();
            set_thread(&r, f->tid);
        } else if (r.next_tid < r.nthreads) {
            f = fiber_get();
            live.push_back(f);
            f->finished = false;
            getcontext(&f->ctx);
            f->ctx.uc_stack.ss_sp = f->stack;
            f->ctx.uc_stack.ss_size = STACK_BYTES;
            f->ctx.uc_link = NULL;
            makecontext(&f->ctx, runner_main, 0);
        } else if (r.exited == r.nthreads) {
            if (r.bnext >= r.nblocks) break;
            block_start(&r);
            continue;
        } else {
            deadlock(&r);
            break;
        }
        r.current = f;
        swapcontext(&r.sched, &f->ctx);
        if (f->finished) {
            f->busy = false;
            pool.push_back(f);
        }
    }
    /* after a fault: the fibers still holding threads go back too */
    for (fiber_t *f : live)
        if (f->busy) {
            f->busy = false;
            pool.push_back(f);
        }
    cur_run = outer;
    return r.fault ? cudaErrorIllegalInstruction : cudaSuccess;
}

/* ---- the launch ---- */

bool launch_begin(const char *kernel, const char *file, int line, dim3 grid, dim3 block, size_t shmem,
                  cudaStream_t s, int *device)
{
    std::lock_guard<std::recursive_mutex> g(lock);
    init();
    char call[256];
    snprintf(call, sizeof call, "%s<<<>>> at %s:%d", kernel, file, line);
    unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
    if (!grid.x || !grid.y || !grid.z || !threads || threads > 1024 || block.z > 64 || grid.y > 65535 ||
        grid.z > 65535) {
        mistake(cudaErrorInvalidConfiguration, call, "grid (%u,%u,%u) block (%u,%u,%u)", grid.x, grid.y, grid.z,
                block.x, block.y, block.z);
        return false;
    }
    if (shmem) {
        mistake(cudaErrorNotSupported, call, "dynamic shared memory (%zu bytes) is not emulated", shmem);
        return false;
    }
    cudaError_t e = cudaSuccess;
    stream_t *st = stream_for(s, call, &e);
    if (!st) return false;
    if (st->device != current_device()) {
        mistake(cudaErrorInvalidResourceHandle, call,
                "launched on a stream of device %d while device %d is current (a missing cudaSetDevice)", st->device,
                current_device());
        return false;
    }
    *device = st->device;
    return true;
}

bool launch_check_pointer(const char *kernel, const char *file, int line, int device, int index, const void *p)
{
    std::lock_guard<std::recursive_mutex> g(lock);
    if (!p) return true;
    const alloc_t *a = find_alloc(p, true);
    char call[256];
    snprintf(call, sizeof call, "%s<<<>>> at %s:%d", kernel, file, line);
    if (!a) {
        mistake(cudaErrorIllegalAddress, call,
                "argument %d (%p) is pageable host memory (not from cudaMalloc, cudaMallocHost or cudaHostAlloc)",
                index, p);
        return false;
    }
    if (!device_ok_for(a, device)) {
        if (a->kind == MEM_DEVICE)
            mistake(cudaErrorIllegalAddress, call,
                    "argument %d (%p) is device %d's memory; the kernel runs on device %d without peer access to it",
                    index, p, a->device, device);
        else
            mistake(cudaErrorIllegalAddress, call,
                    "argument %d (%p) is pinned memory of device %d (not cudaHostAllocPortable) used on device %d",
                    index, p, a->device, device);
        return false;
    }
    return true;
}

void launch_enqueue(const char *kernel, const char *file, int line, cudaStream_t s, dim3 grid, dim3 block,
                    void (*run)(void *), void *ctx, void (*drop)(void *))
{
    std::lock_guard<std::recursive_mutex> g(lock);
    stream_t *st = stream_lookup(s);
    enqueue(st, [=]() {
        cudaError_t e = grid_run(kernel, file, line, grid, block, run, ctx);
        drop(ctx);
        return e;
    });
}

/* ---- intrinsics ---- */

static grid_run_t *in_kernel(const char *what)
{
    grid_run_t *r = cur_run;
    if (!r || !r->current) {
        fprintf(stderr, "cuda emu: %s called outside a kernel\n", what);
        abort();
    }
    return r;
}

uint64_t shfl(unsigned mask, uint64_t bits, int kind, int arg, int width, const char *what)
{
    grid_run_t *r = in_kernel(what);
    unsigned tid = r->current->tid, lane = tid % 32, w0 = tid - lane;
    if (!((mask >> lane) & 1)) fault(r, true, "thread %u calls %s with mask 0x%08x, which leaves it out", tid, what, mask);
    if (width < 1 || width > 32 || (width & (width - 1)))
        fault(r, true, "thread %u: %s width %d is not a power of 2 up to 32", tid, what, width);
    for (unsigned l = 0; l < 32; l++) {
        if (!((mask >> l) & 1)) continue;
        unsigned t = w0 + l;
        if (t >= r->nthreads || r->state[t] == T_DONE)
            fault(r, true,
                  "thread %u calls %s with mask 0x%08x but lane %u of its warp %s (undefined on a GPU: a shuffle "
                  "with exited lanes under the mask)",
                  tid, what, mask, l, t >= r->nthreads ? "does not exist" : "has exited");
    }
    r->sval[tid] = bits;
    r->smask[tid] = mask;
    r->skind[tid] = kind;
    r->sarg[tid] = arg;
    r->swidth[tid] = width;
    r->state[tid] = T_SHFL;
    r->at_shfl++;
    bool all = true;
    for (unsigned l = 0; l < 32 && all; l++)
        if ((mask >> l) & 1) all = r->state[w0 + l] == T_SHFL;
    if (all) {
        for (unsigned l = 0; l < 32; l++) {
            if (!((mask >> l) & 1)) continue;
            unsigned t = w0 + l;
            if (r->smask[t] != mask)
                fault(r, true, "lanes of warp %u meet in a shuffle with different masks 0x%08x and 0x%08x", w0 / 32,
                      mask, r->smask[t]);
            int wd = r->swidth[t], a = r->sarg[t];
            unsigned seg = l & ~(unsigned)(wd - 1), src = l;
            switch (r->skind[t]) {
            case SHFL_IDX: src = seg + ((unsigned)a & (unsigned)(wd - 1)); break;
            case SHFL_UP: src = (int)l - a >= (int)seg ? l - (unsigned)a : l; break;
            case SHFL_DOWN: src = l + (unsigned)a < seg + (unsigned)wd ? l + (unsigned)a : l; break;
            case SHFL_XOR: src = (l ^ (unsigned)a) < seg + (unsigned)wd && (l ^ (unsigned)a) >= seg ? l ^ (unsigned)a : l; break;
            }
            if (!((mask >> src) & 1))
                fault(r, true, "lane %u reads lane %u in a shuffle with mask 0x%08x, which leaves it out", l, src, mask);
            r->sres[t] = r->sval[w0 + src];
        }
        for (unsigned l = 0; l < 32; l++)
            if ((mask >> l) & 1) {
                r->at_shfl--;
                r->state[w0 + l] = T_RUN;
                if (w0 + l != tid) r->ready.push_back(r->parked[w0 + l]);
            }
        /* the caller goes on at once (it is the last to arrive); fine: every
         * lane's result is computed */
        r->state[tid] = T_RUN;
        return r->sres[tid];
    }
    park(r);
    return r->sres[tid];
}

} // namespace emu

using namespace emu;

void __syncthreads(void)
{
    grid_run_t *r = in_kernel("__syncthreads");
    unsigned tid = r->current->tid;
    r->state[tid] = T_BAR;
    r->at_bar++;
    r->parked[tid] = r->current;
    /* the last to arrive releases everybody, itself included, in thread order */
    if (r->at_bar + r->exited == r->nthreads) barrier_release(r);
    park(r);
}

void __syncwarp(unsigned mask) { (void)shfl(mask, 0, SHFL_IDX, 0, 32, "__syncwarp"); }

unsigned __ballot_sync(unsigned mask, int pred)
{
    /* 32 shuffles: every lane learns every predicate */
    unsigned out = 0;
    for (int l = 0; l < 32; l++) {
        if (!((mask >> l) & 1)) continue;
        uint64_t v = shfl(mask, pred ? 1 : 0, SHFL_IDX, l, 32, "__ballot_sync");
        if (v) out |= 1u << l;
    }
    return out;
}

int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
int __all_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) == mask; }
