/* service_sparse.c — the sparse embedding tables on the wire: TableSpec
 * decoding for Create, the sparse items of a Batch (checks, pushes, pulls)
 * and the tables' part of Status.
 *
 * Invariants: a helper file under service.c and service_batch.c; it calls
 * the store and the reply helpers only.
 */
#include "service_internal.h"

#include "optim_pb.h"
#include "psc.h"
#include "wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The rows a Batch's sparse pulls may return: the reply must stay under the
 * message limit, with room for the dense pulls (PSC_BATCH_BYTES) and framing. */
#define SVC_SPARSE_REPLY_MAX (PSC_MAX_MESSAGE_BYTES - 2 * PSC_BATCH_BYTES - 65536)

int svc_tables_from_pb(const Psc__CreateRequest *r, const psc_optim_config_t *job_opt, sparse_table_cfg_t **out,
                       char *err, size_t errlen)
{
    *out = NULL;
    if (r->n_tables == 0) return 0;
    if (r->n_tables > 1024) return psc_seterr(err, errlen, PSC_EINVAL, "%zu sparse tables (at most 1024)", r->n_tables);
    sparse_table_cfg_t *c = psc_xcalloc(r->n_tables, sizeof *c);
    int rc = 0;
    for (size_t i = 0; i < r->n_tables && !rc; i++) {
        const Psc__TableSpec *t = r->tables[i];
        if (!t->name[0] || strlen(t->name) >= sizeof c[i].name) {
            rc = psc_seterr(err, errlen, PSC_EINVAL, "sparse table %zu: name of %zu bytes (1..%zu)", i, strlen(t->name),
                            sizeof c[i].name - 1);
            break;
        }
        snprintf(c[i].name, sizeof c[i].name, "%s", t->name);
        if (t->partition > PSC_PART_DIV || t->init > PSC_INIT_ZEROS || t->num_parts < 1 || t->num_parts > 65536 ||
            t->part >= t->num_parts || t->dim > PSC_TABLE_MAX_DIM) {
            rc = psc_seterr(err, errlen, PSC_EINVAL,
                            "sparse table %s: partition %u, init %u, part %u of %u or dim %u out of range", t->name,
                            t->partition, t->init, t->part, t->num_parts, t->dim);
            break;
        }
        c[i].rows = t->rows;
        c[i].nparts = (int)t->num_parts;
        c[i].part = (int)t->part;
        c[i].partition = (enum psc_partition)t->partition;
        c[i].dim = (int)t->dim;
        c[i].init.kind = (enum psc_init_kind)t->init;
        c[i].init.a = t->init_a;
        c[i].init.b = t->init_b;
        c[i].seed = t->seed;
        c[i].ttl_steps = t->ttl_steps;
        c[i].ttl_secs = t->ttl_secs;
        c[i].max_rows = t->max_rows;
        c[i].min_count = t->min_count;
        c[i].filter_bytes = t->filter_bytes;
        if (t->optimizer) {
            char why[256];
            if ((rc = psc_optim_from_pb(t->optimizer, &c[i].opt, why, sizeof why)))
                psc_seterr(err, errlen, rc, "sparse table %s: %s", t->name, why);
        } else {
            c[i].opt = *job_opt;
        }
    }
    if (rc) {
        free(c);
        return rc;
    }
    *out = c;
    return 0;
}

/* The ids of a request: n = bytes / 8 (a length that is not a multiple of 8 is refused). */
static int ids_of(const ProtobufCBinaryData *ids, size_t *n, char *err, size_t errlen)
{
    if (ids->len % 8)
        return psc_seterr(err, errlen, PSC_EINVAL, "ids of %zu bytes: not a whole number of int64", ids->len);
    *n = ids->len / 8;
    return 0;
}

/* The generation every check of r held at, or 0 when they saw different ones. */
static void note_gen(uint64_t *all, uint64_t g, int first)
{
    if (first)
        *all = g;
    else if (*all != g)
        *all = 0;
}

