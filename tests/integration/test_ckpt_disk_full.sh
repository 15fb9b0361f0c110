#!/usr/bin/env bash
# test_ckpt_disk_full — a full disk costs checkpoints only while it is full.
# Standalone clusters (1 ps + 1 worker) whose ps_server keeps its checkpoints
# on a tmpfs the test mounts (root; skipped, 77, otherwise):
# 1. the free-space check (a 64 MiB tmpfs, a 784-1024-10 MLP with Adam: a
#    9.8 MB shard, keep 3 — the issue's 200 MB and 31 MB scaled down): the
#    first checkpoints commit, the next ones are refused by the check, naming
#    what it needs; RocksDB itself never meets the full disk (no RocksDB error
#    in the ps_server's log). The tmpfs grows to 160 MiB: the next checkpoints
#    commit, keep-last-K deleting and compacting, still without a RocksDB
#    error; the kept checkpoints verify.
# 2. RocksDB meets the full disk (a 16 MiB tmpfs, --debug_no_space_check, the
#    784-32-10 MLP): a checkpoint commits; the tmpfs is filled to its last
#    64 KiB and `psctl checkpoint` fails (exit 1) with RocksDB's own error,
#    which the ps_server's log names; the committed checkpoint still reads
#    back through the PS (ListCheckpoints, verify); the tmpfs grows (64 MiB)
#    and the next checkpoint commits without a restart (the store reopened);
#    the ps_server never aborted; every committed checkpoint verifies
#    (psc_ckpt list, once the ps_server stopped).
source "$(dirname "$0")/lib.sh"
require_dataset

small_tmpfs 64m

# start_standalone PS_FLAGS... — a new cluster: ps 0 (log $TMP/ps0.log) and its worker
start_standalone() {
    mapfile -t ports < <("$BIN/psc_free_port" 2)
    PS_ADDR=("127.0.0.1:${ports[0]}"); WORKER_ADDR=("127.0.0.1:${ports[1]}")
    CLUSTER="{\"ps\": [\"${PS_ADDR[0]}\"], \"worker\": [\"${WORKER_ADDR[0]}\"]}"
    start_ps 0 "$@"; ps=$LAST_PID
    wait_healthy "${PS_ADDR[0]}"
    TF_CONFIG=$(tf_config worker 0) "$BIN/worker" --log_every_secs 0.5 --debug_step_delay_ms 20 \
        >"$TMP/worker0.out" 2>"$TMP/worker0.log" &
    wp=$!; PIDS+=($wp)
    wait_healthy "${WORKER_ADDR[0]}"
    PSCTL=("$BIN/psctl" --cluster "$CLUSTER")
}
train_detached() {
    "${PSCTL[@]}" train --detach "$1" 2>"$TMP/train.err" || fail "train: $(cat "$TMP/train.err")"
    for _ in $(seq 300); do grep -q 'step [1-9][0-9]*/' "$TMP/worker0.log" && break; sleep 0.1; done
}
# stop_standalone — ends the job and both daemons; the store is closed after it
stop_standalone() {
    "${PSCTL[@]}" stop >/dev/null 2>&1 || true
    kill "$wp" "$ps"
    wait_exit "$ps" 30
    wait_exit "$wp" 30
}
rocksdb_errors() { grep -E 'IO error|background error|Assertion|reopen' "$TMP/ps0.log" || true; }

# ---- 1. the free-space check keeps RocksDB off the full disk ----
cat >"$TMP/wide.json" <<JSON
{"model": {"input_shape": [28, 28, 1],
           "layers": [{"type": "flatten"}, {"type": "dense", "units": 1024, "activation": "relu"},
                      {"type": "dense", "units": 10}]},
 "optimizer": {"name": "adam", "learning_rate": 0.0005},
 "data": {"train_examples": 6000, "test_examples": 1000},
 "batch_size_per_replica": 32, "epochs": 30, "seed": 3, "checkpoint": {"keep": 3}}
