"""A training loop with a slow leak, to be looked at while it runs (oomscope snapshot, top,
SIGUSR2, recover after SIGKILL). An MLP trains on a fixed batch; every step its validation loss
is kept in a list as a tensor, outside torch.no_grad() (the line marked "# the leak"), so each
step keeps that step's validation activations alive.

Protocol on stdin/stdout (the suite drives it): after step PAUSE it prints "paused PAUSE" and
waits for a line (a quiet moment: nothing allocates while the suite compares a snapshot with a
request report); then it trains on until a line arrives, or MAX steps, and exits 0. After every
step from the first on it writes its facts (pid, step, memory_allocated(), memory_reserved())
to the JSON file FACTS (replaced atomically).
Usage: torch_live.py FACTS [PAUSE] [MAX]"""
import json
import os
import select
import sys

import torch


def main():
    facts_path = sys.argv[1]
    pause = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    most = int(sys.argv[3]) if len(sys.argv) > 3 else 3000
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 steps of ~10-20 ms: paced by real work
    width = 2048
    model = torch.nn.Sequential(*[m for _ in range(4) for m in (torch.nn.Linear(width, width), torch.nn.ReLU())]).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(8192, width, device="cuda")
    val_x = torch.randn(128, width, device="cuda")
    val_losses = []
    for step in range(1, most + 1):
        loss = model(x).square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        val_losses.append(model(val_x).square().mean())  # the leak
        torch.cuda.synchronize()
        facts = {"pid": os.getpid(), "step": step, "allocated": torch.cuda.memory_allocated(),
                 "reserved": torch.cuda.memory_reserved()}
        with open(facts_path + ".tmp", "w") as f:
            json.dump(facts, f)
        os.replace(facts_path + ".tmp", facts_path)
        if step == pause:
            print(f"paused {step}", flush=True)
            sys.stdin.readline()
        elif step > pause and select.select([sys.stdin], [], [], 0)[0]:
            break
    print(f"torch_live: {step} steps, {len(val_losses)} validation losses kept", flush=True)


if __name__ == "__main__":
    main()
