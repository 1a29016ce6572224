"""The write loop: ranges of the plan -> raw records in plan order -> cleaned -> shards, rejects, checkpoints.

One generic loop owns the order: units of the plan become raw records (the layout's
``LayoutHandler``), which are cleaned in parallel and come back in plan order, so shard
contents do not depend on the number of workers; duplicates are then told (by the
``WriteMode``) and, for token output, the kept documents tokenized in batches
(``dataprep.tokenize.stage``), still in plan order. Each range of the plan is written by its
own shard writer (``writers.open_writer``: shards ``{prefix}-{range:05d}-{n:06d}``); after
every completed shard, and at the end of each range, the loop records the place reached.

What the loop does not decide, it is handed as objects behind one interface each:

- ``WriteMode`` (``dataprep.engines.run_modes``): which ranges, where rejects go, how duplicates
  are told, what a checkpoint does: a checkpointed run (``CheckpointedRun``) or one range
  from a place (``RangeRun``: a Ray task, or a writer process);
- ``Cleaning``: on the writing thread (``InlineCleaning``: table rows and text, whose cleaning
  holds the GIL) or on threads of this process (``ThreadCleaning``:
  media, in a process that is watched for decoder crashes: ``dataprep.engines.supervisor``'s
  forked child, or a writer process of ``dataprep.engines.local_writers``);
- ``spill``: the range's records already cleaned (``dataprep.engines.spill``), read instead of
  RAW when the pass that found duplicates cleaned them;
- ``ProgressSink``: where the loop reports its counts (``dataprep.engines.progress``).

Everything it writes goes through the run's ``OutputStore`` (``dataprep.output.store``).
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from collections.abc import Generator, Iterator, Mapping
from contextlib import AbstractContextManager, closing
from dataclasses import dataclass, field, replace
from typing import BinaryIO, Protocol

from dataprep.plan.checkpoint import Checkpoint
from dataprep.clean.images import prepare_threads
from dataprep.engines.handlers import IdentityPacker, LayoutHandler, Result
from dataprep.formats.manifest import ShardInfo, Totals
from dataprep.engines.parallel import InFlight, describe_exit, run_forked, threaded_ordered_map
from dataprep.formats.samples import CleanRecord, EncodedSample
from dataprep.inputs.records import RawRecord, Reject, RejectReason, reject_line
from dataprep.engines.progress import ProgressSink
from dataprep.engines.context import RunContext, RunOutcome
from dataprep.engines.spill import SpillFile, read_spill
from dataprep.plan.run_plan import RunPlan
from dataprep.tokenize.stage import TokenStage
from dataprep.formats.writer import ShardWriter
from dataprep.formats.registry import open_writer

log = logging.getLogger(__name__)

Item = RawRecord | Reject
Tag = tuple[int, int]  # (plan position of the unit, index of the raw record within the unit)


def clean_item(handler: LayoutHandler, item: Item) -> Result:
    """Clean one raw record (runs in a worker). Rejects found while planning pass through."""
    return item if isinstance(item, Reject) else handler.clean(item)


def crash_reject(item: Item, exit_status: int | None) -> Reject:
    """The reject of an input whose cleaning killed its worker process (run alone to be sure)."""
    if isinstance(item, Reject):
        return item
    detail = f"cleaning it alone killed the worker process ({describe_exit(exit_status)})"
    return Reject(item.source, RejectReason.WORKER_CRASH, detail, item.row)


def crash_culprits(handler: LayoutHandler, plan: RunPlan, positions: list[int]) -> dict[int, Reject]:
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


# ----------------------------------------------------------------------------- how records are cleaned


class Cleaning(Protocol):
    """How the write loop has raw records cleaned, results in input order.

    crashed: plan position -> the ``worker_crash`` reject of an input known to crash (it is
    not cleaned again).
    """

    @property
    def crashed(self) -> Mapping[int, Reject]: ...

    def results(self, handler: LayoutHandler, items: Iterator[Item],
                first_position: int) -> Generator[Result, None, None]:
        """``clean_item`` of every item, in order; ``first_position``: the plan position of the first."""
        ...


@dataclass(frozen=True)
class InlineCleaning:
    """On the writing thread: table rows and text, whose cleaning holds the GIL (a process per core is the
    engine's: its writer processes), and media cleaned on one thread."""

    crashed: Mapping[int, Reject] = field(default_factory=dict)

    def results(self, handler: LayoutHandler, items: Iterator[Item],
                first_position: int) -> Generator[Result, None, None]:
        return (clean_item(handler, item) for item in items)


@dataclass(frozen=True)
class ThreadCleaning:
    """On ``workers`` threads of this process; ``in_flight`` (shared with the supervising parent) says which."""

    workers: int
    in_flight: InFlight
    crashed: Mapping[int, Reject]

    def results(self, handler: LayoutHandler, items: Iterator[Item],
                first_position: int) -> Generator[Result, None, None]:
        if self.workers > 1:  # one worker cleans on the calling thread: Pillow loads the plugins it needs
            prepare_threads()
        # One raw record per media unit, so item i is at plan position first_position + i.
        return threaded_ordered_map(clean_item, items, context=handler, workers=self.workers,
                                    window=self.in_flight.slots, first_position=first_position,
                                    in_flight=self.in_flight)


# ----------------------------------------------------------------------------- the run's mode


class WriteMode(Protocol):
    """What differs between a checkpointed run and a range task (``dataprep.engines.run_modes``).

    start: the place the loop starts from (a checkpoint, or a range's start).
    """

    start: Checkpoint

    def ranges(self) -> range:
        """The ranges this run writes, in order."""
        ...

    def rejects(self) -> AbstractContextManager[BinaryIO]:
        """The file the rejects of these ranges are appended to."""
        ...

    def is_duplicate(self, handler: LayoutHandler, sample: CleanRecord | EncodedSample, records_done: int) -> bool:
        """Whether the kept sample, raw record number ``records_done`` of the plan, repeats an earlier one.

        Asked once per record, in plan order, possibly a batch of records ahead of the last
        checkpoint: a resume forgets what was recorded past its checkpoint.
        """
        ...

    def commit(self, checkpoint: Checkpoint, rejects: BinaryIO) -> None:
        """Record the place reached (shards closed, rejects written and flushed up to ``checkpoint``)."""
        ...

    def finish(self, rejects: BinaryIO) -> None:
        """The last range is written: make what is left durable."""
        ...

    def close(self) -> None:
        """Release what the mode holds (also after an error)."""
        ...

    def after_crash(self) -> WriteMode:
        """The mode a new writing child starts with after this one's child died."""
        ...


# ----------------------------------------------------------------------------- the loop


class WriteLoop:
    """The write loop of one run: plan ranges -> results in plan order -> rejects file, writers, checkpoints."""

    def __init__(self, ctx: RunContext, mode: WriteMode, cleaning: Cleaning, progress: ProgressSink,
                 spill: SpillFile | None = None) -> None:
        self.ctx, self.mode, self.cleaning, self.progress, self.spill = ctx, mode, cleaning, progress, spill
        start = mode.start
        self.checkpoint = start
        self.counts: Counter[str] = Counter(start.totals.rejected_by_reason)
        self.kept = start.totals.samples_kept
        self.shards: list[ShardInfo] = list(start.shards)
        self.records_done = start.records_done
        self.cursor: Tag = (start.position, start.skip)
        self.packer = IdentityPacker()
        self.packer.load_state_dict(start.carry)
        self.range_index = start.range
        self.next_shard = start.next_shard
        self.processed = 0
        self.bytes_out = 0
        self.tokens = _token_stage(ctx)

    def execute(self) -> RunOutcome:
        mode = self.mode
        try:
            with mode.rejects() as rejects:
                for index in mode.ranges():
                    self._write_range(index, rejects)
                mode.finish(rejects)
        finally:
            mode.close()
        self.progress.update(self.processed, sum(self.counts.values()), self.bytes_out, force=True)
        self.progress.close()
        rejected = sum(self.counts.values())
        totals = Totals(self.kept + rejected, self.kept, rejected, dict(self.counts))
        return RunOutcome(totals, tuple(self.shards), self.processed, self.bytes_out)

    def _write_range(self, index: int, rejects: BinaryIO) -> None:
        """Write range ``index`` from the starting place in it (or its start) to its end."""
        ctx = self.ctx
        start, stop = ctx.plan.range_bounds(index)
        if index == self.mode.start.range:
            first, skip, self.next_shard = self.mode.start.position, self.mode.start.skip, self.mode.start.next_shard
        else:
            first, skip, self.next_shard = start, 0, 0
        self.range_index = index
        tags: deque[Tag] = deque()
        writer = open_writer(ctx.spec.output_format, ctx.store.local_path(), prefix=f"{ctx.spec.prefix}-{index:05d}",
                             start_shard=self.next_shard, options=ctx.spec.writer)
        with writer, closing(self._results(first, stop, skip, tags)) as results:
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
        ``run_plan.MAX_PART_BYTES``, or a whole CSV or Parquet file) is read again on resume.
        """
        handler, crashed = self.ctx.spec.handler, self.cleaning.crashed
        for position, unit in enumerate(self.ctx.plan.units(first, stop), first):
            start = skip if position == first else 0
            for k, item in enumerate(handler.records(unit)):
                if k < start:
                    continue
                if crashed:
                    item = crashed.get(position, item)
                tags.append((position, k))
                yield item

    def _results(self, first: int, stop: int, skip: int, tags: deque[Tag]) -> Generator[Result, None, None]:
        """Results in plan order, cleaned, duplicates told, tokenized for token output; ``tags`` gets each
        one's (position, record) as it is submitted."""
        if self.spill is not None:  # cleaned already, in plan order: one range's records, read from `skip` on
            cleaned = read_spill(self.spill.store, self.spill.name, (first, skip), tags)
        else:
            cleaned = self.cleaning.results(self.ctx.spec.handler, self._items(first, stop, skip, tags), first + skip)
        kept = self._deduplicated(cleaned, self.records_done)
        return kept if self.tokens is None else self.tokens.documents(kept)

    def _deduplicated(self, results: Generator[Result, None, None],
                      first_record: int) -> Generator[Result, None, None]:
        """``results`` with each duplicate replaced by its reject; the first result is raw record ``first_record``."""
        mode, handler = self.mode, self.ctx.spec.handler
        with closing(results):
            for record, result in enumerate(results, first_record):
                if not isinstance(result, Reject) and mode.is_duplicate(handler, result, record):
                    result = Reject(result.source, RejectReason.DUPLICATE, "same content as an earlier input",
                                    _row_of(result))
                yield result

    def _consume(self, tag: Tag, result: Result, writer: ShardWriter, rejects: BinaryIO, index: int) -> None:
        self.processed += 1
        if isinstance(result, Reject):
            self.counts[str(result.reason)] += 1
            rejects.write(reject_line(self._named(result)))
        else:
            self.kept += 1
            for sample in self.packer.push(result):
                self._written(writer.write(sample), rejects, index, tag)
        self.records_done += 1
        self.cursor = self._after(tag)
        self.progress.update(self.processed, sum(self.counts.values()), self.bytes_out)

    def _named(self, reject: Reject) -> Reject:
        """``reject`` naming a remote RAW's objects by their URL, not by their path in this machine's mirror."""
        raw = self.ctx.spec.raw
        return reject if raw.url is None else replace(reject, detail=raw.named(reject.detail))

    def _after(self, tag: Tag) -> Tag:
        """The cursor just past the raw record at ``tag`` (a media unit is one raw record)."""
        position, k = tag
        return (position + 1, 0) if self.ctx.spec.handler.is_media else (position, k + 1)

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

    def _checkpoint(self, closed: list[ShardInfo], rejects: BinaryIO, index: int, cursor: Tag,
                    records_done: int) -> None:
        """Record the place reached: range ``index`` (its next shard), ``cursor`` and ``records_done``."""
        self.shards.extend(closed)
        self.next_shard += len(closed)
        self.bytes_out += sum(s.bytes for s in closed)
        self.ctx.store.publish([name for s in closed for name in (s.name, s.index) if name])
        rejects.flush()
        rejected = sum(self.counts.values())
        kept_done = sum(s.num_samples for s in self.shards)
        totals = Totals(kept_done + rejected, kept_done, rejected, dict(self.counts))
        next_shard = self.next_shard if index == self.range_index else 0
        self.checkpoint = replace(self.checkpoint, range=index, next_shard=next_shard, position=cursor[0],
                                  skip=cursor[1], records_done=records_done, rejects_bytes=rejects.tell(),
                                  totals=totals, shards=tuple(self.shards), carry=self.packer.state_dict())
        self.mode.commit(self.checkpoint, rejects)


def _token_stage(ctx: RunContext) -> TokenStage | None:
    """The token stage of a run that writes token shards (``--tokenizer``), on ``--workers`` threads."""
    if ctx.spec.tokenizer is None:
        return None
    return TokenStage(ctx.spec.tokenizer, threads=ctx.workers, min_tokens=ctx.spec.min_tokens)


def _row_of(record: CleanRecord | EncodedSample) -> int | None:
    row = record.fields.get("__row__") if isinstance(record, CleanRecord) else None
    return row if isinstance(row, int) else None
