/* test_sparse — sparse embedding tables on real ps_server processes, driven by
 * ps_clients (the worker's client) in this process: two threads stand for two
 * workers, each with its own client and channels.
 *   - a row's initial value is the same with 1, 2 and 3 PS and both partition
 *     strategies, and equals psc_table_row_init(seed, table, id);
 *   - 2 PS + 2 concurrent clients push and pull rows of a 2^40-row table
 *     (SGD, zeros initializer, every gradient row 1/64, so every value is an
 *     exact multiple of 1/64 whatever the order): each row ends at -count/64
 *     where count is how often the two clients pushed its id, duplicates in
 *     one push included (summed by the client); rows touched = ids seen;
 *   - the PS's resident memory grows by at most 2x the touched rows' bytes
 *     plus a fixed 24 MiB when 200,000 rows of a 2^40-row table are touched
 *     (not under AddressSanitizer, whose allocator keeps more);
 *   - learning-rate schedules are evaluated on the PS at the sender's
 *     global_step, for a dense variable on a PS without global_step and for a
 *     table;
 *   - sparse items riding on a dense push-pull round (ps_client_round_sparse):
 *     each PS's items in its Batch with the dense pieces, applied before its
 *     pulls, the round's step counted once; only PS without a dense Batch get
 *     calls of their own; the next round carries nothing sparse;
 *   - sync replicas (SparseConditionalAccumulator): 2 replicas x 32 examples
 *     give the rows 1 replica x 64 gives, within 1e-5, after 5 Adam steps;
 *   - incremental checkpoints: a base, then deltas of exactly the rows pushed
 *     since; kill -9 of a PS after more pushes, restart: the chief restores
 *     the last checkpoint on both PS and exactly its rows come back,
 *     bit-exact (the later rows start afresh); the next checkpoint is a base;
 *   - bad input and refused Creates: test_sparse_bad.c.
 * The processes and the job helpers: sparse_fixture.h.
 */
#include "sparse_fixture.h"

#include <math.h>
#include <pthread.h>

/* Under AddressSanitizer (make sanitize) the daemons' RSS holds the
 * allocator's shadow and quarantine too: the RSS bound is not checked there
 * (the table's own byte count still is). */
#if defined(__SANITIZE_ADDRESS__)
#define RSS_CHECKED 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define RSS_CHECKED 0
#endif
#endif
#ifndef RSS_CHECKED
#define RSS_CHECKED 1
#endif

static void test_init_independent_of_ps(void **state)
{
    (void)state;
    const int64_t ids[] = {0, 1, 2, 5, 7, 1000003, ROWS / 2, ROWS / 3 + 1, ROWS - 2, ROWS - 1};
    const int n = (int)PSC_ARRAY_LEN(ids), dim = 8;
    float want[PSC_ARRAY_LEN(ids)][8], got[PSC_ARRAY_LEN(ids)][8];
    psc_initializer_t init = {PSC_INIT_UNIFORM, -0.05f, 0.05f};
    for (int i = 0; i < n; i++) psc_table_row_init(&init, 42, psc_table_hash("emb"), ids[i], want[i], dim);
    for (int nps = 1; nps <= NPS; nps++)
        for (int part = PSC_PART_MOD; part <= PSC_PART_DIV; part++) {
            psc_table_spec_t t = table("emb", ROWS, dim, (enum psc_partition)part, &sgd1);
            job_t j;
            job_open(&j, nps, &t, 1, &sgd1, "00000000000000c1", 1);
            char err[512];
            ps_sparse_op_t op = {.table = 0, .pull_ids = ids, .pull_rows = &got[0][0], .npull = (size_t)n};
            int rc = ps_client_sparse(j.pc, &op, 1, err, sizeof err);
            if (rc) fprintf(stderr, "%d ps, %s: %s\n", nps, psc_partition_name((enum psc_partition)part), err);
            assert_int_equal(rc, 0);
            assert_memory_equal(got, want, sizeof got);
            /* rows appear only when touched: exactly the pulled ids exist */
            uint64_t touched = 0;
            for (int i = 0; i < nps; i++) {
                ps_status_t st;
                assert_int_equal(ps_client_status(j.pc, i, &st, err, sizeof err), 0);
                assert_int_equal(st.ntables, 1);
                touched += st.tables[0].rows_touched;
            }
            assert_int_equal(touched, (uint64_t)n);
            job_close(&j);
            release_all(nps);
        }
}

