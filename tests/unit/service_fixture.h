/* service_fixture.h — the in-process ps_server of the service tests
 * (test_service_fence, test_service_replicas, test_service_stage) and the
 * model they serve. Header-only; include it after cmocka.h. */
#ifndef PSC_TEST_SERVICE_FIXTURE_H
#define PSC_TEST_SERVICE_FIXTURE_H

#include "ckpt.h"
#include "rpc.h"
#include "service.h"
#include "store.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* A ps_server in this process: its store and service on a real RPC server at
 * 127.0.0.1:<a free port> with 2 polling threads, a channel to it. */
typedef struct svc_ps {
    store_t *store;
    ps_service_t *svc;
    psc_rpc_server_t *server;
    ckpt_db_t *db; /* NULL: no --checkpoint_dir */
    char dir[256];
    char target[64];
    psc_rpc_channel_t *ch;
} svc_ps_t;

/* Starts p; with ckpt_name a RocksDB checkpoint store in a fresh
 * /tmp/psc-test-<ckpt_name>-<pid>-XXXXXX; num_ps > 0: ps_service_set_num_ps. */
static inline void svc_ps_start(svc_ps_t *p, const char *ckpt_name, int num_ps)
{
    char err[512];
    memset(p, 0, sizeof *p);
    p->store = store_create();
    p->svc = ps_service_create(p->store, 0, NULL, NULL, NULL, 0);
    if (ckpt_name) {
        snprintf(p->dir, sizeof p->dir, "/tmp/psc-test-%s-%d-XXXXXX", ckpt_name, (int)getpid());
        assert_non_null(mkdtemp(p->dir));
        assert_int_equal(ckpt_open(p->dir, &p->db, err, sizeof err), 0);
        ps_service_set_checkpoints(p->svc, p->db, 0);
    }
    if (num_ps > 0) ps_service_set_num_ps(p->svc, num_ps);
    p->server = psc_rpc_server_create("127.0.0.1:0", 2, err, sizeof err);
    assert_non_null(p->server);
    ps_service_register(p->svc, p->server);
    int port = psc_rpc_server_start(p->server, err, sizeof err);
    assert_true(port > 0);
    snprintf(p->target, sizeof p->target, "127.0.0.1:%d", port);
    p->ch = psc_rpc_channel_create(p->target);
}

/* Stops p: the parked replies answered (the drain), the server down, then
 * the service, the store and the checkpoint store (its directory removed). */
static inline void svc_ps_stop(svc_ps_t *p)
{
    psc_rpc_channel_destroy(p->ch);
    ps_service_drain(p->svc);
    psc_rpc_server_destroy(p->server);
    ps_service_destroy(p->svc);
    store_destroy(p->store);
    if (p->db) {
        ckpt_close(p->db);
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf %s", p->dir);
        assert_int_equal(system(cmd), 0);
    }
}

/* Creates job's model in store: global_step (0) and "w" (n floats, values w),
 * SGD with learning rate 1 (a step subtracts the gradient, or sync's mean of
 * them); sync mode with *sync when it is non-NULL; then marks the job ready. */
static inline void svc_fixture_model(store_t *store, const char *job, const float *w, int n,
                                     const store_sync_cfg_t *sync)
{
    char err[512];
    psc_optim_config_t opt = {.kind = PSC_OPT_SGD, .learning_rate = 1.0f};
    store_var_spec_t specs[] = {{.name = "global_step", .rank = 0, .is_step = 1},
                                {.name = "w", .rank = 1, .shape = {n}}};
    int created = 0;
    assert_int_equal(store_create_vars(store, job, &opt, specs, 2, &created, err, sizeof err), 0);
    if (sync) assert_int_equal(store_set_sync(store, sync, err, sizeof err), 0);
    size_t bytes = (size_t)n * sizeof *w;
    int64_t zero = 0;
    assert_int_equal(store_assign(store, "w", 0, w, bytes, bytes, err, sizeof err), 0);
    assert_int_equal(store_assign(store, "global_step", 0, &zero, 8, 8, err, sizeof err), 0);
    assert_int_equal(store_set_ready(store, job, err, sizeof err), 0);
}

#endif
