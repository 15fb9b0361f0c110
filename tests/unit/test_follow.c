/* test_follow — a followed directory (worker/data/follow.c) and the reader
 * over one (data.follow, worker/data/reader.c), on files written in a mkdtemp
 * folder.
 *
 * The complete-file rule (dot names, .tmp, .part; directories; the pattern);
 * listings taken in name order across polls, files renamed into place
 * counting from then; shares of 2 and 3 replicas (file k to replica k mod W);
 * a file that appears sorting before one already taken: never taken, counted
 * and warned once; a directory that disappears (counted once, polling goes
 * on, it counts as idle) and comes back with new files; the idle end and the
 * cancel flag of data_follow_next; the rolling test window's newest files.
 * The reader: batches that span files, the files finished with the batch
 * that holds their last example, a file that vanishes before it is opened
 * (skipped), the incomplete last batch dropped at the idle end, a rolling
 * data.test directory.
 */
#define PSC_CTR_FIXTURE_TESTS
#include "ctr_fixture.h"
#include "follow.h"
#include "reader.h"
#include "psc.h"

#include <stdatomic.h>
#include <sys/stat.h>

/* g_dir/sub, created. */
static void subdir(const char *sub, char *path, size_t n)
{
    snprintf(path, n, "%s/%s", g_dir, sub);
    assert_int_equal(mkdir(path, 0755), 0);
}

/* Writes dir/name with text the way a writer should: .name.tmp, then rename. */
static void publish(const char *dir, const char *name, const char *text)
{
    char tmp[600], dst[600];
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dir, name);
    snprintf(dst, sizeof dst, "%s/%s", dir, name);
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(rename(tmp, dst), 0);
}

/* Removes dir's entries (files and empty folders) and dir. */
static void rm_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[700];
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (unlink(p) != 0) rmdir(p);
    }
    closedir(d);
    rmdir(dir);
}

/* The next path of f, which must be there now: its name after the directory. */
static void expect_next(data_follow_t *f, const char *dir, const char *name)
{
    char *path, want[700];
    assert_int_equal(data_follow_next(f, NULL, &path), 1);
    snprintf(want, sizeof want, "%s/%s", dir, name);
    assert_string_equal(path, want);
    free(path);
}

static void test_complete_name(void **state)
{
    (void)state;
    assert_true(data_follow_complete_name("part-0001.tsv"));
    assert_true(data_follow_complete_name("a.tmpx"));
    assert_true(data_follow_complete_name("tmp"));
    assert_false(data_follow_complete_name(".part-0001.tsv.tmp"));
    assert_false(data_follow_complete_name(".hidden"));
    assert_false(data_follow_complete_name("part-0001.tsv.tmp"));
    assert_false(data_follow_complete_name("part-0001.tsv.part"));
    assert_false(data_follow_complete_name(".tmp"));
    assert_false(data_follow_complete_name(""));
}

static void test_listing_order_and_rule(void **state)
{
    (void)state;
    char dir[512], p[600];
    subdir("order", dir, sizeof dir);
    publish(dir, "b.tsv", "x\n");
    publish(dir, "a.tsv", "x\n");
    publish(dir, "c.tsv.part", "x\n"); /* not complete */
    publish(dir, "d.tsv.tmp", "x\n");
    snprintf(p, sizeof p, "%s/e.dir", dir);
    assert_int_equal(mkdir(p, 0755), 0); /* not a file */
    snprintf(p, sizeof p, "%s/.f.tsv.tmp", dir);
    FILE *w = fopen(p, "w"); /* a writer at work */
    assert_non_null(w);
    data_follow_t *f;
    char err[512];
    assert_int_equal(data_follow_create(dir, 0, 1, 60, 0.05, &f, err, sizeof err), 0);
    assert_int_equal(data_follow_poll(f, psc_now()), 2);
    expect_next(f, dir, "a.tsv");
    expect_next(f, dir, "b.tsv");
    /* the writer finishes: renamed into place, it counts from the next listing on */
    fputs("x\n", w);
    fclose(w);
    char to[600];
    snprintf(to, sizeof to, "%s/f.tsv", dir);
    assert_int_equal(rename(p, to), 0);
    assert_int_equal(data_follow_poll(f, psc_now()), 1);
    assert_int_equal(data_follow_poll(f, psc_now()), 0); /* taken once */
    expect_next(f, dir, "f.tsv");
    data_follow_stats_t st;
    data_follow_stats(f, &st);
    assert_int_equal(st.taken, 3);
    assert_int_equal(st.mine, 3);
    assert_int_equal(st.late, 0);
    data_follow_destroy(f);
    /* a pattern: only its matches */
    char pat[600];
    snprintf(pat, sizeof pat, "%s/[ab]*.tsv", dir);
    assert_int_equal(data_follow_create(pat, 0, 1, 60, 0.05, &f, err, sizeof err), 0);
    assert_int_equal(data_follow_poll(f, psc_now()), 2);
    expect_next(f, dir, "a.tsv");
    expect_next(f, dir, "b.tsv");
    data_follow_destroy(f);
    /* a pattern with a wildcard in a directory's name is refused */
    snprintf(pat, sizeof pat, "%s/*/x", dir);
    assert_int_equal(data_follow_create(pat, 0, 1, 60, 0.05, &f, err, sizeof err), PSC_ECONFIG);
    assert_null(f);
    assert_non_null(strstr(err, "data.train: cannot follow"));
    rm_tree(dir);
}

