"""The workers stage in this process: a pool of threads, or the calling thread itself.

Every backend (these and ``loaders.loader.process_workers.ProcessWorkers``) has ``run(jobs, epoch)``:
it builds ``loaders.loader.batch_source.Job``s, pulled lazily from an iterator, into
``loaders.loader.batch_outcome.BatchOutcome``s (in order unless ``in_order=False``), and ``close()``.
They hold no resume state: batches in flight are built again after a resume.

``ThreadWorkers``: batch ``b`` is built by thread ``b % num_workers``; at most
``max_in_flight`` batches are requested ahead; every wait has a timeout and checks that
the thread it waits for is alive. No pickling, no inter-process copies: batches are
collated straight into pinned memory. ``InlineWorkers``: ``num_workers=0``.
"""

from __future__ import annotations

import atexit
import logging
import queue
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from loaders.errors import WorkerLostError
from loaders.loader.batch_outcome import BatchOutcome
from loaders.loader.batch_source import Job
from loaders.loader.messages import describe_batch

__all__ = ["InlineWorkers", "ThreadWorkers"]

logger = logging.getLogger(__name__)

_POLL_S = 0.1  # how often a waiting consumer checks that the worker it waits for is alive
_JOIN_S = 2.0  # how long close() waits for all threads; a thread stuck in user code is left behind

# Pools with running threads. At interpreter exit they are stopped and their threads joined
# before finalisation: torch frees a tensor by releasing and taking the GIL again, and a
# daemon thread doing so while the interpreter finalises is ended inside a C++ destructor
# (libstdc++ aborts the process: "terminate called without an active exception").
# Threads of pools already garbage collected (``__del__`` does not join) are joined too.
_RUNNING: weakref.WeakSet[ThreadWorkers] = weakref.WeakSet()
_THREADS: weakref.WeakSet[threading.Thread] = weakref.WeakSet()


