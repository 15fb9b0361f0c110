/* job_spec_fixture.h — what the job-spec tests share (test_job_spec.c,
 * test_job_spec_tables.c): the DESIGN.md example, parse_ok, expect_error (the
 * message names the key, is one line, leaves nothing to free) and spec3 (a
 * spec from layers, optimizer body and extra members). Header-only, for tests. */
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
static void expect_error_at(int line, const char *json, const char *want)
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

#endif
