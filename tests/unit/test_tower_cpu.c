/* test_tower_cpu — the CPU tower (worker/tower/tower_cpu.c) and the shared tower code
 * (worker/tower/tower.c).
 *
 * Gradients: every layer type and activation against central finite differences
 * of the loss, on small models whose every variable gets sampled parameters
 * checked: dense+tanh+dense, sigmoid, relu, conv2d valid and same with stride 2
 * (a conv after a conv, so col2im is on the path), max_pool2d valid and same, and
 * dropout (the same seed gives the same masks in both evaluations). The loss for
 * the differences is the tower's own, summed in double by evaluate() (or
 * train_step's for dropout). Models with kinks (relu, max pooling) may see a
 * perturbation cross one, so a small share of samples may miss; a wrong formula
 * misses nearly all of them.
 * Closed forms: softmax cross-entropy of known logits (and its gradient) computed
 * by hand; zero weights give loss ln(10) for 10 classes. Training: a tiny MLP fits
 * a separable toy set with plain SGD. Replication invariant: the size-weighted mean
 * of two half-batch gradients equals the full-batch gradient. Also the slab layout,
 * Keras initialization and the argument checks. The CTR embedding bags' and
 * interaction's blocked loops against one-at-a-time ones, bit for bit.
 * Dropout masks (rng.h's counter-based generator): Philox-4x32-10's known answers
 * from Random123; the drop rate within a statistical tolerance; the tower's mask
 * is psc_dropout_bits of (seed, layer, the unit's index in the step's batch), so
 * a tower given a slice (tower_train_step_at) drops what a tower on the whole
 * batch drops there (loss and gradient of two slices == the whole batch's).
 */
#include "job_spec.h"
#include "model_spec.h"
#include "psc.h"
#include "rng.h"
#include "tower.h"
#include "tower_walk.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* ---- specs by hand ---- */

static psc_layer_spec_t dense(const char *name, int units, enum psc_activation act)
{
    psc_layer_spec_t L = {.type = PSC_LAYER_DENSE, .units = units, .activation = act, .use_bias = 1};
    snprintf(L.name, sizeof L.name, "%s", name);
    return L;
}

static psc_layer_spec_t conv(const char *name, int filters, int kh, int kw, int s, enum psc_padding pad,
                             enum psc_activation act)
{
    psc_layer_spec_t L = {.type = PSC_LAYER_CONV2D,
                          .filters = filters,
                          .kernel_size = {kh, kw},
                          .strides = {s, s},
                          .padding = pad,
                          .activation = act,
                          .use_bias = 1};
    snprintf(L.name, sizeof L.name, "%s", name);
    return L;
}

static psc_layer_spec_t pool(const char *name, int k, int s, enum psc_padding pad)
{
    psc_layer_spec_t L = {.type = PSC_LAYER_MAX_POOL2D, .pool_size = {k, k}, .strides = {s, s}, .padding = pad};
    snprintf(L.name, sizeof L.name, "%s", name);
    return L;
}

static psc_layer_spec_t flatten(void)
{
    psc_layer_spec_t L = {.type = PSC_LAYER_FLATTEN};
    snprintf(L.name, sizeof L.name, "flatten");
    return L;
}

static psc_layer_spec_t dropout(float rate)
{
    psc_layer_spec_t L = {.type = PSC_LAYER_DROPOUT, .rate = rate};
    snprintf(L.name, sizeof L.name, "dropout");
    return L;
}

/* ---- a model: spec, variables, slabs and a tower ---- */

#define MAX_LAYERS 8

typedef struct model {
    psc_layer_spec_t layers[MAX_LAYERS];
    psc_job_spec_t spec;
    psc_var_desc_t *vars;
    int nvars;
    int64_t offsets[2 * MAX_LAYERS + 1];
    int64_t nparams;
    float *params, *grads; /* (nparams) */
    int features, classes;
    tower_t *t;
} model_t;

/* rank 1: input (h); rank 3: (h, w, c). Parameters: Keras init from `seed`, then
 * biases set to small random values so that no unit sits at a special point. */
static model_t *model_new(int rank, int h, int w, int c, const psc_layer_spec_t *layers, int nl, int max_batch,
                          uint64_t seed)
{
    model_t *m = calloc(1, sizeof *m);
    assert_non_null(m);
    assert_true(nl <= MAX_LAYERS);
    memcpy(m->layers, layers, (size_t)nl * sizeof *layers);
    m->spec.input_rank = rank;
    m->spec.input_shape[0] = h;
    m->spec.input_shape[1] = rank == 3 ? w : 1;
    m->spec.input_shape[2] = rank == 3 ? c : 1;
    m->spec.layers = m->layers;
    m->spec.num_layers = nl;
    m->features = rank == 3 ? h * w * c : h;
    char err[256] = "";
    int rc = psc_model_variables(&m->spec, &m->vars, &m->nvars, err, sizeof err);
    if (rc) fail_msg("%s", err);
    m->nparams = tower_layout(m->vars, m->nvars, m->offsets);
    m->params = calloc((size_t)m->nparams, sizeof(float));
    m->grads = calloc((size_t)m->nparams, sizeof(float));
    tower_init_params(m->vars, m->nvars, seed, m->params);
    psc_rng_t r;
    psc_rng_seed(&r, seed ^ 0xb1a5);
    for (int i = 0; i < m->nvars; i++)
        if (!m->vars[i].is_step && m->vars[i].rank == 1)
            for (int64_t k = 0; k < m->vars[i].numel; k++)
                m->params[m->offsets[i] + k] = (float)(0.2 * psc_rng_uniform(&r) - 0.1);
    int shapes[MAX_LAYERS][3];
    assert_int_equal(psc_model_shapes(&m->spec, shapes, err, sizeof err), 0);
    m->classes = shapes[nl - 1][2];
    rc = tower_cpu_ops.create(&m->spec, m->vars, m->nvars, max_batch, 0, &m->t, err, sizeof err);
    if (rc) fail_msg("%s", err);
    assert_string_equal(tower_cpu_ops.name, "cpu");
    return m;
}

static void model_free(model_t *m)
{
    tower_destroy(m->t);
    free(m->vars);
    free(m->params);
    free(m->grads);
    free(m);
}

/* A batch of n random examples: x uniform in [-1, 1), y uniform over the classes. */
static void random_batch(uint64_t seed, int n, int features, int classes, float *x, int32_t *y)
{
    psc_rng_t r;
    psc_rng_seed(&r, seed);
    for (int64_t i = 0; i < (int64_t)n * features; i++) x[i] = (float)(2 * psc_rng_uniform(&r) - 1);
    for (int i = 0; i < n; i++) y[i] = (int32_t)psc_rng_below(&r, (uint64_t)classes);
}

