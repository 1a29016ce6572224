"""The drop-in DataLoader: torch's arguments and semantics, thread or process workers, resumable.

``from loaders import DataLoader`` replaces ``from torch.utils.data import DataLoader``.
What changes without any other edit:

- defaults: ``num_workers`` from ``loaders.topology.default_num_workers``,
  ``pin_memory`` when CUDA is available, persistent workers when there are workers;
- thread workers for datasets that declare ``releases_gil = True`` (no pickling, no
  inter-process copies; batches collated straight into pinned memory), torch's worker
  processes otherwise, with thread limits and per-(epoch, worker) seeds applied;
- a deterministic, resumable order: ``state_dict()`` / ``load_state_dict()``;
- worker failures re-raised as ``WorkerError`` naming worker, batch and indices; no
  silent hangs; ``on_error="skip"`` with a budget;
- ``device=...``: batches arrive on the device, copied ahead on a side stream.

An epoch is one ``__iter__``: the epoch's batches (lists of sampler indices) are listed
up front, the ones already consumed (after a resume) are left out, and the rest run.
"""

from __future__ import annotations

import enum
import logging
import math
import warnings
import weakref
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import torch
import torch.utils.data
from torch.utils.data import BatchSampler, IterableDataset, SequentialSampler, default_convert

from loaders.collate import (
    BatchBuilder,
    BatchOutcome,
    CollateGuard,
    PinAfter,
    Skip,
    default_collate,
    pinned_collate,
    raise_failure,
)
from loaders.errors import ConfigError, SkipBudgetError
from loaders.limits import WorkerInit
from loaders.prefetch import DevicePrefetcher
from loaders.sampler import ShardSampler
from loaders.topology import Topology, default_num_workers
from loaders.workers import ProcessWorkers, ThreadWorkers

__all__ = ["DataLoader", "OnError", "WorkerType"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

STATE_VERSION = 1
KEY_VERSION = "version"
KEY_EPOCH = "epoch"
KEY_BATCHES_CONSUMED = "batches_consumed"
KEY_BATCHES_AHEAD = "batches_ahead"  # received out of order (in_order=False) past the prefix
KEY_SAMPLES_SEEN = "samples_seen"
KEY_SKIPPED = "skipped"
KEY_SEED = "seed"
KEY_BATCH_SIZE = "batch_size"
KEY_DATASET_LEN = "dataset_len"
KEY_SAMPLER = "sampler"
_STATE_KEYS = (KEY_VERSION, KEY_EPOCH, KEY_BATCHES_CONSUMED, KEY_SAMPLES_SEEN, KEY_SKIPPED, KEY_SEED,
               KEY_BATCH_SIZE, KEY_DATASET_LEN, KEY_SAMPLER)

# Stock arguments handed on to torch's loader when workers are processes.
_PROCESS_ARGS = ("num_workers", "pin_memory", "timeout", "multiprocessing_context", "generator", "prefetch_factor",
                 "persistent_workers", "pin_memory_device", "in_order", "batch_size", "drop_last")

# Set once at construction, like the stock loader (its __setattr__ raises ValueError).
_FROZEN_ATTRS = frozenset({"batch_size", "batch_sampler", "sampler", "drop_last", "dataset", "persistent_workers"})


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
        raise ConfigError(f"{name!r} must be one of {choices} (got {value!r} that is a {type(value).__name__})") from err


@dataclass(frozen=True)
class LoaderOptions:
    """The DataLoader's own keyword options (beyond torch's), validated once.

    max_skips: with on_error="skip", samples that may be skipped per epoch: an int count,
    a float fraction 0 < f < 1 of the epoch's samples, or ``math.inf``.
    """

    worker_type: WorkerType = WorkerType.AUTO
    threads_per_worker: int = 1
    seed: int | None = None
    on_error: OnError = OnError.RAISE
    max_skips: int | float = 0
    device: torch.device | None = None
    device_transform: Callable[[Any], Any] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "worker_type", _choice("worker_type", self.worker_type, WorkerType))
        object.__setattr__(self, "on_error", _choice("on_error", self.on_error, OnError))
        for name, value, minimum in (("threads_per_worker", self.threads_per_worker, 1), ("seed", self.seed, 0)):
            if (value is not None or name != "seed") and (
                    isinstance(value, bool) or not isinstance(value, int) or value < minimum):
                kind = "a positive int" if minimum else "a non-negative int or None"
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

    def allowed_skips(self, epoch_samples: int) -> float:
        """How many skips an epoch of ``epoch_samples`` samples may have."""
        if isinstance(self.max_skips, float) and self.max_skips < 1:
            return math.floor(self.max_skips * epoch_samples)
        return self.max_skips


