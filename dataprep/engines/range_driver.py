"""The driver of a range-parallel run (``--engine ray``): hand out the range tasks, publish what they return.

The tasks (``dataprep.engines.range_tasks``) run wherever the executor puts them and write only
into folders of their own attempts. This driver is the only writer of OUT: it publishes
the attempt whose result it received (``publish_attempt``: its shards, sidecars and
rejects renamed into place through the ``OutputStore``; in object storage copied to their
names inside the store, then deleted), then records the range completed
in the checkpoint (``ranges_done``); once all are done it joins the rejects in range
order, so OUT is the same bytes as a local run's whatever ran which range where, in which
order, how often. A stale attempt's folder is never published, and the driver removes
every attempt folder before its tasks start (``remove_attempts``).

It resumes any checkpoint (``resume_whole_ranges``): the ranges done are kept, whoever wrote
them (Ray tasks, writer processes, or a run in one process); a range left open is written
again whole.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Protocol, TypeVar

from dataprep.plan.checkpoint import MODE_SEQUENTIAL, PARTIAL_REJECTS_PATH, Checkpoint, save_checkpoint
from dataprep.errors import UsageError
from dataprep.engines.grouping import has_digests
from dataprep.engines.state_files import (ATTEMPTS_DIR, DIGEST_PARTITIONS, DUPS_DONE, PROBE_DIR, dups_name,
                                          join_rejects, rejects_name, spill_name)
from dataprep.engines.range_tasks import (GroupTask, RangeResult, RangeTask, group_partition, probe_name,
                                          range_digests, write_range)
from dataprep.engines.progress import ProgressLine
from dataprep.engines.context import RunContext, RunOutcome
from dataprep.output.store import OutputStore, leaf

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")


class TaskExecutor(Protocol):
    """Runs tasks somewhere (Ray tasks: ``ray_engine.RayExecutor``; writer processes of this machine, or this
    process: ``local_writers.WriterTasks``) and says where they may run."""

    def map_unordered(self, fn: Callable[[T], R], tasks: list[T]) -> Iterator[R]:
        """``fn(task)`` for every task, as each completes; a task whose worker dies is run again.

        ``fn`` is a task function of ``range_tasks`` (module-level: pickled by name); those of the
        duplicates passes take an optional ``ProgressSink`` as well, which an executor may give.
        """
        ...

    def check_shared(self, store: OutputStore) -> None:
        """Fail with a clear message unless every node sees ``store`` (``range_tasks.probe_node``, ``check_probes``)."""
        ...


def run_ranges(ctx: RunContext, checkpoint: Checkpoint, progress: ProgressLine, executor: TaskExecutor) -> RunOutcome:
    """Write every range not yet done as a task; the run's totals and shards, and this run's own work."""
    store, num_ranges = ctx.store, ctx.plan.num_ranges
    executor.check_shared(store)
    checkpoint = resume_whole_ranges(store, checkpoint)
    remove_attempts(store)
    if ctx.spec.handler.finds_duplicates() and not store.exists(DUPS_DONE):
        find_range_duplicates(ctx, executor)
    done = set(checkpoint.ranges_done)
    tasks = [_task(ctx, r) for r in range(num_ranges) if r not in done]
    processed = bytes_out = 0
    progress.ranges(len(done), num_ranges, checkpoint.totals, force=True)
    for result in executor.map_unordered(write_range, tasks):
        if result.index in checkpoint.ranges_done:  # a range run twice: the first published result stands
            continue
        publish_attempt(store, result)
        checkpoint = checkpoint.with_range_done(result.index, result.totals, result.shards)
        save_checkpoint(store, checkpoint)
        store.remove([spill_name(result.index)])  # after the checkpoint: never needed again
        processed += result.processed
        bytes_out += result.bytes_out
        progress.ranges(len(checkpoint.ranges_done), num_ranges, checkpoint.totals)
        log.info("range %d done: %d shards, %d inputs", result.index, len(result.shards), result.totals.inputs_seen)
    progress.ranges(len(checkpoint.ranges_done), num_ranges, checkpoint.totals, force=True)
    progress.close()
    join_rejects(store, PARTIAL_REJECTS_PATH, num_ranges)
    return RunOutcome(checkpoint.totals, checkpoint.shards, processed, bytes_out)


def resume_whole_ranges(store: OutputStore, checkpoint: Checkpoint) -> Checkpoint:
    """``checkpoint`` as whole ranges (``Checkpoint.whole_ranges``), saved, OUT brought back to it.

    A range task writes a whole range: the shards of a range left open (by writer processes, or by a run in
    one process) are removed, after the checkpoint that no longer names them is durable. The rejects of the
    ranges a run in one process completed are the first bytes of its partial rejects file: they become the
    first range's rejects file (the ranges' rejects are joined in range order, so the bytes are the same).
    """
    ranges = checkpoint.whole_ranges()
    if ranges == checkpoint:
        return checkpoint
    start = checkpoint.range_start
    if checkpoint.mode == MODE_SEQUENTIAL and start is not None and start.rejects_bytes:
        with store.open_read(PARTIAL_REJECTS_PATH) as src, store.writer(rejects_name(0)) as dst:
            dst.write(src.read(start.rejects_bytes))
    save_checkpoint(store, ranges)
    kept = {s.name for s in ranges.shards}
    store.remove(name for s in checkpoint.shards if s.name not in kept for name in (s.name, s.index) if name)
    if len(checkpoint.shards) > len(ranges.shards):
        log.info("resuming as whole ranges: %d shards of ranges left open removed, %d ranges done kept",
                 len(checkpoint.shards) - len(ranges.shards), len(ranges.ranges_done))
    return ranges


def _task(ctx: RunContext, index: int) -> RangeTask:
    return RangeTask(spec=ctx.spec, store=ctx.store, index=index)


def publish_folder(store: OutputStore, attempt: str, names: Iterable[str], last: str | None = None) -> None:
    """Rename the files of folder ``attempt`` to their final ``names`` (relative to OUT), durably.

    In the folder each file has the last component of its final name; ``last`` is renamed
    after the others are durable (a marker that says they are all there). The folder is
    removed afterwards.
    """
    store.move((f"{attempt}/{leaf(name)}", name) for name in names)
    if last is not None:
        store.move([(f"{attempt}/{leaf(last)}", last)])
    store.remove_tree(attempt)


def publish_attempt(store: OutputStore, result: RangeResult) -> None:
    """The attempt's shards and sidecars into OUT, its rejects to ``rejects_name``.

    A driver killed in the middle leaves shards the checkpoint does not name, which the
    resume removes before the range runs again.
    """
    names = [name for shard in result.shards for name in (shard.name, shard.index) if name]
    publish_folder(store, result.attempt, [*names, rejects_name(result.index)])


def remove_attempts(store: OutputStore) -> None:
    """Remove every attempt's folder (of a killed driver's tasks, or a retried one): never published.

    A stale task still writing into its folder then fails to write there; what it may
    create during the removal stays in the state folder, which goes when the run ends.
    """
    store.remove_tree(ATTEMPTS_DIR)
    (store.local_path() / ATTEMPTS_DIR).mkdir(parents=True, exist_ok=True)


def check_probes(store: OutputStore, token: str, answers: Iterable[tuple[str, str, bool]]) -> None:
    """Fail unless every node (label, name, saw the driver's file) saw OUT and the driver sees its file."""
    hint = ("OUT must be one folder that every node mounts at the same path (NFS, Lustre, ...), or a store URL "
            "(s3://bucket/prefix) that every node reaches")
    for label, node, seen in answers:
        if not seen:
            raise UsageError(f"node {label} ({node}) cannot see OUT {store.describe()}: the driver's probe file "
                             f"{PROBE_DIR}/driver is missing there; {hint}")
        if not store.exists(probe_name(token, node)):
            raise UsageError(f"node {label} ({node}) wrote its probe file to OUT {store.describe()} but the driver "
                             f"cannot see it ({probe_name(token, node)}); {hint}")


def find_range_duplicates(ctx: RunContext, executor: TaskExecutor, scratch: Path | None = None) -> None:
    """Both passes of duplicate finding (``range_tasks``: each range's digests and spill, then each partition
    grouped), each attempt published as it completes, skipping what a killed run had finished; then ``dups.done``.

    scratch: where a large partition's on-disk set goes (None: each node's temporary folder).
    """
    store, num_ranges = ctx.store, ctx.plan.num_ranges
    missing = [_task(ctx, r) for r in range(num_ranges) if not has_digests(store, r)]
    records = 0
    for result in executor.map_unordered(range_digests, missing):
        publish_folder(store, result.attempt, result.names, result.last)
        records += result.count
    log.info("digests of %d ranges written (%d records); grouping them in plan order", len(missing), records)
    groups = [GroupTask(store, p, num_ranges, scratch) for p in range(DIGEST_PARTITIONS)
              if not store.exists(dups_name(p))]
    found = 0
    for result in executor.map_unordered(group_partition, groups):
        publish_folder(store, result.attempt, result.names, result.last)
        found += result.count
    log.info("%d duplicates found in %d partitions", found, len(groups))
    store.write_bytes(DUPS_DONE, b"1\n")
