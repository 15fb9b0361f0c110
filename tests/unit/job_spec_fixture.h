/* job_spec_fixture.h — what the job-spec tests share (test_job_spec.c,
 * test_job_spec_tables.c, test_job_spec_ctr.c, test_job_spec_ctr_errors.c):
 * the DESIGN.md example, parse_ok, expect_error (the message names the key, is
 * one line, leaves nothing to free) and spec3 (a spec from layers, optimizer
 * body and extra members); for recommendation models ctr (a
 * sigmoid_cross_entropy spec from data, layers and tables), their building
 * blocks and expect_exact (the whole message). Header-only, for tests. */
#ifndef PSC_JOB_SPEC_FIXTURE_H
#define PSC_JOB_SPEC_FIXTURE_H

#include "job_spec.h"
#include "psc.h"
#include "wire.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

/* The example of DESIGN.md "Job spec", verbatim. */
static const char *const design_example __attribute__((unused)) =
    "{\"model\": {\"input_shape\": [28, 28, 1],\n"
    "           \"layers\": [{\"type\": \"conv2d\", \"filters\": 32, \"kernel_size\": 5, \"padding\": \"same\", "
    "\"activation\": \"relu\"},\n"
    "                      {\"type\": \"max_pool2d\", \"pool_size\": 2},\n"
    "                      {\"type\": \"flatten\"},\n"
    "                      {\"type\": \"dense\", \"units\": 128, \"activation\": \"relu\"},\n"
    "                      {\"type\": \"dense\", \"units\": 10}],\n"
    "           \"loss\": \"sparse_softmax_cross_entropy\"},\n"
    " \"optimizer\": {\"name\": \"adam\", \"learning_rate\": 0.001},\n"
    " \"data\": {\"train\": \"/usr/share/datasets/fashion-mnist/train\", \"test\": "
    "\"/usr/share/datasets/fashion-mnist/t10k\"},\n"
    " \"batch_size_per_replica\": 64, \"epochs\": 5,\n"
    " \"sync\": {\"replicas_to_aggregate\": 2, \"total_num_replicas\": 2},\n"
    " \"placement\": {\"strategy\": \"round_robin\", \"min_shard_bytes\": 0},\n"
    " \"checkpoint\": {\"every_steps\": 500, \"every_secs\": 600, \"keep\": 5},\n"
    " \"seed\": 42}\n";

static void assert_spec_empty(const psc_job_spec_t *s)
{
    assert_null(s->layers);
    assert_int_equal(s->num_layers, 0);
    assert_null(s->tables);
    assert_int_equal(s->num_tables, 0);
}

static void parse_ok(const char *json, psc_job_spec_t *s)
{
    char err[512] = "";
    int rc = psc_job_spec_parse(json, s, err, sizeof err);
    if (rc) fail_msg("unexpected error %d: %s\nfor %s", rc, err, json);
}

/* Expects PSC_ECONFIG, a "job spec: " one-line message containing `want`. */
static inline void expect_error_at(int line, const char *json, const char *want)
{
    psc_job_spec_t s;
    char err[512] = "";
    int rc = psc_job_spec_parse(json, &s, err, sizeof err);
    if (rc != PSC_ECONFIG) fail_msg("line %d: expected PSC_ECONFIG, got %d for %s", line, rc, json);
    if (strncmp(err, "job spec: ", 10) != 0) fail_msg("line %d: \"%s\" lacks the prefix", line, err);
    if (strchr(err, '\n')) fail_msg("line %d: \"%s\" is not one line", line, err);
    if (!strstr(err, want)) fail_msg("line %d: \"%s\" lacks \"%s\"", line, err, want);
    assert_spec_empty(&s);
    psc_job_spec_deinit(&s);
}
#define expect_error(json, want) expect_error_at(__LINE__, json, want)

/* A spec with the given layers, optimizer body and extra top-level members. */
static inline const char *spec3(char *buf, size_t n, const char *layers, const char *opt, const char *extra)
{
    snprintf(buf, n, "{\"model\": {\"input_shape\": [28, 28, 1], \"layers\": [%s]}, \"optimizer\": {%s}%s%s}", layers,
             opt, *extra ? ", " : "", extra);
    return buf;
}
#define MLP "{\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": 10}"
#define ADAM "\"name\": \"adam\""

/* ---- recommendation (CTR) models ---- */

