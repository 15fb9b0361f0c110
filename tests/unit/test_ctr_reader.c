/* test_ctr_reader — the CTR reader's core (worker/data/reader.c, data_file.c,
 * data_batch.c), on small files written in a mkdtemp folder.
 *
 * Files: lines (empty, CRLF, 600 KB, a last one without '\n'), their numbers
 * and offsets, from a plain file, a gzip file and memory alike; binary reads
 * (small, past the buffer, at the end, truncated) and record marks; a missing
 * file, a folder and a truncated gzip file fail naming the file, through the
 * reader too. Batches: the builder's off array exactly (empty bags, rollback).
 * Reader (LibSVM lines "1 ID:1", one id per record): glob expansion sorted and
 * de-duplicated, a pattern with no match named; file and record sharding over
 * 2 and 3 replicas reading every record exactly once overall (auto choosing
 * by the file count, record sharding with shuffled files too), replica r's
 * records exactly r, r+W, ...; a replica without a file under "file"; epochs
 * with per-epoch shuffles that follow the seed; batches never spanning an
 * epoch; the example cap for training (per replica) and test sets; specs the
 * reader refuses.
 */
#define PSC_CTR_FIXTURE_TESTS
#include "ctr_fixture.h"
#include "reader.h"
#include "reader_internal.h"
#include "psc.h"

#include <sys/stat.h>

/* ---- files ---- */

/* "a", "", "b" (CRLF), 600000 x, "c\r" without '\n'. */
static char *lines_text(size_t *len)
{
    size_t big = 600000;
    char *t = malloc(big + 64);
    size_t o = (size_t)sprintf(t, "a\n\nb\r\n");
    memset(t + o, 'x', big);
    o += big;
    o += (size_t)sprintf(t + o, "\nc\r");
    *len = o;
    return t;
}

static void check_lines(data_file_t *f)
{
    static const int64_t lens[] = {1, 0, 1, 600000, 1};
    static const int64_t used[] = {2, 1, 3, 600001, 2};
    char *line, err[512];
    int64_t lineno, off = 0;
    for (int i = 0; i < 5; i++) {
        ssize_t n = data_file_line(f, &line, &lineno, err, sizeof err);
        assert_int_equal(n, lens[i]);
        assert_int_equal(strlen(line), (size_t)n);
        assert_int_equal(lineno, i + 1);
        assert_int_equal(data_file_record(f), i + 1);
        assert_int_equal(data_file_record_offset(f), off);
        off += used[i];
        assert_int_equal(data_file_offset(f), off);
    }
    assert_string_equal(line, "c");
    assert_int_equal(data_file_line(f, &line, &lineno, err, sizeof err), -1);
    assert_int_equal(data_file_line(f, &line, &lineno, err, sizeof err), -1);
}

static void test_reader_file_lines(void **state)
{
    (void)state;
    size_t len;
    char *t = lines_text(&len), path[512], err[512];
    data_file_t *f;
    for (int gz = 0; gz < 2; gz++) {
        ctr_fix_write(gz ? "lines.gz" : "lines.txt", t, len, gz, path, sizeof path);
        assert_int_equal(data_file_open(path, &f, err, sizeof err), 0);
        assert_string_equal(data_file_path(f), path);
        check_lines(f);
        data_file_close(f);
    }
    assert_int_equal(data_file_open_mem(t, len, "mem", &f, err, sizeof err), 0);
    assert_string_equal(data_file_path(f), "mem");
    check_lines(f);
    data_file_close(f);
    /* an empty file has no line; "\n" one empty line */
    char *line;
    assert_int_equal(data_file_open_mem("", 0, "empty", &f, err, sizeof err), 0);
    assert_int_equal(data_file_line(f, &line, NULL, err, sizeof err), -1);
    data_file_close(f);
    assert_int_equal(data_file_open_mem("\n", 1, "nl", &f, err, sizeof err), 0);
    assert_int_equal(data_file_line(f, &line, NULL, err, sizeof err), 0);
    assert_int_equal(data_file_line(f, &line, NULL, err, sizeof err), -1);
    data_file_close(f);
    data_file_close(NULL);
    free(t);
}

