#!/usr/bin/env bash
# test_gpu_run_dry — tests/gpu/run.sh's plumbing on a machine without a GPU: its dry run
# (--dry-run --no-build, the GPU steps replaced by their CPU equivalents) over this build's
# programs runs bench_tower and both demos' clusters (2 ps + 2 workers, --devices cpu) on
# small data, exits 0, and its summary holds the numbers it parsed from their output: the
# CPU rows of bench_tower, the CNN's test accuracy, the CTR model's test AUC and the planted
# one, each worker's examples/s and their sum; every step's log and the clusters' logs are
# kept. Then a step that fails (no Fashion-MNIST where it is pointed) is reported with its
# reason, the summary still printed, and the exit is 1. The CUDA tests are left out
# (--skip: a ctest inside this ctest would write over its log); on a GPU they are the run's.
# About 9 s on the 2-core VM (23 s under ASan).
source "$(dirname "$0")/lib.sh"
require_dataset
unset OUT
run=$SRC/tests/gpu/run.sh
num='[0-9]+(\.[0-9]+)?'

set +e
BENCH_SECS=0.5 GPU_RUN_CTR_ROWS=20000 bash "$run" --dry-run --no-build --build "$BIN" --out "$TMP/report" \
    --work "$TMP/work" --skip cuda_tests >"$TMP/run.out" 2>&1
code=$?
set -e
cp "$TMP/report/summary.txt" "$TMP/summary.out" 2>/dev/null || true
[ "$code" = 0 ] || fail "run.sh --dry-run exited $code: $(cat "$TMP/run.out")"
s=$TMP/report/summary.txt
[ -s "$s" ] || fail "no summary.txt"
grep -q "^== psc GPU run (tests/gpu/run.sh --dry-run)" "$TMP/run.out" || fail "the summary was not printed"
row() { grep -E "^$1 +$2 " "$s" || fail "no '$1 $2' row in the summary: $(cat "$s")"; }
row preflight pass >/dev/null
row configure skip >/dev/null
row cuda-tests skip >/dev/null
row bench-tower pass | grep -qE "cnn: cpu [0-9]+, gpu n/a examples/s; mlp: cpu [0-9]+, gpu n/a" ||
    fail "bench_tower's CPU rows not parsed: $(row bench-tower pass)"
row demo-cnn pass | grep -qE "test accuracy 0\.[0-9]{4}, [0-9]+ \+ [0-9]+ = [0-9]+ examples/s; 1 epoch\(s\), towers cpu" ||
    fail "demo-cnn's numbers not parsed: $(row demo-cnn pass)"
row demo-ctr pass | grep -qE "test AUC 0\.[0-9]{4} \(planted 0\.[0-9]{4}\), [0-9]+ \+ [0-9]+ = [0-9]+ examples/s; 20000 rows" ||
    fail "demo-ctr's numbers not parsed: $(row demo-ctr pass)"
row total pass | grep -qE "^total +pass +[0-9]+s" || fail "no total"
# the sum is the workers' own numbers added up
read -r a b sum < <(row demo-cnn pass | sed -nE "s/.*, ([0-9]+) \+ ([0-9]+) = ([0-9]+) examples.*/\1 \2 \3/p")
[ $((a + b)) = "$sum" ] || fail "examples/s $a + $b != $sum"
acc=$(row demo-cnn pass | sed -nE "s/.*test accuracy ($num).*/\1/p")
grep -q "^test accuracy: $acc" "$TMP/report/logs/demo_cnn/worker0.out" || fail "accuracy $acc is not the chief's"
for f in preflight bench_tower demo_cnn demo_ctr demo_cnn/worker0.log demo_cnn/worker1.log demo_cnn/ps0.log \
    demo_ctr/worker0.log demo_ctr/worker1.log demo_ctr/ps1.log; do
    case $f in */*) p=$TMP/report/logs/$f ;; *) p=$TMP/report/logs/$f.log ;; esac
    [ -s "$p" ] || fail "no log $p"
done
grep -q -- "--devices cpu" "$TMP/report/logs/demo_ctr.log" || fail "demo-ctr did not pass --devices cpu"

# a failing step: reported with its reason, the summary printed, exit 1
set +e
env GPU_RUN_FASHION_MNIST="$TMP/no-such-dir" bash "$run" --dry-run --no-build --build "$BIN" --out "$TMP/report2" \
    --work "$TMP/work" --skip cuda_tests,bench_tower,demo_ctr >"$TMP/run2.out" 2>&1
code=$?
set -e
[ "$code" = 1 ] || fail "with no Fashion-MNIST run.sh exited $code, expected 1: $(cat "$TMP/run2.out")"
grep -qE "^demo-cnn +fail .*no Fashion-MNIST in $TMP/no-such-dir" "$TMP/run2.out" ||
    fail "demo-cnn's failure not in the printed summary: $(cat "$TMP/run2.out")"
grep -qE "^total +FAIL " "$TMP/run2.out" || fail "the total is not FAIL"
grep -qE "^bench-tower +skip .*--skip" "$TMP/run2.out" || fail "--skip not shown"
pass "tests/gpu/run.sh --dry-run: bench_tower, demo-cnn (accuracy $acc), demo-ctr parsed; a failed step reported"
