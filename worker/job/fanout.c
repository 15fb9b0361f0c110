/* fanout.c — the same call to many addresses, FANOUT_MAX at a time (fanout.h). */
#include "fanout.h"

#include "psc.h"

#include <stdlib.h>
#include <string.h>

void fanout_call(const char *const *addrs, size_t n, const char *method, const void *req, size_t len, int timeout_ms,
                 psc_rpc_op_t *ops)
{
    memset(ops, 0, n * sizeof *ops);
    size_t cap = PSC_MIN(n, (size_t)FANOUT_MAX) + 1;
    psc_rpc_op_t *batch = psc_xcalloc(cap, sizeof *batch);
    size_t *at = psc_xcalloc(cap, sizeof *at);
    for (size_t from = 0; from < n;) {
        size_t k = 0;
        for (; from < n && k < FANOUT_MAX; from++) {
            if (!addrs[from]) continue;
            memset(&batch[k], 0, sizeof batch[k]);
            batch[k].ch = psc_rpc_channel_create(addrs[from]);
            batch[k].method = method;
            batch[k].hdr = req;
            batch[k].hdr_len = len;
            at[k++] = from;
        }
        psc_rpc_run(batch, k, k, timeout_ms);
        for (size_t j = 0; j < k; j++) {
            psc_rpc_channel_destroy(batch[j].ch);
            batch[j].ch = NULL;
            ops[at[j]] = batch[j];
        }
    }
    free(batch);
    free(at);
}
