/* worker — a training replica (TF_CONFIG task types chief and worker) or the
 * evaluator (type evaluator).
 *
 * main() parses the options (parse_args), resolves the task and checks the
 * job spec (configure), serves psc.Worker and the health check on this task's
 * address (serve), and either (in-cluster mode, --job_spec) runs the trainer
 * or the evaluator on a thread until it finishes or SIGINT/SIGTERM stops it at
 * the next step (run_in_cluster), or (standalone-client mode, no --job_spec)
 * waits for jobs from psctl (runner.h) until SIGINT/SIGTERM (run_standalone);
 * then tears down whatever was built (teardown), on every path.
 */
#include "chief_mailbox.h"
#include "control.h"
#include "daemon.h"
#include "evaluator.h"
#include "failures.h"
#include "predict.h"
#include "predict_service.h"
#include "job_spec.h"
#include "log.h"
#include "metrics.h"
#include "psc.h"
#include "rpc.h"
#include "runner.h"
#include "security.h"
#include "tf_config.h"
#include "tower_group.h"
#include "trainer.h"
#include "wire.h"
#include "worker_metrics.h"

#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
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
    OPT_DEBUG_FAIL_PULLS,
    OPT_SHUTDOWN_PS,
    OPT_RETRY_SECS,
    OPT_LOGDIR,
    OPT_BLAS_THREADS,
    OPT_BATCH_BYTES,
    OPT_PREDICT,
    OPT_PREDICT_OUTPUT,
    OPT_CHECKPOINT,
    OPT_RESTORE_FROM,
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
            "  --job_spec FILE          the job (JSON, see psc-job(5), docs/job-spec.md): in-cluster mode, train it and exit;\n"
            "                           without it, standalone-client mode: wait for jobs from psctl. Checked\n"
            "                           whole at start (model, cluster, data files): a bad one exits 78\n"
            "  --wait_model_secs S      non-chief: how long to wait for the chief's model (default 120)\n"
            "  --wait_workers_secs S    chief: how long to wait for the other replicas at the end (default 600)\n"
            "  --restore_from ADDRS     chief: HOST:PORT,... of ps_servers outside the cluster, started on the\n"
            "                           --checkpoint_dir of departed PS: a restore onto fewer PS reads their shards\n"
            "  --rpc_timeout_ms MS      deadline of each RPC (default 30000; checkpoint saves, commits and\n"
            "                           restores wait at least 30 minutes)\n"
            "  --retry_secs S           how long to retry unavailable parameter servers (a PS restarting)\n"
            "                           before failing (default 300)\n");
    fprintf(f, /* two strings: each within the length every C compiler takes */
            "  --log_every_secs S       progress line period (default 5)\n"
            "  --prefetch N             batches prepared ahead by the input thread, 1..64 (default 2)\n"
            "  --debug_step_delay_ms MS testing: sleep MS in every step (simulates a slow replica)\n"
            "  --debug_fail_row_pulls N testing: a recommendation job's first N row pulls made in a step fail\n"
            "                           as if the PS were unavailable (the step recovers and retries)\n"
            "  --devices LIST           towers: cpu, cpu,cpu, gpu, gpu:0,gpu:1 (default: every visible GPU,\n"
            "                           else one CPU tower); the batch is split across them. GPUs named but not\n"
            "                           usable (none visible, CUDA driver too old) exit 78\n"
            "  --blas_threads N         threads of a CPU tower's matrix products, 0..1024 (default 0: this\n"
            "                           task's share of the host's CPUs, i.e. the CPUs it may use (affinity,\n"
            "                           cgroup quota) divided by the TF_CONFIG tasks on the same host, at least\n"
            "                           1; a recommendation model's tower: 1)\n"
            "  --batch_tensor_bytes N   asynchronous rounds and pulls: tensors of at most N bytes on one PS travel\n"
            "                           together in one Batch call (default 262144, at most 2097152; 0: a call per\n"
            "                           tensor)\n"
            "  --shutdown_ps_at_end 0|1 chief: tell every ps_server to exit when training ends (default 1)\n"
            "  --logdir DIR             chief and evaluator: write TensorBoard event files here (evaluator: DIR/eval)\n"
            "  --predict FILE           with --job_spec: no training; score FILE (read as the spec's data.test) with\n"
            "                           the job's model on the PS and write --predict_output, then exit\n"
            "  --predict_output OUT     the lines --predict writes (through OUT.tmp; docs/model-life.md)\n"
            "  --checkpoint ID          --predict: committed checkpoint ID of the job (default: the live model)\n"
            "  --metrics_port P         serve Prometheus metrics at http://HOST:P/metrics (HOST: the host this task\n"
            "                           binds; default 0: off)\n" PSC_SECURITY_USAGE
            "  --log_level LEVEL        debug | info | warn | error (default info)\n"
            "  --help, --version\n"
            "Exit codes: 0 done, 1 training failed, 64 usage, 69 cannot bind, 78 bad configuration,\n"
            "130/143 stopped by SIGINT/SIGTERM.\n");
}

