"""The OOM report of the example program, field by field, on the fake device."""
import json
import os
import subprocess

import oomscope_testlib as t

MiB = 1 << 20
CAPACITY = 1 << 30
CONTEXT = 32 * MiB


def run_example(build, tmp_path, steps=8):
    return t.run_oomscope(build.oomscope, [build.program("leaky_oom_fake"), str(steps)], str(tmp_path),
                          env={"FAKECUDA_CAPACITY": "1GiB"})


def test_one_oom_report_with_the_failed_request(build, tmp_path):
    run = run_example(build, tmp_path)
    assert run.returncode == 1, run.stderr
    assert run.count("oom") == 1
    rep = run.only("oom")
    printed = [l for l in run.stdout.splitlines() if l.startswith("final step:")][0]
    requested = int(printed.split("(")[1].split()[0])
    trig = rep["trigger"]
    assert trig["kind"] == "oom"
    assert trig["api"] == "cudaMalloc"
    assert trig["requested_bytes"] == requested
    assert trig["device"] == 0
    assert trig["error"] == 2
    assert trig["error_name"] == "cudaErrorMemoryAllocation"
    assert trig["framework"] is None
    assert "cudaMalloc of" in trig["message"]
    assert any("run_final_step" in f for f in t.frame_names(rep, trig["stack"]))
    # Counted for `oomscope metrics`: one episode, its one failed allocation; the exit report too.
    assert (rep["capture"]["oom_episodes"], rep["capture"]["failed_allocations"]) == (1, 1)
    exit_rep = run.only("exit")
    assert (exit_rep["capture"]["oom_episodes"], exit_rep["capture"]["failed_allocations"]) == (1, 1)


