/* bench_apply — the PS's update rate: SGD, momentum and Adam over a 64 MiB
 * variable, in GB/s of memory touched (reads + writes of value, gradient and
 * slots per element: SGD 12 B, momentum 20 B, Adam 28 B), through
 *   store       the real store path: store_push of every 2 MiB wire chunk
 *               (validation, finiteness scan, locks, per-chunk Adam t, optim_apply);
 *   kernel      optim_apply (optim.h) over the whole variable in one call;
 *   plain       the reference: a plain C loop doing the same arithmetic over
 *               the same kind of arrays, compiled at -O3 (this file's pragma;
 *               the build passes -fno-math-errno to every file) for the build's
 *               baseline ISA, so sqrtf becomes sqrtps. Check:
 *               objdump -d build/bench_apply | awk '/<ref_adam>:/,/^$/' | grep sqrtps
 *   plain-avx2  the same loop compiled for AVX2 (x86-64 CPUs that have it):
 *               what twice the vector width gives;
 * measured in the same run, on 1 thread and on 2 threads that take alternate
 * 2 MiB chunks (the store's 2 threads push chunks of one variable, as two RPC
 * threads would). Rounds alternate the paths; each path's best round counts.
 * The ratio is path / plain at the same thread count (target >= 0.8).
 * A second table runs the loops on a 128 KiB variable whose arrays stay in L2:
 * the instructions, not the memory, bound that one.
 * A measurement, not a test: it never fails on speed.
 *
 * usage: bench_apply [seconds-per-point [plain|plain-avx2|kernel|store]]
 *        (default 1 s, every path; naming a path runs only that one, for perf)
 */
#include "optim.h"
#include "psc.h"
#include "rng.h"
#include "store.h"
#include "wire.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the reference: plain loops at -O3 ----
 * Defined twice from one body: for the build's baseline ISA (x86-64: SSE2,
 * like the rest of the build) and, on x86-64, for AVX2 (twice the vector
 * width; used only where the CPU has it), to show what wider vectors give. */
#pragma GCC push_options
#pragma GCC optimize("O3")

#define REF_LOOPS(sfx, attr)                                                                                        \
    __attribute__((noinline)) attr static void ref_sgd##sfx(float *restrict w, const float *restrict g, size_t n,  \
                                                          float lr)                                              \
    {                                                                                                              \
        for (size_t i = 0; i < n; i++) w[i] -= g[i] * lr;                                                          \
    }                                                                                                              \
    __attribute__((noinline)) attr static void ref_momentum##sfx(float *restrict w, float *restrict a,              \
                                                               const float *restrict g, size_t n, float lr,       \
                                                               float mom)                                         \
    {                                                                                                              \
        for (size_t i = 0; i < n; i++) {                                                                           \
            a[i] = a[i] * mom + g[i];                                                                              \
            w[i] -= a[i] * lr;                                                                                     \
        }                                                                                                          \
    }                                                                                                              \
    __attribute__((noinline)) attr static void ref_adam##sfx(float *restrict w, float *restrict m, float *restrict v, \
                                                           const float *restrict g, size_t n, float lr_t,         \
                                                           float omb1, float omb2, float eps)                     \
    {                                                                                                              \
        for (size_t i = 0; i < n; i++) {                                                                           \
            m[i] += (g[i] - m[i]) * omb1;                                                                          \
            v[i] += (g[i] * g[i] - v[i]) * omb2;                                                                   \
            w[i] -= (m[i] * lr_t) / (sqrtf(v[i]) + eps);                                                           \
        }                                                                                                          \
    }

REF_LOOPS(, )
#if defined(__x86_64__)
#define HAVE_REF_AVX2 1
REF_LOOPS(_avx2, __attribute__((target("avx2"))))
#else
#define HAVE_REF_AVX2 0
#endif

#pragma GCC pop_options

enum path { PATH_PLAIN, PATH_PLAIN_AVX2, PATH_KERNEL, PATH_STORE, NPATHS };
static const char *const path_names[NPATHS] = {"plain", "plain-avx2", "kernel", "store"};

typedef struct bench_opt {
    const char *name;
    psc_optim_config_t cfg;
    int bytes_per_elem; /* reads + writes of w, g and the slots */
} bench_opt_t;

