#!/usr/bin/env bash
# test_jobs_ckpt — jobs in a row on one standalone cluster whose PS keep their
# checkpoint stores (2 ps with --checkpoint_dir + 2 workers, real RocksDB):
# 1. `psctl checkpoint` before any job is refused at once (FAILED_PRECONDITION,
#    exit 1), even with a short --timeout_secs, and no request outlives its job;
# 2. job A (model 1), job B (model 2), job C (model 1 again, more epochs): each
#    takes periodic, on-demand (psctl checkpoint) and final checkpoints; every
#    checkpoint id is new (ids were per job: B's first collided with A's);
# 3. C starts from A's final checkpoint and ends at its own total
#    (StopAtStepHook): it trains epochs(C) - epochs(A) worth of steps;
# 4. ps 1 killed with -9 during C and restarted: the chief restores C's newest
#    committed checkpoint;
# 5. C submitted again when done: restored at its final checkpoint, it trains
#    only up to its total (it used to train all its epochs again);
# 6. every PS's store, read offline (psc_ckpt), holds unique ids, each job's
#    last 3, committed and intact.
source "$(dirname "$0")/lib.sh"
require_dataset

spec() { small_spec "$1" "$2" "$3" ', "checkpoint": {"every_steps": 40, "keep": 3}'; }
spec "$TMP/a.json" 1 5
sed 's/"units": 32/"units": 48/' "$TMP/a.json" >"$TMP/b.json"
spec "$TMP/c.json" 3 5

cluster 2 2
PSP=()
for i in 0 1; do start_ps "$i" --checkpoint_dir "$TMP/ckpt$i"; PSP+=("$LAST_PID"); done
for i in 0 1; do wait_healthy "${PS_ADDR[i]}"; done
WP=()
for i in 0 1; do
    TF_CONFIG=$(tf_config worker "$i") "$BIN/worker" --log_every_secs 0.5 --debug_step_delay_ms 15 \
        >"$TMP/worker$i.out" 2>"$TMP/worker$i.log" &
    WP+=($!); PIDS+=($!)
done
for i in 0 1; do wait_healthy "${WORKER_ADDR[i]}"; done
PSCTL=("$BIN/psctl" --cluster "$CLUSTER")
CHIEF_LOG="$TMP/worker0.log"

# ---- 1. before any job ----
t0=$(date +%s%N)
set +e; "${PSCTL[@]}" --timeout_secs 3 checkpoint >"$TMP/early.out" 2>&1; rc=$?; set -e
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
echo "checkpoint before any job: exit $rc after ${ms} ms: $(tail -1 "$TMP/early.out")"
[ $rc = 1 ] && grep -q 'FAILED_PRECONDITION: no job has run on this cluster yet' "$TMP/early.out" ||
    fail "checkpoint before any job: exit $rc: $(cat "$TMP/early.out")"
[ $ms -lt 2500 ] || fail "checkpoint before any job took ${ms} ms: it must be refused at once"

# committed_ids FROM — the ids of "checkpoint N (...) committed" lines of the chief's log after line FROM
committed_ids() { tail -n +"$(($1 + 1))" "$CHIEF_LOG" | sed -n 's/.*checkpoint \([0-9]*\) (\([a-z ]*\)) committed on every ps.*/\1 \2/p'; }
# log_has FROM REGEX — the chief's log after line FROM has a line matching REGEX
# (through a file: with pipefail, `tail | grep -q` fails when grep stops reading first)
log_has() { tail -n +"$(($1 + 1))" "$CHIEF_LOG" >"$TMP/since.txt"; grep -Eq "$2" "$TMP/since.txt"; }
# wait_log FROM REGEX SECS — waits for a chief log line after line FROM
wait_log() {
    local t=0
    until log_has "$1" "$2"; do
        sleep 0.1; t=$((t + 1)); [ $t -lt $(($3 * 10)) ] || fail "no '$2' in the chief's log within $3 s"
    done
}

