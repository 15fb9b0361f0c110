/* ps_client_ops.c — what every part of the ps_client does with a run of
 * calls (ps_client_internal.h): its error, and freeing its replies. Under
 * ps_client.c, ps_client_ctl.c and ps_client_sparse.c; calls common/ only. */
#include "ps_client_internal.h"

#include "psc.h"
#include "rpc.h"

int pcl_op_error(const psc_rpc_op_t *ops, size_t n, const char *what, char *err, size_t errlen)
{
    size_t bad = psc_rpc_first_failure(ops, n);
    if (bad == n) return 0;
    return psc_seterr(err, errlen, psc_rpc_code_errno(ops[bad].code), "%s on %s failed: %s: %s", what,
                      psc_rpc_channel_target(ops[bad].ch), psc_rpc_code_name(ops[bad].code), ops[bad].msg);
}

void pcl_clear_ops(psc_rpc_op_t *ops, size_t n)
{
    for (size_t i = 0; i < n; i++) psc_rpc_op_clear(&ops[i]);
}
