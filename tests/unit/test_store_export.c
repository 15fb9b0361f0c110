/* test_store_export — checkpoints of a shard (store_ckpt.c).
 *
 * An export names every tensor as TensorFlow does (slots "<var>/Adam",
 * "/Adam_1", ...) plus "<var>/.t", in creation order; exports taken while
 * threads push are consistent cuts (the push fence: values match their update
 * counts, and counters of variables pushed in a fixed order match that order);
 * an import with any bad tensor or fetch error changes nothing, a good one
 * restores an older checkpoint bit for bit (and replaying the same pushes gives
 * the same state), and in sync mode restarts every accumulator at the given
 * step with nothing pending, and presence afresh.
 */
#include "store_fixture.h"

/* ---- checkpoints: export, import ---- */

/* A checkpoint in memory: what store_export emitted, in order. */
typedef struct mem_tensor {
    char name[160];
    void *data;
    size_t len;
} mem_tensor_t;

typedef struct mem_ckpt {
    mem_tensor_t *t;
    int n, cap;
    unsigned delay_us; /* emit sleeps this long per tensor: widens the window a fence must close */
} mem_ckpt_t;

static int mem_emit(void *arg, const char *name, const void *data, size_t len)
{
    mem_ckpt_t *c = arg;
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 16;
        c->t = realloc(c->t, (size_t)c->cap * sizeof *c->t);
        if (!c->t) return PSC_ENOMEM;
    }
    mem_tensor_t *t = &c->t[c->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->len = len;
    t->data = malloc(len ? len : 1);
    if (!t->data) return PSC_ENOMEM;
    memcpy(t->data, data, len);
    if (c->delay_us) {
        struct timespec ts = {0, (long)c->delay_us * 1000L};
        nanosleep(&ts, NULL);
    }
    return 0;
}

static void mem_free(mem_ckpt_t *c)
{
    for (int i = 0; i < c->n; i++) free(c->t[i].data);
    free(c->t);
    memset(c, 0, sizeof *c);
}

static const mem_tensor_t *mem_find(const mem_ckpt_t *c, const char *name)
{
    for (int i = 0; i < c->n; i++)
        if (strcmp(c->t[i].name, name) == 0) return &c->t[i];
    fail_msg("checkpoint has no tensor \"%s\"", name);
    return NULL;
}

static int64_t le64_at(const void *p, size_t i)
{
    const unsigned char *b = (const unsigned char *)p + 8 * i;
    uint64_t u = 0;
    for (int k = 0; k < 8; k++) u |= (uint64_t)b[k] << (8 * k);
    return (int64_t)u;
}

/* Exports s (must succeed) into a fresh *c; returns *step. */
static int64_t export_mem(store_t *s, mem_ckpt_t *c)
{
    char err[256];
    int64_t step = -2;
    unsigned delay = c->delay_us;
    memset(c, 0, sizeof *c);
    c->delay_us = delay;
    int rc = store_export(s, mem_emit, c, -1, &step, err, sizeof err);
    if (rc) fail_msg("export: %s", err);
    return step;
}

/* Two exports are identical: names in order and every byte. */
static void mem_expect_equal(const mem_ckpt_t *a, const mem_ckpt_t *b, const char *what)
{
    if (a->n != b->n) fail_msg("%s: %d tensors vs %d", what, a->n, b->n);
    for (int i = 0; i < a->n; i++) {
        if (strcmp(a->t[i].name, b->t[i].name) != 0)
            fail_msg("%s: tensor %d is \"%s\" vs \"%s\"", what, i, a->t[i].name, b->t[i].name);
        if (a->t[i].len != b->t[i].len || memcmp(a->t[i].data, b->t[i].data, a->t[i].len) != 0)
            fail_msg("%s: tensor \"%s\" differs", what, a->t[i].name);
    }
}

/* A fetch from a mem_ckpt_t, with one fault injected on tensor `bad`. */
enum fetch_fault { FAULT_NONE, FAULT_SHORT, FAULT_LONG, FAULT_MISSING, FAULT_IO, FAULT_NEGATIVE };

typedef struct fetch_arg {
    const mem_ckpt_t *c;
    const char *bad;
    enum fetch_fault fault;
    int calls;
} fetch_arg_t;

