/* test_service_stage — the Stage RPC of a ps_server (ps_server/service/service_stage.c:
 * a checkpoint of this PS's shard written from pieces the chief sends, a
 * restore onto another number of PS), through the real RPC server on
 * 127.0.0.1 with two polling threads, a store and a RocksDB checkpoint store.
 * The model: global_step, "dense/kernel" [4,3] and part 0 of 2 of table "emb"
 * (dim 4, mod partition), Adam; created, not ready.
 *  - every tensor of the shard staged (the value in three pieces, the Adam
 *    slots in two, ".t", global_step = 57) with rows of the table (chosen t,
 *    value and slots, in two calls, not in id order), prepared, committed
 *    with Commit and restored with Restore: Pull reads the staged values,
 *    Status global_step 57 and the model ready, TableRows the staged rows;
 *    the staged checkpoint's records read back whole, and a Save after the
 *    restore holds the staged slots, ".t", global_step and row records;
 *  - refusals, each with its gRPC code and message, leaving the model not
 *    ready and no checkpoint written: no model, another job, id 0, an id
 *    that exists (committed, or prepared and not committed), a tensor none
 *    of the shard's, a wrong total, a piece out of order, a second tensor
 *    before the first is complete, a tensor twice, rows of an unknown table,
 *    wrong record_bytes, ids and data that do not make whole rows, a row
 *    twice, prepare with a tensor incomplete, a model that is ready, a PS
 *    without --checkpoint_dir;
 *  - a refused piece drops the staged checkpoint: the next piece of the same
 *    id at offset > 0 is refused, one at 0 begins it anew;
 *  - a staged row outside this PS's part is kept by Stage and refused by
 *    Restore (the store's checks), which changes nothing;
 *  - Release drops a staged checkpoint that is not prepared: after a new
 *    Create the same id begins anew at offset 0 and can be completed;
 *  - a refusal for the PS's state (another job) leaves a staged checkpoint
 *    as it is and is not counted as rejected; a slot with a NaN is refused;
 *    the checkpoint's step is the global_step staged (57), not the requests'
 *    (10);
 *  - the replica steps a checkpoint records (online training's exact
 *    resume): staged ones kept, handed out by Status after the restore; a
 *    Save records the live counts, or the restored one for a replica that has
 *    not stepped since; Release forgets them. */
#include "ckpt.h"
#include "psc.h"
#include "psc.pb-c.h"
#include "rpc.h"
#include "service.h"
#include "store.h"
#include "wire.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "service_fixture.h"

#define JOB "00000000000000fc"
#define OTHER_JOB "00000000000000aa"
#define STEP 57
#define KN 12                        /* floats of dense/kernel [4,3] */
#define KB (KN * (int)sizeof(float)) /* its bytes */
#define DIM 4
#define REC (8 + 4 * DIM * 3) /* a row record of emb: t, value, Adam m and v */
#define NROWS 3

/* ---- a PS in this process ---- */

static svc_ps_t g;

static void ps_start(int with_ckpt) { svc_ps_start(&g, with_ckpt ? "stage" : NULL, 2); }

static void ps_stop(void) { svc_ps_stop(&g); }

/* ---- calls ---- */

static char last_msg[256]; /* the status message of the last call */

/* One call; the reply's bytes in *reply (caller frees) when reply is non-NULL. */
static int call(const char *method, const void *req, size_t len, uint8_t **reply, size_t *reply_len)
{
    psc_rpc_op_t op;
    psc_rpc_call(g.ch, method, req, len, 10000, 1, &op);
    int code = op.code;
    snprintf(last_msg, sizeof last_msg, "%s", op.msg);
    if (reply) {
        *reply = op.reply;
        *reply_len = op.reply_len;
        op.reply = NULL;
    }
    psc_rpc_op_clear(&op);
    return code;
}

/* The last call was answered `code` with a message containing `part`. */
static void assert_answer(int got, int code, const char *part)
{
    if (got != code || !strstr(last_msg, part))
        fprintf(stderr, "answer %s \"%s\", wanted %s with \"%s\"\n", psc_rpc_code_name(got), last_msg,
                psc_rpc_code_name(code), part);
    assert_int_equal(got, code);
    assert_non_null(strstr(last_msg, part));
}

/* Create: global_step, dense/kernel [4,3] and part 0 of 2 of table emb
 * (dim 4, 1000 rows, mod partition, zeros), Adam; not ready. */
static int create_model(const char *job)
{
    Psc__OptimizerSpec opt = PSC__OPTIMIZER_SPEC__INIT;
    opt.name = (char *)"adam";
    opt.learning_rate = 0.01f;
    opt.beta1 = 0.9f;
    opt.beta2 = 0.999f;
    opt.epsilon = 1e-8f;
    Psc__VarSpec step = PSC__VAR_SPEC__INIT, kernel = PSC__VAR_SPEC__INIT;
    step.name = (char *)"global_step";
    step.is_step = 1;
    int64_t shape[2] = {4, 3};
    kernel.name = (char *)"dense/kernel";
    kernel.shape = shape;
    kernel.n_shape = 2;
    Psc__VarSpec *vars[2] = {&step, &kernel};
    Psc__TableSpec t = PSC__TABLE_SPEC__INIT;
    t.name = (char *)"emb";
    t.rows = 1000;
    t.dim = DIM;
    t.num_parts = 2;
    t.part = 0;
    t.partition = 0;
    t.init = 2;
    t.optimizer = &opt;
    t.seed = 42;
    Psc__TableSpec *tables[1] = {&t};
    Psc__CreateRequest r = PSC__CREATE_REQUEST__INIT;
    r.job_id = (char *)job;
    r.optimizer = &opt;
    r.vars = vars;
    r.n_vars = 2;
    r.tables = tables;
    r.n_tables = 1;
    uint8_t buf[512];
    assert_true(psc__create_request__get_packed_size(&r) <= sizeof buf);
    return call(PSC_M_CREATE, buf, psc__create_request__pack(&r, buf), NULL, NULL);
}

