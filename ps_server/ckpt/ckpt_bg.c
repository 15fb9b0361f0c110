/* ckpt_bg.c — compaction of deleted checkpoints, on a thread of its own.
 *
 * A deleted checkpoint (keep-last-K, a discard, rows a stopped prepare left)
 * is gone from readers at once: one Delete and two DeleteRanges (ckpt.c). Its
 * disk space returns when RocksDB compacts the ranges, which for a full base
 * rewrites or drops every file of it: seconds for 10^6 rows. That compaction
 * used to run inside ckpt_commit; here it runs on one thread per store, so a
 * commit costs its two synced writes, whatever it deleted.
 *
 * Design: a FIFO of ids under bg->mu, one thread that takes them one at a
 * time and compacts the id's tensor and row ranges under db->life shared (a
 * reopen waits for the one running). The thread never takes db->wlock: a
 * writer short of room (ckpt.c, check_space) waits under wlock for the queue
 * to drain (ckpt_bg_drain), since the deleted checkpoints' space may be what
 * it lacks; a failed compaction shows in RocksDB's background error count,
 * which the next write logs (check_background). Close drains the queue, then
 * joins the thread.
 * Invariants: bg->busy is 1 exactly while the thread compacts outside
 * bg->mu; drained == (n == 0 && !busy).
 */
#include "ckpt_internal.h"

#include "psc.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <rocksdb/c.h>

struct ckpt_bg {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t work; /* ids queued, or stop */
    pthread_cond_t idle; /* the queue drained */
    uint64_t *ids;       /* queued, oldest first */
    int n, cap;
    int busy;
    int stop;
};

static void compact_one(ckpt_db_t *db, uint64_t id)
{
    pthread_rwlock_rdlock(&db->life);
    if (db->rdb) {
        char lo[CKPT_RANGE_KEY_LEN + 1], hi[CKPT_RANGE_KEY_LEN + 1];
        ckpt_key_tensor_range(lo, hi, id);
        rocksdb_compact_range(db->rdb, lo, CKPT_RANGE_KEY_LEN, hi, CKPT_RANGE_KEY_LEN);
        ckpt_key_row_range(lo, hi, id);
        rocksdb_compact_range(db->rdb, lo, CKPT_RANGE_KEY_LEN, hi, CKPT_RANGE_KEY_LEN);
    }
    pthread_rwlock_unlock(&db->life);
}

static void *bg_main(void *arg)
{
    ckpt_db_t *db = arg;
    struct ckpt_bg *bg = db->bg;
    pthread_mutex_lock(&bg->mu);
    for (;;) {
        while (!bg->n && !bg->stop) pthread_cond_wait(&bg->work, &bg->mu);
        if (!bg->n) break; /* stopping, and nothing left */
        uint64_t id = bg->ids[0];
        memmove(bg->ids, bg->ids + 1, (size_t)--bg->n * sizeof *bg->ids);
        bg->busy = 1;
        pthread_mutex_unlock(&bg->mu);
        compact_one(db, id);
        pthread_mutex_lock(&bg->mu);
        bg->busy = 0;
        if (!bg->n) pthread_cond_broadcast(&bg->idle);
    }
    pthread_cond_broadcast(&bg->idle);
    pthread_mutex_unlock(&bg->mu);
    return NULL;
}

void ckpt_bg_start(ckpt_db_t *db)
{
    struct ckpt_bg *bg = psc_xcalloc(1, sizeof *bg);
    pthread_mutex_init(&bg->mu, NULL);
    pthread_cond_init(&bg->work, NULL);
    pthread_cond_init(&bg->idle, NULL);
    db->bg = bg;
    int e = pthread_create(&bg->th, NULL, bg_main, db);
    PSC_ASSERT(e == 0 && "cannot start the checkpoint store's compaction thread");
}

void ckpt_bg_compact(ckpt_db_t *db, const uint64_t *ids, int n)
{
    struct ckpt_bg *bg = db->bg;
    if (n <= 0 || !bg) return;
    pthread_mutex_lock(&bg->mu);
    if (bg->n + n > bg->cap) {
        bg->cap = PSC_MAX(2 * bg->cap, bg->n + n);
        bg->ids = psc_xrealloc(bg->ids, (size_t)bg->cap * sizeof *bg->ids);
    }
    memcpy(bg->ids + bg->n, ids, (size_t)n * sizeof *ids);
    bg->n += n;
    pthread_cond_signal(&bg->work);
    pthread_mutex_unlock(&bg->mu);
}

void ckpt_bg_drain(ckpt_db_t *db)
{
    struct ckpt_bg *bg = db->bg;
    if (!bg) return;
    pthread_mutex_lock(&bg->mu);
    while (bg->n || bg->busy) pthread_cond_wait(&bg->idle, &bg->mu);
    pthread_mutex_unlock(&bg->mu);
}

void ckpt_bg_stop(ckpt_db_t *db)
{
    struct ckpt_bg *bg = db->bg;
    if (!bg) return;
    pthread_mutex_lock(&bg->mu);
    bg->stop = 1;
    pthread_cond_signal(&bg->work);
    pthread_mutex_unlock(&bg->mu);
    pthread_join(bg->th, NULL);
    pthread_mutex_destroy(&bg->mu);
    pthread_cond_destroy(&bg->work);
    pthread_cond_destroy(&bg->idle);
    free(bg->ids);
    free(bg);
    db->bg = NULL;
}
