"""Profile ``loaders.DataLoader`` (and the stock torch DataLoader) over a shard directory; name the bottleneck.

    python -m tools.loader SHARD_DIR [--workers 0,1,2] [--worker-types thread,process]
        [--batch-sizes 64] [--threads-per-worker 1] [--batches N] [--epochs E] [--stock]
        [--allocators system,jemalloc] [--sample-images 64] [--seed 0] [--json [PATH]] [--plot PATH]

Every configuration (the product of the lists; 0 workers runs once, in the main process)
loads ``ShardDataset(fields=(image, cls), transform=RandomResizedCropDecode(224))`` for
``--epochs`` epochs of at most ``--batches`` batches and reports img/s (after the first
batch), time to first batch, p50/p99 time between batches, CPU seconds per 1,000
samples (getrusage of this process and its reaped children; /proc for live ones) and
peak RSS and PSS summed over the process and its worker processes (``smaps_rollup``,
sampled by a background thread). ``--stock`` adds ``torch.utils.data.DataLoader`` over
the same dataset (process workers, torch's collate).

Stages are timed single-threaded on ``--sample-images`` samples (``STAGES``): read (one
pread through the index, wall time), decode (JPEG at the DCT scale the crop allows),
transform (the rest of the fused transform: crop, resize, flip, array), collate and,
with CUDA, copy to the device. ``cores / (seconds per sample)`` is the ceiling; the
fastest configuration is compared with it, and the largest stage named with what would
help: ``dataprep shard --resize-short 256`` (the transform timed again on the sampled
images as that command re-encodes them) or, when reads dominate, the disk's sequential
speed (``tools.disk``).

``--allocators system,jemalloc`` runs each configuration in a child process per
allocator (``tools.malloc.allocator_env``; entry point ``--child CONFIG_JSON``), 3
epochs unless ``--epochs`` says otherwise: compare peak RSS epoch by epoch.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from dataprep.clean.images import clean_image
from dataprep.clean.options import ImageOptions
from dataprep.errors import DataprepError
from dataprep.records import CleanRecord, RawRecord
from loaders import RandomResizedCropDecode
from loaders.loader.collate import default_collate
from loaders.read.decode import dct_scale_for, image_size
from loaders.errors import LoaderError
from loaders.read.topology import cpus_available
from loaders.read.transforms import random_resized_crop_box
from tools._loader_run import (MAIN, OUTPUT_SIZE, PROCESS, THREAD, ConfigResult, EpochResult, LoaderConfig, make_dataset,
                               run_config, run_in_child)
from tools._pagecache import device_of
from tools._report import ToolError, add_output_args, bar_plot, check_int, emit, format_table, require_plot
from tools.malloc import allocator_env

__all__ = ["ConfigResult", "EpochResult", "LoaderConfig", "LoaderReport", "StageCost", "expand_configs", "format_report",
           "main", "measure_stages", "pre_resize_factor", "profile_loader", "run_config"]

TOOL = "loader"
PRE_RESIZE_SHORT = 256
READ, DECODE, TRANSFORM, COLLATE, COPY = "read", "decode", "transform", "collate", "copy"
STAGES = (READ, DECODE, TRANSFORM, COLLATE, COPY)
STAGE_REPEAT = 2  # passes per stage timing, best kept


# ---------------------------------------------------------------- stage costs and the bottleneck


@dataclass(frozen=True)
class StageCost:
    """Seconds per sample of one stage on one core ("wall" for reads and copies, else thread "cpu")."""

    stage: str
    seconds_per_sample: float
    basis: str


def _timed(fn: Callable[[], Any], clock: Callable[[], float]) -> float:
    start = clock()
    fn()
    return clock() - start


def _best(fn: Callable[[], Any], clock: Callable[[], float] = time.thread_time) -> float:
    """Seconds of ``fn()`` on ``clock`` (thread CPU time by default), best of ``STAGE_REPEAT`` after a warm-up."""
    fn()  # first calls pay for imports and allocations, not the steady state
    return min(_timed(fn, clock) for _ in range(STAGE_REPEAT))


def _pick(count: int, n: int, seed: int) -> list[int]:
    pick_rng = np.random.default_rng(seed)
    return np.sort(pick_rng.choice(count, size=min(n, count), replace=False)).tolist()


def _decode_part(crop: RandomResizedCropDecode, data: bytes, rng: np.random.Generator) -> None:
    """Only the JPEG decode of ``crop``, at the DCT scale its box allows (the same draws as the transform)."""
    width, height = image_size(data)
    box = random_resized_crop_box(width, height, crop.scale, crop.ratio, rng)
    n = dct_scale_for((box[2], box[3]), (OUTPUT_SIZE, OUTPUT_SIZE))
    with Image.open(io.BytesIO(data)) as img:
        if n > 1 and img.format == "JPEG":
            img.draft("RGB", (max(1, width // n), max(1, height // n)))
        img.load()


def measure_stages(shard_dir: str | os.PathLike[str], *, sample_images: int, batch_size: int,
                   seed: int) -> tuple[tuple[StageCost, ...], float, int]:
    """(stage costs, mean bytes read per sample, samples timed) on ``sample_images`` samples of ``shard_dir``."""
    raw = make_dataset(shard_dir, transform=False, seed=seed)
    crop = make_dataset(shard_dir, seed=seed).transform
    indices = _pick(len(raw), sample_images, seed)
    start = time.perf_counter()
    samples = [raw[i] for i in indices]  # timed once: the page cache as found
    costs = {READ: time.perf_counter() - start}
    costs[DECODE] = _best(lambda: [_decode_part(crop, s[crop.field], np.random.default_rng(i)) for i, s in enumerate(samples)])
    fused = _best(lambda: [crop(s, np.random.default_rng(i)) for i, s in enumerate(samples)])
    costs[TRANSFORM] = max(fused - costs[DECODE], 0.0)
    outputs = [crop(s, np.random.default_rng(i)) for i, s in enumerate(samples)]
    batches = [outputs[k : k + batch_size] for k in range(0, len(outputs), batch_size)]
    costs[COLLATE] = _best(lambda: [default_collate(b) for b in batches])
    if torch.cuda.is_available():
        host = default_collate(batches[0])["image"].pin_memory()
        one = _best(lambda: (host.to("cuda", non_blocking=True), torch.cuda.synchronize()), time.perf_counter)
        costs[COPY] = one * len(batches)
    mean_bytes = float(np.mean([sum(len(v) for v in s.values() if isinstance(v, bytes)) for s in samples]))
    stages = tuple(StageCost(name, costs[name] / len(samples), "wall" if name in (READ, COPY) else "cpu")
                   for name in STAGES if name in costs)
    return stages, mean_bytes, len(samples)


def pre_resize_factor(shard_dir: str | os.PathLike[str], *, sample_images: int, seed: int) -> tuple[float, int]:
    """(transform CPU time on sampled images / on them as ``dataprep shard --resize-short 256`` stores them, images resized).

    The stored form is ``clean_image``'s output with that option (its default quality);
    (1.0, 0) when no sampled image has a short side above 256.
    """
    dataset = make_dataset(shard_dir, seed=seed)
    crop = dataset.transform
    originals = [dataset.shards.read(i)[crop.field] for i in _pick(len(dataset), sample_images, seed)]
    small = [_as_pre_resized(d, crop.field) for d in originals]
    resized = sum(a is not b for a, b in zip(originals, small))
    if not resized:
        return 1.0, 0

    def cost(images: list[bytes]) -> float:
        return _best(lambda: [crop({crop.field: d}, np.random.default_rng(i)) for i, d in enumerate(images)])

    return cost(originals) / max(cost(small), 1e-9), resized


def _as_pre_resized(data: bytes, image_field: str) -> bytes:
    """``data`` as ``dataprep shard --resize-short 256`` would store it (the same object when no resize is needed)."""
    if min(image_size(data)) <= PRE_RESIZE_SHORT:
        return data
    with tempfile.TemporaryDirectory(prefix="tools-loader-") as tmp:
        path = Path(tmp) / f"x.{image_field}"
        path.write_bytes(data)
        out = clean_image(RawRecord("x", path.name, {image_field: str(path)}), ImageOptions(resize_short=PRE_RESIZE_SHORT), None)
    if not isinstance(out, CleanRecord):
        return data  # cleaning would reject it: it would not be in the shards either way
    return next(v for k, v in out.fields.items() if k in ("jpg", "png"))  # type: ignore[return-value]


# ---------------------------------------------------------------- the report


@dataclass(frozen=True)
class LoaderReport:
    """What ``profile_loader`` found. Bytes and seconds unless the name says otherwise.

    ceiling_images_per_s: cores / (per-core seconds per sample of read + decode + transform
    + collate); bottleneck: the largest of those stages ("read" means I/O); disk_sequential_mib_s:
    cold sequential read speed of the shards, measured only when reads dominate.
    """

    shard_dir: str
    num_samples: int
    cores: int
    device: str
    stages: tuple[StageCost, ...]
    stage_samples: int
    mean_sample_bytes: float
    pre_resize_factor: float
    pre_resized_images: int
    results: tuple[ConfigResult, ...]
    epochs: int
    disk_sequential_mib_s: float | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def seconds_per_sample(self) -> float:
        return sum(s.seconds_per_sample for s in self.stages if s.stage != COPY)

    @property
    def ceiling_images_per_s(self) -> float:
        return self.cores / self.seconds_per_sample if self.seconds_per_sample > 0 else float("inf")

    @property
    def bottleneck(self) -> str:
        return max((s for s in self.stages if s.stage != COPY), key=lambda s: s.seconds_per_sample).stage

    def best(self, *, stock: bool = False) -> ConfigResult | None:
        """The fastest configuration of ``loaders.DataLoader`` (or of torch's, with ``stock``)."""
        mine = [r for r in self.results if r.config.stock == stock]
        return max(mine, key=lambda r: r.images_per_s, default=None)

    def recommendation(self) -> str:
        """One or two sentences: what bounds the fastest configuration and what would raise it."""
        best = self.best() or self.best(stock=True)
        if best is None:
            return "no configuration ran"
        share = best.images_per_s / self.ceiling_images_per_s
        who = "the main process alone gives" if best.config.num_workers == 0 else (
            f"{best.config.num_workers} {best.config.worker_type} worker{'s give' if best.config.num_workers > 1 else ' gives'}")
        if self.bottleneck == READ:
            disk = f" of {self.disk_sequential_mib_s * 1.048576:.0f} MB/s sequential" if self.disk_sequential_mib_s else ""
            text = (f"I/O-bound at {best.images_per_s * self.mean_sample_bytes / 1e6:.1f} MB/s on {self.device}{disk}: "
                    "faster storage, a warm page cache or order='blocks' for slow disks")
        elif self.bottleneck in (DECODE, TRANSFORM):
            # Above ~95% the difference is within the error of the stage timings (and of short epochs).
            reach = "the whole" if share >= 0.95 else f"{share:.0%} of the"
            text = (f"decode-bound: {who} {reach} {self.cores}-core ceiling ({best.images_per_s:.0f} of "
                    f"{self.ceiling_images_per_s:.0f} img/s)")
            if self.pre_resize_factor >= 1.2:
                text += f"; pre-resize with `dataprep shard --resize-short {PRE_RESIZE_SHORT}` for ~{self.pre_resize_factor:.1f}x more"
            else:
                text += f"; the images are already small (short side <= {PRE_RESIZE_SHORT} or close): only more cores raise it"
        else:
            text = (f"collate-bound: {who} {share:.0%} of the {self.cores}-core ceiling; keep samples uint8 and of one "
                    "shape so collate is one copy per sample (convert to float on the device)")
        if self.bottleneck != READ and share < 0.8 and best.config.num_workers < self.cores:
            text += f". The loader is below its ceiling: try {self.cores} workers"
        return text

    def to_json(self) -> dict[str, Any]:
        best, stock = self.best(), self.best(stock=True)
        return {"shard_dir": self.shard_dir, "num_samples": self.num_samples, "cores": self.cores, "device": self.device,
                "stages": [{**asdict(s), "ms_per_sample": 1e3 * s.seconds_per_sample} for s in self.stages],
                "stage_samples": self.stage_samples, "mean_sample_bytes": self.mean_sample_bytes,
                "seconds_per_sample": self.seconds_per_sample, "ceiling_images_per_s": self.ceiling_images_per_s,
                "pre_resize": {"factor": self.pre_resize_factor, "images_resized": self.pre_resized_images,
                               "resize_short": PRE_RESIZE_SHORT},
                "configs": [r.to_json() for r in self.results], "epochs": self.epochs,
                "best": best.config.label if best else None, "best_stock": stock.config.label if stock else None,
                "bottleneck": self.bottleneck, "disk_sequential_mib_s": self.disk_sequential_mib_s,
                "recommendation": self.recommendation(), "notes": list(self.notes)}


def expand_configs(workers: Sequence[int], worker_types: Sequence[str], batch_sizes: Sequence[int],
                   threads_per_worker: Sequence[int], *, stock: bool = False) -> list[LoaderConfig]:
    """Every combination, without repeats (0 workers once per batch size); stock process ones after each."""
    out: list[LoaderConfig] = []
    for batch_size in batch_sizes:
        for n in workers:
            for worker_type in worker_types if n else (MAIN,):
                for threads in threads_per_worker if n else (1,):
                    out.append(LoaderConfig(n, worker_type, batch_size, threads))
            if stock:
                out.append(LoaderConfig(n, PROCESS, batch_size, 1, stock=True))
    return list(dict.fromkeys(out))


def _disk_speed(shard_dir: str | os.PathLike[str]) -> float | None:
    from tools.disk import measure_disk  # only when reads dominate: it reads every shard cold

    report = measure_disk(shard_dir, random_samples=0, cold=True)
    found = report.find("shards", "sequential", "cold")
    return found.read_mib_s if found else None


def profile_loader(shard_dir: str | os.PathLike[str], configs: Sequence[LoaderConfig], *, batches: int | None = None,
                   epochs: int | None = None, allocators: Sequence[str] | None = None, sample_images: int = 64,
                   seed: int = 0) -> LoaderReport:
    """Run every configuration (per allocator, in a child, when ``allocators`` is given), time the stages, analyse.

    epochs: per configuration (default 3 with allocators, else 1); batches: at most this
    many per epoch (default: whole epochs). Raises ``ToolError``, ``LoaderError``, ``DataprepError``.
    """
    if not configs:
        raise ToolError("'configs' must hold at least one LoaderConfig (got none)")
    epochs = check_int("epochs", epochs, 1) if epochs is not None else (3 if allocators else 1)
    batches = check_int("batches", batches, 1) if batches is not None else None
    check_int("sample_images", sample_images, 1)
    check_int("seed", seed, 0)
    if allocators is not None:
        for name in allocators:
            allocator_env(name)  # fails now, naming the package to install, not after the first runs
    stages, mean_bytes, timed = measure_stages(shard_dir, sample_images=sample_images, batch_size=configs[0].batch_size, seed=seed)
    factor, resized = pre_resize_factor(shard_dir, sample_images=sample_images, seed=seed)
    results = []
    for config in configs:
        for allocator in allocators or (None,):
            cfg = replace(config, allocator=allocator)
            run = run_in_child if allocator is not None else run_config
            results.append(run(shard_dir, cfg, batches=batches, epochs=epochs, seed=seed))
    report = LoaderReport(os.fspath(shard_dir), len(make_dataset(shard_dir, transform=False)), cpus_available(),
                          device_of(shard_dir).describe(), stages, timed, mean_bytes, factor, resized, tuple(results), epochs)
    disk = _disk_speed(shard_dir) if report.bottleneck == READ else None
    return replace(report, disk_sequential_mib_s=disk, notes=tuple(_notes(report, allocators)))


def _notes(report: LoaderReport, allocators: Sequence[str] | None) -> list[str]:
    notes = [f"stages: one thread on {report.stage_samples} samples; read and copy are wall time (page cache as "
             "found), the others CPU time. img/s excludes each epoch's first batch."]
    if not any(s.stage == COPY for s in report.stages):
        notes.append("no CUDA: the host-to-device copy is not measured.")
    few = [r.config.label for r in report.results if any(e.batches < 5 * (2 * r.config.num_workers + 1) for e in r.epochs)]
    if few:
        notes.append(f"few batches per epoch for {', '.join(few[:3])}{' ...' if len(few) > 3 else ''}: the batches workers "
                     "prefetch during start-up arrive at once, so img/s is optimistic; use a larger dataset or --batches.")
    if allocators:
        notes.append("allocator runs: each configuration in its own child process; RSS sums count pages shared "
                     "between processes once per process, PSS splits them.")
    return notes


# ---------------------------------------------------------------- output and command line


def _mib(value: int | None) -> float | None:
    return None if value is None else value / 2**20


def format_report(report: LoaderReport) -> str:
    """The tables and the recommendation ``python -m tools.loader`` prints."""
    lines = [f"{report.shard_dir}: {report.num_samples:,} samples, mean {report.mean_sample_bytes / 1024:.0f} KiB read per sample; "
             f"{report.cores} cores; on {report.device}", ""]
    rows = [(s.stage, 1e3 * s.seconds_per_sample, s.basis, 1 / s.seconds_per_sample if s.seconds_per_sample > 0 else None)
            for s in report.stages]
    lines.append(format_table(("stage", "ms/sample", "clock", "samples/s/core"), rows, title="stages, one core"))
    rows = [(r.config.label, r.images_per_s, r.epochs[0].first_batch_s, _ms(r.epochs[-1].gap_p50_s), _ms(r.epochs[-1].gap_p99_s),
             r.cpu_s_per_1000, _mib(r.peak_rss_bytes), _mib(r.peak_pss_bytes)) for r in report.results]
    headers = ("configuration", "img/s", "first batch s", "p50 ms", "p99 ms", "CPU s/1k", "peak RSS MiB", "peak PSS MiB")
    lines += ["", format_table(headers, rows, title=f"configurations ({report.epochs} epoch{'s' if report.epochs > 1 else ''} each)")]
    if report.epochs > 1:
        rows = [(r.config.label, r.allocator_loaded, *(_mib(e.peak_rss_bytes) for e in r.epochs)) for r in report.results]
        epoch_headers = tuple(f"epoch {k + 1} RSS MiB" for k in range(report.epochs))
        lines += ["", format_table(("configuration", "allocator", *epoch_headers), rows, title="peak RSS per epoch (process tree)")]
    lines += ["", f"ceiling: {report.ceiling_images_per_s:.0f} img/s = {report.cores} cores / {1e3 * report.seconds_per_sample:.2f} ms per sample; "
              f"bottleneck: {report.bottleneck}", f"recommendation: {report.recommendation()}"]
    return "\n".join(lines + [f"note: {n}" for n in report.notes])


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else 1e3 * seconds


def _int_list(text: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, e.g. 0,1,2 (got {text!r})") from None


def _str_list(text: str) -> list[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


def child_main(job_json: str) -> int:
    """``--child``: run one configuration from its JSON job, print its result as one JSON line."""
    job = json.loads(job_json)
    result = run_config(job["shard_dir"], LoaderConfig(**job["config"]), batches=job["batches"],
                        epochs=job["epochs"], seed=job["seed"])
    print(json.dumps(result.to_json()))
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.loader", description=__doc__.split("\n")[0])
    parser.add_argument("shard_dir", metavar="SHARD_DIR", nargs="?", help="a dataprep output directory of tar shards")
    parser.add_argument("--workers", type=_int_list, default=[0, 1, 2], help="num_workers values (default 0,1,2)")
    parser.add_argument("--worker-types", type=_str_list, help="thread,process (default both; process with --allocators)")
    parser.add_argument("--batch-sizes", type=_int_list, default=[64], help="batch sizes (default 64)")
    parser.add_argument("--threads-per-worker", type=_int_list, default=[1], help="threads_per_worker values (default 1)")
    parser.add_argument("--batches", type=int, help="at most this many batches per epoch (default: whole epochs)")
    parser.add_argument("--epochs", type=int, help="epochs per configuration (default 1; 3 with --allocators)")
    parser.add_argument("--stock", action="store_true", help="also run torch.utils.data.DataLoader (process workers)")
    parser.add_argument("--allocators", type=_str_list, help="e.g. system,jemalloc: each configuration in a child per allocator")
    parser.add_argument("--sample-images", type=int, default=64, help="samples for the stage timings (default 64)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the order, crops and samples (default 0)")
    add_output_args(parser, plot="a bar chart of img/s per configuration as PNG")
    parser.add_argument("--child", metavar="CONFIG_JSON", help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.child is not None:
        return child_main(args.child)
    if args.shard_dir is None:
        parser.error("SHARD_DIR is required")
    worker_types = args.worker_types or ([PROCESS] if args.allocators else [THREAD, PROCESS])
    try:
        if args.plot:
            require_plot()
        configs = expand_configs(args.workers, worker_types, args.batch_sizes, args.threads_per_worker, stock=args.stock)
        report = profile_loader(args.shard_dir, configs, batches=args.batches, epochs=args.epochs, allocators=args.allocators,
                                sample_images=args.sample_images, seed=args.seed)
    except (ToolError, LoaderError, DataprepError) as err:
        print(f"{TOOL}: {err}", file=sys.stderr)
        return 2
    emit(TOOL, format_report(report), report.to_json(), args.json, argv)
    if args.plot:
        bar_plot(args.plot, [r.config.label for r in report.results], [r.images_per_s for r in report.results],
                 ylabel="images/s", title=f"loader throughput: {report.shard_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
