#!/usr/bin/env bash
# test_online — online training with the real programs (docs/online-training.md): a job whose
# data.train is a followed directory (data.follow, idle_secs 3) trains each file as it is
# renamed into place, and every example exactly once, through a worker killed and a whole job
# restarted.
#
# psc_gen_ctr writes a pool of 24 synthetic Criteo files of 512 rows (8 batches of 64); the test
# publishes them into the followed directory one by one the way a writer should (.NAME.tmp, then
# mv), plus a half-written .tmp file that is never read, and a file that sorts before the files
# already taken (late: warned, never read, never counted). 1 ps + 2 workers, async, checkpoints
# every 20 steps, the chief evaluating after each on a rolling test directory. Bad follow keys and
# a missing directory are refused at start (exit 78 naming the key).
#   A: files 0-3 there at the start, 4-9 published while the job runs; worker 1 (slowed down
#      to 40 ms a step) is killed with kill -9 in the middle of a file and restarted, resumes
#      after the steps the PS counted for it; files 10-13 follow; the job ends by the idle limit.
#      global_step * 64 = 14 files * 512 rows; every file named in a "finished file" or
#      "skipped file" line.
#   B: the whole job again (same checkpoint directory) with files 14-15 waiting: the chief
#      restores the final checkpoint, each replica resumes after the steps the checkpoint
#      recorded for it. File 16 comes, both replicas wait for more and psctl checkpoint is
#      served meanwhile (72 steps of replica 0, 64 of replica 1: half of global_step would be
#      wrong for both), then every process is killed with kill -9; restarted, the model comes
#      back from that checkpoint and each replica from its own recorded steps; files 17-23
#      follow, each finished once; the job ends by the idle limit with global_step * 64 =
#      24 * 512: nothing trained twice, nothing skipped.
#   C: standalone-client mode: psctl train on a followed directory (idle limit 60 s), psctl stop
#      once both files are trained: the job ends as a success with its final checkpoint (step 16)
#      and evaluation, psctl train exits 0.
#   D: the chief's files hold one batch each, worker 1's 40 (slowed down): while the chief waits
#      for files, and then for worker 1 to finish, its checkpoints every 8 steps go on (at least 4
#      before the final one at 82, one of them in the second wait), and the evaluation after a
#      checkpoint sees the PS's weights of that time, not the chief's of its own last step.
source "$(dirname "$0")/lib.sh"

B=64
ROWS=512
NFILES=24
pool=$TMP/pool
"$BIN/psc_gen_ctr" --out "$pool" --train_rows $((ROWS * NFILES)) --test_rows 1000 --files $NFILES --seed 3 \
    --max_cardinality 100000 >"$TMP/gen.out" 2>"$TMP/gen.log" || fail "psc_gen_ctr failed: $(cat "$TMP/gen.log")"
D=$TMP/follow
T=$TMP/testdir
mkdir -p "$D" "$T"
cp "$pool/test.tsv" "$T/.t-000.tsv.tmp" && mv "$T/.t-000.tsv.tmp" "$T/t-000.tsv"

# publish K — pool file K as part-KK.tsv, written under a hidden .tmp name and renamed into place
publish() {
    local src
    src=$(printf '%s/train-%05d-of-%05d.tsv' "$pool" "$1" "$NFILES")
    cp "$src" "$D/.part-$(printf %02d "$1").tsv.tmp"
    mv "$D/.part-$(printf %02d "$1").tsv.tmp" "$D/part-$(printf %02d "$1").tsv"
}
for k in 0 1 2 3; do publish $k; done
head -c 3000 "$pool/train-00000-of-00024.tsv" >"$D/.part-99.tsv.tmp" # a writer at work: never read

