"""Two ranks under torchrun (gloo) sharing the one GPU: each holds 2 GiB; rank 1 then asks for
more than the GPU has and dies of the OutOfMemoryError, while rank 0 waits for it on the job's
store (torchrun then ends rank 0 with SIGTERM). Each rank writes its pid and memory_reserved() to OUTDIR/rank-N.json.
@record, as torchrun's documentation advises: the failure summary shows the rank's traceback."""
import datetime
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record


@record
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
    # Rank 0 waits, in C++ with the GIL released, for a rank that is gone, until torchrun ends
    # it. (In a gloo barrier it would not: gloo fails the barrier as soon as the peer's process
    # exits, and rank 0 ends by itself, leaving an exit report.)
    store = dist.distributed_c10d._get_default_store()
    store.wait(["rank 1 is done"], datetime.timedelta(seconds=120))
    del held


if __name__ == "__main__":
    main()
