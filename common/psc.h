/* psc.h — error codes, assertions and allocation wrappers shared by every program.
 *
 * Functions in psc return 0 on success or a negative PSC_E* code from the X-macro
 * table below; psc_strerror() gives its text. Where a caller needs more detail
 * (configuration, job specs, checkpoints) the last parameters are a caller-owned
 * `char *err, size_t errlen` buffer that receives one line naming the problem.
 *
 * PSC_ASSERT is for bugs only and stays on in every build; runtime failures are
 * returned as codes, never asserted. The allocation wrappers abort on out-of-memory
 * with a message: a parameter server that cannot allocate has no useful way on.
 */
#ifndef PSC_H
#define PSC_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define PSC_ERRNO_MAP(X)                                              \
    X(INVAL, "invalid argument")                                      \
    X(NOMEM, "out of memory")                                         \
    X(IO, "input/output error")                                       \
    X(CONFIG, "bad configuration")                                    \
    X(NOTFOUND, "not found")                                          \
    X(EXISTS, "already exists")                                       \
    X(MISMATCH, "shape or size mismatch")                             \
    X(NOTREADY, "not ready")                                          \
    X(RPC, "remote call failed")                                      \
    X(TIMEOUT, "timed out")                                           \
    X(CORRUPT, "corrupt data")                                        \
    X(UNSUPPORTED, "not supported")                                   \
    X(CANCELLED, "cancelled")                                         \
    X(STALE, "stale")                                                 \
    X(UNAVAILABLE, "unavailable, worth retrying")                     \
    X(PERM, "credentials refused (token or certificate)")             \
    X(JOBFAILED, "a task of the job failed")

enum {
    PSC_OK = 0,
#define PSC_E_ENUM(name, text) PSC_E##name,
    PSC__EFIRST = -1000,
    PSC_ERRNO_MAP(PSC_E_ENUM)
#undef PSC_E_ENUM
    PSC__ELAST
};

/* Text of a PSC_E* code (or "success" for 0). Never NULL. Thread-safe. */
const char *psc_strerror(int code);

/* Aborts with file:line and the expression. On in every build. */
#define PSC_ASSERT(expr)                                                     \
    do {                                                                     \
        if (!(expr)) psc_assert_fail(#expr, __FILE__, __LINE__, __func__);   \
    } while (0)
_Noreturn void psc_assert_fail(const char *expr, const char *file, int line, const char *func);

/* Allocation that aborts on out-of-memory. */
void *psc_xmalloc(size_t n);
void *psc_xcalloc(size_t count, size_t size);
void *psc_xrealloc(void *p, size_t n);
char *psc_xstrdup(const char *s);
/* 64-byte aligned allocation for tensors (free with free()). */
void *psc_xaligned(size_t n);
/* A huge page (x86-64's 2 MiB): psc_huge_alloc's alignment and unit. */
#define PSC_HUGE_PAGE ((size_t)2 << 20)
/* n bytes (a multiple of PSC_HUGE_PAGE), zeroed, on a mapping of their own
 * aligned to a huge page, with transparent huge pages asked for
 * (madvise(MADV_HUGEPAGE), where the kernel has them): random reads over
 * tables of many MiB then miss the TLB far less. NULL when out of memory.
 * Free with psc_huge_free(p, n). */
void *psc_huge_alloc(size_t n);
void psc_huge_free(void *p, size_t n);
/* Makes glibc keep freed tensor-sized blocks for reuse instead of returning
 * them to the kernel (mmap threshold 64 MiB, trim threshold 256 MiB): every
 * RPC allocates and frees chunk-sized buffers, and fresh pages cost a page
 * fault each (bench_wire measured 2-10x throughput from this). Idempotent;
 * the transport calls it when it creates a server or channel. */
void psc_tune_malloc(void);

/* A growable NUL-terminated string (zero-initialize; free p, or take it). */
typedef struct psc_sbuf {
    char *p;
    size_t len, cap;
} psc_sbuf_t;
void psc_sbuf_put(psc_sbuf_t *b, const char *s, size_t n);
void psc_sbuf_puts(psc_sbuf_t *b, const char *s);
void psc_sbuf_printf(psc_sbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The string (never NULL, "" when empty) and its length; b is empty after. */
char *psc_sbuf_take(psc_sbuf_t *b, size_t *len);

/* Reads a whole file into a NUL-terminated heap buffer (its length in *len when
 * len is non-NULL). NULL with errno set when it cannot be read, EFBIG when it
 * holds more than max bytes. */
char *psc_read_file(const char *path, size_t max, size_t *len);

/* Creates a directory and its missing parents (mkdir -p, mode 0755). Returns
 * 0 or the errno of the first mkdir that failed. */
int psc_mkdir_p(const char *path);

/* The longest name of a variable or of one of its pieces ("dense/kernel",
 * "dense/kernel/part_1"), in bytes; buffers hold PSC_NAME_MAX + 1. Longer
 * names are refused everywhere (job spec, wire, store). */
#define PSC_NAME_MAX 111
/* The longest name of a tensor in a checkpoint: a variable's name plus the
 * suffix of one of its optimizer slots ("/Adam_1", "/.t"). */
#define PSC_TENSOR_NAME_MAX (PSC_NAME_MAX + 16)

/* Starts a joinable thread running fn(arg). Returns 0, or PSC_ENOMEM with err
 * naming `what` when the system cannot start one (the caller decides whether
 * that is fatal). */
int psc_thread_start(pthread_t *t, void *(*fn)(void *), void *arg, const char *what, char *err, size_t errlen);

/* snprintf into a caller's error buffer (err may be NULL). Returns `code`. */
/* Appends name to list (len bytes), ", "-separated; once full, ", ..."
 * ends it. For a log line naming what a step left out. */
void psc_note_name(char *list, size_t len, const char *name);

int psc_seterr(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* A run of bytes that is one part of a longer byte string (a request as gRPC
 * received it: several slices, each at any alignment). */
typedef struct psc_iov {
    const void *base;
    size_t len;
} psc_iov_t;

/* Walks n little-endian float32 held in segments split anywhere (a request as
 * gRPC's slices hold it): calls fn(arg, p, m, e) for each run of m whole floats
 * at p (any byte alignment) that are elements e..e+m-1; a float split across
 * segments is gathered and passed as a run of 1. Stops at the first fn that
 * returns non-zero and returns its value; 0 after the last. The segments must
 * hold exactly 4n bytes (asserted). */
typedef int (*psc_float_run_fn)(void *arg, const unsigned char *p, size_t m, size_t e);
int psc_iov_float_runs(const psc_iov_t *g, int ng, size_t n, psc_float_run_fn fn, void *arg);

/* Monotonic clock in seconds. */
double psc_now(void);
struct timespec;
/* *ts = CLOCK_REALTIME now plus secs (>= 0, < 1): a deadline for pthread_cond_timedwait. */
void psc_abstime_in(struct timespec *ts, double secs);

#define PSC_MIN(a, b) ((a) < (b) ? (a) : (b))
#define PSC_MAX(a, b) ((a) > (b) ? (a) : (b))
#define PSC_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Exit codes of the programs (sysexits.h). */
#define PSC_EXIT_USAGE 64
#define PSC_EXIT_DATAERR 65
#define PSC_EXIT_UNAVAILABLE 69
#define PSC_EXIT_IOERR 74
#define PSC_EXIT_NOPERM 77
#define PSC_EXIT_SOFTWARE 70
#define PSC_EXIT_CONFIG 78

#endif
