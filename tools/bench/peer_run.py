"""The measuring parts of ``tools.bench.peer_bench``: the rows' loaders, the user's PIL transform, one epoch,
the ceiling.

Every row reads the same JPEG bytes from the shards through our index
(``ShardDataset(fields=(image,))``); see ``tools.bench.peer_bench`` for the rows and the method.
"""

from __future__ import annotations

import gc
import io
import math
import multiprocessing
import os
import resource
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.utils.data
from PIL import Image

from loaders import DataLoader, RandomResizedCropDecode, ShardDataset
from loaders.read.decode import image_size
from loaders.read.transforms import random_resized_crop_box
from tools.common.loader_run import batch_length
from tools.common.report import ToolError

OUTPUT_SIZE = 224
SCALE = (0.08, 1.0)
RATIO = (3 / 4, 4 / 3)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
STOCK_UINT8, STOCK_FLOAT32, OURS_FUSED, OURS_PIL = "stock-uint8", "stock-float32", "ours-fused", "ours-pil"
OURS_PIL_PROCESS = "ours-pil-process"
ROWS = (STOCK_UINT8, STOCK_FLOAT32, OURS_FUSED, OURS_PIL, OURS_PIL_PROCESS)
REFERENCE = STOCK_UINT8
ROW_NOTES = {
    STOCK_UINT8: "torch DataLoader, process workers, PIL transform -> uint8 CHW",
    STOCK_FLOAT32: "torch DataLoader, process workers, PIL transform -> float32 CHW normalised",
    OURS_FUSED: "loaders.DataLoader, thread workers, RandomResizedCropDecode -> uint8 HWC",
    OURS_PIL: "loaders.DataLoader, worker_type auto, the same PIL transform -> uint8 CHW",
    OURS_PIL_PROCESS: "loaders.DataLoader, worker_type process, the same PIL transform -> uint8 CHW",
}
CEILING_PASSES = 3


# ---------------------------------------------------------------- the user's PIL transform


@dataclass(frozen=True)
class PilCrop:
    """A user's own transform, as a torchvision script would write it, with Pillow and torch only.

    Full decode (``Image.open(...).convert("RGB")``), RandomResizedCrop box drawn from ``rng``
    (torchvision's get_params), bilinear ``resize(box=)`` to ``size`` x ``size``, flip with p 0.5.
    Output ``sample["image"]``: uint8 [3, size, size] CPU (a permuted view of a copy, as ``PILToTensor``),
    or with ``normalise`` float32 [3, size, size] (``ToTensor`` + ``Normalize``, ImageNet stats).
    The encoded ``field`` is dropped; other keys are kept.
    """

    field: str
    size: int = OUTPUT_SIZE
    normalise: bool = False

    def __call__(self, sample: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        with Image.open(io.BytesIO(sample[self.field])) as img:
            rgb = img.convert("RGB")
        left, top, width, height = random_resized_crop_box(rgb.width, rgb.height, SCALE, RATIO, rng)
        out = rgb.resize((self.size, self.size), Image.Resampling.BILINEAR, box=(left, top, left + width, top + height))
        if rng.random() < 0.5:
            out = out.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        image = torch.from_numpy(np.array(out)).permute(2, 0, 1)  # a copy, as torchvision's pil_to_tensor
        if self.normalise:
            image = image.contiguous().to(torch.float32).div(255)
            image.sub_(torch.tensor(IMAGENET_MEAN).view(3, 1, 1)).div_(torch.tensor(IMAGENET_STD).view(3, 1, 1))
        result = {k: v for k, v in sample.items() if k != self.field}
        result["image"] = image
        return result



@dataclass(frozen=True)
class EpochRun:
    """One row in one round: ``samples`` in ``batches`` batches; wall seconds; CPU seconds (process + reaped
    children)."""

    round_index: int
    samples: int
    batches: int
    seconds: float
    first_batch_s: float
    first_batch_samples: int
    cpu_seconds: float

    @property
    def images_per_s(self) -> float:
        """After the first batch (the whole epoch when it had one batch)."""
        if self.batches > 1 and self.seconds > self.first_batch_s:
            return (self.samples - self.first_batch_samples) / (self.seconds - self.first_batch_s)
        return self.samples / self.seconds if self.seconds > 0 else 0.0



def round_orders(rows: Sequence[str], rounds: int) -> list[tuple[str, ...]]:
    """The order of ``rows`` in each round: rotated by one per round (round r starts at row r mod n)."""
    n = len(rows)
    return [tuple(rows[(r + k) % n] for k in range(n)) for r in range(rounds)]


def cpu_seconds() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def make_loader(row: str, shard_dir: Path, image_field: str, *, workers: int, batch_size: int, seed: int) -> Any:
    """A fresh loader for ``row``; workers are not persistent: one epoch each."""
    if row == OURS_FUSED:
        transform: Any = RandomResizedCropDecode(OUTPUT_SIZE, scale=SCALE, ratio=RATIO, field=image_field)
    else:
        transform = PilCrop(image_field, normalise=row == STOCK_FLOAT32)
    dataset = ShardDataset(shard_dir, fields=(image_field,), seed=seed, transform=transform)
    if row in (STOCK_UINT8, STOCK_FLOAT32):
        return torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=workers,
                                           generator=torch.Generator().manual_seed(seed))
    worker_type = {OURS_FUSED: "thread", OURS_PIL: "auto", OURS_PIL_PROCESS: "process"}[row]
    # Not persistent, as stock's default: each epoch's worker processes end with it, so their CPU
    # time is in RUSAGE_CHILDREN when run_epoch reads it.
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=workers, persistent_workers=False,
                      worker_type=worker_type if workers else "auto", seed=seed)


