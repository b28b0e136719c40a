from torch.optim.optimizer import Optimizer


def _like(p):
    import torch
    return torch.empty(p.nbytes)


class SGD(Optimizer):
    def __init__(self, params, lr=0.01, momentum=0.0):
        super().__init__(params, dict(lr=lr, momentum=momentum))

    def _update(self):
        for group in self.param_groups:
            for p in group["params"]:
                if group["momentum"] and p.grad is not None and "momentum_buffer" not in self.state[p]:
                    self.state[p]["momentum_buffer"] = _like(p)


class AdamW(Optimizer):
    def __init__(self, params, lr=1e-3):
        super().__init__(params, dict(lr=lr))

    def _update(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = 0.0  # a CPU scalar in the real thing: not device memory
                    state["exp_avg"] = _like(p)
                    state["exp_avg_sq"] = _like(p)
                state["step"] += 1
