/* idmap.h — a map from a row id to a small index (its place among a batch's
 * unique ids): open addressing with linear probing, cleared for the next
 * batch by a generation stamp instead of a memset. The CTR loader builds one
 * per table and batch (its unique ids); the prefetching step looks the ids
 * of the batches around it up in the next batch's.
 *
 * Threads: one map, one thread at a time.
 */
#ifndef PSC_IDMAP_H
#define PSC_IDMAP_H

#include "psc.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct idmap_slot {
    int64_t key;
    int32_t val;
    uint32_t stamp; /* == the map's gen: the slot is taken */
} idmap_slot_t;     /* 16 bytes: a probe touches one cache line */

typedef struct idmap {
    idmap_slot_t *slots;
    uint32_t gen;
    size_t cap; /* a power of two */
} idmap_t;

/* Empties m, with room for `need` keys at a load of at most 1/2. */
static inline void idmap_reset(idmap_t *m, size_t need)
{
    size_t cap = 64;
    while (cap < 2 * need) cap <<= 1;
    if (cap > m->cap) {
        free(m->slots);
        m->slots = psc_xaligned(cap * sizeof *m->slots);
        memset(m->slots, 0, cap * sizeof *m->slots);
        m->cap = cap;
        m->gen = 0;
    }
    if (++m->gen == 0) { /* wrapped: clear the stamps once every 2^32 batches */
        for (size_t i = 0; i < m->cap; i++) m->slots[i].stamp = 0;
        m->gen = 1;
    }
}

static inline void idmap_free(idmap_t *m)
{
    free(m->slots);
    memset(m, 0, sizeof *m);
}

/* The slot of id: where it is (*found 1) or where it goes (*found 0; the
 * caller then stores it with idmap_set). Ids are hashed ids already, or
 * small integers: one multiply spreads them. */
static inline size_t idmap_home(const idmap_t *m, int64_t id)
{
    return (size_t)(((uint64_t)id * 0x9e3779b97f4a7c15ull) >> 32) & (m->cap - 1);
}

/* Asks the cache for id's first slot: a loop over many ids prefetches a few ahead. */
static inline void idmap_prefetch(const idmap_t *m, int64_t id) { __builtin_prefetch(&m->slots[idmap_home(m, id)]); }

static inline size_t idmap_slot(const idmap_t *m, int64_t id, int *found)
{
    size_t mask = m->cap - 1, h = idmap_home(m, id);
    for (;; h = (h + 1) & mask) {
        const idmap_slot_t *e = &m->slots[h];
        if (e->stamp != m->gen) {
            *found = 0;
            return h;
        }
        if (e->key == id) {
            *found = 1;
            return h;
        }
    }
}

static inline void idmap_set(idmap_t *m, size_t slot, int64_t id, int32_t val)
{
    m->slots[slot] = (idmap_slot_t){.key = id, .val = val, .stamp = m->gen};
}

/* The value of id, or -1. */
static inline int32_t idmap_find(const idmap_t *m, int64_t id)
{
    int found;
    size_t h = idmap_slot(m, id, &found);
    return found ? m->slots[h].val : -1;
}

#endif
