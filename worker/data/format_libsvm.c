/* format_libsvm.c — LIBSVM's (and ps-lite's) sparse text format:
 *   label idx:val idx:val ...   # an optional comment
 * separated by spaces or tabs. The label is 0 or 1, or -1 / +1 (-1 is 0),
 * written as an integer or with a fraction of zeros ("1.0", "-1.0", "0.0");
 * idx a non-negative decimal integer (uint64); val a finite float (strtof).
 * The pairs become the one categorical feature's bag ("features"): (idx, val)
 * in line order, repeats kept. A line that is only a label gives an empty
 * bag; an empty line is a bad record. A comment line (a '#' after nothing but
 * spaces, svmlight's) is skipped: no record, for record sharding either.
 *
 * Parsing walks the line once by hand; a value goes through strtof only
 * when it is not a short plain decimal (fast_float: the same float, faster).
 */
#include "reader_internal.h"

#include "psc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int data_libsvm_check(const psc_job_spec_t *spec, char *err, size_t errlen)
{
    if (spec->num_dense != 0 || spec->num_cat != 1)
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "data.features: libsvm has one categorical feature (\"features\") and no dense one, "
                          "the spec %d dense and %d categorical",
                          spec->num_dense, spec->num_cat);
    return 0;
}

static int is_space(char c) { return c == ' ' || c == '\t'; }

/* The label token: [+-]?digits(.digits*)? worth -1, 0 or 1. 0 or -1. */
static int parse_label(const char *p, const char *e, float *label)
{
    const char *s = p;
    if (s < e && (*s == '+' || *s == '-')) s++;
    const char *digits = s;
    while (s < e && *s >= '0' && *s <= '9') s++;
    if (s == digits) return -1;
    if (s < e && *s == '.')
        for (s++; s < e && *s >= '0' && *s <= '9'; s++) {}
    if (s != e) return -1;
    double v = strtod(p, NULL); /* stops at the whitespace or NUL after the token */
    if (v != 1.0 && v != 0.0 && v != -1.0) return -1;
    *label = v == 1.0 ? 1.0f : 0.0f;
    return 0;
}

/* A plain decimal [+-]?digits[.digits] whose digits, read as one integer m,
 * are at most 2^24, with k <= 10 of them after the point: m and 10^k are
 * exact floats, so the one correctly rounded division m / 10^k is exactly
 * strtof's answer (Clinger's fast path). 0, or -1 for anything else, which
 * strtof then reads. */
static int fast_float(const char *p, const char *e, float *out)
{
    static const float pow10[] = {1e0f, 1e1f, 1e2f, 1e3f, 1e4f, 1e5f, 1e6f, 1e7f, 1e8f, 1e9f, 1e10f};
    int neg = p < e && *p == '-';
    if (p < e && (*p == '-' || *p == '+')) p++;
    uint64_t m = 0;
    int digits = 0, frac = -1;
    for (; p < e; p++) {
        unsigned d = (unsigned)(unsigned char)*p - '0';
        if (d <= 9) {
            if (++digits > 18) return -1;
            m = m * 10 + d;
            if (frac >= 0) frac++;
        } else if (*p == '.' && frac < 0) {
            frac = 0;
        } else {
            return -1;
        }
    }
    if (digits == 0 || m > (1u << 24) || frac > 10) return -1;
    float v = (float)m / pow10[frac > 0 ? frac : 0];
    *out = neg ? -v : v;
    return 0;
}

static int bad_pair(char *err, size_t errlen, int i, const char *p, const char *e, const char *what)
{
    char q[200];
    data_quote(q, sizeof q, p, (size_t)(e - p));
    return psc_seterr(err, errlen, PSC_ECORRUPT, "pair %d \"%s\": %s", i, q, what);
}

/* Appends the pairs of line p .. e (NUL at e) to the bag being built. */
static int parse_pairs(data_batch_t *b, char *p, char *e, char *err, size_t errlen)
{
    for (int i = 1;; i++) {
        while (p < e && is_space(*p)) p++;
        if (p == e) return 0;
        char *q = p;
        while (q < e && !is_space(*q)) q++;
        char *colon = memchr(p, ':', (size_t)(q - p));
        if (!colon) return bad_pair(err, errlen, i, p, q, "no ':' between index and value");
        if (colon == p) return bad_pair(err, errlen, i, p, q, "index is not a non-negative integer");
        uint64_t idx = 0;
        for (const char *s = p; s < colon; s++) {
            unsigned d = (unsigned)(unsigned char)*s - '0';
            if (d > 9) return bad_pair(err, errlen, i, p, q, "index is not a non-negative integer");
            if (idx > (UINT64_MAX - d) / 10) return bad_pair(err, errlen, i, p, q, "index does not fit in 64 bits");
            idx = idx * 10 + d;
        }
        float val;
        if (fast_float(colon + 1, q, &val) < 0) {
            char *vend = NULL;
            val = colon + 1 < q ? strtof(colon + 1, &vend) : 0.0f;
            if (vend != q) return bad_pair(err, errlen, i, p, q, "value is not a number");
        }
        if (!isfinite(val)) return bad_pair(err, errlen, i, p, q, "value is not finite");
        data_batch_pair(b, idx, val);
        p = q;
    }
}

/* The next line that is not a comment line (a '#' after nothing but spaces:
 * svmlight's comments, as sklearn's dump_svmlight_file(comment=...) writes
 * them); a comment line is no record, for record sharding too. As
 * data_file_line: its length, -1 at the end, or an error. */
static ssize_t record_line(data_file_t *f, char **line, char *err, size_t errlen)
{
    for (;;) {
        ssize_t len = data_file_line(f, line, NULL, err, errlen);
        if (len < 0) return len;
        const char *p = *line, *e = *line + len;
        while (p < e && is_space(*p)) p++;
        if (p == e || *p != '#') return len;
    }
}

static int libsvm_next(data_file_t *f, const psc_job_spec_t *spec, data_batch_t *b, char *err, size_t errlen)
{
    PSC_ASSERT(spec->num_cat == 1 && spec->num_dense == 0);
    char *line;
    ssize_t len = record_line(f, &line, err, errlen);
    if (len == -1) return 0;
    if (len < 0) return (int)len;
    char *hash = memchr(line, '#', (size_t)len), *e = hash ? hash : line + len;
    *e = '\0'; /* the comment goes; strtof stops at it */
    char *p = line;
    while (p < e && is_space(*p)) p++;
    if (p == e) return psc_seterr(err, errlen, PSC_ECORRUPT, "empty line");
    char *q = p;
    while (q < e && !is_space(*q)) q++;
    float label;
    if (parse_label(p, q, &label) < 0) {
        char lq[200];
        data_quote(lq, sizeof lq, p, (size_t)(q - p));
        return psc_seterr(err, errlen, PSC_ECORRUPT, "label \"%s\" is not 0, 1, -1 or +1", lq);
    }
    data_batch_begin(b);
    b->label[b->n] = label;
    int rc = parse_pairs(b, q, e, err, errlen);
    if (rc < 0) {
        data_batch_rollback(b);
        return rc;
    }
    data_batch_close_bag(b);
    data_batch_commit(b);
    return 1;
}

static int libsvm_skip(data_file_t *f, char *err, size_t errlen)
{
    char *line;
    ssize_t len = record_line(f, &line, err, errlen);
    if (len == -1) return 0;
    return len < 0 ? (int)len : 1;
}

const data_format_t data_format_libsvm = {.name = "libsvm", .text = 1, .next = libsvm_next, .skip = libsvm_skip};
