/* job_spec_optim.c — the job spec's "optimizer" objects (with their
 * learning-rate "schedule") and its sparse embedding "tables" (see job_spec.h,
 * table.h and docs/job-spec.md).
 *
 * Design: one parser for every optimizer object, at the top level and in each
 * table, so a table's optimizer is checked exactly like the job's. An
 * optimizer's keys are checked against the parameters its kind takes before
 * any value is read (a key of another optimizer names that optimizer). A
 * table's name must not clash with the model's variables: equal, or one a
 * "/"-prefix of the other ("dense" and "dense/kernel"), since tables, model
 * variables and their parts ("name/part_i") share the PS's and the
 * checkpoints' namespace; the same rule holds between tables. A
 * recommendation model's layers name its tables, so there the tables are read
 * first and their names checked against the variables after the model
 * (jspec_check_table_names), with the same message.
 *
 * Invariants: a parsed optimizer has every default filled in and its schedule
 * resolved (constant when absent); every table has its own copy of an
 * optimizer (own_optimizer says whether it declared it).
 */
#include "job_spec_internal.h"

#include "model_spec.h"
#include "psc.h"

#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- optimizer ---- */

static const char *const optim_names[] = {"gradient_descent", "momentum", "adagrad", "adam", "rmsprop", "ftrl"};

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
    {"initial_accumulator_value", OPT_BIT(PSC_OPT_ADAGRAD) | OPT_BIT(PSC_OPT_FTRL)},
    {"beta1", OPT_BIT(PSC_OPT_ADAM)},
    {"beta2", OPT_BIT(PSC_OPT_ADAM)},
    {"epsilon", OPT_BIT(PSC_OPT_ADAM) | OPT_BIT(PSC_OPT_RMSPROP)},
    {"decay", OPT_BIT(PSC_OPT_RMSPROP)},
    {"learning_rate_power", OPT_BIT(PSC_OPT_FTRL)},
    {"l1_regularization_strength", OPT_BIT(PSC_OPT_FTRL)},
    {"l2_regularization_strength", OPT_BIT(PSC_OPT_FTRL)},
};

/* Every key of o is one that optimizer `kind` takes. */
static int check_optim_keys(const jspec_ctx_t *c, const json_t *o, const char *path, int kind)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)o, key, v)
    {
        if (strcmp(key, "name") == 0 || strcmp(key, "learning_rate") == 0 || strcmp(key, "schedule") == 0) continue;
        int known = 0;
        for (size_t i = 0; i < PSC_ARRAY_LEN(optim_params); i++) {
            if (strcmp(key, optim_params[i].key) != 0) continue;
            known = 1;
            if (!(optim_params[i].kinds & OPT_BIT(kind))) {
                char p[256];
                jspec_join(p, sizeof p, path, key);
                return jspec_fail(c, p, "not a parameter of %s", optim_names[kind]);
            }
        }
        if (!known) {
            char p[256], list[320] = "name, learning_rate, schedule";
            jspec_join(p, sizeof p, path, key);
            for (size_t i = 0; i < PSC_ARRAY_LEN(optim_params); i++)
                if (optim_params[i].kinds & OPT_BIT(kind)) {
                    size_t l = strlen(list);
                    snprintf(list + l, sizeof list - l, ", %s", optim_params[i].key);
                }
            return jspec_fail(c, p, "unknown key (%s takes: %s)", optim_names[kind], list);
        }
    }
    return 0;
}

/* "<path>.<key>: rounds to 1 as a float32" */
static int rounds_to_one(const jspec_ctx_t *c, const char *path, const char *key)
{
    char p[256];
    jspec_join(p, sizeof p, path, key);
    return jspec_fail(c, p, "rounds to 1 as a float32");
}