/* ---- two concurrent clients ---- */

#define POOL 5000
#define ROUNDS 40
#define PER_ROUND 600
#define DIM 16

typedef struct worker_arg {
    int seed;
    int64_t *pool;
    int counts[POOL]; /* pushes of each pool id by this worker */
    int rc;
    char err[512];
} worker_arg_t;

static void *worker_main(void *p)
{
    worker_arg_t *a = p;
    psc_optim_config_t sgd = sgd1;
    psc_table_spec_t t = table("big", ROWS, DIM, PSC_PART_MOD, &sgd);
    t.init.kind = PSC_INIT_ZEROS;
    job_t j;
    job_open(&j, 2, &t, 1, &sgd, "00000000000000c2", 0);
    psc_rng_t rng;
    psc_rng_seed(&rng, (uint64_t)a->seed);
    int64_t *ids = malloc(PER_ROUND * sizeof *ids);
    float *g = malloc(PER_ROUND * DIM * sizeof *g), *rows = malloc(PER_ROUND * DIM * sizeof *rows);
    for (int i = 0; i < PER_ROUND * DIM; i++) g[i] = 1.0f / 64;
    for (int r = 0; r < ROUNDS && !a->rc; r++) {
        for (int i = 0; i < PER_ROUND; i++) {
            /* a few hot ids repeat within a push (summed by the client) */
            int k = i % 10 == 0 ? (int)psc_rng_below(&rng, 20) : (int)psc_rng_below(&rng, POOL);
            ids[i] = a->pool[k];
            a->counts[k]++;
        }
        ps_sparse_op_t op = {.table = 0,
                             .push_ids = ids,
                             .push_grads = g,
                             .npush = PER_ROUND,
                             .pull_ids = ids,
                             .pull_rows = rows,
                             .npull = PER_ROUND};
        a->rc = ps_client_sparse(j.pc, &op, 1, a->err, sizeof a->err);
        for (int i = 0; !a->rc && i < PER_ROUND * DIM; i++)
            if (!(rows[i] < 0)) a->rc = psc_seterr(a->err, sizeof a->err, PSC_EINVAL, "row not updated: %g", rows[i]);
    }
    free(ids);
    free(g);
    free(rows);
    job_close(&j);
    return NULL;
}

