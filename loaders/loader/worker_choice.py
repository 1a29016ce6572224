"""The worker-type rule: who builds batches (threads, processes or the main process), decided once per loader.

``choose_workers(WorkerInputs) -> WorkerChoice`` is pure. ``start_method`` and
``unsendable_part`` are its shell: multiprocessing's start method as a loader's processes
would use it (read without fixing it), and whether the parts a worker process receives
can be pickled, as spawn and forkserver pickle them.

``worker_type="auto"`` (measured: tools/RESULTS.md §5 and §8):

- an IterableDataset, or a ``multiprocessing_context`` given: processes (an iterable shards
  itself with ``get_worker_info()`` in worker processes; a context names processes);
- threads when the dataset declares ``light_items = True``: an item costs less than pickling
  it out of a worker process (``TokenDataset``, ``Mixture``: a memory-map slice and a few
  small numpy operations), so threads win at any worker count though the GIL serialises them;
- threads when the dataset declares that its per-sample work releases the GIL
  (``releases_gil = True``: ``ShardDataset`` / ``ParquetShardDataset`` with no transform or
  with this package's decode transforms; a user's own transform is not known to, unless it
  declares ``releases_gil = True`` itself) and ``num_workers <= MAX_THREAD_WORKERS``;
- processes otherwise.

Why 4: thread workers scale perfectly up to 4 on both machines measured; past that the GIL
stops them (16 threads on a 16-core H200 host: 54% scaling efficiency, and a ResNet-50
training loop fed by them ran at 2,082 img/s against 4,663 with 16 processes, because the
loop itself waits for the GIL). On 2 cores, 2 threads beat 2 processes by ~5-10%.

A start method that pickles what it sends (spawn; forkserver, Python 3.14's Linux default)
cannot send a dataset, collate_fn or worker_init_fn that pickle cannot find (a class or
function defined inside a function). Then, when processes would be used:

- if the user asked for processes (``worker_type="process"``, a ``multiprocessing_context``,
  or ``num_workers`` given for an iterable dataset or one that does not release the GIL):
  processes, and the loader fails where and as stock does: the first ``iter(loader)`` starts
  the workers, torch warns ("Got pickle error when attempting to start a worker Process. ...")
  and raises pickle's own error (AttributeError or PicklingError), to which
  ``WorkerChoice.start_note`` (``pickling_note``) is added: the part, its class, the start
  method and the fix;
- else threads (map-style datasets) or the main process (iterable ones), with one warning
  saying why and how to get processes.
"""

from __future__ import annotations

import enum
import io
import multiprocessing
import pickle
from collections.abc import Iterable
from dataclasses import dataclass
from multiprocessing import context as mp_context
from multiprocessing.reduction import ForkingPickler
from typing import Any, cast

import numpy as np
import torch

from loaders.errors import ConfigError

__all__ = ["MAX_THREAD_WORKERS", "PICKLING_START_METHODS", "Unsendable", "WorkerChoice", "WorkerInputs", "WorkerType",
           "choose_workers", "pickling_note", "start_method", "unsendable_part"]

MAX_THREAD_WORKERS = 4  # "auto" picks threads up to this many workers (see the module docstring)
PICKLING_START_METHODS = frozenset({"spawn", "forkserver"})  # they pickle the worker's arguments


class WorkerType(enum.StrEnum):
    """Who builds batches: ``auto`` chooses by the rule of ``loaders.loader.worker_choice``."""

    AUTO = "auto"
    THREAD = "thread"
    PROCESS = "process"


@dataclass(frozen=True)
class Unsendable:
    """A part a worker process would receive that cannot be pickled: what it is, its class, the error."""

    part: str
    type_name: str
    error: Exception

    def __str__(self) -> str:
        return f"{self.part} {self.type_name} cannot be pickled ({type(self.error).__name__}: {self.error})"


@dataclass(frozen=True, kw_only=True)
class WorkerInputs:
    """What the rule reads. unsendable: a part a worker process receives that cannot be pickled
    under ``start_method`` (None: every part can, or it was not checked since it did not matter)."""

    requested: WorkerType
    iterable: bool
    releases_gil: bool
    light_items: bool = False
    num_workers: int
    workers_given: bool
    has_mp_context: bool
    start_method: str
    unsendable: Unsendable | None = None


@dataclass(frozen=True)
class WorkerChoice:
    """The rule's answer: the worker type, the worker count, the warning to give (None: none), and the note
    to add to the error of starting worker processes that cannot receive a part (None: none expected)."""

    worker_type: WorkerType
    num_workers: int
    warning: str | None = None
    start_note: str | None = None


def pickling_note(unsendable: Unsendable, method: str, *, iterable: bool) -> str:
    """What to tell a user whose worker processes cannot be started: which part, why, and the fix."""
    threads = "" if iterable else ", or worker_type='thread'"
    return (f"loaders: worker processes cannot be started: the {unsendable}, and the {method!r} start method "
            f"pickles what each worker receives; define it at module level so that pickle can find it, or use "
            f"multiprocessing_context='fork'{threads}")


