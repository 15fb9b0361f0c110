#!/bin/sh
# run.sh BUILD_DIR — runs every benchmark and prints its table (see README "Performance"
# and tests/bench/NOTES.md). BENCH_SECS=S: seconds per point (bench_wire 1, bench_tower and bench_tower_torch.py 2,
# bench_apply 1, bench_scaling 1); BENCH_STEP_SECS: seconds per training run of
# bench_step.sh (10); BENCH_CTR_SECS: the same for bench_ctr.sh (10); bench_link.sh's
# BENCH_LINK_MBIT, BENCH_LINK_STEPS; bench_ctr_link.sh's BENCH_CTR_LINK_MBIT, _STEPS, _ROUNDS; bench_peers.sh's BENCH_PEERS_ROUNDS, BENCH_PEERS_MLP_STEPS,
# BENCH_PEERS_CNN_STEPS (4-5 minutes more); bench_ctr_peers.sh's BENCH_CTR_PEERS_ROWS, BENCH_CTR_PEERS_ROUNDS
# (3-4 minutes more); BENCH_ONLINE_ROWS: bench_online.sh's stream (8000000 rows,
# about 5 minutes; 600000: 15 s). About 13 minutes on the 2-core development VM.
set -eu
build=${1:-build}
export PSC_BIN=$(cd "$build" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
# Other processes on the machine skew every number: say how busy it was.
echo "run.sh: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) at start"
"$PSC_BIN/bench_wire" "${BENCH_SECS:-1}"
"$PSC_BIN/bench_tower" "${BENCH_SECS:-2}"
# The CPU tower against PyTorch, same models and threads (bench_tower_torch.py; skipped
# without python3-torch, which Debian installs for /usr/bin/python3)
py=python3
python3 -c 'import torch' 2>/dev/null || { [ -x /usr/bin/python3 ] && py=/usr/bin/python3; } || true
"$py" "$here/bench_tower_torch.py" --bin "$PSC_BIN" --secs "${BENCH_SECS:-2}" || [ $? = 77 ]
"$PSC_BIN/bench_apply" "${BENCH_SECS:-1}"
"$PSC_BIN/bench_scaling" "${BENCH_SECS:-1}"
"$PSC_BIN/bench_sparse" "${BENCH_SECS:-1}"
"$here/bench_step.sh" "$PSC_BIN"
"$here/bench_ctr.sh" "$PSC_BIN"
"$here/bench_warm_start.sh" "$PSC_BIN" # rows/s a warm start moves (from a file, a checkpoint) and a re-split restore
"$here/bench_predict.sh" "$PSC_BIN" # psctl predict's examples/s against psctl eval and the training step
"$here/bench_many.sh" "$PSC_BIN" # 2 ps + 2 workers against 8 ps + 64 workers (README "Many workers")
"$here/bench_online.sh" "$PSC_BIN" # drifting ids: no eviction, TTL, TTL + admission (issue 31)
"$PSC_BIN/bench_ckpt" "${BENCH_CKPT_ROWS:-1000000}" # a table's checkpoints against write + fsync (issue 32 item 4)
"$here/bench_link.sh" "$PSC_BIN" || [ $? = 77 ] # needs root (network namespaces)
"$here/bench_ctr_link.sh" "$PSC_BIN" || [ $? = 77 ] # prefetch_rows 0 and 1 across a link (root)
# PyTorch beside psc (bench_peers.sh; peers/setup.sh installs python3-torch; 77: skipped)
{ "$here/peers/setup.sh" && "$here/bench_peers.sh" "$PSC_BIN"; } || [ $? = 77 ]
# the same for the recommendation job (bench_ctr_peers.sh, issue 32: deploy/jobs/ctr.json)
{ "$here/peers/setup.sh" && "$here/bench_ctr_peers.sh" "$PSC_BIN"; } || [ $? = 77 ]
echo "run.sh: load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
