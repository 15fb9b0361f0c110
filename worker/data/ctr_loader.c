/* ctr_loader.c — see ctr_loader.h. A ring of batches: the prefetch thread
 * takes a free one, reads and maps it, and queues it; the consumer takes the
 * oldest queued one and gives it back with ctr_loader_release. A followed
 * directory's reader may wait long for files: destroy cancels that wait
 * (the reader's cancel flag), and the consumer's wait ends on the
 * interrupt flags it was given (ctr_loader_set_interrupt). */
#include "ctr_loader.h"
#include "idmap.h"

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

struct ctr_loader {
    const psc_job_spec_t *spec;
    data_reader_t *reader;
    int batch_size;
    slot_desc_t *slots;
    int nslots;
    idmap_t *maps; /* per table, two: this batch's and the one before's (by parity of seq) */
    int prev;      /* fill each batch's prev (CTR_LOADER_PREV) */
    int64_t *nnz_tab; /* (ntables) a batch's ids per table */
    int64_t seq;   /* batches mapped */
    int64_t *ids;  /* (cap_ids) a batch's ids in bag order, before the maps */
    int32_t *tab;  /* (cap_ids) their tables */
    size_t cap_ids;
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

/* The index of id among b's unique ids of table t, adding it when new. */
#define CTR_LOADER_AHEAD 16 /* map probes prefetched this many ids ahead */

/* The index of id among b's unique ids of table t, adding it when new. */
static int32_t idmap_get(idmap_t *m, ctr_slot_batch_t *b, int t, int64_t id)
{
    int found;
    size_t h = idmap_slot(m, id, &found);
    if (found) return m->slots[h].val;
    if (b->nuids[t] == b->cap_uids[t]) {
        b->cap_uids[t] = b->cap_uids[t] ? 2 * b->cap_uids[t] : 1024;
        b->uids[t] = psc_xrealloc(b->uids[t], (size_t)b->cap_uids[t] * sizeof *b->uids[t]);
        b->prev[t] = psc_xrealloc(b->prev[t], (size_t)b->cap_uids[t] * sizeof *b->prev[t]);
    }
    b->uids[t][b->nuids[t]] = id;
    idmap_set(m, h, id, b->nuids[t]);
    return b->nuids[t]++;
}

/* The batch's ids (l->ids, l->tab) into each table's unique ids (b->idx),
 * then each unique id's index in the batch before (b->prev); the maps'
 * probes are prefetched ahead: a batch's ids fill more than the caches. */
static void map_ids(ctr_loader_t *l, ctr_slot_batch_t *b, int64_t nnz)
{
    int cur = (int)(l->seq & 1);
    for (int64_t k = 0; k < nnz; k++) {
        if (k + CTR_LOADER_AHEAD < nnz)
            idmap_prefetch(&l->maps[2 * l->tab[k + CTR_LOADER_AHEAD] + cur], l->ids[k + CTR_LOADER_AHEAD]);
        b->idx[k] = idmap_get(&l->maps[2 * l->tab[k] + cur], b, l->tab[k], l->ids[k]);
    }
    for (int t = 0; t < b->ntables && l->prev; t++) {
        const idmap_t *before = &l->maps[2 * t + !cur];
        for (int32_t u = 0; u < b->nuids[t]; u++) {
            if (l->seq == 0) {
                b->prev[t][u] = -1;
                continue;
            }
            if (u + CTR_LOADER_AHEAD < b->nuids[t]) idmap_prefetch(before, b->uids[t][u + CTR_LOADER_AHEAD]);
            b->prev[t][u] = idmap_find(before, b->uids[t][u]);
        }
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
    memset(l->nnz_tab, 0, (size_t)b->ntables * sizeof *l->nnz_tab);
    for (int i = 0; i < n; i++)
        for (int s = 0; s < S; s++) {
            int64_t base = (int64_t)i * r->num_cat + l->slots[s].feature;
            l->nnz_tab[l->slots[s].table] += r->off[base + 1] - r->off[base];
        }
    for (int t = 0; t < b->ntables; t++) nnz += l->nnz_tab[t];
    b->off = psc_xrealloc(b->off, ((size_t)n * (size_t)S + 1) * sizeof *b->off);
    b->idx = psc_xrealloc(b->idx, (size_t)PSC_MAX(nnz, 1) * sizeof *b->idx);
    b->w = psc_xrealloc(b->w, (size_t)PSC_MAX(nnz, 1) * sizeof *b->w);
    b->nnz = nnz;
    b->nslots = S;
    for (int t = 0; t < b->ntables; t++) {
        b->nuids[t] = 0;
        idmap_reset(&l->maps[2 * t + (l->seq & 1)], (size_t)l->nnz_tab[t]); /* small: more of it in cache */
    }
    if ((size_t)nnz > l->cap_ids) {
        l->cap_ids = PSC_MAX((size_t)nnz, 2 * l->cap_ids);
        l->ids = psc_xrealloc(l->ids, l->cap_ids * sizeof *l->ids);
        l->tab = psc_xrealloc(l->tab, l->cap_ids * sizeof *l->tab);
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
                l->ids[k] = id;
                l->tab[k] = sd->table;
                b->w[k] = r->weights[q] * scale;
            }
            b->off[(int64_t)i * S + s + 1] = (int32_t)k;
        }
    map_ids(l, b, nnz);
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
        free(b->prev[t]);
        free(b->rows[t]);
        free(b->row_grads[t]);
    }
    free(b->uids);
    free(b->prev);
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
        if (rc > 0) b->seq = l->seq++;
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

int ctr_loader_create(const psc_job_spec_t *spec, int mode, int shard, int num_shards, int batch_size, uint64_t seed,
                      int shuffle, int prefetch, ctr_loader_t **out, char *err, size_t errlen)
{
    *out = NULL;
    ctr_loader_t *l = psc_xcalloc(1, sizeof *l);
    l->spec = spec;
    l->batch_size = batch_size;
    l->prev = (mode & CTR_LOADER_PREV) != 0;
    int rc = data_reader_open(spec, mode & CTR_LOADER_TEST, shard, num_shards, seed, shuffle, &l->reader, err, errlen);
    if (rc) {
        free(l);
        return rc;
    }
    atomic_init(&l->cancel, 0);
    data_reader_set_cancel(l->reader, &l->cancel);
    l->nslots = slot_walk(spec, NULL);
    l->slots = psc_xcalloc((size_t)PSC_MAX(l->nslots, 1), sizeof *l->slots);
    slot_walk(spec, l->slots);
    l->maps = psc_xcalloc((size_t)PSC_MAX(2 * spec->num_tables, 1), sizeof *l->maps);
    l->nnz_tab = psc_xcalloc((size_t)PSC_MAX(spec->num_tables, 1), sizeof *l->nnz_tab);
    l->nring = PSC_MAX(prefetch, 1) + 3; /* prefetched + the step's + the two the step pipelines (prefetch_rows) */
    l->ring = psc_xcalloc((size_t)l->nring, sizeof *l->ring);
    l->queue = psc_xcalloc((size_t)l->nring, sizeof *l->queue);
    l->free_list = psc_xcalloc((size_t)l->nring, sizeof *l->free_list);
    for (int i = 0; i < l->nring; i++) {
        ctr_slot_batch_t *b = &l->ring[i];
        int T = spec->num_tables;
        b->ntables = T;
        b->uids = psc_xcalloc((size_t)PSC_MAX(T, 1), sizeof *b->uids);
        b->prev = psc_xcalloc((size_t)PSC_MAX(T, 1), sizeof *b->prev);
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
    for (int t = 0; t < 2 * l->spec->num_tables; t++) idmap_free(&l->maps[t]);
    free(l->maps);
    free(l->nnz_tab);
    free(l->ids);
    free(l->tab);
    free(l->ring);
    free(l->queue);
    free(l->free_list);
    free(l->slots);
    free(l);
}
