/* optim.c — TensorFlow's optimizer updates (see optim.h).
 *
 * Each update is written the way TensorFlow's CPU kernels in training_ops.cc
 * write it (ApplyGradientDescent, ApplyMomentum, ApplyAdagrad, ApplyAdam,
 * ApplyRMSProp, ApplyFtrl), in float, in the same order of operations, so that
 * a model trained here follows the same trajectory as with tf.compat.v1.train:
 *   Adam     m += (g - m)*(1-b1); v += (g*g - v)*(1-b2)   (== b1*m + (1-b1)*g, ...)
 *   RMSProp  ms += (g*g - ms)*(1-rho)
 *   FTRL     sqrt for lr_power = -0.5, powf otherwise, as TF branches
 * Only Adam's step size lr_t is computed in double (pow of the betas), then
 * rounded to float once per call (optim_apply_rows: once per distinct t,
 * through a per-thread memo of the same values).
 *
 * Each inner loop is one plain pass over restrict-qualified float arrays with
 * no calls but sqrtf (which -fno-math-errno turns into sqrtps). The gradient
 * is read as bytes (ld: a 4-byte memcpy, which GCC turns into the same
 * unaligned vector load), so it may sit at any alignment: a request as gRPC's
 * slices hold it, whose floats start anywhere (optim_apply_iov). It runs twice:
 * over the first n rounded down to a multiple of OPTIM_VEC elements, then over
 * the rest; the first pass has a trip count the compiler knows to be a multiple
 * of any vector width, which GCC's -O2 ("very cheap") cost model requires
 * before it vectorizes, and the rest (at most OPTIM_VEC-1 elements) as a
 * multiple of 4 (one SSE vector, so short rows of a sparse table, 4, 8 or 12
 * floats, vectorize too) and a scalar tail of at most 3.
 * Vector and scalar steps round identically (element-wise IEEE operations, no
 * reassociation; ISO C mode means -ffp-contract=off, so no fused multiply-add):
 * results do not depend on n or alignment, and SGD's w - lr*g is bit-exact.
 *
 * On x86-64 the loops are compiled twice, for the build's baseline (SSE2: 4
 * floats a vector) and for AVX2 (8: target attribute, no -march, so the
 * binaries still run everywhere), and optim_apply calls the AVX2 copy on a CPU
 * that has it. A plain branch on __builtin_cpu_supports, not target_clones:
 * that ifunc crashes ThreadSanitizer's start-up and, with clang 14, is not
 * reachable from other files. Both copies perform the same element-wise
 * operations (-ffp-contract=off, and AVX2 alone brings no FMA; sqrt and
 * division are correctly rounded at any width), so their results are
 * bit-identical. At 4 floats a vector Adam is bound by its sqrt + divide even
 * from memory, and all of them by instruction count once their arrays are in
 * cache (tests/bench/bench_apply, tests/bench/NOTES.md).
 */
#include "optim.h"

#include "optim_pb.h"
#include "psc.h"

#include <math.h>
#include <string.h>

int optim_slot_count(const psc_optim_config_t *c) { return psc_optim_slot_count(c); }

const char *optim_slot_name(const psc_optim_config_t *c, int slot) { return psc_optim_slot_name(c, slot); }

/* Vector width multiple that the first pass of every loop is rounded to (covers
 * SSE, AVX and AVX-512 floats). */
#define OPTIM_VEC 16
#define OPTIM_KERNEL static inline __attribute__((always_inline)) void

/* x86-64: optim_apply also has an AVX2 copy of the loops (see above). */
#if defined(__x86_64__)
#define OPTIM_AVX2 1
#else
#define OPTIM_AVX2 0
#endif

static size_t vec_floor(size_t n) { return n & ~(size_t)(OPTIM_VEC - 1); }

/* Element i of a float array stored at any byte alignment. (No restrict on p:
 * with it GCC 12 finds "no vectype" for the load and leaves every loop scalar;
 * the kernels' own restrict parameters carry the no-alias promise.) */
static inline __attribute__((always_inline)) float ld(const unsigned char *p, size_t i)
{
    float f;
    memcpy(&f, p + 4 * i, 4);
    return f;
}

OPTIM_KERNEL fill_k(float *restrict a, size_t n, float value)
{
    for (size_t i = 0; i < n; i++) a[i] = value;
}

static void fill(float *a, float value, size_t n)
{
    size_t v = vec_floor(n);
    fill_k(a, v, value);
    fill_k(a + v, n - v, value);
}

