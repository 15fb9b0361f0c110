/* store_sparse_ckpt.c — the sparse table parts in checkpoints (store.h,
 * "Sparse tables in checkpoints"): which rows a checkpoint writes (a delta
 * since the previous committed one, or a full base), and a restore into
 * fresh parts swapped in whole.
 *
 * Marks: a cut (sparse_table_cut) closes an epoch and returns its mark; a
 * row changed later has a later epoch. A checkpoint's rows are those with an
 * epoch after the mark of the newest checkpoint this process committed
 * (`mark`), so a checkpoint that was prepared but never committed (discarded,
 * or the chief died) costs nothing: the next one writes its rows again.
 *
 * The cut and the copy: under the exclusive push fence an export only cuts
 * (each part's epoch closed, its 256 shards marked pending: O(shards)); the
 * rows are copied after the fence is let go, shard by shard, each under the
 * fence shared (as a push: a restore or a reset waits for one shard's copy,
 * not for the table's) and its shard's lock, while pushes run: a push that
 * changes a row of a shard not copied yet keeps the row's record for the
 * copy first (sparse_cut.c). The copy checks, at every shard, that the parts
 * are still the ones it cut (tables_gen, parts_gen): a restore or a reset in
 * between frees them with their cuts, and the export fails (PSC_ECANCELLED).
 * One export at a time (s->ckpt_lock). A commit of an older checkpoint that
 * lands between the cut and the end of the copy is a no-op, as before: the
 * pending id is this export's from the cut on.
 * Layer: under store_ckpt.c; calls store.c and sparse_table.c/sparse_cut.c only.
 */
#include "store.h"
#include "store_internal.h"

#include "psc.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A delta chain longer than this is cut by a base, whatever its size. */
#define STORE_MAX_CHAIN 8

typedef struct row_ctx {
    const store_rows_io_t *io;
    const char *name;
    uint64_t rows;
} row_ctx_t;

static int emit_row(void *arg, int64_t id, const void *rec, size_t len)
{
    row_ctx_t *c = arg;
    c->rows++;
    return c->io->row(c->io->arg, c->name, id, rec, len);
}

/* A full base when any part has no committed checkpoint (or the parts
 * disagree on it), when the chain is long, or when the deltas since the base
 * reached half of it. */
static int need_base(const store_t *s)
{
    uint64_t base = 0, delta = 0;
    for (int i = 0; i < s->ntables; i++) {
        const store_table_t *t = &s->tables[i];
        if (!t->committed_id || t->committed_id != s->tables[0].committed_id || t->chain >= STORE_MAX_CHAIN ||
            sparse_table_needs_base(t->part, t->mark))
            return 1;
        base += t->base_rows;
        delta += t->delta_rows;
    }
    return 2 * delta >= base && delta > 0;
}

int store_tables_cut(store_t *s, const store_rows_io_t *io, uint64_t ckpt_id, store_cut_t *cut, uint64_t *parent,
                     char *err, size_t errlen)
{
    /* the exclusive fence is held: nothing else is inside the store */
    *parent = 0;
    *cut = (store_cut_t){s->ntables, s->tables_gen, s->parts_gen};
    if (!s->ntables) return 0;
    if (!io || !io->table || !io->row)
        return psc_seterr(err, errlen, PSC_EINVAL, "export: %d sparse tables but nowhere to write their rows",
                          s->ntables);
    int full = need_base(s);
    for (int i = 0; i < s->ntables; i++) {
        store_table_t *t = &s->tables[i];
        uint64_t mark;
        sparse_table_cut(t->part, full ? 0 : t->mark, &mark);
        t->pending_id = ckpt_id;
        t->pending_mark = mark;
        t->pending_rows = 0;
        t->pending_full = full;
    }
    if (!full) *parent = s->tables[0].committed_id;
    return 0;
}

/* Table i's slot when the parts are still those of the cut (caller holds
 * the fence shared), else NULL. */
static store_table_t *cut_table(store_t *s, int i, const store_cut_t *cut)
{
    store_table_t *t = NULL;
    pthread_rwlock_rdlock(&s->lock); /* tables_gen changes under it (store_create_tables) */
    if (s->tables_gen == cut->tables_gen && s->parts_gen == cut->parts_gen && i < s->ntables) t = &s->tables[i];
    pthread_rwlock_unlock(&s->lock);
    return t;
}

/* After a failed copy: every part's open cut closed, nothing pending. */
static void cut_abandon(store_t *s, const store_cut_t *cut)
{
    fence_enter(s);
    for (int i = 0; i < cut->ntables; i++) {
        store_table_t *t = cut_table(s, i, cut);
        if (!t) break; /* replaced: the old parts went with their cuts */
        sparse_table_cut_abort(t->part);
        t->pending_id = 0;
    }
    fence_leave(s);
}

/* Table i's rows, shard by shard: each copied under the fence (shared) and
 * the shard's lock, then emitted with no lock held. */
static int copy_table(store_t *s, const store_cut_t *cut, int i, sparse_cut_buf_t *b, row_ctx_t *ctx)
{
    int rc = 0;
    for (int sh = 0; sh < SPARSE_TABLE_SHARDS && !rc; sh++) {
        fence_enter(s);
        store_table_t *t = cut_table(s, i, cut);
        rc = t ? sparse_table_cut_copy(t->part, sh, b) : PSC_ECANCELLED;
        fence_leave(s);
        if (!rc) rc = sparse_cut_buf_emit(b, emit_row, ctx);
    }
    if (rc) return rc;
    fence_enter(s);
    store_table_t *t = cut_table(s, i, cut);
    if (t) t->pending_rows = ctx->rows; /* read by store_ckpt_committed, under the exclusive fence */
    fence_leave(s);
    return t ? 0 : PSC_ECANCELLED;
}

