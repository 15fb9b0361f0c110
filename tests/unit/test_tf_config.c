/* test_tf_config — TF_CONFIG parsing, flag resolution, roles and bind addresses.
 *
 * Valid documents in the dense, sparse and chief+evaluator forms are checked field by
 * field; each kind of bad document must give PSC_ECONFIG, a one-line message that
 * names the offending field, and leave nothing allocated. Flags are checked to win
 * over the environment, with --cluster both inline and as a file.
 */
#include "psc.h"
#include "tf_config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

static void assert_cluster_empty(const psc_cluster_t *c)
{
    for (int t = 0; t < PSC_JOB__COUNT; t++) {
        assert_int_equal(c->n[t], 0);
        assert_null(c->addr[t]);
    }
}

/* Parses `json`, expecting failure with a one-line message containing each of the
 * NULL-terminated substrings. */
static void expect_parse_error(const char *json, ...)
{
    psc_tf_config_t cfg;
    char err[512] = "";
    int rc = psc_tf_config_parse(json, &cfg, err, sizeof err);
    if (rc != PSC_ECONFIG) fail_msg("expected PSC_ECONFIG for %s, got %d", json, rc);
    if (strncmp(err, "TF_CONFIG: ", 11) != 0) fail_msg("message \"%s\" does not start with TF_CONFIG: ", err);
    assert_null(strchr(err, '\n'));
    va_list ap;
    va_start(ap, json);
    for (const char *s; (s = va_arg(ap, const char *));)
        if (!strstr(err, s)) fail_msg("message \"%s\" for %s lacks \"%s\"", err, json, s);
    va_end(ap);
    assert_cluster_empty(&cfg.cluster);
    psc_tf_config_deinit(&cfg); /* safe after an error */
}

static void test_dense_form(void **state)
{
    (void)state;
    psc_tf_config_t cfg;
    char err[512] = "";
    const char *json = "{\"cluster\": {\"worker\": [\"w0.example:2222\", \"10.0.0.2:2223\"],"
                       " \"ps\": [\"ps-0.ps:2222\", \"ps-1.ps:2222\", \"[::1]:7\"]},"
                       " \"task\": {\"type\": \"ps\", \"index\": 2}, \"rpc_layer\": \"grpc\", \"environment\": \"cloud\"}";
    int rc = psc_tf_config_parse(json, &cfg, err, sizeof err);
    if (rc) fail_msg("%s", err);
    assert_int_equal(cfg.cluster.n[PSC_JOB_CHIEF], 0);
    assert_int_equal(cfg.cluster.n[PSC_JOB_WORKER], 2);
    assert_int_equal(cfg.cluster.n[PSC_JOB_PS], 3);
    assert_int_equal(cfg.cluster.n[PSC_JOB_EVALUATOR], 0);
    assert_null(cfg.cluster.addr[PSC_JOB_CHIEF]);
    assert_string_equal(cfg.cluster.addr[PSC_JOB_WORKER][0], "w0.example:2222");
    assert_string_equal(cfg.cluster.addr[PSC_JOB_WORKER][1], "10.0.0.2:2223");
    assert_string_equal(cfg.cluster.addr[PSC_JOB_PS][1], "ps-1.ps:2222");
    assert_string_equal(cfg.cluster.addr[PSC_JOB_PS][2], "[::1]:7");
    assert_int_equal(cfg.has_task, 1);
    assert_int_equal(cfg.task.type, PSC_JOB_PS);
    assert_int_equal(cfg.task.index, 2);
    assert_int_equal(cfg.port, -1);
    assert_string_equal(psc_cluster_addr(&cfg.cluster, cfg.task), "[::1]:7");
    psc_tf_config_deinit(&cfg);
    assert_cluster_empty(&cfg.cluster);

    /* No task is fine for parse (psctl); has_task says so. */
    rc = psc_tf_config_parse("{\"cluster\": {\"worker\": [\"a:1\"]}}", &cfg, err, sizeof err);
    if (rc) fail_msg("%s", err);
    assert_int_equal(cfg.has_task, 0);
    psc_tf_config_deinit(&cfg);
}

