/* tower_walk.c — one replica of the model, walked once for every backend
 * (tower_walk.h): the layer list, its geometry, the variable checks, the slab
 * layout and the step's sequence; the backend's table supplies the kernels.
 *
 * Design, after llm.c: create() builds one walk_layer_t per spec layer with
 * named views carved from ONE device allocation — parameters, gradients, the
 * reduce_grads staging copy (backends with several devices), the input batch
 * and labels, every layer's output, dropout masks and max-pool argmax, the
 * backward ping-pong buffers, the im2col scratch and the per-row loss / hits —
 * and the host staging from ONE host allocation. A step is
 *
 *     x, y     -> device                    staging, queued
 *     logits   = forward(x)                 layer by layer
 *     loss     = softmax_xent(logits, y)    per-row loss (double), hit, dlogits
 *     backward(dlogits)                     layer by layer in reverse; fills grads
 *     per-row losses, hits -> host; sync; sum the losses in row order (double)
 *
 * and allocates nothing. Every op selects its device first (towers on
 * different GPUs run on different threads), and once it has queued work it
 * syncs whatever happened (walk_finish): nothing a caller or the next op may
 * touch is in flight when it returns.
 *
 * Layout: activations (n, h, w, c) row-major (NHWC), a flat one (n, features);
 * dense kernels (in, units); conv kernels (kh, kw, in_c, filters) = a (col_k,
 * filters) matrix whose rows follow an im2col row's (ky, kx, c) order; padding
 * and output sizes are TensorFlow's (model_spec.c).
 *
 * Invariants: every gradient is overwritten by each train_step; dense and
 * conv2d keep post-activation outputs (all their activation's derivative
 * needs); the backward pass stops at the first layer with variables.
 */
#include "tower_walk.h"

#include "psc.h"
#include "rng.h"

#include <stdlib.h>
#include <string.h>

typedef struct walk_layer {
    enum psc_layer_type type;
    enum psc_activation act;
    int out_h, out_w, out_c;   /* output (h, w, c) of one example */
    int64_t in_size, out_size; /* features per example */
    tower_window_t g;          /* conv2d / max_pool2d */
    int col_batch;             /* conv2d: examples per conv op call (the im2col scratch holds their columns) */
    float rate;                /* dropout */
    /* device views into the parameter and gradient slabs (NULL where none) */
    float *w, *dw; /* dense (in, units); conv2d (kh, kw, in_c, filters) = (col_k, filters) */
    float *b, *db; /* (units) or (filters) */
    /* device buffers for max_batch examples (NULL where unused) */
    float *out;      /* (B, out_h, out_w, out_c) post-activation; not for flatten */
    float *mask;     /* dropout: (B, out_size), each 0 or 1 / (1 - rate) */
    int32_t *argmax; /* max_pool2d: (B, out_h, out_w, out_c), index into the example's input */
    /* set by each forward pass (device) */
    const float *x; /* (n, in_size) */
    const float *y; /* (n, out_size): out, or x for flatten and inference dropout */
} walk_layer_t;

typedef struct walk {
    tower_t base; /* first: a tower_t * is a walk_t * */
    const tower_backend_ops_t *be;
    tower_dev_t *dev;
    int device;
    int num_layers;
    walk_layer_t *layers; /* (num_layers), host */
    int features, classes, first_trainable;
    int max_cols; /* widest bias (units / filters) */
    int64_t nparams;
    /* the device slab and its views */
    void *dmem;
    float *params;    /* (nparams) the variables in model order, at tower_layout's offsets */
    float *grads;     /* (nparams) d mean loss / d params, same layout */
    float *staging;   /* (nparams) reduce_grads: another device's gradients; NULL without copy_peer */
    float *x;         /* (B, features) */
    int32_t *labels;  /* (B) */
    float *dbuf[2];   /* 2 x (B, max features of any activation): backward ping-pong */
    float *col;       /* im2col scratch, NULL without conv layers or with col_budget 0 */
    double *row_loss; /* (B) */
    int32_t *row_hit; /* (B) */
    /* the host staging slab and its views */
    void *hmem;
    float *hx;         /* (B, features) */
    int32_t *hy;       /* (B) */
    double *hrow_loss; /* (B) */
    int32_t *hrow_hit; /* (B) */
    float *hlogits;    /* (B, classes): predict's logits */
} walk_t;