def test_tracked_bytes_equal_the_live_allocations(build, tmp_path):
    rep = run_example(build, tmp_path).only("oom")
    unit = (CAPACITY // 64) & ~0xFFFFF
    row = t.memory_row(rep, 0)
    # 12 units of weights and 8 leaked buffers of 2 units are live at the failure.
    assert row["tracked_bytes"] == 28 * unit
    assert row["tracked_bytes"] == t.live_sum(rep, 0)
    assert row["tracked_bytes"] == row["by_kind"]["device"]
    assert row["peak_tracked_bytes"] == 32 * unit  # with one step's activations
    dev = rep["devices"][0]
    assert dev["name"] == "oomscope fakecuda (simulated GPU)"
    assert dev["total_bytes"] == CAPACITY
    assert dev["free_bytes"] == CAPACITY - CONTEXT - 28 * unit
    assert row["untracked_bytes"] == CONTEXT
    assert row["by_source"]["other"] == 28 * unit
    assert row["by_source"]["untracked"] == CONTEXT


def test_another_process_on_the_card_is_not_this_ones_untracked_memory(build, tmp_path):
    # 200 MiB held by another process: in the device's free memory, not in this process's
    # (NVML's per-process list, devices[].process_bytes); without NVML, or where its list hides
    # the process (a PID namespace), the device's used memory stands in, and says so by absence.
    other = 200 * MiB
    for nvml, untracked in (("1", CONTEXT), ("0", CONTEXT + other), ("hidden", CONTEXT + other)):
        out = tmp_path / nvml
        run = t.run_oomscope(build.oomscope, [build.program("leaky_oom_fake"), "8"], str(out),
                             env={"FAKECUDA_CAPACITY": "1GiB", "FAKECUDA_OTHER_PROCESS_BYTES": "200MiB",
                                  "FAKECUDA_NVML": nvml})
        rep = run.only("oom")
        row, dev = t.memory_row(rep, 0), rep["devices"][0]
        tracked = row["tracked_bytes"]
        assert dev["free_bytes"] == CAPACITY - other - CONTEXT - tracked, (nvml, dev)
        assert row["untracked_bytes"] == untracked, (nvml, row)
        assert row["by_source"]["untracked"] == untracked
        if nvml == "1":
            assert dev["process_bytes"] == tracked + CONTEXT
        else:
            assert "process_bytes" not in dev, (nvml, dev)
        # The same at the first failure (the tracker asks the driver there too).
        first = [r for r in rep.get("at_first_failure") or [] if r["device"] == 0]
        assert not first or first[0]["untracked_bytes"] == untracked


def test_top_sites_name_the_programs_functions(build, tmp_path):
    rep = run_example(build, tmp_path).only("oom")
    top, second = rep["sites"][0], rep["sites"][1]
    assert top["count"] == 8 and second["count"] == 1
    assert top["bytes"] > second["bytes"]
    top_frames = t.frame_names(rep, top["stack"])
    assert "leak_step_buffer" in top_frames[0], top_frames
    assert any(f.startswith("main") for f in top_frames)
    assert "load_weights" in t.frame_names(rep, second["stack"])[0]
    # Frames carry module, build id and offset.
    module_ids = {f["module"] for f in t.stack(rep, top["stack"])["frames"]}
    paths = {m["id"]: m for m in rep["modules"]}
    exe = [paths[i] for i in module_ids if paths[i]["path"].endswith("leaky_oom_fake")][0]
    assert len(exe["build_id"]) >= 16


def test_timeline_ends_with_the_failure(build, tmp_path):
    rep = run_example(build, tmp_path, steps=3).only("oom")
    tl = rep["timeline"]
    rows = tl["rows"]
    kinds = [r[1] for r in rows]
    # weights, 3 x (activations, leak, free activations), then the failure
    assert kinds == ["alloc"] + ["alloc", "alloc", "free"] * 3 + ["alloc_failed"]
    assert rows[-1][9] == 2
    assert tl["pushed"] == len(rows) and tl["dropped"] == 0
    assert rep["capture"]["events_recorded"] == len(rows)


def test_small_ring_counts_what_it_dropped(build, tmp_path):
    run = t.run_oomscope(build.oomscope, [build.program("leaky_oom_fake"), "20"], str(tmp_path),
                         env={"OOMSCOPE_RING_EVENTS": "16"})
    rep = run.only("oom")
    tl = rep["timeline"]
    assert tl["capacity"] == 16
    assert len(tl["rows"]) == 16
    assert tl["pushed"] == 1 + 3 * 20 + 1
    assert tl["dropped"] + len(tl["rows"]) == tl["pushed"]


def test_stack_depth_is_bounded(build, tmp_path):
    run = t.run_oomscope(build.oomscope, [build.program("leaky_oom_fake"), "2"], str(tmp_path),
                         env={"OOMSCOPE_STACK_DEPTH": "2"})
    rep = run.only("oom")
    assert all(len(s["frames"]) <= 2 for s in rep["stacks"])
    assert rep["tool"]["options"]["stack_depth"] == "2"


def test_report_is_valid_against_the_json_schema(build, tmp_path):
    jsonschema = __import__("jsonschema")
    run = run_example(build, tmp_path)
    with open(os.path.join(build.source, "docs", "report.schema.json")) as f:
        schema = json.load(f)
    for paths in run.reports.values():
        for path in paths:
            jsonschema.validate(t.load(path), schema)


def test_cli_renders_the_oom_report(build, tmp_path):
    run = run_example(build, tmp_path)
    path = run.reports["oom"][0]
    out = subprocess.run([build.oomscope, "report", path, "--top", "2", "--events", "3"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert text.startswith("OUT OF MEMORY on device 0 (oomscope fakecuda (simulated GPU))")
    assert "request   cudaMalloc of" in text
    assert "error     cudaErrorMemoryAllocation (2)" in text
    assert "leak_step_buffer" in text and "load_weights" in text
    assert "Last events before the trigger" in text
    assert "\033[" not in text  # not a terminal: no colour
    # The memory table: tracked / untracked / free / total for device 0.
    header = [l for l in text.splitlines() if l.strip().startswith("device  name")][0]
    for column in ("tracked", "untracked", "free", "total"):
        assert column in header


PEAK_PROGRAM = """import ctypes, os
rt = ctypes.CDLL(os.path.join(os.environ["FAKECUDA_LIB"], "libcudart.so.13"))
kept = []
def weights():
    p = ctypes.c_void_p()
    rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(32 << 20))
    kept.append(p)
def activations():
    ps = []
    for i in range(8):
        p = ctypes.c_void_p()
        rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(32 << 20))  # THE-PEAK
        ps.append(p)
    for p in ps:
        rt.cudaFree(p)
weights()
activations()
"""


def test_the_exit_report_names_what_made_the_peak_although_it_was_freed(build, tmp_path):
    script = tmp_path / "peak.py"
    script.write_text(PEAK_PROGRAM)
    import sys
    r = t.run_oomscope(build.oomscope, [sys.executable, str(script)], str(tmp_path / "out"),
                       env={"FAKECUDA_LIB": build.fake_lib})
    assert r.returncode == 0, r.stderr
    rep = r.only("exit")
    [row] = rep["memory"]
    assert row["tracked_bytes"] == 32 * MiB and row["peak_tracked_bytes"] == 288 * MiB
    peak = row["peak"]
    assert peak["bytes"] == 288 * MiB and peak["by_source"]["other"] == 288 * MiB
    top = peak["sites"][0]
    assert top["bytes"] == 256 * MiB
    python = [f for f in t.stack(rep, top["stack"])["frames"] if f["kind"] == "python"]
    assert python[0]["function"] == "activations" and python[0]["line"] == 12, python
    text = subprocess.run([build.oomscope, "report", r.reports["exit"][0]], capture_output=True, text=True).stdout
    assert "At the peak" in text and f"256.00 MiB  {script}:12 activations" in text, text
