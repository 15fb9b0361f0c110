/* sparse_table.c — one PS's part of a sparse embedding table (sparse_table.h).
 *
 * Design. A row lives in one of SPARSE_TABLE_SHARDS shards, chosen by the top
 * byte of psc_mix64(id) (splitmix64's finalizer). A shard is a mutex, an index and
 * record blocks:
 *   - the index: open addressing with linear probing from the hash's low bits,
 *     a power-of-two array of 16-byte entries {id, record number, epoch}
 *     (id -1: empty), allocated at the first row and doubled by rehash before
 *     an insert would take its load above 0.7 (so it stays in 0.35..0.7).
 *     Only a row's life (sparse_life.c: expiry, the cap) removes rows, by
 *     backward shift: no tombstones in the index.
 *   - the records: blocks of 2^bshift records of `stride` bytes (the record
 *     rounded up to 8), about BLOCK_BYTES each, never moved or freed before
 *     destroy (an evicted row's record goes on the shard's free list and is
 *     reused); record r of a shard is at blocks[r >> bshift] + (r & bmask) *
 *     stride. Growing the index copies entries, never records.
 * A big part's blocks and index arrays are on huge pages (sparse_mem.c).
 * A record is exactly the header's export form (int64 t, values, slots); its
 * epoch sits in its index entry, so a checkpoint's copy (sparse_cut.c) scans
 * the index only and the copied bytes are the record itself.
 *
 * A request's ids are grouped by shard with a counting sort on the hash's top
 * byte, ids and hashes copied into shard order (batch_t; batches of at most
 * HEAP_BATCH ids in a malloc'd scratch, of STACK_BATCH on the stack for small
 * requests or when that malloc fails), so each shard's lock is taken once per
 * batch and nothing is allocated per row. Under the lock the shard's rows go
 * in chunks through two passes, a lookup that prefetches and an update
 * (find_rows, push_rows): the rows of a big table are cache misses, and the
 * prefetches overlap them. Ids and gradients are read with memcpy: they may
 * sit at any alignment. The update is optim_apply_rows (optim.h): the same
 * vectorized loops as the dense variables, chosen once per chunk.
 *
 * Memory, for R rows of record size B (stride S = B rounded up to 8, plus
 * 16 bytes of rec_meta_t with a TTL or a cap): the
 * records R*S; at most one partly used block per shard (256 blocks of at most
 * max(BLOCK_BYTES, S) bytes: <= 4 MiB at BLOCK_BYTES = 16 KiB) and one
 * partly used slab of blocks (2 MiB), less than a block unused at each
 * slab's end; the index,
 * 16 bytes an entry at load >= 0.35 (<= 46 bytes a row, plus INDEX_MIN
 * entries a shard; between 64 KiB and 2 MiB an array, the unused arrays of
 * the slabs of its size: sparse_mem.c); the block pointer arrays; the table and shard structs
 * (65 KiB). Nothing depends on the declared rows. stats.bytes counts exactly
 * these allocations (not a request's scratch, freed before it returns).
 *
 * Invariants: an entry is inserted only once its record number is valid, and
 * its record is written before the shard lock is released; a record's address
 * never changes; every entry's record number is < the shard's nrec. Counters are
 * relaxed atomics; the epoch changes only at a checkpoint's cut (no pull or
 * push runs then, sparse_table.h). A row changes only after cut_keep_row
 * (sparse_cut.c): a pending cut keeps the rows it holds before they change.
 */
#include "sparse_table.h"
#include "sparse_table_internal.h"

#include "nonfinite.h"

#include "optim.h"
#include "psc.h"
#include "rng.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "sparse table records and requests are little-endian");
_Static_assert(SPARSE_TABLE_SHARDS == 256, "the shard is the hash's top byte");

#define BLOCK_BYTES 16384 /* records per block: the largest power of two that fits (at least 1) */
#define INDEX_MIN 16      /* the first index of a shard, in entries */
#define STACK_BATCH 256   /* ids per batch with the scratch on the stack (4.5 KiB) */
#define HEAP_BATCH 65536  /* ids per batch with a malloc'd scratch (1.1 MiB); batch_t.ord is uint16 */

/* Id i of a request (little-endian int64 at any alignment). */
static inline int64_t id_at(const unsigned char *ids, size_t i)
{
    int64_t id;
    memcpy(&id, ids + 8 * i, 8);
    return id;
}

/* ---- shards ---- */

/* The empty entry where id goes (id absent). */
static entry_t *shard_slot(entry_t *index, size_t cap, uint64_t h)
{
    size_t mask = cap - 1, i = h & mask;
    while (index[i].id >= 0) i = (i + 1) & mask;
    return &index[i];
}

/* Doubles the index (INDEX_MIN entries at first), rehashing the entries. */
static int shard_grow_index(sparse_table_t *t, shard_t *sh)
{
    size_t cap = sh->cap ? 2 * sh->cap : INDEX_MIN;
    struct islab *slab;
    entry_t *index = mem_index_alloc(t, cap, &slab);
    if (!index) return PSC_ENOMEM;
    for (size_t i = 0; i < sh->cap; i++)
        if (sh->index[i].id >= 0) *shard_slot(index, cap, psc_mix64((uint64_t)sh->index[i].id)) = sh->index[i];
    mem_index_free(t, sh->index, sh->cap, sh->index_slab);
    sh->index_slab = slab;
    if (sh->copied) sh->copy_at = 0; /* a running copy goes over the new index again (its bits skip what it has) */
    sh->index = index;
    sh->cap = cap;
    atomic_store_explicit(&sh->hint_index, index, memory_order_relaxed);
    atomic_store_explicit(&sh->hint_mask, cap - 1, memory_order_relaxed);
    return 0;
}

