/* bench_batch — what one sparse Batch call costs a ps_server apart from its
 * rows (the recommendation job's worker splits a step's exchange into two
 * calls per PS with "prefetch_rows": 1, worker/job/ctr_prefetch.h: a ~1,600-id
 * critical call and a ~4,800-id bulk one per table, where the serial path
 * sends one of ~6,400).
 *
 * The PS's CPU per call (all its threads: /proc/PID/task/N/schedstat, ns) for
 * calls of n ids per table, n from 1 to 6,400, on the job's two tables
 * (deploy/jobs/ctr.json: "emb", dim 8, lazy Adam; "wide", dim 1, FTRL; 10^8
 * declared rows each). A call pushes n ids' gradient rows to each table and
 * pulls n other ids' rows from each: one Batch of four sparse items, as the
 * worker's ps_client_sparse sends, the ids drawn at random from a working set
 * of 2^18 rows that exist (made before the timing). The 1-id call is the fixed
 * cost of a call; cost(1600) + cost(4800) - cost(6400) is what the split adds.
 * Given several build directories, the same points run against each one's
 * ps_server in turns (round after round, a fresh ps_server each time), so
 * that builds are compared under the same load; each point's best round and
 * the mean of the rounds are printed.
 *
 * With `table`: the store's part alone, in this process, no RPC: the same
 * calls' checks, pushes and pulls (sparse_table_check_ids, _check_grads,
 * _push, _pull), working sets of 8,192 ids (in cache) and 2^18 (cache misses).
 * Against the RPC points this separates the rows' work from gRPC's.
 * A measurement, not a test: it never fails on speed.
 *
 * usage: bench_batch [seconds-per-point [rounds [BIN_DIR...]]]
 *        bench_batch table [seconds-per-point]
 *        (default 0.5 s, 3 rounds, PSC_BIN or "."; BENCH_BATCH_IDS=n: only
 *        that point, for perf)
 */
#include "../integration/it_util.h"
#include "placement.h"
#include "ps_client.h"
#include "psc.h"
#include "rng.h"
#include "sparse_table.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WSET ((size_t)1 << 18) /* rows the ids come from */
#define MAX_IDS 6400
#define NPOINTS 8
#define MAX_BINS 4
#define MAX_ROUNDS 32

static const size_t point_ids[NPOINTS] = {1, 16, 64, 256, 1024, 1600, 4800, 6400};

/* The CPU time of every thread of process pid so far, in ns. */
static double proc_cpu_ns(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d) return 0;
    double ns = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[320];
        snprintf(p, sizeof p, "/proc/%d/task/%s/schedstat", (int)pid, e->d_name);
        FILE *f = fopen(p, "r");
        unsigned long long run = 0;
        if (f && fscanf(f, "%llu", &run) == 1) ns += (double)run;
        if (f) fclose(f);
    }
    closedir(d);
    return ns;
}

typedef struct bench {
    ps_client_t *pc;
    psc_placed_var_t *placed;
    int64_t *all; /* (WSET) the working set's ids */
    int64_t *push_ids, *pull_ids;
    float *grads[2], *rows[2]; /* (MAX_IDS, dim) per table */
    size_t wset;               /* ids are drawn from all[0..wset) */
    psc_rng_t rng;
} bench_t;

static const int dims[2] = {8, 1};

static void die(const char *what, const char *err)
{
    fprintf(stderr, "bench_batch: %s: %s\n", what, err);
    exit(1);
}

/* n distinct ids of the working set (all[0..b->wset)) at random (a lane each), into ids. */
static void draw(bench_t *b, size_t n, int64_t *ids)
{
    size_t lanes = b->wset / n;
    for (size_t i = 0; i < n; i++) ids[i] = b->all[(size_t)(psc_rng_next(&b->rng) % lanes) * n + i];
}

/* One Batch: n ids pushed to and n other ids pulled from both tables. */
static void call(bench_t *b, size_t n)
{
    char err[512];
    draw(b, n, b->push_ids);
    draw(b, n, b->pull_ids);
    ps_sparse_op_t ops[2];
    for (int t = 0; t < 2; t++)
        ops[t] = (ps_sparse_op_t){.table = t,
                                  .push_ids = b->push_ids,
                                  .push_grads = b->grads[t],
                                  .npush = n,
                                  .pull_ids = b->pull_ids,
                                  .pull_rows = b->rows[t],
                                  .npull = n,
                                  .unique = 1};
    if (ps_client_sparse(b->pc, ops, 2, err, sizeof err)) die("Batch", err);
}