/* The kind's own parameters, defaults first. */
static int parse_optim_params(const jspec_ctx_t *c, const json_t *o, const char *path, psc_optim_config_t *opt)
{
    int rc = 0;
    switch (opt->kind) {
    case PSC_OPT_SGD: break;
    case PSC_OPT_MOMENTUM:
        opt->momentum = 0.9f;
        if ((rc = jspec_get_float(c, o, "momentum", path, 0, JSPEC_R_NONNEG, &opt->momentum))) return rc;
        if ((rc = jspec_get_bool(c, o, "use_nesterov", path, &opt->use_nesterov))) return rc;
        break;
    case PSC_OPT_ADAGRAD:
        opt->initial_accumulator_value = 0.1f;
        rc = jspec_get_float(c, o, "initial_accumulator_value", path, 0, JSPEC_R_POS, &opt->initial_accumulator_value);
        break;
    case PSC_OPT_ADAM:
        opt->beta1 = 0.9f;
        opt->beta2 = 0.999f;
        opt->epsilon = 1e-8f;
        if ((rc = jspec_get_float(c, o, "beta1", path, 0, JSPEC_R_UNIT, &opt->beta1))) return rc;
        if ((rc = jspec_get_float(c, o, "beta2", path, 0, JSPEC_R_UNIT, &opt->beta2))) return rc;
        if ((rc = jspec_get_float(c, o, "epsilon", path, 0, JSPEC_R_POS, &opt->epsilon))) return rc;
        /* float rounding of e.g. 0.99999999 gives 1, which would divide by zero. */
        if (opt->beta1 >= 1.0f) return rounds_to_one(c, path, "beta1");
        if (opt->beta2 >= 1.0f) return rounds_to_one(c, path, "beta2");
        break;
    case PSC_OPT_RMSPROP:
        opt->decay = 0.9f;
        opt->momentum = 0.0f;
        opt->epsilon = 1e-10f;
        if ((rc = jspec_get_float(c, o, "decay", path, 0, JSPEC_R_UNIT, &opt->decay))) return rc;
        if ((rc = jspec_get_float(c, o, "momentum", path, 0, JSPEC_R_NONNEG, &opt->momentum))) return rc;
        if ((rc = jspec_get_float(c, o, "epsilon", path, 0, JSPEC_R_POS, &opt->epsilon))) return rc;
        if (opt->decay >= 1.0f) return rounds_to_one(c, path, "decay");
        break;
    case PSC_OPT_FTRL: /* tf.compat.v1.train.FtrlOptimizer's defaults */
        opt->learning_rate_power = -0.5f;
        opt->initial_accumulator_value = 0.1f;
        if ((rc = jspec_get_float(c, o, "learning_rate_power", path, 0, JSPEC_R_NONPOS, &opt->learning_rate_power)))
            return rc;
        if ((rc = jspec_get_float(c, o, "initial_accumulator_value", path, 0, JSPEC_R_POS,
                                  &opt->initial_accumulator_value)))
            return rc;
        if ((rc = jspec_get_float(c, o, "l1_regularization_strength", path, 0, JSPEC_R_NONNEG, &opt->l1))) return rc;
        rc = jspec_get_float(c, o, "l2_regularization_strength", path, 0, JSPEC_R_NONNEG, &opt->l2);
        break;
    }
    return rc;
}

/* ---- learning-rate schedule ---- */

static const char *const lr_names[] = {"constant", "exponential_decay", "piecewise_constant", "cosine_decay"};

