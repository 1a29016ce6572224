"""``--engine local`` on writer processes: the plan's ranges written in parallel on this machine.

The design of ``--engine ray`` (ranges written by independent tasks, byte-identical to one
process writing them in order), on a local pool (``writer_pool``) of ``WriterSplit.writers``
processes, each cleaning on its own ``threads`` (media: decoding releases the GIL) or inline
(table rows and text, whose cleaning holds it: no row is pickled to another process). This
process hands out the jobs (``local_tasks``) and is the only writer of the checkpoint:

1. tables and text whose duplicates are found (first in plan order wins), once: the range
   driver's two passes (``range_driver.find_range_duplicates``, the tasks a Ray run runs, here on the
   writers: ``WriterTasks``): each range cleaned once, its digests and records written, then
   each partition of the digests grouped, then ``dups.done``; media duplicates are in the plan;
2. every range not done, from its place (``WriteJob``): its shards into OUT, its rejects into
   its own file, its place sent here at every closed shard and recorded in the checkpoint's
   ``open_ranges`` (a killed run loses at most the shard each writer had open); a range
   written is recorded in ``ranges_done`` and its spill removed;
3. the ranges' rejects joined in range order: the bytes a run in one process writes.

A writer that dies is replaced. Media: the inputs it was cleaning are cleaned again, each
alone in a process of its own (``write_loop.crash_culprits``); those that crash again
become ``worker_crash`` rejects and the range goes on from its last place. Otherwise the job
runs once more (``RETRIES``), then the run fails naming the range and its input. Ctrl-C
stops every writer (``writer_pool``): the checkpoint is the last place each one reported.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, TypeVar

from dataprep.clean.images import prepare_threads
from dataprep.engines.context import RunContext, RunOutcome, WriterSplit
from dataprep.engines.local_tasks import InlineWriter, JobDone, TaskJob, WriteJob, WriterSetup, program
from dataprep.engines.parallel import describe_exit
from dataprep.engines.progress import ProgressLine
from dataprep.engines.state_files import DUPS_DONE, RANGES_DIR, join_rejects, spill_name
from dataprep.engines.supervisor import THREAD_WINDOW_PER_WORKER
from dataprep.engines.write_loop import crash_culprits
from dataprep.engines.writer_pool import WriterPool
from dataprep.errors import WorkerCrashError
from dataprep.inputs.records import Reject
from dataprep.output.store import OutputStore
from dataprep.plan.checkpoint import MODE_RANGES, PARTIAL_REJECTS_PATH, Checkpoint, save_checkpoint

log = logging.getLogger(__name__)

RETRIES = 1  # a job whose writer dies (no input to blame) runs once more, then the run fails
Job = TaskJob | WriteJob
T = TypeVar("T")
R = TypeVar("R")


def run_writers(ctx: RunContext, checkpoint: Checkpoint, progress: ProgressLine, split: WriterSplit) -> RunOutcome:
    """Write every range not done on ``split.writers`` writers (module docstring); the run's totals and shards."""
    store, num_ranges = ctx.store, ctx.plan.num_ranges
    _remove_temporaries(ctx)
    if ctx.spec.handler.is_media and split.threads > 1:
        prepare_threads()  # Pillow's plugins loaded once, here: forked writers inherit them (~20 ms each)
    run = _Run(ctx, checkpoint, progress)
    setup = WriterSetup(spec=ctx.spec, store=store, plan_dir=ctx.plan.directory, threads=split.threads)
    in_flight = split.threads * THREAD_WINDOW_PER_WORKER
    with (InlineWriter(setup, in_flight) if split.writers == 1
          else WriterPool(program(setup), split.writers, in_flight_slots=in_flight)) as writers:
        if ctx.spec.handler.finds_duplicates() and not store.exists(DUPS_DONE):
            # The range driver's passes, and its modules, only where duplicates are found across ranges.
            from dataprep.engines.range_driver import find_range_duplicates, remove_attempts

            run.phase = "finding duplicates"
            remove_attempts(store)
            find_range_duplicates(ctx, WriterTasks(writers, run), scratch=store.local_path() / RANGES_DIR)
        run.phase = "writing"
        writers.run([WriteJob(run.place(r)) for r in range(num_ranges) if r not in run.checkpoint.ranges_done], run)
    run.tick((0, 0, 0), force=True)
    progress.close()
    join_rejects(store, PARTIAL_REJECTS_PATH, num_ranges)
    done = run.checkpoint
    return RunOutcome(totals=done.totals, shards=done.shards, processed=run.records, bytes_out=run.bytes_out,
                      split=split, writer_peak_kib=run.writer_peak_kib)


