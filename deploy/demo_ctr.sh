#!/usr/bin/env bash
# demo_ctr.sh — `make demo-ctr`: a click-through model trained on synthetic
# Criteo-format data by a local cluster (2 ps_server + 2 worker on 127.0.0.1).
#
# psc_gen_ctr writes 2,000,000 training rows (2 gzip shards) and 200,000 test
# rows of Criteo's click-log TSV from a planted model (its data are SYNTHETIC:
# no public click log can be installed here; real Criteo files work as they
# are) into DATA (default BUILD/ctr-data, reused when it is there; a DATA that
# holds other files is refused, exit 73, and left as it is), and prints
# the planted model's test AUC, the best any model can reach. The cluster then
# trains deploy/jobs/ctr.json (a DLRM-style model with a wide part; its one
# embedding table is declared with 10^8 rows) and the chief prints
# "test AUC: A"; the script ends with both AUCs side by side.
#
# usage: deploy/demo_ctr.sh [--build DIR] [--data DIR] [--job_spec FILE] [-- extra worker flags...]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build="$here/build"
data=""
job_spec="$here/deploy/jobs/ctr.json"
extra=()
while [ $# -gt 0 ]; do
    case $1 in
        --build) build=$2; shift 2 ;;
        --data) data=$2; shift 2 ;;
        --job_spec) job_spec=$2; shift 2 ;;
        --) shift; extra=("$@"); break ;;
        -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
        *) echo "demo_ctr.sh: unknown option $1 (see --help)" >&2; exit 64 ;;
    esac
done
[ -n "$data" ] || data="$build/ctr-data"
if [ ! -s "$data/planted.txt" ]; then
    # Never delete or overwrite what this script did not write: generate only into a new or
    # empty directory, or into one it marked as its own (a generation cut short).
    if [ -d "$data" ] && [ -n "$(ls -A "$data")" ] && [ ! -f "$data/.psc-demo-ctr" ]; then
        echo "demo_ctr.sh: --data $data is not empty and was not written by this script (no .psc-demo-ctr in it):" \
            "nothing was changed; give --data a new or empty directory (your own Criteo files: pass your job spec" \
            "to deploy/local_cluster.sh instead)" >&2
        exit 73
    fi
    [ -x "$build/psc_gen_ctr" ] || { echo "demo_ctr.sh: no psc_gen_ctr in $build (run make build)" >&2; exit 69; }
    echo "demo_ctr.sh: generating synthetic Criteo-format data in $data" >&2
    mkdir -p "$data"
    : >"$data/.psc-demo-ctr"
    "$build/psc_gen_ctr" --out "$data" --train_rows 2000000 --test_rows 200000 --files 2 --gzip --seed 1 \
        >"$data/gen.out"
    cat "$data/gen.out" >&2
    grep "planted" "$data/gen.out" >"$data/planted.txt"
fi
# the spec names its files relative to DATA: point it there
logdir=$(mktemp -d /tmp/psc-ctr.XXXXXX)
sed "s#@DATA@#$data#g" "$job_spec" >"$logdir/job.json"
set +e
"$here/deploy/local_cluster.sh" --build "$build" --job_spec "$logdir/job.json" --logdir "$logdir" -- "${extra[@]}"
rc=$?
set -e
[ "$rc" = 0 ] || exit "$rc"
auc=$(sed -n 's/^test AUC: //p' "$logdir/worker0.out")
echo "synthetic data: $(cat "$data/planted.txt")"
echo "test AUC: $auc (the cluster's model)"
