/* store_sparse_ckpt.c — the sparse table parts in checkpoints (store.h,
 * "Sparse tables in checkpoints"): which rows a checkpoint writes (a delta
 * since the previous committed one, or a full base), and a restore into
 * fresh parts swapped in whole.
 *
 * Marks: sparse_table_export closes an epoch and returns its mark; a row
 * changed later has a later epoch. A checkpoint's rows are those with an
 * epoch after the mark of the newest checkpoint this process committed
 * (`mark`), so a checkpoint that was prepared but never committed (discarded,
 * or the chief died) costs nothing: the next one writes its rows again.
 * Layer: under store_ckpt.c; calls store.c and sparse_table.c only.
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

int store_tables_export(store_t *s, const store_rows_io_t *io, uint64_t ckpt_id, uint64_t *parent, char *err,
                        size_t errlen)
{
    *parent = 0;
    if (!s->ntables) return 0;
    if (!io || !io->table || !io->row)
        return psc_seterr(err, errlen, PSC_EINVAL, "export: %d sparse tables but nowhere to write their rows",
                          s->ntables);
    int full = need_base(s);
    for (int i = 0; i < s->ntables; i++) {
        store_table_t *t = &s->tables[i];
        const sparse_table_cfg_t *c = sparse_table_config(t->part);
        int rc = io->table(io->arg, c->name, (uint32_t)sparse_table_record_bytes(t->part));
        row_ctx_t ctx = {io, c->name, 0};
        uint64_t mark = 0;
        if (!rc) rc = sparse_table_export(t->part, full ? 0 : t->mark, 0, emit_row, &ctx, &mark);
        if (rc)
            return psc_seterr(err, errlen, rc, "export stopped at sparse table %s (%" PRIu64 " rows written): %s",
                              c->name, ctx.rows, rc < 0 ? psc_strerror(rc) : "emit failed");
        t->pending_id = ckpt_id;
        t->pending_mark = mark;
        t->pending_rows = ctx.rows;
        t->pending_full = full;
    }
    if (!full) *parent = s->tables[0].committed_id;
    return 0;
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
}