/* snprintf that fails the test instead of truncating. */
static inline const char *sfmt(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inline const char *sfmt(char *buf, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = vsnprintf(buf, n, fmt, ap);
    va_end(ap);
    if (r < 0 || (size_t)r >= n) fail_msg("a test text of %d bytes does not fit %zu", r, n);
    return buf;
}

/* "C1", "C2", ..., "C26": criteo's categorical features as JSON strings. */
static inline const char *c26(void)
{
    static char list[400];
    size_t l = 0;
    for (int i = 1; i <= 26; i++) l += strlen(sfmt(list + l, sizeof list - l, "%s\"C%d\"", i > 1 ? ", " : "", i));
    return list;
}

/* A JSON array of `count` copies of item. */
static inline const char *repeat(char *buf, size_t n, const char *item, int count)
{
    size_t l = strlen(sfmt(buf, n, "["));
    for (int i = 0; i < count; i++) l += strlen(sfmt(buf + l, n - l, "%s%s", i ? ", " : "", item));
    sfmt(buf + l, n - l, "]");
    return buf;
}

/* A sigmoid_cross_entropy spec from its data members, layers and tables ("" = none). */
static inline const char *ctr(char *buf, size_t n, const char *data, const char *layers, const char *tables)
{
    return sfmt(buf, n,
                "{\"model\": {\"loss\": \"sigmoid_cross_entropy\", \"layers\": [%s]}, \"optimizer\": {\"name\": "
                "\"adagrad\"}, \"data\": {%s}%s%s}",
                layers, data, *tables ? ", \"tables\": " : "", tables);
}

/* An embedding or wide layer (type) over table t and features f (a JSON value). */
static inline const char *emb(char *buf, size_t n, const char *type, const char *t, const char *f)
{
    return sfmt(buf, n, "{\"type\": \"%s\", \"table\": \"%s\", \"features\": %s}", type, t, f);
}

#define CRITEO "\"format\": \"criteo\", \"train\": \"/d/day_*.tsv.gz\""
#define LIBSVM "\"format\": \"libsvm\", \"train\": \"/d/a.svm\""
#define TABLES "[{\"name\": \"emb\", \"rows\": 1000, \"dim\": 16}, {\"name\": \"lin\", \"rows\": 1000, \"dim\": 1}]"
#define BOTTOM                                                                                                         \
    "{\"type\": \"dense\", \"units\": 64, \"activation\": \"relu\"}, "                                                 \
    "{\"type\": \"dense\", \"units\": 16, \"activation\": \"relu\"}"
#define TOP "{\"type\": \"dense\", \"units\": 64, \"activation\": \"relu\"}, {\"type\": \"dense\", \"units\": 1}"
#define LOGIT "{\"type\": \"dense\", \"units\": 1}"
#define INTER "{\"type\": \"interaction\"}"
#define CONCAT "{\"type\": \"concat\"}"
/* tfrecord: a float label, dense age (int64, log1p) and hist (3 floats), categorical
 * "user id" (bytes), items (variable length) and ad (2 ids) */
#define TF_FEATURES                                                                                                    \
    "\"features\": [{\"name\": \"clicked\", \"role\": \"label\", \"kind\": \"float\"},"                               \
    " {\"name\": \"age\", \"role\": \"dense\", \"kind\": \"int64\", \"transform\": \"log1p\"},"                       \
    " {\"name\": \"user id\", \"role\": \"categorical\", \"kind\": \"bytes\"},"                                       \
    " {\"name\": \"hist\", \"role\": \"dense\", \"kind\": \"float\", \"length\": 3},"                                  \
    " {\"name\": \"items\", \"role\": \"categorical\", \"kind\": \"int64\", \"length\": 0},"                          \
    " {\"name\": \"ad\", \"role\": \"categorical\", \"kind\": \"int64\", \"length\": 2}]"
#define TFREC "\"format\": \"tfrecord\", \"train\": \"/d/*.tfrecord\", \"test\": [\"/d/t.tfrecord\"], " TF_FEATURES

/* Expects PSC_ECONFIG with exactly "job spec: <want>" and nothing to free. */
static inline void expect_exact_at(int line, const char *json, const char *want)
{
    psc_job_spec_t s;
    char err[1024] = "", full[1024];
    int rc = psc_job_spec_parse(json, &s, err, sizeof err);
    sfmt(full, sizeof full, "job spec: %s", want);
    if (rc != PSC_ECONFIG) fail_msg("line %d: expected PSC_ECONFIG, got %d for %s", line, rc, json);
    if (strcmp(err, full) != 0) fail_msg("line %d:\n got  \"%s\"\n want \"%s\"", line, err, full);
    assert_spec_empty(&s);
    assert_null(s.train_files);
    assert_null(s.test_files);
    assert_null(s.features);
    psc_job_spec_deinit(&s);
}
#define expect_exact(json, want) expect_exact_at(__LINE__, json, want)

#endif
