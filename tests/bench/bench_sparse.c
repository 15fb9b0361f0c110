/* bench_sparse — sparse embedding tables (issue "sparse tables"), three tables:
 *
 * 1. step time against the declared size: 2 real ps_servers, one client
 *    (the worker's ps_client), one job with five tables of dim 64 declared
 *    2^16, 2^20, 2^24, 2^32 and 2^40 rows, SGD, measured in turns (8 rounds of
 *    seconds/2 each, the best round of each size: the 2-core VM's noise, with
 *    3 processes on it, moves single rounds by +-25 %). Each step pushes 4,096 unique ids' gradient rows and pulls the same
 *    ids' rows (ps_client_sparse: one Batch per PS, both PS at once). The ids
 *    are drawn from the same working set of 2^16 ids at every size, spread
 *    over the whole id range, every one touched before the timing (so the rows
 *    exist, the PS's memory stays bounded and only the declared size
 *    differs); a step's ids are distinct. Printed: ms per step, and its ratio
 *    to the 2^16-row table's (target: within 1.2).
 * 2. bytes on the wire per step, each way: the Batch messages the client sent
 *    and received, against ids x (8 + 4 * dim) (target: within 10 %). gRPC adds
 *    5 bytes a message and HTTP/2 9 bytes per 16 KiB frame on top (~0.06 %).
 * 3. rows applied per second on the PS: sparse_table_push (the PS's code:
 *    hash lookup, shard locks, the optimizer on each row) of 4,096 unique ids
 *    x 64 of a 2^40-row table whose rows exist, against a plain C loop doing
 *    the same update on the same rows held in a plain array (row k of the
 *    working set at k * dim: no lookup, no lock): the best of several rounds
 *    each, SGD, Adagrad and Adam (lazy) (target >= 0.8). One thread. Two
 *    working sets: 4,096 rows (every push updates the same rows: all in
 *    cache) and 2^18 rows (each push 4,096 random ones of them: the rows of
 *    a real table, mostly cache misses for both).
 * 4. the PS's CPU per unique id of the recommendation job's step
 *    (deploy/jobs/ctr.json): two tables of 10^8 declared rows, "emb" (dim 8,
 *    lazy Adam) and "wide" (dim 1, FTRL); a step is CTR_IDS unique ids (a
 *    256-example batch's 6,426 in the real job) pushed to both tables (the
 *    PS's checks: ids in range and unique, gradients finite; then the
 *    update) and CTR_IDS ids pulled from both (checked, copied out), in one
 *    pass over the shards as the ps_server does (sparse_table_push_pull;
 *    "2-pass": the push's pass, then the pull's, as before it). The ids
 *    follow the job's sequence: a worker pushes a batch's gradients in the
 *    round after the one that pulled the batch's rows, so a step pushes the
 *    rows the step before pulled, and pulls the next batch's, 27 % of them
 *    the rows it pushes (the share of a batch's ids the next batch holds on
 *    psc_gen_ctr data).
 *    Against the floor: a plain C loop over the same rows held in a flat
 *    array on huge pages (row k of the working set at k * record bytes, the table's
 *    record layout) that reads each pulled row's floats and applies the
 *    same optimizer kernel (optim_apply_rows) to each pushed row: no
 *    lookup, no check, no lock, no prefetch. Alternating steps of each, the
 *    best of several rounds; working sets of 8,192 ids (in cache) and 2^20
 *    (the real job's tables hold ~1.2 M rows each: cache and TLB misses).
 *    Printed: us per unique id (both tables, push + pull) and the table's
 *    time over the plain loop's (issue 32: <= ~0.15 us an id).
 * A measurement, not a test: it never fails on speed.
 *
 * usage: bench_sparse [seconds-per-point [apply | ctr [ROWS [table]]]]
 *        (default 1; `apply`: only table 3, `ctr`: only table 4, ROWS: only
 *        that working set, `table`: without the plain loop; for perf)
 */
