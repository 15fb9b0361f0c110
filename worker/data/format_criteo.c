/* format_criteo.c — Criteo's click-log TSV (the Kaggle Display Advertising and
 * Terabyte logs): one example per line, 40 TAB-separated fields
 *   label  I1 .. I13  C1 .. C26
 * label "0" or "1"; I* a decimal integer that fits int64 (may be negative) or
 * empty (missing: 0); C* 1 to 16 hex digits of either case (the key is their
 * value) or empty (missing: an empty bag). Dense column k-1 holds I_k, as
 * logf(1 + max(x, 0)) when the dense feature at that offset has the log1p
 * transform (criteo's always do), else as (float)x. Bag k-1 holds C_k.
 *
 * Parsing is the reader's hot path: one hand-written pass over the line takes
 * the common case (a table for the hex digits, no sscanf/strtol/memchr per
 * field); anything it does not take is parsed again field by field, which
 * either accepts it (a '+' sign, a 19-digit integer) or names the first
 * field that is wrong, after the field count. A line is checked whole before
 * anything goes into the batch, so a bad line leaves no trace.
 * An empty line is a bad record ("empty line"), wherever it is.
 */
#include "reader_internal.h"

#include "psc.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define CRITEO_FIELDS 40
#define CRITEO_DENSE 13
#define CRITEO_CAT 26

int data_criteo_check(const psc_job_spec_t *spec, char *err, size_t errlen)
{
    if (spec->num_dense != CRITEO_DENSE || spec->num_cat != CRITEO_CAT)
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "data.features: criteo has 13 dense (I1..I13) and 26 categorical features (C1..C26), "
                          "the spec %d and %d",
                          spec->num_dense, spec->num_cat);
    for (int j = 0; j < spec->num_features; j++) {
        const psc_feature_spec_t *ft = &spec->features[j];
        if (ft->role == PSC_FEATURE_DENSE &&
            (ft->length != 1 || ft->dense_offset < 0 || ft->dense_offset >= CRITEO_DENSE))
            return psc_seterr(err, errlen, PSC_ECONFIG,
                              "data.features[%d] (%s): a criteo dense feature is one column of 0..12, not %d at %d", j,
                              ft->name, ft->length, ft->dense_offset);
        if (ft->role == PSC_FEATURE_CATEGORICAL && (ft->cat_index < 0 || ft->cat_index >= CRITEO_CAT))
            return psc_seterr(err, errlen, PSC_ECONFIG,
                              "data.features[%d] (%s): a criteo categorical feature has an index of 0..25, not %d", j,
                              ft->name, ft->cat_index);
    }
    return 0;
}

/* "field 17 (C3): "xyz" is not hexadecimal" for field i (0-based) = p[0 .. len). */
static int bad_field(char *err, size_t errlen, int i, const char *p, size_t len, const char *what)
{
    char name[8], q[200];
    if (i == 0)
        snprintf(name, sizeof name, "label");
    else
        snprintf(name, sizeof name, "%c%d", i <= CRITEO_DENSE ? 'I' : 'C', i <= CRITEO_DENSE ? i : i - CRITEO_DENSE);
    data_quote(q, sizeof q, p, len);
    return psc_seterr(err, errlen, PSC_ECORRUPT, "field %d (%s): \"%s\" %s", i + 1, name, q, what);
}

/* A decimal integer with an optional sign: 0, -1 not an integer, -2 out of range. */
static int parse_i64(const char *p, const char *e, int64_t *out)
{
    int neg = 0;
    if (p < e && (*p == '-' || *p == '+')) neg = *p++ == '-';
    if (p == e) return -1;
    uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX, v = 0;
    int range = 0;
    for (; p < e; p++) {
        unsigned d = (unsigned)(unsigned char)*p - '0';
        if (d > 9) return -1;
        if (v > (limit - d) / 10)
            range = 1;
        else
            v = v * 10 + d;
    }
    if (range) return -2;
    *out = !neg ? (int64_t)v : v > (uint64_t)INT64_MAX ? INT64_MIN : -(int64_t)v;
    return 0;
}

