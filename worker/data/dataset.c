/* dataset.c — a dense model's data set in memory and its input pipeline
 * (see dataset.h).
 *
 * Reading: through the data reader (reader.h, the idx format), batch by
 * batch, into arrays that double as they fill; the reader checks the files.
 *
 * The loader: the shard's example indices (shard, shard + W, ...) are put back in
 * order and Fisher–Yates shuffled at the start of every epoch by a psc_rng seeded
 * with psc_seed_mix(seed, epoch), so an epoch's order depends on (seed, epoch)
 * alone. A prefetch thread gathers batches into a ring of prefetch + 1 buffers, all
 * allocated at create: `prefetch` being filled ahead while the consumer holds the
 * one dataset_loader_next last returned.
 *
 * Ring invariant (under mu): the occupied slots are head .. head + held + filled - 1
 * (mod nslots); slot head is the consumer's when held = 1; the producer writes slot
 * (head + held + filled) mod nslots, outside the lock, only while held + filled <
 * nslots, so no slot is ever read and written at once.
 */
#include "dataset.h"

#include "reader.h"

#include "psc.h"
#include "rng.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DATASET_READ_BATCH 1024 /* examples per read from the reader */

int dataset_read(const psc_job_spec_t *spec, int test, dataset_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    psc_job_spec_t once = *spec; /* one pass (shallow: it lives while r reads) */
    once.epochs = 1;
    data_reader_t *r;
    int rc = data_reader_open(&once, test, 0, 1, spec->seed, 0, &r, err, errlen);
    if (rc) return rc;
    int f = data_reader_num_dense(r);
    data_batch_t b = {0};
    int64_t cap = 0;
    int maxl = 0;
    while ((rc = data_reader_next(r, &b, DATASET_READ_BATCH, NULL, err, errlen)) > 0) {
        if (out->n + b.n > cap) {
            cap = PSC_MAX(cap * 2, out->n + b.n);
            out->x = psc_xrealloc(out->x, (size_t)cap * (size_t)f * sizeof(float));
            out->y = psc_xrealloc(out->y, (size_t)cap * sizeof(int32_t));
        }
        memcpy(out->x + (size_t)out->n * (size_t)f, b.dense, (size_t)b.n * (size_t)f * sizeof(float));
        for (int i = 0; i < b.n; i++) {
            int32_t y = (int32_t)b.label[i]; /* idx: a byte's class */
            out->y[out->n + i] = y;
            maxl = PSC_MAX(maxl, y);
        }
        out->n += b.n;
    }
    data_batch_free(&b);
    data_reader_close(r);
    if (rc == 0 && out->n == 0)
        rc = psc_seterr(err, errlen, PSC_ECORRUPT, "%s: no examples", test ? spec->test_path : spec->train_path);
    if (rc < 0) {
        dataset_deinit(out);
        return rc;
    }
    out->features = f;
    out->num_classes = maxl + 1;
    return 0;
}

void dataset_deinit(dataset_t *d)
{
    if (!d) return;
    free(d->x);
    free(d->y);
    memset(d, 0, sizeof *d);
}

/* ---- the loader ---- */

typedef struct slot {
    float *x;   /* (batch_size, features) */
    int32_t *y; /* (batch_size) */
    int n;
    int epoch;
    int64_t step_in_epoch;
} slot_t;

struct dataset_loader {
    const dataset_t *ds;
    int shard, num_shards, batch_size, epochs;
    uint64_t seed;
    int shuffle; /* 0: the shard in order every epoch */
    int64_t shard_size, steps_per_epoch;
    int64_t *order; /* (shard_size) this epoch's example indices; producer-only */

    slot_t *slots; /* (nslots) */
    int nslots;
    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu;
    pthread_cond_t filled_cv; /* a batch is ready, or done */
    pthread_cond_t free_cv;   /* a slot was released, or stop */
    int head, held, filled;   /* under mu, see the ring invariant above */
    int done, stop;           /* under mu */
};

/* The shard's examples in order, then this epoch's Fisher–Yates shuffle. */
static void shuffle_epoch(dataset_loader_t *l, int epoch)
{
    for (int64_t k = 0; k < l->shard_size; k++) l->order[k] = l->shard + k * l->num_shards;
    if (!l->shuffle) return;
    psc_rng_t r;
    psc_rng_seed(&r, psc_seed_mix(l->seed, (uint64_t)epoch));
    for (int64_t i = l->shard_size - 1; i > 0; i--) {
        int64_t j = (int64_t)psc_rng_below(&r, (uint64_t)i + 1);
        int64_t t = l->order[i];
        l->order[i] = l->order[j];
        l->order[j] = t;
    }
}

static void fill_slot(dataset_loader_t *l, slot_t *s, int epoch, int64_t step)
{
    const dataset_t *ds = l->ds;
    int64_t first = step * l->batch_size;
    int n = (int)PSC_MIN((int64_t)l->batch_size, l->shard_size - first);
    for (int i = 0; i < n; i++) {
        int64_t e = l->order[first + i];
        memcpy(s->x + (size_t)i * ds->features, ds->x + (size_t)e * ds->features, (size_t)ds->features * sizeof(float));
        s->y[i] = ds->y[e];
    }
    s->n = n;
    s->epoch = epoch;
    s->step_in_epoch = step;
}

