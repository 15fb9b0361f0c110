/* optim_pb.h — the optimizer settings between the job spec's struct and the
 * wire (psc.OptimizerSpec): one conversion each way, used by the chief's
 * Create (worker) and the PS's Create handler.
 */
#ifndef PSC_OPTIM_PB_H
#define PSC_OPTIM_PB_H

#include "job_spec.h"
#include "psc.pb-c.h"

#include <stddef.h>

/* Fills *p from o; p's strings point into static storage (no free). */
void psc_optim_to_pb(const psc_optim_config_t *o, Psc__OptimizerSpec *p);
/* Fills *c from o (NULL: missing). Returns 0, or PSC_EINVAL naming the
 * problem (missing, unknown name, learning_rate not > 0). */
int psc_optim_from_pb(const Psc__OptimizerSpec *o, psc_optim_config_t *c, char *err, size_t errlen);

#endif
