#!/usr/bin/env bash
# test_bad_client — a misbehaving client cannot block the others. Against a
# real ps_server serving a training job, psc_badclient holds 400 TCP
# connections that never send a byte and 64 gRPC streams (8 connections) whose
# 4 MiB messages arrive one byte per second, for 25 s. Meanwhile:
# 1. the job trains to the end (worker exit 0, accuracy > 0.70) and a small
#    call (Status) from another client is served as before the attack (each
#    within its 5 s deadline; medians printed);
# 2. the server drops every silent connection after its handshake timeout
#    (10 s), none before 8 s;
# 3. a 9 MiB request (over the 8 MiB limit) gets RESOURCE_EXHAUSTED from the
#    server; the PS is still up, and its resident memory is printed.
source "$(dirname "$0")/lib.sh"
require_dataset

cat >"$TMP/job.json" <<'JSON'
{"model": {"input_shape": [28, 28, 1],
           "layers": [{"type": "flatten"}, {"type": "dense", "units": 64, "activation": "relu"},
                      {"type": "dense", "units": 10}]},
 "optimizer": {"name": "adam", "learning_rate": 0.002},
 "data": {"train_examples": 6000, "test_examples": 1000},
 "batch_size_per_replica": 32, "epochs": 2, "seed": 3}
JSON
cluster 1 1
start_ps 0; PS_PID=$LAST_PID
wait_healthy "${PS_ADDR[0]}"
PS=${PS_ADDR[0]}

# median_ms N — times N Status calls from fresh processes; prints the median in ms
median_ms() {
    local i t0 t1 ts=()
    for ((i = 0; i < $1; i++)); do
        t0=$(date +%s%N)
        "$BIN/psc_call" "$PS" /psc.ParameterServer/Status >/dev/null || fail "a Status call failed: $("$BIN/psc_call" "$PS" /psc.ParameterServer/Status)"
        t1=$(date +%s%N)
        ts+=($(((t1 - t0) / 1000000)))
    done
    printf '%s\n' "${ts[@]}" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'
}
before=$(median_ms 10)

"$BIN/psc_badclient" "$PS" 400 64 25 >"$TMP/badclient.out" 2>"$TMP/badclient.log" &
BAD=$!; PIDS+=($BAD)
sleep 2
start_worker 0 "$TMP/job.json" --shutdown_ps_at_end 0; W=$LAST_PID
during=$(median_ms 10)
rss=$(awk '/VmRSS/ { print $2 }' "/proc/$PS_PID/status")
wait_exit "$W" 120
[ "$EXIT_CODE" = 0 ] || fail "the worker exited $EXIT_CODE under the misbehaving client"
acc=$(sed -n 's/^test accuracy: //p' "$TMP/worker0.out")
awk -v a="$acc" 'BEGIN { exit !(a >= 0.70) }' || fail "accuracy $acc"
echo "training under attack: test accuracy $acc; $(grep -o 'finished .*' "$TMP/worker0.log" | head -1)"
echo "Status call (fresh process + connection each): median ${before} ms before, ${during} ms during the attack"
echo "ps_server resident memory during the attack: $((rss / 1024)) MiB"

wait_exit "$BAD" 40
[ "$EXIT_CODE" = 0 ] || fail "psc_badclient exited $EXIT_CODE: $(cat "$TMP/badclient.log")"
line=$(cat "$TMP/badclient.out"); echo "badclient: $line"
[[ $line =~ ^idle:\ 0\ open,\ 400\ closed\ by\ the\ server\ \(first\ after\ ([0-9.]+)\ s ]] ||
    fail "the server did not drop every silent connection: $line"
awk -v f="${BASH_REMATCH[1]}" 'BEGIN { exit !(f >= 8) }' || fail "silent connections dropped after ${BASH_REMATCH[1]} s, before the 10 s handshake timeout"

# ---- 3. over the message limit (the client's own limit lifted) ----
head -c $((9 * 1024 * 1024)) /dev/zero >"$TMP/big.bin"
set +e; out=$("$BIN/psc_call" --no_send_limit "$PS" /psc.ParameterServer/Push "$TMP/big.bin"); set -e
[[ $out == RESOURCE_EXHAUSTED*"Received message larger than max"* ]] || fail "a 9 MiB request got: $out"
echo "9 MiB request: $out"
kill -0 "$PS_PID" || fail "the PS died"
"$BIN/psc_call" "$PS" /psc.ParameterServer/Status >"$TMP/st2" || fail "the PS no longer answers"
kill "$PS_PID"; wait_exit "$PS_PID" 20
pass "a misbehaving client blocks no one"
