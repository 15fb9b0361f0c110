/* export.h — the current variables of a running cluster as one safetensors file.
 *
 * psc_export_safetensors asks every PS for its Status (job id, readiness, the
 * variables it holds), joins the axis-0 partitions "<base>/part_<i>" back into
 * "<base>", pulls every variable chunk by chunk (many calls in flight) and
 * writes a safetensors file (https://github.com/huggingface/safetensors):
 *
 *   u64 little-endian N | N bytes of JSON header, space-padded | byte buffer
 *
 * The header is compact JSON as the reference writer (serde_json) emits it:
 *   {"__metadata__":{"job_id":"..","global_step":".."},
 *    "<name>":{"dtype":"F32","shape":[..],"data_offsets":[begin,end]},...}
 * N is a multiple of 8, so the buffer starts at an 8-aligned file offset.
 * Tensors lie contiguously in the buffer in header order, without gaps, from
 * offset 0 to the end of the file. The order is the reference writer's:
 * larger dtypes first (global_step, I64, shape []), then by name in byte
 * order; so every tensor starts at a multiple of its element size. Values are
 * little-endian float32 (F32), global_step one little-endian int64 (I64).
 *
 * The values are read chunk by chunk while the cluster may be training: each
 * 2 MiB chunk is one consistent read, the file as a whole is not a single cut
 * (use a checkpoint for that). The file is written to "<path>.tmp", synced,
 * then renamed over path: a failed export leaves no file behind.
 *
 * The pure steps (psc_export_plan, psc_safetensors_header) take no network and
 * are what the unit tests drive. Thread-safety: no global state; each call
 * uses only its arguments.
 */
#ifndef PSC_EXPORT_H
#define PSC_EXPORT_H

#include "model_spec.h" /* PSC_MAX_RANK */
#include "tf_config.h"

#include <stddef.h>
#include <stdint.h>

#define PSC_EXPORT_NAME_MAX 128 /* bytes of a variable name, NUL included */

enum psc_st_dtype { PSC_ST_F32 = 0, PSC_ST_I64 };

/* One variable as a PS holds it (a VarStatus), e.g. "dense/kernel/part_1". */
typedef struct psc_export_piece {
    char name[PSC_EXPORT_NAME_MAX];
    int ps;                      /* index of the ps task that holds it */
    int rank;
    int64_t shape[PSC_MAX_RANK]; /* shape of the piece */
    uint64_t bytes;              /* value bytes (8 for global_step) */
} psc_export_piece_t;

/* One tensor of the file: a whole variable or the join of its parts. */
typedef struct psc_export_tensor {
    char name[PSC_EXPORT_NAME_MAX]; /* "dense/kernel" */
    enum psc_st_dtype dtype;
    int rank;                       /* 0 for global_step (shape []) */
    int64_t shape[PSC_MAX_RANK];    /* parts joined: shape[0] is the sum of theirs */
    uint64_t bytes;
    uint64_t begin, end;            /* data_offsets in the byte buffer: [begin, end) */
    int first_piece, npieces;       /* its pieces, in part order, in the plan's piece array */
    const void *mem;                /* a sparse table's tensor (export_tables.h): its bytes, already here; NULL
                                       for a variable pulled from the PS */
} psc_export_tensor_t;

/* What an export wrote. */
typedef struct psc_export_info {
    int tensors;           /* tensors in the file (a partitioned variable counts once; a sparse table 1 or 2) */
    int tables;            /* sparse tables among them */
    int pieces;            /* variables pulled from the PS (each part counts) */
    uint64_t bytes;        /* size of the file */
    uint64_t data_bytes;   /* size of its byte buffer */
    int has_global_step;
    int64_t global_step;   /* the exported value (-1 if the model has none) */
    char job_id[64];
} psc_export_info_t;

