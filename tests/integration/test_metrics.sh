#!/usr/bin/env bash
# test_metrics — ps_server --metrics_port on real processes:
# 1. a ps_server with --metrics_port logs where it serves and answers
#    /metrics (200, a page promtool accepts) before any job;
# 2. one worker trains a tiny MLP through it (in-cluster mode, the PS stays up
#    at the end); scrapes while it trains see global_step advance at a rate
#    > 0 steps/s; after it, the page passes `promtool check metrics`, the
#    counters are > 0 (gradients applied, push and pull bytes, Batch
#    requests: the tiny model's tensors all travel in one Batch call a step),
#    at least one Batch per step, Batch had no errors and one latency
#    observation per call,
#    global_step equals the steps the worker reported, and the shard's
#    variable count and bytes match the model;
# 3. any other path is 404;
# 4. --metrics_port 70000 exits 64; a metrics port already in use exits 69, and
#    so does an RPC port already in use (gRPC's SO_REUSEPORT is off)
#    with a one-line message naming the address: psc's line only, gRPC's own
#    chttp2_server line shows (as DEBUG) only with --log_level debug.
# No curl needed: the scrapes go through bash's /dev/tcp.
source "$(dirname "$0")/lib.sh"
require_dataset
PROMTOOL=/opt/psc/promtool
[ -x "$PROMTOOL" ] || fail "$PROMTOOL not found: run deploy/setup.sh (it installs promtool, which this test needs)"

# http_get PORT PATH OUT — GET http://127.0.0.1:PORT/PATH; body in OUT, status code in STATUS.
http_get() {
    local port=$1 path=$2 out=$3
    exec 3<>"/dev/tcp/127.0.0.1/$port" || fail "cannot connect to 127.0.0.1:$port"
    printf 'GET %s HTTP/1.1\r\nHost: 127.0.0.1:%s\r\nConnection: close\r\n\r\n' "$path" "$port" >&3
    timeout 10 cat <&3 >"$out.raw" || true # the server closes after the response
    exec 3<&-
    STATUS=$(head -n 1 "$out.raw" | tr -d '\r' | awk '{print $2}')
    sed '1,/^\r$/d' "$out.raw" >"$out"
}

# value FILE SERIES — the value of the sample SERIES (name{labels}) in a page, or "" when absent.
value() { awk -v s="$2" '$1 == s { print $2; exit }' "$1"; }

# gt0 FILE SERIES — fails unless SERIES is > 0.
gt0() {
    local v
    v=$(value "$1" "$2")
    [ -n "$v" ] || fail "no sample $2 on the page"
    awk -v v="$v" 'BEGIN { exit !(v > 0) }' || fail "$2 is $v, expected > 0"
}

cat >"$TMP/job.json" <<'JSON'
{"model": {"input_shape": [28, 28, 1],
           "layers": [{"type": "flatten"}, {"type": "dense", "units": 16, "activation": "relu"},
                      {"type": "dense", "units": 10}]},
 "optimizer": {"name": "adam", "learning_rate": 0.002},
 "data": {"train_examples": 640, "test_examples": 100},
 "batch_size_per_replica": 32, "epochs": 1, "seed": 5}
JSON
# global_step (8 bytes) + kernel (784, 16) + bias (16) + kernel (16, 10) + bias (10), float32
want_vars=5
want_bytes=$((8 + (784 * 16 + 16 + 16 * 10 + 10) * 4))

cluster 1 1
while :; do # a metrics port and a spare RPC port that the cluster does not use
    mapfile -t extra < <("$BIN/psc_free_port" 3)
    case " ${PS_ADDR[*]} ${WORKER_ADDR[*]} " in *":${extra[0]} "* | *":${extra[1]} "* | *":${extra[2]} "*) continue ;; esac
    break
done
MP=${extra[0]} SPARE=${extra[1]} WMP=${extra[2]}

# ---- 1. serving before any job ----
start_ps 0 --metrics_port "$MP"
PS_PID=$LAST_PID
wait_healthy "${PS_ADDR[0]}"
grep -q "metrics on 127.0.0.1:$MP/metrics" "$TMP/ps0.log" || fail "ps_server did not log 'metrics on 127.0.0.1:$MP/metrics'"
http_get "$MP" /metrics "$TMP/idle.prom"
[ "$STATUS" = 200 ] || fail "GET /metrics answered $STATUS"
[ "$(value "$TMP/idle.prom" psc_ps_ready)" = 0 ] || fail "psc_ps_ready is not 0 before any job"
[ "$(value "$TMP/idle.prom" 'psc_ps_rpc_requests_total{method="Batch"}')" = 0 ] || fail "Batch counted before any job"
"$PROMTOOL" check metrics <"$TMP/idle.prom" >"$TMP/promtool.out" 2>&1 || fail "promtool rejects the idle page: $(cat "$TMP/promtool.out")"

