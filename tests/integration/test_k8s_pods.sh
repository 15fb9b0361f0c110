# test_k8s_pods — runs psc's pods exactly as the rendered Kubernetes manifests
# (deploy/k8s/) say, on 127.0.0.1, so that the manifests cannot drift from the
# programs' flags: every StatefulSet pod's command, args and environment come
# from the manifests (tests/k8s/k8s.js pods); the only substitutions are what a
# cluster provides (k8s.js's pods() has the list): the entrypoint's path maps to
# deploy/docker/entrypoint.sh and PSC_BIN_DIR to the build, volumes become
# directories (the job ConfigMap's job.json a smaller job: 4,000 training
# images, 1 epoch), each containerPort a free port on 127.0.0.1, and the pods'
# DNS names those addresses (PSC_ADDR_OVERRIDES, for tests only).
#
# In-cluster mode (the default manifests): 2 ps + 2 workers train to the end,
# the chief prints its test accuracy, each worker's job exits 0 and the pod goes
# on serving (PSC_AFTER_JOB=serve); every pod's readiness and liveness probes
# (gRPC health, as the manifests declare them) answer SERVING, the PS metrics
# port serves, the PS checkpoints are committed in their PVC directories, and
# SIGTERM stops every pod with exit 0.
# Standalone variant: the daemons start idle and psctl trains the job on the chief.
source "$(dirname "$0")/lib.sh"
export PSC_NODE_MODULES=${PSC_NODE_MODULES:-/opt/psc/k8s-validate/node_modules}
if ! command -v node >/dev/null || [ ! -d "$PSC_NODE_MODULES/kubernetes-models" ] || [ ! -d "$PSC_NODE_MODULES/yaml" ]; then
    msg="node or $PSC_NODE_MODULES/{kubernetes-models,yaml} missing: run deploy/setup.sh"
    [ "${CI:-}" = true ] && fail "$msg"
    echo "SKIP: $msg"; FAILED=0; exit 77
fi
k8s() { node "$SRC/tests/k8s/k8s.js" "$@"; }
EP_PATH=$(sed -n 's/^ENTRYPOINT \["\([^"]*\)"\]$/\1/p' "$SRC/deploy/docker/Dockerfile")
[ -n "$EP_PATH" ] || fail "no ENTRYPOINT in deploy/docker/Dockerfile"

# render NAME [COMPONENT]: deploy/k8s rendered (by kubectl kustomize where it works) into $TMP/NAME.yaml
render() {
    cp -r "$SRC/deploy/k8s" "$TMP/$1"
    [ -z "${2:-}" ] || sed -i "s|^  # - variants/$2 |  - variants/$2 |" "$TMP/$1/kustomization.yaml"
    if ! { command -v kubectl >/dev/null && kubectl kustomize "$TMP/$1" >"$TMP/$1.yaml" 2>/dev/null; }; then
        k8s render "$TMP/$1" >"$TMP/$1.yaml" || fail "render $1"
    fi
}

# the job of the ConfigMap, smaller
node -e '
    const j = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
    Object.assign(j.data, {train_examples: 4000, test_examples: 1000});
    j.epochs = 1;
    j.checkpoint = Object.assign(j.checkpoint || {}, {every_steps: 20});
    require("fs").writeFileSync(process.argv[2], JSON.stringify(j, null, 1));' "$SRC/deploy/k8s/job.json" "$TMP/job-small.json"

declare -A POD_PID
# start_pods DIR: starts every pod of DIR (written by k8s.js pods) in the background
start_pods() {
    local dir=$1 pod
    local overrides
    overrides=$(cat "$dir/overrides")
    local keep=()
    for v in UBSAN_OPTIONS ASAN_OPTIONS TSAN_OPTIONS; do [ -z "${!v:-}" ] || keep+=("$v=${!v}"); done
    while read -r pod; do
        mapfile -d '' -t argv <"$dir/$pod/argv"
        mapfile -d '' -t envv <"$dir/$pod/env"
        env -i PATH="$PATH" "${keep[@]}" "${envv[@]}" PSC_BIN_DIR="$BIN" PSC_ADDR_OVERRIDES="$overrides" "${argv[@]}" \
            >"$TMP/$pod.out" 2>"$TMP/$pod.log" &
        POD_PID[$pod]=$!
        PIDS+=("$!")
    done <"$dir/pods"
}
# info DIR POD KEY: a value of the pod's info file
info() { sed -n "s/^$3 //p" "$1/$2/info" | head -1; }
# probe DIR POD: the pod's readiness and liveness probes as declared (gRPC health) answer SERVING
probe() {
    local addr service
    addr=$(info "$1" "$2" grpc)
    for kind in readiness liveness; do
        service=$(info "$1" "$2" "$kind")
        "$BIN/psc_grpc_probe" "$addr" "$service" 20000 >"$TMP/probe.out" ||
            fail "$2: $kind probe (service \"$service\") on $addr: $(cat "$TMP/probe.out")"
    done
}
# stop_pods DIR: SIGTERM to every pod, as Kubernetes deletes them; each exits 0
# (ps_server always; a worker in standalone mode, which they all are by then)
stop_pods() {
    local pod
    while read -r pod; do kill -TERM "${POD_PID[$pod]}"; done <"$1/pods"
    while read -r pod; do
        wait_exit "${POD_PID[$pod]}" 15
        [ "$EXIT_CODE" -eq 0 ] || fail "$pod: exit $EXIT_CODE after SIGTERM, want 0"
    done <"$1/pods"
}

# ================= in-cluster mode: the manifests as they are =================
render base
P="$TMP/pods"
k8s pods "$TMP/base.yaml" "$P" --map "$EP_PATH=$SRC/deploy/docker/entrypoint.sh" --file "job.json=$TMP/job-small.json" ||
    fail "pods"