/* A block for records [nblocks << bshift, ...). */
static int shard_add_block(sparse_table_t *t, shard_t *sh)
{
    if (sh->nblocks == sh->blocks_cap) {
        size_t cap = sh->blocks_cap ? 2 * sh->blocks_cap : 4;
        unsigned char **b = realloc(sh->blocks, cap * sizeof *b);
        if (!b) return PSC_ENOMEM;
        count(&t->bytes, (cap - sh->blocks_cap) * sizeof *b);
        sh->blocks = b;
        sh->blocks_cap = cap;
    }
    unsigned char *block = mem_block_alloc(t, sh);
    if (!block) return PSC_ENOMEM;
    sh->blocks[sh->nblocks++] = block;
    return 0;
}

/* Inserts absent row id with a fresh record (a free one first) whose bytes
 * the caller writes (under the same lock); a part with meta gets the row's
 * id and the clock stamped. PSC_ENOMEM leaves the shard's rows as they were. */
static int shard_insert(sparse_table_t *t, shard_t *sh, int64_t id, uint64_t h, uint32_t epoch, const uint32_t clock[2],
                        entry_t **out)
{
    int rc;
    if ((sh->n + 1) * 10 > sh->cap * 7 && (rc = shard_grow_index(t, sh))) return rc;
    uint32_t r = sh->free_head;
    if (r == REC_NONE) {
        if (sh->nrec >= UINT32_MAX - 1) return PSC_ENOMEM; /* record numbers are 32-bit (~2^32 rows a shard) */
        if ((sh->nrec >> t->bshift) == sh->nblocks && (rc = shard_add_block(t, sh))) return rc;
        r = (uint32_t)sh->nrec++;
    } else {
        memcpy(&sh->free_head, rec_at(t, sh, r), sizeof sh->free_head);
    }
    entry_t *e = shard_slot(sh->index, sh->cap, h);
    e->id = id;
    e->rec = r;
    e->epoch = epoch;
    sh->n++;
    if (t->meta_off) {
        unsigned char *rec = rec_at(t, sh, r);
        rec_meta(t, rec)->id = id;
        meta_touch(t, rec, clock[0], clock[1]);
    }
    count(&t->rows, 1);
    *out = e;
    return 0;
}

/* A new row's record: t = 0, psc_table_row_init's values, the optimizer's
 * initial slots (optim_init_slots: accumulators at initial_accumulator_value,
 * RMSProp's ms at 1, others 0). */
static void row_init(const sparse_table_t *t, int64_t id, unsigned char *rec)
{
    int dim = t->cfg.dim;
    int64_t zero = 0;
    memcpy(rec, &zero, 8);
    float *w = rec_values(rec);
    psc_table_row_init(&t->cfg.init, t->cfg.seed, t->name_hash, id, w, dim);
    optim_init_slots(&t->cfg.opt, t->nslots >= 1 ? w + dim : NULL, t->nslots >= 2 ? w + 2 * dim : NULL, (size_t)dim);
}

void sparse_table_assigned_record(const sparse_table_t *t, int64_t id, const float *values, unsigned char *rec)
{
    row_init(t, id, rec);
    memcpy(rec_values(rec), values, 4 * (size_t)t->cfg.dim);
}

/* ---- pull and push ---- */

/* One pull (grads NULL) or push of n ids. */
typedef struct req {
    const unsigned char *ids, *grads;
    size_t n;
    double lr;
    float *out; /* (n, dim) or NULL (a push without pull) */
    int read_only; /* a pull that creates no row: a missing one reads its initial values */
    uint32_t clock[2]; /* the step and seconds updates are stamped with (a part with meta) */
} req_t;

/* The entry of row id, created with its initial record if absent; *out NULL
 * when a push's id is not admitted yet (admission). */
static inline int shard_row(sparse_table_t *t, shard_t *sh, const req_t *q, int64_t id, uint64_t h, uint32_t epoch,
                            entry_t **out)
{
    entry_t *e = shard_find(sh, id, h);
    if (!e) {
        *out = NULL;
        if (t->cms_w && !life_admit(t, sh, h)) return 0;
        int rc = shard_insert(t, sh, id, h, epoch, q->clock, &e);
        if (rc) return rc;
        row_init(t, id, rec_at(t, sh, e->rec));
    }
    *out = e;
    return 0;
}

/* A batch of a request's ids grouped by shard (a counting sort on the hash's
 * top byte), with each row's id and hash copied into shard order so that the
 * passes over a group read them in sequence. */
typedef struct batch {
    size_t i0;                               /* request index of the batch's first id */
    uint32_t start[SPARSE_TABLE_SHARDS + 1]; /* shard s's rows: [start[s], start[s + 1]) */
    uint64_t *h;                             /* (m) hash of each row, in shard order */
    int64_t *id;                             /* (m) its id */
    uint16_t *ord;                           /* (m) its index in the batch (request index - i0) */
} batch_t;

