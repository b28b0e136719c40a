"""One trial of a batch size: MODEL BATCH [STEPS] trains STEPS steps (default: OOMSCOPE_FIT_STEPS,
else 5) and exits 0 ("fits"), or 3 on running out of memory ("oom"). Every model is built with
random weights on the GPU (nothing is downloaded); its data is made on the GPU in the step.

The zoo (issues 23 and 44), MODEL[-VARIANT]:
  gpt2          GPT-2 small (transformers), sequence 1024, bf16 autocast, AdamW
  gpt2-fp32     the same in fp32
  gpt2-ckpt     the same with activation checkpointing
  gpt2-accum    the same, gradients accumulated over 4 micro-batches of BATCH
  bert          BERT-base masked LM (transformers), sequence 512, bf16 autocast, AdamW
  t5            T5-small (transformers), 512 tokens in, 128 out, bf16 autocast, AdamW
  lstm          a 2-layer LSTM language model (hidden 1024, vocabulary 32 000), sequence 128, fp32, Adam
  efficientnet  EfficientNet-B0 (timm), 224x224, bf16 autocast, AdamW
  convnext      ConvNeXt-Tiny (timm), 224x224, bf16 autocast, AdamW
  resnet50      ResNet-50 (timm), 224x224, fp32, SGD with momentum
  resnet50-bf16, resnet50-ckpt, resnet50-accum   its variants, as GPT-2's
OOMSCOPE_FIT_SIZE, when set, is the batch (for `oomscope fit`). Prints `fits BATCH ...` with
PyTorch's allocated and reserved peaks, or `oom BATCH`."""
import contextlib
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


def autocast(bf16):
    return torch.autocast("cuda", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()


def train(model, optimizer, batch_fn, loss_fn, steps, bf16=False, accumulate=1):
    """STEPS optimizer steps, each over ACCUMULATE micro-batches."""
    model.train()
    for _ in range(steps):
        for _ in range(accumulate):
            inputs = batch_fn()
            with autocast(bf16):
                loss = loss_fn(model, inputs) / accumulate
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def gpt2(batch, steps, bf16=True, ckpt=False, accumulate=1):
    from transformers import GPT2Config, GPT2LMHeadModel
    config = GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257)
    with torch.device("cuda"):
        model = GPT2LMHeadModel(config)
    if ckpt:
        model.gradient_checkpointing_enable()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = lambda: torch.randint(0, config.vocab_size, (batch, 1024), device="cuda")  # noqa: E731
    train(model, optimizer, tokens, lambda m, t: m(t, labels=t).loss, steps, bf16, accumulate)


def bert(batch, steps):
    from transformers import BertConfig, BertForMaskedLM
    config = BertConfig()  # BERT-base: 12 layers, hidden 768, vocabulary 30 522
    with torch.device("cuda"):
        model = BertForMaskedLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def masked():
        tokens = torch.randint(0, config.vocab_size, (batch, 512), device="cuda")
        labels = torch.where(torch.rand(batch, 512, device="cuda") < 0.15, tokens, -100)
        return tokens, labels
    train(model, optimizer, masked, lambda m, x: m(input_ids=x[0], labels=x[1]).loss, steps, bf16=True)


def t5(batch, steps):
    from transformers import T5Config, T5ForConditionalGeneration
    # t5-small; the token ids the hub's config carries (transformers 5 has no default for them)
    config = T5Config(d_model=512, d_ff=2048, d_kv=64, num_layers=6, num_heads=8, vocab_size=32128,
                      decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    with torch.device("cuda"):
        model = T5ForConditionalGeneration(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    pair = lambda: (torch.randint(0, config.vocab_size, (batch, 512), device="cuda"),  # noqa: E731
                    torch.randint(0, config.vocab_size, (batch, 128), device="cuda"))
    train(model, optimizer, pair, lambda m, x: m(input_ids=x[0], labels=x[1]).loss, steps, bf16=True)


class LSTMLM(nn.Module):
    def __init__(self, vocab=32000, hidden=1024, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.lstm = nn.LSTM(hidden, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, tokens):
        out, _ = self.lstm(self.embed(tokens))
        return self.head(out)


def lstm(batch, steps):
    with torch.device("cuda"):
        model = LSTMLM()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    tokens = lambda: torch.randint(0, 32000, (batch, 129), device="cuda")  # noqa: E731

    def loss(m, t):
        logits = m(t[:, :-1])
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), t[:, 1:].reshape(-1))
    train(model, optimizer, tokens, loss, steps)


def timm_model(name, batch, steps, bf16, ckpt=False, accumulate=1, sgd=False):
    import timm
    with torch.device("cuda"):
        model = timm.create_model(name, pretrained=False)
    if ckpt:
        model.set_grad_checkpointing(True)
    optimizer = (torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9) if sgd
                 else torch.optim.AdamW(model.parameters(), lr=1e-3))
    images = lambda: (torch.randn(batch, 3, 224, 224, device="cuda"),  # noqa: E731
                      torch.randint(0, 1000, (batch,), device="cuda"))
    train(model, optimizer, images, lambda m, x: F.cross_entropy(m(x[0]), x[1]), steps, bf16, accumulate)


MODELS = {
    "gpt2": lambda b, s: gpt2(b, s),
    "gpt2-fp32": lambda b, s: gpt2(b, s, bf16=False),
    "gpt2-ckpt": lambda b, s: gpt2(b, s, ckpt=True),
    "gpt2-accum": lambda b, s: gpt2(b, s, accumulate=4),
    "bert": bert,
    "t5": t5,
    "lstm": lstm,
    "efficientnet": lambda b, s: timm_model("efficientnet_b0", b, s, bf16=True),
    "convnext": lambda b, s: timm_model("convnext_tiny", b, s, bf16=True),
    "resnet50": lambda b, s: timm_model("resnet50", b, s, bf16=False, sgd=True),
    "resnet50-bf16": lambda b, s: timm_model("resnet50", b, s, bf16=True, sgd=True),
    "resnet50-ckpt": lambda b, s: timm_model("resnet50", b, s, bf16=False, ckpt=True, sgd=True),
    "resnet50-accum": lambda b, s: timm_model("resnet50", b, s, bf16=False, accumulate=4, sgd=True),
}


def main():
    model = sys.argv[1]
    batch = int(os.environ.get("OOMSCOPE_FIT_SIZE") or sys.argv[2])
    steps = int(sys.argv[3] if len(sys.argv) > 3 else os.environ.get("OOMSCOPE_FIT_STEPS") or 5)
    torch.manual_seed(0)
    try:
        MODELS[model](batch, steps)
        torch.cuda.synchronize()
    except torch.OutOfMemoryError:
        print(f"oom {batch}")
        return 3
    except RuntimeError as e:
        # Out of memory where a library, not PyTorch's allocator, asked: cuBLAS creating the
        # handle of autograd's backward thread, cuDNN's workspace of an LSTM.
        if "ALLOC_FAILED" not in str(e) and "out of memory" not in str(e).lower():
            raise
        print(f"oom {batch} ({str(e).splitlines()[0]})")
        return 3
    print(f"fits {batch} allocated_peak {torch.cuda.max_memory_allocated()} "
          f"reserved_peak {torch.cuda.max_memory_reserved()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
