"""What a worker hands back for one batch (``BatchOutcome``), how it is built, and how a failure is raised.

``BatchBuilder`` reads and collates a batch in the calling thread (thread workers, the
main thread); ``CollateGuard`` is the collate_fn handed to torch's worker processes.
Neither raises: a failure travels in the outcome, and the consumer raises it on its own
thread with ``failure_error``: the dataset's exception keeps its class (as torch
re-raises it) and carries a note naming worker, batch and indices.
"""

from __future__ import annotations

import io
import pickle
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
import torch.utils.data

from loaders.errors import UnsendableBatchError
from loaders.loader.batch_source import Job
from loaders.loader.epoch_sync import EpochSync
from loaders.loader.fetch import Fetched, Skip, fetch_samples
from loaders.loader.messages import describe_batch, describe_error, portable_error
from loaders.loader.pinning import pin_nested
from loaders.loader.stage_timing import BatchTiming

__all__ = ["BatchBuilder", "BatchOutcome", "CollateGuard", "collate_outcome", "failure_error"]


@dataclass(slots=True, kw_only=True)
class BatchOutcome:
    """What a worker hands back for one batch of the epoch.

    epoch, position: which batch (position -1 for iterable datasets). batch: the collated
    batch, or None when every sample was skipped or reading failed. indices: the
    sampler's indices of the batch. skips: samples dropped. failure (with failed_index
    when known): what the consumer raises. worker_id: who built it. timing: seconds spent
    building it, where it was built (``loaders.loader.stage_timing``).
    """

    epoch: int
    position: int
    worker_id: int
    indices: list[Any]
    batch: Any = None
    num_samples: int = 0
    skips: list[Skip] = field(default_factory=list)
    failure: BaseException | None = None
    failed_index: Any = None
    timing: BatchTiming | None = None

    @classmethod
    def failed(cls, *, epoch: int, position: int, worker_id: int, indices: Any, failure: BaseException | None
               ) -> BatchOutcome:
        """A batch that could not be read at all (a failing ``set_epoch`` or worker_init_fn)."""
        return cls(epoch=epoch, position=position, worker_id=worker_id, indices=list(indices), failure=failure)

    def pin_memory(self) -> BatchOutcome:
        """Torch's pin-memory thread calls this: pin the batch, pass the rest through (its time in ``timing``)."""
        start = time.perf_counter()
        pinned = replace(self, batch=pin_nested(self.batch))
        if pinned.timing is not None:
            pinned.timing.pin_s += time.perf_counter() - start
        return pinned


def collate_outcome(fetched: Fetched, collate_fn: Callable[[Any], Any], *, auto_collation: bool,
                    worker_id: int) -> BatchOutcome:
    """Collate what was read into a BatchOutcome; a collate_fn failure becomes its ``failure``.

    ``auto_collation=False`` (``batch_size=None``): the batch is ``collate_fn(sample)`` of
    its single sample, as in the stock loader.
    """
    timing = fetched.timing
    outcome = BatchOutcome(epoch=fetched.epoch, position=fetched.position, worker_id=worker_id,
                           indices=fetched.indices, num_samples=len(fetched.samples), skips=fetched.skips,
                           failure=fetched.failure, failed_index=fetched.failed_index, timing=timing)
    timing.busy_s = timing.dataset_s
    if fetched.failure is not None or not fetched.samples:
        return outcome
    start = time.perf_counter()
    try:
        outcome.batch = collate_fn(fetched.samples if auto_collation else fetched.samples[0])
    except Exception as err:  # noqa: BLE001 - the collate_fn's own error, handed to the consumer
        outcome.failure = err
    timing.collate_s = time.perf_counter() - start
    timing.busy_s += timing.collate_s
    return outcome