/* A shard's group of rows is handled ROW_CHUNK rows at a time in two passes:
 * the first finds (or creates) each row, fetching the index entry of the row
 * PREFETCH_ROWS ahead and each record and gradient as soon as its row is
 * found; the second works on the rows, whose records are in cache by then.
 * The index entries of the next group's first rows are fetched while a group
 * is worked on (through the shard's hint, read without its lock: a prefetch of
 * a stale address is harmless). The rows of a shard are scattered in memory:
 * without this every row would wait for two cache misses (index entry,
 * record) in turn. */
#define ROW_CHUNK 64
#define PREFETCH_ROWS 16

static inline void prefetch_bytes(const void *p, size_t n)
{
    const char *c = p;
    for (size_t o = 0; o < n; o += 64) __builtin_prefetch(c + o);
    __builtin_prefetch(c + n - 1); /* the last line of a span that straddles one more */
}

static inline void prefetch_entry(const shard_t *sh, uint64_t h)
{
    if (sh->index) __builtin_prefetch(&sh->index[h & (sh->cap - 1)]);
}

/* The first rows' index entries of shard s's group in b, before s is locked. */
static void prefetch_group(sparse_table_t *t, const batch_t *b, int s)
{
    shard_t *sh = &t->shards[s];
    const entry_t *index = atomic_load_explicit(&sh->hint_index, memory_order_relaxed);
    size_t mask = atomic_load_explicit(&sh->hint_mask, memory_order_relaxed);
    if (!index) return;
    for (uint32_t k = b->start[s]; k < PSC_MIN(b->start[s + 1], b->start[s] + PREFETCH_ROWS); k++)
        __builtin_prefetch(&index[b->h[k] & mask]);
}

/* Pass one over rows [c0, c0 + cm) of shard sh's group [r0, r1) in b:
 * recs[k] = the record of row c0 + k, created if absent (NULL: a push's id
 * not admitted yet); `touch` (a push) sets its epoch and its clock. */
static int find_rows(sparse_table_t *t, shard_t *sh, const req_t *q, const batch_t *b, size_t r1, size_t c0, size_t cm,
                     uint32_t epoch, int touch, unsigned char **recs)
{
    size_t gbytes = (size_t)t->cfg.dim * 4, fetch = PSC_MIN(t->rec_bytes, (size_t)512);
    for (size_t k = c0; k < c0 + cm; k++) {
        if (k + PREFETCH_ROWS < r1) prefetch_entry(sh, b->h[k + PREFETCH_ROWS]);
        entry_t *e;
        int rc = shard_row(t, sh, q, b->id[k], b->h[k], epoch, &e);
        if (rc) return rc;
        if (!e) {
            recs[k - c0] = NULL;
            continue;
        }
        recs[k - c0] = rec_at(t, sh, e->rec);
        if (touch) {
            if ((rc = cut_keep_row(t, sh, e))) return rc; /* a pending cut's row: kept before it changes */
            e->epoch = epoch;
            if (t->meta_off) meta_touch(t, recs[k - c0], q->clock[0], q->clock[1]);
        }
        if (touch) {
            prefetch_bytes(recs[k - c0], fetch);
            prefetch_bytes(q->grads + (b->i0 + b->ord[k]) * gbytes, gbytes);
        } else {
            prefetch_bytes(rec_values(recs[k - c0]), gbytes); /* a pull reads the values only */
        }
    }
    return 0;
}

/* The rows [r0, r1) of b, all in shard sh (locked). */
static int pull_rows(sparse_table_t *t, shard_t *sh, const req_t *q, const batch_t *b, size_t r0, size_t r1,
                     uint32_t epoch)
{
    size_t dim = (size_t)t->cfg.dim;
    if (q->read_only || t->cms_w) { /* evaluation, or admission: rows as they are, none created */
        for (size_t k = r0; k < r1; k++) {
            float *dst = q->out + (b->i0 + b->ord[k]) * dim;
            const entry_t *e = shard_find(sh, b->id[k], b->h[k]);
            if (e)
                memcpy(dst, rec_values(rec_at(t, sh, e->rec)), dim * sizeof(float));
            else
                psc_table_row_init(&t->cfg.init, t->cfg.seed, t->name_hash, b->id[k], dst, (int)dim);
        }
        return 0;
    }
    unsigned char *recs[ROW_CHUNK];
    for (size_t c0 = r0; c0 < r1; c0 += ROW_CHUNK) {
        size_t cm = PSC_MIN((size_t)ROW_CHUNK, r1 - c0);
        int rc = find_rows(t, sh, q, b, r1, c0, cm, epoch, 0, recs);
        if (rc) return rc;
        for (size_t k = 0; k < cm; k++)
            memcpy(q->out + (b->i0 + b->ord[c0 + k]) * dim, rec_values(recs[k]), dim * sizeof(float));
    }
    return 0;
}

