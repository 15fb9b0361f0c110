#!/usr/bin/env python3
"""bench_tower_torch.py — psc's CPU tower alone against PyTorch's one training
process on the same model, batch and thread count, in one interleaved run.

For each job spec and each thread count, rounds of: psc's
`bench_step_tower SPEC SECS cpu THREADS` (set_params + forward + backward +
get_grads of one CPU tower, the tower's threads = THREADS), then PyTorch's
training step on the same model (torch.set_num_threads(THREADS); zero_grad,
forward, mean cross-entropy, backward, the spec's optimizer step), then
PyTorch's forward + backward alone (what the tower does; the update is the
PS's). Random inputs as bench_step_tower's; 3 warm-up steps, then at least 20
steps and at least SECS seconds each. Prints every measurement and, per spec
and thread count, the medians over the rounds and the ratios psc / PyTorch.
A measurement, not a test: it never fails on speed; exit 77 (skipped) when
torch cannot be imported.

The PyTorch model is built from the spec's "model" (conv2d, max_pool2d,
flatten, dense, dropout; Keras semantics: valid padding by default, "same"
only with stride 1 here; pool strides default to the pool size), in PyTorch's
own NCHW layout, float32, as a PyTorch user would write it.

usage: bench_tower_torch.py [--bin BUILD_DIR] [--secs S] [--threads 1,2]
                            [--rounds R] [JOB_SPEC ...]
       (defaults: build, 3, 1,2, 2, deploy/jobs/cnn.json deploy/jobs/mlp.json)
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def pair(v):
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))


def build_model(torch, spec):
    """The spec's model as a torch.nn.Sequential; returns (model, input shape, classes)."""
    nn = torch.nn
    m = spec["model"]
    shape = m["input_shape"]
    if len(shape) == 3:
        h, w, c = shape
        cur, in_shape = ("img", c, h, w), (c, h, w)
    else:
        cur, in_shape = ("flat", shape[0]), (shape[0],)
    acts = {"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}
    layers = []
    for L in m["layers"]:
        t = L["type"]
        if t == "conv2d":
            _, c, h, w = cur
            k, s = pair(L["kernel_size"]), pair(L.get("strides", 1))
            pad = L.get("padding", "valid")
            if pad == "same" and s != (1, 1):
                raise SystemExit("bench_tower_torch: padding same with strides != 1 is not supported here")
            layers.append(nn.Conv2d(c, L["filters"], k, s, padding=pad, bias=L.get("use_bias", True)))
            if pad == "valid":
                h, w = (h - k[0]) // s[0] + 1, (w - k[1]) // s[1] + 1
            cur = ("img", L["filters"], h, w)
        elif t == "max_pool2d":
            _, c, h, w = cur
            p = pair(L.get("pool_size", 2))
            s = pair(L.get("strides", p))
            if L.get("padding", "valid") != "valid":
                raise SystemExit("bench_tower_torch: max_pool2d padding same is not supported here")
            layers.append(nn.MaxPool2d(p, s))
            cur = ("img", c, (h - p[0]) // s[0] + 1, (w - p[1]) // s[1] + 1)
        elif t == "flatten":
            if cur[0] == "img":
                layers.append(nn.Flatten())
                cur = ("flat", cur[1] * cur[2] * cur[3])
        elif t == "dense":
            if cur[0] == "img":  # Keras flattens implicitly only after a flatten layer; be lenient
                layers.append(nn.Flatten())
                cur = ("flat", cur[1] * cur[2] * cur[3])
            layers.append(nn.Linear(cur[1], L["units"], bias=L.get("use_bias", True)))
            cur = ("flat", L["units"])
        elif t == "dropout":
            layers.append(nn.Dropout(L["rate"]))
        else:
            raise SystemExit("bench_tower_torch: layer type %s is not supported here" % t)
        act = L.get("activation", "linear")
        if t in ("conv2d", "dense") and act in acts:
            layers.append(acts[act]())
    return nn.Sequential(*layers), in_shape, cur[1]


def make_optimizer(torch, spec, params):
    o = spec.get("optimizer", {"name": "sgd"})
    lr = o.get("learning_rate", 0.001)
    if o["name"] == "adam":
        return torch.optim.Adam(params, lr=lr, betas=(o.get("beta_1", 0.9), o.get("beta_2", 0.999)),
                                eps=o.get("epsilon", 1e-7))
    if o["name"] == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if o["name"] == "momentum":
        return torch.optim.SGD(params, lr=lr, momentum=o.get("momentum", 0.9))
    return torch.optim.Adam(params, lr=lr)


def torch_rate(torch, spec, threads, secs, with_update):
    """Examples/s of PyTorch's step (with the optimizer's update, or forward + backward only)."""
    torch.set_num_threads(threads)
    torch.manual_seed(7)
    model, in_shape, classes = build_model(torch, spec)
    model.train()
    opt = make_optimizer(torch, spec, model.parameters())
    loss_fn = torch.nn.CrossEntropyLoss()
    batch = spec["batch_size_per_replica"]
    x = torch.rand((batch,) + tuple(in_shape))
    y = torch.randint(0, classes, (batch,))
    steps, t0, i = 0, 0.0, 0
    while True:
        if i == 3:
            t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        if with_update:
            opt.step()
        i += 1
        if i > 3:
            steps = i - 3
            elapsed = time.perf_counter() - t0
            if steps >= 20 and elapsed >= secs:
                return batch * steps / elapsed


def psc_rate(bin_dir, spec_path, threads, secs):
    """Examples/s of bench_step_tower on one CPU tower with `threads` threads."""
    cmd = [os.path.join(bin_dir, "bench_step_tower"), spec_path, str(secs), "cpu", str(threads)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    m = re.search(r"([0-9.]+) examples/s", out)
    if not m:
        raise SystemExit("bench_tower_torch: cannot read bench_step_tower's output: %s" % out)
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser(description="psc's CPU tower against PyTorch on the same model and threads")
    ap.add_argument("--bin", default=os.environ.get("PSC_BIN", os.path.join(ROOT, "build")))
    ap.add_argument("--secs", type=float, default=3.0)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("specs", nargs="*")
    a = ap.parse_args()
    try:
        import torch
    except ImportError as e:
        print("bench_tower_torch: skipped (PyTorch cannot be imported: %s)" % e)
        return 77
    specs = a.specs or [os.path.join(ROOT, "deploy/jobs/cnn.json"), os.path.join(ROOT, "deploy/jobs/mlp.json")]
    threads = [int(t) for t in a.threads.split(",")]
    print("bench_tower_torch: psc CPU tower (bench_step_tower) against PyTorch %s, %d interleaved rounds, >= %g s "
          "per point; examples/s" % (torch.__version__, a.rounds, a.secs))
    summary = []
    for path in specs:
        with open(path) as f:
            spec = json.load(f)
        name = os.path.basename(path)
        for n in threads:
            r = {"psc": [], "torch": [], "torch_fb": []}
            for k in range(a.rounds):
                r["psc"].append(psc_rate(a.bin, path, n, a.secs))
                r["torch"].append(torch_rate(torch, spec, n, a.secs, True))
                r["torch_fb"].append(torch_rate(torch, spec, n, a.secs, False))
                print("  %-10s threads %d round %d: psc %8.0f  torch step %8.0f  torch fwd+bwd %8.0f" %
                      (name, n, k + 1, r["psc"][-1], r["torch"][-1], r["torch_fb"][-1]), flush=True)
            med = {key: statistics.median(v) for key, v in r.items()}
            summary.append((name, n, med))
    print("%-10s %7s %10s %12s %14s %12s %14s" % ("model", "threads", "psc", "torch step", "torch fwd+bwd",
                                                   "psc/step", "psc/fwd+bwd"))
    for name, n, med in summary:
        print("%-10s %7d %10.0f %12.0f %14.0f %11.2fx %13.2fx" %
              (name, n, med["psc"], med["torch"], med["torch_fb"], med["psc"] / med["torch"],
               med["psc"] / med["torch_fb"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
