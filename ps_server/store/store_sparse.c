/* store_sparse.c — the store's sparse embedding table parts (store.h, "sparse
 * embedding tables"): create, check, pull, push, list.
 *
 * The parts live in s->tables, published once per job under s->lock like the
 * variables, and replaced whole only by a restore (under the push fence,
 * exclusive). Every pull and push holds the fence shared for its whole
 * duration: a pull creates rows, so it is an update for the fence, and a
 * checkpoint's export sees every table and every variable at one cut. Rows
 * are locked by sparse_table.c (one mutex per shard of rows), not here.
 */
#include "store.h"
#include "store_internal.h"

#include "psc.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cfg_same(const sparse_table_cfg_t *a, const sparse_table_cfg_t *b)
{
    return strcmp(a->name, b->name) == 0 && a->rows == b->rows && a->nparts == b->nparts && a->part == b->part &&
           a->partition == b->partition && a->dim == b->dim && a->init.kind == b->init.kind && a->init.a == b->init.a &&
           a->init.b == b->init.b && a->seed == b->seed && store_optim_same(&a->opt, &b->opt) &&
           a->ttl_steps == b->ttl_steps && a->ttl_secs == b->ttl_secs && a->max_rows == b->max_rows &&
           a->min_count == b->min_count && a->filter_bytes == b->filter_bytes;
}

/* Compares a request with the existing parts (caller holds s->lock). */
static int compare_tables(const store_t *s, const sparse_table_cfg_t *tables, int n, char *err, size_t errlen)
{
    if (n != s->ntables)
        return psc_seterr(err, errlen, PSC_EMISMATCH, "job %s: request declares %d sparse tables, %d exist", s->job_id,
                          n, s->ntables);
    for (int i = 0; i < n; i++)
        if (!cfg_same(&tables[i], sparse_table_config(s->tables[i].part)))
            return psc_seterr(err, errlen, PSC_EMISMATCH,
                              "sparse table %s: its declaration (rows, dim, part, initializer, optimizer, seed, "
                              "eviction or admission) "
                              "differs from the existing one",
                              tables[i].name);
    return 0;
}

int store_check_tables(const store_var_spec_t *vars, int nvars, const sparse_table_cfg_t *tables, int n, char *err,
                       size_t errlen)
{
    for (int i = 0; i < n; i++) {
        int rc = sparse_table_check_cfg(&tables[i], err, errlen);
        if (!rc) rc = store_check_optim(&tables[i].opt, err, errlen);
        if (rc) return rc;
        for (int j = 0; j < i; j++)
            if (strcmp(tables[i].name, tables[j].name) == 0)
                return psc_seterr(err, errlen, PSC_EINVAL, "sparse table %s: declared twice", tables[i].name);
        for (int j = 0; j < nvars; j++)
            if (strcmp(tables[i].name, vars[j].name) == 0)
                return psc_seterr(err, errlen, PSC_EINVAL, "sparse table %s: a variable has that name", tables[i].name);
    }
    return 0;
}

static int check_names(const store_t *s, const sparse_table_cfg_t *tables, int n, char *err, size_t errlen)
{
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < i; j++)
            if (strcmp(tables[i].name, tables[j].name) == 0)
                return psc_seterr(err, errlen, PSC_EINVAL, "sparse table %s: declared twice", tables[i].name);
        for (int j = 0; j < s->nvars; j++)
            if (strcmp(tables[i].name, s->vars[j]->name) == 0)
                return psc_seterr(err, errlen, PSC_EINVAL, "sparse table %s: a variable has that name", tables[i].name);
        int rc = store_check_optim(&tables[i].opt, err, errlen);
        if (rc) return rc;
    }
    return 0;
}

static int create_tables_fenced(store_t *s, const char *job_id, const sparse_table_cfg_t *tables, int n, char *err,
                                size_t errlen)
{
    if (n < 0 || (n > 0 && !tables)) return psc_seterr(err, errlen, PSC_EINVAL, "bad sparse table count %d", n);
    pthread_rwlock_rdlock(&s->lock);
    int rc = 0, have = s->have_job, built = s->tables != NULL;
    if (!have)
        rc = psc_seterr(err, errlen, PSC_ENOTFOUND, "sparse tables of job %s: no variables created", job_id);
    else if (strcmp(s->job_id, job_id) != 0)
        rc = psc_seterr(err, errlen, PSC_EEXISTS, "variables exist for job %s; refusing job %s", s->job_id, job_id);
    else if (built)
        rc = compare_tables(s, tables, n, err, errlen);
    else
        rc = check_names(s, tables, n, err, errlen);
    pthread_rwlock_unlock(&s->lock);
    if (rc || built || n == 0) return rc;

    store_table_t *made = psc_xcalloc((size_t)n, sizeof *made);
    for (int i = 0; i < n && !rc; i++) rc = sparse_table_create(&tables[i], &made[i].part, err, errlen);
    if (rc) {
        store_tables_free(made, n);
        return rc;
    }
    pthread_rwlock_wrlock(&s->lock);
    if (s->tables) {
        rc = compare_tables(s, tables, n, err, errlen); /* another Create won the race */
    } else {
        s->tables = made;
        s->ntables = n;
        s->tables_gen++;
        made = NULL;
    }
    pthread_rwlock_unlock(&s->lock);
    store_tables_free(made, made ? n : 0);
    return rc;
}

