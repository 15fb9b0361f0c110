/* cpu_share.c — a CPU tower's default threads: this task's share of the
 * host's CPUs (cpu_share.h).
 *
 * The quota is read along the cgroup path up to the root because a limit may
 * sit on an ancestor (a pod's limit on the pod's cgroup, the container's
 * below it), and inside a cgroup namespace the path is "/" and the limit is
 * the mount's own file. An unreadable or malformed file means no limit: the
 * worst case is the affinity count, the behaviour before this module.
 */
#include "cpu_share.h"

#include <arpa/inet.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* A quota line of cgroup v2's cpu.max ("max 100000" or "150000 100000"), or
 * v1's quota and period files: CPUs, or 0 for none. */
static double read_v2_max(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char q[32] = "";
    long long period = 0;
    int n = fscanf(f, "%31s %lld", q, &period);
    fclose(f);
    if (n != 2 || period <= 0 || strcmp(q, "max") == 0) return 0;
    char *end;
    long long quota = strtoll(q, &end, 10);
    if (*end || quota <= 0) return 0;
    return (double)quota / (double)period;
}

static long long read_ll(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long long v = -1;
    if (fscanf(f, "%lld", &v) != 1) v = -1;
    fclose(f);
    return v;
}

static double read_v1(const char *dir)
{
    char p[4400];
    snprintf(p, sizeof p, "%s/cpu.cfs_quota_us", dir);
    long long quota = read_ll(p);
    snprintf(p, sizeof p, "%s/cpu.cfs_period_us", dir);
    long long period = read_ll(p);
    if (quota <= 0 || period <= 0) return 0;
    return (double)quota / (double)period;
}

/* The smallest quota along `path` and its ancestors under `base`. */
static double walk_up(const char *base, const char *path, int v2)
{
    char cur[2048];
    snprintf(cur, sizeof cur, "%s", path[0] == '/' ? path : "/");
    double best = 0;
    for (;;) {
        char dir[4200], file[4300];
        snprintf(dir, sizeof dir, "%s%s", base, strcmp(cur, "/") == 0 ? "" : cur);
        double q;
        if (v2) {
            snprintf(file, sizeof file, "%s/cpu.max", dir);
            q = read_v2_max(file);
        } else {
            q = read_v1(dir);
        }
        if (q > 0 && (best == 0 || q < best)) best = q;
        if (strcmp(cur, "/") == 0) break;
        char *slash = strrchr(cur, '/');
        if (slash == cur) cur[1] = '\0';
        else *slash = '\0';
    }
    return best;
}

/* 1 if the comma-separated controller list names "cpu". */
static int has_cpu_controller(const char *list)
{
    size_t n = strlen(list);
    for (const char *p = list; p < list + n;) {
        size_t len = strcspn(p, ",");
        if (len == 3 && strncmp(p, "cpu", 3) == 0) return 1;
        p += len + 1;
    }
    return 0;
}

double cpu_share_cgroup_quota(const char *self_cgroup, const char *cgroup_root)
{
    FILE *f = fopen(self_cgroup, "r");
    if (!f) return 0;
    char line[2048];
    double best = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c1 = *c2 = '\0';
        const char *ctrls = c1 + 1, *path = c2 + 1;
        double q = 0;
        if (strcmp(line, "0") == 0 && ctrls[0] == '\0') {
            q = walk_up(cgroup_root, path, 1);
        } else if (has_cpu_controller(ctrls)) {
            char base[2100];
            snprintf(base, sizeof base, "%s/%s", cgroup_root, ctrls);
            q = walk_up(base, path, 0);
            if (q == 0) {
                snprintf(base, sizeof base, "%s/cpu", cgroup_root);
                q = walk_up(base, path, 0);
            }
        }
        if (q > 0 && (best == 0 || q < best)) best = q;
    }
    fclose(f);
    return best;
}

int cpu_share_host_cpus(const char *self_cgroup, const char *cgroup_root, char *why, size_t whylen)
{
    cpu_set_t set;
    int cpus = 1;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) cpus = CPU_COUNT(&set);
    double quota = cpu_share_cgroup_quota(self_cgroup, cgroup_root);
    if (quota > 0 && quota < cpus) {
        int q = (int)quota;
        cpus = q < 1 ? 1 : q;
        if (why && whylen) snprintf(why, whylen, "%d CPU%s (cgroup quota %.2f)", cpus, cpus == 1 ? "" : "s", quota);
    } else if (why && whylen) {
        snprintf(why, whylen, "%d CPU%s (affinity)", cpus, cpus == 1 ? "" : "s");
    }
    return cpus;
}

/* The host part of "host:port", "[v6]:port" or "host" into buf. */
static void host_of(const char *addr, char *buf, size_t buflen)
{
    const char *start = addr, *end;
    if (addr[0] == '[') {
        start = addr + 1;
        end = strchr(start, ']');
        if (!end) end = addr + strlen(addr);
    } else {
        const char *colon = strchr(addr, ':');
        /* one colon: host:port; none or several (a bare IPv6 address): all host */
        end = colon && !strchr(colon + 1, ':') ? colon : addr + strlen(addr);
    }
    size_t n = (size_t)(end - start);
    if (n >= buflen) n = buflen - 1;
    memcpy(buf, start, n);
    buf[n] = '\0';
}

static int is_loopback(const char *host)
{
    unsigned char a[16];
    if (inet_pton(AF_INET, host, a) == 1) return a[0] == 127;
    if (inet_pton(AF_INET6, host, a) == 1) {
        static const unsigned char one[16] = {[15] = 1};
        return memcmp(a, one, 16) == 0;
    }
    return strcasecmp(host, "localhost") == 0 || strcasecmp(host, "ip6-localhost") == 0;
}

int cpu_share_same_host(const char *addr_a, const char *addr_b)
{
    char a[256], b[256];
    host_of(addr_a, a, sizeof a);
    host_of(addr_b, b, sizeof b);
    if (is_loopback(a) && is_loopback(b)) return 1;
    return strcasecmp(a, b) == 0;
}

int cpu_share_tasks_on_host(const psc_cluster_t *c, psc_task_t self)
{
    const char *mine = psc_cluster_addr(c, self);
    if (!mine) return 1;
    int n = 0;
    for (int t = 0; t < PSC_JOB__COUNT; t++)
        for (int i = 0; i < c->n[t]; i++)
            if (c->addr[t][i] && cpu_share_same_host(mine, c->addr[t][i])) n++;
    return n < 1 ? 1 : n;
}

int cpu_share_threads(int host_cpus, int tasks_on_host)
{
    if (tasks_on_host < 1) tasks_on_host = 1;
    int n = host_cpus / tasks_on_host;
    return n < 1 ? 1 : n;
}

int cpu_share_default_threads(const psc_cluster_t *c, psc_task_t self, char *why, size_t whylen)
{
    char cpus_why[96];
    int cpus = cpu_share_host_cpus("/proc/self/cgroup", "/sys/fs/cgroup", cpus_why, sizeof cpus_why);
    int tasks = cpu_share_tasks_on_host(c, self);
    int n = cpu_share_threads(cpus, tasks);
    if (why && whylen)
        snprintf(why, whylen, "%d (default: %s shared by %d psc task%s on this host)", n, cpus_why, tasks,
                 tasks == 1 ? "" : "s");
    return n;
}
