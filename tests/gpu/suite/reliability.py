"""When things go wrong around the program: SIGKILL mid-training (the flight file recovered, with
and without CUDA VMM), and torchrun ranks where one runs out of memory."""

import glob
import os
import re
import shutil
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
    st = os.stat(flights[0])
    size, reserved = st.st_size, st.st_blocks * 512  # sparse: its length, and the disk it holds
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
    # Flight format 4 (issue 18): the steps and the peak survive the kill too.
    steps = [s["index"] for s in rep["steps"]]
    check(steps and steps[-1] >= facts["step"] - 1, f"recovered steps {steps[:3]}..{steps[-3:]}, the run's last {facts['step']}")
    check(row.get("peak") and row["peak"]["bytes"] >= row["tracked_bytes"] - 64 * MiB,
          f"recovered peak {row.get('peak', {}) and row['peak']['bytes']} below the live {row['tracked_bytes']}")
    top, _ = program_line(rep, rep["sites"][0]["stack"])
    cap = rep["capture"]
    missing = [n for n in cap["notes"] if "missing" in n]
    check(not missing, f"the recovered report says memory is missing: {missing}")
    rendered = subprocess.run([ctx.oomscope, "report", rec.stdout.strip()], capture_output=True, text=True)
    check(rendered.returncode == 0, f"oomscope report on it: {rendered.stderr}")
    return (f"killed at step {facts['step']}; flight file {reserved / MiB:.1f} MiB on disk ({size / MiB:.1f} MiB long, sparse); recovered in {took:.2f} s: live "
            f"{row['tracked_bytes'] / MiB:.1f} MiB in {cap['live_allocations']} allocations: torch "
            f"{row['by_source'].get('torch', 0) / MiB:.1f} MiB == memory_reserved() {facts['reserved'] / MiB:.1f} MiB, "
            f"others {others / MiB:.1f} MiB; {len(steps)} steps (last {steps[-1]}), peak {row['peak']['bytes'] / MiB:.1f} MiB; "
            f"{cap['events_recorded']} events, {cap['events_dropped']} dropped; "
            f"top site {os.path.basename(top['file']) + ':' + str(top['line']) if top else '?'}; by_source "
            f"{compact(row['by_source'])}")


def ranks_table(text):
    """The job view's Ranks table: {rank: {column: cell}}."""
    lines = text.splitlines()
    at = lines.index("Ranks") + 1
    header = re.split(r"\s{2,}", lines[at].strip())
    rows = {}
    for line in lines[at + 1:]:
        if not line.strip():
            break
        cells = re.split(r"\s{2,}", line.strip())
        rows[int(cells[0])] = dict(zip(header, cells))
    return rows


