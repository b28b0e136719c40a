"""Will it fit? (issue 23): the largest batch that trains 5 steps under `oomscope run
--device-limit` against the largest that trains while another process really holds all but
that much of the GPU, each found by binary search with real runs."""

import os
import subprocess
import sys
import time

from .common import check, GiB, HERE, t

TRIAL = os.path.join(HERE, "scenarios", "fit_trial.py")
# Each run starts Python, PyTorch and the model afresh (10-20 s on the H200 machine): the two
# models' four searches take about 10 minutes. Run it alone: tests/gpu/run_all.sh PREFIX OUT rehearsal


def fits(cmd, out, tag):
    start = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    with open(os.path.join(out, tag + ".txt"), "w") as f:
        f.write(" ".join(cmd) + "\n" + p.stdout + p.stderr[-3000:])
    # One line per run as it ends: a search cut short by the device's time still says how far it got.
    print(f"  {tag}: {'fits' if p.returncode == 0 else 'oom' if p.returncode == 3 else p.returncode} "
          f"({time.monotonic() - start:.1f} s)", flush=True)
    check(p.returncode in (0, 3), f"{tag}: exit {p.returncode}: {p.stderr[-1500:]}")
    return p.returncode == 0


def largest(test, lo, hi):
    """The largest n in [lo, hi) for which test(n) holds, test(lo) assumed; runs, in order."""
    tried = []
    while hi - lo > 1:
        mid = (lo + hi) // 2
        ok = test(mid)
        tried.append((mid, ok))
        lo, hi = (mid, hi) if ok else (lo, mid)
    return lo, tried


def search(ctx, out, model, left_gib, lo, hi):
    def limited(n):
        return fits([ctx.oomscope, "run", "-o", os.path.join(out, f"limited-{n}"), "--device-limit", f"{left_gib}GiB", "--",
                     sys.executable, TRIAL, model, str(n)], out, f"limited-{model}-{n}")
    rehearsed, tried_limited = largest(limited, lo, hi)
    hog = subprocess.Popen([sys.executable, os.path.join(HERE, "scenarios", "hog.py"), str(left_gib)],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        ready = hog.stdout.readline()
        check(ready.startswith("ready"), f"the hog did not start: {ready!r}")
        real, tried_real = largest(lambda n: fits([sys.executable, TRIAL, model, str(n)], out, f"real-{model}-{n}"), lo, hi)
    finally:
        hog.stdin.close()
        hog.wait(timeout=60)
    check(abs(rehearsed - real) <= 1, f"{model} at {left_gib} GiB: rehearsed {rehearsed}, real {real}; "
          f"tried {tried_limited} / {tried_real}")
    return f"{model} at {left_gib} GiB: largest batch {rehearsed} rehearsed, {real} with the GPU really shared " \
           f"(free left {int(ready.split()[1]) / GiB:.2f} GiB); {len(tried_limited)} + {len(tried_real)} runs"


def scenario_rehearsal(ctx):
    out = ctx.dir("rehearsal")
    return "; ".join([search(ctx, out, "gpt2", 24, 1, 129), search(ctx, out, "resnet50", 40, 1, 2049)])


SCENARIOS = [
    ("rehearsal", scenario_rehearsal),
]
