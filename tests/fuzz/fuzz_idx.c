/* fuzz_idx — libFuzzer target: IDX image/label files (worker/data/dataset.c),
 * plain; the input is split into an images file and a labels file. */
#include "dataset.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void put(const char *path, const uint8_t *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    fwrite(p, 1, n, f);
    fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char img[64], lab[64];
    if (!img[0]) {
        snprintf(img, sizeof img, "/tmp/psc-fuzz-idx-%d-images", (int)getpid());
        snprintf(lab, sizeof lab, "/tmp/psc-fuzz-idx-%d-labels", (int)getpid());
    }
    if (size == 0) return 0;
    /* the first byte says where the labels start in the rest */
    size_t n = size - 1, cut = data[0] <= n ? data[0] : n;
    put(img, data + 1, cut);
    put(lab, data + 1 + cut, n - cut);
    char err[512];
    dataset_t ds;
    if (dataset_idx_load(img, lab, 0, &ds, err, sizeof err) == 0) dataset_deinit(&ds);
    return 0;
}
