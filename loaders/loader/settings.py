"""The DataLoader's settings: its own keyword options, validated once, and everything the chain reads, resolved once.

``LoaderOptions`` holds the keyword options beyond torch's (worker type, seed, error
policy, device, where JPEG decodes), checked at construction. ``LoaderSettings`` is the frozen record the
chain is built from: torch's arguments after torch validated them, our defaults filled
in, the worker type (``loaders.loader.worker_choice``'s rule) and seed resolved. ``WorkerType``
and ``OnError`` are the choices.
"""

from __future__ import annotations

import enum
import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch.utils.data import IterableDataset, default_convert

from loaders.batch_decode.choice import DecodeChoice, DecodeInputs, DecodeMode, choose_decode
from loaders.batch_decode.decoders import device_decoder_problem
from loaders.errors import ConfigError
from loaders.loader.collate import default_collate
from loaders.loader.worker_choice import (
    PICKLING_START_METHODS,
    WorkerChoice,
    WorkerInputs,
    WorkerType,
    choose_workers,
    start_method,
    unsendable_part,
)
from loaders.read.seeding import resolve_seed
from loaders.read.topology import Topology, default_num_workers
from loaders.validate import check_choice, check_int, invalid

__all__ = ["PROCESS_ARGS", "LoaderOptions", "LoaderSettings", "OnError", "ProcessWarningOnly", "WorkerType",
           "default_collate_fn",
           "default_workers", "resolve_autotune"]

# Torch's arguments handed on to torch's own loader when workers are processes.
PROCESS_ARGS = ("num_workers", "pin_memory", "timeout", "multiprocessing_context", "generator", "prefetch_factor",
                "persistent_workers", "pin_memory_device", "in_order", "batch_size", "drop_last")


class OnError(enum.StrEnum):
    """What a failing sample does: end the epoch with WorkerError, or be dropped (within a budget)."""

    RAISE = "raise"
    SKIP = "skip"


def default_workers(dataset: Any, topology: Topology) -> int:
    """``num_workers`` when not given: ``default_num_workers`` per rank, 0 for an IterableDataset (it is
    split between workers only by its own code: workers it did not ask for would each yield it whole)."""
    return 0 if isinstance(dataset, IterableDataset) else default_num_workers(topology)


class ProcessWarningOnly:
    """Mixed into the DataLoader: torch's "This DataLoader will create N worker processes" warning is given
    only where workers are processes (by the inner torch loader of ``ProcessWorkers``, as it starts them);
    it is untrue of thread workers, and the controller may raise a thread count well past the cores."""

    def check_worker_number_rationality(self) -> None:
        return None


def default_collate_fn(dataset: Any, *, auto_collation: bool) -> Callable[[Any], Any]:
    """The collate_fn when the user gives none: with batching, the dataset's declared ``default_collate_fn``
    (e.g. ``loaders.TokenDataset``'s, which adds ``cu_seqlens``), else ours; without batching torch's
    ``default_convert``."""
    if not auto_collation:
        return default_convert
    declared = getattr(dataset, "default_collate_fn", None)
    return declared if callable(declared) else default_collate


def resolve_autotune(autotune: bool | None, *, workers_given: bool, iterable: bool) -> bool:
    """Whether the controller runs (``loaders.loader.autotune``): ``autotune`` if given, else when the user
    did not give ``num_workers`` (map-style datasets; the DataLoader passes False when ``prefetch_factor``
    was given: explicit values are respected)."""
    if autotune is None:
        return not (workers_given or iterable)
    if autotune and iterable:
        raise ConfigError("autotune=True needs a map-style dataset: how an IterableDataset is split between "
                          "workers is its own code's, so the worker count would change its batches")
    return autotune