static void test_sparse_form(void **state)
{
    (void)state;
    psc_tf_config_t cfg;
    char err[512] = "";
    const char *json = "{\"cluster\": {\"worker\": {\"1\": \"w1:2222\", \"3\": \"w3:2222\"}, \"ps\": [\"p:1\"]},"
                       " \"task\": {\"type\": \"worker\", \"index\": 3}}";
    int rc = psc_tf_config_parse(json, &cfg, err, sizeof err);
    if (rc) fail_msg("%s", err);
    assert_int_equal(cfg.cluster.n[PSC_JOB_WORKER], 4); /* max index + 1 */
    assert_null(cfg.cluster.addr[PSC_JOB_WORKER][0]);
    assert_string_equal(cfg.cluster.addr[PSC_JOB_WORKER][1], "w1:2222");
    assert_null(cfg.cluster.addr[PSC_JOB_WORKER][2]);
    assert_string_equal(cfg.cluster.addr[PSC_JOB_WORKER][3], "w3:2222");
    assert_int_equal(cfg.task.index, 3);
    psc_task_t hole = {PSC_JOB_WORKER, 2};
    assert_null(psc_cluster_addr(&cfg.cluster, hole));
    psc_tf_config_deinit(&cfg);

    /* The task may not sit in a hole, nor past the end. */
    expect_parse_error("{\"cluster\": {\"worker\": {\"1\": \"w1:2222\"}}, \"task\": {\"type\": \"worker\", \"index\": 0}}",
                       "task.index", "0", NULL);
    expect_parse_error("{\"cluster\": {\"worker\": {\"1\": \"w1:2222\"}}, \"task\": {\"type\": \"worker\", \"index\": 2}}",
                       "task.index 2 out of range", NULL);
    /* Index keys: non-negative decimal integers only. */
    expect_parse_error("{\"cluster\": {\"worker\": {\"-1\": \"w:1\"}}}", "worker", "\"-1\"", NULL);
    expect_parse_error("{\"cluster\": {\"worker\": {\"one\": \"w:1\"}}}", "worker", "\"one\"", NULL);
    expect_parse_error("{\"cluster\": {\"worker\": {\"01\": \"w:1\"}}}", "worker", "\"01\"", NULL);
    expect_parse_error("{\"cluster\": {\"worker\": {\"1\": \"nope\"}}}", "cluster.worker[1]", "nope", NULL);
}

static void test_chief_and_evaluator(void **state)
{
    (void)state;
    psc_tf_config_t cfg;
    char err[512] = "";
    const char *json = "{\"cluster\": {\"chief\": [\"c:2222\"], \"worker\": [\"w0:2222\", \"w1:2222\"],"
                       " \"ps\": [\"p0:2222\"], \"evaluator\": [\"e:2222\"]}, \"task\": {\"type\": \"evaluator\", \"index\": 0}}";
    int rc = psc_tf_config_parse(json, &cfg, err, sizeof err);
    if (rc) fail_msg("%s", err);
    assert_int_equal(cfg.cluster.n[PSC_JOB_CHIEF], 1);
    assert_int_equal(cfg.cluster.n[PSC_JOB_EVALUATOR], 1);
    assert_string_equal(cfg.cluster.addr[PSC_JOB_CHIEF][0], "c:2222");
    assert_string_equal(cfg.cluster.addr[PSC_JOB_EVALUATOR][0], "e:2222");
    assert_int_equal(cfg.task.type, PSC_JOB_EVALUATOR);
    psc_tf_config_deinit(&cfg);

    /* The sparse form of a single chief is fine too. */
    rc = psc_tf_config_parse("{\"cluster\": {\"chief\": {\"0\": \"c:1\"}}, \"task\": {\"type\": \"chief\", \"index\": 0}}",
                             &cfg, err, sizeof err);
    if (rc) fail_msg("%s", err);
    assert_int_equal(cfg.cluster.n[PSC_JOB_CHIEF], 1);
    psc_tf_config_deinit(&cfg);

    expect_parse_error("{\"cluster\": {\"chief\": [\"a:1\", \"b:1\"]}}", "chief", "at most one", NULL);
    expect_parse_error("{\"cluster\": {\"worker\": [\"a:1\"], \"evaluator\": [\"a:2\", \"b:1\"]}}", "evaluator",
                       "at most one", NULL);
    expect_parse_error("{\"cluster\": {\"chief\": {\"1\": \"c:1\"}}}", "chief", NULL);
}

