#!/usr/bin/env bash
# test_late_ps_crash — a PS that crashes after the chief's last step is still
# recovered (found by the fault tests; before the fix nobody restored it).
# 2 ps (with --checkpoint_dir) + 2 workers, async. Worker 1 is slow, so the
# chief finishes its own steps first and waits for it. Then ps 1 is killed with
# SIGKILL and restarted on the same address and checkpoint dir. The chief,
# waiting for the other replica, checks every PS once a second, finds ps 1
# without the model and restores the latest checkpoint on every PS; worker 1
# rides the outage out; both exit 0.
source "$(dirname "$0")/lib.sh"
require_dataset
small_spec "$TMP/job.json" 1 5 ', "placement": {"strategy": "round_robin", "min_shard_bytes": 40000},
 "checkpoint": {"every_steps": 50, "keep": 5}'
cluster 2 2
start_ps 0 --checkpoint_dir "$TMP/ckpt/ps0"; p0=$LAST_PID
start_ps 1 --checkpoint_dir "$TMP/ckpt/ps1"; p1=$LAST_PID
wait_healthy "${PS_ADDR[0]}"; wait_healthy "${PS_ADDR[1]}"
start_worker 0 "$TMP/job.json" --debug_step_delay_ms 5; w0=$LAST_PID
start_worker 1 "$TMP/job.json" --debug_step_delay_ms 60 --retry_secs 40; w1=$LAST_PID
t=0
until grep -q 'finished [0-9]* steps' "$TMP/worker0.log"; do sleep 0.1; t=$((t + 1)); [ $t -le 600 ] || fail "the chief did not finish"; done
grep -q 'finished [0-9]* steps' "$TMP/worker1.log" && fail "worker 1 finished as early as the chief: nothing to show"
grep -q 'checkpoint 1 (periodic) committed' "$TMP/worker0.log" || fail "no checkpoint committed: nothing to restore from"
echo "the chief finished its steps; worker 1 at: $(grep -a ' step [0-9]*/' "$TMP/worker1.log" | tail -1 | sed 's/.*\(step [0-9]*\/[0-9]*\).*/\1/')"
kill -9 "$p1"; wait_exit "$p1" 10
mv "$TMP/ps1.log" "$TMP/ps1.log.killed"
start_ps 1 --checkpoint_dir "$TMP/ckpt/ps1"; p1=$LAST_PID
echo "ps 1 killed and restarted; waiting for the workers (up to 90 s)"
wait_exit "$w1" 90; c1=$EXIT_CODE
wait_exit "$w0" 30; c0=$EXIT_CODE
echo "worker 1 exited $c1, the chief $c0"
grep -h 'restored checkpoint\|training failed\|unreachable' "$TMP/worker0.log" "$TMP/worker1.log" | sed 's/^/  /'
[ "$c0" = 0 ] && [ "$c1" = 0 ] || fail "a ps that crashed after the chief's last step was never restored"
grep -q "ps 1 lost the model: restored checkpoint" "$TMP/worker0.log" || fail "the chief did not restore ps 1"
wait_exit "$p0" 30; wait_exit "$p1" 30
pass "the late ps crash was recovered"
