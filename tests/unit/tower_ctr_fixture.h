/* tower_ctr_fixture.h — what the CTR tower's tests share (test_tower_embed.c,
 * test_tower_cuda.c): recommendation models built by hand (the spec's layers and
 * tables, and the variables worked out here from the model's definition in
 * tower_ctr.h, independently of the tower), random parameters, and random
 * batches of bags with the combiners' weights. Header-only, for tests; include
 * after <cmocka.h>.
 */
#ifndef PSC_TOWER_CTR_FIXTURE_H
#define PSC_TOWER_CTR_FIXTURE_H

#include "job_spec.h"
#include "model_spec.h"
#include "psc.h"
#include "rng.h"
#include "tower.h"
#include "tower_ctr.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIX_MAX_LAYERS 12
#define FIX_MAX_TABLES 4
#define FIX_MAX_VARS (1 + 2 * FIX_MAX_LAYERS)

typedef struct ctr_fix {
    psc_layer_spec_t layers[FIX_MAX_LAYERS];
    psc_table_spec_t tables[FIX_MAX_TABLES];
    psc_job_spec_t spec;
    psc_var_desc_t vars[FIX_MAX_VARS];
    int nvars;
    int64_t offsets[FIX_MAX_VARS];
    int64_t nparams;
    float *params; /* (nparams) */
} ctr_fix_t;

/* A model with num_dense dense features and no layers yet. */
static inline ctr_fix_t *fix_new(int num_dense)
{
    ctr_fix_t *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->spec.loss_kind = PSC_LOSS_SIGMOID_XENT;
    snprintf(f->spec.loss, sizeof f->spec.loss, "sigmoid_cross_entropy");
    f->spec.num_dense = num_dense;
    f->spec.input_rank = 1;
    f->spec.input_shape[0] = num_dense;
    f->spec.layers = f->layers;
    f->spec.tables = f->tables;
    return f;
}

static inline void fix_free(ctr_fix_t *f)
{
    if (!f) return;
    free(f->params);
    free(f);
}

static inline int fix_table(ctr_fix_t *f, const char *name, int64_t rows, int dim)
{
    assert_true(f->spec.num_tables < FIX_MAX_TABLES);
    psc_table_spec_t *T = &f->tables[f->spec.num_tables];
    snprintf(T->name, sizeof T->name, "%s", name);
    T->rows = rows;
    T->dim = dim;
    return f->spec.num_tables++;
}

static inline psc_layer_spec_t *fix_layer(ctr_fix_t *f, enum psc_layer_type type, const char *name)
{
    assert_true(f->spec.num_layers < FIX_MAX_LAYERS);
    psc_layer_spec_t *L = &f->layers[f->spec.num_layers++];
    memset(L, 0, sizeof *L);
    L->type = type;
    snprintf(L->name, sizeof L->name, "%s", name);
    return L;
}

static inline void fix_dense(ctr_fix_t *f, const char *name, int units, enum psc_activation act)
{
    psc_layer_spec_t *L = fix_layer(f, PSC_LAYER_DENSE, name);
    L->units = units;
    L->activation = act;
    L->use_bias = 1;
}

/* An embedding or wide layer over table, its features cat_index first.. first + nfeat - 1. */
static inline void fix_bags(ctr_fix_t *f, enum psc_layer_type type, const char *name, int table, int first, int nfeat,
                            enum psc_combiner combiner)
{
    psc_layer_spec_t *L = fix_layer(f, type, name);
    L->table = table;
    L->num_features = nfeat;
    for (int k = 0; k < nfeat; k++) L->features[k] = first + k;
    L->combiner = combiner;
    L->hash_ids = 1;
    if (first + nfeat > f->spec.num_cat) f->spec.num_cat = first + nfeat;
}

