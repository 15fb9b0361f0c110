/* rpc_status.c — gRPC status codes: their names and the one mapping between
 * them and psc's error codes (rpc.h). No gRPC here, so code that only maps
 * codes (the PS's handlers under the fuzzer's fake transport) links without
 * the transport. */
#include "rpc.h"

#include "psc.h"

static const char *const code_names[] = {
    "OK",        "CANCELLED",           "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
    "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED",
    "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
};

const char *psc_rpc_code_name(int code)
{
    if (code >= 0 && code < (int)PSC_ARRAY_LEN(code_names)) return code_names[code];
    return "UNKNOWN_CODE";
}

/* The one mapping between gRPC status codes and psc's error codes, both ways.
 * It round-trips every code a psc daemon sends (NOT_FOUND, FAILED_PRECONDITION,
 * ALREADY_EXISTS, INVALID_ARGUMENT, RESOURCE_EXHAUSTED, DATA_LOSS, INTERNAL,
 * UNAVAILABLE, DEADLINE_EXCEEDED, UNAUTHENTICATED), so a daemon that relays
 * another's refusal (the chief relaying a PS) keeps its code. */
int psc_rpc_code_errno(int code)
{
    switch (code) {
    case PSC_RPC_UNAVAILABLE: /* the server is down or restarting */
    case PSC_RPC_CANCELLED:   /* dropped by a server shutting down (see rpc.h) */
    case PSC_RPC_ABORTED: return PSC_EUNAVAILABLE;
    case PSC_RPC_DEADLINE_EXCEEDED: return PSC_ETIMEOUT;
    case PSC_RPC_FAILED_PRECONDITION: return PSC_ENOTREADY;
    case PSC_RPC_DATA_LOSS: return PSC_ECORRUPT;
    case PSC_RPC_NOT_FOUND: return PSC_ENOTFOUND;
    case PSC_RPC_ALREADY_EXISTS: return PSC_EEXISTS;
    case PSC_RPC_INVALID_ARGUMENT:
    case PSC_RPC_OUT_OF_RANGE: return PSC_EINVAL;
    case PSC_RPC_RESOURCE_EXHAUSTED: return PSC_ENOMEM;
    case PSC_RPC_INTERNAL: return PSC_EIO;
    case PSC_RPC_UNAUTHENTICATED:
    case PSC_RPC_PERMISSION_DENIED: return PSC_EPERM;
    default: return PSC_ERPC;
    }
}

int psc_rpc_status_of(int rc)
{
    switch (rc) {
    case PSC_ENOTFOUND: return PSC_RPC_NOT_FOUND;
    case PSC_ENOTREADY:
    case PSC_EUNSUPPORTED: return PSC_RPC_FAILED_PRECONDITION;
    case PSC_EEXISTS: return PSC_RPC_ALREADY_EXISTS;
    case PSC_EINVAL:
    case PSC_ECONFIG:
    case PSC_EMISMATCH: return PSC_RPC_INVALID_ARGUMENT;
    case PSC_ENOMEM: return PSC_RPC_RESOURCE_EXHAUSTED;
    case PSC_ESTALE: return PSC_RPC_ABORTED;
    case PSC_ECORRUPT: return PSC_RPC_DATA_LOSS;
    case PSC_EUNAVAILABLE: return PSC_RPC_UNAVAILABLE;
    case PSC_ETIMEOUT: return PSC_RPC_DEADLINE_EXCEEDED;
    case PSC_ECANCELLED: return PSC_RPC_CANCELLED;
    case PSC_EPERM: return PSC_RPC_UNAUTHENTICATED;
    default: return PSC_RPC_INTERNAL; /* PSC_EIO, PSC_ERPC and anything new */
    }
}
