"""The timed runs of ``tools.bench.shard_bench``: single-core cleaning, ``dataprep shard`` itself, the write loop alone.

Each takes the ``ShardConfig`` that ``dataprep shard RAW OUT --workers N`` would build
(``shard_config``) and plans its inputs as that command does; only the part named is timed.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from dataprep.cli import build_parser, config_from_args
from dataprep.commands.config import ShardConfig
from dataprep.engines.handlers import LayoutHandler
from dataprep.inputs.records import RawRecord, Reject
from dataprep.commands.shard import plan_records, shard
from dataprep.inputs.sources import Layout, choose_layout
from dataprep.engines.write_loop import clean_item
from dataprep.formats.samples import EncodedSample
from dataprep.formats.tar.writer import TarShardWriter
from tools.common.report import ToolError, machine_busy_s, process_cpu_s

WRITE_LOOP_SAMPLES = 2000


def shard_config(raw: Path, out: Path, workers: int) -> ShardConfig:
    """The config of ``dataprep shard RAW OUT --workers N`` with every other option at its default."""
    args = build_parser().parse_args(["shard", os.fspath(raw), os.fspath(out), "--workers", str(workers),
                                      "--no-progress"])
    return config_from_args(args)


def planned_inputs(config: ShardConfig, spill_dir: Path) -> tuple[LayoutHandler, Iterator[RawRecord | Reject]]:
    """The layout handler and the planned inputs of ``config``, in plan order, planned as
    ``dataprep shard`` plans them (into ``spill_dir``); cleaning gives tar-encoded samples,
    as a run's workers do. Raises ``ToolError`` for a dataset without images."""
    layout = choose_layout(Path(config.raw), config.layout, follow_symlinks=config.follow_symlinks).layout
    if layout not in (Layout.IMAGE_FOLDER, Layout.GROUPED):
        raise ToolError(f"{config.raw}: a {layout} dataset; shard_bench measures image datasets")
    spill_dir.mkdir(parents=True, exist_ok=True)
    return plan_records(config, spill_dir, "wds")


def time_single_core(config: ShardConfig, spill_dir: Path) -> tuple[int, int, float, float]:
    """(inputs, input bytes, CPU s, wall s) of cleaning (and tar-encoding, as a worker does) every planned input
    of ``config`` in this process.

    The plan (made as ``dataprep shard`` makes it, spilled under ``spill_dir``) is not timed.
    """
    handler, planned = planned_inputs(config, spill_dir)
    items = list(planned)
    input_bytes = sum(os.path.getsize(p) for item in items if isinstance(item, RawRecord)
                      for p in item.files.values())
    wall, cpu = time.perf_counter(), time.process_time()
    kept = sum(not isinstance(clean_item(handler, item), Reject) for item in items)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    if kept == 0:
        raise ToolError(f"{config.raw}: cleaning kept none of {len(items)} inputs: nothing to shard")
    return len(items), input_bytes, max(cpu, 1e-9), max(wall, 1e-9)


def time_write_loop(config: ShardConfig, spill_dir: Path, out_dir: Path,
                    max_samples: int = WRITE_LOOP_SAMPLES) -> tuple[int, int, float, float]:
    """(samples, shard bytes, thread CPU s, wall s) of writing up to ``max_samples`` cleaned
    samples of ``config`` into tar shards in ``out_dir``.

    Planning and cleaning (with tar members serialised, as workers do) are not timed. The
    wall time includes the final fsync, so waiting for the disk. Written twice, the pass
    with less CPU kept: on a VM that hands freed memory back to its host, the first pass
    pays for faulting the page cache's pages back in (seen here: 3x the CPU).
    """
    handler, planned = planned_inputs(config, spill_dir)
    samples = [s for s in (clean_item(handler, item) for item in itertools.islice(planned, max_samples))
               if isinstance(s, EncodedSample)]
    passes = [_write_pass(config, samples, out_dir / str(attempt)) for attempt in range(2)]
    return len(samples), *min(passes, key=lambda one: one[1])


def _write_pass(config: ShardConfig, samples: list[EncodedSample], out_dir: Path) -> tuple[int, float, float]:
    """(shard bytes, thread CPU s, wall s) of writing ``samples`` into a fresh ``out_dir``, emptied after."""
    out_dir.mkdir(parents=True)
    os.sync()  # the shards of earlier runs still going to disk would slow this one's fsync
    wall, cpu = time.perf_counter(), time.thread_time()
    with TarShardWriter(out_dir, max_shard_bytes=config.max_shard_bytes,
                        max_samples_per_shard=config.max_samples_per_shard) as writer:
        for sample in samples:
            writer.write(sample)
        writer.close()
    cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
    for shard_file in out_dir.iterdir():
        shard_file.unlink()
    return sum(s.bytes for s in writer.shards), max(cpu, 1e-9), max(wall, 1e-9)


@dataclass(frozen=True)
class ShardRun:
    """One ``dataprep shard`` run: wall and CPU seconds (this process + its reaped workers), the
    CPU seconds all other processes on the machine used meanwhile (None: unknown), outcome counts."""

    wall_s: float
    cpu_s: float
    others_cpu_s: float | None
    samples_kept: int
    rejected: int


def time_shard(raw: Path, out: Path, workers: int) -> ShardRun:
    """Run ``dataprep shard RAW OUT --workers N`` into a fresh ``out``, in this process, and time it."""
    config = shard_config(raw, out, workers)
    busy, cpu, start = machine_busy_s(), process_cpu_s(), time.perf_counter()
    summary = shard(config, argv=("dataprep", "shard", os.fspath(raw), os.fspath(out), "--workers", str(workers)))
    wall, cpu, busy_after = time.perf_counter() - start, process_cpu_s() - cpu, machine_busy_s()
    others = None if busy is None or busy_after is None else max(busy_after - busy - cpu, 0.0)
    return ShardRun(wall_s=max(wall, 1e-9), cpu_s=cpu, others_cpu_s=others, samples_kept=summary.totals.samples_kept,
                    rejected=summary.totals.rejected)
