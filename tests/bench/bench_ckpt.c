/* bench_ckpt — a table's checkpoints at the disk's speed (issue 32 item 4).
 *
 * One PS's store (in this process) holds a table part of R rows (dim 8,
 * lazy Adam: 104-byte records) and a small dense variable, and checkpoints it
 * into a real RocksDB under /tmp as a ps_server does (store_export_ex into a
 * ckpt writer, ckpt_prepare, ckpt_commit), while a pusher thread keeps
 * pushing 512 rows at a time and records how long each push took. Printed:
 *   full base   rows/s of the whole checkpoint, and its parts: the export
 *               (the cut, which pushes wait for, then the rows copied into
 *               the writer shard by shard while pushes go on), prepare (the rows sorted and written as table files
 *               that RocksDB ingests, then the manifest's synced write),
 *               commit (two small synced writes: keep-last-K's compaction
 *               runs on the store's thread);
 *   1 % delta   the same for a delta after 1 % of the rows changed (the
 *               pusher stopped);
 *   pushes      the longest a push took during the full base's export (the
 *               pause: the cut, and at most one piece of a shard's copy) and
 *               during its prepare and commit (no lock a push needs: the
 *               machine's share), against the longest without a checkpoint;
 *   disk        the same bytes (keys and values) written with write(2) and
 *               fsync, as the yardstick: rows/s and MB/s.
 * A measurement, not a test: it never fails on speed.
 *
 * usage: bench_ckpt [rows]   (default 1000000; BENCH_CKPT_DIR: where, default /tmp)
 */
#include "ckpt.h"
#include "optim.h"
#include "psc.h"
#include "sparse_table.h"
#include "store.h"

#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DIM 8
#define JOB "00000000000b0ca1"
#define PUSH 512

static void die(const char *what, const char *err)
{
    fprintf(stderr, "bench_ckpt: %s: %s\n", what, err);
    exit(1);
}

typedef struct pusher {
    store_t *s;
    int64_t rows;
    atomic_int stop, phase; /* phase: 0 before, 1 no checkpoint, 2 a checkpoint's export, 3 its prepare and commit */
    double worst[4];
    uint64_t pushes[4];
} pusher_t;

static void *push_main(void *arg)
{
    pusher_t *p = arg;
    int64_t ids[PUSH];
    static float g[PUSH * DIM];
    for (size_t i = 0; i < PSC_ARRAY_LEN(g); i++) g[i] = 0.001f;
    uint64_t x = 88172645463325252ull;
    char err[256];
    while (!atomic_load(&p->stop)) {
        for (int i = 0; i < PUSH; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            ids[i] = (int64_t)(x % (uint64_t)(p->rows / PUSH)) * PUSH + i; /* unique in the push */
        }
        int ph = atomic_load(&p->phase);
        double t0 = psc_now();
        if (store_sparse_push(p->s, "emb", ids, PUSH, g, sizeof g, 0, NULL, err, sizeof err)) die("push", err);
        double dt = psc_now() - t0;
        if (dt > p->worst[ph]) p->worst[ph] = dt;
        p->pushes[ph]++;
        usleep(200);
    }
    return NULL;
}

typedef struct sink {
    ckpt_writer_t *w;
} sink_t;

static int put_tensor(void *arg, const char *name, const void *data, size_t len)
{
    return ckpt_add(((sink_t *)arg)->w, name, data, len);
}
static int put_table(void *arg, const char *name, uint32_t len)
{
    return ckpt_add_table(((sink_t *)arg)->w, name, len);
}
static int put_row(void *arg, const char *name, int64_t id, const void *rec, size_t len)
{
    return ckpt_add_row(((sink_t *)arg)->w, name, id, rec, len);
}

/* One checkpoint: seconds of export, prepare, commit; its rows. phase (or NULL): set to 3 after the export. */
static void checkpoint(store_t *s, ckpt_db_t *db, uint64_t id, double secs[3], uint64_t *rows, atomic_int *phase)
{
    char err[512];
    sink_t k = {ckpt_begin(db, id, JOB, (int64_t)id)};
    store_rows_io_t io = {.table = put_table, .row = put_row, .arg = &k};
    int64_t step;
    uint64_t parent = 0;
    double t0 = psc_now();
    if (store_export_ex(s, put_tensor, &k, &io, id, 0, &step, &parent, err, sizeof err)) die("export", err);
    if (parent) ckpt_set_parent(k.w, parent);
    double t1 = psc_now();
    if (phase) atomic_store(phase, 3);
    if (ckpt_prepare(k.w, err, sizeof err)) die("prepare", err);
    double t2 = psc_now();
    if (ckpt_commit(db, id, 2, err, sizeof err)) die("commit", err);
    store_ckpt_committed(s, id);
    double t3 = psc_now();
    secs[0] = t1 - t0, secs[1] = t2 - t1, secs[2] = t3 - t2;
    ckpt_info_t info;
    if (ckpt_get_info(db, id, &info, err, sizeof err)) die("info", err);
    *rows = info.rows;
}

/* The same bytes with write(2) + fsync: seconds. */
static double plain_write(const char *dir, uint64_t bytes)
{
    char path[600];
    snprintf(path, sizeof path, "%.512s/plain", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) die("open", path);
    size_t chunk = 1 << 20;
    char *buf = malloc(chunk);
    memset(buf, 0x5a, chunk);
    double t0 = psc_now();
    for (uint64_t done = 0; done < bytes;) {
        size_t n = (size_t)PSC_MIN((uint64_t)chunk, bytes - done);
        if (write(fd, buf, n) != (ssize_t)n) die("write", path);
        done += n;
    }
    if (fsync(fd)) die("fsync", path);
    double t = psc_now() - t0;
    close(fd);
    unlink(path);
    free(buf);
    return t;
}