static void check_binary(data_file_t *f, const unsigned char *data)
{
    unsigned char *got = malloc(300000);
    char err[512];
    assert_int_equal(data_file_read(f, got, 10, err, sizeof err), 1);
    assert_memory_equal(got, data, 10);
    data_file_mark_record(f);
    assert_int_equal(data_file_record(f), 1);
    assert_int_equal(data_file_record_offset(f), 10);
    assert_int_equal(data_file_read(f, got, 290000, err, sizeof err), 1); /* more than the buffer */
    assert_memory_equal(got, data + 10, 290000);
    data_file_mark_record(f);
    assert_int_equal(data_file_record(f), 2);
    assert_int_equal(data_file_record_offset(f), 290010);
    assert_int_equal(data_file_read(f, got, 9950, err, sizeof err), 1);
    assert_memory_equal(got, data + 290010, 9950);
    assert_int_equal(data_file_read(f, got, 100, err, sizeof err), PSC_ECORRUPT);
    assert_string_equal(err, "truncated: the file ends 40 bytes into a 100-byte read");
    assert_memory_equal(got, data + 299960, 40);
    assert_int_equal(data_file_offset(f), 300000);
    assert_int_equal(data_file_read(f, got, 1, err, sizeof err), 0);
    free(got);
}

static void test_reader_file_binary(void **state)
{
    (void)state;
    unsigned char *data = malloc(300000);
    for (int i = 0; i < 300000; i++) data[i] = (unsigned char)(i * 7 + i / 251);
    char path[512], err[512];
    data_file_t *f;
    for (int gz = 0; gz < 2; gz++) {
        ctr_fix_write(gz ? "bin.gz" : "bin", data, 300000, gz, path, sizeof path);
        assert_int_equal(data_file_open(path, &f, err, sizeof err), 0);
        check_binary(f, data);
        data_file_close(f);
    }
    assert_int_equal(data_file_open_mem(data, 300000, "mem", &f, err, sizeof err), 0);
    check_binary(f, data);
    data_file_close(f);
    free(data);
}

static void test_reader_file_errors(void **state)
{
    (void)state;
    char path[512], err[1024], want[1024], *line;
    data_file_t *f = (data_file_t *)1;
    snprintf(path, sizeof path, "%s/missing.txt", g_dir);
    assert_int_equal(data_file_open(path, &f, err, sizeof err), PSC_EIO);
    assert_null(f);
    snprintf(want, sizeof want, "%s: cannot open: No such file or directory", path);
    assert_string_equal(err, want);
    snprintf(path, sizeof path, "%s/folder", g_dir);
    assert_int_equal(mkdir(path, 0755), 0);
    assert_int_equal(data_file_open(path, &f, err, sizeof err), PSC_EIO);
    snprintf(want, sizeof want, "%s: cannot read: Is a directory", path);
    assert_string_equal(err, want);
    rmdir(path);

    /* a gzip file cut in half: the lines before the cut, then PSC_EIO naming it */
    char text[20000];
    size_t o = 0;
    for (int i = 0; o < sizeof text - 32; i++) o += (size_t)snprintf(text + o, sizeof text - o, "1 %d:1\n", i * 7919);
    ctr_fix_write("cut.svm.gz", text, o, 1, path, sizeof path);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(truncate(path, st.st_size / 2), 0);
    assert_int_equal(data_file_open(path, &f, err, sizeof err), 0);
    ssize_t n;
    while ((n = data_file_line(f, &line, NULL, err, sizeof err)) >= 0) {}
    assert_int_equal(n, PSC_EIO);
    /* the whole message, as the README quotes it: zlib's own "<fd:N>: " prefix is dropped */
    snprintf(want, sizeof want, "%s: corrupt or truncated gzip data (unexpected end of file)", path);
    assert_string_equal(err, want);
    data_file_close(f);

    psc_job_spec_t s;
    psc_feature_spec_t feats[2];
    ctr_fix_libsvm_spec(&s, feats);
    char *files[1];
    data_reader_t *r = ctr_fix_open1(&s, files, path);
    data_batch_t b = {0};
    int rc;
    while ((rc = data_reader_next(r, &b, 100, NULL, err, sizeof err)) > 0) {}
    assert_int_equal(rc, PSC_EIO);
    assert_memory_equal(err, want, strlen(want));
    assert_int_equal(data_reader_next(r, &b, 100, NULL, err, sizeof err), PSC_EIO); /* it sticks */
    data_reader_close(r);
    data_batch_free(&b);
}

