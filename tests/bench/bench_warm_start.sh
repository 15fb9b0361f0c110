#!/usr/bin/env bash
# bench_warm_start.sh — how fast a warm start moves table rows (issue 30's
# target: each row read once, at least 1 million rows/s per PS). A standalone
# cluster of 2 ps_server (with checkpoints) + 1 worker on 127.0.0.1; for N =
# BENCH_WARM_ROWS (default "250000 1000000 4000000") rows of a dim-16 table:
#   (f) a job warm-starts from a safetensors file of N random rows (written by
#       python3 beforehand, not timed), trains 1 step and checkpoints them;
#   (c) a second job warm-starts from that job's final checkpoint on the same
#       PS: the chief exports it (Describe, TableRows pages) to a temporary
#       file, maps it and assigns the rows in the new placement (AssignRows).
#   (s) the same with "slots" and "global_step": the chief reads the
#       checkpoint's records whole (TableRows records, Pull of each slot),
#       stages them as the new job's first checkpoint, commits, restores;
#   (r) the cluster restarts with 3 ps (ps 0 and 1 on their checkpoint
#       directories) and job (f) is submitted again: the chief restores its
#       final checkpoint re-split onto 3 ps (reads every row's record once
#       from the 2 old shards, stages it on its new part, commits, restores).
# The time of (f) and (c) is the one the chief logs ("warm start from ...: ...
# (N rows) in T s"), from reading the source to the last row assigned; of (s)
# from its "staging it onto" line to "initialized job ..."; of (r) from the
# chief's "re-splitting it" line to its "restored ... re-split" line. rows/s per PS = N / T / the source's 2 ps. Synthetic rows (uniform
# random floats). A measurement, not a test: exit 1 only when a process fails.
#
# usage: tests/bench/bench_warm_start.sh [BUILD_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(cd "${1:-${PSC_BIN:-$here/build}}" && pwd)
sizes=${BENCH_WARM_ROWS:-250000 1000000 4000000}
NAME=warm
source "$here/tests/bench/bench_lib.sh"

"$bin/psc_gen_ctr" --out "$work/data" --train_rows 20000 --test_rows 2000 --files 1 --seed 1 \
    >"$work/gen.out" 2>&1 || { cat "$work/gen.out" >&2; echo "bench_warm_start: psc_gen_ctr failed" >&2; exit 1; }

# start NPS — (after stop) ps i on $work/ckptI, 1 worker; sets psctl
start() {
    mapfile -t ports < <("$bin/psc_free_port" $(($1 + 1)))
    local i ps_json=
    for ((i = 0; i < $1; i++)); do ps_json+="\"127.0.0.1:${ports[i]}\","; done
    cluster="{\"ps\": [${ps_json%,}], \"worker\": [\"127.0.0.1:${ports[$1]}\"]}"
    for ((i = 0; i < $1; i++)); do
        TF_CONFIG=$(tfc ps $i) "$bin/ps_server" --checkpoint_dir "$work/ckpt$i" >"$work/ps$i.log" 2>&1 &
        pids+=($!)
    done
    TF_CONFIG=$(tfc worker 0) "$bin/worker" >"$work/w.out" 2>"$work/w.log" &
    pids+=($!)
    for a in "${ports[@]}"; do "$bin/psc_health" "127.0.0.1:$a" 20000 || { echo "bench_warm_start: 127.0.0.1:$a not serving" >&2; exit 1; }; done
    psctl=("$bin/psctl" --cluster "$cluster")
}
stop() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    pids=()
}
tfc() { echo "{\"cluster\": $cluster, \"task\": {\"type\": \"$1\", \"index\": $2}}"; }
start 2

spec() { # FILE SEED ROWS WARM [WARM_KEYS]
    cat >"$1" <<JSON
{"model": {"layers": [{"type": "embedding", "table": "emb", "features": ["C1","C2","C3","C4"]},
                      {"type": "dense", "units": 16}, {"type": "interaction"}, {"type": "dense", "units": 1}],
           "loss": "sigmoid_cross_entropy"},
 "tables": [{"name": "emb", "rows": $3, "dim": 16}],
 "optimizer": {"name": "adam", "learning_rate": 0.001},
 "data": {"format": "criteo", "train": "$work/data/train-*", "test": "$work/data/test.tsv"},
 "batch_size_per_replica": 64, "steps": 1, "seed": $2, "warm_start": {"from": "$4"${5:-}}}
JSON
}

