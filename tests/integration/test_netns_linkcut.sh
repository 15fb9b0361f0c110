#!/usr/bin/env bash
# test_netns_linkcut — network partitions between real hosts (Linux network
# namespaces joined by a bridge, see netns.sh): a link is cut for a few seconds
# (its switch port down: every packet to and from the host is lost, no error is
# returned to anyone) and restored, while the cluster trains. No process is
# restarted and nothing has to be restored from a checkpoint:
# A. cut shorter than the RPC deadline (30 s): 2 ps + 1 worker, async, ps 1 cut
#    for 5 s mid-training. The worker takes no step while the link is down
#    (its exact step counter, read from its metrics port inside its host) and
#    goes on once it is back; the same processes finish with exit 0, and the
#    final global_step and test accuracy equal those of an uncut run exactly
#    (one worker's async run is deterministic): no update was lost or applied
#    twice; every checkpoint is committed and intact.
# B. cuts longer than the RPC deadline (--rpc_timeout_ms 2000): 2 ps + 2 workers,
#    async: ps 0 (it holds global_step) cut for 5 s — neither worker takes a
#    step, both workers' calls time out, they retry and go on when it answers,
#    no restore; then the chief's own link cut for 4 s — the chief takes no
#    step, the other worker keeps training meanwhile, the chief goes on without
#    re-initializing anything. global_step ends between the sum of the
#    replicas' steps less the steps whose exchange timed out, and that sum
#    (never more: no update applied twice); accuracy >= 0.70.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/netns.sh"
require_dataset
netns_require
T_START=$(date +%s)
for h in ps0 ps1 w0 w1; do netns_host "$h"; done

# spec FILE EPOCHS — a small MLP with Adam, dense/kernel partitioned over both PS,
# checkpoints every 40 steps.
spec() {
    cat >"$1" <<JSON
{"model": {"input_shape": [28, 28, 1],
           "layers": [{"type": "flatten"}, {"type": "dense", "units": 32, "activation": "relu"},
                      {"type": "dense", "units": 10}]},
 "optimizer": {"name": "adam", "learning_rate": 0.002},
 "data": {"train_examples": 6000, "test_examples": 1000},
 "placement": {"strategy": "round_robin", "min_shard_bytes": 40000},
 "checkpoint": {"every_steps": 40, "keep": 3},
 "batch_size_per_replica": 32, "epochs": $2, "seed": 11}
JSON
}

