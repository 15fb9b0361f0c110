/* test_sparse_bad — sparse tables refusing what they must, on real
 * ps_server processes (sparse_fixture.h):
 *   - bad sparse requests (AssignRows once the model is ready included) get
 *     their gRPC status and message, change nothing
 *     (rows, versions) and the PS keeps serving; a read-only pull (evaluation)
 *     of unseen ids reads their initial values and creates no row (Status);
 *   - a refused Create (a bad table or sync spec, a sync spec that conflicts
 *     with the job's) leaves nothing behind: the same job's next Create
 *     creates its variables, and a table it did not add can be declared anew.
 */
#include "sparse_fixture.h"

#include <math.h>

/* ---- bad input ---- */

/* Sends the len bytes of buf to ps 0 (method) and frees buf; returns the
 * call's gRPC code, msg gets its message. */
static int call_ps0(const char *method, uint8_t *buf, size_t len, char *msg, size_t msglen)
{
    psc_rpc_channel_t *ch = psc_rpc_channel_create(ps[0].addr);
    psc_rpc_op_t op;
    psc_rpc_call(ch, method, buf, len, 30000, 0, &op);
    int code = op.code;
    snprintf(msg, msglen, "%s", op.msg);
    psc_rpc_op_clear(&op);
    psc_rpc_channel_destroy(ch);
    free(buf);
    return code;
}

/* Sends one Batch to ps 0 and returns its gRPC code; msg gets the message. */
static int batch_call(const Psc__BatchRequest *req, char *msg, size_t msglen)
{
    size_t len = psc__batch_request__get_packed_size(req);
    uint8_t *buf = malloc(len ? len : 1);
    psc__batch_request__pack(req, buf);
    return call_ps0(PSC_M_BATCH, buf, len, msg, msglen);
}

static int sparse_push(const char *name, const int64_t *ids, size_t nids, const void *vals, size_t vlen, char *msg,
                       size_t msglen)
{
    Psc__SparsePush p = PSC__SPARSE_PUSH__INIT;
    Psc__SparsePush *pp = &p;
    p.table = (char *)name;
    p.ids.data = (uint8_t *)ids;
    p.ids.len = nids * 8;
    p.values.data = (uint8_t *)vals;
    p.values.len = vlen;
    Psc__BatchRequest req = PSC__BATCH_REQUEST__INIT;
    req.n_sparse_push = 1;
    req.sparse_push = &pp;
    return batch_call(&req, msg, msglen);
}

static int sparse_pull(const char *name, const void *ids, size_t idlen, char *msg, size_t msglen)
{
    Psc__SparsePull p = PSC__SPARSE_PULL__INIT;
    Psc__SparsePull *pp = &p;
    p.table = (char *)name;
    p.ids.data = (uint8_t *)ids;
    p.ids.len = idlen;
    Psc__BatchRequest req = PSC__BATCH_REQUEST__INIT;
    req.n_sparse_pull = 1;
    req.sparse_pull = &pp;
    return batch_call(&req, msg, msglen);
}

static void expect(int code, const char *msg, int want, const char *needle)
{
    if (code != want || !strstr(msg, needle)) fprintf(stderr, "got %d \"%s\", want %d \"%s\"\n", code, msg, want, needle);
    assert_int_equal(code, want);
    assert_non_null(strstr(msg, needle));
}

/* One Create to ps 0, as an independent client would send it: global_step and
 * "w" (4 floats), one table "emb" (1 part) with rows, dim and a uniform
 * initializer [a, b) unless no_table, and sync when non-NULL. */
typedef struct create_args {
    const char *job;
    int64_t rows;
    uint32_t dim;
    float a, b;
    int no_table;
    const Psc__SyncSpec *sync;
} create_args_t;

/* Sends c's Create: the gRPC status code; msg its message; *created the
 * reply's `created` (0 when refused). */
