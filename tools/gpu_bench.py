"""GPU data path: host-to-device bandwidth, augmentation cost, and end-to-end training throughput.

    python -m tools.gpu_bench                          # on a CUDA machine; makes synthetic shards
    python -m tools.gpu_bench --shards DIR --steps 50 --workers 4,8,16 --json out.json
    python -m tools.gpu_bench --smoke                  # tiny sizes, runs on the CPU too
    python -m tools.gpu_bench --record                 # also append the tables to tools/RESULTS.md
    python -m tools.gpu_bench --smoke --record         # quick check of every CUDA path (tiny sizes)

1. h2d: one uint8 / float32 image batch [B, 224, 224, 3], pinned vs pageable (CUDA events),
   and its share of the PCIe link's theoretical peak (``link_info``: nvidia-smi's max
   generation x width).
2. augment: ``Augment`` (random resized crop + flip + jitter + normalise, fp16/bf16
   channels_last out) per batch, as a fraction of a ResNet-50 training step (AMP bf16,
   so no GradScaler; channels_last; forward, backward and SGD step) at the same batch
   size. Target: < 3 %.
3. end to end: that model trained on a batch already on the GPU (the ceiling) vs fed by
   each ``Feed`` with N workers: img/s, fraction of host time waiting for data, GPU idle
   fraction (CUDA events around each step, ``StepTimer``) and ratio to the ceiling. One
   epoch covers the warm-up and the timed steps (a sampler that cycles over the data), so
   no epoch boundary falls inside the timed window. Feeds: ``ours_feed``
   (``loaders.DataLoader(device=...)`` over shards) and, for ``tools.device_suite``,
   ``stock_feed`` (torch's DataLoader over raw files with float32 transforms).
4. JPEG decode: Pillow on every core (full, and the loader's crop decode) vs
   ``torchvision.io.decode_jpeg`` batched on the GPU, when importable with CUDA.

Without ``--shards``, synthetic images (``dataprep.synthetic``) are sharded by
``python -m dataprep.cli shard`` into a temporary directory, used by parts 3 and 4.
cuDNN autotuning (``cudnn.benchmark``) is on; every timing excludes warm-up calls.
Defaults on one H100 take about two minutes, most of it making the shards.

The tool only measures and prints; nothing is tuned. RESULTS.md is written only with --record.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import importlib.util
import io
import itertools
import math
import random
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
import torch.utils.data
from PIL import Image

from loaders.augment import Augment, ColorJitter, RandomHorizontalFlip, RandomResizedCrop
from tools._report import ToolError, format_table, report_document, write_json
from tools._resnet import resnet50

TOOL = "gpu_bench"
RESULTS_MD = Path(__file__).with_name("RESULTS.md")
TARGET_AUGMENT_FRACTION = 0.03
BUDGET_SPENT = "the time budget was spent"  # why a row or step past its deadline did not run
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
# torchvision's IMG_EXTENSIONS: what ImageFolder lists (sidecars such as .txt are left out).
IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"})


@dataclasses.dataclass(frozen=True)
class Sizes:
    """What one run measures with: batch, image side, model width, timed steps, synthetic images.

    fed_steps_per_worker: part 3 times at least this many steps per worker, so that the
    bursts in which the workers deliver (up to one batch each) average out.
    """

    batch: int
    side: int
    width: int
    steps: int
    images: int
    fed_steps_per_worker: int


# 1024 images suffice: part 3 cycles over them, and generating them is single-threaded.
FULL = Sizes(batch=256, side=224, width=64, steps=30, images=1024, fed_steps_per_worker=8)
SMOKE = Sizes(batch=4, side=32, width=8, steps=2, images=24, fed_steps_per_worker=1)


def host_time_ms(fn: Callable[[], object], device: torch.device, *, repeats: int, warmup: int = 2) -> float:
    """Mean milliseconds per call on the host clock, between device-wide synchronizes: for
    work that may run on streams of its own (torchvision's GPU decode)."""
    for _ in range(warmup):
        fn()
    _sync(device)
    start_s = time.perf_counter()
    for _ in range(repeats):
        fn()
    _sync(device)
    return (time.perf_counter() - start_s) * 1e3 / repeats


def time_ms(fn: Callable[[], object], device: torch.device, *, repeats: int, warmup: int = 2) -> float:
    """Mean milliseconds per call after ``warmup`` untimed calls (cuDNN autotuning, first
    allocations): CUDA events on the current stream on a GPU, the host clock on the CPU.

    ``fn`` must enqueue all its GPU work on the current stream (or make it wait for its own).
    """
    if device.type != "cuda":
        return host_time_ms(fn, device, repeats=repeats, warmup=warmup)
    for _ in range(warmup):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize(device)
    start.record()
    for _ in range(repeats):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / repeats


# PCIe per-lane transfer rate (GT/s) by generation; the line code's payload share is below.
_PCIE_GT_S = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}


