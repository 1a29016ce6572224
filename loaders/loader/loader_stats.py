"""What ``DataLoader.stats()`` returns: ``LoaderStats``, a frozen snapshot of where the training loop's time goes.

Values, not live views: each call builds a new one from the loader's accounting
(``loaders.loader.accounting``), the controller's decisions (``loaders.loader.autotune``)
and the decode counts (``DecodeStats``). Times are seconds of the host's monotonic clock
(``time.perf_counter``); "per batch" means the mean over the recent window
(``window_steps`` batches, the last ``WINDOW_STEPS`` handed to the training loop).

Stage names (``STAGES``), each in seconds per batch, measured where the stage runs (a worker
thread, a worker process, the training process):

- ``dataset``: the dataset's own ``__getitem__`` / ``__getitems__`` for the batch's samples (a
  shard dataset's read, decode and transform, unless it reports them apart);
- ``read``, ``decode``, ``transform``: parts of ``dataset`` a dataset reports itself (0 otherwise);
- ``collate``: the collate_fn (ours collates straight into pinned memory in thread workers);
- ``pin``: pinning a batch the workers did not build in pinned memory;
- ``transfer``: enqueueing the host -> device copy (``device=...``);
- ``device_decode``: the device decode (``decode="device"``), host time to enqueue it.

``bottleneck``: ``"step"`` when the training step sets the pace (the loop waits little), else
the data stage that costs most per batch (``pin`` counts as ``"transfer"``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from loaders.loader.decode_stage import DecodeStats

__all__ = ["BOTTLENECKS", "STAGES", "WINDOW_STEPS", "LoaderStats", "TuningDecision"]

STAGES = ("dataset", "read", "decode", "transform", "collate", "pin", "transfer", "device_decode")
BOTTLENECKS = ("step", "dataset", "read", "decode", "transform", "collate", "transfer", "device_decode")
WINDOW_STEPS = 64  # batches in the recent window the shares and means are taken over


@dataclass(frozen=True, slots=True)
class TuningDecision:
    """One change the controller made: at ``step`` (batches handed over since the loader was made),
    ``knob`` ("num_workers", "prefetch_factor", "worker_type", "threads_per_worker") went from ``old`` to
    ``new``, because ``why``."""

    step: int
    knob: str
    old: int | str
    new: int | str
    why: str

    def __str__(self) -> str:
        return f"step {self.step}: {self.knob} {self.old} -> {self.new} ({self.why})"


def _empty_stages() -> Mapping[str, float]:
    return MappingProxyType(dict.fromkeys(STAGES, 0.0))


@dataclass(frozen=True)
class LoaderStats:
    """Where the training loop's time goes, and what the loader did about it (see the module docstring).

    decode: where JPEGs decode (``DecodeStats``). steps: batches handed to the training loop since the
    loader was made. wait_fraction: share of the loop's wall time blocked in ``next()`` over the recent
    window (0..1). wait_s / step_s: mean seconds per batch blocked in ``next()`` / between ``next()`` calls
    (the training step). samples_per_s: samples handed over per second of the loop's wall time (window).
    stages: stage name -> seconds per batch (``STAGES``). worker_busy: share of the workers' wall time spent
    building batches (0..1; 0 without workers). read_cpu_share: CPU seconds / wall seconds inside the
    dataset (low: its reads wait, threads help; near 1 per worker: CPU-bound). queued: ready batches
    waiting for the loop at the last ``next()``. workers, worker_type, prefetch, threads_per_worker: the
    settings now (``prefetch``: batches requested ahead per worker; ``threads_per_worker``: intra-op threads
    in each worker process). bottleneck: ``BOTTLENECKS``. advice: sentences,
    each naming an action. tuning: the controller's decisions, oldest first. autotune: whether the
    controller runs. saturated: the controller found no more workers that help (cores or memory spent).
    """

    decode: DecodeStats
    steps: int = 0
    window_steps: int = 0
    wait_fraction: float = 0.0
    wait_s: float = 0.0
    step_s: float = 0.0
    samples_per_s: float = 0.0
    stages: Mapping[str, float] = field(default_factory=_empty_stages)
    worker_busy: float = 0.0
    read_cpu_share: float = 0.0
    queued: int = 0
    workers: int = 0
    worker_type: str = "thread"
    prefetch: int = 0
    threads_per_worker: int = 1
    bottleneck: str = "step"
    advice: tuple[str, ...] = ()
    tuning: tuple[TuningDecision, ...] = ()
    autotune: bool = False
    saturated: bool = False

    def as_dict(self) -> dict[str, float | int | str]:
        """Flat scalars for TensorBoard, W&B or Lightning loggers: ``"loader/<name>"`` keys, stages as
        ``"loader/stage/<stage>_s"``, decode counts as ``"loader/decode/<count>"``; advice and tuning
        summarised (their count, the last decision as text)."""
        flat: dict[str, float | int | str] = {
            f"loader/{name}": getattr(self, name)
            for name in ("steps", "window_steps", "wait_fraction", "wait_s", "step_s", "samples_per_s",
                         "worker_busy", "read_cpu_share", "queued", "workers", "worker_type", "prefetch",
                         "threads_per_worker", "bottleneck")
        }
        flat.update({f"loader/stage/{name}_s": seconds for name, seconds in self.stages.items()})
        flat["loader/autotune"] = int(self.autotune)
        flat["loader/saturated"] = int(self.saturated)
        flat["loader/tuning_decisions"] = len(self.tuning)
        flat["loader/last_tuning"] = str(self.tuning[-1]) if self.tuning else ""
        flat["loader/advice"] = " ".join(self.advice)
        flat["loader/decode/mode"] = self.decode.mode
        counts = self.decode.counts
        for name in getattr(counts, "__dataclass_fields__", {}):
            value = getattr(counts, name)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                flat[f"loader/decode/{name}"] = value
        return flat
