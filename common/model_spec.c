/* model_spec.c — a parsed job spec's variables and per-layer output shapes (see
 * model_spec.h).
 *
 * Design: one walk over the layers carries the current activation shape and
 * whether it is flat. Each layer checks its input, computes its output and, for
 * dense and conv2d, appends its variables. psc_model_variables and
 * psc_model_shapes share that walk, so the PS, the chief's initializer and the
 * towers can never disagree about a shape.
 *
 * Shape convention (the towers are the only users of psc_model_shapes):
 *   - an image activation is (h, w, c), stored NHWC per example;
 *   - a flat activation of n features is (1, 1, n): h = w = 1, c = n. A rank-1
 *     model.input_shape (n) is read from input_shape[0] alone and becomes
 *     (1, 1, n), whatever input_shape[1..2] hold.
 * Either way the number of features per example is h * w * c and the memory
 * layout is the same, which is why flatten moves no data. Whether an activation
 * is flat is decided by the layer types (the input's rank, flatten, dense), not by
 * h = w = 1: an image of (1, 1, c) still needs a flatten before a dense layer.
 *
 * Output sizes follow TensorFlow: valid: floor((in - k) / s) + 1 (at least 1);
 * same: ceil(in / s), padded with pad_total = max((out - 1) * s + k - in, 0),
 * pad_top = pad_total / 2 (the extra row/column goes at the bottom/right).
 *
 * Invariants: variables are global_step, then each layer's kernel and bias in
 * layer order; every activation has at most INT32_MAX features per example.
 */
#include "model_spec.h"

#include "model_spec_internal.h"
#include "psc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *layer_type_name(enum psc_layer_type t) { return mspec_type_name(t); }

/* "(28, 28, 1)" for an image, "(784)" for a flat activation. */
static const char *show_shape(int flat, int h, int w, int c, char *buf, size_t len)
{
    if (flat)
        snprintf(buf, len, "(%d)", c);
    else
        snprintf(buf, len, "(%d, %d, %d)", h, w, c);
    return buf;
}

/* Output size of one spatial dimension; 0 when a valid window does not fit. */
static int out_size(int in, int k, int s, enum psc_padding pad)
{
    if (pad == PSC_PAD_SAME) return (int)(((int64_t)in + s - 1) / s);
    if (in < k) return 0;
    return (in - k) / s + 1;
}

/* The walk's state: the current activation and the variables so far. */
typedef struct walk {
    int h, w, c, flat;
    int flat_since;        /* the layer that made the activation flat; -1: a rank-1 input */
    psc_var_desc_t *vars;  /* room for 1 + 2 * num_layers, or NULL: only count */
    int nv;
    char a[64];            /* show_shape's buffer for messages */
} walk_t;

/* Appends the variable L->name/what (only counts it when st->vars is NULL). */
static void add_var(walk_t *st, const psc_layer_spec_t *L, int layer, const char *what, int rank, const int64_t *shape)
{
    if (st->vars) mspec_set_var(&st->vars[st->nv], L, layer, what, rank, shape);
    st->nv++;
}

/* model.input_shape into the walk's first activation. */
static int walk_input(const psc_job_spec_t *spec, walk_t *st, char *err, size_t errlen)
{
    st->flat_since = -1;
    if (spec->input_rank == 1) {
        st->h = st->w = 1;
        st->c = spec->input_shape[0];
        st->flat = 1;
        if (st->c < 1)
            return psc_seterr(err, errlen, PSC_ECONFIG, "model.input_shape: expected (n) with n >= 1, got (%d)", st->c);
    } else if (spec->input_rank == 3) {
        int h = st->h = spec->input_shape[0], w = st->w = spec->input_shape[1], c = st->c = spec->input_shape[2];
        st->flat = 0;
        if (h < 1 || w < 1 || c < 1)
            return psc_seterr(err, errlen, PSC_ECONFIG, "model.input_shape: expected positive sizes, got (%d, %d, %d)",
                              h, w, c);
        if ((int64_t)h * w * c > INT32_MAX)
            return psc_seterr(err, errlen, PSC_ECONFIG, "model.input_shape: (%d, %d, %d) is too large", h, w, c);
    } else {
        return psc_seterr(err, errlen, PSC_ECONFIG, "model.input_shape: expected rank 1 or 3, got rank %d",
                          spec->input_rank);
    }
    if (spec->num_layers < 1 || !spec->layers)
        return psc_seterr(err, errlen, PSC_ECONFIG, "model.layers: the model has no layers");
    return 0;
}

