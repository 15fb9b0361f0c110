/* ps_client_ctl.c — see ps_client.h: the control plane, the chief's calls
 * to every PS beside the training rounds: declaring the model (Create, then
 * restore the newest checkpoint or assign initial values, then Ready),
 * checkpoints (list, the two-phase save with the async fence, commit,
 * restore), Status and the wait for a ready model, WorkerDone and Shutdown.
 * Each operation sends its calls to every PS at once and waits for all of
 * them (the wait for a ready model and the chief's look for a PS that lost
 * the model included: one round trip a round, not one per PS); none runs while a push-pull is in flight (ps_client.h).
 */
#include "ps_client.h"

#include "chunk.h"
#include "log.h"
#include "optim_pb.h"
#include "ps_client_internal.h"
#include "psc.h"
#include "psc.pb-c.h"
#include "rpc.h"
#include "wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int restore_latest(ps_client_t *pc, const char *job_id, ps_model_origin_t *origin, char *err, size_t errlen);
static int restore_resharded(ps_client_t *pc, const char *job_id, ps_model_origin_t *origin, char *err,
                             size_t errlen);

/* ---- the model ---- */

/* The variables named in a partial re-initialization's warning; the rest are counted. */
#define PS_CLIENT_REINIT_NAMES 20

/* ", and emptied its table parts emb part 1 of 2 (12345 rows lost), ..."
 * for the table parts ps held (their rows as the last Status of a ready PS
 * showed them, "its rows lost" when none was seen since; past the buffer,
 * "and N more"). "" when it held none. */
static void table_parts_lost(const ps_client_t *pc, int ps, char *out, size_t len)
{
    size_t at = 0;
    int n = 0, more = 0;
    out[0] = '\0';
    for (int t = 0; t < pc->ntables; t++)
        for (int k = 0; k < pc->num_ps; k++) {
            if (pc->table_part_ps[t * pc->num_ps + k] != ps) continue;
            int64_t rows = pc->table_rows_seen[t * pc->num_ps + k];
            char lost[48] = "its rows lost";
            if (rows >= 0) snprintf(lost, sizeof lost, "%lld rows lost", (long long)rows);
            if (at + 200 >= len) { /* room for the longest item (a name < 64 bytes: < 180) and " and N more" */
                more++;
                continue;
            }
            at += (size_t)snprintf(out + at, len - at, "%s%s part %d of %d (%s)",
                                   n++ ? ", " : ", and emptied its table parts ", pc->tables[t].name, k, pc->num_ps,
                                   lost);
        }
    if (more) snprintf(out + at, len - at, " and %d more", more);
}

/* Some PS hold the model and the others lost it, with no checkpoint to restore:
 * the lost shards start again from initial values while the surviving ones keep
 * their training (throwing that away too would lose more). The model is then a
 * mix, so each lost PS gets one WARN naming its variables and table parts; its
 * bit is set in origin->reinitialized_ps (the first 64 PS) and
 * origin->reinitialized counts them. */
static void warn_partial_reinit(const ps_client_t *pc, const int *ready, int nready, ps_model_origin_t *origin)
{
    char kept[128];
    size_t kat = 0;
    for (int i = 0, shown = 0; i < pc->num_ps && shown < PS_CLIENT_REINIT_NAMES; i++)
        if (ready[i] && kat < sizeof kept)
            kat += (size_t)snprintf(kept + kat, sizeof kept - kat, "%s%d", shown++ ? ", " : "", i);
    for (int i = 0; i < pc->num_ps; i++) {
        if (ready[i]) continue;
        origin->reinitialized++;
        if (i < 64) origin->reinitialized_ps |= UINT64_C(1) << i;
        char names[1024];
        size_t at = 0;
        int n = 0, shown = 0;
        names[0] = '\0';
        for (int p = 0; p < pc->nplaced; p++) {
            const psc_placed_var_t *pv = &pc->placed[p];
            if (pv->ps != i) continue;
            n++;
            if (shown == PS_CLIENT_REINIT_NAMES || at + strlen(pv->name) + 3 > sizeof names) continue;
            at += (size_t)snprintf(names + at, sizeof names - at, "%s%s", shown++ ? ", " : "", pv->name);
        }
        char more[48] = "", parts[1024] = "";
        if (n > shown) snprintf(more, sizeof more, " and %d more", n - shown);
        table_parts_lost(pc, i, parts, sizeof parts);
        PSC_WARN("ps %d lost its shard and there is no checkpoint to restore: re-initialized its %d variable%s "
                 "(%s%s)%s to initial values, while ps %s%s keep%s trained values: the model is now a mix; to avoid "
                 "this, give every ps a --checkpoint_dir and checkpoint early (checkpoint.every_steps in the job spec)",
                 i, n, n == 1 ? "" : "s", names, more, parts, kept,
                 nready > PS_CLIENT_REINIT_NAMES ? " and others" : "", nready == 1 ? "s its" : " their");
    }
}

