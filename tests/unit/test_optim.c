/* test_optim — the PS optimizers against TensorFlow's formulas.
 *
 * Each optimizer runs 5 steps of varied gradients (both signs, magnitudes from
 * 1e-3 to 3) on a short vector and is compared, values and slots, with the
 * formula of optim.h written here independently in double precision. Closed
 * forms: SGD is exact (w - lr*g in float); the first Adam step is -lr*sign(g)
 * up to epsilon. Slot counts, names and initial values are TF's. A long vector
 * (1,000,003 elements: not a multiple of any vector width) built by repeating
 * the short one gives bit-identical results element by element, so the
 * vectorized path and the scalar tail agree. FTRL (TF's ApplyFtrl) runs with
 * l1 > 0, so that some weights become exactly 0, l2 > 0, and learning-rate
 * powers -0.5 (TF's sqrt special case) and -0.7 (powf). optim_apply_row (a
 * sparse table's row at an explicit learning rate) equals optim_apply with
 * that learning rate in the config, bit for bit, for every row length, and
 * so does optim_apply_rows (many rows, each with its own t, Adam's step size
 * through a memo).
 */
#include "optim.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define N 37 /* short vector: two 16-wide blocks and a 5-element tail */
#define STEPS 5
#define LONG_N 1000003

/* ---- inputs ---- */

static float w0_of(size_t i) { return (float)(0.5 + 0.25 * sin(1.0 + (double)i)); }

/* Gradient of element i at step s: varied signs and magnitudes. */
static float g_of(size_t i, int s)
{
    static const double mag[] = {1e-3, 0.02, 0.3, 1.0, 3.0};
    double sign = ((i * 7 + (size_t)s * 3) % 5) < 2 ? -1.0 : 1.0;
    return (float)(sign * mag[(i + (size_t)s) % 5] * (1.0 + 0.1 * cos((double)(i * 13 + (size_t)s))));
}

/* ---- double-precision reference (optim.h's formulas as written there) ----
 * Alongside each quantity x the reference carries |x|~: the same recurrence on
 * the absolute values of its terms. Float rounding error is a few ulp of |x|~,
 * not of |x| (a momentum accumulator can cancel to near zero), so the tolerance
 * is 1e-6 relative to |x|~ (about 16 float ulp). */

typedef struct ref {
    double w[N], s0[N], s1[N];
    double wa[N], s0a[N], s1a[N]; /* |x|~ */
} ref_t;

static void ref_init(const psc_optim_config_t *c, ref_t *r)
{
    for (size_t i = 0; i < N; i++) {
        r->w[i] = r->wa[i] = (double)w0_of(i);
        r->s0[i] = r->s0a[i] = c->kind == PSC_OPT_ADAGRAD || c->kind == PSC_OPT_FTRL
                                   ? (double)c->initial_accumulator_value
                               : c->kind == PSC_OPT_RMSPROP ? 1.0
                                                            : 0.0;
        r->s1[i] = r->s1a[i] = 0.0;
    }
}

/* ApplyFtrl in double: slot 0 accum, slot 1 linear. |linear|~ carries the
 * magnitudes of its terms, where (acc_new^p - acc^p) counts as acc_new^p +
 * acc^p (float rounds each power before the difference, which cancels when g
 * is small) times |w|~; w's scale is (l1 + |linear|~) / quadratic (the
 * numerator cancels when |linear| is just above l1). */
static void ref_ftrl(const psc_optim_config_t *c, ref_t *r, size_t i, double g)
{
    double lr = c->learning_rate, p = -(double)c->learning_rate_power, l1 = c->l1, l2 = c->l2;
    double acc = r->s0[i], na = acc + g * g;
    double pn = p == 0.5 ? sqrt(na) : pow(na, p), pa = p == 0.5 ? sqrt(acc) : pow(acc, p);
    double sigma_w = (pn - pa) / lr * r->w[i];
    r->s1[i] += g - sigma_w;
    r->s1a[i] += fabs(g) + (pn + pa) / lr * r->wa[i];
    double lin = r->s1[i], quad = pn / lr + 2 * l2;
    r->w[i] = fabs(lin) > l1 ? ((lin > 0 ? l1 : -l1) - lin) / quad : 0.0;
    r->wa[i] = (l1 + r->s1a[i]) / quad;
    r->s0[i] = r->s0a[i] = na;
}