def choose_workers(given: WorkerInputs) -> WorkerChoice:
    """The workers for ``given`` (see the module docstring); ConfigError for combinations that cannot work."""
    _check_combination(given)
    kind = _preferred(given)
    needs_pickling = given.start_method in PICKLING_START_METHODS
    if kind is not WorkerType.PROCESS or given.num_workers == 0 or not needs_pickling or given.unsendable is None:
        return WorkerChoice(kind, given.num_workers)
    why = f"the {given.unsendable}, and the {given.start_method!r} start method pickles what each worker receives"
    asked = (given.requested is WorkerType.PROCESS or given.has_mp_context
             or (given.workers_given and (given.iterable or not (given.releases_gil or given.light_items))))
    if asked:  # as stock: the first iter() fails to start them (torch's warning, pickle's error), with our note
        note = pickling_note(given.unsendable, given.start_method, iterable=given.iterable)
        return WorkerChoice(WorkerType.PROCESS, given.num_workers, start_note=note)
    how = ("for worker processes, define it at module level so that pickle can find it, or pass "
           "multiprocessing_context='fork'")
    if given.iterable:
        return WorkerChoice(WorkerType.PROCESS, 0, f"{why}: reading in the main process instead; {how}")
    return WorkerChoice(WorkerType.THREAD, given.num_workers,
                        f"{why}: reading with {given.num_workers} thread workers instead; {how}; pass "
                        "worker_type='thread' to choose threads without this warning")


def _preferred(given: WorkerInputs) -> WorkerType:
    """The worker type before sendability is considered."""
    if given.requested is not WorkerType.AUTO:
        return given.requested
    if given.iterable or given.has_mp_context:
        return WorkerType.PROCESS
    if given.light_items or (given.releases_gil and given.num_workers <= MAX_THREAD_WORKERS):
        return WorkerType.THREAD
    return WorkerType.PROCESS


def _check_combination(given: WorkerInputs) -> None:
    if given.requested is WorkerType.THREAD and given.iterable:
        raise ConfigError("worker_type='thread' needs a map-style dataset: an IterableDataset shards itself "
                          "with get_worker_info() in worker processes; use worker_type='process' or 'auto'")
    if given.requested is WorkerType.THREAD and given.has_mp_context:
        raise ConfigError("'multiprocessing_context' applies to worker processes, not worker_type='thread'")


# ---------------------------------------------------------------------------------------
# The shell: the start method, and whether the parts can be pickled.


def start_method(context: Any) -> str:
    """The start method worker processes would use: ``context``'s (a context or its name), else the
    default one, read without fixing it (``multiprocessing.get_start_method()`` would fix it)."""
    if isinstance(context, str):
        return context
    if context is not None:
        return str(context.get_start_method())
    return multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0]


def unsendable_part(parts: Iterable[tuple[str, Any]]) -> Unsendable | None:
    """The first of ``(name, obj)`` that a spawned process cannot receive, else None.

    Pickled as spawn pickles it (multiprocessing's pickler, inside a spawning context, so
    that locks, shared values and pipes made for it count as sendable), into a sink that
    keeps nothing; tensors and arrays always pickle and are not walked (nor moved to shared
    memory, as sending them would).
    """
    for name, obj in parts:
        if obj is None:
            continue
        try:
            _probe(obj)
        except Exception as err:  # noqa: BLE001 - whatever pickling raises is the answer
            return Unsendable(name, type(obj).__qualname__, err)
    return None


class _Sink(io.RawIOBase):
    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        return len(memoryview(data))


class _Placeholder:
    """Stands for what needs no walking: a tensor, an array, a descriptor handed to the child."""

    def __init__(self, *_: object) -> None:
        pass

    def detach(self) -> int:
        return -1


class _SpawningProbe:
    """What ``multiprocessing.context.get_spawning_popen()`` returns while probing: descriptors
    would be duplicated into the child (spawn's ``duplicate_for_child``); here they are not."""

    DupFd = _Placeholder

    @staticmethod
    def duplicate_for_child(fd: int) -> int:
        return fd


_STORAGES = (torch.Tensor, torch.UntypedStorage, torch.TypedStorage)  # their reductions would share memory


class _ProbePickler(ForkingPickler):
    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, _STORAGES) or (isinstance(obj, np.ndarray) and obj.dtype != object):
            return _Placeholder, ()
        return NotImplemented


def _probe(obj: Any) -> None:
    previous = mp_context.get_spawning_popen()
    mp_context.set_spawning_popen(cast(Any, _SpawningProbe()))  # duck-typed: the two methods pickling calls
    try:
        _ProbePickler(_Sink(), pickle.HIGHEST_PROTOCOL).dump(obj)
    finally:
        mp_context.set_spawning_popen(previous)
