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
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol, TypeVar

from dataprep.plan.checkpoint import MODE_RANGES, MODE_RAY, PARTIAL_REJECTS_PATH, Checkpoint, save_checkpoint
from dataprep.errors import UsageError
from dataprep.engines.grouping import has_digests
from dataprep.engines.state_files import (ATTEMPTS_DIR, DIGEST_PARTITIONS, DUPS_DONE, PROBE_DIR, dups_name,
                                          join_rejects, rejects_name)
from dataprep.engines.range_tasks import (GroupTask, RangeResult, RangeTask, group_partition, probe_name,
                                          range_digests, write_range)
from dataprep.engines.progress import ProgressLine
from dataprep.engines.context import RunContext, RunOutcome
from dataprep.output.store import OutputStore, leaf

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")


class TaskExecutor(Protocol):
    """Runs tasks somewhere (Ray, or this machine) and says where they may run."""

    def map_unordered(self, fn: Callable[[T], R], tasks: list[T]) -> Iterator[R]:
        """``fn(task)`` for every task, as each completes; a task whose worker dies is run again."""
        ...

    def check_shared(self, store: OutputStore) -> None:
        """Fail with a clear message unless every node sees ``store`` (``range_tasks.probe_node``, ``check_probes``)."""
        ...


def run_ranges(ctx: RunContext, checkpoint: Checkpoint, progress: ProgressLine, executor: TaskExecutor) -> RunOutcome:
    """Write every range not yet done as a task; the run's totals and shards, and this run's own work."""
    store, num_ranges = ctx.store, ctx.plan.num_ranges
    if checkpoint.is_started or checkpoint.mode == MODE_RANGES:
        where = "its writer processes" if checkpoint.mode == MODE_RANGES else f"stopped in range {checkpoint.range}"
        raise UsageError(f"{store.describe()} holds a run started with --engine local ({where}); resume it with "
                         "--engine local, or pass --overwrite to start again")
    executor.check_shared(store)
    remove_attempts(store)
    if ctx.spec.handler.finds_duplicates() and not store.exists(DUPS_DONE):
        _find_duplicates(ctx, executor)
    done = set(checkpoint.ranges_done)
    tasks = [_task(ctx, r) for r in range(num_ranges) if r not in done]
    processed = bytes_out = 0
    progress.ranges(len(done), num_ranges, checkpoint.totals, force=True)
    for result in executor.map_unordered(write_range, tasks):
        if result.index in checkpoint.ranges_done:  # a range run twice: the first published result stands
            continue
        publish_attempt(store, result)
        checkpoint = checkpoint.with_range_done(result.index, result.totals, result.shards, mode=MODE_RAY)
        save_checkpoint(store, checkpoint)
        processed += result.processed
        bytes_out += result.bytes_out
        progress.ranges(len(checkpoint.ranges_done), num_ranges, checkpoint.totals)
        log.info("range %d done: %d shards, %d inputs", result.index, len(result.shards), result.totals.inputs_seen)
    progress.ranges(len(checkpoint.ranges_done), num_ranges, checkpoint.totals, force=True)
    progress.close()
    join_rejects(store, PARTIAL_REJECTS_PATH, num_ranges)
    return RunOutcome(checkpoint.totals, checkpoint.shards, processed, bytes_out)


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


def _find_duplicates(ctx: RunContext, executor: TaskExecutor) -> None:
    """Both passes of duplicate finding (``range_tasks``), skipping what a killed driver had finished."""
    store, num_ranges = ctx.store, ctx.plan.num_ranges
    missing = [_task(ctx, r) for r in range(num_ranges) if not has_digests(store, r)]
    records = 0
    for result in executor.map_unordered(range_digests, missing):
        publish_folder(store, result.attempt, result.names, result.last)
        records += result.count
    log.info("digests of %d ranges written (%d records); grouping them in plan order", len(missing), records)
    groups = [GroupTask(store, p, num_ranges) for p in range(DIGEST_PARTITIONS) if not store.exists(dups_name(p))]
    found = 0
    for result in executor.map_unordered(group_partition, groups):
        publish_folder(store, result.attempt, result.names, result.last)
        found += result.count
    log.info("%d duplicates found in %d partitions", found, len(groups))
    store.write_bytes(DUPS_DONE, b"1\n")
