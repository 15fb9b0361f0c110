/* predict.c — see predict.h.
 *
 * A predictor is the evaluator's context (evaluator.c) pointed at a file: the
 * model's variables and placement, a PS client, the parameter slab pulled
 * once, and the model's job (model_job.h) built to read nothing at creation;
 * its predict_open / predict_next read and score the file in evaluation
 * batches. predictor_next cuts those batches into pages of any size: the rest
 * of a batch waits in `pending` for the next page.
 */
#include "predict.h"

#include "log.h"
#include "model_job.h"
#include "model_spec.h"
#include "predict_out.h"
#include "placement.h"
#include "ps_client.h"
#include "psc.h"
#include "tower.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct predictor {
    psc_job_spec_t spec; /* owned; data.test is the file */
    psc_var_desc_t *vars;
    psc_placed_var_t *placed;
    int nvars, nplaced;
    float *params; /* the slab scored with */
    ps_client_t *pc;
    model_job_t *job;
    int outputs;
    int64_t global_step;
    /* the batch being handed out: examples pend_at .. pend_n - 1 of the job's buffers */
    const float *pend_labels, *pend_probs;
    int pend_n, pend_at;
    int done; /* the job said the shard ended */
    int failed;
    char fail_msg[1024];
    int64_t examples;
};

void predict_page_free(predict_page_t *p)
{
    if (!p) return;
    free(p->labels);
    free(p->probs);
    memset(p, 0, sizeof *p);
}

void predictor_destroy(predictor_t *p)
{
    if (!p) return;
    model_job_destroy(p->job);
    ps_client_destroy(p->pc);
    free(p->params);
    free(p->vars);
    free(p->placed);
    psc_job_spec_deinit(&p->spec);
    free(p);
}

/* The spec's data.test becomes the file, read whole and in order, record
 * sharded, every bad record an error; then the file is checked readable. */
static int point_at_file(psc_job_spec_t *spec, const char *file, char *err, size_t errlen)
{
    if (!file[0] || strlen(file) >= sizeof spec->test_path)
        return psc_seterr(err, errlen, PSC_ECONFIG, "predict: the file name is empty or longer than %zu bytes",
                          sizeof spec->test_path - 1);
    if (spec->data_format == PSC_DATA_IDX) {
        snprintf(spec->test_path, sizeof spec->test_path, "%s", file);
    } else {
        for (int i = 0; i < spec->num_test_files; i++) free(spec->test_files[i]);
        free(spec->test_files);
        spec->test_files = psc_xmalloc(sizeof *spec->test_files);
        spec->test_files[0] = psc_xstrdup(file);
        spec->num_test_files = 1;
    }
    spec->shard = PSC_SHARD_RECORD;
    spec->bad_record_limit = 0;
    spec->test_examples = 0;
    char cerr[1024];
    if (psc_job_spec_check_data(spec, 0, 1, cerr, sizeof cerr) == 0) return 0;
    static const char pfx[] = "job spec: data.test: "; /* the check names the spec's key; here it is the file */
    const char *why = strncmp(cerr, pfx, sizeof pfx - 1) == 0 ? cerr + sizeof pfx - 1 : cerr;
    return psc_seterr(err, errlen, PSC_ECONFIG, "predict file %s: %s", file, why);
}

/* The live model must be the job's, ready on every PS (wait_secs > 0: wait for it). */
static int live_model_ready(predictor_t *p, double wait_secs, char *err, size_t errlen)
{
    if (wait_secs > 0) return ps_client_wait_ready(p->pc, p->spec.job_id, wait_secs, NULL, err, errlen);
    int P = ps_client_num_ps(p->pc), rc;
    ps_status_t *st = psc_xcalloc((size_t)P, sizeof *st);
    int *ok = psc_xcalloc((size_t)P, sizeof *ok);
    if ((rc = ps_client_status_all(p->pc, st, ok, err, errlen)) == 0)
        for (int i = 0; i < P; i++) {
            if (st[i].ready && strcmp(st[i].job_id, p->spec.job_id) == 0) continue;
            rc = psc_seterr(err, errlen, PSC_ENOTREADY,
                            "ps %d holds %s%s, not the live model of job %s: score one of the job's committed "
                            "checkpoints instead (--checkpoint ID)",
                            i, st[i].job_id[0] ? "job " : "no model", st[i].job_id, p->spec.job_id);
            break;
        }
    free(st);
    free(ok);
    return rc;
}

