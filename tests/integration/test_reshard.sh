#!/usr/bin/env bash
# test_reshard — a job's checkpoints restore onto another number of PS, with
# every variable, optimizer slot, table row and global_step. On standalone
# clusters (ps i keeps its checkpoints in its own directory, 1 worker, so
# training is deterministic):
# - a recommendation model (synthetic Criteo data from psc_gen_ctr; its dense
#   variables cut into parts by min_shard_bytes, so they are re-split too)
#   trains one epoch on 2 ps; the cluster restarts with 3 ps and the same spec
#   restores the model re-split (psctl export gives the same bytes, the test
#   AUC is the same); with 2 epochs it resumes at the restored step and
#   trains the second one: the exported model is byte for byte the one a run
#   of 2 epochs on 2 ps without any restart trains (so the slots and update
#   counts came along, not only the values);
# - the cluster restarts with 1 ps: without the departed shards the chief
#   refuses (naming them) and changes nothing; with the departed ps_servers
#   started on their checkpoint directories outside the cluster and named with
#   --restore_from, the model restores onto the 1 ps, again the same bytes;
# - 2 ps started on each other's directories: each refuses the other's shard and
#   the chief re-splits (swaps) them: the same bytes;
# - a new job warm-started from the 1-epoch job with "slots" and "global_step" trains
#   one epoch of its own into the straight 2-epoch model (2 ps, and onto 3 ps);
# - the DLRM in sync-replica mode, 2 ps -> 3 ps, against a straight sync run;
# - the same with a dense MLP (Fashion-MNIST) in sync-replica mode and greedy_bytes placement:
#   2 ps -> 3 ps -> 1 ps, each time the bytes of a straight run of as many epochs.
# The table is partitioned `div` (contiguous ranges), whose parts all move when the
# number of PS changes; `mod` is covered by test_warm_start's move onto 3 ps.
source "$(dirname "$0")/lib.sh"

data=$TMP/data
"$BIN/psc_gen_ctr" --out "$data" --train_rows 30000 --test_rows 10000 --files 1 --seed 29 \
    --max_cardinality 100000 >"$TMP/gen.out" 2>"$TMP/gen.log" || fail "psc_gen_ctr failed"

# ctr_spec FILE EPOCHS [EXTRA] — a small DLRM on synthetic data
ctr_spec() {
    cat >"$1" <<JSON
{"model": {"layers": [
    {"type": "embedding", "table": "emb", "features": ["C1","C2","C3","C4","C5","C6","C7","C8","C9","C10","C11",
      "C12","C13","C14","C15","C16","C17","C18","C19","C20","C21","C22","C23","C24","C25","C26"]},
    {"type": "dense", "units": 16, "activation": "relu"},
    {"type": "dense", "units": 8},
    {"type": "interaction"},
    {"type": "dense", "units": 16, "activation": "relu"},
    {"type": "dense", "units": 1}],
  "loss": "sigmoid_cross_entropy"},
 "tables": [{"name": "emb", "rows": 100000, "dim": 8, "partition_strategy": "div"}],
 "optimizer": {"name": "adam", "learning_rate": 0.003},
 "placement": {"min_shard_bytes": 256},
 "data": {"format": "criteo", "train": "$data/train-00000-of-00001.tsv", "test": "$data/test.tsv"},
 "checkpoint": {"every_steps": 40, "keep": 3},
 "batch_size_per_replica": 256, "epochs": $2, "seed": 5 ${3:-}}
JSON
}

stop_all() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    PIDS=()
}

# standalone SET NPS [worker flags] — (after stop_all) daemons without a job: NPS ps (ps i keeps its
# checkpoints in $TMP/SET-ckpt-i whatever the cluster's size), 1 worker
standalone() {
    local set=$1 nps=$2 i
    shift 2
    NPS=$nps
    cluster "$nps" 1
    for ((i = 0; i < nps; i++)); do start_ps "$i" --checkpoint_dir "$TMP/$set-ckpt-$i"; done
    for ((i = 0; i < nps; i++)); do wait_healthy "${PS_ADDR[i]}"; done
    WLOG=$TMP/$set-w$nps.log
    TF_CONFIG=$(tf_config worker 0) "$BIN/worker" --log_every_secs 0.2 "$@" >"$TMP/$set-w$nps.out" 2>"$WLOG" &
    PIDS+=($!)
    wait_healthy "${WORKER_ADDR[0]}"
    PSCTL=("$BIN/psctl" --cluster "$CLUSTER")
}

