"""model.py — a psc job spec (deploy/jobs/*.json) as a PyTorch model, TF's Adam
written out, and what every peer shares: the data, the batches, a step, the
evaluation and the result line.

The model: model.layers walked as psc walks them (common/model_spec.c): dense
(units, activation, use_bias), conv2d (filters, kernel_size, strides, padding
valid/same, activation, use_bias), max_pool2d (pool_size, strides = pool_size,
padding), flatten, dropout (rate; inverted, as Keras and psc). Padding "same"
is TensorFlow's (the extra row or column of an odd total goes after). The
parameters are kept in psc's variable order with psc's values from
pscdata.init_value; a dense kernel stays (in, out) (the layer is x @ W + b); a
conv kernel (kh, kw, in, out) becomes PyTorch's (out, in, kh, kw). Images run
NCHW, so a flatten after a conv yields (c, h, w) order where psc's yields
(h, w, c): the rows of the dense kernel that follows are permuted to match, so
the function computed is psc's exactly.

TF Adam (tf.compat.v1.train.AdamOptimizer, what psc's PS applies):
  lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t)
  m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
  w -= lr_t * m / (sqrt(v) + epsilon)
with t the number of updates applied so far, counting this one.

Only what the demo jobs use is accepted; anything else (another optimizer, a
schedule, tables, another loss or data format) is an error naming the key.
"""
import json
import math
import time

import numpy as np
import torch
import torch.nn.functional as F

import pscdata



def load_spec(path):
    """The job spec (dict) of `path`, checked for what the peers implement."""
    with open(path) as f:
        spec = json.load(f)
    model = spec["model"]
    if model.get("loss", "sparse_softmax_cross_entropy") != "sparse_softmax_cross_entropy":
        raise ValueError("%s: model.loss: the peers train sparse_softmax_cross_entropy only" % path)
    opt = spec.get("optimizer", {})
    if opt.get("name") != "adam" or "schedule" in opt:
        raise ValueError("%s: optimizer: the peers implement adam without a schedule only" % path)
    if spec.get("data", {}).get("format", "idx") != "idx":
        raise ValueError("%s: data.format: the peers read idx only" % path)
    if "tables" in spec or spec.get("overlap_push_pull") or spec.get("gradient_dtype", "float32") != "float32":
        raise ValueError("%s: tables, overlap_push_pull and bfloat16 gradients are not implemented by the peers" % path)
    return spec


def _tf_pad(size, k, s):
    """TensorFlow's "same" padding along one axis: (before, after)."""
    out = -(-size // s)
    total = max((out - 1) * s + k - size, 0)
    return total // 2, total - total // 2


def _pair(v, default):
    if v is None:
        v = default
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))