static inline void fix_add_var(ctr_fix_t *f, int layer, const char *what, int rank, int64_t d0, int64_t d1)
{
    assert_true(f->nvars < FIX_MAX_VARS);
    psc_var_desc_t *v = &f->vars[f->nvars++];
    memset(v, 0, sizeof *v);
    snprintf(v->name, sizeof v->name, "%s/%s", f->layers[layer].name, what);
    v->rank = rank;
    v->shape[0] = d0;
    v->shape[1] = rank == 2 ? d1 : 0;
    v->numel = rank == 2 ? d0 * d1 : d0;
    v->layer = layer;
}

/* The variables, worked out from tower_ctr.h's definition: global_step, then
 * each dense layer's kernel (in, units) and bias; the bottom MLP reads the
 * dense features, the top MLP the join (or the dense features without one).
 * Then the slab layout and random parameters (Keras init, biases in +-0.1). */
static inline void fix_finish(ctr_fix_t *f, uint64_t seed)
{
    const psc_job_spec_t *s = &f->spec;
    int join = -1, S = 0, D = 0, cat = 0;
    for (int i = 0; i < s->num_layers; i++) {
        const psc_layer_spec_t *L = &s->layers[i];
        if (L->type == PSC_LAYER_INTERACTION || L->type == PSC_LAYER_CONCAT) join = i;
        if (L->type == PSC_LAYER_EMBEDDING) {
            S += L->num_features;
            D = s->tables[L->table].dim;
            cat += L->num_features * D;
        }
    }
    int b = s->num_dense; /* the bottom MLP's output width, once walked */
    for (int i = 0; i < s->num_layers && (join < 0 || i < join); i++)
        if (s->layers[i].type == PSC_LAYER_DENSE) b = s->layers[i].units;
    int zw = b + cat; /* concat */
    if (join >= 0 && s->layers[join].type == PSC_LAYER_INTERACTION) {
        int P = S + (s->num_dense > 0);
        zw = (s->num_dense > 0 ? D : 0) + P * (P - 1) / 2;
    }
    memset(f->vars, 0, sizeof f->vars);
    f->nvars = 1;
    snprintf(f->vars[0].name, sizeof f->vars[0].name, "global_step");
    f->vars[0].is_step = 1;
    f->vars[0].numel = 1;
    f->vars[0].layer = -1;
    int in = s->num_dense;
    for (int i = 0; i < s->num_layers; i++) {
        const psc_layer_spec_t *L = &s->layers[i];
        if (i == join) in = zw;
        if (L->type != PSC_LAYER_DENSE) continue;
        fix_add_var(f, i, "kernel", 2, in, L->units);
        if (L->use_bias) fix_add_var(f, i, "bias", 1, L->units, 0);
        in = L->units;
    }
    /* once model_spec.c knows these models, it must agree */
    psc_var_desc_t *mv = NULL;
    int nmv = 0;
    char err[256] = "";
    if (psc_model_variables(s, &mv, &nmv, err, sizeof err) == 0) {
        assert_int_equal(nmv, f->nvars);
        for (int k = 0; k < nmv; k++) {
            assert_int_equal(mv[k].rank, f->vars[k].rank);
            assert_int_equal(mv[k].numel, f->vars[k].numel);
            assert_int_equal(mv[k].layer, f->vars[k].layer);
            for (int d = 0; d < mv[k].rank; d++) assert_int_equal(mv[k].shape[d], f->vars[k].shape[d]);
        }
    } else {
        fprintf(stderr, "  (psc_model_variables refuses this model: %s)\n", err);
    }
    free(mv);
    f->nparams = tower_layout(f->vars, f->nvars, f->offsets);
    free(f->params); /* finished before */
    f->params = calloc((size_t)f->nparams + 1, sizeof(float));
    tower_init_params(f->vars, f->nvars, seed, f->params);
    psc_rng_t r;
    psc_rng_seed(&r, seed ^ 0xb1a5);
    for (int v = 1; v < f->nvars; v++)
        if (f->vars[v].rank == 1)
            for (int64_t k = 0; k < f->vars[v].numel; k++)
                f->params[f->offsets[v] + k] = (float)(0.2 * psc_rng_uniform(&r) - 0.1);
}