#include "../integration/it_util.h"
#include "optim.h"
#include "placement.h"
#include "ps_client.h"
#include "psc.h"
#include "psc.pb-c.h"
#include "rng.h"
#include "sparse_table.h"
#include "table.h"
#include "wire.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IDS 4096
#define DIM 64
#define WORKING_SET ((int64_t)1 << 16) /* rows a step's ids come from, at every declared size */

static double secs = 1;

static void release(it_proc_t *ps, int n)
{
    Psc__ReleaseRequest r = PSC__RELEASE_REQUEST__INIT;
    r.job_id = "";
    uint8_t buf[32];
    size_t len = psc__release_request__pack(&r, buf);
    for (int i = 0; i < n; i++) {
        psc_rpc_channel_t *ch = psc_rpc_channel_create(ps[i].addr);
        psc_rpc_op_t op;
        if (psc_rpc_call(ch, PSC_M_RELEASE, buf, len, 10000, 0, &op)) fprintf(stderr, "release: %s\n", op.msg);
        psc_rpc_op_clear(&op);
        psc_rpc_channel_destroy(ch);
    }
}

/* Distinct ids of the working set: IDS of them, from position `at` on. */
static void step_ids(int64_t rows, int64_t *ids, uint64_t at)
{
    int64_t w = rows < WORKING_SET ? rows : WORKING_SET, stride = rows / w;
    for (int i = 0; i < IDS; i++) { /* odd and even ids alike: both PS get their half (mod partition) */
        int64_t k = (int64_t)((at + (uint64_t)i * 7919u) % (uint64_t)w);
        ids[i] = k * stride + (stride > 1 ? (k & 1) : 0);
    }
}

#define NSIZES 5
#define ROUNDS 8 /* turns of secs/2 each per size */
static const int size_exp[NSIZES] = {16, 20, 24, 32, 40};

typedef struct point {
    double ms;
    double out, in; /* bytes a step */
} point_t;

/* One job with a table per declared size ("emb<exp>"); the sizes are measured
 * in turns, several rounds, each size's best round kept, so the machine's
 * noise hits them alike. */
