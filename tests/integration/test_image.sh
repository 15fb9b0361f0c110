# test_image — psc's container images built and run for real with podman.
#
# deploy/image.sh builds the images from the Dockerfiles (the debian:bookworm
# base made with debootstrap from the machine's mirror the first time, then
# kept in podman's image store): psc:0.1.0 (deploy/docker/Dockerfile) and, where
# the machine has a CUDA toolkit, psc:0.1.0-cuda (deploy/docker/Dockerfile.cuda-host,
# the CUDA runtime and cuBLAS copied from that toolkit). Prints each image's size.
#
# Then the rendered Kubernetes manifests (deploy/k8s/, kustomize's rendering by
# tests/k8s/k8s.js) run as containers: every StatefulSet pod becomes one
# container with the pod's name as its hostname, its own IP on a podman bridge
# network, and the headless Services' DNS names (ps-0.ps, worker-1.worker, ...)
# in its /etc/hosts: the image's entrypoint makes TF_CONFIG from the hostname
# and those names exactly as on Kubernetes (no test-only variable). Command,
# args, environment (the ConfigMap), user (securityContext), image (kustomize's
# `images`: the workers run the CUDA image) come from the manifests; the job
# ConfigMap is a directory mounted read-only at /etc/psc with a smaller job
# (the demo MLP on its 60,000 training images for 2 epochs, not 3, evaluated on
# 2,000 test images, a checkpoint every 200 steps), each PS's
# PersistentVolumeClaim a directory of this machine mounted at /var/lib/psc. Checked: the in-cluster job reaches a test accuracy >= 0.8, every
# process runs as uid 1000, every pod's readiness probe service answers SERVING
# on its IP, ps-0's metrics port serves, each PS's volume holds committed
# checkpoints (read by this build's psc_ckpt), the CUDA worker says it found the
# CUDA backend and no GPU (and the libraries it loaded are the image's), and
# SIGTERM to each container (podman stop, as a kubelet deletes a pod) drains
# it: exit 0 within the pod's grace period.
#
# `podman kube play` (podman 4.3) then runs the same pods from Pod objects made
# from the StatefulSets (kube play has no StatefulSet or Service): see
# README "The image" for what it runs and what it cannot.
#
# Needs root, podman, runc and debootstrap (deploy/setup.sh installs them), the
# apt mirror, node with the manifest tooling: skips (77) without them, except
# under CI (CI=true), where only a non-root user skips. Takes minutes: label
# `image` (make sanitize leaves it out: the image builds its own binaries).
source "$(dirname "$0")/lib.sh"
[ "$(id -u)" -eq 0 ] || skip "not root: rootful podman and debootstrap need root"
PATH=$PATH:/usr/sbin:/sbin # debootstrap, ip: where a root shell without them on PATH has them
for t in podman runc debootstrap node; do
    if ! command -v "$t" >/dev/null; then
        [ "${CI:-}" = true ] && fail "$t missing: run deploy/setup.sh"
        skip "$t missing: run deploy/setup.sh (deploy/packages-host.txt)"
    fi
done
export PSC_NODE_MODULES=${PSC_NODE_MODULES:-/opt/psc/k8s-validate/node_modules}
[ -d "$PSC_NODE_MODULES/yaml" ] || { [ "${CI:-}" = true ] && fail "no $PSC_NODE_MODULES/yaml"; skip "no $PSC_NODE_MODULES/yaml: run deploy/setup.sh"; }
pm() { podman --runtime runc "$@"; }
TAG=psc:0.1.0
PFX=psc-it # container, network and volume names of this test
NET=$PFX-net

# ---- cleanup: the containers, pods, volumes and network of this test, then lib.sh's ----
podman_cleanup() {
    local c p
    for p in $(pm pod ls --filter "label=psc-test=$PFX" --format '{{.Name}}'); do
        for c in $(pm ps -a --filter "pod=$p" --format '{{.Names}}' | grep -v -- '-infra$' || true); do
            [ "$FAILED" = 0 ] || pm logs "$c" >"$TMP/kube-$c.log" 2>&1 || true
        done
        pm pod rm -f -t 0 "$p" >/dev/null 2>&1 || true
    done
    for c in $(pm ps -a --format '{{.Names}}' | grep "^$PFX-" || true); do
        [ "$FAILED" = 0 ] || pm logs "$c" >"$TMP/$c.log" 2>&1 || true
        pm rm -f -t 0 "$c" >/dev/null 2>&1 || true
    done
    for c in $(pm volume ls --format '{{.Name}}' | grep "^$PFX-" || true); do pm volume rm -f "$c" >/dev/null 2>&1 || true; done
    pm network rm -f "$NET" >/dev/null 2>&1 || true
}
trap 'podman_cleanup; cleanup' EXIT
podman_cleanup # what a killed earlier run left

