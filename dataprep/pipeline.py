"""``dataprep shard``: plan once -> clean in parallel -> write shards range by range -> manifest.

The plan (``dataprep.plan``) is written to OUT's state folder at the start, with the
digest of RAW's listing and of the options; a rerun reads it back and skips to the
checkpoint's place in it (``dataprep.checkpoint``), after checking that RAW has not
changed. One generic loop owns the order: units of the plan become raw records (the
layout's ``LayoutHandler``), which are cleaned in parallel and come back in plan order,
so shard contents do not depend on the number of workers. Each range of the plan is
written by its own shard writer (shards ``{prefix}-{range:05d}-{n:06d}``); after every
completed shard, and at the end of each range, a checkpoint records the place reached.
Duplicates of tables and text are found in an on-disk set (``dataprep.seen``) that a
resume rolls back to the checkpoint.

Media inputs (``--workers`` > 1) are cleaned on threads (decoding releases the GIL) in a
forked child process that also writes the shards, so image bytes are never pickled or
piped between processes. If a decoder crashes that child, this process runs each input
that was in flight alone in a process of its own; those that crash again become
``worker_crash`` rejects and a new child resumes from the last checkpoint. Table rows
and text, whose cleaning holds the GIL, go to worker processes (``parallel.ordered_map``).
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections import Counter, deque
from collections.abc import Generator, Iterator, Mapping
from contextlib import closing
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import numpy as np

from dataprep.checkpoint import PARTIAL_REJECTS_NAME, SEEN_NAME, Checkpoint, save_checkpoint, state_dir
from dataprep.clean.images import prepare_threads
from dataprep.config import Engine, ShardConfig
from dataprep.errors import UsageError, WorkerCrashError
from dataprep.layouts import IdentityPacker, LayoutHandler, MediaHandler, Result, make_handler, resolve_format
from dataprep.manifest import FORMAT_WDS, ShardInfo, Totals, write_manifest
from dataprep.outcome import (RunOutcome, already_complete, build_manifest, check_budgets, check_raw_unchanged,
                              publish_rejects, reject_line)
from dataprep.outdir import OutputLock, OutputState, check_paths, finish, open_output
from dataprep.parallel import InFlight, describe_exit, ordered_map, run_forked, threaded_ordered_map
from dataprep.plan import Plan, make_plan
from dataprep.records import CleanRecord, RawRecord, Reject, RejectReason
from dataprep.report import Progress, Summary
from dataprep.sources import Layout, choose_layout
from dataprep.writers import EncodedSample, ParquetShardWriter, ShardWriter, TarShardWriter

if TYPE_CHECKING:
    from dataprep.seen import SeenSet

log = logging.getLogger(__name__)

Item = RawRecord | Reject
Tag = tuple[int, int]  # (plan position of the unit, index of the raw record within the unit)

# Inputs submitted to the cleaning threads ahead of the writer, per thread.
THREAD_WINDOW_PER_WORKER = 32


@dataclass(frozen=True)
class CleaningThreads:
    """How a run's child cleans media on threads.

    in_flight: plan positions being cleaned, shared with the supervising parent;
    crashed: plan position -> the ``worker_crash`` reject of an input known to crash.
    """

    in_flight: InFlight
    crashed: Mapping[int, Reject]


@dataclass(frozen=True)
class RangeScope:
    """A write loop confined to one range, as a task of a range-parallel run (``dataprep.ranges``).

    index: the range; rejects_path: where its rejects go (the file is started afresh);
    duplicates: int64 [D], sorted ordinals (0-based, over the range's raw records in plan
    order) of the records that repeat an earlier record of the plan. Nothing is
    checkpointed: a task that fails is run again from the range's start.
    """

    index: int
    rejects_path: Path
    duplicates: np.ndarray


def clean_item(handler: LayoutHandler, item: Item) -> Result:
    """Clean one raw record (runs in a worker). Rejects found while planning pass through."""
    return item if isinstance(item, Reject) else handler.clean(item)


def plan_records(config: ShardConfig, directory: Path, output_format: str) -> tuple[LayoutHandler, Iterator[Item]]:
    """Plan ``config.raw`` into ``directory``; the layout's handler and every raw record in plan order.

    What a run cleans, without writing anything (for benchmarks: ``clean_item(handler, item)``).
    """
    choice = choose_layout(Path(config.raw), config.layout, follow_symlinks=config.follow_symlinks)
    plan = make_plan(config, choice.layout, choice.reason, directory)
    handler = make_handler(plan, config.image, config.table, config.text, output_format)
    return handler, (record for unit in plan.units(0, len(plan)) for record in handler.records(unit))


def shard(config: ShardConfig, *, argv: tuple[str, ...] = (), progress: Progress | None = None) -> Summary:
    """Run ``dataprep shard`` (see the module docstring). Raises DataprepError subclasses."""
    started = time.monotonic()
    raw, out = Path(config.raw), Path(config.out)
    if config.engine is Engine.RAY:
        from dataprep.ray_engine import check_reachable, import_ray

        import_ray()  # usage errors (how to install it, a wrong --address) before anything is written
        check_reachable(config.address)
    check_paths(raw, out)
    with OutputLock(out):
        return _shard_locked(config, argv, progress, started)


def _shard_locked(config: ShardConfig, argv: tuple[str, ...], progress: Progress | None, started: float) -> Summary:
    """``shard`` once OUT is this run's alone."""
    out = Path(config.out)
    state = open_output(out, config.fingerprint(), overwrite=config.overwrite)
    if state.finished is not None:
        return already_complete(config, state.finished)
    plan, checkpoint = _open_plan(config, state)
    output_format = resolve_format(str(config.output_format), plan.layout)
    shown = progress or Progress(None, enabled=False)
    shown.total = len(plan) if plan.layout in (Layout.IMAGE_FOLDER, Layout.GROUPED) else None
    if config.engine is Engine.RAY:
        outcome = _execute_on_ray(config, plan, output_format, checkpoint, shown)
    else:
        if checkpoint.ranges_done:
            raise UsageError(f"{out} holds a run started with --engine ray ({len(checkpoint.ranges_done)} of "
                             f"{plan.num_ranges} ranges done); resume it with --engine ray, or pass --overwrite")
        outcome = _execute(config, plan, output_format, checkpoint, shown)
    publish_rejects(out)
    check_budgets(config, outcome.totals, out)
    write_manifest(out, build_manifest(config, plan, output_format, outcome, argv))
    finish(out)
    elapsed = time.monotonic() - started
    return Summary(
        os.fspath(out), str(plan.layout), output_format, outcome.totals, len(outcome.shards),
        sum(s.bytes for s in outcome.shards), elapsed, outcome.processed / elapsed if elapsed else 0.0,
        outcome.bytes_out / elapsed / 1e6 if elapsed else 0.0,
        resumed_from_shard=checkpoint.next_shard if state.plan is not None else None,
        layout_reason=plan.info.layout_reason,
    )


