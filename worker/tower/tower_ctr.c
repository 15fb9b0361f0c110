/* tower_ctr.c — the recommendation (CTR) tower of tower_ctr.h: DLRM's and Wide &
 * Deep's walk, written once over the backend's kernel table (tower_walk.h), so
 * the CPU and the CUDA backends run the same sequence.
 *
 * Design, as tower_walk.c: create() checks the model and its variables, then
 * carves named views from ONE device allocation (parameters, gradients, the
 * batch, every used table's rows and row gradients, each dense layer's output,
 * the join's buffers, the backward ping-pong, the per-row loss) and ONE host
 * staging allocation (the batch and the rows go to the device through it, the
 * row gradients come back through it). A step is
 *
 *   batch, rows -> device                 checked on the host first (never a bad index on the device)
 *   b      = bottom MLP(dense)            (the dense features when there is no bottom MLP)
 *   z      = join(b, e_1 .. e_S)          bag_fwd writes each pooled row where the join reads it
 *   logits = top MLP(z) + wbuf @ ones     wbuf (n, W): the wide slots' pooled values, summed by a GEMM
 *   loss   = sigmoid_xent(logits, label)  per row in double; dlogits = (sigmoid - y) / n
 *   backward: the wide rows (dlogits @ ones^T broadcast into wbuf), the top MLP,
 *             the join, the embedding rows, the bottom MLP
 *   per-row losses, logits -> host; sync; the loss summed in row order (double)
 *
 * and allocates nothing. The join's buffers (B = max_batch):
 *   interaction: v (B, P, D) = [b, e_1, .., e_S] (b only with dense features),
 *                z (B, zw) = [b, the P (P - 1) / 2 dots], dv (B, P, D) its adjoint;
 *   concat:      z (B, zw) = [b, e_1, .., e_S], the bags written in place.
 * The gradient of b is the pass-through columns' plus (interaction) dv's first vector.
 *
 * Invariants: each train_step overwrites every parameter gradient and, for the
 * rows of its batch (nrows[t] per table), every row gradient; get_grads reads
 * the last successful train_step's (predict leaves them alone). Every op selects
 * the device first and syncs whatever it queued before it returns (ctr_finish).
 */
#include "tower_ctr.h"

#include "log.h"
#include "psc.h"
#include "tower.h"
#include "tower_walk.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum ctr_join { CTR_JOIN_NONE = 0, CTR_JOIN_INTERACTION, CTR_JOIN_CONCAT };

/* One dense layer of the bottom or the top MLP. */
typedef struct ctr_dense {
    int layer; /* spec index */
    int in, units, use_bias;
    enum psc_activation act;
    float *w, *dw;  /* (in, units) device views into the slabs */
    float *b, *db;  /* (units), NULL without bias */
    float *out;     /* (B, units) post-activation */
    const float *x; /* (n, in), set by each forward */
} ctr_dense_t;

/* One embedding or wide layer: its slots slot0 .. slot0 + nbags - 1 read one table. */
typedef struct ctr_bags {
    int layer, table, dim;
    int slot0, nbags;
    int col; /* where its first pooled row goes: a column of v (interaction), z (concat) or wbuf (wide) */
} ctr_bags_t;

struct tower_ctr {
    const tower_backend_ops_t *be;
    tower_dev_t *dev;
    int device;
    int max_batch;
    int64_t max_nnz;
    int num_tables;
    int *dim;          /* (num_tables) */
    int64_t *max_rows; /* (num_tables) 0 for a table no slot uses */
    int *used;         /* (num_tables) 1 when a slot reads the table */
    int *slot_table;   /* (nslots) */
    int num_dense, nslots;
    enum ctr_join join;
    int join_layer;                /* spec index, -1 without a join */
    ctr_dense_t *bottom, *top;     /* (nbottom), (ntop) in layer order */
    int nbottom, ntop;
    ctr_bags_t *emb, *wide;        /* (nemb), (nwide) */
    int nemb, nwide, emb_slots, wslots;
    int bw;     /* width of b: the bottom MLP's output, or num_dense; 0 without dense features */
    int P, D;   /* interaction: vectors per example and their width */
    int zw;     /* the join's output width */
    int max_cols, max_width;
    int64_t nparams;
    /* the device slab and its views */
    void *dmem;
    float *params, *grads; /* (nparams) at tower_layout's offsets */
    float *dense;          /* (B, num_dense) */
    float *label;          /* (B) */
    int32_t *off;          /* (B * nslots + 1) */
    int32_t *idx;          /* (max_nnz) */
    float *w;              /* (max_nnz) */
    float **rows, **drows; /* per used table (max_rows, dim) */
    float *v, *dv;         /* interaction: (B, P, D) */
    float *z;              /* join: (B, zw) */
    float *wbuf;           /* wide: (B, wslots): pooled values, then their gradients */
    float *ones;           /* wide: (wslots) all 1 */
    float *logits;         /* (B): the top MLP's last output */
    float *dbuf[2];        /* 2 x (B, max_width): backward ping-pong; dlogits in dbuf[0] */
    double *row_loss;      /* (B) */
    /* the host staging slab and its views */
    void *hmem;
    float *hdense, *hlabel, *hw, *hlogits, *hones;
    int32_t *hoff, *hidx;
    float **hrows;     /* per used table (max_rows, dim): rows up, row gradients down */
    double *hrow_loss; /* (B) */
    int *grad_nrows;   /* (num_tables) the last train_step's nrows */
    int have_grads;
};

#define TRY(call)                     \
    do {                              \
        int ctr_rc_ = (call);         \
        if (ctr_rc_) return ctr_rc_;  \
    } while (0)