/* Step 1: Create on every PS, each with its own pieces (idempotent). ready[i]:
 * ps i already held this job's ready model; *nready counts them. */
static int create_on_all(ps_client_t *pc, const char *job_id, const psc_optim_config_t *opt, int *ready, int *nready,
                         char *err, size_t errlen)
{
    int P = pc->num_ps;
    psc_rpc_op_t *ops = psc_xcalloc((size_t)P, sizeof *ops);
    uint8_t **bufs = psc_xcalloc((size_t)P, sizeof *bufs);
    Psc__OptimizerSpec op;
    Psc__LrSchedule sched;
    psc_optim_to_pb_sched(opt, &op, &sched);
    Psc__VarSpec *specs = psc_xcalloc((size_t)pc->nplaced, sizeof *specs);
    Psc__VarSpec **sp = psc_xcalloc((size_t)pc->nplaced, sizeof *sp);
    for (int i = 0; i < P; i++) {
        Psc__CreateRequest req = PSC__CREATE_REQUEST__INIT;
        req.job_id = (char *)job_id;
        req.optimizer = &op;
        Psc__SyncSpec sync = PSC__SYNC_SPEC__INIT;
        if (pc->sync) {
            sync.replicas_to_aggregate = (uint32_t)pc->sync_r;
            sync.total_num_replicas = (uint32_t)pc->sync_n;
            sync.timeout_secs = pc->sync_timeout;
            req.sync = &sync;
        }
        size_t nv = 0;
        for (int p = 0; p < pc->nplaced; p++) {
            psc_placed_var_t *pv = &pc->placed[p];
            if (pv->ps != i) continue;
            psc__var_spec__init(&specs[nv]);
            specs[nv].name = pv->name;
            specs[nv].n_shape = (size_t)pv->rank;
            specs[nv].shape = pv->shape;
            specs[nv].is_step = pv->is_step;
            sp[nv] = &specs[nv];
            nv++;
        }
        req.n_vars = nv;
        req.vars = sp;
        pcl_table_pb_t tables;
        pcl_table_specs(pc, i, &tables);
        req.n_tables = tables.n;
        req.tables = tables.ptrs;
        size_t len = psc__create_request__get_packed_size(&req);
        bufs[i] = psc_xmalloc(len);
        psc__create_request__pack(&req, bufs[i]);
        pcl_table_specs_free(&tables);
        ops[i].ch = pc->ch[i];
        ops[i].method = PSC_M_CREATE;
        ops[i].hdr = bufs[i];
        ops[i].hdr_len = len;
        ops[i].wait_for_ready = 1;
    }
    int rc = psc_rpc_run(ops, (size_t)P, (size_t)P, pc->timeout_ms);
    if (rc) rc = pcl_op_error(ops, (size_t)P, "create", err, errlen);
    *nready = 0;
    for (int i = 0; rc == 0 && i < P; i++) {
        Psc__CreateReply *r = psc__create_reply__unpack(NULL, ops[i].reply_len, ops[i].reply);
        if (!r) {
            rc = psc_seterr(err, errlen, PSC_ECORRUPT, "create reply from ps %d does not parse", i);
            break;
        }
        ready[i] = r->ready;
        *nready += r->ready;
        psc__create_reply__free_unpacked(r, NULL);
    }
    pcl_clear_ops(ops, (size_t)P);
    for (int i = 0; i < P; i++) free(bufs[i]);
    free(bufs);
    free(ops);
    free(sp);
    free(specs);
    return rc;
}

/* Step 2b: assigns initial values (init_params, the slab; global_step 0) to
 * the pieces of every PS that is not ready. */
static int assign_initial(ps_client_t *pc, const int *ready, const float *init_params, char *err, size_t errlen)
{
    size_t nops = 0;
    for (int p = 0; p < pc->nplaced; p++)
        if (!ready[pc->placed[p].ps])
            nops += pc->placed[p].is_step ? 1 : psc_chunk_count((uint64_t)pc->placed[p].numel * 4);
    psc_rpc_op_t *ops = psc_xcalloc(nops ? nops : 1, sizeof *ops);
    uint8_t(*hdrs)[PS_CLIENT_HDR_CAP] = psc_xcalloc(nops ? nops : 1, PS_CLIENT_HDR_CAP);
    static const int64_t zero_step = 0;
    size_t k = 0;
    for (int p = 0; p < pc->nplaced; p++) {
        psc_placed_var_t *pv = &pc->placed[p];
        if (ready[pv->ps]) continue;
        uint64_t total = pv->is_step ? 8 : (uint64_t)pv->numel * 4;
        for (size_t c = 0; c < psc_chunk_count(total); c++, k++) {
            Psc__Chunk h = PSC__CHUNK__INIT;
            h.name = pv->name;
            h.offset = psc_chunk_offset(c);
            h.total = total;
            size_t len = psc_chunk_len(total, c);
            ops[k].ch = pc->ch[pv->ps];
            ops[k].method = PSC_M_ASSIGN;
            ops[k].hdr = hdrs[k];
            ops[k].hdr_len = psc_chunk_header_pack(&h, len, hdrs[k]);
            ops[k].body = pv->is_step ? (const void *)&zero_step
                                      : (const void *)((const uint8_t *)init_params + (size_t)pc->slab_offset[p] * 4 +
                                                       h.offset);
            ops[k].body_len = len;
        }
    }
    int rc = psc_rpc_run(ops, nops, PS_CLIENT_IN_FLIGHT, pc->timeout_ms);
    if (rc) rc = pcl_op_error(ops, nops, "assign", err, errlen);
    pcl_clear_ops(ops, nops);
    free(ops);
    free(hdrs);
    return rc;
}

