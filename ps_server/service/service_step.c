/* service_step.c — what the Step and Batch handlers share about global_step:
 * the check of a non-sync Step, and the replicas' own step counts (Status
 * reports them so a restarted replica resumes where it was).
 *
 * Invariants: replica_steps only grows (max seen) until a Release resets it;
 * svc->lock guards it with the rest of the per-replica state.
 */
#include "service_internal.h"

#include "psc.h"

#include <pthread.h>

void svc_step_note(ps_service_t *svc, const Psc__StepRequest *r)
{
    if (r->replica_step > 0 && r->worker < PSC_MAX_REPLICAS) {
        pthread_mutex_lock(&svc->lock);
        if (r->replica_step > svc->replica_steps[r->worker]) svc->replica_steps[r->worker] = r->replica_step;
        if (r->worker + 1 > svc->max_rank) svc->max_rank = r->worker + 1;
        pthread_mutex_unlock(&svc->lock);
    }
}

int svc_step_check(ps_service_t *svc, const Psc__StepRequest *r, char *err, size_t errlen)
{
    if (r->increment < 0)
        return psc_seterr(err, errlen, PSC_EINVAL, "step increment %lld is negative", (long long)r->increment);
    if (r->increment > 0 && store_get_sync(svc->store, NULL))
        return psc_seterr(err, errlen, PSC_EUNSUPPORTED,
                          "global_step is in sync mode: a step is a contribution with count >= 1, not an increment");
    return 0;
}