/* A client of ps with the job's two tables created and the working set's rows made. */
static void bench_open(bench_t *b, it_proc_t *ps)
{
    psc_cluster_t cl = {0};
    cl.n[PSC_JOB_PS] = 1;
    char *addrs[1] = {ps->addr};
    cl.addr[PSC_JOB_PS] = addrs;
    psc_var_desc_t v = {.name = "global_step", .numel = 1, .is_step = 1, .layer = -1};
    int nplaced = 0;
    char err[512];
    if (psc_place(&v, 1, 1, PSC_PLACE_ROUND_ROBIN, 0, &b->placed, &nplaced, err, sizeof err)) die("place", err);
    b->pc = ps_client_create(&cl, &v, 1, b->placed, nplaced, 0, 60000);
    const psc_optim_config_t adam = {
        .kind = PSC_OPT_ADAM, .learning_rate = 0.003f, .beta1 = 0.9f, .beta2 = 0.999f, .epsilon = 1e-7f};
    const psc_optim_config_t ftrl = {
        .kind = PSC_OPT_FTRL, .learning_rate = 0.5f, .initial_accumulator_value = 0.1f, .learning_rate_power = -0.5f};
    psc_table_spec_t t[2] = {
        {.name = "emb", .rows = 100000000, .dim = 8, .init = {PSC_INIT_UNIFORM, -0.05f, 0.05f}, .optimizer = adam},
        {.name = "wide", .rows = 100000000, .dim = 1, .init = {PSC_INIT_ZEROS, 0, 0}, .optimizer = ftrl}};
    int part_ps[2] = {0, 0};
    ps_client_set_tables(b->pc, t, 2, part_ps, 1);
    ps_model_origin_t origin;
    float none = 0;
    if (ps_client_create_model(b->pc, "00000000000000bb", &adam, &none, &origin, err, sizeof err)) die("create", err);
    for (size_t at = 0; at < WSET; at += MAX_IDS) { /* the rows exist before the timing */
        size_t n = PSC_MIN((size_t)MAX_IDS, WSET - at);
        ps_sparse_op_t ops[2];
        for (int k = 0; k < 2; k++)
            ops[k] = (ps_sparse_op_t){
                .table = k, .pull_ids = b->all + at, .pull_rows = b->rows[k], .npull = n, .unique = 1};
        if (ps_client_sparse(b->pc, ops, 2, err, sizeof err)) die("Batch", err);
    }
}

static void bench_close(bench_t *b)
{
    ps_client_destroy(b->pc);
    free(b->placed);
    b->pc = NULL;
    b->placed = NULL;
}

/* ---- the store alone: sparse_table_push and _pull in this process, no RPC ---- */

/* The job's two tables with the rows of all[0..wset) made. */
static void table_open(sparse_table_t *t[2], const int64_t *all, size_t wset, float *rows)
{
    const psc_optim_config_t adam = {
        .kind = PSC_OPT_ADAM, .learning_rate = 0.003f, .beta1 = 0.9f, .beta2 = 0.999f, .epsilon = 1e-7f};
    const psc_optim_config_t ftrl = {
        .kind = PSC_OPT_FTRL, .learning_rate = 0.5f, .initial_accumulator_value = 0.1f, .learning_rate_power = -0.5f};
    for (int k = 0; k < 2; k++) {
        sparse_table_cfg_t cfg = {.rows = 100000000, .nparts = 1, .dim = dims[k], .seed = 1, .opt = k ? ftrl : adam};
        cfg.init = k ? (psc_initializer_t){PSC_INIT_ZEROS, 0, 0} : (psc_initializer_t){PSC_INIT_UNIFORM, -0.05f, 0.05f};
        snprintf(cfg.name, sizeof cfg.name, "%s", k ? "wide" : "emb");
        char err[256];
        if (sparse_table_create(&cfg, &t[k], err, sizeof err)) die("table", err);
        for (size_t at = 0; at < wset; at += MAX_IDS)
            if (sparse_table_pull(t[k], all + at, PSC_MIN((size_t)MAX_IDS, wset - at), rows)) die("table", "pull");
    }
}

/* us per call of the store's work of one Batch (checks, pushes, pulls of both tables) of each point's n ids. */
static void table_points(bench_t *b, size_t wset, double secs, size_t only)
{
    sparse_table_t *t[2];
    table_open(t, b->all, wset, b->rows[0]);
    printf("%8zu", wset);
    for (int p = 0; p < NPOINTS; p++) {
        size_t n = point_ids[p];
        double best = 1e30;
        if (only && n != only) {
            printf(" %9s", "-");
            continue;
        }
        for (double t0 = psc_now(); psc_now() - t0 < secs;) {
            double a = psc_now();
            for (int i = 0; i < 8; i++) {
                draw(b, n, b->push_ids); /* within the working set: all[0..wset) */
                draw(b, n, b->pull_ids);
                for (int k = 0; k < 2; k++) {
                    char err[256];
                    if (sparse_table_check_ids(t[k], b->push_ids, n, 1, err, sizeof err) ||
                        sparse_table_check_grads(t[k], b->push_ids, b->grads[k], n, err, sizeof err) ||
                        sparse_table_push(t[k], b->push_ids, n, b->grads[k], 0.003, NULL) ||
                        sparse_table_check_ids(t[k], b->pull_ids, n, 0, err, sizeof err) ||
                        sparse_table_pull(t[k], b->pull_ids, n, b->rows[k]))
                        die("table", err);
                }
            }
            best = fmin(best, (psc_now() - a) * 1e6 / 8);
        }
        printf(" %9.1f", best);
    }
    printf("\n");
    for (int k = 0; k < 2; k++) sparse_table_destroy(t[k]);
}

