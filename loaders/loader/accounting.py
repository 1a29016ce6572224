"""Always-on accounting of a loader: the training loop's waits and steps, and each batch's stage times.

The training loop's clock: ``LoaderIterator.__next__`` reads the clock as it is called, and
``end_next`` as it returns (two ``time.perf_counter`` reads around its wait for a batch); the
time from one return to the next call is the loop's step. Where batches are built, each ``BatchOutcome`` brings its
``BatchTiming`` (``outcome``); the device prefetcher reports its host -> device copies and the
device decode (``host_stage``). Each is kept for the last ``window`` batches, and ``window()``
turns them into a ``StatsWindow`` of means and shares (pure arithmetic, no clock read).

Thread safety: the records are written by the training thread (and the device prefetcher's) and read by
``stats()`` from any thread (``shardfeed-profile``'s sampler): each write, and ``window()``'s copy of the
records, holds one lock for a few appends, so a window is always of whole batches, never torn.

Cost: a few list appends, clock reads and uncontended lock acquisitions per batch
(``tools/bench/autotune_bench.py`` measures it).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from loaders.loader.loader_stats import WINDOW_STEPS
from loaders.loader.stage_timing import BatchTiming

__all__ = ["Accounting", "StatsWindow"]

_BUILT_FIELDS = ("dataset_s", "cpu_s", "read_s", "decode_s", "transform_s", "collate_s", "pin_s", "busy_s")


@dataclass(frozen=True, slots=True)
class StatsWindow:
    """Means over the recent batches (seconds per batch unless said): what the advice and the controller read.

    steps: loop batches in the window; wait_s / step_s: blocked in ``next()`` / between calls; wall_s:
    their sum over the window; samples: samples handed over in it; built: batches whose build times are
    in it; stages: stage name -> seconds per batch; busy_s: a worker's whole time on a batch; cpu_s: CPU
    seconds of that (the dataset part); queued: ready batches at the last ``next()``.
    """

    steps: int = 0
    wait_s: float = 0.0
    step_s: float = 0.0
    wall_s: float = 0.0
    samples: int = 0
    built: int = 0
    stages: tuple[tuple[str, float], ...] = ()
    busy_s: float = 0.0
    cpu_s: float = 0.0
    queued: int = 0

    @property
    def wait_fraction(self) -> float:
        """Share of the loop's wall time blocked in ``next()`` (0 with no steps)."""
        return self.wait_s * self.steps / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def batches_per_s(self) -> float:
        return self.steps / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def read_cpu_share(self) -> float:
        """CPU seconds / wall seconds in the dataset (low: its reads wait)."""
        dataset_s = dict(self.stages).get("dataset", 0.0)
        return min(1.0, self.cpu_s / dataset_s) if dataset_s > 0 else 0.0

    def worker_busy(self, workers: int) -> float:
        """Share of ``workers``' wall time spent building batches (0..1; 0 without workers)."""
        if workers <= 0 or self.wall_s <= 0:
            return 0.0
        return min(1.0, self.busy_s * self.steps / (workers * self.wall_s))

    def worker_cores(self) -> float:
        """Cores the workers' dataset work kept busy: CPU seconds per second of the loop's wall time."""
        return self.cpu_s * self.steps / self.wall_s if self.wall_s > 0 else 0.0


class Accounting:
    """The loader's clock records (see the module docstring); ``window(since=step)`` summarises them."""

    def __init__(self, window: int = WINDOW_STEPS) -> None:
        self.steps = 0  # batches handed to the training loop since the loader was made
        self.queued = 0
        self._loop: deque[tuple[int, float, float, int]] = deque(maxlen=window)  # (step, wait, step_s, samples)
        self._built: deque[tuple[int, BatchTiming]] = deque(maxlen=window)
        self._host: deque[tuple[int, str, float]] = deque(maxlen=4 * window)  # (step, stage, seconds)
        self._returned: float | None = None  # when next() last returned (None: at a pass's start)
        self._lock = threading.Lock()  # the records above, between their writers and window()'s readers

    def begin_pass(self) -> None:
        """A new pass: the time since the last one (evaluation, checkpointing) is not a step."""
        self._returned = None

    def end_next(self, began: float, batch: Any) -> None:
        """``next()`` returned ``batch`` after waiting since ``began``."""
        now = time.perf_counter()
        step_s = began - self._returned if self._returned is not None else None
        self._returned = now
        samples = _num_samples(batch)
        with self._lock:
            self.steps += 1
            if step_s is not None:  # the first batch of a pass has no step before it
                self._loop.append((self.steps, now - began, step_s, samples))

    def outcome(self, timing: BatchTiming | None, queued: int) -> None:
        """A batch built (its worker-side ``timing``), with ``queued`` ready batches behind it."""
        with self._lock:
            self.queued = queued
            if timing is not None:
                self._built.append((self.steps, timing))

    def host_stage(self, stage: str, seconds: float) -> None:
        """Time spent in this process on a batch's ``stage`` ("transfer", "device_decode")."""
        with self._lock:
            self._host.append((self.steps, stage, seconds))

    def window(self, since: int = 0) -> StatsWindow:
        """Means over the recent window, only of batches after step ``since`` (from any thread)."""
        with self._lock:  # a copy of whole records; the arithmetic runs outside the lock
            loop = [entry for entry in self._loop if entry[0] > since]
            built = [timing for step, timing in self._built if step >= since]
            host_records = [(stage, seconds) for step, stage, seconds in self._host if step > since]
            queued = self.queued
        if not loop:
            return StatsWindow(built=len(built), queued=queued)
        count = len(loop)
        wait_total, step_total = sum(e[1] for e in loop), sum(e[2] for e in loop)
        sums = dict.fromkeys(_BUILT_FIELDS, 0.0)
        for timing in built:
            for name in _BUILT_FIELDS:
                sums[name] += getattr(timing, name)
        per_built = {name: total / len(built) for name, total in sums.items()} if built else sums
        host: dict[str, float] = {}
        for stage, seconds in host_records:
            host[stage] = host.get(stage, 0.0) + seconds / count
        stages = (("dataset", per_built["dataset_s"]), ("read", per_built["read_s"]),
                  ("decode", per_built["decode_s"]), ("transform", per_built["transform_s"]),
                  ("collate", per_built["collate_s"]), ("pin", per_built["pin_s"]),
                  ("transfer", host.get("transfer", 0.0)), ("device_decode", host.get("device_decode", 0.0)))
        return StatsWindow(steps=count, wait_s=wait_total / count, step_s=step_total / count,
                      wall_s=wait_total + step_total, samples=sum(e[3] for e in loop), built=len(built),
                      stages=stages, busy_s=per_built["busy_s"], cpu_s=per_built["cpu_s"], queued=queued)


def _num_samples(batch: Any) -> int:
    """Samples in a collated batch: the first dimension of its first tensor, else the length of its first
    list (a collated list of strings), else 1."""
    length = 1
    for _ in range(4):  # a few levels of dicts, lists and tuples: collated batches are shallow
        shape = getattr(batch, "shape", None)
        if shape is not None:
            return int(shape[0]) if len(shape) else length
        if isinstance(batch, Mapping) and batch:
            batch = next(iter(batch.values()))
        elif isinstance(batch, (list, tuple)) and batch:
            length, batch = len(batch), batch[0]
        else:
            break
    return length
