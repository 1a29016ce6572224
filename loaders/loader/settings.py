"""The DataLoader's own keyword options (beyond torch's): worker type, seed, error policy, device.

``LoaderOptions`` validates them once; ``WorkerType`` and ``OnError`` are their choices.
The stock arguments stay with torch, which validates them with its own errors.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from loaders.errors import ConfigError

__all__ = ["LoaderOptions", "OnError", "WorkerType"]


class WorkerType(enum.StrEnum):
    """Who builds batches: ``auto`` picks threads for datasets with ``releases_gil = True``."""

    AUTO = "auto"
    THREAD = "thread"
    PROCESS = "process"


class OnError(enum.StrEnum):
    """What a failing sample does: end the epoch with WorkerError, or be dropped (within a budget)."""

    RAISE = "raise"
    SKIP = "skip"


def _choice(name: str, value: object, kind: type[enum.StrEnum]) -> Any:
    try:
        return kind(value)
    except ValueError as err:
        choices = ", ".join(repr(m.value) for m in kind)
        got = f"got {value!r} that is a {type(value).__name__}"
        raise ConfigError(f"{name!r} must be one of {choices} ({got})") from err


@dataclass(frozen=True)
class LoaderOptions:
    """The DataLoader's own keyword options (beyond torch's), validated once.

    max_skips: with on_error="skip", samples that may be skipped per epoch: an int count,
    a float fraction 0 < f < 1 of the epoch's samples, or ``math.inf``.
    device_prefetch: with ``device``, batches copied (and transformed) ahead of the one
    the training step holds; device memory holds ``device_prefetch + 1`` batches, and one
    more while the next one is handed over if the step still holds the previous batch.
    """

    worker_type: WorkerType = WorkerType.AUTO
    threads_per_worker: int = 1
    seed: int | None = None
    on_error: OnError = OnError.RAISE
    max_skips: int | float = 0
    device: torch.device | None = None
    device_transform: Callable[[Any], Any] | None = None
    device_prefetch: int = 2

    def __post_init__(self) -> None:
        object.__setattr__(self, "worker_type", _choice("worker_type", self.worker_type, WorkerType))
        object.__setattr__(self, "on_error", _choice("on_error", self.on_error, OnError))
        for name, value, minimum in (("threads_per_worker", self.threads_per_worker, 1), ("seed", self.seed, 0),
                                     ("device_prefetch", self.device_prefetch, 0)):
            if (value is not None or name != "seed") and (
                    isinstance(value, bool) or not isinstance(value, int) or value < minimum):
                kind = "a positive int" if minimum else ("a non-negative int or None" if name == "seed" else "a non-negative int")
                raise ConfigError(f"{name!r} must be {kind} (got {value!r} that is a {type(value).__name__})")
        skips = self.max_skips
        valid_count = isinstance(skips, int) and not isinstance(skips, bool) and skips >= 0
        if not (valid_count or (isinstance(skips, float) and (0 < skips < 1 or skips == math.inf))):
            raise ConfigError(f"'max_skips' must be a non-negative int, a fraction 0 < f < 1 or math.inf "
                              f"(got {skips!r} that is a {type(skips).__name__})")
        if self.device is not None:
            try:
                object.__setattr__(self, "device", torch.device(self.device))
            except (RuntimeError, TypeError) as err:
                raise ConfigError(f"'device' must be a torch.device, its name or None (got {self.device!r})") from err
            if self.device.type == "cuda" and not torch.cuda.is_available():
                raise ConfigError(f"'device' is {str(self.device)!r} but CUDA is not available; use device='cpu'")
        if self.device_transform is not None and (self.device is None or not callable(self.device_transform)):
            raise ConfigError(f"'device_transform' must be callable and needs 'device' (got {self.device_transform!r}"
                              f" with device={self.device!r})")

    def resolve_worker_type(self, *, iterable: bool, releases_gil: bool, has_mp_context: bool) -> WorkerType:
        """The worker type for a dataset: ``auto`` resolved; ConfigError for combinations that cannot work."""
        if self.on_error is OnError.SKIP and iterable:
            raise ConfigError("on_error='skip' needs a map-style dataset: an iterable dataset's iterator cannot "
                              "go on after it raised")
        if self.worker_type is WorkerType.AUTO:
            if iterable or has_mp_context:
                return WorkerType.PROCESS
            return WorkerType.THREAD if releases_gil else WorkerType.PROCESS
        if self.worker_type is WorkerType.THREAD and iterable:
            raise ConfigError("worker_type='thread' needs a map-style dataset: an IterableDataset shards itself "
                              "with get_worker_info() in worker processes; use worker_type='process' or 'auto'")
        if self.worker_type is WorkerType.THREAD and has_mp_context:
            raise ConfigError("'multiprocessing_context' applies to worker processes, not worker_type='thread'")
        return self.worker_type