static void wire_points(it_proc_t *ps, point_t *pts)
{
    psc_cluster_t cl = {0};
    cl.n[PSC_JOB_PS] = 2;
    char *addrs[2] = {ps[0].addr, ps[1].addr};
    cl.addr[PSC_JOB_PS] = addrs;
    psc_var_desc_t v = {.name = "global_step", .numel = 1, .is_step = 1, .layer = -1};
    psc_placed_var_t *placed = NULL;
    int nplaced = 0;
    char err[512];
    if (psc_place(&v, 1, 2, PSC_PLACE_ROUND_ROBIN, 0, &placed, &nplaced, err, sizeof err)) abort();
    ps_client_t *pc = ps_client_create(&cl, &v, 1, placed, nplaced, 0, 60000);
    psc_optim_config_t sgd = {.kind = PSC_OPT_SGD, .learning_rate = 0.01f};
    psc_table_spec_t t[NSIZES];
    int part_ps[2 * NSIZES];
    for (int i = 0; i < NSIZES; i++) {
        t[i] = (psc_table_spec_t){
            .rows = (int64_t)1 << size_exp[i], .dim = DIM, .init = {PSC_INIT_UNIFORM, -0.05f, 0.05f}, .optimizer = sgd};
        snprintf(t[i].name, sizeof t[i].name, "emb%d", size_exp[i]);
        part_ps[2 * i] = 0;
        part_ps[2 * i + 1] = 1;
    }
    ps_client_set_tables(pc, t, NSIZES, part_ps, 42);
    ps_model_origin_t origin;
    float none = 0;
    if (ps_client_create_model(pc, "00000000000000b5", &sgd, &none, &origin, err, sizeof err)) {
        fprintf(stderr, "bench_sparse: create: %s\n", err);
        exit(1);
    }
    int64_t *ids = malloc(IDS * sizeof *ids);
    float *g = malloc((size_t)IDS * DIM * sizeof *g), *rows_out = malloc((size_t)IDS * DIM * sizeof *rows_out);
    for (size_t i = 0; i < (size_t)IDS * DIM; i++) g[i] = 1e-3f * (float)(i % 13);
    ps_sparse_stats_t st = {0};
    ps_sparse_op_t op = {.push_ids = ids,
                         .push_grads = g,
                         .npush = IDS,
                         .pull_ids = ids,
                         .pull_rows = rows_out,
                         .npull = IDS,
                         .stats = &st};
    for (int i = 0; i < NSIZES; i++) {
        pts[i] = (point_t){1e30, 0, 0};
        op.table = i;
        for (int64_t at = 0; at < WORKING_SET; at += IDS) { /* touch the working set */
            step_ids(t[i].rows, ids, (uint64_t)at);
            if (ps_client_sparse(pc, &op, 1, err, sizeof err)) {
                fprintf(stderr, "bench_sparse: %s\n", err);
                exit(1);
            }
        }
    }
    uint64_t at = 12345;
    for (int round = 0; round < ROUNDS; round++)
        for (int i = 0; i < NSIZES; i++) {
            op.table = i;
            uint64_t steps = 0;
            double out = 0, in = 0, t0 = psc_now(), t1 = t0;
            while (t1 - t0 < secs / 2) {
                step_ids(t[i].rows, ids, at);
                at += 104729u * IDS;
                if (ps_client_sparse(pc, &op, 1, err, sizeof err)) {
                    fprintf(stderr, "bench_sparse: %s\n", err);
                    exit(1);
                }
                out += (double)st.bytes_out;
                in += (double)st.bytes_in;
                steps++;
                t1 = psc_now();
            }
            double ms = (t1 - t0) * 1000 / (double)steps;
            if (ms < pts[i].ms) pts[i] = (point_t){ms, out / (double)steps, in / (double)steps};
        }
    free(ids);
    free(g);
    free(rows_out);
    ps_client_destroy(pc);
    free(placed);
    release(ps, 2);
}

/* ---- apply rate ---- */

typedef struct ref_rows {
    float *w, *s0, *s1;
    int64_t *t;
} ref_rows_t;

/* The plain loop: the same update on n contiguous rows (optim.h's formulas, row by row). */
static void ref_apply(const psc_optim_config_t *c, ref_rows_t *r, const float *g, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float *w = r->w + i * DIM, *s0 = r->s0 + i * DIM, *s1 = r->s1 + i * DIM;
        const float *gi = g + i * DIM;
        int64_t t = ++r->t[i];
        if (c->kind == PSC_OPT_SGD) {
            for (int j = 0; j < DIM; j++) w[j] -= c->learning_rate * gi[j];
        } else if (c->kind == PSC_OPT_ADAGRAD) {
            for (int j = 0; j < DIM; j++) {
                s0[j] += gi[j] * gi[j];
                w[j] -= c->learning_rate * gi[j] / sqrtf(s0[j]);
            }
        } else {
            float lr = c->learning_rate * sqrtf(1 - powf(c->beta2, (float)t)) / (1 - powf(c->beta1, (float)t));
            for (int j = 0; j < DIM; j++) {
                s0[j] = c->beta1 * s0[j] + (1 - c->beta1) * gi[j];
                s1[j] = c->beta2 * s1[j] + (1 - c->beta2) * gi[j] * gi[j];
                w[j] -= lr * s0[j] / (sqrtf(s1[j]) + c->epsilon);
            }
        }
    }
}

