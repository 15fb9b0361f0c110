/* sparse_mem.c — where a sparse table part's records and indexes live
 * (sparse_table_internal.h).
 *
 * A row's lookup reads its shard's index entry, then its record, each at a
 * random place of the whole part. On 4 KiB pages a part of hundreds of MiB
 * misses the TLB on nearly every one of them, and each miss walks the page
 * tables; on 2 MiB pages the TLB covers gigabytes (bench_sparse's
 * recommendation step at 4 M rows a table: 0.147-0.149 us an id with both on
 * huge pages, 0.159-0.161 with the records only, 0.162-0.170 with neither).
 * So once a part is big its memory comes in huge pages (psc_huge_alloc:
 * transparent huge pages asked for with madvise), and a small part costs no
 * huge page:
 *   - record blocks: a part's first SLAB_AFTER bytes are malloc'd a block at
 *     a time; later blocks are carved in turn from 2 MiB slabs shared by the
 *     part's shards. Blocks are never freed before the table is, so a slab
 *     is carved once, front to back; at most one slab is partly used.
 *   - index arrays (a power of two of 16-byte entries, a shard's whole
 *     index, replaced by one twice its size when it grows): under
 *     ISLAB_MIN bytes malloc'd; from PSC_HUGE_PAGE on, a mapping of their
 *     own; in between, one of the 2 MiB / size arrays of a slab of their
 *     size class. A class's slab is unmapped when its last array is freed:
 *     the shards of a part grow together (their rows are a uniform hash's
 *     share), so as they pass to the next class the old class's slabs empty
 *     and go.
 * All under the table's slab_lock, taken only when a shard needs a block or
 * a new index (under its own lock): not on a request's path otherwise.
 * stats.bytes counts the slabs and mappings whole.
 */
#include "sparse_table_internal.h"

#include "psc.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define SLAB_BYTES PSC_HUGE_PAGE     /* a slab of record blocks or index arrays */
#define SLAB_AFTER ((size_t)4 << 20) /* a part's bytes before its blocks come from slabs */
#define ISLAB_MIN ((size_t)64 << 10) /* the smallest index array carved from a slab */

/* A slab of index arrays of one size class: 2 MiB / size of them (at most 32). */
struct islab {
    unsigned char *base;
    uint32_t free;      /* bit i: array i is free */
    struct islab *next; /* in its class's list */
};

static int islab_class(size_t bytes)
{
    int k = 0;
    while ((ISLAB_MIN << k) < bytes) k++;
    return k;
}

/* ---- record blocks ---- */

/* A malloc'd block: one of shard sh's first (mem_block_alloc). */
static unsigned char *malloc_block(sparse_table_t *t, shard_t *sh)
{
    PSC_ASSERT(sh->nheap == sh->nblocks); /* malloc'd blocks come first */
    unsigned char *block = malloc(t->block_bytes);
    if (!block) return NULL;
    count(&t->bytes, t->block_bytes);
    sh->nheap++;
    return block;
}

/* Room for one more block slab (slab_lock held). 0: no memory. */
static int grow_slabs(sparse_table_t *t)
{
    size_t cap = t->slabs_cap ? 2 * t->slabs_cap : 16;
    unsigned char **s = realloc(t->slabs, cap * sizeof *s);
    if (!s) return 0;
    count(&t->bytes, (cap - t->slabs_cap) * sizeof *s);
    t->slabs = s;
    t->slabs_cap = cap;
    return 1;
}

unsigned char *mem_block_alloc(sparse_table_t *t, shard_t *sh)
{
    if (t->block_bytes > SLAB_BYTES / 8) return malloc_block(t, sh);
    if (!atomic_load_explicit(&t->slabbing, memory_order_relaxed)) {
        if (atomic_load_explicit(&t->bytes, memory_order_relaxed) < SLAB_AFTER) return malloc_block(t, sh);
        atomic_store_explicit(&t->slabbing, 1, memory_order_relaxed); /* from now on, for every shard */
    }
    unsigned char *block = NULL;
    pthread_mutex_lock(&t->slab_lock);
    if (t->slab && t->slab_used + t->block_bytes <= SLAB_BYTES) {
        block = t->slab + t->slab_used;
        t->slab_used += t->block_bytes;
    } else if (t->nslabs < t->slabs_cap || grow_slabs(t)) {
        unsigned char *slab = psc_huge_alloc(SLAB_BYTES);
        if (slab) {
            count(&t->bytes, SLAB_BYTES);
            t->slabs[t->nslabs++] = t->slab = block = slab;
            t->slab_used = t->block_bytes;
        }
    }
    pthread_mutex_unlock(&t->slab_lock);
    return block;
}

