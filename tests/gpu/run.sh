#!/usr/bin/env bash
# tests/gpu/run.sh — everything psc can check on a machine with an NVIDIA GPU, in one
# run of under 8 minutes (issue 32), ending with one summary:
#
#   preflight    the GPU (nvidia-smi: name, compute capability, memory, driver), nvcc, and
#                the Debian packages the build needs; missing ones are installed with apt-get
#                where it can reach a mirror (only those, never deploy/setup.sh, which also
#                fetches test tools the GPU run does not need), else named, and nothing more runs
#   configure    a build folder for the present GPU only (CMAKE_CUDA_ARCHITECTURES=90 on an
#                H100/H200: one SASS, no PTX of other cards to compile)
#   build        only the programs below, -j$(nproc)
#   cuda tests   ctest -L '^cuda$': unit.test_tower_cuda and unit.test_tower_ops on the real
#                device (they exit 77, skipped, where no GPU is visible: here that is a failure)
#   bench_tower  one tower's training step, CPU against GPU (BENCH_SECS per point, default 3)
#   demo-cnn     make demo-cnn's cluster (2 ps + 2 workers, deploy/local_cluster.sh) on
#                deploy/jobs/cnn.json with `--devices gpu:0` for both workers, its 10 epochs
#                (GPU_RUN_CNN_EPOCHS); a run cut by its time limit still shows the examples/s
#   demo-ctr     make demo-ctr (deploy/demo_ctr.sh) with `--devices gpu:0`, on GPU_RUN_CTR_ROWS
#                synthetic rows (default 1,000,000 of the demo's 2,000,000; test rows a tenth)
#
# The towers are chosen by the worker's --devices flag (a job spec does not name devices);
# both demo scripts pass what follows `--` to every worker. A worker asked for a GPU it cannot
# use exits 78 with the reason, never trains on the CPU instead, so a passing demo ran on the GPU.
#
# Every step has its own time limit, cut to what is left of the whole run's budget
# (GPU_RUN_BUDGET, default 470 s), and the script goes on past a failed step to the summary
# (steps that need a failed one are "not run"). Each step's output goes to LOGS/<step>.log,
# the clusters' ps and worker logs to LOGS/demo-*/. Exit 0 only when every step passed.
#
# usage: tests/gpu/run.sh [--dry-run] [--build DIR] [--out DIR] [--work DIR] [--no-build]
#                         [--skip STEP,...]
#   --dry-run    (or GPU_RUN_DRY=1) on a machine without a GPU: the same flow with the GPU
#                steps replaced by their CPU equivalents (--devices cpu, bench_tower's CPU rows,
#                the CUDA tests expected to skip) on smaller data, building for GPU_RUN_ARCH
#                (default 90); skipped steps are not failures. Tests the script's plumbing.
#   --build DIR  (GPU_RUN_BUILD) build folder, default build-gpu
#   --out DIR    (GPU_RUN_OUT) the report: summary.txt and logs/; default $OUT where that is
#                set (then packed as logs.tar.gz: what comes back from a lent machine is a few
#                files), else BUILD/gpu-report
#   --work DIR   (GPU_RUN_WORK) scratch: the CTR data, the clusters' checkpoints; default
#                BUILD/gpu-work
#   --no-build   use the programs already in --build (no configure, no build; the preflight
#                checks that they find their libraries instead of the build's packages)
#   --skip LIST  steps not to run (cuda_tests, bench_tower, demo_cnn, demo_ctr), shown as skip
# Other settings: GPU_RUN_BUDGET (s), GPU_RUN_ARCH (e.g. 90; default from nvidia-smi),
# GPU_RUN_NO_INSTALL=1 (never apt-get), GPU_RUN_FASHION_MNIST (folder of the IDX files,
# default /usr/share/datasets/fashion-mnist), BENCH_SECS, GPU_RUN_CNN_EPOCHS,
# GPU_RUN_CTR_ROWS.
set -u
src=$(cd "$(dirname "$0")/../.." && pwd)
dry=${GPU_RUN_DRY:-0}
build=${GPU_RUN_BUILD:-$src/build-gpu}
out=${GPU_RUN_OUT:-}
work=${GPU_RUN_WORK:-}
no_build=0
skip_steps=","
while [ $# -gt 0 ]; do
    case $1 in
        --build|--out|--work|--skip) [ $# -ge 2 ] || { echo "run.sh: $1 needs a value (see --help)" >&2; exit 64; } ;;
    esac
    case $1 in
        --dry-run) dry=1; shift ;;
        --build) build=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --work) work=$2; shift 2 ;;
        --no-build) no_build=1; shift ;;
        --skip) skip_steps=",$2,"; shift 2 ;;
        -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {print}' "$0"; exit 0 ;;
        *) echo "run.sh: unknown option $1 (see --help)" >&2; exit 64 ;;
    esac
