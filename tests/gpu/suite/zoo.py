"""Will it fit, in the papers' terms (issue 44): `oomscope fit` over a model zoo, each model on a
smaller card (rehearsed with --device-limit), against the truth by binary search with real runs
and against the card made real by a ballast process.

Per row (a model of scenarios/fit_trial.py and a card):
1. `oomscope fit --device-limit CARD --steps 3 --verify --format json`: its answer, its time
   (the measuring rounds, without --verify), the model's peak against the measured one at each
   run it was fitted to and at the two --verify sizes.
2. The truth under the same limit, found as Lightning's batch-size finder finds it (`binsearch`:
   from 2, double while a run fits, then bisect), with real runs under `oomscope run
   --device-limit CARD`, one at a time: its answer, runs and time. Every run of it that fits
   gives one more size at which the model's peak is compared with the measured one (out of
   sample: sizes fit never ran).
3. The ballast: once every row is done, a process holds all but CARD of the GPU
   (scenarios/hog.py) while the rehearsed truth T and T+1 run plainly beside it (no oomscope):
   T fits and T+1 does not is the ballast's truth T; otherwise it walks outwards to it.
The rows run side by side while the card has room for their limits (a row holds at most its
card: fit's runs together stay within it, the search and --verify run one at a time); each
process is rehearsed on its own, so the answers do not depend on what runs beside it. Their
times do (contention for the GPU and CPUs), so the rows' `fit` commands take turns: a fit's
round runs up to three programs at once beside the other rows' searches, as a search's run
does beside the others' (three rows' fits at once had nine programs starting together: GPT-2
with checkpointing's first round took 23 s there, its second 15 s, a search's run 15.5 s).

Runnable alone: tests/gpu/run_all.sh PREFIX OUT fit_zoo. OOMSCOPE_ZOO_ROWS=MODEL:CARD,... picks
rows (default: ROWS); OOMSCOPE_ZOO_DEADLINE (seconds, default 560): no row starts, and no
ballast probe, after it (rows not done are listed); each row's result is written to
OUT/fit_zoo/ROW.json as it ends, and `python3 -m suite.zoo table OUT...` prints the table of
docs/GPU-RESULTS.md from them. The harness itself runs in CI on the fake CUDA
(tests/integration/test_gpu_zoo_harness.py: OOMSCOPE_ZOO_TRIAL, OOMSCOPE_ZOO_HOG and
OOMSCOPE_ZOO_BUDGET_GIB stand in for the GPU's)."""

import glob
import json
import os
import subprocess
import sys
import threading
import time

from .common import check, GiB, HERE, MiB

TRIAL = os.environ.get("OOMSCOPE_ZOO_TRIAL") or os.path.join(HERE, "scenarios", "fit_trial.py")
HOG = os.environ.get("OOMSCOPE_ZOO_HOG") or os.path.join(HERE, "scenarios", "hog.py")
STEPS = 3

# model of fit_trial.py, the card it is fitted for (GiB): a card where its largest batch is 15
# or more, so that one batch is within the 5 % the answer is held to.
ROWS = [
    ("gpt2", 40), ("gpt2-fp32", 40), ("bert", 24), ("t5", 24), ("lstm", 24), ("efficientnet", 24),
    ("gpt2-accum", 40), ("gpt2-ckpt", 24), ("convnext", 24), ("resnet50", 24), ("resnet50-bf16", 24),
    ("resnet50-ckpt", 24),
]


def trial_cmd(model, n):
    return [sys.executable, TRIAL, model, str(n), str(STEPS)]


def exit_report(folder):
    for path in sorted(glob.glob(os.path.join(folder, "oomscope-*.json"))):
        with open(path) as f:
            r = json.load(f)
        if r["trigger"]["kind"] == "exit":
            return r
    return None


def measured_peak(report, device=0):
    """The peak `oomscope fit` measures in a run (report/analysis/fit.cpp addTrialReport): the
    device's peak by source, PyTorch's by the most it had allocated at once (step samples)."""
    row = next((m for m in report["memory"] if m["device"] == device), None)
    if row is None:
        return None
    by_source = dict(row["peak"]["by_source"]) if row.get("peak") else {"other": row["peak_tracked_bytes"]}
    allocated = [d["peak_allocated_bytes"] for s in report.get("steps", []) for d in s["devices"]
                 if d["device"] == device and d.get("peak_allocated_bytes")]
    if allocated and "torch" in by_source:
        by_source["torch"] = max(allocated)
    return sum(by_source.values())


def predicted_peak(fit, n):
    """The model's peak at size n (report/analysis/fit.cpp predictPeak): the sources' a + b·n +
    c·n², each at least 0."""
    return sum(max(0, round(m["a"] + m["b"] * n + m["c"] * n * n)) for m in fit["model"].values())


