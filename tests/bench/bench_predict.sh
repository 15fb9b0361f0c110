#!/usr/bin/env bash
# bench_predict.sh — examples/s of `psctl predict` (issue 30: at least the
# evaluation path's) against `psctl eval` on the same file and against the
# training step, measured in one run on one standalone cluster of 2
# ps_server + 2 workers on 127.0.0.1, for two models:
#   ctr    a DLRM with a wide part (tables of 10^6 and 10^5 rows) on synthetic
#          click logs (psc_gen_ctr --seed 3: BENCH_PREDICT_ROWS test rows,
#          default 200000; 200000 training rows);
#   dense  deploy/jobs/mlp.json (784-256-128-10) on Fashion-MNIST's 60,000
#          training images, evaluated and scored on the same 60,000.
# train: the job (1 epoch) as the workers log it, "finished N steps in S s (E
# examples/s)", summed over the 2 workers. eval: psctl eval's wall time
# (the chief alone evaluates data.test: reading, the rows' pulls, the forward
# pass). predict: psctl predict's wall time on the same file (data.test),
# every line written to a file on this machine: once with both workers (each
# its shard) and once with the chief alone (a cluster file naming only it:
# like for like with eval). Ratios are of examples/s. A measurement, not a
# test: exit 1 only when a process fails.
#
# usage: tests/bench/bench_predict.sh [BUILD_DIR]      BENCH_PREDICT_ROWS (default 200000)
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(cd "${1:-${PSC_BIN:-$here/build}}" && pwd)
rows=${BENCH_PREDICT_ROWS:-200000}
NAME=predict
source "$here/tests/bench/bench_lib.sh"
die() { echo "bench_predict: $*" >&2; exit 1; }

"$bin/psc_gen_ctr" --out "$work/data" --train_rows 200000 --test_rows "$rows" --files 1 --seed 3 \
    --max_cardinality 1000000 >"$work/gen.out" 2>&1 || { cat "$work/gen.out" >&2; die "psc_gen_ctr failed"; }

mapfile -t ports < <("$bin/psc_free_port" 4)
cluster="{\"ps\": [\"127.0.0.1:${ports[0]}\", \"127.0.0.1:${ports[1]}\"],
 \"worker\": [\"127.0.0.1:${ports[2]}\", \"127.0.0.1:${ports[3]}\"]}"
chief_only="{\"ps\": [\"127.0.0.1:${ports[0]}\", \"127.0.0.1:${ports[1]}\"], \"worker\": [\"127.0.0.1:${ports[2]}\"]}"
tfc() { echo "{\"cluster\": $cluster, \"task\": {\"type\": \"$1\", \"index\": $2}}"; }
for i in 0 1; do
    TF_CONFIG=$(tfc ps $i) "$bin/ps_server" >"$work/ps$i.log" 2>&1 &
    pids+=($!)
done
for i in 0 1; do
    TF_CONFIG=$(tfc worker $i) "$bin/worker" >"$work/w$i.out" 2>"$work/w$i.log" &
    pids+=($!)
done
for p in "${ports[@]}"; do "$bin/psc_health" "127.0.0.1:$p" 20000 || die "127.0.0.1:$p not serving"; done
psctl=("$bin/psctl" --cluster "$cluster")

wall() { # seconds since $1 (date +%s.%N)
    awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }'
}

