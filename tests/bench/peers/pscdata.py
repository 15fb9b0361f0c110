"""pscdata.py — what psc's worker does before a step, redone in Python so the
PyTorch peers train on exactly psc's data and start from exactly psc's weights.

  - psc_rng (common/rng.c): splitmix64 seeding xoshiro256**, psc_seed_mix,
    rejection-sampled psc_rng_below; Python ints masked to 64 bits.
  - The IDX reader (worker/data/format_idx.c): PREFIX-images-idx3-ubyte[.gz] and
    PREFIX-labels-idx1-ubyte[.gz], header checked, pixels as float32
    pixel * (1.0f / 255.0f), the first `limit` examples when limit > 0.
  - Sharding and shuffling (worker/data/dataset.c's loader): replica r of W takes
    examples r, r + W, ...; each epoch puts them back in that order and
    Fisher-Yates shuffles them with a psc_rng seeded by psc_seed_mix(seed,
    epoch); batches of batch_size, the epoch's last one short.
  - The initialization (worker/tower/tower.c): variable i of the model (global_step
    is 0) draws from psc_rng(psc_seed_mix(seed, i)); kernels glorot_uniform
    (a conv kernel (kh, kw, in, out) counts kh*kw in both fans), biases 0.

Everything here is numpy only (no torch), so it is cheap to import and check.
"""
import gzip
import math
import os
import struct

import numpy as np

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def _splitmix64(x):
    """One splitmix64 step: returns (new state, output)."""
    x = (x + GOLDEN) & MASK64
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return x, z ^ (z >> 31)


def seed_mix(a, b):
    """psc_seed_mix(a, b)."""
    x = (a ^ ((b * GOLDEN) & MASK64)) & MASK64
    return _splitmix64(x)[1]


class PscRng:
    """psc_rng_t: xoshiro256** seeded by four splitmix64 outputs."""

    def __init__(self, seed):
        x = seed & MASK64
        self.s = []
        for _ in range(4):
            x, out = _splitmix64(x)
            self.s.append(out)

    def next(self):
        s0, s1, s2, s3 = self.s
        r = ((s1 * 5) & MASK64)
        r = ((((r << 7) | (r >> 57)) & MASK64) * 9) & MASK64
        t = (s1 << 17) & MASK64
        s2 ^= s0
        s3 ^= s1
        s1 ^= s2
        s0 ^= s3
        s2 ^= t
        s3 = ((s3 << 45) | (s3 >> 19)) & MASK64
        self.s = [s0, s1, s2, s3]
        return r

    def uniform(self):
        return (self.next() >> 11) * (1.0 / 9007199254740992.0)

    def below(self, n):
        limit = MASK64 - MASK64 % n
        while True:
            x = self.next()
            if x < limit:
                return x % n

    def uniforms(self, count):
        """count uniforms in [0, 1) as float64, the stream's next ones."""
        nxt = self.next
        k = 1.0 / 9007199254740992.0
        return np.array([(nxt() >> 11) * k for _ in range(count)], dtype=np.float64)


# ---- the IDX files ----

def _read(path):
    """path.gz when it exists (unless path ends in .gz), else path, read whole."""
    if not path.endswith(".gz") and os.path.exists(path + ".gz"):
        path += ".gz"
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        return path, f.read()


def load_idx(prefix, limit=0):
    """(x, y) of an IDX prefix: x float32 (n, rows, cols) scaled as psc scales
    it, y int64 (n). limit > 0 keeps the first `limit` examples."""
    ipath, img = _read(prefix + "-images-idx3-ubyte")
    lpath, lab = _read(prefix + "-labels-idx1-ubyte")
    magic, n, rows, cols = struct.unpack(">IIII", img[:16])
    if magic != 0x803 or len(img) != 16 + n * rows * cols:
        raise ValueError("%s: not an IDX3 file of %d images (%d bytes)" % (ipath, n, len(img)))
    lmagic, nl = struct.unpack(">II", lab[:8])
    if lmagic != 0x801 or nl != n or len(lab) != 8 + n:
        raise ValueError("%s: not an IDX1 file of %d labels" % (lpath, n))
    keep = min(limit, n) if limit > 0 else n
    pix = np.frombuffer(img, dtype=np.uint8, offset=16, count=keep * rows * cols)
    x = pix.astype(np.float32) * np.float32(1.0 / 255.0)
    y = np.frombuffer(lab, dtype=np.uint8, offset=8, count=keep).astype(np.int64)
    return x.reshape(keep, rows, cols), y


# ---- sharding and shuffling ----

def epoch_order(n, shard, num_shards, seed, epoch, shuffle=True):
    """The example indices replica `shard` of `num_shards` visits in `epoch`
    (0-based), as worker/data/dataset.c's shuffle_epoch orders them."""
    order = list(range(shard, n, num_shards))
    if shuffle:
        r = PscRng(seed_mix(seed, epoch))
        below = r.below
        for i in range(len(order) - 1, 0, -1):
            j = below(i + 1)
            order[i], order[j] = order[j], order[i]
    return np.array(order, dtype=np.int64)


def batches(n, shard, num_shards, seed, batch, steps, shuffle=True, max_epochs=0):
    """The first `steps` batches (index arrays) of replica `shard`, computed now
    (the caller does this before its clock starts, as psc's prefetch thread
    does it beside the steps). Stops early after max_epochs epochs (> 0)."""
    out = []
    epoch = 0
    while len(out) < steps and (max_epochs <= 0 or epoch < max_epochs):
        order = epoch_order(n, shard, num_shards, seed, epoch, shuffle)
        for first in range(0, len(order), batch):
            if len(out) == steps:
                break
            out.append(order[first:first + batch])
        epoch += 1
    return out


# ---- the initialization ----

def init_value(index, shape, seed):
    """Variable `index` (global_step = 0) of the model: zeros for rank <= 1,
    else glorot_uniform from psc_rng(psc_seed_mix(seed, index)), float32,
    row-major in psc's layout (dense (in, out); conv2d (kh, kw, in, out))."""
    numel = int(np.prod(shape))
    if len(shape) <= 1:
        return np.zeros(shape, dtype=np.float32)
    receptive = float(np.prod(shape[:-2])) if len(shape) > 2 else 1.0
    fan_in = receptive * shape[-2]
    fan_out = receptive * shape[-1]
    limit = math.sqrt(6.0 / (fan_in + fan_out))
    u = PscRng(seed_mix(seed, index)).uniforms(numel)
    return ((2.0 * u - 1.0) * limit).astype(np.float32).reshape(shape)
