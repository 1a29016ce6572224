"""Helpers shared by the tests of every package: photo-like images (``photo_pixels``, ``photo_jpeg``: height
then width, as numpy shapes), encoding images, the one tiny image dataset builder (``image_dataset``: a raw
image-folder tree and its tar shards), reading tar shards back, waiting on a condition."""

from __future__ import annotations

import io
import subprocess
import tarfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from dataprep.formats.manifest import read_manifest
from dataprep.synthetic import SyntheticSpec, make_dataset
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


def wait_until(ready: Callable[[], bool], *, timeout_s: float = 300.0, poll_s: float = 0.01,
               proc: subprocess.Popen[Any] | None = None) -> bool:
    """Poll ``ready()`` every ``poll_s`` seconds until it holds: True; False only when ``proc`` ended first.

    ``timeout_s`` is a guard against a hang, never a bound on speed: past it the test fails
    (AssertionError naming the condition), so no caller can go on as if the condition held.
    """
    deadline = time.monotonic() + timeout_s
    while proc is None or proc.poll() is None:
        if ready():
            return True
        assert time.monotonic() < deadline, f"{getattr(ready, '__qualname__', ready)} never held in {timeout_s:g} s"
        time.sleep(poll_s)
    return ready()


def photo_pixels(height: int, width: int, seed: int = 0) -> np.ndarray:
    """A photo-like RGB image: uint8 [H, W, 3], CPU, a function of ``seed``."""
    return photo_like(height, width, np.random.default_rng(seed))


def photo_jpeg(height: int, width: int, *, seed: int = 0, mode: str = "RGB", quality: int = 90,
               **options: object) -> bytes:
    """``photo_pixels(height, width, seed)`` as a JPEG (converted to ``mode`` first), with Pillow's ``options``."""
    buffer = io.BytesIO()
    Image.fromarray(photo_pixels(height, width, seed)).convert(mode).save(buffer, "JPEG", quality=quality, **options)
    return buffer.getvalue()


@dataclass(frozen=True)
class ImageDataset:
    """What ``image_dataset`` made: ``raw``, the image-folder tree (None for given image bytes), and ``shards``, a
    ``ShardDataset`` directory (tar shards of ``{key}.jpg`` and ``{key}.cls``, index sidecars, a manifest)."""

    raw: Path | None
    shards: Path


def image_dataset(root: Path, images: int | Path | Sequence[bytes], *, classes: int = 3, seed: int = 1,
                  per_shard: int = 10, resize_short: int | None = None, order_seed: int | None = None) -> ImageDataset:
    """The tests' one tiny image dataset, in ``root/raw`` and ``root/shards``.

    ``images`` a count: that many photo-like images over ``classes`` class folders (``dataprep.synthetic``,
    ``seed``: with their caption and metadata sidecars, no broken files), sharded by ``dataprep shard
    --workers 1``, ``per_shard`` samples a shard, with ``--resize-short`` and ``--seed`` (``order_seed``) when
    given. ``images`` a folder: that image-folder tree, sharded the same way. ``images`` encoded images:
    those exact bytes (broken ones too) as samples ``sample{i:05d}.jpg`` with ``.cls`` = i, in tars of
    ``per_shard``, adopted with ``dataprep index`` (nothing cleaned or resized).
    """
    from dataprep.cli import main as dataprep_main

    out = root / "shards"
    if isinstance(images, int):
        spec = SyntheticSpec(images=images, classes=classes, seed=seed, broken=False, tables=False, text=False)
        raw = make_dataset(root / "raw", spec).root / "images"
    elif isinstance(images, Path):
        raw = images
    else:
        _write_tars(out, images, per_shard)
        assert dataprep_main(["index", str(out)]) == 0
        return ImageDataset(None, out)
    args = ["shard", str(raw), str(out), "--samples-per-shard", str(per_shard), "--workers", "1", "--no-progress"]
    args += ["--resize-short", str(resize_short)] if resize_short is not None else []
    args += ["--seed", str(order_seed)] if order_seed is not None else []
    assert dataprep_main(args) == 0, f"dataprep {' '.join(args)} failed"
    return ImageDataset(raw, out)


def _write_tars(directory: Path, images: Sequence[bytes], per_shard: int) -> None:
    directory.mkdir(parents=True)
    for first in range(0, len(images), per_shard):
        with tarfile.open(directory / f"part-{first // per_shard:03d}.tar", "w") as tar:
            for index in range(first, min(first + per_shard, len(images))):
                for suffix, data in (("jpg", images[index]), ("cls", str(index).encode())):
                    member = tarfile.TarInfo(f"sample{index:05d}.{suffix}")
                    member.size = len(data)
                    tar.addfile(member, io.BytesIO(data))