int store_create_tables(store_t *s, const char *job_id, const sparse_table_cfg_t *tables, int n, char *err,
                        size_t errlen)
{
    fence_enter(s);
    int rc = create_tables_fenced(s, job_id, tables, n, err, errlen);
    fence_leave(s);
    return rc ? store_reject(s, rc) : 0;
}

int store_table_get(store_t *s, const char *table, sparse_table_t **out, store_table_t **slot, psc_optim_config_t *opt,
                    uint64_t *gen, char *err, size_t errlen)
{
    int rc = 0;
    *out = NULL;
    if (slot) *slot = NULL;
    pthread_rwlock_rdlock(&s->lock);
    if (gen) *gen = s->tables_gen;
    if (!s->ready) {
        rc = psc_seterr(err, errlen, PSC_ENOTREADY, "model not ready (%s)",
                        s->have_job ? "the job's variables are not marked ready yet" : "no job created yet");
    } else {
        for (int i = 0; i < s->ntables && !*out; i++)
            if (strcmp(sparse_table_config(s->tables[i].part)->name, table) == 0) {
                *out = s->tables[i].part;
                if (slot) *slot = &s->tables[i];
            }
        if (!*out) {
            int dense = 0;
            for (int j = 0; j < s->nvars && !dense; j++) dense = strcmp(s->vars[j]->name, table) == 0;
            rc = psc_seterr(err, errlen, dense ? PSC_EINVAL : PSC_ENOTFOUND,
                            dense ? "\"%.*s\" is a dense variable, not a sparse table (use Push/Pull)"
                                  : "unknown sparse table \"%.*s\"",
                            PSC_NAME_MAX, table);
        } else if (opt) {
            *opt = store_opt_at(&sparse_table_config(*out)->opt, s);
        }
    }
    pthread_rwlock_unlock(&s->lock);
    return rc;
}

int store_table_check_request(const sparse_table_t *t, const void *ids, size_t n, const void *grads, size_t glen,
                              char *err, size_t errlen)
{
    const sparse_table_cfg_t *c = sparse_table_config(t);
    char why[384];
    int rc = sparse_table_check_ids(t, ids, n, grads != NULL, why, sizeof why);
    if (!rc && grads) {
        uint64_t want = (uint64_t)n * (uint64_t)c->dim * 4;
        if (glen != want)
            rc = psc_seterr(why, sizeof why, PSC_EMISMATCH,
                            "%zu bytes of gradient rows for %zu ids of dim %d (expected %" PRIu64 ")", glen, n, c->dim,
                            want);
        else
            rc = sparse_table_check_grads(t, ids, grads, n, why, sizeof why);
    }
    if (rc) psc_seterr(err, errlen, rc, "sparse table %s: %s", c->name, why);
    return rc;
}

int store_sparse_check(store_t *s, const char *table, const void *ids, size_t n, const void *grads, size_t glen,
                       int *dim, uint64_t *gen, char *err, size_t errlen)
{
    sparse_table_t *t;
    fence_enter(s);
    int rc = store_table_get(s, table, &t, NULL, NULL, gen, err, errlen);
    if (!rc) rc = store_table_check_request(t, ids, n, grads, glen, err, errlen);
    if (!rc && dim) *dim = sparse_table_config(t)->dim;
    fence_leave(s);
    return rc ? store_reject(s, rc) : 0;
}

/* Resolves the table of a pull or push and checks the request, unless it
 * was checked at the tables_gen still in force (`checked`, 0: never). */
static int resolve_checked(store_t *s, const char *table, const void *ids, size_t n, const void *grads, size_t glen,
                           uint64_t checked, sparse_table_t **t, psc_optim_config_t *opt, char *err, size_t errlen)
{
    uint64_t gen;
    int rc = store_table_get(s, table, t, NULL, opt, &gen, err, errlen);
    if (!rc && (checked == 0 || checked != gen)) rc = store_table_check_request(*t, ids, n, grads, glen, err, errlen);
    return rc;
}

