"""Looking into a running PyTorch job (issue 18): `oomscope snapshot` of the job equals a
`request` report (SIGUSR2) taken at the same step; `oomscope top`, in a real terminal (a
pseudo-terminal), shows the growth per step and names the leaking line while the job runs;
`oomscope recover` after SIGKILL has the peak and the steps."""

import glob
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time

from .common import check, HERE, MiB, program_line, t

SCRIPT = os.path.join(HERE, "scenarios", "torch_live.py")
ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def wait_for(predicate, seconds, what):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {seconds} s")


def sites_of(rep):
    """The live sites as a user compares them: the whole stack's frame names, kind, count, bytes."""
    return sorted((tuple(t.frame_names(rep, s["stack"])), s["device"], s["kind"], s["count"], s["bytes"])
                  for s in rep["sites"])


def line_of(rep, stack_id):
    frame, _ = program_line(rep, stack_id)
    return f"{os.path.basename(frame['file'])}:{frame['line']}" if frame else "?"


def leak_row(frame):
    return next((l.strip() for l in frame.splitlines() if l.strip().startswith("LEAK ")), "")


def watch_in_a_terminal(ctx, pid, out, until, seconds=90):
    """oomscope top in a pseudo-terminal (what ssh gives it) until until(frame) holds for the
    last whole frame; then q. Returns that frame as plain text and the seconds it took."""
    master, slave = pty.openpty()
    started = time.monotonic()
    top = subprocess.Popen([ctx.oomscope, "top", "--interval", "0.5", str(pid)], stdin=slave, stdout=slave,
                           stderr=slave, close_fds=True)
    os.close(slave)
    raw = b""
    frame = ""
    try:
        deadline = started + seconds
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if ready:
                try:
                    raw += os.read(master, 65536)
                except OSError:
                    break
            # Frames begin with the cursor's move home; the last whole one is before the last.
            frames = raw.decode(errors="replace").split("\x1b[H")
            if len(frames) >= 3:
                frame = ESCAPE.sub("", frames[-2]).replace("\r", "")
                if until(frame):
                    break
        took = time.monotonic() - started
        os.write(master, b"q")
        code = top.wait(timeout=30)
    finally:
        if top.poll() is None:
            top.kill()
        try:
            while select.select([master], [], [], 0.2)[0]:
                raw += os.read(master, 65536)
        except OSError:
            pass
        os.close(master)
        with open(os.path.join(out, "top.raw"), "wb") as f:
            f.write(raw)
        with open(os.path.join(out, "top.txt"), "w") as f:
            f.write(frame)
    check(code == 0, f"top ended with {code} after q")
    check(b"\x1b[?1049l" in raw, "top did not give the terminal its screen back")
    return frame, took