static void test_invalid_documents(void **state)
{
    (void)state;
    /* Exact text of the documented example. */
    psc_tf_config_t cfg;
    char err[512] = "";
    assert_int_equal(psc_tf_config_parse("{\"cluster\": {\"worker\": [\"a:1\", \"b:1\"]},"
                                         " \"task\": {\"type\": \"worker\", \"index\": 3}}",
                                         &cfg, err, sizeof err),
                     PSC_ECONFIG);
    assert_string_equal(err, "TF_CONFIG: task.index 3 out of range (cluster has 2 worker tasks)");
    assert_cluster_empty(&cfg.cluster);

    expect_parse_error("{\"cluster\": {\"worker\": [\"a:1\"]}, \"rpc_layer\": \"grpc+verbs\"}", "rpc_layer",
                       "grpc+verbs", NULL);
    expect_parse_error("{\"cluster\": {\"worker\": [\"a:1\"]}, \"rpc_layer\": 1}", "rpc_layer", NULL);
    expect_parse_error("{\"cluster\": {\"worker\": [\"a:1\"]}, \"session_master\": \"x\"}", "session_master",
                       "unknown key", NULL);
    expect_parse_error("{\"cluster\": {\"worker\": [\"a:1\"], \"master\": [\"m:1\"]}}", "master", "unknown job", NULL);
    expect_parse_error("{\"cluster\": [\"a:1\"]}", "cluster", NULL);
    expect_parse_error("{\"cluster\": {\"worker\": \"a:1\"}}", "cluster.worker", NULL);
    expect_parse_error("{\"cluster\": {}}", "no tasks", NULL);
    expect_parse_error("{\"task\": {\"type\": \"worker\", \"index\": 0}}", "no tasks", NULL);
    expect_parse_error("{\"cluster\": {\"worker\": [\"a:1\"]", "TF_CONFIG", "line 1", NULL);
    expect_parse_error("[1, 2]", "object", NULL);
    expect_parse_error("{\"cluster\": {\"worker\": [\"a:1\"], \"worker\": [\"b:1\"]}}", "duplicate", NULL);

    /* Addresses: non-empty "host:port", port 1..65535, IPv6 in brackets. */
    expect_parse_error("{\"cluster\": {\"worker\": [\"\"]}}", "cluster.worker[0]", "empty", NULL);
    expect_parse_error("{\"cluster\": {\"worker\": [\"a:1\", \"host\"]}}", "cluster.worker[1]", "\"host\"", NULL);
    expect_parse_error("{\"cluster\": {\"ps\": [\"h:0\"]}}", "cluster.ps[0]", "port", NULL);
    expect_parse_error("{\"cluster\": {\"ps\": [\"h:65536\"]}}", "cluster.ps[0]", "port", NULL);
    expect_parse_error("{\"cluster\": {\"ps\": [\"h:2x\"]}}", "cluster.ps[0]", "port", NULL);
    expect_parse_error("{\"cluster\": {\"ps\": [\"h:\"]}}", "cluster.ps[0]", "port", NULL);
    expect_parse_error("{\"cluster\": {\"ps\": [\":80\"]}}", "cluster.ps[0]", "host", NULL);
    expect_parse_error("{\"cluster\": {\"ps\": [\"::1:80\"]}}", "cluster.ps[0]", "IPv6", NULL);
    expect_parse_error("{\"cluster\": {\"ps\": [\"[::1:80\"]}}", "cluster.ps[0]", NULL);
    expect_parse_error("{\"cluster\": {\"ps\": [\"[::1]80\"]}}", "cluster.ps[0]", NULL);
    expect_parse_error("{\"cluster\": {\"ps\": [\"a b:80\"]}}", "cluster.ps[0]", NULL);
    expect_parse_error("{\"cluster\": {\"ps\": [2222]}}", "cluster.ps[0]", "string", NULL);

    /* The task object. */
    const char *cl = "{\"cluster\": {\"worker\": [\"a:1\", \"b:1\"]}, ";
    char doc[512];
    snprintf(doc, sizeof doc, "%s\"task\": {\"type\": \"boss\", \"index\": 0}}", cl);
    expect_parse_error(doc, "task.type", "boss", NULL);
    snprintf(doc, sizeof doc, "%s\"task\": {\"type\": 1, \"index\": 0}}", cl);
    expect_parse_error(doc, "task.type", NULL);
    snprintf(doc, sizeof doc, "%s\"task\": {\"type\": \"worker\", \"index\": -1}}", cl);
    expect_parse_error(doc, "task.index", NULL);
    snprintf(doc, sizeof doc, "%s\"task\": {\"type\": \"worker\", \"index\": \"1\"}}", cl);
    expect_parse_error(doc, "task.index", NULL);
    snprintf(doc, sizeof doc, "%s\"task\": {\"type\": \"worker\", \"index\": 1.0}}", cl);
    expect_parse_error(doc, "task.index", NULL);
    snprintf(doc, sizeof doc, "%s\"task\": {\"type\": \"worker\", \"index\": 0, \"trial\": 1}}", cl);
    expect_parse_error(doc, "task.trial", NULL);
    snprintf(doc, sizeof doc, "%s\"task\": {\"type\": \"worker\"}}", cl);
    expect_parse_error(doc, "task.index", NULL);
    snprintf(doc, sizeof doc, "%s\"task\": {\"type\": \"ps\", \"index\": 0}}", cl);
    expect_parse_error(doc, "task.index 0 out of range (cluster has 0 ps tasks)", NULL);
    snprintf(doc, sizeof doc, "%s\"task\": \"worker\"}", cl);
    expect_parse_error(doc, "task", NULL);
}