/* The mean loss at m->params: evaluate's double sum, or train_step's (with its
 * dropout) when train is set. */
static double loss_at(model_t *m, const float *x, const int32_t *y, int n, int train, uint64_t dseed)
{
    assert_int_equal(tower_set_params(m->t, m->params), 0);
    if (train) {
        float loss;
        int correct;
        assert_int_equal(tower_train_step(m->t, x, y, n, dseed, &loss, &correct), 0);
        return loss;
    }
    double sum = 0;
    int correct = 0;
    assert_int_equal(tower_evaluate(m->t, x, y, n, &sum, &correct), 0);
    return sum / n;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Compares the analytic gradient with central differences on up to `per_var`
 * parameters of every variable; fails when more than max_miss_frac of them have a
 * relative error above tol, or when the median is not well below tol.
 * Relative error: |a - f| / max(|a| + |f|, floor). */
static void check_gradients(model_t *m, const float *x, const int32_t *y, int n, int train, uint64_t dseed, double eps,
                            int per_var, double tol, double max_miss_frac)
{
    float loss;
    int correct;
    assert_int_equal(tower_set_params(m->t, m->params), 0);
    assert_int_equal(tower_train_step(m->t, x, y, n, dseed, &loss, &correct), 0);
    assert_int_equal(tower_get_grads(m->t, m->grads), 0);
    assert_true(isfinite(loss) && loss > 0);

    /* Differences of a float forward pass carry ~1e-7 of absolute noise divided by
     * 2 eps; the floor keeps near-zero gradients from turning that into a large
     * relative error. */
    const double floor = 1e-3;
    psc_rng_t r;
    psc_rng_seed(&r, 1234);
    int checked = 0, missed = 0;
    double *errs = malloc((size_t)m->nparams * sizeof *errs);
    for (int v = 0; v < m->nvars; v++) {
        if (m->vars[v].is_step) continue;
        int64_t numel = m->vars[v].numel;
        int count = (int)PSC_MIN((int64_t)per_var, numel);
        for (int s = 0; s < count; s++) {
            int64_t k = m->offsets[v] + (numel <= per_var ? s : (int64_t)psc_rng_below(&r, (uint64_t)numel));
            float orig = m->params[k];
            float up = (float)(orig + eps), down = (float)(orig - eps);
            m->params[k] = up;
            double lp = loss_at(m, x, y, n, train, dseed);
            m->params[k] = down;
            double lm = loss_at(m, x, y, n, train, dseed);
            m->params[k] = orig;
            double fd = (lp - lm) / ((double)up - (double)down);
            double an = m->grads[k];
            double err = fabs(an - fd) / PSC_MAX(fabs(an) + fabs(fd), floor);
            errs[checked++] = err;
            if (err > tol && ++missed <= 5)
                fprintf(stderr, "  %s[%lld]: analytic %.7g, finite difference %.7g (relative error %.3g)\n",
                        m->vars[v].name, (long long)(k - m->offsets[v]), an, fd, err);
        }
    }
    qsort(errs, (size_t)checked, sizeof *errs, cmp_double);
    double median = errs[checked / 2], p90 = errs[checked * 9 / 10], worst = errs[checked - 1];
    fprintf(stderr, "  %d parameters checked: relative error median %.2g, 90%% %.2g, worst %.2g; %d above %.0e\n",
            checked, median, p90, worst, missed, tol);
    free(errs);
    assert_true(checked >= 20);
    assert_true(missed <= (int)(max_miss_frac * checked));
    assert_true(median < tol / 10);
}

/* Every smooth model: all samples within 1e-2 relative. */
#define SMOOTH_TOL 1e-2
#define EPS 1e-2

static void test_grad_dense_tanh(void **state)
{
    (void)state;
    psc_layer_spec_t L[] = {dense("dense", 7, PSC_ACT_TANH), dense("dense_1", 4, PSC_ACT_NONE)};
    model_t *m = model_new(1, 6, 0, 0, L, 2, 8, 1);
    float x[5 * 6];
    int32_t y[5];
    random_batch(11, 5, 6, 4, x, y);
    check_gradients(m, x, y, 5, 0, 0, EPS, 1000, SMOOTH_TOL, 0);
    model_free(m);
}

static void test_grad_sigmoid(void **state)
{
    (void)state;
    psc_layer_spec_t L[] = {dense("dense", 9, PSC_ACT_SIGMOID), dense("dense_1", 6, PSC_ACT_SIGMOID),
                            dense("dense_2", 3, PSC_ACT_NONE)};
    model_t *m = model_new(1, 5, 0, 0, L, 3, 8, 2);
    float x[6 * 5];
    int32_t y[6];
    random_batch(12, 6, 5, 3, x, y);
    check_gradients(m, x, y, 6, 0, 0, EPS, 1000, SMOOTH_TOL, 0);
    model_free(m);
}

static void test_grad_relu(void **state)
{
    (void)state;
    psc_layer_spec_t L[] = {dense("dense", 12, PSC_ACT_RELU), dense("dense_1", 8, PSC_ACT_RELU),
                            dense("dense_2", 5, PSC_ACT_NONE)};
    model_t *m = model_new(1, 6, 0, 0, L, 3, 8, 3);
    float x[7 * 6];
    int32_t y[7];
    random_batch(13, 7, 6, 5, x, y);
    check_gradients(m, x, y, 7, 0, 0, 1e-3, 60, SMOOTH_TOL, 0.03);
    model_free(m);
}

/* conv valid, stride 2, after a conv same (so the second conv's input gradient,
 * col2im, is checked through the first conv's parameters). */
static void test_grad_conv_valid_stride2(void **state)
{
    (void)state;
    psc_layer_spec_t L[] = {conv("conv2d", 3, 3, 3, 1, PSC_PAD_SAME, PSC_ACT_TANH),
                            conv("conv2d_1", 4, 3, 2, 2, PSC_PAD_VALID, PSC_ACT_SIGMOID), flatten(),
                            dense("dense", 3, PSC_ACT_NONE)};
    model_t *m = model_new(3, 9, 8, 2, L, 4, 4, 4);
    float x[3 * 9 * 8 * 2];
    int32_t y[3];
    random_batch(14, 3, 9 * 8 * 2, 3, x, y);
    check_gradients(m, x, y, 3, 0, 0, EPS, 60, SMOOTH_TOL, 0);
    model_free(m);
}

/* conv same, stride 2, kernel (3, 5) on (8, 7): TF pads 1 row, below only (the
 * odd one goes after), and 4 columns, 2 each side; the first conv is valid with
 * a 2x2 kernel. */
static void test_grad_conv_same_stride2(void **state)
{
    (void)state;
    psc_layer_spec_t L[] = {conv("conv2d", 3, 2, 2, 1, PSC_PAD_VALID, PSC_ACT_TANH),
                            conv("conv2d_1", 4, 3, 5, 2, PSC_PAD_SAME, PSC_ACT_TANH), flatten(),
                            dense("dense", 3, PSC_ACT_NONE)};
    model_t *m = model_new(3, 9, 8, 2, L, 4, 4, 5); /* conv2d out (8, 7, 3); conv2d_1 out (4, 4, 4) */
    float x[3 * 9 * 8 * 2];
    int32_t y[3];
    random_batch(15, 3, 9 * 8 * 2, 3, x, y);
    check_gradients(m, x, y, 3, 0, 0, EPS, 60, SMOOTH_TOL, 0);
    model_free(m);
}

static void test_grad_maxpool(void **state)
{
    (void)state;
    for (int pad = 0; pad < 2; pad++) {
        /* valid: 7x7 pool 2 stride 2 -> 3x3; same: 7x7 pool 3 stride 2 -> 4x4 (padding 1 each side) */
        psc_layer_spec_t L[] = {conv("conv2d", 3, 3, 3, 1, PSC_PAD_SAME, PSC_ACT_TANH),
                                pad ? pool("max_pooling2d", 3, 2, PSC_PAD_SAME) : pool("max_pooling2d", 2, 2, PSC_PAD_VALID),
                                conv("conv2d_1", 2, 2, 2, 1, PSC_PAD_SAME, PSC_ACT_NONE), flatten(),
                                dense("dense", 3, PSC_ACT_NONE)};
        model_t *m = model_new(3, 7, 7, 2, L, 5, 4, 6 + (uint64_t)pad);
        fprintf(stderr, " padding %s\n", pad ? "same" : "valid");
        float x[3 * 7 * 7 * 2];
        int32_t y[3];
        random_batch(16, 3, 7 * 7 * 2, 3, x, y);
        check_gradients(m, x, y, 3, 0, 0, 1e-3, 60, SMOOTH_TOL, 0.03);
        model_free(m);
    }
}

static void test_grad_dropout(void **state)
{
    (void)state;
    psc_layer_spec_t L[] = {dense("dense", 10, PSC_ACT_TANH), dropout(0.4f), dense("dense_1", 3, PSC_ACT_NONE)};
    model_t *m = model_new(1, 4, 0, 0, L, 3, 8, 7);
    float x[6 * 4];
    int32_t y[6];
    random_batch(17, 6, 4, 3, x, y);
    check_gradients(m, x, y, 6, 1, 99, EPS, 1000, SMOOTH_TOL, 0);

    /* The mask is really there: other seeds give other losses; inference is the
     * identity, and train's expected value matches it only on average. */
    float l1, l2, l1b;
    int c;
    assert_int_equal(tower_set_params(m->t, m->params), 0);
    assert_int_equal(tower_train_step(m->t, x, y, 6, 99, &l1, &c), 0);
    assert_int_equal(tower_train_step(m->t, x, y, 6, 100, &l2, &c), 0);
    assert_int_equal(tower_train_step(m->t, x, y, 6, 99, &l1b, &c), 0);
    assert_float_equal(l1, l1b, 0);
    assert_true(l1 != l2);
    model_free(m);
}

/* A dropout layer with rate 0.5: about half the units of the next layer's input
 * are zero, the rest are scaled by 2, seen through the next dense layer's
 * gradient dW = x^T dy, whose rows are zero exactly for dropped units. */
static void test_dropout_mask(void **state)
{
    (void)state;
    enum { IN = 3, HID = 400, N = 2 };
    psc_layer_spec_t L[] = {dense("dense", HID, PSC_ACT_SIGMOID), dropout(0.5f), dense("dense_1", 2, PSC_ACT_NONE)};
    model_t *m = model_new(1, IN, 0, 0, L, 3, N, 8);
    float x[N * IN];
    int32_t y[N];
    random_batch(18, N, IN, 2, x, y);
    float loss;
    int c;
    assert_int_equal(tower_set_params(m->t, m->params), 0);
    assert_int_equal(tower_train_step(m->t, x, y, 1, 5, &loss, &c), 0); /* one example */
    assert_int_equal(tower_get_grads(m->t, m->grads), 0);
    const float *dw = m->grads + m->offsets[3]; /* dense_1/kernel (HID, 2) */
    int zero = 0;
    for (int j = 0; j < HID; j++) zero += dw[j * 2] == 0.0f && dw[j * 2 + 1] == 0.0f;
    assert_true(zero > HID * 4 / 10 && zero < HID * 6 / 10);
    model_free(m);
}

/* Random123's kat_vectors for philox4x32 10 (counter, key -> result). */
static void test_philox_known_answers(void **state)
{
    (void)state;
    static const struct {
        uint32_t ctr[4], key[2], want[4];
    } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
         {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
         {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (size_t i = 0; i < sizeof kat / sizeof kat[0]; i++) {
        psc_philox4_t c;
        memcpy(c.v, kat[i].ctr, sizeof c.v);
        psc_philox4_t out = psc_philox4x32_10(c, kat[i].key[0], kat[i].key[1]);
        for (int k = 0; k < 4; k++) assert_int_equal(out.v[k], kat[i].want[k]);
    }
    assert_int_equal(psc_dropout_threshold(0.0f), 0);
    assert_int_equal(psc_dropout_threshold(0.5f), 0x80000000u);
    assert_int_equal(psc_dropout_threshold(0.25f), 0x40000000u);
}

/* The share of dropped units is the rate: 2^20 units per (rate, seed, layer),
 * within 5 standard deviations of a binomial; and the streams of different
 * seeds, layers and elements differ. */
static void test_dropout_rate(void **state)
{
    (void)state;
    enum { N = 1 << 20 };
    static const float rates[] = {0.1f, 0.25f, 0.5f, 0.9f};
    for (size_t r = 0; r < sizeof rates / sizeof rates[0]; r++) {
        uint32_t th = psc_dropout_threshold(rates[r]);
        for (uint64_t seed = 1; seed < 3; seed++)
            for (uint32_t layer = 0; layer < 2; layer++) {
                int64_t dropped = 0;
                for (uint64_t e = 0; e < N; e++) dropped += psc_dropout_bits(seed, layer, e) < th;
                double share = (double)dropped / N, sd = sqrt(rates[r] * (1.0 - rates[r]) / N);
                if (fabs(share - rates[r]) > 5 * sd)
                    fail_msg("rate %.2f seed %llu layer %u: dropped %.5f", rates[r], (unsigned long long)seed, layer,
                             share);
            }
    }
    /* neighbours in seed, layer and element give unrelated bits */
    int same = 0;
    for (uint64_t e = 0; e < 4096; e++) {
        uint32_t b = psc_dropout_bits(7, 1, e);
        same += b == psc_dropout_bits(8, 1, e);
        same += b == psc_dropout_bits(7, 2, e);
        same += b == psc_dropout_bits(7, 1, e + 1);
        same += b == psc_dropout_bits((uint64_t)7 << 32, 1, e);
    }
    assert_true(same <= 1);
}

/* The tower's mask for example e of a slice that starts at example `first` is
 * unit (first + e) * features + j of the batch: dropout(0.5) on the input, then
 * a dense layer: row j of its kernel's gradient is zero exactly where input unit
 * j was dropped (x has no zeros). Two slices of a batch give the whole batch's
 * loss and gradient; the same slice at another offset does not. */
static void test_dropout_batch_split(void **state)
{
    (void)state;
    enum { F = 64, N = 7, K = 3 };
    psc_layer_spec_t L[] = {dropout(0.5f), dense("dense", 3, PSC_ACT_TANH), dense("dense_1", 2, PSC_ACT_NONE)};
    model_t *m = model_new(1, F, 0, 0, L, 3, N, 21);
    float x[N * F];
    int32_t y[N];
    random_batch(22, N, F, 2, x, y);
    for (int i = 0; i < N * F; i++)
        if (x[i] == 0.0f) x[i] = 0.5f;
    const uint64_t seed = 0x5eed;
    const uint32_t th = psc_dropout_threshold(0.5f);
    float lw, la, lb, lshift;
    int c;
    assert_int_equal(tower_set_params(m->t, m->params), 0);

    /* one example at offset 5: the zero rows of dense/kernel (F, 3) are the drops */
    assert_int_equal(tower_train_step_at(m->t, x, y, 1, seed, 5, &la, &c), 0);
    assert_int_equal(tower_get_grads(m->t, m->grads), 0);
    const float *dw = m->grads + m->offsets[0]; /* dense/kernel */
    int dropped = 0;
    for (int j = 0; j < F; j++) {
        int zero = dw[j * 3] == 0.0f && dw[j * 3 + 1] == 0.0f && dw[j * 3 + 2] == 0.0f;
        int want = psc_dropout_bits(seed, 0, (uint64_t)5 * F + (uint64_t)j) < th;
        if (zero != want) fail_msg("unit %d: %s by the tower, %s by the generator", j, zero ? "dropped" : "kept",
                                   want ? "dropped" : "kept");
        dropped += want;
    }
    assert_true(dropped > 0 && dropped < F);

    /* the whole batch vs its slices [0, K) and [K, N) */
    float *gw = malloc((size_t)m->nparams * sizeof(float)), *ga = malloc((size_t)m->nparams * sizeof(float));
    assert_int_equal(tower_train_step(m->t, x, y, N, seed, &lw, &c), 0);
    assert_int_equal(tower_get_grads(m->t, gw), 0);
    assert_int_equal(tower_train_step_at(m->t, x, y, K, seed, 0, &la, &c), 0);
    assert_int_equal(tower_get_grads(m->t, ga), 0);
    assert_int_equal(tower_train_step_at(m->t, x + K * F, y + K, N - K, seed, K, &lb, &c), 0);
    assert_int_equal(tower_get_grads(m->t, m->grads), 0);
    double lsum = ((double)la * K + (double)lb * (N - K)) / N;
    assert_true(fabs(lsum - lw) <= 1e-6 * fmax(1.0, fabs(lw)));
    double maxdiff = 0, maxabs = 0;
    for (int64_t k = 0; k < m->nparams; k++) {
        double g = ((double)ga[k] * K + (double)m->grads[k] * (N - K)) / N;
        maxdiff = fmax(maxdiff, fabs(g - gw[k]));
        maxabs = fmax(maxabs, fabs((double)gw[k]));
    }
    assert_true(maxabs > 1e-4);
    assert_true(maxdiff <= 1e-6 * fmax(maxabs, 1.0));
    /* the offset matters: the second slice drawn as if it started the batch */
    assert_int_equal(tower_train_step_at(m->t, x + K * F, y + K, N - K, seed, 0, &lshift, &c), 0);
    assert_true(lshift != lb);
    assert_int_equal(tower_train_step_at(m->t, x, y, 1, seed, -1, &la, &c), PSC_EINVAL);
    free(gw);
    free(ga);
    model_free(m);
}

/* ---- closed forms ---- */

/* Logits = x through an identity dense kernel with no bias. */
static void test_softmax_xent_known(void **state)
{
    (void)state;
    psc_layer_spec_t L[] = {dense("dense", 3, PSC_ACT_NONE)};
    L[0].use_bias = 0;
    model_t *m = model_new(1, 3, 0, 0, L, 1, 4, 1);
    memset(m->params, 0, 9 * sizeof(float));
    m->params[0] = m->params[4] = m->params[8] = 1;
    enum { N = 4 };
    const float x[N * 3] = {1, 2, 3, 1, 2, 3, 1000, 0, -1000, 0, 0, 0};
    const int32_t y[N] = {2, 0, 1, 1};
    /* by hand: log(e + e^2 + e^3) = 3.40760596444438 */
    const double lse = 3.40760596444438;
    const double want[N] = {lse - 3, lse - 1, 1000, log(3.0)};
    double mean = (want[0] + want[1] + want[2] + want[3]) / N;
    float loss = 0;
    int correct = -1;
    assert_int_equal(tower_set_params(m->t, m->params), 0);
    assert_int_equal(tower_train_step(m->t, x, y, N, 0, &loss, &correct), 0);
    assert_true(isfinite(loss));
    assert_float_equal(loss, mean, 1e-4);
    assert_int_equal(correct, 1); /* row 0 argmax 2 = label; row 3 ties go to class 0 */
    double sum = 0.5;
    int c2 = 10;
    assert_int_equal(tower_evaluate(m->t, x, y, N, &sum, &c2), 0);
    assert_float_equal(sum, 0.5 + mean * N, 1e-9 * N * 1000);
    assert_int_equal(c2, 11); /* adds */

    /* dW[i][j] = sum_n x[n][i] (softmax(x_n)[j] - [j == y_n]) / N */
    assert_int_equal(tower_get_grads(m->t, m->grads), 0);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            double g = 0;
            for (int n = 0; n < N; n++) {
                double zmax = fmax(x[n * 3], fmax(x[n * 3 + 1], x[n * 3 + 2]));
                double s = exp(x[n * 3] - zmax) + exp(x[n * 3 + 1] - zmax) + exp(x[n * 3 + 2] - zmax);
                double p = exp(x[n * 3 + j] - zmax) / s;
                g += x[n * 3 + i] * (p - (j == y[n])) / N;
            }
            assert_float_equal(m->grads[i * 3 + j], g, 1e-5 * fmax(1, fabs(g)));
        }
    model_free(m);
}

/* Zero weights: every logit is 0, the loss is ln(10) exactly, the last bias's
 * gradient is the mean of (1/10 - onehot(y)). */
static void test_zero_weights_ln10(void **state)
{
    (void)state;
    psc_layer_spec_t L[] = {dense("dense", 256, PSC_ACT_RELU), dense("dense_1", 128, PSC_ACT_RELU),
                            dense("dense_2", 10, PSC_ACT_NONE)};
    enum { N = 32 };
    model_t *m = model_new(1, 784, 0, 0, L, 3, N, 1);
    memset(m->params, 0, (size_t)m->nparams * sizeof(float));
    static float x[N * 784];
    int32_t y[N];
    random_batch(3, N, 784, 10, x, y);
    float loss;
    int correct;
    assert_int_equal(tower_set_params(m->t, m->params), 0);
    assert_int_equal(tower_train_step(m->t, x, y, N, 0, &loss, &correct), 0);
    assert_float_equal(loss, log(10.0), 1e-6);
    assert_int_equal(tower_get_grads(m->t, m->grads), 0);
    const float *db = m->grads + m->offsets[6];
    for (int j = 0; j < 10; j++) {
        int hits = 0;
        for (int n = 0; n < N; n++) hits += y[n] == j;
        assert_float_equal(db[j], 0.1 - (double)hits / N, 1e-6);
    }

    /* Keras init instead of zeros: close to ln(10) too (logits near 0) */
    tower_init_params(m->vars, m->nvars, 42, m->params);
    for (int64_t i = 0; i < (int64_t)N * 784; i++) x[i] = 0.5f * (x[i] + 1); /* pixels in [0, 1] */
    assert_int_equal(tower_set_params(m->t, m->params), 0);
    assert_int_equal(tower_train_step(m->t, x, y, N, 0, &loss, &correct), 0);
    assert_true(fabs(loss - log(10.0)) < 0.5);
    model_free(m);
}

/* ---- forward values: TF padding, pooling, dropout scale ---- */

/* The logits of one example, up to a common constant: z_j - z_0 = loss(y=0) - loss(y=j). */
static void logit_diffs(model_t *m, const float *x, double *d)
{
    double l0 = 0, lj;
    int c = 0;
    int32_t y = 0;
    assert_int_equal(tower_set_params(m->t, m->params), 0);
    assert_int_equal(tower_evaluate(m->t, x, &y, 1, &l0, &c), 0);
    for (int j = 0; j < m->classes; j++) {
        y = j;
        lj = 0;
        assert_int_equal(tower_evaluate(m->t, x, &y, 1, &lj, &c), 0);
        d[j] = l0 - lj;
    }
}

static void expect_logits(model_t *m, const float *x, const double *want)
{
    double d[16];
    logit_diffs(m, x, d);
    for (int j = 0; j < m->classes; j++)
        if (fabs(d[j] - (want[j] - want[0])) > 1e-4)
            fail_msg("logit %d: z_j - z_0 = %g, want %g", j, d[j], want[j] - want[0]);
}

/* A (h, w, 1) input through one conv2d or max_pool2d layer and flatten: the
 * logits are that layer's outputs. Conv kernels are all ones, no bias. */
static void test_forward_padding(void **state)
{
    (void)state;
    float ones[25], idx[25], neg[25];
    for (int i = 0; i < 25; i++) ones[i] = 1, idx[i] = (float)i, neg[i] = (float)i - 100;

    /* conv 3x3 stride 2 same on 4x4: out 2x2, one row/column of padding at the
     * bottom/right (TF), so the windows hold 9, 6, 6, 4 ones */
    psc_layer_spec_t L[] = {conv("conv2d", 1, 3, 3, 2, PSC_PAD_SAME, PSC_ACT_NONE), flatten()};
    L[0].use_bias = 0;
    model_t *m = model_new(3, 4, 4, 1, L, 2, 1, 1);
    for (int k = 0; k < 9; k++) m->params[k] = 1;
    expect_logits(m, ones, (const double[]){9, 6, 6, 4});
    model_free(m);

    /* the same on 4 rows x 3 columns: no padding above, one column each side */
    m = model_new(3, 4, 3, 1, L, 2, 1, 1);
    for (int k = 0; k < 9; k++) m->params[k] = 1;
    expect_logits(m, ones, (const double[]){6, 6, 4, 4});
    model_free(m);

    /* conv 3x3 stride 2 valid on 5x5 of x = 5 * row + col: 9 x the window centres */
    L[0] = conv("conv2d", 1, 3, 3, 2, PSC_PAD_VALID, PSC_ACT_NONE);
    L[0].use_bias = 0;
    m = model_new(3, 5, 5, 1, L, 2, 1, 1);
    for (int k = 0; k < 9; k++) m->params[k] = 1;
    expect_logits(m, idx, (const double[]){9 * 6, 9 * 8, 9 * 16, 9 * 18});
    model_free(m);

    /* conv 2x2 stride 1 same on 2x2 with an odd kernel sum: padding after */
    L[0] = conv("conv2d", 1, 2, 2, 1, PSC_PAD_SAME, PSC_ACT_NONE);
    L[0].use_bias = 0;
    m = model_new(3, 2, 2, 1, L, 2, 1, 1);
    m->params[0] = 1, m->params[1] = 10, m->params[2] = 100, m->params[3] = 1000; /* (ky, kx) */
    expect_logits(m, idx, (const double[]){10 * 1 + 100 * 2 + 1000 * 3, 1 * 1 + 100 * 3, 1 * 2 + 10 * 3, 1 * 3});
    model_free(m);

    /* max pool 3x3 stride 2 same on 4x4 of negative values: padding never wins */
    psc_layer_spec_t P[] = {pool("max_pooling2d", 3, 2, PSC_PAD_SAME), flatten()};
    m = model_new(3, 4, 4, 1, P, 2, 1, 1);
    expect_logits(m, neg, (const double[]){10 - 100, 11 - 100, 14 - 100, 15 - 100});
    model_free(m);

    /* the same on 4 rows x 3 columns (x = 3 * row + col - 100): one column of
     * padding each side, none above */
    m = model_new(3, 4, 3, 1, P, 2, 1, 1);
    expect_logits(m, neg, (const double[]){7 - 100, 8 - 100, 10 - 100, 11 - 100});
    model_free(m);

    /* max pool 2x2 stride 1 valid on 3x3 of decreasing values: the top-left wins */
    float dec[9];
    for (int i = 0; i < 9; i++) dec[i] = (float)(9 - i);
    P[0] = pool("max_pooling2d", 2, 1, PSC_PAD_VALID);
    m = model_new(3, 3, 3, 1, P, 2, 1, 1);
    expect_logits(m, dec, (const double[]){9, 8, 6, 5});
    model_free(m);
}

/* Inverted dropout: a kept unit is scaled by 1 / (1 - rate) in training. Model:
 * dropout(0.5) then an identity dense layer, on x = (1, 0): z_0 - z_1 is 0 or 2. */
static void test_dropout_scale(void **state)
{
    (void)state;
    psc_layer_spec_t L[] = {dropout(0.5f), dense("dense", 2, PSC_ACT_NONE)};
    L[1].use_bias = 0;
    model_t *m = model_new(1, 2, 0, 0, L, 2, 1, 1);
    m->params[0] = 1, m->params[1] = 0, m->params[2] = 0, m->params[3] = 1;
    assert_int_equal(tower_set_params(m->t, m->params), 0);
    const float x[2] = {1, 0};
    int kept = 0, dropped = 0;
    for (uint64_t seed = 0; seed < 64; seed++) {
        float l0, l1;
        int c;
        int32_t y0 = 0, y1 = 1;
        assert_int_equal(tower_train_step(m->t, x, &y0, 1, seed, &l0, &c), 0);
        assert_int_equal(tower_train_step(m->t, x, &y1, 1, seed, &l1, &c), 0);
        double diff = (double)l1 - l0; /* z_0 - z_1 */
        if (fabs(diff - 2) < 1e-5) kept++;
        else if (fabs(diff) < 1e-5) dropped++;
        else fail_msg("seed %llu: z_0 - z_1 = %g, want 0 or 2", (unsigned long long)seed, diff);
    }
    assert_true(kept > 16 && dropped > 16);
    /* inference: the identity */
    double d[2];
    logit_diffs(m, x, d);
    assert_float_equal(d[1], -1, 1e-6);
    model_free(m);
}

/* ---- training ---- */

/* Four Gaussian-free clusters at the corners of a square, 2 features, 4 classes:
 * a 2-16-4 MLP with plain SGD fits them all. */
static void test_sgd_fits_toy_set(void **state)
{
    (void)state;
    enum { N = 64, F = 2, C = 4 };
    psc_layer_spec_t L[] = {dense("dense", 16, PSC_ACT_TANH), dense("dense_1", C, PSC_ACT_NONE)};
    model_t *m = model_new(1, F, 0, 0, L, 2, N, 9);
    float x[N * F];
    int32_t y[N];
    psc_rng_t r;
    psc_rng_seed(&r, 77);
    for (int i = 0; i < N; i++) {
        y[i] = i % C;
        x[i * F] = (float)((y[i] & 1 ? 1 : -1) + 0.6 * (psc_rng_uniform(&r) - 0.5));
        x[i * F + 1] = (float)((y[i] & 2 ? 1 : -1) + 0.6 * (psc_rng_uniform(&r) - 0.5));
    }
    float loss = 0, first = 0;
    int correct = 0;
    for (int step = 0; step < 300; step++) {
        assert_int_equal(tower_set_params(m->t, m->params), 0);
        assert_int_equal(tower_train_step(m->t, x, y, N, (uint64_t)step, &loss, &correct), 0);
        assert_int_equal(tower_get_grads(m->t, m->grads), 0);
        if (step == 0) first = loss;
        for (int64_t k = 0; k < m->nparams; k++) m->params[k] -= 0.5f * m->grads[k];
        if (correct == N && loss < 0.05f) break;
    }
    double sum = 0;
    int hits = 0;
    assert_int_equal(tower_set_params(m->t, m->params), 0);
    assert_int_equal(tower_evaluate(m->t, x, y, N, &sum, &hits), 0);
    fprintf(stderr, "  loss %.4f -> %.4f, train accuracy %d/%d\n", first, sum / N, hits, N);
    assert_int_equal(hits, N);
    assert_true(sum / N < first / 4);
    model_free(m);
}

/* ---- the replication invariant ---- */

/* The batch of 20 is more than conv2d_1's im2col scratch holds (13 examples of
 * 28x28 positions x 200 columns within tower_cpu.c's 2^21-float budget), so the full
 * batch runs that layer in two chunks — weights accumulated over chunks, input
 * gradient folded back per chunk — while each half runs in one: the invariant
 * also checks the chunking. */
static void test_split_batch(void **state)
{
    (void)state;
    enum { N = 20, N1 = 12, F = 28 * 28 * 8 };
    psc_layer_spec_t L[] = {conv("conv2d", 8, 1, 1, 1, PSC_PAD_SAME, PSC_ACT_TANH),
                            conv("conv2d_1", 4, 5, 5, 1, PSC_PAD_SAME, PSC_ACT_RELU),
                            pool("max_pooling2d", 2, 2, PSC_PAD_VALID), flatten(), dense("dense", 5, PSC_ACT_NONE)};
    model_t *m = model_new(3, 28, 28, 8, L, 5, N, 10);
    static float x[N * F];
    int32_t y[N];
    random_batch(20, N, F, 5, x, y);
    float *full = malloc((size_t)m->nparams * sizeof(float));
    float *half = malloc((size_t)m->nparams * sizeof(float));
    float loss, l1, l2;
    int c, c1, c2;
    assert_int_equal(tower_set_params(m->t, m->params), 0);
    assert_int_equal(tower_train_step(m->t, x, y, N, 0, &loss, &c), 0);
    assert_int_equal(tower_get_grads(m->t, full), 0);
    assert_int_equal(tower_train_step(m->t, x, y, N1, 0, &l1, &c1), 0);
    assert_int_equal(tower_get_grads(m->t, m->grads), 0);
    assert_int_equal(tower_train_step(m->t, x + N1 * F, y + N1, N - N1, 0, &l2, &c2), 0);
    assert_int_equal(tower_get_grads(m->t, half), 0);
    double worst = 0;
    for (int64_t k = 0; k < m->nparams; k++) {
        double avg = ((double)N1 * m->grads[k] + (double)(N - N1) * half[k]) / N;
        worst = fmax(worst, fabs(avg - full[k]));
    }
    fprintf(stderr, "  max |weighted mean of halves - full| = %.3g\n", worst);
    assert_true(worst <= 1e-5);
    assert_float_equal(loss, (N1 * l1 + (N - N1) * l2) / N, 1e-5);
    assert_int_equal(c, c1 + c2);
    free(full);
    free(half);
    model_free(m);
}

/* ---- layout, initialization, argument checks ---- */

static void test_layout_and_init(void **state)
{
    (void)state;
    psc_layer_spec_t L[] = {conv("conv2d", 8, 3, 3, 1, PSC_PAD_SAME, PSC_ACT_RELU), flatten(),
                            dense("dense", 10, PSC_ACT_NONE)};
    model_t *m = model_new(3, 6, 6, 2, L, 3, 2, 42);
    assert_int_equal(m->nvars, 5);
    assert_int_equal(m->offsets[0], 0);
    assert_int_equal(m->offsets[1], 0);                /* conv2d/kernel (3, 3, 2, 8) */
    assert_int_equal(m->offsets[2], 144);              /* conv2d/bias (8) */
    assert_int_equal(m->offsets[3], 152);              /* dense/kernel (288, 10) */
    assert_int_equal(m->offsets[4], 152 + 2880);       /* dense/bias (10) */
    assert_int_equal(m->nparams, 152 + 2880 + 10);

    float *p = calloc((size_t)m->nparams, sizeof(float)), *q = calloc((size_t)m->nparams, sizeof(float));
    tower_init_params(m->vars, m->nvars, 42, p);
    tower_init_params(m->vars, m->nvars, 42, q);
    assert_memory_equal(p, q, (size_t)m->nparams * sizeof(float)); /* deterministic */
    double conv_limit = sqrt(6.0 / (9 * 2 + 9 * 8)), dense_limit = sqrt(6.0 / (288 + 10));
    double conv_max = 0, dense_max = 0, dense_sum = 0;
    for (int k = 0; k < 144; k++) conv_max = fmax(conv_max, fabs(p[k]));
    for (int k = 144; k < 152; k++) assert_float_equal(p[k], 0, 0);
    for (int k = 152; k < 152 + 2880; k++) {
        dense_max = fmax(dense_max, fabs(p[k]));
        dense_sum += p[k] * p[k];
    }
    for (int k = 152 + 2880; k < m->nparams; k++) assert_float_equal(p[k], 0, 0);
    assert_true(conv_max <= conv_limit && conv_max > 0.9 * conv_limit);
    assert_true(dense_max <= dense_limit && dense_max > 0.95 * dense_limit);
    /* uniform(-a, a) has variance a^2 / 3 */
    assert_float_equal(dense_sum / 2880, dense_limit * dense_limit / 3, 0.1 * dense_limit * dense_limit / 3);

    /* each variable has its own stream: (seed, i) */
    tower_init_params(m->vars, m->nvars, 43, q);
    assert_memory_not_equal(p, q, 144 * sizeof(float));
    psc_rng_t r;
    psc_rng_seed(&r, psc_seed_mix(42, 3));
    assert_float_equal(p[152], (float)((2 * psc_rng_uniform(&r) - 1) * dense_limit), 0);
    free(p);
    free(q);
    model_free(m);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    psc_layer_spec_t L[] = {dense("dense", 4, PSC_ACT_RELU), dense("dense_1", 3, PSC_ACT_NONE)};
    model_t *m = model_new(1, 5, 0, 0, L, 2, 4, 1);
    float x[5 * 5] = {0}, loss;
    int32_t y[5] = {0, 1, 2, 0, 1};
    int c;
    double sum = 0;
    assert_int_equal(tower_train_step(m->t, x, y, 5, 0, &loss, &c), PSC_EINVAL); /* > max_batch */
    assert_int_equal(tower_train_step(m->t, x, y, 0, 0, &loss, &c), PSC_EINVAL);
    assert_int_equal(tower_evaluate(m->t, x, y, 5, &sum, &c), PSC_EINVAL);
    y[1] = 3;
    assert_int_equal(tower_train_step(m->t, x, y, 4, 0, &loss, &c), PSC_EINVAL); /* label out of range */
    y[1] = -1;
    assert_int_equal(tower_evaluate(m->t, x, y, 4, &sum, &c), PSC_EINVAL);
    y[1] = 1;
    assert_int_equal(tower_train_step(m->t, x, y, 4, 0, &loss, &c), 0);

    /* variables of another model */
    char err[256] = "";
    tower_t *t = NULL;
    psc_var_desc_t vars[5];
    memcpy(vars, m->vars, sizeof vars);
    vars[1].shape[1] = 5;
    vars[1].numel = 25;
    assert_int_equal(tower_cpu_ops.create(&m->spec, vars, m->nvars, 4, 0, &t, err, sizeof err), PSC_EMISMATCH);
    assert_null(t);
    assert_non_null(strstr(err, "dense/kernel"));
    assert_int_equal(tower_cpu_ops.create(&m->spec, m->vars, m->nvars - 1, 4, 0, &t, err, sizeof err), PSC_EMISMATCH);
    assert_int_equal(tower_cpu_ops.create(&m->spec, m->vars, m->nvars, 0, 0, &t, err, sizeof err), PSC_EINVAL);
    tower_destroy(NULL);
    model_free(m);
}

/* ---- the CTR interaction's loops ---- */

/* The interaction one dot and one column at a time (the loops the CPU backend
 * had before it worked in blocks): each dot sums over c from 0, each dv entry
 * over the partners b in order from 0. */
static void interact_ref(const float *v, const float *dout, int ldo, int n, int P, int D, float *out, float *dv)
{
    for (int i = 0; i < n; i++) {
        const float *ve = v + (int64_t)i * P * D, *g = dout + (int64_t)i * ldo;
        float *o = out + (int64_t)i * ldo;
        for (int a = 0; a < P; a++)
            for (int b = a + 1; b < P; b++) {
                float dot = 0.0f;
                for (int c = 0; c < D; c++) dot += ve[a * D + c] * ve[b * D + c];
                *o++ = dot;
            }
        for (int a = 0; a < P; a++)
            for (int c = 0; c < D; c++) {
                float s = 0.0f;
                for (int b = 0; b < P; b++) {
                    if (b == a) continue;
                    int x = a < b ? a : b, y = a < b ? b : a;
                    s += g[x * P - x * (x + 1) / 2 + y - x - 1] * ve[b * D + c];
                }
                dv[((int64_t)i * P + a) * D + c] = s;
            }
    }
}

/* The CPU backend's interaction (8 dots or 8 columns at a time, vectorized)
 * gives the one-at-a-time loops' results bit for bit, for widths below, at
 * and above a block and not multiples of it, and P from 2 to 100. */
static void test_interaction_blocks(void **state)
{
    (void)state;
    const tower_backend_ops_t *be = tower_cpu_ops.backend;
    const int shapes[][3] = {{7, 2, 3}, {33, 5, 4}, {9, 27, 16}, {64, 27, 8}, {5, 40, 24}, {3, 9, 7}, {4, 100, 9}};
    psc_rng_t rng;
    psc_rng_seed(&rng, 11);
    for (size_t s = 0; s < PSC_ARRAY_LEN(shapes); s++) {
        int n = shapes[s][0], P = shapes[s][1], D = shapes[s][2], ldo = P * (P - 1) / 2 + 5;
        size_t nv = (size_t)n * (size_t)P * (size_t)D, no = (size_t)n * (size_t)ldo;
        float *v = malloc(nv * sizeof *v), *g = malloc(no * sizeof *g), *out = calloc(no, sizeof *out),
              *want = calloc(no, sizeof *want), *dv = malloc(nv * sizeof *dv), *dv_want = malloc(nv * sizeof *dv);
        for (size_t i = 0; i < nv; i++) v[i] = (float)psc_rng_uniform(&rng) * 2 - 1;
        for (size_t i = 0; i < no; i++) g[i] = (float)psc_rng_uniform(&rng) * 2 - 1;
        assert_int_equal(be->interact_fwd(NULL, v, n, P, D, out, ldo), 0);
        assert_int_equal(be->interact_bwd(NULL, v, g, ldo, n, P, D, dv), 0);
        interact_ref(v, g, ldo, n, P, D, want, dv_want);
        assert_memory_equal(out, want, no * sizeof *out);
        assert_memory_equal(dv, dv_want, nv * sizeof *dv);
        free(v), free(g), free(out), free(want), free(dv), free(dv_want);
    }
}

/* The embedding bags one column at a time (the CPU backend's loops before it
 * worked in blocks): forward, each bag's weighted sum from 0 in bag order;
 * backward, each gradient added to its rows in the bags' order. */
static void bags_ref(const float *rows, float *drows, int dim, const int32_t *off, const int32_t *idx, const float *w,
                     int n, int nslots, int slot0, int nbags, float *out, const float *dout, int ldo)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < nbags; j++) {
            const int32_t *bag = off + i * nslots + slot0 + j;
            for (int c = 0; c < dim; c++) {
                float s = 0.0f;
                for (int32_t k = bag[0]; k < bag[1]; k++) s += w[k] * rows[idx[k] * dim + c];
                out[i * ldo + j * dim + c] = s;
            }
            for (int32_t k = bag[0]; k < bag[1]; k++)
                for (int c = 0; c < dim; c++) drows[idx[k] * dim + c] += w[k] * dout[i * ldo + j * dim + c];
        }
}

