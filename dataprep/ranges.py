"""A plan's ranges as independent tasks, and the driver that runs them on an executor (``--engine ray``).

A task reads the saved plan from OUT (which every node must see), writes one whole range
(its shards are named by the range), and returns its shard list and counts; its rejects
go to a file of its own. The driver records each range completed in the checkpoint
(``ranges_done``) and, once all are done, joins the rejects in range order, so OUT is the
same bytes as a local run's whatever ran which range where, in which order, how often.

Duplicates of table rows and text (first in plan order wins) are found before writing,
without running ranges in sequence, in two passes of tasks: ``range_digests`` cleans a
range (the key is the cleaned value: cleaning is done twice, the price of not storing
cleaned records) and writes its digests split into ``DIGEST_PARTITIONS`` partitions by
their first byte; ``group_partition`` reads one partition of every range in plan order
through an on-disk ``SeenSet`` (bounded memory, on the node's temporary disk) and writes
each range's duplicate ordinals of that partition. A digest lives in one partition only,
so the result does not depend on the number of partitions, and no step is serial over
the whole dataset. ``write_range`` then knows its duplicates. Media duplicates are in the plan.

Files (in ``OUT/.dataprep/ranges/``; removed with the state folder when the run ends)::

    digests-RRRRR-PP.bin  records (int64 ordinal, uint8 length, digest) of range R, partition P
    dups-RRRRR-PP.npy     int64 [D] sorted ordinals of the duplicates of range R in partition P
    grouped-PP.done       partition P is grouped
    dups.done             every range's duplicates are known
    rejects-RRRRR.jsonl   rejects of range R, in plan order
    attempts/KIND-N-TOKEN/ what one attempt at a task wrote, under the last part of each final name
                          (range-RRRRR: shards, sidecars, rejects; digests-RRRRR; grouped-PP)
    probe/                one file per node: OUT is shared (``check_probes``)

An ordinal counts the raw records of a range in plan order, from 0.

Attempts. A task of a driver that was killed may go on running on a worker node while
the restarted driver runs the same task again; a task Ray retries after losing its node
may too. So a task never writes a name another attempt could write: it makes a folder
of its own (``start_attempt``: ``attempts/KIND-N-TOKEN``, TOKEN random, made by the task),
writes there, and returns the folder's name and the final names of its files. Only the
driver publishes (``publish``: rename into place; then the checkpoint or a marker), and
only the attempt whose result it received; a stale attempt's folder is never published,
and a driver removes every attempt folder before its tasks start (``remove_attempts``).
A task whose run is gone, or whose plan is of other options (OUT overwritten), stops.
"""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
import struct
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Protocol, TypeVar

import numpy as np

from dataprep.checkpoint import PARTIAL_REJECTS_NAME, STATE_DIR, Checkpoint, save_checkpoint, state_dir
from dataprep.config import ShardConfig
from dataprep.errors import UsageError
from dataprep.fsutil import fsync_dir
from dataprep.layouts import LayoutHandler, make_handler
from dataprep.manifest import ShardInfo, Totals
from dataprep.parallel import ordered_map
from dataprep.plan import Plan
from dataprep.records import Reject
from dataprep.report import Progress
from dataprep.store import LocalStore, OutputStore

log = logging.getLogger(__name__)

RANGES_DIR = f"{STATE_DIR}/ranges"
ATTEMPTS_DIR = f"{RANGES_DIR}/attempts"
PROBE_DIR = f"{RANGES_DIR}/probe"
DUPS_DONE = f"{RANGES_DIR}/dups.done"
DIGEST_PARTITIONS = 16
_DIGEST_HEAD = struct.Struct("<qB")
# Global position of a record for the duplicate set: range << 40 | ordinal (ranges hold < 2**40 records).
_ORDINAL_BITS = 40

T = TypeVar("T")
R = TypeVar("R")


def digests_name(index: int, part: int) -> str:
    return f"{RANGES_DIR}/digests-{index:05d}-{part:02d}.bin"


def dups_name(index: int, part: int) -> str:
    return f"{RANGES_DIR}/dups-{index:05d}-{part:02d}.npy"


def grouped_name(part: int) -> str:
    return f"{RANGES_DIR}/grouped-{part:02d}.done"


def rejects_name(index: int) -> str:
    return f"{RANGES_DIR}/rejects-{index:05d}.jsonl"


