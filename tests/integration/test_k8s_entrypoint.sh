# test_k8s_entrypoint — deploy/docker/entrypoint.sh, the container entrypoint of
# the Kubernetes pods: the TF_CONFIG it derives from the pod's hostname and the
# replica counts, for ps, worker, chief and evaluator pods, read back by the
# programs' own parser (psc_tf_config_show = psc_tf_config_parse); every kind of
# bad hostname or environment is a one-line message and exit 78; and in run mode
# the program it starts, with which args, and what it does after an in-cluster
# job (PSC_AFTER_JOB), with SIGTERM passed on. No daemon runs: stub programs.
source "$(dirname "$0")/lib.sh"
EP="$SRC/deploy/docker/entrypoint.sh"
SHOW="$BIN/psc_tf_config_show"

# show HOSTNAME [VAR=VALUE...] — what the parser makes of the TF_CONFIG for that pod.
show() {
    local host=$1; shift
    env -i PATH="$PATH" PSC_HOSTNAME="$host" "$@" sh "$EP" --print-tf-config >"$TMP/tf.json" ||
        fail "entrypoint refused $host ($*)"
    "$SHOW" <"$TMP/tf.json" || fail "the TF_CONFIG of $host does not parse: $(cat "$TMP/tf.json")"
}

# expect HOSTNAME [VAR=VALUE...] <<< EXPECTED
expect() {
    cat >"$TMP/want"
    show "$@" >"$TMP/got"
    diff -u "$TMP/want" "$TMP/got" >&2 || fail "TF_CONFIG of $1 ($*)"
}

# ---- the manifests' cluster: 2 ps, 2 workers, worker 0 is the chief ----
BASE=(PSC_NUM_PS=2 PSC_NUM_WORKERS=2)
CLUSTER_A='worker 0 worker-0.worker:2222
worker 1 worker-1.worker:2222
ps 0 ps-0.ps:2222
ps 1 ps-1.ps:2222'
expect ps-0 "${BASE[@]}" <<EOF
task ps 0
is_chief 0
replica_rank -1
replicas 2
bind 0.0.0.0:2222
$CLUSTER_A
EOF
expect ps-1 "${BASE[@]}" <<EOF
task ps 1
is_chief 0
replica_rank -1
replicas 2
bind 0.0.0.0:2222
$CLUSTER_A
EOF
expect worker-0 "${BASE[@]}" <<EOF
task worker 0
is_chief 1
replica_rank 0
replicas 2
bind 0.0.0.0:2222
$CLUSTER_A
EOF
expect worker-1 "${BASE[@]}" <<EOF
task worker 1
is_chief 0
replica_rank 1
replicas 2
bind 0.0.0.0:2222
$CLUSTER_A
EOF
# exactly this JSON (what a user sees in the pod's log)
env -i PSC_HOSTNAME=worker-1 "${BASE[@]}" sh "$EP" --print-tf-config >"$TMP/tf.json"
[ "$(cat "$TMP/tf.json")" = '{"cluster": {"worker": ["worker-0.worker:2222", "worker-1.worker:2222"], "ps": ["ps-0.ps:2222", "ps-1.ps:2222"]}, "task": {"type": "worker", "index": 1}}' ] ||
    fail "TF_CONFIG text: $(cat "$TMP/tf.json")"
# $HOSTNAME is what a pod has; a fully qualified name counts by its first label
[ "$(env -i HOSTNAME=ps-1 "${BASE[@]}" sh "$EP" --print-tf-config | "$SHOW" | head -1)" = "task ps 1" ] ||
    fail "HOSTNAME not used"
[ "$(env -i PSC_HOSTNAME=worker-1.worker.default.svc.cluster.local "${BASE[@]}" sh "$EP" --print-tf-config |
    "$SHOW" | head -1)" = "task worker 1" ] || fail "a fully qualified hostname"

