"""PyTorch scenarios for the adapter on a real GPU. Usage: torch_train.py MODE FACTS_JSON
  gpt2      a GPT-2-style decoder (transformers, random init) trains a few steps, then a
            batch that does not fit: OutOfMemoryError
  fraction  set_per_process_memory_fraction, then a request over it: an OOM without any
            failing CUDA call
  recover   a failed cudaMalloc that PyTorch recovers from by flushing its cache
  expandable / async   the gpt2 run under those allocator settings (set by the caller)
Records what memory_stats() says inside an OOM observer of its own."""
import json
import sys

import torch

GiB = 1 << 30
facts = {"observer_stats": []}


def observer(device, alloc, device_allocated, device_free):
    facts["observer_stats"].append(dict(torch.cuda.memory_stats(device), requested=alloc))


def train_gpt2(steps=4, batch=8, oom_batch=512):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    config = GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257)
    model = GPT2LMHeadModel(config).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    losses = []
    for step in range(steps + 1):
        size = oom_batch if oom_batch and step == steps else batch
        tokens = torch.randint(0, config.vocab_size, (size, 1024), device="cuda")
        try:
            loss = model(tokens, labels=tokens).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(float(loss))
        except torch.OutOfMemoryError:
            facts["oom_at_step"] = step
            break
    facts["losses"] = losses
    facts["optimizer_steps"] = len(losses)


def main():
    mode, path = sys.argv[1], sys.argv[2]
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    if torch.cuda.get_allocator_backend() == "native":
        torch._C._cuda_attach_out_of_memory_observer(observer)
    if mode in ("gpt2", "expandable", "async"):
        train_gpt2()
    elif mode == "healthy":
        train_gpt2(steps=6, oom_batch=None)
    elif mode == "fraction":
        torch.cuda.set_per_process_memory_fraction(0.1)
        try:
            torch.empty(20 * GiB, dtype=torch.uint8, device="cuda")
        except torch.OutOfMemoryError:
            facts["caught"] = True
    elif mode == "recover":
        free, total = torch.cuda.mem_get_info()
        held = torch.empty(int(free * 0.6), dtype=torch.uint8, device="cuda")
        del held  # cached by PyTorch
        bigger = torch.empty(int(free * 0.7), dtype=torch.uint8, device="cuda")  # fails, flush, retry works
        facts["recovered"] = bigger.numel()
    facts["reserved_end"] = torch.cuda.memory_reserved()
    with open(path, "w") as f:
        json.dump(facts, f)
    print(f"result: {mode} done")


if __name__ == "__main__":
    main()