/* Step 3: marks the model ready on every PS that was not. */
static int mark_ready(ps_client_t *pc, const char *job_id, const int *ready, char *err, size_t errlen)
{
    psc_rpc_op_t *ops = psc_xcalloc((size_t)pc->num_ps, sizeof *ops);
    Psc__ReadyRequest rr = PSC__READY_REQUEST__INIT;
    rr.job_id = (char *)job_id;
    uint8_t rbuf[64];
    size_t rlen = psc__ready_request__pack(&rr, rbuf);
    size_t nr = 0;
    for (int i = 0; i < pc->num_ps; i++) {
        if (ready[i]) continue;
        ops[nr].ch = pc->ch[i];
        ops[nr].method = PSC_M_READY;
        ops[nr].hdr = rbuf;
        ops[nr].hdr_len = rlen;
        nr++;
    }
    int rc = psc_rpc_run(ops, nr, nr, pc->timeout_ms);
    if (rc) rc = pcl_op_error(ops, nr, "ready", err, errlen);
    pcl_clear_ops(ops, nr);
    free(ops);
    return rc;
}

int ps_client_create_model(ps_client_t *pc, const char *job_id, const psc_optim_config_t *opt, const float *init_params,
                           ps_model_origin_t *origin, char *err, size_t errlen)
{
    memset(origin, 0, sizeof *origin);
    int *ready = psc_xcalloc((size_t)pc->num_ps, sizeof *ready);
    int nready = 0;
    int rc = create_on_all(pc, job_id, opt, ready, &nready, err, errlen);
    if (rc) goto out;
    if (nready == pc->num_ps) {
        origin->joined = 1;
        goto out;
    }
    /* 2a. Restore the newest checkpoint, re-split when another number of PS
     * or another placement wrote it; else the newest committed and intact on
     * every PS (or, none, one psc gave the spec's legacy id). */
    if ((rc = restore_resharded(pc, job_id, origin, err, errlen)) != 0 || origin->restored) goto out;
    if ((rc = restore_latest(pc, job_id, origin, err, errlen)) != 0 || origin->restored) goto out;
    if (nready > 0) warn_partial_reinit(pc, ready, nready, origin);
    origin->initialized = 1;
    /* 2b, 3. Else initial values where the model is missing (a warm start's
     * where it has them: the hook), then ready. */
    if (pc->init_hook && (rc = pc->init_hook(pc->init_hook_arg, ready, err, errlen))) goto out;
    if ((rc = assign_initial(pc, ready, init_params, err, errlen))) goto out;
    if (pc->stage_hook && nready == 0) { /* a warm start that carries slots or global_step */
        if ((rc = pc->stage_hook(pc->stage_hook_arg, &origin->ckpt_id, &origin->step, err, errlen))) goto out;
        /* the job's first checkpoint: its own keep applies from its next; the
         * restore makes the model ready */
        if (origin->ckpt_id && ((rc = ps_client_ckpt_commit(pc, origin->ckpt_id, 1 << 30, 0, err, errlen)) ||
                                (rc = ps_client_ckpt_restore(pc, job_id, origin->ckpt_id, origin->step, err, errlen))))
            goto out;
    }
    if (!origin->ckpt_id) rc = mark_ready(pc, job_id, ready, err, errlen);
    /* the re-initialized parts start empty: a count seen before says nothing
     * of a later loss (kept until now, so a retried restore warns with it again) */
    for (int k = 0; rc == 0 && k < pc->ntables * pc->num_ps; k++)
        if (!ready[pc->table_part_ps[k]]) pc->table_rows_seen[k] = -1;
out:
    free(ready);
    return rc;
}

void ps_client_set_init_hook(ps_client_t *pc, ps_client_init_hook_fn fn, void *arg)
{
    pc->init_hook = fn;
    pc->init_hook_arg = arg;
}

void ps_client_set_stage_hook(ps_client_t *pc, ps_client_stage_hook_fn fn, void *arg)
{
    pc->stage_hook = fn;
    pc->stage_hook_arg = arg;
}

/* ---- checkpoints ---- */

/* The deadline of the calls that write or read a whole shard (Save, Commit,
 * Restore): a shard of sparse tables with millions of rows takes tens of
 * seconds to write, far more than a data-path call. */
