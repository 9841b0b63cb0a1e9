"""aten.eq of a bf16 tensor with the Python float 3.14 compares against the unrounded scalar (CUDA).

issue: pytorch/pytorch#173987
expected: bug
device: cuda
grounds: labelled high priority; fixed by PR 175807 ("Fixes: #173987": round scalars to the tensor dtype for comparison ops)

The reporter's input is randn(3, 1, 64, 128) bf16 (unseeded); plain randn holds no 3.14, so a few
elements equal to bf16(3.14) = 3.140625 are planted to make the difference visible."""

import torch


def model_func(x):
    return torch.ops.aten.eq(x, other=3.14)


def make_case():
    x = torch.randn(3, 1, 64, 128, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    x.view(-1)[::1000] = 3.140625
    return model_func, (x,)
