"""What keeps a leak alive (issue 24): the adapter's censuses at the step samples name the
retainer of each kind, on the fake PyTorch, and `run --check` says it with the allocating line."""
import glob
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(HERE, "programs", "retainers.py")
FAKE_TORCH = os.path.join(HERE, "fake_torch")


def run_check(build, tmp_path, mode, **env_extra):
    out = tmp_path / mode
    # What the census names does not depend on how much of it a budget covers (a sanitizer build
    # or a slow machine walks slower): a budget no census here reaches.
    env_extra.setdefault("OOMSCOPE_RETAINER_MS", "60000")
    env = build.env(FAKECUDA_CAPACITY="1GiB", FAKECUDA_LIB=build.fake_lib, PYTHONPATH=FAKE_TORCH, **env_extra)
    p = subprocess.run([build.oomscope, "run", "-o", str(out), "--check", "--", sys.executable, PROGRAM, mode],
                       capture_output=True, text=True, env=env, timeout=120)
    reports = sorted(glob.glob(str(out / "oomscope-*-exit.json")))
    return p, reports


@pytest.mark.parametrize("mode,name,kind,container", [
    ("module_attr", "retainers.net[1].seen", "module attribute", "list"),
    ("global_list", "retainers.history", "global", "list"),
    ("closure", "retainers.remember.<closure>.kept", "closure cell", "list"),
    ("graph", "retainers.total_loss (autograd graph)", "autograd graph", "AddBackward0"),
    ("local", "train().val_losses", "local", "list"),
    ("guarded", "retainers.guarded", "global", "Guarded"),
])
def test_a_leak_is_named_by_what_keeps_it(build, tmp_path, mode, name, kind, container):
    p, reports = run_check(build, tmp_path, mode)
    assert p.returncode == 1, p.stdout + p.stderr
    assert f"held by {name} ({kind}: {container}," in p.stdout, p.stdout
    assert "allocated at " in p.stdout and "retainers.py:" in p.stdout
    # The report as analysed: the leak's held_by, and the censuses in the steps.
    analysed = subprocess.run([build.oomscope, "report", "--format", "json", reports[0]], capture_output=True,
                              text=True, timeout=60)
    r = json.loads(analysed.stdout)
    held = r["leaks"][0]["held_by"]
    assert (held["name"], held["kind"], held["container"]) == (name, kind, container)
    # 4 MiB a step: the last census holds most of the 30 steps' tensors.
    assert held["tensors"] >= 20 and held["bytes"] == held["tensors"] * 4 * (1 << 20)
    censuses = [s for s in r["steps"] if "retainers" in s]
    assert 2 <= len(censuses) <= 30 // 5 + 1


def test_no_census_when_turned_off(build, tmp_path):
    p, reports = run_check(build, tmp_path, "global_list", OOMSCOPE_TORCH_RETAINERS="0")
    assert p.returncode == 1 and "held by" not in p.stdout
    r = json.load(open(reports[0]))
    assert not any("retainers" in s for s in r["steps"])


def test_a_program_in_folders_named_torch_and_oomscope_is_still_the_programs(build, tmp_path):
    # The installed examples live in share/oomscope/examples/torch/: the census told the
    # program's files from PyTorch's and ours by those names in the path, and walked none of
    # the example's frames (the H200's examples_leak found no retainer). By folders now.
    where = tmp_path / "oomscope" / "examples" / "torch"
    where.mkdir(parents=True)
    program = where / "retainers.py"
    program.write_text(open(PROGRAM).read())
    out = tmp_path / "out"
    env = build.env(FAKECUDA_CAPACITY="1GiB", FAKECUDA_LIB=build.fake_lib, PYTHONPATH=FAKE_TORCH,
                    OOMSCOPE_RETAINER_MS="60000")
    p = subprocess.run([build.oomscope, "run", "-o", str(out), "--check", "--", sys.executable, str(program), "local"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "held by train().val_losses (local: list," in p.stdout, p.stdout
