"""NCCL's memory by communicator, against the fake NCCL (tests/fakecuda/fake_nccl.cpp), which
allocates where NCCL does: at init and split from a job thread, at a communicator's first
collective from a proxy thread (inside a group: at its end), symmetric memory by CUDA VMM."""
import json
import os
import subprocess
import sys

import oomscope_testlib as t

MiB = 1 << 20
HERE = os.path.dirname(os.path.abspath(__file__))


def nccl_run(build, tmp_path, *args, **env):
    run = t.run_oomscope(build.oomscope, [build.program("nccl_comms"), *args], str(tmp_path),
                         env=dict({"FAKECUDA_CAPACITY": "1GiB"}, **env))
    assert run.returncode == 0, run.stdout + run.stderr
    return run


def test_each_communicator_has_its_bytes_at_init_and_at_its_first_collective(build, tmp_path):
    run = nccl_run(build, tmp_path, "destroy-world")
    printed = run.stdout.split()
    world, split, none = (int(printed[i], 16) if printed[i] != "(nil)" else 0 for i in (1, 3, 5))
    assert none == 0
    (path,) = run.reports["request"]
    rep = t.load(path)
    nccl = rep["nccl"]
    comms = {c["handle"]: c for c in nccl["communicators"]}
    # world, split, and the one made and destroyed; NCCL_SPLIT_NOCOLOR made none.
    assert len(comms) == 3 and world in comms and split in comms, comms
    w, s = comms[world], comms[split]
    (gone,) = [c for h, c in comms.items() if h not in (world, split)]
    for c, init, first in ((w, 12, 24), (s, 12, 24), (gone, 0, 0)):
        assert (c["init_bytes"], c["first_collective_bytes"], c["registration_bytes"]) == (init * MiB, first * MiB, 0), c
        assert (c["rank"], c["nranks"], c["device"]) == (0, 1, 0), c
    assert "parent" not in w and s["parent"] == world and "destroyed_ns" not in w
    assert gone["destroyed_ns"] >= gone["created_ns"]
    assert len({w["id"], s["id"], gone["id"]}) == 3 and all(len(c["id"]) == 16 for c in (w, s, gone))
    # Symmetric memory: the live ncclMemAlloc range, not the one freed; the program's own
    # buffer is not NCCL's; every NCCL byte is named.
    assert (nccl["symmetric_bytes"], nccl["symmetric_allocations"]) == (64 * MiB, 1)
    assert nccl["shared_bytes"] == 0 and nccl["other_bytes"] == 0
    row = t.memory_row(rep, 0)
    assert row["by_source"]["nccl"] == 2 * 36 * MiB + 64 * MiB and row["by_source"]["other"] == 8 * MiB
    text = subprocess.run([build.oomscope, "report", path, "--color", "never"], capture_output=True, text=True).stdout
    assert ("device 0 NCCL communicator %s (rank 0 of 1) 36.00 MiB: 12.00 MiB at init, 24.00 MiB at its first "
            "collective" % w["id"][:8]) in text, text
    assert "communicator %s (rank 0 of 1) 36.00 MiB: 12.00 MiB at its split" % s["id"][:8] in text
    assert "symmetric memory (ncclMemAlloc) 64.00 MiB in 1 allocation" in text
    # No wrapper of ours in any stack: NCCL's calls are the program's.
    for stack in rep["stacks"]:
        assert not any(rep["modules"][f["module"] - 1]["path"].endswith("liboomscope.so")
                       for f in stack["frames"] if f.get("module")), stack
    # The exit report, after the world communicator was destroyed: its memory is gone with it.
    exit_nccl = t.load(run.reports["exit"][0])["nccl"]
    exit_world = [c for c in exit_nccl["communicators"] if c["handle"] == world][0]
    assert exit_world["destroyed_ns"] and exit_world["init_bytes"] == exit_world["first_collective_bytes"] == 0


def test_the_nccl_hooks_pass_through_when_disabled(build, tmp_path):
    plain = subprocess.run([build.program("nccl_comms")], capture_output=True, text=True,
                           env=build.env(FAKECUDA_CAPACITY="1GiB"))
    run = t.run_oomscope(build.oomscope, [build.program("nccl_comms")], str(tmp_path),
                         env={"FAKECUDA_CAPACITY": "1GiB", "OOMSCOPE_DISABLE": "1"})
    assert run.returncode == plain.returncode == 0 and run.reports == {}
    assert run.stdout.split()[-1] == plain.stdout.split()[-1] == "dump"  # no report path from a disabled dump


def test_outside_framework_names_the_communicator_of_a_torch_job(build, tmp_path):
    # A PyTorch-shaped job reaching NCCL through ctypes (as vLLM's PyNccl does: dlsym of
    # libnccl.so.2), then an OOM: NCCL's share names its communicator and the variables.
    facts = str(tmp_path / "facts.json")
    env = {"PYTHONPATH": os.path.join(HERE, "fake_torch"), "FAKECUDA_LIB": build.fake_lib, "FAKECUDA_CAPACITY": "1GiB",
           "LD_LIBRARY_PATH": build.fake_lib, "FAKE_NCCL_INIT_BYTES": str(64 * MiB),
           "FAKE_NCCL_CONNECT_BYTES": str(96 * MiB)}
    run = t.run_oomscope(build.oomscope, [sys.executable, os.path.join(HERE, "torch_programs", "torch_scenarios.py"),
                                          "nccl", facts], str(tmp_path / "out"), env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert t.load(facts)["caught"]
    rep = run.only("oom")
    (comm,) = rep["nccl"]["communicators"]
    assert (comm["init_bytes"], comm["first_collective_bytes"]) == (64 * MiB, 96 * MiB), comm
    analysed = json.loads(subprocess.run([build.oomscope, "report", run.reports["oom"][0], "--format", "json"],
                                         capture_output=True, text=True, check=True).stdout)
    (outside,) = [d for d in analysed["diagnosis"] if d["code"] == "outside_framework"]
    assert "nccl 160.00 MiB" in outside["message"], outside
    assert ("communicator %s (rank 0 of 1) 160.00 MiB: 64.00 MiB at init, 96.00 MiB at its first collective"
            % comm["id"][:8]) in outside["suggestion"], outside
    assert "NCCL_MAX_NCHANNELS" in outside["suggestion"]
