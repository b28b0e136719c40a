"""Leaks held in four ways (issue 24), on the fake PyTorch: 4 MiB a step for 30 steps, kept
alive by MODE:
  module_attr  a forward hook appends each output to net[1].seen
  global_list  a global list, history
  closure      a list in a closure cell (remember = make_memory())
  graph        total_loss += loss: each loss's graph saves its 4 MiB activation
  local        a list local to the running function train()
  guarded      a list subclass whose __iter__ and __getattr__ raise: the census runs none of them
Usage: retainers.py MODE"""
import sys

import torch

MiB = 1 << 20


class Layer(torch.nn.Module):
    def forward(self, x):
        return torch.empty(4 * MiB)  # ACTIVATION-LINE


class Guarded(list):
    def __iter__(self):
        raise RuntimeError("the census ran the program's __iter__")

    def __getattr__(self, name):
        raise RuntimeError("the census ran the program's __getattr__")


guarded = Guarded()


def make_memory():
    kept = []

    def remember(t):
        kept.append(t)
    return remember


def keep_output(module, inputs, output):
    module.seen.append(output)


mode = sys.argv[1]
net = torch.nn.Sequential(Layer(), Layer())
params = [torch.nn.Parameter(torch.empty(MiB))]
optimizer = torch.optim.SGD(params)
history = []
remember = make_memory()
total_loss = None
if mode == "module_attr":
    net[1].seen = []
    net[1].register_forward_hook(keep_output)


def train():
    val_losses = []
    for step in range(30):
        val_losses.append(torch.empty(4 * MiB))  # ACTIVATION-LINE
        optimizer.step()


if mode == "local":
    train()
for step in range(30 if mode != "local" else 0):
    x = torch.empty(MiB)
    if mode == "module_attr":
        out = net(x)
    else:
        out = torch.empty(4 * MiB)  # ACTIVATION-LINE
    if mode == "global_list":
        history.append(out)
    elif mode == "guarded":
        guarded.append(out)
    elif mode == "closure":
        remember(out)
    elif mode == "graph":
        loss = torch._graph_op([out], saved=out)
        total_loss = loss if total_loss is None else torch._graph_op([total_loss, loss])
    del out, x
    optimizer.step()
print("done")