# sources SET FROM NPS — the departed ps FROM..NPS-1 of SET, outside the cluster, each on
# its checkpoint directory; sets SOURCES (HOST:PORT,...)
sources() {
    local set=$1 from=$2 nps=$3 i
    mapfile -t _sp < <("$BIN/psc_free_port" "$nps")
    local ps_json
    ps_json=$(printf '"127.0.0.1:%s",' "${_sp[@]}")
    SOURCES=
    for ((i = from; i < nps; i++)); do
        TF_CONFIG="{\"cluster\": {\"ps\": [${ps_json%,}]}, \"task\": {\"type\": \"ps\", \"index\": $i}}" \
            "$BIN/ps_server" --checkpoint_dir "$TMP/$set-ckpt-$i" >"$TMP/$set-src$i.log" 2>&1 &
        PIDS+=($!)
        wait_healthy "127.0.0.1:${_sp[i]}"
        SOURCES=${SOURCES:+$SOURCES,}127.0.0.1:${_sp[i]}
    done
}

# train NAME SPEC — psctl train; sets OUT (its stdout)
train() {
    "${PSCTL[@]}" train "$2" >"$TMP/$1.out" 2>"$TMP/$1.err" ||
        fail "$1: psctl train exited $?: $(tail -3 "$TMP/$1.err")"
    OUT=$TMP/$1.out
    echo "$1 on $NPS ps: $(tr '\n' ' ' <"$OUT")"
}

export_to() {
    "${PSCTL[@]}" export --format safetensors -o "$1" >/dev/null 2>"$TMP/export.err" ||
        fail "export: $(cat "$TMP/export.err")"
}

# resplit_logged FROM TO — the chief's log says it re-split FROM ps onto TO
resplit_logged() {
    grep -q "re-split from $1 ps_servers onto $2" "$WLOG" ||
        fail "the chief did not restore re-split from $1 onto $2 ps: $(grep -iE 'restor|re-split|split' "$WLOG")"
}

# ---- a recommendation model, asynchronous ----
ctr_spec "$TMP/ctr1.json" 1
ctr_spec "$TMP/ctr2.json" 2

stop_all
standalone straight 2 # the reference: 2 epochs on 2 ps, no restart
train ctr-straight "$TMP/ctr2.json"
export_to "$TMP/ctr-straight.st"

stop_all
standalone ctr 2
train ctr-2ps "$TMP/ctr1.json"
auc2=$(sed -n 's/^test AUC: //p' "$OUT")
export_to "$TMP/ctr-2ps.st"

stop_all
standalone ctr 3
train ctr-3ps "$TMP/ctr1.json"
resplit_logged 2 3
[ "$(sed -n 's/^test AUC: //p' "$OUT")" = "$auc2" ] || fail "restored on 3 ps: $(cat "$OUT"); on 2 ps: AUC $auc2"
export_to "$TMP/ctr-3ps.st"
cmp "$TMP/ctr-2ps.st" "$TMP/ctr-3ps.st" || fail "the model restored on 3 ps exports other bytes than on 2 ps"
step1=$(sed -n 's/.*restored job [0-9a-f]*.s model from checkpoint [0-9]* (step \([0-9]*\)), re-split.*/\1/p' "$WLOG")
[ -n "$step1" ] && [ "$step1" -gt 0 ] || fail "no restored step in the chief's log"

train ctr-3ps-epoch2 "$TMP/ctr2.json" # the same job id: restores its 3-ps checkpoint, resumes
grep -q "the model was restored at global_step $step1 .*resuming at step $step1 " "$WLOG" ||
    fail "the 2-epoch job did not resume at step $step1: $(grep -i resum "$WLOG")"
export_to "$TMP/ctr-3ps-epoch2.st"
cmp "$TMP/ctr-straight.st" "$TMP/ctr-3ps-epoch2.st" ||
    fail "1 epoch on 2 ps + 1 on 3 ps trained another model than 2 epochs on 2 ps (slots or step lost?)"
echo "ctr: 2 ps -> 3 ps at step $step1, same bytes; resumed for a second epoch: the straight run's bytes"

# onto 1 ps: the departed shards are needed
stop_all
standalone ctr 1
"${PSCTL[@]}" train "$TMP/ctr2.json" >/dev/null 2>"$TMP/shrink-bad.err" && fail "a restore onto 1 ps without shards 1, 2 succeeded"
grep -q "was written by 3 ps_servers; shards 1, 2 of it are on none of these 1 .*--restore_from" "$TMP/shrink-bad.err" ||
    fail "restore without the departed shards: $(tail -2 "$TMP/shrink-bad.err")"
stop_all
sources ctr 1 3
standalone ctr 1 --restore_from "$SOURCES"
train ctr-1ps "$TMP/ctr2.json"
resplit_logged 3 1
export_to "$TMP/ctr-1ps.st"
cmp "$TMP/ctr-straight.st" "$TMP/ctr-1ps.st" || fail "the model restored on 1 ps exports other bytes"
echo "ctr: 3 ps -> 1 ps with --restore_from $SOURCES: same bytes"

