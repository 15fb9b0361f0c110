/* tfevents.c — see tfevents.h.
 *
 * The protobuf is written by hand. Field numbers and types were checked against
 * tensorflow/core/util/event.proto and tensorboard/compat/proto/summary.proto
 * (both proto3):
 *   Event:         double wall_time = 1; int64 step = 2;
 *                  oneof what { string file_version = 3; Summary summary = 5; ... }
 *   Summary:       repeated Value value = 1;
 *   Summary.Value: string tag = 1; oneof value { float simple_value = 2; ... }
 * Wire types: fixed64 (1) for the double, varint (0) for int64 (a negative step is
 * its 64-bit two's complement, 10 bytes), length-delimited (2) for strings and
 * messages, fixed32 (5) for the float; fixed-width values little-endian. As a
 * proto3 encoder does, a step of 0 is left out (0 is the field's default), so the
 * first event is wall_time + file_version, byte for byte what TensorFlow's
 * EventsWriter writes; wall_time and simple_value are always written.
 *
 * TFRecord framing (tensorflow/core/lib/io/record_writer.cc): uint64 length LE,
 * masked CRC-32C of those 8 bytes, the data, masked CRC-32C of the data; the mask
 * is crc32c.h's psc_crc32c_mask, TensorFlow's.
 *
 * A record is built whole in the writer's buffer (grown under the lock when a tag
 * needs it, so a steady run allocates nothing) and handed to stdio in one fwrite.
 */
#include "tfevents.h"

#include "bytes.h"
#include "crc32c.h"
#include "log.h"
#include "psc.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Protobuf keys: (field number << 3) | wire type. */
enum {
    TFE_EVENT_WALL_TIME = (1 << 3) | 1,    /* double, fixed64 */
    TFE_EVENT_STEP = (2 << 3) | 0,         /* int64, varint */
    TFE_EVENT_FILE_VERSION = (3 << 3) | 2, /* string */
    TFE_EVENT_SUMMARY = (5 << 3) | 2,      /* Summary message */
    TFE_SUMMARY_VALUE = (1 << 3) | 2,      /* repeated Summary.Value */
    TFE_VALUE_TAG = (1 << 3) | 2,          /* string */
    TFE_VALUE_SIMPLE_VALUE = (2 << 3) | 5, /* float, fixed32 */
};

enum { TFE_HEADER = 12, TFE_FOOTER = 4 }; /* length + its CRC; the data's CRC */

struct psc_tfevents {
    pthread_mutex_t mu;
    FILE *f;
    char *path;
    int failed;   /* a write failed: the file may hold a torn record; under mu */
    int errnum;   /* errno of that failure */
    int opened;   /* open returned it: failures are logged, not put in err */
    uint8_t *buf; /* one record being built; under mu */
    size_t cap;
};

/* ---- encoding ---------------------------------------------------------- */

