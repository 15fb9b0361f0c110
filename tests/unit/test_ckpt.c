/* test_ckpt — checkpoints in a real RocksDB under a mkdtemp folder in /tmp.
 *
 * Round trip (a 5 MiB tensor, an empty one, a 200-byte name) is bit-exact,
 * before and after reopening; names keep their order. A prepared checkpoint is
 * invisible to ckpt_latest_good until committed. Keep-last-K deletes exactly the
 * job's older committed and older prepared checkpoints, and their keys are gone.
 * A flipped byte in a tensor, its header or a manifest is PSC_ECORRUPT naming the
 * checkpoint and the tensor, and ckpt_latest_good falls back to the previous
 * committed checkpoint with one log line. Ids cannot be reused; discard and abort
 * leave nothing. Crash: a child process (this executable, re-executed) that dies
 * before ckpt_prepare leaves only the earlier checkpoint; one killed right after
 * it leaves a prepared, intact checkpoint. The stored bytes match the format in
 * ckpt.h. Readers running during commits never see a torn checkpoint.
 * A full disk: test_ckpt_disk.c. The shared helpers: ckpt_fixture.h.
 */
#include "ckpt.h"
#include "ckpt_fixture.h"
#include "crc32c.h"
#include "psc.h"

#include <ftw.h>
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <rocksdb/c.h>


/* ThreadSanitizer builds: librocksdb and the C++ and compression libraries under
 * it are not instrumented, so TSan sees their memory accesses (memcpy into the
 * memtable, block decompression) without the atomics that order them, and
 * reports races between a commit and a concurrent reader that are not there.
 * Ignore accesses made from those libraries; this file's and ckpt.c's stay
 * checked. */
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

/* ---- fixture: a fresh store in /tmp ---- */

typedef struct fx {
    char dir[64];
    ckpt_db_t *db;
} fx_t;

