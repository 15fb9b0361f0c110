/* tower_cpu_dnnl.c — the CPU tower's convolutions and large GEMMs on oneDNN
 * (see tower_cpu_dnnl.h).
 *
 * Design: each conv op is one oneDNN primitive built for (op, window, m,
 * activation, bias?) with every layout left to the library (format "any"): it
 * picks its JIT kernels' blocked layouts, and the primitive's tensors are
 * reordered from and to the walk's NHWC / (kh, kw, in_c, F) memory around it
 * (a reorder is built only where the layouts differ). The forward fuses the
 * bias and the activation (an eltwise post-op); the weights' gradient, when
 * it accumulates (a later chunk), is added by its output reorder (a sum
 * post-op). Primitives, their reorders and the library-side buffers live in a
 * per-context cache of CACHE_SIZE entries (a miss replaces the oldest), so a
 * step of a shape already seen allocates nothing.
 *
 * Threads: oneDNN runs on OpenMP (Debian's libdnnl links libgomp). OpenMP's
 * thread count is an attribute of the calling thread, so every op applies the
 * count tower_cpu_dnnl_set_threads stored (towers run on their own threads),
 * before it builds a primitive too: a primitive splits its work for the
 * threads it saw when built, and keeps that split, so an entry's key includes
 * the thread count.
 * libgomp reads OMP_WAIT_POLICY once, when it loads, before main(): a
 * .preinit_array entry (run before any library's constructor) sets PASSIVE
 * there unless the user chose a policy or GOMP_SPINCOUNT, so that idle
 * threads sleep rather than spin on cores a ps_server may need. Under TSan
 * every op runs on one thread (TSan cannot see libgomp's barriers).
 *
 * Invariants: every entry point checks oneDNN's status and logs the failing
 * call; a failed cache build leaves the entry empty. The caller's pointers are
 * set as the user tensors' handles for one call and never kept.
 */
#include "tower_cpu_dnnl.h"

#include "log.h"
#include "psc.h"

#include <dnnl.h>
#include <dnnl_debug.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ---- OpenMP ---- */

/* OpenMP's API, from the runtime libdnnl loads (declared here rather than
 * through omp.h, which not every compiler ships; weak: a oneDNN built on
 * another runtime leaves them NULL and its own thread count in place). */
extern void omp_set_num_threads(int n) __attribute__((weak));
extern int omp_get_max_threads(void) __attribute__((weak));

#if defined(__SANITIZE_THREAD__)
#define DNNL_ONE_THREAD 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DNNL_ONE_THREAD 1
#endif
#endif

static atomic_int dnnl_threads; /* 0: OpenMP's default */

void tower_cpu_dnnl_set_threads(int n) { atomic_store(&dnnl_threads, n > 0 ? n : 0); }

/* The stored thread count onto the calling thread's OpenMP settings. */
static void threads_apply(void)
{
    int n = atomic_load_explicit(&dnnl_threads, memory_order_relaxed);
#ifdef DNNL_ONE_THREAD
    n = 1;
#endif
    if (n > 0 && omp_set_num_threads && omp_get_max_threads && omp_get_max_threads() != n) omp_set_num_threads(n);
}

/* Runs before the shared libraries' constructors (libgomp's reads the policy). */
static void omp_passive_default(int argc, char **argv, char **envp)
{
    (void)argc, (void)argv, (void)envp;
    if (!getenv("OMP_WAIT_POLICY") && !getenv("GOMP_SPINCOUNT")) setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
}
typedef void (*preinit_fn_t)(int, char **, char **);
__attribute__((section(".preinit_array"), used)) static preinit_fn_t omp_passive_entry = omp_passive_default;

/* ---- errors ---- */

static int dnnl_fail(dnnl_status_t s, const char *stmt, int line)
{
    PSC_ERROR("cpu tower: oneDNN: %s: %s (tower_cpu_dnnl.c:%d)", stmt, dnnl_status2str(s), line);
    switch (s) {
    case dnnl_out_of_memory: return PSC_ENOMEM;
    case dnnl_unimplemented: return PSC_EUNSUPPORTED;
    default: return PSC_EINVAL;
    }
}

