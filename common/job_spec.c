/* job_spec.c — strict parsing of the Keras-like JSON job spec (see job_spec.h).
 *
 * Design: jansson parses the text; each object level is checked against its list of
 * allowed keys before its values are read, and each value goes through one typed
 * getter (integer, number, bool, string, enum, int-or-pair) that writes the error
 * "<prefix><key path>: <problem>". Defaults are written first, so a parsed spec is
 * complete. The job id is FNV-1a 64 over a canonical text of everything that
 * defines the model and its training math (shapes, layers, loss, optimizer,
 * placement, seed), printed with fixed formats so that equal specs hash equally.
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

#include "model_spec.h"
#include "psc.h"
#include "wire.h"

#include <errno.h>
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_TRAIN "/usr/share/datasets/fashion-mnist/train"
#define DEFAULT_TEST "/usr/share/datasets/fashion-mnist/t10k"
#define LOSS_SPARSE_CE "sparse_softmax_cross_entropy"

/* Where errors go and what they start with ("job spec: " or "job spec FILE: "). */
typedef struct ctx {
    const char *pfx;
    char *err;
    size_t errlen;
} ctx_t;

static int fail(const ctx_t *c, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int fail(const ctx_t *c, const char *path, const char *fmt, ...)
{
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return psc_seterr(c->err, c->errlen, PSC_ECONFIG, "%s%s%s%s", c->pfx, path, *path ? ": " : "", msg);
}

/* "parent.key", or "key" at the top level. */
static void join(char *buf, size_t n, const char *parent, const char *key)
{
    if (*parent)
        snprintf(buf, n, "%s.%s", parent, key);
    else
        snprintf(buf, n, "%s", key);
}

/* A short rendering of a JSON value for "got ..." in messages. */
static const char *show(const json_t *v, char *buf, size_t n)
{
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!s) {
        snprintf(buf, n, "?");
        return buf;
    }
    if (strlen(s) > 40)
        snprintf(buf, n, "%.37s...", s);
    else
        snprintf(buf, n, "%s", s);
    free(s);
    return buf;
}

/* ---- generic getters: absent keys keep the caller's default ---- */

static int check_keys(const ctx_t *c, const json_t *obj, const char *path, const char *const *allowed)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v) {
        int ok = 0;
        for (const char *const *a = allowed; *a; a++)
            if (strcmp(key, *a) == 0) ok = 1;
        if (!ok) {
            char p[256], list[256] = "";
            join(p, sizeof p, path, key);
            for (const char *const *a = allowed; *a; a++) {
                size_t l = strlen(list);
                snprintf(list + l, sizeof list - l, "%s%s", l ? ", " : "", *a);
            }
            return fail(c, p, "unknown key (expected one of: %s)", list);
        }
    }
    return 0;
}

static int missing(const ctx_t *c, const char *path) { return fail(c, path, "missing (required)"); }

/* An integer in [min, max]. */
static int get_int(const ctx_t *c, const json_t *obj, const char *key, const char *parent, int required,
                   int64_t min, int64_t max, int64_t *out)
{
    char p[256], got[64];
    join(p, sizeof p, parent, key);
    const json_t *v = json_object_get(obj, key);
    if (!v) return required ? missing(c, p) : 0;
    if (!json_is_integer(v) || json_integer_value(v) < min) {
        if (min == 1) return fail(c, p, "expected a positive integer, got %s", show(v, got, sizeof got));
        if (min == 0) return fail(c, p, "expected a non-negative integer, got %s", show(v, got, sizeof got));
        return fail(c, p, "expected an integer >= %lld, got %s", (long long)min, show(v, got, sizeof got));
    }
    if (json_integer_value(v) > max)
        return fail(c, p, "%lld is too large (max %lld)", (long long)json_integer_value(v), (long long)max);
    *out = (int64_t)json_integer_value(v);
    return 0;
}

static int get_int32(const ctx_t *c, const json_t *obj, const char *key, const char *parent, int required, int min,
                     int *out)
{
    int64_t v = *out;
    int rc = get_int(c, obj, key, parent, required, min, INT32_MAX, &v);
    if (!rc) *out = (int)v;
    return rc;
}

/* A number (integer or real) with a lower and an optional upper bound. */
typedef struct range {
    double lo;
    int lo_open; /* lo excluded */
    double hi;   /* INFINITY: none */
    int hi_open;
} range_t;

