/* test_tower_cuda — the CUDA tower (worker/tower/tower_cuda.cu) against the CPU tower
 * (worker/tower/tower_cpu.c), the reference, as ggml's test-backend-ops does: the
 * same model, parameters, batch and dropout seed on both, and every result
 * compared. Skipped (exit 77) when the build has no CUDA backend or no GPU is
 * visible.
 *
 * Compared per step: the mean loss, the correct count, every gradient variable,
 * and evaluate()'s loss sum and correct count (which it adds to the caller's).
 * Error measure, per tensor (b = CPU, a = CUDA):
 *     rel(a, b) = max_i |a_i - b_i| / max(max_i |b_i|, 1e-6)
 * and every tensor must have rel <= 1e-3 (the GEMMs run in FP32 on both; the
 * differences are summation order and a few ulps of tanhf/expf). Correct counts
 * must be equal.
 *
 * Models, one purpose each: dense with each activation; conv2d valid and same,
 * strides 1 and 2, each activation, behind another conv so that the tested
 * conv's input gradient (col2im) reaches the first conv's variables; max_pool2d
 * valid, same and overlapping (stride < window); dropout (the same seed must
 * give the same masks: the same units dropped on both); flatten; a conv whose
 * im2col is chunked over the batch on both backends; then a full CNN training
 * step (conv-pool-conv-pool-dense-dropout-dense) and reduce_grads of two towers
 * against the CPU's reduce; more than 32 classes (the loss kernel's lanes loop
 * over a row), layers without bias, batches over 512 examples; a worker's
 * towers (worker/tower_group.c) on gpu:0,gpu:1, gpu:0,gpu:0 and three towers on two
 * devices against one CPU tower on the whole batch. Also the argument checks
 * and a missing device. The CTR tower (tower_ctr.c) on both backends: DLRM with
 * a wide part on batches of 37 and 600 examples (on the second device where
 * there is one), and a concat model over valued bags: loss, logits, every dense
 * and row gradient, and predict's logits.
 *
 * Built twice: against the real CUDA tower (label cuda, needs a GPU), and as
 * unit.test_tower_cuda_emu against the unchanged tower_cuda.cu on the emulated
 * CUDA of tests/cuda_emu (cuda_emu_active(): two emulated devices; the towers run
 * with peer access and without; any mistake the emulation reports fails).
 */
#include "job_spec.h"
#include "model_spec.h"
#include "psc.h"
#include "rng.h"
#include "tower.h"
#include "tower_group.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cuda_emu_cmocka.h" /* the emulated build (tests/cuda_emu): peer access on/off, mistakes seen */
#include "tower_ctr.h"
#include "tower_ctr_fixture.h" /* the CTR models and batches */

#define TOL 1e-3

static const tower_ops_t *cuda;

/* ---- specs by hand (as test_tower_cpu.c) ---- */

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

static psc_layer_spec_t dropout(const char *name, float rate)
{
    psc_layer_spec_t L = {.type = PSC_LAYER_DROPOUT, .rate = rate};
    snprintf(L.name, sizeof L.name, "%s", name);
    return L;
}

/* ---- a model on both backends ---- */

#define MAX_LAYERS 10

typedef struct pair {
    psc_layer_spec_t layers[MAX_LAYERS];
    psc_job_spec_t spec;
    psc_var_desc_t *vars;
    int nvars;
    int64_t offsets[2 * MAX_LAYERS + 1];
    int64_t nparams;
    float *params;           /* (nparams) */
    float *gcpu, *gcuda;     /* (nparams) */
    int features, classes, max_batch;
    tower_t *cpu, *gpu;
} pair_t;

/* rank 1: input (h); rank 3: (h, w, c). Keras init from seed, biases small random. */
static pair_t *pair_new(int rank, int h, int w, int c, const psc_layer_spec_t *layers, int nl, int max_batch,
                        uint64_t seed)
{
    pair_t *p = calloc(1, sizeof *p);
    assert_non_null(p);
    assert_true(nl <= MAX_LAYERS);
    memcpy(p->layers, layers, (size_t)nl * sizeof *layers);
    p->spec.input_rank = rank;
    p->spec.input_shape[0] = h;
    p->spec.input_shape[1] = rank == 3 ? w : 1;
    p->spec.input_shape[2] = rank == 3 ? c : 1;
    p->spec.layers = p->layers;
    p->spec.num_layers = nl;
    p->features = rank == 3 ? h * w * c : h;
    p->max_batch = max_batch;
    char err[256] = "";
    if (psc_model_variables(&p->spec, &p->vars, &p->nvars, err, sizeof err)) fail_msg("%s", err);
    p->nparams = tower_layout(p->vars, p->nvars, p->offsets);
    p->params = calloc((size_t)p->nparams + 1, sizeof(float));
    p->gcpu = calloc((size_t)p->nparams + 1, sizeof(float));
    p->gcuda = calloc((size_t)p->nparams + 1, sizeof(float));
    tower_init_params(p->vars, p->nvars, seed, p->params);
    psc_rng_t r;
    psc_rng_seed(&r, seed ^ 0xb1a5);
    for (int i = 0; i < p->nvars; i++)
        if (!p->vars[i].is_step && p->vars[i].rank == 1)
            for (int64_t k = 0; k < p->vars[i].numel; k++)
                p->params[p->offsets[i] + k] = (float)(0.2 * psc_rng_uniform(&r) - 0.1);
    int shapes[MAX_LAYERS][3];
    assert_int_equal(psc_model_shapes(&p->spec, shapes, err, sizeof err), 0);
    p->classes = shapes[nl - 1][2];
    if (tower_cpu_ops.create(&p->spec, p->vars, p->nvars, max_batch, 0, &p->cpu, err, sizeof err)) fail_msg("%s", err);
    if (cuda->create(&p->spec, p->vars, p->nvars, max_batch, 0, &p->gpu, err, sizeof err)) fail_msg("%s", err);
    assert_ptr_equal(p->gpu->ops, cuda);
    return p;
}

