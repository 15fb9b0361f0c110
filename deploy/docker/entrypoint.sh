#!/bin/sh
# entrypoint.sh — the entrypoint of psc's container image on Kubernetes.
#
# Derives TF_CONFIG from the pod's name, which a StatefulSet makes
# "<set>-<ordinal>" (ps-1, worker-0, ...), and the replica counts in the
# environment; then runs ps_server (ps pods) or worker (chief, worker and
# evaluator pods) with the container's args. Every task's address is
# "<set>-<i>.<service>:2222", the stable DNS name a headless Service of the same
# name as its StatefulSet gives each pod.
#
# usage: entrypoint.sh [ARGS...]           exports TF_CONFIG, runs the program with ARGS
#        entrypoint.sh --print-tf-config   prints the TF_CONFIG (one line of JSON) and exits
#
# Environment (the manifests set the counts from one ConfigMap, see deploy/k8s/):
#   PSC_NUM_PS          ps pods (the ps StatefulSet's replicas), >= 1           required
#   PSC_NUM_WORKERS     worker pods (the worker StatefulSet's replicas), >= 0    required
#   PSC_CHIEF           0 (default): worker-0 is the chief; 1: a chief StatefulSet of one pod, chief-0
#   PSC_EVALUATOR       1: an evaluator StatefulSet of one pod, evaluator-0; 0 (default): none
#   PSC_PS_NAME, PSC_WORKER_NAME, PSC_CHIEF_NAME, PSC_EVALUATOR_NAME
#                       name of each StatefulSet and of its headless Service
#                       (defaults ps, worker, chief, evaluator)
#   PSC_PORT            port of every task (default 2222)
#   PSC_DNS_SUFFIX      appended to every "<pod>.<service>" name, e.g. ".ml.svc.cluster.local"
#                       (default empty: the short name, which resolves within the namespace)
#   PSC_HOSTNAME        the pod's name (default: $HOSTNAME, else `hostname`)
#   PSC_BIN_DIR         where ps_server and worker are (default /opt/psc/bin)
#   PSC_AFTER_JOB       serve (default) or exit: what a worker pod started with --job_spec
#                       (in-cluster mode) does once its job succeeded. serve: it runs worker
#                       again without --job_spec, a standalone-mode daemon that keeps serving
#                       its health check (a StatefulSet restarts a container that exits, even
#                       with 0, and a liveness probe fails on a closed port); exit: exit 0.
#   PSC_ADDR_OVERRIDES  for tests only (the manifests never set it): "POD=HOST:PORT ..." gives
#                       those pods that address instead of their DNS name, so that the
#                       manifests' commands can run on 127.0.0.1 (tests/integration/test_k8s_pods.sh)
#
# Exit codes: those of the program; 78 (EX_CONFIG, as the programs) when the
# environment or the hostname does not describe a task, with a one-line message.
set -eu

die() {
    echo "entrypoint: $*" >&2
    exit 78
}

# is_count VALUE: a non-negative decimal integer without a leading zero.
is_count() {
    case $1 in
    '' | *[!0-9]* | 0?*) return 1 ;;
    esac
    [ "${#1}" -le 5 ]
}

# is_label VALUE: a DNS label (RFC 1123: lower-case letters, digits, '-').
is_label() {
    case $1 in
    '' | -* | *- | *[!a-z0-9-]*) return 1 ;;
    esac
    [ "${#1}" -le 63 ]
}

num_ps=${PSC_NUM_PS:-}
num_workers=${PSC_NUM_WORKERS:-}
chief=${PSC_CHIEF:-0}
evaluator=${PSC_EVALUATOR:-0}
ps_name=${PSC_PS_NAME:-ps}
worker_name=${PSC_WORKER_NAME:-worker}
chief_name=${PSC_CHIEF_NAME:-chief}
evaluator_name=${PSC_EVALUATOR_NAME:-evaluator}
port=${PSC_PORT:-2222}
suffix=${PSC_DNS_SUFFIX:-}
bin_dir=${PSC_BIN_DIR:-/opt/psc/bin}
after_job=${PSC_AFTER_JOB:-serve}
overrides=${PSC_ADDR_OVERRIDES:-}

is_count "$num_ps" && [ "$num_ps" -ge 1 ] || die "PSC_NUM_PS must be the number of ps pods (>= 1), got \"$num_ps\""
is_count "$num_workers" || die "PSC_NUM_WORKERS must be the number of worker pods (>= 0), got \"$num_workers\""
case $chief in 0 | 1) ;; *) die "PSC_CHIEF must be 0 (worker 0 is the chief) or 1 (a chief pod), got \"$chief\"" ;; esac
case $evaluator in 0 | 1) ;; *) die "PSC_EVALUATOR must be 0 or 1, got \"$evaluator\"" ;; esac
[ $((num_workers + chief)) -ge 1 ] || die "no training replica: PSC_NUM_WORKERS is 0 and PSC_CHIEF is 0"
for n in "$ps_name" "$worker_name" "$chief_name" "$evaluator_name"; do
    is_label "$n" || die "StatefulSet name \"$n\" is not a DNS label (PSC_*_NAME)"
