/* test_batch — Batch calls change how tensors travel, never what the PS
 * computes. Two real ps_servers hold a model with a big piece (chunk calls)
 * and small ones (batched), round robin, Adam:
 *   global_step -> ps 0, big/kernel (300 x 300, 360,000 B) -> ps 1,
 *   big/bias -> ps 0, small/kernel (40 x 30) -> ps 1, small/bias -> ps 0.
 * The same sequence of rounds (push-pull, push, pull) runs twice from the same
 * initial values: with batching (2 Batch calls a round, the Step in ps 0's) and
 * with a call per chunk. The weights must be bit-identical after every round,
 * and global_step equal. (A sync PS's refusal of batch pushes and its batch
 * pulls: test_bad_input.)
 * bfloat16 pushes (gradient_dtype) change the bytes, never the arithmetic: the
 * same rounds with gradients sent as bfloat16 with error feedback, batched and
 * per chunk, give bit-identical weights to float32 pushes of the gradients
 * rounded here the same way (bf16.h, with a residual of our own), and differ
 * from the unrounded run.
 */
#include "bf16.h"
#include "it_util.h"
#include "placement.h"
#include "ps_client.h"
#include "psc.pb-c.h"
#include "rng.h"
#include "wire.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#define NVARS 5

static it_proc_t ps[2];
static psc_cluster_t cl;
static psc_var_desc_t vars[NVARS];
static psc_placed_var_t *placed;
static int nplaced;
static int64_t nparams;

static void var(int i, const char *name, int64_t rows, int64_t cols)
{
    snprintf(vars[i].name, sizeof vars[i].name, "%s", name);
    vars[i].rank = cols ? 2 : 1;
    vars[i].shape[0] = rows;
    vars[i].shape[1] = cols;
    vars[i].numel = cols ? rows * cols : rows;
    vars[i].layer = i;
}

static int setup(void **state)
{
    (void)state;
    cl.n[PSC_JOB_PS] = 2;
    cl.addr[PSC_JOB_PS] = calloc(2, sizeof(char *));
    for (int i = 0; i < 2; i++) {
        if (it_start_ps(&ps[i])) {
            it_dump_log(&ps[i]);
            return -1;
        }
        cl.addr[PSC_JOB_PS][i] = ps[i].addr;
    }
    snprintf(vars[0].name, sizeof vars[0].name, "global_step");
    vars[0].numel = 1;
    vars[0].is_step = 1;
    vars[0].layer = -1;
    var(1, "big/kernel", 300, 300);
    var(2, "big/bias", 300, 0);
    var(3, "small/kernel", 40, 30);
    var(4, "small/bias", 30, 0);
    char err[512];
    if (psc_place(vars, NVARS, 2, PSC_PLACE_ROUND_ROBIN, 0, &placed, &nplaced, err, sizeof err)) return -1;
    nparams = 0;
    for (int i = 1; i < NVARS; i++) nparams += vars[i].numel;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    int rc = 0;
    for (int i = 0; i < 2; i++)
        if (it_stop(&ps[i]) != 0) {
            it_dump_log(&ps[i]);
            rc = -1;
        }
    free(cl.addr[PSC_JOB_PS]);
    free(placed);
    return rc;
}

/* Drops the job on both PS (as psctl's next job does), so the next run creates it afresh. */
static void release_all(void)
{
    Psc__ReleaseRequest r = PSC__RELEASE_REQUEST__INIT;
    r.job_id = "";
    uint8_t buf[32];
    size_t n = psc__release_request__pack(&r, buf);
    for (int i = 0; i < 2; i++) {
        psc_rpc_channel_t *ch = psc_rpc_channel_create(ps[i].addr);
        psc_rpc_op_t op;
        assert_int_equal(psc_rpc_call(ch, PSC_M_RELEASE, buf, n, 5000, 0, &op), 0);
        psc_rpc_op_clear(&op);
        psc_rpc_channel_destroy(ch);
    }
}

#define ROUNDS 6

/* How a run sends its gradients. */
enum grads { AS_FLOAT32, AS_BF16, PREROUNDED };

/* Runs the rounds with batching on or off; snapshots[r] gets the weights
 * after round r, steps[r] global_step. AS_BF16: pushes carry bfloat16 with
 * error feedback; PREROUNDED: float32 pushes of the gradients rounded here as
 * AS_BF16 rounds them. */
