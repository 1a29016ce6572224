"""The start-up check of the known traps: a loader's settings and its machine in, one warning per trap out.

The traps users file most against torch's DataLoader, each caught where it can be told for sure:

- ``python_objects``: a map-style dataset holding millions of Python objects (a list of paths, a dict
  of labels) read by worker *processes*: every worker ends up with its own copy (fork: each object's
  reference count writes its page, copy-on-write, pytorch/pytorch#13246; spawn, forkserver: pickled
  to each) -- numpy or pyarrow arrays are one object each, whatever their length;
- ``threads``: worker processes x ``threads_per_worker`` intra-op threads above the CPUs this process
  may use (``loaders.read.topology.cpus_available``: affinity and cgroup quota);
- ``open_files``: the soft open-file limit (``RLIMIT_NOFILE``) below the descriptors a process holds
  for the shards (``ShardDataset`` over a local folder keeps one per shard) plus ``OPEN_FILES_RESERVE``;
- ``shm``: ``/dev/shm`` with less free space than the batches process workers keep in flight
  (batch bytes x (workers x prefetch_factor + 2)), told from the first batch's size;
- ``worker_stream``: an ``IterableDataset`` that ignores ``get_worker_info()``, so every worker yields
  the whole stream: told from the first two batches of every worker (all first batches equal, all
  second batches equal, and the second unlike the first, so a constant stream is never blamed).

The core is pure: ``startup_traps(TrapInputs)``, ``shm_trap``, ``stream_trap``. The shell is
``watch_traps``, the one call a pass makes where its workers start: once per loader it warns of the
start-up traps (``TrapWarning``, each naming its fix) and, with process workers, watches the first
batches for the other two, then hands the outcomes on untouched.
"""

from __future__ import annotations

import collections
import enum
import hashlib
import os
import resource
import shutil
import sys
import warnings
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import numpy as np
import torch

from loaders.loader.batch_outcome import BatchOutcome
from loaders.loader.settings import LoaderSettings, WorkerType
from loaders.read.datasets import ShardDataset
from loaders.read.shard_files import LocalShardFiles
from loaders.read.topology import cpus_available

__all__ = ["MANY_PYTHON_OBJECTS", "OPEN_FILES_RESERVE", "SHM_DIR", "Trap", "TrapInputs", "TrapKind",
           "TrapWarning", "batch_digest", "batch_nbytes", "python_objects", "shards_held_open", "shm_free_bytes",
           "shm_trap", "startup_traps", "stream_trap", "watch_traps"]

MANY_PYTHON_OBJECTS = 1_000_000  # objects in one attribute of the dataset from which process workers each copy it
OPEN_FILES_RESERVE = 128  # descriptors a training process holds besides the shards (libraries, CUDA, sockets)
SHM_DIR = "/dev/shm"  # where torch's worker processes put the batches they send (POSIX shared memory)
_DIGEST_BYTES = 1 << 20  # bytes of each array a batch digest reads: enough to tell batches apart
_LOADERS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))


class TrapWarning(UserWarning):
    """A known trap of this loader's setup: the message names what goes wrong and the fix."""


class TrapKind(enum.StrEnum):
    PYTHON_OBJECTS = "python_objects"
    THREADS = "threads"
    OPEN_FILES = "open_files"
    SHM = "shm"
    WORKER_STREAM = "worker_stream"


@dataclass(frozen=True, slots=True)
class Trap:
    """One trap found: its kind and the warning's text (what goes wrong, the numbers, the fix)."""

    kind: TrapKind
    message: str


@dataclass(frozen=True, kw_only=True)
class TrapInputs:
    """What the start-up check reads, as plain values.

    dataset: the dataset's class name. map_style: not an IterableDataset. worker_processes: worker
    processes per rank (0 with thread workers or none). threads_per_worker: intra-op threads in each.
    cpus: CPUs this process may use. objects: (attribute, Python objects it holds) of the dataset's
    large containers (``python_objects``). shards_open: descriptors one process keeps open for the
    shards, None when unknown. open_files_limit / open_files_hard: ``RLIMIT_NOFILE`` (None: unlimited).
    """

    dataset: str
    map_style: bool
    worker_processes: int
    threads_per_worker: int = 1
    cpus: int = 1
    objects: tuple[tuple[str, int], ...] = ()
    shards_open: int | None = None
    open_files_limit: int | None = None
    open_files_hard: int | None = None

    @classmethod
    def of(cls, settings: LoaderSettings) -> TrapInputs:
        """The inputs of a loader's settings, on this machine (its CPUs and open-file limit, now)."""
        processes = settings.num_workers if settings.iterable or settings.worker_type is WorkerType.PROCESS else 0
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        return cls(dataset=type(settings.dataset).__name__, map_style=not settings.iterable,
                   worker_processes=processes, threads_per_worker=settings.threads_per_worker,
                   cpus=cpus_available(), objects=python_objects(settings.dataset) if processes else (),
                   shards_open=shards_held_open(settings.dataset),
                   open_files_limit=None if soft == resource.RLIM_INFINITY else soft,
                   open_files_hard=None if hard == resource.RLIM_INFINITY else hard)