/* 1 to 16 hex digits: 0, -1 not hexadecimal, -2 too long. */
static int parse_hex(const char *p, const char *e, uint64_t *out)
{
    uint64_t v = 0;
    for (const char *s = p; s < e; s++) {
        unsigned c = (unsigned char)*s, d = c - '0';
        if (d > 9) {
            d = (c | 0x20) - 'a';
            if (d > 5) return -1;
            d += 10;
        }
        v = v << 4 | d;
    }
    if (e - p > 16) return -2;
    *out = v;
    return 0;
}

/* Dense columns whose feature has the log1p transform, as a bit mask. */
static uint32_t log1p_columns(const psc_job_spec_t *spec)
{
    uint32_t mask = 0;
    for (int j = 0; j < spec->num_features; j++) {
        const psc_feature_spec_t *ft = &spec->features[j];
        if (ft->role == PSC_FEATURE_DENSE && ft->transform == PSC_TRANSFORM_LOG1P && ft->dense_offset >= 0 &&
            ft->dense_offset < CRITEO_DENSE)
            mask |= 1u << ft->dense_offset;
    }
    return mask;
}

/* One line's values, before the transform. */
typedef struct criteo_row {
    float label;
    int64_t ints[CRITEO_DENSE]; /* missing: 0, which every transform maps to 0 */
    uint64_t keys[CRITEO_CAT];
    uint32_t present; /* bit k: C(k+1) given */
} criteo_row_t;

/* hex digit -> its value + 1; 0 for anything else */
static const unsigned char hex1[256] = {
    ['0'] = 1,  ['1'] = 2,  ['2'] = 3,  ['3'] = 4,  ['4'] = 5,  ['5'] = 6,  ['6'] = 7,  ['7'] = 8,
    ['8'] = 9,  ['9'] = 10, ['a'] = 11, ['b'] = 12, ['c'] = 13, ['d'] = 14, ['e'] = 15, ['f'] = 16,
    ['A'] = 11, ['B'] = 12, ['C'] = 13, ['D'] = 14, ['E'] = 15, ['F'] = 16,
};

/* The common case in one pass over the line: every field well-formed, each
 * integer at most 18 digits (so it fits) with at most a '-'. Returns 0, or -1
 * for anything else, which careful_parse then decides. line[len] is NUL. */
static int fast_parse(const char *p, const char *end, criteo_row_t *row)
{
    if (end - p < 2 || (p[0] != '0' && p[0] != '1') || p[1] != '\t') return -1;
    row->label = (float)(p[0] - '0');
    p += 2;
    for (int k = 0; k < CRITEO_DENSE; k++) {
        if (*p == '\t') {
            row->ints[k] = 0;
            p++;
            continue;
        }
        int neg = *p == '-';
        p += neg;
        const char *s = p;
        uint64_t v = 0;
        for (unsigned d; (d = (unsigned)(unsigned char)*p - '0') <= 9; p++) v = v * 10 + d;
        if (p == s || p - s > 18 || *p != '\t') return -1;
        p++;
        row->ints[k] = neg ? -(int64_t)v : (int64_t)v;
    }
    row->present = 0;
    for (int k = 0; k < CRITEO_CAT; k++) {
        const char *s = p;
        uint64_t v = 0;
        for (unsigned d; (d = hex1[(unsigned char)*p]) != 0; p++) v = v << 4 | (d - 1);
        if (p - s > 16 || (k < CRITEO_CAT - 1 ? *p != '\t' : p != end)) return -1;
        if (p > s) {
            row->keys[k] = v;
            row->present |= 1u << k;
        }
        p++;
    }
    return 0;
}

