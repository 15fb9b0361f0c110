/* ctr_job.c — see ctr_job.h. */
#include "ctr_job.h"
#include "model_job.h"

#include "ctr_loader.h"
#include "ctr_eval.h"
#include "ctr_prefetch.h"
#include "log.h"
#include "psc.h"
#include "tower.h"
#include "tower_ctr.h"
#include "cpu_share.h"
#include "tower_group.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CTR_JOB_WAIT_SECS 0.5 /* data.follow: the longest wait for a batch before the loop gets control back */

struct ctr_job {
    model_job_t base; /* first: the job behind model_job.h */
    ctr_job_opts_t o;
    const psc_job_spec_t *spec;
    ctr_loader_t *loader; /* training data (NULL when evaluating only) */
    tower_ctr_t *tower;
    char backend[16];
    int device;
    int max_batch;
    int64_t cap_nnz;        /* the tower's capacities; a bigger batch rebuilds it */
    int64_t *cap_rows;      /* per table */
    ctr_slot_batch_t *cur;  /* the step's batch, until ctr_job_step_done */
    ctr_slot_batch_t *next; /* async: the next step's batch, its rows pulled in the step's round */
    int next_pulled;        /* that round succeeded: next's rows are there */
    /* prefetch_rows (ctr_prefetch.h): the batch after next, its rows outside next pulled by the bulk in flight
     * (next2_pulled: asked; the bulk's outcome is known at its wait) */
    ctr_pf_t *pf;
    ctr_slot_batch_t *next2;
    int next2_pulled;
    ps_sparse_op_t *ops;    /* per table */
    float *logits;          /* (max_batch) */
    ctr_eval_t period;      /* the training examples since the last period_auc */
    /* predict: the file's loader, the batch last scored (its labels are the caller's until the next call),
     * the weights and checkpoint scored with, the probabilities (max_batch) */
    ctr_loader_t *pred;
    ctr_slot_batch_t *pred_cur;
    const float *pred_params;
    uint64_t pred_ckpt;
    float *pred_probs;
};

/* The tower, (re)built when b needs more than it holds. */
static int ensure_tower(ctr_job_t *j, const ctr_slot_batch_t *b, char *err, size_t errlen)
{
    int grow = j->tower == NULL || b->nnz > j->cap_nnz;
    for (int t = 0; t < j->spec->num_tables; t++) grow |= b->nuids[t] > j->cap_rows[t];
    if (!grow) return 0;
    j->cap_nnz = PSC_MAX(j->cap_nnz, b->nnz + b->nnz / 2 + 64);
    for (int t = 0; t < j->spec->num_tables; t++)
        j->cap_rows[t] = PSC_MAX(j->cap_rows[t], b->nuids[t] + b->nuids[t] / 2 + 64);
    tower_ctr_destroy(j->tower);
    j->tower = NULL;
    return tower_ctr_create(j->backend, j->spec, j->o.vars, j->o.nvars, j->max_batch, j->cap_nnz, j->cap_rows,
                            j->device, &j->tower, err, errlen);
}

/* Whether rows are pulled a batch ahead (ctr_prefetch.h): as the spec says,
 * else (absent) unless a PS runs on this worker's host. Prefetching lets the
 * PS apply most of a step's rows while the next step computes, for some more
 * CPU on both sides: a win where the PS have cores of their own (+12-30 % on
 * 1 ps + 1 worker pinned to a core each), even or a loss where worker and PS
 * share the cores (the 2-core VM: 1 + 1 even, 2 + 2 -7-40 %): docs/performance.md. */