static int push_rows(sparse_table_t *t, shard_t *sh, const req_t *q, const batch_t *b, size_t r0, size_t r1,
                     uint32_t epoch)
{
    int dim = t->cfg.dim;
    size_t gbytes = (size_t)dim * 4;
    unsigned char *recs[ROW_CHUNK];
    float *w[ROW_CHUNK];
    const void *g[ROW_CHUNK];
    int64_t ts[ROW_CHUNK];
    size_t ord[ROW_CHUNK];
    for (size_t c0 = r0; c0 < r1; c0 += ROW_CHUNK) {
        size_t cm = PSC_MIN((size_t)ROW_CHUNK, r1 - c0), m = 0;
        int rc = find_rows(t, sh, q, b, r1, c0, cm, epoch, 1, recs);
        if (rc) return rc;
        for (size_t k = 0; k < cm; k++) {
            size_t i = b->i0 + b->ord[c0 + k];
            if (!recs[k]) { /* not admitted: dropped; a push-pull reads its initial values */
                count(&t->dropped, 1);
                if (q->out)
                    psc_table_row_init(&t->cfg.init, t->cfg.seed, t->name_hash, b->id[c0 + k], q->out + i * (size_t)dim,
                                       dim);
                continue;
            }
            memcpy(&ts[m], recs[k], 8);
            ts[m]++; /* the row's own step (LazyAdam) */
            memcpy(recs[k], &ts[m], 8);
            w[m] = rec_values(recs[k]);
            g[m] = q->grads + i * gbytes;
            ord[m++] = i;
        }
        optim_apply_rows(&t->cfg.opt, q->lr, w, g, ts, m, dim);
        if (q->out)
            for (size_t k = 0; k < m; k++) memcpy(q->out + ord[k] * (size_t)dim, w[k], gbytes);
    }
    return 0;
}

/* Ids [i0, i0 + m) of request q grouped by shard into b (whose arrays hold m
 * entries). */
static void batch_group(const req_t *q, size_t i0, size_t m, batch_t *b)
{
    uint32_t pos[SPARSE_TABLE_SHARDS];
    b->i0 = i0;
    memset(b->start, 0, sizeof b->start);
    for (size_t j = 0; j < m; j++) b->start[shard_of(psc_mix64((uint64_t)id_at(q->ids, i0 + j))) + 1]++;
    for (int s = 0; s < SPARSE_TABLE_SHARDS; s++) {
        b->start[s + 1] += b->start[s];
        pos[s] = b->start[s];
    }
    for (size_t j = 0; j < m; j++) { /* hashing again beats keeping m hashes in request order */
        int64_t id = id_at(q->ids, i0 + j);
        uint64_t h = psc_mix64((uint64_t)id);
        uint32_t k = pos[shard_of(h)]++;
        b->h[k] = h;
        b->id[k] = id;
        b->ord[k] = (uint16_t)j;
    }
}

static inline int group_empty(const batch_t *b, int s) { return !b || b->start[s] == b->start[s + 1]; }

/* The next shard from s on with rows in push batch pb or pull batch lb
 * (either NULL: none), SPARSE_TABLE_SHARDS when none is left. */
static int next_shard(const batch_t *pb, const batch_t *lb, int s)
{
    while (s < SPARSE_TABLE_SHARDS && group_empty(pb, s) && group_empty(lb, s)) s++;
    return s;
}

static void prefetch_groups(sparse_table_t *t, const batch_t *pb, const batch_t *lb, int s)
{
    if (s >= SPARSE_TABLE_SHARDS) return;
    if (pb) prefetch_group(t, pb, s);
    if (lb) prefetch_group(t, lb, s);
}

/* Each shard with rows in push batch pb (of request pq) or pull batch lb
 * (of lq) locked once: its pushes applied, then its pulls read (a row both
 * pushed and pulled is read with the push applied, its lines still in
 * cache). Either batch may be NULL. */
static int run_shards(sparse_table_t *t, const req_t *pq, const batch_t *pb, const req_t *lq, const batch_t *lb)
{
    uint32_t epoch = (uint32_t)atomic_load_explicit(&t->epoch, memory_order_relaxed);
    int s = next_shard(pb, lb, 0);
    prefetch_groups(t, pb, lb, s);
    while (s < SPARSE_TABLE_SHARDS) {
        int next = next_shard(pb, lb, s + 1), rc = 0;
        shard_t *sh = &t->shards[s];
        pthread_mutex_lock(&sh->lock);
        prefetch_groups(t, pb, lb, next);
        if (!group_empty(pb, s)) rc = push_rows(t, sh, pq, pb, pb->start[s], pb->start[s + 1], epoch);
        if (!rc && !group_empty(lb, s)) rc = pull_rows(t, sh, lq, lb, lb->start[s], lb->start[s + 1], epoch);
        if (sh->cap_rows && sh->n > sh->cap_rows) life_enforce_cap(t, sh); /* no record of this request is held */
        pthread_mutex_unlock(&sh->lock);
        if (rc) return rc;
        s = next;
    }
    return 0;
}

/* Bytes of batch scratch an id. */
#define BATCH_ID_BYTES (sizeof(uint64_t) + sizeof(int64_t) + sizeof(uint16_t))

/* Batch b's arrays for n ids in scratch p. */
static void batch_arrays(batch_t *b, void *p, size_t n)
{
    b->h = p;
    b->id = (int64_t *)(b->h + n);
    b->ord = (uint16_t *)(void *)(b->id + n);
}