done
[ "$dry" = 1 ] || dry=0
for s in ${skip_steps//,/ }; do
    case $s in
        cuda_tests|bench_tower|demo_cnn|demo_ctr) ;;
        *) echo "run.sh: --skip $s: not a step (cuda_tests, bench_tower, demo_cnn, demo_ctr)" >&2; exit 64 ;;
    esac
done
mkdir -p "$build" || exit 1
build=$(cd "$build" && pwd)
[ -n "$out" ] || out=${OUT:-$build/gpu-report}
[ -n "$work" ] || work=$build/gpu-work
mkdir -p "$out" "$work" || exit 1
out=$(cd "$out" && pwd)
work=$(cd "$work" && pwd)
logs=$out/logs
rm -rf "$logs" "$out/summary.txt" "$out/logs.tar.gz"
mkdir -p "$logs"

budget=${GPU_RUN_BUDGET:-470}
bench_secs=${BENCH_SECS:-3}
mnist=${GPU_RUN_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
if [ "$dry" = 1 ]; then
    cnn_epochs=${GPU_RUN_CNN_EPOCHS:-1}
    ctr_rows=${GPU_RUN_CTR_ROWS:-40000}
    devices=cpu
else
    cnn_epochs=${GPU_RUN_CNN_EPOCHS:-10}
    ctr_rows=${GPU_RUN_CTR_ROWS:-1000000}
    devices=gpu:0
fi
jobs=$(nproc 2>/dev/null || echo 4)
targets=(ps_server worker psctl psc_free_port psc_health psc_gen_ctr bench_tower test_tower_cuda test_tower_ops)

# ---- steps: status (pass, fail, skip, not run), seconds, one line of detail ----
steps=(preflight configure build cuda_tests bench_tower demo_cnn demo_ctr)
declare -A st_status st_secs st_detail
for s in "${steps[@]}"; do st_status[$s]="not run"; st_secs[$s]=0; st_detail[$s]=""; done

say() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*"; }

# record STEP STATUS DETAIL
record() {
    st_status[$1]=$2
    st_detail[$1]=$3
    say "$1: $2${3:+ — $3}"
}

# left — seconds left of the budget, keeping 5 for the summary
left() { echo $((budget - SECONDS - 5)); }

# run_timed STEP CAP CMD... — runs CMD with its output in LOGS/STEP.log under a limit of CAP
# seconds or what is left of the budget; sets RC (124: timed out) and the step's seconds.
run_timed() {
    local step=$1 cap=$2 t t0
    shift 2
    t=$(left)
    [ "$t" -lt "$cap" ] || t=$cap
    if [ "$t" -lt 10 ]; then
        RC=125
        echo "no time left in the budget of ${budget} s" >>"$logs/$step.log"
        return
    fi
    t0=$SECONDS
    echo "\$ $* (limit ${t} s)" >>"$logs/$step.log"
    timeout -k 10 "$t" "$@" >>"$logs/$step.log" 2>&1
    RC=$?
    st_secs[$step]=$((st_secs[$step] + SECONDS - t0))
    [ "$RC" != 124 ] && [ "$RC" != 137 ] || echo "TIMED OUT after ${t} s" >>"$logs/$step.log"
}

# why_failed RC — the words for a failed run_timed
why_failed() {
    case $1 in
        124|137) echo "timed out" ;;
        125) echo "no time left in the budget" ;;
        *) echo "exit $1" ;;
    esac
}