static int ready(void)
{
    Psc__ReadyRequest r = PSC__READY_REQUEST__INIT;
    r.job_id = (char *)JOB;
    uint8_t buf[64];
    return call(PSC_M_READY, buf, psc__ready_request__pack(&r, buf), NULL, NULL);
}

static int release(void)
{
    Psc__ReleaseRequest r = PSC__RELEASE_REQUEST__INIT;
    r.job_id = (char *)"";
    uint8_t buf[64];
    return call(PSC_M_RELEASE, buf, psc__release_request__pack(&r, buf), NULL, NULL);
}

/* One Stage call (job_id defaults to JOB, step to STEP). */
static int64_t req_step = STEP; /* the step the Stage requests carry */

static int stage(Psc__StageRequest *q)
{
    if (!q->job_id[0]) q->job_id = (char *)JOB;
    if (!q->step) q->step = req_step;
    size_t len = psc__stage_request__get_packed_size(q);
    uint8_t *buf = malloc(len ? len : 1);
    assert_non_null(buf);
    psc__stage_request__pack(q, buf);
    uint8_t *rep = NULL;
    size_t n = 0;
    int code = call(PSC_M_STAGE, buf, len, &rep, &n);
    if (code == PSC_RPC_OK) {
        Psc__StageReply *s = psc__stage_reply__unpack(NULL, n, rep);
        assert_non_null(s);
        assert_int_equal(s->bytes, q->data.len);
        psc__stage_reply__free_unpacked(s, NULL);
    }
    free(rep);
    free(buf);
    return code;
}

/* A piece of tensor `name`: len bytes at offset of total. */
static int stage_piece(uint64_t id, const char *name, uint64_t offset, uint64_t total, const void *data, size_t len)
{
    Psc__StageRequest q = PSC__STAGE_REQUEST__INIT;
    q.id = id;
    q.tensor = (char *)name;
    q.offset = offset;
    q.total = total;
    q.data.data = (uint8_t *)data;
    q.data.len = len;
    return stage(&q);
}

/* Rows of a table: ids_len bytes of ids, data_len bytes of records. */
static int stage_rows(uint64_t id, const char *table, const int64_t *ids, size_t ids_len, uint32_t record_bytes,
                      const void *data, size_t data_len)
{
    Psc__StageRequest q = PSC__STAGE_REQUEST__INIT;
    q.id = id;
    q.table = (char *)table;
    q.ids.data = (uint8_t *)ids;
    q.ids.len = ids_len;
    q.record_bytes = record_bytes;
    q.data.data = (uint8_t *)data;
    q.data.len = data_len;
    return stage(&q);
}

static int stage_prepare(uint64_t id)
{
    Psc__StageRequest q = PSC__STAGE_REQUEST__INIT;
    q.id = id;
    q.prepare = 1;
    return stage(&q);
}

static int commit(uint64_t id)
{
    Psc__CommitRequest r = PSC__COMMIT_REQUEST__INIT;
    r.id = id;
    r.keep = 5;
    uint8_t buf[64];
    return call(PSC_M_COMMIT, buf, psc__commit_request__pack(&r, buf), NULL, NULL);
}

static int restore(uint64_t id, int64_t *step)
{
    Psc__RestoreRequest r = PSC__RESTORE_REQUEST__INIT;
    r.job_id = (char *)JOB;
    r.id = id;
    r.step = STEP;
    uint8_t buf[64], *rep = NULL;
    size_t n = 0;
    int code = call(PSC_M_RESTORE, buf, psc__restore_request__pack(&r, buf), &rep, &n);
    if (code == PSC_RPC_OK) {
        Psc__RestoreReply *s = psc__restore_reply__unpack(NULL, n, rep);
        assert_non_null(s);
        *step = s->step;
        psc__restore_reply__free_unpacked(s, NULL);
    }
    free(rep);
    return code;
}

static int save(uint64_t id)
{
    Psc__SaveRequest r = PSC__SAVE_REQUEST__INIT;
    r.job_id = (char *)JOB;
    r.id = id;
    r.step = STEP;
    uint8_t buf[64];
    return call(PSC_M_SAVE, buf, psc__save_request__pack(&r, buf), NULL, NULL);
}