def _open_plan(config: ShardConfig, state: OutputState) -> tuple[Plan, Checkpoint]:
    """The saved plan and checkpoint of a run to resume (RAW must be unchanged), or a new plan."""
    out = Path(config.out)
    if state.plan is not None and state.checkpoint is not None:
        check_raw_unchanged(config, state.plan, out)
        return Plan(state_dir(out)), state.checkpoint
    choice = choose_layout(Path(config.raw), config.layout, follow_symlinks=config.follow_symlinks)
    resolve_format(str(config.output_format), choice.layout)  # refuse a bad --format before planning
    _refuse_table_options(config, choice.layout, choice.reason)
    state_dir(out).mkdir(exist_ok=True)
    try:
        plan = make_plan(config, choice.layout, choice.reason, state_dir(out))
    except UsageError:
        shutil.rmtree(state_dir(out), ignore_errors=True)  # nothing was written but a part of the plan
        raise
    checkpoint = Checkpoint()
    save_checkpoint(out, checkpoint)
    return plan, checkpoint


def _refuse_table_options(config: ShardConfig, layout: Layout, reason: str) -> None:
    """Table options over a RAW that is not a table would be ignored: a usage error instead."""
    if layout is Layout.TABLE:
        return
    table = config.table
    given = [flag for flag, value in (("--schema", table.schema), ("--dedup-on", table.dedup_on),
                                      ("--required", table.required or None)) if value is not None]
    if given:
        raise UsageError(f"{', '.join(given)} applies to tables, but RAW {config.raw} is {layout} ({reason}); "
                         f"leave it out, or pass --layout table if RAW holds tables")


