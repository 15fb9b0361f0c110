#!/usr/bin/env bash
# bench_step.sh — examples/s of the demo jobs (deploy/jobs/mlp.json, cnn.json):
#   (a) the tower alone: bench_step_tower, the job's model and batch, one
#       process, no RPC; measured before and after the cluster runs (these
#       VMs drift by 25-50 % within minutes), the mean is the reference;
#   (b) training for real: 1 ps_server + 1 worker on 127.0.0.1 (TF_CONFIG as
#       deploy/local_cluster.sh sets it), the job limited by "steps" to about
#       BENCH_STEP_SECS seconds at (a)'s rate; the number is the one the worker
#       logs: "finished N steps in S s (E examples/s)";
#   (b') as (b) tuned for a worker that shares 2 cores with its PS:
#       "overlap_push_pull": true (each step's push-pull runs while the next
#       step computes) and --blas_threads 1;
#   (b'') as (b') with --batch_tensor_bytes 0: every tensor its own call
#       (what Batch calls save);
#   (b16) as (b') with "gradient_dtype": "bfloat16" (pushes carry half the
#       bytes, with error feedback);
#   (c) 1 ps_server + 2 workers, each with half the steps: the sum of both
#       workers' examples/s.
# Prints (b)/(a) (the cost of the PS round trip and the input pipeline per step,
# target >= 0.8) and (c)/(a), and the peak resident memory (VmHWM, sampled)
# of the ps_server and of the workers. A measurement, not a test: it never
# fails on speed (exit 1 only when a process fails).
#
# usage: tests/bench/bench_step.sh [BUILD_DIR]
#        BENCH_STEP_SECS (default 10), BENCH_STEP_JOBS (default "mlp cnn": deploy/jobs/NAME.json)
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(cd "${1:-${PSC_BIN:-$here/build}}" && pwd)
secs=${BENCH_STEP_SECS:-10}
NAME=step
source "$here/tests/bench/bench_lib.sh"

# spec_for SRC DST STEPS: SRC with "steps", enough epochs and a small test set
# (the chief evaluates it after training; that is not part of the timing).
spec_for() {
    sed -e "0,/{/s//{\"steps\": $3, ${4:-}/" -e 's/"epochs": *[0-9]*/"epochs": 1000/' \
        -e 's/"data": *{/"data": {"test_examples": 1000, /' "$1" >"$2"
}

# train SPEC NWORKERS [WORKER_FLAGS...]: runs 1 ps_server + NWORKERS workers; prints
# "<sum of examples/s> <ps peak MiB> <largest worker peak MiB>".
train() {
    local spec=$1 nw=$2 ports cluster i
    shift 2
    mapfile -t ports < <("$bin/psc_free_port" $((1 + nw)))
    cluster="{\"ps\": [\"127.0.0.1:${ports[0]}\"], \"worker\": ["
    local sep=""
    for ((i = 0; i < nw; i++)); do
        cluster+="$sep\"127.0.0.1:${ports[1 + i]}\""
        sep=", "
    done
    cluster+="]}"
    local tf="{\"cluster\": $cluster, \"task\": "
    TF_CONFIG="$tf{\"type\": \"ps\", \"index\": 0}}" "$bin/ps_server" >"$work/ps.log" 2>&1 &
    local ps=$!
    pids+=("$ps")
    "$bin/psc_health" "127.0.0.1:${ports[0]}" 20000 || { cat "$work/ps.log" >&2; return 1; }
    local wpids=()
    for ((i = nw - 1; i >= 0; i--)); do
        TF_CONFIG="$tf{\"type\": \"worker\", \"index\": $i}}" "$bin/worker" --job_spec "$spec" \
            --log_every_secs 60 "$@" >"$work/worker$i.out" 2>"$work/worker$i.log" &
        wpids+=($!)
        pids+=($!)
    done
    # sample peak memory while the processes live (VmHWM is gone with them)
    local ps_kb=0 w_kb=0 alive=1 kb p
    while [ $alive = 1 ]; do
        alive=0
        kb=$(vmhwm_kb "$ps"); [ "$kb" -gt "$ps_kb" ] && ps_kb=$kb
        for p in "${wpids[@]}"; do
            if kill -0 "$p" 2>/dev/null; then
                alive=1
                kb=$(vmhwm_kb "$p"); [ "$kb" -gt "$w_kb" ] && w_kb=$kb
            fi
        done
        sleep 0.2
    done
    local rc=0
    for p in "${wpids[@]}"; do wait "$p" || rc=1; done
    wait "$ps" || true
    local total=0 e
    for ((i = 0; i < nw; i++)); do
        e=$(sed -n 's/.*finished [0-9]* steps in [0-9.]* s (\([0-9]*\) examples\/s).*/\1/p' "$work/worker$i.log")
        if [ $rc != 0 ] || [ -z "$e" ]; then
            echo "bench_step: worker $i of $nw failed:" >&2
            cat "$work/ps.log" "$work/worker$i.log" >&2
            return 1
        fi
        total=$((total + e))
    done
    echo "$total $((ps_kb / 1024)) $((w_kb / 1024))"
}

