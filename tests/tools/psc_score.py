#!/usr/bin/env python3
"""psc_score.py — test tool: an independent scorer of psc's models, to check
`psctl predict` / `worker --predict` (tests/integration/test_predict.sh).

It reads the model from a safetensors file as `psctl export` writes it, the
job spec (JSON) and the input file itself, with python3 and numpy only (no
psc code), recomputes every example's probabilities in float64, and compares
them with the predictions file: the same number of lines in the same order
(index 0, 1, ...), the same labels, every probability within the tolerance,
and (softmax models) the same class unless the two best probabilities are
within the tolerance of each other.

  psc_score.py MODEL.safetensors JOB.json INPUT PREDICTIONS [--tol 1e-5]

INPUT: an IDX prefix (PREFIX-images-idx3-ubyte[.gz] + PREFIX-labels-idx1-ubyte[.gz])
for a softmax model of flatten / dense / dropout layers; a Criteo TSV file
(plain or gzip) for a recommendation model of dense, embedding, wide,
interaction and concat layers whose tables the file holds whole ([rows, dim]).
What it implements, from docs/recommendation.md and docs/job-spec.md:
Keras layer names; Criteo's fields (I: log(1 + max(x, 0)), empty 0; C: the hex
value, empty: no id); ids = splitmix64 finalizer(key ^ FNV-1a-64(feature
name)) mod rows; sum / mean / sqrtn bags; DLRM's interaction (pairs (a, b),
a < b, row by row, after the bottom output); wide rows summed into the logit.
Exit: 0 all agree, 1 with the first disagreement named, 2 bad usage or input.
"""
import gzip
import json
import os
import struct
import sys

import numpy as np

M64 = (1 << 64) - 1


def die(code, msg):
    print("psc_score: " + msg, file=sys.stderr)
    sys.exit(code)


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (hlen,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + hlen].decode("utf-8"))
    base = 8 + hlen
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        dt = {"F32": "<f4", "I64": "<i8"}[t["dtype"]]
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(blob[base + a:base + b], dtype=dt).reshape(t["shape"])
    return out


def open_maybe_gz(path):
    with open(path, "rb") as f:
        magic = f.read(2)
    return gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")


def first_existing(name):
    return name + ".gz" if os.path.exists(name + ".gz") else name


def layer_names(layers):
    """Keras names: the type, then type_1, type_2, ... per type."""
    count, names = {}, []
    for L in layers:
        k = count.get(L["type"], 0)
        count[L["type"]] = k + 1
        names.append(L.get("name") or (L["type"] if k == 0 else "%s_%d" % (L["type"], k)))
    return names


def act(x, a):
    a = a or "linear"
    if a == "relu":
        return np.maximum(x, 0)
    if a == "tanh":
        return np.tanh(x)
    if a == "sigmoid":
        return 1 / (1 + np.exp(-x))
    if a in ("linear", "none"):
        return x
    die(2, "activation %s" % a)


def dense_layer(st, name, L, x):
    y = x @ st[name + "/kernel"].astype(np.float64)
    if L.get("use_bias", True):
        y = y + st[name + "/bias"].astype(np.float64)
    return act(y, L.get("activation"))


# ---- softmax models on IDX files ----

def read_idx(prefix):
    with open_maybe_gz(first_existing(prefix + "-images-idx3-ubyte")) as f:
        magic, n, rows, cols = struct.unpack(">IIII", f.read(16))
        if magic != 0x803:
            die(2, "%s: not an IDX3 file" % prefix)
        x = np.frombuffer(f.read(n * rows * cols), dtype=np.uint8).reshape(n, rows * cols)
    with open_maybe_gz(first_existing(prefix + "-labels-idx1-ubyte")) as f:
        magic, nl = struct.unpack(">II", f.read(8))
        y = np.frombuffer(f.read(nl), dtype=np.uint8)
    # psc scales in float32: pixel * (1 / 255)
    return (x.astype(np.float32) * np.float32(1.0 / 255.0)).astype(np.float64), y.astype(np.float64)


def score_softmax(st, spec, inp):
    x, labels = read_idx(inp)
    layers = spec["model"]["layers"]
    for L, name in zip(layers, layer_names(layers)):
        if L["type"] == "flatten" or L["type"] == "dropout":
            continue
        if L["type"] != "dense":
            die(2, "layer %s: this scorer runs flatten, dense and dropout" % L["type"])
        x = dense_layer(st, name, L, x)
    z = x - x.max(axis=1, keepdims=True)
    e = np.exp(z)
    return labels, e / e.sum(axis=1, keepdims=True)


# ---- recommendation models on Criteo files ----

def fnv1a64(s):
    h = 0xCBF29CE484222325
    for c in s.encode():
        h = ((h ^ c) * 0x100000001B3) & M64
    return h


def id_hash(keys, name_hash, rows):
    x = (keys ^ np.uint64(name_hash)).astype(np.uint64)
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return (x % np.uint64(rows)).astype(np.int64)


def read_criteo(path):
    labels, dense, cats = [], [], []
    with open_maybe_gz(path) as f:
        for line in f:
            v = line.rstrip(b"\r\n").split(b"\t")
            if len(v) != 40:
                die(2, "%s: a line of %d fields" % (path, len(v)))
            labels.append(float(v[0]))
            dense.append([np.log1p(max(int(s), 0)) if s else 0.0 for s in v[1:14]])
            cats.append([int(s, 16) if s else -1 for s in v[14:40]])
    return np.array(labels), np.array(dense, dtype=np.float64), np.array(cats, dtype=np.int64)


