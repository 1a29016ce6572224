"""Sorting more fixed-size records than memory should hold: sorted runs on disk, merged a block at a time.

Records are numpy structured arrays whose fields are all integers and all sort keys, in
field order, the last one unique (a unit index): so no two records compare equal and a
merge never has to hold a group of equal keys. ``ExternalSort`` sorts what is added in runs
of ``SortLimits.run_rows`` records, writes each run to its folder, and hands the whole back
in order, a chunk at a time (merging ``fanout`` runs at once; more runs are merged first
into fewer). Memory: one run being sorted, or ``fanout`` blocks of ``block_rows`` records
while merging, whatever the number of records.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from dataprep.errors import UsageError, require_int

__all__ = ["ExternalSort", "SortLimits", "sort_records"]


@dataclass(frozen=True)
class SortLimits:
    """Memory of an ``ExternalSort``: records sorted in memory at once, records read ahead per run, runs merged at once.

    Defaults: a run of 2^18 records of 16-40 bytes is 4-10 MiB (sorting takes about three
    times that); a merge holds 64 blocks of 2^13 records (8-20 MiB).
    """

    run_rows: int = 1 << 18
    block_rows: int = 1 << 13
    fanout: int = 64

    def __post_init__(self) -> None:
        for name, low in (("run_rows", 2), ("block_rows", 1), ("fanout", 2)):
            require_int(f"SortLimits.{name}", getattr(self, name), minimum=low, expected=f"an int >= {low}",
                        error=UsageError)


def sort_records(records: np.ndarray) -> np.ndarray:
    """``records`` sorted by all their fields, in field order."""
    names = records.dtype.names or ()
    return records[np.lexsort([records[name] for name in reversed(names)])]


class ExternalSort:
    """Records of one dtype sorted in bounded memory (module doc): ``add`` them, then read ``sorted()`` once."""

    def __init__(self, folder: Path, dtype: np.dtype, limits: SortLimits) -> None:
        self.folder, self.dtype, self.limits = folder, dtype, limits
        folder.mkdir(parents=True, exist_ok=True)
        self._buffer: list[np.ndarray] = []
        self._buffered = 0
        self._runs: list[Path] = []
        self._next_run = 0
        self.count = 0

    def add(self, records: np.ndarray) -> None:
        if not len(records):
            return
        self._buffer.append(records)
        self._buffered += len(records)
        self.count += len(records)
        if self._buffered >= self.limits.run_rows:
            self._spill()

    def _new_run(self) -> Path:
        path = self.folder / f"run-{self._next_run:06d}.bin"
        self._next_run += 1
        return path

    def _spill(self) -> None:
        path = self._new_run()
        with open(path, "wb") as f:
            f.write(sort_records(np.concatenate(self._buffer)).data)
        self._runs.append(path)
        self._buffer, self._buffered = [], 0

    def sorted(self) -> Iterator[np.ndarray]:
        """Every record added, in order, in chunks; the runs are removed once read."""
        try:
            if not self._runs:
                if self._buffer:
                    yield sort_records(np.concatenate(self._buffer))
                self._buffer = []
                return
            if self._buffer:
                self._spill()
            fanout = self.limits.fanout
            while len(self._runs) > fanout:
                path = self._new_run()
                with open(path, "wb") as f:
                    for chunk in _merge(self._runs[:fanout], self.dtype, self.limits.block_rows):
                        f.write(chunk.data)
                for done in self._runs[:fanout]:
                    done.unlink()
                self._runs = [*self._runs[fanout:], path]
            yield from _merge(self._runs, self.dtype, self.limits.block_rows)
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)


class _Cursor:
    """One run read forward a block at a time; ``pending`` holds the records read and not yet handed on."""

    def __init__(self, path: Path, dtype: np.dtype, rows: int) -> None:
        self.dtype, self.rows = dtype, rows
        self.file: BinaryIO = open(path, "rb")
        self.pending = np.empty(0, dtype=dtype)
        self.done = False  # the whole run has been read

    def fill(self) -> None:
        if len(self.pending) or self.done:
            return
        self.pending = np.fromfile(self.file, dtype=self.dtype, count=self.rows)
        if not len(self.pending):
            self.done = True

    def take_through(self, bound: tuple[int, ...] | None) -> np.ndarray:
        """The pending records <= ``bound`` (all of them when None)."""
        cut = len(self.pending) if bound is None else _count_through(self.pending, bound)
        taken, self.pending = self.pending[:cut], self.pending[cut:]
        return taken


def _count_through(records: np.ndarray, bound: tuple[int, ...]) -> int:
    """How many of the sorted ``records`` are <= ``bound`` (compared field by field)."""
    lo, hi = 0, len(records)
    for name, value in zip(records.dtype.names or (), bound):
        column = records[name][lo:hi]
        first = lo + int(np.searchsorted(column, value, "left"))
        last = lo + int(np.searchsorted(column, value, "right"))
        if first == last:
            return first
        lo, hi = first, last
    return hi


def _merge(paths: Iterable[Path], dtype: np.dtype, block_rows: int) -> Iterator[np.ndarray]:
    """The records of sorted runs, in order, a chunk at a time.

    Each round hands on every loaded record up to the smallest last loaded record of the
    runs not yet read to their end: every record below it is loaded, and the run that
    defines it is emptied, so each round makes progress.
    """
    cursors = [_Cursor(path, dtype, block_rows) for path in paths]
    try:
        while True:
            for cursor in cursors:
                cursor.fill()
            live = [cursor for cursor in cursors if len(cursor.pending)]
            if not live:
                return
            reading = [cursor for cursor in live if not cursor.done]
            bound = min((tuple(cursor.pending[-1].item()) for cursor in reading), default=None)
            yield sort_records(np.concatenate([cursor.take_through(bound) for cursor in live]))
    finally:
        for cursor in cursors:
            cursor.file.close()
