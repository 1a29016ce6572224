"""Decode and transform throughput per core for the images in a shard directory, and its scaling.

    python -m tools.profile.cpu SHARD_DIR [--n 300] [--max-workers N] [--repeat 2] [--seed 0]
                        [--json [PATH]] [--plot PATH]

``n`` images are sampled from the shards (one ``pread`` each, through the index) and
timed on one core, as CPU seconds of the measuring thread (best of ``--repeat``, cases
round-robin, so a burst of load elsewhere hits them alike):

- decode (codec only): full-resolution JPEG decode into a Pillow image;
- decode to array: the same, then the uint8 RGB array (``loaders.read.decode.decode_rgb``);
- decode + resize 224 (full res): full decode, then one resize to 224x224 (no draft mode);
- RandomResizedCrop 224: the fused training path (``RandomResizedCropDecode``);
- CenterCrop 224: the fused evaluation path (``CenterCropDecode``);
- collate: batches of 64 uint8 224x224x3 images (+ int labels) into one tensor.

Megapixels are those of the encoded images (collate: of the 224x224 outputs). Then the
fused random crop runs on 1..N threads and 1..N processes (wall time, N = cores
available to this process), with efficiency = rate / (workers x the 1-worker rate).
Which image library runs (Pillow or Pillow-SIMD, libjpeg-turbo, simplejpeg) is printed
first: per-core figures mean little without it. Codec-level comparisons of backends
are ``tools.bench.decode_bench``'s job.
"""

from __future__ import annotations

import argparse
import functools
import io
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from importlib import metadata
from typing import Any

import numpy as np
from PIL import Image, features

from dataprep.errors import DataprepError
from loaders.errors import LoaderError
from loaders.loader.collate import default_collate
from loaders.read.decode import active_backend, decode_crop_resize, decode_rgb, image_size
from loaders.read.topology import cpus_available
from loaders.read.transforms import CenterCropDecode, RandomResizedCropDecode
from tools.common.proctree import ProcessTeam
from tools.common.report import ToolError, add_output_args, bar_plot, check_int, emit, format_table, require_plot
from tools.common.shard_images import ShardImages, read_field, read_images
from tools.common.timing import SampleFn, time_cpu, time_threads

TOOL = "cpu"
OUTPUT_SIZE = 224
COLLATE_BATCH = 64
THREAD, PROCESS = "thread", "process"
DECODE = "decode (codec only)"
DECODE_ARRAY = "decode to uint8 array"
DECODE_RESIZE = f"decode + resize {OUTPUT_SIZE} (full res)"
RANDOM_CROP = f"RandomResizedCrop {OUTPUT_SIZE} (fused)"
CENTER_CROP = f"CenterCrop {OUTPUT_SIZE} (fused)"
COLLATE = f"collate {OUTPUT_SIZE}x{OUTPUT_SIZE} uint8, batch {COLLATE_BATCH}"


@dataclass(frozen=True)
class ImageLibrary:
    """The image stack in use: Pillow or Pillow-SIMD (its versions end in ".postN"), the JPEG codec, simplejpeg."""

    pillow: str
    pillow_simd: bool
    libjpeg_turbo: bool
    libjpeg_turbo_version: str | None
    jpeg_version: str | None
    simplejpeg: str | None
    active_backend: str

    def describe(self) -> str:
        codec = (f"libjpeg-turbo {self.libjpeg_turbo_version}" if self.libjpeg_turbo
                 else f"libjpeg {self.jpeg_version} (not turbo)")
        extra = f", simplejpeg {self.simplejpeg}" if self.simplejpeg else ", no simplejpeg"
        pillow = "Pillow-SIMD" if self.pillow_simd else "Pillow"
        return f"{pillow} {self.pillow} with {codec}{extra}; decodes: {self.active_backend}"