static int raw_create(const create_args_t *c, int *created, char *msg, size_t msglen)
{
    Psc__OptimizerSpec opt = PSC__OPTIMIZER_SPEC__INIT;
    psc_optim_to_pb(&sgd1, &opt);
    Psc__VarSpec step = PSC__VAR_SPEC__INIT, w = PSC__VAR_SPEC__INIT;
    step.name = "global_step";
    step.is_step = 1;
    int64_t shape[1] = {4};
    w.name = "w";
    w.n_shape = 1;
    w.shape = shape;
    Psc__VarSpec *vars[2] = {&step, &w};
    Psc__TableSpec t = PSC__TABLE_SPEC__INIT;
    t.name = "emb";
    t.rows = c->rows;
    t.dim = c->dim;
    t.num_parts = 1;
    t.init_a = c->a;
    t.init_b = c->b;
    Psc__TableSpec *tp = &t;
    Psc__CreateRequest req = PSC__CREATE_REQUEST__INIT;
    req.job_id = (char *)c->job;
    req.optimizer = &opt;
    req.n_vars = 2;
    req.vars = vars;
    req.n_tables = c->no_table ? 0 : 1;
    req.tables = &tp;
    req.sync = (Psc__SyncSpec *)c->sync;
    size_t len = psc__create_request__get_packed_size(&req);
    uint8_t *buf = malloc(len ? len : 1);
    psc__create_request__pack(&req, buf);
    psc_rpc_channel_t *ch = psc_rpc_channel_create(ps[0].addr);
    psc_rpc_op_t op;
    psc_rpc_call(ch, PSC_M_CREATE, buf, len, 30000, 0, &op);
    int code = op.code;
    snprintf(msg, msglen, "%s", op.msg);
    *created = 0;
    if (code == PSC_RPC_OK) {
        Psc__CreateReply *rep = psc__create_reply__unpack(NULL, op.reply_len, op.reply);
        assert_non_null(rep);
        *created = rep->created;
        psc__create_reply__free_unpacked(rep, NULL);
    }
    psc_rpc_op_clear(&op);
    psc_rpc_channel_destroy(ch);
    free(buf);
    return code;
}

/* A refused Create changes nothing: each bad table (rows 0, rows over 2^40,
 * dim 0, a uniform initializer with min > max) and each bad sync spec
 * (replicas_to_aggregate 0, timeout 0) is refused naming it; then another
 * job's good Create succeeds (no variables of the refused job were left
 * behind to make it ALREADY_EXISTS), and after a Release so does the same
 * job's, creating its variables (created = 1: none were left). A Create whose
 * sync spec conflicts with the job's is refused before it adds a table: the
 * same table of another dim is then created without a mismatch. */