static int mem_fetch(void *arg, const char *name, void **data, size_t *len, char *err, size_t errlen)
{
    fetch_arg_t *f = arg;
    f->calls++;
    if (*data) return psc_seterr(err, errlen, PSC_EINVAL, "*data not NULL on entry");
    int hit = f->bad && strcmp(name, f->bad) == 0;
    if (hit && f->fault == FAULT_MISSING) return PSC_ENOTFOUND;
    if (hit && f->fault == FAULT_IO) return psc_seterr(err, errlen, PSC_EIO, "disk on fire reading %s", name);
    for (int i = 0; i < f->c->n; i++) {
        const mem_tensor_t *t = &f->c->t[i];
        if (strcmp(t->name, name) != 0) continue;
        size_t n = t->len;
        if (hit && f->fault == FAULT_SHORT) n -= 4;
        if (hit && f->fault == FAULT_LONG) n += 8;
        unsigned char *p = calloc(1, n ? n : 1);
        assert_non_null(p);
        memcpy(p, t->data, PSC_MIN(n, t->len));
        if (hit && f->fault == FAULT_NEGATIVE) p[n - 1] = 0x80; /* the last int64 turns negative */
        *data = p;
        *len = n;
        return 0;
    }
    return PSC_ENOTFOUND;
}

static int import_mem(store_t *s, const mem_ckpt_t *c, const char *bad, enum fetch_fault fault, int64_t sync_step,
                      char *err, size_t errlen)
{
    fetch_arg_t f = {.c = c, .bad = bad, .fault = fault};
    err[0] = 0;
    return store_import(s, mem_fetch, &f, sync_step, err, errlen);
}

/* Pushes gradient g (the whole variable) chunk by chunk. */
static void push_all(store_t *s, const char *name, const void *g, uint64_t total)
{
    char err[256];
    for (size_t k = 0; k < psc_chunk_count(total); k++) {
        int rc = store_push(s, name, psc_chunk_offset(k), (const char *)g + psc_chunk_offset(k),
                            psc_chunk_len(total, k), total, NULL, NULL, err, sizeof err);
        if (rc) fail_msg("push %s chunk %zu: %s", name, k, err);
    }
}

static psc_optim_config_t adam(void)
{
    return (psc_optim_config_t){
        .kind = PSC_OPT_ADAM, .learning_rate = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .epsilon = 1e-7f};
}

/* Names, order and sizes of an export for each optimizer: the value, TF's slot
 * names, .t; global_step as int64 LE; *step; not ready -> PSC_ENOTREADY. */