/* ---- batches ---- */

typedef struct fix_batch {
    tower_ctr_batch_t b;
    float *dense, *label, *w;
    int32_t *off, *idx;
    float *rows[FIX_MAX_TABLES];
    const float *crows[FIX_MAX_TABLES];
    int nrows[FIX_MAX_TABLES];
    int64_t max_rows[FIX_MAX_TABLES];
} fix_batch_t;

/* n random examples: dense features in [-1, 1), labels 0 / 1, each slot a bag
 * of min_bag..max_bag ids drawn from the first nrows[t] rows of its table (so
 * ids repeat across bags), with raw values 1 (valued = 0) or in [0.5, 2)
 * (LibSVM-like), the layer's combiner applied; rows in [-0.5, 0.5). */
static inline fix_batch_t *fix_batch_new(const ctr_fix_t *f, int n, const int *nrows, int min_bag, int max_bag,
                                         int valued, uint64_t seed)
{
    const psc_job_spec_t *s = &f->spec;
    fix_batch_t *B = calloc(1, sizeof *B);
    assert_non_null(B);
    psc_rng_t r;
    psc_rng_seed(&r, seed);
    int nslots = tower_ctr_slots(s);
    int64_t nbags = (int64_t)n * nslots, cap = nbags * max_bag + 1;
    B->dense = calloc((size_t)n * (size_t)PSC_MAX(s->num_dense, 1), sizeof(float));
    B->label = calloc((size_t)n, sizeof(float));
    B->off = calloc((size_t)nbags + 1, sizeof(int32_t));
    B->idx = calloc((size_t)cap, sizeof(int32_t));
    B->w = calloc((size_t)cap, sizeof(float));
    for (int64_t k = 0; k < (int64_t)n * s->num_dense; k++) B->dense[k] = (float)(2 * psc_rng_uniform(&r) - 1);
    for (int i = 0; i < n; i++) B->label[i] = (float)psc_rng_below(&r, 2);
    int32_t at = 0;
    for (int64_t bag = 0; bag < nbags; bag++) {
        int layer = -1;
        int t = tower_ctr_slot_table(s, (int)(bag % nslots), &layer);
        assert_true(t >= 0 && layer >= 0);
        int m = min_bag + (int)psc_rng_below(&r, (uint64_t)(max_bag - min_bag + 1));
        if (nrows[t] == 0) m = 0;
        double sum = 0, sum2 = 0;
        B->off[bag] = at;
        for (int k = 0; k < m; k++) {
            B->idx[at + k] = (int32_t)psc_rng_below(&r, (uint64_t)nrows[t]);
            B->w[at + k] = valued ? (float)(0.5 + 1.5 * psc_rng_uniform(&r)) : 1.0f;
            sum += B->w[at + k];
            sum2 += (double)B->w[at + k] * B->w[at + k];
        }
        for (int k = 0; k < m; k++) {
            if (s->layers[layer].combiner == PSC_COMBINER_MEAN) B->w[at + k] = (float)(B->w[at + k] / sum);
            if (s->layers[layer].combiner == PSC_COMBINER_SQRTN) B->w[at + k] = (float)(B->w[at + k] / sqrt(sum2));
        }
        at += m;
    }
    B->off[nbags] = at;
    for (int t = 0; t < s->num_tables; t++) {
        B->nrows[t] = nrows[t];
        B->max_rows[t] = nrows[t];
        B->rows[t] = calloc((size_t)nrows[t] * (size_t)s->tables[t].dim + 1, sizeof(float));
        for (int64_t k = 0; k < (int64_t)nrows[t] * s->tables[t].dim; k++)
            B->rows[t][k] = (float)(psc_rng_uniform(&r) - 0.5);
        B->crows[t] = B->rows[t];
    }
    B->b = (tower_ctr_batch_t){.n = n,
                               .dense = B->dense,
                               .label = B->label,
                               .nslots = nslots,
                               .off = B->off,
                               .idx = B->idx,
                               .w = B->w,
                               .rows = B->crows,
                               .nrows = B->nrows};
    return B;
}