def run_watching_rank0(cmd, out):
    """Runs cmd (the job), and from rank 1's OOM report on, where rank 0's threads wait
    every 0.2 s until it is gone (with gdb's backtraces once, where gdb is installed), into
    out/rank0-threads.txt: the evidence when rank 0 leaves no report."""
    os.makedirs(out, exist_ok=True)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    pid0 = None
    start = time.monotonic()
    oom_at = None
    gdb = shutil.which("gdb")
    while proc.poll() is None and time.monotonic() - start < 150:
        if pid0 is None and os.path.exists(os.path.join(out, "rank-0.json")):
            try:
                pid0 = t.load(os.path.join(out, "rank-0.json"))["pid"]
            except ValueError:
                pass
        if oom_at is None and glob.glob(os.path.join(out, "oomscope-*-r1-*-oom.json")):
            oom_at = time.monotonic()
            lines.append(f"{oom_at - start:.2f}s rank 1's OOM report is there")
        if pid0 is not None and oom_at is not None and os.path.exists(f"/proc/{pid0}"):
            lines.append(f"{time.monotonic() - start:.2f}s " + threads_of(pid0))
            if gdb:
                gdb = None
                bt = subprocess.run([shutil.which("gdb"), "-p", str(pid0), "-batch", "-ex", "thread apply all bt 12"],
                                    capture_output=True, text=True, timeout=60)
                lines.append(bt.stdout[-20000:])
        time.sleep(0.2)
    try:
        stdout, stderr = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
    lines.append(f"{time.monotonic() - start:.2f}s the job ended: {proc.returncode}")
    for _ in range(50):  # rank 0's last moments, if it outlived the launcher
        if pid0 is None or not os.path.exists(f"/proc/{pid0}"):
            break
        lines.append(f"{time.monotonic() - start:.2f}s after the launcher: " + threads_of(pid0))
        time.sleep(0.2)
    with open(os.path.join(out, "rank0-threads.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return t.Run(subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr), out, t.reports_in(out))


def one_ranks_run(ctx, out, via_torchrun):
    """One torchrun job of two ranks on the one GPU: rank 1 runs out of memory, torchrun ends
    rank 0. `via_torchrun`: `torchrun --no-python oomscope run -- python script` (oomscope in
    each rank) instead of `oomscope run -- torchrun …`. What each rank left, the job view, and
    where the exception and torchrun's summary say the report is."""
    script = os.path.join(HERE, "scenarios", "torch_ranks.py")
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    if via_torchrun:
        cmd = launcher + ["--no-python", ctx.oomscope, "run", "-o", out, "--", sys.executable, script, out]
    else:
        cmd = [ctx.oomscope, "run", "-o", out, "--"] + launcher + [script, out]
    run = run_watching_rank0(cmd, out)
    with open(os.path.join(out, "torchrun-output.txt"), "w") as f:
        f.write(run.stdout + run.stderr)
    check(run.returncode != 0, "torchrun succeeded although rank 1 ran out of memory")
    ranks = {r: t.load(os.path.join(out, f"rank-{r}.json")) for r in (0, 1)}
    by_pid = {}
    for kind, paths in run.reports.items():
        for path in paths:
            by_pid.setdefault(t.load(path)["process"]["pid"], []).append((path, t.load(path)))
    pids = {f["pid"] for f in ranks.values()}
    check(set(by_pid) <= pids, f"reports from processes that are not ranks: {set(by_pid) - pids}")
    kinds = {}
    for r, f in ranks.items():
        reps = by_pid.get(f["pid"], [])
        check(reps, f"rank {r} (pid {f['pid']}) left no report; stderr: {run.stderr[-1500:]}")
        for path, rep in reps:
            check(rep["process"].get("rank") == r, f"rank {r}'s report says rank {rep['process'].get('rank')}")
            check(f"-r{r}-" in os.path.basename(path), f"rank {r}'s report is named {path}")
            check(rep["process"].get("local_world_size") == 2 and rep["process"].get("run_id"), "job identity")
        kinds[r] = sorted(rep["trigger"]["kind"] for _, rep in reps)
    check("signal" in kinds[0], f"rank 0 left {kinds[0]}: no signal report")
    check("oom" in kinds[1], f"rank 1 left {kinds[1]}: no oom report")
    oom_path, oom = next((p, rep) for p, rep in by_pid[ranks[1]["pid"]] if rep["trigger"]["kind"] == "oom")
    tracked1 = t.memory_row(oom, 0)["tracked_bytes"]
    check(tracked1 == ranks[1]["reserved"], f"rank 1 tracked {tracked1} != memory_reserved() {ranks[1]['reserved']}")
    # The exception names the report, and torchrun's failure summary (from the error file
    # @record writes) shows it.
    note = f"oomscope report: {oom_path}"
    check(note in run.stderr, f"no '{note}' in the output: {run.stderr[-2000:]}")
    summary = run.stderr[run.stderr.rfind("Root Cause"):] if "Root Cause" in run.stderr else ""
    check(note in summary, f"torchrun's summary does not name the report: {summary[-1500:]}")
    # The job view: rank 1 first, rank 0's memory at that moment = its memory_reserved().
    view = subprocess.run([ctx.oomscope, "report", out, "--color", "never"], capture_output=True, text=True, timeout=60)
    check(view.returncode == 0, f"job view: {view.stderr}")
    first = view.stdout[view.stdout.index("First failure"):view.stdout.index("Ranks")]
    check(re.search(r"rank 1 \(", first), f"first failure: {first}")
    rows = ranks_table(view.stdout)
    held0 = rows[0]["at first failure"]
    check(held0 == t.format_bytes(ranks[0]["reserved"]),
          f"rank 0 at rank 1's failure: {held0}, memory_reserved() {ranks[0]['reserved']}")
    left = glob.glob(os.path.join(out, "*.flight"))
    check(not left, f"flight files left: {left}")
    return (kinds, held0, first.splitlines()[1].strip(), view.stdout)


def scenario_torch_ranks(ctx, runs=5):
    """torchrun, two processes on the one GPU (gloo): rank 1 runs out of memory and dies of it,
    torchrun ends rank 0. Five runs in a row under `oomscope run -- torchrun`, one as
    `torchrun --no-python oomscope run -- python`: each rank leaves its report (rank 0 a
    signal report), the launcher none; the job view names rank 1 first with rank 0's memory at
    that moment; the exception and torchrun's summary name rank 1's report."""
    results = []
    for i in range(runs):
        results.append(one_ranks_run(ctx, ctx.dir(f"torch_ranks/run{i}"), via_torchrun=False))
    inside = one_ranks_run(ctx, ctx.dir("torch_ranks/via_torchrun"), via_torchrun=True)
    with open(os.path.join(ctx.outdir, "torch_ranks", "job-view.txt"), "w") as f:
        f.write(results[-1][3])
    kinds = "; ".join(f"run {i}: rank 0 {'+'.join(k[0])}, rank 1 {'+'.join(k[1])}" for i, (k, _, _, _) in enumerate(results))
    return (f"{runs} runs: {kinds}; rank 0 held {results[-1][1]} at the first failure (= memory_reserved()); "
            f"{results[-1][2]}; via torchrun --no-python: rank 0 {'+'.join(inside[0][0])}; "
            f"exception note and torchrun summary name the report")


SCENARIOS = [
    ("torch_killed", scenario_torch_killed),
    ("torch_killed_expandable", lambda ctx: scenario_torch_killed(ctx, expandable=True)),
    ("torch_ranks", scenario_torch_ranks),
]
