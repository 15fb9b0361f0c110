/* model_spec_ctr.c — the walk of a recommendation (CTR) model, loss
 * sigmoid_cross_entropy: its variables, its layers' output widths and its
 * structure rules (model_spec_internal.h; docs/recommendation.md, "The job
 * spec of a recommendation model"; worker/tower/tower_ctr.h computes what this describes).
 *
 * Design: such a model is not a chain. The dense layers before the join (the
 * interaction or concat layer) are the bottom MLP over the num_dense dense
 * features; the embedding layers, all before the join, each pool one row of
 * their table per feature (slot); the join combines the bottom output b (or
 * the dense features) with the S pooled rows; the dense layers after it (all
 * of them when there is no join) are the top MLP, whose last layer is the
 * 1-unit linear logit; wide layers, anywhere, add their dim-1 rows to the
 * logit. Widths:
 *   interaction  with dense features: b + P(P-1)/2, P = S + 1 (b, then the
 *                pairwise dots of (b, e_1..e_S)); without: S(S-1)/2
 *   concat       (b, or num_dense without a bottom MLP) + sum of the slots' dims
 * Variables are the dense layers' kernels (in, out) and biases after
 * global_step; the tables are not model variables (they live in the PS's
 * sparse tables). Output shapes are flat (1, 1, n): a dense layer n = units,
 * an embedding layer F * dim, a wide layer 1, the join its width.
 *
 * Invariants: every width fits an int32; a spec that passes has at least one
 * top dense layer and its last dense layer is (units 1, linear).
 */
#include "model_spec_internal.h"

#include "psc.h"

#include <stdio.h>

typedef struct ctr_walk {
    const psc_job_spec_t *spec;
    int join;         /* the interaction or concat layer; -1: none */
    int64_t slots;    /* S: the features of the embedding layers so far */
    int64_t concat;   /* the sum over those slots of their table's dim */
    int first_emb;    /* the first embedding layer; -1: none yet */
    int bottom;       /* the last dense layer before the join; -1: none */
    int64_t bottom_w; /* its units (num_dense before it) */
    int64_t top_w;    /* the top stream's width: the join's, or num_dense without a join */
    int top_dense;    /* dense layers after the join (all of them without one) */
    int last_dense;
    psc_var_desc_t *vars; /* room for 1 + 2 * num_layers, or NULL: only count */
    int nv;
} ctr_walk_t;

static const char *act_name(enum psc_activation a)
{
    switch (a) {
    case PSC_ACT_NONE: return "linear";
    case PSC_ACT_RELU: return "relu";
    case PSC_ACT_TANH: return "tanh";
    case PSC_ACT_SIGMOID: return "sigmoid";
    }
    return "unknown";
}

/* An embedding or wide layer's table, features and combiner; *width its output width. */
static int walk_lookup(const ctr_walk_t *st, int i, int64_t *width, char *err, size_t errlen)
{
    const psc_job_spec_t *spec = st->spec;
    const psc_layer_spec_t *L = &spec->layers[i];
    const char *nm = L->name, *tn = mspec_type_name(L->type);
    if (L->table < 0 || L->table >= spec->num_tables || !spec->tables)
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "model.layers[%d] (%s): table %d is not one of the spec's %d tables", i, nm, L->table,
                          spec->num_tables);
    if (L->num_features < 1 || L->num_features > PSC_MAX_FEATURES)
        return psc_seterr(err, errlen, PSC_ECONFIG, "model.layers[%d] (%s): expected 1 to %d features, got %d", i, nm,
                          PSC_MAX_FEATURES, L->num_features);
    for (int k = 0; k < L->num_features; k++)
        if (L->features[k] < 0 || L->features[k] >= spec->num_cat)
            return psc_seterr(err, errlen, PSC_ECONFIG,
                              "model.layers[%d] (%s): feature %d is not one of the data's %d categorical features", i,
                              nm, L->features[k], spec->num_cat);
    if ((unsigned)L->combiner > PSC_COMBINER_SQRTN)
        return psc_seterr(err, errlen, PSC_ECONFIG, "model.layers[%d] (%s): unknown combiner %d", i, nm,
                          (int)L->combiner);
    const psc_table_spec_t *T = &spec->tables[L->table];
    if (L->type == PSC_LAYER_WIDE) {
        if (T->dim != 1)
            return psc_seterr(err, errlen, PSC_ECONFIG,
                              "model.layers[%d] (%s): a wide layer needs a table of dim 1; table \"%s\" has dim %d", i,
                              nm, T->name, T->dim);
        *width = 1;
        return 0;
    }
    if (st->join < 0)
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "model.layers[%d] (%s): an %s layer needs an interaction or concat layer after it (the join "
                          "of its rows with the dense features)",
                          i, nm, tn);
    if (i > st->join)
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "model.layers[%d] (%s): an %s layer must come before the join, model.layers[%d] (%s)", i, nm,
                          tn, st->join, spec->layers[st->join].name);
    *width = (int64_t)L->num_features * T->dim;
    return 0;
}

