"""Thread limits and the start-up of DataLoader worker processes.

A worker process that inherits the parent's thread settings runs one OpenMP/MKL/BLAS
pool per worker, each sized for the whole machine: 8 workers on 16 cores then fight
over 8 x 16 threads. ``limit_threads`` caps every pool we know of inside one process;
``WorkerInit`` applies it, then ``loaders.read.seeding.seed_worker`` (each worker's own
random streams), then the user's ``worker_init_fn``.

Both change process-wide state, so they belong in worker *processes* (the DataLoader's
``worker_init_fn``), never in the training process or in a worker thread.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from loaders.errors import ConfigError
from loaders.read.seeding import seed_worker
from loaders.loader.worker_info import show_user_dataset

__all__ = ["THREAD_ENV_VARS", "WorkerInit", "limit_threads"]

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


def _check_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        kind = "a positive int" if minimum == 1 else "a non-negative int"
        raise ConfigError(f"{name!r} must be {kind} (got {value!r} that is a {type(value).__name__})")
    return int(value)


def limit_threads(n: int) -> None:
    """Cap the intra-op thread pools of this process at ``n`` threads.

    Sets ``torch.set_num_threads(n)``; ``torch.set_num_interop_threads(n)`` when torch
    still allows it (only before its first inter-op work); the environment variables in
    ``THREAD_ENV_VARS`` (for libraries loaded later and for child processes); the BLAS
    and OpenMP pools already loaded, through threadpoolctl when it is installed; and
    ``cv2.setNumThreads(n)`` when OpenCV is already imported (never imported here).
    """
    n = _check_int("n", n, 1)
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


@dataclass
class WorkerInit:
    """The ``worker_init_fn`` of worker processes: thread limits, then seeds, then the user's function.

    ``epoch`` is set by the DataLoader before it starts workers, so workers started for
    an epoch seed from (seed, epoch, rank, worker_id). Picklable when ``user_fn`` is.
    """

    seed: int
    threads_per_worker: int = 1
    user_fn: Callable[[int], None] | None = None
    epoch: int = 0
    rank: int = 0

    def __call__(self, worker_id: int) -> None:
        limit_threads(self.threads_per_worker)
        seed_worker(self.seed, self.epoch, worker_id, self.rank)
        show_user_dataset()
        if self.user_fn is not None:
            self.user_fn(worker_id)
