#!/usr/bin/env bash
# bench_ctr_link.sh — what rows prefetched a batch ahead ("prefetch_rows", issue 32) buy where
# the PS runs on another host: 1 ps_server and 1 worker on two hosts (Linux network namespaces
# joined by a bridge, tests/integration/netns.sh), the worker's link limited by htb to RATE
# Mbit/s each way (default 10000: a 10 GbE link; a step moves ~0.5 MB of rows and gradients),
# training deploy/jobs/ctr.json on SYNTHETIC Criteo data (psc_gen_ctr --train_rows 300000
# --files 2 --gzip --seed 1) for STEPS steps (default 1500), with "prefetch_rows" 0 (the serial
# step: compute, then one round) and 1 (a step waits for the rows the next batch shares), in
# ROUNDS (default 2) interleaved rounds. Prints each run's examples/s (the worker's own
# "finished N steps" line), the means and their ratio. Both hosts share this machine's cores,
# as bench_ctr.sh's (b1) does; the link adds what a network adds: the bytes' time on the wire.
# A measurement, not a test: it never fails on speed; it skips (exit 77) where network
# namespaces cannot be made (not root).
#
# usage: tests/bench/bench_ctr_link.sh [BUILD_DIR]
#        env: BENCH_CTR_LINK_MBIT, BENCH_CTR_LINK_STEPS, BENCH_CTR_LINK_ROUNDS
here=$(cd "$(dirname "$0")/../.." && pwd)
export PSC_BIN=$(cd "${1:-${PSC_BIN:-$here/build}}" && pwd)
source "$here/tests/integration/lib.sh"
source "$here/tests/integration/netns.sh"
netns_require_tc
netns_require
mbit=${BENCH_CTR_LINK_MBIT:-10000} steps=${BENCH_CTR_LINK_STEPS:-1500} rounds=${BENCH_CTR_LINK_ROUNDS:-2}
"$BIN/psc_gen_ctr" --out "$TMP/data" --train_rows 300000 --test_rows 2000 --files 2 --gzip --seed 1 \
    >"$TMP/gen.out" 2>&1 || fail "psc_gen_ctr: $(cat "$TMP/gen.out")"
for h in ps0 w0; do netns_host "$h"; done
ns_cluster "ps0" "w0"
net_rate w0 $((mbit * 1000))

# run NAME PREFETCH — trains; prints examples/s
run() {
    sed -e "s#@DATA@#$TMP/data#g" -e "0,/{/s//{\"steps\": $steps, \"prefetch_rows\": $2, /" \
        -e 's/"epochs": *[0-9]*/"epochs": 1000/' -e 's/"data": *{/"data": {"test_examples": 1000, /' \
        "$here/deploy/jobs/ctr.json" >"$TMP/$1.json"
    ns_train_one "$1" "$TMP/$1.json"
}
serial=() ahead=()
for ((r = 1; r <= rounds; r++)); do
    serial+=("$(run "serial$r" 0)")
    ahead+=("$(run "ahead$r" 1)")
done
mean() { printf '%s\n' "$@" | awk '{ s += $1 } END { printf "%.0f", s / NR }'; }
ms=$(mean "${serial[@]}") ma=$(mean "${ahead[@]}")
echo "bench_ctr_link: deploy/jobs/ctr.json on SYNTHETIC data, 1 ps + 1 worker on two hosts, the worker's link at $mbit" \
    "Mbit/s each way (htb), $steps steps, $rounds rounds:"
echo "  prefetch_rows 0: $ms examples/s (${serial[*]}); prefetch_rows 1: $ma examples/s (${ahead[*]});" \
    "ratio $(awk -v a="$ma" -v b="$ms" 'BEGIN { printf "%.2f", a / b }')"
FAILED=0
