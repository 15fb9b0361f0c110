/* store.h — the PS's variable store: one shard of the model's variables, their
 * optimizer slots, versions and global_step.
 *
 * Life cycle: store_create_vars (the chief declares the shard) -> store_assign
 * (initial values, chunk by chunk) -> store_set_ready -> pulls and pushes.
 * Each variable has its own mutex, so pushes to different variables proceed in
 * parallel; a push chunk is validated completely (name, sizes, chunk alignment,
 * finite values) before anything is written, so a rejected request changes no
 * state. The unit of atomicity is one chunk (<= PSC_CHUNK_BYTES). Adam's step t
 * is counted per chunk of a variable: with whole-variable pushes it equals the
 * number of pushes applied to the variable.
 * global_step is an int64 counter held by the shard that has the is_step variable.
 * All functions are thread-safe. Errors: PSC_E* and a message in err.
 */
#ifndef PSC_STORE_H
#define PSC_STORE_H

#include "job_spec.h"

#include <stddef.h>
#include <stdint.h>

typedef struct store store_t;

typedef struct store_var_spec {
    const char *name;
    int rank;
    int64_t shape[PSC_MAX_RANK];
    int is_step;
} store_var_spec_t;

typedef struct store_var_info {
    char name[112];
    int rank;
    int64_t shape[PSC_MAX_RANK];
    uint64_t bytes;   /* value bytes (8 for global_step) */
    int64_t version;  /* number of applied updates/assignments */
    int is_step;
} store_var_info_t;

typedef struct store_stats {
    uint64_t applied;  /* push chunks applied */
    uint64_t rejected; /* push/assign requests refused for bad input */
    uint64_t pulls;    /* pull chunks served */
    uint64_t bytes_pushed, bytes_pulled;
} store_stats_t;

store_t *store_create(void);
void store_destroy(store_t *s); /* NULL ok */

/* Declares this shard's variables for job `job_id` with optimizer `opt`.
 * First call: creates them (values and slots zero/initial), *created = 1.
 * Same job id and identical names/shapes again: no change, *created = 0, returns 0.
 * Otherwise PSC_EEXISTS (another job) or PSC_EMISMATCH (a shape differs), naming
 * the variable; nothing changes. n may be 0 (a PS that holds nothing). */
int store_create_vars(store_t *s, const char *job_id, const psc_optim_config_t *opt, const store_var_spec_t *vars,
                      int n, int *created, char *err, size_t errlen);

/* Writes bytes [offset, offset+len) of a variable's value (initialization or
 * restore); the chunk must follow the wire chunking (wire.h) and total must equal
 * the variable's byte size. For global_step, 8 bytes of little-endian int64. */
int store_assign(store_t *s, const char *name, uint64_t offset, const void *data, size_t len, uint64_t total,
                 char *err, size_t errlen);

/* Marks the model ready for job_id (PSC_ENOTFOUND if no variables were created for it). */
int store_set_ready(store_t *s, const char *job_id, char *err, size_t errlen);
/* 1 when ready; copies the job id (may be "") into job_id[17] if non-NULL. */
int store_is_ready(store_t *s, char *job_id);

/* Copies bytes [offset, offset+len) of a variable into dst (a consistent snapshot
 * of that chunk) and its version. PSC_ENOTREADY before store_set_ready. */
int store_pull(store_t *s, const char *name, uint64_t offset, size_t len, void *dst, int64_t *version, char *err,
               size_t errlen);

/* Applies a gradient chunk with the optimizer. total must equal the variable's
 * bytes and (offset, len) be a wire chunk; every value must be finite. If
 * updated is non-NULL the chunk's new values are copied there (push-pull).
 * PSC_ENOTFOUND, PSC_EMISMATCH, PSC_EINVAL (non-finite, misaligned), PSC_ENOTREADY. */
int store_push(store_t *s, const char *name, uint64_t offset, const void *grad, size_t len, uint64_t total,
               void *updated, int64_t *version, char *err, size_t errlen);

/* Adds inc (>= 0) to global_step and returns the new value in *value.
 * PSC_ENOTFOUND when this shard holds no global_step. */
int store_step_add(store_t *s, int64_t inc, int64_t *value, char *err, size_t errlen);
/* 1 and the value if this shard holds global_step, else 0. */
int store_step_get(store_t *s, int64_t *value);

/* Byte size of a variable (its wire `total`); PSC_ENOTFOUND if unknown. */
int store_var_bytes(store_t *s, const char *name, uint64_t *bytes);

/* Snapshot of the variables (array owned by the caller, free()) and counters. */
int store_list(store_t *s, store_var_info_t **out, int *n);
void store_get_stats(store_t *s, store_stats_t *st);
void store_count_rejected(store_t *s);

#endif
