#!/usr/bin/env bash
# mutate.sh — does the emulated CUDA test catch real CUDA bugs? (not in `make test`)
#
#   tests/cuda_emu/mutate.sh [BUILD_DIR]          (default: build-mutate)
#   ONLY='interaction|bag' tests/cuda_emu/mutate.sh [BUILD_DIR]
#                                                 (only the mutations whose name matches the ERE)
#
# Injects one bug at a time into a COPY of worker/tower/tower_cuda.cu (the source file
# is never touched), builds test_tower_cuda_emu against the copy (CMake's
# PSC_CUDA_EMU_SRC, in BUILD_DIR), runs it, and prints a table: the mutation,
# whether a test failed ("caught"), and which check saw it (the failed tests and
# the first "cuda emu: MISTAKE" or cmocka error line). The unmutated copy must
# pass first. A mutation whose text is no longer in tower_cuda.cu shows "n/a"
# (update its pattern below). Exit 0 when every applicable mutation is caught.
# Needs python3 (the replacements), cmake and g++.
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
B=${1:-$SRC/build-mutate}
mkdir -p "$B/mutants"
B=$(cd "$B" && pwd)
ORIG=$SRC/worker/tower/tower_cuda.cu
MUT=$B/mutants/tower_cuda.cu
LOG=$B/mutants
JOBS=${JOBS:-2}