/* A conv2d or max_pool2d layer (model.layers[i]) on an image activation. */
static int walk_spatial(const psc_job_spec_t *spec, int i, walk_t *st, char *err, size_t errlen)
{
    const psc_layer_spec_t *L = &spec->layers[i];
    const char *nm = L->name;
    int conv = L->type == PSC_LAYER_CONV2D;
    const int *k = conv ? L->kernel_size : L->pool_size;
    const char *kname = conv ? "kernel_size" : "pool_size";
    if (st->flat && st->flat_since < 0)
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "model.layers[%d] (%s): %s needs an image input: model.input_shape [h, w, c], got "
                          "[%d]",
                          i, nm, layer_type_name(L->type), st->c);
    if (st->flat)
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "model.layers[%d] (%s): input is %s, flat since model.layers[%d] (%s); %s needs an "
                          "image input (h, w, c): put it before any flatten or dense layer",
                          i, nm, show_shape(st->flat, st->h, st->w, st->c, st->a, sizeof st->a), st->flat_since,
                          spec->layers[st->flat_since].name, layer_type_name(L->type));
    if (k[0] < 1 || k[1] < 1)
        return psc_seterr(err, errlen, PSC_ECONFIG, "model.layers[%d] (%s): %s must be positive, got (%d, %d)", i, nm,
                          kname, k[0], k[1]);
    if (L->strides[0] < 1 || L->strides[1] < 1)
        return psc_seterr(err, errlen, PSC_ECONFIG, "model.layers[%d] (%s): strides must be positive, got (%d, %d)",
                          i, nm, L->strides[0], L->strides[1]);
    if (L->padding != PSC_PAD_VALID && L->padding != PSC_PAD_SAME)
        return psc_seterr(err, errlen, PSC_ECONFIG, "model.layers[%d] (%s): unknown padding %d", i, nm,
                          (int)L->padding);
    if (conv && L->filters < 1)
        return psc_seterr(err, errlen, PSC_ECONFIG, "model.layers[%d] (%s): filters must be >= 1, got %d", i, nm,
                          L->filters);
    int oh = out_size(st->h, k[0], L->strides[0], L->padding);
    int ow = out_size(st->w, k[1], L->strides[1], L->padding);
    if (oh < 1 || ow < 1)
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "model.layers[%d] (%s): %s (%d, %d) does not fit input %s with padding \"valid\"; "
                          "use a smaller window or padding \"same\"",
                          i, nm, kname, k[0], k[1], show_shape(st->flat, st->h, st->w, st->c, st->a, sizeof st->a));
    if (conv) {
        int64_t kshape[4] = {k[0], k[1], st->c, L->filters}, bshape[1] = {L->filters};
        add_var(st, L, i, "kernel", 4, kshape);
        if (L->use_bias) add_var(st, L, i, "bias", 1, bshape);
        st->c = L->filters;
    }
    st->h = oh;
    st->w = ow;
    return 0;
}