RUN=0
# start NWORKERS SPEC [worker flags...] — ps0, ps1 and workers w0.. with fresh checkpoint dirs.
start() {
    local nw=$1 sp=$2 i whosts="w0"; shift 2
    [ "$nw" = 2 ] && whosts="w0 w1"
    ns_cluster "ps0 ps1" "$whosts"
    RUN=$((RUN + 1)); PSP=(); WP=()
    for i in 0 1; do ns_start_ps "$i" --checkpoint_dir "$TMP/ckpt/$RUN/ps$i"; PSP+=("$LAST_PID"); done
    for i in 0 1; do ns_wait_healthy w0 "${PS_ADDR[i]}"; done
    for ((i = 0; i < nw; i++)); do ns_start_worker "$i" "$sp" --metrics_port 9100 "$@"; WP+=("$LAST_PID"); done
}
# finish — the same pids exit 0 (nothing was restarted); sets ACC, GS and STEPS (per worker)
finish() {
    local i
    for ((i = 0; i < ${#WP[@]}; i++)); do wait_exit "${WP[i]}" 120; [ "$EXIT_CODE" = 0 ] || fail "worker $i (pid ${WP[i]}) exited $EXIT_CODE"; done
    for i in 0 1; do wait_exit "${PSP[i]}" 30; [ "$EXIT_CODE" = 0 ] || fail "ps $i (pid ${PSP[i]}) exited $EXIT_CODE"; done
    ACC=$(sed -n 's/^test accuracy: //p' "$TMP/worker0.out")
    GS=$(sed -n 's/.*evaluation on .* at global_step \([0-9]*\):.*/\1/p' "$TMP/worker0.log")
    [ -n "$ACC" ] && [ -n "$GS" ] || fail "no final evaluation"
    STEPS=()
    for ((i = 0; i < ${#WP[@]}; i++)); do STEPS+=("$(sed -n 's/.*finished \([0-9]*\) steps in.*/\1/p' "$TMP/worker$i.log")"); done
}
no_restore() { # the chief never restored nor re-initialized the model
    if grep -Eq 'restored checkpoint|lost the model|restored job' "$TMP/worker0.log"; then
        fail "$1: the chief restored the model: $(grep -E 'restored|lost the model' "$TMP/worker0.log" | head -2)"
    fi
    [ "$(grep -c 'initialized job' "$TMP/worker0.log")" = 1 ] || fail "$1: the model was initialized more than once"
}
ckpts_good() { # every checkpoint left on disk is committed and intact
    local i out
    for i in 0 1; do
        out=$("$BIN/psc_ckpt" list "$TMP/ckpt/$RUN/ps$i") || fail "psc_ckpt list ps$i"
        [ -n "$out" ] || fail "$1: no checkpoint on ps$i"
        echo "$out" | grep -qv ' committed .* good$' && fail "$1: ps$i holds a bad or uncommitted checkpoint: $out"
    done
    return 0
}
save_logs() { for f in "$TMP"/*.log "$TMP"/*.out; do mv "$f" "$f.$1"; done; }
now() { date +%s.%N; }
secs_since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# steps W — worker W's training steps so far (psc_worker_steps_total, read from
# its metrics port inside its own host, which a cut does not reach)
steps() { ns_metric "${WORKER_HOST[$1]}" "${NETNS_IP[${WORKER_HOST[$1]}]}:9100" psc_worker_steps_total; }

# cut HOST SECS WATCH — cuts HOST's link for SECS, checks that it is really cut
# (no TCP connection from the other side), restores it and waits until worker
# WATCH takes a step again. Exact step counts from the workers' metrics:
# CUT_STEP (WATCH's steps 0.5 s into the cut, after any step in flight);
# CUT_DURING (WATCH's steps from then to the restore: 0 when the cut stopped it);
# CUT_RECOVERY (seconds from the restore to WATCH's next step); CUT_OTHER_RATE
# and CUT_OTHER_DURING (steps/s and steps of the other worker, if any, over 2 s
# of the cut).
cut() {
    local h=$1 secs=$2 w=$3 probe_from=w1 port=2222 t_restore s1 s2 s o=-1 o1 o2 t1 t2
    [ "$h" = w1 ] && probe_from=ps0
    [ "${NETNS_IP[$probe_from]+x}" ] || probe_from=ps0
    [ ${#WORKER_HOST[@]} = 2 ] && o=$((1 - w))
    net_cut "$h"
    # the probe (2 s at most) runs during the cut, not in addition to it
    (! ns_reach "$probe_from" "$h" "$port") & local probe=$!
    sleep 0.5
    s1=$(steps "$w"); [ $o -ge 0 ] && { o1=$(steps $o); t1=$(now); }
    sleep 2
    [ $o -ge 0 ] && { o2=$(steps $o); t2=$(now); }
    sleep "$(awk -v s="$secs" 'BEGIN { print s - 2.5 }')"
    wait $probe || fail "$h still answered a connection from $probe_from with its link cut"
    s2=$(steps "$w")
    [ -n "$s1" ] && [ -n "$s2" ] || fail "cannot read worker $w's metrics"
    net_restore "$h"; t_restore=$(now)
    for _ in $(seq 300); do
        s=$(steps "$w")
        [ -n "$s" ] && [ "$s" -gt "$s2" ] && break
        sleep 0.1
    done
    [ -n "$s" ] && [ "$s" -gt "$s2" ] || fail "worker $w took no step within 30 s of restoring $h's link"
    CUT_RECOVERY=$(secs_since "$t_restore")
    CUT_STEP=$s1 CUT_DURING=$((s2 - s1)) CUT_OTHER_RATE="" CUT_OTHER_DURING=""
    if [ $o -ge 0 ]; then
        [ -n "$o1" ] && [ -n "$o2" ] || fail "cannot read worker $o's metrics"
        CUT_OTHER_DURING=$((o2 - o1))
        CUT_OTHER_RATE=$(awk -v a="$o1" -v b="$o2" -v x="$t1" -v y="$t2" 'BEGIN { printf "%.1f", (b - a) / (y - x) }')
    fi
}
wait_step() { # wait_step WORKER STEP SECS — until the worker's progress reaches STEP
    local t=0 p
    while :; do
        p=$(last_progress "$TMP/worker$1.log")
        [ -n "$p" ] && [ "$(echo "$p" | awk '{print $2}')" -ge "$2" ] && return 0
        grep -q 'finished' "$TMP/worker$1.log" 2>/dev/null && fail "worker $1 finished before step $2"
        sleep 0.1; t=$((t + 1)); [ $t -le $(($3 * 10)) ] || fail "worker $1 not at step $2 after $3 s"
    done
}

# ---- A. a cut shorter than the RPC deadline: invisible except for the stall ----
spec "$TMP/a.json" 2
DELAY=(--debug_step_delay_ms 20)
start 1 "$TMP/a.json" "${DELAY[@]}"
finish
ref_acc=$ACC ref_gs=$GS
ckpts_good "A uncut"
save_logs a-ref
start 1 "$TMP/a.json" "${DELAY[@]}"
wait_step 0 100 60
cut ps1 5 0
echo "A: ps1 cut 5 s at worker 0's step $CUT_STEP: $CUT_DURING steps while it was cut, the next one ${CUT_RECOVERY} s after the link came back"
alive=1; for p in "${WP[@]}" "${PSP[@]}"; do kill -0 "$p" 2>/dev/null || alive=0; done
[ $alive = 1 ] || fail "A: a process died during the cut"
finish
echo "A: global_step $GS (uncut $ref_gs), test accuracy $ACC (uncut $ref_acc), same pids, exit 0"
[ "$CUT_DURING" -le 1 ] || fail "A: worker 0 took $CUT_DURING steps while ps1 was cut off: was the link really cut?"
awk -v r="$CUT_RECOVERY" 'BEGIN { exit !(r <= 10.0) }' || fail "A: progress only ${CUT_RECOVERY} s after the link came back"
no_restore A
grep -q 'parameter servers unavailable' "$TMP/worker0.log" && fail "A: a 5 s cut made a call fail (RPC deadline 30 s)"
[ "$GS" = "$ref_gs" ] || fail "A: global_step $GS after the cut, $ref_gs uncut: updates lost or applied twice"
[ "$ACC" = "$ref_acc" ] || fail "A: accuracy $ACC after the cut, $ref_acc uncut: the model differs"
ckpts_good "A cut"
save_logs a-cut

# ---- B. cuts longer than the RPC deadline, 2 workers ----
spec "$TMP/b.json" 4
start 2 "$TMP/b.json" "${DELAY[@]}" --rpc_timeout_ms 2000
wait_step 0 60 60
cut ps0 5 0
during_ps=$CUT_DURING rec_ps=$CUT_RECOVERY during_ps1=$CUT_OTHER_DURING
echo "B: ps0 (global_step) cut 5 s at worker 0's step $CUT_STEP: worker 0 took $during_ps steps while it was cut (worker 1: $during_ps1 in 2 s), its next one ${rec_ps} s after the link came back"
# the chief may spend the whole cut inside a periodic checkpoint: its Save
# waits for the PS (checkpoint calls have a 30-minute deadline, not
# --rpc_timeout_ms), so no call fails and nothing is retried; the checkpoint
# then logs its duration, most of the cut's 5 s. Either line ends the chief's
# wait (waiting 30 s for the one that never comes let the job run to its end).
long_ckpt='committed on every ps: step [0-9]+, ([4-9][0-9]{3}|[0-9]{5,}) ms'
for i in 0 1; do
    re='parameter servers answer again'
    [ "$i" = 0 ] && re="$re|$long_ckpt"
    wait_log_re "$TMP/worker$i.log" "$re" 30 || fail "B: worker $i did not log that the PS answer again"
    if [ "$i" = 0 ] && ! grep -q 'parameter servers answer again' "$TMP/worker0.log"; then
        echo "B: worker 0 spent the cut inside a checkpoint, which waited it out"
    fi
done
w0_step=$(last_progress "$TMP/worker0.log" | awk '{print $2}')
wait_step 0 $((w0_step + 20)) 60
cut w0 4 0
during_chief=$CUT_DURING rec_chief=$CUT_RECOVERY w1_rate=$CUT_OTHER_RATE
echo "B: chief (w0) cut 4 s at its step $CUT_STEP: it took $during_chief steps while cut off, its next one ${rec_chief} s after; worker 1 meanwhile at ${w1_rate} steps/s"
finish
fails=$(cat "$TMP/worker0.log" "$TMP/worker1.log" | grep -c 'parameter servers unavailable (' || true)
sum=$((STEPS[0] + STEPS[1]))
echo "B: steps ${STEPS[0]} + ${STEPS[1]} = $sum, global_step $GS, steps whose exchange timed out $fails; test accuracy $ACC; same pids, exit 0"
[ "$during_ps" -le 1 ] && [ "$during_ps1" -le 1 ] || fail "B: steps while ps0 was cut off ($during_ps, $during_ps1): was the link really cut?"
[ "$during_chief" -le 1 ] || fail "B: the chief took $during_chief steps while cut off"
awk -v r="$w1_rate" 'BEGIN { exit !(r >= 5) }' || fail "B: worker 1 did not train on while the chief was cut off ($w1_rate steps/s)"
awk -v r="$rec_ps" -v c="$rec_chief" 'BEGIN { exit !(r <= 10 && c <= 10) }' || fail "B: slow recovery ($rec_ps s, $rec_chief s)"
no_restore B
[ "$fails" -ge 2 ] || fail "B: the 5 s cut of ps0 should have timed out both workers' calls (2 s deadline)"
[ "$GS" -le "$sum" ] || fail "B: global_step $GS > $sum steps taken: an update was applied twice"
[ "$GS" -ge $((sum - fails)) ] || fail "B: global_step $GS < $sum - $fails: increments lost beyond the timed-out steps"
awk -v a="$ACC" 'BEGIN { exit !(a >= 0.70) }' || fail "B: accuracy $ACC < 0.70"
ckpts_good B
pass "link cuts: shorter than the RPC deadline (bit-identical result), longer (retry, no restore), chief cut off; $(($(date +%s) - T_START)) s"
