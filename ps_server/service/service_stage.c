/* service_stage.c — Stage: a checkpoint of this shard written from pieces the
 * chief sends (a restore onto another number of PS, worker/ps_client's
 * ps_client_reshard.c), then committed and restored like any other.
 *
 * Design: one staged checkpoint at a time (svc->stage, under its own lock;
 * the chief sends one PS's calls in order). Every piece is checked against
 * the variables and table parts the PS was created with before it is kept: a
 * tensor must be one store_export would emit, of the size it would have, its
 * pieces in order; a table's records of the size its optimizer gives. So the
 * memory it takes is bounded by the shard's own size, and a staged checkpoint
 * holds nothing the restore would not ask for. Staging is allowed only
 * between Create and Ready (the model is not being trained); a refusal for
 * the PS's state (no checkpoint store, another job, ready) leaves a staged
 * checkpoint as it is, a refused piece of it ends it. Values and slots must
 * be finite; the checkpoint's step is the global_step staged (else the
 * request's). What the store checks at restore (row ids in this part, rows'
 * values finite, t >= 0, every tensor present) it checks then, as for any
 * checkpoint. No RocksDB call runs under the stage lock.
 *
 * A warm start that carries optimizer slots or global_step (the chief's
 * ps_client_reshard.c, from another job's checkpoint) stages only what it
 * takes from the source and prepares with `fill`: every tensor and table part
 * not staged is then the live model's as created and assigned (its initial
 * values, fresh slots); `base_step` goes into the description, and a restore
 * of the checkpoint, or of any later one (each Save copies it), sets it.
 */
#include "service_internal.h"

#include "ckpt.h"
#include "log.h"
#include "nonfinite.h"
#include "optim.h"
#include "psc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void svc_stage_init(svc_stage_t *st)
{
    memset(st, 0, sizeof *st);
    pthread_mutex_init(&st->lock, NULL);
}

/* Drops what is staged (the lock held). */
static void stage_drop(svc_stage_t *st)
{
    if (st->w) ckpt_abort(st->w);
    st->w = NULL;
    st->id = 0;
    free(st->buf);
    st->buf = NULL;
    st->tensor[0] = '\0';
    st->total = st->filled = 0;
    for (int i = 0; i < st->ntables; i++) free(st->tables[i]);
    free(st->tables);
    st->tables = NULL;
    st->ntables = 0;
}

void svc_stage_deinit(svc_stage_t *st)
{
    stage_drop(st);
    pthread_mutex_destroy(&st->lock);
}

void svc_stage_release(ps_service_t *svc)
{
    pthread_mutex_lock(&svc->stage.lock);
    stage_drop(&svc->stage);
    pthread_mutex_unlock(&svc->stage.lock);
}

/* Checkpoint id is free in the store (no lock held: it reads the store). */
static int id_free(ps_service_t *svc, uint64_t id, char *err, size_t errlen)
{
    ckpt_info_t info;
    int rc = ckpt_get_info(svc->ckpt, id, &info, err, errlen);
    if (rc == 0)
        return psc_seterr(err, errlen, PSC_EEXISTS, "checkpoint %llu exists: a staged checkpoint needs a new id",
                          (unsigned long long)id);
    return rc == PSC_ENOTFOUND ? 0 : rc;
}

/* The first call of a staged checkpoint (its id checked free): begins it
 * (the lock held; ckpt_begin only allocates). */
static void stage_begin(svc_stage_t *st, ps_service_t *svc, const Psc__StageRequest *r)
{
    stage_drop(st);
    st->w = ckpt_begin(svc->ckpt, r->id, r->job_id, r->step);
    st->id = r->id;
}

