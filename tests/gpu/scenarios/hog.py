"""Holds all but LEFT_GIB of the GPU's free memory until its stdin closes: another process on a
shared card. Prints "ready FREE_LEFT" once it holds it."""
import sys

import torch

left = int(float(sys.argv[1]) * (1 << 30))
free, total = torch.cuda.mem_get_info()
held = torch.empty(free - left, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print(f"ready {torch.cuda.mem_get_info()[0]}", flush=True)
sys.stdin.read()