class Budget:
    """GiB of the GPU the rows may hold at once."""

    def __init__(self, gib):
        self.left = gib
        self.cv = threading.Condition()

    def give(self, gib):
        with self.cv:
            self.left += gib
            self.cv.notify_all()


# When the rows' runs stop (monotonic seconds), so that the ballast has the GPU alone before the
# zoo's deadline: a row cut by it is said, and what it had (fit's answer) kept.
ROWS_END = [float("inf")]
# One row's `fit` at a time (the module's docstring says why).
FIT_TURN = threading.Lock()


def left():
    remaining = ROWS_END[0] - time.monotonic()
    if remaining <= 0:
        raise TimeoutError("cut by the zoo's deadline (OOMSCOPE_ZOO_DEADLINE)")
    return remaining


def run_group(cmd, timeout, env=None):
    """subprocess.run in a process group of its own, the whole group killed at the timeout
    (raised as TimeoutError): a trial's Python under `oomscope run` or `fit` must not outlive
    it and hold GPU memory beside the ballast."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                         env=dict(os.environ, **(env or {})))
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        p.communicate()
        raise TimeoutError(f"cut by the zoo's deadline after {timeout:.0f} s: {' '.join(cmd[-4:])}")
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def run_trial(cmd, log, env=None, rows=True):
    start = time.monotonic()
    p = run_group(cmd, min(400, left()) if rows else 400, env)
    seconds = time.monotonic() - start
    with open(log, "w") as f:
        f.write(" ".join(cmd) + f"\nexit {p.returncode}, {seconds:.1f} s\n" + p.stdout + p.stderr[-4000:])
    check(p.returncode in (0, 3), f"{' '.join(cmd[-4:])}: exit {p.returncode}: {p.stderr[-800:]}")
    return p.returncode == 0, seconds


def row_fit(ctx, out, model, card):
    cmd = [ctx.oomscope, "fit", "-o", os.path.join(out, "fit"), "--device-limit", f"{card}GiB", "--steps", str(STEPS),
           "--verify", "--format", "json", "--", sys.executable, TRIAL, model, "{}"]
    start = time.monotonic()
    p = run_group(cmd, min(900, left()))
    with open(os.path.join(out, "fit.json"), "w") as f:
        f.write(p.stdout + p.stderr)
    check(p.returncode in (0, 1, 3) and p.stdout.strip(), f"fit {model}: exit {p.returncode}: {p.stderr[-800:]}")
    r = json.loads(p.stdout)
    r["status"], r["wall_seconds"] = p.returncode, time.monotonic() - start
    return r


def row_search(ctx, out, model, card, start=2):
    """The largest size that trains, found as Lightning's batch-size finder does (its `binsearch`
    mode): from 2, double while a run fits, then bisect between the last that fit and the first
    that did not. Real runs under the limit, one at a time."""
    probes = []

    def test(n):
        folder = os.path.join(out, f"search-{n}")
        ok, seconds = run_trial([ctx.oomscope, "run", "-o", folder, "--device-limit", f"{card}GiB", "--"] +
                                trial_cmd(model, n), folder + ".log")
        rep = exit_report(folder) if ok else None
        probes.append({"size": n, "fits": ok, "seconds": seconds,
                       "measured_bytes": measured_peak(rep) if rep else None})
        print(f"  {model}: search {n} {'fits' if ok else 'oom'} ({seconds:.1f} s)", flush=True)
        return ok

    lo, hi = 0, start
    try:
        while test(hi):
            lo, hi = hi, hi * 2
            check(hi < 1 << 20, f"{model}: still fits at {lo}")
        if lo == 0:
            lo, hi = (1, hi) if test(1) else (0, 1)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if test(mid) else (lo, mid)
    except TimeoutError as e:  # cut by the deadline: the truth is within [lo, hi), said
        print(f"  {model}: search {e}", flush=True)
        return {"truth": lo, "cut": [lo, hi], "runs": len(probes), "seconds": sum(p["seconds"] for p in probes),
                "probes": probes}
    return {"truth": lo, "runs": len(probes), "seconds": sum(p["seconds"] for p in probes), "probes": probes}


def row(ctx, model, card):
    out = ctx.dir(os.path.join("fit_zoo", f"{model}-{card}"))
    result = {"model": model, "card_gib": card, "steps": STEPS}
    with FIT_TURN:
        fit = row_fit(ctx, out, model, card)
    result["fit"] = {k: fit.get(k) for k in ("status", "largest_size", "seconds", "wall_seconds", "rounds", "rerun_alone",
                                            "refused", "verify", "verify_seconds", "verified_largest_size", "largest_measured_size",
                                            "context_bytes", "model", "predicted_bytes", "headroom_bytes", "method",
                                            "largest_size_by_peak_model", "replay", "replay_not_used")}
    result["fit"]["sizes"] = fit["sizes"]
    with open(os.path.join(ctx.outdir, "fit_zoo", f"{model}-{card}.json"), "w") as f:
        json.dump(result, f, indent=1)  # fit's answer is kept should the search be cut
    # Our reading of a run's report is fit's: at each size fit ran, the peak it measured.
    verified = {v["size"]: v for v in fit.get("verify") or []}
    for s in fit["sizes"]:
        rep = exit_report(os.path.join(out, "fit", f"size-{s['size']}"))
        if s.get("measured_bytes") and rep and s["size"] not in verified:
            check(measured_peak(rep) == s["measured_bytes"],
                  f"{model}: size {s['size']}: fit measured {s['measured_bytes']}, we read {measured_peak(rep)}")
            check(predicted_peak(fit, s["size"]) == s["predicted_bytes"],
                  f"{model}: size {s['size']}: fit's model gives {s['predicted_bytes']}, ours {predicted_peak(fit, s['size'])}")
    search = row_search(ctx, out, model, card)
    result["search"] = search
    # The model's peak against the measured one: in sample (the runs it was fitted to), at
    # --verify's sizes, and at every size of the search that fits (out of sample).
    points = []
    for s in fit["sizes"]:
        if s.get("measured_bytes"):
            points.append({"size": s["size"], "where": "fitted", "measured": s["measured_bytes"],
                           "predicted": s["predicted_bytes"]})
    for v in fit.get("verify") or []:
        if v.get("measured_bytes"):
            points.append({"size": v["size"], "where": "verify", "measured": v["measured_bytes"],
                           "predicted": v["predicted_bytes"]})
    if "model" in fit and "refused" not in fit:
        for p in search["probes"]:
            if p["measured_bytes"]:
                points.append({"size": p["size"], "where": "search", "measured": p["measured_bytes"],
                               "predicted": predicted_peak(fit, p["size"])})
    for p in points:
        p["relative"] = (p["predicted"] - p["measured"]) / p["measured"]
    result["points"] = points
    with open(os.path.join(ctx.outdir, "fit_zoo", f"{model}-{card}.json"), "w") as f:
        json.dump(result, f, indent=1)
    return result


def ballast(ctx, rows, deadline):
    """Per card: a process holds all but CARD of the GPU while each row's rehearsed truth T and
    T+1 run plainly beside it; where they disagree with T, it walks outwards (doubling steps,
    then bisection) to the largest that fits."""
    by_card = {}
    for r in rows:
        if "cut" not in r["search"]:  # no rehearsed truth to compare with
            by_card.setdefault(r["card_gib"], []).append(r)
    for card, group in by_card.items():
        if time.monotonic() > deadline:
            break
        # The ballast holds all but CARD of what is free when it starts: nothing else may be
        # on the GPU then (a process ending later would leave the trial more than CARD).
        waited = time.monotonic()
        while compute_processes() and time.monotonic() < min(deadline, waited + 60):
            time.sleep(1)
        busy = compute_processes()
        check(not busy, f"the GPU is not idle for the ballast: processes {busy}")
        hog = subprocess.Popen([sys.executable, HOG, str(card)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            ready = hog.stdout.readline()
            check(ready.startswith("ready"), f"the ballast did not start: {ready!r}")
            free_left = int(ready.split()[1])
            check(free_left <= card * GiB + 64 * MiB, f"the ballast left {free_left / GiB:.2f} GiB free for a {card} GiB card")
            for r in group:
                if time.monotonic() > deadline:
                    break
                model, truth = r["model"], r["search"]["truth"]
                out = os.path.join(ctx.outdir, "fit_zoo", f"{model}-{card}")
                probes = []

                def test(n):
                    ok, seconds = run_trial(trial_cmd(model, n), os.path.join(out, f"ballast-{n}.log"), rows=False)
                    probes.append({"size": n, "fits": ok, "seconds": seconds})
                    print(f"  {model}: beside the ballast {n} {'fits' if ok else 'oom'} ({seconds:.1f} s)", flush=True)
                    return ok
                if test(truth):
                    lo, step = truth, 1
                    while test(lo + step):
                        lo, step = lo + step, step * 2
                    hi = lo + step
                else:
                    hi, step = truth, 1
                    while hi - step >= 1 and not test(hi - step):
                        hi, step = hi - step, step * 2
                    lo = max(hi - step, 1)
                while hi - lo > 1:
                    mid = (lo + hi) // 2
                    lo, hi = (mid, hi) if test(mid) else (lo, mid)
                r["ballast"] = {"truth": lo, "free_left_bytes": free_left, "probes": probes}
                with open(os.path.join(ctx.outdir, "fit_zoo", f"{model}-{card}.json"), "w") as f:
                    json.dump(r, f, indent=1)
        finally:
            hog.stdin.close()
            hog.wait(timeout=120)


def compute_processes():
    """PIDs of the processes on the GPU (nvidia-smi), the ballast's own excepted."""
    try:
        p = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=60)
        return [int(x) for x in p.stdout.split() if x.strip().isdigit()]
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return []