static void test_export_names(void **state)
{
    (void)state;
    char err[256];
    static const struct {
        psc_optim_config_t opt;
        const char *slots[2];
    } cases[] = {
        {{.kind = PSC_OPT_SGD, .learning_rate = 0.1f}, {NULL, NULL}},
        {{.kind = PSC_OPT_MOMENTUM, .learning_rate = 0.1f, .momentum = 0.9f}, {"Momentum", NULL}},
        {{.kind = PSC_OPT_ADAGRAD, .learning_rate = 0.1f, .initial_accumulator_value = 0.1f}, {"Adagrad", NULL}},
        {{.kind = PSC_OPT_ADAM, .learning_rate = 0.1f, .beta1 = 0.9f, .beta2 = 0.999f, .epsilon = 1e-7f},
         {"Adam", "Adam_1"}},
        {{.kind = PSC_OPT_RMSPROP, .learning_rate = 0.1f, .decay = 0.9f, .momentum = 0.5f, .epsilon = 1e-10f},
         {"RMSProp", "RMSProp_1"}},
    };
    for (size_t c = 0; c < PSC_ARRAY_LEN(cases); c++) {
        fixture_t f;
        fixture_setup(&f, &cases[c].opt, 0);
        mem_ckpt_t m = {0};
        int64_t step = 7;
        assert_int_equal(store_export(f.s, mem_emit, &m, -1, &step, err, sizeof err), PSC_ENOTREADY);
        assert_non_null(strstr(err, "not ready"));
        assert_int_equal(step, -1);
        assert_int_equal(m.n, 0);
        assert_int_equal(store_step_add(f.s, 0x123456789LL, NULL, err, sizeof err), 0);
        assert_int_equal(store_set_ready(f.s, JOB, err, sizeof err), 0);
        float g[256];
        for (int i = 0; i < 256; i++) g[i] = 0.25f;
        push_all(f.s, "dense/bias", g, sizeof g);
        push_all(f.s, "dense/bias", g, sizeof g);
        assert_int_equal(export_mem(f.s, &m), 0x123456789LL);

        int ns = cases[c].slots[1] ? 2 : cases[c].slots[0] ? 1 : 0, at = 0;
        assert_int_equal(m.n, 1 + 3 * (2 + ns));
        assert_string_equal(m.t[at].name, "global_step");
        assert_int_equal(m.t[at].len, 8);
        assert_int_equal(le64_at(m.t[at].data, 0), 0x123456789LL);
        at++;
        for (int i = 1; i < NSPECS; i++) {
            uint64_t b = spec_bytes(&SPECS[i]);
            char want[160];
            assert_string_equal(m.t[at].name, SPECS[i].name);
            assert_int_equal(m.t[at].len, b);
            if (i != 2) assert_memory_equal(m.t[at].data, f.init[i], b); /* dense/bias was pushed */
            at++;
            for (int k = 0; k < ns; k++, at++) {
                snprintf(want, sizeof want, "%s/%s", SPECS[i].name, cases[c].slots[k]);
                assert_string_equal(m.t[at].name, want);
                assert_int_equal(m.t[at].len, b);
            }
            snprintf(want, sizeof want, "%s/.t", SPECS[i].name);
            assert_string_equal(m.t[at].name, want);
            assert_int_equal(m.t[at].len, 8 * psc_chunk_count(b));
            for (size_t k = 0; k < psc_chunk_count(b); k++)
                assert_int_equal(le64_at(m.t[at].data, k), i == 2 ? 2 : 0);
            at++;
        }
        /* RMSProp: slot 0 is ms (starts at 1, here 1 + (g^2 - 1)(1 - rho) after
         * one push, < 1), slot 1 is mom (> 0 after pushes of g > 0). */
        if (cases[c].opt.kind == PSC_OPT_RMSPROP) {
            const float *ms = mem_find(&m, "dense/bias/RMSProp")->data;
            const float *mom = mem_find(&m, "dense/bias/RMSProp_1")->data;
            assert_true(ms[0] < 1.0f && ms[0] > 0.5f);
            assert_true(mom[0] > 0.0f && mom[0] < 0.5f);
            assert_true(((const float *)mem_find(&m, "dense/kernel/RMSProp")->data)[0] == 1.0f);
        }
        mem_free(&m);
        fixture_teardown(&f);
    }
}

/* Import is all or nothing: a tensor that is short, long, missing or has a
 * negative count, or a fetch error, changes nothing (values, slots, t,
 * versions, global_step: the export before equals the export after). A good
 * import restores an older checkpoint over newer values bit for bit, bumps
 * every version by one and marks a store ready. */