int svc_sparse_check(ps_service_t *svc, psc_rpc_call_t *call, const Psc__BatchRequest *r, size_t *pull_bytes,
                     uint64_t *gen)
{
    char err[512];
    size_t n = 0;
    uint64_t g = 0;
    *pull_bytes = 0;
    *gen = 0;
    for (size_t i = 0; i < r->n_sparse_push; i++) {
        const Psc__SparsePush *p = r->sparse_push[i];
        if (ids_of(&p->ids, &n, err, sizeof err)) {
            svc_reject(svc, call, PSC_EINVAL, "batch sparse push %zu (%.64s): %s", i, p->table, err);
            return -1;
        }
        int rc = store_sparse_check(svc->store, p->table, p->ids.data, n, p->values.data ? p->values.data : (void *)"",
                                    p->values.len, NULL, &g, err, sizeof err);
        if (rc) {
            svc_fail(svc, call, rc, "batch sparse push %zu: %s", i, err);
            return -1;
        }
        note_gen(gen, g, i == 0);
    }
    for (size_t i = 0; i < r->n_sparse_pull; i++) {
        const Psc__SparsePull *p = r->sparse_pull[i];
        int dim = 0;
        if (ids_of(&p->ids, &n, err, sizeof err)) {
            svc_reject(svc, call, PSC_EINVAL, "batch sparse pull %zu (%.64s): %s", i, p->table, err);
            return -1;
        }
        int rc = store_sparse_check(svc->store, p->table, p->ids.data, n, NULL, 0, &dim, &g, err, sizeof err);
        if (rc) {
            svc_fail(svc, call, rc, "batch sparse pull %zu: %s", i, err);
            return -1;
        }
        note_gen(gen, g, i == 0 && r->n_sparse_push == 0);
        *pull_bytes += n * (size_t)dim * 4;
        if (*pull_bytes > SVC_SPARSE_REPLY_MAX) {
            svc_reject(svc, call, PSC_ENOMEM,
                       "batch sparse pulls of more than %zu bytes of rows in one call (the reply must fit the %zu-byte "
                       "message limit; split the ids over several calls)",
                       SVC_SPARSE_REPLY_MAX, PSC_MAX_MESSAGE_BYTES);
            return -1;
        }
    }
    return 0;
}

/* Async: the pull item that push item i is applied with, in one pass over
 * their table (store_sparse_push_pull, at the pull's place): the one pull of
 * the table, neither read-only nor from a checkpoint, when i is the table's
 * one push; -1: none (i is applied alone, in order). Requests of more than
 * FUSE_MAX items of a kind are not fused (the search is quadratic). */
#define FUSE_MAX 16
static long fused_pull(const Psc__BatchRequest *r, size_t i)
{
    if (r->n_sparse_push > FUSE_MAX || r->n_sparse_pull > FUSE_MAX) return -1;
    const char *table = r->sparse_push[i]->table;
    for (size_t k = 0; k < r->n_sparse_push; k++)
        if (k != i && strcmp(r->sparse_push[k]->table, table) == 0) return -1;
    long j = -1;
    for (size_t k = 0; k < r->n_sparse_pull; k++) {
        const Psc__SparsePull *p = r->sparse_pull[k];
        if (strcmp(p->table, table) != 0) continue;
        if (j >= 0 || p->read_only || p->checkpoint) return -1;
        j = (long)k;
    }
    return j;
}

/* The push item fused with pull item j (fused_pull), or -1. */
static long fused_push(const Psc__BatchRequest *r, size_t j)
{
    for (size_t i = 0; i < r->n_sparse_push && r->n_sparse_push <= FUSE_MAX; i++)
        if (fused_pull(r, i) == (long)j) return (long)i;
    return -1;
}

