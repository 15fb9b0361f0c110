/* tower_group.c — see tower_group.h.
 *
 * Tower 0 runs on the calling thread; towers 1..T-1 each have a thread that
 * waits for a job (a generation counter under one mutex), runs it on its own
 * tower and reports back. A job is one of set_params, train_step, evaluate, predict on
 * the tower's slice; the caller runs its own part, then waits for the others.
 * Nothing is allocated per step.
 */
#include "tower_group.h"

#include "cpu_share.h"

#include "log.h"
#include "psc.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum job_kind { JOB_NONE, JOB_SET_PARAMS, JOB_TRAIN, JOB_EVAL, JOB_PREDICT, JOB_EXIT };

typedef struct slot {
    tower_group_t *ts;
    int index;
    tower_t *tower;
    pthread_t thread;
    /* this tower's part of the current job */
    int off, n;
    float loss;
    int correct;
    double loss_sum;
    int rc;
} slot_t;

struct tower_group {
    const tower_ops_t *backend;
    int count;
    int threads; /* slots 1 .. threads have a running thread (slot 0 runs on the caller's) */
    int features;
    int classes; /* logits per example (the last layer's outputs) */
    char describe[256];
    slot_t slots[PSC_MAX_TOWERS];
    float weights[PSC_MAX_TOWERS];
    tower_t *active[PSC_MAX_TOWERS];
    /* the current job */
    pthread_mutex_t lock;
    pthread_cond_t go, done;
    uint64_t generation;
    int pending;
    enum job_kind kind;
    const float *params, *x;
    const int32_t *y;
    uint64_t seed;
    float *logits; /* predict: (n, classes) */
};

int tower_group_parse_devices(const char *devices, const tower_ops_t **backend, int *devs, int *ndev, char *err,
                         size_t errlen)
{
    const tower_ops_t *cuda = tower_backend_find("cuda");
    int gpus = cuda ? cuda->device_count() : 0;
    /* No GPU because the driver is unusable (too old for this build's CUDA, a
     * broken install) is not "no GPU here": a pod that asked for one would
     * silently train on the CPU. */
    char why[256] = "";
    int broken = cuda && gpus == 0 ? cuda->device_error(why, sizeof why) : 0;
    *ndev = 0;
    *backend = NULL;
    if (!devices || !devices[0] || strcmp(devices, "auto") == 0) {
        if (gpus > 0) {
            *backend = cuda;
            for (int i = 0; i < gpus && i < PSC_MAX_TOWERS; i++) devs[(*ndev)++] = i;
        } else {
            *backend = &tower_cpu_ops;
            devs[(*ndev)++] = 0;
            if (broken)
                PSC_WARN("no usable GPU (%s): one CPU tower (--devices gpu makes this an error)", why);
            else
                PSC_INFO("no GPU visible (%s): one CPU tower",
                         cuda ? "the CUDA backend found no device" : "this build has no CUDA backend");
        }
        return 0;
    }
    char buf[256];
    if (strlen(devices) >= sizeof buf) return psc_seterr(err, errlen, PSC_EINVAL, "--devices: too long");
    snprintf(buf, sizeof buf, "%s", devices);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        const tower_ops_t *b;
        int first = *ndev, last;
        if (first >= PSC_MAX_TOWERS)
            return psc_seterr(err, errlen, PSC_EINVAL, "--devices: at most %d towers", PSC_MAX_TOWERS);
        if (strcmp(tok, "cpu") == 0) {
            b = &tower_cpu_ops;
            last = first;
            devs[first] = 0;
        } else if (strncmp(tok, "gpu", 3) == 0) {
            if (!cuda)
                return psc_seterr(err, errlen, PSC_EUNSUPPORTED,
                                  "--devices: \"%s\": this build has no CUDA backend (nvcc was not found)", tok);
            b = cuda;
            if (gpus == 0 && broken) return psc_seterr(err, errlen, broken, "--devices: \"%s\": %s", tok, why);
            if (tok[3] == '\0') {
                if (gpus == 0) return psc_seterr(err, errlen, PSC_EUNSUPPORTED, "--devices: \"gpu\": no GPU is visible");
                last = first + gpus - 1;
                for (int i = 0; i < gpus && first + i < PSC_MAX_TOWERS; i++) devs[first + i] = i;
            } else {
                char *end;
                long k = tok[3] == ':' ? strtol(tok + 4, &end, 10) : -1;
                if (tok[3] != ':' || end == tok + 4 || *end || k < 0)
                    return psc_seterr(err, errlen, PSC_EINVAL, "--devices: \"%s\" is not cpu, gpu or gpu:K", tok);
                if (k >= gpus)
                    return psc_seterr(err, errlen, PSC_EUNSUPPORTED, "--devices: \"%s\": only %d GPU%s visible", tok,
                                      gpus, gpus == 1 ? " is" : "s are");
                last = first;
                devs[first] = (int)k;
            }
        } else {
            return psc_seterr(err, errlen, PSC_EINVAL, "--devices: \"%s\" is not cpu, gpu or gpu:K", tok);
        }
        if (*backend && *backend != b)
            return psc_seterr(err, errlen, PSC_EINVAL,
                              "--devices: \"%s\": CPU and GPU towers cannot be mixed in one worker", devices);
        if (last >= PSC_MAX_TOWERS)
            return psc_seterr(err, errlen, PSC_EINVAL, "--devices: at most %d towers", PSC_MAX_TOWERS);
        *backend = b;
        *ndev = last + 1;
    }
    if (*ndev == 0) return psc_seterr(err, errlen, PSC_EINVAL, "--devices: \"%s\" names no device", devices);
    return 0;
}

