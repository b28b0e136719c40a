"""A caching allocator in the manner of PyTorch's: segments from cudaMalloc (2 MiB units),
split into blocks; a freed block stays cached; when cudaMalloc fails the cache is flushed and
the call retried; when that fails too the OOM observers run and OutOfMemoryError is raised."""
import contextlib
import ctypes
import itertools
import os
import threading
import traceback

MiB = 1 << 20
SEGMENT_UNIT = 2 * MiB


class OutOfMemoryError(RuntimeError):
    pass


def _round(n, unit):
    return (n + unit - 1) // unit * unit


class Block:
    def __init__(self, segment, offset, size, active):
        self.segment, self.offset, self.size, self.active = segment, offset, size, active
        self.frames = None


class Segment:
    def __init__(self, address, size, pool=(0, 0)):
        self.address, self.size, self.pool = address, size, pool
        self.blocks = [Block(self, 0, size, False)]


# Pools as PyTorch numbers them: (0, 0) the default, (0, n) a user's MemPool or a handle from
# graph_pool_handle() (one counter, as PyTorch's), (n, 0) the private pool a CUDA graph's
# capture makes for itself.
_mempool_ids = itertools.count(1)
_graph_pool_ids = itertools.count(1)
_active = threading.local()
_capture = threading.local()  # the CUDAGraph this thread is capturing into, if any


def current_pool():
    return getattr(_active, "pool", (0, 0))


@contextlib.contextmanager
def use_pool(pool_id):
    """Allocations of this thread go to pool_id (and only its segments serve them)."""
    before = current_pool()
    _active.pool = pool_id
    try:
        yield
    finally:
        _active.pool = before


class _Device:
    type = "cuda"
    index = 0


class _Storage:
    def __init__(self, tensor):
        self._tensor = tensor

    def data_ptr(self):
        return self._tensor.data_ptr()

    def nbytes(self):
        return self._tensor.nbytes


class Tensor:
    is_cuda = True
    device = _Device()
    grad = None
    grad_fn = None  # the node of the fake autograd graph that made it (torch._graph_op)

    def __init__(self, block, nbytes):
        self._block = block
        self.nbytes = nbytes

    def data_ptr(self):
        return self._block.segment.address + self._block.offset

    def untyped_storage(self):
        return _Storage(self)

    def __eq__(self, other):  # elementwise in the real thing: never a bool
        raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")

    __hash__ = object.__hash__

    def __del__(self):
        if self._block is not None:
            ALLOCATOR.free(self._block)


