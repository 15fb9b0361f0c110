/* ps_server — a parameter-server daemon: holds one shard of the model's
 * variables and applies the workers' gradients.
 *
 * main() only parses options, builds the store, the service and the RPC server,
 * waits for SIGINT/SIGTERM or a Shutdown RPC, and tears down in order.
 */
#include "daemon.h"
#include "job_spec.h"
#include "log.h"
#include "metrics.h"
#include "psc.h"
#include "rpc.h"
#include "security.h"
#include "service.h"
#include "store.h"
#include "tf_config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { OPT_THREADS = PSC_OPT__FIRST_PROGRAM, OPT_JOB_SPEC, OPT_GRACE_MS, OPT_CKPT_DIR, OPT_DEBUG_SAVE_DELAY,
       OPT_METRICS_PORT };

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ps_server [options]\n"
            "Parameter-server daemon of psc: serves one shard of the variables over gRPC.\n"
            "The cluster and this task come from TF_CONFIG; the flags override it.\n\n"
            "  --cluster FILE|JSON  cluster spec ({\"ps\": [...], \"worker\": [...]}) or a TF_CONFIG document\n"
            "  --job TYPE           task type (must be ps; default from TF_CONFIG, else ps)\n"
            "  --task_index N       index of this ps task\n"
            "  --port P             port to listen on (default: the port of this task's address)\n"
            "  --threads N          RPC polling threads, 1..64 (default: number of CPUs, at most 8)\n"
            "  --job_spec FILE      job spec to validate at start against the cluster (in-cluster mode;\n"
            "                       optional): a bad one exits 78 naming the key\n"
            "  --grace_ms MS        on shutdown, time in-flight calls get before cancellation (default 2000)\n"
            "  --checkpoint_dir DIR this shard's checkpoints (a RocksDB, created if missing; default: none,\n"
            "                       checkpoint requests are refused)\n"
            "  --debug_save_delay_ms MS  testing: sleep MS inside every checkpoint save, before writing it\n"
            "  --metrics_port P     serve Prometheus metrics at http://HOST:P/metrics, HOST being the host the\n"
            "                       RPC server binds (default 0: off)\n"
            PSC_SECURITY_USAGE
            "  --log_level LEVEL    debug | info | warn | error (default info)\n"
            "  --help               this text\n"
            "  --version            print the version\n"
            "Exit codes: 0 stopped cleanly, 64 usage, 69 cannot bind (--port or --metrics_port),\n"
            "74 cannot open --checkpoint_dir, 78 bad configuration (TLS files, the token and --job_spec included).\n");
}

