"""Float floor division is off by one when the exact quotient lies just below an integer (1.0 // 0.1 gives 10).

issue: pytorch/pytorch#197895
expected: bug
device: any
grounds: labelled release triage; Inductor lowers float floor division to floor(div_rn(a, b)), eager uses an fmod-based algorithm

The reporter's inputs: a = [1.0, 0.5, 6.0, 1.0], b = [0.1, 0.1, 0.2, 1/3], in float32 and float64,
through a // b and torch.div(..., rounding_mode="floor")."""

import torch


def floordivs(a, b, a64, b64):
    return a // b, torch.div(a, b, rounding_mode="floor"), a64 // b64


def make_case():
    a = torch.tensor([1.0, 0.5, 6.0, 1.0])
    b = torch.tensor([0.1, 0.1, 0.2, 1 / 3])
    return floordivs, (a, b, a.double(), torch.tensor([0.1, 0.1, 0.2, 1 / 3], dtype=torch.float64))
