"""adaptive_max_pool3d backward on a channels_last_3d input scatters the gradient to the wrong places.

issue: pytorch/pytorch#197888
expected: bug
device: cpu
grounds: labelled high priority; the CPU backward kernel reads a non-contiguous indices tensor through its raw pointer
train: yes

The reporter's model: F.adaptive_max_pool3d(t, (2, 3, 5)) on a randperm-valued channels_last_3d input
(forward values and indices agree; the gradient differs by up to 282). The excerpt cuts the input's last
dimension; 1x4x4x6x10 here."""

import torch
import torch.nn.functional as F


def f(t):
    return F.adaptive_max_pool3d(t, (2, 3, 5))


def make_case():
    g = torch.Generator().manual_seed(0)
    x = torch.randperm(1 * 4 * 4 * 6 * 10, generator=g).float().reshape(1, 4, 4, 6, 10)
    x = x.to(memory_format=torch.channels_last_3d).requires_grad_(True)
    return f, (x,)
