"""One trial of a batch size: MODEL BATCH [STEPS] trains STEPS steps (default 5) and exits 0
("fits"), or 3 on torch.OutOfMemoryError ("oom"). Models (issue 23):
  gpt2      GPT-2 small (transformers, random init), seq 1024, bf16 autocast, AdamW
  resnet50  ResNet-50 (timm, random init), 224x224, fp32, SGD with momentum
OOMSCOPE_FIT_SIZE, when set, is the batch (for `oomscope fit`)."""
import os
import sys

import torch
import torch.nn.functional as F


def gpt2(batch, steps):
    from transformers import GPT2Config, GPT2LMHeadModel
    config = GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257)
    model = GPT2LMHeadModel(config).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(steps):
        tokens = torch.randint(0, config.vocab_size, (batch, 1024), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def resnet50(batch, steps):
    import timm
    model = timm.create_model("resnet50", pretrained=False).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for _ in range(steps):
        images = torch.randn(batch, 3, 224, 224, device="cuda")
        labels = torch.randint(0, 1000, (batch,), device="cuda")
        loss = F.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def main():
    model = sys.argv[1]
    batch = int(os.environ.get("OOMSCOPE_FIT_SIZE") or sys.argv[2])
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    torch.manual_seed(0)
    try:
        {"gpt2": gpt2, "resnet50": resnet50}[model](batch, steps)
        torch.cuda.synchronize()
    except torch.OutOfMemoryError:
        print(f"oom {batch}")
        return 3
    except RuntimeError as e:
        # Out of memory where a library, not PyTorch's allocator, asked: cuBLAS creating the
        # handle of autograd's backward thread.
        if "ALLOC_FAILED" not in str(e) and "out of memory" not in str(e):
            raise
        print(f"oom {batch} ({str(e).splitlines()[0]})")
        return 3
    print(f"fits {batch} reserved_peak {torch.cuda.max_memory_reserved()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
