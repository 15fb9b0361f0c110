/* model_spec_internal.h — what model_spec.c (the softmax models' walk and the
 * entry points) and model_spec_ctr.c (the recommendation models' walk) share:
 * the layer types' names and filling in a variable. Header-only helpers, so
 * neither file calls the other's functions but model_spec.c ->
 * model_spec_ctr.c. Thread-safety: pure functions.
 */
#ifndef PSC_MODEL_SPEC_INTERNAL_H
#define PSC_MODEL_SPEC_INTERNAL_H

#include "model_spec.h"

#include <stdio.h>
#include <string.h>

/* The spec's name of a layer type ("dense", "embedding", ...). */
static inline const char *mspec_type_name(enum psc_layer_type t)
{
    switch (t) {
    case PSC_LAYER_DENSE: return "dense";
    case PSC_LAYER_FLATTEN: return "flatten";
    case PSC_LAYER_CONV2D: return "conv2d";
    case PSC_LAYER_MAX_POOL2D: return "max_pool2d";
    case PSC_LAYER_DROPOUT: return "dropout";
    case PSC_LAYER_EMBEDDING: return "embedding";
    case PSC_LAYER_INTERACTION: return "interaction";
    case PSC_LAYER_CONCAT: return "concat";
    case PSC_LAYER_WIDE: return "wide";
    }
    return "unknown";
}

/* *v = the variable "<layer name>/<what>" of model.layers[layer]. */
static inline void mspec_set_var(psc_var_desc_t *v, const psc_layer_spec_t *L, int layer, const char *what, int rank,
                                 const int64_t *shape)
{
    memset(v, 0, sizeof *v);
    snprintf(v->name, sizeof v->name, "%s/%s", L->name, what);
    v->rank = rank;
    v->numel = 1;
    for (int d = 0; d < rank; d++) {
        v->shape[d] = shape[d];
        v->numel *= shape[d];
    }
    v->layer = layer;
}

/* *v = global_step, every model's first variable. */
static inline void mspec_set_step(psc_var_desc_t *v)
{
    memset(v, 0, sizeof *v);
    snprintf(v->name, sizeof v->name, "global_step");
    v->rank = 0;
    v->numel = 1;
    v->is_step = 1;
    v->layer = -1;
}

/* The walk of a model with loss sigmoid_cross_entropy (model_spec_ctr.c):
 * vars (room for 1 + 2 * num_layers, global_step included) and shapes may each
 * be NULL; *nvars (may be NULL) gets the count. 0 or PSC_ECONFIG naming the layer. */
int mspec_ctr_walk(const psc_job_spec_t *spec, psc_var_desc_t *vars, int *nvars, int (*shapes)[3], char *err,
                   size_t errlen);

#endif
