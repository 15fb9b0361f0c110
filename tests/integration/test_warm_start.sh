#!/usr/bin/env bash
# test_warm_start — the daily-retrain loop with the real programs. psc_gen_ctr
# writes one synthetic click log (one planted model) cut into two days: file A
# (day 1) and file B (day 2), and a test file. On a standalone cluster (2 ps
# with checkpoints, 1 worker) psctl trains day 1 on A; day 2 warm-starts from
# day 1's final checkpoint (psctl train --warm_start JOB_ID) and trains its own
# full schedule on B: its first logged losses are near day 1's last and far
# below a cold start's, and its test AUC beats a cold start on B alone. Day 1's
# checkpoint exported to safetensors warm-starts the same job on another
# cluster of 3 ps (the rows re-partitioned) and trains to the same test AUC. Bad
# warm starts are refused with the reason, changing nothing: a file that does
# not exist, a table of another dim, a checkpoint id that is not the job's; in-cluster, the
# chief exits 78.
source "$(dirname "$0")/lib.sh"

data=$TMP/data
"$BIN/psc_gen_ctr" --out "$data" --train_rows 60000 --test_rows 20000 --files 2 --seed 23 \
    --max_cardinality 100000 >"$TMP/gen.out" 2>"$TMP/gen.log" || fail "psc_gen_ctr failed"
A=$data/train-00000-of-00002.tsv
B=$data/train-00001-of-00002.tsv
[ -f "$A" ] && [ -f "$B" ] || fail "psc_gen_ctr wrote no day files: $(ls "$data")"

# spec FILE TRAIN SEED DIM [EXTRA] — a small DLRM on one day's file
spec() {
    cat >"$1" <<JSON
{"model": {"layers": [
    {"type": "embedding", "table": "emb", "features": ["C1","C2","C3","C4","C5","C6","C7","C8","C9","C10","C11",
      "C12","C13","C14","C15","C16","C17","C18","C19","C20","C21","C22","C23","C24","C25","C26"]},
    {"type": "dense", "units": 16, "activation": "relu"},
    {"type": "dense", "units": $4},
    {"type": "interaction"},
    {"type": "dense", "units": 16, "activation": "relu"},
    {"type": "dense", "units": 1}],
  "loss": "sigmoid_cross_entropy"},
 "tables": [{"name": "emb", "rows": 100000, "dim": $4}],
 "optimizer": {"name": "adam", "learning_rate": 0.003},
 "data": {"format": "criteo", "train": "$2", "test": "$data/test.tsv"},
 "checkpoint": {"every_steps": 50, "keep": 2},
 "batch_size_per_replica": 256, "epochs": 1, "seed": $3 ${5:-}}
JSON
}

# standalone NPS — daemons without a job: NPS ps (checkpoints in $TMP/ckpt-NPS-i), 1 worker
standalone() {
    local nps=$1 i
    NPS=$nps
    cluster "$nps" 1
    for ((i = 0; i < nps; i++)); do start_ps "$i" --checkpoint_dir "$TMP/ckpt-$nps-$i"; done
    for ((i = 0; i < nps; i++)); do wait_healthy "${PS_ADDR[i]}"; done
    # a progress line every 0.02 s: a job's first line is always an early period's loss, however fast the
    # machine trains (at 0.2 s a 118-step job once logged one line, its whole run's mean)
    TF_CONFIG=$(tf_config worker 0) "$BIN/worker" --log_every_secs 0.02 >"$TMP/w$nps.out" 2>"$TMP/w$nps.log" &
    PIDS+=($!)
    wait_healthy "${WORKER_ADDR[0]}"
    PSCTL=("$BIN/psctl" --cluster "$CLUSTER")
}

# loss_median LOG COND — the median of the losses of LOG's progress lines i for which the awk condition
# COND holds (s[i]: the line's global_step, s[NR] the last's)
loss_median() {
    grep -o 'global_step [0-9]* loss [0-9.]*' "$1" |
        awk '{ s[NR] = $2; l[NR] = $4 } END { for (i = 1; i <= NR; i++) if ('"$2"') print l[i] }' |
        sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'
}

# train NAME SPEC [psctl flags] — sets AUC, JOB, FIRST and LAST (loss_median of the first tenth's and
# the second half's losses)
train() {
    local name=$1 sp=$2; shift 2
    local log=$TMP/w$NPS.log at
    at=$(wc -l <"$log")
    "${PSCTL[@]}" train "$sp" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" ||
        fail "$name: psctl train exited $?: $(tail -3 "$TMP/$name.err")"
    tail -n +"$((at + 1))" "$log" >"$TMP/$name.log"
    AUC=$(sed -n 's/^test AUC: \([0-9.]*\)$/\1/p' "$TMP/$name.out")
    JOB=$(sed -n 's/.*job \([0-9a-f]*\) submitted.*/\1/p' "$TMP/$name.err")
    # medians of the losses logged in the job's first tenth (at least its first line) and in its
    # second half: a short period's loss (a step or two) is noisy
    FIRST=$(loss_median "$TMP/$name.log" '10 * s[i] <= s[NR] || i == 1')
    LAST=$(loss_median "$TMP/$name.log" '2 * s[i] > s[NR]')
    [ -n "$AUC" ] && [ -n "$JOB" ] && [ -n "$FIRST" ] || fail "$name: no AUC, job or loss: $(tail -5 "$TMP/$name.err")"
    echo "$name: job $JOB, test AUC $AUC, logged loss $FIRST -> $LAST"
}