#define TRY(call)                      \
    do {                               \
        int walk_rc_ = (call);         \
        if (walk_rc_) return walk_rc_; \
    } while (0)

/* ---- layers ---- */

static int dense_forward(walk_t *t, walk_layer_t *L, int n)
{
    const tower_backend_ops_t *be = t->be;
    int in = (int)L->in_size, units = L->out_c;
    /* out (n, units) = x (n, in) @ w (in, units), then + b and the activation */
    TRY(be->gemm(t->dev, 0, 0, n, units, in, 1.0f, L->x, in, L->w, units, 0.0f, L->out, units));
    return be->bias_act(t->dev, L->out, L->b, n, units, L->act);
}

/* dy (n, units): w.r.t. the pre-activation. dx (n, in) may be NULL. */
static int dense_backward(walk_t *t, walk_layer_t *L, const float *dy, float *dx, int n)
{
    const tower_backend_ops_t *be = t->be;
    int in = (int)L->in_size, units = L->out_c;
    /* dw (in, units) = x^T (in, n) @ dy (n, units) */
    TRY(be->gemm(t->dev, 1, 0, in, units, n, 1.0f, L->x, in, dy, units, 0.0f, L->dw, units));
    if (L->db) TRY(be->bias_grad(t->dev, L->db, dy, n, units));
    /* dx (n, in) = dy (n, units) @ w^T (units, in) */
    if (dx) TRY(be->gemm(t->dev, 0, 1, n, in, units, 1.0f, dy, units, L->w, units, 0.0f, dx, in));
    return 0;
}

static int conv2d_forward(walk_t *t, walk_layer_t *L, int n)
{
    /* y = act(conv(x, w) + b), a chunk of col_batch examples at a time */
    for (int e0 = 0; e0 < n; e0 += L->col_batch) {
        int m = PSC_MIN(L->col_batch, n - e0);
        TRY(t->be->conv_fwd(t->dev, L->g, L->x + e0 * L->in_size, m, L->w, L->b, L->act, L->out + e0 * L->out_size,
                            t->col));
    }
    return 0;
}

/* dy (n, out_h, out_w, F): w.r.t. the pre-activation. dx (n, in_size) may be NULL. */
static int conv2d_backward(walk_t *t, walk_layer_t *L, const float *dy, float *dx, int n)
{
    const tower_backend_ops_t *be = t->be;
    int64_t positions = (int64_t)L->out_h * L->out_w;
    /* db (F) = sum over examples and positions of dy */
    if (L->db) TRY(be->bias_grad(t->dev, L->db, dy, n * positions, L->out_c));
    for (int e0 = 0; e0 < n; e0 += L->col_batch) {
        int m = PSC_MIN(L->col_batch, n - e0);
        const float *dyc = dy + e0 * L->out_size; /* (m, out_h, out_w, F) */
        /* dw (K, F) (+)= im2col(x)^T @ dy: the first chunk overwrites */
        TRY(be->conv_bwd_weights(t->dev, L->g, L->x + e0 * L->in_size, dyc, m, L->dw, e0 > 0, t->col));
        if (dx) TRY(be->conv_bwd_data(t->dev, L->g, dyc, m, L->w, dx + e0 * L->in_size, t->col));
    }
    return 0;
}

/* Layer i's mask for examples first .. first + n - 1 of the step's batch: unit
 * j of this slice is unit first * out_size + j of the batch (rng.h). */
static int dropout_forward(walk_t *t, walk_layer_t *L, int n, uint64_t seed, int i, int64_t first)
{
    float scale = 1.0f / (1.0f - L->rate);
    return t->be->dropout_fwd(t->dev, L->x, L->mask, L->out, n * L->out_size, seed, (uint32_t)i,
                              (uint64_t)first * (uint64_t)L->out_size, psc_dropout_threshold(L->rate), scale);
}

