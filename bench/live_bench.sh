#!/usr/bin/env bash
# What looking costs the program looked at (issue 18): live_loop churn THREADS (threads that
# allocate and free on the fake device at full speed) in windows of SECONDS within one process:
# A alone, B with `oomscope top --interval 1` reading its flight file (a frame a second, the rate
# a user watching it asks for), C with `oomscope snapshot` taking a whole report a second, and D
# alone again (the placebo: D against A is what the estimator reads when nothing changes). CYCLES
# cycles, A B C D and D C B A in turn (a drift of the machine's speed cancels over two cycles).
# Each cycle gives B/A, C/A and D/A for the program's rate (pairs per second of wall time), for
# its CPU per pair (the process's CPU seconds over its pairs: what the program itself pays,
# whether or not the machine lends it a CPU all the time) and for its rate over a reference's:
# a second live_loop, same preload, whose flight file nobody reads, counted in the same windows.
# A machine whose speed drifts (a VM's neighbours) moves both; the ratio keeps what reading the
# program's own file costs it (the looker's general load on the machine falls on both). Prints
# the median of each ratio with an interval that covers it with at least 95 % (the exact
# order-statistics interval, bench/median_interval.awk: no assumption on the noise; 6 cycles
# or more for 95 %); a change is shown when its interval excludes zero and the placebo's is
# narrower than the change. Windows of one process
# compare far better than separate runs (separate runs of one configuration differed by 3-6 %).
# Then how long one snapshot and one top frame take (the looker's own CPU). Pick THREADS so that
# 2 x THREADS + 1 CPUs are free (the program, the reference and the looker each need their own,
# or the comparison measures the scheduler); more than one thread queues on the fake device's
# global mutexes, and a queue's rate depends on how fast its sleepers are woken.
# LOOKER_C=metrics makes C `oomscope metrics --textfile` writing every second (the metrics loop,
# at 15 times its default rate) instead of a whole snapshot a second.
# Usage: bench/live_bench.sh BUILD_DIR [THREADS] [SECONDS] [CYCLES]
#   (BUILD_DIR holds bin/oomscope, lib/oomscope/liboomscope.so, fakecuda/bin/live_loop, fakecuda/lib)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:?usage: live_bench.sh BUILD_DIR [THREADS] [SECONDS] [CYCLES]}" && pwd)
threads=${2:-1}
seconds=${3:-3}
cycles=${4:-20}
out=$(mktemp -d -t oomscope-live-bench-XXXXXX)
trap 'rm -rf "$out"' EXIT
export FAKECUDA_UNBACKED=1 FAKECUDA_CAPACITY=16GiB OOMSCOPE_EXIT_REPORT=0 OOMSCOPE_CUPTI=off
fake=$(cd -P "$build/fakecuda/lib" && pwd)
export LD_LIBRARY_PATH="$fake:$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(date -u +%F)"
c_what="a snapshot a second"
[ "${LOOKER_C:-snapshot}" = metrics ] && c_what="oomscope metrics --textfile, every second"
echo "live_loop churn $threads (and a reference live_loop churn $threads nobody looks at), windows of $seconds s, $cycles cycles of A (alone) B (top, a frame a second) C ($c_what) D (alone), one process"

# Starts live_loop churn THREADS under the preload, its flight file in $1, its stdin the fifo
# $1/in, its stdout $1/out; sets $started to its PID once it says ready (it runs until a line
# other than "count" arrives on the fifo, which the caller opens for writing first).
start_churn() {
  mkdir -p "$1"
  mkfifo "$1/in"
  LD_PRELOAD="$build/lib/oomscope/liboomscope.so" OOMSCOPE_OUTPUT_DIR="$1" \
    "$build/fakecuda/bin/live_loop" churn "$threads" <"$1/in" >"$1/out" 2>"$1/err" &
  started=$!
}
wait_ready() {  # $1 the folder, $2 the PID
  while ! grep -q ready "$1/out" 2>/dev/null; do
    kill -0 "$2" 2>/dev/null || { cat "$1/err" >&2; exit 1; }
    sleep 0.05
  done
}

# Pairs so far, clock and CPU seconds of the program and of the reference: "N S C N S C" (each
# answers a "count" line on its stdin).
count() {
  local n
  n=$(( $(grep -c '^count' "$dir/out" || true) + 1 ))
  echo count >&3
  echo count >&4
  while [ "$(grep -c '^count' "$dir/out" || true)" -lt "$n" ] ||
        [ "$(grep -c '^count' "$dir/ref/out" || true)" -lt "$n" ]; do sleep 0.01; done
  echo "$(grep '^count' "$dir/out" | sed -n "${n}p" | awk '{ print $2, $4, $6 }')" \
       "$(grep '^count' "$dir/ref/out" | sed -n "${n}p" | awk '{ print $2, $4, $6 }')"
}

