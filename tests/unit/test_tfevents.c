/* test_tfevents — event files written by tfevents.c, read back by a decoder of our own.
 *
 * The reader below shares nothing with the writer: its own bit-at-a-time CRC-32C
 * and mask (not common/crc32c), its own TFRecord framing check and its own varint /
 * protobuf field walker that decodes tensorflow.Event with the field numbers of
 * event.proto and summary.proto (wall_time 1 fixed64, step 2 varint, file_version
 * 3 string, summary 5; Summary.value 1; Value.tag 1, simple_value 2 fixed32).
 * Files go to a mkdtemp folder in /tmp, removed at the end of each test.
 *
 * Checked: the file name pattern, each record's length and data CRC, the first
 * event (file_version "brain.Event:2", step 0), tags, steps and float values of
 * the scalars, wall times, steps that need long varints (negative ones included),
 * two threads logging at once, that the reader notices a flipped byte or a torn
 * tail, and that I/O errors come back as codes (not a crash), also when the file
 * hits RLIMIT_FSIZE mid-run.
 */
#include "psc.h"
#include "tfevents.h"

#include <ftw.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

/* ---- an independent reader -------------------------------------------- */

static uint32_t ref_crc32c(const uint8_t *p, size_t n)
{
    uint32_t s = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        s ^= p[i];
        for (int k = 0; k < 8; k++) s = (s & 1) ? (s >> 1) ^ 0x82F63B78u : s >> 1;
    }
    return ~s;
}

