/* service_chunk.c — Chunk requests as they arrive: decoded without copying
 * the tensor bytes, read where gRPC's slices hold them, and bfloat16 payloads
 * widened to float32 before the store sees them.
 *
 * Design: psc senders write the payload last, so the header is decoded from
 * the first CHUNK_HEAD bytes and the payload stays in gRPC's slices; any other
 * valid encoding is gathered and unpacked by protobuf-c. bfloat16 is widened
 * into a per-thread buffer of one chunk. Invariants: a helper; it calls only
 * service_reply.c among the service's files. */
#include "service_internal.h"

#include "bf16.h"
#include "chunk.h"
#include "psc.h"
#include "wire.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK_HEAD 512 /* bytes read for the header (service_internal.h) */

int svc_chunk_decode(const uint8_t *req, size_t len, chunk_req_t *out)
{
    const uint8_t *data;
    size_t dlen;
    out->borrowed = 0;
    if (psc_chunk_decode(req, len, len, &out->c, &data, &dlen) == 0) {
        out->c->data.data = (uint8_t *)data;
        out->c->data.len = dlen;
        out->borrowed = 1;
        return 0;
    }
    out->c = psc__chunk__unpack(NULL, len, req);
    return out->c ? 0 : -1;
}

void svc_chunk_free(chunk_req_t *r)
{
    if (r->borrowed) {
        r->c->data.data = NULL;
        r->c->data.len = 0;
    }
    psc__chunk__free_unpacked(r->c, NULL);
}

/* Where a server thread widens bfloat16 chunks: one chunk's worth, kept for
 * the thread's life (a malloc of 2 MiB per chunk would map and fault in fresh
 * pages every time, since psc_tune_malloc returns big blocks to the kernel). */
static pthread_key_t widen_key;
static pthread_once_t widen_once = PTHREAD_ONCE_INIT;
static void widen_key_make(void) { PSC_ASSERT(pthread_key_create(&widen_key, free) == 0); }

static float *widen_buffer(void)
{
    pthread_once(&widen_once, widen_key_make);
    float *b = pthread_getspecific(widen_key);
    if (!b) {
        b = psc_xmalloc(PSC_CHUNK_BYTES);
        PSC_ASSERT(pthread_setspecific(widen_key, b) == 0);
    }
    return b;
}

/* Copies n bytes of the segments, from byte skip on, into dst; returns how many there were. */
static size_t iov_gather(const psc_iov_t *iov, int niov, size_t skip, uint8_t *dst, size_t n)
{
    size_t got = 0;
    for (int i = 0; i < niov && got < n; i++) {
        size_t len = iov[i].len;
        const uint8_t *p = iov[i].base;
        if (skip >= len) {
            skip -= len;
            continue;
        }
        p += skip;
        len -= skip;
        skip = 0;
        size_t k = PSC_MIN(len, n - got);
        memcpy(dst + got, p, k);
        got += k;
    }
    return got;
}

int svc_chunk_in_decode(psc_iov_t *iov, int niov, size_t len, chunk_in_t *in)
{
    memset(in, 0, sizeof *in);
    uint8_t head[CHUNK_HEAD] = {0}; /* gcc -O3 cannot see that only the gathered bytes are read */
    size_t avail = iov_gather(iov, niov, 0, head, PSC_MIN(len, sizeof head));
    size_t off, dlen;
    if (psc_chunk_decode_prefix(head, avail, len, &in->cr.c, &off, &dlen) == 0) {
        /* the payload: the segments from byte off on, the first one trimmed */
        int i = 0;
        size_t skip = off;
        while (i < niov && skip >= iov[i].len) skip -= iov[i++].len;
        if (i < niov) {
            iov[i].base = (const uint8_t *)iov[i].base + skip;
            iov[i].len -= skip;
        }
        in->seg = iov + i;
        in->nseg = niov - i;
        in->cr.c->data.len = dlen;
        in->cr.borrowed = 1;
        return 0;
    }
    in->gathered = psc_xmalloc(len ? len : 1);
    iov_gather(iov, niov, 0, in->gathered, len);
    if (svc_chunk_decode(in->gathered, len, &in->cr)) {
        in->cr.c = NULL;
        return -1;
    }
    in->one.base = in->cr.c->data.data;
    in->one.len = in->cr.c->data.len;
    in->seg = &in->one;
    in->nseg = in->one.len ? 1 : 0;
    return 0;
}

const void *svc_chunk_in_data(chunk_in_t *in)
{
    if (in->nseg <= 1) return in->nseg ? in->seg[0].base : NULL;
    size_t len = in->cr.c->data.len;
    uint8_t *buf = psc_xmalloc(len);
    iov_gather(in->seg, in->nseg, 0, buf, len);
    free(in->gathered);
    in->gathered = buf;
    in->one.base = buf;
    in->one.len = len;
    in->seg = &in->one;
    in->nseg = 1;
    return buf;
}

void svc_chunk_in_free(chunk_in_t *in)
{
    if (in->cr.c) svc_chunk_free(&in->cr);
    free(in->gathered);
}

int svc_encoding_check(const Psc__Chunk *c, char *err, size_t errlen)
{
    if (c->encoding == PSC_ENC_FLOAT32) return 0;
    if (c->encoding != PSC_ENC_BFLOAT16)
        return psc_seterr(err, errlen, PSC_EINVAL, "%s: unknown encoding %u (0 float32, 1 bfloat16)", c->name,
                          c->encoding);
    if (c->data.len % 2 || c->data.len > PSC_CHUNK_BYTES / 2)
        return psc_seterr(err, errlen, PSC_EINVAL,
                          "%s: bfloat16 data of %zu bytes (must be even and at most half the %zu-byte chunk)",
                          c->name, c->data.len, PSC_CHUNK_BYTES);
    return 0;
}

int svc_chunk_in_widen(ps_service_t *svc, psc_rpc_call_t *call, chunk_in_t *in)
{
    Psc__Chunk *c = in->cr.c;
    char err[512];
    if (svc_encoding_check(c, err, sizeof err)) {
        svc_reject(svc, call, PSC_EINVAL, "%s", err);
        return -1;
    }
    if (c->encoding == PSC_ENC_FLOAT32) return 0;
    size_t n = c->data.len / 2; /* at most a chunk (svc_encoding_check) */
    float *wide = widen_buffer();
    psc_bf16_widen_iov(in->seg, in->nseg, wide, n);
    in->one.base = wide;
    in->one.len = n * sizeof(float);
    in->seg = &in->one;
    in->nseg = n ? 1 : 0;
    c->data.len = n * sizeof(float);
    return 0;
}