/* What the command line says. */
typedef struct worker_args {
    psc_daemon_flags_t df;     /* the flags every daemon shares (daemon.h): task, security, metrics port */
    const char *job_spec_path; /* NULL: standalone-client mode */
    const char *predict_file;  /* --predict: score this file and exit (with --job_spec) */
    const char *predict_out;   /* --predict_output */
    uint64_t checkpoint;       /* --checkpoint: --predict scores this committed checkpoint (0: the live model) */
    trainer_opts_t trainer;    /* the trainer's flags (timeouts, devices, ...); the rest is filled by serve() */
} worker_args_t;

/* In-cluster mode: the job's thread and its outcome. */
typedef struct run_ctx {
    const trainer_opts_t *opts;
    trainer_result_t res;
    runner_state_t state;
    char err[1024];
} run_ctx_t;

/* What main() builds; teardown() frees whatever was reached. */
typedef struct worker {
    worker_args_t args;
    psc_tf_config_t cfg;
    int have_cfg;
    psc_job_spec_t spec; /* in-cluster mode (all zero otherwise) */
    int is_chief;
    char bind[300]; /* this task's listen address */
    psc_metrics_t *metrics;
    psc_rpc_server_t *server;
    chief_mailbox_t *requests; /* psctl checkpoint requests: control parks them, the chief answers */
    failures_t *failures;      /* other tasks' failure reports (chief) and this task's abort */
    control_t *control;
    predict_service_t *predict; /* psc.Worker/Predict (standalone mode) */
    runner_t *runner;           /* standalone mode */
    run_ctx_t run;              /* in-cluster mode */
    atomic_int stop;            /* in-cluster mode: SIGINT/SIGTERM, read by the job's thread */
} worker_t;

static void *run_thread(void *arg)
{
    run_ctx_t *r = arg;
    r->state = runner_run_task(r->opts, &r->res, r->err, sizeof r->err);
    psc_signals_wake();
    return NULL;
}

/* ---- options ---- */

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

/* psc_flag_long into an int. */
static int int_flag(const char *flag, const char *arg, long lo, long hi, const char *expect, int *out)
{
    long v;
    int rc = psc_flag_long("worker", flag, arg, lo, hi, expect, &v);
    if (rc == 0) *out = (int)v;
    return rc;
}

/* One option: the worker's own here, the shared ones through
 * psc_daemon_flag. PSC_FLAG_NEXT when taken, else main()'s exit code (the
 * problem printed; 0 after --help, --version). */
