"""Worker backends: a pool of threads, or torch's worker processes, behind one ``run(jobs)``.

Both build the batches of one epoch from jobs ``(position, indices)`` and yield a
``loaders.collate.BatchOutcome`` per batch (in order unless ``in_order=False``); the
consumer turns failures into errors.

``ThreadWorkers``: batch ``b`` is built by thread ``b % num_workers``; at most
``max_in_flight`` batches are requested ahead; every wait has a timeout and checks that
the thread it waits for is alive. No pickling, no inter-process copies.

``ProcessWorkers``: one inner ``torch.utils.data.DataLoader`` (multiprocessing is torch's),
whose batch sampler is fed each epoch's jobs, so persistent workers serve every epoch.
``GuardedDataset`` and ``CollateGuard`` carry the per-batch logic into the processes,
``loaders.limits.WorkerInit`` the thread limits and seeds.
"""

from __future__ import annotations

import atexit
import logging
import queue
import re
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch.utils.data

from loaders.collate import (
    BatchOutcome,
    CollateGuard,
    Fetched,
    describe_batch,
    describe_error,
    fetch_samples,
    portable_error,
)
from loaders.errors import WorkerError
from loaders.limits import WorkerInit, seed_worker, seeded_for

__all__ = ["GuardedDataset", "IndexBatch", "ProcessWorkers", "ThreadWorkers"]

logger = logging.getLogger(__name__)

_POLL_S = 0.1  # how often a waiting consumer checks that the worker it waits for is alive
_JOIN_S = 2.0  # how long close() waits for all threads; a thread stuck in user code is left behind

# Pools with running threads. At interpreter exit they are stopped before finalisation:
# a daemon thread still inside torch when the interpreter tears down is killed mid-C++
# frame, and libstdc++ aborts the process ("terminate called without an active exception").
# Threads of pools already garbage collected (``__del__`` does not join) are joined too.
_RUNNING: weakref.WeakSet[ThreadWorkers] = weakref.WeakSet()
_THREADS: weakref.WeakSet[threading.Thread] = weakref.WeakSet()


@atexit.register
def _stop_threads_at_exit() -> None:
    for pool in list(_RUNNING):
        pool.close(wait=False)
    deadline = time.monotonic() + _JOIN_S
    for thread in list(_THREADS):
        thread.join(timeout=max(0.0, deadline - time.monotonic()))

Job = tuple[int, list[Any]]  # (batch position in the epoch, sampler indices)
_Work = Callable[[int, int, list[Any]], BatchOutcome]
_Inbox = queue.SimpleQueue[tuple[int, int, list[Any]] | None]


@dataclass
class _Shared:
    """What the threads share with their pool; they hold no reference to the pool itself,
    so an abandoned pool is garbage collected and its ``__del__`` stops them."""

    work: _Work
    init: Callable[[int], None] | None
    outbox: queue.SimpleQueue[tuple[int, int, BatchOutcome]] = field(default_factory=queue.SimpleQueue)
    run_id: int = 0  # jobs and results of older runs are dropped


def _thread_main(shared: _Shared, worker_id: int, inbox: _Inbox) -> None:
    init_error: Exception | None = None
    if shared.init is not None:
        try:
            shared.init(worker_id)
        except Exception as err:  # reported with each batch of this worker, not lost in the thread
            init_error = err
    while (job := inbox.get()) is not None:
        run_id, position, indices = job
        if run_id != shared.run_id:
            continue  # the consumer abandoned that run
        outcome = BatchOutcome(position, None, indices, 0, [], init_error, None, worker_id)
        if init_error is None:
            try:
                outcome = shared.work(worker_id, position, indices)
            except Exception as err:  # a bug in `work`: reported to the consumer
                outcome.failure = err
        shared.outbox.put((run_id, position, outcome))


@dataclass(slots=True)
class _Pass:
    """One ``ThreadWorkers.run``: jobs requested and results not yet yielded."""

    run_id: int
    indices: dict[int, list[Any]] = field(default_factory=dict)  # position -> indices, requested
    order: deque[int] = field(default_factory=deque)  # positions requested, not yet yielded
    ready: dict[int, BatchOutcome] = field(default_factory=dict)


