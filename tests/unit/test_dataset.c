/* test_dataset — the idx format of the data reader (worker/data/format_idx.c),
 * a dense model's data set read through it (dataset_read) and the loader
 * (worker/data/dataset.c).
 *
 * IDX: small files written here (plain and gzipped, in a mkdtemp directory) read
 * back exactly; .gz preferred when both exist; `limit`; bad magic, truncation
 * (plain and .gz), trailing bytes, count mismatch, zero dimensions and a missing
 * file each fail with an error naming the file. The real Fashion-MNIST training
 * set is loaded when it is installed.
 * Loader: over W shards every example is seen exactly once per epoch and by
 * its own shard only; epochs are reshuffled; the sequence is a function of the
 * seed; batch sizes (the short last one) and counters; destroy mid-epoch, before
 * the first batch and after the end.
 */
#include "dataset.h"
#include "psc.h"
#include "reader.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>

#define FMNIST "/usr/share/datasets/fashion-mnist/train"

static char g_dir[256];

/* ---- writing IDX files ---- */

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static void write_bytes(const char *path, const uint8_t *data, size_t len, int gz)
{
    if (gz) {
        gzFile f = gzopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(gzwrite(f, data, (unsigned)len), (int)len);
        assert_int_equal(gzclose(f), Z_OK);
    } else {
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(data, 1, len, f), len);
        assert_int_equal(fclose(f), 0);
    }
}

/* Pixel and label of example i (a pattern that differs per example and pixel). */
static uint8_t pixel_of(uint32_t i, uint32_t k, uint32_t salt) { return (uint8_t)(i * 31 + k * 7 + salt * 101 + 3); }
static uint8_t label_of(uint32_t i, uint32_t salt) { return (uint8_t)((i * 5 + salt) % 7); }

/* Writes <dir>/<name>-images-idx3-ubyte[.gz] and -labels-idx1-ubyte[.gz]; the
 * header fields can be overridden to make broken files. */
typedef struct idx_opts {
    uint32_t img_magic, lab_magic;
    uint32_t n_img, n_lab, rows, cols; /* header values */
    int32_t img_extra, lab_extra;      /* bytes added (> 0) or cut (< 0) at the end */
    int gz;
    uint32_t salt;
} idx_opts_t;

static idx_opts_t good(uint32_t n, uint32_t rows, uint32_t cols, int gz)
{
    idx_opts_t o = {0x803, 0x801, n, n, rows, cols, 0, 0, gz, 0};
    return o;
}

static void write_idx(const char *name, idx_opts_t o, char *prefix, size_t plen)
{
    snprintf(prefix, plen, "%s/%s", g_dir, name);
    char path[512];
    /* images */
    size_t body = (size_t)o.n_img * o.rows * o.cols;
    size_t len = (size_t)((int64_t)(16 + body) + o.img_extra);
    uint8_t *buf = calloc(1, PSC_MAX(len, (size_t)16 + body + 64));
    put_be32(buf, o.img_magic);
    put_be32(buf + 4, o.n_img);
    put_be32(buf + 8, o.rows);
    put_be32(buf + 12, o.cols);
    for (uint32_t i = 0; i < o.n_img; i++)
        for (uint32_t k = 0; k < o.rows * o.cols; k++)
            buf[16 + (size_t)i * o.rows * o.cols + k] = pixel_of(i, k, o.salt);
    snprintf(path, sizeof path, "%s-images-idx3-ubyte%s", prefix, o.gz ? ".gz" : "");
    write_bytes(path, buf, len, o.gz);
    free(buf);
    /* labels */
    len = (size_t)((int64_t)(8 + o.n_lab) + o.lab_extra);
    buf = calloc(1, PSC_MAX(len, (size_t)8 + o.n_lab + 64));
    put_be32(buf, o.lab_magic);
    put_be32(buf + 4, o.n_lab);
    for (uint32_t i = 0; i < o.n_lab; i++) buf[8 + i] = label_of(i, o.salt);
    snprintf(path, sizeof path, "%s-labels-idx1-ubyte%s", prefix, o.gz ? ".gz" : "");
    write_bytes(path, buf, len, o.gz);
    free(buf);
}

/* dataset_read of the training set at `prefix`, at most `limit` examples. */
static int dataset_load(const char *prefix, int64_t limit, dataset_t *d, char *err, size_t errlen)
{
    psc_job_spec_t spec;
    memset(&spec, 0, sizeof spec);
    spec.data_format = PSC_DATA_IDX;
    spec.epochs = 3; /* dataset_read reads one pass whatever the spec says */
    snprintf(spec.train_path, sizeof spec.train_path, "%s", prefix);
    spec.train_examples = limit;
    return dataset_read(&spec, 0, d, err, errlen);
}