static int parse_opt(worker_args_t *a, int c, const char *arg, const char *text)
{
    trainer_opts_t *to = &a->trainer;
    int rc = 0;
    switch (c) {
    case OPT_JOB_SPEC: a->job_spec_path = arg; break;
    case OPT_PREDICT: a->predict_file = arg; break;
    case OPT_PREDICT_OUTPUT: a->predict_out = arg; break;
    case OPT_CHECKPOINT: {
        long v;
        if ((rc = psc_flag_long("worker", "--checkpoint", arg, 1, LONG_MAX, "a checkpoint id (an integer >= 1)", &v)))
            break;
        a->checkpoint = (uint64_t)v;
        break;
    }
    case OPT_WAIT_MODEL: rc = parse_secs("--wait_model_secs", arg, &to->wait_model_secs); break;
    case OPT_WAIT_WORKERS: rc = parse_secs("--wait_workers_secs", arg, &to->wait_workers_secs); break;
    case OPT_RETRY_SECS: rc = parse_secs("--retry_secs", arg, &to->retry_secs); break;
    case OPT_RESTORE_FROM: to->restore_from = arg; break;
    case OPT_LOG_EVERY: rc = parse_secs("--log_every_secs", arg, &to->log_every_secs); break;
    case OPT_LOGDIR: to->logdir = arg; break;
    case OPT_RPC_TIMEOUT: rc = int_flag("--rpc_timeout_ms", arg, 1, 3600000, NULL, &to->rpc_timeout_ms); break;
    case OPT_PREFETCH: rc = int_flag("--prefetch", arg, 1, 64, NULL, &to->prefetch); break;
    case OPT_BLAS_THREADS: rc = int_flag("--blas_threads", arg, 0, 1024, NULL, &to->blas_threads); break;
    case OPT_BATCH_BYTES:
        rc = int_flag("--batch_tensor_bytes", arg, 0, (long)PSC_BATCH_BYTES, NULL, &to->batch_bytes);
        break;
    case OPT_DEBUG_DELAY: rc = int_flag("--debug_step_delay_ms", arg, 0, 600000, NULL, &to->debug_step_delay_ms); break;
    case OPT_DEBUG_FAIL_PULLS:
        rc = int_flag("--debug_fail_row_pulls", arg, 0, 1000000, NULL, &to->debug_fail_row_pulls);
        break;
    case OPT_DEVICES: {
        const tower_ops_t *backend;
        int devs[PSC_MAX_TOWERS], ndev;
        char derr[256];
        int drc = tower_group_parse_devices(arg, &backend, devs, &ndev, derr, sizeof derr);
        if (drc) { /* malformed: usage; well-formed but the GPUs are not there or not usable: configuration */
            fprintf(stderr, "worker: %s\n", derr);
            return drc == PSC_EINVAL ? PSC_EXIT_USAGE : PSC_EXIT_CONFIG;
        }
        to->devices = arg;
        break;
    }
    case OPT_SHUTDOWN_PS: rc = int_flag("--shutdown_ps_at_end", arg, 0, 1, "0 or 1", &to->shutdown_ps); break;
    default: return psc_daemon_flag(&a->df, c, arg, text);
    }
    return rc ? PSC_EXIT_USAGE : PSC_FLAG_NEXT;
}

/* Parses the command line into *a. Returns PSC_FLAG_NEXT to go on, else the
 * exit code (0 after --help or --version, PSC_EXIT_USAGE with the problem
 * printed). */
static int parse_args(int argc, char **argv, worker_args_t *a)
{
    static const struct option opts[] = {
        PSC_DAEMON_OPTIONS,
        {"job_spec", required_argument, NULL, OPT_JOB_SPEC},
        {"wait_model_secs", required_argument, NULL, OPT_WAIT_MODEL},
        {"wait_workers_secs", required_argument, NULL, OPT_WAIT_WORKERS},
        {"rpc_timeout_ms", required_argument, NULL, OPT_RPC_TIMEOUT},
        {"retry_secs", required_argument, NULL, OPT_RETRY_SECS},
        {"restore_from", required_argument, NULL, OPT_RESTORE_FROM},
        {"logdir", required_argument, NULL, OPT_LOGDIR},
        {"log_every_secs", required_argument, NULL, OPT_LOG_EVERY},
        {"prefetch", required_argument, NULL, OPT_PREFETCH},
        {"devices", required_argument, NULL, OPT_DEVICES},
        {"blas_threads", required_argument, NULL, OPT_BLAS_THREADS},
        {"batch_tensor_bytes", required_argument, NULL, OPT_BATCH_BYTES},
        {"debug_step_delay_ms", required_argument, NULL, OPT_DEBUG_DELAY},
        {"debug_fail_row_pulls", required_argument, NULL, OPT_DEBUG_FAIL_PULLS},
        {"shutdown_ps_at_end", required_argument, NULL, OPT_SHUTDOWN_PS},
        {"predict", required_argument, NULL, OPT_PREDICT},
        {"predict_output", required_argument, NULL, OPT_PREDICT_OUTPUT},
        {"checkpoint", required_argument, NULL, OPT_CHECKPOINT},
        {NULL, 0, NULL, 0},
    };
    a->df = (psc_daemon_flags_t)PSC_DAEMON_FLAGS_INIT("worker", usage);
    a->trainer.shutdown_ps = 1;
    a->trainer.batch_bytes = -1;
    int c, rc;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1)
        if ((rc = parse_opt(a, c, optarg, argv[optind - 1])) != PSC_FLAG_NEXT) return rc;
    if ((rc = psc_daemon_flags_end(&a->df, argc, argv, optind)) != PSC_FLAG_NEXT) return rc;
    const char *bad = a->predict_file && !a->job_spec_path ? "--predict needs --job_spec (the job whose model scores)"
                      : a->predict_file && !a->predict_out ? "--predict needs --predict_output OUT"
                      : !a->predict_file && a->predict_out ? "--predict_output goes with --predict FILE"
                      : !a->predict_file && a->checkpoint  ? "--checkpoint goes with --predict FILE"
                                                           : NULL;
    if (bad) {
        fprintf(stderr, "worker: %s\n", bad);
        return PSC_EXIT_USAGE;
    }
    return PSC_FLAG_NEXT;
}