static int run_rows(sparse_table_t *t, const req_t *q)
{
    uint64_t h_stack[STACK_BATCH];
    int64_t id_stack[STACK_BATCH];
    uint16_t ord_stack[STACK_BATCH];
    batch_t b = {.h = h_stack, .id = id_stack, .ord = ord_stack};
    size_t batch = STACK_BATCH;
    void *heap = NULL;
    if (q->n > STACK_BATCH) {
        /* larger batches take each lock for more rows; without the memory the
         * stack's batches still do the work */
        size_t n = PSC_MIN(q->n, (size_t)HEAP_BATCH);
        heap = malloc(n * BATCH_ID_BYTES);
        if (heap) {
            batch_arrays(&b, heap, n);
            batch = n;
        }
    }
    int rc = 0;
    for (size_t i0 = 0; i0 < q->n && !rc; i0 += batch) {
        size_t m = PSC_MIN(batch, q->n - i0);
        batch_group(q, i0, m, &b);
        rc = q->grads ? run_shards(t, q, &b, NULL, NULL) : run_shards(t, NULL, NULL, q, &b);
    }
    free(heap);
    return rc;
}

int sparse_table_read(sparse_table_t *t, const void *ids, size_t n, float *out)
{
    req_t q = {.ids = ids, .n = n, .out = out, .read_only = 1};
    int rc = run_rows(t, &q);
    if (!rc) count(&t->rows_pulled, n);
    return rc;
}

void sparse_table_initial(const sparse_table_t *t, const void *ids, size_t n, float *out)
{
    const int dim = t->cfg.dim;
    for (size_t i = 0; i < n; i++) {
        int64_t id;
        memcpy(&id, (const unsigned char *)ids + 8 * i, 8);
        psc_table_row_init(&t->cfg.init, t->cfg.seed, t->name_hash, id, out + i * (size_t)dim, dim);
    }
}

int sparse_table_pull(sparse_table_t *t, const void *ids, size_t n, float *out)
{
    req_t q = {.ids = ids, .n = n, .out = out};
    if (t->meta_off) table_clock(t, &q.clock[0], &q.clock[1]);
    int rc = run_rows(t, &q);
    if (!rc) count(&t->rows_pulled, n);
    return rc;
}

int sparse_table_push(sparse_table_t *t, const void *ids, size_t n, const void *grads, double lr, float *out)
{
    PSC_ASSERT(grads != NULL || n == 0);
    static const unsigned char none[1];
    req_t q = {.ids = ids, .grads = grads ? grads : none, .n = n, .lr = lr, .out = out};
    if (t->meta_off) table_clock(t, &q.clock[0], &q.clock[1]);
    int rc = run_rows(t, &q);
    if (!rc) {
        count(&t->rows_pushed, n);
        count(&t->version, 1);
    }
    return rc;
}

int sparse_table_push_pull(sparse_table_t *t, const void *push_ids, size_t npush, const void *grads, double lr,
                           const void *pull_ids, size_t npull, float *out)
{
    PSC_ASSERT(grads != NULL || npush == 0);
    void *heap = NULL;
    size_t at = (npush * BATCH_ID_BYTES + 7) & ~(size_t)7; /* the pull batch's arrays: 8-byte aligned */
    if (npush == 0 || npull == 0 || npush > HEAP_BATCH || npull > HEAP_BATCH ||
        !(heap = malloc(at + npull * BATCH_ID_BYTES))) { /* one after the other */
        int rc = sparse_table_push(t, push_ids, npush, grads, lr, NULL);
        return rc ? rc : sparse_table_pull(t, pull_ids, npull, out);
    }
    req_t pq = {.ids = push_ids, .grads = grads, .n = npush, .lr = lr}, lq = {.ids = pull_ids, .n = npull, .out = out};
    if (t->meta_off) {
        table_clock(t, &pq.clock[0], &pq.clock[1]);
        memcpy(lq.clock, pq.clock, sizeof lq.clock);
    }
    batch_t pb, lb;
    batch_arrays(&pb, heap, npush);
    batch_arrays(&lb, (unsigned char *)heap + at, npull);
    batch_group(&pq, 0, npush, &pb);
    batch_group(&lq, 0, npull, &lb);
    int rc = run_shards(t, &pq, &pb, &lq, &lb);
    free(heap);
    if (!rc) {
        count(&t->rows_pushed, npush);
        count(&t->version, 1);
        count(&t->rows_pulled, npull);
    }
    return rc;
}

/* ---- checks ---- */

/* 0 when id is in [0, rows) and in this part, else PSC_EINVAL with err naming
 * it (and its position `at` in the request unless at is SIZE_MAX). */
