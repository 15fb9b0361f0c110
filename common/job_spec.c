/* job_spec.c — strict parsing of the Keras-like JSON job spec (see job_spec.h).
 *
 * Design: jansson parses the text; each object level is checked against its list of
 * allowed keys before its values are read, and each value goes through one typed
 * getter (integer, number, bool, string, enum, int-or-pair; job_spec_json.c) that
 * writes the error "<prefix><key path>: <problem>". Defaults are written first, so
 * a parsed spec is complete. This file parses the model and the plain sections and
 * computes the job id; job_spec_optim.c parses the optimizers (with their
 * learning-rate schedules) and the sparse tables; job_spec_data.c the "data"
 * section; job_spec_ctr.c a recommendation model's lookup layers and its loss
 * against its data. The job id is FNV-1a 64 over a
 * canonical text of everything that defines the model and its training math
 * (shapes, layers, loss, optimizer, placement, seed, tables; a recommendation
 * model's lookup layers and data features), printed with fixed formats so that
 * equal specs hash equally; what a spec without the newer keys (schedule, ftrl,
 * tables, recommendation models) hashes is unchanged: their lines appear only
 * when used.
 *
 * Validation happens in two places: parsing refuses everything that the text
 * alone shows wrong, the layers against model.input_shape included (the walk of
 * model_spec.c), so a Submit of a bad spec is refused too; psc_job_spec_check
 * adds what needs the cluster (sync.total_num_replicas) and
 * psc_job_spec_check_data what needs the task's file system (data.train/test).
 *
 * Invariants: on error *out is zeroed and owns nothing; layer names are unique and
 * match [A-Za-z0-9_.-]{1,63}. psc_model_variables/psc_model_shapes/psc_model_check
 * live in model_spec.c.
 */
#include "job_spec.h"

#include "job_spec_internal.h"
#include "model_spec.h"
#include "psc.h"
#include "wire.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_TRAIN "/usr/share/datasets/fashion-mnist/train"
#define DEFAULT_TEST "/usr/share/datasets/fashion-mnist/t10k"

/* ---- model ---- */

static const char *const layer_type_names[] = {"dense",     "flatten",     "conv2d", "max_pool2d", "dropout",
                                               "embedding", "interaction", "concat", "wide"};
static const char *const activation_names[] = {"linear", "relu", "tanh", "sigmoid"};
static const char *const padding_names[] = {"valid", "same"};
static const char *const layer_keys[][9] = {
    [PSC_LAYER_DENSE] = {"type", "name", "units", "activation", "use_bias", NULL},
    [PSC_LAYER_FLATTEN] = {"type", "name", NULL},
    [PSC_LAYER_CONV2D] = {"type", "name", "filters", "kernel_size", "strides", "padding", "activation", "use_bias",
                          NULL},
    [PSC_LAYER_MAX_POOL2D] = {"type", "name", "pool_size", "strides", "padding", NULL},
    [PSC_LAYER_DROPOUT] = {"type", "name", "rate", NULL},
    [PSC_LAYER_EMBEDDING] = {"type", "name", "table", "features", "combiner", "hash_ids", NULL},
    [PSC_LAYER_INTERACTION] = {"type", "name", NULL},
    [PSC_LAYER_CONCAT] = {"type", "name", NULL},
    [PSC_LAYER_WIDE] = {"type", "name", "table", "features", "combiner", "hash_ids", NULL},
};

const char *psc_activation_name(enum psc_activation a)
{
    if ((int)a < 0 || (size_t)a >= PSC_ARRAY_LEN(activation_names)) return "unknown";
    return activation_names[a];
}

static int valid_name(const char *s)
{
    size_t n = strlen(s);
    if (n < 1 || n > 63) return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_' ||
              ch == '.' || ch == '-'))
            return 0;
    }
    return 1;
}

