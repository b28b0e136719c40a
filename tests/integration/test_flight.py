"""The flight-recorder file: what a process killed without a report leaves, and `oomscope recover`."""
import collections
import glob
import os
import signal
import subprocess

import pytest

import oomscope_testlib as t



def flight_files(outdir):
    return sorted(glob.glob(os.path.join(str(outdir), "*.flight")))


def start(build, args, outdir, program="alloc_modes", **env):
    return subprocess.Popen([build.program(program)] + args, cwd=str(outdir), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env=build.env(LD_PRELOAD=build.preload, OOMSCOPE_OUTPUT_DIR=str(outdir), **env))


def recover(build, path, *args):
    run = subprocess.run([build.oomscope, "recover", str(path)] + list(args), capture_output=True, text=True, timeout=120)
    return run


def recovered(build, outdir):
    files = flight_files(outdir)
    assert len(files) == 1, os.listdir(str(outdir))
    run = recover(build, files[0])
    assert run.returncode == 0, run.stderr
    path = run.stdout.strip()
    assert path.endswith("-recovered.json") and os.path.exists(path)
    assert os.path.exists(files[0])  # recover leaves the evidence where it is
    return t.load(path)


def kinds(rep):
    column = rep["timeline"]["columns"].index("kind")
    return collections.Counter(row[column] for row in rep["timeline"]["rows"])


def check_alloc_modes_memory(rep):
    t.check_alloc_modes_live(rep)
    # Every event: 7 allocations, 1 free, nothing dropped.
    assert kinds(rep) == {"alloc": 7, "free": 1}
    assert rep["capture"]["events_dropped"] == 0


def test_sigkill_leaves_a_file_that_recover_turns_into_the_report(build, tmp_path):
    proc = start(build, ["wait"], tmp_path)
    t.wait_for_line(proc, "ready")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert not t.reports_in(str(tmp_path))  # nothing could be written
    rep = recovered(build, tmp_path)
    assert rep["trigger"]["kind"] == "recovered"
    assert rep["process"]["pid"] == proc.pid
    assert rep["process"]["cmdline"][-1] == "wait"
    assert rep["capture"]["backends"] == ["flight-recorder"]
    check_alloc_modes_memory(rep)
    rendered = subprocess.run([build.oomscope, "report", t.reports_in(str(tmp_path))["recovered"][0]],
                              capture_output=True, text=True)
    assert rendered.returncode == 0 and rendered.stdout.startswith("RECOVERED REPORT"), rendered.stdout[:200]


@pytest.mark.skipif(t.UNDER_ASAN, reason="ASan's SIGSEGV handler reports the crash and exits 1 instead")
def test_a_crash_leaves_the_file(build, tmp_path):
    run = subprocess.run([build.program("alloc_modes"), "segv"], cwd=str(tmp_path), capture_output=True, text=True,
                         env=build.env(LD_PRELOAD=build.preload, OOMSCOPE_OUTPUT_DIR=str(tmp_path)))
    assert run.returncode == -signal.SIGSEGV, (run.returncode, run.stderr)  # the program's own death, unchanged
    rep = recovered(build, tmp_path)
    check_alloc_modes_memory(rep)


def test_a_clean_exit_and_a_reported_signal_remove_the_file(build, tmp_path):
    run = build.preloaded([build.program("alloc_modes"), "exit"], str(tmp_path))
    assert run.returncode == 0
    assert flight_files(tmp_path) == []
    assert list(t.reports_in(str(tmp_path))) == ["exit"]

    signalled = tmp_path / "signalled"
    signalled.mkdir()
    proc = start(build, ["wait"], signalled)
    t.wait_for_line(proc, "ready")
    assert len(flight_files(signalled)) == 1  # there while the process runs
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGTERM
    assert list(t.reports_in(str(signalled))) == ["signal"]
    assert flight_files(signalled) == []  # the report holds what the file did


