/* test_embed_ids — how categorical values become embedding rows
 * (ctr_loader.c, table.h's psc_feature_id_hash):
 *   - the hash is stable across runs and builds: values pinned from an
 *     independent computation (Python, FNV-1a 64 and SplitMix64's finalizer
 *     written out from their definitions);
 *   - the loader maps a parsed job's batches: slots in layer order, the
 *     batch's unique ids per table in first-seen order, a shared table with
 *     the same value of two features on different rows, the combiners' weights
 *     (sum, mean, sqrtn), empty bags, identity ids and their range check
 *     (a value not below the table's rows fails the batch, naming it). */
#include "ctr_loader.h"
#include "job_spec.h"
#include "psc.h"
#include "table.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

static void test_hash_pinned(void **state)
{
    (void)state;
    assert_true(psc_fnv1a64("C1", 2) == 0x090f7f07b5a73a39ull);
    assert_true(psc_fnv1a64("C26", 3) == 0x0c84d719ab1f3462ull);
    assert_true(psc_fnv1a64("shop.example", 12) == 0xf88bb797961500e1ull);
    assert_int_equal(psc_feature_id_hash(0x68fd1e64, psc_fnv1a64("C1", 2), 100000000), 45122770);
    assert_int_equal(psc_feature_id_hash(0x68fd1e64, psc_fnv1a64("C26", 3), 100000000), 58570165);
    assert_int_equal(psc_feature_id_hash(12345, psc_fnv1a64("features", 8), (int64_t)1 << 40), 996161181073);
    assert_int_equal(psc_feature_id_hash(0, psc_fnv1a64("C3", 2), 1000), 675);
}

static char g_dir[64];

static void write_file(const char *name, const char *text)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* A criteo line: label, 13 empty dense fields, C1..C26 from cats (NULL = empty). */
static void criteo_line(char *buf, size_t len, int label, const char *const cats[26])
{
    size_t n = (size_t)snprintf(buf, len, "%d", label);
    for (int k = 0; k < 13; k++) n += (size_t)snprintf(buf + n, len - n, "\t");
    for (int k = 0; k < 26; k++) n += (size_t)snprintf(buf + n, len - n, "\t%s", cats[k] ? cats[k] : "");
    snprintf(buf + n, len - n, "\n");
}

static void load_spec(const char *json, psc_job_spec_t *spec)
{
    char err[512] = "";
    int rc = psc_job_spec_parse(json, spec, err, sizeof err);
    if (rc) fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, 0);
}

static ctr_slot_batch_t *first_batch(ctr_loader_t **l, const psc_job_spec_t *spec, int *rc, char *err, size_t errlen)
{
    assert_int_equal(ctr_loader_create(spec, 0, 0, 1, 16, 1, 0, 1, l, err, errlen), 0);
    ctr_slot_batch_t *b = NULL;
    *rc = ctr_loader_next(*l, &b, err, errlen);
    return b;
}

/* Two features share table "emb" (C1 and C2), C3 has its own "c3" table
 * with identity ids; the wide layer reads C1 again. */