int svc_sparse_push(ps_service_t *svc, psc_rpc_call_t *call, const Psc__BatchRequest *r, uint64_t gen, int sync,
                    int64_t *versions, int64_t *steps, protobuf_c_boolean *stale)
{
    char err[512];
    for (size_t i = 0; i < r->n_sparse_push; i++) {
        const Psc__SparsePush *p = r->sparse_push[i];
        const void *vals = p->values.data ? p->values.data : (const void *)"";
        int rc;
        if (sync) {
            store_sync_result_t res;
            rc = store_sparse_push_sync(svc->store, p->table, p->ids.data, p->ids.len / 8, vals, p->values.len,
                                        p->local_step, p->count ? p->count : 1, p->worker, psc_now(), &res, err,
                                        sizeof err);
            steps[i] = res.step;
            stale[i] = res.stale;
        } else if (fused_pull(r, i) >= 0) {
            continue; /* applied with its pull (svc_sparse_pull) */
        } else {
            rc = store_sparse_push(svc->store, p->table, p->ids.data, p->ids.len / 8, vals, p->values.len, gen,
                                   &versions[i], err, sizeof err);
        }
        if (rc) {
            svc_fail(svc, call, rc, "batch sparse push %zu: %s", i, err);
            return -1;
        }
        ps_metrics_add_push_bytes(svc->metrics, p->ids.len + p->values.len);
    }
    return 0;
}

int svc_sparse_pull(ps_service_t *svc, psc_rpc_call_t *call, const Psc__BatchRequest *r, uint64_t gen, int sync,
                    size_t bytes, int64_t *push_versions, Psc__SparseRows *rows, Psc__SparseRows **ptrs, uint8_t *data)
{
    char err[512];
    size_t at = 0;
    for (size_t i = 0; i < r->n_sparse_pull; i++) {
        const Psc__SparsePull *p = r->sparse_pull[i];
        size_t n = p->ids.len / 8;
        int64_t version = 0;
        int dim = 0, rc = 0;
        float *dst = (float *)(void *)(data + at);
        long k = sync ? -1 : fused_push(r, i);
        if (k >= 0) { /* the table's push, applied now with this pull */
            const Psc__SparsePush *q = r->sparse_push[k];
            rc = store_sparse_push_pull(svc->store, p->table, q->ids.data, q->ids.len / 8,
                                        q->values.data ? q->values.data : (const void *)"", q->values.len, p->ids.data,
                                        n, dst, (bytes - at) / 4, gen, &dim, &version, err, sizeof err);
            if (rc) {
                svc_fail(svc, call, rc, "batch sparse push %ld with pull %zu: %s", k, i, err);
                return -1;
            }
            push_versions[k] = version;
            ps_metrics_add_push_bytes(svc->metrics, q->ids.len + q->values.len);
        } else if (p->checkpoint) {
            rc = svc_sparse_pull_checkpoint(svc, p, dst, (bytes - at) / 4, &dim, &version, err, sizeof err);
        } else if (sync && p->min_step > 0 && !p->read_only) { /* version: the part's step */
            rc = store_sparse_check(svc->store, p->table, p->ids.data, n, NULL, 0, &dim, NULL, err, sizeof err);
            if (!rc && n * (size_t)dim * 4 > bytes - at)
                rc = psc_seterr(err, sizeof err, PSC_EMISMATCH, "sparse table %s changed under the batch", p->table);
            if (!rc)
                rc = store_sparse_pull_sync(svc->store, p->table, p->ids.data, n, p->min_step, dst, &version, err,
                                            sizeof err);
        } else {
            rc = store_sparse_pull(svc->store, p->table, p->ids.data, n, dst, (bytes - at) / 4, p->read_only, gen, &dim,
                                   &version, err, sizeof err);
        }
        if (rc) {
            svc_fail(svc, call, rc, "batch sparse pull %zu: %s", i, err);
            return -1;
        }
        psc__sparse_rows__init(&rows[i]);
        rows[i].table = p->table;
        rows[i].dim = (uint32_t)dim;
        rows[i].version = version;
        rows[i].values.data = data + at;
        rows[i].values.len = n * (size_t)dim * 4;
        ptrs[i] = &rows[i];
        at += rows[i].values.len;
        ps_metrics_add_pull_bytes(svc->metrics, rows[i].values.len);
    }
    return 0;
}

