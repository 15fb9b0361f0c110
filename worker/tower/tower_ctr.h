/* tower_ctr.h — one replica of a recommendation (CTR) model (loss
 * sigmoid_cross_entropy) on one device: DLRM's and Wide & Deep's walk over the
 * same backend table as the dense models (tower_walk.h), written once for the
 * CPU and the CUDA backends.
 *
 *   dense (n, num_dense) --bottom MLP (the dense layers before the join)--> b
 *   each embedding slot s: e_s = sum_k w_k rows[idx_k]  (the pooled bag)
 *   join: interaction  z = [b, <v_i, v_j> for i < j over v = (b, e_1, .., e_S)]
 *                          (no b when the model has no dense features)
 *         concat       z = [b (or the dense features when there is no bottom
 *                          MLP), e_1, .., e_S]
 *   logit = top MLP(z) (the last dense layer: 1 unit, linear)
 *           + sum over the wide layers' slots of their pooled 1-wide rows
 *   loss  = mean over the batch of sigmoid cross-entropy(logit, label)
 *
 * Slots: the features of the embedding and wide layers, in layer order and,
 * within a layer, in its "features" order. Each slot reads rows of its layer's
 * table. The rows a step uses come from the PS as one array per table: the
 * batch's unique ids of that table, in the caller's order; idx points into it.
 *
 * Parameters (the dense layers' kernels and biases, tower_layout's slab) and
 * their gradients cross as host slabs, as for tower.h; the rows' gradients as
 * one host array per table, parallel to the rows. A tower is used by one
 * thread at a time.
 */
#ifndef PSC_TOWER_CTR_H
#define PSC_TOWER_CTR_H

#include "job_spec.h"
#include "model_spec.h"

#include <stddef.h>
#include <stdint.h>

typedef struct tower_ctr tower_ctr_t;

/* A step's inputs, all host memory. */
typedef struct tower_ctr_batch {
    int n;                /* examples */
    const float *dense;   /* (n, spec->num_dense) */
    const float *label;   /* (n) 0 or 1; may be NULL for tower_ctr_predict */
    int nslots;           /* tower_ctr_slots(spec) */
    const int32_t *off;   /* (n * nslots + 1): the bag of slot s of example i is [off[i*nslots+s], off[i*nslots+s+1]) */
    const int32_t *idx;   /* (off[n*nslots]) row index into rows[table of the slot] */
    const float *w;       /* (off[n*nslots]) weights, the combiner applied (sum: w; mean: w / sum w;
                             sqrtn: w / sqrt(sum w^2)) */
    const float *const *rows; /* per table t (spec->num_tables): (nrows[t], dim_t); NULL for a table no slot uses */
    const int *nrows;
} tower_ctr_batch_t;

/* Slots of spec's model, and slot s's table (spec->tables index) and the
 * layer it belongs to. */
int tower_ctr_slots(const psc_job_spec_t *spec);
int tower_ctr_slot_table(const psc_job_spec_t *spec, int s, int *layer);

/* A tower on backend "cpu" or "cuda" (tower_backend_find) and `device`, for
 * batches of up to max_batch examples, max_nnz pairs and max_rows[t] rows of
 * table t. vars: psc_model_variables(spec). 0 or an error naming the problem. */
int tower_ctr_create(const char *backend, const psc_job_spec_t *spec, const psc_var_desc_t *vars, int nvars,
                     int max_batch, int64_t max_nnz, const int64_t *max_rows, int device, tower_ctr_t **out,
                     char *err, size_t errlen);
void tower_ctr_destroy(tower_ctr_t *t); /* NULL ok */
int tower_ctr_set_params(tower_ctr_t *t, const float *params);
/* Forward and backward: *loss the mean loss; logits (n, may be NULL) the
 * logits. The gradients then wait for tower_ctr_get_grads. */
int tower_ctr_train_step(tower_ctr_t *t, const tower_ctr_batch_t *b, float *loss, float *logits);
/* The gradients of the mean loss of the last step: grads the dense slab;
 * row_grads[t] (nrows[t], dim_t) those of the rows of table t (NULL entries
 * for tables no slot uses). */
int tower_ctr_get_grads(tower_ctr_t *t, float *grads, float *const *row_grads);
/* Forward only: logits (n). */
int tower_ctr_predict(tower_ctr_t *t, const tower_ctr_batch_t *b, float *logits);

#endif
