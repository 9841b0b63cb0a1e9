"""An explicit float32 -> float16 -> float32 round trip, then a row sum (issue 185337's model, on
other numbers): the user asks for the fp16 rounding, so a compiler that drops it is wrong, even
though emulate_precision_casts puts it back."""

import torch


def rounded_rows(x):
    y = x.to(dtype=torch.float16).to(dtype=torch.float32)
    return y, y.sum(dim=1)


def make_case():
    x = torch.arange(96, dtype=torch.float32).reshape(8, 12) / 7.0
    return rounded_rows, (x,)
