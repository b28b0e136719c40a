from torch.cuda._allocator import Tensor


class Parameter(Tensor):
    """A tensor that is a parameter: takes over data's memory, as nn.Parameter(data) shares it."""

    def __init__(self, data):
        super().__init__(data._block, data.nbytes)
        data._block = None


class Module:
    """The parts of nn.Module the adapter walks: _parameters, _buffers, _modules and the
    forward hooks, called as the real one does."""

    def __init__(self):
        self._parameters = {}
        self._buffers = {}
        self._modules = {}
        self._forward_hooks = {}

    def register_forward_hook(self, hook):
        self._forward_hooks[len(self._forward_hooks)] = hook

    def __call__(self, x):
        out = self.forward(x)
        for hook in list(self._forward_hooks.values()):
            result = hook(self, (x,), out)
            out = out if result is None else result
        return out


class Sequential(Module):
    def __init__(self, *layers):
        super().__init__()
        for i, layer in enumerate(layers):
            self._modules[str(i)] = layer

    def __getitem__(self, i):
        return self._modules[str(i)]

    def forward(self, x):
        for layer in self._modules.values():
            x = layer(x)
        return x