/* ---- slots ---- */

static int is_bag_layer(enum psc_layer_type type) { return type == PSC_LAYER_EMBEDDING || type == PSC_LAYER_WIDE; }

int tower_ctr_slots(const psc_job_spec_t *spec)
{
    int n = 0;
    for (int i = 0; i < spec->num_layers; i++)
        if (is_bag_layer(spec->layers[i].type)) n += PSC_MAX(spec->layers[i].num_features, 0);
    return n;
}

int tower_ctr_slot_table(const psc_job_spec_t *spec, int s, int *layer)
{
    for (int i = 0; i < spec->num_layers && s >= 0; i++) {
        const psc_layer_spec_t *L = &spec->layers[i];
        if (!is_bag_layer(L->type)) continue;
        if (s < L->num_features) {
            if (layer) *layer = i;
            return L->table;
        }
        s -= PSC_MAX(L->num_features, 0);
    }
    return PSC_EINVAL;
}

/* ---- the model ---- */

static const char *layer_kind(enum psc_layer_type type)
{
    static const char *const names[] = {"dense",   "flatten",     "conv2d", "max_pool2d", "dropout",
                                        "embedding", "interaction", "concat", "wide"};
    return (unsigned)type < PSC_ARRAY_LEN(names) ? names[type] : "unknown";
}

/* An embedding or wide layer, model.layers[i]: its table and slots. */
static int add_bags(tower_ctr_t *t, const psc_job_spec_t *spec, int i, int *slots, char *err, size_t errlen)
{
    const psc_layer_spec_t *L = &spec->layers[i];
    const char *kind = layer_kind(L->type);
    if (L->table < 0 || L->table >= spec->num_tables)
        return psc_seterr(err, errlen, PSC_ECONFIG, "model.layers[%d] (%s): table %d: the job has %d tables", i,
                          L->name, L->table, spec->num_tables);
    if (L->num_features < 1 || L->num_features > PSC_MAX_FEATURES)
        return psc_seterr(err, errlen, PSC_ECONFIG, "model.layers[%d] (%s): %d features: a layer of type %s takes 1..%d",
                          i, L->name, L->num_features, kind, PSC_MAX_FEATURES);
    const psc_table_spec_t *T = &spec->tables[L->table];
    if (T->dim < 1)
        return psc_seterr(err, errlen, PSC_ECONFIG, "model.layers[%d] (%s): table %s has dim %d", i, L->name, T->name,
                          T->dim);
    if (L->type == PSC_LAYER_WIDE && T->dim != 1)
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "model.layers[%d] (%s): a wide layer's table holds one weight per id: table %s has dim %d, "
                          "want 1",
                          i, L->name, T->name, T->dim);
    ctr_bags_t *g = L->type == PSC_LAYER_WIDE ? &t->wide[t->nwide++] : &t->emb[t->nemb++];
    *g = (ctr_bags_t){.layer = i, .table = L->table, .dim = T->dim, .slot0 = *slots, .nbags = L->num_features};
    for (int k = 0; k < L->num_features; k++) t->slot_table[*slots + k] = L->table;
    *slots += L->num_features;
    t->used[L->table] = 1;
    if (L->type == PSC_LAYER_WIDE) {
        g->col = t->wslots;
        t->wslots += g->nbags;
    } else {
        t->emb_slots += g->nbags;
    }
    return 0;
}

/* The layers' roles: dense before the join = bottom MLP, after it (or all,
 * without a join) = top MLP; embedding and wide layers; one join. */
static int ctr_layers(tower_ctr_t *t, const psc_job_spec_t *spec, char *err, size_t errlen)
{
    int nl = spec->num_layers, slots = 0;
    t->join_layer = -1;
    for (int i = 0; i < nl; i++) {
        enum psc_layer_type type = spec->layers[i].type;
        if (type != PSC_LAYER_INTERACTION && type != PSC_LAYER_CONCAT) continue;
        if (t->join_layer >= 0)
            return psc_seterr(err, errlen, PSC_ECONFIG,
                              "model.layers[%d] (%s): a second join after model.layers[%d] (%s): a model has one "
                              "interaction or concat layer",
                              i, spec->layers[i].name, t->join_layer, spec->layers[t->join_layer].name);
        t->join_layer = i;
        t->join = type == PSC_LAYER_INTERACTION ? CTR_JOIN_INTERACTION : CTR_JOIN_CONCAT;
    }
    t->nslots = tower_ctr_slots(spec);
    t->slot_table = psc_xcalloc((size_t)PSC_MAX(t->nslots, 1), sizeof *t->slot_table);
    for (int i = 0; i < nl; i++) {
        const psc_layer_spec_t *L = &spec->layers[i];
        switch (L->type) {
        case PSC_LAYER_DENSE: {
            int top = t->join_layer < 0 || i > t->join_layer;
            if (L->units < 1)
                return psc_seterr(err, errlen, PSC_ECONFIG, "model.layers[%d] (%s): units must be >= 1, got %d", i,
                                  L->name, L->units);
            if (!top && t->num_dense == 0)
                return psc_seterr(err, errlen, PSC_ECONFIG,
                                  "model.layers[%d] (%s): a dense layer before the join is the bottom MLP over the "
                                  "dense features, and the data has none",
                                  i, L->name);
            ctr_dense_t *D = top ? &t->top[t->ntop++] : &t->bottom[t->nbottom++];
            *D = (ctr_dense_t){.layer = i, .units = L->units, .use_bias = L->use_bias, .act = L->activation};
            t->max_cols = PSC_MAX(t->max_cols, L->units);
            break;
        }
        case PSC_LAYER_EMBEDDING:
        case PSC_LAYER_WIDE:
            TRY(add_bags(t, spec, i, &slots, err, errlen));
            break;
        case PSC_LAYER_INTERACTION:
        case PSC_LAYER_CONCAT:
            break;
        default:
            return psc_seterr(err, errlen, PSC_ECONFIG,
                              "model.layers[%d] (%s): %s is not a layer of recommendation models (dense, embedding, "
                              "interaction, concat, wide)",
                              i, L->name, layer_kind(L->type));
        }
    }
    return 0;
}