/* pause[0], pause[1]: the longest push during the export and during prepare + commit; NULL: no pusher. */
static void report(const char *what, const double secs[3], uint64_t rows, const double *pause, double disk_rows_s)
{
    double total = secs[0] + secs[1] + secs[2];
    printf("%-10s %10" PRIu64 " rows  %6.2f s  %9.0f rows/s (%.2f of the disk's)  export %.3f s, prepare %.3f s, "
           "commit %.3f s",
           what, rows, total, (double)rows / total, (double)rows / total / disk_rows_s, secs[0], secs[1], secs[2]);
    if (pause) printf("; longest push %.1f ms in the export, %.1f ms after it", pause[0] * 1e3, pause[1] * 1e3);
    printf("\n");
}

int main(int argc, char **argv)
{
    int64_t rows = argc > 1 ? atoll(argv[1]) : 1000000;
    if (rows < PUSH * 4) rows = PUSH * 4;
    const char *base = getenv("BENCH_CKPT_DIR") ? getenv("BENCH_CKPT_DIR") : "/tmp";
    char dir[512], err[512];
    snprintf(dir, sizeof dir, "%s/bench_ckpt-XXXXXX", base);
    if (!mkdtemp(dir)) die("mkdtemp", dir);
    ckpt_db_t *db;
    if (ckpt_open(dir, &db, err, sizeof err)) die("open", err);

    psc_optim_config_t adam = {
        .kind = PSC_OPT_ADAM, .learning_rate = 0.001f, .beta1 = 0.9f, .beta2 = 0.999f, .epsilon = 1e-7f};
    store_t *s = store_create();
    static const store_var_spec_t vars[] = {{.name = "global_step", .is_step = 1},
                                            {.name = "dense", .rank = 1, .shape = {1024}}};
    int created;
    if (store_create_vars(s, JOB, &adam, vars, 2, &created, err, sizeof err)) die("vars", err);
    sparse_table_cfg_t c = {.rows = (int64_t)1 << 40,
                            .nparts = 1,
                            .dim = DIM,
                            .seed = 1,
                            .opt = adam,
                            .init = {PSC_INIT_UNIFORM, -0.05f, 0.05f}};
    snprintf(c.name, sizeof c.name, "emb");
    if (store_create_tables(s, JOB, &c, 1, err, sizeof err)) die("table", err);
    if (store_set_ready(s, JOB, err, sizeof err)) die("ready", err);
    /* every row created: pulls of R ids */
    int64_t *ids = malloc(65536 * sizeof *ids);
    float *out = malloc(65536 * DIM * sizeof *out);
    for (int64_t r = 0; r < rows; r += 65536) {
        size_t n = (size_t)PSC_MIN((int64_t)65536, rows - r);
        for (size_t i = 0; i < n; i++) ids[i] = r + (int64_t)i;
        if (store_sparse_pull(s, "emb", ids, n, out, n * DIM, 0, 0, NULL, NULL, err, sizeof err)) die("pull", err);
    }
    free(ids);
    free(out);
    size_t rec = 8 + 4 * DIM * 3;
    uint64_t bytes = (uint64_t)rows * (rec + 12 + 20); /* value header, key */
    double disk = plain_write(dir, bytes);
    double disk_rows_s = (double)rows / disk;
    printf("bench_ckpt: %" PRId64 " rows of %zu bytes in %s; the same %.1f MB with write + fsync: %.2f s (%.0f MB/s, "
           "%.0f rows/s)\n",
           rows, rec, dir, (double)bytes / 1e6, disk, (double)bytes / 1e6 / disk, disk_rows_s);

    pusher_t p = {.s = s, .rows = rows};
    pthread_t th;
    pthread_create(&th, NULL, push_main, &p);
    atomic_store(&p.phase, 1);
    usleep(500 * 1000);
    double secs[3];
    uint64_t n;
    atomic_store(&p.phase, 2);
    checkpoint(s, db, 1, secs, &n, &p.phase);
    atomic_store(&p.phase, 1);
    report("full base", secs, n, p.worst + 2, disk_rows_s);
    usleep(300 * 1000);
    atomic_store(&p.stop, 1);
    pthread_join(th, NULL);
    printf("pushes of %d rows: %" PRIu64 " without a checkpoint, the longest %.2f ms\n", PUSH, p.pushes[1],
           p.worst[1] * 1e3);
    /* a delta: checkpoint 2 takes what the pusher changed since 1 (nearly every row: the next is a
     * base again, store_sparse_ckpt.c), 3 that base, 4 exactly 1 % of the rows */
    checkpoint(s, db, 2, secs, &n, NULL);
    checkpoint(s, db, 3, secs, &n, NULL);
    int64_t ch = rows / 100;
    int64_t *cid = malloc((size_t)ch * sizeof *cid);
    float *cg = calloc((size_t)ch * DIM, sizeof *cg);
    for (int64_t i = 0; i < ch; i++) cid[i] = i * 100 + 7;
    if (store_sparse_push(s, "emb", cid, (size_t)ch, cg, (size_t)ch * DIM * 4, 0, NULL, err, sizeof err))
        die("push", err);
    free(cid);
    free(cg);
    checkpoint(s, db, 4, secs, &n, NULL);
    report("1 % delta", secs, n, NULL, disk_rows_s);
    store_destroy(s);
    ckpt_close(db);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : 1;
}
