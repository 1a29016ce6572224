"""The workers stage in worker processes: torch's own, behind the ``run(jobs, epoch)`` of the thread pool.

One inner torch DataLoader (multiprocessing is torch's) whose batch sampler is fed the
jobs lazily, so persistent workers serve every epoch and an infinite sampler is never
listed. What travels into the processes, and why:

- ``GuardedDataset`` (map-style): reads a job's samples with failures set aside, hands
  the job's epoch to the dataset's ``set_epoch`` and re-seeds at each epoch's first
  batch (the epoch travels with each job, so persistent workers see every epoch), and
  notes in shared memory which batch each worker is reading, so a worker that dies is
  reported with the batch it had in hand;
- ``EpochStream`` (iterable): reads the epoch from shared memory when a worker starts
  the stream, for ``set_epoch``;
- ``loaders.loader.batch_outcome.CollateGuard`` and ``loaders.loader.worker_start.WorkerInit``: collation into
  outcomes; thread limits and seeds.

Processes end when the iterator or loader closes, is garbage collected, or the
interpreter exits (``close`` shuts torch's workers down explicitly; an exit hook closes
what is left), also after errors and timeouts.
"""

from __future__ import annotations

import atexit
import multiprocessing
import multiprocessing.connection
import os
import pickle
import re
import time
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch.utils.data

# Bound at import: a user may install loaders.DataLoader as torch.utils.data.DataLoader,
# and the inner loader must stay torch's own (looked up at call time it would recurse).
from torch.utils.data.dataloader import DataLoader as _TorchDataLoader

from loaders.errors import UnsendableBatchError, WorkerError, WorkerLostError
from loaders.loader.batch_outcome import BatchOutcome, CollateGuard
from loaders.loader.batch_source import Job
from loaders.loader.epoch_sync import EpochSync
from loaders.loader.fetch import Fetched, fetch_samples
from loaders.loader.messages import dead_pids, describe_batch, describe_error, is_receive_error, portable_error
from loaders.loader.worker_stop import shut_down, tell_to_stop
from loaders.loader.worker_start import WorkerInit, seed_worker, seeded_for

__all__ = ["RECEIVE_GRACE_S", "EpochStream", "GuardedDataset", "IndexBatch", "ProcessWorkers"]

_LIVE: weakref.WeakSet[ProcessWorkers] = weakref.WeakSet()
# In a forked child (a worker, a test's subprocess): the parent's ProcessWorkers, kept
# alive so that no finaliser there tells the parent's workers (through their shared done
# event) to stop.
_INHERITED: list[ProcessWorkers] = []


def _adopt_inherited() -> None:
    _INHERITED.extend(_LIVE)
    _LIVE.clear()


os.register_at_fork(after_in_child=_adopt_inherited)


@atexit.register
def _close_at_exit() -> None:
    # Runs before multiprocessing's own exit hook (registered earlier, run later): torch's
    # workers get their orderly shutdown rather than being left to the interpreter.
    for workers in list(_LIVE):
        workers.close()


class IndexBatch(list[Any]):
    """A batch of sampler indices sent to a worker process, tagged with its epoch and position."""

    def __init__(self, indices: Sequence[Any], *, epoch: int, position: int) -> None:
        super().__init__(indices)
        self.epoch = epoch
        self.position = position


