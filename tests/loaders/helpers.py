"""The one helpers module of the loaders tests: images, live workers, and the small datasets the loop tests
share (``tests.samples`` holds what every package's tests share: ``photo_pixels``, ``photo_jpeg``, ``wait_until``).

Images: ``smooth_images`` (float [B, 3, H, W] in
0..1, upsampled noise, for batched device ops) and ``smooth_batch`` (the same as uint8
[B, H, W, 3], what a loader hands over); ``image_flavours`` (the encoded images a device decoder
may or may not take, broken ones on purpose) and ``write_image_shards`` (any bytes as the ``jpg``
field of adopted WebDataset shards). Processes and threads:
``children_of_self``, ``is_alive``, ``loader_threads``. The loop tests (``tests/loaders/loops/``):
their datasets (``RangeDataset`` and kin), ``WORKER_SETUPS``, ``make_loader``, ``uninterrupted``
and ``assert_loop_like_stock``.
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch.utils.data import DataLoader as StockLoader
from torch.utils.data import Dataset

from loaders import DataLoader
from loaders.loader.batch_source import Job
from tests.samples import image_dataset, photo_pixels

# ---------------------------------------------------------------- images




def _scrambled(data: bytes, start: int, count: int) -> bytes:
    """``data`` with up to ``count`` bytes from ``start`` changed, no marker made or lost."""
    out = bytearray(data)
    for at in range(start, start + count):
        if 0xFF not in (out[at], out[at - 1]):
            out[at] = min((out[at] * 7 + 13) % 256, 0xFE)
    return bytes(out)


def _scan_header(data: bytes, which: int) -> int:
    """The offset of the ``which``-th SOS marker of a JPEG."""
    found = [at for at in range(len(data) - 1) if data[at] == 0xFF and data[at + 1] == 0xDA]
    return found[which]


def image_flavours(height: int = 96, width: int = 128, seed: int = 0) -> dict[str, bytes]:
    """Encoded images of one photo, by what a device decoder makes of them.

    Device-decodable JPEGs: "baseline", "progressive", "gray", "444" (no chroma subsampling);
    decoded in the worker (``loaders.read.decode_plan.Fallback``): "png", "webp", "cmyk",
    "truncated" (the CPU path fails on it); "bad_scan": a scrambled scan, which strict decoders
    (simplejpeg, maybe nvJPEG) refuse and Pillow decodes (to garbage); "broken_progressive": a
    progressive JPEG whose second scan header is invalid, which passes every check a worker makes
    and no decoder decodes.
    """
    pixels = photo_pixels(height, width, seed)

    def encode(fmt: str, mode: str = "RGB", **options: object) -> bytes:
        buffer = io.BytesIO()
        Image.fromarray(pixels).convert(mode).save(buffer, fmt, **options)
        return buffer.getvalue()

    baseline = encode("JPEG", quality=90)
    progressive = encode("JPEG", quality=90, progressive=True)
    broken = bytearray(progressive)
    second = _scan_header(progressive, 1)
    broken[second + 5 + 2 * progressive[second + 4]] = 70  # spectral selection start past 63
    return {"baseline": baseline, "progressive": progressive, "gray": encode("JPEG", "L", quality=90),
            "444": encode("JPEG", quality=90, subsampling=0), "png": encode("PNG"), "webp": encode("WEBP"),
            "cmyk": encode("JPEG", "CMYK", quality=90), "truncated": baseline[:len(baseline) // 2],
            "bad_scan": _scrambled(baseline, _scan_header(baseline, 0) + 200, 40),
            "broken_progressive": bytes(broken)}


def write_image_shards(directory: Path, images: Sequence[bytes], per_shard: int = 5) -> Path:
    """``tests.samples.image_dataset`` of these exact bytes in ``directory`` (which must be named ``shards``):
    kept for the tests that call it by this name until they call ``image_dataset`` themselves."""
    if directory.name != "shards":
        raise ValueError(f"write_image_shards: {directory} must be named 'shards' (image_dataset's folder)")
    return image_dataset(directory.parent, images, per_shard=per_shard).shards


def level_difference(a: np.ndarray | torch.Tensor, b: np.ndarray | torch.Tensor) -> float:
    """Mean absolute difference of two uint8 images (numpy or CPU tensors), in 8-bit levels."""
    left, right = (np.asarray(x.numpy() if isinstance(x, torch.Tensor) else x, dtype=np.int16) for x in (a, b))
    return float(np.abs(left - right).mean())


def smooth_images(count: int, height: int, width: int, seed: int = 0) -> torch.Tensor:
    """Smooth float32 [B, 3, H, W] in 0..1 (bicubically upsampled 6x6 noise, like natural content), CPU."""
    coarse = torch.rand(count, 3, 6, 6, generator=torch.Generator().manual_seed(seed))
    return F.interpolate(coarse, size=(height, width), mode="bicubic", align_corners=False).clamp(0, 1)


def smooth_batch(count: int, height: int, width: int, seed: int = 0) -> torch.Tensor:
    """``smooth_images`` as a loader's batch: uint8 [B, H, W, 3], contiguous, CPU."""
    images = smooth_images(count, height, width, seed)
    return (images * 255).round().to(torch.uint8).permute(0, 2, 3, 1).contiguous()