/* What the layers must make together: one logit, a join fed by embeddings. */
static int ctr_check_shape(const tower_ctr_t *t, const psc_job_spec_t *spec, char *err, size_t errlen)
{
    const char *jname = t->join_layer >= 0 ? spec->layers[t->join_layer].name : "";
    if (t->nemb && !t->join)
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "model.layers[%d] (%s): embedding layers feed an interaction or concat layer, and the model "
                          "has none",
                          t->emb[0].layer, spec->layers[t->emb[0].layer].name);
    if (t->join && !t->nemb)
        return psc_seterr(err, errlen, PSC_ECONFIG, "model.layers[%d] (%s): the join has no embedding layer to read",
                          t->join_layer, jname);
    if (t->join && !t->ntop)
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "model.layers[%d] (%s): the join needs dense layers after it (the top MLP, its last layer "
                          "1 unit, linear)",
                          t->join_layer, jname);
    if (!t->ntop)
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "model.layers: no dense layer: a recommendation model ends in a top MLP whose last layer "
                          "(1 unit, linear) gives the logit");
    if (!t->join && t->ntop && t->num_dense == 0)
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "model.layers[%d] (%s): the dense layers have no input: no dense features and no "
                          "interaction or concat layer",
                          t->top[0].layer, spec->layers[t->top[0].layer].name);
    const ctr_dense_t *last = &t->top[t->ntop - 1];
    if (last->units != 1 || last->act != PSC_ACT_NONE)
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "model.layers[%d] (%s): the last dense layer gives the logit: 1 unit, linear activation "
                          "(got %d units%s)",
                          last->layer, spec->layers[last->layer].name, last->units,
                          last->act != PSC_ACT_NONE ? ", an activation" : "");
    return 0;
}

/* The join's geometry (P, D, zw, the bags' columns) and every dense layer's input width. */
static int ctr_geometry(tower_ctr_t *t, const psc_job_spec_t *spec, char *err, size_t errlen)
{
    TRY(ctr_check_shape(t, spec, err, errlen));
    t->bw = t->nbottom ? t->bottom[t->nbottom - 1].units : t->num_dense;
    int64_t zw = 0;
    if (t->join == CTR_JOIN_INTERACTION) {
        const char *jname = spec->layers[t->join_layer].name;
        t->D = t->emb[0].dim;
        for (int e = 1; e < t->nemb; e++)
            if (t->emb[e].dim != t->D)
                return psc_seterr(err, errlen, PSC_ECONFIG,
                                  "model.layers[%d] (%s): the interaction's vectors must be as wide as each other: "
                                  "table %s has dim %d, table %s has dim %d",
                                  t->join_layer, jname, spec->tables[t->emb[0].table].name, t->D,
                                  spec->tables[t->emb[e].table].name, t->emb[e].dim);
        if (t->bw && t->bw != t->D)
            return psc_seterr(err, errlen, PSC_ECONFIG,
                              "model.layers[%d] (%s): the interaction's vectors must be as wide as each other: %s "
                              "has %d, the embeddings %d",
                              t->join_layer, jname, t->nbottom ? "the bottom MLP's output" : "the dense features",
                              t->bw, t->D);
        int hb = t->bw > 0, slot = 0;
        t->P = t->emb_slots + hb;
        for (int e = 0; e < t->nemb; e++) {
            t->emb[e].col = (hb + slot) * t->D;
            slot += t->emb[e].nbags;
        }
        zw = (hb ? t->D : 0) + (int64_t)t->P * (t->P - 1) / 2;
        if (zw == 0)
            return psc_seterr(err, errlen, PSC_ECONFIG,
                              "model.layers[%d] (%s): one vector has no pairs: an interaction without dense "
                              "features needs two embedded features or more",
                              t->join_layer, jname);
    } else if (t->join == CTR_JOIN_CONCAT) {
        zw = t->bw;
        for (int e = 0; e < t->nemb; e++) {
            t->emb[e].col = (int)PSC_MIN(zw, (int64_t)INT32_MAX);
            zw += (int64_t)t->emb[e].nbags * t->emb[e].dim;
        }
    }
    if (zw > INT32_MAX / 2 || (int64_t)t->P * t->D > INT32_MAX / 2)
        return psc_seterr(err, errlen, PSC_ECONFIG, "model.layers[%d]: the join's output is too wide (%lld)",
                          t->join_layer, (long long)zw);
    t->zw = (int)zw;
    int64_t width = PSC_MAX(PSC_MAX(t->zw, t->num_dense), 1);
    for (int k = 0; k < t->nbottom; k++) {
        t->bottom[k].in = k ? t->bottom[k - 1].units : t->num_dense;
        width = PSC_MAX(width, t->bottom[k].units);
    }
    for (int k = 0; k < t->ntop; k++) {
        t->top[k].in = k ? t->top[k - 1].units : (t->join ? t->zw : t->num_dense);
        width = PSC_MAX(width, t->top[k].units);
    }
    t->max_width = (int)width;
    return 0;
}

/* The variables must be global_step, then each dense layer's kernel (in,
 * units) and bias (units) in layer order. */
