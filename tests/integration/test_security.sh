#!/usr/bin/env bash
# test_security — TLS (server certificates, client certificates) and the
# shared token on real processes, with certificates made here by openssl:
# 1. bad security flags stop every program at start with exit 78 and a message
#    naming the flag: a certificate without its key, a key that is not the
#    certificate's, an expired certificate, a short token, a token with a space;
# 2. a standalone cluster (1 ps + 2 workers) with mutual TLS and a token: psctl
#    trains a job to the end over it;
# 3. unwanted clients get nothing and change nothing: plaintext, TLS without a
#    client certificate, a client certificate from another CA, a server name
#    that is not in the certificate, no token, a wrong token: each fails
#    (UNAUTHENTICATED for the token cases), including Shutdown and Release to
#    the PS and Submit/Cancel to the chief; the handshake failures say that
#    TLS is the likely cause (psc_call, and psctl for plaintext, another CA,
#    a wrong server name); afterwards every daemon is still up
#    and an export of the variables is byte-identical to the one before;
# 4. the token appears in no log and no output of any program.
source "$(dirname "$0")/lib.sh"
require_dataset
command -v openssl >/dev/null || skip "openssl not installed"

# ---- certificates: a CA, a node certificate for 127.0.0.1/localhost, a rogue CA ----
P=$TMP/pki; mkdir -p "$P"
mkca() { openssl req -x509 -newkey rsa:2048 -nodes -keyout "$P/$1.key" -out "$P/$1.pem" -days 2 -subj "/CN=$1" 2>/dev/null; }
mkcert() { # mkcert NAME CA SAN [DAYS_ARGS]
    openssl req -newkey rsa:2048 -nodes -keyout "$P/$1.key" -out "$P/$1.csr" -subj "/CN=$1" 2>/dev/null
    printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$3" >"$P/$1.ext"
    openssl x509 -req -in "$P/$1.csr" -CA "$P/$2.pem" -CAkey "$P/$2.key" -CAcreateserial -out "$P/$1.pem" \
        -extfile "$P/$1.ext" ${4:--days 2} 2>/dev/null
}
mkca ca; mkca rogue
mkcert node ca "IP:127.0.0.1,DNS:localhost"
mkcert intruder rogue "IP:127.0.0.1"
mkcert other ca "DNS:other.example"
# an expired certificate: valid for one second, 2 s ago
openssl req -newkey rsa:2048 -nodes -keyout "$P/old.key" -out "$P/old.csr" -subj "/CN=old" 2>/dev/null
openssl x509 -req -in "$P/old.csr" -CA "$P/ca.pem" -CAkey "$P/ca.key" -CAcreateserial -out "$P/old.pem" \
    -not_before "$(date -u -d '-1 day' +%Y%m%d%H%M%SZ)" -not_after "$(date -u -d '-1 hour' +%Y%m%d%H%M%SZ)" 2>/dev/null ||
    openssl x509 -req -in "$P/old.csr" -CA "$P/ca.pem" -CAkey "$P/ca.key" -CAcreateserial -out "$P/old.pem" -days -1 2>/dev/null
TOKEN=$(openssl rand -hex 24); printf '%s\n' "$TOKEN" >"$P/token"; chmod 600 "$P/token"
printf 'wrong-%s\n' "$(openssl rand -hex 24)" >"$P/wrong"; chmod 600 "$P/wrong"
printf 'short\n' >"$P/short"; printf 'has a space in it 0123456789\n' >"$P/space"

TLS=(--tls_cert "$P/node.pem" --tls_key "$P/node.key" --tls_ca "$P/ca.pem")
SEC=("${TLS[@]}" --auth_token_file "$P/token")
cluster 1 2

