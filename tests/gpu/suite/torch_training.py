"""GPT-2-style training under the PyTorch adapter: the allocator's view at the OOM, Python lines,
history, the framework's own limit, a failure it recovers from, expandable segments and the
async backend."""

import os
import subprocess

from .common import check, check_allocator_view, compact, false_alarms, GiB, HERE, peak_of, program_line, t, torch_train


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
    # Issue 24: the memory by role, exact against what the observer sums from the objects.
    roles = row.get("by_role")
    expected = facts["observer_roles"][-1]
    check(roles and all(roles[k] == expected[k] for k in expected), f"by_role {roles} vs objects {expected}")
    check(roles["activations"] == row["allocated_bytes"] - sum(expected.values()), f"activations {roles}")
    steps = rep["steps"]
    check(len(steps) == facts["optimizer_steps"], f"{len(steps)} steps for {facts['optimizer_steps']} optimizer steps")
    check(all(s["devices"][0]["reserved_bytes"] is not None for s in steps), "steps without samples")
    return (f"allocated {row['allocated_bytes'] / GiB:.2f} GiB, reserved {row['reserved_bytes'] / GiB:.2f} GiB == "
            f"memory_stats() in the observer; fragmented {row['fragmented_bytes'] / GiB:.2f} GiB; request "
            f"{rep['trigger']['requested_bytes'] / GiB:.2f} GiB; {len(rep['segments'])} segments, blocks add up; "
            f"{len(steps)} steps sampled; sites by Python line (no history): forward {kinds['forward'] / GiB:.2f} GiB, "
            f"backward {kinds['backward'] / GiB:.2f} GiB, optimizer {kinds['optimizer'] / GiB:.2f} GiB, "
            f"none {kinds['none'] / GiB:.2f} GiB; top {top}; by_role == the objects' sums: parameters "
            f"{roles['parameters'] / GiB:.2f} GiB, gradients {roles['gradients'] / GiB:.2f} GiB, optimizer state "
            f"{roles['optimizer_state'] / GiB:.2f} GiB, activations {roles['activations'] / GiB:.2f} GiB")


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


def scenario_torch_gpt2_peak(ctx):
    """Issue 21: a healthy GPT-2 training run (no OOM): its exit report, written after the
    tensors were freed, says what held the peak (torch, by Python line, PyTorch's own peak
    allocated beside it), `oomscope report` shows it, and no growth or cache_churn is reported."""
    run, facts = torch_train(ctx, "torch_gpt2_peak", "healthy")
    check("oom_at_step" not in facts and run.count("oom") == 0, f"an OOM in the healthy run: {run.reports}")
    rep = false_alarms(ctx, run)
    peak = peak_of(rep)
    share = peak["by_source"].get("torch", 0) / peak["bytes"]
    check(share >= 0.9, f"torch holds {share:.1%} of the peak: {peak['by_source']}")
    check(peak.get("allocated_bytes") and peak["allocated_bytes"] <= peak["bytes"],
          f"PyTorch's peak allocated {peak.get('allocated_bytes')} vs peak {peak['bytes']}")
    lines = []
    for s in peak["sites"][:3]:
        f, _ = program_line(rep, s["stack"])
        lines.append(f"{os.path.basename(f['file'])}:{f['line']} {f['function']}" if f else "?")
    check(any(l.startswith("torch_train.py") or "forward" in l for l in lines), f"peak sites {lines}")
    text = subprocess.run([ctx.oomscope, "report", "--color", "never", run.reports["exit"][-1]], capture_output=True,
                          text=True, timeout=300).stdout
    check("At the peak" in text, f"no 'At the peak' section: {text[:1500]}")
    # Issue 24: the roles at the last step (AdamW: two fp32 copies of the parameters), and what
    # measuring them costs a step.
    roles = t.memory_row(rep, 0).get("by_role")
    check(roles and roles["optimizer_state"] == 2 * roles["parameters"] and roles["gradients"] == roles["parameters"],
          f"by_role at exit {roles}")
    step = sorted(facts["step_s"])[len(facts["step_s"]) // 2]
    cost = facts["roles_measure_s"] / step
    check(cost <= 0.01, f"measuring the roles takes {facts['roles_measure_s'] * 1e3:.2f} ms, {cost:.2%} of a step")
    now = t.memory_row(rep, 0)["tracked_bytes"]
    return (f"{facts['optimizer_steps']} steps, no OOM; exit report: tracked {now / GiB:.2f} GiB now, peak "
            f"{peak['bytes'] / GiB:.2f} GiB at {peak['time_ns'] / 1e9:.2f} s, torch {share:.1%}, PyTorch allocated "
            f"{peak['allocated_bytes'] / GiB:.2f} GiB; top sites {lines}; no growth/cache_churn; by role at the last "
            f"step: parameters {roles['parameters'] / GiB:.2f} GiB, optimizer state 2x; measuring the roles "
            f"{facts['roles_measure_s'] * 1e3:.2f} ms per step sample = {cost:.2%} of the median step ({step * 1e3:.0f} ms)")


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


SCENARIOS = [
    ("torch_gpt2", scenario_torch_gpt2),
    ("torch_gpt2_history", scenario_torch_gpt2_history),
    ("torch_gpt2_peak", scenario_torch_gpt2_peak),
    ("torch_fraction", scenario_torch_fraction),
    ("torch_recover", scenario_torch_recover),
    ("torch_gpt2_expandable", scenario_torch_gpt2_expandable),
    ("torch_gpt2_async", scenario_torch_gpt2_async),
]