static int ctr_check_vars(const tower_ctr_t *t, const psc_job_spec_t *spec, const psc_var_desc_t *vars, int nvars,
                          char *err, size_t errlen)
{
    int want = 1;
    for (int k = 0; k < t->nbottom + t->ntop; k++) {
        const ctr_dense_t *D = k < t->nbottom ? &t->bottom[k] : &t->top[k - t->nbottom];
        want += 1 + (D->use_bias != 0);
    }
    if (nvars != want || !vars || !vars[0].is_step)
        return psc_seterr(err, errlen, PSC_EMISMATCH,
                          "ctr tower: %d variables given, the model has %d (global_step, then each dense layer's "
                          "kernel and bias)",
                          nvars, want);
    int v = 1;
    for (int k = 0; k < t->nbottom + t->ntop; k++) {
        const ctr_dense_t *D = k < t->nbottom ? &t->bottom[k] : &t->top[k - t->nbottom];
        for (int part = 0; part < 1 + (D->use_bias != 0); part++, v++) {
            const psc_var_desc_t *x = &vars[v];
            int rank = part ? 1 : 2;
            int ok = !x->is_step && x->rank == rank && x->layer == D->layer &&
                     (part ? x->shape[0] == D->units : x->shape[0] == D->in && x->shape[1] == D->units) &&
                     x->numel == (part ? 1 : (int64_t)D->in) * D->units;
            char want_shape[48];
            if (part)
                snprintf(want_shape, sizeof want_shape, "bias (%d)", D->units);
            else
                snprintf(want_shape, sizeof want_shape, "kernel (%d, %d)", D->in, D->units);
            if (!ok)
                return psc_seterr(err, errlen, PSC_EMISMATCH, "ctr tower: variable %d (%s) is not model.layers[%d] (%s)'s %s",
                                  v, x->name, D->layer, spec->layers[D->layer].name, want_shape);
        }
    }
    return 0;
}

/* ---- the slabs ---- */

typedef struct carver {
    char *base;
    size_t off;
} carver_t;

static void *carve(carver_t *c, int64_t count, size_t size)
{
    size_t off = (c->off + 255) & ~(size_t)255;
    c->off = off + (size_t)count * size;
    return c->base ? c->base + off : NULL;
}

/* Lays the device and host slabs out (a sizing pass when the bases are NULL). */
static void ctr_carve(tower_ctr_t *t, char *dbase, char *hbase, size_t *dbytes, size_t *hbytes)
{
    int64_t B = t->max_batch;
    size_t f = sizeof(float), i32 = sizeof(int32_t);
    carver_t d = {dbase, 0}, h = {hbase, 0};
    t->params = carve(&d, t->nparams, f);
    t->grads = carve(&d, t->nparams, f);
    t->dense = carve(&d, B * t->num_dense, f);
    t->label = carve(&d, B, f);
    t->off = carve(&d, B * t->nslots + 1, i32);
    t->idx = carve(&d, t->max_nnz, i32);
    t->w = carve(&d, t->max_nnz, f);
    for (int tb = 0; tb < t->num_tables; tb++) {
        int64_t n = t->used[tb] ? t->max_rows[tb] * t->dim[tb] : 0;
        t->rows[tb] = t->used[tb] ? carve(&d, n, f) : NULL;
        t->drows[tb] = t->used[tb] ? carve(&d, n, f) : NULL;
        t->hrows[tb] = t->used[tb] ? carve(&h, n, f) : NULL;
    }
    for (int k = 0; k < t->nbottom; k++) t->bottom[k].out = carve(&d, B * t->bottom[k].units, f);
    for (int k = 0; k < t->ntop; k++) t->top[k].out = carve(&d, B * t->top[k].units, f);
    t->v = t->join == CTR_JOIN_INTERACTION ? carve(&d, B * t->P * t->D, f) : NULL;
    t->dv = t->join == CTR_JOIN_INTERACTION ? carve(&d, B * t->P * t->D, f) : NULL;
    t->z = t->join ? carve(&d, B * t->zw, f) : NULL;
    t->wbuf = t->nwide ? carve(&d, B * t->wslots, f) : NULL;
    t->ones = t->nwide ? carve(&d, t->wslots, f) : NULL;
    t->logits = t->top[t->ntop - 1].out;
    t->dbuf[0] = carve(&d, B * t->max_width, f);
    t->dbuf[1] = carve(&d, B * t->max_width, f);
    t->row_loss = carve(&d, B, sizeof(double));
    t->hdense = carve(&h, B * t->num_dense, f);
    t->hlabel = carve(&h, B, f);
    t->hoff = carve(&h, B * t->nslots + 1, i32);
    t->hidx = carve(&h, t->max_nnz, i32);
    t->hw = carve(&h, t->max_nnz, f);
    t->hlogits = carve(&h, B, f);
    t->hones = carve(&h, PSC_MAX(t->wslots, 1), f);
    t->hrow_loss = carve(&h, B, sizeof(double));
    *dbytes = d.off;
    *hbytes = h.off;
}

