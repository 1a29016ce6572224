"""ResNet-50 and ResNet-18 written out in torch (torchvision may be absent): the models of ``tools.gpu.gpu_bench``
and the device suite."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Bottleneck(nn.Module):
    """ResNet v1.5 bottleneck: 1x1 reduce, 3x3 (stride here), 1x1 expand x4, residual."""

    def __init__(self, in_ch: int, mid: int, stride: int) -> None:
        super().__init__()
        out = mid * 4
        self.body = nn.Sequential(
            nn.Conv2d(in_ch, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(inplace=True),
            nn.Conv2d(mid, mid, 3, stride, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(inplace=True),
            nn.Conv2d(mid, out, 1, bias=False), nn.BatchNorm2d(out),
        )
        needs_proj = stride != 1 or in_ch != out
        projection = nn.Sequential(nn.Conv2d(in_ch, out, 1, stride, bias=False), nn.BatchNorm2d(out))
        self.skip = projection if needs_proj else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.body(x) + self.skip(x))


def resnet50(num_classes: int = 1000, width: int = 64) -> nn.Module:
    """ResNet-50 (bottleneck blocks [3, 4, 6, 3]); ``width`` 64 is the standard model."""
    layers: list[nn.Module] = [nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
                               nn.MaxPool2d(3, 2, 1)]
    in_ch = width
    for stage, blocks in enumerate((3, 4, 6, 3)):
        mid = width * 2 ** stage
        for block in range(blocks):
            layers.append(Bottleneck(in_ch, mid, 2 if block == 0 and stage > 0 else 1))
            in_ch = mid * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(in_ch, num_classes)]
    return nn.Sequential(*layers)


class BasicBlock(nn.Module):
    """ResNet basic block: two 3x3 convolutions (stride in the first), residual."""

    def __init__(self, in_ch: int, out: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(in_ch, out, 3, stride, 1, bias=False), nn.BatchNorm2d(out), nn.ReLU(inplace=True),
            nn.Conv2d(out, out, 3, 1, 1, bias=False), nn.BatchNorm2d(out),
        )
        needs_proj = stride != 1 or in_ch != out
        projection = nn.Sequential(nn.Conv2d(in_ch, out, 1, stride, bias=False), nn.BatchNorm2d(out))
        self.skip = projection if needs_proj else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.body(x) + self.skip(x))


def resnet18(num_classes: int = 1000, width: int = 64) -> nn.Module:
    """ResNet-18 (basic blocks [2, 2, 2, 2]); ``width`` 64 is the standard model."""
    layers: list[nn.Module] = [nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
                               nn.MaxPool2d(3, 2, 1)]
    in_ch = width
    for stage in range(4):
        out = width * 2 ** stage
        for block in range(2):
            layers.append(BasicBlock(in_ch, out, 2 if block == 0 and stage > 0 else 1))
            in_ch = out
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(in_ch, num_classes)]
    return nn.Sequential(*layers)
