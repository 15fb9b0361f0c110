#!/usr/bin/env bash
# bench_ctr_peers.sh — psc beside PyTorch on the recommendation job (issue 32
# item 5): deploy/jobs/ctr.json (a DLRM with a wide part: one 10^8-row table of
# dim 8 with lazy Adam, one 10^8-row wide table with FTRL, Adam for the MLPs,
# batch 256, one epoch) on SYNTHETIC Criteo data that psc_gen_ctr writes once
# (BENCH_CTR_PEERS_ROWS training rows, default 600000, in 2 gzip files, and
# BENCH_CTR_PEERS_TEST_ROWS test rows, default 100000; --seed 1), trained by
#   psc 2+2      2 ps_server + 2 workers on 127.0.0.1, default flags (as
#                bench_ctr.sh's (b): no checkpoints), each worker on its file;
#   psc 1+1      1 ps_server + 1 worker, both files;
#   torch N      tests/bench/peers/ctr_peer.py: one PyTorch process with
#                torch.set_num_threads(N), N in BENCH_CTR_PEERS_THREADS ("1 2"),
#                both files in psc's order: the same features, hashing, initial
#                rows and weights, model and optimizers (ctr_check.sh checks it
#                against psc update for update). N also bounds OpenBLAS's
#                threads (ctr_peer.py), and OMP_WAIT_POLICY=PASSIVE
#                (BENCH_CTR_PEERS_OMP_WAIT; empty: libgomp's default spinning):
#                spinning threads on 2 shared cores ran up to 10x slower;
# and, for context, psc's tower alone (bench_ctr_tower SPEC 5 1: the worker's
# input pipeline and CTR tower in one process, 1 BLAS thread, no PS, no update).
# BENCH_CTR_PEERS_ROUNDS (2) interleaved rounds of (psc 2+2, psc 1+1, torch 1,
# torch 2, tower), so drift of the machine hits every contender alike. Each
# run's examples/s is timed from its first step to its last update (psc: the
# rate each worker logs, summed; PyTorch: after the files are parsed and the
# tables built, which it prints apart as load_secs); every full run's test AUC
# is the final model's on the whole test file (psc: the chief's "test AUC";
# PyTorch: the same exact AUC, ctrdata.auc). Prints the table, PyTorch's best
# one-process run (the thread count with the best mean), and the target: psc
# 2+2 summed >= 4.0x that, as a ratio of the means (each round's beside).
# A measurement: it never fails on speed (exit 1 when a run fails, 77 when
# PyTorch is missing: tests/bench/peers/setup.sh installs it).
#
# usage: tests/bench/bench_ctr_peers.sh [BUILD_DIR]
#        BENCH_CTR_PEERS_ROWS (600000), BENCH_CTR_PEERS_TEST_ROWS (100000),
#        BENCH_CTR_PEERS_ROUNDS (2), BENCH_CTR_PEERS_THREADS ("1 2"),
#        BENCH_CTR_PEERS_OMP_WAIT (PASSIVE), BENCH_PEERS_PYTHON (/usr/bin/python3)
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(cd "${1:-${PSC_BIN:-$here/build}}" && pwd)
py=${BENCH_PEERS_PYTHON:-/usr/bin/python3}
peer="$here/tests/bench/peers/ctr_peer.py"
rows=${BENCH_CTR_PEERS_ROWS:-600000}
test_rows=${BENCH_CTR_PEERS_TEST_ROWS:-100000}
rounds=${BENCH_CTR_PEERS_ROUNDS:-2}
threads=${BENCH_CTR_PEERS_THREADS:-1 2}
omp_wait=${BENCH_CTR_PEERS_OMP_WAIT-PASSIVE}
if ! "$py" -c 'import numpy, torch' 2>/dev/null; then
    echo "bench_ctr_peers: skipped: $py cannot import torch and numpy (run tests/bench/peers/setup.sh)" >&2
    exit 77
fi
NAME=ctr-peers
source "$here/tests/bench/bench_lib.sh"

