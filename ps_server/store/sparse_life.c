/* sparse_life.c — a row's life in a sparse table part (sparse_table.h, "a
 * row's life"): rows that expire (TTL), a cap on the rows with the least
 * recently updated going first, admission by a count-min sketch, and the
 * tombstones that carry evictions into the next incremental checkpoint.
 *
 * Design. Everything here works on one shard under its lock (the caller's,
 * or taken here for the evictor's pass), so nothing is shared between shards
 * but relaxed counters:
 *   - A part with a TTL or a cap keeps a rec_meta_t after each record: the
 *     row's id (-1: the record is free) and the step and second it was last
 *     updated. A pass reads the shard's records in address order (sequential
 *     memory, no index walk) and removes a row by its entry (found by id).
 *   - Removal: the index is open addressing with linear probing and no
 *     tombstones, so an entry is removed by backward shift (each later entry
 *     of the probe run that may move into the hole does); the record goes on
 *     the shard's free list (its first 4 bytes: the next free record), which
 *     shard_insert takes from first. Memory stays at the rows' high water.
 *   - The cap: the shard's rows sorted by (step, second) last updated are cut
 *     to 15/16 of its share by a selection (quickselect over a scratch array
 *     of the shard's rows), so a shard at its cap is not cut again for its
 *     next share/16 new rows.
 *   - The sketch: per shard 4 rows of cms_w 8-bit counters (cms_w a power of
 *     two: filter_bytes / 1024 rounded down); an id's 4 counters are
 *     (x1 + j * x2) mod cms_w (double hashing of two mixes of its hash);
 *     conservative update (only the counters at the minimum grow, saturating
 *     at 255); every counter is halved once the shard counted cms_w / 4
 *     increments, so each counter's mean load stays below 1/4 and the counts
 *     are of recent pushes.
 *     False admissions at that load, counters ~ Poisson(1/4): an id seen c
 *     times is admitted early when each of its 4 counters holds min_count - c
 *     more: P(Poisson(1/4) >= 1)^4 = 0.221^4 = 0.24% for one missing count,
 *     P(>= 2)^4 = 0.0265^4 = 5e-7 for two (a skewed stream loads the counters
 *     of popular ids more, which are admitted anyway).
 *   - Tombstones: every removal appends (id, epoch) to the shard's list (at
 *     most SPARSE_DEAD_MAX / 256 a shard; past that the epoch is recorded as
 *     lost and the next checkpoint must be a base); a checkpoint's copy
 *     (sparse_cut.c) takes those of its range; a committed checkpoint drops
 *     those it holds. A removal first lets a pending cut keep the row
 *     (cut_keep_row).
 * Invariants: an entry's record has meta.id == entry.id; a free record has
 * meta.id == -1 and is on exactly one free list; n counts the entries.
 */
#include "sparse_table.h"
#include "sparse_table_internal.h"

#include "psc.h"
#include "rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CMS_ROWS 4
#define CMS_MIN_W 16
#define DEAD_MAX_SHARD (SPARSE_DEAD_MAX / SPARSE_TABLE_SHARDS)

/* ---- setup ---- */

void life_init(sparse_table_t *t)
{
    const sparse_table_cfg_t *c = &t->cfg;
    for (int s = 0; s < SPARSE_TABLE_SHARDS; s++) {
        shard_t *sh = &t->shards[s];
        sh->free_head = REC_NONE;
        if (c->max_rows > 0)
            sh->cap_rows = (size_t)(c->max_rows / SPARSE_TABLE_SHARDS) + (s < c->max_rows % SPARSE_TABLE_SHARDS);
        atomic_init(&sh->cms_nz, 0);
    }
    if (c->min_count < 2) return;
    uint64_t per = (c->filter_bytes ? c->filter_bytes : SPARSE_FILTER_BYTES) / (CMS_ROWS * SPARSE_TABLE_SHARDS);
    uint32_t w = CMS_MIN_W;
    unsigned lg = 4;
    while ((uint64_t)w * 2 <= per) {
        w *= 2;
        lg++;
    }
    t->cms_w = w;
    t->cms_shift = lg;
    for (int s = 0; s < SPARSE_TABLE_SHARDS; s++) t->shards[s].cms = psc_xcalloc(CMS_ROWS, w);
    count(&t->bytes, (uint64_t)CMS_ROWS * w * SPARSE_TABLE_SHARDS);
}

void life_free_shard(shard_t *sh)
{
    free(sh->cms);
    free(sh->dead);
}

/* ---- admission ---- */