static void reopen(fx_t *f)
{
    char err[512] = "";
    ckpt_close(f->db);
    f->db = NULL;
    int rc = ckpt_open(f->dir, &f->db, err, sizeof err);
    if (rc) fail_msg("reopen %s: %s", f->dir, err);
}

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof *f);
    if (!f) return -1;
    snprintf(f->dir, sizeof f->dir, "/tmp/test_ckpt.XXXXXX");
    if (!mkdtemp(f->dir)) return -1;
    char err[512] = "", path[128];
    /* A folder below the temp dir: ckpt_open creates missing parents. */
    snprintf(path, sizeof path, "%s/ps0/db", f->dir);
    memmove(f->dir, path, strlen(path) + 1);
    if (ckpt_open(f->dir, &f->db, err, sizeof err)) {
        fprintf(stderr, "open: %s\n", err);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx_t *f = *state;
    ckpt_close(f->db);
    char *top = strstr(f->dir, "/ps0/db");
    *top = 0;
    nftw(f->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    free(f);
    return 0;
}

/* ---- log callback: counts lines, keeps the last ones ---- */

static int log_calls;
static char log_lines[8][640];

static void log_cb(const char *line)
{
    snprintf(log_lines[log_calls % 8], sizeof log_lines[0], "%s", line);
    log_calls++;
}

/* ---- tests ---- */

static void test_round_trip(void **state)
{
    fx_t *f = *state;
    char err[512] = "";
    char longname[CKPT_MAX_NAME + 1];
    memset(longname, 'n', CKPT_MAX_NAME);
    longname[CKPT_MAX_NAME] = 0;
    unsigned char odd[3] = {1, 2, 3};

    time_t before = time(NULL);
    ckpt_writer_t *w = ckpt_begin(f->db, 7, JOB, 700);
    add_shard(w, 7, 700, 0);
    assert_int_equal(ckpt_add(w, longname, odd, sizeof odd), 0);
    assert_int_equal(ckpt_add(w, "name with spaces/and:colons", NULL, 0), 0);
    assert_int_equal(ckpt_prepare(w, err, sizeof err), 0);
    time_t after = time(NULL);

    for (int pass = 0; pass < 2; pass++) {
        expect_shard(f->db, 7, 700, 0);
        void *got;
        size_t len;
        assert_int_equal(ckpt_read(f->db, 7, longname, &got, &len, err, sizeof err), 0);
        assert_int_equal(len, 3);
        assert_memory_equal(got, odd, 3);
        free(got);
        assert_int_equal(ckpt_read(f->db, 7, "name with spaces/and:colons", &got, &len, err, sizeof err), 0);
        assert_int_equal(len, 0);
        assert_non_null(got);
        free(got);

        char **names;
        int n;
        assert_int_equal(ckpt_names(f->db, 7, &names, &n, err, sizeof err), 0);
        assert_int_equal(n, NSHARD + 2);
        for (int i = 0; i < NSHARD; i++) assert_string_equal(names[i], SHARD[i].name);
        assert_string_equal(names[NSHARD], longname);
        assert_string_equal(names[NSHARD + 1], "name with spaces/and:colons");
        ckpt_free_names(names, n);

        ckpt_info_t *info;
        assert_int_equal(ckpt_list(f->db, &info, &n, err, sizeof err), 0);
        assert_int_equal(n, 1);
        assert_int_equal(info[0].id, 7);
        assert_int_equal(info[0].step, 700);
        assert_string_equal(info[0].job_id, JOB);
        assert_int_equal(info[0].committed, pass); /* committed between the passes */
        assert_int_equal(info[0].ntensors, NSHARD + 2);
        uint64_t bytes = 3;
        for (int i = 0; i < NSHARD; i++) bytes += SHARD[i].len;
        assert_int_equal(info[0].bytes, bytes);
        assert_true(info[0].created_unix >= (double)before && info[0].created_unix <= (double)after + 1);
        ckpt_info_t one;
        assert_int_equal(ckpt_get_info(f->db, 7, &one, err, sizeof err), 0);
        assert_int_equal(one.id, info[0].id);
        assert_int_equal(one.step, info[0].step);
        assert_string_equal(one.job_id, info[0].job_id);
        assert_int_equal(one.committed, info[0].committed);
        assert_int_equal(one.ntensors, info[0].ntensors);
        assert_int_equal(one.bytes, info[0].bytes);
        assert_true(one.created_unix == info[0].created_unix);
        free(info);
        assert_int_equal(ckpt_verify(f->db, 7, err, sizeof err), 0);

        if (pass == 0) {
            /* Prepared only: restore does not see it. */
            ckpt_info_t good;
            EXPECT_ERR(PSC_ENOTFOUND, "no committed checkpoint of job " JOB,
                       ckpt_latest_good(f->db, JOB, &good, NULL, err, sizeof err));
            assert_int_equal(ckpt_commit(f->db, 7, 3, err, sizeof err), 0);
            assert_int_equal(ckpt_latest_good(f->db, JOB, &good, NULL, err, sizeof err), 0);
            assert_int_equal(good.id, 7);
            assert_int_equal(good.step, 700);
            reopen(f); /* the second pass reads what is on disk */
        }
    }

    /* Unknown id or name. */
    void *got = (void *)1;
    size_t len = 1;
    EXPECT_ERR(PSC_ENOTFOUND, "checkpoint 8 not found", ckpt_read(f->db, 8, "dense/bias", &got, &len, err, sizeof err));
    assert_null(got);
    EXPECT_ERR(PSC_ENOTFOUND, "checkpoint 7 has no tensor \"dense/bia\"",
               ckpt_read(f->db, 7, "dense/bia", &got, &len, err, sizeof err));
    EXPECT_ERR(PSC_ENOTFOUND, "checkpoint 8 not found", ckpt_verify(f->db, 8, err, sizeof err));
    char **names;
    int n;
    EXPECT_ERR(PSC_ENOTFOUND, "checkpoint 8 not found", ckpt_names(f->db, 8, &names, &n, err, sizeof err));
}

static void test_prepared_is_ignored(void **state)
{
    fx_t *f = *state;
    char err[512] = "";
    ckpt_info_t good;
    save_commit(f->db, 1, JOB, 100, 5);
    save(f->db, 2, JOB, 200, 1); /* phase 1 only: another PS failed, say */
    save_commit(f->db, 3, OTHER_JOB, 300, 5);
    EXPECT_LIST(f->db, "1c 2p 3c");
    log_calls = 0;
    assert_int_equal(ckpt_latest_good(f->db, JOB, &good, log_cb, err, sizeof err), 0);
    assert_int_equal(good.id, 1);
    assert_int_equal(good.step, 100);
    assert_int_equal(log_calls, 0);
    assert_int_equal(ckpt_latest_good(f->db, OTHER_JOB, &good, log_cb, err, sizeof err), 0);
    assert_int_equal(good.id, 3);
    EXPECT_ERR(PSC_ENOTFOUND, "no committed checkpoint of job ffff",
               ckpt_latest_good(f->db, "ffff", &good, log_cb, err, sizeof err));
    /* The prepared one is still readable (the chief may commit it later). */
    expect_shard(f->db, 2, 200, 1);
    assert_int_equal(ckpt_commit(f->db, 2, 5, err, sizeof err), 0);
    assert_int_equal(ckpt_latest_good(f->db, JOB, &good, log_cb, err, sizeof err), 0);
    assert_int_equal(good.id, 2);
    assert_int_equal(good.step, 200);
}

static void test_keep_last_k(void **state)
{
    fx_t *f = *state;
    char err[512] = "";
    save_commit(f->db, 1, JOB, 100, 5);
    save_commit(f->db, 2, JOB, 200, 5);
    save_commit(f->db, 3, JOB, 300, 5);
    save(f->db, 4, JOB, 400, 1);              /* a save that never committed */
    save_commit(f->db, 5, OTHER_JOB, 10, 1); /* another job: never touched */
    save(f->db, 7, JOB, 700, 1);              /* a later save still in phase 1 */
    save(f->db, 6, JOB, 600, 1);
    EXPECT_LIST(f->db, "1c 2c 3c 4p 5c 6p 7p");
    int keys3 = ckpt_debug_count_keys(f->db, 3);
    assert_int_equal(keys3, NSHARD + 1);

    EXPECT_ERR(PSC_EINVAL, "keep 0 must be >= 1", ckpt_commit(f->db, 6, 0, err, sizeof err));
    EXPECT_ERR(PSC_ENOTFOUND, "checkpoint 99 is not prepared", ckpt_commit(f->db, 99, 2, err, sizeof err));
    EXPECT_LIST(f->db, "1c 2c 3c 4p 5c 6p 7p");

    /* Newest 2 committed of JOB after this: 6 and 3. Deleted: 1, 2 (older
     * committed) and 4 (prepared, older than 6). Kept: 7 (newer prepared), 5. */
    assert_int_equal(ckpt_commit(f->db, 6, 2, err, sizeof err), 0);
    EXPECT_LIST(f->db, "3c 5c 6c 7p");
    uint64_t gone[] = {1, 2, 4};
    for (size_t i = 0; i < PSC_ARRAY_LEN(gone); i++) {
        assert_int_equal(ckpt_debug_count_keys(f->db, gone[i]), 0);
        void *got;
        size_t len;
        EXPECT_ERR(PSC_ENOTFOUND, "not found", ckpt_read(f->db, gone[i], "dense/bias", &got, &len, err, sizeof err));
        EXPECT_ERR(PSC_ENOTFOUND, "not found", ckpt_verify(f->db, gone[i], err, sizeof err));
    }
    assert_int_equal(ckpt_debug_count_keys(f->db, 3), keys3);
    expect_shard(f->db, 3, 300, 1);
    expect_shard(f->db, 5, 10, 1);
    expect_shard(f->db, 7, 700, 1);

    /* Committing again is a no-op, whatever keep says. */
    assert_int_equal(ckpt_commit(f->db, 6, 1, err, sizeof err), 0);
    EXPECT_LIST(f->db, "3c 5c 6c 7p");

    /* keep = 1: only the newest committed is left. */
    assert_int_equal(ckpt_commit(f->db, 7, 1, err, sizeof err), 0);
    EXPECT_LIST(f->db, "5c 7c");
    assert_int_equal(ckpt_debug_count_keys(f->db, 3), 0);
    assert_int_equal(ckpt_debug_count_keys(f->db, 6), 0);
    reopen(f);
    EXPECT_LIST(f->db, "5c 7c");
    assert_int_equal(ckpt_debug_count_keys(f->db, 1), 0);
    expect_shard(f->db, 7, 700, 1);
}

static void test_corruption(void **state)
{
    fx_t *f = *state;
    char err[512] = "";
    ckpt_info_t good;
    save_commit(f->db, 1, JOB, 100, 5);
    save_commit(f->db, 2, JOB, 200, 5);

    /* One flipped byte in the bytes of a tensor of the newest checkpoint. */
    assert_int_equal(ckpt_debug_corrupt(f->db, 2, "dense/kernel", 1000), 0);
    EXPECT_ERR(PSC_ECORRUPT, "checkpoint 2: tensor \"dense/kernel\": CRC32C mismatch",
               ckpt_verify(f->db, 2, err, sizeof err));
    void *got = (void *)1;
    size_t len = 1;
    EXPECT_ERR(PSC_ECORRUPT, "checkpoint 2: tensor \"dense/kernel\": CRC32C mismatch",
               ckpt_read(f->db, 2, "dense/kernel", &got, &len, err, sizeof err));
    assert_null(got);
    assert_int_equal(len, 0);
    /* The other tensors of 2 and all of 1 are fine. */
    assert_int_equal(ckpt_read(f->db, 2, "dense/bias", &got, &len, err, sizeof err), 0);
    free(got);
    assert_int_equal(ckpt_verify(f->db, 1, err, sizeof err), 0);

    log_calls = 0;
    assert_int_equal(ckpt_latest_good(f->db, JOB, &good, log_cb, err, sizeof err), 0);
    assert_int_equal(good.id, 1);
    assert_int_equal(good.step, 100);
    assert_int_equal(log_calls, 1);
    assert_non_null(strstr(log_lines[0], "checkpoint 2"));
    assert_non_null(strstr(log_lines[0], "\"dense/kernel\""));
    print_message("log: %s\n", log_lines[0]);
    /* Without a log callback too. */
    assert_int_equal(ckpt_latest_good(f->db, JOB, &good, NULL, err, sizeof err), 0);
    assert_int_equal(good.id, 1);

    /* The damage survives a reopen, and so does the fallback. */
    reopen(f);
    EXPECT_ERR(PSC_ECORRUPT, "\"dense/kernel\"", ckpt_verify(f->db, 2, err, sizeof err));

    /* A flipped byte in a header's length field: a length mismatch. Now no
     * committed checkpoint of JOB verifies. */
    assert_int_equal(ckpt_debug_corrupt(f->db, 1, "big/kernel", -8), 0);
    EXPECT_ERR(PSC_ECORRUPT, "checkpoint 1: tensor \"big/kernel\": length mismatch",
               ckpt_read(f->db, 1, "big/kernel", &got, &len, err, sizeof err));
    log_calls = 0;
    EXPECT_ERR(PSC_ENOTFOUND, "none of the 2 committed checkpoints of job " JOB " verifies",
               ckpt_latest_good(f->db, JOB, &good, log_cb, err, sizeof err));
    assert_int_equal(log_calls, 2);
    assert_non_null(strstr(log_lines[1], "checkpoint 1"));
    assert_non_null(strstr(log_lines[1], "\"big/kernel\""));
    /* The header's CRC field. */
    save_commit(f->db, 3, JOB, 300, 5);
    assert_int_equal(ckpt_debug_corrupt(f->db, 3, "global_step", -12), 0);
    EXPECT_ERR(PSC_ECORRUPT, "checkpoint 3: tensor \"global_step\": CRC32C mismatch",
               ckpt_verify(f->db, 3, err, sizeof err));
    /* The empty tensor's header version byte. */
    save_commit(f->db, 4, JOB, 400, 5);
    assert_int_equal(ckpt_debug_corrupt(f->db, 4, "empty", -16), 0);
    EXPECT_ERR(PSC_ECORRUPT, "checkpoint 4: tensor \"empty\": bad header version",
               ckpt_verify(f->db, 4, err, sizeof err));
    assert_int_equal(ckpt_debug_corrupt(f->db, 4, "empty", 0), PSC_EINVAL); /* no byte there */

    /* A damaged manifest: list refuses (naming it), restore skips it with a log
     * line, discard removes it. */
    save_commit(f->db, 5, JOB, 500, 5);
    assert_int_equal(ckpt_debug_corrupt(f->db, 5, NULL, 20), 0);
    ckpt_info_t *info;
    int n;
    EXPECT_ERR(PSC_ECORRUPT, "checkpoint 5: manifest CRC32C mismatch", ckpt_list(f->db, &info, &n, err, sizeof err));
    EXPECT_ERR(PSC_ECORRUPT, "checkpoint 5: manifest", ckpt_verify(f->db, 5, err, sizeof err));
    EXPECT_ERR(PSC_ECORRUPT, "checkpoint 5: manifest", ckpt_commit(f->db, 5, 1, err, sizeof err));
    EXPECT_ERR(PSC_EEXISTS, "checkpoint 5 exists (manifest damaged",
               ckpt_prepare(ckpt_begin(f->db, 5, JOB, 1), err, sizeof err));
    log_calls = 0;
    EXPECT_ERR(PSC_ENOTFOUND, "none of the 4 committed", ckpt_latest_good(f->db, JOB, &good, log_cb, err, sizeof err));
    assert_int_equal(log_calls, 5);
    assert_non_null(strstr(log_lines[0], "checkpoint 5 skipped: checkpoint 5: manifest CRC32C mismatch"));
    assert_int_equal(ckpt_discard(f->db, 5, err, sizeof err), 0);
    assert_int_equal(ckpt_debug_count_keys(f->db, 5), 0);
    EXPECT_LIST(f->db, "1c 2c 3c 4c");
}

static void test_exists_discard_abort(void **state)
{
    fx_t *f = *state;
    char err[512] = "";
    save(f->db, 1, JOB, 100, 1);

    /* An id is never reused, and the refused prepare changed nothing. */
    ckpt_writer_t *w = ckpt_begin(f->db, 1, OTHER_JOB, 999);
    assert_int_equal(ckpt_add(w, "global_step", "xxxxxxxx", 8), 0);
    EXPECT_ERR(PSC_EEXISTS, "checkpoint 1 exists (prepared, job " JOB ", step 100)", ckpt_prepare(w, err, sizeof err));
    expect_shard(f->db, 1, 100, 1);
    assert_int_equal(ckpt_debug_count_keys(f->db, 1), NSHARD + 1);
    EXPECT_LIST(f->db, "1p");

    /* Discard a prepared one: nothing left, id free again. */
    assert_int_equal(ckpt_discard(f->db, 1, err, sizeof err), 0);
    assert_int_equal(ckpt_debug_count_keys(f->db, 1), 0);
    EXPECT_LIST(f->db, "");
    EXPECT_ERR(PSC_ENOTFOUND, "checkpoint 1 not found", ckpt_discard(f->db, 1, err, sizeof err));
    EXPECT_ERR(PSC_ENOTFOUND, "checkpoint 1 is not prepared", ckpt_commit(f->db, 1, 1, err, sizeof err));
    /* A committed one is not discarded. */
    save_commit(f->db, 2, JOB, 200, 3);
    EXPECT_ERR(PSC_EINVAL, "checkpoint 2 is committed", ckpt_discard(f->db, 2, err, sizeof err));
    EXPECT_LIST(f->db, "2c");

    /* Abort writes nothing. */
    w = ckpt_begin(f->db, 3, JOB, 300);
    add_shard(w, 3, 300, 0);
    ckpt_abort(w);
    assert_int_equal(ckpt_debug_count_keys(f->db, 3), 0);
    EXPECT_LIST(f->db, "2c");
    ckpt_abort(NULL);
    ckpt_close(NULL);

    /* A writer's first error sticks, and its prepare writes nothing. */
    char toolong[CKPT_MAX_NAME + 2];
    memset(toolong, 'x', sizeof toolong - 1);
    toolong[sizeof toolong - 1] = 0;
    w = ckpt_begin(f->db, 4, JOB, 400);
    assert_int_equal(ckpt_add(w, "a", "1", 1), 0);
    assert_int_equal(ckpt_add(w, "a", "2", 1), PSC_EEXISTS);
    assert_int_equal(ckpt_add(w, "b", "3", 1), PSC_EEXISTS);
    EXPECT_ERR(PSC_EEXISTS, "checkpoint 4: tensor \"a\" added twice", ckpt_prepare(w, err, sizeof err));
    w = ckpt_begin(f->db, 4, JOB, 400);
    assert_int_equal(ckpt_add(w, toolong, "1", 1), PSC_EINVAL);
    EXPECT_ERR(PSC_EINVAL, "tensor name of 201 bytes", ckpt_prepare(w, err, sizeof err));
    w = ckpt_begin(f->db, 4, JOB, 400);
    assert_int_equal(ckpt_add(w, "", "1", 1), PSC_EINVAL);
    ckpt_abort(w);
    w = ckpt_begin(f->db, 4, JOB, 400);
    assert_int_equal(ckpt_add(w, "p", NULL, 4), PSC_EINVAL);
    ckpt_abort(w);
    w = ckpt_begin(f->db, 4, "0123456789abcdef0", 400);
    EXPECT_ERR(PSC_EINVAL, "must have 1 to 16 bytes", ckpt_prepare(w, err, sizeof err));
    w = ckpt_begin(f->db, 4, "", 400);
    EXPECT_ERR(PSC_EINVAL, "must have 1 to 16 bytes", ckpt_prepare(w, err, sizeof err));
    assert_int_equal(ckpt_debug_count_keys(f->db, 4), 0);
    EXPECT_LIST(f->db, "2c");

    /* Many tensors: names keep their order, duplicates are found past the
     * name set's growth. An empty checkpoint (a PS with no variables) is fine. */
    w = ckpt_begin(f->db, 5, JOB, 500);
    for (int i = 0; i < 1000; i++) {
        char name[32];
        snprintf(name, sizeof name, "v%d/part_%d", i % 37, i);
        assert_int_equal(ckpt_add(w, name, &i, sizeof i), 0);
    }
    assert_int_equal(ckpt_add(w, "v1/part_1", "", 0), PSC_EEXISTS); /* 1 % 37, 1 */
    ckpt_abort(w);
    w = ckpt_begin(f->db, 5, JOB, 500);
    for (int i = 0; i < 1000; i++) {
        char name[32];
        snprintf(name, sizeof name, "v%d/part_%d", i % 37, i);
        assert_int_equal(ckpt_add(w, name, &i, sizeof i), 0);
    }
    assert_int_equal(ckpt_prepare(w, err, sizeof err), 0);
    char **names;
    int n;
    assert_int_equal(ckpt_names(f->db, 5, &names, &n, err, sizeof err), 0);
    assert_int_equal(n, 1000);
    for (int i = 0; i < 1000; i++) {
        char name[32];
        snprintf(name, sizeof name, "v%d/part_%d", i % 37, i);
        assert_string_equal(names[i], name);
    }
    ckpt_free_names(names, n);
    w = ckpt_begin(f->db, 6, JOB, 600);
    assert_int_equal(ckpt_prepare(w, err, sizeof err), 0);
    assert_int_equal(ckpt_verify(f->db, 6, err, sizeof err), 0);
    assert_int_equal(ckpt_names(f->db, 6, &names, &n, err, sizeof err), 0);
    assert_int_equal(n, 0);
    ckpt_free_names(names, n);
}

static void test_open_errors(void **state)
{
    fx_t *f = *state;
    char err[512] = "";
    ckpt_db_t *db2 = (ckpt_db_t *)1;
    /* The same store twice: RocksDB's LOCK refuses, the message names the dir. */
    EXPECT_ERR(PSC_EIO, f->dir, ckpt_open(f->dir, &db2, err, sizeof err));
    assert_null(db2);
    print_message("second open: %s\n", err);
    EXPECT_ERR(PSC_EINVAL, "empty checkpoint dir", ckpt_open("", &db2, err, sizeof err));
    /* Below a regular file. */
    char path[160];
    snprintf(path, sizeof path, "%s/../file", f->dir);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fclose(fp);
    snprintf(path, sizeof path, "%s/../file/db", f->dir);
    EXPECT_ERR(PSC_EIO, path, ckpt_open(path, &db2, err, sizeof err));
}

/* ---- crash: a child process dies before (or right after) ckpt_prepare ---- */

static const char *self_exe;

/* Runs in the re-executed child: `test_ckpt --crash-child DIR MODE`. */
static int crash_child(const char *dir, const char *mode)
{
    char err[512];
    ckpt_db_t *db;
    if (ckpt_open(dir, &db, err, sizeof err)) {
        fprintf(stderr, "child: %s\n", err);
        return 3;
    }
    ckpt_writer_t *w = ckpt_begin(db, 2, JOB, 200);
    add_shard(w, 2, 200, 0);
    if (strcmp(mode, "exit") == 0) _exit(0); /* no prepare, no close */
    if (strcmp(mode, "kill") == 0) raise(SIGKILL);
    if (strcmp(mode, "kill-after-prepare") == 0) {
        if (ckpt_prepare(w, err, sizeof err)) {
            fprintf(stderr, "child: %s\n", err);
            return 4;
        }
        raise(SIGKILL); /* no close: only the synced WAL has it */
    }
    return 5;
}

static void run_child(const char *dir, const char *mode, int want_signal)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execl(self_exe, self_exe, "--crash-child", dir, mode, (char *)NULL);
        _exit(127);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (want_signal) {
        if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL) fail_msg("child %s: status 0x%x, want SIGKILL", mode, st);
    } else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fail_msg("child %s: status 0x%x, want exit 0", mode, st);
    }
}

