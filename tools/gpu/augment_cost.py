"""The GPU augmentation's cost per batch as a share of one training step (gpu_bench part 2)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from loaders.augment import Augment, BatchOp, ColorJitter, RandomHorizontalFlip, RandomResizedCrop, batch_generator
from tools.gpu.timing import time_ms
from tools.gpu.train_step import IMAGENET_MEAN, IMAGENET_STD, Sizes, synthetic_batch

TARGET_AUGMENT_FRACTION = 0.03


def measure_augment(device: torch.device, sizes: Sizes, step: Callable[..., None]) -> dict[str, Any]:
    """Part 2: ms per batch of the full Augment pipeline vs ms per training step, and beside it
    the same ops chained one pass each in float32 (how Augment ran before its passes were fused)."""
    images = torch.randint(0, 256, (sizes.batch, sizes.side, sizes.side, 3), dtype=torch.uint8, device=device)
    ops: list[BatchOp] = [RandomResizedCrop(sizes.side), RandomHorizontalFlip(), ColorJitter(0.4, 0.4, 0.4)]
    batch, labels = synthetic_batch(device, sizes)
    step_ms = time_ms(lambda: step(batch, labels), device, repeats=sizes.steps)
    out: dict[str, Any] = {"batch": sizes.batch, "side": sizes.side, "step_ms": step_ms, "augment": []}
    for dtype in (torch.bfloat16, torch.float16):
        augment = Augment(ops, out_dtype=dtype, mean=IMAGENET_MEAN, std=IMAGENET_STD)
        contiguous = Augment(ops, out_dtype=dtype, mean=IMAGENET_MEAN, std=IMAGENET_STD, channels_last=False)
        runs: dict[str, Callable[[], Any]] = {
            "Augment": functools.partial(augment, images),
            "Augment, contiguous out": functools.partial(contiguous, images),
            "unfused float32 chain": functools.partial(_chained, images, ops, dtype)}
        for name, run in runs.items():
            ms = time_ms(run, device, repeats=max(sizes.steps, 10))
            fraction = ms / step_ms
            out["augment"].append({"pipeline": name, "out_dtype": str(dtype).removeprefix("torch."), "ms": ms,
                                   "fraction_of_step": fraction, "meets_target": fraction < TARGET_AUGMENT_FRACTION})
    if device.type == "cuda":
        bf16 = Augment(ops, out_dtype=torch.bfloat16, mean=IMAGENET_MEAN, std=IMAGENET_STD)
        out["kernels"] = kernel_times(functools.partial(bf16, images), repeats=10)
    return out


def kernel_times(fn: Callable[[], object], *, repeats: int, top: int = 10) -> list[dict[str, Any]]:
    """The ``top`` CUDA kernels of ``fn`` by device time: name, calls and ms per call of ``fn``,
    from torch.profiler over ``repeats`` calls (after one untimed call)."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(repeats):
            fn()
        torch.cuda.synchronize()
    rows = [{"kernel": event.key[:90], "calls": event.count // repeats,
             "ms": getattr(event, "self_device_time_total", 0.0) / 1e3 / repeats}
            for event in prof.key_averages()]
    return sorted((r for r in rows if r["ms"] > 0), key=lambda r: -r["ms"])[:top]

def _chained(images: torch.Tensor, ops: list[BatchOp], dtype: torch.dtype) -> torch.Tensor:
    """The ops one after another in float32, each its own pass(es), then normalise and cast:
    the same work as ``Augment`` without its fusions (the baseline it is measured against)."""
    gen = batch_generator(0, 0, 0, images.device)
    floats = images.permute(0, 3, 1, 2).to(torch.float32).div_(255.0)
    for op in ops:
        floats = op(floats, gen)
    mean = torch.tensor(IMAGENET_MEAN, device=images.device).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD, device=images.device).view(1, 3, 1, 1)
    return ((floats - mean) / std).to(dtype=dtype, memory_format=torch.channels_last)
