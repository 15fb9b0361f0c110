#!/usr/bin/env bash
# test_late_ps0_crash — as test_late_ps_crash, but the ps that crashes after
# the chief's last step is ps 0, the one holding global_step and the replicas'
# done flags (found by test_soak). The chief, waiting for worker 1, restores
# the latest checkpoint on every ps and worker 1 rides it out and finishes; the
# restarted ps 0 never heard the chief's own WorkerDone, so the chief counts
# the done flags it has seen (itself included) rather than ps 0's count, and
# evaluates within 10 s of worker 1's end instead of waiting out
# --wait_workers_secs (30 s here; before the fix it did).
source "$(dirname "$0")/lib.sh"
require_dataset
cat >"$TMP/job.json" <<JSON
{"model": {"input_shape": [28, 28, 1],
           "layers": [{"type": "flatten"}, {"type": "dense", "units": 32, "activation": "relu"},
                      {"type": "dense", "units": 10}]},
 "optimizer": {"name": "adam", "learning_rate": 0.002},
 "data": {"train_examples": 6000, "test_examples": 1000},
 "placement": {"strategy": "round_robin", "min_shard_bytes": 40000},
 "checkpoint": {"every_steps": 50, "keep": 5},
 "batch_size_per_replica": 32, "epochs": 1, "seed": 5}
JSON
cluster 2 2
start_ps 0 --checkpoint_dir "$TMP/ckpt/ps0"; p0=$LAST_PID
start_ps 1 --checkpoint_dir "$TMP/ckpt/ps1"; p1=$LAST_PID
wait_healthy "${PS_ADDR[0]}"; wait_healthy "${PS_ADDR[1]}"
start_worker 0 "$TMP/job.json" --debug_step_delay_ms 5 --wait_workers_secs 30; w0=$LAST_PID
start_worker 1 "$TMP/job.json" --debug_step_delay_ms 60; w1=$LAST_PID
t=0
until grep -q 'finished [0-9]* steps' "$TMP/worker0.log"; do sleep 0.1; t=$((t + 1)); [ $t -le 600 ] || fail "the chief did not finish"; done
grep -q 'finished [0-9]* steps' "$TMP/worker1.log" && fail "worker 1 finished as early as the chief: nothing to show"
kill -9 "$p0"; wait_exit "$p0" 10
mv "$TMP/ps0.log" "$TMP/ps0.log.killed"
start_ps 0 --checkpoint_dir "$TMP/ckpt/ps0"; p0=$LAST_PID
echo "the chief finished its steps; ps 0 killed and restarted"
wait_exit "$w1" 90; c1=$EXIT_CODE
t1=$SECONDS
wait_exit "$w0" 60; c0=$EXIT_CODE
echo "worker 1 exited $c1; the chief exited $c0, $((SECONDS - t1)) s after worker 1"
grep -h 'restored checkpoint\|not every replica\|unreachable' "$TMP/worker0.log" | sed 's/^/  /'
grep -h 'finished (' "$TMP/ps0.log" | sed 's/^/  ps 0: /'
[ "$c0" = 0 ] && [ "$c1" = 0 ] || fail "exit codes $c0, $c1"
[ $((SECONDS - t1)) -le 10 ] || fail "the chief waited $((SECONDS - t1)) s for a worker that had finished"
wait_exit "$p0" 30; wait_exit "$p1" 30
pass "the chief saw every replica done after ps 0 was restored"
