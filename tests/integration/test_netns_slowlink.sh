#!/usr/bin/env bash
# test_netns_slowlink — a degraded link in sync training, between real hosts
# (Linux network namespaces joined by a bridge, see netns.sh): 1 ps + 3 workers,
# sync replicas with a backup worker (replicas_to_aggregate R = 2 of N = 3).
# Worker 2's link is impaired both ways: netem delay + loss where the kernel has
# netem, else (no netem) an htb rate limit (a slow link: every exchange of the
# weights queues) + iptables' statistic match dropping packets at random.
# In one training run, alternating windows without and with the impairment
# (clean, impaired; one window each way per round, 3 rounds), the test
# measures each worker's step rate from its own progress lines:
# - the impairment bites: worker 2's rate falls to at most half its clean rate;
# - the fast workers keep their pace: their rate with worker 2 impaired is at
#   least 0.7 of their rate without (the PS applies each step with the first 2
#   gradients; worker 2's arrive stale and are dropped, as its stale count shows).
#   Each round gives a ratio and the test takes the median of the 3, so that one
#   window disturbed by other load on the machine (ctest -j runs other tests
#   beside this one) does not decide it.
# Then the same impairment with R = N = 3 (no backup worker), as a control (one
# round): the fast workers must now slow down (rate ratio below 0.7), which shows
# that the check above measures something. Finally SIGTERM stops every process
# promptly.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/netns.sh"
require_dataset
netns_require_tc
netns_require
T_START=$(date +%s)
for h in ps0 w0 w1 w2; do netns_host "$h"; done
if ! netns_has_netem && ! _netns_iptables w2 >/dev/null; then
    skip "no netem qdisc in this kernel and no working iptables (Debian package iptables) to drop packets"
fi
ns_cluster "ps0" "w0 w1 w2"

# impairment of worker 2's link: netem's delay/loss, or htb's rate + iptables' loss
DELAY_MS=${PSC_NETNS_DELAY_MS:-100} LOSS_PCT=${PSC_NETNS_LOSS_PCT:-5} RATE_KBIT=${PSC_NETNS_RATE_KBIT:-2000}
WINDOW=${PSC_NETNS_WINDOW_SECS:-4}

# spec FILE R — the MLP of test_sync with SGD, sync R of 3, no step limit to speak of
spec() {
    cat >"$1" <<JSON
{"model": {"input_shape": [28, 28, 1],
           "layers": [{"type": "flatten"}, {"type": "dense", "units": 32, "activation": "relu"},
                      {"type": "dense", "units": 10}]},
 "optimizer": {"name": "gradient_descent", "learning_rate": 0.1},
 "data": {"train_examples": 6000, "test_examples": 1000},
 "sync": {"replicas_to_aggregate": $2, "total_num_replicas": 3, "timeout_secs": 5},
 "batch_size_per_replica": 32, "epochs": 1000, "steps": 100000, "seed": 9}
JSON
}

