/* test_store — the PS variable store (store.c).
 *
 * Round trips (create, assign chunk by chunk, ready, pull) are bit-exact for a
 * one-chunk, a three-chunk (5 MiB) variable and global_step. Pushes apply SGD
 * exactly and bump versions; Adam's t is counted per wire chunk; a gradient in
 * segments split anywhere applies like one buffer. Every invalid request (and
 * the checks a Batch runs first) returns its code and a message naming the
 * problem, and a full snapshot (values, versions, global_step, counters) taken
 * before and after is identical but for `rejected` + 1. Concurrent pushes lose
 * no update. Sync-replica mode: test_store_sync; export and import:
 * test_store_export.
 */
#include "store_fixture.h"

/* ---- tests ---- */

static void test_round_trip(void **state)
{
    (void)state;
    char err[256];
    psc_optim_config_t opt = sgd(0.5f);
    fixture_t f;
    fixture_setup(&f, &opt, 0);

    /* Pull before ready. */
    float tmp[4];
    assert_int_equal(store_pull(f.s, "dense/bias", 0, 16, tmp, NULL, err, sizeof err), PSC_ENOTREADY);
    assert_non_null(strstr(err, "not ready"));
    char job[17] = "x";
    assert_int_equal(store_is_ready(f.s, job), 0);
    assert_string_equal(job, JOB);

    /* global_step: 8 bytes of little-endian int64. */
    unsigned char le[8];
    int64_t gs = 0x0102030405060708LL;
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)((uint64_t)gs >> (8 * i));
    assert_int_equal(store_assign(f.s, "global_step", 0, le, 8, 8, err, sizeof err), 0);

    /* A second create with the same specs changes nothing. */
    int created = -1;
    assert_int_equal(store_create_vars(f.s, JOB, &opt, SPECS, NSPECS, &created, err, sizeof err), 0);
    assert_int_equal(created, 0);

    assert_int_equal(store_set_ready(f.s, JOB, err, sizeof err), 0);
    assert_int_equal(store_is_ready(f.s, job), 1);
    assert_string_equal(job, JOB);
    assert_int_equal(store_set_ready(f.s, JOB, err, sizeof err), 0); /* idempotent */

    for (int i = 0; i < NSPECS; i++) {
        uint64_t b = spec_bytes(&SPECS[i]);
        void *got = calloc(1, b);
        pull_all(f.s, SPECS[i].name, got, b);
        if (SPECS[i].is_step)
            assert_memory_equal(got, le, 8);
        else
            assert_memory_equal(got, f.init[i], b);
        free(got);
    }
    int64_t step = 0;
    assert_int_equal(store_step_get(f.s, &step), 1);
    assert_int_equal(step, gs);

    /* A pull of part of a chunk is fine too. */
    float part[3];
    int64_t ver = -1;
    assert_int_equal(store_pull(f.s, "big/kernel", 4 * MiB + 8, 12, part, &ver, err, sizeof err), 0);
    assert_memory_equal(part, (char *)f.init[3] + 4 * MiB + 8, 12);
    assert_int_equal(ver, 3); /* three chunks assigned */

    /* list: creation order, shapes, sizes, versions = chunks assigned */
    store_var_info_t *info;
    int n;
    assert_int_equal(store_list(f.s, &info, &n), 0);
    assert_int_equal(n, NSPECS);
    for (int i = 0; i < NSPECS; i++) {
        assert_string_equal(info[i].name, SPECS[i].name);
        assert_int_equal(info[i].rank, SPECS[i].rank);
        assert_int_equal(info[i].bytes, spec_bytes(&SPECS[i]));
        assert_int_equal(info[i].is_step, SPECS[i].is_step);
        assert_int_equal(info[i].version, (int64_t)psc_chunk_count(spec_bytes(&SPECS[i])));
        for (int d = 0; d < SPECS[i].rank; d++) assert_int_equal(info[i].shape[d], SPECS[i].shape[d]);
    }
    free(info);

    store_stats_t st;
    store_get_stats(f.s, &st);
    assert_int_equal(st.applied, 0);
    assert_int_equal(st.rejected, 1); /* the pull before ready */
    assert_int_equal(st.pulls, 1 + 1 + 1 + 3 + 1);
    fixture_teardown(&f);
}

