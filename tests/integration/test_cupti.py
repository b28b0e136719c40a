"""The CUPTI backend against the fake libcupti: what CUPTI sees that no hook recorded is counted
and recorded once; the program's own profiler always gets CUPTI's one subscriber slot; absent,
too old or switched-off CUPTI is at most one notice; CUDA_INJECTION64_PATH alone records a
program whose runtime is linked statically, out-of-memory included."""
import os
import subprocess

import oomscope_testlib as t

MiB = 1 << 20


def one_report(tmp_path, kind="exit"):
    paths = t.reports_in(str(tmp_path)).get(kind, [])
    assert len(paths) == 1, t.reports_in(str(tmp_path))
    return t.load(paths[0])


def allocs(rep):
    return [r for r in rep["timeline"]["rows"] if r[1] == "alloc"]


def oomscope_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith("oomscope:")]


def test_what_the_hooks_missed_is_counted_listed_and_recorded_once(build, tmp_path):
    run = build.preloaded([build.program("cupti_neighbour"), "missed"], str(tmp_path), OOMSCOPE_QUIET="1")
    assert run.returncode == 0, run.stderr
    assert "whole domain" not in run.stderr  # memory callback ids only
    rep = one_report(tmp_path)
    cov = rep["capture"]["coverage"]
    assert cov["cupti"] == "active" and cov["library"].endswith("libcupti.so.13")
    assert rep["capture"]["backends"] == ["interpose", "cupti"]
    # The second cudaMalloc ran with CUPTI subscribed, inside the hook: confirmed, not missed.
    assert cov["confirmed"] == 1
    assert cov["missed"] == 1 and cov["missed_bytes"] == 3 * MiB
    (missed,) = cov["missed_allocations"]
    assert missed["api"] == "cuMemAlloc_v2" and missed["size"] == 3 * MiB and missed["device"] == 0
    assert "main" in t.frame_names(rep, missed["stack"])
    # Recorded once each: two through the hooks, one through CUPTI.
    assert sorted(r[6] for r in allocs(rep)) == ["cuMemAlloc_v2", "cudaMalloc", "cudaMalloc"]
    assert t.memory_row(rep, 0)["tracked_bytes"] == 6 * MiB

    shown = subprocess.run([build.oomscope, "report", one_path(tmp_path)], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    assert "warning: CUPTI saw 1 allocation (3.00 MiB) that no hook recorded" in shown.stdout


def one_path(tmp_path):
    (path,) = [p for paths in t.reports_in(str(tmp_path)).values() for p in paths]
    return path


def test_a_static_runtime_call_whose_driver_call_was_hooked_is_not_missed(build, tmp_path):
    # Seen on the H200: cuBLAS, XLA and nvcc programs carry the runtime statically; CUPTI
    # reports their cudaMalloc, our cuMemAlloc_v2 wrapper (reached through cuGetProcAddress)
    # records it. Counted as confirmed, recorded once; the free likewise.
    run = build.preloaded([build.program("cupti_neighbour"), "static"], str(tmp_path), OOMSCOPE_QUIET="1")
    assert run.returncode == 0, run.stderr
    rep = one_report(tmp_path)
    cov = rep["capture"]["coverage"]
    assert cov["missed"] == 0 and cov["confirmed"] == 3, cov
    rows = rep["timeline"]["rows"]
    assert sorted(r[6] for r in rows if r[1] == "alloc") == ["cuMemAlloc_v2", "cuMemAlloc_v2", "cudaMalloc", "cudaMalloc"]
    assert [r[6] for r in rows if r[1] == "free"] == ["cuMemFree_v2"]
    assert t.memory_row(rep, 0)["tracked_bytes"] == (1 + 5 + 2) * MiB
    assert rep["capture"]["unknown_frees"] == 0


def test_the_programs_profiler_gets_the_slot_when_it_subscribes_later(build, tmp_path):
    plain = subprocess.run([build.program("cupti_neighbour"), "yield"], capture_output=True, text=True, env=build.env())
    run = build.preloaded([build.program("cupti_neighbour"), "yield"], str(tmp_path), OOMSCOPE_QUIET="1")
    assert run.returncode == 0, run.stderr
    # The program's subscription succeeds and its callbacks (entry and exit) all arrive.
    assert run.stdout == plain.stdout == "subscribe 0\nprogram callbacks 2\n"
    rep = one_report(tmp_path)
    assert rep["capture"]["coverage"]["cupti"] == "yielded"
    assert any("yielded" in n for n in rep["capture"]["notes"])
    assert len(allocs(rep)) == 2  # the hooks go on recording


def test_a_profiler_that_subscribed_first_keeps_the_slot(build, tmp_path):
    run = build.preloaded([build.program("cupti_neighbour"), "first"], str(tmp_path), OOMSCOPE_QUIET="1")
    assert run.returncode == 0, run.stderr
    assert run.stdout == "subscribe 0\nprogram callbacks 4\n"
    rep = one_report(tmp_path)
    assert rep["capture"]["coverage"]["cupti"] == "busy"
    assert rep["capture"]["backends"] == ["interpose"]
    assert len(allocs(rep)) == 2


def test_absent_cupti_is_one_notice_and_changes_nothing_else(build, tmp_path):
    plain = subprocess.run([build.program("cupti_neighbour"), "missed"], capture_output=True, text=True, env=build.env())
    run = build.preloaded([build.program("cupti_neighbour"), "missed"], str(tmp_path), OOMSCOPE_QUIET="1",
                          OOMSCOPE_CUPTI_LIB=str(tmp_path / "missing" / "libcupti.so.13"))
    assert run.returncode == plain.returncode == 0
    assert run.stdout == plain.stdout
    notices = oomscope_lines(run.stderr)
    assert len(notices) == 1 and "no libcupti found" in notices[0], run.stderr
    rep = one_report(tmp_path)
    cov = rep["capture"]["coverage"]
    assert cov["cupti"] == "absent" and cov["library"] == "" and cov["missed"] == 0
    assert [r[6] for r in allocs(rep)] == ["cudaMalloc", "cudaMalloc"]  # the hooks alone


def test_too_old_cupti_is_one_notice(build, tmp_path):
    run = build.preloaded([build.program("cupti_neighbour"), "missed"], str(tmp_path), OOMSCOPE_QUIET="1",
                          FAKECUPTI_VERSION="11")
    assert run.returncode == 0, run.stderr
    notices = oomscope_lines(run.stderr)
    assert len(notices) == 1 and "too old" in notices[0], run.stderr
    assert one_report(tmp_path)["capture"]["coverage"]["cupti"] == "too_old"


def test_cupti_off(build, tmp_path):
    run = build.preloaded([build.program("cupti_neighbour"), "missed"], str(tmp_path), OOMSCOPE_QUIET="1",
                          OOMSCOPE_CUPTI="off")
    assert run.returncode == 0 and oomscope_lines(run.stderr) == [], run.stderr
    rep = one_report(tmp_path)
    assert rep["capture"]["coverage"]["cupti"] == "off" and rep["tool"]["options"]["cupti"] == "off"
    assert len(allocs(rep)) == 2


def test_injection_alone_records_a_static_runtime_program_and_its_oom(build, tmp_path):
    # static_style links no CUDA library: the driver is reached through dlopen + cuGetProcAddress.
    env = build.env(CUDA_INJECTION64_PATH=build.preload, OOMSCOPE_OUTPUT_DIR=str(tmp_path), OOMSCOPE_QUIET="1")
    run = subprocess.run([build.program("static_style")], capture_output=True, text=True, env=env)
    assert run.returncode == 1 and "= 2" in run.stdout  # the program's own OOM, unchanged
    oom = one_report(tmp_path, "oom")
    assert oom["capture"]["backends"] == ["cupti"]
    assert oom["trigger"]["api"] == "cuMemAlloc_v2" and oom["trigger"]["error_name"] == "CUDA_ERROR_OUT_OF_MEMORY"
    assert "static_final_step" in " ".join(t.frame_names(oom, oom["trigger"]["stack"]))
    assert len(allocs(oom)) == 9  # weights + eight leaked steps
    assert t.memory_row(oom, 0)["tracked_bytes"] == sum(r[4] for r in allocs(oom))
    assert "static_load_weights" in " ".join(t.frame_names(oom, allocs(oom)[0][7]))


def test_run_via_inject(build, tmp_path):
    run = t.run_oomscope_via(build.oomscope, [build.program("static_style")], str(tmp_path), via="inject")
    assert run.proc.returncode == 1
    assert set(run.reports) == {"oom", "exit"}
    assert t.load(run.reports["oom"][0])["capture"]["backends"] == ["cupti"]
    shown = subprocess.run([build.oomscope, "report", run.reports["oom"][0]], capture_output=True, text=True)
    assert "capture through CUPTI callbacks (active): 9 allocations" in shown.stdout


def test_run_via_inject_never_replaces_another_injection(build, tmp_path):
    env = dict(os.environ, CUDA_INJECTION64_PATH="/opt/other/libtool.so")
    run = subprocess.run([build.oomscope, "run", "--via=inject", "-o", str(tmp_path), "--", "true"],
                         capture_output=True, text=True, env=env)
    assert run.returncode == 2
    assert "CUDA_INJECTION64_PATH is already set" in run.stderr


def test_injection_with_oomscope_disabled_records_nothing(build, tmp_path):
    env = build.env(CUDA_INJECTION64_PATH=build.preload, OOMSCOPE_OUTPUT_DIR=str(tmp_path), OOMSCOPE_DISABLE="1")
    run = subprocess.run([build.program("static_style")], capture_output=True, text=True, env=env)
    assert run.returncode == 1 and run.stderr == ""
    assert os.listdir(str(tmp_path)) == []