class PscModel(torch.nn.Module):
    """The job spec's model; params() lists the parameters in psc's order."""

    def __init__(self, spec):
        super().__init__()
        model = spec["model"]
        shape = list(model["input_shape"])
        self.image = len(shape) == 3
        h, w, c = (shape if self.image else (1, 1, shape[0]))
        flat = not self.image
        conv_flat = None  # (h, w, c) when flatten followed a conv / pool
        seed = spec.get("seed", 42)
        counts = {}
        index = 1  # global_step is variable 0
        self.ops = []
        self._params = []
        self.names = []
        for i, L in enumerate(model["layers"]):
            t = L["type"]
            if t in ("dense", "conv2d"):
                base = t
                n = counts.get(base, 0)
                counts[base] = n + 1
                name = L.get("name") or (base if n == 0 else "%s_%d" % (base, n))
                if t == "dense":
                    units = int(L["units"])
                    kernel = pscdata.init_value(index, (c, units), seed)
                    op = {"type": "dense", "rows_hwc": conv_flat}
                    if conv_flat is not None:  # rows (h, w, c) -> (c, h, w)
                        fh, fw, fc = conv_flat
                        kernel = kernel.reshape(fh, fw, fc, units).transpose(2, 0, 1, 3).reshape(c, units)
                        conv_flat = None
                    c = units
                else:
                    kh, kw = _pair(L.get("kernel_size"), 1)
                    sh, sw = _pair(L.get("strides"), 1)
                    kernel = pscdata.init_value(index, (kh, kw, c, int(L["filters"])), seed).transpose(3, 2, 0, 1)
                    op = {"type": "conv2d", "stride": (sh, sw)}
                    h, w = self._spatial(op, L, h, w, kh, kw, sh, sw)
                    c = int(L["filters"])
                index += 1
                op["w"] = self._add(name + "/kernel", kernel)
                op["b"] = None
                if L.get("use_bias", True):
                    op["b"] = self._add(name + "/bias", pscdata.init_value(index, (c,), seed))
                    index += 1
                op["act"] = L.get("activation", "linear")
                self.ops.append(op)
            elif t == "max_pool2d":
                kh, kw = _pair(L.get("pool_size"), 2)
                sh, sw = _pair(L.get("strides"), None) if L.get("strides") is not None else (kh, kw)
                op = {"type": "max_pool2d", "k": (kh, kw), "stride": (sh, sw)}
                h, w = self._spatial(op, L, h, w, kh, kw, sh, sw)
                self.ops.append(op)
            elif t == "flatten":
                if not flat:
                    conv_flat = (h, w, c) if c > 1 else None
                    c = h * w * c
                    h = w = 1
                    flat = True
                self.ops.append({"type": "flatten"})
            elif t == "dropout":
                self.ops.append({"type": "dropout", "rate": float(L["rate"])})
            else:
                raise ValueError("model.layers[%d]: type %s is not implemented by the peers" % (i, t))
        self.input_shape = shape
        self.nparams = sum(p.numel() for p in self._params)

    @staticmethod
    def _spatial(op, L, h, w, kh, kw, sh, sw):
        """Sets op's padding; returns the output (h, w)."""
        if L.get("padding", "valid") == "same":
            (pt, pb), (pl, pr) = _tf_pad(h, kh, sh), _tf_pad(w, kw, sw)
            op["pad"] = (pl, pr, pt, pb)
            return -(-h // sh), -(-w // sw)
        op["pad"] = None
        return (h - kh) // sh + 1, (w - kw) // sw + 1

    def _add(self, name, value):
        p = torch.nn.Parameter(torch.from_numpy(np.ascontiguousarray(value)))
        self.register_parameter(name.replace("/", "__"), p)
        self._params.append(p)
        self.names.append(name)
        return p

    def params(self):
        return list(self._params)

    def psc_slab(self):
        """The weights as psc's parameter slab (psc_dump's format): float32,
        psc's variable order and layouts, concatenated."""
        out = []
        for op in self.ops:
            if op["type"] == "dense":
                w = op["w"].detach().numpy()
                if op["rows_hwc"] is not None:  # rows (c, h, w) -> (h, w, c)
                    fh, fw, fc = op["rows_hwc"]
                    w = w.reshape(fc, fh, fw, -1).transpose(1, 2, 0, 3).reshape(w.shape)
                out.append(w)
            elif op["type"] == "conv2d":
                out.append(op["w"].detach().numpy().transpose(2, 3, 1, 0))
            else:
                continue
            if op["b"] is not None:
                out.append(op["b"].detach().numpy())
        return np.concatenate([np.ascontiguousarray(a, dtype=np.float32).ravel() for a in out])

    def forward(self, x):
        for op in self.ops:
            t = op["type"]
            if t == "dense":
                x = torch.addmm(op["b"], x, op["w"]) if op["b"] is not None else x @ op["w"]
            elif t == "conv2d":
                if op["pad"] is not None and any(op["pad"]):
                    x = F.pad(x, op["pad"])
                x = F.conv2d(x, op["w"], op["b"], stride=op["stride"])
            elif t == "max_pool2d":
                if op["pad"] is not None and any(op["pad"]):
                    x = F.pad(x, op["pad"], value=-math.inf)
                x = F.max_pool2d(x, op["k"], op["stride"])
            elif t == "flatten":
                x = x.flatten(1)
            elif t == "dropout":
                x = F.dropout(x, op["rate"], self.training)
            act = op.get("act", "linear")
            if act == "relu":
                x = torch.relu(x)
            elif act == "tanh":
                x = torch.tanh(x)
            elif act == "sigmoid":
                x = torch.sigmoid(x)
            elif act != "linear":
                raise ValueError("activation %s is not implemented by the peers" % act)
        return x


class TFAdam:
    """TF1's Adam on a list of float32 tensors (see the file's comment)."""

    def __init__(self, params, spec):
        opt = spec["optimizer"]
        self.lr = float(opt.get("learning_rate", 0.001))
        self.b1 = float(opt.get("beta1", 0.9))
        self.b2 = float(opt.get("beta2", 0.999))
        self.eps = float(opt.get("epsilon", 1e-8))
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params]
        self.t = 0

    @torch.no_grad()
    def apply(self, params, grads):
        """One update of every tensor of `params` (in place) by `grads`."""
        self.t += 1
        lr_t = self.lr * math.sqrt(1.0 - self.b2 ** self.t) / (1.0 - self.b1 ** self.t)
        for p, g, m, v in zip(params, grads, self.m, self.v):
            m.mul_(self.b1).add_(g, alpha=1.0 - self.b1)
            v.mul_(self.b2).addcmul_(g, g, value=1.0 - self.b2)
            p.addcdiv_(m, v.sqrt().add_(self.eps), value=-lr_t)


