"""What a DataLoader worker process sets up first: thread limits, its seeds, then the user's worker_init_fn.

A worker process that inherits the parent's thread settings runs one OpenMP/MKL/BLAS
pool per worker, each sized for the whole machine: 8 workers on 16 cores then fight
over 8 x 16 threads. ``limit_threads`` caps every pool we know of inside one process;
``seed_worker`` seeds the process's global RNGs from ``loaders.read.seeding.worker_seed``
(seed, epoch, rank, worker); ``WorkerInit`` applies both, in that order, then calls the
user's ``worker_init_fn``.

All of them change process-wide state, so they belong in worker *processes* (the
DataLoader's ``worker_init_fn``), never in the training process or in a worker thread.
"""

from __future__ import annotations

import importlib
import logging
import os
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from loaders.loader.worker_info import record_seed, show_user_dataset
from loaders.read.seeding import worker_seed
from loaders.validate import check_int

__all__ = ["THREAD_ENV_VARS", "WorkerInit", "limit_threads", "seed_worker", "seeded_for"]

logger = logging.getLogger(__name__)

# Read by OpenMP, MKL, OpenBLAS, Accelerate and numexpr when their pools start, so they
# bound libraries first loaded after this call and the processes this one starts.
THREAD_ENV_VARS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "VECLIB_MAXIMUM_FRAMEWORK_THREADS",
    "NUMEXPR_NUM_THREADS",
)


def limit_threads(n: int) -> None:
    """Cap the intra-op thread pools of this process at ``n`` threads.

    Sets ``torch.set_num_threads(n)``; ``torch.set_num_interop_threads(n)`` when torch
    still allows it (only before its first inter-op work); the environment variables in
    ``THREAD_ENV_VARS`` (for libraries loaded later and for child processes); the BLAS
    and OpenMP pools already loaded, through threadpoolctl when it is installed; and
    ``cv2.setNumThreads(n)`` when OpenCV is already imported (never imported here).
    """
    n = check_int("n", n, 1)
    torch.set_num_threads(n)
    try:
        torch.set_num_interop_threads(n)
    except RuntimeError:
        # Torch refuses once its inter-op pool has started; intra-op is what workers use.
        logger.debug("torch inter-op threads already started; left at %d", torch.get_num_interop_threads())
    for name in THREAD_ENV_VARS:
        os.environ[name] = str(n)
    _limit_threadpoolctl(n)
    cv2 = sys.modules.get("cv2")
    if cv2 is not None and hasattr(cv2, "setNumThreads"):
        cv2.setNumThreads(n)


def _limit_threadpoolctl(n: int) -> None:
    try:
        threadpoolctl = importlib.import_module("threadpoolctl")
    except ImportError:
        return
    # A process-wide setting: the returned context is deliberately never exited.
    threadpoolctl.threadpool_limits(limits=n)


# (seed, epoch, worker_id, rank) last applied by seed_worker in this process, so a
# persistent worker re-seeds at an epoch's first batch without resetting its streams.
_seeded: tuple[int, int, int, int] | None = None


def seed_worker(seed: int, epoch: int, worker_id: int, rank: int = 0) -> int:
    """Seed ``random``, numpy's global generator and torch's CPU generator for this worker process.

    Each from ``worker_seed(...)``, so forked workers stop sharing the parent's numpy
    state (the classic duplicated-augmentation bug), ranks and epochs draw new numbers.
    Returns that seed. Process-wide: call it in a worker process only.
    """
    global _seeded
    derived = worker_seed(seed, epoch, worker_id, rank)
    _seeded = (int(seed), int(epoch), int(worker_id), int(rank))
    random.seed(derived)
    # The legacy numpy seed takes at most 32-bit words: hand it all 64 bits as two.
    np.random.seed([derived & 0xFFFF_FFFF, derived >> 32])
    # 63 bits for torch: torch.initial_seed() then fits an int64 tensor, as torch's worker seeds do.
    torch.manual_seed(derived >> 1)
    record_seed(derived >> 1)  # get_worker_info().seed: the seed in use, as torch promises
    return derived


def seeded_for() -> tuple[int, int, int, int] | None:
    """The (seed, epoch, worker_id, rank) of this process's last ``seed_worker`` call, or None."""
    return _seeded


@dataclass(frozen=True)
class WorkerInit:
    """The ``worker_init_fn`` of worker processes: thread limits, then seeds, then the user's function.

    epoch: where the epoch of the pass that starts the workers is read (``value``: a shared
    int the process workers write before each pass; None reads epoch 0), so workers
    started for an epoch seed from (seed, epoch, rank, worker_id). Picklable when
    ``user_fn`` is.
    """

    seed: int
    threads_per_worker: int = 1
    user_fn: Callable[[int], None] | None = None
    epoch: Any = None
    rank: int = 0

    def __call__(self, worker_id: int) -> None:
        limit_threads(self.threads_per_worker)
        seed_worker(self.seed, 0 if self.epoch is None else int(self.epoch.value), worker_id, self.rank)
        show_user_dataset()
        if self.user_fn is not None:
            self.user_fn(worker_id)