#define DN(call)                                                             \
    do {                                                                     \
        dnnl_status_t dn_s_ = (call);                                        \
        if (dn_s_ != dnnl_success) return dnnl_fail(dn_s_, #call, __LINE__); \
    } while (0)

#define TRY(call)                  \
    do {                           \
        int dn_rc_ = (call);       \
        if (dn_rc_) return dn_rc_; \
    } while (0)

/* ---- the cache ---- */

enum { CACHE_SIZE = 16 };
enum conv_kind { CONV_FWD, CONV_BWD_DATA, CONV_BWD_WEIGHTS };

/* One tensor of a primitive: the caller's memory (user, the walk's layout) and
 * the primitive's (prim: user itself when the layouts agree, else a library
 * buffer with the reorder between them). */
typedef struct dnnl_tensor {
    int arg;                      /* DNNL_ARG_* */
    dnnl_memory_t user, prim;     /* prim == user: no reorder */
    dnnl_primitive_t reorder;     /* user -> prim (inputs), prim -> user (the output); NULL when prim == user */
    dnnl_primitive_t reorder_sum; /* the weights' gradient: prim added into user (accumulate) */
} dnnl_tensor_t;

typedef struct conv_prim {
    int used;
    enum conv_kind kind; /* the key: kind, g, m, act, bias, threads */
    tower_window_t g;
    int m, act, bias;
    int threads; /* OpenMP's thread count when it was built */
    dnnl_primitive_t prim;
    dnnl_tensor_t in[2];    /* fwd: src, weights; bwd data: diff_dst, weights; bwd weights: src, diff_dst */
    dnnl_tensor_t out;      /* dst, diff_src, diff_weights */
    dnnl_memory_t bias_mem; /* fwd with a bias: the caller's (F) */
} conv_prim_t;

struct tower_cpu_dnnl {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    conv_prim_t cache[CACHE_SIZE];
    int next; /* the entry the next miss replaces once all are used */
};

static void tensor_free(dnnl_tensor_t *t)
{
    if (t->prim && t->prim != t->user) dnnl_memory_destroy(t->prim);
    if (t->user) dnnl_memory_destroy(t->user);
    if (t->reorder) dnnl_primitive_destroy(t->reorder);
    if (t->reorder_sum) dnnl_primitive_destroy(t->reorder_sum);
    memset(t, 0, sizeof *t);
}

static void prim_free(conv_prim_t *p)
{
    if (p->prim) dnnl_primitive_destroy(p->prim);
    for (int i = 0; i < 2; i++) tensor_free(&p->in[i]);
    tensor_free(&p->out);
    if (p->bias_mem) dnnl_memory_destroy(p->bias_mem);
    memset(p, 0, sizeof *p);
}

/* A reorder from -> to (sum: to += from). */
static int reorder_make(tower_cpu_dnnl_t *c, const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to, int sum,
                        dnnl_primitive_t *out)
{
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t s = dnnl_success;
    if (sum && (s = dnnl_primitive_attr_create(&attr)) == dnnl_success &&
        (s = dnnl_post_ops_create(&po)) == dnnl_success && (s = dnnl_post_ops_append_sum(po, 1.0f)) == dnnl_success)
        s = dnnl_primitive_attr_set_post_ops(attr, po);
    if (s == dnnl_success) s = dnnl_reorder_primitive_desc_create(&pd, from, c->engine, to, c->engine, attr);
    if (s == dnnl_success) s = dnnl_primitive_create(out, pd);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return s == dnnl_success ? 0 : dnnl_fail(s, "reorder", __LINE__);
}

/* Tensor arg of pd against the caller's layout user_md. output: the reorder
 * runs prim -> user; separate: a library buffer even when the layouts agree
 * (the weights' gradient, which may have to be added). */
static int tensor_make(tower_cpu_dnnl_t *c, dnnl_tensor_t *t, const_dnnl_primitive_desc_t pd, int arg,
                       const dnnl_memory_desc_t *user_md, int output, int separate)
{
    t->arg = arg;
    const dnnl_memory_desc_t *prim_md = dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, arg);
    PSC_ASSERT(prim_md); /* every arg asked for is the primitive's */
    DN(dnnl_memory_create(&t->user, user_md, c->engine, DNNL_MEMORY_NONE));
    int same = dnnl_memory_desc_equal(prim_md, user_md);
    if (same && !separate) {
        t->prim = t->user;
        return 0;
    }
    DN(dnnl_memory_create(&t->prim, prim_md, c->engine, DNNL_MEMORY_ALLOCATE));
    if (!same)
        TRY(output ? reorder_make(c, prim_md, user_md, 0, &t->reorder)
                   : reorder_make(c, user_md, prim_md, 0, &t->reorder));
    if (separate) TRY(reorder_make(c, prim_md, user_md, 1, &t->reorder_sum));
    return 0;
}

static void dims4(dnnl_dims_t d, int64_t a, int64_t b, int64_t h, int64_t w) { d[0] = a, d[1] = b, d[2] = h, d[3] = w; }

