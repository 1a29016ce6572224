"""JPEG decode rate: Pillow and the loader's crop decode on CPU threads vs the loader's device decode
(``decode="device"``: nvImageCodec decode + crop + resize of planned batches) with each backend there is, each
JPEG decoded in its crop's region or whole, and torchvision's batched GPU decode where it imports (gpu_bench
part 4, device_suite's decode step). Measures and prints; the default is picked from these rows by a person."""

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
    """JPEG decode on the CPU (``threads`` threads) vs batched on the device, images/s.

    cpu_full_img_s: Pillow, full size to RGB; cpu_loader_crop_img_s: the loader's
    ``RandomResizedCropDecode(side)`` (the CPU path: region decode at the DCT scale the crop
    allows, crop, resize, flip); the loader's device decode (``device_decode_rates``: every
    nvImageCodec backend of the device, region and whole-image decode); then torchvision's
    batched GPU decode (``gpu_decode_rates``), or ``gpu_skipped`` (why) off CUDA.
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
    out.update(device_decode_rates(device, jpegs, side=side, batch=batch))
    for row in out.get("device_variants", ()):
        if "img_s" in row:
            row["vs_cpu_crop"] = row["img_s"] / out["cpu_loader_crop_img_s"]
    if "device_crop_img_s" in out:
        out["device_vs_cpu_crop"] = out["device_crop_img_s"] / out["cpu_loader_crop_img_s"]
    if device.type != "cuda":
        return {**out, "gpu_skipped": "no CUDA device"}
    return {**out, **gpu_decode_rates(device, jpegs, side=side, batch=batch)}


def device_decode_rates(device: torch.device, jpegs: Sequence[bytes], *, side: int, batch: int) -> dict[str, Any]:
    """The loader's ``decode="device"`` path on ``device`` over ``jpegs``, in batches of ``batch``.

    device_variants: one row per backend of the device (CPU: "cpu"; CUDA: "hardware", "gpu",
    "hybrid", each alone) and per way of decoding (``regions``: each JPEG only in its crop's
    window, or whole): img_s (decode + random crop + resize to side x side + flip of batches
    already planned and packed: the workers' part is not timed), decode_only_img_s (the decoder
    calls alone, without the resize), decoder, host_retried, mad_mean / mad_worst
    (mean absolute difference, 8-bit levels, from the CPU path's crop of the same draws, over
    all images / the worst), or ``skipped`` (why). device_crop_img_s, device_decoder,
    device_mad_mean, device_mad_worst: the row of what ``decode="device"`` runs today (the
    first working backend, regions), or ``device_skipped`` (why).
    """
    from loaders.batch_decode import backend_for, device_decoder_problem
    from loaders.batch_decode.decoders import CUDA_BACKENDS, DecodeBackend

    problem = device_decoder_problem(device)
    if problem is not None:
        return {"device_skipped": problem}
    packed, cpu = _planned(jpegs, side, batch, pinned=device.type == "cuda")
    backends = CUDA_BACKENDS if device.type == "cuda" else (DecodeBackend.CPU,)
    rows = [_variant(device, backend, regions, packed, cpu) for backend in backends for regions in (True, False)]
    default = next(r for r in rows if r["backend"] == backend_for(device).value and r["regions"])
    return {"device_variants": rows, "device_crop_img_s": default["img_s"], "device_decoder": default["decoder"],
            "device_mad_mean": default["mad_mean"], "device_mad_worst": default["mad_worst"]}


def _planned(jpegs: Sequence[bytes], side: int, batch: int, *, pinned: bool) -> tuple[list[Any], list[np.ndarray]]:
    """The packed batches of ``jpegs`` planned by ``RandomResizedCropDecode(side)`` (sample i's rng seeded i),
    and the CPU path's crops of the same draws."""
    from loaders import RandomResizedCropDecode
    from loaders.batch_decode import pack_encoded
    from loaders.read.decode_plan import planning

    crop = RandomResizedCropDecode(side, field="jpg")
    samples = [{"jpg": data, "__index__": i} for i, data in enumerate(jpegs)]
    with planning():
        plans = [crop(dict(s), np.random.default_rng(i))["image"] for i, s in enumerate(samples)]
    packed = [pack_encoded(plans[k:k + batch], lambda shape, dtype: torch.empty(shape, dtype=dtype, pin_memory=pinned))
              for k in range(0, len(plans), batch)]
    return packed, [crop(dict(s), np.random.default_rng(i))["image"] for i, s in enumerate(samples)]


def _variant(device: torch.device, backend: Any, regions: bool, packed: Sequence[Any],
             cpu: Sequence[np.ndarray]) -> dict[str, Any]:
    """One row of ``device_decode_rates``: ``backend`` alone, region or whole-image decode."""
    from loaders.batch_decode import DeviceDecode, NvImageCodecDecoder
    from loaders.batch_decode.decoders import backend_problem

    row: dict[str, Any] = {"backend": backend.value, "regions": regions}
    problem = backend_problem(device, backend)
    if problem is not None:
        return {**row, "skipped": problem}
    decoder = DeviceDecode(device, NvImageCodecDecoder(device, backend, fallback=False), regions=regions)
    calls = [([e.encoded(r) for r in range(len(e))], _regions(e) if regions else [None] * len(e)) for e in packed]
    try:
        ms = host_time_ms(lambda: [decoder.decode_field(encoded) for encoded in packed], device, repeats=3)
        decode_ms = host_time_ms(lambda: [decoder.decoder.decode(*call) for call in calls], device, repeats=3)
        images = torch.cat([decoder.decode_field(encoded)[0].cpu() for encoded in packed]).numpy()
    finally:
        decoder.close()
    mads = [float(np.abs(c.astype(np.int16) - d.astype(np.int16)).mean()) for c, d in zip(cpu, images)]
    return {**row, "decoder": decoder.decoder.name, "img_s": len(cpu) * 1e3 / ms,
            "decode_only_img_s": len(cpu) * 1e3 / decode_ms, "mad_mean": float(np.mean(mads)),
            "mad_worst": max(mads), "host_retried": decoder.counts().host_retried}


def _regions(encoded: Any) -> list[Any]:
    """(top, left, bottom, right) of each sample's window in ``encoded`` (an ``EncodedBatch`` of JPEGs only)."""
    from loaders.batch_decode.geometry import windows_for

    rows = list(range(len(encoded)))
    windows = windows_for(rows, encoded.full_sizes, encoded.boxes, encoded.scales, encoded.flips, encoded.size,
                          encoded.interpolation)
    return [(w.top, w.left, w.bottom, w.right) for w in windows]


def gpu_decode_rates(device: torch.device, jpegs: Sequence[bytes], *, side: int, batch: int) -> dict[str, Any]:
    """torchvision's batched nvJPEG decode, for comparison (deprecated from torchvision 0.29; not what the loader
    runs): gpu_full_img_s: ``torchvision.io.decode_jpeg(list, device=...)`` on lists of ``batch``;
    gpu_resize_img_s: that, then each image resized to side x side on the GPU (what the CPU
    crop path delivers); gpu_batch; ``gpu_skipped`` (why) for what could not run."""
    try:
        import torchvision.io as tvio
    except (ImportError, RuntimeError, OSError) as err:  # a wheel built for another torch fails in its C ops
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
