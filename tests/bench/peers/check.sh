#!/usr/bin/env bash
# check.sh — the PyTorch peers' own checks (tests/bench/peers/check.py) against a
# real psc cluster: for each demo job, 1 ps_server + 1 worker on 127.0.0.1 (the
# worker sleeps in its first step, --debug_step_delay_ms, so nothing has been
# pushed yet), psc_dump pulls the weights the chief initialized, and check.py
# compares the peers' initialization with them element for element, then checks
# the model's forward against a numpy forward in psc's layout, TF Adam's first
# step and that a few steps learn. Then the same training: CHECK_STEPS (5) steps
# by psc (1 ps + 1 worker; and 2 workers in sync R = N = 2) and by the peers (one
# process; DDP over 2 processes), dropout rate 0, end at the same weights within
# CHECK_TOL (1e-5; psc_dump --restore reads psc's final checkpoint): the same
# data order, sharding, gradients and TF Adam, update for update. Not part of
# make test (it needs PyTorch: run tests/bench/peers/setup.sh first). Exit 0
# when every check holds.
#
# usage: tests/bench/peers/check.sh [BUILD_DIR]   (needs ps_server, worker,
#        psc_dump, psc_free_port, psc_health in BUILD_DIR); CHECK_STEPS,
#        CHECK_TOL; BENCH_PEERS_PYTHON
#        (default /usr/bin/python3: Debian's, which has python3-torch)
set -euo pipefail
here=$(cd "$(dirname "$0")/../../.." && pwd)
bin=$(cd "${1:-${PSC_BIN:-$here/build}}" && pwd)
py=${BENCH_PEERS_PYTHON:-/usr/bin/python3}
NAME="peers-check"
source "$here/tests/bench/bench_lib.sh"

steps=${CHECK_STEPS:-5}
tol=${CHECK_TOL:-1e-5}

# trained_slab SPEC NWORKERS OUT: psc trains SPEC (1 ps + NWORKERS workers, as
# deploy/local_cluster.sh runs them); OUT gets its final checkpoint's weights.
trained_slab() {
    local spec=$1 nw=$2 out=$3 dir port cl ps i rc=0
    dir=$(mktemp -d "$work/cluster.XXXXXX")
    "$here/deploy/local_cluster.sh" --build "$bin" --job_spec "$spec" --ps 1 --workers "$nw" --logdir "$dir" \
        >"$dir/run.log" 2>&1 || { cat "$dir/run.log" >&2; return 1; }
    port=$("$bin/psc_free_port" 1)
    cl="{\"ps\": [\"127.0.0.1:$port\"], \"worker\": ["
    for ((i = 0; i < nw; i++)); do cl+="$([ $i = 0 ] || echo ", ")\"127.0.0.1:$((i + 1))\""; done
    cl+="]}"
    TF_CONFIG="{\"cluster\": $cl, \"task\": {\"type\": \"ps\", \"index\": 0}}" "$bin/ps_server" \
        --checkpoint_dir "$dir/ckpt/ps0" >"$dir/ps-restore.log" 2>&1 &
    ps=$!
    pids+=("$ps")
    "$bin/psc_health" "127.0.0.1:$port" 20000 && "$bin/psc_dump" --restore "$spec" "$cl" "$out" >/dev/null \
        2>"$dir/dump.log" || rc=1
    kill "$ps" 2>/dev/null || true
    wait "$ps" 2>/dev/null || true
    [ $rc = 0 ] || cat "$dir/ps-restore.log" "$dir/dump.log" >&2
    return $rc
}

# same NAME PSC_SLAB PEER_SLAB: the two slabs agree within tol
same() {
    local d
    d=$("$bin/psc_dump" --diff "$2" "$3" | sed -n 's/^max_abs_diff \([^ ]*\) .*/\1/p')
    if [ -n "$d" ] && awk -v d="$d" -v t="$tol" 'BEGIN {exit !(d <= t)}'; then
        printf 'check %-10s ok    %s steps: psc and the peer end at the same weights, max |diff| %s\n' "$1" "$steps" "$d"
    else
        printf 'check %-10s FAIL  %s steps: max |diff| %s > %s\n' "$1" "$steps" "${d:-?}" "$tol"
        return 1
    fi
}

rc=0
for job in mlp cnn; do
    spec="$here/deploy/jobs/$job.json"
    mapfile -t ports < <("$bin/psc_free_port" 2)
    cluster="{\"ps\": [\"127.0.0.1:${ports[0]}\"], \"worker\": [\"127.0.0.1:${ports[1]}\"]}"
    TF_CONFIG="{\"cluster\": $cluster, \"task\": {\"type\": \"ps\", \"index\": 0}}" "$bin/ps_server" \
        >"$work/$job-ps.log" 2>&1 &
    ps=$!
    pids+=("$ps")
    "$bin/psc_health" "127.0.0.1:${ports[0]}" 20000 || { cat "$work/$job-ps.log" >&2; exit 1; }
    TF_CONFIG="{\"cluster\": $cluster, \"task\": {\"type\": \"worker\", \"index\": 0}}" "$bin/worker" \
        --job_spec "$spec" --debug_step_delay_ms 60000 >"$work/$job-worker.out" 2>"$work/$job-worker.log" &
    w=$!
    pids+=("$w")
    # the chief initializes the variables, pulls them once and sleeps in its first step
    got=0
    for _ in $(seq 300); do
        if grep -q "training on" "$work/$job-worker.log" &&
            "$bin/psc_dump" "$spec" "$cluster" "$work/$job.slab" >/dev/null 2>"$work/$job-dump.log"; then
            got=1
            break
        fi
        kill -0 "$w" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$w" 2>/dev/null || true # it sleeps in its step: SIGTERM would wait for it
    kill "$ps" 2>/dev/null || true
    wait "$w" "$ps" 2>/dev/null || true
    if [ $got = 0 ]; then
        echo "check.sh: could not dump $job's initial weights from psc:" >&2
        cat "$work/$job-ps.log" "$work/$job-worker.log" "$work/$job-dump.log" >&2
        exit 1
    fi
    echo "check.sh: $job.json (psc's initial weights from psc_dump)"
    "$py" "$here/tests/bench/peers/peers.py" check "$spec" --slab "$work/$job.slab" || rc=1

    peers="$here/tests/bench/peers/peers.py"
    sync_src=$spec
    [ -f "$here/deploy/jobs/${job}_sync.json" ] && sync_src="$here/deploy/jobs/${job}_sync.json"
    "$py" "$peers" spec "$spec" "$work/$job-a.json" --async --no_dropout --steps "$steps" --test_examples 100
    "$py" "$peers" spec "$sync_src" "$work/$job-s.json" --sync --no_dropout --steps "$steps" --test_examples 100
    trained_slab "$work/$job-a.json" 1 "$work/$job-psc1.slab" || { rc=1; continue; }
    "$py" "$peers" one "$work/$job-a.json" --save "$work/$job-one.slab" >/dev/null || { rc=1; continue; }
    same "one" "$work/$job-psc1.slab" "$work/$job-one.slab" || rc=1
    trained_slab "$work/$job-s.json" 2 "$work/$job-psc2.slab" || { rc=1; continue; }
    "$py" "$peers" ddp "$work/$job-s.json" --save "$work/$job-ddp.slab" >/dev/null 2>"$work/$job-ddp.log" ||
        { cat "$work/$job-ddp.log" >&2; rc=1; continue; }
    same "ddp" "$work/$job-psc2.slab" "$work/$job-ddp.slab" || rc=1
done
[ $rc = 0 ] && echo "check.sh: all checks hold" || echo "check.sh: FAILED" >&2
exit $rc
