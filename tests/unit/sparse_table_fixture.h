/* sparse_table_fixture.h — what the sparse table's unit tests share
 * (test_sparse_table.c, test_sparse_optim.c): table configs, ids and
 * gradients packed as the wire carries them, pull and push, a row's initial
 * value, and a table's export as rows. Include once, in a test file. */
#ifndef PSC_SPARSE_TABLE_FIXTURE_H
#define PSC_SPARSE_TABLE_FIXTURE_H

#include "sparse_table.h"

#include "optim.h"
#include "psc.h"
#include "table.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define SEED 42
#define NAME "emb"

/* ---- helpers ---- */

__attribute__((unused)) static sparse_table_cfg_t cfg_of(int64_t rows, int nparts, int part, enum psc_partition p, int dim,
                                 psc_optim_config_t opt)
{
    sparse_table_cfg_t c = {.rows = rows,
                            .nparts = nparts,
                            .part = part,
                            .partition = p,
                            .dim = dim,
                            .init = {PSC_INIT_UNIFORM, -0.05f, 0.05f},
                            .seed = SEED,
                            .opt = opt};
    snprintf(c.name, sizeof c.name, "%s", NAME);
    return c;
}

__attribute__((unused)) static psc_optim_config_t sgd(void) { return (psc_optim_config_t){.kind = PSC_OPT_SGD, .learning_rate = 0.1f}; }

static sparse_table_t *make(const sparse_table_cfg_t *c)
{
    char err[256] = "";
    sparse_table_t *t = NULL;
    int rc = sparse_table_create(c, &t, err, sizeof err);
    if (rc) fail_msg("sparse_table_create: %s (%s)", psc_strerror(rc), err);
    return t;
}

/* n ids as a request carries them: little-endian int64 at an odd address.
 * The caller frees *raw. */
static const void *pack_ids(const int64_t *ids, size_t n, unsigned char **raw)
{
    *raw = malloc(8 * n + 1);
    assert_non_null(*raw);
    memcpy(*raw + 1, ids, 8 * n);
    return *raw + 1;
}

static const void *pack_floats(const float *f, size_t n, unsigned char **raw)
{
    *raw = malloc(4 * n + 3);
    assert_non_null(*raw);
    memcpy(*raw + 3, f, 4 * n);
    return *raw + 3;
}

__attribute__((unused)) static int check_ids(const sparse_table_t *t, const int64_t *ids, size_t n, int unique, char *err, size_t errlen)
{
    unsigned char *raw;
    const void *p = pack_ids(ids, n, &raw);
    int rc = sparse_table_check_ids(t, p, n, unique, err, errlen);
    free(raw);
    return rc;
}

/* check_ids on a literal list: rc want_rc, and err containing needle (unless NULL). */
__attribute__((unused)) static void expect_ids_rc(const sparse_table_t *t, const int64_t *ids, size_t n, int unique, int want_rc,
                          const char *needle, const char *what)
{
    char err[256] = "";
    int rc = check_ids(t, ids, n, unique, err, sizeof err);
    if (rc != want_rc) fail_msg("check_ids(%s): rc %d (%s), want %d", what, rc, err, want_rc);
    if (needle && !strstr(err, needle)) fail_msg("check_ids(%s): message \"%s\" lacks \"%s\"", what, err, needle);
}
#define EXPECT_IDS(t, unique, want_rc, needle, ...)                                                                    \
    expect_ids_rc(t, (const int64_t[]){__VA_ARGS__}, PSC_ARRAY_LEN(((const int64_t[]){__VA_ARGS__})), unique, want_rc, \
                  needle, #__VA_ARGS__)

__attribute__((unused)) static void pull(sparse_table_t *t, const int64_t *ids, size_t n, float *out)
{
    unsigned char *raw;
    const void *p = pack_ids(ids, n, &raw);
    assert_int_equal(sparse_table_pull(t, p, n, out), 0);
    free(raw);
}

__attribute__((unused)) static void push(sparse_table_t *t, const int64_t *ids, size_t n, const float *g, double lr, float *out)
{
    int dim = sparse_table_config(t)->dim;
    unsigned char *rawi, *rawg;
    const void *pi = pack_ids(ids, n, &rawi), *pg = pack_floats(g, n * (size_t)dim, &rawg);
    assert_int_equal(sparse_table_push(t, pi, n, pg, lr, out), 0);
    free(rawi);
    free(rawg);
}

__attribute__((unused)) static void init_row(const sparse_table_cfg_t *c, int64_t id, float *row)
{
    psc_table_row_init(&c->init, c->seed, psc_table_hash(c->name), id, row, c->dim);
}

/* Rows of an export, in emit order. */
typedef struct rows {
    size_t n, cap, len;
    int64_t *ids;
    unsigned char *recs; /* (n, len) */
    int stop_after;      /* > 0: emit returns 7 on that call */
} rows_t;

__attribute__((unused)) static int rows_emit(void *arg, int64_t id, const void *rec, size_t len)
{
    rows_t *r = arg;
    if (r->stop_after && (int)r->n + 1 == r->stop_after) return 7;
    if (r->n == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 64;
        r->ids = realloc(r->ids, r->cap * sizeof *r->ids);
        r->recs = realloc(r->recs, r->cap * len);
        assert_non_null(r->ids);
        assert_non_null(r->recs);
    }
    assert_true(r->len == 0 || r->len == len);
    r->len = len;
    r->ids[r->n] = id;
    memcpy(r->recs + r->n * len, rec, len);
    r->n++;
    return 0;
}

__attribute__((unused)) static rows_t export_rows(sparse_table_t *t, uint64_t since, int sorted, uint64_t *mark)
{
    rows_t r = {0};
    uint64_t m = 0;
    assert_int_equal(sparse_table_export(t, since, sorted, rows_emit, &r, &m), 0);
    if (mark) *mark = m;
    return r;
}

__attribute__((unused)) static void rows_free(rows_t *r)
{
    free(r->ids);
    free(r->recs);
}

/* The record of id in r, or NULL. */
__attribute__((unused)) static const unsigned char *rows_find(const rows_t *r, int64_t id)
{
    for (size_t i = 0; i < r->n; i++)
        if (r->ids[i] == id) return r->recs + i * r->len;
    return NULL;
}

__attribute__((unused)) static int64_t rec_t(const unsigned char *rec)
{
    int64_t t;
    memcpy(&t, rec, 8);
    return t;
}

__attribute__((unused)) static float rec_float(const unsigned char *rec, size_t k)
{
    float f;
    memcpy(&f, rec + 8 + 4 * k, 4);
    return f;
}

__attribute__((unused)) static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

#endif
