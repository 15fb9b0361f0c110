/* reader.c — the CTR data sets' reader (reader.h): file lists, shards,
 * epochs, example caps and bad-record counting over the formats' record
 * parsers (reader_internal.h).
 *
 * Files: each pattern of data.train / data.test is expanded by glob(3); the
 * union is sorted (strcmp) and de-duplicated, so every replica sees the same
 * list. Sharding (W replicas, this one r): by file, the files r, r+W, ...; by
 * record, every file, and the records r, r+W, ... of the files' concatenated
 * stream (the others skipped by the format's skip, unparsed). With shuffle,
 * the shard's files are reordered at each epoch by a psc_rng seeded with
 * psc_seed_mix(seed, epoch): record sharding needs the same seed on every
 * replica, which the job's seed gives.
 *
 * Per epoch: at most `cap` examples (ceil(data.train_examples / W), or
 * data.test_examples for a test set), then the epoch ends. Bad records:
 * bad_record_limit per epoch (each pass meets the same bad lines again), the
 * total in data_reader_skipped; the first few are logged.
 *
 * Followed directory (data.follow, training only): the files come one by one
 * from follow.h (this replica's share of the directory's complete files, in
 * name order, waiting for more as they appear); one epoch, no shuffle, file
 * sharding. A batch may span files; at the idle end an incomplete last batch
 * is dropped (a later run of the job, resuming after the full batches,
 * trains it). A file that vanishes before it is opened is skipped (WARN,
 * counted). With data.follow a data.test that is a directory is read as its
 * newest data.test_files complete files (the rolling window).
 *
 * State machine: `cur` is the open file at order[fi] of epoch `epoch` (a
 * followed directory: the file it handed out last); a batch ends at the end
 * of an epoch; after a hard error every call returns it again.
 */
#include "reader_internal.h"

#include "follow.h"
#include "log.h"
#include "psc.h"
#include "rng.h"

#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DATA_BAD_LOGGED 10 /* bad records logged as WARN, then only counted */

struct data_reader {
    const psc_job_spec_t *spec;
    const data_format_t *fmt;
    char **files; /* this shard's files (record sharding: all), sorted */
    int nfiles;
    int *order; /* this epoch's order of files[] */
    int shard, num_shards, by_record;
    int epochs, epoch;
    uint64_t seed;
    int shuffle;
    int64_t cap;     /* examples per epoch, 0 = all */
    int64_t yielded; /* examples this epoch */
    int64_t stream;  /* record sharding: records of this epoch's stream passed */
    int fi;          /* next file (when cur is NULL) or the current one, in order[] */
    data_file_t *cur;
    int num_dense, num_cat; /* an example's widths: the spec's, or the files' (a format with an open hook) */
    int64_t bad_limit, bad_epoch, bad_total;
    int failed; /* a hard error's code, returned again */
    char fail_msg[1024];
    char msg[1024]; /* a format's message before the reader prefixes it */
    data_follow_t *follow;    /* data.follow (training): the files come from the followed directory */
    const atomic_int *cancel; /* ends the follower's wait (data_reader_set_cancel) */
    int64_t file_examples;    /* examples taken from cur */
    int64_t vanished;         /* followed files gone before they were opened */
    char *done;               /* files finished by the last data_reader_next: "PATH\tN\n" lines */
    size_t done_len, done_cap;
};

