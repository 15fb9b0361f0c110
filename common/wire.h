/* wire.h — constants and pure helpers of the tensor wire format.
 *
 * A tensor travels as chunks of at most PSC_CHUNK_BYTES payload bytes; chunk k
 * covers bytes [k*PSC_CHUNK_BYTES, min((k+1)*PSC_CHUNK_BYTES, total)). Chunk
 * boundaries are fixed by this constant so that every client and server agree on
 * them (the PS keeps per-chunk optimizer step counts). A message is the chunk plus
 * a small header, so every message stays under PSC_MAX_MESSAGE_BYTES.
 */
#ifndef PSC_WIRE_H
#define PSC_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define PSC_CHUNK_BYTES ((size_t)2 << 20)          /* 2 MiB of tensor payload per message */
#define PSC_MAX_MESSAGE_BYTES ((size_t)8 << 20)   /* receive limit on every channel and server */
/* Batch calls (psc.ParameterServer/Batch): tensors of at most PSC_BATCH_TENSOR_BYTES
 * travel together, at most PSC_BATCH_BYTES of tensor data a call, so a batch
 * request or reply stays under the message limit like a chunk does. */
#define PSC_BATCH_TENSOR_BYTES ((size_t)256 << 10)
#define PSC_BATCH_BYTES PSC_CHUNK_BYTES
#define PSC_BATCH_MAX_ITEMS 4096
/* Replica ranks a PS keeps track of (WorkerDone, Step.replica_step, sync's
 * total_num_replicas) and that Status reports in full: 0..PSC_MAX_REPLICAS-1. */
#define PSC_MAX_REPLICAS 4096

/* Encodings of a pushed chunk's data (Chunk.encoding). Offsets, totals and
 * chunk boundaries always count float32 bytes; a bfloat16 chunk's data holds
 * half as many bytes, the upper 16 bits of each float32, rounded to nearest
 * even (common/bf16.h). Pulls and replies are always float32. */
#define PSC_ENC_FLOAT32 0
#define PSC_ENC_BFLOAT16 1

/* Number of chunks of a tensor of `total` bytes (0 bytes -> 1 empty chunk). */
static inline size_t psc_chunk_count(uint64_t total)
{
    return total == 0 ? 1 : (size_t)((total + PSC_CHUNK_BYTES - 1) / PSC_CHUNK_BYTES);
}
/* Byte offset and length of chunk k. */
static inline uint64_t psc_chunk_offset(size_t k) { return (uint64_t)k * PSC_CHUNK_BYTES; }
static inline size_t psc_chunk_len(uint64_t total, size_t k)
{
    uint64_t off = psc_chunk_offset(k);
    if (off >= total) return 0;
    uint64_t rest = total - off;
    return rest < PSC_CHUNK_BYTES ? (size_t)rest : PSC_CHUNK_BYTES;
}
/* 1 if (offset, len) is exactly chunk boundaries of a tensor of `total` bytes. */
static inline int psc_chunk_valid(uint64_t total, uint64_t offset, uint64_t len)
{
    if (offset % PSC_CHUNK_BYTES) return 0;
    if (total == 0) return offset == 0 && len == 0;
    if (offset >= total) return 0;
    return len == psc_chunk_len(total, (size_t)(offset / PSC_CHUNK_BYTES));
}

/* Method paths of the psc.ParameterServer service (proto/psc.proto). */
#define PSC_M_CREATE "/psc.ParameterServer/Create"
#define PSC_M_ASSIGN "/psc.ParameterServer/Assign"
#define PSC_M_READY "/psc.ParameterServer/Ready"
#define PSC_M_PULL "/psc.ParameterServer/Pull"
#define PSC_M_PUSH "/psc.ParameterServer/Push"
#define PSC_M_PUSH_PULL "/psc.ParameterServer/PushPull"
#define PSC_M_STEP "/psc.ParameterServer/Step"
#define PSC_M_BATCH "/psc.ParameterServer/Batch"
#define PSC_M_WORKER_DONE "/psc.ParameterServer/WorkerDone"
#define PSC_M_STATUS "/psc.ParameterServer/Status"
#define PSC_M_SHUTDOWN "/psc.ParameterServer/Shutdown"
#define PSC_M_SAVE "/psc.ParameterServer/Save"
#define PSC_M_COMMIT "/psc.ParameterServer/Commit"
#define PSC_M_RESTORE "/psc.ParameterServer/Restore"
#define PSC_M_LIST_CKPT "/psc.ParameterServer/ListCheckpoints"
#define PSC_M_RELEASE "/psc.ParameterServer/Release"
#define PSC_M_FENCE "/psc.ParameterServer/Fence"
#define PSC_M_UNFENCE "/psc.ParameterServer/Unfence"
#define PSC_M_TABLE_ROWS "/psc.ParameterServer/TableRows"
#define PSC_M_DESCRIBE "/psc.ParameterServer/Describe"
#define PSC_M_ASSIGN_ROWS "/psc.ParameterServer/AssignRows"
#define PSC_M_STAGE "/psc.ParameterServer/Stage"
#define PSC_M_WORKER_CHECKPOINT "/psc.Worker/Checkpoint"
#define PSC_M_WORKER_SUBMIT "/psc.Worker/Submit"
#define PSC_M_WORKER_START "/psc.Worker/Start"
#define PSC_M_WORKER_CANCEL "/psc.Worker/Cancel"
#define PSC_M_WORKER_JOB_STATUS "/psc.Worker/JobStatus"
#define PSC_M_WORKER_EVAL "/psc.Worker/Eval"
#define PSC_M_WORKER_REPORT_FAILURE "/psc.Worker/ReportFailure"
#define PSC_M_WORKER_PREDICT "/psc.Worker/Predict"
#define PSC_M_HEALTH "/grpc.health.v1.Health/Check"

#endif
