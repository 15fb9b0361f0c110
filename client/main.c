/* psctl — drives a running psc cluster from anywhere that can reach it
 * (standalone-client mode, DESIGN.md): the daemons run without a job and wait;
 * psctl submits one to the chief, follows it, stops it, checkpoints, exports.
 *
 *   psctl train JOB.json [--detach]   submit a job; follow it to the end (Ctrl-C cancels it)
 *   psctl attach                      follow the running (or last) job
 *   psctl status                      members and health, the job, variables per PS
 *   psctl stop                        cancel the running job (the cluster stays up)
 *   psctl checkpoint [--reason TEXT]  a checkpoint now, once committed on every PS
 *   psctl export --format safetensors -o FILE   the current variables
 *   psctl eval                        test-set accuracy of the current weights
 *   psctl predict FILE -o OUT         score a file on the workers' hosts, lines in input order here
 *
 * main() only parses the options and dispatches through the command table
 * (commands.h); the commands live in commands.c.
 *
 * The cluster: --cluster FILE|JSON (a cluster object or a TF_CONFIG document),
 * else TF_CONFIG's cluster; --chief HOST:PORT alone is enough for train,
 * attach, stop and checkpoint.
 * Exit codes: 0 done, 1 the job failed or the cluster refused, 64 usage,
 * 69 unreachable, 77 credentials refused (token or certificate), 78 bad
 * cluster configuration, 130 cancelled with Ctrl-C.
 */
#include "commands.h"
#include "log.h"
#include "psc.h"
#include "rpc.h"
#include "security.h"
#include "tf_config.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    OPT_CHIEF = 1000,
    OPT_CLUSTER,
    OPT_REASON,
    OPT_TIMEOUT,
    OPT_DETACH,
    OPT_FORMAT,
    OPT_OUT,
    OPT_CHECKPOINT,
    OPT_WARM_START,
    OPT_LOG_LEVEL,
    OPT_HELP,
    OPT_VERSION
};

static void on_sigint(int sig)
{
    (void)sig;
    psctl_interrupted = 1;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: psctl COMMAND [options]\n"
            "Drives a running psc cluster (standalone-client mode).\n\n"
            "commands:\n"
            "  train JOB.json [--detach] [--warm_start JOB_ID|FILE [--checkpoint ID]]\n"
            "                             submit a job to the chief and follow it (Ctrl-C cancels the job);\n"
            "                             --warm_start sets the spec's warm_start.from (and .checkpoint)\n"
            "  attach                     follow the running or last job\n"
            "  status                     cluster members and health, the job, the variables of every PS\n"
            "  stop                       cancel the running job; the daemons stay up\n"
            "  checkpoint [--reason TEXT] take a checkpoint now; waits until every PS committed it\n"
            "  export --format safetensors -o FILE [--checkpoint ID]   write the current variables, or those\n"
            "                             of committed checkpoint ID (read on the PS, no restore)\n"
            "  eval [--checkpoint ID]     test-set metrics of the current weights, or of committed checkpoint ID\n"
            "                             (the chief evaluates)\n"
            "  predict FILE -o OUT [--checkpoint ID]   score FILE (a path on the workers' hosts, in the job's data\n"
            "                             format) with the running or last job's model, or committed checkpoint ID;\n"
            "                             every training replica scores its shard; OUT (- for stdout) gets one line\n"
            "                             per example in input order: index, label, probability or class and\n"
            "                             per-class probabilities\n"
            "options:\n"
            "  --cluster FILE|JSON   the cluster (a cluster object or a TF_CONFIG document); default TF_CONFIG\n"
            "  --chief HOST:PORT     the chief's address (default: from the cluster)\n"
            "  --timeout_secs S      deadline of each call to the cluster (default 30; checkpoint and eval 300)\n"
            "  --tls_ca FILE, --tls_cert FILE, --tls_key FILE, --tls_server_name NAME, --auth_token_file FILE\n"
            "                        TLS and the shared token, as for the daemons (docs/operations.md, Security)\n"
            "  --log_level LEVEL     debug shows gRPC's own log lines (default info: psc's messages only)\n"
            "  --help, --version\n"
            "Exit codes: 0 done, 1 job failed or refused, 64 usage, 69 unreachable, 77 token or certificate refused,\n"
            "78 bad cluster or TLS/token files, 130 cancelled.\n");
}

/* Fills *c, *cluster_flag and *secf from the options; leaves optind at the
 * command. -1 to go on, else the exit status main() returns now. */
