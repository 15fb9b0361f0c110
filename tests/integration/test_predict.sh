#!/usr/bin/env bash
# test_predict — scoring files with a trained model, with the real programs. A
# standalone cluster (2 ps with checkpoints, 2 workers) trains two jobs in
# turn: a softmax MLP on a slice of Fashion-MNIST, then a DLRM with a wide part
# on synthetic click logs (psc_gen_ctr). For each, `psctl predict` scores a
# file on both workers (each its shard) with the live model and with an older
# committed checkpoint; `psctl export` writes the same model, and
# tests/tools/psc_score.py (python3 + numpy, no psc code) recomputes every
# example from the export and the input file: each line agrees to 1e-5, in
# input order, one line per example. Refused with the reason, writing no
# output and changing nothing on the PS: a file whose examples do not fit the
# model (the file and the line or record named), a checkpoint id evicted by
# `keep` (the kept ones named), predicting before any job. In-cluster, `worker
# --predict` scores the whole file alone, and exits 78 for an evicted
# checkpoint and 64 without --predict_output.
source "$(dirname "$0")/lib.sh"
require_dataset

PY=
for p in python3 /usr/bin/python3; do
    if command -v "$p" >/dev/null && "$p" -c 'import numpy' 2>/dev/null; then PY=$p; break; fi
done
[ -n "$PY" ] || fail "python3 with numpy is needed (Debian: python3-numpy; deploy/setup.sh installs it)"
SCORE=("$PY" "$SRC/tests/tools/psc_score.py")
FM=/usr/share/datasets/fashion-mnist

cluster 2 2
for i in 0 1; do start_ps "$i" --checkpoint_dir "$TMP/ckpt$i"; done
for i in 0 1; do wait_healthy "${PS_ADDR[i]}"; done
for i in 0 1; do
    TF_CONFIG=$(tf_config worker "$i") "$BIN/worker" --log_every_secs 0.5 >"$TMP/w$i.out" 2>"$TMP/w$i.log" &
    PIDS+=($!)
done
for i in 0 1; do wait_healthy "${WORKER_ADDR[i]}"; done
PSCTL=("$BIN/psctl" --cluster "$CLUSTER")

# before any job: refused, no file
set +e
"${PSCTL[@]}" predict "$FM/t10k" -o "$TMP/none.tsv" >/dev/null 2>"$TMP/none.err"; rc=$?
set -e
[ $rc = 1 ] && grep -q "no job has run on this worker yet" "$TMP/none.err" && [ ! -e "$TMP/none.tsv" ] ||
    fail "predict before any job: exit $rc: $(cat "$TMP/none.err")"

# train NAME SPEC — sets FINAL and K (the final checkpoint and the one before, both kept)
train() {
    local at
    at=$(wc -l <"$TMP/w0.log")
    "${PSCTL[@]}" train "$2" >"$TMP/$1.out" 2>"$TMP/$1.err" || fail "$1: psctl train exited $?: $(tail -3 "$TMP/$1.err")"
    mapfile -t ids < <(tail -n +"$((at + 1))" "$TMP/w0.log" | sed -n 's/.*checkpoint \([0-9]*\) (.*) committed on every ps.*/\1/p')
    [ "${#ids[@]}" -ge 3 ] || fail "$1: expected at least 3 checkpoints, the chief logged ${#ids[@]}"
    FINAL=${ids[-1]} K=${ids[-2]} EVICTED=${ids[0]}
    echo "$1: checkpoints ${ids[*]}"
}

# predict_ok NAME FILE SPEC [--checkpoint ID] — psctl predict, export of the same model, numpy agrees
predict_ok() {
    local name=$1 file=$2 sp=$3; shift 3
    "${PSCTL[@]}" predict "$file" -o "$TMP/$name.tsv" "$@" >"$TMP/$name.pout" 2>"$TMP/$name.perr" ||
        fail "$name: psctl predict exited $?: $(cat "$TMP/$name.perr")"
    grep -q "on 2 workers" "$TMP/$name.perr" || fail "$name: not scored on both workers: $(cat "$TMP/$name.perr")"
    "${PSCTL[@]}" export --format safetensors -o "$TMP/$name.st" "$@" >/dev/null 2>"$TMP/$name.xerr" ||
        fail "$name: export: $(cat "$TMP/$name.xerr")"
    "${SCORE[@]}" "$TMP/$name.st" "$sp" "$file" "$TMP/$name.tsv" >"$TMP/$name.score" 2>&1 ||
        fail "$name: numpy disagrees: $(cat "$TMP/$name.score")"
    echo "$name: $(tail -1 "$TMP/$name.perr" | sed 's/^psctl: //'); $(cat "$TMP/$name.score")"
}