/* Runs the current job's part of one slot. */
static void run_slot(tower_group_t *ts, slot_t *s)
{
    s->rc = 0;
    switch (ts->kind) {
    case JOB_SET_PARAMS:
        s->rc = tower_set_params(s->tower, ts->params);
        break;
    case JOB_TRAIN:
        s->loss = 0;
        s->correct = 0;
        if (s->n > 0)
            s->rc = tower_train_step_at(s->tower, ts->x + (int64_t)s->off * ts->features, ts->y + s->off, s->n,
                                        ts->seed, s->off, &s->loss, &s->correct);
        break;
    case JOB_EVAL:
        s->loss_sum = 0;
        s->correct = 0;
        if (s->n > 0)
            s->rc = tower_evaluate(s->tower, ts->x + (int64_t)s->off * ts->features, ts->y + s->off, s->n,
                                   &s->loss_sum, &s->correct);
        break;
    case JOB_PREDICT:
        if (s->n > 0)
            s->rc = tower_predict(s->tower, ts->x + (int64_t)s->off * ts->features, s->n,
                                  ts->logits + (int64_t)s->off * ts->classes);
        break;
    default:
        break;
    }
}

static void *slot_thread(void *arg)
{
    slot_t *s = arg;
    tower_group_t *ts = s->ts;
    uint64_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&ts->lock);
        while (ts->generation == seen) pthread_cond_wait(&ts->go, &ts->lock);
        seen = ts->generation;
        enum job_kind kind = ts->kind;
        pthread_mutex_unlock(&ts->lock);
        if (kind == JOB_EXIT) return NULL;
        run_slot(ts, s);
        pthread_mutex_lock(&ts->lock);
        if (--ts->pending == 0) pthread_cond_signal(&ts->done);
        pthread_mutex_unlock(&ts->lock);
    }
}

/* Runs a job on every tower (tower 0 here) and waits for all. Returns the first error. */
static int run_job(tower_group_t *ts, enum job_kind kind)
{
    ts->kind = kind;
    if (ts->count > 1) {
        pthread_mutex_lock(&ts->lock);
        ts->pending = ts->count - 1;
        ts->generation++;
        pthread_cond_broadcast(&ts->go);
        pthread_mutex_unlock(&ts->lock);
    }
    run_slot(ts, &ts->slots[0]);
    if (ts->count > 1) {
        pthread_mutex_lock(&ts->lock);
        while (ts->pending > 0) pthread_cond_wait(&ts->done, &ts->lock);
        pthread_mutex_unlock(&ts->lock);
    }
    for (int i = 0; i < ts->count; i++)
        if (ts->slots[i].rc) return ts->slots[i].rc;
    return 0;
}

/* Splits n examples into the towers' contiguous slices. */
static void split(tower_group_t *ts, int n)
{
    int off = 0;
    for (int i = 0; i < ts->count; i++) {
        slot_t *s = &ts->slots[i];
        s->off = off;
        s->n = n / ts->count + (i < n % ts->count);
        off += s->n;
    }
}

int tower_group_create(const char *devices, const psc_job_spec_t *spec, const psc_var_desc_t *vars, int nvars,
                  int max_batch, tower_group_t **out, char *err, size_t errlen)
{
    *out = NULL;
    const tower_ops_t *backend;
    int devs[PSC_MAX_TOWERS], ndev, rc;
    if ((rc = tower_group_parse_devices(devices, &backend, devs, &ndev, err, errlen))) return rc;
    if (max_batch < ndev)
        return psc_seterr(err, errlen, PSC_EINVAL, "batch of %d examples cannot feed %d towers", max_batch, ndev);
    tower_group_t *ts = psc_xcalloc(1, sizeof *ts);
    ts->backend = backend;
    pthread_mutex_init(&ts->lock, NULL);
    pthread_cond_init(&ts->go, NULL);
    pthread_cond_init(&ts->done, NULL);
    ts->features = spec->input_shape[0];
    for (int d = 1; d < spec->input_rank; d++) ts->features *= spec->input_shape[d];
    int(*shapes)[3] = psc_xcalloc((size_t)PSC_MAX(spec->num_layers, 1), sizeof *shapes);
    if ((rc = psc_model_shapes(spec, shapes, err, errlen)) == 0) {
        const int *last = shapes[spec->num_layers - 1];
        ts->classes = last[0] * last[1] * last[2];
    }
    free(shapes);
    if (rc) {
        tower_group_destroy(ts);
        return rc;
    }
    /* CPU towers run side by side; each keeps its GEMMs on its own thread. */
    if (backend == &tower_cpu_ops && ndev > 1) tower_cpu_set_threads(1);
    int per_tower = max_batch / ndev + (max_batch % ndev != 0);
    size_t at = 0;
    for (int i = 0; i < ndev; i++) {
        slot_t *s = &ts->slots[i];
        s->ts = ts;
        s->index = i;
        if ((rc = backend->create(spec, vars, nvars, per_tower, devs[i], &s->tower, err, errlen))) {
            tower_group_destroy(ts);
            return rc;
        }
        ts->count = i + 1;
        if (backend == &tower_cpu_ops)
            at += (size_t)snprintf(ts->describe + at, sizeof ts->describe - at, "%scpu", i ? "," : "");
        else
            at += (size_t)snprintf(ts->describe + at, sizeof ts->describe - at, "%sgpu:%d", i ? "," : "", devs[i]);
        if (at >= sizeof ts->describe) at = sizeof ts->describe - 1;
    }
    for (int i = 1; i < ts->count; i++) {
        if ((rc = psc_thread_start(&ts->slots[i].thread, slot_thread, &ts->slots[i], "tower", err, errlen))) {
            tower_group_destroy(ts); /* joins the ones started */
            return rc;
        }
        ts->threads = i;
    }
    *out = ts;
    return 0;
}

