#!/usr/bin/env bash
# test_criteo_cluster — a recommendation model end to end with the real
# programs: psc_gen_ctr writes a small synthetic Criteo click log (2 training
# shards, gzip, from a planted logistic model with embedding interactions) and
# prints the planted model's test AUC, the best any model can reach; 2 ps + 2
# workers (in-cluster mode) train a DLRM-style model with a wide part (bottom
# MLP over the 13 dense features, one shared embedding table over the 26
# categorical features hashed into 10^8 rows, pairwise dot interaction, top
# MLP, a dim-1 FTRL table summed into the logit; Adam elsewhere) for one epoch, each worker on
# its own file, and the chief prints "test AUC: A" over the test file. Run
# asynchronously, then with sync replicas (R = N = 2); both must reach the
# planted AUC minus 0.03. Then the same job through psctl in standalone-client
# mode: train, status and eval print the AUC, the evaluator evaluates it.
source "$(dirname "$0")/lib.sh"

data=$TMP/data
"$BIN/psc_gen_ctr" --out "$data" --train_rows 240000 --test_rows 30000 --files 2 --gzip --seed 11 \
    --max_cardinality 100000000 >"$TMP/gen.out" 2>"$TMP/gen.log" || fail "psc_gen_ctr failed"
planted=$(sed -n 's/.*planted model AUC on the test set: \([0-9.]*\).*/\1/p' "$TMP/gen.out")
[ -n "$planted" ] || fail "psc_gen_ctr printed no planted AUC: $(cat "$TMP/gen.out")"

# spec FILE EXTRA — the model, EXTRA spliced in as more top-level keys
spec() {
    cat >"$1" <<JSON
{"model": {"layers": [
    {"type": "embedding", "table": "emb", "features": ["C1","C2","C3","C4","C5","C6","C7","C8","C9","C10","C11",
      "C12","C13","C14","C15","C16","C17","C18","C19","C20","C21","C22","C23","C24","C25","C26"]},
    {"type": "wide", "table": "wide", "features": ["C1","C2","C3","C4","C5","C6","C7","C8","C9","C10","C11",
      "C12","C13","C14","C15","C16","C17","C18","C19","C20","C21","C22","C23","C24","C25","C26"]},
    {"type": "dense", "units": 32, "activation": "relu"},
    {"type": "dense", "units": 8, "activation": "relu"},
    {"type": "interaction"},
    {"type": "dense", "units": 32, "activation": "relu"},
    {"type": "dense", "units": 1}],
  "loss": "sigmoid_cross_entropy"},
 "tables": [{"name": "emb", "rows": 100000000, "dim": 8},
            {"name": "wide", "rows": 100000000, "dim": 1, "initializer": {"name": "zeros"},
             "optimizer": {"name": "ftrl", "learning_rate": 0.5}}],
 "optimizer": {"name": "adam", "learning_rate": 0.003},
 "data": {"format": "criteo", "train": "$data/train-*.tsv.gz", "test": "$data/test*.tsv*"},
 "batch_size_per_replica": 256, "epochs": 1, "seed": 5 $2}
JSON
}

# run NAME SPEC — 2 ps + 2 workers train SPEC; sets AUC from the chief's output
run() {
    local name=$1 sp=$2 i
    cluster 2 2
    local ps_pids=() w_pids=()
    for i in 0 1; do start_ps "$i"; ps_pids+=("$LAST_PID"); done
    for i in 0 1; do wait_healthy "${PS_ADDR[i]}"; done
    for i in 0 1; do start_worker "$i" "$sp"; w_pids+=("$LAST_PID"); done
    for i in 0 1; do
        wait_exit "${w_pids[i]}" 300
        [ "$EXIT_CODE" = 0 ] || fail "$name: worker $i exited $EXIT_CODE"
    done
    for i in 0 1; do wait_exit "${ps_pids[i]}" 20; done
    AUC=$(sed -n 's/^test AUC: \([0-9.]*\)$/\1/p' "$TMP/worker0.out")
    [ -n "$AUC" ] || fail "$name: the chief printed no test AUC: $(cat "$TMP/worker0.out")"
    grep -q "auc 0\.[0-9]" "$TMP/worker1.log" || fail "$name: worker 1's progress lines show no training AUC"
    grep -q "training on 1 data file pattern" "$TMP/worker1.log" || fail "$name: worker 1 did not start on its shard"
    echo "$name: test AUC $AUC, planted $planted"
    awk -v a="$AUC" -v p="$planted" 'BEGIN { exit !(a >= p - 0.03) }' ||
        fail "$name: test AUC $AUC is below the planted model's $planted minus 0.03"
    for i in 0 1; do mv "$TMP/worker$i.log" "$TMP/$name-worker$i.log.txt"; done
}