def _execute_on_ray(config: ShardConfig, plan: Plan, output_format: str, checkpoint: Checkpoint,
                    progress: Progress) -> RunOutcome:
    """Write the ranges not yet done as Ray tasks (``dataprep.ranges``, ``dataprep.ray_engine``)."""
    from dataprep.ranges import run_ranges
    from dataprep.ray_engine import RayExecutor

    with RayExecutor(config.address) as executor:
        totals, shards, processed, bytes_out = run_ranges(config, plan, output_format, checkpoint, progress, executor)
    return RunOutcome(totals, shards, processed, bytes_out)


def _execute(config: ShardConfig, plan: Plan, output_format: str, checkpoint: Checkpoint, progress: Progress) -> RunOutcome:
    """Run the write loop: here, or for media on several workers in a supervised child (module docstring)."""
    if config.workers <= 1 or plan.layout not in (Layout.IMAGE_FOLDER, Layout.GROUPED):
        return _Run(config, plan, output_format, checkpoint, progress).execute()
    return run_supervised(config, plan, output_format, checkpoint, progress)


def run_supervised(config: ShardConfig, plan: Plan, output_format: str, checkpoint: Checkpoint, progress: Progress,
                   scope: RangeScope | None = None) -> RunOutcome:
    """Clean media on ``config.workers`` threads in a forked child that writes the shards; survive decoder crashes.

    If the child dies, each input it had in flight is cleaned alone in a process of its
    own; those that crash again become ``worker_crash`` rejects, and a new child goes on
    from the last checkpoint (with ``scope``: from the start of its range, written again).
    """
    in_flight = InFlight(config.workers * THREAD_WINDOW_PER_WORKER)
    crashed: dict[int, Reject] = {}
    out = Path(config.out)
    while True:
        run = _Run(config, plan, output_format, checkpoint, progress, CleaningThreads(in_flight, dict(crashed)), scope)
        forked = run_forked(run.execute)
        if not forked.died:
            return forked.result()
        suspects = [p for p in in_flight.positions() if p not in crashed]
        culprits = _crash_culprits(run.handler, plan, suspects)
        if not culprits:
            names = [getattr(plan.at(p), "source", "?") for p in suspects]
            shown = ", ".join(names[:5]) + (" ..." if len(names) > 5 else "")
            raise WorkerCrashError(
                f"the process cleaning and writing shards died ({describe_exit(forked.exit_status)}) while cleaning "
                f"{len(names)} inputs ({shown or 'none'}), none of which crashes when cleaned alone; "
                f"rerun the same command to resume from the last complete shard",
                names,
            )
        crashed.update(culprits)
        in_flight.reset()
        for reject in culprits.values():
            log.warning("%s: %s; rejected (worker_crash), the run resumes from its last complete shard",
                        reject.source, reject.detail)
        if scope is None:
            # Tidy what the dead child left (its open shard, rejects past its last checkpoint).
            state = open_output(out, config.fingerprint(), overwrite=False)
            checkpoint = state.checkpoint or checkpoint


def write_one_range(config: ShardConfig, plan: Plan, output_format: str, scope: RangeScope) -> RunOutcome:
    """Write range ``scope.index`` whole, on its own (a task of a range-parallel run; ``dataprep.ranges``).

    Media are cleaned on ``config.workers`` threads in a supervised child, so an input
    that crashes its decoder becomes a ``worker_crash`` reject as in a local run.
    """
    start, _ = plan.range_bounds(scope.index)
    checkpoint = Checkpoint(range=scope.index, position=start)
    progress = Progress(None, enabled=False)
    if plan.layout in (Layout.IMAGE_FOLDER, Layout.GROUPED):
        return run_supervised(config, plan, output_format, checkpoint, progress, scope)
    return _Run(config, plan, output_format, checkpoint, progress, scope=scope).execute()


def _crash_culprits(handler: LayoutHandler, plan: Plan, positions: list[int]) -> dict[int, Reject]:
    """Position -> ``worker_crash`` reject, for each input at ``positions`` that kills a process of its own."""
    culprits: dict[int, Reject] = {}
    for position in positions:
        unit = plan.at(position)
        if isinstance(unit, Reject):
            continue
        forked = run_forked(clean_item, handler, unit)
        if forked.died and isinstance(unit, RawRecord):
            culprits[position] = crash_reject(unit, forked.exit_status)
    return culprits


