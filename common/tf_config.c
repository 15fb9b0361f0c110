/* tf_config.c — TF_CONFIG parsing, flag resolution and bind addresses (see tf_config.h).
 *
 * Design: one document parser (parse_doc) fills a `struct doc` that records which
 * parts were present (cluster, task.type, task.index) without cross-checking them;
 * the public entry points then merge sources (environment, then flags) and run one
 * final check (check_final) so that an index is validated against the cluster that
 * is actually used. Every error message starts with its source: "TF_CONFIG: " for
 * the environment, "--cluster: " for the flag's document, or the flag's name.
 *
 * Invariants: a psc_cluster_t has n[t] == 0 exactly when addr[t] == NULL; every
 * non-NULL address passed addr_problem(); chief and evaluator have at most one slot.
 * On error nothing is left allocated in the caller's structures.
 */
#include "tf_config.h"

#include "psc.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Largest index accepted in the sparse form; keeps a typo such as "1000000000" from
 * allocating a huge table. */
#define TF_MAX_SPARSE_INDEX 99999
#define TF_DEFAULT_PORT 2222

static const char *const job_names[PSC_JOB__COUNT] = {"chief", "worker", "ps", "evaluator"};

const char *psc_job_type_name(enum psc_job_type t)
{
    if ((int)t < 0 || t >= PSC_JOB__COUNT) return "unknown";
    return job_names[t];
}

int psc_job_type_parse(const char *s, enum psc_job_type *out)
{
    if (!s) return PSC_EINVAL;
    for (int t = 0; t < PSC_JOB__COUNT; t++)
        if (strcmp(s, job_names[t]) == 0) {
            *out = (enum psc_job_type)t;
            return 0;
        }
    return PSC_EINVAL;
}

void psc_cluster_deinit(psc_cluster_t *c)
{
    if (!c) return;
    for (int t = 0; t < PSC_JOB__COUNT; t++) {
        for (int i = 0; i < c->n[t]; i++) free(c->addr[t][i]);
        free(c->addr[t]);
    }
    memset(c, 0, sizeof *c);
}

void psc_tf_config_deinit(psc_tf_config_t *c)
{
    if (!c) return;
    psc_cluster_deinit(&c->cluster);
    memset(c, 0, sizeof *c);
    c->port = -1;
}

/* ---- addresses ---- */

/* Parses a decimal port "1".."65535" (no sign, no spaces). Returns the port or -1. */
static int parse_port(const char *s)
{
    if (!*s || strlen(s) > 5) return -1;
    int v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        v = v * 10 + (*p - '0');
    }
    return v >= 1 && v <= 65535 ? v : -1;
}

/* Splits "host:port" / "[v6]:port". On success host is copied (without brackets)
 * into host[hostlen] and *port_str points into s. Returns NULL or the reason. */
static const char *split_addr(const char *s, char *host, size_t hostlen, const char **port_str)
{
    const char *hb, *he, *colon;
    if (!*s) return "empty address";
    if (s[0] == '[') {
        hb = s + 1;
        he = strchr(hb, ']');
        if (!he) return "missing ] after an IPv6 address";
        if (he[1] != ':') return "missing :port";
        colon = he + 1;
    } else {
        hb = s;
        colon = strrchr(s, ':');
        if (!colon) return "missing :port";
        if (strchr(s, ':') != colon) return "an IPv6 address must be written [addr]:port";
        he = colon;
    }
    if (he == hb) return "empty host";
    for (const char *p = hb; p < he; p++)
        if (isspace((unsigned char)*p) || iscntrl((unsigned char)*p) || *p == '[' || *p == ']' || *p == '/')
            return "bad character in host";
    if ((size_t)(he - hb) >= hostlen) return "host too long";
    memcpy(host, hb, (size_t)(he - hb));
    host[he - hb] = '\0';
    *port_str = colon + 1;
    return NULL;
}

/* NULL when `s` is a usable "host:port", else the reason. */
static const char *addr_problem(const char *s)
{
    char host[256];
    const char *port;
    const char *why = split_addr(s, host, sizeof host, &port);
    if (why) return why;
    if (parse_port(port) < 0) return "port must be 1..65535";
    return NULL;
}

