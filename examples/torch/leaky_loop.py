"""A training loop with a classic leak: the validation loss is appended to a list as a tensor,
outside torch.no_grad(), so every step keeps its whole validation graph (the activations saved
for a backward that never comes) alive. Memory grows by the same amount every step until the
job runs out.

    oomscope run --check -- python examples/torch/leaky_loop.py

fails (exit 1) and names the appending line; fixed_loop.py is the same loop, fixed."""
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
        val_losses.append(F.cross_entropy(model(val_tokens).flatten(0, 1), val_targets.flatten()))  # the leak
    print(f"leaky_loop: {args.steps} steps, last validation loss {float(val_losses[-1]):.3f}")


if __name__ == "__main__":
    main()
