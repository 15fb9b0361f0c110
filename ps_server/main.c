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
       OPT_DEBUG_NO_SPACE_CHECK };

/* The command line: the flags every daemon shares and ps_server's own. */
typedef struct ps_opts {
    psc_daemon_flags_t df;
    long threads, grace_ms, save_delay_ms;
    int no_space_check; /* --debug_no_space_check */
    const char *job_spec_path, *ckpt_dir;
} ps_opts_t;

/* What main() builds, in order; ps_teardown() takes down whatever is there. */
typedef struct ps_daemon {
    psc_tf_config_t cfg; /* zeroed until resolved: deinit is then a no-op */
    char bind[300];      /* the RPC server's address */
    ckpt_db_t *ckpt;
    store_t *store;
    ps_service_t *svc;
    psc_metrics_t *metrics;
    psc_rpc_server_t *server;
} ps_daemon_t;

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
            "  --debug_no_space_check     testing: skip the free-space check before a checkpoint write, so that\n"
            "                       RocksDB itself meets a full disk\n"
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

/* Fills *o from argv. PSC_FLAG_NEXT, or the exit status main() returns now. */
static int parse_args(int argc, char **argv, ps_opts_t *o)
{
    static const struct option opts[] = {
        PSC_DAEMON_OPTIONS,
        {"threads", required_argument, NULL, OPT_THREADS},
        {"job_spec", required_argument, NULL, OPT_JOB_SPEC},
        {"grace_ms", required_argument, NULL, OPT_GRACE_MS},
        {"checkpoint_dir", required_argument, NULL, OPT_CKPT_DIR},
        {"debug_save_delay_ms", required_argument, NULL, OPT_DEBUG_SAVE_DELAY},
        {"debug_no_space_check", no_argument, NULL, OPT_DEBUG_NO_SPACE_CHECK},
        {NULL, 0, NULL, 0},
    };
    const char *p = "ps_server";
    int c, rc;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case OPT_THREADS:
            if (psc_flag_long(p, "--threads", optarg, 1, 64, NULL, &o->threads)) return PSC_EXIT_USAGE;
            break;
        case OPT_JOB_SPEC: o->job_spec_path = optarg; break;
        case OPT_CKPT_DIR: o->ckpt_dir = optarg; break;
        case OPT_DEBUG_SAVE_DELAY:
            if (psc_flag_long(p, "--debug_save_delay_ms", optarg, 0, 600000, NULL, &o->save_delay_ms))
                return PSC_EXIT_USAGE;
            break;
        case OPT_DEBUG_NO_SPACE_CHECK: o->no_space_check = 1; break;
        case OPT_GRACE_MS:
            if (psc_flag_long(p, "--grace_ms", optarg, 0, 600000, NULL, &o->grace_ms)) return PSC_EXIT_USAGE;
            break;
        default:
            if ((rc = psc_daemon_flag(&o->df, c, optarg, argv[optind - 1])) != PSC_FLAG_NEXT) return rc;
        }
    }
    if ((rc = psc_daemon_flags_end(&o->df, argc, argv, optind)) != PSC_FLAG_NEXT) return rc;
    if (!o->df.task.job && !getenv("TF_CONFIG")) o->df.task.job = "ps";
    return PSC_FLAG_NEXT;
}

/* Resolves this task, checks the job spec, the listen address and the
 * security files, opens the checkpoints. 0, or the exit status after printing
 * why (what it set up stays in *d for ps_teardown). */
static int ps_configure(const ps_opts_t *o, ps_daemon_t *d)
{
    char err[512];
    if (psc_tf_config_resolve(getenv("TF_CONFIG"), &o->df.task, 1, &d->cfg, err, sizeof err)) {
        fprintf(stderr, "ps_server: %s\n", err);
        return PSC_EXIT_CONFIG;
    }
    if (d->cfg.task.type != PSC_JOB_PS) {
        fprintf(stderr, "ps_server: task type is %s; ps_server serves ps tasks (use worker for the others)\n",
                psc_job_type_name(d->cfg.task.type));
        return PSC_EXIT_CONFIG;
    }
    if (o->job_spec_path) { /* the whole spec, against this cluster; the PS reads no data */
        psc_job_spec_t spec;
        if (psc_job_spec_load_checked(o->job_spec_path, &d->cfg.cluster, 0, 0, &spec, err, sizeof err)) {
            fprintf(stderr, "ps_server: %s\n", err);
            return PSC_EXIT_CONFIG;
        }
        psc_job_spec_deinit(&spec);
    }
    char component[32];
    snprintf(component, sizeof component, "ps:%d", d->cfg.task.index);
    psc_log_set_component(component);
    const char *addr = psc_cluster_addr(&d->cfg.cluster, d->cfg.task);
    if (psc_task_bind_address(addr, d->cfg.port, d->bind, sizeof d->bind)) {
        fprintf(stderr, "ps_server: cannot derive a listen address from \"%s\"\n", addr);
        return PSC_EXIT_CONFIG;
    }
    const psc_security_flags_t *secf = &o->df.sec;
    if (psc_security_apply(secf, PSC_SEC_SERVER, err, sizeof err)) {
        fprintf(stderr, "ps_server: %s\n", err);
        return PSC_EXIT_CONFIG;
    }
    if (secf->tls_ca && !secf->tls_client_auth) /* a ps_server only listens: nothing else would read the CA */
        PSC_WARN("--tls_ca has no effect without --tls_client_auth: a ps_server makes no connections, and its "
                 "listener verifies clients against the CA only when --tls_client_auth requires client certificates");
    if (o->ckpt_dir && ckpt_open(o->ckpt_dir, &d->ckpt, err, sizeof err)) {
        fprintf(stderr, "ps_server: --checkpoint_dir: %s\n", err);
        return PSC_EXIT_IOERR;
    }
    if (d->ckpt && o->no_space_check) ckpt_debug_skip_space_check(d->ckpt);
    return 0;
}