static void test_import_all_or_nothing(void **state)
{
    (void)state;
    char err[256];
    psc_optim_config_t opt = adam();
    fixture_t f;
    fixture_setup(&f, &opt, 1);
    const uint64_t bb = spec_bytes(&SPECS[3]);
    float *g1 = random_floats(bb / 4, 901), *g2 = random_floats(bb / 4, 902);
    push_all(f.s, "big/kernel", g1, bb);
    push_all(f.s, "dense/bias", g1, 1024);
    assert_int_equal(store_step_add(f.s, 10, NULL, err, sizeof err), 0);
    mem_ckpt_t old = {0}, now = {0}, after = {0};
    assert_int_equal(export_mem(f.s, &old), 10);
    /* newer state: more pushes, another step */
    push_all(f.s, "big/kernel", g2, bb);
    assert_int_equal(store_push(f.s, "big/kernel", 0, g1, 2 * MiB, bb, NULL, NULL, err, sizeof err), 0);
    assert_int_equal(store_step_add(f.s, 5, NULL, err, sizeof err), 0);
    export_mem(f.s, &now);
    store_var_info_t *info0, *info1;
    int n0, n1;
    assert_int_equal(store_list(f.s, &info0, &n0), 0);

    static const struct {
        const char *bad;
        enum fetch_fault fault;
        int code;
        const char *msg;
    } faults[] = {
        {"big/kernel/.t", FAULT_SHORT, PSC_EMISMATCH, "big/kernel/.t"}, /* the last tensor: all others read */
        {"big/kernel/Adam_1", FAULT_LONG, PSC_EMISMATCH, "big/kernel/Adam_1"},
        {"global_step", FAULT_SHORT, PSC_EMISMATCH, "global_step"},
        {"dense/bias/Adam", FAULT_MISSING, PSC_EMISMATCH, "dense/bias/Adam"},
        {"dense/kernel", FAULT_IO, PSC_EIO, "disk on fire reading dense/kernel"},
        {"big/kernel/.t", FAULT_NEGATIVE, PSC_ECORRUPT, "big/kernel/.t"},
        {"global_step", FAULT_NEGATIVE, PSC_ECORRUPT, "global_step"},
    };
    for (size_t i = 0; i < PSC_ARRAY_LEN(faults); i++) {
        store_stats_t st0, st1;
        store_get_stats(f.s, &st0);
        int rc = import_mem(f.s, &old, faults[i].bad, faults[i].fault, 0, err, sizeof err);
        if (rc != faults[i].code)
            fail_msg("fault %zu on %s: got %d (%s) \"%s\"", i, faults[i].bad, rc, psc_strerror(rc), err);
        if (!strstr(err, faults[i].msg)) fail_msg("fault %zu: \"%s\" does not name %s", i, err, faults[i].msg);
        store_get_stats(f.s, &st1);
        assert_int_equal(st1.rejected, st0.rejected + (faults[i].code == PSC_EIO ? 0 : 1));
        export_mem(f.s, &after);
        mem_expect_equal(&now, &after, faults[i].bad);
        mem_free(&after);
        assert_int_equal(store_list(f.s, &info1, &n1), 0);
        for (int j = 0; j < n0; j++) assert_int_equal(info1[j].version, info0[j].version);
        free(info1);
    }
    assert_int_equal(import_mem(f.s, &old, NULL, FAULT_NONE, -1, err, sizeof err), PSC_EINVAL);
    assert_int_equal(store_import(f.s, NULL, NULL, 0, err, sizeof err), PSC_EINVAL);

    /* The good one: back to the older checkpoint. */
    assert_int_equal(import_mem(f.s, &old, NULL, FAULT_NONE, 0, err, sizeof err), 0);
    assert_int_equal(export_mem(f.s, &after), 10);
    mem_expect_equal(&old, &after, "restored");
    mem_free(&after);
    assert_int_equal(store_list(f.s, &info1, &n1), 0);
    for (int j = 0; j < n0; j++) assert_int_equal(info1[j].version, info0[j].version + 1);
    free(info1);
    /* and training goes on from there exactly as it did the first time */
    push_all(f.s, "big/kernel", g2, bb);
    assert_int_equal(store_push(f.s, "big/kernel", 0, g1, 2 * MiB, bb, NULL, NULL, err, sizeof err), 0);
    assert_int_equal(store_step_add(f.s, 5, NULL, err, sizeof err), 0);
    export_mem(f.s, &after);
    mem_expect_equal(&now, &after, "replayed");
    mem_free(&after);

    /* A fresh store: import makes it ready; no job -> PSC_ENOTFOUND. */
    store_t *s2 = store_create();
    assert_int_equal(import_mem(s2, &old, NULL, FAULT_NONE, 0, err, sizeof err), PSC_ENOTFOUND);
    int created;
    assert_int_equal(store_create_vars(s2, JOB, &opt, SPECS, NSPECS, &created, err, sizeof err), 0);
    assert_int_equal(store_is_ready(s2, NULL), 0);
    assert_int_equal(import_mem(s2, &old, NULL, FAULT_NONE, 0, err, sizeof err), 0);
    assert_int_equal(store_is_ready(s2, NULL), 1);
    export_mem(s2, &after);
    mem_expect_equal(&old, &after, "fresh store");
    mem_free(&after);
    assert_int_equal(version_of(s2, "big/kernel"), 1);
    store_destroy(s2);

    free(info0);
    mem_free(&old);
    mem_free(&now);
    free(g1);
    free(g2);
    fixture_teardown(&f);
}

