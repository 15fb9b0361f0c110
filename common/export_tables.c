/* export_tables.c — see export_tables.h. */
#include "export_tables.h"

#include "bytes.h"
#include "psc.h"
#include "table.h"
#include "wire.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct export_table {
    char name[PSC_EXPORT_NAME_MAX - 8]; /* room for "/values" */
    int64_t rows;
    int dim, nparts;
    enum psc_partition partition;
    psc_initializer_t init;
    uint64_t seed;
    int *part_ps; /* (nparts) the PS of each part, -1 before its Status */
    int64_t *ids; /* (n) ascending */
    float *vals;  /* (n * dim) */
    size_t n;
    float *dense; /* (rows * dim) the dense form, or NULL */
};

static export_table_t *find(export_tables_t *x, const char *name)
{
    for (int i = 0; i < x->n; i++)
        if (strcmp(x->t[i].name, name) == 0) return &x->t[i];
    return NULL;
}

int export_tables_add(export_tables_t *x, const Psc__StatusReply *r, int ps, char *err, size_t errlen)
{
    for (size_t i = 0; i < r->n_tables; i++) {
        const Psc__TableStatus *s = r->tables[i];
        if (strlen(s->name) >= sizeof x->t->name || !s->name[0])
            return psc_seterr(err, errlen, PSC_ECORRUPT, "ps %d: a table name of %zu bytes", ps, strlen(s->name));
        if (s->num_parts < 1 || s->num_parts > 65536 || s->part >= s->num_parts || s->dim < 1 ||
            s->dim > PSC_TABLE_MAX_DIM || s->rows < 1 || s->rows > PSC_TABLE_MAX_ROWS || s->partition > PSC_PART_DIV ||
            s->init > PSC_INIT_ZEROS)
            return psc_seterr(err, errlen, PSC_ECORRUPT, "ps %d: table %s: part %u of %u, %lld rows of dim %u", ps,
                              s->name, s->part, s->num_parts, (long long)s->rows, s->dim);
        export_table_t *t = find(x, s->name);
        if (!t) {
            x->t = psc_xrealloc(x->t, (size_t)(x->n + 1) * sizeof *x->t);
            t = &x->t[x->n++];
            memset(t, 0, sizeof *t);
            snprintf(t->name, sizeof t->name, "%s", s->name);
            t->rows = s->rows;
            t->dim = (int)s->dim;
            t->nparts = (int)s->num_parts;
            t->partition = (enum psc_partition)s->partition;
            t->init = (psc_initializer_t){(enum psc_init_kind)s->init, s->init_a, s->init_b};
            t->seed = s->seed;
            t->part_ps = psc_xmalloc((size_t)t->nparts * sizeof *t->part_ps);
            for (int k = 0; k < t->nparts; k++) t->part_ps[k] = -1;
        } else if (t->rows != s->rows || t->dim != (int)s->dim || t->nparts != (int)s->num_parts ||
                   t->partition != (enum psc_partition)s->partition || t->init.kind != (enum psc_init_kind)s->init ||
                   t->init.a != s->init_a || t->init.b != s->init_b || t->seed != s->seed) {
            return psc_seterr(err, errlen, PSC_EMISMATCH, "table %s: ps %d's part %u disagrees with the other parts",
                              s->name, ps, s->part);
        }
        if (t->part_ps[s->part] >= 0)
            return psc_seterr(err, errlen, PSC_EMISMATCH, "table %s: part %u is on ps %d and on ps %d", s->name,
                              s->part, t->part_ps[s->part], ps);
        t->part_ps[s->part] = ps;
    }
    return 0;
}

/* Reads every row of part k of t (pages), appending to t->ids / t->vals. */
static int fetch_part(export_table_t *t, int k, psc_rpc_channel_t *ch, uint64_t ckpt, int timeout_ms, size_t *cap,
                      char *err, size_t errlen)
{
    int64_t after = -1;
    size_t d = (size_t)t->dim;
    for (int more = 1; more;) {
        Psc__TableRowsRequest req = PSC__TABLE_ROWS_REQUEST__INIT;
        req.table = t->name;
        req.after = after;
        req.checkpoint = ckpt;
        uint8_t buf[256];
        psc_rpc_op_t op;
        int rc = psc_rpc_call(ch, PSC_M_TABLE_ROWS, buf, psc__table_rows_request__pack(&req, buf), timeout_ms, 0, &op);
        if (rc) {
            rc = psc_seterr(err, errlen, psc_rpc_code_errno(op.code), "table %s part %d (%s): TableRows failed: %s: %s",
                            t->name, k, psc_rpc_channel_target(ch), psc_rpc_code_name(op.code), op.msg);
            psc_rpc_op_clear(&op);
            return rc;
        }
        Psc__TableRowsReply *r = psc__table_rows_reply__unpack(NULL, op.reply_len, op.reply);
        psc_rpc_op_clear(&op);
        size_t n = r ? r->ids.len / 8 : 0;
        if (!r || r->ids.len % 8 || r->dim != (uint32_t)t->dim || r->values.len != n * d * 4 || (r->more && !n)) {
            if (r) psc__table_rows_reply__free_unpacked(r, NULL);
            return psc_seterr(err, errlen, PSC_ECORRUPT, "table %s part %d (%s): a TableRows reply that is not a page",
                              t->name, k, psc_rpc_channel_target(ch));
        }
        if (t->n + n > *cap) {
            while (t->n + n > *cap) *cap = *cap ? 2 * *cap : 4096;
            t->ids = psc_xrealloc(t->ids, *cap * sizeof *t->ids);
            t->vals = psc_xrealloc(t->vals, *cap * d * sizeof *t->vals);
        }
        for (size_t i = 0; i < n; i++) {
            int64_t id = (int64_t)psc_le_get64(r->ids.data + 8 * i);
            int part;
            int64_t row;
            if (id <= after || id >= t->rows) {
                psc__table_rows_reply__free_unpacked(r, NULL);
                return psc_seterr(err, errlen, PSC_ECORRUPT, "table %s part %d: id %" PRId64 " out of order or range",
                                  t->name, k, id);
            }
            psc_part_of(t->partition, t->rows, t->nparts, id, &part, &row);
            if (part != k) {
                psc__table_rows_reply__free_unpacked(r, NULL);
                return psc_seterr(err, errlen, PSC_ECORRUPT, "table %s part %d: id %" PRId64 " is part %d's", t->name,
                                  k, id, part);
            }
            t->ids[t->n + i] = after = id;
        }
        memcpy(t->vals + t->n * d, r->values.data, n * d * 4);
        t->n += n;
        more = r->more;
        psc__table_rows_reply__free_unpacked(r, NULL);
    }
    return 0;
}

