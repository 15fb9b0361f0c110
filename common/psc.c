/* psc.c — error table, assertion failure, allocation wrappers, clock. */
#include "psc.h"

#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
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

static void tune_malloc_once(void)
{
    mallopt(M_MMAP_THRESHOLD, 64 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
}

void psc_tune_malloc(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, tune_malloc_once);
}
