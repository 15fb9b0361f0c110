/* cpu_share.h — how many threads a CPU tower should use by default: this
 * task's share of the host's CPUs.
 *
 * OpenBLAS (and oneDNN) default to one thread per core and spin when idle, so
 * a worker beside a ps_server on the same host took the PS's cores and its own
 * push-pull's (issue 21: a third of the MLP's examples/s, half the CNN's).
 * The share is the CPUs this process may run on (its affinity mask, capped by
 * the CPU quota of its cgroup: a Kubernetes pod's cpu limit) divided among the
 * psc tasks of TF_CONFIG that name the same host, rounded down, at least 1.
 * Loopback hosts (127.0.0.0/8, ::1, localhost) are one host; other hosts
 * compare as strings, without case (a pod's DNS name is its own host).
 *
 * Pure functions over the cluster and files: the roots of /proc and
 * /sys/fs/cgroup are parameters, so tests give their own. Thread-safe.
 */
#ifndef PSC_CPU_SHARE_H
#define PSC_CPU_SHARE_H

#include "tf_config.h"

#include <stddef.h>

/* The CPU quota of the cgroup the process is in, as CPUs (quota / period; the
 * smallest along the cgroup's path up to the root, cgroup v2 `cpu.max` or v1
 * `cpu.cfs_quota_us` / `cpu.cfs_period_us`). self_cgroup: the process's
 * /proc/self/cgroup; cgroup_root: where the hierarchy is mounted
 * (/sys/fs/cgroup). Returns the quota in CPUs, or 0 when there is none (or it
 * cannot be read: no limit is assumed). */
double cpu_share_cgroup_quota(const char *self_cgroup, const char *cgroup_root);

/* CPUs this process may use: the affinity mask's count, capped by the cgroup
 * quota (rounded down, at least 1). why (may be NULL) gets where the number
 * came from, e.g. "2 CPUs (affinity)" or "4 CPUs (cgroup quota 4.50)". */
int cpu_share_host_cpus(const char *self_cgroup, const char *cgroup_root, char *why, size_t whylen);

/* Number of tasks of the cluster (every type, the task itself included) whose
 * address names the same host as task self's; 1 when self has no address. */
int cpu_share_tasks_on_host(const psc_cluster_t *c, psc_task_t self);

/* 1 if the hosts of two "host:port" addresses are the same host by the rules
 * above. */
int cpu_share_same_host(const char *addr_a, const char *addr_b);

/* The default thread count of a CPU tower: host_cpus / tasks, at least 1. */
int cpu_share_threads(int host_cpus, int tasks_on_host);

/* All of the above for this process (/proc/self/cgroup, /sys/fs/cgroup):
 * the threads, and in why a line saying how they were chosen. */
int cpu_share_default_threads(const psc_cluster_t *c, psc_task_t self, char *why, size_t whylen);

#endif