class ThreadWorkers:
    """A pool of ``num_workers`` threads building batches with ``work(worker_id, position, indices)``.

    ``work`` should not raise (``loaders.collate.BatchBuilder`` does not); if it does, the
    outcome carries the error. ``init(worker_id)`` runs first on each thread (the user's
    worker_init_fn; ``get_worker_info()`` is None there). Constructing starts nothing:
    threads start on the first ``run`` and serve later runs until ``close()``, the
    context manager or garbage collection. Threads are daemons, so one stuck in a
    hanging ``__getitem__`` cannot block interpreter exit.
    """

    def __init__(self, work: _Work, *, num_workers: int, max_in_flight: int, timeout_s: float = 0.0,
                 in_order: bool = True, init: Callable[[int], None] | None = None) -> None:
        self._shared = _Shared(work, init)
        self.num_workers = num_workers
        self.max_in_flight = max(1, max_in_flight)
        self.timeout_s = timeout_s
        self.in_order = in_order
        self._threads: list[threading.Thread] = []
        self._inboxes: list[_Inbox] = []

    @property
    def is_running(self) -> bool:
        return bool(self._threads)

    def _start(self) -> None:
        for worker_id in range(self.num_workers):
            inbox: _Inbox = queue.SimpleQueue()
            thread = threading.Thread(target=_thread_main, args=(self._shared, worker_id, inbox),
                                      name=f"loaders-worker-{worker_id}", daemon=True)
            self._inboxes.append(inbox)
            self._threads.append(thread)
            _THREADS.add(thread)
            thread.start()
        _RUNNING.add(self)

    def run(self, jobs: Sequence[Job]) -> Generator[BatchOutcome, None, None]:
        """Build ``jobs`` and yield their outcomes, in order unless ``in_order=False``.

        Closing the generator (``break``, ``close()``) abandons the run: queued jobs are
        dropped; results still arriving are ignored by later runs.
        """
        if not self._threads:
            self._start()
        self._shared.run_id += 1
        current = _Pass(self._shared.run_id)
        pending = iter(jobs)
        try:
            while True:
                self._request(current, pending)
                if not current.order:
                    return
                yield self._next_outcome(current)
        finally:
            if self._shared.run_id == current.run_id:
                self._shared.run_id += 1

    def _request(self, current: _Pass, pending: Iterator[Job]) -> None:
        while len(current.order) < self.max_in_flight:
            job = next(pending, None)
            if job is None:
                return
            position, indices = job
            current.indices[position] = indices
            current.order.append(position)
            self._inboxes[position % self.num_workers].put((current.run_id, position, indices))

    def _next_outcome(self, current: _Pass) -> BatchOutcome:
        head = current.order[0]
        deadline = time.monotonic() + self.timeout_s if self.timeout_s > 0 else None
        while not (head in current.ready if self.in_order else current.ready):
            self._receive(current, head, deadline)
        position = head if self.in_order else next(iter(current.ready))
        current.order.remove(position)
        del current.indices[position]
        return current.ready.pop(position)

    def _receive(self, current: _Pass, head: int, deadline: float | None) -> None:
        """Wait for one result of this run; WorkerError when ``head``'s thread died or timed out."""
        while True:
            wait = _POLL_S if deadline is None else min(_POLL_S, max(0.0, deadline - time.monotonic()))
            try:
                run_id, position, outcome = self._shared.outbox.get(timeout=wait)
            except queue.Empty:
                self._check(current, head, deadline)
                continue
            if run_id == current.run_id:
                current.ready[position] = outcome
                return

    def _check(self, current: _Pass, head: int, deadline: float | None) -> None:
        worker_id = head % self.num_workers
        what = describe_batch(head, current.indices[head])
        if not self._threads[worker_id].is_alive():
            raise WorkerError(f"thread worker {worker_id} died (its thread ended) while reading {what}")
        if deadline is not None and time.monotonic() >= deadline:
            raise WorkerError(f"thread worker {worker_id} produced nothing for {self.timeout_s:.1f} s while "
                              f"reading {what}; raise 'timeout' if samples are this slow, else look for a hang "
                              "in the dataset's __getitem__")

    def close(self, *, wait: bool = True) -> None:
        """Stop the threads: each finishes the sample at hand and exits. ``wait``: join them (~2 s at most)."""
        self._shared.run_id += 1
        _RUNNING.discard(self)
        threads, self._threads = self._threads, []
        inboxes, self._inboxes = self._inboxes, []
        for inbox in inboxes:
            inbox.put(None)
        if not wait:
            return
        deadline = time.monotonic() + _JOIN_S
        for thread in threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        stuck = [t.name for t in threads if t.is_alive()]
        if stuck:
            logger.warning("thread workers %s still busy in the dataset after %.1f s; left behind as daemon threads",
                           ", ".join(stuck), _JOIN_S)

    def __enter__(self) -> ThreadWorkers:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        # No joins: __del__ may run at interpreter exit or on one of the threads.
        if hasattr(self, "_shared"):
            self.close(wait=False)


class IndexBatch(list):  # type: ignore[type-arg]
    """A batch of sampler indices sent to a worker process, tagged with its epoch and position."""

    def __init__(self, indices: Sequence[Any], *, epoch: int, position: int) -> None:
        super().__init__(indices)
        self.epoch = epoch
        self.position = position


