/* ctr_loader.c — see ctr_loader.h. A ring of batches: the prefetch thread
 * takes a free one, reads and maps it, and queues it; the consumer takes the
 * oldest queued one and gives it back with ctr_loader_release. A followed
 * directory's reader may wait long for files: destroy cancels that wait
 * (the reader's cancel flag), and the consumer's wait ends on the
 * interrupt flags it was given (ctr_loader_set_interrupt). */
#include "ctr_loader.h"

#include "log.h"
#include "psc.h"
#include "table.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A slot of the model: the table it reads and the categorical feature whose bags feed it. */
typedef struct slot_desc {
    int table, feature, layer;
    enum psc_combiner combiner;
    int hash_ids;
    uint64_t name_hash; /* psc_fnv1a64 of the feature's name */
    const char *name;
} slot_desc_t;

/* A per-table map from id to its index among the batch's unique ids: open
 * addressing, cleared by a generation stamp instead of memset. */
typedef struct idmap {
    int64_t *keys;
    int32_t *vals;
    uint32_t *stamp;
    uint32_t gen;
    size_t cap; /* a power of two */
} idmap_t;

struct ctr_loader {
    const psc_job_spec_t *spec;
    data_reader_t *reader;
    int batch_size;
    slot_desc_t *slots;
    int nslots;
    idmap_t *maps; /* per table */
    ctr_slot_batch_t *ring;
    int nring;
    int *queue; /* ring indexes in order, head .. head + queued */
    int head, queued;
    int *free_list, nfree;
    int done;      /* the reader is done (rc 0) or failed (rc < 0) */
    int rc;
    char err[512];
    int stopping;
    atomic_int cancel;              /* set at destroy: ends a followed directory's wait in the reader */
    const atomic_int *interrupt[2]; /* the consumer's wait ends when one is set (NULL: none) */
    double max_wait;                /* > 0: the consumer's wait ends after this long */
    int64_t skipped; /* the reader's bad records, copied under the lock */
    pthread_t thread;
    int started;
    pthread_mutex_t lock;
    pthread_cond_t cond;
};

/* The slots in model order: the features of the embedding and wide layers
 * (tower_ctr.h). */
static int slot_walk(const psc_job_spec_t *spec, slot_desc_t *out)
{
    int n = 0;
    for (int l = 0; l < spec->num_layers; l++) {
        const psc_layer_spec_t *L = &spec->layers[l];
        if (L->type != PSC_LAYER_EMBEDDING && L->type != PSC_LAYER_WIDE) continue;
        for (int j = 0; j < L->num_features; j++, n++) {
            if (!out) continue;
            slot_desc_t *s = &out[n];
            s->table = L->table;
            s->feature = L->features[j];
            s->layer = l;
            s->combiner = L->combiner;
            s->hash_ids = L->hash_ids;
            s->name = "?";
            for (int f = 0; f < spec->num_features; f++)
                if (spec->features[f].role == PSC_FEATURE_CATEGORICAL && spec->features[f].cat_index == s->feature)
                    s->name = spec->features[f].name;
            s->name_hash = psc_fnv1a64(s->name, strlen(s->name));
        }
    }
    return n;
}

static void idmap_reset(idmap_t *m, size_t need)
{
    size_t cap = 64;
    while (cap < 2 * need) cap <<= 1;
    if (cap > m->cap) {
        free(m->keys);
        free(m->vals);
        free(m->stamp);
        m->keys = psc_xmalloc(cap * sizeof *m->keys);
        m->vals = psc_xmalloc(cap * sizeof *m->vals);
        m->stamp = psc_xcalloc(cap, sizeof *m->stamp);
        m->cap = cap;
        m->gen = 0;
    }
    if (++m->gen == 0) { /* wrapped: clear the stamps once every 2^32 batches */
        memset(m->stamp, 0, m->cap * sizeof *m->stamp);
        m->gen = 1;
    }
}

