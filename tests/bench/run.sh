#!/bin/sh
# run.sh BUILD_DIR — runs every benchmark and prints its table (see README "Performance").
set -eu
build=${1:-build}
export PSC_BIN=$(cd "$build" && pwd)
"$PSC_BIN/bench_wire" "${BENCH_SECS:-1}"
"$PSC_BIN/bench_tower" "${BENCH_SECS:-2}"
