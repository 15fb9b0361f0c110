#!/usr/bin/env bash
# test_validate — what ps_server and worker check at start, on real processes
# (issue 16 items 5 and 9):
# 1. a job spec that does not fit its model's shapes (conv2d on input_shape
#    [784], a pool window larger than the feature map, dense on an image), a
#    sync.total_num_replicas that is not the cluster's number of training
#    replicas, and data files that are not there: `ps_server --job_spec` and
#    `worker --job_spec` exit 78 at once with one line naming the key; the
#    ps_server, which reads no data, starts with a spec whose data is missing;
#    the chief checks data.test, a non-chief worker does not read it;
# 2. a task from the flags that does not fit the cluster names the flags
#    (--job, --task_index), not "TF_CONFIG: task.index";
# 3. --help: worker's --job lists evaluator; the ranges of --threads,
#    --prefetch, --blas_threads;
# 4. --tls_ca without --tls_client_auth: one WARN line (ps_server: no effect;
#    worker: it verifies only the servers it connects to); none with it.
source "$(dirname "$0")/lib.sh"

cluster 1 2 # nothing listens there: every refusal comes before any connection
W0=$(tf_config worker 0)
W1=$(tf_config worker 1)
PS0=$(tf_config ps 0)

# spec FILE INPUT_SHAPE LAYERS [EXTRA] — a job spec; EXTRA adds top-level keys.
spec() {
    cat >"$1" <<JSON
{"model": {"input_shape": $2, "layers": [$3]},
 "optimizer": {"name": "sgd"}, "batch_size_per_replica": 8, "epochs": 1 ${4:-}}
JSON
}
DENSE='{"type": "dense", "units": 10}'
MLP="{\"type\": \"flatten\"}, $DENSE"
spec "$TMP/conv784.json" '[784]' "{\"type\": \"conv2d\", \"filters\": 4, \"kernel_size\": 3}, $MLP"
spec "$TMP/bigpool.json" '[28, 28, 1]' "{\"type\": \"max_pool2d\", \"pool_size\": 4}, {\"type\": \"max_pool2d\", \"pool_size\": 8}, $MLP"
spec "$TMP/noflatten.json" '[28, 28, 1]' "$DENSE"
spec "$TMP/sync3.json" '[28, 28, 1]' "$MLP" ', "sync": {"replicas_to_aggregate": 2, "total_num_replicas": 3}'
spec "$TMP/notrain.json" '[28, 28, 1]' "$MLP" ", \"data\": {\"train\": \"$TMP/none/train\"}"
FM=/usr/share/datasets/fashion-mnist
spec "$TMP/notest.json" '[28, 28, 1]' "$MLP" \
    ", \"data\": {\"train\": \"$FM/train\", \"train_examples\": 100, \"test\": \"$TMP/none/t10k\"}"

# expect78 NAME KEY_TEXT -- ENV PROGRAM ARGS... — exits 78 within 10 s, one line on stderr that contains KEY_TEXT.
expect78() {
    local name=$1 want=$2 envv=$4; shift 4
    set +e
    TF_CONFIG=$envv timeout 10 "$@" >"$TMP/$name.out" 2>"$TMP/$name.err"
    local rc=$?
    set -e
    [ $rc = 78 ] || fail "$name: $* exited $rc, want 78: $(cat "$TMP/$name.err")"
    [ "$(wc -l <"$TMP/$name.err")" = 1 ] || fail "$name: want a one-line error, got: $(cat "$TMP/$name.err")"
    grep -qF -- "$want" "$TMP/$name.err" || fail "$name: the error does not say '$want': $(cat "$TMP/$name.err")"
    echo "  $name: $(cat "$TMP/$name.err")"
}

