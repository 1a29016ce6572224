"""Helpers shared by the tests of every package: encoding images, reading tar shards back."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np
from PIL import Image

from dataprep.manifest import read_manifest


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
