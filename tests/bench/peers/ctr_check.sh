#!/usr/bin/env bash
# ctr_check.sh — the PyTorch CTR peer (tests/bench/peers/ctr_peer.py) against a
# real psc cluster: psc_gen_ctr writes a small SYNTHETIC data set (CHECK_ROWS
# training rows in 2 gzip files, 2,000 test rows); a standalone 1 ps_server +
# 1 worker on 127.0.0.1 trains deploy/jobs/ctr.json on it for CHECK_STEPS (3)
# steps (`psctl train`, which prints the test AUC), `psctl export` writes the
# model (the dense variables, and every table row the PS holds: the ones the
# steps updated, and the next batch's, which the last step's pull created with
# their initial values). ctr_check.py then checks the peer's hashing, Philox
# rows, AUC and first updates against closed forms, trains the same steps and
# compares: every dense variable and updated row within CHECK_TOL (1e-5), the
# merely pulled rows bit for bit, the test AUC within 2e-4. Not part of make
# test (it needs PyTorch: run tests/bench/peers/setup.sh first). Exit 0 when
# every check holds. A few seconds.
#
# usage: tests/bench/peers/ctr_check.sh [BUILD_DIR]   (needs ps_server, worker,
#        psctl, psc_gen_ctr, psc_free_port, psc_health in BUILD_DIR);
#        CHECK_STEPS, CHECK_TOL, CHECK_ROWS (4000); BENCH_PEERS_PYTHON
set -euo pipefail
here=$(cd "$(dirname "$0")/../../.." && pwd)
bin=$(cd "${1:-${PSC_BIN:-$here/build}}" && pwd)
py=${BENCH_PEERS_PYTHON:-/usr/bin/python3}
steps=${CHECK_STEPS:-3}
rows=${CHECK_ROWS:-4000}
if ! "$py" -c 'import numpy, torch' 2>/dev/null; then
    echo "ctr_check.sh: skipped: $py cannot import torch and numpy (run tests/bench/peers/setup.sh)" >&2
    exit 77
fi
NAME="ctr-check"
source "$here/tests/bench/bench_lib.sh"

"$bin/psc_gen_ctr" --out "$work/data" --train_rows "$rows" --test_rows 2000 --files 2 --gzip --seed 1 \
    >"$work/gen.out" 2>&1 || { cat "$work/gen.out" >&2; exit 1; }
sed -e "s#@DATA@#$work/data#g" -e "0,/{/s//{\"steps\": $steps, /" "$here/deploy/jobs/ctr.json" >"$work/ctr.json"

mapfile -t ports < <("$bin/psc_free_port" 2)
cluster="{\"ps\": [\"127.0.0.1:${ports[0]}\"], \"worker\": [\"127.0.0.1:${ports[1]}\"]}"
TF_CONFIG="{\"cluster\": $cluster, \"task\": {\"type\": \"ps\", \"index\": 0}}" "$bin/ps_server" >"$work/ps.log" 2>&1 &
pids+=($!)
TF_CONFIG="{\"cluster\": $cluster, \"task\": {\"type\": \"worker\", \"index\": 0}}" "$bin/worker" \
    >"$work/worker.out" 2>"$work/worker.log" &
pids+=($!)
for p in "${ports[@]}"; do
    "$bin/psc_health" "127.0.0.1:$p" 20000 || { cat "$work/ps.log" "$work/worker.log" >&2; exit 1; }
done
psctl=("$bin/psctl" --cluster "$cluster")
if ! "${psctl[@]}" train "$work/ctr.json" >"$work/train.out" 2>"$work/train.err" ||
    ! "${psctl[@]}" export --format safetensors -o "$work/psc.safetensors" >/dev/null 2>"$work/export.err"; then
    cat "$work/train.err" "$work/export.err" "$work/ps.log" "$work/worker.log" >&2
    echo "ctr_check.sh: psc could not train or export $work/ctr.json" >&2
    exit 1
fi
auc=$(sed -n 's/^test AUC: //p' "$work/train.out")
echo "ctr_check.sh: psc trained deploy/jobs/ctr.json for $steps steps on $rows SYNTHETIC rows (test AUC ${auc:-?});" \
    "the peer does the same"
rc=0
PSC_TEST_AUC="$auc" CTR_CHECK_TOL="${CHECK_TOL:-1e-5}" \
    "$py" "$here/tests/bench/peers/ctr_peer.py" check "$work/ctr.json" "$work/psc.safetensors" "$steps" || rc=1
[ $rc = 0 ] && echo "ctr_check.sh: all checks hold" || echo "ctr_check.sh: FAILED" >&2
exit $rc
