/* format_idx.c — IDX files (the MNIST format, plain or gzip), the "idx"
 * format of the data reader (reader_internal.h): the dense models' data.
 *
 * A data set is a prefix: <prefix>-images-idx3-ubyte and
 * <prefix>-labels-idx1-ubyte, each read as <name>.gz when that exists (each
 * file on its own). The reader opens the images file; this format's open hook
 * reads its header and opens the labels file beside it (the file's state).
 *
 * Headers (big-endian u32): images 0x00000803, n, rows, cols; labels
 * 0x00000801, n. Positive dimensions, n within int32, rows * cols at most
 * 2^24 (4096 x 4096), the same n in both, checked before any record is read;
 * a header sizes no more than one example's buffers (rows * cols bytes here,
 * one row of floats in the batch): everything else grows with bytes read.
 *
 * A record is example i: rows * cols pixel bytes scaled to [0, 1] floats (the
 * dense row, num_dense = rows * cols from the header) and the label byte as
 * its class (a float 0..255; no categorical features). Record i of both
 * files is read together, so the data set streams.
 *
 * Errors: a header that is wrong stops the read (PSC_ECORRUPT naming the
 * file). A file that ends before its header's n records, or holds bytes after
 * them, is a bad record (PSC_ECORRUPT: "truncated" / "trailing data", naming
 * the file that is wrong) after which the file counts as read: data.bad_record_limit
 * decides whether the read goes on. gzip errors are the file layer's (PSC_EIO).
 *
 * Threads: the state is the file's; a file is read by one thread.
 */
#include "reader_internal.h"

#include "bytes.h"
#include "psc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define IDX_IMAGES_MAGIC 0x00000803u
#define IDX_LABELS_MAGIC 0x00000801u
#define IDX_IMAGES_SUFFIX "-images-idx3-ubyte"
#define IDX_LABELS_SUFFIX "-labels-idx1-ubyte"
#define IDX_MAX_FEATURES (1u << 24) /* pixels per image: 4096 x 4096 */

typedef struct idx_state {
    data_file_t *labels;
    uint32_t n, features;
    uint32_t done; /* records read; n + 1 once the file counts as read */
    uint8_t *pix;  /* one example's bytes */
} idx_state_t;

static void idx_state_free(void *p)
{
    idx_state_t *s = p;
    data_file_close(s->labels);
    free(s->pix);
    free(s);
}

/* name.gz when it exists, else name. */
static void gz_first(const char *name, char *dst, size_t dstlen)
{
    snprintf(dst, dstlen, "%s.gz", name);
    if (access(dst, F_OK) != 0) snprintf(dst, dstlen, "%s", name);
}

void data_idx_images_path(const char *prefix, char *dst, size_t dstlen)
{
    char name[4096];
    snprintf(name, sizeof name, "%s" IDX_IMAGES_SUFFIX, prefix);
    gz_first(name, dst, dstlen);
}

/* A header of `words` u32 from f: 0, or PSC_ECORRUPT naming the file. */
static int read_header(data_file_t *f, uint32_t *h, int words, const char *kind, char *err, size_t errlen)
{
    uint8_t b[16];
    int rc = data_file_read(f, b, (size_t)words * 4, err, errlen);
    if (rc == 0 || rc == PSC_ECORRUPT)
        return psc_seterr(err, errlen, PSC_ECORRUPT, "%s: truncated: shorter than the %d-byte %s header",
                          data_file_path(f), words * 4, kind);
    if (rc < 0) return rc;
    for (int i = 0; i < words; i++) h[i] = psc_be_get32(b + 4 * i);
    return 0;
}

static int check_magic(data_file_t *f, uint32_t got, uint32_t want, const char *what, char *err, size_t errlen)
{
    if (got == want) return 0;
    return psc_seterr(err, errlen, PSC_ECORRUPT, "%s: bad magic 0x%08x (expected 0x%08x: an %s)", data_file_path(f),
                      got, want, what);
}

/* The labels file beside images file `images`: 0 with it open, or an error. */
static int open_labels(const char *images, data_file_t **out, char *err, size_t errlen)
{
    size_t n = strlen(images), k = strlen(IDX_IMAGES_SUFFIX);
    size_t base = n >= 3 && strcmp(images + n - 3, ".gz") == 0 ? n - 3 : n;
    if (base < k || memcmp(images + base - k, IDX_IMAGES_SUFFIX, k) != 0)
        return psc_seterr(err, errlen, PSC_ECONFIG, "%s: an IDX images file is named <prefix>" IDX_IMAGES_SUFFIX,
                          images);
    char name[4096], path[4100];
    snprintf(name, sizeof name, "%.*s" IDX_LABELS_SUFFIX, (int)(base - k), images);
    gz_first(name, path, sizeof path);
    return data_file_open(path, out, err, errlen);
}