# ================= the images =================
t0=$(date +%s)
cuda_home=$(readlink -f "${PSC_CUDA_HOME:-/usr/local/cuda}" || true)
cuda=0
[ -x "$cuda_home/bin/nvcc" ] && cuda=1
img_args=(--tag "$TAG")
[ $cuda = 0 ] || img_args+=(--cuda)
[ $cuda = 1 ] || echo "no CUDA toolkit at ${PSC_CUDA_HOME:-/usr/local/cuda}: no $TAG-cuda; the workers run $TAG"
# PSC_CUDA_ARCHS: the test builds the CUDA worker for one GPU generation (faster); the image's default is 80;90
PSC_CUDA_ARCHS=${PSC_CUDA_ARCHS:-90} "$SRC/deploy/image.sh" "${img_args[@]}" >"$TMP/image-build.log" 2>&1 ||
    fail "deploy/image.sh: $(grep -v '^ ' "$TMP/image-build.log" | tail -5)"
t_build=$(($(date +%s) - t0))
grep '^image: ' "$TMP/image-build.log" || true
size() { pm image inspect --format '{{.Size}}' "$1" | awk '{ printf "%.0f MB", $1 / 1e6 }'; }
echo "image $TAG: $(size "$TAG")"
[ $cuda = 0 ] || echo "image $TAG-cuda: $(size "$TAG-cuda")"
[ "$(pm image inspect --format '{{.Config.User}}' "$TAG")" = 1000:1000 ] || fail "$TAG does not run as 1000:1000"
pm run --rm --entrypoint sh "$TAG" -c 'id -u; command -v podman || echo no-podman; ls /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz' \
    >"$TMP/inimage.out" 2>&1 || fail "a shell in $TAG: $(cat "$TMP/inimage.out")"
[ "$(sed -n 1p "$TMP/inimage.out")" = 1000 ] || fail "$TAG: id -u is not 1000: $(cat "$TMP/inimage.out")"
grep -qx no-podman "$TMP/inimage.out" || fail "$TAG has podman (a host-only test package): $(cat "$TMP/inimage.out")"

# ================= the manifests, rendered; the pods as containers =================
cp -r "$SRC/deploy/k8s" "$TMP/k8s"
node "$SRC/tests/k8s/k8s.js" render "$TMP/k8s" >"$TMP/rendered.yaml" || fail "render deploy/k8s"
# the smaller job in place of the ConfigMap's job.json
node -e '
    const j = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
    Object.assign(j.data, {test_examples: 2000});
    j.epochs = 2;
    j.checkpoint = Object.assign(j.checkpoint || {}, {every_steps: 200});
    require("fs").writeFileSync(process.argv[2], JSON.stringify(j, null, 1));' "$SRC/deploy/k8s/job.json" "$TMP/job.json"

# a /24 for the bridge network that this machine uses nowhere (routes, addresses, podman networks)
used=$(ip -4 route; ip -4 -o addr; pm network ls --format '{{range .Subnets}}{{.Subnet}} {{end}}')
subnet=""
for n in $(seq 200 250); do
    grep -q "10\.89\.$n\." <<<"$used" || { subnet=10.89.$n; break; }
done
[ -n "$subnet" ] || fail "no free 10.89.200-250.0/24 for the podman network"
pm network create --subnet "$subnet.0/24" "$NET" >/dev/null || fail "podman network create $subnet.0/24"