/* One optimizer's arrays (plain and kernel paths) and a store holding a
 * variable of the same size (store path). */
typedef struct bench_var {
    const bench_opt_t *opt;
    size_t n;           /* elements */
    float *w, *s0, *s1; /* (n) value and slots of the plain and kernel paths */
    const float *g;     /* (n) gradient, shared by all paths */
    store_t *store;     /* NULL for the in-cache table */
    int64_t t[2];       /* per thread: Adam's step of the plain and kernel passes */
} bench_var_t;

typedef struct bench_thread {
    bench_var_t *var;
    enum path path;
    int tid, nthreads;
    double deadline;
    pthread_barrier_t *start;
    double bytes, secs;
} bench_thread_t;

static int have_avx2(void)
{
#if HAVE_REF_AVX2
    return __builtin_cpu_supports("avx2");
#else
    return 0;
#endif
}

static float adam_lr_t(const psc_optim_config_t *c, int64_t t)
{
    double b1t = pow((double)c->beta1, (double)t), b2t = pow((double)c->beta2, (double)t);
    return (float)((double)c->learning_rate * sqrt(1.0 - b2t) / (1.0 - b1t));
}

static void plain_apply(const psc_optim_config_t *c, int avx2, float *w, float *s0, float *s1, const float *g,
                        size_t n, int64_t t)
{
    float lr = c->learning_rate;
    switch (c->kind) {
    case PSC_OPT_SGD:
#if HAVE_REF_AVX2
        if (avx2) {
            ref_sgd_avx2(w, g, n, lr);
            break;
        }
#endif
        ref_sgd(w, g, n, lr);
        break;
    case PSC_OPT_MOMENTUM:
#if HAVE_REF_AVX2
        if (avx2) {
            ref_momentum_avx2(w, s0, g, n, lr, c->momentum);
            break;
        }
#endif
        ref_momentum(w, s0, g, n, lr, c->momentum);
        break;
    case PSC_OPT_ADAM: {
        float lr_t = adam_lr_t(c, t), omb1 = 1.0f - c->beta1, omb2 = 1.0f - c->beta2;
#if HAVE_REF_AVX2
        if (avx2) {
            ref_adam_avx2(w, s0, s1, g, n, lr_t, omb1, omb2, c->epsilon);
            break;
        }
#endif
        ref_adam(w, s0, s1, g, n, lr_t, omb1, omb2, c->epsilon);
        break;
    }
    default: PSC_ASSERT(!"no reference loop for this optimizer");
    }
    (void)avx2;
}

/* One pass of thread tid over its part of the variable: with 1 thread the
 * whole array in one call (store: every chunk in turn), with 2 threads the
 * chunks k with k % 2 == tid, one call each. */
static void pass(bench_var_t *v, enum path p, int tid, int nthreads)
{
    const psc_optim_config_t *c = &v->opt->cfg;
    size_t bytes = v->n * 4, nchunks = psc_chunk_count(bytes);
    int64_t t = ++v->t[tid];
    if (p != PATH_STORE && nthreads == 1) {
        if (p == PATH_KERNEL)
            optim_apply(c, v->w, v->s0, v->s1, v->g, v->n, t);
        else
            plain_apply(c, p == PATH_PLAIN_AVX2, v->w, v->s0, v->s1, v->g, v->n, t);
        return;
    }
    for (size_t k = (size_t)tid; k < nchunks; k += (size_t)nthreads) {
        size_t e0 = k * (PSC_CHUNK_BYTES / 4), len = psc_chunk_len(bytes, k), m = len / 4;
        float *s0 = v->s0 ? v->s0 + e0 : NULL, *s1 = v->s1 ? v->s1 + e0 : NULL;
        if (p == PATH_KERNEL) {
            optim_apply(c, v->w + e0, s0, s1, v->g + e0, m, t);
        } else if (p == PATH_STORE) {
            char err[256];
            if (store_push(v->store, "bench/var", psc_chunk_offset(k), v->g + e0, len, bytes, NULL, NULL, err,
                           sizeof err)) {
                fprintf(stderr, "bench_apply: store_push: %s\n", err);
                exit(1);
            }
        } else {
            plain_apply(c, p == PATH_PLAIN_AVX2, v->w + e0, s0, s1, v->g + e0, m, t);
        }
    }
}