/* ---- building, running, tearing down ---- */

/* The task (TF_CONFIG and flags), the whole job spec checked against this
 * cluster and the data this task reads (replicas the training set, the chief
 * and the evaluator the test set), the listen address, TLS. 0 or the exit
 * code, with the problem printed. */
static int configure(worker_t *w)
{
    char err[1024];
    if (psc_tf_config_resolve(getenv("TF_CONFIG"), &w->args.df.task, 1, &w->cfg, err, sizeof err)) {
        fprintf(stderr, "worker: %s\n", err);
        return PSC_EXIT_CONFIG;
    }
    w->have_cfg = 1;
    const psc_cluster_t *cl = &w->cfg.cluster;
    psc_task_t task = w->cfg.task;
    if (task.type == PSC_JOB_PS) {
        fprintf(stderr, "worker: task type %s: ps tasks run ps_server (worker runs chief, worker and evaluator)\n",
                psc_job_type_name(task.type));
        return PSC_EXIT_CONFIG;
    }
    w->is_chief = psc_task_is_chief(cl, task);
    int reads_train = psc_task_replica_rank(cl, task) >= 0 && !w->args.predict_file;
    int reads_test = (w->is_chief || task.type == PSC_JOB_EVALUATOR) && !w->args.predict_file;
    if (w->args.job_spec_path &&
        psc_job_spec_load_checked(w->args.job_spec_path, cl, reads_train, reads_test, &w->spec, err, sizeof err)) {
        fprintf(stderr, "worker: %s\n", err);
        /* a spec this task refuses (its data unreadable here) fails the job: the chief is told */
        if (!w->is_chief && !w->args.predict_file) failures_report(cl, task, "", err, 5000, 1);
        return PSC_EXIT_CONFIG;
    }
    char component[48];
    snprintf(component, sizeof component, "%s:%d", psc_job_type_name(task.type), task.index);
    psc_log_set_component(component);
    if (psc_task_bind_address(psc_cluster_addr(cl, task), w->cfg.port, w->bind, sizeof w->bind)) {
        fprintf(stderr, "worker: cannot derive a listen address from \"%s\"\n", psc_cluster_addr(cl, task));
        return PSC_EXIT_CONFIG;
    }
    if (psc_security_apply(&w->args.df.sec, PSC_SEC_BOTH, err, sizeof err)) {
        fprintf(stderr, "worker: %s\n", err);
        return PSC_EXIT_CONFIG;
    }
    if (w->args.df.sec.tls_ca && !w->args.df.sec.tls_client_auth)
        PSC_WARN("--tls_ca verifies only the servers this worker connects to: without --tls_client_auth its own "
                 "listener accepts clients that present no certificate");
    return 0;
}

/* The metrics, the psc.Worker service and the trainer's options. 0 or the
 * exit code, with the problem printed. */
