"""Holds some PyTorch tensors, then asks for more memory than the GPU has. Writes the
allocator's view (reserved and allocated bytes before and after the OOM) to the JSON file given
as the first argument, and exits 3 so that the suite can check the exit status is kept."""
import json
import sys

import torch


def hold_tensors(n, size):
    return [torch.empty(size, dtype=torch.uint8, device="cuda") for _ in range(n)]


def ask_too_much():
    free, total = torch.cuda.mem_get_info()
    return torch.empty(total + (1 << 30), dtype=torch.uint8, device="cuda")


def main():
    held = hold_tensors(4, 1 << 30)
    torch.cuda.synchronize()
    facts = {"reserved_before": torch.cuda.memory_reserved(), "allocated_before": torch.cuda.memory_allocated()}
    try:
        ask_too_much()
        facts["oom"] = False
    except torch.OutOfMemoryError:
        facts["oom"] = True
    facts["reserved_after"] = torch.cuda.memory_reserved()
    facts["held"] = len(held)
    with open(sys.argv[1], "w") as f:
        json.dump(facts, f)
    sys.exit(3)


if __name__ == "__main__":
    main()
