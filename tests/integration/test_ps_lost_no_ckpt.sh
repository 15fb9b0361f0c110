#!/usr/bin/env bash
# test_ps_lost_no_ckpt — a PS restarted before any checkpoint (issue 16 item 7).
# 2 ps without --checkpoint_dir + 2 workers, async, round_robin placement. While
# they train, ps 1 (the one without global_step) is killed with SIGKILL and
# restarted empty. With no checkpoint to restore, the chief keeps ps 0's
# trained shard and re-initializes ps 1's, and says so: one WARN naming ps 1
# and exactly the variables placed on it (computed here from the model:
# round_robin puts variable k, in creation order with global_step first, on
# ps k mod 2), that the other ps keep their trained values, and how to avoid it.
# Training completes with every process exiting 0, and global_step was not
# reset: the step the workers continue at, and the final one, are at least the
# one read before the kill. Then a recommendation model (1 worker): the WARN
# also names the table part ps 1 held and the rows it had.
source "$(dirname "$0")/lib.sh"
require_dataset
small_spec "$TMP/job.json" 2 5 ', "placement": {"strategy": "round_robin"}'
# the model's variables in creation order (small_spec: flatten, dense 32, dense 10)
VARS=(global_step dense/kernel dense/bias dense_1/kernel dense_1/bias)
want=()
for k in "${!VARS[@]}"; do [ $((k % 2)) = 1 ] && want+=("${VARS[k]}"); done
cluster 2 2
start_ps 0; p0=$LAST_PID
start_ps 1; p1=$LAST_PID
wait_healthy "${PS_ADDR[0]}"; wait_healthy "${PS_ADDR[1]}"
start_worker 0 "$TMP/job.json" --debug_step_delay_ms 20 --retry_secs 60; w0=$LAST_PID
start_worker 1 "$TMP/job.json" --debug_step_delay_ms 20 --retry_secs 60; w1=$LAST_PID
t=0
until grep -q 'global_step [0-9]*[1-9][0-9] ' "$TMP/worker0.log" 2>/dev/null; do
    sleep 0.1; t=$((t + 1)); [ $t -le 600 ] || fail "the workers did not reach global_step 10"
done
before=$("$BIN/psc_dump" "$TMP/job.json" "$CLUSTER" "$TMP/before.slab") || fail "psc_dump before the kill"
echo "global_step before the kill: $before"
[ "$before" -ge 10 ] || fail "global_step $before before the kill"
kill -9 "$p1"; wait_exit "$p1" 10
mv "$TMP/ps1.log" "$TMP/ps1.log.killed"
start_ps 1; p1=$LAST_PID
echo "ps 1 killed and restarted empty (no --checkpoint_dir anywhere)"
wait_exit "$w0" 180; c0=$EXIT_CODE
wait_exit "$w1" 60; c1=$EXIT_CODE
wait_exit "$p0" 30; cp0=$EXIT_CODE
wait_exit "$p1" 30; cp1=$EXIT_CODE
echo "exit codes: chief $c0, worker 1 $c1, ps 0 $cp0, ps 1 $cp1"
[ "$c0$c1$cp0$cp1" = 0000 ] || fail "a process exited non-zero: chief $c0, worker 1 $c1, ps 0 $cp0, ps 1 $cp1"

# the WARN: one line, ps 1, exactly its variables, the others kept, the advice
grep -a 'WARN .*lost its shard and there is no checkpoint to restore: re-initialized' "$TMP/worker0.log" >"$TMP/warn.txt" || fail "the chief gave no WARN about a re-initialized shard"
sed 's/^/  /' "$TMP/warn.txt"
[ "$(wc -l <"$TMP/warn.txt")" = 1 ] || fail "want one WARN line, got $(wc -l <"$TMP/warn.txt")"
grep -q 'ps 1 lost its shard' "$TMP/warn.txt" || fail "the WARN does not name ps 1"
named=$(sed -n 's/.*variables\{0,1\} (\([^)]*\)).*/\1/p' "$TMP/warn.txt")
expect=$(IFS=,; echo "${want[*]}" | sed 's/,/, /g')
[ "$named" = "$expect" ] || fail "the WARN names '$named', want exactly the variables on ps 1: '$expect'"
grep -q "while ps 0 keeps its trained values" "$TMP/warn.txt" || fail "the WARN does not say ps 0 keeps its values"
grep -q -- '--checkpoint_dir' "$TMP/warn.txt" && grep -q 'checkpoint.every_steps' "$TMP/warn.txt" ||
    fail "the WARN does not say how to avoid it"

