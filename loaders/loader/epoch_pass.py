"""One pass over an epoch: the chain of stages, run for one ``iter(loader)``.

::

    plan (jobs: epoch, position, indices; lazy)  ->  workers (threads / processes / inline:
    read, collate into pinned or shared memory)  ->  failures (raise with context; skips)
    ->  device prefetch (copy + device transform keyed by epoch, position, rank)
    ->  accounting (the loader's Progress moves as each batch is handed over)

A *primary* run moves the loader's progress; a run started while the primary is still
alive (a peek inside the loop, ``zip(loader, loader)``) is *detached*: it reads the
current epoch from its start with private workers and moves nothing, as a second
iterator of the stock loader would. ``set_epoch`` and ``load_state_dict`` end the
running primary pass. When the next primary pass starts, a previous one abandoned
after at most one batch (a probe) is undone (the epoch starts over from where it did);
one abandoned later counts as an epoch.
"""

from __future__ import annotations

import warnings
from collections import deque
from collections.abc import Generator, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from loaders.loader.failures import Failed
from loaders.loader.keyed_transform import positioned
from loaders.loader.prefetch import DevicePrefetcher
from loaders.loader.progress import Delivery, Progress

if TYPE_CHECKING:
    from loaders.loader.dataloader import DataLoader

__all__ = ["LoaderIterator", "Run"]


@dataclass
class Run:
    """What the loader remembers of one iteration: where it started, what it delivered, how it ended."""

    start: Progress
    primary: bool = True
    failures: dict[str, int] = field(default_factory=dict)  # the failure stage's state at the start
    delivered: int = 0
    finished: bool = False
    closed: bool = False
    finalizing: bool = False  # closed by garbage collection: nothing may block

    @property
    def is_probe(self) -> bool:
        """Abandoned after at most one batch: a peek or a shape probe, not a pass over the epoch."""
        return not self.finished and self.delivered <= 1


class LoaderIterator:
    """The iterator ``iter(loader)`` returns: yields the epoch's (remaining) batches.

    Workers start here, as torch's iterator starts them. A batch that failed raises its
    exception in its turn and the pass goes on (as torch's). ``close()`` (or garbage
    collection, e.g. after ``break``) stops it and its private workers; persistent
    workers stay with the loader for the next epoch.
    """

    def __init__(self, loader: DataLoader[Any], run: Run) -> None:
        self._run = run
        self._length = loader.__len__  # asked when asked: len() of an iterable loader is remembered by torch
        self._reported_len = getattr(loader, "_IterableDataset_len_called", None) if loader._iterable else None
        self._dataset = loader.dataset
        self._num_workers = loader.num_workers
        self._yielded = 0
        self._workers_stage, self._batches = _start(loader, run)

    def __iter__(self) -> LoaderIterator:
        return self

    def __next__(self) -> Any:
        batch = next(self._batches)
        self._yielded += 1
        if self._reported_len is not None and self._yielded > self._reported_len:
            _warn_past_length(self._dataset, self._reported_len, self._yielded, self._num_workers)
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
        self._run.closed = True
        self._batches.close()

    def __del__(self) -> None:
        if hasattr(self, "_batches"):
            self._run.finalizing = True
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


def _start(loader: DataLoader[Any], run: Run) -> tuple[Any, Generator[Any, None, None]]:
    """Build the chain for ``run`` and start its workers; (the workers stage, the generator of batches)."""
    epoch = run.start.epoch  # a detached run reads the epoch of the primary it runs beside
    start, received = (run.start.position, frozenset(run.start.ahead)) if run.primary else (0, frozenset())
    workers = loader._workers_for(private=not run.primary)
    jobs = None if loader._plan is None else loader._plan.jobs(epoch, start, received, detached=not run.primary)
    deliveries: deque[Delivery] = deque()
    try:
        outcomes = workers.run(jobs, epoch)
    except Exception:
        loader._release_workers(workers, failed=True)
        raise
    pairs = loader._failures.deliver(outcomes, deliveries, loader._worker_kind())
    source: Iterable[tuple[int, Any]] = pairs
    if loader.device is not None:
        transform = loader.device_transform
        keyed = None if transform is None else positioned(transform, epoch=epoch, rank=loader.rank, start=start)
        source = DevicePrefetcher(pairs, loader.device, depth=loader.options.device_prefetch,
                                  transform=None if keyed is None else _unless_failed(keyed))
    return workers, _drive(loader, run, epoch, source, (source, pairs), deliveries, workers)


def _unless_failed(transform: Any) -> Any:
    return lambda pair: pair if isinstance(pair[1], Failed) else transform(pair)


def _drive(loader: DataLoader[Any], run: Run, epoch: int, source: Iterable[tuple[int, Any]], parts: tuple[Any, ...],
           deliveries: deque[Delivery], workers: Any) -> Generator[Any, None, None]:
    progress, failures = loader._progress, loader._failures
    total = loader._plan.num_batches() if loader._plan is not None else None
    epoch_samples = loader._epoch_samples()

    def account(delivery: Delivery) -> None:
        if not run.primary:
            return
        failures.record(delivery, epoch_samples)
        progress.receive(delivery)
        if total is not None and progress.epoch == epoch and progress.position >= total:
            progress.finish_epoch()  # the last batch is in hand: a state saved now starts the next epoch

    failed = False
    try:
        for _, batch in source:
            account(deliveries.popleft())
            run.delivered += 1
            yield batch
        while deliveries:  # trailing batches whose samples were all skipped
            account(deliveries.popleft())
        run.finished = True
        if run.primary and progress.epoch == epoch:
            progress.finish_epoch()  # the epoch's length was unknown (iterable dataset, sampler without len)
    except Exception:
        failed = True
        raise
    finally:
        for part in parts:
            close = getattr(part, "close", None)
            if callable(close):
                close()
        loader._release_workers(workers, failed=failed, finalizing=run.finalizing)