/* Halves every counter of the shard's sketch; recounts row 0's nonzero ones. */
static void cms_halve(const sparse_table_t *t, shard_t *sh)
{
    size_t nz = 0;
    for (size_t i = 0; i < (size_t)CMS_ROWS * t->cms_w; i++) sh->cms[i] >>= 1;
    for (size_t i = 0; i < t->cms_w; i++) nz += sh->cms[i] != 0;
    atomic_store_explicit(&sh->cms_nz, nz, memory_order_relaxed);
    sh->cms_incs = 0;
}

int life_admit(sparse_table_t *t, shard_t *sh, uint64_t h)
{
    uint64_t x1 = psc_mix64(h ^ 0x243f6a8885a308d3ull), x2 = psc_mix64(h ^ 0x13198a2e03707344ull) | 1;
    size_t mask = t->cms_w - 1, at[CMS_ROWS];
    uint8_t lo = 255;
    for (int j = 0; j < CMS_ROWS; j++) {
        at[j] = (size_t)j * t->cms_w + ((x1 + (uint64_t)j * x2) & mask);
        lo = PSC_MIN(lo, sh->cms[at[j]]);
    }
    if (lo < 255) {
        for (int j = 0; j < CMS_ROWS; j++)
            if (sh->cms[at[j]] == lo) {
                if (j == 0 && lo == 0) atomic_fetch_add_explicit(&sh->cms_nz, 1, memory_order_relaxed);
                sh->cms[at[j]]++;
            }
        lo++;
    }
    if (++sh->cms_incs >= t->cms_w / 4) cms_halve(t, sh);
    return lo >= t->cfg.min_count;
}

uint64_t life_waiting(const sparse_table_t *t)
{
    /* linear counting over each shard's row 0: n = -w ln(1 - nonzero / w) */
    double n = 0, w = t->cms_w;
    for (int s = 0; s < SPARSE_TABLE_SHARDS; s++) {
        shard_t *sh = &t->shards[s];
        double nz = (double)atomic_load_explicit(&sh->cms_nz, memory_order_relaxed);
        n += nz >= w ? w * log(w) : -w * log1p(-nz / w);
    }
    return (uint64_t)llround(n);
}

/* ---- removal ---- */

/* Removes entry e (backward shift: the entries after it in its probe run move
 * back when their home position allows). */
static void index_remove(shard_t *sh, entry_t *e)
{
    size_t mask = sh->cap - 1, hole = (size_t)(e - sh->index);
    for (size_t j = (hole + 1) & mask; sh->index[j].id >= 0; j = (j + 1) & mask) {
        size_t home = psc_mix64((uint64_t)sh->index[j].id) & mask;
        /* entry j may fill the hole when its home is not in (hole, j] (cyclically) */
        int between = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (between) continue;
        /* a running copy (sparse_cut.c) that has not looked at j yet must still see the entry */
        if (sh->copied && j >= sh->copy_at && hole < sh->copy_at) sh->copy_at = hole;
        sh->index[hole] = sh->index[j];
        hole = j;
    }
    sh->index[hole].id = -1;
}

static void tomb_add(sparse_table_t *t, shard_t *sh, int64_t id)
{
    uint64_t epoch = atomic_load_explicit(&t->epoch, memory_order_relaxed);
    if (sh->ndead == sh->dead_cap && sh->dead_cap < DEAD_MAX_SHARD) {
        size_t cap = sh->dead_cap ? 2 * sh->dead_cap : 16;
        dead_t *d = realloc(sh->dead, cap * sizeof *d);
        if (d) {
            count(&t->bytes, (cap - sh->dead_cap) * sizeof *d);
            sh->dead = d;
            sh->dead_cap = cap;
        }
    }
    if (sh->ndead < sh->dead_cap) {
        sh->dead[sh->ndead++] = (dead_t){id, epoch};
        return;
    }
    uint64_t lost = atomic_load_explicit(&t->dead_lost, memory_order_relaxed);
    while (epoch > lost && !atomic_compare_exchange_weak(&t->dead_lost, &lost, epoch)) {}
}

/* Removes the row of record r (live, its id in its meta) from shard sh: 0,
 * or PSC_ENOMEM when a pending cut could not keep it (the row stays). */
static int row_remove(sparse_table_t *t, shard_t *sh, uint32_t r)
{
    unsigned char *rec = rec_at(t, sh, r);
    rec_meta_t *m = rec_meta(t, rec);
    int64_t id = m->id;
    entry_t *e = shard_find(sh, id, psc_mix64((uint64_t)id));
    PSC_ASSERT(e && e->rec == r);
    int rc = cut_keep_row(t, sh, e);
    if (rc) return rc;
    index_remove(sh, e);
    m->id = -1;
    memcpy(rec, &sh->free_head, sizeof sh->free_head);
    sh->free_head = r;
    sh->n--;
    atomic_fetch_sub_explicit(&t->rows, 1, memory_order_relaxed);
    count(&t->evicted, 1);
    tomb_add(t, sh, id);
    return 0;
}