def image_library() -> ImageLibrary:
    """What decodes and resizes here (read from PIL.features and package metadata)."""
    turbo = bool(features.check_feature("libjpeg_turbo"))
    try:
        simple: str | None = metadata.version("simplejpeg")
    except metadata.PackageNotFoundError:
        simple = None
    return ImageLibrary(
        pillow=Image.__version__, pillow_simd=".post" in Image.__version__, libjpeg_turbo=turbo,
        libjpeg_turbo_version=features.version("libjpeg_turbo") if turbo else None,
        jpeg_version=features.version("jpg"), simplejpeg=simple, active_backend=active_backend(),
    )


@dataclass(frozen=True)
class StageRate:
    """One case on one core: ``images`` processed in ``cpu_seconds`` of thread CPU time.

    megapixels: of the encoded input images (collate: of the outputs).
    """

    stage: str
    images: int
    cpu_seconds: float
    megapixels: float

    @property
    def images_per_s(self) -> float:
        return self.images / self.cpu_seconds

    @property
    def megapixels_per_s(self) -> float:
        return self.megapixels / self.cpu_seconds

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "images_per_s": self.images_per_s, "megapixels_per_s": self.megapixels_per_s}


@dataclass(frozen=True)
class ScalingPoint:
    """The fused random crop over all images on ``workers`` threads or processes, in ``wall_seconds``.

    efficiency: images_per_s / (workers x the 1-worker images_per_s of the same mode); 1 is linear.
    """

    mode: str
    workers: int
    images: int
    wall_seconds: float
    efficiency: float

    @property
    def images_per_s(self) -> float:
        return self.images / self.wall_seconds

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "images_per_s": self.images_per_s}


@dataclass(frozen=True)
class CpuReport:
    """What ``measure_cpu`` found; see the module docstring for the cases."""

    shard_dir: str
    images: dict[str, Any]
    cores_available: int
    library: ImageLibrary
    stages: tuple[StageRate, ...]
    scaling: tuple[ScalingPoint, ...]
    repeat: int
    seed: int
    notes: tuple[str, ...] = field(default=())

    def stage(self, name: str) -> StageRate:
        """The stage called ``name`` (KeyError naming the stages there are, if none)."""
        for rate in self.stages:
            if rate.stage == name:
                return rate
        raise KeyError(f"no stage {name!r}; stages: {[s.stage for s in self.stages]}")

    def to_json(self) -> dict[str, Any]:
        return {"shard_dir": self.shard_dir, "images": self.images, "cores_available": self.cores_available,
                "library": asdict(self.library), "stages": [s.to_json() for s in self.stages],
                "scaling": [p.to_json() for p in self.scaling], "repeat": self.repeat, "seed": self.seed,
                "notes": list(self.notes)}


def stage_functions(image_field: str) -> dict[str, SampleFn]:
    """Stage name -> fn(encoded image, rng) for the per-image cases (not collate)."""
    rrc = RandomResizedCropDecode(OUTPUT_SIZE, field=image_field)
    center = CenterCropDecode(OUTPUT_SIZE, field=image_field)
    out = (OUTPUT_SIZE, OUTPUT_SIZE)
    return {
        DECODE: lambda d, r: _codec_decode(d),
        DECODE_ARRAY: lambda d, r: decode_rgb(d),
        DECODE_RESIZE: lambda d, r: decode_crop_resize(d, (0, 0, *image_size(d)), out, reduced=False),
        RANDOM_CROP: lambda d, r: rrc({image_field: d}, r),
        CENTER_CROP: lambda d, r: center({image_field: d}, r),
    }


def _codec_decode(data: bytes) -> None:
    with Image.open(io.BytesIO(data)) as img:
        img.load()


