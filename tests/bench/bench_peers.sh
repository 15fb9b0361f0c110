#!/usr/bin/env bash
# bench_peers.sh — psc beside PyTorch on the demo jobs (issue 21): the same model
# (deploy/jobs/mlp.json, cnn.json), initialization (psc's own weights:
# tests/bench/peers/check.sh checks them element for element), TF Adam, batch,
# sharding, shuffle and data, trained by
#   psc async     2 ps_server + 2 workers, as deploy/local_cluster.sh runs them
#                 (default flags), asynchronous;
#   psc sync      the same with "sync" R = N = 2 (mlp: deploy/jobs/mlp_sync.json);
#   torch one     one PyTorch process, the whole training set, 2x the steps;
#   torch RPC PS  torch.distributed.rpc: 1 PS process holding the weights and
#                 applying TF Adam, 2 trainers, asynchronous, one update-and-fetch
#                 rpc_sync a step, TCP on 127.0.0.1;
#   torch DDP     DistributedDataParallel, gloo, 2 processes (synchronous).
# Every PyTorch process runs one thread (torch.set_num_threads(1)); psc runs
# with its defaults. The runs are interleaved: BENCH_PEERS_ROUNDS rounds of
# (psc async, torch one, torch RPC PS, psc sync, torch DDP) per job, so drift of
# the machine hits every contender alike. Each contender's number is examples/s
# summed over its trainers, each timed from just before its first step (data
# loaded, model ready, weights pulled) to the end of its last update: for psc
# the rate each worker logs ("finished N steps in S s (E examples/s)"), for the
# peers what tests/bench/peers/peers.py prints, timed the same way. Prints the
# table, the test accuracy and loss of each run's final weights (the spec's
# test set, its first BENCH_PEERS_TEST_EXAMPLES images), and the issue's targets
# as ratios of the rounds' means (each round's own ratio beside), met or not.
# A measurement: it never fails on speed (exit 1 when a run fails, 77 when
# PyTorch is missing: tests/bench/peers/setup.sh installs it).
#
# usage: tests/bench/bench_peers.sh [BUILD_DIR]
#        BENCH_PEERS_ROUNDS (2), BENCH_PEERS_JOBS ("mlp cnn"), steps per replica
#        BENCH_PEERS_MLP_STEPS (1200), BENCH_PEERS_CNN_STEPS (80),
#        BENCH_PEERS_TEST_EXAMPLES (2000), BENCH_PEERS_PYTHON (/usr/bin/python3)
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(cd "${1:-${PSC_BIN:-$here/build}}" && pwd)
py=${BENCH_PEERS_PYTHON:-/usr/bin/python3}
peers="$here/tests/bench/peers/peers.py"
rounds=${BENCH_PEERS_ROUNDS:-2}
ntest=${BENCH_PEERS_TEST_EXAMPLES:-2000}
if ! "$py" -c 'import numpy, torch' 2>/dev/null; then
    echo "bench_peers: skipped: $py cannot import torch and numpy (run tests/bench/peers/setup.sh)" >&2
    exit 77
fi
NAME=peers
source "$here/tests/bench/bench_lib.sh"

# psc JOB KIND ROUND SPEC: a local cluster (2 ps + 2 workers, default flags) trains
# SPEC; appends "JOB KIND ROUND examples/s test_accuracy test_loss" to $work/res.
psc() {
    local job=$1 kind=$2 round=$3 spec=$4 dir="$work/$1-$2-$3" e total=0 i
    if ! "$here/deploy/local_cluster.sh" --build "$bin" --job_spec "$spec" --logdir "$dir" >"$dir.log" 2>&1; then
        echo "bench_peers: psc $kind $job (round $round) failed:" >&2
        tail -n 20 "$dir.log" "$dir"/ps*.log "$dir"/worker*.log >&2
        return 1
    fi
    for i in 0 1; do
        e=$(sed -n 's/.*finished [0-9]* steps in [0-9.]* s (\([0-9]*\) examples\/s).*/\1/p' "$dir/worker$i.log")
        [ -n "$e" ] || { echo "bench_peers: no rate in $dir/worker$i.log" >&2; return 1; }
        total=$((total + e))
    done
    local acc loss
    acc=$(sed -n 's/^test accuracy: //p' "$dir/worker0.out")
    loss=$(sed -n 's/^test loss: //p' "$dir/worker0.out")
    echo "$job $kind $round $total ${acc:-?} ${loss:-?}" >>"$work/res"
}

# torch JOB KIND ROUND SPEC MODE STEPS: peers.py MODE; appends as psc() does.
torch() {
    local job=$1 kind=$2 round=$3 spec=$4 mode=$5 steps=$6 line
    if ! line=$("$py" "$peers" "$mode" "$spec" --steps "$steps" 2>"$work/$job-$kind-$round.log" | tail -n 1) ||
        [[ $line != peer* ]]; then
        echo "bench_peers: torch $kind $job (round $round) failed:" >&2
        tail -n 30 "$work/$job-$kind-$round.log" >&2
        return 1
    fi
    # peer NAME procs P steps S examples_per_sec R secs T train_loss L test_accuracy A test_loss L
    echo "$line" | awk -v j="$job" -v k="$kind" -v r="$round" '{print j, k, r, $8, $14, $16}' >>"$work/res"
}

