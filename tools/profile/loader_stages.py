"""Per-sample stage costs of the loader's work on one core, and what pre-resizing the shards would save.

``measure_stages`` times read, decode, transform, collate (and, with CUDA, the copy to the
device) on a sample of the shards; ``pre_resize_factor`` times the transform on the same
images as ``dataprep shard --resize-short 256`` would store them. Used by ``tools.profile.loader``.
"""

from __future__ import annotations

import io
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from dataprep.clean.images import clean_image
from dataprep.clean.options import ImageOptions
from dataprep.formats.samples import CleanRecord
from dataprep.inputs.records import RawRecord
from loaders import RandomResizedCropDecode
from loaders.loader.collate import default_collate
from loaders.read.decode import dct_scale_for, image_size
from loaders.read.transforms import random_resized_crop_box
from tools.common.loader_run import OUTPUT_SIZE, make_crop, make_dataset
from tools.common.shard_images import image_field_of

PRE_RESIZE_SHORT = 256
READ, DECODE, TRANSFORM, COLLATE, COPY = "read", "decode", "transform", "collate", "copy"
STAGES = (READ, DECODE, TRANSFORM, COLLATE, COPY)
STAGE_REPEAT = 2  # passes per stage timing, best kept


@dataclass(frozen=True)
class StageCost:
    """Seconds per sample of one stage on one core ("wall" for reads and copies, else thread "cpu")."""

    stage: str
    seconds_per_sample: float
    basis: str


def _timed(fn: Callable[[], Any], clock: Callable[[], float]) -> float:
    start = clock()
    fn()
    return clock() - start


def _best(fn: Callable[[], Any], clock: Callable[[], float] = time.thread_time) -> float:
    """Seconds of ``fn()`` on ``clock`` (thread CPU time by default), best of ``STAGE_REPEAT`` after a warm-up."""
    fn()  # first calls pay for imports and allocations, not the steady state
    return min(_timed(fn, clock) for _ in range(STAGE_REPEAT))


def _pick(count: int, n: int, seed: int) -> list[int]:
    pick_rng = np.random.default_rng(seed)
    return np.sort(pick_rng.choice(count, size=min(n, count), replace=False)).tolist()


def _decode_part(crop: RandomResizedCropDecode, data: bytes, rng: np.random.Generator) -> None:
    """Only the JPEG decode of ``crop``, at the DCT scale its box allows (the same draws as the transform)."""
    width, height = image_size(data)
    box = random_resized_crop_box(width, height, crop.scale, crop.ratio, rng)
    n = dct_scale_for((box[2], box[3]), (OUTPUT_SIZE, OUTPUT_SIZE))
    with Image.open(io.BytesIO(data)) as img:
        if n > 1 and img.format == "JPEG":
            img.draft("RGB", (max(1, width // n), max(1, height // n)))
        img.load()


def measure_stages(shard_dir: str | os.PathLike[str], *, sample_images: int, batch_size: int,
                   seed: int) -> tuple[tuple[StageCost, ...], float, int]:
    """(stage costs, mean bytes read per sample, samples timed) on ``sample_images`` samples of ``shard_dir``."""
    raw = make_dataset(shard_dir, transform=False, seed=seed)
    field = image_field_of(shard_dir)
    crop = make_crop(field)
    indices = _pick(len(raw), sample_images, seed)
    start = time.perf_counter()
    samples = [raw[i] for i in indices]  # timed once: the page cache as found
    costs = {READ: time.perf_counter() - start}

    def decode_all() -> None:
        for i, sample in enumerate(samples):
            _decode_part(crop, sample[field], np.random.default_rng(i))

    costs[DECODE] = _best(decode_all)
    fused = _best(lambda: [crop(s, np.random.default_rng(i)) for i, s in enumerate(samples)])
    costs[TRANSFORM] = max(fused - costs[DECODE], 0.0)
    outputs = [crop(s, np.random.default_rng(i)) for i, s in enumerate(samples)]
    batches = [outputs[k : k + batch_size] for k in range(0, len(outputs), batch_size)]
    costs[COLLATE] = _best(lambda: [default_collate(b) for b in batches])
    if torch.cuda.is_available():
        host = default_collate(batches[0])["image"].pin_memory()

        def copy_once() -> None:
            host.to("cuda", non_blocking=True)
            torch.cuda.synchronize()

        costs[COPY] = _best(copy_once, time.perf_counter) * len(batches)
    mean_bytes = float(np.mean([sum(len(v) for v in s.values() if isinstance(v, bytes)) for s in samples]))
    stages = tuple(StageCost(name, costs[name] / len(samples), "wall" if name in (READ, COPY) else "cpu")
                   for name in STAGES if name in costs)
    return stages, mean_bytes, len(samples)


def pre_resize_factor(shard_dir: str | os.PathLike[str], *, sample_images: int, seed: int) -> tuple[float, int]:
    """(transform CPU time on sampled images / on them as ``dataprep shard --resize-short 256`` stores them,
    images resized).

    The stored form is ``clean_image``'s output with that option (its default quality);
    (1.0, 0) when no sampled image has a short side above 256.
    """
    dataset = make_dataset(shard_dir, transform=False, seed=seed)
    field = image_field_of(shard_dir)
    crop = make_crop(field)
    originals = [dataset.shards.read(i)[field] for i in _pick(len(dataset), sample_images, seed)]
    small = [_as_pre_resized(d, field) for d in originals]
    resized = sum(a is not b for a, b in zip(originals, small))
    if not resized:
        return 1.0, 0

    def cost(images: list[bytes]) -> float:
        return _best(lambda: [crop({field: d}, np.random.default_rng(i)) for i, d in enumerate(images)])

    return cost(originals) / max(cost(small), 1e-9), resized


def _as_pre_resized(data: bytes, image_field: str) -> bytes:
    """``data`` as ``dataprep shard --resize-short 256`` would store it (the same object when no resize is needed)."""
    if min(image_size(data)) <= PRE_RESIZE_SHORT:
        return data
    with tempfile.TemporaryDirectory(prefix="tools-loader-") as tmp:
        path = Path(tmp) / f"x.{image_field}"
        path.write_bytes(data)
        out = clean_image(RawRecord("x", path.name, {image_field: str(path)}),
                          ImageOptions(resize_short=PRE_RESIZE_SHORT), None)
    if not isinstance(out, CleanRecord):
        return data  # cleaning would reject it: it would not be in the shards either way
    image = next((v for k, v in out.fields.items() if k in ("jpg", "png")), None)
    return image if isinstance(image, bytes) else data
