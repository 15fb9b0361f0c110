/* job_spec_internal.h — what the files of the job-spec parser share:
 * job_spec.c (the entry points, the model, the other sections, the job id),
 * job_spec_optim.c (optimizer, learning-rate schedule, tables),
 * job_spec_data.c (the "data" section: formats, files, features),
 * job_spec_ctr.c (a recommendation model's layers against its tables and
 * features) and job_spec_json.c (the typed getters below and the name tables:
 * the leaf the others call). Only those files include it (and with it
 * jansson); the rest of psc sees job_spec.h alone.
 *
 * Every getter reads obj[key], writes "<pfx><parent>.<key>: <problem>" into the
 * context's error buffer and returns PSC_ECONFIG when the value is wrong, and
 * leaves *out alone when the key is absent and not required (so the caller
 * writes the default first). Thread-safety: plain functions of their arguments.
 */
#ifndef PSC_JOB_SPEC_INTERNAL_H
#define PSC_JOB_SPEC_INTERNAL_H

#include "job_spec.h"

#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* Where errors go and what they start with ("job spec: " or "job spec FILE: "). */
typedef struct jspec_ctx {
    const char *pfx;
    char *err;
    size_t errlen;
} jspec_ctx_t;

/* A number's range: a lower bound (-INFINITY: none) and an upper one (INFINITY: none). */
typedef struct jspec_range {
    double lo;
    int lo_open; /* lo excluded */
    double hi;
    int hi_open; /* hi excluded */
} jspec_range_t;

#define JSPEC_R_POS ((jspec_range_t){0, 1, INFINITY, 0})         /* > 0 */
#define JSPEC_R_NONNEG ((jspec_range_t){0, 0, INFINITY, 0})      /* >= 0 */
#define JSPEC_R_UNIT ((jspec_range_t){0, 0, 1, 1})               /* [0, 1) */
#define JSPEC_R_CLOSED_UNIT ((jspec_range_t){0, 0, 1, 0})        /* [0, 1] */
#define JSPEC_R_NONPOS ((jspec_range_t){-INFINITY, 0, 0, 0})     /* <= 0 */
#define JSPEC_R_ANY ((jspec_range_t){-INFINITY, 0, INFINITY, 0}) /* any finite number */

