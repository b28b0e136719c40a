"""Variable sequence lengths fragment PyTorch's cache: every step asks for activations of a
different size, cached blocks are split to serve them, and the small tensors kept from recent
steps (here the last positions' logits, for logging) pin pieces of large segments. Reserved
memory climbs far above the most the loop ever has allocated at once, and a job near the
device's limit runs out with memory "free".

    oomscope run -- python examples/torch/fragmenting_loop.py
    oomscope report oomscope-*-exit.json      # diagnosis: fragmentation, expandable segments

Rerun with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: segments grow in place instead of
being split, and reserved memory at the same step is lower."""
import collections
import random

import torch
import torch.nn.functional as F

from common import Net, arguments, batch_of


def main():
    args = arguments(steps=120)
    torch.manual_seed(0)
    lengths = random.Random(0)
    model = Net().to(args.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    recent = collections.deque(maxlen=8)
    choices = [int(64 * 1.25**k) for k in range(18)]  # 64 .. 2842 tokens
    for step in range(args.steps):
        seq = lengths.choice(choices)
        tokens, targets = batch_of(args, seq=seq)
        logits = model(tokens)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        recent.append(logits.detach()[:, -16:].clone())  # small, kept for 8 steps: pins a piece of a segment
        del logits, loss
        if step % 20 == 0 and args.device == "cuda":
            stats = torch.cuda.memory_stats()
            print(f"step {step}: allocated {stats['allocated_bytes.all.current'] / 2**20:.0f} MiB (peak "
                  f"{stats['allocated_bytes.all.peak'] / 2**20:.0f} MiB), reserved "
                  f"{stats['reserved_bytes.all.current'] / 2**20:.0f} MiB")
    print(f"fragmenting_loop: {args.steps} steps")


if __name__ == "__main__":
    main()
