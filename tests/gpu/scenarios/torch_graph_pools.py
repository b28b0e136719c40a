"""CUDA graphs' private pools on the GPU: a graph dropped while its capture's output lives on,
a capture that a synchronisation breaks (PyTorch keeps its pool: pytorch#190348), a graph
alive, and two graphs sharing a pool from graph_pool_handle(); then an OOM in the default pool.
PyTorch's own snapshot of each pool, taken just before the OOM, goes to FACTS.
Usage: torch_graph_pools.py FACTS_JSON"""
import gc
import json
import sys

import torch

MiB = 1 << 20


def pools():
    out = {}
    for seg in torch.cuda.memory._snapshot()["segments"]:
        key = "%d,%d" % tuple(seg.get("segment_pool_id", (0, 0)))
        reserved, allocated = out.get(key, (0, 0))
        out[key] = (reserved + seg["total_size"],
                    allocated + sum(b["size"] for b in seg["blocks"] if b["state"] == "active_allocated"))
    return out


def main():
    facts = {}
    weights = torch.empty(1024 * MiB, dtype=torch.uint8, device="cuda")
    x = torch.zeros(16 * MiB, device="cuda")  # 64 MiB of floats
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up before capture, as PyTorch's docs ask
        for _ in range(2):
            x * 2
    torch.cuda.current_stream().wait_stream(side)

    dropped = torch.cuda.CUDAGraph()
    with torch.cuda.graph(dropped):
        output = x * 2  # 64 MiB from the graph's pool, kept after the graph is gone
        scratch = torch.empty(128 * MiB, dtype=torch.uint8, device="cuda")
        del scratch
    facts["dropped"] = list(dropped.pool())
    del dropped
    gc.collect()

    broken = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(broken):
            work = torch.empty(384 * MiB, dtype=torch.uint8, device="cuda")
            torch.cuda.synchronize()  # not allowed while capturing: the capture breaks
    except RuntimeError as e:
        facts["broken_error"] = str(e).splitlines()[0][:200]
    try:
        facts["broken_pool"] = list(broken.pool())
    except RuntimeError as e:
        facts["broken_pool_error"] = str(e).splitlines()[0][:200]
    del work, broken
    gc.collect()

    alive = torch.cuda.CUDAGraph()
    with torch.cuda.graph(alive):
        static = x + 1
    alive.replay()
    facts["alive"] = list(alive.pool())

    handle = torch.cuda.graph_pool_handle()
    first, second = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(first, pool=handle):
        a = x * 3
    with torch.cuda.graph(second, pool=handle):
        b = x * 4
    facts["shared"] = list(handle)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    facts["pools"] = pools()
    free, total = torch.cuda.mem_get_info()
    try:
        torch.empty(total, dtype=torch.uint8, device="cuda")  # more than the card: an OOM in the default pool
    except torch.OutOfMemoryError:
        facts["caught"] = True
    facts["pools_after_oom"] = pools()
    with open(sys.argv[1], "w") as f:
        json.dump(facts, f)
    del weights, output, static, a, b, alive, first, second


if __name__ == "__main__":
    main()