/* ApplyGradientDescent: var -= grad * lr */
OPTIM_KERNEL sgd_k(float *restrict w, const unsigned char *restrict g, size_t n, float lr)
{
    for (size_t i = 0; i < n; i++) w[i] -= ld(g, i) * lr;
}

/* ApplyMomentum: accum = accum * momentum + grad;
 *   var -= accum * lr                                  (plain)
 *   var -= grad * lr + accum * momentum * lr           (use_nesterov) */
OPTIM_KERNEL momentum_k(float *restrict w, float *restrict a, const unsigned char *restrict g, size_t n, float lr,
                        float mom)
{
    for (size_t i = 0; i < n; i++) {
        a[i] = a[i] * mom + ld(g, i);
        w[i] -= a[i] * lr;
    }
}

OPTIM_KERNEL nesterov_k(float *restrict w, float *restrict a, const unsigned char *restrict g, size_t n, float lr,
                        float mom)
{
    for (size_t i = 0; i < n; i++) {
        float gi = ld(g, i);
        a[i] = a[i] * mom + gi;
        w[i] -= gi * lr + a[i] * mom * lr;
    }
}

/* ApplyAdagrad (update_slots): accum += grad^2; var -= grad * lr * rsqrt(accum) */
OPTIM_KERNEL adagrad_k(float *restrict w, float *restrict acc, const unsigned char *restrict g, size_t n, float lr)
{
    for (size_t i = 0; i < n; i++) {
        float gi = ld(g, i);
        acc[i] += gi * gi;
        w[i] -= gi * lr * (1.0f / sqrtf(acc[i]));
    }
}

/* ApplyAdam: m += (g - m) * (1 - b1); v += (g^2 - v) * (1 - b2);
 *            var -= m * lr_t / (sqrt(v) + eps) */
OPTIM_KERNEL adam_k(float *restrict w, float *restrict m, float *restrict v, const unsigned char *restrict g, size_t n,
                    float lr_t, float one_minus_b1, float one_minus_b2, float eps)
{
    for (size_t i = 0; i < n; i++) {
        float gi = ld(g, i);
        m[i] += (gi - m[i]) * one_minus_b1;
        v[i] += (gi * gi - v[i]) * one_minus_b2;
        w[i] -= (m[i] * lr_t) / (sqrtf(v[i]) + eps);
    }
}

/* ApplyRMSProp: ms += (g^2 - ms) * (1 - rho);
 *               mom = mom * momentum + g * lr / sqrt(ms + eps); var -= mom */
OPTIM_KERNEL rmsprop_k(float *restrict w, float *restrict ms, float *restrict mom, const unsigned char *restrict g,
                       size_t n, float lr, float one_minus_rho, float momentum, float eps)
{
    for (size_t i = 0; i < n; i++) {
        float gi = ld(g, i);
        ms[i] += (gi * gi - ms[i]) * one_minus_rho;
        mom[i] = mom[i] * momentum + (gi * lr) / sqrtf(ms[i] + eps);
        w[i] -= mom[i];
    }
}

/* keep ? x : +0.0f, without a branch (a vector AND with the compare's mask). */
static inline __attribute__((always_inline)) float keep0(float x, int keep)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    u &= -(uint32_t)keep;
    memcpy(&x, &u, 4);
    return x;
}

/* ApplyFtrl (tf.compat.v1.train.FtrlOptimizer, no l2 shrinkage), with TF's
 * special case lr_power = -0.5 (sqrt instead of pow):
 *   new_accum = accum + g^2
 *   linear += g - (sqrt(new_accum) - sqrt(accum)) / lr * var
 *   var = |linear| > l1 ? (sign(linear)*l1 - linear) / (sqrt(new_accum)/lr + 2*l2) : 0
 *   accum = new_accum
 * The quotient is computed unconditionally and then selected with a bit mask
 * (keep0): as a ?: GCC sinks the division into a branch, which it will not
 * if-convert (a division may trap), and the loop stays scalar. sign(linear)*l1
 * is +-l1 wherever it is used: |linear| > l1 >= 0 means linear != 0. */
OPTIM_KERNEL ftrl_sqrt_k(float *restrict w, float *restrict acc, float *restrict lin, const unsigned char *restrict g,
                         size_t n, float lr, float l1, float l2x2)
{
    for (size_t i = 0; i < n; i++) {
        float gi = ld(g, i);
        float na = acc[i] + gi * gi;
        float sn = sqrtf(na);
        lin[i] += gi - (sn - sqrtf(acc[i])) / lr * w[i];
        float l = lin[i];
        float q = ((l > 0.0f ? l1 : -l1) - l) / (sn / lr + l2x2);
        w[i] = keep0(q, fabsf(l) > l1);
        acc[i] = na;
    }
}

