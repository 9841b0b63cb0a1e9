"""A float16 cast that underflows small values to zero, then a reciprocal: eager's 1 / 0 is inf
(as is fp64's, which keeps the model's cast), and the compiled CPU kernel (torch 2.13), which
drops the cast, returns finite values there. The rounding decides an infinity: a wrong answer,
not elidable noise."""

import torch


def inverse_of_rounded(x):
    return 1.0 / (x * 1e-4).to(torch.float16).float()


def make_case():
    return inverse_of_rounded, (torch.linspace(-1e-3, 1e-3, 1001),)