/* ---- the batch builder ---- */

static void test_reader_batch_builder(void **state)
{
    (void)state;
    data_batch_t b = {0};
    data_batch_reset(&b, 2, 3);
    assert_int_equal(b.n, 0);
    assert_int_equal(b.off[0], 0);
    for (int i = 0; i < 200; i++) { /* past the first capacity */
        data_batch_begin(&b);
        assert_true(b.dense[b.n * 2] == 0.0f && b.dense[b.n * 2 + 1] == 0.0f);
        b.dense[b.n * 2] = (float)i;
        b.label[b.n] = (float)(i & 1);
        if (i % 3 == 1) { /* a bad record: dropped */
            data_batch_pair(&b, 999, 9.0f);
            data_batch_close_bag(&b);
            data_batch_rollback(&b);
            continue;
        }
        for (int k = 0; k < i % 4; k++) data_batch_pair(&b, (uint64_t)(i * 10 + k), (float)k); /* bag 0 */
        data_batch_close_bag(&b);
        data_batch_close_bag(&b); /* bag 1 empty */
        data_batch_pair(&b, (uint64_t)i, 0.5f);
        data_batch_close_bag(&b);
        data_batch_commit(&b);
    }
    int64_t at = 0;
    int n = 0;
    for (int i = 0; i < 200; i++) {
        if (i % 3 == 1) continue;
        assert_true(b.dense[n * 2] == (float)i && b.dense[n * 2 + 1] == 0.0f);
        assert_true(b.label[n] == (float)(i & 1));
        assert_int_equal(b.off[n * 3], at);
        for (int k = 0; k < i % 4; k++) {
            assert_int_equal(b.keys[at + k], i * 10 + k);
            assert_true(b.weights[at + k] == (float)k);
        }
        at += i % 4;
        assert_int_equal(b.off[n * 3 + 1], at);
        assert_int_equal(b.off[n * 3 + 2], at);
        assert_int_equal(b.keys[at], i);
        at++;
        assert_int_equal(b.off[n * 3 + 3], at);
        n++;
    }
    assert_int_equal(b.n, n);
    assert_int_equal(b.nnz, at);
    data_batch_reset(&b, 2, 3); /* same widths: arrays kept */
    assert_int_equal(b.n, 0);
    assert_int_equal(b.nnz, 0);
    assert_true(b.cap_n >= n);
    data_batch_reset(&b, 0, 1); /* other widths */
    data_batch_begin(&b);
    data_batch_close_bag(&b);
    data_batch_commit(&b);
    assert_int_equal(b.off[1], 0);
    data_batch_free(&b);
    assert_null(b.off);
    data_batch_free(NULL);
}

/* ---- the reader over LibSVM files "1 ID:1" ---- */

#define MAXREC 4096

/* Writes name_00.svm, name_01.svm.gz, ... (every other one gzip); file i
 * holds counts[i] records with ids 1000 * i + j. */
