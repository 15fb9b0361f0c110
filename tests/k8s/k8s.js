#!/usr/bin/env node
// k8s.js — offline tooling for psc's Kubernetes manifests (deploy/k8s/), used by
// tests/integration/test_k8s_manifests.sh and test_k8s_pods.sh. No cluster: it
// renders, validates and "runs" the manifests on this machine.
//
//   render DIR              the kustomization in DIR rendered as kustomize does, for
//                           the features deploy/k8s uses: resources, components,
//                           replicas, images, configMapGenerator (literals, files;
//                           kustomize's content-hash name suffix and the references
//                           to it), patches (inline JSON 6902 with a kind/name
//                           target). Any other kustomization field is an error, so
//                           nothing is silently left out. Prints a YAML stream.
//   same A B                two YAML streams hold the same objects (any order);
//                           used to check `render` against `kubectl kustomize`
//   validate FILE...        every document against the Kubernetes OpenAPI schemas
//                           that the npm package kubernetes-models ships (types,
//                           required fields, enums, formats), plus unknown fields,
//                           which those schemas allow but `kubectl apply`
//                           (strict field validation) refuses
//   check FILE ENTRYPOINT   psc's own rules across the objects (see check())
//   verify DIR OUT ENTRYPOINT [KUBECTL_RENDERING]
//                           render + same (against kubectl's rendering, which is
//                           then the one checked) + validate + check; OUT gets it
//   refuse FILE ENTRYPOINT CASES
//                           each case (a line: validate|check TAB what TAB
//                           KIND/NAME TAB JSON-6902-ops) applied alone to FILE
//                           must be refused, with a message containing `what`
//   patch FILE KIND/NAME OPS   applies JSON 6902 ops (JSON) to one object: the
//                           tests make broken manifests with it
//   pods FILE OUTDIR [--map FROM=TO]... [--file KEY=PATH]...
//                           writes what each StatefulSet pod would run, to run it
//                           on 127.0.0.1 (see pods())
//
// Node modules (yaml, kubernetes-models) come from $PSC_NODE_MODULES, default
// /opt/psc/k8s-validate/node_modules (installed by deploy/setup.sh).
'use strict';
const fs = require('fs');
const path = require('path');
const crypto = require('crypto');
const net = require('net');

const NM = process.env.PSC_NODE_MODULES || '/opt/psc/k8s-validate/node_modules';
const YAML = require(path.join(NM, 'yaml'));

class UserError extends Error {}
const die = (msg) => {
    throw new UserError(msg);
};

// ---------------------------------------------------------------- YAML
function parseStream(text, where) {
    const docs = [];
    for (const d of YAML.parseAllDocuments(text)) {
        if (d.errors.length) die(`${where}: ${d.errors[0].message}`);
        const v = d.toJS();
        if (v !== null && v !== undefined) docs.push(v);
    }
    return docs;
}
const readStream = (file) => parseStream(fs.readFileSync(file === '-' ? 0 : file, 'utf8'), file);
const dumpStream = (docs) => docs.map((d) => YAML.stringify(d, { lineWidth: 0 })).join('---\n');
const id = (o) => `${o.kind}/${(o.metadata || {}).name}`;

// ---------------------------------------------------------------- kustomize
const KUSTOMIZATION_FILES = ['kustomization.yaml', 'kustomization.yml', 'Kustomization'];
const SUPPORTED = ['apiVersion', 'kind', 'resources', 'components', 'replicas', 'images', 'configMapGenerator', 'patches'];

function loadKustomization(dir, wantKind) {
    const f = KUSTOMIZATION_FILES.map((n) => path.join(dir, n)).find((p) => fs.existsSync(p));
    if (!f) die(`${dir}: no kustomization.yaml`);
    const docs = readStream(f);
    if (docs.length !== 1) die(`${f}: expected one document`);
    const k = docs[0];
    const want = wantKind === 'Component'
        ? ['kustomize.config.k8s.io/v1alpha1', 'Component']
        : ['kustomize.config.k8s.io/v1beta1', 'Kustomization'];
    if (k.apiVersion !== want[0] || k.kind !== want[1])
        die(`${f}: expected apiVersion ${want[0]}, kind ${want[1]}`);
    for (const key of Object.keys(k))
        if (!SUPPORTED.includes(key)) die(`${f}: "${key}" is not supported by tests/k8s/k8s.js (only ${SUPPORTED.join(', ')})`);
    return { k, file: f };
}