spec=$TMP/online.json
cat >"$spec" <<JSON
{"model": {"layers": [
    {"type": "embedding", "table": "emb", "features": ["C1", "C2", "C3", "C4", "C5", "C6"]},
    {"type": "dense", "units": 8, "activation": "relu"},
    {"type": "dense", "units": 4, "activation": "relu"},
    {"type": "interaction"},
    {"type": "dense", "units": 1}],
  "loss": "sigmoid_cross_entropy"},
 "tables": [{"name": "emb", "rows": 100000, "dim": 4}],
 "optimizer": {"name": "adagrad", "learning_rate": 0.05},
 "data": {"format": "criteo", "train": "$D", "follow": {"idle_secs": 3, "poll_secs": 0.1},
          "test": "$T", "test_files": 1},
 "batch_size_per_replica": $B, "seed": 5, "checkpoint": {"every_steps": 20}}
JSON

cluster 1 2
# bad keys and a missing directory: refused at start, exit 78 naming the key
for bad in 's/"idle_secs": 3/"idle_secs": 0/' 's/"seed": 5/"seed": 5, "epochs": 2/' "s|\"train\": \"$D\"|\"train\": \"$TMP/nodir\"|"; do
    sed "$bad" "$spec" >"$TMP/bad.json"
    rc=0
    TF_CONFIG=$(tf_config worker 0) "$BIN/worker" --job_spec "$TMP/bad.json" 2>"$TMP/bad.err" || rc=$?
    [ "$rc" = 78 ] || fail "a bad followed spec ($bad) exited $rc, expected 78: $(cat "$TMP/bad.err")"
    grep -qE "data\.follow\.idle_secs: expected|epochs: a followed directory is read once|data\.train: cannot follow directory" \
        "$TMP/bad.err" || fail "the refusal does not name the key: $(cat "$TMP/bad.err")"
done
start_all() { # ps 0 (checkpoints in ${1:-$TMP/ckpt0}) and both workers, worker 1 slowed down
    start_ps 0 --checkpoint_dir "${1:-$TMP/ckpt0}"
    PS_PID=$LAST_PID
    wait_healthy "${PS_ADDR[0]}"
    start_worker 0 "$spec"
    W0=$LAST_PID
    start_worker 1 "$spec" --debug_step_delay_ms 40
    W1=$LAST_PID
}
# wait_log FILE REGEX SECS — until FILE has a line matching REGEX
wait_log() {
    local t=0
    until grep -qE "$2" "$1" 2>/dev/null; do
        sleep 0.1; t=$((t + 1))
        [ $t -le $(($3 * 10)) ] || fail "no line /$2/ in $1 within $3 s"
    done
}
# finish PHASE — every process exits 0 (the idle limit); the logs kept as PHASE-*.log
finish() {
    wait_exit "$W0" 90; [ "$EXIT_CODE" = 0 ] || fail "$1: the chief exited $EXIT_CODE"
    wait_exit "$W1" 30; [ "$EXIT_CODE" = 0 ] || fail "$1: worker 1 exited $EXIT_CODE"
    wait_exit "$PS_PID" 30; [ "$EXIT_CODE" = 0 ] || fail "$1: ps 0 exited $EXIT_CODE"
    for f in ps0 worker0 worker1; do mv "$TMP/$f.log" "$TMP/$1-$f.log"; done
}
# final_step PHASE — global_step of the final checkpoint
final_step() {
    sed -n 's/.*checkpoint [0-9]* (end of training) committed on every ps: step \([0-9]*\).*/\1/p' \
        "$TMP/$1-worker0.log" | tail -1
}

# ---- A: files arrive while the job runs; worker 1 killed mid-file and restarted ----
start_all
wait_log "$TMP/worker0.log" "finished file" 30
for k in 4 5 6 7 8 9; do publish $k; sleep 0.1; done
wait_log "$TMP/worker1.log" "finished file .*part-05" 30
sleep 0.15 # into part-07 (8 steps of 40 ms and more)
kill -9 "$W1"
wait "$W1" 2>/dev/null || true
steps_before=$(grep -c "finished file" "$TMP/worker1.log" || true)
mv "$TMP/worker1.log" "$TMP/A-worker1-killed.log"
start_worker 1 "$spec" --debug_step_delay_ms 40
W1=$LAST_PID
wait_log "$TMP/worker1.log" "this replica ran [0-9]+ steps before it restarted: resuming at step [0-9]+" 30
for k in 10 11 12 13; do publish $k; sleep 0.2; done
head -c 2000 "$pool/train-00001-of-00024.tsv" >"$D/part-00a.tsv" # sorts before taken files: late
finish A
gsA=$(final_step A)
[ -n "$gsA" ] || fail "A: no final checkpoint: $(tail -5 "$TMP/A-worker0.log")"
[ "$((gsA * B))" = $((14 * ROWS)) ] ||
    fail "A: global_step $gsA x $B = $((gsA * B)) examples trained, $((14 * ROWS)) written"
