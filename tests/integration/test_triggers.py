"""Reports at exit, on SIGTERM / SIGINT, on request; a fork child writes nothing."""
import signal
import os
import subprocess

import pytest

import oomscope_testlib as t


def start(build, args, outdir, via_cli=False):
    if via_cli:
        env = build.env(OOMSCOPE_OUTPUT_DIR=str(outdir))
        cmd = [build.oomscope, "run", "-o", str(outdir), "--", build.program("alloc_modes")] + args
    else:
        env = build.env(OOMSCOPE_OUTPUT_DIR=str(outdir), LD_PRELOAD=build.preload)
        cmd = [build.program("alloc_modes")] + args
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(outdir))


def wait_for_the_signal(proc):
    """Waits for a process sent SIGTERM to end. Under TSan only, a SIGTERM that does not end it
    in 60 s is sent once more: TSan's runtime loses about one in 50 on a loaded machine
    (docs/RELIABILITY.md: strace shows the signal delivered and TSan's deferred-signal pass run,
    our handler is never entered). Not under the plain build."""
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        from conftest import PRELOAD_FIRST
        if "tsan" not in os.path.basename(PRELOAD_FIRST):
            raise
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def test_exit_report(build, tmp_path):
    run = build.preloaded([build.program("alloc_modes"), "exit"], str(tmp_path))
    assert run.returncode == 0
    reports = t.reports_in(str(tmp_path))
    assert list(reports) == ["exit"], reports
    rep = t.load(reports["exit"][0])
    assert rep["trigger"]["kind"] == "exit"
    t.check_alloc_modes_live(rep)
    kinds = [r[1] for r in rep["timeline"]["rows"]]
    assert kinds == ["alloc"] * 5 + ["free"] + ["alloc"] * 2


def test_exit_report_can_be_switched_off(build, tmp_path):
    run = build.preloaded([build.program("alloc_modes"), "exit"], str(tmp_path), OOMSCOPE_EXIT_REPORT="0")
    assert run.returncode == 0
    assert t.reports_in(str(tmp_path)) == {}


def test_sigterm_writes_a_report_then_terminates(build, tmp_path):
    proc = start(build, ["wait"], tmp_path)
    t.wait_for_line(proc, "ready")
    proc.send_signal(signal.SIGTERM)
    wait_for_the_signal(proc)
    assert proc.returncode == -signal.SIGTERM  # died of the signal, as without us
    reports = t.reports_in(str(tmp_path))
    assert list(reports) == ["signal"], reports
    rep = t.load(reports["signal"][0])
    assert rep["trigger"]["message"] == "received SIGTERM"
    t.check_alloc_modes_live(rep)


def test_a_second_sigterm_waits_for_the_report_of_the_first(build, tmp_path):
    # A launcher that signals the process group and forwards the signal too (torchrun
    # --no-python oomscope run …) sends two: the second, handled on another thread while the
    # first one's report is written, must not end the process before the report is there.
    for attempt in range(5):
        out = tmp_path / str(attempt)
        out.mkdir()
        proc = start(build, ["wait-threads"], out)
        t.wait_for_line(proc, "ready")
        os.kill(proc.pid, signal.SIGTERM)
        os.kill(proc.pid, signal.SIGTERM)
        wait_for_the_signal(proc)
        assert proc.returncode == -signal.SIGTERM
        reports = t.reports_in(str(out))
        assert list(reports) == ["signal"], (attempt, reports, os.listdir(out))
        t.check_alloc_modes_live(t.load(reports["signal"][0]))


def test_abort_writes_a_report_then_dies_of_sigabrt(build, tmp_path):
    run = build.preloaded([build.program("alloc_modes"), "abort"], str(tmp_path), OOMSCOPE_QUIET="1")
    assert run.returncode == -signal.SIGABRT, (run.returncode, run.stderr)  # as without us
    assert "aborting" in run.stdout
    reports = t.reports_in(str(tmp_path))
    assert list(reports) == ["signal"], reports
    rep = t.load(reports["signal"][0])
    assert rep["trigger"]["message"] == "received SIGABRT"
    t.check_alloc_modes_live(rep)


def test_sigterm_through_oomscope_run_is_forwarded(build, tmp_path):
    proc = start(build, ["wait"], tmp_path, via_cli=True)
    t.wait_for_line(proc, "ready")
    proc.send_signal(signal.SIGTERM)  # to the CLI, which passes it on
    wait_for_the_signal(proc)
    assert proc.returncode == -signal.SIGTERM
    assert list(t.reports_in(str(tmp_path))) == ["signal"]


def test_sigint_reaches_the_programs_own_handler(build, tmp_path):
    proc = start(build, ["handler"], tmp_path)
    t.wait_for_line(proc, "ready")
    proc.send_signal(signal.SIGINT)
    t.wait_for_line(proc, "handled")
    proc.wait(timeout=60)
    assert proc.returncode == 0
    reports = t.reports_in(str(tmp_path))
    # The signal report, then the program exits normally: an exit report too.
    assert sorted(reports) == ["exit", "signal"], reports
    assert t.load(reports["signal"][0])["trigger"]["message"] == "received SIGINT"


