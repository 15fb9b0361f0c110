#!/bin/sh
# setup.sh — what the PyTorch peers of the benchmark need (tests/bench/bench_peers.sh):
# Debian's python3-torch and python3-numpy, for /usr/bin/python3 (or
# BENCH_PEERS_PYTHON). Installs them with apt-get when the interpreter cannot
# import them. Called by tests/bench/run.sh (make bench); never by make test.
# Exit 0: ready; 77: cannot install them here (not root, or apt-get failed),
# which run.sh reports as the peers being skipped.
py=${BENCH_PEERS_PYTHON:-/usr/bin/python3}
have() { "$py" -c 'import numpy, torch, torch.distributed.rpc' 2>/dev/null; }
have && exit 0
if [ "$(id -u)" != 0 ]; then
    echo "peers/setup.sh: $py cannot import torch and numpy, and installing python3-torch python3-numpy needs root" >&2
    exit 77
fi
echo "peers/setup.sh: installing python3-torch python3-numpy (apt-get)" >&2
if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-torch python3-numpy; } >&2; then
    echo "peers/setup.sh: apt-get could not install python3-torch python3-numpy" >&2
    exit 77
fi
have || { echo "peers/setup.sh: installed, but $py still cannot import torch (set BENCH_PEERS_PYTHON)" >&2; exit 77; }
