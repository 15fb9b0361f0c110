#!/usr/bin/env bash
# bench_ctr.sh — examples/s of the demo-ctr model (deploy/jobs/ctr.json: a
# DLRM-style model with a wide part, two tables declared with 10^8 rows) on
# synthetic Criteo data (psc_gen_ctr: BENCH_CTR_ROWS training rows, default
# 600000, 2 gzip files, --seed 1, generated once into a temp dir):
#   (a)  the tower alone: bench_ctr_tower, the worker's input pipeline and CTR
#        tower in one process, no PS, no RPC (the rows' initial values are
#        computed and not counted); measured before and after (b1) and (b)
#        (these VMs drift by 25-50 % within minutes), the mean is the reference;
#   (b1) training for real: 1 ps_server + 1 worker on 127.0.0.1, the job
#        limited by "steps" to about BENCH_CTR_SECS seconds at (a')'s rate (every
#        1 + 1 run the same steps: the first epoch, which creates the rows, weighs
#        alike in each); the
#        number is the one the worker logs: "finished N steps in S s (E
#        examples/s)". (b1)/(a) is the like-for-like ratio: one worker against
#        one tower (target >= 0.8, as for the dense jobs);
#   (b1p) as (b1) with "prefetch_rows": 1 (a step waits only for the rows the
#        next batch shares, the rest of its exchange runs beside the next step:
#        ctr_prefetch.h); (b1) takes the default, the serial path, since its PS
#        runs on the worker's host;
#   (p0), (p1) as (b1) with the ps_server pinned to CPU 1 and the worker to
#        CPU 0 (taskset), "prefetch_rows" 0 and 1: a PS with a core of its own,
#        as on a host of its own, where the default is 1;
#   (b1') as (b1) with the worker's --blas_threads 1 (OpenBLAS's idle threads
#        spin on sched_yield, on cores the PS needs), against (a') the tower
#        alone with 1 BLAS thread (also measured before and after);
#   (b)  the demo's cluster: 2 ps_server + 2 workers, each worker on its own
#        training file; the per-worker mean, the sum, and the mean over (a).
#        On a machine with fewer cores than processes (the 2-core development
#        VM runs 4 processes here) (b)/(a) mostly says how the cores are shared;
#   (bp) as (b) with "prefetch_rows": 1;
#   (c)  (b1) as the declared rows of both tables ("emb" and "wide") grow:
#        10^5 .. 10^9, run up and then down again (the mean of the two cancels
#        a steady drift; both shown); each size's examples/s and its ratio to
#        the 10^5 runs (target: flat within 20 %).
# Prints the peak resident memory (VmHWM, sampled) of the ps_servers and the
# workers, and the CPU time (user + sys) per step of each side: less moved by
# other load on the machine than examples/s, and what (c) should keep flat on
# the PS side. BENCH_CTR_PERF=DIR: also `perf record -g` a worker and a ps_server of
# (b1) for 4 s mid-run, their top symbols in DIR/{worker,ps}.txt, the profiles in
# DIR/{worker,ps}.data (BENCH_CTR_PERF_CG: perf's call-graph option instead of -g, e.g.
# "--call-graph dwarf,16384": the binaries keep no frame pointers).
# A measurement, not a test: it never fails on speed (exit 1 only when a
# process fails).
#
# usage: tests/bench/bench_ctr.sh [BUILD_DIR]
#        BENCH_CTR_SECS (default 10), BENCH_CTR_ROWS (default 600000), BENCH_CTR_PERF (unset), BENCH_CTR_PERF_CG,
#        BENCH_CTR_SIZES (default "100000 1000000 10000000 100000000 1000000000": (c)'s sizes; "" skips (c))
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(cd "${1:-${PSC_BIN:-$here/build}}" && pwd)
secs=${BENCH_CTR_SECS:-10}
rows=${BENCH_CTR_ROWS:-600000}
perf_dir=${BENCH_CTR_PERF:-}
NAME=ctr
source "$here/tests/bench/bench_lib.sh"

"$bin/psc_gen_ctr" --out "$work/data" --train_rows "$rows" --test_rows 2000 --files 2 --gzip --seed 1 \
    >"$work/gen.out" 2>&1 || { cat "$work/gen.out" >&2; echo "bench_ctr: psc_gen_ctr failed" >&2; exit 1; }
src="$work/ctr.json"
sed "s#@DATA@#$work/data#g" "$here/deploy/jobs/ctr.json" >"$src"
batch=$(sed -n 's/.*"batch_size_per_replica": *\([0-9]*\).*/\1/p' "$src")