static void pair_free(pair_t *p)
{
    tower_destroy(p->cpu);
    tower_destroy(p->gpu);
    free(p->vars);
    free(p->params);
    free(p->gcpu);
    free(p->gcuda);
    free(p);
}

/* A batch of n random examples: x uniform in [-1, 1), y uniform over the classes. */
static void random_batch(uint64_t seed, int n, int features, int classes, float *x, int32_t *y)
{
    psc_rng_t r;
    psc_rng_seed(&r, seed);
    for (int64_t i = 0; i < (int64_t)n * features; i++) x[i] = (float)(2 * psc_rng_uniform(&r) - 1);
    for (int i = 0; i < n; i++) y[i] = (int32_t)psc_rng_below(&r, (uint64_t)classes);
}

/* max|a - b| / max(max|b|, 1e-6): b is the reference. NaN anywhere gives NaN
 * (which fails every "<= TOL"): fmax alone would drop it. */
static double rel_err(const float *a, const float *b, int64_t n)
{
    double diff = 0, scale = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i])) return NAN;
        diff = fmax(diff, fabs((double)a[i] - (double)b[i]));
        scale = fmax(scale, fabs((double)b[i]));
    }
    return diff / fmax(scale, 1e-6);
}

static double rel_err_scalar(double a, double b) { return fabs(a - b) / fmax(fabs(b), 1e-6); }

/* Every gradient variable of the last steps (gcuda against gcpu) within TOL. */
static void expect_grads_close(const pair_t *p, const char *what)
{
    for (int v = 0; v < p->nvars; v++) {
        if (p->vars[v].is_step) continue;
        double e = rel_err(p->gcuda + p->offsets[v], p->gcpu + p->offsets[v], p->vars[v].numel);
        if (!(e <= TOL)) fail_msg("%s: gradient %s: relative error %.3g > %g", what, p->vars[v].name, e, TOL);
    }
}

/* One train_step and one evaluate of the same batch on both backends, compared.
 * Returns the worst relative error seen (for the log). */
static double compare_step(pair_t *p, const float *x, const int32_t *y, int n, uint64_t seed, const char *what)
{
    float lc = -1, lg = -2;
    int cc = -1, cg = -2;
    assert_int_equal(tower_set_params(p->cpu, p->params), 0);
    assert_int_equal(tower_set_params(p->gpu, p->params), 0);
    assert_int_equal(tower_train_step(p->cpu, x, y, n, seed, &lc, &cc), 0);
    assert_int_equal(tower_train_step(p->gpu, x, y, n, seed, &lg, &cg), 0);
    assert_int_equal(tower_get_grads(p->cpu, p->gcpu), 0);
    assert_int_equal(tower_get_grads(p->gpu, p->gcuda), 0);
    assert_true(isfinite(lg));
    double worst = rel_err_scalar(lg, lc);
    if (!(worst <= TOL)) fail_msg("%s: loss cuda %.7g, cpu %.7g", what, (double)lg, (double)lc);
    if (cg != cc) fail_msg("%s: correct cuda %d, cpu %d", what, cg, cc);
    expect_grads_close(p, what);
    for (int v = 0; v < p->nvars; v++)
        if (!p->vars[v].is_step)
            worst = fmax(worst, rel_err(p->gcuda + p->offsets[v], p->gcpu + p->offsets[v], p->vars[v].numel));

    /* evaluate adds to what the caller has */
    double sc = 0.5, sg = 0.5;
    int ec = 10, eg = 10;
    assert_int_equal(tower_evaluate(p->cpu, x, y, n, &sc, &ec), 0);
    assert_int_equal(tower_evaluate(p->gpu, x, y, n, &sg, &eg), 0);
    if (!(rel_err_scalar(sg - 0.5, sc - 0.5) <= TOL)) fail_msg("%s: evaluate loss sum cuda %.9g, cpu %.9g", what, sg, sc);
    if (eg != ec) fail_msg("%s: evaluate correct cuda %d, cpu %d", what, eg - 10, ec - 10);
    assert_true(eg >= 10);
    worst = fmax(worst, rel_err_scalar(sg - 0.5, sc - 0.5));
    fprintf(stderr, "  %-40s n=%-3d loss %.5f  worst relative error %.2g\n", what, n, (double)lc, worst);
    return worst;
}

/* compare_step on a full batch and on a partial one (n < max_batch). */
static void compare_batches(pair_t *p, uint64_t data_seed, const char *what)
{
    int B = p->max_batch;
    float *x = malloc((size_t)B * (size_t)p->features * sizeof(float));
    int32_t *y = malloc((size_t)B * sizeof(int32_t));
    random_batch(data_seed, B, p->features, p->classes, x, y);
    compare_step(p, x, y, B, data_seed * 7 + 1, what);
    if (B > 1) compare_step(p, x, y, B - B / 3, data_seed * 7 + 2, what);
    free(x);
    free(y);
}

/* ---- one purpose per model ---- */

static const enum psc_activation ACTS[] = {PSC_ACT_NONE, PSC_ACT_RELU, PSC_ACT_TANH, PSC_ACT_SIGMOID};

static void test_dense_activations(void **state)
{
    (void)state;
    for (size_t a = 0; a < PSC_ARRAY_LEN(ACTS); a++) {
        psc_layer_spec_t L[] = {dense("dense", 9, ACTS[a]), dense("dense_1", 7, ACTS[a]),
                                dense("dense_2", 4, PSC_ACT_NONE)};
        pair_t *p = pair_new(1, 6, 0, 0, L, 3, 12, 1 + a);
        char what[64];
        snprintf(what, sizeof what, "dense %s", psc_activation_name(ACTS[a]));
        compare_batches(p, 10 + a, what);
        pair_free(p);
    }
}