/* The index of id among b's unique ids of table t, adding it when new. */
static int32_t idmap_get(idmap_t *m, ctr_slot_batch_t *b, int t, int64_t id)
{
    size_t mask = m->cap - 1, h = (size_t)psc_feature_id_hash((uint64_t)id, 0, INT64_MAX) & mask;
    for (;; h = (h + 1) & mask) {
        if (m->stamp[h] != m->gen) {
            m->stamp[h] = m->gen;
            m->keys[h] = id;
            if (b->nuids[t] == b->cap_uids[t]) {
                b->cap_uids[t] = b->cap_uids[t] ? 2 * b->cap_uids[t] : 1024;
                b->uids[t] = psc_xrealloc(b->uids[t], (size_t)b->cap_uids[t] * sizeof *b->uids[t]);
            }
            b->uids[t][b->nuids[t]] = id;
            return m->vals[h] = b->nuids[t]++;
        }
        if (m->keys[h] == id) return m->vals[h];
    }
}

/* The combiner's factor for a bag's weights. */
static float combiner_scale(enum psc_combiner c, const float *w, int64_t k0, int64_t k1)
{
    if (c == PSC_COMBINER_SUM || k1 == k0) return 1.0f;
    double s = 0;
    for (int64_t k = k0; k < k1; k++) s += c == PSC_COMBINER_MEAN ? (double)w[k] : (double)w[k] * w[k];
    if (c == PSC_COMBINER_SQRTN) s = sqrt(s);
    return s > 0 ? (float)(1.0 / s) : 0.0f;
}

/* Maps the raw batch b->raw into slots: off, idx, w, the unique ids per table. */
static int map_batch(ctr_loader_t *l, ctr_slot_batch_t *b, char *err, size_t errlen)
{
    const psc_job_spec_t *spec = l->spec;
    const data_batch_t *r = &b->raw;
    int n = r->n, S = l->nslots;
    int64_t nnz = 0;
    for (int i = 0; i < n; i++)
        for (int s = 0; s < S; s++) {
            int64_t base = (int64_t)i * r->num_cat + l->slots[s].feature;
            nnz += r->off[base + 1] - r->off[base];
        }
    b->off = psc_xrealloc(b->off, ((size_t)n * (size_t)S + 1) * sizeof *b->off);
    b->idx = psc_xrealloc(b->idx, (size_t)PSC_MAX(nnz, 1) * sizeof *b->idx);
    b->w = psc_xrealloc(b->w, (size_t)PSC_MAX(nnz, 1) * sizeof *b->w);
    b->nnz = nnz;
    b->nslots = S;
    for (int t = 0; t < b->ntables; t++) {
        b->nuids[t] = 0;
        idmap_reset(&l->maps[t], (size_t)nnz);
    }
    int64_t k = 0;
    b->off[0] = 0;
    for (int i = 0; i < n; i++)
        for (int s = 0; s < S; s++) {
            const slot_desc_t *sd = &l->slots[s];
            const psc_table_spec_t *T = &spec->tables[sd->table];
            int64_t base = (int64_t)i * r->num_cat + sd->feature, k0 = r->off[base], k1 = r->off[base + 1];
            float scale = combiner_scale(sd->combiner, r->weights, k0, k1);
            for (int64_t q = k0; q < k1; q++, k++) {
                uint64_t key = r->keys[q];
                int64_t id;
                if (sd->hash_ids)
                    id = psc_feature_id_hash(key, sd->name_hash, T->rows);
                else if (key >= (uint64_t)T->rows)
                    return psc_seterr(err, errlen, PSC_ECORRUPT,
                                      "feature %s: value %llu is not below table %s's %lld rows (\"hash_ids\": false)",
                                      sd->name, (unsigned long long)key, T->name, (long long)T->rows);
                else
                    id = (int64_t)key;
                b->idx[k] = idmap_get(&l->maps[sd->table], b, sd->table, id);
                b->w[k] = r->weights[q] * scale;
            }
            b->off[(int64_t)i * S + s + 1] = (int32_t)k;
        }
    return 0;
}

void ctr_slot_batch_reserve_rows(ctr_slot_batch_t *b, int t, int dim)
{
    if (b->nuids[t] <= b->cap_rows[t]) return;
    int cap = PSC_MAX(b->nuids[t], 2 * b->cap_rows[t]);
    free(b->rows[t]);
    free(b->row_grads[t]);
    b->rows[t] = psc_xaligned((size_t)cap * (size_t)dim * sizeof(float));
    b->row_grads[t] = psc_xaligned((size_t)cap * (size_t)dim * sizeof(float));
    b->cap_rows[t] = cap;
}

