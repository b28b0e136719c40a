"""leaky_loop.py fixed: validation runs under torch.no_grad() and keeps a plain number, so
nothing of a step outlives it. `oomscope run --check -- python examples/torch/fixed_loop.py`
passes: the loop is steady after warm-up (the optimizer's state, created at the first step,
and PyTorch's cache are not leaks)."""
import torch
import torch.nn.functional as F

from common import Net, arguments, batch_of


def main():
    args = arguments()
    torch.manual_seed(0)
    model = Net().to(args.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    val_tokens, val_targets = batch_of(args, seq=64)
    val_losses = []
    for step in range(args.steps):
        tokens, targets = batch_of(args)
        loss = F.cross_entropy(model(tokens).flatten(0, 1), targets.flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        with torch.no_grad():
            val_losses.append(F.cross_entropy(model(val_tokens).flatten(0, 1), val_targets.flatten()).item())
    print(f"fixed_loop: {args.steps} steps, last validation loss {val_losses[-1]:.3f}")


if __name__ == "__main__":
    main()