/* The CPU backend's bags (blocks of 8 columns) give the plain loops' results
 * bit for bit: widths below, at, above and between blocks, bags of 0 to 4
 * rows, rows in several bags (their gradients add up in order). */
static void test_bag_blocks(void **state)
{
    (void)state;
    const tower_backend_ops_t *be = tower_cpu_ops.backend;
    psc_rng_t rng;
    psc_rng_seed(&rng, 12);
    const int dims[] = {3, 8, 13, 16, 24};
    enum { N = 37, SLOTS = 5, SLOT0 = 1, NBAGS = 3, NROWS = 20 };
    for (size_t d = 0; d < PSC_ARRAY_LEN(dims); d++) {
        int dim = dims[d], ldo = NBAGS * dim + 2;
        int32_t off[N * SLOTS + 1], idx[N * SLOTS * 4];
        float w[N * SLOTS * 4];
        off[0] = 0;
        for (int b = 0; b < N * SLOTS; b++) {
            int len = (int)psc_rng_below(&rng, 5);
            off[b + 1] = off[b] + len;
            for (int k = off[b]; k < off[b + 1]; k++) {
                idx[k] = (int32_t)psc_rng_below(&rng, NROWS);
                w[k] = (float)psc_rng_uniform(&rng) * 2 - 1;
            }
        }
        size_t nr = (size_t)NROWS * (size_t)dim, no = (size_t)N * (size_t)ldo;
        float *rows = malloc(nr * sizeof *rows), *dout = malloc(no * sizeof *dout), *out = calloc(no, sizeof *out),
              *want = calloc(no, sizeof *want), *drows = malloc(nr * sizeof *drows),
              *drows_want = malloc(nr * sizeof *drows);
        for (size_t i = 0; i < nr; i++) rows[i] = (float)psc_rng_uniform(&rng) * 2 - 1;
        for (size_t i = 0; i < no; i++) dout[i] = (float)psc_rng_uniform(&rng) * 2 - 1;
        for (size_t i = 0; i < nr; i++) drows[i] = drows_want[i] = 0.25f * (float)(i % 7);
        assert_int_equal(be->bag_fwd(NULL, rows, dim, off, idx, w, N, SLOTS, SLOT0, NBAGS, out, ldo), 0);
        assert_int_equal(be->bag_bwd(NULL, drows, dim, off, idx, w, N, SLOTS, SLOT0, NBAGS, dout, ldo), 0);
        bags_ref(rows, drows_want, dim, off, idx, w, N, SLOTS, SLOT0, NBAGS, want, dout, ldo);
        assert_memory_equal(out, want, no * sizeof *out);
        assert_memory_equal(drows, drows_want, nr * sizeof *drows);
        free(rows), free(dout), free(out), free(want), free(drows), free(drows_want);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_interaction_blocks),
        cmocka_unit_test(test_bag_blocks),
        cmocka_unit_test(test_grad_dense_tanh),
        cmocka_unit_test(test_grad_sigmoid),
        cmocka_unit_test(test_grad_relu),
        cmocka_unit_test(test_grad_conv_valid_stride2),
        cmocka_unit_test(test_grad_conv_same_stride2),
        cmocka_unit_test(test_grad_maxpool),
        cmocka_unit_test(test_grad_dropout),
        cmocka_unit_test(test_dropout_mask),
        cmocka_unit_test(test_philox_known_answers),
        cmocka_unit_test(test_dropout_rate),
        cmocka_unit_test(test_dropout_batch_split),
        cmocka_unit_test(test_forward_padding),
        cmocka_unit_test(test_dropout_scale),
        cmocka_unit_test(test_softmax_xent_known),
        cmocka_unit_test(test_zero_weights_ln10),
        cmocka_unit_test(test_sgd_fits_toy_set),
        cmocka_unit_test(test_split_batch),
        cmocka_unit_test(test_layout_and_init),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