cat "$TMP/A-worker0.log" "$TMP/A-worker1-killed.log" "$TMP/A-worker1.log" >"$TMP/A-all.txt"
for k in $(seq 0 13); do
    n=$(grep -cE "(finished|skipped) file $D/part-$(printf %02d "$k").tsv \(512 examples" "$TMP/A-all.txt" || true)
    [ "$n" -ge 1 ] || fail "A: part-$(printf %02d "$k").tsv was never finished"
done
grep -q "part-99" "$TMP/A-all.txt" && fail "A: the half-written .tmp file was read"
grep -q "part-00a.tsv appeared after .* and sorts before it: it is never read" "$TMP/A-worker0.log" ||
    fail "A: the late file was not reported"
grep -q "finished file.*part-00a" "$TMP/A-all.txt" && fail "A: the late file was trained"
grep -qE "evaluation after checkpoint [0-9]+ on 1000 test examples at global_step [0-9]+: AUC 0\." \
    "$TMP/A-worker0.log" || fail "A: the chief did not evaluate after its checkpoints"
at=$(sed -n 's/.*before it restarted: resuming at step \([0-9]*\).*/\1/p' "$TMP/A-worker1.log")
where="in the middle of a file: step $at is batch $((at % (ROWS / B))) of $((ROWS / B))"
[ $((at % (ROWS / B))) != 0 ] || where="at a file's end this time (step $at)"
echo "A: $gsA steps x $B = $((14 * ROWS)) examples of 14 files; worker 1 killed after $steps_before files, $where"

# ---- B: the whole job restarted with more files, killed whole (kill -9) and restarted again ----
# B1: files 14 and 15 wait; both replicas resume after the final checkpoint's steps (7 files
# each), train them, then 16 comes (replica 0's); psctl checkpoint while both wait for more,
# then every process is killed. The checkpoint's replica steps are known: 9 files of replica 0
# (72 steps), 8 of replica 1 (64): unequal, so half of global_step would resume both wrongly.
rm -f "$D/part-00a.tsv"
for k in 14 15; do publish $k; done
start_all
for r in 0 1; do
    wait_log "$TMP/worker$r.log" "the model was restored at global_step $gsA, whose checkpoint records 56 steps of this replica: resuming at step 56" 30
done
wait_log "$TMP/worker0.log" "finished file $D/part-14.tsv \(512 examples\)" 30
wait_log "$TMP/worker1.log" "finished file $D/part-15.tsv \(512 examples\)" 30
publish 16
wait_log "$TMP/worker0.log" "finished file $D/part-16.tsv \(512 examples\)" 30
"$BIN/psctl" --cluster "$CLUSTER" checkpoint >"$TMP/ckpt.out" 2>&1 || fail "B1: psctl checkpoint: $(cat "$TMP/ckpt.out")"
ckstep=$(sed -n 's/^checkpoint [0-9]* committed at step \([0-9]*\)$/\1/p' "$TMP/ckpt.out")
[ "$ckstep" = $((gsA + 24)) ] || fail "B1: psctl checkpoint at step '$ckstep', expected $((gsA + 24)): $(cat "$TMP/ckpt.out")"
kill -9 "$W0" "$W1" "$PS_PID"
wait "$W0" "$W1" "$PS_PID" 2>/dev/null || true
for f in ps0 worker0 worker1; do mv "$TMP/$f.log" "$TMP/B1-$f.log"; done
# B2: restarted whole; files 17-23 come while it runs
start_all
wait_log "$TMP/worker0.log" "the model was restored at global_step $ckstep, whose checkpoint records 72 steps of this replica: resuming at step 72" 30
wait_log "$TMP/worker1.log" "the model was restored at global_step $ckstep, whose checkpoint records 64 steps of this replica: resuming at step 64" 30
for k in 17 18 19 20 21 22 23; do publish $k; sleep 0.15; done
finish B2
gsB=$(final_step B2)
[ -n "$gsB" ] || fail "B: no final checkpoint: $(tail -5 "$TMP/B2-worker0.log")"
[ "$((gsB * B))" = $((NFILES * ROWS)) ] ||
    fail "B: global_step $gsB x $B = $((gsB * B)) examples trained, $((NFILES * ROWS)) written"