static void ref_step(const psc_optim_config_t *c, ref_t *r, int s, int64_t t)
{
    double lr = c->learning_rate, mom = c->momentum;
    for (size_t i = 0; i < N; i++) {
        double g = (double)g_of(i, s), ga = fabs(g);
        switch (c->kind) {
        case PSC_OPT_SGD:
            r->w[i] -= lr * g;
            r->wa[i] += lr * ga;
            break;
        case PSC_OPT_MOMENTUM:
            r->s0[i] = mom * r->s0[i] + g;
            r->s0a[i] = mom * r->s0a[i] + ga;
            if (c->use_nesterov) {
                r->w[i] -= lr * g + lr * mom * r->s0[i];
                r->wa[i] += lr * ga + lr * mom * r->s0a[i];
            } else {
                r->w[i] -= lr * r->s0[i];
                r->wa[i] += lr * r->s0a[i];
            }
            break;
        case PSC_OPT_ADAGRAD:
            r->s0[i] += g * g;
            r->s0a[i] = r->s0[i];
            r->w[i] -= lr * g / sqrt(r->s0[i]);
            r->wa[i] += lr * ga / sqrt(r->s0[i]);
            break;
        case PSC_OPT_ADAM: {
            double b1 = c->beta1, b2 = c->beta2;
            double lr_t = lr * sqrt(1 - pow(b2, (double)t)) / (1 - pow(b1, (double)t));
            r->s0[i] = b1 * r->s0[i] + (1 - b1) * g;
            r->s0a[i] = b1 * r->s0a[i] + (1 - b1) * ga;
            r->s1[i] = b2 * r->s1[i] + (1 - b2) * g * g;
            r->s1a[i] = r->s1[i];
            r->w[i] -= lr_t * r->s0[i] / (sqrt(r->s1[i]) + (double)c->epsilon);
            r->wa[i] += lr_t * r->s0a[i] / (sqrt(r->s1[i]) + (double)c->epsilon);
            break;
        }
        case PSC_OPT_RMSPROP: {
            double rho = c->decay;
            r->s0[i] = rho * r->s0[i] + (1 - rho) * g * g;
            r->s0a[i] = r->s0[i];
            r->s1[i] = mom * r->s1[i] + lr * g / sqrt(r->s0[i] + (double)c->epsilon);
            r->s1a[i] = mom * r->s1a[i] + lr * ga / sqrt(r->s0[i] + (double)c->epsilon);
            r->w[i] -= r->s1[i];
            r->wa[i] += r->s1a[i];
            break;
        }
        case PSC_OPT_FTRL: ref_ftrl(c, r, i, g); break;
        }
    }
}

/* ---- configurations (TF's defaults, larger learning rates so steps show) ---- */

static psc_optim_config_t cfg_sgd(void) { return (psc_optim_config_t){.kind = PSC_OPT_SGD, .learning_rate = 0.1f}; }
static psc_optim_config_t cfg_momentum(int nesterov)
{
    return (psc_optim_config_t){
        .kind = PSC_OPT_MOMENTUM, .learning_rate = 0.05f, .momentum = 0.9f, .use_nesterov = nesterov};
}
static psc_optim_config_t cfg_adagrad(void)
{
    return (psc_optim_config_t){.kind = PSC_OPT_ADAGRAD, .learning_rate = 0.1f, .initial_accumulator_value = 0.1f};
}
static psc_optim_config_t cfg_adam(void)
{
    return (psc_optim_config_t){
        .kind = PSC_OPT_ADAM, .learning_rate = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .epsilon = 1e-8f};
}
static psc_optim_config_t cfg_rmsprop(float momentum)
{
    return (psc_optim_config_t){
        .kind = PSC_OPT_RMSPROP, .learning_rate = 0.01f, .decay = 0.9f, .momentum = momentum, .epsilon = 1e-10f};
}
static psc_optim_config_t cfg_ftrl(float power)
{
    return (psc_optim_config_t){.kind = PSC_OPT_FTRL,
                                .learning_rate = 0.1f,
                                .learning_rate_power = power,
                                .initial_accumulator_value = 0.1f,
                                .l1 = 0.05f,
                                .l2 = 0.01f};
}

/* ---- float runs through optim.c ---- */

typedef struct run {
    size_t n;
    float *w, *s0, *s1, *g;
} run_t;

