/* fuzz_wire — libFuzzer target: every message a ps_server or worker decodes
 * from the network: the zero-copy Chunk decoder (whole, split where the data
 * begins, and as a prefix) and protobuf-c unpacking of every request and reply
 * type of psc.proto (both services) and of the health check. */
#include "chunk.h"
#include "grpc/health/v1/health.pb-c.h"
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
    size_t off;
    for (size_t avail = 0; avail <= size && avail <= 600; avail += 1 + avail / 8)
        if (psc_chunk_decode_prefix(data, avail, size, &c, &off, &plen) == 0) psc__chunk__free_unpacked(c, NULL);
    UNPACK(Psc__CreateRequest, psc__create_request);
    UNPACK(Psc__CreateReply, psc__create_reply);
    UNPACK(Psc__PushReply, psc__push_reply);
    UNPACK(Psc__PullRequest, psc__pull_request);
    UNPACK(Psc__ReadyRequest, psc__ready_request);
    UNPACK(Psc__ReadyReply, psc__ready_reply);
    UNPACK(Psc__StepRequest, psc__step_request);
    UNPACK(Psc__StepReply, psc__step_reply);
    UNPACK(Psc__BatchRequest, psc__batch_request);
    UNPACK(Psc__BatchReply, psc__batch_reply);
    UNPACK(Psc__WorkerDoneRequest, psc__worker_done_request);
    UNPACK(Psc__WorkerDoneReply, psc__worker_done_reply);
    UNPACK(Psc__StatusRequest, psc__status_request);
    UNPACK(Psc__StatusReply, psc__status_reply);
    UNPACK(Psc__SaveRequest, psc__save_request);
    UNPACK(Psc__SaveReply, psc__save_reply);
    UNPACK(Psc__CommitRequest, psc__commit_request);
    UNPACK(Psc__CommitReply, psc__commit_reply);
    UNPACK(Psc__RestoreRequest, psc__restore_request);
    UNPACK(Psc__RestoreReply, psc__restore_reply);
    UNPACK(Psc__ListCheckpointsRequest, psc__list_checkpoints_request);
    UNPACK(Psc__ListCheckpointsReply, psc__list_checkpoints_reply);
    UNPACK(Psc__ShutdownRequest, psc__shutdown_request);
    UNPACK(Psc__ShutdownReply, psc__shutdown_reply);
    UNPACK(Psc__ReleaseRequest, psc__release_request);
    UNPACK(Psc__ReleaseReply, psc__release_reply);
    UNPACK(Psc__FenceRequest, psc__fence_request);
    UNPACK(Psc__FenceReply, psc__fence_reply);
    UNPACK(Psc__UnfenceRequest, psc__unfence_request);
    UNPACK(Psc__UnfenceReply, psc__unfence_reply);
    UNPACK(Psc__TableRowsRequest, psc__table_rows_request);
    UNPACK(Psc__TableRowsReply, psc__table_rows_reply);
    UNPACK(Psc__CheckpointRequest, psc__checkpoint_request);
    UNPACK(Psc__CheckpointReply, psc__checkpoint_reply);
    UNPACK(Psc__SubmitRequest, psc__submit_request);
    UNPACK(Psc__SubmitReply, psc__submit_reply);
    UNPACK(Psc__StartRequest, psc__start_request);
    UNPACK(Psc__StartReply, psc__start_reply);
    UNPACK(Psc__CancelRequest, psc__cancel_request);
    UNPACK(Psc__CancelReply, psc__cancel_reply);
    UNPACK(Psc__JobStatusRequest, psc__job_status_request);
    UNPACK(Psc__JobStatusReply, psc__job_status_reply);
    UNPACK(Psc__EvalRequest, psc__eval_request);
    UNPACK(Psc__EvalReply, psc__eval_reply);
    UNPACK(Psc__PredictRequest, psc__predict_request);
    UNPACK(Psc__PredictReply, psc__predict_reply);
    UNPACK(Grpc__Health__V1__HealthCheckRequest, grpc__health__v1__health_check_request);
    UNPACK(Grpc__Health__V1__HealthCheckResponse, grpc__health__v1__health_check_response);
    return 0;
}
