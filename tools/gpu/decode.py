"""JPEG decode rate: Pillow and the loader's crop decode on CPU threads vs torchvision's batched GPU decode
(gpu_bench part 4)."""

from __future__ import annotations

import io
import math
import tarfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from tools.gpu.timing import host_time_ms


def jpegs_in(shards: Path, limit: int) -> list[bytes]:
    """Up to ``limit`` JPEG members (``.jpg``) of the tar shards in ``shards``, in shard order."""
    found: list[bytes] = []
    for path in sorted(shards.glob("*.tar")):
        with tarfile.open(path) as tar:
            for member in tar:
                data = tar.extractfile(member) if member.name.endswith(".jpg") else None
                if data is not None:
                    found.append(data.read())
                if len(found) >= limit:
                    return found
    return found


def threaded_img_s(jpegs: Sequence[bytes], decode: Callable[[bytes], object], threads: int,
                   passes: int = 2) -> float:
    """Images/s of ``decode`` over ``jpegs`` on ``threads`` threads, best of ``passes`` after a warm-up."""
    chunks = [list(jpegs[k::threads]) for k in range(threads)]

    def work(chunk: list[bytes]) -> None:
        for data in chunk:
            decode(data)

    with ThreadPoolExecutor(max_workers=threads) as pool:
        best = math.inf
        for attempt in range(passes + 1):
            start = time.perf_counter()
            list(pool.map(work, chunks))
            if attempt:  # the first pass warms up
                best = min(best, time.perf_counter() - start)
    return len(jpegs) / best


def _pillow_rgb(data: bytes) -> object:
    with Image.open(io.BytesIO(data)) as img:
        return img.convert("RGB")


def measure_decode(device: torch.device, jpegs: Sequence[bytes], *, threads: int, side: int,
                   batch: int = 256) -> dict[str, Any]:
    """JPEG decode on the CPU (``threads`` threads) vs batched on the GPU, images/s.

    cpu_full_img_s: Pillow, full size to RGB; cpu_loader_crop_img_s: the loader's
    ``RandomResizedCropDecode(side)`` (draft-mode decode at the DCT scale the crop allows,
    crop, resize, flip); then the GPU figures of ``gpu_decode_rates``, or ``gpu_skipped``
    (why) off CUDA.
    """
    from loaders import RandomResizedCropDecode

    if not jpegs:
        return {"skipped": "no JPEG images to decode"}
    crop = RandomResizedCropDecode(side, field="jpg")
    rng = np.random.default_rng(0)
    out: dict[str, Any] = {"images": len(jpegs), "mean_kib": sum(map(len, jpegs)) / len(jpegs) / 1024,
                           "threads": threads,
                           "cpu_full_img_s": threaded_img_s(jpegs, _pillow_rgb, threads),
                           "cpu_loader_crop_img_s": threaded_img_s(jpegs, lambda d: crop({"jpg": d}, rng), threads)}
    if device.type != "cuda":
        return {**out, "gpu_skipped": "no CUDA device"}
    return {**out, **gpu_decode_rates(device, jpegs, side=side, batch=batch)}


def gpu_decode_rates(device: torch.device, jpegs: Sequence[bytes], *, side: int, batch: int) -> dict[str, Any]:
    """gpu_full_img_s: ``torchvision.io.decode_jpeg(list, device=...)`` on lists of ``batch``;
    gpu_resize_img_s: that, then each image resized to side x side on the GPU (what the CPU
    crop path delivers); gpu_batch; ``gpu_skipped`` (why) for what could not run."""
    try:
        import torchvision.io as tvio
    except ImportError as err:
        return {"gpu_skipped": f"torchvision not importable: {err}"}
    data = [torch.frombuffer(bytearray(j), dtype=torch.uint8) for j in jpegs]
    lists = [data[k : k + batch] for k in range(0, len(data), batch)]

    def decode_all(resize: bool) -> None:
        for chunk in lists:
            images = tvio.decode_jpeg(chunk, mode=tvio.ImageReadMode.RGB, device=device)
            if resize:
                torch.stack([F.interpolate(im[None].float(), size=(side, side), mode="bilinear")[0] for im in images])

    out: dict[str, Any] = {}
    try:
        out["gpu_full_img_s"] = len(jpegs) * 1e3 / host_time_ms(lambda: decode_all(False), device, repeats=3)
        out["gpu_resize_img_s"] = len(jpegs) * 1e3 / host_time_ms(lambda: decode_all(True), device, repeats=3)
    except (RuntimeError, TypeError, ValueError) as err:
        # An older torchvision decodes no lists, nvJPEG may be missing: say why, keep the rest.
        out["gpu_skipped"] = f"torchvision.io.decode_jpeg on {device} failed: {err}"
    out["gpu_batch"] = batch
    return out


def measure_gpu_decode(device: torch.device, shards: Path | None) -> dict[str, Any]:
    """Part 4: ``measure_decode`` on up to 256 JPEGs of ``shards`` with every available core."""
    if device.type != "cuda" or shards is None:
        return {"skipped": "needs CUDA and shards"}
    from loaders import cpus_available

    jpegs = jpegs_in(shards, 256)
    if not jpegs:
        return {"skipped": f"no .jpg members in the shards of {shards}"}
    return measure_decode(device, jpegs, threads=cpus_available(), side=224)
