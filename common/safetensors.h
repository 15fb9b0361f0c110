/* safetensors.h — reads a safetensors file (the format psctl export writes,
 * export.h; https://github.com/huggingface/safetensors):
 *
 *   u64 little-endian N | N bytes of JSON header | byte buffer
 *
 * The header is one JSON object: "__metadata__" (optional, an object of
 * strings) and one entry per tensor, {"dtype": D, "shape": [..],
 * "data_offsets": [begin, end]}, offsets relative to the byte buffer. psc
 * reads the dtypes it writes, F32 and I64 (little-endian); a tensor of any
 * other dtype is refused by name. Checks, each a PSC_ECORRUPT naming the
 * problem (and the tensor): the file holds 8 + N bytes at least, N at most
 * PSC_ST_MAX_HEADER; the header is a JSON object; every entry has a known
 * dtype, a shape of at most PSC_MAX_RANK non-negative sizes, and offsets with
 * begin <= end <= the buffer's size and end - begin = the shape's elements x
 * the dtype's size (no overflow); names are 1..PSC_EXPORT_NAME_MAX-1 bytes.
 * Overlapping or unordered tensors are read as they are (the format forbids
 * them; nothing here depends on it).
 *
 * Thread-safety: a psc_st_file_t is read-only after psc_st_parse/_load.
 */
#ifndef PSC_SAFETENSORS_H
#define PSC_SAFETENSORS_H

#include "export.h" /* enum psc_st_dtype, PSC_EXPORT_NAME_MAX */

#include <stddef.h>
#include <stdint.h>

#define PSC_ST_MAX_HEADER ((uint64_t)100 << 20) /* bytes of JSON header */

typedef struct psc_st_tensor {
    char name[PSC_EXPORT_NAME_MAX];
    enum psc_st_dtype dtype;
    int rank;
    int64_t shape[PSC_MAX_RANK];
    uint64_t numel;
    const uint8_t *data; /* numel little-endian values, at any alignment */
} psc_st_tensor_t;

typedef struct psc_st_file {
    psc_st_tensor_t *t; /* in header order */
    int n;
    char job_id[64]; /* __metadata__.job_id ("" if none) */
    void *map;       /* psc_st_load: the mapped file */
    size_t map_len;
} psc_st_file_t;

/* Parses buf[0..len) (kept: the tensors point into it). 0 or PSC_ECORRUPT
 * (err); on failure *f is empty. */
int psc_st_parse(const uint8_t *buf, size_t len, psc_st_file_t *f, char *err, size_t errlen);
/* Maps the file at path read-only and parses it. PSC_EIO naming the path, or
 * psc_st_parse's error prefixed with the path. */
int psc_st_load(const char *path, psc_st_file_t *f, char *err, size_t errlen);
/* The tensor named name, or NULL. */
const psc_st_tensor_t *psc_st_find(const psc_st_file_t *f, const char *name);
void psc_st_free(psc_st_file_t *f); /* frees and unmaps; *f empty after */

#endif