/* The caller's layouts: src (m, in_c, in_h, in_w) as NHWC, weights (F, in_c,
 * kh, kw) as HWIO, dst (m, F, out_h, out_w) as NHWC, bias (F); with tag any,
 * the primitive's requests. */
static int conv_mds(tower_window_t g, int m, dnnl_format_tag_t act_tag, dnnl_format_tag_t w_tag,
                    dnnl_memory_desc_t *src, dnnl_memory_desc_t *wei, dnnl_memory_desc_t *dst, dnnl_memory_desc_t *bias)
{
    dnnl_dims_t sd, wd, dd, bd = {g.filters};
    dims4(sd, m, g.in_c, g.in_h, g.in_w);
    dims4(wd, g.filters, g.in_c, g.kh, g.kw);
    dims4(dd, m, g.filters, g.out_h, g.out_w);
    DN(dnnl_memory_desc_init_by_tag(src, 4, sd, dnnl_f32, act_tag));
    DN(dnnl_memory_desc_init_by_tag(wei, 4, wd, dnnl_f32, w_tag));
    DN(dnnl_memory_desc_init_by_tag(dst, 4, dd, dnnl_f32, act_tag));
    DN(dnnl_memory_desc_init_by_tag(bias, 1, bd, dnnl_f32, dnnl_a));
    return 0;
}

/* A convolution descriptor of kind over the mds (TF padding: what the walk
 * puts before, the rest after, never negative). */
static int conv_desc(enum conv_kind kind, tower_window_t g, const dnnl_memory_desc_t *src,
                     const dnnl_memory_desc_t *wei, const dnnl_memory_desc_t *bias, const dnnl_memory_desc_t *dst,
                     dnnl_convolution_desc_t *cd)
{
    dnnl_dims_t strides = {g.sh, g.sw}, pad_l = {g.pad_top, g.pad_left};
    dnnl_dims_t pad_r = {PSC_MAX((g.out_h - 1) * g.sh + g.kh - g.in_h - g.pad_top, 0),
                         PSC_MAX((g.out_w - 1) * g.sw + g.kw - g.in_w - g.pad_left, 0)};
    dnnl_alg_kind_t alg = dnnl_convolution_direct;
    if (kind == CONV_FWD)
        DN(dnnl_convolution_forward_desc_init(cd, dnnl_forward_training, alg, src, wei, bias, dst, strides, pad_l,
                                              pad_r));
    else if (kind == CONV_BWD_DATA)
        DN(dnnl_convolution_backward_data_desc_init(cd, alg, src, wei, dst, strides, pad_l, pad_r));
    else
        DN(dnnl_convolution_backward_weights_desc_init(cd, alg, src, wei, NULL, dst, strides, pad_l, pad_r));
    return 0;
}

/* The forward's eltwise post-op for act (none for PSC_ACT_NONE). */
static int act_attr(int act, dnnl_primitive_attr_t *attr)
{
    dnnl_alg_kind_t alg = act == PSC_ACT_RELU      ? dnnl_eltwise_relu
                          : act == PSC_ACT_TANH    ? dnnl_eltwise_tanh
                          : act == PSC_ACT_SIGMOID ? dnnl_eltwise_logistic
                                                   : dnnl_alg_kind_undef;
    DN(dnnl_primitive_attr_create(attr));
    if (alg == dnnl_alg_kind_undef) return 0;
    dnnl_post_ops_t po;
    DN(dnnl_post_ops_create(&po));
    dnnl_status_t s = dnnl_post_ops_append_eltwise(po, 1.0f, alg, 0.0f, 0.0f);
    if (s == dnnl_success) s = dnnl_primitive_attr_set_post_ops(*attr, po);
    dnnl_post_ops_destroy(po);
    return s == dnnl_success ? 0 : dnnl_fail(s, "eltwise post-op", __LINE__);
}

/* p's primitive descriptor (key filled in): the forward's (with its post-op)
 * or, for the backward ops, one hinted by a forward of the same shape. */
