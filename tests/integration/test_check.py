"""oomscope check / diff / run --check against the fake CUDA: leaks named, steady loops passed,
exit statuses 0/1/2, JUnit XML."""
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import oomscope_testlib as t

HERE = os.path.dirname(os.path.abspath(__file__))
SCENARIOS = os.path.join(HERE, "torch_programs", "torch_scenarios.py")
FAKE_TORCH = os.path.join(HERE, "fake_torch")


def oomscope(build, *args, cwd=None):
    return subprocess.run([build.oomscope, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def step_loop(build, tmp_path, mode, steps, *check_args):
    out = tmp_path / mode
    out.mkdir()
    r = oomscope(build, "run", "-o", str(out), *check_args, "--", build.program("step_loop"), mode, str(steps))
    reports = sorted(str(p) for p in out.glob("oomscope-*.json"))
    return r, reports


def test_a_leaking_loop_fails_run_check_naming_the_function(build, tmp_path):
    junit = tmp_path / "junit.xml"
    r, reports = step_loop(build, tmp_path, "leaky", 40, "--check", "--junit", str(junit))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "FAIL  leak" in r.stdout
    assert "+2.00 MiB per step over 30 steps" in r.stdout, r.stdout
    assert "keep_step_history" in r.stdout, r.stdout
    assert "oomscope check: FAIL" in r.stdout
    # JUnit XML: well-formed, one failed test case naming the function.
    root = ET.parse(junit).getroot()
    assert root.tag == "testsuites" and root.get("failures") == "1"
    [case] = root.iter("testcase")
    assert case.get("name") == "leak"
    failure = case.find("failure")
    assert failure is not None and "keep_step_history" in failure.text
    assert len(reports) == 1


def test_the_fixed_loop_passes_over_200_steps(build, tmp_path):
    r, reports = step_loop(build, tmp_path, "steady", 200, "--check")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PASS  leak          no growth across 200 steps" in r.stdout
    # The same report through oomscope check directly.
    c = oomscope(build, "check", reports[0])
    assert c.returncode == 0 and "oomscope check: PASS" in c.stdout


def test_check_exit_statuses(build, tmp_path):
    _, leaky = step_loop(build, tmp_path, "leaky", 40)
    _, steady = step_loop(build, tmp_path, "steady", 40)
    assert oomscope(build, "check", steady[0]).returncode == 0
    assert oomscope(build, "check", steady[0], leaky[0]).returncode == 1
    # peak: the steady loop holds 32 MiB of work + 32 MiB of state at most.
    assert oomscope(build, "check", steady[0], "--max-peak", "1GiB").returncode == 0
    r = oomscope(build, "check", steady[0], "--max-peak", "16MiB")
    assert r.returncode == 1 and "FAIL  peak" in r.stdout, r.stdout
    # growth against a baseline: the leaky run's peak is higher.
    r = oomscope(build, "check", leaky[0], "--fail-on", "growth", "--baseline", steady[0], "--max-growth", "1MiB")
    assert r.returncode == 1 and "FAIL  growth" in r.stdout, r.stdout
    # Usage and input errors: one line on stderr, status 2.
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")
    for args in (["check"], ["check", str(tmp_path / "missing.json")], ["check", str(bad)],
                 ["check", steady[0], "--max-peak", "12XB"], ["check", steady[0], "--fail-on", "nonsense"],
                 ["check", steady[0], "--fail-on", "peak"], ["check", steady[0], "--baseline", steady[0]],
                 ["check", steady[0], "--max-fragmentation", "140"], ["diff", steady[0]]):
        r = oomscope(build, *args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("oomscope: error:"), (args, r.stderr)


def test_a_loop_without_step_events_is_followed_by_periodic_samples(build, tmp_path):
    out = tmp_path / "unmarked"
    r = subprocess.run([build.oomscope, "run", "-o", str(out), "--check", "--", build.program("step_loop"), "unmarked"],
                       capture_output=True, text=True, timeout=120,
                       env=dict(build.env(), OOMSCOPE_SAMPLE_MS="2"))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "keep_step_history" in r.stdout and "per step over" in r.stdout, r.stdout
    [path] = out.glob("oomscope-*-exit.json")
    rep = t.load(path)
    assert len(rep["steps"]) >= 10 and {s["source"] for s in rep["steps"]} == {"sample"}
    # Without samples there is nothing to follow: only what is left at exit.
    quiet = subprocess.run([build.oomscope, "run", "-o", str(tmp_path / "off"), "--check", "--",
                            build.program("step_loop"), "unmarked"], capture_output=True, text=True, timeout=120,
                           env=dict(build.env(), OOMSCOPE_SAMPLE_MS="0"))
    assert "never freed before exit" in quiet.stdout, quiet.stdout


def test_step_events_replace_the_samples_taken_before_them(build, tmp_path):
    # Seen on the H200: a model load longer than OOMSCOPE_SAMPLE_MS left a sample in front of
    # the optimizer steps. Steps are one per step event, numbered from 1.
    out = tmp_path / "load"
    r = subprocess.run([build.oomscope, "run", "-o", str(out), "--", build.program("step_loop"), "load-then-steps"],
                       capture_output=True, text=True, timeout=120, env=dict(build.env(), OOMSCOPE_SAMPLE_MS="1"))
    assert r.returncode == 0, r.stderr
    [path] = out.glob("oomscope-*-exit.json")
    steps = t.load(path)["steps"]
    assert [s["index"] for s in steps] == list(range(1, 11)), [(s["index"], s["source"]) for s in steps]
    assert {s["source"] for s in steps} == {"step"}


def test_the_programs_failure_wins_over_the_check(build, tmp_path):
    r = oomscope(build, "run", "-o", str(tmp_path), "--check", "--", sys.executable, "-c", "raise SystemExit(3)")
    assert r.returncode == 3, r.stderr
    assert "no report to check" in r.stderr


def test_error_exitcode_tells_findings_from_the_programs_failure(build, tmp_path):
    r, _ = step_loop(build, tmp_path, "leaky", 40, "--check", "--error-exitcode", "42")
    assert r.returncode == 42, r.stdout + r.stderr
    r, _ = step_loop(build, tmp_path, "steady", 40, "--check", "--error-exitcode", "42")
    assert r.returncode == 0, r.stdout + r.stderr
    r = oomscope(build, "run", "-o", str(tmp_path), "--check", "--error-exitcode", "42", "--", sys.executable, "-c",
                 "raise SystemExit(3)")
    assert r.returncode == 3, r.stderr  # no findings: the program's own status
    for bad in (["--error-exitcode", "0", "--check"], ["--error-exitcode", "300", "--check"], ["--error-exitcode", "7"]):
        r = oomscope(build, "run", "-o", str(tmp_path), *bad, "--", "true")
        assert r.returncode == 2 and r.stderr.count("\n") == 1, (bad, r.stderr)


def test_the_analysis_comes_as_json_for_scripts_and_dashboards(build, tmp_path):
    import json
    jsonschema = __import__("jsonschema")
    with open(os.path.join(build.source, "docs", "report.schema.json")) as f:
        schema = json.load(f)
    _, leaky = step_loop(build, tmp_path, "leaky", 40)
    raw = t.load(leaky[0])
    # The preload's own file says that nobody analysed it yet, instead of an empty verdict.
    assert raw["analysis"] == "not run" and raw["leaks"] == [] and raw["diagnosis"] == []
    r = oomscope(build, "report", leaky[0], "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    jsonschema.validate(doc, schema)
    assert doc["analysis"].startswith("oomscope ")
    assert doc["leaks"] and doc["diagnosis"], doc["leaks"]
    assert any("keep_step_history" in json.dumps(leak) for leak in doc["leaks"]), doc["leaks"]
    # The analysed document reads back as a report: the text view of it says the same.
    analysed = tmp_path / "analysed.json"
    analysed.write_text(r.stdout)
    assert oomscope(build, "report", str(analysed)).stdout == oomscope(build, "report", leaky[0]).stdout
    # check --format json: the verdicts, the failed rule named.
    _, steady = step_loop(build, tmp_path, "steady", 40)
    c = oomscope(build, "check", steady[0], leaky[0], "--format", "json")
    assert c.returncode == 1, c.stderr
    verdicts = json.loads(c.stdout)
    assert verdicts["passed"] is False
    by_name = {rep["name"]: rep for rep in verdicts["reports"]}
    assert by_name[steady[0]]["passed"] is True and by_name[leaky[0]]["passed"] is False
    [failed] = [res for res in by_name[leaky[0]]["results"] if not res["passed"]]
    assert failed["rule"] == "leak" and any("keep_step_history" in d for d in failed["details"]), failed
    # A set of reports has no single JSON document: said, status 2.
    r = oomscope(build, "report", str(tmp_path / "leaky"), str(tmp_path / "steady"), "--format", "json")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr


def test_diff_sorts_sites_by_growth(build, tmp_path):
    _, leaky = step_loop(build, tmp_path, "leaky", 40)
    _, steady = step_loop(build, tmp_path, "steady", 40)
    r = oomscope(build, "diff", steady[0], leaky[0])
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    first_site = lines[lines.index(next(l for l in lines if l.startswith("Sites by growth"))) + 2]
    assert "+80.00 MiB" in first_site and "keep_step_history" in first_site, r.stdout


CHECKOUT_MAIN = """import ctypes, os
import mem
rt = ctypes.CDLL(os.path.join(os.environ["FAKECUDA_LIB"], "libcudart.so.13"))
kept = []
def weights():
    mem.make(32 << 20)
def buffers():
    mem.make(16 << 20)
def activations():
    p = ctypes.c_void_p()
    rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(SIZE << 20))  # ACTIVATIONS
    kept.append(p)
weights()
buffers()
activations()
"""
CHECKOUT_MEM = """import ctypes, os
rt = ctypes.CDLL(os.path.join(os.environ["FAKECUDA_LIB"], "libcudart.so.13"))
kept = []
def make(n):
    p = ctypes.c_void_p()
    rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n))
    kept.append(p)
"""


def test_diff_lines_up_two_checkouts_and_shows_only_the_change(build, tmp_path):
    # CI's case: the baseline's checkout and the change's, in two folders, one line changed.
    reports = []
    for name, size in (("baseline", 8), ("change", 24)):
        src = tmp_path / name / "src" / "proj"
        (src / "lib").mkdir(parents=True)
        (src / "train.py").write_text(CHECKOUT_MAIN.replace("SIZE", str(size)))
        (src / "lib" / "mem.py").write_text(CHECKOUT_MEM)
        env = dict(build.env(), FAKECUDA_LIB=build.fake_lib, PYTHONPATH=str(src / "lib"))
        out = tmp_path / name / "out"
        r = subprocess.run([build.oomscope, "run", "-o", str(out), "--", sys.executable, str(src / "train.py")],
                           capture_output=True, text=True, env=env, timeout=120)
        assert r.returncode == 0, r.stderr
        [report] = out.glob("oomscope-*-exit.json")
        reports.append(str(report))
    r = oomscope(build, "diff", *reports)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    start = lines.index("Sites by growth (live bytes at the trigger)") + 2
    rows = lines[start:]
    # One row: the changed line, in the change's checkout; the weights and buffers, reached
    # through mem.make by two callers, line up and are unchanged.
    assert len(rows) == 1, r.stdout
    assert "+16.00 MiB" in rows[0] and str(tmp_path / "change" / "src" / "proj" / "train.py") + ":11" in rows[0], r.stdout


def run_torch(build, tmp_path, mode, *check_args):
    out = tmp_path / mode
    env = dict(build.env(), PYTHONPATH=FAKE_TORCH, FAKECUDA_LIB=build.fake_lib, FAKECUDA_CAPACITY="1GiB",
               LD_LIBRARY_PATH=build.fake_lib)
    env.pop("OOMSCOPE_TORCH_HISTORY", None)
    return subprocess.run([build.oomscope, "run", "-o", str(out), *check_args, "--", sys.executable, SCENARIOS, mode,
                           str(tmp_path / f"{mode}.json")], capture_output=True, text=True, env=env, timeout=120)


def test_a_pytorch_style_leak_is_named_by_its_appending_line(build, tmp_path):
    # run --check turns PyTorch's history on: each step's live tensors by Python line.
    r = run_torch(build, tmp_path, "leak", "--check")
    assert r.returncode == 1, r.stdout + r.stderr
    with open(SCENARIOS) as f:
        line = next(i for i, text in enumerate(f, 1) if "LEAK-LINE" in text)
    assert f"{SCENARIOS}:{line}" in r.stdout, r.stdout
    assert "history.append(forward(1))" in r.stdout
    assert "tensors accumulated in a list across steps" in r.stdout
    assert "+1.00 MiB per step" in r.stdout
    steady = run_torch(build, tmp_path, "steady", "--check")
    assert steady.returncode == 0, steady.stdout + steady.stderr
