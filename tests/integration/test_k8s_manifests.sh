# test_k8s_manifests — the Kubernetes manifests of deploy/k8s/, offline: each
# variant rendered (tests/k8s/k8s.js, and `kubectl kustomize` where this machine
# has kubectl: both must give the same objects) validates against the
# Kubernetes schemas of the npm package kubernetes-models, unknown fields
# included; psc's own rules hold (headless Services, replica counts = the
# counts the entrypoint reads, gRPC probes, a PVC per PS, the entrypoint path
# of the Dockerfiles); and deliberately broken manifests are refused, each
# naming what is wrong. The Dockerfiles' COPY sources exist.
# Needs node and /opt/psc/k8s-validate (deploy/setup.sh); skips without them,
# except under CI, where it fails.
source "$(dirname "$0")/lib.sh"
K8S="$SRC/deploy/k8s"
export PSC_NODE_MODULES=${PSC_NODE_MODULES:-/opt/psc/k8s-validate/node_modules}
if ! command -v node >/dev/null || [ ! -d "$PSC_NODE_MODULES/kubernetes-models" ] || [ ! -d "$PSC_NODE_MODULES/yaml" ]; then
    msg="node or $PSC_NODE_MODULES/{kubernetes-models,yaml} missing: run deploy/setup.sh"
    [ "${CI:-}" = true ] && fail "$msg"
    echo "SKIP: $msg"; FAILED=0; exit 77
fi
k8s() { node "$SRC/tests/k8s/k8s.js" "$@"; }

# ---- the Dockerfiles: sources exist, setup.sh + packages.txt, the entrypoint's path ----
EP_PATH=""
for df in "$SRC/deploy/docker/Dockerfile" "$SRC/deploy/docker/Dockerfile.cuda"; do
    name=${df#"$SRC/"}
    grep -q '^FROM debian:bookworm AS base$' "$df" || fail "$name: not FROM debian:bookworm"
    grep -q '^COPY deploy/packages.txt deploy/setup.sh /src/deploy/$' "$df" || fail "$name: does not copy packages.txt and setup.sh"
    grep -q '/src/deploy/setup.sh' <(grep '^RUN\|^ &&' "$df") || fail "$name: does not run setup.sh"
    # every COPY without --from: its sources (all words but the last) exist in the repository
    while read -r _ args; do
        case $args in --from=*) continue ;; esac
        read -ra words <<<"$args"
        for src in "${words[@]:0:${#words[@]}-1}"; do
            [ -e "$SRC/$src" ] || fail "$name: COPY source $src does not exist"
        done
    done < <(grep '^COPY ' "$df")
    ep=$(sed -n 's/^ENTRYPOINT \["\([^"]*\)"\]$/\1/p' "$df")
    [ -n "$ep" ] || fail "$name: no ENTRYPOINT [\"...\"]"
    grep -qx "COPY deploy/docker/entrypoint.sh $ep" "$df" || fail "$name: entrypoint.sh is not copied to $ep"
    # the entrypoint runs PSC_BIN_DIR's programs, /opt/psc/bin by default
    grep -q '^bin_dir=${PSC_BIN_DIR:-/opt/psc/bin}$' "$SRC/deploy/docker/entrypoint.sh" || fail "entrypoint's default PSC_BIN_DIR moved"
    grep -qx 'COPY --from=build /build/ps_server /build/worker /build/psctl /opt/psc/bin/' "$df" ||
        fail "$name: the programs are not in /opt/psc/bin"
    [ -z "$EP_PATH" ] || [ "$EP_PATH" = "$ep" ] || fail "the Dockerfiles' entrypoints differ"
    EP_PATH=$ep
done

