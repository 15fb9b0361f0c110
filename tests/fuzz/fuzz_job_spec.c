/* fuzz_job_spec — libFuzzer target: job spec JSON (common/job_spec.c) and the
 * model it describes (variables, placement). */
#include "job_spec.h"
#include "model_spec.h"
#include "placement.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    memcpy(s, data, size);
    s[size] = '\0';
    char err[512];
    psc_job_spec_t spec;
    if (psc_job_spec_parse(s, &spec, err, sizeof err) == 0) {
        psc_var_desc_t *vars;
        int nvars;
        if (psc_model_variables(&spec, &vars, &nvars, err, sizeof err) == 0) {
            psc_placed_var_t *placed;
            int nplaced;
            if (psc_place(vars, nvars, 3, spec.placement, spec.min_shard_bytes, &placed, &nplaced, err, sizeof err) == 0)
                free(placed);
            free(vars);
        }
        psc_job_spec_deinit(&spec);
    }
    free(s);
    return 0;
}