# One window: "pairs/s CPU-ns/pair reference-pairs/s" while $1 looks (A or D nobody, B top, C a snapshot a second).
window() {
  local looker=""
  if [ "$1" = B ]; then
    "$build/bin/oomscope" top --interval 1 "$pid" >/dev/null 2>&1 &
    looker=$!
  elif [ "$1" = C ] && [ "${LOOKER_C:-snapshot}" = metrics ]; then
    "$build/bin/oomscope" metrics --textfile "$dir/metrics.prom" --interval 1 "$pid" >/dev/null 2>&1 &
    looker=$!
  elif [ "$1" = C ]; then
    mkdir -p "$dir/snaps"
    # pacing, a report a second as a user's cron or watch would ask (not synchronisation)
    (while :; do
       "$build/bin/oomscope" snapshot "$pid" -o "$dir/snaps" >/dev/null 2>&1 || true
       rm -f "$dir/snaps"/*.json
       sleep 1
     done) &
    looker=$!
  fi
  local before after
  before=$(count)
  sleep "$seconds"
  after=$(count)
  if [ -n "$looker" ]; then
    pkill -P "$looker" 2>/dev/null || true
    kill "$looker" 2>/dev/null || true
    wait "$looker" 2>/dev/null || true
  fi
  echo "$before $after" | awk '{ printf "%.0f %.2f %.0f\n", ($7 - $1) / ($8 - $2), ($9 - $3) * 1e9 / ($7 - $1),
    ($10 - $4) / ($11 - $5) }'
}

dir="$out/run"
start_churn "$dir"; pid=$started
start_churn "$dir/ref"; ref=$started
exec 3>"$dir/in" 4>"$dir/ref/in"
wait_ready "$dir" "$pid"
wait_ready "$dir/ref" "$ref"
: >"$out/cycles"
for cycle in $(seq "$cycles"); do
  order="A B C D"
  [ $((cycle % 2)) = 0 ] && order="D C B A"
  declare -A rate=() cpu=() rel=()
  for w in $order; do
    read -r rate[$w] cpu[$w] r < <(window "$w")
    rel[$w]=$(awk -v a="${rate[$w]}" -v b="$r" 'BEGIN { printf "%.6f", a / b }')
  done
  echo "${rate[A]} ${rate[B]} ${rate[C]} ${rate[D]} ${cpu[A]} ${cpu[B]} ${cpu[C]} ${cpu[D]}" \
       "${rel[A]} ${rel[B]} ${rel[C]} ${rel[D]}" | tee -a "$out/cycles" |
    awk -v c="$cycle" 'function p(x, a) { return (x / a - 1) * 100 } {
      printf "cycle %d: pairs/s A %d B %+.2f %% C %+.2f %% D %+.2f %%; CPU ns/pair A %.1f B %+.2f %% C %+.2f %% D %+.2f %%;",
        c, $1, p($2, $1), p($3, $1), p($4, $1), $5, p($6, $5), p($7, $5), p($8, $5)
      printf " over the reference B %+.2f %% C %+.2f %% D %+.2f %%\n", p($10, $9), p($11, $9), p($12, $9) }'
done
echo stop >&3
echo stop >&4
exec 3>&- 4>&-
wait "$pid" "$ref"

# Median of column $2/$1 - 1 over the cycles (in %), with its exact order-statistics interval
# (bench/median_interval.awk).
summary() {
  awk -v num="$2" -v den="$1" '{ print ($num / $den - 1) * 100 }' "$out/cycles" | sort -g |
    awk -v what="$3" -v unit=% -v fmt=%+.2f -f "$here/median_interval.awk"
}
echo "over $cycles cycles (B, C, D against A of the same cycle):"
summary 1 2 "rate with top (B)"
summary 1 3 "rate with $c_what (C)"
summary 1 4 "rate alone again (D, the placebo)"
summary 5 6 "CPU per pair with top (B)"
summary 5 7 "CPU per pair with snapshots (C)"
summary 5 8 "CPU per pair alone again (D)"
summary 9 10 "rate over the reference's, top (B)"
summary 9 11 "rate over the reference's, $c_what (C)"
summary 9 12 "rate over the reference's, alone (D)"

# The reader's cost: ten snapshots of a running churn, timed.
dir="$out/snap"
start_churn "$dir"; pid=$started
exec 3>"$dir/in"
wait_ready "$dir" "$pid"
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