def gpu_free_gib():
    try:
        p = subprocess.run(["nvidia-smi", "--query-gpu=memory.free", "--format=csv,noheader,nounits", "-i", "0"],
                           capture_output=True, text=True, timeout=60)
        return int(p.stdout.split()[0]) * MiB / GiB
    except (OSError, ValueError, IndexError):
        return None


def fit_zoo(ctx):
    start = time.monotonic()
    deadline = start + float(os.environ.get("OOMSCOPE_ZOO_DEADLINE", "560"))
    ROWS_END[0] = deadline - float(os.environ.get("OOMSCOPE_ZOO_BALLAST_S", "100"))
    rows = ROWS
    if os.environ.get("OOMSCOPE_ZOO_ROWS"):
        rows = [(m, float(c) if "." in c else int(c)) for m, c in
                (item.split(":") for item in os.environ["OOMSCOPE_ZOO_ROWS"].split(","))]
    free = float(os.environ.get("OOMSCOPE_ZOO_BUDGET_GIB") or (gpu_free_gib() or 0) - 10)
    check(free >= max(c for _, c in rows), f"the GPU has {free + 10:.0f} GiB free: not enough for a card of the rows")
    os.makedirs(os.path.join(ctx.outdir, "fit_zoo"), exist_ok=True)
    budget = Budget(free)
    done, failed, skipped = [], [], []
    lock = threading.Lock()

    def worker(model, card):
        try:
            r = row(ctx, model, card)
            with lock:
                done.append(r)
            print(f"  row {model} at {card} GiB: fit {r['fit'].get('largest_size')} in {r['fit']['seconds']:.0f} s, "
                  f"search {r['search']['truth']} ({r['search']['runs']} runs, {r['search']['seconds']:.0f} s)", flush=True)
        except Exception as e:  # a failing row is a row, not the end of the zoo
            with lock:
                failed.append(f"{model}:{card}: {type(e).__name__}: {e}")
            print(f"  row {model} at {card} GiB FAILED: {e}", flush=True)
        finally:
            budget.give(card)

    # Rows start in ROWS' order, a later one first where an earlier one's card does not fit in
    # what is left. Their runs stop OOMSCOPE_ZOO_BALLAST_S (100) seconds before the deadline (the
    # ballast needs the GPU alone), and none starts within 150 s of that.
    pending, threads = list(rows), []
    while pending:
        with budget.cv:
            startable = next(((m, c) for m, c in pending if c <= budget.left), None)
            if startable is None:
                if time.monotonic() > ROWS_END[0] - 150:
                    break
                budget.cv.wait(5)
                continue
            if time.monotonic() > ROWS_END[0] - 150:
                break
            budget.left -= startable[1]
        pending.remove(startable)
        th = threading.Thread(target=worker, args=startable)
        th.start()
        threads.append(th)
    skipped = [f"{m}:{c}" for m, c in pending]
    for th in threads:
        th.join()
    order = {f"{m}:{c}": i for i, (m, c) in enumerate(rows)}
    done.sort(key=lambda r: order[f"{r['model']}:{r['card_gib']}"])
    ballast(ctx, done, deadline)
    summary = table(done)
    print(summary, flush=True)
    with open(os.path.join(ctx.outdir, "fit_zoo", "table.md"), "w") as f:
        f.write(summary + "\n")
    check(not failed, "; ".join(failed))
    check(done, "no row ran" + (f" (not started before the deadline: {', '.join(skipped)})" if skipped else ""))
    bar = verdict(done)
    check(bar.startswith("the bar holds"), bar)
    return (f"{len(done)} rows ({', '.join(r['model'] for r in done)})" +
            (f"; not started before the deadline: {', '.join(skipped)}" if skipped else "") +
            "; " + bar)


