/* psc_dump — test tool: pulls a running job's variables and writes them as
 * the parameter slab (raw little-endian float32, model order, global_step
 * excluded), or compares two such files.
 *
 *   psc_dump JOB_SPEC CLUSTER_JSON OUT      pull from the cluster's ps tasks
 *   psc_dump --restore JOB_SPEC CLUSTER_JSON OUT
 *                                           first, as the chief does at start, declare the
 *                                           model and restore the latest good checkpoint
 *                                           (fails when there is none); then dump
 *   psc_dump --diff A B                     print "max_abs_diff D elements N"
 *
 * The placement comes from the job spec and the cluster's number of ps, as on
 * every task. Prints the job's global_step on stdout after a dump.
 */
#include "job_spec.h"
#include "model_spec.h"
#include "placement.h"
#include "ps_client.h"
#include "psc.h"
#include "rpc.h"
#include "tf_config.h"
#include "tower.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float *read_floats(const char *path, long *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long bytes = ftell(f);
    fseek(f, 0, SEEK_SET);
    float *p = psc_xmalloc((size_t)bytes + 4);
    if (fread(p, 1, (size_t)bytes, f) != (size_t)bytes) {
        perror(path);
        exit(1);
    }
    fclose(f);
    *n = bytes / 4;
    return p;
}

static int diff(const char *a, const char *b)
{
    long na, nb;
    float *x = read_floats(a, &na), *y = read_floats(b, &nb);
    if (na != nb) {
        fprintf(stderr, "psc_dump: %s has %ld floats, %s has %ld\n", a, na, b, nb);
        return 1;
    }
    double m = 0;
    for (long i = 0; i < na; i++) m = fmax(m, fabs((double)x[i] - (double)y[i]));
    printf("max_abs_diff %.9g elements %ld\n", m, na);
    free(x);
    free(y);
    return 0;
}

int main(int argc, char **argv)
{
    psc_rpc_hold_for_process(); /* exit without gRPC's full shutdown (rpc.h) */
    if (argc == 4 && strcmp(argv[1], "--diff") == 0) return diff(argv[2], argv[3]);
    int restore = argc == 5 && strcmp(argv[1], "--restore") == 0;
    if (restore) {
        argv++;
        argc--;
    }
    if (argc != 4) {
        fprintf(stderr, "usage: psc_dump [--restore] JOB_SPEC CLUSTER_JSON OUT | psc_dump --diff A B\n");
        return 64;
    }
    char err[1024];
    psc_job_spec_t spec;
    psc_cluster_t cluster;
    if (psc_job_spec_load(argv[1], &spec, err, sizeof err) || psc_cluster_parse(argv[2], &cluster, err, sizeof err)) {
        fprintf(stderr, "psc_dump: %s\n", err);
        return 78;
    }
    psc_var_desc_t *vars;
    psc_placed_var_t *placed;
    int nvars, nplaced;
    if (psc_model_variables(&spec, &vars, &nvars, err, sizeof err) ||
        psc_place(vars, nvars, cluster.n[PSC_JOB_PS], spec.placement, spec.min_shard_bytes, &placed, &nplaced, err,
                  sizeof err)) {
        fprintf(stderr, "psc_dump: %s\n", err);
        return 78;
    }
    int64_t *offsets = psc_xcalloc((size_t)nvars, sizeof *offsets);
    int64_t n = tower_layout(vars, nvars, offsets);
    float *params = psc_xmalloc((size_t)n * sizeof(float) + 4);
    ps_client_t *pc = ps_client_create(&cluster, vars, nvars, placed, nplaced, 0, 10000);
    int64_t step = 0;
    if (restore) {
        ps_model_origin_t origin;
        if (spec.sync) ps_client_set_sync(pc, spec.replicas_to_aggregate, spec.total_num_replicas, spec.sync_timeout_secs);
        if (ps_client_create_model(pc, spec.job_id, &spec.optimizer, params, &origin, err, sizeof err)) {
            fprintf(stderr, "psc_dump: %s\n", err);
            return 1;
        }
        if (!origin.restored && !origin.joined) {
            fprintf(stderr, "psc_dump: no checkpoint to restore (the PS were initialized)\n");
            return 1;
        }
        if (origin.restored)
            fprintf(stderr, "psc_dump: restored checkpoint %llu (step %lld)\n", (unsigned long long)origin.ckpt_id,
                    (long long)origin.step);
    }
    if (ps_client_pull(pc, params, &step, err, sizeof err)) {
        fprintf(stderr, "psc_dump: %s\n", err);
        return 1;
    }
    FILE *f = fopen(argv[3], "wb");
    if (!f || fwrite(params, sizeof(float), (size_t)n, f) != (size_t)n || fclose(f)) {
        perror(argv[3]);
        return 1;
    }
    printf("%lld\n", (long long)step);
    ps_client_destroy(pc);
    free(params);
    free(offsets);
    free(vars);
    free(placed);
    psc_job_spec_deinit(&spec);
    psc_cluster_deinit(&cluster);
    return 0;
}
