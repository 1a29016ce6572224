"""An ordered, bounded parallel map over threads, and running a function in a forked process.

``threaded_ordered_map`` runs on threads (for work that releases the GIL: image
decoding), with no pickling and no copy of results between processes; it returns
results in input order with a bounded number in flight, so memory stays bounded however
long the input is. ``run_forked`` runs one call in a child process and says whether the
child died, which is how a crashing decoder is told apart from the rest of a run. Work
that holds the GIL (table rows, text) runs on processes of their own, one per core: the
writer processes (``writer_pool``), never a pool per writer.
"""

from __future__ import annotations

import ctypes
import itertools
import mmap
import multiprocessing
import os
import pickle
import signal
from collections import deque
from collections.abc import Callable, Generator, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

from dataprep.errors import WorkerCrashError
from dataprep.errors import require_int

T = TypeVar("T")
R = TypeVar("R")

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """Ask Linux to kill this worker when the parent dies (e.g. kill -9).

    Otherwise orphaned workers wait forever on the task pipe, whose write end every
    sibling inherited. Elsewhere this is a no-op.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


@dataclass(frozen=True)
class Forked(Generic[R]):
    """How a ``run_forked`` call ended: a value, an exception, or the child's death.

    exit_status: None unless the child died without an answer; then its exit code
    (negative: killed by that signal, as in ``multiprocessing``).
    """

    value: R | None = None
    error: BaseException | None = None
    exit_status: int | None = None

    @property
    def died(self) -> bool:
        return self.exit_status is not None

    def result(self) -> R:
        """The value; re-raises the child's exception; ``WorkerCrashError`` if it died."""
        if self.died:
            raise WorkerCrashError(f"a forked process died ({describe_exit(self.exit_status)})", [])
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]  # set before done is, by the one writer


def describe_exit(exit_status: int | None) -> str:
    """'killed by signal 11' / 'exit status 3' for a ``multiprocessing`` exit code."""
    if exit_status is not None and exit_status < 0:
        return f"killed by signal {-exit_status}"
    return f"exit status {exit_status}"


def run_forked(fn: Callable[..., R], *args: Any) -> Forked[R]:
    """Run ``fn(*args)`` in a forked child (which dies with this process) and wait for it.

    Nothing is pickled on the way in (fork); the value or exception comes back pickled.
    An exception that cannot be pickled comes back as a ``RuntimeError`` naming it. A
    ``KeyboardInterrupt`` here is passed on to the child, which is given 10 s to stop.
    """
    ctx = multiprocessing.get_context("fork")
    receiver, sender = ctx.Pipe(duplex=False)
    process = ctx.Process(target=_forked_main, args=(fn, args, sender, os.getpid()), daemon=True)
    process.start()
    sender.close()
    try:
        outcome = receiver.recv()
    except EOFError:
        process.join()
        return Forked(exit_status=process.exitcode)  # after join: an int
    except BaseException:
        if process.pid is not None and process.is_alive():
            os.kill(process.pid, signal.SIGINT)
        process.join(10)
        if process.is_alive():
            process.kill()
        raise
    finally:
        receiver.close()
    process.join()
    if isinstance(outcome, _Raised):
        return Forked(error=outcome.error)
    return Forked(value=outcome)


@dataclass(frozen=True)
class _Raised:
    error: BaseException


def _forked_main(fn: Callable[..., Any], args: tuple[Any, ...], sender: Any, parent_pid: int) -> None:
    die_with_parent(parent_pid)
    try:
        outcome: Any = fn(*args)
    except BaseException as err:  # noqa: BLE001 - handed to the parent, which raises it
        outcome = _Raised(err)
    # The outcome is made: a Ctrl-C now would only print a traceback from the middle of the send; the parent,
    # interrupted too, decides what happens to this process.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        sender.send(outcome)
    except (pickle.PicklingError, TypeError, AttributeError) as err:
        what = outcome.error if isinstance(outcome, _Raised) else outcome
        sender.send(_Raised(RuntimeError(f"{type(what).__name__}: {what} (could not be sent from the child: {err})")))
    sender.close()


# ----------------------------------------------------------------------------- threads


class InFlight:
    """Which inputs (by position) threads are working on right now, readable by another process.

    int64 slots (-1: free) in an anonymous shared mapping: made before a fork, it is
    shared by parent and child, so after a child dies the parent can still read which
    inputs were being processed. Position ``p`` uses slot ``p % slots``: at most
    ``slots`` consecutive positions may be in flight at once. ``buffer``: memory to use
    instead (e.g. a ``multiprocessing`` ``RawArray`` handed to a process however it was
    started), ``8 * slots`` bytes.
    """

    def __init__(self, slots: int, buffer: Any = None) -> None:
        require_int("slots", slots, minimum=1, error=ValueError)
        self._map = mmap.mmap(-1, 8 * slots) if buffer is None else buffer
        self._slots = np.frombuffer(self._map, dtype=np.int64, count=slots)
        self._slots[:] = -1

    @property
    def slots(self) -> int:
        return int(self._slots.shape[0])

    def mark(self, position: int) -> None:
        self._slots[position % self.slots] = position

    def clear(self, position: int) -> None:
        self._slots[position % self.slots] = -1

    def reset(self) -> None:
        self._slots[:] = -1

    def positions(self) -> list[int]:
        """The positions marked and not cleared, ascending."""
        return sorted(int(p) for p in self._slots if p >= 0)


def threaded_ordered_map(
    fn: Callable[[Any, T], R],
    items: Iterable[T],
    *,
    context: Any,
    workers: int,
    window: int,
    first_position: int = 0,
    in_flight: InFlight | None = None,
) -> Generator[R, None, None]:
    """Yield ``fn(context, item)`` for every item, in order, computed on ``workers`` threads.

    At most ``window`` items are submitted and not yet yielded. Item ``i`` has position
    ``first_position + i``; with ``in_flight``, a thread marks the position of the item
    it works on until ``fn`` returns. An exception from ``fn`` is raised here, at its
    item's turn; closing the iterator early cancels what has not started. One worker runs
    ``fn`` on the calling thread (no hand-off between threads), marking ``in_flight`` alike.
    """
    if in_flight is not None and in_flight.slots < window:
        raise ValueError(f"in_flight has {in_flight.slots} slots, fewer than the window of {window}")
    task = _Marked(fn, context, in_flight)
    numbered = enumerate(items, first_position)
    if workers <= 1:
        for position, item in numbered:
            yield task(position, item)
        return
    with ThreadPoolExecutor(workers, thread_name_prefix="dataprep-clean") as pool:
        pending: deque[Future[R]] = deque(pool.submit(task,
                                                      *pair) for pair in itertools.islice(numbered, max(1, window)))
        try:
            while pending:
                future = pending.popleft()
                result = future.result()
                nxt = next(numbered, None)
                if nxt is not None:
                    pending.append(pool.submit(task, *nxt))
                yield result
        finally:
            for future in pending:
                future.cancel()


@dataclass(frozen=True)
class _Marked(Generic[T, R]):
    """``fn(context, item)``, the item's position marked in ``in_flight`` (if any) while it runs."""

    fn: Callable[[Any, T], R]
    context: Any
    in_flight: InFlight | None

    def __call__(self, position: int, item: T) -> R:
        if self.in_flight is None:
            return self.fn(self.context, item)
        self.in_flight.mark(position)
        try:
            return self.fn(self.context, item)
        finally:
            self.in_flight.clear(position)
