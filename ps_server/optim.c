/* optim.c — TensorFlow's optimizer updates (see optim.h).
 *
 * Each update is written the way TensorFlow's CPU kernels in training_ops.cc
 * write it (ApplyGradientDescent, ApplyMomentum, ApplyAdagrad, ApplyAdam,
 * ApplyRMSProp), in float, in the same order of operations, so that a model
 * trained here follows the same trajectory as with tf.compat.v1.train:
 *   Adam     m += (g - m)*(1-b1); v += (g*g - v)*(1-b2)   (== b1*m + (1-b1)*g, ...)
 *   RMSProp  ms += (g*g - ms)*(1-rho)
 * Only Adam's step size lr_t is computed in double (pow of the betas), then
 * rounded to float once per call.
 *
 * Each inner loop is one plain pass over restrict-qualified float arrays with
 * no calls but sqrtf (which -fno-math-errno turns into sqrtps). The gradient
 * is read as bytes (ld: a 4-byte memcpy, which GCC turns into the same
 * unaligned vector load), so it may sit at any alignment: a request as gRPC's
 * slices hold it, whose floats start anywhere (optim_apply_iov). It runs twice:
 * over the first n rounded down to a multiple of OPTIM_VEC elements, then over
 * the rest; the first pass has a trip count the compiler knows to be a multiple
 * of any vector width, which GCC's -O2 ("very cheap") cost model requires
 * before it vectorizes, and the tail is at most OPTIM_VEC-1 scalar steps.
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

#include "psc.h"

#include <math.h>
#include <string.h>

int optim_slot_count(const psc_optim_config_t *c)
{
    switch (c->kind) {
    case PSC_OPT_SGD: return 0;
    case PSC_OPT_MOMENTUM: return 1;
    case PSC_OPT_ADAGRAD: return 1;
    case PSC_OPT_ADAM: return 2;
    case PSC_OPT_RMSPROP: return 2;
    }
    return 0;
}

const char *optim_slot_name(const psc_optim_config_t *c, int slot)
{
    switch (c->kind) {
    case PSC_OPT_SGD: return NULL;
    case PSC_OPT_MOMENTUM: return slot == 0 ? "momentum" : NULL;
    case PSC_OPT_ADAGRAD: return slot == 0 ? "accumulator" : NULL;
    case PSC_OPT_ADAM: return slot == 0 ? "m" : slot == 1 ? "v" : NULL;
    case PSC_OPT_RMSPROP: return slot == 0 ? "rms" : slot == 1 ? "momentum" : NULL;
    }
    return NULL;
}

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
OPTIM_KERNEL adam_k(float *restrict w, float *restrict m, float *restrict v, const unsigned char *restrict g,
                    size_t n, float lr_t, float one_minus_b1, float one_minus_b2, float eps)
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
    }
}

/* The per-call constants of an update: Adam's step size is computed once per
 * call of optim_apply / optim_apply_iov, not once per run of elements. */
typedef struct coef {
    float lr, lr_t, omb1, omb2, omr;
} coef_t;

static coef_t coef_of(const psc_optim_config_t *c, int64_t t)
{
    coef_t k = {.lr = c->learning_rate};
    if (c->kind == PSC_OPT_ADAM) {
        PSC_ASSERT(t >= 1);
        /* TF keeps beta1^t and beta2^t in float variables multiplied once per
         * step; computing them from t in double gives the exact powers. */
        double b1t = pow((double)c->beta1, (double)t), b2t = pow((double)c->beta2, (double)t);
        k.lr_t = (float)((double)k.lr * sqrt(1.0 - b2t) / (1.0 - b1t));
        k.omb1 = 1.0f - c->beta1;
        k.omb2 = 1.0f - c->beta2;
    }
    if (c->kind == PSC_OPT_RMSPROP) k.omr = 1.0f - c->decay;
    return k;
}

/* The update of n elements, inlined into one function per ISA level. */
static inline __attribute__((always_inline)) void apply(const psc_optim_config_t *c, const coef_t *k, float *w,
                                                        float *slot0, float *slot1, const unsigned char *g, size_t n)
{
    size_t v = vec_floor(n), r = n - v; /* vectorized head [0, v), scalar tail [v, n) */
    float *s0 = slot0, *s1 = slot1;
    const unsigned char *gt = g + 4 * v;
    switch (c->kind) {
    case PSC_OPT_SGD:
        sgd_k(w, g, v, k->lr);
        sgd_k(w + v, gt, r, k->lr);
        break;
    case PSC_OPT_MOMENTUM:
        if (c->use_nesterov) {
            nesterov_k(w, s0, g, v, k->lr, c->momentum);
            nesterov_k(w + v, s0 + v, gt, r, k->lr, c->momentum);
        } else {
            momentum_k(w, s0, g, v, k->lr, c->momentum);
            momentum_k(w + v, s0 + v, gt, r, k->lr, c->momentum);
        }
        break;
    case PSC_OPT_ADAGRAD:
        adagrad_k(w, s0, g, v, k->lr);
        adagrad_k(w + v, s0 + v, gt, r, k->lr);
        break;
    case PSC_OPT_ADAM:
        adam_k(w, s0, s1, g, v, k->lr_t, k->omb1, k->omb2, c->epsilon);
        adam_k(w + v, s0 + v, s1 + v, gt, r, k->lr_t, k->omb1, k->omb2, c->epsilon);
        break;
    case PSC_OPT_RMSPROP:
        rmsprop_k(w, s0, s1, g, v, k->lr, k->omr, c->momentum, c->epsilon);
        rmsprop_k(w + v, s0 + v, s1 + v, gt, r, k->lr, k->omr, c->momentum, c->epsilon);
        break;
    }
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

/* The copy of the loops for this CPU. */
static apply_fn apply_for_cpu(const psc_optim_config_t *c, float *slot0, float *slot1)
{
    int ns = optim_slot_count(c);
    PSC_ASSERT(ns < 1 || slot0 != NULL);
    PSC_ASSERT(ns < 2 || slot1 != NULL);
#if OPTIM_AVX2
    /* reads the CPU model libgcc fills in before main: one load and a test */
    if (__builtin_cpu_supports("avx2")) return apply_avx2;
#endif
    return apply_base;
}

void optim_apply(const psc_optim_config_t *c, float *w, float *slot0, float *slot1, const void *g, size_t n,
                 int64_t t)
{
    apply_fn fn = apply_for_cpu(c, slot0, slot1);
    coef_t k = coef_of(c, t);
    fn(c, &k, w, slot0, slot1, g, n);
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
    iov_apply_t a = {c, apply_for_cpu(c, slot0, slot1), coef_of(c, t), w, slot0, slot1};
    psc_iov_float_runs(g, ng, n, apply_run, &a);
}