static size_t varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static size_t put_varint(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

static size_t put_event_head(uint8_t *p, double wall_time, int64_t step)
{
    size_t n = 0;
    uint64_t bits;
    memcpy(&bits, &wall_time, sizeof bits); /* IEEE-754 binary64; same byte order as integers */
    p[n++] = TFE_EVENT_WALL_TIME;
    psc_le_put64(p + n, bits);
    n += 8;
    if (step != 0) {
        p[n++] = TFE_EVENT_STEP;
        n += put_varint(p + n, (uint64_t)step);
    }
    return n;
}

/* Bytes put_scalar_event writes at most for a tag of taglen bytes. */
static size_t scalar_event_bound(size_t taglen)
{
    return 9 + 11 + 3 * (1 + 10) + taglen + 5;
}

static size_t put_scalar_event(uint8_t *p, double wall_time, int64_t step, const char *tag, size_t taglen, float value)
{
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    size_t value_len = 1 + varint_len(taglen) + taglen + 1 + 4;
    size_t summary_len = 1 + varint_len(value_len) + value_len;

    size_t n = put_event_head(p, wall_time, step);
    p[n++] = TFE_EVENT_SUMMARY;
    n += put_varint(p + n, summary_len);
    p[n++] = TFE_SUMMARY_VALUE;
    n += put_varint(p + n, value_len);
    p[n++] = TFE_VALUE_TAG;
    n += put_varint(p + n, taglen);
    memcpy(p + n, tag, taglen);
    n += taglen;
    p[n++] = TFE_VALUE_SIMPLE_VALUE;
    psc_le_put32(p + n, bits);
    n += 4;
    return n;
}

static size_t put_version_event(uint8_t *p, double wall_time)
{
    size_t len = strlen(PSC_TFEVENTS_FILE_VERSION);
    size_t n = put_event_head(p, wall_time, 0);
    p[n++] = TFE_EVENT_FILE_VERSION;
    n += put_varint(p + n, len);
    memcpy(p + n, PSC_TFEVENTS_FILE_VERSION, len);
    return n + len;
}

/* ---- writing ----------------------------------------------------------- */

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Makes w->buf hold at least need bytes. Under mu. */
static void reserve(psc_tfevents_t *w, size_t need)
{
    if (need <= w->cap) return;
    size_t cap = PSC_MAX(need, 2 * w->cap);
    w->buf = psc_xrealloc(w->buf, cap);
    w->cap = cap;
}

/* Marks the writer failed and says so once (psc_tfevents_open reports its own
 * failure in err instead). Under mu. */
static int fail(psc_tfevents_t *w, const char *what, int errnum)
{
    if (!w->failed && w->opened)
        PSC_ERROR("tfevents: %s %s: %s (no more events go to this file)", what, w->path, strerror(errnum));
    if (!w->failed) w->errnum = errnum;
    w->failed = 1;
    return PSC_EIO;
}

/* Frames the n data bytes at w->buf + TFE_HEADER as one TFRecord and writes it.
 * Under mu. */
static int write_record(psc_tfevents_t *w, size_t n)
{
    uint8_t *rec = w->buf;
    psc_le_put64(rec, (uint64_t)n);
    psc_le_put32(rec + 8, psc_crc32c_mask(psc_crc32c(0, rec, 8)));
    psc_le_put32(rec + TFE_HEADER + n, psc_crc32c_mask(psc_crc32c(0, rec + TFE_HEADER, n)));
    size_t total = TFE_HEADER + n + TFE_FOOTER;
    errno = 0;
    if (fwrite(rec, 1, total, w->f) != total) return fail(w, "cannot write", errno ? errno : EIO);
    return 0;
}

static int flush_locked(psc_tfevents_t *w)
{
    if (w->failed) return PSC_EIO;
    errno = 0;
    if (fflush(w->f) != 0) return fail(w, "cannot write", errno ? errno : EIO);
    return 0;
}

/* mkdir -p (psc_mkdir_p), then dir must be a directory. */
static int make_dirs(const char *dir, char *err, size_t errlen)
{
    int e = psc_mkdir_p(dir);
    if (e) return psc_seterr(err, errlen, PSC_EIO, "cannot create directory %s: %s", dir, strerror(e));
    struct stat st;
    if (stat(dir, &st) != 0)
        return psc_seterr(err, errlen, PSC_EIO, "cannot use log directory %s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return psc_seterr(err, errlen, PSC_EIO, "cannot use log directory %s: not a directory", dir);
    return 0;
}

int psc_tfevents_open(const char *logdir, const char *suffix, psc_tfevents_t **out, char *err, size_t errlen)
{
    if (!out) return psc_seterr(err, errlen, PSC_EINVAL, "tfevents: no place for the writer");
    *out = NULL;
    if (!logdir || !*logdir) return psc_seterr(err, errlen, PSC_EINVAL, "tfevents: empty log directory");
    if (!suffix) suffix = "";
    if (strchr(suffix, '/'))
        return psc_seterr(err, errlen, PSC_EINVAL, "tfevents: file suffix '%s' contains '/'", suffix);

    int rc = make_dirs(logdir, err, errlen);
    if (rc) return rc;

    char host[256];
    if (gethostname(host, sizeof host) != 0 || !host[0]) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';

    double now = wall_now();
    size_t dirlen = strlen(logdir);
    while (dirlen > 1 && logdir[dirlen - 1] == '/') dirlen--; /* no "dir//events..." */
    const char *sep = logdir[dirlen - 1] == '/' ? "" : "/";
    /* O_EXCL: never append to or truncate another writer's file. A process
     * that opens a second file within one second (a job cancelled and the
     * next one started) takes the next second's name: names stay unique and
     * in the order TensorBoard reads them. */
    char *path = NULL;
    int fd = -1;
    for (int later = 0; fd < 0 && later < 100; later++) {
        free(path);
        int len = snprintf(NULL, 0, "%.*s%sevents.out.tfevents.%010lld.%s.%ld%s", (int)dirlen, logdir, sep,
                           (long long)now + later, host, (long)getpid(), suffix);
        path = psc_xmalloc((size_t)len + 1);
        snprintf(path, (size_t)len + 1, "%.*s%sevents.out.tfevents.%010lld.%s.%ld%s", (int)dirlen, logdir, sep,
                 (long long)now + later, host, (long)getpid(), suffix);
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) {
        rc = psc_seterr(err, errlen, errno == EEXIST ? PSC_EEXISTS : PSC_EIO, "cannot create event file %s: %s",
                        path, strerror(errno));
        free(path);
        return rc;
    }
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        rc = psc_seterr(err, errlen, PSC_EIO, "cannot open event file %s: %s", path, strerror(errno));
        close(fd);
        unlink(path);
        free(path);
        return rc;
    }

    psc_tfevents_t *w = psc_xcalloc(1, sizeof *w);
    PSC_ASSERT(pthread_mutex_init(&w->mu, NULL) == 0);
    w->f = f;
    w->path = path;
    reserve(w, 256);

    /* The version event, flushed now so that a reader finds a valid file at once. */
    size_t n = put_version_event(w->buf + TFE_HEADER, now);
    PSC_ASSERT(TFE_HEADER + n + TFE_FOOTER <= w->cap);
    rc = write_record(w, n);
    if (rc == 0) rc = flush_locked(w);
    if (rc) {
        psc_seterr(err, errlen, rc, "cannot write event file %s: %s", path, strerror(w->errnum));
        fclose(w->f);
        unlink(path);
        w->f = NULL;
        pthread_mutex_destroy(&w->mu);
        free(w->buf);
        free(w->path);
        free(w);
        return rc;
    }
    w->opened = 1;
    *out = w;
    return 0;
}

int psc_tfevents_scalar(psc_tfevents_t *w, int64_t step, const char *tag, double value)
{
    if (!w || !tag || !*tag) return PSC_EINVAL;
    size_t taglen = strlen(tag);
    double now = wall_now();

    PSC_ASSERT(pthread_mutex_lock(&w->mu) == 0);
    int rc = PSC_EIO;
    if (!w->failed) {
        reserve(w, TFE_HEADER + scalar_event_bound(taglen) + TFE_FOOTER);
        size_t n = put_scalar_event(w->buf + TFE_HEADER, now, step, tag, taglen, (float)value);
        PSC_ASSERT(n <= scalar_event_bound(taglen));
        rc = write_record(w, n);
    }
    pthread_mutex_unlock(&w->mu);
    return rc;
}

int psc_tfevents_flush(psc_tfevents_t *w)
{
    if (!w) return PSC_EINVAL;
    PSC_ASSERT(pthread_mutex_lock(&w->mu) == 0);
    int rc = flush_locked(w);
    pthread_mutex_unlock(&w->mu);
    return rc;
}

void psc_tfevents_close(psc_tfevents_t *w)
{
    if (!w) return;
    PSC_ASSERT(pthread_mutex_lock(&w->mu) == 0);
    flush_locked(w); /* logs a failure */
    /* fclose also reports a failed write-back of what fflush left (e.g. NFS). */
    errno = 0;
    if (fclose(w->f) != 0 && !w->failed) fail(w, "cannot close", errno ? errno : EIO);
    w->f = NULL;
    pthread_mutex_unlock(&w->mu);
    pthread_mutex_destroy(&w->mu);
    free(w->buf);
    free(w->path);
    free(w);
}

const char *psc_tfevents_path(const psc_tfevents_t *w)
{
    return w ? w->path : NULL;
}