# ---- 2. a tiny job; scrapes while it trains ----
start_worker 0 "$TMP/job.json" --shutdown_ps_at_end 0 --debug_step_delay_ms 150 --metrics_port "$WMP"
W_PID=$LAST_PID
max_rate=0 n=0 wsteps=0
while kill -0 "$W_PID" 2>/dev/null; do
    # the worker's own page while it trains (it exits at the end)
    if (exec 3<>"/dev/tcp/127.0.0.1/$WMP") 2>/dev/null; then
        http_get "$WMP" /metrics "$TMP/worker.prom"
        # worker 0 of a cluster without a chief task is the chief: role="chief" (README "Metrics")
        v=$(value "$TMP/worker.prom" 'psc_worker_steps_total{role="chief"}')
        [ -n "$v" ] && wsteps=$v && cp "$TMP/worker.prom" "$TMP/worker_last.prom"
    fi
    http_get "$MP" /metrics "$TMP/during.prom"
    [ "$STATUS" = 200 ] || fail "GET /metrics during training answered $STATUS"
    r=$(value "$TMP/during.prom" psc_ps_steps_per_second)
    max_rate=$(awk -v a="$max_rate" -v b="${r:-0}" 'BEGIN { print (b > a ? b : a) }')
    n=$((n + 1))
    [ $n -lt 600 ] || fail "worker still training after 300 s"
    sleep 0.5
done
wait_exit "$W_PID" 10
[ "$EXIT_CODE" = 0 ] || fail "worker exited $EXIT_CODE"
kill -0 "$PS_PID" 2>/dev/null || fail "ps_server exited with the job (--shutdown_ps_at_end 0)"
awk -v r="$max_rate" 'BEGIN { exit !(r > 0) }' || fail "psc_ps_steps_per_second never > 0 in $n scrapes during training"
awk -v v="$wsteps" 'BEGIN { exit !(v > 0) }' || fail "the worker's psc_worker_steps_total never > 0"
"$PROMTOOL" check metrics <"$TMP/worker_last.prom" >"$TMP/promtool.out" 2>&1 ||
    fail "promtool rejects the worker's page: $(cat "$TMP/promtool.out")"
echo "worker page: psc_worker_steps_total $wsteps, promtool ok"

http_get "$MP" /metrics "$TMP/after.prom"
[ "$STATUS" = 200 ] || fail "GET /metrics after training answered $STATUS"
"$PROMTOOL" check metrics <"$TMP/after.prom" >"$TMP/promtool.out" 2>&1 ||
    fail "promtool rejects the page: $(cat "$TMP/promtool.out")"
for s in psc_ps_gradients_applied_total psc_ps_push_bytes_total psc_ps_pull_bytes_total \
    'psc_ps_rpc_requests_total{method="Batch"}' 'psc_ps_rpc_requests_total{method="Create"}' \
    'psc_ps_rpc_latency_seconds_sum{method="Batch"}'; do
    gt0 "$TMP/after.prom" "$s"
done
pp=$(value "$TMP/after.prom" 'psc_ps_rpc_requests_total{method="Batch"}')
[ "$(value "$TMP/after.prom" 'psc_ps_rpc_errors_total{method="Batch"}')" = 0 ] || fail "Batch errors counted"
[ "$(value "$TMP/after.prom" 'psc_ps_rpc_latency_seconds_count{method="Batch"}')" = "$pp" ] ||
    fail "Batch latency count differs from its $pp requests"
[ "$(value "$TMP/after.prom" 'psc_ps_rpc_latency_seconds_bucket{method="Batch",le="+Inf"}')" = "$pp" ] ||
    fail "Batch +Inf bucket differs from its $pp requests"
steps=$(sed -n 's/.*finished \([0-9]*\) steps.*/\1/p' "$TMP/worker0.log")
[ -n "$steps" ] || fail "the worker did not report its steps"
[ "$pp" -ge "$steps" ] || fail "$pp Batch calls for $steps steps: a step of this model is one Batch call"
[ "$(value "$TMP/after.prom" psc_ps_global_step)" = "$steps" ] ||
    fail "psc_ps_global_step $(value "$TMP/after.prom" psc_ps_global_step) != the worker's $steps steps"
[ "$(value "$TMP/after.prom" psc_ps_ready)" = 1 ] || fail "psc_ps_ready is not 1 after the job"
[ "$(value "$TMP/after.prom" psc_ps_variables)" = "$want_vars" ] ||
    fail "psc_ps_variables $(value "$TMP/after.prom" psc_ps_variables) != $want_vars"
