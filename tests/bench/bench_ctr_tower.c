/* bench_ctr_tower — the compute of one worker step of a recommendation (CTR)
 * job, alone in one process without PS or RPC: the job spec's model, batch
 * (batch_size_per_replica) and training data, read by the worker's own input
 * pipeline (ctr_loader: shard 0 of 1, prefetch 2, the spec's shuffle) and run
 * through one "cpu" CTR tower, as worker/job/ctr_job.c does per step:
 *
 *   timed:     ctr_loader_next (waits only when the prefetch thread is behind)
 *              + tower_ctr_set_params + tower_ctr_train_step + tower_ctr_get_grads
 *   not timed: the rows of the batch's unique ids, filled with
 *              psc_table_row_init (what an untrained PS returns for them;
 *              a PS's rows are not free either: they are its lookup and
 *              the RPC, which this program leaves out); their time is printed
 *              on its own. Also not timed: a rebuild of the tower when a batch
 *              needs more rows or pairs than it holds (as ctr_job.c grows it).
 *
 * The dense parameters stay at their Keras initialization (tower_init_params;
 * no optimizer runs here) and the rows at their initial values, so every step
 * costs what a step of a real run costs. The spec's "epochs" is raised so the
 * data never runs out. 20 warm-up steps, then at least 20 steps and at least
 * the given seconds. tests/bench/bench_ctr.sh divides the examples/s that a
 * real worker logs by this program's number.
 * A measurement, not a test: it never fails on speed (exit 1 only when the
 * spec or the data cannot be loaded, the tower cannot be built or a step fails).
 *
 * usage: bench_ctr_tower JOB_SPEC [seconds] [blas_threads]   (default 3, 0)
 *        blas_threads: as the worker's --blas_threads (0: OpenBLAS's default)
 * prints: "bench_ctr_tower: FILE: P dense parameters, S slots, batch B on cpu
 *          (T BLAS threads): N steps, X ms/step, E examples/s (loader wait
 *          W ms/step); U unique rows/step, row init (not counted) Y ms/step"
 */
#include "ctr_loader.h"
#include "job_spec.h"
#include "model_spec.h"
#include "psc.h"
#include "table.h"
#include "tower.h"
#include "tower_ctr.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WARMUP_STEPS 20
#define MIN_STEPS 20

typedef struct bench {
    psc_job_spec_t spec;
    psc_var_desc_t *vars;
    int nvars;
    uint32_t *table_hash; /* per table */
    tower_ctr_t *tower;
    int64_t cap_nnz;
    int64_t *cap_rows; /* per table */
    int rebuilds;
} bench_t;

/* The tower, (re)built when b needs more than it holds (ctr_job.c's rule). */
static int ensure_tower(bench_t *x, const ctr_slot_batch_t *b, char *err, size_t errlen)
{
    int grow = x->tower == NULL || b->nnz > x->cap_nnz;
    for (int t = 0; t < x->spec.num_tables; t++) grow |= b->nuids[t] > x->cap_rows[t];
    if (!grow) return 0;
    x->cap_nnz = PSC_MAX(x->cap_nnz, b->nnz + b->nnz / 2 + 64);
    for (int t = 0; t < x->spec.num_tables; t++)
        x->cap_rows[t] = PSC_MAX(x->cap_rows[t], b->nuids[t] + b->nuids[t] / 2 + 64);
    tower_ctr_destroy(x->tower);
    x->tower = NULL;
    x->rebuilds++;
    return tower_ctr_create("cpu", &x->spec, x->vars, x->nvars, x->spec.batch_size, x->cap_nnz, x->cap_rows, 0,
                            &x->tower, err, errlen);
}

/* The rows of b's unique ids as an untrained PS returns them; returns how many. */
static int64_t init_rows(const bench_t *x, ctr_slot_batch_t *b)
{
    int64_t n = 0;
    for (int t = 0; t < x->spec.num_tables; t++) {
        const psc_table_spec_t *T = &x->spec.tables[t];
        ctr_slot_batch_reserve_rows(b, t, T->dim);
        for (int i = 0; i < b->nuids[t]; i++)
            psc_table_row_init(&T->init, x->spec.seed, x->table_hash[t], b->uids[t][i],
                               b->rows[t] + (size_t)i * (size_t)T->dim, T->dim);
        n += b->nuids[t];
    }
    return n;
}

