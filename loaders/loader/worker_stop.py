"""Stopping torch's worker processes of one iterator: at once without waiting (a failed pass, a
finaliser) or in order, joined (torch's own shutdown)."""

from __future__ import annotations

import multiprocessing.connection
import threading
import time
from collections.abc import Sequence
from typing import Any

from torch.utils.data._utils import signal_handling as _signal_handling

__all__ = ["STOP_GRACE_S", "shut_down", "tell_to_stop", "terminate_stragglers"]

STOP_GRACE_S = 5.0  # how long workers told to stop may take to leave before they are terminated (torch's join)


def tell_to_stop(iterator: Any) -> None:
    """End a torch iterator's workers without waiting for them (a failed pass, a finaliser).

    Torch's own shutdown joins each worker for up to 5 s, which can stall a garbage
    collection. Here each worker gets torch's final signal (``None`` on its index queue,
    after ``done_event``) and leaves on its own, with exit code 0 as under torch's
    shutdown; a thread terminates any still running after ``STOP_GRACE_S``
    (what torch's shutdown does to a worker that does not leave in time). The iterator
    is marked shut down: a worker terminated inside ``done_event.is_set()`` leaves the
    event's lock held, so torch's finaliser setting it again would hang the process.

    That thread is not a daemon: interpreter exit waits for it (``STOP_GRACE_S`` at most,
    only when a worker ignores the stop). It drops the iterator's last reference, and
    torch frees a tensor by releasing and taking the GIL again: a daemon thread doing so
    while the interpreter finalises is ended inside a C++ destructor and the process
    aborts ("terminate called without an active exception", exit code -6).
    """
    done = getattr(iterator, "_workers_done_event", None)
    if done is None or getattr(iterator, "_shutdown", True):
        return
    iterator._shutdown = True
    pin_done = getattr(iterator, "_pin_memory_thread_done_event", None)
    if pin_done is not None:
        pin_done.set()  # a daemon thread: it leaves at its next check
    done.set()
    if getattr(iterator, "_worker_pids_set", False):  # before any SIGTERM, which torch's SIGCHLD
        _signal_handling._remove_worker_pids(id(iterator))  # handler would raise in this thread
        iterator._worker_pids_set = False
    for queue in getattr(iterator, "_index_queues", ()):
        queue.put(None)  # torch's final signal: the worker's loop ends and the process exits 0
        queue.cancel_join_thread()  # a full pipe to a dead worker must not block this process's exit
        queue.close()
    workers = [w for w in getattr(iterator, "_workers", ()) if w.exitcode is None]
    if workers:
        try:
            # The thread holds the iterator: a worker still starting (spawn, forkserver) unpickles its
            # events and queues, whose semaphores must outlive its start.
            threading.Thread(target=terminate_stragglers, args=(workers,), kwargs={"keep": iterator},
                             name="shardfeed-worker-reaper", daemon=False).start()
        except RuntimeError:  # interpreter shutdown: no new threads; multiprocessing ends daemonic workers
            terminate_stragglers(workers, grace_s=0.0)


def terminate_stragglers(workers: Sequence[Any], grace_s: float = STOP_GRACE_S, keep: object = None) -> None:
    """Terminate the worker processes that have not exited within ``grace_s`` seconds.

    Only their sentinels are watched: nothing here reaps a process, so a user joining the
    same workers meanwhile still reads their exit codes. ``keep``: held until then.
    """
    by_sentinel = {w.sentinel: w for w in workers}
    deadline = time.monotonic() + grace_s
    while by_sentinel and (remaining := deadline - time.monotonic()) > 0:
        for sentinel in multiprocessing.connection.wait(list(by_sentinel), timeout=remaining):
            del by_sentinel[sentinel]
    for worker in by_sentinel.values():
        worker.terminate()


def shut_down(iterator: Any) -> None:
    """Stop a torch iterator's worker processes now (torch would at garbage collection)."""
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if callable(shutdown):
        shutdown()