/* piecewise_constant's boundaries and values (path: "...schedule"). */
static int parse_pieces(const jspec_ctx_t *c, const json_t *o, const char *path, psc_lr_schedule_t *s)
{
    char p[256], e[288], got[64];
    jspec_join(p, sizeof p, path, "boundaries");
    const json_t *b = json_object_get(o, "boundaries");
    if (!b) return jspec_missing(c, p);
    if (!json_is_array(b) || json_array_size(b) < 1 || json_array_size(b) > PSC_LR_MAX_BOUNDARIES)
        return jspec_fail(c, p, "expected an array of 1 to %d non-negative integers, got %s", PSC_LR_MAX_BOUNDARIES,
                          jspec_show(b, got, sizeof got));
    s->nboundaries = (int)json_array_size(b);
    for (int i = 0; i < s->nboundaries; i++) {
        const json_t *x = json_array_get(b, (size_t)i);
        snprintf(e, sizeof e, "%s[%d]", p, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0)
            return jspec_fail(c, e, "expected a non-negative integer, got %s", jspec_show(x, got, sizeof got));
        s->boundaries[i] = (int64_t)json_integer_value(x);
        if (i > 0 && s->boundaries[i] <= s->boundaries[i - 1])
            return jspec_fail(c, e,
                              "%lld is not greater than the boundary before it (%lld): boundaries must be "
                              "strictly increasing",
                              (long long)s->boundaries[i], (long long)s->boundaries[i - 1]);
    }
    jspec_join(p, sizeof p, path, "values");
    const json_t *v = json_object_get(o, "values");
    if (!v) return jspec_missing(c, p);
    if (!json_is_array(v) || json_array_size(v) != (size_t)s->nboundaries + 1)
        return jspec_fail(c, p, "expected an array of %d numbers > 0 (one more than boundaries), got %s",
                          s->nboundaries + 1, jspec_show(v, got, sizeof got));
    for (int i = 0; i <= s->nboundaries; i++) {
        const json_t *x = json_array_get(v, (size_t)i);
        double d = json_is_number(x) ? json_number_value(x) : 0;
        snprintf(e, sizeof e, "%s[%d]", p, i);
        if (!(d > 0) || d > FLT_MAX || (float)d == 0.0f)
            return jspec_fail(c, e, "expected a number > 0 that fits a float32, got %s",
                              jspec_show(x, got, sizeof got));
        s->values[i] = (float)d;
    }
    return 0;
}

/* An optimizer's "schedule" (path: "...schedule"); *s is zeroed first (constant). */
static int parse_schedule(const jspec_ctx_t *c, const json_t *o, const char *path, psc_lr_schedule_t *s)
{
    static const char *const keys[][6] = {
        [PSC_LR_CONSTANT] = {"name", NULL},
        [PSC_LR_EXPONENTIAL] = {"name", "decay_steps", "decay_rate", "staircase", NULL},
        [PSC_LR_PIECEWISE] = {"name", "boundaries", "values", NULL},
        [PSC_LR_COSINE] = {"name", "decay_steps", "alpha", "warmup_steps", "warmup_target", NULL},
    };
    int kind = PSC_LR_CONSTANT, rc;
    memset(s, 0, sizeof *s);
    if ((rc = jspec_get_enum(c, o, "name", path, 1, lr_names, (int)PSC_ARRAY_LEN(lr_names), &kind))) return rc;
    if ((rc = jspec_check_keys(c, o, path, keys[kind]))) return rc;
    s->kind = (enum psc_lr_kind)kind;
    switch (s->kind) {
    case PSC_LR_CONSTANT: break;
    case PSC_LR_EXPONENTIAL:
        if ((rc = jspec_get_int(c, o, "decay_steps", path, 1, 1, INT64_MAX, &s->decay_steps))) return rc;
        if ((rc = jspec_get_float(c, o, "decay_rate", path, 1, JSPEC_R_POS, &s->decay_rate))) return rc;
        rc = jspec_get_bool(c, o, "staircase", path, &s->staircase);
        break;
    case PSC_LR_PIECEWISE: rc = parse_pieces(c, o, path, s); break;
    case PSC_LR_COSINE:
        if ((rc = jspec_get_int(c, o, "decay_steps", path, 1, 1, INT64_MAX, &s->decay_steps))) return rc;
        if ((rc = jspec_get_float(c, o, "alpha", path, 0, JSPEC_R_CLOSED_UNIT, &s->alpha))) return rc;
        if ((rc = jspec_get_int(c, o, "warmup_steps", path, 0, 0, INT64_MAX, &s->warmup_steps))) return rc;
        rc = jspec_get_float(c, o, "warmup_target", path, 0, JSPEC_R_NONNEG, &s->warmup_target);
        break;
    }
    return rc;
}