/* ---- index arrays ---- */

/* An array of class k from the class's slabs (slab_lock held); *slab its slab. */
static unsigned char *islab_take(sparse_table_t *t, int k, struct islab **slab)
{
    struct islab *s = t->islabs[k];
    while (s && !s->free) s = s->next;
    if (!s) {
        s = malloc(sizeof *s);
        if (!s) return NULL;
        if (!(s->base = psc_huge_alloc(SLAB_BYTES))) {
            free(s);
            return NULL;
        }
        uint32_t n = (uint32_t)(SLAB_BYTES / (ISLAB_MIN << k));
        s->free = n == 32 ? UINT32_MAX : (1u << n) - 1;
        s->next = t->islabs[k];
        t->islabs[k] = s;
        count(&t->bytes, SLAB_BYTES + sizeof *s);
    }
    int i = __builtin_ctz(s->free);
    s->free &= ~(1u << i);
    *slab = s;
    return s->base + (size_t)i * (ISLAB_MIN << k);
}

/* Gives back array p of class k to its slab s, unmapped once all of it is free (slab_lock held). */
static void islab_give(sparse_table_t *t, int k, struct islab *s, unsigned char *p)
{
    uint32_t n = (uint32_t)(SLAB_BYTES / (ISLAB_MIN << k));
    s->free |= 1u << ((size_t)(p - s->base) / (ISLAB_MIN << k));
    if (s->free != (n == 32 ? UINT32_MAX : (1u << n) - 1)) return;
    struct islab **at = &t->islabs[k];
    while (*at != s) at = &(*at)->next;
    *at = s->next;
    psc_huge_free(s->base, SLAB_BYTES);
    free(s);
    atomic_fetch_sub_explicit(&t->bytes, SLAB_BYTES + sizeof *s, memory_order_relaxed);
}

entry_t *mem_index_alloc(sparse_table_t *t, size_t cap, struct islab **slab)
{
    size_t n = cap * sizeof(entry_t);
    entry_t *index;
    *slab = NULL;
    if (n < ISLAB_MIN || n >= SLAB_BYTES) {
        index = n >= SLAB_BYTES ? psc_huge_alloc(n) : malloc(n);
        if (index) count(&t->bytes, n);
    } else {
        pthread_mutex_lock(&t->slab_lock);
        index = (entry_t *)(void *)islab_take(t, islab_class(n), slab);
        pthread_mutex_unlock(&t->slab_lock);
    }
    if (index) memset(index, 0xff, n); /* id -1 everywhere */
    return index;
}

void mem_index_free(sparse_table_t *t, entry_t *index, size_t cap, struct islab *slab)
{
    size_t n = cap * sizeof(entry_t);
    if (!index) return;
    if (slab) {
        pthread_mutex_lock(&t->slab_lock);
        islab_give(t, islab_class(n), slab, (unsigned char *)index);
        pthread_mutex_unlock(&t->slab_lock);
        return;
    }
    if (n >= SLAB_BYTES)
        psc_huge_free(index, n);
    else
        free(index);
    atomic_fetch_sub_explicit(&t->bytes, n, memory_order_relaxed);
}

void mem_free_blocks(sparse_table_t *t)
{
    for (int k = 0; k < ISLAB_CLASSES; k++) PSC_ASSERT(!t->islabs[k]); /* each went with its last array */
    for (size_t i = 0; i < t->nslabs; i++) psc_huge_free(t->slabs[i], SLAB_BYTES);
    free(t->slabs);
    for (int s = 0; s < SPARSE_TABLE_SHARDS; s++) {
        shard_t *sh = &t->shards[s];
        for (size_t b = 0; b < sh->nheap; b++) free(sh->blocks[b]);
        free(sh->blocks);
    }
}
