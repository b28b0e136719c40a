#!/usr/bin/env bash
# What looking costs the program looked at (issue 18): live_loop churn THREADS (threads that
# allocate and free on the fake device at full speed) for SECONDS, alone and with
# `oomscope top --interval 1` reading its flight file the whole time (a frame a second, the
# rate a user watching it asks for), and with `oomscope snapshot` taking a whole report a second,
# alternating A B C C B A so that drifts of the machine's speed fall on all three. Prints each run's allocation+free pairs per second, the medians and the
# change; then how long one snapshot takes (the reader's own cost, which is the looker's CPU,
# not the program's). Pick THREADS below the machine's CPUs: the looker needs a CPU of its own
# or the comparison measures the scheduler.
# Usage: bench/live_bench.sh BUILD_DIR [THREADS] [SECONDS] [ROUNDS]
#   (BUILD_DIR holds bin/oomscope, lib/liboomscope.so, fakecuda/bin/live_loop, fakecuda/lib)
set -eu
build=$(cd "${1:?usage: live_bench.sh BUILD_DIR [THREADS] [SECONDS] [ROUNDS]}" && pwd)
threads=${2:-1}
seconds=${3:-10}
rounds=${4:-4}
out=$(mktemp -d -t oomscope-live-bench-XXXXXX)
trap 'rm -rf "$out"' EXIT
export FAKECUDA_UNBACKED=1 FAKECUDA_CAPACITY=16GiB OOMSCOPE_EXIT_REPORT=0 OOMSCOPE_CUPTI=off
fake=$(cd -P "$build/fakecuda/lib" && pwd)
export LD_LIBRARY_PATH="$fake:$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(date -u +%F)"
echo "live_loop churn $threads for $seconds s a run, $rounds rounds of A (alone) B (top, a frame a second) C (a snapshot a second) C B A"

# One run: prints pairs per second. $1 = who looks: 0 none, 1 top, 2 snapshots.
one() {
  local dir="$out/run$RANDOM" fifo
  mkdir -p "$dir"
  fifo="$dir/in"
  mkfifo "$fifo"
  LD_PRELOAD="$build/lib/liboomscope.so" OOMSCOPE_OUTPUT_DIR="$dir" \
    "$build/fakecuda/bin/live_loop" churn "$threads" <"$fifo" >"$dir/out" 2>"$dir/err" &
  local pid=$!
  exec 3>"$fifo"  # the program runs until a line arrives here
  while ! grep -q ready "$dir/out" 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || { cat "$dir/err" >&2; return 1; }
    sleep 0.05
  done
  local top=""
  if [ "$1" = 1 ]; then
    "$build/bin/oomscope" top --interval 1 "$pid" >"$dir/top" 2>&1 &
    top=$!
  elif [ "$1" = 2 ]; then
    mkdir -p "$dir/snaps"
    # pacing, a report a second as a user's cron or watch would ask (not synchronisation)
    (while kill -0 "$pid" 2>/dev/null; do
       "$build/bin/oomscope" snapshot "$pid" -o "$dir/snaps" >/dev/null 2>&1 || true
       rm -f "$dir/snaps"/*.json
       sleep 1
     done) &
    top=$!
  fi
  sleep "$seconds"
  echo stop >&3
  exec 3>&-
  wait "$pid"
  if [ -n "$top" ]; then
    kill "$top" 2>/dev/null || true
    wait "$top" 2>/dev/null || true
  fi
  # "ops N seconds S": N allocations (each with its free), S from the first thread's start.
  awk '/^ops/ { printf "%.0f\n", $2 / $4 }' "$dir/out"
  rm -rf "$dir"
}

a=() b=() c=()
for round in $(seq "$rounds"); do
  x=$(one 0); y=$(one 1); s1=$(one 2); s2=$(one 2); z=$(one 1); w=$(one 0)
  a+=("$x" "$w"); b+=("$y" "$z"); c+=("$s1" "$s2")
  echo "round $round: alone $x $w  top $y $z  snapshots $s1 $s2  pairs/s"
done
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ma=$(median "${a[@]}")
mb=$(median "${b[@]}")
mc=$(median "${c[@]}")
awk -v a="$ma" -v b="$mb" -v c="$mc" 'BEGIN { printf "median: alone %.0f, top %.0f (%+.2f %%), snapshots %.0f (%+.2f %%) pairs/s\n",
  a, b, (b - a) / a * 100, c, (c - a) / a * 100 }'

# The reader's cost: ten snapshots of a running churn, timed.
dir="$out/snap"
mkdir -p "$dir"
mkfifo "$dir/in"
LD_PRELOAD="$build/lib/liboomscope.so" OOMSCOPE_OUTPUT_DIR="$dir" \
  "$build/fakecuda/bin/live_loop" churn "$threads" <"$dir/in" >"$dir/out" 2>/dev/null &
pid=$!
exec 3>"$dir/in"
while ! grep -q ready "$dir/out" 2>/dev/null; do sleep 0.05; done
# $1 = times file, the rest: the command.
timed() {
  local times=$1
  shift
  if [ -x /usr/bin/time ]; then  # GNU time for the peak memory where it is installed
    /usr/bin/time -f "%e %M" -a -o "$times" "$@" >/dev/null
  else
    local t0
    t0=$(date +%s%N)
    "$@" >/dev/null
    echo "$(( ($(date +%s%N) - t0) / 1000000 ))e-3 0" >>"$times"
  fi
}
for i in $(seq 10); do
  timed "$dir/times" "$build/bin/oomscope" snapshot "$pid" -o "$dir"
  timed "$dir/top-times" "$build/bin/oomscope" top --once "$pid"
done
du -k "$dir"/*.flight | awk '{ printf "flight file: %.1f MiB on disk\n", $1 / 1024 }'
echo stop >&3
exec 3>&-
wait "$pid"
for what in times top-times; do
  sort -n "$dir/$what" | awk -v what="$what" '{ t[NR] = $1; if ($2 > m) m = $2 } END {
    printf "%s: median %.0f ms wall, max RSS %d KiB (10 runs; 0: no GNU time)\n",
      what == "times" ? "oomscope snapshot" : "oomscope top --once (two reads, no events)", t[int((NR + 1) / 2)] * 1000, m }'
done