#define CKPT_TIMEOUT_MS (30 * 60 * 1000)
static int ckpt_timeout(const ps_client_t *pc) { return PSC_MAX(pc->timeout_ms, CKPT_TIMEOUT_MS); }

/* Sends the same request to every PS (ops: P entries, cleared by the caller). */
static int run_on_all_within(ps_client_t *pc, const char *method, const uint8_t *req, size_t len, psc_rpc_op_t *ops,
                             const char *what, int timeout_ms, char *err, size_t errlen)
{
    for (int i = 0; i < pc->num_ps; i++) {
        memset(&ops[i], 0, sizeof ops[i]);
        ops[i].ch = pc->ch[i];
        ops[i].method = method;
        ops[i].hdr = req;
        ops[i].hdr_len = len;
    }
    int rc = psc_rpc_run(ops, (size_t)pc->num_ps, (size_t)pc->num_ps, timeout_ms);
    return rc ? pcl_op_error(ops, (size_t)pc->num_ps, what, err, errlen) : 0;
}

static int run_on_all(ps_client_t *pc, const char *method, const uint8_t *req, size_t len, psc_rpc_op_t *ops,
                      const char *what, char *err, size_t errlen)
{
    return run_on_all_within(pc, method, req, len, ops, what, pc->timeout_ms, err, errlen);
}

int ps_client_ckpt_list(ps_client_t *pc, const char *job_id, int verify, ps_ckpt_list_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    int P = pc->num_ps;
    Psc__ListCheckpointsRequest req = PSC__LIST_CHECKPOINTS_REQUEST__INIT;
    req.job_id = (char *)job_id;
    req.verify = verify;
    uint8_t buf[64];
    size_t len = psc__list_checkpoints_request__pack(&req, buf);
    psc_rpc_op_t *ops = psc_xcalloc((size_t)P, sizeof *ops);
    Psc__ListCheckpointsReply **reps = psc_xcalloc((size_t)P, sizeof *reps);
    int rc = run_on_all_within(pc, PSC_M_LIST_CKPT, buf, len, ops, "list checkpoints",
                               verify ? ckpt_timeout(pc) : pc->timeout_ms, err, errlen); /* verify reads every byte */
    for (int i = 0; rc == 0 && i < P; i++)
        if (!(reps[i] = psc__list_checkpoints_reply__unpack(NULL, ops[i].reply_len, ops[i].reply)))
            rc = psc_seterr(err, errlen, PSC_ECORRUPT, "checkpoint list from ps %d does not parse", i);
    pcl_clear_ops(ops, (size_t)P);
    if (rc) goto out;
    out->enabled = 1;
    for (int i = 0; i < P; i++) out->enabled &= reps[i]->enabled;
    /* a checkpoint counts when committed (and, verifying, intact) on every PS;
     * its step is the one the global_step shard recorded */
    int sp = pc->step_ps >= 0 ? pc->step_ps : 0;
    for (size_t k = 0; k < reps[0]->n_checkpoints; k++) {
        const Psc__CheckpointInfo *c0 = reps[0]->checkpoints[k];
        int everywhere = 1;
        int64_t step = c0->step;
        for (int i = 0; i < P && everywhere; i++) {
            const Psc__CheckpointInfo *ci = NULL;
            for (size_t j = 0; j < reps[i]->n_checkpoints && !ci; j++)
                if (reps[i]->checkpoints[j]->id == c0->id) ci = reps[i]->checkpoints[j];
            if (!ci || !ci->committed) {
                everywhere = 0;
            } else if (verify && !ci->good) {
                PSC_WARN("checkpoint %llu is damaged on ps %d: %s", (unsigned long long)ci->id, i, ci->problem);
                everywhere = 0;
            } else if (i == sp) {
                step = ci->step;
            }
        }
        if (!everywhere || out->n == PSC_ARRAY_LEN(out->ids)) continue;
        out->ids[out->n] = c0->id;
        out->steps[out->n] = step;
        out->n++;
    }
    for (int i = 0; i < P; i++)
        for (size_t j = 0; j < reps[i]->n_checkpoints; j++)
            out->max_id = PSC_MAX(out->max_id, reps[i]->checkpoints[j]->id);
out:
    for (int i = 0; i < P; i++)
        if (reps[i]) psc__list_checkpoints_reply__free_unpacked(reps[i], NULL);
    free(reps);
    free(ops);
    return rc;
}

