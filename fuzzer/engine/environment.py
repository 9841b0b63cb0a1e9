"""The versions a run and a bucket folder record: torch, Python, CUDA, Triton, the CPU's vector
ISA and the GPU's name. Read in the process that asks (the driver), never in a worker."""

from __future__ import annotations

import platform


def environment_versions(device: str) -> dict:
    import torch

    versions = {"torch": torch.__version__, "python": platform.python_version(), "cuda": torch.version.cuda,
                "cpu_capability": torch.backends.cpu.get_cpu_capability()}
    try:
        import triton

        versions["triton"] = triton.__version__
    except ImportError:
        versions["triton"] = None
    if device.startswith("cuda") and torch.cuda.is_available():
        versions["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return versions