/* ---- the model ---- */

/* Forward pass over the n examples in t->x; *logits (n, classes). train:
 * dropout on, its masks from (dropout_seed, layer, unit index in the batch,
 * t->x holding examples first.. of it). */
static int forward(walk_t *t, int n, int train, uint64_t dropout_seed, int64_t first, const float **logits)
{
    const float *h = t->x; /* (n, features) */
    for (int i = 0; i < t->num_layers; i++) {
        walk_layer_t *L = &t->layers[i];
        L->x = h; /* (n, in_size) */
        L->y = L->out;
        switch (L->type) {
        case PSC_LAYER_DENSE: /* (n, in) -> (n, units) */
            TRY(dense_forward(t, L, n));
            break;
        case PSC_LAYER_CONV2D: /* (n, in_h, in_w, in_c) -> (n, out_h, out_w, filters) */
            TRY(conv2d_forward(t, L, n));
            break;
        case PSC_LAYER_MAX_POOL2D: /* (n, in_h, in_w, c) -> (n, out_h, out_w, c) */
            TRY(t->be->maxpool_fwd(t->dev, L->g, L->x, n, L->out, L->argmax));
            break;
        case PSC_LAYER_FLATTEN: /* (n, h, w, c) -> (n, h*w*c): the same memory */
            L->y = L->x;
            break;
        case PSC_LAYER_DROPOUT: /* (n, size) -> (n, size); identity at inference */
            if (train)
                TRY(dropout_forward(t, L, n, dropout_seed, i, first));
            else
                L->y = L->x;
            break;
        case PSC_LAYER_EMBEDDING: /* recommendation models: tower_ctr.c; refused by create */
        case PSC_LAYER_INTERACTION:
        case PSC_LAYER_CONCAT:
        case PSC_LAYER_WIDE:
            return PSC_EUNSUPPORTED;
        }
        h = L->y; /* (n, out_size) */
    }
    *logits = h;
    return 0;
}

static float *other_dbuf(walk_t *t, const float *p) { return p == t->dbuf[0] ? t->dbuf[1] : t->dbuf[0]; }

/* Backward pass from dlogits (n, classes) = d mean loss / d logits (in
 * dbuf[0]): fills the gradient slab. Each layer reads dy, the gradient w.r.t.
 * its output, and writes dx, w.r.t. its input, into the other buffer. */
static int backward(walk_t *t, float *dlogits, int n)
{
    const tower_backend_ops_t *be = t->be;
    float *dy = dlogits; /* (n, out_size) of the layer below */
    for (int i = t->num_layers - 1; i >= t->first_trainable; i--) {
        walk_layer_t *L = &t->layers[i];
        float *dx = i > t->first_trainable ? other_dbuf(t, dy) : NULL; /* (n, in_size) */
        switch (L->type) {
        case PSC_LAYER_DENSE: /* dy: made w.r.t. the pre-activation first */
            TRY(be->act_backward(t->dev, dy, L->y, n * L->out_size, L->act));
            TRY(dense_backward(t, L, dy, dx, n));
            break;
        case PSC_LAYER_CONV2D:
            TRY(be->act_backward(t->dev, dy, L->y, n * L->out_size, L->act));
            TRY(conv2d_backward(t, L, dy, dx, n));
            break;
        case PSC_LAYER_MAX_POOL2D:
            if (dx) TRY(be->maxpool_bwd(t->dev, L->g, dy, L->argmax, n, dx));
            break;
        case PSC_LAYER_FLATTEN: /* (n, h*w*c) is (n, h, w, c) */
            dx = dy;
            break;
        case PSC_LAYER_DROPOUT: /* dx = dy * mask, in place */
            TRY(be->mul(t->dev, dy, L->mask, dy, n * L->out_size));
            dx = dy;
            break;
        case PSC_LAYER_EMBEDDING: /* refused by create */
        case PSC_LAYER_INTERACTION:
        case PSC_LAYER_CONCAT:
        case PSC_LAYER_WIDE:
            return PSC_EUNSUPPORTED;
        }
        dy = dx;
    }
    return 0;
}

