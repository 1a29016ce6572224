"""Which workers a pass gets (inline, threads or processes), what they run, and when persistent ones restart.

``WorkerPool`` hands the primary pass the loader's persistent workers (started on first
use, kept between epochs) and a detached pass a private set; it stops them when a pass
fails and when the loader closes. It owns the ``EpochSync`` of the user's dataset: while
only the user calls the dataset's ``set_epoch``, persistent worker *processes* restart
when their copy of the dataset may predate the user's last call (as stock's default,
non-persistent workers would copy it afresh). ``make_workers`` picks the backend from the
settings; ``batch_builder`` is the per-batch work in this process (collated straight into
pinned memory); worker processes get ``CollateGuard`` and ``WorkerInit``.

A ``worker_init_fn`` is written for a worker *process* (it seeds global RNGs, sets thread
counts, opens files). Thread workers run it too, once per thread as it starts, so code that
opens per-worker resources keeps working; but it then changes the training process itself
(and ``get_worker_info()`` is None there), so the pool says so once per loader, when its
first thread workers start (``THREAD_INIT_WARNING``).
"""

from __future__ import annotations

import warnings

import torch

from loaders.loader.batch_outcome import BatchBuilder, CollateGuard
from loaders.loader.collate import default_collate
from loaders.loader.epoch_sync import UNKNOWN_EPOCH, EpochSync
from loaders.loader.pinning import PinAfter, pinned_collate
from loaders.loader.process_workers import ProcessWorkers
from loaders.loader.settings import LoaderSettings, WorkerType
from loaders.loader.thread_workers import InlineWorkers, ThreadWorkers
from loaders.loader.worker_start import WorkerInit

__all__ = ["THREAD_INIT_WARNING", "WorkerPool", "Workers", "batch_builder", "make_workers"]

Workers = InlineWorkers | ThreadWorkers | ProcessWorkers

THREAD_INIT_WARNING = (
    "worker_init_fn {name} runs in each of the {count} thread workers, inside the training process: what it sets "
    "process-wide (global RNG seeds, torch.set_num_threads, environment variables, signal handlers) changes the "
    "training process itself, and torch.utils.data.get_worker_info() is None there; pass worker_type='process' to "
    "run it in worker processes, as torch does")


def make_workers(settings: LoaderSettings, epoch_sync: EpochSync) -> Workers:
    """New, unstarted workers (they start on their first ``run``)."""
    if settings.iterable or (settings.num_workers > 0 and settings.worker_type is WorkerType.PROCESS):
        return ProcessWorkers(
            settings.dataset, collate=CollateGuard(settings.collate_fn, settings.auto_collation),
            stock=settings.process_args,
            init=WorkerInit(settings.seed, settings.threads_per_worker, settings.worker_init_fn, rank=settings.rank),
            skip_errors=settings.skip_errors, epoch_sync=epoch_sync, plan_decode=settings.plan_decode,
            start_note=settings.start_note,
            # Workers the user did not ask for must not fail where the main process would not.
            fallback=None if settings.workers_given or settings.iterable else batch_builder(settings, epoch_sync))
    if settings.num_workers == 0:
        return InlineWorkers(batch_builder(settings, epoch_sync))
    return ThreadWorkers(batch_builder(settings, epoch_sync), num_workers=settings.num_workers,
                         max_in_flight=settings.num_workers * (settings.prefetch_factor or 1),
                         timeout_s=settings.timeout_s, in_order=settings.in_order, init=settings.worker_init_fn)


def batch_builder(settings: LoaderSettings, epoch_sync: EpochSync) -> BatchBuilder:
    """Read and collate in this process (main thread or thread workers): straight into pinned memory."""
    collate = settings.collate_fn
    pin = settings.pin_memory and torch.cuda.is_available()
    if settings.pin_memory and not pin:
        warnings.warn("'pin_memory' is True but CUDA is not available: batches are not pinned", stacklevel=5)
    if pin:
        collate = pinned_collate if collate is default_collate else PinAfter(collate)
    return BatchBuilder(settings.dataset, collate, settings.auto_collation, settings.skip_errors, epoch_sync,
                        plan_decode=settings.plan_decode)