// Pod specs inside a workload object, for the image and name-reference transformers.
function podSpecs(o) {
    const s = o.spec || {};
    switch (o.kind) {
    case 'Pod': return [s];
    case 'CronJob': return [(((s.jobTemplate || {}).spec || {}).template || {}).spec].filter(Boolean);
    case 'Deployment': case 'StatefulSet': case 'DaemonSet': case 'ReplicaSet': case 'Job': case 'ReplicationController':
        return [(s.template || {}).spec].filter(Boolean);
    default: return [];
    }
}
const containersOf = (ps) => [...(ps.initContainers || []), ...(ps.containers || [])];

// Go's encoding/json string encoding (kustomize hashes json.Marshal's bytes).
function goJson(v) {
    if (typeof v === 'string') {
        let out = '"';
        for (const ch of v) {
            const c = ch.codePointAt(0);
            if (ch === '"') out += '\\"';
            else if (ch === '\\') out += '\\\\';
            else if (ch === '\n') out += '\\n';
            else if (ch === '\r') out += '\\r';
            else if (ch === '\t') out += '\\t';
            else if (c < 0x20 || ch === '<' || ch === '>' || ch === '&' || c === 0x2028 || c === 0x2029)
                out += '\\u' + c.toString(16).padStart(4, '0');
            else out += ch;
        }
        return out + '"';
    }
    if (v && typeof v === 'object')
        return '{' + Object.keys(v).sort().map((k) => goJson(k) + ':' + goJson(v[k])).join(',') + '}';
    return JSON.stringify(v);
}

// kustomize's ConfigMap name suffix (api/hasher): sha256 of Go's JSON of
// {data, kind: "ConfigMap", name: ""}, its first 10 hex digits with 0 1 3 a e
// made letters (checked against kubectl kustomize's names by the test).
function configMapHash(cm) {
    // (kustomize hashes before the generated object is named: name is "")
    const enc = goJson({ kind: 'ConfigMap', name: '', data: cm.data || {} });
    const hex = crypto.createHash('sha256').update(enc, 'utf8').digest('hex').slice(0, 10);
    return hex.replace(/[013ae]/g, (c) => ({ 0: 'g', 1: 'h', 3: 'k', a: 'm', e: 't' })[c]);
}

function unquote(v) {
    if (v.length >= 2 && ((v[0] === '"' && v.endsWith('"')) || (v[0] === "'" && v.endsWith("'")))) return v.slice(1, -1);
    return v;
}

function generateConfigMap(g, dir, where) {
    for (const key of Object.keys(g))
        if (!['name', 'literals', 'files'].includes(key)) die(`${where}: configMapGenerator "${key}" is not supported`);
    const data = {};
    for (const lit of g.literals || []) {
        const i = lit.indexOf('=');
        if (i <= 0) die(`${where}: literal "${lit}" is not KEY=VALUE`);
        data[lit.slice(0, i)] = unquote(lit.slice(i + 1));
    }
    for (const f of g.files || []) {
        const i = f.indexOf('=');
        const [key, rel] = i > 0 ? [f.slice(0, i), f.slice(i + 1)] : [path.basename(f), f];
        const p = path.resolve(dir, rel);
        if (path.relative(dir, p).startsWith('..')) die(`${where}: file ${f} is outside the kustomization's directory`);
        data[key] = fs.readFileSync(p, 'utf8');
    }
    return { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: g.name }, data };
}

// JSON pointer (RFC 6901) and JSON patch (RFC 6902: add, remove, replace, test).
function pointer(p) {
    if (p === '') return [];
    if (p[0] !== '/') die(`JSON pointer "${p}" does not start with /`);
    return p.slice(1).split('/').map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'));
}
function applyPatch(doc, ops, where) {
    if (!Array.isArray(ops)) die(`${where}: only JSON 6902 patches (a list of operations) are supported`);
    for (const op of ops) {
        const parts = pointer(op.path);
        const last = parts.pop();
        let parent = doc;
        for (const s of parts) {
            if (parent === null || typeof parent !== 'object' || !(s in parent)) die(`${where}: path ${op.path} does not exist`);
            parent = parent[s];
        }
        const isArr = Array.isArray(parent);
        const idx = isArr ? (last === '-' ? parent.length : Number(last)) : last;
        if (isArr && !(Number.isInteger(idx) && idx >= 0 && idx <= parent.length)) die(`${where}: bad index in ${op.path}`);
        const exists = isArr ? idx < parent.length : Object.prototype.hasOwnProperty.call(parent, idx);
        switch (op.op) {
        case 'add':
            if (isArr) parent.splice(idx, 0, op.value); else parent[idx] = op.value;
            break;
        case 'remove':
        case 'replace':
            if (!exists) die(`${where}: ${op.op} ${op.path}: no such field`);
            if (op.op === 'remove') { if (isArr) parent.splice(idx, 1); else delete parent[idx]; } else parent[idx] = op.value;
            break;
        case 'test':
            if (JSON.stringify(parent[idx]) !== JSON.stringify(op.value)) die(`${where}: test ${op.path} failed`);
            break;
        default: die(`${where}: op "${op.op}" is not supported`);
        }
    }
}