static int serve(worker_t *w)
{
    char err[1024];
    trainer_opts_t *to = &w->args.trainer;
    const psc_cluster_t *cl = &w->cfg.cluster;
    psc_rpc_hold_for_process(); /* exit without gRPC's full shutdown (rpc.h) */
    if (w->args.df.metrics_port) {
        w->metrics = psc_metrics_create();
        if (psc_metrics_serve_for(w->metrics, w->bind, (int)w->args.df.metrics_port, err, sizeof err)) {
            fprintf(stderr, "worker: --metrics_port: %s\n", err);
            return PSC_EXIT_UNAVAILABLE;
        }
    }
    /* the role label: "chief" for worker 0 acting as chief too (docs/operations.md, Metrics) */
    to->metrics = worker_metrics_create(w->metrics, psc_job_type_name(w->is_chief ? PSC_JOB_CHIEF : w->cfg.task.type));
    if (!(w->server = psc_rpc_server_create(w->bind, 1, err, sizeof err))) {
        fprintf(stderr, "worker: %s\n", err);
        return PSC_EXIT_SOFTWARE;
    }
    psc_rpc_server_add_service(w->server, "psc.Worker");
    w->requests = chief_mailbox_create();
    w->failures = failures_create();
    w->control = control_create(w->is_chief, psc_cluster_addr(cl, psc_cluster_chief(cl)), w->requests, w->failures);
    control_register(w->control, w->server);
    w->predict = predict_service_create(to);
    predict_service_register(w->predict, w->server);
    if (psc_rpc_server_start(w->server, err, sizeof err) < 0) {
        fprintf(stderr, "worker: %s\n", err);
        return PSC_EXIT_UNAVAILABLE;
    }
    to->cluster = cl;
    to->task = w->cfg.task;
    to->chief_mailbox = w->requests;
    to->failures = w->failures;
    trainer_opts_defaults(to);
    return 0;
}

/* Standalone-client mode: jobs come from psctl until SIGINT/SIGTERM. */
static int run_standalone(worker_t *w)
{
    const psc_cluster_t *cl = &w->cfg.cluster;
    w->runner = runner_create(&w->args.trainer);
    predict_service_set_runner(w->predict, w->runner);
    control_set_standalone(w->control, w->runner, cl, psc_task_replica_rank(cl, w->cfg.task),
                           w->args.trainer.rpc_timeout_ms);
    PSC_INFO("serving on %s; no job: ready and waiting for one (psctl train)", w->bind);
    int sig;
    while ((sig = psc_signals_wait()) == SIGUSR1) {}
    PSC_INFO("%s: stopping", sig == SIGINT ? "SIGINT" : "SIGTERM");
    return 0;
}

/* In-cluster mode: runs --job_spec's job on a thread until it ends or
 * SIGINT/SIGTERM stops it at the next step. The exit code. */
static int run_in_cluster(worker_t *w)
{
    PSC_INFO("health service on %s; job %s", w->bind, w->spec.job_id);
    w->args.trainer.spec = &w->spec;
    w->args.trainer.stop = &w->stop;
    w->run.opts = &w->args.trainer;
    control_set_in_cluster(w->control, &w->stop);
    pthread_t th;
    char err[256];
    if (psc_thread_start(&th, run_thread, &w->run, "training", err, sizeof err)) {
        PSC_ERROR("%s", err);
        return PSC_EXIT_SOFTWARE;
    }
    int sig, exit_code = 0;
    while ((sig = psc_signals_wait()) != SIGUSR1) {
        PSC_INFO("%s: stopping training at the next step", sig == SIGINT ? "SIGINT" : "SIGTERM");
        atomic_store(&w->stop, 1);
        exit_code = sig == SIGINT ? 130 : 143;
    }
    pthread_join(th, NULL);
    if (w->run.state == RUNNER_SUCCEEDED) {
        if (w->run.res.evaluated && w->cfg.task.type != PSC_JOB_EVALUATOR) {
            if (w->run.res.has_auc) {
                printf("test AUC: %.4f\n", w->run.res.test_auc);
                printf("test log loss: %.4f\n", w->run.res.test_loss);
            } else {
                printf("test accuracy: %.4f\n", w->run.res.test_accuracy);
                printf("test loss: %.4f\n", w->run.res.test_loss);
            }
            fflush(stdout);
        }
    } else if (w->run.state == RUNNER_CANCELLED) {
        PSC_INFO("%s", w->run.err);
    } else {
        PSC_ERROR("training failed: %s", w->run.err);
        exit_code = w->run.res.config_error ? PSC_EXIT_CONFIG : 1;
    }
    return exit_code;
}