static void test_two_workers_big_table(void **state)
{
    (void)state;
    psc_optim_config_t sgd = sgd1;
    psc_table_spec_t t = table("big", ROWS, DIM, PSC_PART_MOD, &sgd);
    t.init.kind = PSC_INIT_ZEROS;
    job_t chief;
    job_open(&chief, 2, &t, 1, &sgd, "00000000000000c2", 1);
    int64_t *pool = malloc(POOL * sizeof *pool);
    psc_rng_t rng;
    psc_rng_seed(&rng, 5);
    for (int i = 0; i < POOL; i++) pool[i] = (int64_t)(psc_rng_next(&rng) & (uint64_t)(ROWS - 1)); /* whole range */
    pool[0] = 0;
    pool[1] = ROWS - 1;
    worker_arg_t *a = calloc(2, sizeof *a);
    pthread_t th[2];
    for (int w = 0; w < 2; w++) {
        a[w].seed = 100 + w;
        a[w].pool = pool;
        assert_int_equal(pthread_create(&th[w], NULL, worker_main, &a[w]), 0);
    }
    for (int w = 0; w < 2; w++) {
        pthread_join(th[w], NULL);
        if (a[w].rc) fprintf(stderr, "worker %d: %s\n", w, a[w].err);
        assert_int_equal(a[w].rc, 0);
    }
    float *rows = malloc((size_t)POOL * DIM * sizeof *rows);
    char err[512];
    ps_sparse_op_t op = {.table = 0, .pull_ids = pool, .pull_rows = rows, .npull = POOL};
    assert_int_equal(ps_client_sparse(chief.pc, &op, 1, err, sizeof err), 0);
    /* pool ids may repeat (random): count per distinct id */
    uint64_t distinct = 0;
    for (int i = 0; i < POOL; i++) {
        int total = 0, first = 1;
        for (int k = 0; k < POOL; k++)
            if (pool[k] == pool[i]) {
                total += a[0].counts[k] + a[1].counts[k];
                if (k < i) first = 0;
            }
        distinct += first && total > 0;
        for (int d = 0; d < DIM; d++) assert_true(rows[(size_t)i * DIM + d] == -(float)total / 64);
    }
    uint64_t touched = 0;
    for (int i = 0; i < 2; i++) {
        ps_status_t st;
        assert_int_equal(ps_client_status(chief.pc, i, &st, err, sizeof err), 0);
        touched += st.tables[0].rows_touched;
        assert_int_equal(st.tables[0].rows, ROWS);
        assert_true(st.tables[0].version >= ROUNDS); /* every round pushed rows to both parts */
    }
    /* the final pull touched the pool ids nobody pushed too */
    uint64_t pool_distinct = 0;
    for (int i = 0; i < POOL; i++) {
        int first = 1;
        for (int k = 0; k < i && first; k++) first = pool[k] != pool[i];
        pool_distinct += first;
    }
    assert_int_equal(touched, pool_distinct);
    assert_true(distinct > POOL / 2);
    printf("2 clients x %d rounds x %d ids: %llu distinct rows pushed, %llu touched on the PS\n", ROUNDS, PER_ROUND,
           (unsigned long long)distinct, (unsigned long long)touched);
    free(rows);
    free(a);
    free(pool);
    job_close(&chief);
    release_all(2);
}

/* ---- memory ---- */

static long rss_kib(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld", &kib) == 1) break;
    if (f) fclose(f);
    return kib;
}

static void test_memory_bound(void **state)
{
    (void)state;
    psc_optim_config_t adagrad = {.kind = PSC_OPT_ADAGRAD, .learning_rate = 0.1f, .initial_accumulator_value = 0.1f};
    psc_table_spec_t t = table("mem", ROWS, 32, PSC_PART_MOD, &adagrad);
    job_t j;
    job_open(&j, 2, &t, 1, &adagrad, "00000000000000c3", 1);
    long base[2] = {rss_kib(ps[0].pid), rss_kib(ps[1].pid)};
    const size_t total = 200000, per = 4096;
    int64_t *ids = malloc(per * sizeof *ids);
    float *rows = malloc(per * 32 * sizeof *rows);
    psc_rng_t rng;
    psc_rng_seed(&rng, 9);
    char err[512];
    for (size_t done = 0; done < total; done += per) {
        size_t n = PSC_MIN(per, total - done);
        for (size_t i = 0; i < n; i++) ids[i] = (int64_t)((done + i) * 5497558139ULL % (uint64_t)ROWS); /* distinct */
        ps_sparse_op_t op = {.table = 0, .pull_ids = ids, .pull_rows = rows, .npull = n};
        assert_int_equal(ps_client_sparse(j.pc, &op, 1, err, sizeof err), 0);
    }
    const double record = 8 + 4.0 * 32 * 2; /* t, value, Adagrad accumulator */
    for (int i = 0; i < 2; i++) {
        ps_status_t st;
        assert_int_equal(ps_client_status(j.pc, i, &st, err, sizeof err), 0);
        double touched = (double)st.tables[0].rows_touched * record;
        long grown = rss_kib(ps[i].pid) - base[i];
        printf("ps %d: %llu rows touched (%.1f MiB of records), table bytes %.1f MiB, RSS grew %.1f MiB\n", i,
               (unsigned long long)st.tables[0].rows_touched, touched / 1048576, (double)st.tables[0].bytes / 1048576,
               (double)grown / 1024);
        assert_true(st.tables[0].rows_touched > total / 3);
        assert_true((double)st.tables[0].bytes <= 2 * touched + 4 * 1048576.0);
        if (RSS_CHECKED) assert_true((double)grown * 1024 <= 2 * touched + 24 * 1048576.0);
    }
    free(ids);
    free(rows);
    job_close(&j);
    release_all(2);
}

