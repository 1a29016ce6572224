"""The device side of ``decode="device"``: each ``EncodedBatch`` of a batch -> uint8 [B, H, W, 3] on the device.

``DeviceDecode.decode(batch)`` finds the encoded fields of a collated batch and, for each:
computes every sample's window (``geometry.windows_for``: the pixels its crop's resize reads,
from the CPU path's box, flip and DCT scale), decodes each JPEG only in that window with the
batch decoder (``decoders``: nvImageCodec) in as few calls as ``DecodeLimits.max_decoded_bytes``
allows (one for a typical batch), resizes every window in batched kernels (``resample``) into
the output, and copies in the rows decoded in the worker. With ``regions=False`` it decodes
whole images and crops them on the device (the same pixels: for measuring, see tools.gpu.decode).
It runs where it is called: the loader calls it on the prefetcher's side stream, so the work
overlaps the training step, and reads no device value on the host.

A JPEG the decoder returns no image for (one it cannot take after all, corrupt data) is decoded
on the host by the CPU path itself (``decode_crop_resize``: the CPU path's pixels), counted as
``host_retried``; one the CPU path cannot decode either is returned as a ``SampleFailure`` for
the loader's error policy. Where a decoder call fails as a whole, its JPEGs are retried one by one.

Device memory it adds, per batch, at most: one decoder call's decoded windows (``max_decoded_bytes``,
or one window if larger; whole images with ``regions=False``), one resampling chunk's float32
working set (``max_work_bytes``, or one sample's), and the output itself; all released when the
batch is done. Between batches it holds nothing but the counters and the decoder's own state
(``decoders``: nvImageCodec's, released by ``close()``).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from loaders.batch_decode.decoders import BatchDecoder, Region
from loaders.batch_decode.encoded_batch import EncodedBatch
from loaders.batch_decode.geometry import Window, decode_groups, resample_chunks, windows_for
from loaders.batch_decode.resample import host_to_device, resample_chunk, stack_images
from loaders.errors import ConfigError, SampleError
from loaders.read.decode import decode_crop_resize, decode_rgb

__all__ = ["MIB", "DecodeCounts", "DecodeLimits", "DeviceDecode", "SampleFailure", "map_encoded"]

MIB = 1 << 20


@dataclass(frozen=True)
class DecodeLimits:
    """Device memory bounds of one batch's decode, in bytes (see the module docstring)."""

    max_decoded_bytes: int = 512 * MIB
    max_work_bytes: int = 512 * MIB

    def __post_init__(self) -> None:
        for name in ("max_decoded_bytes", "max_work_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < MIB:
                raise ConfigError(f"{name!r} must be an int of at least {MIB} bytes (got {value!r})")


@dataclass(frozen=True, slots=True)
class SampleFailure:
    """A sample no decoder could decode: its row in the batch, dataset index and the CPU path's error."""

    row: int
    index: int
    error: SampleError


@dataclass(frozen=True)
class DecodeCounts:
    """Samples decoded since the loader was made, by where: ``device`` (the batch decoder), ``worker``
    (the CPU path in the worker; by ``Fallback`` reason in ``worker_reasons``), ``host_retried`` (the
    CPU path on the host after the batch decoder failed on them), ``failed`` (no decoder could);
    ``batches``: encoded fields decoded."""

    batches: int = 0
    device: int = 0
    worker: int = 0
    host_retried: int = 0
    failed: int = 0
    worker_reasons: Mapping[str, int] = field(default_factory=dict)


def map_encoded(batch: Any, fn: Callable[[EncodedBatch], Any]) -> Any:
    """``batch`` with ``fn`` applied to every ``EncodedBatch`` in its dicts, lists, tuples and namedtuples."""
    if isinstance(batch, EncodedBatch):
        return fn(batch)
    if isinstance(batch, Mapping):
        items = {key: map_encoded(value, fn) for key, value in batch.items()}
        mapping_type: Any = type(batch)  # a dict, a subclass of it, or a Mapping of the user's
        try:
            return mapping_type(items)
        except TypeError:
            return items
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(map_encoded(value, fn) for value in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(map_encoded(value, fn) for value in batch)
    return batch


class DeviceDecode:
    """Decodes the encoded fields of batches on ``device`` with ``decoder`` (see the module docstring);
    ``regions``: decode only each crop's window (default) or whole images.

    Thread-safe counters; ``close()`` releases the decoder's state (a later call makes it anew).
    """

    def __init__(self, device: torch.device, decoder: BatchDecoder, limits: DecodeLimits | None = None, *,
                 regions: bool = True) -> None:
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        self.device = device
        self.decoder = decoder
        self.limits = limits or DecodeLimits()
        self.regions = regions
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._reasons: Counter[str] = Counter()

    def counts(self) -> DecodeCounts:
        with self._lock:
            return DecodeCounts(batches=self._counts["batches"], device=self._counts["device"],
                                worker=self._counts["worker"], host_retried=self._counts["host_retried"],
                                failed=self._counts["failed"], worker_reasons=dict(self._reasons))

    def decode(self, batch: Any) -> tuple[Any, list[SampleFailure]]:
        """``batch`` with every ``EncodedBatch`` decoded to uint8 [B, height, width, 3] on the device, and the
        samples no decoder could decode (their output rows hold no image)."""
        failures: list[SampleFailure] = []

        def one(encoded: EncodedBatch) -> torch.Tensor:
            images, failed = self.decode_field(encoded)
            failures.extend(failed)
            return images

        return map_encoded(batch, one), failures

    def decode_field(self, encoded: EncodedBatch) -> tuple[torch.Tensor, list[SampleFailure]]:
        """One encoded field -> (uint8 [B, height, width, 3] on the device, the samples that failed)."""
        out = torch.empty((len(encoded), *encoded.out_size, 3), dtype=torch.uint8, device=self.device)
        on_host: dict[int, np.ndarray] = {}
        failures: list[SampleFailure] = []
        device_rows = encoded.device_rows()
        windows = _windows(encoded, device_rows)
        regions = {row: (w.top, w.left, w.bottom, w.right) for row, w in windows.items()} if self.regions else {}
        decoded_sizes = encoded.full_sizes.copy()
        for row, (top, left, bottom, right) in regions.items():
            decoded_sizes[row] = (bottom - top, right - left)
        for group in decode_groups(device_rows, decoded_sizes, self.limits.max_decoded_bytes):
            images = self._decode_group(encoded, group, regions, on_host, failures)
            self._place(encoded, {row: _window_pixels(image, windows.get(row), row in regions)
                                  for row, image in images.items()}, windows, out)
        if len(encoded.fallback_rows):
            self._copy_rows(out, encoded.fallback_rows, encoded.fallback)
        if on_host:
            rows = sorted(on_host)
            self._copy_rows(out, np.array(rows, dtype=np.int64), torch.from_numpy(np.stack([on_host[r] for r in rows])))
        self._count(encoded, len(device_rows) - len(on_host) - len(failures), len(on_host), len(failures))
        return out, failures

    def close(self, *, wait: bool = True) -> None:
        """Release the decoder's state (``wait``: for its threads); a later call makes it anew."""
        self.decoder.close(wait=wait)

    def _decode_group(self, encoded: EncodedBatch, group: list[int], regions: Mapping[int, Region],
                      on_host: dict[int, np.ndarray], failures: list[SampleFailure]) -> dict[int, torch.Tensor]:
        """row -> uint8 [3, h, w] on the device (its region, or the whole image) for the rows of ``group`` the
        batch decoder decodes at the size asked; the others decoded on the host into ``on_host`` or recorded
        in ``failures``."""
        data = [encoded.encoded(row) for row in group]
        asked = [regions.get(row) for row in group]
        try:
            decoded = self.decoder.decode(data, asked)
        except (RuntimeError, ValueError):
            decoded = [self._decode_one(one, region) for one, region in zip(data, asked)]
        images: dict[int, torch.Tensor] = {}
        for row, region, image in zip(group, asked, decoded):
            height, width = encoded.full_sizes[row] if region is None else (region[2] - region[0],
                                                                            region[3] - region[1])
            if image is not None and tuple(image.shape) == (3, height, width):  # shapes are host metadata
                images[row] = image
                continue
            try:
                on_host[row] = decode_like_cpu(encoded, row)
            except SampleError as err:
                failures.append(SampleFailure(row, encoded.indices[row], err))
        return images

    def _decode_one(self, data: torch.Tensor, region: Region | None) -> torch.Tensor | None:
        try:
            return self.decoder.decode([data], [region])[0]
        except (RuntimeError, ValueError):
            return None

    def _place(self, encoded: EncodedBatch, images: dict[int, torch.Tensor], windows: Mapping[int, Window],
               out: torch.Tensor) -> None:
        """Write the decoded ``images`` (row -> its window's pixels, or the whole image without a size) into
        their rows of ``out``: as they are, or resized."""
        if not images:
            return
        if encoded.size is None:
            rows = sorted(images)
            self._copy_rows(out, np.array(rows, dtype=np.int64), stack_images([images[r] for r in rows]))
            return
        for chunk in resample_chunks([windows[row] for row in images], encoded.size, self.limits.max_work_bytes):
            resized = resample_chunk(images, chunk, encoded.size, encoded.interpolation, self.device)
            self._copy_rows(out, np.array([w.row for w in chunk], dtype=np.int64), resized)

    def _copy_rows(self, out: torch.Tensor, rows: np.ndarray, images: torch.Tensor) -> None:
        """``out[rows] = images`` (uint8 [k, h, w, 3], CPU or on the device), asynchronously on CUDA."""
        if images.device.type == "cpu" and self.device.type != "cpu":
            if self.device.type == "cuda" and not images.is_pinned():
                images = images.pin_memory()  # an asynchronous copy needs page-locked memory
            images = images.to(self.device, non_blocking=True)
        out.index_copy_(0, host_to_device(rows, self.device), images)

    def _count(self, encoded: EncodedBatch, device: int, host_retried: int, failed: int) -> None:
        with self._lock:
            self._counts.update(batches=1, device=device, worker=len(encoded.reasons), host_retried=host_retried,
                                failed=failed)
            self._reasons.update(encoded.reasons)


def _windows(encoded: EncodedBatch, rows: list[int]) -> dict[int, Window]:
    """row -> the window its resize reads, for ``rows`` (none when the field keeps each image's own size)."""
    if encoded.size is None or not rows:
        return {}
    windows = windows_for(rows, encoded.full_sizes[rows], encoded.boxes[rows], encoded.scales[rows],
                          encoded.flips[rows], encoded.size, encoded.interpolation)
    return {window.row: window for window in windows}


def _window_pixels(image: torch.Tensor, window: Window | None, is_region: bool) -> torch.Tensor:
    """The pixels of ``window`` in ``image`` (uint8 [3, h, w]): the image itself when it was decoded as that
    region or has no window, else its crop (a view)."""
    if window is None or is_region:
        return image
    return image[:, window.top:window.bottom, window.left:window.right]


def decode_like_cpu(encoded: EncodedBatch, row: int) -> np.ndarray:
    """Sample ``row`` decoded on the host exactly as the CPU path decodes it: uint8 [height, width, 3]."""
    data = encoded.jpeg_bytes(row)
    try:
        if encoded.size is None:
            return decode_rgb(data, backend=encoded.backend)
        left, top, width, height = (float(v) for v in encoded.boxes[row])
        return decode_crop_resize(data, (left, top, width, height), (encoded.size[1], encoded.size[0]),
                                  flip=bool(encoded.flips[row]), resample=encoded.interpolation,
                                  backend=encoded.backend)
    except SampleError as err:
        failure = SampleError(f"sample {encoded.keys[row]!r} (index {encoded.indices[row]}): cannot decode its "
                              f"image: {err}", key=encoded.keys[row], index=encoded.indices[row])
        raise failure from (err.__cause__ or err)