static int conv_pd(tower_cpu_dnnl_t *c, const conv_prim_t *p, dnnl_primitive_desc_t *pd)
{
    dnnl_memory_desc_t src, wei, dst, bias;
    TRY(conv_mds(p->g, p->m, dnnl_format_tag_any, dnnl_format_tag_any, &src, &wei, &dst, &bias));
    dnnl_convolution_desc_t fd, cd;
    TRY(conv_desc(CONV_FWD, p->g, &src, &wei, p->bias ? &bias : NULL, &dst, &fd));
    dnnl_primitive_attr_t attr = NULL;
    int rc = p->kind == CONV_FWD ? act_attr(p->act, &attr) : 0;
    dnnl_status_t s = dnnl_success;
    if (!rc) s = dnnl_primitive_desc_create(pd, &fd, attr, c->engine, NULL);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (rc) return rc;
    if (s != dnnl_success) return dnnl_fail(s, "convolution forward", __LINE__);
    if (p->kind == CONV_FWD) return 0;
    dnnl_primitive_desc_t hint = *pd;
    *pd = NULL;
    if (!(rc = conv_desc(p->kind, p->g, &src, &wei, &bias, &dst, &cd)))
        if ((s = dnnl_primitive_desc_create(pd, &cd, NULL, c->engine, hint)) != dnnl_success)
            rc = dnnl_fail(s, "convolution backward", __LINE__);
    dnnl_primitive_desc_destroy(hint);
    return rc;
}

/* Builds p's primitive and tensors (its key filled in). */
static int prim_build(tower_cpu_dnnl_t *c, conv_prim_t *p)
{
    dnnl_primitive_desc_t pd = NULL;
    TRY(conv_pd(c, p, &pd));
    dnnl_memory_desc_t src, wei, dst, bias;
    int rc = conv_mds(p->g, p->m, dnnl_nhwc, dnnl_hwio, &src, &wei, &dst, &bias);
    dnnl_status_t s = rc ? dnnl_success : dnnl_primitive_create(&p->prim, pd);
    if (!rc && s != dnnl_success) rc = dnnl_fail(s, "primitive", __LINE__);
    if (!rc && p->kind == CONV_FWD) {
        if (!(rc = tensor_make(c, &p->in[0], pd, DNNL_ARG_SRC, &src, 0, 0)) &&
            !(rc = tensor_make(c, &p->in[1], pd, DNNL_ARG_WEIGHTS, &wei, 0, 0)))
            rc = tensor_make(c, &p->out, pd, DNNL_ARG_DST, &dst, 1, 0);
        if (!rc && p->bias && (s = dnnl_memory_create(&p->bias_mem, &bias, c->engine, DNNL_MEMORY_NONE)))
            rc = dnnl_fail(s, "bias memory", __LINE__);
    } else if (!rc && p->kind == CONV_BWD_DATA) {
        if (!(rc = tensor_make(c, &p->in[0], pd, DNNL_ARG_DIFF_DST, &dst, 0, 0)) &&
            !(rc = tensor_make(c, &p->in[1], pd, DNNL_ARG_WEIGHTS, &wei, 0, 0)))
            rc = tensor_make(c, &p->out, pd, DNNL_ARG_DIFF_SRC, &src, 1, 0);
    } else if (!rc) {
        if (!(rc = tensor_make(c, &p->in[0], pd, DNNL_ARG_SRC, &src, 0, 0)) &&
            !(rc = tensor_make(c, &p->in[1], pd, DNNL_ARG_DIFF_DST, &dst, 0, 0)))
            rc = tensor_make(c, &p->out, pd, DNNL_ARG_DIFF_WEIGHTS, &wei, 1, 1);
    }
    dnnl_primitive_desc_destroy(pd);
    return rc;
}

/* The cache entry for the key, built on a miss. */
static int prim_get(tower_cpu_dnnl_t *c, enum conv_kind kind, tower_window_t g, int m, int act, int bias,
                    conv_prim_t **out)
{
    conv_prim_t *free_slot = NULL;
    int threads = omp_get_max_threads ? omp_get_max_threads() : 0;
    for (int i = 0; i < CACHE_SIZE; i++) {
        conv_prim_t *p = &c->cache[i];
        if (!p->used) {
            if (!free_slot) free_slot = p;
            continue;
        }
        if (p->kind == kind && p->m == m && p->act == act && p->bias == bias && p->threads == threads &&
            !memcmp(&p->g, &g, sizeof g)) {
            *out = p;
            return 0;
        }
    }
    conv_prim_t *p = free_slot;
    if (!p) {
        p = &c->cache[c->next];
        c->next = (c->next + 1) % CACHE_SIZE;
        prim_free(p);
    }
    p->kind = kind, p->g = g, p->m = m, p->act = act, p->bias = bias, p->threads = threads;
    int rc = prim_build(c, p);
    if (rc) {
        prim_free(p);
        return rc;
    }
    p->used = 1;
    *out = p;
    return 0;
}

/* ---- running ---- */

