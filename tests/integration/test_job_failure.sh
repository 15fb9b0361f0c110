#!/usr/bin/env bash
# test_job_failure — a job that did not train all its data says so (README
# "Failure handling"), with real ps_server, worker and psctl processes:
#  1. in-cluster, async, a recommendation model on 2 Criteo shards, one with a
#     corrupted record at line 200: worker 1 reports it to the chief and exits
#     1; the chief stops, prints "training failed: replica 1 (worker 1): FILE:
#     line 200 ..." on stderr, prints no test AUC, exits 1 and tells the ps to
#     exit; no checkpoint is taken at the end (only the periodic ones);
#  2. the same data through psctl in standalone mode, sync R = N = 2: psctl
#     train prints the failure and exits 1, psctl status shows the job failed
#     with that reason, the chief's Prometheus job state says failed, and
#     worker 1 did not wait for the timeout rule step after step;
#  3. a dense job whose worker 1 is killed with -9 and restarted after 4 s
#     (more than the old three missed probes): the chief waits for it and the
#     job succeeds with every step of worker 1's share trained;
#  4. the same with worker 1 never restarted: the chief ends after
#     --wait_workers_secs with "replica 1 (worker 1) trained N of M steps" and
#     exit 1; the same job with "allow_partial": true ends 0;
#  5. an evaluator that cannot read its test set reports it and the training
#     job goes on to succeed.
source "$(dirname "$0")/lib.sh"

# ---- the data: 2 small synthetic Criteo shards, shard 1 corrupted ----
data=$TMP/data
"$BIN/psc_gen_ctr" --out "$data" --train_rows 8000 --test_rows 2000 --files 2 --seed 3 \
    --max_cardinality 100000 >"$TMP/gen.out" 2>"$TMP/gen.log" || fail "psc_gen_ctr failed"
bad=$(ls "$data"/train-00001-*.tsv)
sed -i '200s/^[01]\t/x\t/' "$bad"
sed -n 200p "$bad" | grep -q '^x' || fail "could not corrupt line 200 of $bad"

ctr_spec() {
    cat >"$1" <<JSON
{"model": {"layers": [
    {"type": "embedding", "table": "emb", "features": ["C1","C2","C3","C4","C5","C6","C7","C8"]},
    {"type": "dense", "units": 4, "activation": "relu"},
    {"type": "interaction"},
    {"type": "dense", "units": 1}],
  "loss": "sigmoid_cross_entropy"},
 "tables": [{"name": "emb", "rows": 1000000, "dim": 4}],
 "optimizer": {"name": "adam", "learning_rate": 0.003},
 "data": {"format": "criteo", "train": "$data/train-*.tsv", "test": "$data/test.tsv"},
 "batch_size_per_replica": 16, "epochs": 1, "seed": 5 ${2:-}}
JSON
}

# ---- 1. in-cluster: the corrupted record fails the job ----
ctr_spec "$TMP/ctr.json" ', "checkpoint": {"every_steps": 20}'
cluster 1 2
mkdir -p "$TMP/ck1"
start_ps 0 --checkpoint_dir "$TMP/ck1"; ps=$LAST_PID
wait_healthy "${PS_ADDR[0]}"
start_worker 0 "$TMP/ctr.json"; w0=$LAST_PID
start_worker 1 "$TMP/ctr.json"; w1=$LAST_PID
wait_exit "$w1" 120; [ "$EXIT_CODE" = 1 ] || fail "1: worker 1 exited $EXIT_CODE, expected 1"
wait_exit "$w0" 120; [ "$EXIT_CODE" = 1 ] || fail "1: the chief exited $EXIT_CODE, expected 1"
grep -q "training failed: replica 1 (worker 1): .*train-00001.*:200:" "$TMP/worker0.log" ||
    fail "1: the chief's stderr does not name the replica, the file and the line"