static uint32_t ref_masked(const uint8_t *p, size_t n)
{
    uint32_t c = ref_crc32c(p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static uint64_t get_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

enum { MAX_VALUES = 4, MAX_STR = 128 };

typedef struct {
    int has_wall, has_step, has_version, has_summary;
    double wall_time;
    int64_t step;
    char file_version[MAX_STR];
    int nvalues;
    struct {
        char tag[MAX_STR];
        int has_simple;
        float simple_value;
    } values[MAX_VALUES];
} event_t;

/* Reads one varint at *pos < end. Returns 0, or -1 if it runs off the end or
 * past 10 bytes. */
static int rd_varint(const uint8_t *p, size_t end, size_t *pos, uint64_t *out)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (*pos >= end) return -1;
        uint8_t b = p[(*pos)++];
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return -1;
}

/* One field: number, wire type, and its value (varint/fixed) or its bytes
 * [*off, *off + *len) for a length-delimited one. */
typedef struct {
    uint32_t num;
    int wire;
    uint64_t u;
    size_t off, len;
} field_t;

static int rd_field(const uint8_t *p, size_t end, size_t *pos, field_t *f)
{
    uint64_t key;
    if (rd_varint(p, end, pos, &key)) return -1;
    f->num = (uint32_t)(key >> 3);
    f->wire = (int)(key & 7);
    if (f->num == 0) return -1;
    switch (f->wire) {
    case 0: return rd_varint(p, end, pos, &f->u);
    case 1:
        if (end - *pos < 8) return -1;
        f->u = get_le(p + *pos, 8);
        *pos += 8;
        return 0;
    case 5:
        if (end - *pos < 4) return -1;
        f->u = get_le(p + *pos, 4);
        *pos += 4;
        return 0;
    case 2:
        if (rd_varint(p, end, pos, &f->u) || f->u > end - *pos) return -1;
        f->off = *pos;
        f->len = (size_t)f->u;
        *pos += f->len;
        return 0;
    default: return -1; /* groups: not in these messages */
    }
}

static int copy_str(char *dst, const uint8_t *p, const field_t *f)
{
    if (f->wire != 2 || f->len >= MAX_STR) return -1;
    memcpy(dst, p + f->off, f->len);
    dst[f->len] = '\0';
    return 0;
}

static int decode_value(const uint8_t *p, size_t pos, size_t end, event_t *ev)
{
    if (ev->nvalues == MAX_VALUES) return -1;
    int i = ev->nvalues++;
    field_t f;
    while (pos < end) {
        if (rd_field(p, end, &pos, &f)) return -1;
        if (f.num == 1) {
            if (copy_str(ev->values[i].tag, p, &f)) return -1;
        } else if (f.num == 2) {
            if (f.wire != 5) return -1;
            uint32_t bits = (uint32_t)f.u;
            memcpy(&ev->values[i].simple_value, &bits, 4);
            ev->values[i].has_simple = 1;
        }
    }
    return pos == end ? 0 : -1;
}

static int decode_summary(const uint8_t *p, size_t pos, size_t end, event_t *ev)
{
    field_t f;
    ev->has_summary = 1;
    while (pos < end) {
        if (rd_field(p, end, &pos, &f)) return -1;
        if (f.num == 1) {
            if (f.wire != 2 || decode_value(p, f.off, f.off + f.len, ev)) return -1;
        }
    }
    return pos == end ? 0 : -1;
}

static int decode_event(const uint8_t *p, size_t n, event_t *ev)
{
    memset(ev, 0, sizeof *ev);
    size_t pos = 0;
    field_t f;
    while (pos < n) {
        if (rd_field(p, n, &pos, &f)) return -1;
        switch (f.num) {
        case 1:
            if (f.wire != 1) return -1;
            memcpy(&ev->wall_time, &f.u, 8);
            ev->has_wall = 1;
            break;
        case 2:
            if (f.wire != 0) return -1;
            ev->step = (int64_t)f.u;
            ev->has_step = 1;
            break;
        case 3:
            if (copy_str(ev->file_version, p, &f)) return -1;
            ev->has_version = 1;
            break;
        case 5:
            if (f.wire != 2 || decode_summary(p, f.off, f.off + f.len, ev)) return -1;
            break;
        default: break; /* other fields: skipped, as a protobuf reader does */
        }
    }
    return pos == n ? 0 : -1;
}

enum { RD_OK = 0, RD_TRUNCATED = 1, RD_LENGTH_CRC = 2, RD_DATA_CRC = 3, RD_PROTO = 4 };

/* Walks the TFRecords of buf: checks both CRCs of each, decodes it into
 * evs[0..max) and counts them in *n. Returns RD_OK or the first problem. */
static int read_records(const uint8_t *buf, size_t size, event_t *evs, size_t max, size_t *n)
{
    size_t pos = 0;
    *n = 0;
    while (pos < size) {
        if (size - pos < 12) return RD_TRUNCATED;
        uint64_t len = get_le(buf + pos, 8);
        if ((uint32_t)get_le(buf + pos + 8, 4) != ref_masked(buf + pos, 8)) return RD_LENGTH_CRC;
        if (len > size - pos - 12 || size - pos - 12 - len < 4) return RD_TRUNCATED;
        const uint8_t *data = buf + pos + 12;
        if ((uint32_t)get_le(data + len, 4) != ref_masked(data, (size_t)len)) return RD_DATA_CRC;
        if (*n < max && decode_event(data, (size_t)len, &evs[*n])) return RD_PROTO;
        (*n)++;
        pos += 12 + (size_t)len + 4;
    }
    return RD_OK;
}

static uint8_t *slurp(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *size = (size_t)n;
    return buf;
}

/* ---- fixture: a temp dir ---------------------------------------------- */

typedef struct {
    char dir[64];
} fx_t;

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof *f);
    if (!f) return -1;
    snprintf(f->dir, sizeof f->dir, "/tmp/test_tfevents.XXXXXX");
    if (!mkdtemp(f->dir)) return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx_t *f = *state;
    nftw(f->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    struct stat st;
    int gone = stat(f->dir, &st) != 0;
    free(f);
    return gone ? 0 : -1;
}

static double wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static psc_tfevents_t *open_in(const char *dir, const char *suffix)
{
    char err[512] = "";
    psc_tfevents_t *w = NULL;
    int rc = psc_tfevents_open(dir, suffix, &w, err, sizeof err);
    if (rc) fail_msg("open %s: %s (%s)", dir, err, psc_strerror(rc));
    assert_non_null(w);
    return w;
}

/* ---- tests ------------------------------------------------------------ */

enum { N_STEPS = 200 };

static double scalar_value(int tag, int64_t step)
{
    switch (tag) {
    case 0: return 2.5 / (double)step;           /* loss: not exact in float */
    case 1: return 0.1 * (double)step / N_STEPS; /* accuracy */
    default: return 1000.0 + 0.37 * (double)step; /* steps_per_sec */
    }
}

static const char *const tags[3] = {"loss", "accuracy", "steps_per_sec"};

/* Scalars for steps 1..N in a nested, missing logdir; the name, both CRCs of every
 * record, the version event and every tag/step/value. */
