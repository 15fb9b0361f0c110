/* model_spec.h — what a parsed job spec's model is made of: its ordered
 * variables (global_step first, then each layer's kernel and bias in layer
 * order, with Keras names dense, dense_1, conv2d, ...) and each layer's output
 * shape. One walk over the layers (model_spec.c) gives both, so the PS, the
 * chief's initializer and the towers never disagree about a shape.
 * A recommendation model (loss sigmoid_cross_entropy) has its own walk
 * (model_spec_ctr.c): its variables are the dense layers' alone (its embedding
 * tables are the spec's "tables", not model variables), its outputs are flat
 * (1, 1, n) (an embedding layer F * dim, a wide layer 1, the interaction or
 * concat its join width) and psc_model_check enforces its structure rules
 * (docs/recommendation.md, "The job spec of a recommendation model").
 * Thread-safety: pure functions of their arguments.
 */
#ifndef PSC_MODEL_SPEC_H
#define PSC_MODEL_SPEC_H

#include "job_spec.h"

#include <stddef.h>
#include <stdint.h>

/* One model variable. */
#define PSC_MAX_RANK 4
typedef struct psc_var_desc {
    char name[96];     /* "global_step", "dense/kernel", "conv2d/bias", ... */
    int rank;          /* 0 for global_step */
    int64_t shape[PSC_MAX_RANK]; /* dense kernel (in, out); conv kernel (kh, kw, in_c, filters); bias (out) */
    int64_t numel;     /* product of shape (1 for rank 0) */
    int is_step;       /* global_step: an int64 counter, not trained */
    int layer;         /* index of the layer it belongs to, -1 for global_step */
} psc_var_desc_t;

/* The model's ordered variables (global_step first). *out is heap-allocated
 * (free()). Checks that the layers fit together (e.g. dense after an image needs a
 * flatten). Returns 0 or PSC_ECONFIG naming the layer. */
int psc_model_variables(const psc_job_spec_t *spec, psc_var_desc_t **out, int *nout, char *err, size_t errlen);

/* Checks that the layers fit model.input_shape and each other (the walk of
 * psc_model_variables, without allocating). 0 or PSC_ECONFIG naming the layer,
 * e.g. "model.layers[0] (conv2d): conv2d needs an image input: model.input_shape
 * [h, w, c], got [784]" (no "job spec: " prefix). */
int psc_model_check(const psc_job_spec_t *spec, char *err, size_t errlen);

/* Output shape (h, w, c) of each layer, for the towers: shapes[i] is the output of
 * layer i (rank-1 outputs have h = w = 1). `shapes` holds num_layers entries. */
int psc_model_shapes(const psc_job_spec_t *spec, int (*shapes)[3], char *err, size_t errlen);

#endif
