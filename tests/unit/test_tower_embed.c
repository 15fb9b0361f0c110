/* test_tower_embed — the CTR tower (worker/tower/tower_ctr.c) on the CPU backend: the
 * embedding bags, DLRM's interaction, concat, the wide part and the sigmoid
 * cross-entropy.
 *
 * Gradients against central finite differences of the loss, for every dense
 * parameter and every entry of every row the batch holds: a DLRM model (dense
 * features, bottom MLP, interaction, top MLP, a wide layer), a concat model
 * without dense features (LibSVM-like multi-valued bags, the mean and sqrtn
 * combiners applied in the weights), an interaction without dense features, a
 * linear unit over the dense features plus a wide part (no join); batches of 1
 * and of 600 examples. The loss
 * for the differences is the sigmoid cross-entropy of predict's logits, summed
 * here in double. Smooth activations only (tanh, sigmoid), so no perturbation
 * crosses a kink. Error measure per tensor: max |fd - g| / max(max |g|, 1e-4).
 * By hand: a tiny model's logits, loss, top and bottom kernel gradients and
 * wide-row gradients (every interaction pair with its own weight, so a pair
 * out of order shows);
 * two slots and a second layer sharing one table, one id in several bags, each
 * row's gradient summed from its bags (and an unused row's exactly 0). Also
 * predict == train_step's logits, train_step's loss == the logits' loss, and
 * the checks of create and of a step's batch.
 */
#include "job_spec.h"
#include "model_spec.h"
#include "psc.h"
#include "rng.h"
#include "tower.h"
#include "tower_ctr.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tower_ctr_fixture.h"

/* ---- helpers ---- */

static double xent(double z, double y) { return fmax(z, 0.0) - z * y + log1p(exp(-fabs(z))); }

/* The mean loss of predict's logits, in double. */
static double loss_of(tower_ctr_t *t, const fix_batch_t *B)
{
    int n = B->b.n;
    float *z = calloc((size_t)n, sizeof *z);
    assert_int_equal(tower_ctr_predict(t, &B->b, z), 0);
    double sum = 0;
    for (int i = 0; i < n; i++) sum += xent(z[i], B->label[i]);
    free(z);
    return sum / n;
}

/* The gradients of one train_step: g (nparams), rg[t] (nrows[t], dim). */
typedef struct grads {
    float *g;
    float *rg[FIX_MAX_TABLES];
    float *logits;
    float loss;
} grads_t;

static grads_t step_grads(const ctr_fix_t *f, tower_ctr_t *t, const fix_batch_t *B)
{
    grads_t G = {0};
    G.g = calloc((size_t)f->nparams + 1, sizeof(float));
    G.logits = calloc((size_t)B->b.n, sizeof(float));
    for (int k = 0; k < f->spec.num_tables; k++)
        G.rg[k] = calloc((size_t)B->nrows[k] * (size_t)f->spec.tables[k].dim + 1, sizeof(float));
    assert_int_equal(tower_ctr_train_step(t, &B->b, &G.loss, G.logits), 0);
    assert_int_equal(tower_ctr_get_grads(t, G.g, G.rg), 0);
    return G;
}

static void grads_free(grads_t *G)
{
    free(G->g);
    free(G->logits);
    for (int k = 0; k < FIX_MAX_TABLES; k++) free(G->rg[k]);
}

static double max_abs(const float *x, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs((double)x[i]));
    return m;
}

/* Central differences of loss_of at *x (a parameter, then set_params; or a
 * row entry the batch points at) against the analytic g. */
static double fd_at(const ctr_fix_t *f, tower_ctr_t *t, const fix_batch_t *B, float *x, int is_param, double eps)
{
    float x0 = *x;
    *x = (float)(x0 + eps);
    if (is_param) assert_int_equal(tower_ctr_set_params(t, f->params), 0);
    double lp = loss_of(t, B);
    *x = (float)(x0 - eps);
    if (is_param) assert_int_equal(tower_ctr_set_params(t, f->params), 0);
    double lm = loss_of(t, B);
    *x = x0;
    if (is_param) assert_int_equal(tower_ctr_set_params(t, f->params), 0);
    return (lp - lm) / (2 * eps);
}

/* Every `stride`-th coordinate of every parameter and row against central
 * differences; fails above tol (per tensor, relative to its largest gradient). */