class GuardedDataset(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """A map-style dataset as seen inside worker processes: failures caught, seeds per epoch.

    ``__getitems__(IndexBatch)`` returns a ``Fetched`` (not a list) that ``CollateGuard``
    turns into a BatchOutcome. Reads and writes of other attributes go to the wrapped
    dataset, so ``get_worker_info().dataset.x = ...`` in a worker_init_fn still works.
    """

    _OWN = frozenset({"dataset", "skip_errors", "seed"})

    def __init__(self, dataset: Any, *, skip_errors: bool, seed: int) -> None:
        object.__setattr__(self, "dataset", dataset)
        object.__setattr__(self, "skip_errors", skip_errors)
        object.__setattr__(self, "seed", seed)

    def __getattr__(self, name: str) -> Any:
        if name in GuardedDataset._OWN or name.startswith("__"):
            raise AttributeError(name)  # not set yet (while unpickling): never recurse into `dataset`
        return getattr(self.dataset, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in GuardedDataset._OWN:
            object.__setattr__(self, name, value)
        else:
            setattr(self.dataset, name, value)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: Any) -> Any:
        return self.dataset[index]

    def __getitems__(self, batch: IndexBatch) -> Fetched:  # type: ignore[override]
        info = torch.utils.data.get_worker_info()
        if info is not None and seeded_for() != (self.seed, batch.epoch, info.id):
            # Persistent workers live across epochs: re-seed at each epoch's first batch.
            seed_worker(self.seed, batch.epoch, info.id)
        fetched = fetch_samples(self.dataset, batch, position=batch.position, skip_errors=self.skip_errors)
        if fetched.failure is not None:
            fetched.failure = portable_error(fetched.failure)
        return fetched


class _EpochFeeder:
    """batch_sampler of the inner torch loader: the current epoch's jobs."""

    def __init__(self) -> None:
        self.batches: list[IndexBatch] = []

    def __iter__(self) -> Iterator[IndexBatch]:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


_TORCH_WORKER_ID = re.compile(r"worker process (\d+)")


class ProcessWorkers:
    """Torch's worker processes behind the ``run()`` interface of ThreadWorkers.

    dataset: map-style (wrapped in GuardedDataset, fed jobs) or iterable (read as torch
    does, with ``get_worker_info()`` sharding). collate: the batch collate_fn, run in the
    workers. stock: torch DataLoader keyword arguments (num_workers, pin_memory, timeout,
    prefetch_factor, persistent_workers, multiprocessing_context, generator,
    pin_memory_device, in_order; batch_size and drop_last for iterable datasets).
    Constructing starts nothing; closing drops the inner loader and, with it, the processes.
    """

    def __init__(self, dataset: Any, *, collate: CollateGuard, stock: Mapping[str, Any], init: WorkerInit,
                 skip_errors: bool) -> None:
        self._map_style = not isinstance(dataset, torch.utils.data.IterableDataset)
        self._feeder = _EpochFeeder()
        self._init = init
        self._timeout_s = float(stock.get("timeout", 0))
        kwargs = dict(stock)
        if kwargs.get("num_workers", 0) == 0:
            kwargs.update(prefetch_factor=None, persistent_workers=False)
        else:
            kwargs["worker_init_fn"] = init
        if self._map_style:
            dataset = GuardedDataset(dataset, skip_errors=skip_errors, seed=init.seed)
            kwargs.update(batch_sampler=self._feeder, batch_size=1, drop_last=False)
        self._loader: torch.utils.data.DataLoader[Any] | None = torch.utils.data.DataLoader(
            dataset, collate_fn=collate, **kwargs)

    def run(self, jobs: Sequence[Job] | None, epoch: int) -> Generator[BatchOutcome, None, None]:
        """Yield the outcomes of ``jobs`` (None: an iterable dataset's whole epoch)."""
        if self._loader is None:
            raise WorkerError("process workers were closed; iterate the DataLoader again to restart them")
        self._init.epoch = epoch
        self._feeder.batches = [IndexBatch(batch, epoch=epoch, position=pos) for pos, batch in jobs or []]
        waiting = dict(jobs or [])
        iterator = iter(self._loader)
        while True:
            try:
                outcome = next(iterator)
            except StopIteration:
                return
            except Exception as err:  # torch re-raised a worker's exception, a timeout or a dead worker
                raise self._wrap(err, waiting) from err
            waiting.pop(outcome.position, None)
            yield outcome

    def _wrap(self, err: Exception, waiting: dict[int, list[Any]]) -> WorkerError:
        position = min(waiting, default=-1)
        what = describe_batch(position, waiting.get(position, []))
        if "timed out" in str(err):
            return WorkerError(f"process workers produced nothing for {self._timeout_s:.1f} s while reading {what}")
        found = _TORCH_WORKER_ID.search(str(err))
        worker = f"process worker {found.group(1)}" if found else "a process worker"
        return WorkerError(f"{worker} failed while reading {what}: {describe_error(err)}")

    def close(self) -> None:
        """Drop the inner loader: torch shuts its (persistent) worker processes down."""
        self._loader = None
