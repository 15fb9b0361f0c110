/* sparse_fixture.h — what the sparse-table integration tests share
 * (test_sparse.c, test_sparse_bad.c): NPS real ps_server processes started
 * before the tests and stopped after them, and a job on the first nps of them
 * driven by a ps_client of this process. Include once, in a test file. */
#ifndef PSC_SPARSE_FIXTURE_H
#define PSC_SPARSE_FIXTURE_H

#include "it_util.h"
#include "optim_pb.h"
#include "placement.h"
#include "ps_client.h"
#include "psc.pb-c.h"
#include "rng.h"
#include "table.h"
#include "wire.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#define NPS 3
#define ROWS ((int64_t)1 << 40)


static it_proc_t ps[NPS];

__attribute__((unused)) static int setup(void **state)
{
    (void)state;
    for (int i = 0; i < NPS; i++)
        if (it_start_ps(&ps[i])) {
            it_dump_log(&ps[i]);
            return -1;
        }
    return 0;
}

__attribute__((unused)) static int teardown(void **state)
{
    (void)state;
    int rc = 0;
    for (int i = 0; i < NPS; i++)
        if (it_stop(&ps[i]) != 0) {
            it_dump_log(&ps[i]);
            rc = -1;
        }
    return rc;
}

/* A job on the first nps PS: global_step and a dense "w" of 4 floats (round
 * robin: global_step on ps 0, w on ps 1 % nps) and the given tables, table t's
 * part k on ps k. */
typedef struct job {
    psc_cluster_t cl;
    psc_var_desc_t vars[2];
    psc_placed_var_t *placed;
    int nplaced, nps;
    ps_client_t *pc;
} job_t;

__attribute__((unused)) static void job_open_on(job_t *j, it_proc_t *procs, int nps, const psc_table_spec_t *tables, int ntables,
                        const psc_optim_config_t *opt, const char *job_id, int create, int rank, int sync_replicas)
{
    memset(j, 0, sizeof *j);
    j->nps = nps;
    j->cl.n[PSC_JOB_PS] = nps;
    j->cl.addr[PSC_JOB_PS] = calloc((size_t)nps, sizeof(char *));
    for (int i = 0; i < nps; i++) j->cl.addr[PSC_JOB_PS][i] = procs[i].addr;
    snprintf(j->vars[0].name, sizeof j->vars[0].name, "global_step");
    j->vars[0].numel = 1;
    j->vars[0].is_step = 1;
    j->vars[0].layer = -1;
    snprintf(j->vars[1].name, sizeof j->vars[1].name, "w");
    j->vars[1].rank = 1;
    j->vars[1].shape[0] = 4;
    j->vars[1].numel = 4;
    char err[512];
    assert_int_equal(psc_place(j->vars, 2, nps, PSC_PLACE_ROUND_ROBIN, 0, &j->placed, &j->nplaced, err, sizeof err), 0);
    j->pc = ps_client_create(&j->cl, j->vars, 2, j->placed, j->nplaced, rank, 30000);
    if (sync_replicas) ps_client_set_sync(j->pc, sync_replicas, sync_replicas, 30);
    int part_ps[8 * NPS];
    for (int t = 0; t < ntables; t++)
        for (int k = 0; k < nps; k++) part_ps[t * nps + k] = k;
    ps_client_set_tables(j->pc, tables, ntables, part_ps, 42);
    if (!create) return;
    float w0[4] = {0, 0, 0, 0};
    ps_model_origin_t origin;
    int rc = ps_client_create_model(j->pc, job_id, opt, w0, &origin, err, sizeof err);
    if (rc) fprintf(stderr, "create: %s\n", err);
    assert_int_equal(rc, 0);
}

__attribute__((unused)) static void job_open(job_t *j, int nps, const psc_table_spec_t *tables, int ntables, const psc_optim_config_t *opt,
                     const char *job_id, int create)
{
    job_open_on(j, ps, nps, tables, ntables, opt, job_id, create, 0, 0);
}

__attribute__((unused)) static void job_close(job_t *j)
{
    ps_client_destroy(j->pc);
    free(j->placed);
    free(j->cl.addr[PSC_JOB_PS]);
}

/* Drops whatever job the first n PS hold. */
__attribute__((unused)) static void release_all(int n)
{
    Psc__ReleaseRequest r = PSC__RELEASE_REQUEST__INIT;
    r.job_id = "";
    uint8_t buf[32];
    size_t len = psc__release_request__pack(&r, buf);
    for (int i = 0; i < n; i++) {
        psc_rpc_channel_t *ch = psc_rpc_channel_create(ps[i].addr);
        psc_rpc_op_t op;
        assert_int_equal(psc_rpc_call(ch, PSC_M_RELEASE, buf, len, 5000, 0, &op), 0);
        psc_rpc_op_clear(&op);
        psc_rpc_channel_destroy(ch);
    }
}

__attribute__((unused)) static psc_table_spec_t table(const char *name, int64_t rows, int dim, enum psc_partition part,
                              const psc_optim_config_t *opt)
{
    psc_table_spec_t t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "%s", name);
    t.rows = rows;
    t.dim = dim;
    t.partition = part;
    t.init.kind = PSC_INIT_UNIFORM;
    t.init.a = -0.05f;
    t.init.b = 0.05f;
    t.optimizer = *opt;
    return t;
}

static const psc_optim_config_t sgd1 = {.kind = PSC_OPT_SGD, .learning_rate = 1.0f};

/* n more ps_servers, each with a --checkpoint_dir of its own under /tmp (dirs[i]). */
__attribute__((unused)) static void start_ckpt_ps(it_proc_t *cp, char (*dirs)[64], int n)
{
    for (int i = 0; i < n; i++) {
        snprintf(dirs[i], sizeof dirs[i], "/tmp/psc-sparse-ckpt-XXXXXX");
        assert_non_null(mkdtemp(dirs[i]));
        assert_int_equal(it_start_ps_ex(&cp[i], 0, dirs[i]), 0);
    }
}

/* Stops them (their logs shown if one fails) and removes their folders. */
__attribute__((unused)) static void stop_ckpt_ps(it_proc_t *cp, char (*dirs)[64], int n)
{
    for (int i = 0; i < n; i++) {
        if (it_stop(&cp[i]) != 0) it_dump_log(&cp[i]);
        char cmd[96];
        snprintf(cmd, sizeof cmd, "rm -rf %.64s", dirs[i]);
        assert_int_equal(system(cmd), 0);
    }
}

#endif