# ---- preflight ----
gpu_line="none"
arch=""
nvcc=""
missing_pkgs=()
missing_what=()
need() { missing_what+=("$1"); missing_pkgs+=("$2"); }

check_deps() {
    missing_pkgs=(); missing_what=()
    local p
    for p in cmake:cmake cc:build-essential c++:build-essential pkg-config:pkg-config protoc-c:protobuf-c-compiler; do
        command -v "${p%%:*}" >/dev/null 2>&1 || need "program ${p%%:*}" "${p#*:}"
    done
    for p in grpc:libgrpc-dev gpr:libgrpc-dev libprotobuf-c:libprotobuf-c-dev rocksdb:librocksdb-dev \
        jansson:libjansson-dev openblas:libopenblas-dev cmocka:libcmocka-dev libssl:libssl-dev zlib:zlib1g-dev; do
        pkg-config --exists "${p%%:*}" 2>/dev/null || need "pkg-config module ${p%%:*}" "${p#*:}"
    done
    echo '#include <dnnl.h>' | cc -E -x c - >/dev/null 2>&1 || need "header dnnl.h (oneDNN)" libdnnl-dev
    [ -f /usr/share/grpc-proto/grpc/health/v1/health.proto ] ||
        need "/usr/share/grpc-proto/grpc/health/v1/health.proto" grpc-proto
}

# install_missing PKG... — apt-get install of the packages, where apt can (root or sudo
# without a password) and a mirror answers; returns 0 when it installed them all.
install_missing() {
    [ "${GPU_RUN_NO_INSTALL:-0}" != 1 ] || { echo "GPU_RUN_NO_INSTALL=1: not installing"; return 1; }
    command -v apt-get >/dev/null 2>&1 || { echo "no apt-get on this machine"; return 1; }
    local sudo=()
    if [ "$(id -u)" != 0 ]; then
        sudo -n true 2>/dev/null || { echo "not root and no password-less sudo: cannot apt-get"; return 1; }
        sudo=(sudo -n)
    fi
    local pkgs
    pkgs=$(printf '%s\n' "$@" | sort -u | tr '\n' ' ')
    echo "installing: $pkgs"
    # shellcheck disable=SC2086 # one word per package
    timeout 60 "${sudo[@]}" apt-get update -qq &&
        timeout 150 "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $pkgs
}

