"""One configuration of ``tools.profile.loader``: build the loader, time its epochs, in this process or a child.

A configuration (``LoaderConfig``) is run by ``run_config`` here, or by ``run_in_child``
in ``python -m tools.profile.loader --child CONFIG_JSON`` with an allocator preloaded
(``tools.profile.malloc.allocator_env``); either way the result is a ``ConfigResult``: per epoch
the samples, batches, wall time, time to first batch, p50/p99 time between batches and
peak RSS/PSS of the process tree (``tools.common.proctree``), plus CPU seconds of the whole run.
"""

from __future__ import annotations

import enum
import gc
import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.utils.data

from loaders import DataLoader, RandomResizedCropDecode, ShardDataset
from tools.common.allocators import allocator_env, allocator_of
from tools.common.proctree import TreeSampler
from tools.common.report import ToolError, check_int
from tools.common.shard_images import image_field_of

OUTPUT_SIZE = 224
CHILD_TIMEOUT_S = 3600.0  # one configuration in a child process; past this it is killed and reported


class WorkerType(enum.StrEnum):
    """Where batches are built: the main process (no workers), worker threads or worker processes."""

    MAIN = "main"
    THREAD = "thread"
    PROCESS = "process"


MAIN, THREAD, PROCESS = WorkerType.MAIN, WorkerType.THREAD, WorkerType.PROCESS


@dataclass(frozen=True)
class LoaderConfig:
    """One configuration: ``num_workers`` of ``worker_type`` ("main" when 0), ``batch_size``, ...

    stock: torch's DataLoader instead of ``loaders.DataLoader`` (process workers only);
    allocator: run in a child process with this allocator preloaded; None: in this process.
    """

    num_workers: int
    worker_type: WorkerType | str = THREAD
    batch_size: int = 64
    threads_per_worker: int = 1
    stock: bool = False
    allocator: str | None = None

    def __post_init__(self) -> None:
        check_int("num_workers", self.num_workers, 0)
        check_int("batch_size", self.batch_size, 1)
        check_int("threads_per_worker", self.threads_per_worker, 1)
        if self.worker_type not in (THREAD, PROCESS) and (self.num_workers or self.worker_type != MAIN):
            raise ToolError(f"'worker_type' must be 'thread' or 'process' (got {self.worker_type!r} that is a "
                            f"{type(self.worker_type).__name__})")
        object.__setattr__(self, "worker_type", WorkerType(self.worker_type) if self.num_workers else MAIN)
        if self.stock and self.worker_type == THREAD:
            raise ToolError("the stock torch DataLoader has no thread workers: use worker_type='process' with "
                            "stock=True")
        if self.stock and self.threads_per_worker != 1:
            raise ToolError(f"the stock torch DataLoader has no threads_per_worker (got {self.threads_per_worker})")

    @property
    def label(self) -> str:
        who = "torch" if self.stock else "loaders"
        workers = "main" if self.num_workers == 0 else f"{self.worker_type} x{self.num_workers}"
        threads = f" t{self.threads_per_worker}" if self.threads_per_worker != 1 else ""
        return f"{who} {workers} b{self.batch_size}{threads}" + (f" [{self.allocator}]" if self.allocator else "")


@dataclass(frozen=True)
class EpochResult:
    """One epoch: ``samples`` in ``batches`` over ``seconds`` (wall); peaks in bytes over the process tree."""

    samples: int
    batches: int
    seconds: float
    first_batch_s: float
    first_batch_samples: int
    gap_p50_s: float | None
    gap_p99_s: float | None
    peak_rss_bytes: int | None
    peak_pss_bytes: int | None


