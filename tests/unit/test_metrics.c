/* test_metrics — the Prometheus registry, its text rendering and the /metrics server.
 *
 * Rendering is compared with hand-written pages: families grouped in
 * registration order, cumulative histogram buckets ending in +Inf, label values
 * and HELP escaped, collector samples merged into their family. Updates from 8
 * threads must add up exactly while another thread renders. The HTTP server is
 * driven with raw sockets on 127.0.0.1 (port from binding 0): good scrapes,
 * 404s, 400s for junk, an overlong request line and a truncated head, a client
 * that says nothing (the next scrape is still answered), stop while a client
 * idles. When /opt/psc/promtool is there (deploy/setup.sh puts it there) it
 * must accept a rendered page and reject a broken one.
 */
#include "metrics.h"
#include "psc.h"

#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <cmocka.h>

#define PROMTOOL "/opt/psc/promtool"
#define LABELS(...) ((const char *const[]){__VA_ARGS__, NULL})

static void assert_page(psc_metrics_t *m, const char *want)
{
    size_t len;
    char *got = psc_metrics_render(m, &len);
    assert_int_equal(len, strlen(got));
    if (strcmp(got, want) != 0) {
        print_message("---- got ----\n%s---- want ----\n%s----\n", got, want);
        fail_msg("rendered page differs");
    }
    free(got);
}

/* ---- registry and rendering ---- */

static void test_render_exact(void **state)
{
    (void)state;
    psc_metrics_t *m = psc_metrics_create();
    static const double lat[] = {0.25, 0.5, 1};
    static const double sizes[] = {1024};

    psc_counter_t *c = psc_metrics_counter(m, "psc_ps_push_bytes_total", "Bytes received by Push.", NULL);
    psc_gauge_t *g0 = psc_metrics_gauge(m, "psc_ps_shard_bytes", "Bytes held, per \\ shard.\nSecond \"line\".",
                                        LABELS("shard", "0"));
    psc_histogram_t *push = psc_metrics_histogram(m, "psc_rpc_latency_seconds", "RPC time.",
                                                  LABELS("method", "Push"), lat, 3);
    /* Registered between the series of other families: still rendered with them. */
    psc_gauge_t *g1 = psc_metrics_gauge(m, "psc_ps_shard_bytes", "ignored: the family has its help",
                                        LABELS("shard", "1", "path", "a\"b\\c\nd"));
    psc_histogram_t *pull = psc_metrics_histogram(m, "psc_rpc_latency_seconds", "RPC time.",
                                                  LABELS("method", "Pull"), lat, 3);
    psc_histogram_t *plain = psc_metrics_histogram(m, "psc_test_sizes_bytes", "Sizes.", NULL, sizes, 1);
    psc_gauge_t *nohelp = psc_metrics_gauge(m, "psc_test_nohelp", "", NULL);

    psc_counter_add(c, 1000);
    psc_counter_inc(c);
    psc_gauge_set(g0, 1.5);
    psc_gauge_set(g1, 3);
    psc_gauge_dec(g1);
    psc_gauge_add(g1, -4);
    psc_gauge_inc(nohelp);
    /* A bound is inclusive: 0.25 counts in le="0.25". */
    psc_histogram_observe(push, 0.125);
    psc_histogram_observe(push, 0.25);
    psc_histogram_observe(push, 0.75);
    psc_histogram_observe(push, 4);
    psc_histogram_observe(plain, 2048);
    (void)pull;

    assert_true(psc_counter_value(c) == 1001);
    assert_true(psc_gauge_value(g1) == -2);
    assert_int_equal(psc_histogram_count(push), 4);
    assert_page(m,
                "# HELP psc_ps_push_bytes_total Bytes received by Push.\n"
                "# TYPE psc_ps_push_bytes_total counter\n"
                "psc_ps_push_bytes_total 1001\n"
                "# HELP psc_ps_shard_bytes Bytes held, per \\\\ shard.\\nSecond \"line\".\n"
                "# TYPE psc_ps_shard_bytes gauge\n"
                "psc_ps_shard_bytes{shard=\"0\"} 1.5\n"
                "psc_ps_shard_bytes{shard=\"1\",path=\"a\\\"b\\\\c\\nd\"} -2\n"
                "# HELP psc_rpc_latency_seconds RPC time.\n"
                "# TYPE psc_rpc_latency_seconds histogram\n"
                "psc_rpc_latency_seconds_bucket{method=\"Push\",le=\"0.25\"} 2\n"
                "psc_rpc_latency_seconds_bucket{method=\"Push\",le=\"0.5\"} 2\n"
                "psc_rpc_latency_seconds_bucket{method=\"Push\",le=\"1\"} 3\n"
                "psc_rpc_latency_seconds_bucket{method=\"Push\",le=\"+Inf\"} 4\n"
                "psc_rpc_latency_seconds_sum{method=\"Push\"} 5.125\n"
                "psc_rpc_latency_seconds_count{method=\"Push\"} 4\n"
                "psc_rpc_latency_seconds_bucket{method=\"Pull\",le=\"0.25\"} 0\n"
                "psc_rpc_latency_seconds_bucket{method=\"Pull\",le=\"0.5\"} 0\n"
                "psc_rpc_latency_seconds_bucket{method=\"Pull\",le=\"1\"} 0\n"
                "psc_rpc_latency_seconds_bucket{method=\"Pull\",le=\"+Inf\"} 0\n"
                "psc_rpc_latency_seconds_sum{method=\"Pull\"} 0\n"
                "psc_rpc_latency_seconds_count{method=\"Pull\"} 0\n"
                "# HELP psc_test_sizes_bytes Sizes.\n"
                "# TYPE psc_test_sizes_bytes histogram\n"
                "psc_test_sizes_bytes_bucket{le=\"1024\"} 0\n"
                "psc_test_sizes_bytes_bucket{le=\"+Inf\"} 1\n"
                "psc_test_sizes_bytes_sum 2048\n"
                "psc_test_sizes_bytes_count 1\n"
                "# TYPE psc_test_nohelp gauge\n"
                "psc_test_nohelp 1\n");
    psc_metrics_destroy(m);

    /* An empty registry renders an empty page. */
    m = psc_metrics_create();
    assert_page(m, "");
    psc_metrics_destroy(m);
    psc_metrics_destroy(NULL);
}

