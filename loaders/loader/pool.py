"""Which workers a DataLoader pass gets, built from the loader's settings: inline, threads or processes.

``make_workers`` picks the backend (``worker_type`` resolved, ``num_workers``) and wires
the per-batch work: ``batch_builder`` collates straight into pinned memory in this
process (the zero-copy thread path); worker processes get ``CollateGuard`` and
``WorkerInit`` (thread limits, seeds keyed by (seed, epoch, rank, worker)).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import torch

from loaders.loader.collate import default_collate
from loaders.loader.worker_start import WorkerInit
from loaders.loader.settings import OnError, WorkerType
from loaders.loader.batch_outcome import BatchBuilder, CollateGuard
from loaders.loader.pinning import PinAfter, pinned_collate
from loaders.loader.process_workers import ProcessWorkers
from loaders.loader.thread_workers import InlineWorkers, ThreadWorkers

if TYPE_CHECKING:
    from loaders.loader.dataloader import DataLoader

__all__ = ["Workers", "batch_builder", "make_workers"]

Workers = InlineWorkers | ThreadWorkers | ProcessWorkers

# Stock arguments handed on to torch's loader when workers are processes.
_PROCESS_ARGS = ("num_workers", "pin_memory", "timeout", "multiprocessing_context", "generator", "prefetch_factor",
                 "persistent_workers", "pin_memory_device", "in_order", "batch_size", "drop_last")


def make_workers(loader: DataLoader[Any]) -> Workers:
    """New, unstarted workers for ``loader`` (they start on their first ``run``)."""
    if loader._iterable or (loader.num_workers > 0 and loader.worker_type is WorkerType.PROCESS):
        return ProcessWorkers(
            loader.dataset, collate=CollateGuard(loader.collate_fn, loader._auto_collation),
            stock={name: getattr(loader, name) for name in _PROCESS_ARGS},
            init=WorkerInit(loader.seed, loader.threads_per_worker, loader.worker_init_fn, rank=loader.rank),
            skip_errors=loader.on_error is OnError.SKIP, epoch_sync=loader._epoch_sync,
            # Workers the user did not ask for must not fail where the main process would not.
            fallback=None if loader._workers_given or loader._iterable else batch_builder(loader))
    if loader.num_workers == 0:
        return InlineWorkers(batch_builder(loader))
    return ThreadWorkers(batch_builder(loader), num_workers=loader.num_workers,
                         max_in_flight=loader.num_workers * (loader.prefetch_factor or 1),
                         timeout_s=float(loader.timeout), in_order=loader.in_order, init=loader.worker_init_fn)


def batch_builder(loader: DataLoader[Any]) -> BatchBuilder:
    """Read and collate in this process (main thread or thread workers): straight into pinned memory."""
    collate = loader.collate_fn
    pin = loader.pin_memory and torch.cuda.is_available()
    if loader.pin_memory and not pin:
        warnings.warn("'pin_memory' is True but CUDA is not available: batches are not pinned", stacklevel=5)
    if pin:
        collate = pinned_collate if collate is default_collate else PinAfter(collate)
    return BatchBuilder(loader.dataset, collate, loader._auto_collation, loader.on_error is OnError.SKIP,
                        loader._epoch_sync)