static void expect_contents(const dataset_t *d, uint32_t n, uint32_t rows, uint32_t cols, uint32_t salt)
{
    assert_int_equal(d->n, n);
    assert_int_equal(d->features, rows * cols);
    int maxl = 0;
    for (uint32_t i = 0; i < n; i++) {
        for (uint32_t k = 0; k < rows * cols; k++) {
            float want = (float)pixel_of(i, k, salt) / 255.0f;
            float got = d->x[(size_t)i * rows * cols + k];
            assert_true(got >= 0.0f && got <= 1.0f);
            assert_float_equal(got, want, 1e-7);
        }
        assert_int_equal(d->y[i], label_of(i, salt));
        if (label_of(i, salt) > maxl) maxl = label_of(i, salt);
    }
    assert_int_equal(d->num_classes, maxl + 1);
}

/* ---- IDX reading ---- */

static void test_idx_plain(void **state)
{
    (void)state;
    char prefix[512], err[512] = "";
    write_idx("plain", good(23, 3, 5, 0), prefix, sizeof prefix);
    dataset_t d;
    int rc = dataset_load(prefix, 0, &d, err, sizeof err);
    if (rc) fail_msg("%s", err);
    expect_contents(&d, 23, 3, 5, 0);
    assert_int_equal(d.num_classes, 7);
    dataset_deinit(&d);
    assert_null(d.x);
    dataset_deinit(&d); /* twice is fine */

    /* limit keeps the first examples */
    assert_int_equal(dataset_load(prefix, 4, &d, err, sizeof err), 0);
    expect_contents(&d, 4, 3, 5, 0);
    dataset_deinit(&d);
    assert_int_equal(dataset_load(prefix, 1000, &d, err, sizeof err), 0);
    assert_int_equal(d.n, 23);
    dataset_deinit(&d);
}

static void test_idx_gz(void **state)
{
    (void)state;
    char prefix[512], err[512] = "";
    write_idx("gz", good(300, 4, 4, 1), prefix, sizeof prefix);
    dataset_t d;
    int rc = dataset_load(prefix, 0, &d, err, sizeof err);
    if (rc) fail_msg("%s", err);
    expect_contents(&d, 300, 4, 4, 0);
    dataset_deinit(&d);

    /* both present: the .gz is read first */
    idx_opts_t plain = good(10, 2, 2, 0);
    plain.salt = 9;
    write_idx("gz", plain, prefix, sizeof prefix);
    assert_int_equal(dataset_load(prefix, 0, &d, err, sizeof err), 0);
    expect_contents(&d, 300, 4, 4, 0);
    dataset_deinit(&d);
}

/* Loading `prefix` fails with `code` and an error naming `file_suffix`'s file and
 * containing `what`. */
static void expect_load_error(const char *prefix, int code, const char *file_suffix, const char *what)
{
    char err[1024] = "", path[600];
    dataset_t d;
    memset(&d, 0x5a, sizeof d);
    int rc = dataset_load(prefix, 0, &d, err, sizeof err);
    assert_int_equal(rc, code);
    assert_null(d.x);
    assert_null(d.y);
    assert_int_equal(d.n, 0);
    snprintf(path, sizeof path, "%s%s", prefix, file_suffix);
    if (!strstr(err, path) || !strstr(err, what)) fail_msg("error \"%s\" lacks \"%s\" or \"%s\"", err, path, what);
}

