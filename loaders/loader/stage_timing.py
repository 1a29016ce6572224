"""Worker-side timing of one batch: ``BatchTiming``, measured where the batch is built and carried back with it.

A thread worker, a worker process and the main thread all build a batch through
``loaders.loader.fetch.fetch_samples`` and ``loaders.loader.batch_outcome.collate_outcome``;
those time the dataset and the collate_fn with ``time.perf_counter`` (wall) and
``time.thread_time`` (CPU of the building thread), and the ``BatchOutcome`` carries the
``BatchTiming`` back (pickled with it from a process: a few floats). The parts a dataset reports
of its own ``__getitem__`` (``read``, ``decode``, ``transform``) come from ``loaders.stage_clock``,
collected per batch on the building thread.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BatchTiming"]


@dataclass(slots=True)
class BatchTiming:
    """Seconds one batch took where it was built (wall clock, except ``cpu_s``).

    dataset_s: the dataset's ``__getitem__`` / ``__getitems__`` for its samples; cpu_s: CPU time of the
    building thread in it (reads that wait: much less than dataset_s); read_s / decode_s / transform_s:
    what the dataset reported of dataset_s (``loaders.stage_clock``); collate_s: the collate_fn (into pinned
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
