#!/usr/bin/python3
"""ctr_peer.py — the PyTorch peer of psc's recommendation job (deploy/jobs/ctr.json),
beside which psc is measured (tests/bench/bench_ctr_peers.sh; docs/performance.md
"PyTorch beside psc").

  ctr_peer.py one SPEC [--threads N] [--steps N] [--cache DIR] [--save FILE]
        one process trains SPEC on all of data.train (psc's file order,
        batch_size_per_replica, epochs or "steps"), then evaluates data.test:
        the same files, features, hashing, initial values, model and
        optimizers as psc (ctr_model.py, ctrdata.py)
  ctr_peer.py prep SPEC --cache DIR
        parses data.train and data.test into the cache only (what a later
        `one --cache DIR` then loads instead of parsing)
  ctr_peer.py check [SPEC EXPORT STEPS]
        the peer's own checks (ctr_check.py; tests/bench/peers/ctr_check.sh
        runs them against what psc trained and exported)

--threads: torch.set_num_threads (default 1), and OPENBLAS_NUM_THREADS and
OMP_NUM_THREADS unless set (Debian's torch calls OpenBLAS, whose threads
torch.set_num_threads does not bound). --cache DIR: keep each parsed
file there as .npy (keyed by the file's path, size and mtime), so later runs
skip the parsing. --save FILE: the final dense variables and table rows as an
.npz (names as psctl export: dense/kernel, emb/ids, emb/values, ...).

Timed as the other peers: from just before the first step (files read and
parsed, rows initialized, batches planned) to just after the last update;
the parsing is reported apart (load_secs). The last line on stdout is
  peer ctr-one threads T steps S examples_per_sec R secs T train_loss L test_auc A test_log_loss L load_secs S
(train_loss: the mean over the last tenth of the steps).
"""
import argparse
import hashlib
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ in the source tree


def read_file(path, limit, cache):
    """ctrdata.read_criteo(path, limit), through the cache directory when given."""
    import numpy as np
    import ctrdata
    if not cache:
        return ctrdata.read_criteo(path, limit)
    st = os.stat(path)
    key = hashlib.sha1(("%s %d %d %d" % (os.path.abspath(path), st.st_size, st.st_mtime_ns, limit)).encode())
    base = os.path.join(cache, key.hexdigest()[:20])
    names = ("label", "dense", "keys", "present")
    if all(os.path.exists("%s.%s.npy" % (base, n)) for n in names):
        return {n: np.load("%s.%s.npy" % (base, n)) for n in names}
    d = ctrdata.read_criteo(path, limit)
    os.makedirs(cache, exist_ok=True)
    for n in names:  # write-then-rename: a run cut short leaves no half file
        tmp = "%s.%s.tmp.npy" % (base, n)
        np.save(tmp, d[n])
        os.replace(tmp, "%s.%s.npy" % (base, n))
    return d


def spec_files(spec):
    """[(file, example cap)] of data.train, then data.test's."""
    import ctrdata
    data = spec["data"]
    out = [(f, int(data.get("train_examples", 0))) for f in ctrdata.expand(data["train"])]
    if data.get("test"):
        out += [(f, int(data.get("test_examples", 0))) for f in ctrdata.expand(data["test"])]
    return out


def prep(args):
    import ctr_model as CM
    spec = CM.load_spec(args.spec)
    t0 = time.perf_counter()
    files = spec_files(spec)
    for f, cap in files:
        read_file(f, cap, args.cache)
    print("ctr_peer.py prep: %d files parsed into %s in %.1f s" % (len(files), args.cache, time.perf_counter() - t0))


def run_one(args):
    import numpy as np
    import torch
    torch.set_num_threads(args.threads)
    import ctrdata
    import ctr_model as CM
    import model as M
    t0 = time.perf_counter()
    spec = CM.load_spec(args.spec)
    data = spec["data"]
    cap = int(data.get("train_examples", 0))
    files = ctrdata.expand(data["train"])
    parts = [read_file(f, cap, args.cache) for f in files]
    test = None
    if data.get("test"):
        test = ctrdata.concat([read_file(f, int(data.get("test_examples", 0)), args.cache)
                               for f in ctrdata.expand(data["test"])])
    train = ctrdata.concat(parts)
    peer = CM.CtrPeer(spec, train, test)
    steps = args.steps if args.steps > 0 else int(spec.get("steps", 0))
    plan = peer.plan(steps, cap, data.get("shuffle", True), [p["label"].shape[0] for p in parts])
    load = time.perf_counter() - t0
    losses, examples, secs = peer.train(plan)
    auc = loss = float("nan")
    if test is not None:
        auc, loss, _ = peer.evaluate()
    if args.save:
        np.savez(args.save, **peer.state())
    print("peer ctr-one threads %d steps %d examples_per_sec %.0f secs %.2f train_loss %.4f test_auc %.4f "
          "test_log_loss %.4f load_secs %.1f"
          % (args.threads, len(plan), examples / secs, secs, M.tail_mean(losses), auc, loss, load), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=["one", "prep", "check"])
    ap.add_argument("spec", nargs="?")
    ap.add_argument("export", nargs="?")
    ap.add_argument("check_steps", nargs="?", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--cache", default="")
    ap.add_argument("--save", default="")
    args = ap.parse_args()
    # Debian's torch calls the system BLAS (OpenBLAS), whose own thread pool
    # torch.set_num_threads does not size: size it (and OpenMP's) to --threads
    # before torch loads it, or a "1-thread" run has 2 BLAS threads spinning
    # on sched_yield beside it. A value set by the caller stands.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(args.threads))
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    if args.cmd == "check":
        import torch
        torch.set_num_threads(args.threads)
        import ctr_check
        sys.exit(ctr_check.main(args.spec, args.export, args.check_steps))
    if not args.spec:
        ap.error("%s needs a job spec" % args.cmd)
    if args.cmd == "prep":
        if not args.cache:
            ap.error("prep needs --cache DIR")
        prep(args)
        return
    run_one(args)


if __name__ == "__main__":
    main()