def collate_batches(count: int, batch_size: int = COLLATE_BATCH, *, seed: int = 0) -> list[list[dict[str, Any]]]:
    """``count`` samples {"image": uint8 [224, 224, 3], "cls": int} in batches of ``batch_size``, ready to collate."""
    pixel_rng = np.random.default_rng(seed)
    pool = [pixel_rng.integers(0, 256, (OUTPUT_SIZE, OUTPUT_SIZE, 3), dtype=np.uint8)
            for _ in range(min(count, batch_size))]
    samples = [{"image": pool[i % len(pool)], "cls": i % 10} for i in range(count)]
    return [samples[i : i + batch_size] for i in range(0, count, batch_size)]


def time_collate(batches: Sequence[Sequence[dict[str, Any]]]) -> float:
    """CPU seconds of this thread to collate every batch with ``loaders.loader.collate.default_collate``."""
    start = time.thread_time()
    for batch in batches:
        default_collate(batch)
    return max(time.thread_time() - start, 1e-9)


def measure_stages(images: ShardImages, *, repeat: int) -> tuple[StageRate, ...]:
    """Each per-image case and the collate case on one core, best of ``repeat`` passes."""
    fns = stage_functions(images.field)
    data = list(images.images)
    for fn in fns.values():
        fn(data[0], np.random.default_rng(0))  # warm up: imports, first-call allocations
    batches = collate_batches(len(data))
    best = dict.fromkeys([*fns, COLLATE], float("inf"))
    for _ in range(repeat):
        for name, fn in fns.items():
            best[name] = min(best[name], time_cpu(fn, data))
        best[COLLATE] = min(best[COLLATE], time_collate(batches))
    megapixels = images.megapixels
    rates = [StageRate(name, len(data), best[name], megapixels) for name in fns]
    return (*rates, StageRate(COLLATE, len(data), best[COLLATE], len(data) * OUTPUT_SIZE * OUTPUT_SIZE / 1e6))


def worker_counts(max_workers: int) -> list[int]:
    """1, 2, 4, ... up to and including ``max_workers``."""
    counts, k = [], 1
    while k < max_workers:
        counts.append(k)
        k *= 2
    return [*counts, max_workers]


def _random_crops(image_field: str, images: Sequence[bytes], seed: int) -> None:
    """The fused random crop over ``images``: what each process of the scaling run repeats."""
    transform = RandomResizedCropDecode(OUTPUT_SIZE, field=image_field)
    crop_rng = np.random.default_rng(seed)
    for data in images:
        transform({image_field: data}, crop_rng)


def measure_scaling(images: ShardImages, max_workers: int, *, repeat: int, seed: int) -> tuple[ScalingPoint, ...]:
    """The fused random crop over all images on 1..max_workers threads, then processes (wall time)."""
    counts = worker_counts(max_workers)
    crop = stage_functions(images.field)[RANDOM_CROP]
    data = list(images.images)
    walls: dict[tuple[str, int], float] = {}
    for _ in range(repeat):  # alternate counts, so every count sees the same background load
        for k in counts:
            walls[(THREAD, k)] = min(walls.get((THREAD, k), float("inf")), time_threads(crop, data, k)[0])
    load = functools.partial(read_field, images.shard_dir, images.field, list(images.indices))
    with ProcessTeam(load, functools.partial(_random_crops, images.field), max_workers) as team:
        for r in range(repeat):
            for k in counts:
                walls[(PROCESS, k)] = min(walls.get((PROCESS, k), float("inf")), team.run(k, seed + 1000 * r))
    points = []
    for mode in (THREAD, PROCESS):
        one = len(data) / walls[(mode, 1)]
        for k in counts:
            wall = walls[(mode, k)]
            points.append(ScalingPoint(mode, k, len(data), wall, len(data) / wall / (k * one)))
    return tuple(points)


def _notes(library: ImageLibrary, cores: int) -> list[str]:
    notes = ["per-core figures are CPU seconds of the measuring thread; scaling figures are wall time, "
             "so other load on the machine lowers them."]
    if not library.pillow_simd:
        notes.append("stock Pillow, not Pillow-SIMD: resizes run several times slower "
                     "(`make venv` builds Pillow-SIMD).")
    if not library.libjpeg_turbo:
        notes.append("Pillow's JPEG codec is not libjpeg-turbo: decodes run 2-6x slower; rebuild Pillow against "
                     "libjpeg-turbo.")
    if cores == 1:
        notes.append("1 core available: no scaling to measure.")
    return notes


