/* sparse_cut.c — a checkpoint's cut of a sparse table part and its copy
 * (sparse_table.h, "checkpoints: the cut and its copy").
 *
 * Design: copy-on-write per row, copy per shard.
 *   - The cut (no pull or push runs: the store's exclusive push fence) closes
 *     the epoch E and marks each of the 256 shards pending: cut_since and
 *     cut_epoch = E under the shard's lock. O(shards): pushes wait for
 *     nothing else.
 *   - Then the copying thread takes the shards one by one, each in pieces of
 *     copy_piece index positions, the shard's lock held for one piece and
 *     let go in between: the entries of the piece with an epoch in
 *     (since, E] (rows not changed since the cut) go into the caller's
 *     buffer, each marked in the shard's `copied` bits (by record number:
 *     records never move); after the last piece, under the same hold, the
 *     rows kept in the shard's `saved` list and the tombstones of the range
 *     go beside them and the mark is cleared. The buffer is emitted after the
 *     lock is let go.
 *   - Between two pieces the index may change under the copy: an insert
 *     takes an empty slot (the new row is not in the range), a growth
 *     rehashes every entry (the copy starts again at position 0, its bits
 *     skipping the rows it has) and a removal's backward shift moves entries
 *     back (one that moves from where the copy has not been to where it has
 *     been sets the copy's position back to it). So the copy sees every
 *     entry of the range that is still there, and takes each once.
 *   - Meanwhile every thread that changes or removes a row under a shard's
 *     lock (a push's update, a put, an eviction by the TTL or the cap) first
 *     calls cut_keep_row: in a pending shard, a row whose epoch is still in
 *     (since, E] and that the copy has not taken yet has its record appended
 *     to `saved` (one memcpy) before it changes; its new epoch is > E, so it
 *     is kept once, and it belongs to the next delta. Rows created after the
 *     cut have an epoch > E and are not copied. A push waits for at most one
 *     piece of one shard's copy, never for the table's: a push that touches
 *     every shard (a batch of random ids) pays one record copy per row of
 *     the cut it changes, not a shard copy each.
 *   - Tombstones: the cut's are the shard's dead entries with an epoch in
 *     (since, E] whose id has no row at the cut. An id with such a tombstone
 *     that had a row at the cut had it re-created after the eviction, so with
 *     an epoch in (since, E]: it is among the copied rows (untouched, or
 *     kept). So: the dead ids of the range, less the copied rows' ids.
 *     Evictions after the cut record epoch E + 1: the next delta's.
 * Invariants: a shard is pending iff cut_epoch != 0; saved and copied are
 * NULL when it is not; a row is in saved or taken by the copy, at most once
 * and not both (kept rows leave the range, taken ones are not kept); the
 * cut's rows of a pending shard are exactly its entries in range plus saved
 * plus the rows its running copy has taken. Every row of the cut has a
 * record number below the shard's nrec when its copy starts (copied_bits).
 * Memory: saved counts in the table's bytes while it lives; the copied bits
 * (a bit per record of the shard being copied) and the buffer are the
 * copy's scratch (one shard at a time), not counted.
 */
#include "sparse_table.h"
#include "sparse_table_internal.h"

#include "psc.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ---- the mutators' side ---- */

/* Whether shard sh's running copy has taken the row of record r. */
static inline int copy_has(const shard_t *sh, uint32_t r)
{
    return r < sh->copied_bits && (sh->copied[r >> 6] >> (r & 63) & 1);
}

int cut_save_row(sparse_table_t *t, shard_t *sh, const entry_t *e)
{
    /* a thread that loaded its epoch before the cut must not be here (the cut's contract) */
    PSC_ASSERT(atomic_load_explicit(&t->epoch, memory_order_relaxed) > sh->cut_epoch);
    if (sh->copied && copy_has(sh, e->rec)) return 0; /* in the copy already */
    size_t rb = t->cut_row_bytes;
    cut_saved_t *sv = sh->saved;
    if (!sv || sv->n == sv->cap) {
        size_t old = sv ? sv->cap : 0, cap = sv ? 2 * old : 16;
        cut_saved_t *p = realloc(sv, sizeof *p + cap * rb);
        if (!p) return PSC_ENOMEM;
        count(&t->bytes, (cap - old) * rb + (old ? 0 : sizeof *p));
        if (!old) p->n = 0;
        p->cap = cap;
        sh->saved = sv = p;
    }
    unsigned char *row = sv->rows + sv->n++ * rb;
    memcpy(row, &e->id, 8);
    memcpy(row + 8, rec_at(t, sh, e->rec), t->rec_bytes);
    return 0;
}

