"""The CLI: exit statuses, and one error line with status 2 for every kind of bad input."""
import json
import os
import subprocess

import pytest

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "v1")


def cli(build, *args, **kw):
    return subprocess.run([build.oomscope] + list(args), capture_output=True, text=True, timeout=60, **kw)


def valid_report():
    with open(os.path.join(FIXTURES, "fake-cuda-oom.json")) as f:
        return json.load(f)


def write(tmp_path, name, data):
    path = tmp_path / name
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data)
    return str(path)


BAD_INPUTS = {
    "empty": b"",
    "whitespace": b"   \n",
    "not-json": b"this is not json",
    "truncated": json.dumps(valid_report()).encode()[:500],
    "array": b"[1, 2, 3]",
    "other-json": b'{"hello": "world"}',
    "wrong-schema": json.dumps(dict(valid_report(), schema="oomscope.report/99")).encode(),
    "deep-nesting": b"[" * 200000 + b"]" * 200000,
    "huge-number": json.dumps(valid_report()).replace('"pid": ', '"pid": 1', 1).encode().replace(
        b'"pid":', b'"pid":123456789012345678901234567890,"x":', 1),
    "float-size": json.dumps(valid_report()).replace('"tracked_bytes":', '"tracked_bytes":1e400,"y":', 1).encode(),
    "negative-size": json.dumps(valid_report()).replace('"tracked_bytes":', '"tracked_bytes":-5,"y":', 1).encode(),
    "binary": bytes(range(256)) * 10,
    "missing-key": json.dumps({k: v for k, v in valid_report().items() if k != "memory"}).encode(),
}


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_bad_report_is_one_line_and_status_2(build, tmp_path, name):
    path = write(tmp_path, name + ".json", BAD_INPUTS[name])
    out = cli(build, "report", path)
    assert out.returncode == 2, (name, out.stdout, out.stderr)
    assert out.stdout == ""
    lines = out.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("oomscope: error: " + path)


def test_missing_file_and_directory(build, tmp_path):
    for path in (str(tmp_path / "nope.json"), str(tmp_path)):
        out = cli(build, "report", path)
        assert out.returncode == 2
        assert len(out.stderr.splitlines()) == 1
        assert out.stderr.startswith("oomscope: error: ")


@pytest.mark.parametrize("args", [[], ["frobnicate"], ["report"], ["report", "a.json", "--top", "x"],
                                  ["report", "a.json", "--color", "purple"], ["run"], ["run", "--"],
                                  ["run", "--bogus", "--", "true"]])
def test_usage_errors_are_status_2(build, args):
    out = cli(build, *args)
    assert out.returncode == 2, (args, out.stderr)
    assert out.stderr.startswith("oomscope: error: "), out.stderr
    assert len(out.stderr.splitlines()) == 1, out.stderr


def test_help_and_version(build):
    assert cli(build, "--help").returncode == 0
    out = cli(build, "--version")
    assert out.returncode == 0 and out.stdout.strip()


def test_every_v1_fixture_renders(build):
    for name in sorted(os.listdir(FIXTURES)):
        if name.endswith(".json"):
            out = cli(build, "report", os.path.join(FIXTURES, name))
            assert out.returncode == 0, (name, out.stderr)
            assert "Memory per device" in out.stdout


def test_run_keeps_the_exit_status(build, tmp_path):
    for status in (0, 1, 7):
        out = cli(build, "run", "-o", str(tmp_path), "--", "sh", "-c", f"exit {status}")
        assert out.returncode == status


def test_run_keeps_a_sanitizer_runtime_first_in_ld_preload(build, tmp_path):
    # ASan refuses to start unless its runtime is the first library: a user's preloaded
    # sanitizer runtimes stay in front, the preload goes right after them, the rest after it.
    from conftest import PRELOAD_FIRST
    given = ["/nonexistent/libasan.so.8", "/nonexistent/libclang_rt.tsan-x86_64.so", "/nonexistent/libother.so"]
    first = [PRELOAD_FIRST] if PRELOAD_FIRST else []
    env = dict(os.environ, LD_PRELOAD=":".join(first + given[:1]) + " " + ":".join(given[1:]))
    out = cli(build, "run", "-o", str(tmp_path), "--", "sh", "-c", 'printf "%s" "$LD_PRELOAD"', env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split(":") == first + given[:2] + [build.preload] + given[2:]


def test_run_reports_a_missing_program(build, tmp_path):
    out = cli(build, "run", "-o", str(tmp_path), "--", str(tmp_path / "no-such-program"))
    assert out.returncode == 127
    assert out.stderr.startswith("oomscope: error: run: cannot run")


def test_run_lists_the_reports_it_saw_appear(build, tmp_path):
    out = cli(build, "run", "-o", str(tmp_path), "--", build.program("leaky_oom_fake"), "2")
    assert out.returncode == 1
    listed = [l.split("oomscope:   ")[1] for l in out.stderr.splitlines() if l.startswith("oomscope:   ")]
    assert sorted(os.path.basename(p) for p in listed) == sorted(n for n in os.listdir(str(tmp_path)))
    assert len(listed) == 2  # oom and exit
