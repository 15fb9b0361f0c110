/* fuzz_wire — libFuzzer target: every message a ps_server or worker decodes
 * from the network: the zero-copy Chunk decoder (whole and split at every
 * length) and protobuf-c unpacking of each request type. */
#include "chunk.h"
#include "psc.pb-c.h"

#include <stdint.h>
#include <string.h>

#define UNPACK(type, fn)                                  \
    do {                                                  \
        type *m = fn##__unpack(NULL, size, data);         \
        if (m) fn##__free_unpacked(m, NULL);              \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Psc__Chunk *c;
    const uint8_t *payload;
    size_t plen;
    if (psc_chunk_decode(data, size, size, &c, &payload, &plen) == 0) psc__chunk__free_unpacked(c, NULL);
    if (size > 0 && psc_chunk_decode(data, size / 2, size, &c, &payload, &plen) == 0)
        psc__chunk__free_unpacked(c, NULL);
    UNPACK(Psc__CreateRequest, psc__create_request);
    UNPACK(Psc__PullRequest, psc__pull_request);
    UNPACK(Psc__StepRequest, psc__step_request);
    UNPACK(Psc__BatchRequest, psc__batch_request);
    UNPACK(Psc__BatchReply, psc__batch_reply);
    UNPACK(Psc__StatusReply, psc__status_reply);
    UNPACK(Psc__SaveRequest, psc__save_request);
    UNPACK(Psc__RestoreRequest, psc__restore_request);
    UNPACK(Psc__ListCheckpointsReply, psc__list_checkpoints_reply);
    UNPACK(Psc__SubmitRequest, psc__submit_request);
    UNPACK(Psc__JobStatusReply, psc__job_status_reply);
    return 0;
}
