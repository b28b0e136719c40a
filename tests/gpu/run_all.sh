#!/usr/bin/env bash
# The GPU suite, from an installed tree: tests/gpu/run_all.sh PREFIX [OUTDIR] [SCENARIO ...]
# Builds nothing. Needs an NVIDIA GPU, its driver, python3 with PyTorch (and CuPy, JAX for
# their scenarios). Prints a pass/fail table; exit status 0 when every scenario passed.
set -u
here=$(cd "$(dirname "$0")" && pwd)
prefix=${1:?usage: run_all.sh PREFIX [OUTDIR] [SCENARIO ...]}
outdir=${2:-$(mktemp -d -t oomscope-gpu-XXXXXX)}
shift $(( $# >= 2 ? 2 : 1 ))
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "run_all.sh: no NVIDIA GPU here; the GPU suite needs one" >&2
  exit 2
fi
nvidia-smi -L
mkdir -p "$outdir"
export PYTHONUNBUFFERED=1
exec python3 "$here/gpu_suite.py" "$prefix" "$outdir" "$@"