/* Clears shard sh's mark and frees its kept rows (lock held). */
static void shard_uncut(sparse_table_t *t, shard_t *sh)
{
    if (sh->saved)
        atomic_fetch_sub_explicit(&t->bytes, sizeof *sh->saved + sh->saved->cap * t->cut_row_bytes,
                                  memory_order_relaxed);
    free(sh->saved);
    sh->saved = NULL;
    free(sh->copied);
    sh->copied = NULL;
    sh->copied_bits = sh->copy_at = 0;
    sh->cut_epoch = 0;
    sh->cut_since = 0;
}

/* ---- the cut ---- */

void sparse_table_cut(sparse_table_t *t, uint64_t since, uint64_t *mark)
{
    PSC_ASSERT(t->cut_left == 0 && "a cut is open already");
    uint32_t epoch = (uint32_t)atomic_load_explicit(&t->epoch, memory_order_relaxed);
    PSC_ASSERT(epoch < UINT32_MAX); /* one epoch a cut: 4 billion checkpoints */
    PSC_ASSERT(since < UINT32_MAX); /* a mark: an epoch */
    t->cut_row_bytes = 8 + ((t->rec_bytes + 7) & ~(size_t)7);
    atomic_store_explicit(&t->epoch, epoch + 1, memory_order_relaxed);
    for (int s = 0; s < SPARSE_TABLE_SHARDS; s++) {
        shard_t *sh = &t->shards[s];
        pthread_mutex_lock(&sh->lock);
        sh->cut_since = (uint32_t)since;
        sh->cut_epoch = epoch;
        pthread_mutex_unlock(&sh->lock);
    }
    t->cut_left = SPARSE_TABLE_SHARDS;
    *mark = epoch;
}

int sparse_table_cut_left(const sparse_table_t *t) { return t->cut_left; }

void sparse_table_cut_abort(sparse_table_t *t)
{
    if (!t->cut_left) return;
    for (int s = 0; s < SPARSE_TABLE_SHARDS; s++) {
        shard_t *sh = &t->shards[s];
        pthread_mutex_lock(&sh->lock);
        shard_uncut(t, sh);
        pthread_mutex_unlock(&sh->lock);
    }
    t->cut_left = 0;
}

/* ---- the copy ---- */

/* Room in b for rows rows and dead tombstones. 0 or PSC_ENOMEM. */
static int buf_reserve(sparse_cut_buf_t *b, size_t rows, size_t dead)
{
    if (rows > b->cap) {
        size_t cap = PSC_MAX(rows, 2 * b->cap);
        unsigned char *r = realloc(b->rows, cap * b->row_bytes);
        if (!r) return PSC_ENOMEM;
        b->rows = r;
        int64_t *ids = realloc(b->scratch, cap * sizeof *ids);
        if (!ids) return PSC_ENOMEM; /* b->rows is kept at the new size; cap stays: the next call retries */
        b->scratch = ids;
        b->cap = cap;
    }
    if (dead > b->dead_cap) {
        size_t cap = PSC_MAX(dead, 2 * b->dead_cap);
        int64_t *d = realloc(b->dead, cap * sizeof *d);
        if (!d) return PSC_ENOMEM;
        b->dead = d;
        b->dead_cap = cap;
    }
    return 0;
}

