from collections import defaultdict

_global_optimizer_pre_hooks = []
_global_optimizer_post_hooks = []


def register_optimizer_step_pre_hook(hook):
    _global_optimizer_pre_hooks.append(hook)


def register_optimizer_step_post_hook(hook):
    _global_optimizer_post_hooks.append(hook)


class Optimizer:
    """As torch.optim.Optimizer: param_groups, per-parameter state, step(closure) with the
    global pre- and post-hooks around it (the closure runs forward and backward inside)."""

    def __init__(self, params=(), defaults=None):
        self.param_groups = [dict(defaults or {}, params=list(params))]
        self.state = defaultdict(dict)

    def step(self, closure=None):
        for hook in _global_optimizer_pre_hooks:
            hook(self, (), {})
        loss = closure() if closure is not None else None
        self._update()
        for hook in _global_optimizer_post_hooks:
            hook(self, (), {})
        return loss

    def _update(self):
        pass

    def zero_grad(self, set_to_none=True):
        for group in self.param_groups:
            for p in group["params"]:
                p.grad = None