grep -q "test AUC" "$TMP/worker0.out" && fail "1: the chief printed a test AUC for a failed job"
grep -q "end of training" "$TMP/worker0.log" && fail "1: the chief took a final checkpoint of a failed job"
wait_exit "$ps" 30; [ "$EXIT_CODE" = 0 ] || fail "1: ps 0 exited $EXIT_CODE (the chief should tell it to exit)"
echo "1: in-cluster: $(grep -o 'training failed: .*' "$TMP/worker0.log" | head -1 | cut -c1-160)"

# ---- 2. standalone, sync R = N = 2, through psctl ----
ctr_spec "$TMP/sync.json" ', "sync": {"replicas_to_aggregate": 2, "total_num_replicas": 2, "timeout_secs": 5}'
cluster 1 2
start_ps 0; ps=$LAST_PID
mport=$("$BIN/psc_free_port" 1)
TF_CONFIG=$(tf_config worker 0) "$BIN/worker" --log_every_secs 0.5 --metrics_port "$mport" \
    >"$TMP/sa0.out" 2>"$TMP/sa0.log" & PIDS+=("$!"); s0=$!
TF_CONFIG=$(tf_config worker 1) "$BIN/worker" --log_every_secs 0.5 >"$TMP/sa1.out" 2>"$TMP/sa1.log" & PIDS+=("$!")
for a in "${PS_ADDR[0]}" "${WORKER_ADDR[@]}"; do wait_healthy "$a"; done
echo "$CLUSTER" >"$TMP/cluster.json"
t0=$(date +%s)
set +e
"$BIN/psctl" --cluster "$TMP/cluster.json" train "$TMP/sync.json" >"$TMP/psctl.out" 2>"$TMP/psctl.log"
code=$?
set -e
t1=$(date +%s)
[ "$code" = 1 ] || fail "2: psctl train exited $code, expected 1"
grep -q "^training failed: replica 1 (worker 1): .*:200:" "$TMP/psctl.log" ||
    fail "2: psctl train does not print the failure: $(cat "$TMP/psctl.log")"
# one sync timeout (5 s) at most, not one per remaining step
[ $((t1 - t0)) -lt 30 ] || fail "2: the failed sync job took $((t1 - t0)) s to end"
"$BIN/psctl" --cluster "$TMP/cluster.json" status >"$TMP/status.out" 2>&1 || true
grep -q "^job: [0-9a-f]* failed.*replica 1 (worker 1): .*:200:" "$TMP/status.out" ||
    fail "2: psctl status does not show the failure: $(cat "$TMP/status.out")"
curl -s "http://127.0.0.1:$mport/metrics" >"$TMP/metrics.txt" || fail "2: no metrics"
grep -q '^psc_worker_job_state{role="chief",state="failed"} 1' "$TMP/metrics.txt" ||
    fail "2: the job state metric does not say failed: $(grep job_state "$TMP/metrics.txt")"
grep -q 'job .* failed' "$TMP/sa1.log" || fail "2: worker 1's runner did not fail the job"
echo "2: standalone sync: psctl exit 1 after $((t1 - t0)) s; $(grep '^job:' "$TMP/status.out" | cut -c1-120)"
kill "$s0" 2>/dev/null || true