def measure_cpu(shard_dir: str | os.PathLike[str], *, n: int = 300, max_workers: int | None = None,
                repeat: int = 2, seed: int = 0) -> CpuReport:
    """Time the cases of the module docstring on ``n`` images of ``shard_dir``, then their scaling.

    max_workers: most threads/processes in the scaling run (default: cores available).
    Raises ``ToolError`` for bad arguments, ``ShardError`` for unreadable shards.
    """
    check_int("n", n, 1)
    check_int("repeat", repeat, 1)
    check_int("seed", seed, 0)
    cores = cpus_available()
    workers = cores if max_workers is None else check_int("max_workers", max_workers, 1)
    images = read_images(shard_dir, n, seed=seed)
    library = image_library()
    stages = measure_stages(images, repeat=repeat)
    scaling = measure_scaling(images, workers, repeat=repeat, seed=seed)
    return CpuReport(shard_dir=str(shard_dir), images=images.summary(), cores_available=cores, library=library,
                     stages=stages, scaling=scaling, repeat=repeat, seed=seed, notes=tuple(_notes(library, cores)))


def format_report(report: CpuReport) -> str:
    """The human-readable tables ``python -m tools.profile.cpu`` prints."""
    info = report.images
    lines = [f"{report.shard_dir}: {info['count']} of {info['num_samples']:,} images ({info['field']}), mean "
             f"{info['mean_width']:.0f}x{info['mean_height']:.0f} px, {info['mean_bytes'] / 1024:.0f} KiB",
             f"image library: {report.library.describe()}", ""]
    rows = [(s.stage, s.images_per_s, s.megapixels_per_s, 1e3 / s.images_per_s) for s in report.stages]
    lines.append(format_table(("stage", "images/s", "MP/s", "ms/image"), rows,
                              title=f"one core (CPU time, best of {report.repeat})"))
    scale_rows = [(p.mode, p.workers, p.images_per_s, p.images_per_s / p.workers, 100 * p.efficiency)
                  for p in report.scaling]
    lines += ["", format_table(("mode", "workers", "images/s", "per worker", "efficiency %"), scale_rows,
                               title=f"{RANDOM_CROP}: scaling, wall time ({report.cores_available} cores available)")]
    lines += [""] + [f"note: {n}" for n in report.notes]
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.profile.cpu", description=__doc__.split("\n")[0])
    parser.add_argument("shard_dir", metavar="SHARD_DIR", help="a dataprep output directory of tar shards")
    parser.add_argument("--n", type=int, default=300, help="images to sample (default 300)")
    parser.add_argument("--max-workers", type=int, help="most threads/processes in the scaling run (default: cores)")
    parser.add_argument("--repeat", type=int, default=2, help="passes per case, best kept (default 2)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the image sample and the crops (default 0)")
    add_output_args(parser, plot="a bar chart of images/s as PNG")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.plot:
            require_plot()
        report = measure_cpu(args.shard_dir, n=args.n, max_workers=args.max_workers, repeat=args.repeat, seed=args.seed)
    except (ToolError, LoaderError, DataprepError) as err:
        print(f"{TOOL}: {err}", file=sys.stderr)
        return 2
    emit(TOOL, format_report(report), report.to_json(), args.json, argv)
    if args.plot:
        labels = [s.stage for s in report.stages] + [f"{p.mode} x{p.workers}" for p in report.scaling]
        values = [s.images_per_s for s in report.stages] + [p.images_per_s for p in report.scaling]
        bar_plot(args.plot, labels, values, ylabel="images/s", title=f"CPU throughput: {report.shard_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