static void test_number_format(void **state)
{
    (void)state;
    psc_metrics_t *m = psc_metrics_create();
    static const struct {
        double v;
        const char *text;
    } cases[] = {
        {0.1, "0.1"},          {0.0001, "0.0001"},    {1e21, "1e+21"},       {-0.5, "-0.5"},
        {1.0 / 3, "0.3333333333333333"}, {123456789012, "123456789012"}, {INFINITY, "+Inf"},
        {-INFINITY, "-Inf"},   {NAN, "NaN"},
    };
    char want[2048] = "# HELP psc_test_value_ratio v\n# TYPE psc_test_value_ratio gauge\n";
    for (size_t i = 0; i < PSC_ARRAY_LEN(cases); i++) {
        char idx[8];
        snprintf(idx, sizeof idx, "%zu", i);
        psc_gauge_set(psc_metrics_gauge(m, "psc_test_value_ratio", "v", LABELS("i", idx)), cases[i].v);
        char line[128];
        snprintf(line, sizeof line, "psc_test_value_ratio{i=\"%zu\"} %s\n", i, cases[i].text);
        strcat(want, line);
    }
    /* Integer counters are exact past 2^53; a fractional part switches to a double. */
    psc_counter_t *big = psc_metrics_counter(m, "psc_test_big_total", "b", NULL);
    psc_counter_add(big, (UINT64_C(1) << 63) + 1);
    psc_counter_t *frac = psc_metrics_counter(m, "psc_test_frac_seconds_total", "f", NULL);
    psc_counter_add(frac, 2);
    psc_counter_add_double(frac, 0.25);
    strcat(want, "# HELP psc_test_big_total b\n# TYPE psc_test_big_total counter\n"
                 "psc_test_big_total 9223372036854775809\n"
                 "# HELP psc_test_frac_seconds_total f\n# TYPE psc_test_frac_seconds_total counter\n"
                 "psc_test_frac_seconds_total 2.25\n");
    assert_page(m, want);
    /* The standard latency buckets render as written. */
    psc_metrics_histogram(m, "psc_test_latency_seconds", "l", NULL, psc_metrics_latency_buckets,
                          PSC_METRICS_LATENCY_NBUCKETS);
    char *page = psc_metrics_render(m, NULL);
    assert_non_null(strstr(page, "psc_test_latency_seconds_bucket{le=\"0.0001\"} 0\n"
                                 "psc_test_latency_seconds_bucket{le=\"0.00025\"} 0\n"));
    assert_non_null(strstr(page, "psc_test_latency_seconds_bucket{le=\"10\"} 0\n"
                                 "psc_test_latency_seconds_bucket{le=\"+Inf\"} 0\n"));
    free(page);
    psc_metrics_destroy(m);
}