/* A dense layer: bottom MLP before the join, top MLP after it. */
static int walk_dense(ctr_walk_t *st, int i, char *err, size_t errlen)
{
    const psc_job_spec_t *spec = st->spec;
    const psc_layer_spec_t *L = &spec->layers[i];
    const char *nm = L->name;
    if (L->units < 1)
        return psc_seterr(err, errlen, PSC_ECONFIG, "model.layers[%d] (%s): units must be >= 1, got %d", i, nm,
                          L->units);
    int bottom = st->join >= 0 && i < st->join;
    int64_t in = bottom ? st->bottom_w : st->top_w;
    if (bottom && spec->num_dense == 0)
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "model.layers[%d] (%s): a dense layer before the join, model.layers[%d] (%s), is the bottom "
                          "MLP over the dense features, and the data have none: put it after the join",
                          i, nm, st->join, spec->layers[st->join].name);
    if (in < 1)
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "model.layers[%d] (%s): no input: the data have no dense features and no interaction or "
                          "concat layer comes before it",
                          i, nm);
    int64_t kshape[2] = {in, L->units}, bshape[1] = {L->units};
    if (st->vars) mspec_set_var(&st->vars[st->nv], L, i, "kernel", 2, kshape);
    st->nv++;
    if (L->use_bias) {
        if (st->vars) mspec_set_var(&st->vars[st->nv], L, i, "bias", 1, bshape);
        st->nv++;
    }
    if (bottom) {
        st->bottom = i;
        st->bottom_w = L->units;
    } else {
        st->top_w = L->units;
        st->top_dense++;
    }
    st->last_dense = i;
    return 0;
}

/* An interaction's own rules: embedding layers of one dim D; with dense
 * features, a bottom MLP ending in D units. */
static int check_interaction(const ctr_walk_t *st, int i, char *err, size_t errlen)
{
    const psc_job_spec_t *spec = st->spec;
    const char *nm = spec->layers[i].name;
    if (st->first_emb < 0)
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "model.layers[%d] (%s): interaction needs at least one embedding layer before it", i, nm);
    const psc_layer_spec_t *E = &spec->layers[st->first_emb];
    int dim = spec->tables[E->table].dim;
    for (int k = st->first_emb + 1; k < i; k++) {
        const psc_layer_spec_t *K = &spec->layers[k];
        if (K->type != PSC_LAYER_EMBEDDING || spec->tables[K->table].dim == dim) continue;
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "model.layers[%d] (%s): interaction needs every embedding table of one dim: "
                          "model.layers[%d] (%s) uses table \"%s\" of dim %d, model.layers[%d] (%s) table \"%s\" of "
                          "dim %d",
                          i, nm, st->first_emb, E->name, spec->tables[E->table].name, dim, k, K->name,
                          spec->tables[K->table].name, spec->tables[K->table].dim);
    }
    if (spec->num_dense > 0 && st->bottom < 0)
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "model.layers[%d] (%s): the data have %d dense features: interaction needs a bottom MLP "
                          "(dense layers before it) ending in %d units, the embedding dim",
                          i, nm, spec->num_dense, dim);
    if (spec->num_dense > 0 && st->bottom_w != dim)
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "model.layers[%d] (%s): the bottom MLP ends in %lld units (model.layers[%d] (%s)); "
                          "interaction needs the embedding dim, %d",
                          i, nm, (long long)st->bottom_w, st->bottom, spec->layers[st->bottom].name, dim);
    return 0;
}

/* The join (interaction or concat): *width its output width. */
static int walk_join(ctr_walk_t *st, int i, int64_t *width, char *err, size_t errlen)
{
    const psc_job_spec_t *spec = st->spec;
    const psc_layer_spec_t *L = &spec->layers[i];
    const char *nm = L->name;
    int rc;
    if (i != st->join)
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "model.layers[%d] (%s): a second join (model.layers[%d] (%s) is the first): a model has at "
                          "most one interaction or concat layer",
                          i, nm, st->join, spec->layers[st->join].name);
    int64_t b = st->bottom >= 0 ? st->bottom_w : 0, S = st->slots, w;
    if (L->type == PSC_LAYER_INTERACTION) {
        if ((rc = check_interaction(st, i, err, errlen))) return rc;
        int64_t P = spec->num_dense > 0 ? S + 1 : S;
        w = (spec->num_dense > 0 ? b : 0) + P * (P - 1) / 2;
        if (w < 1)
            return psc_seterr(err, errlen, PSC_ECONFIG,
                              "model.layers[%d] (%s): one embedding slot and no dense features leave no pair to "
                              "interact",
                              i, nm);
    } else {
        w = (st->bottom >= 0 ? b : spec->num_dense) + st->concat;
        if (w < 1)
            return psc_seterr(err, errlen, PSC_ECONFIG,
                              "model.layers[%d] (%s): nothing to concatenate: no dense features and no embedding layer "
                              "before it",
                              i, nm);
    }
    if (w > INT32_MAX)
        return psc_seterr(err, errlen, PSC_ECONFIG, "model.layers[%d] (%s): output (1, 1, %lld) is too large", i, nm,
                          (long long)w);
    st->top_w = w;
    *width = w;
    return 0;
}