function splitImage(image) {
    let digest = '';
    let rest = image;
    const at = rest.indexOf('@');
    if (at >= 0) { digest = rest.slice(at + 1); rest = rest.slice(0, at); }
    const colon = rest.lastIndexOf(':');
    if (colon > rest.lastIndexOf('/')) return { name: rest.slice(0, colon), tag: rest.slice(colon + 1), digest };
    return { name: rest, tag: '', digest };
}

// Builds one kustomization (or component) `k` of directory `dir` on top of `acc`.
function build(k, dir, file, acc) {
    for (const r of k.resources || []) {
        const p = path.resolve(dir, r);
        if (fs.statSync(p).isDirectory()) acc.push(...renderDir(p));
        else acc.push(...readStream(p));
    }
    for (const c of k.components || []) {
        const cdir = path.resolve(dir, c);
        const ck = loadKustomization(cdir, 'Component');
        acc = build(ck.k, cdir, ck.file, acc);
    }
    const generated = [];
    for (const g of k.configMapGenerator || []) {
        const cm = generateConfigMap(g, dir, file);
        if (acc.some((o) => id(o) === id(cm))) die(`${file}: ConfigMap ${g.name} exists already`);
        generated.push(cm);
        acc.push(cm);
    }
    for (const p of k.patches || []) {
        const t = p.target || {};
        for (const key of Object.keys(p)) if (!['target', 'patch'].includes(key)) die(`${file}: patches "${key}" is not supported`);
        for (const key of Object.keys(t)) if (!['kind', 'name'].includes(key)) die(`${file}: patch target "${key}" is not supported`);
        const hits = acc.filter((o) => (!t.kind || o.kind === t.kind) && (!t.name || o.metadata.name === t.name));
        if (!hits.length) die(`${file}: patch target ${t.kind}/${t.name} matches nothing`);
        const ops = YAML.parse(p.patch);
        for (const o of hits) applyPatch(o, ops, `${file}: patch of ${id(o)}`);
    }
    for (const im of k.images || []) {
        for (const key of Object.keys(im)) if (!['name', 'newName', 'newTag', 'digest'].includes(key)) die(`${file}: images "${key}" is not supported`);
        for (const o of acc)
            for (const ps of podSpecs(o))
                for (const c of containersOf(ps)) {
                    const cur = splitImage(c.image || '');
                    if (cur.name !== im.name) continue;
                    const name = im.newName || cur.name;
                    if (im.digest) c.image = `${name}@${im.digest}`;
                    else {
                        const tag = im.newTag !== undefined ? String(im.newTag) : cur.tag;
                        c.image = name + (tag ? `:${tag}` : '') + (!im.newTag && cur.digest ? `@${cur.digest}` : '');
                    }
                }
    }
    for (const r of k.replicas || []) {
        const hits = acc.filter((o) => ['Deployment', 'StatefulSet', 'ReplicaSet', 'ReplicationController'].includes(o.kind) &&
            o.metadata.name === r.name);
        if (!hits.length) die(`${file}: replicas: no workload named ${r.name}`);
        for (const o of hits) o.spec.replicas = r.count;
    }
    // generated names get their content hash; references to them follow
    for (const cm of generated) {
        const old = cm.metadata.name;
        const neu = `${old}-${configMapHash(cm)}`;
        cm.metadata.name = neu;
        for (const o of acc)
            for (const ps of podSpecs(o)) {
                for (const v of ps.volumes || []) {
                    if (v.configMap && v.configMap.name === old) v.configMap.name = neu;
                    for (const s of (v.projected || {}).sources || []) if (s.configMap && s.configMap.name === old) s.configMap.name = neu;
                }
                for (const c of containersOf(ps)) {
                    for (const e of c.envFrom || []) if (e.configMapRef && e.configMapRef.name === old) e.configMapRef.name = neu;
                    for (const e of c.env || [])
                        if (e.valueFrom && e.valueFrom.configMapKeyRef && e.valueFrom.configMapKeyRef.name === old)
                            e.valueFrom.configMapKeyRef.name = neu;
                }
            }
    }
    return acc;
}

function renderDir(dir) {
    const { k, file } = loadKustomization(dir, 'Kustomization');
    return build(k, dir, file, []);
}

