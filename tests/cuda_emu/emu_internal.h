/* emu_internal.h — what the CUDA emulation's files share (emu_runtime.cpp,
 * emu_kernels.cpp, emu_cublas.cpp): the allocation table, streams and their
 * queues, mistake reporting. Callers hold emu::lock.
 */
#ifndef PSC_CUDA_EMU_INTERNAL_H
#define PSC_CUDA_EMU_INTERNAL_H

#include "cuda_runtime.h"

#include <stdarg.h>

#include <deque>
#include <functional>
#include <mutex>

namespace emu {

enum { MAX_DEV = 16 };
enum mem_kind { MEM_DEVICE, MEM_PINNED };

struct alloc_t {
    char *base;
    size_t size;
    int kind;
    int device;    /* device: its device; pinned: the device current at allocation */
    bool portable; /* pinned: cudaHostAllocPortable (usable from every device) */
};

struct op_t {
    uint64_t seq;
    std::function<cudaError_t()> run;
};

struct stream_t {
    int device;
    unsigned flags;
    std::deque<op_t> q;
    uint64_t next_seq = 1, done_seq = 0;
};

extern std::recursive_mutex lock;
extern int ndev;
extern bool peer_on[MAX_DEV][MAX_DEV]; /* [from][to]: from's kernels may read to's memory */

void init(void);
int current_device(void);
cudaError_t fail(cudaError_t e);
/* Prints "cuda emu: MISTAKE in <call>: ...", counts it, sets the last error, returns e. */
cudaError_t mistake(cudaError_t e, const char *call, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void report(const char *call, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const alloc_t *find_alloc(const void *p, bool end_inclusive);
const char *describe(const void *p, char *buf, size_t len);
bool device_ok_for(const alloc_t *a, int device);
bool is_default_stream(cudaStream_t s);
stream_t *stream_lookup(cudaStream_t s);
stream_t *stream_for(cudaStream_t s, const char *call, cudaError_t *err);
void enqueue(stream_t *st, std::function<cudaError_t()> fn);
cudaError_t flush(stream_t *st, uint64_t upto);

} // namespace emu

#endif