static void run_init(const psc_optim_config_t *c, run_t *r, size_t n)
{
    r->n = n;
    r->w = malloc(n * sizeof(float));
    r->s0 = malloc(n * sizeof(float));
    r->s1 = malloc(n * sizeof(float));
    r->g = malloc(n * sizeof(float));
    assert_non_null(r->w);
    assert_non_null(r->s0);
    assert_non_null(r->s1);
    assert_non_null(r->g);
    for (size_t i = 0; i < n; i++) r->w[i] = w0_of(i % N);
    int ns = optim_slot_count(c);
    optim_init_slots(c, ns >= 1 ? r->s0 : NULL, ns >= 2 ? r->s1 : NULL, n);
}

static void run_step(const psc_optim_config_t *c, run_t *r, int s, int64_t t)
{
    for (size_t i = 0; i < r->n; i++) r->g[i] = g_of(i % N, s);
    int ns = optim_slot_count(c);
    optim_apply(c, r->w, ns >= 1 ? r->s0 : NULL, ns >= 2 ? r->s1 : NULL, r->g, r->n, t);
}

static void run_free(run_t *r)
{
    free(r->w);
    free(r->s0);
    free(r->s1);
    free(r->g);
}

static void expect_close(const char *what, int step, size_t i, double got, double want, double scale)
{
    double tol = 1e-6 * scale;
    if (!(fabs(got - want) <= tol))
        fail_msg("%s step %d [%zu]: got %.9g, double reference %.9g (|diff| %.3g > %.3g)", what, step, i, got, want,
                 fabs(got - want), tol);
}

/* 5 steps against the double reference, then the long vector bit for bit. */
static void check_optimizer(const psc_optim_config_t *c, const char *label)
{
    ref_t ref;
    run_t f;
    ref_init(c, &ref);
    run_init(c, &f, N);
    int ns = optim_slot_count(c);
    for (int s = 0; s < STEPS; s++) {
        ref_step(c, &ref, s, s + 1);
        run_step(c, &f, s, s + 1);
        for (size_t i = 0; i < N; i++) {
            expect_close(label, s, i, f.w[i], ref.w[i], ref.wa[i]);
            if (ns >= 1) expect_close(label, s, i, f.s0[i], ref.s0[i], ref.s0a[i]);
            if (ns >= 2) expect_close(label, s, i, f.s1[i], ref.s1[i], ref.s1a[i]);
        }
    }
    /* Every step must have moved the weights (the test can fail). */
    for (size_t i = 0; i < N; i++) assert_true(f.w[i] != w0_of(i));

    run_t big;
    run_init(c, &big, LONG_N);
    for (int s = 0; s < STEPS; s++) run_step(c, &big, s, s + 1);
    for (size_t i = 0; i < LONG_N; i++) {
        size_t k = i % N;
        if (memcmp(&big.w[i], &f.w[k], sizeof(float)) != 0 ||
            (ns >= 1 && memcmp(&big.s0[i], &f.s0[k], sizeof(float)) != 0) ||
            (ns >= 2 && memcmp(&big.s1[i], &f.s1[k], sizeof(float)) != 0))
            fail_msg("%s: long vector element %zu = %.9g differs from short element %zu = %.9g", label, i,
                     (double)big.w[i], k, (double)f.w[k]);
    }
    run_free(&big);
    run_free(&f);
}

/* ---- tests ---- */