static void check_fd(const char *what, const ctr_fix_t *f0, tower_ctr_t *t, fix_batch_t *B, int stride, double tol)
{
    const double eps = 2e-3;
    ctr_fix_t *f = (ctr_fix_t *)f0; /* perturbed in place, restored */
    grads_t G = step_grads(f, t, B);
    double ref = loss_of(t, B);
    if (!(fabs(G.loss - ref) <= 1e-6 * fmax(1.0, ref))) fail_msg("%s: train_step loss %.9g, logits' %.9g", what, G.loss, ref);
    double worst = 0;
    for (int v = 1; v < f->nvars; v++) {
        const float *g = G.g + f->offsets[v];
        double scale = fmax(max_abs(g, f->vars[v].numel), 1e-4);
        for (int64_t j = 0; j < f->vars[v].numel; j += stride) {
            double fd = fd_at(f, t, B, &f->params[f->offsets[v] + j], 1, eps);
            double e = fabs(fd - g[j]) / scale;
            worst = fmax(worst, e);
            if (!(e <= tol)) fail_msg("%s: %s[%lld]: fd %.6g, grad %.6g (err %.3g)", what, f->vars[v].name, (long long)j, fd, g[j], e);
        }
    }
    for (int k = 0; k < f->spec.num_tables; k++) {
        int64_t cnt = (int64_t)B->nrows[k] * f->spec.tables[k].dim;
        double scale = fmax(max_abs(G.rg[k], cnt), 1e-4);
        for (int64_t j = 0; j < cnt; j += stride) {
            double fd = fd_at(f, t, B, &B->rows[k][j], 0, eps);
            double e = fabs(fd - G.rg[k][j]) / scale;
            worst = fmax(worst, e);
            if (!(e <= tol)) fail_msg("%s: table %s row %lld [%lld]: fd %.6g, grad %.6g (err %.3g)", what, f->spec.tables[k].name,
                                      (long long)(j / f->spec.tables[k].dim), (long long)(j % f->spec.tables[k].dim), fd,
                                      G.rg[k][j], e);
        }
    }
    fprintf(stderr, "  %-44s loss %.5f, worst fd error %.2e (tol %.0e)\n", what, G.loss, worst, tol);
    grads_free(&G);
}

#define FD_TOL 2e-3

/* ---- gradients against finite differences ---- */

static void test_embed_dlrm_fd(void **state)
{
    (void)state;
    ctr_fix_t *f = fix_dlrm(11);
    const int nrows[] = {9, 4, 7};
    fix_batch_t *B = fix_batch_new(f, 6, nrows, 0, 3, 0, 101);
    tower_ctr_t *t = fix_tower(f, "cpu", B, 6);
    check_fd("dlrm, batch 6", f, t, B, 1, FD_TOL);
    tower_ctr_destroy(t);
    fix_batch_free(B);
    fix_free(f);
}

static void test_embed_concat_fd(void **state)
{
    (void)state;
    ctr_fix_t *f = fix_concat(12);
    const int nrows[] = {8, 5};
    fix_batch_t *B = fix_batch_new(f, 7, nrows, 1, 4, 1, 102); /* valued, multi-valued bags */
    tower_ctr_t *t = fix_tower(f, "cpu", B, 7);
    check_fd("concat, no dense, mean/sqrtn", f, t, B, 1, FD_TOL);
    tower_ctr_destroy(t);
    fix_batch_free(B);
    fix_free(f);
}

static void test_embed_interaction_no_dense_fd(void **state)
{
    (void)state;
    ctr_fix_t *f = fix_new(0);
    int e = fix_table(f, "emb", 100, 2);
    fix_bags(f, PSC_LAYER_EMBEDDING, "embedding", e, 0, 3, PSC_COMBINER_SQRTN);
    fix_layer(f, PSC_LAYER_INTERACTION, "interaction"); /* 3 pairs */
    fix_dense(f, "dense", 4, PSC_ACT_TANH);
    fix_dense(f, "dense_1", 1, PSC_ACT_NONE);
    fix_finish(f, 13);
    assert_int_equal(f->vars[1].shape[0], 3);
    const int nrows[] = {6};
    fix_batch_t *B = fix_batch_new(f, 5, nrows, 1, 3, 1, 103);
    tower_ctr_t *t = fix_tower(f, "cpu", B, 5);
    check_fd("interaction, no dense", f, t, B, 1, FD_TOL);
    tower_ctr_destroy(t);
    fix_batch_free(B);
    fix_free(f);
}

