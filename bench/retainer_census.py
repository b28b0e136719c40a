"""The retainer census's cost (issue 24; docs/BENCHMARKS.md): a program state of N objects
(a module tree, nested containers, records with attributes, CUDA tensors of the fake PyTorch)
walked by oomscope's census, its time against the budget (OOMSCOPE_RETAINER_MS, 5 ms).
Usage: FAKECUDA_LIB=BUILD/fakecuda/lib PYTHONPATH=tests/integration/fake_torch:src/python \
       python3 bench/retainer_census.py [OBJECTS ...]"""
import statistics
import sys
import time

import torch

from oomscope import _torch_retainers

MiB = 1 << 20


class Record:
    def __init__(self, i, tensor):
        self.step = i
        self.name = f"record {i}"
        self.tensor = tensor


def state(objects):
    """About `objects` Python objects reachable from a module global, 1 in 50 a CUDA tensor."""
    tensors = objects // 50
    records = [Record(i, torch.empty(512) if i < tensors else None) for i in range(objects // 4)]
    table = {f"key {i}": [i, str(i), (i, i + 1)] for i in range(objects // 8)}
    layers = torch.nn.Sequential(*[torch.nn.Sequential() for _ in range(64)])
    return {"records": records, "table": table, "model": layers}


def main():
    sizes = [int(a) for a in sys.argv[1:]] or [1_000, 10_000, 100_000, 1_000_000]
    print(f"budget {_torch_retainers._budget() * 1000:.1f} ms, at most {_torch_retainers.MAX_OBJECTS} objects")
    for n in sizes:
        globals()["program_state"] = state(n)
        times, lines = [], []
        for _ in range(7):
            start = time.perf_counter()
            lines = _torch_retainers.census(torch, 0)
            times.append((time.perf_counter() - start) * 1000)
        held = sum(int(l.split()[2]) for l in lines if l.startswith("retainer"))
        print(f"{n:>9} objects: census median {statistics.median(times):.2f} ms, max {max(times):.2f} ms; "
              f"{len(lines) - 1} retainers, {held / MiB:.2f} MiB found")
        del globals()["program_state"]


if __name__ == "__main__":
    main()
