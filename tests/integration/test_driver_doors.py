"""Every door to the driver records exactly one event per allocation; VMM accounting in every
order; a refusal that is not out of memory starts no OOM episode; pools in the report."""
import collections
import glob
import os
import subprocess

import pytest

import oomscope_testlib as t

MiB = 1 << 20


def events(rep):
    return collections.Counter((r[1], r[6]) for r in rep["timeline"]["rows"])


@pytest.mark.parametrize("door", ["procaddr-v2", "procaddr-v1", "procaddr-self", "dlsym"])
def test_each_driver_door_records_each_allocation_once(build, tmp_path, door):
    run = build.preloaded([build.program("driver_doors"), door], str(tmp_path))
    assert run.returncode == 0, run.stderr
    assert f"door {door} allocs 6 frees 3" in run.stdout
    rep = run_report(tmp_path, "exit")
    assert events(rep) == {("alloc", "cuMemAlloc_v2"): 6, ("free", "cuMemFree_v2"): 3}
    assert t.memory_row(rep, 0)["tracked_bytes"] == (2 + 4 + 6) * MiB


def test_exported_driver_symbols(build, tmp_path):
    run = build.preloaded([build.program("driver_exported")], str(tmp_path))
    assert run.returncode == 0, run.stderr
    rep = run_report(tmp_path, "exit")
    assert events(rep) == {("alloc", "cuMemAlloc_v2"): 6, ("free", "cuMemFree_v2"): 3,
                           ("alloc", "cuMemHostAlloc"): 1, ("free", "cuMemFreeHost"): 1}


@pytest.mark.parametrize("door", ["by-version", "legacy"])
def test_runtime_entry_point_doors(build, tmp_path, door):
    run = build.preloaded([build.program("entry_point"), door], str(tmp_path))
    assert run.returncode == 0, run.stderr
    rep = run_report(tmp_path, "exit")
    assert events(rep) == {("alloc", "cuMemAlloc_v2"): 6, ("free", "cuMemFree_v2"): 3}


def test_runtime_calls_reaching_the_driver_wrapper_are_recorded_once(build, tmp_path):
    # The fake runtime takes its driver functions through our cuGetProcAddress_v2 (via our
    # dlsym door), so cudaMalloc runs through our cuMemAlloc_v2 wrapper too: still one event,
    # named after the outermost call.
    run = build.preloaded([build.program("runtime_apis")], str(tmp_path))
    rep = run_report(tmp_path, "exit")
    apis = {r[6] for r in rep["timeline"]["rows"]}
    assert "cudaMalloc" in apis
    assert not [a for a in apis if a.startswith("cuMem")], apis


def test_dlsym_rtld_next_keeps_the_callers_identity(build, tmp_path):
    # From the main program, RTLD_NEXT starts after the program: the first definition is the
    # preload's own cudaMalloc. Were the loader to see our dlsym as the caller (no tail call),
    # it would search after the preload and find the runtime's.
    run = build.preloaded([build.program("rtld_next")], str(tmp_path), OOMSCOPE_EXIT_REPORT="0")
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "liboomscope.so"
    plain = subprocess.run([build.program("rtld_next")], capture_output=True, text=True, env=build.env())
    assert plain.stdout.strip() == "libcudart.so.13"


VMM_EXPECTED = {
    "a1-created": (4, 0), "a2-mapped": (4, 1), "a3-unmapped": (4, 0), "a4-released": (0, 0),
    "b1-released-still-mapped": (4, 1), "b2-unmapped": (0, 0), "c1-released": (0, 0),
    "d1-released-mapped-twice": (2, 2), "d2-one-unmapped": (2, 1), "d3-both-unmapped": (0, 0),
    "e1-after-fabric": (0, 0),
}