// ---------------------------------------------------------------- compare
function canon(v) {
    if (Array.isArray(v)) return v.map(canon);
    if (v && typeof v === 'object') {
        const o = {};
        for (const k of Object.keys(v).sort()) o[k] = canon(v[k]);
        return o;
    }
    return v;
}
function same(a, b) {
    const key = (o) => `${o.apiVersion} ${id(o)}`;
    const ma = new Map(a.map((o) => [key(o), JSON.stringify(canon(o))]));
    const mb = new Map(b.map((o) => [key(o), JSON.stringify(canon(o))]));
    const diffs = [];
    for (const [k, v] of ma) {
        if (!mb.has(k)) diffs.push(`only in the first: ${k}`);
        else if (mb.get(k) !== v) diffs.push(`differs: ${k}\n  ${v}\n  ${mb.get(k)}`);
    }
    for (const k of mb.keys()) if (!ma.has(k)) diffs.push(`only in the second: ${k}`);
    return diffs;
}

// ---------------------------------------------------------------- validate
// The schema validator of apiVersion/kind from kubernetes-models (null if unknown).
function schemaFor(apiVersion, kind) {
    if (typeof apiVersion !== 'string' || typeof kind !== 'string' || !/^[A-Za-z0-9.\/-]+$/.test(apiVersion + kind)) return null;
    const dir = apiVersion; // "apps/v1" -> kubernetes-models/apps/v1, "v1" -> kubernetes-models/v1
    const file = path.join(NM, 'kubernetes-models', dir, `${kind}.js`);
    if (!fs.existsSync(file)) return null;
    const mod = require(file);
    const name = Object.keys(mod).find((k) => k.startsWith('IoK8s'));
    if (!name || mod[kind].apiVersion !== apiVersion || mod[kind].kind !== kind) return null;
    return require(path.join(NM, 'kubernetes-models', '_schemas', `${name}.js`)).validate;
}

// Runs validate over a Proxy of obj that records which fields the (ajv-compiled)
// validator looks at: a field of an object it visited that it never looked at
// is not in the schema. Objects it enumerates (maps: labels, data, limits) and
// objects it never entered (free-form fields) are not judged.
function validateStrict(validate, obj) {
    const recs = [];
    const wrap = (o, where) => {
        const rec = { o, where, keys: new Set(), all: false };
        recs.push(rec);
        const cache = new Map();
        return new Proxy(o, {
            get(t, k, r) {
                const v = Reflect.get(t, k, r);
                if (typeof k !== 'string') return v;
                rec.keys.add(k);
                if (v !== null && typeof v === 'object' && Object.prototype.hasOwnProperty.call(t, k)) {
                    if (!cache.has(k)) cache.set(k, wrap(v, `${where}/${k}`));
                    return cache.get(k);
                }
                return v;
            },
            has(t, k) { if (typeof k === 'string') rec.keys.add(k); return Reflect.has(t, k); },
            ownKeys(t) { rec.all = true; return Reflect.ownKeys(t); },
        });
    };
    const ok = validate(wrap(obj, ''));
    const errors = ok ? [] : (validate.errors || []).map((e) => `${e.instancePath || '/'}: ${e.message || e.keyword} ${JSON.stringify(e.params)}`);
    for (const r of recs) {
        if (Array.isArray(r.o) || r.all) continue;
        for (const k of Object.keys(r.o)) if (!r.keys.has(k)) errors.push(`${r.where}/${k}: unknown field "${k}"`);
    }
    return errors;
}

function validateDocs(docs) {
    const out = [];
    let bad = 0;
    for (const d of docs) {
        const v = schemaFor(d.apiVersion, d.kind);
        if (!v) {
            out.push(`FAIL ${id(d)}: apiVersion ${d.apiVersion} kind ${d.kind} is not a Kubernetes type`);
            bad++;
            continue;
        }
        const errs = validateStrict(v, d);
        if (!d.metadata || !d.metadata.name) errs.push('/metadata/name: required');
        else if (!/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/.test(d.metadata.name) || d.metadata.name.length > 253)
            errs.push(`/metadata/name: "${d.metadata.name}" is not a DNS subdomain`);
        if (errs.length) { bad++; out.push(`FAIL ${id(d)}:\n  ${errs.join('\n  ')}`); } else out.push(`ok ${d.apiVersion} ${id(d)}`);
    }
    return { out, bad };
}