# name | exact text in tower_cuda.cu | its replacement ("\n" is a newline)
MUTATIONS=$(cat <<'EOF'
swapped GEMM transposes (cuda_gemm passes op(A) for B)|trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N|trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N
sync does not wait (the walk reads the losses unsynchronized)|static int cuda_sync(tower_dev_t *d)\n{\n    CUDA_CHECK(cudaStreamSynchronize(d->stream));|static int cuda_sync(tower_dev_t *d)\n{\n    (void)d;
select does not set the device (towers on other GPUs run on the current one)|static int cuda_select(tower_dev_t *d)\n{\n    CUDA_CHECK(cudaSetDevice(d->device));|static int cuda_select(tower_dev_t *d)\n{\n    (void)d;
half a warp returns before the loss kernel's shuffles|int lane = threadIdx.x & 31;|int lane = threadIdx.x & 31;\n    if (lane >= 16) return;
swapped kx/ky in col2im|(ky * g.kw + kx) * g.in_c + c]|(kx * g.kw + ky) * g.in_c + c]
kernels on the default stream (CUDA_LAUNCH)|BLOCK, 0, (d)->stream>>>|BLOCK, 0, 0>>>
removed __syncthreads in the bias gradient|    acc[threadIdx.y][threadIdx.x] = sum;\n    __syncthreads();|    acc[threadIdx.y][threadIdx.x] = sum;
wrong copy direction for uploads (the input batch, the parameters)|cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice|cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyDeviceToHost
peer copy names the wrong source device|cudaMemcpyPeerAsync(dst, d->device, src, from->device|cudaMemcpyPeerAsync(dst, d->device, src, d->device
alloc does not clear the device slab|CUDA_CHECK(cudaMemsetAsync(*out, 0, bytes, d->stream));|
dropout mask counted from the slice, not the batch (element0 ignored)|psc_dropout_bits(seed, layer, element0 + (uint64_t)i)|psc_dropout_bits(seed, layer, (uint64_t)i)
embedding bag forward: the row index not scaled by dim (idx not offset)|sum += w[k] * rows[(int64_t)idx[k] * dim + c]|sum += w[k] * rows[(int64_t)idx[k] + c]
interaction backward: the partner's pair index swapped|g[a < b ? pair_index(a, b, P) : pair_index(b, a, P)]|g[a < b ? pair_index(b, a, P) : pair_index(a, b, P)]
sigmoid loss gradient not divided by the batch size|dlogits[i] = (float)((1.0 / (1.0 + exp(-z)) - label) / n)|dlogits[i] = (float)(1.0 / (1.0 + exp(-z)) - label)
EOF
)

build() {
    cmake --build "$B" -j"$JOBS" --target test_tower_cuda_emu >"$LOG/build.log" 2>&1 </dev/null
}

# runs the test; sets rc and which
run_test() {
    (cd "$B" && PSC_EMU_DEVICES=2 PSC_EMU_PEER=1 timeout 600 ./test_tower_cuda_emu </dev/null) >"$LOG/run.log" 2>&1
    rc=$?
    local failed first
    failed=$(grep -E '^\[  FAILED  \] test_' "$LOG/run.log" | sed 's/^\[  FAILED  \] //' | sort -u | paste -sd, -)
    first=$(grep -m1 'cuda emu: MISTAKE' "$LOG/run.log" | sed 's/^cuda emu: //')
    # cmocka: fail_msg's text as "ERROR: ...", an assert's on the line before "[   LINE   ]"
    [ -n "$first" ] || first=$(grep -m1 '^ERROR: ' "$LOG/run.log" | sed 's/^ERROR: //')
    [ -n "$first" ] || first=$(grep -m1 -B1 -F '[   LINE   ]' "$LOG/run.log" | head -1 | sed 's/^\[  ERROR   \] --- //')
    [ -n "$first" ] || first=$(grep -m1 -iE 'error|fail' "$LOG/run.log")
    which="${failed:-exit $rc}: ${first:0:150}"
}

cp "$ORIG" "$MUT"
echo "configuring $B (PSC_CUDA_EMU_SRC=$MUT)"
cmake -S "$SRC" -B "$B" -DPSC_CUDA=OFF -DPSC_CUDA_EMU=ON -DPSC_CUDA_EMU_SRC="$MUT" >"$LOG/cmake.log" 2>&1 ||
    { cat "$LOG/cmake.log"; exit 2; }
echo "baseline: the unmutated copy"
build || { tail -30 "$LOG/build.log"; echo "mutate: the unmutated build fails"; exit 2; }
run_test
if [ "$rc" -ne 0 ]; then
    tail -30 "$LOG/run.log"
    echo "mutate: the unmutated test fails (rc $rc); fix that first"
    exit 2
fi

rows=()
missed=0
i=0
while IFS='|' read -r name from to; do
    [ -n "$name" ] || continue
    i=$((i + 1))
    if [ -n "${ONLY:-}" ] && ! grep -qE -- "$ONLY" <<<"$name"; then continue; fi
    cp "$ORIG" "$MUT"
    if ! FROM="$from" TO="$to" python3 - "$MUT" <<'PY'
import os, sys
p = sys.argv[1]
src = open(p).read()
old = os.environ["FROM"].replace("\\n", "\n")
new = os.environ["TO"].replace("\\n", "\n")
if src.count(old) != 1:
    sys.exit(1)  # not there (or not unique): the mutation does not apply
open(p, "w").write(src.replace(old, new))
PY
    then
        rows+=("$i|$name|n/a|pattern not found once in tower_cuda.cu")
        continue
    fi
    echo "[$i] $name"
    if ! build; then
        rows+=("$i|$name|yes|does not compile: $(grep -m1 'error' "$LOG/build.log" | cut -c1-120)")
        continue
    fi
    run_test
    cp "$LOG/run.log" "$LOG/run.$i.log"
    if [ "$rc" -ne 0 ]; then
        rows+=("$i|$name|yes|$which")
    else
        rows+=("$i|$name|NO|every test passed")
        missed=$((missed + 1))
    fi
done <<<"$MUTATIONS"

cp "$ORIG" "$MUT"
build >/dev/null 2>&1 # leave the build on the unmutated copy

echo
printf '| # | mutation | caught | which check (failed tests: first report) |\n|---|---|---|---|\n'
for r in "${rows[@]}"; do
    IFS='|' read -r n name caught which <<<"$r"
    printf '| %s | %s | %s | %s |\n' "$n" "$name" "$caught" "$(printf '%s' "$which" | sed 's/|/\\|/g')"
done
echo
echo "logs: $LOG/run.N.log"
[ "$missed" -eq 0 ]