/* The tested conv is conv2d_1 (kernel (3, 2): rows and columns differ); conv2d
 * in front of it makes its input gradient part of the checked gradients. */
static void test_conv(void **state)
{
    (void)state;
    for (int pad = 0; pad < 2; pad++)
        for (int s = 1; s <= 2; s++)
            for (size_t a = 0; a < PSC_ARRAY_LEN(ACTS); a++) {
                enum psc_padding P = pad ? PSC_PAD_SAME : PSC_PAD_VALID;
                psc_layer_spec_t L[] = {conv("conv2d", 3, 2, 2, 1, PSC_PAD_VALID, PSC_ACT_TANH),
                                        conv("conv2d_1", 4, 3, 2, s, P, ACTS[a]), flatten(),
                                        dense("dense", 3, PSC_ACT_NONE)};
                pair_t *p = pair_new(3, 9, 8, 2, L, 4, 5, 20 + (uint64_t)(pad * 8 + s * 4) + a);
                char what[64];
                snprintf(what, sizeof what, "conv2d %s stride %d %s", pad ? "same" : "valid", s, psc_activation_name(ACTS[a]));
                compare_batches(p, 30 + (uint64_t)(pad * 8 + s * 4) + a, what);
                pair_free(p);
            }
    /* same with an even kernel: the odd padding row / column goes after */
    psc_layer_spec_t L[] = {conv("conv2d", 3, 1, 1, 1, PSC_PAD_VALID, PSC_ACT_TANH),
                            conv("conv2d_1", 2, 4, 2, 2, PSC_PAD_SAME, PSC_ACT_SIGMOID), flatten(),
                            dense("dense", 3, PSC_ACT_NONE)};
    pair_t *p = pair_new(3, 7, 6, 3, L, 4, 4, 55);
    compare_batches(p, 56, "conv2d same even kernel stride 2");
    pair_free(p);
}

/* A conv whose im2col does not fit the CUDA tower's scratch for the whole batch
 * (2^25 floats: 6 of these examples of 64x64 positions x 1296 columns), nor the
 * CPU's: both run it in chunks, accumulating the kernel gradient over them. */
static void test_conv_chunks(void **state)
{
    (void)state;
    psc_layer_spec_t L[] = {conv("conv2d", 16, 1, 1, 1, PSC_PAD_VALID, PSC_ACT_TANH),
                            conv("conv2d_1", 2, 9, 9, 1, PSC_PAD_SAME, PSC_ACT_TANH), flatten(),
                            dense("dense", 3, PSC_ACT_NONE)};
    pair_t *p = pair_new(3, 64, 64, 16, L, 4, 8, 60);
    compare_batches(p, 61, "conv2d in im2col chunks");
    pair_free(p);
}

static void test_maxpool(void **state)
{
    (void)state;
    struct {
        int k, s;
        enum psc_padding pad;
        const char *what;
    } cases[] = {{2, 2, PSC_PAD_VALID, "max_pool2d 2/2 valid"},
                 {3, 2, PSC_PAD_SAME, "max_pool2d 3/2 same"},
                 {3, 1, PSC_PAD_VALID, "max_pool2d 3/1 valid (overlapping)"},
                 {2, 1, PSC_PAD_SAME, "max_pool2d 2/1 same (overlapping)"}};
    for (size_t i = 0; i < PSC_ARRAY_LEN(cases); i++) {
        psc_layer_spec_t L[] = {conv("conv2d", 3, 3, 3, 1, PSC_PAD_SAME, PSC_ACT_TANH),
                                pool("max_pooling2d", cases[i].k, cases[i].s, cases[i].pad),
                                conv("conv2d_1", 2, 2, 2, 1, PSC_PAD_SAME, PSC_ACT_NONE), flatten(),
                                dense("dense", 3, PSC_ACT_NONE)};
        pair_t *p = pair_new(3, 7, 7, 2, L, 5, 6, 70 + i);
        compare_batches(p, 80 + i, cases[i].what);
        pair_free(p);
    }
    /* relu then pool: ties at zero go to the first window position on both */
    psc_layer_spec_t L[] = {conv("conv2d", 4, 3, 3, 1, PSC_PAD_VALID, PSC_ACT_RELU),
                            pool("max_pooling2d", 2, 2, PSC_PAD_VALID), flatten(), dense("dense", 5, PSC_ACT_NONE)};
    pair_t *p = pair_new(3, 10, 10, 1, L, 4, 6, 90);
    compare_batches(p, 91, "conv relu + max_pool2d");
    pair_free(p);
}

