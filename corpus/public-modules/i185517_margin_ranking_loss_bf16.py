"""margin_ranking_loss backward in bf16 with a Python float margin gives zero gradients on the CPU.

issue: pytorch/pytorch#185517
expected: bug
device: cpu
grounds: labelled high priority; fixed by PR 185869 / 186818 ("Fixes #185517": round bf16 scalars to the tensor dtype)
train: yes

Eager rounds margin 1.7 to bf16 1.703125, so the clamp input is exactly 0 and the boundary gradient
flows (-0.5); Inductor kept 1.7 in fp32 and zeroed the gradient. Forward outputs agree."""

import torch
import torch.nn.functional as F


class MarginLoss(torch.nn.Module):
    def forward(self, x, y, t):
        return F.margin_ranking_loss(x, y, t, margin=1.7, reduction="mean")


def make_case():
    input1 = torch.tensor([1.703125, 1.703125], dtype=torch.bfloat16, requires_grad=True)
    input2 = torch.tensor([0.0, 0.0], dtype=torch.bfloat16, requires_grad=True)
    target = torch.tensor([1.0, 1.0], dtype=torch.bfloat16)
    return MarginLoss(), (input1, input2, target)