# cluster KIND ROUND NPS NW: NPS ps_servers + NW workers train the spec; appends
# "KIND ROUND examples/s test_auc each-worker" to $work/res.
cluster() {
    local kind=$1 round=$2 nps=$3 nw=$4 dir="$work/$1-$2" i ports ps_list="" w_list="" sep=""
    mkdir -p "$dir"
    mapfile -t ports < <("$bin/psc_free_port" $((nps + nw)))
    for ((i = 0; i < nps; i++)); do ps_list+="$sep\"127.0.0.1:${ports[i]}\""; sep=", "; done
    sep=""
    for ((i = 0; i < nw; i++)); do w_list+="$sep\"127.0.0.1:${ports[nps + i]}\""; sep=", "; done
    local tf="{\"cluster\": {\"ps\": [$ps_list], \"worker\": [$w_list]}, \"task\": "
    local pspids=() wpids=() p rc=0
    for ((i = 0; i < nps; i++)); do
        TF_CONFIG="$tf{\"type\": \"ps\", \"index\": $i}}" "$bin/ps_server" >"$dir/ps$i.log" 2>&1 &
        pspids+=($!)
        pids+=($!)
    done
    for ((i = 0; i < nps; i++)); do
        "$bin/psc_health" "127.0.0.1:${ports[i]}" 20000 || { cat "$dir/ps$i.log" >&2; return 1; }
    done
    for ((i = 0; i < nw; i++)); do
        TF_CONFIG="$tf{\"type\": \"worker\", \"index\": $i}}" "$bin/worker" --job_spec "$work/ctr.json" \
            --log_every_secs 60 >"$dir/worker$i.out" 2>"$dir/worker$i.log" &
        wpids+=($!)
        pids+=($!)
    done
    for p in "${wpids[@]}"; do wait "$p" || rc=1; done
    # a ps_server leaves when the chief ends the job; after a failure nobody does
    if [ $rc != 0 ]; then for p in "${pspids[@]}"; do kill "$p" 2>/dev/null || true; done; fi
    for p in "${pspids[@]}"; do wait "$p" || true; done
    local total=0 each="" e auc
    for ((i = 0; i < nw; i++)); do
        e=$(sed -n 's/.*finished [0-9]* steps in [0-9.]* s (\([0-9]*\) examples\/s).*/\1/p' "$dir/worker$i.log")
        if [ $rc != 0 ] || [ -z "$e" ]; then
            echo "bench_ctr_peers: psc $kind (round $round) failed:" >&2
            tail -n 20 "$dir"/ps*.log "$dir/worker$i.log" >&2
            return 1
        fi
        total=$((total + e))
        each+="${each:+/}$e"
    done
    auc=$(sed -n 's/^test AUC: //p' "$dir/worker0.out")
    echo "$kind $round $total ${auc:-?} $each" >>"$work/res"
}

# torch THREADS ROUND: one PyTorch process; appends as cluster() does.
torch_run() {
    local n=$1 round=$2 line log="$work/torch$1-$2.log"
    local env=()
    [ -z "$omp_wait" ] || env=(env OMP_WAIT_POLICY="$omp_wait")
    if ! line=$("${env[@]}" "$py" "$peer" one "$work/ctr.json" --threads "$n" --cache "$work/cache" 2>"$log" |
        tail -n 1) ||
        [[ $line != peer* ]]; then
        echo "bench_ctr_peers: torch $n thread(s) (round $round) failed:" >&2
        tail -n 30 "$log" >&2
        return 1
    fi
    # peer ctr-one threads T steps S examples_per_sec R secs T train_loss L test_auc A test_log_loss L load_secs S
    echo "$line" | awk -v k="torch$n" -v r="$round" '{print k, r, $8, $14, "load_" $18 "_s"}' >>"$work/res"
}

# tower ROUND: bench_ctr_tower's examples/s (no AUC: it trains no model)
tower() {
    local line e
    line=$("$bin/bench_ctr_tower" "$work/ctr.json" 5 1 2>"$work/tower.log") ||
        { cat "$work/tower.log" >&2; echo "bench_ctr_peers: bench_ctr_tower failed" >&2; return 1; }
    e=$(echo "$line" | sed -n 's/.* \([0-9]*\) examples\/s .*/\1/p')
    [ -n "$e" ] || { echo "bench_ctr_peers: no rate from bench_ctr_tower: $line" >&2; return 1; }
    echo "tower $1 $e - -" >>"$work/res"
}

echo "bench_ctr_peers: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) at start; psc from $bin," \
    "$("$py" -c 'import torch; print("PyTorch", torch.__version__)')"
