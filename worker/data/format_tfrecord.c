/* format_tfrecord.c — TFRecord files of tf.Example protos, the "tfrecord" format
 * of the CTR reader (reader_internal.h).
 *
 * Framing (TensorFlow's io/record_writer): each record is
 *   uint64 length (little-endian) | uint32 masked CRC-32C of those 8 bytes |
 *   length data bytes | uint32 masked CRC-32C of the data,
 * masked = ((crc >> 15) | (crc << 17)) + 0xa282ead8. Both CRCs are checked.
 * A bad data CRC spoils one record: the next one starts right after it
 * (PSC_ECORRUPT, skippable). A bad length CRC, or a length over 64 MiB, loses
 * the framing, so the rest of the file cannot be found: PSC_EIO, with the file
 * and record named in the message (the reader adds them to bad records only,
 * as for the file layer's I/O errors). A file that
 * ends inside a record is a bad record (PSC_ECORRUPT) after which the file is
 * at its end. gzip (TFRecordWriter's GZIP option) is read by the file layer.
 *
 * Decoding: the data are a tensorflow.Example (proto/example.proto, protoc-c,
 * unpacked and freed here). Its features are matched by name to the spec's
 * data.features through an open-addressing table built per record from the
 * spec (cheap next to the unpack; no state kept between calls, so a format
 * shared by threads and specs needs no lock), in O(spec + example features).
 * Features the spec does not name are ignored; when a name repeats in the
 * map, the last entry wins (protobuf's map semantics). A Feature with no list
 * set reads as an empty list of the declared kind.
 *
 * Mapping onto the example (reader.h): the label is an int64 or float list
 * of one value, 0 or 1; a dense feature gives exactly `length` floats (int64
 * converted; each finite; log1p transform when the spec says) at its
 * dense_offset; a categorical feature gives a bag, in cat_index order, of
 * (value as uint64, 1) for an int64 list or (FNV-1a-64 of the bytes, 1) for a
 * bytes list: exactly `length` values when fixed, any number when variable
 * (length 0). An absent categorical feature is an empty bag, and so is an
 * empty list, even of a fixed-length one (TF's parsing and many writers treat
 * it as missing); an absent label or dense feature, or any value that breaks
 * these rules, is a bad record whose message names the feature.
 *
 * Threads: no shared state; each call uses only its arguments.
 */
#include "reader_internal.h"

#include "bytes.h"
#include "crc32c.h"
#include "example.pb-c.h"
#include "psc.h"
#include "table.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TFR_HEADER_BYTES 12                 /* length + its CRC */
#define TFR_MAX_RECORD ((uint64_t)64 << 20) /* longest record read */
#define TFR_STACK_BYTES 16384               /* records up to this size need no heap buffer */
#define TFR_SLOTS 256                       /* name table: a power of two >= 2 * PSC_MAX_FEATURES */

/* ---- framing ---- */

/* Starts the next record and reads its header. Returns 1 with *len, 0 at the
 * end of the file, PSC_ECORRUPT when the file ends inside the header, PSC_EIO
 * when the length cannot be trusted (the rest of the file is lost). */
static int frame_header(data_file_t *f, uint64_t *len, char *err, size_t errlen)
{
    uint8_t h[TFR_HEADER_BYTES];
    data_file_mark_record(f);
    int rc = data_file_read(f, h, sizeof h, err, errlen);
    if (rc == 0) return 0;
    if (rc == PSC_ECORRUPT)
        return psc_seterr(err, errlen, PSC_ECORRUPT, "truncated record: the file ends inside its 12-byte header");
    if (rc < 0) return rc;
    uint32_t stored = psc_le_get32(h + 8), computed = psc_crc32c_mask(psc_crc32c(0, h, 8));
    *len = psc_le_get64(h);
    /* the framing is lost: a stop, not a bad record, so the message names
     * the file itself (as the file layer's I/O errors do) */
    /* a ZLIB stream (TFRecordOptions' compression_type "ZLIB") starts with a
     * zlib header: 0x78 and a second byte making a multiple of 31 */
    if (stored != computed && data_file_record_offset(f) == 0 && h[0] == 0x78 && ((h[0] << 8) | h[1]) % 31 == 0)
        return psc_seterr(err, errlen, PSC_EIO,
                          "%s: looks compressed with ZLIB (TFRecordOptions compression_type \"ZLIB\"), which is not "
                          "supported: write it uncompressed or with GZIP",
                          data_file_path(f));
    if (stored != computed)
        return psc_seterr(err, errlen, PSC_EIO,
                          "%s: record %lld at byte %lld: length CRC mismatch (stored 0x%08x, computed 0x%08x): the "
                          "record's length cannot be trusted, so the rest of the file cannot be read",
                          data_file_path(f), (long long)data_file_record(f), (long long)data_file_record_offset(f),
                          stored, computed);
    if (*len > TFR_MAX_RECORD)
        return psc_seterr(err, errlen, PSC_EIO,
                          "%s: record %lld at byte %lld: a record of %llu bytes is over the %llu MiB limit; the rest "
                          "of the file is not read",
                          data_file_path(f), (long long)data_file_record(f), (long long)data_file_record_offset(f),
                          (unsigned long long)*len, (unsigned long long)(TFR_MAX_RECORD >> 20));
    return 1;
}