@dataclass(frozen=True, kw_only=True)
class LoaderOptions:
    """The DataLoader's own keyword options (beyond torch's), validated once.

    max_skips: with on_error="skip", samples that may be skipped per epoch: an int count,
    a float fraction 0 < f < 1 of the epoch's samples, or ``math.inf``.
    device_prefetch: with ``device``, batches copied (and transformed) ahead of the one
    the training step holds; device memory holds ``device_prefetch + 1`` batches, and one
    more while the next one is handed over if the step still holds the previous batch.
    decode: "auto", "cpu" or "device": where JPEGs decode (``loaders.batch_decode.choice``).
    autotune: True, False or None (on when neither num_workers nor prefetch_factor is given);
    stats_log_s: seconds between ``stats()`` log lines (logging, INFO), None for none.
    """

    worker_type: WorkerType | str = WorkerType.AUTO
    threads_per_worker: int = 1
    seed: int | None = None
    on_error: OnError | str = OnError.RAISE
    max_skips: int | float = 0
    device: torch.device | str | None = None
    device_transform: Callable[[Any], Any] | None = None
    device_prefetch: int = 2
    decode: DecodeMode | str = DecodeMode.AUTO
    autotune: bool | None = None
    stats_log_s: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "worker_type", check_choice("worker_type", self.worker_type, WorkerType))
        object.__setattr__(self, "decode", check_choice("decode", self.decode, DecodeMode))
        object.__setattr__(self, "on_error", check_choice("on_error", self.on_error, OnError))
        check_int("threads_per_worker", self.threads_per_worker, 1)
        check_int("device_prefetch", self.device_prefetch, 0)
        if self.autotune is not None and not isinstance(self.autotune, bool):
            raise invalid("autotune", "a bool or None", self.autotune)
        log_s = self.stats_log_s
        if log_s is not None and (isinstance(log_s, bool) or not isinstance(log_s, (int, float)) or not log_s > 0):
            raise invalid("stats_log_s", "a positive number of seconds or None", log_s)
        if self.seed is not None and not (isinstance(self.seed, int) and not isinstance(self.seed, bool)
                                          and self.seed >= 0):
            raise invalid("seed", "a non-negative int or None", self.seed)
        skips = self.max_skips
        valid_count = isinstance(skips, int) and not isinstance(skips, bool) and skips >= 0
        if not (valid_count or (isinstance(skips, float) and (0 < skips < 1 or skips == math.inf))):
            raise invalid("max_skips", "a non-negative int, a fraction 0 < f < 1 or math.inf", skips)
        if self.device is not None:
            object.__setattr__(self, "device", _device(self.device))
        if self.device_transform is not None and (self.device is None or not callable(self.device_transform)):
            raise ConfigError(f"'device_transform' must be callable and needs 'device' (got {self.device_transform!r}"
                              f" with device={self.device!r})")

    def choose_workers(self, loader: torch.utils.data.DataLoader[Any], *, workers_given: bool) -> WorkerChoice:
        """The workers for ``loader`` (torch's constructor has run on it): ``worker_choice``'s rule, with the
        parts a worker process receives checked where the start method pickles them; warns when it falls back."""
        iterable = isinstance(loader.dataset, IterableDataset)
        if self.on_error is OnError.SKIP and iterable:
            raise ConfigError("on_error='skip' needs a map-style dataset: an iterable dataset's iterator cannot "
                              "go on after it raised")
        given = WorkerInputs(
            requested=WorkerType(self.worker_type), iterable=iterable,
            releases_gil=getattr(loader.dataset, "releases_gil", False) is True,
            light_items=getattr(loader.dataset, "light_items", False) is True, num_workers=loader.num_workers,
            workers_given=workers_given, has_mp_context=loader.multiprocessing_context is not None,
            start_method=start_method(loader.multiprocessing_context))
        choice = choose_workers(given)
        pickled = given.start_method in PICKLING_START_METHODS
        if choice.worker_type is WorkerType.PROCESS and choice.num_workers and pickled:
            unsendable = unsendable_part(_sent_to_workers(loader))
            if unsendable is not None:
                choice = choose_workers(replace(given, unsendable=unsendable))
        if choice.warning is not None:
            warnings.warn(choice.warning, stacklevel=4)
        return choice


def _sent_to_workers(loader: torch.utils.data.DataLoader[Any]) -> list[tuple[str, Any]]:
    """(what, object) of the user's parts each worker process receives: the dataset, a collate_fn of
    their own, a worker_init_fn."""
    parts: list[tuple[str, Any]] = [("dataset", loader.dataset)]
    if loader.collate_fn not in (default_collate, default_convert):
        parts.append(("collate_fn", loader.collate_fn))
    parts.append(("worker_init_fn", loader.worker_init_fn))
    return parts


def _choose_decode(loader: torch.utils.data.DataLoader[Any], options: LoaderOptions) -> DecodeChoice:
    """Where ``loader``'s JPEGs decode (a ``DecodeChoice``): ``loaders.batch_decode.choice``'s rule."""
    device = None if options.device is None else torch.device(options.device)
    given = DecodeInputs(requested=DecodeMode(options.decode), device=device,
                         dataset=type(loader.dataset).__name__,
                         can_defer=getattr(loader.dataset, "can_defer_decode", False) is True,
                         own_collate=loader.collate_fn is default_collate,
                         batched=loader.batch_sampler is not None,
                         iterable=isinstance(loader.dataset, IterableDataset))
    return choose_decode(given, device_decoder_problem)