static int check_id(const sparse_table_t *t, int64_t id, size_t at, char *err, size_t errlen)
{
    const sparse_table_cfg_t *c = &t->cfg;
    int part = c->part;
    int64_t row;
    int outside = id < 0 || id >= c->rows;
    if (!outside && c->nparts > 1) psc_part_of(c->partition, c->rows, c->nparts, id, &part, &row);
    if (!outside && part == c->part) return 0;
    char where[48] = ""; /* formatted only for the message: this runs for every id of every request */
    if (at != SIZE_MAX) snprintf(where, sizeof where, " (ids[%zu])", at);
    if (outside)
        return psc_seterr(err, errlen, PSC_EINVAL, "id %" PRId64 "%s is outside the table's rows [0, %" PRId64 ")", id,
                          where, c->rows);
    return psc_seterr(err, errlen, PSC_EINVAL,
                      "id %" PRId64 "%s belongs to part %d of %d (partition %s), this PS holds part %d", id, where,
                      part, c->nparts, psc_partition_name(c->partition), c->part);
}

/* PSC_EINVAL naming the first id that appears a second time. */
static int check_unique(const unsigned char *ids, size_t n, char *err, size_t errlen)
{
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    int64_t set_stack[1024];
    int64_t *set = cap <= PSC_ARRAY_LEN(set_stack) ? set_stack : malloc(cap * sizeof *set);
    if (!set) return psc_seterr(err, errlen, PSC_ENOMEM, "no memory to check %zu ids for duplicates", n);
    memset(set, 0xff, cap * sizeof *set);
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        int64_t id = id_at(ids, i);
        size_t k = psc_mix64((uint64_t)id) & (cap - 1);
        while (set[k] >= 0 && set[k] != id) k = (k + 1) & (cap - 1);
        if (set[k] == id)
            rc = psc_seterr(err, errlen, PSC_EINVAL, "id %" PRId64 " appears twice (again at ids[%zu])", id, i);
        set[k] = id;
    }
    if (set != set_stack) free(set);
    return rc;
}

int sparse_table_check_ids(const sparse_table_t *t, const void *ids, size_t n, int unique, char *err, size_t errlen)
{
    if (n > SPARSE_MAX_IDS)
        return psc_seterr(err, errlen, PSC_ENOMEM, "%zu ids in one request (at most %u)", n, SPARSE_MAX_IDS);
    for (size_t i = 0; i < n; i++) {
        int rc = check_id(t, id_at(ids, i), i, err, errlen);
        if (rc) return rc;
    }
    return unique && n > 1 ? check_unique(ids, n, err, errlen) : 0;
}

int sparse_table_check_grads(const sparse_table_t *t, const void *ids, const void *grads, size_t n, char *err,
                             size_t errlen)
{
    size_t dim = (size_t)t->cfg.dim, bad = nonfinite_first(grads, n * dim);
    if (bad == n * dim) return 0;
    float f;
    memcpy(&f, (const unsigned char *)grads + 4 * bad, 4);
    return psc_seterr(err, errlen, PSC_EINVAL, "gradient of id %" PRId64 " (row %zu) element %zu is %s",
                      id_at(ids, bad / dim), bad / dim, bad % dim, isnan(f) ? "NaN" : "infinite");
}

/* ---- create and destroy ---- */

int sparse_table_check_cfg(const sparse_table_cfg_t *c, char *err, size_t errlen)
{
#define BAD(...) psc_seterr(err, errlen, PSC_EINVAL, __VA_ARGS__)
    if (!c->name[0] || !memchr(c->name, 0, sizeof c->name))
        return BAD("sparse table: name must be 1..%zu characters", sizeof c->name - 1);
    if (c->rows < 1 || c->rows > PSC_TABLE_MAX_ROWS)
        return BAD("table %s: rows %" PRId64 " must be in [1, 2^40]", c->name, c->rows);
    if (c->nparts < 1 || c->part < 0 || c->part >= c->nparts)
        return BAD("table %s: part %d of %d: need 0 <= part < nparts", c->name, c->part, c->nparts);
    if (c->partition != PSC_PART_MOD && c->partition != PSC_PART_DIV)
        return BAD("table %s: unknown partition strategy %d", c->name, (int)c->partition);
    if (c->dim < 1 || c->dim > PSC_TABLE_MAX_DIM)
        return BAD("table %s: dim %d must be in [1, %d]", c->name, c->dim, PSC_TABLE_MAX_DIM);
    const psc_initializer_t *in = &c->init;
    switch (in->kind) {
    case PSC_INIT_ZEROS: break;
    case PSC_INIT_UNIFORM:
        if (!isfinite(in->a) || !isfinite(in->b) || !(in->a <= in->b))
            return BAD("table %s: uniform initializer [%g, %g) needs finite minval <= maxval", c->name, (double)in->a,
                       (double)in->b);
        break;
    case PSC_INIT_NORMAL:
        if (!isfinite(in->a) || !isfinite(in->b) || !(in->b >= 0))
            return BAD("table %s: normal initializer needs a finite mean and stddev >= 0 (got %g, %g)", c->name,
                       (double)in->a, (double)in->b);
        break;
    default: return BAD("table %s: unknown initializer %d", c->name, (int)in->kind);
    }
    if (c->ttl_steps < 0) return BAD("table %s: eviction.ttl_steps %" PRId64 " must be >= 0", c->name, c->ttl_steps);
    if (!isfinite(c->ttl_secs) || c->ttl_secs < 0)
        return BAD("table %s: eviction.ttl_secs %g must be a finite number >= 0", c->name, c->ttl_secs);
    if (c->max_rows != 0 && (c->max_rows < SPARSE_MIN_CAP || c->max_rows > PSC_TABLE_MAX_ROWS))
        return BAD("table %s: eviction.max_rows %" PRId64 " on this part must be 0 (no cap) or in [%d, 2^40]", c->name,
                   c->max_rows, SPARSE_MIN_CAP);
    if (c->min_count > 255) return BAD("table %s: admission.min_count %u must be in [0, 255]", c->name, c->min_count);
    if (c->filter_bytes != 0 && (c->filter_bytes < SPARSE_FILTER_MIN || c->filter_bytes > SPARSE_FILTER_MAX))
        return BAD("table %s: admission.filter_bytes %" PRIu64 " must be 0 (the default, %u) or in [%u, 2^30]", c->name,
                   c->filter_bytes, SPARSE_FILTER_BYTES, SPARSE_FILTER_MIN);
    /* the hyper-parameters are the store's to check (store_check_optim) */
    if (c->opt.kind < PSC_OPT_SGD || c->opt.kind > PSC_OPT_FTRL)
        return BAD("table %s: unknown optimizer kind %d", c->name, (int)c->opt.kind);
    return 0;
#undef BAD
}