static void test_scalars_roundtrip(void **state)
{
    fx_t *f = *state;
    char logdir[128];
    snprintf(logdir, sizeof logdir, "%s/runs/job1/", f->dir); /* parents missing, trailing '/' */

    double t0 = wall();
    psc_tfevents_t *w = open_in(logdir, ".psc");
    for (int64_t step = 1; step <= N_STEPS; step++)
        for (int t = 0; t < 3; t++) assert_int_equal(psc_tfevents_scalar(w, step, tags[t], scalar_value(t, step)), 0);
    assert_int_equal(psc_tfevents_flush(w), 0);

    /* The name: <logdir>/events.out.tfevents.<%010 seconds>.<host>.<pid>.psc */
    char path[512];
    snprintf(path, sizeof path, "%s", psc_tfevents_path(w));
    psc_tfevents_close(w);
    double t1 = wall();

    char want_dir[160];
    snprintf(want_dir, sizeof want_dir, "%s/runs/job1/", f->dir);
    assert_memory_equal(path, want_dir, strlen(want_dir));
    const char *base = path + strlen(want_dir);
    const char *prefix = "events.out.tfevents.";
    assert_memory_equal(base, prefix, strlen(prefix));
    const char *p = base + strlen(prefix);
    size_t ndigits = strspn(p, "0123456789");
    assert_true(ndigits >= 10);
    long long secs = strtoll(p, NULL, 10);
    assert_true(secs >= (long long)t0 && secs <= (long long)t1);
    char host[256] = "";
    assert_int_equal(gethostname(host, sizeof host), 0);
    char rest[512];
    snprintf(rest, sizeof rest, ".%s.%ld.psc", host, (long)getpid());
    assert_string_equal(p + ndigits, rest);

    size_t size;
    uint8_t *buf = slurp(path, &size);
    size_t cap = 1 + 3 * N_STEPS, n = 0;
    event_t *evs = calloc(cap, sizeof *evs);
    assert_non_null(evs);
    assert_int_equal(read_records(buf, size, evs, cap, &n), RD_OK);
    assert_int_equal(n, cap);

    assert_true(evs[0].has_version);
    assert_string_equal(evs[0].file_version, "brain.Event:2");
    assert_true(evs[0].has_wall);
    assert_int_equal(evs[0].step, 0);
    assert_false(evs[0].has_summary);
    int fractional = 0; /* wall_time has sub-second precision, not whole seconds */
    for (size_t i = 0; i < n; i++) {
        assert_true(evs[i].has_wall);
        assert_true(evs[i].wall_time >= t0 - 1e-3 && evs[i].wall_time <= t1 + 1e-3);
        fractional += evs[i].wall_time != (double)(long long)evs[i].wall_time;
        if (i > 0) assert_false(evs[i].has_version);
    }
    assert_true(fractional > 0);
    for (int64_t step = 1; step <= N_STEPS; step++)
        for (int t = 0; t < 3; t++) {
            const event_t *ev = &evs[1 + 3 * (step - 1) + t];
            assert_int_equal(ev->step, step);
            assert_true(ev->has_summary);
            assert_int_equal(ev->nvalues, 1);
            assert_string_equal(ev->values[0].tag, tags[t]);
            assert_true(ev->values[0].has_simple);
            assert_true(ev->values[0].simple_value == (float)scalar_value(t, step));
        }
    free(evs);
    free(buf);
}

/* Steps needing 1..10-byte varints, negative ones included, a tag longer than the
 * writer's first buffer, and float edge values. */
