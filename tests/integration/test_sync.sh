#!/usr/bin/env bash
# test_sync — sync-replica training (TF SyncReplicasOptimizer semantics) on real
# processes:
# 1. equivalence: 2 workers with R = N = 2, batch 32 each, SGD, data in file
#    order, give after 12 steps the same variables as 1 worker with batch 64 over
#    the same examples (max |diff| <= 1e-5): the defining property of synchronous
#    data parallelism; the 2-worker run again with gradients pushed as bfloat16
#    ends within 1e-3 of it, and not equal (the rounding is real);
# 2. backup workers: 3 workers, R = 2, worker 2 slowed by --debug_step_delay_ms (4x the others):
#    the fast two finish long before it, its replies and the PS counters show
#    stale gradients, and the accuracy is comparable to R = N = 2;
# 3. dead worker: kill -9 one of 2 workers (R = N = 2, timeout 2 s): after 2 s
#    of silence it no longer counts, a step needs 1 gradient, the other finishes,
#    the chief stops waiting for the dead one, every live process exits 0.
source "$(dirname "$0")/lib.sh"
require_dataset

# spec FILE BATCH SYNC_JSON EXTRA — an MLP spec; SYNC_JSON "" for async.
spec() {
    cat >"$1" <<JSON
{"model": {"input_shape": [28, 28, 1],
           "layers": [{"type": "flatten"}, {"type": "dense", "units": 32, "activation": "relu"},
                      {"type": "dense", "units": 10}]},
 "optimizer": {"name": "gradient_descent", "learning_rate": 0.1},
 "data": {"train_examples": $4, "test_examples": 1000, "shuffle": $5},
 "batch_size_per_replica": $2, "epochs": $6 $3, "seed": 9}
JSON
}

# run_cluster NPS NW SPEC [flags for the last worker...] — starts the cluster;
# ALL_FLAGS (an array) go to every worker.
run_cluster() {
    local nps=$1 nw=$2 sp=$3 i; shift 3
    cluster "$nps" "$nw"
    PSP=(); WP=()
    for ((i = 0; i < nps; i++)); do start_ps "$i"; PSP+=("$LAST_PID"); done
    for ((i = 0; i < nps; i++)); do wait_healthy "${PS_ADDR[i]}"; done
    for ((i = 0; i < nw; i++)); do
        if ((i == nw - 1)); then start_worker "$i" "$sp" "${ALL_FLAGS[@]}" "$@"; else start_worker "$i" "$sp" "${ALL_FLAGS[@]}"; fi
        WP+=("$LAST_PID")
    done
}