# the same 2 ps, each on the other's directory: the chief sees each shard on the other PS
# and re-splits (here: swaps) them (a PS itself refuses another's shard: unit test_service_stage)
stop_all
ln -s "$TMP/straight-ckpt-1" "$TMP/swap-ckpt-0"
ln -s "$TMP/straight-ckpt-0" "$TMP/swap-ckpt-1"
standalone swap 2
train ctr-swapped "$TMP/ctr2.json"
resplit_logged 2 2
export_to "$TMP/ctr-swapped.st"
cmp "$TMP/ctr-straight.st" "$TMP/ctr-swapped.st" || fail "the model on swapped directories exports other bytes"

# ---- a warm start that carries the optimizer slots and global_step ----
# A new job (its own id) warm-started from the 1-epoch job's final checkpoint, with
# "slots" and "global_step", trains one epoch of its own: the model is the straight
# 2-epoch run's, tensor for tensor (the export's metadata names another job); the same
# onto 3 ps. Submitted again it counts its own steps from the carried step (base_step).
# Without "slots" the Adam moments start afresh: other values. Adam's slots into an
# Adagrad job are refused.
same_tensors() { # A B — every tensor of the two safetensors files has the same bytes
    python3 - "$1" "$2" <<'PY'
import json, struct, sys
def load(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
    return {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items()}
a, b = load(sys.argv[1]), load(sys.argv[2])
bad = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
sys.exit("tensors that differ: " + ", ".join(bad[:8]) if bad else 0)
PY
}
stop_all
standalone ws 2
"${PSCTL[@]}" train "$TMP/ctr1.json" >"$TMP/ws-day1.out" 2>"$TMP/ws-day1.err" || fail "ws day 1: $(tail -2 "$TMP/ws-day1.err")"
J1=$(sed -n 's/.*job \([0-9a-f]*\) submitted.*/\1/p' "$TMP/ws-day1.err")
[ -n "$J1" ] || fail "no job id in psctl's output: $(cat "$TMP/ws-day1.err")"
ctr_spec "$TMP/ws-slots.json" 1 ", \"warm_start\": {\"from\": \"$J1\", \"slots\": true, \"global_step\": true}"
train ws-slots "$TMP/ws-slots.json"
grep -q "warm start from checkpoint [0-9]* of job $J1: 8 variables and 1 tables ([0-9]* rows) with their optimizer slots, global_step $step1 (carried over)" "$WLOG" ||
    fail "no warm start with slots from $J1 at step $step1 logged: $(grep -i warm "$WLOG")"
grep -o "warm start from checkpoint .*" "$WLOG" | tail -1
grep -q "epoch 1/1 step $step1 global_step $((2 * step1)) " "$WLOG" ||
    fail "the warm-started job did not train its own epoch from global_step $step1: $(grep 'epoch 1/1' "$WLOG" | tail -1)"
export_to "$TMP/ws-slots.st"
same_tensors "$TMP/ctr-straight.st" "$TMP/ws-slots.st" ||
    fail "1 epoch + a warm start with slots and global_step + 1 epoch differs from 2 epochs straight"
train ws-slots-again "$TMP/ws-slots.json" # the same job again: its own final checkpoint, its own steps done
grep -q "restored at global_step $((2 * step1)) ($step1 steps of this replica's share): resuming at step $step1 " "$WLOG" ||
    fail "the warm-started job, submitted again, did not resume after its own $step1 steps: $(grep -i resum "$WLOG")"
ctr_spec "$TMP/ws-values.json" 1 ", \"warm_start\": {\"from\": \"$J1\", \"global_step\": true}"
train ws-values "$TMP/ws-values.json"
grep -q "warm start: global_step $step1 carried over from checkpoint" "$WLOG" || fail "global_step alone: $(grep -i warm "$WLOG")"
export_to "$TMP/ws-values.st"
same_tensors "$TMP/ctr-straight.st" "$TMP/ws-values.st" 2>/dev/null &&
    fail "a warm start without slots trained the same model as one with them"
ctr_spec "$TMP/ws-adagrad.json" 1 ", \"warm_start\": {\"from\": \"$J1\", \"slots\": true}"
sed -i 's/"name": "adam"/"name": "adagrad"/' "$TMP/ws-adagrad.json"
"${PSCTL[@]}" train "$TMP/ws-adagrad.json" >/dev/null 2>"$TMP/ws-adagrad.err" && fail "slots of Adam warm-started an Adagrad job"
grep -q "has the optimizer slots Adam,Adam_1 in checkpoint [0-9]* of job $J1 but Adagrad in this job" "$TMP/ws-adagrad.err" ||
    fail "Adam slots into Adagrad: $(tail -2 "$TMP/ws-adagrad.err")"
stop_all
standalone ws 3 # day 1's checkpoint on 2 of the 3 ps: re-split into the new job's shards
ctr_spec "$TMP/ws-slots3.json" 1 ", \"warm_start\": {\"from\": \"$J1\", \"variables\": \"(.*)\", \"slots\": true, \"global_step\": true}"
train ws-slots3 "$TMP/ws-slots3.json"
export_to "$TMP/ws-slots3.st"
same_tensors "$TMP/ctr-straight.st" "$TMP/ws-slots3.st" ||
    fail "the warm start with slots onto 3 ps differs from 2 epochs straight"
echo "warm start with slots and global_step (2 ps, and onto 3 ps): the straight 2-epoch run's tensors; without slots other values; Adam slots into Adagrad refused"

# ---- the same model with sync replicas (R = N = 1): 2 ps -> 3 ps ----
sync=', "sync": {"replicas_to_aggregate": 1, "total_num_replicas": 1}'
ctr_spec "$TMP/cs1.json" 1 "$sync"
ctr_spec "$TMP/cs2.json" 2 "$sync"
stop_all
standalone sstraight 2
train ctrsync-straight "$TMP/cs2.json"
export_to "$TMP/ctrsync-straight.st"
stop_all
standalone csync 2
train ctrsync-2ps "$TMP/cs1.json"
stop_all
standalone csync 3
train ctrsync-3ps "$TMP/cs2.json"
resplit_logged 2 3
export_to "$TMP/ctrsync-3ps.st"
cmp "$TMP/ctrsync-straight.st" "$TMP/ctrsync-3ps.st" ||
    fail "sync DLRM: 1 epoch on 2 ps + 1 on 3 ps differs from 2 epochs on 2 ps"
echo "sync DLRM: 2 ps -> 3 ps: the bytes of the straight run"

# ---- a dense MLP, sync replicas (R = N = 1), greedy_bytes placement ----
if [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
    mlp() { small_spec "$1" "$2" 3 ', "placement": {"strategy": "greedy_bytes", "min_shard_bytes": 4096},
 "sync": {"replicas_to_aggregate": 1, "total_num_replicas": 1}, "checkpoint": {"every_steps": 50}'; }
    mlp "$TMP/mlp1.json" 1
    mlp "$TMP/mlp2.json" 2
    mlp "$TMP/mlp3.json" 3
    stop_all
    standalone mstraight 2
    train mlp-straight2 "$TMP/mlp2.json"
    export_to "$TMP/mlp-straight2.st"
    train mlp-straight3 "$TMP/mlp3.json" # the same job id: resumes its own checkpoint on the same 2 ps
    export_to "$TMP/mlp-straight3.st"
    # another placement (round_robin, no min_shard_bytes) is the same job: its checkpoint re-split
    small_spec "$TMP/mlp3rr.json" 3 3 ', "sync": {"replicas_to_aggregate": 1, "total_num_replicas": 1},
 "checkpoint": {"every_steps": 50}'
    train mlp-rr3 "$TMP/mlp3rr.json"
    id3=$(sed -n 's/.*job \([0-9a-f]*\) submitted.*/\1/p' "$TMP/mlp-straight3.err")
    grep -q "job $id3 submitted" "$TMP/mlp-rr3.err" || fail "round_robin placement: another job id than greedy_bytes'"
    resplit_logged 2 2
    export_to "$TMP/mlp-rr3.st"
    cmp "$TMP/mlp-straight3.st" "$TMP/mlp-rr3.st" || fail "sync MLP: re-split onto another placement differs"
    echo "sync MLP: greedy_bytes -> round_robin on 2 ps: the same job, re-split, the same bytes"
    stop_all
    standalone mlp 2
    train mlp-2ps "$TMP/mlp1.json"
    stop_all
    standalone mlp 3
    train mlp-3ps "$TMP/mlp2.json"
    resplit_logged 2 3
    grep -q "resuming at step" "$WLOG" || fail "the sync MLP did not resume on 3 ps"
    export_to "$TMP/mlp-3ps.st"
    cmp "$TMP/mlp-straight2.st" "$TMP/mlp-3ps.st" || fail "sync MLP: 1 epoch on 2 ps + 1 on 3 ps differs from 2 on 2"
    stop_all
    sources mlp 1 3
    standalone mlp 1 --restore_from "$SOURCES"
    train mlp-1ps "$TMP/mlp3.json"
    resplit_logged 3 1
    export_to "$TMP/mlp-1ps.st"
    cmp "$TMP/mlp-straight3.st" "$TMP/mlp-1ps.st" || fail "sync MLP: 2 ps -> 3 ps -> 1 ps differs from 3 epochs on 2"
    echo "sync MLP: 2 ps -> 3 ps -> 1 ps, one epoch on each: the bytes of 3 epochs on 2 ps"
else
    echo "dataset-fashion-mnist not installed: the dense sync case is left out"
fi

pass "checkpoints restore onto 3 and 1 ps (async and sync recommendation model, sync MLP) with every value, slot and step"
