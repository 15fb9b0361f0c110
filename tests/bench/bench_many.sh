#!/usr/bin/env bash
# bench_many.sh — many workers simulated on one machine (issue 21): standalone
# clusters on 127.0.0.1 of P ps_servers (each with its --checkpoint_dir) and W
# workers (--blas_threads 1, --debug_step_delay_ms 20 so that even the small
# run lasts long enough to be sampled), default 2 + 2 and 8 + 64, each driven by
# `psctl train` through one small job (a 784-32-10 MLP, batch 32, a few steps
# per replica, periodic checkpoints), asynchronous and sync (R = N = W).
#
# Measured, per run, from the processes themselves:
#   - the job completes: psctl's exit code, then every daemon stopped with
#     SIGTERM and its exit code (all must be 0);
#   - submit: the chief's Submit fan-out (release every PS, cancel and start
#     every other replica, start itself): from its log's "job ID submitted" to
#     its "job ID started" (log timestamps, ms);
#   - ckpt: the chief's checkpoints, fence + Save + Commit on every PS, as the
#     chief logs each ("committed on every ps: ..., T ms"): the periodic ones
#     (taken while every replica trains: count, mean, max) and the final one
#     (taken once the replicas are done, on an idle machine);
#   - end wait: the chief's wait for the other replicas at the end of the job
#     (its log: "every other replica finished: waited T s");
#   - each ps_server, sampled every 0.2 s from /proc: resident memory (VmRSS),
#     threads, established TCP connections to its port (ss), and its CPU time
#     (utime + stime) over the job; the per-connection costs are the growth
#     from idle (before the job) to the peak, divided by the connections;
#   - the chief's peak VmRSS and threads.
# Every ratio is against the 2 + 2 run of the same mode in the same run; the
# memory a connection costs a PS is the marginal one: (growth per PS, big run
# - growth per PS, small run) / (connections per PS, big - small), which
# leaves out what every PS grows by anyway (its shard, RocksDB's buffers).
# A measurement, not a test: it never fails on speed; exit 1 when a process
# fails. Every process is killed at the end (SIGKILL after a grace), and each
# run is bounded by BENCH_MANY_TIMEOUT seconds.
#
# usage: tests/bench/bench_many.sh [BUILD_DIR]
#   BENCH_MANY_CONFIGS  "PxW ..." (default "2x2 8x64")
#   BENCH_MANY_MODES    "async sync" (default both)
#   BENCH_MANY_STEPS    steps per replica (default 50)
#   BENCH_MANY_UNITS    the hidden layer's units (default 32: 25,450 parameters; 1024: 814,090,
#                       3.3 MB, where a sync PS's reply buffers show in its memory)
#   BENCH_MANY_TIMEOUT  seconds for one run's job (default 600)
#   BENCH_MANY_KEEP     a directory to copy every run's logs to
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
PSC_BIN=$(cd "${1:-${PSC_BIN:-$root/build}}" && pwd)
export PSC_BIN
NAME=many
source "$root/tests/bench/bench_lib.sh"    # $work, vmhwm_kb, cpu_ticks
source "$root/tests/integration/lib.sh"    # cluster, tf_config, start_ps, wait_healthy, small_spec
trap 'cleanup; rm -rf "$work"' EXIT         # lib.sh's (kills PIDS, logs on failure), then bench_lib's directory
steps=${BENCH_MANY_STEPS:-50}
units=${BENCH_MANY_UNITS:-32}
limit=${BENCH_MANY_TIMEOUT:-600}
hz=$(getconf CLK_TCK)

# proc_field PID FIELD: a field of /proc/PID/status (kB for VmRSS), 0 once gone.
proc_field() { awk -v f="$2:" '$1 == f {print $2; g=1} END {if (!g) print 0}' "/proc/$1/status" 2>/dev/null || echo 0; }
# conns PORT...: established TCP connections whose local port is one of PORTs, one count a port.
conns() {
    ss -Htn state established 2>/dev/null | awk -v ports="$*" '
        BEGIN {n = split(ports, p, " "); for (i = 1; i <= n; i++) c[p[i]] = 0}
        {k = $3; sub(/.*:/, "", k); if (k in c) c[k]++}
        END {for (i = 1; i <= n; i++) printf "%d ", c[p[i]]; print ""}'
}
# log_ms FILE PATTERN: the first line matching PATTERN, as ms since midnight (log timestamp), or "".
log_ms() {
    grep -m1 -- "$2" "$1" 2>/dev/null | awk '{split(substr($1, 12, 12), t, ":"); printf "%.0f\n", (t[1] * 3600 + t[2] * 60 + t[3]) * 1000}'
}

