#!/usr/bin/env python3
"""The GPU suite: the scenarios of tests/gpu against real CUDA and PyTorch, run from an
installed tree (it builds nothing). Prints one row per scenario, PASS or FAIL, with the numbers
that decided it. Usage: gpu_suite.py PREFIX OUTDIR [SCENARIO ...]"""

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time
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
    check(run2.returncode == 1 and same_results(run2.stdout, run.stdout), "OOMSCOPE_DISABLE=1 changed the program's output")
    check(not run2.reports, f"OOMSCOPE_DISABLE=1 wrote {run2.reports}")
    return (f"tracked {row['tracked_bytes'] / MiB:.0f} MiB = live sum; driver used {used / MiB:.0f} MiB, "
            f"untracked {row['untracked_bytes'] / MiB:.0f} MiB; request {requested / MiB:.0f} MiB; "
            f"top site leak_step_buffer; disabled run identical" + footprint_note())


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


# ---------------------------------------------------------------- driver doors (issue 3)

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


def scenario_static_runtime(ctx):
    """(a) plain nvcc (static runtime): the driver reached through dlsym + cuGetProcAddress."""
    exe = os.path.join(ctx.examples, "leaky_oom_static")
    run, out = run_three_ways(ctx, "static_runtime", lambda tag: [exe, "8"])
    check(run.returncode == 1, f"exit {run.returncode}")
    rep = run.only("oom")
    trig = rep["trigger"]
    requested = int([l for l in run.stdout.splitlines() if l.startswith("final step:")][0].split("(")[1].split()[0])
    check(trig["requested_bytes"] == requested and trig["error"] == 2, f"trigger {trig}")
    dev = trig["device"]
    row = t.memory_row(rep, dev)
    total = next(d["total_bytes"] for d in rep["devices"] if d["index"] == dev)
    unit = (total // 64) & ~0xFFFFF
    check(row["tracked_bytes"] == 28 * unit == t.live_sum(rep, dev), f"tracked {row['tracked_bytes']} vs {28 * unit}")
    used = int([l for l in run.stdout.splitlines() if l.startswith("driver used by the steps:")][0].split(":")[1].split()[0])
    check(abs(used - 28 * unit) <= TOLERANCE, f"driver used {used} vs tracked {28 * unit}")
    check(any("leak_step_buffer" in f for f in t.frame_names(rep, rep["sites"][0]["stack"])), "top site")
    return (f"OOM via {trig['api']} ({requested / MiB:.0f} MiB); tracked {row['tracked_bytes'] / MiB:.0f} MiB vs "
            f"driver delta {used / MiB:.0f} MiB; apis {sorted({r[6] for r in rep['timeline']['rows']})}" + footprint_note())


def scenario_torch_default(ctx):
    """(b) PyTorch, default caching allocator."""
    _, facts, rep = workload(ctx, "torch_default", "torch-default")
    row = t.memory_row(rep, 0)
    check(row["tracked_bytes"] == facts["reserved"], f"tracked {row['tracked_bytes']} != reserved {facts['reserved']}")
    ok, line = delta_line(facts, row["tracked_bytes"])
    check(ok, line)
    return f"{line}; == memory_reserved(); by_source {compact(row['by_source'])}"


def scenario_torch_expandable(ctx):
    """(c) PyTorch with expandable_segments:True (cuMemCreate & co.), including an OOM."""
    env = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    run, facts, rep = workload(ctx, "torch_expandable", "torch-expandable", env)
    row = t.memory_row(rep, 0)
    check(row["tracked_bytes"] == facts["reserved"], f"tracked {row['tracked_bytes']} != reserved {facts['reserved']}")
    ok, line = delta_line(facts, row["tracked_bytes"])
    check(ok, line)
    apis = {r[6] for r in rep["timeline"]["rows"]}
    check("cuMemCreate" in apis and "cuMemMap" in apis, f"apis {apis}")
    check(facts["oom"], "no OutOfMemoryError")
    check(run.count("oom") == 1, f"OOM reports: {run.count('oom')}")
    oom = run.only("oom")
    failed = [r[9] for r in oom["timeline"]["rows"] if r[1] == "alloc_failed"]
    return (f"{line}; == memory_reserved(); {len(rep['segments'])} vmm segments; OOM via {oom['trigger']['api']} "
            f"error {oom['trigger']['error']}; failures seen {sorted(set(failed))}")


def scenario_torch_async(ctx):
    """(d) PyTorch with backend:cudaMallocAsync (stream-ordered pool)."""
    env = {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}
    _, facts, rep = workload(ctx, "torch_async", "torch-async", env)
    check(facts["backend"] == "cudaMallocAsync", f"backend {facts['backend']}")
    row = t.memory_row(rep, 0)
    pools = [p for p in rep["pools"] if p["device"] == 0]
    check(pools, "no pool statistics")
    reserved = max(p["reserved_bytes"] for p in pools)
    used = max(p["used_bytes"] for p in pools)
    check(row["tracked_bytes"] == used, f"tracked {row['tracked_bytes']} != pool used {used}")
    base_pools = [p for p in t.load(facts["baseline"])["pools"] if p["device"] == 0]
    base_reserved = max((p["reserved_bytes"] for p in base_pools), default=0)
    ok, line = delta_line(facts, reserved, base_reserved)
    check(ok, "pool reserved vs driver: " + line)
    return (f"tracked {row['tracked_bytes'] / MiB:.0f} MiB == pool used; pool reserved {reserved / MiB:.0f} MiB; "
            f"{line.replace('tracked', 'pool reserved')}; torch allocated {facts['allocated'] / MiB:.0f} MiB")


def scenario_cupy(ctx):
    """(e) CuPy with its default memory pool."""
    _, facts, rep = workload(ctx, "cupy", "cupy")
    row = t.memory_row(rep, 0)
    check(row["tracked_bytes"] == facts["pool_total"], f"tracked {row['tracked_bytes']} != pool total {facts['pool_total']}")
    ok, line = delta_line(facts, row["tracked_bytes"])
    check(ok, line)
    check(row["by_source"].get("cupy", 0) == row["tracked_bytes"], f"by_source {row['by_source']}")
    return f"{line}; == CuPy pool total_bytes; by_source {compact(row['by_source'])}"


def scenario_jax(ctx):
    """(f) JAX with its default preallocation: the big XLA allocation owned by jax."""
    _, facts, rep = workload(ctx, "jax", "jax")
    row = t.memory_row(rep, 0)
    ok, line = delta_line(facts, row["tracked_bytes"])
    check(ok, line)
    top = rep["sites"][0]
    check(top["bytes"] >= facts["total"] // 2, f"top site {top['bytes']}")
    check(row["by_source"].get("jax", 0) >= top["bytes"], f"by_source {row['by_source']}")
    return f"{line}; largest allocation {top['bytes'] / MiB:.0f} MiB owned by jax; by_source {compact(row['by_source'])}"


def scenario_cublas(ctx):
    """(g) a cuBLAS matmul: its workspace attributed to cublas or torch, as its stack says."""
    _, facts, rep = workload(ctx, "torch_cublas", "torch-cublas")
    row = t.memory_row(rep, 0)
    ok, line = delta_line(facts, row["tracked_bytes"])
    check(ok, line)
    by_module = site_sources(rep)
    cublas = sum(b for m, b in by_module.items() if m.startswith("libcublas"))
    check(row["by_source"].get("cublas", 0) == cublas, f"by_source {row['by_source']} vs stacks {dict(by_module)}")
    torch_bytes = sum(b for m, b in by_module.items() if m.startswith(("libc10", "libtorch")))
    check(row["by_source"].get("torch", 0) == torch_bytes, f"by_source {row['by_source']} vs stacks {dict(by_module)}")
    return f"{line}; by_source {compact(row['by_source'])} matches the stacks; reserved {facts['reserved'] / MiB:.0f} MiB"


# ---------------------------------------------------------------- PyTorch adapter (issue 4)

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


def scenario_torch_gpt2(ctx):
    """(a)+(f) GPT-2-style training runs out of memory: the allocator's view (exact), the Python
    lines of the sites by default (forward, backward, optimizer step; no history needed), blocks
    adding up, one step per step."""
    run, facts = torch_train(ctx, "torch_gpt2", "gpt2")
    check("oom_at_step" in facts, "no OutOfMemoryError")
    check(run.count("oom") == 1, f"OOM reports: {run.count('oom')}")
    rep = run.only("oom")
    check(rep["trigger"]["framework"] == "torch", f"trigger {rep['trigger']}")
    stats = facts["observer_stats"][-1]
    row = check_allocator_view(rep, stats)
    script = os.path.join(HERE, "scenarios", "torch_train.py")
    with open(script) as f:
        source = f.read().splitlines()
    kinds = {"forward": 0, "backward": 0, "optimizer": 0, "none": 0}
    top = []
    for s in rep["sites"]:
        f, borrowed = program_line(rep, s["stack"])
        if f is None:
            kinds["none"] += s["bytes"]
            continue
        text = source[f["line"] - 1] if f["file"] == script and 0 < f["line"] <= len(source) else ""
        if borrowed and "backward()" in text:
            kinds["backward"] += s["bytes"]
        elif "optimizer.step()" in text:
            kinds["optimizer"] += s["bytes"]
        elif f["function"].endswith("forward") or "model(tokens" in text:
            kinds["forward"] += s["bytes"]
        if len(top) < 3:
            top.append(f"{os.path.basename(f['file'])}:{f['line']} {f['function']}" + (" (main thread)" if borrowed else ""))
    # AdamW's state reuses blocks cached since the first backward: it rarely needs a segment of
    # its own (tensor level, with history, names it: torch_gpt2_history).
    for k in ("forward", "backward"):
        check(kinds[k] > 0, f"no {k} site named by its Python line: {kinds}; top {top}")
    total = sum(s["bytes"] for s in rep["sites"])
    check(kinds["none"] <= 0.02 * total, f"{kinds['none'] / GiB:.2f} GiB of sites without Python lines: {kinds}")
    trig = [f for f in t.stack(rep, rep["trigger"]["stack"])["frames"] if f["kind"] == "python"]
    check(trig and any(f["function"] == "train_gpt2" for f in trig), f"trigger python frames {trig[:4]}")
    steps = rep["steps"]
    check(len(steps) == facts["optimizer_steps"], f"{len(steps)} steps for {facts['optimizer_steps']} optimizer steps")
    check(all(s["devices"][0]["reserved_bytes"] is not None for s in steps), "steps without samples")
    return (f"allocated {row['allocated_bytes'] / GiB:.2f} GiB, reserved {row['reserved_bytes'] / GiB:.2f} GiB == "
            f"memory_stats() in the observer; fragmented {row['fragmented_bytes'] / GiB:.2f} GiB; request "
            f"{rep['trigger']['requested_bytes'] / GiB:.2f} GiB; {len(rep['segments'])} segments, blocks add up; "
            f"{len(steps)} steps sampled; sites by Python line (no history): forward {kinds['forward'] / GiB:.2f} GiB, "
            f"backward {kinds['backward'] / GiB:.2f} GiB, optimizer {kinds['optimizer'] / GiB:.2f} GiB, "
            f"none {kinds['none'] / GiB:.2f} GiB; top {top}")


def scenario_torch_gpt2_history(ctx):
    """(a) with OOMSCOPE_TORCH_HISTORY: PyTorch's own history names each live tensor's line."""
    run, facts = torch_train(ctx, "torch_gpt2_history", "gpt2", env={"OOMSCOPE_TORCH_HISTORY": "100000"})
    check(run.count("oom") == 1, f"OOM reports: {run.count('oom')}")
    rep = run.only("oom")
    check_allocator_view(rep, facts["observer_stats"][-1])
    # Forward activations and the optimizer's state are named by their own lines; backward's
    # blocks carry no Python frames in PyTorch's history.
    tensor_lines = {}
    no_python = 0
    for seg in rep["segments"]:
        for b in seg["blocks"]:
            if not b["state"].startswith("active"):
                continue
            if b["stack"] is None:
                no_python += b["size"]
                continue
            frames = t.stack(rep, b["stack"])["frames"]
            key = next((f"{os.path.basename(f['file'])}:{f['function']}" for f in frames), "?")
            tensor_lines[key] = tensor_lines.get(key, 0) + b["size"]
    check(any("forward" in k for k in tensor_lines), f"tensor lines {sorted(tensor_lines)[:10]}")
    check(any(k.startswith(("adamw.py", "optimizer.py", "adam.py")) for k in tensor_lines),
          f"no optimizer-state tensor named: {sorted(tensor_lines)[:12]}")
    optimizer_bytes = sum(v for k, v in tensor_lines.items() if k.startswith(("adamw.py", "optimizer.py", "adam.py")))
    return (f"tensors: optimizer state {optimizer_bytes / GiB:.2f} GiB named by its line, "
            f"{no_python / GiB:.2f} GiB without Python frames (backward)")


def scenario_torch_fraction(ctx):
    """(b) an OOM from set_per_process_memory_fraction: no CUDA call fails, one report."""
    run, facts = torch_train(ctx, "torch_fraction", "fraction")
    check(facts.get("caught"), "no OutOfMemoryError")
    check(run.count("oom") == 1, f"OOM reports: {run.count('oom')}")
    rep = run.only("oom")
    check(rep["trigger"]["error"] is None and rep["trigger"]["framework"] == "torch", f"trigger {rep['trigger']}")
    check_allocator_view(rep, facts["observer_stats"][-1])
    return f"one report, {rep['trigger']['message']}"


def scenario_torch_recover(ctx):
    """(c) a failed cudaMalloc that PyTorch recovers from (cache flush): no report."""
    run, facts = torch_train(ctx, "torch_recover", "recover")
    check(facts.get("recovered"), "no recovery")
    check(run.count("oom") == 0, f"OOM reports: {run.count('oom')}")
    rep = run.only("exit")
    failed = [r for r in rep["timeline"]["rows"] if r[1] == "alloc_failed"]
    check(failed and failed[0][9] == 2, "the failure is not in the timeline")
    return f"no OOM report; the failed cudaMalloc of {failed[0][4] / GiB:.1f} GiB is in the timeline"


def scenario_torch_gpt2_expandable(ctx):
    """(d) the GPT-2 OOM with expandable_segments:True: allocated/reserved/fragmented right."""
    run, facts = torch_train(ctx, "torch_gpt2_expandable", "expandable",
                             env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    check(run.count("oom") == 1, f"OOM reports: {run.count('oom')}")
    rep = run.only("oom")
    row = check_allocator_view(rep, facts["observer_stats"][-1])
    check(row["fragmented_bytes"] == row["reserved_bytes"] - row["allocated_bytes"], "fragmented")
    # What capture saw PyTorch map equals what PyTorch reserved; the rest is cuBLAS & co.
    torch_bytes = row["by_source"].get("torch", 0)
    check(torch_bytes == row["reserved_bytes"], f"tracked torch {torch_bytes} vs reserved {row['reserved_bytes']}")
    first = rep["at_first_failure"][0]["tracked_bytes"] / GiB if rep["at_first_failure"] else float("nan")
    return (f"allocated {row['allocated_bytes'] / GiB:.2f} GiB, reserved {row['reserved_bytes'] / GiB:.2f} GiB "
            f"(== memory_stats), fragmented {row['fragmented_bytes'] / GiB:.2f} GiB; tracked from torch == reserved, "
            f"by_source {compact(row['by_source'])}; tracked at the first failure {first:.2f} GiB")


def scenario_torch_gpt2_async(ctx):
    """(e) the GPT-2 OOM with backend:cudaMallocAsync: a report with pool statistics, no crash."""
    run, facts = torch_train(ctx, "torch_gpt2_async", "async", env={"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"})
    check("oom_at_step" in facts, "no OutOfMemoryError")
    check(run.count("oom") >= 1, f"OOM reports: {run.count('oom')}")
    rep = t.load(run.reports["oom"][0])
    pools = [p for p in rep["pools"] if p["device"] == 0]
    check(pools and pools[0]["reserved_bytes"] > 0, f"pools {rep['pools']}")
    return (f"{run.count('oom')} report(s) via {rep['trigger']['api']}; pool reserved {pools[0]['reserved_bytes'] / GiB:.2f} "
            f"GiB, used {pools[0]['used_bytes'] / GiB:.2f} GiB; {len(rep['steps'])} steps")


def compact(by_source):
    return ", ".join(f"{k} {v / MiB:.0f} MiB" for k, v in sorted(by_source.items()) if v)


def example(ctx, name):
    return os.path.join(ctx.examples, "torch", name)


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
    verdict = next((l.strip() for l in leaky.stdout.splitlines() if "per step over" in l), "?")
    fixed = subprocess.run([ctx.oomscope, "run", "-o", os.path.join(out, "fixed"), "--check", "--", sys.executable,
                            example(ctx, "fixed_loop.py"), "--steps", "200"], capture_output=True, text=True, timeout=600)
    with open(os.path.join(out, "fixed.txt"), "w") as f:
        f.write(fixed.stdout + fixed.stderr)
    check(fixed.returncode == 0, f"fixed: exit {fixed.returncode}: {fixed.stdout[-1200:]} {fixed.stderr[-500:]}")
    steps = len(t.load(glob.glob(os.path.join(out, "fixed", "oomscope-*-exit.json"))[0])["steps"])
    check(steps >= 200, f"fixed: {steps} steps sampled")
    return f"leaky: exit 1, {verdict} at leaky_loop.py:{line}; fixed: exit 0 over {steps} steps"


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



# ---------------------------------------------------------------- CUPTI (issue 6)

def scenario_cupti_profiler(ctx):
    """torch.profiler with CUDA activity records the same kernels with oomscope loaded (CUPTI
    on) as without it: oomscope yields CUPTI's one subscriber slot to Kineto."""
    script = os.path.join(HERE, "scenarios", "profiler_kernels.py")
    out = ctx.dir("cupti_profiler")
    plain = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=300)
    traced = t.run_oomscope(ctx.oomscope, [sys.executable, script], out, env={"OOMSCOPE_CUPTI": "on"})
    check(plain.returncode == 0 and traced.returncode == 0, f"exit {plain.returncode}/{traced.returncode}: {traced.stderr[-800:]}")

    def kernels(text):
        return [l for l in text.splitlines() if l.startswith("result:")]
    check(kernels(plain.stdout) and kernels(plain.stdout) == kernels(traced.stdout),
          f"plain {kernels(plain.stdout)} vs oomscope {kernels(traced.stdout)}")
    check("MULTIPLE_SUBSCRIBERS" not in traced.stdout + traced.stderr, "Kineto met a second subscriber")
    rep = run_report_any(traced)
    cov = rep["capture"].get("coverage") or {}
    check(cov.get("cupti") in ("yielded", "busy"), f"coverage {cov}")
    return (f"{kernels(plain.stdout)[0][8:]} plain = {kernels(traced.stdout)[0][8:]} with oomscope; "
            f"oomscope CUPTI {cov.get('cupti')} (confirmed {cov.get('confirmed')}, missed {cov.get('missed')} "
            f"before yielding); library {os.path.basename(cov.get('library', ''))}")


def run_report_any(run):
    for kind in ("oom", "exit", "request"):
        if run.reports.get(kind):
            return t.load(run.reports[kind][-1])
    raise AssertionError(f"no report: {run.stderr[-500:]}")


def cupti_lib_for_injection():
    """The libcupti an injected static program would use: the default search first; where it
    finds none (no toolkit), the one next to the libcudart PyTorch carries."""
    cudart = find_cudart_dir()
    if cudart and glob.glob(os.path.join(cudart, "libcupti.so.13*")):
        return sorted(glob.glob(os.path.join(cudart, "libcupti.so.13*")))[0]
    return None


def scenario_cupti_inject_static(ctx):
    """CUDA_INJECTION64_PATH alone (oomscope run --via=inject) records a static-runtime
    program's allocations through CUPTI, and its OOM."""
    exe = os.path.join(ctx.examples, "leaky_oom_static")
    out = ctx.dir("cupti_inject_static")
    env = {}
    run = t.run_oomscope_via(ctx.oomscope, [exe, "8"], out, via="inject")
    note = "library found by the default search"
    if "no libcupti found" in run.stderr:
        lib = cupti_lib_for_injection()
        check(lib, "no libcupti on this machine")
        env = {"OOMSCOPE_CUPTI_LIB": lib}
        out = ctx.dir("cupti_inject_static")
        run = t.run_oomscope_via(ctx.oomscope, [exe, "8"], out, via="inject", env=env)
        note = "OOMSCOPE_CUPTI_LIB=" + lib
    check(run.returncode == 1, f"exit {run.returncode}: {run.stderr[-600:]}")
    rep = run.only("oom")
    check(rep["capture"]["backends"] == ["cupti"], f"backends {rep['capture']['backends']}")
    trig = rep["trigger"]
    requested = int([l for l in run.stdout.splitlines() if l.startswith("final step:")][0].split("(")[1].split()[0])
    check(trig["requested_bytes"] == requested and trig["error"] == 2, f"trigger {trig}")
    dev = trig["device"]
    total = next(d["total_bytes"] for d in rep["devices"] if d["index"] == dev)
    unit = (total // 64) & ~0xFFFFF
    row = t.memory_row(rep, dev)
    check(row["tracked_bytes"] == 28 * unit == t.live_sum(rep, dev), f"tracked {row['tracked_bytes']} vs {28 * unit}")
    check(any("leak_step_buffer" in f for f in t.frame_names(rep, rep["sites"][0]["stack"])), "top site")
    apis = sorted({r[6] for r in rep["timeline"]["rows"]})
    return (f"OOM via {trig['api']} ({requested / MiB:.0f} MiB) recorded by CUPTI alone; tracked "
            f"{row['tracked_bytes'] / MiB:.0f} MiB = 28 units; apis {apis}; {note}")


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


def scenario_cupti_coverage(ctx):
    """Runs last: the CUPTI cross-check of every traced report the scenarios above left. Each
    allocation CUPTI saw outside the hooks is named (zero expected)."""
    rows = []
    missed_total = 0
    for path in sorted(glob.glob(os.path.join(ctx.outdir, "*", "oomscope-*.json"))):
        scenario = os.path.basename(os.path.dirname(path))
        if scenario.endswith("_disabled") or scenario.startswith("cupti_"):
            continue
        rep = t.load(path)
        cov = rep["capture"].get("coverage")
        if not cov or "interpose" not in rep["capture"]["backends"]:
            continue
        missed_total += cov["missed"]
        named = ", ".join(f"{m['api']} {m['size'] / MiB:.1f} MiB at {where(rep, m['stack'])}"
                          for m in cov["missed_allocations"][:3])
        rows.append(f"{scenario}/{rep['trigger']['kind']}: {cov['cupti']} {cov['confirmed']} confirmed, "
                    f"{cov['missed']} missed" + (f" ({named})" if named else ""))
    check(rows, "no report with a coverage section")
    print("\n".join("    " + r for r in rows), flush=True)
    check(missed_total == 0, f"{missed_total} allocations missed by the hooks: " + "; ".join(r for r in rows if "0 missed" not in r))
    return f"{len(rows)} reports, 0 allocations missed by the hooks; states {sorted({r.split(': ')[1].split()[0] for r in rows})}"

# ---------------------------------------------------------------- reliability (issue 8)

def threads_of(root_pid):
    """Where each thread of a process tree is waiting (a hang's first evidence)."""
    lines = []
    pids = [root_pid]
    try:
        for child in open(f"/proc/{root_pid}/task/{root_pid}/children").read().split():
            pids.append(int(child))
    except OSError:
        pass
    for pid in pids:
        for task in sorted(glob.glob(f"/proc/{pid}/task/*")):
            try:
                comm = open(task + "/comm").read().strip()
                wchan = open(task + "/wchan").read().strip()
                state = open(task + "/stat").read().split(") ")[1].split()[0]
                lines.append(f"{pid}/{os.path.basename(task)} {comm} {state} {wchan}")
            except OSError:
                continue
    return "; ".join(lines[:40])


def scenario_torch_killed(ctx, expandable=False):
    """A PyTorch training run killed with SIGKILL mid-training leaves its flight-recorder file;
    `oomscope recover` turns it into a report whose live bytes are what the run held
    (memory_reserved() at its last step). With expandable segments PyTorch's memory is CUDA VMM
    (cuMemCreate + cuMemMap), kept in the file's VMM table."""
    out = ctx.dir("torch_killed_expandable" if expandable else "torch_killed")
    facts_path = os.path.join(out, "facts.json")
    script = os.path.join(HERE, "scenarios", "torch_killed.py")
    log_path = os.path.join(out, "run.log")
    env = dict(os.environ)
    if expandable:
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    with open(log_path, "w") as log:  # files, not pipes: nothing can block on a full pipe
        proc = subprocess.Popen([ctx.oomscope, "run", "-o", out, "--", sys.executable, script, facts_path],
                                stdout=log, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 180
    while not os.path.exists(facts_path) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    if not os.path.exists(facts_path):
        diagnosis = threads_of(proc.pid)
        proc.kill()
        with open(log_path) as f:
            tail = f.read()[-2000:]
        check(False, f"the training never reached step 5 (exit {proc.poll()}); threads: {diagnosis}; log: {tail}")
    pid = t.load(facts_path)["pid"]
    os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=120)
    facts = t.load(facts_path)  # the last step's, written before the kill
    check(not t.reports_in(out), f"reports written by a killed process: {t.reports_in(out)}")
    flights = glob.glob(os.path.join(out, "*.flight"))
    check(len(flights) == 1, f"flight files {flights}")
    size = os.path.getsize(flights[0])
    started = time.monotonic()
    rec = subprocess.run([ctx.oomscope, "recover", flights[0]], capture_output=True, text=True, timeout=300)
    took = time.monotonic() - started
    check(rec.returncode == 0, f"recover: {rec.stderr}")
    rep = t.load(rec.stdout.strip())
    check(rep["trigger"]["kind"] == "recovered" and rep["process"]["pid"] == pid, "not the killed process's report")
    row = t.memory_row(rep, 0)
    # Live = PyTorch's segments (memory_reserved()) + what libraries allocated beside its
    # allocator (cuBLAS's workspaces): the stacks tell them apart, as in a report written live.
    check(row["by_source"].get("torch") == facts["reserved"],
          f"recovered torch-owned live {row['by_source'].get('torch')} != memory_reserved() {facts['reserved']} "
          f"at step {facts['step']}; by_source {row['by_source']}")
    others = row["tracked_bytes"] - facts["reserved"]
    top, _ = program_line(rep, rep["sites"][0]["stack"])
    cap = rep["capture"]
    missing = [n for n in cap["notes"] if "missing" in n]
    check(not missing, f"the recovered report says memory is missing: {missing}")
    rendered = subprocess.run([ctx.oomscope, "report", rec.stdout.strip()], capture_output=True, text=True)
    check(rendered.returncode == 0, f"oomscope report on it: {rendered.stderr}")
    return (f"killed at step {facts['step']}; flight file {size / MiB:.0f} MiB; recovered in {took:.2f} s: live "
            f"{row['tracked_bytes'] / MiB:.1f} MiB in {cap['live_allocations']} allocations: torch "
            f"{row['by_source'].get('torch', 0) / MiB:.1f} MiB == memory_reserved() {facts['reserved'] / MiB:.1f} MiB, "
            f"others {others / MiB:.1f} MiB; {cap['events_recorded']} events, {cap['events_dropped']} dropped; "
            f"top site {os.path.basename(top['file']) + ':' + str(top['line']) if top else '?'}; by_source "
            f"{compact(row['by_source'])}")


def scenario_torch_ranks(ctx):
    """torchrun, two processes on the one GPU (gloo): rank 1 runs out of memory and dies of it,
    torchrun ends rank 0. Each rank leaves its own report; the launcher, which never touches
    CUDA, none."""
    out = ctx.dir("torch_ranks")
    script = os.path.join(HERE, "scenarios", "torch_ranks.py")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", script, out]
    run = t.run_oomscope(ctx.oomscope, cmd, out, timeout=150)
    check(run.returncode != 0, "torchrun succeeded although rank 1 ran out of memory")
    ranks = {r: t.load(os.path.join(out, f"rank-{r}.json")) for r in (0, 1)}
    by_pid = {}
    for kind, paths in run.reports.items():
        for path in paths:
            rep = t.load(path)
            by_pid.setdefault(rep["process"]["pid"], []).append(rep)
    pids = {f["pid"] for f in ranks.values()}
    check(set(by_pid) <= pids, f"reports from processes that are not ranks: {set(by_pid) - pids}")
    parts = []
    for r, f in ranks.items():
        reps = by_pid.get(f["pid"], [])
        check(reps, f"rank {r} (pid {f['pid']}) left no report; stderr: {run.stderr[-1500:]}")
        for rep in reps:
            check(rep["process"].get("rank") == r, f"rank {r}'s report says rank {rep['process'].get('rank')}")
            check(rep["process"].get("world_size") == 2, "world_size")
        kinds = sorted(rep["trigger"]["kind"] for rep in reps)
        first = reps[0] if len(reps) == 1 else next(rep for rep in reps if rep["trigger"]["kind"] != "exit")
        tracked = t.memory_row(first, 0)["tracked_bytes"]
        if r == 1:
            check("oom" in kinds, f"rank 1 reports {kinds}: no oom")
            oom = next(rep for rep in reps if rep["trigger"]["kind"] == "oom")
            tracked = t.memory_row(oom, 0)["tracked_bytes"]
            check(tracked == f["reserved"], f"rank 1 tracked {tracked} != memory_reserved() {f['reserved']}")
        parts.append(f"rank {r} (pid {f['pid']}): {'+'.join(kinds)}, tracked {tracked / GiB:.2f} GiB "
                     f"(memory_reserved() {f['reserved'] / GiB:.2f} GiB)")
    left = glob.glob(os.path.join(out, "*.flight"))
    return "; ".join(parts) + f"; torchrun exit {run.returncode}; flight files left {len(left)}"


SCENARIOS = [
    ("cuda_example", scenario_cuda_example),
    ("torch_oom", scenario_torch_oom),
    ("static_runtime", scenario_static_runtime),
    ("torch_default", scenario_torch_default),
    ("torch_expandable", scenario_torch_expandable),
    ("torch_async", scenario_torch_async),
    ("cupy", scenario_cupy),
    ("jax", scenario_jax),
    ("torch_cublas", scenario_cublas),
    ("torch_gpt2", scenario_torch_gpt2),
    ("torch_gpt2_history", scenario_torch_gpt2_history),
    ("torch_fraction", scenario_torch_fraction),
    ("torch_recover", scenario_torch_recover),
    ("torch_gpt2_expandable", scenario_torch_gpt2_expandable),
    ("torch_gpt2_async", scenario_torch_gpt2_async),
    ("examples_leak", scenario_examples_leak),
    ("examples_fragmentation", scenario_examples_fragmentation),
    ("cupti_profiler", scenario_cupti_profiler),
    ("cupti_inject_static", scenario_cupti_inject_static),
    ("torch_killed", scenario_torch_killed),
    ("torch_killed_expandable", lambda ctx: scenario_torch_killed(ctx, expandable=True)),
    ("torch_ranks", scenario_torch_ranks),
    ("cupti_coverage", scenario_cupti_coverage),
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
