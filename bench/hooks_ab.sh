#!/usr/bin/env bash
# Hook cost of two builds, interleaved (the development VM's speed moves by 2x between runs:
# only alternating rounds compare): bench_hooks with the preload and no stacks, with default
# stacks, and the recorder pair alone (bench_parts), ROUNDS times each, A then B.
# Usage: bench/hooks_ab.sh BUILD_A BUILD_B [ROUNDS]
set -eu
a=$(cd "${1:?usage: hooks_ab.sh BUILD_A BUILD_B [ROUNDS]}" && pwd)
b=$(cd "${2:?usage: hooks_ab.sh BUILD_A BUILD_B [ROUNDS]}" && pwd)
rounds=${3:-5}
export FAKECUDA_UNBACKED=1 OOMSCOPE_EXIT_REPORT=0 OOMSCOPE_CUPTI=off
for round in $(seq "$rounds"); do
  for build in "$a" "$b"; do
    fake=$(cd -P "$build/bench/.." && pwd)/fakecuda/lib
    nostack=$(LD_LIBRARY_PATH=$fake LD_PRELOAD=$build/lib/liboomscope.so OOMSCOPE_STACK_DEPTH=0 \
      "$build/bench/bench_hooks" 20000 101 1 | grep -o "added [0-9.-]* ns" | head -1)
    stacks=$(LD_LIBRARY_PATH=$fake LD_PRELOAD=$build/lib/liboomscope.so "$build/bench/bench_hooks" 20000 51 1 |
      grep -o "added [0-9.-]* ns" | head -1)
    pair=$("$build/bench/bench_parts" 20000 51 | grep "recorder pair, 1 Mi" | grep -o "[0-9.]* ns")
    echo "round $round $build: no stacks $nostack; default stacks $stacks; recorder pair $pair"
  done
done