static void run(size_t batch_bytes, enum grads how, float *snap, int64_t *steps)
{
    ps_client_t *pc = ps_client_create(&cl, vars, NVARS, placed, nplaced, 0, 30000);
    ps_client_set_batch_bytes(pc, batch_bytes);
    if (how == AS_BF16) ps_client_set_gradient_dtype(pc, PSC_ENC_BFLOAT16, 1);
    float *resid = calloc((size_t)nparams, 4);
    uint16_t *h = malloc((size_t)nparams * 2);
    int carries = 0;
    int calls = ps_client_batch_calls(pc, &carries);
    if (batch_bytes) {
        assert_int_equal(calls, 2); /* ps 0: big/bias + small/bias + step; ps 1: small/kernel */
        assert_true(carries);
    } else {
        assert_int_equal(calls, 0);
    }
    float *w = malloc((size_t)nparams * 4), *g = malloc((size_t)nparams * 4);
    psc_rng_t rng;
    psc_rng_seed(&rng, 11);
    for (int64_t i = 0; i < nparams; i++) w[i] = (float)psc_rng_uniform(&rng) - 0.5f;
    psc_optim_config_t adam = {.kind = PSC_OPT_ADAM, .learning_rate = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f,
                               .epsilon = 1e-7f};
    ps_model_origin_t origin;
    char err[512];
    assert_int_equal(ps_client_create_model(pc, "00000000000000bb", &adam, w, &origin, err, sizeof err), 0);
    assert_true(origin.initialized);
    for (int r = 0; r < ROUNDS; r++) {
        for (int64_t i = 0; i < nparams; i++) g[i] = (float)psc_rng_uniform(&rng) * 2.0f - 1.0f;
        if (how == PREROUNDED) {
            psc_bf16_encode(g, resid, h, (size_t)nparams);
            for (int64_t i = 0; i < nparams; i++) g[i] = psc_bf16_to_float(h[i]);
        }
        int64_t gs = -1;
        int rc;
        if (r % 3 == 0) {
            rc = ps_client_push_pull(pc, g, w, 1, &gs, err, sizeof err);
        } else if (r % 3 == 1) {
            rc = ps_client_push(pc, g, 2, &gs, err, sizeof err);
            if (rc == 0) memset(w, 0, (size_t)nparams * 4);
            if (rc == 0) rc = ps_client_pull(pc, w, &gs, err, sizeof err);
        } else {
            rc = ps_client_push_pull(pc, g, w, 0, &gs, err, sizeof err);
        }
        if (rc) fail_msg("round %d: %s", r, err);
        memcpy(snap + (size_t)r * (size_t)nparams, w, (size_t)nparams * 4);
        steps[r] = gs;
    }
    free(w);
    free(g);
    free(resid);
    free(h);
    ps_client_destroy(pc);
}

static void assert_same_runs(const float *a, const int64_t *sa, const float *b, const int64_t *sb, const char *what)
{
    for (int r = 0; r < ROUNDS; r++) {
        if (memcmp(a + (size_t)r * (size_t)nparams, b + (size_t)r * (size_t)nparams, (size_t)nparams * 4))
            fail_msg("weights after round %d differ: %s", r, what);
        if (sa[r] != sb[r])
            fail_msg("global_step after round %d: %lld and %lld: %s", r, (long long)sa[r], (long long)sb[r], what);
    }
}

static void test_batched_equals_per_chunk(void **state)
{
    (void)state;
    size_t n = (size_t)nparams * ROUNDS;
    float *a = malloc(n * 4), *b = malloc(n * 4);
    int64_t sa[ROUNDS], sb[ROUNDS];
    run(PSC_BATCH_TENSOR_BYTES, AS_FLOAT32, a, sa);
    release_all();
    run(0, AS_FLOAT32, b, sb);
    release_all();
    assert_same_runs(a, sa, b, sb, "batched and per-chunk calls");
    /* the rounds added 1, 2 (push, then the pull reads it), 0, ... */
    assert_true(sa[ROUNDS - 1] == 2 * (1 + 2 + 0));
    /* and they trained: the weights moved from round to round */
    assert_true(memcmp(a, a + (size_t)nparams, (size_t)nparams * 4) != 0);
    free(a);
    free(b);
}

static void test_bfloat16_pushes(void **state)
{
    (void)state;
    size_t n = (size_t)nparams * ROUNDS;
    float *want = malloc(n * 4), *got = malloc(n * 4), *plain = malloc(n * 4);
    int64_t sw[ROUNDS], sg[ROUNDS], sp[ROUNDS];
    run(0, PREROUNDED, want, sw);
    release_all();
    run(PSC_BATCH_TENSOR_BYTES, AS_BF16, got, sg);
    release_all();
    assert_same_runs(want, sw, got, sg, "bfloat16 pushes (batched) and float32 pushes of the same rounding");
    run(0, AS_BF16, got, sg);
    release_all();
    assert_same_runs(want, sw, got, sg, "bfloat16 pushes (per chunk) and float32 pushes of the same rounding");
    run(0, AS_FLOAT32, plain, sp);
    release_all();
    assert_true(memcmp(plain + n - (size_t)nparams, got + n - (size_t)nparams, (size_t)nparams * 4) != 0);
    free(want);
    free(got);
    free(plain);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batched_equals_per_chunk),
        cmocka_unit_test(test_bfloat16_pushes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
