"""A plan's ranges as independent tasks that run on any node (``--engine ray``; the driver is ``range_driver``).

A task reads the saved plan from OUT (a folder every node sees, or a store URL: the plan is
fetched into the task's private folder, ``OutputStore.fetch``), writes one whole range
(its shards are named by the range), and returns its shard list and counts; its rejects
go to a file of its own. Duplicates of table rows and text (first in plan order wins) are
found before writing, without running ranges in sequence, in two passes of tasks
(``dataprep.engines.grouping``): ``range_digests`` cleans a range (the key is the cleaned
value: cleaning is done twice, the price of not storing cleaned records on a node) and
writes its digests split into ``DIGEST_PARTITIONS`` partitions by their first byte;
``group_partition`` groups one partition of every range in plan order (sorted in memory,
or through an on-disk ``SeenSet`` on the node's temporary disk when large) and writes each
range's duplicate ordinals of that partition. ``write_range`` then knows its duplicates.
Media duplicates are in the plan.

The files: ``dataprep.engines.state_files``; the digest files and their grouping: ``grouping``.

Attempts. A task of a driver that was killed may go on running on a worker node while
the restarted driver runs the same task again; a task Ray retries after losing its node
may too. So a task never writes a name another attempt could write: it makes a folder
of its own (``start_attempt``: ``attempts/KIND-N-TOKEN``, TOKEN random, made by the task;
in object storage a prefix its files are uploaded under), writes there, and returns the
folder's name and the final names of its files. Only the driver publishes them
(``range_driver``). A task whose run is gone, or whose plan is of other options (OUT
overwritten), stops.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dataprep.plan.checkpoint import state_dir
from dataprep.errors import UsageError
from dataprep.formats.manifest import ShardInfo, Totals
from dataprep.inputs.records import Reject
from dataprep.engines.progress import ProgressLine
from dataprep.engines.context import RunContext, RunSpec
from dataprep.engines.run_modes import RangeTaskRun
from dataprep.output.object_store import ObjectOutputStore
from dataprep.inputs.raw_source import stage_units
from dataprep.remote import RemoteNotFoundError, RemoteStore, is_remote_url
from dataprep.plan.run_plan import PLAN_NAME, RunPlan, plan_names
from dataprep.output.store import LocalStore, OutputStore, leaf
from dataprep.engines.grouping import DigestWriter, dups_bytes, load_duplicates, partition_duplicates
from dataprep.engines.state_files import (ATTEMPTS_DIR, DIGEST_PARTITIONS, DUPS_DONE, PROBE_DIR, RANGES_DIR,
                                          digests_name, dups_name, rejects_name)
from dataprep.engines.supervisor import run_supervised
from dataprep.engines.write_loop import ProcessCleaning, WriteLoop

__all__ = ["ATTEMPTS_DIR", "DIGEST_PARTITIONS", "DUPS_DONE", "PROBE_DIR", "GroupTask", "PassResult", "RangeResult",
           "RangeTask", "digests_name", "dups_name", "group_partition", "probe_node", "range_digests",
           "rejects_name", "start_attempt", "write_range"]


def probe_name(token: str, node: str) -> str:
    return f"{PROBE_DIR}/node-{token}-{_safe(node)}"


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_.:" else "_" for c in name)


def start_attempt(store: OutputStore, label: str) -> tuple[str, OutputStore]:
    """A new folder for one attempt at a task, ``attempts/LABEL-TOKEN``: (its name in ``store``, it as a store).

    Raises ``UsageError`` if the run's state folder is gone (the run that started this
    task ended or was overwritten: the attempt is stale, and creates nothing). In object
    storage the folder is a prefix, and a stale task is stopped by ``RangeTask.open_plan``.
    """
    name = f"{ATTEMPTS_DIR}/{label}-{uuid.uuid4().hex}"
    try:
        return name, store.child(name)
    except FileNotFoundError as err:
        raise UsageError(f"{label}: {store.describe()}/{RANGES_DIR} is gone: the run that started this task ended "
                         "or was restarted with --overwrite (this attempt is stale and writes nothing)") from err


@dataclass(frozen=True)
class RangeTask:
    """One range of a run: what a task needs besides the files in OUT (pickled to the worker).

    spec: what the run writes, decided once by the driver (the tokenizer travels pickled,
    whole); store: OUT; threads: cleaning threads (media) or processes (tables, text), and
    tokenizing threads, inside the task.
    """

    spec: RunSpec
    store: OutputStore
    index: int
    threads: int = 1

    def open_plan(self) -> RunPlan:
        """The saved plan; a clear error if this node cannot see it (OUT not shared)."""
        try:
            directory = state_dir(self.store.fetch(plan_names()))
        except RemoteNotFoundError:  # the run's state is gone from the store
            directory = state_dir(self.store.local_path())
        if not (directory / PLAN_NAME).exists():
            raise UsageError(f"range {self.index}: the plan {directory}/{PLAN_NAME} is not visible on node "
                             f"{os.uname().nodename}; OUT must be a folder every node sees at the same path")
        plan = RunPlan(directory)
        if plan.info.fingerprint != json.loads(json.dumps(self.spec.fingerprint)):  # a stale task of an earlier run
            raise UsageError(f"range {self.index}: the plan in {directory} is of other options than this task's "
                             "(OUT was overwritten by a run of other options); this task is stale and writes nothing")
        return plan

    def context(self, store: OutputStore) -> RunContext:
        """The run as this task writes it: into ``store``, with ``threads`` cleaning workers.

        A remote RAW's files of the task's range are staged on this node first (``raw_source.stage_units``).
        """
        plan = self.open_plan()
        start, stop = plan.range_bounds(self.index)
        stage_units(self.spec.raw, plan.units(start, stop))
        return RunContext(spec=self.spec, store=store, plan=plan, workers=self.threads)


@dataclass(frozen=True)
class PassResult:
    """What a task of a duplicate pass returns: ``count``, and the files it wrote in its folder ``attempt``.

    names: the files' final names (relative to OUT); last: a marker to publish after them, or None.
    """

    count: int
    attempt: str
    names: tuple[str, ...]
    last: str | None = None


def range_digests(task: RangeTask) -> PassResult:
    """First pass: the dedup digest of every kept record of the range (count: its raw records)."""
    ctx = task.context(task.store)
    start, stop = ctx.plan.range_bounds(task.index)
    items = (item for unit in ctx.plan.units(start, stop) for item in ctx.spec.handler.records(unit))
    results = ProcessCleaning(task.threads).results(ctx.spec.handler, items, start)
    ordinal = 0
    attempt, own = start_attempt(task.store, f"digests-{task.index:05d}")
    with DigestWriter(own, task.index, leaf_name=True) as digests:
        for result in results:
            if not isinstance(result, Reject):
                digest = ctx.spec.handler.dedup_digest(result)
                if digest is not None:
                    digests.add(ordinal, digest)
            ordinal += 1
    return PassResult(ordinal, attempt, (digests.name,))


@dataclass(frozen=True)
class GroupTask:
    """One partition of the digests of every range, to group in plan order (``group_partition``)."""

    store: OutputStore
    part: int
    num_ranges: int


def group_partition(task: GroupTask) -> PassResult:
    """Second pass: the duplicates among partition ``part`` of every range's digests (count: how many)."""
    store = task.store
    attempt, own = start_attempt(store, f"grouped-{task.part:02d}")
    per_range = partition_duplicates(store, task.part, task.num_ranges)
    own.write_bytes(leaf(dups_name(task.part)), dups_bytes(per_range))
    return PassResult(sum(len(d) for d in per_range), attempt, (dups_name(task.part),))