def stats(r):
    """The model's peak against the measured one at the sizes fit did not run (out of sample):
    the mean and the largest relative error."""
    ran = {p["size"] for p in r["points"] if p["where"] == "fitted"}
    # Below the first size the model was fitted to (where fit left leading sizes out, above the
    # line of the rest), another phase sets the peak: not what the model claims.
    kept = min((s["size"] for s in r["fit"].get("sizes") or [] if s.get("measured_bytes") and not s.get("left_out")),
               default=0)
    out = [p for p in r["points"] if p["where"] != "fitted" and p["size"] not in ran and p["size"] >= kept]
    errs = [abs(p["relative"]) for p in out]
    return out, (sum(errs) / len(errs) if errs else None), (max(errs) if errs else None)


def safe_truth(r):
    """The largest size below the smallest that failed, of every size run under the card (the
    search's and --verify's), where that is below the search's truth: near the card PyTorch's
    allocator gives its cache back and cuDNN picks other algorithms, and the edge can be more
    than one size (ResNet-50 with checkpointing under 24 GiB: 624 trains, 625 does not, 664
    does). None where the edge is one size."""
    runs = [(p["size"], p["fits"]) for p in r["search"]["probes"]]
    runs += [(v["size"], v["fits"]) for v in r["fit"].get("verify") or []]
    failed = [n for n, ok in runs if not ok]
    if not failed or min(failed) > r["search"]["truth"]:
        return None
    below = [n for n, ok in runs if ok and n < min(failed)]
    return max(below) if below else None


