"""Writer processes of ``--engine local``: a few processes that each run one job at a time, sent by this process.

Lifecycle (``WriterPool``): the constructor starts nothing; entering starts ``writers``
processes with ``multiprocessing``'s start method (fork, forkserver or spawn: the setup is
pickled once per process, each job and its result once); leaving stops them whatever
happened (a ``None`` job, then SIGTERM, then SIGKILL, each after a timeout; at once on an
error or Ctrl-C). ``run(jobs, events)`` (or ``completed``, which yields each result) hands the
jobs out in order, one running and one queued per writer while there are more jobs than writers
(a writer never waits for this process between two jobs), and waits for them
(``connection.wait``, ``TICK_S`` at most, then ``events.tick``: the progress line) with a
liveness check on every writer: a message goes to ``events.message``, a result to
``events.done`` (or out of ``completed``), an error is raised here (the other writers stopped by leaving the pool); a
writer that dies without a result (its sentinel) is replaced by a fresh process and
``events.died`` says which job to run instead, or raises.

A writer ignores SIGINT (Ctrl-C reaches the whole process group: the parent stops every
writer), is killed by Linux when the parent dies (``parallel.die_with_parent``), and unwinds on
SIGTERM, so that its temporary files go. Its slot (``WriterSlot``: int64 in shared memory,
handed over at its start whatever the start method) holds the counts of its current job,
for the one progress line, and the plan positions it is cleaning (``InFlight``), which the
parent reads after a crash.
"""

from __future__ import annotations

import gc
import logging
import multiprocessing
import os
import pickle
import signal
import sys
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from types import FrameType, TracebackType
from typing import Any, Protocol

import numpy as np

from dataprep.engines.parallel import InFlight, die_with_parent

log = logging.getLogger(__name__)

TICK_S = 0.25  # the longest wait without looking at the writers (and redrawing the progress line)
STOP_TIMEOUT_S = 10.0  # how long a writer has to stop, at each step of stopping it
_COUNTERS = 4  # a slot: [job sequence number, inputs done, rejected, bytes written], then the in-flight positions

Send = Callable[[Any], None]


def peak_rss_kib() -> int | None:
    """This process's peak resident memory so far (``VmHWM``, KiB); None where Linux's /proc is not there.

    Not ``ru_maxrss``: Linux carries it across fork and exec, so a writer would report its parent's peak.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            return next((int(line.split()[1]) for line in f if line.startswith("VmHWM:")), None)
    except (OSError, ValueError):
        return None


class WriterSlot:
    """One writer's shared memory: the counts of its current job and the positions it is cleaning (module docstring).

    array: a ``multiprocessing`` ``RawArray`` of int64, ``_COUNTERS + in_flight_slots`` long.
    """

    def __init__(self, array: Any, in_flight_slots: int) -> None:
        self.array, self.in_flight_slots = array, in_flight_slots
        self._view = np.frombuffer(array, dtype=np.int64, count=_COUNTERS)
        self.in_flight = InFlight(in_flight_slots, memoryview(array).cast("B")[8 * _COUNTERS:])

    @classmethod
    def make(cls, context: Any, in_flight_slots: int) -> WriterSlot:
        return cls(context.RawArray("q", _COUNTERS + in_flight_slots), in_flight_slots)

    def __reduce__(self) -> tuple[Any, ...]:
        return WriterSlot, (self.array, self.in_flight_slots)

    def start_job(self, seq: int) -> None:
        self._view[1:] = 0
        self._view[0] = seq

    def counts(self, seq: int) -> tuple[int, int, int]:
        """(inputs done, rejected, bytes) of job ``seq`` so far; zeros if the writer is not on it (yet)."""
        view = self._view.copy()
        return (int(view[1]), int(view[2]), int(view[3])) if view[0] == seq else (0, 0, 0)


class SlotProgress:
    """``progress.ProgressSink`` of a job in a writer: its counts, into the writer's slot (every ``EVERY`` calls:
    a write loop calls it per record, and three stores into shared memory cost more than the call)."""

    EVERY = 64

    def __init__(self, slot: WriterSlot) -> None:
        self._array = slot.array
        self._calls = 0

    def update(self, done: int, rejected: int, nbytes: int, *, force: bool = False) -> None:
        self._calls += 1
        if force or self._calls % self.EVERY == 0:
            array = self._array
            array[1], array[2], array[3] = done, rejected, nbytes

    def close(self) -> None:
        """Nothing to close."""


@dataclass(frozen=True)
class WriterProgram:
    """What a writer runs: ``open_env(setup, slot)`` once at its start, then ``run_job(env, job, send)`` per job
    (``send``: a message to the parent's ``events.message``). Both module-level functions (spawn pickles them
    by name); ``setup`` pickled once per writer."""

    open_env: Callable[[Any, WriterSlot], Any]
    run_job: Callable[[Any, Any, Send], Any]
    setup: Any


class PoolEvents(Protocol):
    """What the caller of ``WriterPool.run`` does with what the writers say."""

    def message(self, job: Any, payload: Any) -> None: ...

    def done(self, job: Any, result: Any) -> None: ...

    def died(self, job: Any, exit_status: int | None, in_flight: list[int]) -> Any:
        """The job to run instead of ``job``, whose writer died (exit status as ``multiprocessing`` gives it;
        ``in_flight``: the plan positions it was cleaning); raises to stop the run."""
        ...

    def failed(self, job: Any, error: BaseException) -> None:
        """The writer running ``job`` raised ``error`` (raised next, by ``run``): add context to it."""
        ...

    def tick(self, counts: tuple[int, int, int]) -> None:
        """Called at least every ``TICK_S``: the running jobs' counts (inputs done, rejected, bytes) together."""
        ...