static void test_steps_and_values(void **state)
{
    fx_t *f = *state;
    static const int64_t steps[] = {0, 1, 127, 128, 16383, 16384, (int64_t)1 << 35, INT64_MAX, -1, INT64_MIN};
    static const double values[] = {0.0, -0.0, 1e-40, 3.4e38, -7.25, 1e300};
    char longtag[1500];
    memset(longtag, 'x', sizeof longtag - 1);
    longtag[sizeof longtag - 1] = '\0';
    memcpy(longtag, "scope/", 6);

    psc_tfevents_t *w = open_in(f->dir, NULL);
    for (size_t i = 0; i < PSC_ARRAY_LEN(steps); i++)
        assert_int_equal(psc_tfevents_scalar(w, steps[i], "s", (double)i), 0);
    for (size_t i = 0; i < PSC_ARRAY_LEN(values); i++)
        assert_int_equal(psc_tfevents_scalar(w, (int64_t)i, "v", values[i]), 0);
    assert_int_equal(psc_tfevents_scalar(w, 7, longtag, 1.5), 0);
    char path[512];
    snprintf(path, sizeof path, "%s", psc_tfevents_path(w));
    /* No suffix: the name ends in .<pid>. */
    char tail[32];
    snprintf(tail, sizeof tail, ".%ld", (long)getpid());
    assert_string_equal(path + strlen(path) - strlen(tail), tail);
    psc_tfevents_close(w);

    size_t size, n;
    uint8_t *buf = slurp(path, &size);
    /* The long tag does not fit event_t's strings: decode all but the last. */
    size_t want = 1 + PSC_ARRAY_LEN(steps) + PSC_ARRAY_LEN(values);
    event_t *evs = calloc(want, sizeof *evs);
    assert_non_null(evs);
    assert_int_equal(read_records(buf, size, evs, want, &n), RD_OK);
    assert_int_equal(n, want + 1);
    for (size_t i = 0; i < PSC_ARRAY_LEN(steps); i++) {
        const event_t *ev = &evs[1 + i];
        assert_int_equal(ev->step, steps[i]);
        assert_int_equal(ev->has_step, steps[i] != 0); /* proto3: the default is left out */
        assert_string_equal(ev->values[0].tag, "s");
        assert_true(ev->values[0].simple_value == (float)i);
    }
    for (size_t i = 0; i < PSC_ARRAY_LEN(values); i++) {
        const event_t *ev = &evs[1 + PSC_ARRAY_LEN(steps) + i];
        float want_v = (float)values[i];
        assert_memory_equal(&ev->values[0].simple_value, &want_v, 4); /* bits: -0.0 and inf too */
    }
    /* The last record by hand: its tag is the long one, its value 1.5f. */
    size_t pos = 0;
    for (size_t i = 0; i < want; i++) pos += 12 + (size_t)get_le(buf + pos, 8) + 4;
    size_t len = (size_t)get_le(buf + pos, 8);
    const uint8_t *data = buf + pos + 12;
    const uint8_t *hit = memmem(data, len, longtag, strlen(longtag));
    assert_non_null(hit);
    float got;
    uint32_t bits = (uint32_t)get_le(hit + strlen(longtag) + 1, 4);
    memcpy(&got, &bits, 4);
    assert_true(hit[strlen(longtag)] == ((2 << 3) | 5) && got == 1.5f);
    assert_int_equal(pos + 12 + len + 4, size);
    free(evs);
    free(buf);
}

/* The reader itself must notice damage, or the round trip proves nothing. */
static void test_reader_detects_corruption(void **state)
{
    fx_t *f = *state;
    psc_tfevents_t *w = open_in(f->dir, ".c");
    for (int64_t step = 1; step <= 5; step++) assert_int_equal(psc_tfevents_scalar(w, step, "loss", 0.5), 0);
    char path[512];
    snprintf(path, sizeof path, "%s", psc_tfevents_path(w));
    psc_tfevents_close(w);

    size_t size, n;
    uint8_t *buf = slurp(path, &size);
    event_t evs[8];
    assert_int_equal(read_records(buf, size, evs, 8, &n), RD_OK);
    assert_int_equal(n, 6);

    size_t rec1 = 12 + (size_t)get_le(buf, 8) + 4; /* second record's offset */
    size_t len1 = (size_t)get_le(buf + rec1, 8);
    struct {
        size_t at;
        int want;
    } cases[] = {
        {rec1 + 0, RD_LENGTH_CRC},            /* the length */
        {rec1 + 9, RD_LENGTH_CRC},            /* the length's CRC */
        {rec1 + 12, RD_DATA_CRC},             /* the first data byte */
        {rec1 + 12 + len1 - 1, RD_DATA_CRC},  /* the float's last byte */
        {rec1 + 12 + len1 + 2, RD_DATA_CRC},  /* the data's CRC */
        {size - 1, RD_DATA_CRC},              /* the last byte of the file */
    };
    for (size_t c = 0; c < PSC_ARRAY_LEN(cases); c++) {
        buf[cases[c].at] ^= 0x10;
        assert_int_equal(read_records(buf, size, evs, 8, &n), cases[c].want);
        buf[cases[c].at] ^= 0x10;
    }
    /* A torn tail: any cut inside the last record, header included. */
    size_t last = 0;
    for (size_t i = 0; i < 5; i++) last += 12 + (size_t)get_le(buf + last, 8) + 4;
    for (size_t end = last + 1; end < size; end++)
        assert_int_equal(read_records(buf, end, evs, 8, &n), RD_TRUNCATED);
    assert_int_equal(read_records(buf, last, evs, 8, &n), RD_OK);
    assert_int_equal(n, 5);
    assert_int_equal(read_records(buf, size, evs, 8, &n), RD_OK);
    free(buf);
}