static void *thread_main(void *arg)
{
    bench_thread_t *th = arg;
    bench_var_t *v = th->var;
    pthread_barrier_wait(th->start);
    double t0 = psc_now(), t;
    size_t passes = 0;
    do {
        pass(v, th->path, th->tid, th->nthreads);
        passes++;
        t = psc_now();
    } while (t < th->deadline || passes < 2);
    th->secs = t - t0;
    size_t mine = 0; /* elements of this thread's share of a pass */
    for (size_t k = (size_t)th->tid; k < psc_chunk_count(v->n * 4); k += (size_t)th->nthreads)
        mine += psc_chunk_len(v->n * 4, k) / 4;
    th->bytes = (double)passes * (double)mine * v->opt->bytes_per_elem;
    return NULL;
}

/* GB/s of memory touched by `nthreads` threads running path p for secs. */
static double measure(bench_var_t *v, enum path p, int nthreads, double secs)
{
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)nthreads);
    bench_thread_t th[2];
    pthread_t id[2];
    double deadline = psc_now() + secs;
    for (int i = 0; i < nthreads; i++) {
        th[i] = (bench_thread_t){
            .var = v, .path = p, .tid = i, .nthreads = nthreads, .deadline = deadline, .start = &start};
        if (i > 0) pthread_create(&id[i], NULL, thread_main, &th[i]);
    }
    thread_main(&th[0]);
    double bytes = th[0].bytes, elapsed = th[0].secs;
    for (int i = 1; i < nthreads; i++) {
        pthread_join(id[i], NULL);
        bytes += th[i].bytes;
        elapsed = th[i].secs > elapsed ? th[i].secs : elapsed;
    }
    pthread_barrier_destroy(&start);
    return bytes / elapsed / 1e9;
}

static float *filled(size_t n, float value)
{
    float *a = psc_xaligned(n * sizeof(float));
    for (size_t i = 0; i < n; i++) a[i] = value;
    return a;
}

static void var_open(bench_var_t *v, const bench_opt_t *o, const float *g, size_t n, int with_store)
{
    memset(v, 0, sizeof *v);
    v->opt = o;
    v->n = n;
    v->g = g;
    int ns = optim_slot_count(&o->cfg);
    v->w = filled(n, 0.0f);
    v->s0 = ns >= 1 ? filled(n, 0.0f) : NULL;
    v->s1 = ns >= 2 ? filled(n, 0.0f) : NULL;
    optim_init_slots(&o->cfg, v->s0, v->s1, n);
    if (!with_store) return;
    char err[256];
    int created;
    store_var_spec_t spec = {.name = "bench/var", .rank = 1, .shape = {(int64_t)n}};
    v->store = store_create();
    if (store_create_vars(v->store, "benchapply", &o->cfg, &spec, 1, &created, err, sizeof err) ||
        store_set_ready(v->store, "benchapply", err, sizeof err)) {
        fprintf(stderr, "bench_apply: store: %s\n", err);
        exit(1);
    }
}

static void var_close(bench_var_t *v)
{
    store_destroy(v->store);
    free(v->w);
    free(v->s0);
    free(v->s1);
}

/* gbs[path][threads-1]: the best of `rounds` rounds, the paths alternating in
 * each round (these VMs drift; alternating spreads the drift over all paths).
 * Paths not in `paths` (a bit mask) stay 0. */
static void run_table(bench_var_t *v, unsigned paths, int max_threads, int rounds, double secs,
                      double gbs[NPATHS][2])
{
    memset(gbs, 0, sizeof(double) * NPATHS * 2);
    for (int r = 0; r < rounds; r++)
        for (int nt = 1; nt <= max_threads; nt++)
            for (int p = 0; p < NPATHS; p++) {
                if (!(paths & (1u << p)) || (p == PATH_PLAIN_AVX2 && nt > 1)) continue;
                double x = measure(v, (enum path)p, nt, secs / rounds);
                if (x > gbs[p][nt - 1]) gbs[p][nt - 1] = x;
            }
}