int main(int argc, char **argv)
{
    int table = argc > 1 && strcmp(argv[1], "table") == 0;
    double secs = argc > 1 + table ? atof(argv[1 + table]) : 0.5;
    if (table) argc = 1; /* no rounds, no builds */
    int rounds = argc > 2 ? atoi(argv[2]) : 3, nbins = argc > 3 ? argc - 3 : 1;
    if (rounds < 1 || rounds > MAX_ROUNDS || nbins > MAX_BINS || !(secs > 0)) {
        fprintf(stderr, "usage: bench_batch [seconds-per-point [rounds (1..%d) [BIN_DIR... (at most %d)]]]\n",
                MAX_ROUNDS, MAX_BINS);
        return 64;
    }
    const char *bins[MAX_BINS] = {it_bin()};
    for (int i = 0; i < nbins && argc > 3; i++) bins[i] = argv[3 + i];
    bench_t b = {0};
    b.all = malloc(WSET * sizeof *b.all);
    for (size_t i = 0; i < WSET; i++) b.all[i] = (int64_t)((uint64_t)i * 2654435761u % 100000000u); /* distinct */
    b.push_ids = malloc(MAX_IDS * sizeof *b.push_ids);
    b.pull_ids = malloc(MAX_IDS * sizeof *b.pull_ids);
    for (int t = 0; t < 2; t++) {
        size_t nf = (size_t)MAX_IDS * (size_t)dims[t];
        b.grads[t] = malloc(nf * sizeof(float));
        b.rows[t] = malloc(nf * sizeof(float));
        for (size_t i = 0; i < nf; i++) b.grads[t][i] = 1e-3f * (float)((int)(i % 13) - 6);
    }
    psc_rng_seed(&b.rng, 7);
    b.wset = WSET;
    const char *env = getenv("BENCH_BATCH_IDS"); /* one point only (for perf) */
    size_t only = env ? (size_t)atoll(env) : 0;
    if (table) {
        printf("bench_batch: the store's work of a Batch (ids checked, pushed, other ids checked, pulled; both\n"
               "tables), in this process, no RPC: us per call (best of rounds of 8), by ids per table\n%8s",
               "wset");
        for (int p = 0; p < NPOINTS; p++) printf(" %9zu", point_ids[p]);
        printf("\n");
        size_t sets[2] = {8192, WSET};
        for (int i = 0; i < 2; i++) {
            b.wset = sets[i];
            table_points(&b, sets[i], secs, only);
        }
        return 0;
    }
    static double cpu[MAX_BINS][NPOINTS][MAX_ROUNDS], wall[MAX_BINS][NPOINTS][MAX_ROUNDS];
    for (int r = 0; r < rounds; r++)
        for (int k = 0; k < nbins; k++) {
            setenv("PSC_BIN", bins[k], 1);
            it_proc_t ps;
            if (it_start_ps(&ps)) {
                fprintf(stderr, "bench_batch: cannot start %s/ps_server\n", bins[k]);
                return 1;
            }
            bench_open(&b, &ps);
            for (int p = 0; p < NPOINTS; p++) {
                if (only && point_ids[p] != only) continue;
                for (int i = 0; i < 20; i++) call(&b, point_ids[p]); /* warm */
                double c0 = proc_cpu_ns(ps.pid), t0 = psc_now(), t1 = t0;
                size_t calls = 0;
                while (t1 - t0 < secs) {
                    call(&b, point_ids[p]);
                    calls++;
                    t1 = psc_now();
                }
                cpu[k][p][r] = (proc_cpu_ns(ps.pid) - c0) / 1e3 / (double)calls;
                wall[k][p][r] = (t1 - t0) * 1e6 / (double)calls;
            }
            bench_close(&b);
            it_stop(&ps);
        }
    printf("bench_batch: a Batch of n ids pushed to and n pulled from each of \"emb\" (dim 8, Adam) and \"wide\"\n"
           "(dim 1, FTRL), 1 ps_server, 1 client, working set 2^18 rows; the PS's CPU us per call (all threads),\n"
           "best and mean of %d rounds of %.2f s; the client's wall us per call (best)\n",
           rounds, secs);
    for (int k = 0; k < nbins; k++) {
        printf("%s\n%8s %12s %12s %12s %14s\n", bins[k], "ids", "ps us best", "ps us mean", "wall us", "ps us/id best");
        for (int p = 0; p < NPOINTS; p++) {
            double best = 1e30, mean = 0, wbest = 1e30;
            for (int r = 0; r < rounds; r++) {
                best = fmin(best, cpu[k][p][r]);
                wbest = fmin(wbest, wall[k][p][r]);
                mean += cpu[k][p][r] / rounds;
            }
            printf("%8zu %12.1f %12.1f %12.1f %14.4f\n", point_ids[p], best, mean, wbest, best / (double)point_ids[p]);
        }
    }
    for (int t = 0; t < 2; t++) {
        free(b.grads[t]);
        free(b.rows[t]);
    }
    free(b.push_ids);
    free(b.pull_ids);
    free(b.all);
    return 0;
}