typedef struct {
    psc_tfevents_t *w;
    const char *tag;
    int rc;
} thr_arg_t;

enum { THR_STEPS = 2000 };

static void *logger(void *p)
{
    thr_arg_t *a = p;
    for (int64_t step = 1; step <= THR_STEPS && a->rc == 0; step++)
        a->rc = psc_tfevents_scalar(a->w, step, a->tag, (double)step);
    return NULL;
}

/* Two threads on one writer (the chief's step loop and its reporter): every
 * record intact, each thread's steps all there and in its order. */
static void test_two_threads(void **state)
{
    fx_t *f = *state;
    psc_tfevents_t *w = open_in(f->dir, ".thr");
    thr_arg_t a = {w, "loss", 0}, b = {w, "a_much_longer_tag/steps_per_sec", 0};
    pthread_t ta, tb;
    assert_int_equal(pthread_create(&ta, NULL, logger, &a), 0);
    assert_int_equal(pthread_create(&tb, NULL, logger, &b), 0);
    for (int i = 0; i < 20; i++) assert_int_equal(psc_tfevents_flush(w), 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    assert_int_equal(a.rc, 0);
    assert_int_equal(b.rc, 0);
    char path[512];
    snprintf(path, sizeof path, "%s", psc_tfevents_path(w));
    psc_tfevents_close(w);

    size_t size, n;
    uint8_t *buf = slurp(path, &size);
    size_t cap = 1 + 2 * THR_STEPS;
    event_t *evs = calloc(cap, sizeof *evs);
    assert_non_null(evs);
    assert_int_equal(read_records(buf, size, evs, cap, &n), RD_OK);
    assert_int_equal(n, cap);
    int64_t next_a = 1, next_b = 1;
    for (size_t i = 1; i < n; i++) {
        int is_a = strcmp(evs[i].values[0].tag, a.tag) == 0;
        if (!is_a) assert_string_equal(evs[i].values[0].tag, b.tag);
        int64_t *next = is_a ? &next_a : &next_b;
        assert_int_equal(evs[i].step, *next);
        assert_true(evs[i].values[0].simple_value == (float)*next);
        (*next)++;
    }
    assert_int_equal(next_a, THR_STEPS + 1);
    assert_int_equal(next_b, THR_STEPS + 1);
    free(evs);
    free(buf);
}

/* Bad arguments and unusable directories: codes and a message naming the path. */
static void test_open_errors(void **state)
{
    fx_t *f = *state;
    char err[512], path[512];
    psc_tfevents_t *w = (psc_tfevents_t *)&err; /* must be reset to NULL */

    assert_int_equal(psc_tfevents_open("", NULL, &w, err, sizeof err), PSC_EINVAL);
    assert_null(w);
    assert_int_equal(psc_tfevents_open(NULL, NULL, &w, err, sizeof err), PSC_EINVAL);
    assert_int_equal(psc_tfevents_open(f->dir, "a/b", &w, err, sizeof err), PSC_EINVAL);
    assert_int_equal(psc_tfevents_open(f->dir, NULL, NULL, err, sizeof err), PSC_EINVAL);

    /* A regular file where the log directory, or one of its parents, should be. */
    snprintf(path, sizeof path, "%s/plainfile", f->dir);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fclose(fp);
    err[0] = '\0';
    assert_int_equal(psc_tfevents_open(path, NULL, &w, err, sizeof err), PSC_EIO);
    assert_null(w);
    assert_non_null(strstr(err, path));
    snprintf(path, sizeof path, "%s/plainfile/sub/dir", f->dir);
    err[0] = '\0';
    assert_int_equal(psc_tfevents_open(path, NULL, &w, err, sizeof err), PSC_EIO);
    assert_non_null(strstr(err, "/plainfile"));

    /* A directory without write permission (root ignores it: skip that part). */
    if (geteuid() != 0) {
        snprintf(path, sizeof path, "%s/ro", f->dir);
        assert_int_equal(mkdir(path, 0555), 0);
        err[0] = '\0';
        assert_int_equal(psc_tfevents_open(path, NULL, &w, err, sizeof err), PSC_EIO);
        assert_non_null(strstr(err, path));
        chmod(path, 0755);
    }

    /* This second's name taken (a job started in the second its last one
     * opened its file): the next free second's name, the other untouched. */
    char host[256] = "";
    gethostname(host, sizeof host);
    long long now = (long long)wall();
    snprintf(path, sizeof path, "%s/events.out.tfevents.%010lld.%s.%ld.y", f->dir, now, host, (long)getpid());
    fp = fopen(path, "w");
    assert_non_null(fp);
    fputs("keep", fp);
    fclose(fp);
    assert_int_equal(psc_tfevents_open(f->dir, ".y", &w, err, sizeof err), 0);
    assert_string_not_equal(psc_tfevents_path(w), path);
    assert_non_null(strstr(psc_tfevents_path(w), ".y"));
    psc_tfevents_close(w);
    w = NULL;
    size_t kept;
    uint8_t *kbuf = slurp(path, &kept);
    assert_int_equal(kept, 4);
    free(kbuf);

    /* The names of the next 100 seconds taken: never clobbered, PSC_EEXISTS. */
    for (long long s = now; s < now + 101; s++) {
        snprintf(path, sizeof path, "%s/events.out.tfevents.%010lld.%s.%ld.x", f->dir, s, host, (long)getpid());
        fp = fopen(path, "w");
        assert_non_null(fp);
        fputs("keep", fp);
        fclose(fp);
    }
    err[0] = '\0';
    assert_int_equal(psc_tfevents_open(f->dir, ".x", &w, err, sizeof err), PSC_EEXISTS);
    assert_null(w);
    assert_non_null(strstr(err, f->dir));
    for (long long s = now; s < now + 101; s++) {
        snprintf(path, sizeof path, "%s/events.out.tfevents.%010lld.%s.%ld.x", f->dir, s, host, (long)getpid());
        size_t size;
        uint8_t *buf = slurp(path, &size);
        assert_int_equal(size, 4);
        free(buf);
    }

    /* NULL handles. */
    psc_tfevents_close(NULL);
    assert_null(psc_tfevents_path(NULL));
    assert_int_equal(psc_tfevents_flush(NULL), PSC_EINVAL);
    assert_int_equal(psc_tfevents_scalar(NULL, 1, "x", 1.0), PSC_EINVAL);
    w = open_in(f->dir, ".ok");
    assert_int_equal(psc_tfevents_scalar(w, 1, NULL, 1.0), PSC_EINVAL);
    assert_int_equal(psc_tfevents_scalar(w, 1, "", 1.0), PSC_EINVAL);
    psc_tfevents_close(w);
}

/* The file hits RLIMIT_FSIZE mid-run (as a full disk would): calls return
 * PSC_EIO from then on, close does not crash, and what reached the file is
 * whole records up to a torn tail at most. */
static void test_write_error(void **state)
{
    fx_t *f = *state;
    struct rlimit old;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    if (old.rlim_max != RLIM_INFINITY && old.rlim_max < 65536) skip();
    void (*old_sig)(int) = signal(SIGXFSZ, SIG_IGN); /* EFBIG instead of a kill */

    psc_tfevents_t *w = open_in(f->dir, ".full");
    struct rlimit lim = {.rlim_cur = 4096, .rlim_max = old.rlim_max};
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    int rc = 0;
    int64_t step;
    for (step = 1; step <= 10000 && rc == 0; step++) {
        rc = psc_tfevents_scalar(w, step, "loss", 1.0);
        if (rc == 0 && step % 50 == 0) rc = psc_tfevents_flush(w);
    }
    assert_int_equal(rc, PSC_EIO);
    assert_true(step < 10000);
    /* Sticky: no more writes, however many calls come. */
    assert_int_equal(psc_tfevents_scalar(w, step, "loss", 1.0), PSC_EIO);
    assert_int_equal(psc_tfevents_flush(w), PSC_EIO);
    char path[512];
    snprintf(path, sizeof path, "%s", psc_tfevents_path(w));
    psc_tfevents_close(w);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, old_sig);

    size_t size, n;
    uint8_t *buf = slurp(path, &size);
    assert_true(size <= 4096);
    event_t evs[4];
    int r = read_records(buf, size, evs, 4, &n);
    assert_true(r == RD_OK || r == RD_TRUNCATED);
    assert_true(n > 10);
    assert_string_equal(evs[0].file_version, "brain.Event:2");
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_scalars_roundtrip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_steps_and_values, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reader_detects_corruption, setup, teardown),
        cmocka_unit_test_setup_teardown(test_two_threads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_error, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