# ---- render every variant; kubectl kustomize, where there is one, agrees ----
# variant NAME COMPONENTS...: a copy of deploy/k8s with those component lines uncommented
variant() {
    local name=$1; shift
    cp -r "$K8S" "$TMP/$name"
    for c in "$@"; do
        sed -i "s|^  # - variants/$c |  - variants/$c |" "$TMP/$name/kustomization.yaml"
        grep -q "^  - variants/$c " "$TMP/$name/kustomization.yaml" || fail "no component line for $c"
    done
}
variant base
variant standalone standalone
variant cpu cpu
variant both standalone cpu
KUBECTL=""
if command -v kubectl >/dev/null && kubectl kustomize "$K8S" >"$TMP/deploy-k8s.kubectl.yaml" 2>"$TMP/kubectl.err"; then
    KUBECTL=kubectl
else
    echo "note: no working kubectl kustomize here; validating tests/k8s/k8s.js's rendering alone"
fi
for v in base standalone cpu both; do
    kube=()
    if [ -n "$KUBECTL" ]; then
        kubectl kustomize "$TMP/$v" >"$TMP/$v.kubectl.yaml" || fail "kubectl kustomize $v"
        kube=("$TMP/$v.kubectl.yaml")
    fi
    # render, = kubectl's rendering, validate (the kubectl one where there is one), psc's rules
    k8s verify "$TMP/$v" "$TMP/$v.yaml" "$EP_PATH" "${kube[@]}" || fail "$v"
done
# `kubectl apply -k deploy/k8s/` sends what its copy renders
[ -z "$KUBECTL" ] || k8s same "$TMP/deploy-k8s.kubectl.yaml" "$TMP/base.yaml" || fail "deploy/k8s renders differently from its copy"
# the raw files, before kustomize, validate too
k8s validate "$K8S/ps.yaml" "$K8S/worker.yaml" "$K8S/variants/standalone/chief-service.yaml" >"$TMP/raw.out" ||
    { cat "$TMP/raw.out" >&2; fail "raw files invalid"; }

# ---- what each variant must say, read from the rendered objects ----
node - "$TMP" "$K8S/job.json" <<'JS' || fail "the variants' contents"
const fs = require('fs');
const YAML = require(process.env.PSC_NODE_MODULES + '/yaml');
const [dir, jobFile] = process.argv.slice(2);
const load = (v) => YAML.parseAllDocuments(fs.readFileSync(`${dir}/${v}.yaml`, 'utf8')).map((d) => d.toJS());
const get = (docs, kind, name) => docs.find((d) => d.kind === kind && d.metadata.name === name);
const ctr = (docs, name) => get(docs, 'StatefulSet', name).spec.template.spec.containers[0];
let bad = 0;
const expect = (what, got, want) => {
    if (JSON.stringify(got) !== JSON.stringify(want)) { bad++; console.error(`FAIL ${what}: ${JSON.stringify(got)}, want ${JSON.stringify(want)}`); }
};
const base = load('base'), sa = load('standalone'), cpu = load('cpu'), both = load('both');
expect('base: worker GPU limit', ctr(base, 'worker').resources.limits['nvidia.com/gpu'], 1);
expect('base: ps requests', Object.keys(ctr(base, 'ps').resources.requests).sort(), ['cpu', 'memory']);
expect('base: PVC per ps', get(base, 'StatefulSet', 'ps').spec.volumeClaimTemplates[0].spec.accessModes, ['ReadWriteOnce']);
expect('base: workers in-cluster', ctr(base, 'worker').args.slice(0, 2), ['--job_spec', '/etc/psc/job.json']);
expect('base: ps image', ctr(base, 'ps').image, 'psc:0.1.0');
expect('base: worker image', ctr(base, 'worker').image, 'psc:0.1.0-cuda');
expect('base: no chief Service', get(base, 'Service', 'psc-chief'), undefined);
expect('standalone: worker idle', ctr(sa, 'worker').args.includes('--job_spec'), false);
expect('standalone: ps idle', ctr(sa, 'ps').args.includes('--job_spec'), false);
const lb = get(sa, 'Service', 'psc-chief');
expect('standalone: LoadBalancer on worker-0', [lb.spec.type, lb.spec.selector['statefulset.kubernetes.io/pod-name'], lb.spec.ports[0].port],
    ['LoadBalancer', 'worker-0', 2222]);