secs_of() { sed -n "s/.*warm start from $1.*(\([0-9]*\) rows) in \([0-9.]*\) s.*/\1 \2/p" "$work/w.log" | tail -1; }
# between_logged A B — seconds from the worker's last line matching A to its last matching B
between_logged() {
    awk -v A="$1" -v B="$2" '$0 ~ A { a = $1 } $0 ~ B { b = $1 }
        function s(x) { split(substr(x, 12, 12), p, ":"); return p[1] * 3600 + p[2] * 60 + p[3] }
        END { printf "%.2f", s(b) - s(a) }' "$work/w.log"
}

printf 'bench_warm_start: a dim-16 table on 2 ps, synthetic rows; the time the chief logs\n'
printf '%10s  %-34s %10s %14s\n' rows source seconds rows/s/ps
for n in $sizes; do
    python3 - "$work/rows.st" "$n" <<'PY'
import json, os, struct, sys
path, n = sys.argv[1], int(sys.argv[2])
stride = max(1, (1 << 30) // n)       # ids spread over the table's 2^30 rows
h = {"emb/ids": {"dtype": "I64", "shape": [n], "data_offsets": [0, 8 * n]},
     "emb/values": {"dtype": "F32", "shape": [n, 16], "data_offsets": [8 * n, 8 * n + 64 * n]}}
hb = json.dumps(h, separators=(",", ":")).encode()
hb += b" " * ((8 - len(hb) % 8) % 8)
with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(hb)) + hb)
    f.write(b"".join(struct.pack("<q", i * stride) for i in range(n)))
    vals = os.urandom(64 * n)           # random bits: make each float finite in [1, 2)
    f.write(bytes(b if k % 4 != 3 else 0x3f for k, b in enumerate(vals)))
PY
    spec "$work/f.json" "$n" 1073741824 "$work/rows.st"
    "${psctl[@]}" train "$work/f.json" >/dev/null 2>"$work/f.err" || { tail -3 "$work/f.err" >&2; exit 1; }
    job=$(sed -n 's/.*job \([0-9a-f]*\) submitted.*/\1/p' "$work/f.err")
    read -r got t < <(secs_of "file")
    printf '%10s  %-34s %10s %14.0f\n' "$got" "safetensors file" "$t" "$(awk -v n="$got" -v t="$t" 'BEGIN { print n / t / 2 }')"
    spec "$work/c.json" "$((n + 1))" 1073741824 "$job"
    "${psctl[@]}" train "$work/c.json" >/dev/null 2>"$work/c.err" || { tail -3 "$work/c.err" >&2; exit 1; }
    read -r got t < <(secs_of "checkpoint")
    printf '%10s  %-34s %10s %14.0f\n' "$got" "checkpoint of job $job" "$t" "$(awk -v n="$got" -v t="$t" 'BEGIN { print n / t / 2 }')"
    spec "$work/s.json" "$((n + 2))" 1073741824 "$job" ', "slots": true, "global_step": true'
    "${psctl[@]}" train "$work/s.json" >/dev/null 2>"$work/s.err" || { tail -3 "$work/s.err" >&2; exit 1; }
    got=$(sed -n 's/.*warm start from checkpoint .* (\([0-9]*\) rows) with their optimizer slots.*/\1/p' "$work/w.log" | tail -1)
    t=$(between_logged "staging it onto these" "initialized job .* model on the PS")
    printf '%10s  %-34s %10s %14.0f\n' "$got" "the same, with slots and step" "$t" "$(awk -v n="$got" -v t="$t" 'BEGIN { print n / t / 2 }')"
    stop
    start 3
    "${psctl[@]}" train "$work/f.json" >/dev/null 2>"$work/r.err" || { tail -3 "$work/r.err" >&2; exit 1; }
    got=$(sed -n 's/.*staged: .*, \([0-9]*\) of them table rows.*/\1/p' "$work/w.log" | tail -1)
    t=$(between_logged "re-splitting it onto" "restored job .* re-split from")
    printf '%10s  %-34s %10s %14.0f\n' "$got" "job $job's checkpoint, 2 -> 3 ps" "$t" "$(awk -v n="$got" -v t="$t" 'BEGIN { print n / t / 2 }')"
    [ -z "${BENCH_WARM_VERBOSE:-}" ] || grep -E "re-split|staged|restored|prepared|committed" "$work/w.log" "$work"/ps*.log >&2
    stop
    start 2
done