static int use_prefetch(const ctr_job_opts_t *o)
{
    int pf = o->spec->prefetch_rows;
    if (pf >= 0) return pf;
    const char *mine = o->cluster ? psc_cluster_addr(o->cluster, o->task) : NULL;
    for (int i = 0; mine && i < o->cluster->n[PSC_JOB_PS]; i++) {
        const char *ps = o->cluster->addr[PSC_JOB_PS][i];
        if (ps && cpu_share_same_host(mine, ps)) {
            PSC_INFO("prefetch_rows 0 (default: ps %d, %s, shares this worker's host)", i, ps);
            return 0;
        }
    }
    PSC_INFO("prefetch_rows 1 (default: no PS on this worker's host)");
    return 1;
}

int ctr_job_create(const ctr_job_opts_t *o, ctr_job_t **out, char *err, size_t errlen)
{
    *out = NULL;
    const psc_job_spec_t *spec = o->spec;
    ctr_job_t *j = psc_xcalloc(1, sizeof *j);
    j->o = *o;
    j->spec = spec;
    j->max_batch = PSC_MAX(spec->batch_size, o->eval_batch);
    const tower_ops_t *be;
    int devs[64], ndev, rc;
    if ((rc = tower_group_parse_devices(o->devices, &be, devs, &ndev, err, errlen))) goto fail;
    snprintf(j->backend, sizeof j->backend, "%s", be->name);
    j->device = devs[0];
    if (ndev > 1) PSC_INFO("a recommendation model runs one tower: %s %d", be->name, j->device);
    /* the CTR tower's GEMMs are small (batch x a few hundred x tens): OpenBLAS's
     * threads only spin on the cores the PS and the loader need, and one
     * thread is faster alone too (docs/performance.md) */
    tower_cpu_set_threads(o->blas_threads > 0 ? o->blas_threads : 1);
    int T = spec->num_tables;
    j->cap_rows = psc_xcalloc((size_t)PSC_MAX(T, 1), sizeof *j->cap_rows);
    j->ops = psc_xcalloc((size_t)PSC_MAX(T, 1), sizeof *j->ops);
    j->logits = psc_xmalloc((size_t)j->max_batch * sizeof *j->logits);
    ctr_eval_init(&j->period);
    int pf = o->train && !spec->sync && use_prefetch(o);
    if (o->train && (rc = ctr_loader_create(spec, pf ? CTR_LOADER_PREV : 0, o->rank, o->replicas, spec->batch_size,
                                            spec->seed, spec->shuffle, o->prefetch, &j->loader, err, errlen)))
        goto fail;
    if (pf && (rc = ctr_pf_create(o->pc, spec, &j->pf, err, errlen))) goto fail;
    /* a followed directory: the training loop gets control back while files are awaited (model_step_t.waiting) */
    if (j->loader && spec->follow) ctr_loader_set_interrupt(j->loader, o->stop, o->finish, CTR_JOB_WAIT_SECS);
    *out = j;
    return 0;
fail:
    ctr_job_destroy(j);
    return rc;
}

void ctr_job_destroy(ctr_job_t *j)
{
    if (!j) return;
    if (j->pf) {
        int64_t pushed, crit;
        ctr_pf_counts(j->pf, &pushed, &crit);
        if (pushed)
            PSC_INFO("prefetch_rows: %.1f%% of the %lld rows pushed were on the steps' critical path (shared with "
                     "the next batch)",
                     100.0 * (double)crit / (double)pushed, (long long)pushed);
    }
    ctr_pf_destroy(j->pf); /* before the batches: its bulk writes into next2's rows */
    if (j->cur) ctr_loader_release(j->loader, j->cur);
    if (j->next) ctr_loader_release(j->loader, j->next);
    if (j->next2) ctr_loader_release(j->loader, j->next2);
    if (j->pred_cur) ctr_loader_release(j->pred, j->pred_cur);
    ctr_loader_destroy(j->pred);
    free(j->pred_probs);
    ctr_loader_destroy(j->loader);
    tower_ctr_destroy(j->tower);
    ctr_eval_free(&j->period);
    free(j->cap_rows);
    free(j->ops);
    free(j->logits);
    free(j);
}