static void test_idx_errors(void **state)
{
    (void)state;
    char prefix[512];
    idx_opts_t o;

    o = good(5, 2, 2, 0), o.img_magic = 0x801;
    write_idx("magic_img", o, prefix, sizeof prefix);
    expect_load_error(prefix, PSC_ECORRUPT, "-images-idx3-ubyte", "bad magic 0x00000801");

    o = good(5, 2, 2, 1), o.lab_magic = 0x12345678;
    write_idx("magic_lab", o, prefix, sizeof prefix);
    expect_load_error(prefix, PSC_ECORRUPT, "-labels-idx1-ubyte.gz", "bad magic 0x12345678");

    o = good(5, 2, 2, 0), o.img_extra = -1;
    write_idx("trunc_img", o, prefix, sizeof prefix);
    expect_load_error(prefix, PSC_ECORRUPT, "-images-idx3-ubyte", "truncated");

    o = good(5, 2, 2, 1), o.lab_extra = -2;
    write_idx("trunc_lab_gz", o, prefix, sizeof prefix);
    expect_load_error(prefix, PSC_ECORRUPT, "-labels-idx1-ubyte.gz", "truncated");

    o = good(5, 2, 2, 0), o.img_extra = -(16 + 20 - 7); /* not even a header */
    write_idx("short_hdr", o, prefix, sizeof prefix);
    expect_load_error(prefix, PSC_ECORRUPT, "-images-idx3-ubyte", "truncated");

    o = good(5, 2, 2, 0), o.lab_extra = 3;
    write_idx("trailing", o, prefix, sizeof prefix);
    expect_load_error(prefix, PSC_ECORRUPT, "-labels-idx1-ubyte", "trailing");

    o = good(5, 2, 2, 0), o.n_lab = 6;
    write_idx("count", o, prefix, sizeof prefix);
    expect_load_error(prefix, PSC_ECORRUPT, "-labels-idx1-ubyte", "5 images");

    o = good(5, 2, 2, 0), o.cols = 0;
    write_idx("zero_dim", o, prefix, sizeof prefix);
    expect_load_error(prefix, PSC_ECORRUPT, "-images-idx3-ubyte", "dimensions");

    snprintf(prefix, sizeof prefix, "%s/missing", g_dir);
    expect_load_error(prefix, PSC_EIO, "-images-idx3-ubyte", "cannot open");

    /* a gzip stream cut in the middle of its compressed data */
    write_idx("cut_gz", good(2000, 8, 8, 1), prefix, sizeof prefix);
    char path[600];
    snprintf(path, sizeof path, "%s-images-idx3-ubyte.gz", prefix);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    uint8_t buf[1 << 16];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    assert_true(len > 200);
    write_bytes(path, buf, len / 2, 0);
    expect_load_error(prefix, PSC_EIO, "-images-idx3-ubyte.gz", "gzip");
}

/* The idx format as the reader gives it to any job: record sharding over 3
 * replicas (each keeps examples r, r+3, ..., the others skipped unparsed),
 * two epochs, batches of 4; labels as classes; a trailing byte in the labels
 * file is a bad record that data.bad_record_limit 1 skips. */
static void test_idx_reader_shards(void **state)
{
    (void)state;
    char prefix[512], err[512] = "";
    idx_opts_t o = good(20, 2, 3, 0);
    o.lab_extra = 1;
    write_idx("shards", o, prefix, sizeof prefix);
    psc_job_spec_t spec;
    memset(&spec, 0, sizeof spec);
    spec.data_format = PSC_DATA_IDX;
    spec.shard = PSC_SHARD_RECORD;
    spec.epochs = 2;
    spec.bad_record_limit = 1;
    snprintf(spec.train_path, sizeof spec.train_path, "%s", prefix);
    for (int r = 0; r < 3; r++) {
        data_reader_t *rd;
        if (data_reader_open(&spec, 0, r, 3, 1, 0, &rd, err, sizeof err)) fail_msg("%s", err);
        assert_int_equal(data_reader_num_dense(rd), 6);
        data_batch_t b = {0};
        int seen[2] = {0, 0}, epoch = -1, got;
        while ((got = data_reader_next(rd, &b, 4, &epoch, err, sizeof err)) > 0) {
            assert_int_equal(b.num_cat, 0);
            for (int i = 0; i < b.n; i++) {
                uint32_t ex = (uint32_t)(r + 3 * seen[epoch]++);
                assert_float_equal(b.label[i], (float)label_of(ex, 0), 0);
                for (int k = 0; k < 6; k++)
                    assert_float_equal(b.dense[i * 6 + k], (float)pixel_of(ex, (uint32_t)k, 0) / 255.0f, 1e-7);
            }
        }
        if (got < 0) fail_msg("%s", err);
        assert_int_equal(seen[0], (20 - r + 2) / 3);
        assert_int_equal(seen[1], seen[0]);
        assert_int_equal(data_reader_skipped(rd), 2); /* the trailing byte, once per epoch */
        data_batch_free(&b);
        data_reader_close(rd);
    }
}