/* Status (caller frees). */
static Psc__StatusReply *status(void)
{
    Psc__StatusRequest r = PSC__STATUS_REQUEST__INIT;
    uint8_t buf[16], *rep = NULL;
    size_t n = 0;
    assert_int_equal(call(PSC_M_STATUS, buf, psc__status_request__pack(&r, buf), &rep, &n), PSC_RPC_OK);
    Psc__StatusReply *s = psc__status_reply__unpack(NULL, n, rep);
    assert_non_null(s);
    free(rep);
    return s;
}

/* TableRows of emb from the first (live, or committed checkpoint `ckpt`,
 * with records when `records`); caller frees. */
static Psc__TableRowsReply *table_rows(uint64_t ckpt, int records)
{
    Psc__TableRowsRequest r = PSC__TABLE_ROWS_REQUEST__INIT;
    r.table = (char *)"emb";
    r.after = -1;
    r.checkpoint = ckpt;
    r.records = records;
    uint8_t buf[64], *rep = NULL;
    size_t n = 0;
    int code = call(PSC_M_TABLE_ROWS, buf, psc__table_rows_request__pack(&r, buf), &rep, &n);
    if (code != PSC_RPC_OK) fprintf(stderr, "TableRows: %s\n", last_msg);
    assert_int_equal(code, PSC_RPC_OK);
    Psc__TableRowsReply *t = psc__table_rows_reply__unpack(NULL, n, rep);
    assert_non_null(t);
    free(rep);
    return t;
}

/* The model is not ready and the checkpoint store holds n checkpoints:
 * what a refused Stage leaves. */
static void assert_unchanged(int n)
{
    Psc__StatusReply *s = status();
    assert_false(s->ready);
    psc__status_reply__free_unpacked(s, NULL);
    if (!g.db) return;
    char err[512];
    ckpt_info_t *infos = NULL;
    int have = -1;
    assert_int_equal(ckpt_list(g.db, &infos, &have, err, sizeof err), 0);
    free(infos);
    assert_int_equal(have, n);
}

/* ---- the staged shard ---- */

static float kernel[KN], adam_m[KN], adam_v[KN];
static int64_t kernel_t[1] = {9}; /* one 2 MiB chunk */
static int64_t gstep[1] = {STEP};
static const int64_t row_ids[NROWS] = {10, 0, 4}; /* even: part 0 of 2 (mod) */
static uint8_t row_recs[NROWS][REC];

static void shard_fill(void)
{
    for (int i = 0; i < KN; i++) {
        kernel[i] = 0.5f * (float)i - 1.0f;
        adam_m[i] = 0.01f * (float)(i + 1);
        adam_v[i] = 0.001f * (float)(i + 2);
    }
    for (int r = 0; r < NROWS; r++) {
        int64_t t = 3 + r;
        memcpy(row_recs[r], &t, 8);
        float f[3 * DIM];
        for (int k = 0; k < 3 * DIM; k++) f[k] = (float)(100 * (r + 1) + k) / 8.0f; /* value, m, v */
        memcpy(row_recs[r] + 8, f, sizeof f);
    }
}

/* The record staged for row id. */
static const uint8_t *rec_of(int64_t id)
{
    for (int r = 0; r < NROWS; r++)
        if (row_ids[r] == id) return row_recs[r];
    fail_msg("row %lld was not staged", (long long)id);
    return NULL;
}

/* Stages the whole shard as checkpoint id and prepares it. */
static void stage_shard(uint64_t id)
{
    const uint8_t *k = (const uint8_t *)kernel;
    assert_int_equal(stage_piece(id, "dense/kernel", 0, KB, k, 16), PSC_RPC_OK);
    assert_int_equal(stage_piece(id, "dense/kernel", 16, KB, k + 16, 16), PSC_RPC_OK);
    assert_int_equal(stage_piece(id, "dense/kernel", 32, KB, k + 32, 16), PSC_RPC_OK);
    const uint8_t *m = (const uint8_t *)adam_m;
    assert_int_equal(stage_piece(id, "dense/kernel/Adam", 0, KB, m, 20), PSC_RPC_OK);
    assert_int_equal(stage_piece(id, "dense/kernel/Adam", 20, KB, m + 20, KB - 20), PSC_RPC_OK);
    assert_int_equal(stage_piece(id, "dense/kernel/Adam_1", 0, KB, adam_v, KB), PSC_RPC_OK);
    assert_int_equal(stage_piece(id, "dense/kernel/.t", 0, 8, kernel_t, 8), PSC_RPC_OK);
    assert_int_equal(stage_piece(id, "global_step", 0, 8, gstep, 8), PSC_RPC_OK);
    /* rows in two calls, not in id order */
    assert_int_equal(stage_rows(id, "emb", row_ids, 2 * 8, REC, row_recs[0], 2 * REC), PSC_RPC_OK);
    assert_int_equal(stage_rows(id, "emb", row_ids + 2, 8, REC, row_recs[2], REC), PSC_RPC_OK);
    assert_int_equal(stage_prepare(id), PSC_RPC_OK);
}

/* ---- tests ---- */

