"""One rank of a training job on the fake PyTorch, for `oomscope metrics`: holds its share of
the model (SHARE MiB) as parameters, takes STEPS optimizer steps keeping LEAK MiB a step (0: no
leak), then says "ready" and waits for its stdin to close. The step samples carry PyTorch's
allocated and reserved bytes; with LEAK the leak rules find the line that keeps them. With
"oom", it then asks for more than the device has once, and goes on (PyTorch's OutOfMemoryError
caught, as a batch-size finder does). With "run", it goes on stepping about 20 times a second
(a training loop's pace, for tools/fleet_screenshot.py) until its stdin closes.
Usage: metrics_rank.py SHARE_MIB LEAK_MIB STEPS [oom|run]"""
import sys
import threading
import time

import torch

MiB = 1 << 20
share, leak, steps = (int(a) for a in sys.argv[1:4])
params = [torch.nn.Parameter(torch.empty(share * MiB))]
optimizer = torch.optim.SGD(params)
kept = []


def step():
    work = torch.empty(8 * MiB)
    if leak:
        kept.append(torch.empty(leak * MiB))  # the leak
    del work
    optimizer.step()


for _ in range(steps):
    step()
if sys.argv[4:] == ["oom"]:
    try:
        torch.empty(1 << 50)
    except torch.OutOfMemoryError:
        pass
print("ready", flush=True)
if sys.argv[4:] == ["run"]:
    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    while not done.wait(0.05):
        step()
else:
    sys.stdin.read()
