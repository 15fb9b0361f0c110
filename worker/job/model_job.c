/* model_job.c — see model_job.h: the one place that chooses the kind. */
#include "model_job.h"

#include "psc.h"

int model_job_create(const model_job_opts_t *o, model_job_t **out, char *err, size_t errlen)
{
    *out = NULL;
    return o->spec->loss_kind == PSC_LOSS_SIGMOID_XENT ? ctr_job_model_create(o, out, err, errlen)
                                                        : dense_job_create(o, out, err, errlen);
}

model_job_opts_t model_job_opts_of(const trainer_opts_t *o, const psc_var_desc_t *vars, int nvars, int64_t nparams,
                                   ps_client_t *pc)
{
    return (model_job_opts_t){.spec = o->spec,
                              .vars = vars,
                              .nvars = nvars,
                              .nparams = nparams,
                              .pc = pc,
                              .cluster = o->cluster,
                              .task = o->task,
                              .devices = o->devices,
                              .blas_threads = o->blas_threads,
                              .debug_fail_row_pulls = o->debug_fail_row_pulls,
                              .replicas = 1,
                              .per_step = 1,
                              .eval_batch = PSC_MAX(o->spec->batch_size, 256),
                              .stop = o->stop,
                              .finish = o->finish};
}

void model_job_destroy(model_job_t *j)
{
    if (j) j->ops->destroy(j);
}
