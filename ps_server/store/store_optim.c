/* store_optim.c — a Create's checks of optimizer settings (a Create may come
 * from any client, not only a job spec the parser checked) and their
 * equality (a Create of the same job again). See store_internal.h. */
#include "store_internal.h"

#include "psc.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* A schedule's own checks (the job spec's parser checks them too; a Create
 * from elsewhere must not get a rate that is not finite and > 0). */
static int check_schedule(const psc_lr_schedule_t *l, char *err, size_t errlen)
{
#define BAD(...) psc_seterr(err, errlen, PSC_EINVAL, __VA_ARGS__)
    switch (l->kind) {
    case PSC_LR_CONSTANT: return 0;
    case PSC_LR_EXPONENTIAL:
        if (l->decay_steps <= 0) return BAD("exponential_decay decay_steps %" PRId64 " must be > 0", l->decay_steps);
        if (!(l->decay_rate > 0) || !isfinite(l->decay_rate))
            return BAD("exponential_decay decay_rate %g must be finite and > 0", (double)l->decay_rate);
        return 0;
    case PSC_LR_PIECEWISE:
        if (l->nboundaries < 1 || l->nboundaries > PSC_LR_MAX_BOUNDARIES)
            return BAD("piecewise_constant has %d boundaries (1..%d)", l->nboundaries, PSC_LR_MAX_BOUNDARIES);
        for (int i = 0; i <= l->nboundaries; i++) {
            if (!(l->values[i] > 0) || !isfinite(l->values[i]))
                return BAD("piecewise_constant values[%d] %g must be finite and > 0", i, (double)l->values[i]);
            if (i && i < l->nboundaries && l->boundaries[i] <= l->boundaries[i - 1])
                return BAD("piecewise_constant boundaries must increase (boundaries[%d])", i);
        }
        return 0;
    case PSC_LR_COSINE:
        if (l->decay_steps <= 0) return BAD("cosine_decay decay_steps %" PRId64 " must be > 0", l->decay_steps);
        if (!(l->alpha >= 0 && l->alpha <= 1)) return BAD("cosine_decay alpha %g must be in [0, 1]", (double)l->alpha);
        if (l->warmup_steps < 0) return BAD("cosine_decay warmup_steps %" PRId64 " must be >= 0", l->warmup_steps);
        if (!(l->warmup_target >= 0) || !isfinite(l->warmup_target))
            return BAD("cosine_decay warmup_target %g must be finite and >= 0", (double)l->warmup_target);
        return 0;
    }
    return BAD("unknown learning-rate schedule %d", (int)l->kind);
#undef BAD
}

int store_check_optim(const psc_optim_config_t *o, char *err, size_t errlen)
{
#define BAD(...) psc_seterr(err, errlen, PSC_EINVAL, __VA_ARGS__)
    if (o->kind < PSC_OPT_SGD || o->kind > PSC_OPT_FTRL) return BAD("unknown optimizer kind %d", (int)o->kind);
    if (!(o->learning_rate > 0) || !isfinite(o->learning_rate))
        return BAD("optimizer learning_rate %g must be finite and > 0", (double)o->learning_rate);
    switch (o->kind) {
    case PSC_OPT_SGD: break;
    case PSC_OPT_MOMENTUM:
    case PSC_OPT_RMSPROP:
        if (!(o->momentum >= 0) || !isfinite(o->momentum))
            return BAD("optimizer momentum %g must be finite and >= 0", (double)o->momentum);
        if (o->kind == PSC_OPT_RMSPROP) {
            if (!(o->decay >= 0 && o->decay <= 1))
                return BAD("rmsprop decay (rho) %g must be in [0, 1]", (double)o->decay);
            if (!(o->epsilon >= 0) || !isfinite(o->epsilon))
                return BAD("rmsprop epsilon %g must be finite and >= 0", (double)o->epsilon);
        }
        break;
    case PSC_OPT_ADAGRAD:
    case PSC_OPT_FTRL:
        if (!(o->initial_accumulator_value > 0) || !isfinite(o->initial_accumulator_value))
            return BAD("%s initial_accumulator_value %g must be finite and > 0", psc_optim_name(o->kind),
                       (double)o->initial_accumulator_value);
        if (o->kind == PSC_OPT_FTRL) {
            if (!(o->learning_rate_power <= 0) || !isfinite(o->learning_rate_power))
                return BAD("ftrl learning_rate_power %g must be finite and <= 0", (double)o->learning_rate_power);
            if (!(o->l1 >= 0) || !isfinite(o->l1) || !(o->l2 >= 0) || !isfinite(o->l2))
                return BAD("ftrl l1 %g and l2 %g must be finite and >= 0", (double)o->l1, (double)o->l2);
        }
        break;
    case PSC_OPT_ADAM:
        if (!(o->beta1 >= 0 && o->beta1 < 1)) return BAD("adam beta1 %g must be in [0, 1)", (double)o->beta1);
        if (!(o->beta2 >= 0 && o->beta2 < 1)) return BAD("adam beta2 %g must be in [0, 1)", (double)o->beta2);
        if (!(o->epsilon >= 0) || !isfinite(o->epsilon))
            return BAD("adam epsilon %g must be finite and >= 0", (double)o->epsilon);
        break;
    }
    return check_schedule(&o->schedule, err, errlen);
#undef BAD
}

int store_optim_same(const psc_optim_config_t *a, const psc_optim_config_t *b)
{
    const psc_lr_schedule_t *x = &a->schedule, *y = &b->schedule;
    int same = a->kind == b->kind && a->learning_rate == b->learning_rate && a->momentum == b->momentum &&
               !a->use_nesterov == !b->use_nesterov && a->beta1 == b->beta1 && a->beta2 == b->beta2 &&
               a->epsilon == b->epsilon && a->initial_accumulator_value == b->initial_accumulator_value &&
               a->decay == b->decay && a->learning_rate_power == b->learning_rate_power && a->l1 == b->l1 &&
               a->l2 == b->l2 && x->kind == y->kind && x->decay_steps == y->decay_steps &&
               x->decay_rate == y->decay_rate && !x->staircase == !y->staircase && x->nboundaries == y->nboundaries &&
               x->alpha == y->alpha && x->warmup_steps == y->warmup_steps && x->warmup_target == y->warmup_target;
    for (int i = 0; same && i < x->nboundaries && i < PSC_LR_MAX_BOUNDARIES; i++)
        same = x->boundaries[i] == y->boundaries[i] && x->values[i] == y->values[i];
    if (same && x->kind == PSC_LR_PIECEWISE && x->nboundaries >= 0 && x->nboundaries <= PSC_LR_MAX_BOUNDARIES)
        same = x->values[x->nboundaries] == y->values[x->nboundaries];
    return same;
}