preflight() {
    local log=$logs/preflight.log t0=$SECONDS problems=() notes=() q="" cuda_drv=""
    {
        echo "machine: $(uname -srm), $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
        [ -r /etc/os-release ] && sed -n 's/^PRETTY_NAME=//p' /etc/os-release
        echo "source: $src ($(git -C "$src" describe --always --dirty 2>/dev/null || echo "no git"))"
    } >>"$log"
    # the GPU
    if [ "$dry" = 1 ]; then
        gpu_line="none: dry run on ${HOSTNAME:-this machine} (CPU equivalents of the GPU steps)"
        arch=${GPU_RUN_ARCH:-90}
    elif ! command -v nvidia-smi >/dev/null 2>&1; then
        gpu_line="none found"
        problems+=("no nvidia-smi: no NVIDIA driver (on a machine without a GPU use --dry-run)")
    else
        q=$(timeout 30 nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv,noheader 2>>"$log")
        # a driver older than the compute_cap field (before 510): the name, and CMake's "native"
        [ -n "$q" ] || q=$(timeout 30 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>>"$log" |
            awk -F', ' '{printf "%s, ?, %s, %s\n", $1, $2, $3}')
        timeout 30 nvidia-smi >>"$log" 2>&1
        echo "nvidia-smi --query-gpu: $q" >>"$log"
        if [ -z "$q" ]; then
            gpu_line="none found"
            problems+=("nvidia-smi lists no GPU (see preflight.log)")
        else
            local first caps
            first=$(echo "$q" | head -1)
            cuda_drv=$(timeout 30 nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -1)
            gpu_line="$(echo "$first" | awk -F', ' '{printf "%s, compute capability %s, %s, driver %s", $1, $2, $3, $4}')"
            [ -z "$cuda_drv" ] || gpu_line="$gpu_line (supports CUDA $cuda_drv)"
            [ "$(echo "$q" | wc -l)" = 1 ] || gpu_line="$gpu_line; $(echo "$q" | wc -l) GPUs, the demos use gpu:0"
            # 9.0 -> 90; several kinds of GPU: each one's
            caps=$(echo "$q" | awk -F', ' '{gsub(/\./, "", $2); print $2}' | grep -E '^[0-9]+$' | sort -u | paste -sd';')
            arch=${GPU_RUN_ARCH:-${caps:-native}}
        fi
    fi
    # nvcc: the build has a CUDA tower only with it
    if [ -x /usr/local/cuda/bin/nvcc ]; then nvcc=/usr/local/cuda/bin/nvcc; else nvcc=$(command -v nvcc || true); fi
    if [ -n "$nvcc" ]; then
        local rel
        rel=$("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
        echo "nvcc: $nvcc (CUDA $rel)" >>"$log"
        notes+=("nvcc $rel")
        # the CUDA runtime refuses a driver older than itself (the worker says so and exits 78)
        if [ -n "${cuda_drv:-}" ] && [ -n "$rel" ] && [ "$(printf '%s\n' "$cuda_drv" "$rel" | sort -V | head -1)" != "$rel" ]; then
            notes+=("the driver supports CUDA $cuda_drv, older than nvcc's $rel: the GPU steps will fail (a newer driver, or a CUDA $cuda_drv toolkit)")
        fi
    elif [ "$dry" = 1 ]; then
        notes+=("no nvcc: the build has no CUDA tower")
    else
        problems+=("no nvcc (the CUDA toolkit: /usr/local/cuda/bin/nvcc or on PATH)")
    fi
    # the build's packages; with --no-build, the programs' libraries
    if [ "$no_build" = 1 ]; then
        local t lib
        for t in "${targets[@]}"; do
            [ -x "$build/$t" ] || { problems+=("--no-build: no $build/$t"); continue; }
            lib=$(ldd "$build/$t" 2>&1 | sed -n 's/^[[:space:]]*\([^ ]*\) => not found.*/\1/p' | paste -sd' ')
            [ -z "$lib" ] || problems+=("$t: libraries not found: $lib")
        done
        missing_pkgs=()
    else
        check_deps
    fi
    # demo-cnn's data: installed with the build's packages where apt works, not required
    local extra=() why=""
    [ -f "$mnist/train-images-idx3-ubyte.gz" ] || [ "$mnist" != /usr/share/datasets/fashion-mnist ] ||
        extra=(dataset-fashion-mnist)
    if [ ${#missing_pkgs[@]} -gt 0 ] || [ ${#extra[@]} -gt 0 ]; then
        printf 'missing: %s\n' "${missing_what[@]}" "${extra[@]}" >>"$log"
        why=$(install_missing "${missing_pkgs[@]}" "${extra[@]}" 2>&1 | tee -a "$log" | tail -1)
        [ "$no_build" = 1 ] || check_deps
    fi
    if [ ${#missing_pkgs[@]} -gt 0 ]; then
        problems+=("missing packages: $(printf '%s\n' "${missing_pkgs[@]}" | sort -u | paste -sd' ') (for $(printf '%s\n' "${missing_what[@]}" | paste -sd',' | sed 's/,/, /g'); not installed here: ${why:-apt-get failed})")
    fi
    [ -f "$mnist/train-images-idx3-ubyte.gz" ] ||
        notes+=("no Fashion-MNIST in $mnist (dataset-fashion-mnist; GPU_RUN_FASHION_MNIST=DIR): demo-cnn cannot run")
    st_secs[preflight]=$((SECONDS - t0))
    if [ ${#problems[@]} -gt 0 ]; then
        printf 'PROBLEM: %s\n' "${problems[@]}" >>"$log"
        record preflight fail "$(printf '%s; ' "${problems[@]}" | sed 's/; $//')"
        return 1
    fi
    record preflight pass "$(printf '%s; ' "${notes[@]}" | sed 's/; $//')"
}

# ---- configure and build ----
configure() {
    local args=(-S "$src" -B "$build" -DPSC_WERROR=OFF)
    [ -f "$build/CMakeCache.txt" ] || ! command -v ninja >/dev/null 2>&1 || args+=(-G Ninja)
    if [ -n "$nvcc" ]; then
        args+=(-DPSC_CUDA=ON "-DCMAKE_CUDA_COMPILER=$nvcc" "-DCMAKE_CUDA_ARCHITECTURES=$arch")
    fi
    run_timed configure 120 cmake "${args[@]}"
    [ "$RC" = 0 ] || { record configure fail "cmake: $(why_failed "$RC") (configure.log)"; return 1; }
    local tower
    tower=$(sed -n 's/.*psc: CUDA tower \(ON\|OFF\).*/\1/p' "$logs/configure.log" | tail -1)
    if [ -n "$nvcc" ] && [ "$tower" != ON ]; then
        record configure fail "CUDA tower $tower with nvcc $nvcc (configure.log)"
        return 1
    fi
    record configure pass "CMAKE_CUDA_ARCHITECTURES=${arch:-none}, CUDA tower ${tower:-?}"
}

build_targets() {
    run_timed build 300 cmake --build "$build" -j "$jobs" --target "${targets[@]}"
    [ "$RC" = 0 ] || { record build fail "$(why_failed "$RC") (build.log: $(grep -m1 -E 'error|Error' "$logs/build.log" | cut -c1-120))"; return 1; }
    record build pass "${#targets[@]} programs, -j$jobs"
}

# ---- the CUDA tower's tests ----
cuda_tests() {
    run_timed cuda_tests 180 bash -c "cd '$build' && ctest -L '^cuda\$' --no-tests=error --verbose --timeout 150"
    local lines np ns nf names
    lines=$(grep -E 'Test +#[0-9]+: ' "$logs/cuda_tests.log")
    np=$(grep -c ' Passed ' <<<"$lines")
    ns=$(grep -c -E '\*\*\*Skipped|Not Run' <<<"$lines")
    nf=$(($(grep -c . <<<"$lines") - np - ns))
    names=$(sed -nE 's/.*Test +#[0-9]+: ([^ ]+) [ .*]*([^0-9]*[^ 0-9]) +([0-9.]+) sec.*/\1 \2 \3 s/p' <<<"$lines" | paste -sd',' | sed 's/,/, /g')
    local counts="$np passed, $nf failed, $ns skipped"
    if [ "$RC" != 0 ] && [ "$nf" = 0 ]; then
        record cuda_tests fail "ctest $(why_failed "$RC"); $counts${names:+ ($names)}"
    elif [ "$nf" != 0 ]; then
        record cuda_tests fail "$counts ($names)"
    elif [ "$ns" != 0 ]; then
        local why
        why=$(sed -nE 's/^([0-9]+: )?(SKIP.*)/\2/p' "$logs/cuda_tests.log" | head -1)
        if [ "$dry" = 1 ]; then
            record cuda_tests skip "$counts ($names): ${why:-skipped} (dry run: no GPU)"
        else
            record cuda_tests fail "$counts ($names): ${why:-skipped}: the tests saw no usable GPU"
        fi
    elif [ "$np" = 0 ]; then
        record cuda_tests fail "no test ran"
    else
        record cuda_tests pass "$counts ($names)"
    fi
}

# ---- bench_tower: CPU against GPU ----
bench() {
    run_timed bench_tower 90 "$build/bench_tower" "$bench_secs"
    [ "$RC" = 0 ] || { record bench_tower fail "$(why_failed "$RC") (bench_tower.log)"; return 1; }
    # "cnn 28x28x1 ... cpu STEPS MS/STEP EXAMPLES/S LOSS" -> "cnn cpu EXAMPLES/S MS/STEP"
    local rows m detail="" bad=0 c g
    rows=$(sed -nE 's/^(cnn|mlp) .* (cpu|cuda) +([0-9]+) +([0-9.]+) +([0-9]+) +([0-9.]+).*/\1 \2 \5 \4/p' "$logs/bench_tower.log")
    for m in cnn mlp; do
        c=$(awk -v m=$m '$1 == m && $2 == "cpu" {print $3}' <<<"$rows")
        g=$(awk -v m=$m '$1 == m && $2 == "cuda" {print $3}' <<<"$rows")
        [ -n "$c" ] || bad=1
        if [ -n "$c" ] && [ -n "$g" ]; then
            detail="$detail; $m: cpu $c, gpu $g examples/s ($(awk -v c="$c" -v g="$g" 'BEGIN {printf "%.1fx", g / c}'))"
        else
            detail="$detail; $m: cpu ${c:-?}, gpu ${g:-n/a} examples/s"
            [ -n "$g" ] || [ "$dry" = 1 ] || bad=1
        fi
    done
    detail="batch 256, ${bench_secs} s a point, the CPU tower on the libraries' default threads (${jobs} CPUs)${detail}"
    [ "$dry" != 1 ] || detail="$detail (dry run: $(grep -m1 '^cuda:' "$logs/bench_tower.log" || echo "cpu only"))"
    if [ "$bad" = 1 ]; then
        record bench_tower fail "$detail$(grep -m1 '^cuda:' "$logs/bench_tower.log" | sed 's/^/; /')"
    else
        record bench_tower pass "$detail"
    fi
}

# ---- the demos ----
# gpu_watch_start / gpu_watch_stop STEP — samples the GPU's use while a demo runs; the stop
# sets gpu_peak ("; GPU peak U% busy, M MiB", or empty)
watch_pid=""
gpu_peak=""
gpu_watch_start() {
    [ "$dry" = 0 ] || return 0
    nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader,nounits -lms 500 -i 0 \
        >"$logs/$1-gpu.csv" 2>/dev/null &
    watch_pid=$!
}
gpu_watch_stop() {
    gpu_peak=""
    [ -n "$watch_pid" ] || return 0
    kill "$watch_pid" 2>/dev/null
    wait "$watch_pid" 2>/dev/null
    watch_pid=""
    gpu_peak=$(awk -F', *' 'NF >= 2 && $1 + 0 == $1 {if ($1 > u) u = $1; if ($2 > m) m = $2}
        END {if (NR) printf "; GPU peak %d%% busy, %d MiB", u, m}' "$logs/$1-gpu.csv")
}

# demo_rates LOGDIR — "E0 + E1 = SUM examples/s" from the workers' "finished N steps in X s
# (E examples/s)" lines; a worker stopped before it (timed out) by its last progress line's, as ~E
demo_rates() {
    local f r rates=()
    for f in "$1"/worker*.log; do
        [ -f "$f" ] || continue
        r=$(sed -n 's/.*finished [0-9]* steps in [0-9.]* s (\([0-9]*\) examples\/s).*/\1/p' "$f" | tail -1)
        [ -n "$r" ] || r=$(sed -n 's/.* examples\/s \([0-9]*\).*/~\1/p' "$f" | tail -1)
        [ -z "$r" ] || rates+=("$r")
    done
    case ${#rates[@]} in
        0) echo "no examples/s logged" ;;
        1) echo "${rates[0]} examples/s" ;;
        *) echo "$(printf '%s + ' "${rates[@]}" | sed 's/ + $//') = $(printf '%s\n' "${rates[@]}" | tr -d '~' | awk '{s += $1} END {print s}') examples/s" ;;
    esac
}

# demo_error STEP — the last error a program of the demo printed (the chief's stderr is in the log)
demo_error() {
    grep -E '^(worker|ps_server|psc_[a-z_]+|local_cluster.sh|demo_ctr.sh): | ERROR | FATAL ' "$logs/$1.log" | tail -1 |
        sed -E 's/^[0-9T:.-]+Z //' | cut -c1-200
}

# copy_cluster_logs FROM TO — the ps and worker logs (not the checkpoints)
copy_cluster_logs() {
    mkdir -p "$2"
    cp "$1"/*.log "$1"/*.out "$2"/ 2>/dev/null
    [ ! -f "$1/job.json" ] || cp "$1/job.json" "$2"/
}

demo_cnn() {
    if [ ! -f "$mnist/train-images-idx3-ubyte.gz" ]; then
        record demo_cnn fail "no Fashion-MNIST in $mnist (install dataset-fashion-mnist or set GPU_RUN_FASHION_MNIST)"
        return 1
    fi
    local spec=$work/cnn.json dir=$work/demo-cnn data_extra=""
    # the demo's spec with GPU_RUN_CNN_EPOCHS epochs (and, in a dry run, a slice of the data)
    [ "$dry" = 0 ] || data_extra='"train_examples": 4000, "test_examples": 1000, '
    sed -E -e "s/\"epochs\": *[0-9]+/\"epochs\": $cnn_epochs/" \
        -e "s#\"data\": *\\{#\"data\": {$data_extra#" \
        -e "s#/usr/share/datasets/fashion-mnist#$mnist#g" "$src/deploy/jobs/cnn.json" >"$spec"
    if ! grep -q "\"epochs\": $cnn_epochs" "$spec" || { [ -n "$data_extra" ] && ! grep -q train_examples "$spec"; }; then
        record demo_cnn fail "could not derive the spec from deploy/jobs/cnn.json (its \"epochs\" or \"data\" changed form)"
        return 1
    fi
    rm -rf "$dir"
    gpu_watch_start demo_cnn
    run_timed demo_cnn 200 bash "$src/deploy/local_cluster.sh" --build "$build" --job_spec "$spec" --logdir "$dir" \
        -- --devices "$devices"
    gpu_watch_stop demo_cnn
    copy_cluster_logs "$dir" "$logs/demo_cnn"
    local acc towers rates
    acc=$(sed -n 's/^test accuracy: //p' "$dir/worker0.out" 2>/dev/null | tail -1)
    towers=$(sed -n 's/.*towers: \([^ ]*\) .*/\1/p' "$dir/worker0.log" 2>/dev/null | head -1)
    rates=$(demo_rates "$dir")
    local detail="test accuracy ${acc:-?}, $rates; $cnn_epochs epoch(s), towers ${towers:-?}$gpu_peak"
    [ "$dry" = 0 ] || detail="$detail (dry run: 4,000 examples)"
    if [ "$RC" != 0 ]; then
        record demo_cnn fail "$(why_failed "$RC"): $(demo_error demo_cnn); $detail (demo_cnn.log, logs/demo_cnn/)"
    elif [ -z "$acc" ]; then
        record demo_cnn fail "no \"test accuracy\" printed; $detail"
    elif [ "$dry" = 0 ] && [ "$towers" != gpu:0 ]; then
        record demo_cnn fail "the worker's towers are '${towers:-?}', not gpu:0; $detail"
    else
        record demo_cnn pass "$detail"
    fi
}

demo_ctr() {
    local data=$work/ctr-data-$ctr_rows test_rows=$((ctr_rows / 10))
    # demo_ctr.sh generates 2,000,000 rows where DATA has no planted.txt: give it fewer,
    # generated here into a folder marked as the demo's own (.psc-demo-ctr), which it reuses
    if [ ! -s "$data/planted.txt" ]; then
        rm -rf "$data"
        mkdir -p "$data" && : >"$data/.psc-demo-ctr"
        run_timed demo_ctr 120 "$build/psc_gen_ctr" --out "$data" --train_rows "$ctr_rows" --test_rows "$test_rows" \
            --files 2 --gzip --seed 1
        if [ "$RC" != 0 ]; then
            record demo_ctr fail "psc_gen_ctr: $(why_failed "$RC") (demo_ctr.log)"
            return 1
        fi
        grep "planted" "$logs/demo_ctr.log" >"$data/planted.txt"
    fi
    gpu_watch_start demo_ctr
    run_timed demo_ctr 200 bash "$src/deploy/demo_ctr.sh" --build "$build" --data "$data" -- --devices "$devices"
    gpu_watch_stop demo_ctr
    local dir auc planted rates=""
    dir=$(sed -n 's/^logs: //p' "$logs/demo_ctr.log" | tail -1)
    if [ -n "$dir" ] && [ -d "$dir" ]; then
        copy_cluster_logs "$dir" "$logs/demo_ctr"
        rates=$(demo_rates "$dir")
        case $dir in /tmp/psc-ctr.*) rm -rf "$dir" ;; esac # demo_ctr.sh's mktemp: the checkpoints
    fi
    auc=$(sed -n 's/^test AUC: \([0-9.]*\) (the cluster.*/\1/p' "$logs/demo_ctr.log" | tail -1)
    planted=$(sed -n 's/.*planted model AUC on the test set: *\([0-9.]*\).*/\1/p' "$data/planted.txt" | head -1)
    local detail="test AUC ${auc:-?} (planted ${planted:-?}), ${rates:-no examples/s logged}; $ctr_rows rows, --devices $devices$gpu_peak"
    if [ "$RC" != 0 ]; then
        record demo_ctr fail "$(why_failed "$RC"): $(demo_error demo_ctr); $detail (demo_ctr.log, logs/demo_ctr/)"
    elif [ -z "$auc" ]; then
        record demo_ctr fail "no \"test AUC\" printed; $detail"
    else
        record demo_ctr pass "$detail"
    fi
}

# ---- the flow ----
say "tests/gpu/run.sh$([ "$dry" = 1 ] && echo " --dry-run"): report in $out, budget ${budget} s"
ok_build=0
if preflight; then
    if [ "$no_build" = 1 ]; then
        record configure skip "--no-build: the programs in $build"
        record build skip "--no-build"
        ok_build=1
        for t in "${targets[@]}"; do [ -x "$build/$t" ] || { record build fail "--no-build: no $build/$t"; ok_build=0; }; done
    elif configure && build_targets; then
        ok_build=1
    fi
fi
if [ "$ok_build" = 1 ]; then
    for s in cuda_tests bench_tower demo_cnn demo_ctr; do
        case $skip_steps in
            *",$s,"*) record "$s" skip "--skip" ;;
            *) case $s in bench_tower) bench ;; *) "$s" ;; esac ;;
        esac
    done
else
    for s in configure build cuda_tests bench_tower demo_cnn demo_ctr; do
        [ "${st_status[$s]}" != "not run" ] || [ -n "${st_detail[$s]}" ] ||
            st_detail[$s]="needs the $([ "${st_status[preflight]}" = pass ] && echo build || echo preflight)"
    done
fi

# ---- the summary ----
total=$SECONDS
# a skip is one asked for (--skip, --no-build) or a dry run's; an unexpected one is a fail
all_ok=1
for s in "${steps[@]}"; do
    case ${st_status[$s]} in
        pass|skip) ;;
        *) all_ok=0 ;;
    esac