/* Reads the len data bytes (into data) and the data CRC, and checks it.
 * Returns 1, PSC_ECORRUPT (truncated, or a CRC mismatch: the file is then at
 * the next record), or PSC_EIO. */
static int frame_data(data_file_t *f, uint8_t *data, uint64_t len, char *err, size_t errlen)
{
    uint8_t c[4];
    int rc = len ? data_file_read(f, data, (size_t)len, err, errlen) : 1;
    if (rc == 1) rc = data_file_read(f, c, sizeof c, err, errlen);
    if (rc == 0 || rc == PSC_ECORRUPT)
        return psc_seterr(err, errlen, PSC_ECORRUPT,
                          "truncated record: the file ends inside its %llu data bytes or their CRC",
                          (unsigned long long)len);
    if (rc < 0) return rc;
    uint32_t stored = psc_le_get32(c), computed = psc_crc32c_mask(psc_crc32c(0, data, (size_t)len));
    if (stored != computed)
        return psc_seterr(err, errlen, PSC_ECORRUPT,
                          "data CRC mismatch (stored 0x%08x, computed 0x%08x) over %llu bytes", stored, computed,
                          (unsigned long long)len);
    return 1;
}

/* ---- the spec's features by name ---- */

typedef struct tfr_index {
    int16_t slot[TFR_SLOTS];       /* spec feature index + 1 by name hash; 0 empty */
    int16_t cat[PSC_MAX_FEATURES]; /* cat_index -> spec feature index */
} tfr_index_t;

static const char *kind_name(enum psc_feature_kind k)
{
    return k == PSC_FEATURE_INT64 ? "int64" : k == PSC_FEATURE_FLOAT ? "float" : "bytes";
}

/* Checks one spec feature against the rules this parser relies on (the job
 * spec parser enforces them; a hand-made spec may not). */
static int index_check(const psc_job_spec_t *spec, const psc_feature_spec_t *fs, char *err, size_t errlen)
{
    int bad_kind = (fs->role == PSC_FEATURE_CATEGORICAL) ? fs->kind == PSC_FEATURE_FLOAT
                                                         : fs->kind == PSC_FEATURE_BYTES;
    if (bad_kind)
        return psc_seterr(err, errlen, PSC_ECONFIG, "data.features '%s': a %s feature cannot be a %s list", fs->name,
                          fs->role == PSC_FEATURE_CATEGORICAL ? "categorical" : "label or dense", kind_name(fs->kind));
    if (fs->role == PSC_FEATURE_DENSE &&
        (fs->length <= 0 || fs->dense_offset < 0 || fs->dense_offset > spec->num_dense - fs->length))
        return psc_seterr(err, errlen, PSC_ECONFIG, "data.features '%s': dense columns %d+%d outside 0..%d", fs->name,
                          fs->dense_offset, fs->length, spec->num_dense);
    if (fs->role == PSC_FEATURE_CATEGORICAL && (fs->length < 0 || fs->cat_index < 0 || fs->cat_index >= spec->num_cat))
        return psc_seterr(err, errlen, PSC_ECONFIG, "data.features '%s': cat_index %d outside 0..%d or length %d < 0",
                          fs->name, fs->cat_index, spec->num_cat - 1, fs->length);
    return 0;
}