void svc_h_table_rows(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg)
{
    ps_service_t *svc = arg;
    char err[512];
    Psc__TableRowsRequest *r;
    SVC_DECODE(r, psc__table_rows_request__unpack, "TableRowsRequest");
    int dim = 0;
    size_t record = 0;
    int rc = r->checkpoint ? svc_checkpoint_table(svc, r->checkpoint, r->table, &dim, &record, err, sizeof err)
                           : store_sparse_check(svc->store, r->table, "", 0, NULL, 0, &dim, NULL, err, sizeof err);
    if (rc == 0 && r->records && !r->checkpoint)
        rc = psc_seterr(err, sizeof err, PSC_EINVAL, "TableRows of table %s: records only from a checkpoint",
                        r->table);
    if (rc == 0 && r->records) rc = svc_checkpoint_record_bytes(svc, r->checkpoint, r->table, &record, err, sizeof err);
    if (rc) {
        svc_fail(svc, call, rc, "%s", err); /* the store counted it */
        psc__table_rows_request__free_unpacked(r, NULL);
        return;
    }
    size_t fit = SVC_SPARSE_REPLY_MAX / (8 + (r->records ? record : 4 * (size_t)dim));
    size_t max = r->max_rows && r->max_rows < fit ? r->max_rows : fit, n = 0;
    if (max == 0) max = 1;
    int64_t *ids = malloc(max * sizeof *ids);
    float *vals = r->records ? NULL : malloc(max * (size_t)dim * sizeof *vals);
    uint8_t *recs = r->records ? malloc(max * record) : NULL;
    int more = 0;
    if (!ids || (!vals && !recs))
        rc = psc_seterr(err, sizeof err, PSC_ENOMEM, "cannot allocate a page of %zu rows", max);
    else if (r->checkpoint)
        rc = svc_table_rows_checkpoint(svc, r, dim, record, max, ids, vals, recs, &n, &more,
                                       err, sizeof err);
    else
        rc = store_table_rows(svc->store, r->table, r->after, max, ids, vals, &n, &more, err, sizeof err);
    if (rc) {
        svc_fail(svc, call, rc, "%s", err);
    } else {
        Psc__TableRowsReply rep = PSC__TABLE_ROWS_REPLY__INIT;
        rep.dim = (uint32_t)dim;
        rep.ids.data = (uint8_t *)ids;
        rep.ids.len = n * 8;
        if (recs) {
            rep.records.data = recs;
            rep.records.len = n * record;
            rep.record_bytes = (uint32_t)record;
        } else {
            rep.values.data = (uint8_t *)vals;
            rep.values.len = n * (size_t)dim * 4;
        }
        rep.more = more;
        size_t sz = psc__table_rows_reply__get_packed_size(&rep);
        psc__table_rows_reply__pack(&rep, psc_rpc_reply_alloc(call, sz));
        psc_rpc_reply_send(call);
        ps_metrics_add_pull_bytes(svc->metrics, rep.values.len + rep.records.len);
    }
    free(ids);
    free(vals);
    free(recs);
    psc__table_rows_request__free_unpacked(r, NULL);
}

void svc_h_assign_rows(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg)
{
    ps_service_t *svc = arg;
    char err[512];
    Psc__AssignRowsRequest *r;
    SVC_DECODE(r, psc__assign_rows_request__unpack, "AssignRowsRequest");
    if (r->ids.len % 8) {
        svc_reject(svc, call, PSC_EINVAL, "AssignRows of table %s: ids are %zu bytes, not a multiple of 8", r->table,
                   r->ids.len);
    } else {
        size_t n = r->ids.len / 8;
        int rc = store_sparse_assign(svc->store, r->table, r->ids.data, n, r->values.data, r->values.len, err,
                                     sizeof err);
        if (rc) {
            svc_fail(svc, call, rc, "%s", err); /* the store counted it */
        } else {
            Psc__AssignRowsReply rep = PSC__ASSIGN_ROWS_REPLY__INIT;
            rep.rows = n;
            uint8_t buf[16];
            psc_rpc_reply(call, buf, psc__assign_rows_reply__pack(&rep, buf));
        }
    }
    psc__assign_rows_request__free_unpacked(r, NULL);
}