static void test_slots(void **state)
{
    (void)state;
    psc_optim_config_t sgd = cfg_sgd(), mo = cfg_momentum(0), ag = cfg_adagrad(), ad = cfg_adam(),
                       rms = cfg_rmsprop(0.0f), ftrl = cfg_ftrl(-0.5f);
    assert_int_equal(optim_slot_count(&sgd), 0);
    assert_int_equal(optim_slot_count(&mo), 1);
    assert_int_equal(optim_slot_count(&ag), 1);
    assert_int_equal(optim_slot_count(&ad), 2);
    assert_int_equal(optim_slot_count(&rms), 2);
    assert_int_equal(optim_slot_count(&ftrl), 2);
    assert_null(optim_slot_name(&sgd, 0));
    assert_string_equal(optim_slot_name(&mo, 0), "momentum");
    assert_string_equal(optim_slot_name(&ag, 0), "accumulator");
    assert_string_equal(optim_slot_name(&ad, 0), "m");
    assert_string_equal(optim_slot_name(&ad, 1), "v");
    assert_null(optim_slot_name(&ad, 2));
    assert_string_equal(optim_slot_name(&rms, 0), "rms");
    assert_string_equal(optim_slot_name(&rms, 1), "momentum");
    assert_string_equal(optim_slot_name(&ftrl, 0), "accum"); /* TF's FtrlOptimizer slots */
    assert_string_equal(optim_slot_name(&ftrl, 1), "linear");
    assert_null(optim_slot_name(&ftrl, 2));

    enum { M = 21 };
    float a[M], b[M];
    memset(a, 0xff, sizeof a);
    optim_init_slots(&ag, a, NULL, M);
    for (int i = 0; i < M; i++) assert_true(a[i] == 0.1f);
    memset(a, 0xff, sizeof a);
    memset(b, 0xff, sizeof b);
    optim_init_slots(&rms, a, b, M);
    for (int i = 0; i < M; i++) assert_true(a[i] == 1.0f && b[i] == 0.0f);
    memset(a, 0xff, sizeof a);
    memset(b, 0xff, sizeof b);
    optim_init_slots(&ad, a, b, M);
    for (int i = 0; i < M; i++) assert_true(a[i] == 0.0f && b[i] == 0.0f);
    memset(a, 0xff, sizeof a);
    optim_init_slots(&mo, a, NULL, M);
    for (int i = 0; i < M; i++) assert_true(a[i] == 0.0f);
    memset(a, 0xff, sizeof a);
    memset(b, 0xff, sizeof b);
    optim_init_slots(&ftrl, a, b, M);
    for (int i = 0; i < M; i++) assert_true(a[i] == 0.1f && b[i] == 0.0f);
}

static void test_sgd_exact(void **state)
{
    (void)state;
    psc_optim_config_t c = cfg_sgd();
    float w[N], want[N], g[N];
    for (size_t i = 0; i < N; i++) {
        w[i] = want[i] = w0_of(i);
        g[i] = g_of(i, 0);
    }
    for (int s = 0; s < STEPS; s++) {
        for (size_t i = 0; i < N; i++) {
            g[i] = g_of(i, s);
            want[i] = want[i] - c.learning_rate * g[i];
        }
        optim_apply(&c, w, NULL, NULL, g, N, s + 1);
        assert_memory_equal(w, want, sizeof w);
    }
    check_optimizer(&c, "sgd");
}

static void test_momentum(void **state)
{
    (void)state;
    psc_optim_config_t c = cfg_momentum(0);
    check_optimizer(&c, "momentum");
}

static void test_momentum_nesterov(void **state)
{
    (void)state;
    psc_optim_config_t c = cfg_momentum(1), plain = cfg_momentum(0);
    check_optimizer(&c, "momentum(nesterov)");
    /* Nesterov must differ from plain momentum after a step. */
    float a[N], b[N], sa[N], sb[N], g[N];
    for (size_t i = 0; i < N; i++) {
        a[i] = b[i] = w0_of(i);
        sa[i] = sb[i] = 0.0f;
        g[i] = g_of(i, 0);
    }
    optim_apply(&c, a, sa, NULL, g, N, 1);
    optim_apply(&plain, b, sb, NULL, g, N, 1);
    assert_true(memcmp(a, b, sizeof a) != 0);
}

static void test_adagrad(void **state)
{
    (void)state;
    psc_optim_config_t c = cfg_adagrad();
    check_optimizer(&c, "adagrad");
}

static void test_adam(void **state)
{
    (void)state;
    psc_optim_config_t c = cfg_adam();
    check_optimizer(&c, "adam");
}

static void test_adam_first_step_is_lr_sign(void **state)
{
    (void)state;
    psc_optim_config_t c = cfg_adam();
    float w[N], m[N], v[N], g[N];
    for (size_t i = 0; i < N; i++) {
        w[i] = w0_of(i);
        g[i] = g_of(i, 2);
    }
    optim_init_slots(&c, m, v, N);
    optim_apply(&c, w, m, v, g, N, 1);
    for (size_t i = 0; i < N; i++) {
        double step = (double)w[i] - (double)w0_of(i);
        double want = -(double)c.learning_rate * (g[i] > 0 ? 1.0 : -1.0);
        /* eps/(sqrt(1-b2)|g|) relative (<= 3.2e-4 at |g| = 1e-3) plus float rounding of w */
        double tol = fabs(want) * (1e-8 / (sqrt(1 - 0.999) * fabs((double)g[i]))) + 1e-7;
        if (!(fabs(step - want) <= tol))
            fail_msg("adam first step [%zu]: %.9g, want %.9g (g %.3g)", i, step, want, (double)g[i]);
    }
}