static void test_resolve_flags_override_env(void **state)
{
    (void)state;
    const char *env = "{\"cluster\": {\"worker\": [\"w0:1\", \"w1:1\"], \"ps\": [\"p0:1\", \"p1:1\"]},"
                      " \"task\": {\"type\": \"worker\", \"index\": 1}}";
    psc_tf_config_t cfg;
    char err[512] = "";

    /* Environment alone. */
    psc_task_flags_t none = {NULL, NULL, -1, -1};
    int rc = psc_tf_config_resolve(env, &none, 1, &cfg, err, sizeof err);
    if (rc) fail_msg("%s", err);
    assert_int_equal(cfg.task.type, PSC_JOB_WORKER);
    assert_int_equal(cfg.task.index, 1);
    assert_int_equal(cfg.has_task, 1);
    assert_int_equal(cfg.port, -1);
    psc_tf_config_deinit(&cfg);

    /* --job and --task_index replace the task; --port is kept. */
    psc_task_flags_t f = {NULL, "ps", 0, 4000};
    rc = psc_tf_config_resolve(env, &f, 1, &cfg, err, sizeof err);
    if (rc) fail_msg("%s", err);
    assert_int_equal(cfg.task.type, PSC_JOB_PS);
    assert_int_equal(cfg.task.index, 0);
    assert_int_equal(cfg.port, 4000);
    assert_int_equal(cfg.cluster.n[PSC_JOB_PS], 2);
    psc_tf_config_deinit(&cfg);

    /* Only --task_index: the type stays the environment's. */
    psc_task_flags_t fi = {NULL, NULL, 0, -1};
    rc = psc_tf_config_resolve(env, &fi, 1, &cfg, err, sizeof err);
    if (rc) fail_msg("%s", err);
    assert_int_equal(cfg.task.type, PSC_JOB_WORKER);
    assert_int_equal(cfg.task.index, 0);
    psc_tf_config_deinit(&cfg);

    /* --cluster inline replaces the environment's cluster; the env's index 1 is
     * checked against the new cluster (3 workers). */
    psc_task_flags_t fc = {"  {\"worker\": [\"x0:9\", \"x1:9\", \"x2:9\"]}", NULL, -1, -1};
    rc = psc_tf_config_resolve(env, &fc, 1, &cfg, err, sizeof err);
    if (rc) fail_msg("%s", err);
    assert_int_equal(cfg.cluster.n[PSC_JOB_WORKER], 3);
    assert_int_equal(cfg.cluster.n[PSC_JOB_PS], 0);
    assert_string_equal(cfg.cluster.addr[PSC_JOB_WORKER][1], "x1:9");
    assert_int_equal(cfg.task.index, 1);
    psc_tf_config_deinit(&cfg);

    /* An index valid only in the flag's cluster passes; the env's cluster is gone. */
    const char *env3 = "{\"cluster\": {\"worker\": [\"w0:1\"]}, \"task\": {\"type\": \"worker\", \"index\": 2}}";
    rc = psc_tf_config_resolve(env3, &fc, 1, &cfg, err, sizeof err);
    if (rc) fail_msg("%s", err);
    assert_int_equal(cfg.task.index, 2);
    psc_tf_config_deinit(&cfg);

    /* Out of range after the flags: the message names the flag. */
    psc_task_flags_t fbad = {NULL, "worker", 5, -1};
    assert_int_equal(psc_tf_config_resolve(env, &fbad, 1, &cfg, err, sizeof err), PSC_ECONFIG);
    assert_string_equal(err, "--task_index 5 out of range: the cluster has 2 worker tasks");
    assert_cluster_empty(&cfg.cluster);
    psc_task_flags_t fbad_idx = {NULL, NULL, 3, -1}; /* the type from the environment */
    assert_int_equal(psc_tf_config_resolve(env, &fbad_idx, 1, &cfg, err, sizeof err), PSC_ECONFIG);
    assert_string_equal(err, "--task_index 3 out of range: the cluster has 2 worker tasks");
    /* --job of a type the cluster lacks, with the environment's index: names --job,
     * not "TF_CONFIG: task.index" (issue 16 item 9) */
    psc_task_flags_t fchief = {NULL, "chief", -1, -1};
    assert_int_equal(psc_tf_config_resolve(env, &fchief, 1, &cfg, err, sizeof err), PSC_ECONFIG);
    assert_string_equal(err, "--job chief: the cluster has no chief task");
    assert_cluster_empty(&cfg.cluster);
    psc_task_flags_t fevalidx = {NULL, "evaluator", 0, -1};
    assert_int_equal(psc_tf_config_resolve(env, &fevalidx, 1, &cfg, err, sizeof err), PSC_ECONFIG);
    assert_string_equal(err, "--job evaluator: the cluster has no evaluator task");
    /* --job of a type the cluster has, the environment's index out of its range */
    psc_task_flags_t fps_env = {"{\"ps\": [\"p0:1\"], \"worker\": [\"w0:1\", \"w1:1\"]}", "ps", -1, -1};
    assert_int_equal(psc_tf_config_resolve(env, &fps_env, 1, &cfg, err, sizeof err), PSC_ECONFIG);
    assert_string_equal(err, "TF_CONFIG's task.index 1 (with --job ps) out of range: the cluster has 1 ps task "
                             "(pass --task_index)");
    /* a hole of a sparse --cluster named by --task_index */
    psc_task_flags_t fhole = {"{\"worker\": {\"0\": \"w0:1\", \"2\": \"w2:1\"}}", "worker", 1, -1};
    assert_int_equal(psc_tf_config_resolve(NULL, &fhole, 1, &cfg, err, sizeof err), PSC_ECONFIG);
    assert_string_equal(err, "--task_index 1 is not in the cluster: the sparse cluster has no address for worker 1");
    assert_cluster_empty(&cfg.cluster);
    psc_task_flags_t fbad_ps = {"{\"worker\": [\"a:1\"]}", NULL, -1, -1};
    assert_int_equal(psc_tf_config_resolve(env, &fbad_ps, 1, &cfg, err, sizeof err), PSC_ECONFIG);
    assert_non_null(strstr(err, "TF_CONFIG: task.index 1 out of range (cluster has 1 worker task)"));

    psc_task_flags_t fjob = {NULL, "master", -1, -1};
    assert_int_equal(psc_tf_config_resolve(env, &fjob, 1, &cfg, err, sizeof err), PSC_ECONFIG);
    assert_non_null(strstr(err, "--job"));
    assert_non_null(strstr(err, "master"));
    assert_cluster_empty(&cfg.cluster);

    psc_task_flags_t fneg = {NULL, NULL, -5, -1};
    assert_int_equal(psc_tf_config_resolve(env, &fneg, 1, &cfg, err, sizeof err), PSC_ECONFIG);
    assert_non_null(strstr(err, "--task_index"));

    psc_task_flags_t fport = {NULL, NULL, -1, 70000};
    assert_int_equal(psc_tf_config_resolve(env, &fport, 1, &cfg, err, sizeof err), PSC_ECONFIG);
    assert_non_null(strstr(err, "--port"));

    /* Errors in the flag's document say so. */
    psc_task_flags_t fdoc = {"{\"worker\": [\"nohost\"]}", NULL, -1, -1};
    assert_int_equal(psc_tf_config_resolve(env, &fdoc, 1, &cfg, err, sizeof err), PSC_ECONFIG);
    assert_true(strncmp(err, "--cluster: ", 11) == 0);
    assert_non_null(strstr(err, "worker[0]"));
    psc_task_flags_t fsyntax = {"{\"worker\": ", NULL, -1, -1};
    assert_int_equal(psc_tf_config_resolve(env, &fsyntax, 1, &cfg, err, sizeof err), PSC_ECONFIG);
    assert_true(strncmp(err, "--cluster: ", 11) == 0);
    psc_task_flags_t fempty = {"{}", NULL, -1, -1};
    assert_int_equal(psc_tf_config_resolve(env, &fempty, 1, &cfg, err, sizeof err), PSC_ECONFIG);
    assert_non_null(strstr(err, "no tasks"));

    /* A bad environment is an error even with flags. */
    psc_task_flags_t fall = {"{\"worker\": [\"a:1\"]}", "worker", 0, -1};
    assert_int_equal(psc_tf_config_resolve("{\"cluster\": 1}", &fall, 1, &cfg, err, sizeof err), PSC_ECONFIG);
    assert_true(strncmp(err, "TF_CONFIG: ", 11) == 0);
}

