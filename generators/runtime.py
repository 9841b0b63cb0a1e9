"""What a case needs at run time besides its graph, written once: the engine calls these functions,
and every script `reports/` generates carries their source (`divfuzz.reports.repro.carried_source`), so
a repro draws the same output gradients and finds a backend the same way the engine does.

Invariants: plain functions of their arguments (no divfuzz import, no state), so that their source
runs unchanged inside a standalone script that only has torch.
"""

from __future__ import annotations

import importlib

import torch

# Output gradients of a backward case are drawn from the recipe's seed plus this offset.
COTANGENT_SEED_OFFSET = 7919


def cotangents(outputs, seed):
    """Fixed random output gradients, one per floating output that requires grad (None for the
    others), drawn on the CPU from `seed + COTANGENT_SEED_OFFSET` and moved to each output."""
    g = torch.Generator().manual_seed(seed + COTANGENT_SEED_OFFSET)
    result = []
    for out in outputs:
        if isinstance(out, torch.Tensor) and out.is_floating_point() and out.requires_grad:
            result.append(torch.randn(out.shape, generator=g).to(dtype=out.dtype, device=out.device))
        else:
            result.append(None)
    return result


def import_backend(name):
    """`torch.compile`'s backend for `name`: the callable of a `module:function` import path, or a
    registered backend's name unchanged. Raises ImportError / AttributeError as importlib does."""
    if ":" not in name:
        return name
    module_name, _, attr = name.partition(":")
    return getattr(importlib.import_module(module_name), attr)
