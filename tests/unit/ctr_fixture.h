/* ctr_fixture.h — what the CTR reader tests share (test_ctr_reader.c,
 * test_ctr_criteo.c, test_ctr_libsvm.c; the fuzzers use the spec builders):
 * job specs built by hand (no job-spec parser involved) for criteo and libsvm,
 * files written plain or gzip in a mkdtemp folder, and reading a whole
 * reader's output. Header-only, for tests. */
#ifndef PSC_CTR_FIXTURE_H
#define PSC_CTR_FIXTURE_H

#include "reader.h"
#include "job_spec.h"
#include "psc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A criteo spec as the job-spec parser fills it in: label, I1..I13 (dense,
 * log1p, columns 0..12), C1..C26 (categorical 0..25). feats holds 40. */
static inline void ctr_fix_criteo_spec(psc_job_spec_t *s, psc_feature_spec_t *feats)
{
    memset(s, 0, sizeof *s);
    memset(feats, 0, 40 * sizeof *feats);
    snprintf(feats[0].name, sizeof feats[0].name, "label");
    feats[0].role = PSC_FEATURE_LABEL;
    feats[0].length = 1;
    for (int k = 0; k < 13; k++) {
        psc_feature_spec_t *f = &feats[1 + k];
        snprintf(f->name, sizeof f->name, "I%d", k + 1);
        f->role = PSC_FEATURE_DENSE;
        f->kind = PSC_FEATURE_INT64;
        f->length = 1;
        f->transform = PSC_TRANSFORM_LOG1P;
        f->dense_offset = k;
    }
    for (int k = 0; k < 26; k++) {
        psc_feature_spec_t *f = &feats[14 + k];
        snprintf(f->name, sizeof f->name, "C%d", k + 1);
        f->role = PSC_FEATURE_CATEGORICAL;
        f->kind = PSC_FEATURE_INT64;
        f->length = 1;
        f->cat_index = k;
    }
    s->data_format = PSC_DATA_CRITEO;
    s->features = feats;
    s->num_features = 40;
    s->num_dense = 13;
    s->num_cat = 26;
    s->epochs = 1;
    s->seed = 42;
}

/* A libsvm spec: label and the one variable-length categorical "features".
 * feats holds 2. */
static inline void ctr_fix_libsvm_spec(psc_job_spec_t *s, psc_feature_spec_t *feats)
{
    memset(s, 0, sizeof *s);
    memset(feats, 0, 2 * sizeof *feats);
    snprintf(feats[0].name, sizeof feats[0].name, "label");
    feats[0].role = PSC_FEATURE_LABEL;
    feats[0].length = 1;
    snprintf(feats[1].name, sizeof feats[1].name, "features");
    feats[1].role = PSC_FEATURE_CATEGORICAL;
    feats[1].kind = PSC_FEATURE_FLOAT;
    feats[1].length = 0;
    feats[1].cat_index = 0;
    s->data_format = PSC_DATA_LIBSVM;
    s->features = feats;
    s->num_features = 2;
    s->num_dense = 0;
    s->num_cat = 1;
    s->epochs = 1;
    s->seed = 42;
}

#ifdef PSC_CTR_FIXTURE_TESTS /* the unit tests' part: cmocka and zlib */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>

static char g_dir[256];

__attribute__((unused)) static int ctr_fix_setup(void **state)
{
    (void)state;
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/psc_test_ctr_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    return mkdtemp(g_dir) ? 0 : -1;
}

__attribute__((unused)) static int ctr_fix_teardown(void **state)
{
    (void)state;
    DIR *d = opendir(g_dir);
    if (d) {
        struct dirent *e;
        char p[512];
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.') continue;
            snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(g_dir);
    return 0;
}

/* Writes len bytes as g_dir/name (gzip when gz); the path into path. */
__attribute__((unused)) static void ctr_fix_write(const char *name, const void *data, size_t len, int gz, char *path, size_t plen)
{
    snprintf(path, plen, "%s/%s", g_dir, name);
    if (gz) {
        gzFile f = gzopen(path, "wb");
        assert_non_null(f);
        if (len) assert_int_equal(gzwrite(f, data, (unsigned)len), (int)len);
        assert_int_equal(gzclose(f), Z_OK);
    } else {
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        if (len) assert_int_equal(fwrite(data, 1, len, f), len);
        assert_int_equal(fclose(f), 0);
    }
}

__attribute__((unused)) static void ctr_fix_write_str(const char *name, const char *text, int gz, char *path, size_t plen)
{
    ctr_fix_write(name, text, strlen(text), gz, path, plen);
}

/* Opens a training reader over one file (shard 0 of 1, no shuffle). */
__attribute__((unused)) static data_reader_t *ctr_fix_open1(psc_job_spec_t *s, char **files, const char *path)
{
    files[0] = (char *)path;
    s->train_files = files;
    s->num_train_files = 1;
    data_reader_t *r = NULL;
    char err[1024];
    int rc = data_reader_open(s, 0, 0, 1, s->seed, 0, &r, err, sizeof err);
    if (rc != 0) fprintf(stderr, "data_reader_open: %s\n", err);
    assert_int_equal(rc, 0);
    return r;
}

/* Reads a one-file data set whose record `line` (1-based) is bad; expects
 * exactly err "PATH:line: msg". */
__attribute__((unused)) static void ctr_fix_expect_bad(psc_job_spec_t *s, const char *name, const char *text, int line, const char *msg)
{
    char path[512], *files[1], err[1024], want[1536];
    ctr_fix_write_str(name, text, 0, path, sizeof path);
    data_reader_t *r = ctr_fix_open1(s, files, path);
    data_batch_t b = {0};
    int rc, total = 0;
    while ((rc = data_reader_next(r, &b, 3, NULL, err, sizeof err)) > 0) total += rc;
    snprintf(want, sizeof want, "%s:%d: %s", path, line, msg);
    if (rc != PSC_ECORRUPT || strcmp(err, want) != 0)
        fprintf(stderr, "expected %s\n     got %s (rc %d)\n", want, rc < 0 ? err : "-", rc);
    assert_int_equal(rc, PSC_ECORRUPT);
    assert_string_equal(err, want);
    /* the error sticks */
    assert_int_equal(data_reader_next(r, &b, 3, NULL, err, sizeof err), PSC_ECORRUPT);
    assert_string_equal(err, want);
    data_batch_free(&b);
    data_reader_close(r);
    (void)total;
}
#endif

#endif
