"""Helpers for the GPU workloads: the driver's own view of free memory (through ctypes on
libcuda, on the primary context), and oomscope_dump when the preload is there."""
import ctypes
import json

_cuda = None


def _lib():
    global _cuda
    if _cuda is None:
        _cuda = ctypes.CDLL("libcuda.so.1")
        _cuda.cuInit(0)
    return _cuda


def driver_free(device=0):
    """(free, total) of the device, read on its primary context (created if needed and kept)."""
    cuda = _lib()
    dev = ctypes.c_int()
    ctx = ctypes.c_void_p()
    assert cuda.cuDeviceGet(ctypes.byref(dev), device) == 0
    assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
    assert cuda.cuCtxPushCurrent_v2(ctx) == 0
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    rc = cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
    popped = ctypes.c_void_p()
    cuda.cuCtxPopCurrent_v2(ctypes.byref(popped))
    assert rc == 0, rc
    return free.value, total.value


def dump(label):
    """A report now, if oomscope is loaded; its path or ''."""
    try:
        fn = ctypes.CDLL(None).oomscope_dump
    except AttributeError:
        return ""
    fn.restype = ctypes.c_char_p
    fn.argtypes = [ctypes.c_char_p]
    return fn(label.encode()).decode()


def write_facts(path, **facts):
    with open(path, "w") as f:
        json.dump(facts, f)