# ---- 1. bad flags: exit 78 naming the flag ----
expect78() { # expect78 REGEX PROGRAM ARGS...
    local re=$1; shift
    set +e; "$@" >"$TMP/bad.out" 2>&1; local rc=$?; set -e
    [ $rc = 78 ] || fail "$* exited $rc (want 78): $(cat "$TMP/bad.out")"
    grep -q -- "$re" "$TMP/bad.out" || fail "$*: message does not say '$re': $(cat "$TMP/bad.out")"
    echo "  refused: $(head -1 "$TMP/bad.out")"
}
PSX=("$BIN/ps_server" --cluster "$CLUSTER" --task_index 0)
expect78 '--tls_cert needs --tls_key' "${PSX[@]}" --tls_cert "$P/node.pem"
expect78 'is not the key of --tls_cert' "${PSX[@]}" --tls_cert "$P/node.pem" --tls_key "$P/intruder.key"
expect78 'certificate has expired' "${PSX[@]}" --tls_cert "$P/old.pem" --tls_key "$P/old.key"
expect78 'no PEM certificate' "${PSX[@]}" --tls_cert "$P/node.key" --tls_key "$P/node.key"
expect78 'shorter than 16' "${PSX[@]}" --auth_token_file "$P/short"
expect78 'not visible ASCII' "$BIN/worker" --cluster "$CLUSTER" --job worker --task_index 0 --auth_token_file "$P/space"
expect78 'give --tls_cert, --tls_key and --tls_ca together' "$BIN/worker" --cluster "$CLUSTER" --job worker --task_index 0 \
    --tls_cert "$P/node.pem" --tls_key "$P/node.key"
expect78 'cannot read' "$BIN/psctl" status --cluster "$CLUSTER" --tls_ca "$P/missing.pem"
expect78 '--tls_client_auth is for servers' "$BIN/psctl" status --cluster "$CLUSTER" --tls_client_auth

# ---- 1b. each on its own: a token without TLS, TLS without client certificates ----
solo() { # solo FLAGS... — a lone ps_server on a free port; sets SOLO (address) and SOLO_PID
    SOLO="127.0.0.1:$("$BIN/psc_free_port" 1)"
    "$BIN/ps_server" --cluster "{\"ps\": [\"$SOLO\"], \"worker\": [\"127.0.0.1:1\"]}" --task_index 0 "$@" \
        >>"$TMP/solo.log" 2>&1 &
    SOLO_PID=$!; PIDS+=($!)
}
solo --auth_token_file "$P/token"
"$BIN/psc_health" "$SOLO" 20000 || fail "token-only ps not serving"
"$BIN/psc_call" --auth_token_file "$P/token" "$SOLO" /psc.ParameterServer/Status >/dev/null || fail "token only: the right token is refused"
set +e; out=$("$BIN/psc_call" "$SOLO" /psc.ParameterServer/Status); set -e
[[ $out == UNAUTHENTICATED* ]] || fail "token only: a call without it got: $out"
kill "$SOLO_PID"
solo --tls_cert "$P/node.pem" --tls_key "$P/node.key"
"$BIN/psc_health" --tls_ca "$P/ca.pem" "$SOLO" 20000 || fail "TLS-only ps not serving to a client with --tls_ca alone"
"$BIN/psc_call" --tls_ca "$P/ca.pem" "$SOLO" /psc.ParameterServer/Status >/dev/null || fail "TLS only: a verified client is refused"
set +e; out=$("$BIN/psc_call" "$SOLO" /psc.ParameterServer/Status); set -e
[[ $out == UNAVAILABLE*"(TLS handshake failed? check --tls_ca"* ]] || fail "TLS only: a plaintext call got: $out"
set +e; out=$("$BIN/psc_call" --tls_ca "$P/rogue.pem" "$SOLO" /psc.ParameterServer/Status); set -e
[[ $out == UNAVAILABLE*"(TLS handshake failed? check --tls_ca"* ]] || fail "TLS only: a client trusting another CA got: $out"
kill "$SOLO_PID"
echo "token alone and TLS alone: the right client is served, the others refused"

# ---- 2. a cluster with mutual TLS and the token ----
start_ps 0 "${SEC[@]}" --tls_client_auth --checkpoint_dir "$TMP/ckpt0"; PS0=$LAST_PID
WP=()
for i in 0 1; do
    TF_CONFIG=$(tf_config worker "$i") "$BIN/worker" --log_every_secs 0.5 "${SEC[@]}" --tls_client_auth \
        >"$TMP/worker$i.out" 2>"$TMP/worker$i.log" &
    WP+=($!); PIDS+=($!)
