/* sparse_table_internal.h — what sparse_table.c (rows, pulls, pushes),
 * sparse_life.c (expiry, the cap, admission, tombstones), sparse_cut.c (a
 * checkpoint's cut and its copy) and sparse_mem.c (where rows live) share:
 * the shard and table structs and the inline lookups. The design is at the
 * top of sparse_table.c; a row's life at the end of sparse_table.h. Not for
 * other modules. */
#ifndef PSC_SPARSE_TABLE_INTERNAL_H
#define PSC_SPARSE_TABLE_INTERNAL_H

#include "sparse_table.h"

#include "psc.h"
#include "rng.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#define REC_NONE UINT32_MAX /* no record: the end of a shard's free list */
#define ISLAB_CLASSES 5     /* index arrays of 64 KiB .. 1 MiB carved from slabs (sparse_mem.c) */

typedef struct entry {
    int64_t id;     /* -1: empty */
    uint32_t rec;   /* record number in the shard */
    uint32_t epoch; /* the table's epoch when the row was last created, updated or put */
} entry_t;

/* Beside each record of a part with a TTL or a cap (at rec + meta_off): the
 * row's id (-1: the record is free) and when it was last updated. */
typedef struct rec_meta {
    int64_t id;
    uint32_t step; /* global step (clamped to 32 bits) */
    uint32_t secs; /* seconds since the part was created */
} rec_meta_t;

/* An evicted row, kept until a committed checkpoint holds its tombstone. */
typedef struct dead {
    int64_t id;
    uint64_t epoch;
} dead_t;

/* A pending shard's kept rows (sparse_cut.c): n of cap rows of
 * t->cut_row_bytes, each the id then the record. */
typedef struct cut_saved {
    size_t n, cap;
    unsigned char rows[];
} cut_saved_t;

typedef struct shard {
    _Alignas(64) pthread_mutex_t lock; /* everything below; 64-byte aligned: no false sharing */
    entry_t *index;                    /* (cap) NULL before the first row */
    size_t cap, n;                     /* n rows (= index entries in use), n * 10 <= cap * 7 */
    size_t nrec;                       /* records handed out (live or on the free list) */
    uint32_t free_head;                /* the first free record (its first 4 bytes: the next), REC_NONE */
    uint32_t cut_epoch;                /* the open checkpoint cut's epoch; 0: not pending (below) */
    unsigned char **blocks;            /* (nblocks) each 2^bshift records */
    size_t nblocks, blocks_cap;
    size_t nheap;             /* blocks[0, nheap) are malloc'd, the rest carved from the table's slabs */
    struct islab *index_slab; /* the slab index was carved from, NULL: none (sparse_mem.c) */
    /* index and cap - 1 again, for prefetches by a thread that does not hold
     * the lock (run_batch): possibly stale, never dereferenced */
    _Atomic(entry_t *) hint_index;
    atomic_size_t hint_mask;
    size_t cap_rows; /* the shard's share of max_rows (0: no cap) */
    dead_t *dead;    /* (ndead) tombstones since the last committed checkpoint */
    size_t ndead, dead_cap;
    /* The open checkpoint cut (sparse_cut.c): rows with cut_since < epoch <=
     * cut_epoch belong to it; cut_epoch 0: the shard is not pending (copied,
     * or no cut open). saved: the cut's rows changed or removed since the
     * cut, kept for its copy; NULL when none. */
    uint32_t cut_since;
    struct cut_saved *saved;
    /* The shard's copy while it runs (sparse_cut.c; copied NULL: none runs):
     * a bit for each record number < copied_bits whose row it has taken,
     * and the next index position it looks at. */
    uint64_t *copied;
    size_t copied_bits, copy_at;
    uint8_t *cms;         /* admission: 4 rows of cms_w counters; NULL without admission */
    size_t cms_incs;      /* increments since the last halving */
    atomic_size_t cms_nz; /* nonzero counters of row 0 (the waiting ids' estimate) */
} shard_t;

struct sparse_table {
    sparse_table_cfg_t cfg;
    uint32_t name_hash; /* psc_table_hash(cfg.name) */
    int nslots;
    size_t rec_bytes, stride, block_bytes;
    size_t meta_off; /* offset of a record's rec_meta_t, 0: none (no TTL, no cap) */
    unsigned bshift;
    uint32_t bmask;
    uint32_t cms_w;                /* admission: counters per sketch row of a shard (a power of two); 0 off */
    unsigned cms_shift;            /* 64 - log2(cms_w) */
    double t0;                     /* psc_now() at create: the seconds clock's zero */
    atomic_uint_fast32_t epoch;    /* the current epoch, >= 1 */
    atomic_int_fast64_t now_step;  /* the global step the store last gave */
    atomic_uint_fast32_t now_secs; /* seconds since t0 at the latest request */
    atomic_uint_fast64_t rows, bytes, rows_pulled, rows_pushed, version;
    atomic_uint_fast64_t evicted, dropped, pause_max_ns;
    atomic_uint_fast64_t dead_lost; /* the newest epoch whose tombstone was not kept (0: none) */
    shard_t *shards;                /* (SPARSE_TABLE_SHARDS) */
    size_t cut_row_bytes;           /* a copied row: 8 (id) + rec_bytes rounded up to 8 */
    int cut_left;                   /* shards of the open cut not copied yet (the copying thread's) */
    size_t copy_piece;              /* index positions a piece of a shard's copy (sparse_cut.c) */
    void (*copy_hook)(void *arg);   /* tests: run between two pieces (sparse_table_set_copy_piece) */
    void *copy_hook_arg;
    /* Huge-page slabs (sparse_mem.c), under slab_lock: slab the one record
     * blocks are carved from, slab_used bytes of it taken; slabs (nslabs)
     * all of them; slabbing: set once the part passed SLAB_AFTER bytes, never
     * unset. islabs: each index size class's slabs. */
    pthread_mutex_t slab_lock;
    atomic_int slabbing;
    unsigned char *slab;
    size_t slab_used;
    unsigned char **slabs;
    size_t nslabs, slabs_cap;
    struct islab *islabs[ISLAB_CLASSES];
};

