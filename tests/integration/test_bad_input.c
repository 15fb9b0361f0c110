/* test_bad_input — a real ps_server answers bad requests with a clear gRPC
 * status, changes no state, and keeps serving the next valid request.
 *
 * Model on the PS: global_step, "w" (4, 3), "b" (3), optimizer SGD lr 0.5.
 * Batch calls: a bad item anywhere refuses the whole batch, nothing applied;
 * a sync PS refuses batch pushes; a valid batch applies exactly.
 * bfloat16 pushes: an unknown encoding, odd or wrong lengths, NaN and
 * infinity refused (alone and in a batch); valid ones applied exactly.
 */
#include "bf16.h"
#include "chunk.h"
#include "it_util.h"
#include "psc.pb-c.h"
#include "rpc.h"
#include "wire.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

static it_proc_t ps;
static psc_rpc_channel_t *ch;
static const char *JOB = "00000000000000aa";

/* One unary call; returns the status code, msg in op (caller clears op). */
static int call(const char *method, const void *req, size_t len, psc_rpc_op_t *op)
{
    psc_rpc_call(ch, method, req, len, 5000, 0, op);
    return op->code;
}

static int call_chunk_enc(const char *method, const char *name, uint64_t offset, uint64_t total, const void *data,
                          size_t len, uint32_t encoding, psc_rpc_op_t *op)
{
    Psc__Chunk c = PSC__CHUNK__INIT;
    c.name = (char *)name;
    c.encoding = encoding;
    c.offset = offset;
    c.total = total;
    c.data.data = (uint8_t *)data;
    c.data.len = len;
    size_t n = psc__chunk__get_packed_size(&c);
    uint8_t *buf = malloc(n);
    psc__chunk__pack(&c, buf);
    int code = call(method, buf, n, op);
    free(buf);
    return code;
}

static int call_chunk(const char *method, const char *name, uint64_t offset, uint64_t total, const void *data,
                      size_t len, psc_rpc_op_t *op)
{
    return call_chunk_enc(method, name, offset, total, data, len, PSC_ENC_FLOAT32, op);
}

static int create(int64_t w_rows, psc_rpc_op_t *op)
{
    Psc__OptimizerSpec o = PSC__OPTIMIZER_SPEC__INIT;
    o.name = "gradient_descent";
    o.learning_rate = 0.5f;
    int64_t sw[2] = {w_rows, 3}, sb[1] = {3};
    Psc__VarSpec v[3] = {PSC__VAR_SPEC__INIT, PSC__VAR_SPEC__INIT, PSC__VAR_SPEC__INIT};
    v[0].name = "global_step";
    v[0].is_step = 1;
    v[1].name = "w";
    v[1].shape = sw;
    v[1].n_shape = 2;
    v[2].name = "b";
    v[2].shape = sb;
    v[2].n_shape = 1;
    Psc__VarSpec *vp[3] = {&v[0], &v[1], &v[2]};
    Psc__CreateRequest r = PSC__CREATE_REQUEST__INIT;
    r.job_id = (char *)JOB;
    r.optimizer = &o;
    r.vars = vp;
    r.n_vars = 3;
    uint8_t buf[512];
    size_t n = psc__create_request__pack(&r, buf);
    return call(PSC_M_CREATE, buf, n, op);
}

static int pull(const char *name, size_t len, void *out)
{
    Psc__PullRequest r = PSC__PULL_REQUEST__INIT;
    r.name = (char *)name;
    r.length = len;
    uint8_t buf[128];
    size_t n = psc__pull_request__pack(&r, buf);
    psc_rpc_op_t op;
    int code = call(PSC_M_PULL, buf, n, &op);
    if (code == PSC_RPC_OK) {
        Psc__Chunk *c = psc__chunk__unpack(NULL, op.reply_len, op.reply);
        assert_non_null(c);
        assert_int_equal(c->data.len, len);
        memcpy(out, c->data.data, len);
        psc__chunk__free_unpacked(c, NULL);
    }
    psc_rpc_op_clear(&op);
    return code;
}

static float w0[12], b0[3];