static void test_stage_commit_restore(void **state)
{
    (void)state;
    ps_start(1);
    shard_fill();
    assert_int_equal(create_model(JOB), PSC_RPC_OK);
    stage_shard(7);
    assert_int_equal(commit(7), PSC_RPC_OK);
    assert_unchanged(1); /* committed, not restored yet */
    int64_t step = -1;
    assert_int_equal(restore(7, &step), PSC_RPC_OK);
    assert_int_equal(step, STEP);

    /* the live model: the staged values, global_step, ready */
    Psc__PullRequest p = PSC__PULL_REQUEST__INIT;
    p.name = (char *)"dense/kernel";
    p.length = KB;
    uint8_t buf[128], *rep = NULL;
    size_t n = 0;
    assert_int_equal(call(PSC_M_PULL, buf, psc__pull_request__pack(&p, buf), &rep, &n), PSC_RPC_OK);
    Psc__Chunk *c = psc__chunk__unpack(NULL, n, rep);
    assert_non_null(c);
    assert_int_equal(c->data.len, KB);
    assert_memory_equal(c->data.data, kernel, KB);
    psc__chunk__free_unpacked(c, NULL);
    free(rep);
    Psc__StatusReply *s = status();
    assert_true(s->ready);
    assert_true(s->has_global_step);
    assert_int_equal(s->global_step, STEP);
    assert_int_equal(s->restored_step, STEP);
    assert_int_equal(s->n_tables, 1);
    assert_int_equal(s->tables[0]->rows_touched, NROWS);
    psc__status_reply__free_unpacked(s, NULL);

    /* the live rows: the staged values, id order */
    Psc__TableRowsReply *t = table_rows(0, 0);
    assert_int_equal(t->dim, DIM);
    assert_int_equal(t->ids.len, NROWS * 8);
    assert_int_equal(t->values.len, NROWS * DIM * 4);
    const int64_t sorted[NROWS] = {0, 4, 10};
    for (int r = 0; r < NROWS; r++) {
        int64_t id;
        memcpy(&id, t->ids.data + 8 * r, 8);
        assert_int_equal(id, sorted[r]);
        assert_memory_equal(t->values.data + (size_t)r * DIM * 4, rec_of(id) + 8, DIM * 4);
    }
    psc__table_rows_reply__free_unpacked(t, NULL);

    /* the staged checkpoint's whole records (t and slots) */
    t = table_rows(7, 1);
    assert_int_equal(t->record_bytes, REC);
    assert_int_equal(t->ids.len, NROWS * 8);
    assert_int_equal(t->records.len, NROWS * REC);
    for (int r = 0; r < NROWS; r++) {
        int64_t id;
        memcpy(&id, t->ids.data + 8 * r, 8);
        assert_int_equal(id, sorted[r]);
        assert_memory_equal(t->records.data + (size_t)r * REC, rec_of(id), REC);
    }
    psc__table_rows_reply__free_unpacked(t, NULL);

    /* what the restore put in the store, slots and update counts included: a
     * Save of it holds the staged tensors and records */
    assert_int_equal(save(8), PSC_RPC_OK);
    assert_int_equal(commit(8), PSC_RPC_OK);
    struct {
        const char *name;
        const void *want;
        size_t len;
    } want[] = {
        {"dense/kernel", kernel, KB},     {"dense/kernel/Adam", adam_m, KB}, {"dense/kernel/Adam_1", adam_v, KB},
        {"dense/kernel/.t", kernel_t, 8}, {"global_step", gstep, 8},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char err[512];
        void *data = NULL;
        size_t len = 0;
        assert_int_equal(ckpt_read(g.db, 8, want[i].name, &data, &len, err, sizeof err), 0);
        assert_int_equal(len, want[i].len);
        assert_memory_equal(data, want[i].want, len);
        free(data);
    }
    t = table_rows(8, 1);
    assert_int_equal(t->records.len, NROWS * REC);
    for (int r = 0; r < NROWS; r++) {
        int64_t id;
        memcpy(&id, t->ids.data + 8 * r, 8);
        assert_memory_equal(t->records.data + (size_t)r * REC, rec_of(id), REC);
    }
    psc__table_rows_reply__free_unpacked(t, NULL);
    ps_stop();
}