/* Parses layer i into *L; *user_named = 1 when it carries a "name". */
static int parse_layer(const jspec_ctx_t *c, const json_t *lj, int i, psc_layer_spec_t *L, int *user_named)
{
    char path[64], got[64];
    snprintf(path, sizeof path, "model.layers[%d]", i);
    if (!json_is_object(lj)) return jspec_fail(c, path, "expected an object, got %s", jspec_show(lj, got, sizeof got));
    int type = -1, rc;
    if ((rc = jspec_get_enum(c, lj, "type", path, 1, layer_type_names, (int)PSC_ARRAY_LEN(layer_type_names), &type)))
        return rc;
    L->type = (enum psc_layer_type)type;
    if ((rc = jspec_check_keys(c, lj, path, layer_keys[type]))) return rc;

    const char *name = NULL;
    if ((rc = jspec_get_string(c, lj, "name", path, 0, &name))) return rc;
    *user_named = name != NULL;
    if (name) {
        if (!valid_name(name)) {
            char p[80];
            jspec_join(p, sizeof p, path, "name");
            return jspec_fail(c, p, "\"%.64s\" is not a valid layer name (1 to 63 characters of A-Z a-z 0-9 _ . -)",
                              name);
        }
        snprintf(L->name, sizeof L->name, "%s", name);
    }

    int act = PSC_ACT_NONE, pad = PSC_PAD_VALID;
    switch (L->type) {
    case PSC_LAYER_DENSE:
        L->use_bias = 1;
        if ((rc = jspec_get_int32(c, lj, "units", path, 1, 1, &L->units))) return rc;
        if ((rc = jspec_get_enum(c, lj, "activation", path, 0, activation_names, 4, &act))) return rc;
        if ((rc = jspec_get_bool(c, lj, "use_bias", path, &L->use_bias))) return rc;
        L->activation = (enum psc_activation)act;
        break;
    case PSC_LAYER_FLATTEN:
        break;
    case PSC_LAYER_CONV2D:
        L->use_bias = 1;
        L->strides[0] = L->strides[1] = 1;
        if ((rc = jspec_get_int32(c, lj, "filters", path, 1, 1, &L->filters))) return rc;
        if ((rc = jspec_get_pair(c, lj, "kernel_size", path, 1, L->kernel_size))) return rc;
        if ((rc = jspec_get_pair(c, lj, "strides", path, 0, L->strides))) return rc;
        if ((rc = jspec_get_enum(c, lj, "padding", path, 0, padding_names, 2, &pad))) return rc;
        if ((rc = jspec_get_enum(c, lj, "activation", path, 0, activation_names, 4, &act))) return rc;
        if ((rc = jspec_get_bool(c, lj, "use_bias", path, &L->use_bias))) return rc;
        L->activation = (enum psc_activation)act;
        L->padding = (enum psc_padding)pad;
        break;
    case PSC_LAYER_MAX_POOL2D:
        L->pool_size[0] = L->pool_size[1] = 2;
        if ((rc = jspec_get_pair(c, lj, "pool_size", path, 0, L->pool_size))) return rc;
        /* Keras: strides default to pool_size. */
        L->strides[0] = L->pool_size[0];
        L->strides[1] = L->pool_size[1];
        if ((rc = jspec_get_pair(c, lj, "strides", path, 0, L->strides))) return rc;
        if ((rc = jspec_get_enum(c, lj, "padding", path, 0, padding_names, 2, &pad))) return rc;
        L->padding = (enum psc_padding)pad;
        break;
    case PSC_LAYER_DROPOUT: {
        double rate = 0;
        if ((rc = jspec_get_number(c, lj, "rate", path, 1, JSPEC_R_UNIT, &rate))) return rc;
        L->rate = (float)rate;
        /* float rounding must not turn a rate just below 1 into 1. */
        if (L->rate >= 1.0f) L->rate = nextafterf(1.0f, 0.0f);
        break;
    }
    case PSC_LAYER_EMBEDDING:
    case PSC_LAYER_WIDE:
        /* table and features name things parsed later: job_spec_ctr.c reads these keys */
        L->table = -1;
        L->hash_ids = 1;
        break;
    case PSC_LAYER_INTERACTION:
    case PSC_LAYER_CONCAT: break;
    }
    return 0;
}