def verdict(rows):
    """The bar of issue 44, over the rows: mean peak error <= 2 %, max <= 5 %, no predicted size
    that does not fit, the answer within 5 % below the truth, fit in a quarter of the search's
    time, the rehearsal's truth the ballast's."""
    misses = []
    for r in rows:
        name, fit, search = r["model"], r["fit"], r["search"]
        _, mean, worst = stats(r)
        p, truth = fit.get("largest_size"), search["truth"]
        if p is None:
            misses.append(f"{name}: no answer ({'; '.join(fit.get('refused') or [])})")
            continue
        if mean is not None and (mean > 0.02 or worst > 0.05):
            misses.append(f"{name}: peak error mean {mean:.1%} max {worst:.1%}")
        v = {x["size"]: x["fits"] for x in fit.get("verify") or []}
        if not v.get(p) or (p > truth and "cut" not in search):
            misses.append(f"{name}: the predicted {p} does not fit (truth {truth})")
        # An edge of more than one size: the answer is judged against the largest size below
        # its first failure (a search's cut above that does not matter).
        safe = safe_truth(r)
        if "cut" in search and safe is None:  # the truth is only known to be within [lo, hi): said, not judged
            misses.append(f"{name}: the search was cut by the deadline (truth in {search['cut']})")
            continue
        edge = fit.get("verified_largest_size")
        if safe is None and edge is not None and edge != truth:  # --verify walks to the edge with the search's own runs
            misses.append(f"{name}: --verify's edge {edge}, the search's {truth}")
        judged = truth if safe is None else safe
        if p < judged * 0.95:
            misses.append(f"{name}: {p} is {(p - judged) / judged:+.1%} from the truth {judged}")
        if fit["seconds"] > search["seconds"] / 4:
            misses.append(f"{name}: fit {fit['seconds']:.0f} s, the search {search['seconds']:.0f} s")
        if "ballast" in r and r["ballast"]["truth"] != truth:
            misses.append(f"{name}: rehearsed {truth}, beside the ballast {r['ballast']['truth']}")
    return "the bar holds on every row" if not misses else "misses: " + "; ".join(misses)