static int setup(void **state)
{
    (void)state;
    if (it_start_ps(&ps) != 0) {
        it_dump_log(&ps);
        return -1;
    }
    ch = psc_rpc_channel_create(ps.addr);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    psc_rpc_channel_destroy(ch);
    int rc = it_stop(&ps);
    if (rc != 0) it_dump_log(&ps);
    return rc == 0 ? 0 : -1;
}

static void assert_msg(const psc_rpc_op_t *op, const char *needle)
{
    if (!strstr(op->msg, needle)) fail_msg("status message \"%s\" does not mention \"%s\"", op->msg, needle);
}

static void test_pull_before_model(void **state)
{
    (void)state;
    float w[12];
    Psc__PullRequest r = PSC__PULL_REQUEST__INIT;
    r.name = "w";
    r.length = sizeof w;
    uint8_t buf[64];
    psc_rpc_op_t op;
    assert_int_equal(call(PSC_M_PULL, buf, psc__pull_request__pack(&r, buf), &op), PSC_RPC_FAILED_PRECONDITION);
    assert_msg(&op, "not ready");
    psc_rpc_op_clear(&op);
}

static void test_create_and_init(void **state)
{
    (void)state;
    psc_rpc_op_t op;
    assert_int_equal(create(4, &op), PSC_RPC_OK);
    psc_rpc_op_clear(&op);
    for (int i = 0; i < 12; i++) w0[i] = (float)i * 0.25f - 1.0f;
    for (int i = 0; i < 3; i++) b0[i] = (float)i;
    int64_t step = 0;
    assert_int_equal(call_chunk(PSC_M_ASSIGN, "w", 0, sizeof w0, w0, sizeof w0, &op), PSC_RPC_OK);
    psc_rpc_op_clear(&op);
    assert_int_equal(call_chunk(PSC_M_ASSIGN, "b", 0, sizeof b0, b0, sizeof b0, &op), PSC_RPC_OK);
    psc_rpc_op_clear(&op);
    assert_int_equal(call_chunk(PSC_M_ASSIGN, "global_step", 0, 8, &step, 8, &op), PSC_RPC_OK);
    psc_rpc_op_clear(&op);
    Psc__ReadyRequest rr = PSC__READY_REQUEST__INIT;
    rr.job_id = (char *)JOB;
    uint8_t buf[64];
    assert_int_equal(call(PSC_M_READY, buf, psc__ready_request__pack(&rr, buf), &op), PSC_RPC_OK);
    psc_rpc_op_clear(&op);
}

static void assert_state_unchanged(void)
{
    float w[12], b[3];
    assert_int_equal(pull("w", sizeof w, w), PSC_RPC_OK);
    assert_int_equal(pull("b", sizeof b, b), PSC_RPC_OK);
    assert_memory_equal(w, w0, sizeof w);
    assert_memory_equal(b, b0, sizeof b);
}

static void test_push_unknown_variable(void **state)
{
    (void)state;
    float g[3] = {1, 1, 1};
    psc_rpc_op_t op;
    assert_int_equal(call_chunk(PSC_M_PUSH, "dense/kernal", 0, sizeof g, g, sizeof g, &op), PSC_RPC_NOT_FOUND);
    assert_msg(&op, "dense/kernal");
    psc_rpc_op_clear(&op);
    assert_state_unchanged();
}

static void test_push_wrong_size(void **state)
{
    (void)state;
    float g[5] = {1, 1, 1, 1, 1};
    psc_rpc_op_t op;
    assert_int_equal(call_chunk(PSC_M_PUSH, "b", 0, sizeof g, g, sizeof g, &op), PSC_RPC_INVALID_ARGUMENT);
    assert_msg(&op, "b");
    psc_rpc_op_clear(&op);
    /* total right, payload short */
    assert_int_equal(call_chunk(PSC_M_PUSH, "b", 0, 12, g, 8, &op), PSC_RPC_INVALID_ARGUMENT);
    psc_rpc_op_clear(&op);
    /* misaligned offset */
    assert_int_equal(call_chunk(PSC_M_PUSH, "w", 4, 48, g, 4, &op), PSC_RPC_INVALID_ARGUMENT);
    psc_rpc_op_clear(&op);
    assert_state_unchanged();
}