done
for a in "${PS_ADDR[0]}" "${WORKER_ADDR[@]}"; do
    "$BIN/psc_health" "${TLS[@]}" "$a" 20000 || fail "$a not serving over mutual TLS"
done
grep -q 'TLS on, client certificates required' "$TMP/ps0.log" || fail "ps 0 does not log that TLS is on"
small_spec "$TMP/job.json" 1 5 ', "checkpoint": {"every_steps": 40}'
PSCTL=("$BIN/psctl" --cluster "$CLUSTER" "${SEC[@]}")
"${PSCTL[@]}" train "$TMP/job.json" >"$TMP/train.out" 2>"$TMP/train.err" || fail "psctl train over TLS exited $?: $(tail -3 "$TMP/train.err")"
acc=$(sed -n 's/^test accuracy: //p' "$TMP/train.out")
echo "job over mutual TLS + token: test accuracy $acc"
awk -v a="$acc" 'BEGIN { exit !(a >= 0.70) }' || fail "accuracy $acc"
"${PSCTL[@]}" export --format safetensors -o "$TMP/before.safetensors" 2>"$TMP/export.err" || fail "export: $(cat "$TMP/export.err")"

# ---- 3. unwanted clients ----
knock() { # knock WHAT WANT_REGEX ADDR METHOD [flags...] — the call must fail with a status matching WANT_REGEX
    local what=$1 want=$2 addr=$3 method=$4; shift 4
    set +e; "$BIN/psc_call" "$@" "$addr" "$method" >"$TMP/knock.out" 2>"$TMP/knock.err"; local rc=$?; set -e
    [ $rc = 1 ] || fail "$what: $method on $addr exited $rc: $(cat "$TMP/knock.out")"
    grep -Eq "$want" "$TMP/knock.out" || fail "$what: $method: $(cat "$TMP/knock.out"), want $want"
    printf '  %-34s %-32s %s\n' "$what" "${method##*/}" "$(cut -c1-70 "$TMP/knock.out")"
}
INTRUDER=(--tls_cert "$P/intruder.pem" --tls_key "$P/intruder.key" --tls_ca "$P/ca.pem")
HINT='TLS handshake failed\? check --tls_ca' # what a failed handshake adds to UNAVAILABLE
PS=${PS_ADDR[0]}; CHIEF=${WORKER_ADDR[0]}
echo "unwanted calls:"
for m in /psc.ParameterServer/Shutdown /psc.ParameterServer/Release /psc.ParameterServer/Push; do
    knock "plaintext" "^UNAVAILABLE.*$HINT" "$PS" "$m"
    knock "TLS, no client certificate" "^UNAVAILABLE.*$HINT" "$PS" "$m" --tls_ca "$P/ca.pem" --auth_token_file "$P/token"
    knock "client certificate of another CA" "^UNAVAILABLE.*$HINT" "$PS" "$m" "${INTRUDER[@]}" --auth_token_file "$P/token"
    knock "mutual TLS, no token" '^UNAUTHENTICATED' "$PS" "$m" "${TLS[@]}"
    knock "mutual TLS, wrong token" '^UNAUTHENTICATED' "$PS" "$m" "${TLS[@]}" --auth_token_file "$P/wrong"