/* The device, its two slabs, the variables' views, the constant ones. */
static int ctr_build(tower_ctr_t *t, const psc_var_desc_t *vars, int nvars, char *err, size_t errlen)
{
    int64_t *offsets = psc_xcalloc((size_t)nvars, sizeof *offsets);
    t->nparams = tower_layout(vars, nvars, offsets);
    int v = 1;
    size_t dbytes, hbytes;
    ctr_carve(t, NULL, NULL, &dbytes, &hbytes);
    int rc = t->be->open(t->device, t->max_cols, &t->dev, err, errlen);
    if (rc) goto done;
    if ((rc = t->be->alloc(t->dev, dbytes, &t->dmem)) || (rc = t->be->host_alloc(t->dev, hbytes, &t->hmem))) {
        psc_seterr(err, errlen, rc, "ctr tower (%s) on device %d: cannot allocate its %zu + %zu bytes: %s",
                   t->be->name, t->device, dbytes, hbytes, psc_strerror(rc));
        goto done;
    }
    ctr_carve(t, t->dmem, t->hmem, &dbytes, &hbytes);
    for (int k = 0; k < t->nbottom + t->ntop; k++) {
        ctr_dense_t *D = k < t->nbottom ? &t->bottom[k] : &t->top[k - t->nbottom];
        D->w = t->params + offsets[v];
        D->dw = t->grads + offsets[v++];
        if (D->use_bias) {
            D->b = t->params + offsets[v];
            D->db = t->grads + offsets[v++];
        }
    }
    if (t->nwide) {
        for (int k = 0; k < t->wslots; k++) t->hones[k] = 1.0f;
        rc = t->be->upload(t->dev, t->ones, t->hones, (size_t)t->wslots * sizeof(float));
        int sync = t->be->sync(t->dev);
        if ((rc = rc ? rc : sync))
            psc_seterr(err, errlen, rc, "ctr tower (%s) on device %d: cannot upload: %s", t->be->name, t->device,
                       psc_strerror(rc));
    }
done:
    free(offsets);
    return rc;
}

int tower_ctr_create(const char *backend, const psc_job_spec_t *spec, const psc_var_desc_t *vars, int nvars,
                     int max_batch, int64_t max_nnz, const int64_t *max_rows, int device, tower_ctr_t **out,
                     char *err, size_t errlen)
{
    *out = NULL;
    const tower_ops_t *ops = backend ? tower_backend_find(backend) : NULL;
    if (!ops || !ops->backend)
        return psc_seterr(err, errlen, PSC_ENOTFOUND, "ctr tower: no backend \"%s\" in this build",
                          backend ? backend : "(null)");
    if (spec->loss_kind != PSC_LOSS_SIGMOID_XENT)
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "ctr tower: the model's loss is not sigmoid_cross_entropy (a recommendation model's)");
    /* The job spec's rules for these models first (model_spec.c: the one
     * definition the PS and the chief use too); then the tower's own reading
     * of the layers, which must give the variables it was handed. */
    psc_var_desc_t *want = NULL;
    int nwant = 0, rc = psc_model_variables(spec, &want, &nwant, err, errlen);
    free(want);
    if (rc) return rc;
    if (max_batch < 1 || max_nnz < 0 || max_nnz > INT32_MAX || spec->num_dense < 0 ||
        (int64_t)max_batch * PSC_MAX(tower_ctr_slots(spec), 1) >= INT32_MAX)
        return psc_seterr(err, errlen, PSC_EINVAL, "ctr tower: max_batch %d, max_nnz %lld, num_dense %d: out of range",
                          max_batch, (long long)max_nnz, spec->num_dense);
    if (spec->num_tables < 0 || (spec->num_tables > 0 && (!spec->tables || !max_rows)))
        return psc_seterr(err, errlen, PSC_EINVAL, "ctr tower: %d tables without their specs or max_rows",
                          spec->num_tables);
    tower_ctr_t *t = psc_xcalloc(1, sizeof *t);
    int nl = PSC_MAX(spec->num_layers, 1), nt = PSC_MAX(spec->num_tables, 1);
    t->be = ops->backend;
    t->device = device;
    t->max_batch = max_batch;
    t->max_nnz = max_nnz;
    t->num_dense = spec->num_dense;
    t->num_tables = spec->num_tables;
    t->dim = psc_xcalloc((size_t)nt, sizeof *t->dim);
    t->max_rows = psc_xcalloc((size_t)nt, sizeof *t->max_rows);
    t->used = psc_xcalloc((size_t)nt, sizeof *t->used);
    t->grad_nrows = psc_xcalloc((size_t)nt, sizeof *t->grad_nrows);
    t->rows = psc_xcalloc((size_t)nt, sizeof *t->rows);
    t->drows = psc_xcalloc((size_t)nt, sizeof *t->drows);
    t->hrows = psc_xcalloc((size_t)nt, sizeof *t->hrows);
    t->bottom = psc_xcalloc((size_t)nl, sizeof *t->bottom);
    t->top = psc_xcalloc((size_t)nl, sizeof *t->top);
    t->emb = psc_xcalloc((size_t)nl, sizeof *t->emb);
    t->wide = psc_xcalloc((size_t)nl, sizeof *t->wide);
    if ((rc = ctr_layers(t, spec, err, errlen)) || (rc = ctr_geometry(t, spec, err, errlen)) ||
        (rc = ctr_check_vars(t, spec, vars, nvars, err, errlen)))
        goto done;
    for (int tb = 0; tb < t->num_tables; tb++) {
        t->dim[tb] = spec->tables[tb].dim;
        if (!t->used[tb]) continue;
        if (max_rows[tb] < 0 || max_rows[tb] > INT32_MAX) {
            rc = psc_seterr(err, errlen, PSC_EINVAL, "ctr tower: max_rows of table %s: %lld is out of range",
                            spec->tables[tb].name, (long long)max_rows[tb]);
            goto done;
        }
        t->max_rows[tb] = max_rows[tb];
    }
    rc = ctr_build(t, vars, nvars, err, errlen);
done:
    if (rc)
        tower_ctr_destroy(t);
    else
        *out = t;
    return rc;
}