def failure_error(outcome: BatchOutcome, kind: str) -> BaseException:
    """The exception to raise for a failed batch: the worker's own, of exactly its own class, with context.

    As torch re-raises it (``except ValueError`` catches a dataset's ValueError, and the
    class pickles by name, so it can travel on to another process); a note names the
    worker (``kind``: "main-thread", "thread", "process"), the batch, its indices and the
    sample.
    """
    err = outcome.failure or RuntimeError("no failure recorded")
    at = f" at sample {outcome.failed_index!r}" if outcome.failed_index is not None else ""
    err.add_note(f"{kind} worker {outcome.worker_id} raised {describe_error(err)} while reading "
                 f"{describe_batch(outcome.position, outcome.indices)}{at}")
    return err


@dataclass(frozen=True)
class BatchBuilder:
    """Reads and collates one batch in the calling thread: ``builder(worker_id, job)``.

    What thread workers (and the main thread, with ``num_workers=0``) run; never raises
    ``Exception``, failures travel in the BatchOutcome. The job's epoch reaches a dataset
    with ``set_epoch`` before its samples are read. plan_decode: read images as decode plans
    (``decode="device"``, ``loaders.loader.fetch``).
    """

    dataset: Any
    collate_fn: Callable[[Any], Any]
    auto_collation: bool
    skip_errors: bool
    sync_epoch: EpochSync
    plan_decode: bool = False

    def __call__(self, worker_id: int, job: Job) -> BatchOutcome:
        try:
            self.sync_epoch(job.epoch)
        except Exception as err:  # noqa: BLE001 - the dataset's set_epoch failed: this batch fails with it
            return BatchOutcome.failed(epoch=job.epoch, position=job.position, worker_id=worker_id,
                                       indices=job.indices, failure=err)
        fetched = fetch_samples(self.dataset, job.indices, epoch=job.epoch, position=job.position,
                                skip_errors=self.skip_errors, plan_decode=self.plan_decode)
        return collate_outcome(fetched, self.collate_fn, auto_collation=self.auto_collation, worker_id=worker_id)


@dataclass(frozen=True)
class CollateGuard:
    """The collate_fn handed to torch's workers: ``Fetched`` (map-style) or samples (iterable) -> BatchOutcome."""

    collate_fn: Callable[[Any], Any]
    auto_collation: bool
    epoch: Any = None  # iterable datasets: the shared int (``value``) holding the epoch being read; None: 0

    def __call__(self, data: Any) -> BatchOutcome:
        info = torch.utils.data.get_worker_info()
        worker_id = info.id if info is not None else 0
        if not isinstance(data, Fetched):
            # Iterable dataset: torch already read the samples (the single sample without batching).
            data = Fetched(epoch=0 if self.epoch is None else int(self.epoch.value), position=-1, indices=[],
                           samples=list(data) if self.auto_collation else [data])
        outcome = collate_outcome(data, self.collate_fn, auto_collation=self.auto_collation, worker_id=worker_id)
        if info is not None and outcome.failure is None:
            _check_sendable(outcome)
        if outcome.failure is not None and info is not None:
            outcome.failure = portable_error(outcome.failure)
        return outcome


class _StructurePickler(pickle.Pickler):
    """Pickles a batch's containers and leaves, not its arrays (torch's reducers send those)."""

    def persistent_id(self, obj: Any) -> Any:
        return id(obj) if isinstance(obj, (torch.Tensor, np.ndarray)) else None


def _check_sendable(outcome: BatchOutcome) -> None:
    """Fail a batch built in a worker process if it cannot be pickled to the main process.

    Otherwise the worker's queue thread fails on it and the main process waits forever. A
    namedtuple or class defined inside a function or class is the usual cause. Only the
    containers and leaves are pickled here (microseconds), never the arrays.
    """
    try:
        _StructurePickler(io.BytesIO(), protocol=pickle.HIGHEST_PROTOCOL).dump(outcome.batch)
    except Exception as err:  # noqa: BLE001 - any pickling failure: report it rather than hang
        outcome.failure = UnsendableBatchError(
            f"a batch of type {type(outcome.batch).__name__} built in a worker process cannot be sent to the main "
            f"process ({type(err).__name__}: {err}); define its classes at module level, where pickle finds them "
            "by name, or read in the main process (num_workers=0) or in threads (worker_type='thread')")
        outcome.batch = None