/* Sync mode: import restarts every accumulator at sync_step with nothing
 * pending (global_step's at its restored value) and presence from scratch. A
 * contribution that was stale before the restore is current after it; one
 * pending before it is gone. */
static void test_import_sync_resets(void **state)
{
    (void)state;
    char err[256];
    const float lr = 0.5f;
    psc_optim_config_t opt = sgd(lr);
    fixture_t f;
    fixture_setup(&f, &opt, 1);
    store_t *s = f.s;
    sync_on(s, 2, 2, 30.0);
    const size_t nb = 256;
    float *g[4];
    for (int i = 0; i < 4; i++) g[i] = random_floats(nb, 1000 + (uint32_t)i);
    double now = 100.0;
    for (int64_t k = 0; k < 3; k++, now += 1) {
        push_sync(s, "dense/bias", 0, g[0], nb * 4, nb * 4, k, 1, 0, now, NULL);
        assert_int_equal(push_sync(s, "dense/bias", 0, g[1], nb * 4, nb * 4, k, 1, 1, now, NULL).applied, 1);
        step_sync(s, k, 1, 0, now);
        assert_int_equal(step_sync(s, k, 1, 1, now).applied, 1);
    }
    mem_ckpt_t ck = {0};
    assert_int_equal(export_mem(s, &ck), 3); /* chunk step 3, global_step 3 */
    const float *w3 = mem_find(&ck, "dense/bias")->data;
    for (int64_t k = 3; k < 5; k++, now += 1) {
        push_sync(s, "dense/bias", 0, g[0], nb * 4, nb * 4, k, 1, 0, now, NULL);
        push_sync(s, "dense/bias", 0, g[1], nb * 4, nb * 4, k, 1, 1, now, NULL);
        step_sync(s, k, 1, 0, now);
        step_sync(s, k, 1, 1, now);
    }
    assert_int_equal(chunk_step(s, "dense/bias", 0), 5);
    /* pending at step 5, worker 1 gone, the clock running since 100 */
    assert_int_equal(push_sync(s, "dense/bias", 0, g[2], nb * 4, nb * 4, 5, 1, 0, now, NULL).applied, 0);
    store_sync_worker_left(s, 1);
    assert_int_equal(store_sync_present(s, 1000.0, NULL), 0);
    assert_int_equal(push_sync(s, "dense/bias", 0, g[2], nb * 4, nb * 4, 3, 1, 0, now, NULL).stale, 1);
    int64_t v0 = version_of(s, "dense/bias");

    assert_int_equal(import_mem(s, &ck, NULL, FAULT_NONE, 3, err, sizeof err), 0);
    assert_int_equal(version_of(s, "dense/bias"), v0 + 1);
    uint32_t needed = 0;
    assert_int_equal(store_sync_present(s, 1000.0, &needed), 2); /* nobody left, clock not started */
    assert_int_equal(needed, 2);
    assert_int_equal(chunk_step(s, "dense/bias", 0), 3);
    assert_int_equal(chunk_step(s, "big/kernel", 4 * MiB), 3);
    int64_t gs;
    assert_int_equal(store_step_get(s, &gs), 1);
    assert_int_equal(gs, 3);

    /* Local step 3 was stale a moment ago; now it is current, and the pending
     * step-5 contribution is gone: one contribution does not apply. */
    float want[256], got[256];
    store_sync_result_t r = push_sync(s, "dense/bias", 0, g[2], nb * 4, nb * 4, 3, 1, 1, 1001.0, NULL);
    assert_int_equal(r.stale, 0);
    assert_int_equal(r.applied, 0);
    r = push_sync(s, "dense/bias", 0, g[3], nb * 4, nb * 4, 3, 1, 0, 1001.0, NULL);
    assert_int_equal(r.applied, 1);
    assert_int_equal(r.step, 4);
    for (size_t j = 0; j < nb; j++) want[j] = w3[j] - ((g[2][j] + g[3][j]) / 2.0f) * lr;
    pull_all(s, "dense/bias", got, sizeof got);
    assert_memory_equal(got, want, sizeof want);
    /* global_step's accumulator restarted at the restored value */
    assert_int_equal(step_sync(s, 2, 1, 0, 1001.0).stale, 1);
    assert_int_equal(step_sync(s, 3, 1, 0, 1001.0).applied, 0);
    assert_int_equal(step_sync(s, 3, 1, 1, 1001.0).applied, 1);
    assert_int_equal(store_step_get(s, &gs), 1);
    assert_int_equal(gs, 4);

    /* Pending at the very step an import restarts at: the count is reset too. */
    assert_int_equal(push_sync(s, "dense/bias", 0, g[0], nb * 4, nb * 4, 4, 1, 0, 1002.0, NULL).applied, 0);
    assert_int_equal(import_mem(s, &ck, NULL, FAULT_NONE, 4, err, sizeof err), 0);
    assert_int_equal(chunk_step(s, "dense/bias", 0), 4);
    assert_int_equal(push_sync(s, "dense/bias", 0, g[1], nb * 4, nb * 4, 4, 1, 1, 1003.0, NULL).applied, 0);
    r = push_sync(s, "dense/bias", 0, g[2], nb * 4, nb * 4, 4, 1, 0, 1003.0, NULL);
    assert_int_equal(r.applied, 1);
    for (size_t j = 0; j < nb; j++) want[j] = w3[j] - ((g[1][j] + g[2][j]) / 2.0f) * lr;
    pull_all(s, "dense/bias", got, sizeof got);
    assert_memory_equal(got, want, sizeof want);
    assert_int_equal(store_step_get(s, &gs), 1);
    assert_int_equal(gs, 3);
    assert_int_equal(step_sync(s, 3, 1, 0, 1003.0).stale, 0);

    mem_free(&ck);
    for (int i = 0; i < 4; i++) free(g[i]);
    fixture_teardown(&f);
}

