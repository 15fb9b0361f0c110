/* store_evict.c — the evictor: one thread per store that expires the rows of
 * the table parts with a TTL (sparse_table.h, "a row's life").
 *
 * Every EVICT_TICK seconds it looks for parts whose pass is due and expires
 * their rows shard by shard (sparse_table_expire). Each shard's pass holds
 * the push fence shared (as a push does: a checkpoint's cut never sees a
 * part half swept; a row of a cut not copied yet is kept for the copy before
 * it goes, sparse_cut.c) and the shard's lock, and nothing else: pushes to other
 * shards go on, a push to the same shard waits one shard's pass, and a
 * checkpoint waits at most one shard's pass for the fence. The part is
 * looked up again for every shard, since a restore may replace it between
 * two. A part's next pass is due after max(its base interval, 20 times its
 * last pass's length): the evictor spends at most ~5% of a core. The base
 * interval: a quarter of ttl_secs (0.1 s to 5 s), or 0.5 s for ttl_steps.
 * The cap needs no thread: the request that fills a shard trims it.
 */
#include "store.h"
#include "store_internal.h"

#include "log.h"
#include "psc.h"

#include <errno.h>
#include <time.h>

#define EVICT_TICK 0.1

static double base_interval(const sparse_table_cfg_t *c)
{
    if (c->ttl_secs > 0) return PSC_MAX(0.1, PSC_MIN(5.0, c->ttl_secs / 4));
    return 0.5;
}

/* Table i's part, under the fence (held shared by the caller); NULL when the
 * tables changed since generation gen. */
static sparse_table_t *part_at(store_t *s, int i, uint64_t gen)
{
    sparse_table_t *t = NULL;
    pthread_rwlock_rdlock(&s->lock);
    if (s->tables_gen == gen && i < s->ntables) t = s->tables[i].part;
    pthread_rwlock_unlock(&s->lock);
    return t;
}

/* Expires table i's rows, shard by shard; 0, or -1 when the tables changed. */
static int sweep(store_t *s, int i, uint64_t gen)
{
    for (int sh = 0; sh < SPARSE_TABLE_SHARDS; sh++) {
        fence_enter(s);
        sparse_table_t *t = part_at(s, i, gen);
        if (t) sparse_table_expire(t, sh);
        fence_leave(s);
        if (!t) return -1;
    }
    return 0;
}

/* One look at the tables: each due part swept. */
static void pass(store_t *s)
{
    fence_enter(s);
    pthread_rwlock_rdlock(&s->lock);
    uint64_t gen = s->tables_gen;
    int n = s->ready ? s->ntables : 0;
    pthread_rwlock_unlock(&s->lock);
    fence_leave(s);
    for (int i = 0; i < n; i++) {
        double now = psc_now();
        fence_enter(s);
        sparse_table_t *t = part_at(s, i, gen);
        int due = t && sparse_table_has_ttl(t) && now >= s->tables[i].evict_due;
        double base = t ? base_interval(sparse_table_config(t)) : 0;
        fence_leave(s);
        if (!due) continue;
        if (sweep(s, i, gen)) return;
        double took = psc_now() - now;
        fence_enter(s);
        if (part_at(s, i, gen)) s->tables[i].evict_due = now + PSC_MAX(base, 20 * took);
        fence_leave(s);
    }
}

static void *evictor_main(void *arg)
{
    store_t *s = arg;
    pthread_mutex_lock(&s->evict_lock);
    while (!s->evict_stop) {
        struct timespec ts;
        psc_abstime_in(&ts, EVICT_TICK);
        int rc = pthread_cond_timedwait(&s->evict_cond, &s->evict_lock, &ts);
        if (s->evict_stop) break;
        if (rc != ETIMEDOUT && rc != 0) continue;
        pthread_mutex_unlock(&s->evict_lock);
        pass(s);
        pthread_mutex_lock(&s->evict_lock);
    }
    pthread_mutex_unlock(&s->evict_lock);
    return NULL;
}

void store_evictor_start(store_t *s)
{
    PSC_ASSERT(pthread_mutex_init(&s->evict_lock, NULL) == 0);
    PSC_ASSERT(pthread_cond_init(&s->evict_cond, NULL) == 0);
    s->evict_stop = 0;
    PSC_ASSERT(pthread_create(&s->evictor, NULL, evictor_main, s) == 0);
}

void store_evictor_stop(store_t *s)
{
    pthread_mutex_lock(&s->evict_lock);
    s->evict_stop = 1;
    pthread_cond_signal(&s->evict_cond);
    pthread_mutex_unlock(&s->evict_lock);
    pthread_join(s->evictor, NULL);
    pthread_cond_destroy(&s->evict_cond);
    pthread_mutex_destroy(&s->evict_lock);
}
