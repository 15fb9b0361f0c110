/* dataset.c — IDX data sets and the input pipeline (see dataset.h).
 *
 * Reading: zlib's gzopen/gzread read both gzip and plain files, so one path reads
 * either. A file is read whole into memory and then validated against its header
 * (magic, positive dimensions, exact length: no truncation, no trailing bytes);
 * a header is never trusted to size an allocation. Every error names the file.
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

#include "psc.h"
#include "rng.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define IDX_IMAGES_MAGIC 0x00000803u
#define IDX_LABELS_MAGIC 0x00000801u
#define IDX_MAX_BYTES ((size_t)8 << 30) /* refuse to inflate more than 8 GiB */

/* ---- reading ---- */

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* Reads the whole file `path` (or path.gz, tried first unless path already ends
 * in .gz) into *data (heap-allocated, free()); `used` receives the name read. */
static int read_file(const char *path, char *used, size_t usedlen, uint8_t **data, size_t *len, char *err,
                     size_t errlen)
{
    *data = NULL;
    *len = 0;
    size_t pn = strlen(path);
    if (pn + 4 > usedlen) return psc_seterr(err, errlen, PSC_EINVAL, "%.64s...: path too long", path);
    memcpy(used, path, pn + 1);
    int tried_gz = 0;
    if (pn < 3 || strcmp(path + pn - 3, ".gz") != 0) {
        memcpy(used + pn, ".gz", 4);
        tried_gz = access(used, F_OK) != 0;
        if (tried_gz) used[pn] = 0;
    }
    errno = 0;
    gzFile f = gzopen(used, "rb"); /* reads plain files as they are */
    if (!f)
        return psc_seterr(err, errlen, PSC_EIO, "%s: cannot open: %s%s", used, errno ? strerror(errno) : "out of memory",
                          tried_gz ? " (nor as .gz)" : "");
    gzbuffer(f, 1 << 17);
    size_t cap = (size_t)1 << 20, n = 0;
    uint8_t *buf = psc_xmalloc(cap);
    int rc = 0;
    for (;;) {
        if (n == cap) {
            if (cap >= IDX_MAX_BYTES) {
                rc = psc_seterr(err, errlen, PSC_ECORRUPT, "%s: more than %zu bytes of data; not an IDX file?", used,
                                IDX_MAX_BYTES);
                goto out;
            }
            cap *= 2;
            buf = psc_xrealloc(buf, cap);
        }
        int got = gzread(f, buf + n, (unsigned)PSC_MIN(cap - n, (size_t)1 << 30));
        if (got <= 0) break; /* an error is reported just below */
        n += (size_t)got;
    }
    int zerr = Z_OK;
    const char *msg = gzerror(f, &zerr);
    if (zerr == Z_ERRNO) {
        rc = psc_seterr(err, errlen, PSC_EIO, "%s: read error: %s", used, strerror(errno));
    } else if (zerr != Z_OK) {
        /* zlib's message starts with the path; Z_BUF_ERROR is its "unexpected end of
         * file", a truncated .gz */
        size_t un = strlen(used);
        if (strncmp(msg, used, un) == 0 && strncmp(msg + un, ": ", 2) == 0) msg += un + 2;
        rc = psc_seterr(err, errlen, PSC_ECORRUPT, "%s: corrupt or truncated gzip data (%s)", used, msg);
    }
out:
    gzclose(f);
    if (rc) {
        free(buf);
        return rc;
    }
    *data = buf;
    *len = n;
    return 0;
}

/* Checks an IDX3 image file: magic, n, rows, cols (big-endian u32), then exactly
 * n * rows * cols bytes. */
static int check_images(const char *path, const uint8_t *img, size_t len, uint32_t *n, uint32_t *rows, uint32_t *cols,
                        char *err, size_t errlen)
{
    if (len < 16)
        return psc_seterr(err, errlen, PSC_ECORRUPT, "%s: truncated: %zu bytes, shorter than the 16-byte IDX3 header",
                          path, len);
    if (be32(img) != IDX_IMAGES_MAGIC)
        return psc_seterr(err, errlen, PSC_ECORRUPT,
                          "%s: bad magic 0x%08x (expected 0x%08x: an IDX3 file of unsigned-byte images)", path, be32(img),
                          IDX_IMAGES_MAGIC);
    *n = be32(img + 4), *rows = be32(img + 8), *cols = be32(img + 12);
    if (*n == 0 || *rows == 0 || *cols == 0 || *n > INT32_MAX || (uint64_t)*rows * *cols > INT32_MAX)
        return psc_seterr(err, errlen, PSC_ECORRUPT, "%s: bad dimensions: %u images of %ux%u", path, *n, *rows, *cols);
    uint64_t want = 16 + (uint64_t)*n * *rows * *cols;
    if ((uint64_t)len != want)
        return psc_seterr(err, errlen, PSC_ECORRUPT,
                          "%s: %s: the header says %u images of %ux%u (%llu bytes) but the file holds %zu bytes", path,
                          (uint64_t)len < want ? "truncated" : "trailing data", *n, *rows, *cols,
                          (unsigned long long)want, len);
    return 0;
}