int sparse_table_create(const sparse_table_cfg_t *cfg, sparse_table_t **out, char *err, size_t errlen)
{
    *out = NULL;
    int rc = sparse_table_check_cfg(cfg, err, errlen);
    if (rc) return rc;
    sparse_table_t *t = psc_xcalloc(1, sizeof *t);
    t->cfg = *cfg;
    t->name_hash = psc_table_hash(cfg->name);
    t->nslots = optim_slot_count(&cfg->opt);
    t->rec_bytes = 8 + 4 * (size_t)cfg->dim * (size_t)(1 + t->nslots);
    t->stride = (t->rec_bytes + 7) & ~(size_t)7;
    if (cfg->ttl_steps > 0 || cfg->ttl_secs > 0 || cfg->max_rows > 0) { /* a row's meta after its record */
        t->meta_off = t->stride;
        t->stride += sizeof(rec_meta_t);
    }
    while (((size_t)2 << t->bshift) * t->stride <= BLOCK_BYTES) t->bshift++;
    t->bmask = (1u << t->bshift) - 1;
    t->block_bytes = ((size_t)1 << t->bshift) * t->stride;
    size_t shards_bytes = SPARSE_TABLE_SHARDS * sizeof(shard_t);
    t->shards = psc_xaligned(shards_bytes);
    memset(t->shards, 0, shards_bytes);
    for (int s = 0; s < SPARSE_TABLE_SHARDS; s++) {
        pthread_mutex_init(&t->shards[s].lock, NULL);
        atomic_init(&t->shards[s].hint_index, NULL);
        atomic_init(&t->shards[s].hint_mask, 0);
    }
    pthread_mutex_init(&t->slab_lock, NULL);
    atomic_init(&t->slabbing, 0);
    atomic_init(&t->epoch, 1);
    atomic_init(&t->bytes, sizeof *t + shards_bytes);
    t->copy_piece = SPARSE_COPY_PIECE;
    t->t0 = psc_now();
    life_init(t);
    *out = t;
    return 0;
}

void sparse_table_destroy(sparse_table_t *t)
{
    if (!t) return;
    for (int s = 0; s < SPARSE_TABLE_SHARDS; s++) {
        shard_t *sh = &t->shards[s];
        mem_index_free(t, sh->index, sh->cap, sh->index_slab);
        free(sh->saved); /* a cut left open (its copy failed or never ran) */
        free(sh->copied);
        life_free_shard(sh);
        pthread_mutex_destroy(&sh->lock);
    }
    mem_free_blocks(t);
    pthread_mutex_destroy(&t->slab_lock);
    free(t->shards);
    free(t);
}

const sparse_table_cfg_t *sparse_table_config(const sparse_table_t *t) { return &t->cfg; }

void sparse_table_set_step(sparse_table_t *t, int64_t step)
{
    /* only a part whose rows keep their age reads it: every other part's
     * requests leave this shared line alone */
    if (t->meta_off) atomic_store_explicit(&t->now_step, step, memory_order_relaxed);
}

size_t sparse_table_record_bytes(const sparse_table_t *t) { return t->rec_bytes; }

uint64_t sparse_table_version(const sparse_table_t *t)
{
    sparse_table_t *m = (sparse_table_t *)t; /* C11's atomic_load takes a non-const pointer */
    return atomic_load_explicit(&m->version, memory_order_relaxed);
}

void sparse_table_get_stats(const sparse_table_t *t, sparse_table_stats_t *st)
{
    sparse_table_t *m = (sparse_table_t *)t; /* C11's atomic_load takes a non-const pointer */
    st->rows = atomic_load_explicit(&m->rows, memory_order_relaxed);
    st->bytes = atomic_load_explicit(&m->bytes, memory_order_relaxed);
    st->rows_pulled = atomic_load_explicit(&m->rows_pulled, memory_order_relaxed);
    st->rows_pushed = atomic_load_explicit(&m->rows_pushed, memory_order_relaxed);
    st->version = atomic_load_explicit(&m->version, memory_order_relaxed);
    st->rows_evicted = atomic_load_explicit(&m->evicted, memory_order_relaxed);
    st->rows_dropped = atomic_load_explicit(&m->dropped, memory_order_relaxed);
    st->pause_max_ns = atomic_load_explicit(&m->pause_max_ns, memory_order_relaxed);
    st->filter_bytes = (uint64_t)t->cms_w * 4 * SPARSE_TABLE_SHARDS;
    st->waiting = t->cms_w ? life_waiting(t) : 0;
}