static void on_shutdown_rpc(void *arg)
{
    (void)arg;
    psc_signals_wake();
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"cluster", required_argument, NULL, PSC_OPT_CLUSTER},
        {"job", required_argument, NULL, PSC_OPT_JOB},
        {"task_index", required_argument, NULL, PSC_OPT_TASK_INDEX},
        {"port", required_argument, NULL, PSC_OPT_PORT},
        {"threads", required_argument, NULL, OPT_THREADS},
        {"job_spec", required_argument, NULL, OPT_JOB_SPEC},
        {"grace_ms", required_argument, NULL, OPT_GRACE_MS},
        {"checkpoint_dir", required_argument, NULL, OPT_CKPT_DIR},
        {"debug_save_delay_ms", required_argument, NULL, OPT_DEBUG_SAVE_DELAY},
        {"metrics_port", required_argument, NULL, OPT_METRICS_PORT},
        {"log_level", required_argument, NULL, PSC_OPT_LOG_LEVEL},
        {"help", no_argument, NULL, PSC_OPT_HELP},
        {"version", no_argument, NULL, PSC_OPT_VERSION},
        PSC_SECURITY_OPTIONS,
        {NULL, 0, NULL, 0},
    };
    psc_task_flags_t flags = {NULL, NULL, -1, -1};
    psc_security_flags_t secf = {0};
    long threads = sysconf(_SC_NPROCESSORS_ONLN), grace_ms = 2000, save_delay_ms = 0, metrics_port = 0, v;
    if (threads < 1) threads = 1;
    if (threads > 8) threads = 8;
    const char *job_spec_path = NULL, *ckpt_dir = NULL;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case PSC_OPT_CLUSTER: flags.cluster = optarg; break;
        case PSC_OPT_JOB: flags.job = optarg; break;
        case PSC_OPT_TASK_INDEX:
            if (psc_parse_int(optarg, 0, 1 << 20, &v)) {
                fprintf(stderr, "ps_server: --task_index: expected a non-negative integer, got \"%s\"\n", optarg);
                return PSC_EXIT_USAGE;
            }
            flags.task_index = (int)v;
            break;
        case PSC_OPT_PORT:
            if (psc_parse_int(optarg, 0, 65535, &v)) {
                fprintf(stderr, "ps_server: --port: expected 0..65535, got \"%s\"\n", optarg);
                return PSC_EXIT_USAGE;
            }
            flags.port = (int)v;
            break;
        case OPT_THREADS:
            if (psc_parse_int(optarg, 1, 64, &threads)) {
                fprintf(stderr, "ps_server: --threads: expected 1..64, got \"%s\"\n", optarg);
                return PSC_EXIT_USAGE;
            }
            break;
        case OPT_JOB_SPEC: job_spec_path = optarg; break;
        case OPT_CKPT_DIR: ckpt_dir = optarg; break;
        case OPT_DEBUG_SAVE_DELAY:
            if (psc_parse_int(optarg, 0, 600000, &save_delay_ms)) {
                fprintf(stderr, "ps_server: --debug_save_delay_ms: expected 0..600000, got \"%s\"\n", optarg);
                return PSC_EXIT_USAGE;
            }
            break;
        case OPT_METRICS_PORT:
            if (psc_parse_int(optarg, 0, 65535, &metrics_port)) {
                fprintf(stderr, "ps_server: --metrics_port: expected 0..65535 (0 = off), got \"%s\"\n", optarg);
                return PSC_EXIT_USAGE;
            }
            break;
        case OPT_GRACE_MS:
            if (psc_parse_int(optarg, 0, 600000, &grace_ms)) {
                fprintf(stderr, "ps_server: --grace_ms: expected 0..600000, got \"%s\"\n", optarg);
                return PSC_EXIT_USAGE;
            }
            break;
        case PSC_OPT_LOG_LEVEL: {
            enum psc_log_level lv;
            if (psc_log_parse_level(optarg, &lv)) {
                fprintf(stderr, "ps_server: --log_level: expected debug|info|warn|error, got \"%s\"\n", optarg);
                return PSC_EXIT_USAGE;
            }
            psc_log_set_level(lv);
            break;
        }
        case PSC_OPT_HELP: usage(stdout); return 0;
        case PSC_OPT_VERSION: printf("ps_server (psc) %s\n", PSC_VERSION); return 0;
        default:
            if (psc_security_flag(c, optarg, &secf)) break;
            fprintf(stderr, "ps_server: unknown or incomplete option \"%s\" (see --help)\n", argv[optind - 1]);
            return PSC_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "ps_server: unexpected argument \"%s\" (see --help)\n", argv[optind]);
        return PSC_EXIT_USAGE;
    }
    if (!flags.job && !getenv("TF_CONFIG")) flags.job = "ps";

    char err[512];
    psc_tf_config_t cfg;
    if (psc_config_resolve(getenv("TF_CONFIG"), &flags, 1, &cfg, err, sizeof err)) {
        fprintf(stderr, "ps_server: %s\n", err);
        return PSC_EXIT_CONFIG;
    }
    if (cfg.task.type != PSC_JOB_PS) {
        fprintf(stderr, "ps_server: task type is %s; ps_server serves ps tasks (use worker for the others)\n",
                psc_job_type_name(cfg.task.type));
        psc_tf_config_deinit(&cfg);
        return PSC_EXIT_CONFIG;
    }
    if (job_spec_path) { /* the whole spec, against this cluster; the PS reads no data */
        psc_job_spec_t spec;
        if (psc_job_spec_load_checked(job_spec_path, &cfg.cluster, 0, 0, &spec, err, sizeof err)) {
            fprintf(stderr, "ps_server: %s\n", err);
            psc_tf_config_deinit(&cfg);
            return PSC_EXIT_CONFIG;
        }
        psc_job_spec_deinit(&spec);
    }
    char component[32], bind[300];
    snprintf(component, sizeof component, "ps:%d", cfg.task.index);
    psc_log_set_component(component);
    if (psc_bind_address(psc_cluster_addr(&cfg.cluster, cfg.task), cfg.port, bind, sizeof bind)) {
        fprintf(stderr, "ps_server: cannot derive a listen address from \"%s\"\n",
                psc_cluster_addr(&cfg.cluster, cfg.task));
        psc_tf_config_deinit(&cfg);
        return PSC_EXIT_CONFIG;
    }

    if (psc_security_apply(&secf, PSC_SEC_SERVER, err, sizeof err)) {
        fprintf(stderr, "ps_server: %s\n", err);
        psc_tf_config_deinit(&cfg);
        return PSC_EXIT_CONFIG;
    }
    if (secf.tls_ca && !secf.tls_client_auth) /* a ps_server only listens: nothing else would read the CA */
        PSC_WARN("--tls_ca has no effect without --tls_client_auth: a ps_server makes no connections, and its "
                 "listener verifies clients against the CA only when --tls_client_auth requires client certificates");
    ckpt_db_t *ckpt = NULL;
    if (ckpt_dir && ckpt_open(ckpt_dir, &ckpt, err, sizeof err)) {
        fprintf(stderr, "ps_server: --checkpoint_dir: %s\n", err);
        psc_tf_config_deinit(&cfg);
        return PSC_EXIT_IOERR;
    }
    psc_signals_block(); /* before gRPC starts its threads */
    psc_rpc_hold_for_process(); /* exit without gRPC's full shutdown (rpc.h) */
    store_t *store = store_create();
    ps_service_t *svc = ps_service_create(store, cfg.task.index, on_shutdown_rpc, NULL);
    ps_service_set_checkpoints(svc, ckpt, (int)save_delay_ms);
    psc_metrics_t *metrics = metrics_port ? psc_metrics_create() : NULL;
    ps_service_set_metrics(svc, metrics);
    psc_rpc_server_t *server = psc_rpc_server_create(bind, (int)threads, err, sizeof err);
    if (!server) {
        fprintf(stderr, "ps_server: %s\n", err);
        return PSC_EXIT_SOFTWARE;
    }
    ps_service_register(svc, server);
    /* the metrics port first: a daemon that cannot serve its metrics never opens its RPC port */
    int port = 0;
    if (metrics && psc_metrics_serve_for(metrics, bind, (int)metrics_port, err, sizeof err)) {
        fprintf(stderr, "ps_server: --metrics_port: %s (another process on the port? use another one)\n", err);
        port = PSC_EIO;
    }
    if (port == 0 && (port = psc_rpc_server_start(server, err, sizeof err)) < 0)
        fprintf(stderr, "ps_server: %s\n", err);
    if (port < 0) {
        psc_rpc_server_destroy(server);
        ps_service_destroy(svc);
        psc_metrics_destroy(metrics);
        store_destroy(store);
        ckpt_close(ckpt);
        psc_tf_config_deinit(&cfg);
        return PSC_EXIT_UNAVAILABLE;
    }
    PSC_INFO("serving on %s (port %d) with %ld threads; %d ps, %d training replicas; checkpoints %s%s", bind, port,
             threads, cfg.cluster.n[PSC_JOB_PS], psc_cluster_num_replicas(&cfg.cluster), ckpt ? "in " : "off",
             ckpt ? ckpt_dir : "");
    PSC_INFO("ready; no job yet: waiting for the chief to create one");

    int sig = psc_signals_wait();
    PSC_INFO("stopping (%s)", sig == SIGUSR1 ? "Shutdown RPC" : (sig == SIGINT ? "SIGINT" : "SIGTERM"));
    ps_service_drain(svc); /* parked sync replies first: the shutdown waits for every call */
    psc_rpc_server_shutdown(server, (int)grace_ms);
    psc_rpc_server_destroy(server);
    ps_service_destroy(svc); /* removes its collector: no scrape reads the store after this */
    psc_metrics_destroy(metrics);
    store_destroy(store);
    ckpt_close(ckpt);
    psc_tf_config_deinit(&cfg);
    PSC_INFO("stopped");
    return 0;
}
