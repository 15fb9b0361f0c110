/* tower.c — what every tower backend shares: the parameter slab's layout and the
 * Keras initialization (see tower.h).
 *
 * Layout: trainable variables in model order, each packed row-major, no padding;
 * global_step is not in the slab (offset 0, size 0).
 * Initialization: variable i draws from its own psc_rng seeded by
 * psc_seed_mix(seed, i), so a variable's initial value does not depend on the
 * others (adding a layer at the end leaves the earlier ones unchanged).
 */
#include "tower.h"

#include "psc.h"
#include "rng.h"

#include <math.h>
#include <string.h>

int64_t tower_layout(const psc_var_desc_t *vars, int nvars, int64_t *offsets)
{
    int64_t total = 0;
    for (int i = 0; i < nvars; i++) {
        if (vars[i].is_step) {
            offsets[i] = 0;
            continue;
        }
        offsets[i] = total;
        total += vars[i].numel;
    }
    return total;
}

void tower_init_params(const psc_var_desc_t *vars, int nvars, uint64_t seed, float *params)
{
    float *p = params;
    for (int i = 0; i < nvars; i++) {
        const psc_var_desc_t *v = &vars[i];
        if (v->is_step) continue;
        if (v->rank <= 1) { /* bias: zeros */
            for (int64_t k = 0; k < v->numel; k++) p[k] = 0.0f;
        } else {
            /* glorot_uniform; a conv kernel (kh, kw, in_c, out_c) counts its
             * receptive field kh*kw in both fans, as Keras does. */
            double receptive = 1;
            for (int d = 0; d < v->rank - 2; d++) receptive *= (double)v->shape[d];
            double fan_in = receptive * (double)v->shape[v->rank - 2];
            double fan_out = receptive * (double)v->shape[v->rank - 1];
            double limit = sqrt(6.0 / (fan_in + fan_out));
            psc_rng_t r;
            psc_rng_seed(&r, psc_seed_mix(seed, (uint64_t)i));
            for (int64_t k = 0; k < v->numel; k++) p[k] = (float)((2.0 * psc_rng_uniform(&r) - 1.0) * limit);
        }
        p += v->numel;
    }
}