int ps_client_ckpt_find(ps_client_t *pc, const char *job_id, uint64_t want, uint64_t *id, int64_t *step, char *err,
                        size_t errlen)
{
    ps_ckpt_list_t list;
    int rc = ps_client_ckpt_list(pc, job_id, 0, &list, err, errlen);
    if (rc) return rc;
    if (!list.enabled)
        return psc_seterr(err, errlen, PSC_ENOTFOUND, "the ps_servers keep no checkpoints (no --checkpoint_dir)");
    if (!want && list.n == 0)
        return psc_seterr(err, errlen, PSC_ENOTFOUND, "job %s has no checkpoint committed on every ps_server", job_id);
    char kept[256] = "none";
    size_t at = 0;
    for (int k = 0; k < list.n; k++) {
        if (list.ids[k] == want || (!want && k == list.n - 1)) {
            *id = list.ids[k];
            *step = list.steps[k];
            return 0;
        }
        if (at < sizeof kept)
            at += (size_t)snprintf(kept + at, sizeof kept - at, "%s%llu", k ? ", " : "", (unsigned long long)list.ids[k]);
    }
    return psc_seterr(err, errlen, PSC_ENOTFOUND,
                      "checkpoint %llu is not a committed checkpoint of job %s on every ps_server (kept: %s)",
                      (unsigned long long)want, job_id, kept);
}

int ps_client_ckpt_commit(ps_client_t *pc, uint64_t id, int keep, int discard, char *err, size_t errlen)
{
    Psc__CommitRequest req = PSC__COMMIT_REQUEST__INIT;
    req.id = id;
    req.keep = (uint32_t)(keep > 0 ? keep : 1);
    req.discard = discard;
    uint8_t buf[32];
    size_t len = psc__commit_request__pack(&req, buf);
    psc_rpc_op_t *ops = psc_xcalloc((size_t)pc->num_ps, sizeof *ops);
    int rc = run_on_all_within(pc, PSC_M_COMMIT, buf, len, ops, discard ? "discard checkpoint" : "commit checkpoint",
                               ckpt_timeout(pc), err, errlen);
    pcl_clear_ops(ops, (size_t)pc->num_ps);
    free(ops);
    return rc;
}

/* Async checkpoints, one cut: fences every PS (id = the checkpoint's id);
 * once all have answered nothing is applied anywhere, and *cut gets
 * global_step's value on the PS that holds it (unchanged without one). */
static int ckpt_fence(ps_client_t *pc, const char *job_id, uint64_t id, int64_t *cut, char *err, size_t errlen)
{
    int P = pc->num_ps;
    Psc__FenceRequest req = PSC__FENCE_REQUEST__INIT;
    req.job_id = (char *)job_id;
    req.id = id;
    uint8_t buf[64];
    size_t len = psc__fence_request__pack(&req, buf);
    psc_rpc_op_t *ops = psc_xcalloc((size_t)P, sizeof *ops);
    int rc = run_on_all(pc, PSC_M_FENCE, buf, len, ops, "fence for a checkpoint", err, errlen);
    if (rc == 0 && pc->step_ps >= 0) {
        Psc__FenceReply *r = psc__fence_reply__unpack(NULL, ops[pc->step_ps].reply_len, ops[pc->step_ps].reply);
        if (!r || !r->has_global_step)
            rc = psc_seterr(err, errlen, PSC_ECORRUPT, "fence reply from ps %d %s", pc->step_ps,
                            r ? "lacks global_step" : "does not parse");
        else
            *cut = r->global_step;
        if (r) psc__fence_reply__free_unpacked(r, NULL);
    }
    pcl_clear_ops(ops, (size_t)P);
    free(ops);
    return rc;
}

/* Releases fence id on every PS (those a Save released already answer
 * released = 0); failures are only logged: a fence left behind ends with its
 * lease. */
static void ckpt_unfence(ps_client_t *pc, uint64_t id)
{
    int P = pc->num_ps;
    Psc__UnfenceRequest req = PSC__UNFENCE_REQUEST__INIT;
    req.id = id;
    uint8_t buf[16];
    size_t len = psc__unfence_request__pack(&req, buf);
    psc_rpc_op_t *ops = psc_xcalloc((size_t)P, sizeof *ops);
    char err[512];
    if (run_on_all(pc, PSC_M_UNFENCE, buf, len, ops, "unfence", err, sizeof err))
        PSC_WARN("checkpoint %llu: %s (the fence ends with its lease)", (unsigned long long)id, err);
    pcl_clear_ops(ops, (size_t)P);
    free(ops);
}