void tower_ctr_destroy(tower_ctr_t *t)
{
    if (!t) return;
    if (t->dev && t->be->select(t->dev) == 0) {
        (void)t->be->sync(t->dev);
        if (t->dmem) t->be->free(t->dev, t->dmem);
        if (t->hmem) t->be->host_free(t->dev, t->hmem);
    }
    if (t->dev) t->be->close(t->dev);
    free(t->dim);
    free(t->max_rows);
    free(t->used);
    free(t->grad_nrows);
    free(t->slot_table);
    free(t->rows);
    free(t->drows);
    free(t->hrows);
    free(t->bottom);
    free(t->top);
    free(t->emb);
    free(t->wide);
    free(t);
}

/* ---- a step ---- */

/* Logs why a batch is refused (the API has no err buffer) and returns PSC_EINVAL. */
__attribute__((format(printf, 1, 2))) static int bad_batch(const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    PSC_ERROR("ctr tower: bad batch: %s", msg);
    return PSC_EINVAL;
}

/* Everything a kernel will index with, checked on the host. */
static int ctr_check_batch(const tower_ctr_t *t, const tower_ctr_batch_t *b, int train)
{
    if (!b || b->n < 1 || b->n > t->max_batch)
        return bad_batch("%d examples (1..%d)", b ? b->n : 0, t->max_batch);
    if (b->nslots != t->nslots || !b->off) return bad_batch("%d slots, the model has %d", b->nslots, t->nslots);
    if (t->num_dense && !b->dense) return bad_batch("no dense features (the model has %d)", t->num_dense);
    if (t->num_tables && (!b->rows || !b->nrows)) return bad_batch("no rows");
    int64_t bags = (int64_t)b->n * t->nslots;
    if (b->off[0] != 0) return bad_batch("off[0] = %d, want 0", b->off[0]);
    for (int64_t s = 0; s < bags; s++)
        if (b->off[s + 1] < b->off[s]) return bad_batch("off[%lld] < off[%lld]", (long long)s + 1, (long long)s);
    if (b->off[bags] > t->max_nnz) return bad_batch("%d ids, the tower holds %lld", b->off[bags], (long long)t->max_nnz);
    if (b->off[bags] > 0 && (!b->idx || !b->w)) return bad_batch("no idx or w");
    for (int tb = 0; tb < t->num_tables; tb++) {
        if (!t->used[tb]) continue;
        if (b->nrows[tb] < 0 || b->nrows[tb] > t->max_rows[tb])
            return bad_batch("%d rows of table %d, the tower holds %lld", b->nrows[tb], tb, (long long)t->max_rows[tb]);
        if (b->nrows[tb] > 0 && !b->rows[tb]) return bad_batch("no rows for table %d", tb);
    }
    for (int64_t bag = 0; bag < bags; bag++) {
        int nrows = b->nrows[t->slot_table[bag % t->nslots]];
        for (int32_t k = b->off[bag]; k < b->off[bag + 1]; k++)
            if (b->idx[k] < 0 || b->idx[k] >= nrows)
                return bad_batch("example %lld slot %lld: idx[%d] = %d, its table has %d rows this batch",
                                 (long long)(bag / t->nslots), (long long)(bag % t->nslots), k, b->idx[k], nrows);
    }
    if (train) {
        if (!b->label) return bad_batch("no labels");
        for (int i = 0; i < b->n; i++)
            if (!(b->label[i] >= 0.0f && b->label[i] <= 1.0f))
                return bad_batch("label[%d] = %g, want 0..1", i, (double)b->label[i]);
    }
    return 0;
}

/* Staged copy of count elements of size bytes each: host -> staging -> device. */
static int stage_up(tower_ctr_t *t, void *dst, void *stage, const void *src, int64_t count, size_t size)
{
    if (count <= 0) return 0;
    memcpy(stage, src, (size_t)count * size);
    return t->be->upload(t->dev, dst, stage, (size_t)count * size);
}

static int ctr_load(tower_ctr_t *t, const tower_ctr_batch_t *b, int train)
{
    TRY(ctr_check_batch(t, b, train));
    int n = b->n;
    int64_t bags = (int64_t)n * t->nslots, nnz = b->off[bags];
    TRY(stage_up(t, t->dense, t->hdense, b->dense, (int64_t)n * t->num_dense, sizeof(float)));
    if (train) TRY(stage_up(t, t->label, t->hlabel, b->label, n, sizeof(float)));
    TRY(stage_up(t, t->off, t->hoff, b->off, bags + 1, sizeof(int32_t)));
    TRY(stage_up(t, t->idx, t->hidx, b->idx, nnz, sizeof(int32_t)));
    TRY(stage_up(t, t->w, t->hw, b->w, nnz, sizeof(float)));
    for (int tb = 0; tb < t->num_tables; tb++)
        if (t->used[tb])
            TRY(stage_up(t, t->rows[tb], t->hrows[tb], b->rows[tb], (int64_t)b->nrows[tb] * t->dim[tb], sizeof(float)));
    return 0;
}

static float *other_dbuf(tower_ctr_t *t, const float *p) { return p == t->dbuf[0] ? t->dbuf[1] : t->dbuf[0]; }

/* The MLP Ls[0..count) on *x (n, Ls[0].in); *x becomes its output. */
static int mlp_fwd(tower_ctr_t *t, ctr_dense_t *Ls, int count, const float **x, int n)
{
    const tower_backend_ops_t *be = t->be;
    for (int k = 0; k < count; k++) {
        ctr_dense_t *L = &Ls[k];
        L->x = *x;
        /* out (n, units) = x (n, in) @ w (in, units), then + b and the activation */
        TRY(be->gemm(t->dev, 0, 0, n, L->units, L->in, 1.0f, L->x, L->in, L->w, L->units, 0.0f, L->out, L->units));
        TRY(be->bias_act(t->dev, L->out, L->b, n, L->units, L->act));
        *x = L->out;
    }
    return 0;
}

