SNAPSHOTS = [0]  # how many were taken (tests: the adapter skips them past its report limit)


def _snapshot(device=None):
    from torch.cuda import _allocator
    SNAPSHOTS[0] += 1
    return _allocator.ALLOCATOR.snapshot()


def _record_memory_history(enabled="all", stacks="all", max_entries=0, **kwargs):
    from torch.cuda import _allocator
    _allocator.ALLOCATOR.history = (stacks, max_entries)
