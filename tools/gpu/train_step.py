"""The workload gpu_bench measures against: run sizes and a ResNet-50 (or ResNet-18) training step with its batch on
the device."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
import torch.nn.functional as F

from tools.gpu.resnet import resnet18, resnet50

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
MODELS = {"resnet50": resnet50, "resnet18": resnet18}


@dataclasses.dataclass(frozen=True)
class Sizes:
    """What one run measures with: batch, image side, model width, timed steps, synthetic images.

    fed_steps_per_worker: part 3 times at least this many steps per worker, so that the
    bursts in which the workers deliver (up to one batch each) average out.
    """

    batch: int
    side: int
    width: int
    steps: int
    images: int
    fed_steps_per_worker: int


# 1024 images suffice: part 3 cycles over them, and generating them is single-threaded.
FULL = Sizes(batch=256, side=224, width=64, steps=30, images=1024, fed_steps_per_worker=8)
SMOKE = Sizes(batch=4, side=32, width=8, steps=2, images=24, fed_steps_per_worker=1)


def train_step_fn(device: torch.device, sizes: Sizes,
                  model_name: str = "resnet50") -> Callable[[torch.Tensor, torch.Tensor], None]:
    """A ResNet-50 (or ``model_name`` of ``MODELS``) SGD step (AMP bf16, channels_last) on ``device`` as
    ``step(images, labels)``.

    images: bfloat16 [B, 3, side, side] channels_last; labels: int64 [B] in 0..999; both on
    ``device``. bf16 has fp32's exponent range, so no GradScaler (fp16 would need one).
    """
    model = MODELS[model_name](width=sizes.width).train()
    # Module.to takes memory_format at run time; torch's stubs list only device/dtype/tensor overloads.
    model = model.to(device, memory_format=torch.channels_last)  # type: ignore[call-overload]  # see above
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)

    def step(images: torch.Tensor, labels: torch.Tensor) -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def synthetic_batch(device: torch.device, sizes: Sizes) -> tuple[torch.Tensor, torch.Tensor]:
    """bf16 [B, 3, side, side] channels_last images and int64 [B] labels, already on ``device``."""
    images = torch.randn(sizes.batch, 3, sizes.side, sizes.side, device=device)
    labels = torch.randint(0, 1000, (sizes.batch,), device=device)
    return images.to(torch.bfloat16, memory_format=torch.channels_last), labels