// ---------------------------------------------------------------- psc rules
// check(): the rules that keep the manifests and the entrypoint in step:
//  - every StatefulSet has its headless Service (same name as serviceName,
//    clusterIP None, a selector that picks its pods) with the grpc port 2222;
//  - every container runs ENTRYPOINT (the path the Dockerfile installs);
//  - the replicas of the ps and worker StatefulSets equal PSC_NUM_PS and
//    PSC_NUM_WORKERS of the ConfigMap their pods read (chief/evaluator: 1 when
//    PSC_CHIEF/PSC_EVALUATOR is 1), and no other StatefulSet exists;
//  - readiness probes: gRPC on 2222, service psc.ParameterServer (ps) or
//    psc.Worker; liveness probes: gRPC on 2222;
//  - the ps pods keep --checkpoint_dir on a volumeClaimTemplate's mount;
//  - every ConfigMap and volume referenced exists; the test-only variables
//    (PSC_ADDR_OVERRIDES, PSC_HOSTNAME, PSC_BIN_DIR) are never set.
function check(docs, entrypoint) {
    const errs = [];
    const byKind = (k) => docs.filter((d) => d.kind === k);
    const cms = new Map(byKind('ConfigMap').map((c) => [c.metadata.name, c]));
    const sets = byKind('StatefulSet');
    const env = (c) => {
        const e = {};
        for (const f of c.envFrom || []) {
            if (!f.configMapRef) continue;
            const cm = cms.get(f.configMapRef.name);
            if (!cm) { errs.push(`envFrom: no ConfigMap ${f.configMapRef.name}`); continue; }
            Object.assign(e, cm.data);
        }
        for (const v of c.env || []) e[v.name] = v.value !== undefined ? v.value : '(valueFrom)';
        return e;
    };
    let shape = null;
    for (const s of sets) {
        const where = `StatefulSet ${s.metadata.name}`;
        const ps = s.spec.template.spec;
        const labels = s.spec.template.metadata.labels || {};
        const svc = byKind('Service').find((v) => v.metadata.name === s.spec.serviceName);
        if (s.spec.serviceName !== s.metadata.name) errs.push(`${where}: serviceName ${s.spec.serviceName} must be its own name (the entrypoint makes <set>-<i>.<set>)`);
        if (!svc) errs.push(`${where}: no Service ${s.spec.serviceName}`);
        else {
            if (svc.spec.clusterIP !== 'None') errs.push(`Service ${svc.metadata.name}: not headless (clusterIP: None)`);
            const sel = svc.spec.selector || {};
            if (!Object.keys(sel).length || Object.entries(sel).some(([k, v]) => labels[k] !== v))
                errs.push(`Service ${svc.metadata.name}: selector does not pick ${where}'s pods`);
            if (!(svc.spec.ports || []).some((p) => p.port === 2222)) errs.push(`Service ${svc.metadata.name}: no port 2222`);
        }
        const ml = (s.spec.selector || {}).matchLabels || {};
        if (Object.entries(ml).some(([k, v]) => labels[k] !== v)) errs.push(`${where}: selector does not match its template's labels`);
        if (ps.containers.length !== 1) errs.push(`${where}: one container expected`);
        const c = ps.containers[0];
        if (JSON.stringify(c.command) !== JSON.stringify([entrypoint])) errs.push(`${where}: command must be ["${entrypoint}"], is ${JSON.stringify(c.command)}`);
        const e = env(c);
        for (const v of ['PSC_ADDR_OVERRIDES', 'PSC_HOSTNAME', 'PSC_BIN_DIR'])
            if (v in e) errs.push(`${where}: sets ${v}, which is for tests only`);
        const sh = {
            ps: e.PSC_PS_NAME || 'ps', worker: e.PSC_WORKER_NAME || 'worker', chief: e.PSC_CHIEF_NAME || 'chief',
            evaluator: e.PSC_EVALUATOR_NAME || 'evaluator', nps: e.PSC_NUM_PS, nworkers: e.PSC_NUM_WORKERS,
            chiefOn: e.PSC_CHIEF || '0', evalOn: e.PSC_EVALUATOR || '0',
        };
        if (shape && JSON.stringify(shape) !== JSON.stringify(sh)) errs.push(`${where}: its pods see another cluster shape than the others' (${JSON.stringify(sh)})`);
        shape = shape || sh;
        const type = s.metadata.name === sh.ps ? 'ps' : s.metadata.name === sh.worker ? 'worker'
            : s.metadata.name === sh.chief && sh.chiefOn === '1' ? 'chief' : s.metadata.name === sh.evaluator && sh.evalOn === '1' ? 'evaluator' : null;
        const want = { ps: sh.nps, worker: sh.nworkers, chief: '1', evaluator: '1' }[type];
        if (!type) errs.push(`${where}: not a StatefulSet the entrypoint knows (${sh.ps}, ${sh.worker}; PSC_CHIEF, PSC_EVALUATOR)`);
        else if (String(s.spec.replicas) !== String(want))
            errs.push(`${where}: replicas ${s.spec.replicas} but its pods are told ${want} (${type === 'ps' ? 'PSC_NUM_PS' : type === 'worker' ? 'PSC_NUM_WORKERS' : 'one pod'}): change both in deploy/k8s/kustomization.yaml`);
        const rp = c.readinessProbe, lp = c.livenessProbe;
        const rsvc = type === 'ps' ? 'psc.ParameterServer' : 'psc.Worker';
        if (!rp || !rp.grpc || rp.grpc.port !== 2222 || rp.grpc.service !== rsvc) errs.push(`${where}: readinessProbe must be grpc on 2222, service ${rsvc}`);
        if (!lp || !lp.grpc || lp.grpc.port !== 2222) errs.push(`${where}: livenessProbe must be grpc on 2222`);
        const vols = new Set([...(ps.volumes || []).map((v) => v.name), ...(s.spec.volumeClaimTemplates || []).map((v) => v.metadata.name)]);
        for (const m of c.volumeMounts || []) if (!vols.has(m.name)) errs.push(`${where}: volumeMount ${m.name} has no volume`);
        for (const v of ps.volumes || []) if (v.configMap && !cms.has(v.configMap.name)) errs.push(`${where}: volume ${v.name}: no ConfigMap ${v.configMap.name}`);
        if (type === 'ps') {
            const args = c.args || [];
            const i = args.indexOf('--checkpoint_dir');
            const claims = (s.spec.volumeClaimTemplates || []).map((v) => v.metadata.name);
            const onClaim = i >= 0 && (c.volumeMounts || []).some((m) => claims.includes(m.name) &&
                (args[i + 1] === m.mountPath || args[i + 1].startsWith(m.mountPath.replace(/\/$/, '') + '/')));
            if (!onClaim) errs.push(`${where}: --checkpoint_dir must be on a volumeClaimTemplate's mount (a PVC per PS)`);
        }
    }
    return errs;
}

