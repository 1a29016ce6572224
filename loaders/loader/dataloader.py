"""The drop-in DataLoader: torch's arguments and semantics, built as a chain of small stages.

``from loaders import DataLoader`` replaces ``from torch.utils.data import DataLoader``.
What changes without any other edit:

- defaults: ``num_workers`` from ``loaders.read.topology.default_num_workers``,
  ``pin_memory`` when CUDA is available, persistent workers when there are workers;
- thread workers for datasets that declare ``releases_gil = True`` (no pickling, no
  inter-process copies; batches collated straight into pinned memory), torch's worker
  processes otherwise, with thread limits and per-(epoch, rank, worker) seeds;
- a deterministic, resumable order: ``state_dict()`` / ``load_state_dict()``;
- a dataset's own exception class in the training loop, with a note naming worker,
  batch and indices; no silent hangs; ``on_error="skip"`` with a budget;
- ``device=...``: batches arrive on the device, copied ahead on a side stream.

This class is the front: it validates the arguments, owns (epoch, position) in one
``loaders.loader.progress.Progress``, and builds the chain of ``loaders.loader.epoch_pass`` for each
``iter()``: plan -> workers -> failures -> device prefetch -> accounting.
It subclasses ``torch.utils.data.DataLoader`` (frameworks check ``isinstance``): torch's
constructor validates the stock arguments and holds their attributes; iteration,
workers and length are ours, and torch's iterator machinery is never used here.
"""

from __future__ import annotations

import logging
import math
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NoReturn, TypeVar

import torch
import torch.utils.data
from torch.utils.data import BatchSampler, IterableDataset, default_convert

from loaders.loader.collate import default_collate
from loaders.errors import ConfigError
from loaders.loader.failures import FailurePolicy
from loaders.loader.fetch import UNKNOWN_EPOCH, EpochSync
from loaders.loader.epoch_pass import LoaderIterator, Run
from loaders.loader.settings import LoaderOptions, OnError, WorkerType
from loaders.loader.batch_plan import BatchPlan, length_or_none
from loaders.loader.process_workers import ProcessWorkers
from loaders.loader.progress import (KEY_AHEAD, KEY_BATCH_SIZE, KEY_DATASET_LEN, KEY_PLAN, KEY_POSITION, KEY_SEED,
                              KEY_VERSION, STATE_VERSION, Progress, check_state)
from loaders.read.sampler import ShardSampler
from loaders.read.seeding import resolve_seed
from loaders.loader.stage import StatefulStage
from loaders.read.topology import Topology, default_num_workers
from loaders.loader.pool import Workers, make_workers

