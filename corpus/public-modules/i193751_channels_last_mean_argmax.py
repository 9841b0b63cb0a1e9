"""argmax of a trailing-dim mean over a channels_last input returns a physical, not logical, index.

issue: pytorch/pytorch#193751
expected: bug
device: any
grounds: fixed by maintainer jansel's PR 195063 ("Fixes #193751": emit the logical index for non-row-major fused inputs)

The reporter's repro: torch.manual_seed(1234); x = randn(4, 4, 8, 8) in channels_last; eager 14, compiled
25 on the 2.13 CPU."""

import torch


def fn(t):
    return torch.argmax(torch.mean(t, dim=-1))


def make_case():
    x = torch.randn(4, 4, 8, 8, generator=torch.Generator().manual_seed(1234)).to(memory_format=torch.channels_last)
    return fn, (x,)