spec "$TMP/async.json" ""
run async "$TMP/async.json"
spec "$TMP/sync.json" ', "sync": {"replicas_to_aggregate": 2, "total_num_replicas": 2}'
run sync "$TMP/sync.json"
# standalone-client mode: daemons without a job (2 ps with checkpoints, 2 workers, an
# evaluator); psctl trains the async spec with a checkpoint every 100 steps and prints the
# chief's test AUC; status and eval report AUC; the evaluator evaluates the live model at
# each committed checkpoint
sed 's/"seed": 5/"seed": 5, "checkpoint": {"every_steps": 100}/' "$TMP/async.json" >"$TMP/standalone.json"
cluster 2 2
EVAL_ADDR="127.0.0.1:$("$BIN/psc_free_port" 1)"
CLUSTER="${CLUSTER%\}}, \"evaluator\": [\"$EVAL_ADDR\"]}"
for i in 0 1; do start_ps "$i" --checkpoint_dir "$TMP/ckpt$i"; done
for i in 0 1; do wait_healthy "${PS_ADDR[i]}"; done
for i in 0 1; do
    TF_CONFIG=$(tf_config worker "$i") "$BIN/worker" --log_every_secs 0.5 >"$TMP/sa-worker$i.out" 2>"$TMP/sa-worker$i.log" &
    PIDS+=($!)
done
TF_CONFIG=$(tf_config evaluator 0) "$BIN/worker" >"$TMP/evaluator.out" 2>"$TMP/evaluator.log" &
PIDS+=($!)
for i in 0 1; do wait_healthy "${WORKER_ADDR[i]}"; done
wait_healthy "$EVAL_ADDR"
PSCTL=("$BIN/psctl" --cluster "$CLUSTER")
"${PSCTL[@]}" train "$TMP/standalone.json" >"$TMP/train.out" 2>"$TMP/train.err" ||
    fail "psctl train exited $?: $(tail -3 "$TMP/train.err")"
auc=$(sed -n 's/^test AUC: \([0-9.]*\)$/\1/p' "$TMP/train.out")
[ -n "$auc" ] || fail "psctl train printed no test AUC: $(cat "$TMP/train.out")"
grep -q "^test log loss: 0\.[0-9]" "$TMP/train.out" || fail "psctl train printed no test log loss"
"${PSCTL[@]}" status >"$TMP/status.out" 2>&1 || fail "psctl status exited $?"
grep -q "succeeded.*auc 0\.[0-9]*).* test AUC $auc" "$TMP/status.out" || fail "status: $(cat "$TMP/status.out")"
"${PSCTL[@]}" eval >"$TMP/eval.out" 2>"$TMP/eval.err" || fail "psctl eval exited $?: $(cat "$TMP/eval.err")"
grep -q "^test AUC: $auc$" "$TMP/eval.out" || fail "eval of the final weights: $(cat "$TMP/eval.out"), the job's $auc"
for _ in $(seq 100); do grep -q "): test AUC 0\." "$TMP/evaluator.log" && break; sleep 0.2; done
grep -q "): test AUC 0\." "$TMP/evaluator.log" || fail "the evaluator evaluated no checkpoint"
echo "standalone: test AUC $auc"
# the evaluator evaluates each checkpoint itself (dense values and table rows read from it on
# the PS, no restore): psctl eval --checkpoint K gives the AUC it logged for K after training
# moved on; the final checkpoint exports the live model's bytes, an earlier one other bytes;
# an id that is not a committed checkpoint is refused by both
last=$(sed -n 's/.*checkpoint \([0-9]*\) (.*) committed on every ps.*/\1/p' "$TMP/sa-worker0.log" | tail -1)
[ -n "$last" ] || fail "the chief logged no committed checkpoint"
ids=""
for _ in $(seq 900); do # the evaluator goes through the checkpoints in order, up to the final one (180 s: ~20 s a checkpoint under ASan on a busy 2-core machine)
    ids=$(sed -n 's/.*evaluator: checkpoint \([0-9]*\) (step [0-9]*): test AUC .*/\1/p' "$TMP/evaluator.log")
    echo "$ids" | grep -qx "$last" && break
    sleep 0.2
