#!/usr/bin/env bash
# A 10 Mi-event report exported with the defaults opens in PyTorch's own memory_viz, on a machine
# with PyTorch: bench_dump writes the report (10 Mi events, 100 k live allocations, 10 k stacks),
# `oomscope export -f torch-snapshot` keeps its newest 300 000 events, and memory_viz's stats,
# trace_plot and segment_plot read the pickle (their time, the pickle's size, the totals).
#   tests/gpu/export_viz_check.sh BUILD_DIR OUTDIR    (BUILD_DIR: bin/oomscope, bench/bench_dump)
set -u
build=$(cd "${1:?usage: export_viz_check.sh BUILD_DIR OUTDIR}" && pwd)
out=${2:?usage: export_viz_check.sh BUILD_DIR OUTDIR}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
OOMSCOPE_EXIT_REPORT=0 OOMSCOPE_QUIET=1 OOMSCOPE_FLIGHT=0 OOMSCOPE_OUTPUT_DIR="$work" OOMSCOPE_RING_EVENTS=16Mi \
  "$build/bench/bench_dump" 5000000 >"$out/dump.log" 2>&1
report=$(ls "$work"/oomscope-*.json)
echo "report: $(du -m "$report" | cut -f1) MiB"
/usr/bin/time -f "export torch-snapshot (defaults): %e s, max RSS %M KiB" \
  "$build/bin/oomscope" export "$report" -f torch-snapshot -o "$work/snap.pickle" 2>&1 | tail -n 2
echo "pickle: $(du -m "$work/snap.pickle" | cut -f1) MiB"
python3 - "$work/snap.pickle" "$report" <<'PY'
import json, pickle, sys, time
import torch.cuda._memory_viz as mv
t0 = time.monotonic()
with open(sys.argv[1], "rb") as f:
    snap = pickle.load(f)
t1 = time.monotonic()
entries = sum(len(t) for t in snap["device_traces"])
print(f"pickle.load: {t1 - t0:.2f} s, {len(snap['segments'])} segments, {entries} trace entries")
for name in ("segsum", "trace_plot", "segment_plot"):
    fn = getattr(mv, name, None)
    if fn is None:
        print(f"memory_viz has no {name}")
        continue
    t0 = time.monotonic()
    out = fn(snap)
    print(f"memory_viz.{name}: {time.monotonic() - t0:.2f} s, {len(out) / 1e6:.1f} MB of output")
total = sum(s["total_size"] for s in snap["segments"])
with open(sys.argv[2]) as f:
    rep = json.load(f)
tracked = sum(r["tracked_bytes"] for r in rep["memory"])
print(f"segments total {total} bytes, the report's tracked {tracked} bytes: {'equal' if total == tracked else 'DIFFER'}")
PY
