/* fuzz_idx — libFuzzer target: IDX image/label files read by the data
 * reader's idx format (worker/data/format_idx.c) into a dense data set
 * (dataset_read), plain; the input is split into an images file and a labels
 * file, and a second read goes through record sharding (2 shards, the
 * format's skip). */
#include "dataset.h"
#include "reader.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    static char prefix[64], img[96], lab[96];
    if (!prefix[0]) {
        snprintf(prefix, sizeof prefix, "/tmp/psc-fuzz-idx-%d", (int)getpid());
        snprintf(img, sizeof img, "%s-images-idx3-ubyte", prefix);
        snprintf(lab, sizeof lab, "%s-labels-idx1-ubyte", prefix);
    }
    if (size == 0) return 0;
    /* the first byte says where the labels start in the rest */
    size_t n = size - 1, cut = data[0] <= n ? data[0] : n;
    put(img, data + 1, cut);
    put(lab, data + 1 + cut, n - cut);
    static psc_job_spec_t spec;
    memset(&spec, 0, sizeof spec);
    spec.data_format = PSC_DATA_IDX;
    spec.epochs = 1;
    snprintf(spec.train_path, sizeof spec.train_path, "%s", prefix);
    char err[512];
    dataset_t ds;
    if (dataset_read(&spec, 0, &ds, err, sizeof err) == 0) dataset_deinit(&ds);
    spec.shard = PSC_SHARD_RECORD;
    spec.bad_record_limit = 2;
    data_reader_t *r;
    if (data_reader_open(&spec, 0, 1, 2, 1, 0, &r, err, sizeof err) == 0) {
        data_batch_t b = {0};
        while (data_reader_next(r, &b, 7, NULL, err, sizeof err) > 0) {}
        data_batch_free(&b);
        data_reader_close(r);
    }
    return 0;
}
