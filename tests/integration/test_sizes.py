"""One size grammar (tests/fixtures/sizes.json) in the four places that read sizes: the CLI's
options (check --max-peak, run --device-limit), the preload's OOMSCOPE_DEVICE_LIMIT, the Python
adapter's oomscope.parse_size and the pytest markers. What the CLI accepts the preload honours:
`run --device-limit` hands the text on, and the fake card answers with that total."""
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

import oomscope_testlib as t

CAPACITY = 1 << 40  # the fake card: 1 TiB, so that most rows are limits below it
TABLE = json.load(open(os.path.join(os.path.dirname(__file__), "..", "fixtures", "sizes.json")))
SIZES = [tuple(r) for r in TABLE["sizes"]]
LIMITS = [tuple(r) for r in TABLE["limits"]] + [r for r in SIZES if "," not in r[0] and r[0] != "h200"]


def python_adapter(build):
    sys.path.insert(0, os.path.join(build.dir, "share", "oomscope", "python"))
    try:
        import oomscope
    finally:
        sys.path.pop(0)
    return oomscope


def test_the_python_adapter_reads_the_table(build):
    oomscope = python_adapter(build)
    for text, want in SIZES:
        if want is None:
            with pytest.raises(ValueError, match="not a size"):
                oomscope.parse_size(text)
        else:
            assert oomscope.parse_size(text) == want, text


def test_the_clis_size_options_read_the_table(build):
    fixture = os.path.join(build.source, "tests", "fixtures", "v1", "fake-cuda-exit.json")
    for text, want in SIZES:
        r = subprocess.run([build.oomscope, "check", fixture, "--max-peak", text, "--format", "json"],
                           capture_output=True, text=True, timeout=60)
        if want is None:
            assert r.returncode == 2, (text, r.stdout, r.stderr)
            assert r.stderr.count("\n") == 1 and "--max-peak wants a size" in r.stderr, (text, r.stderr)
        else:
            assert r.returncode in (0, 1), (text, r.stderr)
            [peak] = [c for c in json.loads(r.stdout)["reports"][0]["results"] if c["rule"] == "peak"]
            assert peak["limit_bytes"] == want, text


def card_total(r):
    """The total the program's cudaMemGetInfo saw."""
    line = next(l for l in r.stdout.splitlines() if l.startswith("runtime_info "))
    return int(line.split()[3])


def expected_total(want):
    return want if want <= CAPACITY else CAPACITY  # a limit above the card is dropped, said once


def limit_env(build, **extra):
    return build.env(FAKECUDA_CAPACITY=str(CAPACITY), OOMSCOPE_FLIGHT="0", OOMSCOPE_EXIT_REPORT="0", **extra)


def test_what_run_device_limit_accepts_the_preload_honours(build, tmp_path):
    for text, want in LIMITS:
        r = subprocess.run([build.oomscope, "run", "-o", str(tmp_path), "--device-limit", text, "--",
                            build.program("device_limit"), "query"], capture_output=True, text=True, timeout=60,
                           env=limit_env(build))
        if want is None or want == 0:
            assert r.returncode == 2, (text, r.stdout, r.stderr)
            assert r.stderr.count("\n") == 1 and "--device-limit" in r.stderr, (text, r.stderr)
        else:
            assert r.returncode == 0, (text, r.stderr)
            assert card_total(r) == expected_total(want), (text, r.stdout)
            assert "is not a size" not in r.stderr


def test_the_preloads_device_limit_reads_the_table(build, tmp_path):
    for text, want in LIMITS:
        r = build.preloaded([build.program("device_limit"), "query"], str(tmp_path), FAKECUDA_CAPACITY=str(CAPACITY),
                            OOMSCOPE_FLIGHT="0", OOMSCOPE_EXIT_REPORT="0", OOMSCOPE_DEVICE_LIMIT=text)
        assert r.returncode == 0, (text, r.stderr)
        if want is None or want == 0:
            # Refused: one line, and the program runs on the whole card ("0": no limit, silently).
            assert card_total(r) == CAPACITY, (text, r.stdout)
            assert ("is not a size" in r.stderr) == (want is None and text not in ("", "0")), (text, r.stderr)
        else:
            assert card_total(r) == expected_total(want), (text, r.stdout, r.stderr)


MARKED = """import pytest
{tests}
"""


def run_pytest(build, tmp_path, tests, *args, preload):
    path = tmp_path / "test_marked.py"
    path.write_text(MARKED.format(tests=tests))
    env = dict(build.env(), FAKECUDA_LIB=build.fake_lib, LD_LIBRARY_PATH=build.fake_lib)
    env.pop("PYTEST_ADDOPTS", None)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, str(path)]
    if preload:
        cmd = [build.oomscope, "run", "-o", str(tmp_path / "out"), "--"] + cmd
    else:
        env["PYTHONPATH"] = os.path.join(build.dir, "share", "oomscope", "python")
        cmd[3:3] = ["-p", "oomscope.pytest_plugin"]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, cwd=str(tmp_path))


def test_the_pytest_markers_read_the_table(build, tmp_path):
    good = [(text, want) for text, want in SIZES if want is not None]
    tests = "\n".join(f"@pytest.mark.limit_gpu_memory({text!r})\n@pytest.mark.limit_gpu_leaks({text!r})\n"
                      f"def test_{i}():\n    pass\n" for i, (text, _) in enumerate(good))
    junit = tmp_path / "junit.xml"
    r = run_pytest(build, tmp_path, tests, f"--junitxml={junit}", preload=True)
    assert r.returncode == 0, r.stdout + r.stderr
    enforced = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        props = {p.get("name"): int(p.get("value")) for p in case.iter("property")}
        enforced[int(case.get("name").split("_")[1])] = props
    for i, (text, want) in enumerate(good):
        assert enforced[i]["limit_gpu_memory_bytes"] == want, text
        assert enforced[i]["limit_gpu_leaks_bytes"] == want, text
        assert "gpu_memory_peak_bytes" in enforced[i], text  # measured: the preload was there
    for text, want in SIZES:
        if want is not None:
            continue
        r = run_pytest(build, tmp_path, f"@pytest.mark.limit_gpu_memory({text!r})\ndef test_bad():\n    pass\n",
                       preload=False)
        assert r.returncode == 4, (text, r.stdout + r.stderr)
        assert "limit_gpu_memory: not a size" in r.stdout + r.stderr, (text, r.stdout + r.stderr)