/* Logistic regression, no join: one linear unit over the dense features plus
 * the wide sum over the ids. */
static void test_embed_wide_linear_fd(void **state)
{
    (void)state;
    ctr_fix_t *f = fix_new(3);
    int w = fix_table(f, "wide_w", 100, 1);
    fix_dense(f, "dense", 1, PSC_ACT_NONE);
    fix_bags(f, PSC_LAYER_WIDE, "wide", w, 0, 3, PSC_COMBINER_MEAN);
    fix_finish(f, 14);
    assert_int_equal(f->nvars, 3);
    assert_int_equal(f->vars[1].shape[0], 3);
    const int nrows[] = {10};
    fix_batch_t *B = fix_batch_new(f, 8, nrows, 0, 3, 1, 104);
    for (int k = 0; k < 10; k++) B->rows[0][k] *= 4; /* logits away from 0 */
    tower_ctr_t *t = fix_tower(f, "cpu", B, 8);
    check_fd("wide + linear, no join", f, t, B, 1, FD_TOL);
    tower_ctr_destroy(t);
    fix_batch_free(B);
    fix_free(f);
}

static void test_embed_batch_sizes_fd(void **state)
{
    (void)state;
    ctr_fix_t *f = fix_dlrm(15);
    const int nrows[] = {5, 3, 6};
    fix_batch_t *B = fix_batch_new(f, 1, nrows, 0, 3, 1, 105);
    tower_ctr_t *t = fix_tower(f, "cpu", B, 1);
    check_fd("dlrm, batch 1", f, t, B, 1, FD_TOL);
    tower_ctr_destroy(t);
    fix_batch_free(B);
    const int big_rows[] = {200, 40, 300};
    B = fix_batch_new(f, 600, big_rows, 0, 4, 0, 106);
    t = fix_tower(f, "cpu", B, 640);
    check_fd("dlrm, batch 600 (every 7th coordinate)", f, t, B, 7, FD_TOL);
    tower_ctr_destroy(t);
    fix_batch_free(B);
    fix_free(f);
}

/* ---- by hand ---- */

/* 2 dense features through an identity bottom layer (b = d); table e (dim 2)
 * in two slots; interaction z = [d0, d1, <d,e1>, <d,e2>, <e1,e2>]; top: one
 * linear unit with kernel (0.1, -0.2, 0.3, -0.4, 0.5), bias 0.05; a wide slot
 * over table w. */