static void test_resolve_without_env(void **state)
{
    (void)state;
    psc_tf_config_t cfg;
    char err[512] = "";

    /* Flags only, inline cluster that is a whole TF_CONFIG document (task ignored). */
    psc_task_flags_t f = {"{\"cluster\": {\"ps\": [\"p:1\"], \"worker\": [\"w:1\"]}, \"task\": {\"type\": \"ps\", \"index\": 7}}",
                          "worker", 0, -1};
    int rc = psc_tf_config_resolve(NULL, &f, 1, &cfg, err, sizeof err);
    if (rc) fail_msg("%s", err);
    assert_int_equal(cfg.task.type, PSC_JOB_WORKER);
    assert_int_equal(cfg.task.index, 0);
    assert_int_equal(cfg.cluster.n[PSC_JOB_PS], 1);
    psc_tf_config_deinit(&cfg);

    /* A blank environment counts as unset. */
    rc = psc_tf_config_resolve("  \n", &f, 1, &cfg, err, sizeof err);
    if (rc) fail_msg("%s", err);
    psc_tf_config_deinit(&cfg);

    /* No cluster anywhere. */
    psc_task_flags_t none = {NULL, NULL, -1, -1};
    assert_int_equal(psc_tf_config_resolve(NULL, &none, 0, &cfg, err, sizeof err), PSC_ECONFIG);
    assert_non_null(strstr(err, "--cluster"));
    assert_int_equal(psc_tf_config_resolve(NULL, NULL, 0, &cfg, err, sizeof err), PSC_ECONFIG);

    /* require_task: the task must come from somewhere. */
    const char *env = "{\"cluster\": {\"worker\": [\"w0:1\"]}}";
    assert_int_equal(psc_tf_config_resolve(env, &none, 1, &cfg, err, sizeof err), PSC_ECONFIG);
    assert_non_null(strstr(err, "no task"));
    assert_non_null(strstr(err, "--job"));
    assert_cluster_empty(&cfg.cluster);
    psc_task_flags_t only_job = {NULL, "worker", -1, -1};
    assert_int_equal(psc_tf_config_resolve(env, &only_job, 1, &cfg, err, sizeof err), PSC_ECONFIG);
    assert_non_null(strstr(err, "no task"));
    /* ...but psctl (require_task = 0) may have none. */
    rc = psc_tf_config_resolve(env, &none, 0, &cfg, err, sizeof err);
    if (rc) fail_msg("%s", err);
    assert_int_equal(cfg.has_task, 0);
    assert_int_equal(cfg.cluster.n[PSC_JOB_WORKER], 1);
    psc_tf_config_deinit(&cfg);
}