static const range_t R_POS = {0, 1, INFINITY, 0};
static const range_t R_NONNEG = {0, 0, INFINITY, 0};
static const range_t R_UNIT = {0, 0, 1, 1}; /* [0, 1) */

static int get_number(const ctx_t *c, const json_t *obj, const char *key, const char *parent, int required, range_t r,
                      double *out)
{
    char p[256], got[64];
    join(p, sizeof p, parent, key);
    const json_t *v = json_object_get(obj, key);
    if (!v) return required ? missing(c, p) : 0;
    double x = json_is_number(v) ? json_number_value(v) : NAN;
    int ok = json_is_number(v) && isfinite(x) && (r.lo_open ? x > r.lo : x >= r.lo) &&
             (isinf(r.hi) || (r.hi_open ? x < r.hi : x <= r.hi));
    if (!ok) {
        if (isinf(r.hi))
            return fail(c, p, "expected a number %s %g, got %s", r.lo_open ? ">" : ">=", r.lo,
                        show(v, got, sizeof got));
        return fail(c, p, "expected a number in %c%g, %g%c, got %s", r.lo_open ? '(' : '[', r.lo, r.hi,
                    r.hi_open ? ')' : ']', show(v, got, sizeof got));
    }
    *out = x;
    return 0;
}

/* A number stored as float32: also rejects values float cannot hold. */
static int get_float(const ctx_t *c, const json_t *obj, const char *key, const char *parent, range_t r, float *out)
{
    double x = *out;
    int rc = get_number(c, obj, key, parent, 0, r, &x);
    if (rc) return rc;
    if (fabs(x) > FLT_MAX || (x != 0 && (float)x == 0.0f)) {
        char p[256];
        join(p, sizeof p, parent, key);
        return fail(c, p, "%g does not fit a float32", x);
    }
    *out = (float)x;
    return 0;
}

static int get_bool(const ctx_t *c, const json_t *obj, const char *key, const char *parent, int *out)
{
    char p[256], got[64];
    join(p, sizeof p, parent, key);
    const json_t *v = json_object_get(obj, key);
    if (!v) return 0;
    if (!json_is_boolean(v)) return fail(c, p, "expected true or false, got %s", show(v, got, sizeof got));
    *out = json_is_true(v);
    return 0;
}

static int get_string(const ctx_t *c, const json_t *obj, const char *key, const char *parent, int required,
                      const char **out)
{
    char p[256], got[64];
    join(p, sizeof p, parent, key);
    const json_t *v = json_object_get(obj, key);
    if (!v) return required ? missing(c, p) : 0;
    if (!json_is_string(v)) return fail(c, p, "expected a string, got %s", show(v, got, sizeof got));
    *out = json_string_value(v);
    return 0;
}

/* A string that must be one of names[0..n) (NULL entries skipped); *out = its index. */
static int get_enum(const ctx_t *c, const json_t *obj, const char *key, const char *parent, int required,
                    const char *const *names, int n, int *out)
{
    const char *s = NULL;
    int rc = get_string(c, obj, key, parent, required, &s);
    if (rc || !s) return rc;
    char list[256] = "";
    for (int i = 0; i < n; i++) {
        if (!names[i]) continue;
        if (strcmp(s, names[i]) == 0) {
            *out = i;
            return 0;
        }
        size_t l = strlen(list);
        snprintf(list + l, sizeof list - l, "%s%s", l ? "|" : "", names[i]);
    }
    char p[256];
    join(p, sizeof p, parent, key);
    return fail(c, p, "unknown value \"%.64s\" (expected %s)", s, list);
}

/* A positive int k (meaning (k, k)) or a pair [h, w] of positive ints. */
static int get_pair(const ctx_t *c, const json_t *obj, const char *key, const char *parent, int required, int out[2])
{
    char p[256], got[64];
    join(p, sizeof p, parent, key);
    const json_t *v = json_object_get(obj, key);
    if (!v) return required ? missing(c, p) : 0;
    int64_t a, b;
    if (json_is_integer(v)) {
        a = b = json_integer_value(v);
    } else if (json_is_array(v) && json_array_size(v) == 2 && json_is_integer(json_array_get(v, 0)) &&
               json_is_integer(json_array_get(v, 1))) {
        a = json_integer_value(json_array_get(v, 0));
        b = json_integer_value(json_array_get(v, 1));
    } else {
        return fail(c, p, "expected a positive integer or a pair [h, w] of positive integers, got %s",
                    show(v, got, sizeof got));
    }
    if (a < 1 || b < 1 || a > INT32_MAX || b > INT32_MAX)
        return fail(c, p, "expected a positive integer or a pair [h, w] of positive integers, got %s",
                    show(v, got, sizeof got));
    out[0] = (int)a;
    out[1] = (int)b;
    return 0;
}