static void test_push_non_finite(void **state)
{
    (void)state;
    float g[3] = {0.5f, NAN, 1.0f};
    psc_rpc_op_t op;
    assert_int_equal(call_chunk(PSC_M_PUSH, "b", 0, sizeof g, g, sizeof g, &op), PSC_RPC_INVALID_ARGUMENT);
    assert_msg(&op, "non-finite");
    psc_rpc_op_clear(&op);
    g[1] = INFINITY;
    assert_int_equal(call_chunk(PSC_M_PUSH_PULL, "b", 0, sizeof g, g, sizeof g, &op), PSC_RPC_INVALID_ARGUMENT);
    psc_rpc_op_clear(&op);
    assert_state_unchanged();
}

static void test_garbage_and_truncated(void **state)
{
    (void)state;
    psc_rpc_op_t op;
    const uint8_t garbage[] = {0xff, 0xff, 0xff, 0xff, 0x0f, 0x12, 0x99};
    assert_int_equal(call(PSC_M_PUSH, garbage, sizeof garbage, &op), PSC_RPC_INVALID_ARGUMENT);
    assert_msg(&op, "does not parse");
    psc_rpc_op_clear(&op);
    /* A valid Chunk cut in the middle of its data field. */
    float g[3] = {1, 2, 3};
    Psc__Chunk c = PSC__CHUNK__INIT;
    c.name = "b";
    c.total = sizeof g;
    c.data.data = (uint8_t *)g;
    c.data.len = sizeof g;
    uint8_t buf[128];
    size_t n = psc__chunk__pack(&c, buf);
    assert_int_equal(call(PSC_M_PUSH, buf, n - 5, &op), PSC_RPC_INVALID_ARGUMENT);
    psc_rpc_op_clear(&op);
    assert_int_equal(call(PSC_M_CREATE, garbage, sizeof garbage, &op), PSC_RPC_INVALID_ARGUMENT);
    psc_rpc_op_clear(&op);
    assert_int_equal(call(PSC_M_PULL, garbage, sizeof garbage, &op), PSC_RPC_INVALID_ARGUMENT);
    psc_rpc_op_clear(&op);
    assert_int_equal(call("/psc.ParameterServer/NoSuchMethod", buf, n, &op), PSC_RPC_UNIMPLEMENTED);
    psc_rpc_op_clear(&op);
    assert_state_unchanged();
}

static void test_second_create_different_shapes(void **state)
{
    (void)state;
    psc_rpc_op_t op;
    assert_int_equal(create(5, &op), PSC_RPC_ALREADY_EXISTS);
    assert_msg(&op, "w");
    psc_rpc_op_clear(&op);
    /* The same create again is a no-op join. */
    assert_int_equal(create(4, &op), PSC_RPC_OK);
    Psc__CreateReply *r = psc__create_reply__unpack(NULL, op.reply_len, op.reply);
    assert_non_null(r);
    assert_false(r->created);
    assert_true(r->ready);
    psc__create_reply__free_unpacked(r, NULL);
    psc_rpc_op_clear(&op);
    assert_state_unchanged();
}

/* ---- Batch: checked whole before anything is applied ---- */

typedef struct batch_item {
    const char *name;
    const void *g; /* push: the gradient; NULL: a pull of len bytes */
    size_t len;
    int64_t min_step;
    uint32_t encoding; /* push: PSC_ENC_* (g holds bfloat16 values for PSC_ENC_BFLOAT16) */
} batch_item_t;

/* One Batch call of the items (pushes and pulls) and, with has_step, a Step
 * with increment step_inc. Returns the status; the reply in op. */
static int call_batch(const batch_item_t *items, size_t n, int has_step, int64_t step_inc, psc_rpc_op_t *op)
{
    Psc__Chunk push[8], *pp[8];
    Psc__PullRequest pull[8], *pl[8];
    size_t np = 0, nl = 0;
    for (size_t i = 0; i < n; i++) {
        if (items[i].g) {
            psc__chunk__init(&push[np]);
            push[np].name = (char *)items[i].name;
            push[np].encoding = items[i].encoding;
            push[np].total = items[i].encoding == PSC_ENC_BFLOAT16 ? 2 * items[i].len : items[i].len;
            push[np].data.data = (uint8_t *)items[i].g;
            push[np].data.len = items[i].len;
            pp[np] = &push[np];
            np++;
        } else {
            psc__pull_request__init(&pull[nl]);
            pull[nl].name = (char *)items[i].name;
            pull[nl].length = items[i].len;
            pull[nl].min_step = items[i].min_step;
            pl[nl] = &pull[nl];
            nl++;
        }
    }
    Psc__StepRequest step = PSC__STEP_REQUEST__INIT;
    step.increment = step_inc;
    Psc__BatchRequest r = PSC__BATCH_REQUEST__INIT;
    r.push = pp;
    r.n_push = np;
    r.pull = pl;
    r.n_pull = nl;
    if (has_step) r.step = &step;
    uint8_t buf[1024];
    assert_true(psc__batch_request__get_packed_size(&r) <= sizeof buf);
    return call(PSC_M_BATCH, buf, psc__batch_request__pack(&r, buf), op);
}