/* The batch's checks, then x and y to the device through the host staging. */
static int load_batch(walk_t *t, const float *x, const int32_t *y, int n)
{
    if (!x || !y || n < 1 || n > t->base.max_batch) return PSC_EINVAL;
    for (int i = 0; i < n; i++)
        if (y[i] < 0 || y[i] >= t->classes) return PSC_EINVAL;
    size_t xbytes = (size_t)n * (size_t)t->features * sizeof(float);
    memcpy(t->hx, x, xbytes);
    memcpy(t->hy, y, (size_t)n * sizeof(int32_t));
    TRY(t->be->upload(t->dev, t->x, t->hx, xbytes));
    return t->be->upload(t->dev, t->labels, t->hy, (size_t)n * sizeof(int32_t));
}

/* Queues the loss on logits (n, classes) and the per-row results' copy to the
 * host (read them after sync). dlogits may be NULL. */
static int loss_queue(walk_t *t, const float *logits, int n, float *dlogits)
{
    const tower_backend_ops_t *be = t->be;
    TRY(be->softmax_xent(t->dev, logits, t->labels, n, t->classes, dlogits, t->row_loss, t->row_hit));
    TRY(be->download(t->dev, t->hrow_loss, t->row_loss, (size_t)n * sizeof(double)));
    return be->download(t->dev, t->hrow_hit, t->row_hit, (size_t)n * sizeof(int32_t));
}

/* The loss sum (in row order, double) and hits of the last loss_queue. */
static double loss_sum_rows(const walk_t *t, int n, int *hits)
{
    double sum = 0;
    int h = 0;
    for (int i = 0; i < n; i++) {
        sum += t->hrow_loss[i];
        h += t->hrow_hit[i] != 0;
    }
    *hits = h;
    return sum;
}

/* Every op's single exit once it has queued work: syncs whatever rc is (on an
 * error path too, the copies from and to the staging and the caller's buffers
 * may still run), keeping the op's first error. */
static int walk_finish(walk_t *t, int rc)
{
    int sync = t->be->sync(t->dev);
    return rc ? rc : sync;
}

/* ---- the operations ---- */

int tower_walk_set_params(tower_t *base, const float *params)
{
    walk_t *t = (walk_t *)base;
    TRY(t->be->select(t->dev));
    if (!t->nparams) return 0;
    /* the caller may change params once we return */
    return walk_finish(t, t->be->upload(t->dev, t->params, params, (size_t)t->nparams * sizeof(float)));
}

int tower_walk_get_grads(tower_t *base, float *grads)
{
    walk_t *t = (walk_t *)base;
    TRY(t->be->select(t->dev));
    if (!t->nparams) return 0;
    return walk_finish(t, t->be->download(t->dev, grads, t->grads, (size_t)t->nparams * sizeof(float)));
}

/* Queues a whole step (train_step's work up to its sync). */
static int train_queue(walk_t *t, const float *x, const int32_t *y, int n, uint64_t dropout_seed, int64_t first)
{
    TRY(load_batch(t, x, y, n));
    const float *logits; /* (n, classes) */
    TRY(forward(t, n, 1, dropout_seed, first, &logits));
    float *dlogits = t->dbuf[0]; /* (n, classes) */
    TRY(loss_queue(t, logits, n, dlogits));
    return backward(t, dlogits, n);
}

int tower_walk_train_step(tower_t *base, const float *x, const int32_t *y, int n, uint64_t dropout_seed,
                          int64_t first, float *loss, int *correct)
{
    walk_t *t = (walk_t *)base;
    if (first < 0) return PSC_EINVAL;
    TRY(t->be->select(t->dev));
    TRY(walk_finish(t, train_queue(t, x, y, n, dropout_seed, first)));
    int hits;
    double sum = loss_sum_rows(t, n, &hits);
    if (loss) *loss = (float)(sum / n);
    if (correct) *correct = hits;
    return 0;
}

