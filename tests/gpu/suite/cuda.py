"""Plain CUDA programs: the example against the real runtime, and built by plain nvcc (static
runtime: the driver through dlsym + cuGetProcAddress); native frames by file and line; memory
paused and resumed with real cuMem* calls."""

import json
import os
import re
import subprocess

from .common import check, footprint_note, MiB, run_three_ways, same_results, t, TOLERANCE


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


REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def call_lines(source, functions):
    """The line of each function's cudaMalloc call in the example's source, read from the file."""
    found, current = {}, None
    for number, text in enumerate(open(source).read().splitlines(), 1):
        m = re.search(r"\b(" + "|".join(functions) + r")\(", text)
        if m and "NOINLINE" in text:
            current = m.group(1)
        if current and "cudaMalloc(" in text and current not in found:
            found[current] = number
    return found


def scenario_native_lines(ctx):
    """The nvcc-built example's frames carry leaky_oom.cu:LINE from its DWARF (read by the
    bundled libdw when the report is written), for the shared and the static runtime."""
    source = os.path.join(REPO, "examples", "cuda", "leaky_oom.cu")
    functions = ("load_weights", "allocate_activations", "leak_step_buffer", "run_final_step")
    expected = call_lines(source, functions)
    check(set(expected) == set(functions), f"lines in the source: {expected}")
    seen = []
    for name in ("leaky_oom", "leaky_oom_static"):
        run = t.run_oomscope(ctx.oomscope, [os.path.join(ctx.examples, name), "8"], ctx.dir("native_lines_" + name),
                             env=ctx.cuda_env())
        rep = run.only("oom")
        for function in functions:
            frames = [f for s in rep["stacks"] for f in s["frames"] if f["kind"] == "native" and function in f["symbol"]]
            check(frames, f"{name}: no frame of {function}")
            for f in frames:
                check(os.path.basename(f.get("file", "")) == "leaky_oom.cu" and f.get("line") == expected[function],
                      f"{name}: {function} at {f.get('file')}:{f.get('line')}, expected leaky_oom.cu:{expected[function]}")
        text = subprocess.run([ctx.oomscope, "report", run.reports["oom"][0], "--color", "never"], capture_output=True,
                              text=True).stdout
        where = "leaky_oom.cu:%d" % expected["leak_step_buffer"]
        check(where in text, f"{name}: the report does not show {where}")
        libs = sorted({os.path.basename(m["path"]) for s in rep["stacks"] for f in s["frames"] if f["kind"] == "native"
                       and "line" in f for m in rep["modules"] if m["id"] == f["module"]})
        seen.append(f"{name}: {len(expected)} functions at their lines, modules with lines {libs}")
    return "; ".join(seen)


def scenario_pause_resume(ctx):
    """examples/cuda/pause_resume (real cuMemAddressReserve/Create/Map/Unmap/Release): paused
    bytes while paused (the driver's free memory grew by them), none after the resume, no leak."""
    regions, mib = 4, 256
    total = regions * mib * MiB
    run = t.run_oomscope(ctx.oomscope, [os.path.join(ctx.examples, "pause_resume"), str(regions), str(mib)],
                         ctx.dir("pause_resume"), env=ctx.cuda_env())
    check(run.returncode == 0, f"exit {run.returncode}: {run.stderr[-400:]}")
    free = {l.split(":")[0]: int(l.split()[-1]) for l in run.stdout.splitlines() if ": free " in l}
    reports = {}
    for path in run.reports.get("request", []):
        rep = t.load(path)
        reports[rep["trigger"]["message"].split(":")[0].strip()] = rep
    check(set(reports) == {"running", "paused", "resumed"}, f"reports {sorted(reports)}")
    released = free["paused"] - free["running"]
    check(abs(released - total) <= TOLERANCE, f"the driver's free memory grew by {released / MiB:.0f} MiB, paused {total / MiB:.0f}")
    row = t.memory_row(reports["paused"], 0)
    check(row.get("paused_bytes") == total, f"paused_bytes {row.get('paused_bytes')} != {total}")
    check(len(reports["paused"].get("paused", [])) == regions, f"paused ranges {reports['paused'].get('paused')}")
    check(row["tracked_bytes"] == t.memory_row(reports["running"], 0)["tracked_bytes"] - total,
          f"tracked while paused {row['tracked_bytes']}")
    check("paused" not in reports["resumed"], "paused after the resume")
    check(t.memory_row(reports["resumed"], 0)["tracked_bytes"] == t.memory_row(reports["running"], 0)["tracked_bytes"],
          "tracked after the resume differs from before the pause")
    (exit_path,) = run.reports["exit"]
    analysed = json.loads(subprocess.run([ctx.oomscope, "report", exit_path, "--format", "json"], capture_output=True,
                                         text=True).stdout)
    check(analysed["leaks"] == [], f"leaks {analysed['leaks']}")
    codes = [d["code"] for d in analysed["diagnosis"]]
    check("paused_memory" in codes, f"diagnosis {codes}")
    stack = reports["paused"]["paused"][0]["stack"]
    check(any("allocateRegion" in f for f in t.frame_names(reports["paused"], stack)), "the reserving stack")
    return (f"paused {total / MiB:.0f} MiB in {regions} ranges (the driver's free +{released / MiB:.0f} MiB), "
            f"reserved in allocateRegion; resumed: none paused, tracked as before; exit: no leak, {codes}")


SCENARIOS = [
    ("cuda_example", scenario_cuda_example),
    ("static_runtime", scenario_static_runtime),
    ("native_lines", scenario_native_lines),
    ("pause_resume", scenario_pause_resume),
]
