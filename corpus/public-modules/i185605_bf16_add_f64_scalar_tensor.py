"""bf16 tensor plus a 0-dim float64 tensor: 0.1 + (-0.1) gives 9.8e-05 compiled where eager gives 0 (CUDA).

issue: pytorch/pytorch#185605
expected: not-bug
device: cuda
grounds: eellison: "Fixed with emulate precision casts."; closed

Eager rounds the 0-dim float64 operand to bf16 before the add; Inductor adds it in fp32, so bf16(0.1)
plus -0.1 is no longer exactly zero."""

import torch


def fn(x, s):
    return torch.add(x, s)


def make_case():
    x = torch.tensor([0.1, 0.5, 1.1], dtype=torch.bfloat16)
    s = torch.tensor(-0.1, dtype=torch.float64)
    return fn, (x, s)