static void apply_point(const char *name, psc_optim_config_t c, size_t wset)
{
    sparse_table_cfg_t cfg = {.rows = (int64_t)1 << 40,
                              .nparts = 1,
                              .part = 0,
                              .dim = DIM,
                              .init = {PSC_INIT_UNIFORM, -0.05f, 0.05f},
                              .seed = 42,
                              .opt = c};
    snprintf(cfg.name, sizeof cfg.name, "emb");
    sparse_table_t *t;
    char err[256];
    if (sparse_table_create(&cfg, &t, err, sizeof err)) {
        fprintf(stderr, "bench_sparse: %s\n", err);
        exit(1);
    }
    int64_t *all = malloc(wset * sizeof *all), *ids = malloc(IDS * sizeof *ids);
    size_t *pos = malloc(IDS * sizeof *pos);
    float *g = malloc((size_t)IDS * DIM * sizeof *g), *scratch = malloc((size_t)IDS * DIM * sizeof *scratch);
    psc_rng_t rng;
    psc_rng_seed(&rng, 3);
    for (size_t i = 0; i < wset; i++) all[i] = (int64_t)(psc_rng_next(&rng) >> 24); /* spread over 2^40 */
    for (size_t i = 0; i < (size_t)IDS * DIM; i++) g[i] = 1e-3f * (float)(i % 13);
    for (size_t at = 0; at < wset; at += IDS) sparse_table_pull(t, all + at, PSC_MIN((size_t)IDS, wset - at), scratch);
    ref_rows_t r = {calloc(wset * DIM, 4), calloc(wset * DIM, 4), calloc(wset * DIM, 4), calloc(wset, 8)};
    ref_rows_t view = r;
    for (size_t i = 0; i < wset * DIM; i++) r.s0[i] = 0.1f;
    double best_table = 1e30, best_ref = 1e30;
    for (double t0 = psc_now(); psc_now() - t0 < secs;) { /* alternate, best round of each */
        double tt = 0, tr = 0;
        for (int k = 0; k < 8; k++) {
            for (int i = 0; i < IDS; i++) { /* distinct positions: a stride through the working set */
                pos[i] = (size_t)(psc_rng_next(&rng) % (wset / IDS)) * IDS + (size_t)i;
                ids[i] = all[pos[i]];
            }
            double a = psc_now();
            sparse_table_push(t, ids, IDS, g, c.learning_rate, NULL);
            double b = psc_now();
            for (int i = 0; i < IDS; i++) { /* the same rows, in the plain array */
                view.w = r.w + pos[i] * DIM, view.s0 = r.s0 + pos[i] * DIM, view.s1 = r.s1 + pos[i] * DIM;
                view.t = r.t + pos[i];
                ref_apply(&c, &view, g + (size_t)i * DIM, 1);
            }
            double e = psc_now();
            tt += b - a;
            tr += e - b;
        }
        best_table = fmin(best_table, tt / 8);
        best_ref = fmin(best_ref, tr / 8);
    }
    printf("%-10s %10zu %14.2f %14.2f %10.2f\n", name, wset, IDS / best_table / 1e6, IDS / best_ref / 1e6,
           best_ref / best_table);
    sparse_table_destroy(t);
    free(all);
    free(ids);
    free(pos);
    free(g);
    free(scratch);
    free(r.w);
    free(r.s0);
    free(r.s1);
    free(r.t);
}

/* ---- the recommendation job's step (table 4) ---- */

#define CTR_IDS 6426 /* unique ids of a step: ctr.json's 256-example batch */
#define CTR_CHUNK 64 /* rows per optim_apply_rows call of the plain loop */
#define CTR_SHARED 1735 /* of them pulled in the same step (27 %: the next batch's share of this one's ids) */

typedef struct ctr_tab {
    sparse_table_t *t;
    psc_optim_config_t opt;
    int dim;
    size_t stride;       /* the record rounded up to 8 bytes, as the table stores it */
    unsigned char *flat; /* (wset, stride) the plain loop's rows, the table's record layout, on huge pages */
    size_t flat_bytes;
    float *grads;        /* (CTR_IDS, dim) */
    float *out;          /* (CTR_IDS, dim) */
} ctr_tab_t;