static int index_build(const psc_job_spec_t *spec, tfr_index_t *ix, char *err, size_t errlen)
{
    if (spec->num_features < 0 || spec->num_features > PSC_MAX_FEATURES || spec->num_cat < 0 ||
        spec->num_cat > spec->num_features || spec->num_dense < 0)
        return psc_seterr(err, errlen, PSC_ECONFIG, "data.features: %d features (%d categorical), at most %d",
                          spec->num_features, spec->num_cat, PSC_MAX_FEATURES);
    memset(ix, 0, sizeof *ix);
    for (int c = 0; c < spec->num_cat; c++) ix->cat[c] = -1;
    for (int i = 0; i < spec->num_features; i++) {
        const psc_feature_spec_t *fs = &spec->features[i];
        int rc = index_check(spec, fs, err, errlen);
        if (rc) return rc;
        if (fs->role == PSC_FEATURE_CATEGORICAL) {
            if (ix->cat[fs->cat_index] >= 0)
                return psc_seterr(err, errlen, PSC_ECONFIG, "data.features '%s': cat_index %d taken twice", fs->name,
                                  fs->cat_index);
            ix->cat[fs->cat_index] = (int16_t)i;
        }
        size_t h = (size_t)psc_fnv1a64(fs->name, strlen(fs->name)) & (TFR_SLOTS - 1);
        while (ix->slot[h]) h = (h + 1) & (TFR_SLOTS - 1);
        ix->slot[h] = (int16_t)(i + 1);
    }
    for (int c = 0; c < spec->num_cat; c++)
        if (ix->cat[c] < 0)
            return psc_seterr(err, errlen, PSC_ECONFIG, "data.features: no feature has cat_index %d", c);
    return 0;
}

/* The spec feature named `name`, or -1. */
static int index_find(const tfr_index_t *ix, const psc_job_spec_t *spec, const char *name)
{
    size_t h = (size_t)psc_fnv1a64(name, strlen(name)) & (TFR_SLOTS - 1);
    for (; ix->slot[h]; h = (h + 1) & (TFR_SLOTS - 1))
        if (strcmp(spec->features[ix->slot[h] - 1].name, name) == 0) return ix->slot[h] - 1;
    return -1;
}

/* ---- one Example ---- */

/* A feature's values, of the kind the spec declares. */
typedef struct tfr_list {
    size_t n;
    const int64_t *i64;
    const float *f32;
    const ProtobufCBinaryData *bytes;
} tfr_list_t;

static const char *case_name(Tensorflow__Feature__KindCase k)
{
    return k == TENSORFLOW__FEATURE__KIND_INT64_LIST   ? "int64_list"
           : k == TENSORFLOW__FEATURE__KIND_FLOAT_LIST ? "float_list"
                                                       : "bytes_list";
}

/* The values of feat (present) as fs's kind; a wrong list kind is a bad record. */
static int list_of(const psc_feature_spec_t *fs, const Tensorflow__Feature *feat, tfr_list_t *l, char *err,
                   size_t errlen)
{
    static const Tensorflow__Feature__KindCase want[] = {
        [PSC_FEATURE_INT64] = TENSORFLOW__FEATURE__KIND_INT64_LIST,
        [PSC_FEATURE_FLOAT] = TENSORFLOW__FEATURE__KIND_FLOAT_LIST,
        [PSC_FEATURE_BYTES] = TENSORFLOW__FEATURE__KIND_BYTES_LIST,
    };
    memset(l, 0, sizeof *l);
    if (feat->kind_case == TENSORFLOW__FEATURE__KIND__NOT_SET) return 0; /* no list: no values */
    if (feat->kind_case != want[fs->kind])
        return psc_seterr(err, errlen, PSC_ECORRUPT, "feature '%s' is a %s, but data.features declares it %s", fs->name,
                          case_name(feat->kind_case), kind_name(fs->kind));
    if (fs->kind == PSC_FEATURE_INT64 && feat->int64_list) {
        l->n = feat->int64_list->n_value;
        l->i64 = feat->int64_list->value;
    } else if (fs->kind == PSC_FEATURE_FLOAT && feat->float_list) {
        l->n = feat->float_list->n_value;
        l->f32 = feat->float_list->value;
    } else if (fs->kind == PSC_FEATURE_BYTES && feat->bytes_list) {
        l->n = feat->bytes_list->n_value;
        l->bytes = feat->bytes_list->value;
    }
    return 0;
}

