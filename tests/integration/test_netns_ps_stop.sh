#!/usr/bin/env bash
# test_netns_ps_stop — a PS stopped (SIGTERM, as Kubernetes does in a rolling
# update) while a worker's push is still crawling up a slow link, between real
# hosts (Linux network namespaces joined by a bridge, see netns.sh): 1 ps with
# a checkpoint dir + 1 worker (the chief), async, checkpoints every step, the
# worker's link limited to 1000 kbit/s each way (htb), so each push of the
# 200 KB of gradients spends about 1.6 s on the wire.
# Three times: wait for a checkpoint since the last restart, then until the
# worker's outgoing queue holds over 30 KB (a push is on its way); SIGTERM the PS, start it again on the same address and
# checkpoint dir. gRPC cancels a call whose request is still arriving when its
# server shuts down, and the worker sees CANCELLED (not UNAVAILABLE): it must
# take that as the PS going away, wait for it, let the chief restore the latest
# checkpoint, and train on. Checks, each time: the PS exits 0; the worker
# logs that the PS went away and that it answers again, and is not at a
# global_step below the checkpoint's; it is still running. At the end the
# worker stops on SIGTERM with 143 and no "training failed".
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/netns.sh"
require_dataset
netns_require_tc
netns_require
T_START=$(date +%s)
for h in ps0 w0; do netns_host "$h"; done
ns_cluster "ps0" "w0"
cat >"$TMP/job.json" <<'JSON'
{"model": {"input_shape": [28, 28, 1],
           "layers": [{"type": "flatten"}, {"type": "dense", "units": 64, "activation": "relu"},
                      {"type": "dense", "units": 10}]},
 "optimizer": {"name": "gradient_descent", "learning_rate": 0.1},
 "data": {"train_examples": 6000, "test_examples": 1000},
 "checkpoint": {"every_steps": 1, "keep": 2},
 "batch_size_per_replica": 32, "epochs": 1000, "steps": 100000, "seed": 9}
JSON
net_rate w0 1000
ns_start_ps 0 --checkpoint_dir "$TMP/ckpt"; P=$LAST_PID
ns_wait_healthy w0 "${PS_ADDR[0]}"
ns_start_worker 0 "$TMP/job.json" --retry_secs 60; W=$LAST_PID

codes=()
done_before=0
for k in 1 2 3; do
    # a step done and checkpointed since the last restart, then a push on its way
    # (the worker's outgoing queue holds most of it)
    t=0
    until [ "$(grep -ac "(periodic) committed" "$TMP/worker0.log")" -gt "$done_before" ]; do
        sleep 0.1; t=$((t + 1)); [ $t -le 600 ] || fail "stop $k: no checkpoint since the last restart within 60 s"
    done
    t=0
    until [ "$(net_backlog w0)" -gt 30000 ]; do
        sleep 0.05; t=$((t + 1)); [ $t -le 400 ] || fail "stop $k: no push under way after 20 s"
    done
    done_before=$(grep -ac "(periodic) committed" "$TMP/worker0.log")
    ckpt_step=$(grep -a "(periodic) committed" "$TMP/worker0.log" | tail -n 1 | sed 's/.*step \([0-9]*\).*/\1/')
    kill -TERM "$P"
    wait_exit "$P" 20
    [ "$EXIT_CODE" = 0 ] || fail "stop $k: ps exited $EXIT_CODE on SIGTERM"
    ns_start_ps 0 --checkpoint_dir "$TMP/ckpt"; P=$LAST_PID
    t=0
    until [ "$(grep -ac 'answer again after' "$TMP/worker0.log")" -ge "$k" ]; do
        sleep 0.1; t=$((t + 1))
        kill -0 "$W" 2>/dev/null || fail "stop $k: the worker died: $(grep -a 'ERROR' "$TMP/worker0.log" | tail -n 1)"
        [ $t -le 600 ] || fail "stop $k: the worker did not get going again within 60 s"
    done
    codes+=("$(grep -a 'parameter servers unavailable (' "$TMP/worker0.log" | tail -n 1 | sed 's/.*failed: \([A-Z_]*\):.*/\1/')")
    gs=$(grep -a 'answer again after' "$TMP/worker0.log" | tail -n 1 | sed 's/.*global_step \([0-9]*\).*/\1/')
    [ "$gs" -ge "$ckpt_step" ] || fail "stop $k: the worker went on at global_step $gs, before checkpoint step $ckpt_step"
    echo "stop $k: the worker saw ${codes[-1]}, went on at global_step $gs (its latest checkpoint was at step $ckpt_step)"
done
# it trains on: another checkpoint after the last restart
t=0
until [ "$(grep -ac "(periodic) committed" "$TMP/worker0.log")" -gt "$done_before" ]; do
    sleep 0.1; t=$((t + 1)); [ $t -le 600 ] || fail "no checkpoint after the last restart within 60 s"
done
kill -TERM "$W"
wait_exit "$W" 20
[ "$EXIT_CODE" = 143 ] || fail "worker exited $EXIT_CODE on SIGTERM"
! grep -aq "training failed" "$TMP/worker0.log" || fail "$(grep -a 'training failed' "$TMP/worker0.log")"
kill -TERM "$P"; wait_exit "$P" 20
pass "3 PS stops with a push under way on a slow link, the worker saw ${codes[*]} and trained on each time; $(($(date +%s) - T_START)) s"