/* One layer, model.layers[i], on the walk's activation. */
static int walk_layer(const psc_job_spec_t *spec, int i, walk_t *st, char *err, size_t errlen)
{
    const psc_layer_spec_t *L = &spec->layers[i];
    const char *nm = L->name;
    switch (L->type) {
    case PSC_LAYER_DENSE: {
        if (!st->flat)
            return psc_seterr(err, errlen, PSC_ECONFIG, "model.layers[%d] (%s): input is %s; add a flatten layer before it",
                              i, nm, show_shape(st->flat, st->h, st->w, st->c, st->a, sizeof st->a));
        if (L->units < 1)
            return psc_seterr(err, errlen, PSC_ECONFIG, "model.layers[%d] (%s): units must be >= 1, got %d", i, nm,
                              L->units);
        int64_t kshape[2] = {st->c, L->units}, bshape[1] = {L->units};
        add_var(st, L, i, "kernel", 2, kshape);
        if (L->use_bias) add_var(st, L, i, "bias", 1, bshape);
        st->c = L->units;
        return 0;
    }
    case PSC_LAYER_FLATTEN:
        /* (h, w, c) -> (1, 1, h*w*c): the same memory, read as one vector. */
        st->c = st->h * st->w * st->c; /* fits: every activation was checked against INT32_MAX */
        st->h = st->w = 1;
        if (!st->flat) st->flat_since = i;
        st->flat = 1;
        return 0;
    case PSC_LAYER_CONV2D:
    case PSC_LAYER_MAX_POOL2D: return walk_spatial(spec, i, st, err, errlen);
    case PSC_LAYER_DROPOUT:
        if (!(L->rate >= 0.0f && L->rate < 1.0f))
            return psc_seterr(err, errlen, PSC_ECONFIG, "model.layers[%d] (%s): rate must be in [0, 1), got %g", i, nm,
                              (double)L->rate);
        return 0;
    case PSC_LAYER_EMBEDDING:
    case PSC_LAYER_INTERACTION:
    case PSC_LAYER_CONCAT:
    case PSC_LAYER_WIDE:
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "model.layers[%d] (%s): %s is a layer of recommendation models: it needs model.loss "
                          "sigmoid_cross_entropy (with data.format criteo, libsvm or tfrecord)",
                          i, nm, layer_type_name(L->type));
    default:
        return psc_seterr(err, errlen, PSC_ECONFIG, "model.layers[%d] (%s): unknown layer type %d", i, nm,
                          (int)L->type);
    }
}

/* The walk. vars (room for 1 + 2 * num_layers) and shapes may each be NULL. */
static int model_walk(const psc_job_spec_t *spec, psc_var_desc_t *vars, int *nvars, int (*shapes)[3], char *err,
                      size_t errlen)
{
    if (spec->loss_kind == PSC_LOSS_SIGMOID_XENT) return mspec_ctr_walk(spec, vars, nvars, shapes, err, errlen);
    walk_t st = {.vars = vars};
    int rc = walk_input(spec, &st, err, errlen);
    if (rc) return rc;
    if (vars) mspec_set_step(&vars[0]);
    st.nv = 1;

    for (int i = 0; i < spec->num_layers; i++) {
        if ((rc = walk_layer(spec, i, &st, err, errlen))) return rc;
        if ((int64_t)st.h * st.w * st.c > INT32_MAX)
            return psc_seterr(err, errlen, PSC_ECONFIG, "model.layers[%d] (%s): output (%d, %d, %d) is too large", i,
                              spec->layers[i].name, st.h, st.w, st.c);
        if (shapes) {
            shapes[i][0] = st.h;
            shapes[i][1] = st.w;
            shapes[i][2] = st.c;
        }
    }

    int last = spec->num_layers - 1;
    if (!st.flat)
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "model.layers[%d] (%s): the model's output is %s; the last layer must give a flat vector of "
                          "class logits (add flatten and dense layers)",
                          last, spec->layers[last].name, show_shape(st.flat, st.h, st.w, st.c, st.a, sizeof st.a));
    if (st.c < 2)
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "model.layers[%d] (%s): the model's output has %d unit; sparse softmax cross-entropy needs "
                          "at least 2 classes",
                          last, spec->layers[last].name, st.c);
    if (nvars) *nvars = st.nv;
    return 0;
}

int psc_model_variables(const psc_job_spec_t *spec, psc_var_desc_t **out, int *nout, char *err, size_t errlen)
{
    *out = NULL;
    *nout = 0;
    int cap = 1 + 2 * PSC_MAX(spec->num_layers, 0);
    psc_var_desc_t *vars = psc_xcalloc((size_t)cap, sizeof *vars);
    int n = 0;
    int rc = model_walk(spec, vars, &n, NULL, err, errlen);
    if (rc) {
        free(vars);
        return rc;
    }
    *out = vars;
    *nout = n;
    return 0;
}

int psc_model_check(const psc_job_spec_t *spec, char *err, size_t errlen)
{
    return model_walk(spec, NULL, NULL, NULL, err, errlen);
}

int psc_model_shapes(const psc_job_spec_t *spec, int (*shapes)[3], char *err, size_t errlen)
{
    return model_walk(spec, NULL, NULL, shapes, err, errlen);
}
