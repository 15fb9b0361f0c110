/* psc_call — one raw unary call, as any gRPC client could make it: sends the
 * bytes of REQUEST_FILE (none when absent) to METHOD at ADDR and prints the
 * status as "CODE: message" (OK: "OK <n> bytes").
 * usage: psc_call [TLS/token flags] [--no_send_limit] ADDR METHOD [REQUEST_FILE]
 * --no_send_limit lifts the client's own 8 MiB message limit, so the server's
 * limit can be tried.
 * METHOD is a full path (/psc.ParameterServer/Shutdown). Exit 0 when the call
 * ended OK, 1 otherwise, 64 usage, 78 bad TLS/token files. The security tests
 * use it to knock on servers without (or with the wrong) credentials. */
#include "psc.h"
#include "rpc.h"
#include "security.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    psc_rpc_hold_for_process(); /* exit without gRPC's full shutdown (rpc.h) */
    static const struct option opts[] = {PSC_SECURITY_OPTIONS, {"no_send_limit", no_argument, NULL, 'n'},
                                         {NULL, 0, NULL, 0}};
    psc_security_flags_t secf = {0};
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1)
        if (c == 'n')
            psc_rpc_set_send_limit(-1);
        else if (!psc_security_flag(c, optarg, &secf)) {
            fprintf(stderr, "psc_call: unknown option \"%s\"\n", argv[optind - 1]);
            return 64;
        }
    if (argc - optind < 2 || argc - optind > 3) {
        fprintf(stderr, "usage: psc_call [TLS/token flags] ADDR METHOD [REQUEST_FILE]\n");
        return 64;
    }
    char err[512];
    if (psc_security_apply(&secf, PSC_SEC_CLIENT, err, sizeof err)) {
        fprintf(stderr, "psc_call: %s\n", err);
        return 78;
    }
    size_t len = 0;
    char *req = NULL;
    if (argc - optind == 3 && !(req = psc_read_file(argv[optind + 2], (size_t)64 << 20, &len))) {
        fprintf(stderr, "psc_call: %s: %s\n", argv[optind + 2], strerror(errno));
        return 64;
    }
    psc_rpc_channel_t *ch = psc_rpc_channel_create(argv[optind]);
    psc_rpc_op_t op;
    psc_rpc_call(ch, argv[optind + 1], req ? req : "", len, 5000, 0, &op);
    if (op.code == PSC_RPC_OK)
        printf("OK %zu bytes\n", op.reply_len);
    else
        printf("%s: %s\n", psc_rpc_code_name(op.code), op.msg);
    int rc = op.code == PSC_RPC_OK ? 0 : 1;
    psc_rpc_op_clear(&op);
    psc_rpc_channel_destroy(ch);
    free(req);
    return rc;
}