/* Pulls the rows of b's unique ids of every table into b->rows; read_only
 * (evaluation): rows that do not exist are read as initialized, not created,
 * so test-only ids grow neither the tables nor the checkpoints; ckpt > 0: the
 * rows as committed checkpoint ckpt holds them. */
static int pull_rows(ctr_job_t *j, ctr_slot_batch_t *b, int64_t sync_step, int read_only, uint64_t ckpt, char *err,
                     size_t errlen)
{
    int nops = 0;
    for (int t = 0; t < j->spec->num_tables; t++) {
        ctr_slot_batch_reserve_rows(b, t, j->spec->tables[t].dim);
        if (b->nuids[t] == 0) continue;
        j->ops[nops++] = (ps_sparse_op_t){.table = t,
                                          .pull_ids = b->uids[t],
                                          .pull_rows = b->rows[t],
                                          .npull = (size_t)b->nuids[t],
                                          .read_only = read_only,
                                          .checkpoint = ckpt,
                                          .unique = 1}; /* a batch's unique ids */
    }
    if (nops == 0) return 0;
    if (sync_step >= 0) return ps_client_sparse_sync(j->o.pc, j->ops, nops, sync_step, 1, sync_step, err, errlen);
    return ps_client_sparse(j->o.pc, j->ops, nops, err, errlen);
}

/* prefetch_rows: waits for the bulk in flight (its failure: next lacks rows). */
static void pf_drain(ctr_job_t *j)
{
    char err[512];
    if (!j->pf || !ctr_pf_wait(j->pf, err, sizeof err)) return;
    PSC_WARN("a prefetch round failed (its row gradients are lost; the rows are pulled again): %s", err);
    j->next_pulled = 0;
}

int ctr_job_compute(ctr_job_t *j, const float *params, float *grads, int64_t sync_step, int *examples, double *loss_sum,
                    int *epoch, char *err, size_t errlen)
{
    ctr_slot_batch_t *b = j->next;
    int rc, pulled = b && j->next_pulled;
    j->next = j->next2; /* prefetch_rows: the batch after moves up */
    j->next_pulled = j->next2_pulled;
    j->next2 = NULL;
    j->next2_pulled = 0;
    if (!b && (rc = ctr_loader_next(j->loader, &b, err, errlen))) {
        if (rc == 1) pf_drain(j); /* the data ran out: the last step's bulk lands before the replica is done */
        return rc == 2 || rc == 3 ? 2 : rc;
    }
    j->cur = b;
    if (!pulled) pf_drain(j); /* the rows read below include every push of this worker's */
    if (!pulled) {
        if (j->o.debug_fail_row_pulls > 0) {
            j->o.debug_fail_row_pulls--;
            rc = psc_seterr(err, errlen, PSC_EUNAVAILABLE, "a row pull failed on purpose (--debug_fail_row_pulls)");
        } else {
            rc = pull_rows(j, b, sync_step, 0, 0, err, errlen);
        }
        if (rc) { /* b stays the next batch: the step after the trainer's recovery pulls its rows again */
            j->next2 = j->next;
            j->next2_pulled = j->next_pulled;
            j->next = b;
            j->next_pulled = 0;
            j->cur = NULL;
            return rc;
        }
    }
    if ((rc = ensure_tower(j, b, err, errlen))) return rc;
    tower_ctr_batch_t tb = ctr_slot_batch_view(b);
    float loss;
    if ((rc = tower_ctr_set_params(j->tower, params)) || (rc = tower_ctr_train_step(j->tower, &tb, &loss, j->logits)) ||
        (rc = tower_ctr_get_grads(j->tower, grads, b->row_grads)))
        return psc_seterr(err, errlen, rc, "the tower's step failed (%s)", psc_strerror(rc));
    ctr_eval_add(&j->period, j->logits, b->raw.label, b->raw.n);
    *examples = b->raw.n;
    *loss_sum = (double)loss * b->raw.n;
    *epoch = b->epoch;
    return 0;
}