@dataclass
class _Writer:
    """A writer process as the parent sees it: its jobs sent and not done, in order (the first is running), and
    their sequence numbers (the slot says which one it counts)."""

    process: Any
    conn: Connection
    slot: WriterSlot
    jobs: deque[Any] = field(default_factory=deque)
    seqs: deque[int] = field(default_factory=deque)


class WriterPool:
    """``writers`` writer processes running ``program`` (module docstring); a context manager."""

    def __init__(self, program: WriterProgram, writers: int, *, in_flight_slots: int = 1) -> None:
        self.program, self.size, self.in_flight_slots = program, writers, in_flight_slots
        self._context = multiprocessing.get_context()
        self._writers: list[_Writer] = []
        self._seq = 0

    def __enter__(self) -> WriterPool:
        # Forked writers inherit this process's objects: kept out of their garbage collector, which would
        # otherwise touch (and so copy) every inherited page at each full collection.
        gc.freeze()
        try:
            for _ in range(self.size):
                self._writers.append(self._start(WriterSlot.make(self._context, self.in_flight_slots)))
        except BaseException:
            self._stop(at_once=True)
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop(at_once=kind is not None)

    def run(self, jobs: list[Any], events: PoolEvents) -> None:
        """Run every job (and those ``events.died`` puts instead) to its result, given to ``events.done``."""
        for job, result in self.completed(jobs, events):
            events.done(job, result)

    def completed(self, jobs: list[Any], events: PoolEvents) -> Iterator[tuple[Any, Any]]:
        """(job, result) of every job (and of those ``events.died`` puts instead), as each completes (module
        docstring); ``events.done`` is not called."""
        pending = deque(jobs)
        while pending or any(w.jobs for w in self._writers):
            self._dispatch(pending)
            busy = [w for w in self._writers if w.jobs]
            ready = set(wait([w.conn for w in busy] + [w.process.sentinel for w in busy], timeout=TICK_S))
            for writer in busy:
                alive, done = self._receive(writer, events, pending) if writer.conn in ready else (True, None)
                if done is not None:
                    yield done
                if not alive or (writer.process.sentinel in ready and not writer.conn.poll()):
                    pending.extendleft(reversed(self._replace(writer, events)))
            events.tick(self._counts())

    def _dispatch(self, pending: deque[Any]) -> None:
        """A job to every idle writer; then a next one queued behind each writer's, while more jobs are left than
        writers (so that a writer never waits for this process between two jobs, and none is left with two at
        the end while another has none)."""
        for writer in self._writers:
            if not writer.jobs and pending:
                self._send(writer, pending.popleft())
        for writer in self._writers:
            if len(writer.jobs) == 1 and len(pending) > len(self._writers):
                self._send(writer, pending.popleft())

    def _send(self, writer: _Writer, job: Any) -> None:
        self._seq += 1
        writer.jobs.append(job)
        writer.seqs.append(self._seq)
        writer.conn.send((self._seq, job))

    def _receive(self, writer: _Writer, events: PoolEvents,
                 pending: deque[Any]) -> tuple[bool, tuple[Any, Any] | None]:
        """Handle one thing ``writer`` sent: (False if it is gone (its end of the pipe closed: it died),
        (job, result) if a job completed)."""
        try:
            kind, payload = writer.conn.recv()
        except (EOFError, OSError, pickle.UnpicklingError):
            return False, None
        if kind == "message":
            events.message(writer.jobs[0], payload)
        elif kind == "done":
            job = writer.jobs.popleft()
            writer.seqs.popleft()
            self._dispatch(pending)  # before the result is recorded (a checkpoint to fsync): no writer waits
            return True, (job, payload)
        else:
            events.failed(writer.jobs[0], payload)
            raise payload
        return True, None

    def _replace(self, writer: _Writer, events: PoolEvents) -> list[Any]:
        """A fresh process in the place of ``writer``, which died: the jobs to run instead of its own (the one it
        was running as ``events.died`` says, then those queued behind it)."""
        writer.process.join(STOP_TIMEOUT_S)
        status, in_flight = writer.process.exitcode, writer.slot.in_flight.positions()
        writer.conn.close()
        writer.slot.in_flight.reset()
        self._writers[self._writers.index(writer)] = self._start(writer.slot)
        if not writer.jobs:
            return []
        return [events.died(writer.jobs[0], status, in_flight), *list(writer.jobs)[1:]]

    def _counts(self) -> tuple[int, int, int]:
        counts = [w.slot.counts(w.seqs[0]) for w in self._writers if w.seqs]
        return (sum(c[0] for c in counts), sum(c[1] for c in counts), sum(c[2] for c in counts))

    def _start(self, slot: WriterSlot) -> _Writer:
        mine, theirs = self._context.Pipe(duplex=True)
        process = self._context.Process(target=_writer_main, args=(self.program, theirs, slot, os.getpid()),
                                        name="dataprep-writer", daemon=True)
        process.start()
        theirs.close()
        return _Writer(process, mine, slot)

    def _stop(self, *, at_once: bool) -> None:
        """Stop every writer: asked to end (unless ``at_once``), then SIGTERM, then SIGKILL, each with a timeout."""
        writers, self._writers = self._writers, []
        if not at_once:
            for writer in writers:
                try:
                    writer.conn.send(None)
                except OSError:
                    pass
            for writer in writers:
                writer.process.join(STOP_TIMEOUT_S)
        for stop in ("terminate", "kill"):
            alive = [w.process for w in writers if w.process.is_alive()]
            for process in alive:
                getattr(process, stop)()
            for process in alive:
                process.join(STOP_TIMEOUT_S)
        for writer in writers:
            writer.conn.close()