class _Run:
    """What this process keeps of a run on writers: the checkpoint, retries, crashes, counts (``PoolEvents``)."""

    def __init__(self, ctx: RunContext, checkpoint: Checkpoint, progress: ProgressLine) -> None:
        self.ctx, self.progress = ctx, progress
        self.checkpoint = replace(checkpoint, mode=MODE_RANGES)
        self.phase = "writing"
        self.deaths: Counter[tuple[str, int]] = Counter()
        self.crashed: dict[int, dict[int, Reject]] = {}
        self.records = self.rejected = self.bytes_out = 0  # this run's own written work
        self.cleaned = 0  # records cleaned by the pass that finds duplicates
        self.writer_peak_kib: int | None = None

    def place(self, index: int) -> Checkpoint:
        """Where range ``index`` is to be written from: the last place recorded, or its start."""
        recorded = self.checkpoint.open_ranges.get(index)
        return recorded or Checkpoint(range=index, position=self.ctx.plan.range_bounds(index)[0])

    def message(self, job: Any, payload: Any) -> None:
        if isinstance(payload, Checkpoint):  # a range's place, durable in OUT: recorded
            self.checkpoint = self.checkpoint.with_open_range(payload)
            save_checkpoint(self.ctx.store, self.checkpoint)

    def done(self, job: Any, result: Any) -> None:
        if not isinstance(result, JobDone):
            raise TypeError(f"a writer's job ended with a {type(result).__name__}, not a JobDone")
        if result.peak_kib is not None:
            self.writer_peak_kib = max(self.writer_peak_kib or 0, result.peak_kib)
        if isinstance(job, TaskJob):
            if job.task.key[0] == "range":  # a range's digests: its records cleaned
                self.cleaned += result.result.count
            return
        self.records += result.records
        if result.outcome is not None:
            outcome, index = result.outcome, job.place.range
            self.checkpoint = self.checkpoint.with_range_done(index, outcome.totals, outcome.shards)
            save_checkpoint(self.ctx.store, self.checkpoint)
            self.ctx.store.remove([spill_name(index)])  # after the checkpoint: never needed again
            self.rejected += outcome.totals.rejected - job.place.totals.rejected
            self.bytes_out += outcome.bytes_out

    def died(self, job: Any, exit_status: int | None, in_flight: list[int]) -> Job:
        if isinstance(job, WriteJob) and self.ctx.spec.handler.is_media:
            index = job.place.range
            known = self.crashed.setdefault(index, {})
            culprits = crash_culprits(self.ctx.spec.handler, self.ctx.plan, [p for p in in_flight if p not in known])
            if culprits:
                known.update(culprits)
                for reject in culprits.values():
                    log.warning("%s: %s; rejected (worker_crash), range %d goes on from its last complete shard",
                                reject.source, reject.detail, index)
                return WriteJob(self.place(index), dict(known))
        key = _key(job)
        self.deaths[key] += 1
        what = self._describe(job, in_flight)
        if self.deaths[key] > RETRIES:
            raise WorkerCrashError(f"the writer process of {what} died {self.deaths[key]} times "
                                   f"({describe_exit(exit_status)}); rerun the same command to resume from the "
                                   "last complete shards", [what])
        log.warning("the writer process of %s died (%s); running it again", what, describe_exit(exit_status))
        return WriteJob(self.place(job.place.range), dict(self.crashed.get(job.place.range, {}))) \
            if isinstance(job, WriteJob) else job

    def failed(self, job: Any, error: BaseException) -> None:
        error.add_note(f"in the writer process of {self._describe(job, [])}")

    def tick(self, counts: tuple[int, int, int], *, force: bool = False) -> None:
        """The progress line: ranges written, and the records of this phase (cleaned, or written) so far."""
        done = len(self.checkpoint.ranges_done)
        base = self.records if self.phase == "writing" else self.cleaned
        self.progress.writers(self.phase, done, self.ctx.plan.num_ranges, base + counts[0],
                              self.rejected + counts[1], self.bytes_out + counts[2], force=force)

    def _describe(self, job: Any, in_flight: list[int]) -> str:
        """'range 3 (its input rows.jsonl, from record 2,001)' / 'partition 5 of the duplicates'."""
        if isinstance(job, TaskJob) and job.task.key[0] == "partition":
            return f"partition {job.task.key[1]} of the duplicates"
        index = job.task.key[1] if isinstance(job, TaskJob) else job.place.range
        plan = self.ctx.plan
        if in_flight:
            names = [getattr(plan.at(p), "source", "?") for p in in_flight[:5]]
            return f"range {index} (cleaning {', '.join(names)}{' ...' if len(in_flight) > 5 else ''})"
        start, stop = plan.range_bounds(index)
        place = job.place if isinstance(job, WriteJob) else Checkpoint(position=start)
        if place.position >= stop:
            return f"range {index}"
        source = getattr(plan.at(place.position), "source", "?")
        where = f", from its record {place.skip + 1:,}" if place.skip else ""
        return f"range {index} (its input {source}{where})"


def _key(job: Job) -> tuple[str, int]:
    """What a job is about, whatever place it starts from: ("write", range), ("range", range), ("partition", part)."""
    if isinstance(job, WriteJob):
        return ("write", job.place.range)
    key: tuple[str, int] = job.task.key  # a task of range_tasks
    return key


class WriterTasks:
    """The writers (a ``WriterPool``, or an ``InlineWriter``) as the range driver's ``TaskExecutor``: each task a
    ``TaskJob``, its result yielded as it completes; ``run`` sees the deaths, failures and counts."""

    def __init__(self, writers: WriterPool | InlineWriter, run: _Run) -> None:
        self.writers, self.run = writers, run

    def map_unordered(self, fn: Callable[[T], R], tasks: list[T]) -> Iterator[R]:
        for job, done in self.writers.completed([TaskJob(fn, task) for task in tasks], self.run):
            self.run.done(job, done)
            yield done.result

    def check_shared(self, store: OutputStore) -> None:
        """Nothing to check: the writers are of this machine."""


def _remove_temporaries(ctx: RunContext) -> None:
    """The range files' folder, made; temporary files a killed writer left in it removed (a file there is
    written whole or not at all)."""
    folder = ctx.store.local_path() / RANGES_DIR
    folder.mkdir(parents=True, exist_ok=True)
    for path in folder.glob(".*.tmp"):
        path.unlink(missing_ok=True)
