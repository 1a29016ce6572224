"""Thread limits and random seeding for DataLoader worker processes.

A worker process that inherits the parent's thread settings runs one OpenMP/MKL/BLAS
pool per worker, each sized for the whole machine: 8 workers on 16 cores then fight
over 8 x 16 threads. ``limit_threads`` caps every pool we know of inside one process;
``seed_worker`` gives each worker, in each epoch, its own random streams.

Both change process-wide state, so they belong in worker *processes* (the DataLoader's
``worker_init_fn``), never in the training process or in a worker thread.
"""

from __future__ import annotations

import importlib
import logging
import os
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from loaders.errors import ConfigError

__all__ = ["THREAD_ENV_VARS", "WorkerInit", "limit_threads", "seed_worker", "seeded_for", "worker_seed"]

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

# Tags the worker streams so they never coincide with other streams derived from the
# same user seed (loaders.order uses its own tags for epoch orders and sample seeds).
_WORKER_DOMAIN = 0x5346_574B_5345_4544  # "SFWKSEED"

# (seed, epoch, worker_id) last applied by seed_worker in this process, so a persistent
# worker re-seeds at an epoch's first batch without resetting streams it already seeded.
_seeded: tuple[int, int, int] | None = None


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


def worker_seed(seed: int, epoch: int, worker_id: int) -> int:
    """The 64-bit seed of worker ``worker_id`` in ``epoch``: an int in [0, 2^64).

    A pure function of its arguments, different for every (epoch, worker_id) pair of a
    seed (up to hash collisions, ~2^-64), so workers never share random numbers.
    """
    seed = _check_int("seed", seed, 0)
    epoch = _check_int("epoch", epoch, 0)
    worker_id = _check_int("worker_id", worker_id, 0)
    words = np.random.SeedSequence([_WORKER_DOMAIN, seed, epoch, worker_id]).generate_state(2, np.uint64)
    return int(words[0])


def seed_worker(seed: int, epoch: int, worker_id: int) -> int:
    """Seed ``random``, numpy's global generator and torch's CPU generator for this worker.

    Each from ``worker_seed(seed, epoch, worker_id)``, so forked workers stop sharing the
    parent's numpy state (the classic duplicated-augmentation bug) and draw new numbers
    each epoch. Returns that seed. Process-wide: call it in a worker process only.
    """
    global _seeded
    derived = worker_seed(seed, epoch, worker_id)
    _seeded = (int(seed), int(epoch), int(worker_id))
    random.seed(derived)
    # The legacy numpy seed takes at most 32-bit words: hand it all 64 bits as two.
    np.random.seed([derived & 0xFFFF_FFFF, derived >> 32])
    torch.manual_seed(derived)
    return derived


def seeded_for() -> tuple[int, int, int] | None:
    """The (seed, epoch, worker_id) of this process's last ``seed_worker`` call, or None."""
    return _seeded


@dataclass
class WorkerInit:
    """The ``worker_init_fn`` of worker processes: thread limits, then seeds, then the user's function.

    ``epoch`` is set by the DataLoader before it starts workers, so workers started for
    an epoch seed from (seed, epoch, worker_id). Picklable when ``user_fn`` is.
    """

    seed: int
    threads_per_worker: int = 1
    user_fn: Callable[[int], None] | None = None
    epoch: int = 0

    def __call__(self, worker_id: int) -> None:
        limit_threads(self.threads_per_worker)
        seed_worker(self.seed, self.epoch, worker_id)
        if self.user_fn is not None:
            self.user_fn(worker_id)