done
echo "$ids" | grep -qx "$last" || fail "the evaluator did not evaluate the final checkpoint $last: $ids"
[ "$(echo "$ids" | grep -c .)" -ge 2 ] || fail "the evaluator evaluated fewer than 2 checkpoints: $ids"
k=$(echo "$ids" | tail -2 | head -1)
k_auc=$(sed -n "s/.*evaluator: checkpoint $k (step [0-9]*): test AUC \([0-9.]*\) .*/\1/p" "$TMP/evaluator.log")
"${PSCTL[@]}" eval --checkpoint "$k" >"$TMP/eval-k.out" 2>"$TMP/eval-k.err" ||
    fail "psctl eval --checkpoint $k exited $?: $(cat "$TMP/eval-k.err")"
grep -q "^test AUC: $k_auc$" "$TMP/eval-k.out" ||
    fail "eval of checkpoint $k: $(cat "$TMP/eval-k.out"); the evaluator logged $k_auc"
grep -q "evaluated checkpoint $k (global_step" "$TMP/eval-k.err" || fail "eval --checkpoint: $(cat "$TMP/eval-k.err")"
"${PSCTL[@]}" export --format safetensors -o "$TMP/live.st" >/dev/null 2>&1 || fail "psctl export failed"
"${PSCTL[@]}" export --format safetensors -o "$TMP/last.st" --checkpoint "$last" >"$TMP/exp.out" 2>&1 ||
    fail "psctl export --checkpoint $last: $(cat "$TMP/exp.out")"
grep -q "of job [0-9a-f]* checkpoint $last at global_step" "$TMP/exp.out" || fail "export: $(cat "$TMP/exp.out")"
cmp -s "$TMP/live.st" "$TMP/last.st" || fail "the final checkpoint $last exports other bytes than the live model"
"${PSCTL[@]}" export --format safetensors -o "$TMP/k.st" --checkpoint "$k" >/dev/null 2>&1 || fail "export of $k failed"
cmp -s "$TMP/live.st" "$TMP/k.st" && fail "checkpoint $k exports the live model's bytes: not read from the checkpoint"
"${PSCTL[@]}" eval --checkpoint 999999 >/dev/null 2>"$TMP/eval-bad.err" && fail "eval of checkpoint 999999 succeeded"
grep -q "checkpoint 999999 is not a committed checkpoint of job .* (kept: .*$last)" "$TMP/eval-bad.err" ||
    fail "eval of a missing checkpoint: $(cat "$TMP/eval-bad.err")"
"${PSCTL[@]}" export --format safetensors -o "$TMP/bad.st" --checkpoint 999999 >/dev/null 2>"$TMP/exp-bad.err" &&
    fail "export of checkpoint 999999 succeeded"
grep -q "checkpoint 999999" "$TMP/exp-bad.err" || fail "export of a missing checkpoint: $(cat "$TMP/exp-bad.err")"
[ ! -e "$TMP/bad.st" ] || fail "a failed export left a file"
echo "standalone: checkpoint $k AUC $k_auc (evaluator = psctl eval --checkpoint); checkpoint $last exports the live bytes"
pass "a DLRM-style model on synthetic Criteo data reaches the planted AUC - 0.03, async and sync; psctl and the evaluator report AUC"