# ---- 1. the job spec at start ----
for prog in ps_server worker; do
    if [ $prog = ps_server ]; then E=$PS0; else E=$W0; fi
    expect78 "$prog-conv784" "job spec $TMP/conv784.json: model.layers[0] (conv2d): conv2d needs an image input: model.input_shape [h, w, c], got [784]" \
        -- "$E" "$BIN/$prog" --job_spec "$TMP/conv784.json"
    expect78 "$prog-bigpool" "model.layers[1] (max_pool2d_1): pool_size (8, 8) does not fit input (7, 7, 1)" \
        -- "$E" "$BIN/$prog" --job_spec "$TMP/bigpool.json"
    expect78 "$prog-noflatten" "model.layers[0] (dense): input is (28, 28, 1); add a flatten layer before it" \
        -- "$E" "$BIN/$prog" --job_spec "$TMP/noflatten.json"
    expect78 "$prog-sync3" "job spec $TMP/sync3.json: sync.total_num_replicas is 3 but the cluster has 2 training replicas" \
        -- "$E" "$BIN/$prog" --job_spec "$TMP/sync3.json"
done
expect78 worker-notrain "job spec $TMP/notrain.json: data.train: cannot read $TMP/none/train-images-idx3-ubyte[.gz]" \
    -- "$W1" "$BIN/worker" --job_spec "$TMP/notrain.json"
expect78 chief-notest "data.test: cannot read $TMP/none/t10k-images-idx3-ubyte[.gz]" \
    -- "$W0" "$BIN/worker" --job_spec "$TMP/notest.json"
expect78 worker-nosuchspec "job spec $TMP/nope.json: cannot read" -- "$W0" "$BIN/worker" --job_spec "$TMP/nope.json"

# the ps_server reads no data: a spec whose data is elsewhere is fine for it
TF_CONFIG=$PS0 "$BIN/ps_server" --job_spec "$TMP/notrain.json" >"$TMP/ps-notrain.log" 2>&1 &
P=$!; PIDS+=("$P")
wait_healthy "${PS_ADDR[0]}"
kill "$P"; wait_exit "$P" 20
[ "$EXIT_CODE" = 0 ] || fail "ps_server with a spec whose data is missing exited $EXIT_CODE"
# a non-chief worker does not read data.test: it gets past the checks to its health
# service (then waits for a chief that is not there)
if [ -f "$FM/train-images-idx3-ubyte.gz" ] || [ -f "$FM/train-images-idx3-ubyte" ]; then
    TF_CONFIG=$W1 "$BIN/worker" --job_spec "$TMP/notest.json" --wait_model_secs 30 >"$TMP/w1-notest.out" \
        2>"$TMP/w1-notest.log" &
    P=$!; PIDS+=("$P")
    t=0
    until grep -q 'health service on' "$TMP/w1-notest.log" 2>/dev/null; do
        kill -0 "$P" 2>/dev/null || break
        sleep 0.2; t=$((t + 1)); [ $t -lt 100 ] || fail "worker 1: no health service within 20 s"
    done
    grep -q 'health service on' "$TMP/w1-notest.log" ||
        fail "a non-chief worker refused a spec for its missing data.test: $(cat "$TMP/w1-notest.log")"
    kill "$P" 2>/dev/null || true; wait_exit "$P" 30
    [ "$EXIT_CODE" != 78 ] || fail "a non-chief worker exited 78: $(cat "$TMP/w1-notest.log")"
else
    echo "  dataset-fashion-mnist not installed: the non-chief's data.test case is not checked"
fi

# ---- 2. a task from the flags that does not fit the cluster ----
expect78 job-flag "worker: --job chief: the cluster has no chief task" -- "$W0" "$BIN/worker" --job chief
expect78 index-flag "worker: --task_index 3 out of range: the cluster has 2 worker tasks" \
    -- "" "$BIN/worker" --cluster "$CLUSTER" --job worker --task_index 3
expect78 ps-index-flag "ps_server: --task_index 1 out of range: the cluster has 1 ps task" \
    -- "$PS0" "$BIN/ps_server" --task_index 1
expect78 evaluator-flag "worker: --job evaluator: the cluster has no evaluator task" \
    -- "" "$BIN/worker" --cluster "$CLUSTER" --job evaluator --task_index 0