static void test_fashion_mnist(void **state)
{
    (void)state;
    if (access(FMNIST "-images-idx3-ubyte.gz", R_OK) != 0) skip();
    char err[512] = "";
    dataset_t d;
    int rc = dataset_load(FMNIST, 0, &d, err, sizeof err);
    if (rc) fail_msg("%s", err);
    assert_int_equal(d.n, 60000);
    assert_int_equal(d.features, 784);
    assert_int_equal(d.num_classes, 10);
    int64_t per_class[10] = {0};
    for (int64_t i = 0; i < d.n; i++) per_class[d.y[i]]++;
    for (int c = 0; c < 10; c++) assert_int_equal(per_class[c], 6000);
    float lo = 1, hi = 0;
    for (int64_t i = 0; i < d.n * d.features; i++) {
        lo = PSC_MIN(lo, d.x[i]);
        hi = PSC_MAX(hi, d.x[i]);
    }
    assert_float_equal(lo, 0.0f, 0);
    assert_float_equal(hi, 1.0f, 0);
    dataset_deinit(&d);
}

/* ---- the loader ---- */

#define DS_N 103
#define DS_F 3

/* An in-memory data set whose example i has x = (i, -i, 0.5) and y = i % 10. */
static dataset_t g_ds;

static void make_ds(void)
{
    g_ds.n = DS_N;
    g_ds.features = DS_F;
    g_ds.num_classes = 10;
    g_ds.x = psc_xmalloc(DS_N * DS_F * sizeof(float));
    g_ds.y = psc_xmalloc(DS_N * sizeof(int32_t));
    for (int i = 0; i < DS_N; i++) {
        g_ds.x[i * DS_F] = (float)i;
        g_ds.x[i * DS_F + 1] = (float)-i;
        g_ds.x[i * DS_F + 2] = 0.5f;
        g_ds.y[i] = i % 10;
    }
}

/* Runs a loader to the end; writes the example ids in order into ids (room for
 * epochs * shard_size) and returns how many. Checks each batch on the way. */
static int run_loader(int shard, int W, int batch, uint64_t seed, int epochs, int prefetch, int *ids)
{
    char err[256] = "";
    dataset_loader_t *l = dataset_loader_create(&g_ds, shard, W, batch, seed, 1, epochs, prefetch, err, sizeof err);
    if (!l) fail_msg("%s", err);
    int64_t size = dataset_loader_shard_size(l);
    assert_int_equal(size, (DS_N - shard + W - 1) / W);
    assert_int_equal(dataset_loader_steps_per_epoch(l), (size + batch - 1) / batch);
    int count = 0, steps = 0;
    dataset_batch_t b;
    int expect_epoch = 0;
    int64_t expect_step = 0;
    while (dataset_loader_next(l, &b) == 0) {
        assert_int_equal(b.epoch, expect_epoch);
        assert_int_equal(b.step_in_epoch, expect_step);
        int64_t first = expect_step * batch;
        int want_n = (int)PSC_MIN((int64_t)batch, size - first);
        assert_int_equal(b.n, want_n);
        for (int i = 0; i < b.n; i++) {
            int id = (int)b.x[i * DS_F];
            assert_true(id >= 0 && id < DS_N);
            assert_float_equal(b.x[i * DS_F + 1], (float)-id, 0);
            assert_float_equal(b.x[i * DS_F + 2], 0.5f, 0);
            assert_int_equal(b.y[i], id % 10);
            ids[count++] = id;
        }
        steps++;
        if (++expect_step == dataset_loader_steps_per_epoch(l)) {
            expect_step = 0;
            expect_epoch++;
        }
    }
    assert_int_equal(expect_epoch, epochs);
    assert_int_equal(steps, dataset_loader_steps_per_epoch(l) * epochs);
    assert_int_equal(dataset_loader_next(l, &b), 1); /* stays done */
    dataset_loader_destroy(l);
    return count;
}

static void test_loader_shards(void **state)
{
    (void)state;
    enum { W = 3, EPOCHS = 3, BATCH = 8 };
    static int ids[W][EPOCHS * DS_N];
    int seen[EPOCHS][DS_N];
    memset(seen, 0, sizeof seen);
    for (int s = 0; s < W; s++) {
        int size = (DS_N - s + W - 1) / W;
        int count = run_loader(s, W, BATCH, 42, EPOCHS, 2, ids[s]);
        assert_int_equal(count, EPOCHS * size);
        for (int e = 0; e < EPOCHS; e++) {
            for (int k = 0; k < size; k++) {
                int id = ids[s][e * size + k];
                assert_int_equal(id % W, s); /* tf.data shard: s, s + W, ... */
                seen[e][id]++;
            }
            if (e > 0) /* reshuffled: a different order from the previous epoch */
                assert_memory_not_equal(&ids[s][e * size], &ids[s][(e - 1) * size], (size_t)size * sizeof(int));
        }
        /* shuffled at all: not in shard order */
        int in_order = 1;
        for (int k = 0; k < size; k++) in_order &= ids[s][k] == s + k * W;
        assert_false(in_order);
    }
    for (int e = 0; e < EPOCHS; e++)
        for (int i = 0; i < DS_N; i++) assert_int_equal(seen[e][i], 1);
}

