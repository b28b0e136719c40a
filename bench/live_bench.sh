#!/usr/bin/env bash
# What looking costs the program looked at (issue 18): live_loop churn THREADS (threads that
# allocate and free on the fake device at full speed), its rate of allocation+free pairs in
# windows of SECONDS: alone (A), with `oomscope top --interval 1` reading its flight file (B: a
# frame a second, the rate a user watching it asks for), and with `oomscope snapshot` taking a
# whole report a second (C), in the order A B C C B A within one process per round. Windows of
# one process compare far better than separate runs (a run's rate depends on where its threads
# and pages land: separate runs of one configuration differed by 3-6 %, more than the effect).
# Prints each round's rates and ratios, the median ratios, and the noise floor (the two A
# windows of a round against each other); then how long one snapshot and one top frame take
# (the looker's own CPU, not the program's). Pick THREADS below the machine's CPUs: the looker
# needs a CPU of its own or the comparison measures the scheduler.
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
echo "live_loop churn $threads, windows of $seconds s, $rounds rounds of A (alone) B (top, a frame a second) C (a snapshot a second) C B A, one process a round"

# The program's pairs so far and its clock: "N S" (it answers a "count" line on its stdin).
count() {
  local n
  n=$(( $(grep -c '^count' "$dir/out" || true) + 1 ))
  echo count >&3
  while [ "$(grep -c '^count' "$dir/out" || true)" -lt "$n" ]; do sleep 0.01; done
  grep '^count' "$dir/out" | sed -n "${n}p" | awk '{ print $2, $4 }'
}

# One window: pairs per second while $1 looks (0 nobody, 1 top, 2 a snapshot a second).
window() {
  local looker=""
  if [ "$1" = 1 ]; then
    "$build/bin/oomscope" top --interval 1 "$pid" >/dev/null 2>&1 &
    looker=$!
  elif [ "$1" = 2 ]; then
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
  echo "$before $after" | awk '{ printf "%.0f\n", ($3 - $1) / ($4 - $2) }'
}

ratios_b=() ratios_c=() floors=()
for round in $(seq "$rounds"); do
  dir="$out/round$round"
  mkdir -p "$dir"
  mkfifo "$dir/in"
  LD_PRELOAD="$build/lib/liboomscope.so" OOMSCOPE_OUTPUT_DIR="$dir" \
    "$build/fakecuda/bin/live_loop" churn "$threads" <"$dir/in" >"$dir/out" 2>"$dir/err" &
  pid=$!
  exec 3>"$dir/in"  # the program runs until a line other than "count" arrives here
  while ! grep -q ready "$dir/out" 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || { cat "$dir/err" >&2; exit 1; }
    sleep 0.05
  done
  a1=$(window 0); b1=$(window 1); c1=$(window 2); c2=$(window 2); b2=$(window 1); a2=$(window 0)
  echo stop >&3
  exec 3>&-
  wait "$pid"
  read -r rb rc floor < <(awk -v a1="$a1" -v a2="$a2" -v b1="$b1" -v b2="$b2" -v c1="$c1" -v c2="$c2" 'BEGIN {
    a = (a1 + a2) / 2; printf "%.4f %.4f %.4f\n", (b1 + b2) / 2 / a, (c1 + c2) / 2 / a, (a2 - a1) / a }')
  ratios_b+=("$rb"); ratios_c+=("$rc"); floors+=("$floor")
  awk -v r="$round" -v a1="$a1" -v a2="$a2" -v b1="$b1" -v b2="$b2" -v c1="$c1" -v c2="$c2" -v rb="$rb" -v rc="$rc" -v f="$floor" 'BEGIN {
    printf "round %d: alone %d %d  top %d %d  snapshots %d %d pairs/s: top %+.2f %%, snapshots %+.2f %% (alone vs alone %+.2f %%)\n",
      r, a1, a2, b1, b2, c1, c2, (rb - 1) * 100, (rc - 1) * 100, f * 100 }'
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
awk -v b="$(median "${ratios_b[@]}")" -v c="$(median "${ratios_c[@]}")" 'BEGIN {
  printf "median over rounds: top %+.2f %%, snapshots %+.2f %% of the rate alone\n", (b - 1) * 100, (c - 1) * 100 }'
printf '%s\n' "${floors[@]}" | awk '{ v = $1 < 0 ? -$1 : $1; if (v > m) m = v } END {
  printf "noise floor: the two alone windows of a round differ by up to %.2f %%\n", m * 100 }'

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
