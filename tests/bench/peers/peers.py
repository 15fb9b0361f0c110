#!/usr/bin/python3
"""peers.py — PyTorch trainers of psc's demo jobs, beside which psc is measured
(tests/bench/bench_peers.sh; README "Performance -> PyTorch beside psc").

  peers.py one SPEC      one process, the whole training set (shard 0 of 1)
  peers.py rpc SPEC      torch.distributed.rpc parameter server: 1 PS process
                         holding the weights and applying TF Adam, 2 trainers
                         (shards 0 and 1 of 2), asynchronous, one
                         update-and-fetch rpc_sync a step, TCP on 127.0.0.1
  peers.py ddp SPEC      DistributedDataParallel, gloo, 2 processes (shards 0
                         and 1 of 2): every step all-reduces the mean gradient
                         and each applies TF Adam (synchronous, R = N = 2)
  peers.py spec SRC DST [--steps N] [--test_examples N] [--sync | --async]
                 [--no_dropout]
                         writes SRC with those keys set (what both psc and the
                         peers train), epochs raised so "steps" is the limit;
                         --sync: R = N = 2; --no_dropout: every dropout rate 0
  peers.py check [SPEC [--slab FILE]]
                         the peers' own checks (check.py; tests/bench/peers/check.sh
                         runs them with psc's initial weights as the slab)

Options of one/rpc/ddp: --steps N (per replica; default the spec's "steps",
else its epochs), --port P (rpc/ddp rendezvous; default a free one),
--timeout S (rpc/ddp: kill everything after S seconds, 600), --save FILE (the
final weights as psc's parameter slab, psc_dump's format).

Every process uses one thread (torch.set_num_threads(1)). Each trainer times
its own steps, from just before its first step (data loaded, batches planned,
model initialized, rpc / process group up, weights fetched) to just after its
last update (the last rpc_sync's reply, the last all-reduce and Adam); the
run's examples/s is the sum over the trainers of examples / that time, as psc
sums its workers'. The last line on stdout is
  peer NAME procs P steps S examples_per_sec R secs T train_loss L test_accuracy A test_loss L
(steps summed over the trainers; secs the longest trainer's; train_loss the
mean over the last tenth of the first trainer's steps; the test set of the
spec, data.test_examples applied, after training).
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ in the source tree


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_spec(args):
    with open(args.src) as f:
        spec = json.load(f)
    if args.steps > 0:
        spec["steps"] = args.steps
        spec["epochs"] = max(int(spec.get("epochs", 1)), 1000)
    if args.test_examples > 0:
        spec["data"]["test_examples"] = args.test_examples
    if args.sync:
        spec["sync"] = {"replicas_to_aggregate": 2, "total_num_replicas": 2, "timeout_secs": 30}
    elif "sync" in spec and args.async_:
        del spec["sync"]
    if args.no_dropout:  # rate 0: the runs are then comparable weight for weight
        for L in spec["model"]["layers"]:
            if L["type"] == "dropout":
                L["rate"] = 0.0
    with open(args.dst, "w") as f:
        json.dump(spec, f, indent=1)


def launch(kind, args, nprocs):
    """Starts nprocs copies of this script as the ranks of `kind`; waits for all;
    returns their PEER_RESULT dicts. Any failure or the timeout kills them all."""
    port = args.port or free_port()
    env = dict(os.environ)
    # Loopback only, TCP: gloo's and TensorPipe's sockets on lo.
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo", TP_SOCKET_IFNAME="lo",
               OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    procs, outs = [], []
    for rank in range(nprocs):
        cmd = [sys.executable, os.path.abspath(__file__), kind, args.spec, "--role", "rank", "--rank", str(rank),
               "--world", str(nprocs), "--port", str(port), "--steps", str(args.steps), "--save", args.save]
        outs.append(tempfile.TemporaryFile(mode="w+"))
        procs.append(subprocess.Popen(cmd, env=env, stdout=outs[-1], text=True))
    # Poll them all: one that fails would leave the others waiting for it.
    failed, deadline = None, time.monotonic() + args.timeout
    while failed is None and [p.poll() for p in procs].count(None):
        bad = [(r, p.returncode) for r, p in enumerate(procs) if p.returncode not in (None, 0)]
        if bad:
            failed = "rank %d exited %d" % bad[0]
        elif time.monotonic() > deadline:
            failed = "timed out after %d s" % args.timeout
        else:
            time.sleep(0.05)
    results = []
    for rank, (p, out) in enumerate(zip(procs, outs)):
        if p.poll() is None:
            p.kill()
        p.wait()
        out.seek(0)
        lines = [l for l in out.read().splitlines() if l.startswith("PEER_RESULT ")]
        if failed is None and p.returncode != 0:
            failed = "rank %d exited %d" % (rank, p.returncode)
        elif failed is None and not lines:
            failed = "rank %d printed no result" % rank
        elif lines:
            results.append(json.loads(lines[-1][len("PEER_RESULT "):]))
    if failed:
        sys.exit("peers.py %s: %s" % (kind, failed))
    return results


def summarize(name, results):
    """The run's line: examples/s summed over the trainers."""
    trainers = [r for r in results if r.get("examples")]
    evals = [r for r in results if "test_accuracy" in r]
    rate = sum(r["examples"] / r["secs"] for r in trainers)
    steps = sum(r["steps"] for r in trainers)
    secs = max(r["secs"] for r in trainers)
    ev = evals[0]
    print("peer %s procs %d steps %d examples_per_sec %.0f secs %.2f train_loss %.4f test_accuracy %.4f test_loss %.4f"
          % (name, len(results), steps, rate, secs, trainers[0]["train_loss"], ev["test_accuracy"], ev["test_loss"]),
          flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=["one", "rpc", "ddp", "spec", "check"])
    ap.add_argument("spec", nargs="?")
    ap.add_argument("dst", nargs="?")
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--test_examples", type=int, default=0)
    ap.add_argument("--sync", action="store_true")
    ap.add_argument("--async", dest="async_", action="store_true")
    ap.add_argument("--no_dropout", action="store_true")
    ap.add_argument("--slab", default="")
    ap.add_argument("--save", default="")
    ap.add_argument("--role", default="")
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--world", type=int, default=0)
    args = ap.parse_args()
    if args.cmd == "spec":
        if not args.spec or not args.dst:
            ap.error("spec needs SRC and DST")
        args.src = args.spec
        write_spec(args)
        return
    if args.cmd == "check":
        import torch
        torch.set_num_threads(1)
        import check
        sys.exit(check.main(args.spec, args.slab))
    if not args.spec:
        ap.error("%s needs a job spec" % args.cmd)
    if args.cmd in ("rpc", "ddp") and args.role != "rank":  # the launcher: no torch here
        summarize(args.cmd, launch(args.cmd, args, 3 if args.cmd == "rpc" else 2))
        return
    import torch
    torch.set_num_threads(1)  # one thread a process, as the issue measured
    if args.cmd == "one":
        import run_one
        summarize("one", [run_one.run(args.spec, args.steps, args.save)])
    elif args.cmd == "rpc":
        import run_rpc
        run_rpc.run(args.spec, args.steps, args.rank, args.world, args.port, args.save)
    else:
        import run_ddp
        run_ddp.run(args.spec, args.steps, args.rank, args.world, args.port, args.save)


if __name__ == "__main__":
    main()