// ---------------------------------------------------------------- pods
function freePorts(n) {
    return new Promise((resolve, reject) => {
        const servers = [];
        const ports = [];
        const next = () => {
            if (ports.length === n) { servers.forEach((s) => s.close()); resolve(ports); return; }
            const s = net.createServer();
            s.on('error', reject);
            s.listen(0, '127.0.0.1', () => { servers.push(s); ports.push(s.address().port); next(); });
        };
        next();
    });
}

// pods(): for every pod of every StatefulSet (ordinal < replicas), OUTDIR/POD/
// gets argv and env (NUL-separated) and info, to run the pod's one container
// on 127.0.0.1 as the manifests say, with only these substitutions:
//  - the command's path is mapped (--map /opt/psc/bin/entrypoint.sh=SRC/...);
//  - each volume is a directory: a configMap volume holds the ConfigMap's keys
//    as files (--file KEY=PATH replaces one key's content: the tests train a
//    smaller job), an emptyDir is empty, a volumeClaimTemplate is
//    OUTDIR/pvc/CLAIM-POD; an arg that starts with a mountPath is rewritten
//    to the directory;
//  - every pod has its own IP in a cluster, here they share 127.0.0.1: each
//    containerPort gets a free port; an arg equal to a containerPort's number
//    becomes that port, and the gRPC port (2222) of every pod is given to the
//    entrypoint as PSC_ADDR_OVERRIDES (OUTDIR/overrides) instead of its DNS name;
//  - env: env (value, fieldRef metadata.name/namespace) and envFrom
//    (ConfigMaps), plus HOSTNAME=POD as in a pod.
// OUTDIR/pods lists the pods; POD/info has "grpc ADDR", "readiness SERVICE",
// "liveness SERVICE" and "port CONTAINERPORT HOSTPORT" lines.
async function pods(docs, outdir, maps, files) {
    const cms = new Map(docs.filter((d) => d.kind === 'ConfigMap').map((c) => [c.metadata.name, c]));
    const list = [];
    for (const s of docs.filter((d) => d.kind === 'StatefulSet'))
        for (let i = 0; i < (s.spec.replicas === undefined ? 1 : s.spec.replicas); i++) list.push({ s, name: `${s.metadata.name}-${i}` });
    const nports = list.reduce((n, p) => n + (p.s.spec.template.spec.containers[0].ports || []).length, 0);
    const free = await freePorts(nports);
    const overrides = [];
    for (const p of list) {
        const c = p.s.spec.template.spec.containers[0];
        p.ports = (c.ports || []).map((q) => ({ container: q.containerPort, host: free.pop() }));
        const g = p.ports.find((q) => q.container === 2222);
        if (!g) die(`${p.name}: no containerPort 2222`);
        p.grpc = `127.0.0.1:${g.host}`;
        overrides.push(`${p.name}=${p.grpc}`);
    }
    fs.mkdirSync(outdir, { recursive: true });
    for (const p of list) {
        const ps = p.s.spec.template.spec;
        const c = ps.containers[0];
        const dir = path.join(outdir, p.name);
        fs.mkdirSync(dir, { recursive: true });
        // volumes
        const mounts = [];
        for (const m of c.volumeMounts || []) {
            const v = (ps.volumes || []).find((x) => x.name === m.name);
            const claim = (p.s.spec.volumeClaimTemplates || []).find((x) => x.metadata.name === m.name);
            let vdir;
            if (claim) vdir = path.join(outdir, 'pvc', `${m.name}-${p.name}`);
            else if (v && (v.emptyDir || v.configMap)) vdir = path.join(dir, 'vol', m.name);
            else die(`${p.name}: volume ${m.name}: only configMap, emptyDir and volumeClaimTemplates are supported`);
            fs.mkdirSync(vdir, { recursive: true });
            if (v && v.configMap) {
                const cm = cms.get(v.configMap.name);
                if (!cm) die(`${p.name}: no ConfigMap ${v.configMap.name}`);
                if (v.configMap.items) die(`${p.name}: configMap items are not supported`);
                for (const [k, val] of Object.entries(cm.data || {}))
                    fs.writeFileSync(path.join(vdir, k), k in files ? fs.readFileSync(files[k]) : val);
            }
            mounts.push({ at: m.mountPath.replace(/\/$/, ''), dir: vdir });
        }
        mounts.sort((a, b) => b.at.length - a.at.length);
        const mapArg = (a) => {
            const q = p.ports.find((x) => String(x.container) === a && x.container !== 2222);
            if (q) return String(q.host);
            for (const m of mounts) if (a === m.at || a.startsWith(m.at + '/')) return m.dir + a.slice(m.at.length);
            return a;
        };
        const cmd = (c.command || []).map((a, i) => (i === 0 && a in maps ? maps[a] : a));
        if (!cmd.length) die(`${p.name}: no command (the image's entrypoint is not known here)`);
        if (!fs.existsSync(cmd[0])) die(`${p.name}: command ${cmd[0]} is not on this machine (--map it)`);
        const argv = [...cmd, ...(c.args || []).map(String).map(mapArg)];
        // env
        const env = {};
        for (const f of c.envFrom || []) {
            if (!f.configMapRef) die(`${p.name}: only configMapRef envFrom is supported`);
            const cm = cms.get(f.configMapRef.name);
            if (!cm) die(`${p.name}: no ConfigMap ${f.configMapRef.name}`);
            Object.assign(env, cm.data);
        }
        for (const e of c.env || []) {
            if (e.value !== undefined) env[e.name] = String(e.value);
            else if (e.valueFrom && e.valueFrom.fieldRef && e.valueFrom.fieldRef.fieldPath === 'metadata.name') env[e.name] = p.name;
            else if (e.valueFrom && e.valueFrom.fieldRef && e.valueFrom.fieldRef.fieldPath === 'metadata.namespace') env[e.name] = 'default';
            else die(`${p.name}: env ${e.name}: only value and fieldRef metadata.name/namespace are supported`);
        }
        env.HOSTNAME = p.name;
        fs.writeFileSync(path.join(dir, 'argv'), argv.map((a) => a + '\0').join(''));
        fs.writeFileSync(path.join(dir, 'env'), Object.entries(env).map(([k, v]) => `${k}=${v}\0`).join(''));
        const info = [`grpc ${p.grpc}`];
        if (c.readinessProbe && c.readinessProbe.grpc) info.push(`readiness ${c.readinessProbe.grpc.service || ''}`);
        if (c.livenessProbe && c.livenessProbe.grpc) info.push(`liveness ${c.livenessProbe.grpc.service || ''}`);
        for (const q of p.ports) info.push(`port ${q.container} ${q.host}`);
        fs.writeFileSync(path.join(dir, 'info'), info.join('\n') + '\n');
    }
    fs.writeFileSync(path.join(outdir, 'pods'), list.map((p) => p.name).join('\n') + '\n');
    fs.writeFileSync(path.join(outdir, 'overrides'), overrides.join(' ') + '\n');
}