class Pictures(Dataset[dict[str, Any]]):
    """Sample i -> {"image": uint8 [side, side, 3] (fixed random pixels), "label": i}, held in memory;
    thread workers by default (``releases_gil``)."""

    releases_gil = True

    def __init__(self, size: int = 10, side: int = 12) -> None:
        gen = torch.Generator().manual_seed(5)
        self.images = torch.randint(0, 256, (size, side, side, 3), dtype=torch.uint8, generator=gen).numpy()

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"image": self.images[index], "label": index}


# ---------------------------------------------------------------- waiting, processes, threads



def is_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def children_of_self() -> set[int]:
    """PIDs of this process's live child processes (from /proc, no psutil)."""
    pids: set[int] = set()
    for task in os.listdir(f"/proc/{os.getpid()}/task"):
        try:
            with open(f"/proc/{os.getpid()}/task/{task}/children", encoding="ascii") as fh:
                pids.update(int(p) for p in fh.read().split())
        except OSError:
            continue
    return {pid for pid in pids if is_alive(pid)}


def loader_threads() -> list[threading.Thread]:
    """The thread workers alive in this process."""
    return [t for t in threading.enumerate() if t.name.startswith("loaders-worker-")]


@contextlib.contextmanager
def default_start_method(method: str) -> Iterator[str]:
    """multiprocessing's default start method set to ``method`` as a program (or Python 3.14) sets it,
    then restored."""
    previous = multiprocessing.get_start_method(allow_none=True)
    multiprocessing.set_start_method(method, force=True)
    try:
        yield method
    finally:
        multiprocessing.set_start_method(previous, force=True)


# ---------------------------------------------------------------- jobs for the workers


def jobs(count: int, size: int = 2, epoch: int = 0) -> list[Job]:
    """``count`` jobs of ``epoch``: batch b reads indices [b * size, (b + 1) * size)."""
    return [Job(epoch, b, list(range(b * size, (b + 1) * size))) for b in range(count)]


# ---------------------------------------------------------------- the loop tests' datasets

N_SAMPLES = 10


class RangeDataset(Dataset[torch.Tensor]):
    """Sample i is ``tensor(i)`` (int64, shape [])."""

    def __init__(self, n: int = N_SAMPLES) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor(index)


class KeyErrorDataset(RangeDataset):
    """Raises KeyError on one index (a missing key in a user's lookup table)."""

    def __getitem__(self, index: int) -> torch.Tensor:
        if index == 5:
            raise KeyError(f"no sample {index}")
        return torch.tensor(index)


class SlowDataset(RangeDataset):
    """Each sample takes a second: past any test's ``timeout``."""

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(1.0)
        return torch.tensor(index)


class BlockedDataset(RangeDataset):
    """Each sample waits for ``release`` (a threading or multiprocessing Event; ``limit_s`` at most, so
    a test that fails still ends) and records in ``reading`` that it started. Never ``set()`` a
    multiprocessing Event a terminated worker was waiting on: its Condition waits for that sleeper."""

    def __init__(self, release: Any, reading: Any, n: int = N_SAMPLES, limit_s: float = 60.0) -> None:
        super().__init__(n)
        self.release, self.reading, self.limit_s = release, reading, limit_s

    def __getitem__(self, index: int) -> torch.Tensor:
        self.reading.set()
        self.release.wait(self.limit_s)
        return torch.tensor(index)


def through_torch_save(state: dict[str, Any]) -> dict[str, Any]:
    """A loader state after ``torch.save`` and ``torch.load(weights_only=True)``, as a checkpoint keeps it."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    loaded: dict[str, Any] = torch.load(buffer, weights_only=True)
    return loaded


def flat(batches: list[Any]) -> list[Any]:
    """Batches as lists (tensors listed, anything else as it is)."""
    return [b.tolist() if isinstance(b, torch.Tensor) else b for b in batches]


# ---------------------------------------------------------------- the loop tests' setups

EPOCHS = 3
WORKER_SETUPS = [(0, "thread"), (2, "thread"), (2, "process")]  # (num_workers, worker_type)


def make_loader(shuffle: bool, num_workers: int, worker_type: str, drop_last: bool) -> DataLoader[Any]:
    """The restarted script's loader: batches of 3 of RangeDataset, seeded only by ``torch.manual_seed``."""
    torch.manual_seed(1234)  # the "same script, restarted" seed; no seed= and no generator=
    return DataLoader(RangeDataset(), batch_size=3, shuffle=shuffle, drop_last=drop_last,
                      num_workers=num_workers, worker_type=worker_type)


def uninterrupted(make: Callable[[], DataLoader[Any]]) -> list[list[list[int]]]:
    """The batches of ``EPOCHS`` epochs of one loader, ``set_epoch`` before each."""
    loader = make()
    out = []
    for epoch in range(EPOCHS):
        loader.set_epoch(epoch)
        out.append(flat(list(loader)))
    loader.close()
    return out


def assert_loop_like_stock(run: Callable[[Any], Any], num_workers: int, worker_type: str) -> None:
    """``run(loader)`` gives the same result on our loader and the stock one (batches of 3 of RangeDataset,
    in order)."""
    ours = DataLoader(RangeDataset(), batch_size=3, shuffle=False, num_workers=num_workers, worker_type=worker_type)
    stock = StockLoader(RangeDataset(), batch_size=3, shuffle=False, num_workers=num_workers)
    try:
        assert run(ours) == run(stock)
    finally:
        ours.close()