/* One push op per table: the step's row gradients (every table, an empty
 * contribution included, as a sync round needs). */
static int push_ops(ctr_job_t *j)
{
    ctr_slot_batch_t *b = j->cur;
    static const float none[1] = {0};
    for (int t = 0; t < j->spec->num_tables; t++)
        j->ops[t] = (ps_sparse_op_t){.table = t,
                                     .push_ids = b->uids[t],
                                     .push_grads = b->nuids[t] ? b->row_grads[t] : none,
                                     .npush = (size_t)b->nuids[t],
                                     .unique = 1};
    return j->spec->num_tables;
}

/* The next batch if the loader has one (a followed directory's may be long in coming: the step does not wait). */
static int next_batch(ctr_job_t *j, ctr_slot_batch_t **b)
{
    char err[16];
    return j->spec->follow ? ctr_loader_try_next(j->loader, b) : ctr_loader_next(j->loader, b, err, sizeof err);
}

/* prefetch_rows: the step's exchange split into its critical round, riding on
 * the dense one, and its bulk (ctr_prefetch.h). */
static void pf_push_async(ctr_job_t *j)
{
    pf_drain(j); /* the step before's bulk: the rest of its pushes, next's rows outside this batch */
    ctr_slot_batch_t *b;
    if (!j->next && next_batch(j, &b) == 0) {
        j->next = b;
        j->next_pulled = 0; /* none of its rows asked for yet: its step pulls them */
    }
    if (j->next && !j->next2 && next_batch(j, &b) == 0) j->next2 = b;
    for (int t = 0; t < j->spec->num_tables; t++) {
        if (j->next) ctr_slot_batch_reserve_rows(j->next, t, j->spec->tables[t].dim);
        if (j->next2) ctr_slot_batch_reserve_rows(j->next2, t, j->spec->tables[t].dim);
    }
    const ps_sparse_op_t *crit;
    int n;
    ctr_pf_start(j->pf, j->cur, j->next, j->next2, &crit, &n);
    j->next2_pulled = j->next2 != NULL;
    if (n) ps_client_round_sparse(j->o.pc, crit, n);
}

void ctr_job_push_async(ctr_job_t *j)
{
    if (j->pf) {
        pf_push_async(j);
        return;
    }
    int n = push_ops(j);
    /* the next batch's rows travel back in the same round, pulled after this
     * step's push on each PS: one round trip a step instead of two */
    ctr_slot_batch_t *b;
    j->next_pulled = 0;
    if (next_batch(j, &b) == 0) {
        j->next = b;
        for (int t = 0; t < n; t++) {
            ctr_slot_batch_reserve_rows(b, t, j->spec->tables[t].dim);
            j->ops[t].pull_ids = b->uids[t];
            j->ops[t].pull_rows = b->rows[t];
            j->ops[t].npull = (size_t)b->nuids[t];
        }
    } /* else the data ended (or failed: the next ctr_job_compute reports it) */
    ps_client_round_sparse(j->o.pc, j->ops, n);
}

int ctr_job_push_sync(ctr_job_t *j, int64_t local_step, int *stale, char *err, size_t errlen)
{
    ps_sparse_stats_t st = {0};
    int n = push_ops(j);
    for (int t = 0; t < n; t++) j->ops[t].stats = &st;
    int rc = ps_client_sparse_sync(j->o.pc, j->ops, n, local_step, 1, 0, err, errlen);
    for (int t = 0; t < n; t++) j->ops[t].stats = NULL;
    *stale = st.stale > 0;
    return rc;
}

/* data.follow: a line per file whose last example was in b ("PATH\tN\n" lines). */
static void log_files_done(const ctr_slot_batch_t *b, int skipped)
{
    for (const char *p = b->files_done; p && *p;) {
        const char *tab = strchr(p, '\t'), *nl = tab ? strchr(tab, '\n') : NULL;
        if (!nl) break;
        long long n = strtoll(tab + 1, NULL, 10);
        if (skipped)
            PSC_INFO("skipped file %.*s (%lld examples): trained before this replica restarted", (int)(tab - p), p, n);
        else
            PSC_INFO("finished file %.*s (%lld examples)", (int)(tab - p), p, n);
        p = nl + 1;
    }
}