/* Queues an evaluation (evaluate's work up to its sync). */
static int evaluate_queue(walk_t *t, const float *x, const int32_t *y, int n)
{
    TRY(load_batch(t, x, y, n));
    const float *logits;
    TRY(forward(t, n, 0, 0, 0, &logits));
    return loss_queue(t, logits, n, NULL);
}

int tower_walk_evaluate(tower_t *base, const float *x, const int32_t *y, int n, double *loss_sum, int *correct)
{
    walk_t *t = (walk_t *)base;
    TRY(t->be->select(t->dev));
    TRY(walk_finish(t, evaluate_queue(t, x, y, n)));
    int hits;
    double sum = loss_sum_rows(t, n, &hits);
    if (loss_sum) *loss_sum += sum;
    if (correct) *correct += hits;
    return 0;
}

/* Queues a prediction (predict's work up to its sync): x in, logits out to
 * the host staging. */
static int predict_queue(walk_t *t, const float *x, int n)
{
    size_t xbytes = (size_t)n * (size_t)t->features * sizeof(float);
    memcpy(t->hx, x, xbytes);
    TRY(t->be->upload(t->dev, t->x, t->hx, xbytes));
    const float *logits; /* (n, classes) */
    TRY(forward(t, n, 0, 0, 0, &logits));
    return t->be->download(t->dev, t->hlogits, logits, (size_t)n * (size_t)t->classes * sizeof(float));
}

int tower_walk_predict(tower_t *base, const float *x, int n, float *logits)
{
    walk_t *t = (walk_t *)base;
    if (!x || !logits || n < 1 || n > t->base.max_batch) return PSC_EINVAL;
    TRY(t->be->select(t->dev));
    TRY(walk_finish(t, predict_queue(t, x, n)));
    memcpy(logits, t->hlogits, (size_t)n * (size_t)t->classes * sizeof(float));
    return 0;
}

/* Queues reduce_grads' work on dst's device. */
static int reduce_queue(walk_t *dst, tower_t *const *srcs, const float *weights, int n)
{
    const tower_backend_ops_t *be = dst->be;
    /* dst may be among srcs: fold its own term in first, then add the others. */
    float self = 0.0f;
    for (int i = 0; i < n; i++)
        if (srcs[i] == &dst->base) self += weights[i];
    TRY(be->accumulate(dst->dev, dst->grads, self, NULL, 0.0f, dst->nparams));
    for (int i = 0; i < n; i++) {
        walk_t *s = (walk_t *)srcs[i];
        if (srcs[i] == &dst->base) continue;
        /* s's train_step has returned, so its gradients are complete. Another
         * device's come over into dst's staging copy first; the device orders
         * the next copy after this accumulate. */
        const float *from = s->grads;
        if (s->device != dst->device) {
            if (!be->copy_peer || !dst->staging) return PSC_EINVAL;
            TRY(be->copy_peer(dst->dev, dst->staging, s->dev, s->grads, (size_t)dst->nparams * sizeof(float)));
            from = dst->staging;
        }
        TRY(be->accumulate(dst->dev, dst->grads, 1.0f, from, weights[i], dst->nparams));
    }
    return 0;
}

int tower_walk_reduce_grads(tower_t *dst_base, tower_t *const *srcs, const float *weights, int n)
{
    walk_t *dst = (walk_t *)dst_base;
    TRY(dst->be->select(dst->dev));
    for (int i = 0; i < n; i++) {
        if (srcs[i]->ops != dst_base->ops) return PSC_EINVAL;
        if (((const walk_t *)srcs[i])->nparams != dst->nparams) return PSC_EMISMATCH;
    }
    if (!dst->nparams) return 0;
    /* the srcs may start their next step once we return, failed or not */
    return walk_finish(dst, reduce_queue(dst, srcs, weights, n));
}