/* Unique user names, then Keras names for the others: "<type>", "<type>_1", ... */
static int name_layers(const jspec_ctx_t *c, psc_layer_spec_t *layers, const int *user_named, int n)
{
    for (int i = 0; i < n; i++) {
        if (!user_named[i]) continue;
        for (int j = 0; j < i; j++)
            if (user_named[j] && strcmp(layers[i].name, layers[j].name) == 0) {
                char p[64];
                snprintf(p, sizeof p, "model.layers[%d].name", i);
                return jspec_fail(c, p, "\"%s\" is already the name of model.layers[%d]", layers[i].name, j);
            }
    }
    int counter[PSC_ARRAY_LEN(layer_type_names)] = {0};
    for (int i = 0; i < n; i++) {
        if (user_named[i]) continue;
        int k = counter[layers[i].type]++;
        const char *tn = layer_type_names[layers[i].type];
        if (k == 0)
            snprintf(layers[i].name, sizeof layers[i].name, "%s", tn);
        else
            snprintf(layers[i].name, sizeof layers[i].name, "%s_%d", tn, k);
        for (int j = 0; j < n; j++)
            if (user_named[j] && strcmp(layers[i].name, layers[j].name) == 0) {
                char p[32];
                snprintf(p, sizeof p, "model.layers[%d]", i);
                return jspec_fail(c, p,
                                  "generated name \"%s\" collides with the name of model.layers[%d]; give one of them "
                                  "another name",
                                  layers[i].name, j);
            }
    }
    return 0;
}

static int parse_model(const jspec_ctx_t *c, const json_t *m, psc_job_spec_t *s)
{
    static const char *const keys[] = {"input_shape", "layers", "loss", NULL};
    char got[64];
    int rc;
    if ((rc = jspec_check_keys(c, m, "model", keys))) return rc;

    /* a recommendation model's input is its dense features: input_shape may be left out */
    const json_t *shape = json_object_get(m, "input_shape"), *lossj = json_object_get(m, "loss");
    int sigmoid =
        json_is_string(lossj) && strcmp(json_string_value(lossj), jspec_loss_names[PSC_LOSS_SIGMOID_XENT]) == 0;
    if (!shape && !sigmoid) return jspec_missing(c, "model.input_shape");
    if (shape && (!json_is_array(shape) || (json_array_size(shape) != 1 && json_array_size(shape) != 3)))
        return jspec_fail(c, "model.input_shape", "expected an array of 1 or 3 positive integers, got %s",
                          jspec_show(shape, got, sizeof got));
    s->input_rank = shape ? (int)json_array_size(shape) : 0; /* 0: set from the data (job_spec_ctr.c) */
    s->input_shape[0] = s->input_shape[1] = s->input_shape[2] = 1;
    for (int i = 0; i < s->input_rank; i++) {
        const json_t *d = json_array_get(shape, (size_t)i);
        char p[32];
        snprintf(p, sizeof p, "model.input_shape[%d]", i);
        if (!json_is_integer(d) || json_integer_value(d) < 1)
            return jspec_fail(c, p, "expected a positive integer, got %s", jspec_show(d, got, sizeof got));
        if (json_integer_value(d) > INT32_MAX)
            return jspec_fail(c, p, "%lld is too large", (long long)json_integer_value(d));
        s->input_shape[i] = (int)json_integer_value(d);
    }

    int loss = PSC_LOSS_SOFTMAX_XENT;
    if ((rc = jspec_get_enum(c, m, "loss", "model", 0, jspec_loss_names, 2, &loss))) return rc;
    s->loss_kind = (enum psc_loss)loss;
    snprintf(s->loss, sizeof s->loss, "%s", jspec_loss_names[loss]);

    const json_t *layers = json_object_get(m, "layers");
    if (!layers) return jspec_missing(c, "model.layers");
    if (!json_is_array(layers) || json_array_size(layers) == 0)
        return jspec_fail(c, "model.layers", "expected a non-empty array of layers, got %s",
                          jspec_show(layers, got, sizeof got));
    if (json_array_size(layers) > 100000) return jspec_fail(c, "model.layers", "too many layers");
    int n = (int)json_array_size(layers);
    s->layers = psc_xcalloc((size_t)n, sizeof *s->layers);
    s->num_layers = n;
    int *user_named = psc_xcalloc((size_t)n, sizeof *user_named);
    for (int i = 0; i < n && !rc; i++)
        rc = parse_layer(c, json_array_get(layers, (size_t)i), i, &s->layers[i], &user_named[i]);
    if (!rc) rc = name_layers(c, s->layers, user_named, n);
    free(user_named);
    return rc;
}