printf 'bench_step: examples/s of the demo jobs; (a) tower alone (bench_step_tower), (b) 1 ps + 1 worker,\n'
printf "(b') 1 ps + 1 worker with overlap_push_pull and --blas_threads 1, (b'') the same without Batch calls,\n"
printf "(b16) as (b') with gradients pushed as bfloat16,\n"
printf "(c) 1 ps + 2 workers (sum); (a) is the mean of a run before and one after the others (both shown)\n"
printf 'each run ~%s s on 127.0.0.1; peak RSS (VmHWM) of ps_server and worker\n' "$secs"
printf '%-5s %5s %17s %9s %7s %10s %8s %10s %9s %9s %9s %9s %7s %8s %10s\n' model batch "(a) tower (runs)" "(b) 1w" \
    "(b)/(a)" "(b') tuned" "(b')/(a)" "(b'') no-B" "(b'')/(a)" "(b16)" "(b16)/(a)" "(c) 2w" "(c)/(a)" "ps MiB" \
    "worker MiB"
for job in ${BENCH_STEP_JOBS:-mlp cnn}; do
    src="$here/deploy/jobs/$job.json"
    tower() {
        "$bin/bench_step_tower" "$src" 3 2>/dev/null || {
            echo "bench_step: bench_step_tower $src failed" >&2
            exit 1
        }
    }
    line=$(tower)
    a1=$(echo "$line" | sed -n 's/.*batch \([0-9]*\) on .* \([0-9]*\) examples\/s$/\2/p')
    [ -n "$a1" ] || { echo "bench_step: no rate from bench_step_tower $src" >&2; exit 1; }
    a=$a1
    batch=$(echo "$line" | sed -n 's/.*batch \([0-9]*\) on .*/\1/p')
    steps=$(awk -v a="$a" -v b="$batch" -v s="$secs" 'BEGIN {n = int(a * s / b); print n < 20 ? 20 : n}')
    spec_for "$src" "$work/$job-1.json" "$steps"
    spec_for "$src" "$work/$job-2.json" $((steps / 2))
    spec_for "$src" "$work/$job-1o.json" "$steps" '"overlap_push_pull": true, '
    spec_for "$src" "$work/$job-1h.json" "$steps" '"overlap_push_pull": true, "gradient_dtype": "bfloat16", '
    train "$work/$job-1.json" 1 >"$work/res1"
    train "$work/$job-1o.json" 1 --blas_threads 1 >"$work/res1o"
    train "$work/$job-1o.json" 1 --blas_threads 1 --batch_tensor_bytes 0 >"$work/res1n"
    train "$work/$job-1h.json" 1 --blas_threads 1 >"$work/res1h"
    train "$work/$job-2.json" 2 >"$work/res2"
    a2=$(tower | sed -n 's/.*batch \([0-9]*\) on .* \([0-9]*\) examples\/s$/\2/p')
    a=$(((a1 + a2) / 2))
    read -r b ps1 w1 <"$work/res1"
    read -r bo _ _ <"$work/res1o"
    read -r bn _ _ <"$work/res1n"
    read -r bh _ _ <"$work/res1h"
    read -r c ps2 w2 <"$work/res2"
    r() { awk -v x="$1" -v y="$a" 'BEGIN {printf "%.2f", x / y}'; }
    printf '%-5s %5s %17s %9s %7s %10s %8s %10s %9s %9s %9s %9s %7s %8s %10s\n' "$job" "$batch" "$a ($a1/$a2)" "$b" \
        "$(r "$b")" "$bo" "$(r "$bo")" "$bn" "$(r "$bn")" "$bh" "$(r "$bh")" "$c" "$(r "$c")" "$ps1/$ps2" "$w1/$w2"
done
printf '(ps and worker MiB: with 1 worker / with 2 workers; steps per run = %s s at the rate of (a))\n' "$secs"