done
{
    echo
    echo "== psc GPU run (tests/gpu/run.sh$([ "$dry" = 1 ] && echo " --dry-run")), $(date -u +%Y-%m-%dT%H:%MZ), $(git -C "$src" describe --always --dirty 2>/dev/null || echo "no git") =="
    printf '%-12s %s\n' "GPU" "$gpu_line"
    printf '%-12s %s\n' "build" "${st_status[build]}, configure ${st_secs[configure]} s + build ${st_secs[build]} s, $build"
    printf '%-12s %-8s %6s  %s\n' "step" "result" "time" "details"
    for s in "${steps[@]}"; do
        printf '%-12s %-8s %5ss  %s\n' "${s/_/-}" "${st_status[$s]}" "${st_secs[$s]}" "${st_detail[$s]}"
    done
    printf '%-12s %-8s %5ss  %s\n' "total" "$([ "$all_ok" = 1 ] && echo pass || echo FAIL)" "$total" \
        "budget ${budget} s; report $out"
} >"$out/summary.txt"
# the end of each failed step's log, before the summary (a lent machine returns the output's tail)
for s in "${steps[@]}"; do
    if [ "${st_status[$s]}" = fail ] && [ -s "$logs/$s.log" ]; then
        echo
        echo "--- the end of $s.log ---"
        tail -n 15 "$logs/$s.log"
    fi
done
cat "$out/summary.txt"
# under $OUT only a few files come back: the logs as one archive
if [ -n "${OUT:-}" ] && [ "$out" = "$(cd "$OUT" 2>/dev/null && pwd)" ]; then
    tar -C "$out" -czf "$out/logs.tar.gz" logs && rm -rf "$logs"
fi
[ "$all_ok" = 1 ]
