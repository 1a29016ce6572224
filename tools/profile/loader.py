"""Profile ``loaders.DataLoader`` (and the stock torch DataLoader) over a shard directory; name the bottleneck.

    python -m tools.profile.loader SHARD_DIR [--workers 0,1,2] [--worker-types thread,process]
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
speed (``tools.profile.disk``).

``--allocators system,jemalloc`` runs each configuration in a child process per
allocator (``tools.profile.malloc.allocator_env``; entry point ``--child CONFIG_JSON``), 3
epochs unless ``--epochs`` says otherwise: compare peak RSS epoch by epoch.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from dataprep.errors import DataprepError
from loaders.errors import LoaderError
from loaders.read.topology import cpus_available
from tools.common.allocators import allocator_env
from tools.common.loader_run import (
    MAIN,
    PROCESS,
    THREAD,
    ConfigResult,
    LoaderConfig,
    make_dataset,
    run_config,
    run_in_child,
)
from tools.common.pagecache import device_of
from tools.common.report import (ToolError, add_output_args, bar_plot, check_int, emit, format_table, int_list,
                                 require_plot)
from tools.profile.disk_reads import measure_disk
from tools.profile.loader_stages import (
    COPY,
    DECODE,
    PRE_RESIZE_SHORT,
    READ,
    TRANSFORM,
    StageCost,
    measure_stages,
    pre_resize_factor,
)

TOOL = "loader"


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
        if self.bottleneck == READ:
            return self._io_bound(best)
        n = best.config.num_workers
        who = "the main process alone gives" if n == 0 else (
            f"{n} {best.config.worker_type} worker{'s give' if n > 1 else ' gives'}")
        if self.bottleneck in (DECODE, TRANSFORM):
            # Above ~95% the difference is within the error of the stage timings (and of short epochs).
            reach = "the whole" if share >= 0.95 else f"{share:.0%} of the"
            text = (f"decode-bound: {who} {reach} {self.cores}-core ceiling ({best.images_per_s:.0f} of "
                    f"{self.ceiling_images_per_s:.0f} img/s)")
            if self.pre_resize_factor >= 1.2:
                text += (f"; pre-resize with `dataprep shard --resize-short {PRE_RESIZE_SHORT}` for "
                         f"~{self.pre_resize_factor:.1f}x more")
            else:
                text += (f"; the images are already small (short side <= {PRE_RESIZE_SHORT} or close): "
                         "only more cores raise it")
        else:
            text = (f"collate-bound: {who} {share:.0%} of the {self.cores}-core ceiling; keep samples uint8 and of one "
                    "shape so collate is one copy per sample (convert to float on the device)")
        if share < 0.8 and n < self.cores:
            text += f". The loader is below its ceiling: try {self.cores} workers"
        return text

    def _io_bound(self, best: ConfigResult) -> str:
        disk = f" of {self.disk_sequential_mib_s * 1.048576:.0f} MB/s sequential" if self.disk_sequential_mib_s else ""
        return (f"I/O-bound at {best.images_per_s * self.mean_sample_bytes / 1e6:.1f} MB/s on {self.device}{disk}: "
                "faster storage, a warm page cache or order='blocks' for slow disks")

    def to_json(self) -> dict[str, Any]:
        best, stock = self.best(), self.best(stock=True)
        return {"shard_dir": self.shard_dir, "num_samples": self.num_samples, "cores": self.cores,
                "device": self.device,
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
    """Cold sequential MiB/s of the shards: called only when reads dominate, since it reads every shard cold."""
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
    stages, mean_bytes, timed = measure_stages(shard_dir, sample_images=sample_images,
                                               batch_size=configs[0].batch_size, seed=seed)
    factor, resized = pre_resize_factor(shard_dir, sample_images=sample_images, seed=seed)
    results = []
    for config in configs:
        for allocator in allocators or (None,):
            cfg = replace(config, allocator=allocator)
            run = run_in_child if allocator is not None else run_config
            results.append(run(shard_dir, cfg, batches=batches, epochs=epochs, seed=seed))
    report = LoaderReport(shard_dir=os.fspath(shard_dir), num_samples=len(make_dataset(shard_dir, transform=False)),
                          cores=cpus_available(), device=device_of(shard_dir).describe(), stages=stages,
                          stage_samples=timed, mean_sample_bytes=mean_bytes, pre_resize_factor=factor,
                          pre_resized_images=resized, results=tuple(results), epochs=epochs)
    disk = _disk_speed(shard_dir) if report.bottleneck == READ else None
    return replace(report, disk_sequential_mib_s=disk, notes=tuple(_notes(report, allocators)))


def _notes(report: LoaderReport, allocators: Sequence[str] | None) -> list[str]:
    notes = [f"stages: one thread on {report.stage_samples} samples; read and copy are wall time (page cache as "
             "found), the others CPU time. img/s excludes each epoch's first batch."]
    if not any(s.stage == COPY for s in report.stages):
        notes.append("no CUDA: the host-to-device copy is not measured.")
    few = [r.config.label for r in report.results
           if any(e.batches < 5 * (2 * r.config.num_workers + 1) for e in r.epochs)]
    if few:
        notes.append(f"few batches per epoch for {', '.join(few[:3])}{' ...' if len(few) > 3 else ''}: the batches "
                     "workers prefetch during start-up arrive at once, so img/s is optimistic; use a larger dataset "
                     "or --batches.")
    if allocators:
        notes.append("allocator runs: each configuration in its own child process; RSS sums count pages shared "
                     "between processes once per process, PSS splits them.")
    return notes


# ---------------------------------------------------------------- output and command line


def _mib(value: int | None) -> float | None:
    return None if value is None else value / 2**20


def format_report(report: LoaderReport) -> str:
    """The tables and the recommendation ``python -m tools.profile.loader`` prints."""
    lines = [f"{report.shard_dir}: {report.num_samples:,} samples, mean {report.mean_sample_bytes / 1024:.0f} KiB read "
             f"per sample; {report.cores} cores; on {report.device}", ""]
    rows = [(s.stage, 1e3 * s.seconds_per_sample, s.basis,
             1 / s.seconds_per_sample if s.seconds_per_sample > 0 else None) for s in report.stages]
    lines.append(format_table(("stage", "ms/sample", "clock", "samples/s/core"), rows, title="stages, one core"))
    config_rows = [(r.config.label, r.images_per_s, r.epochs[0].first_batch_s, _ms(r.epochs[-1].gap_p50_s),
                    _ms(r.epochs[-1].gap_p99_s), r.cpu_s_per_1000, _mib(r.peak_rss_bytes), _mib(r.peak_pss_bytes))
                   for r in report.results]
    headers = ("configuration", "img/s", "first batch s", "p50 ms", "p99 ms", "CPU s/1k", "peak RSS MiB",
               "peak PSS MiB")
    epochs = f"{report.epochs} epoch{'s' if report.epochs > 1 else ''} each"
    lines += ["", format_table(headers, config_rows, title=f"configurations ({epochs})")]
    if report.epochs > 1:
        rss_rows = [(r.config.label, r.allocator_loaded, *(_mib(e.peak_rss_bytes) for e in r.epochs))
                    for r in report.results]
        epoch_headers = tuple(f"epoch {k + 1} RSS MiB" for k in range(report.epochs))
        lines += ["", format_table(("configuration", "allocator", *epoch_headers), rss_rows,
                                   title="peak RSS per epoch (process tree)")]
    lines += ["", f"ceiling: {report.ceiling_images_per_s:.0f} img/s = {report.cores} cores / "
                  f"{1e3 * report.seconds_per_sample:.2f} ms per sample; bottleneck: {report.bottleneck}",
              f"recommendation: {report.recommendation()}"]
    return "\n".join(lines + [f"note: {n}" for n in report.notes])


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else 1e3 * seconds


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
    parser = argparse.ArgumentParser(prog="python -m tools.profile.loader", description=__doc__.split("\n")[0])
    parser.add_argument("shard_dir", metavar="SHARD_DIR", nargs="?", help="a dataprep output directory of tar shards")
    parser.add_argument("--workers", default="0,1,2", help="num_workers values (default 0,1,2)")
    parser.add_argument("--worker-types", type=_str_list,
                        help="thread,process (default both; process with --allocators)")
    parser.add_argument("--batch-sizes", default="64", help="batch sizes (default 64)")
    parser.add_argument("--threads-per-worker", default="1",
                        help="threads_per_worker values (default 1)")
    parser.add_argument("--batches", type=int, help="at most this many batches per epoch (default: whole epochs)")
    parser.add_argument("--epochs", type=int, help="epochs per configuration (default 1; 3 with --allocators)")
    parser.add_argument("--stock", action="store_true", help="also run torch.utils.data.DataLoader (process workers)")
    parser.add_argument("--allocators", type=_str_list,
                        help="e.g. system,jemalloc: each configuration in a child per allocator")
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
        configs = expand_configs(int_list("--workers", args.workers), worker_types,
                                 int_list("--batch-sizes", args.batch_sizes, minimum=1),
                                 int_list("--threads-per-worker", args.threads_per_worker, minimum=1), stock=args.stock)
        report = profile_loader(args.shard_dir, configs, batches=args.batches, epochs=args.epochs,
                                allocators=args.allocators, sample_images=args.sample_images, seed=args.seed)
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