static void test_register_finds_existing(void **state)
{
    (void)state;
    psc_metrics_t *m = psc_metrics_create();
    static const double b[] = {1, 2};
    psc_counter_t *a = psc_metrics_counter(m, "psc_rpc_requests_total", "h", LABELS("method", "Push"));
    assert_ptr_equal(psc_metrics_counter(m, "psc_rpc_requests_total", "h", LABELS("method", "Push")), a);
    assert_ptr_not_equal(psc_metrics_counter(m, "psc_rpc_requests_total", "h", LABELS("method", "Pull")), a);
    assert_ptr_not_equal(psc_metrics_counter(m, "psc_rpc_requests_total", "h", NULL), a);
    psc_histogram_t *h = psc_metrics_histogram(m, "psc_test_h_seconds", "h", NULL, b, 2);
    assert_ptr_equal(psc_metrics_histogram(m, "psc_test_h_seconds", "h", NULL, b, 2), h);

    assert_true(psc_metrics_name_valid("psc_ps_push_bytes_total"));
    assert_true(psc_metrics_name_valid("a:b_c9"));
    assert_true(psc_metrics_name_valid(":x"));
    assert_false(psc_metrics_name_valid(""));
    assert_false(psc_metrics_name_valid(NULL));
    assert_false(psc_metrics_name_valid("9lives"));
    assert_false(psc_metrics_name_valid("a-b"));
    assert_false(psc_metrics_name_valid("a b"));
    assert_false(psc_metrics_name_valid("caf\xc3\xa9"));
    assert_true(psc_metrics_label_name_valid("method"));
    assert_true(psc_metrics_label_name_valid("_x1"));
    assert_false(psc_metrics_label_name_valid("__name__"));
    assert_false(psc_metrics_label_name_valid("a:b"));
    assert_false(psc_metrics_label_name_valid("1a"));
    assert_false(psc_metrics_label_name_valid(""));
    psc_metrics_destroy(m);
}

/* Registration mistakes are bugs: each must abort (in a child). */
static void expect_abort(int which)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stderr)) _exit(2);
        psc_metrics_t *m = psc_metrics_create();
        static const double b[] = {1, 2}, b2[] = {1, 3}, bad[] = {2, 1};
        psc_metrics_counter(m, "psc_x_total", "h", NULL);
        psc_metrics_histogram(m, "psc_h_seconds", "h", NULL, b, 2);
        switch (which) {
        case 0: psc_metrics_gauge(m, "psc_x_total", "h", NULL); break;          /* other type */
        case 1: psc_metrics_histogram(m, "psc_h_seconds", "h", NULL, b2, 2); break; /* other buckets */
        case 2: psc_metrics_gauge(m, "psc-x", "h", NULL); break;                /* bad name */
        case 3: psc_metrics_gauge(m, "psc_y", "h", LABELS("__a", "1")); break;  /* reserved label */
        case 4: psc_metrics_gauge(m, "psc_y", "h", LABELS("a", "1", "a", "2")); break;
        case 5: psc_metrics_histogram(m, "psc_z_seconds", "h", LABELS("le", "1"), b, 2); break;
        case 6: psc_metrics_histogram(m, "psc_z_seconds", "h", NULL, bad, 2); break;
        case 7: psc_counter_add_double(psc_metrics_counter(m, "psc_x_total", "h", NULL), -1); break;
        default: break;
        }
        _exit(0);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGABRT) fail_msg("case %d: status 0x%x, want SIGABRT", which, st);
}

static void test_registration_bugs_abort(void **state)
{
    (void)state;
    for (int i = 0; i <= 7; i++) expect_abort(i);
}

/* ---- collectors ---- */

typedef struct {
    double bytes[2];
    int calls;
    int rc[8];
} fake_store_t;

static void store_collect(psc_metrics_emit_t *e, void *arg)
{
    fake_store_t *st = arg;
    st->calls++;
    for (int ps = 0; ps < 2; ps++) {
        char idx[8];
        snprintf(idx, sizeof idx, "%d", ps);
        st->rc[ps] = psc_metrics_emit_gauge(e, "psc_ps_store_bytes", "Bytes of variables per PS.",
                                            LABELS("ps", idx), st->bytes[ps]);
    }
    /* Joins the registered family of the same name and type. */
    st->rc[2] = psc_metrics_emit_counter(e, "psc_ps_push_bytes_total", "other help",
                                         LABELS("source", "collector"), 7);
    /* Refused: a type other than the family's, registered or emitted. */
    st->rc[3] = psc_metrics_emit_gauge(e, "psc_ps_push_bytes_total", "x", NULL, 1);
    st->rc[4] = psc_metrics_emit_counter(e, "psc_ps_store_bytes", "x", NULL, 1);
    /* Refused: bad names, a label without a value. */
    st->rc[5] = psc_metrics_emit_gauge(e, "bad name", "x", NULL, 1);
    st->rc[6] = psc_metrics_emit_gauge(e, "psc_ok", "x", (const char *const[]){"a", NULL}, 1);
    st->rc[7] = psc_metrics_emit_gauge(e, "psc_test_up", "Escaped \\ help.", LABELS("v", "\"q\""), 1);
}

