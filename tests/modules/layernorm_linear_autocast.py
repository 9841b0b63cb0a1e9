"""The project's first seed: LayerNorm(128) -> Linear under bf16 autocast (run with --autocast
bfloat16), on torch.randn(16, 256, 128) * 3 + 5. Compiled is closer to fp64 than eager (noise by
same()), yet the difference has a stage: the native_layer_norm decomposition (issue 168126)."""

import torch


def make_case():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.LayerNorm(128), torch.nn.Linear(128, 128))
    return model, (torch.randn(16, 256, 128) * 3 + 5,)