int jspec_parse_optimizer(const jspec_ctx_t *c, const json_t *o, const char *path, psc_optim_config_t *opt)
{
    static const char *const names[] = {"gradient_descent", "momentum", "adagrad", "adam", "rmsprop", "ftrl", "sgd"};
    int kind = 0, rc;
    if ((rc = jspec_get_enum(c, o, "name", path, 1, names, (int)PSC_ARRAY_LEN(names), &kind))) return rc;
    if (kind == (int)PSC_ARRAY_LEN(names) - 1) kind = PSC_OPT_SGD; /* "sgd" */
    memset(opt, 0, sizeof *opt);
    opt->kind = (enum psc_optim_kind)kind;
    if ((rc = check_optim_keys(c, o, path, kind))) return rc;

    static const float default_lr[] = {0.01f, 0.01f, 0.01f, 0.001f, 0.001f, 0.001f}; /* Keras's for ftrl */
    _Static_assert(PSC_ARRAY_LEN(default_lr) == PSC_ARRAY_LEN(optim_names), "a default learning rate per optimizer");
    opt->learning_rate = default_lr[kind];
    if ((rc = jspec_get_float(c, o, "learning_rate", path, 0, JSPEC_R_POS, &opt->learning_rate))) return rc;
    if ((rc = parse_optim_params(c, o, path, opt))) return rc;

    const json_t *so;
    char p[256];
    jspec_join(p, sizeof p, path, "schedule");
    if ((rc = jspec_get_object(c, o, "schedule", path, 0, &so))) return rc;
    return so ? parse_schedule(c, so, p, &opt->schedule) : 0;
}

/* ---- tables ---- */

/* 1..63 characters of [A-Za-z0-9_./-], no empty "/"-separated part. */
static int valid_table_name(const char *s)
{
    size_t n = strlen(s);
    if (n < 1 || n > 63 || s[0] == '/' || s[n - 1] == '/' || strstr(s, "//")) return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_' ||
              ch == '.' || ch == '-' || ch == '/'))
            return 0;
    }
    return 1;
}

/* Equal, or one a "/"-prefix of the other ("dense" and "dense/kernel"). */
static int names_clash(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la == lb) return strcmp(a, b) == 0;
    if (la < lb) return strncmp(a, b, la) == 0 && b[la] == '/';
    return strncmp(a, b, lb) == 0 && a[lb] == '/';
}

/* A table's name (at path, "tables[i].name") against the model's variables. */
static int check_name_vars(const jspec_ctx_t *c, const char *path, const char *name, const psc_var_desc_t *vars,
                           int nvars)
{
    for (int v = 0; v < nvars; v++)
        if (names_clash(name, vars[v].name))
            return jspec_fail(c, path,
                              "\"%s\" clashes with the model variable \"%s\" (a table's name must differ from every "
                              "variable's and neither may be a /-prefix of the other)",
                              name, vars[v].name);
    return 0;
}

