"""oomscope from Python: step boundaries, markers and reports for programs run under
`oomscope run` (or with liboomscope.so preloaded). Every function is a no-op returning None
when oomscope is not loaded, so the calls can stay in a training script.

    import oomscope
    for batch in loader:
        train_step(batch)
        oomscope.step()          # a step boundary (automatic with a torch optimizer)
    oomscope.mark("eval")        # a labelled point in the timeline
    oomscope.dump("after eval")  # a report now; returns its path
"""

import ctypes

__all__ = ["loaded", "step", "mark", "dump"]

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
            process.oomscope_framework_oom.restype = ctypes.c_char_p
            process.oomscope_framework_oom.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_ulonglong, ctypes.c_char_p]
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
    """Writes a report now; returns its path, or None."""
    lib = _native()
    if lib is None:
        return None
    path = lib.oomscope_dump(str(reason).encode())
    return path.decode() if path else None