def _device(device: object) -> torch.device:
    try:
        if not isinstance(device, (str, int, torch.device)):
            raise TypeError(type(device).__name__)
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ConfigError(f"'device' must be a torch.device, its name or None (got {device!r})") from err
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"'device' is {str(resolved)!r} but CUDA is not available; use device='cpu'")
    return resolved


@dataclass(frozen=True, kw_only=True)
class LoaderSettings:
    """What the DataLoader's chain is built from, resolved once at construction (frozen).

    Torch's arguments as torch validated and holds them (``process_args``: those handed on
    to torch's own loader in process workers), our defaults filled in, ``LoaderOptions``
    resolved against the dataset. ``seed`` changes only when a state with another drawn
    seed is loaded (a new LoaderSettings then).
    """

    dataset: Any
    iterable: bool
    batch_size: int | None
    drop_last: bool
    auto_collation: bool  # batches of samples (torch's automatic batching): False with batch_size=None
    collate_fn: Callable[[Any], Any]
    num_workers: int
    workers_given: bool  # the user chose num_workers (else workers must not fail where the main process would not)
    worker_type: WorkerType
    threads_per_worker: int
    worker_init_fn: Callable[[int], None] | None
    start_note: str | None  # added to the error of starting worker processes that cannot receive a part
    prefetch_factor: int | None
    persistent_workers: bool
    in_order: bool
    timeout_s: float
    pin_memory: bool
    seed: int
    seed_given: bool
    on_error: OnError
    max_skips: int | float
    device: torch.device | None
    device_transform: Callable[[Any], Any] | None
    device_prefetch: int
    decode: DecodeMode  # CPU or DEVICE, resolved (``loaders.batch_decode.choice``)
    decode_reason: str
    rank: int
    process_args: Mapping[str, Any]
    autotune: bool = False  # the controller runs (``resolve_autotune``)
    type_is_ours: bool = False  # worker_type "auto": the controller may switch threads and processes
    stats_log_s: float | None = None


    @classmethod
    def resolve(cls, loader: torch.utils.data.DataLoader[Any], options: LoaderOptions, topology: Topology, *,
                workers_given: bool) -> LoaderSettings:
        """The settings of ``loader`` (torch's constructor has run on it) with ``options``."""
        iterable = isinstance(loader.dataset, IterableDataset)
        generator = loader.generator
        workers = options.choose_workers(loader, workers_given=workers_given)
        decode = _choose_decode(loader, options)
        return cls(
            dataset=loader.dataset, iterable=iterable, batch_size=loader.batch_size, drop_last=loader.drop_last,
            auto_collation=loader.batch_sampler is not None, collate_fn=loader.collate_fn,
            num_workers=workers.num_workers, workers_given=workers_given, worker_type=workers.worker_type,
            threads_per_worker=options.threads_per_worker, worker_init_fn=loader.worker_init_fn,
            start_note=workers.start_note,
            prefetch_factor=loader.prefetch_factor, persistent_workers=loader.persistent_workers,
            in_order=loader.in_order, timeout_s=float(loader.timeout), pin_memory=loader.pin_memory,
            seed=resolve_seed(options.seed, generator, world_size=topology.world_size),
            seed_given=options.seed is not None or generator is not None, on_error=OnError(options.on_error),
            max_skips=options.max_skips, device=None if options.device is None else torch.device(options.device),
            device_transform=options.device_transform,
            device_prefetch=options.device_prefetch, decode=decode.mode, decode_reason=decode.reason,
            rank=topology.rank,
            process_args={**{name: getattr(loader, name) for name in PROCESS_ARGS}, "num_workers": workers.num_workers},
            autotune=resolve_autotune(options.autotune, workers_given=workers_given, iterable=iterable),
            type_is_ours=options.worker_type is WorkerType.AUTO, stats_log_s=options.stats_log_s)

    @property
    def plan_decode(self) -> bool:
        """Workers hand on images as decode plans, decoded on the device (``decode="device"``)."""
        return self.decode is DecodeMode.DEVICE

    @property
    def skip_errors(self) -> bool:
        """``on_error="skip"``."""
        return self.on_error is OnError.SKIP

    @property
    def worker_kind(self) -> str:
        """Who reads, as messages name it: "main-thread", "thread" or "process"."""
        in_this_thread = self.num_workers == 0 and not self.iterable
        return "main-thread" if in_this_thread else str(self.worker_type.value)
