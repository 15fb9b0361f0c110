/* dense_job.c — a dense (image) model's job behind model_job.h: its data
 * (IDX, loaded whole: dataset.h), this replica's shard of it in batches
 * reshuffled every epoch, and one tower per device (tower_group.h), which a
 * step's batch is split across. A step sums per_step batches' gradients (sync
 * replicas with R > N); evaluation runs the towers over the whole test set.
 *
 * Scoring a file (predict_open/_next) streams it through the data reader
 * (reader.h: idx, record-sharded) in evaluation batches and turns the
 * towers' logits into softmax probabilities.
 *
 * Invariants: steps counts the steps computed or skipped (the dropout seed of
 * batch k of step s is a function of (seed, rank, s, k), whoever computes it).
 */
#include "model_job.h"

#include "dataset.h"
#include "reader.h"
#include "log.h"
#include "psc.h"
#include "rng.h"
#include "tower_group.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct dense_job {
    model_job_t base; /* first: the interface */
    model_job_opts_t o;
    dataset_t train, test;
    dataset_loader_t *loader;
    tower_group_t *towers;
    float *grads_one; /* (nparams) one batch's gradient when per_step > 1 */
    int64_t steps;    /* steps computed or skipped */
    int64_t period_correct, period_examples;
    /* predict: the file's reader, its batch, the towers' logits and the probabilities (eval_batch, classes) */
    data_reader_t *pred;
    data_batch_t pred_batch;
    float *pred_logits, *pred_probs;
    int classes;
} dense_job_t;

static dense_job_t *dense(model_job_t *j) { return (dense_job_t *)(void *)j; }
static const dense_job_t *dense_c(const model_job_t *j) { return (const dense_job_t *)(const void *)j; }

static void dj_destroy(model_job_t *jb)
{
    dense_job_t *j = dense(jb);
    dataset_loader_destroy(j->loader);
    tower_group_destroy(j->towers);
    dataset_deinit(&j->train);
    dataset_deinit(&j->test);
    data_reader_close(j->pred);
    data_batch_free(&j->pred_batch);
    free(j->pred_logits);
    free(j->pred_probs);
    free(j->grads_one);
    free(j);
}

static int dj_start(model_job_t *jb, int64_t *max_steps, char *err, size_t errlen)
{
    dense_job_t *j = dense(jb);
    const psc_job_spec_t *spec = j->o.spec;
    j->loader = dataset_loader_create(&j->train, j->o.rank, j->o.replicas, spec->batch_size, spec->seed,
                                      spec->shuffle, spec->epochs, j->o.prefetch, err, errlen);
    if (!j->loader) return PSC_EINVAL;
    int64_t per_epoch = dataset_loader_steps_per_epoch(j->loader);
    *max_steps = spec->steps > 0 ? spec->steps : (per_epoch * spec->epochs + j->o.per_step - 1) / j->o.per_step;
    PSC_INFO("training on %lld examples (shard %d of %d), %lld steps per epoch, %d epochs, batch %d, %s",
             (long long)dataset_loader_shard_size(j->loader), j->o.rank, j->o.replicas, (long long)per_epoch,
             spec->epochs, spec->batch_size, psc_optim_name(spec->optimizer.kind));
    return 0;
}

/* Replica k's shard (examples k, k + W, ...) in batches over the epochs,
 * per_step batches a step, as its own dj_start counts it. */
static int64_t dj_share_steps(const model_job_t *jb, int k)
{
    const dense_job_t *j = dense_c(jb);
    const psc_job_spec_t *spec = j->o.spec;
    int64_t n = j->train.n, W = j->o.replicas;
    int64_t shard = n > k ? (n - k + W - 1) / W : 0;
    int64_t per_epoch = (shard + spec->batch_size - 1) / spec->batch_size;
    int64_t per_step = 1;
    if (spec->sync && spec->replicas_to_aggregate > W)
        per_step = spec->replicas_to_aggregate / W + (k < spec->replicas_to_aggregate % W);
    return spec->steps > 0 ? spec->steps : (per_epoch * spec->epochs + per_step - 1) / per_step;
}