echo "bench_peers: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) at start; psc from $bin," \
    "$("$py" -c 'import torch; print("PyTorch", torch.__version__)') one thread a process"
: >"$work/res"
steps_of() {
    case $1 in
        mlp) echo "${BENCH_PEERS_MLP_STEPS:-1200}" ;;
        cnn) echo "${BENCH_PEERS_CNN_STEPS:-80}" ;;
        *) echo "bench_peers: unknown job $1 (mlp or cnn)" >&2; return 64 ;;
    esac
}
# the job specs both sides train: JOB-async.json and JOB-sync.json (R = N = 2)
for job in ${BENCH_PEERS_JOBS:-mlp cnn}; do
    steps=$(steps_of "$job")
    src="$here/deploy/jobs/$job.json"
    sync_src=$src
    [ -f "$here/deploy/jobs/${job}_sync.json" ] && sync_src="$here/deploy/jobs/${job}_sync.json"
    "$py" "$peers" spec "$src" "$work/$job-async.json" --async --steps "$steps" --test_examples "$ntest"
    "$py" "$peers" spec "$sync_src" "$work/$job-sync.json" --sync --steps "$steps" --test_examples "$ntest"
done
for ((round = 1; round <= rounds; round++)); do
    for job in ${BENCH_PEERS_JOBS:-mlp cnn}; do
        steps=$(steps_of "$job")
        psc "$job" psc-async "$round" "$work/$job-async.json"
        torch "$job" torch-one "$round" "$work/$job-async.json" one $((2 * steps))
        torch "$job" torch-rpc "$round" "$work/$job-async.json" rpc "$steps"
        psc "$job" psc-sync "$round" "$work/$job-sync.json"
        torch "$job" torch-ddp "$round" "$work/$job-sync.json" ddp "$steps"
    done
done

printf '\nbench_peers: examples/s summed over the trainers, %d interleaved rounds; %s test images\n' "$rounds" "$ntest"
printf '(steps per replica: mlp %s, cnn %s; torch one runs twice that in one process; batch 64)\n' \
    "${BENCH_PEERS_MLP_STEPS:-1200}" "${BENCH_PEERS_CNN_STEPS:-80}"
awk -v rounds="$rounds" '
    { rate[$1 " " $2, $3] = $4; acc[$1 " " $2] = acc[$1 " " $2] " " $5; loss[$1 " " $2] = loss[$1 " " $2] " " $6
      if (!(($1 " " $2) in seen)) { seen[$1 " " $2] = 1; order[++n] = $1 " " $2 }
      if (!($1 in jseen)) { jseen[$1] = 1; jobs[++nj] = $1 } }
    function mean(k,   s, r) { s = 0; for (r = 1; r <= rounds; r++) s += rate[k, r]; return s / rounds }
    function per_round(k,   s, r) { s = ""; for (r = 1; r <= rounds; r++) s = s (r > 1 ? "/" : "") rate[k, r]; return s }
    BEGIN {
        name["psc-async"] = "psc async, 2 ps + 2 workers"; name["psc-sync"] = "psc sync R=N=2, 2 ps + 2 workers"
        name["torch-one"] = "PyTorch one process"; name["torch-rpc"] = "PyTorch RPC PS, 1 ps + 2 trainers"
        name["torch-ddp"] = "PyTorch DDP gloo, 2 processes"
    }
    END {
        printf "%-4s %-34s %8s  %-18s %-14s %s\n", "job", "contender", "mean", "each round", "test accuracy", "test loss"
        for (i = 1; i <= n; i++) {
            split(order[i], p, " ")
            printf "%-4s %-34s %8.0f  %-18s %-14s %s\n", p[1], name[p[2]], mean(order[i]), per_round(order[i]),
                substr(acc[order[i]], 2), substr(loss[order[i]], 2)
        }
        printf "\ntargets (issue 21), ratio of the means [each round]:\n"
        for (j = 1; j <= nj; j++) {
            target(jobs[j], "psc-async", "torch-rpc", 1.5, "async vs the RPC parameter server")
            target(jobs[j], "psc-sync", "torch-ddp", 1.3, "sync vs DDP")
            if (jobs[j] == "mlp") target(jobs[j], "psc-async", "torch-one", 1.0, "the cluster vs one process")
        }
    }
    function target(job, a, b, want, what,   ka, kb, r, each, x) {
        ka = job " " a; kb = job " " b
        if (!(ka in seen) || !(kb in seen)) return
        r = mean(ka) / mean(kb); each = ""
        for (x = 1; x <= rounds; x++) each = each (x > 1 ? " " : "") sprintf("%.2f", rate[ka, x] / rate[kb, x])
        printf "%-4s %-40s %5.2f [%s]  target >= %.1f: %s\n", job, what, r, each, want, (r >= want ? "met" : "not met")
    }' "$work/res"
echo "bench_peers: load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
