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

It subclasses ``torch.utils.data.DataLoader`` (frameworks check ``isinstance``): torch's
constructor validates the stock arguments and holds their attributes; iteration, workers
and length are ours, and torch's iterator machinery is never used.
"""

from __future__ import annotations

import logging
import math
import warnings
import weakref
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from typing import Any, NoReturn, TypeVar

import torch
import torch.utils.data
from torch.utils.data import BatchSampler, IterableDataset, default_convert

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
from loaders.loader_options import LoaderOptions, OnError, WorkerType, draw_seed
from loaders.loader_state import (
    KEY_BATCHES_AHEAD,
    KEY_BATCHES_CONSUMED,
    KEY_SAMPLER,
    KEY_SEED,
    Delivery,
    Progress,
    build_state,
    check_replayable,
    check_state,
    has_state,
    length_or_none,
    accepts_keywords,
    start_transform_epoch,
)
from loaders.prefetch import DevicePrefetcher
from loaders.sampler import ShardSampler
from loaders.topology import Topology, default_num_workers
from loaders.workers import ProcessWorkers, ThreadWorkers

__all__ = ["DataLoader", "OnError", "WorkerType"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Stock arguments handed on to torch's loader when workers are processes.
_PROCESS_ARGS = ("num_workers", "pin_memory", "timeout", "multiprocessing_context", "generator", "prefetch_factor",
                 "persistent_workers", "pin_memory_device", "in_order", "batch_size", "drop_last")


class _IntShardSampler(ShardSampler):
    """ShardSampler yielding plain ints: a user's dataset indexes with them, not SampleIndex."""

    yields_ints = True

    def __iter__(self) -> Iterator[int]:  # type: ignore[override]
        return (item.index for item in super().__iter__())


