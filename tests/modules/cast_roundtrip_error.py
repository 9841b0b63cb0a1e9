"""The rounding error of an explicit float32 -> bfloat16 -> float32 round trip, y.to(bf16).to(fp32) - y:
a user measuring a quantization step. The output is that rounding alone, so it is as sensitive as an
output can be (the judge reads an ill-conditioned input); a compiler that drops the round trip
returns 0 everywhere, which no sensitivity explains."""

import torch


def quantization_error(x):
    y = x * 1.7
    return y.to(torch.bfloat16).to(torch.float32) - y


def make_case():
    torch.manual_seed(0)
    return quantization_error, (torch.randn(64, 64),)
