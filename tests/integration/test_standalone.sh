#!/usr/bin/env bash
# test_standalone — standalone-client mode on real processes: daemons started
# without a job wait; psctl drives them:
# 1. an idle cluster (2 ps + 2 workers) and `psctl train` to completion: the
#    evaluation is printed, exit 0, the daemons stay up; `psctl status` lists
#    members, the job and the variables per PS;
# 2. `psctl export --format safetensors`: re-read by an independent parser
#    (psc_safetensors_check) whose tensors equal a pull of the same model;
# 3. SIGINT to psctl mid-job cancels the job (exit 130) and the chief
#    checkpoints it as it is, the cluster stays up, and a second job on the
#    same cluster then trains to the end;
# 4. `psctl train --detach` returns at once; `psctl attach` follows the job to
#    its end; a client pointed at a dead address fails within its deadline
#    naming the address;
# 5. the evaluator task evaluated job 1's checkpoints; the chief's and the
#    evaluator's TensorBoard files (--logdir) read back with an independent
#    reader (psc_tfevents_read): framing, CRCs, tags, and the final test
#    accuracy equal to the printed one; `psctl eval` of job 1's weights equals
#    job 1's own evaluation.
source "$(dirname "$0")/lib.sh"
require_dataset

spec() { small_spec "$1" "$2" "$3" ', "placement": {"min_shard_bytes": 40000}'"${4:-}"; } # spec FILE EPOCHS SEED [EXTRA]
spec "$TMP/a.json" 2 1 ', "checkpoint": {"every_steps": 30}' # 2 epochs: async 2 + 2 under ASan and load once ended 1 epoch at 0.67 (0.78-0.81 usually)
spec "$TMP/b.json" 1 2
spec "$TMP/long.json" 30 3

cluster 2 2
EVAL_ADDR="127.0.0.1:$("$BIN/psc_free_port" 1)"
CLUSTER="${CLUSTER%\}}, \"evaluator\": [\"$EVAL_ADDR\"]}"
PSP=()
for i in 0 1; do start_ps "$i" --checkpoint_dir "$TMP/ckpt$i"; PSP+=("$LAST_PID"); done
for i in 0 1; do wait_healthy "${PS_ADDR[i]}"; done
# a PS holds a connection per worker: its open-files limit is raised to the hard limit
for pid in "${PSP[@]}"; do
    read -r soft hard < <(awk '/^Max open files/ {print $4, $5}' "/proc/$pid/limits")
    [ "$soft" = "$hard" ] || fail "ps_server $pid: open files soft limit $soft, hard $hard (not raised)"
done
WP=()
for i in 0 1; do
    TF_CONFIG=$(tf_config worker "$i") "$BIN/worker" --log_every_secs 0.5 --debug_step_delay_ms 5 --logdir "$TMP/tb" \
        >"$TMP/worker$i.out" 2>"$TMP/worker$i.log" &
    WP+=($!); PIDS+=($!)
done
TF_CONFIG=$(tf_config evaluator 0) "$BIN/worker" --logdir "$TMP/tb" >"$TMP/evaluator.out" 2>"$TMP/evaluator.log" &
WP+=($!); PIDS+=($!)
for i in 0 1; do wait_healthy "${WORKER_ADDR[i]}"; done
wait_healthy "$EVAL_ADDR"
grep -q 'no job: ready and waiting' "$TMP/worker1.log" || fail "an idle worker did not say it waits"
PSCTL=("$BIN/psctl" --cluster "$CLUSTER")

# ---- 1. train to completion, status ----
"${PSCTL[@]}" train "$TMP/a.json" >"$TMP/train1.out" 2>"$TMP/train1.err" || fail "psctl train exited $?: $(cat "$TMP/train1.err")"
acc=$(sed -n 's/^test accuracy: //p' "$TMP/train1.out")
echo "job 1: test accuracy $acc; $(grep 'succeeded' "$TMP/train1.err")"
awk -v a="$acc" 'BEGIN { exit !(a >= 0.70) }' || fail "accuracy $acc"
grep -q 'epoch [12]/2 step' "$TMP/train1.err" || fail "no progress lines"
for p in "${PSP[@]}" "${WP[@]}"; do kill -0 "$p" || fail "a daemon exited after the job"; done
"${PSCTL[@]}" status >"$TMP/status.out" || fail "psctl status failed"
sed 's/^/  /' "$TMP/status.out"
[ "$(grep -c 'SERVING' "$TMP/status.out")" = 5 ] || fail "status should show 5 serving members"
grep -q '^job: .* succeeded' "$TMP/status.out" || fail "status does not show the finished job"
grep -q 'dense/kernel/part_1' "$TMP/status.out" || fail "status does not list the variables per PS"