/* ---- learning-rate schedules ---- */

static void test_schedules(void **state)
{
    (void)state;
    /* dense w on ps 1, global_step on ps 0: w's PS learns the step from the pushes */
    psc_optim_config_t piece = {.kind = PSC_OPT_SGD, .learning_rate = 1.0f};
    piece.schedule.kind = PSC_LR_PIECEWISE;
    piece.schedule.nboundaries = 1;
    piece.schedule.boundaries[0] = 2;
    piece.schedule.values[0] = 1.0f;
    piece.schedule.values[1] = 0.5f;
    /* the table: exponential_decay, staircase, halving every step */
    psc_optim_config_t expo = {.kind = PSC_OPT_SGD, .learning_rate = 1.0f};
    expo.schedule.kind = PSC_LR_EXPONENTIAL;
    expo.schedule.decay_steps = 1;
    expo.schedule.decay_rate = 0.5f;
    expo.schedule.staircase = 1;
    psc_table_spec_t t = table("sched", 100, 2, PSC_PART_MOD, &expo);
    t.init.kind = PSC_INIT_ZEROS;
    job_t j;
    job_open(&j, 2, &t, 1, &piece, "00000000000000c4", 1);
    char err[512];
    float g[4] = {1, 1, 1, 1}, w[4];
    const int64_t id = 7;
    const float row_g[2] = {1, 1};
    float row[2];
    int64_t gs = 0;
    double want_w = 0, want_row = 0;
    for (int r = 0; r < 5; r++) {
        /* the sparse push goes with the step this client knows (gs), as the dense one */
        ps_sparse_op_t op = {.table = 0, .push_ids = &id, .push_grads = row_g, .npush = 1};
        assert_int_equal(ps_client_sparse(j.pc, &op, 1, err, sizeof err), 0);
        want_row -= psc_lr_at(&expo.schedule, 1.0, gs);
        assert_int_equal(ps_client_push_pull(j.pc, g, w, 1, &gs, err, sizeof err), 0);
        want_w -= psc_lr_at(&piece.schedule, 1.0, r); /* applied at the step before this round's increment */
        assert_int_equal(gs, r + 1);
        assert_true(fabs(w[0] - want_w) < 1e-6);
    }
    assert_true(fabs(want_w - (-4.0)) < 1e-9); /* 1 + 1 + 1 + 0.5 + 0.5 */
    ps_sparse_op_t pull = {.table = 0, .pull_ids = &id, .pull_rows = row, .npull = 1};
    assert_int_equal(ps_client_sparse(j.pc, &pull, 1, err, sizeof err), 0);
    assert_true(fabs(row[0] - want_row) < 1e-6);
    assert_true(fabs(want_row - (-1.9375)) < 1e-9); /* 1 + 1/2 + 1/4 + 1/8 + 1/16 */
    job_close(&j);
    release_all(2);
}

/* ---- sparse items riding on the dense round's Batches ---- */

