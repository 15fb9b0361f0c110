#!/usr/bin/env bash
# test_start_ps_crash — a PS that dies during the chief's start-up calls is
# ridden out like one that dies mid-training (found by test_soak; before the
# fix the chief exited 1: its start-up calls were outside the retry loop).
# 2 ps (with --checkpoint_dir) + 2 workers, async. The chief is killed and
# restarted (it joins the model), and ps 1 dies while the restarted chief's
# first call to it (Create) is in flight: gdb holds ps 1 at a breakpoint in its
# Create handler and kills it there; ps 1 is then restarted on its address and
# checkpoint dir. The chief retries, restores the latest checkpoint on every
# PS, and every process exits 0. Needs gdb and ps_server's symbol h_create.
source "$(dirname "$0")/lib.sh"
require_dataset
command -v gdb >/dev/null 2>&1 || skip "needs gdb"
small_spec "$TMP/job.json" 2 5 ', "placement": {"strategy": "round_robin", "min_shard_bytes": 40000},
 "checkpoint": {"every_steps": 25, "keep": 5}'
cluster 2 2
start_ps 0 --checkpoint_dir "$TMP/ckpt/ps0"; p0=$LAST_PID
start_ps 1 --checkpoint_dir "$TMP/ckpt/ps1"; p1=$LAST_PID
wait_healthy "${PS_ADDR[0]}"; wait_healthy "${PS_ADDR[1]}"
start_worker 0 "$TMP/job.json" --debug_step_delay_ms 30; w0=$LAST_PID
start_worker 1 "$TMP/job.json" --debug_step_delay_ms 30; w1=$LAST_PID
t=0
until grep -q 'checkpoint 2 (periodic) committed' "$TMP/worker0.log"; do sleep 0.1; t=$((t + 1)); [ $t -le 600 ] || fail "no checkpoint"; done
kill -9 "$w0"; wait_exit "$w0" 10
mv "$TMP/worker0.log" "$TMP/worker0.log.killed"
# gdb stops ps 1 in its Create handler, i.e. with the chief's call on the wire, and kills it there
gdb -p "$p1" -batch -ex 'break h_create' -ex 'continue' -ex 'kill' >"$TMP/gdb.log" 2>&1 &
gdbp=$!
t=0
until grep -q 'Breakpoint 1 at' "$TMP/gdb.log" 2>/dev/null; do sleep 0.1; t=$((t + 1)); [ $t -le 300 ] || fail "gdb did not attach: $(cat "$TMP/gdb.log")"; done
start_worker 0 "$TMP/job.json" --debug_step_delay_ms 30; w0=$LAST_PID
wait "$gdbp" || true
grep -q 'h_create' "$TMP/gdb.log" || fail "ps 1 did not stop in h_create: $(tail -5 "$TMP/gdb.log")"
wait_exit "$p1" 10
mv "$TMP/ps1.log" "$TMP/ps1.log.killed"
start_ps 1 --checkpoint_dir "$TMP/ckpt/ps1"; p1=$LAST_PID
echo "ps 1 died under the restarted chief's first call and was restarted"
wait_exit "$w0" 120; c0=$EXIT_CODE
echo "the chief exited $c0"
grep -h 'ERROR\|restored\|joining' "$TMP/worker0.log" | sed 's/^/  /'
[ "$c0" = 0 ] || fail "the chief did not ride out a ps crash during its start-up"
wait_exit "$w1" 120; wait_exit "$p0" 30; wait_exit "$p1" 30
pass "the chief rode out a ps crash during its start-up"