static void test_dropout(void **state)
{
    (void)state;
    psc_layer_spec_t L[] = {dense("dense", 10, PSC_ACT_TANH), dropout("dropout", 0.4f),
                            dense("dense_1", 3, PSC_ACT_NONE)};
    pair_t *p = pair_new(1, 4, 0, 0, L, 3, 9, 100);
    for (uint64_t seed = 0; seed < 4; seed++) compare_batches(p, 101 + seed, "dense + dropout 0.4");
    pair_free(p);

    /* dropout first: only the forward mask matters */
    psc_layer_spec_t D[] = {dropout("dropout", 0.5f), dense("dense", 4, PSC_ACT_NONE)};
    p = pair_new(1, 6, 0, 0, D, 2, 8, 110);
    compare_batches(p, 111, "dropout 0.5 on the input");
    pair_free(p);

    /* The same units dropped: dense_1's kernel gradient rows are zero exactly for
     * the dropped units (one example), on both backends, and they are the
     * generator's for that example's place in the batch (first = 0, 1, 2). */
    enum { IN = 3, HID = 400 };
    psc_layer_spec_t M[] = {dense("dense", HID, PSC_ACT_SIGMOID), dropout("dropout", 0.5f),
                            dense("dense_1", 2, PSC_ACT_NONE)};
    p = pair_new(1, IN, 0, 0, M, 3, 2, 120);
    float x[2 * IN];
    int32_t y[2];
    random_batch(121, 2, IN, 2, x, y);
    for (uint64_t seed = 5; seed < 8; seed++) {
        float l;
        int c;
        assert_int_equal(tower_set_params(p->cpu, p->params), 0);
        assert_int_equal(tower_set_params(p->gpu, p->params), 0);
        int64_t first = (int64_t)seed - 5;
        assert_int_equal(tower_train_step_at(p->cpu, x, y, 1, seed, first, &l, &c), 0);
        assert_int_equal(tower_train_step_at(p->gpu, x, y, 1, seed, first, &l, &c), 0);
        assert_int_equal(tower_get_grads(p->cpu, p->gcpu), 0);
        assert_int_equal(tower_get_grads(p->gpu, p->gcuda), 0);
        const float *dc = p->gcpu + p->offsets[3], *dg = p->gcuda + p->offsets[3]; /* dense_1/kernel (HID, 2) */
        int zero = 0;
        for (int j = 0; j < HID; j++) {
            int zc = dc[j * 2] == 0.0f && dc[j * 2 + 1] == 0.0f;
            int zg = dg[j * 2] == 0.0f && dg[j * 2 + 1] == 0.0f;
            if (zc != zg) fail_msg("seed %llu: unit %d dropped on %s only", (unsigned long long)seed, j, zc ? "cpu" : "cuda");
            int want = psc_dropout_bits(seed, 1, (uint64_t)first * HID + (uint64_t)j) < psc_dropout_threshold(0.5f);
            if (zg != want) fail_msg("seed %llu: unit %d %s on cuda, not by the generator", (unsigned long long)seed, j,
                                     zg ? "dropped" : "kept");
            zero += zc;
        }
        assert_true(zero > HID * 4 / 10 && zero < HID * 6 / 10);
    }
    pair_free(p);
}

static void test_flatten(void **state)
{
    (void)state;
    psc_layer_spec_t L[] = {flatten(), dense("dense", 6, PSC_ACT_RELU), dense("dense_1", 3, PSC_ACT_NONE)};
    pair_t *p = pair_new(3, 3, 4, 2, L, 3, 7, 130);
    compare_batches(p, 131, "flatten + dense");
    pair_free(p);
}

/* No variables before the last layer's input gradient would be needed: a pool
 * then flatten then dense (backward stops at dense). */
static void test_pool_first(void **state)
{
    (void)state;
    psc_layer_spec_t L[] = {pool("max_pooling2d", 2, 2, PSC_PAD_SAME), flatten(), dense("dense", 4, PSC_ACT_NONE)};
    pair_t *p = pair_new(3, 5, 5, 3, L, 3, 4, 140);
    compare_batches(p, 141, "max_pool2d first");
    pair_free(p);
}

/* Ties, where random data has none: first maximum wins in max-pool windows and
 * in the logits' argmax. A linear conv with a zero kernel outputs its bias at
 * every position, so every pool window is a tie, and which position gets the
 * gradient shows in the conv kernel's gradient (x differs per position); a zero
 * dense layer makes every logit equal: the prediction is class 0. */
static void test_ties(void **state)
{
    (void)state;
    psc_layer_spec_t L[] = {conv("conv2d", 2, 2, 2, 1, PSC_PAD_VALID, PSC_ACT_NONE),
                            pool("max_pooling2d", 3, 2, PSC_PAD_SAME), flatten(), dense("dense", 4, PSC_ACT_NONE)};
    pair_t *p = pair_new(3, 7, 7, 2, L, 4, 6, 170);
    for (int64_t k = 0; k < p->vars[1].numel; k++) p->params[p->offsets[1] + k] = 0; /* conv2d/kernel */
    compare_batches(p, 171, "max_pool2d ties");
    /* the dense layer zero too: all logits tie */
    for (int64_t k = p->offsets[3]; k < p->nparams; k++) p->params[k] = 0;
    enum { N = 6 };
    float x[N * 7 * 7 * 2];
    int32_t y[N];
    random_batch(172, N, 7 * 7 * 2, 4, x, y);
    y[0] = 0, y[1] = 3, y[2] = 0, y[3] = 1, y[4] = 2, y[5] = 0;
    compare_step(p, x, y, N, 1, "logit ties");
    float l;
    int c;
    assert_int_equal(tower_train_step(p->gpu, x, y, N, 1, &l, &c), 0);
    assert_int_equal(c, 3); /* the three examples of class 0 */
    assert_float_equal(l, log(4.0), 1e-6);
    pair_free(p);
}

/* ---- whole models ---- */

#define CNN_LAYERS                                                                                              \
    {                                                                                                           \
        conv("conv2d", 8, 3, 3, 1, PSC_PAD_VALID, PSC_ACT_RELU), pool("max_pooling2d", 2, 2, PSC_PAD_VALID),    \
            conv("conv2d_1", 16, 3, 3, 1, PSC_PAD_SAME, PSC_ACT_RELU),                                          \
            pool("max_pooling2d_1", 2, 2, PSC_PAD_VALID), flatten(), dense("dense", 32, PSC_ACT_RELU),          \
            dropout("dropout", 0.5f), dense("dense_1", 10, PSC_ACT_NONE)                                        \
    }

/* A CNN training step, then three SGD steps taken from each backend's own
 * gradients: the parameters stay together. */
