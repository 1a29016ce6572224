"""Correctness of the device path (issue 13, item 2), on the CPU and, where present, on CUDA.

Each test runs once per device: ``cpu`` everywhere (the same control flow with no-op
streams, so CI checks the logic) and ``cuda`` (marked ``gpu``; skipped without CUDA), where
the copy stream, the events and ``record_stream`` are real and a missing one shows:

- batches arriving on the device equal, byte for byte, the same batches moved with ``.to``;
- ``Augment`` on the device equals a per-sample reference computed on the CPU from the
  parameters it drew on that device;
- a batch held by the training loop is not overwritten while later batches arrive;
- a slow consumer step (``torch.cuda._sleep`` on its stream, with ``CUDA_LAUNCH_BLOCKING``
  unset or 0) still reads the batch it was given after the prefetcher ran ahead, and a slow
  transform on the copy stream is waited for.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import torch.utils.data

from loaders import CenterCropDecode, DataLoader, DevicePrefetcher, ShardDataset
from loaders.augment import (
    Augment,
    ColorJitter,
    Normalize,
    RandomHorizontalFlip,
    RandomResizedCrop,
    batch_generator,
)
from loaders.loader.buffers import PinnedBufferPool
from tests.loaders.helpers import smooth_batch

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
DEVICES = [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=[pytest.mark.gpu, needs_cuda])]
# About 20-40 ms on a current GPU: long enough for the copy stream to run batches ahead.
SLEEP_CYCLES = 50_000_000
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class DistinctImages(torch.utils.data.Dataset[dict[str, Any]]):
    """``count`` samples whose uint8 [side, side, 3] image is random noise seeded by the index,
    so that any two batches differ in almost every byte; label int = the index."""

    releases_gil = True  # numpy fills release the GIL: thread workers

    def __init__(self, count: int, side: int = 16) -> None:
        self.count, self.side = count, side

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> dict[str, Any]:
        rng = np.random.default_rng(index)
        return {"image": rng.integers(0, 256, (self.side, self.side, 3), dtype=np.uint8), "label": index}

    def batch(self, position: int, batch_size: int) -> torch.Tensor:
        """The images of the batch at ``position`` (no shuffle): uint8 [B, side, side, 3] on the CPU."""
        indices = range(position * batch_size, min((position + 1) * batch_size, self.count))
        return torch.stack([torch.from_numpy(self[i]["image"]) for i in indices])


def launch_is_asynchronous() -> bool:
    return os.environ.get("CUDA_LAUNCH_BLOCKING", "0") in ("", "0")


def slow_consumer_step(device: str) -> None:
    """Keep the consumer's stream busy so the prefetcher's copy stream runs ahead of it."""
    if device == "cuda":
        torch.cuda._sleep(SLEEP_CYCLES)


def assert_same_batch(got: dict[str, Any], want: dict[str, Any], device: str) -> None:
    assert got.keys() == want.keys()
    for key, value in want.items():
        if isinstance(value, torch.Tensor):
            assert got[key].device.type == device, f"{key!r} on {got[key].device}, expected {device}"
            assert got[key].dtype == value.dtype and got[key].shape == value.shape
            assert torch.equal(got[key], value.to(device)), f"{key!r} differs from the plain .to({device!r}) copy"
        else:
            assert got[key] == value


# ---------------------------------------------------------------- byte-for-byte arrival


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("num_workers", "pin_memory"), [(0, False), (2, False), (2, None)],
                         ids=["main-pageable", "threads-pageable", "threads-default-pin"])
def test_loader_batches_on_the_device_equal_plain_copies(device: str, num_workers: int, pin_memory: bool | None,
                                                         image_shards: Path) -> None:
    dataset = ShardDataset(image_shards, fields=("jpg", "cls"), transform=CenterCropDecode(32, resize_short=40))
    common: dict[str, Any] = {"batch_size": 5, "num_workers": num_workers, "seed": 0, "worker_type": "thread"}
    if pin_memory is not None or device == "cpu":
        common["pin_memory"] = False  # pageable host batches: the staging path on CUDA
    # decode="cpu": the copy path is under test (on CUDA "auto" would decode on the device, other pixels).
    with DataLoader(dataset, **common) as plain, DataLoader(dataset, device=device, decode="cpu", **common) as moved:
        want, got = list(plain), list(moved)
    assert len(got) == len(want) == -(-len(dataset) // 5)
    for got_batch, want_batch in zip(got, want):
        assert_same_batch(got_batch, want_batch, device)


def slow_on_the_copy_stream(device: str) -> Any:
    """An identity transform that keeps the copy stream busy, so the copies queued behind it
    stay in flight while the host stages the next batches (on CUDA; a no-op elsewhere)."""
    def transform(batch: Any) -> Any:
        if device == "cuda":
            torch.cuda._sleep(SLEEP_CYCLES)
        return batch

    return transform


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("pinned", [False, True], ids=["pageable", "pinned"])
def test_prefetcher_with_a_tiny_staging_pool_delivers_every_batch_intact(device: str, pinned: bool) -> None:
    """Two staging buffers for four batches in flight behind a slow copy stream: a buffer
    restaged before the copy reading it ended would corrupt that batch."""
    if pinned and device != "cuda":
        pytest.skip("pinned host memory needs CUDA")
    dataset = DistinctImages(48)
    # Fresh host tensors each time: a producer must not write into a tensor it handed over.
    source = [dataset.batch(k, 4).pin_memory() if pinned else dataset.batch(k, 4) for k in range(12)]
    pool = PinnedBufferPool(max_buffers=2, pin_memory=device == "cuda")
    received = []
    # stage=True on the CPU runs the staging buffers' reuse logic of the CUDA path.
    prefetcher = DevicePrefetcher(iter(source), device, depth=3, pool=pool, stage=True,
                                  transform=slow_on_the_copy_stream(device))
    for batch in prefetcher:  # no host synchronisation inside the loop: the host runs ahead
        slow_consumer_step(device)
        received.append(batch)
    assert len(received) == len(source)
    for k, (got, sent) in enumerate(zip(received, source)):
        assert got.device.type == device and torch.equal(got.cpu(), sent), f"batch {k} arrived corrupted"
    if not pinned:
        assert pool.num_owned <= 2 and pool.stats.hits > 0  # the two buffers really were reused


# ---------------------------------------------------------------- held batches and slow steps


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_a_held_batch_is_unchanged_after_three_more_arrived(device: str, worker_type: str) -> None:
    dataset, batch_size = DistinctImages(64), 4
    held: list[dict[str, Any]] = []
    with DataLoader(dataset, batch_size=batch_size, num_workers=2, worker_type=worker_type, seed=0,
                    device=device, device_prefetch=2) as loader:
        for k, batch in enumerate(loader):
            slow_consumer_step(device)
            held.append(batch)  # the training loop still holds batch k (no copy)
            if k >= 3:
                old = held[k - 3]
                assert torch.equal(old["image"].cpu(), dataset.batch(k - 3, batch_size)), (
                    f"batch {k - 3} changed while batches up to {k} arrived")
    assert len(held) == len(dataset) // batch_size
    for k, batch in enumerate(held):  # and still intact at the end of the epoch
        assert torch.equal(batch["image"].cpu(), dataset.batch(k, batch_size))
        assert batch["label"].tolist() == list(range(k * batch_size, (k + 1) * batch_size))


@pytest.mark.parametrize("device", DEVICES)
def test_slow_consumer_reads_each_batch_after_dropping_it(device: str) -> None:
    """The step enqueues a read of batch k behind a long kernel and drops its reference at
    once; the prefetcher meanwhile allocates and fills the next batches on its copy stream.
    Without ``record_stream`` on the consumer's stream, the caching allocator would hand
    batch k's block to a later copy before the read ran, and the sums would be wrong."""
    if device == "cuda" and not launch_is_asynchronous():
        pytest.skip("CUDA_LAUNCH_BLOCKING=1 serialises every launch: this test would prove nothing")
    dataset, batch_size = DistinctImages(96, side=32), 8
    sums = []
    with DataLoader(dataset, batch_size=batch_size, num_workers=2, worker_type="thread", seed=0,
                    device=device, device_prefetch=3) as loader:
        for batch in loader:
            slow_consumer_step(device)
            sums.append(batch["image"].sum(dtype=torch.int64))
            del batch
    want = [int(dataset.batch(k, batch_size).sum(dtype=torch.int64)) for k in range(len(sums))]
    assert len(sums) == len(dataset) // batch_size and [int(s) for s in sums] == want