"$bin/psc_gen_ctr" --out "$work/data" --train_rows "$rows" --test_rows "$test_rows" --files 2 --gzip --seed 1 \
    >"$work/gen.out" 2>&1 || { cat "$work/gen.out" >&2; echo "bench_ctr_peers: psc_gen_ctr failed" >&2; exit 1; }
planted=$(sed -n 's/^planted model AUC on the test set: //p' "$work/gen.out")
sed "s#@DATA@#$work/data#g" "$here/deploy/jobs/ctr.json" >"$work/ctr.json"
# PyTorch parses the files once (not timed; each run then loads the parsed arrays)
"$py" "$peer" prep "$work/ctr.json" --cache "$work/cache" >&2
: >"$work/res"
for ((round = 1; round <= rounds; round++)); do
    cluster psc22 "$round" 2 2
    cluster psc11 "$round" 1 1
    for n in $threads; do torch_run "$n" "$round"; done
    tower "$round"
    echo "bench_ctr_peers: round $round done, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
done

printf '\nbench_ctr_peers: deploy/jobs/ctr.json, one epoch of %s SYNTHETIC training rows (psc_gen_ctr --seed 1, 2 gzip\n' "$rows"
printf 'files), batch 256; examples/s, %d interleaved rounds; test AUC on %s test rows (planted model: %s);\n' \
    "$rounds" "$test_rows" "${planted:-?}"
printf 'PyTorch with OMP_WAIT_POLICY=%s\n' "${omp_wait:-(unset)}"
awk -v rounds="$rounds" -v threads="$threads" '
    { rate[$1, $2] = $3; auc[$1] = auc[$1] (auc[$1] == "" ? "" : " ") $4; extra[$1] = extra[$1] (extra[$1] == "" ? "" : " ") $5
      if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 } }
    function mean(k,   s, r) { s = 0; for (r = 1; r <= rounds; r++) s += rate[k, r]; return s / rounds }
    function each(k,   s, r) { s = ""; for (r = 1; r <= rounds; r++) s = s (r > 1 ? "/" : "") rate[k, r]; return s }
    function ratios(a, b,   s, r) { s = ""; for (r = 1; r <= rounds; r++) s = s (r > 1 ? " " : "") sprintf("%.2f", rate[a, r] / rate[b, r]); return s }
    BEGIN {
        name["psc22"] = "psc 2 ps + 2 workers, summed"; name["psc11"] = "psc 1 ps + 1 worker"
        name["tower"] = "psc tower alone (bench_ctr_tower, context)"
    }
    END {
        printf "%-44s %8s  %-16s %-14s %s\n", "run", "mean", "each round", "test AUC", "notes"
        for (i = 1; i <= n; i++) {
            k = order[i]
            label = (k in name) ? name[k] : sprintf("PyTorch one process, %s thread(s)", substr(k, 6))
            note = extra[k]
            gsub("_", " ", note)
            if (k == "psc22") note = "per worker " note
            if (k == "psc11") note = ""
            if (k == "tower") note = "1 BLAS thread, no PS, no update"
            if (k ~ /^torch/) note = "not timed: " note
            printf "%-44s %8.0f  %-16s %-14s %s\n", label, mean(k), each(k), (k == "tower" ? "-" : auc[k]), note
        }
        best = ""
        nt = split(threads, th, " ")
        for (t = 1; t <= nt; t++) if (best == "" || mean("torch" th[t]) > mean(best)) best = "torch" th[t]
        printf "\nPyTorch'"'"'s best one-process run: %s thread(s), %.0f examples/s\n", substr(best, 6), mean(best)
        r = mean("psc22") / mean(best)
        printf "target (issue 32): psc 2 ps + 2 workers summed >= 4.0x PyTorch'"'"'s best: %.2f [%s]  %s\n", r,
            ratios("psc22", best), (r >= 4.0 ? "met" : "not met")
        printf "psc 1 ps + 1 worker / PyTorch'"'"'s best: %.2f [%s]; psc'"'"'s tower alone / PyTorch'"'"'s best: %.2f [%s]\n",
            mean("psc11") / mean(best), ratios("psc11", best), mean("tower") / mean(best), ratios("tower", best)
    }' "$work/res"
echo "bench_ctr_peers: load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