def scenario_torch_live(ctx):
    out = ctx.dir("torch_live")
    facts_path = os.path.join(out, "facts.json")
    with open(SCRIPT) as f:
        leak_line = next(i for i, text in enumerate(f, 1) if text.rstrip().endswith("# the leak"))
    log = open(os.path.join(out, "run.log"), "w")
    proc = subprocess.Popen([ctx.oomscope, "run", "-o", out, "--", sys.executable, SCRIPT, facts_path, "30", "3000"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True)
    rows = []
    try:
        line = proc.stdout.readline()
        check(line.startswith("paused"), f"the job did not reach its pause: {line!r} (exit {proc.poll()})")
        paused = t.load(facts_path)
        pid = paused["pid"]

        # 1. A quiet moment: a snapshot, then a request report, of the same step.
        snap_dir = os.path.join(out, "snapshot")
        os.makedirs(snap_dir)
        started = time.monotonic()
        s = subprocess.run([ctx.oomscope, "snapshot", str(pid), "-o", snap_dir], capture_output=True, text=True,
                           timeout=120)
        snap_seconds = time.monotonic() - started
        check(s.returncode == 0, f"snapshot: {s.stderr}")
        snap = t.load(s.stdout.strip())
        view = subprocess.run([ctx.oomscope, "report", s.stdout.strip(), "--color", "never"], capture_output=True,
                              text=True, timeout=120)
        with open(os.path.join(out, "snapshot.txt"), "w") as f:
            f.write(view.stdout + view.stderr)
        os.kill(pid, signal.SIGUSR2)
        request_path = wait_for(lambda: glob.glob(os.path.join(out, "oomscope-*-request.json")), 60,
                                "the request report after SIGUSR2")[0]
        request = t.load(request_path)
        check(snap["trigger"]["kind"] == "snapshot" and snap["process"]["pid"] == pid, "not the job's snapshot")
        a, b = sites_of(snap), sites_of(request)
        first_diff = next(((x, y) for x, y in zip(a, b) if x != y), None)
        check(a == b, f"snapshot sites ({len(a)}) != request sites ({len(b)}); first difference {first_diff}")
        ts, tr = t.memory_row(snap, 0)["tracked_bytes"], t.memory_row(request, 0)["tracked_bytes"]
        check(ts == tr, f"live bytes: snapshot {ts}, request {tr}")
        step_snap = snap["steps"][-1]["index"] if snap["steps"] else None
        step_req = request["steps"][-1]["index"] if request["steps"] else None
        check(step_snap == step_req, f"last step: snapshot {step_snap}, request {step_req}")
        rows.append(f"at step {step_snap}: snapshot == request: {len(a)} sites, {ts / MiB:.1f} MiB live "
                    f"(snapshot in {snap_seconds:.2f} s)")

        # 2. The job goes on; top watches it in a terminal until it names the leak.
        proc.stdin.write("go\n")
        proc.stdin.flush()
        # The leak verdict names the leaking line itself (not only a top site at that line).
        named = lambda frame: "growth +" in frame and f"torch_live.py:{leak_line} " in leak_row(frame)
        frame, took = watch_in_a_terminal(ctx, pid, out, named)
        check(named(frame), f"top never named torch_live.py:{leak_line} in its LEAK row; last frame:\n{frame}")
        facts = t.load(facts_path)
        check(proc.poll() is None, "the job ended before top named its leak")
        growth = re.search(r"growth \+([0-9.]+) (KiB|MiB|GiB)/step \((allocated|tracked)", frame)
        check(growth, f"no growth figure in:\n{frame}")
        per_step = float(growth.group(1)) * {"KiB": 1 << 10, "MiB": MiB, "GiB": 1 << 30}[growth.group(2)]
        # The truth: what memory_allocated() grew by per step since the pause.
        truth_per_step = (facts["allocated"] - paused["allocated"]) / max(1, facts["step"] - paused["step"])
        check(abs(per_step - truth_per_step) <= 0.05 * truth_per_step,
              f"top's growth {per_step / MiB:.2f} MiB/step, memory_allocated() grew {truth_per_step / MiB:.2f} MiB/step")
        rows.append(f"top ({took:.1f} s after the pause, job at step {facts['step']}): "
                    f"'{growth.group(0)}' vs memory_allocated() {truth_per_step / MiB:+.2f} MiB/step; '{leak_row(frame)}'")

        # 3. SIGKILL mid-run; recover gives the peak and the steps.
        os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=120)
        facts = t.load(facts_path)
        flights = glob.glob(os.path.join(out, "*.flight"))
        check(len(flights) == 1, f"flight files {flights}")
        rec = subprocess.run([ctx.oomscope, "recover", flights[0]], capture_output=True, text=True, timeout=300)
        check(rec.returncode == 0, f"recover: {rec.stderr}")
        rep = t.load(rec.stdout.strip())
        row = t.memory_row(rep, 0)
        check(rep["steps"] and rep["steps"][-1]["index"] >= facts["step"] - 1,
              f"recovered steps end at {rep['steps'][-1]['index'] if rep['steps'] else None}, the job's last step "
              f"{facts['step']}")
        check(row.get("peak") and row["peak"]["bytes"] >= row["tracked_bytes"] - 64 * MiB,
              f"recovered peak {row.get('peak')} vs tracked {row['tracked_bytes']}")
        check(rep["devices"][0].get("name"), "no device name in the recovered report")
        leaks = subprocess.run([ctx.oomscope, "report", rec.stdout.strip(), "--format", "json"], capture_output=True,
                               text=True, timeout=120)
        analyzed = json.loads(leaks.stdout) if leaks.returncode == 0 else {}
        check(analyzed.get("leaks") and line_of(analyzed, analyzed["leaks"][0]["stack"]) == f"torch_live.py:{leak_line}",
              f"the recovered report's leak is not at torch_live.py:{leak_line}: {analyzed.get('leaks')} {leaks.stderr}")
        notes = [n for n in rep["capture"]["notes"] if "no peak" in n or "no steps" in n]
        check(not notes, f"the recovered report still says {notes}")
        rendered = subprocess.run([ctx.oomscope, "report", rec.stdout.strip(), "--color", "never"],
                                  capture_output=True, text=True, timeout=120)
        with open(os.path.join(out, "recovered.txt"), "w") as f:
            f.write(rendered.stdout + rendered.stderr)
        rows.append(f"recovered after SIGKILL at step {facts['step']}: {len(rep['steps'])} steps "
                    f"({rep['steps'][0]['index']}..{rep['steps'][-1]['index']}), peak {row['peak']['bytes'] / MiB:.0f} MiB, "
                    f"tracked {row['tracked_bytes'] / MiB:.0f} MiB, top site {line_of(rep, rep['sites'][0]['stack'])}, "
                    f"leak at {line_of(analyzed, analyzed['leaks'][0]['stack'])}, "
                    f"device {rep['devices'][0]['name']}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)
        log.close()
    return "; ".join(rows)


def metric_samples(text):
    """{(name, frozenset(labels)): value} of a Prometheus text exposition."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, value = line.rsplit(" ", 1)
        name, _, labels = head.partition("{")
        pairs = re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', labels)
        out[(name, frozenset(pairs))] = float(value)
    return out


def metric(samples, name, **labels):
    found = [v for (n, ls), v in samples.items() if n == name and all((k, str(v)) in ls for k, v in labels.items())]
    return found


def scenario_torch_metrics(ctx):
    """`oomscope metrics --listen` beside a real training job: at a quiet step, its /metrics equals
    what `oomscope snapshot` reads (memory by source, PyTorch's allocated and reserved, the step);
    after more steps, the leak's growth per step names the leaking line."""
    import urllib.request
    out = ctx.dir("torch_metrics")
    facts_path = os.path.join(out, "facts.json")
    with open(SCRIPT) as f:
        leak_line = next(i for i, text in enumerate(f, 1) if text.rstrip().endswith("# the leak"))
    log = open(os.path.join(out, "run.log"), "w")
    env = dict(os.environ, RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", TORCHELASTIC_RUN_ID="gpu-metrics")
    proc = subprocess.Popen([ctx.oomscope, "run", "-o", out, "--", sys.executable, SCRIPT, facts_path, "30", "3000"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
    server = subprocess.Popen([ctx.oomscope, "metrics", "--listen", "127.0.0.1:0", out], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    rows = []
    try:
        said = server.stderr.readline()
        check("metrics on http://" in said, f"metrics --listen said {said!r}")
        url = said.split("metrics on ", 1)[1].strip()
        scrape = lambda: urllib.request.urlopen(url, timeout=30).read().decode()
        line = proc.stdout.readline()
        check(line.startswith("paused"), f"the job did not reach its pause: {line!r} (exit {proc.poll()})")
        paused = t.load(facts_path)
        started = time.monotonic()
        text = scrape()
        scrape_seconds = time.monotonic() - started
        with open(os.path.join(out, "metrics.txt"), "w") as f:
            f.write(text)
        samples = metric_samples(text)
        snap_dir = os.path.join(out, "snapshot")
        os.makedirs(snap_dir)
        s = subprocess.run([ctx.oomscope, "snapshot", str(paused["pid"]), "--events", "0", "-o", snap_dir],
                           capture_output=True, text=True, timeout=120)
        check(s.returncode == 0, f"snapshot: {s.stderr}")
        snap = t.load(s.stdout.strip())
        row = t.memory_row(snap, 0)
        for source, b in row["by_source"].items():
            if source == "untracked":
                continue
            got = metric(samples, "oomscope_device_memory_bytes", rank=0, device=0, source=source)
            check(got == [b], f"source {source}: /metrics {got}, snapshot {b}")
        last = snap["steps"][-1]["devices"][0]
        # The step sample is PyTorch's own memory_allocated()/memory_reserved() at the optimizer step.
        check(metric(samples, "oomscope_torch_allocated_bytes", rank=0) == [last["allocated_bytes"]],
              f"allocated: /metrics {metric(samples, 'oomscope_torch_allocated_bytes')}, snapshot {last['allocated_bytes']}")
        check(metric(samples, "oomscope_torch_reserved_bytes", rank=0) == [last["reserved_bytes"]],
              f"reserved: /metrics {metric(samples, 'oomscope_torch_reserved_bytes')}, snapshot {last['reserved_bytes']}")
        check(metric(samples, "oomscope_steps_total", rank=0) == [30], f"steps {metric(samples, 'oomscope_steps_total')}")
        uuid = snap["devices"][0]["uuid"]
        check(metric(samples, "oomscope_device_memory_peak_bytes", device_uuid=uuid), f"no series of device {uuid}")
        rows.append(f"at step 30: /metrics == snapshot: {len(row['by_source']) - 1} sources, torch "
                    f"{row['by_source'].get('torch', 0) / MiB:.1f} MiB, allocated {last['allocated_bytes'] / MiB:.1f} MiB, "
                    f"reserved {last['reserved_bytes'] / MiB:.1f} MiB (the step sample's), device {uuid}; scrape "
                    f"{scrape_seconds * 1000:.0f} ms")
        proc.stdin.write("go\n")
        proc.stdin.flush()

        def leak():
            keyed = [(ls, v) for (n, ls), v in metric_samples(scrape()).items()
                     if n == "oomscope_leak_growth_bytes_per_step"]
            return keyed or None

        keyed = wait_for(leak, 120, "the leak in /metrics")
        site = dict(keyed[0][0]).get("site", "")
        facts = t.load(facts_path)
        truth = (facts["allocated"] - paused["allocated"]) / max(1, facts["step"] - paused["step"])
        check(f"torch_live.py:{leak_line}" in site, f"the leak's site is {site!r}")
        check(abs(keyed[0][1] - truth) <= 0.25 * truth, f"leak {keyed[0][1] / MiB:.2f} MiB/step, "
              f"memory_allocated() grew {truth / MiB:.2f} MiB/step")
        rows.append(f"at step {facts['step']}: leak {keyed[0][1] / MiB:.2f} MiB/step at {site.strip()} "
                    f"(memory_allocated() {truth / MiB:+.2f} MiB/step)")
        proc.stdin.write("stop\n")
        proc.stdin.flush()
        proc.wait(timeout=120)
        gone = metric(metric_samples(scrape()), "oomscope_process_info", rank=0)
        check(not gone, f"the ended job is still in /metrics: {gone}")
        rows.append("ended: gone from the next scrape")
    finally:
        for p in (proc, server):
            if p.poll() is None:
                p.kill()
                p.wait(timeout=60)
        log.close()
    return "; ".join(rows)


SCENARIOS = [
    ("torch_live", scenario_torch_live),
    ("torch_metrics", scenario_torch_metrics),
]
