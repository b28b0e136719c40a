import os

from torch.cuda import _allocator, memory  # noqa: F401
from torch.cuda._allocator import OutOfMemoryError  # noqa: F401

_initialized = False
_queued = []


def _lazy_call(callback):
    if _initialized:
        callback()
    else:
        _queued.append(callback)


def init():
    global _initialized
    if _initialized:
        return
    _allocator.ALLOCATOR.start()
    _initialized = True
    for callback in _queued:
        callback()
    _queued.clear()


def is_initialized():
    return _initialized


def current_device():
    return 0


def get_allocator_backend():
    return os.environ.get("FAKE_TORCH_BACKEND", "native")


from torch.cuda.memory import MemPool, use_mem_pool  # noqa: E402,F401  (re-exported, as PyTorch does)


def graph_pool_handle():
    # (0, n), from the MemPools' counter, as PyTorch numbers a handle.
    return (0, next(_allocator._mempool_ids))


from torch.cuda.graphs import CUDAGraph, graph  # noqa: E402,F401


def synchronize(device=None):
    capture = getattr(_allocator._capture, "graph", None)
    if capture is not None:  # as the real call: not allowed while a stream captures, and it breaks the capture
        capture._invalidated = True
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing")


def memory_stats(device=None):
    return _allocator.ALLOCATOR.stats()


def memory_reserved(device=None):
    return _allocator.ALLOCATOR.stats()["reserved_bytes.all.current"]


def memory_allocated(device=None):
    return _allocator.ALLOCATOR.stats()["allocated_bytes.all.current"]


def empty_cache():
    _allocator.ALLOCATOR.empty_cache()


def set_per_process_memory_fraction(fraction, device=None):
    init()
    _allocator.ALLOCATOR.fraction = fraction


def mem_get_info(device=None):
    init()
    return _allocator.ALLOCATOR.mem_get_info()


# FAKE_TORCH_DROP=name[,name]: a torch.cuda without these (an older or newer release), for the
# adapter's "turn off with one notice" path.
def _drop_api():
    import os
    for name in filter(None, os.environ.get("FAKE_TORCH_DROP", "").split(",")):
        globals().pop(name, None)


_drop_api()
