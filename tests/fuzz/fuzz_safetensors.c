/* fuzz_safetensors — libFuzzer target: the safetensors reader
 * (common/safetensors.c) on any bytes; every tensor it accepts is read whole
 * (its data must lie inside the input). */
#include "safetensors.h"

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    psc_st_file_t f;
    char err[256];
    if (psc_st_parse(data, size, &f, err, sizeof err) != 0) return 0;
    volatile uint8_t sink = 0;
    for (int i = 0; i < f.n; i++) {
        size_t n = (size_t)f.t[i].numel * (f.t[i].dtype == PSC_ST_I64 ? 8 : 4);
        for (size_t j = 0; j < n; j++) sink ^= f.t[i].data[j];
        (void)psc_st_find(&f, f.t[i].name);
    }
    (void)sink;
    psc_st_free(&f);
    return 0;
}
