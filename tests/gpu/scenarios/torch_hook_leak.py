"""A leak kept by a forward hook (issue 24): each step's ReLU output is appended to an
attribute of the module, net[1].seen. STEPS (default 60) steps of a 4096-wide MLP, batch 256:
4 MiB a step. OOMSCOPE_TORCH_RETAINERS=0 in the environment for the side-by-side timing."""
import sys
import time

import torch


def keep_output(module, inputs, output):
    module.seen.append(output)  # the retaining line


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096)).cuda()
    net[1].seen = []
    net[1].register_forward_hook(keep_output)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    times = []
    for _ in range(steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        x = torch.randn(256, 4096, device="cuda")
        loss = net(x).square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    times.sort()
    print(f"median_step_ms {1000 * times[len(times) // 2]:.3f}")


if __name__ == "__main__":
    main()