static int put_label(const psc_feature_spec_t *fs, const tfr_list_t *l, data_batch_t *b, char *err, size_t errlen)
{
    if (l->n != 1)
        return psc_seterr(err, errlen, PSC_ECORRUPT, "label '%s' has %zu values, expected 1", fs->name, l->n);
    if (fs->kind == PSC_FEATURE_INT64 && l->i64[0] != 0 && l->i64[0] != 1)
        return psc_seterr(err, errlen, PSC_ECORRUPT, "label '%s' is %lld, expected 0 or 1", fs->name,
                          (long long)l->i64[0]);
    if (fs->kind == PSC_FEATURE_FLOAT && l->f32[0] != 0.0f && l->f32[0] != 1.0f)
        return psc_seterr(err, errlen, PSC_ECORRUPT, "label '%s' is %g, expected 0 or 1", fs->name, (double)l->f32[0]);
    b->label[b->n] = (fs->kind == PSC_FEATURE_INT64 ? l->i64[0] != 0 : l->f32[0] != 0.0f) ? 1.0f : 0.0f;
    return 0;
}

static int put_dense(const psc_feature_spec_t *fs, const tfr_list_t *l, data_batch_t *b, char *err, size_t errlen)
{
    if (l->n != (size_t)fs->length)
        return psc_seterr(err, errlen, PSC_ECORRUPT, "dense feature '%s' has %zu values, expected %d", fs->name, l->n,
                          fs->length);
    float *row = b->dense + (size_t)b->n * (size_t)b->num_dense + fs->dense_offset;
    for (size_t k = 0; k < l->n; k++) {
        float x = fs->kind == PSC_FEATURE_INT64 ? (float)l->i64[k] : l->f32[k];
        if (!isfinite(x))
            return psc_seterr(err, errlen, PSC_ECORRUPT, "dense feature '%s' value %zu is %g, not a finite number",
                              fs->name, k, (double)x);
        if (fs->transform == PSC_TRANSFORM_LOG1P) x = logf(1.0f + fmaxf(x, 0.0f));
        row[k] = x;
    }
    return 0;
}

/* A categorical feature's ids as one bag. An empty list is an empty bag, as
 * an absent feature is (TF's parsing and many writers treat both as missing),
 * whatever the feature's declared length. */
static int put_bag(const psc_feature_spec_t *fs, const tfr_list_t *l, data_batch_t *b, char *err, size_t errlen)
{
    if (fs->length > 0 && l->n != 0 && l->n != (size_t)fs->length)
        return psc_seterr(err, errlen, PSC_ECORRUPT, "categorical feature '%s' has %zu values, expected %d", fs->name,
                          l->n, fs->length);
    for (size_t k = 0; k < l->n; k++) {
        uint64_t key = fs->kind == PSC_FEATURE_INT64 ? (uint64_t)l->i64[k]
                                                     : psc_fnv1a64(l->bytes[k].data, l->bytes[k].len);
        data_batch_pair(b, key, 1.0f);
    }
    data_batch_close_bag(b);
    return 0;
}

/* Writes the started example b->n from found[] (the Example's feature for
 * each spec feature, NULL when absent). */