# spec_for DST STEPS [ROWS [EXTRA]]: the demo's spec with "steps", enough epochs, a
# small test set (the chief evaluates it after training; not part of the
# timing), given ROWS (may be ""), both tables declared with ROWS rows, and
# EXTRA (e.g. '"prefetch_rows": 0, ') spliced in as more top-level keys.
spec_for() {
    local rows_re='s/\("name": *"\(emb\|wide\)", *"rows": *\)[0-9]*/\1'"${3:-}"'/'
    [ -n "${3:-}" ] || rows_re=""
    sed -e "0,/{/s//{\"steps\": $2, ${4:-}/" -e 's/"epochs": *[0-9]*/"epochs": 1000/' \
        -e 's/"data": *{/"data": {"test_examples": 1000, /' -e "$rows_re" "$src" >"$1"
}

# tower BLAS_THREADS: (a)'s examples/s.
tower() {
    local line e
    line=$("$bin/bench_ctr_tower" "$src" 5 "$1" 2>"$work/tower.log") || {
        cat "$work/tower.log" >&2
        echo "bench_ctr: bench_ctr_tower $src failed" >&2
        return 1
    }
    echo "$line" >>"$work/tower.lines"
    e=$(echo "$line" | sed -n 's/.* \([0-9]*\) examples\/s .*/\1/p')
    [ -n "$e" ] || { echo "bench_ctr: no rate from bench_ctr_tower: $line" >&2; return 1; }
    echo "$e"
}

# perf_top PID NAME: records PID for 4 s after 3 s, its top symbols into $perf_dir/NAME.txt.
perf_top() {
    sleep 3
    perf record ${BENCH_CTR_PERF_CG:--g} -o "$perf_dir/$2.data" -p "$1" -- sleep 4 >/dev/null 2>&1 || return 0
    perf report -i "$perf_dir/$2.data" --stdio --no-children -F overhead,dso,sym --percent-limit 1 -g none \
        2>/dev/null | grep -v '^#' | grep -v '^ *$' | cut -c1-120 >"$perf_dir/$2.txt" || true
}

# train SPEC NPS NW [WORKER_FLAGS...]: runs NPS ps_servers + NW workers (PIN=1: the
# ps_servers on CPU 1, the workers on CPU 0); prints
# "<sum of examples/s> <each worker's, comma-separated> <largest ps peak MiB> <largest worker peak MiB>
#  <ps CPU ms/step> <worker CPU ms/step>" (CPU: the processes' last sampled utime + stime, from their
# start, summed over the ps_servers or the workers, over the steps of all workers).
train() {
    local spec=$1 nps=$2 nw=$3 ports i
    shift 3
    mapfile -t ports < <("$bin/psc_free_port" $((nps + nw)))
    local ps_list="" w_list="" sep=""
    for ((i = 0; i < nps; i++)); do ps_list+="$sep\"127.0.0.1:${ports[i]}\""; sep=", "; done
    sep=""
    for ((i = 0; i < nw; i++)); do w_list+="$sep\"127.0.0.1:${ports[nps + i]}\""; sep=", "; done
    local tf="{\"cluster\": {\"ps\": [$ps_list], \"worker\": [$w_list]}, \"task\": "
    local pspids=() wpids=() p
    for ((i = 0; i < nps; i++)); do
        TF_CONFIG="$tf{\"type\": \"ps\", \"index\": $i}}" ${PIN:+taskset -c 1} "$bin/ps_server" >"$work/ps$i.log" 2>&1 &
        pspids+=($!)
        pids+=($!)
    done
    for ((i = 0; i < nps; i++)); do
        "$bin/psc_health" "127.0.0.1:${ports[i]}" 20000 || { cat "$work/ps$i.log" >&2; return 1; }
    done
    for ((i = nw - 1; i >= 0; i--)); do
        TF_CONFIG="$tf{\"type\": \"worker\", \"index\": $i}}" ${PIN:+taskset -c 0} "$bin/worker" --job_spec "$spec" \
            --log_every_secs 60 "$@" >"$work/worker$i.out" 2>"$work/worker$i.log" &
        wpids=($! "${wpids[@]}")
        pids+=($!)
    done
    local perfs=()
    if [ -n "$perf_dir" ] && [ -n "${PERF_THIS_RUN:-}" ]; then
        mkdir -p "$perf_dir"
        perf_top "${wpids[0]}" worker & perfs+=($!)
        perf_top "${pspids[0]}" ps & perfs+=($!)
    fi
    # sample peak memory and CPU time while the processes live (gone with them)
    local ps_kb=0 w_kb=0 alive=1 kb t
    local -A ticks=()
    while [ $alive = 1 ]; do
        alive=0
        for p in "${pspids[@]}"; do
            kb=$(vmhwm_kb "$p"); [ "$kb" -gt "$ps_kb" ] && ps_kb=$kb
            t=$(cpu_ticks "$p"); [ "$t" -gt "${ticks[$p]:-0}" ] && ticks[$p]=$t
        done
        for p in "${wpids[@]}"; do
            if kill -0 "$p" 2>/dev/null; then
                alive=1
                kb=$(vmhwm_kb "$p"); [ "$kb" -gt "$w_kb" ] && w_kb=$kb
                t=$(cpu_ticks "$p"); [ "$t" -gt "${ticks[$p]:-0}" ] && ticks[$p]=$t
            fi
        done
        sleep 0.2
    done
    local rc=0
    for p in "${wpids[@]}"; do wait "$p" || rc=1; done
    # a ps_server leaves when the chief ends the job; after a failure nobody does
    if [ $rc != 0 ]; then for p in "${pspids[@]}"; do kill "$p" 2>/dev/null || true; done; fi
    for p in "${pspids[@]}"; do wait "$p" || true; done
    for p in "${perfs[@]}"; do wait "$p" || true; done
    local total=0 each="" e steps=0 n
    for ((i = 0; i < nw; i++)); do
        e=$(sed -n 's/.*finished [0-9]* steps in [0-9.]* s (\([0-9]*\) examples\/s).*/\1/p' "$work/worker$i.log")
        n=$(sed -n 's/.*finished \([0-9]*\) steps in .*/\1/p' "$work/worker$i.log")
        if [ $rc != 0 ] || [ -z "$e" ] || [ -z "$n" ]; then
            echo "bench_ctr: worker $i of $nw ($nps ps) failed:" >&2
            cat "$work"/ps*.log "$work/worker$i.log" >&2
            return 1
        fi
        total=$((total + e))
        steps=$((steps + n))
        each+="${each:+,}$e"
    done
    local ps_t=0 w_t=0
    for p in "${pspids[@]}"; do ps_t=$((ps_t + ${ticks[$p]:-0})); done
    for p in "${wpids[@]}"; do w_t=$((w_t + ${ticks[$p]:-0})); done
    echo "$total $each $((ps_kb / 1024)) $((w_kb / 1024))" \
        "$(awk -v p="$ps_t" -v w="$w_t" -v n="$steps" -v hz="$(getconf CLK_TCK)" \
            'BEGIN {printf "%.2f %.2f", 1e3 * p / hz / n, 1e3 * w / hz / n}')"
}

