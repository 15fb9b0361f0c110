#!/usr/bin/env bash
# bench_link.sh — what bfloat16 gradients buy where the network is the bound:
# 1 ps_server and 1 worker on two hosts (Linux network namespaces joined by a
# bridge, tests/integration/netns.sh), the worker's link limited by htb to
# RATE Mbit/s each way (default 1000: a 1 GbE link), training the demo MLP
# (deploy/jobs/mlp.json: 235,146 parameters, 0.94 MB of gradients a push and
# as much of weights a pull) for STEPS steps (default 400), once with float32
# gradients and once with "gradient_dtype": "bfloat16". Prints each run's
# examples/s (the worker's own "finished N steps" line) and the ratio.
# A measurement, not a test: it never fails on speed; it skips (exit 77)
# where network namespaces cannot be made (not root).
#
# usage: tests/bench/bench_link.sh [BUILD_DIR]   env: BENCH_LINK_MBIT, BENCH_LINK_STEPS
here=$(cd "$(dirname "$0")/../.." && pwd)
export PSC_BIN=$(cd "${1:-${PSC_BIN:-$here/build}}" && pwd)
source "$here/tests/integration/lib.sh"
source "$here/tests/integration/netns.sh"
require_dataset
netns_require_tc
netns_require
mbit=${BENCH_LINK_MBIT:-1000} steps=${BENCH_LINK_STEPS:-400}
for h in ps0 w0; do netns_host "$h"; done
ns_cluster "ps0" "w0"
net_rate w0 $((mbit * 1000))

# run NAME EXTRA_JSON — trains; prints examples/s
run() {
    sed -e "0,/{/s//{\"steps\": $steps, $2/" -e 's/"epochs": *[0-9]*/"epochs": 1000/' \
        -e 's/"data": *{/"data": {"test_examples": 1000, /' "$here/deploy/jobs/mlp.json" >"$TMP/$1.json"
    ns_train_one "$1" "$TMP/$1.json" --blas_threads 1
}
f32=$(run f32 "")
bf16=$(run bf16 '"gradient_dtype": "bfloat16", ')
echo "bench_link: demo MLP, 1 ps + 1 worker, the worker's link at $mbit Mbit/s each way (htb), $steps steps:"
echo "  float32 gradients $f32 examples/s; bfloat16 gradients (error feedback) $bf16 examples/s; ratio $(awk -v a="$bf16" -v b="$f32" 'BEGIN { printf "%.2f", a / b }')"
FAILED=0