class SlowDoubling:
    """A device transform that is slow on the stream it runs on (the copy stream), then
    writes a new tensor: a consumer that did not wait for its event would read it unwritten."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.streams: list[Any] = []

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        if self.device == "cuda":
            self.streams.append(torch.cuda.current_stream())
            torch.cuda._sleep(SLEEP_CYCLES)
        return {**batch, "image": batch["image"].to(torch.int32) * 2}


@pytest.mark.parametrize("device", DEVICES)
def test_consumer_waits_for_a_slow_transform_on_the_copy_stream(device: str) -> None:
    if device == "cuda" and not launch_is_asynchronous():
        pytest.skip("CUDA_LAUNCH_BLOCKING=1 serialises every launch: this test would prove nothing")
    dataset, batch_size = DistinctImages(32), 4
    transform = SlowDoubling(device)
    with DataLoader(dataset, batch_size=batch_size, num_workers=0, seed=0, device=device,
                    device_transform=transform) as loader:
        images = [batch["image"] for batch in loader]
    for k, image in enumerate(images):
        assert torch.equal(image.cpu(), dataset.batch(k, batch_size).to(torch.int32) * 2)
    if device == "cuda":
        assert transform.streams and all(s != torch.cuda.default_stream() for s in transform.streams)


# ---------------------------------------------------------------- augmentation per sample


def reference_sample(image: np.ndarray, box: tuple[int, int, int, int], flip: bool, jitter: tuple[float, float, float],
                     size: tuple[int, int]) -> torch.Tensor:
    """One image, one loop iteration, float64 on the CPU: crop + bilinear resize (F.interpolate),
    flip, torchvision's brightness/contrast/saturation formulas, normalise -> [3, h, w]."""
    top, left, height, width = box
    x = torch.from_numpy(image).permute(2, 0, 1).double().div(255)[:, top : top + height, left : left + width]
    x = F.interpolate(x[None], size=size, mode="bilinear", align_corners=False)[0]
    if flip:
        x = x.flip(-1)

    def gray(t: torch.Tensor) -> torch.Tensor:
        return (0.2989 * t[0] + 0.587 * t[1] + 0.114 * t[2]).unsqueeze(0)

    b, c, s = jitter
    x = (b * x).clamp(0, 1)
    x = (c * x + (1 - c) * gray(x).mean()).clamp(0, 1)
    x = (s * x + (1 - s) * gray(x)).clamp(0, 1)
    mean, std = torch.tensor(MEAN, dtype=x.dtype).view(3, 1, 1), torch.tensor(STD, dtype=x.dtype).view(3, 1, 1)
    return (x - mean) / std