static void test_crash_before_prepare(void **state)
{
    fx_t *f = *state;
    char err[512] = "";
    ckpt_info_t good;
    save_commit(f->db, 1, JOB, 100, 3);
    ckpt_close(f->db); /* the child is the only opener, as a PS process would be */
    f->db = NULL;

    run_child(f->dir, "exit", 0);
    reopen(f);
    EXPECT_LIST(f->db, "1c");
    assert_int_equal(ckpt_debug_count_keys(f->db, 2), 0);
    ckpt_close(f->db);
    f->db = NULL;

    run_child(f->dir, "kill", 1);
    reopen(f);
    EXPECT_LIST(f->db, "1c");
    assert_int_equal(ckpt_debug_count_keys(f->db, 2), 0);
    assert_int_equal(ckpt_latest_good(f->db, JOB, &good, NULL, err, sizeof err), 0);
    assert_int_equal(good.id, 1);
    expect_shard(f->db, 1, 100, 1);
    ckpt_close(f->db);
    f->db = NULL;

    /* Killed right after the synced write: the checkpoint is there, whole,
     * prepared, and ignored by restore until committed. */
    run_child(f->dir, "kill-after-prepare", 1);
    reopen(f);
    EXPECT_LIST(f->db, "1c 2p");
    assert_int_equal(ckpt_verify(f->db, 2, err, sizeof err), 0);
    expect_shard(f->db, 2, 200, 0);
    assert_int_equal(ckpt_latest_good(f->db, JOB, &good, NULL, err, sizeof err), 0);
    assert_int_equal(good.id, 1);
    assert_int_equal(ckpt_commit(f->db, 2, 1, err, sizeof err), 0);
    EXPECT_LIST(f->db, "2c");
}

