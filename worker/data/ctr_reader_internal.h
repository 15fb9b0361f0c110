/* ctr_reader_internal.h — between ctr_reader.c (files, shards, epochs,
 * batches, bad-record counting) and the formats' record parsers
 * (ctr_criteo.c, ctr_libsvm.c, ctr_tfrecord.c). Not for other modules.
 */
#ifndef PSC_CTR_READER_INTERNAL_H
#define PSC_CTR_READER_INTERNAL_H

#include "ctr_reader.h"
#include "psc.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ---- one file, plain or gzip (zlib's gzread reads both), read as a stream ---- */
typedef struct ctr_file ctr_file_t;
int ctr_file_open(const char *path, ctr_file_t **out, char *err, size_t errlen);
/* The same over len bytes in memory (tests, fuzzers; never gzip): data must
 * outlive f; `name` stands for the path in messages. */
int ctr_file_open_mem(const void *data, size_t len, const char *name, ctr_file_t **out, char *err, size_t errlen);
void ctr_file_close(ctr_file_t *f); /* NULL ok */
const char *ctr_file_path(const ctr_file_t *f);
/* Text: the next line without its '\n' (and '\r'), NUL-terminated, valid until
 * the next call; *lineno its 1-based number. Returns its length, -1 at the end
 * of the file, or a negative PSC_E* code < -1 (I/O; err set). A last line
 * without '\n' is a line. Lines of any length. */
ssize_t ctr_file_line(ctr_file_t *f, char **line, int64_t *lineno, char *err, size_t errlen);
/* Binary: exactly n bytes into buf. Returns 1, 0 at the end of the file when
 * no byte was left, PSC_ECORRUPT when it ends inside them ("truncated"), or
 * PSC_EIO. */
int ctr_file_read(ctr_file_t *f, void *buf, size_t n, char *err, size_t errlen);
/* Bytes consumed so far (of the uncompressed stream). */
int64_t ctr_file_offset(const ctr_file_t *f);
/* The record last started, for error messages: text, the line number
 * ctr_file_line gave; binary, the count of ctr_file_mark_record calls
 * (1-based) and the offset at the last one. */
int64_t ctr_file_record(const ctr_file_t *f);
int64_t ctr_file_record_offset(const ctr_file_t *f);
/* Binary formats: a record starts at the current offset. */
void ctr_file_mark_record(ctr_file_t *f);

/* Writes p[0 .. len) into dst for a message, to go between quotes: at most
 * 40 bytes of it (then "..."), bytes outside printable ASCII, '"' and '\\'
 * as \xHH. */
void ctr_quote(char *dst, size_t dstlen, const char *p, size_t len);

/* ---- building a batch, example by example (ctr_batch.c) ---- */
/* Empties b for examples of num_dense floats and num_cat bags (n = nnz = 0,
 * off[0] = 0), keeping its arrays when the widths are unchanged. */
void ctr_batch_reset(ctr_batch_t *b, int num_dense, int num_cat);
/* Starts example b->n (grows the arrays to hold it); its dense row and label
 * are then written at b->dense + b->n * b->num_dense and b->label[b->n]
 * (the dense row starts zeroed). */
void ctr_batch_begin(ctr_batch_t *b);
/* Adds a (key, weight) pair to the bag being built (feature order: every
 * pair of feature 0, close, every pair of feature 1, close, ...). Inline: the
 * parsers call it for every value. */
void ctr_batch_grow_pairs(ctr_batch_t *b); /* its slow part */
static inline void ctr_batch_pair(ctr_batch_t *b, uint64_t key, float weight)
{
    PSC_ASSERT(b->bags < b->num_cat);
    if (b->nnz == b->cap_nnz) ctr_batch_grow_pairs(b);
    b->keys[b->nnz] = key;
    b->weights[b->nnz] = weight;
    b->nnz++;
}
/* Closes the current feature's bag (an empty bag: close without pairs). */
static inline void ctr_batch_close_bag(ctr_batch_t *b)
{
    PSC_ASSERT(b->bags < b->num_cat);
    b->off[(size_t)b->n * (size_t)b->num_cat + (size_t)++b->bags] = b->nnz;
}
/* Ends the example: every one of the num_cat bags must be closed. */
void ctr_batch_commit(ctr_batch_t *b);
/* Drops the example being built (a bad record). */
void ctr_batch_rollback(ctr_batch_t *b);

/* ---- a format's record parser ---- */
typedef struct ctr_format {
    const char *name; /* "criteo", "libsvm", "tfrecord" */
    int text;         /* 1: records are lines (errors name FILE:LINE); 0: tfrecord (FILE: record K at byte B) */
    /* Reads the next record of f and appends it to b as one example
     * (begin ... commit). Returns 1 appended, 0 at the end of the file,
     * PSC_ECORRUPT for a bad record (err says what is wrong, without the file
     * name; the example is rolled back; f is positioned after the record when
     * its framing allows, else the file is abandoned: return PSC_EIO then),
     * or another negative code. */
    int (*next)(ctr_file_t *f, const psc_job_spec_t *spec, ctr_batch_t *b, char *err, size_t errlen);
    /* Skips a record without parsing it (record sharding): 1, 0 at the end,
     * or a negative code. */
    int (*skip)(ctr_file_t *f, char *err, size_t errlen);
} ctr_format_t;

/* The spec a text format needs (the reader checks it at open, a record
 * parser asserts it): criteo num_dense 13 and num_cat 26, each dense feature
 * one column; libsvm num_dense 0 and num_cat 1. 0 or PSC_ECONFIG. */
int ctr_criteo_check(const psc_job_spec_t *spec, char *err, size_t errlen);
int ctr_libsvm_check(const psc_job_spec_t *spec, char *err, size_t errlen);

extern const ctr_format_t ctr_format_criteo;
extern const ctr_format_t ctr_format_libsvm;
extern const ctr_format_t ctr_format_tfrecord;

#endif