void ctr_job_step_done(ctr_job_t *j, int ok)
{
    if (j->pf) ctr_pf_kick(j->pf); /* the bulk, after the critical round: they would contend on the PS */
    if (j->pf && j->next && ok)
        ctr_pf_crit_done(j->pf, j->next); /* the rows next shares with this batch */
    else if (j->pf && j->next)
        j->next_pulled = 0;
    else if (j->next)
        j->next_pulled = ok;
    if (j->spec->follow && j->cur) log_files_done(j->cur, 0);
    ctr_loader_release(j->loader, j->cur);
    j->cur = NULL;
}

int ctr_job_skip(ctr_job_t *j, int64_t batches, char *err, size_t errlen)
{
    for (int64_t k = 0; k < batches; k++) {
        ctr_slot_batch_t *b;
        int rc;
        while ((rc = ctr_loader_next(j->loader, &b, err, errlen)) == 3) {} /* files to come: wait on */
        if (rc) return rc == 1 || rc == 2 ? 0 : rc;
        if (j->spec->follow) log_files_done(b, 1);
        ctr_loader_release(j->loader, b);
    }
    return 0;
}

double ctr_job_period_auc(ctr_job_t *j)
{
    double auc = ctr_eval_auc(&j->period);
    ctr_eval_reset(&j->period);
    return auc;
}

int64_t ctr_job_skipped(ctr_job_t *j) { return j->loader ? ctr_loader_skipped(j->loader) : 0; }

/* The evaluation's forward pass over one batch b: its rows pulled read-only
 * (live, or as checkpoint ckpt holds them), the tower's logits in j->logits. */
static int score_batch(ctr_job_t *j, const float *params, uint64_t ckpt, ctr_slot_batch_t *b, char *err, size_t errlen)
{
    int rc;
    if ((rc = pull_rows(j, b, -1, 1, ckpt, err, errlen)) || (rc = ensure_tower(j, b, err, errlen))) return rc;
    tower_ctr_batch_t tb = ctr_slot_batch_view(b);
    if ((rc = tower_ctr_set_params(j->tower, params)) || (rc = tower_ctr_predict(j->tower, &tb, j->logits)))
        return psc_seterr(err, errlen, rc, "the tower's forward pass failed (%s)", psc_strerror(rc));
    return 0;
}

int ctr_job_evaluate(ctr_job_t *j, const float *params, uint64_t ckpt, trainer_result_t *res, char *err, size_t errlen)
{
    const psc_job_spec_t *spec = j->spec;
    if (spec->num_test_files == 0)
        return psc_seterr(err, errlen, PSC_ENOTFOUND, "the job spec has no data.test: nothing to evaluate");
    ctr_loader_t *l;
    int rc = ctr_loader_create(spec, CTR_LOADER_TEST, 0, 1, j->o.eval_batch, spec->seed, 0, 2, &l, err, errlen);
    if (rc) return rc;
    ctr_eval_t ev;
    ctr_eval_init(&ev);
    int64_t correct = 0;
    for (;;) {
        ctr_slot_batch_t *b;
        if ((rc = ctr_loader_next(l, &b, err, errlen))) break;
        if ((rc = score_batch(j, params, ckpt, b, err, errlen)) == 0) {
            ctr_eval_add(&ev, j->logits, b->raw.label, b->raw.n);
            for (int i = 0; i < b->raw.n; i++) correct += (j->logits[i] > 0) == (b->raw.label[i] > 0.5f);
        }
        ctr_loader_release(l, b);
        if (rc) break;
    }
    if (rc == 1) {
        rc = 0;
        res->evaluated = 1;
        res->test_examples = ev.n;
        res->test_auc = ctr_eval_auc(&ev);
        res->test_loss = ctr_eval_log_loss(&ev);
        res->test_accuracy = ev.n ? (double)correct / (double)ev.n : 0;
        res->has_auc = 1;
    }
    ctr_eval_free(&ev);
    ctr_loader_destroy(l);
    return rc;
}

