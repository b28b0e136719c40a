"""A stand-in for the parts of PyTorch that oomscope's adapter uses, built on the fake CUDA
runtime of tests/fakecuda (through ctypes), so that the adapter runs in CI without a GPU: the
caching allocator's segments and blocks, its cache flush and retry, the out-of-memory observer,
set_per_process_memory_fraction, torch.cuda._lazy_call, memory_stats, memory._snapshot and the
optimizer step post-hooks. The real thing is tested on the GPU (tests/gpu)."""

from torch import _C  # noqa: F401
from torch import cuda  # noqa: F401
from torch import nn  # noqa: F401
from torch import optim  # noqa: F401
from torch.cuda._allocator import OutOfMemoryError, Tensor  # noqa: F401

__version__ = "0.0.fake"


def empty(nbytes, dtype=None, device="cuda"):
    """A 'tensor' of nbytes bytes on the fake device."""
    cuda.init()
    return cuda._allocator.ALLOCATOR.malloc(int(nbytes))


class AddBackward0:
    """A node of the fake autograd graph that saves nothing: the nodes of its inputs."""

    def __init__(self, inputs):
        self.next_functions = tuple((t.grad_fn, 0) for t in inputs)


class MulBackward0(AddBackward0):
    """A node that saved a tensor for the backward pass (as real nodes expose _saved_self)."""

    def __init__(self, inputs, saved):
        super().__init__(inputs)
        self._saved_self = saved


def _graph_op(inputs, saved=None):
    """A 512-byte result whose graph keeps `saved` alive for as long as the result lives."""
    out = empty(512)
    out.grad_fn = MulBackward0(inputs, saved) if saved is not None else AddBackward0(inputs)
    return out