/* Backward through Ls from dy (n, last units; a dbuf, w.r.t. the output):
 * fills their gradients; with want_dx, *dx (a dbuf) = w.r.t. Ls[0]'s input. */
static int mlp_bwd(tower_ctr_t *t, ctr_dense_t *Ls, int count, float *dy, int want_dx, int n, float **dx_out)
{
    const tower_backend_ops_t *be = t->be;
    for (int k = count - 1; k >= 0; k--) {
        ctr_dense_t *L = &Ls[k];
        float *dx = k > 0 || want_dx ? other_dbuf(t, dy) : NULL; /* (n, in) */
        TRY(be->act_backward(t->dev, dy, L->out, (int64_t)n * L->units, L->act));
        /* dw (in, units) = x^T (in, n) @ dy (n, units) */
        TRY(be->gemm(t->dev, 1, 0, L->in, L->units, n, 1.0f, L->x, L->in, dy, L->units, 0.0f, L->dw, L->units));
        if (L->db) TRY(be->bias_grad(t->dev, L->db, dy, n, L->units));
        /* dx (n, in) = dy (n, units) @ w^T (units, in) */
        if (dx) TRY(be->gemm(t->dev, 0, 1, n, L->in, L->units, 1.0f, dy, L->units, L->w, L->units, 0.0f, dx, L->in));
        dy = dx;
    }
    if (dx_out) *dx_out = dy;
    return 0;
}

/* The pooled rows of the layers gs[0..count) into base (n, ld) at their columns. */
static int bags_fwd(tower_ctr_t *t, const ctr_bags_t *gs, int count, float *base, int ld, int n)
{
    for (int k = 0; k < count; k++) {
        const ctr_bags_t *g = &gs[k];
        TRY(t->be->bag_fwd(t->dev, t->rows[g->table], g->dim, t->off, t->idx, t->w, n, t->nslots, g->slot0, g->nbags,
                           base + g->col, ld));
    }
    return 0;
}

/* Their adjoint: the rows' gradients from the pooled rows' in dbase (n, ld). */
static int bags_bwd(tower_ctr_t *t, const ctr_bags_t *gs, int count, const float *dbase, int ld, int n)
{
    for (int k = 0; k < count; k++) {
        const ctr_bags_t *g = &gs[k];
        TRY(t->be->bag_bwd(t->dev, t->drows[g->table], g->dim, t->off, t->idx, t->w, n, t->nslots, g->slot0,
                           g->nbags, dbase + g->col, ld));
    }
    return 0;
}

/* z (n, zw) from b (n, bw) and the embedding bags. */
static int join_fwd(tower_ctr_t *t, const float *b, int n)
{
    const tower_backend_ops_t *be = t->be;
    if (t->join == CTR_JOIN_CONCAT) { /* z = [b, e_1, .., e_S] */
        if (t->bw) TRY(be->copy2d(t->dev, t->z, t->zw, b, t->bw, n, t->bw, 0));
        return bags_fwd(t, t->emb, t->nemb, t->z, t->zw, n);
    }
    int vw = t->P * t->D, hb = t->bw > 0; /* v = [b, e_1, .., e_S], z = [b, dots] */
    if (hb) TRY(be->copy2d(t->dev, t->v, vw, b, t->D, n, t->D, 0));
    TRY(bags_fwd(t, t->emb, t->nemb, t->v, vw, n));
    if (hb) TRY(be->copy2d(t->dev, t->z, t->zw, b, t->D, n, t->D, 0));
    return be->interact_fwd(t->dev, t->v, n, t->P, t->D, t->z + (hb ? t->D : 0), t->zw);
}

/* Backward from dz (n, zw; a dbuf): the embedding rows, then the bottom MLP. */
static int join_bwd(tower_ctr_t *t, float *dz, int n)
{
    const tower_backend_ops_t *be = t->be;
    float *db = other_dbuf(t, dz); /* (n, bw) */
    if (t->join == CTR_JOIN_CONCAT) {
        TRY(bags_bwd(t, t->emb, t->nemb, dz, t->zw, n));
        if (t->nbottom) TRY(be->copy2d(t->dev, db, t->bw, dz, t->zw, n, t->bw, 0));
    } else {
        int vw = t->P * t->D, hb = t->bw > 0;
        TRY(be->interact_bwd(t->dev, t->v, dz + (hb ? t->D : 0), t->zw, n, t->P, t->D, t->dv));
        TRY(bags_bwd(t, t->emb, t->nemb, t->dv, vw, n));
        if (t->nbottom) { /* b's gradient: its pass-through columns' and its dots' */
            TRY(be->copy2d(t->dev, db, t->D, dz, t->zw, n, t->D, 0));
            TRY(be->copy2d(t->dev, db, t->D, t->dv, vw, n, t->D, 1));
        }
    }
    return t->nbottom ? mlp_bwd(t, t->bottom, t->nbottom, db, 0, n, NULL) : 0;
}