int psc_task_bind_address(const char *cluster_addr, int port_override, char *buf, size_t buflen)
{
    if (!cluster_addr || !buf || buflen == 0 || port_override > 65535) return PSC_EINVAL;
    char host[256];
    const char *bind_host = "0.0.0.0";
    int port = TF_DEFAULT_PORT, bracket = 0;
    const char *port_str = NULL;
    if (split_addr(cluster_addr, host, sizeof host, &port_str) == NULL) {
        int p = parse_port(port_str);
        if (p < 0) return PSC_EINVAL;
        port = p;
    } else {
        /* No ":port": the whole string is the host (the default port applies). */
        if (!*cluster_addr || strchr(cluster_addr, ':') || strlen(cluster_addr) >= sizeof host) return PSC_EINVAL;
        snprintf(host, sizeof host, "%s", cluster_addr);
    }
    unsigned char sa[16];
    if (inet_pton(AF_INET, host, sa) == 1) {
        bind_host = host;
    } else if (inet_pton(AF_INET6, host, sa) == 1) {
        bind_host = host;
        bracket = 1;
    }
    if (port_override >= 0) port = port_override;
    int n = snprintf(buf, buflen, bracket ? "[%s]:%d" : "%s:%d", bind_host, port);
    if (n < 0 || (size_t)n >= buflen) return PSC_EINVAL;
    return 0;
}

/* ---- cluster queries ---- */

const char *psc_cluster_addr(const psc_cluster_t *c, psc_task_t t)
{
    if ((int)t.type < 0 || t.type >= PSC_JOB__COUNT || t.index < 0 || t.index >= c->n[t.type]) return NULL;
    return c->addr[t.type][t.index];
}

int psc_cluster_num_replicas(const psc_cluster_t *c)
{
    return (c->n[PSC_JOB_CHIEF] > 0 ? 1 : 0) + c->n[PSC_JOB_WORKER];
}

int psc_task_replica_rank(const psc_cluster_t *c, psc_task_t t)
{
    int has_chief = c->n[PSC_JOB_CHIEF] > 0;
    if (t.type == PSC_JOB_CHIEF && has_chief && t.index == 0) return 0;
    if (t.type == PSC_JOB_WORKER && t.index >= 0 && t.index < c->n[PSC_JOB_WORKER]) return t.index + has_chief;
    return -1;
}

int psc_task_is_chief(const psc_cluster_t *c, psc_task_t t)
{
    psc_task_t chief = psc_cluster_chief(c);
    return t.type == chief.type && t.index == chief.index;
}

psc_task_t psc_cluster_chief(const psc_cluster_t *c)
{
    psc_task_t t = {c->n[PSC_JOB_CHIEF] > 0 ? PSC_JOB_CHIEF : PSC_JOB_WORKER, 0};
    return t;
}

static int cluster_total(const psc_cluster_t *c)
{
    int n = 0;
    for (int t = 0; t < PSC_JOB__COUNT; t++) n += c->n[t];
    return n;
}

/* ---- parsing ---- */

/* What one document said; `has_*` record presence, nothing is cross-checked yet. */
struct doc {
    psc_cluster_t cluster;
    int has_cluster;
    int has_type, has_index;
    enum psc_job_type type;
    int index;
};

static const char *json_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

/* Sparse index key: a non-negative decimal without sign or leading zeros. */
static int parse_sparse_key(const char *k)
{
    size_t len = strlen(k);
    if (len == 0 || len > 6 || (len > 1 && k[0] == '0')) return -1;
    int v = 0;
    for (size_t i = 0; i < len; i++) {
        if (k[i] < '0' || k[i] > '9') return -1;
        v = v * 10 + (k[i] - '0');
    }
    return v;
}

static int check_addr(const json_t *v, const char *pfx, const char *path, const char *job, const char *idx, char *err,
                      size_t errlen)
{
    if (!json_is_string(v))
        return psc_seterr(err, errlen, PSC_ECONFIG, "%s%s%s[%s]: expected a \"host:port\" string, got %s", pfx, path,
                          job, idx, json_type_name(v));
    const char *why = addr_problem(json_string_value(v));
    if (why)
        return psc_seterr(err, errlen, PSC_ECONFIG, "%s%s%s[%s]: \"%s\" is not host:port (%s)", pfx, path, job, idx,
                          json_string_value(v), why);
    return 0;
}