static int dj_compute(model_job_t *jb, const float *params, float *grads, int64_t sync_step, model_step_t *out,
                      char *err, size_t errlen)
{
    dense_job_t *j = dense(jb);
    (void)sync_step;
    memset(out, 0, sizeof *out);
    int rc = tower_group_set_params(j->towers, params);
    dataset_batch_t b;
    while (rc == 0 && out->batches < j->o.per_step && dataset_loader_next(j->loader, &b) == 0) {
        float loss;
        int correct;
        uint64_t seed = psc_seed_mix(j->o.spec->seed, (uint64_t)(j->o.rank * 1000003 + j->steps * j->o.per_step +
                                                                  out->batches));
        float *g = out->batches == 0 ? grads : j->grads_one;
        if ((rc = tower_group_train_step(j->towers, b.x, b.y, b.n, seed, &loss, &correct)) ||
            (rc = tower_group_get_grads(j->towers, g)))
            break;
        if (out->batches > 0)
            for (int64_t k = 0; k < j->o.nparams; k++) grads[k] += g[k];
        out->batches++;
        out->examples += b.n;
        out->loss_sum += (double)loss * b.n;
        out->epoch = b.epoch + 1;
        j->period_correct += correct;
        j->period_examples += b.n;
    }
    if (rc) return psc_seterr(err, errlen, rc, "tower step %lld failed (%s)", (long long)j->steps, psc_strerror(rc));
    if (out->batches) j->steps++;
    return 0;
}

static int dj_skip(model_job_t *jb, int64_t steps, char *err, size_t errlen)
{
    dense_job_t *j = dense(jb);
    (void)err, (void)errlen;
    dataset_batch_t b;
    for (int64_t k = 0; k < steps * j->o.per_step && dataset_loader_next(j->loader, &b) == 0; k++) {}
    j->steps += steps;
    return 0;
}

static double dj_period_metric(model_job_t *jb)
{
    dense_job_t *j = dense(jb);
    double acc = j->period_examples ? (double)j->period_correct / (double)j->period_examples : NAN;
    j->period_correct = j->period_examples = 0;
    return acc;
}

static int64_t dj_bad_records(const model_job_t *jb)
{
    (void)jb;
    return 0; /* IDX files have no records to skip: a bad one fails the load */
}

/* The towers' current parameters over the whole test set in batches:
 * res->test_accuracy, test_loss (mean), test_examples, evaluated. */
static int dj_evaluate(model_job_t *jb, const float *params, uint64_t ckpt, trainer_result_t *res, char *err,
                       size_t errlen)
{
    (void)ckpt; /* params are all there is */
    dense_job_t *j = dense(jb);
    const dataset_t *set = &j->test;
    double loss_sum = 0;
    int64_t correct_total = 0;
    int rc = tower_group_set_params(j->towers, params), batch = j->o.eval_batch;
    for (int64_t i = 0; rc == 0 && i < set->n; i += batch) {
        int n = (int)PSC_MIN((int64_t)batch, set->n - i), correct = 0;
        rc = tower_group_evaluate(j->towers, set->x + i * set->features, set->y + i, n, &loss_sum, &correct);
        correct_total += correct;
    }
    if (rc) return psc_seterr(err, errlen, rc, "evaluation failed (%s)", psc_strerror(rc));
    res->evaluated = 1;
    res->test_examples = set->n;
    res->test_accuracy = set->n ? (double)correct_total / (double)set->n : 0;
    res->test_loss = set->n ? loss_sum / (double)set->n : 0;
    return 0;
}

static int dj_predict_open(model_job_t *jb, const float *params, uint64_t ckpt, int shard, int num_shards, int *outputs,
                           char *err, size_t errlen)
{
    (void)ckpt; /* params are all there is */
    dense_job_t *j = dense(jb);
    const psc_job_spec_t *spec = j->o.spec;
    int rc = tower_group_set_params(j->towers, params);
    if (rc) return psc_seterr(err, errlen, rc, "the towers refused the weights (%s)", psc_strerror(rc));
    if ((rc = data_reader_open(spec, 1, shard, num_shards, spec->seed, 0, &j->pred, err, errlen))) return rc;
    int features = spec->input_shape[0] * (spec->input_rank == 3 ? spec->input_shape[1] * spec->input_shape[2] : 1);
    if (data_reader_num_dense(j->pred) != features)
        return psc_seterr(err, errlen, PSC_ECONFIG, "%s: examples of %d features; model.input_shape wants %d",
                          spec->test_path, data_reader_num_dense(j->pred), features);
    j->classes = tower_group_classes(j->towers);
    size_t floats = (size_t)j->o.eval_batch * (size_t)j->classes;
    j->pred_logits = psc_xmalloc(floats * sizeof(float));
    j->pred_probs = psc_xmalloc(floats * sizeof(float));
    *outputs = j->classes;
    return 0;
}