# ---- data, steps, evaluation ----

def load_data(spec, which, model):
    """(x, y) tensors of data.train or data.test (data.*_examples applied), x
    shaped for `model` (NCHW images or flat vectors)."""
    data = spec["data"]
    x, y = pscdata.load_idx(data[which], int(data.get(which + "_examples", 0)))
    n = x.shape[0]
    if model.image:
        h, w, c = model.input_shape
        x = x.reshape(n, h, w, c).transpose(0, 3, 1, 2)
    else:
        x = x.reshape(n, -1)
    return torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(y)


def plan(spec, n, shard, num_shards, steps):
    """Replica `shard`'s first `steps` batches (index tensors), at most the
    spec's epochs, computed before the clock starts."""
    data = spec.get("data", {})
    epochs = int(spec.get("epochs", 1))
    if steps <= 0:
        steps = 1 << 62
    idx = pscdata.batches(n, shard, num_shards, spec.get("seed", 42), int(spec.get("batch_size_per_replica", 64)),
                          steps, data.get("shuffle", True), epochs)
    return [torch.from_numpy(b) for b in idx]


def forward_backward(model, params, x, y):
    """Loss of one batch (float) with each parameter's gradient in .grad."""
    for p in params:
        p.grad = None
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    return loss.item()


def train(model, params, adam, x, y, plan):
    """One replica's loop: forward, backward and TF Adam for every batch of plan.
    Returns (losses, examples, seconds), timed from the first step to the last update."""
    losses, examples = [], 0
    t0 = now()
    for idx in plan:
        losses.append(forward_backward(model, params, x[idx], y[idx]))
        adam.apply(params, [p.grad for p in params])
        examples += idx.shape[0]
    return losses, examples, now() - t0


@torch.no_grad()
def evaluate(model, x, y, chunk=1000):
    """(accuracy, mean loss) over (x, y), dropout off."""
    was = model.training
    model.eval()
    correct, loss = 0, 0.0
    for i in range(0, x.shape[0], chunk):
        logits = model(x[i:i + chunk])
        loss += F.cross_entropy(logits, y[i:i + chunk], reduction="sum").item()
        correct += (logits.argmax(1) == y[i:i + chunk]).sum().item()
    model.train(was)
    return correct / x.shape[0], loss / x.shape[0]


def steps_of(spec, override):
    """Steps per replica: the override (> 0), else the spec's "steps", else
    0 (= the spec's epochs; plan() stops there)."""
    return override if override > 0 else int(spec.get("steps", 0))


def tail_mean(losses):
    """The mean training loss of the run's last tenth of steps."""
    tail = losses[-max(1, len(losses) // 10):]
    return sum(tail) / max(1, len(tail))


def report(**kv):
    """The machine-readable result line of a process (PEER_RESULT {json})."""
    print("PEER_RESULT " + json.dumps(kv), flush=True)


def now():
    return time.perf_counter()
