"""When things go wrong around the program: SIGKILL mid-training (the flight file recovered, with
and without CUDA VMM), and torchrun ranks where one runs out of memory."""

import glob
import os
import signal
import subprocess
import sys
import time

from .common import check, compact, GiB, HERE, MiB, program_line, t


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
    ("torch_killed", scenario_torch_killed),
    ("torch_killed_expandable", lambda ctx: scenario_torch_killed(ctx, expandable=True)),
    ("torch_ranks", scenario_torch_ranks),
]
