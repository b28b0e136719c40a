"""Cost of the PyTorch adapter's work per optimizer step, on a GPU: the step post-hook reads
memory_stats() of the current device and hands a sample to the preload (oomscope_step).
Run under oomscope: `oomscope run -- python3 bench/gpu_step_hook.py [N]`. Prints the median
and mean time per step hook over N calls after a warm-up, and the same for memory_stats()
alone, in microseconds."""
import statistics
import sys
import time

import torch


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    torch.zeros(1 << 20, device="cuda")
    from oomscope import _torch_adapter as adapter
    model = torch.nn.Linear(16, 16).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def timed(fn):
        samples = []
        for _ in range(200):
            fn()
        for _ in range(n):
            t0 = time.perf_counter_ns()
            fn()
            samples.append(time.perf_counter_ns() - t0)
        return statistics.median(samples) / 1000, statistics.fmean(samples) / 1000

    hook_median, hook_mean = timed(lambda: adapter._on_optimizer_step(optimizer, (), {}))
    stats_median, stats_mean = timed(lambda: torch.cuda.memory_stats(0))
    print(f"step hook: median {hook_median:.1f} us, mean {hook_mean:.1f} us over {n} calls")
    print(f"memory_stats() alone: median {stats_median:.1f} us, mean {stats_mean:.1f} us")


if __name__ == "__main__":
    main()
