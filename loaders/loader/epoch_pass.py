"""One pass over an epoch, what ``iter(loader)`` runs: the chain of stages and the iterator over it.

::

    batch source (Job: epoch, position, indices; lazy)  ->  workers (threads / processes /
    inline: read, collate into pinned or shared memory; BatchOutcome)  ->  failures (Item:
    position, batch, Delivery; raise in turn, skips)  ->  device prefetch (copy, then on its
    side stream the device decode with decode="device" and the device transform keyed by
    epoch, position, rank)  ->  the owner (Progress.receive) -> training step

A *primary* pass moves the loader's ``Progress``; a pass started while the primary one
still runs (a peek inside the loop, ``zip(loader, loader)``) is *detached*: it reads the
same epoch from its start with private workers and moves a progress of its own, thrown
away with it, as a second iterator of the stock loader would. ``Passes`` tells which is
which and remembers the last primary pass (``Pass``: where it started, how it ended),
which is what the owner's probe rule reads (``Progress.begin_pass``, ``set_epoch``).
"""

from __future__ import annotations

import time
import warnings
import weakref
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from loaders.loader.batch_source import BatchSource
from loaders.loader.decode_stage import DecodeStage
from loaders.loader.failures import NO_BATCH, Failed, FailurePolicy, Item, is_batch
from loaders.loader.keyed_transform import positioned
from loaders.loader.pool import WorkerPool, Workers
from loaders.loader.prefetch import DevicePrefetcher
from loaders.loader.progress import Progress, Where
from loaders.loader.relay import Relay
from loaders.loader.settings import LoaderSettings
from loaders.loader.tuner import Tuner
from loaders.loader.traps import watch_traps

__all__ = ["Chain", "LoaderIterator", "Pass", "Passes"]


@dataclass
class Pass:
    """What the loader remembers of one ``iter()``: where it started and how it ended."""

    start: Progress  # the owner as the pass began (a detached pass: its own, at the epoch's start)
    primary: bool = True
    finished: bool = False  # ran to the end of its epoch
    closed: bool = False
    finalizing: bool = False  # closed by garbage collection: nothing may block

    @property
    def running(self) -> bool:
        return not (self.finished or self.closed)


@dataclass(frozen=True)
class Chain:
    """The loader's parts a pass is built from: its settings, batch source, workers, failure policy,
    the owner of (epoch, position), with ``decode="device"`` the device decode stage, and the accounting and
    tuning shell (``loaders.loader.tuner``)."""

    settings: LoaderSettings
    source: BatchSource
    pool: WorkerPool
    failures: FailurePolicy
    progress: Progress
    decode: DecodeStage | None = None
    tuner: Tuner = field(default_factory=Tuner.inert)

    def __post_init__(self) -> None:
        self.tuner.pool = self.pool  # the knobs it tunes are the pool's settings


