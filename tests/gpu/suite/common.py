"""Shared by the GPU suite's scenario families: the run context, running programs three ways,
comparing results, and reading reports. Each family is a module of this package with its
SCENARIOS; gpu_suite.py runs them and prints the table."""

import glob
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/gpu
sys.path.insert(0, os.path.join(HERE, "..", "pylib"))

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


# Device memory CUPTI's subscriber takes (measured on the H200: 12 MiB per process). A program
# that sizes its last request by the free memory it sees asks for that much less under oomscope
# with CUPTI on: the only difference allowed between its traced and plain outputs.
CUPTI_DEVICE_BYTES_MAX = 64 * MiB


cupti_footprints = []


def same_results(a, b):
    """Result lines equal, but for the free-memory-sized request of 'final step:' lines, which
    may differ by CUPTI's device memory (recorded in cupti_footprints)."""
    import re
    la = [l for l in a.splitlines() if l.startswith(("result:", "final step:", "after "))]
    lb = [l for l in b.splitlines() if l.startswith(("result:", "final step:", "after "))]
    if len(la) != len(lb):
        return False
    for x, y in zip(la, lb):
        if x == y:
            continue
        nx, ny = re.findall(r"\d+", x), re.findall(r"\d+", y)
        if not x.startswith("final step:") or re.sub(r"\d+", "#", x) != re.sub(r"\d+", "#", y) or len(nx) != len(ny):
            return False
        diffs = [abs(int(p) - int(q)) for p, q in zip(nx, ny) if p != q]
        if len(diffs) != 1 or diffs[0] > CUPTI_DEVICE_BYTES_MAX:
            return False
        cupti_footprints.append(diffs[0])
    return True


def footprint_note():
    if not cupti_footprints:
        return ""
    return f" (but the free-memory-sized request, {cupti_footprints[-1] / MiB:.0f} MiB smaller with CUPTI's subscriber on)"


def check(cond, message):
    if not cond:
        raise AssertionError(message)


TOLERANCE = 96 * MiB  # lazily loaded kernels and library handles move the driver's count too


def run_three_ways(ctx, name, make_cmd, env=None):
    """Under oomscope, plain, and under oomscope with OOMSCOPE_DISABLE=1: the program's result
    lines and exit status must be the same all three ways. make_cmd(tag) builds the command."""
    env = dict(env or {})
    out = ctx.dir(name)
    traced = t.run_oomscope(ctx.oomscope, make_cmd("traced"), out, env=env)
    plain = subprocess.run(make_cmd("plain"), env=dict(os.environ, **env), capture_output=True, text=True, timeout=300)
    disabled = t.run_oomscope(ctx.oomscope, make_cmd("disabled"), ctx.dir(name + "_disabled"),
                              env=dict(env, OOMSCOPE_DISABLE="1"))

    def result(text):
        return [l for l in text.splitlines() if l.startswith(("result:", "final step:", "after "))]
    check(traced.returncode == plain.returncode == disabled.returncode,
          f"exit status traced {traced.returncode} plain {plain.returncode} disabled {disabled.returncode}; "
          f"stderr: {traced.stderr[-600:]}")
    check(result(traced.stdout) and same_results(traced.stdout, plain.stdout) and result(plain.stdout) == result(disabled.stdout),
          f"results differ: {result(traced.stdout)} / {result(plain.stdout)} / {result(disabled.stdout)}")
    check(not disabled.reports, f"OOMSCOPE_DISABLE=1 wrote {disabled.reports}")
    return traced, out


def workload(ctx, name, workload_name, env=None):
    """The workload three ways; returns the traced run, its facts and its measure report."""
    facts_path = os.path.join(ctx.outdir, name + "-facts-{}.json")
    script = os.path.join(HERE, "scenarios", "workloads.py")
    run, _ = run_three_ways(ctx, name, lambda tag: [sys.executable, script, workload_name, facts_path.format(tag)], env)
    facts = t.load(facts_path.format("traced"))
    check(facts.get("report"), f"no measure report; stderr: {run.stderr[-500:]}")
    return run, facts, t.load(facts["report"])


def tracked_of(path, device=0):
    if not path:
        return 0
    rep = t.load(path)
    return next((r["tracked_bytes"] for r in rep["memory"] if r["device"] == device), 0)


def delta_line(facts, tracked, baseline_tracked=None):
    """Tracked growth between the baseline and measure reports against the driver's growth
    over the same span; the rest of the driver's use before the baseline is the context."""
    base = tracked_of(facts.get("baseline")) if baseline_tracked is None else baseline_tracked
    delta = facts["free0"] - facts["free1"]
    grown = tracked - base
    ok = abs(delta - grown) <= TOLERANCE
    context = facts["total"] - facts["free0"] - base
    return ok, (f"tracked {tracked / MiB:.0f} MiB (+{grown / MiB:.0f} MiB since baseline) vs driver +{delta / MiB:.0f} MiB "
                f"(diff {(delta - grown) / MiB:+.0f} MiB); context residue {context / MiB:.0f} MiB")