done
knock "server name not in its certificate" "^UNAVAILABLE.*$HINT" "$PS" /psc.ParameterServer/Status "${SEC[@]}" --tls_server_name other.example
knock "trusting another CA" "^UNAVAILABLE.*$HINT" "$PS" /psc.ParameterServer/Status "${TLS[@]::4}" --tls_ca "$P/rogue.pem"
# psctl says the same: a handshake that fails is likely a TLS mismatch
psctl_tls_hint() { # psctl_tls_hint WHAT [flags...] — psctl status must exit 69 naming TLS as the likely cause
    local what=$1; shift
    set +e; "$BIN/psctl" --cluster "$CLUSTER" "$@" status >"$TMP/hint.out" 2>&1; local rc=$?; set -e
    [ $rc = 69 ] || fail "psctl status, $what: exit $rc: $(cat "$TMP/hint.out")"
    grep -Eq "$HINT" "$TMP/hint.out" || fail "psctl status, $what: no TLS hint: $(cat "$TMP/hint.out")"
    printf '  psctl status, %-28s %s\n' "$what:" "$(grep -m1 -o 'failed: UNAVAILABLE.*' "$TMP/hint.out" | cut -c1-110)"
}
psctl_tls_hint "plaintext" --auth_token_file "$P/token"
psctl_tls_hint "trusting another CA" "${TLS[@]::4}" --tls_ca "$P/rogue.pem" --auth_token_file "$P/token"
psctl_tls_hint "wrong --tls_server_name" "${SEC[@]}" --tls_server_name other.example
for m in /psc.Worker/Submit /psc.Worker/Cancel /psc.Worker/Checkpoint; do
    knock "mutual TLS, wrong token" '^UNAUTHENTICATED' "$CHIEF" "$m" "${TLS[@]}" --auth_token_file "$P/wrong"
done
set +e; "$BIN/psctl" --cluster "$CLUSTER" "${TLS[@]}" --auth_token_file "$P/wrong" train "$TMP/job.json" >"$TMP/bad_train.out" 2>&1; rc=$?; set -e
[ $rc = 77 ] && grep -q UNAUTHENTICATED "$TMP/bad_train.out" && grep -q "refused psctl's credentials" "$TMP/bad_train.out" ||
    fail "psctl train with a wrong token: exit $rc (expected 77, EX_NOPERM): $(cat "$TMP/bad_train.out")"
# status without the token: the members answer Health, the chief and the PS refuse the rest: exit 77, not 0
set +e; "$BIN/psctl" --cluster "$CLUSTER" "${TLS[@]}" status >"$TMP/notoken_status.out" 2>&1; rc=$?; set -e
[ $rc = 77 ] && grep -q "refused psctl's credentials" "$TMP/notoken_status.out" ||
    fail "psctl status without the token: exit $rc (expected 77): $(cat "$TMP/notoken_status.out")"
echo "  psctl without the right token: exit 77 for train and status ($(grep -m1 -o "refused psctl's credentials.\{0,40\}" "$TMP/notoken_status.out")...)"
# Health/Check is open to anyone who completes the TLS handshake (Kubernetes probes send no metadata)
"$BIN/psc_health" "${TLS[@]}" "$PS" 2000 || fail "Health/Check without the token should answer"
# ...and a call with everything right works
"$BIN/psc_call" "${SEC[@]}" "$PS" /psc.ParameterServer/Status >/dev/null || fail "an authorized Status failed"

for p in "$PS0" "${WP[@]}"; do kill -0 "$p" 2>/dev/null || fail "a daemon died from an unwanted call"; done
"${PSCTL[@]}" export --format safetensors -o "$TMP/after.safetensors" 2>"$TMP/export.err" || fail "export: $(cat "$TMP/export.err")"
cmp -s "$TMP/before.safetensors" "$TMP/after.safetensors" || fail "the variables changed under unwanted calls"
"${PSCTL[@]}" status >"$TMP/status.out" || fail "psctl status failed"
[ "$(grep -c 'SERVING' "$TMP/status.out")" = 3 ] || fail "status: $(cat "$TMP/status.out")"
echo "after the unwanted calls: every daemon up, the variables byte-identical ($(stat -c %s "$TMP/after.safetensors") bytes)"

# ---- 4. the token is nowhere ----
for p in "$PS0" "${WP[@]}"; do kill "$p"; done
for p in "$PS0" "${WP[@]}"; do wait_exit "$p" 30; done
if grep -rlF "$TOKEN" "$TMP"/*.log "$TMP"/*.out "$TMP"/*.err 2>/dev/null; then fail "the token appears in the files above"; fi
echo "the token appears in none of $(ls "$TMP"/*.log "$TMP"/*.out "$TMP"/*.err | wc -l) logs and outputs"
pass "TLS, client certificates and the token keep unwanted clients out"
