"""Worker-side timing of one batch: ``BatchTiming``, measured where the batch is built and carried back with it.

A thread worker, a worker process and the main thread all build a batch through
``loaders.loader.fetch.fetch_samples`` and ``loaders.loader.batch_outcome.collate_outcome``;
those time the dataset and the collate_fn with ``time.perf_counter`` (wall) and
``time.thread_time`` (CPU of the building thread), and the ``BatchOutcome`` carries the
``BatchTiming`` back (pickled with it from a process: a few floats). A dataset may report
parts of its own ``__getitem__`` with ``timed_stage("read" | "decode" | "transform")``: they
are summed per batch on the building thread (nothing is kept when no batch is being timed).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["DATASET_PARTS", "BatchTiming", "collect_parts", "timed_stage"]

DATASET_PARTS = ("read", "decode", "transform")  # what a dataset may report of its own __getitem__

_local = threading.local()


@dataclass(slots=True)
class BatchTiming:
    """Seconds one batch took where it was built (wall clock, except ``cpu_s``).

    dataset_s: the dataset's ``__getitem__`` / ``__getitems__`` for its samples; cpu_s: CPU time of the
    building thread in it (reads that wait: much less than dataset_s); read_s / decode_s / transform_s:
    what the dataset reported of dataset_s (``timed_stage``); collate_s: the collate_fn (into pinned
    memory in this process); pin_s: pinning after the fact (torch's pin thread for process workers);
    busy_s: the worker's whole time on the batch.
    """

    dataset_s: float = 0.0
    cpu_s: float = 0.0
    read_s: float = 0.0
    decode_s: float = 0.0
    transform_s: float = 0.0
    collate_s: float = 0.0
    pin_s: float = 0.0
    busy_s: float = 0.0


@contextlib.contextmanager
def collect_parts() -> Iterator[dict[str, float]]:
    """Collect what ``timed_stage`` reports on this thread while the block runs (a dict part -> seconds)."""
    previous = getattr(_local, "parts", None)
    parts: dict[str, float] = {}
    _local.parts = parts
    try:
        yield parts
    finally:
        _local.parts = previous


@contextlib.contextmanager
def timed_stage(name: str) -> Iterator[None]:
    """Count the block's wall time as ``name`` ("read", "decode" or "transform") of the batch being built.

    For a dataset's own ``__getitem__``: ``with timed_stage("read"): data = fetch(key)``. Outside a
    loader's batch it costs one attribute lookup.
    """
    parts = getattr(_local, "parts", None)
    if parts is None:
        yield
        return
    start = time.perf_counter()
    try:
        yield
    finally:
        parts[name] = parts.get(name, 0.0) + time.perf_counter() - start