static int64_t global_step_now(void)
{
    uint8_t le[8];
    assert_int_equal(pull("global_step", 8, le), PSC_RPC_OK);
    int64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | le[i];
    return v;
}

static void test_batch_bad_items(void **state)
{
    (void)state;
    float gb[3] = {1, 1, 1}, gw[12] = {0}, gw_nan[12] = {0};
    gw_nan[7] = NAN;
    int64_t step0 = global_step_now();
    psc_rpc_op_t op;
    /* a good push, then a non-finite one: the first is not applied either */
    batch_item_t a[] = {{"b", gb, sizeof gb, 0, 0}, {"w", gw_nan, sizeof gw_nan, 0, 0}};
    assert_int_equal(call_batch(a, 2, 1, 1, &op), PSC_RPC_INVALID_ARGUMENT);
    assert_msg(&op, "batch push 1");
    assert_msg(&op, "non-finite");
    psc_rpc_op_clear(&op);
    /* a good push and an unknown pull */
    batch_item_t b[] = {{"b", gb, sizeof gb, 0, 0}, {"dense/kernal", NULL, 12, 0, 0}};
    assert_int_equal(call_batch(b, 2, 0, 0, &op), PSC_RPC_NOT_FOUND);
    assert_msg(&op, "batch pull 0");
    assert_msg(&op, "dense/kernal");
    psc_rpc_op_clear(&op);
    /* a pull past the variable's end, a pull that waits for a step */
    batch_item_t c[] = {{"b", gb, sizeof gb, 0, 0}, {"b", NULL, 16, 0, 0}};
    assert_int_equal(call_batch(c, 2, 0, 0, &op), PSC_RPC_INVALID_ARGUMENT);
    psc_rpc_op_clear(&op);
    batch_item_t d[] = {{"w", gw, sizeof gw, 0, 0}, {"b", NULL, 12, 5, 0}};
    assert_int_equal(call_batch(d, 2, 0, 0, &op), PSC_RPC_INVALID_ARGUMENT);
    assert_msg(&op, "min_step");
    psc_rpc_op_clear(&op);
    /* a negative step increment: the pushes before it are not applied */
    batch_item_t e[] = {{"b", gb, sizeof gb, 0, 0}};
    assert_int_equal(call_batch(e, 1, 1, -1, &op), PSC_RPC_INVALID_ARGUMENT);
    assert_msg(&op, "batch step");
    psc_rpc_op_clear(&op);
    /* a push of global_step, a gradient of the wrong size */
    int64_t one = 1;
    batch_item_t f[] = {{"b", gb, sizeof gb, 0, 0}, {"global_step", (const float *)&one, 8, 0, 0}};
    assert_int_equal(call_batch(f, 2, 0, 0, &op), PSC_RPC_INVALID_ARGUMENT);
    assert_msg(&op, "use Step");
    psc_rpc_op_clear(&op);
    batch_item_t g[] = {{"w", gw, 8 * 4, 0, 0}};
    assert_int_equal(call_batch(g, 1, 0, 0, &op), PSC_RPC_INVALID_ARGUMENT);
    psc_rpc_op_clear(&op);
    /* bytes that do not parse, and a batch over the item limit */
    const uint8_t garbage[] = {0x0a, 0xff, 0xff, 0xff, 0x7f, 0x00};
    assert_int_equal(call(PSC_M_BATCH, garbage, sizeof garbage, &op), PSC_RPC_INVALID_ARGUMENT);
    assert_msg(&op, "does not parse");
    psc_rpc_op_clear(&op);
    size_t nbig = PSC_BATCH_MAX_ITEMS + 1;
    Psc__PullRequest pr = PSC__PULL_REQUEST__INIT, **prs = malloc(nbig * sizeof *prs);
    pr.name = "b";
    pr.length = 12;
    for (size_t i = 0; i < nbig; i++) prs[i] = &pr;
    Psc__BatchRequest big = PSC__BATCH_REQUEST__INIT;
    big.pull = prs;
    big.n_pull = nbig;
    size_t blen = psc__batch_request__get_packed_size(&big);
    uint8_t *bbuf = malloc(blen);
    psc__batch_request__pack(&big, bbuf);
    assert_int_equal(call(PSC_M_BATCH, bbuf, blen, &op), PSC_RPC_INVALID_ARGUMENT);
    assert_msg(&op, "exceeds");
    psc_rpc_op_clear(&op);
    free(bbuf);
    free(prs);
    assert_state_unchanged();
    assert_true(global_step_now() == step0);
}