/* A piece of a tensor (the lock held). */
static int stage_tensor(ps_service_t *svc, const Psc__StageRequest *r, char *err, size_t errlen)
{
    svc_stage_t *st = &svc->stage;
    if (st->buf && strcmp(st->tensor, r->tensor) != 0)
        return psc_seterr(err, errlen, PSC_EINVAL, "staged tensor %s: %llu of its %llu bytes came before %s",
                          st->tensor, (unsigned long long)st->filled, (unsigned long long)st->total, r->tensor);
    if (!st->buf) {
        uint64_t want = 0;
        if (strlen(r->tensor) > CKPT_MAX_NAME || store_ckpt_tensor_bytes(svc->store, r->tensor, &want))
            return psc_seterr(err, errlen, PSC_EINVAL, "staged tensor %s is none of this shard's", r->tensor);
        if (r->total != want)
            return psc_seterr(err, errlen, PSC_EINVAL, "staged tensor %s: %llu bytes, but this shard's has %llu",
                              r->tensor, (unsigned long long)r->total, (unsigned long long)want);
        if (r->offset != 0)
            return psc_seterr(err, errlen, PSC_EINVAL, "staged tensor %s starts at byte %llu, not 0", r->tensor,
                              (unsigned long long)r->offset);
        if (!(st->buf = malloc(want ? want : 1)))
            return psc_seterr(err, errlen, PSC_ENOMEM, "staged tensor %s: cannot allocate %llu bytes", r->tensor,
                              (unsigned long long)want);
        snprintf(st->tensor, sizeof st->tensor, "%s", r->tensor);
        st->total = want;
        st->filled = 0;
    }
    if (r->offset != st->filled || r->total != st->total || r->data.len > st->total - st->filled)
        return psc_seterr(err, errlen, PSC_EINVAL,
                          "staged tensor %s: %zu bytes at %llu of %llu, but %llu of its %llu bytes came in order",
                          r->tensor, r->data.len, (unsigned long long)r->offset, (unsigned long long)r->total,
                          (unsigned long long)st->filled, (unsigned long long)st->total);
    if (r->data.len) memcpy(st->buf + st->filled, r->data.data, r->data.len);
    st->filled += r->data.len;
    if (st->filled < st->total) return 0;
    size_t tl = strlen(st->tensor), bad;
    int is_step = strcmp(st->tensor, "global_step") == 0;
    int counts = is_step || (tl > 3 && strcmp(st->tensor + tl - 3, "/.t") == 0);
    if (!counts && (bad = nonfinite_first(st->buf, st->total / 4)) < st->total / 4)
        return psc_seterr(err, errlen, PSC_EINVAL, "staged tensor %s: element %zu is not finite", st->tensor, bad);
    if (is_step) { /* the checkpoint's step is the global_step it holds, as a Save's */
        int64_t v;
        memcpy(&v, st->buf, 8);
        ckpt_set_step(st->w, v);
    }
    int rc = ckpt_add(st->w, st->tensor, st->buf, st->total);
    free(st->buf);
    st->buf = NULL;
    st->tensor[0] = '\0';
    if (rc) psc_seterr(err, errlen, rc, "staged tensor %s could not be added (twice?)", r->tensor);
    return rc;
}

/* Rows of a table part (the lock held). */
static int stage_rows(ps_service_t *svc, const Psc__StageRequest *r, char *err, size_t errlen)
{
    svc_stage_t *st = &svc->stage;
    store_table_info_t *info = NULL;
    int nt = 0;
    store_list_tables(svc->store, &info, &nt);
    size_t record = 0;
    for (int i = 0; i < nt; i++)
        if (strcmp(info[i].cfg.name, r->table) == 0)
            record = 8 + 4 * (size_t)info[i].cfg.dim * (size_t)(1 + optim_slot_count(&info[i].cfg.opt));
    free(info);
    if (!record) return psc_seterr(err, errlen, PSC_EINVAL, "staged rows of table %s: no part of it here", r->table);
    if (r->record_bytes != record)
        return psc_seterr(err, errlen, PSC_EINVAL,
                          "staged rows of table %s: records of %u bytes, but this part's are %zu", r->table,
                          r->record_bytes, record);
    size_t n = r->ids.len / 8;
    if (r->ids.len % 8 || r->data.len != n * record)
        return psc_seterr(err, errlen, PSC_EINVAL,
                          "staged rows of table %s: %zu bytes of ids and %zu of records do not make whole rows",
                          r->table, r->ids.len, r->data.len);
    int known = 0;
    for (int i = 0; i < st->ntables && !known; i++) known = strcmp(st->tables[i], r->table) == 0;
    if (!known) {
        int rc = ckpt_add_table(st->w, r->table, (uint32_t)record);
        if (rc) return psc_seterr(err, errlen, rc, "staged table %s could not be declared", r->table);
        st->tables = psc_xrealloc(st->tables, (size_t)(st->ntables + 1) * sizeof *st->tables);
        st->tables[st->ntables++] = psc_xstrdup(r->table);
    }
    for (size_t i = 0; i < n; i++) {
        int64_t id;
        memcpy(&id, r->ids.data + 8 * i, 8);
        int rc = ckpt_add_row(st->w, r->table, id, r->data.data + i * record, record);
        if (rc)
            return psc_seterr(err, errlen, rc, "staged row %lld of table %s could not be added (twice?)", (long long)id,
                              r->table);
    }
    return 0;
}

/* The last call: takes the writer out of the staged state (the lock held),
 * or refuses while a tensor is incomplete. */
static int stage_detach(svc_stage_t *st, ckpt_writer_t **w, char *err, size_t errlen)
{
    if (st->buf)
        return psc_seterr(err, errlen, PSC_EINVAL, "staged tensor %s: only %llu of its %llu bytes came", st->tensor,
                          (unsigned long long)st->filled, (unsigned long long)st->total);
    *w = st->w;
    st->w = NULL;
    return 0;
}

/* Fill: what was not staged, from the live model (tensors by name; a table
 * part's rows unless the part was staged). */
typedef struct fill {
    ckpt_writer_t *w;
    int skip; /* the rows of the current table: it was staged */
} fill_t;

