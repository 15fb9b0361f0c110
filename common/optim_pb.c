/* optim_pb.c — see optim_pb.h.
 *
 * Invariant: what psc_optim_from_pb accepts is what the job spec parser
 * (job_spec_optim.c) accepts, for the fields the PS computes with: a Create
 * from a buggy or hostile client is refused, never an abort in psc_lr_at.
 */
#include "optim_pb.h"

#include "psc.h"

#include <math.h>
#include <string.h>

static void fill(const psc_optim_config_t *o, Psc__OptimizerSpec *p)
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
    p->learning_rate_power = o->learning_rate_power;
    p->l1 = o->l1;
    p->l2 = o->l2;
}

void psc_optim_to_pb(const psc_optim_config_t *o, Psc__OptimizerSpec *p)
{
    PSC_ASSERT(o->schedule.kind == PSC_LR_CONSTANT);
    fill(o, p);
}

void psc_optim_to_pb_sched(const psc_optim_config_t *o, Psc__OptimizerSpec *p, Psc__LrSchedule *sched)
{
    fill(o, p);
    const psc_lr_schedule_t *s = &o->schedule;
    if (s->kind == PSC_LR_CONSTANT) return;
    PSC_ASSERT(sched);
    psc__lr_schedule__init(sched);
    sched->kind = (uint32_t)s->kind;
    sched->decay_steps = s->decay_steps;
    sched->decay_rate = s->decay_rate;
    sched->staircase = s->staircase;
    if (s->kind == PSC_LR_PIECEWISE) {
        sched->n_boundaries = (size_t)s->nboundaries;
        sched->boundaries = (int64_t *)s->boundaries;
        sched->n_values = (size_t)s->nboundaries + 1;
        sched->values = (float *)s->values;
    }
    sched->alpha = s->alpha;
    sched->warmup_steps = s->warmup_steps;
    sched->warmup_target = s->warmup_target;
    p->schedule = sched;
}

/* A wire schedule into *s, with the job spec's checks. */
static int schedule_from_pb(const Psc__LrSchedule *w, psc_lr_schedule_t *s, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    if (!w) return 0;
    if (w->kind > PSC_LR_COSINE) return psc_seterr(err, errlen, PSC_EINVAL, "unknown schedule kind %u", w->kind);
    s->kind = (enum psc_lr_kind)w->kind;
    s->decay_steps = w->decay_steps;
    s->decay_rate = w->decay_rate;
    s->staircase = w->staircase;
    s->alpha = w->alpha;
    s->warmup_steps = w->warmup_steps;
    s->warmup_target = w->warmup_target;
    const char *name = psc_lr_kind_name(s->kind);
    if ((s->kind == PSC_LR_EXPONENTIAL || s->kind == PSC_LR_COSINE) && s->decay_steps < 1)
        return psc_seterr(err, errlen, PSC_EINVAL, "schedule %s: decay_steps must be > 0", name);
    if (s->kind == PSC_LR_EXPONENTIAL && !(isfinite(s->decay_rate) && s->decay_rate > 0))
        return psc_seterr(err, errlen, PSC_EINVAL, "schedule %s: decay_rate must be > 0", name);
    if (s->kind == PSC_LR_COSINE &&
        !(s->alpha >= 0 && s->alpha <= 1 && s->warmup_steps >= 0 && isfinite(s->warmup_target) &&
          s->warmup_target >= 0))
        return psc_seterr(err, errlen, PSC_EINVAL,
                          "schedule %s: alpha must be in [0, 1], warmup_steps and warmup_target >= 0", name);
    if (s->kind != PSC_LR_PIECEWISE) return 0;
    if (w->n_boundaries < 1 || w->n_boundaries > PSC_LR_MAX_BOUNDARIES || w->n_values != w->n_boundaries + 1)
        return psc_seterr(err, errlen, PSC_EINVAL,
                          "schedule %s: expected 1 to %d boundaries and one value more, got %zu and %zu", name,
                          PSC_LR_MAX_BOUNDARIES, w->n_boundaries, w->n_values);
    s->nboundaries = (int)w->n_boundaries;
    for (size_t i = 0; i < w->n_values; i++) {
        if (i < w->n_boundaries) {
            s->boundaries[i] = w->boundaries[i];
            if (s->boundaries[i] < 0 || (i > 0 && s->boundaries[i] <= s->boundaries[i - 1]))
                return psc_seterr(err, errlen, PSC_EINVAL,
                                  "schedule %s: boundaries must be non-negative and strictly increasing", name);
        }
        s->values[i] = w->values[i];
        if (!(isfinite(s->values[i]) && s->values[i] > 0))
            return psc_seterr(err, errlen, PSC_EINVAL, "schedule %s: values must be > 0", name);
    }
    return 0;
}

