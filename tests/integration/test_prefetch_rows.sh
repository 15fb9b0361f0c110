#!/usr/bin/env bash
# test_prefetch_rows — the rows of the next batches pulled while a step computes ("prefetch_rows",
# worker/job/ctr_prefetch.h) change what a step waits for, never what it reads from this worker:
#   A: 1 ps + 1 worker (standalone-client mode) train the same recommendation job (a lazy-Adam
#      embedding table and an FTRL wide table over 8 features (C17-C24) of SYNTHETIC Criteo data with few
#      distinct values, so consecutive batches share many rows) with "prefetch_rows" 0 (the
#      serial path) and 1: the exported models are byte for byte the same. A row that a batch
#      shares with the one before must be read after that batch's update of it, and the last
#      step's pushes must land before the job ends, or the bytes differ. The worker reports which
#      share of the pushed rows was on the steps' critical path (here more than 10 %). Without
#      the key, a worker whose PS is on its host (127.0.0.1 here) says it takes the serial path,
#      and trains the same bytes; there the first step's row pull fails 3 times (the worker's
#      --debug_fail_row_pulls 3, as if its PS were unavailable): the worker recovers 3 times and
#      trains that batch and every other once, the same bytes again.
#   B: 2 ps + 2 workers, in-cluster, async, "prefetch_rows": 1: every process exits 0, the
#      replicas run every batch and the chief evaluates.
#   C: "prefetch_rows" 2 is refused at start (exit 78 naming the key).
source "$(dirname "$0")/lib.sh"

"$BIN/psc_gen_ctr" --out "$TMP/data" --train_rows 6400 --test_rows 500 --files 2 --seed 4 \
    --max_cardinality 3000 >"$TMP/gen.out" 2>"$TMP/gen.log" || fail "psc_gen_ctr failed: $(cat "$TMP/gen.log")"

# spec FILE EXTRA — the job, EXTRA spliced in as more top-level keys
spec() {
    cat >"$1" <<JSON
{"model": {"layers": [
    {"type": "embedding", "table": "emb", "features": ["C17", "C18", "C19", "C20", "C21", "C22", "C23", "C24"]},
    {"type": "wide", "table": "wide", "features": ["C17", "C18", "C19", "C20", "C21", "C22", "C23", "C24"]},
    {"type": "dense", "units": 4, "activation": "relu"},
    {"type": "interaction"},
    {"type": "dense", "units": 1}],
  "loss": "sigmoid_cross_entropy"},
 "tables": [{"name": "emb", "rows": 50000, "dim": 4},
            {"name": "wide", "rows": 50000, "dim": 1, "initializer": {"name": "zeros"},
             "optimizer": {"name": "ftrl", "learning_rate": 0.5}}],
 "optimizer": {"name": "adam", "learning_rate": 0.01},
 "data": {"format": "criteo", "train": "$TMP/data/train-*.tsv", "test": "$TMP/data/test.tsv"},
 "batch_size_per_replica": 64, "epochs": 1, "seed": 9 $2}
JSON
}

# A
for pf in 0 1 default; do
    if [ $pf = default ]; then spec "$TMP/a$pf.json" ""; else spec "$TMP/a$pf.json" ", \"prefetch_rows\": $pf"; fi
    cluster 1 1
    start_ps 0
    ps_pid=$LAST_PID
    wait_healthy "${PS_ADDR[0]}"
    flags=()
    [ $pf = default ] && flags=(--debug_fail_row_pulls 3) # the first step's row pull fails 3 times
    TF_CONFIG=$(tf_config worker 0) "$BIN/worker" "${flags[@]}" >"$TMP/a$pf-worker.out" 2>"$TMP/a$pf-worker.log" &
    w_pid=$!
    PIDS+=("$w_pid")
    wait_healthy "${WORKER_ADDR[0]}"
    PSCTL=("$BIN/psctl" --cluster "$CLUSTER")
    "${PSCTL[@]}" train "$TMP/a$pf.json" >"$TMP/a$pf-train.out" 2>"$TMP/a$pf-train.err" ||
        fail "prefetch_rows $pf: psctl train exited $?: $(tail -3 "$TMP/a$pf-train.err")"
    "${PSCTL[@]}" export --format safetensors -o "$TMP/a$pf.st" >/dev/null 2>"$TMP/a$pf-export.err" ||
        fail "prefetch_rows $pf: export failed: $(cat "$TMP/a$pf-export.err")"
    kill "$w_pid" "$ps_pid" 2>/dev/null || true
    wait "$w_pid" "$ps_pid" 2>/dev/null || true
done
cmp -s "$TMP/a0.st" "$TMP/a1.st" || fail "prefetch_rows 1 trained another model than the serial path"
cmp -s "$TMP/a0.st" "$TMP/adefault.st" || fail "the default (its first row pull failing 3 times) trained another model"
n=$(grep -c 'answer again' "$TMP/adefault-worker.log" || true)
[ "$n" = 3 ] || fail "the worker recovered $n times from its failed row pulls, expected 3"
grep -q "prefetch_rows 0 (default: ps 0, ${PS_ADDR[0]}, shares this worker's host)" "$TMP/adefault-worker.log" ||
    fail "the default's choice is not logged: $(grep prefetch_rows "$TMP/adefault-worker.log")"
share=$(sed -n 's/.*prefetch_rows: \([0-9.]*\)% of the [0-9]* rows pushed were on the steps. critical path.*/\1/p' \
    "$TMP/a1-worker.log")
[ -n "$share" ] || fail "the worker did not report the critical path's share: $(tail -5 "$TMP/a1-worker.log")"
awk -v s="$share" 'BEGIN { exit !(s > 10 && s < 100) }' || fail "critical path share $share %: no rows shared?"
grep -q "prefetch_rows: " "$TMP/a0-worker.log" && fail "prefetch_rows 0 prefetched"
echo "A: the same model bytes with and without prefetching ($share % of the rows on the critical path)"

# B
spec "$TMP/b.json" ', "prefetch_rows": 1'
train_in_cluster 2 2 "$TMP/b.json"
steps=0
for i in 0 1; do
    n=$(sed -n 's/.*finished \([0-9]*\) steps in .*/\1/p' "$TMP/worker$i.log")
    [ -n "$n" ] || fail "B: worker $i logged no finished line"
    steps=$((steps + n))
done
[ "$steps" = 100 ] || fail "B: the replicas ran $steps steps, expected 100 (6400 rows / 64)"
grep -q "prefetch_rows: " "$TMP/worker0.log" || fail "B: prefetch_rows 1 did not prefetch"
grep -q "test AUC" "$TMP/worker0.out" "$TMP/worker0.log" || fail "B: the chief did not evaluate"

# C
spec "$TMP/c.json" ', "prefetch_rows": 2'
rc=0
TF_CONFIG=$(tf_config worker 0) "$BIN/worker" --job_spec "$TMP/c.json" 2>"$TMP/c.err" || rc=$?
[ "$rc" = 78 ] || fail "prefetch_rows 2 exited $rc, expected 78"
grep -q "prefetch_rows: expected an integer 0..1, got 2" "$TMP/c.err" || fail "C: $(cat "$TMP/c.err")"
pass "prefetch_rows: the serial path's model, byte for byte"