static int fill_tensor(void *arg, const char *name, const void *data, size_t len)
{
    fill_t *f = arg;
    return ckpt_has(f->w, name) ? 0 : ckpt_add(f->w, name, data, len);
}

static int fill_table(void *arg, const char *name, uint32_t record_len)
{
    fill_t *f = arg;
    f->skip = ckpt_has_table(f->w, name);
    return f->skip ? 0 : ckpt_add_table(f->w, name, record_len);
}

static int fill_row(void *arg, const char *name, int64_t id, const void *rec, size_t len)
{
    fill_t *f = arg;
    return f->skip ? 0 : ckpt_add_row(f->w, name, id, rec, len);
}

/* The fill, the description, then prepare (no lock held: it writes the
 * store). */
static int stage_prepare(ps_service_t *svc, ckpt_writer_t *w, const Psc__StageRequest *r, char *err, size_t errlen)
{
    if (r->fill) {
        fill_t f = {.w = w};
        store_rows_io_t rows = {.table = fill_table, .row = fill_row, .arg = &f};
        int rc = store_export_created(svc->store, fill_tensor, &f, &rows, r->id, err, errlen);
        if (rc) {
            ckpt_abort(w);
            return rc;
        }
    }
    svc_add_description(svc, w, r->base_step, r->replica_steps, PSC_MIN(r->n_replica_steps, PSC_MAX_REPLICAS));
    ckpt_set_parent(w, 0);               /* a full base */
    return ckpt_prepare(w, err, errlen); /* frees w */
}

void svc_h_stage(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg)
{
    ps_service_t *svc = arg;
    char err[512];
    Psc__StageRequest *r;
    SVC_DECODE(r, psc__stage_request__unpack, "StageRequest");
    char have[17] = ""; /* a job id */
    int ready = store_is_ready(svc->store, have);
    svc_stage_t *st = &svc->stage;
    /* refusals for the PS's state: the staged checkpoint, if any, stays as it is */
    int rc = 0;
    if (!svc->ckpt)
        rc = psc_seterr(err, sizeof err, PSC_ENOTREADY, "ps_server %d has no --checkpoint_dir", svc->task_index);
    else if (!have[0] || strcmp(have, r->job_id) != 0)
        rc = psc_seterr(err, sizeof err, PSC_ENOTREADY, "Stage for job %s, but this ps_server holds %s%s", r->job_id,
                        have[0] ? "job " : "no model", have);
    else if (ready)
        rc = psc_seterr(err, sizeof err, PSC_ENOTREADY,
                        "Stage of job %s: the model is ready (a checkpoint is staged only before training starts)",
                        r->job_id);
    if (rc) {
        svc_fail(svc, call, rc, "%s", err);
        psc__stage_request__free_unpacked(r, NULL);
        return;
    }
    /* a new id begins a staged checkpoint: it must be free in the store */
    pthread_mutex_lock(&st->lock);
    int begins = st->id != r->id;
    pthread_mutex_unlock(&st->lock);
    if (r->id == 0) rc = psc_seterr(err, sizeof err, PSC_EINVAL, "Stage: checkpoint id 0");
    if (rc == 0 && begins) rc = id_free(svc, r->id, err, sizeof err);
    ckpt_writer_t *w = NULL;
    pthread_mutex_lock(&st->lock);
    if (rc == 0 && begins) stage_begin(st, svc, r);
    if (rc == 0 && st->id != r->id) /* another chief's call began another one meanwhile */
        rc = psc_seterr(err, sizeof err, PSC_EINVAL, "Stage of checkpoint %llu: checkpoint %llu is being staged",
                        (unsigned long long)r->id, (unsigned long long)st->id);
    if (rc == 0 && r->tensor[0]) rc = stage_tensor(svc, r, err, sizeof err);
    if (rc == 0 && r->table[0]) rc = stage_rows(svc, r, err, sizeof err);
    if (rc == 0 && r->prepare) rc = stage_detach(st, &w, err, sizeof err);
    /* a refused piece of the staged checkpoint ends it: the chief starts again */
    if ((rc && st->id == r->id) || w) stage_drop(st);
    pthread_mutex_unlock(&st->lock);
    if (w) rc = stage_prepare(svc, w, r, err, sizeof err);
    if (rc) {
        PSC_WARN("staged checkpoint %llu: %s", (unsigned long long)r->id, err);
        svc_reject(svc, call, rc, "%s", err);
    } else {
        if (r->prepare)
            PSC_INFO("checkpoint %llu prepared from staged pieces%s", (unsigned long long)r->id,
                     r->fill ? " and the model as created (a warm start)" : " (a restore onto this cluster's shape)");
        Psc__StageReply rep = PSC__STAGE_REPLY__INIT;
        rep.bytes = r->data.len;
        uint8_t buf[16];
        psc_rpc_reply(call, buf, psc__stage_reply__pack(&rep, buf));
    }
    psc__stage_request__free_unpacked(r, NULL);
}