/* The push fence. Pushers run while exports (whose emit sleeps on every tensor,
 * so an unfenced export would see many updates land mid-way) take cuts. With
 * SGD, g = 1 and lr = 2^-10 every value is exactly -t/1024, so each cut must
 * satisfy, for every variable and chunk, value == -t/1024 (value and .t are one
 * point); and the orders the pushers follow bound the counters of different
 * variables against each other:
 *   pair:   push a chunk 0, a chunk 1, b  ->  t_b <= t_a1 <= t_a0 <= t_b + 1
 *   stepper: push solo, step_add 1         ->  step <= t_solo <= step + 1
 *   two threads push `shared` (values only). */
#define FENCE_A ((int64_t)5 << 17) /* 2.5 MiB: two wire chunks */
#define FENCE_N 1024

typedef struct fence_arg {
    store_t *s;
    int role; /* 0 pair, 1 stepper, 2 shared */
    atomic_int *stop;
    int failed;
} fence_arg_t;

static void *fence_pusher(void *p)
{
    fence_arg_t *a = p;
    char err[256];
    const uint64_t ab = (uint64_t)FENCE_A * 4;
    float *ones = malloc(ab);
    if (!ones) {
        a->failed = 1;
        return NULL;
    }
    for (int64_t i = 0; i < FENCE_A; i++) ones[i] = 1.0f;
    const size_t nb = FENCE_N * 4;
    while (!atomic_load(a->stop) && !a->failed) {
        if (a->role == 0) {
            a->failed |= store_push(a->s, "pair/a", 0, ones, 2 * MiB, ab, NULL, NULL, err, sizeof err) != 0;
            a->failed |= store_push(a->s, "pair/a", 2 * MiB, ones, ab - 2 * MiB, ab, NULL, NULL, err, sizeof err) != 0;
            a->failed |= store_push(a->s, "pair/b", 0, ones, nb, nb, NULL, NULL, err, sizeof err) != 0;
        } else if (a->role == 1) {
            a->failed |= store_push(a->s, "solo", 0, ones, nb, nb, NULL, NULL, err, sizeof err) != 0;
            a->failed |= store_step_add(a->s, 1, NULL, err, sizeof err) != 0;
        } else {
            a->failed |= store_push(a->s, "shared", 0, ones, nb, nb, NULL, NULL, err, sizeof err) != 0;
        }
    }
    if (a->failed) print_error("pusher %d: %s\n", a->role, err);
    free(ones);
    return NULL;
}

