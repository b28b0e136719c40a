"""GPU memory budgets for pytest, measured by oomscope (every source: PyTorch, cuBLAS, NCCL,
JAX, CuPy, plain CUDA):

    @pytest.mark.limit_gpu_memory("8GiB")   # the test's peak device memory, on any device
    @pytest.mark.limit_gpu_leaks("16MiB")   # memory still held after the test (after gc)

Enabled by `oomscope run -- pytest ...`, or `pytest -p oomscope.pytest_plugin` with
liboomscope.so preloaded. Each pytest-xdist worker is a process of its own, measured on its own.
Without the preload the markers are not enforced, and pytest says so once (a warning), never a
silent pass.

The peak is the most device memory the process held at once during the test (PyTorch's cache
is emptied before the test, so that what earlier tests left cached does not count). The leak
is what the test left allocated: with PyTorch, torch.cuda.memory_allocated() after the test
against before it, both after gc.collect() (and with PyTorch's cuBLAS workspaces given back:
library state, not the test's); otherwise the device memory oomscope tracks. A
failure names the largest sites, with their lines, from a report written for it.
"""
import gc
import json
import sys
import warnings

import pytest

import oomscope

MARKERS = ("limit_gpu_memory", "limit_gpu_leaks")


class OomscopeNotLoaded(UserWarning):
    """The markers need the preload: this run does not enforce them."""


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "limit_gpu_memory(size): fail the test when the most GPU memory held at once during it "
        "(every source, measured by oomscope) exceeds size, e.g. '8GiB'")
    config.addinivalue_line(
        "markers", "limit_gpu_leaks(size): fail the test when it leaves more than size of GPU memory allocated "
        "(after gc), e.g. '16MiB'")
    config._oomscope_warned = False


def _limit(item, name):
    marker = item.get_closest_marker(name)
    if marker is None:
        return None
    if len(marker.args) != 1 or marker.kwargs:
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{name} takes one size, e.g. {name}(\"8GiB\")")
    try:
        return oomscope.parse_size(marker.args[0])
    except ValueError as e:
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{name}: {e}") from None


def _torch_cuda():
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            return torch.cuda
    except Exception:
        pass
    return None


def _settle(empty_cache):
    gc.collect()
    cuda = _torch_cuda()
    if cuda is not None:
        cuda.synchronize()
        # The cuBLAS workspaces PyTorch keeps per handle from a test's first matmul on are the
        # library's, not the test's: given back before each measure (as PyTorch's own leak check
        # does), else the first test to multiply "leaks" them.
        clear = getattr(sys.modules["torch"]._C, "_cuda_clearCublasWorkspaces", None)
        if clear is not None:
            clear()
        if empty_cache:
            cuda.empty_cache()


def _allocated():
    """What the program holds: PyTorch's allocated bytes where PyTorch is in use (its cache
    keeps freed memory from CUDA), plus what oomscope sees outside it otherwise."""
    cuda = _torch_cuda()
    if cuda is not None:
        return sum(cuda.memory_allocated(d) for d in range(cuda.device_count()))
    return oomscope.live()


def _label(report, stack_id):
    """The program's two innermost Python lines (a helper and its caller), else the first
    native frame outside CUDA."""
    stacks = {s["id"]: s for s in report.get("stacks", [])}
    modules = {m["id"]: m["path"] for m in report.get("modules", [])}
    frames = stacks.get(stack_id, {}).get("frames", [])
    program = [f"{f['file']}:{f['line']} {f['function']}" for f in frames
               if f["kind"] == "python" and "-packages/" not in f["file"] and not f["file"].startswith("<")]
    if program:
        return " <- ".join(program[:2])
    for f in frames:
        if f["kind"] == "native":
            path = modules.get(f.get("module"), "?")
            if "libcuda" in path or "liboomscope" in path or "libcudart" in path:
                continue
            return f"{f.get('symbol') or hex(f['offset'])} ({path.rsplit('/', 1)[-1]})"
    return "(no stack)"


def _sites(path, at_peak):
    """The largest sites of the report at path: at the peak (memory[].peak) or live now."""
    try:
        with open(path) as f:
            report = json.load(f)
    except (OSError, ValueError, TypeError):
        return []
    if at_peak:
        rows = [r["peak"] for r in report.get("memory", []) if r.get("peak")]
        rows.sort(key=lambda p: p["bytes"], reverse=True)
        sites = rows[0]["sites"] if rows else []
    else:
        sites = report.get("sites", [])
    return [(s["bytes"], _label(report, s["stack"])) for s in sites[:5]]


def _size(n):
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} bytes"


def pytest_collection_modifyitems(config, items):
    # A size that is not one stops the run at collection (pytest's usage error, status 4).
    for item in items:
        for name in MARKERS:
            _limit(item, name)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    memory_limit = _limit(item, "limit_gpu_memory")
    leak_limit = _limit(item, "limit_gpu_leaks")
    if memory_limit is None and leak_limit is None:
        yield
        return
    # The limits as enforced, in bytes, and below what was measured: JUnit XML's <properties>
    # (--junitxml), for CI dashboards.
    for name, limit in (("limit_gpu_memory_bytes", memory_limit), ("limit_gpu_leaks_bytes", leak_limit)):
        if limit is not None:
            item.user_properties.append((name, limit))
    if not oomscope.loaded():
        if not item.config._oomscope_warned:
            item.config._oomscope_warned = True
            warnings.warn(OomscopeNotLoaded(
                "oomscope is not loaded (run `oomscope run -- pytest ...` or preload liboomscope.so): "
                "limit_gpu_memory and limit_gpu_leaks are NOT enforced in this run"))
        yield
        return
    _settle(empty_cache=True)
    before = _allocated()
    oomscope.peak_reset()
    outcome = yield
    if outcome.excinfo is not None:
        return  # the test failed by itself
    problems = []
    peak = oomscope.peak()
    item.user_properties.append(("gpu_memory_peak_bytes", peak))
    at_peak = False
    if memory_limit is not None and peak > memory_limit:
        problems.append(f"peak GPU memory {_size(peak)} exceeds limit_gpu_memory {_size(memory_limit)}")
        at_peak = True
    if leak_limit is not None:
        _settle(empty_cache=False)
        leaked = _allocated() - before
        item.user_properties.append(("gpu_memory_left_bytes", leaked))
        if leaked > leak_limit:
            problems.append(f"{_size(leaked)} of GPU memory still allocated after the test, over limit_gpu_leaks "
                            f"{_size(leak_limit)}")
    if not problems:
        return
    message = "; ".join(problems)
    path = oomscope.dump(f"pytest {item.nodeid}: {message}")
    if path:
        sites = _sites(path, at_peak)
        if sites:
            message += "\n" + ("at the peak" if at_peak else "held now") + ", the largest sites:\n" + "\n".join(
                f"  {_size(b)}  {label}" for b, label in sites)
        message += f"\noomscope report: {path}"
    # Failed in the test's report (below), not by raising here: an exception out of a hook
    # wrapper's teardown is a warning of its own in newer pluggy.
    item._oomscope_failure = message


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    message = getattr(item, "_oomscope_failure", None)
    if message is None or call.when != "call":
        return
    report = outcome.get_result()
    if report.passed:
        report.outcome = "failed"
        report.longrepr = message