JSON
start_standalone --checkpoint_dir "$TMP/small/a"
train_detached "$TMP/wide.json"
committed=0 refused=0
for i in 1 2 3 4 5; do
    if "${PSCTL[@]}" checkpoint >"$TMP/a$i.out" 2>&1; then
        committed=$((committed + 1))
    else
        grep -q 'needs about [0-9]* KiB .* (no space left on device)' "$TMP/a$i.out" ||
            fail "checkpoint $i on the 64 MiB disk failed, but not by the free-space check: $(cat "$TMP/a$i.out")"
        refused=$((refused + 1))
    fi
    echo "64 MiB: $(df --output=used -k "$TMP/small" | tail -1) KiB used after: $(head -c 400 "$TMP/a$i.out")"
done
[ "$committed" -ge 2 ] && [ "$refused" -ge 1 ] ||
    fail "on 64 MiB: $committed committed, $refused refused by the check (want >= 2 and >= 1)"
[ -z "$(rocksdb_errors)" ] || fail "RocksDB met the full disk despite the check: $(rocksdb_errors)"
mount -o remount,size=160m "$TMP/small" || fail "cannot grow the tmpfs"
for i in 1 2 3 4; do
    "${PSCTL[@]}" checkpoint >"$TMP/b$i.out" 2>&1 || fail "checkpoint $i on 160 MiB failed: $(cat "$TMP/b$i.out")"
done
echo "160 MiB: 4 more committed; $(df --output=used -k "$TMP/small" | tail -1) KiB used"
[ -z "$(rocksdb_errors)" ] || fail "RocksDB met the full disk despite the check: $(rocksdb_errors)"
stop_standalone
"$BIN/psc_ckpt" list "$TMP/small/a" >"$TMP/list_a.out" 2>&1 || fail "psc_ckpt list: $(cat "$TMP/list_a.out")"
sed 's/^/  /' "$TMP/list_a.out"
[ "$(grep -c ' committed .* good$' "$TMP/list_a.out")" = 3 ] || fail "keep 3 should leave 3 good committed checkpoints"
cp "$TMP/ps0.log" "$TMP/ps0-part1.log"

# ---- 2. RocksDB meets the full disk: logged, and recovered without a restart ----
rm -rf "$TMP/small/a"
mount -o remount,size=16m "$TMP/small" || fail "cannot shrink the tmpfs"
small_spec "$TMP/job.json" 30 3 ', "checkpoint": {"keep": 3}'
start_standalone --checkpoint_dir "$TMP/small/ckpt" --debug_no_space_check
train_detached "$TMP/job.json"
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
# the committed checkpoint reads back (every tensor, CRC checked) through the broken store
printf '\x10\x01' >"$TMP/list_verify.req"
"$BIN/psc_call" "${PS_ADDR[0]}" /psc.ParameterServer/ListCheckpoints "$TMP/list_verify.req" >"$TMP/lv.out" 2>&1 ||
    fail "ListCheckpoints (verify) on the full disk: $(cat "$TMP/lv.out")"

mount -o remount,size=64m "$TMP/small" || fail "cannot grow the tmpfs"
"${PSCTL[@]}" checkpoint >"$TMP/c3.out" 2>&1 || fail "a checkpoint after the disk grew failed: $(cat "$TMP/c3.out")"
grep -q 'reopened after a failed write' "$TMP/ps0.log" || fail "the ps_server did not reopen its store"
echo "disk grown: $(cat "$TMP/c3.out"); ps: $(grep -o 'checkpoint store .* reopened after a failed write' "$TMP/ps0.log" | head -1 | sed 's#/tmp/[^ ]*#DIR#')"
grep -q 'Assertion' "$TMP/ps0.log" && fail "RocksDB asserted"
stop_standalone
"$BIN/psc_ckpt" list "$TMP/small/ckpt" >"$TMP/list.out" 2>&1 || fail "psc_ckpt list: $(cat "$TMP/list.out")"
sed 's/^/  /' "$TMP/list.out"
grep -q 'BAD' "$TMP/list.out" && fail "a checkpoint is damaged"
[ "$(grep -c ' committed ' "$TMP/list.out")" -ge 2 ] || fail "fewer than 2 committed checkpoints"
pass "a full disk: the free-space check refuses before RocksDB fails; a write RocksDB fails is logged, and once the disk has room checkpoints commit again without a restart"
