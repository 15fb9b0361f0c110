/* psc.c — error table, assertion failure, allocation wrappers, clock. */
#include "psc.h"

#include <sys/mman.h>
#include <sys/stat.h>

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *psc_strerror(int code)
{
    if (code == 0) return "success";
    switch (code) {
#define PSC_E_CASE(name, text) \
    case PSC_E##name:          \
        return text;
        PSC_ERRNO_MAP(PSC_E_CASE)
#undef PSC_E_CASE
    default:
        return "unknown error";
    }
}

_Noreturn void psc_assert_fail(const char *expr, const char *file, int line, const char *func)
{
    fprintf(stderr, "psc: assertion failed: %s (%s:%d, %s)\n", expr, file, line, func);
    fflush(stderr);
    abort();
}

static _Noreturn void oom(size_t n)
{
    fprintf(stderr, "psc: out of memory allocating %zu bytes\n", n);
    abort();
}

void *psc_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) oom(n);
    return p;
}

void *psc_xcalloc(size_t count, size_t size)
{
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) oom(count * size);
    return p;
}

void *psc_xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) oom(n);
    return q;
}

char *psc_xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = psc_xmalloc(n);
    memcpy(d, s, n);
    return d;
}

void *psc_xaligned(size_t n)
{
    void *p = NULL;
    size_t rounded = (n + 63) & ~(size_t)63;
    if (posix_memalign(&p, 64, rounded ? rounded : 64) != 0) oom(n);
    return p;
}

void *psc_huge_alloc(size_t n)
{
    PSC_ASSERT(n % PSC_HUGE_PAGE == 0);
    size_t span = n + PSC_HUGE_PAGE; /* room to cut an aligned n out of */
    unsigned char *p = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    size_t head = (PSC_HUGE_PAGE - (uintptr_t)p % PSC_HUGE_PAGE) % PSC_HUGE_PAGE;
    if (head) munmap(p, head);
    if (PSC_HUGE_PAGE - head) munmap(p + head + n, PSC_HUGE_PAGE - head);
#ifdef MADV_HUGEPAGE
    madvise(p + head, n, MADV_HUGEPAGE); /* advice: without huge pages it is still memory */
#endif
    return p + head;
}

void psc_huge_free(void *p, size_t n)
{
    if (p) munmap(p, n);
}

int psc_seterr(char *err, size_t errlen, int code, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

double psc_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void psc_abstime_in(struct timespec *ts, double secs)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_nsec += (long)(secs * 1e9);
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static void tune_malloc_once(void)
{
    mallopt(M_MMAP_THRESHOLD, 64 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
    /* One arena: with one per thread, chunk buffers freed by one gRPC thread
     * and allocated by another pile up in several arenas (PS memory 1.4x the
     * model, and a 2x slower fused push-pull from 64 MiB on: tests/bench/NOTES.md). */
    mallopt(M_ARENA_MAX, 1);
}

void psc_tune_malloc(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, tune_malloc_once);
}

void psc_sbuf_put(psc_sbuf_t *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        b->p = psc_xrealloc(b->p, cap);
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void psc_sbuf_puts(psc_sbuf_t *b, const char *s) { psc_sbuf_put(b, s, strlen(s)); }

void psc_sbuf_printf(psc_sbuf_t *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    PSC_ASSERT(n >= 0);
    if ((size_t)n < sizeof tmp) {
        psc_sbuf_put(b, tmp, (size_t)n);
        return;
    }
    char *big = psc_xmalloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    psc_sbuf_put(b, big, (size_t)n);
    free(big);
}

char *psc_sbuf_take(psc_sbuf_t *b, size_t *len)
{
    if (!b->p) psc_sbuf_put(b, "", 0);
    char *p = b->p;
    if (len) *len = b->len;
    b->p = NULL;
    b->len = b->cap = 0;
    return p;
}

char *psc_read_file(const char *path, size_t max, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    psc_sbuf_t b = {0};
    char chunk[8192];
    size_t got;
    int e = 0;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (b.len + got > max) {
            e = EFBIG;
            break;
        }
        psc_sbuf_put(&b, chunk, got);
    }
    if (!e && ferror(f)) e = errno ? errno : EIO;
    fclose(f);
    if (e) {
        free(psc_sbuf_take(&b, NULL));
        errno = e;
        return NULL;
    }
    psc_sbuf_put(&b, "", 0);
    return psc_sbuf_take(&b, len);
}

int psc_iov_float_runs(const psc_iov_t *g, int ng, size_t n, psc_float_run_fn fn, void *arg)
{
    size_t e = 0;  /* elements passed */
    unsigned char part[4];
    size_t np = 0; /* bytes of a float that straddles segments, gathered in part */
    for (int i = 0; i < ng; i++) {
        const unsigned char *p = g[i].base;
        size_t left = g[i].len;
        if (np) {
            size_t take = PSC_MIN(4 - np, left);
            memcpy(part + np, p, take);
            np += take;
            p += take;
            left -= take;
            if (np == 4) {
                PSC_ASSERT(e < n);
                int rc = fn(arg, part, 1, e++);
                if (rc) return rc;
                np = 0;
            }
        }
        size_t m = left / 4;
        if (m) {
            PSC_ASSERT(e + m <= n);
            int rc = fn(arg, p, m, e);
            if (rc) return rc;
            e += m;
            p += 4 * m;
            left -= 4 * m;
        }
        if (left) {
            memcpy(part, p, left);
            np = left;
        }
    }
    PSC_ASSERT(e == n && np == 0);
    return 0;
}

int psc_mkdir_p(const char *path)
{
    char *p = psc_xstrdup(path);
    int rc = 0;
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != 0) continue;
        char c = *s;
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            rc = errno;
            break;
        }
        *s = c;
        if (!c) break;
    }
    free(p);
    return rc;
}

int psc_thread_start(pthread_t *t, void *(*fn)(void *), void *arg, const char *what, char *err, size_t errlen)
{
    int e = pthread_create(t, NULL, fn, arg);
    if (e == 0) return 0;
    return psc_seterr(err, errlen, PSC_ENOMEM, "cannot start the %s thread: %s", what, strerror(e));
}

void psc_note_name(char *list, size_t len, const char *name)
{
    size_t l = strlen(list);
    if (l + strlen(name) + 8 < len)
        snprintf(list + l, len - l, "%s%s", l ? ", " : "", name);
    else if (l + 5 < len && !strstr(list, "..."))
        snprintf(list + l, len - l, ", ...");
}