# pods RENDERED OUTDIR SUBNET JOB CUDA: for every StatefulSet pod, OUTDIR/POD/ gets what
# `podman run` needs to run it as the manifests say (image, command+args and env
# NUL-separated, user, mounts, ip, grace), OUTDIR/cm/NAME/ each ConfigMap's keys as
# files (job.json: JOB); OUTDIR/pods the names; OUTDIR/hosts the
# Services' DNS names ("NAME.SERVICE:IP", the --add-host entries); OUTDIR/kube.yaml
# the same pods as Pod objects for `podman kube play` (hostAliases for the names,
# persistentVolumeClaim volumes for the claim templates, the ConfigMaps).
node - "$TMP/rendered.yaml" "$TMP/pods" "$subnet" "$TMP/job.json" "$cuda" "$PFX" <<'JS' || fail "pods from the manifests"
const fs = require('fs'), path = require('path');
const YAML = require(path.join(process.env.PSC_NODE_MODULES, 'yaml'));
const [file, out, subnet, job, cuda, pfx] = process.argv.slice(2);
const docs = YAML.parseAllDocuments(fs.readFileSync(file, 'utf8')).map((d) => d.toJS()).filter((d) => d);
const cms = new Map(docs.filter((d) => d.kind === 'ConfigMap').map((c) => [c.metadata.name, c]));
const die = (m) => { console.error(m); process.exit(1); };
const pods = [];
for (const s of docs.filter((d) => d.kind === 'StatefulSet'))
    for (let i = 0; i < s.spec.replicas; i++) pods.push({ s, name: `${s.metadata.name}-${i}`, ip: `${subnet}.${10 + pods.length}` });
const hosts = pods.map((p) => ({ name: `${p.name}.${p.s.spec.serviceName}`, ip: p.ip }));
fs.mkdirSync(out, { recursive: true });
const kube = [];
// kube play makes a podman volume of each configMap and emptyDir volume, named after the
// ConfigMap or the volume and shared by every pod that names it (an emptyDir is the pod's
// own on Kubernetes): here each gets this test's prefix, and each emptyDir the pod's name.
const kubeName = (n) => `${pfx}-${n}`;
for (const c of cms.values()) {
    const cm = JSON.parse(JSON.stringify(c));
    cm.metadata.name = kubeName(cm.metadata.name);
    for (const k of Object.keys(cm.data || {})) if (k === 'job.json') cm.data[k] = fs.readFileSync(job, 'utf8');
    kube.push(cm);
    // a configMap volume: the keys as files, readable by the pods' user
    fs.mkdirSync(path.join(out, 'cm', c.metadata.name), { recursive: true, mode: 0o755 });
    for (const [k, v] of Object.entries(cm.data || {})) fs.writeFileSync(path.join(out, 'cm', c.metadata.name, k), v, { mode: 0o644 });
}
for (const p of pods) {
    const spec = p.s.spec.template.spec, c = spec.containers[0], dir = path.join(out, p.name);
    fs.mkdirSync(dir);
    // kustomize's images made it psc:0.1.0 / psc:0.1.0-cuda; without a CUDA toolkit the CPU image
    let image = c.image;
    if (cuda !== '1') image = image.replace(/-cuda$/, '');
    const env = {};
    for (const f of c.envFrom || []) Object.assign(env, cms.get(f.configMapRef.name).data);
    for (const e of c.env || []) env[e.name] = String(e.value);
    const mounts = [];
    for (const m of c.volumeMounts || []) {
        const v = (spec.volumes || []).find((x) => x.name === m.name);
        const claim = (p.s.spec.volumeClaimTemplates || []).find((x) => x.metadata.name === m.name);
        if (claim) mounts.push(`pvc ${m.name}-${p.name} ${m.mountPath} rw`);
        else if (v && v.configMap) mounts.push(`configmap ${v.configMap.name} ${m.mountPath} ro`);
        else if (v && v.emptyDir) mounts.push(`emptydir ${m.name}-${p.name} ${m.mountPath} rw`);
        else die(`${p.name}: volume ${m.name} is not a configMap, emptyDir or claim template`);
    }
    const sc = spec.securityContext || {};
    fs.writeFileSync(path.join(dir, 'image'), image + '\n');
    fs.writeFileSync(path.join(dir, 'argv'), [...c.command, ...(c.args || []).map(String)].map((a) => a + '\0').join(''));
    fs.writeFileSync(path.join(dir, 'env'), Object.entries(env).map(([k, v]) => `${k}=${v}\0`).join(''));
    fs.writeFileSync(path.join(dir, 'mounts'), mounts.join('\n') + '\n');
    fs.writeFileSync(path.join(dir, 'info'), [`ip ${p.ip}`, `user ${sc.runAsUser}:${sc.runAsGroup}`,
        `grace ${spec.terminationGracePeriodSeconds || 30}`, `readiness ${c.readinessProbe.grpc.service || ''}`,
        `set ${p.s.metadata.name}`, `container ${c.name}`].join('\n') + '\n');
    // the Pod a StatefulSet controller would make, for kube play
    const pod = { apiVersion: 'v1', kind: 'Pod',
        metadata: { name: p.name, labels: Object.assign({}, p.s.spec.template.metadata.labels, { 'psc-test': pfx }),
                    annotations: p.s.spec.template.metadata.annotations },
        spec: JSON.parse(JSON.stringify(spec)) };
    pod.spec.hostname = p.name;
    pod.spec.subdomain = p.s.spec.serviceName;
    pod.spec.hostAliases = hosts.map((h) => ({ ip: h.ip, hostnames: [h.name] }));
    pod.spec.containers[0].image = image;
    for (const f of pod.spec.containers[0].envFrom || []) f.configMapRef.name = kubeName(f.configMapRef.name);
    for (const v of pod.spec.volumes || []) {
        if (v.configMap) v.configMap.name = kubeName(v.configMap.name);
        if (v.emptyDir) {
            const n = kubeName(`${v.name}-${p.name}`);
            for (const m of pod.spec.containers[0].volumeMounts) if (m.name === v.name) m.name = n;
            v.name = n;
        }
    }
    // kube play publishes every containerPort on the host's same port (hostPort
    // defaults to it), so the second pod's 2222 collides; on Kubernetes the list is
    // informational, and every pod here has its own IP: no ports
    delete pod.spec.containers[0].ports;
    for (const t of p.s.spec.volumeClaimTemplates || []) {
        pod.spec.volumes = pod.spec.volumes || [];
        pod.spec.volumes.push({ name: t.metadata.name, persistentVolumeClaim: { claimName: `${pfx}-${t.metadata.name}-${p.name}` } });
        kube.push({ apiVersion: 'v1', kind: 'PersistentVolumeClaim', metadata: { name: `${pfx}-${t.metadata.name}-${p.name}` }, spec: t.spec });
    }
    kube.push(pod);
}
fs.writeFileSync(path.join(out, 'pods'), pods.map((p) => p.name).join('\n') + '\n');
fs.writeFileSync(path.join(out, 'hosts'), hosts.map((h) => `${h.name}:${h.ip}`).join('\n') + '\n');
fs.writeFileSync(path.join(out, 'kube.yaml'), kube.map((d) => YAML.stringify(d)).join('---\n'));
JS
P="$TMP/pods"
mapfile -t PODS <"$P/pods"
[ "${PODS[*]}" = "ps-0 ps-1 worker-0 worker-1" ] || fail "pods: ${PODS[*]}"
info() { sed -n "s/^$2 //p" "$P/$1/info"; }
mapfile -t HOSTS <"$P/hosts"