static void test_rmsprop(void **state)
{
    (void)state;
    psc_optim_config_t c = cfg_rmsprop(0.0f);
    check_optimizer(&c, "rmsprop");
    c = cfg_rmsprop(0.9f);
    check_optimizer(&c, "rmsprop(momentum 0.9)");
}

/* optim_apply_iov: the gradient in segments split at any byte (1-byte ones
 * too; a float across up to 4 of them) and at any alignment gives exactly the
 * result of optim_apply on one buffer, for every optimizer, over several
 * steps. */
static void test_apply_iov_equals_contiguous(void **state)
{
    (void)state;
    psc_optim_config_t cfgs[] = {cfg_sgd(),  cfg_momentum(0),   cfg_momentum(1), cfg_adagrad(),
                                 cfg_adam(), cfg_rmsprop(0.5f), cfg_ftrl(-0.5f), cfg_ftrl(-0.7f)};
    enum { NE = 1037 };
    static psc_iov_t iov[4 * NE];
    for (size_t k = 0; k < PSC_ARRAY_LEN(cfgs); k++) {
        run_t a, b;
        run_init(&cfgs[k], &a, NE);
        run_init(&cfgs[k], &b, NE);
        unsigned char *raw = malloc(4 * NE + 3);
        uint32_t seed = 7u + (uint32_t)k;
        for (int step = 1; step <= 4; step++) {
            run_step(&cfgs[k], &a, step, step); /* contiguous, fills a.g */
            unsigned char *g = raw + step % 4;  /* the same bytes at another alignment */
            memcpy(g, a.g, 4 * NE);
            int n = 0;
            size_t at = 0, max_seg = step == 1 ? 1 : step == 2 ? 5 : step == 3 ? 13 : 999;
            while (at < 4 * NE) {
                seed = seed * 1664525u + 1013904223u;
                size_t len = PSC_MIN(1 + (seed >> 8) % max_seg, 4 * NE - at);
                iov[n].base = g + at;
                iov[n++].len = len;
                at += len;
            }
            int ns = optim_slot_count(&cfgs[k]);
            optim_apply_iov(&cfgs[k], b.w, ns >= 1 ? b.s0 : NULL, ns >= 2 ? b.s1 : NULL, iov, n, NE, step);
            assert_memory_equal(a.w, b.w, 4 * NE);
            if (ns >= 1) assert_memory_equal(a.s0, b.s0, 4 * NE);
            if (ns >= 2) assert_memory_equal(a.s1, b.s1, 4 * NE);
        }
        free(raw);
        run_free(&a);
        run_free(&b);
    }
}

/* FTRL against the double reference at lr_power -0.5 (sqrt) and -0.7 (pow):
 * with l1 > 0 some weights are exactly 0 and others are not. */
static void test_ftrl(void **state)
{
    (void)state;
    const float powers[] = {-0.5f, -0.7f};
    for (size_t k = 0; k < PSC_ARRAY_LEN(powers); k++) {
        psc_optim_config_t c = cfg_ftrl(powers[k]);
        char label[32];
        snprintf(label, sizeof label, "ftrl(lr_power %g)", (double)powers[k]);
        check_optimizer(&c, label);
        run_t f;
        run_init(&c, &f, N);
        int zeros = 0;
        for (int s = 0; s < STEPS; s++) {
            run_step(&c, &f, s, s + 1);
            for (size_t i = 0; i < N; i++) zeros += f.w[i] == 0.0f;
        }
        if (zeros == 0 || zeros == N * STEPS)
            fail_msg("%s: %d of %d weights over the steps are exactly 0 (want some, not all)", label, zeros, N * STEPS);
        run_free(&f);
    }
    /* l1 = l2 = 0: no weight is clamped to 0; -0.5 and -0.5000001 (pow) agree closely */
    psc_optim_config_t a = cfg_ftrl(-0.5f), b = cfg_ftrl(-0.50000006f);
    a.l1 = b.l1 = a.l2 = b.l2 = 0.0f;
    check_optimizer(&a, "ftrl(l1 = l2 = 0)");
    run_t fa, fb;
    run_init(&a, &fa, N);
    run_init(&b, &fb, N);
    for (int s = 0; s < STEPS; s++) {
        run_step(&a, &fa, s, s + 1);
        run_step(&b, &fb, s, s + 1);
    }
    for (size_t i = 0; i < N; i++) {
        assert_true(fa.w[i] != 0.0f);
        expect_close("ftrl sqrt vs pow", STEPS, i, fb.w[i], fa.w[i], 10.0 * fabs((double)fa.w[i]));
    }
    run_free(&fa);
    run_free(&fb);
}

