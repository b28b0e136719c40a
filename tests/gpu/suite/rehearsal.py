"""Will it fit? (issue 23), per model:
- rehearsal: the largest batch that trains 5 steps under `oomscope run --device-limit LEFT`
  (binary search with real runs) against the card really shared: another process holds all
  but LEFT of the GPU while the rehearsed answer and the sizes beside it run plainly;
- prediction: `oomscope fit --verify` on the full GPU and under --device-limit 24GiB against
  the largest batch found by binary search with real runs, and the time each takes.
Each run starts Python, PyTorch and the model afresh. Run them alone:
tests/gpu/run_all.sh PREFIX OUT fit_gpt2 fit_resnet50"""

import json
import os
import subprocess
import sys
import time

from .common import check, GiB, HERE

TRIAL = os.path.join(HERE, "scenarios", "fit_trial.py")


def fits(cmd, out, tag):
    """Runs one trial; True when it trained its steps, False when it ran out of memory."""
    start = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    seconds = time.monotonic() - start
    with open(os.path.join(out, tag + ".txt"), "w") as f:
        f.write(" ".join(cmd) + "\n" + p.stdout + p.stderr[-3000:])
    # One line per run as it ends: a search cut short by the device's time says how far it got.
    print(f"  {tag}: {'fits' if p.returncode == 0 else 'oom' if p.returncode == 3 else p.returncode} "
          f"({seconds:.1f} s)", flush=True)
    check(p.returncode in (0, 3), f"{tag}: exit {p.returncode}: {p.stderr[-1500:]}")
    return p.returncode == 0


def binary_search(test, grid, hi):
    """The largest multiple of grid below hi for which test holds (test(grid) assumed), by
    bisection over the grid; returns it, the runs and the seconds they took."""
    start = time.monotonic()
    lo, hi, runs = 1, hi // grid, 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        runs += 1
        lo, hi = (mid, hi) if test(mid * grid) else (lo, mid)
    return lo * grid, runs, time.monotonic() - start


def limited(ctx, out, model, gib):
    return lambda n: fits([ctx.oomscope, "run", "-o", os.path.join(out, f"limited-{gib}-{n}"),
                           "--device-limit", f"{gib}GiB", "--", sys.executable, TRIAL, model, str(n)],
                          out, f"limited-{gib}-{model}-{n}")


def plain(out, model, tag):
    return lambda n: fits([sys.executable, TRIAL, model, str(n)], out, f"{tag}-{model}-{n}")