static void slot_batch_free(ctr_slot_batch_t *b)
{
    data_batch_free(&b->raw);
    free(b->files_done);
    free(b->off);
    free(b->idx);
    free(b->w);
    for (int t = 0; t < b->ntables; t++) {
        free(b->uids[t]);
        free(b->rows[t]);
        free(b->row_grads[t]);
    }
    free(b->uids);
    free(b->nuids);
    free(b->cap_uids);
    free(b->rows);
    free(b->row_grads);
    free(b->cap_rows);
}

static void copy_files_done(ctr_slot_batch_t *b, const char *done)
{
    size_t n = strlen(done) + 1;
    if (n > b->files_done_cap) {
        b->files_done_cap = PSC_MAX(n, 2 * b->files_done_cap);
        b->files_done = psc_xrealloc(b->files_done, b->files_done_cap);
    }
    memcpy(b->files_done, done, n);
}

static void *prefetch_main(void *arg)
{
    ctr_loader_t *l = arg;
    for (;;) {
        pthread_mutex_lock(&l->lock);
        while (!l->stopping && l->nfree == 0) pthread_cond_wait(&l->cond, &l->lock);
        if (l->stopping) {
            pthread_mutex_unlock(&l->lock);
            return NULL;
        }
        int i = l->free_list[--l->nfree];
        pthread_mutex_unlock(&l->lock);

        ctr_slot_batch_t *b = &l->ring[i];
        char err[512] = "";
        int rc = data_reader_next(l->reader, &b->raw, l->batch_size, &b->epoch, err, sizeof err);
        if (rc > 0) rc = map_batch(l, b, err, sizeof err) == 0 ? 1 : PSC_ECORRUPT;
        if (rc > 0) copy_files_done(b, data_reader_files_done(l->reader));
        pthread_mutex_lock(&l->lock);
        l->skipped = data_reader_skipped(l->reader);
        if (rc > 0) {
            l->queue[(l->head + l->queued++) % l->nring] = i;
        } else {
            l->free_list[l->nfree++] = i;
            l->done = 1;
            l->rc = rc;
            snprintf(l->err, sizeof l->err, "%s", err);
        }
        pthread_cond_broadcast(&l->cond);
        pthread_mutex_unlock(&l->lock);
        if (rc <= 0) return NULL;
    }
}

int ctr_loader_create(const psc_job_spec_t *spec, int test, int shard, int num_shards, int batch_size, uint64_t seed,
                      int shuffle, int prefetch, ctr_loader_t **out, char *err, size_t errlen)
{
    *out = NULL;
    ctr_loader_t *l = psc_xcalloc(1, sizeof *l);
    l->spec = spec;
    l->batch_size = batch_size;
    int rc = data_reader_open(spec, test, shard, num_shards, seed, shuffle, &l->reader, err, errlen);
    if (rc) {
        free(l);
        return rc;
    }
    atomic_init(&l->cancel, 0);
    data_reader_set_cancel(l->reader, &l->cancel);
    l->nslots = slot_walk(spec, NULL);
    l->slots = psc_xcalloc((size_t)PSC_MAX(l->nslots, 1), sizeof *l->slots);
    slot_walk(spec, l->slots);
    l->maps = psc_xcalloc((size_t)PSC_MAX(spec->num_tables, 1), sizeof *l->maps);
    l->nring = PSC_MAX(prefetch, 1) + 2; /* prefetched + the step's + the one the step pipelines */
    l->ring = psc_xcalloc((size_t)l->nring, sizeof *l->ring);
    l->queue = psc_xcalloc((size_t)l->nring, sizeof *l->queue);
    l->free_list = psc_xcalloc((size_t)l->nring, sizeof *l->free_list);
    for (int i = 0; i < l->nring; i++) {
        ctr_slot_batch_t *b = &l->ring[i];
        int T = spec->num_tables;
        b->ntables = T;
        b->uids = psc_xcalloc((size_t)PSC_MAX(T, 1), sizeof *b->uids);
        b->nuids = psc_xcalloc((size_t)PSC_MAX(T, 1), sizeof *b->nuids);
        b->cap_uids = psc_xcalloc((size_t)PSC_MAX(T, 1), sizeof *b->cap_uids);
        b->rows = psc_xcalloc((size_t)PSC_MAX(T, 1), sizeof *b->rows);
        b->row_grads = psc_xcalloc((size_t)PSC_MAX(T, 1), sizeof *b->row_grads);
        b->cap_rows = psc_xcalloc((size_t)PSC_MAX(T, 1), sizeof *b->cap_rows);
        l->free_list[l->nfree++] = i;
    }
    pthread_mutex_init(&l->lock, NULL);
    pthread_cond_init(&l->cond, NULL);
    if ((rc = psc_thread_start(&l->thread, prefetch_main, l, "the CTR prefetch thread", err, errlen))) {
        ctr_loader_destroy(l);
        return rc;
    }
    l->started = 1;
    *out = l;
    return 0;
}