# refused NAME WANT_RE psctl-predict-args... — exit 1, the message matches, no output file
refused() {
    local name=$1 want=$2 rc; shift 2
    set +e
    "${PSCTL[@]}" predict "$@" -o "$TMP/$name.tsv" >/dev/null 2>"$TMP/$name.err"; rc=$?
    set -e
    [ $rc = 1 ] || fail "$name: psctl predict exited $rc, expected 1: $(cat "$TMP/$name.err")"
    grep -Eq "$want" "$TMP/$name.err" || fail "$name: expected /$want/: $(cat "$TMP/$name.err")"
    [ ! -e "$TMP/$name.tsv" ] && [ ! -e "$TMP/$name.tsv.tmp" ] || fail "$name: an output file was left"
    echo "$name: refused: $(head -1 "$TMP/$name.err" | cut -c1-200)"
}

# the PS's state that predict must leave alone: each one's global_step and table rows
ps_state() { "${PSCTL[@]}" status 2>/dev/null | grep -E '^ps |rows touched' | sed 's/, [0-9]* rows pulled.*//'; }

# score_live_and_k NAME FILE N HEADER_RE — after `train NAME`: FILE scored with the live model
# (N lines and the header) and with checkpoint K (other scores); the evicted checkpoint
# refused; sets before (the PS's state)
score_live_and_k() {
    local name=$1 file=$2 n=$3 header=$4
    before=$(ps_state)
    predict_ok "${name}_live" "$file" "$TMP/$name.json"
    [ "$(wc -l <"$TMP/${name}_live.tsv")" = $((n + 1)) ] ||
        fail "${name}_live: $(wc -l <"$TMP/${name}_live.tsv") lines for $n examples"
    head -1 "$TMP/${name}_live.tsv" | grep -q "$header" || fail "$name header: $(head -1 "$TMP/${name}_live.tsv")"
    predict_ok "${name}_k" "$file" "$TMP/$name.json" --checkpoint "$K"
    cmp -s "$TMP/${name}_live.tsv" "$TMP/${name}_k.tsv" && fail "checkpoint $K scored exactly as the final model"
    refused "${name}_evicted" "checkpoint $EVICTED is not a committed checkpoint of job .*\(kept: .*$FINAL" "$file" \
        --checkpoint "$EVICTED"
}

# ---- a softmax model: an MLP on Fashion-MNIST ----
small_spec "$TMP/dense.json" 1 7 ', "checkpoint": {"every_steps": 15, "keep": 2}'
train dense "$TMP/dense.json"
score_live_and_k dense "$FM/t10k" 10000 $'^index\tlabel\tclass\tp0\tp1'
# a file of 10x10 images where the model wants 28x28
"$PY" - "$TMP/small" <<'EOF'
import struct, sys
with open(sys.argv[1] + "-images-idx3-ubyte", "wb") as f:
    f.write(struct.pack(">IIII", 0x803, 5, 10, 10) + bytes(500))
with open(sys.argv[1] + "-labels-idx1-ubyte", "wb") as f:
    f.write(struct.pack(">II", 0x801, 5) + bytes(5))
EOF
refused dense_shape "$TMP/small: examples of 100 features; model.input_shape wants 784" "$TMP/small"
refused dense_missing "predict file $TMP/nothing: cannot read $TMP/nothing-images-idx3-ubyte" "$TMP/nothing"
[ "$(ps_state)" = "$before" ] || fail "predict changed the PS: before
$before
after
$(ps_state)"

# ---- a sigmoid model: a DLRM with a wide part on synthetic click logs ----
data=$TMP/ctr
"$BIN/psc_gen_ctr" --out "$data" --train_rows 20000 --test_rows 5000 --files 1 --seed 31 \
    --max_cardinality 20000 >"$TMP/gen.out" 2>"$TMP/gen.log" || fail "psc_gen_ctr failed"
