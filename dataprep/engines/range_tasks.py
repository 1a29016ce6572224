"""A plan's ranges as independent tasks that run on any node (``--engine ray``; the driver is ``range_driver``).

A task reads the saved plan from OUT (a folder every node sees, or a store URL: the plan is
fetched into the task's private folder, ``OutputStore.fetch``), writes one whole range
(its shards are named by the range), and returns its shard list and counts; its rejects
go to a file of its own. Duplicates of table rows and text (first in plan order wins) are
found before writing, without running ranges in sequence, in two passes of tasks
(``dataprep.engines.grouping``): ``range_digests`` cleans a range once (``grouping.clean_once``: the
key is the cleaned value), writes the cleaned records to its spill (``dataprep.engines.spill``,
read back by ``write_range``: nothing is cleaned twice) and its digests split into
``DIGEST_PARTITIONS`` partitions by their first byte;
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

from dataprep.plan.checkpoint import Checkpoint, state_dir
from dataprep.errors import UsageError
from dataprep.formats.manifest import ShardInfo, Totals
from dataprep.engines.progress import ProgressLine, ProgressSink
from dataprep.engines.context import RunContext, RunSpec
from dataprep.engines.run_modes import RangeRun
from dataprep.output.object_store import ObjectOutputStore
from dataprep.inputs.raw_source import stage_units
from dataprep.remote import RemoteNotFoundError, RemoteStore, is_remote_url
from dataprep.plan.run_plan import PLAN_NAME, RunPlan, plan_names
from dataprep.output.store import LocalStore, OutputStore, leaf
from dataprep.engines.grouping import DigestWriter, clean_once, dups_bytes, load_duplicates, partition_duplicates
from dataprep.engines.state_files import (ATTEMPTS_DIR, DIGEST_PARTITIONS, DUPS_DONE, PROBE_DIR, RANGES_DIR,
                                          digests_name, dups_name, rejects_name, spill_name)
from dataprep.engines.spill import SpillFile, SpillWriter
from dataprep.engines.supervisor import run_supervised
from dataprep.engines.write_loop import InlineCleaning, WriteLoop

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
    whole); store: OUT; threads: cleaning threads (media; tables and text are cleaned
    inline) and tokenizing threads, inside the task.
    """

    spec: RunSpec
    store: OutputStore
    index: int
    threads: int = 1

    @property
    def key(self) -> tuple[str, int]:
        """What the task is about (for retries and messages): ("range", index)."""
        return ("range", self.index)

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

    def context(self, store: OutputStore, *, stage: bool = True) -> RunContext:
        """The run as this task writes it: into ``store``, with ``threads`` cleaning workers.

        stage: a remote RAW's files of the task's range are staged on this node first
        (``raw_source.stage_units``); False: the task reads none (its records are spilled).
        """
        plan = self.open_plan()
        start, stop = plan.range_bounds(self.index)
        if stage:
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


def range_digests(task: RangeTask, progress: ProgressSink | None = None) -> PassResult:
    """First pass (``clean_once``) into this attempt's folder: the range's spill, then its digests (count: its
    raw records); a range with digests in OUT has its spill there too. progress: gets the counts (records,
    rejects) as they go (a writer process's slot), else None."""
    ctx = task.context(task.store)
    attempt, own = start_attempt(task.store, f"digests-{task.index:05d}")
    spill_file = spill_name(task.index)
    counted = None if progress is None else (lambda seen, rejected: progress.update(seen, rejected, 0))
    with DigestWriter(own, task.index, leaf_name=True) as digests, SpillWriter(own, leaf(spill_file)) as spill:
        count = clean_once(ctx, task.index, digests, spill, counted)
    return PassResult(count, attempt, (spill_file, digests.name))


@dataclass(frozen=True)
class GroupTask:
    """One partition of the digests of every range, to group in plan order (``group_partition``)."""

    store: OutputStore
    part: int
    num_ranges: int
    scratch: Path | None = None

    @property
    def key(self) -> tuple[str, int]:
        """What the task is about (for retries and messages): ("partition", part)."""
        return ("partition", self.part)


def group_partition(task: GroupTask, progress: ProgressSink | None = None) -> PassResult:
    """Second pass: the duplicates among partition ``part`` of every range's digests (count: how many).

    A large partition goes through an on-disk set in ``task.scratch`` (None: the node's temporary folder);
    progress: nothing is counted while grouping.
    """
    store = task.store
    attempt, own = start_attempt(store, f"grouped-{task.part:02d}")
    per_range = partition_duplicates(store, task.part, task.num_ranges, task.scratch)
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
    spill = None
    if task.spec.handler.finds_duplicates():
        duplicates = load_duplicates(store, task.index)
        if store.exists(spill_name(task.index)):
            spill = SpillFile(store, spill_name(task.index))
    attempt, own = start_attempt(store, f"range-{task.index:05d}")
    ctx = task.context(own, stage=spill is None)
    start = Checkpoint(range=task.index, position=ctx.plan.range_bounds(task.index)[0])
    mode = RangeRun(ctx, start, leaf(rejects_name(task.index)), duplicates)
    progress = ProgressLine(None, enabled=False)
    if ctx.spec.handler.is_media:
        outcome = run_supervised(ctx, mode, progress)
    else:
        outcome = WriteLoop(ctx, mode, InlineCleaning(), progress, spill=spill).execute()
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