static const struct {
    enum psc_data_format format;
    const data_format_t *fmt;
    int (*check)(const psc_job_spec_t *spec, char *err, size_t errlen);
} formats[] = {
    {PSC_DATA_CRITEO, &data_format_criteo, data_criteo_check},
    {PSC_DATA_LIBSVM, &data_format_libsvm, data_libsvm_check},
    {PSC_DATA_TFRECORD, &data_format_tfrecord, NULL},
    {PSC_DATA_IDX, &data_format_idx, NULL},
};

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void free_list(char **v, int n)
{
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

/* The sorted, de-duplicated union of the patterns' matches into *out. */
static int expand(char *const *patterns, int npat, const char *key, char ***out, int *nout, char *err, size_t errlen)
{
    char **v = NULL;
    size_t n = 0, cap = 0;
    for (int i = 0; i < npat; i++) {
        glob_t g;
        int rc = glob(patterns[i], 0, NULL, &g);
        if (rc != 0) {
            if (rc != GLOB_NOMATCH) globfree(&g);
            free_list(v, (int)n);
            if (rc == GLOB_NOMATCH)
                return psc_seterr(err, errlen, PSC_ECONFIG, "%s: no file matches \"%s\"", key, patterns[i]);
            return psc_seterr(err, errlen, PSC_EIO, "%s: cannot expand \"%s\" (glob error %d)", key, patterns[i], rc);
        }
        for (size_t k = 0; k < g.gl_pathc; k++) {
            if (n == cap) {
                cap = cap ? cap * 2 : 16;
                v = psc_xrealloc(v, cap * sizeof *v);
            }
            v[n++] = psc_xstrdup(g.gl_pathv[k]);
        }
        globfree(&g);
    }
    if (n > INT32_MAX / 2) {
        free_list(v, (int)n);
        return psc_seterr(err, errlen, PSC_ECONFIG, "%s: too many files", key);
    }
    qsort(v, n, sizeof *v, cmp_str);
    size_t u = 0;
    for (size_t k = 0; k < n; k++) {
        if (u > 0 && strcmp(v[u - 1], v[k]) == 0)
            free(v[k]);
        else
            v[u++] = v[k];
    }
    *out = v;
    *nout = (int)u;
    return 0;
}

/* Keeps files shard, shard + W, ... of the list (file sharding). */
static void keep_shard(data_reader_t *r)
{
    int k = 0;
    for (int i = 0; i < r->nfiles; i++) {
        if (i % r->num_shards == r->shard)
            r->files[k++] = r->files[i];
        else
            free(r->files[i]);
    }
    r->nfiles = k;
}

static void start_epoch(data_reader_t *r, int epoch)
{
    data_file_close(r->cur);
    r->cur = NULL;
    r->epoch = epoch;
    r->fi = 0;
    r->yielded = 0;
    r->stream = 0;
    r->bad_epoch = 0;
    for (int i = 0; i < r->nfiles; i++) r->order[i] = i;
    if (!r->shuffle) return;
    psc_rng_t g;
    psc_rng_seed(&g, psc_seed_mix(r->seed, (uint64_t)epoch));
    for (int i = r->nfiles - 1; i > 0; i--) {
        int j = (int)psc_rng_below(&g, (uint64_t)i + 1);
        int t = r->order[i];
        r->order[i] = r->order[j];
        r->order[j] = t;
    }
}

/* The format and the spec's data keys for reading. */
static int check_spec(const psc_job_spec_t *spec, int test, const data_format_t **fmt, char *err, size_t errlen)
{
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++) {
        if (formats[i].format != spec->data_format) continue;
        *fmt = formats[i].fmt;
        if (spec->num_dense < 0 || spec->num_cat < 0)
            return psc_seterr(err, errlen, PSC_ECONFIG, "data.features: %d dense and %d categorical", spec->num_dense,
                              spec->num_cat);
        int given = spec->data_format == PSC_DATA_IDX ? (test ? spec->test_path : spec->train_path)[0] != '\0'
                                                      : (test ? spec->num_test_files : spec->num_train_files) > 0;
        if (!given) return psc_seterr(err, errlen, PSC_ECONFIG, "%s: no file given", test ? "data.test" : "data.train");
        return formats[i].check ? formats[i].check(spec, err, errlen) : 0;
    }
    return psc_seterr(err, errlen, PSC_ECONFIG, "data.format: the reader reads idx, criteo, libsvm and tfrecord files");
}

/* Is path a directory? */
static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The data set's files: the patterns' matches, a rolling data.test
 * directory's newest files (data.follow), or idx's images file. */
static int list_files(const psc_job_spec_t *spec, int test, char ***files, int *nfiles, char *err, size_t errlen)
{
    const char *key = test ? "data.test" : "data.train";
    if (test && spec->follow && spec->num_test_files == 1 && is_dir(spec->test_files[0]))
        return data_follow_newest(spec->test_files[0], spec->test_window, files, nfiles, err, errlen);
    if (spec->data_format != PSC_DATA_IDX)
        return expand(test ? spec->test_files : spec->train_files, test ? spec->num_test_files : spec->num_train_files,
                      key, files, nfiles, err, errlen);
    char path[4096];
    data_idx_images_path(test ? spec->test_path : spec->train_path, path, sizeof path);
    *files = psc_xmalloc(sizeof **files);
    (*files)[0] = psc_xstrdup(path);
    *nfiles = 1;
    return 0;
}