__all__ = ["DataLoader", "OnError", "WorkerType"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class _IntShardSampler(ShardSampler):
    """The loader's shuffled sampler: plain ints, over the dataset's length as it is now (datasets may grow)."""

    yields_ints = True

    def __init__(self, dataset: Any, *, seed: int) -> None:
        super().__init__(len(dataset), shuffle=True, seed=seed, topology=Topology())
        self._dataset = dataset

    def _follow_length(self) -> None:
        size = len(self._dataset)
        if size != self._num_samples:
            self._num_samples, self._len, self._cached = size, size, None

    def __len__(self) -> int:
        self._follow_length()
        return super().__len__()

    def indices(self, epoch: int | None = None) -> Any:
        self._follow_length()
        return super().indices(epoch)

    def __iter__(self) -> Iterator[int]:  # type: ignore[override]
        return (item.index for item in super().__iter__())


class _NoPlan:
    """The plan stage of an iterable dataset: its order is its own, nothing to save."""

    key = KEY_PLAN

    def state_dict(self, epoch: int) -> dict[str, Any]:
        return {"sampler": None, "world_size": None}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        return None


_NO_PLAN = _NoPlan()


class DataLoader(torch.utils.data.DataLoader[T]):
    """``torch.utils.data.DataLoader`` (a subclass) with the same arguments, plus keyword-only options.

    Stock arguments keep their meaning, validation (same ValueError/TypeError) and
    attributes, frozen after construction as torch freezes them. Where not given:
    ``num_workers = default_num_workers(Topology.detect())`` (0 for an IterableDataset,
    which only its own code can split between workers); ``pin_memory =
    torch.cuda.is_available()``; ``persistent_workers = num_workers > 0``;
    ``prefetch_factor = 2`` batches per worker, for threads as for processes.

    worker_type: "auto" (threads when ``dataset.releases_gil`` is true, processes
        otherwise and for iterable datasets), "thread" or "process".
    threads_per_worker: intra-op/OpenMP/BLAS threads inside each worker *process*.
    seed: base seed of the order and of worker seeds; None: in a distributed job the
        same on every rank (``loaders.read.seeding.resolve_seed``), else drawn from
        ``generator`` (else torch's default generator) at construction.
    on_error, max_skips: "raise" (default) raises the first failing sample's exception;
        "skip" drops failing samples (map-style datasets), counted per epoch and kept in
        ``state_dict``, SkipBudgetError past ``max_skips``.
    device, device_transform, device_prefetch: yield batches on ``device``, copied
        ``device_prefetch`` (default 2) batches ahead on a side stream, ``device_transform``
        run there with each batch's (epoch, batch_index, rank) (``loaders.loader.keyed_transform``).

    Epochs: an epoch is one full pass; ``set_epoch(e)`` starts epoch ``e`` (after
    ``load_state_dict`` for the same epoch it keeps the resume). A sampler or batch
    sampler the user gave keeps its own epoch (its ``set_epoch`` is theirs to call). The
    dataset's ``set_epoch``, if any, is the user's until the first ``set_epoch`` here; from
    then on it is called where its samples are read, in every worker (until then worker
    processes restart when their copy may predate the user's last call). An iteration
    abandoned after one batch (a peek, a shape probe) does not use up the epoch; one
    abandoned later does. ``close()`` (or ``with``) stops the workers.
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
        topology = Topology.detect()
        workers_given = num_workers is not None
        if num_workers is None:
            # An IterableDataset is split between workers only by its own code (get_worker_info):
            # workers it did not ask for would each yield the whole stream.
            num_workers = 0 if isinstance(dataset, IterableDataset) else default_num_workers(topology)
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
        self._workers_given = workers_given
        if collate_fn is None:  # ours collate straight into pinned memory; same batches as torch's
            self.collate_fn = default_collate if self._auto_collation else default_convert
        self.pin_memory = torch.cuda.is_available() if pin_memory is None else bool(pin_memory)
        self.rank = topology.rank
        self.options = options
        self.worker_type = options.resolve_worker_type(
            iterable=self._iterable, releases_gil=bool(getattr(self.dataset, "releases_gil", False)),
            has_mp_context=self.multiprocessing_context is not None)
        self.threads_per_worker = options.threads_per_worker
        self.on_error, self.max_skips = options.on_error, options.max_skips
        self.device, self.device_transform = options.device, options.device_transform
        self._seed_given = options.seed is not None or generator is not None
        self.seed = resolve_seed(options.seed, generator, world_size=topology.world_size)
        self._shuffle = bool(shuffle)
        self._own_sampler = sampler is None and batch_sampler is None and not self._iterable
        self._build_plan()
        self._progress = Progress()
        self._failures = FailurePolicy(self.max_skips)
        self._epoch_sync = EpochSync(self.dataset)  # this process's dataset: told each new epoch it reads
        self._shared: Workers | None = None  # persistent workers, kept between epochs
        self._copied_epoch: object = UNKNOWN_EPOCH  # the dataset's epoch when they started
        self._run: Run | None = None  # the latest primary iteration
        self._primary: weakref.ref[LoaderIterator] | None = None

    def _build_plan(self) -> None:
        """The plan stage over the sampler; ours (seeded, resumable) when the user gave none.

        Ours is written past torch's frozen ``sampler``/``batch_sampler`` (its
        ``__setattr__`` refuses them after construction): it must be what they hold.
        """
        if self._own_sampler:
            make = getattr(self.dataset, "default_sampler", None)
            sampler: Any = None
            if callable(make):
                sampler = make(shuffle=self._shuffle, seed=self.seed, drop_last=self.drop_last)
            elif self._shuffle:
                sampler = _IntShardSampler(self.dataset, seed=self.seed)
            if sampler is not None:
                self.__dict__["sampler"] = sampler
                if self.batch_size is not None:
                    self.__dict__["batch_sampler"] = BatchSampler(sampler, self.batch_size, self.drop_last)
        self._plan = None if self._iterable else BatchPlan(self.sampler, self.batch_sampler, owned=self._own_sampler)

    # ------------------------------------------------------------ length and epochs

    def __len__(self) -> int:
        """Batches per epoch, as the stock loader counts them (``len(dataset)`` based for iterables)."""
        if self._iterable:
            # Remembered as torch does: an iterator warns when the dataset yields more than this.
            length = self._IterableDataset_len_called = len(self.dataset)
            if self.batch_size is not None:
                length = length // self.batch_size if self.drop_last else math.ceil(length / self.batch_size)
            return length
        return len(self.batch_sampler if self.batch_sampler is not None else self.sampler)

    def _epoch_samples(self) -> int | None:
        return None if self._iterable else length_or_none(self.sampler)

    @property
    def epoch(self) -> int:
        """The epoch the next (or current) iteration reads."""
        return self._progress.epoch

    @property
    def batches_consumed(self) -> int:
        """Batches of the current epoch handed to the training loop so far (0 at an epoch start)."""
        return self._progress.position

    @property
    def skipped(self) -> int:
        """Samples skipped so far this epoch (``on_error="skip"``)."""
        return self._failures.skipped(self._progress.epoch)

    def set_epoch(self, epoch: int) -> None:
        """Read ``epoch`` next, from its start; after ``load_state_dict`` for this same epoch, from the saved position.

        Ends a running iteration. Only the loader's own sampler follows (a sampler the
        user gave keeps the epoch the user sets on it).
        """
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ConfigError(f"'epoch' must be a non-negative int (got {epoch!r} that is a {type(epoch).__name__})")
        self._epoch_sync.drive()  # from now on the dataset's set_epoch follows this one's, in every worker
        last = self._run
        self._end_iteration()
        self._undo_probe(last)  # a probe before set_epoch (a shape check after a resume) moves nothing
        progress = self._progress
        if progress.is_just_after(epoch) and (total := self._batches_per_epoch()) is not None:
            # Saved right after this epoch's last batch: what is left of it is nothing (the
            # next pass yields no batch and ends it), not the whole epoch again.
            progress.epoch, progress.position = epoch, total
            return
        if progress.epoch == epoch and (progress.resume_pending or (progress.position == 0 and not progress.ahead)):
            return
        progress.next_epoch(epoch)

    def _batches_per_epoch(self) -> int | None:
        try:
            return len(self)
        except TypeError:  # a sampler or iterable without a length
            return None

    # ------------------------------------------------------------ iteration

    def __iter__(self) -> LoaderIterator:  # type: ignore[override]
        """One epoch: its (remaining) batches. A second iterator while this one runs reads beside it."""
        run = self._begin_run()
        iterator = LoaderIterator(self, run)
        if run.primary:
            self._primary = weakref.ref(iterator)
        return iterator

    def _begin_run(self) -> Run:
        current = self._primary() if self._primary is not None else None
        last = self._run
        if current is not None and last is not None and not (last.finished or last.closed):
            return Run(last.start.snapshot(), primary=False)  # the running pass stays the loader's
        if last is not None and not last.finished and self._progress.epoch == last.start.epoch:
            if not self._undo_probe(last):  # abandoned part-way: it counts as an epoch, as a new stock pass would
                self._progress.next_epoch()
        run = Run(self._progress.snapshot(), failures=self._failures.state_dict(self._progress.epoch))
        self._run = run
        return run

    def _undo_probe(self, run: Run | None) -> bool:
        """If ``run`` was a probe (abandoned after at most one batch of this epoch: a peek, a shape
        probe), undo it: the epoch starts over from where the probe did. True if undone."""
        if run is None or not run.is_probe or self._progress.epoch != run.start.epoch:
            return False
        self._progress = run.start.snapshot()
        self._failures.load_state_dict(run.failures)
        if self._plan is not None:
            self._plan.restart_epoch(run.start.epoch)
        return True

    def _end_iteration(self) -> None:
        """Stop the running primary iteration (it moves nothing from now on)."""
        current = self._primary() if self._primary is not None else None
        self._primary, self._run = None, None
        if current is not None:
            current.close()

    def _get_iterator(self) -> NoReturn:
        # Torch's iterator would start its own workers, outside our order, seeds and resume state.
        raise TypeError(f"{type(self).__module__}.{type(self).__name__} iterates with its own workers: "
                        "use iter(loader), not torch.utils.data.DataLoader.__iter__")

    # ------------------------------------------------------------ workers

    def _worker_kind(self) -> str:
        return "main-thread" if self.num_workers == 0 and not self._iterable else str(self.worker_type.value)

    def _workers_for(self, *, private: bool) -> Workers:
        """The primary pass's workers (kept when persistent), or a private set for a detached pass."""
        if not private and self._shared is not None:
            if not self._copies_are_stale(self._shared):
                return self._shared
            self._shared.close()
            self._shared = None
        workers = make_workers(self)
        if not private and self.persistent_workers:
            self._shared, self._copied_epoch = workers, self._epoch_sync.observe()
        return workers

    def _copies_are_stale(self, workers: Workers) -> bool:
        """Whether persistent worker processes hold a copy of the dataset from before the user's
        own ``dataset.set_epoch`` (no ``loader.set_epoch`` yet): they restart to copy it afresh,
        as the stock loader's default (non-persistent) workers would. Unless the dataset shows
        its ``epoch`` unchanged, a new pass counts as a change."""
        if not (isinstance(workers, ProcessWorkers) and workers.copies_dataset and self._epoch_sync.user_owned):
            return False
        now = self._epoch_sync.observe()
        return now is UNKNOWN_EPOCH or now != self._copied_epoch

    def _release_workers(self, workers: Workers, *, failed: bool, finalizing: bool = False) -> None:
        """A pass ended: keep persistent workers unless it failed, else stop them.

        Threads are joined (~2 s at most) unless the pass failed (a hung thread is not waited
        for); processes are not joined from a finaliser, where a join can stall whatever the
        garbage collector interrupted (they are told to stop and terminated).
        """
        if workers is self._shared:
            if not failed:
                return
            self._shared = None
        workers.close(wait=not failed and not (finalizing and isinstance(workers, ProcessWorkers)))

    def close(self) -> None:
        """End the current iteration and stop all workers (threads joined, processes shut down)."""
        self._end_iteration()
        shared, self._shared = self._shared, None
        if shared is not None:
            shared.close()

    def __enter__(self) -> DataLoader[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        # No joins in a finaliser: signal the threads; process workers stop in their own finaliser.
        shared = self.__dict__.get("_shared")
        if shared is not None:
            shared.close(wait=False)

    # ------------------------------------------------------------ resume state

    def state_dict(self) -> dict[str, Any]:
        """The resume state: a small nest of plain values, one key per stage (see ``loaders.loader.progress``)."""
        return {
            KEY_VERSION: STATE_VERSION,
            **self._progress.state(),
            KEY_SEED: self.seed,
            KEY_BATCH_SIZE: self.batch_size,
            KEY_DATASET_LEN: length_or_none(self.dataset),
            **{stage.key: stage.state_dict(self._progress.epoch) for stage in self._stages()},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state``: the next iteration yields the batches the saved run had not yet received.

        Raises ConfigError when the state is malformed or from another setup (dataset
        length, batch size, seed given explicitly), or when the order cannot be replayed
        (a random sampler without state, an iterable dataset mid-epoch).
        """
        check_state(state, dataset_len=length_or_none(self.dataset), batch_size=self.batch_size,
                    seed=self.seed if self._seed_given else None)
        if state[KEY_POSITION] or state[KEY_AHEAD]:
            if self._plan is None:
                raise ConfigError("cannot resume an IterableDataset mid-epoch: the loader does not know its order; "
                                  "resume at an epoch boundary or make the dataset resume itself")
            self._plan.check_resumable()
        self._end_iteration()
        if state[KEY_SEED] != self.seed:
            logger.info("DataLoader: resuming with the saved seed %d instead of the drawn seed %d",
                        state[KEY_SEED], self.seed)
            self.seed = int(state[KEY_SEED])
            self.close()
            self._build_plan()
        for stage in self._stages():
            stage.load_state_dict(state[stage.key])
        self._progress.restore(state)

    def _stages(self) -> list[StatefulStage]:
        """The chain's stateful stages; each one's state nests under its key."""
        return [self._plan if self._plan is not None else _NO_PLAN, self._failures]
