"""The report's views on a real OOM: the GPT-2 OOM report that torch_gpt2 left, exported for
PyTorch's own memory_viz (its functions read the pickle: trace_plot, segment_plot, stats and the
flame-graph lines of memory) with totals equal to the report's reserved and allocated bytes, as
a chrome trace and folded stacks, and as an HTML page."""

import glob
import json
import os
import subprocess
import sys

from .common import GiB, MiB, check, t


def oomscope(ctx, *args):
    run = subprocess.run([ctx.oomscope] + list(args), capture_output=True, text=True, timeout=300)
    check(run.returncode == 0, f"oomscope {' '.join(args)}: {run.stderr[-800:]}")
    return run.stdout.strip()


def memory_viz(pickle_path, out_dir):
    """PyTorch's own reading of the pickle, in a fresh interpreter: its trace_plot and
    segment_plot pages, its stats (segsum: reserved and allocated totals, with its own
    assertion that they add up), the lines of its memory flame graph (memory() hands them to
    flamegraph.pl, which it downloads: no network here, so the lines are taken as they are)."""
    code = r'''
import json, pickle, subprocess, sys
from torch.cuda import _memory_viz as viz
path, out = sys.argv[1], sys.argv[2]
for kind in ("trace_plot", "segment_plot"):
    done = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", kind, path, "-o", f"{out}/{kind}.html"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
data = pickle.load(open(path, "rb"))
stats = viz.segsum(data)
lines = viz.memory(data, format_flamegraph=lambda text: text)
trace = viz.trace(data)
reserved = sum(s["total_size"] for s in data["segments"])
allocated = sum(b["requested_size"] for s in data["segments"] for b in s["blocks"] if b["state"] == "active_allocated")
print(json.dumps({"reserved": reserved, "allocated": allocated, "stats": stats.splitlines()[-12:],
                  "memory_lines": len(lines.splitlines()), "trace_lines": len(trace.splitlines())}))
'''
    run = subprocess.run([sys.executable, "-c", code, pickle_path, out_dir], capture_output=True, text=True, timeout=300)
    check(run.returncode == 0, f"memory_viz on {pickle_path}: {run.stderr[-1500:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def scenario_torch_gpt2_views(ctx):
    reports = glob.glob(os.path.join(ctx.outdir, "torch_gpt2", "oomscope-*-oom.json"))
    check(reports, "no OOM report of torch_gpt2 (it runs first)")
    report_path = reports[0]
    rep = t.load(report_path)
    row = t.memory_row(rep, rep["trigger"]["device"])
    out = ctx.dir("torch_gpt2_views")
    results = {}
    for name, extra in (("torch-only", ["--torch-only"]), ("all", [])):
        path = os.path.join(out, f"gpt2-{name}.pickle")
        oomscope(ctx, "export", report_path, "-f", "torch-snapshot", "-o", path, *extra)
        results[name] = memory_viz(path, out)
    only, everything = results["torch-only"], results["all"]
    check(only["reserved"] == row["reserved_bytes"], f"memory_viz reserved {only['reserved']} != {row['reserved_bytes']}")
    check(only["allocated"] == row["allocated_bytes"], f"memory_viz allocated {only['allocated']} != {row['allocated_bytes']}")
    outside = sum(b for s, b in row["by_source"].items() if s not in ("torch", "untracked"))
    check(everything["reserved"] == row["reserved_bytes"] + outside,
          f"with memory outside PyTorch: {everything['reserved']} != {row['reserved_bytes']} + {outside}")
    trace = os.path.join(out, "gpt2.trace.json")
    oomscope(ctx, "export", report_path, "-f", "chrome-trace", "-o", trace)
    with open(trace) as f:
        events = json.load(f)["traceEvents"]
    folded = os.path.join(out, "gpt2.folded")
    oomscope(ctx, "export", report_path, "-f", "folded", "-o", folded)
    with open(folded) as f:
        folded_total = sum(int(line.rsplit(" ", 1)[1]) for line in f)
    check(folded_total == row["tracked_bytes"], f"folded {folded_total} != tracked {row['tracked_bytes']}")
    page = oomscope(ctx, "html", report_path, "-o", os.path.join(out, "gpt2.html"))
    return (f"memory_viz (PyTorch {torch_version()}): trace_plot, segment_plot, stats, memory lines "
            f"{only['memory_lines']}; --torch-only totals reserved {only['reserved'] / GiB:.2f} GiB == report, "
            f"allocated {only['allocated'] / GiB:.2f} GiB == report; with the memory outside PyTorch "
            f"{everything['reserved'] / GiB:.2f} GiB (+{outside / MiB:.0f} MiB cuBLAS & co.); chrome trace "
            f"{len(events)} events; folded = tracked; html {os.path.getsize(page) / 1024:.0f} KiB")


def torch_version():
    run = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    return run.stdout.strip() or "?"


SCENARIOS = [
    ("torch_gpt2_views", scenario_torch_gpt2_views),
]