int ps_client_ckpt_save(ps_client_t *pc, const char *job_id, uint64_t id, int64_t step, int keep, int64_t *saved_step,
                        char *err, size_t errlen)
{
    int P = pc->num_ps;
    /* async: fence every PS, then all save at the one global_step that holds
     * still behind the fences, then release them (always); sync mode saves at
     * a step boundary instead */
    int fenced = !pc->sync;
    int64_t cut = step;
    int rc = fenced ? ckpt_fence(pc, job_id, id, &cut, err, errlen) : 0;
    Psc__SaveRequest req = PSC__SAVE_REQUEST__INIT;
    req.job_id = (char *)job_id;
    req.id = id;
    req.step = cut;
    req.fence = fenced ? id : 0;
    uint8_t buf[64];
    size_t len = psc__save_request__pack(&req, buf);
    psc_rpc_op_t *ops = psc_xcalloc((size_t)P, sizeof *ops);
    if (rc == 0) rc = run_on_all_within(pc, PSC_M_SAVE, buf, len, ops, "save checkpoint", ckpt_timeout(pc), err, errlen);
    if (fenced) ckpt_unfence(pc, id);
    int sp = pc->step_ps >= 0 ? pc->step_ps : 0;
    double fence_ms = 0;
    for (int i = 0; rc == 0 && i < P; i++) {
        Psc__SaveReply *r = psc__save_reply__unpack(NULL, ops[i].reply_len, ops[i].reply);
        if (!r) {
            rc = psc_seterr(err, errlen, PSC_ECORRUPT, "save reply from ps %d does not parse", i);
            break;
        }
        if (i == sp && saved_step) *saved_step = r->step;
        fence_ms = PSC_MAX(fence_ms, r->fence_ms);
        psc__save_reply__free_unpacked(r, NULL);
    }
    if (rc == 0 && fenced)
        PSC_INFO("checkpoint %llu: one cut at global_step %lld; pushes paused at most %.1f ms on a ps",
                 (unsigned long long)id, (long long)cut, fence_ms);
    pcl_clear_ops(ops, (size_t)P);
    free(ops);
    char e2[256];
    if (rc) { /* phase 1 failed somewhere: no PS keeps it (errors: a PS that never prepared it) */
        ps_client_ckpt_commit(pc, id, keep, 1, e2, sizeof e2);
        return rc;
    }
    /* phase 2: only now, every shard prepared it */
    return ps_client_ckpt_commit(pc, id, keep, 0, err, errlen);
}

/* Restore on every PS; alias (NULL: none): the job id the checkpoint was
 * written under, when not job_id (the spec's legacy id). */
static int restore_as(ps_client_t *pc, const char *job_id, const char *alias, uint64_t id, int64_t step, char *err,
                      size_t errlen)
{
    Psc__RestoreRequest req = PSC__RESTORE_REQUEST__INIT;
    req.job_id = (char *)job_id;
    if (alias) req.alias_job_id = (char *)alias;
    req.id = id;
    req.step = step;
    uint8_t buf[64];
    size_t len = psc__restore_request__pack(&req, buf);
    psc_rpc_op_t *ops = psc_xcalloc((size_t)pc->num_ps, sizeof *ops);
    int rc = run_on_all_within(pc, PSC_M_RESTORE, buf, len, ops, "restore checkpoint", ckpt_timeout(pc), err, errlen);
    pcl_clear_ops(ops, (size_t)pc->num_ps);
    free(ops);
    return rc;
}

int ps_client_ckpt_restore(ps_client_t *pc, const char *job_id, uint64_t id, int64_t step, char *err, size_t errlen)
{
    return restore_as(pc, job_id, NULL, id, step, err, errlen);
}

void ps_client_set_legacy_job_id(ps_client_t *pc, const char *legacy)
{
    snprintf(pc->legacy_job_id, sizeof pc->legacy_job_id, "%s", legacy ? legacy : "");
}

/* Restores the newest checkpoint of job_id that is committed and intact on
 * every PS; an older one when a restore finds damage the listing missed. */
static int restore_latest(ps_client_t *pc, const char *job_id, ps_model_origin_t *origin, char *err, size_t errlen)
{
    ps_ckpt_list_t list;
    int rc = ps_client_ckpt_list(pc, job_id, 1, &list, err, errlen);
    if (rc) return rc;
    if (!list.enabled) return 0;
    const char *alias = NULL;
    if (list.n == 0 && pc->legacy_job_id[0]) { /* none under the id: under the one an older psc gave the spec */
        if ((rc = ps_client_ckpt_list(pc, pc->legacy_job_id, 1, &list, err, errlen))) return rc;
        if (list.n) {
            alias = pc->legacy_job_id;
            PSC_INFO("job %s has no checkpoint of its own; restoring those psc wrote for it under the id %s (before "
                     "the job id left out the placement)",
                     job_id, alias);
        }
    }
    for (int k = list.n - 1; k >= 0; k--) {
        char e[512];
        rc = restore_as(pc, job_id, alias, list.ids[k], list.steps[k], e, sizeof e);
        if (rc == 0) {
            origin->restored = 1;
            origin->ckpt_id = list.ids[k];
            origin->step = list.steps[k];
            return 0;
        }
        PSC_WARN("restore of checkpoint %llu failed (%s): trying an older one", (unsigned long long)list.ids[k], e);
        if (rc != PSC_ECORRUPT && rc != PSC_ENOTFOUND && rc != PSC_EMISMATCH)
            return psc_seterr(err, errlen, rc, "%s", e);
    }
    if (list.n) PSC_WARN("no checkpoint of job %s could be restored", job_id);
    return 0;
}

/* The newest checkpoint of job_id when another number of PS wrote it:
 * staged re-split on these PS (ps_client_reshard.c), committed, restored. */