# run_job NAME SPEC — submits, takes a checkpoint on demand once a periodic one
# is in, follows to the end; sets FROM (its first log line), GS (final global_step)
run_job() {
    local name=$1 spec=$2
    FROM=$(wc -l <"$CHIEF_LOG")
    "${PSCTL[@]}" train --detach "$spec" 2>"$TMP/$name.submit" || fail "job $name not submitted: $(cat "$TMP/$name.submit")"
    wait_log "$FROM" 'checkpoint [0-9]+ \(periodic\) committed' 60
    "${PSCTL[@]}" checkpoint --reason "test $name" >"$TMP/$name.ckpt" 2>&1 || fail "job $name: psctl checkpoint exited $?: $(cat "$TMP/$name.ckpt")"
    grep -q '^checkpoint [0-9]* committed at step [0-9]*$' "$TMP/$name.ckpt" || fail "job $name: $(cat "$TMP/$name.ckpt")"
    [ "${KILL_PS_IN:-}" = "$name" ] && kill_and_restart_ps1
    "${PSCTL[@]}" attach >"$TMP/$name.out" 2>"$TMP/$name.err" || fail "job $name: psctl attach exited $?: $(tail -3 "$TMP/$name.err")"
    GS=$(sed -n 's/.*succeeded: .* global_step \([0-9]*\),.*/\1/p' "$TMP/$name.err")
    [ -n "$GS" ] || fail "job $name: no global_step in $(cat "$TMP/$name.err")"
    local kinds
    kinds=$(committed_ids "$FROM" | cut -d' ' -f2- | sort -u | tr '\n' ',')
    echo "job $name: global_step $GS; checkpoints $(committed_ids "$FROM" | cut -d' ' -f1 | tr '\n' ' ')($kinds); on demand: $(cat "$TMP/$name.ckpt")"
    for k in periodic requested; do
        committed_ids "$FROM" | grep -c " $k\$" >/dev/null || fail "job $name took no $k checkpoint: $(tail -n +"$((FROM + 1))" "$CHIEF_LOG" | grep -i checkpoint)"
    done
    # the job's final state is in a checkpoint: the end-of-training one, or a
    # periodic one that landed on the final global_step (the chief then takes
    # no second one at the same step; 560 = 14 x 40 did in one run)
    committed_ids "$FROM" | grep -c " end of training\$" >/dev/null ||
        log_has "$FROM" "checkpoint [0-9]+ \\(periodic\\) committed on every ps: step $GS," ||
        fail "job $name took no end of training checkpoint: $(tail -n +"$((FROM + 1))" "$CHIEF_LOG" | grep -i checkpoint)"
    if log_has "$FROM" 'ids are not reused'; then fail "job $name: a checkpoint id collided"; fi
}

# kill -9 ps 1 once a periodic checkpoint of this job is in, restart it; the
# chief must restore the newest committed checkpoint (read after the kill:
# with ps 1 dead no other one can commit)
kill_and_restart_ps1() {
    kill -9 "${PSP[1]}"
    wait "${PSP[1]}" 2>/dev/null || true
    NEWEST=$(committed_ids 0 | tail -1 | cut -d' ' -f1)
    local killed_at
    killed_at=$(wc -l <"$CHIEF_LOG")
    sleep 1
    start_ps 1 --checkpoint_dir "$TMP/ckpt1"; PSP[1]=$LAST_PID
    mv "$TMP/ps1.log" "$TMP/ps1.restarted.log" 2>/dev/null || true
    wait_log "$killed_at" 'lost the model: restored checkpoint [0-9]+' 60
    local restored
    restored=$(tail -n +"$((killed_at + 1))" "$CHIEF_LOG" | sed -n 's/.*lost the model: restored checkpoint \([0-9]*\) .*/\1/p' | head -1)
    echo "ps 1 killed during job C: newest committed checkpoint $NEWEST, the chief restored $restored"
    [ "$restored" = "$NEWEST" ] || fail "restored checkpoint $restored, the newest committed was $NEWEST"
}