for k in $(seq 17 23); do
    r=$((k % 2))
    n=$(grep -c "finished file $D/part-$k.tsv (512 examples)" "$TMP/B2-worker$r.log" || true)
    [ "$n" = 1 ] || fail "B2: part-$k.tsv finished $n times by replica $r"
done
grep -q "finished file.*part-1[0-6]" "$TMP/B2-worker0.log" "$TMP/B2-worker1.log" &&
    fail "B2: a file trained before the checkpoint was trained again"
echo "B: resumed at $gsA (56 + 56 steps); psctl checkpoint at step $ckstep (72 + 64), all killed, restarted;" \
    "$gsB steps x $B = $((NFILES * ROWS)) examples of $NFILES files"
# ---- C: standalone-client mode: psctl train, then psctl stop ends the job as a success ----
# A followed directory's job has no end but the idle limit (60 s here): psctl stop finishes it at
# the next step, with its final checkpoint and evaluation, and psctl train exits 0.
D2=$TMP/follow2
mkdir -p "$D2"
for k in 0 1; do cp "$pool/train-0000$k-of-00024.tsv" "$D2/.p$k.tmp"; mv "$D2/.p$k.tmp" "$D2/p$k.tsv"; done
sed -e "s|\"train\": \"$D\"|\"train\": \"$D2\"|" -e 's/"idle_secs": 3/"idle_secs": 60/' "$spec" >"$TMP/c.json"
cluster 1 2
start_ps 0 --checkpoint_dir "$TMP/ckpt-c"
PS_PID=$LAST_PID
wait_healthy "${PS_ADDR[0]}"
for i in 0 1; do
    TF_CONFIG=$(tf_config worker "$i") "$BIN/worker" --log_every_secs 0.5 >"$TMP/c-worker$i.out" 2>"$TMP/c-worker$i.log" &
    PIDS+=($!)
done
for i in 0 1; do wait_healthy "${WORKER_ADDR[i]}"; done
"$BIN/psctl" --cluster "$CLUSTER" train "$TMP/c.json" >"$TMP/c-train.out" 2>"$TMP/c-train.err" &
TRAIN=$!
wait_log "$TMP/c-worker0.log" "finished file $D2/p0.tsv" 30
wait_log "$TMP/c-worker1.log" "finished file $D2/p1.tsv" 30
"$BIN/psctl" --cluster "$CLUSTER" stop >"$TMP/c-stop.out" 2>&1 || fail "C: psctl stop exited $?: $(cat "$TMP/c-stop.out")"
grep -q "is succeeded" "$TMP/c-stop.out" && grep -q "^psctl: finishing job [0-9a-f]*: a followed directory" "$TMP/c-stop.out" ||
    fail "C: psctl stop: $(cat "$TMP/c-stop.out")"