class Passes:
    """The loader's passes: which one is primary, and the last primary one's record."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self.last: Pass | None = None  # the latest primary pass
        self._iterator: weakref.ref[LoaderIterator] | None = None  # its iterator, while alive

    def begin(self, chain: Chain, *, length: Callable[[], int], reported_len: int | None) -> LoaderIterator:
        """A new pass: detached while the primary one runs, else primary (the last one settled first)."""
        current = self._iterator() if self._iterator is not None else None
        if current is not None and self.last is not None and self.last.running:
            epoch = self.last.start.epoch
            where, run = Where(epoch), Pass(Progress(epoch=epoch), primary=False)
        else:
            where = self._progress.begin_pass(self.last)
            run = self.last = Pass(self._progress.snapshot())
        iterator = LoaderIterator(chain, run, where, length=length, reported_len=reported_len)
        if run.primary:
            self._iterator = weakref.ref(iterator)
        return iterator

    def end(self) -> Pass | None:
        """Stop the running primary pass (it moves nothing from now on); returns the last primary pass."""
        current = self._iterator() if self._iterator is not None else None
        last, self.last, self._iterator = self.last, None, None
        if current is not None:
            current.close()
        return last


class LoaderIterator:
    """The iterator ``iter(loader)`` returns: yields the epoch's (remaining) batches.

    Workers start here, as torch's iterator starts them. A batch that failed raises its
    exception in its turn and the pass goes on (as torch's). ``close()`` (or garbage
    collection, e.g. after ``break``) stops it and its private workers; persistent
    workers stay with the loader for the next epoch.
    """

    def __init__(self, chain: Chain, run: Pass, where: Where, *, length: Callable[[], int],
                 reported_len: int | None) -> None:
        self._pass = run
        self._progress = chain.progress if run.primary else run.start.snapshot()
        self._length = length  # asked when asked: len() of an iterable loader is remembered by torch
        self._reported_len = reported_len  # an IterableDataset's len() as len(loader) reported it, else None
        self._dataset, self._num_workers = chain.settings.dataset, chain.settings.num_workers
        self._tuner = chain.tuner
        self._workers_stage, self._batches = _start(chain, run, where, self._progress)

    def __iter__(self) -> LoaderIterator:
        return self

    def __next__(self) -> Any:
        tuner = self._tuner
        began = time.perf_counter()
        if torch.autograd._profiler_enabled():  # the wait as a named range in torch.profiler traces
            with torch.profiler.record_function("loaders.DataLoader.next"):
                batch = next(self._batches)
        else:
            batch = next(self._batches)
        if self._pass.primary and not isinstance(batch, Failed):  # a detached pass is not the loop's clock
            tuner.end_next(began, batch)
        if self._reported_len is not None:
            handed_over = self._progress.batches_seen - self._pass.start.batches_seen
            if handed_over > self._reported_len:
                _warn_past_length(self._dataset, self._reported_len, handed_over, self._num_workers)
        if isinstance(batch, Failed):
            raise batch.error
        return batch

    def __len__(self) -> int:
        return self._length()

    @property
    def _workers(self) -> list[Any]:
        """The worker processes or threads serving this pass (torch's iterator has the same attribute)."""
        return list(getattr(self._workers_stage, "handles", ()))

    def close(self) -> None:
        """Stop the pass: its prefetched batches are dropped and its private workers stopped."""
        self._pass.closed = True
        self._batches.close()

    def __del__(self) -> None:
        if hasattr(self, "_batches"):
            self._pass.finalizing = True
            self.close()


def _warn_past_length(dataset: Any, reported: int, yielded: int, num_workers: int) -> None:
    """Torch's warning when an IterableDataset yields more than the length ``len(loader)`` reported."""
    message = (f"Length of IterableDataset {dataset} was reported to be {reported}"
               f"(when accessing len(dataloader)), but {yielded} samples have been fetched. ")
    if num_workers > 0:
        message += ("For multiprocessing data-loading, this could be caused by not properly configuring the "
                    "IterableDataset replica at each worker. Please see "
                    "https://pytorch.org/docs/stable/data.html#torch.utils.data.IterableDataset for examples.")
    warnings.warn(message, stacklevel=3)


def _start(chain: Chain, run: Pass, where: Where, progress: Progress
           ) -> tuple[Workers | Relay, Generator[Any, None, None]]:
    """Build the chain for ``run`` from ``where`` and start its workers; (the workers, the generator of batches).
    A primary pass's workers are a ``Relay`` (replaced when tuned), accounted for by the tuner."""
    backend = chain.pool.workers_for(primary=run.primary)
    tuner = chain.tuner if run.primary else None
    workers: Workers | Relay = backend if tuner is None else Relay(chain.pool, backend)
    try:
        if isinstance(workers, Relay) and tuner is not None:
            tuner.begin_pass(workers)
            outcomes = tuner.observe(workers.run(chain.source.jobs(where, primary=True), where.epoch), workers)
        else:
            outcomes = workers.run(chain.source.jobs(where, primary=run.primary), where.epoch)
    except Exception:
        chain.pool.release(workers.current if isinstance(workers, Relay) else workers, failed=True)
        raise
    outcomes = watch_traps(chain.settings, chain.pool, outcomes)  # warns of known traps, once per loader
    items: Iterable[Item] = chain.failures.deliver(outcomes)
    parts: list[Any] = [items]
    settings = chain.settings
    if settings.device is not None:
        transform = settings.device_transform
        keyed = None if transform is None else positioned(transform, epoch=where.epoch, rank=settings.rank,
                                                          start=where.position if run.primary else 0)
        decode = chain.decode if chain.decode is None or tuner is None else _timed(chain.decode, tuner)
        steps = [step for step in (decode, None if keyed is None else _on_batches(keyed)) if step is not None]
        prefetcher = DevicePrefetcher(items, settings.device, depth=settings.device_prefetch,
                                      transform=_in_turn(steps) if steps else None)
        if tuner is not None:
            prefetcher.on_copied = lambda seconds: tuner.accounting.host_stage("transfer", seconds)
        items = prefetcher
        parts.insert(0, items)
    return workers, _drive(chain, run, where.epoch, items, parts, workers, progress)


def _timed(decode: Callable[[Item], Item], tuner: Tuner) -> Callable[[Item], Item]:
    """The device decode, its host time reported to the tuner as "device_decode"."""
    def run(item: Item) -> Item:
        start = time.perf_counter()
        try:
            return decode(item)
        finally:
            tuner.accounting.host_stage("device_decode", time.perf_counter() - start)

    return run


def _on_batches(keyed: Callable[[int, Any], Any]) -> Callable[[Item], Item]:
    """The device transform on an item's batch (failures and pure accounting pass through)."""
    return lambda item: item._replace(batch=keyed(item.position, item.batch)) if is_batch(item) else item


def _in_turn(steps: list[Callable[[Item], Item]]) -> Callable[[Item], Item]:
    """One transform of items running ``steps`` in order (the device decode, then the device transform)."""
    if len(steps) == 1:
        return steps[0]

    def run(item: Item) -> Item:
        for step in steps:
            item = step(item)
        return item

    return run


def _drive(chain: Chain, run: Pass, epoch: int, items: Iterable[Item], parts: list[Any], workers: Workers | Relay,
           progress: Progress) -> Generator[Any, None, None]:
    """Hand each item's batch over, moving ``progress`` as it goes; close the chain at the end."""
    epoch_batches, epoch_samples = chain.source.num_batches(), chain.source.num_samples()
    failed = False
    try:
        for item in items:
            handed_over = item.batch is not NO_BATCH
            if run.primary:  # a detached pass spends no budget (it re-reads what the primary pass counts)
                chain.failures.check_budget(progress.skipped, item.delivery, epoch_samples)
            progress.receive(item.delivery, handed_over=handed_over, epoch_batches=epoch_batches)
            if handed_over:
                yield item.batch
        run.finished = True
        progress.end_pass(epoch)  # the epoch's length was unknown (iterable dataset, sampler without len)
    except Exception:
        failed = True
        raise
    finally:
        for part in parts:
            close = getattr(part, "close", None)
            if callable(close):
                close()
        current = workers.current if isinstance(workers, Relay) else workers  # a relay's last workers
        chain.pool.release(current, failed=failed, finalizing=run.finalizing)
