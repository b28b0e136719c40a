from torch.cuda._allocator import Tensor


class Parameter(Tensor):
    """A tensor that is a parameter: takes over data's memory, as nn.Parameter(data) shares it."""

    def __init__(self, data):
        super().__init__(data._block, data.nbytes)
        data._block = None