def site_sources(rep):
    """Sum of device-kind site bytes by the source their stack gives."""
    from collections import Counter
    out = Counter()
    for s in rep["sites"]:
        if s["kind"] != "device":
            continue
        mods = t.frame_modules(rep, s["stack"])
        first = next((m for m in mods if not m.startswith(("libcuda.so", "libcudart", "liboomscope"))), "")
        out[first] += s["bytes"]
    return out


def torch_train(ctx, name, mode, env=None):
    out = ctx.dir(name)
    facts_path = os.path.join(out, "facts.json")
    cmd = [sys.executable, os.path.join(HERE, "scenarios", "torch_train.py"), mode, facts_path]
    run = t.run_oomscope(ctx.oomscope, cmd, out, env=env, timeout=600)
    check(run.returncode == 0, f"exit {run.returncode}: {run.stderr[-1500:]}")
    return run, t.load(facts_path)


def check_allocator_view(rep, stats):
    row = t.memory_row(rep, rep["trigger"]["device"])
    check(row["allocated_bytes"] == stats["allocated_bytes.all.current"],
          f"allocated {row['allocated_bytes']} != memory_stats {stats['allocated_bytes.all.current']}")
    check(row["reserved_bytes"] == stats["reserved_bytes.all.current"],
          f"reserved {row['reserved_bytes']} != memory_stats {stats['reserved_bytes.all.current']}")
    seg_sum = sum(s["size"] for s in rep["segments"] if s["device"] == rep["trigger"]["device"])
    check(seg_sum == row["reserved_bytes"], f"segments add up to {seg_sum}, reserved {row['reserved_bytes']}")
    for s in rep["segments"]:
        check(sum(b["size"] for b in s["blocks"]) == s["size"], f"blocks of segment {s['address']:#x}")
    return row


def program_line(rep, stack_id):
    """The frame a user recognises (as `oomscope report` picks it): the innermost Python frame
    outside torch/, and whether it is borrowed from the main thread."""
    borrowed = False
    first = None
    for f in t.stack(rep, stack_id)["frames"]:
        if f["kind"] != "python":
            continue
        if f["file"] == "<main thread>" and f["line"] == 0:
            borrowed = True
            continue
        first = first or (f, borrowed)
        if not f["file"].split("-packages/")[-1].startswith(("torch/", "jax/", "jaxlib/", "cupy")):
            return f, borrowed
    return first or (None, False)


def compact(by_source):
    return ", ".join(f"{k} {v / MiB:.0f} MiB" for k, v in sorted(by_source.items()) if v)


def example(ctx, name):
    return os.path.join(ctx.examples, "torch", name)


def run_report_any(run):
    for kind in ("oom", "exit", "request"):
        if run.reports.get(kind):
            return t.load(run.reports[kind][-1])
    raise AssertionError(f"no report: {run.stderr[-500:]}")


def where(rep, stack_id):
    """The program line of a stack, else its first frame outside the CUDA libraries."""
    frame, _ = program_line(rep, stack_id)
    if frame:
        return f"{os.path.basename(frame['file'])}:{frame['line']}"
    for f in t.stack(rep, stack_id)["frames"]:
        module = os.path.basename(t.module_path(rep, f.get("module"))) if f["kind"] == "native" else ""
        if not module.startswith(("libcuda.so", "libcudart", "libcupti", "liboomscope")):
            return f"{f.get('symbol') or '?'} ({module})"
    return "?"


def analysed(ctx, path):
    """The report at path as `oomscope report --format json` gives it: leaks and diagnosis filled."""
    import json
    p = subprocess.run([ctx.oomscope, "report", "--format", "json", path], capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, f"report --format json {path}: exit {p.returncode}: {p.stderr[-500:]}")
    return json.loads(p.stdout)


def false_alarms(ctx, run):
    """Issue 21 (4): a healthy program's exit report has no growth or cache_churn finding."""
    check(run.reports.get("exit"), f"no exit report: {run.stderr[-500:]}")
    rep = analysed(ctx, run.reports["exit"][-1])
    found = [f"{d['code']}: {d['message']}" for d in rep["diagnosis"] if d["code"] in ("growth", "cache_churn")]
    check(not found, f"false alarms on a healthy run: {found}")
    return rep


def peak_of(rep, device=0):
    """The device's peak composition (memory[].peak) and the share of it the largest source holds."""
    row = t.memory_row(rep, device)
    peak = row.get("peak")
    check(peak and peak["bytes"] > 0 and peak["sites"], f"no peak composition: {row.get('peak')}")
    check(peak["bytes"] >= 0.99 * row["peak_tracked_bytes"],
          f"peak composed at {peak['bytes']} bytes, peak tracked {row['peak_tracked_bytes']}")
    return peak
