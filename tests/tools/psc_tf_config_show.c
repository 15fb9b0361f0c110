/* psc_tf_config_show — parses a TF_CONFIG document with the programs' own parser
 * (psc_tf_config_parse) and prints what a task makes of it, one fact per line:
 *
 *   task TYPE INDEX
 *   chief|replica_rank|bind ...     (is_chief 0|1, its training replica rank, the address it binds)
 *   TYPE INDEX ADDRESS               for every task of the cluster, chief, worker, ps, evaluator order
 *
 * usage: psc_tf_config_show [DOC]   (DOC defaults to standard input)
 * Exit 0, or 78 with the parser's message when the document is refused. Used by
 * tests/integration/test_k8s_entrypoint.sh on the entrypoint's output. */
#include "tf_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    static char doc[1 << 16];
    if (argc > 2) {
        fprintf(stderr, "usage: psc_tf_config_show [TF_CONFIG]   (default: standard input)\n");
        return 64;
    }
    if (argc == 2) {
        snprintf(doc, sizeof doc, "%s", argv[1]);
    } else {
        size_t n = fread(doc, 1, sizeof doc - 1, stdin);
        doc[n] = '\0';
    }
    psc_tf_config_t cfg;
    char err[512];
    if (psc_tf_config_parse(doc, &cfg, err, sizeof err)) {
        fprintf(stderr, "psc_tf_config_show: %s\n", err);
        return 78;
    }
    if (!cfg.has_task) {
        fprintf(stderr, "psc_tf_config_show: TF_CONFIG has no task\n");
        psc_tf_config_deinit(&cfg);
        return 78;
    }
    char bind[300] = "?";
    psc_task_bind_address(psc_cluster_addr(&cfg.cluster, cfg.task), -1, bind, sizeof bind);
    printf("task %s %d\n", psc_job_type_name(cfg.task.type), cfg.task.index);
    printf("is_chief %d\n", psc_task_is_chief(&cfg.cluster, cfg.task));
    printf("replica_rank %d\n", psc_task_replica_rank(&cfg.cluster, cfg.task));
    printf("replicas %d\n", psc_cluster_num_replicas(&cfg.cluster));
    printf("bind %s\n", bind);
    for (int t = 0; t < PSC_JOB__COUNT; t++)
        for (int i = 0; i < cfg.cluster.n[t]; i++)
            printf("%s %d %s\n", psc_job_type_name((enum psc_job_type)t), i,
                   cfg.cluster.addr[t][i] ? cfg.cluster.addr[t][i] : "-");
    psc_tf_config_deinit(&cfg);
    return 0;
}
