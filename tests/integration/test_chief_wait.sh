#!/usr/bin/env bash
# test_chief_wait — the chief's end-of-job wait with replicas that never come
# (issue 21: its health probes of the replicas it waits for go out at once,
# not one after another). 1 ps + 5 workers in-cluster, async: the chief (fast)
# and worker 1 (slow) train; workers 2, 3 and 4 are never started, so their
# addresses refuse connections. The chief finishes first and waits: worker 1
# still trains and answers its probes, the other three miss them and are
# logged as unreachable, but waited for all the same (they may be restarting)
# until --wait_workers_secs (15 s). The job says "allow_partial": it then ends
# without them with one WARN naming each and its untrained steps, takes its
# final checkpoint, evaluates and stops the PS: every started process exits 0.
# Then 1 ps + 1 worker with checkpoint.every_steps 1: the chief's last step takes a periodic
# checkpoint at the final step, and the end of training's is still taken, at that step.
source "$(dirname "$0")/lib.sh"
require_dataset
small_spec "$TMP/job.json" 1 11 ', "checkpoint": {"every_steps": 1000}, "allow_partial": true'
cluster 1 5
start_ps 0 --checkpoint_dir "$TMP/ckpt0"; p0=$LAST_PID
wait_healthy "${PS_ADDR[0]}"
start_worker 1 "$TMP/job.json" --debug_step_delay_ms 100 --wait_workers_secs 15; w1=$LAST_PID
start_worker 0 "$TMP/job.json" --debug_step_delay_ms 5 --wait_workers_secs 15; w0=$LAST_PID
wait_exit "$w0" 100; c0=$EXIT_CODE
wait_exit "$w1" 30; c1=$EXIT_CODE
wait_exit "$p0" 30; cp=$EXIT_CODE
echo "the chief exited $c0, worker 1 $c1, the ps $cp"
grep -h 'waiting up to\|did not finish\|every other replica\|not every replica' "$TMP/worker0.log" | sed 's/^/  /'
[ "$c0" = 0 ] && [ "$c1" = 0 ] && [ "$cp" = 0 ] || fail "a process did not exit 0"
grep -q 'finished [0-9]* steps' "$TMP/worker1.log" || fail "worker 1 did not finish its steps"
grep -q 'not every replica finished within --wait_workers_secs 15 s: replica 2 (worker 2) trained 0 of 38 steps; replica 3 (worker 3) trained 0 of 38 steps; replica 4 (worker 4) trained 0 of 38 steps; the job ends without them (allow_partial)' "$TMP/worker0.log" ||
    fail "the chief did not give up on exactly the 3 replicas that never started"
grep -q 'unreachable: restarting?' "$TMP/worker0.log" || fail "the chief did not say which replicas are unreachable"
grep -q 'every other replica finished' "$TMP/worker0.log" && fail "the chief's wait ended the wrong way"
grep -q 'end of training) committed on every ps' "$TMP/worker0.log" || fail "no final checkpoint"
# worker 1 was waited for: it finished after the chief began to wait, and
# before the chief gave up on the others (ISO times compare as strings)
tw=$(grep -m1 'waiting up to' "$TMP/worker0.log" | cut -d' ' -f1)
t1=$(grep -m1 'finished [0-9]* steps' "$TMP/worker1.log" | cut -d' ' -f1)
tg=$(grep -m1 'the job ends without them' "$TMP/worker0.log" | cut -d' ' -f1)
echo "the chief began to wait at $tw, worker 1 finished at $t1, the chief gave up on the others at $tg"
[[ "$tw" < "$t1" ]] || fail "worker 1 finished ($t1) before the chief waited ($tw): nothing to show"
[[ "$t1" < "$tg" ]] || fail "the chief stopped waiting ($tg) before worker 1 finished ($t1)"
# A periodic checkpoint at the final step does not stand for the end of training's: with every_steps
# 1 the chief's last step takes one, and the final checkpoint follows at the same step.
small_spec "$TMP/one.json" 1 12 ', "checkpoint": {"every_steps": 1, "keep": 2}'
cluster 1 1
start_ps 0 --checkpoint_dir "$TMP/ckpt-one"; p0=$LAST_PID
wait_healthy "${PS_ADDR[0]}"
start_worker 0 "$TMP/one.json"; w0=$LAST_PID
wait_exit "$w0" 100; [ "$EXIT_CODE" = 0 ] || fail "one worker: the chief exited $EXIT_CODE"
wait_exit "$p0" 30
last=$(sed -n 's/.*checkpoint [0-9]* (periodic) committed on every ps: step \([0-9]*\),.*/\1/p' "$TMP/worker0.log" | tail -1)
fin=$(sed -n 's/.*checkpoint [0-9]* (end of training) committed on every ps: step \([0-9]*\),.*/\1/p' "$TMP/worker0.log")
[ -n "$last" ] && [ "$fin" = "$last" ] ||
    fail "one worker: the last periodic checkpoint at step '$last', the end of training's at '$fin' (expected the same step)"
echo "one worker, every_steps 1: a periodic checkpoint and the end of training's both at step $fin"
pass "the chief waited for the live replica and gave up on the unreachable ones; its final checkpoint follows a periodic one at the same step"
