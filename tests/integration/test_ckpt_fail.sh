#!/usr/bin/env bash
# test_ckpt_fail — checkpoints that cannot be taken are failures, not warnings:
# a standalone cluster (1 ps + 1 worker) whose ps_server has its
# --checkpoint_dir on a 192 KiB tmpfs that the model's shard does not fit
# (RocksDB fails the write with "No space left on device"):
# - each periodic checkpoint fails, is counted (psctl status, the job status,
#   psc_worker_checkpoint_failures_total) and tried again at the next period;
# - `psctl checkpoint` fails with the PS's own status code (INTERNAL, exit 1:
#   not UNAVAILABLE / 69, which would mean "unreachable");
# - the end-of-training checkpoint fails: the job's final status is failed,
#   `psctl train` prints why and exits 1, the test accuracy is still printed,
#   and the chief's log says what to do (export the weights still on the PS).
# Needs to mount a tmpfs (root); skipped (77) otherwise.
source "$(dirname "$0")/lib.sh"
require_dataset

small_tmpfs 192k

small_spec "$TMP/job.json" 1 3 ', "checkpoint": {"every_steps": 20}'
mapfile -t ports < <("$BIN/psc_free_port" 3)
PS_ADDR=("127.0.0.1:${ports[0]}"); WORKER_ADDR=("127.0.0.1:${ports[1]}")
CLUSTER="{\"ps\": [\"${PS_ADDR[0]}\"], \"worker\": [\"${WORKER_ADDR[0]}\"]}"
start_ps 0 --checkpoint_dir "$TMP/small/ckpt"
wait_healthy "${PS_ADDR[0]}"
TF_CONFIG=$(tf_config worker 0) "$BIN/worker" --log_every_secs 0.5 --debug_step_delay_ms 20 \
    --metrics_port "${ports[2]}" >"$TMP/worker0.out" 2>"$TMP/worker0.log" &
WP=$!; PIDS+=($WP)
wait_healthy "${WORKER_ADDR[0]}"
PSCTL=("$BIN/psctl" --cluster "$CLUSTER")

"${PSCTL[@]}" train "$TMP/job.json" >"$TMP/train.out" 2>"$TMP/train.err" &
cli=$!
for _ in $(seq 300); do grep -q 'periodic checkpoint at step [0-9]* not taken' "$TMP/worker0.log" && break; sleep 0.1; done
grep -q 'periodic checkpoint at step [0-9]* not taken: .*trying again at the next period' "$TMP/worker0.log" ||
    fail "no periodic checkpoint failure in the chief's log"

# on demand: the PS's code, exit 1
set +e; "${PSCTL[@]}" checkpoint >"$TMP/ckpt.out" 2>&1; rc=$?; set -e
echo "psctl checkpoint: exit $rc: $(head -1 "$TMP/ckpt.out")"
[ $rc = 1 ] || fail "psctl checkpoint on a full disk exited $rc, expected 1: $(cat "$TMP/ckpt.out")"
grep -q 'INTERNAL' "$TMP/ckpt.out" || fail "psctl checkpoint did not relay the PS's INTERNAL: $(cat "$TMP/ckpt.out")"
grep -qi 'no space left' "$TMP/ckpt.out" || fail "psctl checkpoint does not say why: $(cat "$TMP/ckpt.out")"

# counted while the job runs
"${PSCTL[@]}" status >"$TMP/status.out" 2>&1 || fail "psctl status exited $?: $(cat "$TMP/status.out")"
grep -q '^checkpoints: 0 committed, [1-9][0-9]* failed (last failure: ' "$TMP/status.out" ||
    fail "psctl status does not count the failures: $(cat "$TMP/status.out")"
exec 3<>"/dev/tcp/127.0.0.1/${ports[2]}" || fail "cannot reach the worker's metrics port"
printf 'GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' >&3
timeout 10 cat <&3 >"$TMP/metrics.txt" || true
exec 3<&-
grep -Eq '^psc_worker_checkpoint_failures_total(\{role="[a-z]+"\})? [1-9]' "$TMP/metrics.txt" ||
    fail "psc_worker_checkpoint_failures_total is not counted: $(grep checkpoint "$TMP/metrics.txt")"

wait_exit "$cli" 120
echo "psctl train: exit $EXIT_CODE: $(grep -m1 'failed' "$TMP/train.err")"
[ "$EXIT_CODE" = 1 ] || fail "psctl train exited $EXIT_CODE after a failed final checkpoint, expected 1: $(tail -3 "$TMP/train.err")"
grep -q 'failed: training finished at global_step [0-9]* but the final checkpoint failed' "$TMP/train.err" ||
    fail "psctl train does not say the final checkpoint failed: $(cat "$TMP/train.err")"
grep -q 'checkpoints* committed, [1-9][0-9]* failed' "$TMP/train.err" || fail "psctl train does not count the failures: $(cat "$TMP/train.err")"
grep -q '^test accuracy: ' "$TMP/train.out" || fail "the evaluation is not printed"
grep -q 'the final checkpoint at global_step [0-9]* failed: .*psctl export' "$TMP/worker0.log" ||
    fail "the chief's log does not say what to do"
periodic=$(grep -c 'periodic checkpoint at step [0-9]* not taken' "$TMP/worker0.log")
[ "$periodic" -ge 2 ] || fail "the periodic checkpoint was not tried again ($periodic failures)"
"${PSCTL[@]}" status >"$TMP/status2.out" 2>&1 || true
grep -q '^job: .* failed' "$TMP/status2.out" || fail "status does not show the job failed: $(cat "$TMP/status2.out")"
echo "periodic failures: $periodic; status: $(grep '^checkpoints:' "$TMP/status2.out")"
for p in "${PIDS[@]}"; do kill -0 "$p" || fail "a daemon exited"; done
kill "${PIDS[@]}"
pass "checkpoint failures: counted and retried each period, on demand refused with the PS's code, a failed final checkpoint fails the job (exit 1)"