# ---- a chief StatefulSet, an evaluator, 3 workers ----
FULL=(PSC_NUM_PS=2 PSC_NUM_WORKERS=3 PSC_CHIEF=1 PSC_EVALUATOR=1)
CLUSTER_B='chief 0 chief-0.chief:2222
worker 0 worker-0.worker:2222
worker 1 worker-1.worker:2222
worker 2 worker-2.worker:2222
ps 0 ps-0.ps:2222
ps 1 ps-1.ps:2222
evaluator 0 evaluator-0.evaluator:2222'
expect chief-0 "${FULL[@]}" <<EOF
task chief 0
is_chief 1
replica_rank 0
replicas 4
bind 0.0.0.0:2222
$CLUSTER_B
EOF
expect worker-0 "${FULL[@]}" <<EOF
task worker 0
is_chief 0
replica_rank 1
replicas 4
bind 0.0.0.0:2222
$CLUSTER_B
EOF
expect worker-2 "${FULL[@]}" <<EOF
task worker 2
is_chief 0
replica_rank 3
replicas 4
bind 0.0.0.0:2222
$CLUSTER_B
EOF
expect evaluator-0 "${FULL[@]}" <<EOF
task evaluator 0
is_chief 0
replica_rank -1
replicas 4
bind 0.0.0.0:2222
$CLUSTER_B
EOF
expect ps-1 "${FULL[@]}" <<EOF
task ps 1
is_chief 0
replica_rank -1
replicas 4
bind 0.0.0.0:2222
$CLUSTER_B
EOF
# a chief and no worker
expect chief-0 PSC_NUM_PS=1 PSC_NUM_WORKERS=0 PSC_CHIEF=1 <<EOF
task chief 0
is_chief 1
replica_rank 0
replicas 1
bind 0.0.0.0:2222
chief 0 chief-0.chief:2222
ps 0 ps-0.ps:2222
EOF

# ---- other names, another port, a namespace's DNS suffix ----
expect psc-ps-1 PSC_NUM_PS=2 PSC_NUM_WORKERS=1 PSC_PS_NAME=psc-ps PSC_WORKER_NAME=psc-worker PSC_PORT=3000 \
    PSC_DNS_SUFFIX=.ml.svc.cluster.local <<EOF
task ps 1
is_chief 0
replica_rank -1
replicas 1
bind 0.0.0.0:3000
worker 0 psc-worker-0.psc-worker.ml.svc.cluster.local:3000
ps 0 psc-ps-0.psc-ps.ml.svc.cluster.local:3000
ps 1 psc-ps-1.psc-ps.ml.svc.cluster.local:3000
EOF

# ---- the tests' override: numeric addresses, which the task binds as they are ----
expect worker-1 "${BASE[@]}" PSC_ADDR_OVERRIDES="ps-0=127.0.0.1:5001 ps-1=127.0.0.1:5002 worker-0=127.0.0.1:5003
    worker-1=127.0.0.1:5004" <<EOF
task worker 1
is_chief 0
replica_rank 1
replicas 2
bind 127.0.0.1:5004
worker 0 127.0.0.1:5003
worker 1 127.0.0.1:5004
ps 0 127.0.0.1:5001
ps 1 127.0.0.1:5002
EOF