static void test_resolve_cluster_file(void **state)
{
    (void)state;
    char path[] = "/tmp/psc_test_cluster_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *doc = "{\"worker\": [\"w0:5000\", \"w1:5001\"], \"ps\": {\"0\": \"p0:6000\"}}\n";
    assert_int_equal(write(fd, doc, strlen(doc)), (ssize_t)strlen(doc));
    close(fd);

    psc_tf_config_t cfg;
    char err[512] = "";
    psc_task_flags_t f = {path, "worker", 1, -1};
    int rc = psc_tf_config_resolve(NULL, &f, 1, &cfg, err, sizeof err);
    if (rc) fail_msg("%s", err);
    assert_int_equal(cfg.cluster.n[PSC_JOB_WORKER], 2);
    assert_string_equal(cfg.cluster.addr[PSC_JOB_PS][0], "p0:6000");
    assert_string_equal(psc_cluster_addr(&cfg.cluster, cfg.task), "w1:5001");
    psc_tf_config_deinit(&cfg);

    /* A bad document in the file names the flag and the file. */
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs("{\"worker\": [\"w0:5000\"],\n \"chief\": [\"c:1\", \"c:2\"]}\n", fp);
    fclose(fp);
    assert_int_equal(psc_tf_config_resolve(NULL, &f, 1, &cfg, err, sizeof err), PSC_ECONFIG);
    assert_true(strncmp(err, "--cluster: ", 11) == 0);
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, "chief"));
    unlink(path);

    /* A missing file. */
    assert_int_equal(psc_tf_config_resolve(NULL, &f, 1, &cfg, err, sizeof err), PSC_ECONFIG);
    char want[600];
    snprintf(want, sizeof want, "--cluster %s: cannot read: No such file or directory", path);
    assert_string_equal(err, want);
    assert_cluster_empty(&cfg.cluster);
}