static int idx_open(data_file_t *f, int *num_dense, char *err, size_t errlen)
{
    uint32_t h[4], hl[2];
    int rc = read_header(f, h, 4, "IDX3", err, errlen);
    if (rc == 0) rc = check_magic(f, h[0], IDX_IMAGES_MAGIC, "IDX3 file of unsigned-byte images", err, errlen);
    if (rc < 0) return rc;
    if (h[1] == 0 || h[2] == 0 || h[3] == 0 || h[1] > INT32_MAX || (uint64_t)h[2] * h[3] > IDX_MAX_FEATURES)
        return psc_seterr(err, errlen, PSC_ECORRUPT, "%s: bad dimensions: %u images of %ux%u", data_file_path(f), h[1],
                          h[2], h[3]);
    data_file_t *lf = NULL;
    if ((rc = open_labels(data_file_path(f), &lf, err, errlen))) return rc;
    rc = read_header(lf, hl, 2, "IDX1", err, errlen);
    if (rc == 0) rc = check_magic(lf, hl[0], IDX_LABELS_MAGIC, "IDX1 file of unsigned-byte labels", err, errlen);
    if (rc == 0 && hl[1] != h[1])
        rc = psc_seterr(err, errlen, PSC_ECORRUPT, "%s has %u images but %s has %u labels", data_file_path(f), h[1],
                        data_file_path(lf), hl[1]);
    if (rc < 0) {
        data_file_close(lf);
        return rc;
    }
    idx_state_t *s = psc_xcalloc(1, sizeof *s);
    s->labels = lf;
    s->n = h[1];
    s->features = h[2] * h[3];
    s->pix = psc_xmalloc(s->features);
    data_file_set_state(f, s, idx_state_free);
    *num_dense = (int)s->features;
    return 0;
}

/* After the n records: trailing bytes in either file are a bad record. */
static int idx_end(data_file_t *f, idx_state_t *s, char *err, size_t errlen)
{
    s->done = s->n + 1;
    uint8_t b;
    data_file_t *files[2] = {f, s->labels};
    for (int i = 0; i < 2; i++) {
        int rc = data_file_read(files[i], &b, 1, err, errlen);
        if (rc < 0) return rc;
        if (rc == 1)
            return psc_seterr(err, errlen, PSC_ECORRUPT, "trailing data: %s holds more than the header's %u %s",
                              data_file_path(files[i]), s->n, i ? "labels" : "images");
    }
    return 0;
}

/* Example s->done's bytes into s->pix and *label: 1, 0 at the end, or an error. */
static int idx_read(data_file_t *f, idx_state_t *s, uint8_t *label, char *err, size_t errlen)
{
    if (s->done > s->n) return 0;
    if (s->done == s->n) return idx_end(f, s, err, errlen);
    data_file_mark_record(f);
    int rc = data_file_read(f, s->pix, s->features, err, errlen);
    data_file_t *bad = f;
    if (rc == 1) {
        bad = s->labels;
        rc = data_file_read(s->labels, label, 1, err, errlen);
    }
    if (rc == 1) {
        s->done++;
        return 1;
    }
    if (rc != 0 && rc != PSC_ECORRUPT) return rc;
    uint32_t got = s->done;
    s->done = s->n + 1; /* the file counts as read */
    return psc_seterr(err, errlen, PSC_ECORRUPT, "truncated: %s ends inside example %u of the header's %u",
                      data_file_path(bad), got, s->n);
}

static int idx_next(data_file_t *f, const psc_job_spec_t *spec, data_batch_t *b, char *err, size_t errlen)
{
    (void)spec;
    idx_state_t *s = data_file_state(f);
    uint8_t label = 0;
    int rc = idx_read(f, s, &label, err, errlen);
    if (rc != 1) return rc;
    PSC_ASSERT(b->num_dense == (int)s->features);
    data_batch_begin(b);
    float *row = b->dense + (size_t)b->n * (size_t)b->num_dense;
    for (uint32_t i = 0; i < s->features; i++) row[i] = (float)s->pix[i] * (1.0f / 255.0f);
    b->label[b->n] = (float)label;
    data_batch_commit(b);
    return 1;
}

static int idx_skip(data_file_t *f, char *err, size_t errlen)
{
    uint8_t label;
    return idx_read(f, data_file_state(f), &label, err, errlen);
}

const data_format_t data_format_idx = {.name = "idx", .text = 0, .next = idx_next, .skip = idx_skip, .open = idx_open};