/* Parses one job's task list (dense array or sparse object) into c->n/addr[t]. */
static int parse_job(const json_t *v, enum psc_job_type t, const char *pfx, const char *path, psc_cluster_t *c,
                     char *err, size_t errlen)
{
    const char *job = job_names[t];
    char idx[24];
    int n = 0;
    if (json_is_array(v)) {
        n = (int)json_array_size(v);
        for (int i = 0; i < n; i++) {
            snprintf(idx, sizeof idx, "%d", i);
            int rc = check_addr(json_array_get(v, (size_t)i), pfx, path, job, idx, err, errlen);
            if (rc) return rc;
        }
    } else if (json_is_object(v)) {
        const char *key;
        json_t *a;
        json_object_foreach((json_t *)v, key, a) {
            int i = parse_sparse_key(key);
            if (i < 0)
                return psc_seterr(err, errlen, PSC_ECONFIG,
                                  "%s%s%s: task index \"%s\" is not a non-negative decimal integer", pfx, path, job,
                                  key);
            if (i > TF_MAX_SPARSE_INDEX)
                return psc_seterr(err, errlen, PSC_ECONFIG, "%s%s%s: task index %d too large (max %d)", pfx, path, job,
                                  i, TF_MAX_SPARSE_INDEX);
            int rc = check_addr(a, pfx, path, job, key, err, errlen);
            if (rc) return rc;
            if (i + 1 > n) n = i + 1;
        }
    } else {
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "%s%s%s: expected a list of \"host:port\" or an object {\"index\": \"host:port\"}, got %s",
                          pfx, path, job, json_type_name(v));
    }
    if ((t == PSC_JOB_CHIEF || t == PSC_JOB_EVALUATOR) && n > 1)
        return psc_seterr(err, errlen, PSC_ECONFIG, "%s%s%s: at most one %s task is allowed (got %d slots)", pfx, path,
                          job, job, n);
    if (n == 0) return 0;
    c->n[t] = n;
    c->addr[t] = psc_xcalloc((size_t)n, sizeof(char *));
    if (json_is_array(v)) {
        for (int i = 0; i < n; i++) c->addr[t][i] = psc_xstrdup(json_string_value(json_array_get(v, (size_t)i)));
    } else {
        const char *key;
        json_t *a;
        json_object_foreach((json_t *)v, key, a) c->addr[t][parse_sparse_key(key)] = psc_xstrdup(json_string_value(a));
    }
    return 0;
}

/* Parses a cluster object {"worker": [...], ...}; `path` is "cluster." or "". */
static int parse_cluster_obj(const json_t *obj, const char *pfx, const char *path, psc_cluster_t *c, char *err,
                             size_t errlen)
{
    memset(c, 0, sizeof *c);
    if (!json_is_object(obj))
        return psc_seterr(err, errlen, PSC_ECONFIG, "%s%s: expected an object, got %s", pfx,
                          *path ? "cluster" : "cluster document", json_type_name(obj));
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v) {
        enum psc_job_type t;
        if (psc_job_type_parse(key, &t)) {
            psc_cluster_deinit(c);
            return psc_seterr(err, errlen, PSC_ECONFIG,
                              "%s%s%s: unknown job \"%s\" (expected chief, worker, ps or evaluator)", pfx, path, key,
                              key);
        }
        int rc = parse_job(v, t, pfx, path, c, err, errlen);
        if (rc) {
            psc_cluster_deinit(c);
            return rc;
        }
    }
    return 0;
}

static int parse_task_obj(const json_t *obj, const char *pfx, struct doc *d, char *err, size_t errlen)
{
    if (!json_is_object(obj))
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "%stask: expected an object {\"type\": ..., \"index\": ...}, got %s",
                          pfx, json_type_name(obj));
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v) {
        if (strcmp(key, "type") == 0) {
            if (!json_is_string(v))
                return psc_seterr(err, errlen, PSC_ECONFIG, "%stask.type: expected a string, got %s", pfx,
                                  json_type_name(v));
            if (psc_job_type_parse(json_string_value(v), &d->type))
                return psc_seterr(err, errlen, PSC_ECONFIG,
                                  "%stask.type: unknown job type \"%s\" (expected chief, worker, ps or evaluator)", pfx,
                                  json_string_value(v));
            d->has_type = 1;
        } else if (strcmp(key, "index") == 0) {
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > TF_MAX_SPARSE_INDEX)
                return psc_seterr(err, errlen, PSC_ECONFIG, "%stask.index: expected a non-negative integer (max %d)",
                                  pfx, TF_MAX_SPARSE_INDEX);
            d->index = (int)json_integer_value(v);
            d->has_index = 1;
        } else {
            return psc_seterr(err, errlen, PSC_ECONFIG, "%stask.%s: unknown key (expected type and index)", pfx, key);
        }
    }
    return 0;
}

