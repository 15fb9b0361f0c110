/* fuzz_libsvm — libFuzzer target: LIBSVM lines (worker/data/format_libsvm.c) read
 * from the input as one file (data_file_open_mem: a small buffer, so lines
 * cross every refill) into batches, until the end or a hard error; bad
 * records are dropped as the reader drops them, every seventh record is
 * skipped as record sharding skips it. The batches' invariants are checked:
 * off non-decreasing and ending at nnz, labels 0/1, weights finite. */
#include "../unit/ctr_fixture.h"
#include "reader_internal.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

static void check(const data_batch_t *b)
{
    if (b->off[0] != 0 || b->off[b->n] != b->nnz) abort();
    for (int i = 0; i < b->n; i++) {
        if (b->label[i] != 0.0f && b->label[i] != 1.0f) abort();
        if (b->off[i + 1] < b->off[i]) abort();
    }
    for (int64_t k = 0; k < b->nnz; k++)
        if (!isfinite(b->weights[k])) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static psc_job_spec_t spec;
    static psc_feature_spec_t feats[2];
    if (spec.num_cat == 0) ctr_fix_libsvm_spec(&spec, feats);
    char err[512] = "";
    data_file_t *f;
    if (data_file_open_mem(data, size, "fuzz", &f, err, sizeof err) != 0) abort();
    data_batch_t b = {0};
    data_batch_reset(&b, 0, 1);
    for (int64_t rec = 0;; rec++) {
        if (b.n == 16) {
            check(&b);
            data_batch_reset(&b, 0, 1);
        }
        int rc = rec % 7 == 3 ? data_format_libsvm.skip(f, err, sizeof err)
                              : data_format_libsvm.next(f, &spec, &b, err, sizeof err);
        if (rc == 0) break;
        if (rc == PSC_ECORRUPT) {
            if (!err[0]) abort(); /* a bad record always says why */
            data_batch_rollback(&b);
            err[0] = 0;
            continue;
        }
        if (rc < 0) break;
    }
    check(&b);
    data_batch_free(&b);
    data_file_close(f);
    return 0;
}