standalone 2
spec "$TMP/day1.json" "$A" 5 8
train day1 "$TMP/day1.json"
day1=$JOB day1_last=$LAST
ckpt=$(sed -n 's/.*checkpoint \([0-9]*\) (end of training) committed on every ps.*/\1/p' "$TMP/w2.log" | tail -1)
[ -n "$ckpt" ] || fail "day 1's chief logged no final checkpoint"
"${PSCTL[@]}" export --format safetensors -o "$TMP/day1.st" --checkpoint "$ckpt" >/dev/null 2>"$TMP/exp.err" ||
    fail "export of day 1's checkpoint $ckpt: $(cat "$TMP/exp.err")"

spec "$TMP/cold.json" "$B" 6 8
train cold "$TMP/cold.json"
cold_auc=$AUC cold_first=$FIRST

# day 2 on B from day 1's final checkpoint (the PS hold the cold job's model meanwhile)
spec "$TMP/day2.json" "$B" 5 8
train day2 "$TMP/day2.json" --warm_start "$day1"
grep -q "warm start from checkpoint $ckpt of job $day1 (step [0-9]*): 8 variables and 1 tables" "$TMP/w2.log" ||
    fail "day 2's chief did not log its warm start: $(grep -i 'warm' "$TMP/w2.log")"
awk -v w="$AUC" -v c="$cold_auc" 'BEGIN { exit !(w > c + 0.005) }' ||
    fail "day 2's test AUC $AUC does not beat a cold start's $cold_auc"
awk -v f="$FIRST" -v l="$day1_last" -v c="$cold_first" 'BEGIN { exit !(f < l + 0.05 && f < c - 0.05) }' ||
    fail "day 2's first loss $FIRST is not day 1's last $day1_last (+-noise) below the cold start's $cold_first"
day2_auc=$AUC

# bad warm starts: refused at start with the reason; the cluster trains on afterwards
"${PSCTL[@]}" train "$TMP/day2.json" --warm_start "$TMP/nothing.st" >/dev/null 2>"$TMP/bad1.err" &&
    fail "a warm start from a missing file succeeded"
grep -q "warm start: cannot open $TMP/nothing.st" "$TMP/bad1.err" || fail "missing file: $(tail -2 "$TMP/bad1.err")"
spec "$TMP/dim4.json" "$B" 5 4
"${PSCTL[@]}" train "$TMP/dim4.json" --warm_start "$day1" >/dev/null 2>"$TMP/bad2.err" &&
    fail "a warm start of a dim-4 table from dim-8 rows succeeded"
grep -q "warm start: variable dense_1/kernel is F32 \[16, 4\] in this job's model but F32 \[16, 8\] in checkpoint $ckpt" \
    "$TMP/bad2.err" || fail "shape mismatch: $(tail -2 "$TMP/bad2.err")"
spec "$TMP/dim4t.json" "$B" 5 4 ', "warm_start": {"from": "'"$day1"'", "variables": "none"}'
"${PSCTL[@]}" train "$TMP/dim4t.json" >/dev/null 2>"$TMP/bad4.err" && fail "a dim-4 table warm-started from dim-8 rows"
grep -q "warm start: table emb has dim 4 in this job but its rows in checkpoint $ckpt of job $day1 .* are F32 of rank 2 (dim 8)" \
    "$TMP/bad4.err" || fail "dim mismatch: $(tail -2 "$TMP/bad4.err")"
"${PSCTL[@]}" train "$TMP/day2.json" --warm_start "$day1" --checkpoint 999999 >/dev/null 2>"$TMP/bad3.err" &&
    fail "a warm start from checkpoint 999999 succeeded"
grep -q "warm start: checkpoint 999999 is not a committed checkpoint of job $day1 on every ps_server (kept: .*$ckpt)" \
    "$TMP/bad3.err" || fail "evicted checkpoint: $(tail -2 "$TMP/bad3.err")"
echo "day 2 (warm, checkpoint $ckpt): AUC $day2_auc > cold $cold_auc; first loss $FIRST ~ day 1's last $day1_last"

# the model moves between clusters: day 1's export warm-starts day 2 on 3 ps
for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
standalone 3
train day2-3ps "$TMP/day2.json" --warm_start "$TMP/day1.st"
grep -q "warm start from file $TMP/day1.st: 8 variables and 1 tables" "$TMP/w3.log" ||
    fail "the 3-ps chief did not log its warm start from the file"
# one worker trains deterministically: the same values, wherever their rows live, train the same model
[ "$AUC" = "$day2_auc" ] || fail "day 2 on 3 ps from the export: test AUC $AUC, on 2 ps from the checkpoint $day2_auc"
echo "day 2 on 3 ps from day 1's safetensors export: AUC $AUC"

# in-cluster: a warm start that cannot be is a bad configuration (exit 78)
for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
cluster 1 1
start_ps 0
wait_healthy "${PS_ADDR[0]}"
spec "$TMP/bad.json" "$B" 5 8 ', "warm_start": {"from": "'"$TMP"'/nothing.st"}'
start_worker 0 "$TMP/bad.json"
wait_exit "$LAST_PID" 60
[ "$EXIT_CODE" = 78 ] || fail "the in-cluster chief with a missing warm-start file exited $EXIT_CODE, not 78"
grep -q "warm start: cannot open" "$TMP/worker0.log" || fail "in-cluster: $(tail -2 "$TMP/worker0.log")"
pass "day 2 warm-started from day 1 (checkpoint on the PS, or its export on 3 ps) beats a cold start; bad warm starts refused"
