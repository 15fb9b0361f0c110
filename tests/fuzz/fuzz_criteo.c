/* fuzz_criteo — libFuzzer target: Criteo TSV lines (worker/data/format_criteo.c)
 * read from the input as one file (data_file_open_mem: a small buffer, so
 * lines cross every refill) into batches, until the end or a hard error; bad
 * records are dropped as the reader drops them, every seventh record is
 * skipped as record sharding skips it. The batches' invariants are checked:
 * off non-decreasing and ending at nnz, labels 0/1, dense values finite and
 * >= 0 (log1p of max(x, 0)), every bag 0 or 1 pair. */
#include "../unit/ctr_fixture.h"
#include "reader_internal.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

static void check(const data_batch_t *b)
{
    if (b->off[0] != 0 || b->off[(size_t)b->n * 26] != b->nnz) abort();
    for (int i = 0; i < b->n; i++) {
        if (b->label[i] != 0.0f && b->label[i] != 1.0f) abort();
        for (int k = 0; k < 13; k++)
            if (!isfinite(b->dense[i * 13 + k]) || b->dense[i * 13 + k] < 0.0f) abort();
        for (int k = 0; k < 26; k++) {
            int64_t d = b->off[i * 26 + k + 1] - b->off[i * 26 + k];
            if (d != 0 && d != 1) abort();
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static psc_job_spec_t spec;
    static psc_feature_spec_t feats[40];
    if (spec.num_cat == 0) ctr_fix_criteo_spec(&spec, feats);
    char err[512] = "";
    data_file_t *f;
    if (data_file_open_mem(data, size, "fuzz", &f, err, sizeof err) != 0) abort();
    data_batch_t b = {0};
    data_batch_reset(&b, 13, 26);
    for (int64_t rec = 0;; rec++) {
        if (b.n == 16) {
            check(&b);
            data_batch_reset(&b, 13, 26);
        }
        int rc = rec % 7 == 3 ? data_format_criteo.skip(f, err, sizeof err)
                              : data_format_criteo.next(f, &spec, &b, err, sizeof err);
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
