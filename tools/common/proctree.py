"""Processes for the tools: the memory and CPU of a process tree, and a team of measuring processes.

``TreeSampler`` sums memory over a process and its descendants (Linux /proc) in a
background thread. RSS comes from ``/proc/PID/statm`` (microseconds to read); PSS from ``smaps_rollup``,
which makes the kernel walk the page tables (~6 ms for a process with torch loaded), so
it is read every ``pss_every``-th sample and at every ``take_peaks``. Summed over
processes, RSS counts a page shared by N processes N times; PSS counts it once in all.
The sampler's own CPU time is kept (``own_cpu_s``) so that callers can leave it out.

``ProcessTeam`` starts N spawned processes that load their data once, then times how
long the first k of them take to share one job (k = 1..N), for scaling measurements.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from tools.common.report import ToolError

__all__ = ["ProcessTeam", "TreeSampler", "cpu_seconds_of", "descendants", "pss_of", "rss_of"]

_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
TEAM_TIMEOUT_S = 300.0  # a team process that says nothing for this long has hung


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read()
    except OSError:
        return None  # the process exited between listing and reading: it no longer counts


def descendants(pid: int) -> list[int]:
    """Pids of the live descendants of ``pid`` (each of its threads' ``children`` file, recursively)."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            tids = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tids:
            kids = [int(k) for k in (_read(f"/proc/{parent}/task/{tid}/children") or "").split()]
            found += kids
            todo += kids
    return found


def rss_of(pid: int) -> int | None:
    """Resident set size of ``pid`` in bytes (None once it has exited)."""
    text = _read(f"/proc/{pid}/statm")
    return int(text.split()[1]) * _PAGE_BYTES if text else None


def pss_of(pid: int) -> int | None:
    """Proportional set size of ``pid`` in bytes from smaps_rollup (None: exited, or a kernel before 4.14)."""
    text = _read(f"/proc/{pid}/smaps_rollup")
    for line in (text or "").splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    return None


def cpu_seconds_of(pid: int) -> float | None:
    """User + system CPU seconds of ``pid`` so far (None once it has exited)."""
    text = _read(f"/proc/{pid}/stat")
    if text is None:
        return None
    fields = text.rpartition(")")[2].split()  # the command name may hold spaces and parentheses
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


class TreeSampler:
    """Sums RSS (and, less often, PSS) over this process and its descendants every ``interval_s``.

    ``take_peaks()`` returns the peaks in bytes since its previous call. ``child_cpu_s``:
    the last CPU-seconds reading of every descendant seen, for workers not reaped yet.
    Context manager; the thread is a daemon and stops on exit.
    """

    def __init__(self, interval_s: float = 0.05, pss_every: int = 10) -> None:
        self._interval_s = interval_s
        self._pss_every = pss_every
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._count = 0
        self._peak_rss: int | None = None
        self._peak_pss: int | None = None
        self.child_cpu_s: dict[int, float] = {}
        self.own_cpu_s = 0.0

    def __enter__(self) -> TreeSampler:
        self._thread = threading.Thread(target=self._run, name="tools-tree-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def sample(self, *, with_pss: bool = False) -> None:
        """Take one reading now (RSS, children's CPU; PSS too with ``with_pss``)."""
        began = time.thread_time()
        pids = [os.getpid(), *descendants(os.getpid())]
        rss = sum(filter(None, (rss_of(p) for p in pids)))
        pss_values = [pss_of(p) for p in pids] if with_pss else []
        for pid in pids[1:]:
            if (cpu := cpu_seconds_of(pid)) is not None:
                self.child_cpu_s[pid] = cpu
        with self._lock:
            self._peak_rss = max(self._peak_rss or 0, rss)
            known = [v for v in pss_values if v is not None]
            if known and len(known) == len(pss_values):
                self._peak_pss = max(self._peak_pss or 0, sum(known))
            self.own_cpu_s += time.thread_time() - began

    def take_peaks(self) -> tuple[int | None, int | None]:
        """(peak RSS, peak PSS) in bytes since the last call, after one fresh reading of both."""
        self.sample(with_pss=True)
        with self._lock:
            peaks = (self._peak_rss, self._peak_pss)
            self._peak_rss = self._peak_pss = None
        return peaks

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._count += 1
            self.sample(with_pss=self._count % self._pss_every == 0)


def _team_member(load: Callable[[], Sequence[Any]], work: Callable[[Sequence[Any], int], None], inbox: Any,
                 outbox: Any) -> None:
    """A team process: ``load()`` the items, warm up on one, say ready, then run each (start, step, seed) job."""
    try:
        items = load()
        work(items[:1], 0)
        outbox.put(("ready", ""))
        while (job := inbox.get()) is not None:
            start, step, seed = job
            work(items[start::step], seed)
            outbox.put(("done", ""))
    except Exception as err:  # noqa: BLE001 - reported to the parent, which raises it as a ToolError
        outbox.put(("error", f"{type(err).__name__}: {err}"))


class ProcessTeam:
    """``size`` spawned processes, each holding ``load()``'s items, reused for runs on 1..size of them.

    load, work: picklable (module-level functions or partials of them); ``work(items, seed)``
    does the measured job. Spawned, not forked: a fork of a process that has run torch or
    thread pools can deadlock. Each process loads its own items (no megabytes pickled
    through a pipe); start-up is not timed. Context manager.
    """

    def __init__(self, load: Callable[[], Sequence[Any]], work: Callable[[Sequence[Any], int], None],
                 size: int) -> None:
        self._args = (load, work)
        self._size = size
        self._procs: list[Any] = []
        self._inboxes: list[Any] = []
        self._outbox: Any = None

    def __enter__(self) -> ProcessTeam:
        ctx = mp.get_context("spawn")
        self._outbox = ctx.Queue()
        for _ in range(self._size):
            inbox = ctx.Queue()
            proc = ctx.Process(target=_team_member, args=(*self._args, inbox, self._outbox), daemon=True)
            proc.start()
            self._procs.append(proc)
            self._inboxes.append(inbox)
        try:
            self._collect(self._size)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for inbox in self._inboxes:
            inbox.put(None)
        for proc in self._procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.terminate()
                proc.join()

    def run(self, workers: int, seed: int) -> float:
        """Wall seconds for the first ``workers`` processes to do one job on all items, split evenly."""
        began = time.perf_counter()
        for k in range(workers):
            self._inboxes[k].put((k, workers, seed + k))
        self._collect(workers)
        return max(time.perf_counter() - began, 1e-9)

    def _collect(self, count: int) -> None:
        """Wait for ``count`` answers; ``ToolError`` if a process failed, died or hung."""
        deadline = time.monotonic() + TEAM_TIMEOUT_S
        for _ in range(count):
            while True:
                try:
                    kind, detail = self._outbox.get(timeout=1.0)
                    break
                except queue.Empty:
                    dead = [p.pid for p in self._procs if not p.is_alive()]
                    if dead or time.monotonic() > deadline:
                        what = f"process(es) {dead} exited" if dead else f"no answer in {TEAM_TIMEOUT_S:.0f} s"
                        raise ToolError(f"process scaling run failed: {what}") from None
            if kind == "error":
                raise ToolError(f"process scaling run failed in a worker process: {detail}")
