"""One rank of a training job on the fake PyTorch, for `oomscope metrics`: holds its share of
the model (SHARE MiB) as parameters, takes STEPS optimizer steps keeping LEAK MiB a step (0: no
leak), then says "ready" and waits for its stdin to close. The step samples carry PyTorch's
allocated and reserved bytes; with LEAK the leak rules find the line that keeps them. With
"oom", it then asks for more than the device has once, and goes on (PyTorch's OutOfMemoryError
caught, as a batch-size finder does).
Usage: metrics_rank.py SHARE_MIB LEAK_MIB STEPS [oom]"""
import sys

import torch

MiB = 1 << 20
share, leak, steps = (int(a) for a in sys.argv[1:4])
params = [torch.nn.Parameter(torch.empty(share * MiB))]
optimizer = torch.optim.SGD(params)
kept = []
for step in range(steps):
    work = torch.empty(8 * MiB)
    if leak:
        kept.append(torch.empty(leak * MiB))  # the leak
    del work
    optimizer.step()
if sys.argv[4:] == ["oom"]:
    try:
        torch.empty(1 << 50)
    except torch.OutOfMemoryError:
        pass
print("ready", flush=True)
sys.stdin.read()