/* The values of `name` are -t[k]/1024 on every chunk k; returns t[0]. */
static int64_t fence_check_var(const mem_ckpt_t *m, const char *name, int cut)
{
    char tn[160];
    snprintf(tn, sizeof tn, "%s/.t", name);
    const mem_tensor_t *w = mem_find(m, name), *t = mem_find(m, tn);
    const float *v = w->data;
    for (size_t i = 0; i < w->len / 4; i++) {
        int64_t tk = le64_at(t->data, i / (PSC_CHUNK_BYTES / 4));
        if (v[i] != -(float)tk / 1024)
            fail_msg("cut %d: %s[%zu] = %.9g but its chunk's t = %lld: not one point", cut, name, i, (double)v[i],
                     (long long)tk);
    }
    return le64_at(t->data, 0);
}

static void test_export_fence(void **state)
{
    (void)state;
    char err[256];
    psc_optim_config_t opt = sgd(1.0f / 1024);
    static const store_var_spec_t specs[] = {
        {.name = "global_step", .is_step = 1},
        {.name = "pair/a", .rank = 1, .shape = {FENCE_A}},
        {.name = "pair/b", .rank = 1, .shape = {FENCE_N}},
        {.name = "solo", .rank = 1, .shape = {FENCE_N}},
        {.name = "shared", .rank = 1, .shape = {FENCE_N}},
    };
    store_t *s = store_create();
    int created;
    assert_int_equal(store_create_vars(s, JOB, &opt, specs, 5, &created, err, sizeof err), 0);
    assert_int_equal(store_set_ready(s, JOB, err, sizeof err), 0);
    atomic_int stop;
    atomic_init(&stop, 0);
    pthread_t th[4];
    fence_arg_t args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (fence_arg_t){.s = s, .role = i < 3 ? i : 2, .stop = &stop};
        assert_int_equal(pthread_create(&th[i], NULL, fence_pusher, &args[i]), 0);
    }
    /* wait until every pusher is going */
    int64_t tb = 0, gs = 0, tsh = 0;
    do {
        store_chunk_read(s, "pair/b", 0, 0, NULL, &tb, NULL, err, sizeof err);
        store_chunk_read(s, "shared", 0, 0, NULL, &tsh, NULL, err, sizeof err);
        store_step_get(s, &gs);
    } while (tb < 3 || gs < 3 || tsh < 3);

    int64_t first_tb = -1, last_tb = -1;
    for (int cut = 0; cut < 12; cut++) {
        mem_ckpt_t m = {.delay_us = 300};
        int64_t step = export_mem(s, &m);
        assert_int_equal(m.n, 1 + 4 * 2);
        int64_t g = le64_at(mem_find(&m, "global_step")->data, 0);
        assert_int_equal(step, g);
        int64_t ta0 = fence_check_var(&m, "pair/a", cut);
        int64_t ta1 = le64_at(mem_find(&m, "pair/a/.t")->data, 1);
        int64_t b = fence_check_var(&m, "pair/b", cut);
        int64_t solo = fence_check_var(&m, "solo", cut);
        fence_check_var(&m, "shared", cut);
        if (!(b <= ta1 && ta1 <= ta0 && ta0 <= b + 1))
            fail_msg("cut %d: t(a0, a1, b) = (%lld, %lld, %lld) is no point of the pair's sequence", cut,
                     (long long)ta0, (long long)ta1, (long long)b);
        if (!(g <= solo && solo <= g + 1))
            fail_msg("cut %d: t(solo) = %lld with global_step %lld", cut, (long long)solo, (long long)g);
        if (first_tb < 0) first_tb = b;
        last_tb = b;
        mem_free(&m);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(args[i].failed, 0);
    }
    assert_true(last_tb > first_tb); /* the pushers did run between the cuts */
    store_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_export_names),
        cmocka_unit_test(test_import_all_or_nothing),
        cmocka_unit_test(test_import_sync_resets),
        cmocka_unit_test(test_export_fence),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