/* An optional sub-object; *out = NULL when absent. */
static int get_object(const ctx_t *c, const json_t *obj, const char *key, int required, const json_t **out)
{
    char got[64];
    const json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (!v) return required ? missing(c, key) : 0;
    if (!json_is_object(v)) return fail(c, key, "expected an object, got %s", show(v, got, sizeof got));
    *out = v;
    return 0;
}

/* ---- model ---- */

static const char *const layer_type_names[] = {"dense", "flatten", "conv2d", "max_pool2d", "dropout"};
static const char *const activation_names[] = {"linear", "relu", "tanh", "sigmoid"};
static const char *const padding_names[] = {"valid", "same"};
static const char *const layer_keys[][9] = {
    [PSC_LAYER_DENSE] = {"type", "name", "units", "activation", "use_bias", NULL},
    [PSC_LAYER_FLATTEN] = {"type", "name", NULL},
    [PSC_LAYER_CONV2D] = {"type", "name", "filters", "kernel_size", "strides", "padding", "activation", "use_bias",
                          NULL},
    [PSC_LAYER_MAX_POOL2D] = {"type", "name", "pool_size", "strides", "padding", NULL},
    [PSC_LAYER_DROPOUT] = {"type", "name", "rate", NULL},
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
static int parse_layer(const ctx_t *c, const json_t *lj, int i, psc_layer_spec_t *L, int *user_named)
{
    char path[64], got[64];
    snprintf(path, sizeof path, "model.layers[%d]", i);
    if (!json_is_object(lj)) return fail(c, path, "expected an object, got %s", show(lj, got, sizeof got));
    int type = -1, rc;
    if ((rc = get_enum(c, lj, "type", path, 1, layer_type_names, (int)PSC_ARRAY_LEN(layer_type_names), &type)))
        return rc;
    L->type = (enum psc_layer_type)type;
    if ((rc = check_keys(c, lj, path, layer_keys[type]))) return rc;

    const char *name = NULL;
    if ((rc = get_string(c, lj, "name", path, 0, &name))) return rc;
    *user_named = name != NULL;
    if (name) {
        if (!valid_name(name)) {
            char p[80];
            join(p, sizeof p, path, "name");
            return fail(c, p, "\"%.64s\" is not a valid layer name (1 to 63 characters of A-Z a-z 0-9 _ . -)", name);
        }
        snprintf(L->name, sizeof L->name, "%s", name);
    }

    int act = PSC_ACT_NONE, pad = PSC_PAD_VALID;
    switch (L->type) {
    case PSC_LAYER_DENSE:
        L->use_bias = 1;
        if ((rc = get_int32(c, lj, "units", path, 1, 1, &L->units))) return rc;
        if ((rc = get_enum(c, lj, "activation", path, 0, activation_names, 4, &act))) return rc;
        if ((rc = get_bool(c, lj, "use_bias", path, &L->use_bias))) return rc;
        L->activation = (enum psc_activation)act;
        break;
    case PSC_LAYER_FLATTEN:
        break;
    case PSC_LAYER_CONV2D:
        L->use_bias = 1;
        L->strides[0] = L->strides[1] = 1;
        if ((rc = get_int32(c, lj, "filters", path, 1, 1, &L->filters))) return rc;
        if ((rc = get_pair(c, lj, "kernel_size", path, 1, L->kernel_size))) return rc;
        if ((rc = get_pair(c, lj, "strides", path, 0, L->strides))) return rc;
        if ((rc = get_enum(c, lj, "padding", path, 0, padding_names, 2, &pad))) return rc;
        if ((rc = get_enum(c, lj, "activation", path, 0, activation_names, 4, &act))) return rc;
        if ((rc = get_bool(c, lj, "use_bias", path, &L->use_bias))) return rc;
        L->activation = (enum psc_activation)act;
        L->padding = (enum psc_padding)pad;
        break;
    case PSC_LAYER_MAX_POOL2D:
        L->pool_size[0] = L->pool_size[1] = 2;
        if ((rc = get_pair(c, lj, "pool_size", path, 0, L->pool_size))) return rc;
        /* Keras: strides default to pool_size. */
        L->strides[0] = L->pool_size[0];
        L->strides[1] = L->pool_size[1];
        if ((rc = get_pair(c, lj, "strides", path, 0, L->strides))) return rc;
        if ((rc = get_enum(c, lj, "padding", path, 0, padding_names, 2, &pad))) return rc;
        L->padding = (enum psc_padding)pad;
        break;
    case PSC_LAYER_DROPOUT: {
        double rate = 0;
        if ((rc = get_number(c, lj, "rate", path, 1, R_UNIT, &rate))) return rc;
        L->rate = (float)rate;
        /* float rounding must not turn a rate just below 1 into 1. */
        if (L->rate >= 1.0f) L->rate = nextafterf(1.0f, 0.0f);
        break;
    }
    }
    return 0;
}

/* Unique user names, then Keras names for the others: "<type>", "<type>_1", ... */
static int name_layers(const ctx_t *c, psc_layer_spec_t *layers, const int *user_named, int n)
{
    for (int i = 0; i < n; i++) {
        if (!user_named[i]) continue;
        for (int j = 0; j < i; j++)
            if (user_named[j] && strcmp(layers[i].name, layers[j].name) == 0) {
                char p[64];
                snprintf(p, sizeof p, "model.layers[%d].name", i);
                return fail(c, p, "\"%s\" is already the name of model.layers[%d]", layers[i].name, j);
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
                return fail(c, p,
                            "generated name \"%s\" collides with the name of model.layers[%d]; give one of them "
                            "another name",
                            layers[i].name, j);
            }
    }
    return 0;
}

static int parse_model(const ctx_t *c, const json_t *m, psc_job_spec_t *s)
{
    static const char *const keys[] = {"input_shape", "layers", "loss", NULL};
    char got[64];
    int rc;
    if ((rc = check_keys(c, m, "model", keys))) return rc;

    const json_t *shape = json_object_get(m, "input_shape");
    if (!shape) return missing(c, "model.input_shape");
    if (!json_is_array(shape) || (json_array_size(shape) != 1 && json_array_size(shape) != 3))
        return fail(c, "model.input_shape", "expected an array of 1 or 3 positive integers, got %s",
                    show(shape, got, sizeof got));
    s->input_rank = (int)json_array_size(shape);
    s->input_shape[0] = s->input_shape[1] = s->input_shape[2] = 1;
    for (int i = 0; i < s->input_rank; i++) {
        const json_t *d = json_array_get(shape, (size_t)i);
        char p[32];
        snprintf(p, sizeof p, "model.input_shape[%d]", i);
        if (!json_is_integer(d) || json_integer_value(d) < 1)
            return fail(c, p, "expected a positive integer, got %s", show(d, got, sizeof got));
        if (json_integer_value(d) > INT32_MAX)
            return fail(c, p, "%lld is too large", (long long)json_integer_value(d));
        s->input_shape[i] = (int)json_integer_value(d);
    }

    int loss = 0;
    static const char *const losses[] = {LOSS_SPARSE_CE};
    if ((rc = get_enum(c, m, "loss", "model", 0, losses, 1, &loss))) return rc;
    snprintf(s->loss, sizeof s->loss, "%s", LOSS_SPARSE_CE);

    const json_t *layers = json_object_get(m, "layers");
    if (!layers) return missing(c, "model.layers");
    if (!json_is_array(layers) || json_array_size(layers) == 0)
        return fail(c, "model.layers", "expected a non-empty array of layers, got %s", show(layers, got, sizeof got));
    if (json_array_size(layers) > 100000) return fail(c, "model.layers", "too many layers");
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

/* ---- optimizer ---- */

static const char *const optim_names[] = {"gradient_descent", "momentum", "adagrad", "adam", "rmsprop"};

const char *psc_optim_name(enum psc_optim_kind k)
{
    if ((int)k < 0 || (size_t)k >= PSC_ARRAY_LEN(optim_names)) return "unknown";
    return optim_names[k];
}

#define OPT_BIT(k) (1u << (k))
static const struct {
    const char *key;
    unsigned kinds; /* optimizers that take it */
} optim_params[] = {
    {"momentum", OPT_BIT(PSC_OPT_MOMENTUM) | OPT_BIT(PSC_OPT_RMSPROP)},
    {"use_nesterov", OPT_BIT(PSC_OPT_MOMENTUM)},
    {"initial_accumulator_value", OPT_BIT(PSC_OPT_ADAGRAD)},
    {"beta1", OPT_BIT(PSC_OPT_ADAM)},
    {"beta2", OPT_BIT(PSC_OPT_ADAM)},
    {"epsilon", OPT_BIT(PSC_OPT_ADAM) | OPT_BIT(PSC_OPT_RMSPROP)},
    {"decay", OPT_BIT(PSC_OPT_RMSPROP)},
};

static int parse_optimizer(const ctx_t *c, const json_t *o, psc_optim_config_t *opt)
{
    static const char *const names[] = {"gradient_descent", "momentum", "adagrad", "adam", "rmsprop", "sgd"};
    int kind = 0, rc;
    if ((rc = get_enum(c, o, "name", "optimizer", 1, names, (int)PSC_ARRAY_LEN(names), &kind))) return rc;
    if (kind == 5) kind = PSC_OPT_SGD;
    memset(opt, 0, sizeof *opt);
    opt->kind = (enum psc_optim_kind)kind;

    const char *key;
    json_t *v;
    json_object_foreach((json_t *)o, key, v) {
        if (strcmp(key, "name") == 0 || strcmp(key, "learning_rate") == 0) continue;
        int known = 0;
        for (size_t i = 0; i < PSC_ARRAY_LEN(optim_params); i++) {
            if (strcmp(key, optim_params[i].key) != 0) continue;
            known = 1;
            if (!(optim_params[i].kinds & OPT_BIT(kind))) {
                char p[256];
                join(p, sizeof p, "optimizer", key);
                return fail(c, p, "not a parameter of %s", optim_names[kind]);
            }
        }
        if (!known) {
            char p[256], list[256] = "name, learning_rate";
            join(p, sizeof p, "optimizer", key);
            for (size_t i = 0; i < PSC_ARRAY_LEN(optim_params); i++)
                if (optim_params[i].kinds & OPT_BIT(kind)) {
                    size_t l = strlen(list);
                    snprintf(list + l, sizeof list - l, ", %s", optim_params[i].key);
                }
            return fail(c, p, "unknown key (%s takes: %s)", optim_names[kind], list);
        }
    }

    static const float default_lr[] = {0.01f, 0.01f, 0.01f, 0.001f, 0.001f};
    opt->learning_rate = default_lr[kind];
    if ((rc = get_float(c, o, "learning_rate", "optimizer", R_POS, &opt->learning_rate))) return rc;
    switch (opt->kind) {
    case PSC_OPT_SGD:
        break;
    case PSC_OPT_MOMENTUM:
        opt->momentum = 0.9f;
        if ((rc = get_float(c, o, "momentum", "optimizer", R_NONNEG, &opt->momentum))) return rc;
        if ((rc = get_bool(c, o, "use_nesterov", "optimizer", &opt->use_nesterov))) return rc;
        break;
    case PSC_OPT_ADAGRAD:
        opt->initial_accumulator_value = 0.1f;
        if ((rc = get_float(c, o, "initial_accumulator_value", "optimizer", R_POS, &opt->initial_accumulator_value)))
            return rc;
        break;
    case PSC_OPT_ADAM:
        opt->beta1 = 0.9f;
        opt->beta2 = 0.999f;
        opt->epsilon = 1e-8f;
        if ((rc = get_float(c, o, "beta1", "optimizer", R_UNIT, &opt->beta1))) return rc;
        if ((rc = get_float(c, o, "beta2", "optimizer", R_UNIT, &opt->beta2))) return rc;
        if ((rc = get_float(c, o, "epsilon", "optimizer", R_POS, &opt->epsilon))) return rc;
        /* float rounding of e.g. 0.99999999 gives 1, which would divide by zero. */
        if (opt->beta1 >= 1.0f || opt->beta2 >= 1.0f)
            return fail(c, opt->beta1 >= 1.0f ? "optimizer.beta1" : "optimizer.beta2", "rounds to 1 as a float32");
        break;
    case PSC_OPT_RMSPROP:
        opt->decay = 0.9f;
        opt->momentum = 0.0f;
        opt->epsilon = 1e-10f;
        if ((rc = get_float(c, o, "decay", "optimizer", R_UNIT, &opt->decay))) return rc;
        if ((rc = get_float(c, o, "momentum", "optimizer", R_NONNEG, &opt->momentum))) return rc;
        if ((rc = get_float(c, o, "epsilon", "optimizer", R_POS, &opt->epsilon))) return rc;
        if (opt->decay >= 1.0f) return fail(c, "optimizer.decay", "rounds to 1 as a float32");
        break;
    }
    return 0;
}

/* ---- the other sections ---- */

static int get_path(const ctx_t *c, const json_t *obj, const char *key, char *dst, size_t dstlen)
{
    const char *s = NULL;
    char p[64];
    int rc = get_string(c, obj, key, "data", 0, &s);
    if (rc || !s) return rc;
    join(p, sizeof p, "data", key);
    if (!*s) return fail(c, p, "expected a non-empty path");
    if (strlen(s) >= dstlen) return fail(c, p, "path too long (%zu bytes, max %zu)", strlen(s), dstlen - 1);
    snprintf(dst, dstlen, "%s", s);
    return 0;
}

static int parse_sections(const ctx_t *c, const json_t *root, psc_job_spec_t *s)
{
    const json_t *o;
    int rc;

    if ((rc = get_object(c, root, "data", 0, &o))) return rc;
    if (o) {
        static const char *const keys[] = {"train", "test", "train_examples", "test_examples", "shuffle", NULL};
        if ((rc = check_keys(c, o, "data", keys))) return rc;
        if ((rc = get_path(c, o, "train", s->train_path, sizeof s->train_path))) return rc;
        if ((rc = get_path(c, o, "test", s->test_path, sizeof s->test_path))) return rc;
        if ((rc = get_int(c, o, "train_examples", "data", 0, 0, INT64_MAX, &s->train_examples))) return rc;
        if ((rc = get_int(c, o, "test_examples", "data", 0, 0, INT64_MAX, &s->test_examples))) return rc;
        if ((rc = get_bool(c, o, "shuffle", "data", &s->shuffle))) return rc;
    }

    if ((rc = get_int32(c, root, "batch_size_per_replica", "", 0, 1, &s->batch_size))) return rc;
    if ((rc = get_int32(c, root, "epochs", "", 0, 1, &s->epochs))) return rc;
    if ((rc = get_int(c, root, "steps", "", 0, 0, INT64_MAX, &s->steps))) return rc;

    if ((rc = get_object(c, root, "sync", 0, &o))) return rc;
    if (o) {
        static const char *const keys[] = {"replicas_to_aggregate", "total_num_replicas", "timeout_secs", NULL};
        if ((rc = check_keys(c, o, "sync", keys))) return rc;
        s->sync = 1;
        if ((rc = get_int32(c, o, "replicas_to_aggregate", "sync", 1, 1, &s->replicas_to_aggregate))) return rc;
        if ((rc = get_int32(c, o, "total_num_replicas", "sync", 1, 1, &s->total_num_replicas))) return rc;
        if ((rc = get_number(c, o, "timeout_secs", "sync", 0, R_POS, &s->sync_timeout_secs))) return rc;
    }

    if ((rc = get_bool(c, root, "overlap_push_pull", "", &s->overlap_push_pull))) return rc;
    if (s->overlap_push_pull && s->sync)
        return fail(c, "overlap_push_pull",
                    "needs asynchronous training: a sync replica computes each step at the step the PS are at");

    static const char *const dtypes[] = {"float32", "bfloat16"}; /* indexed by PSC_ENC_* */
    if ((rc = get_enum(c, root, "gradient_dtype", "", 0, dtypes, 2, &s->gradient_dtype))) return rc;
    s->error_feedback = s->gradient_dtype == PSC_ENC_BFLOAT16;
    if (json_object_get(root, "error_feedback") && s->gradient_dtype != PSC_ENC_BFLOAT16)
        return fail(c, "error_feedback", "applies to rounded gradients only: set \"gradient_dtype\": \"bfloat16\"");
    if ((rc = get_bool(c, root, "error_feedback", "", &s->error_feedback))) return rc;

    if ((rc = get_object(c, root, "placement", 0, &o))) return rc;
    if (o) {
        static const char *const keys[] = {"strategy", "min_shard_bytes", NULL};
        static const char *const strategies[] = {"round_robin", "greedy_bytes"};
        int st = PSC_PLACE_ROUND_ROBIN;
        int64_t msb = 0;
        if ((rc = check_keys(c, o, "placement", keys))) return rc;
        if ((rc = get_enum(c, o, "strategy", "placement", 0, strategies, 2, &st))) return rc;
        if ((rc = get_int(c, o, "min_shard_bytes", "placement", 0, 0, INT64_MAX, &msb))) return rc;
        s->placement = (enum psc_placement_strategy)st;
        s->min_shard_bytes = (uint64_t)msb;
    }

    if ((rc = get_object(c, root, "checkpoint", 0, &o))) return rc;
    if (o) {
        static const char *const keys[] = {"every_steps", "every_secs", "keep", NULL};
        if ((rc = check_keys(c, o, "checkpoint", keys))) return rc;
        if ((rc = get_int(c, o, "every_steps", "checkpoint", 0, 0, INT64_MAX, &s->ckpt_every_steps))) return rc;
        if ((rc = get_number(c, o, "every_secs", "checkpoint", 0, R_NONNEG, &s->ckpt_every_secs))) return rc;
        if ((rc = get_int32(c, o, "keep", "checkpoint", 0, 1, &s->ckpt_keep))) return rc;
    }

    int64_t seed = (int64_t)s->seed;
    if ((rc = get_int(c, root, "seed", "", 0, 0, INT64_MAX, &seed))) return rc;
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

/* FNV-1a 64 of a canonical text: one line per part, fixed field order and formats. */
static void compute_job_id(psc_job_spec_t *s)
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
    }
    const psc_optim_config_t *o = &s->optimizer;
    fnv_printf(&h, "loss %s\n", s->loss);
    fnv_printf(&h,
               "optimizer %s lr=%.9g momentum=%.9g nesterov=%d beta1=%.9g beta2=%.9g epsilon=%.9g iav=%.9g "
               "decay=%.9g\n",
               optim_names[o->kind], (double)o->learning_rate, (double)o->momentum, o->use_nesterov, (double)o->beta1,
               (double)o->beta2, (double)o->epsilon, (double)o->initial_accumulator_value, (double)o->decay);
    fnv_printf(&h, "placement %s min_shard_bytes=%llu\nseed %llu\n",
               s->placement == PSC_PLACE_GREEDY_BYTES ? "greedy_bytes" : "round_robin",
               (unsigned long long)s->min_shard_bytes, (unsigned long long)s->seed);
    snprintf(s->job_id, sizeof s->job_id, "%016llx", (unsigned long long)h);
}

/* ---- entry points ---- */

static int parse_with(const ctx_t *c, const char *json, size_t len, psc_job_spec_t *out)
{
    memset(out, 0, sizeof *out);
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return psc_seterr(c->err, c->errlen, PSC_ECONFIG, "%sinvalid JSON at line %d column %d: %s", c->pfx, je.line,
                          je.column, je.text);

    static const char *const keys[] = {"model", "optimizer", "data", "batch_size_per_replica", "epochs", "steps",
                                       "sync", "placement", "checkpoint", "seed", "overlap_push_pull", "gradient_dtype",
                                       "error_feedback", NULL};
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
                        show(root, got, sizeof got));
        goto out;
    }
    if ((rc = check_keys(c, root, "", keys))) goto out;
    if ((rc = get_object(c, root, "model", 1, &o))) goto out;
    if ((rc = parse_model(c, o, s))) goto out;
    if ((rc = get_object(c, root, "optimizer", 1, &o))) goto out;
    if ((rc = parse_optimizer(c, o, &s->optimizer))) goto out;
    if ((rc = parse_sections(c, root, s))) goto out;
    /* the layers against the input shape: refused here, not by a worker minutes later */
    char merr[384];
    if (psc_model_check(s, merr, sizeof merr)) {
        rc = fail(c, "", "%s", merr);
        goto out;
    }
    compute_job_id(s);

out:
    json_decref(root);
    if (rc) psc_job_spec_deinit(out);
    return rc;
}

int psc_job_spec_parse(const char *json, psc_job_spec_t *out, char *err, size_t errlen)
{
    ctx_t c = {"job spec: ", err, errlen};
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
    ctx_t c = {pfx, err, errlen};
    int rc = parse_with(&c, buf, len, out);
    free(pfx);
    free(buf);
    return rc;
}

void psc_job_spec_deinit(psc_job_spec_t *s)
{
    if (!s) return;
    free(s->layers);
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