static int reorder_run(tower_cpu_dnnl_t *c, dnnl_primitive_t r, dnnl_memory_t from, dnnl_memory_t to)
{
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    DN(dnnl_primitive_execute(r, c->stream, 2, args));
    return 0;
}

/* p on the caller's in0, in1 (and bias) into out (added when accumulate). */
static int prim_run(tower_cpu_dnnl_t *c, conv_prim_t *p, const float *in0, const float *in1, const float *bias,
                    float *out, int accumulate)
{
    const float *ins[2] = {in0, in1};
    dnnl_exec_arg_t args[4];
    int nargs = 0;
    for (int i = 0; i < 2; i++) {
        dnnl_tensor_t *t = &p->in[i];
        DN(dnnl_memory_set_data_handle(t->user, (void *)ins[i]));
        if (t->reorder) TRY(reorder_run(c, t->reorder, t->user, t->prim));
        args[nargs++] = (dnnl_exec_arg_t){t->arg, t->prim};
    }
    if (p->bias_mem) {
        DN(dnnl_memory_set_data_handle(p->bias_mem, (void *)bias));
        args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, p->bias_mem};
    }
    dnnl_tensor_t *o = &p->out;
    DN(dnnl_memory_set_data_handle(o->user, out));
    /* straight into the caller's memory when its layout is the primitive's and nothing is added */
    int direct = !o->reorder && !accumulate;
    args[nargs++] = (dnnl_exec_arg_t){o->arg, direct ? o->user : o->prim};
    DN(dnnl_primitive_execute(p->prim, c->stream, nargs, args));
    if (accumulate) {
        PSC_ASSERT(o->reorder_sum);
        TRY(reorder_run(c, o->reorder_sum, o->prim, o->user));
    } else if (o->reorder) {
        TRY(reorder_run(c, o->reorder, o->prim, o->user));
    }
    DN(dnnl_stream_wait(c->stream));
    return 0;
}

int tower_cpu_dnnl_conv_fwd(tower_cpu_dnnl_t *c, tower_window_t g, const float *x, int m, const float *w,
                            const float *b, enum psc_activation act, float *y)
{
    conv_prim_t *p;
    threads_apply(); /* before a primitive is built: it sizes its work for the threads it sees */
    TRY(prim_get(c, CONV_FWD, g, m, (int)act, b != NULL, &p));
    return prim_run(c, p, x, w, b, y, 0);
}

int tower_cpu_dnnl_conv_bwd_data(tower_cpu_dnnl_t *c, tower_window_t g, const float *dy, int m, const float *w,
                                 float *dx)
{
    conv_prim_t *p;
    threads_apply(); /* before a primitive is built: it sizes its work for the threads it sees */
    TRY(prim_get(c, CONV_BWD_DATA, g, m, 0, 0, &p));
    return prim_run(c, p, dy, w, NULL, dx, 0);
}

int tower_cpu_dnnl_conv_bwd_weights(tower_cpu_dnnl_t *c, tower_window_t g, const float *x, const float *dy, int m,
                                    float *dw, int accumulate)
{
    conv_prim_t *p;
    threads_apply(); /* before a primitive is built: it sizes its work for the threads it sees */
    TRY(prim_get(c, CONV_BWD_WEIGHTS, g, m, 0, 0, &p));
    return prim_run(c, p, x, dy, NULL, dw, accumulate);
}

int tower_cpu_dnnl_gemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                        const float *B, int ldb, float beta, float *C, int ldc)
{
    threads_apply();
    DN(dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc));
    return 0;
}

/* ---- contexts ---- */

int tower_cpu_dnnl_create(tower_cpu_dnnl_t **out, char *err, size_t errlen)
{
    tower_cpu_dnnl_t *c = psc_xcalloc(1, sizeof *c);
    dnnl_status_t s = dnnl_engine_create(&c->engine, dnnl_cpu, 0);
    if (s == dnnl_success) s = dnnl_stream_create(&c->stream, c->engine, dnnl_stream_default_flags);
    if (s != dnnl_success) {
        tower_cpu_dnnl_destroy(c);
        *out = NULL;
        return psc_seterr(err, errlen, PSC_EUNSUPPORTED, "cpu tower: cannot start oneDNN on the CPU: %s",
                          dnnl_status2str(s));
    }
    *out = c;
    return 0;
}

void tower_cpu_dnnl_destroy(tower_cpu_dnnl_t *c)
{
    if (!c) return;
    for (int i = 0; i < CACHE_SIZE; i++) prim_free(&c->cache[i]);
    if (c->stream) dnnl_stream_destroy(c->stream);
    if (c->engine) dnnl_engine_destroy(c->engine);
    free(c);
}
