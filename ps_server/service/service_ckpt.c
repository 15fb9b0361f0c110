/* service_ckpt.c — the chief's checkpoint calls on a ps_server: Fence and
 * Unfence (an async checkpoint's cut), Save, Commit, Restore, ListCheckpoints,
 * Pull from a checkpoint, and Release.
 *
 * Design: ckpt.h holds the format, the chief drives the two phases
 * (worker/job/trainer.c); the fence itself is service_fence.c's. Invariants: a
 * handler file: it calls down into the fence, parking and reply helpers,
 * never into service.c or another handler file. A refusal that is the
 * cluster's state (no --checkpoint_dir, another job) is not counted as
 * rejected; a malformed request is. */
#include "service_internal.h"

#include "log.h"
#include "psc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int no_checkpoints(ps_service_t *svc, psc_rpc_call_t *call)
{
    if (svc->ckpt) return 0;
    svc_fail(svc, call, PSC_ENOTREADY, "ps_server %d has no --checkpoint_dir", svc->task_index);
    return 1;
}

/* The job id of the store's model, or a failure naming the mismatch. */
static int check_job(ps_service_t *svc, psc_rpc_call_t *call, const char *job_id)
{
    char have[17] = "";
    store_is_ready(svc->store, have); /* the job id whether ready or not */
    if (!have[0]) {
        svc_fail(svc, call, PSC_ENOTREADY, "ps_server %d holds no model yet", svc->task_index);
        return 1;
    }
    if (strcmp(have, job_id) != 0) {
        svc_fail(svc, call, PSC_ENOTREADY, "ps_server %d holds job %s, not %s", svc->task_index, have, job_id);
        return 1;
    }
    return 0;
}

static int emit_to_writer(void *arg, const char *name, const void *data, size_t len)
{
    return ckpt_add(arg, name, data, len);
}

static int table_to_writer(void *arg, const char *name, uint32_t record_len)
{
    return ckpt_add_table(arg, name, record_len);
}

static int row_to_writer(void *arg, const char *name, int64_t id, const void *rec, size_t len)
{
    return ckpt_add_row(arg, name, id, rec, len);
}

/* An async Save's fence (the chief's, service_fence.c): released at the
 * store's cut, before the table rows are copied, since pushes after the cut
 * are the next checkpoint's anyway (the store keeps what they change for the
 * copy: sparse_cut.c). */
typedef struct save_fence {
    ps_service_t *svc;
    uint64_t id;
    double ms; /* how long it held pushes (-1: it was not held any more) */
    int released;
} save_fence_t;

static void release_at_cut(void *arg)
{
    save_fence_t *f = arg;
    f->ms = svc_fence_unpin(f->svc, f->id);
    f->released = 1;
}

