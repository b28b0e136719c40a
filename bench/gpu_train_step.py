"""Training-step overhead on a GPU: a GPT-2-small-sized decoder (124 M parameters, from
transformers, randomly initialised) trained with bf16 autocast, batch 8 x 1024 tokens; prints
the median step time over STEPS steps after a warm-up. Run it three ways, interleaved, as
bench/gpu_train_step.sh does: without oomscope, under `oomscope run` (the default capture),
and with PyTorch's own `_record_memory_history(stacks="python")` (--history).

    python3 bench/gpu_train_step.py [--steps 220] [--history]"""
import argparse
import json
import statistics
import time

import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=220)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--history", action="store_true")
    p.add_argument("--label", default="")
    args = p.parse_args()
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=1024)).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    if args.history:
        torch.cuda.memory._record_memory_history(stacks="python")
    times = []
    window = [0, 0]  # CLOCK_MONOTONIC of the measured steps: the report's time_ns clock
    for step in range(args.steps):
        if step == args.warmup:
            window[0] = time.monotonic_ns()
        tokens = torch.randint(0, 50257, (8, 1024), device="cuda")
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    window[1] = time.monotonic_ns()
    measured = times[args.warmup:]
    print(json.dumps({"label": args.label, "steps": len(measured), "median_ms": statistics.median(measured) * 1e3,
                      "mean_ms": statistics.fmean(measured) * 1e3, "window_ns": window}))


if __name__ == "__main__":
    main()