@dataclass(frozen=True)
class RangeResult:
    """What a range task returns: its counts and shards (``processed``, ``bytes_out``: this attempt's work).

    attempt: the folder (relative to OUT) that holds the attempt's shards, sidecars and rejects.
    """

    index: int
    totals: Totals
    shards: tuple[ShardInfo, ...]
    processed: int
    bytes_out: int
    attempt: str


def write_range(task: RangeTask) -> RangeResult:
    """Write the range whole into a folder of this attempt's own; returns what the driver publishes and records.

    Nothing outside the attempt's folder is written: the driver that receives the result
    renames it into OUT (``range_driver.publish_attempt``), so an attempt nobody waits for
    changes nothing. Media are cleaned on ``threads`` threads in a supervised child, so an
    input that crashes its decoder becomes a ``worker_crash`` reject as in a local run.
    """
    store = task.store
    duplicates = np.zeros(0, dtype=np.int64)
    if task.spec.handler.finds_duplicates():
        duplicates = load_duplicates(store, task.index)
    attempt, own = start_attempt(store, f"range-{task.index:05d}")
    ctx = task.context(own)
    mode = RangeTaskRun(ctx, task.index, leaf(rejects_name(task.index)), duplicates)
    progress = ProgressLine(None, enabled=False)
    if ctx.spec.handler.is_media:
        outcome = run_supervised(ctx, mode, progress)
    else:
        outcome = WriteLoop(ctx, mode, ProcessCleaning(task.threads), progress).execute()
    return RangeResult(index=task.index, totals=outcome.totals, shards=outcome.shards, processed=outcome.processed,
                       bytes_out=outcome.bytes_out, attempt=attempt)


def probe_node(out: str, token: str) -> tuple[str, bool]:
    """Run on a node: (node name, whether it sees the driver's probe); writes the node's own probe file.

    ``out``: OUT's folder, or its store URL (then the probe says the node reaches the store).
    """
    store: OutputStore = ObjectOutputStore(RemoteStore(out)) if is_remote_url(out) else LocalStore(Path(out))
    node = os.uname().nodename + f":{os.getpid()}"
    seen = store.exists(f"{PROBE_DIR}/driver") and store.read_bytes(f"{PROBE_DIR}/driver").decode() == token
    if seen:
        store.write_bytes(probe_name(token, node), token.encode())
    return node, seen