/* Opens a file and reads its header (a format with an open hook), whose
 * width must be the data set's (num_dense < 0: learn it). */
static int open_file(data_reader_t *r, const char *path, data_file_t **out, char *err, size_t errlen)
{
    int rc = data_file_open(path, out, err, errlen);
    if (rc < 0 || !r->fmt->open) return rc;
    int nd = 0;
    rc = r->fmt->open(*out, &nd, err, errlen);
    if (rc == 0 && r->num_dense >= 0 && nd != r->num_dense)
        rc = psc_seterr(err, errlen, PSC_ECORRUPT, "%s: examples of %d features, but %s's have %d", path, nd,
                        r->files[0], r->num_dense);
    if (rc < 0) {
        data_file_close(*out);
        *out = NULL;
        return rc;
    }
    r->num_dense = nd;
    return 0;
}

int data_reader_open(const psc_job_spec_t *spec, int test, int shard, int num_shards, uint64_t seed, int shuffle,
                     data_reader_t **out, char *err, size_t errlen)
{
    *out = NULL;
    PSC_ASSERT(num_shards >= 1 && shard >= 0 && shard < num_shards);
    const data_format_t *fmt = NULL;
    int rc = check_spec(spec, test, &fmt, err, errlen);
    if (rc < 0) return rc;
    data_reader_t *r = psc_xcalloc(1, sizeof *r);
    const char *key = test ? "data.test" : "data.train";
    if (!test && spec->follow)
        rc = data_follow_create(spec->train_files[0], shard, num_shards, spec->follow_idle_secs, spec->follow_poll_secs,
                                &r->follow, err, errlen);
    else
        rc = list_files(spec, test, &r->files, &r->nfiles, err, errlen);
    if (rc < 0) {
        free(r);
        return rc;
    }
    r->spec = spec;
    r->fmt = fmt;
    r->shard = shard;
    r->num_shards = num_shards;
    r->by_record = spec->shard == PSC_SHARD_RECORD || (spec->shard == PSC_SHARD_AUTO && r->nfiles < num_shards);
    int total = r->nfiles;
    if (r->follow) r->by_record = 0; /* file sharding, by follow.h */
    if (!r->by_record && !r->follow) keep_shard(r);
    if (r->nfiles == 0 && !r->follow) {
        rc = psc_seterr(err, errlen, PSC_ECONFIG,
                        "%s: %d file(s) for %d replicas: replica %d has none under data.shard \"file\" "
                        "(give at least one file per replica, or use \"record\" or \"auto\")",
                        key, total, num_shards, shard);
        data_reader_close(r);
        return rc;
    }
    r->order = psc_xmalloc((size_t)PSC_MAX(r->nfiles, 1) * sizeof *r->order);
    r->epochs = test || r->follow ? 1 : spec->epochs > 0 ? spec->epochs : 1;
    r->seed = seed;
    r->shuffle = shuffle && !r->follow;
    int64_t limit = test ? spec->test_examples : spec->train_examples;
    r->cap = limit > 0 ? (limit + num_shards - 1) / num_shards : 0;
    r->bad_limit = spec->bad_record_limit > 0 ? spec->bad_record_limit : 0;
    r->num_dense = fmt->open ? -1 : spec->num_dense;
    r->num_cat = fmt->open ? 0 : spec->num_cat;
    if (fmt->open) { /* the width is the first file's */
        data_file_t *f;
        if ((rc = open_file(r, r->files[0], &f, err, errlen))) {
            data_reader_close(r);
            return rc;
        }
        data_file_close(f);
    }
    start_epoch(r, 0);
    *out = r;
    return 0;
}

/* "FILE:LINE: " or "FILE: record K at byte B: " for the current record. */
static void where(const data_reader_t *r, char *dst, size_t n)
{
    const data_file_t *f = r->cur;
    if (r->fmt->text)
        snprintf(dst, n, "%s:%lld: ", data_file_path(f), (long long)data_file_record(f));
    else
        snprintf(dst, n, "%s: record %lld at byte %lld: ", data_file_path(f), (long long)data_file_record(f),
                 (long long)data_file_record_offset(f));
}

