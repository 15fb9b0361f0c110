/* test_table_life — tables that live for months, with real ps_server
 * processes (sparse_table.h, "a row's life"; docs/sparse-tables.md):
 *
 * - TTL in global steps on 2 PS with checkpoints: rows untouched for longer
 *   than the TTL are gone from the PS (the evictor, in the background), from
 *   the next (incremental) checkpoint, which carries their tombstones, and
 *   from the restore of that checkpoint after both PS die by kill -9; an
 *   evicted row seen again starts from its initial values.
 * - A cap of M rows over 3 PS holds after every push while 10 M distinct ids
 *   stream through.
 * - Admission with min_count 3: an id pushed twice has no row, and its two
 *   gradient rows are counted as dropped; a pull reads its initial values;
 *   the third push creates it, with that push applied.
 */
#include "sparse_fixture.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define DIM 4
#define TTL_JOB "00000000000071fe"

static const psc_initializer_t init = {PSC_INIT_UNIFORM, -0.05f, 0.05f};

/* Pushes gradient g (every element) for each id. */
static void push_g(job_t *j, const int64_t *ids, size_t n, float g)
{
    float *grads = malloc(n * DIM * sizeof *grads);
    for (size_t k = 0; k < n * DIM; k++) grads[k] = g;
    ps_sparse_op_t op = {.table = 0, .push_ids = ids, .push_grads = grads, .npush = n};
    char err[512];
    if (ps_client_sparse(j->pc, &op, 1, err, sizeof err)) fail_msg("sparse push: %s", err);
    free(grads);
}

static void pull_rows(job_t *j, const int64_t *ids, size_t n, float *rows, int read_only)
{
    ps_sparse_op_t op = {.table = 0, .pull_ids = ids, .pull_rows = rows, .npull = n, .read_only = read_only};
    char err[512];
    if (ps_client_sparse(j->pc, &op, 1, err, sizeof err)) fail_msg("sparse pull: %s", err);
}

/* global_step += k (one Push of a zero gradient each): the client sends the
 * newest step it saw with its sparse calls, the rows' clock. */
static int64_t advance(job_t *j, int k)
{
    float g[4] = {0};
    int64_t gs = 0;
    char err[512];
    for (int i = 0; i < k; i++)
        if (ps_client_push(j->pc, g, 1, &gs, err, sizeof err)) fail_msg("push: %s", err);
    return gs;
}

/* Table 0's part on PS p, from Status. */
static void part_status(job_t *j, int p, uint64_t *rows, uint64_t *evicted, uint64_t *dropped)
{
    ps_status_t st;
    char err[512];
    if (ps_client_status(j->pc, p, &st, err, sizeof err)) fail_msg("status of ps %d: %s", p, err);
    assert_true(st.ntables >= 1);
    if (rows) *rows = st.tables[0].rows_touched;
    if (evicted) *evicted = st.tables[0].rows_evicted;
    if (dropped) *dropped = st.tables[0].rows_dropped;
}

static size_t on_part(const int64_t *ids, size_t n, int part, int nps)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ids[i] % nps == part;
    return c;
}

/* Row id's values: initial minus `minus` in every element. */
static void expect_row(const float *got, int64_t id, float minus, const char *what)
{
    float want[DIM];
    psc_table_row_init(&init, 42, psc_table_hash("life"), id, want, DIM);
    for (int k = 0; k < DIM; k++)
        if (fabsf(got[k] - (want[k] - minus)) > 1e-6f)
            fail_msg("%s: id %lld element %d is %g, want initial %g - %g", what, (long long)id, k, got[k], want[k],
                     minus);
}

