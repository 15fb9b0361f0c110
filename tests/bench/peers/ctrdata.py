"""ctrdata.py — what psc's worker and PS do to click logs before a CTR step,
redone in numpy, so the PyTorch CTR peer (ctr_model.py) trains on exactly
psc's inputs and starts from exactly psc's rows.

  - The Criteo reader (worker/data/format_criteo.c): 40 TAB-separated fields,
    label 0/1, I1..I13 decimal int64 (empty: 0), C1..C26 1 to 16 hex digits
    (empty: an empty bag); plain or gzip (the name does not matter). Dense
    feature Ik becomes logf(1 + max(x, 0)) in float32.
  - The files (worker/data/reader.c): each pattern of data.train / data.test
    globbed, all matches sorted by name and de-duplicated; with data.shuffle
    (default on) epoch e visits them in the order of a Fisher-Yates shuffle
    by psc_rng(psc_seed_mix(seed, e)); records within a file in order; batches
    span files, an epoch's last batch is short.
  - Embedding ids (common/table.h psc_feature_id_hash): key k of feature F is
    row splitmix64_finalizer(k ^ fnv1a64(F)) mod rows.
  - Initial rows (common/table.h psc_table_row_init): Philox-4x32-10 keyed by
    the job seed, counter (id low 32, id high 32, fnv1a32(table name), block);
    uniform(a, b) = float(a + (b - a) (u + 0.5) / 2^32) kept below b,
    normal by Box-Muller, zeros.
  - AUC and log loss (worker/job/ctr_eval.h): exact ROC AUC, tied scores
    sharing their average rank; log loss max(z, 0) - z y + log1p(exp(-|z|)),
    mean in double.
  - safetensors (psctl export's format), read back for ctr_check.py.

numpy only (no torch): cheap to import and to check. 64-bit arithmetic is
numpy uint64, which wraps modulo 2^64 as C's does.
"""
import glob
import gzip
import json
import math
import os
import struct

import numpy as np

import pscdata

NUM_DENSE = 13
NUM_CAT = 26
FIELDS = 1 + NUM_DENSE + NUM_CAT
U64 = np.uint64


# ---- hashes ----

def fnv1a64(name):
    """psc_fnv1a64 of a str (UTF-8 bytes)."""
    h = 0xCBF29CE484222325
    for b in name.encode():
        h = ((h ^ b) * 0x100000001B3) & pscdata.MASK64
    return h


def fnv1a32(name):
    """psc_table_hash: FNV-1a 32 of a table's name."""
    h = 2166136261
    for b in name.encode():
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return h


def feature_id_hash(keys, name, rows):
    """psc_feature_id_hash of uint64 keys (any shape) for feature `name` into
    `rows` rows: int64 row ids."""
    with np.errstate(over="ignore"):
        x = np.asarray(keys, dtype=U64) ^ U64(fnv1a64(name))
        x = x ^ (x >> U64(30))
        x = x * U64(0xBF58476D1CE4E5B9)
        x = x ^ (x >> U64(27))
        x = x * U64(0x94D049BB133111EB)
        x = x ^ (x >> U64(31))
    return (x % U64(rows)).astype(np.int64)


# ---- initial rows ----

def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """Philox-4x32-10 (common/rng.h) on arrays of counter words (uint32 values
    held in uint64 arrays) and a scalar key; returns the four output words."""
    m = U64(0xFFFFFFFF)
    c0, c1, c2, c3 = (np.asarray(c, dtype=U64) & m for c in (c0, c1, c2, c3))
    for r in range(10):
        if r:
            k0 = (k0 + 0x9E3779B9) & 0xFFFFFFFF
            k1 = (k1 + 0xBB67AE85) & 0xFFFFFFFF
        p0 = U64(0xD2511F53) * c0
        p1 = U64(0xCD9E8D57) * c2
        c0, c1, c2, c3 = ((p1 >> U64(32)) ^ c1 ^ U64(k0), p1 & m, (p0 >> U64(32)) ^ c3 ^ U64(k1), p0 & m)
    return c0, c1, c2, c3


def _unit_open(u):
    return (u.astype(np.float64) + 0.5) * (1.0 / 4294967296.0)