def table(rows):
    lines = ["| model | card | truth: search (runs) | beside the ballast | `fit` | how | its error | peak error, mean / max "
             "(sizes) | in sample, max | the replay's allocated peak at --verify's sizes, max | predicted size fits | fit | "
             "search | fit / search |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        fit, search = r["fit"], r["search"]
        out, mean, worst = stats(r)
        fitted = [abs(p["relative"]) for p in r["points"] if p["where"] == "fitted"]
        p, truth = fit.get("largest_size"), search["truth"]
        v = {x["size"]: x["fits"] for x in fit.get("verify") or []}
        ballast_truth = r.get("ballast", {}).get("truth")
        known = f"{truth} ({search['runs']})" if "cut" not in search else \
            f"{search['cut'][0]} to {search['cut'][1] - 1}, cut ({search['runs']})"
        judged = truth
        if (safe := safe_truth(r)) is not None:
            known += f"; every size to {safe} trains, {safe + 1} does not"
            judged = safe
        cells = [r["model"], f"{r['card_gib']} GiB", known,
                 str(ballast_truth) if ballast_truth is not None else "not run",
                 str(p) if p is not None else "refused",
                 ("replay" if fit.get("method") == "allocator_replay" else
                  f"peak model ({fit['replay_not_used']})" if fit.get("replay_not_used") else "peak model")
                 + (f", peak model {fit['largest_size_by_peak_model']}"
                    if fit.get("method") == "allocator_replay" and fit.get("largest_size_by_peak_model") is not None else ""),
                 f"{(p - judged) / judged:+.1%}" if p is not None else "—",
                 f"{mean:.2%} / {worst:.2%} ({len(out)})" if mean is not None else "—",
                 f"{max(fitted):.2%}" if fitted else "—",
                 f"{max(replayed):.2%} ({len(replayed)})" if (replayed := [abs(x["replay_relative"]) for x in
                                                                          fit.get("verify") or [] if "replay_relative" in x])
                 else "—",
                 (("yes" if v.get(p) else "NO") + (f" ({p + 1} too)" if v.get(p + 1) else "")) if p is not None else "—",
                 f"{fit['seconds']:.0f} s", f"{search['seconds']:.0f} s", f"{fit['seconds'] / search['seconds']:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def fit_replay(ctx):
    """fit's answer against the edge found by real runs, quickly: per row (OOMSCOPE_REPLAY_ROWS,
    default "gpt2-ckpt:24,bert:24,lstm:24,t5:24,resnet50:24") `oomscope fit --verify` under the
    card, as many at once as the GPU holds. Each row's answer must be never above --verify's
    edge (the largest size that trains by real runs, as the search finds it) and within 5 %
    below, whether the replay gave it (PyTorch's traces aligned and its allocated peaks given
    back) or the peak model did (the table says which, and why not the replay: a convolutional
    network's cuDNN workspaces change with the batch, so its runs do not align). Writes
    fit_zoo/replay-ROW.json and fit_zoo/replay.md."""
    rows = [(m, float(c) if "." in c else int(c)) for m, c in
            (item.split(":") for item in os.environ.get("OOMSCOPE_REPLAY_ROWS",
                                                        "gpt2-ckpt:24,bert:24,lstm:24,t5:24,resnet50:24").split(","))]
    ROWS_END[0] = time.monotonic() + float(os.environ.get("OOMSCOPE_ZOO_DEADLINE", "500"))
    out = os.path.join(ctx.outdir, "fit_zoo")
    os.makedirs(out, exist_ok=True)
    budget = Budget(float(os.environ.get("OOMSCOPE_ZOO_BUDGET_GIB") or (gpu_free_gib() or 0) - 10))
    results, lock = {}, threading.Lock()

    def worker(model, card):
        try:
            r = row_fit(ctx, ctx.dir(os.path.join("fit_zoo", f"replay-{model}-{card}")), model, card)
        except Exception as e:  # a failing row is a row
            r = {"error": f"{type(e).__name__}: {e}"}
        finally:
            budget.give(card)
        with lock:
            results[(model, card)] = r
        with open(os.path.join(out, f"replay-{model}-{card}.json"), "w") as f:
            json.dump(r, f, indent=1)

    threads = []
    for model, card in rows:
        with budget.cv:
            while budget.left < card:
                budget.cv.wait(5)
            budget.left -= card
        th = threading.Thread(target=worker, args=(model, card))
        th.start()
        threads.append(th)
    for th in threads:
        th.join()
    lines = ["| model | card | `fit` | peak model | edge by real runs (--verify) | error | replay | "
             "replay's peak error at --verify's sizes, max | fit | verify |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    misses = []
    for model, card in rows:
        r = results.get((model, card), {"error": "not run"})
        p, edge = r.get("largest_size"), r.get("verified_largest_size")
        rp = r.get("replay") or {}
        lines.append(f"| {model} | {card} GiB | {p} | {r.get('largest_size_by_peak_model')} | {edge} | "
                     + (f"{(p - edge) / edge:+.1%}" if p and edge else "—") + " | "
                     + (f"{rp.get('runs')} runs, {rp.get('actions')} actions, {rp.get('off_line')} off a line" if rp
                        else f"not used: {r.get('replay_not_used') or r.get('error') or r.get('refused')}")
                     + " | " + (f"{max(errs):.2%} ({len(errs)})" if (errs := [abs(v["replay_relative"]) for v in
                                                                           r.get("verify") or [] if "replay_relative" in v])
                                 else "—")
                     + f" | {r.get('seconds', 0):.0f} s | {r.get('verify_seconds', 0):.0f} s |")
        if p is None:
            misses.append(f"{model}: no answer ({r.get('error') or r.get('refused')})")
        elif r.get("method") != "allocator_replay" and not r.get("replay_not_used"):
            misses.append(f"{model}: the peak model answered and fit did not say why the replay did not")
        elif edge is None:
            misses.append(f"{model}: --verify found no edge")
        elif p > edge or p < 0.95 * edge:
            misses.append(f"{model}: {p} against the edge {edge}")
    table_md = "\n".join(lines)
    print(table_md, flush=True)
    with open(os.path.join(out, "replay.md"), "w") as f:
        f.write(table_md + "\n")
    check(not misses, "; ".join(misses))
    replayed = sum(results.get(row, {}).get("method") == "allocator_replay" for row in rows)
    return f"{len(rows)} rows, {replayed} answered by the replay: within 5 % below the edge on every one"


def fit_edge(ctx):
    """The smallest card each size trains on (OOMSCOPE_EDGE="bert:8,16 gpt2:8"): a roomy run
    (60 GiB) for PyTorch's allocated and reserved peaks A and R, then a round of runs under
    A + 0.8 GiB + f·A for f in OOMSCOPE_EDGE_FRACS (default 0.02 0.05 0.08 0.11 0.14 0.18), as
    many at once as the GPU holds. Writes fit_zoo/edge.json; what it leaves beyond A is the
    memory PyTorch's allocator strands at the edge (docs/GPU-RESULTS.md)."""
    plan = [(m, int(n)) for item in os.environ.get("OOMSCOPE_EDGE", "bert:8,16").split()
            for m, ns in [item.split(":")] for n in ns.split(",")]
    fracs = [float(x) for x in os.environ.get("OOMSCOPE_EDGE_FRACS", "0.02 0.05 0.08 0.11 0.14 0.18").split()]
    ROWS_END[0] = time.monotonic() + float(os.environ.get("OOMSCOPE_ZOO_DEADLINE", "400"))
    out = os.path.join(ctx.outdir, "fit_zoo")
    os.makedirs(out, exist_ok=True)
    budget = Budget(float(os.environ.get("OOMSCOPE_ZOO_BUDGET_GIB") or (gpu_free_gib() or 0) - 10))
    results, lock = [], threading.Lock()

    def one(model, n, cap):
        folder = os.path.join(out, f"edge-{model}-{n}-{cap:.3f}")
        try:
            ok, seconds = run_trial([ctx.oomscope, "run", "-o", folder, "--device-limit", f"{cap:.3f}GiB", "--"] +
                                    trial_cmd(model, n), folder + ".log")
            with open(folder + ".log") as f:
                fits = [line.split() for line in f if line.startswith("fits ")]
            rec = {"model": model, "size": n, "card_gib": cap, "fits": ok, "seconds": seconds,
                   "allocated": int(fits[0][3]) if fits else None, "reserved": int(fits[0][5]) if fits else None}
        except (AssertionError, TimeoutError) as e:
            rec = {"model": model, "size": n, "card_gib": cap, "error": str(e)}
        with lock:
            results.append(rec)
            with open(os.path.join(out, "edge.json"), "w") as f:
                json.dump(results, f, indent=1)
        print(f"  {model} {n} on {cap:.2f} GiB: {'fits' if rec.get('fits') else 'no'}", flush=True)

    def wave(jobs):
        threads = []
        for model, n, cap in jobs:
            with budget.cv:
                while budget.left < cap + 1:
                    budget.cv.wait(2)
                budget.left -= cap + 1

            def run(model=model, n=n, cap=cap):
                try:
                    one(model, n, cap)
                finally:
                    budget.give(cap + 1)
            threads.append(threading.Thread(target=run))
            threads[-1].start()
        for th in threads:
            th.join()

    wave([(m, n, 60.0) for m, n in plan])
    jobs = []
    for m, n in plan:
        roomy = next((r for r in results if r["model"] == m and r["size"] == n and r.get("allocated")), None)
        if roomy:
            a = roomy["allocated"] / GiB
            jobs += [(m, n, a + 0.8 + f * a) for f in fracs]
    wave(sorted(jobs, key=lambda j: -j[2]))
    lines = []
    for m, n in plan:
        rs = [r for r in results if r["model"] == m and r["size"] == n and "error" not in r]
        fit_caps = [r["card_gib"] for r in rs if r["fits"] and r["card_gib"] < 60]
        no = [r["card_gib"] for r in rs if not r["fits"]]
        lines.append(f"{m} {n}: smallest card in ({max(no, default=0):.2f}, {min(fit_caps, default=60):.2f}] GiB")
    return "; ".join(lines)


def replay(rows):
    """fit's choice of sizes and its peak model (report/analysis/fit.cpp and tools/oomscope/commands/
    fit.cpp, transcribed: change them together; not the allocator's replay, which needs the
    runs' traces: `fit_then` is fit's peak-model answer) replayed on the peaks a zoo row measured (fit's
    runs and the search's, a size not run interpolated between its neighbours), with the
    largest segment per item read from the row's headroom. For a change of the model to be seen
    on a zoo's data before a device call; not a measurement."""
    def line(x, y, degree=1):
        n = degree + 1
        m = [[sum(v ** (i + j) for v in x) for j in range(n)] + [sum(w * v ** i for v, w in zip(x, y))] for i in range(n)]
        for c in range(n):
            p = max(range(c, n), key=lambda r: abs(m[r][c]))
            m[c], m[p] = m[p], m[c]
            for r in range(n):
                if r != c:
                    f = m[r][c] / m[c][c]
                    m[r] = [a - f * b for a, b in zip(m[r], m[c])]
        return [m[i][n] / m[i][i] for i in range(n)] + [0] * (2 - degree)

    def left_out(x, y):
        for k in range(1, len(x) - 2):
            a, b, _ = line(x[k:], y[k:])
            if all(abs(a + b * u - v) <= max(0.02 * v, 4 * MiB) for u, v in zip(x[k:], y[k:])) and \
                    all(y[i] - (a + b * x[i]) > max(0.02 * y[i], 4 * MiB) for i in range(k)):
                return k
        return 0

    def model(x, y):
        k = left_out(x, y)
        a, b, c = line(x[k:], y[k:])
        if len(x) - k >= 4 and max(abs(a + b * u - v) for u, v in zip(x[k:], y[k:])) > 0.02 * max(y[k:]):
            q = line(x[k:], y[k:], 2)
            if q[2] > 0:
                a, b, c = q
        return (a, b, c), k

    out = []
    for r in rows:
        fit = r["fit"]
        measured = {s["size"]: s["measured_bytes"] for s in fit["sizes"] if s.get("measured_bytes")}
        measured.update({p["size"]: p["measured_bytes"] for p in r["search"]["probes"] if p.get("measured_bytes")})
        xs = sorted(measured)

        def at(n):
            if n in measured:
                return measured[n]
            lo = max([x for x in xs if x < n], default=xs[0])
            hi = min([x for x in xs if x > n], default=xs[-1])
            if lo == hi:
                lo, hi = (xs[-2], xs[-1]) if hi == xs[-1] else (xs[0], xs[1])
            return measured[lo] + (measured[hi] - measured[lo]) * (n - lo) / (hi - lo)
        cap, context = r["card_gib"] * GiB, fit.get("context_bytes") or 0
        segment = 2 * fit["headroom_bytes"] / fit["largest_size"] if fit.get("headroom_bytes") else r.get("segment_per_item", 0)

        def answer(m):
            n = 0
            while n < 1 << 16:
                peak = m[0] + m[1] * (n + 1) + m[2] * (n + 1) ** 2
                seg = segment * (n + 1)
                if peak + context + (seg if seg >= 0.1 * peak else 0.5 * seg) > cap:
                    break
                n += 1
            return n
        sizes = [1, 2, 4]
        rounds = [list(sizes)]
        if at(4) <= at(1) + max(MiB, at(1) / 200):
            sizes += [16, 32, 64]
            rounds.append([16, 32, 64])
        m, k = model(sizes, [at(n) for n in sizes])
        first = answer(m)
        straight = all(abs(m[0] + m[1] * n + m[2] * n * n - at(n)) <= 0.02 * at(n) for n in sizes[k:])
        nxt = [first // 8, first // 4] if first // 4 >= 2 * sizes[-1] else [] if straight else [2 * sizes[-1], 4 * sizes[-1]]
        nxt = [n for n in nxt if sizes[-1] < n < first]
        if nxt:
            sizes += nxt
            rounds.append(nxt)
            m, k = model(sizes, [at(n) for n in sizes])
        errors = [abs(m[0] + m[1] * n + m[2] * n * n - measured[n]) / measured[n] for n in xs
                  if n not in sizes and n >= sizes[k]]
        out.append({"model": r["model"], "card_gib": r["card_gib"], "truth": r["search"]["truth"],
                    "fit_then": fit.get("largest_size_by_peak_model", fit.get("largest_size")), "replayed": answer(m),
                    "rounds": rounds,
                    "left_out": sizes[:k], "peak_error_mean": sum(errors) / len(errors) if errors else None,
                    "peak_error_max": max(errors) if errors else None, "sizes_out_of_sample": len(errors)})
    return out


SCENARIOS = [("fit_zoo", fit_zoo), ("fit_edge", fit_edge), ("fit_replay", fit_replay)]


if __name__ == "__main__":
    # python3 -m suite.zoo table OUT... : the table from the rows' JSON files of earlier runs;
    # python3 -m suite.zoo replay OUT... : today's model replayed on them (replay()).
    if len(sys.argv) < 3 or sys.argv[1] not in ("table", "replay"):
        print(__doc__)
        sys.exit(2)
    found = []
    for d in sys.argv[2:]:
        for path in sorted(glob.glob(os.path.join(d, "**", "*.json"), recursive=True)):
            with open(path) as f:
                r = json.load(f)
            if isinstance(r, dict) and "search" in r and "fit" in r:
                found.append(r)
    order = {m: i for i, (m, _) in enumerate(ROWS)}
    found.sort(key=lambda r: order.get(r["model"], 99))
    if sys.argv[1] == "replay":
        print("| model | card | truth | `fit` then | replayed | its error | rounds | left out | peak error out of sample, mean / max (sizes) |")
        print("|---|---|---|---|---|---|---|---|---|")
        for x in replay(found):
            print(f"| {x['model']} | {x['card_gib']} GiB | {x['truth']} | {x['fit_then']} | {x['replayed']} | "
                  f"{(x['replayed'] - x['truth']) / x['truth']:+.1%} | {' then '.join('+'.join(map(str, r)) for r in x['rounds'])} | "
                  f"{', '.join(map(str, x['left_out'])) or '—'} | "
                  + (f"{x['peak_error_mean']:.2%} / {x['peak_error_max']:.2%} ({x['sizes_out_of_sample']})"
                     if x["peak_error_mean"] is not None else "—") + " |")
        sys.exit(0)
    print(table(found))
    print(verdict(found))