static void test_ttl_checkpoint_kill9(void **state)
{
    (void)state;
    it_proc_t cp[2];
    char dirs[2][64];
    start_ckpt_ps(cp, dirs, 2);
    psc_table_spec_t t = table("life", ROWS, DIM, PSC_PART_MOD, &sgd1);
    t.ttl_steps = 5;
    job_t j;
    job_open_on(&j, cp, 2, &t, 1, &sgd1, TTL_JOB, 1, 0, 0);
    enum { NA = 200, NB = 100 };
    int64_t A[NA], B[NB];
    for (int i = 0; i < NA; i++) A[i] = (int64_t)i * 7777 + 3;
    for (int i = 0; i < NB; i++) B[i] = (int64_t)i * 7777 + 5;
    char err[512];
    int64_t step = 0;
    push_g(&j, A, NA, 1.0f);
    push_g(&j, B, NB, 1.0f);
    advance(&j, 1);
    assert_int_equal(ps_client_ckpt_save(j.pc, TTL_JOB, 1, 0, 5, &step, err, sizeof err), 0);
    for (int s = 0; s < 10; s++) { /* B is updated at every step, A never again */
        advance(&j, 1);
        push_g(&j, B, NB, 1.0f);
    }
    /* the evictor (a pass every 0.5 s for a TTL in steps) removes A */
    uint64_t rows[2] = {0}, evicted[2] = {0};
    for (int tries = 0; tries < 100; tries++) {
        part_status(&j, 0, &rows[0], &evicted[0], NULL);
        part_status(&j, 1, &rows[1], &evicted[1], NULL);
        if (rows[0] + rows[1] == NB) break;
        usleep(100 * 1000);
    }
    for (int p = 0; p < 2; p++) {
        assert_int_equal(rows[p], on_part(B, NB, p, 2));
        assert_int_equal(evicted[p], on_part(A, NA, p, 2));
    }
    /* the next checkpoint is a delta: B's rows and A's tombstones */
    assert_int_equal(ps_client_ckpt_save(j.pc, TTL_JOB, 2, 0, 5, &step, err, sizeof err), 0);
    /* one evicted row seen again (after the checkpoint): from its initial values */
    float row[DIM];
    push_g(&j, &A[0], 1, 0.5f);
    pull_rows(&j, &A[0], 1, row, 1);
    expect_row(row, A[0], 0.5f, "evicted, pushed again");
    job_close(&j);

    for (int i = 0; i < 2; i++) {
        kill(cp[i].pid, SIGKILL);
        waitpid(cp[i].pid, NULL, 0);
        assert_int_equal(it_start_ps_ex(&cp[i], 1, dirs[i]), 0);
    }
    job_open_on(&j, cp, 2, &t, 1, &sgd1, TTL_JOB, 0, 0, 0);
    ps_model_origin_t origin;
    float w0[4] = {0};
    assert_int_equal(ps_client_create_model(j.pc, TTL_JOB, &sgd1, w0, &origin, err, sizeof err), 0);
    assert_true(origin.restored);
    assert_int_equal(origin.ckpt_id, 2);
    for (int p = 0; p < 2; p++) { /* the restore brings back B, not A */
        part_status(&j, p, &rows[p], NULL, NULL);
        assert_int_equal(rows[p], on_part(B, NB, p, 2));
    }
    float got[NA * DIM];
    pull_rows(&j, A, NA, got, 1);
    for (int i = 0; i < NA; i++) expect_row(got + i * DIM, A[i], 0.0f, "evicted before the checkpoint");
    pull_rows(&j, B, NB, got, 1);
    for (int i = 0; i < NB; i++) expect_row(got + i * DIM, B[i], 11.0f, "kept (11 pushes of 1)");
    job_close(&j);
    stop_ckpt_ps(cp, dirs, 2);
}

static void test_cap_holds(void **state)
{
    (void)state;
    enum { M = 3 * 1024, BATCH = 512, TOTAL = 10 * M };
    release_all(NPS);
    psc_table_spec_t t = table("life", ROWS, DIM, PSC_PART_MOD, &sgd1);
    t.max_rows = M;
    job_t j;
    job_open(&j, NPS, &t, 1, &sgd1, "000000000000ca90", 1);
    int64_t ids[BATCH];
    uint64_t most = 0, total = 0, evicted = 0;
    for (int b = 0; b < TOTAL / BATCH; b++) {
        for (int i = 0; i < BATCH; i++) ids[i] = (int64_t)(b * BATCH + i) * 104729 + 11;
        advance(&j, 1);
        push_g(&j, ids, BATCH, 0.1f);
        total = evicted = 0;
        for (int p = 0; p < NPS; p++) {
            uint64_t r, e;
            part_status(&j, p, &r, &e, NULL);
            total += r;
            evicted += e;
        }
        if (total > M) fail_msg("after push %d: %llu rows, cap %d", b, (unsigned long long)total, M);
        assert_int_equal(total + evicted, (uint64_t)(b + 1) * BATCH);
        most = PSC_MAX(most, total);
    }
    printf("cap %d: %d distinct ids streamed, at most %llu rows after a push, %llu evicted\n", M, TOTAL,
           (unsigned long long)most, (unsigned long long)evicted);
    assert_true(most >= M / 2);
    job_close(&j);
    release_all(NPS);
}

static void test_admission_min_count(void **state)
{
    (void)state;
    release_all(NPS);
    psc_table_spec_t t = table("life", ROWS, DIM, PSC_PART_MOD, &sgd1);
    t.min_count = 3;
    job_t j;
    job_open(&j, NPS, &t, 1, &sgd1, "000000000000ad31", 1);
    int64_t id = 123456789;
    int p = (int)(id % NPS);
    float row[DIM];
    uint64_t rows, dropped;
    push_g(&j, &id, 1, 1.0f);
    push_g(&j, &id, 1, 1.0f);
    part_status(&j, p, &rows, NULL, &dropped);
    assert_int_equal(rows, 0);
    assert_int_equal(dropped, 2);
    pull_rows(&j, &id, 1, row, 0); /* a training pull: initial values, no row */
    expect_row(row, id, 0.0f, "pushed twice");
    part_status(&j, p, &rows, NULL, NULL);
    assert_int_equal(rows, 0);
    push_g(&j, &id, 1, 1.0f);
    part_status(&j, p, &rows, NULL, &dropped);
    assert_int_equal(rows, 1);
    assert_int_equal(dropped, 2);
    pull_rows(&j, &id, 1, row, 0);
    expect_row(row, id, 1.0f, "the third push creates it, applied");
    job_close(&j);
    release_all(NPS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ttl_checkpoint_kill9),
        cmocka_unit_test(test_cap_holds),
        cmocka_unit_test(test_admission_min_count),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
