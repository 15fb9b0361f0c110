/* optim.h — TensorFlow's optimizer updates, applied element-wise on the PS.
 *
 * Formulas are those of tf.compat.v1.train's kernels (training_ops.cc):
 *   GradientDescent  w -= lr*g
 *   Momentum         a = m*a + g;  w -= lr*a            (nesterov: w -= lr*g + lr*m*a)
 *   Adagrad          acc += g*g;   w -= lr*g/sqrt(acc)   (acc starts at initial_accumulator_value)
 *   Adam (step t>=1) lr_t = lr*sqrt(1-b2^t)/(1-b1^t); m = b1*m+(1-b1)*g; v = b2*v+(1-b2)*g*g;
 *                    w -= lr_t*m/(sqrt(v)+eps)
 *   RMSProp          ms = rho*ms + (1-rho)*g*g; mom = momentum*mom + lr*g/sqrt(ms+eps); w -= mom
 *                    (ms starts at 1, as in tf.compat.v1.train.RMSPropOptimizer)
 *   FTRL             FtrlOptimizer / ApplyFtrl (FTRL-Proximal, no l2 shrinkage), p = learning_rate_power:
 *                    acc_new = acc + g*g
 *                    linear += g - (acc_new^(-p) - acc^(-p))/lr * w      (p = -0.5: sqrt, as TF)
 *                    w = |linear| > l1 ? (sign(linear)*l1 - linear) / (acc_new^(-p)/lr + 2*l2) : 0
 *                    acc = acc_new                 (acc starts at initial_accumulator_value, linear at 0)
 * Slots: Momentum 1 (accumulation), Adagrad 1 (accumulator), Adam 2 (m, v), RMSProp 2 (ms, mom),
 * FTRL 2 (accum, linear; TF's checkpoint names <var>/Ftrl and <var>/Ftrl_1).
 * The learning rate is c->learning_rate, except for optim_apply_row(s), which
 * take it from the caller (a schedule's value); a caller of the others with a
 * schedule passes a copy of the config with learning_rate replaced.
 * Pure functions; thread-safe on disjoint arrays.
 */
#ifndef PSC_OPTIM_H
#define PSC_OPTIM_H

#include "job_spec.h"
#include "psc.h"

#include <stddef.h>
#include <stdint.h>

/* Number of slot arrays (each the size of the variable) the optimizer needs:
 * 0..2 (common/optim_pb.h's psc_optim_slot_count, shared with the chief). */
int optim_slot_count(const psc_optim_config_t *c);
/* Names of the slots as TF calls them ("momentum", "accumulator", "m", "v", "rms", "momentum", "accum",
 * "linear"). */
const char *optim_slot_name(const psc_optim_config_t *c, int slot);
/* Fills fresh slot arrays with their initial values. slot1 may be NULL if unused. */
void optim_init_slots(const psc_optim_config_t *c, float *slot0, float *slot1, size_t n);
/* Applies one update of gradient g (n little-endian float32, at any byte
 * alignment) to w[0..n). t is the 1-based count of updates of these elements
 * including this one (Adam's bias correction). */
void optim_apply(const psc_optim_config_t *c, float *w, float *slot0, float *slot1, const void *g, size_t n,
                 int64_t t);
/* The same with the gradient in ng segments that together hold exactly n
 * floats, split anywhere (a float may straddle two or more segments). The
 * result is bit-identical to optim_apply on the joined bytes: the update is
 * element-wise and every element goes through the same operations. */
void optim_apply_iov(const psc_optim_config_t *c, float *w, float *slot0, float *slot1, const psc_iov_t *g, int ng,
                     size_t n, int64_t t);
/* One row of a sparse table (sparse_table.h): optim_apply on w[0..dim) at
 * learning rate lr (rounded to float, as TF casts it) instead of
 * c->learning_rate; t is the row's own update count including this one (so
 * Adam is LazyAdam: bias-corrected by the row's t). g: dim little-endian
 * float32 at any alignment. slot0/slot1 as for optim_apply. */
void optim_apply_row(const psc_optim_config_t *c, double lr, float *w, float *slot0, float *slot1, const void *g,
                     int dim, int64_t t);
/* optim_apply_row on m rows at once, each stored as a sparse table's record
 * stores it (sparse_table.h): row r's values are w = rows[r][0..dim), its
 * slots follow them (slot0 = w + dim, slot1 = w + 2*dim, as many as the
 * optimizer has); gradient g[r] (dim little-endian float32, any alignment);
 * t[r] >= 1 its own update count including this one. The loops' ISA and the
 * per-call constants are chosen once for the m rows. Rows must not overlap. */
void optim_apply_rows(const psc_optim_config_t *c, double lr, float *const *rows, const void *const *g,
                      const int64_t *t, size_t m, int dim);

#endif
