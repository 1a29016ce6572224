"""The versions a GPU measurement depends on: torch, its CUDA build, cuDNN, nvImageCodec, torchvision."""

from __future__ import annotations

from typing import Any

import torch


def versions(device: torch.device) -> dict[str, Any]:
    """torch, CUDA (the build's), cuDNN, nvImageCodec and torchvision versions; None where absent."""
    try:
        import torchvision
    except (ImportError, RuntimeError, OSError):  # a wheel built for another torch fails in its C ops
        vision = None
    else:
        vision = torchvision.__version__
    try:
        from nvidia import nvimgcodec
    except (ImportError, OSError):
        codec = None
    else:
        codec = nvimgcodec.__version__
    cuda = device.type == "cuda"
    return {"torch": torch.__version__, "cuda": torch.version.cuda if cuda else None,
            "cudnn": torch.backends.cudnn.version() if cuda else None, "nvimgcodec": codec, "torchvision": vision}
