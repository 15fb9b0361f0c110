/* model_job.c — see model_job.h: the one place that chooses the kind. */
#include "model_job.h"

int model_job_create(const model_job_opts_t *o, model_job_t **out, char *err, size_t errlen)
{
    *out = NULL;
    return o->spec->loss_kind == PSC_LOSS_SIGMOID_XENT ? ctr_job_model_create(o, out, err, errlen)
                                                        : dense_job_create(o, out, err, errlen);
}

void model_job_destroy(model_job_t *j)
{
    if (j) j->ops->destroy(j);
}