static json_t *load_json(const char *text, const char *pfx, char *err, size_t errlen)
{
    json_error_t je;
    json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        psc_seterr(err, errlen, PSC_ECONFIG, "%sinvalid JSON at line %d column %d: %s", pfx, je.line, je.column,
                   je.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        psc_seterr(err, errlen, PSC_ECONFIG, "%sexpected a JSON object, got %s", pfx, json_type_name(root));
        json_decref(root);
        return NULL;
    }
    return root;
}

/* Parses a whole TF_CONFIG document. want_task = 0 skips (ignores) "task". */
static int parse_doc_obj(const json_t *root, const char *pfx, int want_task, struct doc *d, char *err, size_t errlen)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)root, key, v) {
        int rc = 0;
        if (strcmp(key, "cluster") == 0) {
            rc = parse_cluster_obj(v, pfx, "cluster.", &d->cluster, err, errlen);
            if (!rc) d->has_cluster = 1;
        } else if (strcmp(key, "task") == 0) {
            if (want_task) rc = parse_task_obj(v, pfx, d, err, errlen);
        } else if (strcmp(key, "rpc_layer") == 0) {
            if (!json_is_string(v))
                rc = psc_seterr(err, errlen, PSC_ECONFIG, "%srpc_layer: expected a string, got %s", pfx,
                                json_type_name(v));
            else if (strcmp(json_string_value(v), "grpc") != 0)
                rc = psc_seterr(err, errlen, PSC_ECONFIG, "%srpc_layer: \"%s\" is not supported (only \"grpc\")", pfx,
                                json_string_value(v));
        } else if (strcmp(key, "environment") == 0) {
            /* ignored, as TensorFlow does outside Google's own environments */
        } else {
            rc = psc_seterr(err, errlen, PSC_ECONFIG,
                            "%s%s: unknown key (expected cluster, task, rpc_layer or environment)", pfx, key);
        }
        if (rc) {
            psc_cluster_deinit(&d->cluster);
            memset(d, 0, sizeof *d);
            return rc;
        }
    }
    return 0;
}

static int parse_doc(const char *json, const char *pfx, struct doc *d, char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    json_t *root = load_json(json, pfx, err, errlen);
    if (!root) return PSC_ECONFIG;
    int rc = parse_doc_obj(root, pfx, 1, d, err, errlen);
    json_decref(root);
    return rc;
}

/* A cluster alone, or a document with a "cluster" key (its "task" ignored). */
static int parse_cluster_text(const char *json, const char *pfx, psc_cluster_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    json_t *root = load_json(json, pfx, err, errlen);
    if (!root) return PSC_ECONFIG;
    int rc;
    if (json_object_get(root, "cluster")) {
        struct doc d;
        memset(&d, 0, sizeof d);
        rc = parse_doc_obj(root, pfx, 0, &d, err, errlen);
        if (!rc) *out = d.cluster;
    } else {
        rc = parse_cluster_obj(root, pfx, "", out, err, errlen);
    }
    json_decref(root);
    if (!rc && cluster_total(out) == 0) {
        psc_cluster_deinit(out);
        rc = psc_seterr(err, errlen, PSC_ECONFIG, "%scluster has no tasks", pfx);
    }
    return rc;
}

int psc_cluster_parse(const char *json, psc_cluster_t *out, char *err, size_t errlen)
{
    if (!json) {
        memset(out, 0, sizeof *out);
        return psc_seterr(err, errlen, PSC_ECONFIG, "--cluster: no document");
    }
    return parse_cluster_text(json, "--cluster: ", out, err, errlen);
}

/* Where the task's type and index came from, so that a task that does not fit
 * the cluster is reported in the terms the user wrote. */