/* optim_apply_row at an explicit lr equals optim_apply with that lr in the
 * config, bit for bit (t drives Adam's bias correction), for row lengths that
 * use each of the head, middle and tail loops; the config's own
 * learning_rate is not used. */
static void test_apply_row(void **state)
{
    (void)state;
    psc_optim_config_t cfgs[] = {cfg_sgd(),  cfg_momentum(0),   cfg_momentum(1), cfg_adagrad(),
                                 cfg_adam(), cfg_rmsprop(0.5f), cfg_ftrl(-0.5f), cfg_ftrl(-0.7f)};
    const int dims[] = {1, 3, 4, 8, 13, 16, 31, 37};
    for (size_t k = 0; k < PSC_ARRAY_LEN(cfgs); k++) {
        for (size_t d = 0; d < PSC_ARRAY_LEN(dims); d++) {
            int dim = dims[d];
            double lr = 0.0123;
            psc_optim_config_t with_lr = cfgs[k], other = cfgs[k];
            with_lr.learning_rate = (float)lr;
            other.learning_rate = 7.0f; /* must be ignored */
            run_t a, b;
            run_init(&with_lr, &a, (size_t)dim);
            run_init(&with_lr, &b, (size_t)dim);
            unsigned char *raw = malloc(4 * (size_t)dim + 1);
            for (int s = 0; s < STEPS; s++) {
                int64_t t = 3 * s + 1;
                for (int i = 0; i < dim; i++) a.g[i] = g_of((size_t)i, s);
                memcpy(raw + 1, a.g, 4 * (size_t)dim); /* unaligned */
                int ns = optim_slot_count(&with_lr);
                optim_apply(&with_lr, a.w, ns >= 1 ? a.s0 : NULL, ns >= 2 ? a.s1 : NULL, a.g, (size_t)dim, t);
                optim_apply_row(&other, lr, b.w, ns >= 1 ? b.s0 : NULL, ns >= 2 ? b.s1 : NULL, raw + 1, dim, t);
                assert_memory_equal(a.w, b.w, 4 * (size_t)dim);
                if (ns >= 1) assert_memory_equal(a.s0, b.s0, 4 * (size_t)dim);
                if (ns >= 2) assert_memory_equal(a.s1, b.s1, 4 * (size_t)dim);
            }
            free(raw);
            run_free(&a);
            run_free(&b);
        }
    }
}

/* optim_apply_rows: rows laid out as a sparse table's records (slots after
 * the values), each with its own t (Adam's step size changes from row to
 * row, and back), equal optim_apply on each row alone, bit for bit. */
static void test_apply_rows(void **state)
{
    (void)state;
    psc_optim_config_t cfgs[] = {cfg_sgd(),         cfg_momentum(1), cfg_adagrad(),  cfg_adam(),
                                 cfg_rmsprop(0.5f), cfg_ftrl(-0.5f), cfg_ftrl(-0.7f)};
    enum { ROWS = 5, DIM = 21 };
    const int64_t ts[ROWS] = {1, 1, 7, 2, 1};
    for (size_t k = 0; k < PSC_ARRAY_LEN(cfgs); k++) {
        const psc_optim_config_t *c = &cfgs[k];
        int ns = optim_slot_count(c);
        float rows[ROWS][3 * DIM], want[ROWS][3 * DIM], g[ROWS][DIM];
        float *w[ROWS];
        const void *gp[ROWS];
        for (int r = 0; r < ROWS; r++) {
            for (int e = 0; e < DIM; e++) {
                rows[r][e] = w0_of((size_t)(r * DIM + e));
                g[r][e] = g_of((size_t)e, r);
            }
            optim_init_slots(c, ns >= 1 ? rows[r] + DIM : NULL, ns >= 2 ? rows[r] + 2 * DIM : NULL, DIM);
            memcpy(want[r], rows[r], sizeof rows[r]);
            w[r] = rows[r];
            gp[r] = g[r];
            optim_apply(c, want[r], ns >= 1 ? want[r] + DIM : NULL, ns >= 2 ? want[r] + 2 * DIM : NULL, g[r], DIM,
                        ts[r]);
        }
        optim_apply_rows(c, c->learning_rate, w, gp, ts, ROWS, DIM);
        for (int r = 0; r < ROWS; r++) assert_memory_equal(rows[r], want[r], 4 * (size_t)DIM * (size_t)(1 + ns));
    }
}

