/* sync.h — the gradient accumulator of one wire chunk for sync-replica training
 * (TensorFlow's SyncReplicasOptimizer semantics), and the rule that says how
 * many contributions a step needs.
 *
 * Pure code: no locks, no store, no clock of its own (times are the caller's
 * seconds). The store (store.c) keeps one accumulator per wire chunk of every
 * trainable variable and one, without data, for global_step, and calls these
 * under the variable's lock.
 *
 * Rules. A contribution is `count` >= 1 batches' mean gradients summed into one
 * chunk, computed by a replica at its `local_step` (the global_step it read):
 *   - stale:    local_step < step: the contribution is dropped; nothing changes
 *               (the store counts it). The replica learns the chunk's step from
 *               the reply and catches up.
 *   - current:  local_step == step: it is added; count += its count. The first
 *               contribution of a step copies its data and starts the step's
 *               clock (first_at = its arrival time).
 *   - ahead:    local_step > step (the chunk lags, e.g. after a restore or when
 *               its timeout has not fired yet while other chunks moved on): a
 *               pending step (count >= 1) is applied first, as if its timeout
 *               had expired; then the accumulator skips to local_step
 *               (sync_acc_skip_to) and the contribution is added there.
 *   - apply:    a step is due when count >= needed (enough arrived), or when
 *               count >= 1 and now - first_at >= timeout (the timeout rule, so a
 *               dead or slow replica never stalls the others; exactly at the
 *               boundary counts as expired). An empty step is never due. The
 *               applied gradient is the mean: sum / count, count being the
 *               number of batches, not of requests. Then step += 1, count = 0.
 *   - absent replicas: needed = clamp(ceil(R * present / N), 1, R) with R =
 *               replicas_to_aggregate, N = total_num_replicas and `present` the
 *               replicas the caller deems alive (the store: heard from within
 *               the timeout and not finished). With all N present, needed = R;
 *               fewer present lower it in proportion, never below 1.
 *   - skipping ahead never drops data: sync_acc_skip_to requires an empty
 *     accumulator, and only moves forward.
 *
 * Ownership: sync_acc_t is caller storage; `sum` (n floats, or NULL for the
 * global_step counter) is the caller's buffer, written here. Not thread-safe:
 * the caller serializes calls on one accumulator.
 */
#ifndef PSC_SYNC_H
#define PSC_SYNC_H

#include <stddef.h>
#include <stdint.h>

typedef struct sync_acc {
    int64_t step;    /* the step whose gradients are accepted now (starts at 0) */
    uint32_t count;  /* contributions (batches) summed for `step` so far */
    double first_at; /* arrival time (seconds, caller's clock) of the first of them */
    float *sum;      /* (n) their sum; NULL for the global_step counter (no data) */
} sync_acc_t;

enum sync_verdict { SYNC_STALE = -1, SYNC_CURRENT = 0, SYNC_AHEAD = 1 };

/* SYNC_STALE, SYNC_CURRENT or SYNC_AHEAD as local_step is <, == or > a->step. */
enum sync_verdict sync_acc_check(const sync_acc_t *a, int64_t local_step);

/* Adds `count` (>= 1) contributions whose gradients sum to g (n floats,
 * float-aligned; g may be NULL when a->sum is NULL). The first contribution of
 * a step copies g (no zeroing pass needed) and sets first_at = now; later ones
 * add element-wise in float. count saturates at UINT32_MAX. */
void sync_acc_add(sync_acc_t *a, const float *g, size_t n, uint32_t count, double now);
/* The same with g at any byte alignment (gradients straight from the wire). */
void sync_acc_add_bytes(sync_acc_t *a, const void *g, size_t n, uint32_t count, double now);

/* 1 when the step should be applied now: count >= needed (*by_timeout = 0), or
 * count >= 1 and now - first_at >= timeout (*by_timeout = 1); else 0 (and
 * *by_timeout = 0). by_timeout may be NULL. Never due with count == 0. */
int sync_acc_due(const sync_acc_t *a, uint32_t needed, double now, double timeout, int *by_timeout);

/* Turns sum into the mean in place (divides by count, count >= 1) and returns
 * a->sum (NULL for the counter); the caller applies it, then calls
 * sync_acc_advance. */
const float *sync_acc_mean(sync_acc_t *a, size_t n);

/* Ends the step: step += 1, count = 0 (sum is overwritten by the next add). */
void sync_acc_advance(sync_acc_t *a);

/* Moves an empty accumulator (count == 0, asserted) forward: step = max(step, a->step). */
void sync_acc_skip_to(sync_acc_t *a, int64_t step);

/* Contributions needed for a step when `present` of the N replicas are present:
 * clamp(ceil(R * present / N), 1, R); present is clamped to [0, N]. R, N >= 1
 * (R < 1 is taken as 1; N < 1 gives R). */
uint32_t sync_needed(int R, int N, int present);

#endif
