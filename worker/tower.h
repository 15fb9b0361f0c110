/* tower.h — one replica of the model on one device, behind a table of operations
 * chosen at run time (CPU: OpenBLAS + C loops; CUDA: cuBLAS + kernels).
 *
 * Parameters and gradients cross this interface as one host "slab": the model's
 * trainable variables (global_step excluded) in model order, each packed
 * row-major, at the offsets given by tower_layout(). A step is:
 *   tower_set_params(t, params); tower_train_step(t, x, y, n, ...); tower_get_grads(t, grads);
 * grads are the gradients of the MEAN loss over the n examples. The caller owns
 * the slabs. A tower is used by one thread at a time.
 */
#ifndef PSC_TOWER_H
#define PSC_TOWER_H

#include "job_spec.h"

#include <stddef.h>
#include <stdint.h>

typedef struct tower tower_t;

typedef struct tower_ops {
    const char *name; /* "cpu", "cuda" */
    /* Builds a tower for spec's model for batches of up to max_batch examples on
     * `device` (ignored by the CPU backend). vars are the model's variables as
     * psc_model_variables returns them (global_step included, skipped). */
    int (*create)(const psc_job_spec_t *spec, const psc_var_desc_t *vars, int nvars, int max_batch, int device,
                  tower_t **out, char *err, size_t errlen);
    void (*destroy)(tower_t *t);
    int (*set_params)(tower_t *t, const float *params);
    /* Forward + backward on n <= max_batch examples; x (n, features) and y (n)
     * on the host. loss: mean cross-entropy; correct: argmax hits. dropout_seed
     * seeds this step's dropout masks. */
    int (*train_step)(tower_t *t, const float *x, const int32_t *y, int n, uint64_t dropout_seed, float *loss,
                      int *correct);
    int (*get_grads)(tower_t *t, float *grads);
    /* Inference (no dropout) on n <= max_batch examples: adds the loss sum and the
     * number of correct predictions. */
    int (*evaluate)(tower_t *t, const float *x, const int32_t *y, int n, double *loss_sum, int *correct);
} tower_ops_t;

struct tower {
    const tower_ops_t *ops;
    int max_batch;
};

extern const tower_ops_t tower_cpu_ops;

/* The slab layout: offsets[i] (elements) of variable i in the slab, 0 for
 * global_step; returns the total number of elements. offsets has nvars entries. */
int64_t tower_layout(const psc_var_desc_t *vars, int nvars, int64_t *offsets);

/* Keras initialization into a params slab: glorot_uniform kernels
 * (limit sqrt(6/(fan_in+fan_out)), conv fans include the receptive field), zero
 * biases; variable i draws from its own stream seeded by (seed, i). */
void tower_init_params(const psc_var_desc_t *vars, int nvars, uint64_t seed, float *params);

static inline int tower_set_params(tower_t *t, const float *p) { return t->ops->set_params(t, p); }
static inline int tower_train_step(tower_t *t, const float *x, const int32_t *y, int n, uint64_t seed, float *loss,
                                   int *correct)
{
    return t->ops->train_step(t, x, y, n, seed, loss, correct);
}
static inline int tower_get_grads(tower_t *t, float *g) { return t->ops->get_grads(t, g); }
static inline int tower_evaluate(tower_t *t, const float *x, const int32_t *y, int n, double *loss_sum,
                                 int *correct)
{
    return t->ops->evaluate(t, x, y, n, loss_sum, correct);
}
static inline void tower_destroy(tower_t *t)
{
    if (t) t->ops->destroy(t);
}

#endif
