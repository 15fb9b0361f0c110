/* sync.c — the gradient accumulator of one chunk (see sync.h).
 *
 * The loops are plain passes over restrict-qualified floats, split like
 * optim.c's (a first pass whose trip count is a multiple of SYNC_VEC, then the
 * tail) so that GCC -O2 vectorizes them; element-wise IEEE adds and divides
 * round the same in both passes. Gradients that are not float-aligned (a chunk
 * decoded in place from a message) go through a stack block.
 */
#include "sync.h"

#include "psc.h"

#include <string.h>

#define SYNC_VEC 16

static size_t vec_floor(size_t n) { return n & ~(size_t)(SYNC_VEC - 1); }

static inline __attribute__((always_inline)) void add_k(float *restrict s, const float *restrict g, size_t n)
{
    for (size_t i = 0; i < n; i++) s[i] += g[i];
}

static void add_floats(float *s, const float *g, size_t n)
{
    size_t v = vec_floor(n);
    add_k(s, g, v);
    add_k(s + v, g + v, n - v);
}

static inline __attribute__((always_inline)) void div_k(float *restrict s, size_t n, float d)
{
    for (size_t i = 0; i < n; i++) s[i] /= d;
}

enum sync_verdict sync_acc_check(const sync_acc_t *a, int64_t local_step)
{
    return local_step < a->step ? SYNC_STALE : local_step > a->step ? SYNC_AHEAD : SYNC_CURRENT;
}

void sync_acc_add_bytes(sync_acc_t *a, const void *g, size_t n, uint32_t count, double now)
{
    PSC_ASSERT(count >= 1);
    PSC_ASSERT(!a->sum || !n || g);
    int first = a->count == 0;
    if (a->sum && n) {
        if (first) {
            memcpy(a->sum, g, n * sizeof(float)); /* any alignment */
        } else if (((uintptr_t)g & (sizeof(float) - 1)) == 0) {
            add_floats(a->sum, g, n);
        } else {
            float block[1024];
            for (size_t i = 0; i < n; i += PSC_ARRAY_LEN(block)) {
                size_t m = PSC_MIN(PSC_ARRAY_LEN(block), n - i);
                memcpy(block, (const char *)g + sizeof(float) * i, sizeof(float) * m);
                add_floats(a->sum + i, block, m);
            }
        }
    }
    if (first) a->first_at = now;
    a->count = count > UINT32_MAX - a->count ? UINT32_MAX : a->count + count;
}

void sync_acc_add(sync_acc_t *a, const float *g, size_t n, uint32_t count, double now)
{
    sync_acc_add_bytes(a, g, n, count, now);
}

int sync_acc_due(const sync_acc_t *a, uint32_t needed, double now, double timeout, int *by_timeout)
{
    int due = 0, late = 0;
    if (a->count >= 1) {
        if (a->count >= needed)
            due = 1;
        else if (now - a->first_at >= timeout)
            due = late = 1;
    }
    if (by_timeout) *by_timeout = late;
    return due;
}

const float *sync_acc_mean(sync_acc_t *a, size_t n)
{
    PSC_ASSERT(a->count >= 1);
    if (!a->sum) return NULL;
    if (a->count > 1) {
        /* Divide (not multiply by 1/count): the mean of two is then exact
         * (g1 + g2) / 2, the same rounding as a reference written plainly. */
        float d = (float)a->count;
        size_t v = vec_floor(n);
        div_k(a->sum, v, d);
        div_k(a->sum + v, n - v, d);
    }
    return a->sum;
}

void sync_acc_advance(sync_acc_t *a)
{
    a->step++;
    a->count = 0;
}

void sync_acc_skip_to(sync_acc_t *a, int64_t step)
{
    PSC_ASSERT(a->count == 0);
    if (step > a->step) a->step = step;
}

uint32_t sync_needed(int R, int N, int present)
{
    if (R < 1) R = 1;
    if (N < 1) return (uint32_t)R;
    if (present < 0) present = 0;
    if (present > N) present = N;
    int64_t need = ((int64_t)R * present + N - 1) / N; /* ceil(R * present / N) */
    if (need < 1) need = 1;
    if (need > R) need = R;
    return (uint32_t)need;
}