/* ApplyFtrl, any other lr_power (npow = -lr_power >= 0):
 *   linear += g - (new_accum^npow - accum^npow) / lr * var
 *   var = |linear| > l1 ? (sign(linear)*l1 - linear) / (new_accum^npow/lr + 2*l2) : 0
 * powf is a libm call: this loop stays scalar. */
OPTIM_KERNEL ftrl_pow_k(float *restrict w, float *restrict acc, float *restrict lin, const unsigned char *restrict g,
                        size_t n, float lr, float l1, float l2x2, float npow)
{
    for (size_t i = 0; i < n; i++) {
        float gi = ld(g, i);
        float na = acc[i] + gi * gi;
        float pn = powf(na, npow);
        lin[i] += gi - (pn - powf(acc[i], npow)) / lr * w[i];
        float l = lin[i];
        float q = ((l > 0.0f ? l1 : -l1) - l) / (pn / lr + l2x2);
        w[i] = keep0(q, fabsf(l) > l1);
        acc[i] = na;
    }
}

void optim_init_slots(const psc_optim_config_t *c, float *slot0, float *slot1, size_t n)
{
    int ns = optim_slot_count(c);
    PSC_ASSERT(ns < 1 || slot0 != NULL);
    PSC_ASSERT(ns < 2 || slot1 != NULL);
    switch (c->kind) {
    case PSC_OPT_SGD: break;
    case PSC_OPT_MOMENTUM: fill(slot0, 0.0f, n); break;
    case PSC_OPT_ADAGRAD: fill(slot0, c->initial_accumulator_value, n); break;
    case PSC_OPT_ADAM:
        fill(slot0, 0.0f, n);
        fill(slot1, 0.0f, n);
        break;
    case PSC_OPT_RMSPROP:
        /* tf.compat.v1.train.RMSPropOptimizer initializes "rms" to ones. */
        fill(slot0, 1.0f, n);
        fill(slot1, 0.0f, n);
        break;
    case PSC_OPT_FTRL:
        /* FtrlOptimizer: "accum" = initial_accumulator_value, "linear" = 0 */
        fill(slot0, c->initial_accumulator_value, n);
        fill(slot1, 0.0f, n);
        break;
    }
}

/* The per-call constants of an update: Adam's step size is computed once per
 * call of optim_apply / optim_apply_iov / optim_apply_row, not once per run
 * of elements. */
typedef struct coef {
    float lr, lr_t, omb1, omb2, omr;
    float l1, l2x2, npow; /* FTRL: l1, 2*l2, -lr_power */
} coef_t;

/* Adam's step size at step t >= 1: lr * sqrt(1 - beta2^t) / (1 - beta1^t). */
static float adam_lr_t(const psc_optim_config_t *c, float lr, int64_t t)
{
    PSC_ASSERT(t >= 1);
    /* TF keeps beta1^t and beta2^t in float variables multiplied once per
     * step; computing them from t in double gives the exact powers. */
    double b1t = pow((double)c->beta1, (double)t), b2t = pow((double)c->beta2, (double)t);
    return (float)((double)lr * sqrt(1.0 - b2t) / (1.0 - b1t));
}

/* adam_lr_t through a direct-mapped memo per thread: the rows of a sparse
 * table each have their own t (lazy Adam), so nearly every row of a push
 * needs another step size, and two pow calls cost more than the update of a
 * short row; but a push's rows share few values of t (most rows are young,
 * hot rows come back step after step, and t below LR_MEMO never collide).
 * The memo holds one (lr, beta1, beta2) at a time, compared bit for bit: on
 * another it starts empty (a table of other hyper-parameters, a learning-rate
 * schedule's next value). Same value, so the same results bit for bit. */
#define LR_MEMO 4096 /* entries (a power of two), 32 KiB a thread */

typedef struct lr_memo {
    uint32_t t; /* 0: empty (t >= 1) */
    float lr_t;
} lr_memo_t;

static _Thread_local lr_memo_t lr_memo[LR_MEMO];
static _Thread_local uint32_t lr_memo_key[3]; /* lr, beta1, beta2 of the entries */

static inline uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Empties the memo unless it holds c's and lr's step sizes. */
static void adam_memo_for(const psc_optim_config_t *c, float lr)
{
    const uint32_t key[3] = {bits_of(lr), bits_of(c->beta1), bits_of(c->beta2)};
    if (memcmp(key, lr_memo_key, sizeof key) == 0) return;
    memset(lr_memo, 0, sizeof lr_memo);
    memcpy(lr_memo_key, key, sizeof key);
}