static void test_refused_create(void **state)
{
    (void)state;
    release_all(1);
    const char *job = "00000000000000d7";
    char msg[512];
    int created = 0;
    const struct {
        int64_t rows;
        uint32_t dim;
        float a, b;
        const char *needle;
    } bad[] = {{0, 4, -1, 1, "rows 0"},
               {PSC_TABLE_MAX_ROWS + 1, 4, -1, 1, "2^40"},
               {1000, 0, -1, 1, "dim 0"},
               {1000, 4, 1, -1, "minval <= maxval"}};
    for (size_t i = 0; i < PSC_ARRAY_LEN(bad); i++) {
        create_args_t c = {job, bad[i].rows, bad[i].dim, bad[i].a, bad[i].b, 0, NULL};
        expect(raw_create(&c, &created, msg, sizeof msg), msg, PSC_RPC_INVALID_ARGUMENT, bad[i].needle);
    }
    Psc__SyncSpec sync = PSC__SYNC_SPEC__INIT;
    sync.replicas_to_aggregate = 0;
    sync.total_num_replicas = 1;
    sync.timeout_secs = 30;
    create_args_t c = {job, 1000, 4, -1, 1, 0, &sync};
    expect(raw_create(&c, &created, msg, sizeof msg), msg, PSC_RPC_INVALID_ARGUMENT, "replicas_to_aggregate");
    sync.replicas_to_aggregate = 1;
    sync.timeout_secs = 0;
    expect(raw_create(&c, &created, msg, sizeof msg), msg, PSC_RPC_INVALID_ARGUMENT, "timeout_secs");
    sync.timeout_secs = 30;

    /* another job's Create: refused with ALREADY_EXISTS if the refused ones had left job d7's variables */
    create_args_t other = {"00000000000000d8", 1000, 4, -1, 1, 0, NULL};
    int code = raw_create(&other, &created, msg, sizeof msg);
    if (code != PSC_RPC_OK) fprintf(stderr, "the good Create after the refused ones: %d %s\n", code, msg);
    assert_int_equal(code, PSC_RPC_OK);
    assert_int_equal(created, 1);
    release_all(1);
    /* the refused job itself: its variables are created now, not found from before */
    c.no_table = 1;
    assert_int_equal(raw_create(&c, &created, msg, sizeof msg), PSC_RPC_OK);
    assert_int_equal(created, 1);
    /* a conflicting sync spec with a new table: refused, and the table not added */
    Psc__SyncSpec other_sync = sync;
    other_sync.timeout_secs = 60;
    create_args_t conflict = {job, 1000, 4, -1, 1, 0, &other_sync};
    expect(raw_create(&conflict, &created, msg, sizeof msg), msg, PSC_RPC_ALREADY_EXISTS, "timeout_secs");
    create_args_t dim8 = {job, 1000, 8, -1, 1, 0, &sync}; /* a mismatch if dim 4's had been left */
    code = raw_create(&dim8, &created, msg, sizeof msg);
    if (code != PSC_RPC_OK) fprintf(stderr, "the table after the conflicting Create: %d %s\n", code, msg);
    assert_int_equal(code, PSC_RPC_OK);
    release_all(1);
}

