"""Trains a GPT-2-small-sized decoder (bf16 autocast) and keeps training until it is killed.
After the warm-up it writes, every step, its pid and the caching allocator's view
(memory_reserved(), memory_allocated()) to the JSON file given as the first argument (replaced
atomically), and prints "ready" once: the suite then kills it with SIGKILL mid-training."""
import json
import os
import sys

import torch


def main():
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=1024)).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    step = 0
    while True:
        tokens = torch.randint(0, 50257, (8, 1024), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        step += 1
        if step >= 5:
            facts = {"pid": os.getpid(), "step": step, "reserved": torch.cuda.memory_reserved(),
                     "allocated": torch.cuda.memory_allocated()}
            with open(sys.argv[1] + ".tmp", "w") as f:
                json.dump(facts, f)
            os.replace(sys.argv[1] + ".tmp", sys.argv[1])
            if step == 5:
                print("ready", flush=True)


if __name__ == "__main__":
    main()