static int fill(const psc_job_spec_t *spec, const tfr_index_t *ix, const Tensorflow__Feature *const *found,
                data_batch_t *b, char *err, size_t errlen)
{
    tfr_list_t l;
    int rc;
    b->label[b->n] = 0.0f;
    for (int i = 0; i < spec->num_features; i++) {
        const psc_feature_spec_t *fs = &spec->features[i];
        if (fs->role == PSC_FEATURE_CATEGORICAL) continue;
        if (!found[i])
            return psc_seterr(err, errlen, PSC_ECORRUPT, "%s feature '%s' is missing",
                              fs->role == PSC_FEATURE_LABEL ? "label" : "dense", fs->name);
        if ((rc = list_of(fs, found[i], &l, err, errlen))) return rc;
        rc = fs->role == PSC_FEATURE_LABEL ? put_label(fs, &l, b, err, errlen) : put_dense(fs, &l, b, err, errlen);
        if (rc) return rc;
    }
    for (int c = 0; c < spec->num_cat; c++) { /* bags in cat_index order */
        int i = ix->cat[c];
        const psc_feature_spec_t *fs = &spec->features[i];
        if (!found[i]) {
            data_batch_close_bag(b); /* absent: an empty bag */
            continue;
        }
        if ((rc = list_of(fs, found[i], &l, err, errlen))) return rc;
        if ((rc = put_bag(fs, &l, b, err, errlen))) return rc;
    }
    return 0;
}

/* Decodes one record's data as an Example and appends it to b. Returns 1, or
 * PSC_ECORRUPT / PSC_ECONFIG with nothing appended. */
static int decode(const uint8_t *data, size_t len, const psc_job_spec_t *spec, data_batch_t *b, char *err,
                  size_t errlen)
{
    PSC_ASSERT(b->num_dense == spec->num_dense && b->num_cat == spec->num_cat); /* data_batch_reset's widths */
    tfr_index_t ix;
    int rc = index_build(spec, &ix, err, errlen);
    if (rc) return rc;
    Tensorflow__Example *ex = tensorflow__example__unpack(NULL, len, data);
    if (!ex)
        return psc_seterr(err, errlen, PSC_ECORRUPT, "not a tf.Example: its %zu bytes do not decode as the protobuf",
                          len);
    static const Tensorflow__Feature empty = TENSORFLOW__FEATURE__INIT; /* an entry without a value */
    const Tensorflow__Feature *found[PSC_MAX_FEATURES] = {0};
    size_t n = ex->features ? ex->features->n_feature : 0;
    for (size_t e = 0; e < n; e++) {
        const Tensorflow__Features__FeatureEntry *ent = ex->features->feature[e];
        int i = ent->key ? index_find(&ix, spec, ent->key) : -1;
        if (i < 0) continue;                         /* not in the spec: ignored */
        found[i] = ent->value ? ent->value : &empty; /* a later entry of one name wins */
    }
    data_batch_begin(b);
    rc = fill(spec, &ix, found, b, err, errlen);
    if (rc == 0) {
        data_batch_commit(b);
        rc = 1;
    } else {
        data_batch_rollback(b);
    }
    tensorflow__example__free_unpacked(ex, NULL);
    return rc;
}

/* ---- the format ---- */

static int tfr_next(data_file_t *f, const psc_job_spec_t *spec, data_batch_t *b, char *err, size_t errlen)
{
    uint64_t len;
    int rc = frame_header(f, &len, err, errlen);
    if (rc <= 0) return rc;
    uint8_t stack[TFR_STACK_BYTES];
    uint8_t *data = len <= sizeof stack ? stack : psc_xmalloc((size_t)len);
    rc = frame_data(f, data, len, err, errlen);
    if (rc == 1) rc = decode(data, (size_t)len, spec, b, err, errlen);
    if (data != stack) free(data);
    return rc;
}

/* Record sharding: passes over a record, its length CRC checked (the framing
 * depends on it) and its data left to the replica that reads it. */
static int tfr_skip(data_file_t *f, char *err, size_t errlen)
{
    uint64_t len;
    int rc = frame_header(f, &len, err, errlen);
    if (rc <= 0) return rc;
    uint8_t buf[TFR_STACK_BYTES];
    for (uint64_t left = len + 4; left > 0;) { /* the data and their CRC */
        size_t n = left < sizeof buf ? (size_t)left : sizeof buf;
        rc = data_file_read(f, buf, n, err, errlen);
        if (rc == 0 || rc == PSC_ECORRUPT)
            return psc_seterr(err, errlen, PSC_ECORRUPT,
                              "truncated record: the file ends inside its %llu data bytes or their CRC",
                              (unsigned long long)len);
        if (rc < 0) return rc;
        left -= n;
    }
    return 1;
}

const data_format_t data_format_tfrecord = {
    .name = "tfrecord",
    .text = 0,
    .next = tfr_next,
    .skip = tfr_skip,
};
