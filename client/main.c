/* psctl — drives a running psc cluster from anywhere that can reach its chief
 * (standalone-client mode, DESIGN.md). Commands so far:
 *
 *   psctl checkpoint --chief HOST:PORT [--reason TEXT] [--timeout_secs S]
 *       asks the chief for a checkpoint now and waits until it is committed on
 *       every PS; prints "checkpoint ID committed at step S".
 *
 * Exit codes: 0 done, 1 the cluster refused or failed, 64 usage, 69 the chief
 * is unreachable.
 */
#include "psc.h"
#include "psc.pb-c.h"
#include "rpc.h"
#include "wire.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { OPT_CHIEF = 1000, OPT_REASON, OPT_TIMEOUT, OPT_HELP, OPT_VERSION };

static void usage(FILE *f)
{
    fprintf(f, "usage: psctl checkpoint --chief HOST:PORT [--reason TEXT] [--timeout_secs S]\n"
               "Drives a running psc cluster through its chief.\n\n"
               "  checkpoint            take a checkpoint now; waits until every PS committed it\n"
               "  --chief HOST:PORT     the chief's address (its task address in TF_CONFIG)\n"
               "  --reason TEXT         logged by the chief (default \"psctl\")\n"
               "  --timeout_secs S      give up after S seconds (default 300)\n"
               "  --help, --version\n"
               "Exit codes: 0 done, 1 refused or failed, 64 usage, 69 chief unreachable.\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"chief", required_argument, NULL, OPT_CHIEF},     {"reason", required_argument, NULL, OPT_REASON},
        {"timeout_secs", required_argument, NULL, OPT_TIMEOUT}, {"help", no_argument, NULL, OPT_HELP},
        {"version", no_argument, NULL, OPT_VERSION},       {NULL, 0, NULL, 0},
    };
    const char *chief = NULL, *reason = "psctl";
    double timeout = 300;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case OPT_CHIEF: chief = optarg; break;
        case OPT_REASON: reason = optarg; break;
        case OPT_TIMEOUT: {
            char *end;
            timeout = strtod(optarg, &end);
            if (*end || !(timeout > 0 && timeout <= 86400)) {
                fprintf(stderr, "psctl: --timeout_secs: expected seconds in (0, 86400], got \"%s\"\n", optarg);
                return PSC_EXIT_USAGE;
            }
            break;
        }
        case OPT_HELP: usage(stdout); return 0;
        case OPT_VERSION: printf("psctl (psc) %s\n", PSC_VERSION); return 0;
        default:
            fprintf(stderr, "psctl: unknown or incomplete option \"%s\" (see --help)\n", argv[optind - 1]);
            return PSC_EXIT_USAGE;
        }
    }
    if (optind != argc - 1 || strcmp(argv[optind], "checkpoint") != 0) {
        fprintf(stderr, "psctl: expected one command, checkpoint (see --help)\n");
        return PSC_EXIT_USAGE;
    }
    if (!chief) {
        fprintf(stderr, "psctl: checkpoint needs --chief HOST:PORT\n");
        return PSC_EXIT_USAGE;
    }
    psc_tune_malloc();
    psc_rpc_channel_t *ch = psc_rpc_channel_create(chief);
    Psc__CheckpointRequest req = PSC__CHECKPOINT_REQUEST__INIT;
    req.reason = (char *)reason;
    size_t len = psc__checkpoint_request__get_packed_size(&req);
    uint8_t *buf = psc_xmalloc(len + 1);
    psc__checkpoint_request__pack(&req, buf);
    psc_rpc_op_t op;
    int rc = psc_rpc_call(ch, PSC_M_WORKER_CHECKPOINT, buf, len, (int)(timeout * 1000), 0, &op);
    free(buf);
    int exit_code = 0;
    if (rc) {
        fprintf(stderr, "psctl: checkpoint on %s failed: %s: %s\n", chief, psc_rpc_code_name(op.code), op.msg);
        exit_code = op.code == PSC_RPC_UNAVAILABLE ? PSC_EXIT_UNAVAILABLE : 1;
    } else {
        Psc__CheckpointReply *r = psc__checkpoint_reply__unpack(NULL, op.reply_len, op.reply);
        if (!r) {
            fprintf(stderr, "psctl: the reply of %s does not parse\n", chief);
            exit_code = 1;
        } else {
            printf("checkpoint %llu committed at step %lld\n", (unsigned long long)r->id, (long long)r->step);
            psc__checkpoint_reply__free_unpacked(r, NULL);
        }
    }
    psc_rpc_op_clear(&op);
    psc_rpc_channel_destroy(ch);
    return exit_code;
}
