/* test_cpu_share — a CPU tower's default threads (worker/tower/cpu_share.h).
 *
 * The cgroup quota is read from cgroup trees the test writes under a temporary
 * directory: v2 (cpu.max, a limit on an ancestor, "max", a namespaced "/"), v1
 * (cpu,cpuacct quota and period, -1), hybrid files and malformed ones. Hosts
 * are compared on TF_CONFIG clusters of the shapes users run: everything on
 * 127.0.0.1 or localhost, a pod per task (DNS names), two hosts with a PS and
 * a worker each.
 */
#include "cpu_share.h"
#include "psc.h"
#include "tf_config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

static char root[256];

/* Writes text to root/rel, making the folders on the way. */
static void put(const char *rel, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    for (char *p = path + strlen(root) + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        mkdir(path, 0755);
        *p = '/';
    }
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static double quota(void)
{
    char self[300], cg[300];
    snprintf(self, sizeof self, "%s/self_cgroup", root);
    snprintf(cg, sizeof cg, "%s/cg", root);
    return cpu_share_cgroup_quota(self, cg);
}

static int setup(void **state)
{
    (void)state;
    snprintf(root, sizeof root, "/tmp/test_cpu_share.XXXXXX");
    assert_non_null(mkdtemp(root));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
    return 0;
}

static void test_v2(void **state)
{
    (void)state;
    put("self_cgroup", "0::/kubepods/pod1/ctr\n");
    put("cg/kubepods/pod1/ctr/cpu.max", "max 100000\n");
    put("cg/kubepods/pod1/cpu.max", "250000 100000\n"); /* the pod's limit, on the parent */
    put("cg/kubepods/cpu.max", "max 100000\n");
    assert_true(quota() == 2.5);
    /* the smallest along the path wins */
    put("cg/kubepods/pod1/ctr/cpu.max", "150000 100000\n");
    assert_true(quota() == 1.5);
    /* no limit anywhere */
    put("cg/kubepods/pod1/ctr/cpu.max", "max 100000\n");
    put("cg/kubepods/pod1/cpu.max", "max 100000\n");
    assert_true(quota() == 0);
    /* inside a cgroup namespace: "/" and the mount's own file */
    put("self_cgroup", "0::/\n");
    put("cg/cpu.max", "400000 100000\n");
    assert_true(quota() == 4.0);
}

static void test_v1(void **state)
{
    (void)state;
    put("self_cgroup", "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n");
    put("cg/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "300000\n");
    put("cg/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
    assert_true(quota() == 3.0);
    put("cg/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "-1\n");
    assert_true(quota() == 0);
    /* the container's own hierarchy mounted at the root (no cgroup namespace) */
    put("cg/cpu,cpuacct/cpu.cfs_quota_us", "50000\n");
    put("cg/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
    assert_true(quota() == 0.5);
}

static void test_malformed(void **state)
{
    (void)state;
    char self[300], cg[300];
    snprintf(self, sizeof self, "%s/missing", root);
    snprintf(cg, sizeof cg, "%s/cg", root);
    assert_true(cpu_share_cgroup_quota(self, cg) == 0);
    put("self_cgroup", "garbage without colons\n0::/a\n");
    put("cg/a/cpu.max", "lots 100000\n");
    assert_true(quota() == 0);
    put("cg/a/cpu.max", "100000 0\n");
    assert_true(quota() == 0);
    put("cg/a/cpu.max", "-5 100000\n");
    assert_true(quota() == 0);
    put("cg/a/cpu.max", "");
    assert_true(quota() == 0);
}

static void test_host_cpus(void **state)
{
    (void)state;
    char self[300], cg[300], why[96];
    snprintf(self, sizeof self, "%s/self_cgroup", root);
    snprintf(cg, sizeof cg, "%s/cg", root);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    put("self_cgroup", "0::/\n");
    put("cg/cpu.max", "max 100000\n");
    int all = cpu_share_host_cpus(self, cg, why, sizeof why);
    assert_true(all >= 1 && all <= online);
    assert_non_null(strstr(why, "(affinity)"));
    /* a quota below the affinity caps it, rounded down, at least 1 */
    put("cg/cpu.max", "50000 100000\n");
    assert_int_equal(cpu_share_host_cpus(self, cg, why, sizeof why), 1);
    assert_string_equal(why, "1 CPU (cgroup quota 0.50)");
    /* a quota above the affinity leaves the affinity */
    put("cg/cpu.max", "100000000 100000\n");
    assert_int_equal(cpu_share_host_cpus(self, cg, NULL, 0), all);
}

static psc_cluster_t cluster(const char *json)
{
    psc_cluster_t c;
    char err[256];
    if (psc_cluster_parse(json, &c, err, sizeof err)) fail_msg("%s", err);
    return c;
}

static void test_same_host(void **state)
{
    (void)state;
    assert_true(cpu_share_same_host("127.0.0.1:2222", "localhost:3333"));
    assert_true(cpu_share_same_host("127.0.0.1:1", "127.0.1.1:2"));
    assert_true(cpu_share_same_host("[::1]:2222", "127.0.0.1:2223"));
    assert_true(cpu_share_same_host("Host-A:1", "host-a:2"));
    assert_true(cpu_share_same_host("10.0.0.5:2222", "10.0.0.5"));
    assert_false(cpu_share_same_host("ps-0.ps:2222", "ps-1.ps:2222"));
    assert_false(cpu_share_same_host("10.0.0.5:2222", "10.0.0.50:2222"));
    assert_false(cpu_share_same_host("hosta:1", "127.0.0.1:1"));
    assert_false(cpu_share_same_host("[fe80::1]:1", "[fe80::2]:1"));
}

static void test_tasks_on_host(void **state)
{
    (void)state;
    psc_task_t w0 = {PSC_JOB_WORKER, 0}, ps1 = {PSC_JOB_PS, 1}, ev = {PSC_JOB_EVALUATOR, 0};
    /* the demo: 2 ps + 2 workers on loopback share the host four ways */
    psc_cluster_t c = cluster("{\"ps\": [\"127.0.0.1:1\", \"localhost:2\"], \"worker\": [\"127.0.0.1:3\", "
                              "\"127.0.0.1:4\"]}");
    assert_int_equal(cpu_share_tasks_on_host(&c, w0), 4);
    assert_int_equal(cpu_share_threads(2, 4), 1);
    assert_int_equal(cpu_share_threads(16, 4), 4);
    psc_cluster_deinit(&c);
    /* Kubernetes: a pod per task, each its own host */
    c = cluster("{\"ps\": [\"ps-0.ps:2222\", \"ps-1.ps:2222\"], \"worker\": [\"worker-0.worker:2222\"], "
                "\"evaluator\": [\"evaluator-0.evaluator:2222\"]}");
    assert_int_equal(cpu_share_tasks_on_host(&c, w0), 1);
    assert_int_equal(cpu_share_tasks_on_host(&c, ev), 1);
    assert_int_equal(cpu_share_threads(8, 1), 8);
    psc_cluster_deinit(&c);
    /* two hosts, each with a ps and a worker; the chief on the first */
    c = cluster("{\"chief\": [\"a:10\"], \"ps\": [\"a:1\", \"b:1\"], \"worker\": [\"a:2\", \"b:2\"]}");
    assert_int_equal(cpu_share_tasks_on_host(&c, w0), 3);
    assert_int_equal(cpu_share_tasks_on_host(&c, ps1), 2);
    assert_int_equal(cpu_share_threads(8, 3), 2);
    psc_cluster_deinit(&c);
    /* no address for this task: alone */
    c = cluster("{\"worker\": [\"a:2\"]}");
    assert_int_equal(cpu_share_tasks_on_host(&c, ps1), 1);
    assert_int_equal(cpu_share_threads(0, 0), 1);
    psc_cluster_deinit(&c);
}

static void test_default_threads(void **state)
{
    (void)state;
    psc_cluster_t c = cluster("{\"ps\": [\"127.0.0.1:1\"], \"worker\": [\"127.0.0.1:3\"]}");
    psc_task_t w0 = {PSC_JOB_WORKER, 0};
    char why[224], cpus_why[96];
    int cpus = cpu_share_host_cpus("/proc/self/cgroup", "/sys/fs/cgroup", cpus_why, sizeof cpus_why);
    int n = cpu_share_default_threads(&c, w0, why, sizeof why);
    assert_int_equal(n, cpu_share_threads(cpus, 2));
    char want[224];
    snprintf(want, sizeof want, "%d (default: %s shared by 2 psc tasks on this host)", n, cpus_why);
    assert_string_equal(why, want);
    psc_cluster_deinit(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_v2, setup, teardown),
        cmocka_unit_test_setup_teardown(test_v1, setup, teardown),
        cmocka_unit_test_setup_teardown(test_malformed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_host_cpus, setup, teardown),
        cmocka_unit_test(test_same_host),
        cmocka_unit_test(test_tasks_on_host),
        cmocka_unit_test(test_default_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