def start_attempt(store: OutputStore, label: str) -> tuple[str, Path]:
    """A new folder for one attempt at a task: (its name relative to OUT, its path), ``attempts/LABEL-TOKEN``.

    Raises ``UsageError`` if the run's state folder is gone (the run that started this
    task ended or was overwritten: the attempt is stale, and creates nothing).
    """
    name = f"{ATTEMPTS_DIR}/{label}-{uuid.uuid4().hex}"
    folder = store.local_path() / name
    try:
        folder.parent.mkdir(exist_ok=True)  # not parents: they exist while the run does
        folder.mkdir()
    except FileNotFoundError as err:
        raise UsageError(f"{label}: {folder.parent.parent} is gone: the run that started this task ended or was "
                         "restarted with --overwrite (this attempt is stale and writes nothing)") from err
    return name, folder


def publish(store: OutputStore, attempt: str, names: Iterable[str], last: str | None = None) -> None:
    """Driver only: rename the files of folder ``attempt`` to their final ``names`` (relative to OUT), durably.

    In the folder each file has the last component of its final name; ``last`` is renamed
    after the others are durable (a marker that says they are all there). The folder is
    removed afterwards.
    """
    out = store.local_path()
    folder = out / attempt

    def move(group: list[str]) -> None:
        for name in group:
            os.replace(folder / PurePosixPath(name).name, out / name)
        for directory in sorted({(out / name).parent for name in group}):
            fsync_dir(directory)

    move(list(names))
    if last is not None:
        move([last])
    shutil.rmtree(folder, ignore_errors=True)


@dataclass(frozen=True)
class RangeTask:
    """One range of a run: what a task needs besides the files in OUT (pickled to the worker).

    threads: cleaning threads (media) or processes (tables, text) inside the task.
    """

    config: ShardConfig
    output_format: str
    index: int
    threads: int = 1

    @property
    def store(self) -> OutputStore:
        return LocalStore(Path(self.config.out))

    def open_plan(self) -> Plan:
        """The saved plan; a clear error if this node cannot see it (OUT not shared)."""
        directory = state_dir(Path(self.config.out))
        if not (directory / "plan.json").exists():
            raise UsageError(f"range {self.index}: the plan {directory}/plan.json is not visible on node "
                             f"{os.uname().nodename}; OUT must be a folder every node sees at the same path")
        plan = Plan(directory)
        expected = json.loads(json.dumps(self.config.fingerprint()))
        if plan.info.fingerprint != expected:  # a stale task of an earlier run, OUT overwritten since
            raise UsageError(f"range {self.index}: the plan in {directory} is of other options than this task's "
                             "(OUT was overwritten by a run of other options); this task is stale and writes nothing")
        return plan


def finds_duplicates(handler: LayoutHandler) -> bool:
    """Whether records of this layout may be duplicates found by content (tables with --dedup-on, text)."""
    return handler.finds_duplicates()


# ----------------------------------------------------------------------------- tasks (any node)


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
    from dataprep.pipeline import clean_item, crash_reject

    plan = task.open_plan()
    handler = make_handler(plan, task.config.image, task.config.table, task.config.text, task.output_format)
    start, stop = plan.range_bounds(task.index)
    items = (item for unit in plan.units(start, stop) for item in handler.records(unit))
    results = ordered_map(clean_item, items, context=handler, workers=task.threads, on_crash=crash_reject)
    ordinal = 0
    attempt, folder = start_attempt(task.store, f"digests-{task.index:05d}")
    names = tuple(digests_name(task.index, p) for p in range(DIGEST_PARTITIONS))
    with ExitStack() as stack:
        own = LocalStore(folder)
        parts = [stack.enter_context(own.writer(PurePosixPath(name).name)) for name in names]
        for result in results:
            if not isinstance(result, Reject):
                digest = handler.dedup_digest(result)
                if digest is not None:
                    parts[digest[0] % DIGEST_PARTITIONS].write(_DIGEST_HEAD.pack(ordinal, len(digest)) + digest)
            ordinal += 1
    return PassResult(ordinal, attempt, names)


@dataclass(frozen=True)
class GroupTask:
    """One partition of the digests of every range, to group in plan order (``group_partition``)."""

    out: str
    part: int
    num_ranges: int


def group_partition(task: GroupTask) -> PassResult:
    """Second pass: the duplicates among partition ``part`` of every range's digests (count: how many)."""
    from dataprep.seen import SeenSet

    store = LocalStore(Path(task.out))
    attempt, folder = start_attempt(store, f"grouped-{task.part:02d}")
    own = LocalStore(folder)
    names: list[str] = []
    found = 0
    with tempfile.TemporaryDirectory(prefix="dataprep-seen-") as scratch, SeenSet.open(Path(scratch) / "seen") as seen:
        for index in range(task.num_ranges):
            dups: list[int] = []
            base = index << _ORDINAL_BITS
            for ordinal, digest in _read_digests(store, digests_name(index, task.part)):
                if seen.first(digest, base + ordinal) is not None:
                    dups.append(ordinal)
            buffer = io.BytesIO()
            np.save(buffer, np.asarray(dups, dtype=np.int64))
            names.append(dups_name(index, task.part))
            own.write_bytes(PurePosixPath(names[-1]).name, buffer.getvalue())
            found += len(dups)
    own.write_bytes(PurePosixPath(grouped_name(task.part)).name, b"1\n")
    return PassResult(found, attempt, tuple(names), grouped_name(task.part))