static inline void fix_batch_free(fix_batch_t *B)
{
    if (!B) return;
    free(B->dense);
    free(B->label);
    free(B->off);
    free(B->idx);
    free(B->w);
    for (int t = 0; t < FIX_MAX_TABLES; t++) free(B->rows[t]);
    free(B);
}

/* A tower of f's model on backend and device for batches like B (n examples), f's parameters set. */
static inline tower_ctr_t *fix_tower_on(const ctr_fix_t *f, const char *backend, int device, const fix_batch_t *B,
                                        int max_batch)
{
    tower_ctr_t *t = NULL;
    char err[256] = "";
    int64_t nnz = B->off[(int64_t)B->b.n * B->b.nslots];
    if (tower_ctr_create(backend, &f->spec, f->vars, f->nvars, max_batch, nnz, B->max_rows, device, &t, err,
                         sizeof err))
        fail_msg("tower_ctr_create(%s, device %d): %s", backend, device, err);
    assert_int_equal(tower_ctr_set_params(t, f->params), 0);
    return t;
}

static inline tower_ctr_t *fix_tower(const ctr_fix_t *f, const char *backend, const fix_batch_t *B, int max_batch)
{
    return fix_tower_on(f, backend, 0, B, max_batch);
}

/* ---- the models the tests share ---- */

/* DLRM: 4 dense features -> bottom (6 tanh, 3 tanh); tables a (dim 3, two
 * slots) and b (dim 3, one slot); interaction (P = 4: 3 + 6 = 9 wide); top (5
 * tanh, 1); a wide layer over table w (dim 1, two slots). */
static inline ctr_fix_t *fix_dlrm(uint64_t seed)
{
    ctr_fix_t *f = fix_new(4);
    int a = fix_table(f, "emb_a", 1000, 3), b = fix_table(f, "emb_b", 50, 3), w = fix_table(f, "wide_w", 1000, 1);
    fix_dense(f, "dense", 6, PSC_ACT_TANH);
    fix_dense(f, "dense_1", 3, PSC_ACT_TANH);
    fix_bags(f, PSC_LAYER_EMBEDDING, "embedding", a, 0, 2, PSC_COMBINER_SUM);
    fix_bags(f, PSC_LAYER_EMBEDDING, "embedding_1", b, 2, 1, PSC_COMBINER_SUM);
    fix_layer(f, PSC_LAYER_INTERACTION, "interaction");
    fix_dense(f, "dense_2", 5, PSC_ACT_TANH);
    fix_dense(f, "dense_3", 1, PSC_ACT_NONE);
    fix_bags(f, PSC_LAYER_WIDE, "wide", w, 0, 2, PSC_COMBINER_SUM);
    fix_finish(f, seed);
    return f;
}

/* LibSVM-like: no dense features; tables x (dim 3: three slots, mean) and y
 * (dim 2: one slot, sqrtn); concat (3 * 3 + 2 = 11 wide); top (5 sigmoid, 1). */
static inline ctr_fix_t *fix_concat(uint64_t seed)
{
    ctr_fix_t *f = fix_new(0);
    int x = fix_table(f, "emb_x", 100, 3), y = fix_table(f, "emb_y", 100, 2);
    fix_bags(f, PSC_LAYER_EMBEDDING, "embedding", x, 0, 3, PSC_COMBINER_MEAN);
    fix_bags(f, PSC_LAYER_EMBEDDING, "embedding_1", y, 3, 1, PSC_COMBINER_SQRTN);
    fix_layer(f, PSC_LAYER_CONCAT, "concat");
    fix_dense(f, "dense", 5, PSC_ACT_SIGMOID);
    fix_dense(f, "dense_1", 1, PSC_ACT_NONE);
    fix_finish(f, seed);
    return f;
}

#endif