/* adam_lr_t(c, lr, t) after adam_memo_for(c, lr). */
static float adam_lr_t_memo(const psc_optim_config_t *c, float lr, int64_t t)
{
    if (t > (int64_t)UINT32_MAX) return adam_lr_t(c, lr, t);
    lr_memo_t *e = &lr_memo[(uint64_t)t & (LR_MEMO - 1)];
    if (e->t != (uint32_t)t) *e = (lr_memo_t){.t = (uint32_t)t, .lr_t = adam_lr_t(c, lr, t)};
    return e->lr_t;
}

/* The constants of an update but Adam's step size (lr_t left 0). lr: the
 * learning rate as TF's kernels get it (cast to the variable's float). */
static coef_t coef_base(const psc_optim_config_t *c, float lr)
{
    coef_t k = {.lr = lr};
    if (c->kind == PSC_OPT_ADAM) {
        k.omb1 = 1.0f - c->beta1;
        k.omb2 = 1.0f - c->beta2;
    }
    if (c->kind == PSC_OPT_RMSPROP) k.omr = 1.0f - c->decay;
    if (c->kind == PSC_OPT_FTRL) {
        k.l1 = c->l1;
        k.l2x2 = 2.0f * c->l2;
        k.npow = -c->learning_rate_power;
    }
    return k;
}

/* All the constants of an update at step t (Adam's step size computed afresh). */
static coef_t coef_of(const psc_optim_config_t *c, float lr, int64_t t)
{
    coef_t k = coef_base(c, lr);
    if (c->kind == PSC_OPT_ADAM) k.lr_t = adam_lr_t(c, lr, t);
    return k;
}

/* One pass of the optimizer's loop over elements [e, e+n) of the arrays. */
static inline __attribute__((always_inline)) void apply_span(const psc_optim_config_t *c, const coef_t *k, float *w,
                                                             float *s0, float *s1, const unsigned char *g, size_t e,
                                                             size_t n)
{
    const unsigned char *ge = g + 4 * e;
    switch (c->kind) {
    case PSC_OPT_SGD: sgd_k(w + e, ge, n, k->lr); break;
    case PSC_OPT_MOMENTUM:
        if (c->use_nesterov)
            nesterov_k(w + e, s0 + e, ge, n, k->lr, c->momentum);
        else
            momentum_k(w + e, s0 + e, ge, n, k->lr, c->momentum);
        break;
    case PSC_OPT_ADAGRAD: adagrad_k(w + e, s0 + e, ge, n, k->lr); break;
    case PSC_OPT_ADAM: adam_k(w + e, s0 + e, s1 + e, ge, n, k->lr_t, k->omb1, k->omb2, c->epsilon); break;
    case PSC_OPT_RMSPROP: rmsprop_k(w + e, s0 + e, s1 + e, ge, n, k->lr, k->omr, c->momentum, c->epsilon); break;
    case PSC_OPT_FTRL:
        /* TF tests lr_power == -0.5 in the variable's type */
        if (c->learning_rate_power == -0.5f)
            ftrl_sqrt_k(w + e, s0 + e, s1 + e, ge, n, k->lr, k->l1, k->l2x2);
        else
            ftrl_pow_k(w + e, s0 + e, s1 + e, ge, n, k->lr, k->l1, k->l2x2, k->npow);
        break;
    }
}

/* The update of n elements, inlined into one function per ISA level: a
 * vectorized head [0, v) (a multiple of 16), a middle [v, v+m) that is a
 * multiple of 4 (one SSE vector: rows of 4, 8 or 12 floats vectorize too) and
 * a scalar tail of at most 3. */
static inline __attribute__((always_inline)) void apply(const psc_optim_config_t *c, const coef_t *k, float *w,
                                                        float *slot0, float *slot1, const unsigned char *g, size_t n)
{
    /* m = (n - v) rounded down to 4, written so that GCC sees the multiple of 4
     * in every loop ((n - v) & ~3 left SGD's middle scalar) */
    size_t v = vec_floor(n), m = n & (size_t)(OPTIM_VEC - 4);
    apply_span(c, k, w, slot0, slot1, g, 0, v);
    apply_span(c, k, w, slot0, slot1, g, v, m);
    apply_span(c, k, w, slot0, slot1, g, v + m, n - v - m);
}