static void write_parts(const char *name, int nfiles, const int *counts)
{
    for (int i = 0; i < nfiles; i++) {
        char text[65536], fname[128], path[512];
        size_t o = 0;
        for (int j = 0; j < counts[i]; j++) o += (size_t)snprintf(text + o, sizeof text - o, "1 %d:1\n", 1000 * i + j);
        snprintf(fname, sizeof fname, "%s_%02d.svm%s", name, i, i % 2 ? ".gz" : "");
        ctr_fix_write(fname, text, o, i % 2, path, sizeof path);
    }
}

typedef struct pass {
    uint64_t ids[MAXREC];
    int epoch[MAXREC];
    int n;
    int batches[256], nbatch; /* batch sizes */
} pass_t;

static void spec_for(psc_job_spec_t *s, psc_feature_spec_t *feats, char **pat, const char *name)
{
    ctr_fix_libsvm_spec(s, feats);
    static char p[512];
    snprintf(p, sizeof p, "%s/%s_*", g_dir, name);
    pat[0] = p;
    s->train_files = pat;
    s->num_train_files = 1;
}

/* Every example of replica `shard` of `w` into *out. */
static void read_pass(const psc_job_spec_t *s, int test, int shard, int w, uint64_t seed, int shuffle, int max_n,
                      pass_t *out)
{
    memset(out, 0, sizeof *out);
    data_reader_t *r;
    char err[1024];
    int rc = data_reader_open(s, test, shard, w, seed, shuffle, &r, err, sizeof err);
    if (rc) fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, 0);
    data_batch_t b = {0};
    int epoch;
    while ((rc = data_reader_next(r, &b, max_n, &epoch, err, sizeof err)) > 0) {
        assert_int_equal(rc, b.n);
        assert_true(rc <= max_n);
        out->batches[out->nbatch++] = rc;
        for (int i = 0; i < b.n; i++) {
            assert_int_equal(b.off[i + 1] - b.off[i], 1);
            out->ids[out->n] = b.keys[b.off[i]];
            out->epoch[out->n++] = epoch;
        }
    }
    assert_int_equal(rc, 0);
    assert_int_equal(data_reader_next(r, &b, max_n, &epoch, err, sizeof err), 0);
    data_batch_free(&b);
    data_reader_close(r);
}

/* Over w replicas every record of files counts[] is read exactly once. */
static void check_partition(const psc_job_spec_t *s, int w, int nfiles, const int *counts, int shuffle)
{
    static pass_t p;
    int seen[16][256] = {{0}}, total = 0;
    for (int r = 0; r < w; r++) {
        read_pass(s, 0, r, w, 7, shuffle, 4, &p);
        for (int i = 0; i < p.n; i++) {
            int f = (int)(p.ids[i] / 1000), j = (int)(p.ids[i] % 1000);
            assert_true(f < nfiles && j < counts[f]);
            seen[f][j]++;
        }
        total += p.n;
    }
    for (int f = 0; f < nfiles; f++)
        for (int j = 0; j < counts[f]; j++) assert_int_equal(seen[f][j], 1);
    int want = 0;
    for (int f = 0; f < nfiles; f++) want += counts[f];
    assert_int_equal(total, want);
}