# run R ROUNDS — trains with R of 3 and measures ROUNDS pairs of windows; sets FAST_CLEAN FAST_IMP
# SLOW_CLEAN SLOW_IMP (steps/s, means over the rounds), FAST_RATIO SLOW_RATIO (medians of the
# rounds' impaired / clean ratios) and STALE (worker 2's stale steps by the end of the last window)
run() {
    local r=$1 rounds=$2 i round
    spec "$TMP/r$r.json" "$r"
    PSP=(); WP=()
    ns_start_ps 0; PSP+=("$LAST_PID")
    ns_wait_healthy w0 "${PS_ADDR[0]}"
    # every worker sleeps 100 ms a step so that steps are paced by the clock
    # more than by the 2 shared cores: with CPU-bound steps, load from other
    # processes makes the step times jitter, and then 3 workers racing for 2
    # places finish a step sooner than 2 (the backup worker's other gift),
    # which would read as a slowdown when worker 2 drops out
    for i in 0 1 2; do ns_start_worker "$i" "$TMP/r$r.json" --debug_step_delay_ms 100; WP+=("$LAST_PID"); done
    for i in 0 1 2; do
        local t=0
        until [ -n "$(last_progress "$TMP/worker$i.log")" ] && [ "$(last_progress "$TMP/worker$i.log" | awk '{print $2}')" -ge 30 ]; do
            sleep 0.1; t=$((t + 1)); [ $t -le 600 ] || fail "R=$r: worker $i not at step 30 after 60 s"
        done
    done
    local fc=() fi=() sc=() si=() fr=() sr=() a=() b=()
    for ((round = 1; round <= rounds; round++)); do
        for phase in clean impaired; do
            if [ $phase = impaired ]; then net_impair w2 "$DELAY_MS" "$LOSS_PCT" "$RATE_KBIT"; else net_unimpair w2; fi
            sleep 1 # settle: what was in flight under the other condition
            for i in 0 1 2; do a[i]=$(last_progress "$TMP/worker$i.log"); done
            sleep "$WINDOW"
            for i in 0 1 2; do b[i]=$(last_progress "$TMP/worker$i.log"); done
            local f s
            f=$(awk -v x="$(rate "${a[0]}" "${b[0]}")" -v y="$(rate "${a[1]}" "${b[1]}")" 'BEGIN { printf "%.2f", (x + y) / 2 }')
            s=$(rate "${a[2]}" "${b[2]}")
            echo "  R=$r round $round $phase: fast workers $(rate "${a[0]}" "${b[0]}") and $(rate "${a[1]}" "${b[1]}") steps/s, worker 2 $s steps/s"
            if [ $phase = clean ]; then fc+=("$f"); sc+=("$s"); else
                fi+=("$f"); si+=("$s")
                fr+=("$(ratio "$f" "${fc[-1]}")"); sr+=("$(ratio "$s" "${sc[-1]}")")
            fi
        done
    done
    net_unimpair w2
    STALE=$(last_progress_stale "$TMP/worker2.log")
    mean() { awk 'BEGIN { s = 0; for (i = 1; i < ARGC; i++) s += ARGV[i]; printf "%.2f", s / (ARGC - 1) }' "$@"; }
    FAST_CLEAN=$(mean "${fc[@]}") FAST_IMP=$(mean "${fi[@]}") SLOW_CLEAN=$(mean "${sc[@]}") SLOW_IMP=$(mean "${si[@]}")
    FAST_RATIO=$(median "${fr[@]}") SLOW_RATIO=$(median "${sr[@]}") FAST_RATIOS="${fr[*]}"
    # stop: the workers at their next step, then the PS (it fails parked replies)
    local t0
    t0=$(date +%s.%N)
    for i in 0 1 2; do kill -TERM "${WP[i]}"; done
    sleep 0.5
    kill -TERM "${PSP[0]}"
    for i in 0 1 2; do
        wait_exit "${WP[i]}" 20
        [ "$EXIT_CODE" = 143 ] || [ "$EXIT_CODE" = 0 ] || fail "R=$r: worker $i exited $EXIT_CODE on SIGTERM"
    done
    wait_exit "${PSP[0]}" 20; [ "$EXIT_CODE" = 0 ] || fail "R=$r: ps exited $EXIT_CODE on SIGTERM"
    STOP_SECS=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
}
# the "stale K" of a sync worker's newest progress line counts its stale steps since the line before;
# the sum over the log is its stale steps so far
last_progress_stale() { { grep -a ' epoch .* stale [0-9]*' "$1" || true; } | awk '{ s += $NF } END { print s + 0 }'; }
save_logs() { for f in "$TMP"/*.log "$TMP"/*.out; do mv "$f" "$f.$1"; done; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b <= 0) print 0; else printf "%.2f", a / b }'; }
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { printf "%.2f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "backup worker (R=2 of N=3), worker 2's link impaired in alternate ${WINDOW} s windows:"
run 2 3
echo "  method: $NET_IMPAIR_METHOD"
fast_ratio=$FAST_RATIO slow_ratio=$SLOW_RATIO
echo "R=2 of 3: fast workers $FAST_CLEAN steps/s clean, $FAST_IMP impaired (median ratio $fast_ratio of rounds $FAST_RATIOS); worker 2 $SLOW_CLEAN clean, $SLOW_IMP impaired (median ratio $slow_ratio); worker 2's stale steps $STALE; every process stopped ${STOP_SECS} s after SIGTERM"
awk -v r="$slow_ratio" 'BEGIN { exit !(r <= 0.5) }' || fail "the impairment did not slow worker 2 down (ratio $slow_ratio): not a test of anything"
[ "$STALE" -gt 0 ] || fail "worker 2's gradients were never stale: the PS waited for it"
awk -v r="$fast_ratio" 'BEGIN { exit !(r >= 0.7) }' ||
    fail "the fast workers lost their pace with worker 2 impaired: median ratio $fast_ratio < 0.7 (rounds $FAST_RATIOS)"
save_logs r2

echo "control, no backup worker (R=N=3), the same impairment:"
run 3 1
c_ratio=$FAST_RATIO
echo "R=3 of 3: fast workers $FAST_CLEAN steps/s clean, $FAST_IMP impaired (ratio $c_ratio); worker 2 $SLOW_CLEAN clean, $SLOW_IMP impaired; stopped ${STOP_SECS} s after SIGTERM"
awk -v r="$c_ratio" 'BEGIN { exit !(r < 0.7) }' || fail "control: without a backup worker the fast workers should wait for worker 2 (ratio $c_ratio)"
pass "slow link: the backup worker keeps the pace (median ratio $fast_ratio >= 0.7; $c_ratio without one); $NET_IMPAIR_METHOD; $(($(date +%s) - T_START)) s"