[ "$(value "$TMP/after.prom" psc_ps_variable_bytes)" = "$want_bytes" ] ||
    fail "psc_ps_variable_bytes $(value "$TMP/after.prom" psc_ps_variable_bytes) != $want_bytes"
[ "$(value "$TMP/after.prom" psc_ps_gradients_stale_total)" = 0 ] || fail "stale gradients in an async job"
for s in psc_ps_requests_rejected_total psc_ps_sync_timeout_applies_total; do
    [ -n "$(value "$TMP/after.prom" "$s")" ] || fail "no sample $s on the page"
done
echo "trained $steps steps; Batch calls $pp; max $max_rate steps/s over $n scrapes during training"

# ---- 3. other paths ----
http_get "$MP" /nope "$TMP/nope.out"
[ "$STATUS" = 404 ] || fail "GET /nope answered $STATUS, expected 404"
http_get "$MP" "/metrics?x=1" "$TMP/query.prom"
[ "$STATUS" = 200 ] || fail "GET /metrics?x=1 answered $STATUS"

# ---- 4. bad and busy ports ----
one_ps="{\"ps\": [\"127.0.0.1:$SPARE\"], \"worker\": [\"127.0.0.1:1\"]}"
set +e
timeout 20 "$BIN/ps_server" --cluster "$one_ps" --task_index 0 --metrics_port 70000 >"$TMP/bad.out" 2>"$TMP/bad.log"
rc=$?
set -e
[ $rc = 64 ] || fail "--metrics_port 70000 exited $rc, expected 64"
grep -q -- "--metrics_port" "$TMP/bad.log" || fail "the usage error does not name --metrics_port: $(cat "$TMP/bad.log")"
set +e
timeout 20 "$BIN/ps_server" --cluster "$one_ps" --task_index 0 --metrics_port "$MP" >"$TMP/busy.out" 2>"$TMP/busy.log"
rc=$?
set -e
[ $rc = 69 ] || fail "a metrics port in use exited $rc, expected 69"
[ "$(wc -l <"$TMP/busy.log")" = 1 ] || fail "expected a one-line error, got: $(cat "$TMP/busy.log")"
grep -q "cannot bind 127.0.0.1:$MP" "$TMP/busy.log" || fail "the error does not name the address: $(cat "$TMP/busy.log")"
set +e
timeout 20 "$BIN/ps_server" --cluster "{\"ps\": [\"${PS_ADDR[0]}\"], \"worker\": [\"127.0.0.1:1\"]}" --task_index 0 \
    >"$TMP/busy2.out" 2>"$TMP/busy2.log"
rc=$?
set -e
[ $rc = 69 ] || fail "a second ps_server on a port in use exited $rc, expected 69: $(cat "$TMP/busy2.log")"
grep -q "cannot bind" "$TMP/busy2.log" || fail "the error does not say it cannot bind: $(cat "$TMP/busy2.log")"
# only psc's line: gRPC's own "chttp2_server.cc:1045] UNKNOWN:No address added..." stays below it...
[ "$(wc -l <"$TMP/busy2.log")" = 1 ] || fail "a port in use: expected psc's one line, got: $(cat "$TMP/busy2.log")"
! grep -q "chttp2_server" "$TMP/busy2.log" || fail "gRPC's own log line shows at the default log level"
# ...and shows, as a DEBUG line, with --log_level debug
set +e
timeout 20 "$BIN/ps_server" --cluster "{\"ps\": [\"${PS_ADDR[0]}\"], \"worker\": [\"127.0.0.1:1\"]}" --task_index 0 \
    --log_level debug >"$TMP/busy3.out" 2>"$TMP/busy3.log"
rc=$?
set -e
[ $rc = 69 ] || fail "a second ps_server (--log_level debug) on a port in use exited $rc, expected 69"
grep -q "DEBUG .*grpc .*chttp2_server" "$TMP/busy3.log" || fail "--log_level debug does not show gRPC's line: $(cat "$TMP/busy3.log")"

# the first ps_server still serves both ports, then stops cleanly
http_get "$MP" /metrics "$TMP/last.prom"
[ "$STATUS" = 200 ] || fail "the first ps_server stopped serving /metrics"
kill "$PS_PID"
wait_exit "$PS_PID" 20
[ "$EXIT_CODE" = 0 ] || fail "ps_server exited $EXIT_CODE after SIGTERM"
pass "metrics: ps_server and worker pages, counters, promtool, 404, bad and busy ports"