static void test_reader_glob(void **state)
{
    (void)state;
    static const int counts[] = {1, 1, 1};
    write_parts("globa", 3, counts); /* globa_00.svm, globa_01.svm.gz, globa_02.svm */
    char p0[512], p1[512], p2[512], *pats[3] = {p0, p1, p2}, err[1024], want[1024];
    snprintf(p0, sizeof p0, "%s/globa_0[12]*", g_dir);
    snprintf(p1, sizeof p1, "%s/globa_*.svm", g_dir);
    snprintf(p2, sizeof p2, "%s/globa_01.svm.gz", g_dir);
    psc_job_spec_t s;
    psc_feature_spec_t feats[2];
    ctr_fix_libsvm_spec(&s, feats);
    s.train_files = pats;
    s.num_train_files = 3;
    data_reader_t *r;
    assert_int_equal(data_reader_open(&s, 0, 0, 1, 1, 0, &r, err, sizeof err), 0);
    assert_int_equal(data_reader_num_files(r), 3); /* the union, each once */
    data_reader_close(r);
    static pass_t p;
    read_pass(&s, 0, 0, 1, 1, 0, 8, &p);
    assert_int_equal(p.n, 3);
    for (int i = 0; i < 3; i++) assert_int_equal(p.ids[i], 1000 * i); /* sorted by name */

    snprintf(p1, sizeof p1, "%s/nomatch_*.svm", g_dir);
    r = (data_reader_t *)1;
    assert_int_equal(data_reader_open(&s, 0, 0, 1, 1, 0, &r, err, sizeof err), PSC_ECONFIG);
    assert_null(r);
    snprintf(want, sizeof want, "data.train: no file matches \"%s\"", p1);
    assert_string_equal(err, want);
    /* the test set's own key */
    s.test_files = pats + 1;
    s.num_test_files = 1;
    assert_int_equal(data_reader_open(&s, 1, 0, 1, 1, 0, &r, err, sizeof err), PSC_ECONFIG);
    snprintf(want, sizeof want, "data.test: no file matches \"%s\"", p1);
    assert_string_equal(err, want);
}

static void test_reader_shard_file(void **state)
{
    (void)state;
    static const int counts[] = {5, 3, 8, 1, 6, 4};
    write_parts("fsh", 6, counts);
    psc_job_spec_t s;
    psc_feature_spec_t feats[2];
    char *pat[1];
    spec_for(&s, feats, pat, "fsh");
    for (int mode = 0; mode < 2; mode++) {
        s.shard = mode ? PSC_SHARD_FILE : PSC_SHARD_AUTO; /* auto: 6 files >= W: by file */
        for (int w = 2; w <= 3; w++) {
            check_partition(&s, w, 6, counts, 0);
            check_partition(&s, w, 6, counts, 1);
            /* replica r reads files r, r + W, ... whole */
            static pass_t p;
            for (int r = 0; r < w; r++) {
                read_pass(&s, 0, r, w, 3, 0, 5, &p);
                int at = 0;
                for (int f = r; f < 6; f += w)
                    for (int j = 0; j < counts[f]; j++) assert_int_equal(p.ids[at++], 1000 * f + j);
                assert_int_equal(at, p.n);
            }
        }
    }
}

static void test_reader_shard_record(void **state)
{
    (void)state;
    static const int counts[] = {7, 5};
    write_parts("rsh", 2, counts);
    psc_job_spec_t s;
    psc_feature_spec_t feats[2];
    char *pat[1];
    spec_for(&s, feats, pat, "rsh");
    static pass_t p;
    for (int w = 2; w <= 3; w++) {
        s.shard = w == 2 ? PSC_SHARD_RECORD : PSC_SHARD_AUTO; /* auto: 2 files < 3 replicas: by record */
        check_partition(&s, w, 2, counts, 0);
        check_partition(&s, w, 2, counts, 1); /* every replica shuffles the same way */
        for (int r = 0; r < w; r++) {
            read_pass(&s, 0, r, w, 3, 0, 4, &p);
            int at = 0;
            for (int k = r; k < 12; k += w) assert_int_equal(p.ids[at++], k < 7 ? k : 1000 + k - 7);
            assert_int_equal(at, p.n);
        }
    }
    /* more files than replicas, by record on request */
    static const int more[] = {3, 0, 4, 2, 5};
    write_parts("rsh5", 5, more);
    spec_for(&s, feats, pat, "rsh5");
    s.shard = PSC_SHARD_RECORD;
    check_partition(&s, 2, 5, more, 1);
    check_partition(&s, 3, 5, more, 0);
}

