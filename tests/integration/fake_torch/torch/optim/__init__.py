# As in PyTorch 2.11: the optimizer submodule is not an attribute until imported.
def __getattr__(name):
    if name == "Optimizer":
        from torch.optim.optimizer import Optimizer
        return Optimizer
    raise AttributeError(name)
