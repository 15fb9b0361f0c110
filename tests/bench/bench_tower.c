/* bench_tower — the time of one training step of a tower (set_params +
 * train_step + get_grads, what a worker does per step besides the RPCs) at
 * batch 256, for
 *   cnn: conv2d(32, 3x3, relu) - max_pool2d - conv2d(64, 3x3, relu) - max_pool2d
 *        - flatten - dense(128, relu) - dense(10) on 28x28x1 (MNIST's shape);
 *   mlp: 784 - 1024 - 1024 - 10, relu;
 * on the CPU backend and, when the build has it and a GPU is visible, the CUDA
 * backend (device 0). Prints ms/step, examples/s and the GPU/CPU speed ratio.
 * Random inputs and Keras-initialized parameters; 2 warm-up steps, then at least
 * 5 steps and at least the given seconds. A measurement, not a test: it never
 * fails on speed (exit 1 only when a tower cannot be built or a step fails).
 *
 * usage: bench_tower [seconds-per-point]   (default 2)
 */
#include "job_spec.h"
#include "model_spec.h"
#include "psc.h"
#include "rng.h"
#include "tower.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BATCH = 256, MAX_LAYERS = 8 };

typedef struct bench_model {
    const char *name;
    psc_layer_spec_t layers[MAX_LAYERS];
    psc_job_spec_t spec;
} bench_model_t;

typedef struct bench_result {
    double ms_per_step;
    double examples_per_sec;
    float loss; /* of the last step, to see that both backends trained the same thing */
    int steps;
} bench_result_t;

static psc_layer_spec_t dense(const char *name, int units, enum psc_activation act)
{
    psc_layer_spec_t L = {.type = PSC_LAYER_DENSE, .units = units, .activation = act, .use_bias = 1};
    snprintf(L.name, sizeof L.name, "%s", name);
    return L;
}

static psc_layer_spec_t conv(const char *name, int filters, int k, enum psc_activation act)
{
    psc_layer_spec_t L = {.type = PSC_LAYER_CONV2D,
                          .filters = filters,
                          .kernel_size = {k, k},
                          .strides = {1, 1},
                          .padding = PSC_PAD_VALID,
                          .activation = act,
                          .use_bias = 1};
    snprintf(L.name, sizeof L.name, "%s", name);
    return L;
}

static psc_layer_spec_t pool(const char *name)
{
    psc_layer_spec_t L = {.type = PSC_LAYER_MAX_POOL2D, .pool_size = {2, 2}, .strides = {2, 2}, .padding = PSC_PAD_VALID};
    snprintf(L.name, sizeof L.name, "%s", name);
    return L;
}

static psc_layer_spec_t flatten(void)
{
    psc_layer_spec_t L = {.type = PSC_LAYER_FLATTEN};
    snprintf(L.name, sizeof L.name, "flatten");
    return L;
}

static void model_finish(bench_model_t *m, int rank, int h, int w, int c, int nl)
{
    m->spec.input_rank = rank;
    m->spec.input_shape[0] = h;
    m->spec.input_shape[1] = w;
    m->spec.input_shape[2] = c;
    m->spec.layers = m->layers;
    m->spec.num_layers = nl;
}

/* Times steps of `ops` on device 0. Returns 0, or prints the error and returns it. */
static int bench_run(const tower_ops_t *ops, const bench_model_t *m, double secs, bench_result_t *res)
{
    char err[256] = "";
    psc_var_desc_t *vars = NULL;
    int nvars = 0, rc;
    tower_t *t = NULL;
    float *params = NULL, *grads = NULL, *x = NULL;
    int32_t *y = NULL;
    if ((rc = psc_model_variables(&m->spec, &vars, &nvars, err, sizeof err))) goto out;
    int64_t *offsets = psc_xcalloc((size_t)nvars, sizeof *offsets);
    int64_t nparams = tower_layout(vars, nvars, offsets);
    free(offsets);
    int features = m->spec.input_rank == 3 ? m->spec.input_shape[0] * m->spec.input_shape[1] * m->spec.input_shape[2]
                                           : m->spec.input_shape[0];
    params = psc_xmalloc((size_t)nparams * sizeof(float) + 1);
    grads = psc_xmalloc((size_t)nparams * sizeof(float) + 1);
    x = psc_xmalloc((size_t)BATCH * (size_t)features * sizeof(float));
    y = psc_xmalloc(BATCH * sizeof(int32_t));
    tower_init_params(vars, nvars, 42, params);
    psc_rng_t r;
    psc_rng_seed(&r, 7);
    for (int64_t i = 0; i < (int64_t)BATCH * features; i++) x[i] = (float)psc_rng_uniform(&r);
    for (int i = 0; i < BATCH; i++) y[i] = (int32_t)psc_rng_below(&r, 10);
    if ((rc = ops->create(&m->spec, vars, nvars, BATCH, 0, &t, err, sizeof err))) goto out;

    float loss = 0;
    int correct = 0, steps = 0;
    double t0 = 0, elapsed = 0;
    for (int i = 0;; i++) {
        if (i == 2) t0 = psc_now(); /* after 2 warm-up steps */
        if ((rc = tower_set_params(t, params)) || (rc = tower_train_step(t, x, y, BATCH, (uint64_t)i, &loss, &correct)) ||
            (rc = tower_get_grads(t, grads))) {
            snprintf(err, sizeof err, "step %d: %s", i, psc_strerror(rc));
            goto out;
        }
        if (i >= 2) {
            steps = i - 1;
            elapsed = psc_now() - t0;
            if (steps >= 5 && elapsed >= secs) break;
        }
    }
    res->steps = steps;
    res->ms_per_step = 1e3 * elapsed / steps;
    res->examples_per_sec = (double)BATCH * steps / elapsed;
    res->loss = loss;
out:
    if (rc) fprintf(stderr, "bench_tower: %s backend, %s: %s\n", ops->name, m->name, err[0] ? err : psc_strerror(rc));
    tower_destroy(t);
    free(vars);
    free(params);
    free(grads);
    free(x);
    free(y);
    return rc;
}