def test_the_file_at_the_defaults_is_sparse_and_within_its_budget(build, tmp_path):
    # OOMSCOPE_FLIGHT_MIB's default (16): 256 Ki events of 48 bytes, the header, the counters and
    # the first chunks of the regions that grow; the file's length is theirs at their largest.
    proc = start(build, ["wait"], tmp_path)
    t.wait_for_line(proc, "ready")
    [path] = flight_files(tmp_path)
    st = os.stat(path)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert 12 << 20 <= st.st_blocks * 512 <= 16 << 20, st.st_blocks
    assert st.st_size > 60 << 20
    rep = recovered(build, tmp_path)
    assert rep["capture"]["ring_bytes"] == 262144 * 48
    check_alloc_modes_memory(rep)
    # A budget of its own: 2 MiB holds 16 Ki events (beside the 0.76 MiB of the rest).
    small = tmp_path / "small"
    small.mkdir()
    proc = start(build, ["wait"], small, OOMSCOPE_FLIGHT_MIB="2")
    t.wait_for_line(proc, "ready")
    [path] = flight_files(small)
    blocks = os.stat(path).st_blocks * 512
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert blocks <= 2 << 20
    assert recovered(build, small)["capture"]["ring_bytes"] == 16384 * 48


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_on_a_full_tmpfs_the_file_stops_growing_and_nothing_faults(build, tmp_path):
    # A tmpfs just larger than the file's start (12.8 MiB with a 256 Ki ring): growing the
    # journal and the arena must fail softly (a SIGBUS would kill the test binary), and the
    # reader (read(), not a mapping: a fault on a hole of a full tmpfs is a SIGBUS too) must
    # read what is there. The case itself is unit_tests' hidden "[fullfs]".
    small = tmp_path / "small"
    small.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=13500k", "tmpfs", str(small)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        run = subprocess.run([os.path.join(build.dir, "bin", "unit_tests"), "[fullfs]"], capture_output=True,
                             text=True, timeout=300, env=build.env(OOMSCOPE_TEST_FULL_DIR=str(small)))
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
        assert "1 test case" in run.stdout or "All tests passed" in run.stdout, run.stdout[-2000:]
    finally:
        subprocess.run(["umount", str(small)], capture_output=True)


def test_switched_off_there_is_no_file(build, tmp_path):
    proc = start(build, ["wait"], tmp_path, OOMSCOPE_FLIGHT="0")
    t.wait_for_line(proc, "ready")
    assert flight_files(tmp_path) == []
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm here")
def test_a_file_on_a_tmpfs_is_said_to_take_memory(build, tmp_path):
    # /dev/shm is a tmpfs: the file there is RAM, said once; on the test's own folder not.
    shm = subprocess.run(["stat", "-f", "-c", "%T", "/dev/shm"], capture_output=True, text=True).stdout.strip()
    if shm != "tmpfs":
        pytest.skip(f"/dev/shm is {shm}, not a tmpfs")
    import tempfile
    for outdir, said in ((tempfile.mkdtemp(dir="/dev/shm"), True), (str(tmp_path), False)):
        proc = start(build, ["wait"], outdir)
        t.wait_for_line(proc, "ready")
        files = flight_files(outdir)
        proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
        notices = [l for l in err.splitlines() if "is on a tmpfs" in l]
        assert len(files) == 1
        assert len(notices) == (1 if said else 0), err
        if said:
            assert files[0] in notices[0] and "OOMSCOPE_FLIGHT_MIB" in notices[0]
            for f in files:
                os.unlink(f)
            os.rmdir(outdir)


def test_a_fork_child_leaves_the_parents_file_alone(build, tmp_path):
    proc = start(build, ["fork-wait"], tmp_path)
    t.wait_for_line(proc, "ready")  # the child has exited by now, atexit handlers and all
    assert len(flight_files(tmp_path)) == 1
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    rep = recovered(build, tmp_path)
    assert rep["process"]["pid"] == proc.pid
    check_alloc_modes_memory(rep)


def test_a_wrapped_ring_after_sigkill_gives_its_newest_events_and_every_live_allocation(build, tmp_path):
    # 16 threads push about 6 rings' worth of events (OOMSCOPE_FLIGHT_MIB=2: 16 Ki events): the
    # file keeps the newest 16 Ki but for the unfilled rest of each thread's last block of 256.
    run = subprocess.run([build.program("stress"), "16", "3000", "kill"], cwd=str(tmp_path), capture_output=True,
                         text=True, timeout=300,
                         env=build.env(LD_PRELOAD=build.preload, OOMSCOPE_OUTPUT_DIR=str(tmp_path),
                                       OOMSCOPE_FLIGHT_MIB="2", FAKECUDA_UNBACKED="1", FAKECUDA_CAPACITY="64GiB"))
    assert run.returncode == -signal.SIGKILL, run.stderr
    words = run.stdout.split()
    facts = dict(zip(words[0::2], (int(w) for w in words[1::2])))
    rep = recovered(build, tmp_path)
    kept = sum(kinds(rep).values())
    assert 16384 - 16 * 256 <= kept <= 16384, kept
    assert rep["capture"]["events_pushed"] >= facts["allocated"] + facts["freed"]
    assert rep["capture"]["events_dropped"] == rep["capture"]["events_pushed"] - kept
    assert rep["capture"]["live_allocations"] == facts["left"]
    assert t.memory_row(rep, 0)["tracked_bytes"] == facts["bytes"]