def test_dump_request_through_the_c_api(build, tmp_path):
    run = build.preloaded([build.program("alloc_modes"), "dump"], str(tmp_path), OOMSCOPE_EXIT_REPORT="0")
    assert run.returncode == 0
    reports = t.reports_in(str(tmp_path))
    assert list(reports) == ["request"]
    printed = [l for l in run.stdout.splitlines() if l.startswith("dump: ")][0]
    assert printed == "dump: " + reports["request"][0]
    rep = t.load(reports["request"][0])
    assert rep["trigger"]["message"] == "checkpoint"
    t.check_alloc_modes_live(rep)


def test_dump_without_the_preload_is_harmless(build, tmp_path):
    out = subprocess.run([build.program("alloc_modes"), "dump"], capture_output=True, text=True, cwd=str(tmp_path),
                         env=build.env())
    assert out.returncode == 0
    assert "dump: (no oomscope)" in out.stdout


def test_fork_child_without_cuda_writes_nothing(build, tmp_path):
    run = build.preloaded([build.program("alloc_modes"), "fork"], str(tmp_path))
    assert run.returncode == 0, run.stderr
    assert "child exited 0" in run.stdout
    reports = t.reports_in(str(tmp_path))
    assert list(reports) == ["exit"]
    assert len(reports["exit"]) == 1
    child = int([l for l in run.stdout.splitlines() if l.startswith("child ") and "exited" not in l][0].split()[1])
    assert t.load(reports["exit"][0])["process"]["pid"] != child


def test_unwritable_output_dir_is_one_notice_and_the_program_goes_on(build, tmp_path):
    missing = tmp_path / "does" / "not" / "exist"
    run = subprocess.run([build.program("alloc_modes"), "exit"], capture_output=True, text=True, cwd=str(tmp_path),
                         env=build.env(LD_PRELOAD=build.preload, OOMSCOPE_OUTPUT_DIR=str(missing)))
    assert run.returncode == 0
    assert "allocated" in run.stdout
    notices = [l for l in run.stderr.splitlines() if l.startswith("oomscope:")]
    # One for the flight-recorder file at the start, one for the report at the trigger.
    assert len(notices) == 2, run.stderr
    assert "no flight-recorder file: cannot create" in notices[0]
    assert "could not write the exit report" in notices[1]


def test_a_full_disk_is_one_notice_per_trigger_and_never_kills_the_program(build, tmp_path):
    # RLIMIT_FSIZE stands in for a full disk: the write fails, and the SIGXFSZ it raises (whose
    # default action ends the process) is never delivered. The next trigger tries again.
    import resource

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    run = subprocess.run([build.program("alloc_modes"), "dump"], capture_output=True, text=True, cwd=str(tmp_path),
                         preexec_fn=small_files,
                         env=build.env(LD_PRELOAD=build.preload, OOMSCOPE_OUTPUT_DIR=str(tmp_path)))
    assert run.returncode == 0, (run.returncode, run.stderr)
    notices = [l for l in run.stderr.splitlines() if l.startswith("oomscope:")]
    assert len(notices) == 3, run.stderr
    assert "no flight-recorder file" in notices[0] and "file-size limit" in notices[0]
    assert "could not write the request report" in notices[1] and "File too large" in notices[1]
    assert "could not write the exit report" in notices[2]
    assert os.listdir(str(tmp_path)) == []  # no partial report, no temporary file


def test_an_allocator_retry_is_one_oom_episode(build, tmp_path):
    run = build.preloaded([build.program("alloc_modes"), "retry"], str(tmp_path), OOMSCOPE_EXIT_REPORT="0")
    assert "failures 2" in run.stdout
    reports = t.reports_in(str(tmp_path))
    assert len(reports["oom"]) == 1
    rows = t.load(reports["oom"][0])["timeline"]["rows"]
    assert [r[1] for r in rows][-1] == "alloc_failed"  # written at the first failure


def test_failures_further_apart_than_the_window_are_two_episodes(build, tmp_path):
    run = build.preloaded([build.program("alloc_modes"), "retry"], str(tmp_path), OOMSCOPE_EXIT_REPORT="0",
                          OOMSCOPE_OOM_EPISODE_MS="0")
    assert "failures 2" in run.stdout
    assert len(t.reports_in(str(tmp_path))["oom"]) == 2


def test_exec_children_using_cuda_write_their_own_reports(build, tmp_path):
    # A shell (no CUDA) runs the program twice: two reports, one per CUDA process, none from
    # the shell; each names its own process.
    prog = build.program("alloc_modes")
    run = build.preloaded(["sh", "-c", f"'{prog}' exit; '{prog}' exit; echo done"], str(tmp_path), OOMSCOPE_QUIET="1")
    assert run.returncode == 0 and run.stdout.strip().endswith("done"), run.stderr
    reports = t.reports_in(str(tmp_path))
    assert list(reports) == ["exit"] and len(reports["exit"]) == 2, reports
    pids = {t.load(p)["process"]["pid"] for p in reports["exit"]}
    cmds = {t.load(p)["process"]["cmdline"][0] for p in reports["exit"]}
    assert len(pids) == 2 and cmds == {prog}