/* ---- scan and put ---- */

/* Restores the max-heap order of heap[0..n) below position i. */
static void heap_down(int64_t *heap, size_t n, size_t i)
{
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) return;
        if (c + 1 < n && heap[c + 1] > heap[c]) c++;
        if (heap[i] >= heap[c]) return;
        int64_t x = heap[i];
        heap[i] = heap[c];
        heap[c] = x;
        i = c;
    }
}

void sparse_table_scan(sparse_table_t *t, int64_t after, size_t max, int64_t *ids, float *vals, size_t *n, int *more)
{
    /* The page's ids: the max smallest ids > after, kept in a max-heap in ids
     * (nothing to allocate), one shard at a time under its lock; then sorted
     * (heap sort), and each row's values copied under its shard's lock. */
    size_t k = 0, found = 0;
    for (int s = 0; s < SPARSE_TABLE_SHARDS; s++) {
        shard_t *sh = &t->shards[s];
        pthread_mutex_lock(&sh->lock);
        for (size_t i = 0; i < sh->cap; i++) {
            int64_t id = sh->index[i].id;
            if (id < 0 || id <= after) continue;
            found++;
            if (k < max) {
                size_t c = k++; /* sift up */
                ids[c] = id;
                while (c && ids[(c - 1) / 2] < ids[c]) {
                    int64_t x = ids[c];
                    ids[c] = ids[(c - 1) / 2];
                    ids[(c - 1) / 2] = x;
                    c = (c - 1) / 2;
                }
            } else if (k && id < ids[0]) {
                ids[0] = id;
                heap_down(ids, k, 0);
            }
        }
        pthread_mutex_unlock(&sh->lock);
    }
    for (size_t m = k; m > 1; m--) { /* ascending */
        int64_t x = ids[0];
        ids[0] = ids[m - 1];
        ids[m - 1] = x;
        heap_down(ids, m - 1, 0);
    }
    size_t dim = (size_t)t->cfg.dim, kept = 0;
    for (size_t i = 0; i < k; i++) {
        uint64_t h = psc_mix64((uint64_t)ids[i]);
        shard_t *sh = &t->shards[shard_of(h)];
        pthread_mutex_lock(&sh->lock);
        const entry_t *e = shard_find(sh, ids[i], h);
        if (e) { /* else evicted since the first pass: not shown */
            ids[kept] = ids[i];
            memcpy(vals + kept++ * dim, rec_values(rec_at(t, sh, e->rec)), dim * sizeof(float));
        }
        pthread_mutex_unlock(&sh->lock);
    }
    *n = kept;
    *more = found > k;
}

int sparse_table_put(sparse_table_t *t, int64_t id, const void *rec, size_t len, char *err, size_t errlen)
{
    int rc = check_id(t, id, SIZE_MAX, err, errlen);
    if (rc) return rc;
    if (len != t->rec_bytes)
        return psc_seterr(err, errlen, PSC_ECORRUPT,
                          "record of id %" PRId64 " is %zu bytes, not %zu (8 + 4 * dim %d * (1 + %d slots))", id, len,
                          t->rec_bytes, t->cfg.dim, t->nslots);
    const unsigned char *p = rec;
    int64_t rt;
    memcpy(&rt, p, 8);
    if (rt < 0)
        return psc_seterr(err, errlen, PSC_ECORRUPT, "record of id %" PRId64 " has t = %" PRId64 " < 0", id, rt);
    size_t nf = (len - 8) / 4, bad = nonfinite_first(p + 8, nf);
    if (bad < nf)
        return psc_seterr(err, errlen, PSC_ECORRUPT,
                          "record of id %" PRId64 ": float %zu (%s, element %zu) is not finite", id, bad,
                          bad < (size_t)t->cfg.dim ? "value" : "slot", bad % (size_t)t->cfg.dim);
    uint64_t h = psc_mix64((uint64_t)id);
    shard_t *sh = &t->shards[shard_of(h)];
    uint32_t epoch = (uint32_t)atomic_load_explicit(&t->epoch, memory_order_relaxed), clock[2] = {0, 0};
    if (t->meta_off) table_clock(t, &clock[0], &clock[1]); /* a restored row's age starts now */
    pthread_mutex_lock(&sh->lock);
    entry_t *e = shard_find(sh, id, h);
    if (e)
        rc = cut_keep_row(t, sh, e);
    else
        rc = shard_insert(t, sh, id, h, epoch, clock, &e);
    if (!rc) {
        unsigned char *r = rec_at(t, sh, e->rec);
        memcpy(r, p, len);
        if (t->meta_off) meta_touch(t, r, clock[0], clock[1]);
        e->epoch = epoch;
        if (sh->cap_rows && sh->n > sh->cap_rows) life_enforce_cap(t, sh);
    }
    pthread_mutex_unlock(&sh->lock);
    return rc;
}
