# lib.sh — shared helpers of the shell integration tests: start real ps_server
# and worker processes on free 127.0.0.1 ports with TF_CONFIG, wait on their
# health service, stop them by pid, and print every log when a test fails.
# Source it; it sets BIN, TMP and a trap that cleans up.
set -euo pipefail
BIN=${PSC_BIN:?PSC_BIN must point at the build directory}
SRC=${PSC_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
TMP=$(mktemp -d /tmp/psc-test.XXXXXX)
PIDS=()
FAILED=1
FAIL_MSG=

cleanup() {
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    if [ "$FAILED" = 1 ]; then
        for f in "$TMP"/*.log "$TMP"/*.out; do
            [ -f "$f" ] || continue
            echo "---- $f ----" >&2
            tail -n 60 "$f" >&2
        done
        [ -z "${FAIL_MSG:-}" ] || echo "FAIL (again, after the logs): $FAIL_MSG" >&2
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT

# fail MSG — the reason goes out before the logs and again after them, so that
# a CI excerpt of the output's end still names it
fail() { FAIL_MSG="$*"; echo "FAIL: $*" >&2; exit 1; }
pass() { FAILED=0; echo "PASS: $*"; }
skip() { echo "SKIP: $*"; FAILED=0; exit 77; }

# require_dataset — skips (77) where Fashion-MNIST is not installed.
require_dataset() {
    [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || skip "dataset-fashion-mnist not installed"
}

# cluster NPS NWORKERS — picks ports, sets CLUSTER (JSON) and PS_ADDR / WORKER_ADDR arrays.
cluster() {
    local nps=$1 nw=$2 i
    mapfile -t _ports < <("$BIN/psc_free_port" $((nps + nw)))
    PS_ADDR=(); WORKER_ADDR=()
    for ((i = 0; i < nps; i++)); do PS_ADDR+=("127.0.0.1:${_ports[i]}"); done
    for ((i = 0; i < nw; i++)); do WORKER_ADDR+=("127.0.0.1:${_ports[nps + i]}"); done
    local ps_json w_json
    ps_json=$(printf '"%s",' "${PS_ADDR[@]}"); w_json=$(printf '"%s",' "${WORKER_ADDR[@]}")
    CLUSTER="{\"ps\": [${ps_json%,}], \"worker\": [${w_json%,}]}"
}

tf_config() { echo "{\"cluster\": $CLUSTER, \"task\": {\"type\": \"$1\", \"index\": $2}}"; }

# start_ps I [flags...] — starts ps I in the background (log $TMP/psI.log), sets LAST_PID.
start_ps() {
    local i=$1; shift
    TF_CONFIG=$(tf_config ps "$i") "$BIN/ps_server" "$@" >"$TMP/ps$i.log" 2>&1 &
    LAST_PID=$!; PIDS+=("$LAST_PID")
}

# start_worker I JOBSPEC [flags...] — stdout $TMP/workerI.out, stderr $TMP/workerI.log.
start_worker() {
    local i=$1 spec=$2; shift 2
    TF_CONFIG=$(tf_config worker "$i") "$BIN/worker" --job_spec "$spec" --log_every_secs 0.5 "$@" \
        >"$TMP/worker$i.out" 2>"$TMP/worker$i.log" &
    LAST_PID=$!; PIDS+=("$LAST_PID")
}

wait_healthy() { "$BIN/psc_health" "$1" "${2:-20000}" || fail "$1 not serving"; }

# wait_exit PID SECS — waits for PID to exit within SECS; sets EXIT_CODE.
wait_exit() {
    local pid=$1 secs=$2 t=0
    while kill -0 "$pid" 2>/dev/null; do
        sleep 0.2; t=$((t + 1))
        [ $t -gt $((secs * 5)) ] && fail "process $pid still running after ${secs}s"
    done
    set +e; wait "$pid"; EXIT_CODE=$?; set -e
}

# train_in_cluster NPS NW SPEC — a job in in-cluster mode on a new cluster (cluster, start_ps,
# start_worker: logs $TMP/psI.log, $TMP/workerI.log): every worker must exit 0 within 120 s,
# then every ps within 20 s (the chief ends them), or the test fails naming the one.
train_in_cluster() {
    local nps=$1 nw=$2 spec=$3 i
    local ps_pids=() w_pids=()
    cluster "$nps" "$nw"
    for ((i = 0; i < nps; i++)); do start_ps "$i"; ps_pids+=("$LAST_PID"); done
    for ((i = 0; i < nps; i++)); do wait_healthy "${PS_ADDR[i]}"; done
    for ((i = 0; i < nw; i++)); do start_worker "$i" "$spec"; w_pids+=("$LAST_PID"); done
    for ((i = 0; i < nw; i++)); do
        wait_exit "${w_pids[i]}" 120
        [ "$EXIT_CODE" = 0 ] || fail "worker $i exited $EXIT_CODE: $(tail -3 "$TMP/worker$i.log")"
    done
    for ((i = 0; i < nps; i++)); do
        wait_exit "${ps_pids[i]}" 20
        [ "$EXIT_CODE" = 0 ] || fail "ps $i exited $EXIT_CODE"
    done
}

# small_spec FILE EPOCHS SEED [EXTRA] — the tests' small job: a 784-32-10 MLP with Adam on
# 6,000 training and 1,000 test images, batch 32 per replica. EXTRA is spliced in as more
# top-level keys, e.g. ', "checkpoint": {"every_steps": 40}'.
small_spec() {
    cat >"$1" <<JSON
{"model": {"input_shape": [28, 28, 1],
           "layers": [{"type": "flatten"}, {"type": "dense", "units": 32, "activation": "relu"},
                      {"type": "dense", "units": 10}]},
 "optimizer": {"name": "adam", "learning_rate": 0.002},
 "data": {"train_examples": 6000, "test_examples": 1000},
 "batch_size_per_replica": 32, "epochs": $2, "seed": $3 ${4:-}}
JSON
}

# small_tmpfs SIZE — mounts a tmpfs of SIZE (e.g. 192k, 16m) at $TMP/small, or skips (77) where
# that is not permitted (needs root); on exit the daemons go first (a ps_server holds its store
# open there), then the tmpfs, then the rest.
small_tmpfs() {
    mkdir -p "$TMP/small"
    mount -t tmpfs -o "size=$1" tmpfs "$TMP/small" 2>/dev/null || skip "cannot mount a tmpfs (needs root)"
    trap 'umount_small; cleanup' EXIT
}
umount_small() {
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    umount "$TMP/small" 2>/dev/null || umount -l "$TMP/small" 2>/dev/null || true
}
