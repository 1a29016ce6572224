"""The modes of the write loop (``write_loop.WriteMode``): a checkpointed run, and one range.

``CheckpointedRun`` (``--engine local`` in one process) writes the ranges from its checkpoint to the end of
the plan; its rejects go to the state folder's partial rejects file, duplicates are found
in the on-disk ``SeenSet`` (rolled back to the checkpoint), and every checkpoint makes the
rejects, the duplicate set and the checkpoint document durable, so a killed run resumes
from the last one. ``RangeRun`` writes one range from a place to its end: its duplicates
were found beforehand across ranges, its rejects go to the range's own file. As a task of
``--engine ray`` (``dataprep.engines.range_tasks``) it writes the range whole into its
attempt's folder and records nothing: a task that fails is run again from the range's
start. In a writer process of ``--engine local`` (``dataprep.engines.local_writers``) it
writes into OUT itself from the range's place, and at every closed shard the place reached
is made durable and reported to the parent (which records it in the checkpoint), so a
killed run loses at most the open shard.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from typing import BinaryIO

import numpy as np

from dataprep.errors import FormatError
from dataprep.plan.checkpoint import (MODE_SEQUENTIAL, PARTIAL_REJECTS_PATH, SEEN_NAME, SEEN_PATH, Checkpoint,
                                      save_checkpoint, state_dir)
from dataprep.engines.handlers import LayoutHandler
from dataprep.plan.outdir import open_output
from dataprep.formats.samples import CleanRecord, EncodedSample
from dataprep.engines.context import RunContext
from dataprep.plan.seen import SeenSet
from dataprep.output.store import OutputStore


class CheckpointedRun:
    """The ranges from ``start`` to the end of the plan, checkpointed after every shard (module docstring)."""

    def __init__(self, ctx: RunContext, start: Checkpoint) -> None:
        self.ctx, self.start = ctx, start
        self._seen: SeenSet | None = None  # opened where the loop runs (the writing child), on first use
        self._synced = start.rejects_bytes
        self._range_start = start.range_start if start.is_started else start

    def ranges(self) -> range:
        return range(self.start.range, self.ctx.plan.num_ranges)

    def rejects(self) -> AbstractContextManager[BinaryIO]:
        return self.ctx.store.appender(PARTIAL_REJECTS_PATH, fresh=False)

    def is_duplicate(self, handler: LayoutHandler, sample: CleanRecord | EncodedSample, records_done: int) -> bool:
        digest = handler.dedup_digest(sample)
        return digest is not None and self._seen_set().first(digest, records_done) is not None

    def commit(self, checkpoint: Checkpoint, rejects: BinaryIO) -> None:
        store = self.ctx.store
        self._synced = sync_new(store, rejects, self._synced)
        if self._seen is not None:
            self._seen.commit()
            store.publish(f"{SEEN_PATH}/{name}" for name in self._seen.committed_files())
        if self._is_range_start(checkpoint):
            self._range_start = replace(checkpoint, mode="", range_start=None)
        save_checkpoint(store, replace(checkpoint, mode=MODE_SEQUENTIAL, range_start=self._range_start))

    def _is_range_start(self, checkpoint: Checkpoint) -> bool:
        """Whether ``checkpoint`` is where its range begins (the one before it just ended)."""
        plan = self.ctx.plan
        if checkpoint.next_shard or checkpoint.skip or checkpoint.range >= plan.num_ranges:
            return False
        return checkpoint.position == plan.range_bounds(checkpoint.range)[0]

    def finish(self, rejects: BinaryIO) -> None:
        """Nothing left: the end of the last range was a checkpoint."""

    def close(self) -> None:
        if self._seen is not None:
            self._seen.close()
            self._seen = None

    def after_crash(self) -> CheckpointedRun:
        """From the last checkpoint, OUT tidied back to it (the dead child's open shard, rejects past it)."""
        ctx = self.ctx
        state = open_output(ctx.store.local_path(), ctx.spec.fingerprint, overwrite=False)
        return CheckpointedRun(ctx, state.checkpoint or self.start)

    def _seen_set(self) -> SeenSet:
        if self._seen is None:  # only tables and text look for duplicates here
            self._seen = SeenSet.open(state_dir(self.ctx.store.local_path()) / SEEN_NAME)
            self._seen.truncate(self.start.records_done)
        return self._seen


class RangeRun:
    """Range ``start.range`` from ``start`` (its place, or its start) to its end (module docstring).

    rejects_name: the range's rejects file in ``ctx.store`` (appended to after the
    ``start.rejects_bytes`` its place counts); duplicates: int64 [D], sorted ordinals (0-based,
    over the range's raw records in plan order) of the records that repeat an earlier record of
    the plan; report: called with the range's place after every closed shard, once what it
    counts is durable (rejects synced, shards published); None: a task, never resumed half-way.
    """

    def __init__(self, ctx: RunContext, start: Checkpoint, rejects_name: str, duplicates: np.ndarray,
                 report: Callable[[Checkpoint], None] | None = None) -> None:
        self.ctx, self.start, self.duplicates, self.report = ctx, start, SortedOrdinals(duplicates), report
        self.index, self.rejects_name = start.range, rejects_name
        self._synced = start.rejects_bytes

    def ranges(self) -> range:
        return range(self.index, self.index + 1)

    def rejects(self) -> AbstractContextManager[BinaryIO]:
        return _rejects_from(self.ctx.store, self.rejects_name, self.start.rejects_bytes)

    def is_duplicate(self, handler: LayoutHandler, sample: CleanRecord | EncodedSample, records_done: int) -> bool:
        return self.duplicates.holds(records_done)

    def commit(self, checkpoint: Checkpoint, rejects: BinaryIO) -> None:
        if self.report is None:  # a task: nothing to record
            return
        self._synced = sync_new(self.ctx.store, rejects, self._synced)
        if checkpoint.range == self.index:  # the range's end is reported by its outcome
            self.report(checkpoint)

    def finish(self, rejects: BinaryIO) -> None:
        if self.report is None:  # a task's rejects file is published even when empty: made durable (uploaded)
            self.ctx.store.sync(rejects)
        else:
            self._synced = sync_new(self.ctx.store, rejects, self._synced)

    def close(self) -> None:
        """Nothing held."""

    def after_crash(self) -> RangeRun:
        """The same range again from ``start`` (a task: from its start, its attempt's files written again; a
        writer process's parent starts the range again from the last place it recorded instead)."""
        return self


def sync_new(store: OutputStore, rejects: BinaryIO, synced: int) -> int:
    """Make the rejects file durable if anything was appended since it was, at ``synced`` bytes; its length.

    A file whose length has not changed is not synced again: an fsync costs ~5 ms on a virtual disk, and a
    range of images has no reject most of the time.
    """
    length = rejects.tell()
    if length != synced:
        store.sync(rejects)
    return length


class SortedOrdinals:
    """Whether an ordinal is in a sorted int64 array, asked for increasing ordinals (each record once, in plan
    order): a comparison per question, a step per member; an ordinal smaller than the last is looked up."""

    def __init__(self, values: np.ndarray) -> None:
        self._values = values
        self._at = 0
        self._next = int(values[0]) if len(values) else None

    def holds(self, value: int) -> bool:
        if self._at and int(self._values[self._at - 1]) >= value:
            at = int(np.searchsorted(self._values, value))
            return at < len(self._values) and int(self._values[at]) == value
        while self._next is not None and self._next < value:
            self._at += 1
            self._next = int(self._values[self._at]) if self._at < len(self._values) else None
        return self._next == value


@contextmanager
def _rejects_from(store: OutputStore, name: str, length: int) -> Iterator[BinaryIO]:
    """Rejects file ``name`` opened to append after its first ``length`` bytes (what a place counts)."""
    with store.appender(name, fresh=length == 0) as f:
        size = f.seek(0, 2)
        if size < length:
            raise FormatError(f"{store.describe()}/{name}: {size} bytes, but the checkpoint counts {length}; the "
                              "run's state is damaged: rerun with --overwrite")
        f.truncate(length)
        f.seek(length)
        yield f