/* The error "<pfx><path>: <message>" (just "<pfx><message>" when path is ""). Returns PSC_ECONFIG. */
int jspec_fail(const jspec_ctx_t *c, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* "parent.key", or "key" when parent is "". */
void jspec_join(char *buf, size_t n, const char *parent, const char *key);
/* A short rendering of a JSON value for "got ..." in messages. */
const char *jspec_show(const json_t *v, char *buf, size_t n);
/* Refuses a key of obj not in the NULL-terminated `allowed`, listing them. */
int jspec_check_keys(const jspec_ctx_t *c, const json_t *obj, const char *path, const char *const *allowed);
/* "<path>: missing (required)". */
int jspec_missing(const jspec_ctx_t *c, const char *path);

/* An integer in [min, max] ("expected a positive integer", "N is too large"). */
int jspec_get_int(const jspec_ctx_t *c, const json_t *obj, const char *key, const char *parent, int required,
                  int64_t min, int64_t max, int64_t *out);
/* An integer in [min, max], refused as "expected an integer MIN..MAX, got X". */
int jspec_get_int_in(const jspec_ctx_t *c, const json_t *obj, const char *key, const char *parent, int required,
                     int64_t min, int64_t max, int64_t *out);
int jspec_get_int32(const jspec_ctx_t *c, const json_t *obj, const char *key, const char *parent, int required, int min,
                    int *out);
/* A finite number (integer or real) in r. */
int jspec_get_number(const jspec_ctx_t *c, const json_t *obj, const char *key, const char *parent, int required,
                     jspec_range_t r, double *out);
/* A number in r stored as float32: also refuses what a float cannot hold. */
int jspec_get_float(const jspec_ctx_t *c, const json_t *obj, const char *key, const char *parent, int required,
                    jspec_range_t r, float *out);
int jspec_get_bool(const jspec_ctx_t *c, const json_t *obj, const char *key, const char *parent, int *out);
/* *out points into obj (valid while obj lives). */
int jspec_get_string(const jspec_ctx_t *c, const json_t *obj, const char *key, const char *parent, int required,
                     const char **out);
/* A string that must be one of names[0..n) (NULL entries skipped); *out = its index. */
int jspec_get_enum(const jspec_ctx_t *c, const json_t *obj, const char *key, const char *parent, int required,
                   const char *const *names, int n, int *out);
/* A positive int k (meaning (k, k)) or a pair [h, w] of positive ints. */
int jspec_get_pair(const jspec_ctx_t *c, const json_t *obj, const char *key, const char *parent, int required,
                   int out[2]);
/* A sub-object; *out = NULL when absent. */
int jspec_get_object(const jspec_ctx_t *c, const json_t *obj, const char *key, const char *parent, int required,
                     const json_t **out);

/* Names of the enums' values, indexed by value (job_spec_json.c). */
extern const char *const jspec_format_names[4];    /* enum psc_data_format: idx, criteo, libsvm, tfrecord */
extern const char *const jspec_shard_names[3];     /* enum psc_data_shard: auto, file, record */
extern const char *const jspec_role_names[3];      /* enum psc_feature_role: label, dense, categorical */
extern const char *const jspec_kind_names[3];      /* enum psc_feature_kind: int64, float, bytes */
extern const char *const jspec_transform_names[2]; /* enum psc_dense_transform: none, log1p */
extern const char *const jspec_combiner_names[3];  /* enum psc_combiner: sum, mean, sqrtn */
extern const char *const jspec_loss_names[2];      /* enum psc_loss */

/* ---- job_spec_optim.c ---- */

/* An optimizer object at `path` ("optimizer", "tables[2].optimizer") into *opt,
 * defaults filled in, its "schedule" included. */
int jspec_parse_optimizer(const jspec_ctx_t *c, const json_t *o, const char *path, psc_optim_config_t *opt);
/* The top-level "tables" (absent: none) into s->tables (owned by s); needs
 * s->optimizer parsed (a table without its own optimizer gets a copy). With
 * check_names the model must be parsed and checked, and each table's name is
 * checked against its variables as it is read (a softmax model's order);
 * without, jspec_check_table_names does that later (a recommendation model,
 * whose layers need the tables before they can be checked). */
int jspec_parse_tables(const jspec_ctx_t *c, const json_t *root, psc_job_spec_t *s, int check_names);
/* Every table's name against the model's variables (neither equal nor a
 * "/"-prefix of the other); the model must pass psc_model_check. */
int jspec_check_table_names(const jspec_ctx_t *c, const psc_job_spec_t *s);

/* ---- job_spec_data.c ---- */

/* The "data" object (NULL when absent: idx with its defaults) into s:
 * data.format; for idx the IDX prefixes train/test; for the others the file
 * lists (s->train_files, s->test_files), shard, bad_record_limit and the
 * features (tfrecord's data.features, or criteo's and libsvm's own) with
 * dense_offset, cat_index, num_dense and num_cat; then train_examples,
 * test_examples and shuffle; then data.follow and data.test_files (online
 * training: with follow, shuffle 0 and the keys follow refuses).
 * What it allocates, s owns (psc_job_spec_deinit). */
/* "warm_start" (job_spec_warm.c): from, checkpoint, variables (a regex that
 * compiles), tables (each one of the spec's). */
int jspec_parse_warm_start(const jspec_ctx_t *c, const json_t *root, psc_job_spec_t *s);
int jspec_parse_data(const jspec_ctx_t *c, const json_t *o, psc_job_spec_t *s);
/* With data.follow, the keys outside "data" it constrains: epochs must be 1
 * (call after "epochs" is parsed). 0 without data.follow. */
int jspec_check_follow(const jspec_ctx_t *c, const psc_job_spec_t *s);
/* psc_job_spec_check_data for criteo, libsvm and tfrecord: every pattern of
 * data.train (train != 0) and data.test (test != 0) matches at least one file,
 * and each file it matches is readable. Messages start with pfx. */
int jspec_check_data_files(const char *pfx, const psc_job_spec_t *s, int train, int test, char *err, size_t errlen);

/* ---- job_spec_ctr.c ---- */

/* model.loss against data.format (sigmoid_cross_entropy if and only if the
 * data are criteo, libsvm or tfrecord) and, for sigmoid_cross_entropy,
 * model.input_shape (model: the "model" object) against the dense features:
 * absent or [num_dense]; then input_shape = (num_dense), rank 1. */
int jspec_check_loss_data(const jspec_ctx_t *c, const json_t *model, psc_job_spec_t *s);
/* The embedding and wide layers' keys (layers: the model.layers array, parsed
 * into s->layers) against s->tables and s->features: table, features,
 * combiner, hash_ids. Needs the tables and the data parsed. */
int jspec_parse_ctr_layers(const jspec_ctx_t *c, const json_t *layers, psc_job_spec_t *s);

#endif