# run_pod POD: the pod as a container of this machine (detached)
run_pod() {
    local pod=$1 kind name at mode args=()
    mapfile -d '' -t argv <"$P/$pod/argv"
    mapfile -d '' -t envv <"$P/$pod/env"
    for e in "${envv[@]}"; do args+=(--env "$e"); done
    for h in "${HOSTS[@]}"; do args+=(--add-host "$h"); done
    while read -r kind name at mode; do
        case $kind in
        configmap) args+=(--volume "$P/cm/$name:$at:ro") ;;
        pvc | emptydir)
            mkdir -p "$TMP/vol/$name"
            chown "$(info "$pod" user)" "$TMP/vol/$name" # fsGroup: the pod's user owns its volumes
            args+=(--volume "$TMP/vol/$name:$at:$mode") ;;
        esac
    done <"$P/$pod/mounts"
    pm run -d --name "$PFX-$pod" --hostname "$pod" --network "$NET" --ip "$(info "$pod" ip)" \
        --user "$(info "$pod" user)" --stop-timeout "$(info "$pod" grace)" \
        --entrypoint "${argv[0]}" "${args[@]}" "$(cat "$P/$pod/image")" "${argv[@]:1}" >/dev/null ||
        fail "podman run $pod"
}
# ctr POD: the name of the pod's container: $PFX-POD for podman run, POD-CONTAINER for kube play
MODE=run
ctr() {
    if [ "$MODE" = run ]; then echo "$PFX-$1"; else echo "$1-$(info "$1" container)"; fi
}
# wait_job: each worker's job ends (the entrypoint says so and goes on as a daemon)
wait_job() {
    local w n
    for _ in $(seq 900); do
        n=0
        for w in worker-0 worker-1; do
            # (grep without -q reads to the end: with pipefail, -q's early exit fails podman logs)
            pm logs "$(ctr $w)" 2>&1 | grep "the job is done; $w goes on as a standalone-mode worker" >/dev/null && n=$((n + 1))
        done
        [ $n -eq 2 ] && return 0
        for w in "${PODS[@]}"; do
            [ "$(pm inspect --format '{{.State.Running}}' "$(ctr "$w")")" = true ] ||
                fail "$MODE: $w stopped during the job: $(pm logs "$(ctr "$w")" 2>&1 | tail -5)"
        done
        sleep 0.5
    done
    fail "$MODE: the job did not finish within 450 s"
}
# check_job: TF_CONFIG from the pods' names, the chief's accuracy, the tower backends,
# uid 1000, the readiness probes' services, ps-0's metrics; sets ACC
check_job() {
    local w line pod u
    pm logs "$(ctr worker-0)" >"$TMP/$MODE-worker-0.out" 2>"$TMP/$MODE-worker-0.log"
    grep -q "^entrypoint: worker-0 is worker 0; TF_CONFIG=.*\"worker-0.worker:2222\", \"worker-1.worker:2222\"\].*\"ps-0.ps:2222\", \"ps-1.ps:2222\"" \
        "$TMP/$MODE-worker-0.log" || fail "$MODE: worker-0's TF_CONFIG is not the pods' DNS names: $(grep TF_CONFIG "$TMP/$MODE-worker-0.log")"
    ACC=$(sed -n 's/^test accuracy: \([0-9.]*\)$/\1/p' "$TMP/$MODE-worker-0.out")
    [ -n "$ACC" ] || fail "$MODE: the chief printed no test accuracy"
    awk -v a="$ACC" 'BEGIN { exit !(a >= 0.8) }' || fail "$MODE: test accuracy $ACC < 0.8"
    # which tower backend each worker found, and why
    for w in worker-0 worker-1; do
        line=$(pm logs "$(ctr $w)" 2>&1 | grep -m1 'GPU visible\|usable GPU' || true)
        echo "$MODE: $w ($(cat "$P/$w/image")): ${line#*] }"
        if [ "$(cat "$P/$w/image")" = "$TAG-cuda" ]; then
            grep -q 'no GPU visible (the CUDA backend found no device): one CPU tower' <<<"$line" ||
                fail "$MODE: $w: the CUDA image's worker did not find its CUDA backend: $line"
        fi
    done
    if [ $cuda = 1 ]; then
        # the CUDA libraries the worker loaded: the image's own copies of the toolkit's
        pid=$(pm inspect --format '{{.State.Pid}}' "$(ctr worker-1)")
        grep -o '/usr/local/cuda/lib64/lib[a-zA-Z]*\.so[.0-9]*' "/proc/$pid/maps" | sort -u >"$TMP/cudalibs"
        for l in libcudart libcublas libcublasLt; do
            grep -q "/$l\.so" "$TMP/cudalibs" || fail "$MODE: worker-1 has no $l from /usr/local/cuda/lib64 mapped: $(cat "$TMP/cudalibs")"
        done
        echo "$MODE: worker-1 mapped $(tr '\n' ' ' <"$TMP/cudalibs")"
    fi
    # every process runs as uid 1000 (real, effective, saved, fs: /proc/PID/status on this machine)
    for pod in "${PODS[@]}"; do
        u=$(for h in $(pm top "$(ctr "$pod")" hpid | tail -n +2); do sed -n 's/^Uid:\s*//p' "/proc/$h/status"; done |
            tr -s ' \t\n' '\n' | sort -u | tr '\n' ' ')
        [ "$u" = "1000 " ] || fail "$MODE: $pod: processes run as uid(s) ${u:-none}, want 1000"
    done
    # the readiness probes' gRPC health services, from this machine to each pod's IP; ps-0's metrics
    for pod in "${PODS[@]}"; do
        "$BIN/psc_grpc_probe" "$(info "$pod" ip):2222" "$(info "$pod" readiness)" 20000 >"$TMP/probe.out" ||
            fail "$MODE: $pod: readiness probe: $(cat "$TMP/probe.out")"
    done
    exec 3<>"/dev/tcp/$(info ps-0 ip)/9100" || fail "$MODE: metrics port of ps-0"
    printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3
    grep -q '^psc_ps_global_step [1-9]' <&3 || fail "$MODE: ps-0's metrics have no global_step"
    exec 3<&-
}
# check_ckpt DIR PS: committed checkpoints in a PS's volume, owned by uid 1000, readable here
check_ckpt() {
    [ "$(stat -c %u "$1")" = 1000 ] || fail "$MODE: $2's checkpoints are not owned by uid 1000"
    "$BIN/psc_ckpt" list "$1" >"$TMP/ckpt.txt" || fail "$MODE: $2's volume has no checkpoint store"
    grep -q ' committed .* good' "$TMP/ckpt.txt" || fail "$MODE: $2: no committed checkpoint: $(cat "$TMP/ckpt.txt")"
}
# sigterm POD: SIGTERM to the pod's container (podman stop: SIGTERM, SIGKILL after the
# stop timeout): it drains and exits 0
sigterm() {
    local t1 rc
    t1=$(date +%s.%N)
    pm stop "$(ctr "$1")" >/dev/null || fail "$MODE: podman stop $1"
    rc=$(pm inspect --format '{{.State.ExitCode}}' "$(ctr "$1")")
    [ "$rc" = 0 ] || fail "$MODE: $1: exit $rc after SIGTERM, want 0: $(pm logs "$(ctr "$1")" 2>&1 | tail -3)"
    echo "$MODE: $1: SIGTERM -> exit 0 in $(awk -v a="$t1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
    [ "$(info "$1" set)" = worker ] || pm logs "$(ctr "$1")" 2>&1 | grep 'stopping (SIGTERM)' >/dev/null ||
        fail "$MODE: $1's log does not say it stopped on SIGTERM: $(pm logs "$(ctr "$1")" 2>&1 | tail -3)"
}