int store_sparse_pull(store_t *s, const char *table, const void *ids, size_t n, float *out, size_t cap, int read_only,
                      uint64_t checked, int *dim, int64_t *version, char *err, size_t errlen)
{
    sparse_table_t *t;
    fence_enter(s);
    int rc = resolve_checked(s, table, ids, n, NULL, 0, checked, &t, NULL, err, errlen);
    if (!rc && (uint64_t)n * (uint64_t)sparse_table_config(t)->dim > cap)
        rc = psc_seterr(err, errlen, PSC_EMISMATCH, "sparse table %s: %zu rows of dim %d exceed the %zu floats given",
                        table, n, sparse_table_config(t)->dim, cap);
    if (!rc) {
        store_table_clock(s, t);
        rc = read_only ? sparse_table_read(t, ids, n, out) : sparse_table_pull(t, ids, n, out);
        if (rc) psc_seterr(err, errlen, rc, "sparse table %s: out of memory creating rows", table);
        if (version) *version = (int64_t)sparse_table_version(t);
        if (dim) *dim = sparse_table_config(t)->dim;
        if (!rc) {
            count(&s->pulls, 1);
            count(&s->bytes_pulled, (uint64_t)n * (uint64_t)sparse_table_config(t)->dim * 4);
        }
    }
    fence_leave(s);
    return rc ? store_reject(s, rc) : 0;
}

int store_sparse_initial(store_t *s, const char *table, const void *ids, size_t n, float *out, size_t cap, int *dim,
                         size_t *record_bytes, char *err, size_t errlen)
{
    sparse_table_t *t;
    fence_enter(s);
    int rc = resolve_checked(s, table, ids, n, NULL, 0, 0, &t, NULL, err, errlen);
    if (!rc && (uint64_t)n * (uint64_t)sparse_table_config(t)->dim > cap)
        rc = psc_seterr(err, errlen, PSC_EMISMATCH, "sparse table %s: %zu rows of dim %d exceed the %zu floats given",
                        table, n, sparse_table_config(t)->dim, cap);
    if (!rc) {
        sparse_table_initial(t, ids, n, out);
        *dim = sparse_table_config(t)->dim;
        *record_bytes = sparse_table_record_bytes(t);
        count(&s->pulls, 1);
    }
    fence_leave(s);
    return rc ? store_reject(s, rc) : 0;
}

int store_sparse_push(store_t *s, const char *table, const void *ids, size_t n, const void *grads, size_t glen,
                      uint64_t checked, int64_t *version, char *err, size_t errlen)
{
    sparse_table_t *t;
    psc_optim_config_t opt;
    fence_enter(s);
    int rc = resolve_checked(s, table, ids, n, grads, glen, checked, &t, &opt, err, errlen);
    if (!rc) {
        store_table_clock(s, t);
        rc = sparse_table_push(t, ids, n, grads, opt.learning_rate, NULL);
        if (rc) psc_seterr(err, errlen, rc, "sparse table %s: out of memory creating rows", table);
        if (version) *version = (int64_t)sparse_table_version(t);
        if (!rc) {
            count(&s->applied, 1);
            count(&s->bytes_pushed, glen);
        }
    }
    fence_leave(s);
    return rc ? store_reject(s, rc) : 0;
}

int store_sparse_push_pull(store_t *s, const char *table, const void *push_ids, size_t npush, const void *grads,
                           size_t glen, const void *pull_ids, size_t npull, float *out, size_t cap, uint64_t checked,
                           int *dim, int64_t *version, char *err, size_t errlen)
{
    sparse_table_t *t;
    psc_optim_config_t opt;
    fence_enter(s);
    uint64_t gen;
    int rc = store_table_get(s, table, &t, NULL, &opt, &gen, err, errlen);
    if (!rc && (checked == 0 || checked != gen) &&
        !(rc = store_table_check_request(t, push_ids, npush, grads, glen, err, errlen)))
        rc = store_table_check_request(t, pull_ids, npull, NULL, 0, err, errlen);
    if (!rc && (uint64_t)npull * (uint64_t)sparse_table_config(t)->dim > cap)
        rc = psc_seterr(err, errlen, PSC_EMISMATCH, "sparse table %s: %zu rows of dim %d exceed the %zu floats given",
                        table, npull, sparse_table_config(t)->dim, cap);
    if (!rc) {
        store_table_clock(s, t);
        rc = sparse_table_push_pull(t, push_ids, npush, grads, opt.learning_rate, pull_ids, npull, out);
        if (rc) psc_seterr(err, errlen, rc, "sparse table %s: out of memory creating rows", table);
        *version = (int64_t)sparse_table_version(t);
        *dim = sparse_table_config(t)->dim;
        if (!rc) {
            count(&s->applied, 1);
            count(&s->bytes_pushed, glen);
            count(&s->pulls, 1);
            count(&s->bytes_pulled, (uint64_t)npull * (uint64_t)*dim * 4);
        }
    }
    fence_leave(s);
    return rc ? store_reject(s, rc) : 0;
}

