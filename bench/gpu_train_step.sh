#!/usr/bin/env bash
# The training-step comparison on a GPU, interleaved: none, oomscope (default capture: hooks
# and the CUPTI cross-check), oomscope with OOMSCOPE_CUPTI=off, PyTorch's history; ROUNDS
# rounds of each. Usage: bench/gpu_train_step.sh PREFIX [ROUNDS]
set -eu
prefix=$(cd "${1:?usage: gpu_train_step.sh PREFIX [ROUNDS]}" && pwd)
rounds=${2:-2}
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d -t oomscope-step-XXXXXX)
for r in $(seq "$rounds"); do
  python3 "$here/gpu_train_step.py" --label none
  "$prefix/bin/oomscope" run -o "$out" -- python3 "$here/gpu_train_step.py" --label oomscope 2>/dev/null
  OOMSCOPE_CUPTI=off "$prefix/bin/oomscope" run -o "$out" -- python3 "$here/gpu_train_step.py" --label oomscope-cupti-off 2>/dev/null
  python3 "$here/gpu_train_step.py" --history --label history
done
rm -rf "$out"
