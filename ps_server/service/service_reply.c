/* service_reply.c — how the psc.ParameterServer handlers answer: the one
 * error path (svc_fail, svc_reject) and Chunk replies written in place.
 *
 * Design. Every refusal the service sends goes through svc_failv: the PSC_E*
 * code becomes a gRPC status by psc_rpc_status_of (common/rpc.c, the one
 * mapping every daemon shares), and a request the service refuses as bad
 * input is counted in the store's `rejected` on the way, as the store counts
 * its own refusals. A tensor reply (Pull, PushPull) is written straight into
 * the reply buffer: the payload at a fixed offset, the header, packed once the
 * version is known, right in front of it, so the bytes are copied once.
 *
 * Invariants: the bottom of the service's files; it calls only the store, the
 * transport and common/ code. Every function completes the call exactly once.
 */
#include "service_internal.h"

#include "chunk.h"
#include "psc.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static void svc_failv(ps_service_t *svc, psc_rpc_call_t *call, int rc, int rejected, const char *fmt, va_list ap)
{
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (rejected) store_count_rejected(svc->store);
    psc_rpc_fail(call, psc_rpc_status_of(rc), "%s", msg);
}

void svc_fail(ps_service_t *svc, psc_rpc_call_t *call, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    svc_failv(svc, call, rc, 0, fmt, ap);
    va_end(ap);
}

void svc_reject(ps_service_t *svc, psc_rpc_call_t *call, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    svc_failv(svc, call, rc, 1, fmt, ap);
    va_end(ap);
}

void svc_fail_undecodable(ps_service_t *svc, psc_rpc_call_t *call, const char *what, size_t len)
{
    svc_reject(svc, call, PSC_EINVAL, "%s does not parse (%zu bytes)", what, len);
}

size_t svc_reply_header_bound(const char *name)
{
    /* name, offset, total, version, step, stale, data tag+len: generous fixed bound. */
    return strlen(name) + 96;
}

size_t svc_chunk_header_front(uint8_t *buf, size_t bound, const char *name, uint64_t offset, uint64_t total,
                              int64_t version, size_t len, int64_t step, int stale)
{
    Psc__Chunk h = PSC__CHUNK__INIT;
    h.name = (char *)name;
    h.offset = offset;
    h.total = total;
    h.version = version;
    h.step = step;
    h.stale = stale;
    uint8_t hdr[256];
    PSC_ASSERT(psc_chunk_header_bound(&h) <= sizeof hdr);
    size_t hlen = psc_chunk_header_pack(&h, len, hdr);
    PSC_ASSERT(hlen <= bound);
    memcpy(buf + bound - hlen, hdr, hlen);
    return bound - hlen;
}

void svc_reply_chunk(psc_rpc_call_t *call, uint8_t *buf, size_t bound, const char *name, uint64_t offset,
                     uint64_t total, int64_t version, size_t len, int64_t step, int stale)
{
    size_t start = svc_chunk_header_front(buf, bound, name, offset, total, version, len, step, stale);
    psc_rpc_reply_send_range(call, start, bound - start + len);
}
