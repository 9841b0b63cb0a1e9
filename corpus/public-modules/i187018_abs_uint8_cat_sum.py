"""-abs of a uint8 tensor through cat and sum: std::abs integer promotion gives -800 instead of 224.

issue: pytorch/pytorch#187018
expected: bug
device: cpu
grounds: closed with PR 187024 ("Fixes #187018": CppOverrides.abs() emitted std::abs for unsigned types)

The reporter's repro: x = tensor([200, 200], uint8); y = -x.abs(); cat([y, y]).sum()."""

import torch


def f_bug(x):
    y = -x.abs()
    return torch.cat([y, y]).sum()


def make_case():
    return f_bug, (torch.tensor([200, 200], dtype=torch.uint8),)