# the surviving shard was kept: global_step went on from where it was
again=$(sed -n 's/.*answer again after .*continuing at global_step \([0-9]*\).*/\1/p' "$TMP/worker0.log" | head -1)
final=$(sed -n 's/.*evaluation on .* at global_step \([0-9]*\):.*/\1/p' "$TMP/worker0.log" | tail -1)
echo "global_step: $before before the kill, ${again:-?} when the chief continued, ${final:-?} at the end"
[ -n "$again" ] && [ "$again" -ge "$before" ] || fail "global_step was reset: ${again:-none} after the restart, $before before"
[ -n "$final" ] && [ "$final" -ge "$before" ] || fail "final global_step ${final:-none} < $before before the kill"

# ---- a recommendation model: the WARN also names the table part ps 1 held and its rows ----
"$BIN/psc_gen_ctr" --out "$TMP/data" --train_rows 20000 --test_rows 1000 --files 1 --seed 4 \
    --max_cardinality 100000 >"$TMP/gen.out" 2>&1 || fail "psc_gen_ctr failed"
cat >"$TMP/ctr.json" <<JSON
{"model": {"layers": [{"type": "embedding", "table": "emb", "features": ["C1","C2","C3","C4","C5","C6"]},
    {"type": "dense", "units": 4, "activation": "relu"}, {"type": "interaction"}, {"type": "dense", "units": 1}],
  "loss": "sigmoid_cross_entropy"},
 "tables": [{"name": "emb", "rows": 1000000, "dim": 4}],
 "optimizer": {"name": "adam", "learning_rate": 0.003},
 "data": {"format": "criteo", "train": "$TMP/data/train-*.tsv", "test": "$TMP/data/test.tsv"},
 "batch_size_per_replica": 32, "epochs": 1, "seed": 5}
JSON
mv "$TMP/worker0.log" "$TMP/worker0.log.dense"
cluster 2 1
start_ps 0; p0=$LAST_PID
start_ps 1; p1=$LAST_PID
wait_healthy "${PS_ADDR[0]}"; wait_healthy "${PS_ADDR[1]}"
start_worker 0 "$TMP/ctr.json" --debug_step_delay_ms 10 --retry_secs 60; w0=$LAST_PID
t=0
until grep -q 'step [0-9]*[1-9][0-9] ' "$TMP/worker0.log" 2>/dev/null; do
    sleep 0.1; t=$((t + 1)); [ $t -le 600 ] || fail "the CTR job did not reach step 10"
done
kill -9 "$p1"; wait_exit "$p1" 10
mv "$TMP/ps1.log" "$TMP/ps1.log.killed-ctr"
start_ps 1; p1=$LAST_PID
wait_exit "$w0" 180; [ "$EXIT_CODE" = 0 ] || fail "the CTR chief exited $EXIT_CODE"
grep -a 'WARN .*lost its shard and there is no checkpoint to restore' "$TMP/worker0.log" >"$TMP/warn2.txt" ||
    fail "the CTR chief gave no WARN about a re-initialized shard"
sed 's/^/  /' "$TMP/warn2.txt"
grep -Eq 'and emptied its table parts emb part [01] of 2 \([1-9][0-9]* rows lost\)' "$TMP/warn2.txt" ||
    fail "the WARN does not name the table part ps 1 held and its rows"
pass "a ps lost before any checkpoint: its shard re-initialized with a WARN naming its variables and table parts, the other kept"
