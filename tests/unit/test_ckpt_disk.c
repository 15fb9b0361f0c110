/* test_ckpt_disk — the checkpoint store on a full disk, a tmpfs the test
 * mounts (root; skipped otherwise): the free-space check refuses a checkpoint
 * whose write and compaction may not fit; one that RocksDB itself fails (the
 * check off) leaves the committed ones listed, verified and read bit for bit
 * while the store is broken, another attempt on the full disk fails without
 * aborting the process, and once the tmpfs is grown the next checkpoint
 * commits through a reopened store, no restart; the committed ones survive a
 * close and an open. RocksDB writes nothing to its own LOG file (a failed LOG
 * write aborted the process on the next line). The same with a table's rows,
 * which go to disk as a table file (SST) that RocksDB ingests: a file that
 * cannot be written fails its checkpoint, leaves no file and no row behind.
 */
#include "ckpt_fixture.h"

#include <sys/mount.h>
#include <sys/statvfs.h>
#include <unistd.h>

/* ---- a full disk: a tmpfs of its own ---- */

typedef struct disk_fx {
    char top[64], dir[96];
    ckpt_db_t *db;
    int mounted;
} disk_fx_t;

static int setup_disk(void **state)
{
    disk_fx_t *f = calloc(1, sizeof *f);
    if (!f) return -1;
    *state = f;
    snprintf(f->top, sizeof f->top, "/tmp/test_ckpt_disk.XXXXXX");
    if (!mkdtemp(f->top)) return -1;
    snprintf(f->dir, sizeof f->dir, "%s/db", f->top);
    f->mounted = mount("tmpfs", f->top, "tmpfs", 0, "size=48m") == 0; /* the test skips when not */
    return 0;
}

