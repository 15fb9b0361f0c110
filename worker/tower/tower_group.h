/* tower_group.h — a worker's towers: one model replica per device, trained in
 * lock-step on slices of the worker's batch (the in-graph replication of the
 * TensorFlow multi-GPU examples).
 *
 * A step gives every tower the same parameters, splits the batch into
 * contiguous slices (tower k gets n/T examples, the first n%T one more), runs
 * forward and backward on all towers at once (one thread per tower), and
 * averages the towers' gradients weighted by their slice sizes, which is exactly
 * the gradient of the mean loss over the whole batch. The worker then pushes
 * that one gradient. Evaluation is split the same way.
 *
 * Devices ("--devices"): a comma list of "cpu" or "gpu:K" entries, or "gpu"
 * (every visible GPU); "cpu,cpu" gives two CPU towers. Every entry must be of
 * one backend (their gradients are reduced by that backend). NULL, "" or "auto"
 * picks every visible GPU, else one CPU tower (and logs why: INFO when there is
 * no GPU or no driver, WARN when the CUDA driver is unusable, e.g. older than
 * this build's CUDA runtime needs).
 */
#ifndef PSC_TOWER_GROUP_H
#define PSC_TOWER_GROUP_H

#include "job_spec.h"
#include "tf_config.h"
#include "model_spec.h"
#include "tower.h"

#include <stddef.h>
#include <stdint.h>

#define PSC_MAX_TOWERS 16

typedef struct tower_group tower_group_t;

/* Parses a devices string into a backend and device list (no tower is built).
 * *backend is the chosen backend, devices[] its device indices (0 for cpu).
 * Errors, with the text in err: PSC_EINVAL for a malformed string; for GPUs
 * that are not there PSC_EUNSUPPORTED (no CUDA in this build, no GPU, no GPU K)
 * or the CUDA backend's device_error code (an unusable driver). May initialize
 * the CUDA runtime (and its threads): call it after blocking signals. */
int tower_group_parse_devices(const char *devices, const tower_ops_t **backend, int *devices_out, int *ndevices, char *err,
                         size_t errlen);

/* Builds the towers for spec's model. max_batch: the most examples one step or
 * one evaluate call gives to the whole set (each tower is built for its slice). */
int tower_group_create(const char *devices, const psc_job_spec_t *spec, const psc_var_desc_t *vars, int nvars,
                  int max_batch, tower_group_t **out, char *err, size_t errlen);
void tower_group_destroy(tower_group_t *ts); /* NULL ok */
int tower_group_count(const tower_group_t *ts);
/* "cpu", "cpu,cpu", "gpu:0,gpu:1" — what was built. */
const char *tower_group_describe(const tower_group_t *ts);
/* The threads of a CPU tower's matrix products (tower_cpu_set_threads):
 * blas_threads when > 0 (--blas_threads), else, for one CPU tower, this task's
 * share of the host's CPUs (cpu_share.h; several CPU towers keep 1 each), and
 * logs the choice. GPU towers: nothing. Process-wide (OpenBLAS's setting). */
void tower_group_set_cpu_threads(tower_group_t *ts, int blas_threads, const psc_cluster_t *cluster, psc_task_t self);

int tower_group_set_params(tower_group_t *ts, const float *params);
/* One step on n examples: loss is the mean over all n, correct the hits.
 * Every tower gets seed and its slice's offset in the batch, so the dropout
 * masks (tower.h) do not depend on how the batch is split. */
int tower_group_train_step(tower_group_t *ts, const float *x, const int32_t *y, int n, uint64_t seed, float *loss,
                      int *correct);
/* The averaged gradient into the host slab. */
int tower_group_get_grads(tower_group_t *ts, float *grads);
/* Adds the loss sum and hits over n examples (no dropout). */
int tower_group_evaluate(tower_group_t *ts, const float *x, const int32_t *y, int n, double *loss_sum, int *correct);
/* Logits per example: the model's last layer's outputs. */
int tower_group_classes(const tower_group_t *ts);
/* Inference (no dropout) on n examples, split like evaluate: logits (n,
 * classes) on the host. */
int tower_group_predict(tower_group_t *ts, const float *x, int n, float *logits);

#endif