enum task_src { TASK_SRC_ENV = 0, TASK_SRC_FLAG };

/* Checks the task against the cluster. With both parts from TF_CONFIG:
 * "TF_CONFIG: task.index 3 out of range (cluster has 2 worker tasks)"; with a
 * part from the flags the message names the flags: "--job chief: the cluster has
 * no chief task", "--task_index 3 out of range: the cluster has 2 worker tasks". */
static int check_task(const psc_cluster_t *c, psc_task_t t, enum task_src type_src, enum task_src idx_src, char *err,
                      size_t errlen)
{
    const char *tn = job_names[t.type];
    int n = c->n[t.type];
    if (t.index < n && c->addr[t.type][t.index]) return 0;
    if (type_src == TASK_SRC_ENV && idx_src == TASK_SRC_ENV) {
        if (t.index >= n)
            return psc_seterr(err, errlen, PSC_ECONFIG, "TF_CONFIG: task.index %d out of range (cluster has %d %s task%s)",
                              t.index, n, tn, n == 1 ? "" : "s");
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "TF_CONFIG: task.index %d is not in the cluster (no address for %s %d in the sparse cluster)",
                          t.index, tn, t.index);
    }
    if (n == 0 && type_src == TASK_SRC_FLAG)
        return psc_seterr(err, errlen, PSC_ECONFIG, "--job %s: the cluster has no %s task", tn, tn);
    /* the index names the flag when it came from one, else TF_CONFIG's key and the --job flag */
    char what[96];
    if (idx_src == TASK_SRC_FLAG)
        snprintf(what, sizeof what, "--task_index %d", t.index);
    else
        snprintf(what, sizeof what, "TF_CONFIG's task.index %d (with --job %s)", t.index, tn);
    if (t.index >= n)
        return psc_seterr(err, errlen, PSC_ECONFIG, "%s out of range: the cluster has %d %s task%s%s", what, n, tn,
                          n == 1 ? "" : "s", idx_src == TASK_SRC_FLAG ? "" : " (pass --task_index)");
    return psc_seterr(err, errlen, PSC_ECONFIG, "%s is not in the cluster: the sparse cluster has no address for %s %d",
                      what, tn, t.index);
}

int psc_tf_config_parse(const char *json, psc_tf_config_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    out->port = -1;
    if (!json) return psc_seterr(err, errlen, PSC_ECONFIG, "TF_CONFIG: not set");
    struct doc d;
    int rc = parse_doc(json, "TF_CONFIG: ", &d, err, errlen);
    if (rc) return rc;
    if (cluster_total(&d.cluster) == 0) {
        rc = psc_seterr(err, errlen, PSC_ECONFIG, "TF_CONFIG: cluster has no tasks");
    } else if (d.has_type != d.has_index) {
        rc = psc_seterr(err, errlen, PSC_ECONFIG, "TF_CONFIG: task.%s is missing", d.has_type ? "index" : "type");
    } else if (d.has_type) {
        psc_task_t t = {d.type, d.index};
        rc = check_task(&d.cluster, t, TASK_SRC_ENV, TASK_SRC_ENV, err, errlen);
    }
    if (rc) {
        psc_cluster_deinit(&d.cluster);
        return rc;
    }
    out->cluster = d.cluster;
    out->task.type = d.type;
    out->task.index = d.index;
    out->has_task = d.has_type;
    return 0;
}

static int is_blank(const char *s)
{
    while (*s && isspace((unsigned char)*s)) s++;
    return *s == '\0';
}

static int cluster_from_flag(const char *flag, psc_cluster_t *out, char *err, size_t errlen)
{
    const char *p = flag;
    while (*p && isspace((unsigned char)*p)) p++;
    if (*p == '{') return parse_cluster_text(flag, "--cluster: ", out, err, errlen);
    memset(out, 0, sizeof *out);
    char *text = psc_read_file(flag, (size_t)16 << 20, NULL);
    if (!text) return psc_seterr(err, errlen, PSC_ECONFIG, "--cluster %s: cannot read: %s", flag, strerror(errno));
    /* Name the file in parse errors as well: "--cluster: FILE: ..." */
    size_t plen = strlen(flag) + 16;
    char *pfx = psc_xmalloc(plen);
    snprintf(pfx, plen, "--cluster: %s: ", flag);
    int rc = parse_cluster_text(text, pfx, out, err, errlen);
    free(pfx);
    free(text);
    return rc;
}