/* The parameter slab: committed checkpoint ckpt of the job, or the live model. */
static int pull_model(predictor_t *p, uint64_t ckpt, double wait_secs, char *err, size_t errlen)
{
    int rc;
    if (ckpt) {
        uint64_t id;
        if ((rc = ps_client_ckpt_find(p->pc, p->spec.job_id, ckpt, &id, &p->global_step, err, errlen))) return rc;
        return ps_client_pull_checkpoint(p->pc, ckpt, p->params, err, errlen);
    }
    if ((rc = live_model_ready(p, wait_secs, err, errlen))) return rc;
    return ps_client_pull(p->pc, p->params, &p->global_step, err, errlen);
}

int predictor_create(const trainer_opts_t *o, psc_job_spec_t *spec, const char *file, uint64_t ckpt, int shard,
                     int num_shards, double wait_secs, predictor_t **out, char *err, size_t errlen)
{
    *out = NULL;
    predictor_t *p = psc_xcalloc(1, sizeof *p);
    p->spec = *spec;
    memset(spec, 0, sizeof *spec);
    int rc;
    if ((rc = point_at_file(&p->spec, file, err, errlen)) ||
        (rc = psc_model_variables(&p->spec, &p->vars, &p->nvars, err, errlen)) ||
        (rc = psc_place(p->vars, p->nvars, o->cluster->n[PSC_JOB_PS], p->spec.placement, p->spec.min_shard_bytes,
                        &p->placed, &p->nplaced, err, errlen)))
        goto fail;
    int64_t *offsets = psc_xcalloc((size_t)p->nvars, sizeof *offsets);
    int64_t nparams = tower_layout(p->vars, p->nvars, offsets);
    free(offsets);
    p->params = psc_xaligned((size_t)PSC_MAX(nparams, 1) * sizeof(float));
    p->pc = ps_client_create(o->cluster, p->vars, p->nvars, p->placed, p->nplaced, 0, o->rpc_timeout_ms);
    trainer_opts_t to = *o;
    to.spec = &p->spec;
    model_job_opts_t mo = model_job_opts_of(&to, p->vars, p->nvars, nparams, p->pc);
    if ((rc = ps_client_set_job_tables(p->pc, &p->spec, p->nplaced, err, errlen)) ||
        (rc = model_job_create(&mo, &p->job, err, errlen)) || (rc = pull_model(p, ckpt, wait_secs, err, errlen)) ||
        (rc = p->job->ops->predict_open(p->job, p->params, ckpt, shard, num_shards, &p->outputs, err, errlen)))
        goto fail;
    *out = p;
    return 0;
fail:
    predictor_destroy(p);
    return rc;
}

const char *predictor_job_id(const predictor_t *p) { return p->spec.job_id; }
int64_t predictor_global_step(const predictor_t *p) { return p->global_step; }
int predictor_outputs(const predictor_t *p) { return p->outputs; }
int predictor_sigmoid(const predictor_t *p) { return p->spec.loss_kind == PSC_LOSS_SIGMOID_XENT; }
int64_t predictor_examples(const predictor_t *p) { return p->examples; }

static void page_reserve(predict_page_t *page, int n, int outputs)
{
    if (n <= page->cap && page->outputs == outputs) return;
    page->cap = PSC_MAX(n, page->cap);
    page->outputs = outputs;
    page->labels = psc_xrealloc(page->labels, (size_t)page->cap * sizeof *page->labels);
    page->probs = psc_xrealloc(page->probs, (size_t)page->cap * (size_t)outputs * sizeof *page->probs);
}