/* Writes the variables of the cluster's ps tasks (cluster->n[PSC_JOB_PS],
 * cluster->addr[PSC_JOB_PS][i]) to `path` as safetensors, and its sparse
 * tables as export_tables.h says (dense "<name>" when small, else
 * "<name>/ids" + "<name>/values"): the live values (ckpt 0), or those
 * committed checkpoint ckpt holds (each PS reads its shard of it, as the
 * checkpoint describes it: see psc_export_safetensors_ex). timeout_ms is the
 * deadline of each call (Status, and each chunk's Pull); a PS that is down
 * fails within it. Refuses, naming the PS (index and address), when a PS is
 * unreachable, holds no model, is not ready, holds another job than ps 0, or
 * when the variables do not fit together (psc_export_plan). info (may be
 * NULL) says what was written. Returns 0, or a negative PSC_E* code with err
 * set (PSC_EUNAVAILABLE, PSC_ETIMEOUT, PSC_ERPC: a call failed; PSC_ENOTREADY;
 * PSC_EMISMATCH: job ids or partitions disagree; PSC_ECORRUPT: a reply that
 * is not what was asked; PSC_EIO: the file). On failure no file is left at
 * path (an older file there is untouched) nor at path.tmp.
 * Any thread; the caller owns every argument. */
int psc_export_safetensors(const psc_cluster_t *cluster, const char *path, uint64_t ckpt, int timeout_ms,
                           psc_export_info_t *info, char *err, size_t errlen);

/* psc_export_safetensors with flags: PSC_EXPORT_TABLE_ROWS writes every
 * table as "<name>/ids" + "<name>/values" (the rows that exist), however
 * small (a warm start's image: no untouched row becomes a row). With ckpt >
 * 0 the pieces and tables are the checkpoint's own (Describe: a checkpoint of
 * any job on these PS); a checkpoint saved before descriptions existed is
 * read by the live model's names, which must be its job's. */
#define PSC_EXPORT_TABLE_ROWS 1
#define PSC_EXPORT_DESCRIBED 2 /* only a checkpoint that describes itself (no fallback to the live model) */
int psc_export_safetensors_ex(const psc_cluster_t *cluster, const char *path, uint64_t ckpt, int flags, int timeout_ms,
                              psc_export_info_t *info, char *err, size_t errlen);

/* If name is "<base>/part_<i>" (i decimal, no sign, no leading zero), returns
 * i and sets *base_len to strlen(base); else -1. */
int psc_export_part_index(const char *name, size_t *base_len);

/* Plans the file from the pieces of every PS: joins "<base>/part_0..n-1" into
 * "<base>" (along axis 0, in part order: part_10 after part_9; the other
 * dimensions must agree; parts may lie on different PS), types "global_step"
 * as I64 shape [] (8 bytes) and everything else as F32 (bytes = 4 * elements),
 * orders the tensors (I64 first, then by name in byte order) and lays out
 * their data offsets contiguously from 0. pieces is reordered in place so that
 * tensor t's pieces are pieces[t.first_piece .. t.first_piece + t.npieces), in
 * part order. *tensors is heap-allocated (free()), *ntensors may be 0.
 * Returns 0, or PSC_EMISMATCH naming the variable when parts are missing or
 * doubled, a name is held twice, ranks or dimensions disagree, or a size does
 * not match its shape; then *tensors is NULL. */
int psc_export_plan(psc_export_piece_t *pieces, int npieces, psc_export_tensor_t **tensors, int *ntensors,
                    char *err, size_t errlen);

/* Orders tensors as the file has them (I64 first, then by name in byte
 * order) and lays out their data offsets contiguously from 0; pieces keep
 * their indices. PSC_EMISMATCH when two tensors have the same name. */
int psc_export_layout(psc_export_tensor_t *tensors, int nt, char *err, size_t errlen);

/* Builds the JSON header for tensors (in file order, data offsets set) and the
 * metadata pairs keys[i]: vals[i] (strings; nmeta may be 0: no __metadata__),
 * padded with trailing spaces to a multiple of 8 bytes. Strings are escaped as
 * JSON requires. Returns the header (heap, NUL-terminated, free()) and its
 * length N (the NUL not counted) in *len. Never fails (aborts on OOM). */
char *psc_safetensors_header(const psc_export_tensor_t *tensors, int ntensors, const char *const *keys,
                             const char *const *vals, int nmeta, size_t *len);

/* shape as "[d0, d1, ...]" ("[]" for rank 0) into buf. */
void psc_export_fmt_shape(char *buf, size_t len, const int64_t *shape, int rank);

/* "F32", "I64". */
const char *psc_st_dtype_name(enum psc_st_dtype d);

#endif