/* Frees what create made (any part of it), after the device's queue ran out. */
void tower_walk_destroy(tower_t *base)
{
    walk_t *t = (walk_t *)base;
    if (!t) return;
    if (t->dev && t->be->select(t->dev) == 0) {
        (void)t->be->sync(t->dev);
        if (t->dmem) t->be->free(t->dev, t->dmem);
        if (t->hmem) t->be->host_free(t->dev, t->hmem);
    }
    t->be->close(t->dev);
    free(t->layers);
    free(t);
}

/* ---- create ---- */

/* TF padding before the first row/column for one dimension. */
static int pad_before(int in, int out, int k, int s, enum psc_padding pad)
{
    if (pad != PSC_PAD_SAME) return 0;
    int total = PSC_MAX((out - 1) * s + k - in, 0);
    return total / 2;
}

/* The variables must be the spec's model's (want), in its order. */
static int check_vars(const char *name, const psc_var_desc_t *vars, int nvars, const psc_var_desc_t *want, int nwant,
                      char *err, size_t errlen)
{
    if (nvars != nwant)
        return psc_seterr(err, errlen, PSC_EMISMATCH, "%s tower: %d variables given, the model has %d", name, nvars,
                          nwant);
    for (int k = 0; k < nvars; k++) {
        int same = vars[k].rank == want[k].rank && vars[k].layer == want[k].layer &&
                   !vars[k].is_step == !want[k].is_step && vars[k].numel == want[k].numel;
        for (int d = 0; same && d < want[k].rank; d++) same = vars[k].shape[d] == want[k].shape[d];
        if (!same)
            return psc_seterr(err, errlen, PSC_EMISMATCH, "%s tower: variable %d (%s) does not match the model's %s",
                              name, k, vars[k].name, want[k].name);
    }
    return 0;
}

/* One layer's geometry from its spec S, its input (h, w, c) and output shape. */
static int layer_geometry(walk_t *t, walk_layer_t *L, const psc_layer_spec_t *S, int h, int w, int c,
                          const int shape[3], char *err, size_t errlen)
{
    L->type = S->type;
    L->act = (S->type == PSC_LAYER_DENSE || S->type == PSC_LAYER_CONV2D) ? S->activation : PSC_ACT_NONE;
    L->out_h = shape[0];
    L->out_w = shape[1];
    L->out_c = shape[2];
    L->in_size = (int64_t)h * w * c;
    L->out_size = (int64_t)L->out_h * L->out_w * L->out_c;
    if (S->type == PSC_LAYER_CONV2D || S->type == PSC_LAYER_MAX_POOL2D) {
        const int *k = S->type == PSC_LAYER_CONV2D ? S->kernel_size : S->pool_size;
        tower_window_t *g = &L->g;
        *g = (tower_window_t){.in_h = h, .in_w = w, .in_c = c, .out_h = L->out_h, .out_w = L->out_w};
        g->kh = k[0];
        g->kw = k[1];
        g->sh = S->strides[0];
        g->sw = S->strides[1];
        g->pad_top = pad_before(h, L->out_h, g->kh, g->sh, S->padding);
        g->pad_left = pad_before(w, L->out_w, g->kw, g->sw, S->padding);
        g->in_size = (int)L->in_size;
    }
    if (S->type == PSC_LAYER_CONV2D) {
        int64_t col_k = (int64_t)L->g.kh * L->g.kw * c;
        if (col_k > INT32_MAX)
            return psc_seterr(err, errlen, PSC_EUNSUPPORTED, "%s tower: layer %s: window too large", t->be->name,
                              S->name);
        L->g.col_k = (int)col_k;
        L->g.filters = L->out_c;
        int64_t per_example = (int64_t)L->out_h * L->out_w * col_k;
        /* BLAS dimensions are int: a chunk's rows * col_k must fit; a backend
         * without scratch (col_budget 0) takes the whole batch at once */
        int64_t cap = t->be->col_budget > 0 ? PSC_MIN(t->be->col_budget, (int64_t)INT32_MAX) : INT64_MAX;
        L->col_batch = (int)PSC_MAX((int64_t)1, PSC_MIN((int64_t)t->base.max_batch, cap / per_example));
    }
    if (S->type == PSC_LAYER_DENSE || S->type == PSC_LAYER_CONV2D) t->max_cols = PSC_MAX(t->max_cols, L->out_c);
    L->rate = S->type == PSC_LAYER_DROPOUT ? S->rate : 0.0f;
    return 0;
}