int main(int argc, char **argv)
{
    double secs = 2.0;
    if (argc > 2 || (argc == 2 && (secs = atof(argv[1])) <= 0)) {
        fprintf(stderr, "usage: bench_tower [seconds-per-point]   (default 2)\n");
        return PSC_EXIT_USAGE;
    }
    static bench_model_t models[2];
    bench_model_t *cnn = &models[0], *mlp = &models[1];
    cnn->name = "cnn 28x28x1 c32-p-c64-p-d128-d10";
    cnn->layers[0] = conv("conv2d", 32, 3, PSC_ACT_RELU);
    cnn->layers[1] = pool("max_pooling2d");
    cnn->layers[2] = conv("conv2d_1", 64, 3, PSC_ACT_RELU);
    cnn->layers[3] = pool("max_pooling2d_1");
    cnn->layers[4] = flatten();
    cnn->layers[5] = dense("dense", 128, PSC_ACT_RELU);
    cnn->layers[6] = dense("dense_1", 10, PSC_ACT_NONE);
    model_finish(cnn, 3, 28, 28, 1, 7);
    mlp->name = "mlp 784-1024-1024-10 relu";
    mlp->layers[0] = dense("dense", 1024, PSC_ACT_RELU);
    mlp->layers[1] = dense("dense_1", 1024, PSC_ACT_RELU);
    mlp->layers[2] = dense("dense_2", 10, PSC_ACT_NONE);
    model_finish(mlp, 1, 784, 1, 1, 3);

    const tower_ops_t *cuda = tower_backend_find("cuda");
    int gpus = cuda ? cuda->device_count() : 0;
    printf("bench_tower: one training step (set_params + train_step + get_grads), batch %d, >= 5 steps and >= %g s "
           "per point\n",
           BATCH, secs);
    printf("%-36s %-5s %7s %10s %12s %9s\n", "model", "tower", "steps", "ms/step", "examples/s", "loss");
    int failed = 0;
    for (int i = 0; i < 2; i++) {
        bench_result_t cpu = {0}, gpu = {0};
        int cpu_ok = bench_run(&tower_cpu_ops, &models[i], secs, &cpu) == 0;
        if (cpu_ok)
            printf("%-36s %-5s %7d %10.2f %12.0f %9.4f\n", models[i].name, "cpu", cpu.steps, cpu.ms_per_step,
                   cpu.examples_per_sec, (double)cpu.loss);
        failed |= !cpu_ok;
        if (gpus > 0) {
            int gpu_ok = bench_run(cuda, &models[i], secs, &gpu) == 0;
            failed |= !gpu_ok;
            if (gpu_ok) {
                printf("%-36s %-5s %7d %10.2f %12.0f %9.4f", models[i].name, "cuda", gpu.steps, gpu.ms_per_step,
                       gpu.examples_per_sec, (double)gpu.loss);
                if (cpu_ok) printf("   GPU/CPU speed %.3gx", cpu.ms_per_step / gpu.ms_per_step);
                printf("\n");
            }
        }
    }
    if (gpus == 0) printf("cuda: not available (%s)\n", cuda ? "no device" : "not in this build");
    fflush(stdout);
    return failed ? 1 : 0;
}