expect('cpu: no GPU limit', 'nvidia.com/gpu' in ctr(cpu, 'worker').resources.limits, false);
expect('cpu: still in-cluster', ctr(cpu, 'worker').args.includes('--job_spec'), true);
expect('standalone + cpu', [ctr(both, 'worker').args.includes('--job_spec'), 'nvidia.com/gpu' in ctr(both, 'worker').resources.limits], [false, false]);
const job = base.find((d) => d.kind === 'ConfigMap' && d.metadata.name.startsWith('psc-job-'));
expect('the job ConfigMap holds job.json byte for byte', job.data['job.json'], fs.readFileSync(jobFile, 'utf8'));
process.exit(bad ? 1 : 0);
JS

# ---- broken manifests are refused, each naming what is wrong ----
T=$'\t'
cat >"$TMP/cases" <<EOF
validate${T}/spec/replcas: unknown field "replcas"${T}StatefulSet/ps${T}[{"op":"add","path":"/spec/replcas","value":2}]
validate${T}grpc/servce: unknown field${T}StatefulSet/worker${T}[{"op":"add","path":"/spec/template/spec/containers/0/readinessProbe/grpc/servce","value":"psc.Worker"}]
validate${T}env/0/valu: unknown field${T}StatefulSet/worker${T}[{"op":"add","path":"/spec/template/spec/containers/0/env","value":[{"name":"A","valu":"1"}]}]
validate${T}containerPort: type {"type":"integer"}${T}StatefulSet/ps${T}[{"op":"replace","path":"/spec/template/spec/containers/0/ports/0/containerPort","value":"2222"}]
validate${T}required {"missingProperty":"name"}${T}StatefulSet/ps${T}[{"op":"remove","path":"/spec/template/spec/containers/0/name"}]
validate${T}podManagementPolicy: enum${T}StatefulSet/ps${T}[{"op":"replace","path":"/spec/podManagementPolicy","value":"Sometimes"}]
validate${T}nvidia.com~1gpu: format {"format":"quantity"}${T}StatefulSet/worker${T}[{"op":"replace","path":"/spec/template/spec/containers/0/resources/limits/nvidia.com~1gpu","value":"one"}]
validate${T}ports/0/protocol: enum${T}Service/ps${T}[{"op":"add","path":"/spec/ports/0/protocol","value":"QUIC"}]
validate${T}data/PSC_NUM_PS: type {"type":"string"}${T}ConfigMap/$(grep -o 'psc-cluster-[a-z0-9]*' "$TMP/base.yaml" | head -1)${T}[{"op":"replace","path":"/data/PSC_NUM_PS","value":2}]
validate${T}kind StatefullSet is not a Kubernetes type${T}StatefulSet/worker${T}[{"op":"replace","path":"/kind","value":"StatefullSet"}]
validate${T}/metadata/name: "Worker" is not a DNS subdomain${T}StatefulSet/worker${T}[{"op":"replace","path":"/metadata/name","value":"Worker"}]
check${T}StatefulSet worker: replicas 3 but its pods are told 2 (PSC_NUM_WORKERS)${T}StatefulSet/worker${T}[{"op":"replace","path":"/spec/replicas","value":3}]
check${T}readinessProbe must be grpc on 2222, service psc.ParameterServer${T}StatefulSet/ps${T}[{"op":"replace","path":"/spec/template/spec/containers/0/readinessProbe/grpc/service","value":"psc.Worker"}]
check${T}livenessProbe must be grpc on 2222${T}StatefulSet/worker${T}[{"op":"replace","path":"/spec/template/spec/containers/0/livenessProbe","value":{"tcpSocket":{"port":2222}}}]
check${T}Service ps: not headless${T}Service/ps${T}[{"op":"remove","path":"/spec/clusterIP"}]
check${T}selector does not pick StatefulSet worker${T}Service/worker${T}[{"op":"replace","path":"/spec/selector/app.kubernetes.io~1component","value":"ps"}]
check${T}command must be ["$EP_PATH"]${T}StatefulSet/ps${T}[{"op":"replace","path":"/spec/template/spec/containers/0/command","value":["/entrypoint.sh"]}]
check${T}--checkpoint_dir must be on a volumeClaimTemplate${T}StatefulSet/ps${T}[{"op":"remove","path":"/spec/volumeClaimTemplates"},{"op":"replace","path":"/spec/template/spec/containers/0/volumeMounts/0","value":{"name":"job","mountPath":"/x"}}]
check${T}sets PSC_ADDR_OVERRIDES, which is for tests only${T}StatefulSet/ps${T}[{"op":"add","path":"/spec/template/spec/containers/0/env","value":[{"name":"PSC_ADDR_OVERRIDES","value":"ps-0=1.2.3.4:1"}]}]
check${T}serviceName pss must be its own name${T}StatefulSet/ps${T}[{"op":"replace","path":"/spec/serviceName","value":"pss"}]
check${T}not a StatefulSet the entrypoint knows${T}StatefulSet/worker${T}[{"op":"replace","path":"/metadata/name","value":"trainer"}]
check${T}volume job: no ConfigMap psc-job${T}StatefulSet/worker${T}[{"op":"replace","path":"/spec/template/spec/volumes/0/configMap/name","value":"psc-job"}]
EOF
k8s refuse "$TMP/base.yaml" "$EP_PATH" "$TMP/cases" >"$TMP/refused.out" || fail "a broken manifest passed"
REFUSED=$(grep -c '^refused' "$TMP/refused.out")
[ "$REFUSED" -eq "$(grep -c . "$TMP/cases")" ] || fail "not every case ran"