static void test_refusals(void **state)
{
    (void)state;
    ps_start(1);
    shard_fill();
    const uint8_t *k = (const uint8_t *)kernel;
    int64_t two[2] = {0, 2};
    uint8_t recs[2][REC];
    memcpy(recs, row_recs, sizeof recs);

    /* no model */
    assert_answer(stage_piece(1, "dense/kernel", 0, KB, k, KB), PSC_RPC_FAILED_PRECONDITION, "holds no model");
    assert_int_equal(create_model(JOB), PSC_RPC_OK);
    assert_unchanged(0);

    /* another job's, id 0 */
    Psc__StageRequest q = PSC__STAGE_REQUEST__INIT;
    q.job_id = (char *)OTHER_JOB;
    q.id = 1;
    assert_answer(stage(&q), PSC_RPC_FAILED_PRECONDITION, "holds job " JOB);
    assert_answer(stage_piece(0, "dense/kernel", 0, KB, k, KB), PSC_RPC_INVALID_ARGUMENT, "checkpoint id 0");
    assert_unchanged(0);

    /* an id that exists: a checkpoint written earlier (here, directly) */
    char err[512];
    ckpt_writer_t *w = ckpt_begin(g.db, 3, JOB, 1);
    assert_int_equal(ckpt_add(w, "x", "abc", 3), 0);
    assert_int_equal(ckpt_prepare(w, err, sizeof err), 0);
    assert_int_equal(ckpt_commit(g.db, 3, 5, err, sizeof err), 0);
    assert_answer(stage_piece(3, "dense/kernel", 0, KB, k, KB), PSC_RPC_ALREADY_EXISTS, "checkpoint 3 exists");
    assert_unchanged(1);

    /* tensors that are none of the shard's, a wrong total */
    assert_answer(stage_piece(4, "dense/kernel/Momentum", 0, KB, k, KB), PSC_RPC_INVALID_ARGUMENT,
                  "none of this shard's");
    assert_answer(stage_piece(4, "emb", 0, KB, k, KB), PSC_RPC_INVALID_ARGUMENT, "none of this shard's");
    assert_answer(stage_piece(4, "~model", 0, 3, "abc", 3), PSC_RPC_INVALID_ARGUMENT, "none of this shard's");
    assert_answer(stage_piece(4, "dense/kernel", 0, KB - 4, k, KB - 4), PSC_RPC_INVALID_ARGUMENT,
                  "44 bytes, but this shard's has 48");
    assert_answer(stage_piece(4, "global_step", 0, 4, gstep, 4), PSC_RPC_INVALID_ARGUMENT,
                  "4 bytes, but this shard's has 8");
    uint8_t longer[KB + 4] = {0}; /* more bytes than the total */
    assert_answer(stage_piece(4, "dense/kernel", 0, KB, longer, sizeof longer), PSC_RPC_INVALID_ARGUMENT,
                  "52 bytes at 0 of 48, but 0 of its 48 bytes came in order");
    assert_unchanged(1);

    /* pieces out of order: past where the last ended, the same piece again */
    assert_int_equal(stage_piece(4, "dense/kernel", 0, KB, k, 16), PSC_RPC_OK);
    assert_answer(stage_piece(4, "dense/kernel", 32, KB, k + 32, 16), PSC_RPC_INVALID_ARGUMENT,
                  "16 bytes at 32 of 48, but 16 of its 48 bytes came in order");
    assert_int_equal(stage_piece(4, "dense/kernel", 0, KB, k, 16), PSC_RPC_OK);
    assert_answer(stage_piece(4, "dense/kernel", 0, KB, k, 16), PSC_RPC_INVALID_ARGUMENT,
                  "16 bytes at 0 of 48, but 16 of its 48 bytes came in order");
    /* a tensor's first piece not at 0 */
    assert_answer(stage_piece(4, "dense/kernel", 16, KB, k + 16, 16), PSC_RPC_INVALID_ARGUMENT,
                  "starts at byte 16, not 0");
    /* a wrong total on a later piece */
    assert_int_equal(stage_piece(4, "dense/kernel", 0, KB, k, 16), PSC_RPC_OK);
    assert_answer(stage_piece(4, "dense/kernel", 16, KB + 8, k + 16, 16), PSC_RPC_INVALID_ARGUMENT, "came in order");
    assert_unchanged(1);

    /* a second tensor begun before the first is complete */
    assert_int_equal(stage_piece(4, "dense/kernel", 0, KB, k, 16), PSC_RPC_OK);
    assert_answer(stage_piece(4, "dense/kernel/Adam", 0, KB, adam_m, KB), PSC_RPC_INVALID_ARGUMENT,
                  "staged tensor dense/kernel: 16 of its 48 bytes came before dense/kernel/Adam");
    /* a tensor twice */
    assert_int_equal(stage_piece(4, "global_step", 0, 8, gstep, 8), PSC_RPC_OK);
    assert_answer(stage_piece(4, "global_step", 0, 8, gstep, 8), PSC_RPC_ALREADY_EXISTS, "twice?");
    assert_unchanged(1);

    /* rows: an unknown table, wrong record_bytes, ids and data that do not make whole rows, a row twice */
    assert_answer(stage_rows(4, "nope", two, 16, REC, recs, 2 * REC), PSC_RPC_INVALID_ARGUMENT,
                  "table nope: no part of it here");
    assert_answer(stage_rows(4, "emb", two, 16, REC - 16, recs, 2 * (REC - 16)), PSC_RPC_INVALID_ARGUMENT,
                  "records of 40 bytes, but this part's are 56");
    assert_answer(stage_rows(4, "emb", two, 12, REC, recs, 2 * REC), PSC_RPC_INVALID_ARGUMENT,
                  "12 bytes of ids and 112 of records do not make whole rows");
    assert_answer(stage_rows(4, "emb", two, 16, REC, recs, REC), PSC_RPC_INVALID_ARGUMENT,
                  "16 bytes of ids and 56 of records do not make whole rows");
    assert_answer(stage_rows(4, "emb", two, 8, REC, recs, 2 * REC), PSC_RPC_INVALID_ARGUMENT,
                  "8 bytes of ids and 112 of records do not make whole rows");
    int64_t dup[2] = {2, 2};
    assert_answer(stage_rows(4, "emb", dup, 16, REC, recs, 2 * REC), PSC_RPC_ALREADY_EXISTS,
                  "row 2 of table emb could not be added (twice?)");
    assert_unchanged(1);

    /* prepare while a tensor is incomplete: refused, nothing prepared */
    assert_int_equal(stage_piece(4, "dense/kernel", 0, KB, k, 16), PSC_RPC_OK);
    assert_answer(stage_prepare(4), PSC_RPC_INVALID_ARGUMENT,
                  "staged tensor dense/kernel: only 16 of its 48 bytes came");
    assert_unchanged(1);

    /* none of this left anything staged: the whole shard stages as id 4 */
    stage_shard(4);
    assert_unchanged(2);
    /* prepared, not committed: the id exists (a prepare sent again is refused) */
    assert_answer(stage_prepare(4), PSC_RPC_ALREADY_EXISTS, "checkpoint 4 exists");
    assert_unchanged(2);
    assert_int_equal(commit(4), PSC_RPC_OK);

    /* the model is ready: refused (id 5 is new) */
    assert_int_equal(ready(), PSC_RPC_OK);
    assert_answer(stage_piece(5, "dense/kernel", 0, KB, k, 16), PSC_RPC_FAILED_PRECONDITION, "the model is ready");
    char e2[512];
    ckpt_info_t info;
    assert_int_equal(ckpt_get_info(g.db, 5, &info, e2, sizeof e2), PSC_ENOTFOUND);
    ps_stop();

    /* a PS without --checkpoint_dir */
    ps_start(0);
    assert_int_equal(create_model(JOB), PSC_RPC_OK);
    assert_answer(stage_piece(1, "dense/kernel", 0, KB, k, KB), PSC_RPC_FAILED_PRECONDITION, "no --checkpoint_dir");
    assert_answer(stage_prepare(1), PSC_RPC_FAILED_PRECONDITION, "no --checkpoint_dir");
    assert_unchanged(0);
    ps_stop();
}