static int restore_resharded(ps_client_t *pc, const char *job_id, ps_model_origin_t *origin, char *err,
                             size_t errlen)
{
    uint64_t id = 0;
    int64_t step = 0;
    int from = 0;
    int rc = pcl_reshard_stage(pc, job_id, &id, &step, &from, err, errlen);
    if (rc || !id) return rc;
    /* keep everything: the job's own keep applies from its next checkpoint */
    if ((rc = ps_client_ckpt_commit(pc, id, 1 << 30, 0, err, errlen))) return rc;
    if ((rc = ps_client_ckpt_restore(pc, job_id, id, step, err, errlen))) return rc;
    origin->restored = 1;
    origin->ckpt_id = id;
    origin->step = step;
    origin->resharded_from = from;
    return 0;
}

/* Parses ps's Status reply into st; 0 or PSC_ECORRUPT. */
static int status_parse(const psc_rpc_op_t *op, int ps, ps_status_t *st, char *err, size_t errlen)
{
    Psc__StatusReply *r = psc__status_reply__unpack(NULL, op->reply_len, op->reply);
    if (!r) return psc_seterr(err, errlen, PSC_ECORRUPT, "status reply from ps %d does not parse", ps);
    memset(st, 0, sizeof *st);
    st->ready = r->ready;
    snprintf(st->job_id, sizeof st->job_id, "%s", r->job_id);
    st->has_global_step = r->has_global_step;
    st->global_step = r->global_step;
    st->workers_done = r->workers_done;
    st->applied = r->applied;
    st->rejected = r->rejected;
    st->pulls = r->pulls;
    st->nvars = (int)r->n_vars;
    st->stale = r->stale;
    st->timeout_applies = r->timeout_applies;
    st->sync = r->sync;
    st->replicas_present = r->replicas_present;
    st->checkpoints = r->checkpoints;
    st->incarnation = r->incarnation;
    st->restored_step = r->restored_step;
    st->base_step = r->base_step;
    for (size_t i = 0; i < r->n_replica_steps && i < PSC_ARRAY_LEN(st->replica_steps); i++)
        st->replica_steps[i] = r->replica_steps[i];
    st->has_restored_replica_steps = r->n_restored_replica_steps > 0;
    for (size_t i = 0; i < r->n_restored_replica_steps && i < PSC_ARRAY_LEN(st->restored_replica_steps); i++)
        st->restored_replica_steps[i] = r->restored_replica_steps[i];
    for (size_t i = 0; i < r->n_done_workers; i++)
        if (r->done_workers[i] < sizeof st->done) st->done[r->done_workers[i]] = 1;
    st->ntables = (int)PSC_MIN(r->n_tables, PSC_ARRAY_LEN(st->tables));
    for (int i = 0; i < st->ntables; i++) {
        const Psc__TableStatus *t = r->tables[i];
        snprintf(st->tables[i].name, sizeof st->tables[i].name, "%s", t->name);
        st->tables[i].part = (int)t->part;
        st->tables[i].num_parts = (int)t->num_parts;
        st->tables[i].rows = t->rows;
        st->tables[i].dim = (int)t->dim;
        st->tables[i].rows_touched = t->rows_touched;
        st->tables[i].bytes = t->bytes;
        st->tables[i].rows_pulled = t->rows_pulled;
        st->tables[i].rows_pushed = t->rows_pushed;
        st->tables[i].version = t->version;
        st->tables[i].rows_evicted = t->rows_evicted;
        st->tables[i].rows_dropped = t->rows_dropped;
        st->tables[i].waiting = t->waiting;
    }
    psc__status_reply__free_unpacked(r, NULL);
    return 0;
}

/* Remembers the rows of each table part ps holds (the WARN of a lost shard
 * names them). Only from a PS whose model is ready: one being declared again
 * (a restore retried after its Create) holds empty parts, not what it lost. */
static void note_table_rows(ps_client_t *pc, const ps_status_t *st)
{
    if (!st->ready) return;
    for (int i = 0; i < st->ntables; i++)
        for (int t = 0; t < pc->ntables; t++)
            if (!strcmp(pc->tables[t].name, st->tables[i].name) && st->tables[i].part >= 0 &&
                st->tables[i].part < pc->num_ps)
                pc->table_rows_seen[t * pc->num_ps + st->tables[i].part] = (int64_t)st->tables[i].rows_touched;
}

int ps_client_status(ps_client_t *pc, int ps, ps_status_t *st, char *err, size_t errlen)
{
    Psc__StatusRequest req = PSC__STATUS_REQUEST__INIT;
    uint8_t buf[8];
    size_t len = psc__status_request__pack(&req, buf);
    psc_rpc_op_t op;
    int rc = psc_rpc_call(pc->ch[ps], PSC_M_STATUS, buf, len, pc->timeout_ms, 0, &op);
    if (rc)
        rc = pcl_op_error(&op, 1, "status", err, errlen);
    else
        rc = status_parse(&op, ps, st, err, errlen);
    if (rc == 0) note_table_rows(pc, st);
    psc_rpc_op_clear(&op);
    return rc;
}