static void test_cluster_parse(void **state)
{
    (void)state;
    psc_cluster_t c;
    char err[512] = "";
    int rc = psc_cluster_parse("{\"ps\": [\"p:1\", \"q:1\"]}", &c, err, sizeof err);
    if (rc) fail_msg("%s", err);
    assert_int_equal(c.n[PSC_JOB_PS], 2);
    psc_cluster_deinit(&c);
    assert_cluster_empty(&c);

    rc = psc_cluster_parse("{\"cluster\": {\"worker\": [\"w:1\"]}, \"task\": {\"type\": \"nonsense\"}}", &c, err,
                           sizeof err);
    if (rc) fail_msg("%s", err);
    assert_int_equal(c.n[PSC_JOB_WORKER], 1);
    psc_cluster_deinit(&c);

    assert_int_equal(psc_cluster_parse("{\"workers\": [\"w:1\"]}", &c, err, sizeof err), PSC_ECONFIG);
    assert_non_null(strstr(err, "workers"));
    assert_cluster_empty(&c);
}

static void test_job_type_names(void **state)
{
    (void)state;
    for (int t = 0; t < PSC_JOB__COUNT; t++) {
        enum psc_job_type back;
        assert_int_equal(psc_job_type_parse(psc_job_type_name((enum psc_job_type)t), &back), 0);
        assert_int_equal(back, t);
    }
    assert_string_equal(psc_job_type_name(PSC_JOB_PS), "ps");
    enum psc_job_type t;
    assert_int_equal(psc_job_type_parse("Worker", &t), PSC_EINVAL);
    assert_int_equal(psc_job_type_parse("master", &t), PSC_EINVAL);
}