/* One layer; *width its output width. */
static int walk_ctr_layer(ctr_walk_t *st, int i, int64_t *width, char *err, size_t errlen)
{
    const psc_layer_spec_t *L = &st->spec->layers[i];
    int rc;
    switch (L->type) {
    case PSC_LAYER_DENSE:
        if ((rc = walk_dense(st, i, err, errlen))) return rc;
        *width = L->units;
        return 0;
    case PSC_LAYER_EMBEDDING:
        if ((rc = walk_lookup(st, i, width, err, errlen))) return rc;
        st->slots += L->num_features;
        st->concat += *width;
        if (st->first_emb < 0) st->first_emb = i;
        return 0;
    case PSC_LAYER_WIDE: return walk_lookup(st, i, width, err, errlen);
    case PSC_LAYER_INTERACTION:
    case PSC_LAYER_CONCAT: return walk_join(st, i, width, err, errlen);
    case PSC_LAYER_FLATTEN:
    case PSC_LAYER_CONV2D:
    case PSC_LAYER_MAX_POOL2D:
    case PSC_LAYER_DROPOUT:
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "model.layers[%d] (%s): %s is not a layer of a sigmoid_cross_entropy model (use dense, "
                          "embedding, wide, interaction, concat)",
                          i, L->name, mspec_type_name(L->type));
    }
    return psc_seterr(err, errlen, PSC_ECONFIG, "model.layers[%d] (%s): unknown layer type %d", i, L->name,
                      (int)L->type);
}

/* After the walk: a top MLP whose last layer is the 1-unit linear logit. */
static int check_logit(const ctr_walk_t *st, char *err, size_t errlen)
{
    const psc_job_spec_t *spec = st->spec;
    int last = spec->num_layers - 1;
    if (st->top_dense == 0 && st->join >= 0)
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "model.layers[%d] (%s): no dense layer after it: a sigmoid_cross_entropy model ends in a top "
                          "MLP whose last layer (1 unit, linear) gives the logit",
                          st->join, spec->layers[st->join].name);
    if (st->top_dense == 0)
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "model.layers[%d] (%s): the model has no dense layer: a sigmoid_cross_entropy model ends in "
                          "a top MLP whose last layer (1 unit, linear) gives the logit",
                          last, spec->layers[last].name);
    const psc_layer_spec_t *L = &spec->layers[st->last_dense];
    if (L->units != 1 || L->activation != PSC_ACT_NONE)
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "model.layers[%d] (%s): the last dense layer gives the logit: it needs units 1 and "
                          "activation linear, got units %d and activation %s",
                          st->last_dense, L->name, L->units, act_name(L->activation));
    return 0;
}

int mspec_ctr_walk(const psc_job_spec_t *spec, psc_var_desc_t *vars, int *nvars, int (*shapes)[3], char *err,
                   size_t errlen)
{
    if (spec->num_layers < 1 || !spec->layers)
        return psc_seterr(err, errlen, PSC_ECONFIG, "model.layers: the model has no layers");
    if (spec->num_dense < 0 || spec->num_cat < 0)
        return psc_seterr(err, errlen, PSC_ECONFIG, "data.features: %d dense values and %d categorical features",
                          spec->num_dense, spec->num_cat);
    ctr_walk_t st = {.spec = spec, .join = -1, .first_emb = -1, .bottom = -1, .last_dense = -1, .vars = vars};
    st.bottom_w = st.top_w = spec->num_dense;
    for (int i = 0; i < spec->num_layers && st.join < 0; i++)
        if (spec->layers[i].type == PSC_LAYER_INTERACTION || spec->layers[i].type == PSC_LAYER_CONCAT) st.join = i;
    if (st.join >= 0) st.top_w = 0; /* set by the join */
    if (vars) mspec_set_step(&vars[0]);
    st.nv = 1;

    for (int i = 0; i < spec->num_layers; i++) {
        int64_t width = 0;
        int rc = walk_ctr_layer(&st, i, &width, err, errlen);
        if (rc) return rc;
        if (width > INT32_MAX)
            return psc_seterr(err, errlen, PSC_ECONFIG, "model.layers[%d] (%s): output (1, 1, %lld) is too large", i,
                              spec->layers[i].name, (long long)width);
        if (shapes) {
            shapes[i][0] = shapes[i][1] = 1;
            shapes[i][2] = (int)width;
        }
    }
    int rc = check_logit(&st, err, errlen);
    if (rc) return rc;
    if (nvars) *nvars = st.nv;
    return 0;
}