int ps_client_status_all(ps_client_t *pc, ps_status_t *st, int *ok, char *err, size_t errlen)
{
    int P = pc->num_ps;
    Psc__StatusRequest req = PSC__STATUS_REQUEST__INIT;
    uint8_t buf[8];
    size_t len = psc__status_request__pack(&req, buf);
    psc_rpc_op_t *ops = psc_xcalloc((size_t)P, sizeof *ops);
    int rc = run_on_all(pc, PSC_M_STATUS, buf, len, ops, "status", err, errlen);
    for (int i = 0; i < P; i++) {
        char e[256] = "";
        ok[i] = ops[i].code == PSC_RPC_OK && status_parse(&ops[i], i, &st[i], e, sizeof e) == 0;
        if (ok[i]) note_table_rows(pc, &st[i]);
        if (!ok[i] && rc == 0) rc = psc_seterr(err, errlen, PSC_ECORRUPT, "%s", e);
    }
    pcl_clear_ops(ops, (size_t)P);
    free(ops);
    return rc;
}

int ps_client_wait_ready(ps_client_t *pc, const char *job_id, double wait_secs, atomic_int *stop, char *err,
                         size_t errlen)
{
    double start = psc_now();
    int logged = 0;
    char last[512] = "no answer yet";
    ps_status_t *st = psc_xcalloc((size_t)pc->num_ps, sizeof *st);
    int *ok = psc_xcalloc((size_t)pc->num_ps, sizeof *ok);
    int rc = 0;
    for (;;) {
        int all = ps_client_status_all(pc, st, ok, last, sizeof last) == 0;
        for (int i = 0; i < pc->num_ps && all; i++) {
            if (!st[i].ready || strcmp(st[i].job_id, job_id) != 0) {
                snprintf(last, sizeof last, "ps %d: %s", i,
                         st[i].ready ? "holds another job" : "model not initialized yet");
                all = 0;
            }
        }
        if (all) break;
        if (stop && atomic_load(stop)) {
            rc = psc_seterr(err, errlen, PSC_ECANCELLED, "cancelled while waiting for the model");
            break;
        }
        if (psc_now() - start > wait_secs) {
            rc = psc_seterr(err, errlen, PSC_ETIMEOUT,
                            "the model of job %s was not ready within %.0f s (last: %s); is the chief running?",
                            job_id, wait_secs, last);
            break;
        }
        if (!logged) {
            PSC_INFO("waiting up to %.0f s for the chief to initialize the model (%s)", wait_secs, last);
            logged = 1;
        }
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    free(st);
    free(ok);
    return rc;
}

int ps_client_worker_done(ps_client_t *pc, uint32_t *workers_done, char *err, size_t errlen)
{
    int ps = pc->step_ps >= 0 ? pc->step_ps : 0;
    Psc__WorkerDoneRequest req = PSC__WORKER_DONE_REQUEST__INIT;
    req.worker = (uint32_t)pc->rank;
    uint8_t buf[16];
    size_t len = psc__worker_done_request__pack(&req, buf);
    psc_rpc_op_t op;
    int rc = psc_rpc_call(pc->ch[ps], PSC_M_WORKER_DONE, buf, len, pc->timeout_ms, 0, &op);
    if (rc) {
        rc = pcl_op_error(&op, 1, "worker-done", err, errlen);
    } else {
        Psc__WorkerDoneReply *r = psc__worker_done_reply__unpack(NULL, op.reply_len, op.reply);
        if (r) {
            if (workers_done) *workers_done = r->workers_done;
            psc__worker_done_reply__free_unpacked(r, NULL);
        }
    }
    psc_rpc_op_clear(&op);
    return rc;
}

void ps_client_shutdown_all(ps_client_t *pc, const char *reason)
{
    Psc__ShutdownRequest req = PSC__SHUTDOWN_REQUEST__INIT;
    req.reason = (char *)reason;
    size_t len = psc__shutdown_request__get_packed_size(&req);
    uint8_t *buf = psc_xmalloc(len);
    psc__shutdown_request__pack(&req, buf);
    psc_rpc_op_t *ops = psc_xcalloc((size_t)pc->num_ps, sizeof *ops);
    for (int i = 0; i < pc->num_ps; i++) {
        ops[i].ch = pc->ch[i];
        ops[i].method = PSC_M_SHUTDOWN;
        ops[i].hdr = buf;
        ops[i].hdr_len = len;
    }
    psc_rpc_run(ops, (size_t)pc->num_ps, (size_t)pc->num_ps, pc->timeout_ms);
    for (int i = 0; i < pc->num_ps; i++)
        if (ops[i].code != PSC_RPC_OK)
            PSC_WARN("shutdown of ps %d (%s): %s: %s", i, psc_rpc_channel_target(ops[i].ch),
                     psc_rpc_code_name(ops[i].code), ops[i].msg);
    pcl_clear_ops(ops, (size_t)pc->num_ps);
    free(ops);
    free(buf);
}