static void test_shares(void **state)
{
    (void)state;
    char dir[512], name[32];
    subdir("shares", dir, sizeof dir);
    for (int k = 0; k < 7; k++) {
        snprintf(name, sizeof name, "f%02d", k);
        publish(dir, name, "x\n");
    }
    for (int w = 2; w <= 3; w++)
        for (int r = 0; r < w; r++) {
            data_follow_t *f;
            char err[256];
            assert_int_equal(data_follow_create(dir, r, w, 60, 0.05, &f, err, sizeof err), 0);
            assert_int_equal(data_follow_poll(f, psc_now()), 7);
            for (int k = r; k < 7; k += w) {
                snprintf(name, sizeof name, "f%02d", k);
                expect_next(f, dir, name);
            }
            data_follow_stats_t st;
            data_follow_stats(f, &st);
            assert_int_equal(st.taken, 7);
            assert_int_equal(st.mine, (7 - r + w - 1) / w);
            data_follow_destroy(f);
        }
    rm_tree(dir);
}

static void test_late_file(void **state)
{
    (void)state;
    char dir[512], err[256];
    subdir("late", dir, sizeof dir);
    publish(dir, "b", "x\n");
    publish(dir, "c", "x\n");
    data_follow_t *f;
    assert_int_equal(data_follow_create(dir, 0, 1, 60, 0.05, &f, err, sizeof err), 0);
    assert_int_equal(data_follow_poll(f, psc_now()), 2);
    publish(dir, "a", "x\n"); /* sorts before c, taken already */
    publish(dir, "bb", "x\n");
    publish(dir, "d", "x\n");
    assert_int_equal(data_follow_poll(f, psc_now()), 1); /* d only */
    assert_int_equal(data_follow_poll(f, psc_now()), 0);
    data_follow_stats_t st;
    data_follow_stats(f, &st);
    assert_int_equal(st.late, 2); /* a and bb, each warned once */
    assert_int_equal(st.taken, 3);
    expect_next(f, dir, "b");
    expect_next(f, dir, "c");
    expect_next(f, dir, "d");
    data_follow_destroy(f);
    rm_tree(dir);
}

static void test_directory_lost(void **state)
{
    (void)state;
    char dir[512], away[600], err[256];
    subdir("lost", dir, sizeof dir);
    snprintf(away, sizeof away, "%s.away", dir);
    publish(dir, "a", "x\n");
    data_follow_t *f;
    assert_int_equal(data_follow_create(dir, 0, 1, 0.3, 0.05, &f, err, sizeof err), 0);
    assert_int_equal(data_follow_poll(f, psc_now()), 1);
    expect_next(f, dir, "a");
    assert_int_equal(rename(dir, away), 0);
    assert_int_equal(data_follow_poll(f, psc_now()), 0);
    assert_int_equal(data_follow_poll(f, psc_now()), 0);
    data_follow_stats_t st;
    data_follow_stats(f, &st);
    assert_int_equal(st.dir_lost, 1); /* warned once */
    /* back, with a new file: taken; an old name is not taken again */
    assert_int_equal(rename(away, dir), 0);
    publish(dir, "b", "x\n");
    assert_int_equal(data_follow_poll(f, psc_now()), 1);
    expect_next(f, dir, "b");
    /* lost for good: the time counts as idle, the follower ends without a crash */
    assert_int_equal(rename(dir, away), 0);
    char *path;
    double t0 = psc_now();
    assert_int_equal(data_follow_next(f, NULL, &path), 0);
    assert_true(psc_now() - t0 < 2);
    data_follow_stats(f, &st);
    assert_int_equal(st.dir_lost, 2);
    data_follow_destroy(f);
    rm_tree(away);
}

