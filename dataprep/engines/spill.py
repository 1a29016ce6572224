"""A range's cleaned records kept on disk between the pass that finds duplicates and the pass that writes.

Tables and text whose duplicates are found across ranges are cleaned once, on every engine:
the first pass (``grouping.clean_once``: a writer process's job, or a Ray task) writes each
record's dedup digest (``grouping``) and the cleaned record itself here, ``spill-RRRRR.bin`` in
OUT's state folder; once every range's duplicates are known, the writing pass reads the
records back (``SpillFile``) instead of parsing and cleaning them again (which costs ~50-65%
of a run's CPU). The file becomes visible whole (``OutputStore.writer``) and is removed once
its range is written. Disk: about the cleaned text's size (JSON syntax and other columns of a
tokenized table dropped), for every range at once between the passes.

Format: frames of up to ``FRAME_RECORDS`` records, each ``uint32 length`` + a pickle of
``(positions, skips, results)``: the plan position and the index within its unit of each
record (int64 and int32 arrays, as bytes), and the results, a ``CleanRecord`` as the tuple
``(key, source, fields)`` (pickling the tuple and rebuilding the record costs ~1.5 us, a
third of pickling the record itself), anything else (a ``Reject``) as it is.
"""

from __future__ import annotations

import pickle
import struct
from collections import deque
from collections.abc import Generator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from types import TracebackType
from typing import BinaryIO

import numpy as np

from dataprep.engines.handlers import Result
from dataprep.formats.samples import CleanRecord
from dataprep.output.store import OutputStore

FRAME_RECORDS = 256
_LENGTH = struct.Struct("<I")
Tag = tuple[int, int]  # (plan position of the unit, index of the raw record within the unit)


@dataclass(frozen=True)
class SpillFile:
    """A range's spill to read the cleaned records from: ``name`` in ``store`` (OUT)."""

    store: OutputStore
    name: str


class SpillWriter:
    """Writes a range's cleaned records to ``name`` in ``store`` (a context manager; module docstring)."""

    def __init__(self, store: OutputStore, name: str) -> None:
        self.store, self.name = store, name
        self._writer: AbstractContextManager[BinaryIO] | None = None
        self._file: BinaryIO | None = None
        self._positions: list[int] = []
        self._skips: list[int] = []
        self._results: list[object] = []

    def __enter__(self) -> SpillWriter:
        self._writer = self.store.writer(self.name)
        self._file = self._writer.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        if kind is None:
            self._flush()
        if self._writer is not None:
            self._writer.__exit__(kind, error, tb)

    def add(self, tag: Tag, result: Result) -> None:
        self._positions.append(tag[0])
        self._skips.append(tag[1])
        self._results.append((result.key, result.source, result.fields) if isinstance(result, CleanRecord) else result)
        if len(self._results) >= FRAME_RECORDS:
            self._flush()

    def _flush(self) -> None:
        if not self._results or self._file is None:
            return
        frame = pickle.dumps((np.asarray(self._positions, dtype=np.int64).tobytes(),
                              np.asarray(self._skips, dtype=np.int32).tobytes(), self._results),
                             protocol=pickle.HIGHEST_PROTOCOL)
        self._file.write(_LENGTH.pack(len(frame)) + frame)
        self._positions, self._skips, self._results = [], [], []


def read_spill(store: OutputStore, name: str, start: Tag, tags: deque[Tag]) -> Generator[Result, None, None]:
    """The records of spill ``name`` from ``start`` (a tag) on, in order; each one's tag appended to ``tags``
    as it is yielded (as ``WriteLoop._items`` does for the records it reads)."""
    with store.open_read(name) as f:
        while head := f.read(_LENGTH.size):
            positions_b, skips_b, results = pickle.loads(f.read(_LENGTH.unpack(head)[0]))
            positions = np.frombuffer(positions_b, dtype=np.int64).tolist()
            skips = np.frombuffer(skips_b, dtype=np.int32).tolist()
            if (positions[-1], skips[-1]) < start:
                continue
            for position, skip, result in zip(positions, skips, results):
                if (position, skip) < start:
                    continue
                tags.append((position, skip))
                yield CleanRecord(*result) if isinstance(result, tuple) else result