finish_cluster() {
    local i
    for ((i = 0; i < ${#WP[@]}; i++)); do wait_exit "${WP[i]}" 300; [ "$EXIT_CODE" = 0 ] || fail "worker $i exited $EXIT_CODE"; done
    for ((i = 0; i < ${#PSP[@]}; i++)); do wait_exit "${PSP[i]}" 30; [ "$EXIT_CODE" = 0 ] || fail "ps $i exited $EXIT_CODE"; done
    ACC=$(sed -n 's/^test accuracy: //p' "$TMP/worker0.out")
    [ -n "$ACC" ] || fail "no test accuracy"
}

save_logs() { for f in "$TMP"/*.log "$TMP"/*.out; do mv "$f" "$f.$1"; done; }

# ---- 1. equivalence ----
spec "$TMP/one.json" 64 ', "steps": 12' 1280 false 1
spec "$TMP/two.json" 32 ', "steps": 12, "sync": {"replicas_to_aggregate": 2, "total_num_replicas": 2, "timeout_secs": 60}' 1280 false 1
ALL_FLAGS=(--shutdown_ps_at_end 0)
run_cluster 1 1 "$TMP/one.json"
wait_exit "${WP[0]}" 120; [ "$EXIT_CODE" = 0 ] || fail "single worker exited $EXIT_CODE"
gs1=$("$BIN/psc_dump" "$TMP/one.json" "$CLUSTER" "$TMP/one.bin") || fail "dump of the single-worker run failed"
kill "${PSP[0]}"; wait_exit "${PSP[0]}" 30
save_logs one
# sync_run NAME — 2 ps + 2 sync workers train $TMP/NAME.json to the end; the
# variables go to $TMP/NAME.bin, global_step to GS
sync_run() {
    local i p
    run_cluster 2 2 "$TMP/$1.json"
    for i in 0 1; do wait_exit "${WP[i]}" 120; [ "$EXIT_CODE" = 0 ] || fail "$1: sync worker $i exited $EXIT_CODE"; done
    GS=$("$BIN/psc_dump" "$TMP/$1.json" "$CLUSTER" "$TMP/$1.bin") || fail "dump of the $1 run failed"
    for p in "${PSP[@]}"; do kill "$p"; wait_exit "$p" 30; done
}
sync_run two
gs2=$GS
d=$("$BIN/psc_dump" --diff "$TMP/one.bin" "$TMP/two.bin")
echo "equivalence: global_step $gs1 (1 worker, batch 64) vs $gs2 (2 sync workers, batch 32 each); $d"
[ "$gs1" = 12 ] && [ "$gs2" = 12 ] || fail "global_step should be 12 in both runs"
awk -v d="$(echo "$d" | awk '{print $2}')" 'BEGIN { exit !(d <= 1e-5) }' || fail "variables differ: $d"
save_logs two
# the same sync run with gradients pushed as bfloat16: the PS sums and applies
# what arrives, so the variables move off the float32 run's by the rounding
# (relative 2^-9 of each gradient), no more
spec "$TMP/two16.json" 32 ', "steps": 12, "gradient_dtype": "bfloat16", "sync": {"replicas_to_aggregate": 2, "total_num_replicas": 2, "timeout_secs": 60}' 1280 false 1
sync_run two16
gs3=$GS
d16=$("$BIN/psc_dump" --diff "$TMP/two.bin" "$TMP/two16.bin")
echo "bfloat16 gradients, sync: global_step $gs3; against float32 gradients: $d16"
[ "$gs3" = 12 ] || fail "global_step should be 12 with bfloat16 gradients"
awk -v d="$(echo "$d16" | awk '{print $2}')" 'BEGIN { exit !(d > 0 && d <= 1e-3) }' ||
    fail "bfloat16 gradients: variables should differ from the float32 run's by the rounding only: $d16"
save_logs two16
ALL_FLAGS=()

# ---- 2. backup workers ----
spec "$TMP/r2n2.json" 32 ', "sync": {"replicas_to_aggregate": 2, "total_num_replicas": 2, "timeout_secs": 30}' 6000 true 1
spec "$TMP/r2n3.json" 32 ', "sync": {"replicas_to_aggregate": 2, "total_num_replicas": 3, "timeout_secs": 30}' 6000 true 1
run_cluster 1 2 "$TMP/r2n2.json"
finish_cluster
acc_r2n2=$ACC
save_logs r2n2
# every worker is slowed a little so that their steps overlap however unevenly
# they start (on a loaded machine start-up differs by a second); worker 2 a lot
ALL_FLAGS=(--debug_step_delay_ms 25)
run_cluster 1 3 "$TMP/r2n3.json" --debug_step_delay_ms 100
ALL_FLAGS=()
finish_cluster
# each worker's own training time (startup and data loading excluded)
train_secs() { sed -n 's/.*finished [0-9]* steps in \([0-9.]*\) s.*/\1/p' "$TMP/worker$1.log"; }
fast_done=$(train_secs 1)
slow_done=$(train_secs 2)
acc_r2n3=$ACC
slow_stale=$(sed -n 's/.*sync: \([0-9]*\) of \([0-9]*\) steps of this replica were stale.*/\1/p' "$TMP/worker2.log")
ps_stale=$(sed -n 's/.*ps 0: .* stale \([0-9]*\).*/\1/p' "$TMP/worker0.log" | tail -1)
echo "backup workers: fast worker trained for ${fast_done}s, slow one for ${slow_done}s; slow worker's stale steps $slow_stale; ps stale counter $ps_stale; accuracy R=2,N=3 $acc_r2n3 vs R=N=2 $acc_r2n2"
[ -n "$slow_stale" ] && [ "$slow_stale" -gt 0 ] || fail "the slow worker saw no stale replies"
[ -n "$ps_stale" ] && [ "$ps_stale" -gt 0 ] || fail "the PS counted no stale gradients"
awk -v f="$fast_done" -v s="$slow_done" 'BEGIN { exit !(f < s / 2) }' || fail "the fast workers did not outpace the slow one"
awk -v a="$acc_r2n3" -v b="$acc_r2n2" 'BEGIN { exit !(a >= b - 0.05 && a >= 0.6) }' || fail "accuracy $acc_r2n3 not comparable to $acc_r2n2"
save_logs r2n3

# ---- 3. dead worker ----
# (allow_partial: the job may end without the dead replica's share; without it the job fails, test_job_failure)
spec "$TMP/dead.json" 32 ', "sync": {"replicas_to_aggregate": 2, "total_num_replicas": 2, "timeout_secs": 2}, "allow_partial": true' 6000 true 1
ALL_FLAGS=(--wait_workers_secs 4)
run_cluster 1 2 "$TMP/dead.json" --debug_step_delay_ms 50 # both go at its pace: ~5 s
ALL_FLAGS=()
for _ in $(seq 300); do grep -q 'step [1-9][0-9]*/' "$TMP/worker1.log" 2>/dev/null && break; sleep 0.1; done
grep -q 'finished' "$TMP/worker1.log" && fail "worker 1 finished before it could be killed"
kill -9 "${WP[1]}"
wait_exit "${WP[0]}" 180; [ "$EXIT_CODE" = 0 ] || fail "the surviving chief exited $EXIT_CODE"
wait_exit "${PSP[0]}" 30; [ "$EXIT_CODE" = 0 ] || fail "ps exited $EXIT_CODE"
# after 2 s of silence the dead replica no longer counts: a step then needs 1 gradient
grep -q 'sync: 1 of 2 replicas present; a step now needs 1 gradient$' "$TMP/ps0.log" ||
    fail "the PS did not notice the dead replica"
grep -q 'replica 1 (worker 1) trained [0-9]* of [0-9]* steps; the job ends without them (allow_partial)' "$TMP/worker0.log" ||
    fail "the chief did not give up on the dead worker"
acc=$(sed -n 's/^test accuracy: //p' "$TMP/worker0.out")
echo "dead worker: the chief finished alone, test accuracy $acc; ps: $(grep -c 'applied after' "$TMP/ps0.log") steps applied by the timeout rule"
pass "sync replicas: equivalence, backup workers, dead worker"
