# bench_lib.sh — what the step benchmarks' scripts share (bench_step.sh,
# bench_ctr.sh): a work directory and the processes to kill on exit, and
# /proc readers. Source it with NAME set (the work directory's prefix).
work=$(mktemp -d "/tmp/psc-bench-${NAME:?}.XXXXXX")
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

# vmhwm_kb PID: the process's peak resident set (kB), or 0 once it has exited.
vmhwm_kb() { awk '/^VmHWM:/ {print $2; f=1} END {if (!f) print 0}' "/proc/$1/status" 2>/dev/null || echo 0; }
# cpu_ticks PID: the CPU time the process has used (utime + stime, clock ticks), or 0.
cpu_ticks() { awk '{sub(/.*\) /, ""); print $12 + $13}' "/proc/$1/stat" 2>/dev/null || echo 0; }