@dataclass
class _Progress:
    """Where the consumer is in the epochs; what ``state_dict`` saves."""

    epoch: int = 0
    consumed: int = 0  # batch positions 0..consumed-1 all received this epoch
    ahead: set[int] = field(default_factory=set)  # received past the prefix (in_order=False)
    samples_seen: int = 0  # samples received in batches, all epochs
    skipped: int = 0  # samples skipped this epoch
    in_epoch: bool = False  # an iteration of `epoch` started and has not finished
    resume_pending: bool = False  # loaded from a state: the next iteration continues `epoch`
    total_batches: int | None = None  # batches in this epoch; None while unknown (iterable datasets)
    epoch_samples: int = 0  # samples in this epoch, for a fractional skip budget
    sizes: dict[int, int] = field(default_factory=dict)  # position -> samples requested, for advance()

    def receive(self, position: int) -> list[int]:
        """Record batch ``position`` as received; returns the positions that joined the prefix."""
        if position < 0:  # iterable dataset: batches arrive in order, unnumbered
            self.consumed += 1
            return []
        self.ahead.add(position)
        joined = []
        while self.consumed in self.ahead:
            self.ahead.remove(self.consumed)
            joined.append(self.consumed)
            self.consumed += 1
        return joined

    def next_epoch(self, epoch: int | None = None) -> None:
        self.epoch = self.epoch + 1 if epoch is None else epoch
        self.consumed, self.ahead, self.skipped, self.sizes = 0, set(), 0, {}
        self.in_epoch = self.resume_pending = False
        self.total_batches = None


@dataclass
class _Delivery:
    """What one batch handed to the consumer accounts for (with fully skipped batches before it)."""

    positions: list[int] = field(default_factory=list)
    num_samples: int = 0
    skips: list[Skip] = field(default_factory=list)

    def add(self, outcome: BatchOutcome) -> None:
        self.positions.append(outcome.position)
        self.num_samples += outcome.num_samples
        self.skips.extend(outcome.skips)


class _IntShardSampler(ShardSampler):
    """ShardSampler yielding plain ints: a user's dataset indexes with them, not SampleIndex."""

    def __iter__(self) -> Iterator[int]:  # type: ignore[override]
        return (item.index for item in super().__iter__())


