"""A training loop on the fake PyTorch (issue 23's `oomscope fit`): 100 MiB of parameters (two
of 50 MiB), then per step SIZE tensors of 20 MiB, dropped, and SIZE of 30 MiB, dropped. A roomy
run reserves 100 + 50·SIZE MiB (the 20 MiB blocks stay cached); PyTorch needs 100 + 30·SIZE at
once, as its allocator gives the cache back when the device is full. Usage: fit_torch.py SIZE
[logits]. With `logits`, a language model's shape: parameters of 20 MiB, and beside the 30 MiB
tensors one of 40 MiB·SIZE (its logits), the largest segment and more than a tenth of the peak
(20 + 70·SIZE allocated at once). With `strands`, tensors whose bytes grow with SIZE, as a real
batch's do: per step activations of 100 MiB·SIZE, logits of 10 MiB·SIZE freed, then a 3 MiB
tensor kept, which the allocator puts in the logits' free block: the next step's logits need a
new segment beside that one (20 + 120·SIZE MiB reserved at once; 23 + 110·SIZE allocated);
`strands workspace` the same with one more allocation at size 1; `strands smallpaths` with two
more at size 1 and one at size 2 (the smallest sizes' paths of their own: 1, 2 and 4 align in no
two runs, 4 and any larger do).
Exits 3 on torch.cuda.OutOfMemoryError."""
import sys

import torch

MiB = 1 << 20
size = int(sys.argv[1])
logits = sys.argv[2:] == ["logits"]
if sys.argv[2:3] == ["strands"]:
    if sys.argv[3:] == ["workspace"] and size == 1:
        torch.empty(MiB)  # dropped at once: a library's workspace at the smallest size only: its actions differ
    if sys.argv[3:] == ["smallpaths"]:
        for _ in range({1: 2, 2: 1}.get(size, 0)):
            torch.empty(MiB)  # dropped at once
    params = [torch.nn.Parameter(torch.empty(10 * MiB)) for _ in range(2)]
    optimizer = torch.optim.SGD(params, lr=0.1)  # its steps carry PyTorch's allocated peak
    kept = []
    try:
        for step in range(2):
            activations = torch.empty(100 * MiB * size)
            scores = torch.empty(10 * MiB * size)
            del scores
            kept.append(torch.empty(3 * MiB))
            del activations
            optimizer.step()
    except torch.cuda.OutOfMemoryError:
        print("out of memory at size", size)
        sys.exit(3)
    print("fits", size)
    sys.exit(0)
params = [torch.nn.Parameter(torch.empty((10 if logits else 50) * MiB)) for _ in range(2)]
optimizer = torch.optim.SGD(params, lr=0.1)
try:
    for step in range(2):
        small = [torch.empty(20 * MiB) for _ in range(size)]
        del small
        large = [torch.empty(30 * MiB) for _ in range(size)]
        scores = torch.empty(40 * MiB * size) if logits else None
        del large, scores
        optimizer.step()
except torch.cuda.OutOfMemoryError:
    print("out of memory at size", size)
    sys.exit(3)
print("fits", size)
