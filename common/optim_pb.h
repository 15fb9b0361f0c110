/* optim_pb.h — the optimizer settings between the job spec's struct and the
 * wire (psc.OptimizerSpec, with its psc.LrSchedule): one conversion each way,
 * used by the chief's Create (worker) and the PS's Create handler.
 * Thread-safety: plain functions of their arguments.
 */
#ifndef PSC_OPTIM_PB_H
#define PSC_OPTIM_PB_H

#include "job_spec.h"
#include "psc.pb-c.h"

#include <stddef.h>

/* The optimizer's slot arrays (each the size of the variable or row): how
 * many (0..2), and their names as TF calls them ("momentum", "accumulator",
 * "m", "v", "rms", "accum", "linear"; NULL beyond the count). The PS keeps
 * them (ps_server/optim.h), a checkpoint names a variable's X/NAME, and a
 * warm start that carries them checks they are the same. */
int psc_optim_slot_count(const psc_optim_config_t *c);
const char *psc_optim_slot_name(const psc_optim_config_t *c, int slot);
/* TensorFlow's checkpoint name of a dense variable's slot k: the optimizer's
 * name, "_1" for the second (tf.compat.v1.train's slot variables
 * "<var>/<Optimizer>[_1]": "Adam", "Adam_1"); NULL beyond the count. */
const char *psc_optim_slot_ckpt_name(const psc_optim_config_t *c, int slot);

/* Fills *p from o; p's strings point into static storage (no free). For an
 * optimizer with a constant schedule only (asserted: a schedule must not be
 * dropped on the way to the PS); use psc_optim_to_pb_sched otherwise. */
void psc_optim_to_pb(const psc_optim_config_t *o, Psc__OptimizerSpec *p);
/* As psc_optim_to_pb, for any schedule: a non-constant one is written into the
 * caller's *sched (its arrays point into o: keep o alive while p is used) and
 * p->schedule = sched; a constant one leaves p->schedule NULL (sched may be
 * NULL then). */
void psc_optim_to_pb_sched(const psc_optim_config_t *o, Psc__OptimizerSpec *p, Psc__LrSchedule *sched);
/* Fills *c from o (NULL: missing), schedule included (absent: constant).
 * Returns 0, or PSC_EINVAL naming the problem (missing, unknown name,
 * learning_rate not > 0, an FTRL parameter or a schedule the job spec would
 * refuse), so what the PS runs (psc_lr_at) never sees a bad schedule. */
int psc_optim_from_pb(const Psc__OptimizerSpec *o, psc_optim_config_t *c, char *err, size_t errlen);

#endif