@pytest.mark.parametrize("device", DEVICES)
def test_device_augment_equals_the_per_sample_reference(device: str) -> None:
    count, size = 16, (24, 28)
    images = smooth_batch(count, 48, 56, seed=1)
    crop, flip, jitter = RandomResizedCrop(size), RandomHorizontalFlip(), ColorJitter(0.4, 0.4, 0.4)
    augment = Augment([crop, flip, jitter], seed=7, out_dtype=torch.float32, mean=MEAN, std=STD)
    out = augment(images.to(device), epoch=2, batch_index=5)
    assert out.device.type == device and out.shape == (count, 3, *size)
    # The parameters Augment drew: the same generator, the same draws in the same order.
    gen = batch_generator(7, 2, 5, device)
    boxes = crop.sample_params(count, gen, 48, 56)
    floats = crop.apply(images.to(device).permute(0, 3, 1, 2).float().div(255), boxes)
    flips = flip.sample_params(count, gen)
    factors = jitter.sample_params(count, gen)
    batched = Normalize(MEAN, STD).apply(jitter.apply(flip.apply(floats, flips), factors))
    assert torch.equal(out, batched.contiguous(memory_format=torch.channels_last)), "Augment drew other parameters"
    host = images.numpy()
    for i in range(count):
        box = tuple(int(v[i]) for v in (boxes.top, boxes.left, boxes.height, boxes.width))
        factor = tuple(float(v[i]) for v in (factors.brightness, factors.contrast, factors.saturation))
        ref = reference_sample(host[i], box, bool(flips[i]), factor, size)  # type: ignore[arg-type]
        diff = (out[i].cpu().double() - ref).abs()
        # Inside, the same bilinear weights; at the crop's edge grid_sample may read the
        # pixel just outside the box where interpolate clamps, which also moves the
        # contrast mean a little: the interior bound allows for that shift.
        assert diff[:, 2:-2, 2:-2].max() < 1e-3, f"sample {i}: max interior error {diff[:, 2:-2, 2:-2].max():.2e}"
        assert diff.mean() < 1e-2, f"sample {i}: mean error {diff.mean():.2e}"


