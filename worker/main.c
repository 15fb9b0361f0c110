/* worker — a training replica (TF_CONFIG task types chief and worker) or the
 * evaluator (type evaluator).
 *
 * main() parses options, serves psc.Worker and the health check on this task's
 * address, and either (in-cluster mode, --job_spec) runs the trainer or the
 * evaluator on a thread until it finishes or SIGINT/SIGTERM stops it at the
 * next step, or (standalone-client mode, no --job_spec) waits for jobs from
 * psctl (runner.h) until SIGINT/SIGTERM.
 */
#include "control.h"
#include "daemon.h"
#include "evaluator.h"
#include "job_spec.h"
#include "log.h"
#include "metrics.h"
#include "psc.h"
#include "runner.h"
#include "rpc.h"
#include "security.h"
#include "wire.h"
#include "tf_config.h"
#include "towers.h"
#include "worker_metrics.h"
#include "trainer.h"

#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    OPT_JOB_SPEC = PSC_OPT__FIRST_PROGRAM,
    OPT_WAIT_MODEL,
    OPT_WAIT_WORKERS,
    OPT_RPC_TIMEOUT,
    OPT_LOG_EVERY,
    OPT_PREFETCH,
    OPT_DEVICES,
    OPT_DEBUG_DELAY,
    OPT_SHUTDOWN_PS,
    OPT_RETRY_SECS,
    OPT_LOGDIR,
    OPT_METRICS_PORT,
    OPT_BLAS_THREADS,
    OPT_BATCH_BYTES,
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: worker [--job_spec FILE] [options]\n"
            "Training replica of psc (task types chief and worker): trains its shard of the data,\n"
            "pulling weights from and pushing gradients to the ps tasks. The chief (the chief task,\n"
            "or worker 0 without one) initializes the model, evaluates it at the end and prints\n"
            "\"test accuracy: A\" on stdout. Task type evaluator: evaluates every new checkpoint.\n\n"
            "  --cluster FILE|JSON      cluster spec or a TF_CONFIG document (overrides TF_CONFIG)\n"
            "  --job TYPE               chief | worker | evaluator (default from TF_CONFIG)\n"
            "  --task_index N           index of this task\n"
            "  --port P                 port of this task's health service (default: its address's port)\n"
            "  --job_spec FILE          the job (JSON, see README \"Job spec\"): in-cluster mode, train it and exit;\n"
            "                           without it, standalone-client mode: wait for jobs from psctl. Checked\n"
            "                           whole at start (model, cluster, data files): a bad one exits 78\n"
            "  --wait_model_secs S      non-chief: how long to wait for the chief's model (default 120)\n"
            "  --wait_workers_secs S    chief: how long to wait for the other replicas at the end (default 600)\n"
            "  --rpc_timeout_ms MS      deadline of each RPC (default 30000)\n"
            "  --retry_secs S           how long to retry unavailable parameter servers (a PS restarting)\n"
            "                           before failing (default 300)\n"
            "  --log_every_secs S       progress line period (default 5)\n"
            "  --prefetch N             batches prepared ahead by the input thread, 1..64 (default 2)\n"
            "  --debug_step_delay_ms MS testing: sleep MS in every step (simulates a slow replica)\n"
            "  --devices LIST           towers: cpu, cpu,cpu, gpu, gpu:0,gpu:1 (default: every visible GPU,\n"
            "                           else one CPU tower); the batch is split across them\n"
            "  --blas_threads N         threads of a CPU tower's matrix products, 0..1024 (default 0:\n"
            "                           OpenBLAS's own choice, one per core; 1 is faster where a PS shares the cores)\n"
            "  --batch_tensor_bytes N   asynchronous rounds and pulls: tensors of at most N bytes on one PS travel\n"
            "                           together in one Batch call (default 262144, at most 2097152; 0: a call per\n"
            "                           tensor)\n"
            "  --shutdown_ps_at_end 0|1 chief: tell every ps_server to exit when training ends (default 1)\n"
            "  --logdir DIR             chief and evaluator: write TensorBoard event files here (evaluator: DIR/eval)\n"
            "  --metrics_port P         serve Prometheus metrics at http://HOST:P/metrics (HOST: the host this task\n"
            "                           binds; default 0: off)\n"
            PSC_SECURITY_USAGE
            "  --log_level LEVEL        debug | info | warn | error (default info)\n"
            "  --help, --version\n"
            "Exit codes: 0 done, 1 training failed, 64 usage, 69 cannot bind, 78 bad configuration,\n"
            "130/143 stopped by SIGINT/SIGTERM.\n");
}

