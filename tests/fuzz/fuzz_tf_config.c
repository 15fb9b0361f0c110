/* fuzz_tf_config — libFuzzer target: TF_CONFIG and cluster documents (common/tf_config.c). */
#include "tf_config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    memcpy(s, data, size);
    s[size] = '\0';
    char err[512];
    psc_tf_config_t cfg;
    if (psc_tf_config_parse(s, &cfg, err, sizeof err) == 0) psc_tf_config_deinit(&cfg);
    psc_cluster_t cl;
    if (psc_cluster_parse(s, &cl, err, sizeof err) == 0) psc_cluster_deinit(&cl);
    free(s);
    return 0;
}