def pooled(st, spec, L, cats):
    """The layer's slots: one (n, dim) pooled row each (a Criteo bag holds one key of weight 1, or none)."""
    table = next(t for t in spec["tables"] if t["name"] == L["table"])
    rows = st[L["table"]].astype(np.float64)
    if rows.shape[0] != table["rows"]:
        die(2, "table %s: the file holds %d of its %d rows" % (L["table"], rows.shape[0], table["rows"]))
    feats = L["features"] if isinstance(L["features"], list) else [L["features"]]
    out = []
    for name in feats:
        k = cats[:, int(name[1:]) - 1]
        have = k >= 0
        if L.get("hash_ids", True):
            ids = id_hash(np.where(have, k, 0).astype(np.uint64), fnv1a64(name), table["rows"])
        else:
            ids = np.where(have, k, 0)
        # one value of weight 1: sum, mean (1 / 1) and sqrtn (1 / sqrt(1)) pool alike
        out.append(np.where(have[:, None], rows[ids], 0.0))
    return out


def score_sigmoid(st, spec, inp):
    labels, dense, cats = read_criteo(inp)
    layers = spec["model"]["layers"]
    names = layer_names(layers)
    join = next((i for i, L in enumerate(layers) if L["type"] in ("interaction", "concat")), None)
    slots, wide = [], np.zeros(len(labels))
    for L in layers:
        if L["type"] == "embedding":
            slots += pooled(st, spec, L, cats)
        elif L["type"] == "wide":
            wide += sum(p[:, 0] for p in pooled(st, spec, L, cats))
    x = dense
    for i, (L, name) in enumerate(zip(layers, names)):
        if L["type"] == "dense" and join is not None and i < join:
            x = dense_layer(st, name, L, x)  # the bottom MLP
    if join is not None:
        if layers[join]["type"] == "concat":
            x = np.concatenate([x] + slots, axis=1)
        else:
            v = np.stack(([x] if dense.shape[1] else []) + slots, axis=1)  # (n, P, D)
            P = v.shape[1]
            dots = [np.sum(v[:, a] * v[:, b], axis=1) for a in range(P) for b in range(a + 1, P)]
            x = np.concatenate(([x] if dense.shape[1] else []) + [np.stack(dots, axis=1)], axis=1)
    for i, (L, name) in enumerate(zip(layers, names)):
        if L["type"] == "dense" and (join is None or i > join):
            x = dense_layer(st, name, L, x)  # the top MLP
    logit = x[:, 0] + wide
    return labels, (1 / (1 + np.exp(-logit)))[:, None]


def compare(pred_path, labels, probs, sigmoid, tol):
    with open(pred_path) as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    C = probs.shape[1]
    want = "index\tlabel\tprobability" if sigmoid else "index\tlabel\tclass\t" + "\t".join("p%d" % c for c in range(C))
    if not lines or lines[0] != want:
        die(1, "%s: header %r, expected %r" % (pred_path, lines[0] if lines else "", want))
    if len(lines) - 1 != len(labels):
        die(1, "%s: %d lines of predictions for %d examples" % (pred_path, len(lines) - 1, len(labels)))
    worst = 0.0
    for i, line in enumerate(lines[1:]):
        v = line.split("\t")
        got = np.array([float(s) for s in v[2 if sigmoid else 3:]])
        if int(v[0]) != i or float(v[1]) != labels[i] or len(got) != C:
            die(1, "line %d: %r: expected index %d, label %g and %d probabilities" % (i + 2, line, i, labels[i], C))
        d = float(np.max(np.abs(got - probs[i])))
        worst = max(worst, d)
        if d > tol:
            die(1, "line %d (example %d): %s, numpy: %s (difference %.3g > %g)" % (i + 2, i, v[2:], probs[i], d, tol))
        if not sigmoid:
            top = np.sort(probs[i])[::-1]
            if int(v[2]) != int(np.argmax(probs[i])) and top[0] - top[1] > tol:
                die(1, "line %d: class %s, numpy: %d" % (i + 2, v[2], int(np.argmax(probs[i]))))
    return worst


def main(argv):
    tol = 1e-5
    if "--tol" in argv:
        k = argv.index("--tol")
        tol = float(argv[k + 1])
        argv = argv[:k] + argv[k + 2:]
    if len(argv) != 5:
        die(2, "usage: psc_score.py MODEL.safetensors JOB.json INPUT PREDICTIONS [--tol 1e-5]")
    st = read_safetensors(argv[1])
    with open(argv[2]) as f:
        spec = json.load(f)
    sigmoid = spec["model"].get("loss") == "sigmoid_cross_entropy"
    fmt = spec.get("data", {}).get("format", "idx")
    if sigmoid and fmt != "criteo" or not sigmoid and fmt != "idx":
        die(2, "data.format %s: this scorer reads idx (softmax models) and criteo (sigmoid models)" % fmt)
    labels, probs = (score_sigmoid if sigmoid else score_softmax)(st, spec, argv[3])
    worst = compare(argv[4], labels, probs, sigmoid, tol)
    print("psc_score: %d examples agree (largest difference %.3g, tolerance %g)" % (len(labels), worst, tol))


if __name__ == "__main__":
    main(sys.argv)