def write_range(task: RangeTask) -> RangeResult:
    """Write the range whole into a folder of this attempt's own; returns what the driver publishes and records.

    Nothing outside the attempt's folder is written: the driver that receives the result
    renames it into OUT (``publish_attempt``), so an attempt nobody waits for changes nothing.
    """
    from dataprep.pipeline import RangeScope, write_one_range

    plan = task.open_plan()
    handler = make_handler(plan, task.config.image, task.config.table, task.config.text, task.output_format)
    store = task.store
    duplicates = np.zeros(0, dtype=np.int64)
    if finds_duplicates(handler):
        parts = [np.load(io.BytesIO(store.read_bytes(dups_name(task.index, p)))) for p in range(DIGEST_PARTITIONS)]
        duplicates = np.sort(np.concatenate(parts))
    attempt, folder = start_attempt(store, f"range-{task.index:05d}")
    config = replace(task.config, workers=task.threads, out=folder)
    rejects = folder / PurePosixPath(rejects_name(task.index)).name
    outcome = write_one_range(config, plan, task.output_format, RangeScope(task.index, rejects, duplicates))
    with open(rejects, "rb+") as f:
        os.fsync(f.fileno())
    return RangeResult(task.index, outcome.totals, outcome.shards, outcome.processed, outcome.bytes_out, attempt)


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


def publish_attempt(store: OutputStore, result: RangeResult) -> None:
    """Driver only: the attempt's shards and sidecars into OUT, its rejects to ``rejects_name``.

    A driver killed in the middle leaves shards the checkpoint does not name, which the
    resume removes before the range runs again.
    """
    names = [name for shard in result.shards for name in (shard.name, shard.index) if name]
    publish(store, result.attempt, [*names, rejects_name(result.index)])


def remove_attempts(store: OutputStore) -> None:
    """Remove every attempt's folder (of a killed driver's tasks, or a retried one): never published.

    A stale task still writing into its folder then fails to write there; what it may
    create during the removal stays in the state folder, which goes when the run ends.
    """
    attempts = store.local_path() / ATTEMPTS_DIR
    shutil.rmtree(attempts, ignore_errors=True)
    attempts.mkdir(parents=True, exist_ok=True)


def probe_node(out: str, token: str) -> tuple[str, bool]:
    """Run on a node: (node name, whether it sees the driver's probe); writes the node's own probe file."""
    store = LocalStore(Path(out))
    node = os.uname().nodename + f":{os.getpid()}"
    seen = store.exists(f"{PROBE_DIR}/driver") and store.read_bytes(f"{PROBE_DIR}/driver").decode() == token
    if seen:
        store.write_bytes(f"{PROBE_DIR}/node-{token}-{_safe(node)}", token.encode())
    return node, seen


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_.:" else "_" for c in name)


def check_probes(store: OutputStore, token: str, answers: Iterable[tuple[str, str, bool]]) -> None:
    """Fail unless every node (label, name, saw the driver's file) saw OUT and the driver sees its file."""
    hint = ("OUT must be one folder that every node mounts at the same path (NFS, Lustre, ...); "
            "object storage is not supported yet")
    for label, node, seen in answers:
        if not seen:
            raise UsageError(f"node {label} ({node}) cannot see OUT {store.describe()}: the driver's probe file "
                             f"{PROBE_DIR}/driver is missing there; {hint}")
        if not store.exists(f"{PROBE_DIR}/node-{token}-{_safe(node)}"):
            raise UsageError(f"node {label} ({node}) wrote its probe file to OUT {store.describe()} but the driver "
                             f"cannot see it ({PROBE_DIR}/node-{token}-{_safe(node)}); {hint}")


# ----------------------------------------------------------------------------- the driver


class TaskExecutor(Protocol):
    """Runs tasks somewhere (Ray, or this machine) and says where they may run."""

    def map_unordered(self, fn: Callable[[T], R], tasks: list[T]) -> Iterator[R]:
        """``fn(task)`` for every task, as each completes; a task whose worker dies is run again."""
        ...

    def check_shared(self, store: OutputStore) -> None:
        """Fail with a clear message unless every node sees ``store`` (``probe_node``, ``check_probes``)."""
        ...


