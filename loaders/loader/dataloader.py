"""The drop-in DataLoader: torch's arguments and semantics, a facade over the chain of small stages.

``from loaders import DataLoader`` replaces ``from torch.utils.data import DataLoader``.
What changes without any other edit:

- defaults: ``num_workers`` from ``loaders.read.topology.default_num_workers``,
  ``pin_memory`` when CUDA is available, persistent workers when there are workers;
- thread workers for up to 4 workers over datasets that declare ``releases_gil = True``, and
  at any count over datasets that declare ``light_items = True`` (no pickling, no
  inter-process copies; batches collated straight into pinned memory), torch's worker
  processes otherwise, with thread limits and per-(epoch, rank, worker) seeds;
- a deterministic, resumable order: ``state_dict()`` / ``load_state_dict()``;
- a dataset's own exception class in the training loop, with a note naming worker,
  batch and indices; no silent hangs; ``on_error="skip"`` with a budget;
- ``device=...``: batches arrive on the device, copied ahead on a side stream;
- ``decode="device"`` (the default on CUDA where nvImageCodec decodes): JPEGs decode on the device, a batch
  at a time, the workers only read bytes and draw crops (``loaders.batch_decode``).

This class is a facade: it resolves its arguments once into a frozen
``loaders.loader.settings.LoaderSettings``, and holds the owner of (epoch, position)
(``loaders.loader.progress.Progress``), the batch source (``loaders.loader.batch_source``),
the ``loaders.loader.pool.WorkerPool`` and the passes (``loaders.loader.epoch_pass``) that
each ``iter()`` runs: batch source -> workers -> failures -> device prefetch -> Progress.
It subclasses ``torch.utils.data.DataLoader`` (frameworks check ``isinstance``): torch's
constructor validates the stock arguments and holds their attributes; iteration,
workers and length are ours, and torch's iterator machinery is never used here.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, NoReturn, TypeVar

import torch
import torch.utils.data
from torch.utils.data import BatchSampler

from loaders.batch_decode.choice import DecodeMode
from loaders.errors import ConfigError
from loaders.loader.batch_plan import BatchPlan, own_sampler
from loaders.loader.batch_source import BatchSource, IterableSource, SourceRequest, length_or_none
from loaders.loader.decode_stage import decode_stage, decode_stats
from loaders.loader.epoch_pass import Chain, LoaderIterator, Passes
from loaders.loader.failures import FailurePolicy
from loaders.loader.global_source import GlobalSource, PositionedData
from loaders.loader.live import register_live
from loaders.loader.pool import WorkerPool
from loaders.loader.progress import KEY_DATASET_LEN, LOADER_KEYS, LOADER_STATE_VERSION, Progress, check_state
from loaders.state_keys import KEY_BATCH_SIZE, KEY_SEED, KEY_VERSION
from loaders.loader.settings import (LoaderOptions, LoaderSettings, OnError, ProcessWarningOnly, WorkerType,
                                     default_collate_fn, default_workers)
from loaders.loader.tuner import KEY_TUNED, LoaderStats, Tuner
from loaders.read.topology import loader_topology
from loaders.validate import check_int

__all__ = ["DataLoader", "DecodeMode", "OnError", "WorkerType"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class DataLoader(ProcessWarningOnly, torch.utils.data.DataLoader[T]):
    """``torch.utils.data.DataLoader`` (a subclass) with the same arguments, plus keyword-only options.

    Stock arguments keep their meaning, validation (same ValueError/TypeError) and
    attributes, frozen after construction as torch freezes them. Where not given:
    ``num_workers = default_num_workers(topology)`` (0 for an IterableDataset, which only
    its own code can split between workers); ``pin_memory = torch.cuda.is_available()``;
    ``persistent_workers = num_workers > 0``; ``prefetch_factor = 2`` batches per worker,
    for threads as for processes; ``collate_fn``: the dataset's declared
    ``default_collate_fn`` if it has one (with batching), else ours (torch's batches,
    collated into pinned memory). Without a sampler, a dataset with a ``batch_source``
    method (``loaders.TokenDataset``, ``loaders.Mixture``) supplies the batches' order and
    the resume state, and ``ShardDataset`` / ``ParquetShardDataset`` are read by global
    position too (``loaders.loader.global_source``): every rank the same number of batches,
    and a state saved on any rank resumes a job of any ranks x batch size (``order_digest``).

    Topology (rank, world size): the dataset's own ``topology`` when it has one (a launcher
    without torch.distributed), else torch.distributed's or RANK / WORLD_SIZE; a dataset's
    topology that disagrees with a process group or RANK / WORLD_SIZE is a ConfigError.

    worker_type: "auto", "thread" or "process". "auto" (``loaders.loader.worker_choice``):
        threads when the dataset declares ``releases_gil = True`` (its per-sample work runs
        without the GIL: this package's datasets with no transform or its decode
        transforms; a user's own transform only if it declares so) and ``num_workers <= 4``,
        or declares ``light_items = True`` (an item costs less than pickling it out of a
        process: ``TokenDataset``, ``Mixture``); processes otherwise, and for iterable
        datasets or a ``multiprocessing_context``.
        Under spawn or forkserver (Python 3.14's Linux default), a dataset, collate_fn or
        worker_init_fn that cannot be pickled gets threads (iterable: the main process)
        with one warning, unless processes were asked for (worker_type="process", a
        ``multiprocessing_context``, or ``num_workers`` given for an iterable dataset or one
        that does not release the GIL): then, as stock, the first ``iter()`` warns and raises
        pickle's error, with a note naming the part, the start method and the fix.
        A ``worker_init_fn`` runs in each worker process, as torch runs it; thread workers
        run it in each thread, inside the training process (said once, with a warning).
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
    decode: "auto" (default), "cpu" or "device". "device": the workers read each JPEG's bytes and
        draw its crop from the sample's keyed rng (exactly the CPU path's draws) without decoding;
        each batch decodes on ``device`` in one nvImageCodec call, each JPEG only in its crop's
        region (CUDA: the hardware engine, GPU or hybrid backend; CPU: its CPU backend), then
        resized there in batched kernels, on the side stream, before ``device_transform``; images
        the device decoder cannot take (PNG, WebP, CMYK...) decode in the worker, counted in ``stats()``.
        Needs a dataset declaring ``can_defer_decode = True`` (ours, with loaders' decode transforms)
        and no collate_fn.
        "auto": "device" where ``device`` is CUDA and all that holds, else "cpu" (the worker
        decodes, today's path). See ``loaders.batch_decode``.
    autotune: None (on when neither num_workers nor prefetch_factor is given), True or False: tune the worker
        count, type and prefetch while training (docs/tuning.md); stats_log_s: seconds between ``stats()`` logs.

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
    def __init__(self, dataset: Any, batch_size: int | None = 1, shuffle: bool | None = None, sampler: Any = None,
                 batch_sampler: Any = None, num_workers: int | None = None,
                 collate_fn: Callable[[Any], Any] | None = None, pin_memory: bool | None = None,
                 drop_last: bool = False, timeout: float = 0, worker_init_fn: Callable[[int], None] | None = None,
                 multiprocessing_context: Any = None, generator: torch.Generator | None = None, *,
                 prefetch_factor: int | None = None, persistent_workers: bool | None = None,
                 pin_memory_device: str = "", in_order: bool = True, worker_type: str = "auto",
                 threads_per_worker: int = 1, seed: int | None = None, on_error: str = "raise",
                 max_skips: int | float = 0, device: str | torch.device | None = None,
                 device_transform: Callable[[Any], Any] | None = None, device_prefetch: int = 2,
                 decode: str = "auto", autotune: bool | None = None, stats_log_s: float | None = None) -> None:
        options = LoaderOptions(worker_type=worker_type, threads_per_worker=threads_per_worker, seed=seed,
                                on_error=on_error, max_skips=max_skips, device=device, stats_log_s=stats_log_s,
                                device_transform=device_transform, device_prefetch=device_prefetch, decode=decode,
                                autotune=bool(autotune) if prefetch_factor is not None else autotune)  # given: off
        topology = loader_topology(getattr(dataset, "topology", None))
        workers = default_workers(dataset, topology) if num_workers is None else num_workers
        persistent = isinstance(workers, int) and workers > 0 if persistent_workers is None else persistent_workers
        # Torch validates the user's own combination (its errors, in its order), sets its
        # attributes and default samplers; ours replace them (_make_source). It starts nothing.
        super().__init__(dataset, batch_size, shuffle, sampler, batch_sampler, workers, collate_fn, bool(pin_memory),
                         drop_last, timeout, worker_init_fn, multiprocessing_context, generator,
                         prefetch_factor=prefetch_factor, persistent_workers=persistent,
                         pin_memory_device=pin_memory_device, in_order=in_order)
        if collate_fn is None:  # the dataset's declared collate, else ours (into pinned memory; torch's batches)
            self.collate_fn = default_collate_fn(dataset, auto_collation=self._auto_collation)
        self.pin_memory = torch.cuda.is_available() if pin_memory is None else bool(pin_memory)
        self._settings = LoaderSettings.resolve(self, options, topology, workers_given=num_workers is not None)
        self._shuffle = bool(shuffle)
        self._own_sampler = sampler is None and batch_sampler is None and not self._settings.iterable
        self._progress = Progress()
        self._passes = Passes(self._progress)
        self._chain = Chain(self._settings, self._make_source(), WorkerPool(self._settings),
                            FailurePolicy(self._settings.max_skips, self._settings.worker_kind), self._progress,
                            decode=decode_stage(self._settings), tuner=Tuner.of(self._settings, topology))

    def _make_source(self) -> BatchSource:
        """Where batches come from: an iterable's own order, the dataset's own (``batch_source``: read by global
        position, ``GlobalSource``), or the sampler's (with the loader's own sampler where the user gave none)."""
        settings = self._settings
        if settings.iterable:
            return IterableSource(settings.batch_size)
        if (dataset_source := self._dataset_source()) is not None:
            return dataset_source
        if self._own_sampler:
            sampler = own_sampler(self.dataset, shuffle=self._shuffle, seed=settings.seed, drop_last=self.drop_last)
            if sampler is not None:
                # Written past torch's frozen attributes (its __setattr__ refuses them after
                # construction): the loader's sampler must be what they hold.
                self.__dict__["sampler"] = sampler
                if self.batch_size is not None:
                    self.__dict__["batch_sampler"] = BatchSampler(sampler, self.batch_size, self.drop_last)
        return BatchPlan(self.sampler, self.batch_sampler, owned=self._own_sampler, batch_size=self.batch_size,
                         position=self._progress)

    def _dataset_source(self) -> BatchSource | None:
        """The dataset's own source when the loader uses it (no sampler or batch sampler given): what its
        ``batch_source(request)`` returns, read by global position when it is a ``PositionedData``."""
        make = getattr(self.dataset, "batch_source", None)
        if not self._own_sampler or not callable(make):
            return None
        request = SourceRequest(batch_size=self.batch_size, drop_last=self.drop_last, shuffle=self._shuffle,
                                seed=self._settings.seed, owner=self._progress)
        made = make(request)
        return GlobalSource(made, request) if isinstance(made, PositionedData) else made

    # ------------------------------------------------------------ settings, read-only

    @property
    def seed(self) -> int:
        """The base seed of the order and of worker seeds (the saved one after ``load_state_dict``)."""
        return self._settings.seed

    @property
    def rank(self) -> int:
        return self._settings.rank

    @property
    def worker_type(self) -> WorkerType:
        """"thread" or "process" ("auto" resolved for this dataset)."""
        return self._settings.worker_type

    @property
    def threads_per_worker(self) -> int:
        return self._settings.threads_per_worker

    @property
    def on_error(self) -> OnError:
        return self._settings.on_error

    @property
    def max_skips(self) -> int | float:
        return self._settings.max_skips

    @property
    def device(self) -> torch.device | None:
        return self._settings.device

    @property
    def device_transform(self) -> Callable[[Any], Any] | None:
        return self._settings.device_transform

    @property
    def decode(self) -> DecodeMode:
        """Where JPEGs decode: "cpu" (in the workers) or "device" ("auto" resolved; ``stats()`` says why)."""
        return self._settings.decode

    def stats(self) -> LoaderStats:
        """Where the training loop's time goes, the tuning done, and where samples decode (docs/tuning.md)."""
        return self._chain.tuner.stats(decode_stats(self._settings, self._chain.decode))

    @property
    def pool(self) -> WorkerPool:
        """The loader's workers (``pool.shared``: the persistent ones, while they run)."""
        return self._chain.pool

    # ------------------------------------------------------------ length and epochs

    def __len__(self) -> int:
        """Batches per epoch, as the stock loader counts them (``len(dataset)`` based for iterables)."""
        if self._settings.iterable:
            dataset: Any = self.dataset
            length: int = len(dataset)  # TypeError without one, as torch's
            # Remembered as torch does: an iterator warns when the dataset yields more than this.
            self.__dict__["_IterableDataset_len_called"] = length
            if self.batch_size is not None:
                length = length // self.batch_size if self.drop_last else math.ceil(length / self.batch_size)
            return length
        batches = self._chain.source.num_batches()
        if batches is None:  # ask the sampler, so that its own error (an infinite sampler's TypeError) surfaces
            sampler: Any = self.batch_sampler if self.batch_sampler is not None else self.sampler
            return len(sampler)
        return batches

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
        return self._progress.skipped

    def set_epoch(self, epoch: int) -> None:
        """Read ``epoch`` next, from its start; after ``load_state_dict`` for this same epoch, from the saved position.

        Ends a running iteration. Only the loader's own sampler follows (a sampler the
        user gave keeps the epoch the user sets on it).
        """
        epoch = check_int("epoch", epoch, 0)
        self._chain.pool.epoch_sync.drive()  # from now on the dataset's set_epoch follows this one's, everywhere
        last = self._passes.end()
        self._progress.set_epoch(epoch, epoch_batches=self._source_length(), last=last)

    def _source_length(self) -> int | None:
        try:
            return len(self)
        except TypeError:  # a sampler or iterable without a length
            return None

    # ------------------------------------------------------------ iteration and workers

    def __iter__(self) -> LoaderIterator:  # type: ignore[override]  # ours, not torch's _BaseDataLoaderIter
        """One epoch: its (remaining) batches. A second iterator while this one runs reads beside it."""
        reported = getattr(self, "_IterableDataset_len_called", None) if self._settings.iterable else None
        register_live(self)  # weakly: what shardfeed-profile samples
        return self._passes.begin(self._chain, length=self.__len__, reported_len=reported)

    def _get_iterator(self) -> NoReturn:
        # Torch's iterator would start its own workers, outside our order, seeds and resume state.
        raise TypeError(f"{type(self).__module__}.{type(self).__name__} iterates with its own workers: "
                        "use iter(loader), not torch.utils.data.DataLoader.__iter__")

    def close(self) -> None:
        """End the current iteration and stop all workers (threads joined, processes shut down) and the
        device decoder's threads."""
        self._passes.end()
        self._chain.pool.close()
        if self._chain.decode is not None:
            self._chain.decode.close()

    def __enter__(self) -> DataLoader[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        # No joins in a finaliser: signal the threads; process workers stop in their own finaliser.
        chain = self.__dict__.get("_chain")
        if chain is not None:
            chain.pool.close(wait=False)
            if chain.decode is not None:
                chain.decode.close(wait=False)

    # ------------------------------------------------------------ resume state

    def order_digest(self, start: int, stop: int, epoch: int | None = None) -> str:
        """sha256 (hex) of which data the global positions ``[start, stop)`` of ``epoch`` (default: the one
        being read) hold, whatever the topology: equal digests prove two runs (or a run and its resume) read the
        same data in the same order. A global position is an entry of the epoch's order of all ranks: a packed
        sequence (``loaders.tokens.digest``), a sample of a shard dataset (``read.grid.order_digest``) or
        of any other map-style dataset in the loader's order. ConfigError where the order is not the loader's
        (a sampler given, an IterableDataset); IndexError for positions outside the epoch.
        """
        if check_int("stop", stop) < check_int("start", start):
            raise ConfigError(f"order_digest: 'stop' {stop} precedes 'start' {start}")
        if epoch is not None:
            check_int("epoch", epoch)
        digest = getattr(self._chain.source, "order_digest", None)
        if not callable(digest):
            raise ConfigError(f"order_digest needs an order the loader draws itself (no sampler given, a map-style "
                              f"dataset); this loader reads {type(self.dataset).__name__} through "
                              f"{type(self._chain.source).__name__}")
        result: str = digest(start, stop, epoch)
        return result

    def state_dict(self) -> dict[str, Any]:
        """The resume state: a small nest of plain values, the batch source's under its key (see
        ``loaders.loader.progress``)."""
        source = self._chain.source
        return {
            KEY_VERSION: LOADER_STATE_VERSION,
            **self._progress.state(),
            KEY_SEED: self.seed,
            KEY_BATCH_SIZE: self.batch_size,
            KEY_DATASET_LEN: length_or_none(self.dataset),
            source.key: source.state_dict(),
            **({} if (tuned := self._chain.tuner.state()) is None else {KEY_TUNED: tuned}),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state``: the next iteration yields the batches the saved run had not yet received.

        Raises ConfigError when the state is malformed or from another setup (dataset
        length, batch size, seed given explicitly), or when the order cannot be replayed
        (a random sampler without state, an iterable dataset mid-epoch).
        """
        source = self._chain.source
        upgrade = getattr(source, "upgrade_state", None)
        if callable(upgrade):  # a state of the previous version, in this version's shape
            state = upgrade(state)
        check_state(state, keys=(*LOADER_KEYS, source.key), dataset_len=length_or_none(self.dataset),
                    seed=self.seed if self._settings.seed_given else None,
                    check_len=not getattr(source, "identifies_data", False))
        where = source.resume_point(state)
        self._passes.end()
        if state[KEY_SEED] != self.seed:
            logger.info("DataLoader: resuming with the saved seed %d instead of the drawn seed %d",
                        state[KEY_SEED], self.seed)
            self._settings = replace(self._settings, seed=int(state[KEY_SEED]))
            self._chain.pool.reset(self._settings)  # its workers seeded from the old seed stop
            self._chain = replace(self._chain, settings=self._settings, source=self._make_source())
        self._chain.source.load_state_dict(state[source.key])
        self._progress.restore(state, where)
        self._chain.tuner.restore(state.get(KEY_TUNED))  # autotune: a resumed job starts tuned
