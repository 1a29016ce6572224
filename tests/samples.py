"""Helpers shared by the tests of every package: photo-like images (``photo_pixels``, ``photo_jpeg``: height
then width, as numpy shapes), encoding images, reading tar shards back, waiting on a condition."""

from __future__ import annotations

import io
import subprocess
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from PIL import Image

from dataprep.formats.manifest import read_manifest
from dataprep.synthetic.photos import photo_like


def encode(image: np.ndarray | Image.Image, fmt: str, **params: object) -> bytes:
    """``image`` (a PIL image or uint8 [H, W, C] array) saved as ``fmt`` with Pillow's ``params``."""
    img = image if isinstance(image, Image.Image) else Image.fromarray(image)
    buffer = io.BytesIO()
    img.save(buffer, fmt, **params)
    return buffer.getvalue()


def tar_samples(out: Path) -> dict[str, dict[str, bytes]]:
    """key -> field -> bytes over every tar shard of a dataprep OUT, read with tarfile (not our index)."""
    samples: dict[str, dict[str, bytes]] = {}
    for info in read_manifest(out).shards:
        with tarfile.open(out / info.name) as tar:
            for member in tar:
                key, _, field = member.name.partition(".")
                data = tar.extractfile(member).read()  # type: ignore[union-attr]
                assert key not in samples or field not in samples[key], f"{member.name} appears twice"
                samples.setdefault(key, {})[field] = data
    return samples


def wait_until(ready: Callable[[], bool], *, proc: subprocess.Popen[str] | None = None,
               timeout_s: float = 60.0, poll_s: float = 0.0005) -> bool:
    """Poll ``ready()`` every ``poll_s`` until it holds: whether it did before ``timeout_s`` (a guard against a
    hang, not a bound on speed) and, with ``proc``, before that process ended."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and (proc is None or proc.poll() is None):
        if ready():
            return True
        time.sleep(poll_s)
    return ready() if proc is None else False


def photo_pixels(height: int, width: int, seed: int = 0) -> np.ndarray:
    """A photo-like RGB image: uint8 [H, W, 3], CPU, a function of ``seed``."""
    return photo_like(height, width, np.random.default_rng(seed))


def photo_jpeg(height: int, width: int, *, seed: int = 0, mode: str = "RGB", quality: int = 90,
               **options: object) -> bytes:
    """``photo_pixels(height, width, seed)`` as a JPEG (converted to ``mode`` first), with Pillow's ``options``."""
    buffer = io.BytesIO()
    Image.fromarray(photo_pixels(height, width, seed)).convert(mode).save(buffer, "JPEG", quality=quality, **options)
    return buffer.getvalue()