/* A refused piece drops the staged checkpoint: the chief starts again. */
static void test_refused_piece_drops(void **state)
{
    (void)state;
    ps_start(1);
    shard_fill();
    const uint8_t *k = (const uint8_t *)kernel;
    assert_int_equal(create_model(JOB), PSC_RPC_OK);
    /* global_step complete, half of dense/kernel, then a refused piece */
    assert_int_equal(stage_piece(6, "global_step", 0, 8, gstep, 8), PSC_RPC_OK);
    assert_int_equal(stage_piece(6, "dense/kernel", 0, KB, k, 24), PSC_RPC_OK);
    assert_answer(stage_piece(6, "nope", 0, 4, k, 4), PSC_RPC_INVALID_ARGUMENT, "came before nope");
    assert_unchanged(0);
    /* the rest of dense/kernel is refused: id 6 began anew */
    assert_answer(stage_piece(6, "dense/kernel", 24, KB, k + 24, 24), PSC_RPC_INVALID_ARGUMENT,
                  "starts at byte 24, not 0");
    assert_unchanged(0);
    /* the whole shard stages as id 6 from the start (global_step, staged
     * before the refusals, is not refused as added twice) */
    stage_shard(6);
    assert_unchanged(1);
    assert_int_equal(commit(6), PSC_RPC_OK);
    int64_t step = -1;
    assert_int_equal(restore(6, &step), PSC_RPC_OK);
    ps_stop();
}

/* A refusal for the PS's state (another job's call) leaves the staged
 * checkpoint as it is; a value that is not finite is refused; the
 * checkpoint's step is the global_step staged, not the requests'. */
static void test_state_refusal_nan_and_step(void **state)
{
    (void)state;
    ps_start(1);
    shard_fill();
    const uint8_t *k = (const uint8_t *)kernel;
    assert_int_equal(create_model(JOB), PSC_RPC_OK);
    assert_int_equal(stage_piece(9, "dense/kernel", 0, KB, k, 16), PSC_RPC_OK);
    Psc__StageRequest q = PSC__STAGE_REQUEST__INIT;
    q.job_id = (char *)OTHER_JOB;
    q.id = 99;
    assert_answer(stage(&q), PSC_RPC_FAILED_PRECONDITION, "holds job " JOB);
    Psc__StatusReply *st = status();
    assert_int_equal(st->rejected, 0); /* not the request's fault: not counted */
    psc__status_reply__free_unpacked(st, NULL);
    assert_int_equal(stage_piece(9, "dense/kernel", 16, KB, k + 16, KB - 16), PSC_RPC_OK); /* still staged */
    float bad[KN];
    memcpy(bad, adam_m, sizeof bad);
    bad[KN - 1] = NAN;
    assert_answer(stage_piece(9, "dense/kernel/Adam", 0, KB, bad, KB), PSC_RPC_INVALID_ARGUMENT,
                  "element 11 is not finite");
    assert_unchanged(0);
    /* requests at step 10, global_step 57 staged: the checkpoint is at 57 */
    req_step = 10;
    stage_shard(11);
    req_step = STEP;
    assert_int_equal(commit(11), PSC_RPC_OK);
    int64_t step = -1;
    assert_int_equal(restore(11, &step), PSC_RPC_OK);
    assert_int_equal(step, STEP);
    ps_stop();
}