# ---- 3. and 4. a dense job, worker 1 killed ----
require_dataset
small_spec "$TMP/mlp.json" 2 7
# dense_run NAME RESTART_AFTER_SECS [EXTRA_FLAGS...] — sets CHIEF_CODE; RESTART_AFTER_SECS "never"
dense_run() {
    local name=$1 restart=$2; shift 2
    cluster 1 2
    start_ps 0; local p=$LAST_PID
    wait_healthy "${PS_ADDR[0]}"
    start_worker 0 "$TMP/mlp.json" --wait_workers_secs 12 "$@"; local c=$LAST_PID
    start_worker 1 "$TMP/mlp.json" --debug_step_delay_ms 10 "$@"; local k=$LAST_PID
    local t=0
    until grep -q "step [0-9]*/188" "$TMP/worker1.log" 2>/dev/null; do
        sleep 0.2; t=$((t + 1)); [ $t -lt 300 ] || fail "$name: worker 1 never trained"
    done
    kill -9 "$k"
    if [ "$restart" != never ]; then
        mv "$TMP/worker1.log" "$TMP/worker1-first.log"
        sleep "$restart"
        start_worker 1 "$TMP/mlp.json" "$@"; k=$LAST_PID
        wait_exit "$k" 120; [ "$EXIT_CODE" = 0 ] || fail "$name: the restarted worker 1 exited $EXIT_CODE"
    fi
    wait_exit "$c" 120; CHIEF_CODE=$EXIT_CODE
    kill "$p" 2>/dev/null || true
}
dense_run restart 4
[ "$CHIEF_CODE" = 0 ] || fail "3: the chief exited $CHIEF_CODE though worker 1 came back"
grep -q "resuming at step" "$TMP/worker1.log" || fail "3: the restarted worker 1 did not resume its share"
grep -q "finished 188 steps" "$TMP/worker1.log" || fail "3: worker 1 did not train all 188 steps of its share"
grep -q "test accuracy" "$TMP/worker0.out" || fail "3: no evaluation"
echo "3: restarted after 4 s: $(grep -o 'resuming at step [0-9]*' "$TMP/worker1.log"), the job succeeded"

dense_run never never
[ "$CHIEF_CODE" = 1 ] || fail "4: the chief exited $CHIEF_CODE though worker 1 never finished"
grep -q "training failed: not every replica finished within --wait_workers_secs 12 s: replica 1 (worker 1) trained [0-9]* of 188 steps" \
    "$TMP/worker0.log" || fail "4: the chief does not name the untrained steps"
echo "4: $(grep -o 'replica 1 (worker 1) trained [0-9]* of 188 steps' "$TMP/worker0.log")"
small_spec "$TMP/mlp.json" 2 7 ', "allow_partial": true'
dense_run partial never
[ "$CHIEF_CODE" = 0 ] || fail "4: allow_partial: the chief exited $CHIEF_CODE"
grep -q "the job ends without them (allow_partial)" "$TMP/worker0.log" || fail "4: allow_partial not said"

# ---- 5. the evaluator fails, training goes on ----
small_spec "$TMP/mlp1.json" 1 7
sed 's|"data": {|"data": {"test": "/nonexistent/t10k", |' "$TMP/mlp1.json" >"$TMP/mlp_badtest.json"
ports=($("$BIN/psc_free_port" 3))
CLUSTER="{\"ps\": [\"127.0.0.1:${ports[0]}\"], \"worker\": [\"127.0.0.1:${ports[1]}\"], \"evaluator\": [\"127.0.0.1:${ports[2]}\"]}"
start_ps 0; p=$LAST_PID
wait_healthy "127.0.0.1:${ports[0]}"
start_worker 0 "$TMP/mlp1.json" --debug_step_delay_ms 20; c=$LAST_PID
sleep 1
set +e
TF_CONFIG=$(tf_config evaluator 0) "$BIN/worker" --job_spec "$TMP/mlp_badtest.json" >"$TMP/eval.out" 2>"$TMP/eval.log"
ecode=$?
set -e
[ "$ecode" = 78 ] || fail "5: the evaluator exited $ecode, expected 78"
wait_exit "$c" 120; [ "$EXIT_CODE" = 0 ] || fail "5: the chief exited $EXIT_CODE after the evaluator failed"
grep -q "the evaluator (evaluator 0) failed: .*nonexistent.*training goes on" "$TMP/worker0.log" ||
    fail "5: the chief did not hear of the evaluator's failure"
wait_exit "$p" 30
echo "5: $(grep -o 'the evaluator (evaluator 0) failed: .\{0,80\}' "$TMP/worker0.log")"
pass "failed replicas fail the job; vanished ones are waited for; the evaluator's failure is shown"