/* A sync PS serves batch pulls and step reads, and refuses batch pushes and
 * step contributions (sync replies wait per chunk). Its own ps_server. */
static void test_batch_sync_ps(void **state)
{
    (void)state;
    it_proc_t sps;
    memset(&sps, 0, sizeof sps);
    assert_int_equal(it_start_ps(&sps), 0);
    psc_rpc_channel_t *keep = ch;
    ch = psc_rpc_channel_create(sps.addr);
    Psc__OptimizerSpec o = PSC__OPTIMIZER_SPEC__INIT;
    o.name = "gradient_descent";
    o.learning_rate = 0.5f;
    int64_t sb[1] = {3};
    Psc__VarSpec v[2] = {PSC__VAR_SPEC__INIT, PSC__VAR_SPEC__INIT};
    v[0].name = "global_step";
    v[0].is_step = 1;
    v[1].name = "b";
    v[1].shape = sb;
    v[1].n_shape = 1;
    Psc__VarSpec *vp[2] = {&v[0], &v[1]};
    Psc__SyncSpec sy = PSC__SYNC_SPEC__INIT;
    sy.replicas_to_aggregate = 2;
    sy.total_num_replicas = 2;
    sy.timeout_secs = 30;
    Psc__CreateRequest r = PSC__CREATE_REQUEST__INIT;
    r.job_id = (char *)JOB;
    r.optimizer = &o;
    r.vars = vp;
    r.n_vars = 2;
    r.sync = &sy;
    uint8_t buf[512];
    psc_rpc_op_t op;
    assert_int_equal(call(PSC_M_CREATE, buf, psc__create_request__pack(&r, buf), &op), PSC_RPC_OK);
    psc_rpc_op_clear(&op);
    Psc__ReadyRequest rr = PSC__READY_REQUEST__INIT;
    rr.job_id = (char *)JOB;
    assert_int_equal(call(PSC_M_READY, buf, psc__ready_request__pack(&rr, buf), &op), PSC_RPC_OK);
    psc_rpc_op_clear(&op);
    float g[3] = {1, 1, 1};
    batch_item_t push[] = {{"b", g, sizeof g, 0, 0}};
    assert_int_equal(call_batch(push, 1, 0, 0, &op), PSC_RPC_FAILED_PRECONDITION);
    assert_msg(&op, "asynchronous");
    psc_rpc_op_clear(&op);
    batch_item_t pull_b[] = {{"b", NULL, 12, 0, 0}};
    assert_int_equal(call_batch(pull_b, 1, 1, 0, &op), PSC_RPC_OK);
    Psc__BatchReply *rep = psc__batch_reply__unpack(NULL, op.reply_len, op.reply);
    assert_non_null(rep);
    assert_int_equal(rep->n_pull, 1);
    assert_int_equal(rep->pull[0]->data.len, 12);
    assert_non_null(rep->step);
    psc__batch_reply__free_unpacked(rep, NULL);
    psc_rpc_op_clear(&op);
    psc_rpc_channel_destroy(ch);
    ch = keep;
    assert_int_equal(it_stop(&sps), 0);
}