/* Stage checks the row's size and the table; the row's part is Restore's check. */
static void test_restore_checks_staged_rows(void **state)
{
    (void)state;
    ps_start(1);
    shard_fill();
    assert_int_equal(create_model(JOB), PSC_RPC_OK);
    const uint8_t *k = (const uint8_t *)kernel;
    assert_int_equal(stage_piece(2, "dense/kernel", 0, KB, k, KB), PSC_RPC_OK);
    assert_int_equal(stage_piece(2, "dense/kernel/Adam", 0, KB, adam_m, KB), PSC_RPC_OK);
    assert_int_equal(stage_piece(2, "dense/kernel/Adam_1", 0, KB, adam_v, KB), PSC_RPC_OK);
    assert_int_equal(stage_piece(2, "dense/kernel/.t", 0, 8, kernel_t, 8), PSC_RPC_OK);
    assert_int_equal(stage_piece(2, "global_step", 0, 8, gstep, 8), PSC_RPC_OK);
    int64_t odd = 5; /* part 1 of 2: another PS's */
    assert_int_equal(stage_rows(2, "emb", &odd, 8, REC, row_recs[0], REC), PSC_RPC_OK);
    assert_int_equal(stage_prepare(2), PSC_RPC_OK);
    assert_int_equal(commit(2), PSC_RPC_OK);
    int64_t step = -1;
    assert_answer(restore(2, &step), PSC_RPC_INVALID_ARGUMENT,
                  "sparse table \"emb\": id 5 belongs to part 1 of 2 (partition mod), this PS holds part 0");
    assert_unchanged(1);
    ps_stop();
}

/* Release drops a staged checkpoint that is not prepared. */
static void test_release_drops_staged(void **state)
{
    (void)state;
    ps_start(1);
    shard_fill();
    const uint8_t *k = (const uint8_t *)kernel;
    assert_int_equal(create_model(JOB), PSC_RPC_OK);
    assert_int_equal(stage_piece(5, "dense/kernel", 0, KB, k, 16), PSC_RPC_OK);
    assert_int_equal(release(), PSC_RPC_OK);
    assert_int_equal(create_model(JOB), PSC_RPC_OK);
    assert_unchanged(0);
    /* id 5 begins anew at 0 (were it still staged, offset 0 would be out of order) */
    stage_shard(5);
    assert_int_equal(commit(5), PSC_RPC_OK);
    int64_t step = -1;
    assert_int_equal(restore(5, &step), PSC_RPC_OK);
    assert_int_equal(step, STEP);
    ps_stop();
}

/* A warm start's stage: only global_step and the table's rows staged, then
 * prepare with fill and base_step: the kernel and its slots are the model's
 * as created (zeros); the restore sets base_step (Status), a Save keeps it in
 * its description and a restore of that sets it again; Release clears it. */
static void test_fill_and_base_step(void **state)
{
    (void)state;
    ps_start(1);
    shard_fill();
    assert_int_equal(create_model(JOB), PSC_RPC_OK);
    assert_int_equal(stage_piece(6, "global_step", 0, 8, gstep, 8), PSC_RPC_OK);
    assert_int_equal(stage_rows(6, "emb", row_ids, NROWS * 8, REC, row_recs[0], NROWS * REC), PSC_RPC_OK);
    Psc__StageRequest q = PSC__STAGE_REQUEST__INIT;
    q.id = 6;
    q.prepare = 1;
    q.fill = 1;
    q.base_step = STEP;
    assert_int_equal(stage(&q), PSC_RPC_OK);
    assert_int_equal(commit(6), PSC_RPC_OK);
    int64_t step = -1;
    assert_int_equal(restore(6, &step), PSC_RPC_OK);
    assert_int_equal(step, STEP);
    Psc__StatusReply *s = status();
    assert_true(s->ready);
    assert_int_equal(s->global_step, STEP);
    assert_int_equal(s->base_step, STEP);
    assert_int_equal(s->tables[0]->rows_touched, NROWS);
    assert_string_equal(s->tables[0]->slots, "m,v");
    psc__status_reply__free_unpacked(s, NULL);
    static const float zeros[KN];
    const char *filled[] = {"dense/kernel", "dense/kernel/Adam", "dense/kernel/Adam_1"};
    for (int i = 0; i < 3; i++) {
        void *data = NULL;
        size_t len = 0;
        char err[256];
        assert_int_equal(ckpt_read(g.db, 6, filled[i], &data, &len, err, sizeof err), 0);
        assert_int_equal(len, KB);
        assert_memory_equal(data, zeros, KB);
        free(data);
    }
    Psc__TableRowsReply *t = table_rows(6, 1);
    assert_int_equal(t->ids.len, NROWS * 8);
    psc__table_rows_reply__free_unpacked(t, NULL);
    /* a Save carries base_step on; its restore sets it */
    assert_int_equal(save(8), PSC_RPC_OK);
    assert_int_equal(commit(8), PSC_RPC_OK);
    assert_int_equal(release(), PSC_RPC_OK);
    s = status();
    assert_int_equal(s->base_step, 0);
    psc__status_reply__free_unpacked(s, NULL);
    assert_int_equal(create_model(JOB), PSC_RPC_OK);
    assert_int_equal(restore(8, &step), PSC_RPC_OK);
    s = status();
    assert_int_equal(s->base_step, STEP);
    psc__status_reply__free_unpacked(s, NULL);
    ps_stop();
}