class _Forwarding:
    """Reads and writes of attributes other than ``_OWN`` go to the wrapped ``dataset``.

    So ``get_worker_info().dataset.x = ...`` in a worker_init_fn still reaches the user's dataset.
    """

    _OWN: frozenset[str] = frozenset()
    wraps_user_dataset = True  # loaders.loader.worker_info.WRAPPER_FLAG: get_worker_info() shows ``dataset``

    def __getattr__(self, name: str) -> Any:
        if name in type(self)._OWN or name.startswith("__"):
            raise AttributeError(name)  # not set yet (while unpickling): never recurse into `dataset`
        return getattr(self.dataset, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in type(self)._OWN:
            object.__setattr__(self, name, value)
        else:
            setattr(self.dataset, name, value)

    def __len__(self) -> int:
        return len(self.dataset)


class GuardedDataset(_Forwarding, torch.utils.data.Dataset[Any]):
    """A map-style dataset as seen inside worker processes: failures caught, epochs and seeds per job.

    ``__getitems__(IndexBatch)`` returns a ``Fetched`` (not a list) that ``CollateGuard``
    turns into a BatchOutcome. in_flight: shared int64 [2 * num_workers], per worker
    (pid, position of the batch it is reading), or None. plan_decode: images as decode plans
    (``decode="device"``).
    """

    _OWN = frozenset({"dataset", "skip_errors", "seed", "rank", "in_flight", "sync_epoch", "plan_decode"})

    def __init__(self, dataset: Any, *, skip_errors: bool, seed: int, rank: int = 0, in_flight: Any = None,
                 sync_epoch: EpochSync | None = None, plan_decode: bool = False) -> None:
        for name, value in (("dataset", dataset), ("skip_errors", skip_errors), ("seed", seed), ("rank", rank),
                            ("in_flight", in_flight), ("sync_epoch", sync_epoch or EpochSync(dataset)),
                            ("plan_decode", plan_decode)):
            object.__setattr__(self, name, value)

    def __getitem__(self, index: Any) -> Any:
        return self.dataset[index]

    def __getitems__(self, batch: IndexBatch) -> Fetched:  # a Fetched, not a list: CollateGuard takes it
        info = torch.utils.data.get_worker_info()
        if info is not None:
            if self.in_flight is not None:
                self.in_flight[2 * info.id], self.in_flight[2 * info.id + 1] = os.getpid(), batch.position
            if seeded_for() != (self.seed, batch.epoch, info.id, self.rank):
                # Persistent workers live across epochs: re-seed at each epoch's first batch.
                seed_worker(self.seed, batch.epoch, info.id, self.rank)
        try:
            self.sync_epoch(batch.epoch)
        except Exception as err:  # noqa: BLE001 - the dataset's set_epoch failed: this batch fails with it
            fetched = Fetched(epoch=batch.epoch, position=batch.position, indices=list(batch), failure=err)
        else:
            fetched = fetch_samples(self.dataset, batch, epoch=batch.epoch, position=batch.position,
                                    skip_errors=self.skip_errors, plan_decode=self.plan_decode)
        if fetched.failure is not None:
            fetched.failure = portable_error(fetched.failure)
        return fetched


class EpochStream(_Forwarding, torch.utils.data.IterableDataset[Any]):
    """An iterable dataset as seen inside worker processes: ``set_epoch(epoch)`` before each stream.

    epoch: a shared int64, written by the loader before each epoch, read by each worker
    (persistent ones too) when it starts the epoch's stream.
    """

    _OWN = frozenset({"dataset", "epoch", "sync_epoch"})

    def __init__(self, dataset: Any, epoch: Any, sync_epoch: EpochSync | None = None) -> None:
        object.__setattr__(self, "dataset", dataset)
        object.__setattr__(self, "epoch", epoch)
        object.__setattr__(self, "sync_epoch", sync_epoch or EpochSync(dataset))

    def __iter__(self) -> Iterator[Any]:
        self.sync_epoch(int(self.epoch.value))
        return iter(self.dataset)


class _Feeder:
    """batch_sampler of the inner torch loader: this epoch's jobs, pulled lazily, remembered until built."""

    def __init__(self) -> None:
        self.jobs: Iterable[Job] = ()
        self.waiting: dict[int, Any] = {}  # position -> indices, handed to the workers, not yet back

    def __iter__(self) -> Iterator[IndexBatch]:
        for job in self.jobs:
            self.waiting[job.position] = job.indices
            yield IndexBatch(job.indices, epoch=job.epoch, position=job.position)


_TORCH_WORKER_ID = re.compile(r"worker process (\d+)")
# How long a batch lost in transit waits for its (dying) worker to be seen exited: only on that failure path,
# and it ends at the exit; generous, since a starved machine can take seconds to finish a process's exit.
RECEIVE_GRACE_S = 30.0


class ProcessWorkers:
    """Torch's worker processes behind the ``run()`` interface of ThreadWorkers.

    dataset: map-style (wrapped in GuardedDataset, fed jobs) or iterable (read as torch
    does, with ``get_worker_info()`` sharding; wrapped in EpochStream). collate: the batch
    collate_fn, run in the workers. stock: torch DataLoader keyword arguments
    (num_workers, pin_memory, timeout, prefetch_factor, persistent_workers,
    multiprocessing_context, generator, pin_memory_device, in_order; batch_size and
    drop_last for iterable datasets). fallback: builds a batch in this process when the
    workers' batch cannot be pickled (for loaders whose user did not ask for workers);
    None: that batch fails. epoch_sync: the loader's (whether it drives the dataset's
    epoch); None: a new one. plan_decode: images read as decode plans (``decode="device"``).
    start_note: added to a pickling error raised while the workers start (a part they receive
    cannot be pickled: torch warns and raises it, as stock).
    Constructing starts nothing.
    """

    def __init__(self, dataset: Any, *, collate: CollateGuard, stock: Mapping[str, Any], init: WorkerInit,
                 skip_errors: bool, fallback: Callable[[int, Job], BatchOutcome] | None = None,
                 epoch_sync: EpochSync | None = None, plan_decode: bool = False,
                 start_note: str | None = None) -> None:
        self._fallback = fallback
        self._start_note = start_note
        self._warned_fallback = False
        self._map_style = not isinstance(dataset, torch.utils.data.IterableDataset)
        self._feeder = _Feeder()
        self._timeout_s = float(stock.get("timeout", 0))
        kwargs = dict(stock)
        num_workers = int(kwargs.get("num_workers", 0))
        context = kwargs.get("multiprocessing_context") or multiprocessing.get_context()
        if isinstance(context, str):
            context = multiprocessing.get_context(context)
        self._in_flight = context.RawArray("q", 2 * num_workers) if num_workers else None
        # The epoch of the pass, written before each one: read where a worker starts (its seeds) and
        # where it starts an iterable's stream. Jobs of map-style datasets carry theirs.
        self._epoch_channel = context.RawValue("q", 0)
        collate = replace(collate, epoch=self._epoch_channel)
        if num_workers == 0:
            kwargs.update(prefetch_factor=None, persistent_workers=False)
        else:
            kwargs["worker_init_fn"] = replace(init, epoch=self._epoch_channel)
        if self._map_style:
            dataset = GuardedDataset(dataset, skip_errors=skip_errors, seed=init.seed, rank=init.rank,
                                     in_flight=self._in_flight, sync_epoch=epoch_sync, plan_decode=plan_decode)
            kwargs.update(batch_sampler=self._feeder, batch_size=1, drop_last=False)
        elif callable(getattr(dataset, "set_epoch", None)):
            # Only then: a wrapper would hide a DataPipe graph from torch's seeding and sharding.
            dataset = EpochStream(dataset, self._epoch_channel, epoch_sync)
        self._loader: _TorchDataLoader[Any] | None = _TorchDataLoader(dataset, collate_fn=collate, **kwargs)
        self._iterator: Any = None
        self._owner_pid = os.getpid()  # a forked child inherits this object, not the processes
        _LIVE.add(self)

    @property
    def copies_dataset(self) -> bool:
        """Whether the dataset is read from copies in worker processes (num_workers > 0)."""
        return self._in_flight is not None

    @property
    def handles(self) -> list[Any]:
        """The worker processes of the current pass (empty before the first and after close)."""
        return list(getattr(self._iterator, "_workers", ()))

    @property
    def ready_count(self) -> int:
        """Batches the workers sent that this process has not taken yet (0 where the queue cannot tell)."""
        queue = getattr(self._iterator, "_data_queue", None)
        try:
            return int(queue.qsize()) if queue is not None else 0
        except (NotImplementedError, OSError):  # macOS queues have no qsize; a closed queue
            return 0

    def run(self, jobs: Iterable[Job] | None, epoch: int) -> Iterator[BatchOutcome]:
        """Yield the outcomes of ``jobs`` (None: an iterable dataset's whole epoch)."""
        if self._loader is None:
            raise WorkerError("process workers were closed; iterate the DataLoader again to restart them")
        self._epoch_channel.value = epoch
        self._feeder.jobs, self._feeder.waiting = (jobs if jobs is not None else ()), {}
        try:
            iterator = iter(self._loader)  # starts the workers (not persistent ones already running)
        except (TypeError, AttributeError, pickle.PicklingError) as err:  # torch's catch around Process.start()
            if self._start_note is not None:
                err.add_note(self._start_note)
            raise
        return self._outcomes(iterator)

    def _outcomes(self, iterator: Any) -> Iterator[BatchOutcome]:
        # An abandoned pass leaves its processes to close(), which the DataLoader calls.
        self._iterator = iterator
        while True:
            try:
                outcome = next(iterator)
            except StopIteration:
                return
            except Exception as err:  # torch re-raised a worker's exception, a timeout or a dead worker
                wrapped = self._wrap(err)
                if wrapped is err:
                    raise
                try:
                    raise wrapped from err
                finally:
                    # A frame holding its own exception is a cycle: it would keep torch's iterator for a
                    # garbage collection, which may run in a worker forked later (and fail there).
                    del wrapped
            indices = self._feeder.waiting.pop(outcome.position, None)
            if isinstance(outcome.failure, UnsendableBatchError) and self._fallback is not None:
                outcome = self._build_here(self._fallback, outcome, indices)
            yield outcome

    def _build_here(self, fallback: Callable[[int, Job], BatchOutcome], outcome: BatchOutcome,
                    indices: Any) -> BatchOutcome:
        """The batch again, built in this process by ``fallback``: its type cannot travel from the workers."""
        if not self._warned_fallback:
            self._warned_fallback = True
            warnings.warn(f"{outcome.failure} -- reading in the main process instead (num_workers was not given); "
                          "pass num_workers=0 to skip the worker processes", stacklevel=4)
        return fallback(0, Job(outcome.epoch, outcome.position, outcome.indices if indices is None else indices))

    def _wrap(self, err: Exception) -> Exception:
        """A dead worker or a timeout: WorkerError naming the batch in flight; else the error itself."""
        waiting = self._feeder.waiting
        text = str(err)
        if "timed out" in text:
            position = min(waiting, default=-1)
            what = describe_batch(position, waiting.get(position, []))
            return WorkerLostError(f"DataLoader timed out after {self._timeout_s:g} seconds: process workers produced "
                                   f"nothing while reading {what}; raise 'timeout' if samples are this slow, else "
                                   "look for a hang in the dataset")
        if (pids := dead_pids(text)) is not None:
            return self._lost(pids, describe_error(err))
        if is_receive_error(err):
            return self._lost_in_transit(err)
        found = _TORCH_WORKER_ID.search(text)
        err.add_note(f"raised in process worker {found.group(1) if found else '?'}")
        return err

    def _lost(self, pids: set[int], cause: str) -> WorkerLostError:
        """WorkerLostError naming the first dead worker of ``pids`` and the batch it was reading."""
        worker, position = self._dead_worker(pids)
        waiting = self._feeder.waiting
        what = describe_batch(position, waiting.get(position, [])) if position in waiting else "a batch"
        return WorkerLostError(f"process worker {worker} failed while reading {what}: {cause}")

    def _lost_in_transit(self, err: Exception) -> WorkerLostError:
        """A batch's shared memory could not be fetched from the worker that sent it: that worker is exiting
        (it closed its end, and torch's liveness check ran before it was gone). Waits up to RECEIVE_GRACE_S
        for a worker's exit, then names it and its batch as torch would have; else names the batch due."""
        dead = self._exiting_workers()
        if dead:
            pids = ", ".join(str(w.pid) for w in dead)
            lost = self._lost({int(w.pid) for w in dead if w.pid is not None},
                              f"RuntimeError: DataLoader worker (pid(s) {pids}) exited unexpectedly")
            lost.add_note(f"a batch it had sent could not be received: {describe_error(err)}")
            return lost
        position = min(self._feeder.waiting, default=-1)
        what = describe_batch(position, self._feeder.waiting.get(position, []))
        return WorkerLostError(f"process workers: a batch could not be received ({describe_error(err)}) and no "
                               f"worker exited within {RECEIVE_GRACE_S:g} s; the batch due was {what}")

    def _exiting_workers(self) -> list[Any]:
        """The worker processes that exit within RECEIVE_GRACE_S (at once if some already have). A closed
        sentinel says a process is gone: it may not be reapable yet (its exitcode still None) for a moment."""
        by_sentinel = {w.sentinel: w for w in self.handles}
        deadline = time.monotonic() + RECEIVE_GRACE_S
        ready: list[Any] = []
        while by_sentinel and not ready and (remaining := deadline - time.monotonic()) > 0:
            try:
                ready = multiprocessing.connection.wait(list(by_sentinel), timeout=remaining)
            except RuntimeError as death:  # torch's SIGCHLD handler may report an exit inside this wait
                if dead_pids(str(death)) is None:
                    raise
        return [by_sentinel[sentinel] for sentinel in ready]

    def _dead_worker(self, pids: set[int]) -> tuple[str, int]:
        """(worker id, position it was reading) of the first worker whose pid is in ``pids``."""
        slots = self._in_flight
        if slots is not None:
            for worker_id in range(len(slots) // 2):
                if slots[2 * worker_id] in pids:
                    return str(worker_id), int(slots[2 * worker_id + 1])
        return "?", min(self._feeder.waiting, default=-1)

    def close(self, *, wait: bool = True) -> None:
        """Stop torch's worker processes (persistent ones included) and drop the inner loader.

        wait: shut them down in order and join them (torch's shutdown). Without it (from a
        finaliser, where a join could stall whatever the garbage collector interrupted)
        they are only told to stop, and exit on their own.
        """
        _LIVE.discard(self)
        loader, self._loader = self._loader, None
        iterator, self._iterator = self._iterator, None
        if os.getpid() != self._owner_pid:  # a copy in a forked child: the workers are the parent's
            _INHERITED.append(self)
            self._loader, self._iterator = loader, iterator
            return
        for it in (iterator, getattr(loader, "_iterator", None)):
            shut_down(it) if wait else tell_to_stop(it)

    def __del__(self) -> None:
        if hasattr(self, "_loader"):
            self.close(wait=False)