class _ExitGate:
    """Which threads are inside the user's code (init or a batch), and what they may do at interpreter exit.

    ``close()`` lets none enter; ``seal()``, once exit stops waiting for them, keeps any that
    leave later from going on: each then blocks until the process ends, holding what it built.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inside: set[int] = set()
        self._closed = False
        self._sealed = False

    def enter(self) -> bool:
        """False once the interpreter exits: the thread must leave without touching the dataset."""
        with self._lock:
            if self._closed:
                return False
            self._inside.add(threading.get_ident())
            return True

    def leave(self) -> None:
        """Never returns once sealed."""
        with self._lock:
            self._inside.discard(threading.get_ident())
            sealed = self._sealed
        if sealed:
            threading.Event().wait()

    def close(self) -> set[int]:
        """Let no thread in from now on; the idents of those inside."""
        with self._lock:
            self._closed = True
            return set(self._inside)

    def seal(self) -> None:
        with self._lock:
            self._sealed = True


_GATE = _ExitGate()


@atexit.register
def _stop_threads_at_exit() -> None:
    """Join every thread outside the dataset (it only has to leave), then give those still inside it
    ``_JOIN_S`` together: one stuck in a hanging ``__getitem__`` is left behind, sealed."""
    inside = _GATE.close()
    for pool in list(_RUNNING):
        pool.close(wait=False)
    threads = list(_THREADS)
    for thread in threads:
        if thread.ident not in inside:
            thread.join()
    deadline = time.monotonic() + _JOIN_S
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    _GATE.seal()


_Work = Callable[[int, Job], BatchOutcome]  # (worker_id, job) -> outcome
_Inbox = queue.SimpleQueue[tuple[int, Job] | None]


@dataclass
class _Shared:
    """What the threads share with their pool; they hold no reference to the pool itself,
    so an abandoned pool is garbage collected and its ``__del__`` stops them."""

    work: _Work
    init: Callable[[int], None] | None
    outbox: queue.SimpleQueue[tuple[int, int, BatchOutcome]] = field(default_factory=queue.SimpleQueue)
    run_id: int = 0  # jobs and results of older runs are dropped
    holder: dict[tuple[int, int], int] = field(default_factory=dict)  # (run_id, position) -> the thread reading it


def _thread_main(shared: _Shared, worker_id: int, inbox: _Inbox) -> None:
    init_error: Exception | None = None
    if shared.init is not None:
        if not _GATE.enter():
            return
        try:
            shared.init(worker_id)
        except Exception as err:  # noqa: BLE001 - reported with each batch of this worker, not lost in the thread
            init_error = err
        finally:
            _GATE.leave()
    while (item := inbox.get()) is not None:
        run_id, job = item
        if run_id != shared.run_id:
            continue  # the consumer abandoned that run
        shared.holder[(run_id, job.position)] = worker_id
        outcome = BatchOutcome.failed(epoch=job.epoch, position=job.position, worker_id=worker_id,
                                      indices=job.indices, failure=init_error)
        if init_error is None:
            if not _GATE.enter():
                return
            try:
                outcome = shared.work(worker_id, job)
            except Exception as err:  # noqa: BLE001 - a bug in `work`: reported to the consumer
                outcome.failure = err
            finally:
                _GATE.leave()
        shared.outbox.put((run_id, job.position, outcome))


@dataclass(slots=True)
class _Pass:
    """One ``ThreadWorkers.run``: jobs requested and results not yet yielded."""

    run_id: int
    indices: dict[int, Any] = field(default_factory=dict)  # position -> indices, requested
    order: deque[int] = field(default_factory=deque)  # positions requested, not yet yielded
    ready: dict[int, BatchOutcome] = field(default_factory=dict)


class ThreadWorkers:
    """A pool of ``num_workers`` threads building batches with ``work(worker_id, job)``.

    The threads share one inbox: whichever is free takes the next batch, so a batch of
    large images on one thread never leaves the other idle behind the in-flight limit
    (batches still come out in order; per-sample randomness is keyed by sample, not thread).

    ``work`` should not raise (``loaders.loader.batch_outcome.BatchBuilder`` does not); if it does, the
    outcome carries the error. ``init(worker_id)`` runs first on each thread (the user's
    worker_init_fn; ``get_worker_info()`` is None there). Constructing starts nothing:
    threads start on the first ``run`` and serve later runs until ``close()``, the
    context manager or garbage collection. Threads are daemons, so one stuck in a
    hanging ``__getitem__`` cannot block interpreter exit; the others are joined at exit.
    """

    def __init__(self, work: _Work, *, num_workers: int, max_in_flight: int, timeout_s: float = 0.0,
                 in_order: bool = True, init: Callable[[int], None] | None = None) -> None:
        self._shared = _Shared(work, init)
        self.num_workers = num_workers
        self.max_in_flight = max(1, max_in_flight)
        self.timeout_s = timeout_s
        self.in_order = in_order
        self._threads: list[threading.Thread] = []
        self._inbox: _Inbox | None = None
        self._ready = 0  # results received, waiting for their turn (the current run's)

    @property
    def is_running(self) -> bool:
        return bool(self._threads)

    @property
    def handles(self) -> list[threading.Thread]:
        """The worker threads (empty before the first run and after close)."""
        return list(self._threads)

    @property
    def ready_count(self) -> int:
        """Batches built and not yet handed on (an estimate: results of abandoned runs count too)."""
        return self._shared.outbox.qsize() + self._ready

    def _start(self) -> None:
        inbox: _Inbox = queue.SimpleQueue()
        self._inbox = inbox
        for worker_id in range(self.num_workers):
            thread = threading.Thread(target=_thread_main, args=(self._shared, worker_id, inbox),
                                      name=f"loaders-worker-{worker_id}", daemon=True)
            self._threads.append(thread)
            _THREADS.add(thread)
            thread.start()
        _RUNNING.add(self)

    def run(self, jobs: Iterable[Job] | None, epoch: int = 0) -> Generator[BatchOutcome, None, None]:
        """Build ``jobs`` (pulled lazily) and yield their outcomes, in order unless ``in_order=False``.

        Closing the generator (``break``, ``close()``) abandons the run: queued jobs are
        dropped; results still arriving are ignored by later runs.
        """
        if not self._threads:
            self._start()
        self._shared.run_id += 1
        self._shared.holder.clear()
        current = _Pass(self._shared.run_id)
        pending = iter(jobs or ())
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
            current.indices[job.position] = job.indices
            current.order.append(job.position)
            assert self._inbox is not None  # started by run()
            self._inbox.put((current.run_id, job))

    def _next_outcome(self, current: _Pass) -> BatchOutcome:
        head = current.order[0]
        deadline = time.monotonic() + self.timeout_s if self.timeout_s > 0 else None
        while not (head in current.ready if self.in_order else current.ready):
            self._receive(current, head, deadline)
        position = head if self.in_order else next(iter(current.ready))
        current.order.remove(position)
        del current.indices[position]
        self._shared.holder.pop((current.run_id, position), None)
        self._ready = len(current.ready) - 1
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
        what = describe_batch(head, current.indices[head])
        worker_id = self._shared.holder.get((current.run_id, head))
        alive = [t.is_alive() for t in self._threads]
        if worker_id is None and not any(alive):
            raise WorkerLostError(f"every thread worker died (their threads ended) before reading {what}")
        if worker_id is not None and not alive[worker_id]:
            raise WorkerLostError(f"thread worker {worker_id} died (its thread ended) while reading {what}")
        if deadline is not None and time.monotonic() >= deadline:
            stuck = (f"thread worker {worker_id} produced nothing while reading {what}" if worker_id is not None
                     else f"no thread worker got to {what} (each one is busy with an earlier batch)")
            raise WorkerLostError(f"DataLoader timed out after {self.timeout_s:g} seconds: {stuck}; "
                                  "raise 'timeout' if samples are this slow, "
                                  "else look for a hang in the dataset's __getitem__")

    def close(self, *, wait: bool = True) -> None:
        """Stop the threads: each finishes the sample at hand and exits. ``wait``: join them (~2 s at most)."""
        self._shared.run_id += 1
        _RUNNING.discard(self)
        threads, self._threads = self._threads, []
        inbox, self._inbox = self._inbox, None
        if inbox is not None:
            for _ in threads:
                inbox.put(None)  # one stop per thread
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


class InlineWorkers:
    """``num_workers=0``: each batch is built in the consumer's thread when it is asked for."""

    def __init__(self, work: _Work) -> None:
        self._work = work

    def run(self, jobs: Iterable[Job] | None, epoch: int = 0) -> Iterator[BatchOutcome]:
        return (self._work(0, job) for job in jobs or ())

    def close(self, *, wait: bool = True) -> None:
        return None