static const int64_t *sort_ids;
static int by_id(const void *a, const void *b)
{
    int64_t x = sort_ids[*(const size_t *)a], y = sort_ids[*(const size_t *)b];
    return (x > y) - (x < y);
}

/* The parts' rows (each part ascending) in one ascending order. */
static void join(export_table_t *t, int rows_only)
{
    size_t d = (size_t)t->dim, *ord = psc_xmalloc((t->n ? t->n : 1) * sizeof *ord);
    for (size_t i = 0; i < t->n; i++) ord[i] = i;
    sort_ids = t->ids;
    qsort(ord, t->n, sizeof *ord, by_id);
    int64_t *ids = psc_xmalloc((t->n ? t->n : 1) * sizeof *ids);
    float *vals = psc_xmalloc((t->n ? t->n : 1) * d * sizeof *vals);
    for (size_t i = 0; i < t->n; i++) {
        ids[i] = t->ids[ord[i]];
        memcpy(vals + i * d, t->vals + ord[i] * d, d * 4);
    }
    free(ord);
    free(t->ids);
    free(t->vals);
    t->ids = ids;
    t->vals = vals;
    if (rows_only || (uint64_t)t->rows * d * 4 >= PSC_EXPORT_DENSE_TABLE_BYTES) return;
    t->dense = psc_xmalloc((size_t)t->rows * d * sizeof *t->dense);
    uint32_t h = psc_table_hash(t->name);
    for (size_t i = 0, at = 0; i < (size_t)t->rows; i++) {
        if (at < t->n && t->ids[at] == (int64_t)i)
            memcpy(t->dense + i * d, t->vals + at++ * d, d * 4);
        else
            psc_table_row_init(&t->init, t->seed, h, (int64_t)i, t->dense + i * d, t->dim);
    }
}

int export_tables_fetch(export_tables_t *x, psc_rpc_channel_t **ch, int timeout_ms, char *err, size_t errlen)
{
    for (int i = 0; i < x->n; i++) {
        export_table_t *t = &x->t[i];
        size_t cap = 0;
        for (int k = 0; k < t->nparts; k++)
            if (t->part_ps[k] < 0)
                return psc_seterr(err, errlen, PSC_EMISMATCH, "table %s: no PS holds part %d of %d", t->name, k,
                                  t->nparts);
        for (int k = 0; k < t->nparts; k++) {
            int rc = fetch_part(t, k, ch[t->part_ps[k]], x->ckpt, timeout_ms, &cap, err, errlen);
            if (rc) return rc;
        }
        join(t, x->rows_only);
    }
    return 0;
}

static psc_export_tensor_t *add(psc_export_tensor_t **tensors, int *nt)
{
    *tensors = psc_xrealloc(*tensors, (size_t)(*nt + 1) * sizeof **tensors);
    psc_export_tensor_t *e = &(*tensors)[(*nt)++];
    memset(e, 0, sizeof *e);
    return e;
}

void export_tables_tensors(const export_tables_t *x, psc_export_tensor_t **tensors, int *nt)
{
    for (int i = 0; i < x->n; i++) {
        const export_table_t *t = &x->t[i];
        uint64_t d = (uint64_t)t->dim;
        if (t->dense) {
            psc_export_tensor_t *e = add(tensors, nt);
            snprintf(e->name, sizeof e->name, "%s", t->name);
            e->dtype = PSC_ST_F32;
            e->rank = 2;
            e->shape[0] = t->rows;
            e->shape[1] = t->dim;
            e->bytes = (uint64_t)t->rows * d * 4;
            e->mem = t->dense;
            continue;
        }
        psc_export_tensor_t *e = add(tensors, nt);
        snprintf(e->name, sizeof e->name, "%s/ids", t->name);
        e->dtype = PSC_ST_I64;
        e->rank = 1;
        e->shape[0] = (int64_t)t->n;
        e->bytes = t->n * 8;
        e->mem = t->ids;
        e = add(tensors, nt);
        snprintf(e->name, sizeof e->name, "%s/values", t->name);
        e->dtype = PSC_ST_F32;
        e->rank = 2;
        e->shape[0] = (int64_t)t->n;
        e->shape[1] = t->dim;
        e->bytes = t->n * d * 4;
        e->mem = t->vals;
    }
}

void export_tables_free(export_tables_t *x)
{
    for (int i = 0; i < x->n; i++) {
        free(x->t[i].part_ps);
        free(x->t[i].ids);
        free(x->t[i].vals);
        free(x->t[i].dense);
    }
    free(x->t);
    x->t = NULL;
    x->n = 0;
}
