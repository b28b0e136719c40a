"""The job view (`oomscope report DIR`, `oomscope check DIR`) over the reports of a fake job:
a small launcher starts four ranks of tests/integration/programs/rank_job on a fake machine
of four GPUs with the variables torchrun sets, lets rank 2 run out of memory, then ends the
others with SIGTERM as torchrun does. Rank 3 forgets torch.cuda.set_device and works on
device 0."""
import json
import os
import re
import signal
import subprocess

import oomscope_testlib as t

MiB = 1 << 20
GiB = 1 << 30
RUN_ID = "fake-run-1"


def start_rank(build, outdir, rank, share, extra, request, wrong=False, run_id=RUN_ID, world=4):
    env = build.env(LD_PRELOAD=build.preload, OOMSCOPE_OUTPUT_DIR=str(outdir), FAKECUDA_DEVICES=4,
                    FAKECUDA_CAPACITY="8GiB", FAKECUDA_UNBACKED=1, RANK=rank, LOCAL_RANK=rank, WORLD_SIZE=world,
                    LOCAL_WORLD_SIZE=world, GROUP_RANK=0, TORCHELASTIC_RUN_ID=run_id)
    cmd = [build.program("rank_job"), str(share), str(extra), str(request)] + (["device0"] if wrong else [])
    return subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=str(outdir))


def run_job(build, outdir, kill=None, run_id=RUN_ID, rank2_extra=2048):
    """Ranks 0, 1, 3 hold 1 GiB; rank 2 holds 1 GiB and 2 GiB of buffers of its own, then asks
    for 6 GiB more on its 8 GiB device and fails; rank 3 is on device 0. `kill`: a rank ended
    with SIGKILL instead (no report: its flight file stays)."""
    specs = [(1024, 0, 0, False), (1024, 0, 0, False), (1024, rank2_extra, 6144, False), (1024, 0, 0, True)]
    procs = [start_rank(build, outdir, r, *spec, run_id=run_id) for r, spec in enumerate(specs)]
    for p in procs:
        t.wait_for_line(p, "ready")
    procs[2].stdin.write("go\n")
    procs[2].stdin.flush()
    procs[2].stdin.close()
    assert procs[2].wait(timeout=60) == 1, procs[2].stderr.read()
    for r, p in enumerate(procs):
        if r != 2:
            p.send_signal(signal.SIGKILL if r == kill else signal.SIGTERM)
    for r, p in enumerate(procs):
        if r != 2:
            p.wait(timeout=60)
            assert p.returncode == -(signal.SIGKILL if r == kill else signal.SIGTERM), (r, p.returncode, p.stderr.read())
    return procs


def cli(build, *args):
    return subprocess.run([build.oomscope] + [str(a) for a in args], capture_output=True, text=True, timeout=120)


def rank_rows(text):
    """The Ranks table: {rank: cells}."""
    lines = text.splitlines()
    start = lines.index("Ranks") + 2
    rows = {}
    for line in lines[start:]:
        if not line.strip():
            break
        cells = re.split(r"\s{2,}", line.strip())
        rows[int(cells[0])] = cells
    return rows


def test_the_job_view_names_the_first_failure_what_the_others_held_and_the_wrong_device(build, tmp_path):
    run_job(build, tmp_path)
    names = sorted(os.listdir(tmp_path))
    # File names carry the rank; every rank left its reports and no flight file stays.
    for r in range(4):
        assert any(re.match(rf"oomscope-.+-r{r}-\d+-(oom|signal|exit)\.json$", n) for n in names), names
    assert not [n for n in names if n.endswith(".flight")], names
    one = t.load(str(tmp_path / next(n for n in names if "-r2-" in n and n.endswith("-oom.json"))))
    p = one["process"]
    assert (p["rank"], p["local_rank"], p["world_size"], p["local_world_size"], p["group_rank"], p["run_id"]) == \
        (2, 2, 4, 4, 0, RUN_ID)
    assert [d["context"] for d in one["devices"]] == [False, False, True, False]

    view = cli(build, "report", tmp_path, "--color", "never")
    assert view.returncode == 0, view.stderr
    out = view.stdout
    assert f"JOB run_id {RUN_ID}: 4 processes" in out and "world size 4" in out
    first = out[out.index("First failure"):out.index("Ranks")]
    assert re.search(r"rank 2 \(.+, pid \d+\) at .+: cudaMalloc of 6\.00 GiB on device 2 failed", first), first
    assert "last_request" in first  # the failed request's own line
    rows = rank_rows(out)
    assert sorted(rows) == [0, 1, 2, 3]
    assert rows[2][5] == "oom+exit" and all(rows[r][5] == "signal" for r in (0, 1, 3)), rows
    assert [rows[r][4] for r in range(4)] == ["0", "1", "2", "0"]  # devices: rank 3 on device 0
    # What each rank held when rank 2 failed: its own share from its timeline; rank 2 at its OOM.
    for r in (0, 1, 3):
        assert rows[r][-1] == "1.00 GiB", rows[r]
        assert rows[r][6].startswith("+")  # SIGTERM came after the failure
    assert rows[2][-1] == "3.00 GiB (its report)"
    # Rank 2 stands out (3 GiB against a median of 1 GiB), by the buffers of its own.
    standouts = out[out.index("Ranks that stand out"):out.index("Diagnosis of the job")]
    assert "rank 2: peak 3.00 GiB, +2.00 GiB against rank" in standouts, standouts
    assert re.search(r"\+2\.00 GiB\s+.*hold_rank_buffers", standouts), standouts
    diagnosis = out[out.index("Diagnosis of the job"):]
    assert len(re.findall(r"wrong_device: ", diagnosis)) == 1
    assert re.search(r"ERROR\s+wrong_device: rank 3 \(.+\): local rank 3 should use device 3, but it has a context "
                     r"on device 0 and allocated 1\.00 GiB on device 0", diagnosis), diagnosis
    assert re.search(r"WARNING\s+rank_imbalance: rank 2's peak 3\.00 GiB", diagnosis), diagnosis

    # The CI gate over the directory fails, naming both.
    check = cli(build, "check", tmp_path)
    assert check.returncode == 1, check.stdout + check.stderr
    assert re.search(r"FAIL\s+oom\s+rank 2 ran out of memory first: cudaMalloc of 6\.00 GiB on device 2", check.stdout)
    assert re.search(r"FAIL\s+wrong_device\s+rank 3\n", check.stdout), check.stdout
    assert not re.search(r"wrong_device: rank [012] ", check.stdout)

    # Several files (not a directory) make the same view.
    files = sorted(str(tmp_path / n) for n in names)
    again = cli(build, "report", *files, "--color", "never")
    assert again.returncode == 0 and again.stdout == out


