"""The pytest plugin (oomscope.pytest_plugin) on the fake CUDA: a test over its
limit_gpu_memory fails naming its line, one under passes, a leaking test fails, the same with
pytest-xdist's two workers; without the preload the markers warn that they are not enforced;
a size that is not one is a usage error."""
import os
import subprocess
import sys

TESTS = """import ctypes, os
import pytest
rt = ctypes.CDLL(os.path.join(os.environ["FAKECUDA_LIB"], "libcudart.so.13"))
kept = []
def alloc(n):
    p = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n)) == 0
    return p
@pytest.mark.limit_gpu_memory("64MiB")
def test_over():
    ps = [alloc(32 << 20) for _ in range(4)]
    for p in ps:
        rt.cudaFree(p)
@pytest.mark.limit_gpu_memory("64MiB")
def test_under():
    rt.cudaFree(alloc(32 << 20))
@pytest.mark.limit_gpu_leaks("16MiB")
def test_leaks():
    kept.append(alloc(32 << 20))
@pytest.mark.limit_gpu_leaks("16MiB")
def test_no_leak():
    rt.cudaFree(alloc(32 << 20))
"""


def pytest_run(build, tmp_path, *args, preload=True, tests=TESTS):
    path = tmp_path / "test_budgets.py"
    path.write_text(tests)
    env = dict(build.env(), FAKECUDA_LIB=build.fake_lib, LD_LIBRARY_PATH=build.fake_lib)
    env.pop("PYTEST_ADDOPTS", None)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", *args, str(path)]
    if preload:
        cmd = [build.oomscope, "run", "-o", str(tmp_path / "out"), "--"] + cmd
    else:
        env["PYTHONPATH"] = os.path.join(build.dir, "share", "oomscope", "python")
        cmd[3:3] = ["-p", "oomscope.pytest_plugin"]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, cwd=str(tmp_path)), path


def outcomes(stdout):
    return {line.split()[1].split("::")[1]: line.split()[0] for line in stdout.splitlines()
            if line.startswith(("FAILED ", "PASSED ", "ERROR "))}


def test_budgets_fail_the_tests_over_them_naming_the_line(build, tmp_path):
    r, path = pytest_run(build, tmp_path, "-rA")
    assert r.returncode == 1, r.stdout + r.stderr
    assert outcomes(r.stdout) == {"test_over": "FAILED", "test_under": "PASSED", "test_leaks": "FAILED",
                                  "test_no_leak": "PASSED"}, r.stdout
    assert "peak GPU memory 128.00 MiB exceeds limit_gpu_memory 64.00 MiB" in r.stdout, r.stdout
    # The site of the peak: the helper's line and the test's line that called it.
    # All four allocations: the first one too has its Python lines (the plugin imported oomscope,
    # which had the preload learn the frame layout with the GIL held).
    assert f"128.00 MiB  {path}:7 alloc <- {path}:11 test_over" in r.stdout, r.stdout
    assert "32.00 MiB of GPU memory still allocated after the test, over limit_gpu_leaks 16.00 MiB" in r.stdout
    assert f"{path}:19 test_leaks" in r.stdout, r.stdout
    assert "oomscope report: " in r.stdout


def test_each_xdist_worker_measures_its_own_tests(build, tmp_path):
    r, _ = pytest_run(build, tmp_path, "-rA", "-n", "2")
    assert r.returncode == 1, r.stdout + r.stderr
    assert outcomes(r.stdout) == {"test_over": "FAILED", "test_under": "PASSED", "test_leaks": "FAILED",
                                  "test_no_leak": "PASSED"}, r.stdout
    assert "exceeds limit_gpu_memory" in r.stdout and "over limit_gpu_leaks" in r.stdout, r.stdout


def test_without_the_preload_the_markers_say_they_are_not_enforced(build, tmp_path):
    r, _ = pytest_run(build, tmp_path, preload=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "4 passed" in r.stdout and "NOT enforced" in r.stdout, r.stdout
    assert r.stdout.count("NOT enforced") == 1, r.stdout


def test_a_size_that_is_not_one_is_a_usage_error(build, tmp_path):
    r, _ = pytest_run(build, tmp_path, tests=TESTS.replace('"64MiB"', '"64 megs"', 1))
    assert r.returncode == 4, r.stdout + r.stderr
    assert "not a size: '64 megs'" in r.stderr + r.stdout, r.stdout + r.stderr