class DataLoader(torch.utils.data.DataLoader[T]):
    """``torch.utils.data.DataLoader`` (a subclass) with the same arguments, plus keyword-only options.

    Stock arguments keep their meaning, validation (same ValueError/TypeError) and
    attributes, frozen after construction as torch freezes them. Where
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
    device, device_transform, device_prefetch: yield batches on ``device`` through
        ``loaders.prefetch.DevicePrefetcher``, ``device_prefetch`` batches (default 2) copied
        ahead on a side stream, ``device_transform`` run there. A transform taking
        ``epoch=`` and ``batch_index=`` (``loaders.augment.Augment``) gets each batch's true
        position; one with only ``set_epoch`` is told where the epoch (re)starts. Either
        way its randomness follows (seed, epoch, batch position), across resumes too.

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
        device_prefetch: int = 2,
    ) -> None:
        options = LoaderOptions(worker_type, threads_per_worker, seed, on_error, max_skips, device, device_transform,
                                device_prefetch)
        if num_workers is None:
            num_workers = default_num_workers(Topology.detect())
        if persistent_workers is None:
            persistent_workers = isinstance(num_workers, int) and num_workers > 0
        # Torch validates the user's own combination (its errors, in its order), sets its
        # attributes and default samplers; ours replace them below. It starts nothing.
        super().__init__(
            dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn,
            bool(pin_memory), drop_last, timeout, worker_init_fn, multiprocessing_context, generator,
            prefetch_factor=prefetch_factor, persistent_workers=persistent_workers,
            pin_memory_device=pin_memory_device, in_order=in_order)
        self._iterable = isinstance(self.dataset, IterableDataset)
        # torch's _auto_collation (batch_sampler is not None) also covers iterables: with a
        # batch_size, torch gives them a BatchSampler over its infinite sampler.
        if collate_fn is None:  # ours collate straight into pinned memory; same batches as torch's
            self.collate_fn = default_collate if self._auto_collation else default_convert
        self.pin_memory = torch.cuda.is_available() if pin_memory is None else bool(pin_memory)
        self._adopt_options(options, generator)
        self._shuffle = bool(shuffle)
        self._own_sampler = sampler is None and batch_sampler is None and not self._iterable
        if self._own_sampler:
            self._install_default_sampler()
        self._progress = Progress()
        self._active: weakref.ref[Generator[Any, None, None]] | None = None
        self._threads: ThreadWorkers | None = None
        self._processes: ProcessWorkers | None = None
        self._sampler_restored = False  # a loaded sampler state will list only the remaining batches

    def _adopt_options(self, options: LoaderOptions, generator: torch.Generator | None) -> None:
        self.options = options
        self.worker_type = options.resolve_worker_type(
            iterable=self._iterable, releases_gil=bool(getattr(self.dataset, "releases_gil", False)),
            has_mp_context=self.multiprocessing_context is not None)
        self.threads_per_worker = options.threads_per_worker
        self.on_error, self.max_skips = options.on_error, options.max_skips
        self.device, self.device_transform = options.device, options.device_transform
        self._seed_given = options.seed is not None or generator is not None
        self.seed = options.seed if options.seed is not None else draw_seed(generator)

    def _install_default_sampler(self) -> None:
        """The dataset's ``default_sampler`` if it has one, else ours when shuffling.

        Written past torch's frozen ``sampler``/``batch_sampler`` (its ``__setattr__``
        refuses them after construction): ours must be what torch's attributes hold, and
        a resume that adopts the saved seed rebuilds them.
        """
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
    def batches_consumed(self) -> int:
        """Batches of the current epoch handed to the training loop so far (0 at an epoch start)."""
        return self._progress.consumed

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

    def __iter__(self) -> Iterator[T]:  # type: ignore[override]
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

    def _get_iterator(self) -> NoReturn:
        # Torch's iterator would start its own workers, outside our order, seeds and resume state.
        raise TypeError(f"{type(self).__module__}.{type(self).__name__} iterates with its own workers: "
                        "use iter(loader), not torch.utils.data.DataLoader.__iter__")

    def _iterate(self) -> Generator[T, None, None]:
        outcomes = self._run_epoch()
        deliveries: deque[Delivery] = deque()
        batches = self._unwrap(outcomes, deliveries)  # (position, batch) pairs
        source: Iterable[tuple[int, Any]] = batches
        if self.device is not None:
            source = DevicePrefetcher(batches, self.device, depth=self.options.device_prefetch,
                                      transform=self._positioned_transform())
        failed = False
        try:
            for _, batch in source:
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
        if type(self.batch_sampler) is BatchSampler and isinstance(self.batch_sampler.sampler, ShardSampler):
            # ShardSampler lists batches as numpy slices: ~1 s less per 10^6 samples.
            listed: list[Any] = self.batch_sampler.sampler.batches(self.batch_sampler.batch_size,
                                                                   self.batch_sampler.drop_last)
        elif self.batch_sampler is not None:
            listed = [list(batch) for batch in self.batch_sampler]
        else:
            listed = [[index] for index in self.sampler]
        restored, self._sampler_restored = self._sampler_restored, False
        return self._progress.plan(listed, epoch_samples=length_or_none(self.sampler), after_prefix=restored)

    def _positioned_transform(self) -> Callable[[tuple[int, Any]], tuple[int, Any]] | None:
        """``device_transform`` applied to (position, batch) pairs inside the prefetcher.

        A transform that takes ``epoch=`` and ``batch_index=`` (``loaders.augment.Augment``)
        gets the batch's true position, so its randomness is keyed by (seed, epoch, batch
        position) even when batches are skipped whole or arrive out of order. Otherwise
        its ``set_epoch`` is told where the epoch resumes and it counts calls.
        """
        transform, epoch = self.device_transform, self._progress.epoch
        if transform is None:
            return None
        if accepts_keywords(transform, "epoch", "batch_index"):
            return lambda pair: (pair[0], transform(pair[1], epoch=epoch, batch_index=pair[0]))
        start_transform_epoch(transform, epoch, self._progress.consumed)
        return lambda pair: (pair[0], transform(pair[1]))

    def _unwrap(self, outcomes: Iterator[BatchOutcome], deliveries: deque[Delivery]
                ) -> Generator[tuple[int, Any], None, None]:
        """Outcomes -> (position, batch); failures raise WorkerError, fully skipped batches ride with the next."""
        kind = "main-thread" if self.num_workers == 0 else str(self.worker_type.value)
        pending = Delivery()
        for outcome in outcomes:
            if outcome.failure is not None:
                raise_failure(outcome, kind)
            pending.add(outcome)
            if outcome.batch is None:
                continue
            deliveries.append(pending)
            pending = Delivery()
            yield outcome.position, outcome.batch
        if pending.positions:
            deliveries.append(pending)

    def _account(self, delivery: Delivery) -> None:
        """The consumer received a batch: move the position, count samples and skips."""
        progress = self._progress
        progress.receive_delivery(delivery, getattr(self._state_part(), "advance", None))
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
        """The resume state: small, plain values (see the KEY_* constants of ``loaders.loader_state``)."""
        part = self._state_part()
        return build_state(self._progress, seed=self.seed, batch_size=self.batch_size,
                           dataset_len=length_or_none(self.dataset),
                           sampler=part.state_dict() if has_state(part) else None)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state``: the next ``__iter__`` yields the batches the saved run had not yet received.

        Raises ConfigError when the state is malformed or from another setup (dataset
        length, batch size, seed given explicitly), or when the order cannot be replayed
        (a random sampler without state, an iterable dataset mid-epoch).
        """
        check_state(state, dataset_len=length_or_none(self.dataset), batch_size=self.batch_size,
                    seed=self.seed if self._seed_given else None)
        if int(state[KEY_BATCHES_CONSUMED]) or set(state.get(KEY_BATCHES_AHEAD, ())):
            check_replayable(self._state_part(), iterable=self._iterable)
        self._close_active()
        if state[KEY_SEED] != self.seed:
            self._adopt_seed(int(state[KEY_SEED]))
        part = self._state_part()
        self._sampler_restored = False
        if state[KEY_SAMPLER] is not None and has_state(part):
            part.load_state_dict(state[KEY_SAMPLER])
            # Only a sampler that is told what was consumed (advance) resumes by itself.
            self._sampler_restored = callable(getattr(part, "advance", None))
        self._progress.restore(state)

    def _adopt_seed(self, seed: int) -> None:
        """No seed was given here: take the saved run's, and rebuild what depends on it."""
        logger.info("DataLoader: resuming with the saved seed %d instead of the drawn seed %d", seed, self.seed)
        self.seed = seed
        self._shutdown_workers()
        if self._own_sampler:
            self._install_default_sampler()

    def _state_part(self) -> Any:
        """The sampler whose state is saved: a given batch_sampler with state, else the sampler."""
        if self.batch_sampler is not None and not isinstance(self.batch_sampler, BatchSampler):
            return self.batch_sampler
        return self.sampler