@dataclass(frozen=True)
class ConfigResult:
    """What one configuration measured; ``allocator_loaded`` is read from /proc/self/maps of the process that ran it."""

    config: LoaderConfig
    epochs: tuple[EpochResult, ...]
    cpu_seconds: float
    allocator_loaded: str

    @property
    def samples(self) -> int:
        return sum(e.samples for e in self.epochs)

    @property
    def images_per_s(self) -> float:
        """Samples after each epoch's first batch / the time after it (whole epochs if none had 2 batches)."""
        steady = [e for e in self.epochs if e.batches > 1]
        if not steady:
            return self.epoch_images_per_s
        samples = sum(e.samples - e.first_batch_samples for e in steady)
        seconds = sum(e.seconds - e.first_batch_s for e in steady)
        return samples / seconds if seconds > 0 else 0.0

    @property
    def epoch_images_per_s(self) -> float:
        """Samples / wall time of whole epochs, start-up and first batch included."""
        seconds = sum(e.seconds for e in self.epochs)
        return self.samples / seconds if seconds > 0 else 0.0

    @property
    def cpu_s_per_1000(self) -> float:
        return 1000 * self.cpu_seconds / self.samples if self.samples else 0.0

    @property
    def peak_rss_bytes(self) -> int | None:
        return max((e.peak_rss_bytes for e in self.epochs if e.peak_rss_bytes is not None), default=None)

    @property
    def peak_pss_bytes(self) -> int | None:
        return max((e.peak_pss_bytes for e in self.epochs if e.peak_pss_bytes is not None), default=None)

    def to_json(self) -> dict[str, Any]:
        return {"config": asdict(self.config), "label": self.config.label, "epochs": [asdict(e) for e in self.epochs],
                "cpu_seconds": self.cpu_seconds, "allocator_loaded": self.allocator_loaded, "samples": self.samples,
                "images_per_s": self.images_per_s, "epoch_images_per_s": self.epoch_images_per_s,
                "first_batch_s": self.epochs[0].first_batch_s if self.epochs else None,
                "gap_p50_s": self.epochs[-1].gap_p50_s if self.epochs else None,
                "gap_p99_s": self.epochs[-1].gap_p99_s if self.epochs else None,
                "cpu_s_per_1000_samples": self.cpu_s_per_1000,
                "peak_rss_bytes": self.peak_rss_bytes, "peak_pss_bytes": self.peak_pss_bytes}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ConfigResult:
        return cls(LoaderConfig(**doc["config"]), tuple(EpochResult(**e) for e in doc["epochs"]),
                   float(doc["cpu_seconds"]), str(doc["allocator_loaded"]))


def make_crop(image_field: str) -> RandomResizedCropDecode:
    """The transform every configuration applies: RandomResizedCropDecode(224) of ``image_field``."""
    return RandomResizedCropDecode(OUTPUT_SIZE, field=image_field)


def make_dataset(shard_dir: str | os.PathLike[str], *, transform: bool = True, seed: int = 0) -> ShardDataset:
    """The dataset every configuration loads: image (+ cls where present) fields, ``make_crop``'s transform."""
    image_field = image_field_of(shard_dir)
    probe = ShardDataset(shard_dir)
    fields = (image_field, "cls") if "cls" in probe.shards.fields else (image_field,)
    probe.shards.close()
    return ShardDataset(shard_dir, fields=fields, transform=make_crop(image_field) if transform else None, seed=seed)


def make_loader(dataset: ShardDataset, config: LoaderConfig, seed: int) -> Any:
    """``loaders.DataLoader`` (or torch's for ``config.stock``), shuffled, workers kept across epochs."""
    persistent = config.num_workers > 0
    if config.stock:
        return torch.utils.data.DataLoader(dataset, batch_size=config.batch_size, shuffle=True,
                                           num_workers=config.num_workers, persistent_workers=persistent,
                                           generator=torch.Generator().manual_seed(seed))
    worker_type = "auto" if config.num_workers == 0 else config.worker_type
    return DataLoader(dataset, batch_size=config.batch_size, shuffle=True, num_workers=config.num_workers,
                      persistent_workers=persistent, worker_type=worker_type,
                      threads_per_worker=config.threads_per_worker, seed=seed)