def worker_label(row: str, loader: Any, workers: int) -> str:
    """The workers ``loader`` ran with: "process", "thread" or "main"; ``OURS_PIL``'s as "auto (what it chose)"."""
    if not workers:
        return "main"
    chosen = str(getattr(getattr(loader, "worker_type", None), "value", "process"))  # the stock loader: processes
    return f"auto ({chosen})" if row == OURS_PIL else chosen


def run_epoch(loader: Any, max_batches: int | None, round_index: int) -> EpochRun:
    """Iterate one epoch of ``loader`` (at most ``max_batches``); the loader's workers are
    shut down and reaped before the CPU reading, so their time is in RUSAGE_CHILDREN."""
    cpu0 = cpu_seconds()
    samples = first_samples = batches = 0
    first_at = last_at = 0.0
    start = time.perf_counter()
    iterator = iter(loader)
    try:
        for batch in iterator:
            last_at = time.perf_counter()
            n = batch_length(batch)
            if not batches:
                first_at, first_samples = last_at, n
            batches += 1
            samples += n
            del batch
            if max_batches is not None and batches >= max_batches:
                break
    finally:
        close = getattr(iterator, "close", None)  # ours is a generator: closing ends the epoch now
        if callable(close):
            close()
        del iterator  # the stock iterator joins its workers when collected
        gc.collect()
        multiprocessing.active_children()  # reaps any finished multiprocessing children
    cpu = cpu_seconds() - cpu0
    seconds = (last_at if batches else time.perf_counter()) - start
    return EpochRun(round_index=round_index, samples=samples, batches=batches, seconds=seconds,
                    first_batch_s=(first_at - start) if batches else seconds, first_batch_samples=first_samples,
                    cpu_seconds=cpu)


def sample_bytes(shard_dir: Path, image_field: str, count: int) -> list[bytes]:
    dataset = ShardDataset(shard_dir, fields=(image_field,))
    try:
        step = max(1, len(dataset) // count)
        return [dataset[i][image_field] for i in range(0, len(dataset), step)][:count]
    finally:
        dataset.shards.close()


def measure_ceiling(datas: Sequence[bytes], image_field: str) -> tuple[float, float]:
    """(PIL full decode + crop + resize + flip, fused ``RandomResizedCropDecode``) ms per image
    on one core, bytes in RAM: best of ``CEILING_PASSES`` passes of this thread's CPU time (so other
    load on a shared machine does not lower the ceiling)."""
    if not datas:
        raise ToolError("no images to time the ceiling on: the shards hold no samples")
    pil = PilCrop(image_field)
    fused = RandomResizedCropDecode(OUTPUT_SIZE, scale=SCALE, ratio=RATIO, field=image_field)
    best = []
    for transform in (pil, fused):
        times = []
        for p in range(CEILING_PASSES):
            rng = np.random.default_rng(p)
            start = time.thread_time()
            for k, data in enumerate(datas):
                transform({"__key__": str(k), "__index__": k, image_field: data}, rng)
            times.append(time.thread_time() - start)
        best.append(1e3 * min(times) / len(datas))
    return best[0], best[1]


def describe_data(shard_dir: Path, image_field: str, datas: Sequence[bytes]) -> dict[str, Any]:
    """Images in the shards, and the mean JPEG size (KB) and pixels (kpx) of the ceiling's sample."""
    dataset = ShardDataset(shard_dir, fields=(image_field,))
    try:
        images = len(dataset)
    finally:
        dataset.shards.close()
    pixels = [math.prod(image_size(d)) for d in datas]
    return {"shard_dir": os.fspath(shard_dir), "field": image_field, "images": images,
            "sampled": len(datas), "mean_kb": statistics.fmean(len(d) for d in datas) / 1e3,
            "mean_kpx": statistics.fmean(pixels) / 1e3}


def transform_for(decode: str) -> Any:
    """The transform every row of ``remote_bench`` runs: None, ours (fused), or the peers' PIL crop."""
    if decode == "none":
        return None
    if decode == "fused":
        from loaders import RandomResizedCropDecode

        return RandomResizedCropDecode(224, field="jpg")
    return PilCrop("jpg")