/* Table `name` with the rows of all[0..wset) created, and the same rows in a flat array. */
static void ctr_tab_init(ctr_tab_t *c, const char *name, int dim, psc_optim_config_t opt, psc_initializer_t init,
                         const int64_t *all, size_t wset)
{
    sparse_table_cfg_t cfg = {
        .rows = 100000000, .nparts = 1, .part = 0, .dim = dim, .init = init, .seed = 1, .opt = opt};
    snprintf(cfg.name, sizeof cfg.name, "%s", name);
    char err[256];
    if (sparse_table_create(&cfg, &c->t, err, sizeof err)) {
        fprintf(stderr, "bench_sparse: %s\n", err);
        exit(1);
    }
    c->opt = opt;
    c->dim = dim;
    c->stride = (sparse_table_record_bytes(c->t) + 7) & ~(size_t)7;
    c->flat_bytes = (wset * c->stride + PSC_HUGE_PAGE - 1) / PSC_HUGE_PAGE * PSC_HUGE_PAGE;
    c->flat = psc_huge_alloc(c->flat_bytes); /* as a big table's records are */
    if (!c->flat) {
        fprintf(stderr, "bench_sparse: no memory for %zu rows\n", wset);
        exit(1);
    }
    c->grads = malloc((size_t)CTR_IDS * (size_t)dim * sizeof *c->grads);
    c->out = malloc((size_t)CTR_IDS * (size_t)dim * sizeof *c->out);
    for (size_t i = 0; i < (size_t)CTR_IDS * (size_t)dim; i++) c->grads[i] = 1e-3f * (float)((int)(i % 13) - 6);
    for (size_t at = 0; at < wset; at += CTR_IDS) {
        size_t n = PSC_MIN((size_t)CTR_IDS, wset - at);
        sparse_table_pull(c->t, all + at, n, c->out);
        for (size_t i = 0; i < n; i++)
            sparse_table_assigned_record(c->t, all[at + i], c->out + i * (size_t)dim, c->flat + (at + i) * c->stride);
    }
}

static void ctr_tab_free(ctr_tab_t *c)
{
    sparse_table_destroy(c->t);
    psc_huge_free(c->flat, c->flat_bytes);
    free(c->grads);
    free(c->out);
}

/* The PS's work on one table for a step: a push's checks and update, a pull's check and copy; fused: in one
 * pass over the shards (sparse_table_push_pull, as the ps_server does), else the push's pass then the pull's. */
static void ctr_table_step(ctr_tab_t *c, const int64_t *push, const int64_t *pull, int fused)
{
    char err[256] = "out of memory";
    if (sparse_table_check_ids(c->t, push, CTR_IDS, 1, err, sizeof err) ||
        sparse_table_check_grads(c->t, push, c->grads, CTR_IDS, err, sizeof err) ||
        sparse_table_check_ids(c->t, pull, CTR_IDS, 0, err, sizeof err) ||
        (fused ? sparse_table_push_pull(c->t, push, CTR_IDS, c->grads, c->opt.learning_rate, pull, CTR_IDS, c->out)
               : sparse_table_push(c->t, push, CTR_IDS, c->grads, c->opt.learning_rate, NULL) ||
                     sparse_table_pull(c->t, pull, CTR_IDS, c->out))) {
        fprintf(stderr, "bench_sparse: ctr: %s\n", err);
        exit(1);
    }
}

/* The floor: the same rows at known places of the flat array, the same kernel. */
static void ctr_plain_step(ctr_tab_t *c, const size_t *push, const size_t *pull)
{
    float *w[CTR_CHUNK];
    const void *g[CTR_CHUNK];
    int64_t t[CTR_CHUNK];
    size_t gb = 4 * (size_t)c->dim;
    for (size_t i0 = 0; i0 < CTR_IDS; i0 += CTR_CHUNK) {
        size_t m = PSC_MIN((size_t)CTR_CHUNK, (size_t)CTR_IDS - i0);
        for (size_t k = 0; k < m; k++) {
            unsigned char *r = c->flat + push[i0 + k] * c->stride;
            memcpy(&t[k], r, 8);
            t[k]++; /* the row's own step (LazyAdam) */
            memcpy(r, &t[k], 8);
            w[k] = (float *)(void *)(r + 8);
            g[k] = (const unsigned char *)c->grads + (i0 + k) * gb;
        }
        optim_apply_rows(&c->opt, c->opt.learning_rate, w, g, t, m, c->dim);
    }
    for (size_t i = 0; i < CTR_IDS; i++) memcpy(c->out + i * (size_t)c->dim, c->flat + pull[i] * c->stride + 8, gb);
}