// ---------------------------------------------------------------- main
async function main(argv) {
    const [cmd, ...a] = argv;
    switch (cmd) {
    case 'render':
        if (a.length !== 1) die('usage: render DIR');
        process.stdout.write(dumpStream(renderDir(path.resolve(a[0]))));
        return 0;
    case 'same': {
        if (a.length !== 2) die('usage: same A B');
        const d = same(readStream(a[0]), readStream(a[1]));
        if (d.length) { console.error(d.join('\n')); return 1; }
        return 0;
    }
    case 'validate': {
        if (a.length < 1) die('usage: validate FILE...');
        let bad = 0;
        for (const f of a) {
            const docs = readStream(f);
            if (!docs.length) die(`${f}: no documents`);
            const r = validateDocs(docs);
            console.log(r.out.map((l) => `${f}: ${l}`).join('\n'));
            bad += r.bad;
        }
        return bad ? 1 : 0;
    }
    case 'verify': {
        // render DIR to OUT, compare with kubectl's rendering if given, validate, check
        if (a.length !== 3 && a.length !== 4) die('usage: verify DIR OUT ENTRYPOINT [KUBECTL_RENDERING]');
        const mine = renderDir(path.resolve(a[0]));
        let docs = mine;
        if (a[3]) {
            docs = readStream(a[3]);
            const d = same(mine, docs);
            if (d.length) { console.error(`${a[0]}: k8s.js and kubectl kustomize render differently:\n${d.join('\n')}`); return 1; }
        }
        fs.writeFileSync(a[1], dumpStream(docs));
        const { out, bad } = validateDocs(docs);
        const errs = check(docs, a[2]);
        if (bad || errs.length) {
            console.error([...out.filter((l) => !l.startsWith('ok ')), ...errs.map((e) => `FAIL ${e}`)].join('\n'));
            return 1;
        }
        console.log(`${a[0]}: ${docs.length} objects valid${a[3] ? ', as kubectl kustomize renders them' : ''}`);
        return 0;
    }
    case 'refuse': {
        // every case (a line "validate|check<TAB>WHAT<TAB>KIND/NAME<TAB>OPS") applied
        // alone to FILE must be refused with a message that contains WHAT
        if (a.length !== 3) die('usage: refuse FILE ENTRYPOINT CASES');
        const base = readStream(a[0]);
        let bad = 0, n = 0;
        for (const line of fs.readFileSync(a[2], 'utf8').split('\n')) {
            if (!line.trim() || line.startsWith('#')) continue;
            const [mode, what, target, ops] = line.split('\t');
            const docs = JSON.parse(JSON.stringify(base));
            const hit = docs.filter((d) => id(d) === target);
            if (hit.length !== 1) die(`refuse: ${target} not found`);
            applyPatch(hit[0], JSON.parse(ops), `refuse ${what}`);
            const msgs = mode === 'validate' ? validateDocs(docs).out.filter((l) => !l.startsWith('ok ')) : check(docs, a[1]);
            n++;
            if (!msgs.length) { bad++; console.error(`NOT REFUSED (${mode}): ${what}`); }
            else if (!msgs.join('\n').includes(what)) { bad++; console.error(`REFUSED WITHOUT NAMING "${what}":\n${msgs.join('\n')}`); }
            else console.log(`refused (${mode}): ${what}`);
        }
        if (!n) die('refuse: no cases');
        return bad ? 1 : 0;
    }
    case 'check': {
        if (a.length !== 2) die('usage: check FILE ENTRYPOINT');
        const errs = check(readStream(a[0]), a[1]);
        if (errs.length) { console.error(errs.map((e) => `FAIL ${e}`).join('\n')); return 1; }
        return 0;
    }
    case 'patch': {
        if (a.length !== 3) die('usage: patch FILE KIND/NAME OPS_JSON');
        const docs = readStream(a[0]);
        const hit = docs.filter((d) => id(d) === a[1]);
        if (hit.length !== 1) die(`patch: ${a[1]} not found`);
        applyPatch(hit[0], JSON.parse(a[2]), `patch of ${a[1]}`);
        process.stdout.write(dumpStream(docs));
        return 0;
    }
    case 'pods': {
        if (a.length < 2) die('usage: pods FILE OUTDIR [--map FROM=TO]... [--file KEY=PATH]...');
        const maps = {}, files = {};
        for (let i = 2; i < a.length; i += 2) {
            const [k, v] = [a[i + 1].slice(0, a[i + 1].indexOf('=')), a[i + 1].slice(a[i + 1].indexOf('=') + 1)];
            if (a[i] === '--map') maps[k] = v; else if (a[i] === '--file') files[k] = v; else die(`pods: unknown option ${a[i]}`);
        }
        await pods(readStream(a[0]), a[1], maps, files);
        return 0;
    }
    default:
        die('usage: k8s.js render|same|validate|check|verify|refuse|patch|pods ... (see the top of tests/k8s/k8s.js)');
    }
}

main(process.argv.slice(2)).then((rc) => process.exit(rc), (e) => {
    console.error(e instanceof UserError ? `k8s.js: ${e.message}` : e.stack);
    process.exit(e instanceof UserError ? 1 : 2);
});