/* An async step of replica `worker`, its own count replica_step after it. */
static int step_of(uint32_t worker, int64_t replica_step)
{
    Psc__StepRequest r = PSC__STEP_REQUEST__INIT;
    r.increment = 1;
    r.worker = worker;
    r.replica_step = replica_step;
    uint8_t buf[64];
    return call(PSC_M_STEP, buf, psc__step_request__pack(&r, buf), NULL, NULL);
}

/* The replica steps a checkpoint records (online training's exact resume):
 * a staged checkpoint keeps the Stage's; its restore hands them out in
 * Status (restored_replica_steps); a Save records the live counts, and for a
 * replica that has not stepped since the restore the restored one; Release
 * forgets them. */
static void test_replica_steps_kept(void **state)
{
    (void)state;
    ps_start(1);
    shard_fill();
    assert_int_equal(create_model(JOB), PSC_RPC_OK);
    int64_t staged[3] = {7, 5, 0};
    Psc__StageRequest q = PSC__STAGE_REQUEST__INIT;
    q.id = 7;
    q.prepare = 1;
    q.replica_steps = staged;
    q.n_replica_steps = 3;
    assert_int_equal(stage_piece(7, "global_step", 0, 8, gstep, 8), PSC_RPC_OK);
    q.fill = 1;
    assert_int_equal(stage(&q), PSC_RPC_OK);
    assert_int_equal(commit(7), PSC_RPC_OK);
    int64_t step = -1;
    assert_int_equal(restore(7, &step), PSC_RPC_OK);
    Psc__StatusReply *s = status();
    assert_int_equal(s->n_restored_replica_steps, 3);
    assert_int_equal(s->restored_replica_steps[0], 7);
    assert_int_equal(s->restored_replica_steps[1], 5);
    assert_int_equal(s->n_replica_steps, 0); /* nobody stepped since */
    psc__status_reply__free_unpacked(s, NULL);
    /* replica 0 steps on from 7; replica 1 does not step before the next Save */
    assert_int_equal(step_of(0, 8), PSC_RPC_OK);
    assert_int_equal(step_of(0, 9), PSC_RPC_OK);
    assert_int_equal(save(8), PSC_RPC_OK);
    assert_int_equal(commit(8), PSC_RPC_OK);
    assert_int_equal(release(), PSC_RPC_OK);
    s = status();
    assert_int_equal(s->n_restored_replica_steps, 0);
    psc__status_reply__free_unpacked(s, NULL);
    assert_int_equal(create_model(JOB), PSC_RPC_OK);
    assert_int_equal(restore(8, &step), PSC_RPC_OK);
    assert_int_equal(step, STEP + 2);
    s = status();
    assert_int_equal(s->n_restored_replica_steps, 3);
    assert_int_equal(s->restored_replica_steps[0], 9);
    assert_int_equal(s->restored_replica_steps[1], 5);
    assert_int_equal(s->restored_replica_steps[2], 0);
    psc__status_reply__free_unpacked(s, NULL);
    ps_stop();
}

/* Restore of checkpoint id as job `job` with alias (NULL: none). */
static int restore_as(const char *job, const char *alias, uint64_t id)
{
    Psc__RestoreRequest r = PSC__RESTORE_REQUEST__INIT;
    r.job_id = (char *)job;
    if (alias) r.alias_job_id = (char *)alias;
    r.id = id;
    r.step = STEP;
    uint8_t buf[96];
    return call(PSC_M_RESTORE, buf, psc__restore_request__pack(&r, buf), NULL, NULL);
}

/* Restore: a checkpoint of another job only under its alias (the id an older
 * psc gave the same spec); a shard written for another number of PS never. */
static void test_restore_alias_and_shape(void **state)
{
    (void)state;
    static const char *const job2 = "00000000000000fd";
    ps_start(1);
    assert_int_equal(create_model(JOB), PSC_RPC_OK);
    assert_int_equal(ready(), PSC_RPC_OK);
    assert_int_equal(save(8), PSC_RPC_OK);
    assert_int_equal(commit(8), PSC_RPC_OK);
    assert_int_equal(release(), PSC_RPC_OK);
    assert_int_equal(create_model(job2), PSC_RPC_OK);
    int got = restore_as(job2, NULL, 8);
    assert_true(got != PSC_RPC_OK && strstr(last_msg, "belongs to job " JOB));
    assert_true(restore_as(job2, "00000000000000aa", 8) != PSC_RPC_OK);
    assert_int_equal(restore_as(job2, JOB, 8), PSC_RPC_OK);
    ps_service_set_num_ps(g.svc, 3); /* as if started in a cluster of 3 on this directory */
    assert_answer(restore_as(job2, JOB, 8), PSC_RPC_NOT_FOUND, "holds the shard of ps 0 of 2, none for this ps 0 of 3");
    ps_stop();
}

int main(void)
{
    psc_rpc_hold_for_process();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stage_commit_restore),    cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_refused_piece_drops),     cmocka_unit_test(test_restore_checks_staged_rows),
        cmocka_unit_test(test_release_drops_staged),    cmocka_unit_test(test_state_refusal_nan_and_step),
        cmocka_unit_test(test_fill_and_base_step),      cmocka_unit_test(test_replica_steps_kept),
        cmocka_unit_test(test_restore_alias_and_shape),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