/* A bad record (r->msg): counted and skipped (0) or the error. */
static int bad_record(data_reader_t *r, char *err, size_t errlen)
{
    char at[640];
    where(r, at, sizeof at);
    if (r->bad_epoch >= r->bad_limit) {
        if (r->bad_limit == 0) return psc_seterr(err, errlen, PSC_ECORRUPT, "%s%s", at, r->msg);
        return psc_seterr(err, errlen, PSC_ECORRUPT, "%s%s (more than data.bad_record_limit = %lld bad records)", at,
                          r->msg, (long long)r->bad_limit);
    }
    r->bad_epoch++;
    r->bad_total++;
    if (r->bad_total <= DATA_BAD_LOGGED)
        PSC_WARN("%s%s (bad record skipped, %lld of at most %lld this epoch)%s", at, r->msg, (long long)r->bad_epoch,
                 (long long)r->bad_limit,
                 r->bad_total == DATA_BAD_LOGGED ? "; further ones are counted, not logged" : "");
    return 0;
}

/* A format's error that stops the read (r->msg): named by file and record
 * unless it names the file already (data_file's I/O errors do). */
static int hard_error(data_reader_t *r, int rc, char *err, size_t errlen)
{
    const char *path = data_file_path(r->cur);
    if (strncmp(r->msg, path, strlen(path)) == 0) return psc_seterr(err, errlen, rc, "%s", r->msg);
    char at[640];
    where(r, at, sizeof at);
    return psc_seterr(err, errlen, rc, "%s%s", at, r->msg);
}

/* Record sharding: skips the other replicas' records before the next one of
 * ours. 1 positioned, 0 the file ended, or an error. */
static int skip_others(data_reader_t *r, char *err, size_t errlen)
{
    while (r->stream % r->num_shards != r->shard) {
        int rc = r->fmt->skip(r->cur, r->msg, sizeof r->msg);
        if (rc == 0) return 0;
        r->stream++;
        if (rc == PSC_ECORRUPT) { /* a framing the format cannot pass: ours to report */
            rc = bad_record(r, err, errlen);
            if (rc < 0) return rc;
        } else if (rc < 0) {
            return hard_error(r, rc, err, errlen);
        }
    }
    return 1;
}

/* Opens the next file into r->cur: 1, 0 when there is none (the epoch's
 * files are done; a followed directory went idle), or an error. */
static int open_next(data_reader_t *r, char *err, size_t errlen)
{
    if (!r->follow) {
        if (r->fi >= r->nfiles) return 0;
        int rc = open_file(r, r->files[r->order[r->fi]], &r->cur, err, errlen);
        return rc < 0 ? rc : 1;
    }
    for (;;) {
        char *path;
        int rc = data_follow_next(r->follow, r->cancel, &path);
        if (rc == PSC_ECANCELLED) return psc_seterr(err, errlen, rc, "reading the followed directory was cancelled");
        if (rc <= 0) return rc;
        rc = data_file_open(path, &r->cur, err, errlen);
        if (rc < 0 && access(path, F_OK) != 0 && errno == ENOENT) { /* deleted (or renamed) since it was listed */
            r->vanished++;
            PSC_WARN("followed file %s vanished before it was read: skipped (%lld so far)", path,
                     (long long)r->vanished);
            free(path);
            continue;
        }
        free(path);
        return rc < 0 ? rc : 1;
    }
}

/* The current file is read to its end: noted in r->done, closed. */
static void end_file(data_reader_t *r)
{
    const char *path = data_file_path(r->cur);
    size_t need = strlen(path) + 32;
    if (r->done_len + need > r->done_cap) {
        r->done_cap = PSC_MAX(2 * r->done_cap, r->done_len + need);
        r->done = psc_xrealloc(r->done, r->done_cap);
    }
    r->done_len += (size_t)snprintf(r->done + r->done_len, r->done_cap - r->done_len, "%s\t%lld\n", path,
                                    (long long)r->file_examples);
    data_file_close(r->cur);
    r->cur = NULL;
    r->fi++;
    r->file_examples = 0;
}

