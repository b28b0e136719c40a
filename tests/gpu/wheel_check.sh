#!/usr/bin/env bash
# The wheel on a GPU machine, as a user installs it: pip install --no-deps --no-index into the
# machine's own Python (the one with PyTorch), then `oomscope` from its PATH runs a PyTorch OOM
# (scenarios/torch_oom.py) and a pytest budget on real tensors.
#   tests/gpu/wheel_check.sh WHEEL OUTDIR
# Prints one line per check, PASS or FAIL; exit status 0 when every one passed.
set -u
here=$(cd "$(dirname "$0")" && pwd)
wheel=${1:?usage: wheel_check.sh WHEEL OUTDIR}
out=${2:?usage: wheel_check.sh WHEEL OUTDIR}
mkdir -p "$out"
failed=0
check() {  # check NAME CONDITION...
  local name=$1; shift
  if "$@"; then echo "PASS  $name"; else echo "FAIL  $name"; failed=1; fi
}
python3 -m pip install --no-deps --no-index --force-reinstall -q "$wheel" >"$out/pip.log" 2>&1
check "pip install --no-deps $(basename "$wheel")" test $? = 0
bin=$(dirname "$(python3 -c 'import sys; print(sys.executable)')")
oomscope=$(PATH="$bin:$PATH" command -v oomscope)
check "oomscope on the Python's PATH ($oomscope)" test -x "$oomscope"
"$oomscope" --version >"$out/version.txt" 2>&1
check "oomscope --version: $(cat "$out/version.txt")" test -s "$out/version.txt"

# A PyTorch OOM through the wheel's oomscope (exit status 3 kept, one oom report, by torch).
"$oomscope" run -o "$out/torch" -- python3 "$here/scenarios/torch_oom.py" "$out/facts.json" >"$out/run.log" 2>&1
status=$?
check "the program's own exit status (3) kept: $status" test "$status" = 3
oom=$(ls "$out"/torch/oomscope-*-oom.json 2>/dev/null | head -n 1)
check "an oom report written: ${oom:-none}" test -n "$oom"
if [ -n "$oom" ]; then
  "$oomscope" report "$oom" --color never >"$out/report.txt" 2>&1
  check "oomscope report renders it" grep -q "OUT OF MEMORY on device 0" "$out/report.txt"
  python3 - "$oom" "$out/facts.json" >"$out/compare.txt" 2>&1 <<'PY'
import json, sys
rep, facts = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
row = rep["memory"][0]
ok = rep["trigger"]["framework"] == "torch" and facts["oom"] and row["allocated_bytes"] == facts["allocated_before"]
print("framework", rep["trigger"]["framework"], "allocated", row["allocated_bytes"], "program's", facts["allocated_before"],
      "reserved", row["reserved_bytes"], "device", rep["devices"][0]["name"])
sys.exit(0 if ok else 1)
PY
  check "the report's allocated bytes equal torch's: $(cat "$out/compare.txt")" test $? = 0
fi

# The pytest plugin by its entry point (no -p): a test over its budget fails, one under passes.
mkdir -p "$out/pytest"
cat >"$out/pytest/test_budget.py" <<'PY'
import pytest
import torch
@pytest.mark.limit_gpu_memory("1GiB")
def test_over():
    x = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    del x
@pytest.mark.limit_gpu_memory("1GiB")
def test_under():
    x = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    del x
PY
(cd "$out/pytest" && "$oomscope" run -o "$out/pytest/reports" -- python3 -m pytest -q -rA -p no:cacheprovider \
  test_budget.py >"$out/pytest.log" 2>&1)
check "pytest budget: test_over fails" grep -q "FAILED test_budget.py::test_over" "$out/pytest.log"
check "pytest budget: test_under passes" grep -q "PASSED test_budget.py::test_under" "$out/pytest.log"
check "pytest budget: the failure names the limit" grep -q "exceeds limit_gpu_memory 1.00 GiB" "$out/pytest.log"
check "pytest budget: no warning from the plugin" sh -c "! grep -q -e PytestAssertRewriteWarning -e PluggyTeardownRaisedWarning '$out/pytest.log'"
exit $failed
