/* reader_internal.h — between reader.c (files, shards, epochs,
 * batches, bad-record counting) and the formats' record parsers
 * (format_criteo.c, format_libsvm.c, format_tfrecord.c, format_idx.c). Not for
 * other modules.
 */
#ifndef PSC_DATA_READER_INTERNAL_H
#define PSC_DATA_READER_INTERNAL_H

#include "reader.h"
#include "psc.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ---- one file, plain or gzip (zlib's gzread reads both), read as a stream ---- */
typedef struct data_file data_file_t;
int data_file_open(const char *path, data_file_t **out, char *err, size_t errlen);
/* The same over len bytes in memory (tests, fuzzers; never gzip): data must
 * outlive f; `name` stands for the path in messages. */
int data_file_open_mem(const void *data, size_t len, const char *name, data_file_t **out, char *err, size_t errlen);
void data_file_close(data_file_t *f); /* NULL ok */
const char *data_file_path(const data_file_t *f);
/* Text: the next line without its '\n' (and '\r'), NUL-terminated, valid until
 * the next call; *lineno its 1-based number. Returns its length, -1 at the end
 * of the file, or a negative PSC_E* code < -1 (I/O; err set). A last line
 * without '\n' is a line. Lines of any length. */
ssize_t data_file_line(data_file_t *f, char **line, int64_t *lineno, char *err, size_t errlen);
/* Binary: exactly n bytes into buf. Returns 1, 0 at the end of the file when
 * no byte was left, PSC_ECORRUPT when it ends inside them ("truncated"), or
 * PSC_EIO. */
int data_file_read(data_file_t *f, void *buf, size_t n, char *err, size_t errlen);
/* 1 when no byte is left to read (it reads ahead to know), 0 when some is,
 * or PSC_EIO. */
int data_file_at_end(data_file_t *f, char *err, size_t errlen);
/* Bytes consumed so far (of the uncompressed stream). */
int64_t data_file_offset(const data_file_t *f);
/* The record last started, for error messages: text, the line number
 * data_file_line gave; binary, the count of data_file_mark_record calls
 * (1-based) and the offset at the last one. */
int64_t data_file_record(const data_file_t *f);
int64_t data_file_record_offset(const data_file_t *f);
/* Binary formats: a record starts at the current offset. */
void data_file_mark_record(data_file_t *f);
/* A format's state for this file (its header, a companion file), freed by
 * free_fn at data_file_close; NULL until set. */
void data_file_set_state(data_file_t *f, void *state, void (*free_fn)(void *));
void *data_file_state(const data_file_t *f);

/* Writes p[0 .. len) into dst for a message, to go between quotes: at most
 * 40 bytes of it (then "..."), bytes outside printable ASCII, '"' and '\\'
 * as \xHH. */
void data_quote(char *dst, size_t dstlen, const char *p, size_t len);

/* ---- building a batch, example by example (data_batch.c) ---- */
/* Empties b for examples of num_dense floats and num_cat bags (n = nnz = 0,
 * off[0] = 0), keeping its arrays when the widths are unchanged. */
void data_batch_reset(data_batch_t *b, int num_dense, int num_cat);
/* Starts example b->n (grows the arrays to hold it); its dense row and label
 * are then written at b->dense + b->n * b->num_dense and b->label[b->n]
 * (the dense row starts zeroed). */
void data_batch_begin(data_batch_t *b);
/* Adds a (key, weight) pair to the bag being built (feature order: every
 * pair of feature 0, close, every pair of feature 1, close, ...). Inline: the
 * parsers call it for every value. */
void data_batch_grow_pairs(data_batch_t *b); /* its slow part */
static inline void data_batch_pair(data_batch_t *b, uint64_t key, float weight)
{
    PSC_ASSERT(b->bags < b->num_cat);
    if (b->nnz == b->cap_nnz) data_batch_grow_pairs(b);
    b->keys[b->nnz] = key;
    b->weights[b->nnz] = weight;
    b->nnz++;
}
/* Closes the current feature's bag (an empty bag: close without pairs). */
static inline void data_batch_close_bag(data_batch_t *b)
{
    PSC_ASSERT(b->bags < b->num_cat);
    b->off[(size_t)b->n * (size_t)b->num_cat + (size_t)++b->bags] = b->nnz;
}
/* Ends the example: every one of the num_cat bags must be closed. */
void data_batch_commit(data_batch_t *b);
/* Drops the example being built (a bad record). */
void data_batch_rollback(data_batch_t *b);

/* ---- a format's record parser ---- */
typedef struct data_format {
    const char *name; /* "criteo", "libsvm", "tfrecord", "idx" */
    int text;         /* 1: records are lines (errors name FILE:LINE); 0: binary (FILE: record K at byte B) */
    /* Reads the next record of f and appends it to b as one example
     * (begin ... commit). Returns 1 appended, 0 at the end of the file,
     * PSC_ECORRUPT for a bad record (err says what is wrong, without the file
     * name; the example is rolled back; f is positioned after the record when
     * its framing allows, else the file is abandoned: return PSC_EIO then),
     * or another negative code. */
    int (*next)(data_file_t *f, const psc_job_spec_t *spec, data_batch_t *b, char *err, size_t errlen);
    /* Skips a record without parsing it (record sharding): 1, 0 at the end,
     * or a negative code. */
    int (*skip)(data_file_t *f, char *err, size_t errlen);
    /* Optional, for files with a header (idx): reads it right after the file
     * is opened (and opens companion files, kept with data_file_set_state),
     * and gives *num_dense, the floats of an example's dense row, which then
     * comes from the files instead of the spec (every file of a data set must
     * agree). 0, or an error whose message starts with the file it names. */
    int (*open)(data_file_t *f, int *num_dense, char *err, size_t errlen);
} data_format_t;

/* The spec a text format needs (the reader checks it at open, a record
 * parser asserts it): criteo num_dense 13 and num_cat 26, each dense feature
 * one column; libsvm num_dense 0 and num_cat 1. 0 or PSC_ECONFIG. */
int data_criteo_check(const psc_job_spec_t *spec, char *err, size_t errlen);
int data_libsvm_check(const psc_job_spec_t *spec, char *err, size_t errlen);

extern const data_format_t data_format_criteo;
extern const data_format_t data_format_libsvm;
extern const data_format_t data_format_tfrecord;
extern const data_format_t data_format_idx;

/* idx: the images file of a data set's prefix, <prefix>-images-idx3-ubyte.gz
 * when it exists, else <prefix>-images-idx3-ubyte, into dst. */
void data_idx_images_path(const char *prefix, char *dst, size_t dstlen);

#endif
