#!/usr/bin/env bash
# The training-step comparison on a GPU, interleaved: none, oomscope (default capture: hooks
# and the CUPTI cross-check), oomscope with OOMSCOPE_CUPTI=off, PyTorch's history; ROUNDS
# rounds of each. Under oomscope it also counts the events the exit report holds from the
# measured steps (the work the capture did there, whatever the timing noise says).
# Usage: bench/gpu_train_step.sh PREFIX [ROUNDS]
set -eu
prefix=$(cd "${1:?usage: gpu_train_step.sh PREFIX [ROUNDS]}" && pwd)
rounds=${2:-2}
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d -t oomscope-step-XXXXXX)
traced() {  # LABEL [ENV...]: one run under oomscope, then its events inside the measured window
  local label=$1 line
  shift
  rm -f "$out"/*.json
  line=$(env "$@" "$prefix/bin/oomscope" run -o "$out" -- python3 "$here/gpu_train_step.py" --label "$label" 2>/dev/null | tail -1)
  echo "$line"
  python3 - "$line" "$out" <<'PY'
import glob, json, sys
window = json.loads(sys.argv[1])["window_ns"]
for path in glob.glob(sys.argv[2] + "/*-exit.json"):
    report = json.load(open(path))
    cols = report["timeline"]["columns"]
    t = cols.index("time_ns")
    inside = [row for row in report["timeline"]["rows"] if window[0] <= row[t] <= window[1]]
    steps = [s for s in report.get("steps", []) if window[0] <= s.get("time_ns", 0) <= window[1]]
    print(json.dumps({"events_in_measured_steps": len(inside), "events_in_run": len(report["timeline"]["rows"]),
                      "step_records_in_measured_steps": len(steps)}))
PY
}
for r in $(seq "$rounds"); do
  python3 "$here/gpu_train_step.py" --label none
  traced oomscope
  traced oomscope-cupti-off OOMSCOPE_CUPTI=off
  python3 "$here/gpu_train_step.py" --history --label history
done
rm -rf "$out"
