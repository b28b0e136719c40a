"""A small model and data for the examples: an MLP "language model" over random tokens, sized
so that a step takes milliseconds on a GPU and its activations are easy to see in a report."""
import argparse

import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self, vocab=8192, hidden=2048, layers=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.blocks = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(layers))
        self.head = nn.Linear(hidden, vocab)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = torch.relu(block(x))
        return self.head(x)


def arguments(steps=200):
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    return parser.parse_args()


def batch_of(args, seq=None, vocab=8192):
    tokens = torch.randint(0, vocab, (args.batch, seq or args.seq), device=args.device)
    return tokens, torch.roll(tokens, -1, dims=1)
