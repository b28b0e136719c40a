"""An NCCL process group of world size 1 (one GPU): the driver's used memory around its init
and first all-reduce, and a report after it (oomscope.dump) for the suite to compare; then a
second group (new_group: NCCL splits it from the first) with its first all-reduce, a tensor in
a MemPool over the group's NCCL allocator (ncclMemAlloc: symmetric memory), and a second report.
Usage: nccl_world1.py FACTS_JSON"""
import json
import os
import sys

import torch
import torch.distributed as dist


def main():
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    torch.cuda.set_device(0)
    x = torch.ones(1 << 20, device="cuda")
    torch.cuda.synchronize()
    free_before, _ = torch.cuda.mem_get_info()
    reserved_before = torch.cuda.memory_reserved()
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
    dist.all_reduce(x)
    torch.cuda.synchronize()
    free_after, _ = torch.cuda.mem_get_info()
    import oomscope
    path = oomscope.dump("after the first all_reduce")
    log = os.environ.get("NCCL_DEBUG_FILE", "").replace("%p", str(os.getpid()))
    log_offset = os.path.getsize(log) if log and os.path.exists(log) else None  # NCCL flushes each line
    facts = {"driver_growth": free_before - free_after, "report": path,
             "torch_growth": torch.cuda.memory_reserved() - reserved_before, "sum": float(x[0].item()),
             "log_offset": log_offset}
    group = dist.new_group([0])
    dist.all_reduce(x, group=group)
    try:
        backend = dist.group.WORLD._get_backend(torch.device("cuda", 0))
        pool = torch.cuda.MemPool(backend.mem_allocator)
        with torch.cuda.use_mem_pool(pool):
            symmetric = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
        facts["symmetric_pool"] = list(pool.id)
    except Exception as e:  # a PyTorch or NCCL without the NCCL allocator
        facts["symmetric_error"] = f"{type(e).__name__}: {e}"[:200]
    torch.cuda.synchronize()
    facts["report_groups"] = oomscope.dump("two groups")
    with open(sys.argv[1], "w") as f:
        json.dump(facts, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