def pcie_peak_gb_s(gen: int, width: int) -> float:
    """Theoretical one-direction PCIe payload rate in GB/s (10^9 B/s) of ``width`` lanes of
    generation ``gen``: line rate x line-code efficiency (8b/10b, 128b/130b, gen 6 FLIT
    242/256), before packet headers, which cost real copies another ~10-15 %."""
    if gen not in _PCIE_GT_S or width < 1:
        raise ToolError(f"no PCIe generation {gen} / width {width} (known generations {sorted(_PCIE_GT_S)})")
    encoding = 0.8 if gen <= 2 else (128 / 130 if gen <= 5 else 242 / 256)
    return _PCIE_GT_S[gen] * width * encoding / 8


def link_info(device: torch.device) -> dict[str, Any]:
    """The GPU's PCIe link as ``nvidia-smi`` reports it (max and current generation and width)
    and ``peak_gb_s`` for the max ones; ``{"skipped": why}`` where it cannot be read."""
    if device.type != "cuda":
        return {"skipped": "no CUDA device"}
    query = "pcie.link.gen.max,pcie.link.width.max,pcie.link.gen.current,pcie.link.width.current"
    command = ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits", "-i", str(device.index or 0)]
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError) as err:
        return {"skipped": f"nvidia-smi failed: {err}"}
    try:
        gen_max, width_max, gen_now, width_now = (int(v) for v in out.strip().splitlines()[0].split(","))
        peak = pcie_peak_gb_s(gen_max, width_max)
    except (ValueError, IndexError, ToolError) as err:
        return {"skipped": f"unreadable nvidia-smi output {out.strip()!r}: {err}"}
    return {"gen_max": gen_max, "width_max": width_max, "gen_current": gen_now, "width_current": width_now,
            "peak_gb_s": peak}


def measure_h2d(device: torch.device, sizes: Sizes, peak_gb_s: float | None = None,
                repeats: int = 10) -> list[dict[str, Any]]:
    """Part 1: one [B, side, side, 3] batch copied to ``device``, per dtype and host memory kind.

    Rows: dtype, host ("pinned"/"pageable"), mb (10^6 B), ms per copy, gb_s, and
    ``of_link_peak`` (gb_s / ``peak_gb_s``; None when no peak is known).
    """
    rows = []
    for dtype in (torch.uint8, torch.float32):
        for pinned in (True, False):
            if pinned and device.type != "cuda":
                continue  # pinned memory needs CUDA
            # Random bytes, not a constant: no path may gain from compressible data.
            src = torch.randint(0, 256, (sizes.batch, sizes.side, sizes.side, 3), dtype=torch.uint8).to(dtype)
            src = src.pin_memory() if pinned else src
            dst = torch.empty_like(src, device=device)
            # Only a pinned source can be copied asynchronously; a pageable one is staged by
            # the driver and blocks the host either way, so ask for what really happens.
            ms = time_ms(lambda: dst.copy_(src, non_blocking=pinned), device, repeats=repeats)
            size_bytes = src.numel() * src.element_size()
            gb_s = size_bytes / ms / 1e6
            rows.append({"dtype": str(dtype).removeprefix("torch."), "host": "pinned" if pinned else "pageable",
                         "mb": size_bytes / 1e6, "ms": ms, "gb_s": gb_s,
                         "of_link_peak": gb_s / peak_gb_s if peak_gb_s else None})
    return rows