static void test_roles(void **state)
{
    (void)state;
    psc_tf_config_t cfg;
    char err[512] = "";
    /* With a chief: replicas are chief, w0, w1, w2. */
    int rc = psc_tf_config_parse("{\"cluster\": {\"chief\": [\"c:1\"], \"worker\": [\"a:1\", \"b:1\", \"d:1\"],"
                                 " \"ps\": [\"p:1\"], \"evaluator\": [\"e:1\"]}}",
                                 &cfg, err, sizeof err);
    if (rc) fail_msg("%s", err);
    const psc_cluster_t *c = &cfg.cluster;
    assert_int_equal(psc_cluster_num_replicas(c), 4);
    psc_task_t chief = {PSC_JOB_CHIEF, 0}, w0 = {PSC_JOB_WORKER, 0}, w2 = {PSC_JOB_WORKER, 2},
               ps0 = {PSC_JOB_PS, 0}, ev = {PSC_JOB_EVALUATOR, 0};
    assert_int_equal(psc_task_replica_rank(c, chief), 0);
    assert_int_equal(psc_task_replica_rank(c, w0), 1);
    assert_int_equal(psc_task_replica_rank(c, w2), 3);
    assert_int_equal(psc_task_replica_rank(c, ps0), -1);
    assert_int_equal(psc_task_replica_rank(c, ev), -1);
    assert_true(psc_task_is_chief(c, chief));
    assert_false(psc_task_is_chief(c, w0));
    assert_false(psc_task_is_chief(c, ps0));
    psc_task_t who = psc_cluster_chief(c);
    assert_int_equal(who.type, PSC_JOB_CHIEF);
    assert_int_equal(who.index, 0);
    psc_tf_config_deinit(&cfg);

    /* Without a chief: worker 0 is the chief, ranks are worker indices. */
    rc = psc_tf_config_parse("{\"cluster\": {\"worker\": [\"a:1\", \"b:1\", \"d:1\"], \"ps\": [\"p:1\"]}}", &cfg, err,
                             sizeof err);
    if (rc) fail_msg("%s", err);
    c = &cfg.cluster;
    assert_int_equal(psc_cluster_num_replicas(c), 3);
    assert_int_equal(psc_task_replica_rank(c, w0), 0);
    assert_int_equal(psc_task_replica_rank(c, w2), 2);
    assert_int_equal(psc_task_replica_rank(c, chief), -1);
    assert_true(psc_task_is_chief(c, w0));
    assert_false(psc_task_is_chief(c, w2));
    who = psc_cluster_chief(c);
    assert_int_equal(who.type, PSC_JOB_WORKER);
    assert_int_equal(who.index, 0);
    psc_tf_config_deinit(&cfg);
}

static void test_bind_address(void **state)
{
    (void)state;
    char buf[64];
    assert_int_equal(psc_task_bind_address("127.0.0.1:5000", -1, buf, sizeof buf), 0);
    assert_string_equal(buf, "127.0.0.1:5000");
    assert_int_equal(psc_task_bind_address("ps-0.ps:2222", -1, buf, sizeof buf), 0);
    assert_string_equal(buf, "0.0.0.0:2222");
    assert_int_equal(psc_task_bind_address("ps-0.ps:2222", 4444, buf, sizeof buf), 0);
    assert_string_equal(buf, "0.0.0.0:4444");
    assert_int_equal(psc_task_bind_address("127.0.0.1:5000", 0, buf, sizeof buf), 0);
    assert_string_equal(buf, "127.0.0.1:0");
    assert_int_equal(psc_task_bind_address("[::1]:7", -1, buf, sizeof buf), 0);
    assert_string_equal(buf, "[::1]:7");
    assert_int_equal(psc_task_bind_address("[::1]:7", 8, buf, sizeof buf), 0);
    assert_string_equal(buf, "[::1]:8");
    assert_int_equal(psc_task_bind_address("localhost:80", -1, buf, sizeof buf), 0);
    assert_string_equal(buf, "0.0.0.0:80");
    /* No port: the default 2222. */
    assert_int_equal(psc_task_bind_address("worker-3", -1, buf, sizeof buf), 0);
    assert_string_equal(buf, "0.0.0.0:2222");
    assert_int_equal(psc_task_bind_address("10.1.2.3", -1, buf, sizeof buf), 0);
    assert_string_equal(buf, "10.1.2.3:2222");
    /* Not an address, or no room. */
    assert_int_equal(psc_task_bind_address(NULL, -1, buf, sizeof buf), PSC_EINVAL);
    assert_int_equal(psc_task_bind_address("h:99999", -1, buf, sizeof buf), PSC_EINVAL);
    assert_int_equal(psc_task_bind_address("127.0.0.1:5000", -1, buf, 8), PSC_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dense_form),
        cmocka_unit_test(test_sparse_form),
        cmocka_unit_test(test_chief_and_evaluator),
        cmocka_unit_test(test_invalid_documents),
        cmocka_unit_test(test_resolve_flags_override_env),
        cmocka_unit_test(test_resolve_without_env),
        cmocka_unit_test(test_resolve_cluster_file),
        cmocka_unit_test(test_cluster_parse),
        cmocka_unit_test(test_job_type_names),
        cmocka_unit_test(test_roles),
        cmocka_unit_test(test_bind_address),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