ratio() { awk -v x="$1" -v y="$2" 'BEGIN {printf "%.2f", x / y}'; }
steps_for() { awk -v a="$1" -v b="$batch" -v s="$secs" 'BEGIN {n = int(a * s / b); print n < 50 ? 50 : n}'; }

echo "bench_ctr: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); $rows training rows (psc_gen_ctr" \
    "--files 2 --gzip --seed 1), batch $batch, each run ~$secs s"
a1=$(tower 0)
a1t=$(tower 1)
# every 1 + 1 run trains the same steps (the faster tower's ~BENCH_CTR_SECS): a job's first epoch
# creates its rows (the PS's slowest steps), so a shorter run would weigh them more
one_steps=$(steps_for "$((a1 > a1t ? a1 : a1t))")
spec_for "$work/one.json" "$one_steps"
PERF_THIS_RUN=1 train "$work/one.json" 1 1 >"$work/res_b1"
spec_for "$work/one-p.json" "$one_steps" "" '"prefetch_rows": 1, '
train "$work/one-p.json" 1 1 >"$work/res_b1p"
spec_for "$work/one-s.json" "$one_steps" "" '"prefetch_rows": 0, '
pinned=""
if [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null; then
    pinned=1
    PIN=1 train "$work/one-s.json" 1 1 >"$work/res_p0"
    PIN=1 train "$work/one-p.json" 1 1 >"$work/res_p1"
fi
spec_for "$work/one-t.json" "$one_steps"
train "$work/one-t.json" 1 1 --blas_threads 1 >"$work/res_b1t"
read -r b1 _ _ _ _ _ <"$work/res_b1"
# each of the 2 workers gets about half of (b1)'s share of the machine
spec_for "$work/two.json" "$(steps_for $((b1 / 2)))"
train "$work/two.json" 2 2 >"$work/res_b"
spec_for "$work/two-p.json" "$(steps_for $((b1 / 2)))" "" '"prefetch_rows": 1, '
train "$work/two-p.json" 2 2 >"$work/res_bp"
read -r _ bpeach _ _ _ _ <"$work/res_bp"
read -r _ beach _ _ _ _ <"$work/res_b"
a2=$(tower 0)
a2t=$(tower 1)
a=$(((a1 + a2) / 2))
at=$(((a1t + a2t) / 2))

# (c): up and down; per size the mean examples/s, the largest peak RSS, the mean CPU ms/step
sizes=${BENCH_CTR_SIZES-100000 1000000 10000000 100000000 1000000000}
declare -A crate cruns cps cw cpc cwc
csteps=$(steps_for "$b1")
for r in $sizes $(echo "$sizes" | tr ' ' '\n' | tac); do
    spec_for "$work/rows$r.json" "$csteps" "$r"
    train "$work/rows$r.json" 1 1 >"$work/res_c$r"
    read -r e _ p w pc wc <"$work/res_c$r"
    crate[$r]=$((${crate[$r]:-0} + e))
    cruns[$r]+="${cruns[$r]:+/}$e"
    [ "${cps[$r]:-0}" -gt "$p" ] || cps[$r]=$p
    [ "${cw[$r]:-0}" -gt "$w" ] || cw[$r]=$w
    cpc[$r]=$(awk -v x="${cpc[$r]:-0}" -v y="$pc" 'BEGIN {print x + y / 2}')
    cwc[$r]=$(awk -v x="${cwc[$r]:-0}" -v y="$wc" 'BEGIN {print x + y / 2}')
done
for r in $sizes; do crate[$r]=$((crate[$r] / 2)); done
base=${sizes%% *}

row() { printf '%-42s %10s %10s %6s %7s %7s %8s %8s\n' "$@"; }
# res_row LABEL RESULT_FILE NWORKERS REFERENCE
res_row() {
    local total each ps w pc wc
    read -r total each ps w pc wc <"$2"
    row "$1" "$total" $((total / $3)) "$(ratio $((total / $3)) "$4")" "$ps" "$w" \
        "$(printf %.2f "$pc")" "$(printf %.2f "$wc")"
}
echo
row run examples/s "per worker" ratio "ps MiB" "w MiB" "ps ms" "w ms"
row "(a) tower alone, mean of $a1/$a2" "$a" "$a"
row "(a') 1 BLAS thread, mean of $a1t/$a2t" "$at" "$at"
res_row "(b1) 1 ps + 1 worker" "$work/res_b1" 1 "$a"
res_row "(b1p) as (b1), prefetch_rows 1" "$work/res_b1p" 1 "$a"
if [ -n "$pinned" ]; then
    res_row "(p0) pinned, prefetch_rows 0" "$work/res_p0" 1 "$a"
    res_row "(p1) pinned, prefetch_rows 1" "$work/res_p1" 1 "$a"
fi
res_row "(b1') as (b1), --blas_threads 1" "$work/res_b1t" 1 "$at"
res_row "(b) 2 ps + 2 workers ($beach)" "$work/res_b" 2 "$a"
res_row "(bp) as (b), prefetch_rows 1 ($bpeach)" "$work/res_bp" 2 "$a"
for r in $sizes; do
    row "(c) rows 10^$((${#r} - 1)), mean of ${cruns[$r]}" "${crate[$r]}" "${crate[$r]}" \
        "$(ratio "${crate[$r]}" "${crate[$base]}")" "${cps[$r]}" "${cw[$r]}" "$(printf %.2f "${cpc[$r]}")" \
        "$(printf %.2f "${cwc[$r]}")"
done
echo "(ratio: (b1) and (b) per worker over (a), (b1') over (a'), target >= 0.8; (c) over the 10^5 runs, target"
echo " 0.8..1.2; (c): 1 ps + 1 worker, $csteps steps a run; MiB: the largest peak RSS of a ps_server / worker;"
echo " ms: CPU ms (user + sys) per step of all ps_servers / all workers, over the steps of all workers)"
sed 's/^/(a) /' "$work/tower.lines"
# issue 32 item 2 in the real ps_server: its CPU a step over the step's unique rows (both tables)
uniq=$(sed -n 's/.* \([0-9][0-9]*\) unique rows\/step.*/\1/p' "$work/tower.lines" | head -1)
if [ -n "$uniq" ]; then
    for k in b1 b1t; do
        read -r _ _ _ _ pc _ <"$work/res_$k"
        echo "($k) PS CPU per unique row: $(awk -v m="$pc" -v u="$uniq" 'BEGIN {printf "%.3f", m * 1000 / u}') us" \
            "($uniq unique rows a step; gRPC and the Batch's decoding included; target <= 0.15)"
    done
fi
[ -z "$perf_dir" ] || echo "perf of (b1): $perf_dir/worker.txt, $perf_dir/ps.txt"
echo "bench_ctr: load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