int ctr_job_predict_open(ctr_job_t *j, const float *params, uint64_t ckpt, int shard, int num_shards, char *err,
                         size_t errlen)
{
    const psc_job_spec_t *spec = j->spec;
    j->pred_params = params;
    j->pred_ckpt = ckpt;
    j->pred_probs = psc_xmalloc((size_t)j->max_batch * sizeof *j->pred_probs);
    return ctr_loader_create(spec, CTR_LOADER_TEST, shard, num_shards, j->o.eval_batch, spec->seed, 0, 2, &j->pred, err,
                             errlen);
}

int ctr_job_predict_next(ctr_job_t *j, int *n, const float **labels, const float **probs, char *err, size_t errlen)
{
    *n = 0;
    if (j->pred_cur) ctr_loader_release(j->pred, j->pred_cur);
    j->pred_cur = NULL;
    ctr_slot_batch_t *b;
    int rc = ctr_loader_next(j->pred, &b, err, errlen);
    if (rc) return rc == 1 ? 0 : rc;
    j->pred_cur = b;
    if ((rc = score_batch(j, j->pred_params, j->pred_ckpt, b, err, errlen))) return rc;
    for (int i = 0; i < b->raw.n; i++) j->pred_probs[i] = (float)(1.0 / (1.0 + exp(-(double)j->logits[i])));
    *n = b->raw.n;
    *labels = b->raw.label;
    *probs = j->pred_probs;
    return 0;
}

/* ---- the job behind model_job.h ---- */

static ctr_job_t *ctr(model_job_t *j) { return (ctr_job_t *)(void *)j; }

static int cm_start(model_job_t *jb, int64_t *max_steps, char *err, size_t errlen)
{
    const ctr_job_t *j = ctr(jb);
    const psc_job_spec_t *spec = j->spec;
    (void)err, (void)errlen;
    *max_steps = spec->steps > 0 ? spec->steps : 0; /* streamed files: until their epochs end */
    if (spec->follow) {
        PSC_INFO("following %s (replica %d of %d: its files %d, %d + %d, ... in name order), batch %d, %s; the "
                 "stream ends after %g s without a new file",
                 spec->train_files[0], j->o.rank, j->o.replicas, j->o.rank, j->o.rank, j->o.replicas, spec->batch_size,
                 psc_optim_name(spec->optimizer.kind), spec->follow_idle_secs);
        return 0;
    }
    PSC_INFO("training on %d data file pattern%s (replica %d of %d), %d epoch%s, batch %d, %s", spec->num_train_files,
             spec->num_train_files == 1 ? "" : "s", j->o.rank, j->o.replicas, spec->epochs,
             spec->epochs == 1 ? "" : "s", spec->batch_size, psc_optim_name(spec->optimizer.kind));
    return 0;
}

static int64_t cm_share_steps(const model_job_t *jb, int rank)
{
    (void)rank;
    const ctr_job_t *j = (const ctr_job_t *)(const void *)jb;
    return j->spec->steps > 0 ? j->spec->steps : 0;
}

static int cm_compute(model_job_t *jb, const float *params, float *grads, int64_t sync_step, model_step_t *out,
                      char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    int epoch = 0;
    int rc = ctr_job_compute(ctr(jb), params, grads, sync_step, &out->examples, &out->loss_sum, &epoch, err, errlen);
    if (rc == 1) return 0; /* the data ran out */
    out->waiting = rc == 2;
    if (rc == 2) return 0; /* a followed directory: no batch yet */
    if (rc) return rc;
    out->batches = 1;
    out->epoch = epoch + 1;
    return 0;
}

