"""An OOM inside torch.cuda.use_mem_pool while the device has room (pytorch#159674): a MemPool
over a bounded pluggable allocator (libcapped_allocator.so, CAPPED_BYTES) is asked for more
than its bound. Usage: torch_pool_full.py ALLOCATOR_SO FACTS_JSON"""
import json
import sys

import torch

MiB = 1 << 20


def main():
    allocator = torch.cuda.memory.CUDAPluggableAllocator(sys.argv[1], "capped_malloc", "capped_free")
    pool = torch.cuda.MemPool(allocator.allocator())
    facts = {"pool": list(pool.id)}
    kept = []
    try:
        with torch.cuda.use_mem_pool(pool):
            for _ in range(3):
                kept.append(torch.empty(256 * MiB, dtype=torch.uint8, device="cuda"))
    except torch.OutOfMemoryError as e:
        facts["caught"] = True
        facts["message"] = str(e)[:300]
    facts["kept"] = len(kept)
    facts["free"] = torch.cuda.mem_get_info()[0]
    outside = torch.empty(256 * MiB, dtype=torch.uint8, device="cuda")  # the device has room
    facts["outside"] = outside.numel()
    with open(sys.argv[2], "w") as f:
        json.dump(facts, f)
    del kept


if __name__ == "__main__":
    main()