void tower_group_destroy(tower_group_t *ts)
{
    if (!ts) return;
    if (ts->threads > 0) {
        pthread_mutex_lock(&ts->lock);
        ts->kind = JOB_EXIT;
        ts->generation++;
        pthread_cond_broadcast(&ts->go);
        pthread_mutex_unlock(&ts->lock);
        for (int i = 1; i <= ts->threads; i++) pthread_join(ts->slots[i].thread, NULL);
    }
    for (int i = 0; i < ts->count; i++) tower_destroy(ts->slots[i].tower);
    pthread_mutex_destroy(&ts->lock);
    pthread_cond_destroy(&ts->go);
    pthread_cond_destroy(&ts->done);
    free(ts);
}

int tower_group_count(const tower_group_t *ts) { return ts->count; }
const char *tower_group_describe(const tower_group_t *ts) { return ts->describe; }

void tower_group_set_cpu_threads(tower_group_t *ts, int blas_threads, const psc_cluster_t *cluster, psc_task_t self)
{
    if (ts->backend != &tower_cpu_ops) return;
    char why[224];
    int n = blas_threads;
    if (n > 0) {
        snprintf(why, sizeof why, "%d (--blas_threads)", n);
    } else if (ts->count > 1) {
        return; /* tower_group_create gave each of them 1 */
    } else {
        n = cpu_share_default_threads(cluster, self, why, sizeof why);
    }
    tower_cpu_set_threads(n);
    PSC_INFO("CPU tower threads: %s", why);
}

int tower_group_set_params(tower_group_t *ts, const float *params)
{
    ts->params = params;
    return run_job(ts, JOB_SET_PARAMS);
}

int tower_group_train_step(tower_group_t *ts, const float *x, const int32_t *y, int n, uint64_t seed, float *loss,
                      int *correct)
{
    if (n < 1) return PSC_EINVAL;
    ts->x = x;
    ts->y = y;
    ts->seed = seed;
    split(ts, n);
    PSC_ASSERT(ts->slots[0].n > 0);
    int rc = run_job(ts, JOB_TRAIN);
    if (rc) return rc;
    double l = 0;
    int hits = 0, used = 0;
    for (int i = 0; i < ts->count; i++) {
        const slot_t *s = &ts->slots[i];
        l += (double)s->loss * s->n;
        hits += s->correct;
        if (s->n == 0) continue; /* a tower without examples this step has no gradient */
        ts->active[used] = s->tower;
        ts->weights[used++] = (float)s->n / (float)n; /* batch mean = size-weighted mean of tower means */
    }
    if (loss) *loss = (float)(l / n);
    if (correct) *correct = hits;
    if (used == 1) return 0; /* tower 0 always has examples and holds the result */
    return ts->backend->reduce_grads(ts->slots[0].tower, ts->active, ts->weights, used);
}

int tower_group_get_grads(tower_group_t *ts, float *grads) { return tower_get_grads(ts->slots[0].tower, grads); }

int tower_group_evaluate(tower_group_t *ts, const float *x, const int32_t *y, int n, double *loss_sum, int *correct)
{
    if (n < 1) return 0;
    ts->x = x;
    ts->y = y;
    split(ts, n);
    int rc = run_job(ts, JOB_EVAL);
    if (rc) return rc;
    for (int i = 0; i < ts->count; i++) {
        if (loss_sum) *loss_sum += ts->slots[i].loss_sum;
        if (correct) *correct += ts->slots[i].correct;
    }
    return 0;
}

int tower_group_classes(const tower_group_t *ts) { return ts->classes; }

int tower_group_predict(tower_group_t *ts, const float *x, int n, float *logits)
{
    if (n < 1) return 0;
    ts->x = x;
    ts->logits = logits;
    split(ts, n);
    return run_job(ts, JOB_PREDICT);
}