# ---- 3. --help ----
"$BIN/worker" --help >"$TMP/worker.help"
"$BIN/ps_server" --help >"$TMP/ps.help"
grep -qE -- '--job TYPE +chief \| worker \| evaluator' "$TMP/worker.help" || fail "worker --help: --job does not list evaluator"
grep -qE -- '--threads N +RPC polling threads, 1\.\.64' "$TMP/ps.help" || fail "ps_server --help: no --threads range"
grep -qE -- '--prefetch N .*1\.\.64' "$TMP/worker.help" || fail "worker --help: no --prefetch range"
grep -qE -- '--blas_threads N .*0\.\.1024' "$TMP/worker.help" || fail "worker --help: no --blas_threads range"
grep -qF -- '--job_spec FILE' "$TMP/ps.help" && grep -q 'exits 78' "$TMP/ps.help" ||
    fail "ps_server --help does not say a bad --job_spec exits 78"
set +e; "$BIN/ps_server" --threads 65 >/dev/null 2>"$TMP/threads.err"; rc=$?; set -e
[ $rc = 64 ] && grep -qF 'expected 1..64' "$TMP/threads.err" || fail "--threads 65: exit $rc, $(cat "$TMP/threads.err")"

# ---- 4. --tls_ca without --tls_client_auth warns ----
if command -v openssl >/dev/null; then
    K=$TMP/pki; mkdir -p "$K"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$K/ca.key" -out "$K/ca.pem" -days 2 -subj "/CN=ca" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout "$K/node.key" -out "$K/node.csr" -subj "/CN=node" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' >"$K/node.ext"
    openssl x509 -req -in "$K/node.csr" -CA "$K/ca.pem" -CAkey "$K/ca.key" -CAcreateserial -out "$K/node.pem" \
        -extfile "$K/node.ext" -days 2 2>/dev/null
    TLS=(--tls_cert "$K/node.pem" --tls_key "$K/node.key" --tls_ca "$K/ca.pem")
    # started_log LOG — waits (10 s) until the daemon logged that it serves
    started_log() {
        local t=0
        until grep -q 'serving on' "$1" 2>/dev/null; do sleep 0.2; t=$((t + 1)); [ $t -lt 50 ] || fail "$1: not serving"; done
    }
    for auth in no yes; do
        extra=(); [ $auth = yes ] && extra=(--tls_client_auth)
        TF_CONFIG=$PS0 "$BIN/ps_server" "${TLS[@]}" "${extra[@]}" >"$TMP/ps-tls-$auth.log" 2>&1 &
        P=$!; PIDS+=("$P")
        TF_CONFIG=$W1 "$BIN/worker" "${TLS[@]}" "${extra[@]}" >"$TMP/w-tls-$auth.out" 2>"$TMP/w-tls-$auth.log" &
        Q=$!; PIDS+=("$Q")
        started_log "$TMP/ps-tls-$auth.log"; started_log "$TMP/w-tls-$auth.log"
        kill "$P" "$Q"; wait_exit "$P" 20; wait_exit "$Q" 20
        n_ps=$(grep -c 'WARN .*--tls_ca has no effect without --tls_client_auth' "$TMP/ps-tls-$auth.log" || true)
        n_w=$(grep -c 'WARN .*--tls_ca verifies only the servers this worker connects to' "$TMP/w-tls-$auth.log" || true)
        if [ $auth = no ]; then
            [ "$n_ps" = 1 ] || fail "ps_server --tls_ca without --tls_client_auth: $n_ps warnings, want 1"
            [ "$n_w" = 1 ] || fail "worker --tls_ca without --tls_client_auth: $n_w warnings, want 1"
        else
            [ "$n_ps" = 0 ] && [ "$n_w" = 0 ] || fail "warnings with --tls_client_auth: ps $n_ps, worker $n_w"
        fi
    done
    grep 'WARN' "$TMP/ps-tls-no.log" "$TMP/w-tls-no.log" | sed 's/^/  /'
else
    echo "  openssl not installed: the --tls_ca warning is not checked"
fi
pass "validation at start: bad specs, flags, help, --tls_ca warning"
