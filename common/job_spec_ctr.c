/* job_spec_ctr.c — what a recommendation (CTR) model's spec ties together:
 * model.loss with data.format, model.input_shape with the dense features, and
 * the embedding and wide layers' "table" and "features" with the top-level
 * tables and the data's features (see job_spec_internal.h and
 * docs/recommendation.md, "The job spec of a recommendation model").
 *
 * Design: job_spec.c parses every layer's type and name; the lookup layers'
 * own keys are read here, after the tables and the data, because they name
 * them. A layer's "features" become cat_index values in the layer's order; a
 * table becomes its index in s->tables. The structure rules (one join, the
 * bottom and top MLPs, table dims) are psc_model_check's (model_spec_ctr.c),
 * which also sees hand-built specs.
 *
 * Invariants: after jspec_parse_ctr_layers every embedding and wide layer has
 * a valid table, 1..PSC_MAX_FEATURES distinct categorical features, and
 * hash_ids set wherever a feature holds bytes.
 */
#include "job_spec_internal.h"

#include "psc.h"

#include <stdio.h>
#include <string.h>

int jspec_check_loss_data(const jspec_ctx_t *c, const json_t *model, psc_job_spec_t *s)
{
    char got[64];
    int sigmoid = s->loss_kind == PSC_LOSS_SIGMOID_XENT, idx = s->data_format == PSC_DATA_IDX;
    if (sigmoid && idx)
        return jspec_fail(c, "model.loss",
                          "sigmoid_cross_entropy needs data.format criteo, libsvm or tfrecord (idx data are images "
                          "with class labels: use sparse_softmax_cross_entropy)");
    if (!sigmoid && !idx)
        return jspec_fail(c, "data.format",
                          "\"%s\" data train a click-through model: set model.loss to "
                          "sigmoid_cross_entropy",
                          jspec_format_names[s->data_format]);
    if (!sigmoid) return 0;
    const json_t *shape = json_object_get(model, "input_shape");
    if (shape) {
        int ok = s->input_rank == 1 && s->input_shape[0] == s->num_dense;
        if (!ok && s->num_dense == 0)
            return jspec_fail(c, "model.input_shape", "the data have no dense features: leave input_shape out, got %s",
                              jspec_show(shape, got, sizeof got));
        if (!ok)
            return jspec_fail(c, "model.input_shape",
                              "a sigmoid_cross_entropy model's input is its %d dense feature values: expected [%d] "
                              "(or leave it out), got %s",
                              s->num_dense, s->num_dense, jspec_show(shape, got, sizeof got));
    }
    s->input_rank = 1;
    s->input_shape[0] = s->num_dense;
    s->input_shape[1] = s->input_shape[2] = 1;
    return 0;
}

/* The feature named `name`, or -1. */
static int find_feature(const psc_job_spec_t *s, const char *name)
{
    for (int i = 0; i < s->num_features; i++)
        if (strcmp(s->features[i].name, name) == 0) return i;
    return -1;
}

/* The table named in model.layers[i].table into L->table. */
static int resolve_table(const jspec_ctx_t *c, const json_t *lj, const char *path, const psc_job_spec_t *s,
                         psc_layer_spec_t *L)
{
    const char *name = NULL;
    char p[64];
    int rc;
    if ((rc = jspec_get_string(c, lj, "table", path, 1, &name))) return rc;
    for (int t = 0; t < s->num_tables; t++)
        if (strcmp(s->tables[t].name, name) == 0) {
            L->table = t;
            return 0;
        }
    jspec_join(p, sizeof p, path, "table");
    if (s->num_tables == 0) return jspec_fail(c, p, "no table \"%.64s\": the spec declares no \"tables\"", name);
    return jspec_fail(c, p, "no table \"%.64s\" among \"tables\"", name);
}

