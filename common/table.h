/* table.h — sparse embedding tables: what every task computes the same way.
 *
 * A table is a [rows, dim] float32 variable (rows up to PSC_TABLE_MAX_ROWS =
 * 2^40) that is never materialized: a row exists on its PS only once it is
 * pulled or pushed, with an initial value that is a pure function of (job seed,
 * table name, global row id). The table is partitioned along axis 0 into one
 * part per PS, with TensorFlow's embedding_lookup partition strategies
 * (tf.nn.embedding_lookup, partition_strategy):
 *   mod  id p -> part p mod n, row p div n within it (TF's default);
 *   div  contiguous ranges: the first (rows mod n) parts hold rows/n + 1 ids,
 *        the others rows/n; part of p = max(p div (q+1), (p - r) div q) with
 *        q = rows div n, r = rows mod n (TF's formula; when rows < n, q = 0
 *        and TF would divide by it: id p is in part p, row 0, parts >= rows
 *        are empty).
 * Ids travel as global ids; a PS checks that an id belongs to the part it holds.
 *
 * Initial rows (psc_table_row_init): Philox-4x32-10 (rng.h) keyed by the job
 * seed, counter (id low 32, id high 32, FNV-1a 32 of the table name, block)
 * where block j gives elements 4j..4j+3 of the row; uniform(minval, maxval)
 * maps the 32-bit word u to minval + (maxval - minval) * (u + 0.5) / 2^32
 * (computed in double, rounded to float; a value that rounds up to maxval
 * becomes the float just below it, so values lie in [minval, maxval));
 * normal(mean, stddev) uses Box-Muller on the words (2k, 2k+1) of the row's
 * stream: with u1, u2 = (word + 0.5) / 2^32 (in (0, 1), never 0), R =
 * sqrt(-2 ln u1), element 2k = mean + stddev * R cos(2 pi u2) and element 2k+1
 * = mean + stddev * R sin(2 pi u2); zeros is 0. Element e depends only on (seed,
 * table, id, e): not on dim, the number of PS, the partition strategy or who
 * touched the row first.
 *
 * Learning-rate schedules (psc_lr_at), computed where the optimizer runs (the
 * PS) from global_step, Keras / tf.compat.v1.train formulas:
 *   constant             lr
 *   exponential_decay    lr * decay_rate ^ (step / decay_steps)  (staircase:
 *                        the exponent floored)
 *   piecewise_constant   values[0] while step <= boundaries[0], values[i] while
 *                        boundaries[i-1] < step <= boundaries[i], values[n] after
 *                        the last boundary (lr is not used)
 *   cosine_decay         linear warmup from lr to warmup_target over
 *                        warmup_steps (warmup_target 0 = lr, no ramp), then
 *                        peak * ((1 - alpha) * 0.5 * (1 + cos(pi * min(s,
 *                        decay_steps) / decay_steps)) + alpha) with s = step -
 *                        warmup_steps and peak = warmup_target or lr (Keras
 *                        CosineDecay; warmup_target 0 is Keras's
 *                        warmup_target = lr, and with warmup_steps 0 its None)
 * Pure functions; thread-safe.
 */
#ifndef PSC_TABLE_H
#define PSC_TABLE_H

#include <stddef.h>
#include <stdint.h>

/* FNV-1a 64 of bytes (a tfrecord bytes value's key; a feature name's hash). */
static inline uint64_t psc_fnv1a64(const void *data, size_t len)
{
    const unsigned char *p = (const unsigned char *)data;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* The stable hash of categorical values into a table's rows
 * (docs/recommendation.md): key k of the feature whose name hashes to
 * name_hash = psc_fnv1a64(name) becomes row
 *   splitmix64_finalizer(k ^ name_hash) mod rows,
 * so one value of two features that share a table lands on different rows. */
static inline int64_t psc_feature_id_hash(uint64_t key, uint64_t name_hash, int64_t rows)
{
    uint64_t x = key ^ name_hash;
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return (int64_t)(x % (uint64_t)rows);
}

#define PSC_TABLE_MAX_ROWS ((int64_t)1 << 40)
#define PSC_TABLE_MAX_DIM 4096
#define PSC_LR_MAX_BOUNDARIES 16

enum psc_partition { PSC_PART_MOD = 0, PSC_PART_DIV };
enum psc_init_kind { PSC_INIT_UNIFORM = 0, PSC_INIT_NORMAL, PSC_INIT_ZEROS };
enum psc_lr_kind { PSC_LR_CONSTANT = 0, PSC_LR_EXPONENTIAL, PSC_LR_PIECEWISE, PSC_LR_COSINE };

typedef struct psc_initializer {
    enum psc_init_kind kind;
    float a, b; /* uniform: minval, maxval (default -0.05, 0.05); normal: mean, stddev (0, 0.05) */
} psc_initializer_t;

typedef struct psc_lr_schedule {
    enum psc_lr_kind kind;
    int64_t decay_steps;  /* exponential_decay, cosine_decay: > 0 */
    float decay_rate;     /* exponential_decay */
    int staircase;        /* exponential_decay */
    int nboundaries;      /* piecewise_constant: 1..PSC_LR_MAX_BOUNDARIES */
    int64_t boundaries[PSC_LR_MAX_BOUNDARIES]; /* strictly increasing */
    float values[PSC_LR_MAX_BOUNDARIES + 1];  /* nboundaries + 1 */
    float alpha;          /* cosine_decay: floor as a fraction of the peak, [0, 1] */
    int64_t warmup_steps; /* cosine_decay: >= 0 */
    float warmup_target;  /* cosine_decay: the peak after warmup (0: lr) */
} psc_lr_schedule_t;

/* The learning rate at global_step `step` (< 0 counts as 0); lr is the
 * optimizer's learning_rate. A schedule that the job spec would refuse
 * (decay_steps <= 0, nboundaries out of 1..16) aborts (PSC_ASSERT). */
double psc_lr_at(const psc_lr_schedule_t *s, double lr, int64_t step);

/* Part of global id `id` and its row within the part. Requires 0 <= id < rows,
 * nparts >= 1 (asserted: the PS checks ids before it calls these). */
void psc_part_of(enum psc_partition p, int64_t rows, int nparts, int64_t id, int *part, int64_t *row);
/* Rows of part `part` (0 <= part < nparts): rows/n + (part < rows mod n) for
 * both strategies; 0 for the parts past `rows` when rows < nparts. */
int64_t psc_part_rows(enum psc_partition p, int64_t rows, int nparts, int part);
/* The global id of row `row` of part `part` (the inverse of psc_part_of). */
int64_t psc_part_global(enum psc_partition p, int64_t rows, int nparts, int part, int64_t row);

/* FNV-1a 32 of the table's name: the table's word in the init counter. */
uint32_t psc_table_hash(const char *name);
/* Fills row[0..dim) with the initial value of global row `id` of the table
 * whose name hashes to table_hash, in the job seeded by seed. */
void psc_table_row_init(const psc_initializer_t *init, uint64_t seed, uint32_t table_hash, int64_t id, float *row,
                        int dim);

/* The job spec's names: "mod"/"div"; "uniform"/"normal"/"zeros"; "constant",
 * "exponential_decay", "piecewise_constant", "cosine_decay"; "unknown" for any
 * other value. Static strings. */
const char *psc_partition_name(enum psc_partition p);
const char *psc_init_kind_name(enum psc_init_kind k);
const char *psc_lr_kind_name(enum psc_lr_kind k);

#endif