class WorkerPool:
    """The loader's workers: persistent ones for its primary passes, private ones for detached passes.

    Constructing starts nothing. ``close()`` stops the persistent workers (threads joined,
    processes shut down).
    """

    def __init__(self, settings: LoaderSettings) -> None:
        self.settings = settings
        self.epoch_sync = EpochSync(settings.dataset)  # this process's dataset: told each new epoch it reads
        self.shared: Workers | None = None  # persistent workers, kept between epochs
        self._copied_from: object = UNKNOWN_EPOCH  # the user's dataset's own `epoch` when they copied it
        self._warned_thread_init = False
        self._retuned = False  # settings changed (autotune) since the persistent workers started

    def workers_for(self, *, primary: bool) -> Workers:
        """The primary pass's workers (kept when persistent), or a private set for a detached pass."""
        if primary and self.shared is not None:
            if not (self._retuned or self._copies_are_stale(self.shared)):
                return self.shared
            self.shared.close()
            self.shared = None
        workers = make_workers(self.settings, self.epoch_sync)
        self._warn_of_thread_init(workers)
        if primary:
            self._retuned = False
        if primary and self.settings.persistent_workers:
            self.shared, self._copied_from = workers, self.epoch_sync.observe()
        return workers

    def _warn_of_thread_init(self, workers: Workers) -> None:
        """Say once per loader that the user's worker_init_fn runs in the training process (thread workers)."""
        init = self.settings.worker_init_fn
        if init is None or self._warned_thread_init or not isinstance(workers, ThreadWorkers):
            return
        self._warned_thread_init = True
        name = getattr(init, "__qualname__", type(init).__qualname__)
        warnings.warn(THREAD_INIT_WARNING.format(name=name, count=workers.num_workers), UserWarning, stacklevel=7)

    def _copies_are_stale(self, workers: Workers) -> bool:
        """Whether persistent worker processes hold a copy of the dataset from before the user's own
        ``dataset.set_epoch`` (no ``loader.set_epoch`` yet): they restart to copy it afresh. Unless the
        dataset shows its ``epoch`` unchanged, a new pass counts as a change."""
        if not (isinstance(workers, ProcessWorkers) and workers.copies_dataset and self.epoch_sync.user_owned):
            return False
        now = self.epoch_sync.observe()
        return now is UNKNOWN_EPOCH or now != self._copied_from

    def release(self, workers: Workers, *, failed: bool, finalizing: bool = False) -> None:
        """A pass ended: keep persistent workers unless it failed, else stop them.

        Threads are joined (~2 s at most) unless the pass failed (a hung thread is not waited
        for); processes are not joined from a finaliser, where a join can stall whatever the
        garbage collector interrupted (they are told to stop and terminated).
        """
        if workers is self.shared:
            if not failed:
                return
            self.shared = None
        workers.close(wait=not failed and not (finalizing and isinstance(workers, ProcessWorkers)))

    def replace(self, old: Workers) -> Workers:
        """New workers of the current settings in place of ``old`` (stopped: it has built all it took), for
        a primary pass whose tuned settings changed (``loaders.loader.relay``)."""
        if old is self.shared:
            self.shared = None
        old.close()
        return self.workers_for(primary=True)

    def retune(self, settings: LoaderSettings) -> None:
        """Serve the next workers with ``settings`` (tuned knobs); the running ones stay until replaced,
        persistent ones until the next primary pass."""
        self.settings = settings
        self._retuned = True

    def reset(self, settings: LoaderSettings) -> None:
        """Serve passes built from ``settings`` from now on (another seed): persistent workers stop."""
        self.close()
        self.settings = settings

    def close(self, *, wait: bool = True) -> None:
        """Stop the persistent workers (``wait``: join threads, shut processes down in order)."""
        shared, self.shared = self.shared, None
        if shared is not None:
            shared.close(wait=wait)
