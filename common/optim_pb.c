/* optim_pb.c — see optim_pb.h. */
#include "optim_pb.h"

#include "psc.h"

#include <string.h>

void psc_optim_to_pb(const psc_optim_config_t *o, Psc__OptimizerSpec *p)
{
    psc__optimizer_spec__init(p);
    p->name = (char *)psc_optim_name(o->kind);
    p->learning_rate = o->learning_rate;
    p->momentum = o->momentum;
    p->use_nesterov = o->use_nesterov;
    p->beta1 = o->beta1;
    p->beta2 = o->beta2;
    p->epsilon = o->epsilon;
    p->initial_accumulator_value = o->initial_accumulator_value;
    p->decay = o->decay;
}

int psc_optim_from_pb(const Psc__OptimizerSpec *o, psc_optim_config_t *c, char *err, size_t errlen)
{
    if (!o) return psc_seterr(err, errlen, PSC_EINVAL, "optimizer missing");
    memset(c, 0, sizeof *c);
    int found = 0;
    for (int k = PSC_OPT_SGD; k <= PSC_OPT_RMSPROP; k++)
        if (strcmp(o->name, psc_optim_name((enum psc_optim_kind)k)) == 0) {
            c->kind = (enum psc_optim_kind)k;
            found = 1;
        }
    if (!found) return psc_seterr(err, errlen, PSC_EINVAL, "unknown optimizer \"%s\"", o->name);
    if (!(o->learning_rate > 0)) return psc_seterr(err, errlen, PSC_EINVAL, "optimizer.learning_rate must be > 0");
    c->learning_rate = o->learning_rate;
    c->momentum = o->momentum;
    c->use_nesterov = o->use_nesterov;
    c->beta1 = o->beta1;
    c->beta2 = o->beta2;
    c->epsilon = o->epsilon;
    c->initial_accumulator_value = o->initial_accumulator_value;
    c->decay = o->decay;
    return 0;
}