/* CTR_IDS distinct positions of the working set (a stride through it), the first `keep` of them as
 * they are (the ids a step's pull shares with its push). */
static void ctr_draw(psc_rng_t *rng, const int64_t *all, size_t wset, size_t keep, size_t *pos, int64_t *ids)
{
    size_t lanes = wset / CTR_IDS;
    for (size_t i = 0; i < CTR_IDS; i++) {
        if (i >= keep) pos[i] = (size_t)(psc_rng_next(rng) % lanes) * CTR_IDS + i;
        ids[i] = all[pos[i]];
    }
}

static void ctr_point(size_t wset, int table_only)
{
    const psc_optim_config_t adam = {
        .kind = PSC_OPT_ADAM, .learning_rate = 0.003f, .beta1 = 0.9f, .beta2 = 0.999f, .epsilon = 1e-7f};
    const psc_optim_config_t ftrl = {
        .kind = PSC_OPT_FTRL, .learning_rate = 0.5f, .initial_accumulator_value = 0.1f, .learning_rate_power = -0.5f};
    int64_t *all = malloc(wset * sizeof *all), *ids[2];
    size_t *pos[2];
    for (size_t i = 0; i < wset; i++) all[i] = (int64_t)((uint64_t)i * 2654435761u % 100000000u); /* distinct */
    for (int k = 0; k < 2; k++) {
        ids[k] = malloc(CTR_IDS * sizeof *ids[k]);
        pos[k] = malloc(CTR_IDS * sizeof *pos[k]);
    }
    ctr_tab_t tab[2];
    ctr_tab_init(&tab[0], "emb", 8, adam, (psc_initializer_t){PSC_INIT_UNIFORM, -0.05f, 0.05f}, all, wset);
    ctr_tab_init(&tab[1], "wide", 1, ftrl, (psc_initializer_t){PSC_INIT_ZEROS, 0, 0}, all, wset);
    psc_rng_t rng;
    psc_rng_seed(&rng, 5);
    ctr_draw(&rng, all, wset, 0, pos[1], ids[1]);
    double best_table = 1e30, best_two = 1e30, best_plain = 1e30;
    for (double t0 = psc_now(); psc_now() - t0 < secs;) { /* alternate, the best round of each */
        double tt = 0, t2 = 0, tp = 0;
        for (int k = 0; k < 8; k++) {
            memcpy(pos[0], pos[1], CTR_IDS * sizeof *pos[0]); /* pushed: the rows the last step pulled */
            memcpy(ids[0], ids[1], CTR_IDS * sizeof *ids[0]);
            memcpy(pos[1], pos[0], CTR_SHARED * sizeof *pos[1]);
            ctr_draw(&rng, all, wset, CTR_SHARED, pos[1], ids[1]); /* pulled: CTR_SHARED of them pushed now */
            double a = psc_now();
            for (int j = 0; j < 2; j++) ctr_table_step(&tab[j], ids[0], ids[1], k % 2 == 0);
            double b = psc_now();
            for (int j = 0; j < 2 && !table_only; j++) ctr_plain_step(&tab[j], pos[0], pos[1]);
            double e = psc_now();
            *(k % 2 == 0 ? &tt : &t2) += b - a;
            tp += e - b;
        }
        best_table = fmin(best_table, tt / 4);
        best_two = fmin(best_two, t2 / 4);
        best_plain = fmin(best_plain, tp / 8);
    }
    printf("%10zu %12.3f %12.3f %12.3f %12.3f %10.2f\n", wset, best_table * 1e3, best_table * 1e6 / CTR_IDS,
           best_two * 1e6 / CTR_IDS, best_plain * 1e6 / CTR_IDS, best_table / best_plain);
    for (int k = 0; k < 2; k++) {
        ctr_tab_free(&tab[k]);
        free(ids[k]);
        free(pos[k]);
    }
    free(all);
}