static int id_cmp(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int64_t row_id(const sparse_cut_buf_t *b, size_t i)
{
    int64_t id;
    memcpy(&id, b->rows + i * b->row_bytes, 8);
    return id;
}

/* b's tombstones: sorted, each once, none of an id among b's rows (file comment). */
static void buf_settle_dead(sparse_cut_buf_t *b)
{
    if (!b->ndead) return;
    qsort(b->dead, b->ndead, sizeof *b->dead, id_cmp);
    for (size_t i = 0; i < b->n; i++) b->scratch[i] = row_id(b, i);
    if (b->n) qsort(b->scratch, b->n, sizeof *b->scratch, id_cmp); /* scratch is NULL until a shard had rows */
    size_t k = 0, r = 0;
    for (size_t i = 0; i < b->ndead; i++) {
        int64_t id = b->dead[i];
        if (k && b->dead[k - 1] == id) continue;
        while (r < b->n && b->scratch[r] < id) r++;
        if (r < b->n && b->scratch[r] == id) continue;
        b->dead[k++] = id;
    }
    b->ndead = k;
}

/* The cut's rows at index positions [copy_at, copy_at + m) of shard sh
 * (locked, its copy running) that the copy has not taken yet, into b (it
 * has room). */
static void piece_copy(sparse_table_t *t, shard_t *sh, sparse_cut_buf_t *b, size_t m)
{
    uint64_t since = sh->cut_since, epoch = sh->cut_epoch;
    for (size_t i = sh->copy_at; i < sh->copy_at + m; i++) {
        const entry_t *e = &sh->index[i];
        if (e->id < 0 || e->epoch <= since || e->epoch > epoch || copy_has(sh, e->rec)) continue;
        PSC_ASSERT(e->rec < sh->copied_bits); /* a row of the cut: its record is older than the copy */
        sh->copied[e->rec >> 6] |= (uint64_t)1 << (e->rec & 63);
        unsigned char *row = b->rows + b->n++ * b->row_bytes;
        memcpy(row, &e->id, 8);
        memcpy(row + 8, rec_at(t, sh, e->rec), t->rec_bytes);
    }
    sh->copy_at += m;
}

/* After the last piece: shard sh's kept rows and its tombstones of the cut
 * into b (lock held; b has room). */
static void shard_copy_rest(shard_t *sh, sparse_cut_buf_t *b)
{
    uint64_t since = sh->cut_since, epoch = sh->cut_epoch;
    if (sh->saved) {
        memcpy(b->rows + b->n * b->row_bytes, sh->saved->rows, sh->saved->n * b->row_bytes);
        b->n += sh->saved->n;
    }
    for (size_t i = 0; since > 0 && i < sh->ndead; i++)
        if (sh->dead[i].epoch > since && sh->dead[i].epoch <= epoch) b->dead[b->ndead++] = sh->dead[i].id;
}

/* The copy of shard sh (locked; copied set up) into b, piece by piece, the
 * lock let go between pieces. Returns with the lock held: 0 when the shard
 * is copied, or PSC_ENOMEM. */
static int shard_copy(sparse_table_t *t, shard_t *sh, sparse_cut_buf_t *b)
{
    for (;;) {
        size_t m = PSC_MIN(sh->cap - sh->copy_at, t->copy_piece);
        int last = sh->copy_at + m == sh->cap;
        size_t rows = b->n + m + (last && sh->saved ? sh->saved->n : 0), dead = last ? sh->ndead : 0;
        if (b->cap < rows || b->dead_cap < dead) { /* room, allocated without the lock */
            pthread_mutex_unlock(&sh->lock);
            int rc = buf_reserve(b, rows + rows / 8, dead);
            pthread_mutex_lock(&sh->lock);
            if (rc) return rc;
            continue; /* the shard may have changed meanwhile */
        }
        piece_copy(t, sh, b, m);
        if (last) {
            shard_copy_rest(sh, b);
            return 0;
        }
        pthread_mutex_unlock(&sh->lock);
        if (t->copy_hook) t->copy_hook(t->copy_hook_arg);
        pthread_mutex_lock(&sh->lock);
    }
}

int sparse_table_cut_copy(sparse_table_t *t, int s, sparse_cut_buf_t *b)
{
    PSC_ASSERT(s >= 0 && s < SPARSE_TABLE_SHARDS && t->cut_left > 0);
    shard_t *sh = &t->shards[s];
    b->n = b->ndead = 0;
    if (b->row_bytes != t->cut_row_bytes) { /* another table's buffer: its rows are of another size */
        b->cap = 0;
        b->row_bytes = t->cut_row_bytes;
    }
    b->rec_bytes = t->rec_bytes;
    pthread_mutex_lock(&sh->lock);
    PSC_ASSERT(sh->cut_epoch != 0 && !sh->copied && "shard copied twice");
    size_t bits = sh->nrec; /* the cut's rows were created before the cut: their records are below */
    pthread_mutex_unlock(&sh->lock);
    uint64_t *copied = calloc(bits / 64 + 1, sizeof *copied);
    if (!copied) return PSC_ENOMEM;
    pthread_mutex_lock(&sh->lock);
    sh->copied = copied;
    sh->copied_bits = bits;
    sh->copy_at = 0;
    /* a failure leaves the shard pending, its copy's bits set: rows it took
     * are not kept any more, so only sparse_table_cut_abort may follow */
    int rc = shard_copy(t, sh, b);
    if (!rc) shard_uncut(t, sh);
    pthread_mutex_unlock(&sh->lock);
    if (rc) return rc;
    t->cut_left--;
    buf_settle_dead(b);
    return 0;
}

void sparse_table_set_copy_piece(sparse_table_t *t, size_t piece, void (*hook)(void *arg), void *arg)
{
    t->copy_piece = piece ? piece : SPARSE_COPY_PIECE;
    t->copy_hook = hook;
    t->copy_hook_arg = arg;
}

int sparse_cut_buf_emit(const sparse_cut_buf_t *b, int (*emit)(void *arg, int64_t id, const void *rec, size_t len),
                        void *arg)
{
    int rc = 0;
    for (size_t i = 0; i < b->n && !rc; i++) rc = emit(arg, row_id(b, i), b->rows + i * b->row_bytes + 8, b->rec_bytes);
    for (size_t i = 0; i < b->ndead && !rc; i++) rc = emit(arg, b->dead[i], NULL, 0);
    return rc;
}

void sparse_cut_buf_free(sparse_cut_buf_t *b)
{
    free(b->rows);
    free(b->dead);
    free(b->scratch);
    memset(b, 0, sizeof *b);
}

/* ---- the cut and the copy in one call ---- */

/* A sorted export's rows: every shard's buffer appended into `all`. */
static int buf_append(sparse_cut_buf_t *all, const sparse_cut_buf_t *b)
{
    all->row_bytes = b->row_bytes;
    all->rec_bytes = b->rec_bytes;
    int rc = buf_reserve(all, all->n + b->n, all->ndead + b->ndead);
    if (rc) return rc;
    if (b->n) memcpy(all->rows + all->n * all->row_bytes, b->rows, b->n * b->row_bytes); /* NULL when empty */
    all->n += b->n;
    if (b->ndead) memcpy(all->dead + all->ndead, b->dead, b->ndead * sizeof *b->dead);
    all->ndead += b->ndead;
    return 0;
}

typedef struct row_ref {
    int64_t id;
    const unsigned char *rec; /* NULL: a tombstone */
} row_ref_t;

static int row_ref_cmp(const void *a, const void *b)
{
    int64_t x = ((const row_ref_t *)a)->id, y = ((const row_ref_t *)b)->id;
    return (x > y) - (x < y);
}

/* all's rows and tombstones in ascending id order. */
static int emit_sorted(const sparse_cut_buf_t *all, int (*emit)(void *arg, int64_t id, const void *rec, size_t len),
                       void *arg)
{
    size_t n = all->n + all->ndead;
    row_ref_t *refs = malloc((n ? n : 1) * sizeof *refs);
    if (!refs) return PSC_ENOMEM;
    for (size_t i = 0; i < all->n; i++) refs[i] = (row_ref_t){row_id(all, i), all->rows + i * all->row_bytes + 8};
    for (size_t i = 0; i < all->ndead; i++) refs[all->n + i] = (row_ref_t){all->dead[i], NULL};
    qsort(refs, n, sizeof *refs, row_ref_cmp);
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) rc = emit(arg, refs[i].id, refs[i].rec, refs[i].rec ? all->rec_bytes : 0);
    free(refs);
    return rc;
}

int sparse_table_export(sparse_table_t *t, uint64_t since, int sorted,
                        int (*emit)(void *arg, int64_t id, const void *rec, size_t len), void *arg, uint64_t *mark)
{
    uint64_t m;
    sparse_table_cut(t, since, &m);
    sparse_cut_buf_t b = {0}, all = {0};
    int rc = 0;
    for (int s = 0; s < SPARSE_TABLE_SHARDS && !rc; s++) {
        rc = sparse_table_cut_copy(t, s, &b);
        if (!rc) rc = sorted ? buf_append(&all, &b) : sparse_cut_buf_emit(&b, emit, arg);
    }
    if (!rc && sorted) rc = emit_sorted(&all, emit, arg);
    sparse_table_cut_abort(t); /* the shards left after an error */
    sparse_cut_buf_free(&b);
    sparse_cut_buf_free(&all);
    if (!rc) *mark = m;
    return rc;
}
