#!/usr/bin/env bash
# Python-frame capture on its own, against the fake CUDA runtime: the same Python loop plain,
# under the preload without stacks, with native stacks only, and with Python frames (default).
# Usage: bench/python_frames.sh BUILD_DIR   (BUILD_DIR holds bench/.., lib/, fakecuda/)
set -eu
build=$(cd "${1:?usage: python_frames.sh BUILD_DIR}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
fake=$(cd -P "$build/bench/.." && pwd)/fakecuda/lib
export FAKECUDA_UNBACKED=1 OOMSCOPE_EXIT_REPORT=0 OOMSCOPE_CUPTI=off OOMSCOPE_TORCH=0
export LD_LIBRARY_PATH="$fake${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
run() { echo "$1: $(env "${@:2}" python3 "$here/python_frames.py" "$fake/libcudart.so.13" 20000 20 15)"; }
run plain OOMSCOPE_BENCH=plain
run "preload, no stacks" LD_PRELOAD="$build/lib/oomscope/liboomscope.so" OOMSCOPE_STACK_DEPTH=0
run "preload, native stacks only" LD_PRELOAD="$build/lib/oomscope/liboomscope.so" OOMSCOPE_PYTHON_FRAMES=0
run "preload, native + Python frames" LD_PRELOAD="$build/lib/oomscope/liboomscope.so"