def test_a_program_that_catches_its_ooms_gets_the_first_reports_and_a_count_of_the_rest(build, tmp_path):
    # A batch-size finder: 50 tries, each failure its own episode (a window of 0 ms). The first 8
    # get a report (OOMSCOPE_MAX_OOM_REPORTS' default); the rest are counted in the exit report.
    run = build.preloaded([build.program("alloc_modes"), "binsearch"], str(tmp_path), OOMSCOPE_OOM_EPISODE_MS="0")
    assert run.returncode == 0, run.stderr
    failures, best = (int(w) for w in run.stdout.split("failures ")[1].split(" best "))
    assert failures > 8
    reports = t.reports_in(str(tmp_path))
    assert len(reports["oom"]) == 8, reports
    exit_report = t.load(reports["exit"][0])
    skipped = exit_report["skipped_ooms"]
    assert skipped["count"] == failures - 8 and skipped["max_reports"] == 8
    assert len(skipped["episodes"]) == failures - 8
    assert all(e["api"] == "cudaMalloc" and e["requested_bytes"] > best for e in skipped["episodes"])
    assert skipped["largest_success_after_bytes"] == best
    for oom in reports["oom"]:
        assert "skipped_ooms" not in t.load(oom)  # the first eight: nothing skipped before them
    view = subprocess.run([build.oomscope, "report", reports["exit"][0], "--color", "never"], capture_output=True,
                          text=True, timeout=60)
    assert f"{failures - 8} more out-of-memory" in view.stdout, view.stdout
    # OOMSCOPE_MAX_OOM_REPORTS=0: no limit, a report each.
    out = tmp_path / "all"
    out.mkdir()
    run = build.preloaded([build.program("alloc_modes"), "binsearch"], str(out), OOMSCOPE_OOM_EPISODE_MS="0",
                          OOMSCOPE_MAX_OOM_REPORTS="0")
    reports = t.reports_in(str(out))
    assert len(reports["oom"]) == failures and "skipped_ooms" not in t.load(reports["exit"][0])


@pytest.mark.parametrize("via_cli", [False, True])
def test_the_dump_signal_writes_a_report_and_the_program_goes_on(build, tmp_path, via_cli):
    # Sent to the program, or to `oomscope run` (which forwards it, as it does SIGTERM).
    proc = start(build, ["wait"], tmp_path, via_cli=via_cli)
    t.wait_for_line(proc, "ready")
    for n in (1, 2):
        proc.send_signal(signal.SIGUSR2)
        # The agent says each report on stderr: that line is the report being there.
        for line in proc.stderr:
            if "request report written to" in line:
                break
        assert proc.poll() is None, "the program ended on SIGUSR2"
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGTERM
    reports = t.reports_in(str(tmp_path))
    assert sorted(reports) == ["request", "signal"] and len(reports["request"]) == 2, reports
    rep = t.load(reports["request"][0])
    assert rep["trigger"]["kind"] == "request"
    assert rep["trigger"]["message"] == "received SIGUSR2 (OOMSCOPE_DUMP_SIGNAL)"
    t.check_alloc_modes_live(rep)


def test_the_dump_signal_chains_to_the_programs_own_handler(build, tmp_path):
    # A handler the program installed before oomscope's: the report is written and the
    # program's handler runs too (chained, as for SIGTERM); the program carries on to its end.
    proc = start(build, ["usr2-handler"], tmp_path)
    t.wait_for_line(proc, "ready")
    proc.send_signal(signal.SIGUSR2)
    t.wait_for_line(proc, "handled")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0
    reports = t.reports_in(str(tmp_path))
    assert sorted(reports) == ["exit", "request"], (reports, err)
    assert t.load(reports["request"][0])["trigger"]["message"] == "received SIGUSR2 (OOMSCOPE_DUMP_SIGNAL)"


def test_a_handler_the_program_installs_later_replaces_the_dump_signal(build, tmp_path):
    # The program's own SIGUSR2 handler, installed after oomscope's: that signal is the
    # program's now (no report), as it would be without oomscope.
    proc = start(build, ["usr2-handler-late"], tmp_path)
    t.wait_for_line(proc, "ready")
    proc.send_signal(signal.SIGUSR2)
    t.wait_for_line(proc, "handled")
    proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert sorted(t.reports_in(str(tmp_path))) == ["exit"]


def test_without_a_dump_signal_sigusr2_does_what_it_always_did(build, tmp_path):
    env = build.env(OOMSCOPE_OUTPUT_DIR=str(tmp_path), LD_PRELOAD=build.preload, OOMSCOPE_DUMP_SIGNAL="off")
    proc = subprocess.Popen([build.program("alloc_modes"), "wait"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=str(tmp_path))
    t.wait_for_line(proc, "ready")
    proc.send_signal(signal.SIGUSR2)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGUSR2  # its default action: the process ends
    assert "request" not in t.reports_in(str(tmp_path))