/* "initializer" of table `path` (default uniform(-0.05, 0.05), Keras Embedding's). */
static int parse_initializer(const jspec_ctx_t *c, const json_t *tj, const char *path, psc_initializer_t *init)
{
    static const char *const names[] = {"uniform", "normal", "zeros"};
    static const char *const keys[][4] = {
        [PSC_INIT_UNIFORM] = {"name", "minval", "maxval", NULL},
        [PSC_INIT_NORMAL] = {"name", "mean", "stddev", NULL},
        [PSC_INIT_ZEROS] = {"name", NULL},
    };
    init->kind = PSC_INIT_UNIFORM;
    init->a = -0.05f;
    init->b = 0.05f;
    const json_t *io;
    char p[256];
    int kind = PSC_INIT_UNIFORM, rc;
    jspec_join(p, sizeof p, path, "initializer");
    if ((rc = jspec_get_object(c, tj, "initializer", path, 0, &io)) || !io) return rc;
    if ((rc = jspec_get_enum(c, io, "name", p, 1, names, (int)PSC_ARRAY_LEN(names), &kind))) return rc;
    if ((rc = jspec_check_keys(c, io, p, keys[kind]))) return rc;
    init->kind = (enum psc_init_kind)kind;
    if (init->kind == PSC_INIT_ZEROS) {
        init->a = init->b = 0.0f;
        return 0;
    }
    if (init->kind == PSC_INIT_NORMAL) {
        init->a = 0.0f;
        if ((rc = jspec_get_float(c, io, "mean", p, 0, JSPEC_R_ANY, &init->a))) return rc;
        if ((rc = jspec_get_float(c, io, "stddev", p, 0, JSPEC_R_POS, &init->b))) return rc;
        /* |value - mean| <= 6.7 stddev (Box-Muller on 32-bit words): keep every value finite */
        if (fabs((double)init->a) + 7.0 * (double)init->b > FLT_MAX)
            return jspec_fail(c, p, "mean %g and stddev %g would give values beyond float32", (double)init->a,
                              (double)init->b);
        return 0;
    }
    if ((rc = jspec_get_float(c, io, "minval", p, 0, JSPEC_R_ANY, &init->a))) return rc;
    if ((rc = jspec_get_float(c, io, "maxval", p, 0, JSPEC_R_ANY, &init->b))) return rc;
    if (!(init->a < init->b)) {
        char q[288];
        jspec_join(q, sizeof q, p, "maxval");
        return jspec_fail(c, q, "%g is not greater than minval %g", (double)init->b, (double)init->a);
    }
    return 0;
}

/* tables[i].eviction and .admission (sparse_table.h, "a row's life"). */
static int parse_life(const jspec_ctx_t *c, const json_t *tj, const char *path, psc_table_spec_t *T)
{
    static const char *const ekeys[] = {"ttl_steps", "ttl_secs", "max_rows", NULL};
    static const char *const akeys[] = {"min_count", "filter_bytes", NULL};
    char p[64];
    const json_t *o;
    int rc;
    jspec_join(p, sizeof p, path, "eviction");
    if ((rc = jspec_get_object(c, tj, "eviction", path, 0, &o))) return rc;
    if (o) {
        if ((rc = jspec_check_keys(c, o, p, ekeys))) return rc;
        if ((rc = jspec_get_int_in(c, o, "ttl_steps", p, 0, 1, INT64_C(1) << 40, &T->ttl_steps))) return rc;
        if ((rc = jspec_get_number(c, o, "ttl_secs", p, 0, JSPEC_R_POS, &T->ttl_secs))) return rc;
        if ((rc = jspec_get_int_in(c, o, "max_rows", p, 0, 256, PSC_TABLE_MAX_ROWS, &T->max_rows))) return rc;
        if (T->ttl_steps == 0 && T->ttl_secs == 0 && T->max_rows == 0)
            return jspec_fail(c, p, "give ttl_steps, ttl_secs or max_rows (or leave eviction out)");
        if (T->ttl_secs > 1e9) return jspec_fail(c, p, "ttl_secs %g is more than 10^9 seconds", T->ttl_secs);
    }
    jspec_join(p, sizeof p, path, "admission");
    if ((rc = jspec_get_object(c, tj, "admission", path, 0, &o))) return rc;
    if (!o) return 0;
    int64_t k = 0;
    if ((rc = jspec_check_keys(c, o, p, akeys))) return rc;
    if ((rc = jspec_get_int_in(c, o, "min_count", p, 1, 2, 255, &k))) return rc;
    T->min_count = (int)k;
    return jspec_get_int_in(c, o, "filter_bytes", p, 0, 64 << 10, INT64_C(1) << 30, &T->filter_bytes);
}