/* ---- the other sections ---- */

static int parse_sections(const jspec_ctx_t *c, const json_t *root, psc_job_spec_t *s)
{
    const json_t *o;
    int rc;

    if ((rc = jspec_get_object(c, root, "data", "", 0, &o))) return rc;
    if ((rc = jspec_parse_data(c, o, s))) return rc;

    if ((rc = jspec_get_int32(c, root, "batch_size_per_replica", "", 0, 1, &s->batch_size))) return rc;
    if ((rc = jspec_get_int32(c, root, "epochs", "", 0, 1, &s->epochs))) return rc;
    if ((rc = jspec_get_int(c, root, "steps", "", 0, 0, INT64_MAX, &s->steps))) return rc;
    if ((rc = jspec_check_follow(c, s))) return rc;

    if ((rc = jspec_get_object(c, root, "sync", "", 0, &o))) return rc;
    if (o) {
        static const char *const keys[] = {"replicas_to_aggregate", "total_num_replicas", "timeout_secs", NULL};
        if ((rc = jspec_check_keys(c, o, "sync", keys))) return rc;
        s->sync = 1;
        if ((rc = jspec_get_int32(c, o, "replicas_to_aggregate", "sync", 1, 1, &s->replicas_to_aggregate))) return rc;
        if ((rc = jspec_get_int32(c, o, "total_num_replicas", "sync", 1, 1, &s->total_num_replicas))) return rc;
        if ((rc = jspec_get_number(c, o, "timeout_secs", "sync", 0, JSPEC_R_POS, &s->sync_timeout_secs))) return rc;
    }

    if ((rc = jspec_get_bool(c, root, "overlap_push_pull", "", &s->overlap_push_pull))) return rc;
    if (s->overlap_push_pull && s->sync)
        return jspec_fail(c, "overlap_push_pull",
                          "needs asynchronous training: a sync replica computes each step at the step the PS are at");

    int64_t pf = -1; /* absent: the worker decides (ctr_job.c) */
    if ((rc = jspec_get_int_in(c, root, "prefetch_rows", "", 0, 0, 1, &pf))) return rc;
    s->prefetch_rows = (int)pf;

    static const char *const dtypes[] = {"float32", "bfloat16"}; /* indexed by PSC_ENC_* */
    if ((rc = jspec_get_enum(c, root, "gradient_dtype", "", 0, dtypes, 2, &s->gradient_dtype))) return rc;
    s->error_feedback = s->gradient_dtype == PSC_ENC_BFLOAT16;
    if (json_object_get(root, "error_feedback") && s->gradient_dtype != PSC_ENC_BFLOAT16)
        return jspec_fail(c, "error_feedback",
                          "applies to rounded gradients only: set \"gradient_dtype\": \"bfloat16\"");
    if ((rc = jspec_get_bool(c, root, "error_feedback", "", &s->error_feedback))) return rc;

    if ((rc = jspec_get_object(c, root, "placement", "", 0, &o))) return rc;
    if (o) {
        static const char *const keys[] = {"strategy", "min_shard_bytes", NULL};
        static const char *const strategies[] = {"round_robin", "greedy_bytes"};
        int st = PSC_PLACE_ROUND_ROBIN;
        int64_t msb = 0;
        if ((rc = jspec_check_keys(c, o, "placement", keys))) return rc;
        if ((rc = jspec_get_enum(c, o, "strategy", "placement", 0, strategies, 2, &st))) return rc;
        if ((rc = jspec_get_int(c, o, "min_shard_bytes", "placement", 0, 0, INT64_MAX, &msb))) return rc;
        s->placement = (enum psc_placement_strategy)st;
        s->min_shard_bytes = (uint64_t)msb;
    }

    if ((rc = jspec_get_object(c, root, "checkpoint", "", 0, &o))) return rc;
    if (o) {
        static const char *const keys[] = {"every_steps", "every_secs", "keep", "on_failure", NULL};
        if ((rc = jspec_check_keys(c, o, "checkpoint", keys))) return rc;
        if ((rc = jspec_get_int(c, o, "every_steps", "checkpoint", 0, 0, INT64_MAX, &s->ckpt_every_steps))) return rc;
        if ((rc = jspec_get_number(c, o, "every_secs", "checkpoint", 0, JSPEC_R_NONNEG, &s->ckpt_every_secs)))
            return rc;
        if ((rc = jspec_get_int32(c, o, "keep", "checkpoint", 0, 1, &s->ckpt_keep))) return rc;
        if ((rc = jspec_get_bool(c, o, "on_failure", "checkpoint", &s->ckpt_on_failure))) return rc;
    }
    if ((rc = jspec_get_bool(c, root, "allow_partial", "", &s->allow_partial))) return rc;

    int64_t seed = (int64_t)s->seed;
    if ((rc = jspec_get_int(c, root, "seed", "", 0, 0, INT64_MAX, &seed))) return rc;
    s->seed = (uint64_t)seed;
    return 0;
}