int store_tables_copy(store_t *s, const store_rows_io_t *io, const store_cut_t *cut, char *err, size_t errlen)
{
    sparse_cut_buf_t b = {0};
    int rc = 0;
    for (int i = 0; i < cut->ntables && !rc; i++) {
        char name[sizeof((sparse_table_cfg_t *)0)->name];
        uint32_t rec_bytes = 0;
        fence_enter(s);
        store_table_t *t = cut_table(s, i, cut);
        if (t) {
            memcpy(name, sparse_table_config(t->part)->name, sizeof name);
            rec_bytes = (uint32_t)sparse_table_record_bytes(t->part);
        }
        fence_leave(s);
        if (!t) {
            rc = psc_seterr(err, errlen, PSC_ECANCELLED,
                            "export: the sparse tables were replaced (a restore or a reset) during the copy");
            break;
        }
        row_ctx_t ctx = {io, name, 0};
        rc = io->table(io->arg, name, rec_bytes);
        if (!rc) rc = copy_table(s, cut, i, &b, &ctx);
        if (rc == PSC_ECANCELLED)
            psc_seterr(err, errlen, rc, "export: sparse table %s was replaced (a restore or a reset) during the copy",
                       name);
        else if (rc)
            psc_seterr(err, errlen, rc, "export stopped at sparse table %s (%" PRIu64 " rows written): %s", name,
                       ctx.rows, rc < 0 ? psc_strerror(rc) : "emit failed");
    }
    sparse_cut_buf_free(&b);
    if (rc) cut_abandon(s, cut);
    return rc;
}

void store_ckpt_committed(store_t *s, uint64_t ckpt_id)
{
    pthread_rwlock_wrlock(&s->fence); /* the marks are export state */
    for (int i = 0; i < s->ntables; i++) {
        store_table_t *t = &s->tables[i];
        if (!ckpt_id || t->pending_id != ckpt_id) continue;
        t->mark = t->pending_mark;
        t->committed_id = ckpt_id;
        sparse_table_committed(t->part, t->mark); /* its tombstones are stored */
        if (t->pending_full) {
            t->base_rows = t->pending_rows;
            t->delta_rows = 0;
            t->chain = 0;
        } else {
            t->delta_rows += t->pending_rows;
            t->chain++;
        }
        t->pending_id = 0;
    }
    pthread_rwlock_unlock(&s->fence);
}

typedef struct put_ctx {
    sparse_table_t *part;
    char err[256];
} put_ctx_t;

static int put_row(void *arg, int64_t id, const void *rec, size_t len)
{
    put_ctx_t *c = arg;
    return sparse_table_put(c->part, id, rec, len, c->err, sizeof c->err);
}

void store_tables_parts_free(sparse_table_t **parts, int n)
{
    for (int i = 0; parts && i < n; i++) sparse_table_destroy(parts[i]);
    free(parts);
}

int store_tables_import_read(store_t *s, const store_rows_io_t *io, sparse_table_t ***parts, int *n, char *err,
                             size_t errlen)
{
    *parts = NULL;
    pthread_rwlock_rdlock(&s->lock);
    int nt = s->ntables;
    sparse_table_cfg_t *cfg = psc_xcalloc((size_t)(nt ? nt : 1), sizeof *cfg);
    for (int i = 0; i < nt; i++) cfg[i] = *sparse_table_config(s->tables[i].part);
    pthread_rwlock_unlock(&s->lock);
    *n = nt;
    if (!nt) {
        free(cfg);
        return 0;
    }
    int rc = 0;
    if (!io || !io->read)
        rc = psc_seterr(err, errlen, PSC_EINVAL, "import: %d sparse tables but nowhere to read their rows", nt);
    sparse_table_t **made = psc_xcalloc((size_t)nt, sizeof *made);
    for (int i = 0; i < nt && !rc; i++) {
        put_ctx_t ctx = {NULL, ""};
        rc = sparse_table_create(&cfg[i], &made[i], err, errlen);
        ctx.part = made[i];
        if (!rc) rc = io->read(io->arg, cfg[i].name, put_row, &ctx, err, errlen);
        if (rc == PSC_ENOTFOUND)
            rc = psc_seterr(err, errlen, PSC_EMISMATCH, "checkpoint has no sparse table \"%s\"", cfg[i].name);
        else if (rc && ctx.err[0])
            psc_seterr(err, errlen, rc, "checkpoint sparse table \"%s\": %s", cfg[i].name, ctx.err);
    }
    free(cfg);
    if (rc) {
        store_tables_parts_free(made, nt);
        return rc;
    }
    *parts = made;
    return 0;
}

void store_tables_import_swap(store_t *s, sparse_table_t **parts, int n)
{
    for (int i = 0; i < n && i < s->ntables; i++) {
        store_table_t *t = &s->tables[i];
        sparse_table_t *old = t->part;
        t->part = parts[i];
        parts[i] = old; /* the caller frees the old parts */
        t->mark = t->committed_id = t->base_rows = t->delta_rows = 0;
        t->chain = 0;
        t->pending_id = 0;
    }
    s->parts_gen++; /* a copy of the old parts' cut stops (store_tables_copy) */
}