# ---- refusals: exit 78 and one line that names the problem ----
# refuse "WHAT THE MESSAGE SAYS" HOSTNAME [VAR=VALUE...] [-- ARGS]
refuse() {
    local want=$1 host=$2; shift 2
    local vars=() args=(--print-tf-config)
    while [ $# -gt 0 ]; do
        if [ "$1" = -- ]; then shift; args=("$@"); break; fi
        vars+=("$1"); shift
    done
    set +e
    env -i PATH="$PATH" PSC_HOSTNAME="$host" PSC_BIN_DIR="$TMP/nobin" "${vars[@]}" sh "$EP" "${args[@]}" \
        >"$TMP/out" 2>"$TMP/err"
    local rc=$?
    set -e
    [ $rc -eq 78 ] || fail "$host (${vars[*]}): exit $rc, want 78; $(cat "$TMP/err")"
    [ ! -s "$TMP/out" ] || fail "$host (${vars[*]}): printed $(cat "$TMP/out")"
    [ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "$host: not one line: $(cat "$TMP/err")"
    grep -qF -- "$want" "$TMP/err" || fail "$host (${vars[*]}): message lacks \"$want\": $(cat "$TMP/err")"
    REFUSED=$((REFUSED + 1))
}
REFUSED=0
refuse 'hostname "foo" is not <statefulset>-<ordinal>' foo "${BASE[@]}"
refuse 'hostname "ps-" is not' ps- "${BASE[@]}"
refuse 'hostname "worker-x" is not' worker-x "${BASE[@]}"
refuse 'hostname "ps-01" is not' ps-01 "${BASE[@]}"
refuse 'hostname "-1" is not' -1 "${BASE[@]}"
refuse 'ordinal 2 is out of range, the cluster has 2 ps pod(s)' ps-2 "${BASE[@]}"
refuse 'ordinal 5 is out of range, the cluster has 2 worker pod(s)' worker-5 "${BASE[@]}"
refuse '"db" is not one of this cluster'"'"'s StatefulSets (ps, worker;' db-0 "${BASE[@]}"
refuse '"ps-" is not one of' ps--1 "${BASE[@]}"
refuse '"chief" is not one of' chief-0 "${BASE[@]}"
refuse '"evaluator" is not one of' evaluator-0 "${BASE[@]}"
refuse 'ordinal 1 is out of range, the cluster has 1 chief pod(s)' chief-1 "${FULL[@]}"
refuse 'ordinal 1 is out of range, the cluster has 1 evaluator pod(s)' evaluator-1 "${FULL[@]}"
refuse 'PSC_NUM_PS must be the number of ps pods (>= 1), got ""' ps-0 PSC_NUM_WORKERS=2
refuse 'PSC_NUM_PS must be the number of ps pods (>= 1), got "0"' ps-0 PSC_NUM_PS=0 PSC_NUM_WORKERS=2
refuse 'PSC_NUM_PS must be the number of ps pods (>= 1), got "2a"' ps-0 PSC_NUM_PS=2a PSC_NUM_WORKERS=2
refuse 'PSC_NUM_WORKERS must be the number of worker pods (>= 0), got ""' ps-0 PSC_NUM_PS=2
refuse 'PSC_NUM_WORKERS must be the number of worker pods (>= 0), got "-1"' ps-0 PSC_NUM_PS=2 PSC_NUM_WORKERS=-1
refuse 'no training replica' ps-0 PSC_NUM_PS=2 PSC_NUM_WORKERS=0
refuse 'PSC_CHIEF must be 0' ps-0 "${BASE[@]}" PSC_CHIEF=yes
refuse 'PSC_EVALUATOR must be 0 or 1' ps-0 "${BASE[@]}" PSC_EVALUATOR=2
refuse 'StatefulSet name "PS" is not a DNS label' ps-0 "${BASE[@]}" PSC_PS_NAME=PS
refuse 'PSC_PORT must be 1..65535, got "99999"' ps-0 "${BASE[@]}" PSC_PORT=99999
refuse 'PSC_DNS_SUFFIX must start with a dot' ps-0 "${BASE[@]}" PSC_DNS_SUFFIX=svc.cluster.local
refuse 'PSC_DNS_SUFFIX ".ml..svc" is not a DNS suffix' ps-0 "${BASE[@]}" PSC_DNS_SUFFIX=.ml..svc
refuse 'PSC_AFTER_JOB must be serve or exit' ps-0 "${BASE[@]}" PSC_AFTER_JOB=loop
refuse 'PSC_ADDR_OVERRIDES: expected POD=HOST:PORT entries' ps-0 "${BASE[@]}" PSC_ADDR_OVERRIDES=ps-0
refuse 'PSC_ADDR_OVERRIDES: bad address' ps-0 "${BASE[@]}" 'PSC_ADDR_OVERRIDES=ps-0=a"b:1'
refuse '--print-tf-config takes no other argument' ps-0 "${BASE[@]}" -- --print-tf-config --port 1
refuse "$TMP/nobin/ps_server is not an executable (PSC_BIN_DIR)" ps-0 "${BASE[@]}" -- --checkpoint_dir /x

# ---- run mode, with stub programs that record how they were started ----
mkdir -p "$TMP/bin"
for prog in ps_server worker; do
    cat >"$TMP/bin/$prog" <<'STUB'
#!/bin/sh
# records argv and TF_CONFIG, one invocation a line; a job (--job_spec) exits
# STUB_RC, or with STUB_SLEEP=1 runs until SIGTERM; without a job it exits
# STUB_RC_STANDALONE
echo "$(basename "$0") $* | $TF_CONFIG" >>"$STUB_LOG"
case " $* " in *" --job_spec "* | *" --job_spec="*) ;; *) exit "${STUB_RC_STANDALONE:-0}" ;; esac
if [ "${STUB_SLEEP:-0}" = 1 ]; then
    trap 'echo "TERM received" >>"$STUB_LOG"; exit 143' TERM
    echo started >"$STUB_LOG.started"
    while :; do sleep 0.05; done
fi
exit "${STUB_RC:-0}"
STUB
    chmod +x "$TMP/bin/$prog"