/* ---- job id ---- */

static void fnv_printf(uint64_t *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void fnv_printf(uint64_t *h, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    PSC_ASSERT(n >= 0 && (size_t)n < sizeof buf);
    for (int i = 0; i < n; i++) {
        *h ^= (unsigned char)buf[i];
        *h *= 0x100000001b3ull;
    }
}

/* The optimizer's line of the canonical text (the text of psc-job-v1, unchanged),
 * then FTRL's parameters and the schedule, each only when used. */
static void hash_optimizer(uint64_t *h, const char *tag, const psc_optim_config_t *o)
{
    fnv_printf(h,
               "%s %s lr=%.9g momentum=%.9g nesterov=%d beta1=%.9g beta2=%.9g epsilon=%.9g iav=%.9g "
               "decay=%.9g\n",
               tag, psc_optim_name(o->kind), (double)o->learning_rate, (double)o->momentum, o->use_nesterov,
               (double)o->beta1, (double)o->beta2, (double)o->epsilon, (double)o->initial_accumulator_value,
               (double)o->decay);
    if (o->kind == PSC_OPT_FTRL)
        fnv_printf(h, "%s ftrl lr_power=%.9g l1=%.9g l2=%.9g\n", tag, (double)o->learning_rate_power, (double)o->l1,
                   (double)o->l2);
    const psc_lr_schedule_t *sc = &o->schedule;
    if (sc->kind == PSC_LR_CONSTANT) return;
    fnv_printf(h,
               "%s schedule %s decay_steps=%lld rate=%.9g staircase=%d alpha=%.9g warmup_steps=%lld "
               "warmup_target=%.9g",
               tag, psc_lr_kind_name(sc->kind), (long long)sc->decay_steps, (double)sc->decay_rate, sc->staircase,
               (double)sc->alpha, (long long)sc->warmup_steps, (double)sc->warmup_target);
    if (sc->kind == PSC_LR_PIECEWISE) {
        for (int i = 0; i < sc->nboundaries; i++) fnv_printf(h, " b%d=%lld", i, (long long)sc->boundaries[i]);
        for (int i = 0; i <= sc->nboundaries; i++) fnv_printf(h, " v%d=%.9g", i, (double)sc->values[i]);
    }
    fnv_printf(h, "\n");
}

/* An embedding or wide layer's line: its table and its features (cat_index values). */
static void hash_lookup_layer(uint64_t *h, const psc_job_spec_t *s, int i)
{
    const psc_layer_spec_t *L = &s->layers[i];
    fnv_printf(h, "layer %d table=%s combiner=%s hash_ids=%d features", i, s->tables[L->table].name,
               jspec_combiner_names[L->combiner], L->hash_ids);
    for (int f = 0; f < L->num_features; f++) fnv_printf(h, " %d", L->features[f]);
    fnv_printf(h, "\n");
}

/* A recommendation model's inputs: the data format and every feature (which
 * columns feed what, and the dense transform, are part of the model). */
static void hash_features(uint64_t *h, const psc_job_spec_t *s)
{
    fnv_printf(h, "data format=%s\n", jspec_format_names[s->data_format]);
    for (int i = 0; i < s->num_features; i++) {
        const psc_feature_spec_t *F = &s->features[i];
        fnv_printf(h, "feature %d name=%s role=%s kind=%s length=%d transform=%s\n", i, F->name,
                   jspec_role_names[F->role], jspec_kind_names[F->kind], F->length,
                   jspec_transform_names[F->transform]);
    }
}

/* FNV-1a 64 of a canonical text: one line per part, fixed field order and formats. The
 * lines of a recommendation model (loss sigmoid_cross_entropy: its lookup layers' tables
 * and features, its data's features) appear only there, so other ids are unchanged.
 * The placement (strategy, min_shard_bytes) and the tables' partition strategies are
 * not part of the id: a checkpoint restores re-split onto any of them. The id of psc
 * before that (with them: legacy) names the checkpoints such a psc wrote. */
static void compute_job_id(psc_job_spec_t *s, int legacy, char *out)
{
    uint64_t h = 0xcbf29ce484222325ull;
    fnv_printf(&h, "psc-job-v1\ninput %d %d %d %d\n", s->input_rank, s->input_shape[0], s->input_shape[1],
               s->input_shape[2]);
    for (int i = 0; i < s->num_layers; i++) {
        const psc_layer_spec_t *L = &s->layers[i];
        fnv_printf(&h,
                   "layer %d type=%s name=%s act=%s units=%d bias=%d filters=%d kernel=%dx%d strides=%dx%d "
                   "pool=%dx%d pad=%s rate=%.9g\n",
                   i, layer_type_names[L->type], L->name, activation_names[L->activation], L->units, L->use_bias,
                   L->filters, L->kernel_size[0], L->kernel_size[1], L->strides[0], L->strides[1], L->pool_size[0],
                   L->pool_size[1], padding_names[L->padding], (double)L->rate);
        if (L->type == PSC_LAYER_EMBEDDING || L->type == PSC_LAYER_WIDE) hash_lookup_layer(&h, s, i);
    }
    fnv_printf(&h, "loss %s\n", s->loss);
    if (s->data_format != PSC_DATA_IDX) hash_features(&h, s);
    hash_optimizer(&h, "optimizer", &s->optimizer);
    if (legacy)
        fnv_printf(&h, "placement %s min_shard_bytes=%llu\n",
                   s->placement == PSC_PLACE_GREEDY_BYTES ? "greedy_bytes" : "round_robin",
                   (unsigned long long)s->min_shard_bytes);
    fnv_printf(&h, "seed %llu\n", (unsigned long long)s->seed);
    for (int i = 0; i < s->num_tables; i++) {
        const psc_table_spec_t *T = &s->tables[i];
        fnv_printf(&h, "table %d name=%s rows=%lld dim=%d init=%s a=%.9g b=%.9g", i, T->name, (long long)T->rows,
                   T->dim, psc_init_kind_name(T->init.kind), (double)T->init.a, (double)T->init.b);
        if (legacy) fnv_printf(&h, " partition=%s", psc_partition_name(T->partition));
        fnv_printf(&h, "\n");
        hash_optimizer(&h, "table_optimizer", &T->optimizer);
    }
    const psc_warm_start_t *w = &s->warm_start; /* a warm-started job is another job (other ids unchanged) */
    if (w->on) {
        fnv_printf(&h, "warm_start from=%s checkpoint=%llu variables=%s tables=%d:", w->from,
                   (unsigned long long)w->checkpoint, w->variables, w->all_tables ? -1 : w->ntables);
        for (int i = 0; i < w->ntables; i++) fnv_printf(&h, "%s,", w->tables[i]);
        if (w->slots || w->carry_step) fnv_printf(&h, " slots=%d global_step=%d", w->slots, w->carry_step);
    }
    snprintf(out, 17, "%016llx", (unsigned long long)h);
}

/* ---- entry points ---- */

static int model_check(const jspec_ctx_t *c, const psc_job_spec_t *s)
{
    char merr[384];
    return psc_model_check(s, merr, sizeof merr) ? jspec_fail(c, "", "%s", merr) : 0;
}

/* The layers against the input shape (refused here, not by a worker minutes
 * later) and the tables. A softmax model is checked before its tables are read;
 * a recommendation model's layers name tables and features, so its tables and
 * data come first, then its layers' lookups, the model, and the tables' names
 * against the model's variables. */
static int check_model_tables(const jspec_ctx_t *c, const json_t *root, const json_t *model, psc_job_spec_t *s)
{
    int rc;
    if (s->loss_kind == PSC_LOSS_SOFTMAX_XENT && s->data_format == PSC_DATA_IDX) {
        if ((rc = model_check(c, s))) return rc;
        return jspec_parse_tables(c, root, s, 1);
    }
    if ((rc = jspec_check_loss_data(c, model, s))) return rc;
    if ((rc = jspec_parse_tables(c, root, s, 0))) return rc;
    if ((rc = jspec_parse_ctr_layers(c, json_object_get(model, "layers"), s))) return rc;
    if ((rc = model_check(c, s))) return rc;
    return jspec_check_table_names(c, s);
}

static int parse_with(const jspec_ctx_t *c, const char *json, size_t len, psc_job_spec_t *out)
{
    memset(out, 0, sizeof *out);
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return psc_seterr(c->err, c->errlen, PSC_ECONFIG, "%sinvalid JSON at line %d column %d: %s", c->pfx, je.line,
                          je.column, je.text);

    static const char *const keys[] = {"model",
                                       "optimizer",
                                       "data",
                                       "batch_size_per_replica",
                                       "epochs",
                                       "steps",
                                       "sync",
                                       "placement",
                                       "checkpoint",
                                       "seed",
                                       "overlap_push_pull",
                                       "gradient_dtype",
                                       "error_feedback",
                                       "prefetch_rows",
                                       "tables",
                                       "allow_partial",
                                       "warm_start",
                                       NULL};
    psc_job_spec_t *s = out;
    snprintf(s->train_path, sizeof s->train_path, "%s", DEFAULT_TRAIN);
    snprintf(s->test_path, sizeof s->test_path, "%s", DEFAULT_TEST);
    s->batch_size = 64;
    s->shuffle = 1;
    s->epochs = 1;
    s->sync_timeout_secs = 30.0;
    s->ckpt_keep = 5;
    s->seed = 42;

    int rc;
    const json_t *o;
    char got[64];
    if (!json_is_object(root)) {
        rc = psc_seterr(c->err, c->errlen, PSC_ECONFIG, "%sexpected a JSON object at the top level, got %s", c->pfx,
                        jspec_show(root, got, sizeof got));
        goto out;
    }
    if ((rc = jspec_check_keys(c, root, "", keys))) goto out;
    const json_t *model;
    if ((rc = jspec_get_object(c, root, "model", "", 1, &model))) goto out;
    if ((rc = parse_model(c, model, s))) goto out;
    if ((rc = jspec_get_object(c, root, "optimizer", "", 1, &o))) goto out;
    if ((rc = jspec_parse_optimizer(c, o, "optimizer", &s->optimizer))) goto out;
    if ((rc = parse_sections(c, root, s))) goto out;
    if ((rc = check_model_tables(c, root, model, s))) goto out;
    if ((rc = jspec_parse_warm_start(c, root, s))) goto out;
    compute_job_id(s, 0, s->job_id);
    compute_job_id(s, 1, s->legacy_job_id);

out:
    json_decref(root);
    if (rc) psc_job_spec_deinit(out);
    return rc;
}

int psc_job_spec_parse(const char *json, psc_job_spec_t *out, char *err, size_t errlen)
{
    jspec_ctx_t c = {"job spec: ", err, errlen};
    if (!json) {
        memset(out, 0, sizeof *out);
        return psc_seterr(err, errlen, PSC_ECONFIG, "job spec: no text");
    }
    return parse_with(&c, json, strlen(json), out);
}

int psc_job_spec_load(const char *path, psc_job_spec_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    size_t len;
    char *buf = psc_read_file(path, (size_t)16 << 20, &len);
    if (!buf) return psc_seterr(err, errlen, PSC_ECONFIG, "job spec %s: cannot read: %s", path, strerror(errno));

    size_t plen = strlen(path) + 16;
    char *pfx = psc_xmalloc(plen);
    snprintf(pfx, plen, "job spec %s: ", path);
    jspec_ctx_t c = {pfx, err, errlen};
    int rc = parse_with(&c, buf, len, out);
    free(pfx);
    free(buf);
    return rc;
}

void psc_job_spec_deinit(psc_job_spec_t *s)
{
    if (!s) return;
    free(s->layers);
    free(s->tables);
    for (int i = 0; i < s->num_train_files; i++) free(s->train_files[i]);
    free(s->train_files);
    for (int i = 0; i < s->num_test_files; i++) free(s->test_files[i]);
    free(s->test_files);
    free(s->features);
    memset(s, 0, sizeof *s);
}

/* ---- checks at start ---- */

/* The cluster checks of psc_job_spec_check, with messages starting with pfx. */
static int check_cluster(const char *pfx, const psc_job_spec_t *s, const psc_cluster_t *cluster, char *err,
                         size_t errlen)
{
    char merr[384];
    if (psc_model_check(s, merr, sizeof merr)) return psc_seterr(err, errlen, PSC_ECONFIG, "%s%s", pfx, merr);
    if (cluster->n[PSC_JOB_PS] < 1)
        return psc_seterr(err, errlen, PSC_ECONFIG, "cluster: no ps task; a job needs at least one ps_server");
    int replicas = psc_cluster_num_replicas(cluster);
    if (replicas < 1)
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "cluster: no chief or worker task; a job needs at least one training replica");
    if (s->sync && s->total_num_replicas != replicas)
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "%ssync.total_num_replicas is %d but the cluster has %d training replica%s "
                          "(chief + workers): set it to %d",
                          pfx, s->total_num_replicas, replicas, replicas == 1 ? "" : "s", replicas);
    return 0;
}