/* Carves aligned views from a slab: run once with base NULL to size it. */
typedef struct carver {
    char *base;
    size_t off;
} carver_t;

static void *carve(carver_t *c, size_t bytes)
{
    size_t off = (c->off + 255) & ~(size_t)255;
    c->off = off + bytes;
    return c->base ? c->base + off : NULL;
}

/* Lays the device and host slabs out (a sizing pass when dbase / hbase are NULL). */
static void carve_all(walk_t *t, char *dbase, char *hbase, int64_t dbuf_floats, int64_t col_floats, size_t *dbytes,
                      size_t *hbytes)
{
    int64_t B = t->base.max_batch;
    size_t fl = sizeof(float), pbytes = (size_t)t->nparams * fl;
    carver_t d = {dbase, 0}, h = {hbase, 0};
    t->params = carve(&d, pbytes);
    t->grads = carve(&d, pbytes);
    t->staging = t->be->copy_peer ? carve(&d, pbytes) : NULL;
    t->x = carve(&d, (size_t)(B * t->features) * fl);
    t->labels = carve(&d, (size_t)B * sizeof(int32_t));
    for (int i = 0; i < t->num_layers; i++) {
        walk_layer_t *L = &t->layers[i];
        size_t batch_out = (size_t)(B * L->out_size);
        L->out = L->type != PSC_LAYER_FLATTEN ? carve(&d, batch_out * fl) : NULL;
        L->mask = L->type == PSC_LAYER_DROPOUT ? carve(&d, batch_out * fl) : NULL;
        L->argmax = L->type == PSC_LAYER_MAX_POOL2D ? carve(&d, batch_out * sizeof(int32_t)) : NULL;
    }
    t->dbuf[0] = carve(&d, (size_t)dbuf_floats * fl);
    t->dbuf[1] = carve(&d, (size_t)dbuf_floats * fl);
    t->col = col_floats ? carve(&d, (size_t)col_floats * fl) : NULL;
    t->row_loss = carve(&d, (size_t)B * sizeof(double));
    t->row_hit = carve(&d, (size_t)B * sizeof(int32_t));
    t->hx = carve(&h, (size_t)(B * t->features) * fl);
    t->hy = carve(&h, (size_t)B * sizeof(int32_t));
    t->hrow_loss = carve(&h, (size_t)B * sizeof(double));
    t->hrow_hit = carve(&h, (size_t)B * sizeof(int32_t));
    t->hlogits = carve(&h, (size_t)(B * t->classes) * fl);
    *dbytes = d.off;
    *hbytes = h.off;
}

/* The layers from the spec (shapes: psc_model_shapes'), then the device and
 * its two slabs, then the variables' views into them. */
