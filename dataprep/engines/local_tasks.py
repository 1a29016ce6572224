"""The jobs of ``--engine local``'s writer processes (``local_writers``), and running them in this process when
there is one writer (``InlineWriter``).

A ``TaskJob`` is a task of the range driver's duplicates passes (``range_tasks``: a range's
digests and spill, a partition's grouping; tables and text whose duplicates are found across
ranges: cleaned once, ``spill``), the same function a Ray task runs, its counts going to the
writer's slot. A ``WriteJob`` writes a range's shards from its place, into OUT itself (a
writer process is of this machine, OUT is its folder): the write loop in a ``RangeRun``
reporting its place, the records read back from the spill when there is one, media cleaned on
the writer's threads with the positions in flight in its slot. A job's counts go to the
writer's slot (``writer_pool.SlotProgress``), a range's place to the parent at every closed
shard (``send``).
"""

from __future__ import annotations

import functools
import multiprocessing
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.engines.context import RunContext, RunOutcome, RunSpec
from dataprep.engines.grouping import load_duplicates
from dataprep.engines.state_files import rejects_name, spill_name
from dataprep.engines.run_modes import RangeRun
from dataprep.engines.spill import SpillFile
from dataprep.engines.write_loop import InlineCleaning, ThreadCleaning, WriteLoop
from dataprep.engines.writer_pool import PoolEvents, Send, SlotProgress, WriterProgram, WriterSlot, peak_rss_kib
from dataprep.inputs.records import Reject
from dataprep.output.store import OutputStore
from dataprep.plan.checkpoint import Checkpoint
from dataprep.plan.run_plan import RunPlan


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
class TaskJob:
    """A task of the range driver's duplicates passes (``range_tasks.range_digests``, ``group_partition``) run on
    a writer: ``fn(task, progress)``, the counts into the writer's slot; its ``JobDone.result`` is ``fn``'s."""

    fn: Callable[..., Any]  # (task, ProgressSink) -> its result
    task: Any  # a RangeTask or a GroupTask


@dataclass(frozen=True)
class WriteJob:
    """Range ``place.range`` written from ``place``; ``crashed``: position -> the ``worker_crash`` reject of an
    input known to kill its process (media)."""

    place: Checkpoint
    crashed: dict[int, Reject] = field(default_factory=dict)


@dataclass(frozen=True)
class JobDone:
    """A job's end: the records it went through; for a ``WriteJob`` the range's outcome, for a ``TaskJob`` its
    task's result; the writer's peak resident memory so far (KiB, None: unknown)."""

    records: int
    outcome: RunOutcome | None = None
    peak_kib: int | None = None
    result: Any = None


def open_env(setup: WriterSetup, slot: WriterSlot) -> WriterEnv:
    """A writer's run, opened once at its start."""
    ctx = RunContext(spec=setup.spec, store=setup.store, plan=RunPlan(setup.plan_dir), workers=setup.threads)
    return WriterEnv(ctx, slot)


def run_job(env: WriterEnv, job: TaskJob | WriteJob, send: Send) -> JobDone:
    """Run one job in a writer (module docstring)."""
    if isinstance(job, TaskJob):
        done = JobDone(0, result=job.fn(job.task, SlotProgress(env.slot)))
    else:
        done = write_range_from(env, job, send)
    return replace(done, peak_kib=peak_rss_kib())


def program(setup: WriterSetup) -> WriterProgram:
    return WriterProgram(open_env=open_env, run_job=run_job, setup=setup)


def write_range_from(env: WriterEnv, job: WriteJob, send: Send) -> JobDone:
    """Write range ``job.place.range`` from its place to its end; its place sent at every closed shard."""
    ctx = env.ctx
    handler, store, index = ctx.spec.handler, ctx.store, job.place.range
    duplicates = np.zeros(0, dtype=np.int64)
    spill = None
    if handler.finds_duplicates():
        duplicates = load_duplicates(store, index)
        spill = SpillFile(store, spill_name(index)) if store.exists(spill_name(index)) else None
    mode = RangeRun(ctx, job.place, rejects_name(index), duplicates, report=send)
    cleaning = (ThreadCleaning(ctx.workers, env.slot.in_flight, job.crashed) if handler.is_media
                else InlineCleaning(job.crashed))
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
        for job, result in self.completed(jobs, events):
            events.done(job, result)

    def completed(self, jobs: list[Any], events: PoolEvents) -> Iterator[tuple[Any, Any]]:
        env = self._env
        if env is None:
            raise RuntimeError("InlineWriter.run outside its with-block")
        for seq, job in enumerate(jobs, 1):
            env.slot.start_job(seq)
            with _failing(events, job):
                result = run_job(env, job, functools.partial(events.message, job))
            yield job, result
            events.tick((0, 0, 0))


@contextmanager
def _failing(events: PoolEvents, job: Any) -> Iterator[None]:
    try:
        yield
    except Exception as err:
        events.failed(job, err)
        raise
