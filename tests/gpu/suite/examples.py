"""The examples a user meets first: the leaky loop fails the CI gate naming its line, the fixed one
passes; the fragmenting loop gets the expandable-segments diagnosis."""

import glob
import os
import subprocess
import sys

from .common import check, example, MiB, t


def scenario_examples_leak(ctx):
    """Issue 5 (3): the leaky example fails `run --check` naming the appending line; the fixed
    one passes over 200 steps."""
    out = ctx.dir("examples_leak")
    script = example(ctx, "leaky_loop.py")
    leaky = subprocess.run([ctx.oomscope, "run", "-o", os.path.join(out, "leaky"), "--check", "--junit",
                            os.path.join(out, "leaky.xml"), "--", sys.executable, script, "--steps", "200"],
                           capture_output=True, text=True, timeout=600)
    with open(os.path.join(out, "leaky.txt"), "w") as f:
        f.write(leaky.stdout + leaky.stderr)
    with open(script) as f:
        line = next(i for i, text in enumerate(f, 1) if "# the leak" in text)
    check(leaky.returncode == 1, f"leaky: exit {leaky.returncode}: {leaky.stdout[-800:]} {leaky.stderr[-800:]}")
    check(f"leaky_loop.py:{line}" in leaky.stdout and "val_losses.append" in leaky.stdout,
          f"the appending line {line} is not named: {leaky.stdout[-1200:]}")
    check("tensors accumulated in a list" in leaky.stdout, "pattern not named")
    # Issue 24: what keeps them: the list local to main(), through each loss's autograd graph.
    held = next((l.strip() for l in leaky.stdout.splitlines() if l.strip().startswith("held by")), "")
    check("main().val_losses" in held, f"the retainer is not named: {leaky.stdout[-1200:]}")
    verdict = next((l.strip() for l in leaky.stdout.splitlines() if "per step over" in l), "?") + "; " + held
    fixed = subprocess.run([ctx.oomscope, "run", "-o", os.path.join(out, "fixed"), "--check", "--", sys.executable,
                            example(ctx, "fixed_loop.py"), "--steps", "200"], capture_output=True, text=True, timeout=600)
    with open(os.path.join(out, "fixed.txt"), "w") as f:
        f.write(fixed.stdout + fixed.stderr)
    check(fixed.returncode == 0, f"fixed: exit {fixed.returncode}: {fixed.stdout[-1200:]} {fixed.stderr[-500:]}")
    steps = len(t.load(glob.glob(os.path.join(out, "fixed", "oomscope-*-exit.json"))[0])["steps"])
    check(steps >= 200, f"fixed: {steps} steps sampled")
    return f"leaky: exit 1, {verdict} at leaky_loop.py:{line}; fixed: exit 0 over {steps} steps"


def scenario_torch_hook_leak(ctx):
    """Issue 24 (2): a leak kept by a forward hook is named by its module attribute, with the
    line that allocated it; the censuses' cost, side by side with them off."""
    out = ctx.dir("torch_hook_leak")
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scenarios",
                          "torch_hook_leak.py")
    runs = {}
    for name, env in (("on", {}), ("off", {"OOMSCOPE_TORCH_RETAINERS": "0"}), ("on2", {}), ("off2", {"OOMSCOPE_TORCH_RETAINERS": "0"})):
        p = subprocess.run([ctx.oomscope, "run", "-o", os.path.join(out, name), "--check", "--", sys.executable, script],
                           capture_output=True, text=True, timeout=600, env=dict(os.environ, **env))
        with open(os.path.join(out, name + ".txt"), "w") as f:
            f.write(p.stdout + p.stderr)
        check(p.returncode == 1, f"{name}: exit {p.returncode}: {p.stdout[-800:]} {p.stderr[-800:]}")
        runs[name] = p.stdout
    held = next((l.strip() for l in runs["on"].splitlines() if l.strip().startswith("held by")), "")
    check("main().net[1].seen (module attribute: list," in held, f"not named: {runs['on'][-1500:]}")
    where = next((l.strip() for l in runs["on"].splitlines() if l.strip().startswith("allocated at")), "")
    check("torch_hook_leak.py:" in where, f"no allocating line: {runs['on'][-1500:]}")
    check("held by" not in runs["off"], "a census with OOMSCOPE_TORCH_RETAINERS=0")
    ms = {k: float(next(l.split()[1] for l in v.splitlines() if l.startswith("median_step_ms"))) for k, v in runs.items()}
    return (f"{held}; {where}; median step on/off/on/off {ms['on']:.2f}/{ms['off']:.2f}/{ms['on2']:.2f}/"
            f"{ms['off2']:.2f} ms")


def scenario_examples_fragmentation(ctx):
    """Issue 5 (3): the fragmenting example gets the expandable-segments diagnosis; rerun with
    expandable_segments:True reserves less at the same step."""
    out = ctx.dir("examples_fragmentation")
    reserved = {}
    texts = {}
    for name, conf in (("default", None), ("expandable", "expandable_segments:True")):
        env = {"PYTORCH_CUDA_ALLOC_CONF": conf} if conf else {}
        run = t.run_oomscope(ctx.oomscope, [sys.executable, example(ctx, "fragmenting_loop.py")],
                             os.path.join(out, name), env=env, timeout=600)
        check(run.returncode == 0, f"{name}: exit {run.returncode}: {run.stderr[-800:]}")
        rep = run.only("exit")
        reserved[name] = {s["index"]: s["devices"][0]["reserved_bytes"] for s in rep["steps"]}
        texts[name] = subprocess.run([ctx.oomscope, "report", run.reports["exit"][0]], capture_output=True,
                                     text=True).stdout
        with open(os.path.join(out, f"{name}.txt"), "w") as f:
            f.write(run.stdout + run.stderr + texts[name])
    diag = [l.strip() for l in texts["default"].splitlines() if "fragmentation:" in l]
    check(diag and "expandable_segments:True" in texts["default"], f"no fragmentation diagnosis: {texts['default'][:3000]}")
    step = max(set(reserved["default"]) & set(reserved["expandable"]))
    a, b = reserved["default"][step], reserved["expandable"][step]
    check(b < a, f"expandable segments reserve {b / MiB:.0f} MiB at step {step}, default {a / MiB:.0f} MiB")
    return (f"diagnosis: {diag[0][:160]}; at step {step} reserved {a / MiB:.0f} MiB (default) vs {b / MiB:.0f} MiB "
            f"(expandable_segments:True)")


SCENARIOS = [
    ("examples_leak", scenario_examples_leak),
    ("torch_hook_leak", scenario_torch_hook_leak),
    ("examples_fragmentation", scenario_examples_fragmentation),
]
