#!/usr/bin/env bash
# What `oomscope metrics` costs itself: N processes under the preload (live_loop leak: a
# training-style loop on the fake device that steps and keeps 1 MiB a step, its flight file in
# one folder), then ROUNDS deliveries of `oomscope metrics --once FOLDER` timed by GNU time: wall,
# CPU (user + system) and peak memory of one delivery, median and maximum, for each N. What it
# costs the programs read is bench/live_bench.sh with LOOKER_C=metrics.
# Usage: bench/metrics_bench.sh BUILD_DIR [ROUNDS] [N ...]     (default: 10 rounds, N = 8 64)
set -eu
build=$(cd "${1:?usage: metrics_bench.sh BUILD_DIR [ROUNDS] [N ...]}" && pwd)
rounds=${2:-10}
shift $(( $# >= 2 ? 2 : 1 ))
counts=${*:-8 64}
[ -x /usr/bin/time ] || { echo "metrics_bench: needs GNU time (/usr/bin/time)" >&2; exit 2; }
out=$(mktemp -d -t oomscope-metrics-bench-XXXXXX)
pids=()
cleanup() { exec 5>&- 2>/dev/null; for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$out"; }
trap cleanup EXIT
export FAKECUDA_UNBACKED=1 FAKECUDA_CAPACITY=64GiB OOMSCOPE_EXIT_REPORT=0 OOMSCOPE_CUPTI=off OOMSCOPE_QUIET=1
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(date -u +%F)"
for n in $counts; do
  dir="$out/n$n"
  mkdir -p "$dir"
  pids=()
  # Their stdin: a fifo held open here; closing it ends them all (end of input).
  mkfifo "$dir/in"
  exec 5<>"$dir/in"
  for i in $(seq "$n"); do
    RANK=$((i - 1)) WORLD_SIZE=$n TORCHELASTIC_RUN_ID=bench LD_PRELOAD="$build/lib/oomscope/liboomscope.so" \
      OOMSCOPE_OUTPUT_DIR="$dir" "$build/fakecuda/bin/live_loop" leak <"$dir/in" >"$dir/out.$i" 2>/dev/null &
    pids+=($!)
  done
  for i in $(seq "$n"); do
    while ! grep -q ready "$dir/out.$i" 2>/dev/null; do sleep 0.05; done
  done
  : >"$dir/times"
  for r in $(seq "$rounds"); do
    /usr/bin/time -f "%e %U %S %M" -a -o "$dir/times" "$build/bin/oomscope" metrics --once "$dir" >"$dir/m.prom"
  done
  series=$(grep -c '^oomscope_device_memory_bytes{' "$dir/m.prom" || true)
  wall=$(sort -n "$dir/times" | awk '{ w[NR] = $1 } END { printf "%.0f %.0f", w[int((NR + 1) / 2)] * 1000, w[NR] * 1000 }')
  cpu=$(awk '{ print $2 + $3 }' "$dir/times" | sort -n | awk '{ c[NR] = $1 } END { printf "%.0f", c[int((NR + 1) / 2)] * 1000 }')
  rss=$(awk '$4 > m { m = $4 } END { printf "%.1f", m / 1024 }' "$dir/times")
  read -r median worst <<<"$wall"
  echo "$n processes ($series memory series): one delivery median $median ms wall (max $worst), $cpu ms CPU, max RSS $rss MiB"
  exec 5>&-
  wait "${pids[@]}" 2>/dev/null || true
done