static void test_cnn_step(void **state)
{
    (void)state;
    enum { B = 16, F = 28 * 28 };
    psc_layer_spec_t L[] = CNN_LAYERS;
    pair_t *p = pair_new(3, 28, 28, 1, L, 8, B, 150);
    compare_batches(p, 151, "cnn step");

    static float x[B * F];
    int32_t y[B];
    random_batch(152, B, F, 10, x, y);
    float *pc = malloc((size_t)p->nparams * sizeof(float)), *pg = malloc((size_t)p->nparams * sizeof(float));
    memcpy(pc, p->params, (size_t)p->nparams * sizeof(float));
    memcpy(pg, p->params, (size_t)p->nparams * sizeof(float));
    for (int step = 0; step < 3; step++) {
        float l;
        int c;
        assert_int_equal(tower_set_params(p->cpu, pc), 0);
        assert_int_equal(tower_set_params(p->gpu, pg), 0);
        assert_int_equal(tower_train_step(p->cpu, x, y, B, (uint64_t)step, &l, &c), 0);
        assert_int_equal(tower_train_step(p->gpu, x, y, B, (uint64_t)step, &l, &c), 0);
        assert_int_equal(tower_get_grads(p->cpu, p->gcpu), 0);
        assert_int_equal(tower_get_grads(p->gpu, p->gcuda), 0);
        for (int64_t k = 0; k < p->nparams; k++) {
            pc[k] -= 0.1f * p->gcpu[k];
            pg[k] -= 0.1f * p->gcuda[k];
        }
    }
    double e = rel_err(pg, pc, p->nparams);
    fprintf(stderr, "  after 3 SGD steps: parameters' relative error %.2g\n", e);
    assert_true(e <= TOL);
    free(pc);
    free(pg);
    pair_free(p);
}

/* Two towers on half-batches each, reduced with size weights into one of them
 * (dst among srcs) and into a third (dst not among srcs), against the CPU's
 * reduce of the same; the second tower is on device 1 when there is one (the
 * peer copy). */
static void test_reduce_grads(void **state)
{
    (void)state;
    enum { B = 24, N1 = 15, F = 28 * 28 };
    psc_layer_spec_t L[] = CNN_LAYERS;
    pair_t *p = pair_new(3, 28, 28, 1, L, 8, B, 160);
    int dev1 = cuda->device_count() > 1 ? 1 : 0;
    fprintf(stderr, "  towers on devices 0 and %d\n", dev1);
    char err[256] = "";
    tower_t *c2 = NULL, *c3 = NULL, *g2 = NULL, *g3 = NULL;
    assert_int_equal(tower_cpu_ops.create(&p->spec, p->vars, p->nvars, B, 0, &c2, err, sizeof err), 0);
    assert_int_equal(tower_cpu_ops.create(&p->spec, p->vars, p->nvars, B, 0, &c3, err, sizeof err), 0);
    if (cuda->create(&p->spec, p->vars, p->nvars, B, dev1, &g2, err, sizeof err)) fail_msg("%s", err);
    if (cuda->create(&p->spec, p->vars, p->nvars, B, 0, &g3, err, sizeof err)) fail_msg("%s", err);

    static float x[B * F];
    int32_t y[B];
    random_batch(161, B, F, 10, x, y);
    tower_t *cpu[3] = {p->cpu, c2, c3}, *gpu[3] = {p->gpu, g2, g3};
    float l;
    int c;
    for (int k = 0; k < 3; k++) {
        assert_int_equal(tower_set_params(cpu[k], p->params), 0);
        assert_int_equal(tower_set_params(gpu[k], p->params), 0);
    }
    /* towers 0 and 1 on the two halves, tower 2 on all (its gradients get replaced) */
    assert_int_equal(tower_train_step(cpu[0], x, y, N1, 3, &l, &c), 0);
    assert_int_equal(tower_train_step(gpu[0], x, y, N1, 3, &l, &c), 0);
    assert_int_equal(tower_train_step(cpu[1], x + N1 * F, y + N1, B - N1, 4, &l, &c), 0);
    assert_int_equal(tower_train_step(gpu[1], x + N1 * F, y + N1, B - N1, 4, &l, &c), 0);
    assert_int_equal(tower_train_step(cpu[2], x, y, B, 5, &l, &c), 0);
    assert_int_equal(tower_train_step(gpu[2], x, y, B, 5, &l, &c), 0);

    const float w[2] = {(float)N1 / B, (float)(B - N1) / B};
    /* into a third tower first (it reads towers 0 and 1 before 0 is overwritten) */
    assert_int_equal(tower_cpu_ops.reduce_grads(cpu[2], cpu, w, 2), 0);
    assert_int_equal(cuda->reduce_grads(gpu[2], gpu, w, 2), 0);
    assert_int_equal(tower_get_grads(cpu[2], p->gcpu), 0);
    assert_int_equal(tower_get_grads(gpu[2], p->gcuda), 0);
    expect_grads_close(p, "reduce into a third tower");
    /* into tower 1 (on device dev1), dst among srcs */
    tower_t *cs[2] = {cpu[0], cpu[1]}, *gs[2] = {gpu[0], gpu[1]};
    assert_int_equal(tower_cpu_ops.reduce_grads(cpu[1], cs, w, 2), 0);
    assert_int_equal(cuda->reduce_grads(gpu[1], gs, w, 2), 0);
    assert_int_equal(tower_get_grads(cpu[1], p->gcpu), 0);
    assert_int_equal(tower_get_grads(gpu[1], p->gcuda), 0);
    expect_grads_close(p, "reduce into a source tower");
    /* a single source with weight 2: a scale */
    const float two = 2.0f;
    assert_int_equal(tower_cpu_ops.reduce_grads(cpu[0], cs, &two, 1), 0);
    assert_int_equal(cuda->reduce_grads(gpu[0], gs, &two, 1), 0);
    assert_int_equal(tower_get_grads(cpu[0], p->gcpu), 0);
    assert_int_equal(tower_get_grads(gpu[0], p->gcuda), 0);
    expect_grads_close(p, "reduce of one source");
    fprintf(stderr, "  reduce_grads: cuda matches cpu\n");

    /* a tower of another backend is refused */
    tower_t *mixed[2] = {gpu[0], cpu[1]};
    assert_int_not_equal(cuda->reduce_grads(gpu[0], mixed, w, 2), 0);

    tower_destroy(c2);
    tower_destroy(c3);
    tower_destroy(g2);
    tower_destroy(g3);
    pair_free(p);
}