static int teardown_disk(void **state)
{
    disk_fx_t *f = *state;
    ckpt_close(f->db);
    if (f->mounted && umount(f->top) != 0) umount2(f->top, MNT_DETACH);
    if (!f->mounted) nftw(f->top, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    rmdir(f->top);
    free(f);
    return 0;
}

#define DISK_TENSOR (8 * MiB)

/* Prepares checkpoint id: global_step and an 8 MiB tensor of fill(id). */
static int disk_prepare(ckpt_db_t *db, uint64_t id, char *err, size_t errlen)
{
    ckpt_writer_t *w = ckpt_begin(db, id, JOB, (int64_t)id);
    int64_t step = (int64_t)id;
    void *b = tensor_bytes(id, step, "w", DISK_TENSOR);
    assert_int_equal(ckpt_add(w, "global_step", &step, 8), 0);
    assert_int_equal(ckpt_add(w, "w", b, DISK_TENSOR), 0);
    free(b);
    return ckpt_prepare(w, err, errlen);
}

/* Checkpoint id verifies and reads back bit for bit. */
static void disk_expect(ckpt_db_t *db, uint64_t id)
{
    char err[512] = "";
    if (ckpt_verify(db, id, err, sizeof err)) fail_msg("verify %" PRIu64 ": %s", id, err);
    void *got = NULL, *want = tensor_bytes(id, (int64_t)id, "w", DISK_TENSOR);
    size_t len = 0;
    if (ckpt_read(db, id, "w", &got, &len, err, sizeof err)) fail_msg("read %" PRIu64 ": %s", id, err);
    assert_int_equal(len, DISK_TENSOR);
    assert_memory_equal(got, want, DISK_TENSOR);
    free(got);
    free(want);
}

/* Fills the file system of path to its last `keep` bytes. */
static void fill_disk(const char *path, size_t keep)
{
    struct statvfs fs;
    assert_int_equal(statvfs(path, &fs), 0);
    uint64_t avail = (uint64_t)fs.f_bavail * fs.f_frsize;
    char name[160];
    snprintf(name, sizeof name, "%s/../filler", path);
    FILE *fp = fopen(name, "w");
    assert_non_null(fp);
    static char zeros[1 << 16];
    for (uint64_t n = 0; n + sizeof zeros + keep <= avail; n += sizeof zeros)
        if (fwrite(zeros, 1, sizeof zeros, fp) != sizeof zeros) break;
    fclose(fp);
}

static void test_full_disk(void **state)
{
    disk_fx_t *f = *state;
    if (!f->mounted) skip(); /* mounting a tmpfs needs root */
    char err[512] = "";
    if (ckpt_open(f->dir, &f->db, err, sizeof err)) fail_msg("open: %s", err);
    if (disk_prepare(f->db, 1, err, sizeof err) || ckpt_commit(f->db, 1, 3, err, sizeof err))
        fail_msg("checkpoint 1 on an empty 48 MiB disk: %s", err);

    /* ~32 MiB free: enough for the write (2 x 8 MiB), not for the compaction
     * headroom on top of it. Refused before RocksDB sees it. */
    EXPECT_ERR(PSC_EIO, "no space left on device", disk_prepare(f->db, 2, err, sizeof err));
    if (!strstr(err, "needs about")) fail_msg("not the free-space check's refusal: %s", err);
    print_message("refused: %s\n", err);
    EXPECT_LIST(f->db, "1c");

    /* RocksDB itself meets the full disk */
    ckpt_debug_skip_space_check(f->db);
    fill_disk(f->dir, 2 * MiB);
    EXPECT_ERR(PSC_EIO, "No space left on device", disk_prepare(f->db, 2, err, sizeof err));
    print_message("RocksDB: %s\n", err);
    /* a write that failed is not there; one whose flush failed is, prepared
     * (the chief discards it), never committed */
    char got[256];
    list_ids(f->db, got, sizeof got);
    if (strcmp(got, "1c") != 0 && strcmp(got, "1c 2p") != 0) fail_msg("list \"%s\" while broken", got);
    disk_expect(f->db, 1);                                            /* readable while the store is broken */
    assert_int_not_equal(disk_prepare(f->db, 3, err, sizeof err), 0); /* still full: an error, no abort */
    print_message("still full: %s\n", err);
    disk_expect(f->db, 1);

    /* the volume grows: the next checkpoint commits, no restart */
    assert_int_equal(mount("tmpfs", f->top, "tmpfs", MS_REMOUNT, "size=96m"), 0);
    if (disk_prepare(f->db, 4, err, sizeof err) || ckpt_commit(f->db, 4, 3, err, sizeof err))
        fail_msg("checkpoint 4 after the disk grew: %s", err);
    EXPECT_LIST(f->db, "1c 4c"); /* what a failed prepare may have left, keep-last-K deleted */
    disk_expect(f->db, 1);
    disk_expect(f->db, 4);
    ckpt_close(f->db);
    f->db = NULL;
    if (ckpt_open(f->dir, &f->db, err, sizeof err)) fail_msg("open after: %s", err);
    EXPECT_LIST(f->db, "1c 4c");
    disk_expect(f->db, 1);
    disk_expect(f->db, 4);
    /* RocksDB (Debian's 7.8, assertions on) aborts the process on the LOG line
     * after one it failed to write, which a full disk did from its background
     * threads: the store keeps RocksDB's LOG empty (CKPT_ROCKSDB_LOG_LEVEL) */
    char log[160];
    snprintf(log, sizeof log, "%s/LOG", f->dir);
    struct stat st;
    assert_int_equal(stat(log, &st), 0);
    if (st.st_size != 0) fail_msg("RocksDB wrote %lld bytes to %s", (long long)st.st_size, log);
}

#define DISK_ROWS 8000
#define DISK_RECORD 1024 /* 8000 rows of 1 KiB: an 8 MiB table file */

/* Prepares checkpoint id: global_step and DISK_ROWS rows of table "emb", in
 * descending order (sorted at prepare). */
static int disk_prepare_rows(ckpt_db_t *db, uint64_t id, char *err, size_t errlen)
{
    ckpt_writer_t *w = ckpt_begin(db, id, JOB, (int64_t)id);
    int64_t step = (int64_t)id;
    assert_int_equal(ckpt_add(w, "global_step", &step, 8), 0);
    assert_int_equal(ckpt_add_table(w, "emb", DISK_RECORD), 0);
    static unsigned char rec[DISK_RECORD];
    for (int64_t r = DISK_ROWS - 1; r >= 0; r--) {
        uint64_t x = 0x9E3779B97F4A7C15ull ^ ((uint64_t)r * 0xff51afd7ed558ccdull) ^ id;
        for (size_t i = 0; i < sizeof rec; i++) { /* incompressible */
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            rec[i] = (unsigned char)(x >> 32);
        }
        rec[0] = (unsigned char)((r + (int64_t)id) & 0xff);
        assert_int_equal(ckpt_add_row(w, "emb", r * 3, rec, sizeof rec), 0);
    }
    return ckpt_prepare(w, err, errlen);
}

typedef struct rows_seen {
    uint64_t id, n;
    int bad;
} rows_seen_t;

static int rows_cb(void *arg, int64_t row, const void *rec, size_t len)
{
    rows_seen_t *s = arg;
    const unsigned char *p = rec;
    if (row != (int64_t)s->n * 3 || len != DISK_RECORD || p[0] != (unsigned char)((row / 3 + (int64_t)s->id) & 0xff))
        s->bad++;
    s->n++;
    return 0;
}

static void disk_expect_rows(ckpt_db_t *db, uint64_t id)
{
    char err[512] = "";
    if (ckpt_verify(db, id, err, sizeof err)) fail_msg("verify %" PRIu64 ": %s", id, err);
    rows_seen_t s = {.id = id};
    if (ckpt_read_rows(db, id, "emb", rows_cb, &s, err, sizeof err)) fail_msg("rows %" PRIu64 ": %s", id, err);
    assert_int_equal(s.n, DISK_ROWS);
    assert_int_equal(s.bad, 0);
}

static void test_full_disk_rows(void **state)
{
    disk_fx_t *f = *state;
    if (!f->mounted) skip();
    char err[512] = "";
    if (ckpt_open(f->dir, &f->db, err, sizeof err)) fail_msg("open: %s", err);
    if (disk_prepare_rows(f->db, 1, err, sizeof err) || ckpt_commit(f->db, 1, 3, err, sizeof err))
        fail_msg("checkpoint 1 on an empty 48 MiB disk: %s", err);
    disk_expect_rows(f->db, 1);

    ckpt_debug_skip_space_check(f->db);
    fill_disk(f->dir, 2 * MiB);
    EXPECT_ERR(PSC_EIO, "o space left on device", disk_prepare_rows(f->db, 2, err, sizeof err));
    print_message("rows on a full disk: %s\n", err);
    EXPECT_LIST(f->db, "1c");
    assert_int_equal(ckpt_debug_count_keys(f->db, 2), 0);
    char ingest[160];
    snprintf(ingest, sizeof ingest, "%s/ingest/0000000000000002-0.sst", f->dir);
    assert_int_equal(access(ingest, F_OK), -1); /* the half-written file is gone */
    disk_expect_rows(f->db, 1);

    assert_int_equal(mount("tmpfs", f->top, "tmpfs", MS_REMOUNT, "size=96m"), 0);
    if (disk_prepare_rows(f->db, 3, err, sizeof err) || ckpt_commit(f->db, 3, 3, err, sizeof err))
        fail_msg("checkpoint 3 after the disk grew: %s", err);
    EXPECT_LIST(f->db, "1c 3c");
    ckpt_close(f->db);
    f->db = NULL;
    if (ckpt_open(f->dir, &f->db, err, sizeof err)) fail_msg("open after: %s", err);
    EXPECT_LIST(f->db, "1c 3c");
    disk_expect_rows(f->db, 1);
    disk_expect_rows(f->db, 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_full_disk, setup_disk, teardown_disk),
        cmocka_unit_test_setup_teardown(test_full_disk_rows, setup_disk, teardown_disk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