[ "$(tr '\n' ' ' <"$P/pods")" = "ps-0 ps-1 worker-0 worker-1 " ] || fail "pods: $(cat "$P/pods")"
start_pods "$P"
# each worker's job ends with exit 0 (the entrypoint says so and runs it on as a daemon)
for _ in $(seq 600); do
    done_n=0
    for w in worker-0 worker-1; do grep -q "the job is done; $w goes on as a standalone-mode worker" "$TMP/$w.log" && done_n=$((done_n + 1)); done
    [ $done_n -eq 2 ] && break
    for pod in ps-0 ps-1 worker-0 worker-1; do
        kill -0 "${POD_PID[$pod]}" 2>/dev/null || fail "pod $pod exited during the job"
    done
    sleep 0.2
done
[ $done_n -eq 2 ] || fail "the job did not finish within 120 s"
grep -q "entrypoint: worker-0 is worker 0; TF_CONFIG=" "$TMP/worker-0.log" || fail "worker-0's entrypoint line"
acc=$(sed -n 's/^test accuracy: \([0-9.]*\)$/\1/p' "$TMP/worker-0.out")
[ -n "$acc" ] || fail "the chief printed no test accuracy"
awk -v a="$acc" 'BEGIN { exit !(a >= 0.5) }' || fail "test accuracy $acc < 0.5"
# the last checkpoint holds the final step (the end-of-training one, or a periodic one that
# fell on the last step: then the chief takes no second one at the same step)
last_ckpt=$(sed -n 's/.*checkpoint [0-9]* (.*) committed on every ps: step \([0-9]*\),.*/\1/p' "$TMP/worker-0.log" | tail -1)
final_gs=$(sed -n 's/.*evaluation on .* at global_step \([0-9]*\):.*/\1/p' "$TMP/worker-0.log" | tail -1)
[ -n "$last_ckpt" ] && [ "$last_ckpt" = "$final_gs" ] || fail "no final checkpoint (last at step ${last_ckpt:-none}, final global_step ${final_gs:-?})"
ls "$P/worker-0/vol/tb"/events.out.tfevents.* >/dev/null 2>&1 || fail "no TensorBoard events in the chief's --logdir volume"
# the probes of every pod, as declared, while the PS keep the model and the workers serve on
for pod in ps-0 ps-1 worker-0 worker-1; do probe "$P" "$pod"; done
# the metrics port the manifests declare (the Prometheus annotation) serves ps-0's metrics
mport=$(sed -n 's/^port 9100 //p' "$P/ps-0/info")
exec 3<>"/dev/tcp/127.0.0.1/$mport" || fail "metrics port of ps-0"
printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3
grep -q '^psc_ps_global_step [1-9]' <&3 || fail "ps-0's metrics have no global_step"
exec 3<&-
stop_pods "$P"
# the checkpoints are in each PS's volume (its PersistentVolumeClaim)
for i in 0 1; do
    "$BIN/psc_ckpt" list "$P/pvc/ckpt-ps-$i/ckpt" >"$TMP/ckpt$i.txt" || fail "ps-$i's PVC has no checkpoint store"
    grep -q ' committed .* good' "$TMP/ckpt$i.txt" || fail "ps-$i: no committed checkpoint: $(cat "$TMP/ckpt$i.txt")"
done

# ================= standalone variant: idle daemons, psctl drives the chief =================
render standalone standalone
S="$TMP/spods"
k8s pods "$TMP/standalone.yaml" "$S" --map "$EP_PATH=$SRC/deploy/docker/entrypoint.sh" || fail "pods (standalone)"
start_pods "$S"
for pod in ps-0 ps-1 worker-0 worker-1; do probe "$S" "$pod"; done
grep -q "no job: ready and waiting" "$TMP/worker-0.log" || fail "the chief is not idle: $(tail -3 "$TMP/worker-0.log")"
# psctl reaches the chief where the LoadBalancer Service psc-chief (or a port-forward) sends it: worker-0's port
set +e
timeout 120 "$BIN/psctl" --chief "$(info "$S" worker-0 grpc)" train "$TMP/job-small.json" >"$TMP/psctl.out" 2>"$TMP/psctl.log"
rc=$?
set -e
[ $rc -eq 0 ] || fail "psctl train: exit $rc"
grep -q '^test accuracy: 0\.[5-9]' "$TMP/psctl.out" || fail "psctl: $(cat "$TMP/psctl.out")"
for pod in ps-0 ps-1 worker-0 worker-1; do
    kill -0 "${POD_PID[$pod]}" 2>/dev/null || fail "$pod stopped after the job (standalone daemons stay up)"
done
# the README's way to reach every member from inside a pod:
#   kubectl exec worker-0 -- sh -c 'psctl --cluster "$(entrypoint.sh --print-tf-config)" status'
mapfile -d '' -t envv <"$S/worker-0/env"
tf=$(env -i PATH="$PATH" "${envv[@]}" PSC_ADDR_OVERRIDES="$(cat "$S/overrides")" "$SRC/deploy/docker/entrypoint.sh" --print-tf-config)
"$BIN/psctl" --cluster "$tf" status >"$TMP/status.out" 2>&1 || fail "psctl status: $(cat "$TMP/status.out")"
[ "$(grep -c 'SERVING' "$TMP/status.out")" -ge 4 ] || fail "psctl status: $(cat "$TMP/status.out")"
stop_pods "$S"

pass "pods as the manifests say: in-cluster job (test accuracy $acc), probes, metrics, PVC checkpoints, SIGTERM; standalone + psctl"
