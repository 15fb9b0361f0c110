/* table.c — partition math, initial rows and learning-rate schedules of sparse
 * embedding tables (see table.h).
 *
 * Design: everything here is a pure function of its arguments, so the chief,
 * every worker and every PS compute the same part of an id, the same initial
 * row and the same learning rate without talking to each other.
 *
 * Partitions: both strategies give part p the same number of rows, q + (p < r)
 * with q = rows div n, r = rows mod n; they differ in which ids those are (mod:
 * p, p + n, p + 2n, ...; div: one contiguous range). The div formula is TF's
 * (embedding_ops.py); TF divides by q, which is 0 when rows < n: then the first
 * `rows` parts hold one id each (id p in part p) and the others none.
 *
 * Initial rows: Philox-4x32-10 keyed by the seed; element e of the row is word
 * e of the row's stream (block e div 4, word e mod 4), so an element does not
 * depend on dim, on the part that holds the row or on anything else.
 *
 * Invariants: psc_part_global(psc_part_of(id)) = id for every 0 <= id < rows;
 * the parts' rows add up to rows; a uniform value lies in [minval, maxval).
 */
#include "table.h"

#include "psc.h"
#include "rng.h"

#include <math.h>
#include <string.h>

/* ---- partitions ---- */

void psc_part_of(enum psc_partition p, int64_t rows, int nparts, int64_t id, int *part, int64_t *row)
{
    PSC_ASSERT(nparts >= 1 && rows >= 1 && id >= 0 && id < rows);
    if (p == PSC_PART_MOD) {
        *part = (int)(id % nparts);
        *row = id / nparts;
        return;
    }
    PSC_ASSERT(p == PSC_PART_DIV);
    int64_t q = rows / nparts, r = rows % nparts;
    if (q == 0) { /* rows < nparts: one id in each of the first `rows` parts */
        *part = (int)id;
        *row = 0;
        return;
    }
    int64_t a = id / (q + 1), b = (id - r) / q;
    int64_t k = a > b ? a : b;
    *part = (int)k;
    *row = k < r ? id - k * (q + 1) : id - r - k * q;
}

int64_t psc_part_rows(enum psc_partition p, int64_t rows, int nparts, int part)
{
    PSC_ASSERT((p == PSC_PART_MOD || p == PSC_PART_DIV) && nparts >= 1 && rows >= 0 && part >= 0 && part < nparts);
    /* mod: ids part, part + n, ... below rows; div: TF's ranges. Same count. */
    return rows / nparts + (part < rows % nparts ? 1 : 0);
}

int64_t psc_part_global(enum psc_partition p, int64_t rows, int nparts, int part, int64_t row)
{
    PSC_ASSERT(row >= 0 && row < psc_part_rows(p, rows, nparts, part));
    if (p == PSC_PART_MOD) return row * nparts + part;
    int64_t q = rows / nparts, r = rows % nparts;
    if (part < r) return (int64_t)part * (q + 1) + row;
    return r + (int64_t)part * q + row;
}

/* ---- initial rows ---- */

uint32_t psc_table_hash(const char *name)
{
    uint32_t h = 2166136261u;
    for (const unsigned char *s = (const unsigned char *)name; *s; s++) {
        h ^= *s;
        h *= 16777619u;
    }
    return h;
}

/* A 32-bit word as a double in (0, 1): never 0 (Box-Muller takes its log), never 1. */
static double unit_open(uint32_t u) { return ((double)u + 0.5) * (1.0 / 4294967296.0); }

/* Block j (elements 4j..4j+3) of the row's stream. */
static psc_philox4_t row_block(uint64_t seed, uint32_t table_hash, int64_t id, int j)
{
    psc_philox4_t ctr;
    ctr.v[0] = (uint32_t)(uint64_t)id;
    ctr.v[1] = (uint32_t)((uint64_t)id >> 32);
    ctr.v[2] = table_hash;
    ctr.v[3] = (uint32_t)j;
    return psc_philox4x32_10(ctr, (uint32_t)seed, (uint32_t)(seed >> 32));
}

