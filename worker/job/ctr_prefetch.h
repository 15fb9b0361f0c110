/* ctr_prefetch.h — asynchronous recommendation training with rows pulled a
 * batch ahead (the job spec's "prefetch_rows": 1, the default).
 *
 * The serial step is compute(t), then one round: push t's row gradients and
 * pull t+1's rows. Here step t's exchange is split by the ids the next
 * batch shares with it (S = ids(t) ∩ ids(t+1), per table):
 *
 *   critical  rides on the step's dense round, which the step waits for:
 *             t's gradients of the rows in S, then the pull of those rows;
 *   bulk      runs on this module's thread while t+1 computes: t's other
 *             gradients, then the pull of t+2's rows that t+1 does not hold.
 *
 * So a step waits for a round of |S| rows (a quarter of a batch's on
 * Criteo-like data) instead of all of them, and the rest of the PS's work
 * runs beside the next step's tower. What a row reads, exactly: every update
 * this worker pushed before the step (a row of t+1 is either in S, pulled
 * after t's push of it, or not in t, pulled after t-1's pushes; before the
 * bulk pulls t+2's rows it pushes t's), as the serial path; other workers'
 * updates as of one step earlier than the serial path would read them (the
 * rows outside S are pulled during the step before). The dense weights are
 * pulled in the critical round, as in the serial path. Sync replicas never
 * prefetch: their rows are pulled at the step the PS are at.
 *
 * Threads: one caller thread, plus the bulk's own.
 */
#ifndef PSC_CTR_PREFETCH_H
#define PSC_CTR_PREFETCH_H

#include "ctr_loader.h"
#include "job_spec.h"
#include "ps_client.h"

#include <stddef.h>

typedef struct ctr_pf ctr_pf_t;

/* For spec's tables, over pc; starts the bulk thread. 0 or an error (err). */
int ctr_pf_create(ps_client_t *pc, const psc_job_spec_t *spec, ctr_pf_t **out, char *err, size_t errlen);
/* Waits for the bulk in flight and stops the thread. NULL ok. */
void ctr_pf_destroy(ctr_pf_t *p);

/* Waits for the bulk in flight, if any. 0 when it succeeded (or none was in
 * flight); else its error (err): its pushes are lost, as a failed round's
 * are, and the batch it pulled for (t+2) lacks rows. */
int ctr_pf_wait(ctr_pf_t *p, char *err, size_t errlen);

/* Step t's exchange, after ctr_pf_wait: cur is t with its row gradients,
 * next t+1 (NULL: none yet), next2 t+2 (NULL: none yet; without next, none).
 * Starts the bulk (pushes of cur's rows outside S, then the pull of next2's
 * rows outside next into next2's rows) and returns the critical ops in
 * *crit, *ncrit (0: none) for ps_client_round_sparse: valid until the next
 * ctr_pf_start. cur's and next's ids and next2 must stay until then too;
 * next and next2 hold room for their rows (ctr_slot_batch_reserve_rows). */
void ctr_pf_start(ctr_pf_t *p, const ctr_slot_batch_t *cur, ctr_slot_batch_t *next, ctr_slot_batch_t *next2,
                  const ps_sparse_op_t **crit, int *ncrit);
/* Starts the bulk ctr_pf_start planned: once the critical round is over, so
 * that the two do not contend on the PS (the critical round is what the
 * step waits for). */
void ctr_pf_kick(ctr_pf_t *p);
/* The critical round succeeded: copies the rows it pulled into next's. */
void ctr_pf_crit_done(ctr_pf_t *p, ctr_slot_batch_t *next);

/* Rows pushed so far, and how many of them on the steps' critical path. */
void ctr_pf_counts(const ctr_pf_t *p, int64_t *pushed, int64_t *critical);

#endif