wait_exit "$TRAIN" 30
[ "$EXIT_CODE" = 0 ] || fail "C: psctl train exited $EXIT_CODE: $(tail -3 "$TMP/c-train.err")"
grep -q "asked to finish (psctl stop)" "$TMP/c-worker1.log" || fail "C: worker 1 was not asked to finish"
gsC=$(sed -n 's/.*checkpoint [0-9]* (end of training) committed on every ps: step \([0-9]*\).*/\1/p' "$TMP/c-worker0.log")
[ "$gsC" = $((2 * ROWS / B)) ] || fail "C: the final checkpoint is at step '$gsC', expected $((2 * ROWS / B))"
grep -q "^test AUC: 0\." "$TMP/c-train.out" || fail "C: psctl train printed no test AUC: $(cat "$TMP/c-train.out")"
echo "C: psctl stop: $(cat "$TMP/c-stop.out"); final checkpoint at step $gsC"
# ---- D: the chief waits for files while worker 1 trains: every_steps checkpoints still come ----
# Files 0 and 2 (the chief's) hold one batch each, 1 and 3 (worker 1's, slowed to 40 ms a step) 40
# each: the chief trains 2 steps and then waits, while global_step runs to 82. Its checkpoints every
# 8 steps must go on meanwhile (it reads global_step from the PS while it waits; it used to check
# its own last step's, and took none until the end), and when its idle limit has come, while it
# waits for worker 1 to finish.
D3=$TMP/follow3
mkdir -p "$D3"
pool_file() { printf '%s/train-%05d-of-%05d.tsv' "$pool" "$1" "$NFILES"; }
head -n $B "$(pool_file 0)" >"$D3/.q0.tmp"
cat "$(pool_file 1)" "$(pool_file 2)" "$(pool_file 3)" "$(pool_file 4)" "$(pool_file 5)" >"$D3/.q1.tmp"
head -n $B "$(pool_file 6)" >"$D3/.q2.tmp"
cat "$(pool_file 7)" "$(pool_file 8)" "$(pool_file 9)" "$(pool_file 10)" "$(pool_file 11)" >"$D3/.q3.tmp"
for k in 0 1 2 3; do mv "$D3/.q$k.tmp" "$D3/q$k.tsv"; done
sed -e "s|\"train\": \"$D\"|\"train\": \"$D3\"|" -e 's/"idle_secs": 3/"idle_secs": 2/' \
    -e 's/"every_steps": 20/"every_steps": 8/' "$spec" >"$TMP/d.json"
spec=$TMP/d.json
cluster 1 2
start_all "$TMP/ckpt-d"
finish D
gsD=$(final_step D)
[ "$gsD" = $((2 + 2 * 5 * ROWS / B)) ] || fail "D: the final checkpoint is at step '$gsD', expected $((2 + 2 * 5 * ROWS / B))"
[ "$(grep -c "finished file $D3/q[02].tsv ($B examples" "$TMP/D-worker0.log")" = 2 ] ||
    fail "D: the chief did not train its two one-batch files: $(grep "finished file" "$TMP/D-worker0.log")"
nper=$(grep -cE "checkpoint [0-9]+ \(periodic\) committed on every ps: step ([89]|[1-9][0-9])" "$TMP/D-worker0.log" || true)
[ "$nper" -ge 4 ] || fail "D: $nper periodic checkpoints while the chief waited (global_step $gsD, every 8 steps)"
# some while it waited for files, with an evaluation of the model as the PS had it then (not the
# chief's weights of its own last step, global_step 2), some while it waited for worker 1 to finish
ev=$(sed -n 's/.*evaluation after checkpoint [0-9]* on .* at global_step \([0-9]*\):.*/\1/p' "$TMP/D-worker0.log" | head -1)
[ -n "$ev" ] && [ "$ev" -ge 8 ] || fail "D: the first evaluation after a checkpoint is at global_step '$ev', expected >= 8"
nend=$(sed -n '/finished 2 steps in/,$p' "$TMP/D-worker0.log" | grep -c "(periodic) committed" || true)
[ "$nend" -ge 1 ] && [ "$nend" -lt "$nper" ] ||
    fail "D: $nend of $nper periodic checkpoints after the chief's idle limit: some in each wait expected"
echo "D: the chief trained 2 steps and waited; $nper periodic checkpoints meanwhile ($nend while it waited for" \
    "worker 1 to finish), the first evaluation at global_step $ev; final at step $gsD"
pass "online training: files followed as they arrive, each example trained exactly once through a killed worker and a restarted job; psctl stop ends it; the chief checkpoints while it waits for files"