static void note_pause(sparse_table_t *t, double t0)
{
    uint64_t ns = (uint64_t)((psc_now() - t0) * 1e9),
             cur = atomic_load_explicit(&t->pause_max_ns, memory_order_relaxed);
    while (ns > cur && !atomic_compare_exchange_weak(&t->pause_max_ns, &cur, ns)) {}
}

/* ---- the cap ---- */

typedef struct age {
    uint64_t key; /* step << 32 | seconds: smaller is older */
    uint32_t rec;
} age_t;

static inline void age_swap(age_t *a, size_t i, size_t j)
{
    age_t x = a[i];
    a[i] = a[j];
    a[j] = x;
}

/* Puts the k oldest of a[0..n) first (quickselect with a three-way
 * partition: many rows share a step). */
static void select_oldest(age_t *a, size_t n, size_t k)
{
    size_t lo = 0, hi = n; /* a[0..lo) are older than a[lo..hi), which are older than a[hi..n) */
    while (hi - lo > 1) {
        uint64_t p = a[lo + (hi - lo) / 2].key;
        size_t lt = lo, i = lo, gt = hi; /* [lo, lt) < p, [lt, i) == p, [gt, hi) > p */
        while (i < gt) {
            if (a[i].key < p)
                age_swap(a, lt++, i++);
            else if (a[i].key > p)
                age_swap(a, i, --gt);
            else
                i++;
        }
        if (k < lt)
            hi = lt;
        else if (k > gt)
            lo = gt;
        else
            return;
    }
}

void life_enforce_cap(sparse_table_t *t, shard_t *sh)
{
    double t0 = psc_now();
    size_t target = sh->cap_rows - sh->cap_rows / 16, cut = sh->n - target, n = 0;
    age_t *a = malloc(sh->n * sizeof *a);
    if (!a) return; /* without the scratch the cap waits for the next request */
    for (size_t r = 0; r < sh->nrec; r++) {
        const rec_meta_t *m = rec_meta(t, rec_at(t, sh, (uint32_t)r));
        if (m->id >= 0) a[n++] = (age_t){(uint64_t)m->step << 32 | m->secs, (uint32_t)r};
    }
    PSC_ASSERT(n == sh->n);
    if (cut < n) select_oldest(a, n, cut);
    /* a cut that cannot keep a row (no memory): the cap waits for the next request */
    for (size_t i = 0; i < cut && i < n && !row_remove(t, sh, a[i].rec); i++) {}
    free(a);
    note_pause(t, t0);
}

/* ---- expiry ---- */

int sparse_table_has_ttl(const sparse_table_t *t) { return t->cfg.ttl_steps > 0 || t->cfg.ttl_secs > 0; }

uint64_t sparse_table_expire(sparse_table_t *t, int s)
{
    PSC_ASSERT(s >= 0 && s < SPARSE_TABLE_SHARDS);
    if (!sparse_table_has_ttl(t)) return 0;
    uint32_t step, secs;
    table_clock(t, &step, &secs);
    int64_t ttl_steps = t->cfg.ttl_steps;
    double ttl_secs = t->cfg.ttl_secs;
    shard_t *sh = &t->shards[s];
    uint64_t removed = 0;
    pthread_mutex_lock(&sh->lock);
    double t0 = psc_now();
    for (size_t r = 0; r < sh->nrec; r++) {
        const rec_meta_t *m = rec_meta(t, rec_at(t, sh, (uint32_t)r));
        if (m->id < 0) continue;
        int old = (ttl_steps > 0 && step > m->step && (int64_t)(step - m->step) > ttl_steps) ||
                  (ttl_secs > 0 && secs > m->secs && (double)(secs - m->secs) > ttl_secs);
        if (old && !row_remove(t, sh, (uint32_t)r)) removed++; /* else the next pass takes it */
    }
    note_pause(t, t0);
    pthread_mutex_unlock(&sh->lock);
    return removed;
}

/* ---- tombstones ---- */

void sparse_table_committed(sparse_table_t *t, uint64_t mark)
{
    PSC_ASSERT(t->cut_left == 0);
    for (int s = 0; s < SPARSE_TABLE_SHARDS; s++) {
        shard_t *sh = &t->shards[s];
        size_t k = 0;
        for (size_t i = 0; i < sh->ndead; i++)
            if (sh->dead[i].epoch > mark) sh->dead[k++] = sh->dead[i];
        sh->ndead = k;
    }
}

int sparse_table_needs_base(const sparse_table_t *t, uint64_t mark)
{
    sparse_table_t *m = (sparse_table_t *)t; /* C11's atomic_load takes a non-const pointer */
    return atomic_load_explicit(&m->dead_lost, memory_order_relaxed) > mark;
}