static int walk_build(walk_t *t, const psc_job_spec_t *spec, const int (*shapes)[3], const psc_var_desc_t *vars,
                      int nvars, const int64_t *offsets, char *err, size_t errlen)
{
    /* Layer geometry: the input is (1, 1, n) for a rank-1 spec (model_spec.c). */
    int h = spec->input_rank == 3 ? spec->input_shape[0] : 1;
    int w = spec->input_rank == 3 ? spec->input_shape[1] : 1;
    int c = spec->input_rank == 3 ? spec->input_shape[2] : spec->input_shape[0];
    t->features = h * w * c;
    int64_t max_size = t->features, col_floats = 0;
    for (int i = 0; i < t->num_layers; i++) {
        walk_layer_t *L = &t->layers[i];
        TRY(layer_geometry(t, L, &spec->layers[i], h, w, c, shapes[i], err, errlen));
        if (L->type == PSC_LAYER_CONV2D && t->be->col_budget > 0)
            col_floats = PSC_MAX(col_floats, L->col_batch * (int64_t)L->out_h * L->out_w * L->g.col_k);
        max_size = PSC_MAX(max_size, L->out_size);
        h = L->out_h;
        w = L->out_w;
        c = L->out_c;
    }
    t->classes = c;

    int rc;
    size_t dbytes, hbytes;
    int64_t dbuf_floats = (int64_t)t->base.max_batch * max_size;
    TRY(t->be->open(t->device, t->max_cols, &t->dev, err, errlen));
    carve_all(t, NULL, NULL, dbuf_floats, col_floats, &dbytes, &hbytes);
    if ((rc = t->be->alloc(t->dev, dbytes, &t->dmem)) || (rc = t->be->host_alloc(t->dev, hbytes, &t->hmem)))
        return psc_seterr(err, errlen, rc, "%s tower on device %d: cannot allocate its %zu + %zu bytes: %s",
                          t->be->name, t->device, dbytes, hbytes, psc_strerror(rc));
    carve_all(t, t->dmem, t->hmem, dbuf_floats, col_floats, &dbytes, &hbytes);

    /* Views of the variables: a rank-1 variable is its layer's bias. */
    for (int k = 0; k < nvars; k++) {
        if (vars[k].is_step) continue;
        walk_layer_t *L = &t->layers[vars[k].layer];
        if (vars[k].rank == 1) {
            L->b = t->params + offsets[k];
            L->db = t->grads + offsets[k];
        } else {
            L->w = t->params + offsets[k];
            L->dw = t->grads + offsets[k];
        }
    }
    t->first_trainable = t->num_layers;
    for (int i = t->num_layers - 1; i >= 0; i--)
        if (t->layers[i].w) t->first_trainable = i;
    return 0;
}

int tower_walk_create(const tower_backend_ops_t *be, const tower_ops_t *ops, const psc_job_spec_t *spec,
                      const psc_var_desc_t *vars, int nvars, int max_batch, int device, tower_t **out, char *err,
                      size_t errlen)
{
    *out = NULL;
    if (max_batch < 1)
        return psc_seterr(err, errlen, PSC_EINVAL, "%s tower: max_batch must be >= 1, got %d", be->name, max_batch);
    for (int i = 0; i < spec->num_layers; i++)
        if (spec->loss_kind != PSC_LOSS_SOFTMAX_XENT || spec->layers[i].type >= PSC_LAYER_EMBEDDING)
            return psc_seterr(err, errlen, PSC_EUNSUPPORTED,
                              "%s tower: a recommendation model (loss sigmoid_cross_entropy, embedding layers) "
                              "runs on the CTR tower (tower_ctr.h), not this one",
                              be->name);
    int nl = spec->num_layers, rc;
    psc_var_desc_t *want = NULL;
    int nwant = 0;
    int(*shapes)[3] = NULL;
    int64_t *offsets = NULL;
    walk_t *t = NULL;

    /* The variables must be the spec's model's, in its order. */
    if ((rc = psc_model_variables(spec, &want, &nwant, err, errlen))) goto done;
    shapes = psc_xcalloc((size_t)nl, sizeof *shapes);
    if ((rc = psc_model_shapes(spec, shapes, err, errlen))) goto done;
    if ((rc = check_vars(be->name, vars, nvars, want, nwant, err, errlen))) goto done;

    t = psc_xcalloc(1, sizeof *t);
    t->base.ops = ops;
    t->base.max_batch = max_batch;
    t->be = be;
    t->device = device;
    t->num_layers = nl;
    t->layers = psc_xcalloc((size_t)nl, sizeof *t->layers);
    offsets = psc_xcalloc((size_t)nvars, sizeof *offsets);
    t->nparams = tower_layout(vars, nvars, offsets);
    if ((rc = walk_build(t, spec, (const int(*)[3])shapes, vars, nvars, offsets, err, errlen))) goto done;
    *out = &t->base;
done:
    free(want);
    free(shapes);
    free(offsets);
    if (rc) tower_walk_destroy(t ? &t->base : NULL);
    return rc;
}
