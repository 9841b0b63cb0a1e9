"""What a case needs at run time besides its graph, written once: the engine calls these functions,
and every script `reports/` generates carries their source (`divfuzz.reports.repro.carried_source`), so
a repro draws the same output gradients, finds a backend and keys Inductor's caches the same way
the engine does.

Invariants: plain functions of their arguments (no divfuzz import, no state of their own: the
cache key tag is torch's), so that their source runs unchanged inside a standalone script that
only has torch.
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


def same_layout_copy(x, dtype=None):
    """A copy of `x` (in `dtype`, else its own) with its strides, storage offset and overlap: its
    whole storage copied and viewed as `x` views its own, so a transposed, sliced, expanded or
    offset input stays so (`.to()` and `.clone()` make a non-dense tensor contiguous). Detached;
    the caller sets `requires_grad`."""
    x = x.detach()
    storage = torch.as_strided(x, (x.untyped_storage().nbytes() // x.element_size(),), (1,), 0)
    copied = storage.to(dtype) if dtype is not None and dtype != x.dtype else storage.clone()
    return torch.as_strided(copied, x.shape, x.stride(), x.storage_offset())


def import_backend(name):
    """`torch.compile`'s backend for `name`: the callable of a `module:function` import path, or a
    registered backend's name unchanged. Raises ImportError / AttributeError as importlib does."""
    if ":" not in name:
        return name
    module_name, _, attr = name.partition(":")
    return getattr(importlib.import_module(module_name), attr)


def key_compile_caches_by_cpu_isa():
    """Inductor's FX-graph and AOTAutograd cache keys leave out the CPU vector ISA the C++ was
    generated for, and `ATEN_CPU_CAPABILITY` (or a cache restored on another CPU) changes that ISA:
    a graph cached by an AVX512 run came back, 512-bit loops and all, into an avx2 run built for
    256-bit vectors (measured: NaN and garbage), and a repro.py run in torch's default cache after
    a run under `ATEN_CPU_CAPABILITY=avx2` aborted in `free(): invalid pointer` (issue 35). What
    picks the ISA (the capability ATen dispatches to, which Inductor follows, and the host's
    VNNI/AMX) goes into every cache key through torch's own cache tag, which this returns
    (idempotent). Cheap: no probe compile. divfuzz's workers and every repro.py call it first."""
    extras = [name for name, has in (("vnni", torch.cpu._is_vnni_supported()), ("amx", torch.cpu._is_amx_tile_supported())) if has]
    tag = "divfuzz-cpu=" + "+".join([torch.backends.cpu.get_cpu_capability().lower(), *extras])
    config = torch.compiler.config
    if tag not in config.cache_key_tag.split():
        config.cache_key_tag = f"{config.cache_key_tag} {tag}".strip()
    return config.cache_key_tag
