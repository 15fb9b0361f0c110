/* job_spec_json.c — the job-spec parser's typed getters and the names of its
 * enums' values (job_spec_internal.h): the leaf the other job_spec*.c call.
 *
 * Design: each getter reads one key of one object and either stores its value or
 * writes the one error "<prefix><parent>.<key>: <problem>", naming what was
 * expected and what was found ("got ..."); an absent optional key leaves the
 * caller's default. jansson is included here and in the other job_spec*.c only.
 */
#include "job_spec_internal.h"

#include "psc.h"

#include <float.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int jspec_fail(const jspec_ctx_t *c, const char *path, const char *fmt, ...)
{
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return psc_seterr(c->err, c->errlen, PSC_ECONFIG, "%s%s%s%s", c->pfx, path, *path ? ": " : "", msg);
}

/* "parent.key", or "key" at the top level. */
void jspec_join(char *buf, size_t n, const char *parent, const char *key)
{
    if (*parent)
        snprintf(buf, n, "%s.%s", parent, key);
    else
        snprintf(buf, n, "%s", key);
}

/* A short rendering of a JSON value for "got ..." in messages. */
const char *jspec_show(const json_t *v, char *buf, size_t n)
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

int jspec_check_keys(const jspec_ctx_t *c, const json_t *obj, const char *path, const char *const *allowed)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v)
    {
        int ok = 0;
        for (const char *const *a = allowed; *a; a++)
            if (strcmp(key, *a) == 0) ok = 1;
        if (!ok) {
            char p[256], list[256] = "";
            jspec_join(p, sizeof p, path, key);
            for (const char *const *a = allowed; *a; a++) {
                size_t l = strlen(list);
                snprintf(list + l, sizeof list - l, "%s%s", l ? ", " : "", *a);
            }
            return jspec_fail(c, p, "unknown key (expected one of: %s)", list);
        }
    }
    return 0;
}

int jspec_missing(const jspec_ctx_t *c, const char *path) { return jspec_fail(c, path, "missing (required)"); }

/* An integer in [min, max]. */
int jspec_get_int(const jspec_ctx_t *c, const json_t *obj, const char *key, const char *parent, int required,
                  int64_t min, int64_t max, int64_t *out)
{
    char p[256], got[64];
    jspec_join(p, sizeof p, parent, key);
    const json_t *v = json_object_get(obj, key);
    if (!v) return required ? jspec_missing(c, p) : 0;
    if (!json_is_integer(v) || json_integer_value(v) < min) {
        if (min == 1) return jspec_fail(c, p, "expected a positive integer, got %s", jspec_show(v, got, sizeof got));
        if (min == 0)
            return jspec_fail(c, p, "expected a non-negative integer, got %s", jspec_show(v, got, sizeof got));
        return jspec_fail(c, p, "expected an integer >= %lld, got %s", (long long)min, jspec_show(v, got, sizeof got));
    }
    if (json_integer_value(v) > max)
        return jspec_fail(c, p, "%lld is too large (max %lld)", (long long)json_integer_value(v), (long long)max);
    *out = (int64_t)json_integer_value(v);
    return 0;
}

/* An integer in [min, max], refused as "expected an integer MIN..MAX, got X". */
int jspec_get_int_in(const jspec_ctx_t *c, const json_t *obj, const char *key, const char *parent, int required,
                     int64_t min, int64_t max, int64_t *out)
{
    char p[256], got[64];
    jspec_join(p, sizeof p, parent, key);
    const json_t *v = json_object_get(obj, key);
    if (!v) return required ? jspec_missing(c, p) : 0;
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max)
        return jspec_fail(c, p, "expected an integer %lld..%lld, got %s", (long long)min, (long long)max,
                          jspec_show(v, got, sizeof got));
    *out = (int64_t)json_integer_value(v);
    return 0;
}

int jspec_get_int32(const jspec_ctx_t *c, const json_t *obj, const char *key, const char *parent, int required, int min,
                    int *out)
{
    int64_t v = *out;
    int rc = jspec_get_int(c, obj, key, parent, required, min, INT32_MAX, &v);
    if (!rc) *out = (int)v;
    return rc;
}

/* A number (integer or real) in a range. */
int jspec_get_number(const jspec_ctx_t *c, const json_t *obj, const char *key, const char *parent, int required,
                     jspec_range_t r, double *out)
{
    char p[256], got[64];
    jspec_join(p, sizeof p, parent, key);
    const json_t *v = json_object_get(obj, key);
    if (!v) return required ? jspec_missing(c, p) : 0;
    double x = json_is_number(v) ? json_number_value(v) : NAN;
    int ok = json_is_number(v) && isfinite(x) && (r.lo_open ? x > r.lo : x >= r.lo) &&
             (isinf(r.hi) || (r.hi_open ? x < r.hi : x <= r.hi));
    if (!ok) {
        if (isinf(r.lo) && isinf(r.hi))
            return jspec_fail(c, p, "expected a number, got %s", jspec_show(v, got, sizeof got));
        if (isinf(r.lo))
            return jspec_fail(c, p, "expected a number %s %g, got %s", r.hi_open ? "<" : "<=", r.hi,
                              jspec_show(v, got, sizeof got));
        if (isinf(r.hi))
            return jspec_fail(c, p, "expected a number %s %g, got %s", r.lo_open ? ">" : ">=", r.lo,
                              jspec_show(v, got, sizeof got));
        return jspec_fail(c, p, "expected a number in %c%g, %g%c, got %s", r.lo_open ? '(' : '[', r.lo, r.hi,
                          r.hi_open ? ')' : ']', jspec_show(v, got, sizeof got));
    }
    *out = x;
    return 0;
}