@pytest.mark.parametrize("device", DEVICES)
def test_device_augment_matches_the_cpu_batch_given_the_same_parameters(device: str) -> None:
    """The batched ops on ``device`` equal the same ops on the CPU with the parameters moved
    there: the device's kernels compute the function the CPU tests check."""
    count = 8
    images = smooth_batch(count, 40, 40, seed=2).permute(0, 3, 1, 2).float().div(255)
    crop, flip, jitter = RandomResizedCrop(32), RandomHorizontalFlip(), ColorJitter(0.4, 0.4, 0.4)
    gen = batch_generator(3, 0, 0, device)
    boxes, flips, factors = crop.sample_params(count, gen, 40, 40), flip.sample_params(count, gen), \
        jitter.sample_params(count, gen)

    def run(where: str) -> torch.Tensor:
        def move(t: torch.Tensor) -> torch.Tensor:
            return t.to(where)

        x = crop.apply(images.to(where), type(boxes)(*map(move, (boxes.top, boxes.left, boxes.height, boxes.width))))
        x = flip.apply(x, move(flips))
        return jitter.apply(x, type(factors)(*map(move, (factors.brightness, factors.contrast, factors.saturation))))

    assert torch.allclose(run(device).cpu(), run("cpu"), atol=1e-5, rtol=0)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize(("out_dtype", "half_ulp"), [(torch.float16, 2**-10), (torch.bfloat16, 2**-7)])
def test_a_half_output_is_the_float32_output_rounded(out_dtype: torch.dtype, half_ulp: float) -> None:
    """On CUDA a half out_dtype runs the ops after the crop in float16: the result is the
    float32 pipeline's to within less than one 8-bit level of the 0..1 input (divided by the
    smallest std: normalised units), plus the output dtype's rounding at values up to 4."""
    tolerance = (1 / 255) / min(STD) + half_ulp * 4
    images = smooth_batch(32, 64, 72, seed=4).cuda()
    ops = [RandomResizedCrop(48), RandomHorizontalFlip(), ColorJitter(0.4, 0.4, 0.4)]
    half = Augment(ops, seed=3, out_dtype=out_dtype, mean=MEAN, std=STD)(images, epoch=0, batch_index=1)
    full = Augment(ops, seed=3, out_dtype=torch.float32, mean=MEAN, std=STD)(images, epoch=0, batch_index=1)
    assert half.dtype == out_dtype and half.is_contiguous(memory_format=torch.channels_last)
    assert (half.float() - full).abs().max() <= tolerance

