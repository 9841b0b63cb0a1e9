"""The versions a run and a bucket folder record: torch, Python, CUDA, Triton, the CPU's vector
ISA and the GPU's name. Read in the process that asks (the driver), never in a worker."""

from __future__ import annotations

import platform


def environment_versions(device: str) -> dict:
    # lazy: heavy: torch, read only when a run records its versions
    import torch

    versions = {"torch": torch.__version__, "python": platform.python_version(), "cuda": torch.version.cuda,
                "cpu_capability": torch.backends.cpu.get_cpu_capability()}
    try:
        # lazy: optional extra: triton ships with CUDA builds of torch only
        import triton

        versions["triton"] = triton.__version__
    except ImportError:
        versions["triton"] = None
    if device.startswith("cuda") and torch.cuda.is_available():
        versions["gpu"] = torch.cuda.get_device_name(torch.device(device))
        versions["gpu_capability"] = "sm_{}{}".format(*torch.cuda.get_device_capability(torch.device(device)))
    return versions
