"""PyTorch's pools on the GPU: part of the memory in a torch.cuda.MemPool, part in a CUDA
graph's private pool, the rest in the default pool; then an OOM in the default pool. The
pools' own snapshots are written to FACTS for the suite to compare with the report.
Usage: torch_pools.py FACTS_JSON"""
import json
import sys

import torch

MiB = 1 << 20


def pool_bytes(pool_id):
    return sum(s["total_size"] for s in torch.cuda.memory._snapshot()["segments"]
               if tuple(s.get("segment_pool_id", (0, 0))) == tuple(pool_id))


def main():
    facts = {}
    weights = torch.empty(1024 * MiB, dtype=torch.uint8, device="cuda")
    pool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool):
        pooled = [torch.empty(256 * MiB, dtype=torch.uint8, device="cuda") for _ in range(3)]
    # A CUDA graph: what its capture allocates comes from the graph's private pool.
    static_in = torch.zeros(16 * MiB, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            static_in * 2
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = static_in * 2 + 1
    graph.replay()
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    try:
        torch.empty(total, dtype=torch.uint8, device="cuda")  # more than the card: an OOM in the default pool
    except torch.OutOfMemoryError:
        facts["caught"] = True
    facts["mempool"] = list(pool.id)
    facts["mempool_reserved"] = sum(s["total_size"] for s in pool.snapshot())
    facts["graph_pool"] = list(graph.pool())
    facts["graph_reserved"] = pool_bytes(graph.pool())
    facts["default_reserved"] = pool_bytes((0, 0))
    facts["reserved"] = torch.cuda.memory_reserved()
    with open(sys.argv[1], "w") as f:
        json.dump(facts, f)
    del weights, pooled, static_out


if __name__ == "__main__":
    main()
