"""A small PyTorch test file for the pytest plugin's GPU scenario (issue 21): two tests within
their budgets, one that leaks (keeps tensors in a module-level list) and one over its peak
budget. Run as `oomscope run -- python3 -m pytest THIS_FILE`; exactly test_leaks and
test_over_budget must fail, each naming its line."""

import pytest
import torch

MiB = 1 << 20
kept = []


def matrix(mib):
    return torch.empty(mib * MiB // 4, dtype=torch.float32, device="cuda").normal_()


@pytest.mark.limit_gpu_leaks("16MiB")
def test_clean():
    x = matrix(64).view(-1, 4096)
    y = x @ x.T
    assert y.shape[0] == x.shape[0]


@pytest.mark.limit_gpu_leaks("16MiB")
def test_leaks():
    for _ in range(4):
        kept.append(matrix(64))  # the leak: 256 MiB kept after the test
    assert len(kept) == 4


@pytest.mark.limit_gpu_memory("1GiB")
def test_under_budget():
    x = matrix(256)
    assert float(x.abs().sum()) > 0


@pytest.mark.limit_gpu_memory("1GiB")
def test_over_budget():
    x = matrix(2048)  # the peak: 2 GiB at once
    assert float(x.abs().sum()) > 0
