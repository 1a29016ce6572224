"""One field of a batch as decode plans: the JPEG bytes of every sample in one buffer, offsets, boxes, flips.

What the loader's collate makes of a field whose samples are ``EncodedImage``s (workers with
``decode="device"``), and what crosses from the workers to the device decoder: one uint8 byte
buffer (pinned, or shared in a worker process: allocated by the caller) with the small
per-sample plan in numpy arrays beside it, and the few samples decoded in the worker (the
device decoder could not take them) in one uint8 image buffer. No per-sample tensor.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

from loaders.errors import BatchShapeError
from loaders.read.decode import Backend, Interpolation
from loaders.read.decode_plan import EncodedImage

__all__ = ["Allocate", "EncodedBatch", "pack_encoded"]

Allocate = Callable[[tuple[int, ...], torch.dtype], torch.Tensor]  # (shape, dtype) -> an uninitialised CPU tensor


@dataclass(frozen=True, slots=True, kw_only=True)
class EncodedBatch:
    """B samples' images as decode plans (see ``loaders.read.decode_plan.EncodedImage``).

    data: uint8 [total bytes], CPU (pinned or shared): sample i's JPEG is
    ``data[offsets[i]:offsets[i + 1]]`` (empty for a sample decoded in the worker).
    offsets: int64 [B + 1]. full_sizes: int64 [B, 2] (height, width). boxes: float64 [B, 4]
    (left, top, width, height) in full-resolution pixels. scales: int64 [B], the DCT scale
    denominators of the CPU path. flips: bool [B]. size: (height, width) of every output
    image; None: each image at its own size (all equal). fallback: uint8 [F, height, width, 3],
    CPU, the samples decoded in the worker, at rows ``fallback_rows`` (int64 [F]) for
    ``reasons`` (one ``Fallback`` value each). keys, indices: the samples', for messages.
    """

    data: torch.Tensor
    offsets: np.ndarray
    full_sizes: np.ndarray
    boxes: np.ndarray
    scales: np.ndarray
    flips: np.ndarray
    size: tuple[int, int] | None
    interpolation: Interpolation
    backend: Backend | str | None
    fallback: torch.Tensor
    fallback_rows: np.ndarray
    reasons: tuple[str, ...]
    keys: tuple[str, ...]
    indices: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def out_size(self) -> tuple[int, int]:
        """(height, width) of every decoded image of the batch."""
        if self.size is not None:
            return self.size
        height, width = self.full_sizes[0]
        return int(height), int(width)

    def device_rows(self) -> list[int]:
        """The rows whose bytes the device decoder decodes (all but the fallback rows), in order."""
        worker = set(self.fallback_rows.tolist())
        return [row for row in range(len(self)) if row not in worker]

    def encoded(self, row: int) -> torch.Tensor:
        """Sample ``row``'s JPEG bytes: uint8 [n], a view of ``data`` (contiguous)."""
        return self.data[int(self.offsets[row]):int(self.offsets[row + 1])]

    def jpeg_bytes(self, row: int) -> bytes:
        """Sample ``row``'s JPEG bytes as a bytes object (a copy)."""
        return self.encoded(row).numpy().tobytes()

    def pin_memory(self) -> EncodedBatch:
        """The batch with its two buffers pinned (what torch's pin-memory thread calls)."""
        return replace(self, data=self.data.pin_memory(), fallback=self.fallback.pin_memory())


def pack_encoded(images: Sequence[EncodedImage], allocate: Allocate) -> EncodedBatch:
    """The ``EncodedBatch`` of ``images`` (one field of a batch), its buffers from ``allocate``.

    Raises BatchShapeError when the images would not batch on the CPU path either (other
    output sizes), naming the sample, as ``loaders.loader.collate`` words it.
    """
    first = images[0]
    shapes = [_out_shape(image) for image in images]
    for i, shape in enumerate(shapes):
        if shape != shapes[0] or images[i].interpolation != first.interpolation:
            raise BatchShapeError(
                f"cannot batch arrays of different shapes: sample {i} of the batch has shape {shape}, "
                f"sample 0 has {shapes[0]}; resize or crop in the dataset, or pass a collate_fn that pads",
                key=images[i].key, index=images[i].index)
    lengths = np.array([len(image.data) for image in images], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    data = allocate((int(offsets[-1]),), torch.uint8)
    flat = data.numpy()
    for image, start, length in zip(images, offsets, lengths):
        if length:
            flat[start:start + length] = np.frombuffer(image.data, dtype=np.uint8)
    decoded = [(i, image.pixels) for i, image in enumerate(images) if image.pixels is not None]
    rows = [i for i, _ in decoded]
    fallback = allocate((len(rows), *shapes[0]), torch.uint8)
    if decoded:
        np.stack([pixels for _, pixels in decoded], axis=0, out=fallback.numpy())
    return EncodedBatch(
        data=data, offsets=offsets, full_sizes=np.array([image.full_size for image in images], dtype=np.int64),
        boxes=np.array([image.box for image in images], dtype=np.float64),
        scales=np.array([image.scale for image in images], dtype=np.int64),
        flips=np.array([image.flip for image in images], dtype=bool), size=first.size,
        interpolation=first.interpolation, backend=first.backend, fallback=fallback,
        fallback_rows=np.array(rows, dtype=np.int64), reasons=tuple(str(images[i].reason) for i in rows),
        keys=tuple(image.key for image in images), indices=tuple(image.index for image in images))


def _out_shape(image: EncodedImage) -> tuple[int, int, int]:
    height, width = image.size if image.size is not None else image.full_size
    return int(height), int(width), 3