# measure NAME SPEC FILE — prints the model's row of the table
measure() {
    local name=$1 sp=$2 file=$3 at0 at1 t0 n t_eval t_p2 t_p1 train
    at0=$(wc -l <"$work/w0.log") at1=$(wc -l <"$work/w1.log")
    "${psctl[@]}" train "$sp" >"$work/$name.train" 2>&1 || { tail -3 "$work/$name.train" >&2; die "$name: train failed"; }
    train=$( { tail -n +"$((at0 + 1))" "$work/w0.log"; tail -n +"$((at1 + 1))" "$work/w1.log"; } |
        sed -n 's/.*finished [0-9]* steps in .* s (\([0-9]*\) examples\/s).*/\1/p' | awk '{ s += $1 } END { print s }')
    t0=$(date +%s.%N)
    "${psctl[@]}" eval >"$work/$name.eval" 2>&1 || { cat "$work/$name.eval" >&2; die "$name: eval failed"; }
    t_eval=$(wall "$t0")
    n=$(sed -n 's/.* on \([0-9]*\) test examples.*/\1/p' "$work/$name.eval")
    t0=$(date +%s.%N)
    "${psctl[@]}" predict "$file" -o "$work/$name.2.tsv" >/dev/null 2>"$work/$name.p2" ||
        { cat "$work/$name.p2" >&2; die "$name: predict failed"; }
    t_p2=$(wall "$t0")
    t0=$(date +%s.%N)
    "$bin/psctl" --cluster "$chief_only" predict "$file" -o "$work/$name.1.tsv" >/dev/null 2>"$work/$name.p1" ||
        { cat "$work/$name.p1" >&2; die "$name: predict (chief alone) failed"; }
    t_p1=$(wall "$t0")
    [ "$(wc -l <"$work/$name.2.tsv")" = $((n + 1)) ] || die "$name: predict wrote $(wc -l <"$work/$name.2.tsv") lines for $n examples"
    awk -v name="$name" -v n="$n" -v tr="$train" -v te="$t_eval" -v p1="$t_p1" -v p2="$t_p2" 'BEGIN {
        e = n / te; a = n / p1; b = n / p2
        printf "%-6s %8d %12.0f %11.0f %13.0f %13.0f   %5.2f %5.2f %6.2f %6.2f\n", name, n, tr, e, a, b, a / e, b / e, a / tr, b / tr }'
}

cat >"$work/ctr.json" <<JSON
{"model": {"loss": "sigmoid_cross_entropy", "layers": [
    {"type": "dense", "units": 64, "activation": "relu"}, {"type": "dense", "units": 16, "activation": "relu"},
    {"type": "embedding", "table": "emb", "features": ["C1","C2","C3","C4","C5","C6","C7","C8","C9","C10","C11",
      "C12","C13","C14","C15","C16","C17","C18","C19","C20","C21","C22","C23","C24","C25","C26"]},
    {"type": "interaction"}, {"type": "dense", "units": 64, "activation": "relu"}, {"type": "dense", "units": 1},
    {"type": "wide", "table": "wide_w", "features": ["C1","C2","C3","C4","C5","C6","C7","C8","C9","C10","C11",
      "C12","C13","C14","C15","C16","C17","C18","C19","C20","C21","C22","C23","C24","C25","C26"]}]},
 "tables": [{"name": "emb", "rows": 1000000, "dim": 16},
            {"name": "wide_w", "rows": 100000, "dim": 1, "initializer": {"name": "zeros"},
             "optimizer": {"name": "ftrl", "learning_rate": 0.05}}],
 "optimizer": {"name": "adagrad", "learning_rate": 0.05},
 "data": {"format": "criteo", "train": "$work/data/train-00000-of-00001.tsv", "test": "$work/data/test.tsv"},
 "batch_size_per_replica": 256, "epochs": 1, "seed": 3}
JSON
FM=/usr/share/datasets/fashion-mnist
sed -e "s|\"test\": \"$FM/t10k\"|\"test\": \"$FM/train\"|" -e 's|"epochs": 3|"epochs": 1|' \
    "$here/deploy/jobs/mlp.json" >"$work/dense.json"

echo "bench_predict: 2 ps + 2 workers on 127.0.0.1, $(nproc) CPUs; examples/s (eval: the chief; predict: psctl's wall time, lines written)"
printf '%-6s %8s %12s %11s %13s %13s   %5s %5s %6s %6s\n' model examples "train(2 w)" "eval" "predict(1 w)" \
    "predict(2 w)" "p1/e" "p2/e" "p1/tr" "p2/tr"
measure ctr "$work/ctr.json" "$work/data/test.tsv"
if [ -f "$FM/train-images-idx3-ubyte.gz" ]; then
    measure dense "$work/dense.json" "$FM/train"
else
    echo "dense: skipped (dataset-fashion-mnist not installed)"
fi