def _writer_main(program: WriterProgram, conn: Connection, slot: WriterSlot, parent_pid: int) -> None:
    """A writer process: its setup, then jobs until a ``None`` job or the parent's end (module docstring)."""
    # Dies with the process that started it: the run's own (fork, spawn) or the forkserver, which ends with the run.
    die_with_parent(os.getppid())
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    env = program.open_env(program.setup, slot)
    while True:
        if not conn.poll(TICK_S * 4):
            if not _alive(parent_pid):
                return
            continue
        request = conn.recv()
        if request is None:
            return
        seq, job = request
        slot.start_job(seq)
        try:
            result = program.run_job(env, job, lambda payload: conn.send(("message", payload)))
        except Exception as err:  # noqa: BLE001 - every failure of a job goes to the parent, which raises it
            _send_error(conn, err)
        else:
            conn.send(("done", result))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stop_on_sigterm(signum: int, frame: FrameType | None) -> None:
    sys.exit(128 + signum)


def _send_error(conn: Connection, err: Exception) -> None:
    try:
        conn.send(("error", err))
    except (pickle.PicklingError, TypeError, AttributeError) as unpicklable:
        conn.send(("error", RuntimeError(f"{type(err).__name__}: {err} (could not be sent from the writer process: "
                                         f"{unpicklable})")))