static void test_sparse_in_dense_round(void **state)
{
    (void)state;
    psc_table_spec_t t = table("ride", ROWS, 4, PSC_PART_MOD, &sgd1);
    t.init.kind = PSC_INIT_ZEROS;
    job_t j;
    job_open(&j, 2, &t, 1, &sgd1, "00000000000000c8", 1);
    int dense_calls = ps_client_batch_calls(j.pc, NULL);
    const int64_t ids[5] = {1, 2, 2, ROWS - 1, 40}; /* both parts, a repeat */
    float g[20], rows[20], w[4], gw[4] = {0.5f, 0.5f, 0.5f, 0.5f};
    for (int i = 0; i < 20; i++) g[i] = 1.0f / 64;
    char err[512];
    int64_t gs = 0;
    ps_sparse_stats_t st;
    for (int r = 1; r <= 3; r++) {
        ps_sparse_op_t op = {.table = 0, .push_ids = ids, .push_grads = g, .npush = 5, .pull_ids = ids,
                             .pull_rows = rows, .npull = 5, .stats = &st};
        ps_client_round_sparse(j.pc, &op, 1);
        assert_int_equal(ps_client_push_pull(j.pc, gw, w, 1, &gs, err, sizeof err), 0);
        assert_int_equal(gs, r);
        assert_true(w[0] == -0.5f * (float)r); /* the dense part of the round */
        /* the rows after this round's push, pulled in the same round: id 2 twice a round */
        for (int i = 0; i < 5; i++)
            for (int d = 0; d < 4; d++) assert_true(rows[4 * i + d] == -(float)(r * (ids[i] == 2 ? 2 : 1)) / 64);
        /* each PS with a dense Batch carried its items: only the others made calls of their own */
        assert_int_equal(st.calls, (size_t)(2 - dense_calls));
        assert_int_equal(st.unique_push, 4);
    }
    printf("sparse items in a dense round: %d dense Batch calls carried them, %zu calls of their own\n", dense_calls,
           st.calls);
    /* one round only: the next carries nothing sparse */
    assert_int_equal(ps_client_push_pull(j.pc, gw, w, 1, &gs, err, sizeof err), 0);
    ps_sparse_op_t pull = {.table = 0, .pull_ids = ids, .pull_rows = rows, .npull = 5};
    assert_int_equal(ps_client_sparse(j.pc, &pull, 1, err, sizeof err), 0);
    assert_true(rows[0] == -3.0f / 64 && rows[4] == -6.0f / 64);
    job_close(&j);
    release_all(2);
}

/* ---- sync replicas: SparseConditionalAccumulator ---- */

#define SYNC_STEPS 5
#define SYNC_BATCH 64
#define SYNC_POOL 50
#define SYNC_DIM 8

/* Example e of step t: 3 ids from a pool of 50 (so replicas share rows) and
 * its gradient rows, the same in every run. */
static void example(int t, int e, int64_t ids[3], float g[3][SYNC_DIM])
{
    psc_rng_t rng;
    psc_rng_seed(&rng, (uint64_t)(t * 1000 + e));
    for (int k = 0; k < 3; k++) {
        ids[k] = (int64_t)psc_rng_below(&rng, SYNC_POOL) * 7919; /* spread over the table */
        for (int d = 0; d < SYNC_DIM; d++) g[k][d] = (float)psc_rng_uniform(&rng) - 0.5f;
    }
}

typedef struct sync_arg {
    int rank, replicas;
    int rc;
    char err[512];
} sync_arg_t;

static const psc_optim_config_t sync_adam = {
    .kind = PSC_OPT_ADAM, .learning_rate = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .epsilon = 1e-7f};

/* One replica of a sync job: each step, the sparse push of its examples'
 * rows (the batch's mean: each row / its examples), then the dense sync step
 * (waits for every replica), then the pull of the next step's rows. */
