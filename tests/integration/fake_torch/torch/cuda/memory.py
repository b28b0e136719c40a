SNAPSHOTS = [0]  # how many were taken (tests: the adapter skips them past its report limit)


def _snapshot(device=None):
    from torch.cuda import _allocator
    SNAPSHOTS[0] += 1
    return _allocator.ALLOCATOR.snapshot()


def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=0, **kwargs):
    import os
    from torch.cuda import _allocator
    if os.environ.get("FAKE_TORCH_HISTORY_FAILS"):  # tests: a PyTorch that refuses to record
        raise RuntimeError("recording history is not supported here")
    # context=None: the actions only, no frames (as PyTorch records none then)
    _allocator.ALLOCATOR.history = (stacks if context else None, max_entries)


class CUDAPluggableAllocator:
    """The fake's stand-in for a pluggable allocator (a .so in the real thing): it gives a pool at
    most `limit` bytes (FAKE_TORCH_POOL_LIMIT, else unlimited), as a bounded allocator would."""

    def __init__(self, path=None, alloc_fn_name=None, free_fn_name=None):
        import os
        self.limit = int(os.environ.get("FAKE_TORCH_POOL_LIMIT", "0")) or None

    def allocator(self):
        return self


class MemPool:
    """torch.cuda.MemPool: a pool of the caching allocator, (0, n) as PyTorch numbers a user's."""

    def __init__(self, allocator=None):
        from torch.cuda import _allocator
        self.id = (0, next(_allocator._mempool_ids))
        if allocator is not None and getattr(allocator, "limit", None):
            _allocator.ALLOCATOR.pool_limits[self.id] = allocator.limit

    def snapshot(self):
        from torch.cuda import _allocator
        return _allocator.ALLOCATOR.snapshot(pool=self.id)["segments"]


def use_mem_pool(pool, device=None):
    """torch.cuda.use_mem_pool; the fake also takes a pool id (a graph's, from graph_pool_handle())."""
    from torch.cuda import _allocator
    return _allocator.use_pool(pool if isinstance(pool, tuple) else pool.id)
