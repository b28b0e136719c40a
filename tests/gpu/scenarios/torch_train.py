"""PyTorch scenarios for the adapter on a real GPU. Usage: torch_train.py MODE FACTS_JSON
  gpt2      a GPT-2-style decoder (transformers, random init) trains a few steps, then a
            batch that does not fit: OutOfMemoryError
  fraction  set_per_process_memory_fraction, then a request over it: an OOM without any
            failing CUDA call
  recover   a failed cudaMalloc that PyTorch recovers from by flushing its cache
  expandable / async   the gpt2 run under those allocator settings (set by the caller)
  healthy   the gpt2 run without the batch that does not fit
Records what memory_stats() says inside an OOM observer of its own."""
import json
import time
import sys

import torch

GiB = 1 << 30
facts = {"observer_stats": []}


trained = {}  # the model and optimizer of the run, for the observer


def roles_now(device):
    """Parameters, gradients and optimizer state on device, each storage once: what oomscope's
    by_role must say (computed here independently of its adapter)."""
    seen = set()

    def size(t):
        if t is None or not t.is_cuda or t.device.index != device:
            return 0
        s = t.untyped_storage()
        if s.data_ptr() in seen:
            return 0
        seen.add(s.data_ptr())
        return s.nbytes()
    params = list(trained["model"].parameters())
    state = [v for st in trained["optimizer"].state.values() for v in st.values() if torch.is_tensor(v)]
    return {"parameters": sum(size(p) for p in params), "gradients": sum(size(p.grad) for p in params),
            "optimizer_state": sum(size(v) for v in state)}


def observer(device, alloc, device_allocated, device_free):
    facts["observer_stats"].append(dict(torch.cuda.memory_stats(device), requested=alloc))
    if trained:
        facts.setdefault("observer_roles", []).append(roles_now(device))


def train_gpt2(steps=4, batch=8, oom_batch=512):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    config = GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257)
    model = GPT2LMHeadModel(config).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    trained.update(model=model, optimizer=optimizer)
    losses = []
    step_s = []
    for step in range(steps + 1):
        size = oom_batch if oom_batch and step == steps else batch
        tokens = torch.randint(0, config.vocab_size, (size, 1024), device="cuda")
        torch.cuda.synchronize()
        start = time.perf_counter()
        try:
            loss = model(tokens, labels=tokens).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(float(loss))  # synchronizes
            step_s.append(time.perf_counter() - start)
        except torch.OutOfMemoryError:
            facts["oom_at_step"] = step
            break
    facts["losses"] = losses
    facts["optimizer_steps"] = len(losses)
    facts["step_s"] = step_s
    try:  # the adapter's cost per step sample: measuring the roles (with the preload only)
        from oomscope import _torch_roles
        _torch_roles.measure(torch, 0)
        start = time.perf_counter()
        for _ in range(20):
            _torch_roles.measure(torch, 0)
        facts["roles_measure_s"] = (time.perf_counter() - start) / 20
    except ImportError:
        pass


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