/* probs (n, C) = the softmax of each row of logits, in double around the row's maximum. */
static void softmax_rows(const float *logits, int n, int C, float *probs)
{
    for (int i = 0; i < n; i++) {
        const float *z = logits + (size_t)i * C;
        float *p = probs + (size_t)i * C;
        float m = z[0];
        for (int c = 1; c < C; c++) m = z[c] > m ? z[c] : m;
        double sum = 0;
        for (int c = 0; c < C; c++) sum += exp((double)z[c] - m);
        for (int c = 0; c < C; c++) p[c] = (float)(exp((double)z[c] - m) / sum);
    }
}

static int dj_predict_next(model_job_t *jb, int *n, const float **labels, const float **probs, char *err, size_t errlen)
{
    dense_job_t *j = dense(jb);
    *n = 0;
    int got = data_reader_next(j->pred, &j->pred_batch, j->o.eval_batch, NULL, err, errlen);
    if (got <= 0) return got; /* 0: done; or the reader's error, naming the file and record */
    int rc = tower_group_predict(j->towers, j->pred_batch.dense, got, j->pred_logits);
    if (rc) return psc_seterr(err, errlen, rc, "the towers' forward pass failed (%s)", psc_strerror(rc));
    softmax_rows(j->pred_logits, got, j->classes, j->pred_probs);
    *n = got;
    *labels = j->pred_batch.label;
    *probs = j->pred_probs;
    return 0;
}

static const model_job_ops_t dense_ops = {
    .metric = "accuracy",
    .start = dj_start,
    .share_steps = dj_share_steps,
    .compute = dj_compute,
    .push_sync = NULL,
    .push_async = NULL,
    .step_done = NULL,
    .skip = dj_skip,
    .period_metric = dj_period_metric,
    .bad_records = dj_bad_records,
    .evaluate = dj_evaluate,
    .predict_open = dj_predict_open,
    .predict_next = dj_predict_next,
    .destroy = dj_destroy,
};

/* The data this task reads and the towers. */
static int dj_open(dense_job_t *j, char *err, size_t errlen)
{
    const psc_job_spec_t *spec = j->o.spec;
    int rc;
    if (j->o.train) {
        if ((rc = dataset_read(spec, 0, &j->train, err, errlen))) return rc;
        int features =
            spec->input_shape[0] * (spec->input_rank == 3 ? spec->input_shape[1] * spec->input_shape[2] : 1);
        if (j->train.features != features)
            return psc_seterr(err, errlen, PSC_ECONFIG,
                              "data %s has %d features per example; model.input_shape wants %d", spec->train_path,
                              j->train.features, features);
    }
    if (j->o.test && (rc = dataset_read(spec, 1, &j->test, err, errlen))) return rc;
    if ((rc = tower_group_create(j->o.devices, spec, j->o.vars, j->o.nvars, j->o.eval_batch, &j->towers, err,
                                 errlen)))
        return rc;
    tower_group_set_cpu_threads(j->towers, j->o.blas_threads, j->o.cluster, j->o.task);
    PSC_INFO("towers: %s (%d), batch %d split across them", tower_group_describe(j->towers),
             tower_group_count(j->towers), spec->batch_size);
    return 0;
}

int dense_job_create(const model_job_opts_t *o, model_job_t **out, char *err, size_t errlen)
{
    *out = NULL;
    dense_job_t *j = psc_xcalloc(1, sizeof *j);
    j->base.ops = &dense_ops;
    j->o = *o;
    if (o->per_step > 1) j->grads_one = psc_xaligned((size_t)o->nparams * sizeof(float));
    int rc = dj_open(j, err, errlen);
    if (rc) {
        dj_destroy(&j->base);
        return rc;
    }
    *out = &j->base;
    return 0;
}