def test_a_rank_killed_before_its_report_is_recovered_from_its_flight_file(build, tmp_path):
    run_job(build, tmp_path, kill=1)
    flights = [n for n in os.listdir(tmp_path) if n.endswith(".flight")]
    assert len(flights) == 1, flights
    view = cli(build, "report", tmp_path, "--color", "never")
    assert view.returncode == 0, view.stderr
    rows = rank_rows(view.stdout)
    assert rows[1][5] == "recovered" and rows[1][-1] == "1.00 GiB", rows[1]
    assert "no report from rank" not in view.stdout


def test_bad_sets_are_named(build, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    r = cli(build, "report", empty)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no oomscope reports" in r.stderr, r.stderr
    r = cli(build, "check", empty)
    assert r.returncode == 2 and r.stderr.count("\n") == 1

    # Two jobs in one folder: grouped, and said so; a truncated report: named, the rest shown.
    job = tmp_path / "two"
    job.mkdir()
    run_job(build, job, run_id="job-a")
    for n in os.listdir(job):
        if "-r0-" in n:
            data = json.load(open(job / n))
            data["process"]["run_id"] = "job-b"
            with open(job / n, "w") as f:
                json.dump(data, f)
    victim = sorted(n for n in os.listdir(job) if "-r1-" in n)[0]
    text = (job / victim).read_text()
    (job / victim).write_text(text[: len(text) // 2])
    view = cli(build, "report", job, "--color", "never")
    assert view.returncode == 0, view.stderr
    assert "2 jobs in this set: grouped by job id" in view.stdout
    assert "JOB run_id job-a: 2 processes" in view.stdout and "JOB run_id job-b: 1 process" in view.stdout
    assert f"{victim}: " in view.stdout.split("Not read")[1]
    assert victim in view.stderr and view.stderr.count("\n") == 1
    # The gate does not pass over a report it could not read.
    assert cli(build, "check", job).returncode == 2


def test_two_runs_of_a_job_are_compared_rank_by_rank(build, tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    run_job(build, first)
    run_job(build, second, rank2_extra=1024)
    d = cli(build, "diff", first, second)
    assert d.returncode == 0, d.stderr
    blocks = {b.split("\n", 1)[0]: b for b in re.split(r"\n(?=rank \d)", d.stdout)}
    assert sorted(blocks) == ["rank 0", "rank 1", "rank 2", "rank 3"], d.stdout
    assert re.search(r"-1\.00 GiB.*hold_rank_buffers", blocks["rank 2"]), blocks["rank 2"]
    assert "hold_rank_buffers" not in blocks["rank 0"]


def test_the_jobs_page_draws_every_rank_and_the_first_failure(build, tmp_path):
    if not t.CHROMIUM:
        import pytest
        pytest.skip("chromium is not installed (make deps installs it)")
    run_job(build, tmp_path)
    page = cli(build, "html", tmp_path)
    assert page.returncode == 0, page.stderr
    assert page.stdout.strip() == str(tmp_path / "oomscope-job.html")
    text = (tmp_path / "oomscope-job.html").read_text()
    assert "<script" not in text and not re.search(r'(src|href)\s*=\s*["\']?(https?:)?//', text)
    profile = str(tmp_path / "profile")
    dom = t.browser("--dump-dom", "file://" + str(tmp_path / "oomscope-job.html"), profile=profile).stdout
    assert sorted(re.findall(r'<path data-rank="([^"]+)"', dom)) == ["rank 0", "rank 1", "rank 2", "rank 3"]
    assert sorted(re.findall(r'<tr data-rank="([^"]+)"', dom)) == ["rank 0", "rank 1", "rank 2", "rank 3"]
    assert re.search(r'<line data-first-failure="rank 2"', dom)
    assert re.findall(r'data-code="wrong_device" data-rank="([^"]+)"', dom) == ["rank 3"]
    assert re.findall(r'data-code="rank_imbalance" data-rank="([^"]+)"', dom) == ["rank 2"]
    shots = os.path.join(build.dir, "test-output", "html")
    os.makedirs(shots, exist_ok=True)
    t.browser("--screenshot=" + os.path.join(shots, "job.png"), "file://" + str(tmp_path / "oomscope-job.html"),
              profile=profile)
    assert os.path.getsize(os.path.join(shots, "job.png")) > 10000