static void test_valid_push_after_bad_ones(void **state)
{
    (void)state;
    float g[3] = {1.0f, -2.0f, 0.5f}, b[3];
    psc_rpc_op_t op;
    assert_int_equal(call_chunk(PSC_M_PUSH_PULL, "b", 0, sizeof g, g, sizeof g, &op), PSC_RPC_OK);
    psc_rpc_op_clear(&op);
    assert_int_equal(pull("b", sizeof b, b), PSC_RPC_OK);
    for (int i = 0; i < 3; i++) assert_true(b[i] == b0[i] - 0.5f * g[i]);
    assert_true(psc_rpc_health_check(ch, 2000));
}

/* A valid batch: pushes applied in order, the step added, then the pulls read. */
static void test_batch_valid(void **state)
{
    (void)state;
    float w[12], b[3], gw[12], gb[3] = {2.0f, 0.0f, -1.0f};
    assert_int_equal(pull("w", sizeof w, w), PSC_RPC_OK);
    assert_int_equal(pull("b", sizeof b, b), PSC_RPC_OK);
    for (int i = 0; i < 12; i++) gw[i] = (float)i * 0.125f;
    int64_t step0 = global_step_now();
    /* b pushed twice: both applied, in order */
    batch_item_t items[] = {{"w", gw, sizeof gw, 0, 0}, {"b", gb, sizeof gb, 0, 0}, {"b", gb, sizeof gb, 0, 0},
                            {"b", NULL, sizeof b, 0, 0}, {"w", NULL, sizeof w, 0, 0}};
    psc_rpc_op_t op;
    assert_int_equal(call_batch(items, 5, 1, 1, &op), PSC_RPC_OK);
    Psc__BatchReply *rep = psc__batch_reply__unpack(NULL, op.reply_len, op.reply);
    assert_non_null(rep);
    assert_int_equal(rep->n_push_version, 3);
    assert_true(rep->push_version[2] == rep->push_version[1] + 1);
    assert_int_equal(rep->n_pull, 2);
    assert_non_null(rep->step);
    assert_true(rep->step->global_step == step0 + 1);
    float wb[3], ww[12];
    for (int i = 0; i < 3; i++) wb[i] = (b[i] - 0.5f * gb[i]) - 0.5f * gb[i];
    for (int i = 0; i < 12; i++) ww[i] = w[i] - gw[i] * 0.5f;
    assert_string_equal(rep->pull[0]->name, "b");
    assert_int_equal(rep->pull[0]->data.len, sizeof wb);
    assert_memory_equal(rep->pull[0]->data.data, wb, sizeof wb);
    assert_string_equal(rep->pull[1]->name, "w");
    assert_memory_equal(rep->pull[1]->data.data, ww, sizeof ww);
    assert_true(rep->pull[1]->total == sizeof ww);
    psc__batch_reply__free_unpacked(rep, NULL);
    psc_rpc_op_clear(&op);
    assert_true(global_step_now() == step0 + 1);
}

/* bfloat16 pushes (Chunk.encoding 1): the data holds half the bytes, total
 * and offset still count float32 bytes; the PS widens them exactly. */