/* tables[i] into *T; its name checked against the model's variables and the tables before it. */
static int parse_table(const jspec_ctx_t *c, const json_t *tj, int i, const psc_job_spec_t *s,
                       const psc_var_desc_t *vars, int nvars, psc_table_spec_t *T)
{
    static const char *const keys[] = {"name",      "rows",     "dim",       "initializer", "partition_strategy",
                                       "optimizer", "eviction", "admission", NULL};
    static const char *const partitions[] = {"mod", "div"};
    char path[32], p[64], got[64];
    int rc;
    snprintf(path, sizeof path, "tables[%d]", i);
    if (!json_is_object(tj)) return jspec_fail(c, path, "expected an object, got %s", jspec_show(tj, got, sizeof got));
    if ((rc = jspec_check_keys(c, tj, path, keys))) return rc;

    const char *name = NULL;
    if ((rc = jspec_get_string(c, tj, "name", path, 1, &name))) return rc;
    jspec_join(p, sizeof p, path, "name");
    if (!valid_table_name(name))
        return jspec_fail(c, p,
                          "\"%.64s\" is not a valid table name (1 to 63 characters of A-Z a-z 0-9 _ . - /, no empty "
                          "part between slashes)",
                          name);
    if ((rc = check_name_vars(c, p, name, vars, nvars))) return rc;
    for (int j = 0; j < i; j++)
        if (names_clash(name, s->tables[j].name))
            return jspec_fail(c, p,
                              "\"%s\" clashes with tables[%d].name \"%s\" (names must differ and neither may "
                              "be a /-prefix of the other)",
                              name, j, s->tables[j].name);
    snprintf(T->name, sizeof T->name, "%s", name);

    int64_t dim = 0;
    int part = PSC_PART_MOD;
    if ((rc = jspec_get_int_in(c, tj, "rows", path, 1, 1, PSC_TABLE_MAX_ROWS, &T->rows))) return rc;
    if ((rc = jspec_get_int_in(c, tj, "dim", path, 1, 1, PSC_TABLE_MAX_DIM, &dim))) return rc;
    T->dim = (int)dim;
    if ((rc = parse_initializer(c, tj, path, &T->init))) return rc;
    if ((rc = jspec_get_enum(c, tj, "partition_strategy", path, 0, partitions, 2, &part))) return rc;
    T->partition = (enum psc_partition)part;
    if ((rc = parse_life(c, tj, path, T))) return rc;

    const json_t *o;
    if ((rc = jspec_get_object(c, tj, "optimizer", path, 0, &o))) return rc;
    T->own_optimizer = o != NULL;
    if (!o) {
        T->optimizer = s->optimizer;
        return 0;
    }
    jspec_join(p, sizeof p, path, "optimizer");
    return jspec_parse_optimizer(c, o, p, &T->optimizer);
}

int jspec_parse_tables(const jspec_ctx_t *c, const json_t *root, psc_job_spec_t *s, int check_names)
{
    char got[64];
    const json_t *arr = json_object_get(root, "tables");
    if (!arr) return 0;
    if (!json_is_array(arr) || json_array_size(arr) > PSC_MAX_TABLES)
        return jspec_fail(c, "tables", "expected an array of at most %d tables, got %s", PSC_MAX_TABLES,
                          jspec_show(arr, got, sizeof got));
    int n = (int)json_array_size(arr);
    if (n == 0) return 0;

    psc_var_desc_t *vars = NULL;
    int nvars = 0;
    char merr[384];
    if (check_names && psc_model_variables(s, &vars, &nvars, merr, sizeof merr)) return jspec_fail(c, "", "%s", merr);
    s->tables = psc_xcalloc((size_t)n, sizeof *s->tables);
    s->num_tables = n;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++)
        rc = parse_table(c, json_array_get(arr, (size_t)i), i, s, vars, nvars, &s->tables[i]);
    free(vars);
    return rc;
}

int jspec_check_table_names(const jspec_ctx_t *c, const psc_job_spec_t *s)
{
    if (s->num_tables == 0) return 0;
    psc_var_desc_t *vars = NULL;
    int nvars = 0, rc = 0;
    char merr[384], p[64];
    if (psc_model_variables(s, &vars, &nvars, merr, sizeof merr)) return jspec_fail(c, "", "%s", merr);
    for (int i = 0; i < s->num_tables && !rc; i++) {
        snprintf(p, sizeof p, "tables[%d].name", i);
        rc = check_name_vars(c, p, s->tables[i].name, vars, nvars);
    }
    free(vars);
    return rc;
}