def batch_length(batch: Any) -> int:
    """Samples in a batch: the first dimension of its first tensor (dicts, lists, tuples searched in order)."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else 1
    items = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, (list, tuple)) else ()
    for item in items:
        if isinstance(item, (torch.Tensor, dict, list, tuple)) and (n := batch_length(item)):
            return n
    return len(batch) if isinstance(batch, (list, tuple)) else 0


def time_epoch(loader: Any, max_batches: int | None, sampler: TreeSampler) -> EpochResult:
    """Iterate one epoch (at most ``max_batches``), timing each batch's arrival."""
    arrivals: list[float] = []
    samples = first_samples = 0
    start = time.perf_counter()
    iterator = iter(loader)
    try:
        for batch in iterator:
            arrivals.append(time.perf_counter())
            n = batch_length(batch)
            first_samples = first_samples or n
            samples += n
            if max_batches is not None and len(arrivals) >= max_batches:
                break
    finally:
        close = getattr(iterator, "close", None)  # ours is a generator: closing ends the epoch now
        if callable(close):
            close()
        del iterator
    seconds = (arrivals[-1] if arrivals else time.perf_counter()) - start
    gaps = np.diff(arrivals)
    p50, p99 = (float(np.percentile(gaps, 50)), float(np.percentile(gaps, 99))) if len(gaps) else (None, None)
    rss, pss = sampler.take_peaks()
    return EpochResult(samples=samples, batches=len(arrivals), seconds=seconds,
                       first_batch_s=(arrivals[0] - start) if arrivals else seconds, first_batch_samples=first_samples,
                       gap_p50_s=p50, gap_p99_s=p99, peak_rss_bytes=rss, peak_pss_bytes=pss)


def _rusage_cpu() -> tuple[float, float]:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def run_config(shard_dir: str | os.PathLike[str], config: LoaderConfig, *, batches: int | None = None,
               epochs: int = 1, seed: int = 0) -> ConfigResult:
    """Run ``config`` in this process for ``epochs`` epochs (``config.allocator`` is not applied here)."""
    check_int("epochs", epochs, 1)
    dataset = make_dataset(shard_dir, seed=seed)
    loader = make_loader(dataset, config, seed)
    with TreeSampler() as sampler:
        sampler.take_peaks()
        own0, (self0, kids0) = sampler.own_cpu_s, _rusage_cpu()
        results = tuple(time_epoch(loader, batches, sampler) for _ in range(epochs))
        live_kids = sum(sampler.child_cpu_s.values())
        close = getattr(loader, "close", None)
        if callable(close):
            close()
        del loader  # the stock loader shuts its persistent workers down when collected
        gc.collect()
    self1, kids1 = _rusage_cpu()
    # The sampler's own readings are left out; reaped workers are in RUSAGE_CHILDREN,
    # and the /proc readings cover any the loader left running.
    cpu = (self1 - self0 - (sampler.own_cpu_s - own0)) + max(kids1 - kids0, live_kids)
    return ConfigResult(config, results, cpu, allocator_of(os.getpid()))


def run_in_child(shard_dir: str | os.PathLike[str], config: LoaderConfig, *, batches: int | None, epochs: int,
                 seed: int) -> ConfigResult:
    """Run ``config`` in ``python -m tools.profile.loader --child`` with ``config.allocator`` preloaded."""
    job = json.dumps({"shard_dir": os.fspath(shard_dir), "config": asdict(config), "batches": batches,
                      "epochs": epochs, "seed": seed})
    env = allocator_env(config.allocator or "system")
    tools_root = str(Path(__file__).resolve().parents[2])  # tools is not installed: put it on the path
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (tools_root, env.get("PYTHONPATH"))))
    try:
        done = subprocess.run([sys.executable, "-m", "tools.profile.loader", "--child", job], env=env,
                              capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as err:
        raise ToolError(f"{config.label}: child process ran past {CHILD_TIMEOUT_S:.0f} s and was killed") from err
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        raise ToolError(f"{config.label}: child process exited with status {done.returncode}: {tail}")
    return ConfigResult.from_json(json.loads(done.stdout.strip().splitlines()[-1]))