static void test_idle_and_cancel(void **state)
{
    (void)state;
    char dir[512], err[256], *path;
    subdir("idle", dir, sizeof dir);
    data_follow_t *f;
    /* nothing ever comes: idle after idle_secs */
    assert_int_equal(data_follow_create(dir, 0, 1, 0.25, 0.05, &f, err, sizeof err), 0);
    double t0 = psc_now();
    assert_int_equal(data_follow_next(f, NULL, &path), 0);
    double took = psc_now() - t0;
    assert_true(took >= 0.24 && took < 2);
    assert_null(path);
    data_follow_destroy(f);
    /* another replica's file restarts the idle clock, this one gets none */
    publish(dir, "a", "x\n");
    assert_int_equal(data_follow_create(dir, 1, 2, 0.25, 0.05, &f, err, sizeof err), 0);
    assert_int_equal(data_follow_next(f, NULL, &path), 0);
    data_follow_stats_t st;
    data_follow_stats(f, &st);
    assert_int_equal(st.taken, 1);
    assert_int_equal(st.mine, 0);
    data_follow_destroy(f);
    /* the cancel flag ends the wait at once */
    atomic_int cancel;
    atomic_init(&cancel, 1);
    assert_int_equal(data_follow_create(dir, 1, 2, 60, 0.05, &f, err, sizeof err), 0);
    t0 = psc_now();
    assert_int_equal(data_follow_next(f, &cancel, &path), PSC_ECANCELLED);
    assert_true(psc_now() - t0 < 1);
    data_follow_destroy(f);
    data_follow_destroy(NULL);
    rm_tree(dir);
}

static void test_newest(void **state)
{
    (void)state;
    char dir[512], err[256], **files;
    int n;
    subdir("window", dir, sizeof dir);
    assert_int_equal(data_follow_newest(dir, 2, &files, &n, err, sizeof err), PSC_ENOTFOUND);
    assert_non_null(strstr(err, "holds no complete file yet"));
    publish(dir, "t1", "x\n");
    publish(dir, "t3", "x\n");
    publish(dir, "t2", "x\n");
    publish(dir, "t4.tmp", "x\n");
    assert_int_equal(data_follow_newest(dir, 2, &files, &n, err, sizeof err), 0);
    assert_int_equal(n, 2);
    char want[600];
    snprintf(want, sizeof want, "%s/t2", dir);
    assert_string_equal(files[0], want);
    snprintf(want, sizeof want, "%s/t3", dir);
    assert_string_equal(files[1], want);
    for (int i = 0; i < n; i++) free(files[i]);
    free(files);
    assert_int_equal(data_follow_newest(dir, 10, &files, &n, err, sizeof err), 0);
    assert_int_equal(n, 3);
    for (int i = 0; i < n; i++) free(files[i]);
    free(files);
    rm_tree(dir);
    assert_int_equal(data_follow_newest(dir, 1, &files, &n, err, sizeof err), PSC_EIO);
}

/* ---- the reader over a followed directory ---- */

/* LibSVM records "1 ID:1" with ids base, base + 1, ... (count of them). */
static void publish_ids(const char *dir, const char *name, int base, int count)
{
    char text[4096];
    size_t o = 0;
    for (int j = 0; j < count; j++) o += (size_t)snprintf(text + o, sizeof text - o, "1 %d:1\n", base + j);
    publish(dir, name, text);
}

static void follow_spec(psc_job_spec_t *s, psc_feature_spec_t *feats, char **train, const char *dir)
{
    ctr_fix_libsvm_spec(s, feats);
    train[0] = (char *)dir;
    s->train_files = train;
    s->num_train_files = 1;
    s->follow = 1;
    s->follow_idle_secs = 0.3;
    s->follow_poll_secs = 0.05;
}

/* The next batch: n examples, ids first, first + 1, ...; the files it finished ("" none). */
static void expect_batch(data_reader_t *r, data_batch_t *b, int max_n, const uint64_t *ids, int n, const char *done)
{
    char err[512];
    int rc = data_reader_next(r, b, max_n, NULL, err, sizeof err);
    if (rc < 0) fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, n);
    for (int i = 0; i < n; i++) assert_int_equal(b->keys[b->off[i]], ids[i]);
    assert_string_equal(data_reader_files_done(r), done);
}

