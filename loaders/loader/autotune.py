"""The online controller of ``DataLoader(autotune=True)``: accounting in, knob changes out (a pure policy).

``Controller.decide(window, knobs, step)`` reads a ``loaders.loader.accounting.StatsWindow`` (the
batches since its last change) and the knobs now, and returns the changes to make (possibly
none). It holds only its own memory of trials; it starts nothing and reads no clock, so the
policy is tested on synthetic windows (``tests/loaders/loader/test_autotune_policy.py``).

The knobs never change what a batch holds or the order of batches: the worker count, the
worker type (threads or processes), the prefetch depth (batches requested ahead per
worker) and the intra-op threads of each worker process. The policy, a hill climb with memory:

- the loop waits more than ``target`` (5%) of its time: the data sets the pace. Reads that wait
  (the dataset's CPU time well under its wall time) in worker processes: threads (cheaper, no
  pickling; only when the type is the loader's to choose). Else more workers, as many as the
  wait says are missing (the step's pace over the data's, x1.25 .. x4 per decision), within
  the CPUs this rank may use (threads over reads that wait: up to ``max_threads``) and the
  memory budget of batches in flight; at that cap, worker processes of CPU-bound work fewer than
  the cores get intra-op threads, the cores divided among them (never workers x threads above the
  cores); then one more batch of prefetch where the workers idle at times; then it says the
  pipeline is saturated. A loop that waits while batches are
  ready and the workers idle: receiving from processes is the cost, threads take over.
- every change is a trial: an increase that did not raise the loop's batches/s by 5% while it
  still waits is undone and its count becomes the cap (of workers, of threads per worker;
  threads whose work holds the GIL then try processes once); a decrease that leaves the loop
  waiting is undone and becomes the floor.
- the loop waits at most ``target``: the step sets the pace; workers busy under half their time
  shrink to what the work needs (least CPU and memory).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from loaders.loader.accounting import StatsWindow

__all__ = ["KNOB_NAMES", "MIN_STEPS", "Controller", "KnobChange", "Knobs", "Limits", "apply", "reads_wait"]

MIN_STEPS = 12  # loop batches a decision reads (after the warm-up of the last change); half, if it waits > 50%
_GAIN = 1.05  # an increase must raise batches/s by this factor to stay
_WAITING_READS = 0.3  # CPU / wall in the dataset under this: its reads wait
KNOB_NAMES = ("worker_type", "num_workers", "prefetch_factor", "threads_per_worker")  # Knobs' fields, type first


@dataclass(frozen=True, slots=True)
class Knobs:
    """The settings the controller moves: worker count, worker type ("thread" | "process"), batches
    requested ahead per worker, intra-op threads in each worker process (``threads_per_worker``)."""

    num_workers: int
    worker_type: str
    prefetch_factor: int
    threads_per_worker: int = 1


@dataclass(frozen=True, slots=True)
class Limits:
    """What the controller may use: ``cpus`` (this rank's share of the CPUs this process may use),
    ``max_threads`` (thread workers over reads that wait), ``max_in_flight`` (batches in flight the
    memory budget allows), ``max_prefetch``, whether it may switch threads and processes, and whether the
    dataset declares that its work releases the GIL (then threads are never moved to processes for it)."""

    cpus: int
    max_threads: int = 64
    max_in_flight: int = 256
    max_prefetch: int = 4
    can_switch_type: bool = False
    releases_gil: bool = False  # the dataset declares it: thread workers never wait for the GIL on it


@dataclass(frozen=True, slots=True)
class KnobChange:
    """One change: ``knob`` from ``old`` to ``new``, because ``why``."""

    knob: str
    old: int | str
    new: int | str
    why: str


@dataclass(frozen=True, slots=True)
class _Trial:
    before: Knobs
    rate: float  # batches/s before the change
    up: bool
    need: float = _GAIN  # kept if batches/s rose at least this factor (while the loop still waits)


class Controller:
    """The policy of the module docstring; ``saturated`` once more workers stopped helping."""

    def __init__(self, limits: Limits, *, target: float = 0.05) -> None:
        self.limits = limits
        self.target = target
        self.saturated = False
        self._trial: _Trial | None = None
        self._caps: dict[str, int] = {}  # worker type -> the count past which more did not help
        self._floor = 1
        self._switched = False  # the worker type was switched once: never again (no flapping)
        self._prefetch_cap = limits.max_prefetch  # lowered when a deeper prefetch did not pay
        self._threads_cap = limits.cpus  # threads per worker process; lowered when more did not pay

    def decide(self, window: StatsWindow, knobs: Knobs) -> list[KnobChange]:
        """The changes to make after ``window`` (batches since the last change) under ``knobs``."""
        early = window.steps >= MIN_STEPS // 2 and window.wait_fraction > 0.5 and self._trial is None
        if window.steps < MIN_STEPS and not early:  # a loop waiting most of its time needs no long look
            return []
        trial, self._trial = self._trial, None
        if trial is not None:
            undo = self._judge(trial, window, knobs)
            if undo is not None:
                return undo
        if window.wait_fraction > self.target:
            return self._faster(window, knobs)
        return self._leaner(window, knobs)

    def _judge(self, trial: _Trial, window: StatsWindow, knobs: Knobs) -> list[KnobChange] | None:
        """Undo a trial that did not pay: an increase without gain, a decrease that leaves the loop waiting."""
        waits = window.wait_fraction > self.target
        if trial.up and waits and window.batches_per_s < trial.rate * trial.need:
            before = trial.before
            if before.worker_type != knobs.worker_type:
                self._switched = True  # the other type did not pay: stay with this one
            elif before.threads_per_worker != knobs.threads_per_worker and before.num_workers == knobs.num_workers:
                self._threads_cap = before.threads_per_worker
            elif before.num_workers == knobs.num_workers:
                self._prefetch_cap, self.saturated = before.prefetch_factor, True
            else:
                self._caps[knobs.worker_type], self.saturated = before.num_workers, True
            why = (f"{_describe(knobs)} gave {window.batches_per_s:.1f} batches/s, no more than "
                   f"{_describe(trial.before)} ({trial.rate:.1f}): the pipeline is saturated")
            return _changes(knobs, trial.before, why)
        if not trial.up and waits:
            self._floor = trial.before.num_workers
            why = f"{_describe(knobs)} left the loop waiting {window.wait_fraction:.0%} of its time"
            return _changes(knobs, trial.before, why)
        return None

    def _faster(self, window: StatsWindow, knobs: Knobs) -> list[KnobChange]:
        limits, wait = self.limits, window.wait_fraction
        waiting_reads = reads_wait(window, knobs)
        if knobs.worker_type == "process" and limits.can_switch_type and not self._switched:
            switch = self._to_threads(window, knobs, waiting_reads)
            if switch:
                return switch
        cap = self._cap(knobs, waiting_reads)
        if knobs.num_workers < cap:
            count = _grown(window, knobs.num_workers, cap, waiting_reads)
            why = f"the loop waits {wait:.0%} of its time for data"
            return self._try(window, knobs, replace(knobs, num_workers=count), why)
        threads = self._more_threads(knobs, waiting_reads)
        if threads is not None:
            why = (f"{knobs.num_workers} worker processes at their cap leave cores of {limits.cpus} idle and the "
                   f"loop waits {wait:.0%}: intra-op threads in each")
            return self._try(window, knobs, replace(knobs, threads_per_worker=threads), why)
        if self._should_try_processes(window, knobs):
            self._switched = True
            new = replace(knobs, worker_type="process", num_workers=min(limits.cpus, max(2, knobs.num_workers)))
            why = (f"{knobs.num_workers} threads keep {window.worker_cores():.1f} cores busy: their work holds "
                   "the GIL")
            return self._try(window, knobs, new, why)
        in_flight = knobs.num_workers * (knobs.prefetch_factor + 1)
        deeper = knobs.prefetch_factor < min(limits.max_prefetch, self._prefetch_cap)
        idle_at_times = window.worker_busy(knobs.num_workers) < 0.9  # else a deeper queue cannot fill faster
        if deeper and idle_at_times and in_flight <= limits.max_in_flight and window.queued == 0:
            why = f"workers at their cap ({knobs.num_workers}) and the loop still waits {wait:.0%}"
            return self._try(window, knobs, replace(knobs, prefetch_factor=knobs.prefetch_factor + 1), why)
        self.saturated = True
        return []

    def _to_threads(self, window: StatsWindow, knobs: Knobs, waiting_reads: bool) -> list[KnobChange]:
        """Processes -> threads where threads do as well for less: reads that wait (as many as they need at
        once), or a loop that waits while batches are ready (receiving them from processes is the cost)."""
        if waiting_reads:
            threads = replace(knobs, worker_type="thread")
            count = _grown(window, knobs.num_workers, self._cap(threads, True), True)
            why = (f"the dataset's reads wait (CPU {window.read_cpu_share:.0%} of their time): threads wait as "
                   "well as processes, at a fraction of the cost")
        elif window.queued > 0 and window.worker_busy(knobs.num_workers) < 0.5:
            count = knobs.num_workers
            why = (f"the loop waits {window.wait_fraction:.0%} of its time while {window.queued} batches are "
                   "ready: receiving them from worker processes costs it; threads hand them over without copies")
        else:
            return []
        self._switched = True
        return self._try(window, knobs, replace(knobs, worker_type="thread", num_workers=max(1, count)), why,
                         need=0.9)

    def _cap(self, knobs: Knobs, waiting_reads: bool) -> int:
        """The most workers of this type: CPUs (threads over waiting reads: max_threads), memory, past trials."""
        limits = self.limits
        cap = limits.cpus
        if waiting_reads:  # a worker that waits holds no core: threads up to max_threads, processes 4 per core
            cap = limits.max_threads if knobs.worker_type == "thread" else min(limits.max_threads, 4 * limits.cpus)
        cap = min(cap, max(1, limits.max_in_flight // max(1, knobs.prefetch_factor)))
        return min(cap, self._caps.get(knobs.worker_type, cap))

    def _more_threads(self, knobs: Knobs, waiting_reads: bool) -> int | None:
        """Intra-op threads per worker process for CPU-bound work with cores to spare (the cores divided among the
        workers, within the cap a past trial found), or None."""
        if knobs.worker_type != "process" or knobs.num_workers < 1 or waiting_reads:
            return None
        threads = min(self._threads_cap, self.limits.cpus // knobs.num_workers)
        return threads if threads > knobs.threads_per_worker else None

    def _should_try_processes(self, window: StatsWindow, knobs: Knobs) -> bool:
        return (knobs.worker_type == "thread" and self.limits.can_switch_type and not self._switched
                and not self.limits.releases_gil
                and self.limits.cpus > 1 and knobs.num_workers >= 2 and window.worker_cores() < 1.3
                and window.read_cpu_share >= _WAITING_READS / 2)

    def _leaner(self, window: StatsWindow, knobs: Knobs) -> list[KnobChange]:
        busy = window.worker_busy(knobs.num_workers)
        if knobs.num_workers <= self._floor or busy >= 0.5 or window.built == 0:
            return []
        count = max(self._floor, math.ceil(knobs.num_workers * busy / 0.75))
        if count >= knobs.num_workers:
            return []
        why = (f"the step sets the pace (the loop waits {window.wait_fraction:.1%}) and the workers are busy "
               f"{busy:.0%} of their time")
        return self._try(window, knobs, replace(knobs, num_workers=count), why)

    def _try(self, window: StatsWindow, knobs: Knobs, new: Knobs, why: str, *, need: float = _GAIN) -> list[KnobChange]:
        if new.worker_type == "process" and new.num_workers > 0:  # never workers x threads above the cores
            fit = max(1, self.limits.cpus // new.num_workers)
            new = replace(new, threads_per_worker=min(new.threads_per_worker, fit))
        up = (new.num_workers > knobs.num_workers or new.prefetch_factor > knobs.prefetch_factor
              or new.threads_per_worker > knobs.threads_per_worker or new.worker_type != knobs.worker_type)
        self._trial = _Trial(knobs, window.batches_per_s, up, need)
        return _changes(knobs, new, why)


def _grown(window: StatsWindow, workers: int, cap: int, waiting_reads: bool) -> int:
    """More workers, as many as the wait says are missing: the step's pace over the data's, with headroom
    (x1.5 where workers only wait and cost little, x1.1 else), at least one more, at most x8 (x4), the cap."""
    pace = (window.wait_s + window.step_s) / max(window.step_s, 1e-6)
    headroom, most = (1.5, 8.0) if waiting_reads else (1.1, 4.0)
    grown = math.ceil(max(1, workers) * min(most, max(1.25, headroom * pace)))
    return min(cap, max(workers + 1, grown))


def reads_wait(window: StatsWindow, knobs: Knobs) -> bool:
    """Whether the dataset's reads wait (its CPU time well under its wall time). Thread workers whose work
    holds the GIL look alike, each running 1/N of the time: their shares add up to about one core."""
    share = window.read_cpu_share
    if window.built == 0 or share >= _WAITING_READS:
        return False
    return knobs.worker_type != "thread" or share * max(1, knobs.num_workers) < 0.7


def _describe(knobs: Knobs) -> str:
    threads = f" x {knobs.threads_per_worker} threads" if knobs.threads_per_worker > 1 else ""
    return f"{knobs.num_workers} {knobs.worker_type} workers{threads} x {knobs.prefetch_factor} prefetch"


def _changes(old: Knobs, new: Knobs, why: str) -> list[KnobChange]:
    """The knob changes from ``old`` to ``new``, worker type first (the count is of that type)."""
    return [KnobChange(name, getattr(old, name), getattr(new, name), why)
            for name in KNOB_NAMES if getattr(old, name) != getattr(new, name)]


def apply(knobs: Knobs, changes: list[KnobChange]) -> Knobs:
    """``knobs`` after ``changes``."""
    values: dict[str, int | str] = {name: getattr(knobs, name) for name in KNOB_NAMES}
    values.update({change.knob: change.new for change in changes})
    return Knobs(int(values["num_workers"]), str(values["worker_type"]), int(values["prefetch_factor"]),
                 int(values["threads_per_worker"]))
