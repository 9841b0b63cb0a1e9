"""timm's `convnext_atto`, randomly initialised (`pretrained=False`: no download), in bf16, for the
H100 model table (`scripts/gpu_models.sh`). timm needs torchvision, which does not load against
this host's CPU torch build, so timm is imported only when the case is made (the file imports
anywhere). The model is built on the CPU; `minimize --module --device` moves it and its inputs."""

import torch


def make_case():
    import timm

    torch.manual_seed(0)
    model = timm.create_model("convnext_atto", pretrained=False, num_classes=100).to(torch.bfloat16).eval()
    return model, (torch.randn(2, 3, 224, 224, dtype=torch.bfloat16),)
