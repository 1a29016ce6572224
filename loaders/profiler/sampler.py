"""The sampling thread: every ``interval_s``, ``stats()`` of every live loader, kept as plain values.

``StatsSampler`` reads ``loaders.loader.live.live_loaders`` (the loaders iterated so far, held
weakly) on a daemon thread and appends one ``Sample`` per loader and tick to that loader's
``LoaderTrace``, with the latest full snapshot (advice, tuning, decode) beside it. A loader collected
between two rounds (one made inside a function that returned) keeps what its last round saw: the
batches of its last interval are missing from its trace (``alive_at_end`` False). A loader's
``stats()`` is read while the training thread runs: it is safe from any thread (a consistent snapshot,
``loaders.loader.tuner``). Should it raise all the same, the sample is counted in ``failed_samples``,
logged and skipped, never raised into the training script.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch.utils.data

from loaders.loader.live import live_loaders

__all__ = ["LoaderTrace", "Sample", "StatsSampler", "sample_of", "snapshot_of"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Sample:
    """One loader's stats at ``t_s`` (seconds since the profiler started): the windowed values of
    ``loaders.loader.loader_stats.LoaderStats`` (means over its last ``window_steps`` batches of ``steps``
    handed over; seconds per batch, shares 0..1)."""

    t_s: float
    steps: int
    window_steps: int
    wait_fraction: float
    wait_s: float
    step_s: float
    samples_per_s: float
    workers: int
    prefetch: int
    queued: int
    bottleneck: str
    stages: Mapping[str, float]


@dataclass
class LoaderTrace:
    """What was sampled of one loader: its number (registration order), dataset class, the samples, the
    latest full snapshot (``snapshot_of``) and when it was first sampled with batches handed over (seconds
    since the start)."""

    number: int
    dataset: str
    batch_size: int | None
    first_seen_s: float
    map_style: bool = True
    samples: list[Sample] = field(default_factory=list)
    latest: dict[str, Any] = field(default_factory=dict)
    alive_at_end: bool = False  # False: collected before the last round, which its last interval missed

    @property
    def name(self) -> str:
        return f"loader{self.number}"


def sample_of(stats: Any, t_s: float) -> Sample:
    """A ``Sample`` of one ``LoaderStats`` taken at ``t_s``."""
    return Sample(t_s=t_s, steps=int(stats.steps), window_steps=int(stats.window_steps),
                  wait_fraction=float(stats.wait_fraction), wait_s=float(stats.wait_s), step_s=float(stats.step_s),
                  samples_per_s=float(stats.samples_per_s),
                  workers=int(stats.workers), prefetch=int(stats.prefetch), queued=int(stats.queued),
                  bottleneck=str(stats.bottleneck), stages={str(k): float(v) for k, v in stats.stages.items()})


def snapshot_of(stats: Any) -> dict[str, Any]:
    """The parts of one ``LoaderStats`` a report keeps from the last sample only, as plain values."""
    decode = getattr(stats, "decode", None)
    return {
        "worker_type": str(stats.worker_type), "autotune": bool(stats.autotune), "saturated": bool(stats.saturated),
        "worker_busy": float(stats.worker_busy), "read_cpu_share": float(stats.read_cpu_share),
        "advice": [str(line) for line in stats.advice],
        "tuning": [{"step": int(d.step), "knob": str(d.knob), "old": d.old, "new": d.new, "why": str(d.why)}
                   for d in stats.tuning],
        "decode": {"mode": str(getattr(decode, "mode", "cpu")), "reason": str(getattr(decode, "reason", ""))},
    }


class StatsSampler:
    """Samples every live loader's ``stats()`` each ``interval_s`` on a daemon thread (``start``/``stop``).

    loaders: where the live loaders come from ((number, loader) pairs; default ``live_loaders``);
    clock: seconds, monotonic. ``sample_once`` takes one round now (``stop`` takes a last one).
    """

    def __init__(self, interval_s: float = 1.0, *, loaders: Callable[[], list[tuple[int, Any]]] = live_loaders,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        if not interval_s > 0:
            raise ValueError(f"'interval_s' must be a positive number of seconds (got {interval_s!r})")
        self.interval_s = float(interval_s)
        self.traces: dict[int, LoaderTrace] = {}
        self.failed_samples = 0
        self._loaders, self._clock = loaders, clock
        self._start = clock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def elapsed_s(self) -> float:
        return self._clock() - self._start

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="shardfeed-profile-sampler", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop the thread and take a last round of samples (of the loaders still alive)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample_once()
        alive = {number for number, _ in self._loaders()}
        for number, trace in self.traces.items():
            trace.alive_at_end = number in alive

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample_once()

    def sample_once(self) -> None:
        """One round: a sample of each live loader that has handed over batches since its last one."""
        with self._lock:
            for number, loader in self._loaders():
                self._sample(number, loader)

    def _sample(self, number: int, loader: Any) -> None:
        t_s = self.elapsed_s()
        try:
            stats = loader.stats()
            sample, latest = sample_of(stats, t_s), snapshot_of(stats)
        except Exception as err:  # noqa: BLE001 - a bug of the loader's, not the script's: never fail the script
            self.failed_samples += 1
            logger.warning("shardfeed-profile: stats() of loader%d failed: %r", number, err)
            return
        if not sample.steps:
            return  # nothing handed over yet
        trace = self.traces.get(number)
        if trace is None:
            trace = self.traces[number] = LoaderTrace(
                number, type(loader.dataset).__name__, getattr(loader, "batch_size", None), t_s,
                map_style=not isinstance(loader.dataset, torch.utils.data.IterableDataset))
        if trace.samples and trace.samples[-1].steps == sample.steps:
            return  # nothing handed over since: the last sample stands
        trace.samples.append(sample)
        trace.latest = latest