class _Run:
    """The write loop of one run: plan ranges -> results in plan order -> rejects file, writers, checkpoints."""

    def __init__(self, config: ShardConfig, plan: Plan, output_format: str, checkpoint: Checkpoint, progress: Progress,
                 threads: CleaningThreads | None = None, scope: RangeScope | None = None) -> None:
        self.config, self.plan, self.format, self.checkpoint, self.progress = config, plan, output_format, checkpoint, progress
        self.handler = make_handler(plan, config.image, config.table, config.text, output_format)
        self.threads = threads
        self.scope = scope
        self.out = Path(config.out)
        self.counts: Counter[str] = Counter(checkpoint.totals.rejected_by_reason)
        self.kept = checkpoint.totals.samples_kept
        self.shards: list[ShardInfo] = list(checkpoint.shards)
        self.records_done = checkpoint.records_done
        self.cursor: Tag = (checkpoint.position, checkpoint.skip)
        self.packer = IdentityPacker()
        self.packer.load_state_dict(checkpoint.carry)
        self.seen: SeenSet | None = None
        self.range_index = checkpoint.range
        self.next_shard = checkpoint.next_shard
        self.processed = 0
        self.bytes_out = 0

    def execute(self) -> RunOutcome:
        scope = self.scope
        rejects_path = state_dir(self.out) / PARTIAL_REJECTS_NAME if scope is None else scope.rejects_path
        indices = range(self.checkpoint.range, self.plan.num_ranges) if scope is None else [scope.index]
        try:
            with open(rejects_path, "ab" if scope is None else "wb") as rejects:
                for index in indices:
                    self._write_range(index, rejects)
        finally:
            if self.seen is not None:
                self.seen.close()
        self.progress.update(self.processed, sum(self.counts.values()), self.bytes_out, force=True)
        self.progress.close()
        rejected = sum(self.counts.values())
        totals = Totals(self.kept + rejected, self.kept, rejected, dict(self.counts))
        return RunOutcome(totals, tuple(self.shards), self.processed, self.bytes_out)

    def _write_range(self, index: int, rejects: BinaryIO) -> None:
        """Write range ``index`` from the checkpoint's place in it (or its start) to its end."""
        start, stop = self.plan.range_bounds(index)
        if index == self.checkpoint.range:
            first, skip, self.next_shard = self.checkpoint.position, self.checkpoint.skip, self.checkpoint.next_shard
        else:
            first, skip, self.next_shard = start, 0, 0
        self.range_index = index
        tags: deque[Tag] = deque()
        with self._writer(index, self.next_shard) as writer, closing(self._results(first, stop, skip, tags)) as results:
            for result in results:
                self._consume(tags.popleft(), result, writer, rejects, index)
            for sample in self.packer.finish():
                self._written(writer.write(sample), rejects, index, None)
            closed = writer.close()
        self.cursor = (stop, 0)
        self._checkpoint(closed, rejects, index + 1, self.cursor, self.records_done)

    def _items(self, first: int, stop: int, skip: int, tags: deque[Tag]) -> Iterator[Item]:
        """Raw records of units [first, stop), the first ``skip`` records of unit ``first`` left out.

        Skipped records are parsed, not cleaned: at most one unit (a file part of at most
        ``plan.MAX_PART_BYTES``, or a whole CSV or Parquet file) is read again on resume.
        """
        for position, unit in enumerate(self.plan.units(first, stop), first):
            start = skip if position == first else 0
            for k, item in enumerate(self.handler.records(unit)):
                if k < start:
                    continue
                if self.threads is not None:
                    item = self.threads.crashed.get(position, item)
                tags.append((position, k))
                yield item

    def _results(self, first: int, stop: int, skip: int, tags: deque[Tag]) -> Generator[Result, None, None]:
        """Cleaning results in plan order; ``tags`` gets each one's (position, record) as it is submitted."""
        items = self._items(first, stop, skip, tags)
        handler, workers = self.handler, self.config.workers
        if self.threads is None:
            return ordered_map(clean_item, items, context=handler, workers=workers, on_crash=crash_reject)
        prepare_threads()
        # One raw record per media unit, so item i is at plan position first + i (skip: 0 or 1).
        return threaded_ordered_map(clean_item, items, context=handler, workers=workers, window=self.threads.in_flight.slots,
                                    first_position=first + skip, in_flight=self.threads.in_flight)

    def _consume(self, tag: Tag, result: Result, writer: ShardWriter, rejects: BinaryIO, index: int) -> None:
        self.processed += 1
        if not isinstance(result, Reject) and self._is_duplicate(result):
            result = Reject(result.source, RejectReason.DUPLICATE, "same content as an earlier input", _row_of(result))
        if isinstance(result, Reject):
            self.counts[str(result.reason)] += 1
            rejects.write(reject_line(result))
        else:
            self.kept += 1
            for sample in self.packer.push(result):
                self._written(writer.write(sample), rejects, index, tag)
        self.records_done += 1
        self.cursor = self._after(tag)
        self.progress.update(self.processed, sum(self.counts.values()), self.bytes_out)

    def _is_duplicate(self, result: CleanRecord | EncodedSample) -> bool:
        """Whether the kept record just cleaned repeats an earlier one of the plan (first in plan order wins)."""
        if self.scope is not None:  # found beforehand, across ranges (dataprep.ranges)
            dups = self.scope.duplicates
            at = int(np.searchsorted(dups, self.records_done))
            return at < len(dups) and int(dups[at]) == self.records_done
        digest = self.handler.dedup_digest(result)
        return digest is not None and self._seen().first(digest, self.records_done) is not None

    def _after(self, tag: Tag) -> Tag:
        """The cursor just past the raw record at ``tag`` (a media unit is one raw record)."""
        position, k = tag
        return (position + 1, 0) if isinstance(self.handler, MediaHandler) else (position, k + 1)

    def _written(self, closed: list[ShardInfo], rejects: BinaryIO, index: int, tag: Tag | None) -> None:
        """Checkpoint after shards closed while writing the input at ``tag`` (None: the range's carry).

        Inputs before it are final; the input itself is final only if it went into a
        closed shard (a writer may close a shard before or after adding a sample).
        """
        if not closed:
            return
        kept_done = sum(s.num_samples for s in self.shards) + sum(s.num_samples for s in closed)
        if tag is None:
            cursor, done = self.cursor, self.records_done
        elif kept_done == self.kept:
            cursor, done = self._after(tag), self.records_done + 1
        else:
            cursor, done = tag, self.records_done
        self._checkpoint(closed, rejects, index, cursor, done)

    def _checkpoint(self, closed: list[ShardInfo], rejects: BinaryIO, index: int, cursor: Tag, records_done: int) -> None:
        """Save the place reached: range ``index`` (its next shard), ``cursor`` and ``records_done``."""
        self.shards.extend(closed)
        self.next_shard += len(closed)
        self.bytes_out += sum(s.bytes for s in closed)
        rejects.flush()
        if self.scope is None:
            os.fsync(rejects.fileno())
        if self.seen is not None:
            self.seen.commit()
        rejected = sum(self.counts.values())
        kept_done = sum(s.num_samples for s in self.shards)
        totals = Totals(kept_done + rejected, kept_done, rejected, dict(self.counts))
        next_shard = self.next_shard if index == self.range_index else 0
        self.checkpoint = replace(self.checkpoint, range=index, next_shard=next_shard, position=cursor[0], skip=cursor[1],
                                  records_done=records_done, rejects_bytes=rejects.tell(), totals=totals,
                                  shards=tuple(self.shards), carry=self.packer.state_dict())
        if self.scope is None:
            save_checkpoint(self.out, self.checkpoint)

    def _seen(self) -> SeenSet:
        if self.seen is None:
            from dataprep.seen import SeenSet  # only tables and text look for duplicates here

            self.seen = SeenSet.open(state_dir(self.out) / SEEN_NAME)
            self.seen.truncate(self.checkpoint.records_done)
        return self.seen

    def _writer(self, index: int, next_shard: int) -> ShardWriter:
        c = self.config
        prefix = f"{c.prefix}-{index:05d}"
        if self.format == FORMAT_WDS:
            return TarShardWriter(self.out, prefix=prefix, max_shard_bytes=c.max_shard_bytes,
                                  max_samples_per_shard=c.max_samples_per_shard, start_shard=next_shard)
        return ParquetShardWriter(self.out, schema=self.handler.parquet_schema(), prefix=prefix,
                                  max_shard_bytes=c.max_shard_bytes, max_samples_per_shard=c.max_samples_per_shard,
                                  row_group_bytes=c.row_group_bytes, start_shard=next_shard)


def crash_reject(item: Item, exit_status: int | None) -> Reject:
    """The reject of an input whose cleaning killed its worker process (run alone to be sure)."""
    if isinstance(item, Reject):
        return item
    detail = f"cleaning it alone killed the worker process ({describe_exit(exit_status)})"
    return Reject(item.source, RejectReason.WORKER_CRASH, detail, item.row)


def _row_of(record: CleanRecord | EncodedSample) -> int | None:
    row = record.fields.get("__row__") if isinstance(record, CleanRecord) else None
    return row if isinstance(row, int) else None
