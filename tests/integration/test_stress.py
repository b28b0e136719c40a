"""16 threads allocate through the preload and free each other's buffers: every event is
accounted for (recorded + dropped == pushed), nothing stays live, nothing deadlocks."""
import oomscope_testlib as t

THREADS = 16
PAIRS = 40000


def test_threads_freeing_each_others_buffers(build, tmp_path):
    run = build.preloaded([build.program("stress"), str(THREADS), str(PAIRS)], str(tmp_path), FAKECUDA_UNBACKED="1",
                          FAKECUDA_CAPACITY="64TiB", OOMSCOPE_EXIT_REPORT="0", OOMSCOPE_QUIET="1", OOMSCOPE_CUPTI="off",
                          OOMSCOPE_RING_EVENTS="256Ki")
    assert run.returncode == 0, run.stdout + run.stderr
    total = THREADS * PAIRS
    assert f"allocated {total} freed {total} failures 0" in run.stdout
    (path,) = t.reports_in(str(tmp_path))["request"]
    rep = t.load(path)
    tl = rep["timeline"]
    assert tl["pushed"] == 2 * total
    assert len(tl["rows"]) + tl["dropped"] == tl["pushed"]
    assert len(tl["rows"]) > tl["capacity"] * 9 // 10  # the ring's last lap, all but a few claimed slots
    assert rep["capture"]["live_allocations"] == 0
    assert t.memory_row(rep, 0)["tracked_bytes"] == 0
    assert rep["capture"]["unknown_frees"] == 0
    times = [r[0] for r in tl["rows"]]
    assert times == sorted(times)  # one order across threads


def test_fork_while_another_thread_is_in_a_hook(build, tmp_path):
    # Twenty children forked while a worker thread allocates without pause: none hangs (the
    # preload's locks are taken around fork), each writes its own exit report.
    forks = 20
    run = build.preloaded([build.program("fork_in_hook"), str(forks)], str(tmp_path), OOMSCOPE_QUIET="1",
                          OOMSCOPE_CUPTI="off", OOMSCOPE_RING_EVENTS="4Ki")
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"forks {forks} ok {forks}" in run.stdout
    reports = t.reports_in(str(tmp_path))["exit"]
    pids = {t.load(p)["process"]["pid"] for p in reports}
    assert len(reports) == forks + 1 and len(pids) == forks + 1