class CachingAllocator:
    def __init__(self):
        self.segments = []
        self.observers = []
        self.fraction = None
        self.history = None
        self.traces = []
        self._rt = None
        self.allocated = 0
        self.peak_allocated = 0
        self.pool_limits = {}  # pool id -> bytes its (pluggable) allocator gives at most
        # pool id -> the captures that hold it (CUDAGraph): empty_cache() leaves a held pool alone.
        self.pool_users = {}

    def start(self):
        if self._rt is None:
            lib = os.environ["FAKECUDA_LIB"]
            self._rt = ctypes.CDLL(os.path.join(lib, "libcudart.so.13"))
            self._c10 = ctypes.CDLL(os.path.join(lib, "libc10_cuda.so"))  # CDLL: the GIL is released
            self._rt.cudaFree(None)

    # -- CUDA, through "libc10_cuda.so" as in PyTorch
    def _cuda_malloc(self, size):
        ptr = ctypes.c_void_p()
        if self._c10.fake_c10_cuda_malloc(ctypes.byref(ptr), ctypes.c_size_t(size)) != 0:
            return None
        return ptr.value

    def mem_get_info(self):
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self._rt.cudaMemGetInfo(ctypes.byref(free), ctypes.byref(total))
        return free.value, total.value

    # -- the allocator
    def malloc(self, nbytes):
        size = _round(max(nbytes, 1), 512)
        pool = current_pool()
        block = self._find_free(size, pool)
        if block is None:
            seg_size = _round(size, SEGMENT_UNIT)
            limit = self.pool_limits.get(pool)
            if limit is not None and sum(s.size for s in self.segments if s.pool == pool) + seg_size > limit:
                self._out_of_memory(size)  # the pool's allocator refuses: no CUDA call fails
            if self.fraction is not None:
                limit = int(self.fraction * self.mem_get_info()[1])
                if self.stats()["reserved_bytes.all.current"] + seg_size > limit:
                    self._out_of_memory(size)  # PyTorch's own limit: no CUDA call fails
            address = self._cuda_malloc(seg_size)
            if address is None:
                self.empty_cache()
                address = self._cuda_malloc(seg_size)
                if address is None:
                    self._out_of_memory(size)
            segment = Segment(address, seg_size, pool)
            self.segments.append(segment)
            if self.history:
                self._trace("segment_alloc", address, seg_size)
            block = segment.blocks[0]
        block = self._split(block, size)
        self.allocated += block.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        if self.history:
            self._trace("alloc", block.segment.address + block.offset, nbytes)
        return Tensor(block, nbytes)

    def _find_free(self, size, pool=(0, 0)):
        best = None
        for segment in (s for s in self.segments if s.pool == pool):
            for block in segment.blocks:
                if not block.active and block.size >= size and (best is None or block.size < best.size):
                    best = block
        return best

    def _split(self, block, size):
        segment = block.segment
        if block.size > size:
            rest = Block(segment, block.offset + size, block.size - size, False)
            segment.blocks.insert(segment.blocks.index(block) + 1, rest)
            block.size = size
        block.active = True
        block.frames = self._frames() if self.history and self.history[0] else None
        return block

    def free(self, block):
        if self.history:
            self._trace("free_completed", block.segment.address + block.offset, block.size)
        self.allocated -= block.size
        block.active = False
        blocks = block.segment.blocks
        i = blocks.index(block)
        # Merge with free neighbours, as a real allocator does.
        if i + 1 < len(blocks) and not blocks[i + 1].active:
            block.size += blocks.pop(i + 1).size
        if i > 0 and not blocks[i - 1].active:
            blocks[i - 1].size += blocks.pop(i).size

    def empty_cache(self):
        for segment in list(self.segments):
            if all(not b.active for b in segment.blocks) and not self.pool_users.get(segment.pool):
                self._c10.fake_c10_cuda_free(ctypes.c_void_p(segment.address))
                self.segments.remove(segment)

    def _frames(self):
        # As PyTorch records them with stacks="python": the program's frames, innermost first
        # (torch.empty is C code in the real thing: frames inside torch are left out).
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        return [{"filename": f.filename, "line": f.lineno, "name": f.name}
                for f in reversed(traceback.extract_stack()) if not os.path.abspath(f.filename).startswith(here)]

    def _trace(self, action, address, size):
        self.traces.append({"action": action, "addr": address, "size": size, "stream": 0,
                            "frames": self._frames() if self.history[0] else []})

    def _out_of_memory(self, size):
        stats = self.stats()
        free, _ = self.mem_get_info()
        for observer in self.observers:
            observer(0, size, stats["allocated_bytes.all.current"], free)
        raise OutOfMemoryError(f"CUDA out of memory. Tried to allocate {size} bytes")

    def stats(self):
        allocated = sum(b.size for s in self.segments for b in s.blocks if b.active)
        reserved = sum(s.size for s in self.segments)
        split = sum(b.size for s in self.segments for b in s.blocks
                    if not b.active and any(o.active for o in s.blocks))
        return {"allocated_bytes.all.current": allocated, "allocated_bytes.all.peak": self.peak_allocated,
                "reserved_bytes.all.current": reserved,
                "active_bytes.all.current": allocated, "inactive_split_bytes.all.current": split,
                "segment.all.current": len(self.segments)}

    def snapshot(self, pool=None):
        # Only the flag of PyTorch's expandable segments (the fake never grows a segment).
        expandable = "expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
        segments = []
        for s in self.segments:
            if pool is not None and s.pool != pool:
                continue
            blocks = [{"address": s.address + b.offset, "size": b.size,
                       "state": "active_allocated" if b.active else "inactive", "frames": b.frames or []}
                      for b in s.blocks]
            segments.append({"device": 0, "address": s.address, "total_size": s.size, "stream": 0,
                             "segment_type": "large", "segment_pool_id": s.pool, "is_expandable": expandable,
                             "blocks": blocks})
        return {"segments": segments, "device_traces": [list(self.traces)]}


ALLOCATOR = CachingAllocator()
