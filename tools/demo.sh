#!/usr/bin/env bash
# make demo: runs examples/cuda/leaky_oom under `oomscope run` and renders its OOM report.
# On a machine with an NVIDIA GPU and the example built by nvcc, against the real runtime;
# otherwise on the simulated device of tests/fakecuda, and it says so.
set -euo pipefail
build=${1:-build}
oomscope="$build/bin/oomscope"
outdir="$build/demo"
rm -rf "$outdir" && mkdir -p "$outdir"

real="$build/examples/leaky_oom"
if [ -x "$real" ] && command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "== make demo: on the GPU ($(nvidia-smi -L | head -n 1))"
  cudart=$(dirname "$(readlink -f "$(command -v nvcc 2>/dev/null || echo /nonexistent)")")/../lib64
  export LD_LIBRARY_PATH="${cudart}:${LD_LIBRARY_PATH:-}"
  program="$real"
else
  echo "== make demo: no GPU found, running on the simulated device of tests/fakecuda (8 GiB)"
  export FAKECUDA_CAPACITY=8GiB
  program="$build/fakecuda/bin/leaky_oom_fake"
fi
echo "== oomscope run -o $outdir -- $(basename "$program") 8"
status=0
"$oomscope" run -o "$outdir" -- "$program" 8 || status=$?
echo "== the program exited with status $status (it runs out of memory on purpose)"
report=$(ls -t "$outdir"/oomscope-*-oom*.json | sed -n 1p)  # sed reads to the end: no SIGPIPE under pipefail
echo "== oomscope report $report"
echo
"$oomscope" report "$report"