static void test_reader_shard_no_file(void **state)
{
    (void)state;
    static const int counts[] = {2, 2};
    write_parts("nof", 2, counts);
    psc_job_spec_t s;
    psc_feature_spec_t feats[2];
    char *pat[1], err[1024];
    spec_for(&s, feats, pat, "nof");
    s.shard = PSC_SHARD_FILE;
    data_reader_t *r;
    assert_int_equal(data_reader_open(&s, 0, 1, 3, 1, 0, &r, err, sizeof err), 0);
    assert_int_equal(data_reader_num_files(r), 1);
    data_reader_close(r);
    assert_int_equal(data_reader_open(&s, 0, 2, 3, 1, 0, &r, err, sizeof err), PSC_ECONFIG);
    assert_string_equal(err, "data.train: 2 file(s) for 3 replicas: replica 2 has none under data.shard \"file\" "
                             "(give at least one file per replica, or use \"record\" or \"auto\")");
}

/* The first record of each file of each epoch, in reading order (files of 3). */
static void file_orders(const pass_t *p, int *order /* (epochs, 5) */)
{
    for (int i = 0; i < p->n; i += 3) order[i / 3] = (int)(p->ids[i] / 1000);
}

static void test_reader_epochs_shuffle(void **state)
{
    (void)state;
    static const int counts[] = {3, 3, 3, 3, 3};
    write_parts("ep", 5, counts);
    psc_job_spec_t s;
    psc_feature_spec_t feats[2];
    char *pat[1];
    spec_for(&s, feats, pat, "ep");
    s.epochs = 4;
    static pass_t a, b, c;
    read_pass(&s, 0, 0, 1, 11, 1, 4, &a);
    read_pass(&s, 0, 0, 1, 11, 1, 4, &b);
    read_pass(&s, 0, 0, 1, 12, 1, 4, &c);
    assert_int_equal(a.n, 60);
    int oa[20], ob[20], oc[20];
    file_orders(&a, oa);
    file_orders(&b, ob);
    file_orders(&c, oc);
    assert_memory_equal(oa, ob, sizeof oa);      /* the seed decides */
    assert_true(memcmp(oa, oc, sizeof oa) != 0); /* another seed, another order */
    int differ = 0;
    for (int e = 0; e < 4; e++) {
        int seen[5] = {0};
        for (int k = 0; k < 5; k++) seen[oa[e * 5 + k]]++;
        for (int k = 0; k < 5; k++) assert_int_equal(seen[k], 1); /* each file once per epoch */
        if (e > 0 && memcmp(oa + e * 5, oa, 5 * sizeof *oa) != 0) differ = 1;
        for (int i = 0; i < 15; i++) { /* files are read whole, in order */
            assert_int_equal(a.epoch[e * 15 + i], e);
            assert_int_equal(a.ids[e * 15 + i] % 1000, (uint64_t)(i % 3));
        }
    }
    assert_true(differ); /* reshuffled per epoch */
    /* without shuffle: sorted, every epoch */
    read_pass(&s, 0, 0, 1, 11, 0, 4, &a);
    file_orders(&a, oa);
    for (int k = 0; k < 20; k++) assert_int_equal(oa[k], k % 5);
}

static void test_reader_epoch_batches(void **state)
{
    (void)state;
    static const int counts[] = {6, 4};
    write_parts("eb", 2, counts);
    psc_job_spec_t s;
    psc_feature_spec_t feats[2];
    char *pat[1];
    spec_for(&s, feats, pat, "eb");
    s.epochs = 3;
    static pass_t p;
    read_pass(&s, 0, 0, 1, 5, 1, 4, &p);
    static const int sizes[] = {4, 4, 2, 4, 4, 2, 4, 4, 2};
    assert_int_equal(p.nbatch, 9);
    assert_memory_equal(p.batches, sizes, sizeof sizes);
    for (int i = 0; i < 30; i++) assert_int_equal(p.epoch[i], i / 10);
    read_pass(&s, 0, 0, 1, 5, 1, 5, &p); /* an epoch that ends with a full batch */
    static const int fives[] = {5, 5, 5, 5, 5, 5};
    assert_int_equal(p.nbatch, 6);
    assert_memory_equal(p.batches, fives, sizeof fives);
    /* the test set is one pass, whatever the epochs */
    s.test_files = pat;
    s.num_test_files = 1;
    read_pass(&s, 1, 0, 1, 5, 0, 100, &p);
    assert_int_equal(p.n, 10);
    assert_int_equal(p.nbatch, 1);
}