static void *sync_replica(void *p)
{
    sync_arg_t *a = p;
    psc_table_spec_t t = table("emb", (int64_t)1 << 30, SYNC_DIM, PSC_PART_MOD, &sync_adam);
    job_t j;
    job_open_on(&j, ps, 2, &t, 1, &sync_adam, "00000000000000c6", a->rank == 0, a->rank, a->replicas);
    if (a->rank) a->rc = ps_client_wait_ready(j.pc, "00000000000000c6", 30, NULL, a->err, sizeof a->err);
    int per = SYNC_BATCH / a->replicas;
    int64_t ids[SYNC_BATCH * 3];
    float g[SYNC_BATCH * 3][SYNC_DIM], rows[SYNC_BATCH * 3][SYNC_DIM], w[4], zero[4] = {0};
    for (int step = 0; step < SYNC_STEPS && !a->rc; step++) {
        ps_client_set_progress(j.pc, step);
        for (int e = 0; e < per; e++) {
            example(step, a->rank * per + e, &ids[3 * e], &g[3 * e]);
            for (int k = 0; k < 3; k++)
                for (int d = 0; d < SYNC_DIM; d++) g[3 * e + k][d] /= (float)per;
        }
        ps_sparse_op_t push = {.table = 0, .push_ids = ids, .push_grads = &g[0][0], .npush = (size_t)per * 3};
        a->rc = ps_client_sparse_sync(j.pc, &push, 1, step, 1, 0, a->err, sizeof a->err);
        int64_t gs = 0;
        int stale = 0;
        if (!a->rc) a->rc = ps_client_push_pull_sync(j.pc, zero, w, step, 1, &gs, &stale, a->err, sizeof a->err);
        if (!a->rc && stale) a->rc = psc_seterr(a->err, sizeof a->err, PSC_ESTALE, "step %d was stale", step);
        ps_sparse_op_t pull = {.table = 0, .pull_ids = ids, .pull_rows = &rows[0][0], .npull = (size_t)per * 3};
        if (!a->rc) a->rc = ps_client_sparse_sync(j.pc, &pull, 1, step, 1, step + 1, a->err, sizeof a->err);
    }
    job_close(&j);
    return NULL;
}

/* The rows of the pool after a sync run with `replicas` replicas. */
static void sync_run(int replicas, float out[SYNC_POOL][SYNC_DIM])
{
    sync_arg_t a[2] = {{.rank = 0, .replicas = replicas}, {.rank = 1, .replicas = replicas}};
    pthread_t th[2];
    for (int r = 0; r < replicas; r++) assert_int_equal(pthread_create(&th[r], NULL, sync_replica, &a[r]), 0);
    for (int r = 0; r < replicas; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < replicas; r++) {
        if (a[r].rc) fprintf(stderr, "replica %d of %d: %s\n", r, replicas, a[r].err);
        assert_int_equal(a[r].rc, 0);
    }
    psc_table_spec_t t = table("emb", (int64_t)1 << 30, SYNC_DIM, PSC_PART_MOD, &sync_adam);
    job_t j;
    job_open_on(&j, ps, 2, &t, 1, &sync_adam, "00000000000000c6", 0, 0, replicas);
    int64_t ids[SYNC_POOL];
    for (int i = 0; i < SYNC_POOL; i++) ids[i] = (int64_t)i * 7919;
    char err[512];
    ps_sparse_op_t pull = {.table = 0, .pull_ids = ids, .pull_rows = &out[0][0], .npull = SYNC_POOL};
    assert_int_equal(ps_client_sparse_sync(j.pc, &pull, 1, SYNC_STEPS, 1, SYNC_STEPS, err, sizeof err), 0);
    job_close(&j);
    release_all(2);
}

static void test_sync_equivalence(void **state)
{
    (void)state;
    static float two[SYNC_POOL][SYNC_DIM], one[SYNC_POOL][SYNC_DIM];
    sync_run(2, two);
    sync_run(1, one);
    double worst = 0, moved = 0;
    psc_initializer_t init = {PSC_INIT_UNIFORM, -0.05f, 0.05f};
    for (int i = 0; i < SYNC_POOL; i++) {
        float w0[SYNC_DIM];
        psc_table_row_init(&init, 42, psc_table_hash("emb"), (int64_t)i * 7919, w0, SYNC_DIM);
        for (int d = 0; d < SYNC_DIM; d++) {
            worst = fmax(worst, fabs((double)two[i][d] - one[i][d]));
            moved = fmax(moved, fabs((double)one[i][d] - w0[d]));
        }
    }
    printf("sync sparse: 2 replicas x 32 vs 1 x 64 over %d steps: max |diff| %.3g (rows moved up to %.3g)\n",
           SYNC_STEPS, worst, moved);
    assert_true(moved > 0.01); /* the steps did update the rows */
    assert_true(worst <= 1e-5);
}

