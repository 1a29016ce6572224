"""Timing a per-image function over encoded images: CPU time of one thread, wall time of N threads.

A ``SampleFn`` takes (encoded image bytes, numpy Generator) and does one image's work
(decode, crop, resize); its result is ignored. Used by ``tools.bench.decode_bench`` and
``tools.profile.cpu``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

SampleFn = Callable[[bytes, np.random.Generator], Any]


def time_cpu(fn: SampleFn, images: Sequence[bytes]) -> float:
    """CPU seconds of this thread to run ``fn`` once over ``images`` (at least 1e-9)."""
    rng = np.random.default_rng(0)  # the same crops for every backend and repeat
    start = time.thread_time()
    for data in images:
        fn(data, rng)
    return max(time.thread_time() - start, 1e-9)


def time_threads(fn: SampleFn, images: Sequence[bytes], threads: int) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) for ``threads`` threads to run ``fn`` over ``images``,
    each thread over every ``threads``-th image."""
    def work(part: Sequence[bytes], seed: int) -> None:
        rng = np.random.default_rng(seed)  # one per thread: Generators are not thread-safe
        for data in part:
            fn(data, rng)

    with ThreadPoolExecutor(threads) as pool:
        wall, cpu = time.perf_counter(), time.process_time()
        list(pool.map(work, [images[k::threads] for k in range(threads)], range(threads)))
        return max(time.perf_counter() - wall, 1e-9), time.process_time() - cpu