def run_ranges(config: ShardConfig, plan: Plan, output_format: str, checkpoint: Checkpoint, progress: Progress,
               executor: TaskExecutor) -> tuple[Totals, tuple[ShardInfo, ...], int, int]:
    """Write every range not yet done as a task; (totals, shards, records processed, bytes written) of the run."""
    out = Path(config.out)
    if checkpoint.is_started:
        raise UsageError(f"{out} holds a run started with --engine local (stopped in range {checkpoint.range}); "
                         "resume it with --engine local, or pass --overwrite to start again")
    store = LocalStore(out)
    executor.check_shared(store)
    remove_attempts(store)
    handler = make_handler(plan, config.image, config.table, config.text, output_format)
    num_ranges = plan.num_ranges
    if finds_duplicates(handler) and not store.exists(DUPS_DONE):
        _find_duplicates(config, output_format, num_ranges, store, executor)
    done = set(checkpoint.ranges_done)
    tasks = [RangeTask(config, output_format, r) for r in range(num_ranges) if r not in done]
    processed = bytes_out = 0
    progress.ranges(len(done), num_ranges, checkpoint.totals, force=True)
    for result in executor.map_unordered(write_range, tasks):
        if result.index in checkpoint.ranges_done:  # a range run twice: the first published result stands
            continue
        publish_attempt(store, result)
        checkpoint = _record(checkpoint, result)
        save_checkpoint(out, checkpoint)
        processed += result.processed
        bytes_out += result.bytes_out
        progress.ranges(len(checkpoint.ranges_done), num_ranges, checkpoint.totals)
        log.info("range %d done: %d shards, %d inputs", result.index, len(result.shards), result.totals.inputs_seen)
    progress.ranges(len(checkpoint.ranges_done), num_ranges, checkpoint.totals, force=True)
    progress.close()
    _join_rejects(store, num_ranges, state_dir(out) / PARTIAL_REJECTS_NAME)
    return checkpoint.totals, checkpoint.shards, processed, bytes_out


def _record(checkpoint: Checkpoint, result: RangeResult) -> Checkpoint:
    """The checkpoint with range ``result.index`` completed (idempotent for a range run twice)."""
    if result.index in checkpoint.ranges_done:
        return checkpoint
    a, b = checkpoint.totals, result.totals
    reasons = dict(a.rejected_by_reason)
    for reason, count in b.rejected_by_reason.items():
        reasons[reason] = reasons.get(reason, 0) + count
    totals = Totals(a.inputs_seen + b.inputs_seen, a.samples_kept + b.samples_kept, a.rejected + b.rejected, reasons)
    shards = tuple(sorted((*checkpoint.shards, *result.shards), key=lambda s: s.name))
    return replace(checkpoint, totals=totals, shards=shards, ranges_done=tuple(sorted((*checkpoint.ranges_done, result.index))))


def _find_duplicates(config: ShardConfig, output_format: str, num_ranges: int, store: OutputStore,
                     executor: TaskExecutor) -> None:
    """Both passes of duplicate finding (module docstring), skipping what a killed driver had finished."""
    missing = [RangeTask(config, output_format, r) for r in range(num_ranges)
               if not all(store.exists(digests_name(r, p)) for p in range(DIGEST_PARTITIONS))]
    records = 0
    for result in executor.map_unordered(range_digests, missing):
        publish(store, result.attempt, result.names, result.last)
        records += result.count
    log.info("digests of %d ranges written (%d records); grouping them in plan order", len(missing), records)
    groups = [GroupTask(os.fspath(config.out), p, num_ranges) for p in range(DIGEST_PARTITIONS)
              if not store.exists(grouped_name(p))]
    found = 0
    for result in executor.map_unordered(group_partition, groups):
        publish(store, result.attempt, result.names, result.last)
        found += result.count
    log.info("%d duplicates found in %d partitions", found, len(groups))
    store.write_bytes(DUPS_DONE, b"1\n")


def _read_digests(store: OutputStore, name: str) -> Iterator[tuple[int, bytes]]:
    with store.open_read(name) as f:
        while head := f.read(_DIGEST_HEAD.size):
            ordinal, length = _DIGEST_HEAD.unpack(head)
            yield ordinal, f.read(length)


def _join_rejects(store: OutputStore, num_ranges: int, partial: Path) -> None:
    """The run's rejects file: every range's rejects, in range order."""
    with open(partial, "wb") as dst:
        for index in range(num_ranges):
            with store.open_read(rejects_name(index)) as src:
                shutil.copyfileobj(src, dst, 1 << 20)
        dst.flush()
        os.fsync(dst.fileno())