static void print_cell(double gbs[NPATHS][2], enum path p, int nt)
{
    if (gbs[p][nt] == 0)
        printf(" %14s", "-");
    else if (p == PATH_PLAIN || gbs[PATH_PLAIN][nt] == 0)
        printf(" %14.2f", gbs[p][nt]);
    else
        printf(" %7.2f (%.2f)", gbs[p][nt], gbs[p][nt] / gbs[PATH_PLAIN][nt]);
}

int main(int argc, char **argv)
{
    double secs = 1.0;
    unsigned paths = (1u << NPATHS) - 1;
    if (argc == 3) {
        paths = 0;
        for (int p = 0; p < NPATHS; p++)
            if (strcmp(argv[2], path_names[p]) == 0) paths = 1u << p;
    }
    if (argc > 3 || (argc >= 2 && (secs = atof(argv[1])) <= 0) || paths == 0) {
        fprintf(stderr, "usage: bench_apply [seconds-per-point [plain|plain-avx2|kernel|store]]   (default 1, all)\n");
        return PSC_EXIT_USAGE;
    }
    if (!have_avx2()) paths &= ~(1u << PATH_PLAIN_AVX2);
    static const bench_opt_t opts[] = {
        {"sgd", {.kind = PSC_OPT_SGD, .learning_rate = 0.01f}, 12},
        {"momentum", {.kind = PSC_OPT_MOMENTUM, .learning_rate = 0.01f, .momentum = 0.9f}, 20},
        {"adam",
         {.kind = PSC_OPT_ADAM, .learning_rate = 0.001f, .beta1 = 0.9f, .beta2 = 0.999f, .epsilon = 1e-8f},
         28},
    };
    enum { NOPTS = 3, ROUNDS = 5 };
    const size_t big = ((size_t)64 << 20) / 4, small = ((size_t)128 << 10) / 4;
    float *g = psc_xaligned(big * sizeof(float));
    psc_rng_t rng;
    psc_rng_seed(&rng, 1);
    for (size_t i = 0; i < big; i++) g[i] = (float)(2.0 * psc_rng_uniform(&rng) - 1.0);

    printf("bench_apply: optimizer update, GB/s of memory touched (reads + writes of value, gradient, slots:\n"
           "SGD 12, momentum 20, Adam 28 bytes per element), best of %d rounds of %.2g s per point;\n"
           "(ratio) = path / plain loop (-O3, baseline ISA) at the same thread count\n",
           ROUNDS, secs / ROUNDS);
    printf("64 MiB variable; store = store_push of each 2 MiB chunk; 2T = 2 threads on alternate chunks\n");
    printf("%-9s %14s %14s %14s %14s %14s %14s %14s\n", "optimizer", "plain 1T", "plain-avx2 1T", "kernel 1T",
           "store 1T", "plain 2T", "kernel 2T", "store 2T");
    for (int i = 0; i < NOPTS; i++) {
        bench_var_t v;
        double gbs[NPATHS][2];
        var_open(&v, &opts[i], g, big, 1);
        run_table(&v, paths, 2, ROUNDS, secs, gbs);
        printf("%-9s", opts[i].name);
        for (int p = 0; p < NPATHS; p++) print_cell(gbs, (enum path)p, 0);
        print_cell(gbs, PATH_PLAIN, 1);
        print_cell(gbs, PATH_KERNEL, 1);
        print_cell(gbs, PATH_STORE, 1);
        printf("\n");
        fflush(stdout);
        var_close(&v);
    }
    printf("128 KiB variable (all arrays stay in L2), 1 thread, one call per pass\n");
    printf("%-9s %14s %14s %14s\n", "optimizer", "plain", "plain-avx2", "kernel");
    for (int i = 0; i < NOPTS; i++) {
        bench_var_t v;
        double gbs[NPATHS][2];
        var_open(&v, &opts[i], g, small, 0);
        run_table(&v, paths & ~(1u << PATH_STORE), 1, ROUNDS, secs / 2, gbs);
        printf("%-9s", opts[i].name);
        for (int p = 0; p < PATH_STORE; p++) print_cell(gbs, (enum path)p, 0);
        printf("\n");
        var_close(&v);
    }
    if (!have_avx2()) printf("plain-avx2: this CPU (or build) has no AVX2\n");
    free(g);
    return 0;
}