static float uniform_of(uint32_t u, float minval, float maxval)
{
    float v = (float)((double)minval + ((double)maxval - (double)minval) * unit_open(u));
    /* the double is below maxval; rounding to float may reach it: keep [minval, maxval) */
    return v < maxval ? v : nextafterf(maxval, -INFINITY);
}

void psc_table_row_init(const psc_initializer_t *init, uint64_t seed, uint32_t table_hash, int64_t id, float *row,
                        int dim)
{
    PSC_ASSERT(id >= 0 && dim >= 0 && (dim == 0 || row));
    if (init->kind == PSC_INIT_ZEROS) {
        memset(row, 0, (size_t)dim * sizeof *row);
        return;
    }
    PSC_ASSERT(init->kind == PSC_INIT_UNIFORM || init->kind == PSC_INIT_NORMAL);
    for (int j = 0; 4 * j < dim; j++) {
        psc_philox4_t w = row_block(seed, table_hash, id, j);
        if (init->kind == PSC_INIT_UNIFORM) {
            for (int i = 0; i < 4 && 4 * j + i < dim; i++) row[4 * j + i] = uniform_of(w.v[i], init->a, init->b);
            continue;
        }
        /* Box-Muller on the words (2k, 2k+1): elements 2k (cosine) and 2k+1 (sine) */
        for (int k = 0; k < 2 && 4 * j + 2 * k < dim; k++) {
            int e = 4 * j + 2 * k;
            double rad = sqrt(-2.0 * log(unit_open(w.v[2 * k])));
            double th = 2.0 * M_PI * unit_open(w.v[2 * k + 1]);
            row[e] = (float)((double)init->a + (double)init->b * rad * cos(th));
            if (e + 1 < dim) row[e + 1] = (float)((double)init->a + (double)init->b * rad * sin(th));
        }
    }
}

/* ---- learning-rate schedules ---- */

double psc_lr_at(const psc_lr_schedule_t *s, double lr, int64_t step)
{
    if (step < 0) step = 0;
    double t = (double)step;
    switch (s->kind) {
    case PSC_LR_CONSTANT: return lr;
    case PSC_LR_EXPONENTIAL: {
        PSC_ASSERT(s->decay_steps > 0);
        double p = s->staircase ? (double)(step / s->decay_steps) : t / (double)s->decay_steps;
        return lr * pow((double)s->decay_rate, p);
    }
    case PSC_LR_PIECEWISE:
        PSC_ASSERT(s->nboundaries >= 1 && s->nboundaries <= PSC_LR_MAX_BOUNDARIES);
        for (int i = 0; i < s->nboundaries; i++)
            if (step <= s->boundaries[i]) return s->values[i];
        return s->values[s->nboundaries];
    case PSC_LR_COSINE: {
        PSC_ASSERT(s->decay_steps > 0 && s->warmup_steps >= 0);
        double peak = s->warmup_target > 0 ? (double)s->warmup_target : lr;
        double ws = (double)s->warmup_steps, ds = (double)s->decay_steps;
        if (t < ws) return lr + (peak - lr) * (t / ws); /* warmup_target 0: peak = lr, flat */
        double done = PSC_MIN(t - ws, ds) / ds;
        double alpha = s->alpha;
        return peak * ((1.0 - alpha) * 0.5 * (1.0 + cos(M_PI * done)) + alpha);
    }
    }
    PSC_ASSERT(!"unknown learning-rate schedule");
    return lr;
}

/* ---- names ---- */

const char *psc_partition_name(enum psc_partition p)
{
    static const char *const names[] = {"mod", "div"};
    return (unsigned)p < PSC_ARRAY_LEN(names) ? names[p] : "unknown";
}

const char *psc_init_kind_name(enum psc_init_kind k)
{
    static const char *const names[] = {"uniform", "normal", "zeros"};
    return (unsigned)k < PSC_ARRAY_LEN(names) ? names[k] : "unknown";
}

const char *psc_lr_kind_name(enum psc_lr_kind k)
{
    static const char *const names[] = {"constant", "exponential_decay", "piecewise_constant", "cosine_decay"};
    return (unsigned)k < PSC_ARRAY_LEN(names) ? names[k] : "unknown";
}
