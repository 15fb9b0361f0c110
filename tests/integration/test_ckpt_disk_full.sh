#!/usr/bin/env bash
# test_ckpt_disk_full — a full disk costs checkpoints only while it is full: a
# standalone cluster (1 ps + 1 worker) whose ps_server keeps its checkpoints on
# a 16 MiB tmpfs the test mounts (root; skipped, 77, otherwise). The ps_server
# runs with --debug_no_space_check, so that RocksDB itself meets the full disk
# (the free-space check would refuse first):
# - a checkpoint on free space commits; the bytes it took on disk are printed;
# - the tmpfs is filled to its last 64 KiB: `psctl checkpoint` fails (exit 1)
#   with RocksDB's own error, and the ps_server's log names it;
# - the volume is grown (remount, 64 MiB): the next `psctl checkpoint` commits
#   without a restart of the ps_server, whose log says it reopened the store;
# - every committed checkpoint verifies (psc_ckpt list, after the ps_server
#   stopped): the failed write damaged nothing.
source "$(dirname "$0")/lib.sh"
require_dataset

small_tmpfs 16m

small_spec "$TMP/job.json" 30 3 ', "checkpoint": {"keep": 3}'
mapfile -t ports < <("$BIN/psc_free_port" 2)
PS_ADDR=("127.0.0.1:${ports[0]}"); WORKER_ADDR=("127.0.0.1:${ports[1]}")
CLUSTER="{\"ps\": [\"${PS_ADDR[0]}\"], \"worker\": [\"${WORKER_ADDR[0]}\"]}"
start_ps 0 --checkpoint_dir "$TMP/small/ckpt" --debug_no_space_check; ps=$LAST_PID
wait_healthy "${PS_ADDR[0]}"
TF_CONFIG=$(tf_config worker 0) "$BIN/worker" --log_every_secs 0.5 --debug_step_delay_ms 20 \
    >"$TMP/worker0.out" 2>"$TMP/worker0.log" &
PIDS+=($!)
wait_healthy "${WORKER_ADDR[0]}"
PSCTL=("$BIN/psctl" --cluster "$CLUSTER")
"${PSCTL[@]}" train --detach "$TMP/job.json" 2>"$TMP/train.err" || fail "train: $(cat "$TMP/train.err")"
for _ in $(seq 300); do grep -q 'step [1-9][0-9]*/' "$TMP/worker0.log" && break; sleep 0.1; done

kib() { du -sk "$TMP/small/ckpt" | cut -f1; }
before=$(kib)
"${PSCTL[@]}" checkpoint >"$TMP/c1.out" 2>&1 || fail "the first checkpoint failed: $(cat "$TMP/c1.out")"
after=$(kib)
echo "free disk: $(cat "$TMP/c1.out"); the store grew by $((after - before)) KiB (the shard: 25,450 parameters and 2 Adam slots, 298 KiB)"

free=$(df --output=avail -k "$TMP/small" | tail -1)
dd if=/dev/zero of="$TMP/small/filler" bs=1k count=$((free - 64)) 2>/dev/null || true
set +e; "${PSCTL[@]}" checkpoint >"$TMP/c2.out" 2>&1; rc=$?; set -e
echo "full disk: psctl checkpoint exit $rc: $(head -c 300 "$TMP/c2.out")"
[ $rc = 1 ] || fail "a checkpoint on a full disk exited $rc, expected 1"
grep -qi 'no space left\|IO error' "$TMP/c2.out" || fail "psctl checkpoint does not say why: $(cat "$TMP/c2.out")"
grep -Eq 'ERROR .*checkpoint store .*|ERROR .*checkpoint [0-9]+: .*failed: .*reopens the store' "$TMP/ps0.log" ||
    fail "the ps_server's log does not name RocksDB's error"
kill -0 "$ps" || fail "the ps_server died on the full disk"

mount -o remount,size=64m "$TMP/small" || fail "cannot grow the tmpfs"
"${PSCTL[@]}" checkpoint >"$TMP/c3.out" 2>&1 || fail "a checkpoint after the disk grew failed: $(cat "$TMP/c3.out")"
grep -q 'reopened after a failed write' "$TMP/ps0.log" || fail "the ps_server did not reopen its store"
echo "disk grown: $(cat "$TMP/c3.out"); ps: $(grep -o 'checkpoint store .* reopened after a failed write' "$TMP/ps0.log" | head -1 | sed 's#/tmp/[^ ]*#DIR#')"
"${PSCTL[@]}" stop >/dev/null 2>&1 || true
kill "$ps"; wait_exit "$ps" 30
"$BIN/psc_ckpt" list "$TMP/small/ckpt" >"$TMP/list.out" 2>&1 || fail "psc_ckpt list: $(cat "$TMP/list.out")"
cat "$TMP/list.out" | sed 's/^/  /'
grep -q 'BAD' "$TMP/list.out" && fail "a checkpoint is damaged"
[ "$(grep -c ' committed ' "$TMP/list.out")" -ge 2 ] || fail "fewer than 2 committed checkpoints"
pass "a full disk fails checkpoints while it lasts; once it has room they commit again without a restart"