static void *loader_main(void *arg)
{
    dataset_loader_t *l = arg;
    int tail = 0;
    for (int epoch = 0; epoch < l->epochs; epoch++) {
        shuffle_epoch(l, epoch);
        for (int64_t step = 0; step < l->steps_per_epoch; step++) {
            pthread_mutex_lock(&l->mu);
            while (!l->stop && l->held + l->filled == l->nslots) pthread_cond_wait(&l->free_cv, &l->mu);
            int stop = l->stop;
            pthread_mutex_unlock(&l->mu);
            if (stop) goto finish;

            fill_slot(l, &l->slots[tail], epoch, step); /* a free slot: no lock needed */

            pthread_mutex_lock(&l->mu);
            l->filled++;
            pthread_cond_signal(&l->filled_cv);
            pthread_mutex_unlock(&l->mu);
            tail = (tail + 1) % l->nslots;
        }
    }
finish:
    pthread_mutex_lock(&l->mu);
    l->done = 1;
    pthread_cond_broadcast(&l->filled_cv);
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

dataset_loader_t *dataset_loader_create(const dataset_t *ds, int shard, int num_shards, int batch_size, uint64_t seed,
                                        int shuffle, int epochs, int prefetch, char *err, size_t errlen)
{
    if (num_shards < 1 || shard < 0 || shard >= num_shards) {
        psc_seterr(err, errlen, PSC_EINVAL, "loader: shard %d of %d is not a valid shard", shard, num_shards);
        return NULL;
    }
    if (batch_size < 1 || epochs < 1 || prefetch < 1) {
        psc_seterr(err, errlen, PSC_EINVAL, "loader: batch_size (%d), epochs (%d) and prefetch (%d) must be >= 1",
                   batch_size, epochs, prefetch);
        return NULL;
    }
    int64_t shard_size = ds->n > shard ? (ds->n - shard + num_shards - 1) / num_shards : 0;
    if (shard_size == 0) {
        psc_seterr(err, errlen, PSC_EINVAL,
                   "loader: shard %d of %d is empty: the data set has %lld examples, fewer than the %d replicas", shard,
                   num_shards, (long long)ds->n, num_shards);
        return NULL;
    }

    dataset_loader_t *l = psc_xcalloc(1, sizeof *l);
    l->ds = ds;
    l->shard = shard;
    l->num_shards = num_shards;
    l->batch_size = batch_size;
    l->epochs = epochs;
    l->seed = seed;
    l->shuffle = shuffle;
    l->shard_size = shard_size;
    l->steps_per_epoch = (shard_size + batch_size - 1) / batch_size;
    l->order = psc_xmalloc((size_t)shard_size * sizeof *l->order);
    l->nslots = prefetch + 1;
    l->slots = psc_xcalloc((size_t)l->nslots, sizeof *l->slots);
    for (int i = 0; i < l->nslots; i++) {
        l->slots[i].x = psc_xaligned((size_t)batch_size * (size_t)ds->features * sizeof(float));
        l->slots[i].y = psc_xaligned((size_t)batch_size * sizeof(int32_t));
    }
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->filled_cv, NULL);
    pthread_cond_init(&l->free_cv, NULL);
    if (psc_thread_start(&l->thread, loader_main, l, "loader's prefetch", err, errlen)) {
        dataset_loader_destroy(l);
        return NULL;
    }
    l->thread_started = 1;
    return l;
}

int dataset_loader_next(dataset_loader_t *l, dataset_batch_t *b)
{
    pthread_mutex_lock(&l->mu);
    if (l->held) { /* the previous batch's buffers go back to the producer */
        l->held = 0;
        l->head = (l->head + 1) % l->nslots;
        pthread_cond_signal(&l->free_cv);
    }
    while (l->filled == 0 && !l->done) pthread_cond_wait(&l->filled_cv, &l->mu);
    if (l->filled == 0) {
        pthread_mutex_unlock(&l->mu);
        memset(b, 0, sizeof *b);
        return 1;
    }
    l->filled--;
    l->held = 1;
    const slot_t *s = &l->slots[l->head];
    pthread_mutex_unlock(&l->mu);
    b->x = s->x;
    b->y = s->y;
    b->n = s->n;
    b->epoch = s->epoch;
    b->step_in_epoch = s->step_in_epoch;
    return 0;
}

int64_t dataset_loader_steps_per_epoch(const dataset_loader_t *l) { return l->steps_per_epoch; }

int64_t dataset_loader_shard_size(const dataset_loader_t *l) { return l->shard_size; }

void dataset_loader_destroy(dataset_loader_t *l)
{
    if (!l) return;
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_broadcast(&l->free_cv);
    pthread_mutex_unlock(&l->mu);
    if (l->thread_started) pthread_join(l->thread, NULL);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->filled_cv);
    pthread_cond_destroy(&l->free_cv);
    for (int i = 0; i < l->nslots; i++) {
        free(l->slots[i].x);
        free(l->slots[i].y);
    }
    free(l->slots);
    free(l->order);
    free(l);
}