C26=$(printf '"C%d",' $(seq 1 26)); C26="[${C26%,}]"
cat >"$TMP/ctr.json" <<JSON
{"model": {"loss": "sigmoid_cross_entropy", "layers": [
    {"type": "dense", "units": 16, "activation": "relu"},
    {"type": "dense", "units": 8, "activation": "relu"},
    {"type": "embedding", "table": "emb", "features": $C26},
    {"type": "interaction"},
    {"type": "dense", "units": 16, "activation": "relu"},
    {"type": "dense", "units": 1},
    {"type": "wide", "table": "wide_w", "features": $C26}]},
 "tables": [{"name": "emb", "rows": 30000, "dim": 8},
            {"name": "wide_w", "rows": 20000, "dim": 1, "initializer": {"name": "zeros"},
             "optimizer": {"name": "ftrl", "learning_rate": 0.05}}],
 "optimizer": {"name": "adam", "learning_rate": 0.003},
 "data": {"format": "criteo", "train": "$data/train-00000-of-00001.tsv", "test": "$data/test.tsv"},
 "checkpoint": {"every_steps": 10, "keep": 2},
 "batch_size_per_replica": 256, "epochs": 1, "seed": 5}
JSON
train ctr "$TMP/ctr.json"
score_live_and_k ctr "$data/test.tsv" 5000 $'^index\tlabel\tprobability$'
# line 57 loses its last field
head -100 "$data/test.tsv" | awk -F'\t' -v OFS='\t' 'NR == 57 { NF = 39 } { print }' >"$TMP/bad.tsv"
refused ctr_bad_line "$TMP/bad.tsv:57: expected 40 tab-separated fields, got 39" "$TMP/bad.tsv"
[ "$(ps_state)" = "$before" ] || fail "predict changed the PS (rows created?): before
$before
after
$(ps_state)"

# ---- in-cluster: worker --predict scores the whole file alone ----
incl() { "$BIN/worker" --cluster "$CLUSTER" --job worker --task_index 1 --job_spec "$TMP/ctr.json" "$@"; }
incl --predict "$data/test.tsv" --predict_output "$TMP/incl.tsv" --checkpoint "$K" >"$TMP/incl.out" \
    2>"$TMP/incl.log" || fail "worker --predict exited $?: $(tail -3 "$TMP/incl.log")"
grep -q "predicted 5000 examples into $TMP/incl.tsv" "$TMP/incl.out" || fail "worker --predict: $(cat "$TMP/incl.out")"
"${SCORE[@]}" "$TMP/ctr_k.st" "$TMP/ctr.json" "$data/test.tsv" "$TMP/incl.tsv" >"$TMP/incl.score" 2>&1 ||
    fail "worker --predict: numpy disagrees: $(cat "$TMP/incl.score")"
echo "worker --predict --checkpoint $K: $(cat "$TMP/incl.score")"
incl --predict "$data/test.tsv" --predict_output "$TMP/incl_live.tsv" >/dev/null 2>"$TMP/incl_live.log" ||
    fail "worker --predict (live) exited $?: $(tail -3 "$TMP/incl_live.log")"
"${SCORE[@]}" "$TMP/ctr_live.st" "$TMP/ctr.json" "$data/test.tsv" "$TMP/incl_live.tsv" >/dev/null 2>&1 ||
    fail "worker --predict (live): numpy disagrees"
set +e
incl --predict "$data/test.tsv" --predict_output "$TMP/incl2.tsv" --checkpoint "$EVICTED" >/dev/null 2>"$TMP/incl2.log"
rc=$?
incl --predict "$data/test.tsv" >/dev/null 2>"$TMP/incl3.log"
rc3=$?
set -e
[ $rc = 78 ] && grep -q "(kept: " "$TMP/incl2.log" && [ ! -e "$TMP/incl2.tsv" ] ||
    fail "worker --predict --checkpoint $EVICTED: exit $rc: $(tail -2 "$TMP/incl2.log")"
[ $rc3 = 64 ] && grep -q "needs --predict_output" "$TMP/incl3.log" || fail "worker --predict alone: exit $rc3"
[ "$(ps_state)" = "$before" ] || fail "worker --predict changed the PS"

pass "predict: softmax and sigmoid models, live and checkpoint, 2 workers and in-cluster, equal to numpy's scores"