done
# run HOSTNAME [VAR=VALUE...] -- ARGS: runs the entrypoint; sets RC and LOG (the stubs' record)
run() {
    local host=$1; shift
    local vars=()
    while [ "$1" != -- ]; do vars+=("$1"); shift; done
    shift
    : >"$TMP/stub.log"
    set +e
    env -i PATH="$PATH" PSC_HOSTNAME="$host" PSC_BIN_DIR="$TMP/bin" STUB_LOG="$TMP/stub.log" "${BASE[@]}" \
        "${vars[@]}" sh "$EP" "$@" 2>"$TMP/ep.err"
    RC=$?
    set -e
    LOG=$(cat "$TMP/stub.log")
}
TF_PS1=$(env -i PSC_HOSTNAME=ps-1 "${BASE[@]}" sh "$EP" --print-tf-config)
TF_W1=$(env -i PSC_HOSTNAME=worker-1 "${BASE[@]}" sh "$EP" --print-tf-config)
# a ps pod: ps_server with the args as given (spaces kept), TF_CONFIG exported
run ps-1 -- --checkpoint_dir "/var/lib/psc/my ckpt" --job_spec /etc/psc/job.json
[ $RC -eq 0 ] && [ "$LOG" = "ps_server --checkpoint_dir /var/lib/psc/my ckpt --job_spec /etc/psc/job.json | $TF_PS1" ] ||
    fail "ps run: rc $RC, $LOG"
grep -q "entrypoint: ps-1 is ps 1; TF_CONFIG=" "$TMP/ep.err" || fail "no start line: $(cat "$TMP/ep.err")"
# a standalone worker: exec'd as is
run worker-1 -- --logdir /tb
[ $RC -eq 0 ] && [ "$LOG" = "worker --logdir /tb | $TF_W1" ] || fail "standalone run: rc $RC, $LOG"
# an in-cluster worker, PSC_AFTER_JOB=serve (the default): the job, then the same args without --job_spec
run worker-1 -- --job_spec /etc/psc/job.json --shutdown_ps_at_end 0
[ $RC -eq 0 ] || fail "in-cluster run: rc $RC"
[ "$LOG" = "worker --job_spec /etc/psc/job.json --shutdown_ps_at_end 0 | $TF_W1
worker --shutdown_ps_at_end 0 | $TF_W1" ] || fail "after the job: $LOG"
grep -q "the job is done; worker-1 goes on as a standalone-mode worker" "$TMP/ep.err" || fail "no after-job line"
run worker-1 STUB_RC_STANDALONE=143 -- --job_spec=/etc/psc/job.json --log_every_secs 5
[ $RC -eq 143 ] && [ "$(echo "$LOG" | sed -n 2p)" = "worker --log_every_secs 5 | $TF_W1" ] ||
    fail "--job_spec=FILE form: rc $RC, $LOG"
# PSC_AFTER_JOB=exit: the job only
run worker-1 PSC_AFTER_JOB=exit -- --job_spec /etc/psc/job.json
[ $RC -eq 0 ] && [ "$LOG" = "worker --job_spec /etc/psc/job.json | $TF_W1" ] || fail "PSC_AFTER_JOB=exit: $LOG"
# a failed job: its exit code, and no standalone worker after it
run worker-1 STUB_RC=1 -- --job_spec /etc/psc/job.json
[ $RC -eq 1 ] && [ "$(echo "$LOG" | wc -l)" -eq 1 ] || fail "failed job: rc $RC, $LOG"

# SIGTERM to the entrypoint while the job runs reaches the worker, whose exit code is the pod's
: >"$TMP/stub.log"
env -i PATH="$PATH" PSC_HOSTNAME=worker-0 PSC_BIN_DIR="$TMP/bin" STUB_LOG="$TMP/stub.log" STUB_SLEEP=1 \
    "${BASE[@]}" sh "$EP" --job_spec /etc/psc/job.json 2>"$TMP/ep.err" &
EP_PID=$!; PIDS+=("$EP_PID")
for _ in $(seq 100); do [ -f "$TMP/stub.log.started" ] && break; sleep 0.05; done
[ -f "$TMP/stub.log.started" ] || fail "the stub worker did not start"
kill -TERM "$EP_PID"
wait_exit "$EP_PID" 5
[ "$EXIT_CODE" -eq 143 ] || fail "SIGTERM: entrypoint exit $EXIT_CODE, want 143"
grep -q "TERM received" "$TMP/stub.log" || fail "SIGTERM not passed on: $(cat "$TMP/stub.log")"
[ "$(grep -c '^worker' "$TMP/stub.log")" -eq 1 ] || fail "a worker started after SIGTERM: $(cat "$TMP/stub.log")"

pass "entrypoint: TF_CONFIG of ps, worker, chief and evaluator pods as the parser reads it; $REFUSED refusals; run mode and SIGTERM"
