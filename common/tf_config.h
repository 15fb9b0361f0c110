/* tf_config.h — cluster membership as TensorFlow's TF_CONFIG describes it.
 *
 *   {"cluster": {"chief": ["h:p"], "worker": ["h:p", ...], "ps": [...], "evaluator": ["h:p"]},
 *    "task": {"type": "worker", "index": 0}}
 *
 * The sparse form {"worker": {"1": "host:port"}} is accepted (missing indices stay
 * NULL). `rpc_layer` must be absent or "grpc"; `environment` is ignored. At most one
 * chief and one evaluator. Flags (--cluster FILE|JSON, --job, --task_index, --port)
 * override the environment. Errors are one line naming the field; programs exit 78.
 *
 * Roles: the chief is the `chief` task, or worker 0 when the cluster has no chief.
 * Training replicas are the chief (if any) then the workers, ranked 0..R-1.
 * Thread-safety: plain data, no global state.
 */
#ifndef PSC_TF_CONFIG_H
#define PSC_TF_CONFIG_H

#include <stddef.h>

enum psc_job_type { PSC_JOB_CHIEF = 0, PSC_JOB_WORKER, PSC_JOB_PS, PSC_JOB_EVALUATOR, PSC_JOB__COUNT };

typedef struct psc_cluster {
    int n[PSC_JOB__COUNT];       /* number of task slots of each type (sparse: max index + 1) */
    char **addr[PSC_JOB__COUNT]; /* addr[type][index] "host:port" (owned), NULL for a sparse hole */
} psc_cluster_t;

typedef struct psc_task {
    enum psc_job_type type;
    int index;
} psc_task_t;

typedef struct psc_tf_config {
    psc_cluster_t cluster;
    psc_task_t task;
    int has_task; /* 0 when TF_CONFIG had no "task" (allowed for psctl only) */
    int port;     /* --port override, or -1 */
} psc_tf_config_t;

/* Flags that override TF_CONFIG. NULL / -1 means "not given". */
typedef struct psc_task_flags {
    const char *cluster; /* a file path, or inline JSON when it starts with '{' */
    const char *job;     /* chief | worker | ps | evaluator */
    int task_index;
    int port;
} psc_task_flags_t;

/* Parses a whole TF_CONFIG document into *out (zeroed first). Returns 0 or
 * PSC_ECONFIG with `err` naming the field, e.g. "TF_CONFIG: task.index 3 out of
 * range (cluster has 2 worker tasks)". On error *out holds nothing to free. */
int psc_tf_config_parse(const char *json, psc_tf_config_t *out, char *err, size_t errlen);

/* Parses a cluster object alone ({"worker": [...], ...}); a document with a
 * "cluster" key is accepted too (its cluster is taken, "task" ignored). */
int psc_cluster_parse(const char *json, psc_cluster_t *out, char *err, size_t errlen);

/* Combines the TF_CONFIG environment value (may be NULL) with the flags:
 * flags win. require_task: a task (type and index) must result. Validates the
 * task against the cluster, naming where it came from: "TF_CONFIG: task.index 3
 * out of range (...)" when both parts came from TF_CONFIG, else the flags:
 * "--task_index 3 out of range: the cluster has 2 worker tasks", "--job chief:
 * the cluster has no chief task". Returns 0 or PSC_ECONFIG. */
int psc_tf_config_resolve(const char *tf_config_env, const psc_task_flags_t *flags, int require_task,
                       psc_tf_config_t *out, char *err, size_t errlen);

void psc_tf_config_deinit(psc_tf_config_t *c);
void psc_cluster_deinit(psc_cluster_t *c);

const char *psc_job_type_name(enum psc_job_type t);
/* "chief" | "worker" | "ps" | "evaluator" -> 0, else PSC_EINVAL. */
int psc_job_type_parse(const char *s, enum psc_job_type *out);

/* The task's own address (NULL if the slot is empty). */
const char *psc_cluster_addr(const psc_cluster_t *c, psc_task_t t);
/* Number of training replicas: chief (0 or 1) + workers. */
int psc_cluster_num_replicas(const psc_cluster_t *c);
/* Address of training replica `rank` (the chief, then the workers in order);
 * NULL when there is no such replica. */
const char *psc_cluster_replica_addr(const psc_cluster_t *c, int rank);
/* Replica rank of a task: chief -> 0, worker i -> i + (has chief); others -1. */
int psc_task_replica_rank(const psc_cluster_t *c, psc_task_t t);
/* 1 if this task is the chief (the chief task, or worker 0 without one). */
int psc_task_is_chief(const psc_cluster_t *c, psc_task_t t);
/* The chief's task (type chief or worker 0). */
psc_task_t psc_cluster_chief(const psc_cluster_t *c);

/* Address a server of this task binds: the host part when it is a numeric IPv4/IPv6
 * literal, else 0.0.0.0 (a DNS name such as ps-0.ps); the port is `port_override`
 * when >= 0, else the address's port, else 2222. Writes "host:port" into buf. */
int psc_task_bind_address(const char *cluster_addr, int port_override, char *buf, size_t buflen);

#endif