/* ---- shapes the models above do not reach ---- */

static psc_layer_spec_t no_bias(psc_layer_spec_t L)
{
    L.use_bias = 0;
    return L;
}

/* Over 32 classes: each lane of the loss kernel's warp takes several logits of
 * its row (33: one lane twice; 70: every lane twice, six three times). Over 512
 * examples: a loss grid of more than 64 blocks and a bias gradient in several
 * row slices. Layers without bias (dense and conv2d): no bias gradient kernel,
 * the activation kernel alone (and none for a linear layer). */
static void test_wide_big_no_bias(void **state)
{
    (void)state;
    psc_layer_spec_t D[] = {dense("dense", 24, PSC_ACT_RELU), no_bias(dense("dense_1", 33, PSC_ACT_NONE))};
    pair_t *p = pair_new(1, 7, 0, 0, D, 2, 513, 180);
    compare_batches(p, 181, "33 classes, 513 examples, no bias");
    pair_free(p);

    psc_layer_spec_t C[] = {no_bias(conv("conv2d", 3, 3, 3, 1, PSC_PAD_SAME, PSC_ACT_TANH)), flatten(),
                            no_bias(dense("dense", 20, PSC_ACT_SIGMOID)), dropout("dropout", 0.25f),
                            dense("dense_1", 70, PSC_ACT_NONE)};
    p = pair_new(3, 5, 4, 2, C, 5, 600, 182);
    compare_batches(p, 183, "70 classes, 600 examples, conv no bias");
    pair_free(p);
}

/* Before any step, get_grads gives zeros on both backends (create clears the
 * device slab), and evaluate needs no step either. */
static void test_before_first_step(void **state)
{
    (void)state;
    psc_layer_spec_t L[] = {conv("conv2d", 2, 2, 2, 1, PSC_PAD_VALID, PSC_ACT_RELU), flatten(),
                            dense("dense", 3, PSC_ACT_NONE)};
    pair_t *p = pair_new(3, 4, 4, 1, L, 3, 5, 185);
    assert_int_equal(tower_get_grads(p->cpu, p->gcpu), 0);
    assert_int_equal(tower_get_grads(p->gpu, p->gcuda), 0);
    for (int64_t k = 0; k < p->nparams; k++)
        if (p->gcuda[k] != 0.0f || p->gcpu[k] != 0.0f)
            fail_msg("gradient %lld before any step: cuda %g, cpu %g", (long long)k, (double)p->gcuda[k],
                     (double)p->gcpu[k]);
    float x[5 * 16];
    int32_t y[5];
    random_batch(186, 5, 16, 3, x, y);
    double sc = 0, sg = 0;
    int ec = 0, eg = 0;
    assert_int_equal(tower_set_params(p->cpu, p->params), 0);
    assert_int_equal(tower_set_params(p->gpu, p->params), 0);
    assert_int_equal(tower_evaluate(p->cpu, x, y, 5, &sc, &ec), 0);
    assert_int_equal(tower_evaluate(p->gpu, x, y, 5, &sg, &eg), 0);
    assert_true(rel_err_scalar(sg, sc) <= TOL);
    assert_int_equal(eg, ec);
    pair_free(p);
}

/* ---- a worker's towers (worker/tower_group.c) on CUDA ---- */

/* Two steps of `devices`' towers on n examples against one CPU tower on the
 * whole batch: the size-weighted reduce_grads gives that tower's gradient, the
 * towers' dropout masks are its (each slice draws at its place in the batch),
 * and the loss, hits and evaluation are its. */
static void tower_group_case(pair_t *p, const char *devices, const float *x, const int32_t *y, int n)
{
    tower_group_t *ts = NULL;
    char err[256] = "", what[96];
    if (tower_group_create(devices, &p->spec, p->vars, p->nvars, p->max_batch, &ts, err, sizeof err))
        fail_msg("%s: %s", devices, err);
    assert_string_equal(tower_group_describe(ts), devices);
    for (uint64_t step = 0; step < 2; step++) {
        float lt = -1, lc = -2;
        int ct = -1, cc = -2;
        /* the second step from other parameters: every gradient is overwritten */
        if (step)
            for (int64_t k = 0; k < p->nparams; k++) p->params[k] *= 0.9f;
        snprintf(what, sizeof what, "towers %s n=%d step %d", devices, n, (int)step);
        assert_int_equal(tower_group_set_params(ts, p->params), 0);
        assert_int_equal(tower_set_params(p->cpu, p->params), 0);
        assert_int_equal(tower_group_train_step(ts, x, y, n, 40 + step, &lt, &ct), 0);
        assert_int_equal(tower_train_step(p->cpu, x, y, n, 40 + step, &lc, &cc), 0);
        assert_int_equal(tower_group_get_grads(ts, p->gcuda), 0);
        assert_int_equal(tower_get_grads(p->cpu, p->gcpu), 0);
        if (!(rel_err_scalar(lt, lc) <= TOL)) fail_msg("%s: loss towers %.7g, cpu %.7g", what, (double)lt, (double)lc);
        if (ct != cc) fail_msg("%s: correct towers %d, cpu %d", what, ct, cc);
        expect_grads_close(p, what);
        double st = 0, sc = 0;
        int et = 0, ec = 0;
        assert_int_equal(tower_group_evaluate(ts, x, y, n, &st, &et), 0);
        assert_int_equal(tower_evaluate(p->cpu, x, y, n, &sc, &ec), 0);
        if (!(rel_err_scalar(st, sc) <= TOL)) fail_msg("%s: evaluate loss towers %.9g, cpu %.9g", what, st, sc);
        if (et != ec) fail_msg("%s: evaluate correct towers %d, cpu %d", what, et, ec);
    }
    fprintf(stderr, "  %-40s n=%-3d matches one CPU tower\n", devices, n);
    tower_group_destroy(ts);
}

