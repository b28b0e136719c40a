#!/usr/bin/env bash
# The CPU benchmarks (make bench): hook cost per allocation pair with and without stacks,
# contention, the recorder's hot path alone, the dump of a large report and the CLI on it.
# Usage: bench/run_cpu.sh BUILD_DIR [THREADS]   (BUILD_DIR holds bench/, lib/, bin/, fakecuda/)
set -eu
build=$(cd "${1:?usage: run_cpu.sh BUILD_DIR [THREADS]}" && pwd)
threads=${2:-8}
out=$(mktemp -d -t oomscope-bench-XXXXXX)
trap 'rm -rf "$out"' EXIT
# CUPTI off: the fake driver reports the "direct" side of the pair to CUPTI too, which would
# then record it (a call the hooks missed): the hook figures are the interposer's alone.
export FAKECUDA_UNBACKED=1 OOMSCOPE_EXIT_REPORT=0 OOMSCOPE_CUPTI=off
# The fake driver before any real one a GPU machine's LD_LIBRARY_PATH names.
fake=$(cd -P "$build/bench/.." && pwd)/fakecuda/lib
export LD_LIBRARY_PATH="$fake${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(date -u +%F)"
echo "== hooks (fake CUDA driver, $threads threads for contention)"
"$build/bench/bench_hooks" 20000 51 "$threads"
LD_PRELOAD="$build/lib/oomscope/liboomscope.so" OOMSCOPE_STACK_DEPTH=0 "$build/bench/bench_hooks" 20000 51 "$threads"
LD_PRELOAD="$build/lib/oomscope/liboomscope.so" "$build/bench/bench_hooks" 20000 51 "$threads"
echo "== recorder hot path"
"$build/bench/bench_record" "$threads" 200000
"$build/bench/bench_parts" 20000 51
echo "== dump and CLI at scale"
timed() {  # GNU time for the peak memory where it is installed
  if [ -x /usr/bin/time ]; then /usr/bin/time -f "$1: %e s wall, max RSS %M KiB" "${@:2}"; else shift; "$@"; fi
}
OOMSCOPE_OUTPUT_DIR="$out" timed bench_dump "$build/bench/bench_dump"
timed "oomscope report" "$build/bin/oomscope" report "$out"/oomscope-*.json >/dev/null