int psc_job_spec_check(const psc_job_spec_t *s, const psc_cluster_t *cluster, char *err, size_t errlen)
{
    return check_cluster("job spec: ", s, cluster, err, errlen);
}

/* 0 when PATH.gz or PATH is readable (the reader tries .gz first); else PATH's errno. */
static int idx_file_readable(const char *path)
{
    char gz[600];
    snprintf(gz, sizeof gz, "%s.gz", path);
    if (access(gz, R_OK) == 0) return 0;
    if (access(path, R_OK) == 0) return 0;
    return errno ? errno : ENOENT;
}

static int check_idx_pair(const char *pfx, const char *key, const char *prefix, char *err, size_t errlen)
{
    static const char *const suffixes[] = {"-images-idx3-ubyte", "-labels-idx1-ubyte"};
    for (size_t i = 0; i < PSC_ARRAY_LEN(suffixes); i++) {
        char path[560];
        snprintf(path, sizeof path, "%s%s", prefix, suffixes[i]);
        int e = idx_file_readable(path);
        if (e)
            return psc_seterr(err, errlen, PSC_ECONFIG, "%s%s: cannot read %s[.gz]: %s", pfx, key, path,
                              strerror(e));
    }
    return 0;
}

static int check_data(const char *pfx, const psc_job_spec_t *s, int train, int test, char *err, size_t errlen)
{
    int rc;
    if (s->data_format != PSC_DATA_IDX) return jspec_check_data_files(pfx, s, train, test, err, errlen);
    if (train && (rc = check_idx_pair(pfx, "data.train", s->train_path, err, errlen))) return rc;
    if (test && (rc = check_idx_pair(pfx, "data.test", s->test_path, err, errlen))) return rc;
    return 0;
}

int psc_job_spec_check_data(const psc_job_spec_t *s, int train, int test, char *err, size_t errlen)
{
    return check_data("job spec: ", s, train, test, err, errlen);
}

int psc_job_spec_load_checked(const char *path, const psc_cluster_t *cluster, int train, int test,
                              psc_job_spec_t *out, char *err, size_t errlen)
{
    int rc = psc_job_spec_load(path, out, err, errlen);
    if (rc) return rc;
    size_t plen = strlen(path) + 16;
    char *pfx = psc_xmalloc(plen);
    snprintf(pfx, plen, "job spec %s: ", path);
    rc = check_cluster(pfx, out, cluster, err, errlen);
    if (!rc) rc = check_data(pfx, out, train, test, err, errlen);
    free(pfx);
    if (rc) psc_job_spec_deinit(out);
    return rc;
}
