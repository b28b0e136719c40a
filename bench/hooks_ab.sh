#!/usr/bin/env bash
# Hook cost of two builds, in cycles of three measurements: A, B, then A again (the placebo: A
# against A is what the estimator reads when nothing changes), A B A' and A' B A in turn so that
# a linear drift of the machine cancels (the development VM's speed moves by 2x between runs:
# only interleaved measurements compare). Each measurement: bench_hooks with the preload and no
# stacks, with default stacks, and the recorder pair alone (bench_parts), in ns added per
# cudaMalloc+cudaFree pair. Prints each cycle, then per figure the median of B − A and of A' − A
# over the cycles with an interval that covers the median with at least 95 % (the exact
# order-statistics interval, bench/median_interval.awk: no assumption on the noise; 6 cycles or
# more for 95 %). A change is shown when the B − A interval excludes zero and the placebo's is narrower
# than the change.
# Usage: bench/hooks_ab.sh BUILD_A BUILD_B [CYCLES]
#   (each BUILD holds lib/oomscope/liboomscope.so, bench/bench_hooks, bench/bench_parts, fakecuda/lib)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
a=$(cd "${1:?usage: hooks_ab.sh BUILD_A BUILD_B [CYCLES]}" && pwd)
b=$(cd "${2:?usage: hooks_ab.sh BUILD_A BUILD_B [CYCLES]}" && pwd)
cycles=${3:-7}
export FAKECUDA_UNBACKED=1 OOMSCOPE_EXIT_REPORT=0 OOMSCOPE_CUPTI=off
out=$(mktemp -t oomscope-hooks-ab-XXXXXX)
trap 'rm -f "$out"' EXIT

# "NOSTACKS STACKS PAIR" (ns) of one build.
measure() {
  local build=$1 fake nostack stacks pair
  fake=$(cd -P "$build/bench/.." && pwd)/fakecuda/lib
  nostack=$(LD_LIBRARY_PATH=$fake LD_PRELOAD=$build/lib/oomscope/liboomscope.so OOMSCOPE_STACK_DEPTH=0 \
    "$build/bench/bench_hooks" 20000 101 1 | grep -o "added [0-9.-]* ns" | head -1 | awk '{ print $2 }')
  stacks=$(LD_LIBRARY_PATH=$fake LD_PRELOAD=$build/lib/oomscope/liboomscope.so "$build/bench/bench_hooks" 20000 51 1 |
    grep -o "added [0-9.-]* ns" | head -1 | awk '{ print $2 }')
  pair=$("$build/bench/bench_parts" 20000 51 | grep "recorder pair, 1 Mi" | grep -o "[0-9.]* ns" | awk '{ print $1 }')
  echo "$nostack $stacks $pair"
}

echo "A = $a"
echo "B = $b"
for cycle in $(seq "$cycles"); do
  if [ $((cycle % 2)) = 1 ]; then
    first=$(measure "$a"); mid=$(measure "$b"); last=$(measure "$a")
  else
    last=$(measure "$a"); mid=$(measure "$b"); first=$(measure "$a")
  fi
  # columns: A (3), B (3), A' (3)
  echo "$first $mid $last" | tee -a "$out" | awk -v c="$cycle" '{
    printf "cycle %d: no stacks A %.1f B %.1f A\x27 %.1f; default stacks A %.1f B %.1f A\x27 %.1f; recorder pair A %.1f B %.1f A\x27 %.1f ns\n",
      c, $1, $4, $7, $2, $5, $8, $3, $6, $9 }'
done

# Median of column $2 − column $1 over the cycles, with its exact order-statistics interval
# (bench/median_interval.awk).
summary() {
  awk -v x="$2" -v y="$1" '{ print $x - $y }' "$out" | sort -g |
    awk -v what="$3" -v unit=ns -v fmt=%+.1f -f "$here/median_interval.awk"
}
echo "over $cycles cycles:"
summary 1 4 "no stacks, B − A"
summary 1 7 "no stacks, A' − A (placebo)"
summary 2 5 "default stacks, B − A"
summary 2 8 "default stacks, A' − A (placebo)"
summary 3 6 "recorder pair, B − A"
summary 3 9 "recorder pair, A' − A (placebo)"
awk '{ a += $1; b += $4; c += $2; d += $5; e += $3; f += $6 } END {
  printf "means: no stacks A %.1f B %.1f; default stacks A %.1f B %.1f; recorder pair A %.1f B %.1f ns\n",
    a / NR, b / NR, c / NR, d / NR, e / NR, f / NR }' "$out"
