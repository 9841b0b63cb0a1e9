"""torchvision's ResNet-50, randomly initialised (`weights=None`: no download), in bf16, for the
H100 model table (`scripts/gpu_models.sh`). torchvision is imported only when the case is made
(it does not load against this host's CPU torch build). Batch norms run in inference mode
(divfuzz puts every module in `.train(False)`, also under `--train`, so that steps are repeatable).
The model is built on the CPU; `minimize --module --device` moves it and its inputs."""

import torch


def make_case():
    from torchvision.models import resnet50

    torch.manual_seed(0)
    model = resnet50(weights=None, num_classes=100).to(torch.bfloat16).eval()
    return model, (torch.randn(2, 3, 224, 224, dtype=torch.bfloat16),)