def table_row_init(init, seed, table, ids, dim, chunk=1 << 20):
    """psc_table_row_init for global row ids (int64 array): float32 (n, dim).
    init: the spec's "initializer" dict (default uniform -0.05, 0.05)."""
    init = init or {}
    kind = init.get("name", "uniform")
    ids = np.asarray(ids, dtype=np.int64)
    out = np.zeros((ids.shape[0], dim), dtype=np.float32)
    if kind == "zeros":
        return out
    if kind == "uniform":
        a, b = np.float32(init.get("minval", -0.05)), np.float32(init.get("maxval", 0.05))
    elif kind == "normal":
        a, b = np.float32(init.get("mean", 0.0)), np.float32(init.get("stddev", 0.05))
    else:
        raise ValueError("tables: initializer %s is not implemented by the peer" % kind)
    th = fnv1a32(table)
    k0, k1 = seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF
    below_b = np.nextafter(b, np.float32(-np.inf))
    for s in range(0, ids.shape[0], chunk):
        u64 = ids[s:s + chunk].astype(U64)
        lo, hi = u64 & U64(0xFFFFFFFF), u64 >> U64(32)
        for j in range((dim + 3) // 4):
            w = philox4x32_10(lo, hi, np.full_like(lo, th), np.full_like(lo, j), k0, k1)
            if kind == "uniform":
                for i in range(min(4, dim - 4 * j)):
                    v = (float(a) + (float(b) - float(a)) * _unit_open(w[i])).astype(np.float32)
                    out[s:s + chunk, 4 * j + i] = np.where(v < b, v, below_b)
                continue
            for k in range(2):
                e = 4 * j + 2 * k
                if e >= dim:
                    break
                rad = np.sqrt(-2.0 * np.log(_unit_open(w[2 * k])))
                th2 = 2.0 * math.pi * _unit_open(w[2 * k + 1])
                out[s:s + chunk, e] = (float(a) + float(b) * rad * np.cos(th2)).astype(np.float32)
                if e + 1 < dim:
                    out[s:s + chunk, e + 1] = (float(a) + float(b) * rad * np.sin(th2)).astype(np.float32)
    return out


# ---- the files ----

def expand(patterns):
    """data.train / data.test (a name, a glob or an array of them): the
    matching files sorted by name, de-duplicated, as psc lists them."""
    if isinstance(patterns, str):
        patterns = [patterns]
    names = set()
    for p in patterns:
        hits = glob.glob(p) if any(ch in p for ch in "*?[") else ([p] if os.path.exists(p) else [])
        if not hits:
            raise ValueError("no file matches %s" % p)
        names.update(hits)
    return sorted(names, key=lambda s: s.encode())


def file_order(n, seed, epoch, shuffle=True):
    """The order in which one replica holding all n files reads them in
    `epoch` (0-based): reader.c's start_epoch."""
    order = list(range(n))
    if shuffle:
        r = pscdata.PscRng(pscdata.seed_mix(seed, epoch))
        for i in range(n - 1, 0, -1):
            j = r.below(i + 1)
            order[i], order[j] = order[j], order[i]
    return order


# hex digit -> value + 1 (0: not a hex digit), as format_criteo.c's table
_HEX1 = np.zeros(256, dtype=np.uint64)
for _i, _c in enumerate(b"0123456789abcdef"):
    _HEX1[_c] = _i + 1
for _i, _c in enumerate(b"ABCDEF"):
    _HEX1[_c] = 10 + _i + 1


def _parse_block(path, lines, first_line):
    """One block of Criteo lines (bytes objects) -> (label, dense int64, keys, present)."""
    n = len(lines)
    fields = b"\t".join(lines).split(b"\t")
    if len(fields) != n * FIELDS:
        for k, line in enumerate(lines):
            if line.count(b"\t") != FIELDS - 1:
                raise ValueError("%s:%d: expected %d tab-separated fields, got %d"
                                 % (path, first_line + k, FIELDS, line.count(b"\t") + 1))
    label = np.array(fields[0::FIELDS], dtype="S1")
    if not np.isin(label, (b"0", b"1")).all():
        raise ValueError("%s: a label near line %d is not 0 or 1" % (path, first_line))
    dense = np.empty((n, NUM_DENSE), dtype=np.int64)
    for j in range(NUM_DENSE):
        col = np.array(fields[1 + j::FIELDS])
        col[col == b""] = b"0"
        dense[:, j] = col.astype(np.int64)
    keys = np.zeros((n, NUM_CAT), dtype=U64)
    present = np.empty((n, NUM_CAT), dtype=bool)
    for j in range(NUM_CAT):
        col = np.array(fields[1 + NUM_DENSE + j::FIELDS])
        if col.dtype.itemsize > 16:
            raise ValueError("%s: field %d (C%d) has more than 16 hex digits near line %d"
                             % (path, 2 + NUM_DENSE + j, j + 1, first_line))
        col = col.astype("S16")
        b = np.frombuffer(col.tobytes(), dtype=np.uint8).reshape(n, 16)
        d = _HEX1[b]
        used = b != 0
        if (used & (d == 0)).any():
            raise ValueError("%s: field %d (C%d) is not hexadecimal near line %d"
                             % (path, 2 + NUM_DENSE + j, j + 1, first_line))
        v = np.zeros(n, dtype=U64)
        for p in range(16):
            v = np.where(used[:, p], (v << U64(4)) | (d[:, p] - U64(1)), v)
        keys[:, j] = v
        present[:, j] = used[:, 0]
    return (label == b"1").astype(np.float32), dense, keys, present


def read_criteo(path, limit=0, block=65536):
    """A Criteo TSV file (plain or gzip): dict label float32 (n,), dense
    float32 (n, 13) (log1p applied as psc does), keys uint64 (n, 26),
    present bool (n, 26) (False: an empty bag). limit > 0: the first
    `limit` examples."""
    with open(path, "rb") as f:
        magic = f.read(2)
    opener = gzip.open if magic == b"\x1f\x8b" else open
    with opener(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    del data
    if lines and lines[-1] == b"":
        lines.pop()
    lines = [l[:-1] if l.endswith(b"\r") else l for l in lines]
    if limit > 0:
        lines = lines[:limit]
    parts = [_parse_block(path, lines[s:s + block], s + 1) for s in range(0, len(lines), block)]
    if not parts:
        raise ValueError("%s: no examples" % path)
    label, dense, keys, present = (np.concatenate(p) for p in zip(*parts))
    # logf(1.0f + (float)x) for x > 0, else 0 (format_criteo.c): the sum in
    # float32, the log in double rounded once (glibc's logf is within an ulp)
    xf = np.maximum(dense, 0).astype(np.float32)
    d = np.where(dense > 0, np.log((xf + np.float32(1.0)).astype(np.float64)).astype(np.float32), np.float32(0))
    return dict(label=label, dense=d.astype(np.float32), keys=keys, present=present)


def concat(parts):
    """Several read_criteo results as one, in order."""
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


# ---- AUC and log loss ----

def auc(scores, labels):
    """Exact ROC AUC (Mann-Whitney U), ties sharing their average rank;
    positive = label > 0.5; NaN with one class or a NaN score."""
    s = np.asarray(scores, dtype=np.float64)
    pos = np.asarray(labels) > 0.5
    P = int(pos.sum())
    N = s.shape[0] - P
    if P == 0 or N == 0 or np.isnan(s).any():
        return float("nan")
    s = s + 0.0  # -0 and +0 tie
    order = np.argsort(s, kind="mergesort")
    ss = s[order]
    # average rank of each run of equal scores (ranks 1..n)
    starts = np.flatnonzero(np.r_[True, ss[1:] != ss[:-1]])
    ends = np.r_[starts[1:], ss.shape[0]]
    avg = (starts + 1 + ends) / 2.0
    ranks = np.repeat(avg, ends - starts)
    rank_sum = float(ranks[pos[order]].sum())
    return (rank_sum - P * (P + 1) / 2.0) / (float(P) * float(N))


def auc_pairs(scores, labels):
    """The same by counting every (positive, negative) pair: O(P N), a check."""
    s = np.asarray(scores, dtype=np.float64)
    pos = np.asarray(labels) > 0.5
    sp, sn = s[pos], s[~pos]
    gt = (sp[:, None] > sn[None, :]).sum()
    eq = (sp[:, None] == sn[None, :]).sum()
    return (gt + 0.5 * eq) / (float(sp.size) * float(sn.size))


def log_loss(logits, labels):
    z = np.asarray(logits, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    return float(np.mean(np.maximum(z, 0.0) - z * y + np.log1p(np.exp(-np.abs(z)))))


# ---- safetensors ----

def read_safetensors(path):
    """{name: numpy array} of a safetensors file (F32, F64, I64, I32, U8)."""
    types = {"F32": "<f4", "F64": "<f8", "I64": "<i8", "I32": "<i4", "U8": "u1"}
    with open(path, "rb") as f:
        (hlen,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(hlen))
        body = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(body[a:b], dtype=types[t["dtype"]]).reshape(t["shape"])
    return out