/* ---- the stored bytes are the documented format ---- */

static void le(unsigned char *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static void test_format(void **state)
{
    fx_t *f = *state;
    char err[512] = "";
    const unsigned char w_bytes[5] = {9, 8, 7, 6, 5};
    ckpt_writer_t *w = ckpt_begin(f->db, 0x1234, "abc", -5);
    assert_int_equal(ckpt_add(w, "w", w_bytes, 5), 0);
    assert_int_equal(ckpt_add(w, "e", NULL, 0), 0);
    assert_int_equal(ckpt_prepare(w, err, sizeof err), 0);
    ckpt_info_t info;
    assert_int_equal(ckpt_get_info(f->db, 0x1234, &info, err, sizeof err), 0);
    ckpt_close(f->db);
    f->db = NULL;

    rocksdb_options_t *o = rocksdb_options_create();
    char *e = NULL;
    rocksdb_t *r = rocksdb_open(o, f->dir, &e);
    assert_null(e);
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();

    /* Manifest. */
    unsigned char want[128], *p = want;
    p[0] = 1;
    p[1] = 0;
    le(p + 2, 0, 2);
    le(p + 4, 2, 4);
    le(p + 8, 0x1234, 8);
    le(p + 16, (uint64_t)(int64_t)-5, 8);
    uint64_t t;
    memcpy(&t, &info.created_unix, 8);
    le(p + 24, t, 8);
    le(p + 32, 5, 8);
    p[40] = 3;
    memcpy(p + 41, "abc", 3);
    p += 44;
    le(p, 1, 2);
    p[2] = 'w';
    le(p + 3, 5, 8);
    le(p + 11, psc_crc32c_mask(psc_crc32c(0, w_bytes, 5)), 4);
    p += 15;
    le(p, 1, 2);
    p[2] = 'e';
    le(p + 3, 0, 8);
    le(p + 11, psc_crc32c_mask(0), 4);
    p += 15;
    le(p, psc_crc32c_mask(psc_crc32c(0, want, (size_t)(p - want))), 4);
    p += 4;
    size_t n;
    char *val = rocksdb_get(r, ro, "m/0000000000001234", 18, &n, &e);
    assert_null(e);
    assert_non_null(val);
    assert_int_equal(n, (size_t)(p - want));
    assert_memory_equal(val, want, n);
    rocksdb_free(val);

    /* Tensor value. */
    unsigned char tw[21] = {1, 0, 0, 0};
    le(tw + 4, psc_crc32c_mask(psc_crc32c(0, w_bytes, 5)), 4);
    le(tw + 8, 5, 8);
    memcpy(tw + 16, w_bytes, 5);
    val = rocksdb_get(r, ro, "t/0000000000001234/w", 20, &n, &e);
    assert_null(e);
    assert_non_null(val);
    assert_int_equal(n, sizeof tw);
    assert_memory_equal(val, tw, n);
    rocksdb_free(val);

    /* A manifest of a newer format (CRC right, version 4) is refused as such:
     * written here behind the module's back, as a newer psc would. */
    want[0] = 4;
    le(want + (p - want) - 4, psc_crc32c_mask(psc_crc32c(0, want, (size_t)(p - want) - 4)), 4);
    rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
    rocksdb_put(r, wo, "m/0000000000001234", 18, (const char *)want, (size_t)(p - want), &e);
    assert_null(e);
    rocksdb_writeoptions_destroy(wo);
    rocksdb_readoptions_destroy(ro);
    rocksdb_close(r);
    rocksdb_options_destroy(o);

    reopen(f);
    EXPECT_ERR(PSC_EUNSUPPORTED, "checkpoint 4660: manifest format 4", ckpt_verify(f->db, 0x1234, err, sizeof err));
}

/* ---- readers during commits ---- */

typedef struct reader_arg {
    ckpt_db_t *db;
    atomic_int *stop;
    int reads, misses;
    char failure[512];
} reader_arg_t;

static void *reader_main(void *p)
{
    reader_arg_t *a = p;
    char err[400];
    while (!atomic_load(a->stop)) {
        ckpt_info_t good;
        int rc = ckpt_latest_good(a->db, JOB, &good, NULL, err, sizeof err);
        if (rc == PSC_ENOTFOUND) continue;
        if (rc) {
            snprintf(a->failure, sizeof a->failure, "latest_good: %s", err);
            break;
        }
        void *got;
        size_t len;
        rc = ckpt_read(a->db, good.id, "global_step", &got, &len, err, sizeof err);
        if (rc == PSC_ENOTFOUND) { /* deleted by keep-last-K meanwhile: fine */
            a->misses++;
            continue;
        }
        if (rc) {
            snprintf(a->failure, sizeof a->failure, "read %" PRIu64 ": %s", good.id, err);
            break;
        }
        int64_t step;
        memcpy(&step, got, 8);
        free(got);
        if (len != 8 || step != good.step) {
            snprintf(a->failure, sizeof a->failure, "checkpoint %" PRIu64 ": global_step %" PRId64 ", info %" PRId64,
                     good.id, step, good.step);
            break;
        }
        a->reads++;
    }
    return NULL;
}

static void test_concurrent_readers(void **state)
{
    fx_t *f = *state;
    enum { NR = 4, NCKPT = 40 };
    atomic_int stop = 0;
    reader_arg_t args[NR];
    pthread_t th[NR];
    for (int i = 0; i < NR; i++) {
        args[i] = (reader_arg_t){.db = f->db, .stop = &stop};
        assert_int_equal(pthread_create(&th[i], NULL, reader_main, &args[i]), 0);
    }
    for (uint64_t id = 1; id <= NCKPT; id++) save_commit(f->db, id, JOB, (int64_t)id * 10, 2);
    atomic_store(&stop, 1);
    int reads = 0, misses = 0;
    for (int i = 0; i < NR; i++) {
        pthread_join(th[i], NULL);
        if (args[i].failure[0]) fail_msg("reader %d: %s", i, args[i].failure);
        reads += args[i].reads;
        misses += args[i].misses;
    }
    print_message("readers: %d reads, %d raced with a deletion\n", reads, misses);
    EXPECT_LIST(f->db, "39c 40c");
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--crash-child") == 0) return crash_child(argv[2], argv[3]);
    self_exe = "/proc/self/exe";
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prepared_is_ignored, setup, teardown),
        cmocka_unit_test_setup_teardown(test_keep_last_k, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corruption, setup, teardown),
        cmocka_unit_test_setup_teardown(test_exists_discard_abort, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crash_before_prepare, setup, teardown),
        cmocka_unit_test_setup_teardown(test_format, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_readers, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
