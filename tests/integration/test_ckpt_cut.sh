#!/usr/bin/env bash
# test_ckpt_cut — an asynchronous checkpoint is one cut across the PS (issue 16
# item 6), on real processes and real RocksDB: 2 ps_server (every variable kind
# on both: global_step and biases on ps 0, kernels on ps 1) and 2 workers
# training asynchronously, the chief checkpointing every 10 steps while the
# other worker keeps pushing. After the run, `psc_ckpt list` on each PS's
# --checkpoint_dir must show the same checkpoints, each at the same step on
# both PS (without the fence, ps 0 recorded the global_step it had when it
# copied its shard and ps 1 the chief's older view: 5375 vs 5374). Also: the
# PS logged every fence's release, and the chief its pause, which is printed.
source "$(dirname "$0")/lib.sh"
require_dataset

small_spec "$TMP/job.json" 1 5 ', "steps": 120, "checkpoint": {"every_steps": 10, "keep": 1000}'
cluster 2 2
for i in 0 1; do start_ps "$i" --checkpoint_dir "$TMP/ckpt/ps$i"; PSP[i]=$LAST_PID; done
for i in 0 1; do wait_healthy "${PS_ADDR[i]}"; done
for i in 0 1; do start_worker "$i" "$TMP/job.json" --debug_step_delay_ms 5; WP[i]=$LAST_PID; done
for i in 0 1; do wait_exit "${WP[i]}" 120; [ "$EXIT_CODE" = 0 ] || fail "worker $i exited $EXIT_CODE"; done
for i in 0 1; do wait_exit "${PSP[i]}" 30; [ "$EXIT_CODE" = 0 ] || fail "ps $i exited $EXIT_CODE"; done

for i in 0 1; do
    "$BIN/psc_ckpt" list "$TMP/ckpt/ps$i" >"$TMP/list$i.out" || fail "psc_ckpt list ps $i failed"
    awk '{print $1, $3}' "$TMP/list$i.out" | sort -n >"$TMP/steps$i.out"
done
n=$(wc -l <"$TMP/steps0.out")
echo "checkpoints on ps 0: $n; id step (ps 0 | ps 1):"
paste -d'|' "$TMP/steps0.out" "$TMP/steps1.out" | sed 's/^/  /' | head -40
[ "$n" -ge 8 ] || fail "only $n checkpoints were taken (expected one every 10 of ~240 global steps)"
[ "$(grep -c ' committed ' "$TMP/list0.out")" = "$n" ] || fail "not every checkpoint on ps 0 is committed"
if ! diff "$TMP/steps0.out" "$TMP/steps1.out" >"$TMP/diff.out"; then
    fail "checkpoints differ between the PS (id step): $(tr '\n' ' ' <"$TMP/diff.out")"
fi

# every checkpoint was taken behind a fence, released on both PS
for i in 0 1; do
    f=$(grep -c 'fence [0-9]* released' "$TMP/ps$i.log" || true)
    [ "$f" -ge "$n" ] || fail "ps $i logged $f fence releases for $n checkpoints"
done
pauses=$(sed -n 's/.*pushes paused at most \([0-9.]*\) ms on a ps.*/\1/p' "$TMP/worker0.log" | sort -n)
[ -n "$pauses" ] || fail "the chief logged no fence pause"
k=$(echo "$pauses" | wc -l)
echo "fence pause (Fence to the cut taken, the longest of the 2 PS) over $k checkpoints:" \
    "median $(echo "$pauses" | sed -n "$(((k + 1) / 2))p") ms, max $(echo "$pauses" | tail -1) ms"
# the fences park pushes and apply them later: none may be lost
gs=$(sed -n 's/.*evaluation on .* at global_step \([0-9]*\):.*/\1/p' "$TMP/worker0.log")
steps=$(cat "$TMP"/worker[01].log | sed -n 's/.*finished \([0-9]*\) steps in.*/\1/p' | awk '{ s += $1 } END { print s }')
echo "final global_step $gs; the replicas took $steps steps"
[ "$gs" = "$steps" ] || fail "global_step ended at $gs, the replicas took $steps steps: pushes parked by a fence were lost"
pass "$n async checkpoints, each at one step on both PS"
