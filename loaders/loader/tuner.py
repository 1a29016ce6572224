"""The loader's accounting and tuning shell: clocks in, ``stats()`` and tuned settings out.

``Tuner`` holds the ``Accounting`` (always on), the ``Controller`` (``autotune=True``) and the
optional periodic log line. The primary pass reports to it: each outcome as it leaves the
workers (``observe``), each ``next()`` of the training loop (``end_next``).
Every ``MIN_STEPS // 2`` batches the controller reads the window since its last change; its changes
go to the pool's settings (``WorkerPool.retune``) and take effect between two batches
(``loaders.loader.relay``), each one logged and kept in ``stats().tuning``. The tuned knobs
travel in the loader's ``state_dict()`` under ``KEY_TUNED`` (``state`` / ``restore``).

``stats()`` may be called from any thread (``shardfeed-profile`` samples it from its own): the accounting
copies its records under its lock, and a change's decisions and knobs are made and read under the tuner's,
so a snapshot never shows a decision without its knobs.

Autotune is on by default when the user gave neither ``num_workers`` nor ``prefetch_factor``
(map-style datasets; ``loaders.loader.settings.resolve_autotune``); the controller then starts
from the loader's defaults, or from the tuned knobs of a loaded state.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch

from loaders.errors import ConfigError
from loaders.loader.accounting import Accounting
from loaders.loader.advice import diagnose
from loaders.loader.autotune import KNOB_NAMES, MIN_STEPS, Controller, KnobChange, Knobs, Limits, apply
from loaders.loader.batch_outcome import BatchOutcome
from loaders.loader.decode_stage import DecodeStats
from loaders.loader.loader_stats import LoaderStats, TuningDecision
from loaders.loader.relay import Relay
from loaders.loader.settings import LoaderSettings, WorkerType
from loaders.loader.thread_workers import ThreadWorkers
from loaders.read.topology import Topology, cpus_available

__all__ = ["KEY_TUNED", "LoaderStats", "Tuner", "TunerConfig"]

logger = logging.getLogger(__name__)

KEY_TUNED = "tuned"  # the loader state's nest of tuned knobs (absent: fixed settings, or an older state)
_MEMORY_SHARE = 0.25  # of the memory available at the first batch: the budget of batches in flight


@dataclass(frozen=True)
class TunerConfig:
    """What the tuner is built from: whether it tunes, this rank's CPUs, whether it may switch the worker
    type (the type was the loader's choice, with no worker_init_fn), the log period (None: no log), and
    whether the dataset declares ``releases_gil`` / ``light_items`` (threads suit it)."""

    autotune: bool
    cpus: int
    can_switch_type: bool = False
    log_every_s: float | None = None
    releases_gil: bool = False

    @classmethod
    def of(cls, settings: LoaderSettings, topology: Topology) -> TunerConfig:
        """From the loader's settings: processes only where the loader chose them or could (fork: nothing
        is pickled), never when a worker_init_fn was given (it is written for one kind of worker)."""
        cpus = max(1, cpus_available() // max(1, topology.local_world_size))
        fork = settings.process_args.get("multiprocessing_context") is None and _default_is_fork()
        switch = (settings.type_is_ours and settings.worker_init_fn is None and settings.start_note is None
                  and (settings.worker_type is WorkerType.PROCESS or fork))
        dataset = settings.dataset
        gil_free = any(getattr(dataset, name, False) is True for name in ("releases_gil", "light_items"))
        return cls(settings.autotune, cpus, switch, settings.stats_log_s, gil_free)


def _default_is_fork() -> bool:
    import multiprocessing

    return (multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0]) == "fork"


class Tuner:
    """See the module docstring. ``pool``: the loader's ``WorkerPool`` (its settings are the knobs; set by
    ``loaders.loader.epoch_pass.Chain``)."""

    def __init__(self, config: TunerConfig, pool: Any = None) -> None:
        self.config = config
        self.accounting = Accounting()
        limits = Limits(config.cpus, can_switch_type=config.can_switch_type, releases_gil=config.releases_gil)
        self.controller = Controller(limits) if config.autotune else None
        self.decisions: list[TuningDecision] = []
        self.pool = pool
        self._relay: Relay | None = None
        self._since = 0  # the controller reads batches after this step (its last change, warmed up)
        self._next_decision = MIN_STEPS // 2 + 1  # a first look (the first batch has no step before it)
        self._budgeted = False
        self._logged_at = time.perf_counter()
        self._lock = threading.Lock()  # the decisions and the pool's knobs, between _apply and stats()

    @classmethod
    def of(cls, settings: LoaderSettings, topology: Topology) -> Tuner:
        return cls(TunerConfig.of(settings, topology))

    @classmethod
    def inert(cls) -> Tuner:
        """Accounting only, one CPU: for a chain built without the loader's topology."""
        return cls(TunerConfig(autotune=False, cpus=1))

    # ------------------------------------------------------------ the pass reports

    def begin_pass(self, relay: Relay | None) -> None:
        self._relay = relay
        self.accounting.begin_pass()

    def observe(self, outcomes: Iterable[BatchOutcome], relay: Relay) -> Iterator[BatchOutcome]:
        """``outcomes`` passed through, each one's timing and the ready count recorded."""
        accounting = self.accounting
        for outcome in outcomes:
            accounting.outcome(outcome.timing, relay.ready_count)
            if not self._budgeted and outcome.batch is not None:
                self._budget(outcome.batch)
            yield outcome

    def end_next(self, began: float, batch: Any) -> None:
        """The primary pass's ``next()`` returned ``batch`` after waiting since ``began``; decide when due."""
        self.accounting.end_next(began, batch)
        if self.controller is not None and self.accounting.steps >= self._next_decision:
            self._decide()
        if self.config.log_every_s is not None:
            self._maybe_log()

    # ------------------------------------------------------------ decisions

    @property
    def knobs(self) -> Knobs:
        settings: LoaderSettings = self.pool.settings
        return Knobs(settings.num_workers, str(settings.worker_type.value), settings.prefetch_factor or 2,
                     settings.threads_per_worker)

    def _decide(self) -> None:
        assert self.controller is not None  # only called with a controller
        steps = self.accounting.steps
        self._next_decision = steps + MIN_STEPS // 2
        changes = self.controller.decide(self.accounting.window(since=self._since), self.knobs)
        if changes:
            self._apply(changes, steps)

    def _apply(self, changes: list[KnobChange], steps: int) -> None:
        old = self.knobs
        new = apply(old, changes)
        decisions = [TuningDecision(steps, change.knob, change.old, change.new, change.why) for change in changes]
        with self._lock:
            self.decisions.extend(decisions)
            self.pool.retune(_with_knobs(self.pool.settings, new))
        for decision in decisions:
            logger.info("DataLoader autotune: %s", decision)
        relay, current = self._relay, None if self._relay is None else self._relay.current
        if isinstance(current, ThreadWorkers) and (new.num_workers, new.worker_type, new.threads_per_worker) == (
                old.num_workers, old.worker_type, old.threads_per_worker):
            current.max_in_flight = new.num_workers * new.prefetch_factor  # threads take it at once
        elif relay is not None:
            relay.request_swap()
        warmup = min(16, old.num_workers * old.prefetch_factor) + 2  # the old workers' batches in flight
        self._since = steps + warmup
        self._next_decision = self._since + MIN_STEPS // 2

    def _budget(self, batch: Any) -> None:
        """Cap batches in flight at a share of the memory available now, by the size of this batch."""
        self._budgeted = True
        size = _nbytes(batch)
        available = _available_bytes()
        if self.controller is not None and size > 0 and available is not None:
            cap = max(2, int(available * _MEMORY_SHARE) // size)
            limits = self.controller.limits
            self.controller.limits = replace(limits, max_in_flight=min(limits.max_in_flight, cap))

    # ------------------------------------------------------------ stats, state, log

    def stats(self, decode: DecodeStats) -> LoaderStats:
        """A snapshot of the accounting's window, the knobs and the decisions (from any thread)."""
        window = self.accounting.window()
        with self._lock:
            knobs, decisions = self.knobs, tuple(self.decisions)
            saturated = self.controller is not None and self.controller.saturated
        bottleneck, advice = diagnose(window, knobs, self.config.cpus, saturated=saturated)
        return LoaderStats(
            decode=decode, steps=self.accounting.steps, window_steps=window.steps,
            wait_fraction=window.wait_fraction, wait_s=window.wait_s, step_s=window.step_s,
            samples_per_s=window.samples_per_s, stages=dict(window.stages) or LoaderStats(decode).stages,
            worker_busy=window.worker_busy(knobs.num_workers), read_cpu_share=window.read_cpu_share,
            queued=window.queued, workers=knobs.num_workers, worker_type=knobs.worker_type,
            prefetch=knobs.prefetch_factor, threads_per_worker=knobs.threads_per_worker, bottleneck=bottleneck,
            advice=advice, tuning=decisions,
            autotune=self.controller is not None, saturated=saturated)

    def state(self) -> dict[str, Any] | None:
        """The tuned knobs as plain values (None without autotune)."""
        if self.controller is None:
            return None
        knobs = self.knobs
        return {name: getattr(knobs, name) for name in KNOB_NAMES}

    def restore(self, saved: Mapping[str, Any] | None) -> None:
        """Start from saved tuned knobs (None, or autotune off: nothing changes). ConfigError if malformed."""
        if saved is None or self.controller is None:
            return
        knobs = _checked_knobs(saved, self.knobs.threads_per_worker)
        if knobs.worker_type != self.knobs.worker_type and not self.config.can_switch_type:
            knobs = replace(knobs, worker_type=self.knobs.worker_type)
        changes = [KnobChange(name, getattr(self.knobs, name), getattr(knobs, name), "resumed from the saved state")
                   for name in KNOB_NAMES if getattr(self.knobs, name) != getattr(knobs, name)]
        if changes:
            self._apply(changes, self.accounting.steps)

    def _maybe_log(self) -> None:
        now = time.perf_counter()
        if self.config.log_every_s is not None and now - self._logged_at >= self.config.log_every_s:
            self._logged_at = now
            stats = self.stats(DecodeStats(mode="", reason=""))
            logger.info("DataLoader: waits %.1f%% of the loop, %.0f samples/s, %d %s workers, bottleneck %s; %s",
                        100 * stats.wait_fraction, stats.samples_per_s, stats.workers, stats.worker_type,
                        stats.bottleneck, " ".join(stats.advice))


def _checked_knobs(saved: Mapping[str, Any], threads_now: int) -> Knobs:
    """The saved knobs, checked; a state saved before ``threads_per_worker`` was tuned keeps ``threads_now``."""
    try:
        workers, kind, prefetch = saved["num_workers"], saved["worker_type"], saved["prefetch_factor"]
        threads = saved.get("threads_per_worker", threads_now)
    except (KeyError, TypeError, AttributeError) as err:
        raise ConfigError(f"DataLoader state {KEY_TUNED!r} must hold num_workers, worker_type and "
                          f"prefetch_factor (got {saved!r})") from err
    valid = all(isinstance(v, int) and not isinstance(v, bool) for v in (workers, prefetch, threads))
    if not valid or workers < 0 or prefetch < 1 or threads < 1 or kind not in ("thread", "process"):
        raise ConfigError(f"DataLoader state {KEY_TUNED!r}: expected num_workers >= 0, prefetch_factor >= 1, "
                          f"threads_per_worker >= 1 and worker_type 'thread' or 'process' (got {dict(saved)!r})")
    return Knobs(workers, kind, prefetch, threads)


def _with_knobs(settings: LoaderSettings, knobs: Knobs) -> LoaderSettings:
    """``settings`` with the tuned knobs (persistent workers once there are any: the default's rule)."""
    persistent = settings.persistent_workers or knobs.num_workers > 0
    prefetch = knobs.prefetch_factor if knobs.num_workers > 0 else settings.prefetch_factor
    args = {**settings.process_args, "num_workers": knobs.num_workers, "prefetch_factor": prefetch,
            "persistent_workers": persistent}
    return replace(settings, num_workers=knobs.num_workers, worker_type=WorkerType(knobs.worker_type),
                   prefetch_factor=prefetch, persistent_workers=persistent, process_args=args,
                   threads_per_worker=knobs.threads_per_worker)


def _nbytes(batch: Any) -> int:
    if isinstance(batch, torch.Tensor):
        return batch.element_size() * batch.nelement()
    if isinstance(batch, Mapping):
        return sum(_nbytes(value) for value in batch.values())
    if isinstance(batch, (list, tuple)):
        return sum(_nbytes(value) for value in batch)
    return int(getattr(batch, "nbytes", 0) or 0)


def _available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (Linux), else None."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
