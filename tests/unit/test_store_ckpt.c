/* test_store_ckpt — the variable store's checkpoints through the real RocksDB
 * checkpoint store (ckpt.h) in a mkdtemp folder in /tmp.
 *
 * A shard with global_step, a partitioned variable ("dense/kernel/part_0",
 * "dense/kernel/part_1"), a bias and a 5 MiB variable (three wire chunks,
 * pushed unevenly so the chunks' update counts differ) is trained for a few
 * pushes, exported into a checkpoint (ckpt_begin, ckpt_add as emit,
 * ckpt_prepare, ckpt_commit), the database reopened, and a fresh store with
 * the same variables imported from it through ckpt_read. Both stores' exports
 * are then identical tensor for tensor and byte for byte (values, every slot,
 * .t, global_step), the checkpoint's tensor names are the export's, and the
 * same pushes applied to both keep them bit-identical (Adam's t came back).
 * For Adam and Momentum. A checkpoint of another optimizer does not import:
 * PSC_EMISMATCH naming the missing slot, nothing changed.
 */
#include "ckpt.h"
#include "psc.h"
#include "store.h"
#include "wire.h"

#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#define MiB ((uint64_t)1 << 20)
#define JOB "1a2b3c4d5e6f7a8b"

/* ThreadSanitizer builds: librocksdb and what it uses are not instrumented (see
 * test_ckpt.c). */
#if defined(__SANITIZE_THREAD__)
const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void)
{
    return "called_from_lib:librocksdb.so\n"
           "called_from_lib:libstdc++.so\n"
           "called_from_lib:libsnappy.so\n"
           "called_from_lib:liblz4.so\n"
           "called_from_lib:libzstd.so\n"
           "race:librocksdb.so\n";
}
#endif

static const store_var_spec_t SPECS[] = {
    {.name = "global_step", .rank = 0, .is_step = 1},
    {.name = "dense/kernel/part_0", .rank = 2, .shape = {392, 256}},
    {.name = "dense/kernel/part_1", .rank = 2, .shape = {392, 256}},
    {.name = "dense/bias", .rank = 1, .shape = {256}},
    {.name = "big/kernel", .rank = 2, .shape = {1280, 1024}}, /* 5 MiB: wire chunks of 2, 2, 1 MiB */
};
#define NSPECS ((int)PSC_ARRAY_LEN(SPECS))
#define BIG 4

static uint64_t spec_bytes(const store_var_spec_t *v)
{
    if (v->is_step) return 8;
    uint64_t n = 1;
    for (int d = 0; d < v->rank; d++) n *= (uint64_t)v->shape[d];
    return n * 4;
}

static float *random_floats(size_t n, uint32_t seed)
{
    float *a = malloc(n * sizeof *a);
    assert_non_null(a);
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        a[i] = (float)((double)x / 4294967296.0 * 2.0 - 1.0);
    }
    return a;
}

/* ---- fixture: a checkpoint database in a fresh /tmp folder ---- */