static void test_loader_deterministic(void **state)
{
    (void)state;
    static int a[4 * DS_N], b[4 * DS_N], c[4 * DS_N];
    int na = run_loader(1, 2, 5, 7, 4, 1, a);
    int nb = run_loader(1, 2, 5, 7, 4, 3, b); /* prefetch depth does not change the sequence */
    int nc = run_loader(1, 2, 5, 8, 4, 1, c);
    assert_int_equal(na, nb);
    assert_int_equal(na, nc);
    assert_memory_equal(a, b, (size_t)na * sizeof(int));
    assert_memory_not_equal(a, c, (size_t)na * sizeof(int));
}

static void test_loader_batches(void **state)
{
    (void)state;
    static int ids[2 * DS_N];
    /* one shard; 103 = 10 * 10 + 3: a short last batch of 3 */
    assert_int_equal(run_loader(0, 1, 10, 1, 2, 2, ids), 2 * DS_N);
    /* batch larger than the shard: one batch per epoch */
    assert_int_equal(run_loader(0, 1, 500, 1, 2, 1, ids), 2 * DS_N);
    /* batch of one, many shards */
    assert_int_equal(run_loader(9, 10, 1, 1, 1, 4, ids), 10);
    /* exact multiple: 52 examples of shard 0 of 2, batch 4 */
    assert_int_equal(run_loader(0, 2, 4, 1, 1, 2, ids), 52);
}

static void test_loader_destroy_early(void **state)
{
    (void)state;
    char err[256] = "";
    dataset_batch_t b;
    /* mid-epoch: the producer is blocked on a full ring */
    for (int prefetch = 1; prefetch <= 3; prefetch++) {
        dataset_loader_t *l = dataset_loader_create(&g_ds, 0, 1, 4, 3, 1, 5, prefetch, err, sizeof err);
        assert_non_null(l);
        assert_int_equal(dataset_loader_next(l, &b), 0);
        assert_int_equal(dataset_loader_next(l, &b), 0);
        assert_int_equal(b.step_in_epoch, 1);
        usleep(2000); /* let the producer fill the ring and wait */
        dataset_loader_destroy(l);
    }
    /* before the first batch, and right after create */
    dataset_loader_t *l = dataset_loader_create(&g_ds, 0, 1, 4, 3, 1, 5, 2, err, sizeof err);
    assert_non_null(l);
    dataset_loader_destroy(l);
    dataset_loader_destroy(NULL);
}

static void test_loader_errors(void **state)
{
    (void)state;
    char err[256] = "";
    dataset_t tiny = g_ds;
    tiny.n = 2;
    assert_null(dataset_loader_create(&tiny, 2, 3, 4, 1, 1, 1, 1, err, sizeof err));
    assert_non_null(strstr(err, "empty"));
    assert_null(dataset_loader_create(&g_ds, 3, 3, 4, 1, 1, 1, 1, err, sizeof err));
    assert_null(dataset_loader_create(&g_ds, 0, 1, 0, 1, 1, 1, 1, err, sizeof err));
    assert_null(dataset_loader_create(&g_ds, 0, 1, 4, 1, 1, 1, 0, err, sizeof err));
}

/* ---- setup ---- */

static void rm_tree(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

static int setup(void **state)
{
    (void)state;
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/psc_test_dataset_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_dir)) return -1;
    make_ds();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    rm_tree(g_dir);
    dataset_deinit(&g_ds);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idx_plain),
        cmocka_unit_test(test_idx_gz),
        cmocka_unit_test(test_idx_errors),
        cmocka_unit_test(test_idx_reader_shards),
        cmocka_unit_test(test_fashion_mnist),
        cmocka_unit_test(test_loader_shards),
        cmocka_unit_test(test_loader_deterministic),
        cmocka_unit_test(test_loader_batches),
        cmocka_unit_test(test_loader_destroy_early),
        cmocka_unit_test(test_loader_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