/* Builds the store, the service and the RPC server and starts serving (the
 * metrics port first). 0, or the exit status after printing why. */
static int ps_start(const ps_opts_t *o, ps_daemon_t *d)
{
    char err[512];
    d->store = store_create();
    d->svc = ps_service_create(d->store, d->cfg.task.index, on_shutdown_rpc, NULL, err, sizeof err);
    if (!d->svc) {
        fprintf(stderr, "ps_server: %s\n", err);
        return PSC_EXIT_SOFTWARE;
    }
    ps_service_set_checkpoints(d->svc, d->ckpt, (int)o->save_delay_ms);
    ps_service_set_num_ps(d->svc, d->cfg.cluster.n[PSC_JOB_PS]);
    d->metrics = o->df.metrics_port ? psc_metrics_create() : NULL;
    ps_service_set_metrics(d->svc, d->metrics);
    d->server = psc_rpc_server_create(d->bind, (int)o->threads, err, sizeof err);
    if (!d->server) {
        fprintf(stderr, "ps_server: %s\n", err);
        return PSC_EXIT_SOFTWARE;
    }
    ps_service_register(d->svc, d->server);
    /* the metrics port first: a daemon that cannot serve its metrics never opens its RPC port */
    if (d->metrics && psc_metrics_serve_for(d->metrics, d->bind, (int)o->df.metrics_port, err, sizeof err)) {
        fprintf(stderr, "ps_server: --metrics_port: %s (another process on the port? use another one)\n", err);
        return PSC_EXIT_UNAVAILABLE;
    }
    int port = psc_rpc_server_start(d->server, err, sizeof err);
    if (port < 0) {
        fprintf(stderr, "ps_server: %s\n", err);
        return PSC_EXIT_UNAVAILABLE;
    }
    PSC_INFO("serving on %s (port %d) with %ld threads; %d ps, %d training replicas; checkpoints %s%s", d->bind,
             port, o->threads, d->cfg.cluster.n[PSC_JOB_PS], psc_cluster_num_replicas(&d->cfg.cluster),
             d->ckpt ? "in " : "off", d->ckpt ? o->ckpt_dir : "");
    PSC_INFO("ready; no job yet: waiting for the chief to create one");
    return 0;
}

/* Takes down what ps_configure and ps_start built, in reverse order. */
static void ps_teardown(ps_daemon_t *d)
{
    psc_rpc_server_destroy(d->server);
    ps_service_destroy(d->svc); /* removes its collector: no scrape reads the store after this */
    psc_metrics_destroy(d->metrics);
    store_destroy(d->store);
    ckpt_close(d->ckpt);
    psc_tf_config_deinit(&d->cfg);
}

int main(int argc, char **argv)
{
    ps_opts_t o = {.df = PSC_DAEMON_FLAGS_INIT("ps_server", usage), .grace_ms = 2000};
    o.threads = PSC_MAX(1, PSC_MIN(8, sysconf(_SC_NPROCESSORS_ONLN)));
    int rc = parse_args(argc, argv, &o);
    if (rc != PSC_FLAG_NEXT) return rc;

    ps_daemon_t d;
    memset(&d, 0, sizeof d);
    if ((rc = ps_configure(&o, &d))) goto out;
    psc_signals_block(); /* before gRPC starts its threads */
    psc_daemon_raise_nofile(); /* a connection per worker */
    psc_rpc_hold_for_process(); /* exit without gRPC's full shutdown (rpc.h) */
    if ((rc = ps_start(&o, &d))) goto out;

    int sig = psc_signals_wait();
    PSC_INFO("stopping (%s)", sig == SIGUSR1 ? "Shutdown RPC" : (sig == SIGINT ? "SIGINT" : "SIGTERM"));
    ps_service_drain(d.svc); /* parked sync replies first: the shutdown waits for every call */
    psc_rpc_server_shutdown(d.server, (int)o.grace_ms);
out:
    ps_teardown(&d);
    if (rc == 0) PSC_INFO("stopped");
    return rc;
}