/* logits (n) of the loaded batch. */
static int ctr_forward(tower_ctr_t *t, int n)
{
    const float *x = t->dense; /* (n, num_dense) */
    TRY(mlp_fwd(t, t->bottom, t->nbottom, &x, n));
    if (t->join) {
        TRY(join_fwd(t, x, n));
        x = t->z;
    }
    TRY(mlp_fwd(t, t->top, t->ntop, &x, n)); /* t->logits is the last one's output */
    if (!t->nwide) return 0;
    TRY(bags_fwd(t, t->wide, t->nwide, t->wbuf, t->wslots, n));
    /* logits (n, 1) += wbuf (n, W) @ ones (W, 1) */
    return t->be->gemm(t->dev, 0, 0, n, 1, t->wslots, 1.0f, t->wbuf, t->wslots, t->ones, 1, 1.0f, t->logits, 1);
}

/* From dlogits (n; dbuf[0]): every parameter and row gradient. */
static int ctr_backward(tower_ctr_t *t, float *dlogits, int n)
{
    const tower_backend_ops_t *be = t->be;
    for (int tb = 0; tb < t->num_tables; tb++)
        if (t->used[tb] && t->grad_nrows[tb] > 0)
            TRY(be->accumulate(t->dev, t->drows[tb], 0.0f, NULL, 0.0f, (int64_t)t->grad_nrows[tb] * t->dim[tb]));
    if (t->nwide) {
        /* every wide slot's gradient is its example's dlogit: wbuf (n, W) = dlogits (n, 1) @ ones (1, W) */
        TRY(be->gemm(t->dev, 0, 0, n, t->wslots, 1, 1.0f, dlogits, 1, t->ones, t->wslots, 0.0f, t->wbuf, t->wslots));
        TRY(bags_bwd(t, t->wide, t->nwide, t->wbuf, t->wslots, n));
    }
    float *dz;
    TRY(mlp_bwd(t, t->top, t->ntop, dlogits, t->join != CTR_JOIN_NONE, n, &dz));
    return t->join ? join_bwd(t, dz, n) : 0;
}

/* Every op's single exit once it has queued work: syncs whatever rc is,
 * keeping the first error. */
static int ctr_finish(tower_ctr_t *t, int rc)
{
    int sync = t->be->sync(t->dev);
    return rc ? rc : sync;
}

static int train_queue(tower_ctr_t *t, const tower_ctr_batch_t *b)
{
    TRY(ctr_load(t, b, 1));
    for (int tb = 0; tb < t->num_tables; tb++) t->grad_nrows[tb] = t->used[tb] ? b->nrows[tb] : 0;
    int n = b->n;
    TRY(ctr_forward(t, n));
    float *dlogits = t->dbuf[0]; /* (n) */
    TRY(t->be->sigmoid_xent(t->dev, t->logits, t->label, n, dlogits, t->row_loss));
    TRY(t->be->download(t->dev, t->hrow_loss, t->row_loss, (size_t)n * sizeof(double)));
    TRY(t->be->download(t->dev, t->hlogits, t->logits, (size_t)n * sizeof(float)));
    return ctr_backward(t, dlogits, n);
}

int tower_ctr_train_step(tower_ctr_t *t, const tower_ctr_batch_t *b, float *loss, float *logits)
{
    TRY(t->be->select(t->dev));
    t->have_grads = 0;
    TRY(ctr_finish(t, train_queue(t, b)));
    double sum = 0;
    for (int i = 0; i < b->n; i++) sum += t->hrow_loss[i];
    if (loss) *loss = (float)(sum / b->n);
    if (logits) memcpy(logits, t->hlogits, (size_t)b->n * sizeof(float));
    t->have_grads = 1;
    return 0;
}

static int predict_queue(tower_ctr_t *t, const tower_ctr_batch_t *b)
{
    TRY(ctr_load(t, b, 0));
    TRY(ctr_forward(t, b->n));
    return t->be->download(t->dev, t->hlogits, t->logits, (size_t)b->n * sizeof(float));
}

int tower_ctr_predict(tower_ctr_t *t, const tower_ctr_batch_t *b, float *logits)
{
    if (!logits) return PSC_EINVAL;
    TRY(t->be->select(t->dev));
    TRY(ctr_finish(t, predict_queue(t, b)));
    memcpy(logits, t->hlogits, (size_t)b->n * sizeof(float));
    return 0;
}

int tower_ctr_set_params(tower_ctr_t *t, const float *params)
{
    TRY(t->be->select(t->dev));
    if (!t->nparams) return 0;
    /* the caller may change params once we return */
    return ctr_finish(t, t->be->upload(t->dev, t->params, params, (size_t)t->nparams * sizeof(float)));
}

static int grads_queue(tower_ctr_t *t, float *grads, float *const *row_grads)
{
    if (t->nparams && grads) TRY(t->be->download(t->dev, grads, t->grads, (size_t)t->nparams * sizeof(float)));
    for (int tb = 0; tb < t->num_tables; tb++)
        if (row_grads && row_grads[tb] && t->grad_nrows[tb] > 0)
            TRY(t->be->download(t->dev, t->hrows[tb], t->drows[tb],
                                (size_t)t->grad_nrows[tb] * (size_t)t->dim[tb] * sizeof(float)));
    return 0;
}

int tower_ctr_get_grads(tower_ctr_t *t, float *grads, float *const *row_grads)
{
    if (!t->have_grads) {
        PSC_ERROR("ctr tower: get_grads before a successful train_step");
        return PSC_EINVAL;
    }
    TRY(t->be->select(t->dev));
    TRY(ctr_finish(t, grads_queue(t, grads, row_grads)));
    for (int tb = 0; tb < t->num_tables; tb++)
        if (row_grads && row_grads[tb] && t->grad_nrows[tb] > 0)
            memcpy(row_grads[tb], t->hrows[tb], (size_t)t->grad_nrows[tb] * (size_t)t->dim[tb] * sizeof(float));
    return 0;
}
