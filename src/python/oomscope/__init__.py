"""oomscope from Python: step boundaries, markers and reports for programs run under
`oomscope run` (or with liboomscope.so preloaded). Every function is a no-op returning None
when oomscope is not loaded, so the calls can stay in a training script.

    import oomscope
    for batch in loader:
        train_step(batch)
        oomscope.step()          # a step boundary (automatic with a torch optimizer)
    oomscope.mark("eval")        # a labelled point in the timeline
    oomscope.dump("after eval")  # a report now; returns its path
    oomscope.peak_reset(); run(); oomscope.peak(0)  # the most device 0 held during run()

GPU memory budgets for pytest: oomscope.pytest_plugin.

PYTEST_DONT_REWRITE: the package is imported before pytest starts (by the adapter's
sitecustomize), so pytest could not rewrite its asserts anyway; this says so, without a warning.
"""

import ctypes

__all__ = ["loaded", "step", "mark", "dump", "peak", "live", "peak_reset", "parse_size"]

MAX_DEVICES = 64

_lib = None


def _native():
    """The preload's C API, found in the process, or None."""
    global _lib
    if _lib is None:
        try:
            # PyDLL: the calls keep the GIL, so that the preload can read this thread's Python
            # frames (the line that stepped, or that ran out of memory).
            process = ctypes.PyDLL(None)
            process.oomscope_dump.restype = ctypes.c_char_p
            process.oomscope_dump.argtypes = [ctypes.c_char_p]
            process.oomscope_step.restype = None
            process.oomscope_step.argtypes = [ctypes.c_char_p]
            process.oomscope_mark.restype = None
            process.oomscope_mark.argtypes = [ctypes.c_char_p]
            process.oomscope_framework_attach.restype = ctypes.c_int
            process.oomscope_framework_attach.argtypes = [ctypes.c_char_p, ctypes.c_int]
            process.oomscope_oom_report_wanted.restype = ctypes.c_int
            process.oomscope_oom_report_wanted.argtypes = []
            if hasattr(process, "oomscope_framework_dump"):  # a preload older than this package has none
                process.oomscope_framework_dump.restype = ctypes.c_char_p
                process.oomscope_framework_dump.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p]
            process.oomscope_framework_oom.restype = ctypes.c_char_p
            process.oomscope_framework_oom.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_ulonglong, ctypes.c_char_p]
            for name in ("oomscope_peak", "oomscope_live"):
                getattr(process, name).restype = ctypes.c_ulonglong
                getattr(process, name).argtypes = [ctypes.c_int]
            process.oomscope_peak_reset.restype = None
            process.oomscope_peak_reset.argtypes = []
            # With the GIL held (PyDLL): the frame layout is learnt now, so that an allocation
            # made without the GIL (ctypes, CuPy) gets its Python lines from the first one on.
            process.oomscope_python_prepare.restype = None
            process.oomscope_python_prepare.argtypes = []
            process.oomscope_python_prepare()
            _lib = process
        except (OSError, AttributeError):
            _lib = False
    return _lib or None


def loaded():
    """True when liboomscope.so is in this process."""
    return _native() is not None


def step():
    """A training-step boundary: a timeline event and a memory sample of each device (with
    PyTorch's allocator counters when torch is in use)."""
    lib = _native()
    if lib is None:
        return None
    from oomscope import _torch_adapter
    state = _torch_adapter.step_state()
    lib.oomscope_step(state.encode() if state else None)
    return None


def mark(label):
    """A labelled marker in the timeline."""
    lib = _native()
    if lib is not None:
        lib.oomscope_mark(str(label).encode())


def dump(reason="requested"):
    """Writes a report now; returns its path, or None. In a PyTorch process it carries PyTorch's
    view as an OOM report does: allocated and reserved bytes, segments, pools, CUDA graphs."""
    lib = _native()
    if lib is None:
        return None
    from oomscope import _torch_adapter
    state = _torch_adapter.dump_state() if hasattr(lib, "oomscope_framework_dump") else None
    if state is not None:  # PyTorch's view: allocated, reserved, segments, pools, graphs
        path = lib.oomscope_framework_dump(str(reason).encode(), b"torch", state.encode())
    else:
        path = lib.oomscope_dump(str(reason).encode())
    return path.decode() if path else None


def peak(device=None):
    """The most device memory (bytes, every source that oomscope tracks) held at once since the
    last peak_reset() or the start: on one device, or the largest over all devices when device
    is None. None when oomscope is not loaded."""
    lib = _native()
    if lib is None:
        return None
    if device is not None:
        return int(lib.oomscope_peak(int(device)))
    return max(int(lib.oomscope_peak(d)) for d in range(MAX_DEVICES))


def live(device=None):
    """Device memory (bytes) held now: on one device, or the sum over all devices."""
    lib = _native()
    if lib is None:
        return None
    if device is not None:
        return int(lib.oomscope_live(int(device)))
    return sum(int(lib.oomscope_live(d)) for d in range(MAX_DEVICES))


def peak_reset():
    """Starts a new peak window on every device: peak() and the reports' "At the peak" count
    from now (the reports' peak_tracked_bytes stays the whole run's)."""
    lib = _native()
    if lib is not None:
        lib.oomscope_peak_reset()


_UNIT_POWERS = {"": 0, "b": 0}
for _power, _letter in enumerate("kmgt", start=1):
    for _suffix in ("", "i", "ib", "b"):
        _UNIT_POWERS[_letter + _suffix] = _power
_SIZE_GRAMMAR = ("a number and an optional unit, B, KiB, MiB, GiB or TiB (Ki, K and KB alike; powers of 1024), "
                 "e.g. 1.5GiB")
_SPACES = " \t\n\r\f\v"


def parse_size(text):
    """'8GiB', '512 MiB', '1.5GB', 1024 -> bytes, by oomscope's one size grammar (docs/sizes.md;
    the C++ side is src/common/size.cpp, and tests/fixtures/sizes.json holds both to one table):
    a number (digits, optionally '.' and up to 18 digits) and an optional unit in any case, B, K/Ki/KiB/KB,
    M..., G..., T... — every unit a power of 1024, as GPU memory is counted ('8GB' is 8 GiB); whole
    bytes, rounded down. ValueError, naming the grammar, for anything else."""
    if isinstance(text, int) and not isinstance(text, bool) and 0 <= text < 2**64:
        return text
    s = str(text).strip(_SPACES)
    i = 0
    while i < len(s) and s[i] in "0123456789":
        i += 1
    whole, fraction, digits = s[:i], "", 0
    if i < len(s) and s[i] == ".":
        j = i + 1
        while j < len(s) and s[j] in "0123456789":
            j += 1
        fraction, digits = s[i + 1:j], j - i - 1
        i = j
    unit = s[i:].strip(_SPACES)
    power = _UNIT_POWERS.get(unit.lower()) if unit.isascii() else None  # ASCII only, as in C++
    if not whole or (i > len(whole) and not 0 < digits <= 18) or power is None:
        raise ValueError(f"not a size: {text!r} ({_SIZE_GRAMMAR})")
    scale = 1 << (10 * power)
    value = int(whole) * scale + (int(fraction) * scale // 10**digits if digits else 0)
    if value >= 2**64:
        raise ValueError(f"not a size: {text!r} (more than 2^64 - 1 bytes)")
    return value


# At import, with the GIL held: the preload learns this interpreter's frame layout now (see
# _native), not at the first allocation made without the GIL.
_native()
