/* rpc_internal.h — what the server half (rpc.c) and the client half
 * (rpc_client.c) of the RPC layer share. Only those two files include it (and
 * with it gRPC's headers); the rest of psc sees rpc.h alone.
 */
#ifndef PSC_RPC_INTERNAL_H
#define PSC_RPC_INTERNAL_H

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>

#include <stddef.h>
#include <stdint.h>

/* grpc_init, with gRPC's logging routed through psc's logger first; each call
 * is paired with a grpc_shutdown. Any thread. */
void rpc_grpc_init(void);

/* Channel arguments shared by servers and channels (bounded receive size,
 * keepalive): fills the caller's args and storage (12 entries hold a server's
 * arguments, 10 a channel's).
 * Any thread. */
grpc_channel_args *rpc_make_args(grpc_channel_args *args, grpc_arg *storage, int is_server);

/* Credentials of a new channel from psc_rpc_set_security's settings; sets
 * *server_name (the TLS target name override) and *token ("Bearer ...") to heap
 * strings or NULL, which the caller frees, and *tls. Any thread. */
grpc_channel_credentials *rpc_channel_creds(char **server_name, char **token, int *tls);

/* A monotonic deadline ms milliseconds from now. */
gpr_timespec rpc_deadline_in(int ms);

/* Copies a byte buffer into one malloc'd block (the caller frees) of its first
 * total - tail_len bytes and, when tail is non-NULL and the buffer holds at
 * least tail_len bytes, its last tail_len bytes into tail. */
uint8_t *rpc_bb_copy_split(grpc_byte_buffer *bb, void *tail, size_t tail_len, size_t *len, size_t *total_out);

/* ThreadSanitizer does not see gRPC's own synchronization (Debian's libgrpc is
 * not instrumented), so a tag handed to gRPC and returned by a completion
 * queue on another thread looks like a race on everything the tag points to.
 * Mark the hand-over: rpc_tsan_release(tag) just before the tag goes to gRPC,
 * rpc_tsan_acquire(tag) when a completion queue returns it. Nothing in other
 * builds. */
#if defined(__SANITIZE_THREAD__)
#define RPC_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RPC_TSAN 1
#endif
#endif
#ifdef RPC_TSAN
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define rpc_tsan_release(tag) __tsan_release(tag)
#define rpc_tsan_acquire(tag) __tsan_acquire(tag)
#else
#define rpc_tsan_release(tag) ((void)(tag))
#define rpc_tsan_acquire(tag) ((void)(tag))
#endif

#endif