/* One example into b: 1, 0 at the end of the epoch, or an error. */
static int read_one(data_reader_t *r, data_batch_t *b, char *err, size_t errlen)
{
    for (;;) {
        if (r->cap > 0 && r->yielded >= r->cap) return 0;
        if (!r->cur) {
            int rc = open_next(r, err, errlen);
            if (rc <= 0) return rc;
        }
        int rc = r->by_record ? skip_others(r, err, errlen) : 1;
        if (rc == 1) rc = r->fmt->next(r->cur, r->spec, b, r->msg, sizeof r->msg);
        if (rc == 1) {
            r->stream++;
            r->yielded++;
            r->file_examples++;
            return 1;
        }
        if (rc == 0) {
            end_file(r);
            continue;
        }
        if (rc != PSC_ECORRUPT) return hard_error(r, rc, err, errlen);
        data_batch_rollback(b);
        r->stream++;
        rc = bad_record(r, err, errlen);
        if (rc < 0) return rc;
    }
}

/* A followed directory went idle with b holding what was read since the
 * last full batch: b is dropped (a later run of the job trains it first). */
static int follow_end(data_reader_t *r, data_batch_t *b)
{
    data_follow_stats_t st;
    data_follow_stats(r->follow, &st);
    PSC_INFO("followed directory: no new file for %g s: this replica's stream ends after %lld file%s of the %lld "
             "taken (late files never read: %lld; vanished: %lld)",
             r->spec->follow_idle_secs, (long long)st.mine, st.mine == 1 ? "" : "s", (long long)st.taken,
             (long long)st.late, (long long)r->vanished);
    if (b->n > 0)
        PSC_INFO("the last %d example%s read (an incomplete batch) %s not trained now: a later run of this job "
                 "trains %s first",
                 b->n, b->n == 1 ? "" : "s", b->n == 1 ? "is" : "are", b->n == 1 ? "it" : "them");
    data_batch_reset(b, r->num_dense, r->num_cat);
    r->epoch = r->epochs;
    return 0;
}

int data_reader_next(data_reader_t *r, data_batch_t *b, int max_n, int *epoch, char *err, size_t errlen)
{
    PSC_ASSERT(max_n > 0);
    r->done_len = 0;
    if (r->done) r->done[0] = '\0';
    if (r->failed) return psc_seterr(err, errlen, r->failed, "%s", r->fail_msg);
    data_batch_reset(b, r->num_dense, r->num_cat);
    while (r->epoch < r->epochs) {
        int e = r->epoch;
        while (b->n < max_n) {
            int rc = read_one(r, b, err, errlen);
            if (rc < 0) {
                data_batch_reset(b, r->num_dense, r->num_cat);
                r->failed = rc;
                snprintf(r->fail_msg, sizeof r->fail_msg, "%s", err ? err : psc_strerror(rc));
                return rc;
            }
            if (rc == 0) break;
        }
        if (b->n == max_n) {
            if (r->follow && r->cur && data_file_at_end(r->cur, r->msg, sizeof r->msg) == 1)
                end_file(r); /* its last example is in this batch: say so with it */
            if (epoch) *epoch = e;
            return b->n;
        }
        if (r->follow) return follow_end(r, b);
        start_epoch(r, e + 1); /* this epoch is over */
        if (b->n > 0) {
            if (epoch) *epoch = e;
            return b->n;
        }
    }
    data_file_close(r->cur);
    r->cur = NULL;
    return 0;
}

int64_t data_reader_skipped(const data_reader_t *r) { return r->bad_total; }
void data_reader_set_cancel(data_reader_t *r, const atomic_int *cancel) { r->cancel = cancel; }
const char *data_reader_files_done(const data_reader_t *r) { return r->done ? r->done : ""; }
int data_reader_num_files(const data_reader_t *r) { return r->nfiles; }
int data_reader_num_dense(const data_reader_t *r) { return r->num_dense; }

void data_reader_close(data_reader_t *r)
{
    if (!r) return;
    data_file_close(r->cur);
    data_follow_destroy(r->follow);
    free_list(r->files, r->nfiles);
    free(r->order);
    free(r->done);
    free(r);
}