# stop_all: SIGTERM to every daemon, a bounded wait, SIGKILL to what is left;
# sets STOP_BAD (processes that did not exit 0) and STOP_CODES.
stop_all() {
    local p i rc
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for ((i = 0; i < 150; i++)); do
        rc=0
        for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && rc=1; done
        [ $rc = 0 ] && break
        sleep 0.2
    done
    STOP_BAD=0; STOP_CODES=""
    for p in "${PIDS[@]}"; do
        kill -0 "$p" 2>/dev/null && { kill -9 "$p" 2>/dev/null || true; }
        set +e; wait "$p"; rc=$?; set -e
        [ "$rc" = 0 ] || { STOP_BAD=$((STOP_BAD + 1)); STOP_CODES+=" $rc"; }
    done
    PIDS=()
}

# run NPS NW MODE: one standalone cluster, one job through psctl; appends a
# result line to $work/results.
run() {
    local nps=$1 nw=$2 mode=$3 i tag="$1+$2 $3"
    rm -rf "${TMP:?}"/*
    cluster "$nps" "$nw"
    # about 4 periodic checkpoints: async global_step counts every replica's
    # steps, sync's counts the sync steps (R = N: one a replica step)
    local every=$((nw * steps / 4)) extra
    [ "$mode" = sync ] && every=$((steps / 4))
    [ "$every" -ge 1 ] || every=1
    extra=", \"steps\": $steps, \"checkpoint\": {\"every_steps\": $every, \"keep\": 3}"
    [ "$mode" = sync ] && extra+=", \"sync\": {\"replicas_to_aggregate\": $nw, \"total_num_replicas\": $nw, \"timeout_secs\": 30}"
    small_spec "$TMP/job.json" 1000 7 "$extra"
    sed -i 's/"train_examples": 6000/"train_examples": 3000/; s/"test_examples": 1000/"test_examples": 200/' "$TMP/job.json"
    sed -i "s/\"units\": 32,/\"units\": $units,/" "$TMP/job.json"

    local ps_pids=() ps_ports=() w_pids=()
    for ((i = 0; i < nps; i++)); do
        start_ps "$i" --checkpoint_dir "$TMP/ckpt$i" --threads 2
        ps_pids+=("$LAST_PID"); ps_ports+=("${PS_ADDR[i]##*:}")
    done
    for ((i = 0; i < nps; i++)); do wait_healthy "${PS_ADDR[i]}"; done
    for ((i = 0; i < nw; i++)); do
        TF_CONFIG=$(tf_config worker "$i") "$BIN/worker" --blas_threads 1 --log_every_secs 60 --debug_step_delay_ms 20 \
            >"$TMP/worker$i.out" 2>"$TMP/worker$i.log" &
        LAST_PID=$!; PIDS+=("$LAST_PID"); w_pids+=("$LAST_PID")
    done
    for ((i = 0; i < nw; i++)); do wait_healthy "${WORKER_ADDR[i]}" 60000; done
    sleep 1
    # idle: every daemon up, no job, no connection to a PS yet
    local rss0=0 thr0=0 t0=0 c0 p
    for p in "${ps_pids[@]}"; do
        rss0=$((rss0 + $(proc_field "$p" VmRSS))); thr0=$((thr0 + $(proc_field "$p" Threads)))
        t0=$((t0 + $(cpu_ticks "$p")))
    done
    c0=$(conns "${ps_ports[@]}" | awk '{for (i = 1; i <= NF; i++) s += $i; print s + 0}')
    local chief=${w_pids[0]} crss0 cthr0
    crss0=$(proc_field "$chief" VmRSS); cthr0=$(proc_field "$chief" Threads)

    local start end
    start=$(date +%s.%N)
    timeout "$limit" "$BIN/psctl" --cluster "$CLUSTER" train "$TMP/job.json" >"$TMP/psctl.out" 2>"$TMP/psctl.log" &
    local ctl=$!
    # sample while the job runs: the peaks (sums over the PS, and the largest PS)
    local rss1=0 thr1=0 c1=0 cmax=0 rmax=0 crss1=0 cthr1=0 r t sum csum x
    while kill -0 "$ctl" 2>/dev/null; do
        sum=0; t=0; x=0
        for p in "${ps_pids[@]}"; do
            r=$(proc_field "$p" VmRSS); sum=$((sum + r)); [ "$r" -gt "$x" ] && x=$r
            t=$((t + $(proc_field "$p" Threads)))
        done
        [ "$sum" -gt "$rss1" ] && rss1=$sum; [ "$x" -gt "$rmax" ] && rmax=$x; [ "$t" -gt "$thr1" ] && thr1=$t
        read -r csum x < <(conns "${ps_ports[@]}" | awk '{m = 0; for (i = 1; i <= NF; i++) {s += $i; if ($i > m) m = $i}; print s + 0, m}')
        [ "$csum" -gt "$c1" ] && c1=$csum; [ "$x" -gt "$cmax" ] && cmax=$x
        r=$(proc_field "$chief" VmRSS); [ "$r" -gt "$crss1" ] && crss1=$r
        r=$(proc_field "$chief" Threads); [ "$r" -gt "$cthr1" ] && cthr1=$r
        sleep 0.2
    done
    set +e; wait "$ctl"; local ctl_rc=$?; set -e
    end=$(date +%s.%N)
    local t1=0
    for p in "${ps_pids[@]}"; do t1=$((t1 + $(cpu_ticks "$p"))); done
    [ "$ctl_rc" = 0 ] || fail "$tag: psctl train exited $ctl_rc: $(tail -n 3 "$TMP/psctl.log")"

    # the chief's fan-outs, from its log
    local log=$TMP/worker0.log job sub_ms st_ms submit ck ckend wait_s nsteps
    job=$(sed -n 's/.*job \([0-9a-f]*\) submitted by.*/\1/p' "$log" | head -n1)
    sub_ms=$(log_ms "$log" "job $job submitted by")
    st_ms=$(log_ms "$log" "job $job started")
    submit=$([ -n "$sub_ms" ] && [ -n "$st_ms" ] && echo $((st_ms - sub_ms)) || echo "?")
    ck=$(sed -n 's/.*checkpoint [0-9]* (periodic) committed on every ps: step [0-9]*, \([0-9]*\) ms.*/\1/p' "$log" |
        awk '{n++; s += $1; if ($1 > m) m = $1} END {if (n) printf "%d %.0f %d", n, s / n, m; else print "0 0 0"}')
    ckend=$(sed -n 's/.*checkpoint [0-9]* (end of training) committed on every ps: step [0-9]*, \([0-9]*\) ms.*/\1/p' "$log")
    [ -n "$ckend" ] || ckend="?"
    wait_s=$(sed -n 's/.*every other replica finished: waited \([0-9.]*\) s.*/\1/p' "$log" | head -n1)
    [ -n "$wait_s" ] || wait_s="?"
    nsteps=$(cat "$TMP"/worker*.log | grep -c "finished $steps steps in" || true)
    [ "$nsteps" = "$nw" ] || fail "$tag: $nsteps of $nw replicas logged 'finished $steps steps'"

    stop_all
    if [ -n "${BENCH_MANY_KEEP:-}" ]; then # the logs, for a look afterwards
        mkdir -p "$BENCH_MANY_KEEP/$mode-$nps-$nw" && cp "$TMP"/*.log "$TMP"/*.out "$BENCH_MANY_KEEP/$mode-$nps-$nw/"
    fi
    [ "$STOP_BAD" = 0 ] || fail "$tag: $STOP_BAD daemons did not exit 0 on SIGTERM (codes:$STOP_CODES)"
    local conn=$((c1 - c0))
    [ "$conn" -ge 1 ] || conn=1
    # result: mode nps nw secs submit_ms ck_n ck_mean ck_max wait_s conns_total conns_max_ps
    #         ps_rss0 ps_rss1 ps_rss_max ps_thr0 ps_thr1 ps_cpu_ms chief_rss0 chief_rss1 chief_thr0 chief_thr1 ck_end_ms
    echo "$mode $nps $nw $(awk -v a="$start" -v b="$end" 'BEGIN {printf "%.1f", b - a}') $submit $ck $wait_s" \
        "$conn $cmax $rss0 $rss1 $rmax $thr0 $thr1 $(((t1 - t0) * 1000 / hz)) $crss0 $crss1 $cthr0 $cthr1 $ckend" \
        >>"$work/results"
    echo "bench_many: $tag done in $(awk -v a="$start" -v b="$end" 'BEGIN {printf "%.1f", b - a}') s" >&2
}

: >"$work/results"
echo "bench_many: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); $steps steps per replica," \
    "784-$units-10 MLP, batch 32, about 4 periodic checkpoints a run"
for mode in ${BENCH_MANY_MODES:-async sync}; do
    for cfg in ${BENCH_MANY_CONFIGS:-2x2 8x64}; do run "${cfg%x*}" "${cfg#*x}" "$mode"; done
done
FAILED=0

# The table: per run, then the per-unit costs against the first run of its mode.
printf '%-6s %6s %7s %9s %16s %10s %8s %6s %9s %12s %11s %10s %10s %11s %12s\n' mode ps+w "job s" "submit ms" \
    "ckpt n/mean/max" "final ckpt" "wait s" conns "conn/ps" "ps MiB 0->1" "ps thr 0->1" "KiB/conn" "ps CPU s" \
    "CPU ms/conn" "chief MiB/thr"
awk -v steps="$steps" '
    {mode=$1; P=$2; W=$3; secs=$4; sub_=$5; ckn=$6; ckm=$7; ckx=$8; wt=$9; conn=$10; cmax=$11
     r0=$12; r1=$13; rmax=$14; th0=$15; th1=$16; cpu=$17; cr0=$18; cr1=$19; ct0=$20; ct1=$21; cke=$22
     kpc = (r1 - r0) / conn; cpc = cpu / conn
     printf "%-6s %6s %7s %9s %16s %10s %8s %6d %9d %12s %11s %10.1f %10.2f %11.2f %12s\n", mode, P "+" W, secs, sub_,
         ckn "/" ckm "/" ckx, cke, wt, conn, cmax, sprintf("%.0f->%.0f", r0 / 1024, r1 / 1024), th0 "->" th1, kpc,
         cpu / 1000, cpc, sprintf("%.0f/%d", cr1 / 1024, ct1)
     if (!(mode in base)) { base[mode] = 1; bsub[mode] = sub_; bck[mode] = ckm; bcke[mode] = cke;
                            bw[mode] = W; bp[mode] = P; bcr[mode] = cr1; bct[mode] = ct1; bth[mode] = th1 / P; bwt[mode] = wt
                            bcs[mode] = cpu / (W * steps); bg[mode] = (r1 - r0) / P; bc[mode] = conn / P }
     else {
         # the marginal memory of a connection: growth per PS against connections per PS, the two runs
         mkc = (conn / P > bc[mode]) ? ((r1 - r0) / P - bg[mode]) / (conn / P - bc[mode]) : 0
         rat = rat sprintf("%s %d+%d vs %d+%d: workers x%.0f, connections per PS %.0f vs %.0f; submit x%.1f; ckpt mean x%.1f, final x%.1f; end wait %s vs %s s;\n    PS memory per connection (marginal, growth per PS over connections per PS) %.0f KiB; PS threads per PS %.0f vs %.0f;\n    PS CPU per replica step %.2f vs %.2f ms (x%.2f); chief peak %.0f vs %.0f MiB, threads %d vs %d\n",
             mode, P, W, bp[mode], bw[mode], W / bw[mode], conn / P, bc[mode], (bsub[mode] > 0 ? sub_ / bsub[mode] : 0),
             (bck[mode] > 0 ? ckm / bck[mode] : 0), (bcke[mode] > 0 ? cke / bcke[mode] : 0), wt, bwt[mode], mkc, th1 / P, bth[mode],
             cpu / (W * steps), bcs[mode], (bcs[mode] > 0 ? cpu / (W * steps) / bcs[mode] : 0), cr1 / 1024,
             bcr[mode] / 1024, ct1, bct[mode]) }
    }
    END {printf "%s", rat}' "$work/results"
printf '(submit: the chief'"'"'s Submit fan-out; ckpt: the periodic checkpoints, fence+Save+Commit on every PS, ms, taken\n'
printf ' while every replica trains; final ckpt: the one at the end, ms; wait: the chief'"'"'s end-of-job wait;\n'
printf ' conns: TCP connections to the PS ports at the peak, all PS together (conn/ps: the busiest); ps MiB: VmRSS summed\n'
printf ' over the PS, idle -> peak; KiB/conn and CPU ms/conn: the growth and the PS CPU of the job per connection;\n'
printf ' chief: peak VmRSS and threads; load average at the end %s)\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