/* One name of model.layers[i].features (at path e) into L->features[k]. */
static int resolve_feature(const jspec_ctx_t *c, const char *e, const json_t *x, const psc_job_spec_t *s,
                           psc_layer_spec_t *L, int k)
{
    char got[64];
    if (!json_is_string(x)) return jspec_fail(c, e, "expected a feature name, got %s", jspec_show(x, got, sizeof got));
    const char *name = json_string_value(x);
    int f = find_feature(s, name);
    if (f < 0) {
        if (s->data_format == PSC_DATA_TFRECORD) return jspec_fail(c, e, "no feature \"%.64s\" in data.features", name);
        return jspec_fail(c, e, "no feature \"%.64s\" in %s data (%s)", name, jspec_format_names[s->data_format],
                          s->data_format == PSC_DATA_CRITEO ? "label, I1..I13, C1..C26" : "label, features");
    }
    const psc_feature_spec_t *F = &s->features[f];
    if (F->role != PSC_FEATURE_CATEGORICAL)
        return jspec_fail(c, e, "\"%s\" is a %s feature; %s layers look up categorical features", name,
                          jspec_role_names[F->role], L->type == PSC_LAYER_WIDE ? "wide" : "embedding");
    for (int j = 0; j < k; j++)
        if (L->features[j] == F->cat_index) return jspec_fail(c, e, "\"%s\" is already in this layer's features", name);
    L->features[k] = F->cat_index;
    return 0;
}

/* model.layers[i].features: a name or an array of 1..PSC_MAX_FEATURES names. */
static int resolve_features(const jspec_ctx_t *c, const json_t *lj, const char *path, const psc_job_spec_t *s,
                            psc_layer_spec_t *L)
{
    char p[64], e[80], got[64];
    jspec_join(p, sizeof p, path, "features");
    const json_t *v = json_object_get(lj, "features");
    if (!v) return jspec_missing(c, p);
    if (json_is_string(v)) {
        L->num_features = 1;
        return resolve_feature(c, p, v, s, L, 0);
    }
    if (!json_is_array(v) || json_array_size(v) < 1 || json_array_size(v) > PSC_MAX_FEATURES)
        return jspec_fail(c, p, "expected a feature name or an array of 1 to %d of them, got %s", PSC_MAX_FEATURES,
                          jspec_show(v, got, sizeof got));
    L->num_features = (int)json_array_size(v);
    for (int k = 0; k < L->num_features; k++) {
        snprintf(e, sizeof e, "%s[%d]", p, k);
        int rc = resolve_feature(c, e, json_array_get(v, (size_t)k), s, L, k);
        if (rc) return rc;
    }
    return 0;
}

/* An embedding or wide layer's keys. */
static int parse_lookup(const jspec_ctx_t *c, const json_t *lj, int i, const psc_job_spec_t *s, psc_layer_spec_t *L)
{
    char path[32], p[64];
    int rc, combiner = PSC_COMBINER_SUM;
    snprintf(path, sizeof path, "model.layers[%d]", i);
    if ((rc = resolve_table(c, lj, path, s, L))) return rc;
    if ((rc = resolve_features(c, lj, path, s, L))) return rc;
    if ((rc = jspec_get_enum(c, lj, "combiner", path, 0, jspec_combiner_names, 3, &combiner))) return rc;
    L->combiner = (enum psc_combiner)combiner;
    L->hash_ids = 1;
    if ((rc = jspec_get_bool(c, lj, "hash_ids", path, &L->hash_ids))) return rc;
    if (L->hash_ids) return 0;
    /* bytes become ids only through the hash */
    for (int f = 0; f < s->num_features; f++) {
        const psc_feature_spec_t *F = &s->features[f];
        if (F->role != PSC_FEATURE_CATEGORICAL || F->kind != PSC_FEATURE_BYTES) continue;
        for (int k = 0; k < L->num_features; k++)
            if (L->features[k] == F->cat_index) {
                jspec_join(p, sizeof p, path, "hash_ids");
                return jspec_fail(c, p,
                                  "feature \"%s\" holds bytes, which become ids only by hashing: set "
                                  "hash_ids true",
                                  F->name);
            }
    }
    return 0;
}

int jspec_parse_ctr_layers(const jspec_ctx_t *c, const json_t *layers, psc_job_spec_t *s)
{
    for (int i = 0; i < s->num_layers; i++) {
        psc_layer_spec_t *L = &s->layers[i];
        if (L->type != PSC_LAYER_EMBEDDING && L->type != PSC_LAYER_WIDE) continue;
        int rc = parse_lookup(c, json_array_get(layers, (size_t)i), i, s, L);
        if (rc) return rc;
    }
    return 0;
}