/* --predict: the scoring's thread (predict.h) and its outcome. */
typedef struct predict_ctx {
    worker_t *w;
    int rc;
    int64_t examples;
    char err[1024];
} predict_ctx_t;

static void *predict_thread(void *arg)
{
    predict_ctx_t *p = arg;
    worker_t *w = p->w;
    p->rc = predict_file(&w->args.trainer, &w->spec, w->args.predict_file, w->args.checkpoint,
                         w->args.trainer.wait_model_secs, w->args.predict_out, &w->stop, &p->examples, p->err,
                         sizeof p->err);
    psc_signals_wake();
    return NULL;
}

/* --predict: no server, no training; scores the file against the cluster's
 * PS until done or SIGINT/SIGTERM. The exit code: 78 for a file or a
 * checkpoint the job cannot score (bad input, like a bad configuration). */
static int run_predict(worker_t *w)
{
    trainer_opts_t *to = &w->args.trainer;
    psc_rpc_hold_for_process();
    to->cluster = &w->cfg.cluster;
    to->task = w->cfg.task;
    trainer_opts_defaults(to);
    predict_ctx_t p = {.w = w};
    pthread_t th;
    if (psc_thread_start(&th, predict_thread, &p, "predict", p.err, sizeof p.err)) {
        PSC_ERROR("%s", p.err);
        return PSC_EXIT_SOFTWARE;
    }
    int sig, exit_code = 0;
    while ((sig = psc_signals_wait()) != SIGUSR1) {
        PSC_INFO("%s: stopping the scoring", sig == SIGINT ? "SIGINT" : "SIGTERM");
        atomic_store(&w->stop, 1);
        exit_code = sig == SIGINT ? 130 : 143;
    }
    pthread_join(th, NULL);
    if (p.rc == 0) {
        printf("predicted %lld examples into %s\n", (long long)p.examples, w->args.predict_out);
        fflush(stdout);
        return 0;
    }
    if (exit_code) return exit_code;
    PSC_ERROR("%s", p.err);
    int bad_input = p.rc == PSC_ECONFIG || p.rc == PSC_ECORRUPT || p.rc == PSC_EINVAL || p.rc == PSC_ENOTFOUND;
    return bad_input ? PSC_EXIT_CONFIG : 1;
}

/* Frees whatever was built, in any state main() reached. */
static void teardown(worker_t *w)
{
    /* parked requests are answered before the server's shutdown waits on them */
    chief_mailbox_close(w->requests, "the worker is stopping");
    predict_service_close(w->predict); /* answers its parked calls too */
    if (w->server) psc_rpc_server_shutdown(w->server, 1000);
    runner_destroy(w->runner); /* cancels a running job and waits for it */
    psc_rpc_server_destroy(w->server);
    control_destroy(w->control);
    predict_service_destroy(w->predict);
    chief_mailbox_destroy(w->requests);
    failures_destroy(w->failures);
    worker_metrics_destroy(w->args.trainer.metrics);
    psc_metrics_destroy(w->metrics);
    psc_job_spec_deinit(&w->spec);
    if (w->have_cfg) psc_tf_config_deinit(&w->cfg);
}

int main(int argc, char **argv)
{
    static worker_t w; /* large, zeroed, and outlives every thread (the stop flag) */
    /* Before anything that may start a thread: --devices initializes the CUDA
     * runtime (its driver starts threads), and a thread that does not block
     * SIGTERM would take it with the default action (exit, no clean stop).
     * OpenBLAS's pool started before main(): restart it under this mask. */
    psc_signals_block();
    psc_daemon_raise_nofile(); /* the chief's fan-outs: a connection per task */
    tower_cpu_threads_restart();
    int code = parse_args(argc, argv, &w.args);
    if (code != PSC_FLAG_NEXT) return code;
    if ((code = configure(&w)) == 0 && w.args.predict_file)
        code = run_predict(&w);
    else if (code == 0 && (code = serve(&w)) == 0)
        code = w.args.job_spec_path ? run_in_cluster(&w) : run_standalone(&w);
    teardown(&w);
    return code;
}
