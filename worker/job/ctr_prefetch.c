/* ctr_prefetch.c — see ctr_prefetch.h. */
#include "ctr_prefetch.h"

#include "log.h"
#include "psc.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Ids with rows of dim floats, each row's place in a batch (dst). */
typedef struct pf_rows {
    int64_t *ids;
    float *rows;
    int32_t *dst;
    size_t n, cap;
} pf_rows_t;

typedef struct pf_table {
    int dim;
    uint8_t *shared; /* (cur's ids) 1: in next too */
    size_t shared_cap;
    pf_rows_t crit; /* S: t's gradients (rows), pulled into crit_rows */
    float *crit_rows;
    size_t crit_cap;
    pf_rows_t push; /* t's other gradients (bulk) */
    pf_rows_t pull; /* next2's rows outside next (bulk), dst: their index in next2 */
} pf_table_t;

struct ctr_pf {
    ps_client_t *pc;
    int ntables;
    pf_table_t *t;
    ps_sparse_op_t *crit_ops, *bulk_ops; /* per table */
    int nbulk;
    ctr_slot_batch_t *bulk_into; /* next2 of the bulk in flight */
    int64_t pushed, critical;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    enum { PF_IDLE, PF_ASKED, PF_DONE, PF_QUIT } state;
    int rc;
    char err[512];
};

static void rows_reserve(pf_rows_t *r, size_t n, int dim)
{
    if (n <= r->cap) return;
    r->cap = PSC_MAX(n, 2 * r->cap);
    free(r->rows);
    r->ids = psc_xrealloc(r->ids, r->cap * sizeof *r->ids);
    r->dst = psc_xrealloc(r->dst, r->cap * sizeof *r->dst);
    r->rows = psc_xaligned(r->cap * (size_t)dim * sizeof(float));
}

static void rows_free(pf_rows_t *r)
{
    free(r->ids);
    free(r->rows);
    free(r->dst);
}

/* The bulk's round, then its rows into next2's places. */
static int bulk_run(ctr_pf_t *p, char *err, size_t errlen)
{
    int rc = p->nbulk ? ps_client_sparse(p->pc, p->bulk_ops, p->nbulk, err, errlen) : 0;
    ctr_slot_batch_t *b = p->bulk_into;
    for (int k = 0; rc == 0 && b && k < p->ntables; k++) {
        const pf_table_t *t = &p->t[k];
        for (size_t i = 0; i < t->pull.n; i++)
            memcpy(b->rows[k] + (size_t)t->pull.dst[i] * (size_t)t->dim, t->pull.rows + i * (size_t)t->dim,
                   (size_t)t->dim * sizeof(float));
    }
    return rc;
}

static void *bulk_main(void *arg)
{
    ctr_pf_t *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->state != PF_ASKED && p->state != PF_QUIT) pthread_cond_wait(&p->cv, &p->mu);
        if (p->state == PF_QUIT) break;
        pthread_mutex_unlock(&p->mu);
        char err[512] = "";
        int rc = bulk_run(p, err, sizeof err);
        pthread_mutex_lock(&p->mu);
        p->rc = rc;
        snprintf(p->err, sizeof p->err, "%s", err);
        p->state = PF_DONE;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int ctr_pf_create(ps_client_t *pc, const psc_job_spec_t *spec, ctr_pf_t **out, char *err, size_t errlen)
{
    ctr_pf_t *p = psc_xcalloc(1, sizeof *p);
    p->pc = pc;
    p->ntables = spec->num_tables;
    int T = PSC_MAX(p->ntables, 1);
    p->t = psc_xcalloc((size_t)T, sizeof *p->t);
    for (int k = 0; k < p->ntables; k++) p->t[k].dim = spec->tables[k].dim;
    p->crit_ops = psc_xcalloc((size_t)T, sizeof *p->crit_ops);
    p->bulk_ops = psc_xcalloc((size_t)T, sizeof *p->bulk_ops);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    int rc = psc_thread_start(&p->thread, bulk_main, p, "the rows' prefetch thread", err, errlen);
    if (rc) {
        pthread_mutex_destroy(&p->mu);
        pthread_cond_destroy(&p->cv);
        free(p->t);
        free(p->crit_ops);
        free(p->bulk_ops);
        free(p);
        return rc;
    }
    *out = p;
    return 0;
}

void ctr_pf_destroy(ctr_pf_t *p)
{
    if (!p) return;
    char err[512];
    ctr_pf_wait(p, err, sizeof err);
    pthread_mutex_lock(&p->mu);
    p->state = PF_QUIT;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    for (int k = 0; k < p->ntables; k++) {
        pf_table_t *t = &p->t[k];
        free(t->shared);
        rows_free(&t->crit);
        rows_free(&t->push);
        rows_free(&t->pull);
        free(t->crit_rows);
    }
    free(p->t);
    free(p->crit_ops);
    free(p->bulk_ops);
    free(p);
}

int ctr_pf_wait(ctr_pf_t *p, char *err, size_t errlen)
{
    pthread_mutex_lock(&p->mu);
    while (p->state == PF_ASKED) pthread_cond_wait(&p->cv, &p->mu);
    int rc = p->state == PF_DONE ? p->rc : 0;
    if (rc) snprintf(err, errlen, "%s", p->err);
    p->state = PF_IDLE;
    pthread_mutex_unlock(&p->mu);
    return rc;
}