static int parse_options(int argc, char **argv, psctl_cli_t *c, const char **cluster_flag, psc_security_flags_t *secf)
{
    static const struct option opts[] = {
        {"chief", required_argument, NULL, OPT_CHIEF},
        {"cluster", required_argument, NULL, OPT_CLUSTER},
        {"reason", required_argument, NULL, OPT_REASON},
        {"timeout_secs", required_argument, NULL, OPT_TIMEOUT},
        {"detach", no_argument, NULL, OPT_DETACH},
        {"format", required_argument, NULL, OPT_FORMAT},
        {"out", required_argument, NULL, OPT_OUT},
        {"checkpoint", required_argument, NULL, OPT_CHECKPOINT},
        {"warm_start", required_argument, NULL, OPT_WARM_START},
        {"log_level", required_argument, NULL, OPT_LOG_LEVEL},
        {"help", no_argument, NULL, OPT_HELP},
        {"version", no_argument, NULL, OPT_VERSION},
        PSC_SECURITY_OPTIONS,
        {NULL, 0, NULL, 0},
    };
    int ch;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "o:", opts, NULL)) != -1) {
        switch (ch) {
        case OPT_CHIEF: c->chief = optarg; break;
        case OPT_CLUSTER: *cluster_flag = optarg; break;
        case OPT_REASON: c->reason = optarg; break;
        case OPT_TIMEOUT: {
            char *end;
            double t = strtod(optarg, &end);
            if (*end || !(t > 0 && t <= 86400)) {
                fprintf(stderr, "psctl: --timeout_secs: expected seconds in (0, 86400], got \"%s\"\n", optarg);
                return PSC_EXIT_USAGE;
            }
            c->timeout_ms = (int)(t * 1000);
            c->timeout_set = 1;
            break;
        }
        case OPT_DETACH: c->detach = 1; break;
        case OPT_WARM_START: c->warm_start = optarg; break;
        case OPT_FORMAT: c->format = optarg; break;
        case 'o':
        case OPT_OUT: c->out = optarg; break;
        case OPT_CHECKPOINT: {
            char *end;
            errno = 0;
            unsigned long long id = strtoull(optarg, &end, 10);
            if (*end || end == optarg || errno || id == 0 || optarg[0] == '-') {
                fprintf(stderr, "psctl: --checkpoint: expected a checkpoint id (an integer >= 1), got \"%s\"\n",
                        optarg);
                return PSC_EXIT_USAGE;
            }
            c->checkpoint = id;
            break;
        }
        case OPT_LOG_LEVEL: {
            enum psc_log_level lv;
            if (psc_log_parse_level(optarg, &lv)) {
                fprintf(stderr, "psctl: --log_level: expected debug|info|warn|error, got \"%s\"\n", optarg);
                return PSC_EXIT_USAGE;
            }
            psc_log_set_level(lv);
            break;
        }
        case OPT_HELP: usage(stdout); return 0;
        case OPT_VERSION: printf("psctl (psc) %s\n", PSC_VERSION); return 0;
        default:
            if (psc_security_flag(ch, optarg, secf)) break;
            fprintf(stderr, "psctl: unknown or incomplete option \"%s\" (see --help)\n", argv[optind - 1]);
            return PSC_EXIT_USAGE;
        }
    }
    return -1;
}

/* The command at argv[optind] and its argument. The command, or NULL after
 * printing why (exit PSC_EXIT_USAGE). */
static const psctl_command_t *parse_command(int argc, char **argv, const char **arg)
{
    if (optind >= argc) {
        char names[128] = "";
        for (const psctl_command_t *k = psctl_commands; k->name; k++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", k == psctl_commands ? "" : ", ",
                     k->name);
        fprintf(stderr, "psctl: expected a command: %s (see --help)\n", names);
        return NULL;
    }
    const char *name = argv[optind++];
    *arg = optind < argc ? argv[optind++] : NULL;
    const psctl_command_t *cmd = psctl_command_find(name);
    int want_arg = cmd && cmd->takes_arg;
    if ((want_arg && !*arg) || (!want_arg && *arg) || optind < argc) {
        if (want_arg)
            fprintf(stderr, "psctl: %s needs %s (see --help)\n", name, cmd->arg_name);
        else
            fprintf(stderr, "psctl: %s takes no argument (see --help)\n", name);
        return NULL;
    }
    if (!cmd) fprintf(stderr, "psctl: unknown command \"%s\" (see --help)\n", name);
    return cmd;
}

int main(int argc, char **argv)
{
    psctl_cli_t c = {.timeout_ms = 30000};
    const char *cluster_flag = NULL, *arg = NULL;
    psc_security_flags_t secf = {0};
    int rc = parse_options(argc, argv, &c, &cluster_flag, &secf);
    if (rc >= 0) return rc;
    const psctl_command_t *cmd = parse_command(argc, argv, &arg);
    if (!cmd) return PSC_EXIT_USAGE;
    char err[1024];
    if (psc_security_apply(&secf, PSC_SEC_CLIENT, err, sizeof err)) {
        fprintf(stderr, "psctl: %s\n", err);
        return PSC_EXIT_CONFIG;
    }
    psc_rpc_hold_for_process(); /* exit without gRPC's full shutdown (rpc.h) */
    psc_tf_config_t cfg;
    psc_task_flags_t flags = {.cluster = cluster_flag, .task_index = -1, .port = -1};
    if (cluster_flag || getenv("TF_CONFIG")) {
        if (psc_tf_config_resolve(getenv("TF_CONFIG"), &flags, 0, &cfg, err, sizeof err)) {
            fprintf(stderr, "psctl: %s\n", err);
            return PSC_EXIT_CONFIG;
        }
        c.cluster = cfg.cluster;
        c.have_cluster = 1;
        if (!c.chief) c.chief = psc_cluster_addr(&c.cluster, psc_cluster_chief(&c.cluster));
    }
    if (cmd->needs_cluster && !c.have_cluster) {
        fprintf(stderr, "psctl: %s needs the cluster (--cluster or TF_CONFIG)\n", cmd->name);
        rc = PSC_EXIT_USAGE;
    } else if (!cmd->needs_cluster && !c.chief) {
        fprintf(stderr, "psctl: %s needs --chief HOST:PORT or the cluster (--cluster, TF_CONFIG)\n", cmd->name);
        rc = PSC_EXIT_USAGE;
    } else {
        psc_tune_malloc();
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_sigint;
        sigaction(SIGINT, &sa, NULL);
        rc = cmd->run(&c, arg);
    }
    if (c.have_cluster) psc_tf_config_deinit(&cfg);
    return rc;
}