def test_many_threads_then_sigkill_every_event_and_live_allocation_recovered(build, tmp_path):
    # 16 threads, frees on other threads than their allocations; the program kills itself, so
    # nothing is in flight: every event and every live allocation must come back.
    run = subprocess.run([build.program("stress"), "16", "3000", "kill"], cwd=str(tmp_path), capture_output=True,
                         text=True, timeout=300,
                         env=build.env(LD_PRELOAD=build.preload, OOMSCOPE_OUTPUT_DIR=str(tmp_path),
                                       FAKECUDA_UNBACKED="1", FAKECUDA_CAPACITY="64GiB"))
    assert run.returncode == -signal.SIGKILL, run.stderr
    words = run.stdout.split()
    facts = dict(zip(words[0::2], (int(w) for w in words[1::2])))
    assert facts["failures"] == 0
    rep = recovered(build, tmp_path)
    assert kinds(rep) == {"alloc": facts["allocated"], "free": facts["freed"]}
    assert rep["capture"]["events_dropped"] == 0
    assert rep["capture"]["live_allocations"] == facts["left"]
    assert t.memory_row(rep, 0)["tracked_bytes"] == facts["bytes"]


def test_recover_refuses_what_is_not_a_flight_file(build, tmp_path):
    missing = recover(build, tmp_path / "nothing.flight")
    assert missing.returncode == 2 and "cannot open" in missing.stderr
    garbage = tmp_path / "garbage.flight"
    garbage.write_bytes(b"not a flight file" * 1000)
    run = recover(build, garbage)
    assert run.returncode == 2 and "not an oomscope flight-recorder file" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1

    # A real file cut short: its regions point past the end.
    killed = tmp_path / "killed"
    killed.mkdir()
    proc = start(build, ["wait"], killed)
    t.wait_for_line(proc, "ready")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    (real,) = flight_files(killed)
    cut = tmp_path / "cut.flight"
    with open(real, "rb") as f:
        cut.write_bytes(f.read(1 << 20))
    run = recover(build, cut)
    assert run.returncode == 2 and "truncated or damaged" in run.stderr, run.stderr
    assert not t.reports_in(str(tmp_path))


def test_vmm_allocations_are_in_the_file(build, tmp_path):
    # cuMemCreate'd memory (PyTorch's expandable segments, XLA) lives in the VMM table, which the
    # file keeps in place too: mapped, released while mapped, never mapped, and a slot that an
    # ended handle left and a later one took. The recovered report holds what a report taken
    # just before the kill did.
    proc = start(build, ["hold"], tmp_path, program="vmm_sequences", OOMSCOPE_EXIT_REPORT="0")
    held = None
    for line in proc.stdout:
        if line.startswith("checkpoint held "):
            held = line.split()[-1]
        if line.strip() == "ready":
            break
    assert held and os.path.exists(held), proc.stderr.read() if proc.poll() is not None else held
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    before = t.load(held)
    os.remove(held)
    rep = recovered(build, tmp_path)
    mib = 1 << 20
    device = [row for row in rep["memory"] if row["device"] == 0]
    assert len(device) == 1 and device[0]["tracked_bytes"] == 20 * mib, rep["memory"]
    assert device[0]["tracked_bytes"] == [r for r in before["memory"] if r["device"] == 0][0]["tracked_bytes"]
    assert rep["capture"]["live_allocations"] == 4
    assert sorted(s["bytes"] for s in rep["sites"]) == sorted(s["bytes"] for s in before["sites"])
    assert not any("VMM" in note for note in rep["capture"]["notes"]), rep["capture"]["notes"]
    stacks = {s["id"]: s for s in rep["stacks"]}
    symbols = {f.get("symbol", "") for site in rep["sites"] for f in stacks[site["stack"]]["frames"]}
    assert any("create(" in name for name in symbols), symbols
