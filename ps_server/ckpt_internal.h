/* ckpt_internal.h — what ckpt.c (the RocksDB side: open, write, commit,
 * read) and ckpt_format.c (the bytes: keys, manifests, tensor headers) share.
 * The format itself is documented in ckpt.h. Not for other modules.
 *
 * Invariant: ckpt_format.c knows nothing of RocksDB and calls nothing in
 * ckpt.c; every function here is pure (no I/O, no lock), safe from any thread.
 */
#ifndef PSC_CKPT_INTERNAL_H
#define PSC_CKPT_INTERNAL_H

#include "ckpt.h"

#include <stddef.h>
#include <stdint.h>

#define CKPT_MANIFEST_FIXED 41 /* bytes before the job id's bytes */
#define CKPT_TENSOR_HEADER 16
#define CKPT_ID_HEX 16
/* "t/" + 16 hex + "/" + name + NUL */
#define CKPT_KEY_MAX (2 + CKPT_ID_HEX + 1 + CKPT_MAX_NAME + 1)
#define CKPT_RANGE_KEY_LEN (2 + CKPT_ID_HEX + 1)

typedef struct ckpt_entry {
    char *name;    /* NUL-terminated, malloc'd */
    uint64_t len;  /* tensor bytes */
    uint32_t mcrc; /* masked CRC-32C of the bytes */
} ckpt_entry_t;

/* A decoded manifest; e (info.ntensors entries) is owned (ckpt_manifest_free). */
typedef struct ckpt_manifest {
    ckpt_info_t info;
    ckpt_entry_t *e;
} ckpt_manifest_t;

/* ---- keys: each writes at most CKPT_KEY_MAX bytes into k and returns its length ---- */
size_t ckpt_key_manifest(char *k, uint64_t id);
size_t ckpt_key_tensor(char *k, uint64_t id, const char *name);
/* [lo, hi): every tensor key of id (CKPT_RANGE_KEY_LEN bytes each). */
void ckpt_key_tensor_range(char lo[CKPT_RANGE_KEY_LEN + 1], char hi[CKPT_RANGE_KEY_LEN + 1], uint64_t id);
/* Parses "m/<16 hex>"; 0, or -1 for any other key. */
int ckpt_parse_manifest_key(const char *k, size_t n, uint64_t *id);

/* ---- manifests ---- */
void ckpt_manifest_free(ckpt_manifest_t *m); /* empties m; an empty m is fine */
/* Encodes a manifest; returns a malloc'd buffer of *n bytes (the caller frees). */
unsigned char *ckpt_manifest_encode(const ckpt_info_t *info, const ckpt_entry_t *e, size_t *n);
/* Decodes the manifest stored under id. 0; or PSC_ECORRUPT / PSC_EUNSUPPORTED
 * with *m empty and err naming id. */
int ckpt_manifest_decode(const unsigned char *b, size_t n, uint64_t id, ckpt_manifest_t *m, char *err, size_t errlen);
/* Marks an encoded manifest committed in place: the state byte and its CRC,
 * nothing else. */
void ckpt_manifest_set_committed(unsigned char *b, size_t n);
/* The entry named name, or NULL; points into m. */
const ckpt_entry_t *ckpt_manifest_find(const ckpt_manifest_t *m, const char *name);

/* ---- tensor values ---- */
/* The header of a tensor value of len bytes whose masked CRC is mcrc. */
void ckpt_tensor_header(unsigned char hdr[CKPT_TENSOR_HEADER], uint32_t mcrc, uint64_t len);
/* Checks the stored value of tensor e of checkpoint id: header, length and
 * CRC agree with the manifest and the bytes. With copy, *copy receives a
 * malloc'd copy of the tensor (the caller frees). 0 or PSC_ECORRUPT. */
int ckpt_tensor_value_check(uint64_t id, const ckpt_entry_t *e, const unsigned char *val, size_t n, void **copy,
                            char *err, size_t errlen);

#endif
