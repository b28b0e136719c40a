"""torch.cuda.CUDAGraph and torch.cuda.graph, as PyTorch 2.11 behaves on the GPU (tests/gpu's
torch_graph_pools): a capture allocates from a private pool, (n, 0) unless given one; the graph
holds its pool until it is reset or collected, and empty_cache() leaves a held pool alone; a
capture broken by a synchronisation fails at capture_end() and keeps its pool held for the
rest of the process (pytorch#190348); pool() answers only after a capture that ended."""
from torch.cuda import _allocator


class CUDAGraph:
    def __init__(self, keep_graph=False):
        self._pool = None
        self._ended = False
        self._invalidated = False
        self._route = None

    def capture_begin(self, pool=None, capture_error_mode="global"):
        self._pool = tuple(pool) if pool is not None else (next(_allocator._graph_pool_ids), 0)
        users = _allocator.ALLOCATOR.pool_users
        users[self._pool] = users.get(self._pool, 0) + 1
        self._route = _allocator.use_pool(self._pool)
        self._route.__enter__()
        _allocator._capture.graph = self

    def capture_end(self):
        _allocator._capture.graph = None
        if self._route is not None:
            self._route.__exit__(None, None, None)
            self._route = None
        if self._invalidated:
            raise RuntimeError("CUDA error: operation failed due to a previous error during capture")
        self._ended = True

    def replay(self):
        if not self._ended:
            raise RuntimeError("Called CUDAGraph::replay without a preceding successful capture.")

    def pool(self):
        if not self._ended:
            raise RuntimeError("Called CUDAGraph::pool() without a preceding successful capture.")
        return self._pool

    def reset(self):
        if self._ended and self._pool is not None:  # a broken capture's pool stays held
            users = _allocator.ALLOCATOR.pool_users
            users[self._pool] -= 1
        self._ended = False

    def __del__(self):
        try:
            self.reset()
        except Exception:
            pass


class graph:
    """torch.cuda.graph: capture_begin on entry, capture_end on exit, even when the body raised."""

    def __init__(self, cuda_graph, pool=None, stream=None, capture_error_mode="global"):
        self.cuda_graph = cuda_graph
        self.pool = () if pool is None else (pool,)
        self.capture_error_mode = capture_error_mode

    def __enter__(self):
        self.cuda_graph.capture_begin(*self.pool, capture_error_mode=self.capture_error_mode)

    def __exit__(self, *args):
        self.cuda_graph.capture_end()