int predictor_next(predictor_t *p, int max_n, predict_page_t *page, int *done, char *err, size_t errlen)
{
    PSC_ASSERT(max_n >= 1);
    *done = 0;
    page->n = 0;
    if (p->failed) return psc_seterr(err, errlen, p->failed, "%s", p->fail_msg);
    page_reserve(page, max_n, p->outputs);
    while (page->n < max_n) {
        if (p->pend_at == p->pend_n) {
            if (p->done) break;
            int n = 0, rc = p->job->ops->predict_next(p->job, &n, &p->pend_labels, &p->pend_probs, err, errlen);
            if (rc) {
                p->failed = rc;
                snprintf(p->fail_msg, sizeof p->fail_msg, "%s", err);
                page->n = 0;
                return rc;
            }
            p->pend_n = n;
            p->pend_at = 0;
            if (n == 0) p->done = 1;
            continue;
        }
        int k = PSC_MIN(max_n - page->n, p->pend_n - p->pend_at);
        memcpy(page->labels + page->n, p->pend_labels + p->pend_at, (size_t)k * sizeof(float));
        memcpy(page->probs + (size_t)page->n * (size_t)p->outputs,
               p->pend_probs + (size_t)p->pend_at * (size_t)p->outputs, (size_t)k * (size_t)p->outputs * sizeof(float));
        page->n += k;
        p->pend_at += k;
    }
    p->examples += page->n;
    *done = p->done && p->pend_at == p->pend_n;
    return 0;
}

/* The pages of p into f, each line numbered from 0. */
static int write_pages(predictor_t *p, FILE *f, atomic_int *stop, int64_t *examples, char *err, size_t errlen)
{
    predict_page_t page = {0};
    int done = 0, rc = 0, sig = predictor_sigmoid(p), C = predictor_outputs(p);
    psc_predict_header(f, sig, C);
    while (!done && rc == 0) {
        if (stop && atomic_load(stop)) {
            rc = psc_seterr(err, errlen, PSC_ECANCELLED, "predict: stopped");
            break;
        }
        if ((rc = predictor_next(p, 4096, &page, &done, err, errlen))) break;
        for (int i = 0; i < page.n; i++)
            psc_predict_line(f, (*examples)++, page.labels[i], sig, page.probs + (size_t)i * C, C);
    }
    predict_page_free(&page);
    return rc;
}

int predict_file(const trainer_opts_t *o, psc_job_spec_t *spec, const char *file, uint64_t ckpt, double wait_secs,
                 const char *out_path, atomic_int *stop, int64_t *examples, char *err, size_t errlen)
{
    *examples = 0;
    predictor_t *p;
    int rc = predictor_create(o, spec, file, ckpt, 0, 1, wait_secs, &p, err, errlen);
    if (rc) return rc;
    PSC_INFO("predict: scoring %s with job %s's %s (global_step %lld) into %s", file, predictor_job_id(p),
             ckpt ? "committed checkpoint" : "live model", (long long)predictor_global_step(p), out_path);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", out_path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        rc = psc_seterr(err, errlen, PSC_EIO, "predict: cannot write %s: %s", tmp, strerror(errno));
        predictor_destroy(p);
        return rc;
    }
    double t0 = psc_now();
    rc = write_pages(p, f, stop, examples, err, errlen);
    int werr = ferror(f) ? errno : 0;
    if (fclose(f) != 0 && !werr) werr = errno ? errno : EIO;
    if (rc == 0 && werr) rc = psc_seterr(err, errlen, PSC_EIO, "predict: cannot write %s: %s", tmp, strerror(werr));
    if (rc == 0 && rename(tmp, out_path) != 0)
        rc = psc_seterr(err, errlen, PSC_EIO, "predict: cannot rename %s to %s: %s", tmp, out_path, strerror(errno));
    if (rc)
        unlink(tmp);
    else
        PSC_INFO("predict: %lld examples scored in %.2f s (%.0f/s)", (long long)*examples, psc_now() - t0,
                 (double)*examples / PSC_MAX(psc_now() - t0, 1e-9));
    predictor_destroy(p);
    return rc;
}