int main(int argc, char **argv)
{
    if (argc > 1) secs = atof(argv[1]);
    int apply_only = argc > 2 && strcmp(argv[2], "apply") == 0, ctr_only = argc > 2 && strcmp(argv[2], "ctr") == 0;
    it_proc_t ps[2];
    if (ctr_only) goto ctr;
    for (int i = 0; i < 2 && !apply_only; i++)
        if (it_start_ps(&ps[i])) {
            fprintf(stderr, "bench_sparse: cannot start ps_server (PSC_BIN=%s)\n", it_bin());
            return 1;
        }
    if (apply_only) goto apply;
    printf("bench_sparse: sparse push-pull of %d unique ids x dim %d a step, 2 PS, 1 client, SGD\n", IDS, DIM);
    printf("%-8s %10s %8s %14s %14s %10s %10s\n", "rows", "ms/step", "vs 2^16", "bytes out", "bytes in", "out/ideal",
           "in/ideal");
    double ideal = (double)IDS * (8 + 4 * DIM);
    point_t p[NSIZES];
    wire_points(ps, p);
    for (int i = 0; i < NSIZES; i++)
        printf("2^%-6d %10.3f %8.2f %14.0f %14.0f %10.3f %10.3f\n", size_exp[i], p[i].ms, p[i].ms / p[0].ms, p[i].out,
               p[i].in, p[i].out / ideal, p[i].in / ideal);
    for (int i = 0; i < 2; i++) it_stop(&ps[i]);
apply:
    printf("\nbench_sparse: rows applied per second, %d unique ids x dim %d of a 2^40-row table, 1 thread\n", IDS, DIM);
    printf("%-10s %10s %14s %14s %10s\n", "optimizer", "rows", "table Mrows/s", "plain Mrows/s", "ratio");
    const psc_optim_config_t opts[3] = {
        {.kind = PSC_OPT_SGD, .learning_rate = 0.01f},
        {.kind = PSC_OPT_ADAGRAD, .learning_rate = 0.01f, .initial_accumulator_value = 0.1f},
        {.kind = PSC_OPT_ADAM, .learning_rate = 0.001f, .beta1 = 0.9f, .beta2 = 0.999f, .epsilon = 1e-7f}};
    const char *names[3] = {"sgd", "adagrad", "adam"};
    for (int o = 0; o < 3; o++) {
        apply_point(names[o], opts[o], IDS);
        apply_point(names[o], opts[o], (size_t)1 << 18);
    }
    if (apply_only) return 0;
ctr:
    printf("\nbench_sparse: the recommendation job's step on the PS: %d unique ids pushed (checked, applied) and %d\n"
           "pulled (checked, copied) in \"emb\" (dim 8, lazy Adam) and \"wide\" (dim 1, FTRL), 1 thread,\n"
           "against a plain loop over the same rows in a flat array (same kernel, no lookup)\n",
           CTR_IDS, CTR_IDS);
    printf("%10s %12s %12s %12s %12s %10s\n", "rows", "ms/step", "us/id", "2-pass us/id", "plain us/id", "x plain");
    if (argc > 3) { /* one working set; `table`: without the plain loop (for perf) */
        ctr_point((size_t)atoll(argv[3]), argc > 4 && strcmp(argv[4], "table") == 0);
        return 0;
    }
    ctr_point(8192, 0);
    ctr_point((size_t)1 << 20, 0);
    return 0;
}