/* Checks an IDX1 label file: magic, n, then exactly n bytes. */
static int check_labels(const char *path, const uint8_t *lab, size_t len, uint32_t *n, char *err, size_t errlen)
{
    if (len < 8)
        return psc_seterr(err, errlen, PSC_ECORRUPT, "%s: truncated: %zu bytes, shorter than the 8-byte IDX1 header",
                          path, len);
    if (be32(lab) != IDX_LABELS_MAGIC)
        return psc_seterr(err, errlen, PSC_ECORRUPT,
                          "%s: bad magic 0x%08x (expected 0x%08x: an IDX1 file of unsigned-byte labels)", path, be32(lab),
                          IDX_LABELS_MAGIC);
    *n = be32(lab + 4);
    uint64_t want = 8 + (uint64_t)*n;
    if ((uint64_t)len != want)
        return psc_seterr(err, errlen, PSC_ECORRUPT,
                          "%s: %s: the header says %u labels (%llu bytes) but the file holds %zu bytes", path,
                          (uint64_t)len < want ? "truncated" : "trailing data", *n, (unsigned long long)want, len);
    return 0;
}

int dataset_idx_load(const char *images_path, const char *labels_path, int64_t limit, dataset_t *out, char *err,
                     size_t errlen)
{
    memset(out, 0, sizeof *out);
    char ipath[4096], lpath[4096];
    uint8_t *img = NULL, *lab = NULL;
    size_t ilen = 0, llen = 0;
    uint32_t n = 0, rows = 0, cols = 0, nl = 0;
    int rc;
    if ((rc = read_file(images_path, ipath, sizeof ipath, &img, &ilen, err, errlen))) goto out;
    if ((rc = check_images(ipath, img, ilen, &n, &rows, &cols, err, errlen))) goto out;
    if ((rc = read_file(labels_path, lpath, sizeof lpath, &lab, &llen, err, errlen))) goto out;
    if ((rc = check_labels(lpath, lab, llen, &nl, err, errlen))) goto out;
    if (nl != n) {
        rc = psc_seterr(err, errlen, PSC_ECORRUPT, "%s has %u images but %s has %u labels", ipath, n, lpath, nl);
        goto out;
    }

    int64_t keep = limit > 0 ? PSC_MIN(limit, (int64_t)n) : (int64_t)n;
    out->n = keep;
    out->rows = (int)rows;
    out->cols = (int)cols;
    out->features = (int)(rows * cols);
    out->x = psc_xaligned((size_t)keep * (size_t)out->features * sizeof(float));
    out->y = psc_xaligned((size_t)keep * sizeof(int32_t));
    const uint8_t *pix = img + 16;
    for (size_t i = 0; i < (size_t)keep * (size_t)out->features; i++) out->x[i] = (float)pix[i] * (1.0f / 255.0f);
    int maxl = 0;
    for (int64_t i = 0; i < keep; i++) {
        out->y[i] = lab[8 + i]; /* a byte: always in [0, 256) */
        if (out->y[i] > maxl) maxl = out->y[i];
    }
    out->num_classes = maxl + 1;
out:
    free(img);
    free(lab);
    if (rc) memset(out, 0, sizeof *out);
    return rc;
}

int dataset_load(const char *prefix, int64_t limit, dataset_t *out, char *err, size_t errlen)
{
    char ipath[4096], lpath[4096];
    snprintf(ipath, sizeof ipath, "%s-images-idx3-ubyte", prefix);
    snprintf(lpath, sizeof lpath, "%s-labels-idx1-ubyte", prefix);
    return dataset_idx_load(ipath, lpath, limit, out, err, errlen);
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