static void test_tower_group(void **state)
{
    (void)state;
    enum { B = 24, F = 8 * 8 * 2 };
    psc_layer_spec_t L[] = {conv("conv2d", 4, 3, 3, 1, PSC_PAD_VALID, PSC_ACT_RELU),
                            pool("max_pooling2d", 2, 2, PSC_PAD_VALID), flatten(), dense("dense", 16, PSC_ACT_RELU),
                            dropout("dropout", 0.3f), dense("dense_1", 5, PSC_ACT_NONE)};
    pair_t *p = pair_new(3, 8, 8, 2, L, 6, B, 190);
    float *params0 = malloc((size_t)p->nparams * sizeof(float));
    memcpy(params0, p->params, (size_t)p->nparams * sizeof(float));
    static float x[B * F];
    int32_t y[B];
    random_batch(191, B, F, 5, x, y);
    static const char *const cases[] = {"gpu:0,gpu:1", "gpu:0,gpu:0", "gpu:0,gpu:1,gpu:0", "gpu:1,gpu:0,gpu:1"};
    int two = cuda->device_count() > 1;
    /* emulated: with peer access (the copies go device to device) and without (through the host) */
    int peer_modes = cuda_emu_active() ? 2 : 1;
    for (int mode = 0; mode < peer_modes; mode++) {
        if (cuda_emu_active()) {
            cuda_emu_set_peer_access(mode == 0);
            fprintf(stderr, "  peer access %s\n", mode == 0 ? "on" : "off");
        }
        for (size_t c = 0; c < PSC_ARRAY_LEN(cases); c++) {
            if (!two && strstr(cases[c], "gpu:1")) {
                fprintf(stderr, "  %s: skipped (one GPU)\n", cases[c]);
                continue;
            }
            memcpy(p->params, params0, (size_t)p->nparams * sizeof(float));
            tower_group_case(p, cases[c], x, y, B);
            memcpy(p->params, params0, (size_t)p->nparams * sizeof(float));
            tower_group_case(p, cases[c], x, y, 7); /* uneven slices */
        }
    }
    cuda_emu_set_peer_access(1);
    free(params0);
    pair_free(p);
}

/* ---- argument checks ---- */

static void test_bad_arguments(void **state)
{
    (void)state;
    psc_layer_spec_t L[] = {dense("dense", 4, PSC_ACT_RELU), dense("dense_1", 3, PSC_ACT_NONE)};
    pair_t *p = pair_new(1, 5, 0, 0, L, 2, 4, 1);
    float x[5 * 5] = {0}, loss;
    int32_t y[5] = {0, 1, 2, 0, 1};
    int c;
    double sum = 0;
    assert_int_equal(tower_train_step(p->gpu, x, y, 5, 0, &loss, &c), PSC_EINVAL); /* > max_batch */
    assert_int_equal(tower_train_step(p->gpu, x, y, 0, 0, &loss, &c), PSC_EINVAL);
    assert_int_equal(tower_evaluate(p->gpu, x, y, 5, &sum, &c), PSC_EINVAL);
    y[1] = 3;
    assert_int_equal(tower_train_step(p->gpu, x, y, 4, 0, &loss, &c), PSC_EINVAL); /* label out of range */
    y[1] = -1;
    assert_int_equal(tower_evaluate(p->gpu, x, y, 4, &sum, &c), PSC_EINVAL);
    y[1] = 1;
    assert_int_equal(tower_train_step(p->gpu, x, y, 4, 0, &loss, &c), 0);

    char err[256] = "";
    tower_t *t = NULL;
    psc_var_desc_t vars[5];
    memcpy(vars, p->vars, sizeof vars);
    vars[1].shape[1] = 5;
    vars[1].numel = 25;
    assert_int_equal(cuda->create(&p->spec, vars, p->nvars, 4, 0, &t, err, sizeof err), PSC_EMISMATCH);
    assert_null(t);
    assert_non_null(strstr(err, "dense/kernel"));
    assert_int_equal(cuda->create(&p->spec, p->vars, p->nvars - 1, 4, 0, &t, err, sizeof err), PSC_EMISMATCH);
    assert_int_equal(cuda->create(&p->spec, p->vars, p->nvars, 0, 0, &t, err, sizeof err), PSC_EINVAL);

    /* a device that is not there: an error naming it */
    int n = cuda->device_count();
    char want[32];
    snprintf(want, sizeof want, "device %d", n);
    err[0] = '\0';
    assert_int_not_equal(cuda->create(&p->spec, p->vars, p->nvars, 4, n, &t, err, sizeof err), 0);
    assert_null(t);
    fprintf(stderr, "  device %d: %s\n", n, err);
    assert_non_null(strstr(err, want));
    assert_int_not_equal(cuda->create(&p->spec, p->vars, p->nvars, 4, -1, &t, err, sizeof err), 0);
    assert_null(t);
    assert_string_equal(cuda->name, "cuda");
    tower_destroy(NULL);
    pair_free(p);
}