# ================= podman run: one container per pod =================
t0=$(date +%s)
for pod in "${PODS[@]}"; do run_pod "$pod"; done
wait_job
t_run=$(($(date +%s) - t0))
check_job
acc_run=$ACC
for pod in "${PODS[@]}"; do sigterm "$pod"; done
for i in 0 1; do check_ckpt "$TMP/vol/ckpt-ps-$i/ckpt" "ps-$i"; done
for pod in "${PODS[@]}"; do pm rm "$(ctr "$pod")" >/dev/null; done

# ================= podman kube play: the same pods as Pod objects =================
# kube play (podman 4.3) plays Pod, Deployment and PersistentVolumeClaim objects
# (ConfigMaps feed envFrom and configMap volumes); the StatefulSets and Services
# of the rendered manifests it leaves out, so each StatefulSet pod is a Pod here,
# as the StatefulSet controller would make it (see pods above). --ip: the pods'
# IPs, in the order of kube.yaml.
MODE=kube
t0=$(date +%s)
ips=()
for pod in "${PODS[@]}"; do ips+=(--ip "$(info "$pod" ip)"); done
pm kube play --network "$NET" "${ips[@]}" "$P/kube.yaml" >"$TMP/kube-play.out" 2>&1 ||
    fail "podman kube play: $(cat "$TMP/kube-play.out")"
wait_job
t_kube=$(($(date +%s) - t0))
check_job
acc_kube=$ACC
for pod in "${PODS[@]}"; do sigterm "$pod"; done
for i in 0 1; do check_ckpt "$(pm volume inspect --format '{{.Mountpoint}}' "$PFX-ckpt-ps-$i")/ckpt" "ps-$i"; done
pm kube down "$P/kube.yaml" >/dev/null || fail "podman kube down"

pass "images built in ${t_build} s; 2 ps + 2 workers as containers of the image from the rendered manifests: podman run: in-cluster job in ${t_run} s, test accuracy $acc_run; podman kube play: ${t_kube} s, test accuracy $acc_kube; uid 1000, TF_CONFIG from the pods' names, probes, metrics, checkpoints in each PS's volume, SIGTERM -> exit 0"