def train_step_fn(device: torch.device, sizes: Sizes) -> Callable[[torch.Tensor, torch.Tensor], None]:
    """A ResNet-50 SGD step (AMP bf16, channels_last) on ``device`` as ``step(images, labels)``.

    images: bfloat16 [B, 3, side, side] channels_last; labels: int64 [B] in 0..999; both on
    ``device``. bf16 has fp32's exponent range, so no GradScaler (fp16 would need one).
    """
    model = resnet50(width=sizes.width).to(device, memory_format=torch.channels_last).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)

    def step(images: torch.Tensor, labels: torch.Tensor) -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def synthetic_batch(device: torch.device, sizes: Sizes) -> tuple[torch.Tensor, torch.Tensor]:
    """bf16 [B, 3, side, side] channels_last images and int64 [B] labels, already on ``device``."""
    images = torch.randn(sizes.batch, 3, sizes.side, sizes.side, device=device)
    labels = torch.randint(0, 1000, (sizes.batch,), device=device)
    return images.to(torch.bfloat16, memory_format=torch.channels_last), labels


def measure_augment(device: torch.device, sizes: Sizes, step: Callable[..., None]) -> dict[str, Any]:
    """Part 2: ms per batch of the full Augment pipeline vs ms per training step."""
    images = torch.randint(0, 256, (sizes.batch, sizes.side, sizes.side, 3), dtype=torch.uint8, device=device)
    ops = [RandomResizedCrop(sizes.side), RandomHorizontalFlip(), ColorJitter(0.4, 0.4, 0.4)]
    batch, labels = synthetic_batch(device, sizes)
    step_ms = time_ms(lambda: step(batch, labels), device, repeats=sizes.steps)
    out: dict[str, Any] = {"batch": sizes.batch, "side": sizes.side, "step_ms": step_ms, "augment": []}
    for dtype in (torch.bfloat16, torch.float16):
        augment = Augment(ops, out_dtype=dtype, mean=IMAGENET_MEAN, std=IMAGENET_STD)
        ms = time_ms(lambda: augment(images), device, repeats=max(sizes.steps, 10))
        fraction = ms / step_ms
        out["augment"].append({"out_dtype": str(dtype).removeprefix("torch."), "ms": ms,
                               "fraction_of_step": fraction, "meets_target": fraction < TARGET_AUGMENT_FRACTION})
    return out