def really_shared(out, model, left_gib, rehearsed, grid):
    """The largest batch with another process holding all but left_gib of the GPU, searched
    from the rehearsed answer outwards by the grid's step."""
    hog = subprocess.Popen([sys.executable, os.path.join(HERE, "scenarios", "hog.py"), str(left_gib)],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        ready = hog.stdout.readline()
        check(ready.startswith("ready"), f"the hog did not start: {ready!r}")
        test = plain(out, model, f"shared-{left_gib}")
        n = rehearsed
        if test(n):
            while test(n + grid):
                n += grid
        else:
            n -= grid
            while n > grid and not test(n):
                n -= grid
    finally:
        hog.stdin.close()
        hog.wait(timeout=60)
    return n, int(ready.split()[1])


def oomscope_fit(ctx, out, model, gib):
    cmd = [ctx.oomscope, "fit", "-o", os.path.join(out, f"fit-{gib or 'full'}"), "--verify", "--format", "json"]
    if gib:
        cmd += ["--device-limit", f"{gib}GiB"]
    p = subprocess.run(cmd + ["--", sys.executable, TRIAL, model, "{}"], capture_output=True, text=True, timeout=900)
    with open(os.path.join(out, f"fit-{gib or 'full'}.json"), "w") as f:
        f.write(p.stdout + p.stderr)
    check(p.returncode in (0, 1) and p.stdout.strip(), f"fit {model} {gib}: exit {p.returncode}: {p.stderr[-1500:]}")
    r = json.loads(p.stdout)
    print(f"  fit {model} {gib or 'full'}: {r['largest_size']} in {r['seconds']:.1f} s, rounds {r['rounds']}, "
          f"verify {r.get('verify')}", flush=True)
    return r


def compare(what, r, truth, search_runs, search_seconds):
    p = r["largest_size"]
    off = (p - truth) / truth
    v = {x["size"]: x["fits"] for x in r["verify"]}
    check(abs(off) <= 0.10, f"{what}: predicted {p}, the binary search found {truth} ({off:+.1%})")
    check(r["seconds"] < search_seconds / 3, f"{what}: fit took {r['seconds']:.0f} s, the search {search_seconds:.0f} s")
    check(v[p], f"{what}: --verify: the predicted {p} does not fit")
    return (f"{what}: fit {p} ({off:+.1%}; {len(r['sizes'])} runs in {len(r['rounds'])} rounds, {r['seconds']:.0f} s; "
            f"by the tracked peaks {r.get('largest_size_by_tracked_peak')}) "
            f"vs binary search {truth} ({search_runs} runs, {search_seconds:.0f} s); --verify: {p} fits, "
            f"{p + 1} {'fits' if v[p + 1] else 'does not'}")


def will_it_fit(ctx, model, left_gib, grid, hi_limited, hi_full):
    out = ctx.dir(f"fit_{model}")
    rows = []
    # Rehearsal against the card really shared.
    rehearsed, runs, secs = binary_search(limited(ctx, out, model, left_gib), grid, hi_limited)
    real, free_left = really_shared(out, model, left_gib, rehearsed, grid)
    check(abs(rehearsed - real) <= grid, f"{model} at {left_gib} GiB: rehearsed {rehearsed}, really shared {real}")
    rows.append(f"{model} at {left_gib} GiB: largest batch {rehearsed} rehearsed ({runs} runs, {secs:.0f} s), {real} "
                f"with the GPU really shared (free left {free_left / GiB:.2f} GiB)")
    # Prediction under 24 GiB: the rehearsed binary search is the truth there (or a truth known
    # from an earlier search on this software: known_truths; a device limit makes it the same on
    # any card).
    known = known_truths()
    if left_gib == 24:
        truth24, runs24, secs24 = rehearsed, runs, secs
    else:
        truth24, runs24, secs24 = known.get(f"{model}:24") or binary_search(limited(ctx, out, model, 24), grid,
                                                                             hi_limited)
    rows.append(compare(f"{model} under 24 GiB", oomscope_fit(ctx, out, model, 24), truth24, runs24, secs24))
    # Prediction on the whole GPU (a known whole-card truth only holds for the card it was found on).
    truth, runs_full, secs_full = known.get(f"{model}:full") or binary_search(plain(out, model, "full"), grid, hi_full)
    rows.append(compare(f"{model} on the whole GPU", oomscope_fit(ctx, out, model, None), truth, runs_full, secs_full))
    return "; ".join(rows)


SCENARIOS = [
    ("fit_gpt2", lambda ctx: will_it_fit(ctx, "gpt2", 24, 1, 65, 257)),
    ("fit_resnet50", lambda ctx: will_it_fit(ctx, "resnet50", 40, 16, 1025, 4097)),
]


def refine(test, lo, hi):
    """The largest n in [lo, hi) with test(n), lo known to fit and hi known not to (grid 1)."""
    start, runs = time.monotonic(), 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        runs += 1
        lo, hi = (mid, hi) if test(mid) else (lo, mid)
    return lo, runs, time.monotonic() - start


def known_truths():
    """Truths found by earlier binary searches with real runs on this machine and software, so
    that a session re-measures the prediction without re-running them: OOMSCOPE_FIT_TRUTHS=
    'gpt2:24=15/6/120,gpt2:full=93/8/140' (largest batch / runs / seconds of the search). A
    known truth is exact (already refined to grid 1)."""
    known = {}
    for item in filter(None, os.environ.get("OOMSCOPE_FIT_TRUTHS", "").split(",")):
        key, value = item.split("=")
        largest, runs, seconds = value.split("/")
        known[key] = (int(largest), int(runs), float(seconds))
    return known


def predict(ctx, model, grid, hi_limited, hi_full):
    """Prediction only (issue 23, Done-when 3): fit under 24 GiB and on the whole GPU against
    the largest batch by binary search with real runs (or a truth known from an earlier search:
    known_truths). A truth on a grid coarser than 1 is refined to the exact batch."""
    out = ctx.dir(f"predict_{model}")
    known = known_truths()
    rows = []
    for card, test, hi in ((24, limited(ctx, out, model, 24), hi_limited), (None, plain(out, model, "full"), hi_full)):
        key = f"{model}:{card or 'full'}"
        truth, runs, secs = known.get(key) or binary_search(test, grid, hi)
        if grid > 1 and key not in known:
            truth, more, extra = refine(test, truth, truth + grid)
            runs, secs = runs + more, secs + extra
        print(f"  truth {key}: {truth} ({runs} runs, {secs:.0f} s{', known' if key in known else ''})", flush=True)
        rows.append(compare(f"{model} {'under 24 GiB' if card else 'on the whole GPU'}",
                            oomscope_fit(ctx, out, model, card), truth, runs, secs))
    return "; ".join(rows)


def whole_card_truth(ctx, model, grid, hi_full):
    """Only the whole-card truth (binary search with real runs, refined to grid 1), printed as an
    OOMSCOPE_FIT_TRUTHS item: on a card without a known truth, a session finds it in one device
    call and runs fit_MODEL with it in the next (together they outlast one call)."""
    out = ctx.dir(f"truth_{model}")
    test = plain(out, model, "full")
    truth, runs, secs = binary_search(test, grid, hi_full)
    if grid > 1:
        truth, more, extra = refine(test, truth, truth + grid)
        runs, secs = runs + more, secs + extra
    return f"OOMSCOPE_FIT_TRUTHS item {model}:full={truth}/{runs}/{secs:.0f}"


SCENARIOS += [
    ("predict_gpt2", lambda ctx: predict(ctx, "gpt2", 1, 65, 257)),
    ("predict_resnet50", lambda ctx: predict(ctx, "resnet50", 16, 1025, 4097)),
    ("truth_gpt2", lambda ctx: whole_card_truth(ctx, "gpt2", 1, 257)),
    ("truth_resnet50", lambda ctx: whole_card_truth(ctx, "resnet50", 16, 4097)),
]
