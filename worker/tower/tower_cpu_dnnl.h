/* tower_cpu_dnnl.h — the CPU tower's convolutions and large GEMMs on oneDNN
 * (Debian's libdnnl, the v2 C API; the library PyTorch and TensorFlow run these
 * ops on for CPUs). Internal to the CPU backend: tower_cpu.c is its only
 * caller, and this module is the only one that includes dnnl.h or talks to
 * OpenMP (oneDNN's threading runtime in Debian's build).
 *
 * Layouts are the walk's (tower_walk.h): activations NHWC, conv kernels
 * (kh, kw, in_c, F), GEMMs row-major. oneDNN picks its own (blocked) layouts
 * for the fastest kernels; the module reorders into and out of them.
 *
 * Ownership: a context (one per CPU tower, made by the backend's open) owns
 * its oneDNN engine, stream and a small cache of primitives keyed by the op,
 * the window and the example count (the first step of a shape builds them;
 * later steps allocate nothing). A context is used by one thread at a time;
 * distinct contexts run on distinct threads at once.
 *
 * Threads: tower_cpu_dnnl_set_threads(n) is what every later op runs on, on
 * whichever thread calls it (OpenMP's thread count is per calling thread, so
 * each op applies it). OpenMP's idle threads sleep instead of spinning unless
 * OMP_WAIT_POLICY or GOMP_SPINCOUNT say otherwise (a ps_server may share the
 * cores): the module sets OMP_WAIT_POLICY=PASSIVE before libgomp reads it.
 */
#ifndef PSC_TOWER_CPU_DNNL_H
#define PSC_TOWER_CPU_DNNL_H

#include "tower_walk.h"

#include <stddef.h>

typedef struct tower_cpu_dnnl tower_cpu_dnnl_t;

/* A context for one tower (caller owns; tower_cpu_dnnl_destroy frees).
 * Returns 0, or a negative PSC_E* with the reason in err. */
int tower_cpu_dnnl_create(tower_cpu_dnnl_t **out, char *err, size_t errlen);
/* Frees c and its primitives; NULL does nothing. */
void tower_cpu_dnnl_destroy(tower_cpu_dnnl_t *c);

/* The conv ops of tower_walk.h's table (conv_fwd, conv_bwd_data,
 * conv_bwd_weights) with the same contracts, for any m >= 1 (no scratch).
 * Each returns 0, or a negative PSC_E* after logging oneDNN's error. */
int tower_cpu_dnnl_conv_fwd(tower_cpu_dnnl_t *c, tower_window_t g, const float *x, int m, const float *w,
                            const float *b, enum psc_activation act, float *y);
int tower_cpu_dnnl_conv_bwd_data(tower_cpu_dnnl_t *c, tower_window_t g, const float *dy, int m, const float *w,
                                 float *dx);
int tower_cpu_dnnl_conv_bwd_weights(tower_cpu_dnnl_t *c, tower_window_t g, const float *x, const float *dy, int m,
                                    float *dw, int accumulate);

/* Row-major C (M, N) = alpha op(A) op(B) + beta C on oneDNN's GEMM (C not read
 * when beta = 0). Any thread. Returns 0 or a negative PSC_E*. */
int tower_cpu_dnnl_gemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                        const float *B, int ldb, float beta, float *C, int ldc);

/* Threads for every later op (n >= 1; 0: OpenMP's default, OMP_NUM_THREADS or
 * the cores). Any thread, any time. */
void tower_cpu_dnnl_set_threads(int n);

#endif
