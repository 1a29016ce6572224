"""An ordered, bounded parallel map over worker processes.

Results come back in input order; at most ``window`` chunks are in flight, so memory
stays bounded however long the input is. ``workers == 1`` runs inline (no processes),
which is also what tests and debuggers want.
"""

from __future__ import annotations

import ctypes
import itertools
import multiprocessing
import os
import signal
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, TypeVar

from dataprep.errors import WorkerCrashError

T = TypeVar("T")
R = TypeVar("R")

_context: Any = None


_PR_SET_PDEATHSIG = 1


def _init(context: Any, parent_pid: int) -> None:
    global _context
    _context = context
    _die_with_parent(parent_pid)


def _die_with_parent(parent_pid: int) -> None:
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


def _run_chunk(fn: Callable[[Any, Any], Any], chunk: list[Any]) -> list[Any]:
    return [fn(_context, item) for item in chunk]


def ordered_map(
    fn: Callable[[Any, T], R],
    items: Iterable[T],
    *,
    context: Any,
    workers: int,
    chunk_size: int = 8,
    window_per_worker: int = 4,
    on_crash: Callable[[T, int | None], R] | None = None,
) -> Iterator[R]:
    """Yield ``fn(context, item)`` for every item, in order.

    ``fn`` must be a module-level function; ``context`` is sent to each worker once.
    Worker exceptions propagate to the caller (the pool is shut down). A worker that
    dies (a decoder crash, the OOM killer) breaks the pool: the inputs that were in
    flight are then run again one at a time, each in a process of its own, and an
    input that kills its process yields ``on_crash(item, exit status)``; the rest go
    on in a fresh pool. Without ``on_crash`` a death raises ``WorkerCrashError``.
    """
    if workers <= 1:
        for item in items:
            yield fn(context, item)
        return
    window = max(2, workers * window_per_worker)
    chunks = _chunked(items, chunk_size)
    while True:
        lost = yield from _run_pool(fn, chunks, context, workers, window)
        if not lost:
            return
        if on_crash is None:
            raise WorkerCrashError(f"a worker process died while processing one of {len(lost)} inputs", lost)
        for item in lost:
            yield _run_isolated(fn, context, item, on_crash)


def _run_pool(fn: Callable[[Any, T], R], chunks: Iterator[list[T]], context: Any, workers: int,
              window: int) -> Generator[R, None, list[T]]:
    """Results of ``chunks`` through one pool; returns the items lost if the pool broke."""
    ctx = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init, initargs=(context, os.getpid())) as pool:
        pending: deque[tuple[Future[list[R]], list[T]]] = deque()
        try:
            for chunk in itertools.islice(chunks, window):
                pending.append((pool.submit(_run_chunk, fn, chunk), chunk))
            while pending:
                future, chunk = pending[0]
                try:
                    results = future.result()
                except BrokenProcessPool:
                    return [item for _, lost in pending for item in lost]
                pending.popleft()
                nxt = next(chunks, None)
                if nxt is not None:
                    pending.append((pool.submit(_run_chunk, fn, nxt), nxt))
                yield from results
        finally:
            for future, _ in pending:
                future.cancel()
    return []


def _run_isolated(fn: Callable[[Any, T], R], context: Any, item: T, on_crash: Callable[[T, int | None], R]) -> R:
    """``fn(context, item)`` in a forked process of its own; ``on_crash`` if that process dies."""
    ctx = multiprocessing.get_context("fork")
    receiver, sender = ctx.Pipe(duplex=False)
    process = ctx.Process(target=_isolated_main, args=(fn, context, item, sender, os.getpid()), daemon=True)
    process.start()
    sender.close()
    try:
        outcome = receiver.recv()
    except EOFError:
        process.join()
        return on_crash(item, process.exitcode)
    finally:
        receiver.close()
    process.join()
    if isinstance(outcome, _Raised):
        raise outcome.error
    result: R = outcome
    return result


@dataclass(frozen=True)
class _Raised:
    error: BaseException


def _isolated_main(fn: Callable[[Any, Any], Any], context: Any, item: Any, sender: Any, parent_pid: int) -> None:
    _die_with_parent(parent_pid)
    try:
        outcome: Any = fn(context, item)
    except Exception as err:  # noqa: BLE001 - handed to the parent, which raises it
        outcome = _Raised(err)
    sender.send(outcome)
    sender.close()


def _chunked(items: Iterable[T], size: int) -> Iterator[list[T]]:
    it = iter(items)
    while chunk := list(itertools.islice(it, size)):
        yield chunk
