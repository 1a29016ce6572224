"""The jobs of ``--engine local``'s writer processes (``local_writers``): a range's digests and spilled
records, a partition's grouping, a range's shards; and running them in this process when there is one writer.

Each job reads the saved plan and writes into OUT itself (a writer process is of this
machine, OUT is its folder): a range's digest files and spill (``DigestJob``, tables and
text whose duplicates are found across ranges: cleaned once, ``spill``), one partition's
duplicates (``GroupJob``, ``grouping``), a range's shards from its place (``WriteJob``: the
write loop in a ``RangeWriterRun``, the records read back from the spill when there is one,
media cleaned on the writer's threads with the positions in flight in its slot). A job's
counts go to the writer's slot (``writer_pool.SlotProgress``), a range's place to the parent
at every closed shard (``send``).
"""

from __future__ import annotations

import functools
import multiprocessing
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.engines.context import RunContext, RunOutcome, RunSpec
from dataprep.engines.grouping import DigestWriter, dups_bytes, load_duplicates, partition_duplicates
from dataprep.engines.state_files import RANGES_DIR, dups_name, spill_name
from dataprep.engines.run_modes import RangeWriterRun
from dataprep.engines.spill import SpillWriter
from dataprep.engines.write_loop import ProcessCleaning, ThreadCleaning, WriteLoop, clean_item
from dataprep.engines.writer_pool import PoolEvents, Send, SlotProgress, WriterProgram, WriterSlot, peak_rss_kib
from dataprep.inputs.records import Reject
from dataprep.output.store import OutputStore
from dataprep.plan.checkpoint import Checkpoint
from dataprep.plan.run_plan import RunPlan

# Records between two updates of a first pass's counts.
_COUNT_EVERY = 256


@dataclass(frozen=True)
class WriterSetup:
    """What every writer process is given once: what the run writes, OUT, the plan's folder, its cleaning threads."""

    spec: RunSpec
    store: OutputStore
    plan_dir: Path
    threads: int


@dataclass(frozen=True)
class WriterEnv:
    """A writer process's run: the context its jobs share, and its slot."""

    ctx: RunContext
    slot: WriterSlot


@dataclass(frozen=True)
class DigestJob:
    """First pass of range ``index``: its records cleaned, their digests and the records themselves written."""

    index: int


@dataclass(frozen=True)
class GroupJob:
    """Partition ``part`` of the digests of ``num_ranges`` ranges grouped: each range's duplicates in it."""

    part: int
    num_ranges: int


@dataclass(frozen=True)
class WriteJob:
    """Range ``place.range`` written from ``place``; ``crashed``: position -> the ``worker_crash`` reject of an
    input known to kill its process (media)."""

    place: Checkpoint
    crashed: dict[int, Reject] = field(default_factory=dict)


@dataclass(frozen=True)
class JobDone:
    """A job's end: the records it went through; for a ``WriteJob`` the range's outcome; the writer's peak
    resident memory so far (KiB, None: unknown)."""

    records: int
    outcome: RunOutcome | None = None
    peak_kib: int | None = None


def open_env(setup: WriterSetup, slot: WriterSlot) -> WriterEnv:
    """A writer's run, opened once at its start."""
    ctx = RunContext(spec=setup.spec, store=setup.store, plan=RunPlan(setup.plan_dir), workers=setup.threads)
    return WriterEnv(ctx, slot)


def run_job(env: WriterEnv, job: DigestJob | GroupJob | WriteJob, send: Send) -> JobDone:
    """Run one job in a writer (module docstring)."""
    if isinstance(job, DigestJob):
        done = digest_range(env, job.index)
    elif isinstance(job, GroupJob):
        done = group_part(env.ctx.store, job)
    else:
        done = write_range_from(env, job, send)
    return replace(done, peak_kib=peak_rss_kib())


def program(setup: WriterSetup) -> WriterProgram:
    return WriterProgram(open_env=open_env, run_job=run_job, setup=setup)


def digest_range(env: WriterEnv, index: int) -> JobDone:
    """Clean range ``index`` once: each kept record's digest to its partition's file, every result to the spill."""
    ctx, progress = env.ctx, SlotProgress(env.slot)
    handler, store = ctx.spec.handler, ctx.store
    start, stop = ctx.plan.range_bounds(index)
    ordinal = rejected = 0
    with DigestWriter(store, index) as digests, SpillWriter(store, spill_name(index)) as spill:
        for position, unit in enumerate(ctx.plan.units(start, stop), start):
            for k, item in enumerate(handler.records(unit)):
                result = clean_item(handler, item)
                digest = None if isinstance(result, Reject) else handler.dedup_digest(result)
                if digest is not None:
                    digests.add(ordinal, digest)
                rejected += isinstance(result, Reject)
                spill.add((position, k), result)
                ordinal += 1
                if ordinal % _COUNT_EVERY == 0:
                    progress.update(ordinal, rejected, 0)
    progress.update(ordinal, rejected, 0)
    return JobDone(ordinal)


def group_part(store: OutputStore, job: GroupJob) -> JobDone:
    """Group partition ``job.part``: every range's duplicate ordinals in it, in one file."""
    scratch = store.local_path() / RANGES_DIR  # a large partition's on-disk set: in OUT, never in $TMPDIR
    per_range = partition_duplicates(store, job.part, job.num_ranges, scratch)
    store.write_bytes(dups_name(job.part), dups_bytes(per_range))
    return JobDone(sum(len(d) for d in per_range))


def write_range_from(env: WriterEnv, job: WriteJob, send: Send) -> JobDone:
    """Write range ``job.place.range`` from its place to its end; its place sent at every closed shard."""
    ctx = env.ctx
    handler, store, index = ctx.spec.handler, ctx.store, job.place.range
    duplicates = np.zeros(0, dtype=np.int64)
    spill = None
    if handler.finds_duplicates():
        duplicates = load_duplicates(store, index)
        spill = spill_name(index) if store.exists(spill_name(index)) else None
    mode = RangeWriterRun(ctx, job.place, duplicates, report=send)
    cleaning = (ThreadCleaning(ctx.workers, env.slot.in_flight, job.crashed) if handler.is_media
                else ProcessCleaning(1, job.crashed))
    outcome = WriteLoop(ctx, mode, cleaning, SlotProgress(env.slot), spill=spill).execute()
    return JobDone(outcome.processed, outcome)


class InlineWriter:
    """One writer: the jobs run in this process, one after another (the ``WriterPool`` interface; a context
    manager). What ``--workers 1`` resuming a run of writer processes uses: nothing is forked."""

    def __init__(self, setup: WriterSetup, in_flight_slots: int) -> None:
        self.setup, self.in_flight_slots = setup, in_flight_slots
        self._env: WriterEnv | None = None

    def __enter__(self) -> InlineWriter:
        slot = WriterSlot.make(multiprocessing.get_context(), self.in_flight_slots)
        self._env = open_env(self.setup, slot)
        return self

    def __exit__(self, *exc: object) -> None:
        self._env = None

    def run(self, jobs: list[Any], events: PoolEvents) -> None:
        env = self._env
        if env is None:
            raise RuntimeError("InlineWriter.run outside its with-block")
        for seq, job in enumerate(jobs, 1):
            env.slot.start_job(seq)
            with _failing(events, job):
                result = run_job(env, job, functools.partial(events.message, job))
            events.done(job, result)
            events.tick((0, 0, 0))


@contextmanager
def _failing(events: PoolEvents, job: Any) -> Iterator[None]:
    try:
        yield
    except Exception as err:
        events.failed(job, err)
        raise
