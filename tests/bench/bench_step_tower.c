/* bench_step_tower — the compute of one worker step of a job, alone in one
 * process without RPC: the model, batch (batch_size_per_replica) and towers
 * (--devices as the worker's; default: every visible GPU, else one CPU tower)
 * of a job spec, timing what a worker does per step besides the push-pull:
 * tower_group_set_params + tower_group_train_step + tower_group_get_grads. Random inputs and
 * Keras-initialized parameters; 3 warm-up steps, then at least 20 steps and at
 * least the given seconds. tests/bench/bench_step.sh divides the examples/s
 * that a real worker logs by this program's number.
 * A measurement, not a test: it never fails on speed (exit 1 only when the
 * spec cannot be loaded, a tower cannot be built or a step fails).
 *
 * usage: bench_step_tower JOB_SPEC [seconds] [devices] [threads]
 *        (default 3, auto, the CPU tower's default; threads: tower_cpu_set_threads,
 *        the CPU tower's OpenBLAS and oneDNN threads, as the worker's --blas_threads)
 * prints: "bench_step_tower: FILE: <model> batch B on <devices>: S steps,
 *          X ms/step, E examples/s"
 */
#include "job_spec.h"
#include "model_spec.h"
#include "psc.h"
#include "rng.h"
#include "tower.h"
#include "tower_group.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    double secs = 3.0;
    int threads = 0;
    if (argc < 2 || argc > 5 || (argc >= 3 && (secs = atof(argv[2])) <= 0) ||
        (argc == 5 && (threads = atoi(argv[4])) < 1)) {
        fprintf(stderr, "usage: bench_step_tower JOB_SPEC [seconds] [devices] [threads]   (default 3, auto, auto)\n");
        return PSC_EXIT_USAGE;
    }
    const char *devices = argc >= 4 && strcmp(argv[3], "auto") != 0 ? argv[3] : NULL;
    if (threads) tower_cpu_set_threads(threads);
    char err[512] = "";
    psc_job_spec_t spec;
    psc_var_desc_t *vars = NULL;
    int nvars = 0, rc;
    tower_group_t *ts = NULL;
    float *params = NULL, *grads = NULL, *x = NULL;
    int32_t *y = NULL;
    if ((rc = psc_job_spec_load(argv[1], &spec, err, sizeof err))) {
        fprintf(stderr, "bench_step_tower: %s\n", err);
        return 1;
    }
    if ((rc = psc_model_variables(&spec, &vars, &nvars, err, sizeof err))) goto out;
    int64_t *offsets = psc_xcalloc((size_t)nvars, sizeof *offsets);
    int64_t nparams = tower_layout(vars, nvars, offsets);
    free(offsets);
    int batch = spec.batch_size;
    int features = spec.input_rank == 3 ? spec.input_shape[0] * spec.input_shape[1] * spec.input_shape[2]
                                        : spec.input_shape[0];
    params = psc_xmalloc((size_t)nparams * sizeof(float) + 1);
    grads = psc_xmalloc((size_t)nparams * sizeof(float) + 1);
    x = psc_xmalloc((size_t)batch * (size_t)features * sizeof(float));
    y = psc_xmalloc((size_t)batch * sizeof(int32_t));
    tower_init_params(vars, nvars, spec.seed, params);
    psc_rng_t r;
    psc_rng_seed(&r, 7);
    for (int64_t i = 0; i < (int64_t)batch * features; i++) x[i] = (float)psc_rng_uniform(&r);
    for (int i = 0; i < batch; i++) y[i] = (int32_t)psc_rng_below(&r, 10);
    if ((rc = tower_group_create(devices, &spec, vars, nvars, batch, &ts, err, sizeof err))) goto out;

    float loss = 0;
    int correct = 0, steps = 0;
    double t0 = 0, elapsed = 0;
    for (int i = 0;; i++) {
        if (i == 3) t0 = psc_now(); /* after 3 warm-up steps */
        if ((rc = tower_group_set_params(ts, params)) ||
            (rc = tower_group_train_step(ts, x, y, batch, (uint64_t)i, &loss, &correct)) ||
            (rc = tower_group_get_grads(ts, grads))) {
            snprintf(err, sizeof err, "step %d: %s", i, psc_strerror(rc));
            goto out;
        }
        if (i >= 3) {
            steps = i - 2;
            elapsed = psc_now() - t0;
            if (steps >= 20 && elapsed >= secs) break;
        }
    }
    printf("bench_step_tower: %s: %lld parameters, batch %d on %s: %d steps, %.3f ms/step, %.0f examples/s\n",
           argv[1], (long long)nparams, batch, tower_group_describe(ts), steps, 1e3 * elapsed / steps,
           (double)batch * steps / elapsed);
out:
    if (rc) fprintf(stderr, "bench_step_tower: %s: %s\n", argv[1], err[0] ? err : psc_strerror(rc));
    tower_group_destroy(ts);
    psc_job_spec_deinit(&spec);
    free(vars);
    free(params);
    free(grads);
    free(x);
    free(y);
    return rc ? 1 : 0;
}
