"""Encoded images read from a shard directory through its index: which field holds the image, a seeded sample.

Used by ``tools.profile.cpu`` (its per-core cases), ``tools.common.loader_run`` (the field a
configuration loads) and ``tools.bench.peer_bench``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from loaders.read.decode import image_size
from loaders.read.shards import TarShardSet
from loaders.read.transforms import IMAGE_FIELDS
from tools.common.report import ToolError, check_int


@dataclass(frozen=True)
class ShardImages:
    """Encoded images sampled from a shard directory: field ``field`` of the samples ``indices``.

    Samples without the field (mixed shards) are not in ``images``. sizes: (width, height)
    pixels from the headers; read_seconds: wall time of the preads (page cache as found).
    """

    shard_dir: str
    field: str
    num_samples: int
    indices: tuple[int, ...]
    images: tuple[bytes, ...]
    sizes: tuple[tuple[int, int], ...]
    read_seconds: float

    @property
    def megapixels(self) -> float:
        return sum(w * h for w, h in self.sizes) / 1e6

    def summary(self) -> dict[str, Any]:
        """Count, mean width/height (pixels), mean and total bytes, read time: the JSON ``images`` block."""
        return {"field": self.field, "count": len(self.images), "num_samples": self.num_samples,
                "mean_width": float(np.mean([w for w, _ in self.sizes])),
                "mean_height": float(np.mean([h for _, h in self.sizes])),
                "mean_bytes": float(np.mean([len(d) for d in self.images])),
                "total_bytes": sum(len(d) for d in self.images), "read_seconds": self.read_seconds}


def image_field_of(shard_dir: str | os.PathLike[str]) -> str:
    """The first of ``loaders.read.transforms.IMAGE_FIELDS`` the shards hold; ``ToolError`` if none."""
    return _image_field(TarShardSet(shard_dir))


def _image_field(shards: TarShardSet) -> str:
    found = next((f for f in IMAGE_FIELDS if f in shards.fields), None)
    if found is None:
        raise ToolError(f"{shards.root}: no image field in the shards (looked for {list(IMAGE_FIELDS)}, "
                        f"found {list(shards.fields)})")
    return found


def read_field(shard_dir: str | os.PathLike[str], image_field: str, indices: Sequence[int]) -> list[bytes]:
    """Field ``image_field`` of each sample in ``indices`` (one ``pread`` each); samples without it are left out."""
    shards = TarShardSet(shard_dir, fields=(image_field,))
    try:
        return [data for i in indices if (data := shards.read(i).get(image_field)) is not None]
    finally:
        shards.close()


def read_images(shard_dir: str | os.PathLike[str], n: int, *, seed: int = 0) -> ShardImages:
    """Sample ``min(n, samples)`` distinct images (in index order) of the image field ``image_field_of`` finds.

    Raises ``ShardError`` for an unreadable directory, ``ToolError`` when there is no image.
    """
    check_int("n", n, 1)
    probe = TarShardSet(shard_dir)  # opens no shard file: only the manifest and the index sidecars
    image_field, num_samples = _image_field(probe), len(probe)
    pick_rng = np.random.default_rng(seed)
    indices = np.sort(pick_rng.choice(num_samples, size=min(n, num_samples), replace=False)).tolist()
    start = time.perf_counter()
    images = read_field(shard_dir, image_field, indices)
    read_seconds = time.perf_counter() - start
    if not images:
        raise ToolError(f"{shard_dir}: none of the {len(indices)} sampled samples has a {image_field!r} field")
    sizes = tuple(image_size(d) for d in images)
    return ShardImages(shard_dir=str(shard_dir), field=image_field, num_samples=num_samples, indices=tuple(indices),
                       images=tuple(images), sizes=sizes, read_seconds=read_seconds)
