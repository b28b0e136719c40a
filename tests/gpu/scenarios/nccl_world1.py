"""An NCCL process group of world size 1 (one GPU): the driver's used memory around its init
and first all-reduce, and a report after it (oomscope.dump) for the suite to compare.
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
    facts = {"driver_growth": free_before - free_after, "report": path,
             "torch_growth": torch.cuda.memory_reserved() - reserved_before, "sum": float(x[0].item())}
    with open(sys.argv[1], "w") as f:
        json.dump(facts, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