typedef struct fx {
    char dir[64];
    ckpt_db_t *db;
} fx_t;

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof *f);
    if (!f) return -1;
    snprintf(f->dir, sizeof f->dir, "/tmp/test_store_ckpt.XXXXXX");
    if (!mkdtemp(f->dir)) return -1;
    char err[512] = "";
    if (ckpt_open(f->dir, &f->db, err, sizeof err)) {
        fprintf(stderr, "open %s: %s\n", f->dir, err);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx_t *f = *state;
    ckpt_close(f->db);
    nftw(f->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    struct stat st;
    int gone = stat(f->dir, &st) != 0;
    if (!gone) fprintf(stderr, "could not remove %s\n", f->dir);
    free(f);
    return gone ? 0 : -1;
}

/* ---- stores ---- */

/* A store with SPECS created under opt; values assigned from seeds when `init`. */
static store_t *store_new(const psc_optim_config_t *opt, int init)
{
    char err[256];
    int created = -1;
    store_t *s = store_create();
    int rc = store_create_vars(s, JOB, opt, SPECS, NSPECS, &created, err, sizeof err);
    if (rc) fail_msg("create: %s", err);
    assert_int_equal(created, 1);
    for (int i = 0; init && i < NSPECS; i++) {
        if (SPECS[i].is_step) continue;
        uint64_t b = spec_bytes(&SPECS[i]);
        float *w = random_floats(b / 4, 100 + (uint32_t)i);
        for (size_t k = 0; k < psc_chunk_count(b); k++)
            if ((rc = store_assign(s, SPECS[i].name, psc_chunk_offset(k), (char *)w + psc_chunk_offset(k),
                                   psc_chunk_len(b, k), b, err, sizeof err)))
                fail_msg("assign %s: %s", SPECS[i].name, err);
        free(w);
    }
    if (init && (rc = store_set_ready(s, JOB, err, sizeof err))) fail_msg("ready: %s", err);
    return s;
}

/* One round of training: every variable pushed whole with gradients from seed,
 * big/kernel's first chunk once more (its chunks' t differ), global_step + 1. */
static void train_round(store_t *s, uint32_t seed)
{
    char err[256];
    for (int i = 0; i < NSPECS; i++) {
        if (SPECS[i].is_step) continue;
        uint64_t b = spec_bytes(&SPECS[i]);
        float *g = random_floats(b / 4, seed * 31 + (uint32_t)i);
        for (size_t k = 0; k < psc_chunk_count(b); k++)
            if (store_push(s, SPECS[i].name, psc_chunk_offset(k), (char *)g + psc_chunk_offset(k),
                           psc_chunk_len(b, k), b, NULL, NULL, err, sizeof err))
                fail_msg("push %s: %s", SPECS[i].name, err);
        if (i == BIG && store_push(s, SPECS[i].name, 0, g, 2 * MiB, b, NULL, NULL, err, sizeof err))
            fail_msg("push %s: %s", SPECS[i].name, err);
        free(g);
    }
    if (store_step_add(s, 1, NULL, err, sizeof err)) fail_msg("step: %s", err);
}

/* ---- an export in memory, to compare two stores ---- */

typedef struct mem_tensor {
    char name[160];
    void *data;
    size_t len;
} mem_tensor_t;

typedef struct mem_ckpt {
    mem_tensor_t *t;
    int n, cap;
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
    return 0;
}

static void mem_free(mem_ckpt_t *c)
{
    for (int i = 0; i < c->n; i++) free(c->t[i].data);
    free(c->t);
    memset(c, 0, sizeof *c);
}

static void export_mem(store_t *s, mem_ckpt_t *c)
{
    char err[256];
    memset(c, 0, sizeof *c);
    if (store_export(s, mem_emit, c, -1, NULL, err, sizeof err)) fail_msg("export: %s", err);
}

static const mem_tensor_t *mem_find(const mem_ckpt_t *c, const char *name)
{
    for (int i = 0; i < c->n; i++)
        if (strcmp(c->t[i].name, name) == 0) return &c->t[i];
    fail_msg("no tensor \"%s\"", name);
    return NULL;
}

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

static int nonzero(const mem_tensor_t *t)
{
    const unsigned char *p = t->data;
    for (size_t i = 0; i < t->len; i++)
        if (p[i]) return 1;
    return 0;
}

/* ---- the checkpoint path: emit = ckpt_add, fetch = ckpt_read ---- */

static int emit_ckpt(void *arg, const char *name, const void *data, size_t len)
{
    return ckpt_add(arg, name, data, len);
}

typedef struct ckpt_src {
    ckpt_db_t *db;
    uint64_t id;
    int calls;
} ckpt_src_t;

static int fetch_ckpt(void *arg, const char *name, void **data, size_t *len, char *err, size_t errlen)
{
    ckpt_src_t *src = arg;
    src->calls++;
    return ckpt_read(src->db, src->id, name, data, len, err, errlen);
}

/* Saves s as committed checkpoint `id`; returns the step recorded. */
static int64_t save(fx_t *f, store_t *s, uint64_t id)
{
    char err[512] = "";
    int64_t step = -2;
    assert_int_equal(store_step_get(s, &step), 1); /* nothing else runs: the export will see this value */
    ckpt_writer_t *w = ckpt_begin(f->db, id, JOB, step);
    int64_t held = -2;
    int rc = store_export(s, emit_ckpt, w, -1, &held, err, sizeof err);
    if (rc) {
        ckpt_abort(w);
        fail_msg("export: %s", err);
    }
    assert_int_equal(held, step);
    if ((rc = ckpt_prepare(w, err, sizeof err))) fail_msg("prepare: %s", err);
    if ((rc = ckpt_commit(f->db, id, 2, err, sizeof err))) fail_msg("commit: %s", err);
    return step;
}

static void round_trip(fx_t *f, const psc_optim_config_t *opt, const char *slot0, const char *slot1)
{
    char err[512] = "";
    store_t *a = store_new(opt, 1);
    for (uint32_t r = 1; r <= 3; r++) train_round(a, r);
    int64_t step = save(f, a, 7);
    assert_int_equal(step, 3);

    /* reopen: the checkpoint comes from disk */
    ckpt_close(f->db);
    f->db = NULL;
    if (ckpt_open(f->dir, &f->db, err, sizeof err)) fail_msg("reopen: %s", err);
    ckpt_info_t info;
    assert_int_equal(ckpt_latest_good(f->db, JOB, &info, NULL, err, sizeof err), 0);
    assert_int_equal(info.id, 7);
    assert_int_equal(info.step, 3);

    store_t *b = store_new(opt, 0); /* created, nothing assigned, not ready */
    ckpt_src_t src = {.db = f->db, .id = 7};
    int rc = store_import(b, fetch_ckpt, &src, info.step, err, sizeof err);
    if (rc) fail_msg("import: %s", err);
    assert_int_equal(store_is_ready(b, NULL), 1);
    int64_t gs = -1;
    assert_int_equal(store_step_get(b, &gs), 1);
    assert_int_equal(gs, 3);

    mem_ckpt_t ea, eb;
    export_mem(a, &ea);
    export_mem(b, &eb);
    mem_expect_equal(&ea, &eb, "restored");
    assert_int_equal(src.calls, ea.n); /* every tensor fetched once */
    /* the checkpoint holds exactly the export's tensors, in its order */
    char **names;
    int n;
    assert_int_equal(ckpt_names(f->db, 7, &names, &n, err, sizeof err), 0);
    assert_int_equal(n, ea.n);
    for (int i = 0; i < n; i++) assert_string_equal(names[i], ea.t[i].name);
    ckpt_free_names(names, n);
    /* what the test means to cover is there: trained slots, uneven t, the partition */
    char name[160];
    for (int i = 1; i < NSPECS; i++) {
        snprintf(name, sizeof name, "%s/%s", SPECS[i].name, slot0);
        assert_true(nonzero(mem_find(&ea, name)));
        if (slot1) {
            snprintf(name, sizeof name, "%s/%s", SPECS[i].name, slot1);
            assert_true(nonzero(mem_find(&ea, name)));
        }
    }
    const int64_t *t = mem_find(&ea, "big/kernel/.t")->data; /* little-endian host */
    assert_int_equal(mem_find(&ea, "big/kernel/.t")->len, 3 * 8);
    assert_int_equal(t[0], 6);
    assert_int_equal(t[1], 3);
    assert_int_equal(t[2], 3);
    assert_int_equal(mem_find(&ea, "dense/kernel/part_0")->len, spec_bytes(&SPECS[1]));
    mem_free(&eb);

    /* The same pushes on both: still bit-identical (slots and t restored). */
    train_round(a, 4);
    train_round(b, 4);
    mem_free(&ea);
    export_mem(a, &ea);
    export_mem(b, &eb);
    mem_expect_equal(&ea, &eb, "trained after restore");
    mem_free(&ea);
    mem_free(&eb);
    store_destroy(a);
    store_destroy(b);
}

static void test_round_trip_adam(void **state)
{
    psc_optim_config_t opt = {
        .kind = PSC_OPT_ADAM, .learning_rate = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .epsilon = 1e-7f};
    round_trip(*state, &opt, "Adam", "Adam_1");
}

static void test_round_trip_momentum(void **state)
{
    psc_optim_config_t opt = {.kind = PSC_OPT_MOMENTUM, .learning_rate = 0.01f, .momentum = 0.9f};
    round_trip(*state, &opt, "Momentum", NULL);
}

/* An Adam checkpoint into a Momentum store: "<var>/Momentum" is missing ->
 * PSC_EMISMATCH naming it; the store is unchanged and stays not ready. */
static void test_other_optimizer_refused(void **state)
{
    fx_t *f = *state;
    char err[512] = "";
    psc_optim_config_t adam = {
        .kind = PSC_OPT_ADAM, .learning_rate = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .epsilon = 1e-7f};
    psc_optim_config_t mom = {.kind = PSC_OPT_MOMENTUM, .learning_rate = 0.01f, .momentum = 0.9f};
    store_t *a = store_new(&adam, 1);
    train_round(a, 1);
    save(f, a, 1);
    store_t *b = store_new(&mom, 0);
    ckpt_src_t src = {.db = f->db, .id = 1};
    assert_int_equal(store_import(b, fetch_ckpt, &src, 0, err, sizeof err), PSC_EMISMATCH);
    assert_non_null(strstr(err, "dense/kernel/part_0/Momentum"));
    assert_int_equal(store_is_ready(b, NULL), 0);
    int64_t gs = -1;
    assert_int_equal(store_step_get(b, &gs), 1);
    assert_int_equal(gs, 0);
    store_var_info_t *info;
    int n;
    assert_int_equal(store_list(b, &info, &n), 0);
    for (int i = 0; i < n; i++) assert_int_equal(info[i].version, 0);
    free(info);
    store_destroy(a);
    store_destroy(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip_adam, setup, teardown),
        cmocka_unit_test_setup_teardown(test_round_trip_momentum, setup, teardown),
        cmocka_unit_test_setup_teardown(test_other_optimizer_refused, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