/* ---- recommendation (CTR) models: tower_ctr.c's walk on both backends ---- */

/* One train_step of f's model on B: the CPU tower against CUDA tower g (the
 * loss, the logits, every dense gradient and every row gradient), then g's
 * predict against its own train_step logits. */
static void ctr_compare(const ctr_fix_t *f, tower_ctr_t *c, tower_ctr_t *g, const fix_batch_t *B, const char *what)
{
    int n = B->b.n, nt = f->spec.num_tables;
    float loss[2], *z[2], *grads[2], *rg[2][FIX_MAX_TABLES] = {{0}};
    tower_ctr_t *tw[2] = {c, g};
    for (int k = 0; k < 2; k++) {
        z[k] = calloc((size_t)n, sizeof(float));
        grads[k] = calloc((size_t)f->nparams + 1, sizeof(float));
        for (int t = 0; t < nt; t++) rg[k][t] = calloc((size_t)B->nrows[t] * (size_t)f->tables[t].dim + 1, sizeof(float));
        assert_int_equal(tower_ctr_train_step(tw[k], &B->b, &loss[k], z[k]), 0);
        assert_int_equal(tower_ctr_get_grads(tw[k], grads[k], rg[k]), 0);
    }
    double worst = rel_err_scalar(loss[1], loss[0]);
    if (!(worst <= 1e-5)) fail_msg("%s: loss %.9g (cuda) vs %.9g (cpu)", what, loss[1], loss[0]);
    double e = rel_err(z[1], z[0], n);
    if (!(e <= TOL)) fail_msg("%s: logits: relative error %.3g", what, e);
    worst = fmax(worst, e);
    for (int v = 1; v < f->nvars; v++) {
        e = rel_err(grads[1] + f->offsets[v], grads[0] + f->offsets[v], f->vars[v].numel);
        if (!(e <= TOL)) fail_msg("%s: gradient %s: relative error %.3g", what, f->vars[v].name, e);
        worst = fmax(worst, e);
    }
    for (int t = 0; t < nt; t++) {
        e = rel_err(rg[1][t], rg[0][t], (int64_t)B->nrows[t] * f->tables[t].dim);
        if (!(e <= TOL)) fail_msg("%s: table %s's row gradients: relative error %.3g", what, f->tables[t].name, e);
        worst = fmax(worst, e);
    }
    float *p = calloc((size_t)n, sizeof(float));
    assert_int_equal(tower_ctr_predict(g, &B->b, p), 0);
    assert_memory_equal(p, z[1], (size_t)n * sizeof(float));
    fprintf(stderr, "  %-40s loss %.6f, worst relative error %.2e\n", what, loss[0], worst);
    free(p);
    for (int k = 0; k < 2; k++) {
        free(z[k]);
        free(grads[k]);
        for (int t = 0; t < nt; t++) free(rg[k][t]);
    }
}

/* DLRM with a wide part (batches of 37 and 600, the second on another device
 * where there are two, with fewer rows than the first: the row gradients are
 * cleared per step), and the concat model over LibSVM-like valued bags (mean,
 * sqrtn). */
static void test_ctr_steps(void **state)
{
    (void)state;
    ctr_fix_t *f = fix_dlrm(61);
    const int rows1[] = {40, 12, 60}, rows2[] = {300, 50, 80};
    fix_batch_t *B1 = fix_batch_new(f, 37, rows1, 0, 3, 0, 201), *B2 = fix_batch_new(f, 600, rows2, 0, 4, 1, 202);
    int other = cuda->device_count() > 1 ? 1 : 0;
    tower_ctr_t *c = fix_tower(f, "cpu", B2, 600);
    tower_ctr_t *g1 = fix_tower_on(f, "cuda", other, B2, 600), *g0 = fix_tower_on(f, "cuda", 0, B2, 600);
    ctr_compare(f, c, g1, B2, "dlrm + wide, batch 600");
    ctr_compare(f, c, g0, B1, "dlrm + wide, batch 37");
    ctr_compare(f, c, g1, B1, "dlrm + wide, batch 37, device other");
    tower_ctr_destroy(c);
    tower_ctr_destroy(g0);
    tower_ctr_destroy(g1);
    fix_batch_free(B1);
    fix_batch_free(B2);
    fix_free(f);

    f = fix_concat(62);
    const int rows3[] = {90, 70};
    fix_batch_t *B3 = fix_batch_new(f, 50, rows3, 0, 5, 1, 203);
    c = fix_tower(f, "cpu", B3, 64);
    g0 = fix_tower(f, "cuda", B3, 64);
    ctr_compare(f, c, g0, B3, "concat, mean/sqrtn, no dense");
    tower_ctr_destroy(c);
    tower_ctr_destroy(g0);
    fix_batch_free(B3);
    fix_free(f);
}

int main(void)
{
    cuda = tower_backend_find("cuda");
    if (!cuda || cuda->device_count() == 0) {
        printf("SKIP: no CUDA device%s\n", cuda ? "" : " (this build has no CUDA backend)");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dense_activations),
        cmocka_unit_test(test_conv),
        cmocka_unit_test(test_conv_chunks),
        cmocka_unit_test(test_maxpool),
        cmocka_unit_test(test_dropout),
        cmocka_unit_test(test_flatten),
        cmocka_unit_test(test_pool_first),
        cmocka_unit_test(test_ties),
        cmocka_unit_test(test_cnn_step),
        cmocka_unit_test(test_reduce_grads),
        cmocka_unit_test(test_wide_big_no_bias),
        cmocka_unit_test(test_before_first_step),
        cmocka_unit_test(test_tower_group),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_ctr_steps),
        cmocka_unit_test(test_emu_no_mistakes), /* a real GPU: nothing emulated, nothing to see */
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
