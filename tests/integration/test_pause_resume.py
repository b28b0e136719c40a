"""Paused memory: address ranges unmapped and released while they stay reserved, to be mapped
again at the same addresses (torch_memory_saver, vLLM's sleep mode), are shown as paused — not
in use, not leaked — and a resume takes them back; PyTorch's expandable segments, which unmap
free pages for good in their reserved range, are not paused (examples/cuda/pause_resume.cu)."""
import json
import subprocess

import oomscope_testlib as t

MiB = 1 << 20
REGIONS, REGION_MIB = 4, 64


def reports_by_reason(run):
    out = {}
    for path in run.reports.get("request", []):
        rep = t.load(path)
        out[rep["trigger"]["message"].split(":")[0].strip()] = rep
    return out


def test_paused_regions_are_shown_and_taken_back_by_the_resume(build, tmp_path):
    run = t.run_oomscope(build.oomscope, [build.program("pause_resume_fake"), str(REGIONS), str(REGION_MIB)],
                         str(tmp_path), env={"FAKECUDA_CAPACITY": "4GiB"})
    assert run.returncode == 0, run.stdout + run.stderr
    free = {line.split(":")[0]: int(line.split()[-1]) for line in run.stdout.splitlines() if ": free " in line}
    reports = reports_by_reason(run)
    assert set(reports) == {"running", "paused", "resumed"}, list(reports)
    total = REGIONS * REGION_MIB * MiB
    # The driver gave the memory back while paused, and took it again at the resume.
    assert free["paused"] - free["running"] == total and free["resumed"] == free["running"]

    running, paused, resumed = reports["running"], reports["paused"], reports["resumed"]
    assert t.memory_row(running, 0)["tracked_bytes"] == total and "paused" not in running
    row = t.memory_row(paused, 0)
    assert row["tracked_bytes"] == 0 and row["paused_bytes"] == total, row
    assert len(paused["paused"]) == REGIONS
    for p in paused["paused"]:
        assert p["paused_bytes"] == p["reserved_bytes"] == REGION_MIB * MiB and p["device"] == 0
        assert any("allocateRegion" in f for f in t.frame_names(paused, p["stack"]))
    assert "paused_bytes" not in t.memory_row(resumed, 0) and "paused" not in resumed
    assert t.memory_row(resumed, 0)["tracked_bytes"] == total

    # The exit report is taken paused: shown, diagnosed, and no leak for `check`.
    (exit_path,) = run.reports["exit"]
    assert t.memory_row(t.load(exit_path), 0)["paused_bytes"] == total
    text = subprocess.run([build.oomscope, "report", exit_path, "--color", "never"], capture_output=True, text=True).stdout
    assert "device 0: %d.00 MiB paused in %d ranges" % (REGIONS * REGION_MIB, REGIONS) in text, text
    assert "paused_memory" in text and "allocateRegion" in text
    analysed = json.loads(subprocess.run([build.oomscope, "report", exit_path, "--format", "json"], capture_output=True,
                                         text=True).stdout)
    assert analysed["leaks"] == []
    assert [d["code"] for d in analysed["diagnosis"]] == ["paused_memory"]
    check = subprocess.run([build.oomscope, "check", exit_path], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def test_expandable_segments_releasing_pages_are_not_paused(build, tmp_path):
    run = t.run_oomscope(build.oomscope, [build.program("expandable_release"), "20", "8"], str(tmp_path))
    assert run.returncode == 0, run.stdout + run.stderr
    rep = run.only("exit")
    assert "paused" not in rep and "paused_bytes" not in t.memory_row(rep, 0)
    tl = rep["timeline"]
    kind = tl["columns"].index("kind")
    assert [r[kind] for r in tl["rows"]].count("segment_unmap") == 8  # the pages were unmapped, the range kept