/* A number stored as float32: also rejects values float cannot hold. */
int jspec_get_float(const jspec_ctx_t *c, const json_t *obj, const char *key, const char *parent, int required,
                    jspec_range_t r, float *out)
{
    double x = *out;
    int rc = jspec_get_number(c, obj, key, parent, required, r, &x);
    if (rc || !json_object_get(obj, key)) return rc;
    if (fabs(x) > FLT_MAX || (x != 0 && (float)x == 0.0f)) {
        char p[256];
        jspec_join(p, sizeof p, parent, key);
        return jspec_fail(c, p, "%g does not fit a float32", x);
    }
    *out = (float)x;
    return 0;
}

int jspec_get_bool(const jspec_ctx_t *c, const json_t *obj, const char *key, const char *parent, int *out)
{
    char p[256], got[64];
    jspec_join(p, sizeof p, parent, key);
    const json_t *v = json_object_get(obj, key);
    if (!v) return 0;
    if (!json_is_boolean(v)) return jspec_fail(c, p, "expected true or false, got %s", jspec_show(v, got, sizeof got));
    *out = json_is_true(v);
    return 0;
}

int jspec_get_string(const jspec_ctx_t *c, const json_t *obj, const char *key, const char *parent, int required,
                     const char **out)
{
    char p[256], got[64];
    jspec_join(p, sizeof p, parent, key);
    const json_t *v = json_object_get(obj, key);
    if (!v) return required ? jspec_missing(c, p) : 0;
    if (!json_is_string(v)) return jspec_fail(c, p, "expected a string, got %s", jspec_show(v, got, sizeof got));
    *out = json_string_value(v);
    return 0;
}

/* A string that must be one of names[0..n) (NULL entries skipped); *out = its index. */
int jspec_get_enum(const jspec_ctx_t *c, const json_t *obj, const char *key, const char *parent, int required,
                   const char *const *names, int n, int *out)
{
    const char *s = NULL;
    int rc = jspec_get_string(c, obj, key, parent, required, &s);
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
    jspec_join(p, sizeof p, parent, key);
    return jspec_fail(c, p, "unknown value \"%.64s\" (expected %s)", s, list);
}

/* A positive int k (meaning (k, k)) or a pair [h, w] of positive ints. */
int jspec_get_pair(const jspec_ctx_t *c, const json_t *obj, const char *key, const char *parent, int required,
                   int out[2])
{
    char p[256], got[64];
    jspec_join(p, sizeof p, parent, key);
    const json_t *v = json_object_get(obj, key);
    if (!v) return required ? jspec_missing(c, p) : 0;
    int64_t a, b;
    if (json_is_integer(v)) {
        a = b = json_integer_value(v);
    } else if (json_is_array(v) && json_array_size(v) == 2 && json_is_integer(json_array_get(v, 0)) &&
               json_is_integer(json_array_get(v, 1))) {
        a = json_integer_value(json_array_get(v, 0));
        b = json_integer_value(json_array_get(v, 1));
    } else {
        return jspec_fail(c, p, "expected a positive integer or a pair [h, w] of positive integers, got %s",
                          jspec_show(v, got, sizeof got));
    }
    if (a < 1 || b < 1 || a > INT32_MAX || b > INT32_MAX)
        return jspec_fail(c, p, "expected a positive integer or a pair [h, w] of positive integers, got %s",
                          jspec_show(v, got, sizeof got));
    out[0] = (int)a;
    out[1] = (int)b;
    return 0;
}

/* A sub-object; *out = NULL when absent. */
int jspec_get_object(const jspec_ctx_t *c, const json_t *obj, const char *key, const char *parent, int required,
                     const json_t **out)
{
    char p[256], got[64];
    jspec_join(p, sizeof p, parent, key);
    const json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (!v) return required ? jspec_missing(c, p) : 0;
    if (!json_is_object(v)) return jspec_fail(c, p, "expected an object, got %s", jspec_show(v, got, sizeof got));
    *out = v;
    return 0;
}

/* ---- names of the enums' values (job_spec_internal.h) ---- */

const char *const jspec_format_names[4] = {"idx", "criteo", "libsvm", "tfrecord"};
const char *const jspec_shard_names[3] = {"auto", "file", "record"};
const char *const jspec_role_names[3] = {"label", "dense", "categorical"};
const char *const jspec_kind_names[3] = {"int64", "float", "bytes"};
const char *const jspec_transform_names[2] = {"none", "log1p"};
const char *const jspec_combiner_names[3] = {"sum", "mean", "sqrtn"};
const char *const jspec_loss_names[2] = {"sparse_softmax_cross_entropy", "sigmoid_cross_entropy"};