typedef void (*apply_fn)(const psc_optim_config_t *c, const coef_t *k, float *w, float *s0, float *s1,
                         const unsigned char *g, size_t n);

static void apply_base(const psc_optim_config_t *c, const coef_t *k, float *w, float *s0, float *s1,
                       const unsigned char *g, size_t n)
{
    apply(c, k, w, s0, s1, g, n);
}

#if OPTIM_AVX2
__attribute__((target("avx2"))) static void apply_avx2(const psc_optim_config_t *c, const coef_t *k, float *w,
                                                       float *s0, float *s1, const unsigned char *g, size_t n)
{
    apply(c, k, w, s0, s1, g, n);
}
#endif

/* Whether this CPU runs the AVX2 copies: reads the CPU model libgcc fills in
 * before main, one load and a test. */
static int use_avx2(void)
{
#if OPTIM_AVX2
    return __builtin_cpu_supports("avx2");
#else
    return 0;
#endif
}

/* The copy of the loops for this CPU. */
static apply_fn apply_for_cpu(const psc_optim_config_t *c, float *slot0, float *slot1)
{
    int ns = optim_slot_count(c);
    PSC_ASSERT(ns < 1 || slot0 != NULL);
    PSC_ASSERT(ns < 2 || slot1 != NULL);
#if OPTIM_AVX2
    if (use_avx2()) return apply_avx2;
#endif
    return apply_base;
}

void optim_apply_rows(const psc_optim_config_t *c, double lr, float *const *rows, const void *const *g,
                      const int64_t *t, size_t m, int dim)
{
    PSC_ASSERT(dim >= 0);
    /* One ISA choice and one set of constants for all the rows (Adam's step
     * size again only when a row's t differs from the previous row's, from
     * the memo); each row is one call of the ISA's loops: inlined into a
     * loop over rows, GCC no longer sees their trip counts as multiples of
     * the vector width. */
    apply_fn fn = apply_base;
#if OPTIM_AVX2
    if (use_avx2()) fn = apply_avx2;
#endif
    int ns = optim_slot_count(c);
    size_t n = (size_t)dim;
    int64_t kt = m ? t[0] : 1;
    coef_t k = coef_base(c, (float)lr);
    if (c->kind == PSC_OPT_ADAM && m) {
        adam_memo_for(c, (float)lr);
        k.lr_t = adam_lr_t_memo(c, (float)lr, kt);
    }
    for (size_t r = 0; r < m; r++) {
        if (c->kind == PSC_OPT_ADAM && t[r] != kt) {
            kt = t[r];
            k.lr_t = adam_lr_t_memo(c, (float)lr, kt);
        }
        float *w = rows[r];
        fn(c, &k, w, ns >= 1 ? w + n : NULL, ns >= 2 ? w + 2 * n : NULL, g[r], n);
    }
}

void optim_apply(const psc_optim_config_t *c, float *w, float *slot0, float *slot1, const void *g, size_t n, int64_t t)
{
    apply_fn fn = apply_for_cpu(c, slot0, slot1);
    coef_t k = coef_of(c, c->learning_rate, t);
    fn(c, &k, w, slot0, slot1, g, n);
}

void optim_apply_row(const psc_optim_config_t *c, double lr, float *w, float *slot0, float *slot1, const void *g,
                     int dim, int64_t t)
{
    PSC_ASSERT(dim >= 0);
    apply_fn fn = apply_for_cpu(c, slot0, slot1);
    coef_t k = coef_of(c, (float)lr, t);
    fn(c, &k, w, slot0, slot1, g, (size_t)dim);
}

/* optim_apply_iov's run callback: one call of the ISA's loops per run. */
typedef struct iov_apply {
    const psc_optim_config_t *c;
    apply_fn fn;
    coef_t k;
    float *w, *s0, *s1;
} iov_apply_t;

static int apply_run(void *arg, const unsigned char *p, size_t m, size_t e)
{
    iov_apply_t *a = arg;
    a->fn(a->c, &a->k, a->w + e, a->s0 ? a->s0 + e : NULL, a->s1 ? a->s1 + e : NULL, p, m);
    return 0;
}

void optim_apply_iov(const psc_optim_config_t *c, float *w, float *slot0, float *slot1, const psc_iov_t *g, int ng,
                     size_t n, int64_t t)
{
    iov_apply_t a = {c, apply_for_cpu(c, slot0, slot1), coef_of(c, c->learning_rate, t), w, slot0, slot1};
    psc_iov_float_runs(g, ng, n, apply_run, &a);
}