static inline void count(atomic_uint_fast64_t *c, uint64_t n) { atomic_fetch_add_explicit(c, n, memory_order_relaxed); }

static inline unsigned shard_of(uint64_t h) { return (unsigned)(h >> 56); }

static inline unsigned char *rec_at(const sparse_table_t *t, const shard_t *sh, uint32_t r)
{
    return sh->blocks[r >> t->bshift] + (size_t)(r & t->bmask) * t->stride;
}

/* The values of a record (after its int64 t; 8-byte aligned: blocks come from
 * malloc, strides are multiples of 8). */
static inline float *rec_values(unsigned char *rec) { return (float *)(void *)(rec + 8); }

static inline rec_meta_t *rec_meta(const sparse_table_t *t, unsigned char *rec)
{
    return (rec_meta_t *)(void *)(rec + t->meta_off);
}

static inline entry_t *shard_find(const shard_t *sh, int64_t id, uint64_t h)
{
    if (!sh->index) return NULL;
    size_t mask = sh->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        entry_t *e = &sh->index[i];
        if (e->id == id) return e;
        if (e->id < 0) return NULL; /* load <= 0.7: an empty entry ends every probe */
    }
}

/* Stamps a row updated now (a part with meta). */
static inline void meta_touch(const sparse_table_t *t, unsigned char *rec, uint32_t step, uint32_t secs)
{
    rec_meta_t *m = rec_meta(t, rec);
    m->step = step;
    m->secs = secs;
}

/* The clock of a request: the step and seconds its updates are stamped with. */
static inline void table_clock(sparse_table_t *t, uint32_t *step, uint32_t *secs)
{
    int64_t s = atomic_load_explicit(&t->now_step, memory_order_relaxed);
    *step = s <= 0 ? 0 : s >= (int64_t)UINT32_MAX ? UINT32_MAX : (uint32_t)s;
    double now = psc_now() - t->t0;
    *secs = now <= 0 ? 0 : now >= (double)UINT32_MAX ? UINT32_MAX : (uint32_t)now;
    atomic_store_explicit(&t->now_secs, *secs, memory_order_relaxed);
}

/* ---- sparse_cut.c, for sparse_table.c and sparse_life.c ---- */

/* Keeps the record of row e (shard sh, locked) for the open cut's copy:
 * cut_keep_row's slow side. 0 or PSC_ENOMEM. */
int cut_save_row(sparse_table_t *t, shard_t *sh, const entry_t *e);

/* Before row e of shard sh (locked) changes or goes: when the shard is
 * pending for a cut that holds the row (its epoch in (cut_since,
 * cut_epoch]: it was not changed since the cut) and the shard's copy has not
 * taken it yet, its record is kept for the copy. 0, or PSC_ENOMEM: then the
 * row must not change. Without a pending cut (cut_epoch 0) this is one
 * compare. */
static inline int cut_keep_row(sparse_table_t *t, shard_t *sh, const entry_t *e)
{
    if (e->epoch > sh->cut_epoch || e->epoch <= sh->cut_since) return 0;
    return cut_save_row(t, sh, e);
}

/* ---- sparse_mem.c, for sparse_table.c ---- */

/* A new block of shard sh's records (block_bytes), sh locked. NULL: no memory. */
unsigned char *mem_block_alloc(sparse_table_t *t, shard_t *sh);
/* An index of cap entries, all empty, for a shard (locked); *slab: the slab
 * it came from (NULL: none), for mem_index_free. NULL: no memory. */
entry_t *mem_index_alloc(sparse_table_t *t, size_t cap, struct islab **slab);
/* Frees a shard's index of cap entries (NULL ok) from slab. */
void mem_index_free(sparse_table_t *t, entry_t *index, size_t cap, struct islab *slab);
/* At destroy, after every index is freed: the record blocks and their slabs. */
void mem_free_blocks(sparse_table_t *t);

/* ---- sparse_life.c, for sparse_table.c ---- */

/* Sets up a new part's life: meta_off, the shards' caps, the sketch. */
void life_init(sparse_table_t *t);
void life_free_shard(shard_t *sh);
/* Admission of absent id (hash h) by a push, shard locked: 1 when it gets
 * its row now; else its push is counted and dropped. */
int life_admit(sparse_table_t *t, shard_t *sh, uint64_t h);
/* Shard sh (locked) over its cap: its least recently updated rows removed
 * down to 15/16 of the cap. */
void life_enforce_cap(sparse_table_t *t, shard_t *sh);
/* The admission filter's waiting ids (an estimate). */
uint64_t life_waiting(const sparse_table_t *t);

#endif