/* ---- incremental checkpoints, kill -9 ---- */

#define CK_JOB "00000000000000c7"
#define CK_DIM 8

/* Pushes a gradient row for each id (row k: 0.01 * (k % 7 + 1) + round). */
static void ck_push(job_t *j, const int64_t *ids, size_t n, int round)
{
    float *g = malloc(n * CK_DIM * sizeof *g);
    for (size_t k = 0; k < n * CK_DIM; k++) g[k] = 0.01f * (float)(k % 7 + 1) + 0.1f * (float)round;
    ps_sparse_op_t op = {.table = 0, .push_ids = ids, .push_grads = g, .npush = n};
    char err[512];
    assert_int_equal(ps_client_sparse(j->pc, &op, 1, err, sizeof err), 0);
    free(g);
}

static void ck_pull(job_t *j, const int64_t *ids, size_t n, float *rows)
{
    ps_sparse_op_t op = {.table = 0, .pull_ids = ids, .pull_rows = rows, .npull = n};
    char err[512];
    assert_int_equal(ps_client_sparse(j->pc, &op, 1, err, sizeof err), 0);
}

/* Checkpoint `id` of PS `addr`: its parent and table rows (ListCheckpoints). */
static void ck_info(const char *addr, uint64_t id, uint64_t *parent, uint64_t *rows)
{
    Psc__ListCheckpointsRequest r = PSC__LIST_CHECKPOINTS_REQUEST__INIT;
    r.job_id = CK_JOB;
    r.verify = 1;
    uint8_t buf[64];
    psc_rpc_channel_t *ch = psc_rpc_channel_create(addr);
    psc_rpc_op_t op;
    assert_int_equal(psc_rpc_call(ch, PSC_M_LIST_CKPT, buf, psc__list_checkpoints_request__pack(&r, buf), 10000,
                                  0, &op),
                     0);
    Psc__ListCheckpointsReply *rep = psc__list_checkpoints_reply__unpack(NULL, op.reply_len, op.reply);
    assert_non_null(rep);
    int found = 0;
    for (size_t i = 0; i < rep->n_checkpoints; i++)
        if (rep->checkpoints[i]->id == id) {
            found = 1;
            assert_true(rep->checkpoints[i]->good);
            *parent = rep->checkpoints[i]->parent;
            *rows = rep->checkpoints[i]->rows;
        }
    assert_true(found);
    psc__list_checkpoints_reply__free_unpacked(rep, NULL);
    psc_rpc_op_clear(&op);
    psc_rpc_channel_destroy(ch);
}

static size_t on_part(const int64_t *ids, size_t n, int part)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ids[i] % 2 == part;
    return c;
}

