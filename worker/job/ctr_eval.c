/* ctr_eval.c — exact ROC AUC and log loss (ctr_eval.h).
 *
 * AUC: each float score becomes a 32-bit key whose unsigned order is the
 * float order (flip all bits of a negative float, set the sign bit of a
 * non-negative one; -0 is first turned into +0 so the two tie). The keys of
 * the positives and of the negatives are radix-sorted apart (LSD, 3 passes of
 * 11 bits, a pass skipped when every key falls in one bucket), then one merge
 * walk over the distinct keys in ascending order adds
 *   pos(k) * (2 neg(< k) + neg(k))  =  2 U
 * (U: the Mann-Whitney statistic, positive-negative pairs ranked right plus
 * half the ties). 2U is summed in uint64, exact below 2^32 examples (2U <=
 * n^2 / 2 < 2^63); beyond that the long double sum is used.
 */
#include "ctr_eval.h"

#include "psc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define RADIX_BITS 11
#define RADIX_SIZE (1u << RADIX_BITS)
#define RADIX_PASSES 3 /* 33 bits >= 32 */

static inline int score_key(float f, uint32_t *key)
{
    if (f != f) return -1;
    if (f == 0.0f) f = 0.0f; /* -0 ties with +0 */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    *key = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return 0;
}

/* Sorts a[0..n) ascending; tmp holds n keys. */
static void radix_sort_u32(uint32_t *a, uint32_t *tmp, int64_t n)
{
    if (n < 2) return;
    static const int shifts[RADIX_PASSES] = {0, RADIX_BITS, 2 * RADIX_BITS};
    int64_t(*hist)[RADIX_SIZE] = psc_xcalloc(RADIX_PASSES, sizeof *hist);
    for (int64_t i = 0; i < n; i++)
        for (int p = 0; p < RADIX_PASSES; p++) hist[p][(a[i] >> shifts[p]) & (RADIX_SIZE - 1)]++;
    uint32_t *src = a, *dst = tmp;
    for (int p = 0; p < RADIX_PASSES; p++) {
        int64_t *h = hist[p];
        if (h[(src[0] >> shifts[p]) & (RADIX_SIZE - 1)] == n) continue; /* this digit is all the same */
        int64_t sum = 0;
        for (uint32_t b = 0; b < RADIX_SIZE; b++) {
            int64_t c = h[b];
            h[b] = sum;
            sum += c;
        }
        for (int64_t i = 0; i < n; i++) dst[h[(src[i] >> shifts[p]) & (RADIX_SIZE - 1)]++] = src[i];
        uint32_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != a) memcpy(a, src, (size_t)n * sizeof *a);
    free(hist);
}

/* AUC of sorted positive keys pos[0..np) against sorted negative keys neg[0..nn). */
static double auc_sorted(const uint32_t *pos, int64_t np, const uint32_t *neg, int64_t nn)
{
    if (np == 0 || nn == 0) return NAN;
    uint64_t u2 = 0, below = 0;
    long double u2l = 0;
    int64_t i = 0, j = 0;
    while (i < np) {
        uint32_t k = pos[i];
        while (j < nn && neg[j] < k) j++, below++;
        uint64_t cp = 0, cn = 0;
        while (i < np && pos[i] == k) i++, cp++;
        while (j < nn && neg[j] == k) j++, cn++;
        u2 += cp * (2 * below + cn);
        u2l += (long double)cp * (long double)(2 * below + cn);
        below += cn;
    }
    long double pairs2 = 2.0L * (long double)np * (long double)nn;
    if (np + nn < ((int64_t)1 << 32)) return (double)((long double)u2 / pairs2);
    return (double)(u2l / pairs2);
}

static double auc_keys(uint32_t *pos, int64_t np, uint32_t *neg, int64_t nn)
{
    if (np == 0 || nn == 0) return NAN;
    uint32_t *tmp = psc_xmalloc((size_t)(np > nn ? np : nn) * sizeof *tmp);
    radix_sort_u32(pos, tmp, np);
    radix_sort_u32(neg, tmp, nn);
    free(tmp);
    return auc_sorted(pos, np, neg, nn);
}

double ctr_auc(const float *scores, const float *labels, int64_t n)
{
    int64_t np = 0;
    for (int64_t i = 0; i < n; i++) np += labels[i] > 0.5f;
    int64_t nn = n - np;
    if (np == 0 || nn == 0) return NAN;
    uint32_t *keys = psc_xmalloc((size_t)n * sizeof *keys);
    uint32_t *pos = keys, *neg = keys + np;
    int64_t ip = 0, in = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t k;
        if (score_key(scores[i], &k) != 0) {
            free(keys);
            return NAN;
        }
        if (labels[i] > 0.5f)
            pos[ip++] = k;
        else
            neg[in++] = k;
    }
    double auc = auc_keys(pos, np, neg, nn);
    free(keys);
    return auc;
}

/* Continues the sum acc with n examples' cross-entropy, in order. */
static double log_loss_sum(double acc, const float *logits, const float *labels, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        double z = logits[i], y = labels[i];
        acc += (z > 0 ? z : 0) - z * y + log1p(exp(-fabs(z)));
    }
    return acc;
}

double ctr_log_loss(const float *logits, const float *labels, int64_t n)
{
    if (n <= 0) return NAN;
    return log_loss_sum(0.0, logits, labels, n) / (double)n;
}

void ctr_eval_init(ctr_eval_t *e) { memset(e, 0, sizeof *e); }

static void keys_push(uint32_t **a, int64_t *len, int64_t *cap, uint32_t k)
{
    if (*len == *cap) {
        *cap = *cap ? *cap * 2 : 4096;
        *a = psc_xrealloc(*a, (size_t)*cap * sizeof **a);
    }
    (*a)[(*len)++] = k;
}

void ctr_eval_add(ctr_eval_t *e, const float *logits, const float *labels, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t k;
        if (score_key(logits[i], &k) != 0) {
            e->nan_scores++;
            continue;
        }
        if (labels[i] > 0.5f)
            keys_push(&e->pos, &e->npos, &e->cap_pos, k);
        else
            keys_push(&e->neg, &e->nneg, &e->cap_neg, k);
    }
    if (n > 0) e->loss_sum = log_loss_sum(e->loss_sum, logits, labels, n);
    e->n += n > 0 ? n : 0;
}

double ctr_eval_auc(ctr_eval_t *e)
{
    if (e->nan_scores) return NAN;
    return auc_keys(e->pos, e->npos, e->neg, e->nneg);
}

double ctr_eval_log_loss(const ctr_eval_t *e) { return e->n > 0 ? e->loss_sum / (double)e->n : NAN; }

void ctr_eval_reset(ctr_eval_t *e)
{
    e->npos = e->nneg = e->n = e->nan_scores = 0;
    e->loss_sum = 0;
}

void ctr_eval_free(ctr_eval_t *e)
{
    if (!e) return;
    free(e->pos);
    free(e->neg);
    ctr_eval_init(e);
}