def startup_traps(given: TrapInputs) -> list[Trap]:
    """The traps of ``given`` known before any batch (none for a sound setup)."""
    traps = []
    many = [(name, count) for name, count in given.objects if count >= MANY_PYTHON_OBJECTS]
    if given.map_style and given.worker_processes and many:
        name, count = max(many, key=lambda item: item[1])
        traps.append(Trap(TrapKind.PYTHON_OBJECTS, (
            f"{given.dataset}.{name} holds about {count:,} Python objects, and each of the {given.worker_processes} "
            "worker processes ends up with its own copy of them (fork: every object's reference count dirties its "
            "memory page, copy-on-write, so each worker's memory grows as it reads; spawn/forkserver: pickled to "
            "each), pytorch/pytorch#13246; store them in one array instead: numpy (np.array(paths) is one fixed-width "
            "array; or one bytes buffer with int64 offsets), pyarrow (pa.array(paths)) or a tensor")))
    threads = given.worker_processes * given.threads_per_worker
    if given.threads_per_worker > 1 and threads > given.cpus:
        fit = max(1, given.cpus // max(1, given.worker_processes))
        traps.append(Trap(TrapKind.THREADS, (
            f"{given.worker_processes} worker processes x threads_per_worker={given.threads_per_worker} run {threads} "
            f"intra-op threads on the {given.cpus} CPUs this process may use: they take turns on the cores and "
            f"every worker slows down; pass threads_per_worker={fit} (or fewer workers)")))
    limit = given.open_files_limit
    if given.shards_open and limit is not None and given.shards_open + OPEN_FILES_RESERVE > limit:
        traps.append(Trap(TrapKind.OPEN_FILES, _open_files_message(given, limit)))
    return traps


def _open_files_message(given: TrapInputs, limit: int) -> str:
    need = given.shards_open + OPEN_FILES_RESERVE if given.shards_open else OPEN_FILES_RESERVE
    hard = "unlimited" if given.open_files_hard is None else str(given.open_files_hard)
    raise_to = need if given.open_files_hard is None else min(need, given.open_files_hard)
    where = "each worker process" if given.worker_processes else "the training process"
    return (f"the open-file limit is {limit} (ulimit -n; hard limit {hard}), and {where} keeps one descriptor per "
            f"shard open: {given.shards_open} shards of {given.dataset} + about {OPEN_FILES_RESERVE} for the rest "
            f"need {need}, so reading fails with 'Too many open files' once enough shards are touched; raise it "
            f"(`ulimit -n {raise_to}` before starting, or resource.setrlimit(resource.RLIMIT_NOFILE, ({raise_to}, "
            "hard)) at the top of the script) or write fewer, larger shards (dataprep shard --samples-per-shard N)")


def shm_trap(*, batch_bytes: int, worker_processes: int, prefetch_factor: int, shm_free: int | None,
             map_style: bool = True) -> Trap | None:
    """The ``shm`` trap: ``shm_free`` bytes free in SHM_DIR (None: no such directory) against the batches
    of ``batch_bytes`` that ``worker_processes`` keep in flight (``prefetch_factor`` each, two more held
    by the training loop and the hand-over)."""
    need = batch_bytes * (worker_processes * prefetch_factor + 2)
    if shm_free is None or not worker_processes or need <= shm_free:
        return None
    threads = ", or worker_type='thread' (batches stay in this process)" if map_style else ""
    return Trap(TrapKind.SHM, (
        f"{SHM_DIR} has {_size(shm_free)} free, and the batches that {worker_processes} worker processes keep in "
        f"flight need about {_size(need)} ({_size(batch_bytes)} a batch x ({worker_processes} workers x "
        f"prefetch_factor {prefetch_factor} + 2)): a worker then dies with a bus error ('insufficient shared "
        "memory'); give the container more (docker run --shm-size=8g or --ipc=host; Kubernetes: an emptyDir with "
        f"medium: Memory at {SHM_DIR}), or lower prefetch_factor or num_workers{threads}"))


def stream_trap(dataset: str, digests: Mapping[int, Sequence[bytes]], num_workers: int) -> Trap | None:
    """The ``worker_stream`` trap from each worker's first two batch digests (worker id -> digests).

    Blamed only when at least two workers gave batches, all their first batches are equal, all their
    second ones too (where given) and a second batch differs from the first: a stream that is the
    same everywhere and changes as it goes, i.e. one every worker reads whole.
    """
    firsts = {seen[0] for seen in digests.values() if seen}
    seconds = {seen[1] for seen in digests.values() if len(seen) > 1}
    changes = bool(seconds) and not seconds & firsts
    if len(digests) < 2 or len(firsts) != 1 or len(seconds) != 1 or not changes:
        return None
    return Trap(TrapKind.WORKER_STREAM, (
        f"the {num_workers} worker processes of this loader each yield the same batches of {dataset}: it ignores "
        "torch.utils.data.get_worker_info(), so every worker reads the whole stream and each sample arrives "
        f"{num_workers} times; in {dataset}.__iter__ read only this worker's share (info = get_worker_info(); "
        "skip unless i % info.num_workers == info.id, or give each worker its own files), or pass num_workers=0"))


def python_objects(dataset: Any) -> tuple[tuple[str, int], ...]:
    """(attribute, estimated Python objects) for the list, tuple, dict, set and deque attributes of
    ``dataset`` and of the objects it holds one level down (``Subset.indices``, ``self.index.paths``);
    only lengths are read, and the first element's, so it costs microseconds on any size."""
    found = []
    for name, value in _attributes(dataset):
        if _is_container(value):
            found.append((name, _object_count(value)))
        elif not isinstance(value, (torch.Tensor, np.ndarray, type)) and hasattr(value, "__dict__"):
            found.extend((f"{name}.{inner}", _object_count(held)) for inner, held in _attributes(value)
                         if _is_container(held))
    return tuple(found)


def _attributes(obj: Any) -> list[tuple[str, Any]]:
    held = getattr(obj, "__dict__", None)
    return list(held.items()) if isinstance(held, dict) else []


def _is_container(value: Any) -> bool:
    return isinstance(value, (list, tuple, dict, set, frozenset, collections.deque))


def _object_count(container: Any) -> int:
    """Objects in ``container``: its entries (a dict's keys and values), times those of its first entry."""
    size = len(container)
    if not size:
        return 0
    first = next(iter(container.values() if isinstance(container, dict) else container))
    per_entry = 1 + (len(first) if isinstance(first, (list, tuple, dict)) else 0)
    return size * (per_entry + (1 if isinstance(container, dict) else 0))


def shards_held_open(dataset: Any) -> int | None:
    """Descriptors one process keeps open for ``dataset``'s shards: a ``ShardDataset`` over a local
    folder keeps one per shard it has read (``LocalShardFiles``); None when not known to hold any."""
    inner = getattr(dataset, "dataset", None)  # torch's Subset and similar wrappers
    if not isinstance(dataset, ShardDataset) and isinstance(inner, ShardDataset):
        dataset = inner
    if isinstance(dataset, ShardDataset) and isinstance(dataset.files, LocalShardFiles):
        return len(dataset.shards.shard_names)
    return None


def shm_free_bytes(directory: str | os.PathLike[str] = SHM_DIR) -> int | None:
    """Free bytes of the file system at ``directory`` (None where it does not exist: not Linux)."""
    try:
        return shutil.disk_usage(directory).free
    except OSError:
        return None


def batch_nbytes(batch: Any) -> int:
    """Bytes of the tensors and arrays in ``batch`` (nested dicts, lists, tuples): what travels in shared memory."""
    if isinstance(batch, torch.Tensor):
        return batch.element_size() * batch.nelement()
    if isinstance(batch, np.ndarray):
        return int(batch.nbytes)
    if isinstance(batch, Mapping):
        return sum(batch_nbytes(value) for value in batch.values())
    if isinstance(batch, (list, tuple)):
        return sum(batch_nbytes(value) for value in batch)
    return 0


def batch_digest(batch: Any) -> bytes:
    """A digest of ``batch``'s structure and values (the first ``_DIGEST_BYTES`` of each array, and its
    shape and dtype): equal for equal batches, different, but for a collision, for batches that differ there."""
    digest = hashlib.blake2b(digest_size=16)
    _feed(digest, batch)
    return digest.digest()


def _feed(digest: Any, value: Any) -> None:
    if isinstance(value, torch.Tensor):
        flat = value.detach().cpu().contiguous().reshape(-1)
        digest.update(f"T{value.dtype}{tuple(value.shape)}".encode())
        digest.update(flat.view(torch.uint8)[:_DIGEST_BYTES].numpy().tobytes() if flat.numel() else b"")
    elif isinstance(value, np.ndarray):
        digest.update(f"A{value.dtype}{value.shape}".encode())
        digest.update(np.ascontiguousarray(value).reshape(-1).view(np.uint8)[:_DIGEST_BYTES].tobytes())
    elif isinstance(value, Mapping):
        for key in sorted(value, key=repr):
            digest.update(f"K{key!r}".encode())
            _feed(digest, value[key])
    elif isinstance(value, (list, tuple)):
        digest.update(f"L{len(value)}".encode())
        for item in value:
            _feed(digest, item)
    else:
        digest.update(f"V{value!r}".encode())


@dataclass
class _LoaderTraps:
    """What one loader has been checked for (its first pass's batches are watched once)."""

    started: bool = False
    watched: bool = False
    digests: dict[int, list[bytes]] = field(default_factory=dict)


_CHECKED: weakref.WeakKeyDictionary[Any, _LoaderTraps] = weakref.WeakKeyDictionary()


def watch_traps(settings: LoaderSettings, owner: Any, outcomes: Iterator[BatchOutcome]) -> Iterator[BatchOutcome]:
    """The traps check of a pass whose workers just started: ``outcomes`` again, to be read in their place.

    ``owner``: what is one per loader (its ``WorkerPool``). The first pass of a loader warns of its
    start-up traps; with process workers, the first batches of its first pass are watched for the
    ``shm`` and ``worker_stream`` traps (an outcome's batch is only read, never changed or held).
    """
    state = _CHECKED.setdefault(owner, _LoaderTraps())
    if not state.started:
        state.started = True
        for trap in startup_traps(TrapInputs.of(settings)):
            _warn(trap)
    processes = settings.num_workers if settings.iterable or settings.worker_type is WorkerType.PROCESS else 0
    if state.watched or not processes:
        return outcomes
    state.watched = True
    return _watched(settings, state, processes, outcomes)


def _watched(settings: LoaderSettings, state: _LoaderTraps, processes: int,
             outcomes: Iterator[BatchOutcome]) -> Iterator[BatchOutcome]:
    """Yields ``outcomes``: the first batch sized against the free shared memory, an iterable's first
    two batches of every worker digested until the stream trap is decided (at most 2 x workers batches)."""
    free, sized = shm_free_bytes(), False
    streams = settings.iterable and processes > 1
    for outcome in outcomes:
        if outcome.batch is not None and not sized:
            sized = True
            trap = shm_trap(batch_bytes=batch_nbytes(outcome.batch), worker_processes=processes,
                            prefetch_factor=settings.prefetch_factor or 2, shm_free=free,
                            map_style=not settings.iterable)
            if trap is not None:
                _warn(trap)
        if streams and outcome.batch is not None:
            seen = state.digests.setdefault(outcome.worker_id, [])
            if len(seen) < 2:
                seen.append(batch_digest(outcome.batch))
        yield outcome
        if sized and not (streams and _undecided(state.digests, processes)):
            break
    if streams:  # two batches from every worker, or the end of the stream (a failed pass decides nothing)
        trap = stream_trap(type(settings.dataset).__name__, state.digests, processes)
        state.digests = {}
        if trap is not None:
            _warn(trap)
    yield from outcomes


def _undecided(digests: Mapping[int, Sequence[bytes]], processes: int) -> bool:
    return len(digests) < processes or any(len(seen) < 2 for seen in digests.values())


def _warn(trap: Trap) -> None:
    warnings.warn(trap.message, TrapWarning, stacklevel=_user_stacklevel())


def _user_stacklevel() -> int:
    """The stacklevel of the first frame outside this package and torch (the training loop's line)."""
    frame: FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith((_LOADERS_DIR + os.sep, _TORCH_DIR + os.sep)):
        frame, level = frame.f_back, level + 1
    return level


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**20:,.0f} MiB" if nbytes >= 2**20 else f"{nbytes / 1024:,.1f} KiB"