static void test_reader_follow(void **state)
{
    (void)state;
    char dir[512], err[512], done[2048], *train[1];
    subdir("reader", dir, sizeof dir);
    psc_job_spec_t s;
    psc_feature_spec_t feats[2];
    follow_spec(&s, feats, train, dir);
    publish_ids(dir, "p1", 100, 3);
    publish_ids(dir, "p2", 200, 2);
    publish_ids(dir, "p3", 300, 1);
    data_reader_t *r;
    assert_int_equal(data_reader_open(&s, 0, 0, 1, 42, 1, &r, err, sizeof err), 0);
    data_batch_t b = {0};
    expect_batch(r, &b, 2, (uint64_t[]){100, 101}, 2, "");
    /* p2 vanishes (a retention job) after it was listed: skipped */
    char p[600];
    snprintf(p, sizeof p, "%s/p2", dir);
    assert_int_equal(unlink(p), 0);
    snprintf(done, sizeof done, "%s/p1\t3\n%s/p3\t1\n", dir, dir); /* a batch spans files */
    expect_batch(r, &b, 2, (uint64_t[]){102, 300}, 2, done);
    /* more comes while the job runs: its last example ends a batch, so it is done with it */
    publish_ids(dir, "p4", 400, 2);
    snprintf(done, sizeof done, "%s/p4\t2\n", dir);
    expect_batch(r, &b, 2, (uint64_t[]){400, 401}, 2, done);
    publish_ids(dir, "p5", 500, 3);
    snprintf(done, sizeof done, "%s/p5\t3\n", dir);
    expect_batch(r, &b, 2, (uint64_t[]){500, 501}, 2, "");
    /* the idle end: the incomplete batch (502) is dropped, the reader is done */
    double t0 = psc_now();
    assert_int_equal(data_reader_next(r, &b, 2, NULL, err, sizeof err), 0);
    assert_true(psc_now() - t0 >= 0.25);
    assert_int_equal(b.n, 0);
    assert_int_equal(data_reader_next(r, &b, 2, NULL, err, sizeof err), 0);
    data_reader_close(r);
    /* a second replica of 2 takes files 1, 3 of the listing (p3, p5 now that p2 is gone) */
    assert_int_equal(data_reader_open(&s, 0, 1, 2, 42, 0, &r, err, sizeof err), 0);
    snprintf(done, sizeof done, "%s/p3\t1\n", dir);
    expect_batch(r, &b, 2, (uint64_t[]){300, 500}, 2, done);
    data_reader_close(r);
    /* cancelled while it waits */
    atomic_int cancel;
    atomic_init(&cancel, 1);
    s.follow_idle_secs = 60;
    assert_int_equal(data_reader_open(&s, 0, 0, 1, 42, 0, &r, err, sizeof err), 0);
    data_reader_set_cancel(r, &cancel);
    int rc;
    while ((rc = data_reader_next(r, &b, 64, NULL, err, sizeof err)) > 0) {}
    assert_int_equal(rc, PSC_ECANCELLED);
    data_reader_close(r);
    data_batch_free(&b);
    rm_tree(dir);
}

static void test_reader_test_window(void **state)
{
    (void)state;
    char dir[512], err[512], *train[1], *test[1];
    subdir("rolling", dir, sizeof dir);
    psc_job_spec_t s;
    psc_feature_spec_t feats[2];
    follow_spec(&s, feats, train, "/nonexistent");
    test[0] = dir;
    s.test_files = test;
    s.num_test_files = 1;
    s.test_window = 2;
    data_reader_t *r;
    assert_int_equal(data_reader_open(&s, 1, 0, 1, 42, 0, &r, err, sizeof err), PSC_ENOTFOUND);
    publish_ids(dir, "t1", 10, 1);
    publish_ids(dir, "t2", 20, 1);
    publish_ids(dir, "t3", 30, 2);
    assert_int_equal(data_reader_open(&s, 1, 0, 1, 42, 0, &r, err, sizeof err), 0);
    data_batch_t b = {0};
    assert_int_equal(data_reader_next(r, &b, 10, NULL, err, sizeof err), 3); /* t2 and t3 */
    assert_int_equal(b.keys[0], 20);
    assert_int_equal(b.keys[2], 31);
    assert_int_equal(data_reader_next(r, &b, 10, NULL, err, sizeof err), 0);
    data_reader_close(r);
    data_batch_free(&b);
    rm_tree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_complete_name),
        cmocka_unit_test(test_listing_order_and_rule),
        cmocka_unit_test(test_shares),
        cmocka_unit_test(test_late_file),
        cmocka_unit_test(test_directory_lost),
        cmocka_unit_test(test_idle_and_cancel),
        cmocka_unit_test(test_newest),
        cmocka_unit_test(test_reader_follow),
        cmocka_unit_test(test_reader_test_window),
    };
    return cmocka_run_group_tests(tests, ctr_fix_setup, ctr_fix_teardown);
}