# ---- 5a. eval of job 1's weights, the evaluator, TensorBoard files ----
"${PSCTL[@]}" eval >"$TMP/eval.out" 2>"$TMP/eval.err" || fail "psctl eval failed: $(cat "$TMP/eval.err")"
[ "$(head -1 "$TMP/eval.out")" = "test accuracy: $acc" ] || fail "psctl eval says $(head -1 "$TMP/eval.out"), job 1 said $acc"
for _ in $(seq 100); do grep -q 'every replica finished' "$TMP/evaluator.log" && break; sleep 0.1; done
grep -q 'evaluator: checkpoint [0-9]* (step [0-9]*): test accuracy' "$TMP/evaluator.log" || fail "the evaluator evaluated no checkpoint"
echo "evaluator: $(grep -c 'evaluator: checkpoint' "$TMP/evaluator.log") checkpoints evaluated, last: $(grep 'evaluator: checkpoint' "$TMP/evaluator.log" | tail -1 | sed 's/.*evaluator: //')"
chief_tb=$(ls "$TMP"/tb/events.out.tfevents.*.chief | head -1)
eval_tb=$(ls "$TMP"/tb/eval/events.out.tfevents.*.evaluator | head -1)
"$BIN/psc_tfevents_read" "$chief_tb" >"$TMP/chief_tb.txt" || fail "the chief's event file does not read back"
"$BIN/psc_tfevents_read" "$eval_tb" >"$TMP/eval_tb.txt" || fail "the evaluator's event file does not read back"
for tag in loss accuracy steps_per_sec test/accuracy; do grep -q " $tag " "$TMP/chief_tb.txt" || fail "no $tag in $chief_tb"; done
grep -q ' eval/accuracy ' "$TMP/eval_tb.txt" || fail "no eval/accuracy in $eval_tb"
tb_acc=$(awk '$2 == "test/accuracy" { printf "%.4f", $3 }' "$TMP/chief_tb.txt")
[ "$tb_acc" = "$acc" ] || fail "test/accuracy in TensorBoard $tb_acc, printed $acc"
echo "tensorboard: chief $(wc -l <"$TMP/chief_tb.txt") scalars (test/accuracy $tb_acc), evaluator $(wc -l <"$TMP/eval_tb.txt")"

# ---- 2. export ----
"${PSCTL[@]}" export --format safetensors -o "$TMP/model.safetensors" || fail "export failed"
"$BIN/psc_dump" "$TMP/a.json" "$CLUSTER" "$TMP/pull.bin" >/dev/null || fail "pull failed"
"$BIN/psc_safetensors_check" "$TMP/model.safetensors" "$TMP/a.json" "$TMP/pull.bin" || fail "the safetensors file does not match a pull"

# ---- 3. Ctrl-C cancels; a second job then runs ----
"${PSCTL[@]}" train "$TMP/long.json" >"$TMP/train2.out" 2>"$TMP/train2.err" &
cli=$!
for _ in $(seq 300); do grep -q 'step [1-9][0-9]*/' "$TMP/train2.err" 2>/dev/null && break; sleep 0.1; done
kill -INT "$cli"
wait_exit "$cli" 60
[ "$EXIT_CODE" = 130 ] || fail "psctl after Ctrl-C exited $EXIT_CODE, expected 130: $(tail -3 "$TMP/train2.err")"
grep -q 'cancelled' "$TMP/train2.err" || fail "no cancellation reported"
# a cancelled job keeps what it trained: the chief checkpoints it as it is (its spec has no periodic ones)
grep -q 'checkpoint [0-9]* (cancelled) committed on every ps' "$TMP/worker0.log" || fail "the cancelled job took no checkpoint"
for p in "${PSP[@]}" "${WP[@]}"; do kill -0 "$p" || fail "a daemon exited after the cancel"; done
"${PSCTL[@]}" train "$TMP/b.json" >"$TMP/train3.out" 2>"$TMP/train3.err" || fail "the second job failed: $(tail -3 "$TMP/train3.err")"
grep -q '^test accuracy' "$TMP/train3.out" || fail "the second job printed no evaluation"
echo "cancel then second job: $(grep cancelled "$TMP/train2.err" | head -1); second job $(cat "$TMP/train3.out" | head -1)"

# ---- 4. detach / attach; dead address ----
"${PSCTL[@]}" train --detach "$TMP/a.json" 2>"$TMP/detach.err" || fail "detach failed: $(cat "$TMP/detach.err")"
grep -q 'detached' "$TMP/detach.err" || fail "detach did not return at once"
"${PSCTL[@]}" attach >"$TMP/attach.out" 2>"$TMP/attach.err" || fail "attach failed: $(tail -3 "$TMP/attach.err")"
grep -q '^test accuracy' "$TMP/attach.out" || fail "attach did not follow the job to its evaluation"
dead=$("$BIN/psc_free_port" 1)
start=$(date +%s)
set +e; msg=$("$BIN/psctl" --chief "127.0.0.1:$dead" --timeout_secs 2 attach 2>&1); code=$?; set -e
took=$(( $(date +%s) - start ))
echo "dead address: exit $code after ${took}s: $(echo "$msg" | tail -1)"
[ $code = 69 ] && echo "$msg" | grep -q "127.0.0.1:$dead" || fail "dead address: exit $code: $msg"
[ $took -le 10 ] || fail "dead address took ${took}s (deadline 2 s)"

kill "${PSP[@]}" "${WP[@]}"
for p in "${PSP[@]}" "${WP[@]}"; do wait_exit "$p" 30; [ "$EXIT_CODE" = 0 ] || fail "a daemon exited $EXIT_CODE on SIGTERM"; done
pass "standalone-client mode: train, status, export, cancel + second job, detach/attach, dead address"