/* Table k's plan: cur's gradients split by next's ids, next2's ids outside
 * next (the loader's prev: each id's index in the batch before, if there). */
static void plan_table(ctr_pf_t *p, int k, const ctr_slot_batch_t *cur, const ctr_slot_batch_t *next,
                       const ctr_slot_batch_t *next2)
{
    pf_table_t *t = &p->t[k];
    size_t dim = (size_t)t->dim, nc = (size_t)cur->nuids[k], nn = next ? (size_t)next->nuids[k] : 0;
    rows_reserve(&t->crit, PSC_MIN(nc, nn), t->dim);
    rows_reserve(&t->push, nc, t->dim);
    if (nc > t->shared_cap) {
        free(t->shared);
        t->shared_cap = PSC_MAX(nc, 2 * t->shared_cap);
        t->shared = psc_xmalloc(t->shared_cap);
    }
    memset(t->shared, 0, nc);
    t->crit.n = t->push.n = 0;
    for (size_t i = 0; i < nn; i++) { /* S, in next's order */
        int32_t at = next->prev[k][i];
        if (at < 0) continue;
        t->shared[at] = 1;
        t->crit.ids[t->crit.n] = next->uids[k][i];
        t->crit.dst[t->crit.n] = (int32_t)i;
        memcpy(t->crit.rows + t->crit.n * dim, cur->row_grads[k] + (size_t)at * dim, dim * sizeof(float));
        t->crit.n++;
    }
    for (size_t i = 0; i < nc; i++) {
        if (t->shared[i]) continue;
        t->push.ids[t->push.n] = cur->uids[k][i];
        memcpy(t->push.rows + t->push.n * dim, cur->row_grads[k] + i * dim, dim * sizeof(float));
        t->push.n++;
    }
    if (t->crit.n > t->crit_cap) {
        free(t->crit_rows);
        t->crit_cap = t->crit.cap;
        t->crit_rows = psc_xaligned(t->crit_cap * dim * sizeof(float));
    }
    size_t n2 = next2 ? (size_t)next2->nuids[k] : 0;
    rows_reserve(&t->pull, n2, t->dim);
    t->pull.n = 0;
    for (size_t i = 0; i < n2; i++) {
        if (next2->prev[k][i] >= 0) continue; /* in next: its critical round pulls it */
        t->pull.ids[t->pull.n] = next2->uids[k][i];
        t->pull.dst[t->pull.n++] = (int32_t)i;
    }
    p->pushed += (int64_t)nc;
    p->critical += (int64_t)t->crit.n;
}

void ctr_pf_start(ctr_pf_t *p, const ctr_slot_batch_t *cur, ctr_slot_batch_t *next, ctr_slot_batch_t *next2,
                  const ps_sparse_op_t **crit, int *ncrit)
{
    if (!next) next2 = NULL;
    /* prev says where an id was in the batch just before */
    PSC_ASSERT(!next || next->seq == cur->seq + 1);
    PSC_ASSERT(!next2 || next2->seq == next->seq + 1);
    int nc = 0, nb = 0;
    for (int k = 0; k < p->ntables; k++) {
        plan_table(p, k, cur, next, next2);
        const pf_table_t *t = &p->t[k];
        if (t->crit.n)
            p->crit_ops[nc++] = (ps_sparse_op_t){.table = k,
                                                 .push_ids = t->crit.ids,
                                                 .push_grads = t->crit.rows,
                                                 .npush = t->crit.n,
                                                 .pull_ids = t->crit.ids,
                                                 .pull_rows = t->crit_rows,
                                                 .npull = t->crit.n,
                                                 .unique = 1};
        if (t->push.n || t->pull.n)
            p->bulk_ops[nb++] = (ps_sparse_op_t){.table = k,
                                                 .push_ids = t->push.ids,
                                                 .push_grads = t->push.rows,
                                                 .npush = t->push.n,
                                                 .pull_ids = t->pull.ids,
                                                 .pull_rows = t->pull.rows,
                                                 .npull = t->pull.n,
                                                 .unique = 1};
    }
    *crit = nc ? p->crit_ops : NULL;
    *ncrit = nc;
    p->nbulk = nb;
    p->bulk_into = next2;
}

void ctr_pf_kick(ctr_pf_t *p)
{
    pthread_mutex_lock(&p->mu);
    PSC_ASSERT(p->state == PF_IDLE);
    p->state = PF_ASKED;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

void ctr_pf_crit_done(ctr_pf_t *p, ctr_slot_batch_t *next)
{
    for (int k = 0; k < p->ntables; k++) {
        const pf_table_t *t = &p->t[k];
        for (size_t i = 0; i < t->crit.n; i++)
            memcpy(next->rows[k] + (size_t)t->crit.dst[i] * (size_t)t->dim, t->crit_rows + i * (size_t)t->dim,
                   (size_t)t->dim * sizeof(float));
    }
}

void ctr_pf_counts(const ctr_pf_t *p, int64_t *pushed, int64_t *critical)
{
    *pushed = p->pushed;
    *critical = p->critical;
}