void svc_h_save(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg)
{
    ps_service_t *svc = arg;
    char err[512];
    Psc__SaveRequest *r;
    SVC_DECODE(r, psc__save_request__unpack, "SaveRequest");
    if (no_checkpoints(svc, call) || check_job(svc, call, r->job_id)) goto out;
    double t0 = psc_now();
    /* async, one cut: the chief's Fence (service_fence.c) holds every PS
     * still; the store's cut happens under it, then it is released (at the
     * cut: release_at_cut; after a failed export: below) */
    int rc = r->fence ? svc_fence_pin(svc, r->fence, err, sizeof err) : 0;
    if (rc) {
        PSC_WARN("checkpoint %llu: %s", (unsigned long long)r->id, err);
        svc_fail(svc, call, rc, "checkpoint %llu: %s", (unsigned long long)r->id, err);
        goto out;
    }
    /* phase 1: copy the shard into the writer behind the push fence (in sync
     * mode only at step boundary r->step), then write it outside the fence */
    int64_t held = -1;
    ckpt_writer_t *w = ckpt_begin(svc->ckpt, r->id, r->job_id, r->step);
    /* the replicas' steps at the cut (only the PS holding global_step hears of them): async, the fence holds
     * every step out, so they are the steps global_step counts; a restarted job resumes after them. A
     * replica that has not stepped since the model was restored is where the restored checkpoint says. */
    int64_t steps[PSC_MAX_REPLICAS];
    pthread_mutex_lock(&svc->lock);
    int64_t base = svc->base_step;
    size_t nsteps = PSC_MIN(PSC_MAX(svc->max_rank, svc->n_restored_replica_steps), PSC_MAX_REPLICAS);
    for (size_t i = 0; i < nsteps; i++) {
        int64_t restored = i < svc->n_restored_replica_steps ? svc->restored_replica_steps[i] : 0;
        steps[i] = PSC_MAX(svc->replica_steps[i], restored);
    }
    pthread_mutex_unlock(&svc->lock);
    /* what the checkpoint holds, for a reader without the job's spec (Describe) */
    svc_add_description(svc, w, base, steps, nsteps);
    save_fence_t fence = {.svc = svc, .id = r->fence};
    store_rows_io_t rows = {.table = table_to_writer,
                            .row = row_to_writer,
                            .arg = w,
                            .cut = r->fence ? release_at_cut : NULL,
                            .cut_arg = &fence};
    uint64_t parent = 0;
    rc = store_export_ex(svc->store, emit_to_writer, w, &rows, r->id, store_get_sync(svc->store, NULL) ? r->step : -1,
                         &held, &parent, err, sizeof err);
    ckpt_set_parent(w, parent); /* the table rows are a delta on it (0: a full base) */
    double fence_ms = !r->fence ? 0 : fence.released ? fence.ms : svc_fence_unpin(svc, r->fence);
    if (rc) {
        ckpt_abort(w);
        if (rc != PSC_ESTALE) PSC_WARN("checkpoint %llu: export failed: %s", (unsigned long long)r->id, err);
        svc_fail(svc, call, rc, "checkpoint %llu: %s", (unsigned long long)r->id, err);
        goto out;
    }
    if (held >= 0) ckpt_set_step(w, held); /* this shard holds global_step: its value is the step */
    if (svc->debug_save_delay_ms > 0) {    /* tests: a window in which to kill the PS mid-save */
        PSC_INFO("checkpoint %llu: shard copied; writing it in %d ms (--debug_save_delay_ms)",
                 (unsigned long long)r->id, svc->debug_save_delay_ms);
        struct timespec ts = {svc->debug_save_delay_ms / 1000, (long)(svc->debug_save_delay_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    if ((rc = ckpt_prepare(w, err, sizeof err))) {
        PSC_WARN("checkpoint %llu: %s", (unsigned long long)r->id, err);
        svc_fail(svc, call, rc, "%s", err);
        goto out;
    }
    ckpt_info_t info;
    if ((rc = ckpt_get_info(svc->ckpt, r->id, &info, err, sizeof err))) {
        svc_fail(svc, call, rc, "%s", err);
        goto out;
    }
    char rows_note[96] = "";
    if (info.ntables && info.parent)
        snprintf(rows_note, sizeof rows_note, ", %llu table rows (a delta on checkpoint %llu)",
                 (unsigned long long)info.rows, (unsigned long long)info.parent);
    else if (info.ntables)
        snprintf(rows_note, sizeof rows_note, ", %llu table rows (a full base)", (unsigned long long)info.rows);
    PSC_INFO("checkpoint %llu prepared: step %lld, %u tensors%s, %.1f MiB in %.0f ms", (unsigned long long)r->id,
             (long long)info.step, info.ntensors, rows_note, (double)info.bytes / 1048576.0, (psc_now() - t0) * 1000);
    Psc__SaveReply rep = PSC__SAVE_REPLY__INIT;
    rep.step = info.step;
    rep.tensors = info.ntensors;
    rep.bytes = info.bytes;
    rep.fence_ms = fence_ms;
    uint8_t buf[64];
    psc_rpc_reply(call, buf, psc__save_reply__pack(&rep, buf));
out:
    psc__save_request__free_unpacked(r, NULL);
}

void svc_h_commit(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg)
{
    ps_service_t *svc = arg;
    char err[512];
    Psc__CommitRequest *r;
    SVC_DECODE(r, psc__commit_request__unpack, "CommitRequest");
    if (no_checkpoints(svc, call)) goto out;
    int rc = r->discard ? ckpt_discard(svc->ckpt, r->id, err, sizeof err)
                        : ckpt_commit(svc->ckpt, r->id, r->keep ? (int)r->keep : 1, err, sizeof err);
    if (rc) {
        PSC_WARN("checkpoint %llu: %s failed: %s", (unsigned long long)r->id, r->discard ? "discard" : "commit", err);
        svc_fail(svc, call, rc, "%s", err);
        goto out;
    }
    if (!r->discard) store_ckpt_committed(svc->store, r->id); /* the next one's table rows: a delta on it */
    PSC_INFO("checkpoint %llu %s", (unsigned long long)r->id, r->discard ? "discarded" : "committed");
    Psc__CommitReply rep = PSC__COMMIT_REPLY__INIT;
    uint8_t buf[8];
    psc_rpc_reply(call, buf, psc__commit_reply__pack(&rep, buf));
out:
    psc__commit_request__free_unpacked(r, NULL);
}

typedef struct restore_src {
    ckpt_db_t *db;
    uint64_t id;
} restore_src_t;

static int fetch_from_ckpt(void *arg, const char *name, void **data, size_t *len, char *err, size_t errlen)
{
    restore_src_t *src = arg;
    return ckpt_read(src->db, src->id, name, data, len, err, errlen);
}

static int rows_from_ckpt(void *arg, const char *name, int (*put)(void *, int64_t, const void *, size_t), void *put_arg,
                          char *err, size_t errlen)
{
    restore_src_t *src = arg;
    return ckpt_read_rows(src->db, src->id, name, put, put_arg, err, errlen);
}

static int ckpt_description(ps_service_t *svc, uint64_t id, Psc__StatusReply **out, char *err, size_t errlen);

/* What a checkpoint's description keeps for the job beside its tensors. */
typedef struct desc_job {
    int64_t base;                    /* the job's base_step (0 when none) */
    int64_t steps[PSC_MAX_REPLICAS]; /* the replica steps at the cut */
    uint32_t nsteps;                 /* 0: none recorded */
} desc_job_t;

/* A checkpoint restores only onto the shard that wrote it: the same task
 * index of as many PS (its description says; an older one does not, and the
 * variables' names are the check). Another shape is re-split by the chief
 * (Stage). 0 or PSC_ENOTFOUND (the chief's restore then looks further).
 * *job: what the description keeps for the job (zeros when none). */
static int same_shape(ps_service_t *svc, uint64_t id, desc_job_t *job, char *err, size_t errlen)
{
    Psc__StatusReply *d = NULL;
    memset(job, 0, sizeof *job);
    int rc = ckpt_description(svc, id, &d, err, errlen);
    if (rc == PSC_ENOTFOUND) return 0;
    if (rc) return rc;
    job->base = d->base_step;
    job->nsteps = (uint32_t)PSC_MIN(d->n_replica_steps, PSC_MAX_REPLICAS);
    for (uint32_t i = 0; i < job->nsteps; i++) job->steps[i] = d->replica_steps[i];
    if (d->num_ps && svc->num_ps && ((int)d->num_ps != svc->num_ps || (int)d->ps_index != svc->task_index))
        rc = psc_seterr(err, errlen, PSC_ENOTFOUND,
                        "checkpoint %llu holds the shard of ps %u of %u, none for this ps %d of %d (the chief "
                        "restores it re-split)",
                        (unsigned long long)id, d->ps_index, d->num_ps, svc->task_index, svc->num_ps);
    psc__status_reply__free_unpacked(d, NULL);
    return rc;
}

void svc_h_restore(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg)
{
    ps_service_t *svc = arg;
    char err[512];
    Psc__RestoreRequest *r;
    SVC_DECODE(r, psc__restore_request__unpack, "RestoreRequest");
    if (no_checkpoints(svc, call) || check_job(svc, call, r->job_id)) goto out;
    ckpt_info_t info;
    int rc = ckpt_get_info(svc->ckpt, r->id, &info, err, sizeof err);
    if (rc == 0 && !info.committed)
        rc = psc_seterr(err, sizeof err, PSC_ENOTFOUND, "checkpoint %llu was never committed",
                        (unsigned long long)r->id);
    if (rc == 0 && strcmp(info.job_id, r->job_id) != 0 && (!r->alias_job_id[0] || strcmp(info.job_id, r->alias_job_id)))
        rc = psc_seterr(err, sizeof err, PSC_EMISMATCH, "checkpoint %llu belongs to job %s", (unsigned long long)r->id,
                        info.job_id);
    desc_job_t job;
    memset(&job, 0, sizeof job);
    if (rc == 0) rc = same_shape(svc, r->id, &job, err, sizeof err);
    restore_src_t src = {svc->ckpt, r->id};
    store_rows_io_t rows = {.read = rows_from_ckpt, .arg = &src};
    if (rc == 0) rc = store_import_ex(svc->store, fetch_from_ckpt, &src, &rows, r->step, err, sizeof err);
    if (rc) {
        PSC_WARN("restore of checkpoint %llu refused: %s", (unsigned long long)r->id, err);
        svc_fail(svc, call, rc, "%s", err);
        goto out;
    }
    /* replies parked on steps of the abandoned timeline would never come */
    svc_fail_parked(svc, 0, PSC_ESTALE, "restored a checkpoint: pull again");
    svc_fence_fail_all(svc, 0, PSC_ESTALE, "restored a checkpoint: pull again");
    pthread_mutex_lock(&svc->lock);
    svc->restored_step = info.step; /* replicas that have not reported a step resume after their share of it */
    svc->base_step = job.base;
    memcpy(svc->restored_replica_steps, job.steps, sizeof job.steps);
    svc->n_restored_replica_steps = job.nsteps;
    pthread_mutex_unlock(&svc->lock);
    PSC_INFO("restored checkpoint %llu of job %s: step %lld, %u tensors", (unsigned long long)r->id, r->job_id,
             (long long)info.step, info.ntensors);
    Psc__RestoreReply rep = PSC__RESTORE_REPLY__INIT;
    rep.step = info.step;
    rep.tensors = info.ntensors;
    uint8_t buf[32];
    psc_rpc_reply(call, buf, psc__restore_reply__pack(&rep, buf));
out:
    psc__restore_request__free_unpacked(r, NULL);
}

void svc_h_list_checkpoints(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg)
{
    ps_service_t *svc = arg;
    char err[512];
    Psc__ListCheckpointsRequest *r;
    SVC_DECODE(r, psc__list_checkpoints_request__unpack, "ListCheckpointsRequest");
    Psc__ListCheckpointsReply rep = PSC__LIST_CHECKPOINTS_REPLY__INIT;
    ckpt_info_t *infos = NULL;
    int n = 0;
    rep.enabled = svc->ckpt != NULL;
    if (svc->ckpt && ckpt_list(svc->ckpt, &infos, &n, err, sizeof err) != 0) {
        svc_fail(svc, call, PSC_ECORRUPT, "%s", err);
        goto out;
    }
    Psc__CheckpointInfo *ci = psc_xcalloc((size_t)(n ? n : 1), sizeof *ci);
    Psc__CheckpointInfo **cp = psc_xcalloc((size_t)(n ? n : 1), sizeof *cp);
    char(*problems)[256] = psc_xcalloc((size_t)(n ? n : 1), sizeof *problems);
    for (int i = 0; i < n; i++) {
        if (r->job_id[0] && strcmp(infos[i].job_id, r->job_id) != 0) continue;
        Psc__CheckpointInfo *c = &ci[rep.n_checkpoints];
        psc__checkpoint_info__init(c);
        c->id = infos[i].id;
        c->step = infos[i].step;
        c->committed = infos[i].committed;
        c->tensors = infos[i].ntensors;
        c->bytes = infos[i].bytes;
        c->created_unix = infos[i].created_unix;
        c->job_id = infos[i].job_id;
        c->parent = infos[i].parent;
        c->rows = infos[i].rows;
        c->needed_by = infos[i].needed_by;
        c->problem = problems[i];
        if (r->verify) {
            c->good = ckpt_verify(svc->ckpt, infos[i].id, problems[i], sizeof problems[i]) == 0;
            if (c->good) problems[i][0] = 0;
        }
        cp[rep.n_checkpoints++] = c;
    }
    rep.checkpoints = cp;
    size_t sz = psc__list_checkpoints_reply__get_packed_size(&rep);
    psc__list_checkpoints_reply__pack(&rep, psc_rpc_reply_alloc(call, sz));
    psc_rpc_reply_send(call);
    free(problems);
    free(cp);
    free(ci);
out:
    free(infos);
    psc__list_checkpoints_request__free_unpacked(r, NULL);
}

void svc_h_release(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg)
{
    ps_service_t *svc = arg;
    Psc__ReleaseRequest *r;
    SVC_DECODE(r, psc__release_request__unpack, "ReleaseRequest");
    char have[17] = "";
    store_is_ready(svc->store, have);
    if (r->job_id[0] && have[0] && strcmp(have, r->job_id) != 0) {
        svc_fail(svc, call, PSC_ENOTREADY, "ps_server %d holds job %s, not %s", svc->task_index, have, r->job_id);
        psc__release_request__free_unpacked(r, NULL);
        return;
    }
    psc__release_request__free_unpacked(r, NULL);
    svc_fail_parked(svc, 0, PSC_ESTALE, "released the job");
    svc_fence_fail_all(svc, 0, PSC_ESTALE, "released the job");
    store_reset(svc->store);
    svc_stage_release(svc);
    pthread_mutex_lock(&svc->lock);
    memset(svc->done, 0, sizeof svc->done);
    svc->workers_done = 0;
    memset(svc->replica_steps, 0, sizeof svc->replica_steps);
    svc->restored_step = 0;
    svc->base_step = 0;
    svc->max_rank = 0;
    memset(svc->restored_replica_steps, 0, sizeof svc->restored_replica_steps);
    svc->n_restored_replica_steps = 0;
    pthread_mutex_unlock(&svc->lock);
    svc->last_present = 0;
    if (have[0]) PSC_INFO("released job %s: ready for another job", have);
    Psc__ReleaseReply rep = PSC__RELEASE_REPLY__INIT;
    rep.released = have;
    uint8_t buf[32];
    psc_rpc_reply(call, buf, psc__release_reply__pack(&rep, buf));
}

/* Checkpoint id, committed: 0 (*info) or the code with err. */
static int committed(ps_service_t *svc, uint64_t id, ckpt_info_t *info, char *err, size_t errlen)
{
    if (!svc->ckpt)
        return psc_seterr(err, errlen, PSC_ENOTREADY, "ps_server %d has no --checkpoint_dir", svc->task_index);
    int rc = ckpt_get_info(svc->ckpt, id, info, err, errlen);
    if (rc == 0 && !info->committed)
        rc = psc_seterr(err, errlen, PSC_ENOTFOUND, "checkpoint %llu was never committed", (unsigned long long)id);
    return rc;
}

/* A Pull from committed checkpoint r->checkpoint: the tensor's bytes
 * [offset, offset+length), CRC-checked (ckpt_read), as a Chunk reply. */
void svc_pull_checkpoint(ps_service_t *svc, psc_rpc_call_t *call, const Psc__PullRequest *r)
{
    char err[512];
    ckpt_info_t info;
    int rc = committed(svc, r->checkpoint, &info, err, sizeof err);
    void *data = NULL;
    size_t len = 0;
    if (rc == 0) rc = ckpt_read(svc->ckpt, r->checkpoint, r->name, &data, &len, err, sizeof err);
    if (rc) {
        svc_fail(svc, call, rc, "%s", err);
        return;
    }
    if (r->offset > len || r->length > len - r->offset) {
        svc_reject(svc, call, PSC_EINVAL, "%s: pull of %llu bytes at %llu is outside its %zu bytes", r->name,
                   (unsigned long long)r->length, (unsigned long long)r->offset, len);
        free(data);
        return;
    }
    size_t bound = svc_reply_header_bound(r->name);
    uint8_t *buf = psc_rpc_reply_alloc(call, bound + r->length);
    memcpy(buf + bound, (const uint8_t *)data + r->offset, r->length);
    free(data);
    ps_metrics_add_pull_bytes(svc->metrics, r->length);
    svc_reply_chunk(call, buf, bound, r->name, r->offset, len, 0, r->length, info.step, 0);
}

/* Committed checkpoint id of the job this PS holds (a table's rows read from
 * it take the live table's shape and initial values): 0 or the code with err. */
static int ckpt_of_job(ps_service_t *svc, uint64_t id, ckpt_info_t *info, char *err, size_t errlen)
{
    int rc = committed(svc, id, info, err, errlen);
    char have[17] = "";
    store_is_ready(svc->store, have);
    if (rc == 0 && strcmp(info->job_id, have) != 0)
        rc = psc_seterr(err, errlen, PSC_EMISMATCH, "checkpoint %llu belongs to job %s; this ps_server holds %s%s",
                        (unsigned long long)id, info->job_id, have[0] ? "job " : "no model", have);
    return rc;
}

typedef struct rows_out {
    float *vals;  /* row i's values at vals + i * dim */
    int64_t *ids; /* a page: the ids, in order (NULL: by index) */
    size_t n;     /* a page: rows so far */
    int dim;
    size_t record; /* bytes of a row record: int64 t, then the dim values, then slots */
    uint8_t *recs; /* whole records instead (record bytes each; record > 0) */
} rows_out_t;

static int row_at(void *arg, size_t i, const void *rec, size_t len)
{
    rows_out_t *o = arg;
    if (o->recs) {
        if (len != o->record) return PSC_ECORRUPT;
        memcpy(o->recs + i * o->record, rec, len);
        return 0;
    }
    /* another table's shape: never this job's (record 0: the described dim's values at least) */
    if (o->record ? len != o->record : len < 8 + (size_t)o->dim * 4) return PSC_ECORRUPT;
    memcpy(o->vals + i * (size_t)o->dim, (const unsigned char *)rec + 8, (size_t)o->dim * 4);
    return 0;
}

static int row_next(void *arg, int64_t row, const void *rec, size_t len)
{
    rows_out_t *o = arg;
    o->ids[o->n] = row;
    return row_at(arg, o->n++, rec, len);
}

int svc_sparse_pull_checkpoint(ps_service_t *svc, const Psc__SparsePull *p, float *dst, size_t cap, int *dim,
                               int64_t *version, char *err, size_t errlen)
{
    ckpt_info_t info;
    size_t n = p->ids.len / 8, record = 0;
    int rc = ckpt_of_job(svc, p->checkpoint, &info, err, errlen);
    if (!rc) rc = store_sparse_initial(svc->store, p->table, p->ids.data, n, dst, cap, dim, &record, err, errlen);
    if (rc) return rc;
    int64_t *ids = psc_xmalloc(n ? n * 8 : 8); /* the wire's bytes need not be aligned */
    if (n) memcpy(ids, p->ids.data, n * 8);
    rows_out_t o = {.vals = dst, .dim = *dim, .record = record};
    rc = ckpt_get_rows(svc->ckpt, p->checkpoint, p->table, ids, n, row_at, &o, err, errlen);
    free(ids);
    *version = info.step;
    return rc;
}

/* The bytes of the description checkpoint id keeps of this shard
 * (SVC_CKPT_MODEL, CRC-checked): *data (free()), or PSC_ENOTFOUND for a
 * checkpoint older than descriptions. */
static int description_bytes(ps_service_t *svc, uint64_t id, void **data, size_t *len, char *err, size_t errlen)
{
    int rc = ckpt_read(svc->ckpt, id, SVC_CKPT_MODEL, data, len, err, errlen);
    if (rc == PSC_ENOTFOUND)
        psc_seterr(err, errlen, PSC_ENOTFOUND,
                   "checkpoint %llu does not describe its model (written by an older psc): only its own job can read it",
                   (unsigned long long)id);
    return rc;
}

/* The description, unpacked: *out (free_unpacked). */
static int ckpt_description(ps_service_t *svc, uint64_t id, Psc__StatusReply **out, char *err, size_t errlen)
{
    void *data = NULL;
    size_t len = 0;
    int rc = description_bytes(svc, id, &data, &len, err, errlen);
    if (rc) return rc;
    *out = psc__status_reply__unpack(NULL, len, data);
    free(data);
    if (!*out)
        return psc_seterr(err, errlen, PSC_ECORRUPT, "checkpoint %llu: its description does not parse",
                          (unsigned long long)id);
    return 0;
}

int svc_checkpoint_table(ps_service_t *svc, uint64_t id, const char *table, int *dim, size_t *record, char *err,
                         size_t errlen)
{
    ckpt_info_t info;
    Psc__StatusReply *d = NULL;
    int rc = committed(svc, id, &info, err, errlen);
    if (rc) return rc;
    if ((rc = ckpt_description(svc, id, &d, err, errlen)) == 0) {
        rc = psc_seterr(err, errlen, PSC_ENOTFOUND, "checkpoint %llu of job %s has no table %s on ps_server %d",
                        (unsigned long long)id, info.job_id, table, svc->task_index);
        for (size_t i = 0; i < d->n_tables; i++)
            if (strcmp(d->tables[i]->name, table) == 0 && d->tables[i]->dim > 0 && d->tables[i]->dim <= 4096) {
                *dim = (int)d->tables[i]->dim;
                *record = 0;
                rc = 0;
            }
        psc__status_reply__free_unpacked(d, NULL);
        return rc;
    }
    if (rc != PSC_ENOTFOUND) return rc;
    /* an older checkpoint: only of the live job, whose table gives the shape */
    if ((rc = ckpt_of_job(svc, id, &info, err, errlen))) return rc;
    float none;
    return store_sparse_initial(svc->store, table, "", 0, &none, 0, dim, record, err, errlen);
}

int svc_checkpoint_record_bytes(ps_service_t *svc, uint64_t id, const char *table, size_t *record, char *err,
                                size_t errlen)
{
    ckpt_table_info_t *t = NULL;
    int n = 0, rc = ckpt_tables(svc->ckpt, id, &t, &n, err, errlen);
    if (rc) return rc;
    rc = psc_seterr(err, errlen, PSC_ENOTFOUND, "checkpoint %llu has no rows of table %s on ps_server %d",
                    (unsigned long long)id, table, svc->task_index);
    for (int i = 0; i < n; i++)
        if (strcmp(t[i].name, table) == 0) {
            *record = t[i].record_len;
            rc = 0;
        }
    free(t);
    return rc;
}

int svc_table_rows_checkpoint(ps_service_t *svc, const Psc__TableRowsRequest *r, int dim, size_t record, size_t max,
                              int64_t *ids, float *vals, uint8_t *recs, size_t *n, int *more, char *err, size_t errlen)
{
    rows_out_t o = {.vals = vals, .ids = ids, .dim = dim, .record = record, .recs = recs};
    int rc = ckpt_read_rows_page(svc->ckpt, r->checkpoint, r->table, r->after, max, row_next, &o, more, err, errlen);
    *n = o.n;
    return rc;
}

void svc_h_describe(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg)
{
    ps_service_t *svc = arg;
    char err[512];
    Psc__DescribeRequest *r;
    SVC_DECODE(r, psc__describe_request__unpack, "DescribeRequest");
    ckpt_info_t info;
    void *data = NULL;
    size_t n = 0;
    int rc = committed(svc, r->checkpoint, &info, err, sizeof err);
    if (rc == 0) rc = description_bytes(svc, r->checkpoint, &data, &n, err, sizeof err);
    /* the description as saved (CRC-checked), with the names of the tensors
     * the checkpoint holds (field `tensors`, appended: a repeated field's
     * elements may follow the rest of the message) */
    char **names = NULL;
    int nn = 0;
    if (rc == 0) rc = ckpt_names(svc->ckpt, r->checkpoint, &names, &nn, err, sizeof err);
    if (rc) {
        svc_fail(svc, call, rc, "%s", err);
    } else {
        Psc__StatusReply extra = PSC__STATUS_REPLY__INIT;
        extra.tensors = names;
        extra.n_tensors = (size_t)nn;
        size_t xn = psc__status_reply__get_packed_size(&extra);
        uint8_t *buf = psc_rpc_reply_alloc(call, n + xn);
        memcpy(buf, data, n);
        psc__status_reply__pack(&extra, buf + n);
        psc_rpc_reply_send(call);
    }
    ckpt_free_names(names, nn);
    free(data);
    psc__describe_request__free_unpacked(r, NULL);
}

/* ---- the fence of an async checkpoint (service_fence.c) ---- */

void svc_h_fence(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg)
{
    ps_service_t *svc = arg;
    Psc__FenceRequest *r;
    SVC_DECODE(r, psc__fence_request__unpack, "FenceRequest");
    char have[17] = "";
    store_is_ready(svc->store, have);
    if (!have[0] || strcmp(have, r->job_id) != 0) {
        svc_fail(svc, call, PSC_ENOTREADY, "ps_server %d holds %s%s, not job %s", svc->task_index,
                 have[0] ? "job " : "no model", have, r->job_id);
        goto out;
    }
    if (store_get_sync(svc->store, NULL)) {
        svc_fail(svc, call, PSC_ENOTREADY,
                 "ps_server %d trains in sync mode: its checkpoints are taken at a step boundary, not behind a fence",
                 svc->task_index);
        goto out;
    }
    if (svc_fence_hold(svc, r->id, r->lease_ms) != 0) {
        svc_fail(svc, call, PSC_EUNAVAILABLE, "ps_server %d is shutting down", svc->task_index);
        goto out;
    }
    Psc__FenceReply rep = PSC__FENCE_REPLY__INIT;
    int64_t step = 0;
    rep.has_global_step = store_step_get(svc->store, &step);
    rep.global_step = step;
    uint8_t buf[32];
    psc_rpc_reply(call, buf, psc__fence_reply__pack(&rep, buf));
out:
    psc__fence_request__free_unpacked(r, NULL);
}

void svc_h_unfence(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg)
{
    ps_service_t *svc = arg;
    Psc__UnfenceRequest *r;
    SVC_DECODE(r, psc__unfence_request__unpack, "UnfenceRequest");
    Psc__UnfenceReply rep = PSC__UNFENCE_REPLY__INIT;
    rep.released = svc_fence_release(svc, r->id, &rep.held_ms, &rep.parked);
    psc__unfence_request__free_unpacked(r, NULL);
    uint8_t buf[32];
    psc_rpc_reply(call, buf, psc__unfence_reply__pack(&rep, buf));
}
