"""Plain CUDA programs: the example against the real runtime, and built by plain nvcc (static
runtime: the driver through dlsym + cuGetProcAddress)."""

import os

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


SCENARIOS = [
    ("cuda_example", scenario_cuda_example),
    ("static_runtime", scenario_static_runtime),
]