# a replica count changed in one place only, as a user might: the kustomization's replicas
cp -r "$TMP/base" "$TMP/scaled"
sed -i '/- name: worker/{n;s/count: 2/count: 3/}' "$TMP/scaled/kustomization.yaml"
k8s render "$TMP/scaled" >"$TMP/scaled.yaml"
if k8s check "$TMP/scaled.yaml" "$EP_PATH" 2>"$TMP/bad.out"; then fail "replicas changed alone passed"; fi
grep -q 'replicas 3 but its pods are told 2 (PSC_NUM_WORKERS): change both' "$TMP/bad.out" || fail "$(cat "$TMP/bad.out")"
sed -i 's/PSC_NUM_WORKERS=2/PSC_NUM_WORKERS=3/' "$TMP/scaled/kustomization.yaml"
k8s render "$TMP/scaled" >"$TMP/scaled.yaml"
k8s check "$TMP/scaled.yaml" "$EP_PATH" || fail "both counts changed: refused"

# the renderer refuses what it does not implement, and `same` sees a difference
cp -r "$TMP/base" "$TMP/prefixed"
echo 'namePrefix: dev-' >>"$TMP/prefixed/kustomization.yaml"
if k8s render "$TMP/prefixed" >/dev/null 2>"$TMP/bad.out"; then fail "rendered an unsupported namePrefix"; fi
grep -q '"namePrefix" is not supported by tests/k8s/k8s.js' "$TMP/bad.out" || fail "$(cat "$TMP/bad.out")"
k8s patch "$TMP/base.yaml" StatefulSet/ps '[{"op":"replace","path":"/spec/replicas","value":1}]' >"$TMP/bad.yaml"
if k8s same "$TMP/base.yaml" "$TMP/bad.yaml" 2>/dev/null; then fail "same: missed a difference"; fi

pass "manifests: 4 variants render${KUBECTL:+ (= kubectl kustomize)} and validate (Kubernetes schemas, psc's rules); $REFUSED broken ones refused"