void ctr_loader_set_interrupt(ctr_loader_t *l, const atomic_int *a, const atomic_int *b, double max_wait_secs)
{
    l->interrupt[0] = a;
    l->interrupt[1] = b;
    l->max_wait = max_wait_secs;
}

static int interrupted(const ctr_loader_t *l)
{
    for (int i = 0; i < 2; i++)
        if (l->interrupt[i] && atomic_load(l->interrupt[i])) return 1;
    return 0;
}

/* Waits (lock held) until a batch is queued or the reader is done; with
 * interrupt flags or a longest wait, looks at them every 50 ms. 2 when a
 * flag ended it, 3 when the longest wait did, else 0. */
static int wait_batch(ctr_loader_t *l)
{
    int watch = l->interrupt[0] || l->interrupt[1] || l->max_wait > 0;
    double until = l->max_wait > 0 ? psc_now() + l->max_wait : 0;
    while (l->queued == 0 && !l->done) {
        if (!watch) {
            pthread_cond_wait(&l->cond, &l->lock);
            continue;
        }
        if (interrupted(l)) return 2;
        if (until > 0 && psc_now() >= until) return 3;
        struct timespec ts;
        psc_abstime_in(&ts, 0.05);
        pthread_cond_timedwait(&l->cond, &l->lock, &ts);
    }
    return 0;
}

int ctr_loader_try_next(ctr_loader_t *l, ctr_slot_batch_t **b)
{
    *b = NULL;
    pthread_mutex_lock(&l->lock);
    if (l->queued > 0) {
        *b = &l->ring[l->queue[l->head]];
        l->head = (l->head + 1) % l->nring;
        l->queued--;
    }
    pthread_mutex_unlock(&l->lock);
    return *b ? 0 : 1;
}

int ctr_loader_next(ctr_loader_t *l, ctr_slot_batch_t **b, char *err, size_t errlen)
{
    *b = NULL;
    pthread_mutex_lock(&l->lock);
    int rc = wait_batch(l);
    if (rc) {
        pthread_mutex_unlock(&l->lock);
        return rc;
    }
    if (l->queued > 0) {
        *b = &l->ring[l->queue[l->head]];
        l->head = (l->head + 1) % l->nring;
        l->queued--;
    } else if (l->rc < 0) {
        rc = psc_seterr(err, errlen, l->rc, "%s", l->err);
    } else {
        rc = 1;
    }
    pthread_mutex_unlock(&l->lock);
    return rc;
}

void ctr_loader_release(ctr_loader_t *l, ctr_slot_batch_t *b)
{
    if (!b) return;
    pthread_mutex_lock(&l->lock);
    l->free_list[l->nfree++] = (int)(b - l->ring);
    pthread_cond_broadcast(&l->cond);
    pthread_mutex_unlock(&l->lock);
}

int64_t ctr_loader_skipped(ctr_loader_t *l)
{
    pthread_mutex_lock(&l->lock);
    int64_t n = l->skipped;
    pthread_mutex_unlock(&l->lock);
    return n;
}

void ctr_loader_destroy(ctr_loader_t *l)
{
    if (!l) return;
    if (l->started) {
        atomic_store(&l->cancel, 1);
        pthread_mutex_lock(&l->lock);
        l->stopping = 1;
        pthread_cond_broadcast(&l->cond);
        pthread_mutex_unlock(&l->lock);
        pthread_join(l->thread, NULL);
    }
    pthread_mutex_destroy(&l->lock);
    pthread_cond_destroy(&l->cond);
    data_reader_close(l->reader);
    for (int i = 0; i < l->nring; i++) slot_batch_free(&l->ring[i]);
    for (int t = 0; t < l->spec->num_tables; t++) {
        free(l->maps[t].keys);
        free(l->maps[t].vals);
        free(l->maps[t].stamp);
    }
    free(l->maps);
    free(l->ring);
    free(l->queue);
    free(l->free_list);
    free(l->slots);
    free(l);
}