static int cm_push_sync(model_job_t *jb, int64_t local_step, int *stale, char *err, size_t errlen)
{
    return ctr_job_push_sync(ctr(jb), local_step, stale, err, errlen);
}
static void cm_push_async(model_job_t *jb) { ctr_job_push_async(ctr(jb)); }
static void cm_drain(model_job_t *jb) { pf_drain(ctr(jb)); }
static void cm_step_done(model_job_t *jb, int ok) { ctr_job_step_done(ctr(jb), ok); }
static int cm_skip(model_job_t *jb, int64_t steps, char *err, size_t errlen)
{
    return ctr_job_skip(ctr(jb), steps, err, errlen);
}
static double cm_period_metric(model_job_t *jb) { return ctr_job_period_auc(ctr(jb)); }
static int64_t cm_bad_records(const model_job_t *jb) { return ctr_job_skipped(ctr((model_job_t *)jb)); }
static int cm_evaluate(model_job_t *jb, const float *params, uint64_t ckpt, trainer_result_t *res, char *err,
                       size_t errlen)
{
    return ctr_job_evaluate(ctr(jb), params, ckpt, res, err, errlen);
}
static int cm_predict_open(model_job_t *jb, const float *params, uint64_t ckpt, int shard, int num_shards, int *outputs,
                           char *err, size_t errlen)
{
    *outputs = 1;
    return ctr_job_predict_open(ctr(jb), params, ckpt, shard, num_shards, err, errlen);
}
static int cm_predict_next(model_job_t *jb, int *n, const float **labels, const float **probs, char *err, size_t errlen)
{
    return ctr_job_predict_next(ctr(jb), n, labels, probs, err, errlen);
}
static void cm_destroy(model_job_t *jb) { ctr_job_destroy(ctr(jb)); }

static const model_job_ops_t ctr_ops = {
    .metric = "auc",
    .start = cm_start,
    .share_steps = cm_share_steps,
    .compute = cm_compute,
    .push_sync = cm_push_sync,
    .push_async = cm_push_async,
    .step_done = cm_step_done,
    .drain = cm_drain,
    .skip = cm_skip,
    .period_metric = cm_period_metric,
    .bad_records = cm_bad_records,
    .evaluate = cm_evaluate,
    .predict_open = cm_predict_open,
    .predict_next = cm_predict_next,
    .destroy = cm_destroy,
};

int ctr_job_model_create(const model_job_opts_t *o, model_job_t **out, char *err, size_t errlen)
{
    const psc_job_spec_t *spec = o->spec;
    *out = NULL;
    if (o->train && o->per_step > 1)
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "job spec: sync.replicas_to_aggregate: a recommendation model takes one batch per replica "
                          "and step (R <= N); R = %d, N = %d",
                          spec->replicas_to_aggregate, o->replicas);
    if (o->train && spec->overlap_push_pull)
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "job spec: overlap_push_pull: not available for recommendation models (their rows are "
                          "pulled per batch)");
    ctr_job_opts_t co = {.spec = spec,
                         .vars = o->vars,
                         .nvars = o->nvars,
                         .pc = o->pc,
                         .devices = o->devices,
                         .blas_threads = o->blas_threads,
                         .rank = o->rank,
                         .replicas = o->replicas,
                         .prefetch = o->prefetch,
                         .cluster = o->cluster,
                         .task = o->task,
                         .train = o->train,
                         .eval_batch = o->eval_batch,
                         .stop = o->stop,
                         .finish = o->finish,
                         .debug_fail_row_pulls = o->debug_fail_row_pulls};
    ctr_job_t *j;
    int rc = ctr_job_create(&co, &j, err, errlen);
    if (rc) return rc;
    j->base.ops = &ctr_ops;
    *out = &j->base;
    return 0;
}