/* Field by field, naming the first one that is wrong (after the count). */
static int careful_parse(const char *line, const char *end, criteo_row_t *row, char *err, size_t errlen)
{
    /* field i is start[i] .. start[i + 1] - 1 (its tab, or end + 1 after the last) */
    const char *start[CRITEO_FIELDS + 1], *p = line;
    int fields = 1;
    start[0] = line;
    for (const char *t; (t = memchr(p, '\t', (size_t)(end - p))) != NULL; p = t + 1) {
        if (fields < CRITEO_FIELDS) start[fields] = t + 1;
        fields++;
    }
    if (fields != CRITEO_FIELDS)
        return psc_seterr(err, errlen, PSC_ECORRUPT, "expected 40 tab-separated fields, got %d", fields);
    start[CRITEO_FIELDS] = end + 1;

    if (start[1] - start[0] != 2 || (line[0] != '0' && line[0] != '1'))
        return bad_field(err, errlen, 0, line, (size_t)(start[1] - start[0] - 1), "is not 0 or 1");
    row->label = (float)(line[0] - '0');
    for (int k = 0; k < CRITEO_DENSE; k++) {
        const char *s = start[1 + k], *e = start[2 + k] - 1;
        row->ints[k] = 0;
        int rc = s == e ? 0 : parse_i64(s, e, &row->ints[k]);
        if (rc < 0)
            return bad_field(err, errlen, 1 + k, s, (size_t)(e - s),
                             rc == -1 ? "is not an integer" : "is out of the 64-bit integer range");
    }
    row->present = 0;
    for (int k = 0; k < CRITEO_CAT; k++) {
        const char *s = start[14 + k], *e = start[15 + k] - 1;
        if (s == e) continue;
        int rc = parse_hex(s, e, &row->keys[k]);
        if (rc < 0)
            return bad_field(err, errlen, 14 + k, s, (size_t)(e - s),
                             rc == -1 ? "is not hexadecimal" : "has more than 16 hex digits");
        row->present |= 1u << k;
    }
    return 0;
}

static int criteo_next(data_file_t *f, const psc_job_spec_t *spec, data_batch_t *b, char *err, size_t errlen)
{
    PSC_ASSERT(spec->num_dense == CRITEO_DENSE && spec->num_cat == CRITEO_CAT);
    char *line;
    ssize_t len = data_file_line(f, &line, NULL, err, errlen);
    if (len == -1) return 0;
    if (len < 0) return (int)len;
    if (len == 0) return psc_seterr(err, errlen, PSC_ECORRUPT, "empty line");
    criteo_row_t row;
    row.label = 0.0f; /* set by either parse; gcc cannot tell */
    row.present = 0;
    if (fast_parse(line, line + len, &row) < 0) {
        int rc = careful_parse(line, line + len, &row, err, errlen);
        if (rc < 0) return rc;
    }

    data_batch_begin(b);
    b->label[b->n] = row.label;
    float *dense = b->dense + (size_t)b->n * CRITEO_DENSE;
    uint32_t logs = log1p_columns(spec);
    for (int k = 0; k < CRITEO_DENSE; k++) {
        int64_t x = row.ints[k];
        if (logs >> k & 1)
            dense[k] = x > 0 ? logf(1.0f + (float)x) : 0.0f;
        else
            dense[k] = (float)x;
    }
    for (int k = 0; k < CRITEO_CAT; k++) {
        if (row.present >> k & 1) data_batch_pair(b, row.keys[k], 1.0f);
        data_batch_close_bag(b);
    }
    data_batch_commit(b);
    return 1;
}

static int criteo_skip(data_file_t *f, char *err, size_t errlen)
{
    char *line;
    ssize_t len = data_file_line(f, &line, NULL, err, errlen);
    if (len == -1) return 0;
    return len < 0 ? (int)len : 1;
}

const data_format_t data_format_criteo = {.name = "criteo", .text = 1, .next = criteo_next, .skip = criteo_skip};