static void test_create_conflicts(void **state)
{
    (void)state;
    char err[256];
    psc_optim_config_t opt = sgd(0.5f);
    fixture_t f;
    fixture_setup(&f, &opt, 1);
    store_t *s = f.s;
    int created = -1;

    store_var_spec_t v[NSPECS];
    memcpy(v, SPECS, sizeof v);
    v[1].shape[1] = 128;
    EXPECT_REFUSED(s, PSC_EMISMATCH, "dense/kernel: shape (784, 128) differs from existing (784, 256)",
                   store_create_vars(s, JOB, &opt, v, NSPECS, &created, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EEXISTS, "variables exist for job " JOB "; refusing job " OTHER_JOB,
                   store_create_vars(s, OTHER_JOB, &opt, SPECS, NSPECS, &created, err, sizeof err));
    /* A subset or a superset of the existing variables is a mismatch too. */
    EXPECT_REFUSED(s, PSC_EMISMATCH, "request declares 3 variables, 4 exist",
                   store_create_vars(s, JOB, &opt, SPECS, NSPECS - 1, &created, err, sizeof err));
    store_var_spec_t more[NSPECS + 1];
    memcpy(more, SPECS, sizeof SPECS);
    more[NSPECS] = (store_var_spec_t){.name = "extra/bias", .rank = 1, .shape = {3}};
    EXPECT_REFUSED(s, PSC_EMISMATCH, "extra/bias: not among",
                   store_create_vars(s, JOB, &opt, more, NSPECS + 1, &created, err, sizeof err));
    psc_optim_config_t adam = {.kind = PSC_OPT_ADAM, .learning_rate = 0.5f, .beta1 = 0.9f, .beta2 = 0.999f};
    EXPECT_REFUSED(s, PSC_EMISMATCH, "optimizer settings differ",
                   store_create_vars(s, JOB, &adam, SPECS, NSPECS, &created, err, sizeof err));
    memcpy(v, SPECS, sizeof v);
    v[2].is_step = 0;
    v[0].is_step = 0;
    v[0].rank = 0;
    EXPECT_REFUSED(s, PSC_EMISMATCH, "global_step: declared trainable",
                   store_create_vars(s, JOB, &opt, v, NSPECS, &created, err, sizeof err));
    EXPECT_REFUSED(s, PSC_ENOTFOUND, "no variables created for job " OTHER_JOB,
                   store_set_ready(s, OTHER_JOB, err, sizeof err));

    /* Same request again: accepted, nothing created, values untouched. */
    created = -1;
    assert_int_equal(store_create_vars(s, JOB, &opt, SPECS, NSPECS, &created, err, sizeof err), 0);
    assert_int_equal(created, 0);
    float *got = malloc(spec_bytes(&SPECS[3]));
    pull_all(s, "big/kernel", got, spec_bytes(&SPECS[3]));
    assert_memory_equal(got, f.init[3], spec_bytes(&SPECS[3]));
    free(got);
    fixture_teardown(&f);
}

static void test_create_invalid(void **state)
{
    (void)state;
    char err[256];
    psc_optim_config_t opt = sgd(0.5f);
    store_t *s = store_create();
    int created = -1;

    store_var_spec_t dup[] = {
        {.name = "a", .rank = 1, .shape = {4}},
        {.name = "b", .rank = 1, .shape = {4}},
        {.name = "a", .rank = 1, .shape = {4}},
    };
    EXPECT_REFUSED(s, PSC_EINVAL, "a: declared twice",
                   store_create_vars(s, JOB, &opt, dup, 3, &created, err, sizeof err));
    store_var_spec_t zero[] = {{.name = "k", .rank = 2, .shape = {3, 0}}};
    EXPECT_REFUSED(s, PSC_EINVAL, "k: shape (3, 0) has a dimension <= 0",
                   store_create_vars(s, JOB, &opt, zero, 1, &created, err, sizeof err));
    store_var_spec_t neg[] = {{.name = "k", .rank = 1, .shape = {-2}}};
    EXPECT_REFUSED(s, PSC_EINVAL, "k: shape (-2,) has a dimension <= 0",
                   store_create_vars(s, JOB, &opt, neg, 1, &created, err, sizeof err));
    store_var_spec_t step1[] = {{.name = "global_step", .rank = 1, .shape = {1}, .is_step = 1}};
    EXPECT_REFUSED(s, PSC_EINVAL, "global_step: a step counter must be a scalar",
                   store_create_vars(s, JOB, &opt, step1, 1, &created, err, sizeof err));
    store_var_spec_t rank5[] = {{.name = "k", .rank = 5}};
    EXPECT_REFUSED(s, PSC_EINVAL, "k: rank 5", store_create_vars(s, JOB, &opt, rank5, 1, &created, err, sizeof err));
    char longname[200];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    store_var_spec_t lng[] = {{.name = longname, .rank = 1, .shape = {1}}};
    EXPECT_REFUSED(s, PSC_EINVAL, "at most 111", store_create_vars(s, JOB, &opt, lng, 1, &created, err, sizeof err));
    store_var_spec_t two_steps[] = {{.name = "s1", .is_step = 1}, {.name = "s2", .is_step = 1}};
    EXPECT_REFUSED(s, PSC_EINVAL, "2 step counters",
                   store_create_vars(s, JOB, &opt, two_steps, 2, &created, err, sizeof err));
    psc_optim_config_t bad = {.kind = PSC_OPT_ADAM, .learning_rate = 0.1f, .beta1 = 1.0f, .beta2 = 0.999f};
    EXPECT_REFUSED(s, PSC_EINVAL, "adam beta1 1 must be in [0, 1)",
                   store_create_vars(s, JOB, &bad, SPECS, NSPECS, &created, err, sizeof err));
    psc_optim_config_t lr0 = sgd(0.0f);
    EXPECT_REFUSED(s, PSC_EINVAL, "learning_rate",
                   store_create_vars(s, JOB, &lr0, SPECS, NSPECS, &created, err, sizeof err));

    /* Before any create: nothing to pull, push, assign, ready or step. */
    float x[4] = {0};
    int64_t v = 0;
    EXPECT_REFUSED(s, PSC_ENOTREADY, "model not ready (no job created yet)",
                   store_pull(s, "a", 0, 16, x, &v, err, sizeof err));
    EXPECT_REFUSED(s, PSC_ENOTREADY, "model not ready (no job created yet)",
                   store_push(s, "a", 0, x, 16, 16, NULL, &v, err, sizeof err));
    EXPECT_REFUSED(s, PSC_ENOTFOUND, "unknown variable \"a\"", store_assign(s, "a", 0, x, 16, 16, err, sizeof err));
    EXPECT_REFUSED(s, PSC_ENOTFOUND, "no variables created for job", store_set_ready(s, JOB, err, sizeof err));
    EXPECT_REFUSED(s, PSC_ENOTFOUND, "holds no global_step", store_step_add(s, 1, &v, err, sizeof err));
    assert_int_equal(store_step_get(s, &v), 0);

    /* None of that created anything: a valid create still creates. */
    created = -1;
    assert_int_equal(store_create_vars(s, JOB, &opt, SPECS, NSPECS, &created, err, sizeof err), 0);
    assert_int_equal(created, 1);
    store_stats_t st;
    store_get_stats(s, &st);
    assert_int_equal(st.rejected, 14);
    store_destroy(s);

    /* A PS that holds nothing. */
    s = store_create();
    assert_int_equal(store_create_vars(s, JOB, &opt, NULL, 0, &created, err, sizeof err), 0);
    assert_int_equal(created, 1);
    assert_int_equal(store_set_ready(s, JOB, err, sizeof err), 0);
    assert_int_equal(store_create_vars(s, JOB, &opt, NULL, 0, &created, err, sizeof err), 0);
    assert_int_equal(created, 0);
    store_destroy(s);
    store_destroy(NULL);
}

static void test_invalid_requests_change_nothing(void **state)
{
    (void)state;
    char err[256];
    psc_optim_config_t opt = sgd(0.5f);
    fixture_t f;
    fixture_setup(&f, &opt, 1);
    store_t *s = f.s;
    int64_t v = 0;
    uint64_t kb = spec_bytes(&SPECS[1]), bb = spec_bytes(&SPECS[3]);
    float *g = random_floats(bb / 4, 99);
    float *out = malloc(bb);

    EXPECT_REFUSED(s, PSC_ENOTFOUND, "unknown variable \"dense/kernal\"",
                   store_push(s, "dense/kernal", 0, g, kb, kb, NULL, &v, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EMISMATCH, "dense/kernel: gradient is 1000 bytes, variable is 802816 bytes",
                   store_push(s, "dense/kernel", 0, g, 1000, 1000, NULL, &v, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EINVAL,
                   "dense/kernel: chunk of 802804 bytes at offset 12 is not a wire chunk (chunks are 2097152 bytes)",
                   store_push(s, "dense/kernel", 12, g, kb - 12, kb, NULL, &v, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EINVAL, "not a wire chunk",
                   store_push(s, "dense/kernel", 0, g, kb - 4, kb, NULL, &v, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EINVAL, "not a wire chunk", /* short middle chunk */
                   store_push(s, "big/kernel", 2 * MiB, g, MiB, bb, NULL, &v, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EINVAL, "not a wire chunk", /* last chunk too long */
                   store_push(s, "big/kernel", 4 * MiB, g, 2 * MiB, bb, NULL, &v, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EINVAL, "not a wire chunk", /* past the end */
                   store_push(s, "big/kernel", 6 * MiB, g, MiB, bb, NULL, &v, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EINVAL, "global_step is not trainable; use Step",
                   store_push(s, "global_step", 0, g, 8, 8, NULL, &v, err, sizeof err));

    /* Non-finite values anywhere in a chunk, index within the variable. */
    float bias[256];
    memcpy(bias, g, sizeof bias);
    bias[17] = NAN;
    EXPECT_REFUSED(s, PSC_EINVAL, "dense/bias: gradient has a non-finite value at index 17",
                   store_push(s, "dense/bias", 0, bias, sizeof bias, sizeof bias, out, &v, err, sizeof err));
    bias[17] = g[17];
    bias[255] = -INFINITY;
    EXPECT_REFUSED(s, PSC_EINVAL, "dense/bias: gradient has a non-finite value at index 255",
                   store_push(s, "dense/bias", 0, bias, sizeof bias, sizeof bias, out, &v, err, sizeof err));
    float *chunk1 = g + (2 * MiB / 4);
    float keep = chunk1[5];
    chunk1[5] = INFINITY;
    EXPECT_REFUSED(s, PSC_EINVAL, "big/kernel: gradient has a non-finite value at index 524293",
                   store_push(s, "big/kernel", 2 * MiB, chunk1, 2 * MiB, bb, NULL, &v, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EINVAL, "big/kernel: assigned data has a non-finite value at index 524293",
                   store_assign(s, "big/kernel", 2 * MiB, chunk1, 2 * MiB, bb, err, sizeof err));
    chunk1[5] = keep;

    /* Assign: the same rules; global_step takes exactly 8 bytes >= 0. */
    EXPECT_REFUSED(s, PSC_ENOTFOUND, "unknown variable \"nope\"",
                   store_assign(s, "nope", 0, g, 16, 16, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EMISMATCH, "dense/bias: assigned data is 1020 bytes, variable is 1024 bytes",
                   store_assign(s, "dense/bias", 0, g, 1020, 1020, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EINVAL, "not a wire chunk",
                   store_assign(s, "big/kernel", 4, g, 2 * MiB, bb, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EMISMATCH, "global_step: assigned data is 4 bytes, variable is 8 bytes",
                   store_assign(s, "global_step", 0, g, 4, 4, err, sizeof err));
    unsigned char minus1[8];
    memset(minus1, 0xff, 8);
    EXPECT_REFUSED(s, PSC_EINVAL, "global_step: value -1 is negative",
                   store_assign(s, "global_step", 0, minus1, 8, 8, err, sizeof err));

    /* Pull: unknown, out of range, more than a chunk. */
    EXPECT_REFUSED(s, PSC_ENOTFOUND, "unknown variable \"dense/kernal\"",
                   store_pull(s, "dense/kernal", 0, 16, out, &v, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EINVAL, "dense/bias: pull of 8 bytes at offset 1020 is outside its 1024 bytes",
                   store_pull(s, "dense/bias", 1020, 8, out, &v, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EINVAL, "exceeds the 2097152-byte chunk",
                   store_pull(s, "big/kernel", 0, 2 * MiB + 4, out, &v, err, sizeof err));

    /* Step: negative increments. */
    EXPECT_REFUSED(s, PSC_EINVAL, "increment -1 is negative", store_step_add(s, -1, &v, err, sizeof err));

    free(out);
    free(g);
    fixture_teardown(&f);
}

/* store_push_check / store_pull_check (what a Batch checks first) refuse what
 * the calls refuse, with the same message, change nothing, and accept what
 * they accept without applying it. */
static void test_checks_alone(void **state)
{
    (void)state;
    char err[256];
    psc_optim_config_t opt = sgd(0.5f);
    fixture_t f;
    fixture_setup(&f, &opt, 1);
    store_t *s = f.s;
    uint64_t kb = spec_bytes(&SPECS[1]), bb = spec_bytes(&SPECS[3]);
    float *g = random_floats(bb / 4, 7);
    EXPECT_REFUSED(s, PSC_ENOTFOUND, "unknown variable \"dense/kernal\"",
                   store_push_check(s, "dense/kernal", 0, g, kb, kb, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EMISMATCH, "dense/kernel: gradient is 1000 bytes, variable is 802816 bytes",
                   store_push_check(s, "dense/kernel", 0, g, 1000, 1000, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EINVAL, "not a wire chunk",
                   store_push_check(s, "big/kernel", 2 * MiB, g, MiB, bb, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EINVAL, "global_step is not trainable; use Step",
                   store_push_check(s, "global_step", 0, g, 8, 8, err, sizeof err));
    float keep = g[100];
    g[100] = NAN;
    EXPECT_REFUSED(s, PSC_EINVAL, "dense/bias: gradient has a non-finite value at index 100",
                   store_push_check(s, "dense/bias", 0, g, 1024, 1024, err, sizeof err));
    g[100] = keep;
    EXPECT_REFUSED(s, PSC_ENOTFOUND, "unknown variable \"dense/kernal\"",
                   store_pull_check(s, "dense/kernal", 0, 16, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EINVAL, "dense/bias: pull of 8 bytes at offset 1020 is outside its 1024 bytes",
                   store_pull_check(s, "dense/bias", 1020, 8, err, sizeof err));
    EXPECT_REFUSED(s, PSC_EINVAL, "exceeds the 2097152-byte chunk",
                   store_pull_check(s, "big/kernel", 0, 2 * MiB + 4, err, sizeof err));

    /* accepted: nothing applied, nothing counted */
    snap_t before, after;
    snap_take(s, &before);
    store_stats_t st0, st1;
    store_get_stats(s, &st0);
    assert_int_equal(store_push_check(s, "big/kernel", 4 * MiB, g, MiB, bb, err, sizeof err), 0);
    assert_int_equal(store_push_check(s, "dense/bias", 0, g, 1024, 1024, err, sizeof err), 0);
    assert_int_equal(store_pull_check(s, "dense/kernel", 4, 400, err, sizeof err), 0);
    assert_int_equal(store_pull_check(s, "global_step", 0, 8, err, sizeof err), 0);
    store_get_stats(s, &st1);
    assert_true(st1.applied == st0.applied && st1.rejected == st0.rejected && st1.pulls == st0.pulls);
    snap_take(s, &after);
    for (int i = 0; i < before.n; i++) assert_true(after.info[i].version == before.info[i].version);
    for (int i = 0; i < NSPECS; i++)
        if (before.values[i]) assert_memory_equal(before.values[i], after.values[i], spec_bytes(&SPECS[i]));
    snap_free(&before);
    snap_free(&after);
    /* before the model is ready, a check refuses like the call */
    store_reset(s);
    EXPECT_REFUSED(s, PSC_ENOTREADY, "not ready", store_pull_check(s, "dense/bias", 0, 4, err, sizeof err));
    free(g);
    fixture_teardown(&f);
}

static void test_push_sgd_exact(void **state)
{
    (void)state;
    char err[256];
    const float lr = 0.5f;
    psc_optim_config_t opt = sgd(lr);
    fixture_t f;
    fixture_setup(&f, &opt, 1);
    store_t *s = f.s;

    for (int i = 1; i < NSPECS; i++) {
        const char *name = SPECS[i].name;
        uint64_t b = spec_bytes(&SPECS[i]);
        size_t n = b / 4;
        float *g = random_floats(n, 1000 + (uint32_t)i), *want = malloc(b), *got = malloc(b), *upd = malloc(b);
        int64_t v0 = version_of(s, name);
        for (size_t j = 0; j < n; j++) want[j] = ((float *)f.init[i])[j] - lr * g[j];
        for (size_t k = 0; k < psc_chunk_count(b); k++) {
            int64_t ver = -1;
            uint64_t off = psc_chunk_offset(k);
            size_t len = psc_chunk_len(b, k);
            /* push-pull on even chunks: the reply carries the new values */
            int rc = store_push(s, name, off, (char *)g + off, len, b, k % 2 == 0 ? (char *)upd + off : NULL, &ver,
                                err, sizeof err);
            if (rc) fail_msg("push %s: %s", name, err);
            assert_int_equal(ver, v0 + (int64_t)k + 1);
            if (k % 2 == 0) assert_memory_equal((char *)upd + off, (char *)want + off, len);
        }
        pull_all(s, name, got, b);
        assert_memory_equal(got, want, b);
        assert_int_equal(version_of(s, name), v0 + (int64_t)psc_chunk_count(b));
        free(g);
        free(want);
        free(got);
        free(upd);
    }
    store_stats_t st;
    store_get_stats(s, &st);
    assert_int_equal(st.applied, 1 + 1 + 3);
    assert_int_equal(st.bytes_pushed, spec_bytes(&SPECS[1]) + spec_bytes(&SPECS[2]) + spec_bytes(&SPECS[3]));
    assert_int_equal(st.rejected, 0);
    fixture_teardown(&f);
}

static void test_push_unaligned_gradient(void **state)
{
    (void)state;
    char err[256];
    psc_optim_config_t opt = {.kind = PSC_OPT_ADAM, .learning_rate = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f,
                              .epsilon = 1e-8f};
    static const store_var_spec_t specs[] = {{.name = "a", .rank = 1, .shape = {3001}},
                                             {.name = "b", .rank = 1, .shape = {3001}}};
    store_t *s = store_create();
    int created;
    assert_int_equal(store_create_vars(s, JOB, &opt, specs, 2, &created, err, sizeof err), 0);
    assert_int_equal(store_set_ready(s, JOB, err, sizeof err), 0);
    float *g = random_floats(3001, 5);
    char *raw = malloc(3001 * 4 + 1);
    memcpy(raw + 1, g, 3001 * 4);
    float a[3001], b[3001];
    for (int rep = 0; rep < 2; rep++) {
        assert_int_equal(store_push(s, "a", 0, g, sizeof a, sizeof a, a, NULL, err, sizeof err), 0);
        assert_int_equal(store_push(s, "b", 0, raw + 1, sizeof b, sizeof b, b, NULL, err, sizeof err), 0);
        assert_memory_equal(a, b, sizeof a);
    }
    raw[1 + 4 * 2999 + 3] = (char)0x7f; /* make element 2999 a NaN or Inf: exponent bits all ones */
    raw[1 + 4 * 2999 + 2] = (char)0xff;
    assert_int_equal(store_push(s, "b", 0, raw + 1, sizeof b, sizeof b, b, NULL, err, sizeof err), PSC_EINVAL);
    assert_non_null(strstr(err, "index 2999"));
    free(raw);
    free(g);
    store_destroy(s);
}

/* Splits len bytes at p into segments of pseudo-random sizes 1..max_seg
 * (seeded), so floats straddle most boundaries. Returns the count. */
static int split_bytes(const void *p, size_t len, psc_iov_t *iov, int cap, uint32_t seed, size_t max_seg)
{
    int n = 0;
    size_t at = 0;
    while (at < len) {
        seed = seed * 1664525u + 1013904223u;
        size_t k = 1 + (seed >> 8) % max_seg;
        if (k > len - at || n == cap - 1) k = len - at;
        iov[n].base = (const char *)p + at;
        iov[n++].len = k;
        at += k;
    }
    return n;
}

/* A gradient in segments split anywhere (as gRPC's slices hold a request):
 * the same result as one buffer, bit for bit, and a non-finite value that
 * straddles two segments is refused with its index, nothing changed. */
static void test_push_segments(void **state)
{
    (void)state;
    char err[256];
    psc_optim_config_t opt = {.kind = PSC_OPT_ADAM, .learning_rate = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f,
                              .epsilon = 1e-7f};
    fixture_t f1, f2;
    fixture_setup(&f1, &opt, 1);
    fixture_setup(&f2, &opt, 1);
    uint64_t bb = spec_bytes(&SPECS[3]), kb = spec_bytes(&SPECS[1]);
    float *g = random_floats(bb / 4, 21);
    static psc_iov_t iov[70000];
    float *u1 = malloc(2 * MiB), *u2 = malloc(2 * MiB);
    for (int rep = 0; rep < 3; rep++) {
        /* dense/kernel (one chunk), big/kernel's 3 chunks (2, 2, 1 MiB) */
        assert_int_equal(store_push(f1.s, "dense/kernel", 0, g, kb, kb, u1, NULL, err, sizeof err), 0);
        int n = split_bytes(g, kb, iov, 70000, 100 + (uint32_t)rep, rep == 0 ? 7 : 4000);
        assert_int_equal(store_push_iov(f2.s, "dense/kernel", 0, iov, n, kb, kb, u2, NULL, err, sizeof err), 0);
        assert_memory_equal(u1, u2, kb);
        for (uint64_t off = 0; off < bb; off += 2 * MiB) {
            size_t len = (size_t)PSC_MIN(2 * MiB, bb - off);
            const char *p = (const char *)g + off;
            assert_int_equal(store_push(f1.s, "big/kernel", off, p, len, bb, u1, NULL, err, sizeof err), 0);
            n = split_bytes(p, len, iov, 70000, 200 + (uint32_t)rep, 65536);
            assert_int_equal(store_push_iov(f2.s, "big/kernel", off, iov, n, len, bb, u2, NULL, err, sizeof err), 0);
            assert_memory_equal(u1, u2, len);
        }
    }
    /* element 100 of dense/bias NaN, its 4 bytes in segments [..401] [402..] */
    float bias[256];
    memcpy(bias, g, sizeof bias);
    bias[100] = NAN;
    psc_iov_t two[2] = {{bias, 402}, {(const char *)bias + 402, sizeof bias - 402}};
    store_t *s = f2.s;
    EXPECT_REFUSED(s, PSC_EINVAL, "dense/bias: gradient has a non-finite value at index 100",
                   store_push_iov(s, "dense/bias", 0, two, 2, sizeof bias, sizeof bias, NULL, NULL, err, sizeof err));
    /* 1-byte segments: the last element */
    bias[100] = g[100];
    bias[255] = INFINITY;
    int n = split_bytes(bias, sizeof bias, iov, 70000, 5, 1);
    assert_int_equal(n, (int)sizeof bias);
    EXPECT_REFUSED(s, PSC_EINVAL, "dense/bias: gradient has a non-finite value at index 255",
                   store_push_iov(s, "dense/bias", 0, iov, n, sizeof bias, sizeof bias, NULL, NULL, err, sizeof err));
    /* segments that hold fewer bytes than the length says */
    EXPECT_REFUSED(s, PSC_EINVAL, "dense/bias: gradient chunk has no data",
                   store_push_iov(s, "dense/bias", 0, two, 1, sizeof bias, sizeof bias, NULL, NULL, err, sizeof err));
    free(u1);
    free(u2);
    free(g);
    fixture_teardown(&f1);
    fixture_teardown(&f2);
}

static void test_step(void **state)
{
    (void)state;
    char err[256];
    psc_optim_config_t opt = sgd(0.5f);
    fixture_t f;
    fixture_setup(&f, &opt, 0);
    store_t *s = f.s;
    int64_t v = -1;
    assert_int_equal(store_step_get(s, &v), 1);
    assert_int_equal(v, 0);
    assert_int_equal(store_step_add(s, 0, &v, err, sizeof err), 0); /* allowed before ready */
    assert_int_equal(v, 0);
    assert_int_equal(version_of(s, "global_step"), 0);
    assert_int_equal(store_step_add(s, 3, &v, err, sizeof err), 0);
    assert_int_equal(v, 3);
    assert_int_equal(store_step_add(s, 4, &v, err, sizeof err), 0);
    assert_int_equal(v, 7);
    assert_int_equal(version_of(s, "global_step"), 2);

    assert_int_equal(store_set_ready(s, JOB, err, sizeof err), 0);
    unsigned char le[8];
    int64_t ver = -1;
    assert_int_equal(store_pull(s, "global_step", 0, 8, le, &ver, err, sizeof err), 0);
    assert_int_equal(ver, 2);
    static const unsigned char seven[8] = {7, 0, 0, 0, 0, 0, 0, 0};
    assert_memory_equal(le, seven, 8);

    /* Assign after ready (restore): 1000 little-endian. */
    static const unsigned char thousand[8] = {0xe8, 0x03, 0, 0, 0, 0, 0, 0};
    assert_int_equal(store_assign(s, "global_step", 0, thousand, 8, 8, err, sizeof err), 0);
    assert_int_equal(store_step_get(s, &v), 1);
    assert_int_equal(v, 1000);
    assert_int_equal(store_step_add(s, 1, &v, err, sizeof err), 0);
    assert_int_equal(v, 1001);

    /* Overflow is refused and changes nothing. */
    unsigned char max[8];
    for (int i = 0; i < 8; i++) max[i] = (unsigned char)((uint64_t)(INT64_MAX - 1) >> (8 * i));
    assert_int_equal(store_assign(s, "global_step", 0, max, 8, 8, err, sizeof err), 0);
    EXPECT_REFUSED(s, PSC_EINVAL, "overflows", store_step_add(s, 2, &v, err, sizeof err));
    assert_int_equal(store_step_add(s, 1, &v, err, sizeof err), 0);
    assert_int_equal(v, INT64_MAX);
    fixture_teardown(&f);
}

/* Adam's t per chunk: push chunk 0 twice and chunk 1 once; chunk 0's second
 * update uses t = 2, chunk 1's uses t = 1. */
static void test_adam_t_per_chunk(void **state)
{
    (void)state;
    char err[256];
    psc_optim_config_t opt = {.kind = PSC_OPT_ADAM, .learning_rate = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f,
                              .epsilon = 1e-8f};
    static const store_var_spec_t specs[] = {{.name = "w", .rank = 2, .shape = {768, 1024}}}; /* 3 MiB: 2 chunks */
    const uint64_t b = 3 * MiB;
    const size_t n = b / 4, c0 = 2 * MiB / 4;
    store_t *s = store_create();
    int created;
    assert_int_equal(store_create_vars(s, JOB, &opt, specs, 1, &created, err, sizeof err), 0);
    float *w0 = random_floats(n, 11), *ga = random_floats(n, 12), *gb = random_floats(n, 13);
    assign_all(s, "w", w0, b);
    assert_int_equal(store_set_ready(s, JOB, err, sizeof err), 0);
    int64_t ver;
    assert_int_equal(store_push(s, "w", 0, ga, 2 * MiB, b, NULL, &ver, err, sizeof err), 0);
    assert_int_equal(store_push(s, "w", 0, gb, 2 * MiB, b, NULL, &ver, err, sizeof err), 0);
    assert_int_equal(store_push(s, "w", 2 * MiB, (char *)ga + 2 * MiB, MiB, b, NULL, &ver, err, sizeof err), 0);
    assert_int_equal(ver, 2 + 3);
    float *got = malloc(b);
    pull_all(s, "w", got, b);

    /* Double-precision Adam with the t each chunk should have seen. */
    const double b1 = opt.beta1, b2 = opt.beta2, lr = opt.learning_rate, eps = opt.epsilon;
    double lr1 = lr * sqrt(1 - b2) / (1 - b1), lr2 = lr * sqrt(1 - b2 * b2) / (1 - b1 * b1);
    size_t bad = 0, differs_from_t1 = 0;
    for (size_t i = 0; i < n; i++) {
        double w = w0[i], m = 0, v = 0, g = ga[i], wa = fabs(w);
        m = (1 - b1) * g;
        v = (1 - b2) * g * g;
        w -= lr1 * m / (sqrt(v) + eps);
        wa += fabs(lr1 * m / (sqrt(v) + eps));
        if (i < c0) {
            double w_if_t1 = w, m1 = b1 * m + (1 - b1) * gb[i], v1 = b2 * v + (1 - b2) * (double)gb[i] * gb[i];
            w -= lr2 * m1 / (sqrt(v1) + eps);
            wa += fabs(lr2 * m1 / (sqrt(v1) + eps));
            w_if_t1 -= lr1 * m1 / (sqrt(v1) + eps);
            if (fabs(w_if_t1 - w) > 1e-5 * wa) differs_from_t1++;
        }
        if (!(fabs((double)got[i] - w) <= 1e-6 * wa)) {
            if (bad++ < 5) print_error("w[%zu] = %.9g, want %.9g\n", i, (double)got[i], w);
        }
    }
    assert_int_equal(bad, 0);
    assert_true(differs_from_t1 > c0 / 2); /* the check above could tell t = 1 from t = 2 */
    free(got);
    free(w0);
    free(ga);
    free(gb);
    store_destroy(s);
}

/* ---- concurrency ---- */

#define PUSHES 2000

typedef struct worker_arg {
    store_t *s;
    const char *name;
    int use_push_pull;
} worker_arg_t;

static void *push_worker(void *p)
{
    worker_arg_t *a = p;
    float g[CN], upd[CN];
    char err[256];
    for (int i = 0; i < CN; i++) g[i] = 1.0f;
    for (int k = 0; k < PUSHES; k++) {
        int64_t step;
        if (store_push(a->s, a->name, 0, g, sizeof g, sizeof g, a->use_push_pull ? upd : NULL, NULL, err,
                       sizeof err) != 0 ||
            store_step_add(a->s, 1, &step, err, sizeof err) != 0)
            return (void *)1;
    }
    return NULL;
}

static void test_concurrent_pushes(void **state)
{
    (void)state;
    char err[256];
    /* lr = 2^-10 and g = 1: every partial sum k/1024 (k <= 8000) is exact in float. */
    psc_optim_config_t opt = sgd(1.0f / 1024);
    static const store_var_spec_t specs[] = {
        {.name = "global_step", .is_step = 1},     {.name = "own/0", .rank = 1, .shape = {CN}},
        {.name = "own/1", .rank = 1, .shape = {CN}}, {.name = "own/2", .rank = 1, .shape = {CN}},
        {.name = "own/3", .rank = 1, .shape = {CN}}, {.name = "shared", .rank = 1, .shape = {CN}},
    };
    store_t *s = store_create();
    int created;
    assert_int_equal(store_create_vars(s, JOB, &opt, specs, 6, &created, err, sizeof err), 0);
    assert_int_equal(store_set_ready(s, JOB, err, sizeof err), 0);

    pthread_t th[8];
    worker_arg_t args[8];
    for (int i = 0; i < 8; i++) {
        args[i] = (worker_arg_t){.s = s, .name = i < 4 ? specs[1 + i].name : "shared", .use_push_pull = i % 2};
        assert_int_equal(pthread_create(&th[i], NULL, push_worker, &args[i]), 0);
    }
    for (int i = 0; i < 8; i++) {
        void *ret;
        assert_int_equal(pthread_join(th[i], &ret), 0);
        assert_null(ret);
    }
    float got[CN];
    for (int i = 1; i < 6; i++) {
        float want = i < 5 ? -(float)PUSHES / 1024 : -(float)(4 * PUSHES) / 1024;
        pull_all(s, specs[i].name, got, sizeof got);
        for (int j = 0; j < CN; j++)
            if (got[j] != want) fail_msg("%s[%d] = %.9g, want %.9g", specs[i].name, j, (double)got[j], (double)want);
        assert_int_equal(version_of(s, specs[i].name), i < 5 ? PUSHES : 4 * PUSHES);
    }
    int64_t step;
    assert_int_equal(store_step_get(s, &step), 1);
    assert_int_equal(step, 8 * PUSHES);
    store_stats_t st;
    store_get_stats(s, &st);
    assert_int_equal(st.applied, 8 * PUSHES);
    assert_int_equal(st.bytes_pushed, (uint64_t)8 * PUSHES * CN * 4);
    assert_int_equal(st.rejected, 0);
    store_destroy(s);
}

/* Chunks of one variable in parallel (v->lock shared + one lock per chunk):
 * threads push to the three wire chunks of one variable (two threads per
 * chunk, push and push-pull) while a reader pulls a range across the chunk 0/1
 * boundary and lists versions (v->lock exclusive). Every update of a chunk is
 * atomic: a pull sees each chunk's part uniform; at the end every chunk holds
 * exactly its pushes and the version counts all of them. */
#define CC_PUSHES 200
#define CC_FLOATS (PSC_CHUNK_BYTES / 4 * 2 + PSC_CHUNK_BYTES / 8) /* 2.5 chunks */

typedef struct chunk_arg {
    store_t *s;
    size_t chunk;
    int use_push_pull;
    const float *g;
    float *upd;
} chunk_arg_t;

static void *chunk_pusher(void *p)
{
    chunk_arg_t *a = p;
    char err[256];
    uint64_t total = (uint64_t)CC_FLOATS * 4;
    for (int i = 0; i < CC_PUSHES; i++)
        if (store_push(a->s, "big", psc_chunk_offset(a->chunk), a->g, psc_chunk_len(total, a->chunk), total,
                       a->use_push_pull ? a->upd : NULL, NULL, err, sizeof err) != 0)
            return (void *)1;
    return NULL;
}

typedef struct chunk_reader {
    store_t *s;
    atomic_int *stop;
    int torn, pulls;
} chunk_reader_t;

static void *chunk_reader(void *p)
{
    chunk_reader_t *r = p;
    enum { HALF = 4096 };
    static float buf[2 * HALF];
    char err[256];
    while (!atomic_load(r->stop)) {
        int64_t version;
        if (store_pull(r->s, "big", PSC_CHUNK_BYTES - HALF * 4, sizeof buf, buf, &version, err, sizeof err) != 0)
            return (void *)1;
        for (int i = 1; i < HALF; i++) r->torn += buf[i] != buf[0] || buf[HALF + i] != buf[HALF];
        r->pulls++;
        store_var_info_t *info;
        int n;
        if (store_list(r->s, &info, &n) != 0) return (void *)1;
        free(info);
    }
    return NULL;
}

static void test_concurrent_chunks(void **state)
{
    (void)state;
    char err[256];
    psc_optim_config_t opt = sgd(1.0f / 1024);
    static const store_var_spec_t specs[] = {{.name = "big", .rank = 1, .shape = {CC_FLOATS}}};
    store_t *s = store_create();
    int created;
    assert_int_equal(store_create_vars(s, JOB, &opt, specs, 1, &created, err, sizeof err), 0);
    assert_int_equal(store_set_ready(s, JOB, err, sizeof err), 0);
    float *g = psc_xaligned(PSC_CHUNK_BYTES);
    for (size_t i = 0; i < PSC_CHUNK_BYTES / 4; i++) g[i] = 1.0f;

    atomic_int stop = 0;
    chunk_reader_t rd = {.s = s, .stop = &stop};
    pthread_t rt, th[6];
    chunk_arg_t args[6];
    assert_int_equal(pthread_create(&rt, NULL, chunk_reader, &rd), 0);
    for (int i = 0; i < 6; i++) {
        args[i] = (chunk_arg_t){.s = s, .chunk = (size_t)i % 3, .use_push_pull = i / 3, .g = g,
                                .upd = i / 3 ? psc_xaligned(PSC_CHUNK_BYTES) : NULL};
        assert_int_equal(pthread_create(&th[i], NULL, chunk_pusher, &args[i]), 0);
    }
    for (int i = 0; i < 6; i++) {
        void *ret;
        assert_int_equal(pthread_join(th[i], &ret), 0);
        assert_null(ret);
        free(args[i].upd);
    }
    atomic_store(&stop, 1);
    void *ret;
    assert_int_equal(pthread_join(rt, &ret), 0);
    assert_null(ret);
    assert_int_equal(rd.torn, 0);
    assert_true(rd.pulls > 0);

    float *got = psc_xaligned((size_t)CC_FLOATS * 4);
    pull_all(s, "big", got, (uint64_t)CC_FLOATS * 4);
    const float want = -(float)(2 * CC_PUSHES) / 1024; /* exact: lr = 2^-10, g = 1 */
    for (size_t j = 0; j < CC_FLOATS; j++)
        if (got[j] != want) fail_msg("big[%zu] = %.9g, want %.9g", j, (double)got[j], (double)want);
    assert_int_equal(version_of(s, "big"), 6 * CC_PUSHES);
    free(got);
    free(g);
    store_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_create_conflicts),
        cmocka_unit_test(test_checks_alone),
        cmocka_unit_test(test_push_segments),
        cmocka_unit_test(test_create_invalid),
        cmocka_unit_test(test_invalid_requests_change_nothing),
        cmocka_unit_test(test_push_sgd_exact),
        cmocka_unit_test(test_push_unaligned_gradient),
        cmocka_unit_test(test_step),
        cmocka_unit_test(test_adam_t_per_chunk),
        cmocka_unit_test(test_concurrent_pushes),
        cmocka_unit_test(test_concurrent_chunks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