int store_sparse_assign(store_t *s, const char *table, const void *ids, size_t n, const void *values, size_t vlen,
                        char *err, size_t errlen)
{
    sparse_table_t *t = NULL;
    int rc = 0;
    fence_enter(s);
    pthread_rwlock_rdlock(&s->lock);
    if (!s->have_job || s->ready)
        rc = psc_seterr(err, errlen, PSC_ENOTREADY, "sparse table %.*s: rows are assigned only %s", PSC_NAME_MAX, table,
                        s->have_job ? "before the model is ready (a warm start); it is ready" : "after Create");
    for (int i = 0; i < s->ntables && !t && !rc; i++)
        if (strcmp(sparse_table_config(s->tables[i].part)->name, table) == 0) t = s->tables[i].part;
    pthread_rwlock_unlock(&s->lock);
    if (!rc && !t) rc = psc_seterr(err, errlen, PSC_ENOTFOUND, "unknown sparse table \"%.*s\"", PSC_NAME_MAX, table);
    if (!rc) rc = store_table_check_request(t, ids, n, values, vlen, err, errlen);
    if (!rc) {
        size_t rec = sparse_table_record_bytes(t), dim = (size_t)sparse_table_config(t)->dim;
        unsigned char *r = psc_xmalloc(rec);
        float *row = psc_xmalloc(4 * dim);
        for (size_t i = 0; i < n && !rc; i++) {
            int64_t id;
            memcpy(&id, (const unsigned char *)ids + 8 * i, 8);
            memcpy(row, (const unsigned char *)values + 4 * dim * i, 4 * dim);
            sparse_table_assigned_record(t, id, row, r);
            rc = sparse_table_put(t, id, r, rec, err, errlen);
        }
        free(row);
        free(r);
    }
    fence_leave(s);
    return rc ? store_reject(s, rc) : 0;
}

int store_table_rows(store_t *s, const char *table, int64_t after, size_t max, int64_t *ids, float *vals, size_t *n,
                     int *more, char *err, size_t errlen)
{
    sparse_table_t *t;
    *n = 0;
    *more = 0;
    fence_enter(s);
    int rc = store_table_get(s, table, &t, NULL, NULL, NULL, err, errlen);
    if (!rc) sparse_table_scan(t, after, max, ids, vals, n, more);
    fence_leave(s);
    return rc ? store_reject(s, rc) : 0;
}

int store_list_tables(store_t *s, store_table_info_t **out, int *n)
{
    fence_enter(s);
    pthread_rwlock_rdlock(&s->lock);
    *n = s->ntables;
    *out = psc_xcalloc((size_t)(s->ntables ? s->ntables : 1), sizeof **out);
    double now = psc_now();
    pthread_mutex_lock(&s->rate_lock);
    for (int i = 0; i < s->ntables; i++) {
        store_table_t *t = &s->tables[i];
        store_table_info_t *o = &(*out)[i];
        o->cfg = *sparse_table_config(t->part);
        sparse_table_get_stats(t->part, &o->stats);
        const sparse_table_stats_t *st = &o->stats;
        if (!t->rate_t || st->rows_pulled < t->rate_pulled || st->rows_pushed < t->rate_pushed ||
            st->rows_evicted < t->rate_evicted) {
            t->rate_t = now; /* first call, or a restore replaced the part */
        } else if (now - t->rate_t >= 1.0) {
            t->pull_rate = (double)(st->rows_pulled - t->rate_pulled) / (now - t->rate_t);
            t->push_rate = (double)(st->rows_pushed - t->rate_pushed) / (now - t->rate_t);
            t->evict_rate = (double)(st->rows_evicted - t->rate_evicted) / (now - t->rate_t);
            t->rate_t = now;
        } else {
            st = NULL; /* the reference point stays */
        }
        if (st) {
            t->rate_pulled = st->rows_pulled;
            t->rate_pushed = st->rows_pushed;
            t->rate_evicted = st->rows_evicted;
        }
        o->rows_pulled_per_sec = t->pull_rate;
        o->rows_pushed_per_sec = t->push_rate;
        o->rows_evicted_per_sec = t->evict_rate;
    }
    pthread_mutex_unlock(&s->rate_lock);
    pthread_rwlock_unlock(&s->lock);
    fence_leave(s);
    return 0;
}
