#!/usr/bin/env bash
# local_cluster.sh — runs a real psc cluster on 127.0.0.1 and trains one job:
# N ps_server + M worker processes (worker 0 is the chief), ports picked free,
# TF_CONFIG set per process exactly as on a real cluster. The chief's progress
# goes to this terminal, every process's log to --logdir. At the end the chief
# prints "test accuracy: A" and stops the ps_servers; the script waits for every
# process it started, kills any left over, and exits with the chief's status.
# Each ps_server keeps its checkpoints in --logdir/ckpt/psI.
#
# usage: deploy/local_cluster.sh [--build DIR] [--job_spec FILE] [--ps N] [--workers M]
#                                [--logdir DIR] [-- extra worker flags...]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build="$here/build"
job_spec="$here/deploy/jobs/mlp.json"
nps=2
nworkers=2
logdir=""
extra=()
while [ $# -gt 0 ]; do
    case "$1" in
        --build) build=$2; shift 2 ;;
        --job_spec) job_spec=$2; shift 2 ;;
        --ps) nps=$2; shift 2 ;;
        --workers) nworkers=$2; shift 2 ;;
        --logdir) logdir=$2; shift 2 ;;
        --) shift; extra=("$@"); break ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
        *) echo "local_cluster.sh: unknown option $1 (see --help)" >&2; exit 64 ;;
    esac
done
[ -x "$build/ps_server" ] && [ -x "$build/worker" ] || { echo "local_cluster.sh: no binaries in $build (run make build)" >&2; exit 69; }
[ -n "$logdir" ] || logdir=$(mktemp -d /tmp/psc-cluster.XXXXXX)
mkdir -p "$logdir"

mapfile -t ports < <("$build/psc_free_port" $((nps + nworkers)))
join() { local IFS=,; echo "$*"; }
ps_addrs=(); worker_addrs=()
for ((i = 0; i < nps; i++)); do ps_addrs+=("\"127.0.0.1:${ports[i]}\""); done
for ((i = 0; i < nworkers; i++)); do worker_addrs+=("\"127.0.0.1:${ports[nps + i]}\""); done
cluster="{\"ps\": [$(join "${ps_addrs[@]}")], \"worker\": [$(join "${worker_addrs[@]}")]}"
tf_config() { echo "{\"cluster\": $cluster, \"task\": {\"type\": \"$1\", \"index\": $2}}"; }

pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    sleep 0.5
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
}
trap cleanup EXIT INT TERM

echo "cluster: $cluster" >&2
echo "logs: $logdir" >&2
for ((i = 0; i < nps; i++)); do
    TF_CONFIG=$(tf_config ps $i) "$build/ps_server" --checkpoint_dir "$logdir/ckpt/ps$i" >"$logdir/ps$i.log" 2>&1 &
    pids+=($!)
done
for ((i = 0; i < nps; i++)); do
    "$build/psc_health" "127.0.0.1:${ports[i]}" 20000 || { cat "$logdir/ps$i.log" >&2; exit 69; }
done
for ((i = 1; i < nworkers; i++)); do
    TF_CONFIG=$(tf_config worker $i) "$build/worker" --job_spec "$job_spec" "${extra[@]}" >"$logdir/worker$i.out" 2>"$logdir/worker$i.log" &
    pids+=($!)
done
set +e
TF_CONFIG=$(tf_config worker 0) "$build/worker" --job_spec "$job_spec" "${extra[@]}" \
    2> >(tee "$logdir/worker0.log" >&2) | tee "$logdir/worker0.out"
rc=${PIPESTATUS[0]}
set -e
# The chief stopped the ps_servers; give every process a moment to exit.
for p in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
done
exit "$rc"
