"""Qwen3-style rotary embedding in bf16: compiled q/k differ from eager, but are closer to the fp32 result.

issue: pytorch/pytorch#159239
expected: not-bug
device: any
grounds: eellison: "Compared to the fp32 results, compiled gives both a smaller RMSE and smaller maximum error ... emulate_precision_casts will attempt to give more similar results"

The thread's apply_rotary_pos_emb / rotate_half (HF Qwen3, unsqueeze_dim=1); desertfire reproduced it on
the CPU as well. The thread's tensor shapes are not in the excerpt: q (1, 16, 64, 128), k (1, 8, 64, 128),
cos/sin (1, 64, 128), bf16, seeded randn here."""

import torch


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):
    cos = cos.unsqueeze(1)
    sin = sin.unsqueeze(1)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def make_case():
    g = torch.Generator().manual_seed(0)
    bf = torch.bfloat16
    q = torch.randn(1, 16, 64, 128, generator=g).to(bf)
    k = torch.randn(1, 8, 64, 128, generator=g).to(bf)
    cos = torch.randn(1, 64, 128, generator=g).to(bf)
    sin = torch.randn(1, 64, 128, generator=g).to(bf)
    return apply_rotary_pos_emb, (q, k, cos, sin)