static void test_criteo_slots(void **state)
{
    (void)state;
    const char *a[26] = {"0000000a", "0000000a", "00000005"}, *b[26] = {"0000000b", NULL, "00000005"};
    char line1[256], line2[256], text[600];
    criteo_line(line1, sizeof line1, 1, a);
    criteo_line(line2, sizeof line2, 0, b);
    snprintf(text, sizeof text, "%s%s", line1, line2);
    write_file("day0.tsv", text);
    char json[2048];
    snprintf(json, sizeof json,
             "{\"model\": {\"loss\": \"sigmoid_cross_entropy\", \"layers\": ["
             "{\"type\": \"embedding\", \"table\": \"emb\", \"features\": [\"C1\", \"C2\"]},"
             "{\"type\": \"embedding\", \"table\": \"c3\", \"features\": \"C3\", \"hash_ids\": false},"
             "{\"type\": \"dense\", \"units\": 4, \"activation\": \"relu\"},"
             "{\"type\": \"dense\", \"units\": 4, \"activation\": \"relu\"},"
             "{\"type\": \"interaction\"}, {\"type\": \"dense\", \"units\": 1},"
             "{\"type\": \"wide\", \"table\": \"w\", \"features\": \"C1\"}]},"
             " \"tables\": [{\"name\": \"emb\", \"rows\": 1000, \"dim\": 4}, {\"name\": \"c3\", \"rows\": 6, \"dim\": 4},"
             " {\"name\": \"w\", \"rows\": 100, \"dim\": 1}],"
             " \"optimizer\": {\"name\": \"sgd\"}, \"data\": {\"format\": \"criteo\", \"train\": \"%s/day0.tsv\", \"shuffle\": false}}",
             g_dir);
    psc_job_spec_t spec;
    load_spec(json, &spec);
    ctr_loader_t *l;
    char err[512];
    int rc;
    ctr_slot_batch_t *bt = first_batch(&l, &spec, &rc, err, sizeof err);
    assert_int_equal(rc, 0);
    assert_int_equal(bt->raw.n, 2);
    assert_int_equal(bt->nslots, 4); /* C1, C2 (emb), C3 (c3), C1 (w) */
    const int32_t off[] = {0, 1, 2, 3, 4, 5, 5, 6, 7};
    for (int k = 0; k < 9; k++) assert_int_equal(bt->off[k], off[k]);
    uint64_t h1 = psc_fnv1a64("C1", 2), h2 = psc_fnv1a64("C2", 2);
    /* emb: C1=a, C2=a (a different row: the feature's name is in the hash), then C1=b */
    assert_int_equal(bt->nuids[0], 3);
    assert_int_equal(bt->uids[0][0], psc_feature_id_hash(0xa, h1, 1000));
    assert_int_equal(bt->uids[0][1], psc_feature_id_hash(0xa, h2, 1000));
    assert_int_equal(bt->uids[0][2], psc_feature_id_hash(0xb, h1, 1000));
    assert_true(bt->uids[0][0] != bt->uids[0][1]);
    /* c3: identity, the same id 5 twice: one unique row */
    assert_int_equal(bt->nuids[1], 1);
    assert_int_equal(bt->uids[1][0], 5);
    assert_int_equal(bt->nuids[2], 2);
    const int32_t idx[] = {0, 1, 0, 0, 2, 0, 1};
    for (int k = 0; k < 7; k++) {
        assert_int_equal(bt->idx[k], idx[k]);
        assert_true(bt->w[k] == 1.0f);
    }
    ctr_loader_release(l, bt);
    assert_int_equal(ctr_loader_next(l, &bt, err, sizeof err), 1); /* one batch: the data ended */
    ctr_loader_destroy(l);

    /* a value not below an identity table's rows fails the batch, naming it */
    const char *c[26] = {"1", "2", "00000006"};
    criteo_line(line1, sizeof line1, 1, c);
    write_file("day0.tsv", line1);
    bt = first_batch(&l, &spec, &rc, err, sizeof err);
    assert_int_equal(rc, PSC_ECORRUPT);
    assert_null(bt);
    assert_non_null(strstr(err, "feature C3: value 6 is not below table c3's 6 rows"));
    ctr_loader_destroy(l);
    psc_job_spec_deinit(&spec);
}

/* LibSVM bags pooled by each combiner: the weights carry it. */
static void test_libsvm_combiners(void **state)
{
    (void)state;
    write_file("a.svm", "1 3:2 7:1 3:2\n0\n");
    static const char *const names[] = {"sum", "mean", "sqrtn"};
    const float scale[] = {1.0f, 1.0f / 5.0f, 1.0f / 3.0f}; /* sum of w = 5, sqrt(sum w^2) = 3 */
    for (int c = 0; c < 3; c++) {
        char json[1024];
        snprintf(json, sizeof json,
                 "{\"model\": {\"loss\": \"sigmoid_cross_entropy\", \"layers\": ["
                 "{\"type\": \"embedding\", \"table\": \"emb\", \"features\": \"features\", \"combiner\": \"%s\","
                 " \"hash_ids\": false}, {\"type\": \"concat\"}, {\"type\": \"dense\", \"units\": 1}]},"
                 " \"tables\": [{\"name\": \"emb\", \"rows\": 10, \"dim\": 2}],"
                 " \"optimizer\": {\"name\": \"sgd\"}, \"data\": {\"format\": \"libsvm\", \"train\": \"%s/a.svm\", \"shuffle\": false}}",
                 names[c], g_dir);
        psc_job_spec_t spec;
        load_spec(json, &spec);
        ctr_loader_t *l;
        char err[512];
        int rc;
        ctr_slot_batch_t *b = first_batch(&l, &spec, &rc, err, sizeof err);
        assert_int_equal(rc, 0);
        assert_int_equal(b->raw.n, 2);
        assert_int_equal(b->off[0], 0);
        assert_int_equal(b->off[1], 3);
        assert_int_equal(b->off[2], 3); /* the second example's bag is empty */
        assert_int_equal(b->nuids[0], 2);
        assert_int_equal(b->uids[0][0], 3);
        assert_int_equal(b->uids[0][1], 7);
        const int32_t idx[] = {0, 1, 0};
        const float w[] = {2, 1, 2};
        for (int k = 0; k < 3; k++) {
            assert_int_equal(b->idx[k], idx[k]);
            assert_float_equal(b->w[k], w[k] * scale[c], 1e-7);
        }
        ctr_loader_release(l, b);
        ctr_loader_destroy(l);
        psc_job_spec_deinit(&spec);
    }
}

static int setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/psc-embed-ids.XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hash_pinned),
        cmocka_unit_test(test_criteo_slots),
        cmocka_unit_test(test_libsvm_combiners),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