static void test_checkpoint_kill9(void **state)
{
    (void)state;
    it_proc_t cp[2];
    char dirs[2][64];
    start_ckpt_ps(cp, dirs, 2);
    psc_optim_config_t adagrad = {.kind = PSC_OPT_ADAGRAD, .learning_rate = 0.1f, .initial_accumulator_value = 0.1f};
    psc_table_spec_t t = table("ck", ROWS, CK_DIM, PSC_PART_MOD, &adagrad);
    job_t j;
    job_open_on(&j, cp, 2, &t, 1, &adagrad, CK_JOB, 1, 0, 0);
    /* A: 1000 rows (the base); B: 50 of them and 50 new; C: 50 of B's and 50 new; D: after the last checkpoint */
    enum { NA = 1000, NB = 100, NC = 100, ND = 80, NALL = NA + 50 + 50 + ND };
    int64_t all[NALL];
    for (int i = 0; i < NALL; i++) all[i] = (int64_t)i * 1099511 + 17 + (i % 3 == 0);
    const int64_t *A = all, *B = all + NA - 50, *C = all + NA, *D = all + NA + 100;
    char err[512];
    int64_t step = 0;
    ck_push(&j, A, NA, 0);
    assert_int_equal(ps_client_ckpt_save(j.pc, CK_JOB, 1, 0, 5, &step, err, sizeof err), 0);
    ck_push(&j, B, NB, 1);
    assert_int_equal(ps_client_ckpt_save(j.pc, CK_JOB, 2, 0, 5, &step, err, sizeof err), 0);
    ck_push(&j, C, NC, 2);
    assert_int_equal(ps_client_ckpt_save(j.pc, CK_JOB, 3, 0, 5, &step, err, sizeof err), 0);
    static float want[NA + 100][CK_DIM], got[NALL][CK_DIM];
    ck_pull(&j, all, NA + 100, &want[0][0]); /* the committed state: A, B, C's rows */
    for (int p = 0; p < 2; p++) { /* 1 a base, 2 and 3 deltas of exactly the rows pushed since */
        uint64_t parent = 99, rows = 0;
        ck_info(cp[p].addr, 1, &parent, &rows);
        assert_int_equal(parent, 0);
        assert_int_equal(rows, on_part(A, NA, p));
        ck_info(cp[p].addr, 2, &parent, &rows);
        assert_int_equal(parent, 1);
        assert_int_equal(rows, on_part(B, NB, p));
        ck_info(cp[p].addr, 3, &parent, &rows);
        assert_int_equal(parent, 2);
        assert_int_equal(rows, on_part(C, NC, p));
    }
    ck_push(&j, D, ND, 3); /* new rows after the last checkpoint */
    ck_push(&j, A, 200, 3);   /* and changes to committed ones */
    job_close(&j);

    kill(cp[1].pid, SIGKILL); /* ps 1 dies between checkpoints */
    waitpid(cp[1].pid, NULL, 0);
    assert_int_equal(it_start_ps_ex(&cp[1], 1, dirs[1]), 0);
    job_open_on(&j, cp, 2, &t, 1, &adagrad, CK_JOB, 0, 0, 0);
    ps_model_origin_t origin;
    float w0[4] = {0};
    assert_int_equal(ps_client_create_model(j.pc, CK_JOB, &adagrad, w0, &origin, err, sizeof err), 0);
    assert_true(origin.restored);
    assert_int_equal(origin.ckpt_id, 3);
    for (int p = 0; p < 2; p++) { /* exactly the committed rows exist, on both PS (ps 0 restored too) */
        ps_status_t st;
        assert_int_equal(ps_client_status(j.pc, p, &st, err, sizeof err), 0);
        assert_int_equal(st.tables[0].rows_touched, on_part(all, NA + 100, p));
    }
    ck_pull(&j, all, NALL, &got[0][0]);
    assert_memory_equal(got, want, sizeof want); /* bit-exact */
    psc_initializer_t init = {PSC_INIT_UNIFORM, -0.05f, 0.05f};
    for (int i = 0; i < ND; i++) { /* D's rows start afresh */
        float w[CK_DIM];
        psc_table_row_init(&init, 42, psc_table_hash("ck"), D[i], w, CK_DIM);
        assert_memory_equal(got[NA + 100 + i], w, sizeof w);
    }
    /* the first checkpoint after a restore is a full base */
    assert_int_equal(ps_client_ckpt_save(j.pc, CK_JOB, 4, 0, 5, &step, err, sizeof err), 0);
    for (int p = 0; p < 2; p++) {
        uint64_t parent = 99, rows = 0;
        ck_info(cp[p].addr, 4, &parent, &rows);
        assert_int_equal(parent, 0);
        assert_int_equal(rows, on_part(all, NALL, p));
    }
    job_close(&j);
    stop_ckpt_ps(cp, dirs, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_independent_of_ps),
        cmocka_unit_test(test_two_workers_big_table),
        cmocka_unit_test(test_memory_bound),
        cmocka_unit_test(test_schedules),
        cmocka_unit_test(test_sparse_in_dense_round),
        cmocka_unit_test(test_sync_equivalence),
        cmocka_unit_test(test_checkpoint_kill9),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
