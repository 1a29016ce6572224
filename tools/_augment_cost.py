"""The GPU augmentation's cost per batch as a share of one training step (gpu_bench part 2)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from loaders.augment import Augment, ColorJitter, RandomHorizontalFlip, RandomResizedCrop
from tools._gpu_timing import time_ms
from tools._train_step import IMAGENET_MEAN, IMAGENET_STD, Sizes, synthetic_batch

TARGET_AUGMENT_FRACTION = 0.03


def measure_augment(device: torch.device, sizes: Sizes, step: Callable[..., None]) -> dict[str, Any]:
    """Part 2: ms per batch of the full Augment pipeline vs ms per training step."""
    images = torch.randint(0, 256, (sizes.batch, sizes.side, sizes.side, 3), dtype=torch.uint8, device=device)
    ops = [RandomResizedCrop(sizes.side), RandomHorizontalFlip(), ColorJitter(0.4, 0.4, 0.4)]
    batch, labels = synthetic_batch(device, sizes)
    step_ms = time_ms(lambda: step(batch, labels), device, repeats=sizes.steps)
    out: dict[str, Any] = {"batch": sizes.batch, "side": sizes.side, "step_ms": step_ms, "augment": []}
    for dtype in (torch.bfloat16, torch.float16):
        augment = Augment(ops, out_dtype=dtype, mean=IMAGENET_MEAN, std=IMAGENET_STD)
        ms = time_ms(lambda: augment(images), device, repeats=max(sizes.steps, 10))
        fraction = ms / step_ms
        out["augment"].append({"out_dtype": str(dtype).removeprefix("torch."), "ms": ms,
                               "fraction_of_step": fraction, "meets_target": fraction < TARGET_AUGMENT_FRACTION})
    return out