int main(int argc, char **argv)
{
    double secs = 3.0;
    int blas = 0;
    if (argc < 2 || argc > 4 || (argc >= 3 && (secs = atof(argv[2])) <= 0) ||
        (argc == 4 && ((blas = atoi(argv[3])) < 0 || blas > 1024))) {
        fprintf(stderr, "usage: bench_ctr_tower JOB_SPEC [seconds] [blas_threads]   (default 3, 0)\n");
        return PSC_EXIT_USAGE;
    }
    char threads[16] = "default";
    if (blas > 0) {
        tower_cpu_set_threads(blas); /* as ctr_job_create does */
        snprintf(threads, sizeof threads, "%d", blas);
    }
    char err[512] = "";
    bench_t x = {0};
    ctr_loader_t *loader = NULL;
    float *params = NULL, *grads = NULL, *logits = NULL;
    int rc;
    if ((rc = psc_job_spec_load(argv[1], &x.spec, err, sizeof err))) {
        fprintf(stderr, "bench_ctr_tower: %s\n", err);
        return 1;
    }
    if (x.spec.loss_kind != PSC_LOSS_SIGMOID_XENT) {
        fprintf(stderr,
                "bench_ctr_tower: %s: not a recommendation model (loss sigmoid_cross_entropy); "
                "use bench_step_tower\n",
                argv[1]);
        psc_job_spec_deinit(&x.spec);
        return 1;
    }
    x.spec.epochs = 1000000; /* never run out of data */
    if ((rc = psc_model_variables(&x.spec, &x.vars, &x.nvars, err, sizeof err))) goto out;
    int T = x.spec.num_tables, B = x.spec.batch_size;
    x.table_hash = psc_xcalloc((size_t)PSC_MAX(T, 1), sizeof *x.table_hash);
    x.cap_rows = psc_xcalloc((size_t)PSC_MAX(T, 1), sizeof *x.cap_rows);
    for (int t = 0; t < T; t++) x.table_hash[t] = psc_table_hash(x.spec.tables[t].name);
    int64_t *offsets = psc_xcalloc((size_t)x.nvars, sizeof *offsets);
    int64_t nparams = tower_layout(x.vars, x.nvars, offsets);
    free(offsets);
    params = psc_xmalloc((size_t)nparams * sizeof(float) + 1);
    grads = psc_xmalloc((size_t)nparams * sizeof(float) + 1);
    tower_init_params(x.vars, x.nvars, x.spec.seed, params);
    logits = psc_xmalloc((size_t)B * sizeof *logits); /* the worker keeps them for its AUC */
    if ((rc = ctr_loader_create(&x.spec, 0, 0, 1, B, x.spec.seed, x.spec.shuffle, 2, &loader, err, sizeof err)))
        goto out;

    int64_t steps = 0, examples = 0, uniq = 0;
    double t_step = 0, t_init = 0, t_wait = 0;
    for (int i = 0;; i++) {
        ctr_slot_batch_t *b;
        double t0 = psc_now();
        if ((rc = ctr_loader_next(loader, &b, err, sizeof err))) {
            if (rc == 1) rc = psc_seterr(err, sizeof err, PSC_EINVAL, "the training data ended (no examples?)");
            goto out;
        }
        double t1 = psc_now();
        int64_t u = init_rows(&x, b);
        double t2 = psc_now();
        if ((rc = ensure_tower(&x, b, err, sizeof err))) {
            ctr_loader_release(loader, b);
            goto out;
        }
        tower_ctr_batch_t tb = ctr_slot_batch_view(b);
        float loss;
        double t3 = psc_now();
        if ((rc = tower_ctr_set_params(x.tower, params)) || (rc = tower_ctr_train_step(x.tower, &tb, &loss, logits)) ||
            (rc = tower_ctr_get_grads(x.tower, grads, b->row_grads))) {
            snprintf(err, sizeof err, "step %d: %s", i, psc_strerror(rc));
            ctr_loader_release(loader, b);
            goto out;
        }
        double t4 = psc_now();
        int n = b->raw.n;
        ctr_loader_release(loader, b);
        if (i < WARMUP_STEPS) continue;
        steps++;
        examples += n;
        uniq += u;
        t_step += (t1 - t0) + (t4 - t3);
        t_init += t2 - t1;
        t_wait += t1 - t0;
        if (steps >= MIN_STEPS && t_step >= secs) break;
    }
    printf("bench_ctr_tower: %s: %lld dense parameters, %d slots, batch %d on cpu (%s BLAS threads): %lld steps, "
           "%.3f ms/step, %.0f examples/s (loader wait %.3f ms/step); %.0f unique rows/step, row init (not counted) "
           "%.3f ms/step\n",
           argv[1], (long long)nparams, tower_ctr_slots(&x.spec), B, threads, (long long)steps,
           1e3 * t_step / (double)steps, (double)examples / t_step, 1e3 * t_wait / (double)steps,
           (double)uniq / (double)steps, 1e3 * t_init / (double)steps);
    if (x.rebuilds > 1) fprintf(stderr, "bench_ctr_tower: the tower was rebuilt %d times\n", x.rebuilds);
out:
    if (rc) fprintf(stderr, "bench_ctr_tower: %s: %s\n", argv[1], err[0] ? err : psc_strerror(rc));
    ctr_loader_destroy(loader);
    tower_ctr_destroy(x.tower);
    psc_job_spec_deinit(&x.spec);
    free(x.vars);
    free(x.table_hash);
    free(x.cap_rows);
    free(params);
    free(grads);
    free(logits);
    return rc ? 1 : 0;
}