typedef struct run_ctx {
    trainer_opts_t opts;
    trainer_result_t res;
    int rc;
    char err[1024];
} run_ctx_t;

static void *run_thread(void *arg)
{
    run_ctx_t *r = arg;
    if (r->opts.task.type == PSC_JOB_EVALUATOR)
        r->rc = evaluator_run(&r->opts, &r->res, r->err, sizeof r->err);
    else
        r->rc = trainer_run(&r->opts, &r->res, r->err, sizeof r->err);
    psc_signals_wake();
    return NULL;
}

static int parse_secs(const char *flag, const char *s, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v > 0) || v > 1e7) {
        fprintf(stderr, "worker: %s: expected a positive number of seconds, got \"%s\"\n", flag, s);
        return -1;
    }
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"cluster", required_argument, NULL, PSC_OPT_CLUSTER},
        {"job", required_argument, NULL, PSC_OPT_JOB},
        {"task_index", required_argument, NULL, PSC_OPT_TASK_INDEX},
        {"port", required_argument, NULL, PSC_OPT_PORT},
        {"job_spec", required_argument, NULL, OPT_JOB_SPEC},
        {"wait_model_secs", required_argument, NULL, OPT_WAIT_MODEL},
        {"wait_workers_secs", required_argument, NULL, OPT_WAIT_WORKERS},
        {"rpc_timeout_ms", required_argument, NULL, OPT_RPC_TIMEOUT},
        {"retry_secs", required_argument, NULL, OPT_RETRY_SECS},
        {"logdir", required_argument, NULL, OPT_LOGDIR},
        {"metrics_port", required_argument, NULL, OPT_METRICS_PORT},
        {"log_every_secs", required_argument, NULL, OPT_LOG_EVERY},
        {"prefetch", required_argument, NULL, OPT_PREFETCH},
        {"devices", required_argument, NULL, OPT_DEVICES},
        {"blas_threads", required_argument, NULL, OPT_BLAS_THREADS},
        {"batch_tensor_bytes", required_argument, NULL, OPT_BATCH_BYTES},
        {"debug_step_delay_ms", required_argument, NULL, OPT_DEBUG_DELAY},
        {"shutdown_ps_at_end", required_argument, NULL, OPT_SHUTDOWN_PS},
        {"log_level", required_argument, NULL, PSC_OPT_LOG_LEVEL},
        {"help", no_argument, NULL, PSC_OPT_HELP},
        {"version", no_argument, NULL, PSC_OPT_VERSION},
        PSC_SECURITY_OPTIONS,
        {NULL, 0, NULL, 0},
    };
    psc_task_flags_t flags = {NULL, NULL, -1, -1};
    psc_security_flags_t secf = {0};
    static run_ctx_t run;
    trainer_opts_t *to = &run.opts;
    to->shutdown_ps = 1;
    to->batch_bytes = -1;
    const char *job_spec_path = NULL;
    long v, metrics_port = 0;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case PSC_OPT_CLUSTER: flags.cluster = optarg; break;
        case PSC_OPT_JOB: flags.job = optarg; break;
        case PSC_OPT_TASK_INDEX:
            if (psc_parse_int(optarg, 0, 1 << 20, &v)) {
                fprintf(stderr, "worker: --task_index: expected a non-negative integer, got \"%s\"\n", optarg);
                return PSC_EXIT_USAGE;
            }
            flags.task_index = (int)v;
            break;
        case PSC_OPT_PORT:
            if (psc_parse_int(optarg, 0, 65535, &v)) {
                fprintf(stderr, "worker: --port: expected 0..65535, got \"%s\"\n", optarg);
                return PSC_EXIT_USAGE;
            }
            flags.port = (int)v;
            break;
        case OPT_JOB_SPEC: job_spec_path = optarg; break;
        case OPT_WAIT_MODEL:
            if (parse_secs("--wait_model_secs", optarg, &to->wait_model_secs)) return PSC_EXIT_USAGE;
            break;
        case OPT_WAIT_WORKERS:
            if (parse_secs("--wait_workers_secs", optarg, &to->wait_workers_secs)) return PSC_EXIT_USAGE;
            break;
        case OPT_LOGDIR: to->logdir = optarg; break;
        case OPT_METRICS_PORT:
            if (psc_parse_int(optarg, 0, 65535, &metrics_port)) {
                fprintf(stderr, "worker: --metrics_port: expected 0..65535 (0 = off), got \"%s\"\n", optarg);
                return PSC_EXIT_USAGE;
            }
            break;
        case OPT_RETRY_SECS:
            if (parse_secs("--retry_secs", optarg, &to->retry_secs)) return PSC_EXIT_USAGE;
            break;
        case OPT_LOG_EVERY:
            if (parse_secs("--log_every_secs", optarg, &to->log_every_secs)) return PSC_EXIT_USAGE;
            break;
        case OPT_RPC_TIMEOUT:
            if (psc_parse_int(optarg, 1, 3600000, &v)) {
                fprintf(stderr, "worker: --rpc_timeout_ms: expected 1..3600000, got \"%s\"\n", optarg);
                return PSC_EXIT_USAGE;
            }
            to->rpc_timeout_ms = (int)v;
            break;
        case OPT_PREFETCH:
            if (psc_parse_int(optarg, 1, 64, &v)) {
                fprintf(stderr, "worker: --prefetch: expected 1..64, got \"%s\"\n", optarg);
                return PSC_EXIT_USAGE;
            }
            to->prefetch = (int)v;
            break;
        case OPT_BLAS_THREADS:
            if (psc_parse_int(optarg, 0, 1024, &v)) {
                fprintf(stderr, "worker: --blas_threads: expected 0..1024, got \"%s\"\n", optarg);
                return PSC_EXIT_USAGE;
            }
            to->blas_threads = (int)v;
            break;
        case OPT_BATCH_BYTES:
            if (psc_parse_int(optarg, 0, (long)PSC_BATCH_BYTES, &v)) {
                fprintf(stderr, "worker: --batch_tensor_bytes: expected 0..%zu, got \"%s\"\n", PSC_BATCH_BYTES,
                        optarg);
                return PSC_EXIT_USAGE;
            }
            to->batch_bytes = (int)v;
            break;
        case OPT_DEBUG_DELAY:
            if (psc_parse_int(optarg, 0, 600000, &v)) {
                fprintf(stderr, "worker: --debug_step_delay_ms: expected 0..600000, got \"%s\"\n", optarg);
                return PSC_EXIT_USAGE;
            }
            to->debug_step_delay_ms = (int)v;
            break;
        case OPT_DEVICES: {
            const tower_ops_t *backend;
            int devs[PSC_MAX_TOWERS], ndev;
            char derr[256];
            if (towers_parse_devices(optarg, &backend, devs, &ndev, derr, sizeof derr)) {
                fprintf(stderr, "worker: %s\n", derr);
                return PSC_EXIT_USAGE;
            }
            to->devices = optarg;
            break;
        }
        case OPT_SHUTDOWN_PS:
            if (psc_parse_int(optarg, 0, 1, &v)) {
                fprintf(stderr, "worker: --shutdown_ps_at_end: expected 0 or 1, got \"%s\"\n", optarg);
                return PSC_EXIT_USAGE;
            }
            to->shutdown_ps = (int)v;
            break;
        case PSC_OPT_LOG_LEVEL: {
            enum psc_log_level lv;
            if (psc_log_parse_level(optarg, &lv)) {
                fprintf(stderr, "worker: --log_level: expected debug|info|warn|error, got \"%s\"\n", optarg);
                return PSC_EXIT_USAGE;
            }
            psc_log_set_level(lv);
            break;
        }
        case PSC_OPT_HELP: usage(stdout); return 0;
        case PSC_OPT_VERSION: printf("worker (psc) %s\n", PSC_VERSION); return 0;
        default:
            if (psc_security_flag(c, optarg, &secf)) break;
            fprintf(stderr, "worker: unknown or incomplete option \"%s\" (see --help)\n", argv[optind - 1]);
            return PSC_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "worker: unexpected argument \"%s\" (see --help)\n", argv[optind]);
        return PSC_EXIT_USAGE;
    }

    char err[1024];
    psc_tf_config_t cfg;
    if (psc_config_resolve(getenv("TF_CONFIG"), &flags, 1, &cfg, err, sizeof err)) {
        fprintf(stderr, "worker: %s\n", err);
        return PSC_EXIT_CONFIG;
    }
    if (cfg.task.type == PSC_JOB_PS) {
        fprintf(stderr, "worker: task type %s: ps tasks run ps_server (worker runs chief, worker and evaluator)\n",
                psc_job_type_name(cfg.task.type));
        psc_tf_config_deinit(&cfg);
        return PSC_EXIT_CONFIG;
    }
    /* The whole spec at start, against this cluster and the data this task reads:
     * replicas the training set, the chief and the evaluator the test set. */
    psc_job_spec_t spec;
    memset(&spec, 0, sizeof spec);
    int is_chief = psc_task_is_chief(&cfg.cluster, cfg.task);
    int reads_train = psc_task_replica_rank(&cfg.cluster, cfg.task) >= 0;
    int reads_test = is_chief || cfg.task.type == PSC_JOB_EVALUATOR;
    if (job_spec_path && psc_job_spec_load_checked(job_spec_path, &cfg.cluster, reads_train, reads_test, &spec, err,
                                                   sizeof err)) {
        fprintf(stderr, "worker: %s\n", err);
        psc_tf_config_deinit(&cfg);
        return PSC_EXIT_CONFIG;
    }
    char component[48], bind[300];
    snprintf(component, sizeof component, "%s:%d", psc_job_type_name(cfg.task.type), cfg.task.index);
    psc_log_set_component(component);
    if (psc_bind_address(psc_cluster_addr(&cfg.cluster, cfg.task), cfg.port, bind, sizeof bind)) {
        fprintf(stderr, "worker: cannot derive a listen address from \"%s\"\n",
                psc_cluster_addr(&cfg.cluster, cfg.task));
        psc_job_spec_deinit(&spec);
        psc_tf_config_deinit(&cfg);
        return PSC_EXIT_CONFIG;
    }

    if (psc_security_apply(&secf, PSC_SEC_BOTH, err, sizeof err)) {
        fprintf(stderr, "worker: %s\n", err);
        psc_job_spec_deinit(&spec);
        psc_tf_config_deinit(&cfg);
        return PSC_EXIT_CONFIG;
    }
    if (secf.tls_ca && !secf.tls_client_auth)
        PSC_WARN("--tls_ca verifies only the servers this worker connects to: without --tls_client_auth its own "
                 "listener accepts clients that present no certificate");
    psc_signals_block();
    psc_rpc_hold_for_process(); /* exit without gRPC's full shutdown (rpc.h) */
    psc_metrics_t *metrics = metrics_port ? psc_metrics_create() : NULL;
    if (metrics && psc_metrics_serve_for(metrics, bind, (int)metrics_port, err, sizeof err)) {
        fprintf(stderr, "worker: --metrics_port: %s\n", err);
        psc_metrics_destroy(metrics);
        return PSC_EXIT_UNAVAILABLE;
    }
    /* the role label: "chief" for worker 0 acting as chief too (README "Metrics") */
    to->metrics = worker_metrics_create(metrics, psc_job_type_name(is_chief ? PSC_JOB_CHIEF : cfg.task.type));
    psc_rpc_server_t *server = psc_rpc_server_create(bind, 1, err, sizeof err);
    if (!server) {
        fprintf(stderr, "worker: %s\n", err);
        return PSC_EXIT_SOFTWARE;
    }
    psc_rpc_server_add_service(server, "psc.Worker");
    const psc_cluster_t *cl = &cfg.cluster;
    const char *chief_addr = cl->n[PSC_JOB_CHIEF] > 0 ? cl->addr[PSC_JOB_CHIEF][0]
                             : cl->n[PSC_JOB_WORKER] > 0 ? cl->addr[PSC_JOB_WORKER][0]
                                                         : NULL;
    control_t *control = control_create(is_chief, chief_addr);
    control_register(control, server);
    if (psc_rpc_server_start(server, err, sizeof err) < 0) {
        fprintf(stderr, "worker: %s\n", err);
        psc_rpc_server_destroy(server);
        control_destroy(control);
        return PSC_EXIT_UNAVAILABLE;
    }
    static volatile int stop = 0;
    to->cluster = &cfg.cluster;
    to->task = cfg.task;
    to->control = control;
    trainer_opts_defaults(to);
    if (!job_spec_path) { /* standalone-client mode: jobs come from psctl */
        runner_t *runner = runner_create(to);
        control_set_standalone(control, runner, &cfg.cluster, psc_task_replica_rank(&cfg.cluster, cfg.task),
                               to->rpc_timeout_ms);
        PSC_INFO("serving on %s; no job: ready and waiting for one (psctl train)", bind);
        int sig;
        while ((sig = psc_signals_wait()) == SIGUSR1) {}
        PSC_INFO("%s: stopping", sig == SIGINT ? "SIGINT" : "SIGTERM");
        control_close(control, "the worker is stopping");
        psc_rpc_server_shutdown(server, 1000);
        runner_destroy(runner); /* cancels a running job and waits for it */
        psc_rpc_server_destroy(server);
        control_destroy(control);
        worker_metrics_destroy(to->metrics);
        psc_metrics_destroy(metrics);
        psc_tf_config_deinit(&cfg);
        return 0;
    }
    PSC_INFO("health service on %s; job %s", bind, spec.job_id);

    to->spec = &spec;
    to->stop = &stop;
    pthread_t th;
    PSC_ASSERT(pthread_create(&th, NULL, run_thread, &run) == 0);
    int sig, exit_code = 0;
    while ((sig = psc_signals_wait()) != SIGUSR1) {
        PSC_INFO("%s: stopping training at the next step", sig == SIGINT ? "SIGINT" : "SIGTERM");
        stop = 1;
        exit_code = sig == SIGINT ? 130 : 143;
    }
    pthread_join(th, NULL);
    if (run.rc == 0) {
        if (run.res.evaluated && cfg.task.type != PSC_JOB_EVALUATOR) {
            printf("test accuracy: %.4f\n", run.res.test_accuracy);
            printf("test loss: %.4f\n", run.res.test_loss);
            fflush(stdout);
        }
    } else if (run.rc == PSC_ECANCELLED) {
        PSC_INFO("%s", run.err);
    } else {
        PSC_ERROR("training failed: %s", run.err);
        exit_code = 1;
    }
    control_close(control, "the worker is stopping"); /* answers parked requests before the shutdown waits on them */
    psc_rpc_server_shutdown(server, 1000);
    psc_rpc_server_destroy(server);
    control_destroy(control);
    worker_metrics_destroy(to->metrics);
    psc_metrics_destroy(metrics);
    psc_job_spec_deinit(&spec);
    psc_tf_config_deinit(&cfg);
    return exit_code;
}