static void test_collectors(void **state)
{
    (void)state;
    psc_metrics_t *m = psc_metrics_create();
    psc_counter_add(psc_metrics_counter(m, "psc_ps_push_bytes_total", "Bytes received by Push.", NULL), 5);
    fake_store_t st = {.bytes = {1048576, 2.5}};
    assert_int_equal(psc_metrics_add_collector(m, store_collect, &st), 0);

    static const char want[] =
        "# HELP psc_ps_push_bytes_total Bytes received by Push.\n"
        "# TYPE psc_ps_push_bytes_total counter\n"
        "psc_ps_push_bytes_total 5\n"
        "psc_ps_push_bytes_total{source=\"collector\"} 7\n"
        "# HELP psc_ps_store_bytes Bytes of variables per PS.\n"
        "# TYPE psc_ps_store_bytes gauge\n"
        "psc_ps_store_bytes{ps=\"0\"} 1048576\n"
        "psc_ps_store_bytes{ps=\"1\"} 2.5\n"
        "# HELP psc_test_up Escaped \\\\ help.\n"
        "# TYPE psc_test_up gauge\n"
        "psc_test_up{v=\"\\\"q\\\"\"} 1\n";
    assert_page(m, want);
    assert_int_equal(st.calls, 1);
    static const int want_rc[8] = {0, 0, 0, PSC_EINVAL, PSC_EINVAL, PSC_EINVAL, PSC_EINVAL, 0};
    for (int i = 0; i < 8; i++)
        if (st.rc[i] != want_rc[i]) fail_msg("emit %d returned %d, want %d", i, st.rc[i], want_rc[i]);

    /* Values are read at scrape time. */
    st.bytes[1] = 4096;
    char *page = psc_metrics_render(m, NULL);
    assert_non_null(strstr(page, "psc_ps_store_bytes{ps=\"1\"} 4096\n"));
    free(page);
    assert_int_equal(st.calls, 2);

    assert_int_equal(psc_metrics_remove_collector(m, store_collect, &st), 0);
    assert_int_equal(psc_metrics_remove_collector(m, store_collect, &st), PSC_ENOTFOUND);
    assert_page(m, "# HELP psc_ps_push_bytes_total Bytes received by Push.\n"
                   "# TYPE psc_ps_push_bytes_total counter\n"
                   "psc_ps_push_bytes_total 5\n");
    assert_int_equal(st.calls, 2);
    psc_metrics_destroy(m);
}

/* ---- concurrency ---- */

#define NTHREADS 8
#define NITER 100000

typedef struct {
    psc_counter_t *c, *frac;
    psc_gauge_t *g;
    psc_histogram_t *h;
    psc_metrics_t *m;
    atomic_int done;
    int pages;
    int bad_pages;
} conc_t;

static void *conc_worker(void *arg)
{
    conc_t *x = arg;
    for (int i = 0; i < NITER; i++) {
        psc_counter_inc(x->c);
        psc_counter_add_double(x->frac, 0.5);
        psc_gauge_add(x->g, 1.0);
        psc_histogram_observe(x->h, (double)(i % 4) * 0.25); /* 0, 0.25, 0.5, 0.75 */
    }
    return NULL;
}

/* Renders while the workers run: _count must equal the +Inf bucket on every page. */
static void *conc_scraper(void *arg)
{
    conc_t *x = arg;
    while (!x->done) {
        char *page = psc_metrics_render(x->m, NULL);
        const char *inf = strstr(page, "psc_test_conc_seconds_bucket{le=\"+Inf\"} ");
        const char *cnt = strstr(page, "psc_test_conc_seconds_count ");
        if (!inf || !cnt ||
            strtoull(inf + strlen("psc_test_conc_seconds_bucket{le=\"+Inf\"} "), NULL, 10) !=
                strtoull(cnt + strlen("psc_test_conc_seconds_count "), NULL, 10))
            x->bad_pages++;
        x->pages++;
        free(page);
    }
    return NULL;
}