static void test_reader_example_cap(void **state)
{
    (void)state;
    static const int counts[] = {20};
    write_parts("cap", 1, counts);
    psc_job_spec_t s;
    psc_feature_spec_t feats[2];
    char *pat[1];
    spec_for(&s, feats, pat, "cap");
    s.train_examples = 7;
    s.epochs = 2;
    static pass_t p;
    for (int r = 0; r < 2; r++) { /* ceil(7 / 2) = 4 per replica and epoch: records r, r + 2, r + 4, r + 6 */
        read_pass(&s, 0, r, 2, 1, 0, 3, &p);
        assert_int_equal(p.n, 8);
        static const int sizes[] = {3, 1, 3, 1};
        assert_memory_equal(p.batches, sizes, sizeof sizes);
        for (int i = 0; i < 8; i++) assert_int_equal(p.ids[i], (uint64_t)(r + 2 * (i % 4)));
    }
    s.train_examples = 100; /* more than there is */
    read_pass(&s, 0, 0, 1, 1, 0, 64, &p);
    assert_int_equal(p.n, 40);
    s.test_files = pat;
    s.num_test_files = 1;
    s.test_examples = 5;
    read_pass(&s, 1, 0, 1, 1, 0, 64, &p);
    assert_int_equal(p.n, 5);
    for (int i = 0; i < 5; i++) assert_int_equal(p.ids[i], i);
}

static void test_reader_bad_specs(void **state)
{
    (void)state;
    psc_job_spec_t s;
    psc_feature_spec_t feats[2];
    char *pat[1], err[1024];
    spec_for(&s, feats, pat, "none");
    data_reader_t *r;
    s.data_format = (enum psc_data_format)99;
    assert_int_equal(data_reader_open(&s, 0, 0, 1, 1, 0, &r, err, sizeof err), PSC_ECONFIG);
    assert_string_equal(err, "data.format: the reader reads idx, criteo, libsvm and tfrecord files");
    s.data_format = PSC_DATA_IDX; /* a prefix, not files */
    s.train_path[0] = '\0';
    assert_int_equal(data_reader_open(&s, 0, 0, 1, 1, 0, &r, err, sizeof err), PSC_ECONFIG);
    assert_string_equal(err, "data.train: no file given");
    s.data_format = PSC_DATA_LIBSVM;
    s.num_train_files = 0;
    assert_int_equal(data_reader_open(&s, 0, 0, 1, 1, 0, &r, err, sizeof err), PSC_ECONFIG);
    assert_string_equal(err, "data.train: no file given");
    assert_int_equal(data_reader_open(&s, 1, 0, 1, 1, 0, &r, err, sizeof err), PSC_ECONFIG);
    assert_string_equal(err, "data.test: no file given");
    data_reader_close(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reader_file_lines),     cmocka_unit_test(test_reader_file_binary),
        cmocka_unit_test(test_reader_file_errors),    cmocka_unit_test(test_reader_batch_builder),
        cmocka_unit_test(test_reader_glob),           cmocka_unit_test(test_reader_shard_file),
        cmocka_unit_test(test_reader_shard_record),   cmocka_unit_test(test_reader_shard_no_file),
        cmocka_unit_test(test_reader_epochs_shuffle), cmocka_unit_test(test_reader_epoch_batches),
        cmocka_unit_test(test_reader_example_cap),    cmocka_unit_test(test_reader_bad_specs),
    };
    return cmocka_run_group_tests(tests, ctr_fix_setup, ctr_fix_teardown);
}