run_job A "$TMP/a.json"; FROM_A=$FROM; GS_A=$GS
per_epoch=$(sed -n 's/.* \([0-9]*\) steps per epoch.*/\1/p' "$CHIEF_LOG" | head -1)
# no push lost to the checkpoints' fences: one epoch of 2 replicas
[ "$GS_A" = $((2 * per_epoch)) ] || fail "job A ended at global_step $GS_A, its replicas took $((2 * per_epoch)) steps: $(grep -h WARN "$TMP"/worker*.log "$TMP"/ps*.log | head)"
run_job B "$TMP/b.json"
[ "$GS" = $((2 * per_epoch)) ] || fail "job B ended at global_step $GS, its replicas took $((2 * per_epoch)) steps: $(grep -h WARN "$TMP"/worker*.log "$TMP"/ps*.log | head)"
# no request outlives its job: between jobs a checkpoint is refused at once
set +e; "${PSCTL[@]}" --timeout_secs 3 checkpoint >"$TMP/between.out" 2>&1; rc=$?; set -e
[ $rc = 1 ] && grep -q 'FAILED_PRECONDITION: .*finished' "$TMP/between.out" || fail "checkpoint between jobs: exit $rc: $(cat "$TMP/between.out")"
KILL_PS_IN=C run_job C "$TMP/c.json"; FROM_C=$FROM; GS_C=$GS
tail -n +"$((FROM_C + 1))" "$CHIEF_LOG" | grep -E 'waiting up to|finished [0-9]+ steps|end of training|evaluation on' | sed 's/^/  C: /'
log_has "$FROM_C" "restored job .* from checkpoint" || fail "job C did not start from job A's checkpoint"
log_has "$FROM_C" "the model was restored at global_step $GS_A " || fail "job C did not resume after job A's $GS_A steps"
# C ends at its own total (3 epochs), not 3 epochs on top of A's one; the PS
# crash can only lose steps
total_c=$(( 2 * 3 * per_epoch )) # replicas x epochs x steps per epoch
[ "$GS_C" -le $((total_c + 1)) ] || fail "job C ended at global_step $GS_C, its total is $total_c"

# ---- 5. C again: nothing left to train but what the crash lost ----
run_job_again() {
    FROM=$(wc -l <"$CHIEF_LOG")
    "${PSCTL[@]}" train "$TMP/c.json" >"$TMP/d.out" 2>"$TMP/d.err" || fail "job C again: exit $?: $(tail -3 "$TMP/d.err")"
    GS=$(sed -n 's/.*succeeded: \([0-9]*\) steps, global_step \([0-9]*\),.*/\2/p' "$TMP/d.err")
    STEPS=$(sed -n 's/.*succeeded: \([0-9]*\) steps.*/\1/p' "$TMP/d.err")
}
run_job_again
echo "job C submitted again: $(grep succeeded "$TMP/d.err")"
# it restarts at C's last checkpoint and trains only what C's crash lost
[ "$GS" -ge "$GS_C" ] && [ "$GS" -le $((total_c + 1)) ] ||
    fail "job C again ended at global_step $GS; restored at $GS_C, it must stop at its total $total_c"
grep -q '^test accuracy' "$TMP/d.out" || fail "job C again printed no evaluation"

# ---- 6. the stores, offline ----
ALL=$(committed_ids 0 | cut -d' ' -f1)
[ "$(echo "$ALL" | sort -n | uniq -d)" = "" ] || fail "checkpoint ids taken twice: $(echo "$ALL" | sort -n | uniq -d | tr '\n' ' ')"
[ "$(echo "$ALL" | tr '\n' ' ')" = "$(echo "$ALL" | sort -n | tr '\n' ' ')" ] || fail "checkpoint ids not increasing: $(echo "$ALL" | tr '\n' ' ')"
grep -q 'not taken' "$CHIEF_LOG" && echo "checkpoints not taken (ps 1 was down): $(grep -c 'not taken' "$CHIEF_LOG")"
kill "${PSP[@]}" "${WP[@]}"
for p in "${PSP[@]}" "${WP[@]}"; do wait_exit "$p" 30; [ "$EXIT_CODE" = 0 ] || fail "a daemon exited $EXIT_CODE on SIGTERM"; done
for i in 0 1; do
    "$BIN/psc_ckpt" list "$TMP/ckpt$i" >"$TMP/list$i.txt" || fail "psc_ckpt list ps $i"
    sed "s/^/  ps $i: /" "$TMP/list$i.txt"
    if grep -v ' committed .* good' "$TMP/list$i.txt"; then fail "ps $i holds a checkpoint that is not committed and intact"; fi
    jobs=$(awk '{ for (i = 1; i < NF; i++) if ($i == "job") print $(i + 1) }' "$TMP/list$i.txt" | sort | uniq -c | awk '{ print $1 }' | tr '\n' ' ')
    [ "$jobs" = "3 3 " ] || fail "ps $i: checkpoints per job $jobs, expected the last 3 of each of 2 job ids"
done
diff <(cut -d' ' -f1,4 "$TMP/list0.txt") <(cut -d' ' -f1,4 "$TMP/list1.txt") >/dev/null || fail "the two PS hold different checkpoints"
pass "jobs in a row on shared checkpoint stores: unique ids, periodic/on-demand/final checkpoints in each job, the newest restored after kill -9, a resubmitted job ends at its total"
