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
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any, TypeVar

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
) -> Iterator[R]:
    """Yield ``fn(context, item)`` for every item, in order.

    ``fn`` must be a module-level function; ``context`` is sent to each worker once.
    Worker exceptions propagate to the caller (the pool is shut down).
    """
    if workers <= 1:
        for item in items:
            yield fn(context, item)
        return
    window = max(2, workers * window_per_worker)
    chunks = _chunked(items, chunk_size)
    ctx = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init, initargs=(context, os.getpid())) as pool:
        pending: deque[Future[list[R]]] = deque()
        try:
            for chunk in itertools.islice(chunks, window):
                pending.append(pool.submit(_run_chunk, fn, chunk))
            while pending:
                results = pending.popleft().result()
                nxt = next(chunks, None)
                if nxt is not None:
                    pending.append(pool.submit(_run_chunk, fn, nxt))
                yield from results
        finally:
            for future in pending:
                future.cancel()


def _chunked(items: Iterable[T], size: int) -> Iterator[list[T]]:
    it = iter(items)
    while chunk := list(itertools.islice(it, size)):
        yield chunk