static void test_bfloat16_pushes(void **state)
{
    (void)state;
    psc_rpc_op_t op;
    float g[3] = {1, 1, 1}, w_before[12], b_before[3];
    assert_int_equal(pull("w", sizeof w_before, w_before), PSC_RPC_OK);
    assert_int_equal(pull("b", sizeof b_before, b_before), PSC_RPC_OK);
    /* an encoding nobody knows */
    assert_int_equal(call_chunk_enc(PSC_M_PUSH, "b", 0, 12, g, sizeof g, 7, &op), PSC_RPC_INVALID_ARGUMENT);
    assert_msg(&op, "unknown encoding 7");
    psc_rpc_op_clear(&op);
    /* odd bytes, too few values, more than half a chunk */
    uint16_t h[3] = {0x3f80, 0xbf80, 0x4000}; /* 1, -1, 2 */
    assert_int_equal(call_chunk_enc(PSC_M_PUSH, "b", 0, 12, h, 5, 1, &op), PSC_RPC_INVALID_ARGUMENT);
    assert_msg(&op, "bfloat16 data of 5 bytes");
    psc_rpc_op_clear(&op);
    assert_int_equal(call_chunk_enc(PSC_M_PUSH_PULL, "b", 0, 12, h, 4, 1, &op), PSC_RPC_INVALID_ARGUMENT);
    assert_msg(&op, "b");
    psc_rpc_op_clear(&op);
    size_t big = PSC_CHUNK_BYTES / 2 + 2;
    uint8_t *zeros = calloc(1, big);
    assert_int_equal(call_chunk_enc(PSC_M_PUSH, "w", 0, 48, zeros, big, 1, &op), PSC_RPC_INVALID_ARGUMENT);
    assert_msg(&op, "at most half");
    psc_rpc_op_clear(&op);
    free(zeros);
    /* a NaN and an infinity in bfloat16 are refused like float32 ones */
    uint16_t bad[3] = {0x3f80, 0x7fc0, 0x3f80};
    assert_int_equal(call_chunk_enc(PSC_M_PUSH, "b", 0, 12, bad, sizeof bad, 1, &op), PSC_RPC_INVALID_ARGUMENT);
    assert_msg(&op, "non-finite");
    psc_rpc_op_clear(&op);
    bad[1] = 0xff80;
    assert_int_equal(call_chunk_enc(PSC_M_PUSH_PULL, "b", 0, 12, bad, sizeof bad, 1, &op), PSC_RPC_INVALID_ARGUMENT);
    psc_rpc_op_clear(&op);
    /* in a batch: the whole batch refused, the item named */
    batch_item_t items[] = {{"b", g, sizeof g, 0, 0}, {"b", bad, sizeof bad, 0, PSC_ENC_BFLOAT16}};
    assert_int_equal(call_batch(items, 2, 0, 0, &op), PSC_RPC_INVALID_ARGUMENT);
    assert_msg(&op, "batch push 1");
    psc_rpc_op_clear(&op);
    items[1].encoding = 3;
    assert_int_equal(call_batch(items, 2, 0, 0, &op), PSC_RPC_INVALID_ARGUMENT);
    assert_msg(&op, "unknown encoding 3");
    psc_rpc_op_clear(&op);
    float w[12], b[3], want[3];
    assert_int_equal(pull("w", sizeof w, w), PSC_RPC_OK);
    assert_int_equal(pull("b", sizeof b, b), PSC_RPC_OK);
    assert_memory_equal(w, w_before, sizeof w);
    assert_memory_equal(b, b_before, sizeof b);

    /* valid: applied exactly as the float32 values they stand for (SGD, lr 0.5) */
    assert_int_equal(call_chunk_enc(PSC_M_PUSH_PULL, "b", 0, 12, h, sizeof h, 1, &op), PSC_RPC_OK);
    Psc__Chunk *c = psc__chunk__unpack(NULL, op.reply_len, op.reply);
    assert_non_null(c);
    assert_int_equal(c->data.len, 12); /* the reply: float32 values */
    want[0] = b[0] - 0.5f * 1.0f, want[1] = b[1] - 0.5f * -1.0f, want[2] = b[2] - 0.5f * 2.0f;
    assert_memory_equal(c->data.data, want, sizeof want);
    psc__chunk__free_unpacked(c, NULL);
    psc_rpc_op_clear(&op);
    items[1].g = h;
    items[1].encoding = PSC_ENC_BFLOAT16;
    assert_int_equal(call_batch(items, 2, 0, 0, &op), PSC_RPC_OK);
    psc_rpc_op_clear(&op);
    assert_int_equal(pull("b", sizeof b, b), PSC_RPC_OK);
    for (int i = 0; i < 3; i++) want[i] = (want[i] - 0.5f * g[i]) - 0.5f * psc_bf16_to_float(h[i]);
    assert_memory_equal(b, want, sizeof want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pull_before_model),
        cmocka_unit_test(test_create_and_init),
        cmocka_unit_test(test_push_unknown_variable),
        cmocka_unit_test(test_push_wrong_size),
        cmocka_unit_test(test_push_non_finite),
        cmocka_unit_test(test_garbage_and_truncated),
        cmocka_unit_test(test_second_create_different_shapes),
        cmocka_unit_test(test_batch_bad_items),
        cmocka_unit_test(test_batch_sync_ps),
        cmocka_unit_test(test_valid_push_after_bad_ones),
        cmocka_unit_test(test_batch_valid),
        cmocka_unit_test(test_bfloat16_pushes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
