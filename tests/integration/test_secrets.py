"""Evidence that is safe to share: secrets in a program's command line never reach a file
oomscope writes (reports, flight files, snapshots, metrics, the views), nor do secrets in its
environment; source lines quoted in leak verdicts pass through the same filter."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys

import pytest

import oomscope_testlib as t

HERE = os.path.dirname(os.path.abspath(__file__))


def secret_values():
    """Each shape the filter knows, assembled here (never whole in the source)."""
    return {
        "option": "optsecret" + "1" * 12, "option_eq": "optsecret" + "2" * 12, "assignment": "assigned" + "3" * 12,
        "hf": "hf_" + "Q" * 34, "github": "ghp_" + "Z" * 36, "github_pat": "github_pat_" + "A" * 22 + "_" + "b" * 59,
        "aws": "AKIA" + "7" * 16, "slack": "xoxb-" + "1" * 12 + "-" + "c" * 24, "openai": "sk-proj-" + "k" * 40,
        "bearer": "t" * 32, "url_password": "pw" + "9" * 14,
    }


def secret_argv(s):
    return ["--hf-token", s["option"], "--wandb-api-key=" + s["option_eq"], "X_API_KEY=" + s["assignment"], s["hf"],
            "--repo", s["github"], s["github_pat"], s["aws"], s["slack"], s["openai"], "Bearer " + s["bearer"],
            "https://alice:%s@example.com/data" % s["url_password"], "--max-new-tokens", "256"]


def secret_env():
    return {"HF_TOKEN": "hf_" + "E" * 34, "AWS_SECRET_ACCESS_KEY": "envsecret" + "4" * 20,
            "GITHUB_TOKEN": "ghp_" + "Y" * 36, "OPENAI_API_KEY": "sk-" + "e" * 40,
            "DATABASE_URL": "postgres://bob:%s@db/x" % ("envpw" + "5" * 12)}


def leaked(root, values):
    """(file, secret name) for every secret found in any file under root."""
    found = []
    for folder, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(folder, name), "rb") as f:
                data = f.read()
            found += [(os.path.join(folder, name), key) for key, v in values.items() if v.encode() in data]
    return found


def test_no_secret_of_the_command_line_or_the_environment_reaches_any_file(build, tmp_path):
    s = secret_values()
    env_secrets = secret_env()
    out = tmp_path / "out"
    out.mkdir()
    env = build.env(LD_PRELOAD=build.preload, OOMSCOPE_OUTPUT_DIR=str(out), FAKECUDA_UNBACKED="1",
                    FAKECUDA_CAPACITY="16GiB", **env_secrets)
    argv = [build.program("live_loop"), "leak"] + secret_argv(s)

    def start():
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, cwd=str(out))
        t.wait_for_line(proc, "ready")
        with open("/proc/%d/cmdline" % proc.pid, "rb") as f:
            assert s["hf"].encode() in f.read()  # the secrets are there to be kept out
        return proc

    # A running process: its flight file, a snapshot, top, metrics.
    proc = start()
    views = tmp_path / "views"
    views.mkdir()
    snap = subprocess.run([build.oomscope, "snapshot", str(proc.pid), "-o", str(views)], capture_output=True, text=True,
                          timeout=120)
    assert snap.returncode == 0, snap.stderr
    for name, cmd in (("top.txt", ["top", "--once", str(proc.pid)]), ("metrics.prom", ["metrics", "--once", str(out)])):
        r = subprocess.run([build.oomscope] + cmd, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        (views / name).write_text(r.stdout + r.stderr)
    found_running = leaked(out, s) + leaked(views, s)
    out_text, err = proc.communicate("stop\n", timeout=120)
    assert proc.returncode == 0, err
    assert found_running == [], found_running

    # A process killed without a report: its flight file stays, and recover reads it.
    killed = start()
    killed.send_signal(signal.SIGKILL)
    killed.communicate(timeout=60)
    flights = [p for p in os.listdir(out) if p.endswith(".flight")]
    assert flights, os.listdir(out)
    rec = subprocess.run([build.oomscope, "recover", str(out / flights[0]), "-o", str(views)], capture_output=True,
                         text=True, timeout=120)
    assert rec.returncode == 0, rec.stderr

    # The exit report, read by every view.
    (exit_path,) = [str(out / p) for p in os.listdir(out) if p.endswith("-exit.json")]
    for name, cmd in (("report.json", ["report", exit_path, "--format", "json"]), ("report.txt", ["report", exit_path]),
                      ("trace.json", ["export", exit_path, "-f", "chrome-trace"])):
        r = subprocess.run([build.oomscope] + cmd, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        (views / name).write_text(r.stdout)
    subprocess.run([build.oomscope, "html", exit_path, "-o", str(views / "report.html")], check=True,
                   capture_output=True, timeout=120)

    assert leaked(tmp_path, s) == [] and leaked(tmp_path, env_secrets) == []
    rep = t.load(exit_path)
    assert rep["process"]["redacted_values"] == 11, rep["process"]
    cmdline = rep["process"]["cmdline"]
    assert cmdline[cmdline.index("--max-new-tokens") + 1] == "256"  # a number under a secret-sounding name stays
    assert cmdline.count("<redacted>") == 7 and "https://alice:<redacted>@example.com/data" in cmdline, cmdline
    assert "Bearer <redacted>" in cmdline and "X_API_KEY=<redacted>" in cmdline


def test_off_keeps_the_command_line_and_an_expression_of_the_users_is_added(build, tmp_path):
    run = t.run_oomscope(build.oomscope, [build.program("pools"), "--hf-token", "plainvalue", "corp-123456"],
                         str(tmp_path / "a"), env={"OOMSCOPE_REDACT": "corp-[0-9]{6}"})
    assert run.returncode == 0, run.stderr
    cmdline = t.load(run.reports["exit"][0])["process"]["cmdline"]
    assert cmdline[1:] == ["--hf-token", "<redacted>", "<redacted>"], cmdline
    off = t.run_oomscope(build.oomscope, [build.program("pools"), "--hf-token", "plainvalue"], str(tmp_path / "b"),
                         env={"OOMSCOPE_REDACT": "off"})
    rep = t.load(off.reports["exit"][0])["process"]
    assert rep["cmdline"][1:] == ["--hf-token", "plainvalue"] and "redacted_values" not in rep


def test_a_source_line_quoted_in_a_leak_verdict_is_filtered(build, tmp_path):
    # The leak's own line carries a token in a comment: the verdict quotes the line, not the token.
    token = "hf_" + "L" * 34
    program = tmp_path / "torch_programs"
    shutil.copytree(os.path.join(HERE, "torch_programs"), program)
    script = program / "torch_scenarios.py"
    text = script.read_text().replace("# LEAK-LINE", "# LEAK-LINE " + token)
    script.write_text(text)
    env = {"PYTHONPATH": os.path.join(HERE, "fake_torch"), "FAKECUDA_LIB": build.fake_lib, "FAKECUDA_CAPACITY": "1GiB",
           "LD_LIBRARY_PATH": build.fake_lib}
    run = t.run_oomscope(build.oomscope, [sys.executable, str(script), "leak", str(tmp_path / "facts.json")],
                         str(tmp_path / "out"), env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    (path,) = run.reports["exit"]
    analysed = subprocess.run([build.oomscope, "report", path, "--format", "json"], capture_output=True, text=True,
                              check=True).stdout
    growth = [d for d in json.loads(analysed)["diagnosis"] if d["code"] == "growth"]
    assert growth and "LEAK-LINE <redacted>" in growth[0]["message"], growth
    assert token not in analysed
    shown = subprocess.run([build.oomscope, "report", path], capture_output=True, text=True, check=True).stdout
    assert "LEAK-LINE <redacted>" in shown and token not in shown


# ---- Files only their owner reads.

def mode(path):
    return os.stat(path).st_mode & 0o7777


def with_umask(mask):
    return lambda: os.umask(mask)


@pytest.mark.parametrize("mask", [0o022, 0o077])
def test_reports_flight_files_and_folders_are_the_owners_under_any_umask(build, tmp_path, mask):
    # Reports 0600 and folders 0700 by default; OOMSCOPE_REPORT_MODE=0644 shares the reports (and
    # opens the folders to match), the umask still taking away what it takes from any file.
    for extra, report_mode, folder_mode in (({}, 0o600, 0o700),
                                             ({"OOMSCOPE_REPORT_MODE": "0644"}, 0o644 & ~mask, 0o755 & ~mask)):
        made = tmp_path / ("shared" if extra else "default") / "made" / "here"
        env = build.env(FAKECUDA_CAPACITY="1GiB", **extra)
        r = subprocess.run([build.oomscope, "run", "-o", str(made), "--", build.program("pools")], env=env,
                           capture_output=True, text=True, timeout=120, preexec_fn=with_umask(mask))
        assert r.returncode == 0, r.stderr
        reports = [made / p for p in os.listdir(made) if p.endswith(".json")]
        assert len(reports) == 2 and {mode(p) for p in reports} == {report_mode}, [(p, oct(mode(p))) for p in reports]
        assert mode(made) == folder_mode and mode(made.parent) == folder_mode, (oct(mode(made)), oct(folder_mode))
    # The flight file of a running process: 0600 whatever the umask and the report mode.
    out = tmp_path / "live"
    out.mkdir()
    env = build.env(LD_PRELOAD=build.preload, OOMSCOPE_OUTPUT_DIR=str(out), FAKECUDA_UNBACKED="1",
                    FAKECUDA_CAPACITY="16GiB", OOMSCOPE_REPORT_MODE="0644")
    proc = subprocess.Popen([build.program("live_loop"), "leak"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=with_umask(mask))
    t.wait_for_line(proc, "ready")
    (flight,) = [out / p for p in os.listdir(out) if p.endswith(".flight")]
    assert mode(flight) == 0o600, oct(mode(flight))
    proc.communicate("stop\n", timeout=120)
    assert proc.returncode == 0


def test_a_bad_report_mode_is_said_and_0600_kept(build, tmp_path):
    run = t.run_oomscope(build.oomscope, [build.program("pools")], str(tmp_path / "o"),
                         env={"OOMSCOPE_REPORT_MODE": "0444"})
    assert run.returncode == 0
    assert "OOMSCOPE_REPORT_MODE=0444 is not an octal mode with u+rw" in run.stderr
    assert {mode(p) for paths in run.reports.values() for p in paths} == {0o600}


def test_a_folder_others_may_write_into_is_refused_with_one_line(build, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    r = subprocess.run([build.oomscope, "run", "-o", str(shared), "--", build.program("pools")],
                       env=build.env(FAKECUDA_CAPACITY="1GiB"), capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    (line,) = r.stderr.strip().splitlines()
    assert "writable by others without the sticky bit" in line and str(shared) in line, line
    assert os.listdir(shared) == []
    # The preload, told the folder directly: the program runs as ever, nothing is written there.
    direct = subprocess.run([build.program("pools")], env=build.env(LD_PRELOAD=build.preload, FAKECUDA_CAPACITY="1GiB",
                                                                    OOMSCOPE_OUTPUT_DIR=str(shared)),
                            capture_output=True, text=True, timeout=120)
    assert direct.returncode == 0 and os.listdir(shared) == []
    assert "writable by others without the sticky bit" in direct.stderr
    # With the sticky bit (as /tmp): others cannot replace our files; reports are written.
    os.chmod(shared, 0o1777)
    ok = subprocess.run([build.oomscope, "run", "-o", str(shared), "--", build.program("pools")],
                        env=build.env(FAKECUDA_CAPACITY="1GiB"), capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert len([p for p in os.listdir(shared) if p.endswith(".json")]) == 2


def test_a_link_planted_at_the_flight_files_name_is_never_followed(build, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    target = tmp_path / "precious"
    target.write_text("keep me\n")
    host = "".join(c if c.isalnum() or c in "-._" else "_" for c in socket.gethostname())
    # The shell plants the link under its own pid, then becomes the program (exec keeps the pid).
    script = 'ln -s "$0" "$1/oomscope-%s-$$.flight" && exec "$2"' % host
    r = subprocess.run(["sh", "-c", script, str(target), str(out), build.program("pools")],
                       env=build.env(LD_PRELOAD=build.preload, FAKECUDA_CAPACITY="1GiB", OOMSCOPE_OUTPUT_DIR=str(out)),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert target.read_text() == "keep me\n"
    links = [p for p in os.listdir(out) if p.endswith(".flight")]
    assert len(links) == 1 and os.path.islink(out / links[0])
    assert len([p for p in os.listdir(out) if p.endswith(".json")]) == 2  # the reports are still written


# ---- Readers that meet hostile input.

def test_files_that_are_not_ours_get_one_line_and_status_2(build, tmp_path):
    junk = tmp_path / "junk.flight"
    junk.write_bytes(bytes(range(256)) * 40)
    other = tmp_path / "other.flight"
    # A real flight file of another version: the reader says which.
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.Popen([build.program("live_loop"), "leak"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env=build.env(LD_PRELOAD=build.preload, OOMSCOPE_OUTPUT_DIR=str(out), FAKECUDA_UNBACKED="1",
                                          FAKECUDA_CAPACITY="16GiB"))
    t.wait_for_line(proc, "ready")
    (flight,) = [out / p for p in os.listdir(out) if p.endswith(".flight")]
    data = bytearray(flight.read_bytes())
    proc.communicate("stop\n", timeout=120)
    data[8:12] = (99).to_bytes(4, "little")  # the header's version, after the 8-byte magic
    other.write_bytes(bytes(data))
    for target, says in ((junk, "not an oomscope flight-recorder file"), (other, "version 99")):
        for cmd in (["snapshot", str(target)], ["top", "--once", str(target)], ["metrics", "--once", str(target)],
                    ["recover", str(target)]):
            r = subprocess.run([build.oomscope] + cmd, capture_output=True, text=True, timeout=120)
            assert r.returncode == 2 and r.stdout == "", (cmd, r.returncode, r.stdout[:200])
            (line,) = r.stderr.strip().splitlines()
            assert says in line, (cmd, line)


def unreadable_gauge(text):
    """{reason: value} of oomscope_flight_files_unreadable in an exposition."""
    out = {}
    for line in text.splitlines():
        if line.startswith("oomscope_flight_files_unreadable{"):
            labels, value = line.rsplit(" ", 1)
            out[labels.split('reason="')[1].split('"')[0]] = float(value)
    return out


def test_metrics_counts_the_running_processes_files_it_cannot_read(build, tmp_path):
    # A folder scan skips what it cannot read, but says so: two running processes whose mapped
    # flight files are another version's and damaged, beside one it reads.
    out = tmp_path / "job"
    out.mkdir()
    reader = subprocess.Popen([build.program("live_loop"), "leak"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              env=build.env(LD_PRELOAD=build.preload, OOMSCOPE_OUTPUT_DIR=str(out),
                                            FAKECUDA_UNBACKED="1", FAKECUDA_CAPACITY="16GiB"))
    holders = []
    try:
        t.wait_for_line(reader, "ready")
        (flight,) = [out / p for p in os.listdir(out) if p.endswith(".flight")]
        other = bytearray(flight.read_bytes())
        other[8:12] = (99).to_bytes(4, "little")  # the header's version, after the 8-byte magic
        (tmp_path / "other").write_bytes(bytes(other))
        (tmp_path / "junk").write_bytes(b"OOMSFLT1" + bytes(range(256)) * 4)
        ok = subprocess.run([build.oomscope, "metrics", "--once", str(out)], capture_output=True, text=True, timeout=120)
        assert ok.returncode == 0 and unreadable_gauge(ok.stdout) == {"permission": 0, "version": 0, "damaged": 0}, ok
        for source in ("other", "junk"):
            holders.append(subprocess.Popen([sys.executable, os.path.join(HERE, "programs", "maps_flight_file.py"),
                                             str(out), str(tmp_path / source)], stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, text=True))
            t.wait_for_line(holders[-1], "ready")
        r = subprocess.run([build.oomscope, "metrics", "--once", str(out)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert unreadable_gauge(r.stdout) == {"permission": 0, "version": 1, "damaged": 1}, r.stdout
        assert "oomscope_process_info{" in r.stdout  # the one it reads is still there
        # Once those processes end, their files are not counted (left behind, not running).
        for h in holders:
            h.communicate("", timeout=60)
        r = subprocess.run([build.oomscope, "metrics", "--once", str(out)], capture_output=True, text=True, timeout=120)
        assert unreadable_gauge(r.stdout) == {"permission": 0, "version": 0, "damaged": 0}, r.stdout
    finally:
        for h in holders:
            if h.poll() is None:
                h.communicate("", timeout=60)
        reader.communicate("stop\n", timeout=120)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root to become another user")
def test_another_users_process_and_flight_file_get_one_line_and_status_2(build, tmp_path):
    os.chmod(tmp_path, 0o755)  # others may look in, as in a shared job folder
    out = tmp_path / "out"
    out.mkdir(mode=0o755)
    os.chmod(out, 0o755)
    proc = subprocess.Popen([build.program("live_loop"), "leak"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env=build.env(LD_PRELOAD=build.preload, OOMSCOPE_OUTPUT_DIR=str(out), FAKECUDA_UNBACKED="1",
                                          FAKECUDA_CAPACITY="16GiB"))
    try:
        t.wait_for_line(proc, "ready")
        (flight,) = [out / p for p in os.listdir(out) if p.endswith(".flight")]
        nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", build.oomscope]
        for cmd in (["snapshot", str(flight)], ["top", "--once", str(flight)], ["metrics", "--once", str(flight)],
                    ["snapshot", str(proc.pid)], ["top", "--once", str(proc.pid)]):
            r = subprocess.run(nobody + cmd, capture_output=True, text=True, timeout=120)
            assert r.returncode == 2 and r.stdout == "", (cmd, r.returncode, r.stdout[:200], r.stderr)
            (line,) = r.stderr.strip().splitlines()
            assert "Permission denied" in line and "run as that user" in line, (cmd, line)
    finally:
        proc.communicate("stop\n", timeout=120)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root to become another user")
def test_a_scan_counts_another_users_running_process_it_cannot_read(build):
    import tempfile
    shared = tempfile.mkdtemp(prefix="oomscope-shared-")  # under /tmp: a folder others can reach
    try:
        os.chmod(shared, 0o755)
        proc = subprocess.Popen([build.program("live_loop"), "leak"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True,
                                env=build.env(LD_PRELOAD=build.preload, OOMSCOPE_OUTPUT_DIR=shared,
                                              FAKECUDA_UNBACKED="1", FAKECUDA_CAPACITY="16GiB"))
        try:
            t.wait_for_line(proc, "ready")
            nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", build.oomscope]
            r = subprocess.run(nobody + ["metrics", "--once", shared], capture_output=True, text=True, timeout=120)
            assert r.returncode == 0 and "oomscope_process_info{" not in r.stdout, (r.stdout, r.stderr)
            assert unreadable_gauge(r.stdout) == {"permission": 1, "version": 0, "damaged": 0}, r.stdout
            mine = subprocess.run([build.oomscope, "metrics", "--once", shared], capture_output=True, text=True,
                                  timeout=120)
            assert "oomscope_process_info{" in mine.stdout
            assert unreadable_gauge(mine.stdout) == {"permission": 0, "version": 0, "damaged": 0}, mine.stdout
        finally:
            proc.communicate("stop\n", timeout=120)
    finally:
        shutil.rmtree(shared, ignore_errors=True)