def test_vmm_sequences_give_the_right_live_bytes(build, tmp_path):
    run = build.preloaded([build.program("vmm_sequences")], str(tmp_path), OOMSCOPE_EXIT_REPORT="0")
    assert run.returncode == 0, run.stderr
    assert "fabric 800" in run.stdout and "oom 2" in run.stdout
    seen = {}
    for path in glob.glob(os.path.join(str(tmp_path), "*request*.json")):
        rep = t.load(path)
        tracked = rep["memory"][0]["tracked_bytes"] if rep["memory"] else 0
        seen[rep["trigger"]["message"]] = (tracked // MiB, len(rep["segments"]))
        assert all(s["kind"] == "vmm" and s["device"] == 0 for s in rep["segments"])
    assert seen == VMM_EXPECTED


def test_refusal_800_is_not_an_oom_but_out_of_memory_is(build, tmp_path):
    build.preloaded([build.program("vmm_sequences")], str(tmp_path), OOMSCOPE_EXIT_REPORT="0")
    reports = t.reports_in(str(tmp_path))
    assert len(reports["oom"]) == 1  # only the create larger than the device
    rep = t.load(reports["oom"][0])
    assert rep["trigger"]["api"] == "cuMemCreate" and rep["trigger"]["error"] == 2
    assert rep["trigger"]["error_name"] == "CUDA_ERROR_OUT_OF_MEMORY"
    failed = [r for r in rep["timeline"]["rows"] if r[1] == "alloc_failed"]
    assert [r[9] for r in failed] == [800, 2]
    # The stack of the failing request is the program's create().
    assert t.frame_names(rep, rep["trigger"]["stack"])[0].startswith("main")


def test_static_runtime_style_program_leak_and_oom(build, tmp_path):
    run = build.preloaded([build.program("static_style")], str(tmp_path))
    assert run.returncode == 1
    rep = run_report(tmp_path, "oom")
    assert rep["trigger"]["api"] == "cuMemAlloc_v2"
    requested = int(run.stdout.split("cuMemAlloc(")[1].split()[0])
    assert rep["trigger"]["requested_bytes"] == requested
    unit = ((1 << 30) // 64) & ~0xFFFFF
    row = t.memory_row(rep, 0)
    assert row["tracked_bytes"] == 28 * unit == t.live_sum(rep, 0)
    assert "static_leak_step" in t.frame_names(rep, rep["sites"][0]["stack"])[0]


def test_stream_ordered_pools_in_the_report(build, tmp_path):
    run = build.preloaded([build.program("pools")], str(tmp_path), OOMSCOPE_EXIT_REPORT="0")
    assert run.returncode == 0, run.stderr
    rep = run_report(tmp_path, "request")
    rows = rep["timeline"]["rows"]
    assert [(r[1], r[6], r[4] // MiB) for r in rows] == [
        ("alloc", "cudaMallocAsync", 3), ("alloc", "cudaMallocAsync", 5), ("free", "cudaFreeAsync", 3),
        ("alloc", "cudaMallocFromPoolAsync", 7), ("pool_trim", "cuMemPoolTrimTo", 0)]
    assert all(r[5] != 0 for r in rows[:4])  # the stream
    assert t.memory_row(rep, 0)["tracked_bytes"] == 12 * MiB
    pools = rep["pools"]
    assert len(pools) == 1 and pools[0]["role"] == "default" and pools[0]["device"] == 0
    assert pools[0]["used_bytes"] == 12 * MiB
    assert pools[0]["reserved_bytes"] >= pools[0]["used_bytes"]


def test_disable_makes_the_doors_pass_through(build, tmp_path):
    run = build.preloaded([build.program("driver_doors"), "procaddr-v2"], str(tmp_path), OOMSCOPE_DISABLE="1")
    assert run.returncode == 0 and "allocs 6 frees 3" in run.stdout
    assert t.reports_in(str(tmp_path)) == {}


def run_report(tmp_path, kind):
    paths = t.reports_in(str(tmp_path)).get(kind, [])
    assert len(paths) == 1, t.reports_in(str(tmp_path))
    return t.load(paths[0])