static void test_concurrent_updates(void **state)
{
    (void)state;
    static const double b[] = {0.25, 0.5};
    conc_t x = {.m = psc_metrics_create()};
    x.c = psc_metrics_counter(x.m, "psc_test_conc_total", "c", NULL);
    x.frac = psc_metrics_counter(x.m, "psc_test_conc_seconds_total", "c", NULL);
    x.g = psc_metrics_gauge(x.m, "psc_test_conc_inflight", "g", NULL);
    x.h = psc_metrics_histogram(x.m, "psc_test_conc_seconds", "h", NULL, b, 2);
    pthread_t th[NTHREADS], scraper;
    assert_int_equal(pthread_create(&scraper, NULL, conc_scraper, &x), 0);
    for (int i = 0; i < NTHREADS; i++) assert_int_equal(pthread_create(&th[i], NULL, conc_worker, &x), 0);
    for (int i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
    x.done = 1;
    pthread_join(scraper, NULL);

    const uint64_t n = (uint64_t)NTHREADS * NITER;
    assert_true(psc_counter_value(x.c) == (double)n);
    assert_true(psc_counter_value(x.frac) == 0.5 * (double)n);
    assert_true(psc_gauge_value(x.g) == (double)n);
    assert_int_equal(psc_histogram_count(x.h), n);
    assert_true(x.pages > 0);
    assert_int_equal(x.bad_pages, 0);
    char want[1024];
    snprintf(want, sizeof want,
             "psc_test_conc_seconds_bucket{le=\"0.25\"} %llu\n"
             "psc_test_conc_seconds_bucket{le=\"0.5\"} %llu\n"
             "psc_test_conc_seconds_bucket{le=\"+Inf\"} %llu\n"
             "psc_test_conc_seconds_sum %llu\n"
             "psc_test_conc_seconds_count %llu\n",
             (unsigned long long)(n / 2), (unsigned long long)(3 * n / 4), (unsigned long long)n,
             (unsigned long long)(n / 4 * 3 / 2), (unsigned long long)n);
    char *page = psc_metrics_render(x.m, NULL);
    if (!strstr(page, want)) fail_msg("page:\n%s\nlacks:\n%s", page, want);
    free(page);
    psc_metrics_destroy(x.m);
}

/* ---- promtool ---- */

/* A page like a daemon's: what promtool lints. */
static psc_metrics_t *daemon_like_registry(void)
{
    psc_metrics_t *m = psc_metrics_create();
    psc_counter_add(psc_metrics_counter(m, "psc_ps_push_bytes_total", "Bytes of gradients received by Push.", NULL),
                    123456);
    static const char *const methods[] = {"Push", "Pull", "Barrier"};
    for (size_t i = 0; i < PSC_ARRAY_LEN(methods); i++) {
        psc_counter_t *c = psc_metrics_counter(m, "psc_rpc_requests_total", "RPCs handled.",
                                               LABELS("method", methods[i]));
        psc_histogram_t *h = psc_metrics_histogram(m, "psc_rpc_latency_seconds", "RPC handling time.",
                                                   LABELS("method", methods[i]), psc_metrics_latency_buckets,
                                                   PSC_METRICS_LATENCY_NBUCKETS);
        for (int k = 0; k < 50; k++) {
            psc_counter_inc(c);
            psc_histogram_observe(h, 0.00003 * k * k * (double)(i + 1));
        }
    }
    psc_gauge_set(psc_metrics_gauge(m, "psc_ps_shard_bytes", "Bytes of parameters held.",
                                    LABELS("shard", "0", "note", "a \"quoted\" \\ value\nwith a newline")),
                  4096);
    psc_gauge_set(psc_metrics_gauge(m, "psc_worker_step_lag_ratio", "Lag.", NULL), NAN);
    return m;
}

/* Runs promtool check metrics on page; returns its exit status, its output in out. */
static int promtool_check(const char *page, char *out, size_t outlen)
{
    char in[] = "/tmp/psc_metrics_in_XXXXXX", res[] = "/tmp/psc_metrics_out_XXXXXX";
    int fd = mkstemp(in), rfd = mkstemp(res);
    assert_true(fd >= 0 && rfd >= 0);
    assert_int_equal(write(fd, page, strlen(page)), (ssize_t)strlen(page));
    close(fd);
    close(rfd);
    char cmd[256];
    snprintf(cmd, sizeof cmd, PROMTOOL " check metrics < %s > %s 2>&1", in, res);
    int st = system(cmd);
    FILE *f = fopen(res, "r");
    size_t n = f ? fread(out, 1, outlen - 1, f) : 0;
    out[n] = '\0';
    if (f) fclose(f);
    unlink(in);
    unlink(res);
    assert_true(st != -1 && WIFEXITED(st));
    return WEXITSTATUS(st);
}

static void test_promtool_accepts_page(void **state)
{
    (void)state;
    if (access(PROMTOOL, X_OK) != 0) {
        print_message("skipped: %s absent (deploy/setup.sh installs it)\n", PROMTOOL);
        return;
    }
    psc_metrics_t *m = daemon_like_registry();
    fake_store_t st = {.bytes = {1, 2}};
    psc_metrics_add_collector(m, store_collect, &st);
    char *page = psc_metrics_render(m, NULL);
    char out[4096];
    int rc = promtool_check(page, out, sizeof out);
    if (rc != 0) fail_msg("promtool check metrics: exit %d\n%s\npage:\n%s", rc, out, page);
    free(page);
    psc_metrics_destroy(m);
    /* The check can fail: a broken page and an unlinted one are refused. */
    assert_int_not_equal(promtool_check("psc_broken{a=\"1\" 1\n", out, sizeof out), 0);
    assert_int_not_equal(promtool_check("# HELP psc_requests c\n# TYPE psc_requests counter\npsc_requests 1\n",
                                        out, sizeof out),
                         0);
}

/* ---- HTTP ---- */

static int connect_local(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    struct timeval tv = {.tv_sec = 20};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    return fd;
}

/* Reads until EOF (or a reset); returns a NUL-terminated malloc'd buffer. */
static char *read_all(int fd, size_t *len)
{
    size_t cap = 4096, n = 0;
    char *p = psc_xmalloc(cap);
    for (;;) {
        if (n + 1 == cap) {
            cap *= 2;
            p = psc_xrealloc(p, cap);
        }
        ssize_t r = recv(fd, p + n, cap - n - 1, 0);
        if (r > 0) n += (size_t)r;
        else if (r < 0 && errno == EINTR) continue;
        else break;
    }
    p[n] = '\0';
    if (len) *len = n;
    return p;
}

/* Sends req (and, when half_close, FIN after it), reads the whole answer. */
static char *exchange(int port, const char *req, size_t reqlen, int half_close, size_t *len)
{
    int fd = connect_local(port);
    size_t off = 0;
    while (off < reqlen) {
        ssize_t w = send(fd, req + off, reqlen - off, MSG_NOSIGNAL);
        if (w <= 0) break; /* the server may answer and stop reading early */
        off += (size_t)w;
    }
    if (half_close) shutdown(fd, SHUT_WR);
    char *resp = read_all(fd, len);
    close(fd);
    return resp;
}

static char *exchange_str(int port, const char *req, int half_close)
{
    return exchange(port, req, strlen(req), half_close, NULL);
}

/* Checks the status line, headers and Content-Length; returns the body. */
static const char *check_response(const char *resp, int status, const char *ctype)
{
    char line[64];
    snprintf(line, sizeof line, "HTTP/1.1 %d ", status);
    if (strncmp(resp, line, strlen(line)) != 0) fail_msg("want %d, got:\n%.200s", status, resp);
    const char *body = strstr(resp, "\r\n\r\n");
    assert_non_null(body);
    body += 4;
    char ct[128];
    snprintf(ct, sizeof ct, "\r\nContent-Type: %s\r\n", ctype);
    assert_non_null(strstr(resp, ct));
    assert_non_null(strstr(resp, "\r\nConnection: close\r\n"));
    const char *cl = strstr(resp, "\r\nContent-Length: ");
    assert_non_null(cl);
    assert_true(cl < body);
    assert_int_equal(strtoul(cl + 18, NULL, 10), strlen(body));
    return body;
}

#define CT_METRICS "text/plain; version=0.0.4; charset=utf-8"
#define CT_TEXT "text/plain; charset=utf-8"

/* A good scrape: 200 and exactly the rendered page. */
static void scrape_ok(psc_metrics_t *m, int port)
{
    char *resp = exchange_str(port, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: test\r\n\r\n", 0);
    const char *body = check_response(resp, 200, CT_METRICS);
    char *page = psc_metrics_render(m, NULL);
    assert_string_equal(body, page);
    free(page);
    free(resp);
}

static void expect_status(int port, const char *req, size_t reqlen, int half_close, int status)
{
    char *resp = exchange(port, req, reqlen, half_close, NULL);
    const char *body = check_response(resp, status, status == 200 ? CT_METRICS : CT_TEXT);
    if (status == 404) assert_string_equal(body, "not found\n");
    if (status == 400) assert_string_equal(body, "bad request\n");
    free(resp);
}

static int serve_local(psc_metrics_t *m)
{
    char err[256] = "";
    int port = psc_metrics_serve(m, "127.0.0.1", 0, err, sizeof err);
    if (port <= 0) fail_msg("serve: %d %s", port, err);
    return port;
}

static void test_http_scrape(void **state)
{
    (void)state;
    psc_metrics_t *m = daemon_like_registry();
    int port = serve_local(m);
    scrape_ok(m, port);
    scrape_ok(m, port);
    /* HTTP/1.0, a query string, bare LF line ends. */
    char *resp = exchange_str(port, "GET /metrics?debug=1 HTTP/1.0\n\n", 0);
    assert_non_null(strstr(check_response(resp, 200, CT_METRICS), "psc_ps_push_bytes_total 123456\n"));
    free(resp);
    /* HEAD: the headers of the page, no body. */
    resp = exchange_str(port, "HEAD /metrics HTTP/1.1\r\n\r\n", 0);
    assert_true(strncmp(resp, "HTTP/1.1 200 OK\r\n", 17) == 0);
    const char *end = strstr(resp, "\r\n\r\n");
    assert_non_null(end);
    assert_int_equal(end[4], '\0');
    size_t pagelen;
    free(psc_metrics_render(m, &pagelen));
    char cl[64];
    snprintf(cl, sizeof cl, "Content-Length: %zu\r\n", pagelen);
    assert_non_null(strstr(resp, cl));
    free(resp);
    /* A scrape sees updates. */
    psc_counter_add(psc_metrics_counter(m, "psc_ps_push_bytes_total", "Bytes of gradients received by Push.", NULL),
                    1);
    resp = exchange_str(port, "GET /metrics HTTP/1.1\r\n\r\n", 0);
    assert_non_null(strstr(check_response(resp, 200, CT_METRICS), "psc_ps_push_bytes_total 123457\n"));
    free(resp);
    psc_metrics_destroy(m); /* stops the server */
}

static void test_http_not_found(void **state)
{
    (void)state;
    psc_metrics_t *m = daemon_like_registry();
    int port = serve_local(m);
    static const char *const reqs[] = {
        "GET / HTTP/1.1\r\n\r\n",
        "GET /metricsx HTTP/1.1\r\n\r\n",
        "GET /metrics/ HTTP/1.1\r\n\r\n",
        "GET /favicon.ico HTTP/1.1\r\nHost: x\r\n\r\n",
        "POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
        "DELETE /metrics HTTP/1.0\r\n\r\n",
        "get /metrics HTTP/1.1\r\n\r\n",
    };
    for (size_t i = 0; i < PSC_ARRAY_LEN(reqs); i++) expect_status(port, reqs[i], strlen(reqs[i]), 0, 404);
    scrape_ok(m, port);
    psc_metrics_destroy(m);
}

static void test_http_junk(void **state)
{
    (void)state;
    psc_metrics_t *m = daemon_like_registry();
    int port = serve_local(m);
    /* Malformed request lines: answered at once, without waiting for the head. */
    static const char *const lines[] = {
        "hello\r\n",
        "GET /metrics\r\n\r\n",               /* HTTP/0.9 */
        "GET /metrics HTTP/2.0\r\n\r\n",
        "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",   /* the HTTP/2 preface */
        "GET  /metrics HTTP/1.1\r\n\r\n",     /* two spaces */
        "GET /metrics HTTP/1.1 \r\n\r\n",
        "GET metrics HTTP/1.1\r\n\r\n",
        " GET /metrics HTTP/1.1\r\n\r\n",
        "\r\n",
        "G{T /metrics HTTP/1.1\r\n\r\n",
        "GET /me\x01trics HTTP/1.1\r\n\r\n",
        "GET /m\xc3\xa9trics HTTP/1.1\r\n\r\n",
    };
    for (size_t i = 0; i < PSC_ARRAY_LEN(lines); i++) expect_status(port, lines[i], strlen(lines[i]), 0, 400);
    /* NULs and binary. */
    char bin[300];
    for (size_t i = 0; i < sizeof bin; i++) bin[i] = (char)((i * 37 + 11) & 0xff);
    expect_status(port, bin, sizeof bin, 1, 400);
    expect_status(port, "GET /metrics HTTP/1.1\r\n\0\0\0", 26, 1, 400);
    /* The head ends early (EOF inside it). */
    expect_status(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n", 32, 1, 400);
    expect_status(port, "GET /met", 8, 1, 400);
    scrape_ok(m, port);

    /* An overlong request line, and a good line with 16 KiB of headers. */
    static char req[200064];
    size_t big = 200000;
    memcpy(req, "GET /", 5);
    memset(req + 5, 'a', big);
    memcpy(req + 5 + big, " HTTP/1.1\r\n\r\n", 13);
    expect_status(port, req, 5 + big + 13, 0, 400);
    strcpy(req, "GET /metrics HTTP/1.1\r\n");
    size_t n = strlen(req);
    while (n < 16384) {
        memcpy(req + n, "X-Pad: 0123456789abcdef\r\n", 25);
        n += 25;
    }
    memcpy(req + n, "\r\n", 2);
    expect_status(port, req, n + 2, 0, 400);
    scrape_ok(m, port);

    /* Clients that leave at once, politely or with a reset. */
    close(connect_local(port));
    int fd = connect_local(port);
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    send(fd, "GET /metrics HTTP/1.1\r\n", 23, MSG_NOSIGNAL);
    close(fd);
    /* A client that sends a good request and resets before reading. */
    fd = connect_local(port);
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    send(fd, "GET /metrics HTTP/1.1\r\n\r\n", 25, MSG_NOSIGNAL);
    close(fd);
    scrape_ok(m, port);
    psc_metrics_destroy(m);
}

/* A client that connects and says nothing holds the one-at-a-time server for
 * the 5 s read timeout; the next scrape is answered after it. */
static void test_http_idle_client(void **state)
{
    (void)state;
    psc_metrics_t *m = daemon_like_registry();
    int port = serve_local(m);
    int idle = connect_local(port);
    usleep(100 * 1000); /* let the server take the idle one first */
    double t0 = psc_now();
    scrape_ok(m, port);
    double waited = psc_now() - t0;
    print_message("scrape behind an idle client answered after %.2f s\n", waited);
    assert_true(waited > 3.0 && waited < 10.0);
    /* The idle client was dropped without an answer. */
    char buf[16];
    assert_int_equal(recv(idle, buf, sizeof buf, 0), 0);
    close(idle);

    /* Stop does not wait for an idle client. */
    idle = connect_local(port);
    usleep(100 * 1000);
    t0 = psc_now();
    psc_metrics_stop(m);
    assert_true(psc_now() - t0 < 2.0);
    close(idle);
    psc_metrics_destroy(m);
}

static void test_http_serve_errors(void **state)
{
    (void)state;
    psc_metrics_t *m = psc_metrics_create();
    psc_metrics_t *other = psc_metrics_create();
    char err[256] = "";
    int port = serve_local(m);
    assert_int_equal(psc_metrics_serve(m, "127.0.0.1", 0, err, sizeof err), PSC_EEXISTS);

    /* The port is taken: the message names the address. */
    err[0] = '\0';
    assert_int_equal(psc_metrics_serve(other, "127.0.0.1", port, err, sizeof err), PSC_EIO);
    char want[64];
    snprintf(want, sizeof want, "cannot bind 127.0.0.1:%d: ", port);
    if (strncmp(err, want, strlen(want)) != 0) fail_msg("err: %s", err);
    assert_int_equal(psc_metrics_serve(other, "127.0.0.1", 65536, err, sizeof err), PSC_EINVAL);
    assert_int_equal(psc_metrics_serve(other, "127.0.0.1", -1, NULL, 0), PSC_EINVAL);

    /* Stop, stop again, serve again (same port, free again). */
    psc_metrics_stop(m);
    psc_metrics_stop(m);
    psc_metrics_stop(other);
    int again = psc_metrics_serve(m, "127.0.0.1", port, err, sizeof err);
    if (again != port) fail_msg("serve again on %d: %d %s", port, again, err);
    expect_status(port, "GET /metrics HTTP/1.1\r\n\r\n", 25, 0, 200);
    psc_metrics_stop(m);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_not_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0); /* nobody listens */
    close(fd);
    psc_metrics_destroy(m);
    psc_metrics_destroy(other);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_render_exact),
        cmocka_unit_test(test_number_format),
        cmocka_unit_test(test_register_finds_existing),
        cmocka_unit_test(test_registration_bugs_abort),
        cmocka_unit_test(test_collectors),
        cmocka_unit_test(test_concurrent_updates),
        cmocka_unit_test(test_promtool_accepts_page),
        cmocka_unit_test(test_http_scrape),
        cmocka_unit_test(test_http_not_found),
        cmocka_unit_test(test_http_junk),
        cmocka_unit_test(test_http_idle_client),
        cmocka_unit_test(test_http_serve_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