done
is_count "$port" && [ "$port" -ge 1 ] && [ "$port" -le 65535 ] || die "PSC_PORT must be 1..65535, got \"$port\""
case $suffix in
'' | .*) case $suffix in *[!a-z0-9.-]* | *..*) die "PSC_DNS_SUFFIX \"$suffix\" is not a DNS suffix" ;; esac ;;
*) die "PSC_DNS_SUFFIX must start with a dot (\".ml.svc.cluster.local\"), got \"$suffix\"" ;;
esac
case $after_job in serve | exit) ;; *) die "PSC_AFTER_JOB must be serve or exit, got \"$after_job\"" ;; esac
for o in $overrides; do
    case $o in
    *=*:*) case ${o#*=} in *[!A-Za-z0-9.:\[\]-]*) die "PSC_ADDR_OVERRIDES: bad address in \"$o\"" ;; esac ;;
    *) die "PSC_ADDR_OVERRIDES: expected POD=HOST:PORT entries, got \"$o\"" ;;
    esac
done

# ---- this pod: <set>-<ordinal> ----
host=${PSC_HOSTNAME:-${HOSTNAME:-$(hostname)}}
host=${host%%.*} # a fully qualified name: its first label is the pod's name
set_name=${host%-*}
ordinal=${host##*-}
[ "$set_name" != "$host" ] && [ -n "$set_name" ] && is_count "$ordinal" ||
    die "hostname \"$host\" is not <statefulset>-<ordinal> (e.g. $ps_name-0, $worker_name-1): run this image as a pod of psc's StatefulSets, or set PSC_HOSTNAME"
if [ "$set_name" = "$ps_name" ]; then
    type=ps count=$num_ps
elif [ "$set_name" = "$worker_name" ]; then
    type=worker count=$num_workers
elif [ "$set_name" = "$chief_name" ] && [ "$chief" = 1 ]; then
    type=chief count=1
elif [ "$set_name" = "$evaluator_name" ] && [ "$evaluator" = 1 ]; then
    type=evaluator count=1
else
    known="$ps_name, $worker_name"
    [ "$chief" = 1 ] && known="$known, $chief_name"
    [ "$evaluator" = 1 ] && known="$known, $evaluator_name"
    die "hostname \"$host\": \"$set_name\" is not one of this cluster's StatefulSets ($known; see PSC_CHIEF, PSC_EVALUATOR, PSC_*_NAME)"
fi
[ "$ordinal" -lt "$count" ] ||
    die "hostname \"$host\": ordinal $ordinal is out of range, the cluster has $count $type pod(s) (PSC_NUM_PS / PSC_NUM_WORKERS must equal the StatefulSets' replicas)"

# ---- the cluster ----
# addr POD SERVICE: the pod's address (its override, else its DNS name).
addr() {
    for o in $overrides; do
        case $o in "$1="*) printf '%s' "${o#*=}"; return ;; esac
    done
    printf '%s.%s%s:%s' "$1" "$2" "$suffix" "$port"
}

# list SET N: the JSON array of the N pods of StatefulSet SET.
list() {
    i=0 sep=""
    printf '['
    while [ "$i" -lt "$2" ]; do
        printf '%s"%s"' "$sep" "$(addr "$1-$i" "$1")"
        sep=", " i=$((i + 1))
    done
    printf ']'
}

cluster=""
[ "$chief" = 1 ] && cluster="\"chief\": $(list "$chief_name" 1), "
[ "$num_workers" -gt 0 ] && cluster="$cluster\"worker\": $(list "$worker_name" "$num_workers"), "
cluster="$cluster\"ps\": $(list "$ps_name" "$num_ps")"
[ "$evaluator" = 1 ] && cluster="$cluster, \"evaluator\": $(list "$evaluator_name" 1)"
TF_CONFIG="{\"cluster\": {$cluster}, \"task\": {\"type\": \"$type\", \"index\": $ordinal}}"
export TF_CONFIG

if [ "${1:-}" = "--print-tf-config" ]; then
    [ $# -eq 1 ] || die "--print-tf-config takes no other argument"
    printf '%s\n' "$TF_CONFIG"
    exit 0
fi

prog=worker
[ "$type" = ps ] && prog=ps_server
[ -x "$bin_dir/$prog" ] || die "$bin_dir/$prog is not an executable (PSC_BIN_DIR)"
echo "entrypoint: $host is $type $ordinal; TF_CONFIG=$TF_CONFIG" >&2

in_cluster=0
for a in "$@"; do
    case $a in --job_spec | --job_spec=*) in_cluster=1 ;; esac
done
if [ "$prog" = ps_server ] || [ "$in_cluster" = 0 ] || [ "$after_job" = exit ]; then
    exec "$bin_dir/$prog" "$@"
fi

# In-cluster mode with PSC_AFTER_JOB=serve: the job runs as a child, this shell
# passes SIGTERM/SIGINT on to it, and once the job succeeded the pod goes on as
# a standalone-mode worker (same args without --job_spec).
"$bin_dir/$prog" "$@" &
child=$!
trap 'kill -TERM "$child" 2>/dev/null || :' TERM
trap 'kill -INT "$child" 2>/dev/null || :' INT
while :; do
    rc=0
    wait "$child" || rc=$?
    # a trapped signal interrupts wait (rc > 128) while the child runs on (or is
    # not yet reaped): wait again for its own exit status
    kill -0 "$child" 2>/dev/null || break
done
trap - TERM INT
[ "$rc" -eq 0 ] || exit "$rc"

skip=0
for a in "$@"; do
    shift
    if [ "$skip" = 1 ]; then
        skip=0
        continue
    fi
    case $a in
    --job_spec) skip=1 ;;
    --job_spec=*) ;;
    *) set -- "$@" "$a" ;;
    esac
done
echo "entrypoint: the job is done; $host goes on as a standalone-mode worker (PSC_AFTER_JOB=serve): psctl can drive it" >&2
exec "$bin_dir/$prog" "$@"