static void test_bad_input(void **state)
{
    (void)state;
    psc_table_spec_t t = table("emb", 1000, 4, PSC_PART_MOD, &sgd1); /* ps 0 holds the even ids */
    job_t j;
    job_open(&j, 2, &t, 1, &sgd1, "00000000000000c5", 1);
    char err[512], msg[512];
    int64_t good[2] = {2, 4};
    float rows[8];
    ps_sparse_op_t op = {.table = 0, .pull_ids = good, .pull_rows = rows, .npull = 2};
    assert_int_equal(ps_client_sparse(j.pc, &op, 1, err, sizeof err), 0);
    ps_status_t before;
    assert_int_equal(ps_client_status(j.pc, 0, &before, err, sizeof err), 0);

    float g8[8] = {0}, nan8[8] = {0, 0, 0, 0, 0, NAN, 0, 0};
    int64_t ids[2];
    ids[0] = 2, ids[1] = 1000;
    expect(sparse_push("emb", ids, 2, g8, sizeof g8, msg, sizeof msg), msg, PSC_RPC_INVALID_ARGUMENT, "1000");
    ids[1] = -4;
    expect(sparse_push("emb", ids, 2, g8, sizeof g8, msg, sizeof msg), msg, PSC_RPC_INVALID_ARGUMENT, "-4");
    ids[1] = 3; /* odd: part 1 lives on the other PS */
    expect(sparse_push("emb", ids, 2, g8, sizeof g8, msg, sizeof msg), msg, PSC_RPC_INVALID_ARGUMENT, "part");
    ids[1] = 2;
    expect(sparse_push("emb", ids, 2, g8, sizeof g8, msg, sizeof msg), msg, PSC_RPC_INVALID_ARGUMENT, "twice");
    ids[1] = 6;
    expect(sparse_push("emb", ids, 2, nan8, sizeof nan8, msg, sizeof msg), msg, PSC_RPC_INVALID_ARGUMENT, "NaN");
    expect(sparse_push("emb", ids, 2, g8, 7 * 4, msg, sizeof msg), msg, PSC_RPC_INVALID_ARGUMENT, "bytes");
    expect(sparse_pull("emb", ids, 12, msg, sizeof msg), msg, PSC_RPC_INVALID_ARGUMENT, "int64");
    expect(sparse_pull("nope", ids, 16, msg, sizeof msg), msg, PSC_RPC_NOT_FOUND, "unknown sparse table");
    expect(sparse_pull("global_step", ids, 8, msg, sizeof msg), msg, PSC_RPC_INVALID_ARGUMENT, "dense variable");
    size_t big = SPARSE_BATCH_MAX_IDS + 1; /* the PS's limit per item */
    int64_t *many = calloc(big, sizeof *many);
    for (size_t i = 0; i < big; i++) many[i] = 2 * (int64_t)(i % 500);
    expect(sparse_pull("emb", many, big * 8, msg, sizeof msg), msg, PSC_RPC_RESOURCE_EXHAUSTED, "ids");
    free(many);
    /* AssignRows (a warm start) only before the model is ready; ids that are not int64s */
    Psc__AssignRowsRequest ar = PSC__ASSIGN_ROWS_REQUEST__INIT;
    ar.table = "emb";
    ar.ids.data = (uint8_t *)good;
    ar.ids.len = sizeof good;
    ar.values.data = (uint8_t *)g8;
    ar.values.len = sizeof g8;
    size_t alen = psc__assign_rows_request__get_packed_size(&ar);
    uint8_t *abuf = malloc(alen);
    psc__assign_rows_request__pack(&ar, abuf);
    expect(call_ps0(PSC_M_ASSIGN_ROWS, abuf, alen, msg, sizeof msg), msg, PSC_RPC_FAILED_PRECONDITION,
           "only before the model is ready");
    ar.ids.len = 12;
    alen = psc__assign_rows_request__get_packed_size(&ar);
    abuf = malloc(alen);
    psc__assign_rows_request__pack(&ar, abuf);
    expect(call_ps0(PSC_M_ASSIGN_ROWS, abuf, alen, msg, sizeof msg), msg, PSC_RPC_INVALID_ARGUMENT, "multiple of 8");
    /* a dense pull of the table's name */
    Psc__PullRequest pr = PSC__PULL_REQUEST__INIT;
    Psc__PullRequest *prp = &pr;
    pr.name = "emb";
    pr.length = 16;
    Psc__BatchRequest req = PSC__BATCH_REQUEST__INIT;
    req.n_pull = 1;
    req.pull = &prp;
    expect(batch_call(&req, msg, sizeof msg), msg, PSC_RPC_INVALID_ARGUMENT, "sparse table");

    /* a read-only pull (evaluation) of unseen ids: their initial values, no row created */
    int64_t unseen[2] = {10, 12};
    float ro[8], created[8];
    ps_sparse_op_t rop = {.table = 0, .pull_ids = unseen, .pull_rows = ro, .npull = 2, .read_only = 1};
    assert_int_equal(ps_client_sparse(j.pc, &rop, 1, err, sizeof err), 0);

    ps_status_t after;
    assert_int_equal(ps_client_status(j.pc, 0, &after, err, sizeof err), 0);
    assert_int_equal(after.tables[0].rows_touched, before.tables[0].rows_touched); /* no row created */
    assert_int_equal(after.tables[0].version, before.tables[0].version);          /* none applied */
    assert_true(after.rejected >= before.rejected + 11); /* each refusal counted */
    /* still serving, rows unchanged */
    float again[8];
    op.pull_rows = again;
    assert_int_equal(ps_client_sparse(j.pc, &op, 1, err, sizeof err), 0);
    assert_memory_equal(again, rows, sizeof rows);
    /* a creating pull of the same ids gives the values the read-only one read */
    rop.read_only = 0;
    rop.pull_rows = created;
    assert_int_equal(ps_client_sparse(j.pc, &rop, 1, err, sizeof err), 0);
    assert_memory_equal(created, ro, sizeof ro);
    assert_int_equal(ps_client_status(j.pc, 0, &after, err, sizeof err), 0);
    assert_int_equal(after.tables[0].rows_touched, before.tables[0].rows_touched + 2);
    job_close(&j);
    release_all(2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_refused_create),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