int psc_tf_config_resolve(const char *tf_config_env, const psc_task_flags_t *flags, int require_task,
                       psc_tf_config_t *out, char *err, size_t errlen)
{
    static const psc_task_flags_t no_flags = {NULL, NULL, -1, -1};
    if (!flags) flags = &no_flags;
    memset(out, 0, sizeof *out);
    out->port = -1;

    struct doc d;
    memset(&d, 0, sizeof d);
    int rc;
    if (tf_config_env && !is_blank(tf_config_env)) {
        if ((rc = parse_doc(tf_config_env, "TF_CONFIG: ", &d, err, errlen))) return rc;
    }
    const char *cluster_src = d.has_cluster ? "TF_CONFIG: " : NULL;
    enum task_src type_src = TASK_SRC_ENV, idx_src = TASK_SRC_ENV;

    if (flags->cluster) {
        psc_cluster_t c;
        if ((rc = cluster_from_flag(flags->cluster, &c, err, errlen))) goto fail;
        psc_cluster_deinit(&d.cluster);
        d.cluster = c;
        d.has_cluster = 1;
        cluster_src = "--cluster: ";
    }
    if (flags->job) {
        if (psc_job_type_parse(flags->job, &d.type)) {
            rc = psc_seterr(err, errlen, PSC_ECONFIG,
                            "--job: unknown job type \"%s\" (expected chief, worker, ps or evaluator)", flags->job);
            goto fail;
        }
        d.has_type = 1;
        type_src = TASK_SRC_FLAG;
    }
    if (flags->task_index != -1) {
        if (flags->task_index < 0) {
            rc = psc_seterr(err, errlen, PSC_ECONFIG, "--task_index: expected a non-negative integer, got %d",
                            flags->task_index);
            goto fail;
        }
        d.index = flags->task_index;
        d.has_index = 1;
        idx_src = TASK_SRC_FLAG;
    }
    if (flags->port != -1) {
        if (flags->port < 0 || flags->port > 65535) {
            rc = psc_seterr(err, errlen, PSC_ECONFIG, "--port: %d out of range (0..65535)", flags->port);
            goto fail;
        }
        out->port = flags->port;
    }

    if (!cluster_src) {
        rc = psc_seterr(err, errlen, PSC_ECONFIG, "no cluster: set TF_CONFIG's cluster or pass --cluster");
        goto fail;
    }
    if (cluster_total(&d.cluster) == 0) {
        rc = psc_seterr(err, errlen, PSC_ECONFIG, "%scluster has no tasks", cluster_src);
        goto fail;
    }
    if (d.has_type && d.has_index) {
        psc_task_t t = {d.type, d.index};
        if ((rc = check_task(&d.cluster, t, type_src, idx_src, err, errlen))) goto fail;
    } else if (require_task) {
        rc = psc_seterr(err, errlen, PSC_ECONFIG, "no task: set TF_CONFIG's task or pass --job and --task_index%s",
                        d.has_type ? " (task index missing)" : d.has_index ? " (task type missing)" : "");
        goto fail;
    } else if (d.has_type || d.has_index) {
        rc = psc_seterr(err, errlen, PSC_ECONFIG, "incomplete task: %s is missing (set TF_CONFIG's task or pass %s)",
                        d.has_type ? "the index" : "the type", d.has_type ? "--task_index" : "--job");
        goto fail;
    }
    out->cluster = d.cluster;
    out->task.type = d.has_type ? d.type : PSC_JOB_CHIEF;
    out->task.index = d.has_index ? d.index : 0;
    out->has_task = d.has_type && d.has_index;
    return 0;

fail:
    psc_cluster_deinit(&d.cluster);
    memset(out, 0, sizeof *out);
    out->port = -1;
    return rc;
}

const char *psc_cluster_replica_addr(const psc_cluster_t *c, int rank)
{
    int has_chief = c->n[PSC_JOB_CHIEF] > 0;
    if (has_chief && rank == 0) return c->addr[PSC_JOB_CHIEF][0];
    int w = rank - has_chief;
    return w >= 0 && w < c->n[PSC_JOB_WORKER] ? c->addr[PSC_JOB_WORKER][w] : NULL;
}
