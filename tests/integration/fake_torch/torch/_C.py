def _cuda_attach_out_of_memory_observer(observer):
    from torch.cuda import _allocator
    _allocator.ALLOCATOR.observers.append(observer)