/* Adam's step size comes from a per-thread memo in optim_apply_rows (keyed
 * by t, holding one lr and pair of betas at a time): rows whose t collide in
 * it (t and t + 4096), repeat, come back after other values, or pass 32 bits,
 * rows of dims 1 and 8, and calls
 * that alternate the learning rate and beta2, all equal optim_apply_row
 * (which computes it afresh) bit for bit. */
static void test_apply_rows_lr_memo(void **state)
{
    (void)state;
    enum { ROWS = 96, DIM = 8 };
    static float rows[ROWS][3 * DIM], want[ROWS][3 * DIM], g[ROWS][DIM];
    float *w[ROWS];
    const void *gp[ROWS];
    int64_t ts[ROWS];
    psc_optim_config_t cfgs[2] = {cfg_adam(), cfg_adam()};
    cfgs[1].beta2 = 0.99f;
    const double lrs[3] = {0.001, 0.003, 0.001};
    for (int dim = 1; dim <= DIM; dim += DIM - 1)
        for (int call = 0; call < 6; call++) {
            const psc_optim_config_t *c = &cfgs[call % 2];
            double lr = lrs[call % 3];
            for (int r = 0; r < ROWS; r++) {
                ts[r] = (int64_t)(1 + (r % 7) + 4096 * (r % 3) + (r % 11 == 0 ? 100000 : 0) + /* collisions mod 4096 */
                                  (r % 13 == 0 ? (int64_t)1 << 32 : 0));
                for (int e = 0; e < dim; e++) {
                    rows[r][e] = w0_of((size_t)(r * dim + e));
                    g[r][e] = g_of((size_t)e, r + call);
                }
                optim_init_slots(c, rows[r] + dim, rows[r] + 2 * dim, (size_t)dim);
                rows[r][dim] = 0.01f * (float)(r % 5); /* m, v not zero: lr_t matters */
                rows[r][2 * dim] = 0.02f * (float)(r % 3);
                memcpy(want[r], rows[r], sizeof rows[r]);
                optim_apply_row(c, lr, want[r], want[r] + dim, want[r] + 2 * dim, g[r], dim, ts[r]);
                w[r] = rows[r];
                gp[r] = g[r];
            }
            optim_apply_rows(c, lr, w, gp, ts, ROWS, dim);
            for (int r = 0; r < ROWS; r++) assert_memory_equal(rows[r], want[r], 4 * 3 * (size_t)dim);
        }
}

static void test_empty_is_noop(void **state)
{
    (void)state;
    psc_optim_config_t c = cfg_adam();
    float w = 1.0f, m = 0.0f, v = 0.0f, g = 1.0f;
    optim_apply(&c, &w, &m, &v, &g, 0, 1);
    assert_true(w == 1.0f && m == 0.0f && v == 0.0f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slots),
        cmocka_unit_test(test_sgd_exact),
        cmocka_unit_test(test_momentum),
        cmocka_unit_test(test_momentum_nesterov),
        cmocka_unit_test(test_adagrad),
        cmocka_unit_test(test_adam),
        cmocka_unit_test(test_adam_first_step_is_lr_sign),
        cmocka_unit_test(test_apply_iov_equals_contiguous),
        cmocka_unit_test(test_rmsprop),
        cmocka_unit_test(test_ftrl),
        cmocka_unit_test(test_apply_row),
        cmocka_unit_test(test_apply_rows),
        cmocka_unit_test(test_apply_rows_lr_memo),
        cmocka_unit_test(test_empty_is_noop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