static void test_embed_loss_by_hand(void **state)
{
    (void)state;
    ctr_fix_t *f = fix_new(2);
    int e = fix_table(f, "emb", 10, 2), w = fix_table(f, "wide_w", 10, 1);
    fix_dense(f, "dense", 2, PSC_ACT_NONE);
    fix_bags(f, PSC_LAYER_EMBEDDING, "embedding", e, 0, 2, PSC_COMBINER_SUM);
    fix_layer(f, PSC_LAYER_INTERACTION, "interaction");
    fix_dense(f, "dense_1", 1, PSC_ACT_NONE);
    fix_bags(f, PSC_LAYER_WIDE, "wide", w, 2, 1, PSC_COMBINER_SUM);
    fix_finish(f, 1);
    assert_int_equal(f->nparams, 12);
    /* bottom kernel I, bias 0; top kernel, then its bias */
    const float params[12] = {1, 0, 0, 1, 0, 0, 0.1f, -0.2f, 0.3f, -0.4f, 0.5f, 0.05f};
    memcpy(f->params, params, sizeof params);
    /* example 0: dense (1, 2); slot 0 {r0}, slot 1 {r1, 0.5 r2}, wide {w0}; label 1
     * example 1: dense (-1, 0.5); slot 0 {r2}, slot 1 {}, wide {w1, 2 w0}; label 0 */
    float dense[] = {1, 2, -1, 0.5f}, label[] = {1, 0};
    int32_t off[] = {0, 1, 3, 4, 5, 5, 7};
    int32_t idx[] = {0, 1, 2, 0, 2, 1, 0};
    float wt[] = {1, 1, 0.5f, 1, 1, 1, 2};
    float rows_e[] = {0.5f, -1, 2, 1, -1, 3}, rows_w[] = {0.25f, -0.75f};
    const float *rows[] = {rows_e, rows_w};
    int nrows[] = {3, 2};
    int64_t max_rows[] = {3, 2};
    tower_ctr_batch_t b = {.n = 2, .dense = dense, .label = label, .nslots = 3, .off = off, .idx = idx, .w = wt,
                           .rows = rows, .nrows = nrows};
    tower_ctr_t *t = NULL;
    char err[256] = "";
    if (tower_ctr_create("cpu", &f->spec, f->vars, f->nvars, 2, 7, max_rows, 0, &t, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(tower_ctr_set_params(t, f->params), 0);
    float loss, z[2];
    assert_int_equal(tower_ctr_train_step(t, &b, &loss, z), 0);
    /* example 0: e1 = (0.5, -1), e2 = r1 + 0.5 r2 = (1.5, 2.5); z = [1, 2, -1.5, 6.5, -1.75]:
     * 0.1 - 0.4 - 0.45 - 2.6 - 0.875 + 0.05 = -4.175, + w0 0.25 = -3.925
     * example 1: e1 = (-1, 3), e2 = 0; z = [-1, 0.5, 2.5, 0, 0]: -0.1 - 0.1 + 0.75 + 0.05 = 0.6,
     * + w1 + 2 w0 = -0.25: 0.35 */
    const double want_z[2] = {-3.925, 0.35}, zin[2][5] = {{1, 2, -1.5, 6.5, -1.75}, {-1, 0.5, 2.5, 0, 0}};
    for (int i = 0; i < 2; i++) assert_float_equal(z[i], want_z[i], 1e-5);
    double want_loss = (xent(-3.925, 1) + xent(0.35, 0)) / 2; /* 3.944543.. and 0.883380.. */
    assert_float_equal(loss, want_loss, 1e-6);
    fprintf(stderr, "  logits %.6f %.6f, loss %.6f (by hand %.6f)\n", z[0], z[1], loss, want_loss);
    /* dlogit_i = (sigmoid(z_i) - y_i) / 2; d kernel_j = sum_i dlogit_i zin_ij; d bias = sum_i dlogit_i;
     * wide rows: d w0 = dlogit_0 + 2 dlogit_1, d w1 = dlogit_1 */
    double dl[2];
    for (int i = 0; i < 2; i++) dl[i] = (1 / (1 + exp(-want_z[i])) - label[i]) / 2;
    float g[12], rg_e[6], rg_w[2];
    float *rg[] = {rg_e, rg_w};
    assert_int_equal(tower_ctr_get_grads(t, g, rg), 0);
    for (int j = 0; j < 5; j++) assert_float_equal(g[6 + j], dl[0] * zin[0][j] + dl[1] * zin[1][j], 1e-6);
    assert_float_equal(g[11], dl[0] + dl[1], 1e-6);
    /* b's gradient: its pass-through columns' (k0, k1) plus its dots' (k2 e1 + k3 e2);
     * the bottom kernel's = sum_i d_i^T db_i, its bias's = sum_i db_i */
    const double e1[2][2] = {{0.5, -1}, {-1, 3}}, e2[2][2] = {{1.5, 2.5}, {0, 0}};
    double db[2][2];
    for (int i = 0; i < 2; i++)
        for (int c = 0; c < 2; c++) db[i][c] = dl[i] * (params[6 + c] + 0.3 * e1[i][c] - 0.4 * e2[i][c]);
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < 2; c++)
            assert_float_equal(g[r * 2 + c], dense[r] * db[0][c] + dense[2 + r] * db[1][c], 1e-6);
    for (int c = 0; c < 2; c++) assert_float_equal(g[4 + c], db[0][c] + db[1][c], 1e-6);
    assert_float_equal(rg_w[0], dl[0] + 2 * dl[1], 1e-6);
    assert_float_equal(rg_w[1], dl[1], 1e-6);
    /* e rows: d e1 (example 0) = dl0 * (k2 d + k4 e2), d e2 = dl0 * (k3 d + k4 e1); r0 gets d e1 of example 0 */
    assert_float_equal(rg_e[0], dl[0] * (0.3 * 1 + 0.5 * 1.5), 1e-6);
    assert_float_equal(rg_e[1], dl[0] * (0.3 * 2 + 0.5 * 2.5), 1e-6);
    assert_float_equal(rg_e[2], dl[0] * (-0.4 * 1 + 0.5 * 0.5), 1e-6); /* r1 = e2's (w 1) */
    tower_ctr_destroy(t);
    fix_free(f);
}

/* Two slots of one layer and a second layer on the same table; one id in
 * several bags; a linear top over the concat, so that d loss / d pooled
 * (i, s, c) = dlogit_i * kernel[s * 2 + c] and each row's gradient is the sum
 * over its bags of w_k times that. */
static void test_embed_shared_rows(void **state)
{
    (void)state;
    ctr_fix_t *f = fix_new(0);
    int e = fix_table(f, "emb", 100, 2);
    fix_bags(f, PSC_LAYER_EMBEDDING, "embedding", e, 0, 2, PSC_COMBINER_SUM);
    fix_bags(f, PSC_LAYER_EMBEDDING, "embedding_1", e, 2, 1, PSC_COMBINER_SUM);
    fix_layer(f, PSC_LAYER_CONCAT, "concat");
    fix_dense(f, "dense", 1, PSC_ACT_NONE);
    fix_finish(f, 21);
    assert_int_equal(f->vars[1].shape[0], 6);
    /* ex0: s0 {1}, s1 {1, 2}, s2 {}; ex1: s0 {1}, s1 {}, s2 {1, 3}; ex2: s0 {0}, s1 {1}, s2 {1}; row 4 unused */
    int32_t off[] = {0, 1, 3, 3, 4, 4, 6, 7, 8, 9};
    int32_t idx[] = {1, 1, 2, 1, 1, 3, 0, 1, 1};
    float wt[] = {0.5f, 2, -1, 1.5f, 0.25f, 3, 1, -0.5f, 0.75f};
    float dense[1] = {0}, label[] = {1, 0, 1};
    fix_batch_t *R = fix_batch_new(f, 1, (const int[]){5}, 0, 0, 0, 7); /* random rows (5, 2) */
    int nrows[] = {5};
    int64_t max_rows[] = {5};
    tower_ctr_batch_t b = {.n = 3, .dense = dense, .label = label, .nslots = 3, .off = off, .idx = idx, .w = wt,
                           .rows = R->b.rows, .nrows = nrows};
    tower_ctr_t *t = NULL;
    char err[256] = "";
    if (tower_ctr_create("cpu", &f->spec, f->vars, f->nvars, 3, 9, max_rows, 0, &t, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(tower_ctr_set_params(t, f->params), 0);
    float loss, z[3], g[7], rg_e[10];
    float *rg[] = {rg_e};
    assert_int_equal(tower_ctr_train_step(t, &b, &loss, z), 0);
    assert_int_equal(tower_ctr_get_grads(t, g, rg), 0);
    const float *K = f->params, *rows = R->rows[0];
    double want[10] = {0};
    for (int i = 0; i < 3; i++) {
        double logit = K[6], dl;
        for (int s = 0; s < 3; s++)
            for (int k = off[i * 3 + s]; k < off[i * 3 + s + 1]; k++)
                for (int c = 0; c < 2; c++) logit += (double)wt[k] * rows[idx[k] * 2 + c] * K[s * 2 + c];
        assert_float_equal(z[i], logit, 1e-5);
        dl = (1 / (1 + exp(-logit)) - label[i]) / 3;
        for (int s = 0; s < 3; s++)
            for (int k = off[i * 3 + s]; k < off[i * 3 + s + 1]; k++)
                for (int c = 0; c < 2; c++) want[idx[k] * 2 + c] += wt[k] * dl * K[s * 2 + c];
    }
    for (int j = 0; j < 10; j++) assert_float_equal(rg_e[j], want[j], 1e-6);
    assert_true(rg_e[8] == 0.0f && rg_e[9] == 0.0f); /* row 4: in no bag */
    assert_true(fabs(rg_e[2]) > 1e-3);                /* row 1: six bags */
    /* and the differences agree */
    fix_batch_t B = *R; /* R's rows, this batch */
    B.b = b;
    B.label = label;
    check_fd("shared table, repeated id", f, t, &B, 1, FD_TOL);
    tower_ctr_destroy(t);
    fix_batch_free(R);
    fix_free(f);
}

/* predict's logits are train_step's, with or without labels; a second step
 * on the same batch gives the same loss and gradients (nothing carried over). */
static void test_embed_predict_matches(void **state)
{
    (void)state;
    ctr_fix_t *f = fix_dlrm(31);
    const int nrows[] = {30, 10, 25};
    fix_batch_t *B = fix_batch_new(f, 40, nrows, 0, 3, 0, 107);
    tower_ctr_t *t = fix_tower(f, "cpu", B, 64);
    grads_t G1 = step_grads(f, t, B);
    float z[40];
    tower_ctr_batch_t nolabel = B->b;
    nolabel.label = NULL;
    assert_int_equal(tower_ctr_predict(t, &nolabel, z), 0);
    assert_memory_equal(z, G1.logits, sizeof z);
    grads_t G2 = step_grads(f, t, B);
    assert_true(G1.loss == G2.loss);
    assert_memory_equal(G1.g, G2.g, (size_t)f->nparams * sizeof(float));
    for (int k = 0; k < 3; k++) assert_memory_equal(G1.rg[k], G2.rg[k], (size_t)nrows[k] * f->tables[k].dim * sizeof(float));
    grads_free(&G1);
    grads_free(&G2);
    tower_ctr_destroy(t);
    fix_batch_free(B);
    fix_free(f);
}

/* ---- what create and a step refuse ---- */

static void expect_create_error(const ctr_fix_t *f, const char *want)
{
    tower_ctr_t *t = NULL;
    char err[256] = "";
    int64_t max_rows[FIX_MAX_TABLES] = {10, 10, 10, 10};
    int rc = tower_ctr_create("cpu", &f->spec, f->vars, f->nvars, 4, 40, max_rows, 0, &t, err, sizeof err);
    fprintf(stderr, "  create: %s\n", err);
    assert_int_not_equal(rc, 0);
    assert_null(t);
    if (!strstr(err, want)) fail_msg("error \"%s\" does not say \"%s\"", err, want);
}

static void test_embed_create_errors(void **state)
{
    (void)state;
    ctr_fix_t *f = fix_dlrm(41);
    f->spec.loss_kind = PSC_LOSS_SOFTMAX_XENT;
    expect_create_error(f, "sigmoid_cross_entropy");
    f->spec.loss_kind = PSC_LOSS_SIGMOID_XENT;
    /* the job spec's rules (model_spec.c) refuse these first; each message names the layer */
    f->tables[2].dim = 2; /* the wide table */
    expect_create_error(f, "(wide)");
    f->tables[2].dim = 1;
    f->tables[1].dim = 4; /* interaction widths differ */
    expect_create_error(f, "(interaction)");
    f->tables[1].dim = 3;
    f->layers[6].units = 2; /* the last dense: 2 units */
    expect_create_error(f, "(dense_3)");
    f->layers[6].units = 1;
    f->vars[3].shape[0] = 4; /* dense_1/kernel (6, 3) -> (4, 3) */
    expect_create_error(f, "dense_1/kernel");
    f->vars[3].shape[0] = 6;
    f->nvars--;
    expect_create_error(f, "variables given");
    f->nvars++;
    f->layers[2].table = 7;
    expect_create_error(f, "table 7");
    f->layers[2].table = 0;
    f->layers[5].type = PSC_LAYER_DROPOUT;
    expect_create_error(f, "dropout");
    f->layers[5].type = PSC_LAYER_DENSE;
    f->spec.num_dense = 0; /* a bottom MLP with no dense features */
    expect_create_error(f, "(dense)");
    f->spec.num_dense = 4;
    tower_ctr_t *t = NULL;
    char err[256] = "";
    int64_t max_rows[] = {10, 10, 10};
    assert_int_equal(tower_ctr_create("tpu", &f->spec, f->vars, f->nvars, 4, 40, max_rows, 0, &t, err, sizeof err),
                     PSC_ENOTFOUND);
    /* the dense walk refuses a recommendation model */
    tower_t *dt = NULL;
    assert_int_equal(tower_cpu_ops.create(&f->spec, f->vars, f->nvars, 4, 0, &dt, err, sizeof err), PSC_EUNSUPPORTED);
    assert_null(dt);
    assert_non_null(strstr(err, "CTR tower"));
    /* slots: embedding (2), embedding_1 (1), wide (2), in layer order */
    assert_int_equal(tower_ctr_slots(&f->spec), 5);
    int layer = -1;
    assert_int_equal(tower_ctr_slot_table(&f->spec, 2, &layer), 1);
    assert_int_equal(layer, 3);
    assert_int_equal(tower_ctr_slot_table(&f->spec, 4, &layer), 2);
    assert_int_equal(layer, 7);
    assert_true(tower_ctr_slot_table(&f->spec, 5, &layer) < 0);
    tower_ctr_destroy(NULL);
    fix_free(f);

    /* embeddings without a join; a join without a top MLP */
    f = fix_new(2);
    int e = fix_table(f, "emb", 10, 2);
    fix_bags(f, PSC_LAYER_EMBEDDING, "embedding", e, 0, 2, PSC_COMBINER_SUM);
    fix_dense(f, "dense", 1, PSC_ACT_NONE);
    fix_finish(f, 1);
    expect_create_error(f, "(embedding)");
    f->layers[1].type = PSC_LAYER_CONCAT;
    snprintf(f->layers[1].name, sizeof f->layers[1].name, "concat");
    fix_finish(f, 1);
    expect_create_error(f, "(concat)");
    fix_free(f);
}

static void test_embed_bad_batches(void **state)
{
    (void)state;
    ctr_fix_t *f = fix_dlrm(51);
    const int nrows[] = {6, 3, 5};
    fix_batch_t *B = fix_batch_new(f, 4, nrows, 1, 2, 0, 108);
    tower_ctr_t *t = fix_tower(f, "cpu", B, 4);
    float loss, z[8], g[256];
    assert_int_equal(tower_ctr_get_grads(t, g, NULL), PSC_EINVAL); /* no step yet */
    tower_ctr_batch_t b = B->b;
    b.n = 5;
    assert_int_equal(tower_ctr_train_step(t, &b, &loss, z), PSC_EINVAL); /* > max_batch */
    b.n = 0;
    assert_int_equal(tower_ctr_predict(t, &b, z), PSC_EINVAL);
    b = B->b;
    b.nslots = 4;
    assert_int_equal(tower_ctr_train_step(t, &b, &loss, z), PSC_EINVAL);
    b = B->b;
    b.label = NULL;
    assert_int_equal(tower_ctr_train_step(t, &b, &loss, z), PSC_EINVAL);
    B->label[2] = 2;
    assert_int_equal(tower_ctr_train_step(t, &B->b, &loss, z), PSC_EINVAL);
    B->label[2] = 1;
    int32_t saved = B->idx[3];
    B->idx[3] = 6; /* past the batch's rows of its table (>= 3 for table 1 or >= 6) */
    assert_int_equal(tower_ctr_train_step(t, &B->b, &loss, z), PSC_EINVAL);
    B->idx[3] = -1;
    assert_int_equal(tower_ctr_predict(t, &B->b, z), PSC_EINVAL);
    B->idx[3] = saved;
    int32_t o = B->off[5];
    B->off[5] = B->off[4] - 1; /* a bag of negative length */
    assert_int_equal(tower_ctr_train_step(t, &B->b, &loss, z), PSC_EINVAL);
    B->off[5] = o;
    B->nrows[0] = 7; /* more rows than the tower holds */
    assert_int_equal(tower_ctr_train_step(t, &B->b, &loss, z), PSC_EINVAL);
    B->nrows[0] = 6;
    assert_int_equal(tower_ctr_get_grads(t, g, NULL), PSC_EINVAL); /* the failed steps left none */
    assert_int_equal(tower_ctr_train_step(t, &B->b, &loss, z), 0);
    assert_true(isfinite(loss));
    assert_int_equal(tower_ctr_get_grads(t, g, NULL), 0);
    tower_ctr_destroy(t);
    fix_batch_free(B);
    fix_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_embed_dlrm_fd),
        cmocka_unit_test(test_embed_concat_fd),
        cmocka_unit_test(test_embed_interaction_no_dense_fd),
        cmocka_unit_test(test_embed_wide_linear_fd),
        cmocka_unit_test(test_embed_batch_sizes_fd),
        cmocka_unit_test(test_embed_loss_by_hand),
        cmocka_unit_test(test_embed_shared_rows),
        cmocka_unit_test(test_embed_predict_matches),
        cmocka_unit_test(test_embed_create_errors),
        cmocka_unit_test(test_embed_bad_batches),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
