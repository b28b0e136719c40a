#!/usr/bin/env python3
"""The GPU suite: the scenarios of tests/gpu against real CUDA and PyTorch, run from an
installed tree (it builds nothing). Prints one row per scenario, PASS or FAIL, with the numbers
that decided it. Usage: gpu_suite.py PREFIX OUTDIR [SCENARIO ...]"""

import glob
import json
import os
import shutil
import subprocess
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "pylib"))
sys.path.insert(0, HERE)

import oomscope_testlib as t  # noqa: E402

MiB = 1 << 20
GiB = 1 << 30


class Ctx:
    def __init__(self, prefix, outdir):
        self.prefix = os.path.abspath(prefix)
        self.oomscope = os.path.join(self.prefix, "bin", "oomscope")
        self.examples = os.path.join(self.prefix, "share", "oomscope", "examples")
        self.outdir = os.path.abspath(outdir)
        self.cudart_dir = find_cudart_dir()

    def dir(self, name):
        d = os.path.join(self.outdir, name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        return d

    def cuda_env(self):
        env = {}
        if self.cudart_dir:
            env["LD_LIBRARY_PATH"] = self.cudart_dir + ":" + os.environ.get("LD_LIBRARY_PATH", "")
        return env


def find_cudart_dir():
    """The folder of the real libcudart.so.13, found at run time: the toolkit next to nvcc,
    else the nvidia wheels PyTorch carries."""
    nvcc = shutil.which("nvcc")
    candidates = []
    if nvcc:
        root = os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
        candidates += [os.path.join(root, "lib64"), os.path.join(root, "targets", "x86_64-linux", "lib")]
    try:
        import nvidia  # noqa: F401
        for base in nvidia.__path__:
            candidates += glob.glob(os.path.join(base, "cu13", "lib")) + glob.glob(os.path.join(base, "cuda_runtime", "lib"))
    except ImportError:
        pass
    for c in candidates:
        if glob.glob(os.path.join(c, "libcudart.so.13*")):
            return c
    return None


def check(cond, message):
    if not cond:
        raise AssertionError(message)


# ---------------------------------------------------------------- scenarios

def scenario_cuda_example(ctx):
    """The example against the real runtime: OOM report contents; exit status kept; and
    OOMSCOPE_DISABLE=1 gives the same output and no report."""
    exe = os.path.join(ctx.examples, "leaky_oom")
    out = ctx.dir("cuda_example")
    run = t.run_oomscope(ctx.oomscope, [exe, "8"], out, env=ctx.cuda_env())
    check(run.returncode == 1, f"exit status {run.returncode}, expected 1; stderr: {run.stderr[-500:]}")
    rep = run.only("oom")
    trig = rep["trigger"]
    printed = [l for l in run.stdout.splitlines() if l.startswith("final step:")]
    check(printed, "the program did not print its failed request")
    requested = int(printed[0].split("(")[1].split()[0])
    check(trig["requested_bytes"] == requested, f"requested {trig['requested_bytes']} != printed {requested}")
    check(trig["api"] == "cudaMalloc" and trig["error"] == 2, f"trigger {trig}")
    dev = trig["device"]
    row = t.memory_row(rep, dev)
    live = t.live_sum(rep, dev)
    check(row["tracked_bytes"] == live, f"tracked {row['tracked_bytes']} != live sum {live}")
    total = next(d["total_bytes"] for d in rep["devices"] if d["index"] == dev)
    unit = (total // 64) & ~0xFFFFF
    check(row["tracked_bytes"] == 28 * unit, f"tracked {row['tracked_bytes']} != 28 units of {unit}")
    top = t.frame_names(rep, rep["sites"][0]["stack"])
    second = t.frame_names(rep, rep["sites"][1]["stack"])
    check(any("leak_step_buffer" in f for f in top), f"top site: {top[:3]}")
    check(any("load_weights" in f for f in second), f"second site: {second[:3]}")
    check(any("run_final_step" in f for f in t.frame_names(rep, trig["stack"])), "failed request's stack")
    free = next(d["free_bytes"] for d in rep["devices"] if d["index"] == dev)
    used = total - free
    # OOMSCOPE_DISABLE=1: same program output, no report.
    out2 = ctx.dir("cuda_example_disabled")
    run2 = t.run_oomscope(ctx.oomscope, [exe, "8"], out2, env=dict(ctx.cuda_env(), OOMSCOPE_DISABLE="1"))
    check(run2.returncode == 1 and run2.stdout == run.stdout, "OOMSCOPE_DISABLE=1 changed the program's output")
    check(not run2.reports, f"OOMSCOPE_DISABLE=1 wrote {run2.reports}")
    return (f"tracked {row['tracked_bytes'] / MiB:.0f} MiB = live sum; driver used {used / MiB:.0f} MiB, "
            f"untracked {row['untracked_bytes'] / MiB:.0f} MiB; request {requested / MiB:.0f} MiB; "
            f"top site leak_step_buffer; disabled run identical")


def scenario_torch_oom(ctx):
    """PyTorch holds 4 GiB and asks for more than the GPU has: one OOM report whose tracked
    bytes equal torch.cuda.memory_reserved() then, with stacks through libc10_cuda."""
    out = ctx.dir("torch_oom")
    facts_path = os.path.join(out, "facts.json")
    script = os.path.join(HERE, "scenarios", "torch_oom.py")
    run = t.run_oomscope(ctx.oomscope, [sys.executable, script, facts_path], out)
    check(run.returncode == 3, f"exit status {run.returncode}, expected 3; stderr: {run.stderr[-800:]}")
    facts = t.load(facts_path)
    check(facts["oom"], "PyTorch did not raise OutOfMemoryError")
    check(run.count("oom") == 1, f"expected one OOM report, got {run.count('oom')}")
    rep = run.only("oom")
    dev = rep["trigger"]["device"]
    row = t.memory_row(rep, dev)
    check(row["tracked_bytes"] == facts["reserved_before"],
          f"tracked {row['tracked_bytes']} != memory_reserved() {facts['reserved_before']}")
    site_modules = set()
    for s in rep["sites"]:
        site_modules.update(t.frame_modules(rep, s["stack"]))
    check(any(m.startswith("libc10_cuda") for m in site_modules), f"no libc10_cuda frame; modules {sorted(site_modules)[:8]}")
    check(row["by_source"].get("torch", 0) == row["tracked_bytes"], f"by_source {row['by_source']}")
    return (f"tracked {row['tracked_bytes'] / GiB:.2f} GiB == memory_reserved() {facts['reserved_before'] / GiB:.2f} GiB; "
            f"request {rep['trigger']['requested_bytes'] / GiB:.1f} GiB; untracked {row['untracked_bytes'] / MiB:.0f} MiB; "
            f"stacks through libc10_cuda; by_source torch")


SCENARIOS = [
    ("cuda_example", scenario_cuda_example),
    ("torch_oom", scenario_torch_oom),
]


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    ctx = Ctx(sys.argv[1], sys.argv[2])
    wanted = set(sys.argv[3:])
    results = []
    for name, fn in SCENARIOS:
        if wanted and name not in wanted:
            continue
        try:
            details = fn(ctx)
            results.append((name, "PASS", details))
        except Exception as e:  # a failing scenario is a row, not a crash of the suite
            results.append((name, "FAIL", f"{type(e).__name__}: {e}"))
            traceback.print_exc(file=sys.stderr)
        print(f"{results[-1][1]}  {name}: {results[-1][2]}", flush=True)
    width = max(len(n) for n, _, _ in results) if results else 8
    print("\n| scenario | result | numbers |\n|---|---|---|")
    for name, status, details in results:
        print(f"| {name:<{width}} | {status} | {details} |")
    with open(os.path.join(ctx.outdir, "results.json"), "w") as f:
        json.dump([{"scenario": n, "result": s, "details": d} for n, s, d in results], f, indent=1)
    return 0 if all(s == "PASS" for _, s, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
