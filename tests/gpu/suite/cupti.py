"""CUPTI: oomscope steps aside for torch.profiler, captures alone when injected, and (last, over
every report the other families left) cross-checks the hooks."""

import glob
import os
import subprocess
import sys

from .common import check, find_cudart_dir, HERE, MiB, run_report_any, t, where


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


SCENARIOS = [
    ("cupti_profiler", scenario_cupti_profiler),
    ("cupti_inject_static", scenario_cupti_inject_static),
    ("cupti_coverage", scenario_cupti_coverage),
]
