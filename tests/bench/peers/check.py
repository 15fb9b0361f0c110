"""check.py — the peers' own checks (peers.py check SPEC [--slab FILE]; run by
tests/bench/peers/check.sh, which gets the slab from a real psc cluster). Not
part of make test: the peers need PyTorch, which only the benchmark installs.

  1. psc_rng: known answers of common/rng.c (printed by a C program linking
     it): the first uniforms of psc_seed_mix(42, 1) and a psc_rng_below.
  2. --slab: the initial weights equal psc's, element for element (the slab is
     what psc_dump pulled from a cluster whose chief had just initialized the
     model: raw float32, psc's variable order and layout).
  3. The PyTorch model computes psc's function: its logits on a batch equal
     a numpy forward written in psc's own layout (NHWC images, kernels
     (kh, kw, in, out) and (in, out), flatten in (h, w, c) order, TF padding).
  4. TF Adam's first step is -lr * sign(g) (the closed form; exactly
     -lr * g / (|g| + eps / sqrt(1 - beta2)) in double precision).
  5. It learns: one process, 40 steps, the mean loss of the last 10 is below
     the first step's loss by a third.
Prints one line per check; returns 0 when all hold, 1 otherwise.
"""
import math

import numpy as np
import torch

import model as M
import pscdata

# common/rng.c's answers (C program: psc_rng_seed(&r, psc_seed_mix(42, 1)),
# three psc_rng_uniform; psc_rng_seed(&r, psc_seed_mix(42, 3)), psc_rng_below(&r, 30000)).
RNG_KAT_UNIFORMS = (0.89641864952360339, 0.49890999957538029, 0.65511217517751941)
RNG_KAT_BELOW = 21204


def _ok(name, good, detail):
    print("check %-10s %s  %s" % (name, "ok  " if good else "FAIL", detail), flush=True)
    return good


def _psc_layout(spec):
    """psc's initial variables (not global_step), in order, in psc's layout."""
    net_spec = M.PscModel(spec)  # only for the variable shapes via names
    out, index = [], 1
    for name, p in zip(net_spec.names, net_spec.params()):
        shape = tuple(p.shape)
        if name.endswith("/kernel") and p.dim() == 4:
            shape = (shape[2], shape[3], shape[1], shape[0])
        out.append(pscdata.init_value(index, shape, spec.get("seed", 42)))
        index += 1
    return out


def _np_forward(spec, weights, x):
    """psc's function in numpy, psc's layout: x (n, h, w, c) or (n, features)."""
    it = iter(weights)
    for L in spec["model"]["layers"]:
        t = L["type"]
        if t in ("conv2d", "max_pool2d"):
            conv = t == "conv2d"
            k = L.get("kernel_size") if conv else L.get("pool_size", 2)
            kh, kw = (k, k) if isinstance(k, int) else k
            s = L.get("strides", 1 if conv else (kh, kw))
            sh, sw = (s, s) if isinstance(s, int) else s
            if L.get("padding", "valid") == "same":
                (pt, pb), (pl, pr) = M._tf_pad(x.shape[1], kh, sh), M._tf_pad(x.shape[2], kw, sw)
                x = np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)), constant_values=0.0 if conv else -np.inf)
            win = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(1, 2))[:, ::sh, ::sw]
            if conv:  # win: (n, oh, ow, c, kh, kw)
                w = next(it)
                x = np.einsum("nhwcij,ijco->nhwo", win, w)
                if L.get("use_bias", True):
                    x = x + next(it)
            else:
                x = win.max(axis=(4, 5))
        elif t == "flatten":
            x = x.reshape(x.shape[0], -1)
        elif t == "dense":
            x = x @ next(it)
            if L.get("use_bias", True):
                x = x + next(it)
        act = L.get("activation", "linear")
        if act == "relu":
            x = np.maximum(x, 0.0)
        elif act == "tanh":
            x = np.tanh(x)
        elif act == "sigmoid":
            x = 1.0 / (1.0 + np.exp(-x))
    return x


def main(spec_path, slab):
    good = True
    r = pscdata.PscRng(pscdata.seed_mix(42, 1))
    u = tuple(r.uniform() for _ in range(3))
    below = pscdata.PscRng(pscdata.seed_mix(42, 3)).below(30000)
    good &= _ok("rng", u == RNG_KAT_UNIFORMS and below == RNG_KAT_BELOW, "uniforms %r below %d" % (u, below))
    if not spec_path:
        return 0 if good else 1

    spec = M.load_spec(spec_path)
    torch.manual_seed(0)
    net = M.PscModel(spec)
    params = net.params()
    weights = _psc_layout(spec)
    if slab:
        got = np.fromfile(slab, dtype="<f4")
        want = np.concatenate([w.ravel() for w in weights])
        same = got.shape == want.shape and np.array_equal(got, want)
        diff = float(np.abs(got - want).max()) if got.shape == want.shape else float("nan")
        good &= _ok("init", same, "%d parameters, psc's slab %s: max |diff| %g" % (want.size, slab, diff))

    x, y = M.load_data(spec, "test", net)
    x, y = x[:64], y[:64]
    net.eval()
    with torch.no_grad():
        logits = net(x).double().numpy()
    xn = x.numpy()
    if net.image:
        xn = xn.transpose(0, 2, 3, 1)
    ref = _np_forward(spec, [w.astype(np.float64) for w in weights], xn.astype(np.float64))
    err = float(np.abs(logits - ref).max() / max(1e-12, np.abs(ref).max()))
    good &= _ok("forward", err < 1e-4, "logits of 64 test images vs numpy in psc's layout: max rel diff %.2e" % err)

    net.train()
    adam = M.TFAdam(params, spec)
    before = [p.detach().clone().double() for p in params]
    M.forward_backward(net, params, x, y)
    grads = [p.grad.detach().clone().double() for p in params]
    adam.apply(params, [p.grad for p in params])
    worst_sign, worst_exact = 0.0, 0.0
    for p, b, g in zip(params, before, grads):
        step = p.detach().double() - b
        big = g.abs() > 1e-3
        off = (step + adam.lr * g.sign()).abs()[big]
        if off.numel():
            worst_sign = max(worst_sign, float(off.max()) / adam.lr)
        exact = -adam.lr * g / (g.abs() + adam.eps / math.sqrt(1.0 - adam.b2))
        worst_exact = max(worst_exact, float((step - exact).abs().max()) / adam.lr)
    good &= _ok("adam", worst_sign < 1e-3 and worst_exact < 1e-3,
                "first step vs -lr*sign(g) (|g| > 1e-3): %.1e lr; vs the exact form: %.1e lr" % (worst_sign, worst_exact))

    torch.manual_seed(1)
    net = M.PscModel(spec)
    params = net.params()
    adam = M.TFAdam(params, spec)
    tx, ty = M.load_data(spec, "train", net)
    losses = []
    for idx in M.plan(spec, tx.shape[0], 0, 1, 40):
        losses.append(M.forward_backward(net, params, tx[idx], ty[idx]))
        adam.apply(params, [p.grad for p in params])
    last = sum(losses[-10:]) / 10
    good &= _ok("learns", last < losses[0] * 2 / 3, "loss %.3f at step 1, %.3f over steps 31-40" % (losses[0], last))
    return 0 if good else 1
