"""Two ranks under torchrun (gloo) sharing the one GPU: each holds 2 GiB; rank 1 then asks for
more than the GPU has and dies of the OutOfMemoryError, while rank 0 waits for it in a barrier
(torchrun then ends rank 0). Each rank writes its pid and memory_reserved() to OUTDIR/rank-N.json."""
import datetime
import json
import os
import sys

import torch
import torch.distributed as dist


def main():
    outdir = sys.argv[1]
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank = dist.get_rank()
    torch.cuda.set_device(0)
    held = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    with open(os.path.join(outdir, f"rank-{rank}.json"), "w") as f:
        json.dump({"pid": os.getpid(), "rank": rank, "reserved": torch.cuda.memory_reserved()}, f)
    dist.barrier()
    if rank == 1:
        free, total = torch.cuda.mem_get_info()
        torch.empty(total + (1 << 30), dtype=torch.uint8, device="cuda")  # raises: rank 1 dies of it
    dist.barrier()  # rank 0 waits here for a rank that is gone
    del held


if __name__ == "__main__":
    main()