def make_shards(root: Path, sizes: Sizes) -> Path:
    """Synthetic raw images (dataprep.synthetic) sharded by ``python -m dataprep.cli shard``."""
    from dataprep.synthetic import SyntheticSpec, make_dataset

    raw, shards = root / "raw", root / "shards"
    spec = SyntheticSpec(images=sizes.images, classes=10, seed=0, broken=False, tables=False, text=False,
                         sidecars=False)
    make_dataset(raw, spec)
    command = [sys.executable, "-m", "dataprep.cli", "shard", str(raw / "images"), str(shards),
               "--resize-short", str(max(sizes.side + sizes.side // 7, 32)), "--shard-size", "64MB", "--no-progress"]
    # From the checkout's root, so that ``-m dataprep.cli`` resolves wherever this was started.
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=root)
    if done.returncode != 0:
        raise ToolError(f"dataprep shard failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return shards


def _split(batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
    if isinstance(batch, dict):
        labels = batch.get("label", batch.get("cls"))
        return batch["image"], labels
    return batch[0], batch[1]


def _forever(loader: Any) -> Iterator[Any]:
    epoch = 0
    while True:
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(epoch)
        yield from loader
        epoch += 1


class StepTimer:
    """CUDA events around each training step on the current stream: how long that stream
    ran no step inside the timed window. A no-op on other devices (``idle_fraction`` None)."""

    def __init__(self, device: torch.device) -> None:
        self.enabled = device.type == "cuda"
        self.events: list[tuple[Any, Any]] = []

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        """Time the GPU work enqueued inside the ``with`` block (on the current stream)."""
        if not self.enabled:
            yield
            return
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        yield
        end.record()
        self.events.append((start, end))

    def idle_fraction(self) -> float | None:
        """1 - (sum of step times) / (first step's start to last step's end), GPU clock."""
        if not self.events:
            return None
        self.events[-1][1].synchronize()
        window_ms = self.events[0][0].elapsed_time(self.events[-1][1])
        busy_ms = sum(start.elapsed_time(end) for start, end in self.events)
        return max(0.0, 1.0 - busy_ms / window_ms) if window_ms > 0 else 0.0


Prepare = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def _labels_only(images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return images, (labels % 1000).long()


def run_fed(loader: Iterable[Any], step: Callable[..., None], device: torch.device, steps: int,
            warmup: int = 3, prepare: Prepare | None = None) -> dict[str, float | None]:
    """Train ``steps`` steps fed by ``loader`` after ``warmup`` steps: img/s, data wait, GPU idle.

    prepare: turns a loaded (images, labels) into the step's inputs (default: labels mod
        1000 as int64); the stock loader's host-to-device copy and bf16 cast go here. Its
        GPU work runs on the step's stream outside the timed steps, so it counts as idle.
    img_s: images over the host clock between two ``torch.cuda.synchronize()``.
    wait_fraction: host time in ``next()`` and ``prepare`` (the host otherwise runs ahead of
        the GPU, so time there is time the GPU can starve).
    gpu_idle_fraction: share of the GPU-clock window (first step's start to last step's
        end, CUDA events on the step's stream) in which that stream ran no training step:
        waiting for data, or copying it on that stream. None off CUDA.
    """
    prepare = prepare or _labels_only
    batches = _forever(loader)
    for _ in range(warmup):
        step(*prepare(*_split(next(batches))))
    _sync(device)
    timer = StepTimer(device)
    wait_s, seen, start_s = 0.0, 0, time.perf_counter()
    for _ in range(steps):
        t0 = time.perf_counter()
        images, labels = prepare(*_split(next(batches)))
        wait_s += time.perf_counter() - t0
        with timer.step():
            step(images, labels)
        seen += images.shape[0]
    _sync(device)
    total_s = time.perf_counter() - start_s
    batches.close()
    return {"img_s": seen / total_s, "wait_fraction": wait_s / total_s, "gpu_idle_fraction": timer.idle_fraction()}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def cycled_indices(num_samples: int, count: int, seed: int = 0) -> list[int]:
    """``count`` sample indices: shuffled passes over 0..num_samples-1, one after another.

    As the sampler of part 3 it makes one epoch as long as the run, however few samples
    the shards hold: no epoch boundary (workers draining, then refilling) while timing.
    """
    if num_samples < 1:
        raise ToolError("the shards hold no samples")
    rng = np.random.default_rng(seed)
    passes = -(-count // num_samples)
    return [int(i) for _ in range(passes) for i in rng.permutation(num_samples)][:count]


@dataclasses.dataclass(frozen=True)
class Feed:
    """One data source of part 3: ``make(num_workers, samples)`` builds its loader, which
    yields (images, labels) that ``prepare`` (None: labels only) turns into step inputs."""

    name: str
    make: Callable[[int, int], Any]
    prepare: Prepare | None = None


def ours_feed(name: str, shards: Path, sizes: Sizes, device: torch.device) -> Feed:
    """``loaders.DataLoader(device=...)`` over dataprep shards: the fused decode + random crop
    + flip on the CPU (``RandomResizedCropDecode``), uint8 to the device, normalised there
    to bf16 channels_last (``Augment`` with no ops): the stock feed's transforms, split."""
    from loaders import DataLoader, RandomResizedCropDecode, ShardDataset

    def make(num_workers: int, samples: int) -> Any:
        dataset = ShardDataset(shards, transform=RandomResizedCropDecode(sizes.side))
        augment = Augment([], out_dtype=torch.bfloat16, mean=IMAGENET_MEAN, std=IMAGENET_STD)
        # drop_last: a short last batch would be a new shape for cuDNN to autotune.
        return DataLoader(dataset, batch_size=sizes.batch, num_workers=num_workers, device=str(device),
                          sampler=cycled_indices(len(dataset), samples), drop_last=True, device_transform=augment)

    return Feed(name, make)


class RawImageFolder(torch.utils.data.Dataset[tuple[torch.Tensor, int]]):
    """torchvision's ``ImageFolder`` with RandomResizedCrop, RandomHorizontalFlip, ToTensor and
    Normalize, written with Pillow for machines without torchvision: float32 [3, side, side]
    on the CPU and the class index. Randomness from ``random``, which torch seeds per worker."""

    def __init__(self, root: Path, side: int) -> None:
        classes = sorted(p.name for p in root.iterdir() if p.is_dir())
        self.files = [(path, label) for label, name in enumerate(classes) for path in sorted((root / name).iterdir())
                      if path.is_file() and path.suffix.lower() in IMAGE_SUFFIXES]
        if not self.files:
            raise ToolError(f"no image files in the class folders of {root}")
        self.side = side
        self.mean = torch.tensor(IMAGENET_MEAN).view(3, 1, 1)
        self.std = torch.tensor(IMAGENET_STD).view(3, 1, 1)

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        path, label = self.files[index]
        with Image.open(path) as img:
            rgb = img.convert("RGB")
        box = _crop_box(*rgb.size)
        out = rgb.resize((self.side, self.side), Image.Resampling.BILINEAR, box=box)
        if random.random() < 0.5:
            out = out.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        floats = torch.from_numpy(np.asarray(out, dtype=np.float32) / 255.0).permute(2, 0, 1)
        return (floats - self.mean) / self.std, label


def _crop_box(width: int, height: int) -> tuple[int, int, int, int]:
    """torchvision's RandomResizedCrop box (scale 0.08-1, ratio 3/4-4/3, 10 tries, then central)."""
    area = width * height
    for _ in range(10):
        target = area * random.uniform(0.08, 1.0)
        aspect = math.exp(random.uniform(math.log(3 / 4), math.log(4 / 3)))
        w, h = round(math.sqrt(target * aspect)), round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            left, top = random.randint(0, width - w), random.randint(0, height - h)
            return left, top, left + w, top + h
    side = min(width, height)
    left, top = (width - side) // 2, (height - side) // 2
    return left, top, left + side, top + side


def stock_dataset(raw_images: Path, side: int) -> tuple[torch.utils.data.Dataset[Any], str]:
    """(the stock pipeline's dataset over an image-folder tree, which implementation):
    torchvision's ImageFolder and transforms when importable, else ``RawImageFolder``."""
    try:
        import torchvision
        from torchvision import transforms as tv
    except ImportError:
        return RawImageFolder(raw_images, side), "pillow (torchvision not importable)"
    transform = tv.Compose([tv.RandomResizedCrop(side), tv.RandomHorizontalFlip(), tv.ToTensor(),
                            tv.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    return torchvision.datasets.ImageFolder(str(raw_images), transform=transform), "torchvision"


def stock_feed(name: str, raw_images: Path, sizes: Sizes, device: torch.device) -> Feed:
    """``torch.utils.data.DataLoader`` over the raw files with float32 transforms on the CPU
    (worker processes, pinned batches), copied and cast to bf16 channels_last by the step."""
    dataset, _ = stock_dataset(raw_images, sizes.side)

    def make(num_workers: int, samples: int) -> Any:
        return torch.utils.data.DataLoader(dataset, batch_size=sizes.batch, num_workers=num_workers,
                                           sampler=cycled_indices(len(dataset), samples), drop_last=True,
                                           pin_memory=device.type == "cuda")

    def prepare(images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        images = images.to(device, non_blocking=True).to(torch.bfloat16, memory_format=torch.channels_last)
        return images, (labels.to(device, non_blocking=True) % 1000).long()

    return Feed(name, make, prepare)


def fed_steps(sizes: Sizes, num_workers: int) -> tuple[int, int]:
    """(warm-up, timed) steps for ``num_workers`` workers: enough warm-up for the workers'
    first burst (one batch each) to be consumed, and enough timed steps to average bursts."""
    return num_workers + 3, max(sizes.steps, sizes.fed_steps_per_worker * num_workers)


def measure_ceiling(device: torch.device, sizes: Sizes, step: Callable[..., None]) -> dict[str, Any]:
    """The same step on one batch already on the device, timed as the fed runs are."""
    batch, labels = synthetic_batch(device, sizes)
    fed = run_fed(itertools.repeat((batch, labels)), step, device, sizes.steps, warmup=3)
    return {"img_s": fed["img_s"], "gpu_idle_fraction": fed["gpu_idle_fraction"]}


def measure_end_to_end(device: torch.device, sizes: Sizes, step: Callable[..., None], feeds: Sequence[Feed],
                       workers: Sequence[int], *, deadline: float | None = None,
                       on_row: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Part 3: the ceiling (data already on the device) vs each feed at each worker count.

    deadline: a ``time.monotonic()`` past which the remaining rows are skipped (recorded
    so); on_row: called with the results so far after each row (to save them at once).
    """
    ceiling = measure_ceiling(device, sizes, step)
    out: dict[str, Any] = {"ceiling_img_s": ceiling["img_s"], "ceiling_gpu_idle_fraction": ceiling["gpu_idle_fraction"],
                           "fed": []}
    for feed, num_workers in itertools.product(feeds, workers):
        row: dict[str, Any] = {"feed": feed.name, "num_workers": num_workers}
        if deadline is not None and time.monotonic() > deadline:
            row["skipped"] = BUDGET_SPENT
        else:
            warmup, steps = fed_steps(sizes, num_workers)
            try:
                loader = feed.make(num_workers, (warmup + steps) * sizes.batch)
                try:
                    fed = run_fed(loader, step, device, steps, warmup, feed.prepare)
                finally:
                    close = getattr(loader, "close", None)
                    if callable(close):
                        close()
                    del loader
            # A measuring tool: one failing row (a worker crash, an unreadable file) is
            # recorded with its cause and the other rows still run.
            except Exception as err:  # noqa: BLE001
                row["error"] = f"{type(err).__name__}: {err}"
            else:
                row.update(steps=steps, **fed, ratio_to_ceiling=fed["img_s"] / ceiling["img_s"])
        out["fed"].append(row)
        if on_row is not None:
            on_row(out)
    return out


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
    crop, resize, flip); gpu_full_img_s: ``torchvision.io.decode_jpeg(list, device=...)``
    on lists of ``batch``; gpu_resize_img_s: that, then each image resized to side x side
    on the GPU (what the CPU crop path delivers). GPU figures are skipped with a reason.
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
    try:
        import torchvision.io as tvio
    except ImportError as err:
        return {**out, "gpu_skipped": f"torchvision not importable: {err}"}
    data = [torch.frombuffer(bytearray(j), dtype=torch.uint8) for j in jpegs]
    lists = [data[k : k + batch] for k in range(0, len(data), batch)]

    def decode_all(resize: bool) -> None:
        for chunk in lists:
            images = tvio.decode_jpeg(chunk, mode=tvio.ImageReadMode.RGB, device=device)
            if resize:
                torch.stack([F.interpolate(im[None].float(), size=(side, side), mode="bilinear")[0] for im in images])

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


def _pct(value: float | None) -> float | None:
    return None if value is None else 100 * value


def render_h2d(rows: Sequence[dict[str, Any]], title: str) -> str:
    return format_table(["dtype", "host", "MB", "ms/batch", "GB/s", "% of link peak"],
                        [[r["dtype"], r["host"], r["mb"], r["ms"], r["gb_s"], _pct(r.get("of_link_peak"))]
                         for r in rows], title=title)


def render_augment(aug: dict[str, Any], title: str) -> str:
    return format_table(
        ["out dtype", "ms/batch", "% of step", f"< {TARGET_AUGMENT_FRACTION:.0%}"],
        [[a["out_dtype"], a["ms"], 100 * a["fraction_of_step"], a["meets_target"]] for a in aug["augment"]],
        title=f"{title}, batch {aug['batch']} at {aug['side']}px; ResNet-50 step {aug['step_ms']:.1f} ms")


def render_end_to_end(e2e: dict[str, Any], title: str) -> str:
    if "skipped" in e2e:
        return f"{title}: skipped ({e2e['skipped']})"
    rows = [[r["feed"], r["num_workers"], r.get("steps"), r.get("img_s"), _pct(r.get("wait_fraction")),
             _pct(r.get("gpu_idle_fraction")), r.get("ratio_to_ceiling"), r.get("error") or r.get("skipped") or ""]
            for r in e2e["fed"]]
    idle = e2e.get("ceiling_gpu_idle_fraction")
    idle_text = "" if idle is None else f", GPU idle {100 * idle:.1f}%"
    return format_table(["feed", "workers", "timed steps", "img/s", "waiting %", "GPU idle %", "of ceiling", "note"],
                        rows, title=f"{title}; ceiling (data already on the device) {e2e['ceiling_img_s']:.0f} img/s"
                                    f"{idle_text}")


def render_decode(decode: dict[str, Any], title: str) -> str:
    if "skipped" in decode:
        return f"{title}: skipped ({decode['skipped']})"
    rows = [[f"CPU Pillow full decode, {decode['threads']} threads", decode["cpu_full_img_s"]],
            [f"CPU loader crop decode, {decode['threads']} threads", decode["cpu_loader_crop_img_s"]],
            ["GPU decode_jpeg, batched", decode.get("gpu_full_img_s")],
            ["GPU decode_jpeg + resize", decode.get("gpu_resize_img_s")]]
    note = f" (GPU: {decode['gpu_skipped']})" if "gpu_skipped" in decode else ""
    return format_table(["decoder", "img/s"], rows,
                        title=f"{title}: {decode['images']} JPEGs, mean {decode['mean_kib']:.0f} KiB{note}")


def render(results: dict[str, Any]) -> str:
    """The results of the parts that ran as plain-text tables."""
    parts = []
    if "h2d" in results:
        parts.append(render_h2d(results["h2d"], f"1. host-to-device copy ({results['device']})"))
    if "augment" in results:
        parts.append(render_augment(results["augment"], "2. augment"))
    if "end_to_end" in results:
        parts.append(render_end_to_end(results["end_to_end"], "3. end to end"))
    if "gpu_decode" in results:
        parts.append(render_decode(results["gpu_decode"], "4. JPEG decode"))
    return "\n\n".join(parts)


def record(text: str, results: dict[str, Any], argv: Sequence[str]) -> None:
    """Append a dated section to tools/RESULTS.md: the GPU, torch / CUDA / cuDNN versions,
    the command, and the tables."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    versions = ", ".join(f"{name} {results.get(name) or '-'}" for name in ("torch", "cuda", "cudnn", "torchvision"))
    command = " ".join(["python -m tools.gpu_bench", *argv])
    with open(RESULTS_MD, "a", encoding="utf-8") as f:
        f.write(f"\n## gpu_bench, {stamp}, {results['device']}\n\n{versions}; `{command}`\n\n```\n{text}\n```\n")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"python -m tools.{TOOL}", description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=Path, help="dataprep output directory (default: make synthetic shards)")
    parser.add_argument("--steps", type=int,
                        help=f"timed steps per measurement (default {FULL.steps}; smoke {SMOKE.steps})")
    parser.add_argument("--workers", default=None,
                        help="comma-separated worker counts for part 3 (default 4,8,16; smoke 2)")
    parser.add_argument("--json", metavar="PATH", help="write the report as JSON to PATH ('-' for stdout)")
    parser.add_argument("--parts", default="1,2,3,4", help="comma-separated parts to run (default %(default)s)")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes, seconds: a quick check of every path; runs on the CPU when there is no GPU")
    parser.add_argument("--record", action="store_true", help="append the tables to tools/RESULTS.md")
    return parser.parse_args(argv)


def versions(device: torch.device) -> dict[str, Any]:
    """torch, CUDA (the build's), cuDNN and torchvision versions; None where absent."""
    try:
        import torchvision
    except ImportError:
        vision = None
    else:
        vision = torchvision.__version__
    cuda = device.type == "cuda"
    return {"torch": torch.__version__, "cuda": torch.version.cuda if cuda else None,
            "cudnn": torch.backends.cudnn.version() if cuda else None, "torchvision": vision}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The parts that ``args`` select, with their sizes and device."""
    if not args.smoke and not torch.cuda.is_available():
        raise ToolError("needs CUDA (no GPU found); use --smoke for a tiny run on the CPU")
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    base = SMOKE if args.smoke else FULL
    steps = args.steps if args.steps is not None else base.steps
    if steps < 1:
        raise ToolError(f"--steps must be a positive int (got {steps})")
    sizes = dataclasses.replace(base, steps=steps)
    workers = _int_list("--workers", args.workers or ("2" if args.smoke else "4,8,16"))
    parts = set(_int_list("--parts", args.parts))
    if args.shards is not None and not args.shards.is_dir():
        raise ToolError(f"--shards {args.shards} is not a directory")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    results: dict[str, Any] = {"device": name, **versions(device), "smoke": args.smoke,
                               "batch": sizes.batch, "side": sizes.side, "steps": sizes.steps}
    # The training step is timed as a tuned run would train: cuDNN picks the fastest
    # algorithms once per shape (in the warm-up calls, which are never timed).
    torch.backends.cudnn.benchmark = device.type == "cuda"
    if 1 in parts:
        results["link"] = link_info(device)
        results["h2d"] = measure_h2d(device, sizes, results["link"].get("peak_gb_s"))
    step = train_step_fn(device, sizes) if parts & {2, 3} else None
    if step is not None and 2 in parts:
        results["augment"] = measure_augment(device, sizes, step)
    with tempfile.TemporaryDirectory(prefix="gpu_bench_") as tmp:
        wants_decode = 4 in parts and device.type == "cuda" and importlib.util.find_spec("torchvision") is not None
        shards, why_not = args.shards, None
        if shards is None and (3 in parts or wants_decode):
            try:
                shards = make_shards(Path(tmp), sizes)
            except (ToolError, ImportError) as err:  # keep the parts already measured
                why_not = f"making synthetic shards failed: {err}"
        if step is not None and 3 in parts:
            feeds = [ours_feed("loaders, shards", shards, sizes, device)] if shards is not None else []
            results["end_to_end"] = (measure_end_to_end(device, sizes, step, feeds, workers) if shards is not None
                                     else {"skipped": why_not})
        if 4 in parts:
            results["gpu_decode"] = measure_gpu_decode(device, shards) if why_not is None else {"skipped": why_not}
    return results


def _int_list(option: str, text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError as err:
        raise ToolError(f"{option} must be comma-separated ints (got {text!r})") from err
    if any(v < 0 for v in values):
        raise ToolError(f"{option} must not be negative (got {text!r})")
    return values


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        results = run(args)
    except ToolError as err:
        print(f"{TOOL}: {err}", file=sys.stderr)
        return 2
    text = render(results)
    if args.json != "-":  # '-' keeps stdout pure JSON
        print(text)
    if args.json is not None:
        write_json(args.json, report_document(TOOL, results, sys.argv if argv is None else list(argv)))
    if args.record:
        record(text, results, sys.argv[1:] if argv is None else list(argv))
        print(f"appended to {RESULTS_MD}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
