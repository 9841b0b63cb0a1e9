"""2 ** s in the float32 subnormal range is the subnormal in eager, 0.0 under Inductor + Triton on CUDA.

issue: pytorch/pytorch#125557
expected: not-bug
device: cuda
grounds: flush-to-zero is the default of CUDA Inductor kernels; exact subnormals are the opt-in eager-numerics mode (emulate_precision_casts disables FTZ since PR 185878)

The reporter's values: s in (-126, -127, -149, -150), the normal/subnormal and subnormal/zero boundaries."""

import torch


def f(s):
    return 2.0 ** s


def make_case():
    return f, (torch.tensor([-126.0, -127.0, -149.0, -150.0]),)