int psc_optim_from_pb(const Psc__OptimizerSpec *o, psc_optim_config_t *c, char *err, size_t errlen)
{
    if (!o) return psc_seterr(err, errlen, PSC_EINVAL, "optimizer missing");
    memset(c, 0, sizeof *c);
    int found = 0;
    for (int k = PSC_OPT_SGD; k <= PSC_OPT_FTRL; k++)
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
    c->learning_rate_power = o->learning_rate_power;
    c->l1 = o->l1;
    c->l2 = o->l2;
    if (c->kind == PSC_OPT_FTRL &&
        !(c->learning_rate_power <= 0 && c->l1 >= 0 && c->l2 >= 0 && isfinite(c->l1) && isfinite(c->l2) &&
          isfinite(c->learning_rate_power) && c->initial_accumulator_value > 0))
        return psc_seterr(err, errlen, PSC_EINVAL,
                          "optimizer ftrl: learning_rate_power must be <= 0, l1 and l2 >= 0, "
                          "initial_accumulator_value > 0");
    return schedule_from_pb(o->schedule, &c->schedule, err, errlen);
}

int psc_optim_slot_count(const psc_optim_config_t *c)
{
    switch (c->kind) {
    case PSC_OPT_SGD: return 0;
    case PSC_OPT_MOMENTUM: return 1;
    case PSC_OPT_ADAGRAD: return 1;
    case PSC_OPT_ADAM: return 2;
    case PSC_OPT_RMSPROP: return 2;
    case PSC_OPT_FTRL: return 2;
    }
    return 0;
}

const char *psc_optim_slot_name(const psc_optim_config_t *c, int slot)
{
    switch (c->kind) {
    case PSC_OPT_SGD: return NULL;
    case PSC_OPT_MOMENTUM: return slot == 0 ? "momentum" : NULL;
    case PSC_OPT_ADAGRAD: return slot == 0 ? "accumulator" : NULL;
    case PSC_OPT_ADAM: return slot == 0 ? "m" : slot == 1 ? "v" : NULL;
    case PSC_OPT_RMSPROP: return slot == 0 ? "rms" : slot == 1 ? "momentum" : NULL;
    case PSC_OPT_FTRL: return slot == 0 ? "accum" : slot == 1 ? "linear" : NULL;
    }
    return NULL;
}

const char *psc_optim_slot_ckpt_name(const psc_optim_config_t *c, int slot)
{
    if (slot < 0 || slot >= psc_optim_slot_count(c)) return NULL;
    switch (c->kind) {
    case PSC_OPT_SGD: return NULL;
    case PSC_OPT_MOMENTUM: return "Momentum";
    case PSC_OPT_ADAGRAD: return "Adagrad";
    case PSC_OPT_ADAM: return slot == 0 ? "Adam" : "Adam_1";          /* m, v */
    case PSC_OPT_RMSPROP: return slot == 0 ? "RMSProp" : "RMSProp_1"; /* ms ("rms"), mom */
    case PSC_OPT_FTRL: return slot == 0 ? "Ftrl" : "Ftrl_1";          /* accum, linear */
    }
    return NULL;
}