class DataLoader(Generic[T]):
    """``torch.utils.data.DataLoader`` with the same arguments, plus keyword-only options.

    Stock arguments keep their meaning and validation (same ValueError/TypeError). Where
    not given: ``num_workers = default_num_workers(Topology.detect())``; ``pin_memory =
    torch.cuda.is_available()``; ``persistent_workers = num_workers > 0``;
    ``prefetch_factor = 2`` batches per worker, for threads as for processes (at most
    ``num_workers * prefetch_factor`` batches requested ahead).

    worker_type: "auto" (threads when ``dataset.releases_gil`` is true, processes
        otherwise and for iterable datasets), "thread" or "process".
    threads_per_worker: intra-op/OpenMP/BLAS threads inside each worker *process*
        (``loaders.limits.limit_threads``). Thread workers share the process's pools, which
        cannot be limited per thread without throttling the training step: not applied.
    seed: base seed of the order and of worker seeds; None draws one from ``generator``
        (else torch's default generator) at construction, like the stock loader.
    on_error, max_skips: "raise" (default) ends the epoch with WorkerError at the first
        failing sample; "skip" drops failing samples (map-style datasets), counted per
        epoch and kept in ``state_dict``, SkipBudgetError past ``max_skips``.
    device, device_transform: yield batches on ``device`` through
        ``loaders.prefetch.DevicePrefetcher`` (``device_transform`` runs there).

    Worker processes: torch's own, with ``loaders.limits.WorkerInit`` (thread limits, then
    random/numpy/torch seeded from (seed, epoch, worker_id), then the user's
    worker_init_fn); persistent workers re-seed at each epoch's first batch (map-style
    datasets; an iterable dataset's persistent workers keep the streams of their start).
    Thread workers share the global RNGs (use ``loaders.order.sample_rng`` for per-sample
    randomness), call ``dataset[i]`` concurrently, and run the user's worker_init_fn once
    per thread. ``close()`` (or ``with``) stops the workers; so does garbage collection.
    Resume: ``state_dict()`` / ``load_state_dict()``; ``epoch`` is the epoch being read.
    """

    # Drop-in signature: torch's 17 parameters must stay positional-compatible.
    def __init__(
        self,
        dataset: Any,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Any = None,
        batch_sampler: Any = None,
        num_workers: int | None = None,
        collate_fn: Callable[[Any], Any] | None = None,
        pin_memory: bool | None = None,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable[[int], None] | None = None,
        multiprocessing_context: Any = None,
        generator: torch.Generator | None = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool | None = None,
        pin_memory_device: str = "",
        in_order: bool = True,
        worker_type: str = "auto",
        threads_per_worker: int = 1,
        seed: int | None = None,
        on_error: str = "raise",
        max_skips: int | float = 0,
        device: str | torch.device | None = None,
        device_transform: Callable[[Any], Any] | None = None,
    ) -> None:
        self.__dict__["_initialized"] = False
        options = LoaderOptions(worker_type, threads_per_worker, seed, on_error, max_skips, device, device_transform)
        if num_workers is None:
            num_workers = default_num_workers(Topology.detect())
        if persistent_workers is None:
            persistent_workers = isinstance(num_workers, int) and num_workers > 0
        # Torch validates the stock arguments (same errors) and builds the default
        # samplers; constructing it starts nothing.
        stock = torch.utils.data.DataLoader(
            dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn,
            bool(pin_memory), drop_last, timeout, worker_init_fn, multiprocessing_context, generator,
            prefetch_factor=prefetch_factor, persistent_workers=persistent_workers,
            pin_memory_device=pin_memory_device, in_order=in_order)
        self._adopt_stock(stock, collate_fn)
        self.pin_memory = torch.cuda.is_available() if pin_memory is None else bool(pin_memory)
        self._adopt_options(options, generator)
        self._shuffle = bool(shuffle)
        self._own_sampler = sampler is None and batch_sampler is None and not self._iterable
        if self._own_sampler:
            self._install_default_sampler()
        self._progress = _Progress()
        self._active: weakref.ref[Generator[Any, None, None]] | None = None
        self._threads: ThreadWorkers | None = None
        self._processes: ProcessWorkers | None = None
        self._sampler_restored = False  # a loaded sampler state will list only the remaining batches
        self.__dict__["_initialized"] = True

    def _adopt_stock(self, stock: torch.utils.data.DataLoader, collate_fn: Callable[[Any], Any] | None) -> None:
        """Take the validated stock attributes; ours replace torch's default collate."""
        for name in ("dataset", "num_workers", "prefetch_factor", "timeout", "worker_init_fn",
                     "multiprocessing_context", "in_order", "pin_memory_device", "batch_size", "drop_last",
                     "sampler", "batch_sampler", "generator", "persistent_workers"):
            setattr(self, name, getattr(stock, name))
        self._iterable = isinstance(self.dataset, IterableDataset)
        self._auto_collation = self.batch_sampler is not None or (self._iterable and self.batch_size is not None)
        if collate_fn is None:
            collate_fn = default_collate if self._auto_collation else default_convert
        self.collate_fn = collate_fn

    def _adopt_options(self, options: LoaderOptions, generator: torch.Generator | None) -> None:
        self.options = options
        self.worker_type = self._resolve_worker_type(options.worker_type)
        self.threads_per_worker = options.threads_per_worker
        self.on_error, self.max_skips = options.on_error, options.max_skips
        self.device, self.device_transform = options.device, options.device_transform
        self._seed_given = options.seed is not None or generator is not None
        self.seed = options.seed if options.seed is not None else _draw_seed(generator)

    def _resolve_worker_type(self, requested: WorkerType) -> WorkerType:
        if self.options.on_error is OnError.SKIP and self._iterable:
            raise ConfigError("on_error='skip' needs a map-style dataset: an iterable dataset's iterator cannot "
                              "go on after it raised")
        if requested is WorkerType.AUTO:
            if self._iterable or self.multiprocessing_context is not None:
                return WorkerType.PROCESS
            return WorkerType.THREAD if getattr(self.dataset, "releases_gil", False) else WorkerType.PROCESS
        if requested is WorkerType.THREAD and self._iterable:
            raise ConfigError("worker_type='thread' needs a map-style dataset: an IterableDataset shards itself "
                              "with get_worker_info() in worker processes; use worker_type='process' or 'auto'")
        if requested is WorkerType.THREAD and self.multiprocessing_context is not None:
            raise ConfigError("'multiprocessing_context' applies to worker processes, not worker_type='thread'")
        return requested

    def _install_default_sampler(self) -> None:
        """The dataset's ``default_sampler`` if it has one, else ours when shuffling."""
        make = getattr(self.dataset, "default_sampler", None)
        if callable(make):
            sampler = make(shuffle=self._shuffle, seed=self.seed, drop_last=self.drop_last)
        elif self._shuffle:
            sampler = _IntShardSampler(len(self.dataset), shuffle=True, seed=self.seed, topology=Topology())
        else:
            return
        self.__dict__["sampler"] = sampler
        if self.batch_size is not None:
            self.__dict__["batch_sampler"] = BatchSampler(sampler, self.batch_size, self.drop_last)

    def __setattr__(self, name: str, value: Any) -> None:
        if self.__dict__.get("_initialized") and name in _FROZEN_ATTRS:
            raise ValueError(f"{name} attribute should not be set after {type(self).__name__} is initialized")
        super().__setattr__(name, value)

    # ------------------------------------------------------------ length and epochs

    def __len__(self) -> int:
        """Batches per epoch, as the stock loader counts them (``len(dataset)`` based for iterables)."""
        if self._iterable:
            length = len(self.dataset)
            if self.batch_size is not None:
                length = length // self.batch_size if self.drop_last else math.ceil(length / self.batch_size)
            return length
        return len(self.batch_sampler if self.batch_sampler is not None else self.sampler)

    @property
    def epoch(self) -> int:
        """The epoch the next (or current) iteration reads."""
        return self._progress.epoch

    @property
    def skipped(self) -> int:
        """Samples skipped so far this epoch (``on_error="skip"``)."""
        return self._progress.skipped

    def set_epoch(self, epoch: int) -> None:
        """Read ``epoch`` next, from its start; forwarded to the sampler, batch sampler and dataset."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ConfigError(f"'epoch' must be a non-negative int (got {epoch!r} that is a {type(epoch).__name__})")
        self._close_active()
        self._progress.next_epoch(epoch)
        self._forward_epoch(epoch)

    def _forward_epoch(self, epoch: int) -> None:
        done: list[int] = []
        for part in (self.sampler, self.batch_sampler, self.dataset):
            set_epoch = getattr(part, "set_epoch", None)
            if callable(set_epoch) and id(part) not in done:
                set_epoch(epoch)
                done.append(id(part))

    # ------------------------------------------------------------ iteration

    def __iter__(self) -> Iterator[T]:
        """One epoch: yields its (remaining) batches; a new ``__iter__`` ends the previous one."""
        self._close_active()
        progress = self._progress
        if progress.in_epoch and not progress.resume_pending:
            progress.next_epoch()  # the previous iteration was abandoned: it still counts as an epoch
        progress.in_epoch, progress.resume_pending = True, False
        self._forward_epoch(progress.epoch)
        generator = self._iterate()
        # A weak reference: `break` frees the generator, whose finally stops the workers.
        self._active = weakref.ref(generator)
        return generator

    def _iterate(self) -> Generator[T, None, None]:
        outcomes = self._run_epoch()
        deliveries: deque[_Delivery] = deque()
        batches = self._unwrap(outcomes, deliveries)
        source: Iterable[Any] = batches
        if self.device is not None:
            source = DevicePrefetcher(batches, self.device, transform=self.device_transform)
        failed = False
        try:
            for batch in source:
                self._account(deliveries.popleft())
                yield batch
            while deliveries:  # trailing batches whose samples were all skipped
                self._account(deliveries.popleft())
            if self._progress.in_epoch:
                self._progress.next_epoch()  # epoch length was unknown (iterable dataset)
        except Exception:
            failed = True
            raise
        finally:
            for part in (source, batches, outcomes):
                close = getattr(part, "close", None)
                if callable(close):
                    close()
            if failed or not self.persistent_workers:
                # After a failure, fresh workers for the next epoch; a hung thread is not waited for.
                self._shutdown_workers(wait=not failed)

    def _run_epoch(self) -> Iterator[BatchOutcome]:
        if self._iterable:
            return self._process_workers().run(None, self._progress.epoch)
        jobs = self._epoch_jobs()
        if self.num_workers == 0:
            builder = self._batch_builder()
            return (builder(0, position, indices) for position, indices in jobs)
        if self.worker_type is WorkerType.THREAD:
            return self._thread_workers().run(jobs)
        return self._process_workers().run(jobs, self._progress.epoch)

    def _epoch_jobs(self) -> list[tuple[int, list[Any]]]:
        """(position, indices) of the batches of this epoch not yet received, in order."""
        progress = self._progress
        if self.batch_sampler is not None:
            listed = [list(batch) for batch in self.batch_sampler]
        else:
            listed = [[index] for index in self.sampler]
        # A sampler restored from its own state lists only the batches after the prefix.
        base = progress.consumed if self._sampler_restored else 0
        self._sampler_restored = False
        progress.total_batches = base + len(listed)
        try:
            progress.epoch_samples = len(self.sampler)
        except TypeError:
            progress.epoch_samples = sum(len(b) for b in listed)
        remaining = [(base + i, batch) for i, batch in enumerate(listed) if base + i >= progress.consumed]
        # Sizes of every remaining position, those received ahead included: advance() needs them all.
        progress.sizes = {position: len(batch) for position, batch in remaining}
        jobs = [(position, batch) for position, batch in remaining if position not in progress.ahead]
        if progress.consumed >= progress.total_batches:
            progress.next_epoch()  # resumed exactly at the end: nothing left of this epoch
        return jobs

    def _unwrap(self, outcomes: Iterator[BatchOutcome], deliveries: deque[_Delivery]) -> Generator[Any, None, None]:
        """Outcomes -> batches; failures raise WorkerError, fully skipped batches ride with the next."""
        kind = "main-thread" if self.num_workers == 0 else str(self.worker_type.value)
        pending = _Delivery()
        for outcome in outcomes:
            if outcome.failure is not None:
                raise_failure(outcome, kind)
            pending.add(outcome)
            if outcome.batch is None:
                continue
            deliveries.append(pending)
            pending = _Delivery()
            yield outcome.batch
        if pending.positions:
            deliveries.append(pending)

    def _account(self, delivery: _Delivery) -> None:
        """The consumer received a batch: move the position, count samples and skips."""
        progress = self._progress
        advance = getattr(self._state_part(), "advance", None)
        for position in delivery.positions:
            for joined in progress.receive(position):
                if callable(advance):
                    advance(progress.sizes.pop(joined, 0))
        progress.samples_seen += delivery.num_samples
        if delivery.skips:
            self._count_skips(delivery.skips)
        if progress.total_batches is not None and progress.consumed >= progress.total_batches:
            progress.next_epoch()

    def _count_skips(self, skips: list[Skip]) -> None:
        progress = self._progress
        progress.skipped += len(skips)
        for skip in skips:
            logger.warning("skipped sample %r in epoch %d: %s", skip.index, progress.epoch, skip.error)
        allowed = self.options.allowed_skips(progress.epoch_samples)
        if progress.skipped > allowed:
            raise SkipBudgetError(
                f"on_error='skip' skipped {progress.skipped} samples in epoch {progress.epoch}, more than "
                f"max_skips={self.max_skips} allows ({allowed} of {progress.epoch_samples} samples); "
                f"last: sample {skips[-1].index!r}: {skips[-1].error}")

    # ------------------------------------------------------------ workers

    def _pin(self) -> bool:
        return self.pin_memory and torch.cuda.is_available()

    def _batch_builder(self) -> BatchBuilder:
        """Collate for the main thread and thread workers: straight into pinned memory."""
        collate = self.collate_fn
        if self.pin_memory and not self._pin():
            warnings.warn("'pin_memory' is True but CUDA is not available: batches are not pinned", stacklevel=3)
        if self._pin():
            collate = pinned_collate if collate is default_collate else PinAfter(collate)
        return BatchBuilder(self.dataset, collate, self._auto_collation, self.on_error is OnError.SKIP)

    def _thread_workers(self) -> ThreadWorkers:
        if self._threads is None:
            self._threads = ThreadWorkers(
                self._batch_builder(), num_workers=self.num_workers,
                max_in_flight=self.num_workers * (self.prefetch_factor or 1), timeout_s=float(self.timeout),
                in_order=self.in_order, init=self.worker_init_fn)
        return self._threads

    def _process_workers(self) -> ProcessWorkers:
        if self._processes is None:
            self._processes = ProcessWorkers(
                self.dataset, collate=CollateGuard(self.collate_fn, self._auto_collation),
                stock={name: getattr(self, name) for name in _PROCESS_ARGS},
                init=WorkerInit(self.seed, self.threads_per_worker, self.worker_init_fn),
                skip_errors=self.on_error is OnError.SKIP)
        return self._processes

    def _shutdown_workers(self, *, wait: bool = True) -> None:
        threads, self._threads = self._threads, None
        processes, self._processes = self._processes, None
        if threads is not None:
            threads.close(wait=wait)
        if processes is not None:
            processes.close()

    def _close_active(self) -> None:
        generator = self._active() if self._active is not None else None
        self._active = None
        if generator is not None:
            generator.close()

    def close(self) -> None:
        """End the current iteration and stop all workers (threads joined, processes shut down)."""
        self._close_active()
        self._shutdown_workers()

    def __enter__(self) -> DataLoader[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        # No joins in a finaliser: signal the threads; torch's iterator stops its processes.
        threads = self.__dict__.get("_threads")
        if threads is not None:
            threads.close(wait=False)

    # ------------------------------------------------------------ resume state

    def state_dict(self) -> dict[str, Any]:
        """The resume state: small, plain values (see the KEY_* constants)."""
        progress = self._progress
        part = self._state_part()
        return {
            KEY_VERSION: STATE_VERSION,
            KEY_EPOCH: progress.epoch,
            KEY_BATCHES_CONSUMED: progress.consumed,
            KEY_BATCHES_AHEAD: sorted(progress.ahead),
            KEY_SAMPLES_SEEN: progress.samples_seen,
            KEY_SKIPPED: progress.skipped,
            KEY_SEED: self.seed,
            KEY_BATCH_SIZE: self.batch_size,
            KEY_DATASET_LEN: _length(self.dataset),
            KEY_SAMPLER: part.state_dict() if _has_state(part) else None,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state``: the next ``__iter__`` yields the batches the saved run had not yet received.

        Raises ConfigError when the state is malformed or from another setup (dataset
        length, batch size, seed given explicitly), or when the order cannot be replayed
        (a random sampler without state, an iterable dataset mid-epoch).
        """
        self._check_state(state)
        consumed, ahead = int(state[KEY_BATCHES_CONSUMED]), set(state.get(KEY_BATCHES_AHEAD, ()))
        if consumed or ahead:
            self._check_replayable()
        self._close_active()
        if state[KEY_SEED] != self.seed:
            self._adopt_seed(int(state[KEY_SEED]))
        part = self._state_part()
        self._sampler_restored = False
        if state[KEY_SAMPLER] is not None and _has_state(part):
            part.load_state_dict(state[KEY_SAMPLER])
            # Only a sampler that is told what was consumed (advance) resumes by itself.
            self._sampler_restored = callable(getattr(part, "advance", None))
        progress = self._progress
        progress.next_epoch(int(state[KEY_EPOCH]))
        progress.consumed, progress.ahead = consumed, ahead
        progress.samples_seen, progress.skipped = int(state[KEY_SAMPLES_SEEN]), int(state[KEY_SKIPPED])
        progress.resume_pending = True

    def _check_state(self, state: Mapping[str, Any]) -> None:
        if not isinstance(state, Mapping):
            raise ConfigError(f"DataLoader state must be a mapping (got {type(state).__name__})")
        missing = [key for key in _STATE_KEYS if key not in state]
        if missing:
            raise ConfigError(f"DataLoader state lacks {', '.join(map(repr, missing))} (got keys {sorted(state)})")
        if state[KEY_VERSION] != STATE_VERSION:
            raise ConfigError(f"DataLoader state version: expected {STATE_VERSION}, got {state[KEY_VERSION]!r}")
        expected = {KEY_DATASET_LEN: _length(self.dataset), KEY_BATCH_SIZE: self.batch_size}
        if self._seed_given:
            expected[KEY_SEED] = self.seed
        for key, value in expected.items():
            if state[key] != value:
                raise ConfigError(f"DataLoader state {key!r}: expected {value!r} (this loader), got {state[key]!r}; "
                                  "resume with the same dataset, batch size and seed")

    def _adopt_seed(self, seed: int) -> None:
        """No seed was given here: take the saved run's, and rebuild what depends on it."""
        logger.info("DataLoader: resuming with the saved seed %d instead of the drawn seed %d", seed, self.seed)
        self.seed = seed
        self._shutdown_workers()
        if self._own_sampler:
            self._install_default_sampler()

    def _check_replayable(self) -> None:
        if self._iterable:
            raise ConfigError("cannot resume an IterableDataset mid-epoch: the loader does not know its order; "
                              "resume at an epoch boundary or make the dataset resume itself")
        part = self._state_part()
        if not _is_deterministic(part):
            raise ConfigError(f"cannot resume mid-epoch with {type(part).__name__}: its order is not reproducible; "
                              "use shuffle=True (a seeded, resumable order), SequentialSampler, or a sampler "
                              "with state_dict()/load_state_dict()")

    def _state_part(self) -> Any:
        """The sampler whose state is saved: a given batch_sampler with state, else the sampler."""
        if self.batch_sampler is not None and not isinstance(self.batch_sampler, BatchSampler):
            return self.batch_sampler
        return self.sampler


def _has_state(part: Any) -> bool:
    return callable(getattr(part, "state_dict", None)) and callable(getattr(part, "load_state_dict", None))


def _is_deterministic(part: Any) -> bool:
    if _has_state(part) or isinstance(part, (SequentialSampler, range, list, tuple)):
        return True
    return isinstance(part, BatchSampler) and _is_deterministic(part.sampler)


def _length(dataset: Any) -> int | None:
    try:
        return len(dataset)
    except TypeError:
        return None


def _draw_seed(generator: torch.Generator | None) -> int:
    """A non-negative 63-bit seed from ``generator`` (torch's default one when None), as torch draws its base seed."""
    return int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())
