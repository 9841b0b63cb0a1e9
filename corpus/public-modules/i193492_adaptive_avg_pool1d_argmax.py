"""argmax after adaptive_avg_pool1d of a transposed float64 view points at the wrong element.

issue: pytorch/pytorch#193492
expected: bug
device: any
grounds: closed with PR 194093 (require a contiguous input in the _adaptive_avg_pool2d lowering); eager 15, compiled 27 on CPU and CUDA

The reporter's repro: torch.manual_seed(123); x = torch.rand([4, 4, 3], float64).transpose(0, 1)."""

import torch


def fn(x):
    x = torch.adaptive_avg_pool1d(input=x, output_size=2)
    return torch.argmax(input=x)


def make_case():
    x = torch.rand([4, 4, 3], dtype=torch.float64, generator=torch.Generator().manual_seed(123)).transpose(0, 1)
    return fn, (x,)
