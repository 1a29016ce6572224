"""The versions a GPU measurement depends on: torch, its CUDA build, cuDNN, torchvision."""

from __future__ import annotations

from typing import Any

import torch


def versions(device: torch.device) -> dict[str, Any]:
    """torch, CUDA (the build's), cuDNN and torchvision versions; None where absent."""
    try:
        import torchvision
    except ImportError:
        vision = None
    else:
        vision = torchvision.__version__
    cuda = device.type == "cuda"
    return {"torch": torch.__version__, "cuda": torch.version.cuda if cuda else None,
            "cudnn": torch.backends.cudnn.version() if cuda else None, "torchvision": vision}
